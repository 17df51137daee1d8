"""The one interface every benchmark adapter implements.

The agent loop only talks to this interface. Adapters must keep two kinds of failure apart:
the agent failing the task (a normal episode with ``success == False``) and the engine failing
(raise ``InfrastructureError``), because infrastructure failures never enter the outcome log
(skip rule 3 of B.5). Adapters are context managers that release their engine on exit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from .records import Task


class InfrastructureError(RuntimeError):
    """The benchmark engine failed (exception, crashed JVM, lost server); not the agent's fault."""


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


class Environment(ABC):
    """A benchmark episode driver: ``reset(task)`` then ``step(action)`` until done."""

    #: benchmark name, e.g. "scienceworld"
    benchmark: str = ""
    #: the command syntax shown to the agent (part of its system prompt)
    action_help: str = ""

    @abstractmethod
    def reset(self, task: Task) -> str:
        """Load ``task`` and return the initial observation (it contains the instruction)."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Execute one action."""

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

    def close(self) -> None:
        """Release the engine."""

    def __enter__(self) -> "Environment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
