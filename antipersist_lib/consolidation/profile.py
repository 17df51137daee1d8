"""The consolidation study's profile (``params/consolidation/*.yaml``): what it may name, checked before anything runs.

A profile names the benchmark and backbone, the fixed pool (expert replays, run directories or a pool
file), the builders (consolidators and trajectory logs) and the regimes they are built under, the evaluation
(seeds = repeats, held-out games, step budget, which update steps to evaluate) and the kit's own methods to
evaluate beside them. ``load_study_profile`` reads it into a ``StudyProfile``; every unknown or malformed key
is named in a ``StudyProfileError`` together with the file, and the builders' and protocol's own checks run
on the profile's options, so a typo fails in seconds rather than hours into a run.

A stream regime may also say ``passes`` (cycle the pool; App. F.3 / J.1.3, H.1.2), ``stages`` (``count``,
``rule``: ``one_per_type`` | ``single_type``, ``per_type_limit``; App. G.1 / G.2; the rule fixes the batches'
composition, so ``homogeneous`` may not contradict it), and any regime a ``backbone`` (a backbone profile that
builds its banks; §4.1 / Fig. 4). The top-level ``context`` block (``overflow``: ``refuse`` | ``truncate_oldest``,
``reserve_tokens``) sets what a prompt past the backbone's context length does (``consolidation.context``); under
``refuse`` a profile whose largest estimated prompt or known memory passes it is refused when it loads
(``check_profile_context``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antipersist_lib.consolidation import context_estimate as ctx
from antipersist_lib.consolidation.context import CONTEXT_POLICIES, REFUSE, ContextSpec
from antipersist_lib.consolidation.pool import EXPERT_BENCHMARKS, STAGE_RULES
from antipersist_lib.consolidation.regimes import REGIMES, StageSpec, make_builder
from antipersist_lib.consolidation.task_switch import SETUPS as SWITCH_SETUPS
from antipersist_lib.envs import BENCHMARKS
from antipersist_lib.envs.partitions import heldout_set_path, load_partition
from antipersist_lib.runner.protocol import AGENT_KEYS, RunSpec, of_types
from antipersist_lib.studies import (
    BACKBONE_OPTION_KEYS,
    EMBEDDED,
    _check_profile_file,
    check_backbone,
    check_bool,
    check_embedding,
    check_int,
    check_mapping,
    check_names,
    fail,
    read_profile,
)

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
    "context",
    "task_switch",
    "surgery",
}
#: keys of the ``surgery`` block (App. I.1, Tables 12-13; ``consolidation.surgery``)
SURGERY_KEYS = {"builder", "regime", "step", "remove"}
#: keys of the ``task_switch`` block (§6.2, Figs. 10 and 18; ``consolidation.task_switch``)
TASK_SWITCH_KEYS = {
    "sequence",
    "builder",
    "batch_size",
    "capacity",
    "setups",
    "judge",
    "heldout_limit",
    "records_per_task",
}
POOL_KEYS = {"expert", "runs", "file", "successes_only"}
EXPERT_KEYS = {"per_type", "seed", "types", "split", "allow_fewer"}
REGIME_KEYS = {
    "regime",
    "batch_size",
    "homogeneous",
    "capacity",
    "initial",
    "builders",
    "steps",
    "passes",
    "stages",
    "backbone",
    "types",
    "initial_step",
}
STAGE_KEYS = {"count", "rule", "per_type_limit"}
CONTEXT_KEYS = {"overflow", "reserve_tokens"}
EVALUATION_KEYS = {
    "seeds",
    "backbones",
    "heldout_limit",
    "max_steps",
    "agent",
    "heldout_concurrency",
    "steps",
    "no_memory",
    "task_types",
    "heldout_set",
}
METHOD_ROW_KEYS = {"method", "params", "seed_pool", "iterations", "train_per_iteration", "train_pool_limit"}
#: the kit methods that keep a trajectory store, and so can start from the study's pool (``seed_pool``)
SEEDABLE_METHODS = ("anti_persistence", "trajectory_memory")
#: the ``regime`` of a method row
METHOD_REGIME = "method"
#: builder_options key applied to every builder (before its own options)
COMMON_OPTIONS = "common"
BUILDER_NAMES = ("ace", "ace_gt", "awm", "dc", "clin", "all", "keep")
FS_PATTERN = re.compile(r"fs([1-9]\d*)")


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


def _eval_backbones(value: Any, path: Any) -> tuple[str, ...]:
    """``evaluation.backbones``: distinct backbone profiles (names or files), each loadable now."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise fail(path, f"'evaluation.backbones' must be a non-empty list of backbone profile names, got {value!r}")
    if len(set(value)) != len(value):
        raise fail(path, f"'evaluation.backbones' names a backbone twice: {value!r}")
    from antipersist_lib.serving.profiles import load_profile

    for name in value:
        if name == "embedded":
            raise fail(
                path,
                "'evaluation.backbones' takes backbone profiles; the embedded default acts as the study's backbone",
            )
        try:
            load_profile("backbones", name)
        except ValueError as exc:
            raise fail(path, f"'evaluation.backbones': {exc}") from None
    return tuple(value)


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
    if "task_switch" in data and (block is None or block == {}):
        return ()  # a task-switch study builds its banks per task and needs no other regime
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
        passes, stages = 1, None
        if regime == "stream":
            batch = check_int(spec.get("batch_size"), f"{key}.batch_size", path, minimum=1)
            passes = int(check_int(spec.get("passes", 1), f"{key}.passes", path, minimum=1) or 1)
            stages = _stages(spec.get("stages"), f"{key}.stages", path) if "stages" in spec else None
            if stages is not None and "passes" in spec:
                raise fail(
                    path,
                    f"'{key}': 'passes' cycles the whole pool and 'stages' draws fresh batches per stage; give one",
                )
            if stages is None:
                homogeneous = check_bool(spec.get("homogeneous", True), f"{key}.homogeneous", path)
            else:  # the stage rule decides the batches' composition
                homogeneous = stages.rule == "single_type"
                if "homogeneous" in spec and check_bool(spec["homogeneous"], f"{key}.homogeneous", path) != homogeneous:
                    raise fail(
                        path,
                        f"'{key}.homogeneous' contradicts 'stages.rule: {stages.rule}' (whose batches are "
                        f"{'homogeneous' if homogeneous else 'heterogeneous'}); drop it",
                    )
        else:
            for k in ("batch_size", "homogeneous", "passes", "stages"):
                if k in spec:
                    raise fail(path, f"'{key}.{k}' applies to the stream regime only, not {regime!r}")
        backbone = None
        if "backbone" in spec:
            backbone = spec["backbone"]
            if not isinstance(backbone, str) or not backbone or backbone == EMBEDDED:
                raise fail(
                    path,
                    f"'{key}.backbone' must be a backbone profile name in params/backbones/ or a profile file "
                    f"(.yaml), not {backbone!r} (the embedded default runs one model per study)",
                )
            _check_profile_file("backbones", backbone, f"{key}.backbone", path)
        capacity = check_int(spec.get("capacity"), f"{key}.capacity", path, minimum=1, optional=True)
        only = None
        if "builders" in spec:
            only = tuple(check_names(spec["builders"], f"{key}.builders", path))
            unknown = [b for b in only if b not in builders]
            if unknown:
                raise fail(path, f"'{key}.builders' names {unknown}, which 'builders' does not list ({builders})")
        steps = _steps(spec["steps"], path, f"{key}.steps") if "steps" in spec else None
        types = tuple(check_names(spec["types"], f"{key}.types", path)) if "types" in spec else None
        initial_step = check_int(spec.get("initial_step"), f"{key}.initial_step", path, minimum=0, optional=True)
        if initial_step is not None and spec.get("initial") is None:
            raise fail(path, f"'{key}.initial_step' needs 'initial' (the regime whose snapshot it continues)")
        out.append(
            RegimeSpec(
                name,
                regime,
                batch,
                homogeneous,
                capacity,
                spec.get("initial"),
                only,
                steps,
                passes,
                stages,
                backbone,
                types,
                initial_step,
            )
        )
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
            if not FS_PATTERN.fullmatch(b) and base.builders is not None and b not in base.builders:
                raise fail(path, f"'{key}': regime {r.initial!r} does not build {b!r}")
    for r in out:
        for b in r.builders or ():
            if FS_PATTERN.fullmatch(b) and (r.regime != "static_all" or r.initial is not None):
                raise fail(path, f"'regimes.{r.name}.builders': {b} (FS=N) is built under static_all only")
    return tuple(out)


