"""ARC-AGI Stream studies: run a profile's grid of stream conditions and evaluate the memory at its checkpoints
for notebooks 09 and 10 (faulty-memories paper §4.1, §5, §6.1-6.2, Table 4, Figs. 2, 5, 7, 9, App. C.1, I, K.2).

``run_study(profile, out_dir)`` reads a study profile (``params/arc/*.yaml``), runs ``controller.run_stream``
once per condition of its grid (regime x source x |B| [x tasks per step]) on a training pool, then
evaluates the memory as it stood at each checkpoint step on a held-out pool subset (and, optionally, on the
training slice the stream saw: Fig. 2's in-distribution regression), plus a no-memory baseline. It writes::

    <out_dir>/study.json                  manifest: profile, backbone, endpoint (no key), package versions,
                                          prompt hashes, task ids, checkpoints, calls, wall time
    <out_dir>/results.csv, results.json   one row per (condition, checkpoint step, evaluation set)
    <out_dir>/ledger.jsonl                one line per LLM call (counts and tags only, never text)
    <out_dir>/cache/                      response cache (when the profile keeps ``response_cache: true``)
    <out_dir>/conditions/<name>/          config.json, snapshots.jsonl, memory.json (run_stream), evals.jsonl,
                                          condition.json (written last: the condition is complete),
                                          judge.json and surgery.json when the profile asks for them

Re-running the same command resumes: complete conditions (``condition.json``) are kept, an incomplete
condition folder is cleared and re-run (its earlier calls are answered by the response cache).

Endpoint: ``endpoint=`` (an ``Endpoint``) wins; else the profile's ``backbone``: ``embedded`` starts the
embedded default (Gemma 3 270M on llama.cpp, as ``runner.main_job`` does) and labels everything with its
weak-model note; any other value is a backbone profile, a name in ``params/backbones/`` or a profile file
(a vLLM endpoint); ``backbone=`` (the command line's ``--base-url/--model``) replaces the profile's. The
backbone profile's agent decoding is not used: the stream's own ``temperature`` applies to every call.
Before the first piece of work the endpoint gets one small preflight request (``studies``).

Kit choices where the paper is silent:

- Step 0 is the empty memory (the stream's capacity, nothing stored); a checkpoint at step s evaluates the
  memory of snapshot s. Evaluation does not change the memory, so evaluating after the stream is the same
  as evaluating during it.
- The training slice is the first ``train_limit`` distinct tasks of the stream order (every condition of
  the grid sees them: the limit is capped at the fewest tasks any condition sees), graded on their test grids.
- ``task_examples`` may shrink the tasks (``n_train`` shown examples, ``n_test`` graded grids) so that a
  small model's context holds them; the paper uses 10 and 10 (the default).
- Table 4's |B| (``buffer_reading``): "batch" reads ``conditions.buffer_size`` as the fresh tasks per step with an
  uncapped buffer (§6.1's "8 fresh examples" per step; Table 4's buffer sizes 3.33 and 50.00 exceed |B|; the
  paper profile's reading), "cap" (the default) as the buffer's FIFO capacity with one task per step. Condition
  names carry both capacity and tasks per step (``auto-gt-binf-t8`` / ``auto-gt-b8``); every record carries
  ``table4_b``, the |B| column it belongs to.
- ``episodic_capacity`` (``batch`` only): the buffer's budget apart from |B| (Table 4's 50 in the paper profile);
  ``train_pool: {name: fresh}`` streams a new task at every position (§6.1's fresh examples); a stream that would
  cycle a fixed pool must say ``revisit: true``. Loading renders every condition's largest prompts against the
  named backbone's context and refuses what does not fit (``arc.context.check_profile_context``); a run
  checks again against its real endpoint and measures every request before sending it (``PromptGuard``).
- Table 4's numbers average the evaluated checkpoint memories (``coverage_average: checkpoints``, steps > 0;
  ``arc.analysis.table4_averages``) or every step (``steps``).
- ``evaluation.repeats`` solves every evaluated task that many times (§4: two repeats); accuracy is the mean.
- ``evaluation.temperature`` samples the evaluation (default: the stream's ``temperature``); repeat r sends
  request seed ``seed + r``, so repeats are distinct samples and distinct response-cache entries.
- ``table4_memories: n`` makes Table 4 average n evenly spaced memories (``analysis.table4_memory_steps``)
  instead of the evaluated checkpoints.
- ``fig2`` (Fig. 2, App. D.5): the first ``n_tasks`` pool tasks the no-memory solver passes in every repeat
  (``select_slice``; ``fig2_slice.json``) are streamed ``revisits`` times with GT trajectories, one per step,
  in extra conditions ``fig2-<regime>-gt-b...`` evaluated on that slice (``fig2_slice``) at step 0 and after
  each pass. A pool with fewer passing tasks gives a shorter slice (logged, ``shortfall``); none is an error.
- ``source_ablation`` (App. K.1, Fig. 9(a)): chosen conditions' checkpoint memories are evaluated again with
  the solver reading only the abstract store, only the episodic store, or both (``sources.json``).

Reading a study back: ``load_study``, ``load_manifest``, ``results``, ``summary``, ``study_note`` and the
notebooks' run-or-load step ``obtain_study``; the tables are in ``arc.analysis``, the figures in
``arc.figures``. Command line::

    python -m antipersist_lib arc-study --profile params/arc/smoke.yaml --out outputs/arc/smoke
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.arc.context import (
    CONTEXT_FIX,
    check_profile_context,
)
from antipersist_lib.arc.controller import (
    CONFIG_FILE,
    DECIDE_ON,
    MEMORY_FILE,
    MEMORY_SOURCES,
    REGIMES,
    SNAPSHOTS_FILE,
    SOURCES,
    EvalResult,
    SolveRecord,
    StreamConfig,
    evaluate,
    load_snapshots,
    memory_at,
    run_stream,
    stream_batches,
)
from antipersist_lib.arc.generator import FRESH_POOL, N_TEST, N_TRAIN, POOL_SIZES, ArcTask, make_task, pool_plan
from antipersist_lib.arc.isolation import ISOLATION_MODES
from antipersist_lib.arc.isolation import probe as probe_isolation
from antipersist_lib.arc.lineage import (
    judge_memory,
    label_counts,
    memory_surgery,
)
from antipersist_lib.arc.prompts import EXTRACTION_SCHEMAS, HELPER_USAGES, SOLVER_MODES
from antipersist_lib.arc.sandbox import UNISOLATED_WARNING, SandboxLimits
from antipersist_lib.arc.stores import AbstractStore, EpisodicBuffer, Memory
from antipersist_lib.context_budget import PromptGuard
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, read_json, read_jsonl
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.serving.response_cache import ResponseCache
from antipersist_lib.studies import (
    BACKBONE_OPTION_KEYS,
    MANIFEST_FILE,
    StudyModels,
    StudyProfileError,  # noqa: F401  (re-exported: what a caller of run_study catches)
    check_backbone,
    check_int,
    check_list,
    check_mapping,
    fail,
    manifest_base,
    obtain_folder,
    open_models,
    previous_wall_s,
    read_profile,
    with_restarts,
)

STUDY_FORMAT = 1
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"
LEDGER_FILE = "ledger.jsonl"
CACHE_DIR = "cache"
CONDITIONS_DIR = "conditions"
EVALS_FILE = "evals.jsonl"
DONE_FILE = "condition.json"
JUDGE_FILE = "judge.json"
SURGERY_FILE = "surgery.json"
SOURCES_FILE = "sources.json"
FIG2_SLICE_FILE = "fig2_slice.json"
NO_MEMORY = "no_memory"
EVAL_SETS = ("heldout", "train")
#: the evaluation set of the Fig. 2 conditions: the selected slice, graded on its test grids
FIG2_EVAL_SET = "fig2_slice"
FIG2_GROUP = "fig2"
GRID_GROUP = "grid"

#: how a profile reads the values of ``conditions.buffer_size`` (Table 4's |B|):
#: "cap": the episodic buffer's FIFO capacity (one task per step unless ``tasks_per_step`` says otherwise);
#: "batch": the tasks (fresh examples) per step, with an uncapped buffer (§6.1: "8 fresh examples" per step,
#: "71 steps (568 examples)"; Table 4's buffer sizes 3.33 and 50.00 exceed a cap of 1 or 8)
BUFFER_READINGS = ("cap", "batch")
#: what Table 4's averages run over: the evaluated checkpoint memories (steps > 0) or every stream step
COVERAGE_AVERAGES = ("checkpoints", "steps")
#: K.1's source arms: the name a table shows and the stores that condition the solver
SOURCE_ARMS = {"abstract_only": ("abstract",), "episodic_only": ("episodic",), "both": ("episodic", "abstract")}

#: what run_study leaves in a condition folder (an incomplete one holding anything else is not cleared)
_CONDITION_FILES = {
    CONFIG_FILE,
    SNAPSHOTS_FILE,
    MEMORY_FILE,
    EVALS_FILE,
    DONE_FILE,
    JUDGE_FILE,
    SURGERY_FILE,
    SOURCES_FILE,
}

PROFILE_KEYS = {
    "name",
    "description",
    "backbone",
    "backbone_options",
    "seed",
    "seeds",
    "train_pool",
    "heldout_pool",
    "task_examples",
    "steps",
    "tasks_per_step",
    "checkpoint_every",
    "checkpoints",
    "conditions",
    "no_memory",
    "stream",
    "evaluation",
    "judge",
    "surgery",
    "response_cache",
    "sandbox",
    "buffer_reading",
    "episodic_capacity",
    "revisit",
    "coverage_average",
    "table4_memories",
    "fig2",
    "source_ablation",
}
POOL_KEYS = {"name", "seed", "limit"}
EXAMPLE_KEYS = {"n_train", "n_test"}
CONDITION_KEYS = {"regime", "source", "buffer_size", "tasks_per_step"}
STREAM_KEYS = {
    "shuffle",
    "history_examples",
    "record_failures",
    "solver_memory",
    "tool_bodies",
    "temperature",
    "solver_max_tokens",
    "manager_max_tokens",
    "decide_on",
    "extraction_schema",
    "solver_mode",
    "helper_usage",
    "extraction_coaching",
}
EVALUATION_KEYS = {"sets", "train_limit", "sources", "workers", "repeats", "temperature"}
FIG2_KEYS = {"select", "n_tasks", "revisits", "regime", "buffer_size"}
FIG2_SELECTIONS = ("no_memory_pass", "first")
SOURCE_ABLATION_KEYS = {"conditions", "checkpoints", "eval_set", "arms"}
JUDGE_KEYS = {"conditions", "max_tokens"}
SURGERY_KEYS = {"conditions", "max_entries", "eval_set"}

RESULT_COLUMNS = (
    "condition",
    "regime",
    "source",
    "buffer_capacity",
    "tasks_per_step",
    "table4_b",
    "step",
    "examples_seen",
    "eval_set",
    "accuracy",
    "n_passed",
    "n_tasks",
    "buffer_size",
    "abstract_entries",
    "covered",
    "fused",
    "consolidations",
    "backbone",
    "seed",
)

#: a study of several seeds keeps each seed's study, complete in itself, in this subfolder of its folder
SEED_DIR = "seed{seed}"


# -- the profile ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolSpec:
    name: str
    seed: int = 0
    limit: int | None = None


@dataclass(frozen=True)
class Condition:
    """One stream of the grid (or the no-memory baseline, ``regime == "none"``)."""

    name: str
    regime: str
    source: str = ""
    buffer_size: int | None = None  # the episodic buffer's FIFO capacity (None: uncapped)
    tasks_per_step: int = 1
    table4_b: int | None = None  # the paper's |B| for this stream, under the profile's buffer_reading
    buffer_reading: str = "cap"
    group: str = GRID_GROUP  # "grid": the profile's grid; "fig2": a stream over the Fig. 2 slice

    @property
    def is_baseline(self) -> bool:
        return self.regime == "none"


@dataclass(frozen=True)
class Fig2Spec:
    """Fig. 2's setup (§3, App. D.5 Example 1): a training slice the backbone solves without memory, streamed
    ``revisits`` times with ground-truth trajectories, one task per step."""

    select: str = "no_memory_pass"  # or "first": the first n_tasks of the pool, unchecked
    n_tasks: int = 19
    revisits: int = 10
    regimes: tuple[str, ...] = ("force",)
    buffer_size: int | None = None

    @property
    def steps(self) -> int:
        return self.n_tasks * self.revisits


@dataclass(frozen=True)
class StudyProfile:
    path: str
    name: str
    backbone: str
    train_pool: PoolSpec
    heldout_pool: PoolSpec
    steps: int
    checkpoints: tuple[int, ...]
    conditions: tuple[Condition, ...]
    no_memory: bool = True
    seed: int = 0
    seeds: tuple[int, ...] = ()  # several seeds: one study each, in SEED_DIR subfolders (seed is the first)
    n_train: int = N_TRAIN
    n_test: int = N_TEST
    stream: dict[str, Any] = field(default_factory=dict)
    eval_sets: tuple[str, ...] = ("heldout",)
    train_limit: int | None = None
    eval_sources: tuple[str, ...] = MEMORY_SOURCES
    eval_workers: int = 1
    judge: dict[str, Any] | None = None
    surgery: dict[str, Any] | None = None
    response_cache: bool = True
    sandbox: str = "kernel"  # how model-written code is isolated: "kernel" or, by explicit opt-in, "unisolated"
    backbone_options: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    buffer_reading: str = "cap"
    coverage_average: str = "checkpoints"
    table4_memories: int | None = None  # Table 4 averages this many evenly spaced memories (None: checkpoints)
    eval_repeats: int = 1
    eval_temperature: float | None = None  # None: the stream's own temperature
    fig2: Fig2Spec | None = None
    fig2_conditions: tuple[Condition, ...] = ()
    source_ablation: dict[str, Any] | None = None

    @property
    def limits(self) -> SandboxLimits:
        """The grader's limits, with the profile's isolation mode."""
        return SandboxLimits(isolation=self.sandbox)

    def stream_config(self, cond: Condition) -> StreamConfig:
        fig2 = cond.group == FIG2_GROUP and self.fig2 is not None
        return StreamConfig(
            regime=cond.regime,
            source=cond.source,
            buffer_size=cond.buffer_size,
            steps=self.fig2.steps if fig2 and self.fig2 else self.steps,
            tasks_per_step=cond.tasks_per_step,
            seed=self.seed,
            limits=self.limits,
            **self.stream,
        )

    def eval_kwargs(self) -> dict[str, Any]:
        """``evaluate``'s solver settings: the stream's own (tool bodies, decoding, token cap, sandbox limits)."""
        return {
            **StreamConfig(limits=self.limits, **self.stream).evaluate_kwargs(),
            "sources": self.eval_sources,
            "workers": self.eval_workers,
            "repeats": self.eval_repeats,
            **({} if self.eval_temperature is None else {"temperature": self.eval_temperature}),
        }

    def checkpoints_of(self, cond: Condition) -> tuple[int, ...]:
        """The steps whose memory is evaluated: the profile's, or for a Fig. 2 stream the empty memory and
        the end of every pass over the slice."""
        if cond.is_baseline:
            return (0,)
        if cond.group == FIG2_GROUP and self.fig2 is not None:
            return tuple(range(0, self.fig2.steps + 1, self.fig2.n_tasks))
        return self.checkpoints

    def condition(self, name: str) -> Condition:
        for cond in self.all_conditions():
            if cond.name == name:
                return cond
        raise KeyError(f"no condition {name!r}; known: {[c.name for c in self.all_conditions()]}")

    def all_conditions(self) -> tuple[Condition, ...]:
        baseline = (Condition(NO_MEMORY, "none"),) if self.no_memory else ()
        return self.conditions + self.fig2_conditions + baseline


def _section(data: Any, key: str, allowed: set[str], path: Any) -> dict[str, Any]:
    return check_mapping(data.get(key), key, allowed, path)


def _pool(data: dict[str, Any], key: str, path: Any, *, required: bool = True) -> PoolSpec:
    spec = _section(data, key, POOL_KEYS, path)
    if not spec:
        if required:
            raise fail(path, f"{key!r} is required: {{name: one of {sorted(POOL_SIZES)}, seed, limit}}")
        return PoolSpec("heldout50")
    name = spec.get("name")
    if name == FRESH_POOL and key == "train_pool":
        if "limit" in spec:
            raise fail(path, f"{key}: the {FRESH_POOL!r} pool holds as many tasks as the stream needs; drop 'limit'")
        return PoolSpec(FRESH_POOL, int(check_int(spec.get("seed", 0), f"{key}.seed", path) or 0))
    if name not in POOL_SIZES:
        choices = sorted(POOL_SIZES) + ([FRESH_POOL] if key == "train_pool" else [])
        raise fail(path, f"{key}.name must be one of {choices}, got {name!r}")
    seed = check_int(spec.get("seed", 0), f"{key}.seed", path)
    limit = check_int(spec.get("limit"), f"{key}.limit", path, minimum=1, optional=True)
    if limit is not None and limit > POOL_SIZES[name]:
        raise fail(path, f"{key}.limit {limit} exceeds the {POOL_SIZES[name]} tasks of pool {name!r}")
    return PoolSpec(name, int(seed or 0), limit)


def condition_name(regime: str, source: str, buffer_size: int | None, tasks_per_step: int) -> str:
    """``<regime>-<source>-b<cap or inf>[-t<tasks per step>]``: the name says both the buffer's capacity and the
    tasks per step, so it reads the same under either ``buffer_reading`` (|B| = 8 as a batch is
    ``auto-gt-binf-t8``, as a cap ``auto-gt-b8``)."""
    name = f"{regime}-{source}-b{buffer_size if buffer_size is not None else 'inf'}"
    return name + (f"-t{tasks_per_step}" if tasks_per_step != 1 else "")


def fig2_condition_name(regime: str, buffer_size: int | None) -> str:
    return f"{FIG2_GROUP}-" + condition_name(regime, "gt", buffer_size, 1)


def _grid_conditions(
    grid: dict[str, Any], reading: str, base_tps: int, path: Any, capacities: Any = None
) -> tuple[Condition, ...]:
    """The grid's streams; ``reading`` says whether ``buffer_size`` values are a cap or the tasks per step.
    ``regime: []`` runs no stream (an evaluation of the no-memory solver alone, e.g. a solver-prompt check).
    ``capacities`` is the profile's ``episodic_capacity`` (``buffer_reading: batch`` only, ``_capacity_of``)."""
    if grid.get("regime") == []:
        return ()
    regimes = check_list(grid.get("regime", list(REGIMES)), "conditions.regime", path)
    sources = check_list(grid.get("source", ["gt"]), "conditions.source", path)
    buffers = check_list(grid.get("buffer_size", [8]), "conditions.buffer_size", path)
    for r in regimes:
        if r not in REGIMES:
            raise fail(path, f"conditions.regime: {r!r} is not one of {REGIMES}")
    for s in sources:
        if s not in SOURCES:
            raise fail(path, f"conditions.source: {s!r} is not one of {SOURCES}")
    if reading == "batch":
        if "tasks_per_step" in grid or base_tps != 1:
            raise fail(
                path,
                "buffer_reading: batch takes the tasks per step from conditions.buffer_size (|B| fresh examples "
                "per step); leave out tasks_per_step and conditions.tasks_per_step",
            )
        for b in buffers:
            check_int(b, "conditions.buffer_size", path, minimum=1)
        combos = [
            (r, s, _capacity_of(capacities, b, path), b, b) for r, s, b in itertools.product(regimes, sources, buffers)
        ]
    else:
        if capacities is not None:
            raise fail(
                path,
                "episodic_capacity goes with buffer_reading: batch; under buffer_reading: cap the values of "
                "conditions.buffer_size are the capacities",
            )
        per_step = check_list(grid.get("tasks_per_step", [base_tps]), "conditions.tasks_per_step", path)
        for b in buffers:
            check_int(b, "conditions.buffer_size", path, minimum=1, optional=True)
        for t in per_step:
            check_int(t, "conditions.tasks_per_step", path, minimum=1)
        combos = [(r, s, b, t, b) for r, s, b, t in itertools.product(regimes, sources, buffers, per_step)]
    conditions = tuple(
        Condition(condition_name(r, s, cap, t), r, s, cap, t, table4_b=b, buffer_reading=reading)
        for r, s, cap, t, b in combos
    )
    if len({c.name for c in conditions}) != len(conditions):
        raise fail(path, "conditions: a value is listed twice")
    return conditions


