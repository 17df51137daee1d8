"""The two-task-type probe (faulty-memories Fig. 8(c), App. F.1): a regime restricted to one task type
(``types``), continuations from chosen snapshots (``initial_step``), evaluation on chosen types
(``evaluation.task_types``) and the per-type table. ErrandWorld (the kit's test world) and a scripted model:
nothing here is a model result."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from errand_pool import errand_pool_run

from antipersist_lib.analysis.plots import plt, text_overlaps
from antipersist_lib.consolidation import analysis, study, study_folder
from antipersist_lib.consolidation import prompts as CP
from antipersist_lib.consolidation.bank import load_bank
from antipersist_lib.consolidation.figures import plot_probe_interference
from antipersist_lib.consolidation.profile import load_study_profile
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy


def responder(req):
    system = req["messages"][0]["content"]
    if system == CP.DC_SYSTEM:  # the cheatsheet lists the batch's record ids, so a test can read what was fed
        tasks = re.findall(r"Task: (.*)", req["messages"][1]["content"])
        return "<cheatsheet>" + " | ".join(tasks) + "</cheatsheet>"
    return errand_policy(req)


def profile_data(pool_dir, **over):
    data = {
        "name": "probe",
        "benchmark": "errandworld",
        "backbone": "scripted-loopback",
        "pool": {"runs": [str(pool_dir)]},
        "builders": ["dc"],
        "builder_options": {"dc": {"max_tokens": 64}},
        "regimes": {
            "focal": {
                "regime": "stream",
                "types": ["bring_item"],
                "batch_size": 1,
                "stages": {"count": 3, "rule": "single_type", "per_type_limit": 4},
                "steps": [1, 3],
            },
            "probe_s1": {
                "regime": "stream",
                "types": ["bring_fruit"],
                "initial": "focal",
                "initial_step": 1,
                "batch_size": 1,
                "stages": {"count": 1, "rule": "single_type"},
                "steps": "last",
            },
        },
        "evaluation": {"seeds": [1], "task_types": ["bring_item", "bring_fruit"], "heldout_limit": 2, "max_steps": 4},
        "response_cache": False,
    }
    data.update(over)
    return data


@pytest.fixture(scope="module")
def probe_study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe")
    with LoopbackServer(responder=responder) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", max_retries=0)
        pool_dir = errand_pool_run(tmp / "poolrun", ep, train=8)
        path = tmp / "probe.yaml"
        path.write_text(yaml.safe_dump(profile_data(pool_dir)))
        result = study.run_study(path, tmp / "out", endpoint=ep, embed_endpoint=ep)
    return result, path, pool_dir


def test_regimes_build_on_their_types_and_continue_from_a_snapshot(probe_study):
    result, path, _ = probe_study
    out = result.out
    pool = {
        json.loads(x)["rid"]: json.loads(x)["task"]["task_type"]
        for x in (out / "pool.jsonl").read_text().split("\n")
        if x
    }
    focal = load_bank(out / "memories" / "dc" / "focal" / "snapshots.jsonl")
    fed = [rid for e in focal.history for rid in e["batch"]]
    assert len(fed) == 3 and {pool[r] for r in fed} == {"bring_item"}  # focal sees only its type
    probe = load_bank(out / "memories" / "dc" / "probe_s1" / "bank.json")
    first = probe.history[:1]
    step1 = load_bank(out / "memories" / "dc" / "focal" / "snapshots.jsonl", 1)
    assert first == step1.history  # continued from focal's step 1, not its final bank
    assert probe.step == 2 and {pool[r] for r in probe.history[-1]["batch"]} == {"bring_fruit"}
    df = result.frame
    got = {(r.condition, int(r.step)) for r in df.itertuples()}
    assert got == {("no_memory", 0), ("focal", 1), ("focal", 3), ("probe_s1", 2)}
    for r in df.itertuples():  # every run evaluated only the two listed types
        manifest = json.loads((out / r.run_dir / "manifest.json").read_text())
        assert manifest["task_types"] == ["bring_item", "bring_fruit"]


def test_success_by_type_and_the_probe_table(probe_study):
    result, path, _ = probe_study
    by_type = analysis.success_by_type(result.frame, result.out)
    assert set(by_type["task_type"]) == {"bring_item", "bring_fruit"} and by_type["n"].eq(1).all()
    assert len(by_type) == 2 * len(result.frame)
    table = analysis.probe_interference(by_type, load_study_profile(path, context_check=False))  # a scripted endpoint
    assert set(table["stage"]) == {1}
    assert set(table["memory"]) == {"focal (focal only)", "+1 consolidation (probe_s1)"}
    assert table["no_memory_pct"].notna().all() and table["success_pct"].between(0, 100).all()
    fig = plot_probe_interference(table, title="Fig. 8(c)", note="scripted", statement="paper")
    assert len(fig.axes[0].get_lines()) == 4 + 2  # 2 types x 2 memories, plus one no-memory line per type
    assert not text_overlaps(fig)
    plt.close(fig)


def test_probe_profiles_refuse_bad_types_and_steps(tmp_path, probe_study):
    _, _, pool_dir = probe_study

    def load(**over):
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump(profile_data(pool_dir, **over)))
        return load_study_profile(path)

    with pytest.raises(study.StudyProfileError, match=r"evaluation.task_types.*bring_cake"):
        load(evaluation={"seeds": [1], "task_types": ["bring_cake"]})
    regimes = profile_data(pool_dir)["regimes"]
    with pytest.raises(study.StudyProfileError, match="initial_step' needs 'initial'"):
        load(regimes={**regimes, "probe_s1": {**regimes["probe_s1"], "initial": None}})
    bad = {**regimes, "focal": {**regimes["focal"], "types": ["bring_cake"]}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(profile_data(pool_dir, regimes=bad)))
    with LoopbackServer(responder=responder) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", max_retries=0)
        with pytest.raises(ValueError, match=r"regimes.focal.types: the pool has no records of \['bring_cake'\]"):
            study.run_study(path, tmp_path / "out", endpoint=ep, embed_endpoint=ep)


@pytest.mark.parametrize(
    "folder, profile_file",
    [("erosion_smoke", "erosion_smoke.yaml"), ("probe_smoke", "probe_two_types_smoke.yaml")],
)
def test_the_recorded_fixtures_are_their_smoke_profiles_and_load(folder, profile_file):
    """The fixtures notebook 11 loads were made from the profiles as committed, by the model each names."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = root / "tests" / "fixtures" / "consolidation" / folder
    manifest = study_folder.load_manifest(out)
    data = yaml.safe_load((root / "params" / "consolidation" / profile_file).read_text())
    assert manifest["status"] == "complete" and manifest["profile"] == data
    assert manifest["embedded_backbone"]["model"]["name"] == data["backbone_options"]["model"]
    df = study_folder.load_study(out)
    profile = load_study_profile(root / "params" / "consolidation" / profile_file)
    built = {r.name for r in profile.regimes}
    assert set(df["condition"]) == built | {"no_memory"}
    by_type = analysis.success_by_type(df, out)
    types = set(profile.task_types) if profile.task_types else set(by_type["task_type"])
    assert set(by_type["task_type"]) == types and len(by_type) >= len(df)


def test_pool_composition_counts_each_studys_records_per_type(probe_study):
    result, _, _ = probe_study
    pool = [json.loads(x) for x in (result.out / "pool.jsonl").read_text().splitlines() if x]
    table = analysis.pool_composition([result.out])
    assert set(table["study"]) == {result.out.name} and set(table["benchmark"]) == {"errandworld"}
    counts = dict(zip(table["task_type"], table["records"]))
    assert counts == {t: sum(1 for r in pool if r["task"]["task_type"] == t) for t in counts}
    assert sum(counts.values()) == len(pool) and (table["successes"] <= table["records"]).all()
    assert analysis.pool_composition([]).empty and analysis.pool_composition(None).empty
