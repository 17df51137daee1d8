"""The README's study summary: recomputed from the committed CPU study, paired the right way round, drawn
from the same numbers, and swapped into the README only between its markers."""

from __future__ import annotations

import pandas as pd
import pytest

from antipersist_lib.analysis import plots, study_summary
from antipersist_lib.paths import repo_root

CPU_PROFILE = "params/main/cpu.yaml"
CPU_RUNS = "tests/fixtures/runs/cpu"
README_COMMAND = f"python -m antipersist_lib main --profile {CPU_PROFILE} --runs {CPU_RUNS} --report --readme README.md"


@pytest.fixture(scope="module")
def cpu_summary(tmp_path_factory):
    from antipersist_lib.runner.main_job import run_main

    root = repo_root()
    mp = pytest.MonkeyPatch()
    mp.chdir(root)  # the run directories are named relative to the repository, as the README's command names them
    try:
        yield run_main(
            CPU_PROFILE,
            out=tmp_path_factory.mktemp("report"),
            runs=CPU_RUNS,
            report_only=True,
            execute_notebooks=False,
        )
    finally:
        mp.undo()


def test_the_readmes_study_block_is_the_committed_cpu_study_recomputed(cpu_summary, monkeypatch):
    monkeypatch.chdir(repo_root())
    readme = (repo_root() / "README.md").read_text(encoding="utf-8")
    committed = study_summary.current_block(readme)
    assert committed is not None, "README.md lost its study-summary markers"
    fresh = study_summary.readme_block(
        cpu_summary, command=README_COMMAND, figure="docs/figures/cpu-study.png", steps=cpu_summary["max_steps"]
    )
    assert committed == fresh, f"README.md's study summary is stale: regenerate it with `{README_COMMAND}`"
    # the committed figure plots the same runs (its fingerprint, not its pixels, which differ across versions)
    figure = repo_root() / "docs" / "figures" / "cpu-study.png"
    assert study_summary.png_fingerprint(figure) == study_summary.figure_fingerprint(cpu_summary)


