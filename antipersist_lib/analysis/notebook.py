"""The first step every notebook shares: ``nb = notebook.setup(mode=..., runs_root=..., output_dir=...)``.

One call instead of a cell repeated in each notebook: it checks ``mode`` against the modes the
notebook supports, creates the output folder, runs the main-job profile first when the mode is
"run" and loads the run directories (``results.obtain_runs``), and prints what was loaded and, when
a run used the embedded default backbone, the weak-model note, so that every figure can carry the
same note (``nb.note``).

The faulty-memories notebooks (09-12) read study folders instead of run directories: after ``setup`` they call
``study_status(found, study_folder)`` once, which prints what the study folder holds (weak-model note, profile,
model, seeds, units done and pending) and returns its results table and note.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.analysis.results import MODES_OF_NOTEBOOKS, main_runs, obtain_runs
from antipersist_lib.paths import repo_root
from antipersist_lib.serving.embedded import WEAK_MODEL_NOTE


@dataclass(frozen=True)
class Setup:
    """What a notebook works with after ``setup``."""

    root: Path  # the repository root (relative parameters are taken from here)
    out: Path  # output_dir, created: tables (CSV) and figures (PNG, PDF) go here
    runs: pd.DataFrame  # one row per (run, iteration) (results.load_iterations); empty when nothing was loaded
    loaded_from: Any  # the roots actually loaded (runs_root, or the run profile's runs in mode "run")
    embedded: bool  # a loaded run used the embedded default backbone
    note: str  # WEAK_MODEL_NOTE when embedded, else "": the provenance line under every figure


def setup(
    mode: str,
    *,
    output_dir: str | Path,
    runs_root: Any = None,
    run_profile: str | None = None,
    modes: Sequence[str] = MODES_OF_NOTEBOOKS,
    methods: Sequence[str] | None = None,
    why: str = "",
    root: str | Path | None = None,
) -> Setup:
    """Check the mode, create ``output_dir`` and obtain the runs a notebook reads.

    ``modes``: the modes this notebook supports (a subset of "paper", "load", "run"); any other
    ``mode`` raises ValueError naming it and the supported ones, followed by ``why`` when given.
    ``runs_root`` (a path or list of paths relative to the repository root): run directories to
    load in modes "load" and "run" (``run_profile``: the main-job profile "run" executes first); None
    loads nothing (a notebook that reads one run itself). ``methods``: keep only these methods' runs.
    """
    modes = tuple(modes)
    unknown = sorted(set(modes) - set(MODES_OF_NOTEBOOKS))
    if unknown:
        raise ValueError(f"unknown notebook mode(s) {unknown}; known: {MODES_OF_NOTEBOOKS}")
    if mode not in modes:
        raise ValueError(f"mode must be one of {modes}, got {mode!r}" + (f": {why}" if why else ""))
    root = Path(root) if root is not None else repo_root()
    out = root / output_dir
    out.mkdir(parents=True, exist_ok=True)
    runs, loaded_from = pd.DataFrame(), None
    in_progress: list[str] = []
    if runs_root is not None:
        runs, loaded_from = obtain_runs(mode, runs_root, run_profile=run_profile, root=root)
        in_progress = list(runs.attrs.get("incomplete", []))
    if methods is not None and not runs.empty:
        runs = main_runs(runs)
        runs = runs[runs["method"].isin(list(methods))]
    embedded = bool((not runs.empty) and runs["backbone"].str.startswith("embedded").any())
    if embedded:
        print("NOTE:", WEAK_MODEL_NOTE)
    if mode == "paper":
        print("paper numbers only")
    elif runs_root is not None:
        print(
            f"{runs['run'].nunique() if not runs.empty else 0} runs ({len(runs)} run x iteration rows) loaded from {loaded_from}"
            + (f"; {len(in_progress)} run(s) still in progress left out" if in_progress else "")
        )
    return Setup(root, out, runs, loaded_from, embedded, WEAK_MODEL_NOTE if embedded else "")


# -- the faulty-memories notebooks (09-12): what a study folder holds ---------------------------------


@dataclass(frozen=True)
class StudyStatus:
    """What a faulty-memories notebook works with after ``study_status``."""

    folders: tuple[Path, ...]  # the study folders read (none in mode "paper")
    results: pd.DataFrame  # the reader's results table of every folder (empty in mode "paper")
    note: str  # the weak-model note when a study ran on the embedded default, else ""
    lines: tuple[str, ...]  # what was printed, the NOTE line first


def study_folders(found: Any) -> tuple[Path, ...]:
    """The folders of a study's run-or-load result: None or [] (mode "paper"), one folder, or a list of them."""
    if found is None:
        return ()
    if isinstance(found, (str, Path)):
        return (Path(found),)
    return tuple(Path(f) for f in found)


