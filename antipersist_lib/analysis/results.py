"""Run directories -> tidy tables for the notebooks (one row per run x iteration, or per cell).

``load_iterations(root)`` reads every run under ``root`` and returns one row per (run, iteration), recomputed from
the episode records rather than the run's ``summary.json``. The paper's main tables and figures take only the
main runs (``main_runs``: the folder named after each Table 1 method); ablation notebooks pick their variants by
folder name (``variants``). Rows and columns follow the paper's order, never an alphabetical pivot.

Details: docs/choices.md, "Main rows and ablation folders" and "Rows recomputed from episodes". The tables built
on these rows are ``paper_tables``, ``table7`` and ``paper_text`` beside this module.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.analysis import paper
from antipersist_lib.methods import TABLE1_METHODS
from antipersist_lib.records import MODES
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.spec import IDENTITY_KEYS
from antipersist_lib.runner.summary import mode_fractions, summarize_iteration


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


def rank_in_order(values: Any, order: tuple[str, ...]) -> list[int]:
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
    ranks = pd.DataFrame({c: rank_in_order(df[c].tolist(), o) for c, o in cols}, index=df.index)
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
