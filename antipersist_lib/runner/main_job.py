"""The README's main command: a small but complete experiment on the embedded default.

Starts the embedded backbone and embedder, runs every (benchmark, method, seed) of a profile
(``params/main/smoke.yaml``) through the real protocol, writes the run directories and a results
table that names the backbone and says how far it is from the paper's, and prints where
everything is. Everything it writes is labelled with the backbone that produced it.

The profile and the runs it names are ``runner.main_profile``; the expert pools its memory designs start
from, ``runner.seed_pools``; the rows and tables it writes, ``runner.main_tables``. This module starts the
servers and makes the runs: restarts of a server that dies, wall time, a ``STOP`` file.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from antipersist_lib.errors import EmbeddedServerError, LLMUnavailableError
from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.runner.main_profile import execution_order, judge_model, load_profile, profile_specs, setting
from antipersist_lib.runner.main_tables import model_title, recorded_backbone, recorded_summaries, run_row, write_tables
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.seed_pools import ensure_seed_pools
from antipersist_lib.runner.spec import RunSpec, work_left
from antipersist_lib.serving.embedded import EMBEDDER_MODEL, WEAK_MODEL_NOTE, EmbeddedBackbone, EmbeddedEmbedder
from antipersist_lib.serving.profiles import NamedEndpoint

#: where the wall time of every run is added up across invocations (a resumed run's sessions together)
WALL_FILE = "run_seconds.json"
MAX_BACKBONE_RESTARTS = 3
#: the key of ``WALL_FILE`` that holds the study's elapsed time (runs made side by side overlap, so their
#: wall times add up to more than the study took)
ELAPSED_KEY = "_elapsed"
#: a file of this name in the runs root asks a running study to stop once the runs in flight end (no new run
#: starts; re-running resumes): ``touch <runs root>/STOP``. The study removes it when it stops.
STOP_FILE = "STOP"


def _read_seconds(path: Path) -> dict[str, float]:
    if not path.exists():
        return {}
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
    except (ValueError, AttributeError) as exc:
        raise ValueError(
            f"{path}: not a mapping of run folders to seconds ({exc}); delete it to start the count anew"
        ) from exc


def _run_key(spec: RunSpec, runs_root: Path) -> str:
    """A run's folder relative to the runs root (the same key wherever the root is checked out)."""
    return str(Path(spec.run_dir()).relative_to(runs_root))


def profile_runs(
    profile_path: str | Path, *, out: str | Path = "outputs/main", runs: str | Path | None = None
) -> tuple[dict[str, Any], list[RunSpec], EmbeddedBackbone, NamedEndpoint | None, Path]:
    """(profile, its runs, the embedded backbone, the judge, the runs' folder) of a main-job profile; starts
    nothing (``run_main`` runs them, ``--plan`` prices them)."""
    prof = load_profile(profile_path)
    folder = Path(out) / Path(profile_path).stem
    runs_root = Path(runs) if runs is not None else folder / "runs"
    judge = judge_model(prof, profile_path)
    bb = EmbeddedBackbone.from_options(dict(prof.get("backbone", {}) or {}), log_path=folder / "llama_server.log")
    specs = profile_specs(prof, backbone_label=bb.label, runs_root=runs_root, cache_dir=folder / "cache", judge=judge)
    return prof, specs, bb, judge, runs_root