def _seeds(values: Any) -> list[int]:
    return sorted({int(v) for v in values if not pd.isna(v)})


def study_unit_lines(manifest: dict[str, Any], results: pd.DataFrame) -> list[str]:
    """What a study manifest says is done and what is pending: its status, the seeds complete of those planned,
    and per kind of unit (an ARC-AGI Stream study's conditions, a consolidation study's builds and evaluations)
    how many are done. Conditions count as done when the results table holds rows of them."""
    status = manifest.get("status") or "unknown"
    lines = []
    done = [int(s) for s in (manifest.get("seeds") or [manifest.get("seed") or 0])]
    if manifest.get("seeds_planned"):  # a study of several seeds run one after another
        planned = [int(s) for s in manifest["seeds_planned"]]
        pending = [s for s in planned if s not in done]
        lines.append(f"status {status}, seeds {done} of {planned}" + (f", pending {pending}" if pending else ""))
    else:
        lines.append(f"status {status}, seeds {done}")
    conditions = manifest.get("conditions")
    if isinstance(conditions, list):
        names = [c["name"] if isinstance(c, dict) else str(c) for c in conditions]
        have = set(results["condition"]) if "condition" in results.columns else set()
        missing = [n for n in names if n not in have]
        lines.append(
            f"conditions done: {len(names) - len(missing)} of {len(names)}"
            + (f", pending {missing}" if missing else "")
        )
    if isinstance(manifest.get("builds"), list):
        lines.append(
            f"builds done: {len(manifest['builds'])}, evaluations done: {manifest.get('evaluations') or 0}"
            + ("" if status == "complete" else f" (the study is {status}: more may be pending)")
        )
    return lines


def study_status(
    found: Any,
    reader: Any,
    *,
    root: str | Path | None = None,
    what: str = "study",
    seeds_reading: str = "",
    show: bool = True,
) -> StudyStatus:
    """The status cell of notebooks 09-12, one call: read ``found`` (a study's run-or-load result: None or [] in
    mode "paper", one folder or a list) with ``reader``, that study's ``study_folder`` module (``arc.study_folder``
    or ``consolidation.study_folder``: ``results``, ``study_note``, ``load_manifest``, and ``seeds_progress``
    where it has one; passed in, since the studies sit above this layer), and print what each folder holds.

    Printed: the weak-model note ("NOTE: ..."), then per folder its profile, model, backbone, status, seeds
    done of those planned and the units done and pending (``study_unit_lines``), then the results table's
    conditions, checkpoints and seeds ("seed(s) [...]", followed by ``seeds_reading`` when there are several),
    and a study of several seeds still running: which seeds are complete and the command that resumes it.
    ``root``: the checkout, for that command's folder. ``what`` names the study in the lines ("study",
    "surgery study"). Nothing is printed for no study."""
    folders = study_folders(found)
    df = reader.results(found)
    note = reader.study_note(found) if folders else ""
    lines = [f"NOTE: {note}"] if note else []
    progress = getattr(reader, "seeds_progress", None)
    for folder in folders:
        man = reader.load_manifest(folder)
        endpoint = man.get("endpoint") or {}
        shown = folder
        if root is not None and folder.resolve().is_relative_to(Path(root).resolve()):
            shown = folder.resolve().relative_to(Path(root).resolve())  # the checkout's own fixtures, relative
        lines.append(
            f"{what} {shown.as_posix()}: profile {man.get('profile_path')}, model {endpoint.get('model')} "
            f"(backbone {man.get('backbone')})"
        )
        own = df if len(folders) == 1 else reader.results(folder)
        lines.extend("  " + line for line in study_unit_lines(man, own))
        resume = progress(folder, root=root) if progress is not None else ""
        if resume:
            lines.append(resume)
    if folders:
        seeds = _seeds(df["seed"].tolist())
        steps = _seeds(df["step"].tolist())
        lines.append(
            f"results: {df['condition'].nunique()} conditions, checkpoints {steps}, seed(s) {seeds}"
            + (f" {seeds_reading}" if len(seeds) > 1 and seeds_reading else "")
        )
    if show:
        for line in lines:
            print(line)
    return StudyStatus(folders, df, note, tuple(lines))
