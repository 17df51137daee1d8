"""Issue 45, part 1: the trajectory memory and the outcome log share one EmbeddingPool, so one product
per task scores both; every ranking and every score must be what the two separate products give.

The reference is computed here with numpy alone, store by store, as the stores did before the pool:
float32 rows, float64 norms, <a, b> / (|a| |b| + 1e-12), the stable top-k. The product runs over a
whole number of ``ROW_BLOCK`` rows, as ``EmbeddingPool`` documents (BLAS's per-row result otherwise
depends on where the row falls in its blocking); that rounding is also compared with the plain
product, to within float32 accumulation.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from antipersist_lib.core.selector import ModeSelector, SelectorConfig
from antipersist_lib.memory.outcome_log import OutcomeLog
from antipersist_lib.memory.similarity import ROW_BLOCK, EmbeddingMatrix, EmbeddingPool
from antipersist_lib.memory.trajectory_store import TrajectoryStore
from antipersist_lib.records import MODES, EpisodeOutcome, Step, Task, Trajectory

TYPES = ("clean", "heat", "cool")


def _scores(rows: list[np.ndarray], q: np.ndarray) -> np.ndarray:
    """One store's cosines, computed independently of the library."""
    if not rows:
        return np.zeros(0)
    r32 = np.stack(rows).astype(np.float32)
    n = r32.shape[0]
    padded = np.zeros((-(-n // ROW_BLOCK) * ROW_BLOCK, r32.shape[1]), dtype=np.float32)
    padded[:n] = r32
    dots = (padded @ q.astype(np.float32))[:n].astype(np.float64)
    norms = np.array([np.linalg.norm(r) for r in r32.astype(np.float64)])  # row by row, as the stores do
    ref = dots / (norms * np.linalg.norm(q) + 1e-12)
    plain = (r32 @ q.astype(np.float32)).astype(np.float64) / (norms * np.linalg.norm(q) + 1e-12)
    np.testing.assert_allclose(ref, plain, rtol=1e-5, atol=1e-6)  # only float32 accumulation order differs
    return ref


def _top(scores: np.ndarray, k: int, candidates: np.ndarray) -> list[int]:
    """Highest first, ties in index order (a full stable sort, not the library's partial one)."""
    order = sorted(candidates.tolist(), key=lambda i: (-scores[i], i))
    return order[:k]


def _build(seed: int, pool: EmbeddingPool | None, dim: int):
    """M_k and L_k from one random history: records in only one store, ties, tasks of three types."""
    rng = np.random.default_rng(seed)
    memory = TrajectoryStore(None, pool=pool)
    log = OutcomeLog(None, pool=pool)
    seen: list[np.ndarray] = []
    mem_rows: list[tuple[np.ndarray, str, bool, bool]] = []  # (embedding, type, success, infra)
    log_rows: list[np.ndarray] = []
    n = int(rng.integers(150, 400))
    for i in range(n):
        r = rng.random()
        if seen and r < 0.15:
            emb = seen[int(rng.integers(len(seen)))]  # the same task again: an exact tie
        elif seen and r < 0.2:  # a different float64 vector with the same float32 row: a tie too
            base = seen[int(rng.integers(len(seen)))]
            emb = np.nextafter(base, np.inf) if not np.array_equal(base.astype(np.float32), base) else base
        else:
            emb = rng.standard_normal(dim)
        seen.append(emb)
        kind = TYPES[int(rng.integers(len(TYPES)))]
        task = Task(i, "alfworld", kind, f"task {i}")
        success, infra = bool(rng.random() < 0.5), bool(rng.random() < 0.05)
        in_memory, in_log = rng.random() < 0.85, rng.random() < 0.8
        if in_memory:
            no_embedding = rng.random() < 0.05
            outcome = EpisodeOutcome(success, float(success), 1, infra_failure=infra)
            memory.add(task, Trajectory("o", (Step("a", "b"),)), outcome, embedding=None if no_embedding else emb)
            if not no_embedding:
                mem_rows.append((emb, kind, success, infra))
        if in_log:
            log.append(
                embedding=emb,
                mode=MODES[i % len(MODES)],
                reward=float(rng.uniform(-1, 1)),
                raw_success=success,
                task_type=kind,
                task_id=i,
                instruction=task.instruction,
            )
            log_rows.append(emb)
    return memory, log, mem_rows, log_rows


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dim", [7, 384])
@pytest.mark.parametrize("threads", [None, 1], ids=["blas-default", "blas-1-thread"])
def test_one_shared_product_gives_the_two_stores_their_own_rankings_and_scores(seed, dim, threads):
    with threadpool_limits(limits=1, user_api="blas") if threads else contextlib.nullcontext():
        _check_shared_against_separate(seed, dim)


def _check_shared_against_separate(seed: int, dim: int) -> None:
    pool = EmbeddingPool(dedupe=True)
    memory, log, mem_rows, log_rows = _build(seed, pool, dim)
    assert len(pool) < len(mem_rows) + len(log_rows)  # shared rows: fewer than the two stores hold
    alone_memory, alone_log, _, _ = _build(seed, None, dim)  # the stores used alone, as audits do
    rng = np.random.default_rng(1000 + seed)
    selector = ModeSelector(SelectorConfig(neighbourhood=12))
    for j in range(12):
        q = rng.standard_normal(dim) if j % 3 else np.asarray(log_rows[int(rng.integers(len(log_rows)))])
        # the selector's neighbourhood over the whole log
        ref_log = _scores(log_rows, q)
        want = _top(ref_log, 12, np.arange(len(log_rows)))
        for lg in (log, alone_log):
            got = selector.local_estimates(lg, q)
            assert list(got.neighbours) == want
            assert list(got.similarities) == [float(ref_log[i]) for i in want]  # bit for bit
        # retrieval, every outcome filter, under the task-type filter
        ref_mem = _scores([r[0] for r in mem_rows], q)
        task = Task(10**6 + j, "alfworld", TYPES[j % len(TYPES)], "query")
        emb_records = [r for r in memory if r.embedding is not None]
        for success in (None, True, False):
            cands = np.array(
                [
                    i
                    for i, (_, kind, ok, infra) in enumerate(mem_rows)
                    if not infra and kind == task.task_type and (success is None or ok == success)
                ],
                dtype=np.int64,
            )
            want = _top(ref_mem, 5, cands)
            for store in (memory, alone_memory):
                got = store.search(q, k=5, task=task, success=success)
                assert [r.record.record_id for r in got] == [emb_records[i].record_id for i in want]
                assert [r.similarity for r in got] == [float(ref_mem[i]) for i in want]


def test_a_store_alone_keeps_its_own_rows_and_a_shared_pool_one_row_per_vector():
    alone = EmbeddingMatrix()
    for v in ([1.0, 0.0], [1.0, 0.0], [0.0, 2.0]):
        alone.append(v)
    assert len(alone) == len(alone.pool) == 3  # no dedupe without a shared pool: unchanged behaviour
    pool = EmbeddingPool(dedupe=True)
    a, b = EmbeddingMatrix(pool=pool), EmbeddingMatrix(pool=pool)
    a.append([1.0, 0.0])
    b.append([0.0, 2.0])
    b.append([1.0, 0.0])
    assert len(pool) == 2 and b.pool_rows().tolist() == [1, 0] and a.pool_rows().tolist() == [0]
    assert b.similarities([1.0, 0.0]).tolist() == [0.0, 1.0 / (1.0 + 1e-12)]
    with pytest.raises(ValueError, match="dimension 3, this store holds dimension 2"):
        a.append([1.0, 0.0, 0.0])
    assert len(a) == 1 and len(pool) == 2  # nothing added by the refused vector


def test_one_product_per_task_for_both_stores(monkeypatch):
    pool = EmbeddingPool(dedupe=True)
    memory, log, _, _ = _build(3, pool, 16)
    calls = []
    real = EmbeddingPool.similarities

    def counting(self, query, eps=1e-12):
        out = real(self, query, eps)
        calls.append(out)
        return out

    monkeypatch.setattr(EmbeddingPool, "similarities", counting)
    q = np.random.default_rng(5).standard_normal(16)
    ModeSelector().local_estimates(log, q)
    memory.retrieve(q, "corrective", Task(1, "alfworld", "clean", "q"))
    assert len(calls) == 3 and all(c is calls[0] for c in calls)  # one product, reused by every search
