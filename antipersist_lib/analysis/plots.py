"""Figures for the notebooks (seaborn), each placing the paper's values beside this run's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:  # headless scripts and CI; a notebook kernel keeps its inline backend
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def save(fig: plt.Figure, output_dir: str | Path, name: str) -> list[Path]:
    """Write ``name``.png and ``name``.pdf; returns the paths."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    for p in paths:
        fig.savefig(p, bbox_inches="tight", dpi=150)
    return paths


SOURCE_MARKERS = {"paper": "o", "this run": "X"}


#: fixed colours: the method and its three persistent-memory variants stand apart from the baselines
_COLORS = {
    "react": "tab:gray",
    "reflexion": "tab:olive",
    "expel": "tab:cyan",
    "autorefine": "tab:brown",
    "trajectory_memory": "tab:blue",
    "abstraction_memory": "tab:orange",
    "joint_memory": "tab:green",
    "anti_persistence": "tab:red",
}
_SPARE = ("tab:purple", "tab:pink", "black", "gold", "navy", "teal")
#: one marker per method, so lines that coincide are still told apart
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")


def method_colors(methods: list[str]) -> dict[str, str]:
    """A fixed colour per method (the Table 1 methods always the same one, others from a spare
    list), so a method has one colour across figures and its paper marker matches its curve."""
    out = dict(_COLORS)
    extra = [m for m in dict.fromkeys(methods) if m not in out]
    for i, m in enumerate(extra):
        out[m] = _SPARE[i % len(_SPARE)]
    return out


def _side_by_side(ax: plt.Axes, xy: list[tuple[float, float]], radius_px: float = 14.0) -> list[float]:
    """Horizontal offsets (points) that set markers closer than ``radius_px`` apart side by side,
    so coinciding points stay visible; the data values are unchanged (the shift is in display space)."""
    disp = ax.transData.transform(xy) if xy else []
    offsets = [0.0] * len(xy)
    clusters: list[list[int]] = []
    for i, (x, y) in enumerate(disp):
        for c in clusters:
            cx, cy = disp[c[0]]
            if abs(cx - x) < radius_px and abs(cy - y) < radius_px:
                c.append(i)
                break
        else:
            clusters.append([i])
    for c in clusters:
        for k, i in enumerate(c):
            offsets[i] = (k - (len(c) - 1) / 2) * 11.0
    return offsets


def cost_vs_success(points: pd.DataFrame, *, title: str, note: str = "") -> plt.Figure:
    """Figure 3: mean LLM calls per held-out task vs held-out success, one point per method and
    source. Colour names the method and shape the source (both in legends; no text labels that could
    overlap); points that would hide one another are drawn side by side.

    ``points`` columns: method, calls, success, source ("paper" or "this run").
    """
    from matplotlib.lines import Line2D
    from matplotlib.transforms import offset_copy

    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(6.8, 4.6))
    colors = method_colors(points["method"].tolist())
    lo, hi = float(points["calls"].min()), float(points["calls"].max())
    pad = max(0.5, 0.08 * (hi - lo))
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(-4, 104)
    xy = list(zip(points["calls"].astype(float), points["success"].astype(float)))
    for (_, r), dx in zip(points.iterrows(), _side_by_side(ax, xy)):
        ax.scatter(
            [r["calls"]],
            [r["success"]],
            s=110,
            color=colors[r["method"]],
            marker=SOURCE_MARKERS.get(r["source"], "s"),
            edgecolor="black",
            linewidth=0.6,
            transform=offset_copy(ax.transData, fig=fig, x=dx, units="points"),
            zorder=3,
        )
    ax.set_xlabel("mean LLM calls per held-out task")
    ax.set_ylabel("held-out success (%)")
    methods = list(dict.fromkeys(points["method"]))
    by_method = [Line2D([], [], marker="o", linestyle="", color=colors[m], label=m) for m in methods]
    by_source = [
        Line2D([], [], marker=SOURCE_MARKERS.get(s, "s"), linestyle="", color="gray", markeredgecolor="black", label=s)
        for s in dict.fromkeys(points["source"])
    ]
    ax.legend(
        handles=by_method + by_source,
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        title="colour: method, shape: source",
        title_fontsize=7,
    )
    ax.set_title(title)
    footnote(fig, note, "Points closer than a marker's width are drawn side by side; values are unchanged.")
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig


