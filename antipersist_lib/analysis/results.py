"""Run directories -> tidy tables for the notebooks (one row per run x iteration, or per cell).

``load_iterations(root)`` reads every run under ``root`` (any folder holding a ``manifest.json``)
and returns one row per (run, iteration) with held-out success, trajectory length, calls per task
(execution / synthesis / other), mode frequencies and synthesis-mode usage, recomputed from the
episode records (the run's own ``summary.json`` is not trusted blindly). ``table1(df)`` gives the
final-iteration mean and std over seeds per (method, backbone, benchmark), in percent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.records import MODES
from antipersist_lib.runner.protocol import summarize_iteration


def _roots(roots: Any) -> list[Path]:
    return [Path(r) for r in roots] if isinstance(roots, (list, tuple)) else [Path(roots)]


def find_runs(roots: Any, *, base: str | Path | None = None) -> list[Path]:
    """Every run directory (a folder with a ``manifest.json``) under one root or a list of roots;
    relative roots are taken from ``base`` when given."""
    out: list[Path] = []
    for root in _roots(roots):
        root = Path(base) / root if base is not None and not root.is_absolute() else root
        if not root.exists():
            raise FileNotFoundError(
                f"no run directories under {root}: run the experiment first or point runs_root elsewhere"
            )
        out += sorted(p.parent for p in root.rglob("manifest.json"))
    return out


def load_manifest(run: str | Path) -> dict[str, Any]:
    return json.loads((Path(run) / "manifest.json").read_text(encoding="utf-8"))


def load_iterations(roots: Any, *, base: str | Path | None = None) -> pd.DataFrame:
    """One row per (run, iteration) for every run under ``roots`` (a path or a list of paths)."""
    rows = []
    for run in find_runs(roots, base=base):
        man = load_manifest(run)
        held = [x.value for x in read_jsonl(run / "episodes_heldout.jsonl")]
        train = [x.value for x in read_jsonl(run / "episodes_train.jsonl")]
        for it in sorted({r["iteration"] for r in held}):
            s = summarize_iteration(it, held, train)
            row = {
                "run": str(run),
                "method": man["method"],
                "variant": run.parent.name,
                "backbone": man["backbone"],
                "benchmark": man["benchmark"],
                "seed": man["seed"],
                "iteration": it,
                "success": 100 * s.heldout_success,
                "n": s.heldout_n,
                "steps": s.mean_steps,
                "calls": s.mean_calls,
                "execution_calls": s.mean_execution_calls,
                "synthesis_calls": s.mean_synthesis_calls,
                "other_calls": s.mean_other_calls,
                "synthesis_mode_usage": s.synthesis_mode_usage,
            }
            row.update({f"mode_{m}": s.mode_frequencies.get(m) for m in MODES})
            rows.append(row)
    return pd.DataFrame(rows)


def final_iteration(df: pd.DataFrame) -> pd.DataFrame:
    """The last evaluated iteration of every run."""
    if df.empty:
        return df
    last = df.groupby("run")["iteration"].transform("max")
    return df[df["iteration"] == last]


def table1(df: pd.DataFrame, value: str = "success") -> pd.DataFrame:
    """Final-iteration mean and std over seeds per (method, backbone, benchmark)."""
    fin = final_iteration(df)
    g = fin.groupby(["method", "backbone", "benchmark"])[value]
    out = g.agg(["mean", "std", "count"]).reset_index()
    return out.rename(columns={"count": "seeds"})


def variants(df: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """Final-iteration mean success / usage of the named run folders (variant -> label).

    Returns one row per (label, benchmark, backbone) with the mean over seeds, for sweeps and
    ablations where each point is its own run folder (``params/main/ablations.yaml``).
    """
    fin = final_iteration(df)
    if fin.empty:
        return pd.DataFrame(columns=["label", "benchmark", "backbone", "success", "synthesis_mode_usage", "seeds"])
    fin = fin[fin["variant"].isin(names)]
    g = (
        fin.groupby(["variant", "benchmark", "backbone"])
        .agg(
            success=("success", "mean"),
            synthesis_mode_usage=("synthesis_mode_usage", "mean"),
            seeds=("seed", "nunique"),
        )
        .reset_index()
    )
    g["label"] = g["variant"].map(names)
    g = g.rename(columns={"variant": "run_folder"})
    return g[["label", "run_folder", "benchmark", "backbone", "success", "synthesis_mode_usage", "seeds"]]


def mode_frequencies(df: pd.DataFrame, *, variant: str = "anti_persistence") -> pd.DataFrame:
    """Figure 8: mode frequencies of the bandit averaged over all evaluated iterations and seeds,
    one row per (backbone, benchmark), one column per mode (fractions of held-out tasks)."""
    cols = [f"mode_{m}" for m in MODES]
    sub = df[(df["method"] == "anti_persistence") & (df["variant"] == variant)] if not df.empty else df
    if sub.empty:
        return pd.DataFrame(columns=["backbone", "benchmark", *MODES])
    out = sub.groupby(["backbone", "benchmark"])[cols].mean().reset_index()
    return out.rename(columns={f"mode_{m}": m for m in MODES})


def paper_frame(cells: list[Any]) -> pd.DataFrame:
    """``paper.Cell`` records as a DataFrame."""
    return pd.DataFrame([c.__dict__ for c in cells])


MODES_OF_NOTEBOOKS = ("paper", "load", "run")
ENGINE_PACKAGES = ("alfworld", "textworld", "scienceworld", "webshop", "appworld")


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
