"""Reference data and the Table 7 statistics, checked against what the paper's text states."""

from __future__ import annotations

import numpy as np
import pytest

from antipersist_lib.analysis import paper
from antipersist_lib.analysis.statistics import holm, table7
from antipersist_lib.methods import TABLE1_METHODS


def test_table1_has_every_cell_and_the_quoted_averages():
    cells = paper.table1()
    assert len(cells) == 8 * 9
    means = paper.table1_means()
    for method, avg in paper.EQUAL_WEIGHT_AVERAGES.items():
        assert np.mean(means[method]) == pytest.approx(avg, abs=0.05), method
    assert {c.source for c in paper.table6()} == {"Table 6"} and len(paper.table6()) == 4 * 9


def test_holm_by_hand():
    # sorted p: 0.01 (x3 = 0.03), 0.02 (x2 = 0.04), 0.04 (x1 = 0.04, monotone)
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_table7_from_the_papers_table1_matches_the_text():
    rows = {r.baseline: r for r in table7(paper.table1_means())}
    assert set(rows) == set(TABLE1_METHODS) - {"anti_persistence"}
    # "mean differences ranging from +6.4 to +19.2 percentage points"
    means = sorted(r.mean_diff for r in rows.values())
    assert means[0] == pytest.approx(6.4, abs=0.05) and means[-1] == pytest.approx(19.2, abs=0.05)
    # "higher success in all nine settings against five baselines and in eight against Reflexion and joint memory"
    assert rows["reflexion"].positive == 8 and rows["joint_memory"].positive == 8
    assert sum(1 for r in rows.values() if r.positive == 9) == 5
    # "all seven Holm-adjusted p-values were below 0.05 in each test family"
    assert all(r.p_t_holm < 0.05 and r.p_wilcoxon_holm < 0.05 for r in rows.values())
    # exact Wilcoxon with 9 settings, all positive: p = 2 / 2**9
    nine = [r for r in rows.values() if r.positive == 9][0]
    assert nine.p_wilcoxon == pytest.approx(2 / 512)
    for r in rows.values():
        assert r.ci_low < r.mean_diff < r.ci_high and r.p_t_holm >= r.p_t


def test_table7_rejects_mismatched_rows():
    with pytest.raises(ValueError, match="settings"):
        table7({"anti_persistence": [1, 2, 3], "react": [1, 2]})
    with pytest.raises(ValueError, match="no row"):
        table7({"react": [1, 2]})


def test_table7_pairs_unrounded_or_one_decimal_means_on_request():
    """The paper's Table 7 paired Table 1's one-decimal means; this kit's own Table 7 pairs unrounded
    means unless asked for the printed ones."""
    from antipersist_lib.analysis import statistics

    cells = {
        "anti_persistence": [10.04, 20.04, 30.04, 40.04],
        "react": [10.0, 20.0, 30.06, 40.0],
    }
    unrounded = statistics.table7(cells)[0]
    assert (unrounded.positive, unrounded.negative) == (3, 1)
    assert unrounded.mean_diff == pytest.approx((0.04 * 3 - 0.02) / 4)
    printed = statistics.table7(cells, decimals=1)[0]
    assert (printed.positive, printed.negative) == (0, 1)  # 10.0 vs 10.0 ..., 30.0 vs 30.1
    assert printed.mean_diff == pytest.approx(-0.1 / 4)
    assert statistics.printed_means([54.66, 1.25, 2.0]) == [54.7, 1.2, 2.0]  # as the table prints them
    # the paper's own means are one-decimal already: both readings agree
    t = statistics.table7(paper.table1_means())
    assert [c.mean_diff for c in statistics.table7(paper.table1_means(), decimals=1)] == [c.mean_diff for c in t]