def run_main(
    profile_path: str | Path = "params/main/smoke.yaml",
    *,
    out: str | Path = "outputs/main",
    runs: str | Path | None = None,
    execute_notebooks: bool = True,
    report_only: bool = False,
) -> dict[str, Any]:
    """Run (or resume) every run of a main-job profile on the embedded default and write the results
    table; ``runs``: where the run directories live (default ``<out>/<profile>/runs``). When every run is
    already complete (e.g. a committed study), nothing is started: the tables are recomputed from the
    recorded episodes, without a model call. ``report_only``: start nothing whatever is left, and write the
    tables of the runs that are complete (a study in progress, read while it runs elsewhere)."""
    prof, specs, bb, judge, runs_root = profile_runs(profile_path, out=out, runs=runs)
    name = Path(profile_path).stem
    out = Path(out) / name
    out.mkdir(parents=True, exist_ok=True)
    seconds_path = runs_root / WALL_FILE
    seconds = _read_seconds(seconds_path)
    pending = execution_order(
        [spec for spec in specs if work_left(spec)], prof.get("run_order", "benchmark"), prof.get("seeds", [42])
    )
    n_profile = len(specs)
    t0 = time.monotonic()
    rows: list[dict[str, Any]] = []
    restarts: list[dict[str, Any]] = []
    if report_only:
        done = [spec for spec in specs if spec not in pending]
        print(f"{len(done)} of {len(specs)} runs are complete: their tables, no model is started")
        if not done:
            raise ValueError(f"no run of {profile_path} under {runs_root} is complete yet: nothing to report")
        described = recorded_backbone(done)
        specs, pending = done, []
    elif pending:
        print(f"{len(pending)} of {len(specs)} runs have work left; starting the embedded default")
        described = _run_pending(
            specs,
            pending,
            bb,
            judge,
            runs_root,
            seconds,
            seconds_path,
            restarts,
            int(prof.get("run_concurrency", 1)),
            prepare=lambda spec: ensure_seed_pools(prof, [spec], runs_root),
        )
        left = [spec for spec in specs if work_left(spec)]
        if left:  # stopped on request (STOP_FILE) before every run was made: report the complete ones
            print(f"stopped with {len(left)} of the {len(specs)} runs still to make; re-run the same command to resume")
            report_only = True
            specs = [spec for spec in specs if spec not in left]
    else:
        print(f"every one of the {len(specs)} runs under {runs_root} is complete: recomputing, no model is started")
        described = recorded_backbone(specs)
    display = bb.display_name if pending else f"{model_title(described)} (embedded llama.cpp, {described['server']})"
    for spec in specs:
        rows.append(run_row(spec, recorded_summaries(spec), display, seconds.get(_run_key(spec, runs_root))))
    wall = time.monotonic() - t0
    study_s = sum(seconds.get(_run_key(spec, runs_root), 0.0) for spec in specs)
    elapsed_s = seconds.get(ELAPSED_KEY)
    write_tables(out, name, prof, rows, described, display, wall, study_s, elapsed_s, n_profile)
    summary = {
        "profile": str(profile_path),
        "backbone": display,
        "backbone_label": bb.label,
        "embedded_backbone": described,
        "embedder": EMBEDDER_MODEL,
        "note": WEAK_MODEL_NOTE,
        "wall_s": round(wall, 1),
        "study_s": round(study_s, 1),
        "elapsed_s": None if elapsed_s is None else round(elapsed_s, 1),
        "recomputed_only": not pending,
        "runs_reported": len(specs),
        "runs_in_profile": n_profile,
        "runs_root": str(runs_root),
        "max_steps": {b: setting(prof, b, "max_steps", 4) for b in prof.get("benchmarks", [])},
        "backbone_restarts": restarts,
        "rows": rows,
        # the benchmark whose Anti-Persistence run the command line walks through (Appendix C), if any
        "walkthrough": prof.get("walkthrough"),
    }
    atomic_write_json(out / "results.json", summary)
    if not execute_notebooks or report_only:
        return summary
    from antipersist_lib.runner.notebooks_runner import execute_on_runs

    # beside the job's own results (outputs/main/<profile>/notebooks/<notebook>/), never over a profile's
    executed = execute_on_runs(
        runs_root,
        profile=str(prof.get("notebook_profile", "smoke")),
        only=prof.get("notebooks"),
        out=out / "notebooks",
    )
    summary["notebooks"] = [str(e.output) for e in executed]
    atomic_write_json(out / "results.json", summary)
    return summary


def _run_pending(
    specs: list[RunSpec],
    pending: list[RunSpec],
    bb: EmbeddedBackbone,
    judge: NamedEndpoint | None,
    runs_root: Path,
    seconds: dict[str, float],
    seconds_path: Path,
    restarts: list[dict[str, Any]],
    concurrency: int = 1,
    prepare: Any = None,
) -> dict[str, Any]:
    """Start the embedded default and run (resume) the runs with work left, ``concurrency`` at a time (in
    profile order), adding each run's wall time to ``seconds_path`` after every episode (so an interrupted
    study keeps what it spent) and the study's elapsed time under ``ELAPSED_KEY``. ``prepare(spec)`` runs
    before a run starts, one at a time (it builds the run's seed pool when it has none yet)."""
    # One BLAS thread: the llama.cpp server keeps a core busy, and a multi-threaded BLAS waiting
    # for that core stalls every similarity product (measured: 24 ms vs 0.7 ms at 500 records).
    with threadpool_limits(limits=1), bb, EmbeddedEmbedder() as em:
        described = bb.describe()
        features = ", ".join(described["llama_cpp_build"]["features"] or [])
        print(
            f"embedded backbone up: {bb.display_name} at {bb.base_url} (model sha256 {bb.model.sha256[:12]}..., "
            f"llama.cpp baseline {bb.build.baseline}: {features}; first token in {bb.first_token_s} s); "
            f"embedder {EMBEDDER_MODEL} at {em.base_url}"
        )
        print(f"note: {WEAK_MODEL_NOTE}")
        clock = _WallClock(runs_root, seconds, seconds_path)
        numbered = {id(spec): n for n, spec in enumerate(pending, 1)}
        preparing = threading.Lock()  # two runs of one seed share its pool: it is built once

        def one(spec: RunSpec, restartable: bool) -> None:
            print(
                f"run {numbered[id(spec)]} of the {len(pending)} with work left ({len(specs)} in the profile): "
                f"{spec.run_dir()}",
                flush=True,
            )
            if prepare is not None:
                with preparing:
                    prepare(spec)
            count = clock.counter(spec)
            try:
                _run_one(spec, bb, em, judge, restarts, on_event=count, restartable=restartable)
            finally:
                count()

        stop = runs_root / STOP_FILE
        if concurrency <= 1:
            for spec in pending:
                if stop_requested(stop):
                    break
                one(spec, restartable=True)
        else:
            _run_side_by_side(pending, concurrency, bb, restarts, lambda spec: one(spec, restartable=False), stop=stop)
    return described


