"""The outcome log L_k of Anti-Persistence (paper Section 3.2 and Appendix B.5).

One append-only JSONL file, one seven-field record per eligible training attempt:
``embedding, mode, reward, raw_success, task_type, task_id, instruction``. Nothing else is
written, in particular no guidance text: the log records *which* mode was used and how it went,
never *what* was synthesized. Logical timestamps are not stored; on load they are the ranks of
the valid records in file order (0, 1, 2, ...), and each append gets the next rank.

The embedding's numbers are kept in ``outcome_log.emb`` beside the file and the line names them
(``"embedding_ref"`` in place of ``"embedding"``; ``jsonl.py``); lines of older
logs hold them inline and load as before. Read as a list of dicts (``jsonl.read_jsonl``), both
kinds show ``"embedding": [numbers]``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from antipersist_lib.jsonl import EMBEDDING_REF, encode_embedding, ref_of
from antipersist_lib.memory.journaled_store import JournaledStore
from antipersist_lib.memory.similarity import EmbeddingMatrix, EmbeddingPool
from antipersist_lib.records import MODES

log = logging.getLogger(__name__)

INSTRUCTION_MAX_CHARS = 500
FIELDS = ("embedding", "mode", "reward", "raw_success", "task_type", "task_id", "instruction")


def cost_adjusted_reward(y: float, kappa: int, lam: float) -> float:
    """r = clip(y - lambda * kappa, -1, 1): the bandit reward (kappa = realised synthesis calls)."""
    if kappa < 0:
        raise ValueError(f"kappa must be >= 0, got {kappa}")
    if lam < 0:
        raise ValueError(f"lambda must be >= 0, got {lam}")
    return float(min(1.0, max(-1.0, y - lam * kappa)))


class SkipReason(str, Enum):
    """Why an attempt is not logged (the three skip rules of B.5)."""

    FIRST_UPDATE = "first_update"  # k = 0: memory was empty, every mode is plain ReAct
    EMBEDDING_FAILED = "embedding_failed"  # no embedding: the record could never be retrieved
    INFRASTRUCTURE_FAILURE = "infrastructure_failure"  # outcome not attributable to the mode


def skip_reason(update_index: int, embedding: Any, infra_failure: bool) -> SkipReason | None:
    """Apply the skip rules in the paper's order; None means the attempt is eligible."""
    if update_index == 0:
        return SkipReason.FIRST_UPDATE
    if embedding is None:
        return SkipReason.EMBEDDING_FAILED
    if infra_failure:
        return SkipReason.INFRASTRUCTURE_FAILURE
    return None


@dataclass(frozen=True)
class OutcomeRecord:
    """One entry of L_k. ``timestamp`` is assigned by position, never read from the file."""

    embedding: tuple[float, ...]
    mode: str
    reward: float
    raw_success: bool
    task_type: str
    task_id: int
    instruction: str
    timestamp: int = -1

    def to_dict(self, *, inline: bool = False, ref: str | None = None) -> dict[str, Any]:
        """The line the log writes: the embedding named by its ``embedding_ref`` (the numbers go
        into ``outcome_log.emb``), or held inline with ``inline=True``. A function of the record
        alone, so a lost line is rebuilt byte for byte (``runner/repair.py``); ``ref`` is for the
        log, which has just computed the reference of this very embedding."""
        if inline:
            head: dict[str, Any] = {"embedding": [float(x) for x in self.embedding]}
        else:
            head = {EMBEDDING_REF: ref if ref is not None else ref_of(self.embedding)}
        return {
            **head,
            "mode": self.mode,
            "reward": float(self.reward),
            "raw_success": bool(self.raw_success),
            "task_type": self.task_type,
            "task_id": int(self.task_id),
            "instruction": self.instruction[:INSTRUCTION_MAX_CHARS],
        }

    @classmethod
    def from_dict(cls, d: Any, timestamp: int = -1, *, embedding: np.ndarray | None = None) -> OutcomeRecord:
        """Validate one stored line; raises ValueError naming the bad field. A line that names its
        embedding (``embedding_ref``) needs it resolved: ``embedding`` (the store passes it)."""
        vec, fields = parse_record(d, embedding)
        return cls(embedding=tuple(vec.tolist()), **fields, timestamp=timestamp)


