"""Run directories -> tidy tables for the notebooks (one row per run x iteration, or per cell).

``load_iterations(root)`` reads every run under ``root`` (any folder holding a ``manifest.json``)
and returns one row per (run, iteration) with held-out success, trajectory length, calls per task
(execution / synthesis / other), mode frequencies and synthesis-mode usage, recomputed from the
episode records (the run's own ``summary.json`` is not trusted blindly).

Main rows are main runs only: every ablation grid writes into the same runs folder as the main
grid (a run folder per variant: ``<benchmark>/<backbone>/<variant>/seed<N>``), so the paper's main
tables (1, 6, 7; Figures 2, 3, 8, 9, 10) take the default variant of each of the eight Table 1
methods (the folder named after the method, ``main_runs``) and the ablation notebooks select their
variants by folder name (``variants``, with the maps of ``analysis.ablations``). Rows and columns
follow the paper's order (methods as in Table 1, backbones and benchmarks as in ``paper.SETTINGS``),
never an alphabetical pivot.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.analysis import paper, provenance, statistics
from antipersist_lib.methods import TABLE1_METHODS
from antipersist_lib.records import MODES
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import IDENTITY_KEYS, mode_fractions, summarize_iteration


def _roots(roots: Any) -> list[Path]:
    return [Path(r) for r in roots] if isinstance(roots, (list, tuple)) else [Path(roots)]


def find_runs(roots: Any, *, base: str | Path | None = None, complete_only: bool = False) -> list[Path]:
    """Every run directory (a folder with a ``manifest.json``) under one root or a list of roots;
    relative roots are taken from ``base`` when given. ``complete_only``: leave out runs still being made
    (or stopped before their last held-out episode: ``RunDirectory.is_complete``)."""
    out: list[Path] = []
    for root in _roots(roots):
        root = Path(base) / root if base is not None and not root.is_absolute() else root
        if not root.exists():
            raise FileNotFoundError(
                f"no run directories under {root}: run the experiment first or point runs_root elsewhere"
            )
        out += sorted(p.parent for p in root.rglob(RunDirectory.MANIFEST))
    if complete_only:
        out = [run for run in out if RunDirectory(run).is_complete()]
    return out


def load_manifest(run: str | Path) -> dict[str, Any]:
    return RunDirectory(run).read_manifest()


#: manifest fields that must agree for runs to be averaged as seeds of one design: the run's identity (what a
#: resume checks) but what the run folder, backbone and benchmark already separate, and the seed itself
AVERAGED_SETTINGS = tuple(k for k in IDENTITY_KEYS if k not in ("method", "backbone", "benchmark", "seed"))


def _mixed_settings(group: tuple[str, str, str], made: dict[str, list[str]]) -> str:
    """One sentence: which settings differ between the runs of ``group`` (run folder, backbone, benchmark)."""
    versions = [json.loads(k) for k in made]
    differ = sorted(k for k in AVERAGED_SETTINGS if len({json.dumps(v.get(k), sort_keys=True) for v in versions}) > 1)
    shown = ", ".join(f"{k} ({' vs '.join(json.dumps(v.get(k), sort_keys=True) for v in versions)})" for k in differ)
    return f"{'/'.join(group)}: {len(versions)} settings among {sum(len(r) for r in made.values())} runs, differing in {shown}"


def load_iterations(roots: Any, *, base: str | Path | None = None, complete_only: bool = True) -> pd.DataFrame:
    """One row per (run, iteration) for every run under ``roots`` (a path or a list of paths).

    Runs still being made (a study in progress) are left out unless ``complete_only`` is False: a run
    with half its held-out episodes would count as a seed with fewer tasks. They are named in a warning
    and in ``df.attrs["incomplete"]``.

    Roots are read in the order given and the first one wins: a run of the same identity (run
    folder, backbone, benchmark, seed) found again under a later root is left out, named in a
    warning and in ``df.attrs["shadowed"]``, so two roots holding the same run (e.g. a main
    profile's and an ablation profile's default runs) never count as two seeds."""
    rows = []
    seen: dict[tuple[str, str, str, int], Path] = {}
    shadowed: list[str] = []
    settings: dict[tuple[str, str, str], dict[str, list[str]]] = {}  # a group's settings -> its runs
    runs = find_runs(roots, base=base)
    incomplete = [run for run in runs if not RunDirectory(run).is_complete()] if complete_only else []
    for run in [r for r in runs if r not in incomplete]:
        man = load_manifest(run)
        identity = (run.parent.name, man["backbone"], man["benchmark"], man["seed"])
        if identity in seen:
            shadowed.append(f"{run} (same run as {seen[identity]})")
            continue
        seen[identity] = run
        made_with = json.dumps({k: man.get(k) for k in AVERAGED_SETTINGS}, sort_keys=True, default=str)
        settings.setdefault((run.parent.name, man["backbone"], man["benchmark"]), {}).setdefault(made_with, []).append(
            str(run)
        )
        held = RunDirectory(run).read_episodes("heldout")
        train = RunDirectory(run).read_episodes("train")
        for it in sorted({r["iteration"] for r in held}):
            s = summarize_iteration(it, held, train)
            variant = run.parent.name
            row = {
                "run": str(run),
                "method": man["method"],
                "variant": variant,
                "main": bool(variant == man["method"] and man["method"] in TABLE1_METHODS),
                "backbone": man["backbone"],
                "benchmark": man["benchmark"],
                "seed": man["seed"],
                # how many seeds the run's profile asked for (None: not recorded, e.g. a run made alone)
                "seeds_asked": len(man["seeds_planned"]) if man.get("seeds_planned") else None,
                "iteration": it,
                "success": 100 * s.heldout_success,
                "score": s.heldout_score,
                "n": s.heldout_n,
                "steps": s.mean_steps,
                "calls": s.mean_calls,
                "execution_calls": s.mean_execution_calls,
                "synthesis_calls": s.mean_synthesis_calls,
                "other_calls": s.mean_other_calls,
                "synthesis_mode_usage": s.synthesis_mode_usage,
            }
            row.update({f"mode_{m}": s.mode_frequencies.get(m) for m in MODES})
            row.update(training_decisions([r for r in train if r["iteration"] == it]))
            rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["shadowed"] = shadowed
    df.attrs["incomplete"] = [str(r) for r in incomplete]
    mixed = [_mixed_settings(group, made) for group, made in settings.items() if len(made) > 1]
    df.attrs["mixed_settings"] = mixed
    if mixed:
        warnings.warn(
            "runs that the tables average as seeds of one design were made with different settings: "
            + "; ".join(mixed)
            + ". Give each setting its own run name (or runs root) to keep them apart.",
            stacklevel=2,
        )
    if incomplete:
        warnings.warn(
            f"{len(incomplete)} run(s) still in progress left out (not every held-out episode is recorded): "
            + "; ".join(str(r) for r in incomplete),
            stacklevel=2,
        )
    if shadowed:
        warnings.warn(
            f"{len(shadowed)} run(s) left out because an earlier root holds the same run: " + "; ".join(shadowed),
            stacklevel=2,
        )
    return df


#: the selector's own choices (core/selector.py): every other branch is a safeguard or a fallback
#: (round-robin and warm-up coverage, the epsilon draw, ``none`` for a task without an embedding)
BANDIT_BRANCHES = ("global_best", "local_ucb")


def training_decisions(train: list[dict[str, Any]]) -> dict[str, Any]:
    """Figure 8's input for one iteration: the training episodes' modes (where round-robin, warm-up
    and epsilon act), as fractions (``train_mode_<m>``), and how many of each mode the bandit chose
    itself (``bandit_<m>``, branches ``BANDIT_BRANCHES``), so "'none' was used" can be told apart
    from "'none' was forced by a safeguard"."""
    decided = [r["meta"] for r in train if r.get("meta", {}).get("mode")]
    fractions = mode_fractions(train)
    out: dict[str, Any] = {"train_decisions": len(decided)}
    for m in MODES:
        out[f"train_mode_{m}"] = fractions.get(m)
        out[f"bandit_{m}"] = sum(1 for d in decided if d["mode"] == m and d.get("branch") in BANDIT_BRANCHES)
    return out


def main_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The main grid's rows: the default variant (folder named after the method) of the eight
    Table 1 methods; sweeps, ablations, judge and frozen-layer runs are left to ``variants``."""
    if df.empty:
        return df
    main = df["main"] if "main" in df.columns else (df["variant"] == df["method"]) & df["method"].isin(TABLE1_METHODS)
    return df[main.astype(bool)]


