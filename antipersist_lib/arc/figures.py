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
    one panel per |B| (Table 4's, under the study's buffer reading). ``curves``: ``utility_table``'s output;
    for a study of several seeds each line is their mean, with a band of one standard deviation."""
    sns.set_theme(style="whitegrid")
    key = "table4_b" if "table4_b" in curves.columns else "buffer_capacity"
    caps = list(dict.fromkeys(curves[key])) if not curves.empty else [None]
    fig, axes = plt.subplots(1, len(caps), figsize=(5.2 * len(caps), 3.9), squeeze=False)
    for ax, cap in zip(axes[0], caps):
        sub = curves[curves[key] == cap] if not curves.empty else curves
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
                errorbar="sd",  # several seeds: their mean and a band of one standard deviation
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
        ax.set_title(f"|B| = {cap}" if cap is not None and not pd.isna(cap) else "")
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
                errorbar="sd",  # several seeds: their mean, one standard deviation around it
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
            errorbar="sd",  # several seeds: their mean, one standard deviation around it
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


def plot_source_ablation(table: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 9(a) / App. K.1: held-out accuracy per checkpoint for Abstract Only, Episodic Only and both, one
    panel per condition, the no-memory baseline dotted. ``table``: ``source_ablation_table``'s output."""
    sns.set_theme(style="whitegrid")
    conds = list(dict.fromkeys(table["condition"])) if not table.empty else [None]
    fig, axes = plt.subplots(1, len(conds), figsize=(5.2 * len(conds), 3.9), squeeze=False)
    for ax, cond in zip(axes[0], conds):
        sub = table[table["condition"] == cond] if cond is not None else table
        if sub.empty:
            ax.text(0.5, 0.5, "no source ablation in this study", ha="center", va="center", transform=ax.transAxes)
        else:
            sns.lineplot(
                data=_dodged(sub, "label"), x="step", y="accuracy_pct", hue="label", markers=True, errorbar="sd", ax=ax
            )
            base = sub["no_memory_pct"].dropna()
            if len(base):
                ax.axhline(float(base.iloc[0]), color="black", linestyle=":", label="no memory")
            ax.legend(fontsize=7)
        ax.set_ylim(-3, 103)
        _integer_steps(ax)
        ax.set_xlabel("stream step (checkpoint)")
        ax.set_ylabel("held-out accuracy (%)")
        ax.set_title(str(cond) if cond is not None else "")
    fig.suptitle(title)
    fig.tight_layout()
    footnote(fig, statement, note)
    plt.close(fig)
    return fig


# -- single-family probes (arc.probes: Figs. 11, 8(b), 8(a)) ----------------------------------------------

#: how the probe figures name an evaluation kind
PROBE_KIND_LABELS = {"repeat": "exact repetitions", "variant": "variations (same family and skill)"}


def _regime_axes(table: pd.DataFrame, width: float = 5.0, height: float = 4.4) -> tuple[Any, list[Any], list[Any]]:
    """One panel per regime (one empty panel saying so when the table is empty)."""
    sns.set_theme(style="whitegrid")
    regimes = list(dict.fromkeys(table["regime"])) if not table.empty else [None]
    fig, axes = plt.subplots(1, len(regimes), figsize=(width * len(regimes), height), squeeze=False)
    return fig, list(axes[0]), regimes


def _no_data(ax: Any, text: str = "no probe run loaded") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def plot_overfit(table: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 11: accuracy (%) after each consolidation cycle on exact repetitions of the seen tasks and on their
    variations, one line each (the no-memory accuracy of each dotted); one panel per regime.
    ``table``: ``probes.overfit_table``'s output."""
    fig, axes, regimes = _regime_axes(table)
    for ax, regime in zip(axes, regimes):
        sub = table[table["regime"] == regime] if regime is not None else table
        if sub.empty:
            _no_data(ax)
            continue
        for i, kind in enumerate(k for k in PROBE_KIND_LABELS if k in set(sub["eval_kind"])):
            rows = sub[sub["eval_kind"] == kind].sort_values("cycle")
            color = f"C{i}"
            ax.plot(rows["cycle"], rows["accuracy_pct"], marker="o", color=color, label=PROBE_KIND_LABELS[kind])
            base = rows["no_memory_pct"].dropna()
            if len(base):
                ax.axhline(float(base.iloc[0]), color=color, linestyle=":", label=f"no memory, {kind}")
        ax.set_ylim(-3, 103)
        _integer_steps(ax)
        ax.set_xlabel("consolidation cycles over the single-family subset")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"{regime}: {sub['eval_family'].iloc[0]}")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    footnote(fig, statement, note, top=0.92)
    plt.close(fig)
    return fig


