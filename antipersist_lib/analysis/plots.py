"""Figures for the notebooks (seaborn), each placing the paper's values beside this run's."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:  # headless scripts and CI; a notebook kernel keeps its inline backend
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402


def save(fig: plt.Figure, output_dir: str | Path, name: str) -> list[Path]:
    """Write ``name``.png and ``name``.pdf; returns the paths."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p, bbox_inches="tight", dpi=150)
    return paths


def cost_vs_success(points: pd.DataFrame, *, title: str, note: str = "") -> plt.Figure:
    """Figure 3: mean LLM calls per held-out task vs held-out success, one point per method.

    ``points`` columns: method, calls, success, source ("paper" or "this run").
    """
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    sns.scatterplot(data=points, x="calls", y="success", hue="method", style="source", s=120, ax=ax)
    for _, r in points[points["source"] == "paper"].iterrows():  # this run's points are in the legend
        ax.annotate(r["method"], (r["calls"], r["success"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("mean LLM calls per held-out task")
    ax.set_ylabel("held-out success (%)")
    ax.set_title(title)
    if note:
        fig.text(0.01, -0.06, note, fontsize=7, wrap=True)
    ax.legend(fontsize=7, loc="best")
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig


def _wrap(label: str) -> str:
    return label.replace(": ", ":\n").replace(" / ", "\n")


def success_bars(
    df: pd.DataFrame, *, x: str, hue: str, title: str, note: str = "", hue_order: list[str] | None = None
) -> plt.Figure:
    """Grouped bars of success (%) with the paper's and this run's values side by side; every bar
    carries its value, so a 0 % bar is visible as "0.0"."""
    sns.set_theme(style="whitegrid")
    n = max(1, df[x].nunique())
    fig, ax = plt.subplots(figsize=(max(7.0, 1.9 * n), 4.4))
    sns.barplot(data=df, x=x, y="success", hue=hue, hue_order=hue_order, ax=ax, errorbar=None)
    for container in ax.containers:
        ax.bar_label(container, fmt="%.1f", fontsize=6, padding=1)
    ax.set_ylabel("held-out success (%)")
    ax.set_xlabel("")
    ax.set_ylim(0, max(100.0, float(df["success"].max() or 0) + 8))
    ax.set_xticks(ax.get_xticks(), [_wrap(t.get_text()) for t in ax.get_xticklabels()], fontsize=8)
    ax.legend(fontsize=7, title=hue, title_fontsize=7, loc="upper right")
    _titles(fig, ax, title, note)
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig


def _titles(fig: plt.Figure, ax: plt.Axes, title: str, note: str) -> None:
    """Title on top; the provenance note (e.g. "a 270M CPU model") as a small wrapped line under it."""
    import textwrap

    if note:
        fig.suptitle(title)
        ax.set_title("\n".join(textwrap.wrap(note, 150)), fontsize=6.5, color="dimgray")
    else:
        ax.set_title(title)
    fig.tight_layout()


def footnote(fig: plt.Figure, *parts: str, y: float = -0.02, width: int = 170) -> None:
    """Small wrapped lines under a figure, one paragraph per non-empty part (e.g. the paper's statement, then
    the provenance note such as "a 270M CPU model")."""
    import textwrap

    lines = [line for part in parts if part for line in textwrap.wrap(part, width)]
    if lines:
        fig.text(0.01, y, "\n".join(lines), fontsize=6.5, color="dimgray", va="top")


def sweep(df: pd.DataFrame, *, param: str, title: str, note: str = "", logx: bool = False) -> plt.Figure:
    """Figures 5 and 12: success vs a hyperparameter, one panel per benchmark, paper and this run.

    ``df`` columns: value (numeric), success, source, benchmark.
    """
    sns.set_theme(style="whitegrid")
    points = df.groupby(["source", "benchmark"])["value"].transform("nunique")
    df = df[points >= 2]  # a sweep of one point (e.g. only the default run exists) is not a sweep
    benches = list(dict.fromkeys(df["benchmark"])) or ["(no sweep runs)"]
    fig, axes = plt.subplots(1, max(1, len(benches)), figsize=(4.2 * max(1, len(benches)), 3.6), squeeze=False)
    for ax, bench in zip(axes[0], benches):
        sub = df[df["benchmark"] == bench].sort_values("value")
        sns.lineplot(data=sub, x="value", y="success", hue="source", style="source", markers=True, dashes=False, ax=ax)
        ax.set_title(bench)
        ax.set_xlabel(param)
        ax.set_ylabel("held-out success (%)")
        ax.set_ylim(-3, 103)
        if logx:
            ax.set_xscale("symlog", linthresh=0.01)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    footnote(fig, note)
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig


def sweep_per_parameter(
    df: pd.DataFrame, labels: dict[str, str], *, title: str, note: str = ""
) -> dict[str, plt.Figure]:
    """Figure 12: one ``sweep`` figure per swept parameter of a frame holding several (column
    ``parameter``), since B and B_hat share no x axis. ``labels``: parameter -> axis label, in the
    order wanted; ``title`` may name the parameter as ``{param}``."""
    return {
        prm: sweep(df[df["parameter"] == prm], param=label, title=title.format(param=prm), note=note)
        for prm, label in labels.items()
    }


def lambda_two_axes(df: pd.DataFrame, *, title: str, note: str = "") -> plt.Figure:
    """Figure 7: held-out success (left axis) and synthesis-mode usage (right axis) vs lambda,
    one panel per (benchmark, source). ``df`` columns: value, success, synthesis_mode_usage, benchmark, source."""
    sns.set_theme(style="whitegrid")
    panels = list(dict.fromkeys(zip(df["benchmark"], df["source"])))
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(4.4 * max(1, len(panels)), 3.6), squeeze=False)
    for ax, (bench, source) in zip(axes[0], panels):
        sub = df[(df["benchmark"] == bench) & (df["source"] == source)].sort_values("value")
        ax.plot(sub["value"], sub["success"], marker="o", color="tab:blue", label="success")
        ax.set_ylabel("held-out success (%)", color="tab:blue")
        ax.set_ylim(-3, 103)
        ax.set_xlabel("lambda (cost weight)")
        ax.set_title(f"{bench} ({source})")
        right = ax.twinx()
        usage = sub.dropna(subset=["synthesis_mode_usage"])
        right.plot(
            usage["value"],
            100 * usage["synthesis_mode_usage"],
            marker="s",
            color="tab:orange",
            label="synthesis-mode usage",
        )
        right.set_ylabel("synthesis-mode usage (% of tasks)", color="tab:orange")
        right.set_ylim(-5, 105)
        right.grid(False)
        if usage.empty:
            right.text(
                0.5, 0.5, "usage not reported", transform=ax.transAxes, ha="center", fontsize=8, color="tab:orange"
            )
    fig.suptitle(title)
    fig.tight_layout()
    footnote(fig, note)
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig


def mode_heatmaps(freq: pd.DataFrame, *, title: str, note: str = "") -> plt.Figure:
    """Figure 8: backbone x mode heatmaps of selection frequency, one per benchmark."""
    sns.set_theme(style="white")
    modes = [c for c in ("none", "imitation", "strategic", "corrective") if c in freq.columns]
    benches = list(dict.fromkeys(freq["benchmark"])) or ["(no runs)"]
    rows = max(1, freq["backbone"].nunique())
    fig, axes = plt.subplots(1, len(benches), figsize=(4.6 * len(benches) + 1.5, 1.8 + 0.55 * rows), squeeze=False)
    for k, (ax, bench) in enumerate(zip(axes[0], benches)):
        sub = freq[freq["benchmark"] == bench].set_index("backbone")[modes].astype(float)
        if sub.empty:
            ax.text(0.5, 0.5, "no bandit runs", ha="center", va="center")
            ax.set_axis_off()
            continue
        sns.heatmap(
            sub,
            annot=True,
            fmt=".2f",
            vmin=0,
            vmax=1,
            cmap="viridis",
            cbar=k == len(benches) - 1,
            cbar_kws={"label": "fraction of tasks"},
            ax=ax,
        )
        ax.set_title(bench, fontsize=10)
        ax.set_xlabel("")
        ax.set_ylabel("")
        ax.tick_params(axis="y", labelrotation=0, labelsize=8)
        ax.tick_params(axis="x", labelsize=8)
        if k:
            ax.set_yticklabels([])
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    footnote(fig, note)
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig


def provenance_rates(rates: pd.DataFrame, *, title: str, note: str = "") -> plt.Figure:
    """Figure 10: alpha_emp (flagged parent) vs alpha_0 (no flagged parent) per setting; an
    undefined rate is written as "undefined" instead of being drawn as zero."""
    sns.set_theme(style="whitegrid")
    long = rates.melt(id_vars=["setting"], value_vars=["alpha_emp", "alpha_0"], var_name="group", value_name="rate")
    long["group"] = long["group"].map({"alpha_emp": "≥1 flagged parent (α_emp)", "alpha_0": "no flagged parent (α_0)"})
    settings = list(dict.fromkeys(rates["setting"]))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(settings) + 2), 3.8))
    sns.barplot(
        data=long.fillna({"rate": 0.0}), x="setting", y="rate", hue="group", order=settings, ax=ax, errorbar=None
    )
    for i, s in enumerate(settings):
        row = rates[rates["setting"] == s].iloc[0]
        for j, col in enumerate(("alpha_emp", "alpha_0")):
            if row[col] is None or pd.isna(row[col]):
                ax.text(
                    i + (-0.2 if j == 0 else 0.2), 0.02, "undefined", rotation=90, ha="center", va="bottom", fontsize=7
                )
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("flag rate among descendants")
    ax.set_xlabel("")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(title)
    ax.legend(fontsize=7)
    footnote(fig, note)
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig


