"""An ARC-AGI Stream study profile (``params/arc/*.yaml``) and the tasks it streams and evaluates.

``load_study_profile`` reads and checks a profile (every unknown or malformed key named with the file; the
readings of the paper it selects are described in ``docs/faulty-memories.md``), renders every condition's largest
prompts against the named backbone's context (``arc.context``) and returns a ``StudyProfile``: the grid of stream
conditions (``Condition``), Fig. 2's slice (``Fig2Spec``), the pools (``PoolSpec``). Each block's keys are stated once
(``PROFILE``, ``POOL``, ``CONDITIONS``, ``STREAM``, ...: ``profile_fields`` specs, read by ``read_block``); the readers
here add the rules between keys. A stream's ``StreamConfig`` and the evaluation's settings are built here for the
study and its probes (``stream_config_of``, ``eval_kwargs_of``). The tasks: ``pool_tasks``,
``training_slice`` (Fig. 2's in-distribution set) and ``select_slice`` (Fig. 2's slice the no-memory solver passes).
The runner is ``arc.study``; what a study folder holds, ``arc.study_folder``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from antipersist_lib.arc.context import check_profile_context
from antipersist_lib.arc.controller import (
    DECIDE_ON,
    MEMORY_SOURCES,
    REGIMES,
    SOURCES,
    StreamConfig,
    evaluate,
    stream_batches,
)
from antipersist_lib.arc.generator import FRESH_POOL, N_TEST, N_TRAIN, POOL_SIZES, ArcTask, make_task, pool_plan
from antipersist_lib.arc.isolation import ISOLATION_MODES
from antipersist_lib.arc.prompts import EXTRACTION_SCHEMAS, HELPER_USAGES, SOLVER_MODES
from antipersist_lib.arc.sandbox import SandboxLimits
from antipersist_lib.arc.stores import AbstractStore, EpisodicBuffer, Memory
from antipersist_lib.profile_fields import BOOL, CHOICE, INT, MAPPING, NUMBER, Checker, Field, Fields, Values
from antipersist_lib.serving.llm import LLMClient
from antipersist_lib.studies import (
    BACKBONE_OPTION_KEYS,
    check_backbone,
    check_list,
    checker,
    fail,
    read_profile,
)

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

#: Fig. 2's slice: the first tasks the no-memory solver passes, or the first tasks unchecked
FIG2_SELECTIONS = ("no_memory_pass", "first")

# -- the profile's blocks, each key stated once (``profile_fields``); the rules between keys are in the readers --
# A Field of kind ANY is checked by the reader its comment names (StreamConfig: the stream settings); ``choices`` on
# a list-valued ANY field (a value or a list of them) are the values ``check_choices`` allows. ``read_block`` reads a
# block; a choice's error names its key unquoted (``fig2.select must be one of ...``), as it always has.

#: the keys every ARC profile opens with (the study's and the probes')
HEADER = (
    Field("name"),  # any value, read as a string; default: the file's stem
    Field("description"),
    Field("backbone"),  # studies.check_backbone
    Field("backbone_options", MAPPING, keys=BACKBONE_OPTION_KEYS),
    Field("seed", INT, minimum=0, default=0),
)
PROFILE = Fields(
    *HEADER,
    Field("seeds"),  # distinct integers, one study each (_seeds); not with seed
    Field("train_pool"),  # POOL, required
    Field("heldout_pool"),  # POOL; default: heldout50
    Field("task_examples"),  # EXAMPLES
    Field("steps", INT, minimum=1, required=True),
    Field("tasks_per_step", INT, minimum=1, default=1),
    Field("checkpoint_every", INT, minimum=1),  # default: steps; not with checkpoints
    Field("checkpoints"),  # a list of steps >= 0, none beyond steps
    Field("conditions"),  # CONDITIONS, required
    Field("no_memory", BOOL, default=True),
    Field("stream"),  # STREAM
    Field("evaluation"),  # EVALUATION
    Field("judge"),  # false, true or JUDGE (_optional_block)
    Field("surgery"),  # false, true or SURGERY
    Field("response_cache", BOOL, default=True),
    Field("sandbox", default="kernel"),  # check_sandbox_mode: one of ISOLATION_MODES
    Field("buffer_reading", CHOICE, choices=BUFFER_READINGS, default="cap"),
    Field(
        "episodic_capacity",
        test=lambda v: v is None or isinstance(v, dict) or (isinstance(v, int) and not isinstance(v, bool)),
        what="an integer, null or a mapping |B| -> capacity",
    ),  # buffer_reading: batch only (_capacity_of)
    Field("revisit", BOOL, default=False),
    Field("coverage_average", CHOICE, choices=COVERAGE_AVERAGES, default="checkpoints"),
    Field("table4_memories", INT, minimum=1, nullable=True),
    Field("fig2"),  # false, null or FIG2
    Field("source_ablation"),  # false, true or SOURCE_ABLATION
)
POOL = Fields(
    Field("name"),  # one of POOL_SIZES (train_pool: or FRESH_POOL), required (_pool)
    Field("seed", INT, minimum=0, default=0),
    Field("limit", INT, minimum=1, nullable=True),  # at most the pool's size; not for FRESH_POOL
)
EXAMPLES = Fields(
    Field("n_train", INT, minimum=1, default=N_TRAIN),
    Field("n_test", INT, minimum=1, default=N_TEST),
)
#: the grid: each key a value or a list of them, every combination one stream (_grid_conditions)
CONDITIONS = Fields(
    Field("regime", default=list(REGIMES), choices=REGIMES),  # [] runs no stream
    Field("source", default=["gt"], choices=SOURCES),
    Field("buffer_size", default=[8]),  # integers >= 1 (cap: or null, uncapped)
    Field("tasks_per_step"),  # integers >= 1 (cap only); default: the profile's tasks_per_step
)
#: StreamConfig's settings: a profile holds the ones it gives (StreamConfig has the defaults and checks the rest)
STREAM = Fields(
    Field("shuffle"),
    Field("history_examples"),
    Field("record_failures"),
    Field("solver_memory"),  # a store or a list of them (check_list), read as a tuple
    Field("tool_bodies"),
    Field("temperature"),
    Field("solver_max_tokens"),
    Field("manager_max_tokens"),
    Field("decide_on", CHOICE, choices=DECIDE_ON),
    Field("extraction_schema", CHOICE, choices=EXTRACTION_SCHEMAS),
    Field("solver_mode", CHOICE, choices=SOLVER_MODES),
    Field("helper_usage", CHOICE, choices=HELPER_USAGES),
    Field("extraction_coaching"),
)
EVALUATION = Fields(
    Field("sets", default=["heldout"], choices=EVAL_SETS),
    Field("train_limit", INT, minimum=1, nullable=True),
    Field("sources", default=list(MEMORY_SOURCES), choices=MEMORY_SOURCES),
    Field("workers", INT, minimum=1, default=1),
    Field("repeats", INT, minimum=1, default=1),
    Field("temperature", NUMBER, minimum=0, nullable=True),  # null: the stream's own temperature
)
FIG2 = Fields(
    Field("select", CHOICE, choices=FIG2_SELECTIONS, default="no_memory_pass"),
    Field("n_tasks", INT, minimum=1, default=19),
    Field("revisits", INT, minimum=1, default=10),
    Field("regime", default=["force"], choices=REGIMES),
    Field("buffer_size", INT, minimum=1, nullable=True),
)
#: ``conditions`` of the three optional blocks: "all" or names of the grid's conditions (_optional_block)
SOURCE_ABLATION = Fields(
    Field("conditions", default="all"),
    Field("checkpoints"),  # checkpoints of the study (null: all of them)
    Field("eval_set", default="heldout"),  # one of evaluation.sets
    Field("arms", default=list(SOURCE_ARMS), choices=tuple(SOURCE_ARMS)),
)
JUDGE = Fields(
    Field("conditions", default="all"),
    Field("max_tokens", INT, minimum=1, default=1024),
)
SURGERY = Fields(
    Field("conditions", default="all"),
    Field("max_entries", INT, minimum=1, nullable=True),
    Field("eval_set", CHOICE, choices=EVAL_SETS, default="heldout"),
)


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
        return stream_config_of(
            self.stream,
            self.limits,
            regime=cond.regime,
            source=cond.source,
            buffer_size=cond.buffer_size,
            steps=self.fig2.steps if fig2 and self.fig2 else self.steps,
            tasks_per_step=cond.tasks_per_step,
            seed=self.seed,
        )

    def eval_kwargs(self) -> dict[str, Any]:
        """``evaluate``'s solver settings: the stream's own (tool bodies, decoding, token cap, sandbox limits)."""
        temperature = {} if self.eval_temperature is None else {"temperature": self.eval_temperature}
        return eval_kwargs_of(
            self.stream, self.limits, self.eval_sources, self.eval_workers, repeats=self.eval_repeats, **temperature
        )

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


def read_block(path: Any, value: Any, key: str | None, spec: Fields) -> Values:
    """``value`` (``key``'s mapping; None: the top level, already read) checked against ``spec`` by the study profile's
    checker (``Checker.read``). A choice, and a field with its own ``test``, is named unquoted, as the ARC profiles
    have always named them (``stream.decide_on must be one of ('every_step', 'passing'), got 'x'``)."""
    check = checker(path)
    data = check.mapping(value, key, spec.keys) if key is not None else value
    plain = Checker(path, check.fail, label="{key}")
    for f in spec.fields:
        if f.key in data and (f.kind == CHOICE or f.test is not None):
            plain.value(data[f.key], f"{key}.{f.key}" if key else f.key, f)
    return check.read(data, key, spec)


def check_choices(value: Any, key: str, f: Field, path: Any, *, each: bool = False) -> list[Any]:
    """A value or a non-empty list of them (``check_list``), each one of ``f.choices``; the error names the first
    value not allowed (``each``) or all of them."""
    allowed = tuple(f.choices or ())
    items = check_list(value, key, path)
    bad = [v for v in items if v not in allowed]
    if bad and each:
        raise fail(path, f"{key}: {bad[0]!r} is not one of {allowed}")
    if bad:
        raise fail(path, f"{key}: {bad} not in {allowed}")
    return items


def read_stream(value: Any, path: Any, spec: Fields = STREAM) -> dict[str, Any]:
    """The ``stream`` block: the settings the profile gives (StreamConfig supplies the rest), ``solver_memory`` as a
    tuple."""
    stream = checker(path).mapping(value, "stream", spec.keys)
    read_block(path, stream, "stream", spec)
    if "solver_memory" in stream:
        stream["solver_memory"] = tuple(check_list(stream["solver_memory"], "stream.solver_memory", path))
    return stream


def stream_config_of(stream: dict[str, Any], limits: SandboxLimits, **run: Any) -> StreamConfig:
    """One stream's ``StreamConfig``: ``run`` (regime, source, buffer size, steps, tasks per step, seed) with a
    profile's ``stream`` settings and sandbox limits (the study's and the probes' streams)."""
    return StreamConfig(**run, limits=limits, **stream)


def eval_kwargs_of(
    stream: dict[str, Any], limits: SandboxLimits, sources: tuple[str, ...], workers: int, **more: Any
) -> dict[str, Any]:
    """``evaluate``'s settings: the streams' own solver settings (``StreamConfig.evaluate_kwargs``: tool bodies,
    decoding, token cap, sandbox limits, solver mode), the memory sources and workers, then ``more`` (the study's
    repeats and evaluation temperature)."""
    return {
        **StreamConfig(limits=limits, **stream).evaluate_kwargs(),
        "sources": sources,
        "workers": workers,
        **more,
    }


def _pool(value: Any, key: str, path: Any, *, required: bool = True) -> PoolSpec:
    data = checker(path).mapping(value, key, POOL.keys)
    if not data:
        if required:
            raise fail(path, f"{key!r} is required: {{name: one of {sorted(POOL_SIZES)}, seed, limit}}")
        return PoolSpec("heldout50")
    name = data.get("name")
    fresh = name == FRESH_POOL and key == "train_pool"
    if fresh and "limit" in data:
        raise fail(path, f"{key}: the {FRESH_POOL!r} pool holds as many tasks as the stream needs; drop 'limit'")
    if not fresh and name not in POOL_SIZES:
        choices = sorted(POOL_SIZES) + ([FRESH_POOL] if key == "train_pool" else [])
        raise fail(path, f"{key}.name must be one of {choices}, got {name!r}")
    spec = read_block(path, data, key, POOL)
    if fresh:
        return PoolSpec(FRESH_POOL, spec["seed"])
    limit = spec["limit"]
    if limit is not None and limit > POOL_SIZES[name]:
        raise fail(path, f"{key}.limit {limit} exceeds the {POOL_SIZES[name]} tasks of pool {name!r}")
    return PoolSpec(name, spec["seed"], limit)


def condition_name(regime: str, source: str, buffer_size: int | None, tasks_per_step: int) -> str:
    """``<regime>-<source>-b<cap or inf>[-t<tasks per step>]``: the name says both the buffer's capacity and the
    tasks per step, so it reads the same under either ``buffer_reading`` (|B| = 8 as a batch is
    ``auto-gt-binf-t8``, as a cap ``auto-gt-b8``)."""
    name = f"{regime}-{source}-b{buffer_size if buffer_size is not None else 'inf'}"
    return name + (f"-t{tasks_per_step}" if tasks_per_step != 1 else "")


def fig2_condition_name(regime: str, buffer_size: int | None) -> str:
    return f"{FIG2_GROUP}-" + condition_name(regime, "gt", buffer_size, 1)


def _grid_conditions(
    grid: Values, reading: str, base_tps: int, path: Any, capacities: Any = None
) -> tuple[Condition, ...]:
    """The grid's streams; ``reading`` says whether ``buffer_size`` values are a cap or the tasks per step.
    ``regime: []`` runs no stream (an evaluation of the no-memory solver alone, e.g. a solver-prompt check).
    ``capacities`` is the profile's ``episodic_capacity`` (``buffer_reading: batch`` only, ``_capacity_of``)."""
    if grid["regime"] == []:
        return ()
    regimes = check_list(grid["regime"], "conditions.regime", path)
    sources = check_list(grid["source"], "conditions.source", path)
    buffers = check_list(grid["buffer_size"], "conditions.buffer_size", path)
    check_choices(regimes, "conditions.regime", CONDITIONS["regime"], path, each=True)
    check_choices(sources, "conditions.source", CONDITIONS["source"], path, each=True)
    check = checker(path)
    if reading == "batch":
        if "tasks_per_step" in grid.given or base_tps != 1:
            raise fail(
                path,
                "buffer_reading: batch takes the tasks per step from conditions.buffer_size (|B| fresh examples "
                "per step); leave out tasks_per_step and conditions.tasks_per_step",
            )
        for b in buffers:
            check.integer(b, "conditions.buffer_size", minimum=1)
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
        given_tps = grid["tasks_per_step"] if "tasks_per_step" in grid.given else [base_tps]
        per_step = check_list(given_tps, "conditions.tasks_per_step", path)
        for b in buffers:
            check.integer(b, "conditions.buffer_size", minimum=1, optional=True)
        for t in per_step:
            check.integer(t, "conditions.tasks_per_step", minimum=1)
        combos = [(r, s, b, t, b) for r, s, b, t in itertools.product(regimes, sources, buffers, per_step)]
    conditions = tuple(
        Condition(condition_name(r, s, cap, t), r, s, cap, t, table4_b=b, buffer_reading=reading)
        for r, s, cap, t, b in combos
    )
    if len({c.name for c in conditions}) != len(conditions):
        raise fail(path, "conditions: a value is listed twice")
    return conditions


def _stream_pool(spec: PoolSpec, conditions: Sequence[Condition], steps: int, revisit: bool, path: Any) -> PoolSpec:
    """The training pool sized for the grid: the ``fresh`` pool gets the most tasks any stream reads (steps x
    tasks per step); a fixed pool shorter than that would be cycled, so every task seen again, which the profile
    must ask for (``revisit: true``): the paper revisits only in Figs. 2 and 11 (their own settings)."""
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
    return checker(path).integer(value, f"episodic_capacity[{b}]", minimum=1, optional=True)


def _fig2(value: Any, path: Any) -> Fig2Spec | None:
    if value in (None, False):
        return None
    spec = read_block(path, value, "fig2", FIG2)
    return Fig2Spec(
        select=spec["select"],
        n_tasks=spec["n_tasks"],
        revisits=spec["revisits"],
        regimes=tuple(check_choices(spec["regime"], "fig2.regime", FIG2["regime"], path, each=True)),
        buffer_size=spec["buffer_size"],
    )


def _checkpoints(data: dict[str, Any], steps: int, every: int | None, path: Any) -> set[int]:
    """The evaluated steps: ``checkpoints`` (a list of steps) or every ``checkpoint_every`` steps (default: only
    the last), always with 0 and the last step."""
    if "checkpoints" in data:
        points = {
            checker(path).integer(s, "checkpoints[]") for s in check_list(data["checkpoints"], "checkpoints", path)
        }
    else:
        points = set(range(0, steps + 1, every or steps)) | {0}
    points.add(steps)
    late = sorted(p for p in points if p > steps)
    if late:
        raise fail(path, f"checkpoints {late} lie beyond the last step ({steps})")
    return points


def load_study_profile(path: str | Path, *, context_check: bool = True) -> StudyProfile:
    """Read and check a study profile; any unknown or malformed key is named in the error. With ``context_check``
    the largest prompt of every condition is rendered and refused when it exceeds the named backbone's context
    (``check_profile_context``; a run checks again against the endpoint it really uses)."""
    path = Path(path)
    data = read_profile(path, set(PROFILE.keys))
    if "checkpoints" in data and "checkpoint_every" in data:
        raise fail(path, "give 'checkpoints' (a list of steps) or 'checkpoint_every', not both")
    if "seeds" in data and "seed" in data:
        raise fail(path, "give 'seed' (one study) or 'seeds' (one study per seed, in seed<k>/ subfolders), not both")
    backbone = check_backbone(data, path)
    train_pool = _pool(data.get("train_pool"), "train_pool", path)
    heldout_pool = _pool(data.get("heldout_pool"), "heldout_pool", path, required=False)
    examples = read_block(path, data.get("task_examples"), "task_examples", EXAMPLES)
    top = read_block(path, data, None, PROFILE)
    steps = top["steps"]
    points = _checkpoints(data, steps, top["checkpoint_every"], path)
    grid = read_block(path, data.get("conditions"), "conditions", CONDITIONS)
    if not grid.given:
        raise fail(path, f"'conditions' is required: a mapping of {sorted(CONDITIONS.keys)} to lists of values")
    reading = top["buffer_reading"]
    conditions = _grid_conditions(grid, reading, top["tasks_per_step"], path, top["episodic_capacity"])
    train_pool = _stream_pool(train_pool, conditions, steps, top["revisit"], path)
    fig2 = _fig2(data.get("fig2"), path)
    fig2_conditions = (
        tuple(
            Condition(fig2_condition_name(r, fig2.buffer_size), r, "gt", fig2.buffer_size, 1, group=FIG2_GROUP)
            for r in fig2.regimes
        )
        if fig2
        else ()
    )
    stream = read_stream(data.get("stream"), path)
    evaluation = read_block(path, data.get("evaluation"), "evaluation", EVALUATION)
    sets = tuple(check_choices(evaluation["sets"], "evaluation.sets", EVALUATION["sets"], path))
    sources = tuple(check_choices(evaluation["sources"], "evaluation.sources", EVALUATION["sources"], path))
    names = [c.name for c in conditions + fig2_conditions]
    judge = _optional_block(data.get("judge"), "judge", JUDGE, names, path)
    surgery = _optional_block(data.get("surgery"), "surgery", SURGERY, names, path)
    ablation = _optional_block(
        data.get("source_ablation"), "source_ablation", SOURCE_ABLATION, [c.name for c in conditions], path
    )
    if ablation is not None:
        _source_ablation(ablation, sets, points, path)
    if surgery is not None:
        surgery.setdefault("eval_set", SURGERY["eval_set"].default)
    seeds = _seeds(data, path)
    if not conditions and not fig2_conditions and not top["no_memory"]:
        raise fail(path, "nothing to run: conditions.regime is empty, there is no fig2 block and no_memory is false")
    temperature = evaluation["temperature"]
    profile = StudyProfile(
        path=str(path),
        name=str(data.get("name", path.stem)),
        backbone=backbone,
        train_pool=train_pool,
        heldout_pool=heldout_pool,
        steps=steps,
        checkpoints=tuple(sorted(points)),
        conditions=conditions,
        no_memory=top["no_memory"],
        seed=seeds[0] if seeds else top["seed"],
        seeds=seeds,
        n_train=examples["n_train"],
        n_test=examples["n_test"],
        stream=stream,
        eval_sets=sets,
        train_limit=evaluation["train_limit"],
        eval_sources=sources,
        eval_workers=evaluation["workers"],
        judge=judge,
        surgery=surgery,
        response_cache=top["response_cache"],
        sandbox=check_sandbox_mode(top["sandbox"], path),
        backbone_options=top["backbone_options"],
        raw=data,
        buffer_reading=reading,
        coverage_average=top["coverage_average"],
        eval_repeats=evaluation["repeats"],
        eval_temperature=None if temperature is None else float(temperature),
        table4_memories=top["table4_memories"],
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
    shuffle seed); not together with ``seed`` (refused before)."""
    if "seeds" not in data:
        return ()
    if not isinstance(data["seeds"], list):
        raise fail(path, f"'seeds' must be a list of integers, got {data['seeds']!r}")
    seeds = tuple(checker(path).integer(s, "seeds[]") for s in check_list(data["seeds"], "seeds", path))
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


def _optional_block(value: Any, key: str, spec: Fields, names: list[str], path: Any) -> dict[str, Any] | None:
    """``key: false`` (off), ``true`` (every condition) or a mapping of ``spec`` with ``conditions: all | [names]``:
    the keys the profile gives, ``conditions`` listed (None when off)."""
    if value is False or value is None:
        return None
    block = {} if value is True else checker(path).mapping(value, key, spec.keys)
    chosen = block.get("conditions", spec["conditions"].default)
    chosen = names if chosen == "all" else check_list(chosen, f"{key}.conditions", path)
    unknown = [c for c in chosen if c not in names]
    if unknown:
        raise fail(path, f"{key}.conditions names unknown condition(s) {unknown}; the grid has {names}")
    read_block(path, block, key, spec)
    block["conditions"] = list(chosen)
    return block


def _source_ablation(ablation: dict[str, Any], sets: tuple[str, ...], points: set[int], path: Any) -> None:
    """K.1's arms, its evaluation set (one of ``evaluation.sets``) and its checkpoints (the study's), in place."""
    spec = SOURCE_ABLATION
    arms = check_choices(ablation.get("arms", spec["arms"].default), "source_ablation.arms", spec["arms"], path)
    ablation["arms"] = list(arms)
    if ablation.setdefault("eval_set", spec["eval_set"].default) not in sets:
        raise fail(path, f"source_ablation.eval_set {ablation['eval_set']!r} is not in evaluation.sets {sets}")
    chosen = ablation.get("checkpoints")
    if chosen is not None:
        check = checker(path)
        listed = check_list(chosen, "source_ablation.checkpoints", path)
        steps_chosen = [check.integer(c, "source_ablation.checkpoints[]") for c in listed]
        off = [c for c in steps_chosen if c not in points]
        if off:
            raise fail(path, f"source_ablation.checkpoints {off} are not checkpoints of the study")
        ablation["checkpoints"] = sorted(steps_chosen)


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
