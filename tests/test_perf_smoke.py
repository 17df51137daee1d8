"""The benchmark suite runs end to end in --quick mode and reports a number for every row.

Timing targets are the suite's output, not assertions here: this only proves the command works
and the table is complete (every benchmark present, every measurement numeric and finite).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

# `benchmarks` is a top-level folder (not part of the installed package); pytest's
# `pythonpath = ["."]` (pyproject.toml) makes it importable from the repository root
from perf import BENCHMARKS, COLUMNS, OPTIONAL, markdown, row
from perf.__main__ import main


def test_quick_suite_writes_a_complete_table(tmp_path, capsys):
    assert main(["--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "benchmarks_quick.json").read_text())
    rows = data["rows"]
    assert {r["benchmark"] for r in rows} == set(BENCHMARKS) - OPTIONAL
    for r in rows:
        assert set(r) == set(COLUMNS)
        assert isinstance(r["measured"], float) and math.isfinite(r["measured"]), r
    with_target = [r for r in rows if r["target"] is not None]
    assert {r["benchmark"] for r in with_target} == {"saturation", "overhead", "reload", "planning"}
    assert all(isinstance(r["pass"], bool) and r["ratio"] > 0 for r in with_target)
    table = markdown(rows)
    assert table.count("\n") == len(rows) + 2  # header, rule, one line per row
    assert table in capsys.readouterr().out
    assert (tmp_path / "benchmarks_quick.md").read_text().endswith(table)


def test_ratio_is_oriented_so_that_one_or_more_meets_the_target():
    assert row("b", "s", 0.9, "x", (">=", 0.9))["pass"] is True
    assert row("b", "s", 0.45, "x", (">=", 0.9))["ratio"] == 0.5
    fast, slow = row("b", "s", 0.5, "ms", ("<", 1.0)), row("b", "s", 2.0, "ms", ("<", 1.0))
    assert (fast["ratio"], fast["pass"]) == (2.0, True) and (slow["ratio"], slow["pass"]) == (0.5, False)
    assert row("b", "s", 3.0, "s")["pass"] is None


def _tiny_project(root: Path, broken: bool = False) -> Path:
    """A C project laid out like llama.cpp's tree: a CPU-backend file, a common file, a server executable."""
    (root / "ggml" / "src" / "ggml-cpu").mkdir(parents=True)
    (root / "common").mkdir()
    (root / "ggml" / "src" / "ggml-cpu" / "vec.c").write_text("int vec(int x) { return 2 * x; }\n")
    (root / "common" / "arg.c").write_text("int arg(void) { return 1; }\n" + ("not C at all\n" if broken else ""))
    (root / "main.c").write_text("int vec(int); int arg(void);\nint main(void) { return vec(arg()) - 2; }\n")
    (root / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.14)\nproject(tiny C)\n"
        "add_executable(tiny-server main.c ggml/src/ggml-cpu/vec.c common/arg.c)\n"
    )
    return root


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None, reason="needs cmake and a C compiler")
def test_the_compile_profile_times_every_unit_and_groups_them_by_part(tmp_path, monkeypatch):
    from perf.compile_profile import by_part, timed_build

    src = _tiny_project(tmp_path / "src")
    monkeypatch.chdir(tmp_path)  # folders given relative to where the command starts, as --out is
    units, configured, wall = timed_build(
        Path("src"), Path("build"), [], targets=("tiny-server",), jobs=1, out=Path(".")
    )
    assert sorted(Path(u["source"]).name for u in units) == ["arg.c", "main.c", "vec.c"]
    assert all(u["exit"] == 0 and u["user_s"] >= 0 and u["wall_s"] > 0 for u in units)
    assert set(by_part(units, src)) == {"ggml CPU backend", "common", "other"}
    assert 0 < configured < wall
    assert subprocess.run([str(tmp_path / "build" / "tiny-server")]).returncode == 0  # the launcher built it right

    broken = _tiny_project(tmp_path / "broken", broken=True)
    with pytest.raises(subprocess.CalledProcessError):  # a failing compile fails the build through the launcher
        timed_build(broken, tmp_path / "build2", [], targets=("tiny-server",), jobs=1, out=tmp_path)
    failed = [json.loads(x) for x in (tmp_path / "units-build2.jsonl").read_text().splitlines()]
    assert any(u["exit"] != 0 and u["source"].endswith("arg.c") for u in failed)


def test_the_spread_rows_split_the_episodes_over_processes_that_evaluate_together():
    from perf import loopback_process
    from perf.saturation import spread

    proc, url = loopback_process.start("perf.saturation", 0.2)
    try:
        with pytest.raises(ValueError, match="split evenly"):
            spread(url, 6, 8, 2, 4)
        # two runs of 4 episodes x 2 steps, 2 in flight each: every call is checked by `measure` (the
        # ledger of each run holds exactly its first-try calls); evaluated together, the window is about
        # ceil(4 / 2) * 2 * 0.2 s = 0.8 s, not the 1.6 s of two runs one after the other
        wall, cpu = spread(url, 4, 8, 2, 2)
    finally:
        loopback_process.stop(proc)
    assert 0.8 <= wall < 1.4 and cpu > 0
