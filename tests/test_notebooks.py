"""Notebook hygiene and headless execution with papermill (the smoke profile needs no LLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from antipersist_lib.analysis import notebook
from antipersist_lib.errors import NotebookError
from antipersist_lib.runner.notebooks_runner import execute_all, notebook_paths

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
    assert "__import__" not in src, "no __import__: imports belong in the imports cell"
    assert src.count("notebook.setup(") == 1, "one notebook.setup(...) call instead of a hand-written setup cell"
    assert "repo_root()" not in src and ".mkdir(" not in src, "the setup is notebook.setup's job"
    for profile in ("smoke", "paper"):
        assert (ROOT / "params" / nb.stem / f"{profile}.yaml").exists(), f"missing params/{nb.stem}/{profile}.yaml"


@pytest.mark.slow
def test_smoke_profile_executes_every_notebook_and_writes_tables_and_figures():
    done = execute_all("smoke", root=ROOT)
    assert [d.notebook for d in done] == [p.name for p in NOTEBOOKS]
    for d in done:
        out = d.output.parent
        assert d.output.exists() and list(out.glob("*.csv")) and list(out.glob("*.png")) and list(out.glob("*.pdf"))


CPU_NOTEBOOKS = ("01_main_results", "02_dynamics", "03_persist_vs_discard", "04_mode_selection")


@pytest.mark.slow
def test_the_cpu_profile_executes_notebooks_01_to_04_on_the_committed_cpu_study():
    """The CPU study's committed runs (tests/fixtures/runs/cpu, params/main/cpu.yaml) through the same notebooks a
    GPU user runs: every complete run is loaded, labelled with the model; runs still in progress are left out."""
    from antipersist_lib.analysis.results import load_iterations
    from antipersist_lib.rundir import RunDirectory

    root = ROOT / "tests" / "fixtures" / "runs" / "cpu"
    complete = [p.parent for p in root.rglob("manifest.json") if RunDirectory(p.parent).is_complete()]
    assert complete, "the CPU study has no complete run committed"
    done = execute_all("cpu", only=list(CPU_NOTEBOOKS), root=ROOT)
    assert [d.notebook for d in done] == [f"{n}.ipynb" for n in CPU_NOTEBOOKS]
    out = {d.notebook: d.output.parent for d in done}
    t1 = (out["01_main_results.ipynb"] / "table1_this_run.csv").read_text()
    assert "embedded-qwen2.5-coder-1.5b-instruct" in t1 and "textworld_express" in t1
    runs = load_iterations(root)
    assert set(runs["run"]) == {str(p) for p in complete}
    executed = (out["01_main_results.ipynb"] / "01_main_results.ipynb").read_text()
    assert "Qwen2.5" in executed or "qwen2.5" in executed
    assert list(out["02_dynamics.ipynb"].glob("*.png"))


@pytest.mark.slow
def test_the_cpu_profile_executes_notebooks_09_and_10_on_the_committed_arc_study():
    """The CPU study's ARC-AGI Stream part (tests/fixtures/arc/cpu, params/arc/cpu.yaml): its complete seeds through
    notebooks 09-10, labelled with the model; a seed still running is named and left out."""
    from antipersist_lib.arc import study_folder

    root = ROOT / "tests" / "fixtures" / "arc" / "cpu"
    man = study_folder.load_manifest(root)
    seeds = man["seeds"]
    assert seeds and man["endpoint"]["model"] == "qwen2.5-coder-1.5b-instruct"
    done = execute_all("cpu", only=["09_arc_stream", "10_arc_memory_anatomy"], root=ROOT)
    nb09, nb10 = (d.output for d in done)
    text = nb09.read_text()
    assert f"seed(s) {seeds}" in text and "embedded default" in text
    assert (f"seeds complete: {seeds} of {man['seeds_planned']}" in text) == (len(seeds) < len(man["seeds_planned"]))
    over = pd.read_csv(nb09.parent / "utility_vs_updates_heldout_over_seeds.csv")
    assert set(over["n_seeds"]) == {len(seeds)} and set(over["condition"]) >= {"force-gt-b8", "auto-gt-b8"}
    assert set(pd.read_csv(nb10.parent / "steps.csv")["seed"]) == set(seeds)


@pytest.mark.slow
def test_the_cpu_profile_executes_notebooks_11_and_12_on_the_committed_consolidation_study():
    """The CPU study's consolidation part (tests/fixtures/consolidation/cpu, params/consolidation/cpu.yaml) through
    notebooks 11-12: the banks the 1.5B model built, beside no memory and the kit's methods, labelled with it."""
    from antipersist_lib.consolidation import study_folder

    root = ROOT / "tests" / "fixtures" / "consolidation" / "cpu"
    man = study_folder.load_manifest(root)
    assert man["status"] == "complete" and man["endpoint"]["model"] == "qwen2.5-coder-1.5b-instruct"
    recorded = study_folder.load_study(root)
    done = execute_all("cpu", only=["11_consolidation_utility", "12_trajectory_logs"], root=ROOT)
    nb11, nb12 = (d.output for d in done)
    for nb in (nb11, nb12):
        text = nb.read_text()
        assert "qwen2.5-coder-1.5b-instruct" in text and "textworld_express" in text
    curves = pd.read_csv(nb11.parent / "figure1_utility_vs_updates.csv")
    assert set(curves["builder"]) >= {"dc", "awm", "ace"}  # the streamed builders, step by step
    cells = pd.read_csv(nb12.parent / "tables23_this_run_cells.csv")
    assert not cells.empty and set(cells["benchmark"]) == {"textworld_express"}
    (no_memory,) = recorded[recorded["condition"] == "no_memory"]["success"]  # one seed: the recorded value
    assert cells.set_index("column").loc["no_mem", "value"] == pytest.approx(100 * no_memory)
    assert {"all", "dc", "awm", "ace", "trajectory_memory", "anti_persistence"} <= set(cells["column"])


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


