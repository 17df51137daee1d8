"""The notebooks' tables (analysis/results.py): each built from a tiny hand-made frame or the
paper's own numbers, with the values a reader of the notebook would check by eye."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from antipersist_lib.analysis import paper, paper_tables, results, table7
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
    t = paper_tables.mean_std_table(cells, index="method", columns="bench")
    assert list(t.index) == ["a", "b"] and list(t.columns) == ["x", "y"]
    assert t.loc["a", "x"] == "1.0 ± 0.5" and t.loc["a", "y"] == "2.2 ± 0.0" and t.loc["b", "x"] == "30.0 ± 1.0"
    assert pd.isna(t.loc["b", "y"])


def test_paper_table1_is_the_printed_table():
    t = paper_tables.paper_table1()
    assert list(t.index) == list(TABLE1_METHODS)  # the paper's row order, as the protocol's method list has it
    assert set(t.columns) == set(paper.SETTINGS) and t.shape == (8, 9)
    assert t.loc["anti_persistence", ("llama-4-scout", "alfworld")] == "54.7 ± 2.9"
    assert t.loc["react", ("gemma-4-31b-it", "scienceworld")] == "44.2 ± 1.2"


def test_paper_table2_has_discard_beside_persist():
    t = paper_tables.paper_table2()
    assert list(t.columns) == ["discard", "persist"] and len(t) == 4
    assert tuple(t.loc[("llama-4-scout", "alfworld")]) == ("54.7 ± 2.9", "26.7 ± 6.1")


def test_paper_table6_holds_the_paper_call_means():
    t = paper_tables.paper_table6()
    assert t.shape == (len({c.method for c in paper.table6()}), 9) == (4, 9)
    for c in paper.table6():
        assert t.loc[c.method, (c.backbone, c.benchmark)] == c.mean


def test_paper_table6_keeps_the_papers_row_and_column_order():
    t = paper_tables.paper_table6()
    assert list(t.index) == ["trajectory_memory", "abstraction_memory", "joint_memory", "anti_persistence"]
    assert list(t.columns) == list(paper.SETTINGS)  # not sorted by name (gemma would come first)


def test_main_rows_are_the_default_folder_of_the_eight_methods():
    rows = [
        ("anti_persistence", "anti_persistence", "qwen", "alf", 1, 1, 50.0),
        ("anti_persistence", "gamma-0.98", "qwen", "alf", 1, 1, 0.0),  # a sweep point in the same root
        ("abstraction_memory", "abstraction-judge", "qwen", "alf", 1, 1, 0.0),
        ("frozen_skills", "skills-none", "qwen", "alf", 1, 1, 0.0),
        ("react", "react", "qwen", "alf", 1, 1, 10.0),
    ]
    t1 = results.table1(_runs(rows))
    assert t1[["method", "mean"]].values.tolist() == [["react", 10.0], ["anti_persistence", 50.0]]


def test_paper_order_puts_known_values_first_and_keeps_the_rest_in_order_seen():
    df = pd.DataFrame(
        {
            "method": ["anti_persistence", "react", "react", "react"],
            "backbone": ["gemma-4-31b-it", "tiny", "llama-4-scout", "gemma-4-31b-it"],
            "benchmark": ["alfworld", "scienceworld", "webshop", "alfworld"],
        }
    )
    out = results.paper_order(df)
    assert out.values.tolist() == [
        ["react", "llama-4-scout", "webshop"],
        ["react", "gemma-4-31b-it", "alfworld"],
        ["react", "tiny", "scienceworld"],
        ["anti_persistence", "gemma-4-31b-it", "alfworld"],
    ]


def test_table1_beside_paper_puts_the_same_backbones_cell_beside_each_cell():
    rows = []
    for seed, v in ((42, 50.0), (43, 60.0)):
        rows.append(("anti_persistence", "anti_persistence", "qwen3-coder-next", "alfworld", seed, 1, v))
        rows.append(("anti_persistence", "anti_persistence", "embedded-tiny", "alfworld", seed, 1, 0.0))
        rows.append(("react", "react", "qwen3-coder-next", "alfworld", seed, 1, 40.0))
    t = paper_tables.table1_beside_paper(_runs(rows))
    assert list(t.index) == ["react", "anti_persistence"]
    assert list(t.columns) == [
        ("qwen3-coder-next", "alfworld", "this run"),
        ("qwen3-coder-next", "alfworld", "paper"),
        ("embedded-tiny", "alfworld", "this run"),  # a backbone the paper did not use: no paper cell
    ]
    assert t.loc["anti_persistence", ("qwen3-coder-next", "alfworld", "this run")] == "55.0 ± 7.1"
    assert t.loc["anti_persistence", ("qwen3-coder-next", "alfworld", "paper")] == "96.0 ± 1.4"  # Qwen's own cell
    assert t.loc["react", ("qwen3-coder-next", "alfworld", "paper")] == "70.4 ± 1.8"


def test_table6_of_this_run_counts_calls_per_setting_beside_the_papers():
    rows = [
        ("anti_persistence", "anti_persistence", "llama-4-scout", "webshop", 42, 1, 0.0, 3.0),
        ("anti_persistence", "anti_persistence", "llama-4-scout", "webshop", 43, 1, 0.0, 5.0),
        ("anti_persistence", "B-10", "llama-4-scout", "webshop", 42, 1, 0.0, 99.0),
    ]
    t6 = paper_tables.table6(_runs(rows))
    assert t6[["mean", "seeds"]].values.tolist() == [[4.0, 2]]
    printed = paper_tables.table6_beside_paper(_runs(rows))
    assert printed.loc["anti_persistence", ("llama-4-scout", "webshop", "this run")] == "4.00 ± 1.41"
    assert printed.loc["anti_persistence", ("llama-4-scout", "webshop", "paper")] == "3.99 ± 0.05"


def test_a_run_found_again_under_a_later_root_is_not_a_second_seed():
    once = results.load_iterations(SMOKE)
    with pytest.warns(UserWarning, match="left out because an earlier root holds the same run"):
        twice = results.load_iterations([SMOKE, SMOKE])
    assert len(twice) == len(once) and len(twice.attrs["shadowed"]) == once["run"].nunique()


def test_training_decisions_tell_bandit_choices_from_safeguards():
    def ep(mode, branch):
        return {"meta": {"mode": mode, "branch": branch}}

    d = results.training_decisions(
        [ep("none", "round_robin"), ep("none", "no_embedding"), ep("imitation", "local_ucb"), ep("none", "epsilon")]
    )
    assert d["train_decisions"] == 4 and d["train_mode_none"] == 0.75 and d["train_mode_imitation"] == 0.25
    assert d["bandit_none"] == 0 and d["bandit_imitation"] == 1
    assert results.training_decisions([{"meta": {}}])["train_mode_none"] is None


def test_table7_frame_indexes_by_baseline():
    class Row:
        def __init__(self, b, d):
            self.b, self.d = b, d

        def to_dict(self):
            return {"baseline": self.b, "mean_diff": self.d}

    t = table7.table7_frame([Row("react", 1.5), Row("expel", -2.0)])
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
    t = table7.table7_of_runs(_runs(rows))
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
    assert table7.table7_of_runs(_runs(rows) if rows else pd.DataFrame()) is None


def test_figure3_points_paper_averages_and_this_runs_final_iteration():
    paper_only = paper_tables.figure3_points(pd.DataFrame())
    assert set(paper_only["source"]) == {"paper"} and len(paper_only) == 4  # Table 6 has four methods
    ap = paper_only.set_index("method").loc["anti_persistence"]
    assert ap["calls"] == pytest.approx(sum(c.mean for c in paper.table6() if c.method == "anti_persistence") / 9)
    assert ap["success"] == pytest.approx(sum(c.mean for c in paper.table1() if c.method == "anti_persistence") / 9)
    runs = _runs(
        [
            ("joint_memory", "joint_memory", "b", "alf", 1, 1, 0.0, 99.0),
            ("joint_memory", "joint_memory", "b", "alf", 1, 2, 20.0, 3.0),
            ("joint_memory", "joint_memory", "b", "web", 1, 2, 40.0, 5.0),
            ("joint_memory", "joint_memory", "b", "web", 2, 2, 80.0, 7.0),  # two seeds: one cell, one weight
            ("react", "react", "b", "alf", 1, 2, 20.0, 3.0),  # not one of Figure 3's memory configurations
            ("anti_persistence", "gamma-1.0", "b", "alf", 1, 2, 90.0, 1.0),  # a sweep point: not a main run
        ]
    )
    mine = paper_tables.figure3_points(runs).query("source == 'this run'")
    assert mine[["method", "calls", "success"]].values.tolist() == [["joint_memory", 4.5, 40.0]]


def test_paper_final_success_keeps_the_named_methods():
    f = paper_tables.paper_final_success(["react", "anti_persistence"])
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
    c = paper_tables.iteration_curves(runs)
    assert list(c.columns) == [
        "benchmark",
        "backbone",
        "method",
        "iteration",
        "success",
        "steps",
        "success_std",
        "steps_std",
        "seeds",
    ]
    assert c["success"].tolist() == [20.0, 50.0] and c["steps"].tolist() == [10.0, 20.0]
    # the paper's error bars are stds over seeds (§4.1): iteration 1 has two seeds, iteration 2 one (no spread)
    assert c["success_std"].iloc[0] == pytest.approx(14.1421356) and pd.isna(c["success_std"].iloc[1])
    assert c["seeds"].tolist() == [2, 1]
    assert paper_tables.iteration_curves(pd.DataFrame()).empty


def test_beside_paper_puts_both_sources_in_one_frame():
    cells = [Cell("Figure 6", "anti_persistence", "qwen", "alf", 96.0, None, "policy=bandit")]
    mine = pd.DataFrame(
        {"policy": ["bandit", "random"], "benchmark": ["alf", "alf"], "backbone": ["tiny"] * 2, "success": [5.0, 1.0]}
    )
    both = paper_tables.beside_paper(cells, mine, key="policy")
    assert list(both.columns) == ["source", "benchmark", "policy", "success", "setting", "success_std", "seeds"]
    assert both["policy"].tolist() == ["bandit", "bandit", "random"]
    assert both["setting"].tolist() == ["paper: qwen / alf", "this run: tiny / alf", "this run: tiny / alf"]
    assert both["success"].tolist() == [96.0, 5.0, 1.0]


def test_discard_minus_persist_per_setting():
    gaps = paper_tables.discard_minus_persist(paper.table2())
    assert gaps.loc[("llama-4-scout", "alfworld")] == pytest.approx(54.7 - 26.7)
    assert len(gaps) == 4 and (gaps > 0).all()
    cells = [Cell("t", "m", "b", "x", 1.0, None, "discard"), Cell("t", "m", "b", "x", 3.0, None, "persist")]
    assert paper_tables.discard_minus_persist(cells).tolist() == [-2.0]


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
    f = paper_tables.mode_facts(freq)
    assert f["modes used"].tolist() == [2, 2] and f["none used"].tolist() == [False, True]
    # 'none' used only through round-robin / warm-up: the bandit check fails, as it must be able to
    assert f["none chosen by the bandit"].tolist() == [False, False]
    f = paper_tables.mode_facts(freq.assign(bandit_none=[0, 3]))
    assert f["none chosen by the bandit"].tolist() == [False, True]


def test_paper_sweep_splits_figure12_and_names_unknown_sweeps():
    assert {c.source for c in paper_tables.paper_sweep("B")} == {"Figure 12a"}
    assert {c.source for c in paper_tables.paper_sweep("B_hat")} == {"Figure 12b"}
    assert paper_tables.paper_sweep("gamma") == paper.figure5_gamma()
    with pytest.raises(ValueError, match="no paper sweep 'delta'"):
        paper_tables.paper_sweep("delta")


def test_sweep_frame_reads_values_from_variants_and_folders():
    runs = _runs(
        [
            ("anti_persistence", "gamma-0.98", "tiny", "alfworld", 42, 1, 10.0),
            ("anti_persistence", "anti_persistence", "tiny", "alfworld", 42, 1, 30.0),
            ("anti_persistence", "lambda-0.2", "tiny", "alfworld", 42, 1, 99.0),  # another sweep: left out
        ]
    )
    f = paper_tables.sweep_frame(runs, "gamma", {"gamma-0.98": 0.98, "anti_persistence": 0.998})
    assert list(f.columns) == [
        "source",
        "benchmark",
        "value",
        "success",
        "synthesis_mode_usage",
        "success_std",
        "seeds",
    ]
    p = f[f["source"] == "paper: qwen3-coder-next"]
    assert sorted(set(p["value"])) == [0.98, 0.99, 0.998, 1.0] and p["synthesis_mode_usage"].isna().all()
    mine = f[f["source"] == "this run: tiny"].sort_values("value")
    assert mine[["value", "success"]].values.tolist() == [[0.98, 10.0], [0.998, 30.0]]


def test_figure12_frame_holds_both_budgets():
    f = paper_tables.figure12_frame(pd.DataFrame(), {"B": {}, "B_hat": {}})
    assert f["parameter"].value_counts().to_dict() == {"B_hat": 8, "B": 6}
    assert sorted(set(f.loc[f["parameter"] == "B", "value"])) == [1.0, 5.0, 10.0]


def test_best_paper_point_is_the_argmax_per_benchmark():
    assert paper_tables.best_paper_point("gamma").tolist() == ["gamma=0.998", "gamma=0.998"]
    assert paper_tables.best_paper_point("B_hat").tolist() == ["B_hat=10", "B_hat=10"]


def test_audit_abstractions_labels_only_runs_with_a_store():
    runs = results.load_iterations(SMOKE)
    default, _ = paper_tables.audit_abstractions(runs, n_min=3, delta=0.05, pool="available")
    assert {r.method for r in default} == {"abstraction_memory"}  # the setting the paper audits
    with_react = ["abstraction_memory", "joint_memory", "react"]
    audited, labels = paper_tables.audit_abstractions(runs, methods=with_react, n_min=3, delta=0.05, pool="available")
    assert sorted({r.method for r in audited}) == ["abstraction_memory", "joint_memory"]  # react has no store
    assert set(labels["method"]) == {"abstraction_memory", "joint_memory"}
    assert list(labels.columns[:4]) == ["run", "method", "benchmark", "abstraction_id"]
    assert set(labels["run"]) == {r.run for r in audited}
    none, no_labels = paper_tables.audit_abstractions(pd.DataFrame())
    assert none == [] and no_labels.empty


def test_figure10_table_puts_the_paper_row_first():
    pooled = pd.DataFrame([{"variant": "v", "backbone": "b", "benchmark": "x", "alpha_emp": 0.5, "alpha_0": 0.25}])
    t = paper_tables.figure10_table(pooled)
    assert t["source"].tolist() == ["paper", "this run"]
    assert t.loc[0, "gap"] == paper.FIGURE10_LARGEST_GAP["gap"] and pd.isna(t.loc[0, "alpha_emp"])
    assert t.loc[1, "alpha_emp"] == 0.5
    assert paper_tables.figure10_table(pd.DataFrame())["source"].tolist() == ["paper"]


def test_figure10_settings_labels_or_placeholder():
    pooled = pd.DataFrame([{"variant": "v", "backbone": "b", "benchmark": "x", "alpha_emp": 0.5, "alpha_0": None}])
    assert paper_tables.figure10_settings(pooled)["setting"].tolist() == ["v\nb\nx"]
    empty = paper_tables.figure10_settings(pd.DataFrame())
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
    f = paper_tables.figure11_panel(runs, "Figure 11a", names)
    assert list(f.columns) == ["source", "condition", "success", "success_std", "seeds"]
    assert len(f[f["source"] == "paper: qwen3-coder-next / appworld"]) == 3
    mine = f[f["source"] == "this run: tiny / alfworld"].set_index("condition")["success"]
    assert mine.to_dict() == {"no skills": 10.0, "useful skills": 20.0}
    t = paper_tables.by_condition(f, names)
    assert list(t.index) == ["no skills", "useful skills", "toxic skills"]
    assert t.loc["useful skills", "paper: qwen3-coder-next / appworld"] == 40.0
    assert pd.isna(t.loc["toxic skills", "this run: tiny / alfworld"])
    assert len(paper_tables.figure11_panel(pd.DataFrame(), "Figure 11b", {})) == 4
    # this run's spread over seeds beside the paper's bare means (it prints none for Figure 11)
    two = _runs(
        [
            ("frozen_skills", "skills-useful", "tiny", "alfworld", 42, 1, 20.0),
            ("frozen_skills", "skills-useful", "tiny", "alfworld", 43, 1, 30.0),
            ("frozen_skills", "skills-none", "tiny", "alfworld", 42, 1, 10.0),
        ]
    )
    printed = paper_tables.by_condition_spread(paper_tables.figure11_panel(two, "Figure 11a", names), names)
    assert printed.loc["useful skills", "this run: tiny / alfworld"] == "25.0 ± 7.1"
    assert printed.loc["no skills", "this run: tiny / alfworld"] == "10.0 (1 seed)"
    assert printed.loc["useful skills", "paper: qwen3-coder-next / appworld"] == "40.0"


def test_ordered_pivot_keeps_the_order_rows_and_columns_first_appear_in():
    df = pd.DataFrame(
        {
            "policy": ["bandit", "fixed: none", "bandit", "fixed: none"],
            "setting": ["qwen / web", "qwen / web", "llama / alf", "llama / alf"],
            "success": [1.0, 2.0, 3.0, 4.0],
        }
    )
    t = paper_tables.ordered_pivot(df, index="policy", columns="setting", values="success")
    assert list(t.index) == ["bandit", "fixed: none"] and list(t.columns) == ["qwen / web", "llama / alf"]
    assert t.loc["fixed: none", "llama / alf"] == 4.0
    assert list(df.pivot(index="policy", columns="setting", values="success").columns) == ["llama / alf", "qwen / web"]


def _outcome(method, seed, task, score, *, iteration=2, infra=False, bench="textworld_express"):
    return {
        "method": method,
        "backbone": "embedded-x",
        "benchmark": bench,
        "seed": seed,
        "iteration": iteration,
        "task": task,
        "task_type": "twc",
        "success": 100.0 * (score == 1.0),
        "score": score,
        "infra_failure": infra,
    }


def test_task_level_pairs_match_task_seed_and_iteration_and_skip_engine_failures():
    import pandas as pd

    from antipersist_lib.analysis.table7 import paired_by_task

    rows = []
    for seed in (1, 2, 3):
        for task in range(4):
            rows.append(_outcome("anti_persistence", seed, task, 0.75))
            rows.append(_outcome("react", seed, task, 0.25 if task else 0.75))  # task 0: a tie
            rows.append(_outcome("react", seed, task, 1.0, iteration=1))  # an earlier iteration: not final
    rows.append(_outcome("anti_persistence", 1, 9, 1.0))  # no react episode for task 9: unpaired
    rows.append(_outcome("anti_persistence", 2, 7, 1.0, infra=True))
    rows.append(_outcome("react", 2, 7, 0.0))  # paired with an engine failure: left out
    t = paired_by_task(pd.DataFrame(rows), "score")
    row = t.loc["react"]
    assert row["n"] == 12 and row["positive"] == 9
    assert row["mean_diff"] == pytest.approx(0.5 * 9 / 12)
    assert row["p_wilcoxon"] < 0.01 and row["ci_low"] > 0
    flipped = pd.DataFrame(rows).assign(
        method=lambda d: d["method"].map({"react": "anti_persistence", "anti_persistence": "react"})
    )
    assert paired_by_task(flipped, "score").loc["react", "mean_diff"] == pytest.approx(-row["mean_diff"])
    # every pair equal: no difference, p = 1 for both tests
    same = pd.DataFrame([_outcome(m, 1, k, 0.5) for m in ("anti_persistence", "react") for k in range(3)])
    equal = paired_by_task(same, "score").loc["react"]
    assert equal["mean_diff"] == 0 and equal["p_t"] == 1.0 and equal["p_wilcoxon"] == 1.0
    assert paired_by_task(pd.DataFrame([_outcome("react", 1, 0, 0.5)])) is None


def test_a_table_of_no_main_run_is_empty_not_an_error():
    import pandas as pd

    from antipersist_lib.analysis.paper_tables import mean_std_table
    from antipersist_lib.analysis.results import table1

    empty = table1(
        pd.DataFrame(columns=["run", "iteration", "method", "variant", "main", "backbone", "benchmark", "score"]),
        value="score",
    )
    assert empty.empty and mean_std_table(empty, index="method", columns=["backbone", "benchmark"]).empty


def test_task_level_pairs_are_made_per_benchmark_and_against_a_chosen_reference():
    import pandas as pd

    from antipersist_lib.analysis.table7 import paired_by_task, paired_per_benchmark

    rows = []
    for seed in (1, 2):
        for task in range(3):
            rows.append(_outcome("anti_persistence", seed, task, 1.0))
            rows.append(_outcome("react", seed, task, 0.0))
            rows.append(_outcome("trajectory_memory", seed, task, 1.0 if task else 0.0))
            # ScienceWorld's scores are on a 0-100 scale: pooled with the 0-1 scores they would swamp them
            rows.append(_outcome("anti_persistence", seed, task, 10.0, bench="scienceworld"))
            rows.append(_outcome("react", seed, task, 60.0, bench="scienceworld"))
    df = pd.DataFrame(rows)
    with pytest.raises(ValueError, match=r"different scales: pair them per benchmark"):
        paired_by_task(df, "score")
    per = paired_per_benchmark(df, "score")
    assert list(per.index.names) == ["benchmark", "baseline"]
    assert per.loc[("textworld_express", "react"), "mean_diff"] == pytest.approx(1.0)
    assert per.loc[("scienceworld", "react"), "mean_diff"] == pytest.approx(-50.0)
    assert ("scienceworld", "trajectory_memory") not in per.index  # no such run there: nothing to pair
    # what each design adds over ReAct (the CPU study's question), on one benchmark
    added = paired_by_task(df, "score", reference="react", benchmark="textworld_express")
    assert set(added.index) == {"anti_persistence", "trajectory_memory"}
    assert added.loc["trajectory_memory", "mean_diff"] == pytest.approx(-4 / 6)
    assert paired_per_benchmark(df[df["method"] == "react"], "score") is None


def test_each_task_level_comparison_pairs_the_units_its_two_methods_have():
    import pandas as pd

    from antipersist_lib.analysis.table7 import paired_by_task

    rows = []
    for seed in (1, 2, 3):
        for task in range(4):
            rows.append(_outcome("anti_persistence", seed, task, 0.5))
            rows.append(_outcome("react", seed, task, 0.0 if task else 1.0))  # 3 lower, 1 higher per seed
            if seed == 1:  # a study in progress: joint memory has made one seed so far
                rows.append(_outcome("joint_memory", seed, task, 0.25))
    t = paired_by_task(pd.DataFrame(rows), "score")
    # ReAct's comparison keeps all 12 units; joint memory's missing seeds narrow only its own
    assert t.loc["react", "n"] == 12 and t.loc["joint_memory", "n"] == 4
    assert t.loc["react", "positive"] == 9 and t.loc["react", "negative"] == 3
    assert t.loc["react", "mean_diff"] == pytest.approx((9 * 0.5 - 3 * 0.5) / 12)
    assert t.loc["joint_memory", "mean_diff"] == pytest.approx(0.25)
    assert t.loc["joint_memory", "negative"] == 0


def test_runs_still_in_progress_are_left_out_and_named(tmp_path):
    import shutil
    import warnings

    from antipersist_lib.analysis.results import load_iterations
    from antipersist_lib.analysis.table7 import task_outcomes
    from antipersist_lib.rundir import RunDirectory

    root = tmp_path / "runs"
    shutil.copytree(SMOKE, root)
    runs = sorted(p.parent for p in root.rglob("manifest.json"))
    assert all(RunDirectory(r).is_complete() for r in runs)
    full = load_iterations(root)
    cut = runs[0]
    held = cut / "episodes_heldout.jsonl"
    held.write_text("".join(held.read_text().splitlines(keepends=True)[:-1]))  # its last episode not yet made
    assert not RunDirectory(cut).is_complete()
    with pytest.warns(UserWarning, match=r"1 run\(s\) still in progress left out"):
        part = load_iterations(root)
    assert part.attrs["incomplete"] == [str(cut)] and str(cut) not in set(part["run"])
    assert part["run"].nunique() == full["run"].nunique() - 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert str(cut) in set(load_iterations(root, complete_only=False)["run"])
    outcomes = task_outcomes(root)
    assert not outcomes.empty and len(outcomes) < len(task_outcomes(root, complete_only=False))


def test_runs_averaged_as_seeds_but_made_with_different_settings_are_named(tmp_path):
    """Issue 42: the notebooks averaged runs made with different settings without a word."""
    import json
    import shutil

    src = Path(__file__).parent / "fixtures" / "runs" / "smoke" / "scienceworld" / "embedded-gemma-3-270m" / "react"
    for seed, steps in ((1, 12), (2, 30)):
        dest = tmp_path / "scienceworld" / "embedded-gemma-3-270m" / "react" / f"seed{seed}"
        shutil.copytree(src / "seed42", dest)
        man = json.loads((dest / "manifest.json").read_text())
        (dest / "manifest.json").write_text(json.dumps({**man, "seed": seed, "max_steps": steps}))
    with pytest.warns(UserWarning, match=r"made with different settings: react/embedded-gemma-3-270m/scienceworld"):
        df = results.load_iterations(tmp_path)
    (mixed,) = df.attrs["mixed_settings"]
    assert "max_steps (12 vs 30)" in mixed and "method_params" not in mixed
    same = tmp_path / "scienceworld" / "embedded-gemma-3-270m" / "react" / "seed2" / "manifest.json"
    same.write_text(json.dumps({**json.loads(same.read_text()), "max_steps": 12}))
    assert results.load_iterations(tmp_path).attrs["mixed_settings"] == []


# --- seed spread where the paper prints it (issue 44, point 5) ------------------------------------


def test_table1_cells_name_their_seed_count_when_fewer_than_asked():
    rows = []
    for seed, v in ((42, 50.0), (43, 60.0), (44, 55.0)):
        rows.append(("anti_persistence", "anti_persistence", "qwen3-coder-next", "alfworld", seed, 1, v))
    for seed, v in ((42, 40.0), (43, 50.0)):  # one seed missing
        rows.append(("react", "react", "qwen3-coder-next", "alfworld", seed, 1, v))
    rows.append(("reflexion", "reflexion", "qwen3-coder-next", "alfworld", 42, 1, 41.2))  # one seed only
    t1 = results.table1(_runs(rows))
    assert t1.set_index("method")["seeds_asked"].tolist() == [3, 3, 3]  # the best-covered cell
    t = paper_tables.table1_beside_paper(_runs(rows))
    mine = ("qwen3-coder-next", "alfworld", "this run")
    assert t.loc["anti_persistence", mine] == "55.0 ± 5.0"  # all the seeds asked for: no note
    assert t.loc["react", mine] == "45.0 ± 7.1 (2 seeds)"
    assert t.loc["reflexion", mine] == "41.2 (1 seed)"  # no spread, and said so (not a bare mean)
    assert t.loc["react", ("qwen3-coder-next", "alfworld", "paper")] == "70.4 ± 1.8"  # the paper's cell: no note
    # the profile's own seed count, when given, wins over the best-covered cell
    asked = paper_tables.mean_std_table(results.table1(_runs(rows), seeds_asked=4), index="method", columns="benchmark")
    assert asked.loc["anti_persistence", "alfworld"] == "55.0 ± 5.0 (3 seeds)"


def test_every_cell_short_of_the_seeds_its_manifests_planned_names_its_count(tmp_path):
    """Issue 44: with every cell short (two of three planned seeds done), the best-covered cell was the
    yardstick and no cell said it was short. The manifests now record the profile's seeds."""
    import json
    import shutil

    src = Path(__file__).parent / "fixtures" / "runs" / "smoke" / "scienceworld" / "embedded-gemma-3-270m" / "react"
    for seed in (1, 2):
        dest = tmp_path / "scienceworld" / "embedded-gemma-3-270m" / "react" / f"seed{seed}"
        shutil.copytree(src / "seed42", dest)
        man = json.loads((dest / "manifest.json").read_text())
        (dest / "manifest.json").write_text(json.dumps({**man, "seed": seed, "seeds_planned": [1, 2, 3]}))
    df = results.load_iterations(tmp_path)
    assert set(df["seeds_asked"]) == {3}
    (cell,) = results.table1(df).to_dict("records")
    assert (cell["seeds"], cell["seeds_asked"]) == (2, 3)
    printed = paper_tables.mean_std_table(results.table1(df), index="method", columns="benchmark")
    assert printed.loc["react", "scienceworld"].endswith("(2 seeds)")
    # without the record (runs made before it, or alone) the best-covered cell is the yardstick again
    for seed in (1, 2):
        path = tmp_path / "scienceworld" / "embedded-gemma-3-270m" / "react" / f"seed{seed}" / "manifest.json"
        man = json.loads(path.read_text())
        man.pop("seeds_planned")
        path.write_text(json.dumps(man))
    (cell,) = results.table1(results.load_iterations(tmp_path)).to_dict("records")
    assert (cell["seeds"], cell["seeds_asked"]) == (2, 2)