def stop_requested(stop: Path | None) -> bool:
    """True (once, removing the file) when ``stop`` exists: the study starts no new run."""
    if stop is None or not stop.exists():
        return False
    print(f"found {stop}: the runs in flight finish, no new run starts (re-run to resume)", flush=True)
    stop.unlink(missing_ok=True)
    return True


class _WallClock:
    """Each run's wall time and the study's elapsed time, saved to ``WALL_FILE`` after every episode."""

    def __init__(self, runs_root: Path, seconds: dict[str, float], path: Path) -> None:
        self.runs_root, self.seconds, self.path = runs_root, seconds, path
        self.lock = threading.Lock()
        self.last_elapsed = time.monotonic()

    def counter(self, spec: RunSpec) -> Any:
        key = _run_key(spec, self.runs_root)
        last = [time.monotonic()]

        def count(*_: Any) -> None:
            """Add the time since the last count to the run's total (and the study's) and save both: after every
            episode, so a study killed without warning (SIGTERM, SIGKILL) keeps all but its last episode's time."""
            with self.lock:
                now = time.monotonic()
                self.seconds[key] = self.seconds.get(key, 0.0) + (now - last[0])
                self.seconds[ELAPSED_KEY] = self.seconds.get(ELAPSED_KEY, 0.0) + (now - self.last_elapsed)
                last[0] = self.last_elapsed = now
                atomic_write_json(self.path, {k: round(v, 1) for k, v in sorted(self.seconds.items())})

        return count


def _run_side_by_side(
    pending: list[RunSpec],
    concurrency: int,
    bb: EmbeddedBackbone,
    restarts: list[dict[str, Any]],
    one: Any,
    stop: Path | None = None,
) -> None:
    """Run ``pending`` ``concurrency`` at a time, in order. A dead server fails every run in flight: they are
    let finish failing, the server is restarted once from this (the main) thread, so that it stays tied to
    the kit's process, and those runs resume first. Any other error stops the study once the runs in flight
    have ended (completed work is saved; re-running resumes). A ``stop`` file (``STOP_FILE``) that appears
    lets the runs in flight finish and starts no new one."""
    queue = list(pending)
    deaths = 0
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="run") as pool:
        running: dict[Future[None], RunSpec] = {}
        failure: BaseException | None = None
        while queue or running:
            if queue and stop_requested(stop):
                queue.clear()
            while queue and len(running) < concurrency and failure is None:
                spec = queue.pop(0)
                running[pool.submit(one, spec)] = spec
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                spec = running.pop(fut)
                exc = fut.exception()
                if exc is None:
                    continue
                if isinstance(exc, LLMUnavailableError) and bb.exit_code is not None:
                    queue.insert(0, spec)  # the server died under it: resume it after the restart
                elif failure is None:
                    failure = exc
            if bb.exit_code is not None and failure is None:
                for fut in list(running):  # every run in flight fails against a dead server: let them
                    fut.exception()
                    queue.insert(0, running.pop(fut))
                report = bb.crash_report("it died during the study")
                deaths += 1
                if deaths > MAX_BACKBONE_RESTARTS:
                    raise EmbeddedServerError(
                        f"{report}\n(it died {deaths} times; completed work is saved, re-running resumes)"
                    )
                print(f"{report}\nrestarting it and resuming the runs in flight", flush=True)
                restarts.append({"run": str(queue[0].run_dir()), "exit_code": bb.exit_code})
                bb.restart()
            if failure is not None and not running:
                raise failure


def _run_one(
    spec: RunSpec,
    bb: EmbeddedBackbone,
    em: EmbeddedEmbedder,
    judge: NamedEndpoint | None,
    restarts: list,
    on_event: Any = None,
    restartable: bool = True,
) -> None:
    """One run; a server that dies under it is restarted here (``restartable``: serial runs, on the main
    thread) or the error goes to the caller (runs side by side: ``_run_side_by_side`` restarts it once)."""
    for attempt in range(MAX_BACKBONE_RESTARTS + 1):
        try:
            run_cell(
                spec,
                endpoint=bb.endpoint,
                embed_endpoint=em.endpoint,
                judge_endpoint=judge.endpoint if spec.judge else None,
                backbone_info=bb.describe(),
                on_event=on_event,
            )
            return
        except LLMUnavailableError as exc:
            code = bb.exit_code
            if code is None or not restartable:
                raise  # the server is alive: stop, resumable
            report = bb.crash_report(f"it died during run {spec.run_dir()}")
            if attempt == MAX_BACKBONE_RESTARTS:
                raise EmbeddedServerError(
                    f"{report}\n(it died {attempt + 1} times; completed work is saved, re-running resumes)"
                ) from exc
            print(f"{report}\nrestarting it and resuming the run")
            restarts.append({"run": str(spec.run_dir()), "exit_code": code})
            bb.restart()
