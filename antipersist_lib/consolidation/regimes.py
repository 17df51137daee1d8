"""The memory construction conditions of §3: Static-All, Static-Group, Stream.

The regimes differ only in how the fixed pool reaches a builder: Static-All in one update; Static-Group one update
per task type, each on an empty bank, the banks then joined (the paper's offline control); Stream in batches
(homogeneous or heterogeneous), with the bank unbounded or FIFO-capped (``capacity``). A stream may also cycle
the pool (``passes``) or draw ``stages`` of batches, and each prompt is measured against the context first
(``context.py``). Every step is snapshotted, so a utility-vs-updates curve can be drawn from any run.

docs/faulty-memories.md, "Consolidation over trajectory pools" (Regimes; Repeated passes and stages; Context
budget) and "The consolidation code's own readings, module by module" (Regimes: snapshot files and Static-Group).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.consolidation import prompts as P
from antipersist_lib.consolidation.ace import ACE
from antipersist_lib.consolidation.awm import AWM
from antipersist_lib.consolidation.bank import MemoryBank, snapshot_line
from antipersist_lib.consolidation.cheatsheet import DynamicCheatsheet
from antipersist_lib.consolidation.clin import CLIN
from antipersist_lib.consolidation.context import (
    CONTEXT_POLICIES,
    TRUNCATE_OLDEST,
    ContextGuard,
    ContextOverflowError,
    keep_fraction,
)
from antipersist_lib.consolidation.episodic import AllLogs, FewShot, KeepCurator
from antipersist_lib.consolidation.pool import (
    STAGE_RULES,
    PoolRecord,
    batches,
    check_pool,
    group_by_type,
    stage_batches,
)
from antipersist_lib.jsonl import JsonlWriter

REGIMES = ("static_all", "static_group", "stream")
#: builder names for ``make_builder``; ``fs<N>`` (e.g. fs64) is FS=N
BUILDERS = ("ace", "ace_gt", "awm", "dc", "clin", "all", "keep", "fs<N>")
SNAPSHOTS_FILE = "snapshots.jsonl"
BANK_FILE = "bank.json"


@dataclass(frozen=True)
class StageSpec:
    """A staged stream (faulty-memories G.1, G.2): ``count`` updates, each on a fresh draw by ``rule``
    (``pool.STAGE_RULES``) from the first ``per_type_limit`` records of each type (None: all)."""

    count: int
    rule: str
    per_type_limit: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"stages must be an integer >= 1, got {self.count!r}")
        if self.rule not in STAGE_RULES:
            raise ValueError(f"stage rule must be one of {STAGE_RULES}, got {self.rule!r}")

    def describe(self) -> dict[str, Any]:
        return {"count": self.count, "rule": self.rule, "per_type_limit": self.per_type_limit}


def make_builder(name: str, *, llm: Any = None, embedder: Any = None, seed: int = 0, **options: Any) -> Any:
    """A builder by name (Tables 2-3 columns): options go to its constructor."""
    if name in ("ace", "ace_gt"):
        return ACE(llm, embedder, ground_truth=name == "ace_gt", **options)
    simple = {"awm": AWM, "dc": DynamicCheatsheet, "clin": CLIN, "keep": KeepCurator}
    if name in simple:
        return simple[name](llm, **options)
    if name == "all":
        return AllLogs(**options)
    m = re.fullmatch(r"fs(\d+)", str(name))
    if m:
        return FewShot(int(m.group(1)), seed, **options)
    raise ValueError(f"unknown memory builder {name!r}; expected one of {BUILDERS}")


def build_memory(
    pool: Sequence[PoolRecord],
    builder: Any,
    regime: str,
    *,
    batch_size: int | None = None,
    homogeneous: bool = True,
    capacity: int | None = None,
    seed: int = 0,
    llm: Any = None,
    embedder: Any = None,
    out_dir: str | os.PathLike[str] | None = None,
    initial: MemoryBank | None = None,
    passes: int = 1,
    stages: StageSpec | None = None,
    context_overflow: str | None = None,
    regime_name: str | None = None,
) -> MemoryBank:
    """Build a bank from ``pool`` under ``regime``; ``builder`` is a name or an object with
    ``update(bank, batch) -> bank``. Returns the final bank.

    Stream only: ``passes`` cycles the pool that many times (module docstring), ``stages`` replaces the
    partition by independently drawn stage batches. ``context_overflow`` (``context.CONTEXT_POLICIES``)
    measures every consolidation prompt against the builder's backbone before it is sent: the builder's
    model (``builder.llm``) is wrapped in a ``ContextGuard``; None sends prompts unmeasured."""
    records = check_pool(pool)
    if isinstance(builder, str):
        builder = make_builder(builder, llm=llm, embedder=embedder, seed=seed)
    elif not callable(getattr(builder, "update", None)):
        raise TypeError(f"builder must be a name or have update(bank, batch), got {type(builder).__name__}")
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; expected one of {REGIMES}")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"capacity must be None (unbounded) or an integer >= 1, got {capacity!r}")
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"passes must be an integer >= 1, got {passes!r}")
    if stages is not None and not isinstance(stages, StageSpec):
        raise TypeError(f"stages must be a StageSpec, got {type(stages).__name__}")
    if regime != "stream" and (passes != 1 or stages is not None):
        raise ValueError(f"passes and stages apply to the stream regime only, not {regime!r}")
    if stages is not None and passes != 1:
        raise ValueError("a stream has either passes (cycling the pool) or stages (sampled batches), not both")
    if context_overflow is not None and context_overflow not in CONTEXT_POLICIES:
        raise ValueError(f"context_overflow must be None or one of {CONTEXT_POLICIES}, got {context_overflow!r}")
    if stages is not None:  # the stage rule decides the batches' composition
        homogeneous = stages.rule == "single_type"
    if regime == "stream":
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"the stream regime needs batch_size, an integer >= 1; got {batch_size!r}")
        plan = _stream_plan(records, batch_size, homogeneous, seed, passes, stages)
    elif batch_size is not None:
        raise ValueError(f"batch_size applies to the stream regime only, not {regime!r}")
    elif regime == "static_all":
        plan = [(records, None, {})]
    else:
        plan = [(members, kind, {}) for kind, members in group_by_type(records).items()]
    if initial is not None and not isinstance(initial, MemoryBank):
        raise TypeError(f"initial must be a MemoryBank, got {type(initial).__name__}")

    name = str(getattr(builder, "name", type(builder).__name__))
    guard = None
    if context_overflow is not None and getattr(builder, "llm", None) is not None:
        inner = builder.llm.llm if isinstance(builder.llm, ContextGuard) else builder.llm
        guard = ContextGuard(inner, builder=name, regime=regime_name or regime, policy=context_overflow)
        builder.llm = guard
    bank = initial.copy() if initial is not None else MemoryBank(name)
    bank.method = name
    bank.capacity = capacity if capacity is not None else bank.capacity
    bank.meta = _meta(builder, regime, records, batch_size, homogeneous, capacity, seed, initial)
    if regime == "stream":
        bank.meta["passes"] = passes
        bank.meta["stages"] = None if stages is None else stages.describe()
    if guard is not None:
        bank.meta["context"] = {**guard.record(), "truncated_updates": 0, "dropped_records": 0}
    snaps = _Snapshots(out_dir) if out_dir is not None else None
    try:
        if snaps:
            snaps.write(bank, None)
        for batch, kind, where in plan:
            if kind is None:
                bank, cut = _update(builder, bank, batch, guard)
                event = bank.history[-1] if bank.history else None
            else:  # Static-Group: the group starts from an empty bank, then joins the others
                part, cut = _update(
                    builder,
                    MemoryBank(name, step=bank.step, capacity=bank.capacity, next_id=bank.next_id),
                    batch,
                    guard,
                )
                event = dict(part.history[-1], group=kind) if part.history else {"step": part.step, "group": kind}
                bank = MemoryBank(
                    name,
                    entries=bank.entries + part.entries,
                    step=part.step,
                    capacity=bank.capacity,
                    next_id=part.next_id,
                    history=bank.history + [event],
                    meta=bank.meta,
                )
            if event is not None and where:
                event.update(where)
            if event is not None and cut is not None:
                event["context_truncated"] = cut
                bank.meta["context"]["truncated_updates"] += 1
                bank.meta["context"]["dropped_records"] += len(cut["dropped"])
            if snaps:
                snaps.write(bank, event)
    finally:
        if snaps:
            snaps.close()
    if guard is not None:
        bank.meta["context"]["largest_prompt_tokens"] = guard.largest_tokens
    if snaps:
        bank.save(snaps.dir / BANK_FILE)
    return bank


def _stream_plan(
    records: list[PoolRecord], batch_size: int, homogeneous: bool, seed: int, passes: int, stages: StageSpec | None
) -> list[tuple[list[PoolRecord], None, dict[str, Any]]]:
    """The stream's updates with where each falls: ``pass`` (1-based) and ``pass_end`` for cycled pools,
    ``stage`` for staged streams."""
    if stages is not None:
        drawn = stage_batches(
            records, stages.count, batch_size, stages.rule, seed, per_type_limit=stages.per_type_limit
        )
        return [(b, None, {"stage": i}) for i, b in enumerate(drawn, start=1)]
    plan: list[tuple[list[PoolRecord], None, dict[str, Any]]] = []
    for p in range(passes):
        cut = batches(records, batch_size, homogeneous, seed + p)
        plan.extend((b, None, {"pass": p + 1, "pass_end": i == len(cut) - 1}) for i, b in enumerate(cut))
    return plan


def _update(
    builder: Any, bank: MemoryBank, batch: list[PoolRecord], guard: ContextGuard | None
) -> tuple[MemoryBank, dict[str, Any] | None]:
    """One update; under ``truncate_oldest`` an update whose prompt overflows is retried with the batch's
    oldest records dropped (proportionally to the overflow), returning what was cut."""
    kept = list(batch)
    first_needed = None
    while True:
        try:
            new = builder.update(bank, kept)
        except ContextOverflowError as exc:
            if guard is None or guard.policy != TRUNCATE_OLDEST:
                raise
            first_needed = first_needed or exc.needed_tokens
            keep = keep_fraction(exc, len(kept))
            if keep < 1:
                raise ContextOverflowError(
                    f"{exc} -- policy 'truncate_oldest' cannot help: not even one record of the batch fits beside "
                    "the reply cap, the instructions and the memory",
                    needed_tokens=exc.needed_tokens,
                    context_length=exc.context_length,
                    reply_tokens=exc.reply_tokens,
                ) from None
            kept = kept[len(kept) - keep :]
            continue
        if len(kept) == len(batch):
            return new, None
        dropped = [r.rid for r in batch[: len(batch) - len(kept)]]
        return new, {"dropped": dropped, "kept": len(kept), "first_prompt_tokens": first_needed}


class _Snapshots:
    """snapshots.jsonl of one build; refuses a folder that already holds one (no mixed runs)."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(out_dir)
        path = self.dir / SNAPSHOTS_FILE
        if path.exists():
            raise FileExistsError(f"{path} already exists: build into an empty folder (or delete the old build)")
        self.writer = JsonlWriter(path, fsync=False)

    def write(self, bank: MemoryBank, event: dict[str, Any] | None) -> None:
        self.writer.append(snapshot_line(bank, event))

    def close(self) -> None:
        self.writer.close()


