"""The one interface every benchmark adapter implements.

The agent loop only talks to this interface. Adapters must keep two kinds of failure apart:
the agent failing the task (a normal episode with ``success == False``) and the engine failing
(raise ``InfrastructureError``), because infrastructure failures never enter the outcome log
(skip rule 3 of B.5). Adapters are context managers that release their engine on exit.

Adapters implement ``_reset`` and ``_step``; the public ``reset``/``step`` wrap them to keep
per-episode counts of steps and valid/invalid actions (``episode_stats``), so trajectory
length and invalid-action rates can be reported for every benchmark the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from antipersist_lib.records import Task


@dataclass(frozen=True)
class StepResult:
    """What the engine returned for one action.

    ``valid`` is False when the engine did not recognise or could not execute the action.
    """

    observation: str
    reward: float = 0.0
    done: bool = False
    valid: bool = True
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class EpisodeStats:
    steps: int = 0
    valid: int = 0
    invalid: int = 0


class Environment(ABC):
    """A benchmark episode driver: ``reset(task)`` then ``step(action)`` until done."""

    #: benchmark name, e.g. "scienceworld"
    benchmark: str = ""
    #: the command syntax shown to the agent (part of its system prompt)
    action_help: str = ""
    #: True for engines whose action is a whole block (AppWorld's code): the agent loop then
    #: passes the model's raw reply to ``normalize_action`` instead of one parsed command line
    raw_actions: bool = False

    _stats: EpisodeStats
    _task: Task | None = None

    def reset(self, task: Task) -> str:
        """Load ``task`` and return the initial observation (it contains the instruction)."""
        self._stats = EpisodeStats()
        self._task = task
        return self._reset(task)

    def step(self, action: str) -> StepResult:
        """Execute one action."""
        res = self._step(action)
        st = self.episode_stats
        st.steps += 1
        if res.valid:
            st.valid += 1
        else:
            st.invalid += 1
        return res

    @abstractmethod
    def _reset(self, task: Task) -> str: ...

    @abstractmethod
    def _step(self, action: str) -> StepResult: ...

    @property
    def episode_stats(self) -> EpisodeStats:
        if not hasattr(self, "_stats"):
            self._stats = EpisodeStats()
        return self._stats

    @property
    def task_type(self) -> str | None:
        """Type of the loaded task (drives the task-type retrieval filter)."""
        return None if self._task is None else self._task.task_type

    @property
    @abstractmethod
    def success(self) -> bool:
        """The benchmark's success flag for the current episode."""

    @property
    def score(self) -> float:
        """The engine's own score or reward so far (defaults to the success flag)."""
        return float(self.success)

    def valid_actions(self) -> list[str] | None:
        """Actions the engine accepts now, where the engine can list them."""
        return None

    def normalize_action(self, action: str) -> str:
        """Benchmark-specific rewriting of the model's command (e.g. old ALFWorld syntax)."""
        return action

    def engine_info(self) -> dict[str, Any]:
        """Engine name, package versions and settings, for run manifests."""
        return {"benchmark": self.benchmark}

    def check_available(self) -> None:
        """Raise ``BenchmarkUnavailableError`` (with the fix) when the engine or its data is missing. A run
        calls it before its first model request; engines that start lazily (ScienceWorld's JVM) override it,
        the others fail in their constructor already."""

    def close(self) -> None:
        """Release the engine."""

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
