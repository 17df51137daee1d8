"""In-context demonstrations: expert paths of training tasks, shown to the agent (``icl_examples``).

Small instruction models do not keep to the agent's reply format on ALFWorld or ScienceWorld from
the instructions alone, and the original ReAct setup showed solved episodes; the paper reproduced
here says nothing about demonstrations, so the default is none (``AgentConfig.icl_examples = 0``).
Each demonstration is a real replay of a training task's expert path on the engine
(``envs.expert.replay_expert``), of the current task's type, kept only if it succeeds and its
commands parse back unchanged; a task never sees its own replay and held-out tasks are never shown.
Replays are cached as JSON per (benchmark, partition, task type, seed) under the cache folder, and
``render_block`` renders them as ``Action:`` / ``Observation:`` lines within ``icl_max_chars``.

docs/choices.md, "In-context demonstrations", documents the source, selection, cost, rendering and
which ScienceWorld task types have no demonstration.
"""

from __future__ import annotations

import fcntl
import json
import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.core import prompts
from antipersist_lib.core.actions import parse_action
from antipersist_lib.envs.expert import EXPERT_BENCHMARKS, has_expert_paths, replay_expert
from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.paths import safe_file_name
from antipersist_lib.records import EpisodeOutcome, Partition, Step, Task, Trajectory
from antipersist_lib.textfit import keep_ends

log = logging.getLogger(__name__)

#: characters kept of a demonstration's initial observation (cut in the middle: ALFWorld ends it
#: with the task sentence, ScienceWorld starts with it) and of each step's observation
INITIAL_OBSERVATION_CHARS = 700
STEP_OBSERVATION_CHARS = 250

#: the cache's file format; a file of another version is rebuilt
CACHE_VERSION = 1


@dataclass(frozen=True)
class Demonstration:
    """One successful expert replay of a training task."""

    task: Task
    trajectory: Trajectory
    outcome: EpisodeOutcome

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task.to_dict(), "trajectory": self.trajectory.to_dict(), "outcome": self.outcome.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Demonstration:
        return cls(
            Task.from_dict(d["task"]), Trajectory.from_dict(d["trajectory"]), EpisodeOutcome.from_dict(d["outcome"])
        )


def candidate_order(train: Iterable[Task], task_type: str, seed: int) -> list[Task]:
    """The training tasks of ``task_type`` in the seeded order they are tried as demonstrations
    (independent of which other types are asked for, and of the order of ``train``)."""
    pool = sorted((t for t in train if t.task_type == task_type), key=lambda t: t.task_id)
    random.Random(f"icl:{seed}:{task_type}").shuffle(pool)
    return pool


def usable(demo: Demonstration) -> bool:
    """A replay may be shown when it succeeded and every command it shows parses back to itself."""
    if not demo.outcome.success or demo.outcome.infra_failure:
        return False
    for step in shown_steps(demo.trajectory):
        parsed = parse_action(prompts.DEMONSTRATION_REPLY.format(action=step.action))
        if parsed.action != step.action or parsed.is_think:
            return False
    return True


def shown_steps(trajectory: Trajectory) -> list[Step]:
    """The steps a demonstration shows: those the engine accepted (a rejected one changed nothing)."""
    return [s for s in trajectory.steps if s.valid and s.action]