def test_the_block_names_the_model_seeds_tasks_and_wall_time(cpu_summary, monkeypatch):
    monkeypatch.chdir(repo_root())
    block = study_summary.readme_block(cpu_summary, command="cmd", figure="f.png", steps=cpu_summary["max_steps"])
    model = cpu_summary["embedded_backbone"]["model"]
    assert "Qwen2.5-Coder-1.5B-Instruct" in block and model["sha256"][:16] in block
    assert f"{cpu_summary['study_s'] / 3600:.1f} h summed over runs" in block
    seeds = sorted({r["seed"] for r in cpu_summary["rows"] if r["benchmark"] == "textworld_express"})
    row = next(line for line in block.splitlines() if line.startswith("| TextWorldExpress (proxy) | "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == ", ".join(map(str, seeds)) and cells[2] == "6" and cells[4] == "12"
    if cpu_summary["runs_reported"] < cpu_summary["runs_in_profile"]:
        assert f"**{cpu_summary['runs_reported']} of the profile's {cpu_summary['runs_in_profile']} runs**" in block


def _outcome(method: str, seed: int, task: int, score: float) -> dict:
    return {
        "method": method,
        "backbone": "embedded-x",
        "benchmark": "textworld_express",
        "seed": seed,
        "iteration": 2,
        "task": f"t{task}",
        "task_type": "twc",
        "success": 100.0 * (score == 1.0),
        "score": score,
        "infra_failure": False,
    }


def test_paired_rows_subtract_the_reference_the_way_their_labels_say():
    react = [0.0, 0.5, 1.0, 0.25]
    memory = [1.0, 0.5, 0.25, 1.0]  # two higher, one lower, one tie against ReAct
    ap = [0.5, 0.5, 0.5, 0.5]
    rows = [
        _outcome(m, 1, i, v)
        for m, vals in (("react", react), ("trajectory_memory", memory))
        for i, v in enumerate(vals)
    ]
    rows += [_outcome("anti_persistence", 1, i, v) for i, v in enumerate(ap)]
    paired = study_summary.paired_rows(pd.DataFrame(rows))
    by = {(r.minuend, r.subtrahend): r for r in paired}
    assert set(by) == {
        ("trajectory_memory", "react"),
        ("anti_persistence", "react"),  # once, in ReAct's family
        ("anti_persistence", "trajectory_memory"),
    }
    added = by[("trajectory_memory", "react")]
    assert added.score_diff == pytest.approx(sum(m - r for m, r in zip(memory, react)) / 4)
    assert (added.better, added.worse, added.n) == (2, 1, 4)
    assert added.score_ci[0] < added.score_diff < added.score_ci[1]
    assert added.success_diff == pytest.approx(100 * (2 - 1) / 4)  # solved: memory tasks 0 and 3, ReAct task 2
    ap_vs = by[("anti_persistence", "trajectory_memory")]
    assert ap_vs.score_diff == pytest.approx(sum(a - m for a, m in zip(ap, memory)) / 4)
    assert (ap_vs.better, ap_vs.worse) == (1, 2)


def test_paired_rows_follow_the_profiles_benchmark_order_and_never_print_a_negative_zero():
    """ALFWorld's first runs: every episode of both designs failed, so every difference is zero; its rows come
    after TextWorldExpress's (the profile's order, not the directories' alphabetical one)."""
    rows = [_outcome(m, 1, i, v) for m in ("react", "trajectory_memory") for i, v in enumerate([0.0, 0.5, 1.0])]
    rows += [
        {**_outcome(m, 1, i, 0.0), "benchmark": "alfworld"} for m in ("react", "trajectory_memory") for i in range(4)
    ]
    outcomes = pd.DataFrame(rows).sort_values("benchmark", kind="stable")
    paired = study_summary.paired_rows(outcomes, ["textworld_express", "alfworld"])
    assert [r.benchmark for r in paired] == ["textworld_express", "alfworld"]
    assert [r.benchmark for r in study_summary.paired_rows(outcomes)] == ["alfworld", "textworld_express"]
    zero = next(line for line in study_summary.paired_table(paired) if line.startswith("| ALFWorld |"))
    cells = [c.strip() for c in zero.strip("|").split("|")]
    assert cells[3] == "+0.0" and cells[5] == "+0.00" and cells[6] == "[+0.00, +0.00]" and cells[9] == "0 / 0"
    assert "-0.0" not in zero


def test_the_figure_draws_each_designs_seed_mean_and_every_seed(cpu_summary, monkeypatch):
    monkeypatch.chdir(repo_root())
    fig = study_summary.study_figure(cpu_summary)
    try:
        points = study_summary.figure_points(cpu_summary)
        ax = fig.axes[0]
        twx = points[points["benchmark"] == "textworld_express"]
        expected = twx.groupby("method", sort=False)["score"].mean()
        heights = [p.get_height() for p in ax.patches]
        assert heights == pytest.approx([expected[m] for m in expected.index])
        dots = sorted(float(y) for c in ax.collections for _, y in c.get_offsets())
        assert dots == pytest.approx(sorted(twx["score"]))
        # seeds with equal scores sit side by side (issue 42: they hid behind each other): no two dots coincide
        xy = [(round(float(x), 6), round(float(y), 6)) for c in ax.collections for x, y in c.get_offsets()]
        assert len(set(xy)) == len(xy)
        assert plots.text_overlaps(fig) == []
        notes = " ".join(t.get_text() for t in fig.texts)
        assert "Qwen2.5-Coder-1.5B-Instruct" in notes
        if cpu_summary["runs_reported"] < cpu_summary["runs_in_profile"]:
            assert "A study in progress" in notes
    finally:
        plots.plt.close(fig)


def test_the_figure_keeps_negative_scores_and_designs_without_a_run_in_view():
    """A study in progress: ScienceWorld's ReAct alone, with its -100 failed-task scores (the figure once set
    the panel's top at 0, so the solved label sat on the title, and gave ReAct the whole panel)."""

    def row(bench, method, seed, score, success=0.0, n=4):
        return {
            "benchmark": bench,
            "run": method,
            "method": method,
            "seed": seed,
            "heldout_score_final": score,
            "heldout_success_final": success,
            "heldout_n": n,
        }

    designs = ["react", "trajectory_memory", "abstraction_memory", "joint_memory", "anti_persistence"]
    summary = {
        "rows": [row("alfworld", m, 1, 0.0) for m in designs] + [row("scienceworld", "react", 1, -36.25)],
        "runs_reported": 6,
        "runs_in_profile": 10,
        "backbone": "Qwen2.5-Coder-1.5B-Instruct (embedded llama.cpp)",
        "note": "a note",
    }
    fig = study_summary.study_figure(summary)
    try:
        alf, sci = fig.axes
        assert len(sci.get_xticks()) == len(alf.get_xticks()) == 5  # one slot per design in both panels
        assert sci.get_xlim() == pytest.approx((-0.6, 4.6))  # the last slot is not cut off
        lo, hi = sci.get_ylim()
        assert lo < -36.25 and hi > 0  # the bar and the label above 0 are inside the axes
        assert [p.get_height() for p in sci.patches] == pytest.approx([-36.25])
        assert [t.get_text() for t in sci.texts].count("no run\nyet") == 4
        assert alf.get_ylim() == pytest.approx((-0.04, 1.2))  # all scores 0: the 0-1 scale, not a sliver
        assert plots.text_overlaps(fig) == []
    finally:
        plots.plt.close(fig)


def test_the_block_is_replaced_only_between_its_markers(tmp_path):
    text = f"intro\n{study_summary.BEGIN} old -->\nold table\n{study_summary.END}\noutro\n"
    block = f"{study_summary.BEGIN} new -->\nnew table\n{study_summary.END}\n"
    assert study_summary.replace_block(text, block) == f"intro\n{block}outro\n"
    assert study_summary.current_block(study_summary.replace_block(text, block)) == block
    with pytest.raises(ValueError, match=r"notes\.md: no '<!-- study-summary:begin"):
        study_summary.replace_block("no markers here\n", block, where="notes.md")


def test_the_cli_writes_the_summary_and_leaves_a_readme_without_markers_untouched(tmp_path, monkeypatch, capsys):
    from antipersist_lib.cli import main

    monkeypatch.chdir(repo_root())
    readme = tmp_path / "README.md"
    readme.write_text("# a readme with no block\n", encoding="utf-8")
    args = ["main", "--profile", CPU_PROFILE, "--runs", CPU_RUNS, "--report", "--out", str(tmp_path / "out")]
    assert main([*args, "--readme", str(readme)]) == 2
    assert f"error: {readme}: no '<!-- study-summary:begin" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == "# a readme with no block\n"
    assert not (tmp_path / "docs").exists()
    readme.write_text(f"# study\n\n{study_summary.BEGIN} -->\n{study_summary.END}\n\nmore\n", encoding="utf-8")
    assert main([*args, "--readme", str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# study\n\n") and text.endswith("\n\nmore\n")
    assert "| design | TextWorldExpress (proxy) |" in text and "](docs/figures/cpu-study.png)" in text
    figure = tmp_path / "docs" / "figures" / "cpu-study.png"
    assert study_summary.png_fingerprint(figure) is not None
    out = tmp_path / "out" / "cpu"
    assert (out / "summary.md").read_text(encoding="utf-8").count(study_summary.END) == 1
    assert study_summary.png_fingerprint(out / "study_figure.png") == study_summary.png_fingerprint(figure)


def test_a_figure_of_three_benchmarks_with_negative_scores_stays_readable():
    """The smoke main job (`make run`) summarizes one seed of ReAct and Anti-Persistence on three engines,
    ScienceWorld's failed tasks scoring -100: every panel keeps its values in view and no label overlaps."""
    rows = []
    for bench, scores in (
        ("alfworld", (0.0, 1.0)),
        ("scienceworld", (-100.0, 25.0)),
        ("textworld_express", (0.5, 0.25)),
    ):
        for method, score in zip(("react", "anti_persistence"), scores):
            rows.append(
                {
                    "benchmark": bench,
                    "run": method,
                    "method": method,
                    "seed": 42,
                    "heldout_score_final": score,
                    "heldout_success_final": float(score == 1.0),
                    "heldout_n": 2,
                }
            )
    summary = {"rows": rows, "runs_reported": 6, "runs_in_profile": 6, "backbone": "Model-X (embedded)", "note": "n"}
    fig = study_summary.study_figure(summary)
    try:
        assert [ax.get_title() for ax in fig.axes] == ["ALFWorld", "ScienceWorld", "TextWorldExpress (proxy)"]
        low, high = fig.axes[1].get_ylim()
        assert low <= -100.0 and high >= 25.0
        assert plots.text_overlaps(fig) == []
        assert "A study in progress" not in " ".join(t.get_text() for t in fig.texts)
    finally:
        plots.plt.close(fig)