def selector_scores(per_mode: pd.DataFrame, *, title: str) -> plt.Figure:
    """Walkthrough: per-mode estimate and exploration bonus stacked into the UCB score; branches
    without scores (round-robin, warm-up, ...) show the neighbourhood counts instead."""
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(6, 3.4))
    colors = ["tab:red" if c else "tab:gray" for c in per_mode["chosen"]]
    if per_mode["score"].notna().any():
        scored = per_mode["score"].notna()  # excluded modes (no positive weight) get no bar at all
        est = per_mode["estimate"].astype(float).where(scored, 0.0).fillna(0.0)
        bonus = per_mode["bonus"].astype(float).where(scored, 0.0).fillna(0.0)
        ax.bar(per_mode["mode"], est, color="tab:blue", label="estimate (cost-adjusted)")
        ax.bar(per_mode["mode"], bonus, bottom=est, color="tab:orange", label="exploration bonus")
        for i, (_, r) in enumerate(per_mode.iterrows()):
            text = "excluded\n(no weight)" if pd.isna(r["score"]) else f"{r['score']:.2f}"
            ax.text(
                i, (0 if pd.isna(r["score"]) else r["score"]) + 0.02, text, ha="center", fontsize=8, color=colors[i]
            )
        ax.set_ylabel("UCB score")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    else:
        ax.bar(per_mode["mode"], per_mode["count"].astype(float).fillna(0.0), color=colors)
        ax.set_ylabel("log entries with this mode (no scores in this branch)")
    for lbl, c in zip(ax.get_xticklabels(), colors):
        lbl.set_color(c)
    ax.set_title(title)
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig


