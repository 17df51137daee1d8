"""Trajectory store: the trajectory memory M_k, the append-only store of (task, trajectory, outcome) records.

This is what Anti-Persistence keeps. Records are never rewritten or deleted; their task embeddings
form one matrix, so a retrieval is a single matrix-vector product (B.3), and with the outcome log's
``EmbeddingPool`` both stores are scored by one product per task (``similarity.py``). Retrieval
depends on the synthesis mode (``none``: any outcome; ``imitation`` / ``strategic``: successes;
``corrective``: failures plus ``contrast`` successes) after the task-type filter; records without an
embedding or from infrastructure failures are kept but never retrieved. Embeddings live in
``trajectories.emb`` beside the journal. docs/protocol.md, "The stores" and "Store files", has the
details.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from antipersist_lib.jsonl import EMBEDDING_REF, encode_embedding, ref_of
from antipersist_lib.memory.journaled_store import JournaledStore
from antipersist_lib.memory.similarity import EmbeddingMatrix, EmbeddingPool, top_k
from antipersist_lib.records import MODES, EpisodeOutcome, Task, Trajectory

log = logging.getLogger(__name__)

#: task-type filter settings: the fine task type (ALFWorld category, ScienceWorld task name),
#: the benchmark only, or no filter.
TASK_FILTERS = ("task_type", "benchmark", "off")


def abstraction_type_filter(task_filter: str, task: Task) -> str | None:
    """The ``task_type`` argument of ``AbstractionStore.search`` under a method's ``task_filter``,
    so S_k is retrieved at the same granularity as M_k: the task's type for "task_type", no type
    filter (None) for "benchmark" and "off" (a run's S_k holds one benchmark's abstractions)."""
    if task_filter not in TASK_FILTERS:
        raise ValueError(f"task_filter is {task_filter!r}, expected one of {TASK_FILTERS}")
    return task.task_type if task_filter == "task_type" else None


@dataclass(frozen=True)
class MemoryRecord:
    """One element m_j = (tau_j, e_j, y_j) of M_k, with its analysis metadata.

    ``parents`` is the historical provenance P(m) of Appendix A.1: the identifiers of the
    persistent abstractions that were in the agent's context when the trajectory was generated
    (always empty for Anti-Persistence, whose guidance is never stored).
    """

    record_id: int
    task: Task
    trajectory: Trajectory
    outcome: EpisodeOutcome
    embedding: tuple[float, ...] | None = None
    parents: tuple[str, ...] = ()
    iteration: int = 0
    mode: str | None = None

    @property
    def success(self) -> bool:
        return self.outcome.success

    @property
    def retrievable(self) -> bool:
        return self.embedding is not None and not self.outcome.infra_failure

    def to_dict(self, *, inline: bool = False, ref: str | None = None) -> dict[str, Any]:
        """The line the store writes: an embedding named by its ``embedding_ref`` (the numbers go
        into ``trajectories.emb``), or held inline with ``inline=True``; ``"embedding": null``
        for a record without one. A function of the record alone (``runner/repair.py``); ``ref``
        is for the store, which has just computed the reference of this very embedding."""
        if self.embedding is None:
            emb: dict[str, Any] = {"embedding": None}
        elif inline:
            emb = {"embedding": [float(x) for x in self.embedding]}
        else:
            emb = {EMBEDDING_REF: ref if ref is not None else ref_of(self.embedding)}
        return {
            "record_id": self.record_id,
            "task": self.task.to_dict(),
            "trajectory": self.trajectory.to_dict(),
            "outcome": self.outcome.to_dict(),
            **emb,
            "parents": list(self.parents),
            "iteration": self.iteration,
            "mode": self.mode,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, embedding: Any = None) -> MemoryRecord:
        """One stored line; a line that names its embedding (``embedding_ref``) needs it resolved:
        ``embedding`` (the store passes it; ``jsonl.read_jsonl`` shows such lines inline)."""
        emb = d.get("embedding")
        if EMBEDDING_REF in d:
            if embedding is None:
                raise ValueError(
                    f"field {EMBEDDING_REF!r} names an embedding that was not read (read through the store)"
                )
            emb = np.asarray(embedding, dtype=np.float64).reshape(-1).tolist()
        mode = d.get("mode")
        if mode is not None and mode not in MODES:
            raise ValueError(f"field 'mode' is {mode!r}, not one of {MODES}")
        return cls(
            record_id=int(d["record_id"]),
            task=Task.from_dict(d["task"]),
            trajectory=Trajectory.from_dict(d["trajectory"]),
            outcome=EpisodeOutcome.from_dict(d["outcome"]),
            embedding=None if emb is None else tuple(float(x) for x in emb),
            parents=tuple(str(p) for p in d.get("parents", [])),
            iteration=int(d.get("iteration", 0)),
            mode=mode,
        )


@dataclass(frozen=True)
class Retrieved:
    """A retrieved record, its similarity to the query task, and its role in the context."""

    record: MemoryRecord
    similarity: float
    role: str  # "record" (none), "success", "failure", "contrast"


class TrajectoryStore(JournaledStore):
    """M_k, optionally backed by ``trajectories.jsonl`` (reloaded in order, tolerant of torn lines);
    ``read_only=True`` opens an existing file for an audit; ``pool``: an ``EmbeddingPool`` shared
    with the outcome log (one product per task scores both), else the store scores its own rows."""

    what = "trajectory memory"
    embeddings = True

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        task_filter: str = "task_type",
        fsync: bool = True,
        read_only: bool = False,
        pool: EmbeddingPool | None = None,
    ) -> None:
        if task_filter not in TASK_FILTERS:
            raise ValueError(f"task_filter is {task_filter!r}, expected one of {TASK_FILTERS}")
        super().__init__(path, fsync=fsync, read_only=read_only)
        self.task_filter = task_filter
        self._records: list[MemoryRecord] = []
        self._matrix = EmbeddingMatrix(pool=pool)
        self._row_of: list[int] = []  # matrix row -> record index
        self._next_id = 0  # ids only grow; a record lost to a corrupt line leaves a gap, never a reuse
        self._cache: tuple[np.ndarray, ...] | None = None
        self._ids: dict[str, int] = {}
        self._col_success: list[bool] = []
        self._col_infra: list[bool] = []
        self._col_bench: list[int] = []
        self._col_type: list[int] = []
        for line in self._journal_lines():
            try:
                self._add(MemoryRecord.from_dict(line.value, embedding=self._stored_embedding(line.value)))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("%s:%d: skipping invalid memory record: %s", self.path, line.lineno, exc)
        self._open_journal()

    # -- writing ---------------------------------------------------------------------------

    def _add(self, rec: MemoryRecord) -> None:
        if rec.record_id < self._next_id:
            raise ValueError(f"record_id {rec.record_id} out of order (expected >= {self._next_id})")
        if rec.embedding is not None:
            self._matrix.append(np.asarray(rec.embedding))
            self._row_of.append(len(self._records))
            self._col_success.append(rec.outcome.success)
            self._col_infra.append(rec.outcome.infra_failure)
            self._col_bench.append(self._intern(rec.task.benchmark))
            self._col_type.append(self._intern(rec.task.benchmark + "\x00" + rec.task.task_type))
        self._records.append(rec)
        self._next_id = rec.record_id + 1

    def add(
        self,
        task: Task,
        trajectory: Trajectory,
        outcome: EpisodeOutcome,
        *,
        embedding: Sequence[float] | np.ndarray | None,
        parents: Iterable[str] = (),
        iteration: int = 0,
        mode: str | None = None,
    ) -> MemoryRecord:
        """M_{k+1} = M_k + {(tau, e, y)}; returns the stored record."""
        self._check_writable()
        emb = None if embedding is None else tuple(float(x) for x in np.asarray(embedding).reshape(-1))
        rec = MemoryRecord(
            record_id=self._next_id,
            task=task,
            trajectory=trajectory,
            outcome=outcome,
            embedding=emb,
            parents=tuple(sorted(set(parents))),
            iteration=iteration,
            mode=mode,
        )
        if emb is not None and self._matrix.dim is not None and len(emb) != self._matrix.dim:
            raise ValueError(f"embedding has dimension {len(emb)}, memory holds {self._matrix.dim}")
        encoded = None
        if emb is not None:
            self._matrix.pool.check(emb)  # every check that could refuse the row, before anything is written
            encoded = encode_embedding(emb)
        self._journal_append(rec.to_dict(ref=None if encoded is None else encoded[0]), embedding=encoded)
        self._add(rec)
        return rec

    # -- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[MemoryRecord]:
        return iter(self._records)

    def __getitem__(self, i: int) -> MemoryRecord:
        return self._records[i]

    def _row_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per-row (success, infra_failure, benchmark id, type id) arrays, rebuilt after appends."""
        if self._cache is None or len(self._cache[0]) != len(self._row_of):
            self._cache = (
                np.asarray(self._col_success, dtype=bool),
                np.asarray(self._col_infra, dtype=bool),
                np.asarray(self._col_bench, dtype=np.int64),
                np.asarray(self._col_type, dtype=np.int64),
            )
        return self._cache

    def _intern(self, key: str) -> int:
        return self._ids.setdefault(key, len(self._ids))

    def _candidate_rows(self, task: Task | None, outcome: bool | None) -> np.ndarray:
        success, infra, bench, ttype = self._row_arrays()
        mask = ~infra
        if outcome is not None:
            mask &= success == outcome
        if task is not None and self.task_filter == "task_type":
            mask &= ttype == self._ids.get(task.benchmark + "\x00" + task.task_type, -1)
        elif task is not None and self.task_filter == "benchmark":
            mask &= bench == self._ids.get(task.benchmark, -1)
        return np.flatnonzero(mask)

    def search(
        self,
        embedding: np.ndarray,
        *,
        k: int,
        task: Task | None = None,
        success: bool | None = None,
        role: str = "record",
    ) -> list[Retrieved]:
        """Top-k retrievable records by cosine similarity, after the task-type filter and an
        optional outcome filter (True = successes only, False = failures only)."""
        if k <= 0 or len(self._matrix) == 0:
            return []
        sims = self._matrix.similarities(embedding)
        rows = top_k(sims, k, self._candidate_rows(task, success))
        return [Retrieved(self._records[self._row_of[r]], float(sims[r]), role) for r in rows]

    def retrieve(
        self, embedding: np.ndarray | None, mode: str, task: Task, *, budget: int = 5, contrast: int = 1
    ) -> list[Retrieved]:
        """Mode-specific retrieval R_mu(tau, M_k, B) of Appendix B.3."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        if embedding is None:
            return []  # no embedding: nothing can be ranked, the mode reduces to ReAct
        if mode == "none":
            return self.search(embedding, k=budget, task=task, success=None, role="record")
        if mode in ("imitation", "strategic"):
            return self.search(embedding, k=budget, task=task, success=True, role="success")
        failures = self.search(embedding, k=budget, task=task, success=False, role="failure")
        successes = self.search(embedding, k=contrast, task=task, success=True, role="contrast")
        return failures + successes
