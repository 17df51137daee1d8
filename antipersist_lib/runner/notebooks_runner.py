"""Execute every notebook headlessly for a parameter profile (papermill, kernel ``python3``).

``execute_all("smoke")`` runs each ``notebooks/NN_*.ipynb`` with ``params/<notebook>/<profile>.yaml``
from the repository root, writes the executed copy to ``outputs/<notebook>/<profile>/``, and
passes ``output_dir`` so the notebook saves its tables (CSV) and figures (PNG, PDF) beside it.
``execute_on_runs(path)`` runs the notebooks that load run directories on a user's own runs instead,
into a folder that names those runs, so a profile's outputs (the committed fixtures') and a user's
never overwrite each other.
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


#: the parameter through which a notebook loads run directories (``notebook.setup``)
RUNS_PARAMETER = "runs_root"


def runs_notebooks(root: Path | None = None) -> list[str]:
    """The notebooks that load run directories (they declare ``runs_root``)."""
    import papermill as pm

    return [nb.stem for nb in notebook_paths(root) if RUNS_PARAMETER in pm.inspect_notebook(str(nb))]


def default_runs_output(runs: str | Path, root: Path | None = None) -> Path:
    """``outputs/notebooks/<runs path with / as _>``: a folder that says which runs its notebooks read."""
    root = root or repo_root()
    resolved = Path(runs).resolve()
    try:
        shown = resolved.relative_to(root).as_posix()
    except ValueError:
        shown = resolved.as_posix().lstrip("/")
    return root / "outputs" / "notebooks" / shown.replace("/", "_")


def execute_on_runs(
    runs: str | Path,
    *,
    profile: str = "smoke",
    only: list[str] | None = None,
    out: str | Path | None = None,
    root: Path | None = None,
) -> list[Executed]:
    """The notebooks that load run directories, on the runs under ``runs`` (mode ``load``), each into
    ``<out>/<notebook>/`` (default ``default_runs_output``). ``profile`` gives their other parameters;
    naming a notebook that does not load runs is an error."""
    root = root or repo_root()
    folder = Path(runs)
    if not folder.is_dir():
        raise NotebookError(f"--runs {runs}: no such folder")
    loaders = runs_notebooks(root)
    chosen = loaders if only is None else list(only)
    refused = sorted(set(chosen) - set(loaders))
    if refused:
        raise NotebookError(
            f"notebook(s) {refused} do not load run directories, so --runs cannot feed them; these do: {loaders}"
        )
    resolved = folder.resolve()
    try:
        shown = str(resolved.relative_to(root))
    except ValueError:
        shown = str(resolved)
    base = Path(out) if out is not None else default_runs_output(folder, root)
    return execute_all(
        profile,
        only=chosen,
        root=root,
        overrides={RUNS_PARAMETER: shown, "mode": "load"},
        out_dir_for=lambda nb: base / nb,
    )


def execute_all(
    profile: str = "smoke",
    *,
    only: list[str] | None = None,
    root: Path | None = None,
    overrides: dict[str, Any] | None = None,
    out_dir_for: Any = None,
) -> list[Executed]:
    """Execute the notebooks; ``overrides`` replaces profile values (only names a notebook declares);
    ``out_dir_for(notebook name)``: where its executed copy goes (default ``outputs/<notebook>/<profile>``)."""
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
        out_dir = Path(out_dir_for(nb.stem)) if out_dir_for is not None else root / "outputs" / nb.stem / profile
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
