"""Scale-out: a grid of runs (methods x benchmarks x seeds x backbones) from one params file.

Each run is one task on Ray, a local process pool or this process (``executor``); each calls
``protocol.run_cell``, which writes its own run directory and resumes it if it exists, so running the same
command again returns finished runs at once and continues interrupted ones. Results are the run directories
under ``out_root`` (a shared filesystem on a cluster) plus the driver's ``grid_<name>.json``.

Before any run starts, and before any model call, the whole file is checked: every benchmark's partition (and
AppWorld where used), each run's method for every seed, one model per base URL unless ``shared_server: true``,
and one small request to every distinct endpoint that runs with work left need (``check_endpoints``); a refusal
names what failed and the fix. Backbones, the embedding and the judge may be profile names, profile files or
inline mappings; ``endpoints`` spreads a backbone's runs round-robin over replicas. The user's guide is
docs/scale-out.md; the one-model-per-URL rule and preflight are in docs/protocol.md, "Backbones and vLLM
servers" and "Bring your own server"; the ablation grids in "Ablation grids".
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antipersist_lib.core.skill_layer import SEED_PLACEHOLDER, params_for_seed
from antipersist_lib.envs import BENCHMARKS
from antipersist_lib.envs.partitions import load_partition
from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.methods import METHODS, validate_method_params
from antipersist_lib.profile_fields import (
    ANY,
    BOOL,
    CHOICE,
    INT,
    MAPPING,
    NAMES,
    NUMBER,
    STR,
    TEXT,
    Checker,
    Field,
    Fields,
)
from antipersist_lib.rundir import RunDirectory, count_lines
from antipersist_lib.runner.main_profile import run_plan
from antipersist_lib.runner.spec import (
    AGENT_KEYS,
    PROTOCOL,
    PROTOCOL_KEYS,
    SEEDS,
    VARIANT,
    RunSpec,
    of_types,
    uses_judge,
    work_left,
)
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.serving.preflight import Probe, ProbeResult, distinct, run_preflight
from antipersist_lib.serving.profiles import (
    EMBEDDED,
    GLOBAL_URL_ENV,
    NamedEndpoint,
    named_endpoint,
    profile_label,
    read_mapping,
)

EXECUTORS = ("ray", "process", "serial")
GRID = Fields(
    Field("name", STR, nullable=True),  # default: the file's stem
    Field("methods", NAMES, default=(), choices=tuple(METHODS)),
    Field("variants", MAPPING, what="a mapping of run names to {method, params}"),
    Field("benchmarks", NAMES, required=True, choices=BENCHMARKS),
    SEEDS,
    Field(
        "backbones",
        ANY,
        required=True,
        test=lambda v: isinstance(v, list) and bool(v),
        what="a non-empty list of backbone profile names, profile files or endpoints",
    ),
    Field("embedding", ANY, default="qwen3-embedding-8b"),  # checked by serving.profiles.named_endpoint
    Field("endpoints", MAPPING, what="a mapping of backbone names to lists of base URLs"),
    Field(
        "embedding_endpoints",
        ANY,
        nullable=True,
        test=lambda v: isinstance(v, list) and bool(v) and all(isinstance(u, str) and u for u in v),
        what="a non-empty list of base URLs",
    ),
    *PROTOCOL.fields,
    Field("task_types", MAPPING, what="a mapping of the grid's benchmarks to lists of task types"),
    Field("heldout_set", MAPPING, what="a mapping of the grid's benchmarks to held-out set names"),
    Field("agent", MAPPING, keys=AGENT_KEYS),
    Field("method_params", MAPPING, keys=tuple(METHODS)),
    Field("benchmark_options", MAPPING),
    Field("out_root", STR, default="outputs/runs"),
    Field("cache_dir", TEXT, nullable=True, default="outputs/cache"),  # null or "": no response cache
    Field("executor", CHOICE, default="process", choices=EXECUTORS),
    Field("ray_address", STR, nullable=True),
    Field("max_parallel", INT, default=2, minimum=1),
    Field("cpus_per_run", NUMBER, default=1.0, test=lambda v: v > 0, what="a number > 0"),
    Field("shared_server", BOOL, default=False),
    Field("judge", ANY, nullable=True),  # checked by serving.profiles.named_endpoint
)
#: environment variables a Ray worker needs to see like the driver (never API keys: set those on the
#: nodes); ``forwarded_env`` adds the base-URL variables the grid's profiles name
FORWARDED_ENV = (
    "ALFWORLD_DATA",
    "ANTIPERSIST_PARAMS",
    "ANTIPERSIST_PARTITIONS",
    "APPWORLD_ROOT",
    "ANTIPERSIST_BASE_URL",
    "ANTIPERSIST_EMBED_BASE_URL",
    "JAVA_HOME",
)


@dataclass(frozen=True)
class GridRun:
    """One task of the grid: the run's spec and the endpoints it talks to (``embed_endpoint`` is None for
    ``embedding: embedded``: the run starts the in-process embedder itself; ``judge_endpoint`` is None
    unless the grid names a ``judge`` and the run's method judges)."""

    spec: RunSpec
    endpoint: Endpoint
    embed_endpoint: Endpoint | None
    judge_endpoint: Endpoint | None = None


@dataclass
class Grid:
    name: str
    runs: list[GridRun]
    executor: str = "process"
    ray_address: str | None = None
    max_parallel: int = 2
    cpus_per_run: float = 1.0
    out_root: str = "outputs/runs"
    url_env: tuple[str, ...] = ()  # the base-URL variables named by the grid's endpoints
    notes: list[str] = dataclasses.field(default_factory=list)  # load_grid(plan=True): what is not runnable yet


def forwarded_env(grid: Grid) -> dict[str, str]:
    """The driver's values of ``FORWARDED_ENV`` and of the grid's base-URL variables, for workers."""
    return {k: os.environ[k] for k in (*FORWARDED_ENV, *grid.url_env) if k in os.environ}


@dataclass
class RunOutcome:
    run_dir: str
    method: str
    run_name: str
    benchmark: str
    backbone: str
    seed: int
    status: str  # "ok" | "failed"
    seconds: float
    iterations: int = 0
    heldout_success_final: float | None = None
    mean_calls_final: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _check_one_model_per_url(p: Path, served: list[tuple[str, NamedEndpoint, list[str]]]) -> None:
    """Refuse two endpoints of different models on one base URL (one vLLM server, one model)."""
    seen: dict[str, tuple[str, NamedEndpoint]] = {}
    for what, named, urls in served:
        for url in urls:
            key = url.rstrip("/")
            if key in seen and seen[key][1].endpoint.model != named.endpoint.model:
                other_what, other = seen[key]
                variables = " and ".join(
                    f"${n.url_env}" if n.url_env else f"{n.name}'s base_url" for n in (other, named)
                )
                global_set = [f"${v}" for v in GLOBAL_URL_ENV.values() if os.environ.get(v)]
                unset = (
                    f" (and unset {' and '.join(global_set)}: it sets every profile's URL at once)"
                    if global_set
                    else ""
                )
                raise ValueError(
                    f"{p}: {other_what} {other.name!r} ({other.endpoint.model}) and {what} {named.name!r} "
                    f"({named.endpoint.model}) both resolve to base URL {url}, but a vLLM server serves one model. "
                    f"Start one server per model and point each at its own URL: set {variables}"
                    f"{unset}; or set `shared_server: true` in {p.name} if a router at that URL serves every model."
                )
            seen.setdefault(key, (what, named))


def _check_benchmarks(p: Path, benchmarks: list[Any], data: dict[str, Any]) -> None:
    """Every benchmark known, installed (AppWorld) and with a loadable partition whose training
    pool holds ``train_per_iteration`` tasks, before any call."""

    per_iteration, limit = data["train_per_iteration"], data["train_pool_limit"]
    by_bench = data["task_types"]
    for key in ("task_types", "heldout_set"):
        if not set(data[key]) <= set(benchmarks):
            raise ValueError(f"{p}: {key} must map benchmarks of this grid ({benchmarks}), got {data[key]!r}")
    for b in benchmarks:
        try:
            if b == "appworld":
                from antipersist_lib.envs.appworld import require_appworld

                require_appworld()
            part = load_partition(b)
        except Exception as exc:  # missing file, malformed file, missing package: all refuse the grid
            raise ValueError(f"{p}: benchmark {b!r} cannot run: {exc}") from None
        try:
            train = of_types(part.train, by_bench.get(b)) if by_bench.get(b) is not None else part.train
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{p}: benchmark {b!r}: {exc}") from None
        pool = len(train[:limit] if limit is not None else train)
        if per_iteration > pool:
            raise ValueError(f"{p}: train_per_iteration={per_iteration} exceeds {b!r}'s training pool of {pool} tasks")


def load_grid(path: str | os.PathLike[str], *, plan: bool = False) -> Grid:
    """Read and validate a grid file; every error names the file and the field, before any call. ``plan``: for
    ``--plan``, a benchmark or method part that is not installed yet becomes a note (``Grid.notes``) instead of
    a refusal, so a user learns what the grid costs before installing everything."""
    p = Path(path)
    notes: list[str] = []
    check = Checker(p, lambda message: ValueError(f"{p}: {message}"), label="{key}")
    data = dict(check.read(read_mapping(p), None, GRID))
    variants = data["variants"]
    for vname, v in variants.items():
        variants[vname] = dict(check.read(v, f"variants.{vname}", VARIANT))
    if not data["methods"] and not variants:
        raise check.fail("nothing to run; give methods and/or variants")
    executor = data["executor"]
    backbones = [named_endpoint(b, "backbones", f"{p}: backbones[{i}]") for i, b in enumerate(data["backbones"])]
    embedded = data["embedding"] == EMBEDDED
    emb = None if embedded else named_endpoint(data["embedding"], "embeddings", f"{p}: embedding")
    # the LLM judge's own model (F.2): a backbone profile or an inline endpoint; unset: each run's backbone
    judge = None if data["judge"] is None else named_endpoint(data["judge"], "backbones", f"{p}: judge")
    if embedded and data["embedding_endpoints"]:
        raise check.fail(f"embedding_endpoints cannot be used with embedding: {EMBEDDED} (each run starts its own)")
    replicas = data["endpoints"]
    # a profile file may be keyed by its path as written in backbones or by its label (the file's stem)
    replicas = {next((b.name for b in backbones if profile_label(b.name) == k), k): v for k, v in replicas.items()}
    for bname, urls in replicas.items():
        if bname not in {b.name for b in backbones}:
            raise ValueError(f"{p}: endpoints names backbone {bname!r}, which is not in backbones")
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u for u in urls):
            raise ValueError(f"{p}: endpoints[{bname!r}] must be a non-empty list of base URLs")
    emb_urls = data["embedding_endpoints"] or ([] if emb is None else [emb.endpoint.base_url])
    if not data["shared_server"]:
        _check_one_model_per_url(
            p,
            [("backbone", b, replicas.get(b.name) or [b.endpoint.base_url]) for b in backbones]
            + ([("embedding", emb, emb_urls)] if emb is not None else [])
            + ([("judge", judge, [judge.endpoint.base_url])] if judge is not None else []),
        )
    benchmarks = data["benchmarks"]
    try:
        _check_benchmarks(p, benchmarks, data)
    except ValueError as exc:
        if not plan:
            raise
        notes.append(f"not runnable yet (planned anyway): {exc}")
    runs_planned = run_plan(data)
    seeds = list(data["seeds"])
    for run_name, method, mparams in runs_planned:
        # a {seed} path (a frozen layer per seed) is checked for every seed, and a frozen layer's size against
        # every backbone's context length
        per_seed = _mentions_seed(mparams)
        for seed in seeds if per_seed else seeds[:1]:
            for b in backbones:
                for bench in benchmarks:  # per benchmark: planted skills are read from the benchmark's own file
                    try:
                        validate_method_params(
                            method, params_for_seed(mparams, seed), bench, seed=seed, endpoint=b.endpoint
                        )
                    except (ValueError, TypeError) as exc:
                        which = f", seed {seed}" if per_seed else ""
                        refusal = f"{p}: run {run_name!r} ({method}{which}): {exc}"
                        if not plan:
                            raise ValueError(refusal) from None
                        notes.append(f"not runnable yet (planned anyway): {refusal}")
    judged = [run_name for run_name, method, mparams in runs_planned if uses_judge(method, mparams)]
    if judge is not None and not judged:
        raise ValueError(
            f"{p}: judge names {judge.name!r}, but no run of the grid calls a judge "
            "(abstraction_memory or joint_memory with judge: true)"
        )
    out_root = str(Path(data["out_root"]).resolve())
    cache_dir = str(Path(data["cache_dir"]).resolve()) if data["cache_dir"] else None
    runs: list[GridRun] = []
    counters: dict[str, int] = {}
    for bname, ep in ((b.name, b.endpoint) for b in backbones):
        for bench in benchmarks:
            for run_name, method, mparams in runs_planned:
                for seed in seeds:
                    spec = RunSpec.from_dict(
                        {
                            "method": method,
                            "benchmark": bench,
                            "backbone": bname,
                            "embedding": EMBEDDED if emb is None else emb.name,
                            "seed": seed,
                            "seeds_planned": tuple(seeds),
                            **{key: data[key] for key in PROTOCOL_KEYS},
                            # per benchmark, like benchmark_options: {alfworld: [pick_and_place_simple]}
                            "task_types": data["task_types"].get(bench),
                            # per benchmark too: {alfworld: valid_unseen_balanced_50} (envs.partitions.HELDOUT_SETS)
                            "heldout_set": data["heldout_set"].get(bench),
                            "agent": dict(data["agent"]),
                            "method_params": params_for_seed(mparams, seed),
                            "benchmark_options": dict(data["benchmark_options"].get(bench) or {}),
                            "out_root": out_root,
                            "cache_dir": cache_dir,
                            "name": run_name,
                            "progress": False,
                            "judge": judge.name if judge is not None and run_name in judged else None,
                        }
                    )
                    k = counters.get(bname, 0)
                    counters[bname] = k + 1
                    urls = replicas.get(bname) or [ep.base_url]
                    runs.append(
                        GridRun(
                            spec,
                            dataclasses.replace(ep, base_url=urls[k % len(urls)]),
                            None
                            if emb is None
                            else dataclasses.replace(emb.endpoint, base_url=emb_urls[k % len(emb_urls)]),
                            judge.endpoint if judge is not None and run_name in judged else None,
                        )
                    )
    return Grid(
        name=data["name"] or p.stem,
        runs=runs,
        executor=executor,
        ray_address=data["ray_address"],
        max_parallel=data["max_parallel"],
        cpus_per_run=float(data["cpus_per_run"]),
        out_root=out_root,
        url_env=tuple(dict.fromkeys(n.url_env for n in (*backbones, emb, judge) if n is not None and n.url_env)),
        notes=notes,
    )


def _mentions_seed(params: dict[str, Any]) -> bool:
    """Whether a run's parameters hold the ``{seed}`` placeholder (a frozen layer per seed)."""
    return any(isinstance(v, str) and SEED_PLACEHOLDER in v for v in params.values())


def run_one(run: GridRun) -> RunOutcome:
    """One grid task (runs in a worker): run or resume the cell; failures are reported, not raised."""
    from antipersist_lib.runner.protocol import run_cell

    spec = run.spec
    started = time.monotonic()
    base = dict(
        run_dir=str(spec.run_dir()),
        method=spec.method,
        run_name=spec.run_name,
        benchmark=spec.benchmark,
        backbone=spec.backbone_label,
        seed=spec.seed,
    )
    try:
        summaries = run_cell(
            spec, endpoint=run.endpoint, embed_endpoint=run.embed_endpoint, judge_endpoint=run.judge_endpoint
        )
    except Exception as exc:  # noqa: BLE001 - one failing run must not stop the grid
        return RunOutcome(
            **base,
            status="failed",
            seconds=round(time.monotonic() - started, 2),
            error=f"{type(exc).__name__}: {exc}",
            extra={"traceback": traceback.format_exc(limit=5)},
        )
    last = summaries[-1] if summaries else None
    return RunOutcome(
        **base,
        status="ok",
        seconds=round(time.monotonic() - started, 2),
        iterations=len(summaries),
        heldout_success_final=None if last is None else last.heldout_success,
        mean_calls_final=None if last is None else last.mean_calls,
    )


def _run_serial(grid: Grid, on_done: Callable[[RunOutcome], None]) -> list[RunOutcome]:
    out = []
    for r in grid.runs:
        out.append(run_one(r))
        on_done(out[-1])
    return out


def _run_process(grid: Grid, on_done: Callable[[RunOutcome], None]) -> list[RunOutcome]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    out = []
    # spawn: a fresh interpreter per worker (the engines start threads and JVMs; fork would copy them)
    with ProcessPoolExecutor(max_workers=grid.max_parallel, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(run_one, r) for r in grid.runs]
        for fut in as_completed(futures):
            out.append(fut.result())
            on_done(out[-1])
    return out


def _run_ray(grid: Grid, on_done: Callable[[RunOutcome], None]) -> list[RunOutcome]:
    try:
        import ray
    except ImportError as exc:
        raise RuntimeError(
            "executor 'ray' needs the ray package: pip install -e '.[scale]' (or use executor: process)"
        ) from exc
    env = forwarded_env(grid)
    started_here = not ray.is_initialized()
    if started_here:
        kw: dict[str, Any] = {"runtime_env": {"env_vars": env}, "log_to_driver": False}
        if grid.ray_address:
            kw["address"] = grid.ray_address
        else:
            kw.update(num_cpus=max(grid.max_parallel, int(grid.cpus_per_run + 0.999)), include_dashboard=False)
        ray.init(**kw)
    try:
        remote = ray.remote(num_cpus=grid.cpus_per_run, max_retries=0)(run_one)
        pending = [remote.remote(r) for r in grid.runs]
        out = []
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            out.append(ray.get(done[0]))
            on_done(out[-1])
        return out
    finally:
        if started_here:
            ray.shutdown()


def grid_probes(grid: Grid) -> list[Probe]:
    """The distinct endpoints the grid's unfinished runs need: each (base URL, model) chat endpoint, and
    each embedding endpoint of a run whose method embeds (the in-process embedder is checked by its run)."""
    from antipersist_lib.runner.spec import uses_embeddings

    probes: list[Probe] = []
    for r in grid.runs:
        if not work_left(r.spec):
            continue
        probes.append(Probe("chat", r.endpoint, f"backbone {r.spec.backbone}"))
        if r.judge_endpoint is not None:
            probes.append(Probe("chat", r.judge_endpoint, f"judge {r.spec.judge}"))
        if r.embed_endpoint is not None and uses_embeddings(r.spec.method):
            probes.append(Probe("embedding", r.embed_endpoint, f"embedding {r.spec.embedding}"))
    return distinct(probes)


def check_endpoints(grid: Grid, *, verbose: bool = True) -> list[ProbeResult]:
    """Preflight of the whole grid, before any run is launched: every endpoint of ``grid_probes`` gets one
    small request; ``PreflightError`` lists every one that failed (each checked once, in seconds)."""
    probes = grid_probes(grid)
    results = run_preflight(probes, what=f"grid {grid.name}")
    if verbose:
        for r in results:
            print(f"  preflight ok: {r.probe.describe()} {r.detail} ({r.seconds:.1f} s)", flush=True)
    return results


#: how often a running grid says what its runs have recorded (runs take hours; their own bars are off)
HEARTBEAT_S = 30.0


class _Heartbeat:
    """A line every ``HEARTBEAT_S`` while a grid runs: episodes and model calls its run folders hold so far,
    read from the files the runs write (whichever executor, process or machine runs them)."""

    def __init__(self, grid: Grid, every_s: float | None = None) -> None:
        self._grid = grid
        self._every_s = HEARTBEAT_S if every_s is None else every_s
        self._stop = threading.Event()
        self._start = self._counts()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="grid-heartbeat", daemon=True)
        self._thread.start()

    def _counts(self) -> tuple[int, int]:
        episodes = calls = 0
        for r in self._grid.runs:
            layout = RunDirectory(r.spec.run_dir())
            episodes += count_lines(layout.episodes_path("train")) + count_lines(layout.episodes_path("heldout"))
            calls += count_lines(layout.calls_path)
        return episodes, calls

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            episodes, calls = self._counts()
            print(
                f"grid {self._grid.name}: {time.monotonic() - self._t0:.0f} s: {episodes - self._start[0]} episode(s) "
                f"and {calls - self._start[1]} model call(s) recorded since the start",
                flush=True,
            )

    def stop(self) -> None:
        self._stop.set()


def run_grid(
    grid: Grid, *, executor: str | None = None, verbose: bool = True, preflight: bool = True
) -> list[RunOutcome]:
    """Run every run of the grid; write ``grid_<name>.json`` under ``out_root``; return the outcomes
    in grid order. Re-running resumes each run. With ``preflight`` (the default) the grid's endpoints are
    checked first (``check_endpoints``) and nothing is launched when one fails."""
    executor = executor or grid.executor
    if executor not in EXECUTORS:
        raise ValueError(f"executor is {executor!r}, expected one of {EXECUTORS}")
    if preflight:
        check_endpoints(grid, verbose=verbose)
    total = len(grid.runs)
    counter = {"n": 0}

    def on_done(o: RunOutcome) -> None:
        counter["n"] += 1
        if verbose:
            what = (
                f"held-out {100 * o.heldout_success_final:.1f}%"
                if o.status == "ok" and o.heldout_success_final is not None
                else o.error
            )
            print(
                f"[{counter['n']}/{total}] {o.status:6s} {o.benchmark}/{o.backbone}/{o.run_name}/seed{o.seed} ({o.seconds:.1f} s): {what}",
                flush=True,
            )

    if verbose:
        left = sum(1 for r in grid.runs if work_left(r.spec))
        caches = sorted({r.spec.cache_dir or "off" for r in grid.runs})
        print(
            f"grid {grid.name}: {total} runs ({left} with work left) on {executor}, up to {grid.max_parallel} at "
            f"once; run folders under {grid.out_root}; response cache {', '.join(caches)}",
            flush=True,
        )
    t0 = time.monotonic()
    heartbeat = _Heartbeat(grid) if verbose else None
    try:
        outcomes = {"ray": _run_ray, "process": _run_process, "serial": _run_serial}[executor](grid, on_done)
    finally:
        if heartbeat is not None:
            heartbeat.stop()
    order = {r.spec.run_dir().as_posix(): i for i, r in enumerate(grid.runs)}
    outcomes.sort(key=lambda o: order.get(Path(o.run_dir).as_posix(), 0))
    failed = [o for o in outcomes if o.status != "ok"]
    summary = {
        "grid": grid.name,
        "executor": executor,
        "runs": len(outcomes),
        "failed": len(failed),
        "wall_s": round(time.monotonic() - t0, 2),
        "outcomes": [dataclasses.asdict(o) for o in outcomes],
    }
    Path(grid.out_root).mkdir(parents=True, exist_ok=True)
    atomic_write_json(Path(grid.out_root) / f"grid_{grid.name}.json", summary)
    if verbose and failed:
        print(
            f"{len(failed)} of {total} runs failed; their run directories are kept: run the same command again to resume them."
        )
    return outcomes


def to_json(outcomes: list[RunOutcome]) -> str:
    return json.dumps([dataclasses.asdict(o) for o in outcomes], indent=1)
