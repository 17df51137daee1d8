"""The loopback server in a child process, for the benchmarks that time the kit's own client.

In the measured process, the server's threads would share the GIL and the CPU clock with the client,
so a benchmark module runs ``python -m <module> --serve ...`` instead: the child prints its base URL
on its first stdout line and serves until its stdin closes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start(module: str, *args: object) -> tuple[subprocess.Popen[str], str]:
    """Start ``python -m module --serve *args`` and return the process with the URL it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--serve", *map(str, args)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip() if proc.stdout else ""
    if not url.startswith("http"):
        proc.kill()
        raise RuntimeError(f"loopback server process {module} did not start (it said {url!r})")
    return proc, url


def stop(proc: subprocess.Popen[str]) -> None:
    """Close the child's stdin (its signal to exit); kill it if it has not gone after 10 s."""
    if proc.stdin:
        proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
