"""Server saturation: does concurrent held-out evaluation keep a fixed-latency server busy?

The kit's real path (``protocol.Runner`` -> ``_evaluate``'s thread pool -> ``run_episode`` ->
``LLMClient``) runs ReAct on ErrandWorld, N held-out episodes of exactly S steps (the scripted
reply is always ``look``, which never finishes a task), against the loopback server with a
fixed per-call latency. Only ``_evaluate`` is timed (a subclass wraps it), so training, setup
and summaries do not count.

efficiency = ideal / measured, ideal = ceil(N / C) * S * latency: 1.0 means every worker
always had a request in flight. The server runs in its own process, as a real model server
would, so its request handling does not compete with the client for the GIL. Context rows:
the one-at-a-time efficiency (1/C), the client's CPU per call, at the highest C its CPU busy
fraction, and at each C with a target a control that sends the same calls from bare
``http.client`` threads.

The spread rows split the same N episodes and C in-flight calls over P processes, one run each,
as a grid's process pool runs them (``grid.max_parallel`` runs, each with its own held-out threads):
every process builds its run, waits at a barrier, then evaluates; the efficiency counts from the
first process's start to the last one's end. They measure what processes buy over one interpreter's
lock on this machine.
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import multiprocessing as mp
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from antipersist_lib.envs.errand_world import partition
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import Runner
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint

from . import loopback_process, row

REPLY = "Thought: I look around.\nAction: look"
CONCURRENCY = (1, 4, 16, 64)
#: process counts of the spread rows, at each concurrency with a target
SPREAD_PROCESSES = (2, 4)
TARGETS = {16: 0.9, 64: 0.8}


class _TimedRunner(Runner):
    """A Runner that records the wall and process-CPU time of held-out evaluation only (after
    ``barrier``, when given: the processes of a spread measurement start evaluating together)."""

    barrier: Any = None

    def _evaluate(self, *args: Any, **kwargs: Any) -> None:
        if self.barrier is not None:
            self.barrier.wait(timeout=120)
        self.eval_started = time.time()
        wall, cpu = time.perf_counter(), time.process_time()
        super()._evaluate(*args, **kwargs)
        self.eval_wall_s = time.perf_counter() - wall
        self.eval_cpu_s = time.process_time() - cpu


def measure(url: str, concurrency: int, n: int, steps: int, barrier: Any = None) -> tuple[float, float, float]:
    """(held-out wall seconds, client process CPU seconds, held-out start as epoch seconds) for one
    concurrency level."""
    with tempfile.TemporaryDirectory() as tmp:
        ep = Endpoint(base_url=url, model="loopback", api_key_env="ANTIPERSIST_BENCH_KEY")
        spec = RunSpec(
            method="react",
            benchmark="errandworld",
            backbone="loopback",
            embedding="loopback",
            iterations=1,
            train_per_iteration=1,
            max_steps=steps,
            heldout_concurrency=concurrency,
            out_root=tmp,
            cache_dir=None,
            progress=False,
        )
        runner = _TimedRunner(spec, endpoint=ep, embed_endpoint=ep, partition=partition(n_train=1, n_heldout=n))
        runner.barrier = barrier
        runner.run()
        calls = [
            x.value
            for x in read_jsonl(RunDirectory(spec.run_dir()).calls_path)
            if x.value["tags"].get("phase") == "heldout"
        ]
    # the ideal assumes exactly N*S first-try calls; anything else would make the number meaningless
    if len(calls) != n * steps or any(c["retries"] or c["cached"] for c in calls):
        raise RuntimeError(
            f"expected {n * steps} uncached first-try calls, the ledger has {len(calls)} "
            f"({sum(c['retries'] for c in calls)} retries)"
        )
    return runner.eval_wall_s, runner.eval_cpu_s, runner.eval_started


_BARRIER: Any = None


def _spread_worker_init(barrier: Any) -> None:
    global _BARRIER
    _BARRIER = barrier


def _spread_worker(args: tuple[str, int, int, int]) -> tuple[float, float, float]:
    return measure(*args, barrier=_BARRIER)


def spread(url: str, concurrency: int, n: int, steps: int, processes: int) -> tuple[float, float]:
    """(wall seconds from the first process's held-out start to the last one's end, CPU seconds of
    all processes) for N episodes and C in-flight calls split evenly over ``processes`` runs."""
    if concurrency % processes or n % processes:
        raise ValueError(f"C={concurrency} and N={n} must split evenly over {processes} processes")
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(processes)
    share = (url, concurrency // processes, n // processes, steps)
    with ctx.Pool(processes, initializer=_spread_worker_init, initargs=(barrier,)) as pool:
        results = pool.map(_spread_worker, [share] * processes)
    start = min(r[2] for r in results)
    return max(r[2] + r[0] for r in results) - start, sum(r[1] for r in results)


def raw_http(url: str, concurrency: int, n: int, steps: int) -> float:
    """Control without the kit: ``concurrency`` threads post the same chat calls with bare
    ``http.client`` (one kept-alive connection each); returns wall seconds. If this reaches the
    ideal while the kit does not, the server is not the bottleneck."""
    host, port = urlsplit(url).hostname, urlsplit(url).port
    body = json.dumps({"model": "loopback", "messages": [{"role": "user", "content": "look"}]})

    def worker(episodes: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=30)
        for _ in range(episodes * steps):
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            conn.getresponse().read()
        conn.close()

    share = [n // concurrency + (i < n % concurrency) for i in range(min(concurrency, n))]
    t = time.perf_counter()
    with ThreadPoolExecutor(len(share)) as pool:
        list(pool.map(worker, share))
    return time.perf_counter() - t


def run(quick: bool = False) -> list[dict[str, Any]]:
    n, steps, latency = (16, 3, 0.05) if quick else (64, 5, 0.05)
    proc, url = loopback_process.start("perf.saturation", latency)
    rows = []
    try:
        for c in CONCURRENCY:
            wall, cpu, _ = measure(url, c, n, steps)
            ideal = math.ceil(n / c) * steps * latency
            capped = f" ({n} workers: only {n} episodes)" if c > n else ""
            setting = f"C={c}, {n} episodes x {steps} steps @ {1e3 * latency:g} ms{capped}"
            tgt = (">=", TARGETS[c]) if c in TARGETS else None
            rows.append(row("saturation", setting, ideal / wall, "efficiency", tgt))
            rows.append(
                row("saturation", f"C={c}: one-at-a-time efficiency (1/C)", ideal / (n * steps * latency), "efficiency")
            )
            rows.append(row("saturation", f"C={c}: client CPU per call", 1e3 * cpu / (n * steps), "ms"))
        # at the highest concurrency (the loop's last c, wall, cpu): near 1.0 means the client
        # process was on a CPU the whole time, i.e. CPU-bound under the GIL
        rows.append(row("saturation", f"C={c}: client CPU busy fraction (CPU s / wall s)", cpu / wall, "fraction"))
        for k in TARGETS:  # what a client doing nothing but HTTP reaches on this machine and server
            control = math.ceil(n / k) * steps * latency / raw_http(url, k, n, steps)
            rows.append(
                row(
                    "saturation",
                    f"C={k} control: same calls from bare http.client threads (no kit)",
                    control,
                    "efficiency",
                )
            )
        for k, p in itertools.product(TARGETS, SPREAD_PROCESSES) if not quick else ():
            wall, cpu = spread(url, k, n, steps, p)
            rows.append(
                row(
                    "saturation",
                    f"C={k} spread over {p} processes ({k // p} in flight each, one run per process as a grid runs them)",
                    math.ceil(n / k) * steps * latency / wall,
                    "efficiency",
                    (">=", TARGETS[k]),
                )
            )
            rows.append(
                row("saturation", f"C={k} over {p} processes: client CPU per call", 1e3 * cpu / (n * steps), "ms")
            )
    finally:
        loopback_process.stop(proc)
    if not quick:
        rows += _model_like_latency()
    return rows


def _model_like_latency(n: int = 64, steps: int = 3, latency: float = 0.5) -> list[dict[str, Any]]:
    """The same measurement at a latency closer to a real model call (a short vLLM reply takes
    0.5-2 s): the client's few ms of CPU per call then no longer dominate."""
    proc, url = loopback_process.start("perf.saturation", latency)
    rows = []
    try:
        for c in (16, 64):
            wall, _, _ = measure(url, c, n, steps)
            ideal = math.ceil(n / c) * steps * latency
            rows.append(
                row(
                    "saturation",
                    f"C={c}, {n} episodes x {steps} steps @ {1e3 * latency:g} ms",
                    ideal / wall,
                    "efficiency",
                    (">=", TARGETS[c]),
                )
            )
    finally:
        loopback_process.stop(proc)
    return rows


def _serve(latency_s: float) -> None:
    """Child-process entry: serve until stdin closes; the first stdout line is the base URL."""
    from antipersist_lib.testing.loopback_server import LoopbackServer, ScriptedResponder

    with LoopbackServer(ScriptedResponder(default=REPLY), latency_s=latency_s) as srv:
        print(srv.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        _serve(float(sys.argv[2]))
    else:
        for r in run("--quick" in sys.argv):
            print(r)
