"""The notebooks' figures (analysis/plots.py): the panels, labels and files a reader would see."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from antipersist_lib.analysis import plots

ROOT = Path(__file__).resolve().parents[1]


def _sweeps() -> pd.DataFrame:
    rows = []
    for prm, values, benches in (("B", [1, 5, 10], ["alfworld", "webshop"]), ("B_hat", [3, 10], ["alfworld"])):
        for bench in benches:
            for v in values:
                rows.append({"parameter": prm, "benchmark": bench, "value": v, "success": 10.0 * v, "source": "paper"})
    return pd.DataFrame(rows)


def test_sweep_per_parameter_draws_one_figure_per_parameter():
    labels = {"B_hat": "B̂ (neighbourhood size)", "B": "B (records retrieved)"}
    figs = plots.sweep_per_parameter(_sweeps(), labels, title="Figure 12: sensitivity to {param}")
    assert list(figs) == ["B_hat", "B"]  # the labels' order
    assert len(figs["B"].axes) == 2 and len(figs["B_hat"].axes) == 1  # one panel per benchmark of that parameter
    assert figs["B"].get_suptitle() == "Figure 12: sensitivity to B"
    assert [ax.get_xlabel() for ax in figs["B"].axes] == ["B (records retrieved)"] * 2
    assert [ax.get_title() for ax in figs["B"].axes] == ["alfworld", "webshop"]
    (line,) = figs["B_hat"].axes[0].get_lines()[:1]
    assert list(line.get_xdata()) == [3, 10] and list(line.get_ydata()) == [30.0, 100.0]  # only B_hat's rows


def test_save_writes_png_and_pdf(tmp_path):
    figs = plots.sweep_per_parameter(_sweeps(), {"B": "B"}, title="t")
    paths = plots.save(figs["B"], tmp_path / "out", "figure12_B")
    assert [p.name for p in paths] == ["figure12_B.png", "figure12_B.pdf"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].read_bytes()[:5] == b"%PDF-"


LONG_NOTE = "A small CPU model on a two-task run: read the shape of the figure, not its values. " * 4


def test_overlap_check_finds_texts_on_top_of_each_other():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_xlabel("an axis label")
    fig.text(0.5, 0.02, "a note written where the axis label is", ha="center")
    ax.annotate("first", (0.5, 0.5))
    ax.annotate("second", (0.5, 0.5))
    pairs = plots.text_overlaps(fig)
    assert ("first", "second") in pairs
    assert any("axis label" in a + b and "note" in a + b for a, b in pairs)


def test_figure3_tells_sources_apart_and_keeps_coinciding_points_visible():
    pts = pd.DataFrame(
        {
            "method": ["trajectory_memory", "abstraction_memory", "joint_memory", "anti_persistence"] * 2,
            "calls": [9.5, 10.17, 10.2, 9.3, 4.0, 4.0, 4.0, 4.0],  # this run's four at one spot
            "success": [53.5, 49.0, 49.3, 59.9, 0.0, 0.0, 0.0, 0.0],
            "source": ["paper"] * 4 + ["this run"] * 4,
        }
    )
    fig = plots.cost_vs_success(pts, title="Figure 3", note=LONG_NOTE)
    assert plots.text_overlaps(fig) == []
    ax = fig.axes[0]
    fig.canvas.draw()
    drawn = [c.get_offset_transform().transform(c.get_offsets()[0]) for c in ax.collections]
    mine = drawn[4:]
    assert len({round(x, 1) for x, _ in mine}) == 4  # side by side, not hidden behind each other
    assert {c.get_paths()[0].vertices.shape for c in ax.collections[:4]} != {
        c.get_paths()[0].vertices.shape for c in ax.collections[4:]
    }  # paper and this run: different marker shapes
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"paper", "this run", "anti_persistence"} <= set(labels)


def test_bars_with_many_policies_and_a_long_note_do_not_overlap():
    rows = [
        {"setting": f"this run: model / bench{i}", "policy": p, "success": 100.0}
        for i in range(3)
        for p in ("bandit", "fixed: none", "fixed: imitation", "fixed: strategic", "fixed: corrective", "random")
    ]
    fig = plots.success_bars(pd.DataFrame(rows), x="setting", hue="policy", title="Figure 6", note=LONG_NOTE)
    assert plots.text_overlaps(fig) == []


def test_dynamics_one_backbone_per_row_pair_with_labelled_paper_stars():
    from antipersist_lib.analysis import paper_tables

    curves = pd.DataFrame(
        [
            {"benchmark": "alfworld", "backbone": bb, "method": m, "iteration": it, "success": 0.0, "steps": 4.0}
            for bb in ("llama-4-scout", "qwen3-coder-next")
            for m in ("trajectory_memory", "anti_persistence")
            for it in (1, 2)
        ]
    )
    paper_final = paper_tables.paper_final_success(["trajectory_memory", "anti_persistence"])
    fig = plots.dynamics(
        curves, paper_final, backbones=("llama-4-scout", "qwen3-coder-next"), title="Figure 2", note=LONG_NOTE
    )
    assert len(fig.axes) == 2 * 2 * 3  # (success, length) x two backbones x three benchmarks of the paper
    assert plots.text_overlaps(fig) == []
    llama_alf = fig.axes[0]
    assert llama_alf.get_ylabel() == "llama-4-scout"
    stars = sorted(float(t.get_text()) for t in llama_alf.texts)
    assert stars == [41.6, 54.7]  # Llama's own Table 1 values, not an average over backbones
    xs = [line.get_xdata()[0] for line in llama_alf.get_lines()]
    assert len(set(xs)) == 2  # coinciding curves are drawn apart


def test_dynamics_draw_the_std_over_seeds_and_say_which_points_have_one_seed():
    """Issue 44: Figures 2 and 9 showed seed means with no spread, where the paper's error bars are stds."""
    from matplotlib.collections import LineCollection

    from antipersist_lib.analysis import paper_tables

    runs = pd.DataFrame(
        [
            {
                "run": f"/r/{m}/s{seed}",
                "method": m,
                "variant": m,
                "backbone": "tiny",
                "benchmark": "alfworld",
                "seed": seed,
                "iteration": it,
                "success": v,
                "steps": 10.0 + seed,
            }
            for m in ("react", "anti_persistence")
            for seed, it, v in ((1, 1, 10.0), (2, 1, 30.0), (1, 2, 40.0))
        ]
    )
    curves = paper_tables.iteration_curves(runs)
    fig = plots.dynamics(curves, paper_tables.paper_final_success(["react"]), backbones=("tiny",), title="Figure 2")
    success_ax = fig.axes[0]
    bars = [c for c in success_ax.collections if isinstance(c, LineCollection)]
    # one error bar per method, at iteration 1 (two seeds), spanning mean ± std; iteration 2 has one seed
    assert len(bars) == 2
    for bar in bars:
        ((_, low), (_, high)) = bar.get_segments()[0]
        assert (low, high) == (pytest.approx(20.0 - 14.1421356), pytest.approx(20.0 + 14.1421356))
    text = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
    assert "standard deviation over seeds" in text and "2 points of this run from one seed" in text
    assert plots.text_overlaps(fig) == []


