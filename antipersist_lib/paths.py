"""Where things are, wherever a notebook or command is started from."""

from __future__ import annotations

from pathlib import Path


def repo_root(start: str | Path | None = None) -> Path:
    """The kit's checkout (the nearest folder above ``start`` holding pyproject.toml and
    antipersist_lib/); falls back to the package's parent folder."""
    here = Path(start or Path.cwd()).resolve()
    for p in (here, *here.parents):
        if (p / "pyproject.toml").exists() and (p / "antipersist_lib").is_dir():
            return p
    return Path(__file__).resolve().parents[1]


def safe_file_name(text: str) -> str:
    """``text`` (a model name, a task type) as one file or folder name: every character other than a
    letter, a digit, ``-``, ``_`` or ``.`` becomes ``_``; an empty name becomes ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text) or "_"
