"""Main-job profiles: validation names the bad field, variants layer their params, and the
ablation maps used by the notebooks agree with params/main/ablations.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from antipersist_lib.analysis import ablations
from antipersist_lib.runner.main_profile import load_profile, profile_specs, run_plan

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, data):
    p = tmp_path / "profile.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_shipped_profiles_load():
    for name in ("smoke", "ablations", "walkthrough"):
        assert run_plan(load_profile(ROOT / "params" / "main" / f"{name}.yaml"))


@pytest.mark.parametrize(
    "data, message",
    [
        ({"methods": ["react"], "benchmark": ["alfworld"]}, r"benchmark"),
        ({"methods": ["reakt"]}, r"profile\.yaml: methods: unknown 'reakt'; expected names from \('react', "),
        ({"variants": {"x": {"method": "nope"}}}, r"variants\.x\.method must be one of \('react', .*got 'nope'"),
        ({"variants": {"x": {"params": {}}}}, r"variants\.x\.method must be one of .*; it is missing"),
        ({"variants": {"x": {"method": "react", "parms": {}}}}, r"unknown key\(s\) \['variants\.x\.parms'\]"),
        ({"methods": ["react"], "benchmarks": ["alfwrld"]}, r"benchmarks: unknown 'alfwrld'; expected names from"),
        ({"methods": ["react"], "iterations": 0}, r"iterations must be an integer >= 1, got 0"),
        ({"methods": ["react"], "heldout_limit": "4"}, r"heldout_limit must be an integer >= 1 or null, got '4'"),
        ({"methods": ["react"], "seeds": [1, 1]}, r"seeds must be a non-empty list of distinct integer seeds"),
        ({"methods": ["react"], "agent": {"max_token": 8}}, r"unknown key\(s\) \['agent\.max_token'\]"),
        ({"methods": ["react"], "method_params": {"reakt": {}}}, r"unknown key\(s\) \['method_params\.reakt'\]"),
        ({"methods": ["react"], "run_concurrency": True}, r"run_concurrency must be an integer >= 1, got True"),
        ({"methods": ["react"], "variants": {"react": {"method": "react"}}}, r"collides"),
        ({"methods": ["react"], "notebooks": ["99_nothing"]}, r"unknown notebook\(s\) \['99_nothing'\]"),
        ({"benchmarks": ["alfworld"]}, r"nothing to run"),
    ],
)
def test_bad_profiles_name_the_problem(tmp_path, data, message):
    with pytest.raises(ValueError, match=message):
        load_profile(write(tmp_path, data))


def test_variant_params_layer_over_method_params(tmp_path):
    prof = load_profile(
        write(
            tmp_path,
            {
                "methods": ["anti_persistence"],
                "variants": {"g": {"method": "anti_persistence", "params": {"gamma": 0.9}}},
                "method_params": {"anti_persistence": {"gamma": 0.5, "budget": 3}},
            },
        )
    )
    assert run_plan(prof) == [
        ("anti_persistence", "anti_persistence", {"gamma": 0.5, "budget": 3}),
        ("g", "anti_persistence", {"gamma": 0.9, "budget": 3}),
    ]


def test_ablation_maps_match_the_ablations_profile():
    prof = load_profile(ROOT / "params" / "main" / "ablations.yaml")
    plan = {name: (method, params) for name, method, params in run_plan(prof)}
    defaults = plan[ablations.DEFAULT_RUN][1]
    for symbol, points in ablations.SWEEPS.items():
        key = ablations.SWEEP_PARAMETERS[symbol]
        for name, value in points.items():
            assert name in plan, f"sweep point {name} missing from the profile"
            method, params = plan[name]
            assert method == "anti_persistence"
            if name == ablations.DEFAULT_RUN:
                from antipersist_lib.methods.anti_persistence import AntiPersistence

                assert AntiPersistence.DEFAULTS[key] == value  # the default point is the default setting
                continue
            assert params[key] == value
            assert {k: v for k, v in params.items() if k != key} == defaults  # one parameter changes at a time
    for names in (ablations.PERSISTENCE, ablations.POLICIES, ablations.SKILL_CONTENT, ablations.RETENTION):
        assert set(names) <= set(plan)
    assert plan["persist"][1]["persist"] is True
    assert plan["policy-random"][1]["policy"] == "random"
    assert plan["skills-toxic"][0] == "frozen_skills" and Path(ROOT / plan["skills-toxic"][1]["library"]).exists()


def test_table3_defaults_have_one_source():
    """The paper's Table 3 values live in anti_persistence.TABLE3; the protocol method, the select
    command and the ablation maps read them from there (changing TABLE3 changes all of them)."""
    from antipersist_lib.cli import build_parser
    from antipersist_lib.core.config import TABLE3
    from antipersist_lib.methods.anti_persistence import AntiPersistence

    paper_table3 = {
        "neighbourhood": 10,
        "c": 0.5,
        "gamma": 0.998,
        "rho": 0.7,
        "warmup_per_mode": 3,
        "round_robin_iterations": 3,
        "epsilon": 0.1,
        "lam": 0.05,
        "budget": 5,
        "contrast": 1,
        "synthesis_max_tokens": 1024,
        "task_filter": "task_type",
        "embed_prefix_chars": 500,
    }
    t3 = TABLE3.params()
    assert {k: t3[k] for k in paper_table3} == paper_table3
    assert TABLE3.synthesis_temperature == 0.0
    for key, value in AntiPersistence.DEFAULTS.items():
        if key in t3:
            assert value == t3[key], key
    for symbol, key in ablations.SWEEP_PARAMETERS.items():
        assert ablations.SWEEPS[symbol][ablations.DEFAULT_RUN] == t3[key]
    sub = build_parser()._subparsers._group_actions[0].choices["select"]
    assert sub.get_default("iteration") == TABLE3.selector.round_robin_iterations + 1
    helps = {a.dest: a.help for a in sub._actions}
    for key in ("neighbourhood", "gamma", "rho", "c", "epsilon"):
        assert f"default {t3[key]}" in helps[key]


def test_settings_by_benchmark_are_checked_and_layered(tmp_path):
    base = {"methods": ["react"], "benchmarks": ["alfworld", "textworld_express"], "max_steps": 9, "seeds": [1, 2]}
    with pytest.raises(ValueError, match=r"settings_by_benchmark names benchmark\(s\) \['scienceworld'\]"):
        load_profile(write(tmp_path, {**base, "settings_by_benchmark": {"scienceworld": {"max_steps": 3}}}))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['settings_by_benchmark\.alfworld\.steps'\]"):
        load_profile(write(tmp_path, {**base, "settings_by_benchmark": {"alfworld": {"steps": 3}}}))
    with pytest.raises(ValueError, match=r"settings_by_benchmark\.alfworld\.max_steps must be an integer >= 1"):
        load_profile(write(tmp_path, {**base, "settings_by_benchmark": {"alfworld": {"max_steps": 0}}}))
    prof = load_profile(
        write(tmp_path, {**base, "settings_by_benchmark": {"alfworld": {"max_steps": 15, "iterations": 1}}})
    )
    specs = profile_specs(prof, backbone_label="embedded-x", runs_root=tmp_path, cache_dir=tmp_path, judge=None)
    assert [(s.benchmark, s.seed, s.max_steps, s.iterations) for s in specs] == [
        ("alfworld", 1, 15, 1),
        ("alfworld", 2, 15, 1),
        ("textworld_express", 1, 9, 2),
        ("textworld_express", 2, 9, 2),
    ]
    # a benchmark's subset of task types and of the profile's seeds (the reproduction study's ALFWorld)
    over = {"alfworld": {"task_types": ["cool", "heat"], "seeds": [2]}}
    prof = load_profile(write(tmp_path, {**base, "settings_by_benchmark": over}))
    specs = profile_specs(prof, backbone_label="embedded-x", runs_root=tmp_path, cache_dir=tmp_path, judge=None)
    assert [(s.benchmark, s.seed, s.task_types) for s in specs] == [
        ("alfworld", 2, ("cool", "heat")),
        ("textworld_express", 1, None),
        ("textworld_express", 2, None),
    ]
    with pytest.raises(ValueError, match=r"settings_by_benchmark.alfworld.seeds must be a non-empty list of the"):
        load_profile(write(tmp_path, {**base, "settings_by_benchmark": {"alfworld": {"seeds": [3]}}}))
    with pytest.raises(ValueError, match=r"settings_by_benchmark.alfworld.task_types must be a list"):
        load_profile(write(tmp_path, {**base, "settings_by_benchmark": {"alfworld": {"task_types": "cool"}}}))


def test_the_reproduction_profiles_load_with_every_run_paired():
    """The CPU study and the paper-scale grid: every design and condition on the same seeds and tasks."""
    from antipersist_lib.runner.grid import load_grid

    prof = load_profile(ROOT / "params" / "main" / "reproduction_cpu.yaml")
    specs = profile_specs(prof, backbone_label="embedded-x", runs_root=Path("r"), cache_dir=Path("c"), judge=None)
    twx = [s for s in specs if s.benchmark == "textworld_express"]
    assert len(twx) == 20 and {s.task_types for s in twx} == {("cookingworld", "coin")}
    conditions = {(s.method, s.method_params.get("plant_condition")) for s in specs if s.method != "react"}
    assert len(conditions) == 9 and all(s.method_params.get("plant") for s in specs if s.method != "react")
    assert {s.seed for s in specs if s.benchmark == "alfworld"} == {1}
    grid = load_grid(ROOT / "params" / "grid" / "reproduction_paper.yaml")
    assert len(grid.runs) == 10 * 2 * 3 * 3
    assert {r.spec.iterations for r in grid.runs} == {10} and {r.spec.train_per_iteration for r in grid.runs} == {50}


def test_run_order_finishes_begun_runs_first_then_goes_seed_by_seed(tmp_path):
    from antipersist_lib.rundir import RunDirectory
    from antipersist_lib.runner.main_profile import execution_order

    base = {"methods": ["react", "trajectory_memory"], "benchmarks": ["alfworld", "scienceworld"], "seeds": [1, 2]}
    with pytest.raises(ValueError, match=r"run_order must be one of \('benchmark', 'seed'\), got 'method'"):
        load_profile(write(tmp_path, {**base, "run_order": "method"}))
    prof = load_profile(write(tmp_path, {**base, "run_order": "seed"}))
    specs = profile_specs(prof, backbone_label="embedded-x", runs_root=tmp_path, cache_dir=tmp_path, judge=None)
    label = [(s.benchmark, s.seed, s.method) for s in specs]
    # the tables' order is the profile's (benchmark, seed, method) whatever the execution order
    assert label[:3] == [("alfworld", 1, "react"), ("alfworld", 1, "trajectory_memory"), ("alfworld", 2, "react")]
    # an interrupted study: alfworld seed 2's trajectory run has begun (its manifest is written)
    begun = specs[3]
    assert (begun.benchmark, begun.seed, begun.method) == ("alfworld", 2, "trajectory_memory")
    layout = RunDirectory(begun.run_dir())
    layout.path.mkdir(parents=True)
    layout.manifest_path.write_text("{}", encoding="utf-8")
    by_seed = [(s.benchmark, s.seed, s.method) for s in execution_order(specs, "seed")]
    assert by_seed == [
        ("alfworld", 2, "trajectory_memory"),
        ("alfworld", 1, "react"),
        ("alfworld", 1, "trajectory_memory"),
        ("scienceworld", 1, "react"),
        ("scienceworld", 1, "trajectory_memory"),
        ("alfworld", 2, "react"),
        ("scienceworld", 2, "react"),
        ("scienceworld", 2, "trajectory_memory"),
    ]
    by_benchmark = [(s.benchmark, s.seed, s.method) for s in execution_order(specs)]
    assert by_benchmark == [label[3]] + label[:3] + label[4:]
    # alfworld's seed 1 complete (no longer pending): scienceworld's seed 1 still comes before alfworld's seed 2
    left = execution_order(specs[2:], "seed", prof["seeds"])
    assert [(s.benchmark, s.seed, s.method) for s in left][:4] == [
        ("alfworld", 2, "trajectory_memory"),
        ("scienceworld", 1, "react"),
        ("scienceworld", 1, "trajectory_memory"),
        ("alfworld", 2, "react"),
    ]
    # the profile's seed order, not the seeds' values
    assert [s.seed for s in execution_order(specs[4:], "seed", [2, 1])] == [2, 2, 1, 1]
    with pytest.raises(ValueError, match="run_order must be one of"):
        execution_order(specs, "random")


def test_the_cpu_profile_runs_every_design_on_three_benchmarks_with_three_seeds():
    prof = load_profile(ROOT / "params" / "main" / "cpu.yaml")
    specs = profile_specs(prof, backbone_label="embedded-x", runs_root=ROOT, cache_dir=ROOT, judge=None)
    assert len(specs) == 5 * 3 * 3
    assert {s.method for s in specs} == {
        "react",
        "trajectory_memory",
        "abstraction_memory",
        "joint_memory",
        "anti_persistence",
    }
    assert specs[0].benchmark == "textworld_express"
    # seed-major within a benchmark: an interrupted study already pairs every method on its first seed
    assert [s.seed for s in specs[:5]] == [1] * 5
    assert {s.seeds_planned for s in specs} == {(1, 2, 3)}  # recorded, so the tables can name a short cell
    assert prof["backbone"]["model"] == "qwen2.5-coder-1.5b-instruct"


FAKE_BACKBONE = {
    "server": "llama-server",
    "model": {"name": "gemma-3-270m", "file": "gemma.gguf", "sha256": "ab" * 32},
    "llama_cpp_build": {"baseline": "x86-64-v3", "features": ["AVX2"]},
}


def test_a_profile_whose_runs_are_complete_is_recomputed_without_a_model(tmp_path, monkeypatch):
    import dataclasses
    import json

    from antipersist_lib.runner import main_job, main_profile, main_tables
    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.serving.llm import Endpoint
    from antipersist_lib.testing.loopback_server import LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    profile = write(
        tmp_path,
        {
            "methods": ["react", "trajectory_memory"],
            "benchmarks": ["errandworld"],
            "seeds": [1, 2],
            "iterations": 1,
            "train_per_iteration": 2,
            "heldout_limit": 2,
            "max_steps": 4,
            "backbone": {"model": "gemma-3-270m"},
            "notebooks": [],
        },
    )
    prof = main_profile.load_profile(profile)
    runs = tmp_path / "committed"
    specs = main_profile.profile_specs(
        prof, backbone_label="embedded-gemma-3-270m", runs_root=runs, cache_dir=tmp_path / "c", judge=None
    )
    recorded = {}
    with LoopbackServer(responder=errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        events: list[str] = []
        for spec in specs:
            (summary,) = run_cell(
                dataclasses.replace(spec, progress=False),
                endpoint=ep,
                embed_endpoint=ep,
                backbone_info=FAKE_BACKBONE,
                on_event=lambda kind, data: events.append(kind),
            )
            recorded[str(spec.run_dir())] = summary
    # every episode is an event (the main job adds a run's wall time up at each one, so a killed study keeps it)
    assert events.count("heldout_episode") == 4 * 2 and events.count("train_episode") == 4 * 2

    def no_model(self):
        raise AssertionError("a model was started for complete runs")

    monkeypatch.setattr(main_job.EmbeddedBackbone, "__enter__", no_model)
    out = main_job.run_main(profile, out=tmp_path / "out", runs=runs, execute_notebooks=False)
    assert out["recomputed_only"] and len(out["rows"]) == 4
    for row in out["rows"]:
        assert row["heldout_success_final"] == recorded[row["run_dir"]].heldout_success
        assert row["heldout_n"] == 2 and row["seconds"] is None  # no wall time was recorded for these runs
    table = (tmp_path / "out" / "profile" / "results.md").read_text()
    assert FAKE_BACKBONE["model"]["sha256"] in table and "Gemma 3 270M" in table
    # one missing held-out episode: the run has work left, so the model must start
    held = specs[0].run_dir() / "episodes_heldout.jsonl"
    held.write_text("".join(held.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(AssertionError, match="a model was started"):
        main_job.run_main(profile, out=tmp_path / "out", runs=runs, execute_notebooks=False)
    # a study in progress is reported without a model: the complete runs only, said so in the table
    part = main_job.run_main(profile, out=tmp_path / "part", runs=runs, execute_notebooks=False, report_only=True)
    assert part["recomputed_only"] and (part["runs_reported"], part["runs_in_profile"]) == (3, 4)
    assert str(specs[0].run_dir()) not in {r["run_dir"] for r in part["rows"]}
    table = (tmp_path / "part" / "profile" / "results.md").read_text()
    assert "3 of the profile's 4 runs are complete" in table
    summary = {(c["benchmark"], c["run"]): c for c in main_tables.seed_summary(out["rows"])}
    both = [100 * recorded[str(s.run_dir())].heldout_success for s in specs if s.name == "trajectory_memory"]
    cell = summary[("errandworld", "trajectory_memory")]
    assert cell["seeds"] == 2 and cell["success_mean"] == pytest.approx(sum(both) / 2)
    assert cell["success_sd"] == pytest.approx(abs(both[0] - both[1]) / 2**0.5)
    # the runs must have been made by one model file
    manifest = specs[1].run_dir() / "manifest.json"
    data = json.loads(manifest.read_text())
    data["embedded_backbone"]["model"]["sha256"] = "cd" * 32
    manifest.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="2 different model files"):
        main_tables.recorded_backbone(specs[1:])


def test_seed_pools_are_checked(tmp_path):
    base = {"methods": ["react", "trajectory_memory"], "benchmarks": ["alfworld", "textworld_express"]}
    cases = [
        ({"scienceworld": {"per_type": 1}}, r"seed_pools names benchmark 'scienceworld', which the profile does not"),
        ({"alfworld": {"per_typ": 1}}, r"unknown key\(s\) \['seed_pools\.alfworld\.per_typ'\]"),
        ({"alfworld": {}}, r"seed_pools\.alfworld\.per_type must be an integer >= 1; it is missing"),
        ({"alfworld": {"per_type": 0}}, r"seed_pools.alfworld.per_type must be an integer >= 1, got 0"),
        ({"alfworld": {"per_type": True}}, r"per_type must be an integer >= 1, got True"),
        ([1], r"seed_pools must be a mapping of benchmark names to \{per_type: N\}, got \[1\]"),
    ]
    for pools, message in cases:
        with pytest.raises(ValueError, match=message):
            load_profile(write(tmp_path, {**base, "seed_pools": pools}))
    with pytest.raises(ValueError, match=r"none of its methods keeps a trajectory store"):
        load_profile(write(tmp_path, {**base, "methods": ["react"], "seed_pools": {"alfworld": {"per_type": 1}}}))
    with pytest.raises(ValueError, match=r"run\(s\) \['trajectory_memory'\] set seed_pool in method_params"):
        load_profile(
            write(
                tmp_path,
                {
                    **base,
                    "seed_pools": {"alfworld": {"per_type": 1}},
                    "method_params": {"trajectory_memory": {"seed_pool": "x.jsonl"}},
                },
            )
        )


def test_seed_pools_go_to_every_memory_design_and_are_built_once(tmp_path):
    from antipersist_lib.core.seeding import read_seed_records
    from antipersist_lib.records import EpisodeOutcome, Step, Trajectory
    from antipersist_lib.runner import seed_pools

    methods = ["react", "trajectory_memory", "abstraction_memory", "joint_memory", "anti_persistence"]
    prof = load_profile(
        write(
            tmp_path,
            {
                "methods": methods,
                "benchmarks": ["alfworld", "textworld_express"],
                "seeds": [1, 2],
                "train_pool_limit": 3,
                "heldout_limit": 2,
                "seed_pools": {"alfworld": {"per_type": 2}},
            },
        )
    )
    runs = tmp_path / "runs"
    specs = profile_specs(prof, backbone_label="embedded-x", runs_root=runs, cache_dir=tmp_path, judge=None)
    seeded = {(s.benchmark, s.seed, s.method): s.method_params.get("seed_pool") for s in specs}
    for seed in (1, 2):
        want = str(runs / "seed_pools" / "alfworld" / f"seed{seed}.jsonl")
        assert seeded[("alfworld", seed, "react")] is None  # no memory: nothing to seed
        assert [seeded[("alfworld", seed, m)] for m in methods[1:]] == [want] * 4
        assert all(seeded[("textworld_express", seed, m)] is None for m in methods)
    calls = []

    def fake_build(spec, per_type):
        calls.append((spec.benchmark, per_type, spec.seed, seed_pools.run_task_types(spec)))
        traj = Trajectory("start", (Step("go", "done", 1.0, True, True, "Action: go"),))
        return [
            {"task": _task(spec.benchmark, t, i).to_dict(), "trajectory": traj.to_dict(), "outcome": ok.to_dict()}
            for t in seed_pools.run_task_types(spec)
            for i in range(per_type)
        ]

    ok = EpisodeOutcome(True, 1.0, 1)
    made = seed_pools.ensure_seed_pools(prof, specs, runs, build=fake_build)
    assert sorted(p.name for p in made) == ["seed1.jsonl", "seed2.jsonl"]
    # the run meets 3 training games and 2 held-out games, task types in turn
    types = seed_pools.run_task_types(next(s for s in specs if s.benchmark == "alfworld"))
    assert types[:3] == ["put", "clean", "heat"] and set(types) >= {"examine"}
    assert calls == [("alfworld", 2, 1, types), ("alfworld", 2, 2, types)]
    assert len(read_seed_records(made[0])) == 2 * len(types)  # what the methods' seed_pool reads
    # on disk: reused as it is, never rebuilt (resumed runs must see the same records)
    assert seed_pools.ensure_seed_pools(prof, specs, runs, build=fake_build) == [] and len(calls) == 2


def test_an_expert_seed_pool_replays_training_games_outside_the_runs_own(tmp_path):
    """On the real TextWorldExpress engine (a JVM): successful expert paths, per type, none of the run's own."""
    from antipersist_lib.runner.seed_pools import expert_seed_pool, run_tasks
    from antipersist_lib.runner.spec import RunSpec

    spec = RunSpec(
        method="trajectory_memory",
        benchmark="textworld_express",
        backbone="x",
        seed=3,
        train_pool_limit=3,
        heldout_limit=3,
        cache_dir=str(tmp_path / "cache"),
    )
    records = expert_seed_pool(spec, 1, tmp_path / "cache")
    own = {t.key for t in run_tasks(spec)[0]}
    assert [r["task"]["task_type"] for r in records] == ["twc", "coin", "cookingworld"]
    assert all(r["outcome"]["success"] and r["trajectory"]["steps"] for r in records)
    assert not {f"textworld_express/train/{r['task']['task_id']}" for r in records} & own
    assert {r["task"]["split"] for r in records} == {"train"}
    again = expert_seed_pool(spec, 1, tmp_path / "cache")  # from the replay cache: the same records
    assert again == records