def _rank(values: Any, order: tuple[str, ...]) -> list[int]:
    """Sort keys: known values in the paper's order, then the rest in first-seen order."""
    seen = list(dict.fromkeys(v for v in values if v not in order))
    return [order.index(v) if v in order else len(order) + seen.index(v) for v in values]


def paper_order(df: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted as the paper prints them: methods as in Table 1, backbones and benchmarks as in
    ``paper.SETTINGS``; values the paper does not have (this run's backbone) follow in order seen."""
    keys = [("method", TABLE1_METHODS), ("backbone", paper.BACKBONES), ("benchmark", paper.BENCHMARKS)]
    cols = [(c, o) for c, o in keys if c in df.columns]
    if df.empty or not cols:
        return df
    ranks = pd.DataFrame({c: _rank(df[c].tolist(), o) for c, o in cols}, index=df.index)
    return df.loc[ranks.sort_values([c for c, _ in cols], kind="stable").index].reset_index(drop=True)


def final_iteration(df: pd.DataFrame) -> pd.DataFrame:
    """The last evaluated iteration of every run."""
    if df.empty:
        return df
    last = df.groupby("run")["iteration"].transform("max")
    return df[df["iteration"] == last]


def table1(df: pd.DataFrame, value: str = "success", *, seeds_asked: int | None = None) -> pd.DataFrame:
    """Final-iteration mean and std over seeds per (method, backbone, benchmark) of the main runs
    (``main_runs``), in the paper's order; ``value``: "success" (Table 1) or "calls" (Table 6).

    ``seeds_asked``: how many seeds the profile asked for. Default: per cell, the seed count its runs'
    manifests record from their profile (``seeds_planned``), else the most seeds any cell has, so a
    study whose every cell is short still says so. It is the column ``seeds_asked``, and the printed
    tables (``mean_std_table``) name the seed count of every cell that averages fewer seeds than that."""
    fin = final_iteration(main_runs(df))
    if fin.empty:
        return pd.DataFrame(columns=["method", "backbone", "benchmark", "mean", "std", "seeds", "seeds_asked"])
    keys = ["method", "backbone", "benchmark"]
    g = fin.groupby(keys, sort=False)[value]
    out = g.agg(["mean", "std", "count"]).reset_index().rename(columns={"count": "seeds"})
    if seeds_asked is not None:
        out["seeds_asked"] = int(seeds_asked)
    else:
        recorded = (
            fin.groupby(keys, sort=False)["seeds_asked"].max().reset_index()
            if "seeds_asked" in fin.columns
            else out[keys].assign(seeds_asked=float("nan"))
        )
        out = out.merge(recorded, on=keys, how="left")
        most = int(out["seeds"].max())
        out["seeds_asked"] = [
            most if pd.isna(a) else max(int(a), int(n)) for a, n in zip(out["seeds_asked"], out["seeds"])
        ]
    return paper_order(out)


def variants(df: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """Final-iteration mean success / usage of the named run folders (variant -> label).

    Returns one row per (label, benchmark, backbone) with the mean and std (``success_std``, NaN
    with one seed) over seeds and the seed count, for sweeps and
    ablations where each point is its own run folder (``params/main/ablations.yaml``), in the paper's
    order. Only settings where the ablation itself ran are kept: a main-run folder of the map (the
    default point, e.g. ``anti_persistence``) exists for every backbone and benchmark of the main
    grid, and alone it is no sweep."""
    fin = final_iteration(df)
    cols = ["label", "run_folder", "benchmark", "backbone", "success", "success_std", "synthesis_mode_usage", "seeds"]
    if fin.empty:
        return pd.DataFrame(columns=cols)
    fin = fin[fin["variant"].isin(names)]
    own = fin[~fin["variant"].isin(TABLE1_METHODS)][["benchmark", "backbone"]].drop_duplicates()
    if len(own):
        fin = fin.merge(own, on=["benchmark", "backbone"])
    g = (
        fin.groupby(["variant", "benchmark", "backbone"], sort=False)
        .agg(
            success=("success", "mean"),
            success_std=("success", "std"),  # sample std over seeds; NaN with one seed (no spread to show)
            synthesis_mode_usage=("synthesis_mode_usage", "mean"),
            seeds=("seed", "nunique"),
        )
        .reset_index()
    )
    g["label"] = g["variant"].map(names)
    g = g.rename(columns={"variant": "run_folder"})
    return paper_order(g[cols])


def mode_frequencies(df: pd.DataFrame, *, variant: str = "anti_persistence", phase: str = "train") -> pd.DataFrame:
    """Figure 8: how often each mode was selected, averaged over all iterations and seeds, one row
    per (backbone, benchmark) in the paper's order, one column per mode (fractions of tasks).

    ``phase="train"`` (the default) counts the training decisions, where the bandit learns and its
    safeguards (round-robin, warm-up, epsilon) act; "heldout" counts the evaluation's decisions.
    Column ``bandit_none`` is how many times the bandit itself (``BANDIT_BRANCHES``) chose ``none``."""
    prefix = {"train": "train_mode_", "heldout": "mode_"}.get(phase)
    if prefix is None:
        raise ValueError(f"phase must be 'train' or 'heldout', got {phase!r}")
    cols = [f"{prefix}{m}" for m in MODES]
    sub = df[(df["method"] == "anti_persistence") & (df["variant"] == variant)] if not df.empty else df
    if sub.empty or not set(cols) <= set(sub.columns):
        return pd.DataFrame(columns=["backbone", "benchmark", *MODES, "bandit_none"])
    g = sub.groupby(["backbone", "benchmark"], sort=False)
    out = g[cols].mean().rename(columns={f"{prefix}{m}": m for m in MODES})
    out["bandit_none"] = g["bandit_none"].sum() if "bandit_none" in sub.columns else 0
    return paper_order(out.reset_index())


def paper_frame(cells: list[Any]) -> pd.DataFrame:
    """``paper.Cell`` records as a DataFrame."""
    return pd.DataFrame([c.__dict__ for c in cells])


MODES_OF_NOTEBOOKS = ("paper", "load", "run")
ENGINE_PACKAGES = ("alfworld", "textworld", "scienceworld", "textworld_express", "webshop", "appworld")


def obtain_runs(
    mode: str, runs_root: Any, *, run_profile: str | None = None, root: str | Path | None = None
) -> tuple[pd.DataFrame, Any]:
    """The run-or-load step every notebook shares.

    ``mode``: "paper" (no runs: the paper's numbers alone), "load" (read the run directories under
    ``runs_root``, a path or list of paths relative to the repository root) or "run" (first run the
    main-job profile ``run_profile`` on the embedded default, then load what it wrote). Returns the
    (run, iteration) table and the roots actually loaded.
    """
    from antipersist_lib.paths import repo_root

    root = Path(root) if root is not None else repo_root()
    if mode not in MODES_OF_NOTEBOOKS:
        raise ValueError(f"mode must be one of {MODES_OF_NOTEBOOKS}, got {mode!r}")
    if mode == "paper":
        return pd.DataFrame(), []
    if mode == "run":
        if not run_profile:
            raise ValueError("mode 'run' needs run_profile (a main-job profile under params/main/)")
        from antipersist_lib.runner.main_job import run_main

        run_main(root / run_profile, out=root / "outputs" / "main", execute_notebooks=False)
        runs_root = str(Path("outputs") / "main" / Path(run_profile).stem / "runs")
    return load_iterations(runs_root, base=root), runs_root


def manifest_table(df: pd.DataFrame) -> pd.DataFrame:
    """The manifest facts of every run used (closing cell of each notebook)."""
    rows = []
    for run in sorted(df["run"].unique()) if not df.empty else []:
        m = load_manifest(Path(run))
        rows.append(
            {
                "run": Path(run).parent.name,
                "method": m["method"],
                "benchmark": m["benchmark"],
                "backbone": m["backbone"],
                "model": m["endpoint"]["model"],
                "seed": m["seed"],
                "iterations": m["iterations"],
                "partition": m["partition_hash"][:12],
                "engine": ", ".join(f"{k} {v}" for k, v in (m.get("engine") or {}).items() if k in ENGINE_PACKAGES),
                "commit": (m.get("git_commit") or "")[:10],
                "params": m.get("method_params"),
            }
        )
    return pd.DataFrame(rows)


# --- the notebooks' tables: paper beside this run -------------------------------------------------
# Each function below builds one table a notebook writes to CSV or plots, so the notebook itself
# only configures (which runs, which ablation map), calls and shows.


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
            "bb": _rank(both["backbone"].tolist(), paper.BACKBONES),
            "bench": _rank(both["benchmark"].tolist(), paper.BENCHMARKS),
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


def task_outcomes(roots: Any, *, base: str | Path | None = None, complete_only: bool = True) -> pd.DataFrame:
    """One row per held-out episode of every main run under ``roots``: method, backbone, benchmark, seed,
    iteration, task, task type, success (0/100) and the engine's score; the units a task-level paired test
    pairs (the same task, seed and iteration under two methods). Roots are read as ``load_iterations`` reads
    them (the first root holding a run wins; runs still in progress left out unless ``complete_only`` is False)."""
    rows = []
    seen: set[tuple[str, str, str, int]] = set()
    for run in find_runs(roots, base=base, complete_only=complete_only):
        man = load_manifest(run)
        identity = (run.parent.name, man["backbone"], man["benchmark"], man["seed"])
        if identity in seen or not (run.parent.name == man["method"] and man["method"] in TABLE1_METHODS):
            continue
        seen.add(identity)
        for r in RunDirectory(run).read_episodes("heldout"):
            rows.append(
                {
                    "method": man["method"],
                    "backbone": man["backbone"],
                    "benchmark": man["benchmark"],
                    "seed": man["seed"],
                    "iteration": r["iteration"],
                    "task": r["task"]["task_id"],
                    "task_type": r["task"].get("task_type"),
                    "success": 100.0 * bool(r["outcome"]["success"]),
                    "score": float(r["outcome"].get("score", 0.0) or 0.0),
                    "infra_failure": bool(r["outcome"].get("infra_failure")),
                }
            )
    return pd.DataFrame(rows)


def paired_by_task(
    outcomes: pd.DataFrame,
    value: str = "score",
    *,
    final_only: bool = True,
    reference: str = "anti_persistence",
    benchmark: str | None = None,
) -> pd.DataFrame | None:
    """Table 7's paired tests with held-out episodes as the paired units: ``reference`` (Anti-Persistence, as in
    the paper; or e.g. ReAct, to ask what each memory design adds) minus each other method on the same
    (backbone, benchmark, seed, iteration, task), on ``value`` ("score" or "success"); each comparison pairs
    the units both of its methods have (column ``n``), so a method still missing runs narrows only its own
    comparison. With few settings (one
    backbone on a CPU) this is the test that can see a difference; units where either episode was an
    infrastructure failure, or a method has no episode, are left out. ``final_only``: only each run's last
    evaluated iteration. ``benchmark``: that benchmark's units only. Scores are on each engine's own scale
    (ScienceWorld 0-100, the others 0-1), so pooling several benchmarks' scores is refused: ask per benchmark
    (``paired_per_benchmark``). None when there is nothing to pair."""
    if outcomes.empty or reference not in set(outcomes["method"]):
        return None
    df = outcomes if benchmark is None else outcomes[outcomes["benchmark"] == benchmark]
    if value == "score" and df["benchmark"].nunique() > 1:
        raise ValueError(
            f"scores of {sorted(df['benchmark'].unique())} are on different scales: pair them per benchmark "
            "(benchmark=..., or paired_per_benchmark)"
        )
    if final_only:
        last = df.groupby(["method", "backbone", "benchmark", "seed"])["iteration"].transform("max")
        df = df[df["iteration"] == last]
    keys = ["backbone", "benchmark", "seed", "iteration", "task"]
    bad = df[df["infra_failure"]][keys].drop_duplicates()
    if not bad.empty:
        df = df.merge(bad, on=keys, how="left", indicator=True)
        df = df[df["_merge"] == "left_only"].drop(columns="_merge")
    if df.empty:
        return None
    wide = df.pivot_table(index=keys, columns="method", values=value, aggfunc="first")
    methods = [m for m in TABLE1_METHODS if m in wide.columns and m != reference]
    if reference not in wide.columns:
        return None
    pairs = {}
    for m in methods:  # each comparison on the units both methods made (a study in progress lacks some runs)
        both = wide[[reference, m]].dropna()
        if len(both) >= 2:
            pairs[m] = (both[reference].tolist(), both[m].tolist())
    if not pairs:
        return None
    return table7_frame(statistics.paired_comparisons(pairs, wilcoxon_method="auto"))


def paired_per_benchmark(
    outcomes: pd.DataFrame, value: str = "score", *, reference: str = "anti_persistence", final_only: bool = True
) -> pd.DataFrame | None:
    """``paired_by_task`` for each benchmark on its own (Holm's family: one benchmark's comparisons), as one
    frame indexed by (benchmark, baseline); None when no benchmark has anything to pair."""
    if outcomes is None or outcomes.empty:
        return None
    frames = {}
    for bench in dict.fromkeys(outcomes["benchmark"]):
        t = paired_by_task(outcomes, value, final_only=final_only, reference=reference, benchmark=bench)
        if t is not None:
            frames[bench] = t
    if not frames:
        return None
    return pd.concat(frames, names=["benchmark"])


def table7_frame(comparisons: list[Any]) -> pd.DataFrame:
    """``statistics.table7`` rows as a frame indexed by baseline (the paper's Table 7 layout)."""
    return pd.DataFrame([c.to_dict() for c in comparisons]).set_index("baseline")


def table7_of_runs(runs: pd.DataFrame, *, decimals: int | None = None) -> pd.DataFrame | None:
    """Table 7's paired tests on this run's own final-iteration means of the main runs (settings =
    backbone/benchmark; Holm's family = the baselines among the paper's seven that this run has).
    Settings where some method has no run are left out. None when there is no Anti-Persistence row
    or fewer than two methods or settings to pair. ``decimals``: None pairs the unrounded means; 1
    pairs the one-decimal means Table 1 prints, as the paper's Table 7 did (``table7_of_runs_both``)."""
    t1 = table1(runs)
    if t1.empty:
        return None
    cells = t1.assign(setting=t1["backbone"] + "/" + t1["benchmark"]).pivot(
        index="method", columns="setting", values="mean"
    )
    cells = cells.loc[[m for m in TABLE1_METHODS if m in cells.index]].dropna(axis=1)
    if "anti_persistence" not in cells.index or len(cells.columns) < 2 or len(cells.index) < 2:
        return None
    return table7_frame(statistics.table7({m: cells.loc[m].tolist() for m in cells.index}, decimals=decimals))


def table7_of_runs_both(runs: pd.DataFrame) -> pd.DataFrame | None:
    """``table7_of_runs`` twice, one above the other (index: means, baseline): "unrounded" and
    "one-decimal" (the cell means as Table 1 prints them, which is what the paper's Table 7 paired)."""
    both = {
        "unrounded": table7_of_runs(runs),
        "one-decimal": table7_of_runs(runs, decimals=1),
    }
    if both["unrounded"] is None:
        return None
    return pd.concat(both, names=["means"])


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


# Sections 4.2-4.3: the text's counted claims, Figure 4, and which held-out denominators Tables 1-2's ALFWorld
# cells can come from. The claims compare one-decimal cell means, as the paper's sentences compare its printed table.

#: the agent baselines of Table 1 (the paper's "strongest agent baseline on average" is one of these)
AGENT_BASELINES = ("react", "reflexion", "expel", "autorefine")


def _one_decimal_cells(t1: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(backbone, benchmark) -> {method: mean rounded to one decimal}, settings in the paper's order."""
    if t1 is None or t1.empty:
        return {}
    cells = paper_order(t1[["method", "backbone", "benchmark", "mean"]].dropna(subset=["mean"]))
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in cells.itertuples(index=False):
        out.setdefault((r.backbone, r.benchmark), {})[r.method] = round(float(r.mean), 1)
    return out


def _missing(
    cells: dict[tuple[str, str], dict[str, float]], settings: list[tuple[str, str]], need: tuple[str, ...]
) -> str:
    """ "" when every setting has every needed method, else "not computed (missing ...)" naming what is absent."""
    if not settings:
        return "not computed (missing settings: none of this run's settings applies)"
    gaps = {m: [s for s in settings if m not in cells[s]] for m in need}
    parts = []
    for m, where in gaps.items():
        if len(where) == len(settings):
            parts.append(m)
        elif where:
            parts.append(f"{m} in " + ", ".join(f"{b}/{k}" for b, k in where))
    return f"not computed (missing {', '.join(parts)})" if parts else ""


def text_claims(t1: pd.DataFrame) -> pd.DataFrame:
    """The counted claims of Sections 4.2-4.3 recounted on a Table 1 frame (``table1(runs)``, or any frame with
    method, backbone, benchmark, mean), one row per claim of ``paper.TEXT_CLAIMS``: claim, sentence, paper (the
    count the paper prints), this_run (the same count on ``t1``), settings (how many settings it is counted over)
    and agrees. Cell means are compared at one decimal, as printed; "higher" is strictly higher.

    Settings are ``t1``'s own: the nine-setting claims count over all of them, the six-setting ones (Figure 2's
    and Figure 4's) over those whose backbone is not Figure 9's (Gemma-4-31B-it). A claim whose methods are
    absent from any of its settings reads "not computed (missing ...)" instead of a count over fewer methods."""
    cells = _one_decimal_cells(t1)
    every = list(cells)
    six = [s for s in every if s[0] not in DYNAMICS_FIGURES["figure9"]]
    ap = "anti_persistence"

    def count(settings: list[tuple[str, str]], need: tuple[str, ...], hit: Any) -> tuple[str, int]:
        miss = _missing(cells, settings, need)
        if miss:
            return miss, len(settings)
        return f"{sum(bool(hit(cells[s])) for s in settings)} of {len(settings)}", len(settings)

    def average(method: str) -> tuple[str, int]:
        miss = _missing(cells, every, (method,))
        if miss:
            return miss, len(every)
        return f"{sum(cells[s][method] for s in every) / len(every):.1f}", len(every)

    def strongest() -> tuple[str, int]:
        miss = _missing(cells, every, AGENT_BASELINES)
        if miss:
            return miss, len(every)
        avg = {m: round(sum(cells[s][m] for s in every) / len(every), 1) for m in AGENT_BASELINES}
        top = max(avg.values())
        return " = ".join(m for m in AGENT_BASELINES if avg[m] == top), len(every)

    def autorefine_vs_abstraction() -> tuple[str, int]:
        need = ("autorefine", "abstraction_memory")
        miss = _missing(cells, six, need)
        if miss:
            return miss, len(six)
        diff = [cells[s]["autorefine"] - cells[s]["abstraction_memory"] for s in six]
        b, e = sum(d > 1e-9 for d in diff), sum(abs(d) <= 1e-9 for d in diff)
        return f"better {b}, equal {e}, worse {len(six) - b - e} of {len(six)}", len(six)

    def beats(other: str) -> Any:
        return lambda c: c[ap] > c[other]

    computed = {
        "best": count(every, tuple(TABLE1_METHODS), lambda c: all(c[ap] > v for m, v in c.items() if m != ap)),
        "beats_trajectory_memory": count(every, (ap, "trajectory_memory"), beats("trajectory_memory")),
        "beats_abstraction_memory": count(every, (ap, "abstraction_memory"), beats("abstraction_memory")),
        "beats_joint_memory": count(every, (ap, "joint_memory"), beats("joint_memory")),
        "average_anti_persistence": average(ap),
        "average_trajectory_memory": average("trajectory_memory"),
        "average_abstraction_memory": average("abstraction_memory"),
        "average_joint_memory": average("joint_memory"),
        "average_reflexion": average("reflexion"),
        "strongest_agent_baseline": strongest(),
        "abstraction_below_trajectory": count(
            every,
            ("abstraction_memory", "trajectory_memory"),
            lambda c: c["abstraction_memory"] < c["trajectory_memory"],
        ),
        "joint_below_trajectory": count(
            every, ("joint_memory", "trajectory_memory"), lambda c: c["joint_memory"] < c["trajectory_memory"]
        ),
        "best_memory_configuration_figure2": count(
            six, MEMORY_CONFIGURATIONS, lambda c: all(c[ap] > c[m] for m in MEMORY_CONFIGURATIONS if m != ap)
        ),
        "autorefine_vs_abstraction": autorefine_vs_abstraction(),
        "beats_autorefine": count(six, (ap, "autorefine"), beats("autorefine")),
    }
    rows = []
    for claim, sentence, stated in paper.TEXT_CLAIMS:
        mine, n = computed[claim]
        agrees = None if mine.startswith("not computed") else mine == stated
        rows.append(
            {"claim": claim, "sentence": sentence, "paper": stated, "this_run": mine, "settings": n, "agrees": agrees}
        )
    return pd.DataFrame(rows)


def figure4_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Figure 4, tidy (source, backbone, benchmark, method, mean, std, seeds): final held-out success of abstraction
    memory, AutoRefine and Anti-Persistence from Table 1, the paper's six settings (Llama-4-Scout and
    Qwen3-Coder-Next) and this run's main runs on every setting whose backbone is not Figure 9's."""
    cols = ["source", "backbone", "benchmark", "method", "mean", "std", "seeds"]
    p = paper_frame(paper.table1())
    p = p[p["method"].isin(paper.FIGURE4_METHODS) & p["backbone"].isin(paper.FIGURE4_BACKBONES)]
    p = p.assign(source="paper", seeds=3)
    mine = table1(runs) if not runs.empty else pd.DataFrame(columns=cols)
    mine = mine[mine["method"].isin(paper.FIGURE4_METHODS) & ~mine["backbone"].isin(DYNAMICS_FIGURES["figure9"])]
    both = pd.concat([p[cols], mine.assign(source="this run")[cols]], ignore_index=True)
    return both.reset_index(drop=True)


def fits_mean_of_seed_scores(value: float, n_tasks: int, seeds: int = 3, decimals: int = 1) -> bool:
    """Whether ``value`` (a printed mean, in %) can be the mean of ``seeds`` scores k/``n_tasks``: some integer
    K in 0..seeds*n_tasks with 100*K/(seeds*n_tasks) rounding to ``value`` at ``decimals`` decimals."""
    total = seeds * n_tasks
    k = round(value * total / 100)
    return any(
        0 <= j <= total and round(100 * j / total, decimals) == round(value, decimals) for j in (k - 1, k, k + 1)
    )


def alfworld_denominator_cells(n_tasks: tuple[int, ...] = (paper.ALFWORLD_HELDOUT, 50)) -> pd.DataFrame:
    """Every ALFWorld cell of the paper's Tables 1 and 2 (24 + 4: Table 2's discard column repeats Table 1's
    Anti-Persistence cells) with, per held-out size n, whether its mean can be the mean of three k/n scores."""
    cells = paper_frame([c for c in paper.table1() + paper.table2() if c.benchmark == "alfworld"])
    for n in n_tasks:
        cells[f"fits_{n}"] = [fits_mean_of_seed_scores(v, n) for v in cells["mean"]]
    return cells


def alfworld_denominator_finding(n_tasks: tuple[int, ...] = (paper.ALFWORLD_HELDOUT, 50)) -> pd.DataFrame:
    """Per held-out size n: how many of Tables 1-2's ALFWorld cells (28) can be means of three k/n scores, and the
    chance that a one-decimal value drawn uniformly from 0.0-100.0 can (n = 134: Table 4's held-out set; n = 50:
    scores in multiples of 2 %). Many more cells than chance fit n = 50, fewer than chance fit n = 134."""
    cells = alfworld_denominator_cells(n_tasks)
    grid = [i / 10 for i in range(1001)]
    rows = []
    for n in n_tasks:
        rows.append(
            {
                "n_tasks": n,
                "cells": len(cells),
                "fit": int(cells[f"fits_{n}"].sum()),
                "share": float(cells[f"fits_{n}"].mean()),
                "chance": sum(fits_mean_of_seed_scores(v, n) for v in grid) / len(grid),
            }
        )
    return pd.DataFrame(rows).set_index("n_tasks")