def test_dynamics_of_a_users_run_has_whole_iterations_and_labels_that_do_not_meet():
    """Issue 42: a user's run (a long embedded backbone label, two iterations) had overlapping row labels and
    ticks at 1.25, 1.5, ..."""
    from antipersist_lib.analysis import paper_tables

    bb = "embedded-qwen2.5-coder-0.5b-instruct"
    curves = pd.DataFrame(
        [
            {"benchmark": b, "backbone": bb, "method": m, "iteration": it, "success": 0.0, "steps": 4.0}
            for b in ("alfworld", "textworld_express")
            for m in ("react", "anti_persistence")
            for it in (1, 2)
        ]
    )
    fig = plots.dynamics(curves, paper_tables.paper_final_success(["react"]), backbones=(bb,), title="Figure 2")
    fig.canvas.draw()
    assert plots.text_overlaps(fig) == []
    for ax in fig.axes:
        ticks = [float(t.get_text().replace("\u2212", "-")) for t in ax.get_xticklabels() if t.get_text()]
        assert ticks and all(t == int(t) for t in ticks), ticks
    assert fig.axes[0].get_ylabel().replace("\n", "") == bb


def test_reproduction_figures_draw_intervals_mark_undefined_rates_and_do_not_overlap(tmp_path):
    """Notebook 13's three figures on the committed reproduction demo: every rate's value is written, an
    undefined one says n/a (never a 0 bar), the deletion is marked, and no two texts overlap."""
    from antipersist_lib.analysis import reproduction
    from antipersist_lib.analysis.results import find_runs

    records = reproduction.collect(
        find_runs(ROOT / "tests" / "fixtures" / "runs" / "reproduction_smoke"), ROOT / "params" / "skills" / "planted"
    )
    effect = reproduction.frame(reproduction.immediate_effect_rows(records))
    fig = plots.immediate_effect(effect, paper={"none": 23.0, "useful": 40.0, "toxic": 20.0}, title="t", note="a note")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "0.40" in texts and "n/a" in texts  # the paper's useful bar; ReAct has no useful condition
    assert plots.text_overlaps(fig) == []
    fig = plots.reproduction_alpha(reproduction.alpha_frame(records), title="t")
    assert "n/a" in [t.get_text() for t in fig.axes[0].texts]  # no exposed candidate under none
    assert len(fig.axes[0].get_legend().get_texts()) == 2
    persistence = reproduction.frame(reproduction.persistence_rows(records))
    fig = plots.toxic_share(persistence, deleted_after=1, title="t")
    assert "planted skills deleted" in [t.get_text() for t in fig.axes[0].texts]
    assert any(line.get_label().endswith("abstraction / toxic") for line in fig.axes[0].get_lines())


