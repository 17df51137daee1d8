"""Held-out mode selection (``heldout_selection``) and runs recorded before it existed.

Runs recorded before the option made their held-out decisions as in training (round-robin, warmup,
epsilon). Their manifests do not name ``heldout_selection``; everything that rebuilds such a run
(resume, the decision audit, ``select --run``, the walkthrough) must keep that behaviour, while a
new run exploits the frozen log by default."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from antipersist_lib.analysis import walkthrough
from antipersist_lib.analysis.audit import audit_decision
from antipersist_lib.cli import main
from antipersist_lib.envs.errand_world import ErrandWorld
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.methods import params_as_recorded
from antipersist_lib.runner import replay
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests/fixtures/runs/walkthrough/alfworld/embedded-gemma-3-270m/anti_persistence/seed42"
CACHE = ROOT / "tests/fixtures/cache/walkthrough"
#: after iteration 1 every decision reaching the epsilon step explores: "as_training" held-out
#: decisions are all epsilon ones, "exploit" ones never are
PARAMS = {"round_robin_iterations": 1, "warmup_per_mode": 0, "epsilon": 1.0}


def _spec(tmp_path: Path, name: str, iterations: int, params: dict) -> RunSpec:
    return RunSpec(
        method="anti_persistence",
        benchmark="errandworld",
        backbone="scripted-loopback",
        embedding="loopback-bag-of-words",
        seed=5,
        iterations=iterations,
        train_per_iteration=6,
        max_steps=4,
        heldout_concurrency=2,
        method_params=params,
        name=name,
        out_root=str(tmp_path / "runs"),
        cache_dir=str(tmp_path / "cache"),
        progress=False,
    )


def _run(spec: RunSpec) -> Path:
    with LoopbackServer(responder=errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        run_cell(spec, endpoint=ep, embed_endpoint=ep)
    return spec.run_dir()


def _heldout(run: Path) -> list[dict]:
    return [x.value for x in read_jsonl(run / "episodes_heldout.jsonl")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """ "old": one iteration made as_training, its manifest stripped of the option (a run recorded
    before it existed), then resumed for a second iteration by this kit; "new": two iterations."""
    tmp = tmp_path_factory.mktemp("heldout_selection")
    old = _run(_spec(tmp, "old", 1, {**PARAMS, "heldout_selection": "as_training"}))
    man = json.loads((old / "manifest.json").read_text())
    for block in ("method_params", "method_config"):
        del man[block]["heldout_selection"]
    (old / "manifest.json").write_text(json.dumps(man))
    assert _run(_spec(tmp, "old", 2, dict(PARAMS))) == old  # resumed, not refused
    new = _run(_spec(tmp, "new", 2, dict(PARAMS)))
    return {"old": old, "new": new, "cache": tmp / "cache"}


def test_an_old_run_resumes_with_its_old_heldout_behaviour(runs):
    old = _heldout(runs["old"])
    assert {r["meta"]["branch"] for r in old if r["iteration"] == 1} == {"round_robin"}
    assert {r["meta"]["branch"] for r in old if r["iteration"] == 2} == {"epsilon"}  # made after the resume
    man = json.loads((runs["old"] / "manifest.json").read_text())
    assert "heldout_selection" not in man["method_config"] and len(man["resumed"]) == 1
    new = _heldout(runs["new"])
    assert {r["meta"]["branch"] for r in new} <= {"local_ucb", "global_best"}
    assert json.loads((runs["new"] / "manifest.json").read_text())["method_config"]["heldout_selection"] == "exploit"
    # training decisions do not depend on the option: both runs made the same ones
    old_train, new_train = (
        [
            (x.value["iteration"], x.value["position"], x.value["meta"]["mode"], x.value["meta"]["branch"])
            for x in read_jsonl(runs[name] / "episodes_train.jsonl")
        ]
        for name in ("old", "new")
    )
    assert old_train == new_train and len(old_train) == 12


def test_every_heldout_decision_of_both_runs_audits(runs):
    for name in ("old", "new"):
        for r in _heldout(runs[name]):
            audit = audit_decision(
                runs[name], phase="heldout", iteration=r["iteration"], position=r["position"], cache_dir=runs["cache"]
            )
            assert audit.reproduces, (name, r["iteration"], r["position"], audit.differences)


def test_select_log_takes_the_seed_and_setting_of_the_run(runs, tmp_path, capsys):
    rec = next(r for r in _heldout(runs["old"]) if r["iteration"] == 2)
    emb = next(iter(read_jsonl(runs["old"] / "state" / "outcome_log.jsonl"))).value["embedding"]
    (tmp_path / "emb.json").write_text(json.dumps(emb))
    args = [
        "select",
        "--log",
        str(runs["old"] / "state" / "outcome_log.jsonl"),
        "--embedding",
        str(tmp_path / "emb.json"),
    ]
    args += ["--phase", "heldout", "--iteration", "2", "--position", str(rec["position"])]
    assert main([*args, "--run", str(runs["old"])]) == 0
    decision = json.loads(capsys.readouterr().out)
    # seed 5 and as_training from the manifest: the recorded epsilon draw and mode, whatever the log
    assert decision["branch"] == "epsilon" and decision["epsilon_draw"] == rec["meta"]["decision"]["epsilon_draw"]
    assert decision["mode"] == rec["meta"]["mode"]
    assert main([*args, "--run", str(runs["old"]), "--seed", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["epsilon_draw"] == decision["epsilon_draw"]
    assert main([*args, "--run", str(runs["old"]), "--seed", "6"]) == 2
    assert "differs from the seed 5" in capsys.readouterr().err
    # without --run: Table 3's defaults (exploit at held-out) and seed 0
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["branch"] not in ("epsilon", "round_robin", "warmup")
    flags = ["--epsilon", "1", "--warmup-per-mode", "0", "--round-robin-iterations", "1"]
    assert main([*args, *flags, "--heldout-selection", "as_training"]) == 0
    fresh = json.loads(capsys.readouterr().out)
    assert fresh["branch"] == "epsilon" and fresh["epsilon_draw"] != decision["epsilon_draw"]


def test_the_walkthrough_replays_an_old_run_as_it_ran(runs, tmp_path):
    llm, embedder = replay.replay_clients(runs["old"], runs["cache"])  # no model: the run's cache answers
    w = walkthrough.walk(
        runs["old"],
        llm=llm,
        embedder=embedder,
        work_dir=tmp_path / "work",
        phase="heldout",
        env=ErrandWorld(),
    )
    assert w.recorded_decision["branch"] == "epsilon"
    assert w.reproduces_recorded_decision and w.discard.state_unchanged


def test_params_as_recorded_fills_only_what_the_record_lacks():
    old = {"method": "anti_persistence", "method_params": {"rho": 0.3}, "method_config": {"name": "x", "rho": 0.3}}
    assert params_as_recorded("anti_persistence", {"rho": 0.3}, old)["heldout_selection"] == "as_training"
    new = {**old, "method_config": {"rho": 0.3, "heldout_selection": "exploit"}}
    assert "heldout_selection" not in params_as_recorded("anti_persistence", {"rho": 0.3}, new)
    assert params_as_recorded("anti_persistence", {"rho": 0.3}, None) == {"rho": 0.3}  # a new run
    explicit = {"heldout_selection": "exploit"}  # a parameter the caller sets is never replaced
    assert params_as_recorded("anti_persistence", explicit, old)["heldout_selection"] == "exploit"
    assert params_as_recorded("trajectory_memory", {}, {"method_params": {}}) == {}


def test_the_recorded_walkthrough_fixture_still_audits(tmp_path):
    """The fixture run was recorded before the option: its held-out decisions took round-robin in
    iteration 1 and drew epsilon later. They audit as they ran; under a manifest naming "exploit"
    the same files do not."""
    emb = next(iter(read_jsonl(FIXTURE / "state" / "trajectories.jsonl"))).value["embedding"]
    held = _heldout(FIXTURE)
    first = [r for r in held if r["iteration"] == 1]
    assert {r["meta"]["branch"] for r in first} == {"round_robin"}
    for r in first:  # round-robin does not look at the embedding: any vector of the log's dimension
        a = audit_decision(FIXTURE, phase="heldout", iteration=1, position=r["position"], embedding=emb)
        assert a.reproduces, a.differences
    last = walkthrough.choose_episode(FIXTURE, phase="heldout")  # the task whose embedding the cache holds
    a = audit_decision(
        FIXTURE, phase="heldout", iteration=last["iteration"], position=last["position"], cache_dir=CACHE
    )
    assert a.reproduces and a.recorded["epsilon_draw"] is not None
    copy = tmp_path / "run"
    shutil.copytree(FIXTURE, copy)
    man = json.loads((copy / "manifest.json").read_text())
    man["method_config"]["heldout_selection"] = "exploit"
    (copy / "manifest.json").write_text(json.dumps(man))
    a = audit_decision(copy, phase="heldout", iteration=1, position=first[0]["position"], embedding=emb)
    assert not a.reproduces and a.recomputed["branch"] in ("local_ucb", "global_best")
    a = audit_decision(copy, phase="heldout", iteration=last["iteration"], position=last["position"], cache_dir=CACHE)
    assert not a.reproduces and a.recomputed["epsilon_draw"] is None
