"""The README's main command: a small but complete experiment on the embedded default.

Starts the embedded backbone and embedder, runs every (benchmark, method, seed) of a profile
(``params/main/smoke.yaml``) through the real protocol, writes the run directories and a results
table that names the backbone and says how far it is from the paper's, and prints where
everything is. Everything it writes is labelled with the backbone that produced it.
"""

from __future__ import annotations

import csv
import json
import math
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from antipersist_lib.errors import EmbeddedServerError, LLMUnavailableError
from antipersist_lib.jsonl import atomic_write_json, atomic_write_text, read_jsonl
from antipersist_lib.methods import METHODS
from antipersist_lib.methods.frozen_skills import params_for_seed
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import (
    IterationSummary,
    RunSpec,
    run_cell,
    summarize_iteration,
    uses_judge,
    work_left,
)
from antipersist_lib.serving.embedded import EMBEDDER_MODEL, WEAK_MODEL_NOTE, EmbeddedBackbone, EmbeddedEmbedder
from antipersist_lib.serving.profiles import NamedEndpoint, named_endpoint, read_mapping

RUN_ORDERS = ("benchmark", "seed")  # execution order of runs with work left (`execution_order`)
PROFILE_KEYS = {
    "run_order",
    "methods",
    "variants",
    "benchmarks",
    "seeds",
    "iterations",
    "train_per_iteration",
    "heldout_limit",
    "train_pool_limit",
    "subset",
    "max_steps",
    "heldout_concurrency",
    "agent",
    "agent_by_benchmark",
    "method_params",
    "backbone",
    "benchmark_options",
    "notebooks",
    "notebook_profile",
    "settings_by_benchmark",
    "seed_pools",
    "run_concurrency",
    "judge",
    "walkthrough",
}
VARIANT_KEYS = {"method", "params"}
#: protocol settings a benchmark may override (``settings_by_benchmark``): a proxy benchmark with short
#: games needs fewer steps, a slow one fewer tasks
BENCHMARK_SETTING_KEYS = {
    "iterations",
    "train_per_iteration",
    "heldout_limit",
    "train_pool_limit",
    "max_steps",
    "task_types",  # only tasks of these types (a benchmark's subset, e.g. the types planted skills cover)
    "heldout_set",  # a named held-out set of envs.partitions.HELDOUT_SETS instead of the partition's held-out split
    "seeds",  # a subset of the profile's seeds (a costly benchmark run on fewer seeds)
}
#: where the wall time of every run is added up across invocations (a resumed run's sessions together)
WALL_FILE = "run_seconds.json"
MAX_BACKBONE_RESTARTS = 3
#: where a profile's expert seed pools live, under its runs root (so a committed study carries them)
SEED_POOL_DIR = "seed_pools"
SEED_POOL_KEYS = {"per_type"}
#: the key of ``WALL_FILE`` that holds the study's elapsed time (runs made side by side overlap, so their
#: wall times add up to more than the study took)
ELAPSED_KEY = "_elapsed"
#: a file of this name in the runs root asks a running study to stop once the runs in flight end (no new run
#: starts; re-running resumes): ``touch <runs root>/STOP``. The study removes it when it stops.
STOP_FILE = "STOP"


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read a main-job profile; unknown keys, methods or benchmarks are named in the error."""
    p = Path(path)
    data = read_mapping(p, PROFILE_KEYS)
    for m in data.get("methods", []):
        if m not in METHODS:
            raise ValueError(f"profile {p}: unknown method {m!r}; expected one of {tuple(METHODS)}")
    for m in data.get("method_params", {}) or {}:
        if m not in METHODS:
            raise ValueError(f"profile {p}: method_params names unknown method {m!r}")
    variants = data.get("variants") or {}
    if not isinstance(variants, dict):
        raise ValueError(f"profile {p}: variants must be a mapping of run names to {{method, params}}")
    for name, v in variants.items():
        if not isinstance(v, dict) or "method" not in v:
            raise ValueError(f"profile {p}: variant {name!r} needs a mapping with a 'method' key")
        extra = sorted(set(v) - VARIANT_KEYS)
        if extra:
            raise ValueError(
                f"profile {p}: variant {name!r} has unknown key(s) {extra}; allowed: {sorted(VARIANT_KEYS)}"
            )
        if v["method"] not in METHODS:
            raise ValueError(
                f"profile {p}: variant {name!r}: unknown method {v['method']!r}; expected one of {tuple(METHODS)}"
            )
        if name in data.get("methods", []):
            raise ValueError(f"profile {p}: variant name {name!r} collides with a method's run folder")
    by_bench = data.get("agent_by_benchmark") or {}
    if not isinstance(by_bench, dict) or not all(isinstance(v, dict) for v in by_bench.values()):
        raise ValueError(f"profile {p}: agent_by_benchmark must map benchmark names to agent settings")
    benches = set(data.get("benchmarks", ["scienceworld", "alfworld"]))
    stray = sorted(set(by_bench) - benches)
    if stray:
        raise ValueError(f"profile {p}: agent_by_benchmark names benchmark(s) {stray} that the profile does not run")
    settings = data.get("settings_by_benchmark") or {}
    if not isinstance(settings, dict) or not all(isinstance(v, dict) for v in settings.values()):
        raise ValueError(f"profile {p}: settings_by_benchmark must map benchmark names to protocol settings")
    stray = sorted(set(settings) - benches)
    if stray:
        raise ValueError(f"profile {p}: settings_by_benchmark names benchmark(s) {stray} that the profile does not run")
    for bench, over in settings.items():
        bad = sorted(set(over) - BENCHMARK_SETTING_KEYS)
        if bad:
            raise ValueError(
                f"profile {p}: settings_by_benchmark.{bench} has unknown key(s) {bad}; allowed: "
                f"{sorted(BENCHMARK_SETTING_KEYS)}"
            )
        seeds = over.get("seeds")
        if seeds is not None and (
            not isinstance(seeds, list) or not seeds or not set(seeds) <= set(data.get("seeds", [42]))
        ):
            raise ValueError(
                f"profile {p}: settings_by_benchmark.{bench}.seeds must be a non-empty list of the profile's seeds "
                f"{data.get('seeds', [42])}, got {seeds!r}"
            )
        types = over.get("task_types")
        if types is not None and (not isinstance(types, list) or not all(isinstance(t, str) for t in types)):
            raise ValueError(f"profile {p}: settings_by_benchmark.{bench}.task_types must be a list of task types")
    check_seed_pools(data, p, benches)
    walk = data.get("walkthrough")
    if walk is not None and (walk not in benches or "anti_persistence" not in {m for _, m, _ in run_plan(data)}):
        raise ValueError(
            f"profile {p}: walkthrough must name a benchmark the profile runs Anti-Persistence on, got {walk!r}"
        )
    order = data.get("run_order", "benchmark")
    if order not in RUN_ORDERS:
        raise ValueError(f"profile {p}: run_order must be one of {RUN_ORDERS}, got {order!r}")
    n = data.get("run_concurrency", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"profile {p}: run_concurrency must be an integer >= 1, got {n!r}")
    nbs = data.get("notebooks")
    if nbs is not None:
        from antipersist_lib.runner.notebooks_runner import notebook_paths

        known = [n.stem for n in notebook_paths()]
        bad = [n for n in nbs if n not in known] if isinstance(nbs, list) else [nbs]
        if bad:
            raise ValueError(f"profile {p}: notebooks lists unknown notebook(s) {bad}; known: {known}")
    if not data.get("methods") and not variants:
        raise ValueError(f"profile {p}: nothing to run; give methods and/or variants")
    judge = judge_model(data, p)
    if judge is not None and not any(uses_judge(m, mp) for _, m, mp in run_plan(data)):
        raise ValueError(
            f"profile {p}: judge names {judge.name!r}, but no run of the profile calls a judge "
            "(abstraction_memory or joint_memory with judge: true)"
        )
    return data


def seedable(method: str) -> bool:
    """Whether ``method`` keeps a trajectory store that can start from an expert pool (its ``seed_pool``)."""
    from antipersist_lib.methods import method_class

    return "seed_pool" in (getattr(method_class(method), "DEFAULTS", None) or {})


def check_seed_pools(data: dict[str, Any], path: Path, benches: set[str]) -> None:
    """``seed_pools``: benchmark -> {per_type: N}: every memory design of those benchmarks' runs starts from
    the same N expert replays per task type (a model that never succeeds unaided has nothing else to keep)."""
    from antipersist_lib.envs.expert import EXPERT_BENCHMARKS

    pools = data.get("seed_pools") or {}
    if not isinstance(pools, dict):
        raise ValueError(f"profile {path}: seed_pools must map benchmark names to {{per_type: N}}")
    for bench, spec in pools.items():
        if bench not in benches:
            raise ValueError(f"profile {path}: seed_pools names benchmark {bench!r}, which the profile does not run")
        if bench not in EXPERT_BENCHMARKS:
            raise ValueError(
                f"profile {path}: seed_pools.{bench}: no expert paths exist for it (they exist for "
                f"{', '.join(EXPERT_BENCHMARKS)})"
            )
        if not isinstance(spec, dict) or set(spec) != SEED_POOL_KEYS:
            raise ValueError(f"profile {path}: seed_pools.{bench} must be {{per_type: N}}, got {spec!r}")
        n = spec["per_type"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"profile {path}: seed_pools.{bench}.per_type must be an integer >= 1, got {n!r}")
    if not pools:
        return
    plan = run_plan(data)
    if not any(seedable(m) for _, m, _ in plan):
        raise ValueError(f"profile {path}: seed_pools is set, but none of its methods keeps a trajectory store")
    given = [name for name, _, mp in plan if mp.get("seed_pool")]
    if given:
        raise ValueError(
            f"profile {path}: run(s) {given} set seed_pool in method_params and the profile sets seed_pools; "
            "give one or the other"
        )


def seed_pool_path(runs_root: Path, bench: str, seed: int) -> Path:
    """The expert pool the memory designs of (``bench``, ``seed``) start from."""
    return Path(runs_root) / SEED_POOL_DIR / bench / f"seed{seed}.jsonl"


def run_tasks(spec: RunSpec) -> tuple[list[Any], list[Any]]:
    """The training pool and held-out tasks of a run (its partition, task types and limits)."""
    from antipersist_lib.envs.partitions import load_partition
    from antipersist_lib.records import limited_tasks
    from antipersist_lib.runner.protocol import of_types

    part = load_partition(spec.benchmark, heldout_set=spec.heldout_set)
    train = limited_tasks(of_types(part.train, spec.task_types), spec.train_pool_limit, spec.subset)
    held = limited_tasks(of_types(part.heldout, spec.task_types), spec.heldout_limit, spec.subset)
    return train, held


def run_task_types(spec: RunSpec) -> list[str]:
    """The task types a run meets (its training pool and held-out tasks), in split order."""
    train, held = run_tasks(spec)
    return list(dict.fromkeys(t.task_type for t in [*train, *held]))


def expert_seed_pool(spec: RunSpec, per_type: int, cache_dir: Path) -> list[dict[str, Any]]:
    """``per_type`` successful expert replays of each task type ``spec`` meets, as seed-pool records: the
    benchmark's training tasks outside the run's own training pool (so no training episode finds its own
    game's expert path in memory), tried in an order seeded by the run's seed, replayed on the engine
    (``core.demonstrations``, cached under ``cache_dir``). A type with fewer successful replays is an error."""
    import dataclasses

    from antipersist_lib.core.demonstrations import DemonstrationLibrary
    from antipersist_lib.envs import make_env
    from antipersist_lib.envs.partitions import load_partition

    part = load_partition(spec.benchmark)
    own = {t.key for t in run_tasks(spec)[0]}
    others = dataclasses.replace(part, train=tuple(t for t in part.train if t.key not in own))
    library = DemonstrationLibrary(others, spec.seed, per_type, cache_dir)
    types = run_task_types(spec)
    env = make_env(spec.benchmark, **spec.benchmark_options)
    try:
        library.prepare(env, types)
    finally:
        env.close()
    records = []
    for kind in types:
        demos = library.of_type(kind)[:per_type]
        if len(demos) < per_type:
            raise ValueError(
                f"seed_pools.{spec.benchmark}: only {len(demos)} of {per_type} expert replays of type {kind!r} "
                "succeeded among the training tasks outside the run's own; ask for fewer per type"
            )
        records += [{**d.to_dict(), "source": f"expert:{spec.benchmark}"} for d in demos]
    return records


def ensure_seed_pools(prof: dict[str, Any], specs: list[RunSpec], runs_root: Path, build: Any = None) -> list[Path]:
    """Build (once) the expert pool of every (benchmark, seed) whose runs start from one (``expert_seed_pool``).
    A pool on disk is reused as it is (runs that started from it must resume from the same records).
    ``build(spec, per_type)``: the records (tests pass their own)."""
    from antipersist_lib.jsonl import dumps_line

    pools = prof.get("seed_pools") or {}
    made: list[Path] = []
    for spec in specs:
        path = spec.method_params.get("seed_pool")
        if spec.benchmark not in pools or not path or Path(path).is_file():
            continue
        per_type = int(pools[spec.benchmark]["per_type"])
        print(f"building the expert seed pool {path} ({per_type} per type of {', '.join(run_task_types(spec))})")
        cache = Path(spec.cache_dir or runs_root) / "seed_pool_replays"  # the replays' cache, not the study's
        records = build(spec, per_type) if build is not None else expert_seed_pool(spec, per_type, cache)
        atomic_write_text(Path(path), b"".join(dumps_line(r) for r in records).decode("utf-8"))
        made.append(Path(path))
    return made


def judge_model(prof: dict[str, Any], path: str | Path = "profile") -> NamedEndpoint | None:
    """The profile's LLM judge (``judge:``, a backbone profile name or file, or an inline endpoint with
    name, model and base_url), for its runs that judge; None: those runs' backbone judges."""
    entry = prof.get("judge")
    return None if entry is None else named_endpoint(entry, "backbones", f"profile {path}: judge")


