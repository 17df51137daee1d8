"""ARC-AGI Stream figures (seaborn/matplotlib) from the tables of ``arc.analysis``.

Each takes a table and a title, and writes the study's provenance note (the weak-model note when the
study ran on the embedded default) and, where given, the paper's statement under the axes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.ticker import MaxNLocator

from antipersist_lib.analysis.plots import footnote, plt, sns


def _dodged(df: pd.DataFrame, by: str, x: str = "step", width: float = 0.06) -> pd.DataFrame:
    """Shift each group's x a little so that lines with equal values (all 0 % on a weak model) stay visible."""
    if df.empty:
        return df
    groups = list(dict.fromkeys(df[by]))
    offset = {g: (i - (len(groups) - 1) / 2) * width for i, g in enumerate(groups)}
    out = df.copy()
    out[x] = out[x] + out[by].map(offset)
    return out


def _integer_steps(ax: Any) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_utility(curves: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Figs. 5 / 9(a): accuracy (%) vs step, one line per condition, the no-memory baseline dotted;
    one panel per buffer capacity. ``curves``: ``utility_table``'s output."""
    sns.set_theme(style="whitegrid")
    caps = list(dict.fromkeys(curves["buffer_capacity"])) if not curves.empty else [None]
    fig, axes = plt.subplots(1, len(caps), figsize=(5.2 * len(caps), 3.9), squeeze=False)
    for ax, cap in zip(axes[0], caps):
        sub = curves[curves["buffer_capacity"] == cap] if not curves.empty else curves
        if sub.empty:
            ax.text(0.5, 0.5, "no study loaded", ha="center", va="center", transform=ax.transAxes)
        else:
            sns.lineplot(
                data=_dodged(sub, "condition"),
                x="step",
                y="accuracy_pct",
                hue="regime",
                style="source",
                markers=True,
                ax=ax,
            )
            base = sub["no_memory_pct"].dropna()
            if len(base):
                ax.axhline(float(base.iloc[0]), color="black", linestyle=":", label="no memory")
            ax.legend(fontsize=7)
        ax.set_ylim(-3, 103)
        _integer_steps(ax)
        ax.set_xlabel("stream step (memory updates)")
        ax.set_ylabel("held-out accuracy (%)")
        ax.set_title(f"|B| = {cap}" if cap is not None else "")
    fig.suptitle(title)
    fig.tight_layout()
    footnote(fig, statement, note)
    plt.close(fig)
    return fig


def plot_regression(table: pd.DataFrame, *, title: str, note: str = "") -> Any:
    """Fig. 2: training-slice accuracy without memory and after the stream, the paper's beside this run's."""
    sns.set_theme(style="whitegrid")
    long = table.melt(
        id_vars=["source", "condition", "n_tasks"], value_vars=["no_memory", "with_memory"], var_name="memory"
    )
    long["who"] = [
        f"paper: GPT-5.4\n({n} problems)" if src.startswith("paper") else f"this run:\n{cond}\n({n} tasks)"
        for src, cond, n in zip(long["source"], long["condition"], long["n_tasks"])
    ]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.5 * long["who"].nunique() + 2), 4.0))
    sns.barplot(data=long, x="who", y="value", hue="memory", ax=ax, errorbar=None)
    for container in ax.containers:
        ax.bar_label(container, fmt="%.0f", fontsize=7, padding=1)
    ax.set_ylim(0, 110)
    ax.set_xlabel("")
    ax.set_ylabel("accuracy on the training slice (%)")
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(title)
    fig.tight_layout()
    footnote(fig, note)
    plt.close(fig)
    return fig


def plot_memory_sizes(steps: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 7(b): episodic buffer size and abstract store size per step, one line per condition."""
    sns.set_theme(style="whitegrid")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, col, label in (
        (axes[0], "buffer_size", "episodic buffer entries"),
        (axes[1], "abstract_entries", "abstract store entries"),
    ):
        if steps.empty:
            ax.text(0.5, 0.5, "no study loaded", ha="center", va="center", transform=ax.transAxes)
        else:
            sns.lineplot(
                data=_dodged(steps, "condition"),
                x="step",
                y=col,
                hue="condition",
                style="condition",
                markers=True,
                ax=ax,
            )
            ax.legend(fontsize=7)
        _integer_steps(ax)
        ax.set_xlabel("stream step")
        ax.set_ylabel(label)
    fig.suptitle(title)
    fig.tight_layout()
    footnote(fig, statement, note)
    plt.close(fig)
    return fig


def plot_buffer_composition(
    composition: pd.DataFrame,
    condition: str | None,
    *,
    title: str,
    paper_step: int | None = None,
    note: str = "",
    statement: str = "",
) -> Any:
    """Fig. 6: the episodic buffer's entries per family over the stream, stacked, for one condition.

    A dashed line marks the first step whose buffer holds every family; a dotted one the paper's step."""
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(8, 4))
    data = composition[composition["condition"] == condition] if condition is not None else composition.iloc[0:0]
    if data.empty:
        ax.text(0.5, 0.5, "no study loaded", ha="center", va="center", transform=ax.transAxes)
    else:
        wide = data.pivot_table(index="step", columns="family", values="entries", aggfunc="sum").sort_index()
        wide = wide[[f for f in data["family"].drop_duplicates() if f in wide.columns]]
        ax.stackplot(wide.index, *(wide[c] for c in wide.columns), labels=list(wide.columns), alpha=0.85)
        full = wide.index[(wide > 0).sum(axis=1) == wide.shape[1]]
        if len(full):
            ax.axvline(full[0], color="black", ls="--", lw=1, label=f"all families (this run): step {full[0]}")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if paper_step is not None and not data.empty and paper_step <= int(data["step"].max()):
        ax.axvline(paper_step, color="grey", ls=":", lw=1)
    _integer_steps(ax)
    ax.set_xlabel("stream step")
    ax.set_ylabel("episodic buffer entries")
    ax.set_title(f"{title}: {condition}" if condition else title)
    fig.tight_layout()
    footnote(fig, statement, note)
    plt.close(fig)
    return fig


def plot_misclassifications(steps: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 7(a): cumulative misclassified memory actions per step, one line per condition."""
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    if steps.empty:
        ax.text(0.5, 0.5, "no study loaded", ha="center", va="center", transform=ax.transAxes)
    else:
        sns.lineplot(
            data=_dodged(steps, "condition"),
            x="step",
            y="misclassified_cumulative",
            hue="condition",
            style="condition",
            markers=True,
            ax=ax,
        )
        ax.legend(fontsize=7)
    _integer_steps(ax)
    ax.set_xlabel("stream step")
    ax.set_ylabel("misclassified actions (cumulative)")
    ax.set_title(title)
    fig.tight_layout()
    footnote(fig, statement, note)
    plt.close(fig)
    return fig
