"""Records shared by every part of the kit: tasks, steps, trajectories and episode outcomes.

All records are plain dataclasses with ``to_dict``/``from_dict`` so they round-trip through the
JSONL stores unchanged (tests assert ``from_dict(to_dict(x)) == x``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

#: The four modes of Anti-Persistence, in the fixed order used for round-robin and tie-breaks.
MODES: tuple[str, ...] = ("none", "imitation", "strategic", "corrective")
SYNTHESIS_MODES: tuple[str, ...] = ("imitation", "strategic", "corrective")

#: the two phases of a run, each with its own episode file (``episodes_<phase>.jsonl``); also the two task
#: splits of a partition. The order is fixed: a phase's index seeds its decisions' random stream.
TRAIN = "train"
HELDOUT = "heldout"
PHASES: tuple[str, ...] = (TRAIN, HELDOUT)


@dataclass(frozen=True)
class Task:
    """One benchmark task.

    ``task_id`` is the index of the task in its benchmark's task pool (outcome-log field
    ``task_id``); ``task_type`` drives the task-type retrieval filter; ``env_args`` holds what the
    benchmark adapter needs to load the task (game file, task name and variation, ...).
    """

    task_id: int
    benchmark: str
    task_type: str
    instruction: str = ""
    split: str = "train"
    env_args: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)

    @property
    def key(self) -> str:
        """Stable identifier across runs: benchmark, split and pool index."""
        return f"{self.benchmark}/{self.split}/{self.task_id}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(
            task_id=int(d["task_id"]),
            benchmark=str(d["benchmark"]),
            task_type=str(d["task_type"]),
            instruction=str(d.get("instruction", "")),
            split=str(d.get("split", "train")),
            env_args=dict(d.get("env_args") or {}),
        )


@dataclass(frozen=True)
class Step:
    """One agent turn: what the model wrote, the action sent, and what the environment said.

    ``valid`` is False when no action could be parsed from the model's reply or the engine
    rejected the action; such turns still consume one step of the budget.
    """

    action: str
    observation: str
    reward: float = 0.0
    done: bool = False
    valid: bool = True
    model_output: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        return cls(
            action=str(d["action"]),
            observation=str(d["observation"]),
            reward=float(d.get("reward", 0.0)),
            done=bool(d.get("done", False)),
            valid=bool(d.get("valid", True)),
            model_output=str(d.get("model_output", "")),
        )


@dataclass(frozen=True)
class Trajectory:
    """The raw interaction record e of one episode: initial observation and every step."""

    initial_observation: str
    steps: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    @property
    def n_invalid(self) -> int:
        return sum(1 for s in self.steps if not s.valid)

    def to_dict(self) -> dict[str, Any]:
        return {
            "initial_observation": self.initial_observation,
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        return cls(
            initial_observation=str(d["initial_observation"]),
            steps=tuple(Step.from_dict(s) for s in d.get("steps", [])),
        )


@dataclass(frozen=True)
class EpisodeOutcome:
    """How an episode ended.

    ``success`` is the benchmark's binary outcome y. ``score`` is the engine's own score or
    reward (ScienceWorld 0-100, WebShop 0-1, ALFWorld 0/1). ``infra_failure`` marks an abnormal
    termination (engine exception, crashed JVM) whose outcome cannot be attributed to the agent;
    such episodes never enter the outcome log (skip rule 3). ``over_budget`` marks episodes that
    hit the step limit (counted as failures).
    """

    success: bool
    score: float = 0.0
    n_steps: int = 0
    n_invalid: int = 0
    over_budget: bool = False
    infra_failure: bool = False
    error: str | None = None

    @property
    def y(self) -> int:
        return int(self.success)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeOutcome:
        return cls(
            success=bool(d["success"]),
            score=float(d.get("score", 0.0)),
            n_steps=int(d.get("n_steps", 0)),
            n_invalid=int(d.get("n_invalid", 0)),
            over_budget=bool(d.get("over_budget", False)),
            infra_failure=bool(d.get("infra_failure", False)),
            error=d.get("error"),
        )


#: the two task splits of a partition (the phases' names)
SPLITS = PHASES
#: how a limit (``heldout_limit``, ``train_pool_limit``) picks its N tasks from a split
SUBSET_ORDERS = ("balanced", "first")


def limited_tasks(tasks: Sequence[Task], limit: int | None, order: str = "balanced") -> list[Task]:
    """The first ``limit`` tasks of a split, or all of them when ``limit`` is None.

    Why ``balanced``: splits are stored grouped by task type (ALFWorld's held-out games sorted by path,
    ScienceWorld's variations task by task), so the first N of a split are often all one type (the first
    ALFWorld held-out games are all ``look_at_obj_in_light``) and a small run would measure one type only.
    ``balanced`` takes one task of each type in turn (types in the order they first appear, tasks in split
    order within a type); ``first`` is the plain prefix. Either way the choice depends only on the split."""
    if order not in SUBSET_ORDERS:
        raise ValueError(f"subset order must be one of {SUBSET_ORDERS}, got {order!r}")
    if limit is None or limit >= len(tasks):
        return list(tasks)
    if order == "first":
        return list(tasks[:limit])
    by_type: dict[str | None, list[Task]] = {}
    for t in tasks:
        by_type.setdefault(t.task_type, []).append(t)
    queues = list(by_type.values())
    out: list[Task] = []
    depth = 0
    while len(out) < limit:
        for q in queues:
            if depth < len(q) and len(out) < limit:
                out.append(q[depth])
        depth += 1
    return out


@dataclass(frozen=True)
class Partition:
    """A benchmark's fixed training and held-out tasks (paper Table 4; ``envs.partitions`` stores them)."""

    benchmark: str
    seed: int
    drawn_with: dict[str, Any]
    train: tuple[Task, ...]
    heldout: tuple[Task, ...]
    notes: str = ""

    def split(self, name: str) -> tuple[Task, ...]:
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; expected one of {SPLITS}")
        return self.train if name == TRAIN else self.heldout

    def to_dict(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "seed": self.seed,
            "drawn_with": self.drawn_with,
            "notes": self.notes,
            "splits": {s: [t.to_dict() for t in self.split(s)] for s in SPLITS},
        }

    @property
    def hash(self) -> str:
        return partition_hash(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Partition:
        try:
            splits = d["splits"]
            return cls(
                benchmark=str(d["benchmark"]),
                seed=int(d["seed"]),
                drawn_with=dict(d.get("drawn_with", {})),
                train=tuple(Task.from_dict(t) for t in splits["train"]),
                heldout=tuple(Task.from_dict(t) for t in splits["heldout"]),
                notes=str(d.get("notes", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed partition file: {exc!r}") from exc


def partition_hash(p: Partition) -> str:
    """sha256 (16 hex digits) of the canonical JSON of both splits' tasks."""
    body = json.dumps({s: [t.to_dict() for t in p.split(s)] for s in SPLITS}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]