def run_plan(prof: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(run folder name, method, method params) for every method and named variant of a profile.

    A variant is one method with its own parameters (an ablation or sweep point); its params are
    layered over the profile's ``method_params`` for that method.
    """
    shared = prof.get("method_params") or {}
    plan = [(m, m, dict(shared.get(m, {}) or {})) for m in prof.get("methods", [])]
    for name, v in (prof.get("variants") or {}).items():
        plan.append((name, v["method"], {**(shared.get(v["method"], {}) or {}), **(v.get("params") or {})}))
    return plan


def _agent_summary(prof: dict[str, Any]) -> str:
    """One line naming the agent settings a reader needs beside the numbers (steps, demonstrations, aids)."""
    agent = prof.get("agent", {}) or {}
    shots = int(agent.get("icl_examples", 0) or 0)
    steps = {b: setting(prof, b, "max_steps", 4) for b in prof.get("benchmarks", [])}
    if len(set(steps.values())) > 1:
        parts = ["steps per episode: " + ", ".join(f"{b} {n}" for b, n in steps.items())]
    else:
        parts = [f"{prof.get('max_steps', 4)} steps per episode"]
    parts.append(f"{shots} expert demonstration(s) per task" if shots else "no demonstrations")
    if agent.get("show_valid_actions"):
        parts.append(f"up to {agent['show_valid_actions']} valid commands listed")
    if agent.get("resample_repeats"):
        aids = [f"{agent.get('repeat_rule', 'no_op')} rule"]
        aids += [name for name in ("repeat_feedback", "resample_unlisted") if agent.get(name)]
        parts.append(f"loop-breaking: {agent['resample_repeats']} resample(s), " + ", ".join(aids))
    for bench, pool in (prof.get("seed_pools") or {}).items():
        parts.append(f"{bench}: memories seeded with {pool['per_type']} expert replay(s) per task type")
    for bench, over in (prof.get("agent_by_benchmark") or {}).items():
        parts.append(f"{bench}: " + ", ".join(f"{k}={v}" for k, v in over.items()))
    parts.append(f"temperature {agent.get('temperature', 0.0)}")
    return "; ".join(parts)


def setting(prof: dict[str, Any], bench: str, key: str, default: Any) -> Any:
    """A protocol setting for one benchmark: its ``settings_by_benchmark`` entry, else the profile's, else ``default``."""
    over = (prof.get("settings_by_benchmark") or {}).get(bench, {}) or {}
    return over[key] if key in over else prof.get(key, default)


def profile_specs(
    prof: dict[str, Any], *, backbone_label: str, runs_root: Path, cache_dir: Path, judge: NamedEndpoint | None
) -> list[RunSpec]:
    """Every run of a profile, benchmark by benchmark (in the profile's order), then seed, then method: an
    interrupted study has every method of its first seeds, so its partial tables already pair methods."""
    specs = []
    pools = prof.get("seed_pools") or {}
    for bench in prof.get("benchmarks", ["scienceworld", "alfworld"]):
        for seed in setting(prof, bench, "seeds", [42]):
            for run_name, method, mparams in run_plan(prof):
                if bench in pools and seedable(method):  # every memory design starts from the same pool
                    mparams = {**mparams, "seed_pool": str(seed_pool_path(runs_root, bench, int(seed)))}
                specs.append(
                    RunSpec(
                        method=method,
                        benchmark=bench,
                        backbone=backbone_label,
                        embedding=EMBEDDER_MODEL,
                        seed=int(seed),
                        seeds_planned=tuple(int(x) for x in setting(prof, bench, "seeds", [42])),
                        iterations=int(setting(prof, bench, "iterations", 2)),
                        train_per_iteration=int(setting(prof, bench, "train_per_iteration", 2)),
                        max_steps=int(setting(prof, bench, "max_steps", 4)),
                        heldout_concurrency=int(prof.get("heldout_concurrency", 1)),
                        heldout_limit=setting(prof, bench, "heldout_limit", None),
                        train_pool_limit=setting(prof, bench, "train_pool_limit", None),
                        subset=prof.get("subset", "balanced"),
                        task_types=setting(prof, bench, "task_types", None),
                        heldout_set=setting(prof, bench, "heldout_set", None),
                        # the profile's agent block, with a benchmark's own overrides on top
                        agent={
                            **(prof.get("agent", {}) or {}),
                            **((prof.get("agent_by_benchmark") or {}).get(bench, {}) or {}),
                        },
                        method_params=params_for_seed(mparams, int(seed)),  # {seed}: this run's own store
                        benchmark_options=dict((prof.get("benchmark_options") or {}).get(bench, {})),
                        name=run_name,
                        out_root=str(runs_root),
                        cache_dir=str(cache_dir),
                        judge=judge.name if judge is not None and uses_judge(method, mparams) else None,
                    )
                )
    return specs


def execution_order(pending: list[RunSpec], order: str = "benchmark", seeds: list[int] | None = None) -> list[RunSpec]:
    """The order in which runs with work left are run. Runs already begun come first (a resumed study
    finishes what it started before it opens new run directories); the rest follow the profile's order
    (``"benchmark"``: benchmark, seed, method) or, with ``run_order: seed``, seed by seed across the
    benchmarks, so that a study stopped early holds every benchmark's first seed for every method. The
    tables keep the profile's order whatever the execution order. ``seeds``: the profile's seeds, in its
    order (default: ascending); the first benchmark's pending runs may already be past its first seeds."""
    if order not in RUN_ORDERS:
        raise ValueError(f"run_order must be one of {RUN_ORDERS}, got {order!r}")
    rank = {id(spec): i for i, spec in enumerate(pending)}
    seeds = [int(x) for x in seeds] if seeds is not None else sorted({spec.seed for spec in pending})

    def key(spec: RunSpec) -> tuple[int, int, int]:
        begun = RunDirectory(spec.run_dir()).is_run()
        return (0 if begun else 1, seeds.index(spec.seed) if order == "seed" else 0, rank[id(spec)])

    return sorted(pending, key=key)


def recorded_summaries(spec: RunSpec) -> list[IterationSummary]:
    """The per-iteration summaries of a finished run, recomputed from its episode logs (no model, no engine)."""
    layout = RunDirectory(spec.run_dir())
    train, held = layout.read_episodes("train"), layout.read_episodes("heldout")
    return [summarize_iteration(i, held, train) for i in sorted({r["iteration"] for r in held})]


def _row(spec: RunSpec, summaries: list[IterationSummary], backbone: str, seconds: float | None) -> dict[str, Any]:
    last = summaries[-1]
    return {
        "backbone": backbone,
        "benchmark": spec.benchmark,
        "run": spec.name,
        "method": spec.method,
        "seed": spec.seed,
        "iterations": len(summaries),
        "heldout_success_final": last.heldout_success,
        "heldout_score_final": last.heldout_score,
        "heldout_n": last.heldout_n,
        "mean_calls_per_task": last.mean_calls,
        "mean_steps": last.mean_steps,
        # an evaluation-only run (train_per_iteration: 0) has no training success: null, not NaN (JSON has none)
        "train_success": None if math.isnan(last.train_success) else last.train_success,
        "seconds": None if seconds is None else round(seconds, 1),
        # the run's model calls (all its sessions) and how many the response cache answered
        **_ledger_counts(spec),
        "run_dir": str(spec.run_dir()),
    }


def _ledger_counts(spec: RunSpec) -> dict[str, int]:
    calls = [x.value for x in read_jsonl(RunDirectory(spec.run_dir()).calls_path) if isinstance(x.value, dict)]
    return {"model_calls": len(calls), "calls_replayed": sum(1 for c in calls if c.get("cached"))}


def _read_seconds(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
    except (ValueError, AttributeError) as exc:
        raise ValueError(
            f"{path}: not a mapping of run folders to seconds ({exc}); delete it to start the count anew"
        ) from exc


def _run_key(spec: RunSpec, runs_root: Path) -> str:
    """A run's folder relative to the runs root (the same key wherever the root is checked out)."""
    return str(Path(spec.run_dir()).relative_to(runs_root))


def recorded_backbone(specs: list[RunSpec]) -> dict[str, Any]:
    """The embedded backbone as the runs' manifests recorded it (one model for the whole profile, checked)."""
    seen: dict[str, dict[str, Any]] = {}
    for spec in specs:
        manifest = RunDirectory(spec.run_dir()).read_manifest()
        described = manifest.get("embedded_backbone")
        if not described:
            raise ValueError(f"{spec.run_dir()}: its manifest records no embedded backbone (not a main-job run)")
        seen[described["model"]["sha256"]] = described
    if len(seen) != 1:
        raise ValueError(f"the runs were made with {len(seen)} different model files: {sorted(seen)}")
    return next(iter(seen.values()))


def profile_runs(
    profile_path: str | Path, *, out: str | Path = "outputs/main", runs: str | Path | None = None
) -> tuple[dict[str, Any], list[RunSpec], EmbeddedBackbone, NamedEndpoint | None, Path]:
    """(profile, its runs, the embedded backbone, the judge, the runs' folder) of a main-job profile; starts
    nothing (``run_main`` runs them, ``--plan`` prices them)."""
    prof = load_profile(profile_path)
    folder = Path(out) / Path(profile_path).stem
    runs_root = Path(runs) if runs is not None else folder / "runs"
    judge = judge_model(prof, profile_path)
    bb = EmbeddedBackbone.from_options(dict(prof.get("backbone", {}) or {}), log_path=folder / "llama_server.log")
    specs = profile_specs(prof, backbone_label=bb.label, runs_root=runs_root, cache_dir=folder / "cache", judge=judge)
    return prof, specs, bb, judge, runs_root


def run_main(
    profile_path: str | Path = "params/main/smoke.yaml",
    *,
    out: str | Path = "outputs/main",
    runs: str | Path | None = None,
    execute_notebooks: bool = True,
    report_only: bool = False,
) -> dict[str, Any]:
    """Run (or resume) every run of a main-job profile on the embedded default and write the results
    table; ``runs``: where the run directories live (default ``<out>/<profile>/runs``). When every run is
    already complete (e.g. a committed study), nothing is started: the tables are recomputed from the
    recorded episodes, without a model call. ``report_only``: start nothing whatever is left, and write the
    tables of the runs that are complete (a study in progress, read while it runs elsewhere)."""
    prof, specs, bb, judge, runs_root = profile_runs(profile_path, out=out, runs=runs)
    name = Path(profile_path).stem
    out = Path(out) / name
    out.mkdir(parents=True, exist_ok=True)
    seconds_path = runs_root / WALL_FILE
    seconds = _read_seconds(seconds_path)
    pending = execution_order(
        [spec for spec in specs if work_left(spec)], prof.get("run_order", "benchmark"), prof.get("seeds", [42])
    )
    n_profile = len(specs)
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    restarts: list[dict[str, Any]] = []
    if report_only:
        done = [spec for spec in specs if spec not in pending]
        print(f"{len(done)} of {len(specs)} runs are complete: their tables, no model is started")
        if not done:
            raise ValueError(f"no run of {profile_path} under {runs_root} is complete yet: nothing to report")
        described = recorded_backbone(done)
        specs, pending = done, []
    elif pending:
        print(f"{len(pending)} of {len(specs)} runs have work left; starting the embedded default")
        described = _run_pending(
            specs,
            pending,
            bb,
            judge,
            runs_root,
            seconds,
            seconds_path,
            restarts,
            int(prof.get("run_concurrency", 1)),
            prepare=lambda spec: ensure_seed_pools(prof, [spec], runs_root),
        )
        left = [spec for spec in specs if work_left(spec)]
        if left:  # stopped on request (STOP_FILE) before every run was made: report the complete ones
            print(f"stopped with {len(left)} of the {len(specs)} runs still to make; re-run the same command to resume")
            report_only = True
            specs = [spec for spec in specs if spec not in left]
    else:
        print(f"every one of the {len(specs)} runs under {runs_root} is complete: recomputing, no model is started")
        described = recorded_backbone(specs)
    display = bb.display_name if pending else f"{_title(described)} (embedded llama.cpp, {described['server']})"
    for spec in specs:
        rows.append(_row(spec, recorded_summaries(spec), display, seconds.get(_run_key(spec, runs_root))))
    wall = time.monotonic() - t0
    study_s = sum(seconds.get(_run_key(spec, runs_root), 0.0) for spec in specs)
    elapsed_s = seconds.get(ELAPSED_KEY)
    _write_tables(out, name, prof, rows, described, display, wall, study_s, elapsed_s, n_profile)
    summary = {
        "profile": str(profile_path),
        "backbone": display,
        "backbone_label": bb.label,
        "embedded_backbone": described,
        "embedder": EMBEDDER_MODEL,
        "note": WEAK_MODEL_NOTE,
        "wall_s": round(wall, 1),
        "study_s": round(study_s, 1),
        "elapsed_s": None if elapsed_s is None else round(elapsed_s, 1),
        "recomputed_only": not pending,
        "runs_reported": len(specs),
        "runs_in_profile": n_profile,
        "runs_root": str(runs_root),
        "max_steps": {b: setting(prof, b, "max_steps", 4) for b in prof.get("benchmarks", [])},
        "backbone_restarts": restarts,
        "rows": rows,
        # the benchmark whose Anti-Persistence run the command line walks through (Appendix C), if any
        "walkthrough": prof.get("walkthrough"),
    }
    atomic_write_json(out / "results.json", summary)
    if not execute_notebooks or report_only:
        return summary
    from antipersist_lib.runner.notebooks_runner import execute_on_runs

    # beside the job's own results (outputs/main/<profile>/notebooks/<notebook>/), never over a profile's
    executed = execute_on_runs(
        runs_root,
        profile=str(prof.get("notebook_profile", "smoke")),
        only=prof.get("notebooks"),
        out=out / "notebooks",
    )
    summary["notebooks"] = [str(e.output) for e in executed]
    atomic_write_json(out / "results.json", summary)
    return summary


def _title(described: dict[str, Any]) -> str:
    """A recorded model's display title (the registry's, else its file name)."""
    from antipersist_lib.serving.models import REGISTRY

    name = described["model"].get("name")
    spec = REGISTRY.get(name) if name else None
    return spec.title if spec is not None else str(described["model"].get("file", name))


def _run_pending(
    specs: list[RunSpec],
    pending: list[RunSpec],
    bb: EmbeddedBackbone,
    judge: NamedEndpoint | None,
    runs_root: Path,
    seconds: dict[str, float],
    seconds_path: Path,
    restarts: list[dict[str, Any]],
    concurrency: int = 1,
    prepare: Any = None,
) -> dict[str, Any]:
    """Start the embedded default and run (resume) the runs with work left, ``concurrency`` at a time (in
    profile order), adding each run's wall time to ``seconds_path`` after every episode (so an interrupted
    study keeps what it spent) and the study's elapsed time under ``ELAPSED_KEY``. ``prepare(spec)`` runs
    before a run starts, one at a time (it builds the run's seed pool when it has none yet)."""
    # One BLAS thread: the llama.cpp server keeps a core busy, and a multi-threaded BLAS waiting
    # for that core stalls every similarity product (measured: 24 ms vs 0.7 ms at 500 records).
    with threadpool_limits(limits=1), bb, EmbeddedEmbedder() as em:
        described = bb.describe()
        features = ", ".join(described["llama_cpp_build"]["features"] or [])
        print(
            f"embedded backbone up: {bb.display_name} at {bb.base_url} (model sha256 {bb.model.sha256[:12]}..., "
            f"llama.cpp baseline {bb.build.baseline}: {features}; first token in {bb.first_token_s} s); "
            f"embedder {EMBEDDER_MODEL} at {em.base_url}"
        )
        print(f"note: {WEAK_MODEL_NOTE}")
        clock = _WallClock(runs_root, seconds, seconds_path)
        numbered = {id(spec): n for n, spec in enumerate(pending, 1)}
        preparing = threading.Lock()  # two runs of one seed share its pool: it is built once

        def one(spec: RunSpec, restartable: bool) -> None:
            print(
                f"run {numbered[id(spec)]} of the {len(pending)} with work left ({len(specs)} in the profile): "
                f"{spec.run_dir()}",
                flush=True,
            )
            if prepare is not None:
                with preparing:
                    prepare(spec)
            count = clock.counter(spec)
            try:
                _run_one(spec, bb, em, judge, restarts, on_event=count, restartable=restartable)
            finally:
                count()

        stop = runs_root / STOP_FILE
        if concurrency <= 1:
            for spec in pending:
                if stop_requested(stop):
                    break
                one(spec, restartable=True)
        else:
            _run_side_by_side(pending, concurrency, bb, restarts, lambda spec: one(spec, restartable=False), stop=stop)
    return described


def stop_requested(stop: Path | None) -> bool:
    """True (once, removing the file) when ``stop`` exists: the study starts no new run."""
    if stop is None or not stop.exists():
        return False
    print(f"found {stop}: the runs in flight finish, no new run starts (re-run to resume)", flush=True)
    stop.unlink(missing_ok=True)
    return True


class _WallClock:
    """Each run's wall time and the study's elapsed time, saved to ``WALL_FILE`` after every episode."""

    def __init__(self, runs_root: Path, seconds: dict[str, float], path: Path) -> None:
        self.runs_root, self.seconds, self.path = runs_root, seconds, path
        self.lock = threading.Lock()
        self.last_elapsed = time.monotonic()

    def counter(self, spec: RunSpec) -> Any:
        key = _run_key(spec, self.runs_root)
        last = [time.monotonic()]

        def count(*_: Any) -> None:
            """Add the time since the last count to the run's total (and the study's) and save both: after every
            episode, so a study killed without warning (SIGTERM, SIGKILL) keeps all but its last episode's time."""
            with self.lock:
                now = time.monotonic()
                self.seconds[key] = self.seconds.get(key, 0.0) + (now - last[0])
                self.seconds[ELAPSED_KEY] = self.seconds.get(ELAPSED_KEY, 0.0) + (now - self.last_elapsed)
                last[0] = self.last_elapsed = now
                atomic_write_json(self.path, {k: round(v, 1) for k, v in sorted(self.seconds.items())})

        return count


def _run_side_by_side(
    pending: list[RunSpec],
    concurrency: int,
    bb: EmbeddedBackbone,
    restarts: list[dict[str, Any]],
    one: Any,
    stop: Path | None = None,
) -> None:
    """Run ``pending`` ``concurrency`` at a time, in order. A dead server fails every run in flight: they are
    let finish failing, the server is restarted once from this (the main) thread, so that it stays tied to
    the kit's process, and those runs resume first. Any other error stops the study once the runs in flight
    have ended (completed work is saved; re-running resumes). A ``stop`` file (``STOP_FILE``) that appears
    lets the runs in flight finish and starts no new one."""
    queue = list(pending)
    deaths = 0
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="run") as pool:
        running: dict[Future[None], RunSpec] = {}
        failure: BaseException | None = None
        while queue or running:
            if queue and stop_requested(stop):
                queue.clear()
            while queue and len(running) < concurrency and failure is None:
                spec = queue.pop(0)
                running[pool.submit(one, spec)] = spec
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                spec = running.pop(fut)
                exc = fut.exception()
                if exc is None:
                    continue
                if isinstance(exc, LLMUnavailableError) and bb.exit_code is not None:
                    queue.insert(0, spec)  # the server died under it: resume it after the restart
                elif failure is None:
                    failure = exc
            if bb.exit_code is not None and failure is None:
                for fut in list(running):  # every run in flight fails against a dead server: let them
                    fut.exception()
                    queue.insert(0, running.pop(fut))
                report = bb.crash_report("it died during the study")
                deaths += 1
                if deaths > MAX_BACKBONE_RESTARTS:
                    raise EmbeddedServerError(
                        f"{report}\n(it died {deaths} times; completed work is saved, re-running resumes)"
                    )
                print(f"{report}\nrestarting it and resuming the runs in flight", flush=True)
                restarts.append({"run": str(queue[0].run_dir()), "exit_code": bb.exit_code})
                bb.restart()
            if failure is not None and not running:
                raise failure


def _run_one(
    spec: RunSpec,
    bb: EmbeddedBackbone,
    em: EmbeddedEmbedder,
    judge: NamedEndpoint | None,
    restarts: list,
    on_event: Any = None,
    restartable: bool = True,
) -> None:
    """One run; a server that dies under it is restarted here (``restartable``: serial runs, on the main
    thread) or the error goes to the caller (runs side by side: ``_run_side_by_side`` restarts it once)."""
    for attempt in range(MAX_BACKBONE_RESTARTS + 1):
        try:
            run_cell(
                spec,
                endpoint=bb.endpoint,
                embed_endpoint=em.endpoint,
                judge_endpoint=judge.endpoint if spec.judge else None,
                backbone_info=bb.describe(),
                on_event=on_event,
            )
            return
        except LLMUnavailableError as exc:
            code = bb.exit_code
            if code is None or not restartable:
                raise  # the server is alive: stop, resumable
            report = bb.crash_report(f"it died during run {spec.run_dir()}")
            if attempt == MAX_BACKBONE_RESTARTS:
                raise EmbeddedServerError(
                    f"{report}\n(it died {attempt + 1} times; completed work is saved, re-running resumes)"
                ) from exc
            print(f"{report}\nrestarting it and resuming the run")
            restarts.append({"run": str(spec.run_dir()), "exit_code": code})
            bb.restart()


def seed_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (benchmark, run) of the results rows: mean and sample sd over seeds of held-out success
    (%), the engine's score, calls per task and steps, and the runs' summed wall time; in the rows' order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["benchmark"], r["run"]), []).append(r)

    def mean_sd(values: list[float]) -> tuple[float, float | None]:
        m = sum(values) / len(values)
        if len(values) < 2:
            return m, None
        return m, (sum((v - m) ** 2 for v in values) / (len(values) - 1)) ** 0.5

    out = []
    for (bench, run), rs in groups.items():
        success = mean_sd([100 * r["heldout_success_final"] for r in rs])
        score = mean_sd([r["heldout_score_final"] for r in rs])
        secs = [r["seconds"] for r in rs if r["seconds"] is not None]
        out.append(
            {
                "benchmark": bench,
                "run": run,
                "method": rs[0]["method"],
                "seeds": len(rs),
                "heldout_n": "/".join(sorted({str(r["heldout_n"]) for r in rs})),
                "success_mean": success[0],
                "success_sd": success[1],
                "score_mean": score[0],
                "score_sd": score[1],
                "calls_mean": mean_sd([r["mean_calls_per_task"] for r in rs])[0],
                "steps_mean": mean_sd([r["mean_steps"] for r in rs])[0],
                "hours": sum(secs) / 3600 if secs else None,
            }
        )
    return out


def _pm(mean: float, sd: float | None, decimals: int) -> str:
    return f"{mean:.{decimals}f}" + ("" if sd is None else f" ± {sd:.{decimals}f}")


def _write_tables(
    out: Path,
    name: str,
    prof: dict[str, Any],
    rows: list[dict[str, Any]],
    described: dict[str, Any],
    display: str,
    wall: float,
    study_s: float,
    elapsed_s: float | None = None,
    n_profile: int | None = None,
) -> None:
    if not rows:  # a study stopped before its first run was complete: no table yet
        return
    with open(out / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    summary = seed_summary(rows)
    with open(out / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(summary[0]))
        w.writeheader()
        w.writerows(summary)
    features = ", ".join(described["llama_cpp_build"]["features"] or [])
    model = described["model"]
    lines = [
        f"# Main job ({name}) on the embedded default: {display}",
        "",
        f"> {WEAK_MODEL_NOTE}",
        "",
        f"Model file `{model['file']}` (sha256 `{model['sha256']}`); llama.cpp build for baseline "
        f"`{described['llama_cpp_build'].get('baseline')}` (compiled features: {features}); agent: {_agent_summary(prof)}.",
        "",
    ]
    if n_profile is not None and n_profile > len(rows):
        lines += [
            f"**A study in progress**: {len(rows)} of the profile's {n_profile} runs are complete; the tables "
            "hold those only.",
            "",
        ]
    lines += [
        "Held-out results after the final iteration, mean ± sd over seeds (sd over the seeds' run means; "
        "n: held-out tasks per seed):",
        "",
        "| benchmark | run | seeds | n | held-out success (%) | held-out score | calls/task | steps | wall time (h) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in summary:
        lines.append(
            f"| {c['benchmark']} | {c['run']} | {c['seeds']} | {c['heldout_n']} | "
            f"{_pm(c['success_mean'], c['success_sd'], 1)} | {_pm(c['score_mean'], c['score_sd'], 2)} | "
            f"{c['calls_mean']:.2f} | {c['steps_mean']:.2f} | "
            + ("-" if c["hours"] is None else f"{c['hours']:.2f}")
            + " |"
        )
    lines += [
        "",
        "Each run:",
        "",
        "| benchmark | run | seed | held-out success (final it.) | held-out score | n | calls/task | steps | "
        "calls replayed from the cache | run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['benchmark']} | {r['run']} | {r['seed']} | {100 * r['heldout_success_final']:.1f}% | "
            f"{r['heldout_score_final']:.2f} | {r['heldout_n']} | "
            f"{r['mean_calls_per_task']:.2f} | {r['mean_steps']:.2f} | "
            f"{r['calls_replayed']} of {r['model_calls']} | `{r['run_dir']}` |"
        )
    lines += [
        "",
        "Held-out score is the engine's own: ScienceWorld's 0-100 partial credit (negative when the task was "
        "failed), ALFWorld's 0/1, TextWorldExpress's 0-1 partial credit.",
        "",
        f"Wall time of the runs, all sessions together: {study_s / 3600:.2f} h"
        + (
            f" (the study's elapsed time: {elapsed_s / 3600:.2f} h; runs made side by side overlap)"
            if elapsed_s is not None and elapsed_s < study_s - 1
            else ""
        )
        + f"; of this invocation: {wall / 60:.1f} min (backbone {display}, embedder {EMBEDDER_MODEL}).",
    ]
    atomic_write_text(out / "results.md", "\n".join(lines) + "\n")
