"""A main-job profile (``params/main/*.yaml``): its keys and their checks, the runs it names (``profile_specs``:
one ``RunSpec`` per benchmark, seed and method or variant) and the order runs with work left are made in.

``runner.main_job`` runs a profile; ``runner.seed_pools`` builds the expert pools its memory designs start
from; ``runner.main_tables`` writes its results.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from antipersist_lib.core.skill_layer import params_for_seed
from antipersist_lib.envs import BENCHMARKS
from antipersist_lib.methods import METHODS
from antipersist_lib.profile_fields import ANY, CHOICE, INT, MAPPING, NAMES, STR, Checker, Field, Fields, Values
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.seed_pools import seed_pool_path, seedable
from antipersist_lib.runner.spec import AGENT_KEYS, PROTOCOL, SEEDS, TASK_TYPES, VARIANT, RunSpec, uses_judge
from antipersist_lib.serving.embedded import EMBEDDER_MODEL
from antipersist_lib.serving.profiles import NamedEndpoint, named_endpoint, read_mapping

RUN_ORDERS = ("benchmark", "seed")  # execution order of runs with work left (`execution_order`)
#: the embedded default's small protocol (a profile that says nothing runs a quick check, not the paper's grid)
MAIN_DEFAULTS = {"iterations": 2, "train_per_iteration": 2, "max_steps": 4, "heldout_concurrency": 1}
#: protocol settings a benchmark may override (``settings_by_benchmark``): a proxy benchmark with short games
#: needs fewer steps, a slow one fewer tasks; an absent key takes the profile's value
BENCHMARK_SETTINGS = Fields(
    *(PROTOCOL[k] for k in ("iterations", "train_per_iteration", "heldout_limit", "train_pool_limit", "max_steps")),
    TASK_TYPES,  # only tasks of these types (a benchmark's subset, e.g. the types planted skills cover)
    # a named held-out set of envs.partitions.HELDOUT_SETS instead of the partition's held-out split
    Field("heldout_set", STR, nullable=True),
    dataclasses.replace(SEEDS, default=None),  # a subset of the profile's seeds (a costly benchmark on fewer)
)
PROFILE = Fields(
    Field("run_order", CHOICE, default="benchmark", choices=RUN_ORDERS),
    Field("methods", NAMES, default=(), choices=tuple(METHODS)),
    Field("variants", MAPPING, what="a mapping of run names to {method, params}"),
    Field("benchmarks", NAMES, default=("scienceworld", "alfworld"), choices=BENCHMARKS),
    SEEDS,
    *(dataclasses.replace(f, default=MAIN_DEFAULTS.get(f.key, f.default)) for f in PROTOCOL.fields),
    Field("agent", MAPPING, keys=AGENT_KEYS),
    Field("agent_by_benchmark", MAPPING, what="a mapping of benchmark names to agent settings"),
    Field("method_params", MAPPING, keys=tuple(METHODS)),
    Field("backbone", MAPPING),  # the embedded default's options (serving.embedded.EmbeddedBackbone)
    Field("benchmark_options", MAPPING),
    Field(  # [] runs none; null: every notebook
        "notebooks",
        ANY,
        nullable=True,
        test=lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v),
        what="a list of notebook names",
    ),
    Field("notebook_profile", STR, default="smoke"),
    Field("settings_by_benchmark", MAPPING, what="a mapping of benchmark names to protocol settings"),
    Field("seed_pools", MAPPING, what="a mapping of benchmark names to {per_type: N}"),
    Field("run_concurrency", INT, default=1, minimum=1),
    Field("judge", ANY, nullable=True),  # checked by judge_model
    Field("walkthrough", ANY, nullable=True),  # a benchmark the profile runs Anti-Persistence on (checked below)
)
SEED_POOL = Fields(Field("per_type", INT, required=True, minimum=1))
#: a benchmark's own agent settings (``agent_by_benchmark``), over the profile's ``agent`` block
AGENT = Fields(*(Field(k) for k in AGENT_KEYS))


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read a main-job profile: every key checked (``PROFILE``) and every default filled in, before any run
    starts; an unknown key, method or benchmark, or a malformed value, is named in the error."""
    p = Path(path)
    check = Checker(p, lambda message: ValueError(f"profile {p}: {message}"), label="{key}")
    data = dict(check.read(read_mapping(p), None, PROFILE))
    variants = data["variants"]
    for name, v in variants.items():
        variants[name] = dict(check.read(v, f"variants.{name}", VARIANT))
        if name in data["methods"]:
            raise check.fail(f"variant name {name!r} collides with a method's run folder")
    if not data["methods"] and not variants:
        raise check.fail("nothing to run; give methods and/or variants")
    benches = set(data["benchmarks"])
    for key, spec in (("agent_by_benchmark", AGENT), ("settings_by_benchmark", BENCHMARK_SETTINGS)):
        stray = sorted(set(data[key]) - benches)
        if stray:
            raise check.fail(f"{key} names benchmark(s) {stray} that the profile does not run")
        data[key] = {bench: _given(check.read(over, f"{key}.{bench}", spec)) for bench, over in data[key].items()}
    for bench, over in data["settings_by_benchmark"].items():
        seeds = over.get("seeds")
        if seeds is not None and not set(seeds) <= set(data["seeds"]):
            raise check.fail(
                f"settings_by_benchmark.{bench}.seeds must be a non-empty list of the profile's seeds "
                f"{list(data['seeds'])}, got {seeds!r}"
            )
    check_seed_pools(data, check, benches)
    walk = data["walkthrough"]
    if walk is not None and (walk not in benches or "anti_persistence" not in {m for _, m, _ in run_plan(data)}):
        raise check.fail(f"walkthrough must name a benchmark the profile runs Anti-Persistence on, got {walk!r}")
    if data["notebooks"] is not None:
        from antipersist_lib.runner.notebooks_runner import notebook_paths

        known = [n.stem for n in notebook_paths()]
        bad = [n for n in data["notebooks"] if n not in known]
        if bad:
            raise check.fail(f"notebooks lists unknown notebook(s) {bad}; known: {known}")
    judge = judge_model(data, p)
    if judge is not None and not any(uses_judge(m, mp) for _, m, mp in run_plan(data)):
        raise check.fail(
            f"judge names {judge.name!r}, but no run of the profile calls a judge "
            "(abstraction_memory or joint_memory with judge: true)"
        )
    return data


