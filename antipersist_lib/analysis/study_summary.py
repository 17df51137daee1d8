"""A main-job study summarized for a README: its Table 1-style result (held-out success and the engine's score per
design and benchmark, mean ± sd over seeds, with the model, seeds, tasks and wall time), the task-level paired
statistics (Table 7's tests with held-out episodes as units) and one figure.

Everything is recomputed from the run directories (through ``run_main``'s summary and ``task_outcomes``), so
the block a README carries can be checked against the committed runs: ``replace_block`` swaps it in between
two markers, and a test compares the README's block with a fresh one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.analysis import plots, results, table7
from antipersist_lib.analysis.paper import METHOD_LABELS

BEGIN = "<!-- study-summary:begin"
END = "<!-- study-summary:end -->"

BENCHMARK_LABELS = {
    "textworld_express": "TextWorldExpress (proxy)",
    "alfworld": "ALFWorld",
    "scienceworld": "ScienceWorld",
    "webshop": "WebShop",
    "appworld": "AppWorld",
}

#: significance level of the paired tests after Holm's correction
ALPHA = 0.05


@dataclass(frozen=True)
class PairedRow:
    """One paired comparison on one benchmark: ``minuend`` minus ``subtrahend`` over the held-out episodes
    both made (same seed, iteration and task), on success (percentage points) and on the engine's score."""

    benchmark: str
    minuend: str
    subtrahend: str
    n: int
    success_diff: float
    success_p_holm: float
    score_diff: float
    score_ci: tuple[float, float]
    score_p_t_holm: float
    score_p_wilcoxon_holm: float
    better: int  # episodes where the minuend scored higher
    worse: int


def _bench_label(bench: str) -> str:
    return BENCHMARK_LABELS.get(bench, bench)


def _method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def study_outcomes(summary: dict[str, Any]) -> pd.DataFrame:
    """The held-out episodes of exactly the runs a ``run_main`` summary reports (other runs under the same
    root, e.g. sweeps or a study's unfinished runs, left out)."""
    rows = summary["rows"]
    if not rows:
        return pd.DataFrame()
    outcomes = table7.task_outcomes(summary["runs_root"], complete_only=True)
    if outcomes.empty:
        return outcomes
    reported = {(r["benchmark"], r["method"], int(r["seed"])) for r in rows if r["run"] == r["method"]}
    keep = [(b, m, int(s)) in reported for b, m, s in zip(outcomes["benchmark"], outcomes["method"], outcomes["seed"])]
    return outcomes[keep].reset_index(drop=True)


def paired_rows(outcomes: pd.DataFrame, benchmarks: list[str] | None = None) -> list[PairedRow]:
    """Per benchmark (in the order of ``benchmarks``, the profile's; otherwise as the outcomes list them): each
    memory design minus ReAct (what keeping that memory adds to the same model), then Anti-Persistence minus
    each other design (the paper's comparison). Holm's families are the comparisons of one reference on one
    benchmark and one measure, as in notebook 01."""
    out: list[PairedRow] = []
    for reference, flip in (("react", True), ("anti_persistence", False)):
        score = table7.paired_per_benchmark(outcomes, "score", reference=reference)
        success = table7.paired_per_benchmark(outcomes, "success", reference=reference)
        if score is None or success is None:
            continue
        for (bench, other), s in score.iterrows():
            if (bench, other) not in success.index or (not flip and other == "react"):
                continue  # Anti-Persistence minus ReAct: shown once, in ReAct's family
            c = success.loc[(bench, other)]
            sign = -1.0 if flip else 1.0
            lo, hi = sign * s["ci_low"], sign * s["ci_high"]
            better, worse = int(s["positive"]), int(s["negative"])
            out.append(
                PairedRow(
                    benchmark=bench,
                    minuend=other if flip else reference,
                    subtrahend=reference if flip else other,
                    n=int(s["n"]),
                    success_diff=sign * float(c["mean_diff"]) + 0.0,  # no "-0.0"
                    success_p_holm=float(c["p_wilcoxon_holm"]),
                    score_diff=sign * float(s["mean_diff"]) + 0.0,
                    score_ci=(min(lo, hi), max(lo, hi)),
                    score_p_t_holm=float(s["p_t_holm"]),
                    score_p_wilcoxon_holm=float(s["p_wilcoxon_holm"]),
                    better=worse if flip else better,
                    worse=better if flip else worse,
                )
            )
    listed = list(benchmarks or []) + (list(outcomes["benchmark"]) if not outcomes.empty else [])
    order = {b: i for i, b in enumerate(dict.fromkeys(listed))}
    return sorted(out, key=lambda r: order.get(r.benchmark, len(order)))


