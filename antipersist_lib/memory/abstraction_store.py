"""Abstraction store S_k: persistent rules, skills, insights and summaries (for the baselines).

Anti-Persistence keeps S_k empty; abstraction and joint memory, ExpeL, AutoRefine, Reflexion and the
persist-instead-of-discard ablation store their abstractions here. Following Appendix A, an
abstraction's identifier and content never change (a rewrite creates a new id whose
``derived_from`` names the retired old ones), ``parents`` holds its historical parent set P(s), and
mutable scoring metadata is kept apart. On disk: an append-only event log (``events.jsonl``)
replayed on load, plus atomic per-iteration snapshots whose embeddings are written once into
``abstractions.emb`` (``read_snapshot`` reads them back). docs/protocol.md, "The stores" and
"Run directories", has the details.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.jsonl import EMBEDDING_REF, EmbeddingFile, atomic_write_json, read_json
from antipersist_lib.memory.journaled_store import JournaledStore
from antipersist_lib.memory.similarity import EmbeddingMatrix, top_k
from antipersist_lib.rundir import RunDirectory

log = logging.getLogger(__name__)

#: the file beside a run's snapshots that holds their abstractions' embeddings (each one once)
SNAPSHOT_EMBEDDINGS = RunDirectory.SNAPSHOT_EMBEDDINGS

#: the event journal inside a store's directory
EVENTS_FILE = "events.jsonl"


@dataclass(frozen=True)
class Abstraction:
    """One immutable stored abstraction."""

    abstraction_id: str
    text: str
    kind: str  # "rule", "skill", "insight", "reflection", "guidance", ...
    parents: tuple[str, ...] = ()  # P(s), sorted identifiers
    created_iteration: int = 0
    derived_from: tuple[str, ...] = ()  # identifiers this one rewrites or merges
    source_records: tuple[int, ...] = ()  # memory record ids H it was synthesized from
    task_type: str | None = None
    name: str | None = None
    embedding: tuple[float, ...] | None = None

    def to_dict(self, *, with_embedding: bool = True) -> dict[str, Any]:
        """The stored form; ``with_embedding=False`` leaves ``"embedding"`` None (a snapshot names it instead)."""
        return {
            "abstraction_id": self.abstraction_id,
            "text": self.text,
            "kind": self.kind,
            "parents": list(self.parents),
            "created_iteration": self.created_iteration,
            "derived_from": list(self.derived_from),
            "source_records": list(self.source_records),
            "task_type": self.task_type,
            "name": self.name,
            "embedding": None if self.embedding is None or not with_embedding else list(self.embedding),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Abstraction:
        emb = d.get("embedding")
        return cls(
            abstraction_id=str(d["abstraction_id"]),
            text=str(d["text"]),
            kind=str(d["kind"]),
            parents=tuple(str(p) for p in d.get("parents", [])),
            created_iteration=int(d.get("created_iteration", 0)),
            derived_from=tuple(str(p) for p in d.get("derived_from", [])),
            source_records=tuple(int(r) for r in d.get("source_records", [])),
            task_type=d.get("task_type"),
            name=d.get("name"),
            embedding=None if emb is None else tuple(float(x) for x in emb),
        )


@dataclass
class AbstractionStats:
    """Mutable scoring metadata (AutoRefine's n_inj / n_succ, ExpeL's votes, ...)."""

    n_injected: int = 0
    n_success: int = 0
    votes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


STAT_FIELDS = ("n_injected", "n_success", "votes")


class AbstractionStore(JournaledStore):
    """S_k with immutable identifiers and an append-only history.

    ``AbstractionStore(directory)`` replays ``directory/events.jsonl``; ``AbstractionStore(None)``
    is in memory only. Identifiers are ``{prefix}-{n:06d}``, never reused.
    """

    what = "abstraction store"

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        prefix: str = "abs",
        fsync: bool = True,
        read_only: bool = False,
    ) -> None:
        self.directory = Path(directory) if directory is not None else None
        super().__init__(
            self.directory / EVENTS_FILE if self.directory is not None else None, fsync=fsync, read_only=read_only
        )
        self.prefix = prefix
        self._all: dict[str, Abstraction] = {}  # every abstraction ever created (history)
        self._active: dict[str, None] = {}  # insertion-ordered set of current members of S_k
        self._stats: dict[str, AbstractionStats] = {}
        self._retired_reason: dict[str, str] = {}
        # the embeddings of every abstraction that has one, in creation order, kept as they arrive: a search
        # is one product over them (it used to rebuild a matrix from the tuples of every candidate, per
        # search, which the rehearsal saw as memory growing with the store at every held-out task)
        self._embeddings = EmbeddingMatrix()
        self._row_of: dict[str, int] = {}
        self._id_of_row: list[str] = []
        self._next = 0
        for line in self._journal_lines():
            try:
                self._apply(line.value)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("%s:%d: skipping invalid store event: %s", self.path, line.lineno, exc)
        self._open_journal()

    # -- event log -------------------------------------------------------------------------

    def _apply(self, ev: dict[str, Any]) -> None:
        op = ev["op"]
        if op == "add":
            a = Abstraction.from_dict(ev["abstraction"])
            if a.abstraction_id in self._all:
                raise ValueError(f"identifier {a.abstraction_id} already exists; identifiers are immutable")
            if a.embedding is not None:  # checked (dimension, finite) before anything is registered
                self._row_of[a.abstraction_id] = self._embeddings.append(np.asarray(a.embedding, dtype=np.float64))
                self._id_of_row.append(a.abstraction_id)
            self._all[a.abstraction_id] = a
            self._active[a.abstraction_id] = None
            self._stats[a.abstraction_id] = AbstractionStats()
            try:
                n = int(a.abstraction_id.rsplit("-", 1)[1])
                self._next = max(self._next, n + 1)
            except (IndexError, ValueError):
                pass
        elif op == "retire":
            aid = ev["id"]
            if aid not in self._all:
                raise ValueError(f"cannot retire unknown abstraction {aid}")
            self._active.pop(aid, None)
            self._retired_reason[aid] = str(ev.get("reason", ""))
        elif op == "stats":
            aid = ev["id"]
            if aid not in self._stats:
                raise ValueError(f"stats for unknown abstraction {aid}")
            st = self._stats[aid]
            for k, v in ev.get("delta", {}).items():
                if k not in STAT_FIELDS:
                    raise ValueError(f"unknown stats field {k!r}")
                setattr(st, k, getattr(st, k) + int(v))
            st.extra.update(ev.get("extra", {}))
        else:
            raise ValueError(f"unknown event op {op!r}")

    def _emit(self, ev: dict[str, Any]) -> None:
        self._check_writable()
        self._apply(ev)
        self._journal_append(ev)

    # -- writing ---------------------------------------------------------------------------

    def new_id(self) -> str:
        return f"{self.prefix}-{self._next:06d}"

    def add(
        self,
        text: str,
        *,
        kind: str,
        parents: Iterable[str] = (),
        created_iteration: int = 0,
        derived_from: Iterable[str] = (),
        source_records: Iterable[int] = (),
        task_type: str | None = None,
        name: str | None = None,
        embedding: Sequence[float] | np.ndarray | None = None,
        abstraction_id: str | None = None,
    ) -> Abstraction:
        """Admit a new abstraction to S_k under a fresh identifier, or under ``abstraction_id`` when the
        caller names one (a planted skill's provenance id; an identifier that exists is refused)."""
        if not text.strip():
            raise ValueError("an abstraction needs non-empty text")
        if abstraction_id is not None and abstraction_id in self._all:
            raise ValueError(f"identifier {abstraction_id} already exists; identifiers are immutable")
        a = Abstraction(
            abstraction_id=self.new_id() if abstraction_id is None else abstraction_id,
            text=text,
            kind=kind,
            parents=tuple(sorted(set(parents))),
            created_iteration=created_iteration,
            derived_from=tuple(derived_from),
            source_records=tuple(int(r) for r in source_records),
            task_type=task_type,
            name=name,
            embedding=None if embedding is None else tuple(float(x) for x in np.asarray(embedding).reshape(-1)),
        )
        self._emit({"op": "add", "abstraction": a.to_dict()})
        return a

    def retire(self, abstraction_id: str, reason: str = "") -> None:
        """Remove from S_k; the object stays in the history so provenance can still name it."""
        if abstraction_id not in self._active:
            raise KeyError(f"{abstraction_id} is not in the store")
        self._emit({"op": "retire", "id": abstraction_id, "reason": reason})

    def rewrite(
        self, abstraction_id: str, new_text: str, *, created_iteration: int, parents: Iterable[str] = (), **kw: Any
    ) -> Abstraction:
        """Replace one abstraction by a new object (new identifier); the old one is retired."""
        old = self.get(abstraction_id)
        if abstraction_id not in self._active:
            raise KeyError(f"{abstraction_id} is not in the store")
        kw.setdefault("kind", old.kind)
        kw.setdefault("task_type", old.task_type)
        kw.setdefault("name", old.name)
        new = self.add(
            new_text,
            parents=set(old.parents) | set(parents),
            created_iteration=created_iteration,
            derived_from=(abstraction_id,),
            **kw,
        )
        self.retire(abstraction_id, reason=f"rewritten as {new.abstraction_id}")
        return new

    def merge(
        self, abstraction_ids: Sequence[str], new_text: str, *, created_iteration: int, kind: str, **kw: Any
    ) -> Abstraction:
        """Merge several abstractions into one new object; the inputs are retired."""
        olds = [self.get(a) for a in abstraction_ids]
        parents = set().union(*(set(o.parents) for o in olds)) if olds else set()
        new = self.add(
            new_text,
            kind=kind,
            parents=parents,
            created_iteration=created_iteration,
            derived_from=tuple(abstraction_ids),
            **kw,
        )
        for a in abstraction_ids:
            if a in self._active:
                self.retire(a, reason=f"merged into {new.abstraction_id}")
        return new

    def update_stats(
        self, abstraction_id: str, *, extra: dict[str, Any] | None = None, **delta: int
    ) -> AbstractionStats:
        if abstraction_id not in self._all:
            raise KeyError(abstraction_id)
        for k in delta:
            if k not in STAT_FIELDS:
                raise ValueError(f"unknown stats field {k!r}; expected one of {STAT_FIELDS}")
        self._emit({"op": "stats", "id": abstraction_id, "delta": dict(delta), "extra": dict(extra or {})})
        return self._stats[abstraction_id]

    # -- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._active)

    def __contains__(self, abstraction_id: object) -> bool:
        return abstraction_id in self._active

    def __iter__(self) -> Iterator[Abstraction]:
        return (self._all[a] for a in self._active)

    def active(self) -> list[Abstraction]:
        return list(self)

    def get(self, abstraction_id: str) -> Abstraction:
        """Any abstraction ever created, including retired ones."""
        try:
            return self._all[abstraction_id]
        except KeyError:
            raise KeyError(f"unknown abstraction {abstraction_id}") from None

    def history(self) -> list[Abstraction]:
        return list(self._all.values())

    def stats(self, abstraction_id: str) -> AbstractionStats:
        return self._stats[abstraction_id]

    def retired_reason(self, abstraction_id: str) -> str | None:
        return self._retired_reason.get(abstraction_id)

    def search(
        self, embedding: np.ndarray, *, k: int, task_type: str | None = None, kinds: Iterable[str] | None = None
    ) -> list[tuple[Abstraction, float]]:
        """Top-k active abstractions with an embedding, by cosine similarity."""
        kinds_set = set(kinds) if kinds is not None else None
        rows = [
            self._row_of[aid]
            for aid in self._active  # creation order, so rows ascend and ties keep the earlier abstraction
            if aid in self._row_of
            and (task_type is None or self._all[aid].task_type in (None, task_type))
            and (kinds_set is None or self._all[aid].kind in kinds_set)
        ]
        if not rows or k <= 0:
            return []
        sims = self._embeddings.similarities(embedding)  # a row's score depends on the row and query alone
        return [(self._all[self._id_of_row[i]], float(sims[i])) for i in top_k(sims, k, np.asarray(rows))]

    def snapshot(self, path: str | os.PathLike[str], **meta: Any) -> None:
        """Write the current S_k (active objects and their stats) atomically as JSON; each embedding
        goes into ``abstractions.emb`` beside it first (once for all snapshots), the JSON names it."""
        embeddings = EmbeddingFile(Path(path).parent / SNAPSHOT_EMBEDDINGS)
        active = []
        try:
            embeddings.open_for_append()
            for aid in self._active:
                a = self._all[aid]
                row = {**a.to_dict(with_embedding=False), "stats": asdict(self._stats[aid])}
                if a.embedding is not None:  # in the field's place, as read_snapshot puts the numbers back
                    ref = embeddings.put(a.embedding)
                    row = {
                        (EMBEDDING_REF if k == "embedding" else k): (ref if k == "embedding" else v)
                        for k, v in row.items()
                    }
                active.append(row)
        finally:
            embeddings.close()
        atomic_write_json(path, {**meta, "active": active, "n_created": len(self._all)})


def parents_of_records(records: Iterable[Any]) -> tuple[str, ...]:
    """P(H) = union of P(m) over the records m in H (Appendix A.1)."""
    out: set[str] = set()
    for m in records:
        out.update(getattr(m, "parents", ()))
    return tuple(sorted(out))


def read_snapshot(path: str | os.PathLike[str], *, embeddings: bool = True) -> dict[str, Any]:
    """A snapshot as ``AbstractionStore.snapshot`` wrote it, each abstraction's embedding back in its
    ``"embedding"`` field (``embeddings=False``: the reference is left, nothing else is read). Older
    snapshots hold the numbers themselves and are returned as they are. An entry missing from
    ``abstractions.emb`` leaves that abstraction with its reference, and a warning."""
    data = read_json(path)
    active = data.get("active") if isinstance(data, dict) else None
    if not embeddings or not isinstance(active, list) or not any(EMBEDDING_REF in a for a in active):
        return data
    store = EmbeddingFile(Path(path).parent / SNAPSHOT_EMBEDDINGS)
    data["active"] = [store.inline(a, str(path)) if EMBEDDING_REF in a else a for a in active]
    return data
