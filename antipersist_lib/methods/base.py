"""The interface every compared method implements, and what it gets to work with.

The protocol (``protocol.py``) drives every method alike: ``begin`` once per run (after crash
recovery, before the first task); ``begin_iteration`` before an iteration's training (called again on
resume, so idempotent); ``prepare`` before every training and held-out task, returning a
``TaskContext`` (context blocks for the system prompt, the persistent abstractions shown, which are
the provenance parents of the coming trajectory, and metadata), writing nothing while frozen;
``learn`` after training episodes only; ``end_iteration`` after an iteration's training; and
``freeze`` / ``unfreeze`` around held-out evaluation (frozen stores raise on any write).

A method keeps all its state in files under ``state_dir`` (append-only JSONL, atomic snapshots), so
the protocol can resume it after a crash by cutting those files back to the last committed state
(``state_files``). docs/methods.md, "One task from Python", shows the calls in use.
"""

from __future__ import annotations

import numbers
import threading
from abc import ABC
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.core.config import TABLE3
from antipersist_lib.records import Task
from antipersist_lib.serving.embeddings import embed_text


@dataclass
class TaskContext:
    """What a method hands the agent for one task (kept in memory only)."""

    blocks: list[str] = field(default_factory=list)  # appended to the agent's system prompt
    parents: tuple[str, ...] = ()  # ids of persistent abstractions in the context (P(m))
    embedding: np.ndarray | None = None
    synthesis_calls: int = 0  # extra LLM calls made to build the context (kappa)
    other_calls: int = 0  # other preparation calls (e.g. AutoRefine's query rewrite)
    meta: dict[str, Any] = field(default_factory=dict)  # JSON-safe; stored with the episode


@dataclass(frozen=True)
class MethodContext:
    """Shared services: the backbone, the embedder, where to keep state, the run seed, and the LLM
    judge when the run names a model of its own for it (F.2's judge is a separate model)."""

    llm: Any
    embedder: Any
    state_dir: Path
    seed: int
    benchmark: str
    fsync: bool = True
    judge_llm: Any = None  # the judge's client; None: the backbone judges

    @property
    def judge(self) -> Any:
        """The client a judge call goes to: the judge model's, else the backbone's."""
        return self.llm if self.judge_llm is None else self.judge_llm


class Method(ABC):
    """Base class with no memory at all (ReAct behaves exactly like this)."""

    name: str = "base"
    #: state files under ``state_dir`` that hold the method's persistent state
    state_files: tuple[str, ...] = ()
    #: whether the method calls ``ctx.embedder`` (the run's preflight then checks the embedding endpoint)
    uses_embeddings: bool = True
    #: the prompt families its runs use and hash into their manifests (``methods.PROMPT_FAMILIES``)
    prompt_families: tuple[str, ...] = ("kit",)

    @classmethod
    def uses_judge(cls, params: dict[str, Any]) -> bool:
        """Whether a run with these parameters calls an LLM judge (``ctx.judge``): a run may name a
        judge model only then, and its manifest records the judge only then."""
        return False

    #: parameters added after runs were recorded, each with the value those runs behaved as: a recorded
    #: run whose manifest's ``method_config`` lacks the name is rebuilt with it (``methods.params_as_recorded``)
    LEGACY_PARAMS: dict[str, Any] = {}

    def __init__(self, ctx: MethodContext, **params: Any) -> None:
        if params:
            raise ValueError(f"method {self.name!r} has no parameter(s) {sorted(params)}")
        self.ctx = ctx
        self._frozen = False
        self._lock = threading.Lock()

    # -- the interface ---------------------------------------------------------------------

    def begin(self) -> None:
        """Write initial state (once per run, before the first task; must be idempotent on resume)."""

    def prepare(
        self, task: Task, initial_observation: str, *, phase: str, iteration: int, position: int
    ) -> TaskContext:
        return TaskContext()

    def begin_iteration(self, iteration: int) -> None:
        """Update before an iteration's training episodes (idempotent: a resumed run calls it again)."""

    def learn(self, task: Task, ctx: TaskContext, episode: EpisodeResult, *, iteration: int, position: int) -> None:
        """Update memory from a finished training episode."""

    def end_iteration(self, iteration: int) -> None:
        """Update at the end of an iteration's training episodes."""

    def snapshot(self, iteration: int, path: Path) -> None:
        """Write an analysis snapshot of the state after ``iteration`` to ``path`` (atomic; the run
        directory names the file, ``RunDirectory.snapshot_path``)."""

    def stores(self) -> list[Any]:
        """The method's persistent stores: frozen and unfrozen with it, closed with it."""
        return []

    def freeze(self) -> None:
        self._frozen = True
        for store in self.stores():
            store.freeze()

    def unfreeze(self) -> None:
        self._frozen = False
        for store in self.stores():
            store.unfreeze()

    @property
    def frozen(self) -> bool:
        return self._frozen

    def close(self) -> None:
        """Release open files."""
        for store in self.stores():
            store.close()

    def describe(self) -> dict[str, Any]:
        """Hyperparameters for the run manifest."""
        return {"name": self.name}

    # -- helpers for subclasses ------------------------------------------------------------

    def embed_task(self, task: Task, initial_observation: str, phase: str, iteration: int) -> np.ndarray | None:
        return self.ctx.embedder.embed(
            embed_text(task.instruction, initial_observation, TABLE3.embed_prefix_chars),
            tags={"phase": phase, "iteration": iteration, "task": task.key},
        )

    def path(self, name: str) -> Path:
        return self.ctx.state_dir / name


def take_params(
    params: dict[str, Any], defaults: dict[str, Any], method: str, minimums: dict[str, float] | None = None
) -> dict[str, Any]:
    """Merge ``params`` into ``defaults``; unknown names raise an error that lists the valid ones,
    and a value below its entry in ``minimums`` raises an error naming the parameter."""
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(f"method {method!r} has no parameter(s) {unknown}; valid: {sorted(defaults)}")
    for key, value in params.items():
        wrong = _wrong_type(value, defaults[key])
        if wrong:
            raise ValueError(f"method {method!r}: parameter {key!r} must be {wrong}, got {value!r}")
    out = dict(defaults)
    out.update(params)
    for key, low in (minimums or {}).items():
        if float(out[key]) < low:
            raise ValueError(f"{key} must be >= {low:g}, got {out[key]}")
    return out


def _wrong_type(value: Any, default: Any) -> str | None:
    """What ``value`` should be, judged by the default's type; None when it fits (a None
    default accepts anything: those parameters are optional paths or modes checked later)."""
    if default is None:
        return None
    if isinstance(default, bool):
        return None if isinstance(value, (bool, np.bool_)) else "true or false"
    if isinstance(default, numbers.Integral):
        return None if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) else "an integer"
    if isinstance(default, numbers.Real):
        return None if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) else "a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "a string"
    return None


def check_sequence(values: Sequence[Any], name: str) -> None:
    if not values:
        raise ValueError(f"{name} must not be empty")