def _stream_pool(spec: PoolSpec, conditions: Sequence[Condition], steps: int, revisit: Any, path: Any) -> PoolSpec:
    """The training pool sized for the grid: the ``fresh`` pool gets the most tasks any stream reads (steps x
    tasks per step); a fixed pool shorter than that would be cycled, so every task seen again, which the profile
    must ask for (``revisit: true``): the paper revisits only in Figs. 2 and 11 (their own settings)."""
    _bool(revisit, "revisit", path)
    needed = max((steps * c.tasks_per_step for c in conditions), default=0)
    if spec.name == FRESH_POOL:
        return replace(spec, limit=max(needed, 1))
    size = spec.limit if spec.limit is not None else POOL_SIZES[spec.name]
    if needed > size and not revisit:
        raise fail(
            path,
            f"the streams read {needed} tasks (steps x tasks per step) from pool {spec.name!r} of {size}, so every task "
            f"would be seen about {needed / size:.1f} times; use train_pool: {{name: {FRESH_POOL}}} (a new task "
            "at every position, as §6.1's fresh examples), or say revisit: true",
        )
    return spec


def _capacity_of(capacities: Any, b: int, path: Any) -> int | None:
    """The episodic buffer's capacity for a stream of |B| = ``b`` fresh tasks per step: ``episodic_capacity`` is
    absent or null (uncapped), one integer for every |B|, or a mapping from |B| to an integer or null."""
    if capacities is None:
        return None
    if isinstance(capacities, dict):
        if b not in capacities:
            raise fail(
                path,
                f"episodic_capacity names no capacity for |B| = {b} (it has {sorted(capacities)}); give an "
                "integer, or null for an uncapped buffer",
            )
        value = capacities[b]
    else:
        value = capacities
    return check_int(value, f"episodic_capacity[{b}]", path, minimum=1, optional=True)


