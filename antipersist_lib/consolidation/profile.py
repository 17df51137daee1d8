"""The consolidation study's profile (``params/consolidation/*.yaml``): what it may name, checked before anything runs.

A profile names the benchmark and backbone, the fixed pool, the builders and the regimes they are built under,
the evaluation and the kit's own methods to evaluate beside them. ``load_study_profile`` reads it into a
``StudyProfile``; every unknown or malformed key is named in a ``StudyProfileError`` with the file, and the
builders' and protocol's own checks run on it, so a typo fails in seconds rather than hours into a run. Each
block's keys are stated once (``PROFILE``, ``POOL``, ``REGIME``, ...: ``profile_fields`` specs); the readers
here add the rules between keys.

The keys (``passes``, ``stages``, a regime's ``backbone``, the ``context`` block and its load-time check) are
described in docs/faulty-memories.md, "Consolidation over trajectory pools".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antipersist_lib.consolidation.context import CONTEXT_POLICIES, REFUSE, ContextSpec
from antipersist_lib.consolidation.context_estimate import FS_PATTERN, check_profile_context
from antipersist_lib.consolidation.pool import EXPERT_BENCHMARKS, STAGE_RULES
from antipersist_lib.consolidation.regimes import REGIMES, StageSpec, make_builder
from antipersist_lib.consolidation.task_switch import SETUPS as SWITCH_SETUPS
from antipersist_lib.envs import BENCHMARKS
from antipersist_lib.envs.partitions import heldout_set_path, load_partition
from antipersist_lib.profile_fields import BOOL, CHOICE, INT, MAPPING, NAMES, STR, Checker, Field, Fields
from antipersist_lib.runner.spec import AGENT_KEYS, RunSpec, of_types
from antipersist_lib.studies import (
    BACKBONE_OPTION_KEYS,
    EMBEDDED,
    _check_profile_file,
    check_backbone,
    check_embedding,
    fail,
    read_profile,
)

#: the no-memory row's builder (and protocol method)
NO_MEMORY = "react"
NO_MEMORY_CONDITION = "no_memory"
#: the kit methods that keep a trajectory store, and so can start from the study's pool (``seed_pool``)
SEEDABLE_METHODS = ("anti_persistence", "trajectory_memory")
#: the ``regime`` of a method row
METHOD_REGIME = "method"
#: builder_options key applied to every builder (before its own options)
COMMON_OPTIONS = "common"
BUILDER_NAMES = ("ace", "ace_gt", "awm", "dc", "clin", "all", "keep")

# -- the profile's blocks, each key stated once (``profile_fields``); the rules between keys are in the readers --

PROFILE = Fields(
    Field("name"),
    Field("description"),
    Field("benchmark", CHOICE, choices=BENCHMARKS, required=True),
    Field("benchmark_options", MAPPING),
    Field("backbone"),  # studies.check_backbone
    Field("backbone_options", MAPPING, keys=BACKBONE_OPTION_KEYS),
    Field("embedding"),  # studies.check_embedding
    Field("pool"),  # POOL
    Field("builders"),  # a list of BUILDER_NAMES or fs<N>, required
    Field("builder_options"),  # a mapping; keys: the builders and COMMON_OPTIONS
    Field("regimes"),  # name -> REGIME
    Field("build_seed", INT, minimum=0, default=0),
    Field("evaluation"),  # EVALUATION
    Field("response_cache", BOOL, default=True),
    Field("methods", MAPPING),  # row name -> METHOD_ROW
    Field("context"),  # CONTEXT
    Field("task_switch"),  # TASK_SWITCH (§6.2, Figs. 10 and 18; ``consolidation.task_switch``)
    Field("surgery"),  # SURGERY (App. I.1, Tables 12-13; ``consolidation.surgery``)
)
POOL = Fields(
    Field("expert"),  # EXPERT
    Field("runs", NAMES),
    Field("file", STR, what="a path to a pool .jsonl"),
    Field("successes_only", BOOL, default=True),
)
EXPERT = Fields(
    Field("per_type", INT, minimum=1, required=True),
    Field("seed", INT, minimum=0, default=0),
    Field("types", NAMES, nullable=True),
    Field("split", STR, default="train"),
    Field("allow_fewer", BOOL, default=False),
)
#: keys only a stream regime takes
STREAM_KEYS = ("batch_size", "homogeneous", "passes", "stages")
REGIME = Fields(
    Field("regime"),  # one of REGIMES; default: the regime's name
    Field("batch_size", INT, minimum=1),  # required by a stream
    Field("homogeneous", BOOL, default=True),
    Field("capacity", INT, minimum=1, nullable=True),
    Field("initial"),  # another regime's name
    Field("builders", NAMES),
    Field("steps"),  # as evaluation.steps
    Field("passes", INT, minimum=1, default=1),
    Field("stages"),  # STAGES
    Field(
        "backbone",
        STR,
        test=lambda v: v != EMBEDDED,
        what="a backbone profile name in params/backbones/ or a profile file (.yaml) (not 'embedded': the embedded "
        "default runs one model per study)",
    ),
    Field("types", NAMES),
    Field("initial_step", INT, minimum=0, nullable=True),
)
STAGES = Fields(
    Field("rule", CHOICE, choices=STAGE_RULES, required=True),
    Field("count", INT, minimum=1, required=True),
    Field("per_type_limit", INT, minimum=1, nullable=True),
)
CONTEXT = Fields(
    Field("overflow", CHOICE, choices=CONTEXT_POLICIES, default=REFUSE),
    Field("reserve_tokens", INT, minimum=0, nullable=True),
)
EVALUATION = Fields(
    Field("seeds", default=[42, 43]),  # distinct integers, one per repeat
    Field("backbones"),  # distinct backbone profiles
    Field("heldout_limit", INT, minimum=1, nullable=True),
    Field("max_steps", INT, minimum=1, default=50),
    Field("agent", MAPPING, keys=AGENT_KEYS),
    Field("heldout_concurrency", INT, minimum=1, default=1),
    Field("steps", default="last"),  # "last" | "all" | [int, ...] | {every: k} | {every_pass: k}
    Field("no_memory", BOOL, default=True),
    Field("task_types", NAMES),
    Field("heldout_set", STR, nullable=True, what="a held-out set's name"),  # of the benchmark, committed
)
METHOD_ROW = Fields(
    Field("method"),  # a kit method; default: the row's name
    Field("params", MAPPING),
    Field("seed_pool", BOOL, default=False),
    Field("iterations", INT, minimum=1, default=1),
    Field("train_per_iteration", INT, minimum=0, default=0),
    Field("train_pool_limit", INT, minimum=1, nullable=True),
)
TASK_SWITCH = Fields(
    Field("builder"),  # one of the profile's builders
    Field("sequence", NAMES, nullable=True),
    Field("setups", default=list(SWITCH_SETUPS)),
    Field("batch_size", INT, minimum=1, default=4),
    Field("capacity", INT, minimum=1, nullable=True),
    Field("judge", BOOL, default=True),
    Field("heldout_limit", INT, minimum=1, nullable=True),
    Field("records_per_task"),  # null, an integer >= 1, or task type -> integer >= 1
)
SURGERY = Fields(
    Field("builder"),
    Field("regime"),
    Field("step", default="last"),  # "last", an integer >= 0, or {pass: k}
    Field("remove", default="all"),  # "all" or entry ids
)


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
    passes: int = 1  # stream: how many times the pool is cycled
    stages: StageSpec | None = None  # stream: sampled stage batches instead of a partition of the pool
    backbone: str | None = None  # the backbone profile that builds this regime's banks (None: the study's)
    types: tuple[str, ...] | None = None  # only the pool's records of these task types (None: the whole pool)
    initial_step: int | None = None  # continue from this step of ``initial``'s snapshots (None: its final bank)

    def label(self) -> str:
        """A readable label for tables and figures, e.g. "Stream (b=4, het., cap 20)"."""
        if self.regime == "static_all":
            base = "Static-All"
        elif self.regime == "static_group":
            base = "Static-Group"
        else:
            parts = [f"b={self.batch_size}", "hom." if self.homogeneous else "het."]
            if self.passes > 1:
                parts.append(f"{self.passes} passes")
            if self.stages is not None:
                parts.append(f"{self.stages.count} stages, {self.stages.rule.replace('_', ' ')}")
            if self.capacity is not None:
                parts.append(f"cap {self.capacity}")
            base = f"Stream ({', '.join(parts)})"
        if self.regime != "stream" and self.capacity is not None:
            base += f" (cap {self.capacity})"
        if self.types is not None:
            base += f" on {', '.join(self.types)}"
        if self.backbone is not None:
            base += f" by {self.backbone}"
        if self.initial and self.initial_step is not None:
            return base + f" from {self.initial} at step {self.initial_step}"
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
class TaskSwitchSpec:
    """The task-switch sequence (§6.2, Fig. 10): ``builder`` distills each task's records under every setup
    (Fresh, Cumulative) in batches of ``batch_size``; each task's bank is evaluated on that task's held-out
    cases (``heldout_limit`` of them, default the study's) and, with ``judge``, every entry is labelled.
    ``sequence``: the task types in order (None: the pool's types in the order they first appear)."""

    builder: str
    sequence: tuple[str, ...] | None = None
    batch_size: int = 4
    capacity: int | None = None
    setups: tuple[str, ...] = SWITCH_SETUPS
    judge: bool = True
    heldout_limit: int | None = None
    #: records each task contributes: an integer, or a count per task type (the paper profile: Table 9's rollout
    #: cases per task, App. F.3); None: all of the pool's records of the task
    records_per_task: int | dict[str, int] | None = None


@dataclass(frozen=True)
class SurgerySpec:
    """Memory surgery (App. I.1): the bank ``builder`` built under ``regime`` at ``step`` (None: its last) is
    evaluated whole and without each entry of ``remove`` in turn (None: every entry), on the study's held-out
    tasks and seeds."""

    builder: str
    regime: str
    step: int | None = None
    remove: tuple[str, ...] | None = None
    end_of_pass: int | None = None  # instead of ``step``: the bank at the end of this pass over the pool


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
    #: evaluate only held-out tasks of these types (Fig. 8(c)'s probe: the focal and the probe type)
    task_types: tuple[str, ...] | None = None
    #: the named held-out set every memory is evaluated on (``evaluation.heldout_set``; the faulty-memories
    #: paper's ALFWorld profiles: valid_seen_balanced_48, App. F.1); None: the partition's own held-out split
    heldout_set: str | None = None
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
    context: ContextSpec = field(default_factory=ContextSpec)
    task_switch: TaskSwitchSpec | None = None
    surgery: SurgerySpec | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    #: the backbone profiles that act on every bank (``evaluation.backbones``; G.1: three Qwen3.5 sizes evaluate
    #: what gpt-5-nano consolidated); empty: the study's own backbone consolidates and acts
    eval_backbones: tuple[str, ...] = ()

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
                if FS_PATTERN.fullmatch(b) and (r.regime != "static_all" or r.initial is not None):
                    continue  # FS=N samples the whole pool once
                out.append(Build(b, r))
        return out

    def options(self, builder: str) -> dict[str, Any]:
        return {**self.builder_options.get(COMMON_OPTIONS, {}), **self.builder_options.get(builder, {})}


def _valid_builder(name: str) -> bool:
    return name in BUILDER_NAMES or FS_PATTERN.fullmatch(name) is not None


def _eval_backbones(value: Any, check: Checker) -> tuple[str, ...]:
    """``evaluation.backbones``: distinct backbone profiles (names or files), each loadable now."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise check.fail(f"'evaluation.backbones' must be a non-empty list of backbone profile names, got {value!r}")
    if len(set(value)) != len(value):
        raise check.fail(f"'evaluation.backbones' names a backbone twice: {value!r}")
    from antipersist_lib.serving.profiles import load_profile

    for name in value:
        if name == "embedded":
            raise check.fail(
                "'evaluation.backbones' takes backbone profiles; the embedded default acts as the study's backbone"
            )
        try:
            load_profile("backbones", name)
        except ValueError as exc:
            raise check.fail(f"'evaluation.backbones': {exc}") from None
    return tuple(value)


def _pool_spec(data: dict[str, Any], check: Checker) -> PoolSpec:
    spec = check.read(data.get("pool"), "pool", POOL)
    kinds = [k for k in ("expert", "runs", "file") if k in spec.given]
    if len(kinds) != 1:
        raise check.fail(f"'pool' needs exactly one of 'pool.expert', 'pool.runs', 'pool.file'; got {kinds or 'none'}")
    if kinds == ["runs"]:
        return PoolSpec("runs", runs=tuple(spec["runs"]), successes_only=spec["successes_only"])
    if kinds == ["file"]:
        return PoolSpec("file", file=spec["file"])
    ex = check.read(spec["expert"], "pool.expert", EXPERT)
    if data.get("benchmark") not in EXPERT_BENCHMARKS:
        raise check.fail(
            f"'pool.expert' replays exist for {EXPERT_BENCHMARKS}, not benchmark {data.get('benchmark')!r}"
        )
    types = None if ex["types"] is None else tuple(ex["types"])
    return PoolSpec("expert", ex["per_type"], ex["seed"], types, ex["split"], ex["allow_fewer"])


def _regimes(data: dict[str, Any], builders: list[str], check: Checker) -> tuple[RegimeSpec, ...]:
    block = data.get("regimes")
    if "task_switch" in data and (block is None or block == {}):
        return ()  # a task-switch study builds its banks per task and needs no other regime
    if not isinstance(block, dict) or not block:
        raise check.fail(f"'regimes' is required: a mapping of names to {{{', '.join(sorted(REGIME.keys))}}}")
    out = [_regime(name, value, builders, check) for name, value in block.items()]
    names = [r.name for r in out]
    for r in out:
        if r.initial is None:
            continue
        key = f"regimes.{r.name}.initial"
        if r.initial not in names or r.initial == r.name:
            raise check.fail(f"'{key}' must name another regime of 'regimes' ({names}), got {r.initial!r}")
        base = next(x for x in out if x.name == r.initial)
        if base.initial is not None:
            raise check.fail(f"'{key}': regime {r.initial!r} continues from another regime itself (one level only)")
        if r.regime != "stream":
            raise check.fail(f"'{key}': only a stream continues from another regime's bank")
        for b in r.builders if r.builders is not None else builders:
            if not FS_PATTERN.fullmatch(b) and base.builders is not None and b not in base.builders:
                raise check.fail(f"'{key}': regime {r.initial!r} does not build {b!r}")
    for r in out:
        for b in r.builders or ():
            if FS_PATTERN.fullmatch(b) and (r.regime != "static_all" or r.initial is not None):
                raise check.fail(f"'regimes.{r.name}.builders': {b} (FS=N) is built under static_all only")
    return tuple(out)


def _regime(name: Any, value: Any, builders: list[str], check: Checker) -> RegimeSpec:
    """One entry of ``regimes``: its own keys, and those that depend on its regime."""
    key = f"regimes.{name}"
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise check.fail(f"regime name {name!r} must be letters, digits, '_', '-' or '.'")
    spec = check.read(value, key, REGIME)
    regime = check.choice(spec["regime"] if "regime" in spec.given else name, f"{key}.regime", REGIMES)
    stages = homogeneous = None
    if regime != "stream":
        for k in STREAM_KEYS:
            if k in spec.given:
                raise check.fail(f"'{key}.{k}' applies to the stream regime only, not {regime!r}")
    elif spec["batch_size"] is None:
        raise check.fail(f"'{key}.batch_size' must be {REGIME['batch_size'].describe()}; it is missing")
    elif "stages" not in spec.given:
        homogeneous = spec["homogeneous"]
    else:
        if "passes" in spec.given:
            raise check.fail(
                f"'{key}': 'passes' cycles the whole pool and 'stages' draws fresh batches per stage; give one"
            )
        rule = check.read(spec["stages"], f"{key}.stages", STAGES)
        stages = StageSpec(count=rule["count"], rule=rule["rule"], per_type_limit=rule["per_type_limit"])
        homogeneous = stages.rule == "single_type"  # the stage rule decides the batches' composition
        if "homogeneous" in spec.given and spec["homogeneous"] != homogeneous:
            raise check.fail(
                f"'{key}.homogeneous' contradicts 'stages.rule: {stages.rule}' (whose batches are "
                f"{'homogeneous' if homogeneous else 'heterogeneous'}); drop it"
            )
    backbone = spec["backbone"]
    if backbone is not None:
        _check_profile_file("backbones", backbone, f"{key}.backbone", check.where)
    only = None if spec["builders"] is None else tuple(spec["builders"])
    unknown = [b for b in only or () if b not in builders]
    if unknown:
        raise check.fail(f"'{key}.builders' names {unknown}, which 'builders' does not list ({builders})")
    if spec["initial_step"] is not None and spec["initial"] is None:
        raise check.fail(f"'{key}.initial_step' needs 'initial' (the regime whose snapshot it continues)")
    return RegimeSpec(
        name,
        regime,
        spec["batch_size"] if regime == "stream" else None,
        homogeneous,
        spec["capacity"],
        spec["initial"],
        only,
        _steps(spec["steps"], check, f"{key}.steps") if "steps" in spec.given else None,
        spec["passes"] if regime == "stream" else 1,
        stages,
        backbone,
        None if spec["types"] is None else tuple(spec["types"]),
        spec["initial_step"],
    )


def _task_switch(value: Any, builders: list[str], check: Checker) -> TaskSwitchSpec | None:
    if value is None:
        return None
    spec = check.read(value, "task_switch", TASK_SWITCH)
    check.value(
        spec["builder"],
        "task_switch.builder",
        Field("builder", CHOICE, choices=builders, what=f"one of the profile's builders {builders}"),
    )
    setups = spec["setups"]
    if not isinstance(setups, list) or not setups or any(x not in SWITCH_SETUPS for x in setups):
        raise check.fail(f"'task_switch.setups' must be a non-empty list from {list(SWITCH_SETUPS)}, got {setups!r}")
    sequence = spec["sequence"]
    return TaskSwitchSpec(
        builder=str(spec["builder"]),
        sequence=None if sequence is None else tuple(sequence),
        batch_size=spec["batch_size"],
        capacity=spec["capacity"],
        setups=tuple(dict.fromkeys(setups)),
        judge=spec["judge"],
        heldout_limit=spec["heldout_limit"],
        records_per_task=_records_per_task(spec["records_per_task"], sequence, check),
    )


def _records_per_task(value: Any, sequence: list[str] | None, check: Checker) -> int | dict[str, int] | None:
    """``task_switch.records_per_task``: null, an integer >= 1, or a mapping of the sequence's task types to one."""
    key = "task_switch.records_per_task"
    if value is None or not isinstance(value, dict):
        return check.integer(value, key, minimum=1, optional=True)
    unknown = [t for t in value if sequence is not None and t not in sequence]
    if unknown:
        raise check.fail(f"'{key}' names task type(s) {unknown} that 'task_switch.sequence' does not hold")
    return {str(t): check.integer(n, f"{key}.{t}", minimum=1) for t, n in value.items()}


def _surgery(value: Any, regimes: tuple[RegimeSpec, ...], builders: list[str], check: Checker) -> SurgerySpec | None:
    if value is None:
        return None
    spec = check.read(value, "surgery", SURGERY)
    names = [r.name for r in regimes]
    regime, builder, step, remove = spec["regime"], spec["builder"], spec["step"], spec["remove"]
    if regime not in names:
        raise check.fail(f"'surgery.regime' must name a regime of 'regimes' ({names}), got {regime!r}")
    built = next(r for r in regimes if r.name == regime).builders or tuple(builders)
    if builder not in built:
        raise check.fail(f"'surgery.builder' must be a builder of regime {regime!r} ({list(built)}), got {builder!r}")
    end_of_pass = None
    if isinstance(step, dict):  # {pass: k}: the end of the k-th pass (App. I.1's epoch-1 memory)
        end_of_pass = check.integer(
            check.mapping(step, "surgery.step", {"pass"}).get("pass"), "surgery.step.pass", minimum=1
        )
        if next(r for r in regimes if r.name == regime).passes < end_of_pass:
            raise check.fail(f"'surgery.step.pass' is {end_of_pass}, but regime {regime!r} makes fewer passes")
        step = "last"
    elif step != "last":
        step = check.integer(step, "surgery.step", minimum=0)
    return SurgerySpec(
        builder=str(builder),
        regime=str(regime),
        step=None if step == "last" else step,
        remove=None if remove == "all" else tuple(check.names(remove, "surgery.remove")),
        end_of_pass=end_of_pass,
    )


def _method_rows(data: dict[str, Any], builders: list[str], benchmark: str, check: Checker) -> tuple[MethodRow, ...]:
    from antipersist_lib.methods import METHODS, validate_method_params

    rows = []
    for name, value in check.mapping(data.get("methods"), "methods", None).items():
        key = f"methods.{name}"
        spec = check.read(value, key, METHOD_ROW)
        method = spec["method"] if "method" in spec.given else name
        if method not in METHODS or method in ("consolidated_memory", NO_MEMORY):
            allowed = [m for m in METHODS if m not in ("consolidated_memory", NO_MEMORY)]
            raise check.fail(f"'{key}.method' must be a kit method from {allowed}, got {method!r}")
        if name in builders or name == "no_mem" or name in TRAJECTORY_LOG_FIXED or _valid_builder(name):
            raise check.fail(f"'{key}': the row name {name!r} is taken by a builder or table column; rename it")
        if spec["seed_pool"] and method not in SEEDABLE_METHODS:
            raise check.fail(
                f"'{key}.seed_pool': {method!r} keeps no trajectory store; only {list(SEEDABLE_METHODS)} can"
            )
        params = spec["params"]
        if "seed_pool" in params:
            raise check.fail(f"'{key}.params.seed_pool': the study sets it; use '{key}.seed_pool: true'")
        row = MethodRow(
            name,
            method,
            params,
            *(spec[k] for k in ("seed_pool", "iterations", "train_per_iteration", "train_pool_limit")),
        )
        if not row.seed_pool and not row.train_per_iteration:
            raise check.fail(
                f"'{key}': the method would start and stay empty (the no-memory row already covers that); "
                "set seed_pool: true or train_per_iteration > 0"
            )
        if (
            method == "anti_persistence"
            and not row.train_per_iteration
            and params.get("heldout_selection", "exploit") == "exploit"
        ):
            raise check.fail(
                f"'{key}': without training episodes the outcome log stays empty, so every held-out decision "
                "(heldout_selection 'exploit', the default) is mode 'none', the raw records: the trajectory-memory "
                "row again, not Anti-Persistence; set train_per_iteration > 0 (iterations x train_per_iteration "
                "training episodes) or params.heldout_selection: as_training (held-out tasks cycle the modes)",
            )
        try:
            validate_method_params(method, params, benchmark)
        except (TypeError, ValueError) as exc:
            raise check.fail(f"'{key}.params': {exc}") from None
        rows.append(row)
    return tuple(rows)


def _steps(value: Any, check: Checker, key: str = "evaluation.steps") -> Any:
    if value in ("last", "all"):
        return value
    if isinstance(value, dict):
        spec = check.mapping(value, key, {"every", "every_pass"})
        if len(spec) != 1:
            raise check.fail(f"'{key}' takes one of 'every' (updates) or 'every_pass' (passes), got {sorted(spec)}")
        which = next(iter(spec))
        return {which: check.integer(spec.get(which), f"{key}.{which}", minimum=1)}
    if isinstance(value, list) and value:
        return sorted({check.integer(s, f"{key}[]", minimum=1) for s in value})
    raise check.fail(
        f"'{key}' must be 'last', 'all', a list of steps >= 1, {{every: k}} or {{every_pass: k}}, got {value!r}"
    )


def _seeds(value: Any, check: Checker) -> tuple[int, ...]:
    """``evaluation.seeds``: distinct integers, one per repeat (a single integer: one repeat)."""
    seeds = value if isinstance(value, list) else [value]
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds) or len(set(seeds)) != len(seeds):
        raise check.fail(f"'evaluation.seeds' must be a list of distinct integers (one per repeat), got {seeds!r}")
    return tuple(seeds)


def _heldout_set(value: Any, benchmark: str, check: Checker) -> str | None:
    """``evaluation.heldout_set``: null or a held-out set of the benchmark whose file is committed."""
    if value is None:
        return None
    try:
        heldout_set_path(benchmark, value)
    except ValueError as exc:
        raise check.fail(f"'evaluation.heldout_set': {exc}") from None
    return value


def _builders(data: dict[str, Any], check: Checker) -> list[str]:
    """``builders``: required, names from ``BUILDER_NAMES`` or fs<N>."""
    if "builders" not in data:
        raise check.fail(f"'builders' is required: a list from {list(BUILDER_NAMES) + ['fs<N>']}")
    builders = check.names(data["builders"], "builders")
    bad = [b for b in builders if not _valid_builder(b) or b == NO_MEMORY]
    if bad:
        raise check.fail(f"'builders': unknown builder(s) {bad}; expected names from {list(BUILDER_NAMES)} or fs<N>")
    return builders


def load_study_profile(path: str | Path, *, context_check: bool = True) -> StudyProfile:
    """Read and check a study profile; any unknown or malformed key is named in the error. With ``context_check``
    the largest prompts it can send are estimated and, under ``context.overflow: refuse``, a profile whose estimate
    passes its backbone's context is refused here (``context_estimate.check_profile_context``; a run given another
    endpoint checks again against that endpoint's context before any call)."""
    path = Path(path)
    check = Checker(path, lambda message: fail(path, message))
    data = read_profile(path, set(PROFILE.keys))
    top = check.read(data, None, PROFILE)
    benchmark = top["benchmark"]
    backbone = check_backbone(data, path)
    embedding = check_embedding(data, path, "qwen3-embedding-8b")
    pool = _pool_spec(data, check)
    builders = _builders(data, check)
    regimes = _regimes(data, builders, check)
    if any(FS_PATTERN.fullmatch(b) for b in builders) and not any(
        r.regime == "static_all" and r.initial is None for r in regimes
    ):
        raise check.fail("'builders' lists fs<N> (FS=N), which is built under static_all: add a static_all regime")
    options = check.mapping(data.get("builder_options"), "builder_options", set(builders) | {COMMON_OPTIONS})
    for name, opts in options.items():
        check.mapping(opts, f"builder_options.{name}", None)
    evaluation = check.read(data.get("evaluation"), "evaluation", EVALUATION)
    profile = StudyProfile(
        path=str(path),
        name=str(data.get("name", path.stem)),
        benchmark=benchmark,
        backbone=backbone,
        pool=pool,
        builders=tuple(builders),
        regimes=regimes,
        seeds=_seeds(evaluation["seeds"], check),
        heldout_limit=evaluation["heldout_limit"],
        task_types=None if evaluation["task_types"] is None else tuple(evaluation["task_types"]),
        heldout_set=_heldout_set(evaluation["heldout_set"], benchmark, check),
        max_steps=evaluation["max_steps"],
        agent=evaluation["agent"],
        heldout_concurrency=evaluation["heldout_concurrency"],
        steps=_steps(evaluation["steps"], check),
        no_memory=evaluation["no_memory"],
        build_seed=top["build_seed"],
        builder_options={k: dict(v or {}) for k, v in options.items()},
        benchmark_options=top["benchmark_options"],
        backbone_options=top["backbone_options"],
        embedding=embedding,
        response_cache=top["response_cache"],
        methods=_method_rows(data, builders, benchmark, check),
        context=ContextSpec(**check.read(data.get("context"), "context", CONTEXT)),
        task_switch=_task_switch(data.get("task_switch"), builders, check),
        surgery=_surgery(data.get("surgery"), regimes, builders, check),
        raw=data,
        eval_backbones=_eval_backbones(evaluation["backbones"], check),
    )
    for b in builders:  # the builders' own checks of their options, with the key named
        try:
            make_builder(b, llm=_Unused(), embedder=_Unused(), seed=0, **profile.options(b))
        except (TypeError, ValueError) as exc:
            raise check.fail(f"'builder_options' for {b!r}: {exc}") from None
    try:  # the protocol's own checks (agent fields, limits), with the profile named
        RunSpec(
            method=NO_MEMORY,
            benchmark=benchmark,
            backbone="check",
            max_steps=profile.max_steps,
            heldout_limit=profile.heldout_limit,
            agent=profile.agent,
            heldout_concurrency=profile.heldout_concurrency,
            benchmark_options=profile.benchmark_options,
            heldout_set=profile.heldout_set,
        )
    except ValueError as exc:
        raise check.fail(f"'evaluation': {exc}") from None
    held_types = [("evaluation.task_types", profile.task_types)]
    if profile.task_switch is not None:
        held_types.append(("task_switch.sequence", profile.task_switch.sequence))
    for key, types in held_types:  # every evaluated type must have held-out tasks, before any call
        if types is not None:
            try:
                of_types(load_partition(benchmark, heldout_set=profile.heldout_set).heldout, list(types))
            except ValueError as exc:
                raise check.fail(f"'{key}': {exc}") from None
    if context_check:
        check_profile_context(profile)
    return profile


class _Unused:
    """Stands in for a model while a profile's builder options are checked (never called)."""

    def chat(self, *a: Any, **k: Any) -> Any:  # pragma: no cover - never called
        raise AssertionError("profile check must not call a model")


#: the trajectory-log columns of Tables 2-3 that are not FS=N
TRAJECTORY_LOG_FIXED = ("all", "incr_keep", "one_pass_keep")


def table_column(builder: str, regime: str) -> str | None:
    """The Tables 2-3 column a (builder, regime) fills: ``keep`` streamed is Incr. Keep, under static_all One-Pass Keep."""
    if builder == NO_MEMORY:
        return "no_mem"
    if builder == "keep":
        return {"stream": "incr_keep", "static_all": "one_pass_keep"}.get(regime)
    return builder
