"""The expert seed pools of a main-job profile (``seed_pools``: benchmark -> {per_type: N}): every memory design
of those benchmarks' runs starts from the same N expert replays per task type (``core.seeding``), built once
per (benchmark, seed) under the runs root and reused as they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import atomic_write_text
from antipersist_lib.runner.spec import RunSpec

#: where a profile's expert seed pools live, under its runs root (so a committed study carries them)
SEED_POOL_DIR = "seed_pools"


def seedable(method: str) -> bool:
    """Whether ``method`` keeps a trajectory store that can start from an expert pool (its ``seed_pool``)."""
    from antipersist_lib.methods import method_class

    return "seed_pool" in (getattr(method_class(method), "DEFAULTS", None) or {})


def seed_pool_path(runs_root: Path, bench: str, seed: int) -> Path:
    """The expert pool the memory designs of (``bench``, ``seed``) start from."""
    return Path(runs_root) / SEED_POOL_DIR / bench / f"seed{seed}.jsonl"


def run_tasks(spec: RunSpec) -> tuple[list[Any], list[Any]]:
    """The training pool and held-out tasks of a run (its partition, task types and limits)."""
    from antipersist_lib.envs.partitions import load_partition
    from antipersist_lib.records import limited_tasks
    from antipersist_lib.runner.spec import of_types

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