def _wrap(label: str) -> str:
    return label.replace(": ", ":\n").replace(" / ", "\n")


def one_seed_note(df: pd.DataFrame, what: str = "point") -> str:
    """A figure's note on this run's points averaged over one seed, whose spread is unknown (no
    error bar is drawn for them: a single seed's std is not zero). "" when there is none or the frame
    carries no seed count."""
    if "seeds" not in df.columns:
        return ""
    seeds = pd.to_numeric(df["seeds"], errors="coerce")
    one = int((seeds == 1).sum())
    if not one:
        return ""
    return f"{one} {what}{'s' if one > 1 else ''} of this run from one seed: no error bar (the spread over seeds is unknown)."


def _seed_error_bars(ax: plt.Axes, sub: pd.DataFrame, color: str) -> None:
    """± std over seeds at each swept value that has one (not for the paper's unprinted spread, nor for one seed)."""
    spread = sub[_std_of(sub).notna()]
    if len(spread):
        ax.errorbar(
            spread["value"], spread["success"], yerr=_std_of(spread), fmt="none", ecolor=color, capsize=3, linewidth=0.8
        )


def _std_of(df: pd.DataFrame) -> pd.Series:
    """``success_std`` as floats (NaN where none: the paper printed none, or this run had one seed)."""
    if "success_std" not in df.columns:
        return pd.Series(float("nan"), index=df.index)
    return pd.to_numeric(df["success_std"], errors="coerce")


def _bar_error_bars(ax: plt.Axes, df: pd.DataFrame, *, x: str, hue: str, hue_order: list[str] | None) -> None:
    """Error bars (± std over seeds, ``success_std``) on the bars ``sns.barplot`` drew: container i
    holds hue level i, a bar centred near position j stands at x level j."""
    std = _std_of(df)
    if std.isna().all():
        return
    xs = list(dict.fromkeys(df[x]))
    hues = [h for h in hue_order if h in set(df[hue])] if hue_order else list(dict.fromkeys(df[hue]))
    for h, container in zip(hues, ax.containers):
        for bar in container:
            j = int(round(bar.get_x() + bar.get_width() / 2))
            if not 0 <= j < len(xs):
                continue
            row = std[(df[x] == xs[j]) & (df[hue] == h)]
            if len(row) and not pd.isna(row.iloc[0]):
                ax.errorbar(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_height(),
                    yerr=row.iloc[0],
                    color="black",
                    capsize=2,
                    linewidth=0.8,
                )


