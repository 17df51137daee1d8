"""The benchmark suite runs end to end in --quick mode and reports a number for every row.

Timing targets are the suite's output, not assertions here: this only proves the command works
and the table is complete (every benchmark present, every measurement numeric and finite).
"""

from __future__ import annotations

import json
import math

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
