"""The ARC grader's child program is a module file (``arc/sandbox_child.py``) whose source text the grader passes
to ``python -I -S -c``: it must stay standard-library only and run nothing when imported."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from antipersist_lib.arc import sandbox, sandbox_child

SOURCE = Path(sandbox_child.__file__).read_text(encoding="utf-8")


def test_the_grader_runs_exactly_the_child_file():
    assert sandbox._RUNNER == SOURCE


def test_the_child_imports_only_the_standard_library():
    names = set()
    for node in ast.walk(ast.parse(SOURCE)):
        if isinstance(node, ast.Import):
            names |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, "no relative imports: the sandbox holds no package"
            names.add(node.module.partition(".")[0])
    assert names <= set(sys.stdlib_module_names), sorted(names - set(sys.stdlib_module_names))


def test_importing_the_child_runs_nothing_and_running_it_reads_a_job():
    assert callable(sandbox_child._main) and sandbox_child._as_grid([(1, 2)]) == ([[1, 2]], None)
    assert sandbox_child._as_grid([[True]])[0] is None
    limits = '{"memory_bytes": 268435456, "cpu_seconds": 5, "max_file_bytes": 65536, "max_open_files": 64, '
    limits += '"max_processes": 0, "guards": true}'
    job = '{"preamble": "", "code": "def solve(g):\\n    return g\\n", "inputs": [[[3]]]}'
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", SOURCE, "marker", limits],
        input=job.encode(),
        capture_output=True,
        timeout=60,
    )
    lines = done.stdout.decode().splitlines()
    assert lines == ['{"event":"example","index":0,"kind":"output","output":[[3]]}', '{"event":"done"}'], done