def test_table6_cells_name_their_seed_count_too():
    rows = [
        ("anti_persistence", "anti_persistence", "llama-4-scout", "webshop", 42, 1, 0.0, 3.0),
        ("anti_persistence", "anti_persistence", "llama-4-scout", "webshop", 43, 1, 0.0, 5.0),
        ("react", "react", "llama-4-scout", "webshop", 42, 1, 0.0, 2.0),
    ]
    t = paper_tables.table6_beside_paper(_runs(rows))
    assert t.loc["anti_persistence", ("llama-4-scout", "webshop", "this run")] == "4.00 ± 1.41"
    assert t.loc["react", ("llama-4-scout", "webshop", "this run")] == "2.00 (1 seed)"


def test_variants_and_sweeps_carry_the_std_over_seeds():
    runs = _runs(
        [
            ("anti_persistence", "gamma-0.98", "tiny", "alfworld", 42, 1, 10.0),
            ("anti_persistence", "gamma-0.98", "tiny", "alfworld", 43, 1, 20.0),
            ("anti_persistence", "anti_persistence", "tiny", "alfworld", 42, 1, 30.0),
        ]
    )
    v = results.variants(runs, {"gamma-0.98": "0.98", "anti_persistence": "0.998"}).set_index("label")
    assert v.loc["0.98", "success_std"] == pytest.approx(7.0710678)
    assert pd.isna(v.loc["0.998", "success_std"]) and v.loc["0.998", "seeds"] == 1
    f = paper_tables.sweep_frame(runs, "gamma", {"gamma-0.98": 0.98, "anti_persistence": 0.998})
    mine = f[f["source"] == "this run: tiny"].set_index("value")
    assert mine.loc[0.98, "success_std"] == pytest.approx(7.0710678) and mine.loc[0.98, "seeds"] == 2
    printed = paper_tables.spread_table(f, index="value", columns=["source", "benchmark"])
    assert printed.loc[0.98, ("this run: tiny", "alfworld")] == "15.0 ± 7.1"
    assert printed.loc[0.998, ("this run: tiny", "alfworld")] == "30.0 (1 seed)"
    assert printed.loc[0.98, ("paper: qwen3-coder-next", "alfworld")] == "90.0"  # the paper prints no spread here
    f12 = paper_tables.figure12_frame(
        runs.assign(variant=runs["variant"].replace({"gamma-0.98": "B-1"})), {"B": {"B-1": 1.0}, "B_hat": {}}
    )
    assert f12.loc[f12["source"] == "this run: tiny", "success_std"].tolist() == [pytest.approx(7.0710678)]


