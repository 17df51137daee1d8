"""A consolidation study folder read back (``consolidation.study`` wrote it): its results, manifest and extra
result files, for one folder or several (e.g. one per backbone) stacked.

A study folder holds ``study.json`` (the manifest), ``results.json`` / ``results.csv`` (one row per builder,
regime, step and seed: ``RESULT_COLUMNS``), ``pool.jsonl``, ``memories/``, ``runs/``, ``ledger.jsonl``, ``cache/``
and, when the study ran them, ``task_switch.json`` and ``surgery.json``. The tables are in
``consolidation.analysis``, the figures in ``consolidation.figures``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.studies import MANIFEST_FILE, RESULTS_JSON

#: the task-switch sequence's rows (Figs. 10 and 18): one per (setup, task, seed)
SWITCH_RESULTS = "task_switch.json"
#: the memory surgery's rows (App. I.1, Tables 12-13): one per (memory: full or minus one entry, seed)
SURGERY_RESULTS = "surgery.json"
#: what identifies one evaluated bank (a row of a table is these, averaged over seeds)
CONDITION_COLUMNS = (
    "benchmark",
    "backbone",
    "builder",
    "column",
    "condition",
    "regime",
    "batch_size",
    "homogeneous",
    "capacity",
    "initial",
)
RESULT_COLUMNS = (
    *CONDITION_COLUMNS,
    "step",
    "updates",
    "examples_seen",
    "n_entries",
    "memory_chars",
    "update_errors",
    "pass",
    "memory_dropped",
    "seed",
    "heldout_n",
    "success",
    "score",
    "infra_failures",
    "mean_steps",
    "mean_calls",
    "run_dir",
)


def results_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    for col in ("step", "updates", "examples_seen", "n_entries", "memory_chars", "update_errors", "seed", "heldout_n"):
        df[col] = pd.to_numeric(df[col]).astype("Int64")
    for col in ("success", "score", "mean_steps", "mean_calls"):
        df[col] = pd.to_numeric(df[col]).astype(float)
    for col in ("batch_size", "capacity", "infra_failures", "pass", "memory_dropped"):
        df[col] = pd.to_numeric(df[col]).astype("Int64")
    df["homogeneous"] = df["homogeneous"].astype("boolean")
    return df


def load_study(out_dir: str | Path) -> pd.DataFrame:
    """The tidy results of a study folder: one row per (builder, regime, step, seed), columns ``RESULT_COLUMNS``."""
    path = Path(out_dir) / RESULTS_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FileNotFoundError(f"no study results at {path}: run the study first ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{path} is not a consolidation study's results (no 'rows' list)")
    return results_frame(data["rows"])


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(out_dir) / MANIFEST_FILE).read_text(encoding="utf-8"))


def study_dirs(found: Any) -> list[Path]:
    if found is None:
        return []
    if isinstance(found, (str, Path)):
        return [Path(found)]
    return [Path(f) for f in found]


def results(found: Any) -> pd.DataFrame:
    """Every study of ``found`` (a folder, a list of folders, or None in mode "paper") in one frame."""
    frames = [load_study(d) for d in study_dirs(found)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else results_frame([])


def study_note(found: Any) -> str:
    """The weak-model note when any study of ``found`` ran on the embedded default, else ""."""
    for d in study_dirs(found):
        note = load_manifest(d).get("note")
        if note:
            return str(note)
    return ""


def summary(found: Any) -> pd.DataFrame:
    """One row per study: backbone, pool, builds, evaluations, consolidation calls, wall time, versions."""
    out = []
    for d in study_dirs(found):
        m = load_manifest(d)
        cons = (m.get("calls") or {}).get("consolidation", {}).get("consolidation", {})
        out.append(
            {
                "study": str(d),
                "name": m.get("name"),
                "benchmark": m.get("benchmark"),
                "backbone": m.get("backbone"),
                "pool": f"{m['pool']['size']} records {m['pool']['types']} (hash {m['pool']['hash']})",
                "builds": len(m.get("builds", [])),
                "evaluations": m.get("evaluations"),
                "consolidation_calls": cons.get("calls", 0),
                "unparseable_updates": sum(b.get("update_errors", 0) for b in m.get("builds", [])),
                "seeds": m.get("seeds"),
                "wall_s": m.get("wall_s_total", m.get("wall_s")),
                "git_commit": m.get("git_commit"),
                "status": m.get("status"),
            }
        )
    return pd.DataFrame(out)


def builds_table(found: Any) -> pd.DataFrame:
    """Every build of every study: steps, final entries, replies that could not be parsed, evaluated steps."""
    out = []
    for d in study_dirs(found):
        m = load_manifest(d)
        for b in m.get("builds", []):
            out.append({"backbone": m.get("backbone"), **{k: v for k, v in b.items() if k != "memory"}})
    return pd.DataFrame(out)


def _extra_rows(found: Any, file: str) -> list[dict[str, Any]]:
    """The rows of one of a study's extra result files (``file``) in every folder of ``found``."""
    rows: list[dict[str, Any]] = []
    for d in study_dirs(found):
        path = Path(d) / file
        if path.exists():
            rows.extend(json.loads(path.read_text(encoding="utf-8"))["rows"])
    return rows


def load_surgery(found: Any) -> list[dict[str, Any]]:
    """The memory-surgery rows of a study folder (or folders); [] when it ran no surgery."""
    return _extra_rows(found, SURGERY_RESULTS)


def load_task_switch(found: Any) -> list[dict[str, Any]]:
    """The task-switch rows of a study folder (or folders); [] when it ran no task switch."""
    return _extra_rows(found, SWITCH_RESULTS)
