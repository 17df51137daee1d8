"""A consolidation study's pool and builds: the trajectory pool every builder consumes, each (builder, regime)
memory built into its folder, and the snapshot steps a build's evaluation reads.

``obtain_pool`` builds the study's pool once (expert replays, earlier runs' episodes or a pool file) and keeps
it as ``pool.jsonl``; ``run_build`` builds one memory into ``memories/<builder>/<regime>/`` (``regimes.build_memory``:
one snapshot per update step, ``bank.json`` written when finished); ``snapshot_steps`` and ``evaluation_steps`` say
what each step holds and which are evaluated. The runner is ``consolidation.study``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.consolidation.bank import MemoryBank, load_bank
from antipersist_lib.consolidation.pool import (
    PoolRecord,
    expert_pool,
    load_pool,
    pool_from_runs,
    save_pool,
    summary_coverage,
)
from antipersist_lib.consolidation.profile import Build, StudyProfile
from antipersist_lib.consolidation.regimes import BANK_FILE, SNAPSHOTS_FILE, build_memory, make_builder
from antipersist_lib.consolidation.rollouts import EpisodeRollout
from antipersist_lib.core.agent import AgentConfig
from antipersist_lib.envs import make_env
from antipersist_lib.serving.profiles import agent_decoding

POOL_FILE = "pool.jsonl"
MEMORIES_DIR = "memories"


def obtain_pool(profile: StudyProfile, out: Path, *, root: Path | None = None) -> list[PoolRecord]:
    """The study's pool: ``<out>/pool.jsonl`` when a previous (resumed) run saved it, else built and saved."""
    saved = out / POOL_FILE
    if saved.exists():
        return load_pool(saved)
    base = root or Path.cwd()
    spec = profile.pool
    if spec.kind == "expert":
        pool = expert_pool(
            profile.benchmark,
            int(spec.per_type or 1),
            spec.seed,
            types=spec.types,
            split=spec.split,
            allow_fewer=spec.allow_fewer,
        )
    elif spec.kind == "runs":
        pool = pool_from_runs([base / r for r in spec.runs], successes_only=spec.successes_only)
    else:
        pool = load_pool(base / str(spec.file))
    save_pool(pool, saved)
    return pool


