"""Consolidation-study figures (seaborn/matplotlib) from the tables of ``consolidation.analysis``.

Each takes a table and a title, and writes the study's provenance note (the weak-model note on the
embedded default) and, where given, the paper's statement under the axes.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from matplotlib.ticker import MaxNLocator

from antipersist_lib.analysis.plots import footnote, plt, sns
from antipersist_lib.consolidation.analysis import column_group, column_order


def plot_utility(
    curves: pd.DataFrame,
    *,
    reference: pd.DataFrame | None = None,
    title: str,
    note: str = "",
    statement: str = "",
    x: str = "updates",
) -> Any:
    """Fig. 1 shape. Left panel: the paper's stated points (``paper_reference``: WebShop AWM vs examples, and
    no memory). Right panels, one per benchmark x backbone: this study's success vs ``x`` (updates or
    examples_seen), one line per builder and stream condition; the dotted line is no memory."""
    sns.set_theme(style="whitegrid")
    panels = list(dict.fromkeys(zip(curves["benchmark"], curves["backbone"]))) if not curves.empty else []
    n = 1 + max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 3.9), squeeze=False)
    ax = axes[0][0]
    if reference is not None and not reference.empty:
        for line, sub in reference.groupby("line", sort=False):
            ax.plot(
                sub["examples_seen"],
                sub["score"],
                marker="o" if line != "no memory" else None,
                linestyle="-" if line != "no memory" else ":",
                color="tab:red" if line != "no memory" else "black",
                label=f"paper: {line}",
            )
            for _, r in sub.iterrows():
                if line != "no memory":
                    ax.annotate(
                        f"{r['score']:.0f}",
                        (r["examples_seen"], r["score"]),
                        xytext=(4, 4),
                        textcoords="offset points",
                        fontsize=8,
                    )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("examples consolidated")
        ax.set_ylabel("WebShop score (x100)")
        ax.set_ylim(-3, 103)
        ax.legend(fontsize=7)
    ax.set_title("paper, Fig. 1(b) (stated values)", fontsize=9)
    for k, (bench, bb) in enumerate(panels or [("(no study loaded)", "")], start=1):
        ax = axes[0][k]
        sub = curves[(curves["benchmark"] == bench) & (curves["backbone"] == bb)] if panels else curves
        if sub.empty:
            ax.text(0.5, 0.5, "no stream conditions in this study", ha="center", va="center", transform=ax.transAxes)
        else:
            sub = sub.assign(line=[f"{b} · {c}" for b, c in zip(sub["builder"], sub["regime_label"])])
            sns.lineplot(data=sub, x=x, y="success", hue="line", marker="o", ax=ax, errorbar=None)
            zero = sub[sub["point"] != "evaluated"]
            if not zero.empty:
                ax.axhline(float(zero["success"].iloc[0]), linestyle=":", color="black", label="no memory")
            ax.legend(fontsize=6.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("memory updates (stream steps)" if x == "updates" else "examples consolidated")
        ax.set_ylabel("held-out success (%)")
        ax.set_ylim(-3, 103)
        ax.set_title(f"this run: {bench}, {bb}", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    footnote(fig, statement, note)
    plt.close(fig)
    return fig


def plot_regime_bars(bars: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 3 shape: held-out success per builder, one bar per construction condition (Static-All, Static-Group,
    Stream ...), the dotted line the no-memory level; every bar carries its value."""
    sns.set_theme(style="whitegrid")
    panels = list(dict.fromkeys(zip(bars["benchmark"], bars["backbone"]))) if not bars.empty else []
    n = max(1, len(panels))
    width = max(6.5, 1.6 * (bars["builder"].nunique() if not bars.empty else 1) + 3)
    fig, axes = plt.subplots(1, n, figsize=(width * n, 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels or [None]):
        if panel is None:
            ax.text(0.5, 0.5, "no study loaded", ha="center", va="center", transform=ax.transAxes)
            continue
        sub = bars[(bars["benchmark"] == panel[0]) & (bars["backbone"] == panel[1])]
        sns.barplot(data=sub, x="builder", y="success", hue="regime_label", ax=ax, errorbar=None)
        for container in ax.containers:
            ax.bar_label(container, fmt="%.1f", fontsize=6, padding=1)
        nm = sub["no_memory"].dropna()
        if not nm.empty:
            ax.axhline(float(nm.iloc[0]), linestyle=":", color="black", label="no memory")
        ax.set_ylim(0, 105)
        ax.set_ylabel("held-out success (%)")
        ax.set_xlabel("")
        ax.set_title(f"{panel[0]}, {panel[1]}", fontsize=9)
        ax.legend(fontsize=7, title="condition", title_fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    footnote(fig, statement, note)
    plt.close(fig)
    return fig


def plot_homogeneity(curves: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 4 shape: success vs updates per builder (one panel each), homogeneous vs heterogeneous stream
    batches as colour, batch size as marker; a panel says so when the study streamed one kind of batch only."""
    sns.set_theme(style="whitegrid")
    builders = list(dict.fromkeys(curves["builder"])) if not curves.empty else []
    n = max(1, len(builders))
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.7), squeeze=False)
    for ax, builder in zip(axes[0], builders or [None]):
        if builder is None:
            ax.text(0.5, 0.5, "no stream conditions in this study", ha="center", va="center", transform=ax.transAxes)
            continue
        sub = curves[curves["builder"] == builder]
        sub = sub.assign(line=[f"{bb} · {c}" for bb, c in zip(sub["backbone"], sub["regime_label"])])
        sns.lineplot(
            data=sub, x="updates", y="success", hue="batches", style="line", markers=True, ax=ax, errorbar=None
        )
        kinds = set(sub.loc[sub["point"] == "evaluated", "batches"])
        if len(kinds) < 2:
            ax.text(
                0.5,
                0.92,
                f"only {', '.join(sorted(kinds)) or 'no'} batches streamed",
                ha="center",
                fontsize=7,
                transform=ax.transAxes,
                color="dimgray",
            )
        ax.set_title(builder, fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("memory updates (stream steps)")
        ax.set_ylabel("held-out success (%)")
        ax.set_ylim(-3, 103)
        ax.legend(fontsize=6)
    fig.suptitle(title)
    fig.tight_layout()
    footnote(fig, statement, note)
    plt.close(fig)
    return fig


def plot_table(cells: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Tables 2-3 as bars: one panel per table row (source, benchmark, backbone), one bar per column, coloured by
    group (no memory, trajectory logs, consolidators); "(--)" over a consolidator beaten by a trajectory log."""
    sns.set_theme(style="whitegrid")
    if cells.empty:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.text(0.5, 0.5, "no table cells", ha="center", va="center", transform=ax.transAxes)
        plt.close(fig)
        return fig
    cells = cells.assign(source=cells["source"] if "source" in cells else "this run")
    rows = list(dict.fromkeys(zip(cells["source"], cells["benchmark"], cells["backbone"])))
    ncol = min(4, len(rows))
    nrow = math.ceil(len(rows) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.4 * ncol, 3.3 * nrow), squeeze=False)
    colors = {
        "no memory": "0.6",
        "trajectory logs": "tab:blue",
        "consolidators": "tab:orange",
        "kit methods": "tab:green",
    }
    for k, (src, bench, bb) in enumerate(rows):
        ax = axes[k // ncol][k % ncol]
        sub = cells[(cells["source"] == src) & (cells["benchmark"] == bench) & (cells["backbone"] == bb)]
        sub = sub.set_index("column").loc[column_order(list(sub["column"]))].reset_index()
        groups = [column_group(c) for c in sub["column"]]
        values = [0.0 if v is None or pd.isna(v) else float(v) for v in sub["value"]]
        ax.bar(range(len(sub)), values, color=[colors[g] for g in groups])
        for i, (v, beaten, raw) in enumerate(zip(values, sub["beaten"], sub["value"])):
            text = "—" if raw is None or pd.isna(raw) else f"{v:.0f}" + (" (--)" if bool(beaten) else "")
            ax.text(i, v + 1.5, text, ha="center", fontsize=6, rotation=90, color="red" if beaten else "black")
        ax.set_xticks(range(len(sub)), list(sub["label"]), rotation=60, fontsize=7)
        ax.set_ylim(0, 118)
        ax.set_title(f"{src}: {bench}, {bb}", fontsize=8)
        ax.set_ylabel("success / score (x100)", fontsize=7)
    for k in range(len(rows), nrow * ncol):
        axes[k // ncol][k % ncol].set_axis_off()
    shown = [g for g in colors if g in set(cells["column"].map(column_group))]
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[g]) for g in shown]
    fig.legend(handles, shown, loc="upper right", fontsize=7)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    footnote(fig, statement, note)
    plt.close(fig)
    return fig


def plot_task_switch(table: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Figs. 10 and 18 from ``task_switch.switch_table``: left, the running total of per-task scores of
    Fresh and Cumulative; right, the running totals of judge-flagged over-generalized and garbage entries
    (an empty panel when no judge ran)."""
    from antipersist_lib.consolidation.task_switch import FLAGGED, SETUPS

    sns.set_theme(style="whitegrid")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.9))
    colors = {"fresh": "tab:green", "cumulative": "tab:red"}
    for setup in SETUPS:
        sub = table[table["setup"] == setup].sort_values("index")
        if sub.empty:
            continue
        left.plot(sub["index"], sub["score_total"], marker="o", color=colors[setup], label=setup)
        for label, style in zip(FLAGGED, ("-", "--")):
            values = sub[f"{label}_total"]
            if values.notna().any():
                right.plot(
                    sub["index"], values, linestyle=style, marker=".", color=colors[setup], label=f"{setup}: {label}"
                )
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("task in the switch sequence")
    left.set_ylabel("running total of task scores")
    left.set_title("Fig. 10: Fresh vs Cumulative", fontsize=9)
    right.set_ylabel("running total of flagged entries")
    right.set_title("Fig. 18: over-generalized and garbage entries", fontsize=9)
    if left.get_legend_handles_labels()[0]:
        left.legend(fontsize=7)
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=7)
    else:
        right.text(0.5, 0.5, "no judge labels", ha="center", va="center", transform=right.transAxes, fontsize=9)
    fig.suptitle(title, fontsize=10)
    footnote(fig, statement, note, top=0.93)
    return fig


def plot_probe_interference(table: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 8(c) from ``analysis.probe_interference``: success on each task type against the consolidation
    stage of the focal-type memory, the focal-only memory (solid) and after one more consolidation on the probe
    type (dashed); dotted: no memory on that type."""
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    types = list(dict.fromkeys(table["task_type"])) if not table.empty else []
    palette = dict(zip(types, sns.color_palette("tab10", max(1, len(types)))))
    for (task_type, memory), sub in table.groupby(["task_type", "memory"], sort=False):
        sub = sub.sort_values("stage")
        style = "-" if "focal only" in memory else "--"
        ax.plot(
            sub["stage"],
            sub["success_pct"],
            style,
            marker="o",
            color=palette[task_type],
            label=f"{task_type}: {memory}",
        )
    for task_type in types:
        base = table[table["task_type"] == task_type]["no_memory_pct"].dropna()
        if not base.empty:
            ax.axhline(float(base.iloc[0]), linestyle=":", color=palette[task_type], label=f"{task_type}: no memory")
    ax.set_xlabel("consolidation stage of the focal-type memory")
    ax.set_ylabel("held-out success (%)")
    ax.set_ylim(-3, 103)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6.5, loc="best")
    else:
        ax.text(0.5, 0.5, "no evaluated probe", ha="center", va="center", transform=ax.transAxes, fontsize=9)
    fig.suptitle(title, fontsize=10)
    footnote(fig, statement, note, top=0.93)
    return fig