def _fig2(data: dict[str, Any], path: Any) -> Fig2Spec | None:
    if data.get("fig2") in (None, False):
        return None
    spec = _section(data, "fig2", FIG2_KEYS, path)
    select = spec.get("select", "no_memory_pass")
    if select not in FIG2_SELECTIONS:
        raise fail(path, f"fig2.select must be one of {FIG2_SELECTIONS}, got {select!r}")
    regimes = tuple(check_list(spec.get("regime", ["force"]), "fig2.regime", path))
    for r in regimes:
        if r not in REGIMES:
            raise fail(path, f"fig2.regime: {r!r} is not one of {REGIMES}")
    return Fig2Spec(
        select=select,
        n_tasks=int(check_int(spec.get("n_tasks", 19), "fig2.n_tasks", path, minimum=1) or 19),
        revisits=int(check_int(spec.get("revisits", 10), "fig2.revisits", path, minimum=1) or 10),
        regimes=regimes,
        buffer_size=check_int(spec.get("buffer_size"), "fig2.buffer_size", path, minimum=1, optional=True),
    )


def _temperature(value: Any, key: str, path: Any) -> float | None:
    """A sampling temperature (a number >= 0), or None when the profile leaves it out."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise fail(path, f"{key!r} must be a number >= 0, got {value!r}")
    return float(value)


def _choice(data: dict[str, Any], key: str, allowed: tuple[str, ...], default: str, path: Any) -> str:
    value = data.get(key, default)
    if value not in allowed:
        raise fail(path, f"{key} must be one of {allowed}, got {value!r}")
    return str(value)


def load_study_profile(path: str | Path, *, context_check: bool = True) -> StudyProfile:
    """Read and check a study profile; any unknown or malformed key is named in the error. With ``context_check``
    the largest prompt of every condition is rendered and refused when it exceeds the named backbone's context
    (``check_profile_context``; a run checks again against the endpoint it really uses)."""
    path = Path(path)
    data = read_profile(path, PROFILE_KEYS)
    backbone = check_backbone(data, path)
    options = _section(data, "backbone_options", BACKBONE_OPTION_KEYS, path)
    train_pool = _pool(data, "train_pool", path)
    heldout_pool = _pool(data, "heldout_pool", path, required=False)
    examples = _section(data, "task_examples", EXAMPLE_KEYS, path)
    n_train = check_int(examples.get("n_train", N_TRAIN), "task_examples.n_train", path, minimum=1)
    n_test = check_int(examples.get("n_test", N_TEST), "task_examples.n_test", path, minimum=1)
    steps = check_int(data.get("steps"), "steps", path, minimum=1)
    base_tps = check_int(data.get("tasks_per_step", 1), "tasks_per_step", path, minimum=1)
    if "checkpoints" in data and "checkpoint_every" in data:
        raise fail(path, "give 'checkpoints' (a list of steps) or 'checkpoint_every', not both")
    if "checkpoints" in data:
        points = {check_int(s, "checkpoints[]", path) for s in check_list(data["checkpoints"], "checkpoints", path)}
    else:
        every = check_int(data.get("checkpoint_every", steps), "checkpoint_every", path, minimum=1)
        points = set(range(0, steps + 1, int(every or steps))) | {0}
    points.add(steps)
    late = sorted(p for p in points if p is not None and p > int(steps or 0))
    if late:
        raise fail(path, f"checkpoints {late} lie beyond the last step ({steps})")

    grid = _section(data, "conditions", CONDITION_KEYS, path)
    if not grid:
        raise fail(path, f"'conditions' is required: a mapping of {sorted(CONDITION_KEYS)} to lists of values")
    reading = _choice(data, "buffer_reading", BUFFER_READINGS, "cap", path)
    capacities = data.get("episodic_capacity")
    if isinstance(capacities, bool) or (capacities is not None and not isinstance(capacities, (int, dict))):
        raise fail(path, f"episodic_capacity must be an integer, null or a mapping |B| -> capacity, got {capacities!r}")
    conditions = _grid_conditions(grid, reading, int(base_tps or 1), path, capacities)
    train_pool = _stream_pool(train_pool, conditions, int(steps or 1), data.get("revisit", False), path)
    fig2 = _fig2(data, path)
    fig2_conditions = (
        tuple(
            Condition(fig2_condition_name(r, fig2.buffer_size), r, "gt", fig2.buffer_size, 1, group=FIG2_GROUP)
            for r in fig2.regimes
        )
        if fig2
        else ()
    )

    stream = _section(data, "stream", STREAM_KEYS, path)
    if "solver_memory" in stream:
        stream["solver_memory"] = tuple(check_list(stream["solver_memory"], "stream.solver_memory", path))
    for key, allowed in (
        ("decide_on", DECIDE_ON),
        ("extraction_schema", EXTRACTION_SCHEMAS),
        ("solver_mode", SOLVER_MODES),
        ("helper_usage", HELPER_USAGES),
    ):
        if key in stream and stream[key] not in allowed:
            raise fail(path, f"stream.{key} must be one of {allowed}, got {stream[key]!r}")
    evaluation = _section(data, "evaluation", EVALUATION_KEYS, path)
    sets = tuple(check_list(evaluation.get("sets", ["heldout"]), "evaluation.sets", path))
    bad_sets = [s for s in sets if s not in EVAL_SETS]
    if bad_sets:
        raise fail(path, f"evaluation.sets: {bad_sets} not in {EVAL_SETS}")
    sources_eval = tuple(check_list(evaluation.get("sources", list(MEMORY_SOURCES)), "evaluation.sources", path))
    bad_sources = [s for s in sources_eval if s not in MEMORY_SOURCES]
    if bad_sources:
        raise fail(path, f"evaluation.sources: {bad_sources} not in {MEMORY_SOURCES}")
    repeats = int(check_int(evaluation.get("repeats", 1), "evaluation.repeats", path, minimum=1) or 1)
    names = [c.name for c in conditions + fig2_conditions]
    judge = _optional_block(data, "judge", JUDGE_KEYS, names, path)
    surgery = _optional_block(data, "surgery", SURGERY_KEYS, names, path)
    ablation = _optional_block(data, "source_ablation", SOURCE_ABLATION_KEYS, [c.name for c in conditions], path)
    if ablation is not None:
        arms = check_list(ablation.get("arms", list(SOURCE_ARMS)), "source_ablation.arms", path)
        bad_arms = [a for a in arms if a not in SOURCE_ARMS]
        if bad_arms:
            raise fail(path, f"source_ablation.arms: {bad_arms} not in {tuple(SOURCE_ARMS)}")
        ablation["arms"] = list(arms)
        if ablation.setdefault("eval_set", "heldout") not in sets:
            raise fail(path, f"source_ablation.eval_set {ablation['eval_set']!r} is not in evaluation.sets {sets}")
        chosen = ablation.get("checkpoints")
        if chosen is not None:
            steps_chosen = [check_int(c, "source_ablation.checkpoints[]", path) for c in check_list(chosen, "x", path)]
            off = [c for c in steps_chosen if c not in points]
            if off:
                raise fail(path, f"source_ablation.checkpoints {off} are not checkpoints of the study")
            ablation["checkpoints"] = sorted(int(c or 0) for c in steps_chosen)
    if surgery is not None:
        check_int(surgery.get("max_entries"), "surgery.max_entries", path, minimum=1, optional=True)
        if surgery.setdefault("eval_set", "heldout") not in EVAL_SETS:
            raise fail(path, f"surgery.eval_set must be one of {EVAL_SETS}, got {surgery['eval_set']!r}")
    if judge is not None:
        check_int(judge.get("max_tokens", 1024), "judge.max_tokens", path, minimum=1)
    seeds = _seeds(data, path)
    if not conditions and not fig2_conditions and not _bool(data.get("no_memory", True), "no_memory", path):
        raise fail(path, "nothing to run: conditions.regime is empty, there is no fig2 block and no_memory is false")
    profile = StudyProfile(
        path=str(path),
        name=str(data.get("name", path.stem)),
        backbone=backbone,
        train_pool=train_pool,
        heldout_pool=heldout_pool,
        steps=int(steps or 1),
        checkpoints=tuple(sorted(int(p) for p in points if p is not None)),
        conditions=conditions,
        no_memory=_bool(data.get("no_memory", True), "no_memory", path),
        seed=seeds[0] if seeds else int(check_int(data.get("seed", 0), "seed", path) or 0),
        seeds=seeds,
        n_train=int(n_train or N_TRAIN),
        n_test=int(n_test or N_TEST),
        stream=stream,
        eval_sets=sets,
        train_limit=check_int(evaluation.get("train_limit"), "evaluation.train_limit", path, minimum=1, optional=True),
        eval_sources=sources_eval,
        eval_workers=int(check_int(evaluation.get("workers", 1), "evaluation.workers", path, minimum=1) or 1),
        judge=judge,
        surgery=surgery,
        response_cache=_bool(data.get("response_cache", True), "response_cache", path),
        sandbox=check_sandbox_mode(data.get("sandbox", "kernel"), path),
        backbone_options=options,
        raw=data,
        buffer_reading=reading,
        coverage_average=_choice(data, "coverage_average", COVERAGE_AVERAGES, "checkpoints", path),
        eval_repeats=repeats,
        eval_temperature=_temperature(evaluation.get("temperature"), "evaluation.temperature", path),
        table4_memories=check_int(data.get("table4_memories"), "table4_memories", path, minimum=1, optional=True),
        fig2=fig2,
        fig2_conditions=fig2_conditions,
        source_ablation=ablation,
    )
    for cond in conditions + fig2_conditions:  # StreamConfig's own checks, with the profile named
        try:
            profile.stream_config(cond)
        except (TypeError, ValueError) as exc:
            raise fail(path, f"stream settings: {exc}") from None
    if context_check:
        check_profile_context(profile)
    return profile


def _seeds(data: dict[str, Any], path: Any) -> tuple[int, ...]:
    """``seeds``: a list of distinct integers, one whole study each (the LLM request seed and the stream's
    shuffle seed); not together with ``seed``."""
    if "seeds" not in data:
        return ()
    if "seed" in data:
        raise fail(path, "give 'seed' (one study) or 'seeds' (one study per seed, in seed<k>/ subfolders), not both")
    if not isinstance(data["seeds"], list):
        raise fail(path, f"'seeds' must be a list of integers, got {data['seeds']!r}")
    seeds = tuple(int(check_int(s, "seeds[]", path) or 0) for s in check_list(data["seeds"], "seeds", path))
    if len(set(seeds)) != len(seeds):
        raise fail(path, f"'seeds' lists a seed twice: {list(seeds)}")
    return seeds


def check_sandbox_mode(value: Any, path: Any) -> str:
    if value not in ISOLATION_MODES:
        raise fail(
            path,
            f"sandbox must be one of {ISOLATION_MODES}, got {value!r} ('unisolated' runs model-written code without "
            "kernel isolation and is only for machines where that code cannot hurt anything)",
        )
    return str(value)


def sandbox_record(profile: Any) -> dict[str, Any]:
    """How this run isolates model-written code, checked now: the manifest's ``sandbox`` entry.

    Kernel isolation that this machine cannot provide raises ``SandboxUnavailable`` (naming the missing piece)
    before any model call; ``sandbox: unisolated`` is recorded as such and warned about on every run. Any
    profile with a ``sandbox`` mode (the study's, the probes')."""
    if profile.sandbox == "unisolated":
        return {"mode": "unisolated", "description": UNISOLATED_WARNING}
    iso = probe_isolation()
    return iso.to_dict() | {"description": iso.describe()}


def _bool(value: Any, key: str, path: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(path, f"{key!r} must be true or false, got {value!r}")
    return value


def _optional_block(
    data: dict[str, Any], key: str, allowed: set[str], names: list[str], path: Any
) -> dict[str, Any] | None:
    """``key: false`` (off), ``true`` (every condition) or a mapping with ``conditions: all | [names]``."""
    value = data.get(key, False)
    if value is False or value is None:
        return None
    block = {} if value is True else _section(data, key, allowed, path)
    chosen = block.get("conditions", "all")
    chosen = names if chosen == "all" else check_list(chosen, f"{key}.conditions", path)
    unknown = [c for c in chosen if c not in names]
    if unknown:
        raise fail(path, f"{key}.conditions names unknown condition(s) {unknown}; the grid has {names}")
    block["conditions"] = list(chosen)
    return block


# -- tasks --------------------------------------------------------------------------------------------


def pool_tasks(spec: PoolSpec, *, n_train: int = N_TRAIN, n_test: int = N_TEST) -> list[ArcTask]:
    """The first ``limit`` tasks of a pool (all when None), drawn with the given example counts."""
    if spec.name == FRESH_POOL:
        plan = pool_plan(FRESH_POOL, spec.seed, size=spec.limit)
    else:
        plan = pool_plan(spec.name, spec.seed)[: spec.limit]
    return [make_task(e.family, e.skill, e.seed, n_train=n_train, n_test=n_test) for e in plan]


def seen_tasks(tasks: Sequence[ArcTask], config: StreamConfig) -> list[ArcTask]:
    """The distinct tasks a stream shows, in order of first appearance."""
    seen: dict[str, ArcTask] = {}
    for batch in stream_batches(tasks, config):
        for task in batch:
            seen.setdefault(task.task_id, task)
    return list(seen.values())


def training_slice(profile: StudyProfile, tasks: Sequence[ArcTask]) -> list[ArcTask]:
    """Fig. 2's in-distribution set: the first tasks of the stream order that every condition sees."""
    if not profile.conditions:
        return []
    per_condition = [seen_tasks(tasks, profile.stream_config(c)) for c in profile.conditions]
    k = min(len(s) for s in per_condition)
    if profile.train_limit is not None:
        k = min(k, profile.train_limit)
    return per_condition[0][:k]


