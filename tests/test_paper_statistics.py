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