# --- notebook.setup: the one call that replaces the setup cell ------------------------------------


@pytest.mark.parametrize("mode", ["run", "lod"])
def test_setup_rejects_a_mode_the_notebook_does_not_support_and_names_it(tmp_path, mode):
    with pytest.raises(ValueError, match=rf"mode must be one of \('paper', 'load'\), got '{mode}': why not"):
        notebook.setup(mode, output_dir="out", modes=("paper", "load"), why="why not", root=tmp_path)
    assert not (tmp_path / "out").exists(), "nothing is created for a refused mode"


def test_setup_rejects_unknown_supported_modes(tmp_path):
    with pytest.raises(ValueError, match=r"unknown notebook mode\(s\) \['replay'\]"):
        notebook.setup("load", output_dir="out", modes=("load", "replay"), root=tmp_path)


def test_setup_paper_mode_loads_nothing_and_creates_the_output_dir(tmp_path, capsys):
    nb = notebook.setup("paper", output_dir="a/b", runs_root="does/not/exist", root=tmp_path)
    assert nb.out == tmp_path / "a" / "b" and nb.out.is_dir() and nb.root == tmp_path
    assert nb.runs.empty and not nb.embedded and nb.note == ""
    assert capsys.readouterr().out == "paper numbers only\n"


def test_setup_load_reads_the_runs_and_carries_the_weak_model_note(tmp_path, capsys):
    from antipersist_lib.serving.embedded import WEAK_MODEL_NOTE

    nb = notebook.setup("load", output_dir=tmp_path / "out", runs_root="tests/fixtures/runs/smoke", root=ROOT)
    assert nb.out == tmp_path / "out" and nb.out.is_dir()
    assert nb.runs["run"].nunique() == 10 and set(nb.runs["backbone"]) == {"embedded-gemma-3-270m"}
    assert nb.embedded and nb.note == WEAK_MODEL_NOTE and nb.loaded_from == "tests/fixtures/runs/smoke"
    out = capsys.readouterr().out
    assert out.startswith("NOTE: " + WEAK_MODEL_NOTE) and "10 runs (20 run x iteration rows)" in out


def test_setup_keeps_only_the_named_methods(tmp_path):
    nb = notebook.setup(
        "load", output_dir=tmp_path, runs_root="tests/fixtures/runs/smoke", methods=["react"], root=ROOT
    )
    assert set(nb.runs["method"]) == {"react"} and nb.runs["run"].nunique() == 2


def test_setup_without_runs_root_loads_and_prints_nothing(tmp_path, capsys):
    nb = notebook.setup("run", output_dir="o", modes=("load", "run"), root=tmp_path)
    assert nb.runs.empty and nb.loaded_from is None and capsys.readouterr().out == ""


def test_setup_run_mode_needs_a_profile(tmp_path):
    with pytest.raises(ValueError, match="mode 'run' needs run_profile"):
        notebook.setup("run", output_dir="o", runs_root="x", root=tmp_path)


@pytest.mark.slow
def test_notebooks_on_your_own_runs_write_beside_them_and_never_over_a_profile(tmp_path, capsys):
    """Issue 42: `notebooks --only 01_main_results` replaced make run's tables with the fixtures'; --runs points
    the run-loading notebooks at a user's runs and writes into a folder of their own."""
    import shutil

    from antipersist_lib.cli import main
    from antipersist_lib.runner.notebooks_runner import default_runs_output

    mine = tmp_path / "my_runs"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "smoke", mine)
    profile_out = ROOT / "outputs" / "01_main_results" / "smoke"
    before = {p: p.stat().st_mtime_ns for p in profile_out.rglob("*")} if profile_out.exists() else {}
    assert main(["notebooks", "--runs", str(mine), "--only", "01_main_results", "--out", str(tmp_path / "nb")]) == 0
    executed = tmp_path / "nb" / "01_main_results" / "01_main_results.ipynb"
    assert executed.exists() and str(mine) in executed.read_text()  # it read the user's runs
    assert list((tmp_path / "nb" / "01_main_results").glob("*.csv"))
    after = {p: p.stat().st_mtime_ns for p in profile_out.rglob("*")} if profile_out.exists() else {}
    assert after == before  # the profile's own outputs were not touched
    assert default_runs_output("outputs/runs", ROOT) == ROOT / "outputs" / "notebooks" / "outputs_runs"
    capsys.readouterr()
    assert main(["notebooks", "--runs", str(mine), "--only", "09_arc_stream"]) == 2
    assert "do not load run directories" in capsys.readouterr().err
    assert main(["notebooks", "--out", str(tmp_path)]) == 2 and "--out goes with --runs" in capsys.readouterr().err
