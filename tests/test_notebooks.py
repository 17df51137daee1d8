"""Notebook hygiene and headless execution with papermill (the smoke profile needs no LLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from antipersist_lib.runner.notebooks_runner import NotebookError, execute_all, notebook_paths

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = notebook_paths(ROOT)


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_shape(nb):
    data = json.loads(nb.read_text())
    assert data["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in data["cells"] if c["cell_type"] == "code"]
    assert not any(c.get("outputs") or c.get("execution_count") for c in code), "notebooks in git carry no outputs"
    params = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged 'parameters'"
    text = lambda c: "".join(c["source"]) if isinstance(c["source"], list) else c["source"]  # noqa: E731
    assert data["cells"][0]["cell_type"] == "markdown" and text(data["cells"][0]).startswith("# ")
    src = "".join(text(c) for c in code)
    assert "sys.path" not in src, "no sys.path hacks"
    for profile in ("smoke", "paper"):
        assert (ROOT / "params" / nb.stem / f"{profile}.yaml").exists(), f"missing params/{nb.stem}/{profile}.yaml"


@pytest.mark.slow
def test_smoke_profile_executes_every_notebook_and_writes_tables_and_figures():
    done = execute_all("smoke", root=ROOT)
    assert [d.notebook for d in done] == [p.name for p in NOTEBOOKS]
    for d in done:
        out = d.output.parent
        assert d.output.exists() and list(out.glob("*.csv")) and list(out.glob("*.png")) and list(out.glob("*.pdf"))


def test_unknown_parameter_is_named(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params" / NOTEBOOKS[0].stem).mkdir(parents=True)
    (tmp_path / "notebooks" / NOTEBOOKS[0].name).write_bytes(NOTEBOOKS[0].read_bytes())
    (tmp_path / "params" / NOTEBOOKS[0].stem / "bad.yaml").write_text(yaml.safe_dump({"mdoe": "paper"}))
    with pytest.raises(NotebookError, match=r"unknown parameter\(s\) \['mdoe'\]"):
        execute_all("bad", root=tmp_path)


def test_unknown_notebook_name_is_named():
    with pytest.raises(NotebookError, match=r"unknown notebook\(s\) \['09_nope'\]"):
        execute_all("smoke", only=["09_nope"], root=ROOT)
