"""Outcome-log storage: disk size, append time, and how long ``OutcomeLog(path)`` takes to reload.

A resumed run reopens L_k, so reload time is paid on every resume; appends are paid on every
training update. The log is written with the library's own writer (``OutcomeLog.append``, fsync
off) from 4096-dim embeddings of float32 precision, as an embedding endpoint returns them: the
lines go to ``outcome_log.jsonl``, the embeddings to ``outcome_log.emb`` (issue 45; disk size is
the two files together). Then damage is added so the tolerance path runs too: lines of invalid
JSON, with a missing field, a bad mode, a wrong dimension (an old-style inline embedding of 64
numbers), one naming an embedding the binary file does not hold, a torn final line, and a torn
final embedding entry. The reload happens in a fresh subprocess, so its peak RSS (``VmHWM``
after loading minus after imports) is the loader's alone.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.jsonl import EMBEDDING_REF, encode_embedding, sidecar_path
from antipersist_lib.memory.outcome_log import OutcomeLog
from antipersist_lib.records import MODES

from . import row

DIM = 4096
#: per 10,000 records (issue 45): reload, append, disk
TARGET_S_PER_10K = 2.0
TARGET_APPEND_S_PER_10K = 5.0
TARGET_MB_PER_10K = 200.0


def write_log(path: Path, n: int, seed: int = 0) -> int:
    """Write ``n`` valid records with damaged lines among them; returns the damaged-line count."""
    rng = np.random.default_rng(seed)
    log = OutcomeLog(path, fsync=False)
    for i in range(n):
        e = rng.standard_normal(DIM).astype(np.float32)
        log.append(
            embedding=e / np.linalg.norm(e),
            mode=MODES[i % len(MODES)],
            reward=float(rng.uniform(-1, 1)),
            raw_success=bool(i % 3 == 0),
            task_type=f"type{i % 6}",
            task_id=i,
            instruction=f"Your task is to: put a mug {i} on the desk.",
        )
    log.close()
    good = json.loads(path.read_bytes().split(b"\n", 1)[0])
    inline = {
        ("embedding" if k == EMBEDDING_REF else k): ([0.1] * 64 if k == EMBEDDING_REF else v) for k, v in good.items()
    }
    damaged = [
        b'{"embedding_ref": "0f3a',  # invalid JSON mid-file
        json.dumps({k: v for k, v in good.items() if k != "reward"}).encode(),  # missing field
        json.dumps({**good, "mode": "persist"}).encode(),  # unknown mode
        json.dumps(inline).encode(),  # wrong dimension (an old inline line)
        json.dumps({**good, EMBEDDING_REF: "0" * 32}).encode(),  # names no embedding entry
    ]
    lines = path.read_bytes().splitlines(keepends=True)
    for k, bad in enumerate(damaged):  # spread through the file
        lines.insert((k + 1) * len(lines) // (len(damaged) + 1), bad + b"\n")
    path.write_bytes(b"".join(lines) + good["mode"].encode() + b'", "torn')  # torn final line, no newline
    entry = encode_embedding(rng.standard_normal(DIM).astype(np.float32))[1]
    with open(sidecar_path(path), "ab") as fh:  # a torn final embedding entry (a crash mid-write)
        fh.write(entry[: len(entry) // 2])
    return len(damaged) + 1


def _peak_rss_kb() -> int:
    """This process's peak RSS. Linux's VmHWM, because ``ru_maxrss`` survives fork + exec and
    would report the parent's peak; ``ru_maxrss`` elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _load(path: str) -> None:
    """Child-process entry: reload and print one JSON line of measurements."""
    base_kb = _peak_rss_kb()
    t = time.perf_counter()
    log = OutcomeLog(path, fsync=False)
    seconds = time.perf_counter() - t
    peak_kb = _peak_rss_kb()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "records": len(log),
                "skipped": log.skipped_lines,
                "peak_delta_mb": (peak_kb - base_kb) / 1024,
            }
        )
    )


def run(quick: bool = False) -> list[dict[str, Any]]:
    n = 1_000 if quick else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "outcome_log.jsonl"
        t = time.perf_counter()
        damaged = write_log(path, n)
        write_s = time.perf_counter() - t  # the damage written after the appends is a few ms
        size_mb = (path.stat().st_size + sidecar_path(path).stat().st_size) / 2**20
        root = Path(__file__).resolve().parents[1]
        proc = subprocess.run(
            [sys.executable, "-m", "perf.reload", "--load", str(path)],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    if m["records"] != n or m["skipped"] != damaged:
        raise RuntimeError(
            f"reload kept {m['records']} of {n} records and skipped {m['skipped']} of {damaged} damaged lines"
        )
    scale = n / 10_000
    scaled = "" if n == 10_000 else " (targets scaled from 10,000 records)"
    return [
        row(
            "reload",
            f"OutcomeLog(path), {n:,} records + {damaged} damaged lines + a torn embedding entry{scaled}",
            m["seconds"],
            "s",
            ("<", TARGET_S_PER_10K * scale),
        ),
        row("reload", f"peak RSS increase while reloading {n:,} records", m["peak_delta_mb"], "MB"),
        row(
            "reload",
            f"append {n:,} records (OutcomeLog.append, fsync off){scaled}",
            write_s,
            "s",
            ("<", TARGET_APPEND_S_PER_10K * scale),
        ),
        row(
            "reload",
            f"on disk: outcome_log.jsonl + outcome_log.emb, {n:,} records{scaled}",
            size_mb,
            "MB",
            ("<", TARGET_MB_PER_10K * scale),
        ),
    ]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--load":
        _load(sys.argv[2])
    else:
        for r in run("--quick" in sys.argv):
            print(r)
