"""Execute every notebook headlessly for a parameter profile (papermill, kernel ``python3``).

``execute_all("smoke")`` runs each ``notebooks/NN_*.ipynb`` with ``params/<notebook>/<profile>.yaml``
from the repository root, writes the executed copy to ``outputs/<notebook>/<profile>/``, and
passes ``output_dir`` so the notebook saves its tables (CSV) and figures (PNG, PDF) beside it.
Unknown parameter names and failing cells raise ``NotebookError`` naming the notebook, the cell
and the error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from antipersist_lib.errors import NotebookError
from antipersist_lib.paths import repo_root


@dataclass(frozen=True)
class Executed:
    notebook: str
    output: Path
    seconds: float


def notebook_paths(root: Path | None = None) -> list[Path]:
    root = root or repo_root()
    return sorted(p for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def profile_params(nb: Path, profile: str, root: Path) -> dict[str, Any]:
    path = root / "params" / nb.stem / f"{profile}.yaml"
    if not path.exists():
        raise NotebookError(f"{nb.name}: no parameter profile {path.relative_to(root)}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise NotebookError(f"{path}: a profile must be a mapping of parameter names to values")
    return data


def execute_all(
    profile: str = "smoke",
    *,
    only: list[str] | None = None,
    root: Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> list[Executed]:
    """Execute the notebooks; ``overrides`` replaces profile values (only names a notebook declares)."""
    import time

    import papermill as pm

    root = root or repo_root()
    known = [nb.stem for nb in notebook_paths(root)]
    missing = sorted(set(only or ()) - set(known))
    if missing:
        raise NotebookError(f"unknown notebook(s) {missing}; known: {known}")
    done = []
    for nb in notebook_paths(root):
        if only is not None and nb.stem not in only:
            continue
        params = profile_params(nb, profile, root)
        declared = set(pm.inspect_notebook(str(nb)))
        params.update({k: v for k, v in (overrides or {}).items() if k in declared})
        unknown = sorted(set(params) - declared)
        if unknown:
            raise NotebookError(
                f"{nb.name}: unknown parameter(s) {unknown} in params/{nb.stem}/{profile}.yaml; declared: {sorted(declared)}"
            )
        out_dir = root / "outputs" / nb.stem / profile
        out_dir.mkdir(parents=True, exist_ok=True)
        params = {**params, "output_dir": str(out_dir)} if "output_dir" in declared else params
        t0 = time.monotonic()
        try:
            pm.execute_notebook(
                str(nb),
                str(out_dir / nb.name),
                parameters=params,
                kernel_name="python3",
                cwd=str(root),
                progress_bar=False,
            )
        except pm.PapermillExecutionError as exc:
            raise NotebookError(f"{nb.name}: cell {exc.exec_count} failed: {exc.ename}: {exc.evalue}") from None
        done.append(Executed(nb.name, out_dir / nb.name, time.monotonic() - t0))
    return done