def _task(bench, task_type, i):
    from antipersist_lib.records import Task

    return Task(i, bench, task_type, f"do the {task_type} task", "train", {"game": f"g{i}"})


class _FakeServer:
    """The parts of EmbeddedBackbone that the side-by-side scheduler uses: a server that can die."""

    def __init__(self):
        import threading

        self.exit_code = None
        self.restart_threads = []
        self.lock = threading.Lock()

    def crash_report(self, where):
        return f"llama-server died (exit {self.exit_code}) {where}"

    def restart(self):
        import threading

        self.restart_threads.append(threading.current_thread())
        self.exit_code = None


def _specs(n):
    from antipersist_lib.runner.spec import RunSpec

    return [RunSpec(method="react", benchmark="errandworld", backbone="x", seed=i, name=f"r{i}") for i in range(n)]


def test_runs_side_by_side_keep_their_order_and_concurrency():
    import threading
    import time

    from antipersist_lib.runner.main_job import _run_side_by_side

    lock = threading.Lock()
    live, peak, started = [0], [0], []

    def one(spec):
        with lock:
            started.append(spec.seed)
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.05)
        with lock:
            live[0] -= 1

    _run_side_by_side(_specs(5), 2, _FakeServer(), [], one)
    assert sorted(started) == [0, 1, 2, 3, 4] and started[:2] in ([0, 1], [1, 0]) and peak[0] == 2


