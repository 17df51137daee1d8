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

from .jsonl import read_jsonl
from .protocol import summarize_iteration
from .records import MODES


def find_runs(root: str | Path) -> list[Path]:
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no run directories under {root}: run the experiment first or point runs_root elsewhere")
    return sorted(p.parent for p in root.rglob("manifest.json"))


def load_manifest(run: Path) -> dict[str, Any]:
    return json.loads((run / "manifest.json").read_text(encoding="utf-8"))


def load_iterations(root: str | Path) -> pd.DataFrame:
    rows = []
    for run in find_runs(root):
        man = load_manifest(run)
        held = [x.value for x in read_jsonl(run / "episodes_heldout.jsonl")]
        train = [x.value for x in read_jsonl(run / "episodes_train.jsonl")]
        for it in sorted({r["iteration"] for r in held}):
            s = summarize_iteration(it, held, train)
            row = {
                "run": str(run), "method": man["method"], "variant": run.parent.name, "backbone": man["backbone"],
                "benchmark": man["benchmark"], "seed": man["seed"], "iteration": it,
                "success": 100 * s.heldout_success, "n": s.heldout_n, "steps": s.mean_steps,
                "calls": s.mean_calls, "execution_calls": s.mean_execution_calls,
                "synthesis_calls": s.mean_synthesis_calls, "other_calls": s.mean_other_calls,
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


def paper_frame(cells: list[Any]) -> pd.DataFrame:
    """``paper.Cell`` records as a DataFrame."""
    return pd.DataFrame([c.__dict__ for c in cells])
