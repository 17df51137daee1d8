"""An ARC-AGI Stream study profile (``params/arc/*.yaml``) and the tasks it streams and evaluates.

``load_study_profile`` reads and checks a profile (every unknown or malformed key named with the file; the
readings of the paper it selects are described in ``docs/faulty-memories.md``), renders every condition's largest
prompts against the named backbone's context (``arc.context``) and returns a ``StudyProfile``: the grid of stream
conditions (``Condition``), Fig. 2's slice (``Fig2Spec``), the pools (``PoolSpec``). The tasks: ``pool_tasks``,
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
    return checker(path).mapping(data.get(key), key, allowed)


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
        return PoolSpec(FRESH_POOL, int(checker(path).integer(spec.get("seed", 0), f"{key}.seed") or 0))
    if name not in POOL_SIZES:
        choices = sorted(POOL_SIZES) + ([FRESH_POOL] if key == "train_pool" else [])
        raise fail(path, f"{key}.name must be one of {choices}, got {name!r}")
    seed = checker(path).integer(spec.get("seed", 0), f"{key}.seed")
    limit = checker(path).integer(spec.get("limit"), f"{key}.limit", minimum=1, optional=True)
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
            checker(path).integer(b, "conditions.buffer_size", minimum=1)
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
            checker(path).integer(b, "conditions.buffer_size", minimum=1, optional=True)
        for t in per_step:
            checker(path).integer(t, "conditions.tasks_per_step", minimum=1)
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
    return checker(path).integer(value, f"episodic_capacity[{b}]", minimum=1, optional=True)


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
        n_tasks=int(checker(path).integer(spec.get("n_tasks", 19), "fig2.n_tasks", minimum=1) or 19),
        revisits=int(checker(path).integer(spec.get("revisits", 10), "fig2.revisits", minimum=1) or 10),
        regimes=regimes,
        buffer_size=checker(path).integer(spec.get("buffer_size"), "fig2.buffer_size", minimum=1, optional=True),
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
    check = checker(path)
    backbone = check_backbone(data, path)
    options = _section(data, "backbone_options", BACKBONE_OPTION_KEYS, path)
    train_pool = _pool(data, "train_pool", path)
    heldout_pool = _pool(data, "heldout_pool", path, required=False)
    examples = _section(data, "task_examples", EXAMPLE_KEYS, path)
    n_train = check.integer(examples.get("n_train", N_TRAIN), "task_examples.n_train", minimum=1)
    n_test = check.integer(examples.get("n_test", N_TEST), "task_examples.n_test", minimum=1)
    steps = check.integer(data.get("steps"), "steps", minimum=1)
    base_tps = check.integer(data.get("tasks_per_step", 1), "tasks_per_step", minimum=1)
    if "checkpoints" in data and "checkpoint_every" in data:
        raise fail(path, "give 'checkpoints' (a list of steps) or 'checkpoint_every', not both")
    if "checkpoints" in data:
        points = {check.integer(s, "checkpoints[]") for s in check_list(data["checkpoints"], "checkpoints", path)}
    else:
        every = check.integer(data.get("checkpoint_every", steps), "checkpoint_every", minimum=1)
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
    repeats = int(check.integer(evaluation.get("repeats", 1), "evaluation.repeats", minimum=1) or 1)
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
            steps_chosen = [check.integer(c, "source_ablation.checkpoints[]") for c in check_list(chosen, "x", path)]
            off = [c for c in steps_chosen if c not in points]
            if off:
                raise fail(path, f"source_ablation.checkpoints {off} are not checkpoints of the study")
            ablation["checkpoints"] = sorted(int(c or 0) for c in steps_chosen)
    if surgery is not None:
        check.integer(surgery.get("max_entries"), "surgery.max_entries", minimum=1, optional=True)
        if surgery.setdefault("eval_set", "heldout") not in EVAL_SETS:
            raise fail(path, f"surgery.eval_set must be one of {EVAL_SETS}, got {surgery['eval_set']!r}")
    if judge is not None:
        check.integer(judge.get("max_tokens", 1024), "judge.max_tokens", minimum=1)
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
        seed=seeds[0] if seeds else int(check.integer(data.get("seed", 0), "seed") or 0),
        seeds=seeds,
        n_train=int(n_train or N_TRAIN),
        n_test=int(n_test or N_TEST),
        stream=stream,
        eval_sets=sets,
        train_limit=check.integer(evaluation.get("train_limit"), "evaluation.train_limit", minimum=1, optional=True),
        eval_sources=sources_eval,
        eval_workers=int(check.integer(evaluation.get("workers", 1), "evaluation.workers", minimum=1) or 1),
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
        table4_memories=check.integer(data.get("table4_memories"), "table4_memories", minimum=1, optional=True),
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
    seeds = tuple(int(checker(path).integer(s, "seeds[]") or 0) for s in check_list(data["seeds"], "seeds", path))
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
