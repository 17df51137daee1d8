"""Versions and provenance for run manifests."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

TRACKED_PACKAGES = (
    "antipersist",
    "numpy",
    "openai",
    "pyyaml",
    "scipy",
    "pandas",
    "seaborn",
    "matplotlib",
    "papermill",
    "nbval",
    "scienceworld",
    "alfworld",
    "textworld",
    "textworld-express",
    "llama_cpp_python",
    "ray",
)


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that can change results (missing ones omitted)."""
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit(path: str | Path | None = None) -> str | None:
    """The kit's git commit (with ``-dirty`` when the tree has changes), or None outside git."""
    cwd = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None