@dataclass(frozen=True)
class SliceSelection:
    """Fig. 2's training slice: which pool tasks were kept, how many were tried and how many passed.

    ``shortfall`` > 0 when the pool held fewer than ``n_tasks`` tasks the no-memory solver passes: the kit then
    streams the ones it found (and says so in ``fig2_slice.json`` and the log) rather than padding the slice
    with tasks the model fails, which would break the setup's premise (100 % without memory)."""

    task_ids: tuple[str, ...]
    select: str
    n_tasks: int
    n_tried: int
    repeats: int
    shortfall: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def select_slice(
    pool: Sequence[ArcTask], llm: LLMClient | None, spec: Fig2Spec, eval_kwargs: dict[str, Any]
) -> tuple[list[ArcTask], SliceSelection]:
    """The first ``spec.n_tasks`` pool tasks (in pool order) that the solver passes with an empty memory in every
    one of the evaluation's repeats (so their no-memory accuracy is 100 %, as Fig. 2's slice); ``select: first``
    keeps the first ``n_tasks`` without a model call. Tasks are tried in chunks of ``workers``; a chunk may try a
    few tasks past the last one kept (their calls are spent, their results unused)."""
    if spec.select == "first":
        kept = list(pool[: spec.n_tasks])
        sel = SliceSelection(tuple(t.task_id for t in kept), "first", spec.n_tasks, 0, 0, spec.n_tasks - len(kept))
        return kept, sel
    if llm is None:
        raise ValueError("select: no_memory_pass needs a model")
    repeats = int(eval_kwargs.get("repeats", 1))
    chunk = max(1, int(eval_kwargs.get("workers", 1)))
    empty = Memory(EpisodicBuffer(capacity=None), AbstractStore())
    kept, tried = [], 0
    while len(kept) < spec.n_tasks and tried < len(pool):
        batch = list(pool[tried : tried + chunk])
        tried += len(batch)
        res = evaluate(batch, llm, empty, **eval_kwargs)
        passes = Counter(r.task_id for r in res.records if r.passed)
        kept.extend(t for t in batch if passes[t.task_id] == repeats)
    kept = kept[: spec.n_tasks]
    sel = SliceSelection(
        tuple(t.task_id for t in kept), spec.select, spec.n_tasks, tried, repeats, spec.n_tasks - len(kept)
    )
    return kept, sel


