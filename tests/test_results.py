"""The notebooks' tables (analysis/results.py): each built from a tiny hand-made frame or the
paper's own numbers, with the values a reader of the notebook would check by eye."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from antipersist_lib.analysis import paper, results
from antipersist_lib.analysis.paper import Cell
from antipersist_lib.methods import TABLE1_METHODS

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "tests" / "fixtures" / "runs" / "smoke"


def _runs(rows: list[tuple]) -> pd.DataFrame:
    """(method, variant, backbone, benchmark, seed, iteration, success[, calls]) -> a load_iterations-like frame."""
    out = []
    for r in rows:
        method, variant, bb, bench, seed, it, success = r[:7]
        out.append(
            {
                "run": f"/runs/{bench}/{bb}/{variant}/seed{seed}",
                "method": method,
                "variant": variant,
                "backbone": bb,
                "benchmark": bench,
                "seed": seed,
                "iteration": it,
                "success": success,
                "calls": r[7] if len(r) > 7 else 1.0,
                "steps": 10.0 * it,
                "synthesis_mode_usage": None,
            }
        )
    return pd.DataFrame(out)


def test_mean_std_table_pivots_one_decimal_cells():
    cells = pd.DataFrame(
        {"method": ["a", "a", "b"], "bench": ["x", "y", "x"], "mean": [1.0, 2.25, 30.0], "std": [0.5, 0.04, 1.0]}
    )
    t = results.mean_std_table(cells, index="method", columns="bench")
    assert list(t.index) == ["a", "b"] and list(t.columns) == ["x", "y"]
    assert t.loc["a", "x"] == "1.0 ± 0.5" and t.loc["a", "y"] == "2.2 ± 0.0" and t.loc["b", "x"] == "30.0 ± 1.0"
    assert pd.isna(t.loc["b", "y"])


def test_paper_table1_is_the_printed_table():
    t = results.paper_table1()
    assert list(t.index) == list(TABLE1_METHODS)  # the paper's row order, as the protocol's method list has it
    assert set(t.columns) == set(paper.SETTINGS) and t.shape == (8, 9)
    assert t.loc["anti_persistence", ("llama-4-scout", "alfworld")] == "54.7 ± 2.9"
    assert t.loc["react", ("gemma-4-31b-it", "scienceworld")] == "44.2 ± 1.2"


def test_paper_table2_has_discard_beside_persist():
    t = results.paper_table2()
    assert list(t.columns) == ["discard", "persist"] and len(t) == 4
    assert tuple(t.loc[("llama-4-scout", "alfworld")]) == ("54.7 ± 2.9", "26.7 ± 6.1")


def test_paper_table6_holds_the_paper_call_means():
    t = results.paper_table6()
    assert t.shape == (len({c.method for c in paper.table6()}), 9) == (4, 9)
    for c in paper.table6():
        assert t.loc[c.method, (c.backbone, c.benchmark)] == c.mean


def test_beside_paper_mean_averages_the_paper_over_backbones():
    t1 = pd.DataFrame({"method": ["anti_persistence", "nope"], "benchmark": ["alfworld", "alfworld"], "mean": [1.0, 2]})
    side = results.beside_paper_mean(t1)
    expected = sum(c.mean for c in paper.table1() if (c.method, c.benchmark) == ("anti_persistence", "alfworld")) / 3
    col = "paper mean (avg over backbones)"
    assert list(side.columns) == ["method", "benchmark", "mean", col]
    assert side.loc[0, col] == pytest.approx(expected) and pd.isna(side.loc[1, col])


def test_table7_frame_indexes_by_baseline():
    class Row:
        def __init__(self, b, d):
            self.b, self.d = b, d

        def to_dict(self):
            return {"baseline": self.b, "mean_diff": self.d}

    t = results.table7_frame([Row("react", 1.5), Row("expel", -2.0)])
    assert list(t.index) == ["react", "expel"] and t.index.name == "baseline"
    assert t.loc["expel", "mean_diff"] == -2.0


def test_table7_of_runs_pairs_final_iteration_means_by_setting():
    settings = [("b1", "alf"), ("b1", "web"), ("b2", "alf")]
    ours, react, refl = [50, 60, 70], [40, 65, 50], [30, 20, 10]
    rows = []
    for (bb, bench), a, r, f in zip(settings, ours, react, refl):
        for method, v in (("anti_persistence", a), ("react", r), ("reflexion", f)):
            rows.append((method, method, bb, bench, 42, 1, 0.0))  # an earlier iteration: ignored
            rows.append((method, method, bb, bench, 42, 2, float(v)))
    t = results.table7_of_runs(_runs(rows))
    assert sorted(t.index) == ["react", "reflexion"]
    assert t.loc["react", "mean_diff"] == pytest.approx((10 - 5 + 20) / 3)
    assert t.loc["react", "positive"] == 2 and t.loc["reflexion", "positive"] == 3
    assert t.loc["reflexion", "mean_diff"] == pytest.approx((20 + 40 + 60) / 3)


@pytest.mark.parametrize(
    "rows",
    [
        [],
        [("react", "react", "b", "alf", 1, 1, 1.0), ("react", "react", "b", "web", 1, 1, 1.0)],  # no anti_persistence
        [("anti_persistence", "a", "b", "alf", 1, 1, 1.0), ("react", "r", "b", "alf", 1, 1, 1.0)],  # one setting
    ],
)
def test_table7_of_runs_is_none_when_nothing_can_be_paired(rows):
    assert results.table7_of_runs(_runs(rows) if rows else pd.DataFrame()) is None


def test_figure3_points_paper_averages_and_this_runs_final_iteration():
    paper_only = results.figure3_points(pd.DataFrame())
    assert set(paper_only["source"]) == {"paper"} and len(paper_only) == 4  # Table 6 has four methods
    ap = paper_only.set_index("method").loc["anti_persistence"]
    assert ap["calls"] == pytest.approx(sum(c.mean for c in paper.table6() if c.method == "anti_persistence") / 9)
    assert ap["success"] == pytest.approx(sum(c.mean for c in paper.table1() if c.method == "anti_persistence") / 9)
    runs = _runs(
        [
            ("react", "react", "b", "alf", 1, 1, 0.0, 99.0),
            ("react", "react", "b", "alf", 1, 2, 20.0, 3.0),
            ("react", "react", "b", "web", 1, 2, 40.0, 5.0),
        ]
    )
    mine = results.figure3_points(runs).query("source == 'this run'")
    assert mine[["method", "calls", "success"]].values.tolist() == [["react", 4.0, 30.0]]


def test_paper_final_success_keeps_the_named_methods():
    f = results.paper_final_success(["react", "anti_persistence"])
    assert sorted(set(f["method"])) == ["anti_persistence", "react"] and len(f) == 18
    assert "success" in f.columns and "mean" not in f.columns


def test_iteration_curves_average_seeds_per_iteration():
    runs = _runs(
        [
            ("react", "react", "b", "alf", 1, 1, 10.0),
            ("react", "react", "b", "alf", 2, 1, 30.0),
            ("react", "react", "b", "alf", 1, 2, 50.0),
        ]
    )
    c = results.iteration_curves(runs)
    assert list(c.columns) == ["benchmark", "backbone", "method", "iteration", "success", "steps"]
    assert c["success"].tolist() == [20.0, 50.0] and c["steps"].tolist() == [10.0, 20.0]
    assert results.iteration_curves(pd.DataFrame()).empty


def test_beside_paper_puts_both_sources_in_one_frame():
    cells = [Cell("Figure 6", "anti_persistence", "qwen", "alf", 96.0, None, "policy=bandit")]
    mine = pd.DataFrame(
        {"policy": ["bandit", "random"], "benchmark": ["alf", "alf"], "backbone": ["tiny"] * 2, "success": [5.0, 1.0]}
    )
    both = results.beside_paper(cells, mine, key="policy")
    assert list(both.columns) == ["source", "benchmark", "policy", "success", "setting"]
    assert both["policy"].tolist() == ["bandit", "bandit", "random"]
    assert both["setting"].tolist() == ["paper: qwen / alf", "this run: tiny / alf", "this run: tiny / alf"]
    assert both["success"].tolist() == [96.0, 5.0, 1.0]


def test_discard_minus_persist_per_setting():
    gaps = results.discard_minus_persist(paper.table2())
    assert gaps.loc[("llama-4-scout", "alfworld")] == pytest.approx(54.7 - 26.7)
    assert len(gaps) == 4 and (gaps > 0).all()
    cells = [Cell("t", "m", "b", "x", 1.0, None, "discard"), Cell("t", "m", "b", "x", 3.0, None, "persist")]
    assert results.discard_minus_persist(cells).tolist() == [-2.0]


def test_mode_facts_counts_used_modes():
    freq = pd.DataFrame(
        {
            "backbone": ["b", "b"],
            "benchmark": ["x", "y"],
            "none": [0.0, 0.1],
            "imitation": [0.5, 0.0],
            "strategic": [0.5, 0.9],
            "corrective": [0.0, 0.0],
        }
    )
    f = results.mode_facts(freq)
    assert f["modes used"].tolist() == [2, 2] and f["none used"].tolist() == [False, True]


def test_paper_sweep_splits_figure12_and_names_unknown_sweeps():
    assert {c.source for c in results.paper_sweep("B")} == {"Figure 12a"}
    assert {c.source for c in results.paper_sweep("B_hat")} == {"Figure 12b"}
    assert results.paper_sweep("gamma") == paper.figure5_gamma()
    with pytest.raises(ValueError, match="no paper sweep 'delta'"):
        results.paper_sweep("delta")


def test_sweep_frame_reads_values_from_variants_and_folders():
    runs = _runs(
        [
            ("anti_persistence", "gamma-0.98", "tiny", "alfworld", 42, 1, 10.0),
            ("anti_persistence", "anti_persistence", "tiny", "alfworld", 42, 1, 30.0),
            ("anti_persistence", "lambda-0.2", "tiny", "alfworld", 42, 1, 99.0),  # another sweep: left out
        ]
    )
    f = results.sweep_frame(runs, "gamma", {"gamma-0.98": 0.98, "anti_persistence": 0.998})
    assert list(f.columns) == ["source", "benchmark", "value", "success", "synthesis_mode_usage"]
    p = f[f["source"] == "paper: qwen3-coder-next"]
    assert sorted(set(p["value"])) == [0.98, 0.99, 0.998, 1.0] and p["synthesis_mode_usage"].isna().all()
    mine = f[f["source"] == "this run: tiny"].sort_values("value")
    assert mine[["value", "success"]].values.tolist() == [[0.98, 10.0], [0.998, 30.0]]


def test_figure12_frame_holds_both_budgets():
    f = results.figure12_frame(pd.DataFrame(), {"B": {}, "B_hat": {}})
    assert f["parameter"].value_counts().to_dict() == {"B_hat": 8, "B": 6}
    assert sorted(set(f.loc[f["parameter"] == "B", "value"])) == [1.0, 5.0, 10.0]


def test_best_paper_point_is_the_argmax_per_benchmark():
    assert results.best_paper_point("gamma").tolist() == ["gamma=0.998", "gamma=0.998"]
    assert results.best_paper_point("B_hat").tolist() == ["B_hat=10", "B_hat=10"]


def test_audit_abstractions_labels_only_runs_with_a_store():
    runs = results.load_iterations(SMOKE)
    audited, labels = results.audit_abstractions(runs, n_min=3, delta=0.05, pool="available")
    assert sorted({r.method for r in audited}) == ["abstraction_memory", "joint_memory"]
    assert set(labels["method"]) == {"abstraction_memory", "joint_memory"}
    assert list(labels.columns[:4]) == ["run", "method", "benchmark", "abstraction_id"]
    assert set(labels["run"]) == {r.run for r in audited}
    none, no_labels = results.audit_abstractions(pd.DataFrame())
    assert none == [] and no_labels.empty


def test_figure10_table_puts_the_paper_row_first():
    pooled = pd.DataFrame([{"variant": "v", "backbone": "b", "benchmark": "x", "alpha_emp": 0.5, "alpha_0": 0.25}])
    t = results.figure10_table(pooled)
    assert t["source"].tolist() == ["paper", "this run"]
    assert t.loc[0, "gap"] == paper.FIGURE10_LARGEST_GAP["gap"] and pd.isna(t.loc[0, "alpha_emp"])
    assert t.loc[1, "alpha_emp"] == 0.5
    assert results.figure10_table(pd.DataFrame())["source"].tolist() == ["paper"]


def test_figure10_settings_labels_or_placeholder():
    pooled = pd.DataFrame([{"variant": "v", "backbone": "b", "benchmark": "x", "alpha_emp": 0.5, "alpha_0": None}])
    assert results.figure10_settings(pooled)["setting"].tolist() == ["v\nb\nx"]
    empty = results.figure10_settings(pd.DataFrame())
    assert empty["setting"].tolist() == ["(no runs)"] and empty["alpha_emp"].isna().all()


def test_figure11_panel_and_by_condition():
    names = {"skills-none": "no skills", "skills-useful": "useful skills", "skills-toxic": "toxic skills"}
    runs = _runs(
        [
            ("frozen_skills", "skills-useful", "tiny", "alfworld", 42, 1, 20.0),
            ("frozen_skills", "skills-none", "tiny", "alfworld", 42, 1, 10.0),
            ("abstraction_memory", "abstraction-judge", "tiny", "alfworld", 42, 1, 99.0),  # panel (b): left out
        ]
    )
    f = results.figure11_panel(runs, "Figure 11a", names)
    assert list(f.columns) == ["source", "condition", "success"]
    assert len(f[f["source"] == "paper: qwen3-coder-next / appworld"]) == 3
    mine = f[f["source"] == "this run: tiny / alfworld"].set_index("condition")["success"]
    assert mine.to_dict() == {"no skills": 10.0, "useful skills": 20.0}
    t = results.by_condition(f, names)
    assert list(t.index) == ["no skills", "useful skills", "toxic skills"]
    assert t.loc["useful skills", "paper: qwen3-coder-next / appworld"] == 40.0
    assert pd.isna(t.loc["toxic skills", "this run: tiny / alfworld"])
    assert len(results.figure11_panel(pd.DataFrame(), "Figure 11b", {})) == 4
