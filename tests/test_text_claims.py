"""Sections 4.2-4.3 recounted from a Table 1 frame (``paper_text.text_claims``), Figure 4's frame and bars, and which
held-out denominators the ALFWorld cells of Tables 1-2 can come from (``paper_text.alfworld_denominator_finding``)."""

from __future__ import annotations

import pandas as pd
import pytest

from antipersist_lib.analysis import paper, paper_text, plots, results

#: the counts as the paper's text prints them (Sections 4.2-4.3), written out here so that a change on either
#: side (the recount or the reference data) fails
PAPER_COUNTS = {
    "best": "7 of 9",
    "beats_trajectory_memory": "9 of 9",
    "beats_abstraction_memory": "9 of 9",
    "beats_joint_memory": "8 of 9",
    "average_anti_persistence": "59.9",
    "average_trajectory_memory": "53.5",
    "average_abstraction_memory": "49.0",
    "average_joint_memory": "49.3",
    "average_reflexion": "52.9",
    "strongest_agent_baseline": "reflexion",
    "abstraction_below_trajectory": "7 of 9",
    "joint_below_trajectory": "7 of 9",
    "best_memory_configuration_figure2": "6 of 6",
    "autorefine_vs_abstraction": "better 1, equal 1, worse 4 of 6",
    "beats_autorefine": "6 of 6",
}


def _paper_t1() -> pd.DataFrame:
    return results.paper_frame(paper.table1())


def _claims(t1: pd.DataFrame) -> dict[str, str]:
    return dict(zip(*paper_text.text_claims(t1)[["claim", "this_run"]].T.values))


def test_the_papers_own_table1_gives_the_counts_its_text_states():
    claims = paper_text.text_claims(_paper_t1())
    assert dict(zip(claims["claim"], claims["paper"])) == PAPER_COUNTS
    assert dict(zip(claims["claim"], claims["this_run"])) == PAPER_COUNTS
    assert claims["agrees"].tolist() == [True] * len(PAPER_COUNTS)
    assert claims.set_index("claim").loc["autorefine_vs_abstraction", "settings"] == 6
    assert claims.set_index("claim").loc["best", "settings"] == 9
    assert all(isinstance(s, str) and s for s in claims["sentence"])


def _edit(t1: pd.DataFrame, method: str, backbone: str, benchmark: str, value: float) -> pd.DataFrame:
    t1 = t1.copy()
    at = (t1["method"] == method) & (t1["backbone"] == backbone) & (t1["benchmark"] == benchmark)
    assert at.sum() == 1
    t1.loc[at, "mean"] = value
    return t1


def test_a_changed_table_changes_the_counts():
    t1 = _edit(_paper_t1(), "anti_persistence", "gemma-4-31b-it", "alfworld", 98.1)  # now above Reflexion's 98.0
    t1 = _edit(t1, "autorefine", "llama-4-scout", "webshop", 37.2)  # no longer equal to abstraction memory's 37.3
    t1 = _edit(t1, "joint_memory", "gemma-4-31b-it", "scienceworld", 54.1)  # equal to Anti-Persistence: not lower
    got = _claims(t1)
    assert got["best"] == "8 of 9"  # Gemma ALFWorld now counts; Gemma ScienceWorld's tie with joint memory does not
    assert got["autorefine_vs_abstraction"] == "better 1, equal 0, worse 5 of 6"
    assert got["beats_joint_memory"] == "8 of 9"  # a tie is not "higher"
    assert got["average_anti_persistence"] == f"{(538.9 - 97.3 + 98.1) / 9:.1f}"
    # compared at one decimal, as printed: 54.04 is 54.0, below 54.1
    got = _claims(_edit(_paper_t1(), "joint_memory", "gemma-4-31b-it", "scienceworld", 54.04))
    assert got["beats_joint_memory"] == "9 of 9" and got["best"] == "8 of 9"


