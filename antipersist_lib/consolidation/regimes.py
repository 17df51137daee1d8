"""The memory construction conditions of §3: Static-All, Static-Group, Stream.

The regimes differ only in how the fixed pool is presented to a builder: Static-All gives it
the whole pool in one update; Static-Group one update per task type, each on an empty bank,
and concatenates the banks (offline construction, the paper's control); Stream feeds batches in
sequence (``pool.batches``: homogeneous or heterogeneous), with the bank unbounded or capped
(``capacity``: the oldest entries are evicted after each update, FIFO).

With ``out_dir`` every step is written as it happens to ``snapshots.jsonl`` (step 0 = the bank
before any update), and the final bank to ``bank.json``; ``bank.load_bank(snapshots, step)``
gives the bank at any step, so a utility-vs-updates curve can be drawn from any run. The bank's
``meta`` records the configuration, the pool's fingerprint and the hashes of the prompts used.

Kit choices: Static-Group visits task types in name order and caps each group's bank separately
(the concatenation is not capped again); ids stay unique across groups. ``initial`` continues
from an existing bank (the paper's Fig. 4 continues a Static-Group bank with Stream updates).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from antipersist_lib.consolidation import prompts as P
from antipersist_lib.consolidation.bank import MemoryBank, snapshot_line
from antipersist_lib.consolidation.consolidators import ACE, AWM, CLIN, DynamicCheatsheet
from antipersist_lib.consolidation.episodic import AllLogs, FewShot, KeepCurator
from antipersist_lib.consolidation.pool import PoolRecord, batches, check_pool, group_by_type
from antipersist_lib.jsonl import JsonlWriter

REGIMES = ("static_all", "static_group", "stream")
#: builder names for ``make_builder``; ``fs<N>`` (e.g. fs64) is FS=N
BUILDERS = ("ace", "ace_gt", "awm", "dc", "clin", "all", "keep", "fs<N>")
SNAPSHOTS_FILE = "snapshots.jsonl"
BANK_FILE = "bank.json"


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
) -> MemoryBank:
    """Build a bank from ``pool`` under ``regime``; ``builder`` is a name or an object with
    ``update(bank, batch) -> bank``. Returns the final bank."""
    records = check_pool(pool)
    if isinstance(builder, str):
        builder = make_builder(builder, llm=llm, embedder=embedder, seed=seed)
    elif not callable(getattr(builder, "update", None)):
        raise TypeError(f"builder must be a name or have update(bank, batch), got {type(builder).__name__}")
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; expected one of {REGIMES}")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"capacity must be None (unbounded) or an integer >= 1, got {capacity!r}")
    if regime == "stream":
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"the stream regime needs batch_size, an integer >= 1; got {batch_size!r}")
        plan = [(b, None) for b in batches(records, batch_size, homogeneous, seed)]
    elif batch_size is not None:
        raise ValueError(f"batch_size applies to the stream regime only, not {regime!r}")
    elif regime == "static_all":
        plan = [(records, None)]
    else:
        plan = list((members, kind) for kind, members in group_by_type(records).items())
    if initial is not None and not isinstance(initial, MemoryBank):
        raise TypeError(f"initial must be a MemoryBank, got {type(initial).__name__}")

    name = str(getattr(builder, "name", type(builder).__name__))
    bank = initial.copy() if initial is not None else MemoryBank(name)
    bank.method = name
    bank.capacity = capacity if capacity is not None else bank.capacity
    bank.meta = _meta(builder, regime, records, batch_size, homogeneous, capacity, seed, initial)
    snaps = _Snapshots(out_dir) if out_dir is not None else None
    try:
        if snaps:
            snaps.write(bank, None)
        for batch, kind in plan:
            if kind is None:
                bank = builder.update(bank, batch)
                event = bank.history[-1] if bank.history else None
            else:  # Static-Group: the group starts from an empty bank, then joins the others
                part = builder.update(
                    MemoryBank(name, step=bank.step, capacity=bank.capacity, next_id=bank.next_id), batch
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
            if snaps:
                snaps.write(bank, event)
    finally:
        if snaps:
            snaps.close()
    if snaps:
        bank.save(snaps.dir / BANK_FILE)
    return bank


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