# -- the backbone ------------------------------------------------------------------------------------


# -- running ------------------------------------------------------------------------------------------


@dataclass
class StudyResult:
    out_dir: Path
    frame: pd.DataFrame
    manifest: dict[str, Any]


def _empty_memory(cond: Condition) -> Memory:
    return Memory(EpisodicBuffer(capacity=cond.buffer_size), AbstractStore())


def _eval_from_dict(data: dict[str, Any]) -> EvalResult:
    records = tuple(SolveRecord(**r) for r in data["records"])
    return EvalResult(float(data["accuracy"]), int(data["n_passed"]), int(data["n_tasks"]), records)


def _read_evals(folder: Path) -> list[dict[str, Any]]:
    path = folder / EVALS_FILE
    return [line.value for line in read_jsonl(path)] if path.exists() else []


def clear_incomplete(folder: Path, written: set[str] = _CONDITION_FILES, what: str = "condition") -> None:
    """Remove an unfinished run folder before it is run again, unless it holds files the runner did not write
    (``written``): then refuse, naming them, rather than delete someone's files."""
    if not folder.exists():
        return
    foreign = sorted(p.name for p in folder.iterdir() if p.name not in written)
    if foreign:
        raise FileExistsError(
            f"{folder} is an incomplete {what} folder holding files the runner did not write ({foreign}); "
            "move them away or use a fresh --out"
        )
    shutil.rmtree(folder)


def _run_condition(
    profile: StudyProfile,
    cond: Condition,
    llm: LLMClient,
    train: Sequence[ArcTask],
    evalsets: dict[str, list[ArcTask]],
    folder: Path,
    backbone: str,
) -> dict[str, Any]:
    started = time.monotonic()
    calls: dict[str, int] = {}
    snapshots: list[dict[str, Any]] = []
    if not cond.is_baseline:
        config = profile.stream_config(cond)
        result = run_stream(train, llm, config, folder)
        snapshots, calls = result.snapshots, dict(result.calls)
    folder.mkdir(parents=True, exist_ok=True)
    steps = profile.checkpoints_of(cond)
    config = None if cond.is_baseline else profile.stream_config(cond)
    rows = []
    with JsonlWriter(folder / EVALS_FILE) as writer:
        for step in steps:
            memory = _empty_memory(cond) if step == 0 else memory_at(snapshots[step - 1])
            for eval_set, tasks in evalsets.items():
                res = evaluate(tasks, llm, memory, **profile.eval_kwargs())
                calls["arc_eval"] = calls.get("arc_eval", 0) + len(res.records)
                writer.append({"step": step, "eval_set": eval_set, **res.to_dict()})
                rows.append(_row(cond, step, eval_set, res, snapshots, backbone, profile.seed))
    done = {
        "condition": asdict(cond),
        "config": config.to_dict() if config else None,
        "checkpoints": list(steps),
        "calls": calls,
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }
    atomic_write_json(folder / DONE_FILE, done)
    return done


