"""Named held-out sets (``envs.partitions.HELDOUT_SETS``): ALFWorld's ``valid_seen_balanced_48``, the
faulty-memories paper's in-distribution evaluation split (App. F.1 ``eval_id_balanced_48``), which its ALFWorld
profiles evaluate on while the main paper's runs keep ``valid_unseen``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from antipersist_lib.consolidation.profile import load_study_profile
from antipersist_lib.envs.alfworld import CATEGORY_ORDER, SEEN_HELDOUT_SET, build_alfworld_seen_heldout, list_games
from antipersist_lib.envs.partitions import PARTITION_SEED, heldout_set_path, load_partition
from antipersist_lib.runner.protocol import Runner
from antipersist_lib.runner.spec import RunSpec, run_episode_counts
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.studies import StudyProfileError

ROOT = Path(__file__).resolve().parents[1]
CONSOLIDATION = ROOT / "params" / "consolidation"
#: the faulty-memories paper's ALFWorld profiles (App. F.1's evaluation split)
PAPER_ALFWORLD = ("paper.yaml", "erosion_paper.yaml", "probe_two_types_paper.yaml", "fig4_paper.yaml")


def test_the_committed_set_is_48_valid_seen_games_8_per_type():
    part = load_partition("alfworld", heldout_set=SEEN_HELDOUT_SET)
    games = [t.env_args["game"] for t in part.heldout]
    assert len(games) == len(set(games)) == 48
    assert all(g.startswith("valid_seen/") for g in games)
    assert Counter(t.task_type for t in part.heldout) == {c: 8 for c in CATEGORY_ORDER}
    assert [t.task_id for t in part.heldout] == list(range(48)) and {t.split for t in part.heldout} == {"heldout"}
    # the training split is the partition's own; only the evaluated games change, and so does the hash
    main = load_partition("alfworld")
    assert part.train == main.train and part.hash != main.hash
    assert part.drawn_with["heldout_set"]["name"] == SEEN_HELDOUT_SET
    assert part.drawn_with["heldout_set"]["seed"] == PARTITION_SEED


def test_rebuilding_the_set_with_its_seed_gives_the_committed_file(alfworld_data):
    committed = json.loads(heldout_set_path("alfworld", SEEN_HELDOUT_SET).read_text(encoding="utf-8"))
    rebuilt = build_alfworld_seen_heldout(alfworld_data, PARTITION_SEED).to_dict()
    assert rebuilt["splits"] == committed["splits"]
    for key in ("seed", "source_splits", "pool_sizes", "per_category", "method"):
        assert rebuilt["drawn_with"][key] == committed["drawn_with"][key]
    seen = set(list_games(alfworld_data, "valid_seen"))
    assert {t["env_args"]["game"] for t in committed["splits"]["heldout"]} <= seen
    other = build_alfworld_seen_heldout(alfworld_data, PARTITION_SEED + 1, with_instructions=False)
    assert [t.env_args for t in other.heldout] != [t["env_args"] for t in committed["splits"]["heldout"]]


def _runner(tmp_path, **kw) -> Runner:
    ep = Endpoint(base_url="http://127.0.0.1:9/v1", model="never-called", api_key_env="ANTIPERSIST_TEST_KEY")
    spec = RunSpec(method="react", benchmark="alfworld", backbone="x", embedding="bow", out_root=str(tmp_path), **kw)
    return Runner(spec, endpoint=ep, embed_endpoint=ep)


def test_a_run_evaluates_on_the_named_set_and_its_manifest_says_so(tmp_path):
    seen = _runner(tmp_path, heldout_set=SEEN_HELDOUT_SET, heldout_limit=48)
    assert len(seen.heldout) == 48 and all(t.env_args["game"].startswith("valid_seen/") for t in seen.heldout)
    manifest = seen._manifest(None, None)
    assert manifest["heldout_set"] == SEEN_HELDOUT_SET
    assert manifest["partition_hash"] == load_partition("alfworld", heldout_set=SEEN_HELDOUT_SET).hash
    # the main paper's default: the partition's own held-out split, valid_unseen; the manifest names no set
    default = _runner(tmp_path)
    assert RunSpec(method="react", benchmark="alfworld", backbone="x").heldout_set is None
    assert len(default.heldout) == 134 and all(t.env_args["game"].startswith("valid_unseen/") for t in default.heldout)
    assert "heldout_set" not in default._manifest(None, None)
    assert (
        run_episode_counts(RunSpec(method="react", benchmark="alfworld", backbone="x", heldout_set=SEEN_HELDOUT_SET))[1]
        == 48
    )
    with pytest.raises(ValueError, match="no held-out set 'valid_seen_all'.*valid_seen_balanced_48"):
        RunSpec(method="react", benchmark="alfworld", backbone="x", heldout_set="valid_seen_all")
    with pytest.raises(ValueError, match="no held-out set"):
        RunSpec(method="react", benchmark="scienceworld", backbone="x", heldout_set=SEEN_HELDOUT_SET)


@pytest.mark.parametrize("name", PAPER_ALFWORLD)
def test_the_faulty_memories_alfworld_profiles_evaluate_on_the_in_distribution_set(name):
    profile = load_study_profile(CONSOLIDATION / name)
    assert profile.benchmark == "alfworld" and profile.heldout_set == SEEN_HELDOUT_SET
    spec = RunSpec(
        method="react",
        benchmark="alfworld",
        backbone="x",
        heldout_limit=profile.heldout_limit,
        task_types=profile.task_types,
        heldout_set=profile.heldout_set,
    )
    assert run_episode_counts(spec)[1] == 8 * len(profile.task_types or CATEGORY_ORDER)


def test_other_profiles_keep_the_partitions_own_heldout_split(tmp_path):
    for path in sorted(CONSOLIDATION.glob("*.yaml")):
        if path.name not in PAPER_ALFWORLD:
            assert load_study_profile(path).heldout_set is None, path.name
    for path in sorted((ROOT / "params").rglob("*.yaml")):  # no main-paper grid or job names a held-out set
        if "consolidation" not in path.parts:
            assert "heldout_set" not in path.read_text(encoding="utf-8"), path
    data = yaml.safe_load((CONSOLIDATION / "smoke.yaml").read_text(encoding="utf-8"))
    data["evaluation"]["heldout_set"] = "valid_unseen"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(StudyProfileError, match="'evaluation.heldout_set'.*valid_seen_balanced_48"):
        load_study_profile(bad)


def test_the_unseen_balanced_set_is_50_of_the_partitions_own_heldout_games_balanced_over_the_types():
    from antipersist_lib.envs.alfworld import UNSEEN_HELDOUT_SET

    part = load_partition("alfworld", heldout_set=UNSEEN_HELDOUT_SET)
    main = load_partition("alfworld")
    assert len(part.heldout) == len({t.env_args["game"] for t in part.heldout}) == 50
    assert set(part.heldout) <= set(main.heldout)  # the same tasks, ids included: a subset of the full 134
    counts = Counter(t.task_type for t in part.heldout)
    assert set(counts) == set(CATEGORY_ORDER) and sorted(counts.values()) == [8, 8, 8, 8, 9, 9]
    assert part.train == main.train and part.hash != main.hash
    assert part.drawn_with["heldout_set"]["name"] == UNSEEN_HELDOUT_SET
    assert "not the paper's" in part.notes


def test_rebuilding_the_unseen_set_with_its_seed_gives_the_committed_file():
    from antipersist_lib.envs.alfworld import UNSEEN_HELDOUT_SET, build_alfworld_unseen_heldout

    committed = json.loads(heldout_set_path("alfworld", UNSEEN_HELDOUT_SET).read_text(encoding="utf-8"))
    rebuilt = build_alfworld_unseen_heldout(seed=PARTITION_SEED).to_dict()
    assert rebuilt["splits"] == committed["splits"] and rebuilt["drawn_with"] == committed["drawn_with"]
    other = build_alfworld_unseen_heldout(seed=PARTITION_SEED + 1)
    assert [t.env_args for t in other.heldout] != [t["env_args"] for t in committed["splits"]["heldout"]]
    assert (
        sorted(Counter(t.task_type for t in build_alfworld_unseen_heldout(size=14).heldout).values())
        == [2] * 4 + [3] * 2
    )


def test_main_job_and_grid_profiles_pass_a_heldout_set_through(tmp_path):
    from antipersist_lib.envs.alfworld import UNSEEN_HELDOUT_SET
    from antipersist_lib.runner.grid import load_grid
    from antipersist_lib.runner.main_profile import load_profile, profile_specs
    from antipersist_lib.runner.seed_pools import run_tasks

    base = {"methods": ["react"], "benchmarks": ["alfworld"], "seeds": [1]}
    over = {"settings_by_benchmark": {"alfworld": {"heldout_set": UNSEEN_HELDOUT_SET}}}
    (spec,) = profile_specs(
        load_profile(_write(tmp_path, {**base, **over})),
        backbone_label="x",
        runs_root=tmp_path,
        cache_dir=tmp_path,
        judge=None,
    )
    assert spec.heldout_set == UNSEEN_HELDOUT_SET and len(run_tasks(spec)[1]) == 50
    assert run_episode_counts(spec)[1] == 50
    (plain,) = profile_specs(
        load_profile(_write(tmp_path, base)), backbone_label="x", runs_root=tmp_path, cache_dir=tmp_path, judge=None
    )
    assert plain.heldout_set is None and len(run_tasks(plain)[1]) == 134
    ep = {"name": "m", "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "ANTIPERSIST_TEST_KEY"}
    grid = {**base, "name": "g", "backbones": [ep], "embedding": {**ep, "name": "e"}, "out_root": str(tmp_path)}
    runs = load_grid(_write(tmp_path, {**grid, "heldout_set": {"alfworld": UNSEEN_HELDOUT_SET}})).runs
    assert [r.spec.heldout_set for r in runs] == [UNSEEN_HELDOUT_SET]
    assert [r.spec.heldout_set for r in load_grid(_write(tmp_path, grid)).runs] == [None]
    with pytest.raises(
        ValueError, match="heldout_set must be a mapping of the grid.s benchmarks to held-out set names"
    ):
        load_grid(_write(tmp_path, {**grid, "heldout_set": UNSEEN_HELDOUT_SET}))


def _write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "profile.yaml"
    p.write_text(yaml.safe_dump(data), encoding="utf-8")
    return p