def _stages(value: Any, key: str, path: Any) -> StageSpec:
    spec = check_mapping(value, key, STAGE_KEYS, path)
    if spec.get("rule") not in STAGE_RULES:
        raise fail(path, f"'{key}.rule' must be one of {STAGE_RULES}, got {spec.get('rule')!r}")
    return StageSpec(
        count=int(check_int(spec.get("count"), f"{key}.count", path, minimum=1) or 1),
        rule=str(spec["rule"]),
        per_type_limit=check_int(spec.get("per_type_limit"), f"{key}.per_type_limit", path, minimum=1, optional=True),
    )


def _task_switch(value: Any, builders: list[str], path: Any) -> TaskSwitchSpec | None:
    if value is None:
        return None
    spec = check_mapping(value, "task_switch", TASK_SWITCH_KEYS, path)
    builder = spec.get("builder")
    if builder not in builders:
        raise fail(path, f"'task_switch.builder' must be one of the profile's builders {builders}, got {builder!r}")
    sequence = spec.get("sequence")
    if sequence is not None:
        sequence = check_names(sequence, "task_switch.sequence", path)
    setups = spec.get("setups", list(SWITCH_SETUPS))
    if not isinstance(setups, list) or not setups or any(x not in SWITCH_SETUPS for x in setups):
        raise fail(path, f"'task_switch.setups' must be a non-empty list from {list(SWITCH_SETUPS)}, got {setups!r}")
    return TaskSwitchSpec(
        builder=str(builder),
        sequence=None if sequence is None else tuple(sequence),
        batch_size=int(check_int(spec.get("batch_size", 4), "task_switch.batch_size", path, minimum=1) or 4),
        capacity=check_int(spec.get("capacity"), "task_switch.capacity", path, minimum=1, optional=True),
        setups=tuple(dict.fromkeys(setups)),
        judge=check_bool(spec.get("judge", True), "task_switch.judge", path),
        heldout_limit=check_int(spec.get("heldout_limit"), "task_switch.heldout_limit", path, minimum=1, optional=True),
        records_per_task=_records_per_task(spec.get("records_per_task"), sequence, path),
    )