def test_a_dead_server_is_restarted_once_from_the_main_thread_and_the_runs_in_flight_resume():
    import threading
    import time

    from antipersist_lib.errors import LLMUnavailableError
    from antipersist_lib.runner.main_job import _run_side_by_side

    server = _FakeServer()
    attempts: dict[int, int] = {}
    lock = threading.Lock()

    def one(spec):
        with lock:
            attempts[spec.seed] = attempts.get(spec.seed, 0) + 1
            first = attempts[spec.seed] == 1
        if spec.seed == 1 and first:
            time.sleep(0.05)
            server.exit_code = -9  # killed while both runs are in flight
            raise LLMUnavailableError("connection refused")
        if spec.seed == 0 and first:
            time.sleep(0.2)  # still in flight when the server dies: it fails against the dead server too
            raise LLMUnavailableError("connection refused")

    restarts = []
    _run_side_by_side(_specs(3), 2, server, restarts, one)
    assert attempts == {0: 2, 1: 2, 2: 1}
    assert server.restart_threads == [threading.main_thread()]  # tied to the kit's process (pdeathsig)
    assert [r["exit_code"] for r in restarts] == [-9]


def test_a_failing_run_stops_the_study_after_the_runs_in_flight_end():
    import threading
    import time

    from antipersist_lib.runner.main_job import _run_side_by_side

    done = []
    lock = threading.Lock()

    def one(spec):
        if spec.seed == 0:
            raise ValueError("bad task")
        time.sleep(0.1)
        with lock:
            done.append(spec.seed)

    with pytest.raises(ValueError, match="bad task"):
        _run_side_by_side(_specs(4), 2, _FakeServer(), [], one)
    assert done == [1]  # the run in flight finished; no new run was started after the failure