def test_reproduction_figures_say_what_a_study_in_progress_has_not_recorded_yet():
    empty = pd.DataFrame()
    for fig, what in (
        (plots.reproduction_alpha(empty, title="t"), "no synthesized candidate recorded yet"),
        (plots.toxic_share(empty, deleted_after=1, title="t"), "no stored abstraction recorded yet"),
        (
            plots.immediate_effect(empty, paper=None, title="t"),
            "no held-out episode in a planted skill's scope recorded yet",
        ),
    ):
        assert what in [t.get_text() for t in fig.axes[0].texts]
    fig = plots.immediate_effect(empty, paper={"none": 23.0, "useful": 40.0, "toxic": 20.0}, title="t")
    assert "0.40" in [t.get_text() for t in fig.axes[0].texts]  # the paper's F.1 values alone


def _error_bars(fig) -> int:
    from matplotlib.container import ErrorbarContainer

    return sum(isinstance(c, ErrorbarContainer) for ax in fig.axes for c in ax.containers)


def test_sweeps_and_bars_draw_the_spread_over_seeds_and_name_single_seeds():
    df = pd.DataFrame(
        {
            "source": ["paper: q"] * 2 + ["this run: t"] * 2,
            "benchmark": ["alfworld"] * 4,
            "value": [1.0, 5.0, 1.0, 5.0],
            "success": [86.0, 96.0, 10.0, 30.0],
            "synthesis_mode_usage": [None, None, 0.1, 0.2],
            "success_std": [None, None, 4.0, float("nan")],  # the paper prints none; 5.0 is one seed
            "seeds": [None, None, 2, 1],
        }
    )
    texts = lambda fig: " ".join(t.get_text() for t in fig.texts) + " ".join(ax.get_title() for ax in fig.axes)  # noqa: E731
    fig = plots.sweep(df, param="B", title="Figure 12")
    assert _error_bars(fig) == 1 and "1 point of this run from one seed" in texts(fig)
    fig = plots.lambda_two_axes(df.assign(value=[0.0, 0.05, 0.0, 0.05]), title="Figure 7")
    assert _error_bars(fig) == 1 and "from one seed" in texts(fig)
    bars = df.assign(setting=df["source"], variant=["discard", "persist"] * 2)
    fig = plots.success_bars(bars, x="setting", hue="variant", title="Table 2", hue_order=["discard", "persist"])
    assert _error_bars(fig) == 1 and "1 bar of this run from one seed" in texts(fig)
