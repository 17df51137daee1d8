"""Cosine similarity exactly as B.3 defines it, and the stable top-k used by every retrieval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from antipersist_lib.memory.similarity import EPS, EmbeddingMatrix, cosine, top_k


def paper_sim(a, b):
    """<a, b> / (|a| |b| + 1e-12), written out in plain Python floats."""
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb + 1e-12)


ROWS = [
    [1.0, 0.0, 0.0],
    [0.0, 2.0, 0.0],
    [3.0, 4.0, 0.0],
    [-1.0, -1.0, -1.0],
    [0.0, 0.0, 0.0],  # zero vector
    [0.5, 0.5, 0.5],
]


def test_eps_is_papers():
    assert EPS == 1e-12


def test_similarities_match_hand_values():
    m = EmbeddingMatrix()
    for r in ROWS:
        m.append(r)
    assert len(m) == 6 and m.dim == 3
    q = [3.0, 4.0, 0.0]
    sims = m.similarities(q)
    assert sims.dtype == np.float64 and sims.shape == (6,)
    # hand-computed: |q| = 5
    expected = [
        3 / 5,  # [1,0,0]
        8 / 10,  # [0,2,0]: 8 / (2*5)
        1.0,  # itself: 25/25
        -7 / (math.sqrt(3) * 5),
        0.0,  # zero vector: 0 / (0 + eps) = 0, not NaN
        3.5 / (math.sqrt(0.75) * 5),
    ]
    np.testing.assert_allclose(sims, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(sims, [paper_sim(r, q) for r in ROWS], rtol=1e-6, atol=1e-7)
    assert not np.any(np.isnan(sims))
    assert sims[4] == 0.0


def test_zero_query_gives_zeros_not_nan():
    m = EmbeddingMatrix(2)
    m.append([1.0, 1.0])
    m.append([0.0, 0.0])
    sims = m.similarities([0.0, 0.0])
    assert sims.tolist() == [0.0, 0.0]


def test_eps_matters_for_tiny_vectors():
    # the paper's formula, not normalise-then-dot: for norms ~1e-7 the eps term is visible
    a = [1e-7, 0.0]
    m = EmbeddingMatrix()
    m.append(a)
    sim = m.similarities(a)[0]
    expected = 1e-14 / (1e-14 + 1e-12)  # ~0.0099, far from 1
    assert sim == pytest.approx(expected, rel=1e-4)
    assert cosine(np.array(a), np.array(a)) == pytest.approx(expected, rel=1e-9)


def test_cosine_function_hand_values():
    assert cosine(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == 0.0
    assert cosine(np.array([1.0, 2.0]), np.array([2.0, 4.0])) == pytest.approx(1.0, abs=1e-12)
    assert cosine(np.array([1.0, 2.0]), np.array([-1.0, -2.0])) == pytest.approx(-1.0, abs=1e-12)
    assert cosine(np.zeros(3), np.array([1.0, 2.0, 3.0])) == 0.0
    assert cosine(np.array([3.0, 4.0]), np.array([4.0, 3.0])) == pytest.approx(24 / 25, abs=1e-12)


def test_dimension_mismatch_names_both_dims():
    m = EmbeddingMatrix()
    m.append([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError) as exc:
        m.append([1.0, 2.0, 3.0])
    assert "3" in str(exc.value) and "4" in str(exc.value)
    with pytest.raises(ValueError) as exc:
        m.similarities([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    assert "7" in str(exc.value) and "4" in str(exc.value)
    assert len(m) == 1  # the failed append stored nothing


def test_declared_dim_enforced_from_the_start():
    m = EmbeddingMatrix(dim=5)
    assert m.dim == 5
    with pytest.raises(ValueError, match="5"):
        m.append([1.0, 2.0])
    assert len(m) == 0


@pytest.mark.parametrize("bad", [[1.0, float("nan")], [float("inf"), 0.0], [-float("inf"), 1.0]])
def test_non_finite_rejected(bad):
    m = EmbeddingMatrix()
    m.append([1.0, 1.0])
    with pytest.raises(ValueError, match="NaN or infinite"):
        m.append(bad)
    assert len(m) == 1


def test_empty_vector_rejected():
    with pytest.raises(ValueError):
        EmbeddingMatrix().append([])


def test_empty_matrix_similarities_empty():
    assert EmbeddingMatrix().similarities([1.0, 2.0]).shape == (0,)


def test_growth_past_capacity_keeps_rows():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(100, 8)).astype(np.float32)  # float32 so stored rows are exact
    m = EmbeddingMatrix()
    for i, r in enumerate(data):
        assert m.append(r) == i
    assert len(m) == 100
    for i in (0, 15, 16, 17, 31, 32, 63, 64, 99):
        np.testing.assert_array_equal(m.row(i), data[i].astype(np.float64))
    q = rng.normal(size=8)
    sims = m.similarities(q)
    expected = [paper_sim(r.astype(np.float64).tolist(), q.tolist()) for r in data]
    np.testing.assert_allclose(sims, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(IndexError):
        m.row(100)
    with pytest.raises(IndexError):
        m.row(-1)


def test_top_k_orders_highest_first():
    s = np.array([0.1, 0.9, 0.5, 0.7, -0.2])
    assert top_k(s, 3).tolist() == [1, 3, 2]
    assert top_k(s, 10).tolist() == [1, 3, 2, 0, 4]  # k larger than n: all
    assert top_k(s, 0).tolist() == []
    assert top_k(s, -1).tolist() == []


def test_top_k_ties_keep_earlier_index():
    s = np.array([0.5, 0.8, 0.5, 0.8, 0.5])
    assert top_k(s, 5).tolist() == [1, 3, 0, 2, 4]
    assert top_k(s, 3).tolist() == [1, 3, 0]
    assert top_k(np.zeros(6), 4).tolist() == [0, 1, 2, 3]


def test_top_k_candidates_subset():
    s = np.array([0.9, 0.1, 0.8, 0.3, 0.8, 0.95])
    cands = np.array([1, 2, 3, 4])  # excludes the two best (0 and 5)
    got = top_k(s, 3, cands)
    assert got.tolist() == [2, 4, 3]
    assert set(got.tolist()) <= set(cands.tolist())
    assert top_k(s, 3, np.array([], dtype=np.int64)).tolist() == []
    assert top_k(s, 10, [5]).tolist() == [5]


def test_top_k_ties_stable_on_large_arrays():
    # large enough that an unstable sort (introsort / SIMD sort) would scramble equal scores
    rng = np.random.default_rng(1)
    s = rng.choice([0.2, 0.5, 0.9], size=500)
    got = top_k(s, 500).tolist()
    expected = [i for v in (0.9, 0.5, 0.2) for i in range(500) if s[i] == v]
    assert got == expected
    cands = np.arange(0, 500, 3)
    assert top_k(s, 50, cands).tolist() == [i for i in expected if i % 3 == 0][:50]


def test_partial_top_k_equals_a_full_stable_sort_with_ties():
    rng = np.random.default_rng(0)
    for n, k in [(1000, 5), (300, 1), (5000, 10), (70, 5)]:
        scores = rng.integers(0, 7, size=n).astype(np.float64)  # many ties
        cands = np.sort(rng.choice(n, size=n // 2, replace=False))
        for c in (None, cands):
            idx = np.arange(n) if c is None else c
            expected = idx[np.argsort(-scores[idx], kind="stable")[:k]]
            assert top_k(scores, k, c).tolist() == expected.tolist()


def test_repeated_query_reuses_the_product_but_not_after_an_append():
    m = EmbeddingMatrix()
    m.append(np.array([1.0, 0.0]))
    q = np.array([1.0, 1.0])
    first = m.similarities(q)
    first[0] = 99.0  # callers get a copy: the cached scores cannot be changed from outside
    assert m.similarities(q)[0] == pytest.approx(1 / np.sqrt(2))
    m.append(np.array([0.0, 1.0]))
    assert m.similarities(q).shape == (2,)
