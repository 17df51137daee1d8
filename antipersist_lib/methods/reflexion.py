"""Reflexion (Shinn et al., 2023) as a compared method: verbal self-reflections after failures.

After a failed training episode the backbone writes a self-reflection, stored in an
``AbstractionStore`` (``reflections/events.jsonl``) and shown on later attempts at the same task;
every trajectory is stored too, for provenance. Because held-out tasks are never revisited, a task
with no reflections of its own is shown those of the most similar tasks by default
(``transfer="similar_task"``; ``"none"`` is the strict original). The kit's version and its
deviations from the original are documented in docs/methods.md, "Reflexion".
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.core.prompts import numbered_lines
from antipersist_lib.core.synthesis import FormatLimits, format_record
from antipersist_lib.errors import FrozenStateError
from antipersist_lib.memory.abstraction_store import EVENTS_FILE, Abstraction, AbstractionStore
from antipersist_lib.memory.similarity import cosine
from antipersist_lib.memory.trajectory_store import MemoryRecord, TrajectoryStore
from antipersist_lib.methods.base import Method, MethodContext, TaskContext, take_params
from antipersist_lib.records import Task
from antipersist_lib.rundir import RunDirectory

log = logging.getLogger(__name__)

TRANSFER_MODES = ("similar_task", "none")

REFLECTION_SYSTEM = (
    "You help an agent that acts in a text environment learn from its own mistakes. You read one "
    "of its attempts that did not succeed and write a brief self-reflection the agent will read "
    "before it tries the task again."
)

REFLECTION_PROMPT = """\
Task:
{instruction}

This attempt did not complete the task:
{trajectory}

Self-reflections written after earlier unsuccessful attempts at this task:
{previous}

