"""The K-iteration protocol for every method, end to end on the real ScienceWorld and ALFWorld
engines with a scripted model over the loopback server (2 iterations, small task subsets)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from antipersist_lib.envs.alfworld import ALFWorldEnvironment, read_game
from antipersist_lib.envs.partitions import load_partition
from antipersist_lib.envs.scienceworld import ScienceWorldEnvironment
from antipersist_lib.errors import ManifestMismatchError, RunLockedError
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.memory.outcome_log import FIELDS
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec, training_schedule
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.plan_responder import PlanResponder

N_TRAIN, N_HELD, PER_IT = 3, 2, 2
SKILLS = Path(__file__).parent / "fixtures" / "skills" / "example_library.json"

#: the eight methods of Table 1 (+ AP ablation variants on ALFWorld below)
CORE = {
    "react": {},
    "reflexion": {},
    "expel": {},
    "autorefine": {},
    "trajectory_memory": {},
    "abstraction_memory": {},
    "joint_memory": {},
    "anti_persistence": {"round_robin_iterations": 1, "warmup_per_mode": 1},
}


def _plans(benchmark: str, alfworld_data: Path | None):
    part = load_partition(benchmark)
    plans, fail = {}, set()
    if benchmark == "alfworld":
        # tasks of different categories, so that no two share an initial observation
        tasks = [part.train[i] for i in (0, 60, 120)] + [part.heldout[i] for i in (30, 100)]
        env = ALFWorldEnvironment(alfworld_data)
        for t in tasks:
            plans[env.reset(t)] = list(read_game(alfworld_data, t.env_args["game"])["walkthrough"])
    else:
        # short expert paths so that the 12-step budget suffices
        tasks = [t for t in part.train if t.task_type == "lifespan-longest-lived"][:N_TRAIN] + [
            t for t in part.heldout if t.task_type == "lifespan-longest-lived"
        ][:N_HELD]
        env = ScienceWorldEnvironment()
        for t in tasks:
            gold = env.gold_actions(t)
            plans[env.reset(t)] = gold
    env.close()
    assert len(plans) == len(tasks), "two tasks share an initial observation"
    keys = list(plans)
    fail = {keys[1], keys[-1]}  # one training and one held-out task are played badly
    return tasks, plans, fail


@pytest.fixture(scope="module")
def engines(alfworld_data):
    out = {}
    for bench in ("alfworld", "scienceworld"):
        tasks, plans, fail = _plans(bench, alfworld_data)
        out[bench] = (tasks, PlanResponder(plans, fail, idle_action="look" if bench == "alfworld" else "look around"))
    return out


def _partition(bench, tasks):
    from antipersist_lib.records import Partition

    base = load_partition(bench)
    return Partition(bench, base.seed, base.drawn_with, tuple(tasks[:N_TRAIN]), tuple(tasks[N_TRAIN:]))


def _spec(method, bench, tmp_path, params, **kw):
    return RunSpec(
        method=method,
        benchmark=bench,
        backbone="loopback",
        embedding="loopback",
        iterations=2,
        train_per_iteration=PER_IT,
        max_steps=12,
        heldout_concurrency=2,
        method_params=params,
        out_root=str(tmp_path / "runs"),
        cache_dir=str(tmp_path / "cache"),
        progress=False,
        **kw,
    )


def _digest(paths):
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


def _state_files(run_dir: Path):
    return sorted(p for p in (run_dir / "state").rglob("*") if p.is_file()) + [
        run_dir / "episodes_train.jsonl",
        run_dir / "journal.jsonl",
    ]


def _run(engines, bench, method, params, tmp_path, alfworld_data, **kw):
    tasks, responder = engines[bench]
    opts = {"data_dir": str(alfworld_data)} if bench == "alfworld" else {}
    frozen_checks = []
    digests = {}

    def on_event(kind, data):
        if kind == "iteration_end":
            digests["before"] = _digest(_state_files(spec.run_dir()))
        elif kind == "evaluation":
            frozen_checks.append(_digest(_state_files(spec.run_dir())) == digests["before"])

    spec = _spec(method, bench, tmp_path, params, benchmark_options=opts, **kw)
    with LoopbackServer(responder=responder) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", max_retries=1, backoff_base_s=0.01)
        summaries = run_cell(
            spec, endpoint=ep, embed_endpoint=ep, partition=_partition(bench, tasks), on_event=on_event
        )
    return spec.run_dir(), summaries, frozen_checks


CASES = [(b, m) for b in ("alfworld", "scienceworld") for m in CORE]


@pytest.mark.slow
@pytest.mark.parametrize("bench,method", CASES, ids=[f"{b}-{m}" for b, m in CASES])
def test_every_method_runs_the_protocol_on_real_engines(engines, alfworld_data, tmp_path, bench, method):
    run_dir, summaries, frozen = _run(engines, bench, method, CORE[method], tmp_path, alfworld_data)
    assert [s.iteration for s in summaries] == [1, 2]
    assert all(s.heldout_n == N_HELD for s in summaries)
    assert frozen == [True, True], "held-out evaluation changed the run's state"
    train = [x.value for x in read_jsonl(run_dir / "episodes_train.jsonl")]
    held = [x.value for x in read_jsonl(run_dir / "episodes_heldout.jsonl")]
    assert len(train) == 2 * PER_IT and len(held) == 2 * N_HELD
    assert all(r["calls"]["execution"] >= 1 for r in train + held), [
        r["outcome"]["error"] for r in train + held if r["calls"]["execution"] < 1
    ]
    assert not any(r["outcome"]["infra_failure"] for r in train + held)
    assert any(r["outcome"]["success"] for r in held) and not all(r["outcome"]["success"] for r in held)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for key in (
        "method",
        "method_config",
        "engine",
        "partition_hash",
        "endpoint",
        "embedding_endpoint",
        "seed",
        "prompt_families",
        "prompt_hashes",
        "versions",
        "git_commit",
        "agent",
        "iterations",
    ):
        assert key in manifest, key
    assert manifest["engine"]["benchmark"] == bench
    version_key = "alfworld" if bench == "alfworld" else "scienceworld"
    assert manifest["engine"][version_key]
    calls = [x.value for x in read_jsonl(run_dir / "calls.jsonl")]
    assert {c["purpose"] for c in calls} >= {"execution"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["iterations"]) == 2
    if method == "anti_persistence":
        for line in read_jsonl(run_dir / "state" / "outcome_log.jsonl"):
            assert set(line.value) == set(FIELDS)
        assert {r["meta"]["branch"] for r in train} & {"round_robin"}
    if method in ("abstraction_memory", "joint_memory", "expel", "autorefine", "reflexion"):
        assert list((run_dir / "snapshots").glob("*.json")) or method == "reflexion"


VARIANTS = {
    # the tiny test partition has one task per category, so retrieval spans the benchmark here
    "persist": (
        "anti_persistence",
        {"persist": True, "round_robin_iterations": 1, "warmup_per_mode": 1, "task_filter": "benchmark"},
    ),
    "fixed-strategic": ("anti_persistence", {"policy": "fixed", "fixed_mode": "strategic"}),
    "random": ("anti_persistence", {"policy": "random"}),
    "judge": ("abstraction_memory", {"judge": True}),
    "frozen-layer": (
        "anti_persistence",
        {"frozen_skills": str(SKILLS), "round_robin_iterations": 1, "warmup_per_mode": 1},
    ),
    "frozen_skills": ("frozen_skills", {"library": str(SKILLS)}),
    "no_skills": ("frozen_skills", {}),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ablation_variants_run(engines, alfworld_data, tmp_path, variant):
    method, params = VARIANTS[variant]
    run_dir, summaries, frozen = _run(engines, "alfworld", method, params, tmp_path, alfworld_data)
    assert frozen == [True, True] and len(summaries) == 2
    train = [x.value for x in read_jsonl(run_dir / "episodes_train.jsonl")]
    if variant == "fixed-strategic":
        assert {r["meta"]["mode"] for r in train} == {"strategic"}
    if variant == "random":
        assert {r["meta"]["branch"] for r in train} == {"random"}
    if variant == "persist":
        snaps = sorted((run_dir / "snapshots").glob("*.json"))
        assert snaps and any(json.loads(p.read_text())["active"] for p in snaps)
    if variant == "judge":
        assert [x.value for x in read_jsonl(run_dir / "state" / "judge.jsonl")]
    if variant in ("frozen-layer", "frozen_skills"):
        held = [x.value for x in read_jsonl(run_dir / "episodes_heldout.jsonl")]
        assert held and all(r["calls"]["execution"] >= 1 for r in held)
        # the frozen library reached the agent's system prompt
        assert engines["alfworld"][1].headers_seen["## Skills (frozen library)"] >= 2 * (PER_IT + N_HELD)


def test_training_schedule_is_shared_seeded_and_without_replacement():
    a = training_schedule(180, 10, 50, 42)
    assert a == training_schedule(180, 10, 50, 42)
    assert all(len(set(it)) == 50 for it in a) and a[0] != a[1]
    assert training_schedule(180, 10, 50, 43) != a
    with pytest.raises(ValueError, match="exceeds the training pool"):
        training_schedule(10, 1, 50, 42)


def test_run_spec_validation_names_the_field():
    with pytest.raises(ValueError, match="method: unknown"):
        RunSpec(method="reflection", benchmark="alfworld", backbone="x")
    with pytest.raises(ValueError, match="benchmark: unknown"):
        RunSpec(method="react", benchmark="alfred", backbone="x")
    with pytest.raises(ValueError, match="iterations must be an integer"):
        RunSpec(method="react", benchmark="alfworld", backbone="x", iterations=0)
    with pytest.raises(ValueError, match=r"unknown run setting\(s\) \['iteratons'\]"):
        RunSpec.from_dict({"method": "react", "benchmark": "alfworld", "backbone": "x", "iteratons": 3})
    with pytest.raises(ValueError, match="agent: unknown"):
        RunSpec(method="react", benchmark="alfworld", backbone="x", agent={"temp": 0})


def test_a_run_records_the_seeds_its_profile_planned_outside_its_identity(tmp_path):
    """The tables name a short cell from this record (issue 44); a profile gaining a seed must not make
    its finished runs a different configuration, so the record is not part of the identity."""
    from antipersist_lib.runner.protocol import Runner
    from antipersist_lib.runner.spec import IDENTITY_KEYS
    from antipersist_lib.serving.llm import Endpoint

    with pytest.raises(ValueError, match="seeds_planned must list integer seeds including this run's seed 4"):
        RunSpec(method="react", benchmark="errandworld", backbone="x", seed=4, seeds_planned=(1, 2, 3))
    with pytest.raises(ValueError, match="seeds_planned must be null or a list of seeds"):
        RunSpec(method="react", benchmark="errandworld", backbone="x", seed=1, seeds_planned="1,2")
    ep = Endpoint(base_url="http://127.0.0.1:9/v1", model="never-called", api_key_env="ANTIPERSIST_TEST_KEY")

    def manifest(**kw):
        spec = RunSpec(
            method="react",
            benchmark="errandworld",
            backbone="x",
            embedding="bow",
            out_root=str(tmp_path),
            seed=2,
            train_per_iteration=2,
            **kw,
        )
        return Runner(spec, endpoint=ep, embed_endpoint=ep)._manifest(None, None)

    assert manifest(seeds_planned=[3, 1, 2])["seeds_planned"] == [1, 2, 3]
    assert "seeds_planned" not in manifest() and "seeds_planned" not in IDENTITY_KEYS


def test_run_directory_lock_and_manifest_mismatch(tmp_path):
    rd = RunDirectory(tmp_path / "run").open()
    with pytest.raises(RunLockedError, match="in use by another process"):
        RunDirectory(tmp_path / "run").open()
    assert rd.check_or_write_manifest({"method": "react", "seed": 1}, ["method", "seed"]) is False
    rd.close()
    rd2 = RunDirectory(tmp_path / "run").open()
    assert rd2.check_or_write_manifest({"method": "react", "seed": 1, "versions": {}}, ["method", "seed"]) is True
    with pytest.raises(ManifestMismatchError, match="seed: stored 1, now 2"):
        rd2.check_or_write_manifest({"method": "react", "seed": 2}, ["method", "seed"])
    rd2.close()


def test_evaluation_only_run_has_no_training_episode(tmp_path):
    """train_per_iteration: 0 (F.1's frozen skill libraries): held-out evaluation only; the
    summary's training fields are empty, not NaN."""
    import json

    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.runner.spec import RunSpec
    from antipersist_lib.serving.llm import Endpoint
    from antipersist_lib.testing.loopback_server import LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    spec = RunSpec(
        method="frozen_skills",
        benchmark="errandworld",
        backbone="scripted-loopback",
        embedding="bow",
        seed=1,
        iterations=1,
        train_per_iteration=0,
        max_steps=3,
        heldout_concurrency=1,
        heldout_limit=3,
        name="eval-only",
        out_root=str(tmp_path),
        cache_dir=None,
        progress=False,
    )
    with LoopbackServer(responder=errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        (summary,) = run_cell(spec, endpoint=ep, embed_endpoint=ep)
    assert summary.heldout_n == 3 and summary.train_n == 0
    assert (spec.run_dir() / "episodes_train.jsonl").read_text() == ""
    saved = json.loads((spec.run_dir() / "summary.json").read_text())
    assert saved["iterations"][0]["train_success"] is None
    with pytest.raises(ValueError, match="train_per_iteration must be an integer >= 0"):
        RunSpec(method="react", benchmark="errandworld", backbone="x", train_per_iteration=-1)


def test_limits_take_task_types_in_turn_on_the_stored_partitions():
    """The first held-out games of ALFWorld are all one type; a balanced limit of 6 covers all six,
    in split order within each type, and a limit at or past the split's size keeps the split."""
    from antipersist_lib.records import limited_tasks

    held = load_partition("alfworld").heldout
    first = limited_tasks(held, 6, "first")
    assert {t.task_type for t in first} == {held[0].task_type}
    balanced = limited_tasks(held, 6)
    assert len({t.task_type for t in balanced}) == 6
    assert balanced[0] == held[0]
    for t in balanced:  # each is the first task of its type in the split
        assert t == next(u for u in held if u.task_type == t.task_type)
    twelve = limited_tasks(held, 12)
    assert [t.task_type for t in twelve[:6]] == [t.task_type for t in twelve[6:]]
    assert len({t.task_id for t in twelve}) == 12
    assert limited_tasks(held, len(held) + 5) == list(held)
    sci = load_partition("scienceworld").heldout
    assert len({t.task_type for t in limited_tasks(sci, 4)}) == 4
    assert len({t.task_type for t in limited_tasks(sci, 4, "first")}) < 4
    with pytest.raises(ValueError, match="subset must be one of"):
        RunSpec(method="react", benchmark="alfworld", backbone="x", subset="random")


def test_subset_order_is_part_of_a_limited_runs_identity(tmp_path):
    from antipersist_lib.testing.scripted_policy import errand_policy

    def spec(subset):
        return RunSpec(
            method="react",
            benchmark="errandworld",
            backbone="scripted-loopback",
            embedding="bow",
            iterations=1,
            train_per_iteration=0,
            max_steps=3,
            heldout_concurrency=1,
            heldout_limit=2,
            subset=subset,
            name="subset",
            out_root=str(tmp_path),
            cache_dir=None,
            progress=False,
        )

    with LoopbackServer(responder=errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        run_cell(spec("balanced"), endpoint=ep, embed_endpoint=ep)
        manifest = json.loads((spec("balanced").run_dir() / "manifest.json").read_text())
        assert manifest["subset"] == "balanced"
        done = [r.value["task"] for r in read_jsonl(spec("balanced").run_dir() / "episodes_heldout.jsonl")]
        # errand world's first two held-out tasks share a type; the balanced pair does not
        assert len({t["task_type"] for t in done}) == 2
        assert sorted(t["task_id"] for t in done) == [0, 2]
        with pytest.raises(ManifestMismatchError, match="subset: stored 'balanced', now 'first'"):
            run_cell(spec("first"), endpoint=ep, embed_endpoint=ep)