def test_a_server_that_keeps_dying_stops_the_study_with_its_report():
    from antipersist_lib.errors import EmbeddedServerError, LLMUnavailableError
    from antipersist_lib.runner.main_job import MAX_BACKBONE_RESTARTS, _run_side_by_side

    server = _FakeServer()

    def one(spec):
        server.exit_code = -11
        raise LLMUnavailableError("connection refused")

    with pytest.raises(EmbeddedServerError, match=r"(?s)exit -11.*died 4 times"):
        _run_side_by_side(_specs(2), 2, server, [], one)
    assert len(server.restart_threads) == MAX_BACKBONE_RESTARTS


def test_wall_clock_keeps_each_runs_time_and_the_studys_elapsed_time(tmp_path):
    import json
    import time

    from antipersist_lib.runner.main_job import ELAPSED_KEY, _WallClock

    seconds: dict[str, float] = {"old/run/seed1": 100.0, ELAPSED_KEY: 100.0}
    clock = _WallClock(tmp_path, seconds, tmp_path / "run_seconds.json")
    a, b = _specs(2)
    a = a.__class__(**{**a.__dict__, "out_root": str(tmp_path)})
    b = b.__class__(**{**b.__dict__, "out_root": str(tmp_path)})
    count_a, count_b = clock.counter(a), clock.counter(b)
    time.sleep(0.2)
    count_a()
    count_b()  # both ran for the same 0.2 s, side by side
    saved = json.loads((tmp_path / "run_seconds.json").read_text())
    run_a, run_b = (str(s.run_dir().relative_to(tmp_path)) for s in (a, b))
    assert saved[run_a] >= 0.2 and saved[run_b] >= 0.2 and saved["old/run/seed1"] == 100.0
    assert 100.2 <= saved[ELAPSED_KEY] < 100.0 + saved[run_a] + saved[run_b] - 0.1  # overlap counted once


