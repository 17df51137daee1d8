"""Planning speed: ``grid params/grid/paper.yaml --plan`` in a fresh interpreter, start to exit.

A user asks what the paper grid costs before deciding to run it; the answer must come at once (target
< 10 s), so the planner reads profiles and run folders only. Measured as the wall time of the real command
line (interpreter start and imports included), the median of three.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any

from . import row

TARGET_S = 10.0


def run(quick: bool) -> list[dict[str, Any]]:
    times = []
    for _ in range(1 if quick else 3):
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "antipersist_lib", "grid", "params/grid/paper.yaml", "--plan", "--totals"],
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - t)
    return [row("planning", "grid paper.yaml --plan (216 runs), wall", statistics.median(times), "s", ("<", TARGET_S))]