def _row(
    cond: Condition,
    step: int,
    eval_set: str,
    res: EvalResult,
    snapshots: Sequence[dict[str, Any]],
    backbone: str,
    seed: int,
) -> dict[str, Any]:
    snap = snapshots[step - 1] if step > 0 else None
    cov = snap["coverage"] if snap else {"covered": 0, "fused": None, "buffer_size": 0}
    abstract = len(snap["memory"]["abstract"]["entries"]) if snap else 0
    consolidations = sum(1 for s in snapshots[:step] if (s.get("extraction") or {}).get("applied"))
    return {
        "condition": cond.name,
        "regime": cond.regime,
        "source": cond.source,
        "buffer_capacity": cond.buffer_size,
        "tasks_per_step": cond.tasks_per_step,
        "table4_b": cond.table4_b,
        "step": step,
        "examples_seen": step * cond.tasks_per_step,
        "eval_set": eval_set,
        "accuracy": res.accuracy,
        "n_passed": res.n_passed,
        "n_tasks": res.n_tasks,
        "buffer_size": cov["buffer_size"],
        "abstract_entries": abstract,
        "covered": cov["covered"],
        "fused": cov["fused"],
        "consolidations": consolidations,
        "backbone": backbone,
        "seed": seed,
    }


def _final_eval(folder: Path, eval_set: str) -> EvalResult | None:
    evals = [e for e in _read_evals(folder) if e["eval_set"] == eval_set]
    return _eval_from_dict(max(evals, key=lambda e: e["step"])) if evals else None


def _run_judge(profile: StudyProfile, llm: LLMClient, folder: Path) -> None:
    memory = Memory.from_dict(read_json(folder / MEMORY_FILE))
    labels = judge_memory(llm, memory, max_tokens=int((profile.judge or {}).get("max_tokens", 1024)))
    atomic_write_json(
        folder / JUDGE_FILE,
        {"labels": [asdict(label) for label in labels], "counts": label_counts(labels), "n_entries": len(labels)},
    )


def _run_surgery(profile: StudyProfile, llm: LLMClient, folder: Path, evalsets: dict[str, list[ArcTask]]) -> None:
    spec = profile.surgery or {}
    eval_set = spec.get("eval_set", "heldout")
    tasks = evalsets.get(eval_set)
    if not tasks:
        raise fail(profile.path, f"surgery.eval_set {eval_set!r} is not evaluated (evaluation.sets)")
    memory = Memory.from_dict(read_json(folder / MEMORY_FILE))
    baseline = _final_eval(folder, eval_set)
    # consolidated strategies first (App. I removes one consolidated entry), then the buffered episodes
    entries = (memory.abstract.ids() + memory.episodic.ids())[: spec.get("max_entries")]
    results = []
    for entry_id in entries:
        res = memory_surgery(
            tasks,
            llm,
            memory,
            entry_id,
            baseline=baseline,
            **profile.eval_kwargs(),
        )
        baseline = res.base
        kind = "episode" if entry_id.startswith("E") else "strategy"
        results.append({**res.to_dict(), "kind": kind, "eval_set": eval_set, "n_tasks": res.ablated.n_tasks})
    atomic_write_json(
        folder / SURGERY_FILE, {"eval_set": eval_set, "n_entries": len(memory.entry_ids()), "results": results}
    )


def _run_source_ablation(
    profile: StudyProfile, cond: Condition, llm: LLMClient, folder: Path, evalsets: dict[str, list[ArcTask]]
) -> None:
    """App. K.1 / Fig. 9(a): re-evaluate the memory of chosen checkpoints with the solver reading only the
    abstract store, only the episodic store, or both; writes ``sources.json``. An arm whose stores equal the
    study's own ``evaluation.sources`` reuses that evaluation (``evals.jsonl``) instead of calling again."""
    spec = profile.source_ablation or {}
    eval_set = spec.get("eval_set", "heldout")
    tasks = evalsets[eval_set]
    snapshots = load_snapshots(folder)
    own = {e["step"]: e for e in _read_evals(folder) if e["eval_set"] == eval_set}
    rows = []
    for step in spec.get("checkpoints") or profile.checkpoints:
        memory = _empty_memory(cond) if step == 0 else memory_at(snapshots[step - 1])
        for arm in spec["arms"]:
            stores = SOURCE_ARMS[arm]
            if set(stores) == set(profile.eval_sources) and step in own:
                res, reused = _eval_from_dict(own[step]), True
            else:
                res, reused = evaluate(tasks, llm, memory, **{**profile.eval_kwargs(), "sources": stores}), False
            rows.append(
                {
                    "step": step,
                    "arm": arm,
                    "sources": list(stores),
                    "eval_set": eval_set,
                    "accuracy": res.accuracy,
                    "n_passed": res.n_passed,
                    "n_tasks": res.n_tasks,
                    "reused": reused,
                }
            )
    atomic_write_json(folder / SOURCES_FILE, {"eval_set": eval_set, "rows": rows})


def _manifest(
    profile: StudyProfile,
    bb: StudyModels,
    train: Sequence[ArcTask],
    evalsets: dict[str, list[ArcTask]],
    status: str,
    started: float,
    before_s: float,
    sandbox: dict[str, Any],
    ledger: Ledger | None = None,
    cache: ResponseCache | None = None,
    fig2: SliceSelection | None = None,
) -> dict[str, Any]:
    calls = Counter(r.purpose for r in ledger.records) if ledger is not None else Counter()
    m = manifest_base("arc", STUDY_FORMAT, profile.path, profile.name, profile.raw, bb, status)
    wall = time.monotonic() - started
    m.update(
        {
            "seed": profile.seed,
            "steps": profile.steps,
            "checkpoints": list(profile.checkpoints),
            "conditions": [asdict(c) for c in profile.all_conditions()],
            "task_examples": {"n_train": profile.n_train, "n_test": profile.n_test},
            "train_pool": asdict(profile.train_pool),
            "heldout_pool": asdict(profile.heldout_pool),
            "train_task_ids": [t.task_id for t in train],
            "eval_task_ids": {k: [t.task_id for t in v] for k, v in evalsets.items()},
            "prompt_hashes": {k: v for k, v in prompt_hashes().items() if k.startswith("arc_")},
            "calls": dict(sorted(calls.items())),
            "cached_calls": sum(r.cached for r in ledger.records) if ledger is not None else 0,
            "sandbox": sandbox,
            "buffer_reading": profile.buffer_reading,
            "coverage_average": profile.coverage_average,
            "eval_repeats": profile.eval_repeats,
            "eval_temperature": profile.eval_temperature,
            "table4_memories": profile.table4_memories,
            "fig2": {**asdict(profile.fig2), "selection": fig2.to_dict() if fig2 else None} if profile.fig2 else None,
            "source_ablation": profile.source_ablation,
            "wall_s": round(wall, 1),  # this invocation
            "wall_s_total": round(before_s + wall, 1),  # every invocation into this folder
        }
    )
    return m


def run_study(
    profile_path: str | Path,
    out_dir: str | Path,
    *,
    endpoint: Endpoint | None = None,
    backbone: str | Endpoint | None = None,
    preflight: bool = True,
    log: Any = print,
) -> StudyResult:
    """Run (or resume) every condition of a study profile; returns the results table and the manifest.

    ``backbone`` replaces the profile's backbone (a profile name or file, or an ad-hoc ``Endpoint`` from
    ``--base-url/--model``). Before the first condition, judge or surgery still to do, the chat endpoint
    gets one small request (``StudyModels.check_endpoints``; ``preflight=False`` skips it). A profile with
    ``seeds`` runs one whole study per seed (``run_seeds``)."""
    # another endpoint than the profile's backbone: run_profile checks the context against that one
    profile = load_study_profile(profile_path, context_check=endpoint is None and backbone is None)
    run = run_seeds if profile.seeds else run_profile
    return run(profile, Path(out_dir), endpoint=endpoint, backbone=backbone, preflight=preflight, log=log)