class DemonstrationLibrary:
    """The demonstrations of one run: per task type, the first ``count + 1`` usable expert replays
    of the partition's training tasks in seeded order, cached on disk.

    ``prepare(env, types)`` replays what the cache lacks (``replays`` counts the engine episodes
    played by this object); ``for_task(task)`` returns the ``count`` demonstrations of the task's
    type that are not the task itself; ``describe()`` is what the run manifest records."""

    def __init__(self, partition: Partition, seed: int, count: int, cache_dir: str | Path) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be an integer >= 1, got {count!r}")
        self.partition = partition
        self.seed = int(seed)
        self.count = count
        self.folder = Path(cache_dir) / f"{partition.benchmark}-{partition.hash[:16]}" / f"seed{self.seed}"
        self.replays = 0
        self._by_type: dict[str, list[Demonstration]] = {}

    # -- building -------------------------------------------------------------------------------

    def path(self, task_type: str) -> Path:
        return self.folder / f"{safe_file_name(task_type)}.json"

    def prepare(self, env: Any, task_types: Iterable[str]) -> None:
        """Make the demonstrations of every type in ``task_types`` available, replaying on ``env``
        (an engine of the partition's benchmark) only what the cache does not hold yet."""
        benchmark = self.partition.benchmark
        if not has_expert_paths(env):
            raise ValueError(
                f"icl_examples: benchmark {getattr(env, 'benchmark', benchmark)!r} has no expert paths to build "
                f"demonstrations from (they exist for {', '.join(EXPERT_BENCHMARKS)}); set icl_examples to 0"
            )
        for kind in sorted(set(task_types)):
            if kind in self._by_type:
                continue
            demos = self._prepare_type(env, kind)
            if len(demos) < self.count + 1:  # recorded in the manifest (describe) too
                log.warning(
                    "%s type %s: %d usable expert replay(s) for %d demonstration(s) per task%s",
                    benchmark,
                    kind,
                    len(demos),
                    self.count,
                    "; its tasks are shown none" if not demos else "",
                )
            self._by_type[kind] = demos

    def _prepare_type(self, env: Any, kind: str) -> list[Demonstration]:
        candidates = candidate_order(self.partition.train, kind, self.seed)
        need = self.count + 1
        path = self.path(kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # another run may be building the same file
            try:
                demos, tried = self._read(path, kind)
                todo = [t for t in candidates if t.task_id not in tried]
                if len(demos) >= need or not todo:
                    return demos[:need]
                for task in todo:
                    traj, outcome = replay_expert(env, task)
                    self.replays += 1
                    tried.append(task.task_id)
                    demo = Demonstration(task, traj, outcome)
                    if usable(demo):
                        demos.append(demo)
                    else:
                        log.info(
                            "expert replay of %s not usable as a demonstration (success=%s)", task.key, outcome.success
                        )
                    if len(demos) >= need:
                        break
                atomic_write_json(
                    path,
                    {
                        "version": CACHE_VERSION,
                        "benchmark": self.partition.benchmark,
                        "partition_hash": self.partition.hash,
                        "task_type": kind,
                        "seed": self.seed,
                        "tried": tried,
                        "demonstrations": [d.to_dict() for d in demos],
                    },
                )
                return demos[:need]
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _read(self, path: Path, kind: str) -> tuple[list[Demonstration], list[int]]:
        """The cached successes and tried task ids of one type; a missing, damaged or foreign file
        counts as empty (it is rebuilt)."""
        if not path.exists():
            return [], []
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            same = (
                data.get("version") == CACHE_VERSION
                and data.get("partition_hash") == self.partition.hash
                and data.get("task_type") == kind
                and data.get("seed") == self.seed
            )
            if not same:
                log.warning("%s belongs to another partition, type, seed or format; rebuilding it", path)
                return [], []
            train = {t.task_id: t for t in self.partition.train}
            demos = [Demonstration.from_dict(d) for d in data["demonstrations"]]
            if any(train.get(d.task.task_id) != d.task for d in demos):
                log.warning("%s holds a task that is not in the partition's training split; rebuilding it", path)
                return [], []
            return demos, [int(i) for i in data["tried"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable demonstration cache %s (%r); rebuilding it", path, exc)
            return [], []

    # -- using ----------------------------------------------------------------------------------

    def for_task(self, task: Task) -> list[Demonstration]:
        """The ``count`` demonstrations of ``task``'s type, never ``task`` itself."""
        if task.task_type not in self._by_type:
            raise KeyError(f"demonstrations of type {task.task_type!r} were not prepared")
        same = [d for d in self._by_type[task.task_type] if d.task.key != task.key and d.task.env_args != task.env_args]
        return same[: self.count]

    def of_type(self, task_type: str) -> list[Demonstration]:
        """Every prepared demonstration of one type, in seeded order (``count + 1`` at most)."""
        if task_type not in self._by_type:
            raise KeyError(f"demonstrations of type {task_type!r} were not prepared")
        return list(self._by_type[task_type])

    def describe(self) -> dict[str, Any]:
        """For the run manifest: which training task ids each type draws its demonstrations from
        (a task takes the first ``count`` of its type's list that are not itself)."""
        return {
            "icl_examples": self.count,
            "source": "expert replays of training tasks of the task's type (core/demonstrations.py)",
            "seed": self.seed,
            "cache": str(self.folder),
            "train_task_ids": {k: [d.task.task_id for d in v] for k, v in sorted(self._by_type.items())},
        }


# -- rendering ------------------------------------------------------------------------------------


def render_block(demos: Sequence[Demonstration], max_chars: int) -> str:
    """The system-prompt block: header, then each demonstration within an equal share of
    ``max_chars``; the whole block is at most ``max_chars`` characters ("" for no demonstrations)."""
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"max_chars must be an integer >= 1, got {max_chars!r}")
    if not demos:
        return ""
    head = prompts.DEMONSTRATIONS_HEADER + "\n" + prompts.DEMONSTRATIONS_PREAMBLE
    share = (max_chars - len(head) - 2 * len(demos)) // len(demos)
    parts = [render_demonstration(i, d, share) for i, d in enumerate(demos, start=1)]
    return "\n\n".join([head, *parts])


def render_demonstration(number: int, demo: Demonstration, max_chars: int) -> str:
    """One demonstration in at most ``max_chars`` characters (see the module docstring)."""
    title = prompts.DEMONSTRATION_TITLE.format(number=number)
    end = prompts.DEMONSTRATION_END
    initial_budget = max(0, min(INITIAL_OBSERVATION_CHARS, (max_chars - len(title) - len(end)) // 3))
    initial = _clip_middle(demo.trajectory.initial_observation.strip(), initial_budget)
    pairs = [
        prompts.DEMONSTRATION_REPLY.format(action=s.action)
        + "\n"
        + prompts.AGENT_OBSERVATION.format(observation=_clip_end(_flat(s.observation), STEP_OBSERVATION_CHARS))
        for s in shown_steps(demo.trajectory)
    ]
    head = [title, initial] if initial else [title]
    text = "\n".join([*head, *pairs, end])
    if len(text) <= max_chars:
        return text
    # drop whole middle steps: keep the opening and the finish, alternating, within the budget
    marker_room = len(prompts.DEMONSTRATION_OMITTED.format(count=len(pairs))) + 1
    budget = max_chars - len("\n".join([*head, end])) - 1 - marker_room
    front, back = keep_ends(pairs, budget)
    omitted = len(pairs) - len(front) - len(back)
    marker = [prompts.DEMONSTRATION_OMITTED.format(count=omitted)] if omitted else []
    text = "\n".join([*head, *front, *marker, *back, end])
    return text if len(text) <= max_chars else text[:max_chars]  # only for budgets below the minimum


def _flat(text: str) -> str:
    return " ".join(str(text).split())


def _clip_end(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n - 3)].rstrip() + "..."


def _clip_middle(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters, cutting from the middle (both ends carry meaning)."""
    if len(text) <= n:
        return text
    if n < 20:
        return ""
    keep = n - 5
    return text[: keep - keep // 2].rstrip() + " ... " + text[len(text) - keep // 2 :].lstrip()
