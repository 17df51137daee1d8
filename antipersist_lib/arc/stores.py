"""The two ARC-AGI Stream memories of paper §3/§5: an Episodic buffer and an Abstract store.

The paper's Complementary-Learning-Systems design keeps raw problem-solution episodes apart from consolidated
strategy lessons, so consolidation can be gated (Auto), forced (Force) or disabled (Episodic Management Only) and
its effect measured. Ids (``E1, E2, ...``, ``S1, S2, ...``) are immutable and never reused; the family labels the
entries keep are for analysis only and never reach a prompt.

The capacity rule, the unbounded abstract store (App. D.1) and the ``coverage`` reading of Table 4 are in
docs/faulty-memories.md, "The ARC code's own readings, module by module" (Stores) and "Table 4's |B| and its
Buffer Size column".
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

STORE_FORMAT = 1
#: how a strategy entry came to exist (App. C.1); "retain" is an action on an existing entry, not a kind
STRATEGY_KINDS = ("new", "merge")


class StoreFormatError(ValueError):
    """A serialized store or entry is malformed; the message names the field."""


def _require(data: Any, keys: Iterable[str], where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise StoreFormatError(f"{where}: expected an object, got {type(data).__name__}")
    missing = [key for key in keys if key not in data]
    if missing:
        raise StoreFormatError(f"{where}: missing {', '.join(map(repr, missing))}")
    return data


def _id_number(entry_id: str, prefix: str) -> int:
    if not entry_id.startswith(prefix) or not entry_id[len(prefix) :].isdigit():
        raise StoreFormatError(f"entry id {entry_id!r} is not of the form {prefix}<n>")
    return int(entry_id[len(prefix) :])


# -- episodic buffer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Episode:
    """One trajectory: the examples shown of a task, the code, and whether it passed.

    ``code`` is the ground-truth solution (source "gt") or the model's own extracted code (source
    "running"); ``banner`` is the comment block of a failed attempt (App. B.5), empty on a pass.
    ``family`` and ``skill`` are analysis labels and are never shown to the model.
    """

    entry_id: str
    task_id: str
    family: str
    skill: str
    examples: list[dict[str, Any]]
    code: str
    passed: bool
    banner: str = ""
    source: str = "gt"
    step: int = 0

    def rendered_code(self) -> str:
        """The code as the model sees it: the failure banner (comments only) first, then the code."""
        return (self.banner.rstrip() + "\n" + self.code) if self.banner else self.code

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry_id": self.entry_id,
            "task_id": self.task_id,
            "family": self.family,
            "skill": self.skill,
            "examples": copy.deepcopy(self.examples),
            "code": self.code,
            "passed": self.passed,
            "banner": self.banner,
            "source": self.source,
            "step": self.step,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Episode:
        keys = ("entry_id", "task_id", "family", "skill", "examples", "code", "passed")
        d = _require(data, keys, "Episode")
        _id_number(str(d["entry_id"]), "E")
        return cls(
            entry_id=str(d["entry_id"]),
            task_id=str(d["task_id"]),
            family=str(d["family"]),
            skill=str(d["skill"]),
            examples=copy.deepcopy(list(d["examples"])),
            code=str(d["code"]),
            passed=bool(d["passed"]),
            banner=str(d.get("banner", "")),
            source=str(d.get("source", "gt")),
            step=int(d.get("step", 0)),
        )


@dataclass
class EpisodicBuffer:
    """Raw episodes in arrival order, with a capacity (>= 1; None = unbounded) enforced between steps."""

    capacity: int | None = 8
    entries: list[Episode] = field(default_factory=list)
    next_number: int = 1

    def __post_init__(self) -> None:
        if self.capacity is not None and (isinstance(self.capacity, bool) or int(self.capacity) < 1):
            raise ValueError(f"episodic buffer capacity must be >= 1 or None, got {self.capacity!r}")

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Episode]:
        return iter(self.entries)

    def __contains__(self, entry_id: object) -> bool:
        return any(e.entry_id == entry_id for e in self.entries)

    def ids(self) -> list[str]:
        return [e.entry_id for e in self.entries]

    def new_id(self) -> str:
        """A fresh id; ids are never reused, even after the entry is deleted."""
        entry_id = f"E{self.next_number}"
        self.next_number += 1
        return entry_id

    def get(self, entry_id: str) -> Episode:
        for entry in self.entries:
            if entry.entry_id == entry_id:
                return entry
        raise KeyError(f"no episodic entry {entry_id!r}; present: {self.ids()}")

    def append(self, episode: Episode) -> None:
        """Add an episode; capacity is enforced later, after the step's decision."""
        if episode.entry_id in self:
            raise ValueError(f"episodic entry {episode.entry_id!r} is already in the buffer")
        self.next_number = max(self.next_number, _id_number(episode.entry_id, "E") + 1)
        self.entries.append(episode)

    def remove(self, entry_ids: Iterable[str]) -> list[Episode]:
        """Remove the given entries (KeyError for an unknown id); returns them in buffer order."""
        wanted = set(entry_ids)
        unknown = wanted - set(self.ids())
        if unknown:
            raise KeyError(f"no episodic entries {sorted(unknown)}; present: {self.ids()}")
        removed = [e for e in self.entries if e.entry_id in wanted]
        self.entries = [e for e in self.entries if e.entry_id not in wanted]
        return removed

    def clear(self) -> list[Episode]:
        removed, self.entries = self.entries, []
        return removed

    def enforce_capacity(self) -> list[Episode]:
        """Drop the oldest entries until the buffer fits its capacity; returns what was dropped."""
        if self.capacity is None or len(self.entries) <= self.capacity:
            return []
        excess = len(self.entries) - self.capacity
        evicted, self.entries = self.entries[:excess], self.entries[excess:]
        return evicted

    def families(self) -> list[str]:
        """Distinct families in the buffer, in order of first appearance (analysis only)."""
        return list(dict.fromkeys(e.family for e in self.entries))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": STORE_FORMAT,
            "capacity": self.capacity,
            "next_number": self.next_number,
            "entries": [e.to_dict() for e in self.entries],
        }

    @classmethod
    def from_dict(cls, data: Any) -> EpisodicBuffer:
        d = _require(data, ("capacity", "entries"), "EpisodicBuffer")
        entries = [Episode.from_dict(e) for e in d["entries"]]
        highest = max((_id_number(e.entry_id, "E") for e in entries), default=0)
        return cls(capacity=d["capacity"], entries=entries, next_number=max(int(d.get("next_number", 1)), highest + 1))


