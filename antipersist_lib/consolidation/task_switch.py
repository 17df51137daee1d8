"""The task-switch sequence of the faulty-memories study (§6.2, Fig. 10; App. K.2, Fig. 18).

Tasks arrive one after another; at each task t a ``fresh`` memory is distilled from task t's records alone and
a ``cumulative`` one continues the bank of tasks 1..t-1 with them. Both are evaluated on task t's held-out cases
and every entry of both is labelled by an LLM judge (normal / over-generalized / over-specific / garbage). Every
bank is written before it is evaluated and a finished task is never rebuilt, so an interrupted sequence resumes.

The figures' measures, ``records_per_task`` (App. F.3, Table 9) and the kit's choices (batching, what the judge
sees and when): docs/faulty-memories.md, "Task switch: Fresh vs Cumulative" and "The consolidation code's own
readings, module by module" (Task switch).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.consolidation import prompts as P
from antipersist_lib.consolidation.bank import MemoryBank, MemoryEntry, load_bank
from antipersist_lib.consolidation.pool import PoolRecord, check_pool
from antipersist_lib.consolidation.regimes import BANK_FILE, build_memory
from antipersist_lib.jsonl import atomic_write_text, dumps_line, read_jsonl
from antipersist_lib.judge import JUDGE_LABELS, UNPARSED_LABEL, judge_entries

SETUPS = ("fresh", "cumulative")
#: the labels whose running totals Fig. 18 plots
FLAGGED = ("over-generalized", "garbage")
SWITCH_DIR = "task_switch"
JUDGE_FILE = "judge.jsonl"


@dataclass(frozen=True)
class SwitchBank:
    """The memory one setup holds after task ``index`` (1-based) of the sequence."""

    setup: str
    index: int
    task_type: str
    path: Path
    entries: int
    records: int | None = None  # the task's records the bank was built from (None: not recorded)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path)}


def task_records(
    records: Sequence[PoolRecord], task_type: str, records_per_task: int | Mapping[str, int] | None
) -> list[PoolRecord]:
    """The first ``records_per_task`` records of ``task_type`` in pool order (a mapping gives each task its own
    count, a task it does not name keeps all of its records; None: all)."""
    members = [r for r in records if r.task_type == task_type]
    limit = records_per_task.get(task_type) if isinstance(records_per_task, Mapping) else records_per_task
    return members if limit is None else members[: int(limit)]


def check_sequence(pool: Sequence[PoolRecord], sequence: Sequence[str]) -> list[str]:
    """The sequence as a list, after checking that it names distinct task types the pool holds."""
    if isinstance(sequence, str) or not isinstance(sequence, (list, tuple)) or not sequence:
        raise ValueError(f"the task-switch sequence must be a non-empty list of task types, got {sequence!r}")
    seq = [str(t) for t in sequence]
    if len(set(seq)) != len(seq):
        raise ValueError(f"the task-switch sequence repeats a task type: {seq}")
    held = {r.task_type for r in pool}
    missing = [t for t in seq if t not in held]
    if missing:
        raise ValueError(f"the pool has no records of task type(s) {missing}; it holds {sorted(held)}")
    return seq


def task_folder(out_dir: str | Path, setup: str, index: int, task_type: str) -> Path:
    return Path(out_dir) / SWITCH_DIR / setup / f"{index:02d}-{task_type}"


def switch_banks(
    pool: Sequence[PoolRecord],
    sequence: Sequence[str],
    make_builder: Callable[[], Any],
    setup: str,
    out_dir: str | Path,
    *,
    batch_size: int = 4,
    capacity: int | None = None,
    seed: int = 0,
    records_per_task: int | Mapping[str, int] | None = None,
) -> list[SwitchBank]:
    """Build (or, for finished tasks, load) one setup's bank after every task of the sequence.

    ``make_builder()`` gives a fresh builder (``regimes.make_builder``'s objects); each task's bank
    is written to ``task_folder(...)/bank.json`` with its snapshots, before the next task starts. Each task
    is built from ``task_records(..., records_per_task)``."""
    if setup not in SETUPS:
        raise ValueError(f"setup must be one of {SETUPS}, got {setup!r}")
    records = check_pool(pool)
    seq = check_sequence(records, sequence)
    out: list[SwitchBank] = []
    previous: MemoryBank | None = None
    for index, task_type in enumerate(seq, start=1):
        folder = task_folder(out_dir, setup, index, task_type)
        members = task_records(records, task_type, records_per_task)
        if (folder / BANK_FILE).exists():
            bank = load_bank(folder / BANK_FILE)
        else:
            if folder.exists():  # an unfinished task: build it again (a response cache answers its calls)
                shutil.rmtree(folder)
            initial = previous if setup == "cumulative" else None
            bank = build_memory(
                members,
                make_builder(),
                "stream",
                batch_size=batch_size,
                homogeneous=True,
                capacity=capacity,
                seed=seed,
                out_dir=folder,
                initial=initial,
            )
        out.append(SwitchBank(setup, index, task_type, folder / BANK_FILE, len(bank.entries), len(members)))
        previous = bank
    return out


def judge_bank(
    bank: MemoryBank,
    llm: Any,
    source_types: dict[str, str],
    *,
    max_tokens: int = 512,
    tags: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One judge call per entry (``judge.judge_entries``): its label (``JUDGE_LABELS`` or ``unparsed``) and reason.

    ``source_types`` maps a pool record id to its task type: the judge sees the types an entry was
    drawn from, never the records themselves."""

    def messages(entry: MemoryEntry) -> list[dict[str, str]]:
        kinds = sorted({source_types[s] for s in entry.sources if s in source_types})
        user = P.SWITCH_JUDGE.format(
            evidence=", ".join(kinds) or "(not recorded)", entry=entry.text.strip() or "(empty)"
        )
        return [{"role": "system", "content": P.SWITCH_JUDGE_SYSTEM}, {"role": "user", "content": user}]

    verdicts = judge_entries(
        llm,
        ((entry.id, messages(entry)) for entry in bank.entries),
        purpose="judge",
        temperature=0.0,
        max_tokens=max_tokens,
        id_tag="entry",
        tags=tags,
    )
    return [{"entry": entry_id, **v.to_dict()} for entry_id, v in verdicts]


def judged(switch: SwitchBank, llm: Any, source_types: dict[str, str], **kw: Any) -> list[dict[str, Any]]:
    """``judge_bank`` for one task's bank, kept in ``judge.jsonl`` beside it (a re-run re-reads it)."""
    path = switch.path.parent / JUDGE_FILE
    if path.exists():
        return [r.value for r in read_jsonl(path)]
    rows = judge_bank(
        load_bank(switch.path), llm, source_types, tags={"setup": switch.setup, "task": switch.index}, **kw
    )
    atomic_write_text(path, "".join(dumps_line(r).decode("utf-8") for r in rows))
    return rows


def switch_table(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per (setup, task) in sequence order: the task's score (mean over the rows given for it,
    one per seed), its running total (Fig. 10), the entries held, the judge's count of each label and
    the running totals of the flagged labels (Fig. 18).

    Each row holds ``setup``, ``index``, ``task_type`` and ``score``, and may hold ``entries`` and
    ``labels`` (the judge's label of every entry; rows of one task carry the same ones)."""
    label_cols = [*JUDGE_LABELS, UNPARSED_LABEL]
    cols = ["setup", "index", "task_type", "score", "score_total", "entries", *label_cols]
    cols += [f"{f}_total" for f in FLAGGED]
    grouped: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("setup") not in SETUPS:
            raise ValueError(f"unknown setup {r.get('setup')!r}; expected one of {SETUPS}")
        grouped.setdefault((r["setup"], int(r["index"]), str(r["task_type"])), []).append(r)
    out = []
    for (setup, index, task_type), members in sorted(grouped.items()):
        scores = [float(m["score"]) for m in members if m.get("score") is not None]
        labels = next((m["labels"] for m in members if m.get("labels") is not None), None)
        entries = next((m["entries"] for m in members if m.get("entries") is not None), None)
        row: dict[str, Any] = {
            "setup": setup,
            "index": index,
            "task_type": task_type,
            "score": sum(scores) / len(scores) if scores else None,
            "entries": entries,
        }
        for label in label_cols:
            row[label] = None if labels is None else sum(1 for x in labels if x == label)
        out.append(row)
    table = pd.DataFrame(out, columns=cols[:3] + ["score", "entries", *label_cols])
    for _setup, sub in table.groupby("setup"):
        table.loc[sub.index, "score_total"] = sub["score"].astype(float).cumsum()
        for f in FLAGGED:
            table.loc[sub.index, f"{f}_total"] = sub[f].astype(float).cumsum()
    return table.reindex(columns=cols)


def final_gap(table: pd.DataFrame) -> dict[str, float | None]:
    """Fresh minus Cumulative at the end of the sequence: score total (Fig. 10's "+203 points") and
    the ratio of Cumulative's to Fresh's flagged totals (K.2's ~5x over-generalized, ~20x garbage)."""
    last = {s: table[table["setup"] == s].sort_values("index").iloc[-1] for s in SETUPS if (table["setup"] == s).any()}
    if set(last) != set(SETUPS):
        return {"score_gap": None, **{f"{f}_ratio": None for f in FLAGGED}}
    out: dict[str, float | None] = {
        "score_gap": float(last["fresh"]["score_total"] - last["cumulative"]["score_total"])
    }
    for f in FLAGGED:
        fresh, cum = last["fresh"][f"{f}_total"], last["cumulative"][f"{f}_total"]
        ok = not (pd.isna(fresh) or pd.isna(cum)) and float(fresh) > 0
        out[f"{f}_ratio"] = float(cum) / float(fresh) if ok else None
    return out
