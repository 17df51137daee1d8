"""The first step every notebook shares: ``nb = notebook.setup(mode=..., runs_root=..., output_dir=...)``.

One call instead of a cell repeated in each notebook: it checks ``mode`` against the modes the
notebook supports, creates the output folder, runs the main-job profile first when the mode is
"run" and loads the run directories (``results.obtain_runs``), and prints what was loaded and, when
a run used the embedded default backbone, the weak-model note, so that every figure can carry the
same note (``nb.note``).
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