def run_profile(
    profile: StudyProfile,
    out: Path,
    *,
    endpoint: Endpoint | None = None,
    backbone: str | Endpoint | None = None,
    preflight: bool = True,
    log: Any = print,
) -> StudyResult:
    """``run_study`` for one loaded profile of one seed, into ``out``."""
    if profile.seeds:
        raise ValueError(f"study profile {profile.path} names several seeds: run it with run_seeds")
    sandbox = sandbox_record(profile)  # refuses here, before any model call, when isolation is missing
    log(("WARNING: " if sandbox["mode"] == "unisolated" else "sandbox: ") + sandbox["description"])
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    before_s = previous_wall_s(out)
    train = pool_tasks(profile.train_pool, n_train=profile.n_train, n_test=profile.n_test)
    heldout = pool_tasks(profile.heldout_pool, n_train=profile.n_train, n_test=profile.n_test)
    evalsets = {"heldout": heldout, "train": training_slice(profile, train)}
    evalsets = {k: v for k, v in evalsets.items() if k in profile.eval_sets}
    with open_models(
        profile.path,
        profile.backbone if backbone is None else backbone,
        out,
        backbone_options=profile.backbone_options,
        endpoint=endpoint,
        preflight=preflight,
    ) as bb:
        if bb.note:
            log(f"NOTE: {bb.note}")
        # the endpoint really used may not be the profile's backbone (--base-url): its context decides
        sizes = check_profile_context(profile, bb.endpoint.context_length, bb.endpoint.model)
        if bb.endpoint.context_length is not None and sizes:
            log(
                f"context: the largest prompt needs about {max(z.tokens for z in sizes)} of "
                f"{bb.endpoint.context_length} tokens"
            )
        cache = ResponseCache(out / CACHE_DIR) if profile.response_cache else None
        conditions = list(profile.all_conditions())
        log(
            f"study {out}: {len(conditions)} condition(s) on {len(train)} stream task(s) "
            f"({', '.join(f'{k} {len(v)}' for k, v in evalsets.items())} evaluated), model {bb.endpoint.model} at "
            f"{bb.endpoint.base_url}, response cache {cache.root if cache is not None else 'off'}"
        )
        with Ledger(out / LEDGER_FILE) as ledger:
            llm = PromptGuard(
                LLMClient(bb.endpoint, ledger=ledger, cache=cache, seed=profile.seed),
                what=lambda tags: f"ARC-AGI Stream {tags.get('purpose') or 'call'} at step {tags.get('step', '?')}",
                fix=CONTEXT_FIX,
            )
            atomic_write_json(
                out / MANIFEST_FILE, _manifest(profile, bb, train, evalsets, "running", started, before_s, sandbox)
            )
            fig2_tasks, fig2_sel = _fig2_slice(profile, out, train, llm, bb, ledger, log)
            for n, cond in enumerate(conditions, start=1):
                folder = out / CONDITIONS_DIR / cond.name
                if (folder / DONE_FILE).exists():
                    log(f"{cond.name}: complete, kept")
                else:
                    bb.check_endpoints(f"study {out}")
                    log(f"{cond.name} ({n} of {len(conditions)}): started")
                    t0 = time.monotonic()
                    with ledger.tag(condition=cond.name):
                        tasks_of, sets_of = (
                            (fig2_tasks, {FIG2_EVAL_SET: fig2_tasks}) if cond.group == FIG2_GROUP else (train, evalsets)
                        )
                        with_restarts(
                            bb,
                            f"condition {cond.name}",
                            lambda c=cond, f=folder, t=tasks_of, e=sets_of: _run_condition(
                                profile, c, llm, t, e, f, bb.label
                            ),
                            before=lambda f=folder: clear_incomplete(f),
                            log=log,
                        )
                    log(f"{cond.name}: done in {time.monotonic() - t0:.0f} s")
                if profile.judge and cond.name in profile.judge["conditions"] and not (folder / JUDGE_FILE).exists():
                    bb.check_endpoints(f"study {out}")
                    with ledger.tag(condition=cond.name):
                        _run_judge(profile, llm, folder)
                if (
                    profile.surgery
                    and cond.name in profile.surgery["conditions"]
                    and not (folder / SURGERY_FILE).exists()
                ):
                    bb.check_endpoints(f"study {out}")
                    with ledger.tag(condition=cond.name):
                        _run_surgery(profile, llm, folder, evalsets)
                if (
                    profile.source_ablation
                    and cond.name in profile.source_ablation["conditions"]
                    and not (folder / SOURCES_FILE).exists()
                ):
                    bb.check_endpoints(f"study {out}")
                    with ledger.tag(condition=cond.name, ablation="sources"):
                        _run_source_ablation(profile, cond, llm, folder, evalsets)
            rows = [
                {**row, "seed": row.get("seed", profile.seed)}  # conditions recorded before rows named their seed
                for cond in profile.all_conditions()
                for row in _condition_rows(out, cond.name)
            ]
            frame = _frame(rows)
            atomic_write_json(out / RESULTS_JSON, {"columns": list(RESULT_COLUMNS), "rows": rows})
            frame.to_csv(out / RESULTS_CSV, index=False)
            manifest = _manifest(
                profile, bb, train, evalsets, "complete", started, before_s, sandbox, ledger, cache, fig2_sel
            )
            atomic_write_json(out / MANIFEST_FILE, manifest)
    return StudyResult(out, frame, manifest)


