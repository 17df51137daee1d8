"""The memory bank every builder produces, and its snapshot files.

One representation for lesson bullets (ACE), workflows (AWM), a cheatsheet (DC), causal rules
(CLIN) and summarized trajectory logs (the episodic-only baselines), so that the evaluation
method shows any of them the same way (all entries in context, §3) and the analysis can compare
banks across regimes. Each entry keeps the pool records it came from (``sources``), so a faulty
entry can be traced to its evidence; ``history`` logs every update, including replies that
could not be parsed (those leave the entries unchanged).

Snapshot files (``snapshots.jsonl``) hold one line per update step, ``{"step", "bank",
"event"}`` with the bank minus its history; ``load_bank(path, step)`` rebuilds the history
from the events up to that step, so the bank at any step is available for a utility-vs-updates
curve.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import atomic_write_json

#: headers of the context block, by entry kind (the agent reads these)
KIND_HEADERS: dict[str, str] = {
    "bullet": "Playbook of lessons consolidated from earlier episodes (counters: how often a lesson helped or hurt).",
    "workflow": "Workflows induced from earlier successful episodes.",
    "cheatsheet": "Cheatsheet written from earlier episodes.",
    "rule": "Rules learned from earlier episodes.",
    "trajectory": "Summarized logs of earlier episodes: what happened, not advice.",
}
MEMORY_HEADER = "## Memory"


@dataclass
class MemoryEntry:
    """One memory item; ``step`` fields are bank update steps (0 = before any update)."""

    id: str
    text: str
    kind: str = "bullet"
    section: str = ""  # ACE playbook section
    title: str = ""  # AWM workflow title, the task type of a trajectory log
    helpful: int = 0
    harmful: int = 0
    sources: list[str] = field(default_factory=list)  # pool record ids
    created_step: int = 0
    updated_step: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemoryEntry:
        if not isinstance(d, dict) or not isinstance(d.get("id"), str) or not isinstance(d.get("text"), str):
            raise ValueError(f"a memory entry needs string 'id' and 'text': {str(d)[:120]}")
        return cls(
            id=d["id"],
            text=d["text"],
            kind=str(d.get("kind", "bullet")),
            section=str(d.get("section", "")),
            title=str(d.get("title", "")),
            helpful=int(d.get("helpful", 0)),
            harmful=int(d.get("harmful", 0)),
            sources=[str(s) for s in d.get("sources", [])],
            created_step=int(d.get("created_step", 0)),
            updated_step=int(d.get("updated_step", 0)),
        )


@dataclass
class MemoryBank:
    """Entries in insertion order (the FIFO order a capacity evicts from)."""

    method: str
    entries: list[MemoryEntry] = field(default_factory=list)
    step: int = 0
    capacity: int | None = None
    next_id: int = 1
    history: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.capacity is not None and (isinstance(self.capacity, bool) or int(self.capacity) < 1):
            raise ValueError(f"bank capacity must be None or an integer >= 1, got {self.capacity!r}")

    # -- entries ---------------------------------------------------------------------------

    def new_id(self, prefix: str) -> str:
        i = self.next_id
        self.next_id += 1
        return f"{prefix}{i}"

    def get(self, entry_id: str) -> MemoryEntry | None:
        return next((e for e in self.entries if e.id == entry_id), None)

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.entries]

    def sources(self) -> set[str]:
        """Every pool record this bank's entries cite."""
        return {s for e in self.entries for s in e.sources}

    def copy(self) -> MemoryBank:
        return copy.deepcopy(self)

    def evict_fifo(self, capacity: int | None = None) -> list[str]:
        """Drop the oldest entries until at most ``capacity`` remain; returns the dropped ids."""
        cap = self.capacity if capacity is None else capacity
        if cap is None or len(self.entries) <= cap:
            return []
        n = len(self.entries) - int(cap)
        dropped, self.entries = self.entries[:n], self.entries[n:]
        return [e.id for e in dropped]

    # -- the agent's view ------------------------------------------------------------------

    def render(self) -> str:
        """All entries, for the agent's context (the paper's evaluation); "" when empty."""
        if not self.entries:
            return ""
        parts = [f"{MEMORY_HEADER} ({len(self.entries)} entries)"]
        kinds = list(dict.fromkeys(e.kind for e in self.entries))
        for kind in kinds:
            members = [e for e in self.entries if e.kind == kind]
            parts.append(KIND_HEADERS.get(kind, "Memory entries."))
            parts.append(_render_kind(kind, members))
        return "\n\n".join(parts)

    # -- JSON ------------------------------------------------------------------------------

    def to_dict(self, *, with_history: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "method": self.method,
            "step": self.step,
            "capacity": self.capacity,
            "next_id": self.next_id,
            "meta": self.meta,
            "entries": [e.to_dict() for e in self.entries],
        }
        if with_history:
            d["history"] = self.history
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemoryBank:
        if not isinstance(d, dict):
            raise ValueError(f"a memory bank is a JSON object, got {type(d).__name__}")
        missing = [k for k in ("method", "entries") if k not in d]
        if missing:
            raise ValueError(f"a memory bank needs field(s) {missing}")
        if not isinstance(d["entries"], list):
            raise ValueError("a memory bank's 'entries' must be a list")
        entries = [MemoryEntry.from_dict(e) for e in d["entries"]]
        ids = [e.id for e in entries]
        if len(set(ids)) != len(ids):
            raise ValueError(f"a memory bank repeats entry id(s) {sorted({i for i in ids if ids.count(i) > 1})}")
        return cls(
            method=str(d["method"]),
            entries=entries,
            step=int(d.get("step", 0)),
            capacity=None if d.get("capacity") is None else int(d["capacity"]),
            next_id=int(d.get("next_id", len(entries) + 1)),
            history=list(d.get("history", [])),
            meta=dict(d.get("meta", {})),
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        p = Path(path)
        atomic_write_json(p, self.to_dict())
        return p


def _render_kind(kind: str, entries: list[MemoryEntry]) -> str:
    if kind == "bullet":
        out: list[str] = []
        for section in dict.fromkeys(e.section for e in entries):
            if section:
                out.append(f"### {section}")
            out.extend(
                f"- [{e.id}] (helpful {e.helpful}, harmful {e.harmful}) {e.text}"
                for e in entries
                if e.section == section
            )
        return "\n".join(out)
    if kind == "workflow":
        return "\n\n".join(f"### {e.title or e.id}\n{e.text}" for e in entries)
    if kind == "trajectory":
        return "\n\n".join(f"### Log {i}\n{e.text}" for i, e in enumerate(entries, start=1))
    if kind == "cheatsheet":
        return "\n\n".join(e.text for e in entries)
    return "\n".join(f"- {e.text}" for e in entries)


# -- files -------------------------------------------------------------------------------------


def snapshot_line(bank: MemoryBank, event: dict[str, Any] | None) -> dict[str, Any]:
    return {"step": bank.step, "bank": bank.to_dict(with_history=False), "event": event}


def load_bank(path: str | os.PathLike[str], step: int | None = None) -> MemoryBank:
    """A bank from a bank JSON, or from a snapshots JSONL at ``step`` (default: the last step).
    Errors name the file and what is wrong with it."""
    p = Path(path)
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read memory bank {p}: {exc}") from exc
    if p.suffix == ".jsonl":
        return _from_snapshots(p, text, step)
    if step is not None:
        raise ValueError(f"step={step} applies to a snapshots .jsonl file, and {p} is a bank JSON")
    try:
        return MemoryBank.from_dict(json.loads(text))
    except ValueError as exc:
        raise ValueError(f"memory bank {p}: {exc}") from exc


def _from_snapshots(p: Path, text: str, step: int | None) -> MemoryBank:
    lines: list[dict[str, Any]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            int(line["step"])
            line["bank"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"snapshots file {p}:{lineno}: not a snapshot line ({exc!r})") from exc
        lines.append(line)
    if not lines:
        raise ValueError(f"snapshots file {p} holds no snapshot")
    steps = [int(x["step"]) for x in lines]
    want = steps[-1] if step is None else step
    if want not in steps:
        raise ValueError(f"snapshots file {p} has no step {want}; it holds steps {steps[0]}..{steps[-1]}")
    i = steps.index(want)
    try:
        bank = MemoryBank.from_dict(lines[i]["bank"])
    except ValueError as exc:
        raise ValueError(f"snapshots file {p}, step {want}: {exc}") from exc
    bank.history = [x["event"] for x in lines[: i + 1] if x.get("event") is not None]
    return bank