Write the self-reflection for this attempt, in the first person, as a note to yourself for the
next attempt. First say what most likely made the attempt fail and at which step it went wrong.
Then give a concrete plan for the next attempt: the actions to take, in order, and what to do
differently. If an earlier self-reflection's plan was followed and still failed, change the plan.
Use at most five sentences and write nothing else."""

NO_PREVIOUS_REFLECTIONS = "(none)"

HEADER_OWN = "## Reflections from your earlier attempts at this task"
PREAMBLE_OWN = "You wrote these after earlier attempts at this same task did not succeed (oldest first):"
HEADER_SIMILAR = "## Reflections from an earlier attempt at a similar task"
PREAMBLE_SIMILAR = (
    "You have not attempted this task before. You wrote these after unsuccessful attempts at a "
    "similar task; use what applies here. The similar task was: {instruction}"
)

#: this method's prompt family ("reflexion"), hashed into the manifests of its runs
PROMPTS: dict[str, str] = {
    "reflexion_system": REFLECTION_SYSTEM,
    "reflexion_reflect": REFLECTION_PROMPT,
    "reflexion_no_previous": NO_PREVIOUS_REFLECTIONS,
    "reflexion_header_own": HEADER_OWN + "\n" + PREAMBLE_OWN,
    "reflexion_header_similar": HEADER_SIMILAR + "\n" + PREAMBLE_SIMILAR,
}

DEFAULTS: dict[str, Any] = {
    "max_reflections": 3,  # reflections shown per task (original: last 3)
    "transfer": "similar_task",  # "none" = strict original
    "transfer_tasks": 1,  # similar tasks whose reflections are shown when a task has none
    "max_tokens": 256,
    "temperature": 0.0,
    "trajectory_chars": 4000,  # clip of the failed trajectory in the reflection prompt
}

REFLECTIONS_DIR = "reflections"


class Reflexion(Method):
    """Per-task verbal self-reflections, with the kit's similar-task transfer for unseen tasks."""

    name = "reflexion"
    prompt_families = ("kit", "reflexion")
    state_files = (RunDirectory.TRAJECTORIES, f"{REFLECTIONS_DIR}/{EVENTS_FILE}")

    def __init__(self, ctx: MethodContext, **params: Any) -> None:
        super().__init__(ctx)
        p = take_params(
            params,
            DEFAULTS,
            self.name,
            minimums={
                "max_reflections": 1,
                "transfer_tasks": 1,
                "max_tokens": 1,
                "temperature": 0,
                "trajectory_chars": 200,
            },
        )
        if p["transfer"] not in TRANSFER_MODES:
            raise ValueError(f"transfer is {p['transfer']!r}, expected one of {TRANSFER_MODES}")
        self.max_reflections = int(p["max_reflections"])
        self.transfer = str(p["transfer"])
        self.transfer_tasks = int(p["transfer_tasks"])
        self.max_tokens = int(p["max_tokens"])
        self.temperature = float(p["temperature"])
        self.trajectory_chars = int(p["trajectory_chars"])
        self.limits = FormatLimits(max_record_chars=self.trajectory_chars)
        Path(ctx.state_dir).mkdir(parents=True, exist_ok=True)
        self.memory = TrajectoryStore(self.path(RunDirectory.TRAJECTORIES), task_filter="task_type", fsync=ctx.fsync)
        self.store = AbstractionStore(self.path(REFLECTIONS_DIR), prefix="refl", fsync=ctx.fsync)

    # -- reading the reflections -----------------------------------------------------------

    def reflections_for(self, task_key: str) -> list[Abstraction]:
        """Every reflection written for ``task_key``, oldest first."""
        return [a for a in self.store if a.kind == "reflection" and a.name == task_key]

    def _recent(self, task_key: str) -> list[Abstraction]:
        return self.reflections_for(task_key)[-self.max_reflections :]

    def _record(self, record_id: int) -> MemoryRecord | None:
        for rec in self.memory:
            if rec.record_id == record_id:
                return rec
        return None

    def _similar_tasks(self, task: Task, embedding: np.ndarray) -> list[tuple[str, float]]:
        """(task key, similarity) of the most similar other tasks of the same benchmark and task
        type that have reflections with an embedding; ties keep the task reflected on first."""
        latest: dict[str, Abstraction] = {}
        for a in self.store:
            if (
                a.kind == "reflection"
                and a.name is not None
                and a.name != task.key
                and a.embedding is not None
                and a.task_type == task.task_type
                and a.name.startswith(task.benchmark + "/")
            ):
                latest[a.name] = a  # the task's embedding as of its latest reflection
        scored = [(key, cosine(embedding, np.asarray(a.embedding))) for key, a in latest.items()]
        order = sorted(range(len(scored)), key=lambda i: -scored[i][1])  # stable: ties keep order
        return [scored[i] for i in order[: self.transfer_tasks]]

    # -- the interface ---------------------------------------------------------------------

    def prepare(
        self, task: Task, initial_observation: str, *, phase: str, iteration: int, position: int
    ) -> TaskContext:
        embedding = self.embed_task(task, initial_observation, phase, iteration)
        own = self._recent(task.key)
        if own:
            block = HEADER_OWN + "\n" + PREAMBLE_OWN + "\n" + numbered_lines([a.text for a in own])
            return TaskContext(
                blocks=[block],
                parents=tuple(a.abstraction_id for a in own),
                embedding=embedding,
                meta={"reflections": "own", "n_reflections": len(own)},
            )
        if self.transfer == "none" or embedding is None:
            return TaskContext(embedding=embedding, meta={"reflections": "none", "n_reflections": 0})
        blocks: list[str] = []
        shown: list[Abstraction] = []
        sources: list[str] = []
        for key, _sim in self._similar_tasks(task, embedding):
            refl = self._recent(key)
            if not refl:
                continue
            source = self._record(refl[-1].source_records[0]) if refl[-1].source_records else None
            instruction = " ".join(source.task.instruction.split()) if source is not None else key
            blocks.append(
                HEADER_SIMILAR
                + "\n"
                + PREAMBLE_SIMILAR.format(instruction=instruction)
                + "\n"
                + numbered_lines([a.text for a in refl])
            )
            shown.extend(refl)
            sources.append(key)
        if not shown:
            return TaskContext(embedding=embedding, meta={"reflections": "none", "n_reflections": 0})
        return TaskContext(
            blocks=blocks,
            parents=tuple(a.abstraction_id for a in shown),
            embedding=embedding,
            meta={"reflections": "similar_task", "n_reflections": len(shown), "source_tasks": sources},
        )

    def learn(self, task: Task, ctx: TaskContext, episode: EpisodeResult, *, iteration: int, position: int) -> None:
        if self._frozen:
            raise FrozenStateError("Reflexion is frozen (held-out evaluation may not write its state)")
        with self._lock:
            rec = self.memory.add(
                task,
                episode.trajectory,
                episode.outcome,
                embedding=ctx.embedding,
                parents=ctx.parents,
                iteration=iteration,
            )
            if episode.outcome.success or episode.outcome.infra_failure:
                return
            previous = self.reflections_for(task.key)[-self.max_reflections :]
            user = REFLECTION_PROMPT.format(
                instruction=task.instruction,
                trajectory=format_record(rec, limits=self.limits),
                previous=numbered_lines([a.text for a in previous]) if previous else NO_PREVIOUS_REFLECTIONS,
            )
            reply = self.ctx.llm.chat(
                [{"role": "system", "content": REFLECTION_SYSTEM}, {"role": "user", "content": user}],
                purpose="reflection",
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                tags={"phase": "train", "iteration": iteration, "task": task.key},
            )
            text = reply.text.strip()
            if not text:
                log.warning("%s: empty reflection; nothing stored", task.key)
                return
            self.store.add(
                text,
                kind="reflection",
                parents=ctx.parents,
                created_iteration=iteration,
                source_records=(rec.record_id,),
                task_type=task.task_type,
                name=task.key,
                embedding=ctx.embedding,
            )

    def snapshot(self, iteration: int, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.store.snapshot(path, method=self.name, iteration=iteration, n_trajectories=len(self.memory))

    def stores(self) -> list[Any]:
        return [self.memory, self.store]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "max_reflections": self.max_reflections,
            "transfer": self.transfer,
            "transfer_tasks": self.transfer_tasks,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "trajectory_chars": self.trajectory_chars,
        }