def success_bars(
    df: pd.DataFrame, *, x: str, hue: str, title: str, note: str = "", hue_order: list[str] | None = None
) -> plt.Figure:
    """Grouped bars of success (%) with the paper's and this run's values side by side; every bar
    carries its value, so a 0 % bar is visible as "0.0". Where ``df`` has ``success_std`` (Table 2:
    the paper's printed std, this run's std over seeds), each bar carries ± that std as an error
    bar; a point of one seed gets none, and the note says so (``one_seed_note``)."""
    sns.set_theme(style="whitegrid")
    n = max(1, df[x].nunique())
    fig, ax = plt.subplots(figsize=(max(7.0, 1.9 * n), 4.4))
    sns.barplot(data=df, x=x, y="success", hue=hue, hue_order=hue_order, ax=ax, errorbar=None)
    hues = len(hue_order) if hue_order else max(1, df[hue].nunique())
    for container in ax.containers:  # upright values stop touching once bars get narrow
        ax.bar_label(container, fmt="%.1f", fontsize=6, padding=1, rotation=90 if hues > 3 else 0)
    _bar_error_bars(ax, df, x=x, hue=hue, hue_order=hue_order)
    note = " ".join(part for part in (note, one_seed_note(df, "bar")) if part)
    ax.set_ylabel("held-out success (%)")
    ax.set_xlabel("")
    ax.set_ylim(0, max(100.0, float(df["success"].max() or 0)) + (14 if hues > 3 else 8))
    ax.set_xticks(ax.get_xticks(), [_wrap(t.get_text()) for t in ax.get_xticklabels()], fontsize=8)
    ax.legend(fontsize=7, title=hue, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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


def footnote(fig: plt.Figure, *parts: str, width: int = 150, top: float = 1.0) -> None:
    """Small wrapped lines under a figure, one paragraph per non-empty part (e.g. the paper's
    statement, then the provenance note such as "a 270M CPU model"). The layout is redone with
    room reserved below the axes, so the note never runs into tick or axis labels; ``top``: the
    fraction of the height the axes may use (below a suptitle)."""
    import textwrap

    lines = [line for part in parts if part for line in textwrap.wrap(part, width)]
    if not lines:
        fig.tight_layout(rect=(0, 0, 1, top))
        return
    height = fig.get_figheight()
    reserved = min(0.45, (0.12 * len(lines) + 0.1) / height)
    fig.tight_layout(rect=(0, reserved, 1, top))
    fig.text(0.01, reserved - 0.04 / height, "\n".join(lines), fontsize=6.5, color="dimgray", va="top")


def text_overlaps(fig: plt.Figure) -> list[tuple[str, str]]:
    """Pairs of visible texts (figure notes, titles, axis and tick labels, annotations, legends)
    whose boxes overlap once drawn: what makes a figure unreadable at a glance. Bar-value labels
    are compared with the notes and legends only (neighbouring bars' values may touch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)  # a closed figure has none
    canvas.draw()
    renderer = canvas.get_renderer()
    items: list[tuple[str, object, str]] = []  # (kind, bbox, text)

    def add(kind: str, artist: object, text: str) -> None:
        if artist.get_visible() and text.strip():  # type: ignore[attr-defined]
            items.append((kind, artist.get_window_extent(renderer), text))  # type: ignore[attr-defined]

    for t in fig.texts:  # the suptitle is one of them
        add("note", t, t.get_text())
    for ax in fig.axes:
        for t in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label):  # noqa: SLF001
            add("label", t, t.get_text())
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        for t in ax.get_xticklabels():
            if x0 <= t.get_position()[0] <= x1:  # labels of ticks outside the view are not drawn
                add("tick", t, t.get_text())
        for t in ax.get_yticklabels():
            if y0 <= t.get_position()[1] <= y1:
                add("tick", t, t.get_text())
        for t in ax.texts:
            add(
                "bar value" if t.__class__.__name__ == "Annotation" and t.get_fontsize() <= 6 else "annotation",
                t,
                t.get_text(),
            )
        legend = ax.get_legend()
        for child in ax.get_children():
            if child.__class__.__name__ == "Legend" and child.get_visible():
                items.append(("legend", child.get_window_extent(renderer), "legend"))
        del legend
    out = []
    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            (ki, bi, ti), (kj, bj, tj) = items[i], items[j]
            if "bar value" in (ki, kj) and not {"note", "legend"} & {ki, kj}:
                continue
            if ki == kj == "tick":
                continue
            if bi.overlaps(bj):  # type: ignore[attr-defined]
                out.append((ti, tj))
    return out


def sweep(df: pd.DataFrame, *, param: str, title: str, note: str = "", logx: bool = False) -> plt.Figure:
    """Figures 5 and 12: success vs a hyperparameter, one panel per benchmark, paper and this run.

    ``df`` columns: value (numeric), success, source, benchmark; optional success_std (± std over
    seeds, drawn as error bars) and seeds (points of one seed get no error bar, and the note says so).
    """
    sns.set_theme(style="whitegrid")
    points = df.groupby(["source", "benchmark"])["value"].transform("nunique")
    df = df[points >= 2]  # a sweep of one point (e.g. only the default run exists) is not a sweep
    note = " ".join(part for part in (note, one_seed_note(df)) if part)
    benches = list(dict.fromkeys(df["benchmark"])) or ["(no sweep runs)"]
    fig, axes = plt.subplots(1, max(1, len(benches)), figsize=(4.2 * max(1, len(benches)), 3.6), squeeze=False)
    for ax, bench in zip(axes[0], benches):
        sub = df[df["benchmark"] == bench].sort_values("value")
        sns.lineplot(data=sub, x="value", y="success", hue="source", style="source", markers=True, dashes=False, ax=ax)
        _seed_error_bars(ax, sub, "black")
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
    one panel per (benchmark, source). ``df`` columns: value, success, synthesis_mode_usage, benchmark, source;
    optional success_std (success ± std over seeds as error bars) and seeds (one seed: no bar, said in the note)."""
    sns.set_theme(style="whitegrid")
    note = " ".join(part for part in (note, one_seed_note(df)) if part)
    panels = list(dict.fromkeys(zip(df["benchmark"], df["source"])))
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(4.4 * max(1, len(panels)), 3.6), squeeze=False)
    for ax, (bench, source) in zip(axes[0], panels):
        sub = df[(df["benchmark"] == bench) & (df["source"] == source)].sort_values("value")
        ax.plot(sub["value"], sub["success"], marker="o", color="tab:blue", label="success")
        _seed_error_bars(ax, sub, "tab:blue")
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
    footnote(fig, note, top=0.92)
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
            undefined = row[col] is None or pd.isna(row[col])
            text = "undefined" if undefined else f"{float(row[col]):.2f}"  # a defined 0 is written, not hidden
            y = 0.02 if undefined else float(row[col]) + 0.02
            ax.text(i + (-0.2 if j == 0 else 0.2), y, text, rotation=90, ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("flag rate among descendants")
    ax.set_xlabel("")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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


def _spread(values: list[float], gap: float, lo: float, hi: float) -> list[float]:
    """Label positions for ``values`` (in the order given), at least ``gap`` apart, inside
    [lo, hi], each as close to its value as the others allow: labels of nearby markers never overlap."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    pos = [0.0] * len(values)
    last = lo - gap
    for i in order:
        pos[i] = max(values[i], last + gap)
        last = pos[i]
    excess = max(0.0, last - hi)
    return [p - excess for p in pos]


def _wrap_label(label: str, width: int = 18) -> str:
    """``label`` broken at its own separators into lines of about ``width`` characters."""
    parts = re.split(r"(?<=[-_/])", label)
    lines, line = [], ""
    for part in parts:
        if line and len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    return "\n".join([*lines, line])


def dynamics(
    curves: pd.DataFrame,
    paper_final: pd.DataFrame,
    *,
    backbones: tuple[str, ...] | list[str],
    title: str,
    note: str = "",
    paper_iteration: int = 10,
) -> plt.Figure:
    """Figures 2 and 9: held-out success (a) and mean trajectory length (b) per iteration, two rows
    per backbone (never averaged across backbones), one column per benchmark. The paper prints its
    curves as images, so its Table 1 final values of each backbone are drawn as stars at iteration
    ``paper_iteration`` (K = 10), in the method's colour and labelled with the value. Methods are
    drawn a little apart on the x axis (at most ±0.12 iteration) with their own markers, so curves
    and stars that coincide stay visible."""
    from matplotlib.lines import Line2D

    sns.set_theme(style="whitegrid")
    cur = curves[curves["backbone"].isin(list(backbones))] if not curves.empty else curves
    pf = paper_final[paper_final["backbone"].isin(list(backbones))]
    benches = list(dict.fromkeys([*pf["benchmark"], *(cur["benchmark"] if not cur.empty else [])])) or ["(no runs)"]
    methods = list(dict.fromkeys([*pf["method"], *(cur["method"] if not cur.empty else [])]))
    colors = method_colors(methods)
    markers = {m: _MARKERS[i % len(_MARKERS)] for i, m in enumerate(methods)}
    shift = {m: (i - (len(methods) - 1) / 2) * (0.24 / max(1, len(methods) - 1)) for i, m in enumerate(methods)}
    rows = 2 * len(backbones)
    fig, axes = plt.subplots(rows, len(benches), figsize=(4.6 * len(benches), 2.9 * rows), squeeze=False)
    for b, bb in enumerate(backbones):
        for j, bench in enumerate(benches):
            ax_s, ax_l = axes[2 * b][j], axes[2 * b + 1][j]
            sub = cur[(cur["backbone"] == bb) & (cur["benchmark"] == bench)] if not cur.empty else cur
            for m in methods:
                line = sub[sub["method"] == m] if not sub.empty else sub
                if not line.empty:
                    x = line["iteration"] + shift[m]
                    for ax, col in ((ax_s, "success"), (ax_l, "steps")):
                        ax.plot(x, line[col], marker=markers[m], color=colors[m], markersize=5)
                        std = pd.to_numeric(line.get(f"{col}_std", pd.Series(index=line.index, dtype=float)))
                        if std.notna().any():  # ± std over seeds (§4.1, Metrics); none for a one-seed point
                            ax.errorbar(
                                x[std.notna()],
                                line[col][std.notna()],
                                yerr=std[std.notna()],
                                fmt="none",
                                ecolor=colors[m],
                                capsize=2,
                                linewidth=0.7,
                            )
            ref = pf[(pf["backbone"] == bb) & (pf["benchmark"] == bench)]
            if not ref.empty:
                vals = ref["success"].astype(float).tolist()
                ms = ref["method"].tolist()
                for m, v in zip(ms, vals):
                    ax_s.scatter(
                        [paper_iteration + shift[m]],
                        [v],
                        marker="*",
                        s=150,
                        color=colors[m],
                        edgecolor="black",
                        linewidth=0.5,
                        zorder=3,
                    )
                for m, v, y in zip(ms, vals, _spread(vals, 8.0, 2.0, 100.0)):
                    ax_s.annotate(
                        f"{v:.1f}",
                        (paper_iteration, v),
                        xytext=(paper_iteration + 0.45, y),
                        textcoords="data",
                        fontsize=6.5,
                        va="center",
                        color=colors[m],
                    )
            last = max([paper_iteration if not ref.empty else 1, *(sub["iteration"] if not sub.empty else [1])])
            for ax in (ax_s, ax_l):
                ax.set_xlim(0.5, last + (1.9 if not ref.empty else 0.6))
            ax_s.set_ylim(-3, 106)
            if sub.empty:
                ax_l.text(
                    0.5,
                    0.5,
                    "no run of this backbone",
                    transform=ax_l.transAxes,
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="dimgray",
                )
            ax_s.set_title(f"{bench}: (a) held-out success (%)", fontsize=9)
            ax_l.set_title(f"{bench}: (b) mean trajectory length", fontsize=9)
            if j == 0:  # a long backbone label (a user's run) is wrapped, so the two rows' labels never meet
                ax_s.set_ylabel(_wrap_label(bb), fontsize=9, fontweight="bold")
                ax_l.set_ylabel(_wrap_label(bb), fontsize=9, fontweight="bold")
            for ax in (ax_s, ax_l):
                ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # whole iterations only
            ax_l.set_xlabel("iteration", fontsize=8)
    handles = [Line2D([], [], color=colors[m], marker=markers[m], label=m) for m in methods]
    if not pf.empty:
        handles.append(
            Line2D(
                [],
                [],
                color="gray",
                marker="*",
                linestyle="",
                markersize=11,
                label=f"paper, iteration {paper_iteration}\n(Table 1)",
            )
        )
    fig.suptitle(title)
    bars = "Error bars: standard deviation over seeds." if not cur.empty else ""
    footnote(fig, note, " ".join(p for p in (bars, one_seed_note(cur, "point")) if p), top=0.97)
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig


def _interval_bars(ax: plt.Axes, df: pd.DataFrame, *, x: str, hue: str, y: str, low: str, high: str,
                   x_order: list[str], hue_order: list[str], colors: dict[str, str] | None = None) -> None:  # fmt: skip
    """Grouped bars with their bootstrap intervals; an undefined value is written as "n/a", not drawn as 0."""
    width = 0.8 / max(1, len(hue_order))
    for j, h in enumerate(hue_order):
        for i, xv in enumerate(x_order):
            cell = df[(df[x] == xv) & (df[hue] == h)]
            pos = i - 0.4 + width * (j + 0.5)
            if cell.empty or pd.isna(cell[y].iloc[0]):
                ax.text(pos, 0.01, "n/a", ha="center", va="bottom", fontsize=6, color="dimgray", rotation=90)
                continue
            v, lo, hi = (float(cell[c].iloc[0]) if not pd.isna(cell[c].iloc[0]) else None for c in (y, low, high))
            color = (colors or {}).get(h)
            ax.bar(pos, v, width=width * 0.95, color=color)
            if lo is not None and hi is not None:
                ax.errorbar(pos, v, yerr=[[v - lo], [hi - v]], color="black", capsize=2, linewidth=0.8)
            ax.text(pos, v + 0.01, f"{v:.2f}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(x_order)), [_wrap(t) for t in x_order], fontsize=8)
    from matplotlib.patches import Patch

    handles = [Patch(color=(colors or {}).get(h, f"C{j}"), label=h) for j, h in enumerate(hue_order)]
    ax.legend(handles=handles, fontsize=7, title=hue, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


#: short design names for crowded axes
DESIGN_LABELS = {
    "react": "ReAct",
    "trajectory_memory": "trajectory",
    "abstraction_memory": "abstraction",
    "joint_memory": "joint",
    "anti_persistence": "Anti-Persistence",
}


def _design(name: str) -> str:
    return DESIGN_LABELS.get(name, name)


CONDITION_COLORS = {"none": "tab:gray", "useful": "tab:blue", "toxic": "tab:red"}


def _nothing_yet(title: str, note: str, what: str) -> plt.Figure:
    """A figure saying which runs it is waiting for, where a study has not produced its data yet."""
    fig, ax = plt.subplots(figsize=(7.0, 2.4))
    ax.axis("off")
    ax.text(0.5, 0.5, f"no {what} recorded yet", ha="center", va="center", fontsize=10, color="dimgray")
    _titles(fig, ax, title, note)
    plt.close(fig)
    return fig


def immediate_effect(df: pd.DataFrame, *, paper: dict[str, float] | None, title: str, note: str = "") -> plt.Figure:
    """F.1's layout per design: held-out success under none / useful / toxic with bootstrap intervals;
    ``paper``: F.1's own three values (AppWorld, Qwen3-Coder-Next) as a group of their own."""
    sns.set_theme(style="whitegrid")
    if df.empty and not paper:
        return _nothing_yet(title, note, "held-out episode in a planted skill's scope")
    df = df.copy() if not df.empty else pd.DataFrame(columns=["benchmark", "design", "condition", "success"])
    df["group"] = df["benchmark"] + ": " + df["design"].map(_design)
    if paper:
        rows = [{"group": "paper F.1: AppWorld, Qwen3-Coder-Next", "condition": c, "success": v / 100.0,
                 "success_low": None, "success_high": None} for c, v in paper.items()]  # fmt: skip
        df = pd.concat([df, pd.DataFrame(rows)], ignore_index=True)
    order = list(dict.fromkeys(df["group"]))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(order)), 4.4))
    _interval_bars(ax, df, x="group", hue="condition", y="success", low="success_low", high="success_high",
                   x_order=order, hue_order=[c for c in CONDITION_COLORS if c in set(df["condition"])],
                   colors=CONDITION_COLORS)  # fmt: skip
    ax.set_ylabel("held-out success (last planted iteration)")
    ax.set_ylim(0, 1.12)
    _titles(fig, ax, title, note)
    plt.close(fig)
    return fig


