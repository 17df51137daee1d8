"""An ARC-AGI Stream study folder: the names of what ``arc.study`` writes there, and its readers.

A study folder holds ``study.json`` (the manifest), ``results.json`` / ``results.csv`` (one row per condition,
checkpoint step, evaluation set and seed), ``ledger.jsonl``, ``cache/`` and ``conditions/<name>/`` (each
condition's records, ``condition.json`` written last); a study of several seeds holds one such folder per seed
(``seed<k>/``) and the stacked results. The tables of ``arc.analysis`` and the notebooks read it through these.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.arc.controller import load_snapshots
from antipersist_lib.jsonl import read_json
from antipersist_lib.studies import MANIFEST_FILE, RESULTS_JSON

CONDITIONS_DIR = "conditions"
EVALS_FILE = "evals.jsonl"
DONE_FILE = "condition.json"
JUDGE_FILE = "judge.json"
SURGERY_FILE = "surgery.json"
SOURCES_FILE = "sources.json"
FIG2_SLICE_FILE = "fig2_slice.json"

RESULT_COLUMNS = (
    "condition",
    "regime",
    "source",
    "buffer_capacity",
    "tasks_per_step",
    "table4_b",
    "step",
    "examples_seen",
    "eval_set",
    "accuracy",
    "n_passed",
    "n_tasks",
    "buffer_size",
    "abstract_entries",
    "covered",
    "fused",
    "consolidations",
    "backbone",
    "seed",
)

#: a study of several seeds keeps each seed's study, complete in itself, in this subfolder of its folder
SEED_DIR = "seed{seed}"


def condition_rows(out: Path, name: str) -> list[dict[str, Any]]:
    return list(read_json(out / CONDITIONS_DIR / name / DONE_FILE)["rows"])


def results_frame(rows: Sequence[dict[str, Any]], seed: int = 0) -> pd.DataFrame:
    """The results table; ``seed`` for rows written before each row named its seed (the study's one seed)."""
    df = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    df["seed"] = df["seed"].where(df["seed"].notna(), seed)
    # studies written before Table 4's |B| was recorded read their buffer size as a cap (the only reading then)
    df["table4_b"] = df["table4_b"].where(df["table4_b"].notna(), df["buffer_capacity"])
    types = {"step": int, "examples_seen": int, "n_passed": int, "n_tasks": int, "tasks_per_step": int, "seed": int}
    return df.astype({**types, "buffer_capacity": "Int64", "table4_b": "Int64", "accuracy": float, "fused": float})


# -- reading a study back -------------------------------------------------------------------------------


def load_study_rows(out_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of a finished study's results, each naming its seed (older studies: the manifest's one seed)."""
    path = Path(out_dir) / RESULTS_JSON
    if not path.exists():
        raise FileNotFoundError(
            f"no study results at {path}: run `python -m antipersist_lib arc-study --profile <profile>` first"
        )
    manifest = Path(out_dir) / MANIFEST_FILE
    seed = (read_json(manifest).get("seed") if manifest.exists() else None) or 0
    return [{**row, "seed": row.get("seed", seed)} for row in read_json(path)["rows"]]


def load_study(out_dir: str | Path) -> pd.DataFrame:
    """The results table of a finished study: one row per (condition, checkpoint step, evaluation set, seed)."""
    return results_frame(load_study_rows(out_dir))


def seed_folders(out_dir: str | Path) -> list[tuple[int, Path]]:
    """(seed, folder) of every study a finished study folder holds: itself, or for a profile with ``seeds``
    each seed's subfolder, in the profile's order."""
    man = load_manifest(out_dir)
    if man.get("seeds"):
        return [(int(k), Path(out_dir) / man["seed_dirs"][str(k)]) for k in man["seeds"]]
    return [(int(man.get("seed") or 0), Path(out_dir))]


def is_multi_seed(out_dir: str | Path | None) -> bool:
    """Whether ``out_dir`` is a study of several seeds (``run_seeds``), whose records live in its seed folders."""
    return (
        out_dir is not None and (Path(out_dir) / MANIFEST_FILE).exists() and bool(load_manifest(out_dir).get("seeds"))
    )


def condition_folder(out_dir: str | Path, name: str) -> Path:
    """Where one condition's records are; a study of several seeds has one per seed, so it is refused here,
    naming the seed folders (the tables of ``arc.analysis`` stack every seed's)."""
    if is_multi_seed(out_dir):
        folders = [str(f) for _, f in seed_folders(out_dir)]
        raise ValueError(f"{out_dir} is a study of several seeds: condition {name!r} is recorded in each of {folders}")
    return Path(out_dir) / CONDITIONS_DIR / name


def seeds_progress(out_dir: str | Path | None, root: str | Path | None = None) -> str:
    """A line for a study of several seeds that is still running ("" otherwise): which seeds are complete and
    in the tables, of which planned, and the command that resumes it (its folder relative to ``root``, the
    checkout, when inside it, so the command can be pasted on another machine)."""
    if not is_multi_seed(out_dir):
        return ""
    man = load_manifest(out_dir)  # type: ignore[arg-type]
    planned, complete = man.get("seeds_planned") or man["seeds"], man["seeds"]
    if len(complete) >= len(planned):
        return ""
    folder = Path(out_dir)  # type: ignore[arg-type]
    if root is not None and folder.resolve().is_relative_to(Path(root).resolve()):
        folder = folder.resolve().relative_to(Path(root).resolve())
    return (
        f"seeds complete: {complete} of {planned}: the tables hold the complete seeds only (resume with "
        f"`python -m antipersist_lib arc-study --profile {man['profile_path']} --out {folder.as_posix()}`)"
    )


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST_FILE
    if not path.exists():
        raise FileNotFoundError(f"no study manifest at {path}")
    return dict(read_json(path))


def results(out_dir: str | Path | None) -> pd.DataFrame:
    """``load_study``, or an empty results table when there is no study (notebook mode "paper")."""
    return load_study(out_dir) if out_dir is not None else results_frame([])


def summary(out_dir: str | Path | None) -> dict[str, Any]:
    """What a study ran: backbone, grid, pools, checkpoints, calls and wall time (for a notebook's last cell)."""
    if out_dir is None:
        return {"study": None}
    man = load_manifest(out_dir)
    keys = (
        "name",
        "profile_path",
        "backbone",
        "steps",
        "checkpoints",
        "task_examples",
        "train_pool",
        "heldout_pool",
        "buffer_reading",
        "coverage_average",
        "table4_memories",
        "eval_repeats",
        "eval_temperature",
    )
    return {
        **{k: man.get(k) for k in keys},
        "seeds": man.get("seeds") or [man.get("seed", 0)],
        "seeds_planned": man.get("seeds_planned") or man.get("seeds") or [man.get("seed", 0)],
        "status": man.get("status"),
        "model": man["endpoint"]["model"],
        "conditions": [c["name"] for c in man["conditions"]],
        "eval_tasks": {k: len(v) for k, v in man["eval_task_ids"].items()},
        "calls": man["calls"],
        "cached_calls": man["cached_calls"],
        "wall_s": man["wall_s"],
        "git_commit": man["git_commit"],
        "prompt_hashes": man["prompt_hashes"],
    }


def condition_names(out_dir: str | Path | None, *, streams_only: bool = True) -> list[str]:
    """Conditions of the study, in the profile's order (``streams_only``: without the no-memory baseline)."""
    if out_dir is None:
        return []
    conds = load_manifest(out_dir)["conditions"]
    return [c["name"] for c in conds if not (streams_only and c["regime"] == "none")]


def condition_snapshots(out_dir: str | Path, name: str) -> list[dict[str, Any]]:
    return load_snapshots(condition_folder(out_dir, name))


def condition_specs(out_dir: str | Path | None) -> dict[str, dict[str, Any]]:
    """The manifest's conditions by name ({} for no study)."""
    return {} if out_dir is None else {c["name"]: c for c in load_manifest(out_dir)["conditions"]}


def study_note(out_dir: str | Path | None) -> str:
    """The kit's weak-model note (``serving.embedded.WEAK_MODEL_NOTE``) when the study ran on the embedded
    default, else "": the provenance line under every figure."""
    if out_dir is None or not load_manifest(out_dir).get("embedded"):
        return ""
    from antipersist_lib.serving.embedded import WEAK_MODEL_NOTE

    return WEAK_MODEL_NOTE