def pool_fingerprint(pool: Sequence[PoolRecord], path: Path | None = None) -> dict[str, Any]:
    """Size, per-type counts, the hash of the record ids (as the banks' meta) and of the pool file's bytes."""
    types: dict[str, int] = {}
    for r in pool:
        types[r.task_type] = types.get(r.task_type, 0) + 1
    out: dict[str, Any] = {
        "size": len(pool),
        "types": dict(sorted(types.items())),
        "successes": sum(1 for r in pool if r.outcome.success),
        "hash": hashlib.sha256("\n".join(r.rid for r in pool).encode("utf-8")).hexdigest()[:16],
        "sources": sorted({r.source for r in pool}),
    }
    if path is not None and path.exists():
        out["file_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def summary_budgets(profile: StudyProfile) -> dict[int, list[str]]:
    """Each size at which the study's builders summarize pool records -> what reads it there: ``<builder> input``
    (the prompt of a builder that calls a model) or ``<builder> log`` (a trajectory log stored in its bank)."""
    uses: dict[int, list[str]] = {}
    for b in profile.builders:
        builder = make_builder(b, llm=object(), embedder=object(), seed=0, **profile.options(b))
        if builder.needs_llm:
            uses.setdefault(builder.summary_chars, []).append(f"{b} input")
        if getattr(builder, "log_chars", None) is not None:
            uses.setdefault(builder.log_chars, []).append(f"{b} log")
    return dict(sorted(uses.items()))


def summaries_kept(profile: StudyProfile, pool: Sequence[PoolRecord]) -> dict[str, Any]:
    """The manifest's ``summaries``: per summary size the study uses, what reads it and how many of its actions
    each of the pool's summaries keeps (``pool.summary_coverage``, outcome line included: the longer form), so a
    budget too small for every action is visible in the study folder, not only in the prompts."""
    return {str(n): {"read_by": uses, **summary_coverage(pool, n)} for n, uses in summary_budgets(profile).items()}


def memory_dir(out: str | Path, build: Build) -> Path:
    return Path(out) / MEMORIES_DIR / build.builder / build.regime.name


def run_build(profile: StudyProfile, build: Build, pool: list[PoolRecord], out: Path, llm: Any, embedder: Any) -> None:
    """Build one memory into its folder (``memory_dir``; the study runs it as a unit, kept once ``bank.json`` is
    written); ``llm`` is the model of the build's regime."""
    folder = memory_dir(out, build)
    if folder.exists():  # an unfinished build: start again (the response cache answers its calls)
        shutil.rmtree(folder)
    r = build.regime
    initial = None
    if r.initial is not None:
        base = memory_dir(out, Build(build.builder, profile.regime(r.initial)))
        initial = (
            load_bank(base / BANK_FILE) if r.initial_step is None else load_bank(base / SNAPSHOTS_FILE, r.initial_step)
        )
    pool = regime_pool(pool, r)
    options = profile.options(build.builder)
    env = None
    if build.builder in ("ace", "ace_gt") and options.get("generator") == "rollout":
        # ACE's generator plays each task of a batch on the benchmark's engine with the playbook in context
        env = make_env(profile.benchmark, **profile.benchmark_options)
        backbone = build.regime.backbone or profile.backbone
        config = AgentConfig(max_steps=profile.max_steps, **{**agent_decoding(backbone), **profile.agent})
        options = {**options, "rollout": EpisodeRollout(env, llm, config, builder=build.builder)}
    builder = make_builder(build.builder, llm=llm, embedder=embedder, seed=profile.build_seed, **options)
    try:
        _build(profile, build, pool, builder, folder, initial)
    finally:
        if env is not None:
            env.close()


def regime_pool(pool: list[PoolRecord], regime: Any) -> list[PoolRecord]:
    """The records a regime builds from: the whole pool, or (``types``) those of its task types, in pool order.
    A type the pool lacks is an error naming the pool's types."""
    if regime.types is None:
        return pool
    held = list(dict.fromkeys(r.task_type for r in pool))
    missing = [t for t in regime.types if t not in held]
    if missing:
        raise ValueError(f"regimes.{regime.name}.types: the pool has no records of {missing}; it holds {held}")
    return [r for r in pool if r.task_type in regime.types]


def _build(
    profile: StudyProfile, build: Build, pool: list[PoolRecord], builder: Any, folder: Path, initial: Any
) -> None:
    r = build.regime
    build_memory(
        pool,
        builder,
        r.regime,
        batch_size=r.batch_size,
        homogeneous=True if r.homogeneous is None else r.homogeneous,
        capacity=r.capacity,
        seed=profile.build_seed,
        out_dir=folder,
        initial=initial,
        passes=r.passes,
        stages=r.stages,
        context_overflow=profile.context.overflow,
        regime_name=r.name,
    )


@dataclass(frozen=True)
class StepInfo:
    """What a snapshot step of a build holds (the memory a run evaluates)."""

    step: int
    updates: int
    examples_seen: int
    n_entries: int
    memory_chars: int
    update_errors: int
    pass_index: int | None = None  # the pool pass (1-based) this step's update belongs to; None: not cycled
    pass_end: bool = False  # this step's update ends a pass over the pool
    stage: int | None = None  # the stage of a staged stream


def snapshot_steps(snapshots: str | Path) -> list[StepInfo]:
    """Every step of a snapshots file with its memory's size, the examples the builder had seen and the
    updates whose reply could not be parsed (the bank then stayed as it was)."""
    lines = [json.loads(x) for x in Path(snapshots).read_text(encoding="utf-8").splitlines() if x.strip()]
    out, seen, errors = [], 0, 0
    first = int(lines[0]["step"]) if lines else 0
    for line in lines:
        event = line.get("event") or {}
        seen += len(event.get("batch", []) or [])
        errors += 1 if event.get("error") else 0
        bank = MemoryBank.from_dict(line["bank"])
        out.append(
            StepInfo(
                int(line["step"]),
                int(line["step"]) - first,
                seen,
                len(bank.entries),
                len(bank.render()),
                errors,
                pass_index=event.get("pass"),
                pass_end=bool(event.get("pass_end", False)),
                stage=event.get("stage"),
            )
        )
    return out


def evaluation_steps(profile: StudyProfile, build: Build, steps: Sequence[StepInfo]) -> list[StepInfo]:
    """The steps of one build that are evaluated (never its first: the empty or initial bank). Static regimes:
    the last step; streams: the regime's ``steps``, else the profile's ``evaluation.steps`` ("last", "all",
    a list of bank steps, ``{every: k}`` updates, or ``{every_pass: k}``: the end of every k-th pass over the
    pool), the last step always included."""
    if len(steps) < 2:
        return []
    later = steps[1:]
    rule = build.regime.steps if build.regime.steps is not None else profile.steps
    if build.regime.regime != "stream" or rule == "last":
        return [later[-1]]
    if rule == "all":
        return later
    if isinstance(rule, dict) and "every_pass" in rule:
        k = int(rule["every_pass"])
        return [
            s for s in later if (s.pass_end and s.pass_index is not None and s.pass_index % k == 0) or s is later[-1]
        ]
    if isinstance(rule, dict):
        k = int(rule["every"])
        return [s for s in later if s.updates % k == 0 or s is later[-1]]
    wanted = set(rule)
    return [s for s in later if s.step in wanted or s is later[-1]]
