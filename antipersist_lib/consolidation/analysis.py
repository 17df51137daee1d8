"""Consolidation-study analyses: the tables notebooks 11 and 12 show, computed from a study's results.

``seed_means`` averages the repeats of each evaluated bank; ``utility_curves`` (Fig. 1 shape),
``regime_bars`` (Fig. 3 shape) and ``homogeneity_curves`` (Fig. 4 shape) read utility against updates
and construction regimes; ``trajectory_log_table`` / ``paper_table_cells`` / ``row_marks`` /
``table_display`` / ``tables_beside_paper`` build Tables 2-3 with the paper's "(--)" and best-in-row
marks, and ``paper_reference`` the values the paper states for its figures. Figures are in
``consolidation.figures``; the frames come from ``consolidation.study_folder.results``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from antipersist_lib.analysis import faulty_paper
from antipersist_lib.analysis.paper import METHOD_LABELS
from antipersist_lib.consolidation.context_estimate import FS_PATTERN
from antipersist_lib.consolidation.profile import (
    METHOD_REGIME,
    NO_MEMORY,
    TRAJECTORY_LOG_FIXED,
)
from antipersist_lib.consolidation.study_folder import CONDITION_COLUMNS

#: what the paper says about its utility-vs-updates figures (their values are printed as images only)
FIGURE1_STATEMENT = (
    "Paper (§4.1, Fig. 1): starting from an empty store, abstracted-memory utility rises early, then falls, "
    "sometimes below the no-memory baseline. ScienceWorld (CLIN, batches of 4): the score peaks near step 20 and "
    "declines through step 100 for every memory size. WebShop (AWM): 0.64 at 8 examples, 0.20 at 128, while "
    "no-memory sits at 0.20."
)
FIGURE3_STATEMENT = (
    "Paper (§4.1, Fig. 3, ALFWorld, GT expert trajectories): holding the update strategy fixed, consolidating each "
    "task type separately (Static-Group) outperforms consolidating across types jointly (Static-All, 'Ungrp.'); "
    "holding the pool fixed, streamed incremental updates (Stream) underperform a single whole-pool pass."
)
FIGURE4_STATEMENT = (
    "Paper (§4.1, Fig. 4, ALFWorld): a Static-Group memory (GPT-5.4) updated further in batches (GPT-5-nano) loses "
    "utility under all three solvers, sometimes drastically between consecutive steps; batches that mix task types "
    "(heterogeneous) produce worse memory than batches of one type (homogeneous)."
)
FIGURE16_STATEMENT = (
    "Paper (App. G.1, Fig. 16, ALFWorld, 200 stages of 6 at capacity 50, read every 20 stages): an early peak "
    f"({faulty_paper.stated('g1_peak_4b_9b').value:g}/48 for the 4B and 9B rollouts at stage 20), then a general "
    f"decline to stage 200 (27B: {faulty_paper.stated('g1_stage200_27b').value:g}/48); no memory: "
    f"{faulty_paper.stated('g1_no_memory_4b').value:g}/48 (4B), {faulty_paper.stated('g1_no_memory_27b').value:g}/48 "
    "(27B). The memory stays at 38-50 items: the erosion is in content, not size. App. G.2 / Table 11: one "
    "single-type consolidation step (50 items to 1) costs every rollout 6-13 wins."
)
FIGURE8C_STATEMENT = (
    "Paper (§6.2, Fig. 8(c), App. F.1): lessons consolidated on Pick&Place, over-generalized by repeated "
    "abstraction, mislead the agent on the related Pick-Clean-Place task rather than aid it (focal memory "
    "snapshotted at stages 1, 20, 50 and 100, each followed by one more consolidation of 32 probe-type records, cap 50)."
)
FIGURE10_STATEMENT = (
    "Paper (§6.2, Fig. 10; App. K.2, Fig. 18; the "
    f"{faulty_paper.stated('switch_tasks').value:g}-task ScienceWorld switch sequence): Cumulative ends "
    f"+{faulty_paper.stated('cumulative_behind_fresh').value:g} points behind Fresh, and accumulates over-generalized "
    f"entries at ~{faulty_paper.stated('overgeneralized_ratio').value:g}x and garbage entries at "
    f"~{faulty_paper.stated('garbage_ratio').value:g}x Fresh's rate, both gaps widening over the sequence."
)
SURGERY_STATEMENT = (
    "Paper (App. I.1, Tables 12-13, WebShop, the epoch-1 AWM memory W1-W8, n=50 episodes per cell, step cap 30): "
    "removing W8 raises wins, mean reward and lowers mean steps for both rollouts (gpt-5.4-mini: "
    + " to ".join(f"{r.wins}" for r in faulty_paper.table12() if r.rollout == "gpt-5.4-mini")
    + " of 50); with "
    "W8 in context click[Next >] dominates the action stream at the expense of product pages and click[Buy Now] "
    "(page-turn ratio 2.3x full vs minus W8)."
)
TABLE_STATEMENT = (
    "Paper (§4.2, Tables 2-3): an episodic-only store (summarized trajectory logs in context, no abstraction) is "
    "competitive with the consolidators; a red (--) marks a consolidator beaten by at least one trajectory-log "
    "baseline in the same row."
)


def _label(row: Mapping[str, Any]) -> str:
    if row["builder"] == NO_MEMORY:
        return "no memory"
    regime = row["regime"]
    if regime == METHOD_REGIME:
        return f"kit method ({row['condition']})"
    if regime == "static_all":
        base = "Static-All"
    elif regime == "static_group":
        base = "Static-Group"
    else:
        parts = [f"b={int(row['batch_size'])}" if not pd.isna(row["batch_size"]) else "b=?"]
        parts.append("hom." if bool(row["homogeneous"]) else "het.")
        if not pd.isna(row["capacity"]):
            parts.append(f"cap {int(row['capacity'])}")
        base = f"Stream ({', '.join(parts)})"
    if regime != "stream" and not pd.isna(row["capacity"]):
        base += f" (cap {int(row['capacity'])})"
    initial = row.get("initial")
    return base + (f" from {initial}" if isinstance(initial, str) and initial else "")


def seed_means(df: pd.DataFrame) -> pd.DataFrame:
    """Per evaluated bank (condition x step): success and score in %, mean and std over the seeds (repeats)."""
    cols = [*CONDITION_COLUMNS, "step", "updates", "examples_seen"]
    if df.empty:
        return pd.DataFrame(
            columns=[*cols, "regime_label", "success", "success_std", "score", "n_entries", "update_errors", "seeds"]
        )
    keyed = df.copy()
    for c in cols:  # groupby drops NaN keys: compare as objects instead
        keyed[c] = keyed[c].astype(object).where(keyed[c].notna(), None)
    g = keyed.groupby(cols, dropna=False, sort=False)
    out = g.agg(
        success=("success", "mean"),
        success_std=("success", "std"),
        score=("score", "mean"),
        n_entries=("n_entries", "mean"),
        update_errors=("update_errors", "max"),
        seeds=("seed", "nunique"),
    ).reset_index()
    out["success"] = 100 * out["success"]
    out["success_std"] = 100 * out["success_std"]
    out["score"] = 100 * out["score"]
    out.insert(len(CONDITION_COLUMNS), "regime_label", [_label(r) for _, r in out.iterrows()])
    return out


def _no_memory(means: pd.DataFrame) -> pd.DataFrame:
    return means[means["builder"] == NO_MEMORY]


def utility_curves(df: pd.DataFrame, *, regimes: Sequence[str] = ("stream",)) -> pd.DataFrame:
    """Utility vs number of updates (Fig. 1 shape): one line per (builder, condition) of the given regimes,
    success (%) per evaluated step, with step 0 (the empty bank) taken from the no-memory row of the same
    backbone and benchmark when the condition starts empty. Column ``point``: "evaluated" or "no memory (step 0)"."""
    means = seed_means(df)
    cols = [
        "benchmark",
        "backbone",
        "builder",
        "condition",
        "regime_label",
        "homogeneous",
        "batch_size",
        "initial",
        "step",
        "updates",
        "examples_seen",
        "success",
        "success_std",
        "n_entries",
        "update_errors",
        "seeds",
        "point",
    ]
    if means.empty:
        return pd.DataFrame(columns=cols)
    cur = means[means["regime"].isin(list(regimes))].assign(point="evaluated")
    extra = []
    for (bench, bb, _builder, _cond), sub in cur.groupby(["benchmark", "backbone", "builder", "condition"], sort=False):
        if isinstance(sub["initial"].iloc[0], str):
            continue
        nm = _no_memory(means)
        nm = nm[(nm["benchmark"] == bench) & (nm["backbone"] == bb)]
        if nm.empty:
            continue
        row = sub.iloc[0].copy()
        for k in ("step", "updates", "examples_seen"):
            row[k] = 0
        row["success"], row["success_std"] = nm["success"].iloc[0], nm["success_std"].iloc[0]
        row["n_entries"], row["update_errors"], row["seeds"] = 0, 0, nm["seeds"].iloc[0]
        row["point"] = "no memory (step 0)"
        extra.append(row)
    out = pd.concat([pd.DataFrame(extra), cur], ignore_index=True) if extra else cur
    out = out.sort_values(["benchmark", "backbone", "builder", "condition", "step"], kind="stable")
    return out[cols].reset_index(drop=True)


def regime_bars(df: pd.DataFrame) -> pd.DataFrame:
    """Static-All vs Static-Group vs Stream (Fig. 3 shape): each (builder, condition) at its last evaluated step,
    success (%) mean and std over seeds, plus the no-memory level of the same backbone (``no_memory``)."""
    means = seed_means(df)
    cols = [
        "benchmark",
        "backbone",
        "builder",
        "condition",
        "regime",
        "regime_label",
        "step",
        "examples_seen",
        "n_entries",
        "success",
        "success_std",
        "seeds",
        "no_memory",
    ]
    if means.empty:
        return pd.DataFrame(columns=cols)
    built = means[(means["builder"] != NO_MEMORY) & (means["regime"] != METHOD_REGIME)]
    last = built.loc[built.groupby(["benchmark", "backbone", "builder", "condition"], sort=False)["step"].idxmax()]
    nm = _no_memory(means).set_index(["benchmark", "backbone"])["success"]
    last = last.assign(no_memory=[nm.get((b, bb), float("nan")) for b, bb in zip(last["benchmark"], last["backbone"])])
    order = {"static_all": 0, "static_group": 1, "stream": 2}
    last = last.assign(_o=last["regime"].map(order)).sort_values(
        ["benchmark", "backbone", "builder", "_o", "condition"]
    )
    return last[cols].reset_index(drop=True)


def homogeneity_curves(df: pd.DataFrame) -> pd.DataFrame:
    """Homogeneous vs heterogeneous Stream batches (Fig. 4 shape): the stream curves with a ``batches`` column."""
    curves = utility_curves(df)
    return curves.assign(
        batches=["homogeneous" if h is True else "heterogeneous" for h in curves["homogeneous"].astype(object)]
    )


def paper_reference() -> pd.DataFrame:
    """The utility-vs-updates values the paper states (Fig. 1(b), WebShop AWM; x100), from ``faulty_paper``."""
    rows = []
    for key, examples, line in (
        ("webshop_awm_8_examples", 8, "AWM"),
        ("webshop_awm_128_examples", 128, "AWM"),
        ("webshop_no_memory", 8, "no memory"),
        ("webshop_no_memory", 128, "no memory"),
    ):
        s = faulty_paper.stated(key)
        rows.append(
            {
                "figure": "Fig. 1(b)",
                "benchmark": "webshop",
                "line": line,
                "examples_seen": examples,
                "score": 100 * s.value,
                "source": s.source,
                "text": s.text,
            }
        )
    return pd.DataFrame(rows)


# -- Tables 2 and 3 ----------------------------------------------------------------------------------

CONSOLIDATORS = ("ace_gt", "ace", "awm", "dc", "clin")


def is_trajectory_log(column: str) -> bool:
    return column in TRAJECTORY_LOG_FIXED or FS_PATTERN.fullmatch(column) is not None


def column_group(column: str) -> str:
    """Which kind of row a table column is: no memory, trajectory logs, consolidators or kit methods."""
    if column == "no_mem":
        return "no memory"
    if is_trajectory_log(column):
        return "trajectory logs"
    return "consolidators" if column in CONSOLIDATORS else "kit methods"


def column_label(column: str) -> str:
    if column in faulty_paper.COLUMN_LABELS:
        return faulty_paper.COLUMN_LABELS[column]
    if column in METHOD_LABELS:
        return METHOD_LABELS[column]
    m = FS_PATTERN.fullmatch(column)
    return f"FS={m.group(1)}" if m else column.upper()


def column_order(columns: Sequence[str]) -> list[str]:
    """The paper's column order (NoMem, All, FS=N descending, Incr. Keep, One-Pass Keep, ACE_GT, ACE, AWM, DC),
    with columns the paper lacks (other FS sizes, CLIN) in their group."""

    def key(c: str) -> tuple[int, float]:
        if c == "no_mem":
            return (0, 0)
        if c == "all":
            return (1, 0)
        m = FS_PATTERN.fullmatch(c)
        if m:
            return (2, -int(m.group(1)))
        if c == "incr_keep":
            return (3, 0)
        if c == "one_pass_keep":
            return (4, 0)
        if c in CONSOLIDATORS:
            return (5, CONSOLIDATORS.index(c))
        return (6, 0)

    return sorted(dict.fromkeys(columns), key=key)


def row_marks(
    values: Mapping[str, float | None], *, decimals: int = 0, excluded: Sequence[str] = ()
) -> tuple[dict[str, bool], set[str]]:
    """The paper's marks for one table row: ``beaten[c]`` for each consolidator column (a value, rounded to
    ``decimals``, below at least one trajectory-log column's) and the set of best columns (ties all best).
    ``excluded`` columns (e.g. Table 3's footnoted cells, evaluated by another model) get neither mark."""
    rounded = {c: round(float(v), decimals) for c, v in values.items() if v is not None and not pd.isna(v)}
    logs = [v for c, v in rounded.items() if is_trajectory_log(c) and c not in excluded]
    top_log = max(logs) if logs else None
    beaten = {
        c: bool(top_log is not None and v < top_log)
        for c, v in rounded.items()
        if c in CONSOLIDATORS and c not in excluded
    }
    eligible = {c: v for c, v in rounded.items() if c not in excluded}
    best = {c for c, v in eligible.items() if v == max(eligible.values())} if eligible else set()
    return beaten, best


def _choose_condition(sub: pd.DataFrame, column: str, preference: Sequence[str]) -> pd.DataFrame:
    """Among the banks filling ``column`` in one row, those of the condition the table uses, at its last step."""
    if column == "no_mem":
        return sub
    order = ["static_all"] if is_trajectory_log(column) and column not in ("incr_keep",) else list(preference)
    cands = sub.assign(
        _r=[order.index(r) if r in order else len(order) for r in sub["regime"]],
        _i=[isinstance(i, str) for i in sub["initial"].astype(object)],
    ).sort_values(["_r", "_i", "condition"], kind="stable")
    cond = cands["condition"].iloc[0]
    chosen = sub[sub["condition"] == cond]
    return chosen[chosen["step"] == chosen["step"].max()]


def trajectory_log_table(
    df: pd.DataFrame,
    *,
    metric: str = "success",
    decimals: int = 0,
    regime_preference: Sequence[str] = ("stream", "static_all", "static_group"),
) -> pd.DataFrame:
    """This study's Tables 2-3 cells: one row per (benchmark, backbone, column) with the value (mean over seeds,
    x100), the condition and step it was taken from, and the "(--)" (``beaten``) and best-in-row marks."""
    cols = ["benchmark", "backbone", "column", "label", "value", "seeds", "condition", "regime_label", "step"]
    if df.empty:
        return pd.DataFrame(columns=[*cols, "beaten", "best", "source"])
    means = seed_means(df)
    means = means[means["column"].notna()]
    value_col = {"success": "success", "score": "score"}[metric]
    out = []
    for (bench, bb), row in means.groupby(["benchmark", "backbone"], sort=False):
        cells = []
        for column in column_order(list(row["column"])):
            chosen = _choose_condition(row[row["column"] == column], column, regime_preference).iloc[0]
            cells.append(
                {
                    "benchmark": bench,
                    "backbone": bb,
                    "column": column,
                    "label": column_label(column),
                    "value": float(chosen[value_col]) if not pd.isna(chosen[value_col]) else None,
                    "seeds": int(chosen["seeds"]),
                    "condition": chosen["condition"],
                    "regime_label": chosen["regime_label"],
                    "step": int(chosen["step"]),
                }
            )
        beaten, best = row_marks({c["column"]: c["value"] for c in cells}, decimals=decimals)
        for c in cells:
            c.update(beaten=beaten.get(c["column"], False), best=c["column"] in best, source="this run")
        out.extend(cells)
    return pd.DataFrame(out, columns=[*cols, "beaten", "best", "source"])


def paper_table_cells(source: str | None = None, benchmark: str | None = None, *, decimals: int = 0) -> pd.DataFrame:
    """Tables 2-3 as printed (``faulty_paper``), one row per cell, with the paper's marks (``beaten``, ``best``)
    and the marks this module's rule computes from the printed values (``beaten_computed``, ``best_computed``)."""
    records = faulty_paper.table2() + faulty_paper.table3()
    out = []
    for r in records:
        if (source is not None and r.source != source) or (benchmark is not None and r.benchmark != benchmark):
            continue
        out.append(
            {
                "source": r.source,
                "benchmark": r.benchmark,
                "metric": r.metric,
                "backbone": r.backbone,
                "column": r.column,
                "label": r.label,
                "value": r.value,
                "beaten": r.beaten,
                "best": r.bold,
                "note": r.note,
            }
        )
    cells = pd.DataFrame(out)
    if cells.empty:
        return cells
    computed_beaten, computed_best = {}, {}
    for (src, bench, bb), row in cells.groupby(["source", "benchmark", "backbone"], sort=False):
        excluded = [c for c, n in zip(row["column"], row["note"]) if n]
        beaten, best = row_marks(dict(zip(row["column"], row["value"])), decimals=decimals, excluded=excluded)
        for c in row["column"]:
            computed_beaten[(src, bench, bb, c)] = beaten.get(c, False)
            computed_best[(src, bench, bb, c)] = c in best
    keys = list(zip(cells["source"], cells["benchmark"], cells["backbone"], cells["column"]))
    cells["beaten_computed"] = [computed_beaten[k] for k in keys]
    cells["best_computed"] = [computed_best[k] for k in keys]
    return cells


def _cell_text(value: Any, beaten: bool, best: bool, note: str = "", decimals: int = 0) -> str:
    if value is None or pd.isna(value):
        return "—"
    text = f"{float(value):.{decimals}f}"
    if best:
        text = f"**{text}**"
    if note:
        text += " (*)"
    if beaten:
        text += " (--)"
    return text


def table_display(cells: pd.DataFrame, *, decimals: int = 0) -> pd.DataFrame:
    """Cells (``trajectory_log_table`` or ``paper_table_cells``) as the paper prints them: rows (source,
    benchmark, backbone), one column per method label; "**v**" best in row, "(--)" beaten by a trajectory log,
    "(*)" the paper's footnote (Table 3: evaluated by GPT-5-Mini), "—" not measured."""
    if cells.empty:
        return pd.DataFrame()
    cells = cells.copy()
    if "source" not in cells:
        cells["source"] = "this run"
    notes = cells["note"] if "note" in cells else [""] * len(cells)
    cells["text"] = [
        _cell_text(v, bool(b), bool(s), n if isinstance(n, str) else "", decimals)
        for v, b, s, n in zip(cells["value"], cells["beaten"], cells["best"], notes)
    ]
    order = [column_label(c) for c in column_order(list(cells["column"]))]
    wide = cells.pivot_table(
        index=["source", "benchmark", "backbone"], columns="label", values="text", aggfunc="first", sort=False
    )
    return wide.reindex(columns=order).fillna("")


def tables_beside_paper(cells: pd.DataFrame, *, decimals: int = 0) -> pd.DataFrame:
    """This study's rows under the paper's block of the same benchmark (Table 2: AppWorld, ALFWorld; Table 3:
    WebShop), in the paper's layout: rows (source, benchmark, backbone), "source" being "Table 2", "Table 3" or
    "this run". Benchmarks the paper does not report (ScienceWorld) show this study's rows alone."""
    return table_display(beside_paper_cells(cells, decimals=decimals), decimals=decimals)


def beside_paper_cells(cells: pd.DataFrame, *, decimals: int = 0) -> pd.DataFrame:
    """The cells behind ``tables_beside_paper``: the paper's cells of each benchmark of ``cells``, then ``cells``."""
    parts = []
    for bench in dict.fromkeys(cells["benchmark"]) if not cells.empty else []:
        parts.append(paper_table_cells(benchmark=bench, decimals=decimals))
        parts.append(cells[cells["benchmark"] == bench])
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def success_by_type(df: pd.DataFrame, out_dirs: Any) -> pd.DataFrame:
    """Held-out success per task type of every evaluated row (Fig. 8(c): a memory consolidated on one ALFWorld
    type, evaluated on that type and on a related one): one row per (builder, condition, step, seed, task_type)
    with ``n`` episodes and ``success`` (the fraction solved), read from each row's run directory.

    ``out_dirs``: the study folder(s) the rows' ``run_dir`` paths are relative to (``study_folder.results`` input)."""
    from pathlib import Path

    from antipersist_lib.consolidation.surgery import episode_rows

    cols = ["builder", "condition", "step", "seed", "task_type", "n", "success"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    roots = [Path(d) for d in ([out_dirs] if isinstance(out_dirs, (str, Path)) else list(out_dirs or []))]
    out = []
    for r in df.itertuples():
        run_dir = next((root / r.run_dir for root in roots if (root / r.run_dir).exists()), None)
        if run_dir is None:
            continue
        counts: dict[str, list[int]] = {}
        for e in episode_rows(run_dir):  # the last iteration's held-out episodes
            counts.setdefault(e["task"]["task_type"], []).append(int(bool(e["outcome"].get("success"))))
        for task_type, wins in sorted(counts.items()):
            out.append([r.builder, r.condition, int(r.step), int(r.seed), task_type, len(wins), sum(wins) / len(wins)])
    return pd.DataFrame(out, columns=cols)


def probe_interference(by_type: pd.DataFrame, profile: Any) -> pd.DataFrame:
    """Fig. 8(c)'s table: for each snapshot stage of the focal-type memory, success (mean over seeds, %) on
    the focal and the probe type, before and after one more consolidation on the probe type, beside no memory.

    The focal regime is the one with ``types`` that others continue from (``initial`` + ``initial_step``);
    each continuing regime is the "one additional consolidation iteration" from that stage (App. F.1)."""
    cols = ["stage", "memory", "task_type", "success_pct", "no_memory_pct"]
    follow = [r for r in profile.regimes if r.initial is not None and r.initial_step is not None]
    if by_type.empty or not follow:
        return pd.DataFrame(columns=cols)
    mean = by_type.groupby(["builder", "condition", "step", "task_type"], as_index=False)["success"].mean()
    none = mean[mean["condition"] == "no_memory"].set_index("task_type")["success"]
    out = []
    for r in follow:
        base = mean[(mean["condition"] == r.initial) & (mean["step"] == r.initial_step)]
        after = mean[mean["condition"] == r.name]
        after = after[after["step"] == after["step"].max()] if not after.empty else after
        for label, part in ((f"{r.initial} (focal only)", base), (f"+1 consolidation ({r.name})", after)):
            for t in part.itertuples():
                out.append(
                    [
                        r.initial_step,
                        label,
                        t.task_type,
                        100 * t.success,
                        100 * none[t.task_type] if t.task_type in none else None,
                    ]
                )
    return pd.DataFrame(out, columns=cols).sort_values(["stage", "task_type", "memory"]).reset_index(drop=True)


def pool_composition(found: Any) -> pd.DataFrame:
    """The trajectory pool each study consolidated (the kit's counterpart of the paper's data tables 7-10):
    one row per (study, task type) with the records, successes and where they came from (expert replays or
    earlier runs), read from each study folder's pool.jsonl."""
    from pathlib import Path

    from antipersist_lib.consolidation.pool import load_pool

    cols = ["study", "benchmark", "task_type", "records", "successes", "sources"]
    out = []
    for d in [] if not found else ([found] if isinstance(found, (str, Path)) else list(found)):
        path = Path(d) / "pool.jsonl"
        if not path.exists():
            continue
        pool = load_pool(path)
        by_type: dict[str, list[Any]] = {}
        for r in pool:
            by_type.setdefault(r.task_type, []).append(r)
        for task_type, records in by_type.items():
            out.append(
                [
                    Path(d).name,
                    records[0].task.benchmark,
                    task_type,
                    len(records),
                    sum(1 for r in records if r.outcome.success),
                    ", ".join(sorted({r.source for r in records})),
                ]
            )
    return pd.DataFrame(out, columns=cols)