def plot_overwrite(table: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 8(b): accuracy (%) on each family's seen tasks vs stream step, one line per family, a dashed line
    where the second family's stream starts; one panel per regime. ``table``: ``probes.overwrite_table``'s."""
    fig, axes, regimes = _regime_axes(table)
    for ax, regime in zip(axes, regimes):
        sub = table[table["regime"] == regime] if regime is not None else table
        if sub.empty:
            _no_data(ax)
            continue
        for i, family in enumerate(dict.fromkeys(sub["eval_family"])):
            rows = sub[sub["eval_family"] == family].sort_values("step")
            ax.plot(rows["step"], rows["accuracy_pct"], marker="o", color=f"C{i}", label=f"{family} tasks")
            base = rows["no_memory_pct"].dropna()
            if len(base):
                ax.axhline(float(base.iloc[0]), color=f"C{i}", linestyle=":", label=f"no memory, {family}")
        ax.axvline(float(sub["switch_step"].iloc[0]), color="black", linestyle="--", label="second family starts")
        ax.set_ylim(-3, 103)
        _integer_steps(ax)
        ax.set_xlabel("stream step (memory updates)")
        ax.set_ylabel("accuracy on seen tasks (%)")
        ax.set_title(str(regime))
        ax.legend(fontsize=6)
    fig.suptitle(title)
    footnote(fig, statement, note, top=0.92)
    plt.close(fig)
    return fig


def plot_misgroup(table: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 8(a): final accuracy (%) on each family's seen tasks after streaming the two families mixed or each
    alone, bars per stream beside the no-memory bar; the mixed stream's label carries its misclassified
    (cross-family) memory actions. One panel per regime. ``table``: ``probes.misgroup_table``'s output."""
    fig, axes, regimes = _regime_axes(table, width=5.6, height=4.4)
    for ax, regime in zip(axes, regimes):
        sub = table[table["regime"] == regime] if regime is not None else table
        if sub.empty:
            _no_data(ax)
            continue
        families = list(dict.fromkeys(sub["eval_family"]))
        streams = list(dict.fromkeys(sub["streamed"]))
        width = 0.8 / (len(streams) + 1)
        for i, streamed in enumerate(streams):
            rows = sub[sub["streamed"] == streamed].set_index("eval_family").reindex(families)
            label = streamed
            if streamed == "mixed":
                label = f"mixed ({int(rows['misclassified'].max())} cross-family memory actions)"
            xs = [j + (i - len(streams) / 2) * width for j in range(len(families))]
            ax.bar(xs, rows["accuracy_pct"].tolist(), width=width, color=f"C{i}", label=label)
        base = sub.drop_duplicates("eval_family").set_index("eval_family").reindex(families)["no_memory_pct"]
        xs = [j + (len(streams) - len(streams) / 2) * width for j in range(len(families))]
        ax.bar(xs, base.fillna(0).tolist(), width=width, color="lightgray", label="no memory")
        ax.set_xticks(range(len(families)), [f"{f} tasks" for f in families], fontsize=7)
        ax.set_ylim(0, 103)
        ax.set_ylabel("final accuracy (%)")
        ax.set_title(str(regime))
        ax.legend(fontsize=6)
    fig.suptitle(title)
    footnote(fig, statement, note, top=0.92)
    plt.close(fig)
    return fig


#: the usual ARC display colors for cell values 0-9 (0: the black background)
ARC_COLORS = (
    "#000000",
    "#0074D9",
    "#FF4136",
    "#2ECC40",
    "#FFDC00",
    "#AAAAAA",
    "#F012BE",
    "#FF851B",
    "#7FDBFF",
    "#870C25",
)


def plot_task_examples(tasks: list[Any], *, by: str, title: str, statement: str = "") -> Any:
    """Figs. 12 and 13: one shown example (input above, output below) of each task, labelled by its ``by``
    attribute ("family" for Fig. 12, "skill" for Fig. 13)."""
    from matplotlib.colors import BoundaryNorm, ListedColormap

    cmap = ListedColormap(ARC_COLORS)
    norm = BoundaryNorm(list(range(11)), cmap.N)
    n = max(1, len(tasks))
    fig, axes = plt.subplots(2, n, figsize=(2.1 * n, 4.6), squeeze=False)
    for k, task in enumerate(tasks):
        example = task.train[0]
        for row, (grid, label) in enumerate(((example.input, "input"), (example.output, "output"))):
            ax = axes[row][k]
            ax.imshow(grid, cmap=cmap, norm=norm, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(str(getattr(task, by)).replace("_", " "), fontsize=7)
            if k == 0:
                ax.set_ylabel(label, fontsize=8)
    fig.suptitle(title, fontsize=10)
    footnote(fig, statement, top=0.9)
    plt.close(fig)
    return fig
