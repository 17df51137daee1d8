"""Cosine similarity of one task against every stored task, as one matrix-vector product (B.3).

sim(a, b) = <a, b> / (||a|| * ||b|| + eps), eps = 1e-12, exactly as the paper defines it (not
a normalise-then-dot shortcut, which differs for near-zero vectors).
"""

from __future__ import annotations

import numpy as np

EPS = 1e-12


def cosine(a: np.ndarray, b: np.ndarray, eps: float = EPS) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + eps))


class EmbeddingMatrix:
    """A growable (n, d) float32 matrix of task embeddings with their norms cached.

    Stores append rows as records arrive; ``similarities(q)`` scores every row against ``q``
    in one product. Capacity doubles, so appends are amortised O(d).
    """

    def __init__(self, dim: int | None = None) -> None:
        self._dim = dim
        self._rows = np.zeros((0, dim or 0), dtype=np.float32)
        self._norms = np.zeros(0, dtype=np.float64)
        self._n = 0
        # the last query's scores: corrective retrieval ranks failures and successes against the
        # same task, so the second search reuses the first product (one tuple swap: thread-safe)
        self._last: tuple[bytes, int, np.ndarray] | None = None

    @property
    def dim(self) -> int | None:
        return self._dim

    def __len__(self) -> int:
        return self._n

    def _check(self, vec: np.ndarray) -> np.ndarray:
        v = np.asarray(vec, dtype=np.float64).reshape(-1)
        if v.size == 0:
            raise ValueError("empty embedding vector")
        if not np.all(np.isfinite(v)):
            raise ValueError("embedding contains NaN or infinite values")
        if np.any(np.abs(v) > np.finfo(np.float32).max):  # would be stored as inf (rows are float32)
            raise ValueError("embedding values exceed the float32 range")
        if self._dim is None:
            self._dim = int(v.size)
            self._rows = np.zeros((0, self._dim), dtype=np.float32)
        elif v.size != self._dim:
            raise ValueError(f"embedding has dimension {v.size}, this store holds dimension {self._dim}")
        return v

    def append(self, vec: np.ndarray) -> int:
        v = self._check(vec)
        if self._n == self._rows.shape[0]:
            cap = max(16, 2 * self._rows.shape[0])
            rows = np.zeros((cap, self._dim), dtype=np.float32)
            rows[: self._n] = self._rows[: self._n]
            norms = np.zeros(cap, dtype=np.float64)
            norms[: self._n] = self._norms[: self._n]
            self._rows, self._norms = rows, norms
        self._rows[self._n] = v
        self._norms[self._n] = float(np.linalg.norm(v.astype(np.float32).astype(np.float64)))
        self._n += 1
        return self._n - 1

    def row(self, i: int) -> np.ndarray:
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._rows[i].astype(np.float64)

    def similarities(self, query: np.ndarray, eps: float = EPS) -> np.ndarray:
        """Cosine similarity of ``query`` to every row (float64, length n)."""
        if self._n == 0:
            return np.zeros(0, dtype=np.float64)
        q = self._check_query(query)
        key = q.tobytes() + np.float64(eps).tobytes()
        last = self._last
        if last is not None and last[1] == self._n and last[0] == key:
            return last[2].copy()
        dots = self._rows[: self._n] @ q.astype(np.float32)
        sims = dots.astype(np.float64) / (self._norms[: self._n] * float(np.linalg.norm(q)) + eps)
        self._last = (key, self._n, sims)
        return sims.copy()

    def _check_query(self, query: np.ndarray) -> np.ndarray:
        q = np.asarray(query, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(q)):
            raise ValueError("query embedding contains NaN or infinite values")
        if self._dim is not None and q.size != self._dim:
            raise ValueError(f"query embedding has dimension {q.size}, store holds dimension {self._dim}")
        return q


def top_k(scores: np.ndarray, k: int, candidates: np.ndarray | None = None) -> np.ndarray:
    """Indices of the k highest scores, highest first; ties keep the earlier index first.

    ``candidates`` (indices) restricts the ranking to a subset. For large sets a partial
    selection finds the k-th score first and sorts only what can be in the top k; the result is
    exactly that of a full stable sort.
    """
    idx = np.arange(scores.shape[0]) if candidates is None else np.asarray(candidates, dtype=np.int64)
    if k <= 0 or idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    vals = scores[idx]
    if idx.size > 4 * k + 64:
        kth = np.partition(vals, idx.size - k)[idx.size - k]  # the k-th highest value
        keep = np.flatnonzero(vals >= kth)  # everything above it, and every tie with it, in index order
        idx, vals = idx[keep], vals[keep]
    order = np.argsort(-vals, kind="stable")
    return idx[order[:k]]
