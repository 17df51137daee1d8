"""``python -m perf [--only NAME] [--quick] [--embedded] [--out DIR]``: run, print, save.

The table is printed and written as ``benchmarks.json`` (rows plus run metadata) and
``benchmarks.md`` under ``--out`` (default ``outputs/benchmarks``); a ``--quick`` run writes
``benchmarks_quick.*`` so it never overwrites the full run's numbers. The paper-grid rehearsal
runs only when named: ``--only rehearsal`` (about half an hour; ``python -m perf.rehearsal --help``
for its own options and output root).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from . import BENCHMARKS, markdown, run_suite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf", description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=tuple(BENCHMARKS), help="run one benchmark (rehearsal: only this way)")
    ap.add_argument("--quick", action="store_true", help="small settings (about a minute)")
    ap.add_argument(
        "--embedded", action="store_true", help="include the embedded llama.cpp tokens/s benchmark (minutes)"
    )
    ap.add_argument("--out", default="outputs/benchmarks", help="folder for benchmarks.json / .md")
    args = ap.parse_args(argv)

    started = time.time()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if load is not None and load > 0.5:
        print(
            f"[benchmarks] warning: load average {load:.2f} at start; other processes will skew the timings",
            file=sys.stderr,
            flush=True,
        )
    rows = run_suite(
        args.only, quick=args.quick, embedded=args.embedded, log=lambda s: print(s, file=sys.stderr, flush=True)
    )
    table = markdown(rows)
    print(table)

    meta = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "wall_s": time.time() - started,
        "quick": args.quick,
        "only": args.only,
        "embedded": args.embedded,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_at_start": load,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "benchmarks_quick" if args.quick else "benchmarks"
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    load_note = "" if load is None else f", load average {load:.2f} at start"
    (out / f"{stem}.md").write_text(
        f"# Benchmarks ({meta['started_at']}, {meta['cpus']} CPUs{load_note}"
        f"{', quick' if args.quick else ''})\n\n{table}",
        encoding="utf-8",
    )
    print(f"wrote {out / (stem + '.json')} and {out / (stem + '.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