def _meta(
    builder: Any,
    regime: str,
    records: list[PoolRecord],
    batch_size: int | None,
    homogeneous: bool,
    capacity: int | None,
    seed: int,
    initial: MemoryBank | None,
) -> dict[str, Any]:
    types: dict[str, int] = {}
    for r in records:
        types[r.task_type] = types.get(r.task_type, 0) + 1
    describe = getattr(builder, "describe", None)
    return {
        "regime": regime,
        "builder": describe() if callable(describe) else {"builder": type(builder).__name__},
        "batch_size": batch_size,
        "homogeneous": bool(homogeneous) if regime == "stream" else None,
        "capacity": capacity,
        "seed": seed,
        "pool": {
            "size": len(records),
            "types": dict(sorted(types.items())),
            "hash": hashlib.sha256("\n".join(r.rid for r in records).encode("utf-8")).hexdigest()[:16],
        },
        "prompt_hashes": P.hashes(tuple(getattr(builder, "prompt_names", ()))),
        "initial": None if initial is None else {"method": initial.method, "step": initial.step},
    }


def incremental_keep(
    pool: Sequence[PoolRecord], llm: Any, *, batch_size: int, homogeneous: bool = False, seed: int = 0, **kw: Any
) -> MemoryBank:
    """Incr. Keep: the keep/delete curator over Stream batches (``build_memory`` with ``out_dir`` keeps
    every step). It lives here, not beside One-Pass Keep in ``episodic``, because it needs the regimes."""
    return build_memory(
        pool, KeepCurator(llm, **kw), "stream", batch_size=batch_size, homogeneous=homogeneous, seed=seed
    )