def _given(values: Values) -> dict[str, Any]:
    """Only the keys a block set (an override block: an absent key keeps the profile's value)."""
    return {k: v for k, v in values.items() if k in values.given}


def check_seed_pools(data: dict[str, Any], check: Checker, benches: set[str]) -> None:
    """``seed_pools``: benchmark -> {per_type: N}: every memory design of those benchmarks' runs starts from
    the same N expert replays per task type (a model that never succeeds unaided has nothing else to keep)."""
    from antipersist_lib.envs.expert import EXPERT_BENCHMARKS

    pools = data["seed_pools"]
    for bench, spec in pools.items():
        if bench not in benches:
            raise check.fail(f"seed_pools names benchmark {bench!r}, which the profile does not run")
        if bench not in EXPERT_BENCHMARKS:
            raise check.fail(
                f"seed_pools.{bench}: no expert paths exist for it (they exist for {', '.join(EXPERT_BENCHMARKS)})"
            )
        pools[bench] = dict(check.read(spec, f"seed_pools.{bench}", SEED_POOL))
    if not pools:
        return
    plan = run_plan(data)
    if not any(seedable(m) for _, m, _ in plan):
        raise check.fail("seed_pools is set, but none of its methods keeps a trajectory store")
    given = [name for name, _, mp in plan if mp.get("seed_pool")]
    if given:
        raise check.fail(
            f"run(s) {given} set seed_pool in method_params and the profile sets seed_pools; give one or the other"
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