def _signed(x: float, decimals: int) -> str:
    """``x`` with its sign, rounded first, so that a zero difference (or a float's -1e-17) never reads "-0.00"."""
    return f"{round(float(x), decimals) + 0.0:+.{decimals}f}"


def _pm(mean: float, sd: float | None, decimals: int) -> str:
    return f"{mean:.{decimals}f}" + ("" if sd is None else f" ± {sd:.{decimals}f}")


def _p(p: float) -> str:
    text = "<0.001" if p < 0.001 else f"{p:.3f}"
    return f"**{text}**" if p < ALPHA else text


def _scale(bench: str) -> int:
    """Decimals for a benchmark's score (ScienceWorld scores 0-100, the others 0-1)."""
    return 1 if bench == "scienceworld" else 2


def result_table(summary: dict[str, Any]) -> list[str]:
    """Table 1's layout: one row per design, one column per benchmark; each cell held-out success (%) and
    the engine's score after the final iteration, mean ± sd over the seeds."""
    cells = [c for c in _seed_rows(summary) if c["run"] == c["method"]]
    benches = list(dict.fromkeys(c["benchmark"] for c in cells))
    methods = [m for m in results.TABLE1_METHODS if any(c["method"] == m for c in cells)]
    by = {(c["benchmark"], c["method"]): c for c in cells}
    head = "| design | " + " | ".join(_bench_label(b) for b in benches) + " |"
    lines = [head, "|---|" + "---|" * len(benches)]
    for m in methods:
        row = []
        for b in benches:
            c = by.get((b, m))
            row.append(
                "-"
                if c is None
                else f"{_pm(c['success_mean'], c['success_sd'], 1)} % · {_pm(c['score_mean'], c['score_sd'], _scale(b))}"
                + (
                    ""
                    if c["seeds"] == max(x["seeds"] for x in cells if x["benchmark"] == b)
                    else f" ({c['seeds']} seed{'s' if c['seeds'] > 1 else ''})"
                )
            )
        lines.append(f"| {_method_label(m)} | " + " | ".join(row) + " |")
    return lines


def _seed_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    from antipersist_lib.runner.main_tables import seed_summary

    return seed_summary(summary["rows"])


def setting_table(summary: dict[str, Any], steps: dict[str, Any]) -> list[str]:
    """Per benchmark: seeds, held-out tasks per seed, iterations, steps per episode and the runs' wall time."""
    rows = summary["rows"]
    lines = ["| benchmark | seeds | held-out tasks per seed | iterations | steps | runs | wall time (h, runs summed) |"]
    lines.append("|---|---|---|---|---|---|---|")
    for bench in dict.fromkeys(r["benchmark"] for r in rows):
        rs = [r for r in rows if r["benchmark"] == bench]
        secs = [r["seconds"] for r in rs if r["seconds"] is not None]
        lines.append(
            f"| {_bench_label(bench)} | {', '.join(str(s) for s in sorted({r['seed'] for r in rs}))} | "
            f"{'/'.join(sorted({str(r['heldout_n']) for r in rs}))} | "
            f"{'/'.join(sorted({str(r['iterations']) for r in rs}))} | {steps.get(bench, '-')} | {len(rs)} | "
            + (f"{sum(secs) / 3600:.1f}" if secs else "-")
            + " |"
        )
    return lines