def reproduction_alpha(df: pd.DataFrame, *, title: str, note: str = "") -> plt.Figure:
    """alpha (the fraction of synthesized candidates carrying a toxic signature) with and without exposure,
    per design and condition, with bootstrap intervals; "n/a" where a group has no candidate."""
    sns.set_theme(style="whitegrid")
    if df.empty:
        return _nothing_yet(title, note, "synthesized candidate")
    df = df.copy()
    df["group"] = df["benchmark"] + ": " + df["design"].map(_design) + " / " + df["condition"]
    order = list(dict.fromkeys(df["group"]))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.25 * len(order)), 4.6))
    hues = list(dict.fromkeys(df["exposure"]))
    _interval_bars(ax, df, x="group", hue="exposure", y="alpha", low="low", high="high", x_order=order,
                   hue_order=hues, colors=dict(zip(hues, ("tab:red", "tab:gray"))))  # fmt: skip
    ax.set_ylabel("alpha: flagged candidates / candidates")
    ax.set_ylim(0, 1.12)
    _titles(fig, ax, title, note)
    plt.close(fig)
    return fig


def toxic_share(df: pd.DataFrame, *, deleted_after: int, title: str, note: str = "") -> plt.Figure:
    """The toxic share of stored abstractions per iteration (planted skills left out), one line per
    benchmark, design and condition, with its interval band; a dashed line where the plant was deleted."""
    sns.set_theme(style="whitegrid")
    if df.empty:
        return _nothing_yet(title, note, "stored abstraction")
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for key, g in df.groupby(["benchmark", "design", "condition"], sort=False):
        g = g.sort_values("iteration")
        color = CONDITION_COLORS.get(key[2])
        style = "-" if key[1] == "abstraction_memory" else "--"
        label = f"{key[0]} / {_design(key[1])} / {key[2]}"
        ax.plot(g["iteration"], g["toxic_share"], style, marker="o", color=color, label=label)
        if g["toxic_share_low"].notna().any():
            ax.fill_between(g["iteration"], g["toxic_share_low"], g["toxic_share_high"], color=color, alpha=0.12)
    ax.axvline(deleted_after + 0.5, color="black", linestyle=":", linewidth=1)
    ax.text(deleted_after + 0.55, 1.02, "planted skills deleted", fontsize=7, va="bottom")
    ax.text(0.01, 0.97, "Anti-Persistence stores no abstraction: its share is 0 by construction",
            transform=ax.transAxes, fontsize=6.5, color="dimgray", va="top")  # fmt: skip
    ax.set_xlabel("iteration")
    ax.set_ylabel("toxic share of stored abstractions")
    ax.set_ylim(0, 1.1)
    if not df.empty:
        ax.set_xticks(sorted(set(df["iteration"])))
    ax.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _titles(fig, ax, title, note)
    plt.close(fig)
    return fig