def _records_per_task(value: Any, sequence: list[str] | None, path: Any) -> int | dict[str, int] | None:
    """``task_switch.records_per_task``: null, an integer >= 1, or a mapping of the sequence's task types to one."""
    key = "task_switch.records_per_task"
    if value is None or not isinstance(value, dict):
        return check_int(value, key, path, minimum=1, optional=True)
    unknown = [t for t in value if sequence is not None and t not in sequence]
    if unknown:
        raise fail(path, f"'{key}' names task type(s) {unknown} that 'task_switch.sequence' does not hold")
    return {str(t): int(check_int(n, f"{key}.{t}", path, minimum=1) or 1) for t, n in value.items()}


def _surgery(value: Any, regimes: tuple[RegimeSpec, ...], builders: list[str], path: Any) -> SurgerySpec | None:
    if value is None:
        return None
    spec = check_mapping(value, "surgery", SURGERY_KEYS, path)
    names = [r.name for r in regimes]
    regime = spec.get("regime")
    if regime not in names:
        raise fail(path, f"'surgery.regime' must name a regime of 'regimes' ({names}), got {regime!r}")
    builder = spec.get("builder")
    built = next(r for r in regimes if r.name == regime).builders or tuple(builders)
    if builder not in built:
        raise fail(path, f"'surgery.builder' must be a builder of regime {regime!r} ({list(built)}), got {builder!r}")
    step = spec.get("step", "last")
    end_of_pass = None
    if isinstance(step, dict):  # {pass: k}: the end of the k-th pass (App. I.1's epoch-1 memory)
        inner = check_mapping(step, "surgery.step", {"pass"}, path)
        end_of_pass = check_int(inner.get("pass"), "surgery.step.pass", path, minimum=1)
        if next(r for r in regimes if r.name == regime).passes < int(end_of_pass or 1):
            raise fail(path, f"'surgery.step.pass' is {end_of_pass}, but regime {regime!r} makes fewer passes")
        step = "last"
    elif step != "last":
        step = check_int(step, "surgery.step", path, minimum=0)
    remove = spec.get("remove", "all")
    if remove != "all":
        remove = tuple(check_names(remove, "surgery.remove", path))
    return SurgerySpec(
        builder=str(builder),
        regime=str(regime),
        step=None if step == "last" else int(step),
        remove=None if remove == "all" else remove,
        end_of_pass=end_of_pass,
    )