# -- abstract store -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Strategy:
    """One consolidated lesson with its provenance.

    ``from_existing``: ids of the strategies it was merged from; ``from_functions``: ids of the
    episodes it was distilled from in the step that created it. ``task_ids``/``families``/``skills``
    accumulate over the whole lineage (analysis only). ``updated_step`` is the last consolidation
    that wrote or retained the entry; its id and text never change.
    """

    entry_id: str
    text: str
    kind: str
    from_existing: tuple[str, ...] = ()
    from_functions: tuple[str, ...] = ()
    created_step: int = 0
    updated_step: int = 0
    task_ids: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry_id": self.entry_id,
            "text": self.text,
            "kind": self.kind,
            "from_existing": list(self.from_existing),
            "from_functions": list(self.from_functions),
            "created_step": self.created_step,
            "updated_step": self.updated_step,
            "task_ids": list(self.task_ids),
            "families": list(self.families),
            "skills": list(self.skills),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Strategy:
        d = _require(data, ("entry_id", "text", "kind"), "Strategy")
        _id_number(str(d["entry_id"]), "S")
        if d["kind"] not in STRATEGY_KINDS:
            raise StoreFormatError(f"Strategy {d['entry_id']}: kind {d['kind']!r} is not one of {STRATEGY_KINDS}")
        return cls(
            entry_id=str(d["entry_id"]),
            text=str(d["text"]),
            kind=str(d["kind"]),
            from_existing=tuple(map(str, d.get("from_existing", ()))),
            from_functions=tuple(map(str, d.get("from_functions", ()))),
            created_step=int(d.get("created_step", 0)),
            updated_step=int(d.get("updated_step", 0)),
            task_ids=tuple(map(str, d.get("task_ids", ()))),
            families=tuple(map(str, d.get("families", ()))),
            skills=tuple(map(str, d.get("skills", ()))),
        )


@dataclass(frozen=True)
class StrategyDraft:
    """One item of a consolidation, indices already resolved to ids (see ``AbstractStore.rewrite``)."""

    kind: str  # "retain" | "new" | "merge"
    text: str = ""
    from_existing: tuple[str, ...] = ()
    from_functions: tuple[str, ...] = ()


def _union(*groups: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item for group in groups for item in group))