def test_table2_beside_paper_prints_the_spread_of_both_sources():
    runs = _runs(
        [
            ("anti_persistence", "anti_persistence", "tiny", "alfworld", 42, 1, 50.0),
            ("anti_persistence", "anti_persistence", "tiny", "alfworld", 43, 1, 70.0),
            ("anti_persistence", "persist", "tiny", "alfworld", 42, 1, 20.0),
        ]
    )
    mine = results.variants(runs, {"anti_persistence": "discard", "persist": "persist"}).rename(
        columns={"label": "variant"}
    )
    both = paper_tables.beside_paper(paper.table2(), mine, key="variant")
    t = paper_tables.spread_table(both, index="setting", columns="variant")
    assert t.loc["paper: llama-4-scout / alfworld", "discard"] == "54.7 ± 2.9"
    assert t.loc["this run: tiny / alfworld", "discard"] == "60.0 ± 14.1"
    assert t.loc["this run: tiny / alfworld", "persist"] == "20.0 (1 seed)"


def test_table7_of_runs_from_unrounded_and_from_one_decimal_means():
    rows = []
    for bench, ours, theirs in (("a", 10.04, 10.0), ("b", 20.04, 20.0), ("c", 30.04, 30.06), ("d", 40.04, 40.0)):
        rows.append(("anti_persistence", "anti_persistence", "tiny", bench, 42, 1, ours))
        rows.append(("react", "react", "tiny", bench, 42, 1, theirs))
    runs = _runs(rows)
    assert table7.table7_of_runs(runs).loc["react", "positive"] == 3  # unrounded, as before
    assert table7.table7_of_runs(runs, decimals=1).loc["react", "positive"] == 0  # the printed means tie
    both = table7.table7_of_runs_both(runs)
    assert both.loc[("unrounded", "react"), "positive"] == 3
    assert both.loc[("one-decimal", "react"), "negative"] == 1
    assert both.loc[("one-decimal", "react"), "mean_diff"] == pytest.approx(-0.025)


def test_f2_baselines_are_set_beside_table1s_cells_of_the_same_setting():
    t = paper_tables.f2_baselines()
    assert t.loc["no filter", "paper F.2 (Figure 11b)"] == 38.7 and t.loc["no filter", "paper Table 1"] == "38.3 ± 3.5"
    assert t.loc["no frozen layer", "paper F.2 (Figure 11b)"] == 56.0
    assert t.loc["no frozen layer", "paper Table 1"] == "54.0 ± 2.0"
    assert t["method"].tolist() == ["abstraction_memory", "anti_persistence"]  # the main runs the kit reuses