def test_a_small_run_says_what_is_missing_instead_of_counting():
    t1 = _paper_t1()
    small = t1[
        t1["method"].isin(["trajectory_memory", "abstraction_memory", "joint_memory", "anti_persistence"])
        & (t1["backbone"] == "qwen3-coder-next")
    ]
    got = paper_text.text_claims(small).set_index("claim")
    assert got.loc["best", "this_run"] == "not computed (missing react, reflexion, expel, autorefine)"
    assert got.loc["autorefine_vs_abstraction", "this_run"] == "not computed (missing autorefine)"
    assert got.loc["average_reflexion", "agrees"] is None
    assert got.loc["beats_trajectory_memory", "this_run"] == "3 of 3"  # counted over this run's own settings
    assert got.loc["best_memory_configuration_figure2", "this_run"] == "3 of 3"
    holed = small[~((small["method"] == "joint_memory") & (small["benchmark"] == "webshop"))]
    got = paper_text.text_claims(holed).set_index("claim")
    assert (
        got.loc["beats_joint_memory", "this_run"] == "not computed (missing joint_memory in qwen3-coder-next/webshop)"
    )
    assert got.loc["average_joint_memory", "this_run"].startswith("not computed (missing joint_memory in")
    assert got.loc["beats_abstraction_memory", "this_run"] == "3 of 3"
    empty = paper_text.text_claims(results.table1(pd.DataFrame()))
    assert empty["this_run"].str.startswith("not computed").all()


def test_alfworld_cells_fit_50_tasks_far_more_often_than_134():
    finding = paper_text.alfworld_denominator_finding()
    assert finding.loc[134, "cells"] == 28 and finding.loc[134, "fit"] == 13
    assert finding.loc[50, "cells"] == 28 and finding.loc[50, "fit"] == 21
    assert finding.loc[134, "chance"] == pytest.approx(403 / 1001)
    assert finding.loc[50, "chance"] == pytest.approx(151 / 1001)
    cells = paper_text.alfworld_denominator_cells()
    row = cells[(cells["method"] == "react") & (cells["backbone"] == "llama-4-scout")].iloc[0]
    assert row["mean"] == 29.3 and row["fits_50"] and not row["fits_134"]  # 44/150 = 29.33; no K/402 rounds to 29.3
    assert paper_text.fits_mean_of_seed_scores(54.7, 134)  # 220/402 = 54.73
    assert paper_text.fits_mean_of_seed_scores(100.0, 50) and paper_text.fits_mean_of_seed_scores(0.0, 134)
    assert not paper_text.fits_mean_of_seed_scores(50.1, 50)


def test_figure4_shows_the_papers_six_settings_and_this_runs_own():
    df = paper_text.figure4_frame(pd.DataFrame())
    assert set(df["source"]) == {"paper"} and len(df) == 18
    assert set(zip(df["backbone"], df["benchmark"])) == {
        (b, k) for b in ("llama-4-scout", "qwen3-coder-next") for k in paper.BENCHMARKS
    }
    cell = df[(df["method"] == "autorefine") & (df["backbone"] == "qwen3-coder-next") & (df["benchmark"] == "alfworld")]
    assert cell[["mean", "std"]].values.tolist() == [[83.7, 6.7]]
    mine = _paper_t1().assign(backbone="my-model", seeds=2)  # a user's backbone: its own settings, no Gemma
    runs_t1 = pd.concat([mine, _paper_t1().assign(seeds=3)[lambda d: d["backbone"] == "gemma-4-31b-it"]])
    import unittest.mock as mock

    with mock.patch.object(paper_text, "table1", return_value=runs_t1):
        both = paper_text.figure4_frame(pd.DataFrame({"x": [1]}))
    assert set(both.loc[both["source"] == "this run", "backbone"]) == {"my-model"}
    assert set(both.loc[both["source"] == "this run", "method"]) == set(paper.FIGURE4_METHODS)
    fig = plots.figure4_bars(both, title="Figure 4")
    assert [ax.get_title() for ax in fig.axes] == ["paper", "this run"] and not plots.text_overlaps(fig)