def run_seeds(
    profile: StudyProfile,
    out: Path,
    *,
    endpoint: Endpoint | None = None,
    backbone: str | Endpoint | None = None,
    preflight: bool = True,
    log: Any = print,
) -> StudyResult:
    """One whole study per seed of ``profile.seeds``, each in its own ``SEED_DIR`` subfolder of ``out`` (resumable
    like any study: a complete seed is re-read, an interrupted one resumes), then the results of every seed in
    one table (its ``seed`` column) and a manifest that names the seed folders and adds up their calls and wall
    time. A seed's folder is a study like any other: the anatomy readers take it alone."""
    if (out / CONDITIONS_DIR).exists():
        raise FileExistsError(
            f"{out} holds a study of one seed; a profile with seeds {list(profile.seeds)} needs its own --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    raw = {k: v for k, v in profile.raw.items() if k != "seeds"}
    done: list[StudyResult] = []
    for n, seed in enumerate(profile.seeds, 1):
        folder = out / SEED_DIR.format(seed=seed)
        log(f"seed {seed} ({n} of {len(profile.seeds)}): {folder}")
        one = replace(profile, seed=seed, seeds=(), raw={**raw, "seed": seed})
        done.append(run_profile(one, folder, endpoint=endpoint, backbone=backbone, preflight=preflight, log=log))
        frame, manifest = _write_seeds_index(profile, out, done)
    return StudyResult(out, frame, manifest)


def _write_seeds_index(
    profile: StudyProfile, out: Path, done: Sequence[StudyResult]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The results table and manifest of a study of several seeds, over the seeds complete so far: written after
    every seed, so that an interrupted study (hours on a CPU) can be read with the seeds it has finished. Its
    ``seeds`` are the complete ones, ``seeds_planned`` the profile's; ``status`` is "partial" until all are done."""
    seeds = [int(r.manifest["seed"]) for r in done]
    rows = [row for result in done for row in load_study_rows(result.out_dir)]
    frame = _frame(rows)
    atomic_write_json(out / RESULTS_JSON, {"columns": list(RESULT_COLUMNS), "rows": rows, "seeds": seeds})
    frame.to_csv(out / RESULTS_CSV, index=False)
    calls: Counter[str] = Counter()
    for result in done:
        calls.update(result.manifest.get("calls", {}))
    manifest = {
        **done[0].manifest,
        "profile_path": profile.path,
        "profile": profile.raw,
        "seed": None,
        "seeds": seeds,
        "seeds_planned": list(profile.seeds),
        "seed_dirs": {str(seed): SEED_DIR.format(seed=seed) for seed in seeds},
        "status": "complete" if len(seeds) == len(profile.seeds) else "partial",
        "calls": dict(sorted(calls.items())),
        "cached_calls": sum(int(r.manifest.get("cached_calls", 0)) for r in done),
        "wall_s": round(sum(float(r.manifest.get("wall_s", 0.0)) for r in done), 1),
        "wall_s_total": round(sum(float(r.manifest.get("wall_s_total", 0.0)) for r in done), 1),
        "seed_manifests": {
            str(seed): {k: r.manifest.get(k) for k in ("git_commit", "wall_s_total", "calls", "prompt_hashes")}
            for seed, r in zip(seeds, done)
        },
    }
    atomic_write_json(out / MANIFEST_FILE, manifest)
    return frame, manifest


def _fig2_slice(
    profile: StudyProfile,
    out: Path,
    train: Sequence[ArcTask],
    llm: LLMClient,
    bb: StudyModels,
    ledger: Ledger,
    log: Any,
) -> tuple[list[ArcTask], SliceSelection | None]:
    """Select (or, on a resumed run, read back) Fig. 2's slice from the training pool; ``fig2_slice.json``."""
    if profile.fig2 is None:
        return [], None
    path = out / FIG2_SLICE_FILE
    by_id = {t.task_id: t for t in train}
    if path.exists():
        sel = SliceSelection(**{**read_json(path), "task_ids": tuple(read_json(path)["task_ids"])})
    else:
        if profile.fig2.select == "no_memory_pass":
            bb.check_endpoints(f"study {out}")
        with ledger.tag(condition=f"{FIG2_GROUP}-selection"):
            _kept, sel = select_slice(train, llm, profile.fig2, profile.eval_kwargs())
        atomic_write_json(path, sel.to_dict())
    if not sel.task_ids:
        raise RuntimeError(
            f"fig2: the no-memory solver passed none of the {sel.n_tried} pool tasks tried; there is no slice "
            "to stream (use a stronger backbone, or fig2.select: first)"
        )
    if sel.shortfall:
        log(
            f"WARNING: fig2 slice holds {len(sel.task_ids)} of {sel.n_tasks} tasks: the pool had no more tasks "
            "the no-memory solver passes (fig2_slice.json)"
        )
    return [by_id[t] for t in sel.task_ids], sel


def _condition_rows(out: Path, name: str) -> list[dict[str, Any]]:
    return list(read_json(out / CONDITIONS_DIR / name / DONE_FILE)["rows"])


def _frame(rows: Sequence[dict[str, Any]], seed: int = 0) -> pd.DataFrame:
    """The results table; ``seed`` for rows written before each row named its seed (the study's one seed)."""
    df = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    df["seed"] = df["seed"].where(df["seed"].notna(), seed)
    # studies written before Table 4's |B| was recorded read their buffer size as a cap (the only reading then)
    df["table4_b"] = df["table4_b"].where(df["table4_b"].notna(), df["buffer_capacity"])
    types = {"step": int, "examples_seen": int, "n_passed": int, "n_tasks": int, "tasks_per_step": int, "seed": int}
    return df.astype({**types, "buffer_capacity": "Int64", "table4_b": "Int64", "accuracy": float, "fused": float})


# -- reading a study back -------------------------------------------------------------------------------


def load_study_rows(out_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of a finished study's results, each naming its seed (older studies: the manifest's one seed)."""
    path = Path(out_dir) / RESULTS_JSON
    if not path.exists():
        raise FileNotFoundError(
            f"no study results at {path}: run `python -m antipersist_lib arc-study --profile <profile>` first"
        )
    manifest = Path(out_dir) / MANIFEST_FILE
    seed = (read_json(manifest).get("seed") if manifest.exists() else None) or 0
    return [{**row, "seed": row.get("seed", seed)} for row in read_json(path)["rows"]]


def load_study(out_dir: str | Path) -> pd.DataFrame:
    """The results table of a finished study: one row per (condition, checkpoint step, evaluation set, seed)."""
    return _frame(load_study_rows(out_dir))


def seed_folders(out_dir: str | Path) -> list[tuple[int, Path]]:
    """(seed, folder) of every study a finished study folder holds: itself, or for a profile with ``seeds``
    each seed's subfolder, in the profile's order."""
    man = load_manifest(out_dir)
    if man.get("seeds"):
        return [(int(k), Path(out_dir) / man["seed_dirs"][str(k)]) for k in man["seeds"]]
    return [(int(man.get("seed") or 0), Path(out_dir))]


def is_multi_seed(out_dir: str | Path | None) -> bool:
    """Whether ``out_dir`` is a study of several seeds (``run_seeds``), whose records live in its seed folders."""
    return (
        out_dir is not None and (Path(out_dir) / MANIFEST_FILE).exists() and bool(load_manifest(out_dir).get("seeds"))
    )


def condition_folder(out_dir: str | Path, name: str) -> Path:
    """Where one condition's records are; a study of several seeds has one per seed, so it is refused here,
    naming the seed folders (the tables of ``arc.analysis`` stack every seed's)."""
    if is_multi_seed(out_dir):
        folders = [str(f) for _, f in seed_folders(out_dir)]
        raise ValueError(f"{out_dir} is a study of several seeds: condition {name!r} is recorded in each of {folders}")
    return Path(out_dir) / CONDITIONS_DIR / name


def seeds_progress(out_dir: str | Path | None, root: str | Path | None = None) -> str:
    """A line for a study of several seeds that is still running ("" otherwise): which seeds are complete and
    in the tables, of which planned, and the command that resumes it (its folder relative to ``root``, the
    checkout, when inside it, so the command can be pasted on another machine)."""
    if not is_multi_seed(out_dir):
        return ""
    man = load_manifest(out_dir)  # type: ignore[arg-type]
    planned, complete = man.get("seeds_planned") or man["seeds"], man["seeds"]
    if len(complete) >= len(planned):
        return ""
    folder = Path(out_dir)  # type: ignore[arg-type]
    if root is not None and folder.resolve().is_relative_to(Path(root).resolve()):
        folder = folder.resolve().relative_to(Path(root).resolve())
    return (
        f"seeds complete: {complete} of {planned}: the tables hold the complete seeds only (resume with "
        f"`python -m antipersist_lib arc-study --profile {man['profile_path']} --out {folder.as_posix()}`)"
    )


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST_FILE
    if not path.exists():
        raise FileNotFoundError(f"no study manifest at {path}")
    return dict(read_json(path))


def results(out_dir: str | Path | None) -> pd.DataFrame:
    """``load_study``, or an empty results table when there is no study (notebook mode "paper")."""
    return load_study(out_dir) if out_dir is not None else _frame([])


def summary(out_dir: str | Path | None) -> dict[str, Any]:
    """What a study ran: backbone, grid, pools, checkpoints, calls and wall time (for a notebook's last cell)."""
    if out_dir is None:
        return {"study": None}
    man = load_manifest(out_dir)
    keys = (
        "name",
        "profile_path",
        "backbone",
        "steps",
        "checkpoints",
        "task_examples",
        "train_pool",
        "heldout_pool",
        "buffer_reading",
        "coverage_average",
        "table4_memories",
        "eval_repeats",
        "eval_temperature",
    )
    return {
        **{k: man.get(k) for k in keys},
        "seeds": man.get("seeds") or [man.get("seed", 0)],
        "seeds_planned": man.get("seeds_planned") or man.get("seeds") or [man.get("seed", 0)],
        "status": man.get("status"),
        "model": man["endpoint"]["model"],
        "conditions": [c["name"] for c in man["conditions"]],
        "eval_tasks": {k: len(v) for k, v in man["eval_task_ids"].items()},
        "calls": man["calls"],
        "cached_calls": man["cached_calls"],
        "wall_s": man["wall_s"],
        "git_commit": man["git_commit"],
        "prompt_hashes": man["prompt_hashes"],
    }


def condition_names(out_dir: str | Path | None, *, streams_only: bool = True) -> list[str]:
    """Conditions of the study, in the profile's order (``streams_only``: without the no-memory baseline)."""
    if out_dir is None:
        return []
    conds = load_manifest(out_dir)["conditions"]
    return [c["name"] for c in conds if not (streams_only and c["regime"] == "none")]


def condition_snapshots(out_dir: str | Path, name: str) -> list[dict[str, Any]]:
    return load_snapshots(condition_folder(out_dir, name))


def condition_specs(out_dir: str | Path | None) -> dict[str, dict[str, Any]]:
    """The manifest's conditions by name ({} for no study)."""
    return {} if out_dir is None else {c["name"]: c for c in load_manifest(out_dir)["conditions"]}


def study_note(out_dir: str | Path | None) -> str:
    """The kit's weak-model note (``serving.embedded.WEAK_MODEL_NOTE``) when the study ran on the embedded
    default, else "": the provenance line under every figure."""
    if out_dir is None or not load_manifest(out_dir).get("embedded"):
        return ""
    from antipersist_lib.serving.embedded import WEAK_MODEL_NOTE

    return WEAK_MODEL_NOTE


def obtain_study(
    mode: str,
    study_dir: str | Path,
    *,
    profile: str | Path | None = None,
    root: str | Path | None = None,
    out_root: str | Path = "outputs/arc",
    endpoint: Endpoint | None = None,
) -> Path | None:
    """The notebooks' run-or-load step. "paper": None; "load": ``study_dir``; "run": run ``profile`` into
    ``<out_root>/<profile name>`` (resuming) and return that folder. Relative paths are taken from ``root``."""
    return obtain_folder(
        mode,
        study_dir,
        profile=profile,
        root=root,
        out_root=out_root,
        run=lambda prof, out: run_study(prof, out, endpoint=endpoint),
        results_file=RESULTS_JSON,
        what="study",
    )
