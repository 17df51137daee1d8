"""The notebooks' tables: this run beside the paper (Tables 1, 2 and 6; Figures 2-5, 7-12 as tables).

Each function builds one table a notebook writes to CSV or plots, so the notebook itself only configures
(which runs, which ablation map), calls and shows. The run rows they start from are ``results``'s
(``load_iterations``, ``table1``, ``variants``); the paper's numbers are ``paper``'s.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from antipersist_lib.analysis import paper, provenance
from antipersist_lib.analysis.results import main_runs, paper_frame, paper_order, rank_in_order, table1, variants
from antipersist_lib.methods import TABLE1_METHODS
from antipersist_lib.records import MODES


def ordered_pivot(df: pd.DataFrame, *, index: Any, columns: Any, values: str) -> pd.DataFrame:
    """``df.pivot`` with rows and columns in the order they first appear in ``df``: pandas sorts
    them by name, which would put Gemma before Llama and "fixed: none" before "bandit"."""
    t = df.pivot(index=index, columns=columns, values=values)

    def seen(keys: Any) -> list[Any]:
        if isinstance(keys, list):
            return list(dict.fromkeys(df[keys].itertuples(index=False, name=None)))
        return list(dict.fromkeys(df[keys]))

    return t.loc[seen(index), seen(columns)]


def seed_note(seeds: Any, asked: Any = None) -> str:
    """The note a printed cell carries about its seeds: " (1 seed)" for a single seed (its spread is
    unknown, not zero), " (2 seeds)" for fewer seeds than the profile asked for (``asked``), "" otherwise
    (and for the paper's cells, which carry no seed count)."""
    if seeds is None or pd.isna(seeds):
        return ""
    n = int(seeds)
    if n == 1:
        return " (1 seed)"
    if asked is not None and not pd.isna(asked) and n < int(asked):
        return f" ({n} seeds)"
    return ""


def mean_std_table(cells: pd.DataFrame, *, index: Any, columns: Any, decimals: int = 1) -> pd.DataFrame:
    """ "mean ± std" cells pivoted like the printed table (rows and columns in the order they first
    appear in ``cells``, never sorted by name), so the CSV reads as the paper does.

    Where ``cells`` has a ``seeds`` column (this run's cells), a cell of one seed reads "41.2 (1 seed)"
    (no spread, rather than none shown) and a cell of fewer seeds than ``seeds_asked`` (a column;
    default: the most seeds of any cell) reads "41.2 ± 3.0 (2 seeds)" (``seed_note``)."""
    if cells.empty:  # no main run: nothing to pivot (an empty float column would not format as text)
        return pd.DataFrame()
    fmt = f"{{:.{decimals}f}}"
    std = cells["std"].astype(float)
    text = cells["mean"].map(fmt.format) + (" ± " + std.map(fmt.format)).where(std.notna(), "")
    if "seeds" in cells.columns:
        seeds = pd.to_numeric(cells["seeds"], errors="coerce")
        asked = cells["seeds_asked"] if "seeds_asked" in cells.columns else pd.Series(seeds.max(), index=cells.index)
        text = text + [seed_note(n, a) for n, a in zip(seeds, asked)]
    return ordered_pivot(cells.assign(cell=text), index=index, columns=columns, values="cell")


def paper_table1() -> pd.DataFrame:
    """Table 1 as printed: methods in the paper's row order, (backbone, benchmark) columns."""
    return mean_std_table(paper_frame(paper.table1()), index="method", columns=["backbone", "benchmark"])


def paper_table2() -> pd.DataFrame:
    """Table 2 as printed: one row per (backbone, benchmark), discard beside persist."""
    return mean_std_table(paper_frame(paper.table2()), index=["backbone", "benchmark"], columns="variant")[
        ["discard", "persist"]
    ]


def paper_table6() -> pd.DataFrame:
    """Table 6 as printed: mean LLM calls per held-out task, methods in the paper's order x (backbone, benchmark)."""
    cells = paper_frame(paper.table6())
    t = cells.pivot(index="method", columns=["backbone", "benchmark"], values="mean")
    return t.loc[list(dict.fromkeys(cells["method"])), list(paper.SETTINGS)]


def beside_paper_cells(mine: pd.DataFrame, reference: list[Any], *, decimals: int = 1) -> pd.DataFrame:
    """A printed table of this run's cells (``table1(runs)`` or ``table1(runs, "calls")``) with the
    paper's own cell of the same (method, backbone, benchmark) beside each one whose backbone is
    one of the paper's: columns (backbone, benchmark, source), source "this run" then "paper".
    A backbone the paper did not use gets this run's cells only: no other backbone's numbers (and
    no average over them) stand in for it. Rows: this run's methods in the paper's order. This run's
    cells name their seed count where it is one or fewer than asked (``mean_std_table``)."""
    if mine.empty:
        return pd.DataFrame()
    ref = paper_frame(reference)
    keep = ["method", "backbone", "benchmark", "source", "mean", "std"]
    keep += [c for c in ("seeds", "seeds_asked") if c in mine.columns]  # the paper's cells carry none
    ours = mine.assign(source="this run")[keep]
    theirs = ref.merge(mine[["method", "backbone", "benchmark"]], on=["method", "backbone", "benchmark"])
    both = pd.concat([ours, theirs.assign(source="paper").reindex(columns=ours.columns)], ignore_index=True)
    order = pd.DataFrame(
        {
            "bb": rank_in_order(both["backbone"].tolist(), paper.BACKBONES),
            "bench": rank_in_order(both["benchmark"].tolist(), paper.BENCHMARKS),
            "src": (both["source"] == "paper").astype(int),
        }
    )
    both = both.loc[order.sort_values(["bb", "bench", "src"], kind="stable").index]
    rows = [m for m in TABLE1_METHODS if m in set(mine["method"])]
    t = mean_std_table(both, index="method", columns=["backbone", "benchmark", "source"], decimals=decimals)
    return t.reindex(rows)


def table1_beside_paper(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 1 of this run as printed, each cell beside the paper's cell for the same backbone."""
    return beside_paper_cells(table1(runs), paper.table1())


def table6(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 6 of this run: mean ± std over seeds of the LLM calls per held-out task after the final
    iteration, per (method, backbone, benchmark) of the main runs, in the paper's order."""
    return table1(runs, value="calls")


def table6_beside_paper(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 6 of this run as printed (two decimals), each cell beside the paper's for the same
    backbone; the paper reports the four memory configurations only."""
    return beside_paper_cells(table6(runs), paper.table6(), decimals=2)


#: Figure 3 and Table 6: the four memory configurations (the paper's Table 6 rows)
MEMORY_CONFIGURATIONS = ("trajectory_memory", "abstraction_memory", "joint_memory", "anti_persistence")


def figure3_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Figure 3: one (calls, success) point per memory configuration and source: the paper's
    averaged over its nine settings (Tables 6 and 1), this run's final-iteration cell means of the
    main runs averaged over its settings with equal weight (as the paper averages its nine)."""
    avg_calls = paper_frame(paper.table6()).groupby("method", sort=False)["mean"].mean()
    avg_success = paper_frame(paper.table1()).groupby("method", sort=False)["mean"].mean()
    points = pd.DataFrame(
        {
            "method": avg_calls.index,
            "calls": avg_calls.values,
            "success": avg_success.loc[avg_calls.index].values,
            "source": "paper",
        }
    )
    calls, success = table1(runs, "calls"), table1(runs)
    if not success.empty:
        keys = ["method", "backbone", "benchmark"]
        cell = success[[*keys, "mean"]].rename(columns={"mean": "success"})
        cell = cell.merge(calls[[*keys, "mean"]].rename(columns={"mean": "calls"}), on=keys)
        mine = cell[cell["method"].isin(MEMORY_CONFIGURATIONS)].groupby("method", sort=False)[["calls", "success"]]
        points = pd.concat([points, mine.mean().reset_index().assign(source="this run")], ignore_index=True)
    return points[["method", "calls", "success", "source"]]


def paper_final_success(methods: list[str]) -> pd.DataFrame:
    """Figures 2 and 9: the paper prints its curves as images, so its Table 1 final-iteration values
    of ``methods`` (column ``success``) are the only numbers to mark on them."""
    p1 = paper_frame(paper.table1())
    return p1[p1["method"].isin(methods)].rename(columns={"mean": "success"})


def iteration_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Figures 2 and 9: held-out success and mean trajectory length per iteration of the main runs,
    averaged over seeds per (benchmark, backbone, method), never across backbones, with the sample
    std over seeds (``success_std``, ``steps_std``: NaN with one seed) and the seed count, which the
    paper's error bars show (§4.1, Metrics); empty when no runs are loaded."""
    runs = main_runs(runs)
    if runs.empty:
        return pd.DataFrame()
    g = runs.groupby(["benchmark", "backbone", "method", "iteration"], sort=False)
    out = g.agg(
        success=("success", "mean"),
        steps=("steps", "mean"),
        success_std=("success", "std"),
        steps_std=("steps", "std"),
        seeds=("seed", "nunique"),
    )
    return paper_order(out.reset_index())


#: Figure 2 shows Llama-4-Scout and Qwen3-Coder-Next, Figure 9 (Appendix E.1) Gemma-4-31B-it
DYNAMICS_FIGURES = {"figure2": ("llama-4-scout", "qwen3-coder-next"), "figure9": ("gemma-4-31b-it",)}


def dynamics_figures(curves: pd.DataFrame) -> dict[str, tuple[str, ...]]:
    """Which backbones each dynamics figure shows: Figure 2 and Figure 9 as in the paper (their
    paper markers even when this run has no curve for them), then one figure per backbone of this
    run that the paper did not use (``this_run_<backbone>``), so no plot mixes backbones' curves."""
    out = dict(DYNAMICS_FIGURES)
    known = {b for bbs in DYNAMICS_FIGURES.values() for b in bbs}
    for bb in dict.fromkeys(curves["backbone"]) if not curves.empty else []:
        if bb not in known:
            out[f"this_run_{bb}"] = (bb,)
    return out


def beside_paper(cells: list[Any], mine: pd.DataFrame, *, key: str) -> pd.DataFrame:
    """The paper's points and this run's in one tidy frame (columns source, benchmark, ``key``,
    success, setting, success_std, seeds) for grouped bars: ``cells`` are ``paper.Cell`` records whose
    variant names the point (a ``"<key>=" `` prefix is dropped), ``mine`` is ``variants(...)`` with label
    renamed to ``key``. The setting ("paper: <backbone> / <benchmark>") keeps each backbone's bars apart.
    ``success_std``: the paper's printed std (None where it prints none) and this run's std over seeds
    (NaN with one seed); ``seeds``: this run's seed count (the paper's cells carry none)."""
    p = paper_frame(cells).rename(columns={"mean": "success", "std": "success_std"})
    p[key] = p["variant"].str.removeprefix(f"{key}=")
    cols = ["source", "benchmark", key, "success", "success_std", "seeds"]
    both = pd.concat(
        [
            p.assign(source="paper: " + p["backbone"]).reindex(columns=cols),
            mine.assign(source="this run: " + mine["backbone"]).reindex(columns=cols),
        ],
        ignore_index=True,
    )
    both["setting"] = both["source"] + " / " + both["benchmark"]
    return both[["source", "benchmark", key, "success", "setting", "success_std", "seeds"]]


def spread_table(both: pd.DataFrame, *, index: Any, columns: Any, decimals: int = 1) -> pd.DataFrame:
    """A tidy frame of ``beside_paper`` / ``sweep_frame`` printed as "mean ± std" cells (Table 2, Figures
    5, 7 and 12 as tables): the paper's cells with the std it prints, this run's with the std over its
    seeds, "(1 seed)" where one seed gives no spread, "(n seeds)" where a point has fewer seeds than
    this run's best-covered point."""
    cells = both.rename(columns={"success": "mean", "success_std": "std"})
    if "seeds" in cells.columns:
        cells = cells.assign(seeds_asked=pd.to_numeric(cells["seeds"], errors="coerce").max())
    return mean_std_table(cells, index=index, columns=columns, decimals=decimals)


def discard_minus_persist(cells: list[Any]) -> pd.Series:
    """Table 2's claim: the success gap discard - persist per (backbone, benchmark)."""
    gaps = paper_frame(cells).pivot(index=["backbone", "benchmark"], columns="variant", values="mean")
    return (gaps["discard"] - gaps["persist"]).rename("discard_minus_persist")


def mode_facts(freq: pd.DataFrame) -> pd.DataFrame:
    """Figure 8's statements checked on this run (``freq`` from ``mode_frequencies``): how many modes
    each setting used, whether 'none' was used at all, and whether the bandit chose 'none' itself
    (not only through round-robin, warm-up, epsilon or a missing embedding). The last is the check
    that can fail: coverage safeguards alone make every mode's frequency nonzero."""
    return pd.DataFrame(
        [
            {
                "backbone": r.backbone,
                "benchmark": r.benchmark,
                "modes used": int(sum((r[m] or 0) > 0 for m in MODES)),
                "none used": bool((r["none"] or 0) > 0),
                "none chosen by the bandit": bool(r.get("bandit_none", 0) > 0),
            }
            for _, r in freq.iterrows()
        ],
        columns=["backbone", "benchmark", "modes used", "none used", "none chosen by the bandit"],
    )


def paper_sweep(param: str) -> list[Any]:
    """The paper's reported points of one sweep: gamma (Figure 5), lambda (Figure 7), B and B_hat
    (Figure 12a and 12b)."""
    sweeps = {
        "gamma": paper.figure5_gamma,
        "lambda": paper.figure7_lambda,
        "B": lambda: [c for c in paper.figure12_budgets() if c.source == "Figure 12a"],
        "B_hat": lambda: [c for c in paper.figure12_budgets() if c.source == "Figure 12b"],
    }
    if param not in sweeps:
        raise ValueError(f"no paper sweep {param!r}; known: {sorted(sweeps)}")
    return sweeps[param]()


def sweep_frame(runs: pd.DataFrame, param: str, folders: dict[str, float]) -> pd.DataFrame:
    """One sweep, tidy (source, benchmark, value, success, synthesis_mode_usage, success_std, seeds):
    the paper's points (``paper_sweep(param)``; usage and spread not reported, so None) and this run's,
    where ``folders`` maps each run folder to its parameter value (``ablations.SWEEPS[param]``), with
    the std over seeds (NaN with one seed) and the seed count of each point."""
    p = paper_frame(paper_sweep(param)).rename(columns={"mean": "success", "std": "success_std"})
    p["value"] = p["variant"].str.split("=").str[1].astype(float)
    p["source"] = "paper: " + p["backbone"]
    p["synthesis_mode_usage"] = None
    p["seeds"] = None
    mine = variants(runs, {k: str(v) for k, v in folders.items()})
    mine = mine.assign(value=mine["label"].astype(float), source="this run: " + mine["backbone"])
    cols = ["source", "benchmark", "value", "success", "synthesis_mode_usage", "success_std", "seeds"]
    return pd.concat([p[cols], mine[cols]], ignore_index=True)


def figure12_frame(runs: pd.DataFrame, sweeps: dict[str, dict[str, float]]) -> pd.DataFrame:
    """Figure 12: the B and B_hat sweeps in one frame, told apart by the column ``parameter``."""
    return pd.concat(
        [sweep_frame(runs, prm, sweeps[prm]).assign(parameter=prm) for prm in ("B", "B_hat")], ignore_index=True
    )


def best_paper_point(param: str) -> pd.Series:
    """The variant with the highest reported success per benchmark in the paper's sweep ``param``
    (the paper's claim: the Table 3 defaults are the best points)."""
    df = paper_frame(paper_sweep(param))
    return df.loc[df.groupby("benchmark")["mean"].idxmax(), "variant"]


#: Figure 10 (E.3) audits abstraction memory's main runs (the paper: its six logged settings)
AUDITED_METHODS = ("abstraction_memory",)


def audit_abstractions(
    runs: pd.DataFrame, *, methods: Any = AUDITED_METHODS, variants: Any = None, **kw: Any
) -> tuple[list[Any], pd.DataFrame]:
    """Figure 10's labels: ``provenance.audit_run`` (``kw``: n_min, delta, pool) for the main runs of
    ``methods`` (default: abstraction memory, the setting the paper audits; joint memory, AutoRefine,
    the persist ablation ... by parameter) or, when ``variants`` (run-folder names) is given, for
    those folders instead. Runs without an abstraction store are skipped. Returns the runs'
    descendant rates and one row per stored abstraction with its run, method and benchmark."""
    if not runs.empty:
        if variants is not None:
            runs = runs[runs["variant"].isin(list(variants))]
        else:
            runs = main_runs(runs)
            runs = runs[runs["method"].isin(list(methods))]
    audited, labels = [], []
    for run in runs["run"].drop_duplicates().tolist() if not runs.empty else []:
        try:
            rates, labs = provenance.audit_run(run, **kw)
        except FileNotFoundError:
            continue  # methods without an abstraction store
        audited.append(rates)
        labels += [
            {"run": rates.run, "method": rates.method, "benchmark": rates.benchmark, **lab.__dict__} for lab in labs
        ]
    return audited, pd.DataFrame(labels)


def figure10_table(pooled: pd.DataFrame, ref: dict[str, Any] | None = None) -> pd.DataFrame:
    """Figure 10: the paper's one reported number (the largest gap; group rates not given, so None)
    as the first row, then this run's pooled rates (``provenance.pooled_by_setting``)."""
    ref = ref or paper.FIGURE10_LARGEST_GAP
    paper_row = pd.DataFrame(
        [
            {
                "variant": "abstraction_memory",
                "method": "abstraction_memory",
                "backbone": ref["backbone"],
                "benchmark": ref["benchmark"],
                "source": "paper",
                "alpha_emp": None,
                "alpha_0": None,
                "gap": ref["gap"],
            }
        ]
    )
    return pd.concat([paper_row, paper_order(pooled).assign(source="this run")], ignore_index=True)


def figure10_settings(pooled: pd.DataFrame) -> pd.DataFrame:
    """The pooled rates with a three-line ``setting`` label (run folder, backbone, benchmark) for
    ``plots.provenance_rates``; one "(no runs)" setting with undefined rates when nothing was audited."""
    if pooled.empty:
        return pd.DataFrame({"setting": ["(no runs)"], "alpha_emp": [None], "alpha_0": [None]})
    o = paper_order(pooled)
    return o.assign(setting=o["variant"] + "\n" + o["backbone"] + "\n" + o["benchmark"])


def figure11_panel(runs: pd.DataFrame, panel: str, folders: dict[str, str]) -> pd.DataFrame:
    """One panel of Figure 11 (``panel``: "Figure 11a" or "Figure 11b"), tidy (source, condition,
    success, success_std, seeds): the paper's conditions and this run's, ``folders`` mapping run folder ->
    condition. The source names the benchmark because the paper's (AppWorld) may differ from this run's.
    The paper prints no spread here (E.3: no seed-level observations), so its rows carry none; this run's
    carry the std over its seeds (NaN with one seed) and the seed count."""
    p11 = paper_frame(paper.figure11()).rename(columns={"mean": "success", "std": "success_std"})
    p = p11[p11["source"] == panel].assign(
        source="paper: " + p11["backbone"] + " / " + p11["benchmark"], condition=p11["variant"]
    )
    mine = variants(runs, folders)
    mine = mine.assign(source="this run: " + mine["backbone"] + " / " + mine["benchmark"], condition=mine["label"])
    cols = ["source", "condition", "success", "success_std", "seeds"]
    return pd.concat([p.reindex(columns=cols), mine.reindex(columns=cols)], ignore_index=True)


def by_condition(panel: pd.DataFrame, folders: dict[str, str]) -> pd.DataFrame:
    """A Figure 11 panel's success means as conditions x sources, rows in the ablation map's order."""
    t = ordered_pivot(panel, index="condition", columns="source", values="success")
    return t.loc[[c for c in folders.values() if c in t.index]]


def by_condition_spread(panel: pd.DataFrame, folders: dict[str, str]) -> pd.DataFrame:
    """``by_condition`` printed: the paper's means (it prints no spread here) and this run's
    "mean ± std" over seeds, "(1 seed)" where one seed gives none."""
    t = spread_table(panel, index="condition", columns="source")
    return t.loc[[c for c in folders.values() if c in t.index]]


#: F.2's two baseline conditions and the main runs the kit reuses for them (ablations.RETENTION)
F2_BASELINES = {"no filter": "abstraction_memory", "no frozen layer": "anti_persistence"}


def f2_baselines() -> pd.DataFrame:
    """F.2's baselines beside Table 1's cells for the same method and setting (Qwen3-Coder-Next, WebShop):
    the paper printed 38.7 and 56.0 in F.2 but 38.3 and 54.0 in Table 1, so its F.2 baselines were runs of
    their own; the kit's F.2 grid reuses the main grid's runs (folders ``abstraction_memory`` and
    ``anti_persistence``), so this run's F.2 baselines are its Table 1 cells."""
    f2 = {c.variant: c.mean for c in paper.figure11() if c.source == "Figure 11b"}
    t1 = {(c.method, c.backbone, c.benchmark): c for c in paper.table1()}
    rows = []
    for condition, method in F2_BASELINES.items():
        cell = t1[(method, "qwen3-coder-next", "webshop")]
        rows.append(
            {
                "condition": condition,
                "method": method,
                "paper F.2 (Figure 11b)": f2[condition],
                "paper Table 1": f"{cell.mean:.1f} ± {cell.std:.1f}",
                "kit's run": f"the main run (folder {method}), i.e. this run's Table 1 cell",
            }
        )
    return pd.DataFrame(rows).set_index("condition")
