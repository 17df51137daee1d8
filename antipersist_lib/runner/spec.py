"""What defines one run: ``RunSpec`` (one cell of Table 1, or one ablation point), the manifest fields that
make up its identity, and the task lists it draws from its partition.

A run's training order (``training_schedule``) depends only on the seed and the iteration, so every method
sees the same tasks; ``of_types`` and the limits (``records.limited_tasks``) pick its training pool and
held-out tasks. ``work_left`` and ``run_episode_counts`` answer from those lists, starting nothing.
``runner.protocol`` runs a ``RunSpec``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.core.agent import AgentConfig
from antipersist_lib.envs import BENCHMARKS
from antipersist_lib.envs.expert import EXPERT_BENCHMARKS
from antipersist_lib.envs.partitions import check_heldout_set, load_partition
from antipersist_lib.methods import METHODS, method_class
from antipersist_lib.profile_fields import ANY, CHOICE, INT, MAPPING, Checker, Field, Fields
from antipersist_lib.records import SUBSET_ORDERS, Task, limited_tasks
from antipersist_lib.rundir import RunDirectory

#: AgentConfig fields a run's ``agent:`` block may set (max_steps is the run's own field)
AGENT_KEYS = (
    "max_tokens",
    "temperature",
    "top_p",
    "history_turns",
    "icl_examples",
    "icl_max_chars",
    "show_valid_actions",
    "stop_at_observation",
    "resample_repeats",
    "repeat_temperature",
    "repeat_rule",
    "repeat_feedback",
    "resample_unlisted",
)
#: small-model aids (core/agent.py) and their off values: a manifest records them only when on, so
#: runs made before they existed resume unchanged
AID_DEFAULTS = {
    "show_valid_actions": 0,
    "stop_at_observation": False,
    "resample_repeats": 0,
    "repeat_temperature": 0.7,
    "repeat_rule": "no_op",
    "repeat_feedback": False,
    "resample_unlisted": False,
}
#: the in-context demonstration fields (core/demonstrations.py); a manifest records them only
#: when demonstrations are on, so runs made before they existed resume unchanged
ICL_KEYS = ("icl_examples", "icl_max_chars")

#: manifest fields that must match for a run to be resumed
IDENTITY_KEYS = (
    "method",
    "method_params",
    "benchmark",
    "benchmark_options",
    "backbone",
    "embedding",
    "seed",
    "train_per_iteration",
    "max_steps",
    "agent",
    "partition_hash",
    "train_pool_limit",
    "heldout_limit",
    "subset",
    "task_types",
    "judge",
    "request_shape",
    "heldout_set",
)


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one run (one cell of Table 1, or one ablation point)."""

    method: str
    benchmark: str
    backbone: str  # profile name (params/backbones), profile file path, or a label when ``endpoint`` is given
    seed: int = 42
    iterations: int = 10
    train_per_iteration: int = 50
    max_steps: int = 50
    heldout_concurrency: int = 8
    heldout_limit: int | None = None  # evaluate only N held-out tasks (smoke runs)
    train_pool_limit: int | None = None  # draw training tasks from N of the pool only (smoke runs)
    #: how the two limits pick their N tasks: "balanced" (task types in turn) or "first" (records.limited_tasks)
    subset: str = "balanced"
    #: only tasks of these types, in training and held-out alike (before the limits): a probe on chosen task
    #: types, e.g. the faulty-memories study's Fig. 8(c) (one ALFWorld type) or Fig. 10 (one ScienceWorld task)
    task_types: tuple[str, ...] | None = None
    #: evaluate on this named held-out set instead of the partition's held-out split (``envs.partitions.
    #: HELDOUT_SETS``; e.g. ALFWorld's valid_seen_balanced_48, the faulty-memories paper's App. F.1 split);
    #: None: the partition's own (ALFWorld: valid_unseen, the main paper's Table 4)
    heldout_set: str | None = None
    method_params: dict[str, Any] = field(default_factory=dict)
    benchmark_options: dict[str, Any] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)  # AgentConfig fields except max_steps
    embedding: str = "qwen3-embedding-8b"  # profile name (params/embeddings), file path, "embedded", or a label
    out_root: str = "outputs/runs"
    cache_dir: str | None = "outputs/cache"  # None disables the response cache
    name: str | None = None  # run folder name (default: method + a hash of non-default params)
    progress: bool = True
    #: check the chat (and, for methods that embed, the embedding) endpoint with one small request before
    #: the first task (serving/preflight.py); false only when the caller has checked them or counts requests
    preflight: bool = True
    #: the LLM judge's model (F.2's judge is a separate model): a backbone profile name or file, or a label
    #: when the runner is given ``judge_endpoint``; None: the backbone judges. Only for a method that judges
    #: (``Method.uses_judge``, e.g. abstraction_memory with judge: true)
    judge: str | None = None
    #: the seeds of the profile (main job or grid) this run is one of; recorded in the manifest so that the
    #: tables can name a cell that averages fewer seeds even when every cell is short. Not part of the
    #: run's identity (adding a seed to a profile does not change its runs); None for a run made alone
    seeds_planned: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.preflight, bool):
            raise ValueError(f"preflight must be true or false, got {self.preflight!r}")
        if self.method not in METHODS:
            raise ValueError(f"method: unknown {self.method!r}; expected one of {tuple(METHODS)}")
        if self.benchmark not in BENCHMARKS:
            raise ValueError(f"benchmark: unknown {self.benchmark!r}; expected one of {BENCHMARKS}")
        check = Checker("run", ValueError, label="{key}")  # the same checks as a profile's protocol settings
        check.value(self.seed, "seed", SEED)
        for f in PROTOCOL.fields:
            check.value(getattr(self, f.key), f.key, f)
        check_heldout_set(self.benchmark, self.heldout_set)
        if self.seeds_planned is not None:
            planned = self.seeds_planned
            if isinstance(planned, (str, bytes)) or not isinstance(planned, (list, tuple)):
                raise ValueError(f"seeds_planned must be null or a list of seeds, got {planned!r}")
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in planned) or self.seed not in planned:
                raise ValueError(
                    f"seeds_planned must list integer seeds including this run's seed {self.seed}, got {list(planned)!r}"
                )
            object.__setattr__(self, "seeds_planned", tuple(sorted(set(planned))))
        if self.task_types is not None:
            types = self.task_types
            if isinstance(types, str) or not isinstance(types, (list, tuple)):
                raise ValueError(f"task_types must be null or a list of task type names, got {types!r}")
            if not types or not all(isinstance(t, str) and t for t in types) or len(set(types)) != len(types):
                raise ValueError(f"task_types must list distinct, non-empty task type names, got {list(types)!r}")
            object.__setattr__(self, "task_types", tuple(types))
        for f in ("method_params", "benchmark_options", "agent"):
            if not isinstance(getattr(self, f), dict):
                raise ValueError(f"{f} must be a mapping, got {type(getattr(self, f)).__name__}")
        unknown = sorted(set(self.agent) - set(AGENT_KEYS))
        if unknown:
            raise ValueError(f"agent: unknown field(s) {unknown}; allowed: {', '.join(AGENT_KEYS)}")
        if self.judge is not None:
            if not isinstance(self.judge, str) or not self.judge:
                raise ValueError(f"judge must be a backbone profile name or file, got {self.judge!r}")
            if not uses_judge(self.method, self.method_params):
                raise ValueError(
                    f"judge names a model ({self.judge!r}), but method {self.method!r} with these parameters "
                    "calls no judge (abstraction_memory and joint_memory do with judge: true)"
                )
        icl = {k: self.agent[k] for k in ICL_KEYS if k in self.agent}
        if icl:
            try:
                n = AgentConfig(**icl).icl_examples
            except ValueError as exc:
                raise ValueError(f"agent: {exc}") from exc
            if n and self.benchmark not in EXPERT_BENCHMARKS:
                raise ValueError(
                    f"agent: icl_examples = {n}, but benchmark {self.benchmark!r} has no expert paths to build "
                    f"demonstrations from (they exist for {', '.join(EXPERT_BENCHMARKS)}); set icl_examples to 0"
                )

    @property
    def run_name(self) -> str:
        if self.name:
            return self.name
        if not self.method_params:
            return self.method
        digest = hashlib.sha256(json.dumps(self.method_params, sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.method}-{digest}"

    @property
    def backbone_label(self) -> str:
        """The backbone as run folders and manifests name it: the profile name, or a profile file's stem."""
        from antipersist_lib.serving.profiles import profile_label

        return profile_label(self.backbone)

    @property
    def judge_label(self) -> str | None:
        """The judge profile as manifests name it (None: the backbone judges)."""
        from antipersist_lib.serving.profiles import profile_label

        return None if self.judge is None else profile_label(self.judge)

    @property
    def embedding_label(self) -> str:
        from antipersist_lib.serving.profiles import profile_label

        return profile_label(self.embedding)

    def run_dir(self) -> Path:
        return Path(self.out_root) / self.benchmark / self.backbone_label / self.run_name / f"seed{self.seed}"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        """Build from a params mapping; unknown keys are an error naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown run setting(s) {unknown}; allowed: {sorted(names)}")
        missing = [k for k in ("method", "benchmark", "backbone") if k not in d]
        if missing:
            raise ValueError(f"missing run setting(s) {missing}")
        return cls(**d)


def _default(key: str) -> Any:
    return RunSpec.__dataclass_fields__[key].default


def _distinct_ints(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(x, int) and not isinstance(x, bool) for x in value)
        and len(set(value)) == len(value)
    )


def _distinct_names(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(x, str) and x for x in value)
        and len(set(value)) == len(value)
    )


SEED = Field("seed", INT, default=_default("seed"))
#: a profile's seeds (main job, grid)
SEEDS = Field(
    "seeds", ANY, default=(_default("seed"),), test=_distinct_ints, what="a non-empty list of distinct integer seeds"
)
#: only tasks of these types (a run's ``task_types``, as a profile states it)
TASK_TYPES = Field("task_types", ANY, nullable=True, test=_distinct_names, what="a list of distinct task type names")
#: the protocol settings a run, a main-job profile (and its ``settings_by_benchmark``) and a grid set, each
#: stated and checked once; the defaults are ``RunSpec``'s (the paper's protocol)
PROTOCOL = Fields(
    Field("iterations", INT, default=_default("iterations"), minimum=1),
    Field("train_per_iteration", INT, default=_default("train_per_iteration"), minimum=0),  # 0: evaluation only
    Field("max_steps", INT, default=_default("max_steps"), minimum=1),
    Field("heldout_concurrency", INT, default=_default("heldout_concurrency"), minimum=1),
    Field("heldout_limit", INT, nullable=True, minimum=1),
    Field("train_pool_limit", INT, nullable=True, minimum=1),
    Field("subset", CHOICE, default=_default("subset"), choices=SUBSET_ORDERS),
)
PROTOCOL_KEYS = tuple(f.key for f in PROTOCOL.fields)
#: the run settings ``python -m antipersist_lib run`` takes from its options over a ``--params`` file
RUN_OPTION_KEYS = ("method", "benchmark", "backbone", "seed", *PROTOCOL_KEYS, "embedding", "out_root", "name", "judge")
#: a named variant of a profile or grid: one method with its own parameters
VARIANT = Fields(Field("method", CHOICE, required=True, choices=tuple(METHODS)), Field("params", MAPPING))


def training_schedule(n_pool: int, iterations: int, per_iteration: int, seed: int) -> list[list[int]]:
    """Per iteration, ``per_iteration`` pool indices sampled without replacement, in a seeded
    order that depends only on the seed and the iteration (so every method sees the same)."""
    if per_iteration > n_pool:
        raise ValueError(f"train_per_iteration={per_iteration} exceeds the training pool of {n_pool} tasks")
    return [
        [int(i) for i in np.random.default_rng([seed, it]).permutation(n_pool)[:per_iteration]]
        for it in range(1, iterations + 1)
    ]


def run_episode_counts(spec: RunSpec) -> tuple[int, int]:
    """(training, held-out) episodes per iteration of ``spec``, from its own task lists, starting nothing. A
    benchmark whose partition file is not built yet is counted from Table 4's split sizes (``--plan`` only)."""
    from antipersist_lib.envs.partitions import PAPER_COUNTS

    try:
        partition = load_partition(spec.benchmark, heldout_set=spec.heldout_set)
    except Exception:  # noqa: BLE001 - a missing or unbuilt partition: Table 4's sizes, or the run's own limits
        counts = PAPER_COUNTS.get(spec.benchmark)
        heldout = (
            spec.heldout_limit if counts is None else min(spec.heldout_limit or counts["heldout"], counts["heldout"])
        )
        if heldout is None:
            raise ValueError(
                f"{spec.benchmark}: no partition file and no Table 4 size; build the partition or set heldout_limit"
            ) from None
        return spec.train_per_iteration, int(heldout)
    train = limited_tasks(of_types(partition.train, spec.task_types), spec.train_pool_limit, spec.subset)
    heldout = limited_tasks(of_types(partition.heldout, spec.task_types), spec.heldout_limit, spec.subset)
    return min(spec.train_per_iteration, len(train)), len(heldout)


def of_types(tasks: Sequence[Task], types: Sequence[str] | None) -> list[Task]:
    """The tasks of the given types (all when None), in split order. A type the split does not hold is
    an error naming the types it does hold: a typo must not leave a probe silently empty."""
    if types is None:
        return list(tasks)
    if isinstance(types, str) or not isinstance(types, (list, tuple)):
        raise ValueError(f"task_types must be a list of task type names, got {types!r}")
    held = list(dict.fromkeys(t.task_type for t in tasks))
    missing = [t for t in types if t not in held]
    if missing:
        raise ValueError(f"task_types: {missing} not in this split; its task types are {held}")
    wanted = set(types)
    return [t for t in tasks if t.task_type in wanted]


def work_left(spec: RunSpec, n_heldout: int | None = None) -> bool:
    """False only when every held-out episode of every iteration is recorded: a finished run, which a re-run
    merely re-reads (it makes no call and needs no endpoint). ``n_heldout``: the run's held-out tasks
    (default: from the benchmark's partition and ``heldout_limit``)."""
    if n_heldout is None:
        heldout = of_types(load_partition(spec.benchmark, heldout_set=spec.heldout_set).heldout, spec.task_types)
        n_heldout = len(limited_tasks(heldout, spec.heldout_limit, spec.subset))
    layout = RunDirectory(spec.run_dir())
    if not layout.is_run() or not n_heldout:
        return True
    done = layout.heldout_done()
    return any((it, j) not in done for it in range(1, spec.iterations + 1) for j in range(n_heldout))


def uses_judge(method: str, params: dict[str, Any]) -> bool:
    """Whether a run of ``method`` with ``params`` calls an LLM judge (``Method.uses_judge``)."""
    return method_class(method).uses_judge(params)


def uses_embeddings(method: str) -> bool:
    """Whether a method calls the embedder (``Method.uses_embeddings``; ReAct and fixed libraries do not)."""
    return bool(getattr(method_class(method), "uses_embeddings", True))
