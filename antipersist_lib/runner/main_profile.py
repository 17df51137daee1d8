"""A main-job profile (``params/main/*.yaml``): its keys and their checks, the runs it names (``profile_specs``:
one ``RunSpec`` per benchmark, seed and method or variant) and the order runs with work left are made in.

``runner.main_job`` runs a profile; ``runner.seed_pools`` builds the expert pools its memory designs start
from; ``runner.main_tables`` writes its results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from antipersist_lib.core.skill_layer import params_for_seed
from antipersist_lib.methods import METHODS
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.seed_pools import SEED_POOL_KEYS, seed_pool_path, seedable
from antipersist_lib.runner.spec import RunSpec, uses_judge
from antipersist_lib.serving.embedded import EMBEDDER_MODEL
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