def test_a_stop_file_lets_the_runs_in_flight_finish_and_starts_no_new_one(tmp_path):
    import threading

    from antipersist_lib.runner.main_job import STOP_FILE, _run_side_by_side

    stop = tmp_path / STOP_FILE
    done = []
    lock = threading.Lock()

    both_started = threading.Barrier(2, timeout=30)
    stop_asked = threading.Barrier(2, timeout=30)

    def one(spec):
        if spec.seed in (0, 1):
            both_started.wait()  # runs 0 and 1 are both in flight, however loaded the machine is
            if spec.seed == 0:
                stop.touch()  # asked while runs 0 and 1 are in flight
            stop_asked.wait()  # neither ends before the stop file exists (else a third run could start first)
        with lock:
            done.append(spec.seed)

    _run_side_by_side(_specs(5), 2, _FakeServer(), [], one, stop=stop)
    assert sorted(done) == [0, 1] and not stop.exists()  # honoured once: the next invocation resumes
    _run_side_by_side(_specs(3), 2, _FakeServer(), [], lambda spec: done.append(spec.seed), stop=stop)
    assert sorted(done[2:]) == [0, 1, 2]


def test_the_committed_50_step_probe_is_recomputed_without_a_model(tmp_path, monkeypatch):
    """The evaluation-only probe (train_per_iteration: 0, params/main/cpu_alfworld_steps.yaml): a run without
    training episodes has no training success, which results.json records as null (NaN made the study end in
    'Out of range float values are not JSON compliant' after its last run)."""
    import json

    from antipersist_lib.runner import main_job

    def no_model(self):
        raise AssertionError("a model was started for complete runs")

    monkeypatch.setattr(main_job.EmbeddedBackbone, "__enter__", no_model)
    profile = ROOT / "params" / "main" / "cpu_alfworld_steps.yaml"
    out = main_job.run_main(profile, out=tmp_path, runs=ROOT / "tests" / "fixtures" / "runs" / "cpu_alfworld_steps")
    assert out["recomputed_only"] and out["runs_reported"] == out["runs_in_profile"] == 2
    assert {r["run"] for r in out["rows"]} == {"react", "trajectory_memory"}
    for row in out["rows"]:
        assert row["train_success"] is None and row["heldout_n"] == 6 and row["mean_steps"] == 50
    saved = json.loads((tmp_path / "cpu_alfworld_steps" / "results.json").read_text())
    assert [r["train_success"] for r in saved["rows"]] == [None, None]


def test_the_walkthrough_must_name_a_benchmark_with_an_anti_persistence_run(tmp_path):
    base = {"methods": ["react", "anti_persistence"], "benchmarks": ["alfworld", "textworld_express"]}
    assert load_profile(write(tmp_path, {**base, "walkthrough": "alfworld"}))["walkthrough"] == "alfworld"
    for bad in ("scienceworld", True):
        with pytest.raises(ValueError, match="walkthrough must name a benchmark the profile runs Anti-Persistence on"):
            load_profile(write(tmp_path, {**base, "walkthrough": bad}))
    with pytest.raises(ValueError, match="walkthrough must name"):
        load_profile(write(tmp_path, {**base, "methods": ["react"], "walkthrough": "alfworld"}))
    smoke = load_profile(ROOT / "params" / "main" / "smoke.yaml")
    specs = profile_specs(smoke, backbone_label="embedded-x", runs_root=tmp_path, cache_dir=tmp_path, judge=None)
    # two TextWorldExpress training tasks: the first update is never logged, the second is (B.5), so the
    # walked-through held-out decision reads a non-empty outcome log
    assert {s.train_per_iteration for s in specs if s.benchmark == smoke["walkthrough"]} == {2}