def _context(value: Any, path: Any) -> ContextSpec:
    spec = check_mapping(value, "context", CONTEXT_KEYS, path)
    overflow = spec.get("overflow", "refuse")
    if overflow not in CONTEXT_POLICIES:
        raise fail(path, f"'context.overflow' must be one of {CONTEXT_POLICIES}, got {overflow!r}")
    reserve = check_int(spec.get("reserve_tokens"), "context.reserve_tokens", path, minimum=0, optional=True)
    return ContextSpec(overflow=overflow, reserve_tokens=reserve)


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
        if (
            method == "anti_persistence"
            and not row.train_per_iteration
            and params.get("heldout_selection", "exploit") == "exploit"
        ):
            raise fail(
                path,
                f"'{key}': without training episodes the outcome log stays empty, so every held-out decision "
                "(heldout_selection 'exploit', the default) is mode 'none', the raw records: the trajectory-memory "
                "row again, not Anti-Persistence; set train_per_iteration > 0 (iterations x train_per_iteration "
                "training episodes) or params.heldout_selection: as_training (held-out tasks cycle the modes)",
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
        spec = check_mapping(value, key, {"every", "every_pass"}, path)
        if len(spec) != 1:
            raise fail(path, f"'{key}' takes one of 'every' (updates) or 'every_pass' (passes), got {sorted(spec)}")
        which = next(iter(spec))
        return {which: check_int(spec.get(which), f"{key}.{which}", path, minimum=1)}
    if isinstance(value, list) and value:
        return sorted({int(check_int(s, f"{key}[]", path, minimum=1) or 1) for s in value})
    raise fail(
        path,
        f"'{key}' must be 'last', 'all', a list of steps >= 1, {{every: k}} or {{every_pass: k}}, got {value!r}",
    )


def load_study_profile(path: str | Path, *, context_check: bool = True) -> StudyProfile:
    """Read and check a study profile; any unknown or malformed key is named in the error. With ``context_check``
    the largest prompts it can send are estimated and, under ``context.overflow: refuse``, a profile whose estimate
    passes its backbone's context is refused here (``check_profile_context``; a run given another endpoint checks
    again against that endpoint's context before any call)."""
    path = Path(path)
    data = read_profile(path, PROFILE_KEYS)
    benchmark = data.get("benchmark")
    if benchmark not in BENCHMARKS:
        raise fail(path, f"'benchmark' must be one of {BENCHMARKS}, got {benchmark!r}")
    backbone = check_backbone(data, path)
    embedding = check_embedding(data, path, "qwen3-embedding-8b")
    pool = _pool_spec(data, path)
    if "builders" not in data:
        raise fail(path, f"'builders' is required: a list from {list(BUILDER_NAMES) + ['fs<N>']}")
    builders = check_names(data["builders"], "builders", path)
    bad = [b for b in builders if not _valid_builder(b) or b == NO_MEMORY]
    if bad:
        raise fail(path, f"'builders': unknown builder(s) {bad}; expected names from {list(BUILDER_NAMES)} or fs<N>")
    regimes = _regimes(data, builders, path)
    if any(FS_PATTERN.fullmatch(b) for b in builders) and not any(
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
    eval_backbones = _eval_backbones(evaluation.get("backbones"), path)
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
        task_types=(
            tuple(check_names(evaluation["task_types"], "evaluation.task_types", path))
            if "task_types" in evaluation
            else None
        ),
        heldout_set=_heldout_set(evaluation.get("heldout_set"), benchmark, path),
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
        context=_context(data.get("context"), path),
        task_switch=_task_switch(data.get("task_switch"), builders, path),
        surgery=_surgery(data.get("surgery"), regimes, builders, path),
        raw=data,
        eval_backbones=eval_backbones,
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
            heldout_set=profile.heldout_set,
        )
    except ValueError as exc:
        raise fail(path, f"'evaluation': {exc}") from None
    held_types = [("evaluation.task_types", profile.task_types)]
    if profile.task_switch is not None:
        held_types.append(("task_switch.sequence", profile.task_switch.sequence))
    for key, types in held_types:  # every evaluated type must have held-out tasks, before any call
        if types is not None:
            try:
                of_types(load_partition(benchmark, heldout_set=profile.heldout_set).heldout, list(types))
            except ValueError as exc:
                raise fail(path, f"'{key}': {exc}") from None
    if context_check:
        check_profile_context(profile)
    return profile


#: pool size when the pool is read from runs or a file that do not exist yet (the kit's assumption)
ASSUMED_POOL = 64


def expert_counts(profile: StudyProfile) -> dict[str, int]:
    """Records per task type of an expert pool (``pool.expert``): per_type each, an upper bound under
    ``allow_fewer`` (ScienceWorld: at most its train variations, stored in its partition's ``drawn_with.pools``; a replay
    that fails may still leave fewer); empty for a pool of runs or a file."""
    pool = profile.pool
    if pool.kind != "expert" or not pool.per_type:
        return {}
    types = pool.types or tuple(
        dict.fromkeys(t.task_type for t in getattr(load_partition(profile.benchmark), pool.split))
    )
    if pool.allow_fewer and profile.benchmark == "scienceworld":  # a task gives what its train variations hold
        engine_pools = load_partition("scienceworld").drawn_with.get("pools", {})  # the engine's, stored
        return {t: min(pool.per_type, len(engine_pools[t][0])) if t in engine_pools else pool.per_type for t in types}
    return dict.fromkeys(types, pool.per_type)


def pool_size(profile: StudyProfile, out: Path | None = None) -> tuple[int, str]:
    """How many records the study's pool holds, and where the count comes from: expert replays (per type x task
    types, or what the split holds with ``allow_fewer``), the pool already written to ``out``, an existing
    ``pool.file``, else ``ASSUMED_POOL``."""
    pool = profile.pool
    counts = expert_counts(profile)
    if counts:
        fewer = " (at most: allow_fewer)" if pool.allow_fewer else ""
        return sum(counts.values()), f"{pool.per_type} expert replays x {len(counts)} task types{fewer}"
    for saved, what in (
        (out / "pool.jsonl" if out is not None else None, "the pool already written to"),
        (
            Path(pool.file) if pool.file else None,
            "the pool file",
        ),
    ):
        if saved is not None and saved.is_file():
            with saved.open(encoding="utf-8") as fh:
                return sum(1 for line in fh if line.strip()), f"{what} {saved}"
    return (
        ASSUMED_POOL,
        f"assumed {ASSUMED_POOL} trajectories (the pool is read from runs or a file when the study starts)",
    )


def update_count(build: Build, pool: int, n_types: int) -> int:
    """How many updates a build makes: Static-All one, Static-Group one per task type, a stream its stages or
    its batches over the pool times its passes."""
    r = build.regime
    if r.regime == "static_all":
        return 1
    if r.regime == "static_group":
        return max(n_types, 1)
    if r.stages is not None:
        return r.stages.count
    return math.ceil(pool / max(r.batch_size or 1, 1)) * r.passes


def _regime_pool(profile: StudyProfile, regime: RegimeSpec, pool: int) -> int:
    """Records a regime builds from: the pool, or (``types``) those of its task types where the count is known."""
    counts = expert_counts(profile)
    if regime.types is not None and counts:
        return min(pool, sum(counts.get(t, 0) for t in regime.types))
    return pool


def largest_update(profile: StudyProfile, build: Build, pool: int) -> int:
    """Records the largest update of a build consolidates at once: Static-All the regime's whole pool,
    Static-Group its largest task type (expert replays: per_type; otherwise bounded by the whole pool), a stream
    its batch size."""
    r = build.regime
    records = _regime_pool(profile, r, pool)
    if r.regime == "static_all":
        return records
    if r.regime == "static_group":
        counts = expert_counts(profile)
        return min(records, max(counts.values())) if counts else records
    return min(records, r.batch_size or 1)


def memory_logs(profile: StudyProfile, build: Build, pool: int) -> int | None:
    """The most trajectory logs an episodic baseline's evaluated memory holds, known before the run: FS=N its N;
    All and Keep every record the regime adds (a stream: its stages' batches or the pool times its passes), plus
    what the bank it continues from holds, down to the regime's capacity when the builder is capped. None for an
    LLM-written memory (ACE playbook, AWM, DC, CLIN), which has no bound before the run (``fit_bank`` checks it)."""
    fs = FS_PATTERN.fullmatch(build.builder)
    if fs is not None:
        return int(fs.group(1))
    if build.builder not in ("all", "keep"):
        return None
    r = build.regime
    n = _regime_pool(profile, r, pool)
    if r.regime == "stream":
        n = r.stages.count * (r.batch_size or 1) if r.stages is not None else n * r.passes
    if r.initial is not None:
        n += memory_logs(profile, Build(build.builder, profile.regime(r.initial)), pool) or 0
    capped = build.builder == "all" or profile.options(build.builder).get("capped", True)
    return min(n, r.capacity) if capped and r.capacity is not None else n


def profile_prompt_sizes(profile: StudyProfile, endpoint: Any = None) -> list[ctx.PromptSize]:
    """Every build's largest consolidation prompt (``context.consolidation_prompt``: its largest update's records
    at summary_chars, the builder's own prompt, the reply cap) against the backbone that builds it, and every
    episodic baseline's evaluated memory (``memory_logs`` x log_chars, plus the reserve) against each evaluation
    backbone; the task-switch builder's batches as build "<builder>/task_switch". ``endpoint`` (an ``Endpoint``: the
    one a run really uses) replaces the study's own backbone; backbones named by a regime or ``evaluation.backbones``
    are read from their profiles. A backbone stating no context length gives sizes with ``context_length`` None."""
    named: dict[str | None, tuple[int | None, str]] = {}

    def context_of(backbone: str | None) -> tuple[int | None, str]:
        if backbone not in named:
            if backbone is None and endpoint is not None:
                named[backbone] = (endpoint.context_length, str(endpoint.model))
            else:
                from antipersist_lib.serving.profiles import named_context_length

                name = profile.backbone if backbone is None else backbone
                try:
                    named[backbone] = named_context_length(name, profile.backbone_options if backbone is None else None)
                except ValueError as exc:
                    raise fail(profile.path, f"backbone {name!r}: {exc}") from None
        return named[backbone]

    pool, _ = pool_size(profile)
    sizes = []
    for build in profile.builds():
        options = profile.options(build.builder)
        records = largest_update(profile, build, pool)
        prompt = ctx.consolidation_prompt(build.builder, options, records)
        if prompt is not None:
            length, model = context_of(build.regime.backbone)
            sizes.append(ctx.PromptSize(build.key, "consolidation", model, records, *prompt, length))
        logs = memory_logs(profile, build, pool)
        if logs is not None:
            chars = ctx.log_memory(build.builder, options, logs)
            for backbone in profile.eval_backbones or (None,):
                length, model = context_of(backbone)
                sizes.append(ctx.memory_sizes(build.key, model, logs, chars, length, profile.context))
    switch = profile.task_switch
    if switch is not None:
        prompt = ctx.consolidation_prompt(switch.builder, profile.options(switch.builder), switch.batch_size)
        if prompt is not None:
            length, model = context_of(None)
            key = f"{switch.builder}/task_switch"
            sizes.append(ctx.PromptSize(key, "consolidation", model, switch.batch_size, *prompt, length))
    return sizes


def check_profile_context(profile: StudyProfile, endpoint: Any = None) -> list[ctx.PromptSize]:
    """``profile_prompt_sizes``; under ``context.overflow: refuse`` a size past its backbone's context is refused
    (``StudyProfileError`` naming the build, the sizes and the fixes). Under ``truncate_oldest`` the sizes are
    returned (the study manifest records them) and the run cuts what does not fit."""
    sizes = profile_prompt_sizes(profile, endpoint)
    if profile.context.overflow == REFUSE:
        message = ctx.refusal(sizes)
        if message is not None:
            raise fail(profile.path, message)
    return sizes


def _heldout_set(value: Any, benchmark: str, path: Any) -> str | None:
    """``evaluation.heldout_set``: null or a held-out set of the benchmark whose file is committed."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise fail(path, f"'evaluation.heldout_set' must be a held-out set's name or null, got {value!r}")
    try:
        heldout_set_path(benchmark, value)
    except ValueError as exc:
        raise fail(path, f"'evaluation.heldout_set': {exc}") from None
    return value


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
