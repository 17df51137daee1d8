"""Cosine similarity of one task against every stored task, as one matrix-vector product (B.3).

One product per task for both of Anti-Persistence's stores: they share an ``EmbeddingPool``.

sim(a, b) = <a, b> / (||a|| * ||b|| + eps), eps = 1e-12, exactly as the paper defines it (not
a normalise-then-dot shortcut, which differs for near-zero vectors).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

EPS = 1e-12
#: products run over whole blocks of this many rows (see ``EmbeddingPool``)
ROW_BLOCK = 64


def cosine(a: np.ndarray, b: np.ndarray, eps: float = EPS) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + eps))


class EmbeddingPool:
    """Float32 embedding rows with float64 norms, scored against a query in one product.

    Why a pool: Anti-Persistence ranks the same task embeddings twice per task, once in the
    outcome log (mode selection) and once in the trajectory memory (retrieval). Both stores hold
    row ids into one shared pool (``EmbeddingMatrix(pool=...)``), so one matrix-vector product
    over the pool serves both; each store gathers its own rows from it. A shared pool
    (``dedupe=True``) keeps one row per distinct float32 vector: the row a store appends for a
    task is the row the other store appended for it, found by a 128-bit digest of the float32
    bytes (the float64 values are kept by the stores; the row is only ever scored).

    Products run over a multiple of ``ROW_BLOCK`` rows (the zero rows past the last are never
    read back). BLAS computes a row's dot product with a kernel that depends on where the row
    falls in its blocking, so over an arbitrary row count the same row can score differently in
    the last bit in two matrices, or in one matrix as it grows (the stores before pools did).
    Over whole blocks the score of a row is a function of the row and the query alone on one
    BLAS thread and on this kit's 2-core machines (``tests/test_shared_similarity.py`` checks it
    against per-store products, both ways), so identical vectors tie exactly and sharing a pool
    changes no score. A BLAS that splits rows among many threads at arbitrary boundaries can
    still move a last bit, as it could before.
    """

    def __init__(self, dim: int | None = None, *, dedupe: bool = False) -> None:
        self._dim = dim
        self._rows = np.zeros((0, dim or 0), dtype=np.float32)
        self._norms = np.zeros(0, dtype=np.float64)
        self._n = 0
        self._dedupe = dedupe
        self._by_digest: dict[bytes, int] = {}
        # the last query's scores: the selector and the retrieval (and corrective's second search)
        # rank against the same task, so later searches reuse the first product (one tuple swap:
        # thread-safe)
        self._last: tuple[bytes, int, np.ndarray] | None = None

    @property
    def dim(self) -> int | None:
        return self._dim

    def __len__(self) -> int:
        return self._n

    def check(self, vec: Any) -> np.ndarray:
        """``vec`` as a float64 vector of this pool's dimension (the first vector sets it)."""
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

    def add(self, vec: Any, *, checked: bool = False) -> int:
        """The row of ``vec`` (appended, or the existing row of an equal float32 vector when
        deduplicating); ``checked``: ``vec`` is what ``check`` returned, not to be checked again."""
        v32 = (vec if checked else self.check(vec)).astype(np.float32)
        digest = b""
        if self._dedupe:
            digest = hashlib.blake2b(v32.tobytes(), digest_size=16).digest()
            found = self._by_digest.get(digest)
            if found is not None:
                return found
        if self._n == self._rows.shape[0]:
            cap = max(ROW_BLOCK, 2 * self._rows.shape[0])  # stays a multiple of ROW_BLOCK
            rows = np.zeros((cap, self._dim), dtype=np.float32)
            rows[: self._n] = self._rows[: self._n]
            norms = np.zeros(cap, dtype=np.float64)
            norms[: self._n] = self._norms[: self._n]
            self._rows, self._norms = rows, norms
        self._rows[self._n] = v32
        self._norms[self._n] = float(np.linalg.norm(v32.astype(np.float64)))
        if self._dedupe:
            self._by_digest[digest] = self._n
        self._n += 1
        return self._n - 1

    def row(self, i: int) -> np.ndarray:
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._rows[i].astype(np.float64)

    def similarities(self, query: Any, eps: float = EPS) -> np.ndarray:
        """Cosine similarity of ``query`` to every row (float64, length n, read-only: callers gather or copy)."""
        q = self.check_query(query)
        n = self._n
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        key = q.tobytes() + np.float64(eps).tobytes()
        last = self._last
        if last is not None and last[1] == n and last[0] == key:
            return last[2]
        padded = -(-n // ROW_BLOCK) * ROW_BLOCK
        dots = (self._rows[:padded] @ q.astype(np.float32))[:n]
        sims = dots.astype(np.float64) / (self._norms[:n] * float(np.linalg.norm(q)) + eps)
        sims.flags.writeable = False
        self._last = (key, n, sims)
        return sims

    def check_query(self, query: Any) -> np.ndarray:
        q = np.asarray(query, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(q)):
            raise ValueError("query embedding contains NaN or infinite values")
        if self._dim is not None and q.size != self._dim:
            raise ValueError(f"query embedding has dimension {q.size}, store holds dimension {self._dim}")
        return q


class EmbeddingMatrix:
    """One store's task embeddings: a growable list of rows of an ``EmbeddingPool``.

    Alone (``pool=None``) the matrix owns a private pool and its rows are the pool's rows, as
    before pools existed; a store given a shared pool appends into it and ``similarities(q)``
    gathers its rows from the pool's one product. Either way row i of the matrix is the i-th
    vector appended, and appends are amortised O(d).
    """

    def __init__(self, dim: int | None = None, *, pool: EmbeddingPool | None = None) -> None:
        if pool is not None and dim is not None and pool.dim not in (None, dim):
            raise ValueError(f"a matrix of dimension {dim} cannot use a pool of dimension {pool.dim}")
        self._own = pool is None
        self._pool = EmbeddingPool(dim) if pool is None else pool
        self._ids = np.zeros(0, dtype=np.int64)
        self._n = 0

    @property
    def pool(self) -> EmbeddingPool:
        return self._pool

    @property
    def dim(self) -> int | None:
        return self._pool.dim

    def __len__(self) -> int:
        return self._n

    def append(self, vec: Any, *, checked: bool = False) -> int:
        """Add ``vec`` as the next row; raises ValueError (nothing added) on a bad vector or dimension
        (``checked``: ``vec`` is what ``pool.check`` returned)."""
        pool_row = self._pool.add(vec, checked=checked)
        if not self._own:
            if self._n == self._ids.shape[0]:
                ids = np.zeros(max(16, 2 * self._n), dtype=np.int64)
                ids[: self._n] = self._ids[: self._n]
                self._ids = ids
            self._ids[self._n] = pool_row
        self._n += 1
        return self._n - 1

    def pool_rows(self) -> np.ndarray:
        """This matrix's rows as pool row ids (row i of the matrix is pool row ``pool_rows()[i]``)."""
        return np.arange(self._n, dtype=np.int64) if self._own else self._ids[: self._n]

    def row(self, i: int) -> np.ndarray:
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._pool.row(i if self._own else int(self._ids[i]))

    def similarities(self, query: Any, eps: float = EPS) -> np.ndarray:
        """Cosine similarity of ``query`` to every row (float64, length n, the caller's own copy)."""
        if self._n == 0:
            return np.zeros(0, dtype=np.float64)
        sims = self._pool.similarities(query, eps)
        return sims[: self._n].copy() if self._own else sims[self._ids[: self._n]]


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