def parse_record(d: Any, embedding: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """(embedding as a float64 vector, the other six fields) of one stored line; raises ValueError
    naming the bad field. ``embedding`` is the vector an ``embedding_ref`` line names."""
    if not isinstance(d, dict):
        raise ValueError("record is not a JSON object")
    missing = [f for f in FIELDS if f not in d and not (f == "embedding" and EMBEDDING_REF in d)]
    if missing:
        raise ValueError(f"missing field(s) {missing}")
    if "embedding" in d:
        emb = d["embedding"]
        # vectorised checks (a 4096-d record): element types in one pass over type objects, then
        # finiteness on the float64 array; booleans are numbers to Python but not to this schema
        if not isinstance(emb, list) or not emb or not set(map(type, emb)) <= {int, float}:
            raise ValueError("field 'embedding' must be a non-empty list of numbers")
        try:
            vec = np.array(emb, dtype=np.float64)
        except OverflowError:  # an integer too large for a float (a damaged line)
            raise ValueError("field 'embedding' has non-finite values") from None
    elif embedding is None:
        raise ValueError(f"field {EMBEDDING_REF!r} names an embedding that was not read (read the log as a store)")
    else:
        vec = np.asarray(embedding, dtype=np.float64).reshape(-1)
        if vec.size == 0:
            raise ValueError(f"field {EMBEDDING_REF!r} names an empty embedding")
    if not np.isfinite(vec).all():
        raise ValueError("field 'embedding' has non-finite values")
    if d["mode"] not in MODES:
        raise ValueError(f"field 'mode' is {d['mode']!r}, not one of {MODES}")
    reward = d["reward"]
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not -1.0 <= reward <= 1.0:
        raise ValueError(f"field 'reward' must be a number in [-1, 1], got {reward!r}")
    if not isinstance(d["raw_success"], bool):
        raise ValueError("field 'raw_success' must be true or false")
    if not isinstance(d["task_type"], str):
        raise ValueError("field 'task_type' must be a string")
    if isinstance(d["task_id"], bool) or not isinstance(d["task_id"], int):
        raise ValueError("field 'task_id' must be an integer")
    if not isinstance(d["instruction"], str):
        raise ValueError("field 'instruction' must be a string")
    fields = {
        "mode": d["mode"],
        "reward": float(reward),
        "raw_success": d["raw_success"],
        "task_type": d["task_type"],
        "task_id": d["task_id"],
        "instruction": d["instruction"][:INSTRUCTION_MAX_CHARS],
    }
    return vec, fields


class OutcomeLog(JournaledStore):
    """L_k: append-only, reloadable, with the embeddings held as one matrix for KNN lookups.

    ``OutcomeLog(path)`` streams an existing file in order, skipping malformed lines (invalid
    JSON, torn writes, records failing the schema, a wrong embedding dimension, an embedding
    missing from ``outcome_log.emb``) with a logged warning. ``OutcomeLog(None)`` keeps the log
    in memory only. ``read_only=True`` is for audits: the log must exist; nothing is created,
    repaired or appended to, and ``append`` raises. ``pool``: an ``EmbeddingPool`` shared with the
    trajectory memory, so one product per task scores both (``similarity.py``); without one the
    log scores its own rows.
    """

    what = "outcome log"
    embeddings = True

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        fsync: bool = True,
        read_only: bool = False,
        pool: EmbeddingPool | None = None,
    ) -> None:
        super().__init__(path, fsync=fsync, read_only=read_only)
        self._records: list[OutcomeRecord] = []
        self._matrix = EmbeddingMatrix(pool=pool)
        self._mode_idx: list[int] = []
        self._rewards: list[float] = []
        self._cols: tuple[np.ndarray, np.ndarray] | None = None
        self._exact: list[np.ndarray | None] = []
        self.skipped_lines = 0
        for line in self._journal_lines():
            try:
                stored = self._stored_embedding(line.value)
                vec, fields = parse_record(line.value, stored)
                exact32 = None if stored is None else stored.dtype == np.float32
                self._add_row(vec, OutcomeRecord((), **fields, timestamp=len(self._records)), exact32=exact32)
            except ValueError as exc:
                log.warning("%s:%d: skipping invalid outcome-log record: %s", self.path, line.lineno, exc)
        if self.path is not None and self.path.exists():
            # lines that were not even JSON were already skipped (and warned about) by read_jsonl
            with open(self.path, "rb") as fh:
                physical = sum(1 for raw in fh if raw.strip())
            self.skipped_lines = physical - len(self._records)
        self._open_journal()

    def _add(self, rec: OutcomeRecord) -> None:
        self._add_row(np.asarray(rec.embedding, dtype=np.float64), rec)

    def _add_row(
        self, vec: np.ndarray, rec: OutcomeRecord, *, exact32: bool | None = None, checked: bool = False
    ) -> None:
        """Add a record whose embedding is ``vec`` (``rec.embedding`` is not read). ``exact32``:
        whether float32 holds ``vec`` exactly, when the caller knows (the stored entry's type);
        ``checked``: ``vec`` passed ``EmbeddingPool.check`` already."""
        self._matrix.append(vec, checked=checked)  # raises ValueError on a dimension mismatch
        # the exact values: the float32 matrix row itself when it holds them (what an endpoint
        # returns), else a compact float64 row (8 bytes per number, not a tuple's 32);
        # ``log[i]`` rebuilds the full record on access
        if exact32 is None:
            exact32 = bool(np.array_equal(vec.astype(np.float32), vec))
        self._exact.append(None if exact32 else np.array(vec, dtype=np.float64))
        self._records.append(dataclasses.replace(rec, embedding=()) if rec.embedding else rec)
        self._mode_idx.append(MODES.index(rec.mode))
        self._rewards.append(rec.reward)

    # -- writing ---------------------------------------------------------------------------

    def append(
        self,
        *,
        embedding: Sequence[float] | np.ndarray,
        mode: str,
        reward: float,
        raw_success: bool,
        task_type: str,
        task_id: int,
        instruction: str,
    ) -> OutcomeRecord:
        """Append one eligible attempt; the caller applies ``skip_reason`` first."""
        self._check_writable()
        vec = np.array(embedding, dtype=np.float64).reshape(-1)
        vec, fields = parse_record(
            {
                EMBEDDING_REF: "",
                "mode": mode,
                "reward": float(reward),
                "raw_success": bool(raw_success),
                "task_type": task_type,
                "task_id": int(task_id),
                "instruction": instruction[:INSTRUCTION_MAX_CHARS],
            },
            vec,
        )
        if self._matrix.dim is not None and vec.size != self._matrix.dim:
            raise ValueError(f"embedding has dimension {vec.size}, the log holds {self._matrix.dim}")
        vec = self._matrix.pool.check(vec)  # every check that could refuse the row, before anything is written
        rec = OutcomeRecord(tuple(vec.tolist()), **fields, timestamp=len(self._records))
        encoded = encode_embedding(vec)
        self._journal_append(rec.to_dict(ref=encoded[0]), embedding=encoded)
        self._add_row(vec, rec, exact32=encoded[1][4:5] == b"f", checked=True)
        return rec

    # -- reading ---------------------------------------------------------------------------

    def head(self, n: int) -> OutcomeLog:
        """An in-memory copy of the first ``n`` entries: the log as it was after n appends (audits)."""
        if not 0 <= n <= len(self):
            raise ValueError(f"head({n}) of an outcome log with {len(self)} entries")
        out = OutcomeLog(None)
        for i in range(n):
            out._add(self[i])
        return out

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[OutcomeRecord]:
        return (self[i] for i in range(len(self._records)))

    def __getitem__(self, i: int) -> OutcomeRecord:
        i = range(len(self._records))[i]  # negative indices and IndexError as for a list
        exact = self._exact[i]
        values = self._matrix.row(i) if exact is None else exact
        return dataclasses.replace(self._records[i], embedding=tuple(values.tolist()))

    @property
    def matrix(self) -> EmbeddingMatrix:
        return self._matrix

    def _columns(self) -> tuple[np.ndarray, np.ndarray]:
        """(mode index, reward) arrays, rebuilt only after appends (the selector reads them per task)."""
        cols = self._cols
        if cols is None or len(cols[0]) != len(self._mode_idx):
            cols = (np.asarray(self._mode_idx, dtype=np.int64), np.asarray(self._rewards, dtype=np.float64))
            cols[0].flags.writeable = False
            cols[1].flags.writeable = False
            self._cols = cols
        return cols

    @property
    def modes(self) -> np.ndarray:
        """Mode index (into MODES) of every record, in timestamp order (read-only)."""
        return self._columns()[0]

    @property
    def rewards(self) -> np.ndarray:
        """Cost-adjusted rewards in timestamp order (read-only)."""
        return self._columns()[1]

    @property
    def timestamps(self) -> np.ndarray:
        return np.arange(len(self._records), dtype=np.int64)

    def mode_counts(self) -> dict[str, int]:
        counts = np.bincount(self.modes, minlength=len(MODES)) if self._records else np.zeros(len(MODES), int)
        return {m: int(counts[i]) for i, m in enumerate(MODES)}