def paired_table(rows: list[PairedRow]) -> list[str]:
    """The paired comparisons as a table: differences, the score's 95 % t-interval and Holm-adjusted p-values
    (bold below 0.05), and how many episodes went each way on the score."""
    lines = [
        "| benchmark | comparison | pairs | success (pp) | p (Wilcoxon, Holm) | score | 95 % CI | p (t, Holm) "
        "| p (Wilcoxon, Holm) | higher / lower |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = _scale(r.benchmark)
        lines.append(
            f"| {_bench_label(r.benchmark)} | {_method_label(r.minuend)} − {_method_label(r.subtrahend)} | {r.n} | "
            f"{_signed(r.success_diff, 1)} | {_p(r.success_p_holm)} | {_signed(r.score_diff, d)} | "
            f"[{_signed(r.score_ci[0], d)}, {_signed(r.score_ci[1], d)}] | {_p(r.score_p_t_holm)} | "
            f"{_p(r.score_p_wilcoxon_holm)} | {r.better} / {r.worse} |"
        )
    return lines


def significant(rows: list[PairedRow]) -> list[PairedRow]:
    """The comparisons that differ beyond seed and decoding noise: both score tests, or the success test,
    below ``ALPHA`` after Holm's correction."""
    return [
        r for r in rows if (r.score_p_t_holm < ALPHA and r.score_p_wilcoxon_holm < ALPHA) or r.success_p_holm < ALPHA
    ]


def readme_block(
    summary: dict[str, Any],
    *,
    command: str,
    figure: str,
    steps: dict[str, Any],
    outcomes: pd.DataFrame | None = None,
) -> str:
    """The README's block: the model and the study's size, the result table, the paired statistics and the
    figure, between the markers (``command`` regenerates it; ``figure``: the figure's path from the README;
    ``outcomes``: ``study_outcomes(summary)`` when the caller already has it, read from the runs otherwise)."""
    described = summary["embedded_backbone"]
    model = described["model"]
    build = described["llama_cpp_build"]
    if outcomes is None:
        outcomes = study_outcomes(summary)
    benchmarks = list(dict.fromkeys(r["benchmark"] for r in summary["rows"]))
    paired = paired_rows(outcomes, benchmarks) if not outcomes.empty else []
    done, total = summary["runs_reported"], summary["runs_in_profile"]
    status = (
        f"**{done} of the profile's {total} runs** (a study in progress: the tables hold the complete runs only)"
        if done < total
        else f"all {total} runs of the profile"
    )
    elapsed = summary.get("elapsed_s")
    lines = [
        f"{BEGIN} written by `{command}`; a test checks it against the committed runs -->",
        f"Model: **{summary['backbone']}** (`{model['file']}`, sha256 `{model['sha256'][:16]}…`), llama.cpp "
        f"built for `{build.get('baseline')}`, temperature 0; {status}; run time "
        f"{summary['study_s'] / 3600:.1f} h summed over runs"
        + (f" ({elapsed / 3600:.1f} h elapsed, runs side by side)" if elapsed else "")
        + ".",
        "",
        *setting_table(summary, steps),
        "",
        "Held-out success (%) · the engine's score (TextWorldExpress 0-1 partial credit, ALFWorld 0/1, "
        "ScienceWorld 0-100) after the final iteration, mean ± sd over seeds:",
        "",
        *result_table(summary),
        "",
    ]
    if paired:
        sig = significant(paired)
        lines += [
            "Paired statistics (Table 7's tests with held-out episodes as units: the same benchmark, seed and "
            "task under two designs; Holm's correction within each benchmark and reference; bold: below 0.05):",
            "",
            *paired_table(paired),
            "",
            (
                "Beyond noise at 0.05: "
                + "; ".join(
                    f"{_method_label(r.minuend)} − {_method_label(r.subtrahend)} on {_bench_label(r.benchmark)}"
                    for r in sig
                )
                + "."
                if sig
                else "No comparison differs beyond noise at 0.05 after Holm's correction."
            ),
            "",
        ]
    lines += [f"![{summary['backbone']}: held-out score per design and seed]({figure})", END]
    return "\n".join(lines) + "\n"


def replace_block(text: str, block: str, *, where: str = "README") -> str:
    """``text`` with the block between the markers replaced by ``block`` (markers included in both)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{where}: no '{BEGIN} ... {END}' block to replace; add the two markers where it goes")
    return text[:start] + block.rstrip("\n") + text[end + len(END) :]


def current_block(text: str) -> str | None:
    """The block between the markers in ``text`` (markers included), or None."""
    start, end = text.find(BEGIN), text.find(END)
    return None if start < 0 or end < start else text[start : end + len(END)] + "\n"


def figure_points(summary: dict[str, Any]) -> pd.DataFrame:
    """One row per main run: benchmark, design, seed, held-out score and success (%) after the final iteration."""
    rows = [r for r in summary["rows"] if r["run"] == r["method"]]
    return pd.DataFrame(
        [
            {
                "benchmark": r["benchmark"],
                "method": r["method"],
                "seed": r["seed"],
                "score": r["heldout_score_final"],
                "success": 100 * r["heldout_success_final"],
                "n": r["heldout_n"],
            }
            for r in rows
        ]
    )


FINGERPRINT_KEY = "study-summary-points-sha256"


def figure_fingerprint(summary: dict[str, Any]) -> str:
    """A hash of the values the figure plots (written into the PNG's metadata), so a test can tell whether a
    committed figure still shows the committed runs without comparing pixels (which differ across versions)."""
    import hashlib

    text = figure_points(summary).round(9).to_csv(index=False)
    return hashlib.sha256(text.encode()).hexdigest()


def png_fingerprint(path: str | Path) -> str | None:
    """The fingerprint a figure written by ``write_summary`` carries, or None."""
    from PIL import Image

    with Image.open(path) as img:
        desc = img.info.get("Description", "")
    key = f"{FINGERPRINT_KEY}="
    return desc[len(key) :] if desc.startswith(key) else None


def seed_positions(x: float, scores: list[float], step: float = 0.13) -> list[float]:
    """Where each seed's dot goes: at ``x``, and seeds with the same score set side by side (``step`` apart,
    centred), so no seed hides behind another."""
    out, seen = [], {}
    groups = {v: scores.count(v) for v in scores}
    for v in scores:
        k = seen.get(v, 0)
        seen[v] = k + 1
        out.append(x + (k - (groups[v] - 1) / 2) * step)
    return out


def study_figure(summary: dict[str, Any]) -> Any:
    """One panel per benchmark: each design's held-out score after the final iteration, a bar for the mean over
    seeds and a dot per seed, with the episodes solved (all seeds together) above each bar."""
    points = figure_points(summary)
    benches = list(dict.fromkeys(points["benchmark"]))
    width = max(7.0, 4.6 * len(benches))
    fig, axes = plots.plt.subplots(1, len(benches), figsize=(width, 4.4), squeeze=False)
    colors = plots.method_colors(list(results.TABLE1_METHODS))
    # every panel has a slot for each design in the figure, so a study in progress shows which design has
    # no run on a benchmark yet instead of shifting the others
    methods = [m for m in results.TABLE1_METHODS if m in set(points["method"])]
    for ax, bench in zip(axes[0], benches):
        df = points[points["benchmark"] == bench]
        tops, lows = [], []
        for i, m in enumerate(methods):
            mine = df[df["method"] == m]
            if mine.empty:
                ax.annotate(
                    "no run\nyet",
                    (i, 0.0),
                    textcoords="offset points",
                    xytext=(0, 6),
                    ha="center",
                    fontsize=6,
                    color="0.45",
                )
                continue
            mean = float(mine["score"].mean())
            lows.append(min(mean, float(mine["score"].min())))
            ax.bar(i, mean, color=colors[m], alpha=0.55, width=0.7)
            ax.scatter(
                seed_positions(i, mine["score"].tolist()),
                mine["score"],
                color=colors[m],
                edgecolor="black",
                zorder=3,
                s=22,
            )
            solved = int(round(float((mine["success"] / 100 * mine["n"]).sum())))
            top = max(mean, float(mine["score"].max()), 0.0)
            tops.append(top)
            ax.annotate(
                f"{solved}/{int(mine['n'].sum())}",
                (i, top),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
            )
        ax.set_xticks(range(len(methods)), [_method_label(m).replace(" memory", "\nmemory") for m in methods])
        ax.tick_params(axis="x", labelsize=7, labelrotation=30)
        ax.set_title(_bench_label(bench), fontsize=9)
        ax.set_ylabel("held-out score (engine's scale)" if ax is axes[0][0] else "", fontsize=8)
        # limits from the data, 0 always inside: room above the highest label (scores can be negative:
        # ScienceWorld's -100 for a failed task), and a 0-1 axis where every score is 0
        lo, hi = min(lows + [0.0]), max(tops + [0.0])
        hi = hi if hi > lo else lo + 1.0
        span = hi - lo
        ax.set_ylim(lo - 0.04 * span, hi + 0.2 * span)  # below 0 too: a dot at 0 is not cut in half
        ax.set_xlim(-0.6, len(methods) - 0.4)  # every slot in view, whichever designs have runs
        ax.axhline(0.0, color="0.6", linewidth=0.6, zorder=1)
    done, total = summary["runs_reported"], summary["runs_in_profile"]
    model = str(summary["backbone"]).split(" (")[0]
    fig.suptitle(
        f"{model}: held-out score after the final iteration\n(bar: mean over seeds; dot: one seed; "
        "above: episodes solved, all seeds)",
        fontsize=9,
    )
    plots.footnote(
        fig,
        summary["note"],
        "" if done == total else f"A study in progress: {done} of {total} runs.",
        width=int(width * 19),
        top=0.92,
    )
    return fig


def write_summary(
    summary: dict[str, Any], out: str | Path, *, command: str, readme: str | Path | None = None
) -> list[Path]:
    """Write ``summary.md`` (the block) and ``study_figure.png`` into ``out``; with ``readme``, also replace the
    block in that file and write the figure to ``docs/figures/<profile>-study.png`` beside it. Returns the paths
    written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig = study_figure(summary)
    meta = {"Description": f"{FINGERPRINT_KEY}={figure_fingerprint(summary)}"}
    written = [out / "study_figure.png", out / "summary.md"]
    fig.savefig(written[0], bbox_inches="tight", dpi=130, metadata=meta)
    steps = summary.get("max_steps", {})
    outcomes = study_outcomes(summary)  # read once for both blocks
    written[1].write_text(
        readme_block(summary, command=command, figure="study_figure.png", steps=steps, outcomes=outcomes),
        encoding="utf-8",
    )
    if readme is not None:
        readme = Path(readme)
        text = readme.read_text(encoding="utf-8")  # read first: a missing file or block changes nothing
        rel = Path("docs") / "figures" / f"{Path(summary['profile']).stem}-study.png"
        block = readme_block(summary, command=command, figure=rel.as_posix(), steps=steps, outcomes=outcomes)
        new = replace_block(text, block, where=str(readme))
        (readme.parent / rel).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(readme.parent / rel, bbox_inches="tight", dpi=130, metadata=meta)
        readme.write_text(new, encoding="utf-8")
        written += [readme.parent / rel, readme]
    plots.plt.close(fig)
    return written
