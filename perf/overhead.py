"""Kit overhead per task: mode selection over L_k plus trajectory retrieval from M_k.

Both stores hold ``size`` records with 4096-dimension random (near-)unit embeddings, in one
shared ``EmbeddingPool`` as Anti-Persistence builds them (record i of M_k and of L_k is one
pool row, so one product per task scores both); per task
the benchmark does what Anti-Persistence's ``prepare`` does before synthesis:
``ModeSelector.select`` (iteration 4, past round-robin and warmup) and then
``TrajectoryStore.retrieve`` in the chosen mode. Rewards favour ``corrective``, whose
retrieval is the most expensive (failures plus a contrast success: two searches), so the
median task takes the most expensive path.

How the stores are built, and why: through the public API, a 4096-dim record costs a
validation pass and ~80 KB of JSON, so 2 x 50,000 records would mean ~8 GB of files and
minutes of parsing, and each store keeps every embedding as a tuple of Python floats
(~130 KB a record, ~6.5 GB a store). Instead each record is handed to the store's own
per-record load step (``_add``, what opening a JSONL file calls for every line) with an
embedding whose coordinates are drawn from one shared pool of 65,536 Python float objects:
the matrices hold distinct rows, as loaded stores do, but the tuples share their floats (and
record i of M_k and of L_k share one tuple), so 2 x 50,000 records fit in ~4 GB.
Selection and retrieval read only the matrices and per-row arrays, so the timing is that of
stores loaded from disk. The JSONL load path itself is measured by ``reload``.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time
from typing import Any

import numpy as np

try:  # optional (a dependency of the embedding stack): lets one run pin BLAS to one thread
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover
    threadpool_limits = None

from antipersist_lib.core.selector import ModeSelector
from antipersist_lib.memory.outcome_log import OutcomeLog, OutcomeRecord
from antipersist_lib.memory.similarity import EmbeddingPool
from antipersist_lib.memory.trajectory_store import MemoryRecord, TrajectoryStore
from antipersist_lib.records import MODES, EpisodeOutcome, Step, Task, Trajectory

from . import row

DIM = 4096
TASK_TYPES = ("pick", "clean", "heat", "cool", "examine", "pick_two")  # ALFWorld's six categories
TARGETS_MS = {500: 1.0, 50_000: 20.0}  # 50,000: one exact 819 MB pass (issue 45), was 10 ms
_TRAJ = Trajectory("You are in the middle of a room.", (Step("go to desk 1", "On the desk 1 you see a mug 1."),) * 8)
_OUTCOME = {True: EpisodeOutcome(True, 1.0, 8), False: EpisodeOutcome(False, 0.0, 50, over_budget=True)}


def _task(i: int) -> Task:
    return Task(i, "alfworld", TASK_TYPES[i % len(TASK_TYPES)], f"Your task is to: put a mug {i} in the desk.")


def build(size: int, seed: int = 0) -> tuple[TrajectoryStore, OutcomeLog]:
    """M_k and L_k with ``size`` records each (in memory; see the module docstring)."""
    rng = np.random.default_rng(seed)
    pool = (rng.standard_normal(1 << 16) / np.sqrt(DIM)).tolist()  # norms are 1 +- ~1%
    shared = EmbeddingPool(dedupe=True)  # as AntiPersistence shares it between its two stores
    memory, log = TrajectoryStore(None, pool=shared), OutcomeLog(None, pool=shared)
    for i in range(size):
        emb = tuple(map(pool.__getitem__, rng.integers(len(pool), size=DIM).tolist()))
        task, success, mode = _task(i), bool((i // len(TASK_TYPES)) % 2), MODES[i % len(MODES)]
        memory._add(MemoryRecord(i, task, _TRAJ, _OUTCOME[success], emb, iteration=1 + i // 50, mode=mode))
        reward = float(rng.uniform(-0.5, 0.5)) + (0.4 if mode == "corrective" else 0.0)
        log._add(OutcomeRecord(emb, mode, reward, success, task.task_type, i, task.instruction, timestamp=i))
    return memory, log


def per_task_seconds(
    memory: TrajectoryStore, log: OutcomeLog, tasks: int, seed: int = 1, warmup: int = 3
) -> list[float]:
    """Wall time of select + retrieve for each of ``tasks`` random query tasks."""
    selector = ModeSelector()
    rng = np.random.default_rng(seed)
    times = []
    for j in range(warmup + tasks):
        q = rng.standard_normal(DIM)
        q /= np.linalg.norm(q)
        task = _task(10**6 + j)
        t = time.perf_counter()
        decision = selector.select(log, q, iteration=4, position=j, rng=np.random.default_rng([0, 4, j]))
        memory.retrieve(q, decision.mode, task, budget=5, contrast=1)
        if j >= warmup:  # the first call after appends rebuilds per-row arrays once
            times.append(time.perf_counter() - t)
    return times


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Median per-task time with numpy's default BLAS threads (what the kit runs with; the
    target row) and with BLAS limited to one thread: on 2 cores with the other core busy (say,
    the embedded llama.cpp server) a 2-thread mat-vec can stall for a scheduler time slice."""
    sizes, tasks = ((500, 5_000), 20) if quick else ((500, 5_000, 50_000), 50)
    rows = []
    for size in sizes:
        t = time.perf_counter()
        memory, log = build(size)
        build_s = time.perf_counter() - t
        median_ms = 1e3 * statistics.median(per_task_seconds(memory, log, tasks))
        target = ("<", TARGETS_MS[size]) if size in TARGETS_MS else None
        rows.append(
            row("overhead", f"select + retrieve, {size:,} records, median of {tasks} tasks", median_ms, "ms", target)
        )
        if threadpool_limits is not None:
            with threadpool_limits(limits=1, user_api="blas"):
                one_ms = 1e3 * statistics.median(per_task_seconds(memory, log, tasks))
            rows.append(row("overhead", f"select + retrieve, {size:,} records, BLAS limited to 1 thread", one_ms, "ms"))
        rows.append(row("overhead", f"build M_k + L_k, {size:,} records each", build_s, "s"))
        del memory, log
    return rows


def profile(size: int, tasks: int = 10, top: int = 20) -> None:
    """Print where per-task time goes at one size (``python -m perf.overhead --profile N``)."""
    memory, log = build(size)
    per_task_seconds(memory, log, 1)
    pr = cProfile.Profile()
    pr.enable()
    per_task_seconds(memory, log, tasks, warmup=0)
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(top)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--profile":
        profile(int(sys.argv[2]))
    else:
        for r in run("--quick" in sys.argv):
            print(r)