def dynamics(curves: pd.DataFrame, paper_final: pd.DataFrame, *, note: str = "") -> plt.Figure:
    """Figures 2 and 9: held-out success (a) and mean trajectory length (b) per iteration, one
    column per benchmark, with the paper's final-iteration success (mean over backbones) as stars."""
    sns.set_theme(style="whitegrid")
    benches = sorted(set(curves["benchmark"]) if not curves.empty else set(paper_final["benchmark"]))
    fig, axes = plt.subplots(2, len(benches), figsize=(4.5 * len(benches), 7), squeeze=False)
    for j, bench in enumerate(benches):
        ax_s, ax_l = axes[0][j], axes[1][j]
        sub = curves[curves["benchmark"] == bench] if not curves.empty else curves
        last = int(sub["iteration"].max()) if not sub.empty else 10
        if not sub.empty:
            sns.lineplot(data=sub, x="iteration", y="success", hue="method", marker="o", ax=ax_s, legend=j == 0)
            sns.lineplot(data=sub, x="iteration", y="steps", hue="method", marker="o", ax=ax_l, legend=False)
        pf = paper_final[paper_final["benchmark"] == bench].groupby("method")["success"].mean()
        ax_s.scatter(
            [last] * len(pf), pf.values, marker="*", s=140, color="black", label="paper, final (mean over backbones)"
        )
        ax_s.set_title(f"{bench}: (a) held-out success (%)")
        ax_l.set_title(f"{bench}: (b) mean trajectory length")
        ax_s.set_ylim(-2, 102)
    axes[0][0].legend(fontsize=7)
    if note:
        fig.text(0.01, -0.02, note, fontsize=7, wrap=True)
    fig.tight_layout()
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig
