"""Consolidation studies: build memories under the paper's construction conditions, evaluate them, tabulate.

"Useful Memories Become Faulty When Continuously Updated by LLMs" §3 (Static-All / Static-Group / Stream with
batch size, homogeneous vs heterogeneous batches, capped vs unbounded banks; evaluation with every entry in
context, two repeats per question), §4.1 (utility vs number of updates, Figs. 1, 3, 4) and §4.2 (Tables 2-3:
trajectory-log baselines vs consolidators, with the red "(--)" mark).

``run_study(profile, out_dir)`` reads a study profile (``params/consolidation/*.yaml``), builds the fixed
trajectory pool once (expert replays, earlier runs' episodes or a pool file), builds every (builder, regime)
memory with ``regimes.build_memory`` (one snapshot per update step), then evaluates the bank at each chosen
step through the kit's protocol (``run_cell``, method ``consolidated_memory``, ``train_per_iteration=0``,
one iteration, one run per seed = one repeat), plus a no-memory row (``react``) and, under ``methods``, the
kit's own methods as rows beside them (Anti-Persistence, trajectory memory, ExpeL, ...; see "Method rows"
below). It writes::

    <out_dir>/study.json                    manifest: profile, backbone label, endpoints (no key), package
                                            versions, git commit, prompt hashes, pool fingerprint, builds,
                                            LLM call totals, wall time
    <out_dir>/results.csv, results.json     one row per (builder, regime, step, seed): held-out success/score
    <out_dir>/pool.jsonl                    the trajectory pool every builder consumed
    <out_dir>/memories/<builder>/<regime>/  snapshots.jsonl (one line per update step) and bank.json
    <out_dir>/runs/...                      the protocol's run directories (one per evaluated bank and seed)
    <out_dir>/ledger.jsonl                  the consolidation calls (counts and tags, never text)
    <out_dir>/cache/                        response cache (``response_cache: true``)

Re-running the same command resumes: a finished build (``bank.json``) is kept, an unfinished one is rebuilt
(its calls are answered by the response cache) and the protocol resumes its own run directories.

Backbone: ``endpoint=`` wins; else the profile's ``backbone``: ``embedded`` starts the embedded default
(Gemma 3 270M on llama.cpp and all-MiniLM-L6-v2, as ``runner.main_job`` does) and labels everything with
its weak-model note; any other name is a backbone profile in ``params/backbones/`` (its embedder:
``embedding``, a profile in ``params/embeddings/``; ``embed_endpoint=`` wins). The same model consolidates
and acts, as in the paper's Tables 2-3.

Kit choices where the paper is silent:

- Step 0 of every stream is the empty bank, whose utility is the no-memory row: it is not re-evaluated, and
  the curves take it from the no-memory row. Static regimes are evaluated at their last step only.
- ``fs<N>`` (FS=N) is a one-off sample of the whole pool, so it is built under ``static_all`` regimes only;
  ``keep`` streamed is Incr. Keep, ``keep`` under ``static_all`` is One-Pass Keep.
- Tables 2-3 take each column at the last step of one condition: trajectory logs from ``static_all``,
  consolidators from the first regime of ``regime_preference`` the study has (default: stream, then
  static_all, then static_group); the chosen condition is listed beside every cell. "(--)" marks a
  consolidator whose value (at the table's precision) is below at least one trajectory-log column of the
  same row; ties are not marked. This rule reproduces every mark the paper prints (checked in the tests).

Method rows (profile key ``methods``, one entry per row; the key names the row, ``method`` the kit method,
default the key): each is run through the same protocol on the same held-out games and seeds as the banks.
``seed_pool: true`` starts the method's trajectory store from this study's pool (``methods.seeding``; only
``anti_persistence`` and ``trajectory_memory`` keep one), so it sees exactly the consolidators' data;
``iterations`` x ``train_per_iteration`` (default 1 x 0) lets it also learn from its own training episodes
on the benchmark's training split, as in the kit's main protocol (Anti-Persistence's bandit needs those:
with an empty outcome log its first ``round_robin_iterations`` iterations cycle the modes). The row is read
at the last iteration; its ``condition`` says how it got its memory. These rows are neither trajectory logs
nor consolidators, so they never carry or cause the "(--)" mark.

Analyses (all read study folders; several folders, e.g. one per backbone, stack into one frame): ``load_study``,
``results``, ``summary``, ``builds_table``, ``seed_means``, ``utility_curves`` (Fig. 1 shape), ``regime_bars``
(Fig. 3 shape), ``homogeneity_curves`` (Fig. 4 shape), ``trajectory_log_table`` / ``paper_table_cells`` /
``row_marks`` / ``table_display`` / ``tables_beside_paper`` (Tables 2-3), and the figures ``plot_utility``,
``plot_regime_bars``, ``plot_homogeneity``, ``plot_table``. Command line::

    python -m antipersist_lib.consolidation.study --profile params/consolidation/smoke.yaml --out outputs/consolidation/smoke
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.analysis import faulty_paper
from antipersist_lib.analysis.paper import METHOD_LABELS
from antipersist_lib.consolidation import prompts as _consolidation_prompts  # noqa: F401  (registers prompts)
from antipersist_lib.consolidation.bank import MemoryBank, load_bank
from antipersist_lib.consolidation.pool import (
    EXPERT_BENCHMARKS,
    PoolRecord,
    expert_pool,
    load_pool,
    pool_from_runs,
    save_pool,
)
from antipersist_lib.consolidation.regimes import BANK_FILE, REGIMES, SNAPSHOTS_FILE, build_memory, make_builder
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.envs import BENCHMARKS
from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import AGENT_KEYS, RunSpec, run_cell
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.serving.profiles import read_mapping
from antipersist_lib.serving.response_cache import ResponseCache
from antipersist_lib.studies import (
    BACKBONE_OPTION_KEYS,
    EMBEDDED,
    MANIFEST_FILE,
    StudyModels,
    StudyProfileError,
    check_bool,
    check_int,
    check_mapping,
    check_names,
    fail,
    manifest_base,
    open_models,
    previous_wall_s,
    relative_to,
    utc_now,
    with_restarts,
)

STUDY_FORMAT = 1
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"
POOL_FILE = "pool.jsonl"
MEMORIES_DIR = "memories"
RUNS_DIR = "runs"
CACHE_DIR = "cache"
LEDGER_FILE = "ledger.jsonl"
#: the no-memory row's builder (and protocol method)
NO_MEMORY = "react"
NO_MEMORY_CONDITION = "no_memory"

PROFILE_KEYS = {
    "name",
    "description",
    "benchmark",
    "benchmark_options",
    "backbone",
    "backbone_options",
    "embedding",
    "pool",
    "builders",
    "builder_options",
    "regimes",
    "build_seed",
    "evaluation",
    "response_cache",
    "methods",
}
POOL_KEYS = {"expert", "runs", "file", "successes_only"}
EXPERT_KEYS = {"per_type", "seed", "types", "split", "allow_fewer"}
REGIME_KEYS = {"regime", "batch_size", "homogeneous", "capacity", "initial", "builders", "steps"}
EVALUATION_KEYS = {"seeds", "heldout_limit", "max_steps", "agent", "heldout_concurrency", "steps", "no_memory"}
METHOD_ROW_KEYS = {"method", "params", "seed_pool", "iterations", "train_per_iteration", "train_pool_limit"}
#: the kit methods that keep a trajectory store, and so can start from the study's pool (``seed_pool``)
SEEDABLE_METHODS = ("anti_persistence", "trajectory_memory")
#: the ``regime`` of a method row
METHOD_REGIME = "method"
#: builder_options key applied to every builder (before its own options)
COMMON_OPTIONS = "common"
BUILDER_NAMES = ("ace", "ace_gt", "awm", "dc", "clin", "all", "keep")
_FS = re.compile(r"fs([1-9]\d*)")

RESULT_COLUMNS = (
    "benchmark",
    "backbone",
    "builder",
    "column",
    "condition",
    "regime",
    "batch_size",
    "homogeneous",
    "capacity",
    "initial",
    "step",
    "updates",
    "examples_seen",
    "n_entries",
    "memory_chars",
    "update_errors",
    "seed",
    "heldout_n",
    "success",
    "score",
    "infra_failures",
    "mean_steps",
    "mean_calls",
    "run_dir",
)
#: what identifies one evaluated bank (a row of a table is these, averaged over seeds)
CONDITION_COLUMNS = (
    "benchmark",
    "backbone",
    "builder",
    "column",
    "condition",
    "regime",
    "batch_size",
    "homogeneous",
    "capacity",
    "initial",
)

#: what the paper says about its utility-vs-updates figures (their values are printed as images only)
FIGURE1_STATEMENT = (
    "Paper (§4.1, Fig. 1): starting from an empty store, abstracted-memory utility rises early, then falls, "
    "sometimes below the no-memory baseline. ScienceWorld (CLIN, batches of 4): the score peaks near step 20 and "
    "declines through step 100 for every memory size. WebShop (AWM): 0.64 at 8 examples, 0.20 at 128, while "
    "no-memory sits at 0.20."
)
FIGURE3_STATEMENT = (
    "Paper (§4.1, Fig. 3, ALFWorld, GT expert trajectories): holding the update strategy fixed, consolidating each "
    "task type separately (Static-Group) outperforms consolidating across types jointly (Static-All, 'Ungrp.'); "
    "holding the pool fixed, streamed incremental updates (Stream) underperform a single whole-pool pass."
)
FIGURE4_STATEMENT = (
    "Paper (§4.1, Fig. 4, ALFWorld): a Static-Group memory (GPT-5.4) updated further in batches (GPT-5-nano) loses "
    "utility under all three solvers, sometimes drastically between consecutive steps; batches that mix task types "
    "(heterogeneous) produce worse memory than batches of one type (homogeneous)."
)
TABLE_STATEMENT = (
    "Paper (§4.2, Tables 2-3): an episodic-only store (summarized trajectory logs in context, no abstraction) is "
    "competitive with the consolidators; a red (--) marks a consolidator beaten by at least one trajectory-log "
    "baseline in the same row."
)


# -- the profile ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolSpec:
    """Where the fixed trajectory pool comes from: exactly one of expert replays, run directories, a file."""

    kind: str  # "expert" | "runs" | "file"
    per_type: int | None = None
    seed: int = 0
    types: tuple[str, ...] | None = None
    split: str = "train"
    allow_fewer: bool = False
    runs: tuple[str, ...] = ()
    successes_only: bool = True
    file: str | None = None


@dataclass(frozen=True)
class RegimeSpec:
    """One construction condition (a named entry of the profile's ``regimes``)."""

    name: str
    regime: str
    batch_size: int | None = None
    homogeneous: bool | None = None  # None for the static regimes
    capacity: int | None = None
    initial: str | None = None  # continue from this regime's final bank (of the same builder)
    builders: tuple[str, ...] | None = None  # None: every builder of the profile
    steps: Any = None  # evaluation steps of this regime (None: the profile's ``evaluation.steps``)

    def label(self) -> str:
        """A readable label for tables and figures, e.g. "Stream (b=4, het., cap 20)"."""
        if self.regime == "static_all":
            base = "Static-All"
        elif self.regime == "static_group":
            base = "Static-Group"
        else:
            parts = [f"b={self.batch_size}", "hom." if self.homogeneous else "het."]
            if self.capacity is not None:
                parts.append(f"cap {self.capacity}")
            base = f"Stream ({', '.join(parts)})"
        if self.regime != "stream" and self.capacity is not None:
            base += f" (cap {self.capacity})"
        return base + (f" from {self.initial}" if self.initial else "")


@dataclass(frozen=True)
class Build:
    """One memory to build: a builder under a regime."""

    builder: str
    regime: RegimeSpec

    @property
    def key(self) -> str:
        return f"{self.builder}/{self.regime.name}"


@dataclass(frozen=True)
class MethodRow:
    """One of the kit's methods evaluated beside the banks (an entry of the profile's ``methods``)."""

    name: str  # the row's name: its builder and table column
    method: str  # a kit method (``methods.METHODS``)
    params: dict[str, Any] = field(default_factory=dict)
    seed_pool: bool = False
    iterations: int = 1
    train_per_iteration: int = 0
    train_pool_limit: int | None = None

    @property
    def training_episodes(self) -> int:
        return self.iterations * self.train_per_iteration

    def condition(self) -> str:
        """How the row got its memory, e.g. "pool + 3x48 training"."""
        parts = ["pool"] if self.seed_pool else []
        if self.train_per_iteration:
            parts.append(f"{self.iterations}x{self.train_per_iteration} training")
        return " + ".join(parts) if parts else "no memory given"


@dataclass(frozen=True)
class StudyProfile:
    path: str
    name: str
    benchmark: str
    backbone: str
    pool: PoolSpec
    builders: tuple[str, ...]
    regimes: tuple[RegimeSpec, ...]
    seeds: tuple[int, ...] = (42, 43)
    heldout_limit: int | None = None
    max_steps: int = 50
    agent: dict[str, Any] = field(default_factory=dict)
    heldout_concurrency: int = 1
    steps: Any = "last"  # "last" | "all" | [int, ...] | {"every": k}
    no_memory: bool = True
    build_seed: int = 0
    builder_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    benchmark_options: dict[str, Any] = field(default_factory=dict)
    backbone_options: dict[str, Any] = field(default_factory=dict)
    embedding: str = "qwen3-embedding-8b"
    response_cache: bool = True
    methods: tuple[MethodRow, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict)

    def regime(self, name: str) -> RegimeSpec:
        for r in self.regimes:
            if r.name == name:
                return r
        raise KeyError(f"no regime {name!r}; known: {[r.name for r in self.regimes]}")

    def builds(self) -> list[Build]:
        """Every (builder, regime) to build, those another one continues from first."""
        out = []
        for r in sorted(self.regimes, key=lambda r: r.initial is not None):
            for b in r.builders if r.builders is not None else self.builders:
                if _FS.fullmatch(b) and (r.regime != "static_all" or r.initial is not None):
                    continue  # FS=N samples the whole pool once
                out.append(Build(b, r))
        return out

    def options(self, builder: str) -> dict[str, Any]:
        return {**self.builder_options.get(COMMON_OPTIONS, {}), **self.builder_options.get(builder, {})}


def _valid_builder(name: str) -> bool:
    return name in BUILDER_NAMES or _FS.fullmatch(name) is not None


def _pool_spec(data: dict[str, Any], path: Any) -> PoolSpec:
    spec = check_mapping(data.get("pool"), "pool", POOL_KEYS, path)
    kinds = [k for k in ("expert", "runs", "file") if k in spec]
    if len(kinds) != 1:
        raise fail(path, f"'pool' needs exactly one of 'pool.expert', 'pool.runs', 'pool.file'; got {kinds or 'none'}")
    successes_only = check_bool(spec.get("successes_only", True), "pool.successes_only", path)
    kind = kinds[0]
    if kind == "expert":
        ex = check_mapping(spec["expert"], "pool.expert", EXPERT_KEYS, path)
        if data.get("benchmark") not in EXPERT_BENCHMARKS:
            raise fail(
                path, f"'pool.expert' replays exist for {EXPERT_BENCHMARKS}, not benchmark {data.get('benchmark')!r}"
            )
        types = ex.get("types")
        return PoolSpec(
            "expert",
            per_type=check_int(ex.get("per_type"), "pool.expert.per_type", path, minimum=1),
            seed=int(check_int(ex.get("seed", 0), "pool.expert.seed", path) or 0),
            types=None if types is None else tuple(check_names(types, "pool.expert.types", path)),
            split=str(ex.get("split", "train")),
            allow_fewer=check_bool(ex.get("allow_fewer", False), "pool.expert.allow_fewer", path),
        )
    if kind == "runs":
        return PoolSpec("runs", runs=tuple(check_names(spec["runs"], "pool.runs", path)), successes_only=successes_only)
    if not isinstance(spec["file"], str) or not spec["file"]:
        raise fail(path, f"'pool.file' must be a path to a pool .jsonl, got {spec['file']!r}")
    return PoolSpec("file", file=spec["file"])


def _regimes(data: dict[str, Any], builders: list[str], path: Any) -> tuple[RegimeSpec, ...]:
    block = data.get("regimes")
    if not isinstance(block, dict) or not block:
        raise fail(path, f"'regimes' is required: a mapping of names to {{{', '.join(sorted(REGIME_KEYS))}}}")
    out = []
    for name, value in block.items():
        key = f"regimes.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise fail(path, f"regime name {name!r} must be letters, digits, '_', '-' or '.'")
        spec = check_mapping(value, key, REGIME_KEYS, path)
        regime = spec.get("regime", name)
        if regime not in REGIMES:
            raise fail(path, f"'{key}.regime' must be one of {REGIMES}, got {regime!r}")
        batch = homogeneous = None
        if regime == "stream":
            batch = check_int(spec.get("batch_size"), f"{key}.batch_size", path, minimum=1)
            homogeneous = check_bool(spec.get("homogeneous", True), f"{key}.homogeneous", path)
        else:
            for k in ("batch_size", "homogeneous"):
                if k in spec:
                    raise fail(path, f"'{key}.{k}' applies to the stream regime only, not {regime!r}")
        capacity = check_int(spec.get("capacity"), f"{key}.capacity", path, minimum=1, optional=True)
        only = None
        if "builders" in spec:
            only = tuple(check_names(spec["builders"], f"{key}.builders", path))
            unknown = [b for b in only if b not in builders]
            if unknown:
                raise fail(path, f"'{key}.builders' names {unknown}, which 'builders' does not list ({builders})")
        steps = _steps(spec["steps"], path, f"{key}.steps") if "steps" in spec else None
        out.append(RegimeSpec(name, regime, batch, homogeneous, capacity, spec.get("initial"), only, steps))
    names = [r.name for r in out]
    for r in out:
        if r.initial is None:
            continue
        key = f"regimes.{r.name}.initial"
        if r.initial not in names or r.initial == r.name:
            raise fail(path, f"'{key}' must name another regime of 'regimes' ({names}), got {r.initial!r}")
        if next(x for x in out if x.name == r.initial).initial is not None:
            raise fail(path, f"'{key}': regime {r.initial!r} continues from another regime itself (one level only)")
        if r.regime != "stream":
            raise fail(path, f"'{key}': only a stream continues from another regime's bank")
        for b in r.builders if r.builders is not None else builders:
            base = next(x for x in out if x.name == r.initial)
            if not _FS.fullmatch(b) and base.builders is not None and b not in base.builders:
                raise fail(path, f"'{key}': regime {r.initial!r} does not build {b!r}")
    for r in out:
        for b in r.builders or ():
            if _FS.fullmatch(b) and (r.regime != "static_all" or r.initial is not None):
                raise fail(path, f"'regimes.{r.name}.builders': {b} (FS=N) is built under static_all only")
    return tuple(out)


def _method_rows(data: dict[str, Any], builders: list[str], benchmark: str, path: Any) -> tuple[MethodRow, ...]:
    from antipersist_lib.methods import METHODS, validate_method_params

    rows = []
    for name, spec in check_mapping(data.get("methods"), "methods", None, path).items():
        key = f"methods.{name}"
        spec = check_mapping(spec, key, METHOD_ROW_KEYS, path)
        method = spec.get("method", name)
        if method not in METHODS or method in ("consolidated_memory", NO_MEMORY):
            allowed = [m for m in METHODS if m not in ("consolidated_memory", NO_MEMORY)]
            raise fail(path, f"'{key}.method' must be a kit method from {allowed}, got {method!r}")
        if name in builders or name == "no_mem" or name in TRAJECTORY_LOG_FIXED or _valid_builder(name):
            raise fail(path, f"'{key}': the row name {name!r} is taken by a builder or table column; rename it")
        seed = check_bool(spec.get("seed_pool", False), f"{key}.seed_pool", path)
        if seed and method not in SEEDABLE_METHODS:
            raise fail(
                path, f"'{key}.seed_pool': {method!r} keeps no trajectory store; only {list(SEEDABLE_METHODS)} can"
            )
        params = check_mapping(spec.get("params"), f"{key}.params", None, path)
        if "seed_pool" in params:
            raise fail(path, f"'{key}.params.seed_pool': the study sets it; use '{key}.seed_pool: true'")
        row = MethodRow(
            name=name,
            method=method,
            params=params,
            seed_pool=seed,
            iterations=int(check_int(spec.get("iterations", 1), f"{key}.iterations", path, minimum=1) or 1),
            train_per_iteration=int(
                check_int(spec.get("train_per_iteration", 0), f"{key}.train_per_iteration", path, minimum=0) or 0
            ),
            train_pool_limit=check_int(
                spec.get("train_pool_limit"), f"{key}.train_pool_limit", path, minimum=1, optional=True
            ),
        )
        if not row.seed_pool and not row.train_per_iteration:
            raise fail(
                path,
                f"'{key}': the method would start and stay empty (the no-memory row already covers that); "
                "set seed_pool: true or train_per_iteration > 0",
            )
        try:
            validate_method_params(method, params, benchmark)
        except (TypeError, ValueError) as exc:
            raise fail(path, f"'{key}.params': {exc}") from None
        rows.append(row)
    return tuple(rows)


def _steps(value: Any, path: Any, key: str = "evaluation.steps") -> Any:
    if value in ("last", "all"):
        return value
    if isinstance(value, dict):
        spec = check_mapping(value, key, {"every"}, path)
        return {"every": check_int(spec.get("every"), f"{key}.every", path, minimum=1)}
    if isinstance(value, list) and value:
        return sorted({int(check_int(s, f"{key}[]", path, minimum=1) or 1) for s in value})
    raise fail(path, f"'{key}' must be 'last', 'all', a list of steps >= 1 or {{every: k}}, got {value!r}")


def load_study_profile(path: str | Path) -> StudyProfile:
    """Read and check a study profile; any unknown or malformed key is named in the error."""
    path = Path(path)
    try:
        data = read_mapping(path, PROFILE_KEYS)
    except ValueError as exc:
        raise StudyProfileError(f"study profile {exc}") from None
    benchmark = data.get("benchmark")
    if benchmark not in BENCHMARKS:
        raise fail(path, f"'benchmark' must be one of {BENCHMARKS}, got {benchmark!r}")
    backbone = data.get("backbone", EMBEDDED)
    if not isinstance(backbone, str) or not backbone:
        raise fail(path, f"'backbone' must be 'embedded' or a profile name in params/backbones/, got {backbone!r}")
    embedding = data.get("embedding", "qwen3-embedding-8b")
    if not isinstance(embedding, str) or not embedding:
        raise fail(path, f"'embedding' must be a profile name in params/embeddings/, got {embedding!r}")
    pool = _pool_spec(data, path)
    if "builders" not in data:
        raise fail(path, f"'builders' is required: a list from {list(BUILDER_NAMES) + ['fs<N>']}")
    builders = check_names(data["builders"], "builders", path)
    bad = [b for b in builders if not _valid_builder(b) or b == NO_MEMORY]
    if bad:
        raise fail(path, f"'builders': unknown builder(s) {bad}; expected names from {list(BUILDER_NAMES)} or fs<N>")
    regimes = _regimes(data, builders, path)
    if any(_FS.fullmatch(b) for b in builders) and not any(
        r.regime == "static_all" and r.initial is None for r in regimes
    ):
        raise fail(path, "'builders' lists fs<N> (FS=N), which is built under static_all: add a static_all regime")
    options = check_mapping(data.get("builder_options"), "builder_options", set(builders) | {COMMON_OPTIONS}, path)
    for name, opts in options.items():
        check_mapping(opts, f"builder_options.{name}", None, path)
    evaluation = check_mapping(data.get("evaluation"), "evaluation", EVALUATION_KEYS, path)
    seeds = evaluation.get("seeds", [42, 43])
    seeds = seeds if isinstance(seeds, list) else [seeds]
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds) or len(set(seeds)) != len(seeds):
        raise fail(path, f"'evaluation.seeds' must be a list of distinct integers (one per repeat), got {seeds!r}")
    agent = check_mapping(evaluation.get("agent"), "evaluation.agent", set(AGENT_KEYS), path)
    bench_opts = check_mapping(data.get("benchmark_options"), "benchmark_options", None, path)
    profile = StudyProfile(
        path=str(path),
        name=str(data.get("name", path.stem)),
        benchmark=benchmark,
        backbone=backbone,
        pool=pool,
        builders=tuple(builders),
        regimes=regimes,
        seeds=tuple(int(s) for s in seeds),
        heldout_limit=check_int(
            evaluation.get("heldout_limit"), "evaluation.heldout_limit", path, minimum=1, optional=True
        ),
        max_steps=int(check_int(evaluation.get("max_steps", 50), "evaluation.max_steps", path, minimum=1) or 50),
        agent=agent,
        heldout_concurrency=int(
            check_int(evaluation.get("heldout_concurrency", 1), "evaluation.heldout_concurrency", path, minimum=1) or 1
        ),
        steps=_steps(evaluation.get("steps", "last"), path),
        no_memory=check_bool(evaluation.get("no_memory", True), "evaluation.no_memory", path),
        build_seed=int(check_int(data.get("build_seed", 0), "build_seed", path) or 0),
        builder_options={k: dict(v or {}) for k, v in options.items()},
        benchmark_options=bench_opts,
        backbone_options=check_mapping(data.get("backbone_options"), "backbone_options", BACKBONE_OPTION_KEYS, path),
        embedding=embedding,
        response_cache=check_bool(data.get("response_cache", True), "response_cache", path),
        methods=_method_rows(data, builders, benchmark, path),
        raw=data,
    )
    for b in builders:  # the builders' own checks of their options, with the key named
        try:
            make_builder(b, llm=_Unused(), embedder=_Unused(), seed=0, **profile.options(b))
        except (TypeError, ValueError) as exc:
            raise fail(path, f"'builder_options' for {b!r}: {exc}") from None
    try:  # the protocol's own checks (agent fields, limits), with the profile named
        RunSpec(
            method=NO_MEMORY,
            benchmark=benchmark,
            backbone="check",
            max_steps=profile.max_steps,
            heldout_limit=profile.heldout_limit,
            agent=agent,
            heldout_concurrency=profile.heldout_concurrency,
            benchmark_options=bench_opts,
        )
    except ValueError as exc:
        raise fail(path, f"'evaluation': {exc}") from None
    return profile


class _Unused:
    """Stands in for a model while a profile's builder options are checked (never called)."""

    def chat(self, *a: Any, **k: Any) -> Any:  # pragma: no cover - never called
        raise AssertionError("profile check must not call a model")


# -- pools, builds --------------------------------------------------------------------------------------


def obtain_pool(profile: StudyProfile, out: Path, *, root: Path | None = None) -> list[PoolRecord]:
    """The study's pool: ``<out>/pool.jsonl`` when a previous (resumed) run saved it, else built and saved."""
    saved = out / POOL_FILE
    if saved.exists():
        return load_pool(saved)
    base = root or Path.cwd()
    spec = profile.pool
    if spec.kind == "expert":
        pool = expert_pool(
            profile.benchmark,
            int(spec.per_type or 1),
            spec.seed,
            types=spec.types,
            split=spec.split,
            allow_fewer=spec.allow_fewer,
        )
    elif spec.kind == "runs":
        pool = pool_from_runs([base / r for r in spec.runs], successes_only=spec.successes_only)
    else:
        pool = load_pool(base / str(spec.file))
    save_pool(pool, saved)
    return pool


def pool_fingerprint(pool: Sequence[PoolRecord], path: Path | None = None) -> dict[str, Any]:
    """Size, per-type counts, the hash of the record ids (as the banks' meta) and of the pool file's bytes."""
    types: dict[str, int] = {}
    for r in pool:
        types[r.task_type] = types.get(r.task_type, 0) + 1
    out: dict[str, Any] = {
        "size": len(pool),
        "types": dict(sorted(types.items())),
        "successes": sum(1 for r in pool if r.outcome.success),
        "hash": hashlib.sha256("\n".join(r.rid for r in pool).encode("utf-8")).hexdigest()[:16],
        "sources": sorted({r.source for r in pool}),
    }
    if path is not None and path.exists():
        out["file_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def memory_dir(out: str | Path, build: Build) -> Path:
    return Path(out) / MEMORIES_DIR / build.builder / build.regime.name


def _run_build(profile: StudyProfile, build: Build, pool: list[PoolRecord], out: Path, llm: Any, embedder: Any) -> Path:
    folder = memory_dir(out, build)
    if (folder / BANK_FILE).exists():
        return folder / SNAPSHOTS_FILE
    if folder.exists():  # an unfinished build: start again (the response cache answers its calls)
        shutil.rmtree(folder)
    r = build.regime
    initial = None
    if r.initial is not None:
        initial = load_bank(memory_dir(out, Build(build.builder, profile.regime(r.initial))) / BANK_FILE)
    builder = make_builder(
        build.builder, llm=llm, embedder=embedder, seed=profile.build_seed, **profile.options(build.builder)
    )
    build_memory(
        pool,
        builder,
        r.regime,
        batch_size=r.batch_size,
        homogeneous=True if r.homogeneous is None else r.homogeneous,
        capacity=r.capacity,
        seed=profile.build_seed,
        out_dir=folder,
        initial=initial,
    )
    return folder / SNAPSHOTS_FILE


@dataclass(frozen=True)
class StepInfo:
    """What a snapshot step of a build holds (the memory a run evaluates)."""

    step: int
    updates: int
    examples_seen: int
    n_entries: int
    memory_chars: int
    update_errors: int


def snapshot_steps(snapshots: str | Path) -> list[StepInfo]:
    """Every step of a snapshots file with its memory's size, the examples the builder had seen and the
    updates whose reply could not be parsed (the bank then stayed as it was)."""
    lines = [json.loads(x) for x in Path(snapshots).read_text(encoding="utf-8").splitlines() if x.strip()]
    out, seen, errors = [], 0, 0
    first = int(lines[0]["step"]) if lines else 0
    for line in lines:
        event = line.get("event") or {}
        seen += len(event.get("batch", []) or [])
        errors += 1 if event.get("error") else 0
        bank = MemoryBank.from_dict(line["bank"])
        out.append(
            StepInfo(
                int(line["step"]),
                int(line["step"]) - first,
                seen,
                len(bank.entries),
                len(bank.render()),
                errors,
            )
        )
    return out


def evaluation_steps(profile: StudyProfile, build: Build, steps: Sequence[StepInfo]) -> list[StepInfo]:
    """The steps of one build that are evaluated (never its first: the empty or initial bank). Static regimes:
    the last step; streams: the regime's ``steps``, else the profile's ``evaluation.steps`` ("last", "all",
    a list of bank steps, or ``{every: k}`` updates), the last step always included."""
    if len(steps) < 2:
        return []
    later = steps[1:]
    rule = build.regime.steps if build.regime.steps is not None else profile.steps
    if build.regime.regime != "stream" or rule == "last":
        return [later[-1]]
    if rule == "all":
        return later
    if isinstance(rule, dict):
        k = int(rule["every"])
        return [s for s in later if s.updates % k == 0 or s is later[-1]]
    wanted = set(rule)
    return [s for s in later if s.step in wanted or s is later[-1]]


def table_column(builder: str, regime: str) -> str | None:
    """The Tables 2-3 column a (builder, regime) fills: ``keep`` streamed is Incr. Keep, under static_all One-Pass Keep."""
    if builder == NO_MEMORY:
        return "no_mem"
    if builder == "keep":
        return {"stream": "incr_keep", "static_all": "one_pass_keep"}.get(regime)
    return builder


# -- the backbone -------------------------------------------------------------------------------------


# -- running a study ------------------------------------------------------------------------------------


@dataclass
class StudyResult:
    out: Path
    frame: pd.DataFrame
    manifest: dict[str, Any]


def _evaluate(
    profile: StudyProfile,
    models: StudyModels,
    out: Path,
    *,
    method: str,
    method_params: dict[str, Any],
    name: str,
    seed: int,
    iterations: int = 1,
    train_per_iteration: int = 0,
    train_pool_limit: int | None = None,
) -> dict[str, Any]:
    spec = RunSpec(
        method=method,
        benchmark=profile.benchmark,
        backbone=models.label,
        embedding=models.embed_label,
        seed=int(seed),
        iterations=iterations,
        train_per_iteration=train_per_iteration,
        train_pool_limit=train_pool_limit,
        max_steps=profile.max_steps,
        heldout_concurrency=profile.heldout_concurrency,
        heldout_limit=profile.heldout_limit,
        method_params=method_params,
        benchmark_options=dict(profile.benchmark_options),
        agent=dict(profile.agent),
        name=name,
        out_root=str(out / RUNS_DIR),
        cache_dir=str(out / CACHE_DIR) if profile.response_cache else None,
        progress=False,
    )
    summaries = with_restarts(
        models,
        f"run {name} seed {seed}",
        lambda: run_cell(spec, endpoint=models.endpoint, embed_endpoint=models.embed_endpoint),
    )
    last = summaries[-1]
    held = [r for r in RunDirectory(spec.run_dir()).read_episodes("heldout") if r.get("iteration") == last.iteration]
    scores = [float(r["outcome"].get("score", 0.0)) for r in held]
    return {
        "seed": int(seed),
        "heldout_n": last.heldout_n,
        "success": _finite(last.heldout_success),
        "score": _finite(sum(scores) / len(scores)) if scores else None,
        "infra_failures": last.infra_failures,
        "mean_steps": _finite(last.mean_steps),
        "mean_calls": _finite(last.mean_calls),
        "run_dir": relative_to(spec.run_dir(), out),
    }


def _finite(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else float(x)


def _run_name(builder: str, regime: str, step: int) -> str:
    return f"{builder}--{regime}--s{step}"


def _write_results(out: Path, rows: list[dict[str, Any]], note: str) -> pd.DataFrame:
    frame = _frame(rows)
    frame.to_csv(out / RESULTS_CSV, index=False)
    atomic_write_json(out / RESULTS_JSON, {"format": STUDY_FORMAT, "note": note, "rows": rows})
    return frame


def run_study(
    profile_path: str | Path,
    out_dir: str | Path,
    *,
    endpoint: Endpoint | None = None,
    embed_endpoint: Endpoint | None = None,
    root: str | Path | None = None,
) -> StudyResult:
    """Build every memory of the profile, evaluate each chosen step per seed (and the no-memory row), and
    write the study folder (see the module docstring). Paths in the profile (``pool.runs``, ``pool.file``)
    are taken from ``root`` (default: the working directory). Re-running resumes."""
    profile = load_study_profile(profile_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    started = utc_now()
    before = previous_wall_s(out)
    pool = obtain_pool(profile, out, root=Path(root) if root is not None else None)
    fingerprint = pool_fingerprint(pool, out / POOL_FILE)
    rows: list[dict[str, Any]] = []
    builds_info: list[dict[str, Any]] = []
    ledger = Ledger(out / LEDGER_FILE)
    try:
        with open_models(
            profile.path,
            profile.backbone,
            out,
            backbone_options=profile.backbone_options,
            endpoint=endpoint,
            embedding=profile.embedding,
            embed_endpoint=embed_endpoint,
        ) as models:
            if models.note:
                print("note:", models.note)
            manifest = _manifest(profile, models, fingerprint, started, status="running")
            atomic_write_json(out / MANIFEST_FILE, manifest)
            cache = ResponseCache(out / CACHE_DIR / _slug(models.endpoint.model)) if profile.response_cache else None
            embed_cache = (
                ResponseCache(out / CACHE_DIR / _slug(models.embed_endpoint.model)) if profile.response_cache else None
            )
            llm = LLMClient(models.endpoint, ledger=ledger, cache=cache, seed=profile.build_seed)
            from antipersist_lib.serving.embeddings import Embedder

            embedder = Embedder(models.embed_endpoint, ledger=ledger, cache=embed_cache)
            base = {"benchmark": profile.benchmark, "backbone": models.label}
            if profile.no_memory:
                for seed in profile.seeds:
                    res = _evaluate(profile, models, out, method=NO_MEMORY, method_params={}, name=NO_MEMORY, seed=seed)
                    rows.append({**base, **_no_memory_fields(), **res})
                    _progress(rows[-1])
            for build in profile.builds():
                b0 = time.monotonic()
                with ledger.tag(build=build.key):
                    snaps = with_restarts(
                        models, f"build {build.key}", lambda b=build: _run_build(profile, b, pool, out, llm, embedder)
                    )
                steps = snapshot_steps(snaps)
                chosen = evaluation_steps(profile, build, steps)
                r = build.regime
                builds_info.append(
                    {
                        "builder": build.builder,
                        "regime": r.name,
                        "label": r.label(),
                        "steps": steps[-1].step if steps else 0,
                        "final_entries": steps[-1].n_entries if steps else 0,
                        "update_errors": steps[-1].update_errors if steps else 0,
                        "evaluated_steps": [s.step for s in chosen],
                        "memory": relative_to(snaps, out),
                        "build_s": round(time.monotonic() - b0, 1),
                    }
                )
                print(
                    f"[{build.key}] {builds_info[-1]['steps']} steps, {builds_info[-1]['final_entries']} entries, "
                    f"{builds_info[-1]['update_errors']} unparseable replies; evaluating steps "
                    f"{builds_info[-1]['evaluated_steps']}",
                    flush=True,
                )
                for info in chosen:
                    for seed in profile.seeds:
                        res = _evaluate(
                            profile,
                            models,
                            out,
                            method="consolidated_memory",
                            method_params={"memory": str(snaps), "step": info.step},
                            name=_run_name(build.builder, r.name, info.step),
                            seed=seed,
                        )
                        rows.append({**base, **_build_fields(build, info), **res})
                        _progress(rows[-1])
            for mrow in profile.methods:
                params = dict(mrow.params)
                if mrow.seed_pool:
                    params["seed_pool"] = str(out / POOL_FILE)
                for seed in profile.seeds:
                    res = _evaluate(
                        profile,
                        models,
                        out,
                        method=mrow.method,
                        method_params=params,
                        name=f"{METHOD_REGIME}--{mrow.name}",
                        seed=seed,
                        iterations=mrow.iterations,
                        train_per_iteration=mrow.train_per_iteration,
                        train_pool_limit=mrow.train_pool_limit,
                    )
                    rows.append({**base, **_method_fields(mrow, len(pool)), **res})
                    _progress(rows[-1])
            frame = _write_results(out, rows, models.note)
            manifest = _manifest(profile, models, fingerprint, started, status="complete")
            manifest.update(
                {
                    "builds": builds_info,
                    "evaluations": len(rows),
                    "calls": {"consolidation": ledger.totals(), "evaluation": _run_call_totals(out, rows)},
                    "wall_s": round(time.monotonic() - t0, 1),  # this invocation
                    "wall_s_total": round(before + time.monotonic() - t0, 1),  # every invocation into this folder
                    "finished_at": utc_now(),
                }
            )
            atomic_write_json(out / MANIFEST_FILE, manifest)
    finally:
        ledger.close()
    return StudyResult(out, frame, manifest)


def _slug(s: str) -> str:  # the protocol's cache folder name for a model (so both share one cache)
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


def _no_memory_fields() -> dict[str, Any]:
    return {
        "builder": NO_MEMORY,
        "column": "no_mem",
        "condition": NO_MEMORY_CONDITION,
        "regime": "none",
        "batch_size": None,
        "homogeneous": None,
        "capacity": None,
        "initial": None,
        "step": 0,
        "updates": 0,
        "examples_seen": 0,
        "n_entries": 0,
        "memory_chars": 0,
        "update_errors": 0,
    }


def _method_fields(row: MethodRow, pool_size: int) -> dict[str, Any]:
    seen = (pool_size if row.seed_pool else 0) + row.training_episodes
    return {
        "builder": row.name,
        "column": row.name,
        "condition": row.condition(),
        "regime": METHOD_REGIME,
        "batch_size": None,
        "homogeneous": None,
        "capacity": None,
        "initial": None,
        "step": row.iterations,
        "updates": row.training_episodes,
        "examples_seen": seen,
        "n_entries": None,
        "memory_chars": None,
        "update_errors": 0,
    }


def _build_fields(build: Build, info: StepInfo) -> dict[str, Any]:
    r = build.regime
    return {
        "builder": build.builder,
        "column": table_column(build.builder, r.regime),
        "condition": r.name,
        "regime": r.regime,
        "batch_size": r.batch_size,
        "homogeneous": r.homogeneous,
        "capacity": r.capacity,
        "initial": r.initial,
        "step": info.step,
        "updates": info.updates,
        "examples_seen": info.examples_seen,
        "n_entries": info.n_entries,
        "memory_chars": info.memory_chars,
        "update_errors": info.update_errors,
    }


def _progress(row: dict[str, Any]) -> None:
    success = row["success"]
    print(
        f"  {row['builder']:>6} {row['condition']:<16} step {row['step']:>3} seed {row['seed']}: held-out success "
        f"{'n/a' if success is None else f'{100 * success:5.1f}%'} (n={row['heldout_n']}, "
        + ("kit method)" if row["regime"] == METHOD_REGIME else f"{row['n_entries']} entries)"),
        flush=True,
    )


def _run_call_totals(out: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    totals: dict[str, float] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached": 0}
    for row in rows:
        path = RunDirectory(out / str(row["run_dir"])).calls_path
        if not path.exists():
            continue
        for rec in Ledger(path).records:
            totals["calls"] += 1
            totals["cached"] += int(rec.cached)
            totals["prompt_tokens"] += rec.prompt_tokens
            totals["completion_tokens"] += rec.completion_tokens
    return totals


def _manifest(
    profile: StudyProfile, models: StudyModels, fingerprint: dict[str, Any], started: str, *, status: str
) -> dict[str, Any]:
    from antipersist_lib.methods import prompt_hashes as all_prompt_hashes

    consolidation = {k: v for k, v in prompt_hashes().items() if k.startswith("consolidation_")}
    m = manifest_base("consolidation", STUDY_FORMAT, profile.path, profile.name, profile.raw, models, status)
    m.update(
        {
            "benchmark": profile.benchmark,
            "pool": fingerprint,
            "regimes": {r.name: r.label() for r in profile.regimes},
            "methods": {
                r.name: {"method": r.method, "condition": r.condition(), "params": r.params} for r in profile.methods
            },
            "seeds": list(profile.seeds),
            "prompt_hashes": {"consolidation": consolidation, "all": all_prompt_hashes()},
            "started_at": started,
        }
    )
    return m


# -- loading ----------------------------------------------------------------------------------------


def _frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    for col in ("step", "updates", "examples_seen", "n_entries", "memory_chars", "update_errors", "seed", "heldout_n"):
        df[col] = pd.to_numeric(df[col]).astype("Int64")
    for col in ("success", "score", "mean_steps", "mean_calls"):
        df[col] = pd.to_numeric(df[col]).astype(float)
    for col in ("batch_size", "capacity", "infra_failures"):
        df[col] = pd.to_numeric(df[col]).astype("Int64")
    df["homogeneous"] = df["homogeneous"].astype("boolean")
    return df


def load_study(out_dir: str | Path) -> pd.DataFrame:
    """The tidy results of a study folder: one row per (builder, regime, step, seed), columns ``RESULT_COLUMNS``."""
    path = Path(out_dir) / RESULTS_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FileNotFoundError(f"no study results at {path}: run the study first ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{path} is not a consolidation study's results (no 'rows' list)")
    return _frame(data["rows"])


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(out_dir) / MANIFEST_FILE).read_text(encoding="utf-8"))


def _dirs(found: Any) -> list[Path]:
    if found is None:
        return []
    if isinstance(found, (str, Path)):
        return [Path(found)]
    return [Path(f) for f in found]


def results(found: Any) -> pd.DataFrame:
    """Every study of ``found`` (a folder, a list of folders, or None in mode "paper") in one frame."""
    frames = [load_study(d) for d in _dirs(found)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else _frame([])


def study_note(found: Any) -> str:
    """The weak-model note when any study of ``found`` ran on the embedded default, else ""."""
    for d in _dirs(found):
        note = load_manifest(d).get("note")
        if note:
            return str(note)
    return ""


def summary(found: Any) -> pd.DataFrame:
    """One row per study: backbone, pool, builds, evaluations, consolidation calls, wall time, versions."""
    out = []
    for d in _dirs(found):
        m = load_manifest(d)
        cons = (m.get("calls") or {}).get("consolidation", {}).get("consolidation", {})
        out.append(
            {
                "study": str(d),
                "name": m.get("name"),
                "benchmark": m.get("benchmark"),
                "backbone": m.get("backbone"),
                "pool": f"{m['pool']['size']} records {m['pool']['types']} (hash {m['pool']['hash']})",
                "builds": len(m.get("builds", [])),
                "evaluations": m.get("evaluations"),
                "consolidation_calls": cons.get("calls", 0),
                "unparseable_updates": sum(b.get("update_errors", 0) for b in m.get("builds", [])),
                "seeds": m.get("seeds"),
                "wall_s": m.get("wall_s_total", m.get("wall_s")),
                "git_commit": m.get("git_commit"),
                "status": m.get("status"),
            }
        )
    return pd.DataFrame(out)


def builds_table(found: Any) -> pd.DataFrame:
    """Every build of every study: steps, final entries, replies that could not be parsed, evaluated steps."""
    out = []
    for d in _dirs(found):
        m = load_manifest(d)
        for b in m.get("builds", []):
            out.append({"backbone": m.get("backbone"), **{k: v for k, v in b.items() if k != "memory"}})
    return pd.DataFrame(out)


def obtain_study(
    mode: str,
    study_dir: Any,
    *,
    profile: Any = None,
    root: str | Path | None = None,
    out_root: str | Path = "outputs/consolidation",
    endpoint: Endpoint | None = None,
) -> list[Path]:
    """The notebooks' run-or-load step. "paper": []; "load": the folder(s) of ``study_dir``; "run": run each
    ``profile`` into ``<out_root>/<profile name>`` (resuming) and return those folders. Relative paths are
    taken from ``root``."""
    from antipersist_lib.paths import repo_root

    base = Path(root) if root is not None else repo_root()
    if mode == "paper":
        return []
    if mode == "load":
        paths = [base / d for d in _dirs(study_dir)]
        for p in paths:
            if not (p / RESULTS_JSON).exists():
                raise FileNotFoundError(f"no study results at {p}: run the study first or point study_dir elsewhere")
        return paths
    if mode == "run":
        profiles = _dirs(profile)
        if not profiles:
            raise ValueError("mode 'run' needs a study profile (params/consolidation/*.yaml)")
        outs = []
        for prof in profiles:
            out = base / out_root / prof.stem
            run_study(base / prof, out, endpoint=endpoint, root=base)
            outs.append(out)
        return outs
    raise ValueError(f"mode must be one of ('paper', 'load', 'run'), got {mode!r}")


# -- analyses ---------------------------------------------------------------------------------------


def _label(row: Mapping[str, Any]) -> str:
    if row["builder"] == NO_MEMORY:
        return "no memory"
    regime = row["regime"]
    if regime == METHOD_REGIME:
        return f"kit method ({row['condition']})"
    if regime == "static_all":
        base = "Static-All"
    elif regime == "static_group":
        base = "Static-Group"
    else:
        parts = [f"b={int(row['batch_size'])}" if not pd.isna(row["batch_size"]) else "b=?"]
        parts.append("hom." if bool(row["homogeneous"]) else "het.")
        if not pd.isna(row["capacity"]):
            parts.append(f"cap {int(row['capacity'])}")
        base = f"Stream ({', '.join(parts)})"
    if regime != "stream" and not pd.isna(row["capacity"]):
        base += f" (cap {int(row['capacity'])})"
    initial = row.get("initial")
    return base + (f" from {initial}" if isinstance(initial, str) and initial else "")


def seed_means(df: pd.DataFrame) -> pd.DataFrame:
    """Per evaluated bank (condition x step): success and score in %, mean and std over the seeds (repeats)."""
    cols = [*CONDITION_COLUMNS, "step", "updates", "examples_seen"]
    if df.empty:
        return pd.DataFrame(
            columns=[*cols, "regime_label", "success", "success_std", "score", "n_entries", "update_errors", "seeds"]
        )
    keyed = df.copy()
    for c in cols:  # groupby drops NaN keys: compare as objects instead
        keyed[c] = keyed[c].astype(object).where(keyed[c].notna(), None)
    g = keyed.groupby(cols, dropna=False, sort=False)
    out = g.agg(
        success=("success", "mean"),
        success_std=("success", "std"),
        score=("score", "mean"),
        n_entries=("n_entries", "mean"),
        update_errors=("update_errors", "max"),
        seeds=("seed", "nunique"),
    ).reset_index()
    out["success"] = 100 * out["success"]
    out["success_std"] = 100 * out["success_std"]
    out["score"] = 100 * out["score"]
    out.insert(len(CONDITION_COLUMNS), "regime_label", [_label(r) for _, r in out.iterrows()])
    return out


def _no_memory(means: pd.DataFrame) -> pd.DataFrame:
    return means[means["builder"] == NO_MEMORY]


def utility_curves(df: pd.DataFrame, *, regimes: Sequence[str] = ("stream",)) -> pd.DataFrame:
    """Utility vs number of updates (Fig. 1 shape): one line per (builder, condition) of the given regimes,
    success (%) per evaluated step, with step 0 (the empty bank) taken from the no-memory row of the same
    backbone and benchmark when the condition starts empty. Column ``point``: "evaluated" or "no memory (step 0)"."""
    means = seed_means(df)
    cols = [
        "benchmark",
        "backbone",
        "builder",
        "condition",
        "regime_label",
        "homogeneous",
        "batch_size",
        "initial",
        "step",
        "updates",
        "examples_seen",
        "success",
        "success_std",
        "n_entries",
        "update_errors",
        "seeds",
        "point",
    ]
    if means.empty:
        return pd.DataFrame(columns=cols)
    cur = means[means["regime"].isin(list(regimes))].assign(point="evaluated")
    extra = []
    for (bench, bb, _builder, _cond), sub in cur.groupby(["benchmark", "backbone", "builder", "condition"], sort=False):
        if isinstance(sub["initial"].iloc[0], str):
            continue
        nm = _no_memory(means)
        nm = nm[(nm["benchmark"] == bench) & (nm["backbone"] == bb)]
        if nm.empty:
            continue
        row = sub.iloc[0].copy()
        for k in ("step", "updates", "examples_seen"):
            row[k] = 0
        row["success"], row["success_std"] = nm["success"].iloc[0], nm["success_std"].iloc[0]
        row["n_entries"], row["update_errors"], row["seeds"] = 0, 0, nm["seeds"].iloc[0]
        row["point"] = "no memory (step 0)"
        extra.append(row)
    out = pd.concat([pd.DataFrame(extra), cur], ignore_index=True) if extra else cur
    out = out.sort_values(["benchmark", "backbone", "builder", "condition", "step"], kind="stable")
    return out[cols].reset_index(drop=True)


def regime_bars(df: pd.DataFrame) -> pd.DataFrame:
    """Static-All vs Static-Group vs Stream (Fig. 3 shape): each (builder, condition) at its last evaluated step,
    success (%) mean and std over seeds, plus the no-memory level of the same backbone (``no_memory``)."""
    means = seed_means(df)
    cols = [
        "benchmark",
        "backbone",
        "builder",
        "condition",
        "regime",
        "regime_label",
        "step",
        "examples_seen",
        "n_entries",
        "success",
        "success_std",
        "seeds",
        "no_memory",
    ]
    if means.empty:
        return pd.DataFrame(columns=cols)
    built = means[(means["builder"] != NO_MEMORY) & (means["regime"] != METHOD_REGIME)]
    last = built.loc[built.groupby(["benchmark", "backbone", "builder", "condition"], sort=False)["step"].idxmax()]
    nm = _no_memory(means).set_index(["benchmark", "backbone"])["success"]
    last = last.assign(no_memory=[nm.get((b, bb), float("nan")) for b, bb in zip(last["benchmark"], last["backbone"])])
    order = {"static_all": 0, "static_group": 1, "stream": 2}
    last = last.assign(_o=last["regime"].map(order)).sort_values(
        ["benchmark", "backbone", "builder", "_o", "condition"]
    )
    return last[cols].reset_index(drop=True)


def homogeneity_curves(df: pd.DataFrame) -> pd.DataFrame:
    """Homogeneous vs heterogeneous Stream batches (Fig. 4 shape): the stream curves with a ``batches`` column."""
    curves = utility_curves(df)
    return curves.assign(
        batches=["homogeneous" if h is True else "heterogeneous" for h in curves["homogeneous"].astype(object)]
    )


def paper_reference() -> pd.DataFrame:
    """The utility-vs-updates values the paper states (Fig. 1(b), WebShop AWM; x100), from ``faulty_paper``."""
    rows = []
    for key, examples, line in (
        ("webshop_awm_8_examples", 8, "AWM"),
        ("webshop_awm_128_examples", 128, "AWM"),
        ("webshop_no_memory", 8, "no memory"),
        ("webshop_no_memory", 128, "no memory"),
    ):
        s = faulty_paper.stated(key)
        rows.append(
            {
                "figure": "Fig. 1(b)",
                "benchmark": "webshop",
                "line": line,
                "examples_seen": examples,
                "score": 100 * s.value,
                "source": s.source,
                "text": s.text,
            }
        )
    return pd.DataFrame(rows)


# -- Tables 2 and 3 ----------------------------------------------------------------------------------

TRAJECTORY_LOG_FIXED = ("all", "incr_keep", "one_pass_keep")
CONSOLIDATORS = ("ace_gt", "ace", "awm", "dc", "clin")


def is_trajectory_log(column: str) -> bool:
    return column in TRAJECTORY_LOG_FIXED or _FS.fullmatch(column) is not None


def column_label(column: str) -> str:
    if column in faulty_paper.COLUMN_LABELS:
        return faulty_paper.COLUMN_LABELS[column]
    if column in METHOD_LABELS:
        return METHOD_LABELS[column]
    m = _FS.fullmatch(column)
    return f"FS={m.group(1)}" if m else column.upper()


def column_order(columns: Sequence[str]) -> list[str]:
    """The paper's column order (NoMem, All, FS=N descending, Incr. Keep, One-Pass Keep, ACE_GT, ACE, AWM, DC),
    with columns the paper lacks (other FS sizes, CLIN) in their group."""

    def key(c: str) -> tuple[int, float]:
        if c == "no_mem":
            return (0, 0)
        if c == "all":
            return (1, 0)
        m = _FS.fullmatch(c)
        if m:
            return (2, -int(m.group(1)))
        if c == "incr_keep":
            return (3, 0)
        if c == "one_pass_keep":
            return (4, 0)
        if c in CONSOLIDATORS:
            return (5, CONSOLIDATORS.index(c))
        return (6, 0)

    return sorted(dict.fromkeys(columns), key=key)


def row_marks(
    values: Mapping[str, float | None], *, decimals: int = 0, excluded: Sequence[str] = ()
) -> tuple[dict[str, bool], set[str]]:
    """The paper's marks for one table row: ``beaten[c]`` for each consolidator column (a value, rounded to
    ``decimals``, below at least one trajectory-log column's) and the set of best columns (ties all best).
    ``excluded`` columns (e.g. Table 3's footnoted cells, evaluated by another model) get neither mark."""
    rounded = {c: round(float(v), decimals) for c, v in values.items() if v is not None and not pd.isna(v)}
    logs = [v for c, v in rounded.items() if is_trajectory_log(c) and c not in excluded]
    top_log = max(logs) if logs else None
    beaten = {
        c: bool(top_log is not None and v < top_log)
        for c, v in rounded.items()
        if c in CONSOLIDATORS and c not in excluded
    }
    eligible = {c: v for c, v in rounded.items() if c not in excluded}
    best = {c for c, v in eligible.items() if v == max(eligible.values())} if eligible else set()
    return beaten, best


def _choose_condition(sub: pd.DataFrame, column: str, preference: Sequence[str]) -> pd.DataFrame:
    """Among the banks filling ``column`` in one row, those of the condition the table uses, at its last step."""
    if column == "no_mem":
        return sub
    order = ["static_all"] if is_trajectory_log(column) and column not in ("incr_keep",) else list(preference)
    cands = sub.assign(
        _r=[order.index(r) if r in order else len(order) for r in sub["regime"]],
        _i=[isinstance(i, str) for i in sub["initial"].astype(object)],
    ).sort_values(["_r", "_i", "condition"], kind="stable")
    cond = cands["condition"].iloc[0]
    chosen = sub[sub["condition"] == cond]
    return chosen[chosen["step"] == chosen["step"].max()]


def trajectory_log_table(
    df: pd.DataFrame,
    *,
    metric: str = "success",
    decimals: int = 0,
    regime_preference: Sequence[str] = ("stream", "static_all", "static_group"),
) -> pd.DataFrame:
    """This study's Tables 2-3 cells: one row per (benchmark, backbone, column) with the value (mean over seeds,
    x100), the condition and step it was taken from, and the "(--)" (``beaten``) and best-in-row marks."""
    cols = ["benchmark", "backbone", "column", "label", "value", "seeds", "condition", "regime_label", "step"]
    if df.empty:
        return pd.DataFrame(columns=[*cols, "beaten", "best", "source"])
    means = seed_means(df)
    means = means[means["column"].notna()]
    value_col = {"success": "success", "score": "score"}[metric]
    out = []
    for (bench, bb), row in means.groupby(["benchmark", "backbone"], sort=False):
        cells = []
        for column in column_order(list(row["column"])):
            chosen = _choose_condition(row[row["column"] == column], column, regime_preference).iloc[0]
            cells.append(
                {
                    "benchmark": bench,
                    "backbone": bb,
                    "column": column,
                    "label": column_label(column),
                    "value": float(chosen[value_col]) if not pd.isna(chosen[value_col]) else None,
                    "seeds": int(chosen["seeds"]),
                    "condition": chosen["condition"],
                    "regime_label": chosen["regime_label"],
                    "step": int(chosen["step"]),
                }
            )
        beaten, best = row_marks({c["column"]: c["value"] for c in cells}, decimals=decimals)
        for c in cells:
            c.update(beaten=beaten.get(c["column"], False), best=c["column"] in best, source="this run")
        out.extend(cells)
    return pd.DataFrame(out, columns=[*cols, "beaten", "best", "source"])


def paper_table_cells(source: str | None = None, benchmark: str | None = None, *, decimals: int = 0) -> pd.DataFrame:
    """Tables 2-3 as printed (``faulty_paper``), one row per cell, with the paper's marks (``beaten``, ``best``)
    and the marks this module's rule computes from the printed values (``beaten_computed``, ``best_computed``)."""
    records = faulty_paper.table2() + faulty_paper.table3()
    out = []
    for r in records:
        if (source is not None and r.source != source) or (benchmark is not None and r.benchmark != benchmark):
            continue
        out.append(
            {
                "source": r.source,
                "benchmark": r.benchmark,
                "metric": r.metric,
                "backbone": r.backbone,
                "column": r.column,
                "label": r.label,
                "value": r.value,
                "beaten": r.beaten,
                "best": r.bold,
                "note": r.note,
            }
        )
    cells = pd.DataFrame(out)
    if cells.empty:
        return cells
    computed_beaten, computed_best = {}, {}
    for (src, bench, bb), row in cells.groupby(["source", "benchmark", "backbone"], sort=False):
        excluded = [c for c, n in zip(row["column"], row["note"]) if n]
        beaten, best = row_marks(dict(zip(row["column"], row["value"])), decimals=decimals, excluded=excluded)
        for c in row["column"]:
            computed_beaten[(src, bench, bb, c)] = beaten.get(c, False)
            computed_best[(src, bench, bb, c)] = c in best
    keys = list(zip(cells["source"], cells["benchmark"], cells["backbone"], cells["column"]))
    cells["beaten_computed"] = [computed_beaten[k] for k in keys]
    cells["best_computed"] = [computed_best[k] for k in keys]
    return cells


def _cell_text(value: Any, beaten: bool, best: bool, note: str = "", decimals: int = 0) -> str:
    if value is None or pd.isna(value):
        return "—"
    text = f"{float(value):.{decimals}f}"
    if best:
        text = f"**{text}**"
    if note:
        text += " (*)"
    if beaten:
        text += " (--)"
    return text


def table_display(cells: pd.DataFrame, *, decimals: int = 0) -> pd.DataFrame:
    """Cells (``trajectory_log_table`` or ``paper_table_cells``) as the paper prints them: rows (source,
    benchmark, backbone), one column per method label; "**v**" best in row, "(--)" beaten by a trajectory log,
    "(*)" the paper's footnote (Table 3: evaluated by GPT-5-Mini), "—" not measured."""
    if cells.empty:
        return pd.DataFrame()
    cells = cells.copy()
    if "source" not in cells:
        cells["source"] = "this run"
    notes = cells["note"] if "note" in cells else [""] * len(cells)
    cells["text"] = [
        _cell_text(v, bool(b), bool(s), n if isinstance(n, str) else "", decimals)
        for v, b, s, n in zip(cells["value"], cells["beaten"], cells["best"], notes)
    ]
    order = [column_label(c) for c in column_order(list(cells["column"]))]
    wide = cells.pivot_table(
        index=["source", "benchmark", "backbone"], columns="label", values="text", aggfunc="first", sort=False
    )
    return wide.reindex(columns=order).fillna("")


def tables_beside_paper(cells: pd.DataFrame, *, decimals: int = 0) -> pd.DataFrame:
    """This study's rows under the paper's block of the same benchmark (Table 2: AppWorld, ALFWorld; Table 3:
    WebShop), in the paper's layout: rows (source, benchmark, backbone), "source" being "Table 2", "Table 3" or
    "this run". Benchmarks the paper does not report (ScienceWorld) show this study's rows alone."""
    return table_display(beside_paper_cells(cells, decimals=decimals), decimals=decimals)


def beside_paper_cells(cells: pd.DataFrame, *, decimals: int = 0) -> pd.DataFrame:
    """The cells behind ``tables_beside_paper``: the paper's cells of each benchmark of ``cells``, then ``cells``."""
    parts = []
    for bench in dict.fromkeys(cells["benchmark"]) if not cells.empty else []:
        parts.append(paper_table_cells(benchmark=bench, decimals=decimals))
        parts.append(cells[cells["benchmark"] == bench])
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


# -- figures ----------------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib.pyplot as plt

    from antipersist_lib.analysis import plots  # noqa: F401  (selects the headless backend outside notebooks)

    return plt


def _note(fig: Any, note: str, statement: str = "") -> None:
    import textwrap

    text = "\n".join(x for x in (statement, note) if x)
    if text:
        fig.text(0.01, -0.01, "\n".join(textwrap.wrap(text, 170)), fontsize=6.5, color="dimgray", va="top")


def plot_utility(
    curves: pd.DataFrame,
    *,
    reference: pd.DataFrame | None = None,
    title: str,
    note: str = "",
    statement: str = "",
    x: str = "updates",
) -> Any:
    """Fig. 1 shape. Left panel: the paper's stated points (``paper_reference``: WebShop AWM vs examples, and
    no memory). Right panels, one per benchmark x backbone: this study's success vs ``x`` (updates or
    examples_seen), one line per builder and stream condition; the dotted line is no memory."""
    import seaborn as sns
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    sns.set_theme(style="whitegrid")
    panels = list(dict.fromkeys(zip(curves["benchmark"], curves["backbone"]))) if not curves.empty else []
    n = 1 + max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 3.9), squeeze=False)
    ax = axes[0][0]
    if reference is not None and not reference.empty:
        for line, sub in reference.groupby("line", sort=False):
            ax.plot(
                sub["examples_seen"],
                sub["score"],
                marker="o" if line != "no memory" else None,
                linestyle="-" if line != "no memory" else ":",
                color="tab:red" if line != "no memory" else "black",
                label=f"paper: {line}",
            )
            for _, r in sub.iterrows():
                if line != "no memory":
                    ax.annotate(
                        f"{r['score']:.0f}",
                        (r["examples_seen"], r["score"]),
                        xytext=(4, 4),
                        textcoords="offset points",
                        fontsize=8,
                    )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("examples consolidated")
        ax.set_ylabel("WebShop score (x100)")
        ax.set_ylim(-3, 103)
        ax.legend(fontsize=7)
    ax.set_title("paper, Fig. 1(b) (stated values)", fontsize=9)
    for k, (bench, bb) in enumerate(panels or [("(no study loaded)", "")], start=1):
        ax = axes[0][k]
        sub = curves[(curves["benchmark"] == bench) & (curves["backbone"] == bb)] if panels else curves
        if sub.empty:
            ax.text(0.5, 0.5, "no stream conditions in this study", ha="center", va="center", transform=ax.transAxes)
        else:
            sub = sub.assign(line=[f"{b} · {c}" for b, c in zip(sub["builder"], sub["regime_label"])])
            sns.lineplot(data=sub, x=x, y="success", hue="line", marker="o", ax=ax, errorbar=None)
            zero = sub[sub["point"] != "evaluated"]
            if not zero.empty:
                ax.axhline(float(zero["success"].iloc[0]), linestyle=":", color="black", label="no memory")
            ax.legend(fontsize=6.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("memory updates (stream steps)" if x == "updates" else "examples consolidated")
        ax.set_ylabel("held-out success (%)")
        ax.set_ylim(-3, 103)
        ax.set_title(f"this run: {bench}, {bb}", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    _note(fig, note, statement)
    plt.close(fig)
    return fig


def plot_regime_bars(bars: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 3 shape: held-out success per builder, one bar per construction condition (Static-All, Static-Group,
    Stream ...), the dotted line the no-memory level; every bar carries its value."""
    import seaborn as sns

    plt = _plt()
    sns.set_theme(style="whitegrid")
    panels = list(dict.fromkeys(zip(bars["benchmark"], bars["backbone"]))) if not bars.empty else []
    n = max(1, len(panels))
    width = max(6.5, 1.6 * (bars["builder"].nunique() if not bars.empty else 1) + 3)
    fig, axes = plt.subplots(1, n, figsize=(width * n, 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels or [None]):
        if panel is None:
            ax.text(0.5, 0.5, "no study loaded", ha="center", va="center", transform=ax.transAxes)
            continue
        sub = bars[(bars["benchmark"] == panel[0]) & (bars["backbone"] == panel[1])]
        sns.barplot(data=sub, x="builder", y="success", hue="regime_label", ax=ax, errorbar=None)
        for container in ax.containers:
            ax.bar_label(container, fmt="%.1f", fontsize=6, padding=1)
        nm = sub["no_memory"].dropna()
        if not nm.empty:
            ax.axhline(float(nm.iloc[0]), linestyle=":", color="black", label="no memory")
        ax.set_ylim(0, 105)
        ax.set_ylabel("held-out success (%)")
        ax.set_xlabel("")
        ax.set_title(f"{panel[0]}, {panel[1]}", fontsize=9)
        ax.legend(fontsize=7, title="condition", title_fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    _note(fig, note, statement)
    plt.close(fig)
    return fig


def plot_homogeneity(curves: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Fig. 4 shape: success vs updates per builder (one panel each), homogeneous vs heterogeneous stream
    batches as colour, batch size as marker; a panel says so when the study streamed one kind of batch only."""
    import seaborn as sns
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    sns.set_theme(style="whitegrid")
    builders = list(dict.fromkeys(curves["builder"])) if not curves.empty else []
    n = max(1, len(builders))
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.7), squeeze=False)
    for ax, builder in zip(axes[0], builders or [None]):
        if builder is None:
            ax.text(0.5, 0.5, "no stream conditions in this study", ha="center", va="center", transform=ax.transAxes)
            continue
        sub = curves[curves["builder"] == builder]
        sub = sub.assign(line=[f"{bb} · {c}" for bb, c in zip(sub["backbone"], sub["regime_label"])])
        sns.lineplot(
            data=sub, x="updates", y="success", hue="batches", style="line", markers=True, ax=ax, errorbar=None
        )
        kinds = set(sub.loc[sub["point"] == "evaluated", "batches"])
        if len(kinds) < 2:
            ax.text(
                0.5,
                0.92,
                f"only {', '.join(sorted(kinds)) or 'no'} batches streamed",
                ha="center",
                fontsize=7,
                transform=ax.transAxes,
                color="dimgray",
            )
        ax.set_title(builder, fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("memory updates (stream steps)")
        ax.set_ylabel("held-out success (%)")
        ax.set_ylim(-3, 103)
        ax.legend(fontsize=6)
    fig.suptitle(title)
    fig.tight_layout()
    _note(fig, note, statement)
    plt.close(fig)
    return fig


def plot_table(cells: pd.DataFrame, *, title: str, note: str = "", statement: str = "") -> Any:
    """Tables 2-3 as bars: one panel per table row (source, benchmark, backbone), one bar per column, coloured by
    group (no memory, trajectory logs, consolidators); "(--)" over a consolidator beaten by a trajectory log."""
    import seaborn as sns

    plt = _plt()
    sns.set_theme(style="whitegrid")
    if cells.empty:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.text(0.5, 0.5, "no table cells", ha="center", va="center", transform=ax.transAxes)
        plt.close(fig)
        return fig
    cells = cells.assign(source=cells["source"] if "source" in cells else "this run")
    rows = list(dict.fromkeys(zip(cells["source"], cells["benchmark"], cells["backbone"])))
    ncol = min(4, len(rows))
    nrow = math.ceil(len(rows) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.4 * ncol, 3.3 * nrow), squeeze=False)
    colors = {"no memory": "0.6", "trajectory logs": "tab:blue", "consolidators": "tab:orange"}
    for k, (src, bench, bb) in enumerate(rows):
        ax = axes[k // ncol][k % ncol]
        sub = cells[(cells["source"] == src) & (cells["benchmark"] == bench) & (cells["backbone"] == bb)]
        sub = sub.set_index("column").loc[column_order(list(sub["column"]))].reset_index()
        groups = [
            "no memory" if c == "no_mem" else "trajectory logs" if is_trajectory_log(c) else "consolidators"
            for c in sub["column"]
        ]
        values = [0.0 if v is None or pd.isna(v) else float(v) for v in sub["value"]]
        ax.bar(range(len(sub)), values, color=[colors[g] for g in groups])
        for i, (v, beaten, raw) in enumerate(zip(values, sub["beaten"], sub["value"])):
            text = "—" if raw is None or pd.isna(raw) else f"{v:.0f}" + (" (--)" if bool(beaten) else "")
            ax.text(i, v + 1.5, text, ha="center", fontsize=6, rotation=90, color="red" if beaten else "black")
        ax.set_xticks(range(len(sub)), list(sub["label"]), rotation=60, fontsize=7)
        ax.set_ylim(0, 118)
        ax.set_title(f"{src}: {bench}, {bb}", fontsize=8)
        ax.set_ylabel("success / score (x100)", fontsize=7)
    for k in range(len(rows), nrow * ncol):
        axes[k // ncol][k % ncol].set_axis_off()
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.legend(handles, list(colors), loc="upper right", fontsize=7)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    _note(fig, note, statement)
    plt.close(fig)
    return fig


# -- command line -----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m antipersist_lib.consolidation.study",
        description="Run a consolidation study profile (faulty-memories §3-4.2): build memories, evaluate them.",
    )
    parser.add_argument("--profile", required=True, help="a study profile, e.g. params/consolidation/smoke.yaml")
    parser.add_argument("--out", help="output folder (default outputs/consolidation/<profile name>)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path("outputs") / "consolidation" / Path(args.profile).stem
    t0 = time.monotonic()
    try:
        result = run_study(args.profile, out)
    except (StudyProfileError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    means = seed_means(result.frame)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        cols = ["builder", "condition", "step", "n_entries", "update_errors", "success", "seeds"]
        print(means[cols].round(1).to_string(index=False))
    print(f"study written to {out} in {math.ceil(time.monotonic() - t0)} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