@dataclass
class AbstractStore:
    """Consolidated strategies, in the order the last consolidation listed them."""

    entries: list[Strategy] = field(default_factory=list)
    next_number: int = 1

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Strategy]:
        return iter(self.entries)

    def __contains__(self, entry_id: object) -> bool:
        return any(s.entry_id == entry_id for s in self.entries)

    def ids(self) -> list[str]:
        return [s.entry_id for s in self.entries]

    def get(self, entry_id: str) -> Strategy:
        for entry in self.entries:
            if entry.entry_id == entry_id:
                return entry
        raise KeyError(f"no strategy {entry_id!r}; present: {self.ids()}")

    def remove(self, entry_id: str) -> Strategy:
        entry = self.get(entry_id)
        self.entries = [s for s in self.entries if s.entry_id != entry_id]
        return entry

    def rewrite(self, drafts: Iterable[StrategyDraft], episodes: Mapping[str, Episode], step: int) -> list[Strategy]:
        """Replace the store by what a consolidation emitted: retained entries keep their id and
        text, new/merge items become fresh entries; existing entries not retained are dropped.

        ``episodes`` maps the ids named in ``from_functions`` to the episodes fed to this
        consolidation. Returns the entries created by this call. KeyError for an unknown id.
        """
        old = {s.entry_id: s for s in self.entries}
        result: list[Strategy] = []
        created: list[Strategy] = []
        seen: set[str] = set()
        for draft in drafts:
            parents = [_lookup(old, i, "strategy", "the store") for i in draft.from_existing]
            sources = [_lookup(episodes, i, "episode", "this consolidation's inputs") for i in draft.from_functions]
            if draft.kind == "retain":
                for parent in parents:
                    if parent.entry_id not in seen:
                        seen.add(parent.entry_id)
                        result.append(_replace_step(parent, step))
                continue
            if draft.kind not in STRATEGY_KINDS:
                raise ValueError(f"unknown consolidation kind {draft.kind!r}")
            entry = Strategy(
                entry_id=f"S{self.next_number}",
                text=draft.text,
                kind=draft.kind,
                from_existing=tuple(p.entry_id for p in parents),
                from_functions=tuple(e.entry_id for e in sources),
                created_step=step,
                updated_step=step,
                task_ids=_union(*(p.task_ids for p in parents), (e.task_id for e in sources)),
                families=_union(*(p.families for p in parents), (e.family for e in sources)),
                skills=_union(*(p.skills for p in parents), (e.skill for e in sources)),
            )
            self.next_number += 1
            result.append(entry)
            created.append(entry)
        self.entries = result
        return created

    def families(self) -> list[str]:
        return list(_union(*(s.families for s in self.entries)))

    def to_dict(self) -> dict[str, Any]:
        return {"format": STORE_FORMAT, "next_number": self.next_number, "entries": [s.to_dict() for s in self.entries]}

    @classmethod
    def from_dict(cls, data: Any) -> AbstractStore:
        d = _require(data, ("entries",), "AbstractStore")
        entries = [Strategy.from_dict(s) for s in d["entries"]]
        highest = max((_id_number(s.entry_id, "S") for s in entries), default=0)
        return cls(entries=entries, next_number=max(int(d.get("next_number", 1)), highest + 1))


def _lookup(table: Mapping[str, Any], entry_id: str, what: str, where: str) -> Any:
    if entry_id not in table:
        raise KeyError(f"consolidation names {what} {entry_id!r}, which is not in {where}: {sorted(table)}")
    return table[entry_id]


def _replace_step(entry: Strategy, step: int) -> Strategy:
    data = entry.to_dict()
    data["updated_step"] = step
    return Strategy.from_dict(data)


# -- both stores ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Coverage:
    """Table 4's memory-coverage numbers for one memory state (see the module notes)."""

    covered: int
    fused: float | None
    buffer_size: int
    abstract_families: tuple[str, ...] = ()
    episodic_families: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "covered": self.covered,
            "fused": self.fused,
            "buffer_size": self.buffer_size,
            "abstract_families": list(self.abstract_families),
            "episodic_families": list(self.episodic_families),
        }


@dataclass
class Memory:
    """The solver-visible memory: both stores together (either may be empty)."""

    episodic: EpisodicBuffer = field(default_factory=EpisodicBuffer)
    abstract: AbstractStore = field(default_factory=AbstractStore)

    def entry_ids(self) -> list[str]:
        return self.episodic.ids() + self.abstract.ids()

    def without(self, entry_id: str) -> Memory:
        """A copy with exactly one entry (episode or strategy) removed: memory surgery (App. I)."""
        clone = Memory.from_dict(self.to_dict())
        if entry_id in clone.episodic:
            clone.episodic.remove([entry_id])
        elif entry_id in clone.abstract:
            clone.abstract.remove(entry_id)
        else:
            raise KeyError(f"no memory entry {entry_id!r}; present: {self.entry_ids()}")
        return clone

    def coverage(self) -> Coverage:
        return coverage(self)

    def to_dict(self) -> dict[str, Any]:
        return {"episodic": self.episodic.to_dict(), "abstract": self.abstract.to_dict()}

    @classmethod
    def from_dict(cls, data: Any) -> Memory:
        d = _require(data, ("episodic", "abstract"), "Memory")
        return cls(episodic=EpisodicBuffer.from_dict(d["episodic"]), abstract=AbstractStore.from_dict(d["abstract"]))


def coverage(memory: Memory) -> Coverage:
    """Covered families, family fusion per abstract entry and buffer size (Table 4)."""
    per_entry = [len(set(s.families)) for s in memory.abstract if s.families]
    fused = sum(per_entry) / len(per_entry) if per_entry else None
    abstract_families = tuple(memory.abstract.families())
    return Coverage(
        covered=len(abstract_families),
        fused=fused,
        buffer_size=len(memory.episodic),
        abstract_families=abstract_families,
        episodic_families=tuple(memory.episodic.families()),
    )