def figure4_bars(df: pd.DataFrame, *, title: str, note: str = "") -> plt.Figure:
    """Figure 4: final held-out success of abstraction memory, AutoRefine and Anti-Persistence per setting (bars:
    mean over seeds, error bars: std), one panel per source (``paper_text.figure4_frame``: the paper's six settings,
    then this run's), so no bar of this run stands among the paper's. Every bar carries its value."""
    sns.set_theme(style="whitegrid")
    sources = list(dict.fromkeys(df["source"])) or ["paper"]
    methods = [m for m in ("abstraction_memory", "autorefine", "anti_persistence") if m in set(df["method"])]
    colors = method_colors(methods)
    width = 0.8 / max(1, len(methods))
    fig, axes = plt.subplots(len(sources), 1, figsize=(9.0, 3.4 * len(sources)), squeeze=False)
    for ax, source in zip(axes[:, 0], sources):
        sub = df[df["source"] == source]
        settings = list(dict.fromkeys(zip(sub["backbone"], sub["benchmark"])))
        for j, m in enumerate(methods):
            for i, (bb, bench) in enumerate(settings):
                cell = sub[(sub["method"] == m) & (sub["backbone"] == bb) & (sub["benchmark"] == bench)]
                pos = i - 0.4 + width * (j + 0.5)
                if cell.empty:
                    ax.text(pos, 1, "n/a", ha="center", va="bottom", fontsize=6, color="dimgray", rotation=90)
                    continue
                v, s = float(cell["mean"].iloc[0]), cell["std"].iloc[0]
                ax.bar(pos, v, width=width * 0.95, color=colors[m], label=m if i == 0 else None)
                if pd.notna(s):
                    ax.errorbar(pos, v, yerr=float(s), color="black", capsize=2, linewidth=0.8)
                top = v + (float(s) if pd.notna(s) else 0.0)
                ax.text(pos, top + 1, f"{v:.1f}", ha="center", va="bottom", fontsize=6)
        ax.set_xticks(range(len(settings)), [f"{b}\n{k}" for b, k in settings], fontsize=7)
        ax.set_ylim(0, 112)
        ax.set_ylabel("held-out success (%)")
        ax.set_title(source, fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title)
    footnote(fig, note, "Bars: mean over seeds; error bars: standard deviation over seeds.", top=0.95)
    plt.close(fig)  # the caller shows it (a cell ends with `fig`): no second inline copy
    return fig
