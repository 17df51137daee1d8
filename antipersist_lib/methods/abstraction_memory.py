"""Abstraction memory and joint memory (Section 4.1), with the LLM-judge admission filter (F.2).

Abstraction memory keeps what Anti-Persistence discards: after every training episode it synthesizes
one abstraction with the operator phi (``strategic`` after a success, ``corrective`` after a
failure), stores it in S_k and shows the top-B stored abstractions at task time. Joint memory shows
and updates both the trajectory memory and S_k. ``judge=True`` admits a new abstraction only if the
judge model accepts it; ``plant`` admits a pairs file's planted skills to S_0.

The kit's reading of the update rule (the paper does not spell it out), the planted skills and the
judge are documented in docs/methods.md, "Abstraction memory and joint memory"; the planted-skill
study in docs/reproduction.md.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.core.config import TABLE3
from antipersist_lib.core.planted import DELETION_REASON, PLANT_DEFAULTS, Plant
from antipersist_lib.core.seeding import SEED_ITERATION
from antipersist_lib.core.skill_layer import JUDGE_LOG, format_stored
from antipersist_lib.core.synthesis import synthesize
from antipersist_lib.jsonl import JsonlWriter
from antipersist_lib.memory.abstraction_store import AbstractionStore, parents_of_records
from antipersist_lib.memory.trajectory_store import Retrieved, abstraction_type_filter
from antipersist_lib.methods.base import MethodContext, TaskContext, take_params
from antipersist_lib.methods.trajectory_memory import TrajectoryMemoryMethod
from antipersist_lib.records import Task
from antipersist_lib.rundir import RunDirectory

JUDGE_PROMPT = """\
An agent wrote the following guidance after an episode of this task:
Task: {instruction}

Guidance:
{guidance}

Would following this guidance help an agent solve tasks of this kind, and is every statement in
it consistent with the episode evidence below?
{evidence}

Answer with one word on the first line: ACCEPT or REJECT. Then one sentence of justification."""
#: abstraction and joint memory's own prompt family ("abstraction"; their synthesis uses the kit's)
PROMPTS: dict[str, str] = {"abstraction_judge": JUDGE_PROMPT}


#: what the judge's reply said: the first ACCEPT or REJECT in it, or neither
JUDGE_VERDICTS = ("accept", "reject", "unparseable")


def judge_verdict(text: str) -> str:
    """ "accept" or "reject" (the first of the two words in the reply), "unparseable" when it has neither."""
    m = re.search(r"\b(ACCEPT|REJECT)\b", (text or "").upper())
    return "unparseable" if m is None else m.group(1).lower()


def judge_accepts(text: str) -> bool:
    return judge_verdict(text) == "accept"


class AbstractionMemory(TrajectoryMemoryMethod):
    """S_k of synthesized guidance; M_k kept only as synthesis input (never shown)."""

    name = "abstraction_memory"
    prompt_families = ("kit", "abstraction")
    state_files = (RunDirectory.TRAJECTORIES, RunDirectory.ABSTRACTION_EVENTS, JUDGE_LOG, RunDirectory.CANDIDATES)
    #: B, the task-type filter and the synthesis tokens as Anti-Persistence's (Table 3: ``TABLE3``)
    DEFAULTS: dict[str, Any] = {
        "budget": TABLE3.budget,
        "task_filter": TABLE3.task_filter,
        "synthesis_max_tokens": TABLE3.synthesis_max_tokens,
        "judge": False,
        "judge_max_tokens": 64,
        "seed_pool": None,
        **PLANT_DEFAULTS,
    }
    show_trajectories = False

    @classmethod
    def uses_judge(cls, params: dict[str, Any]) -> bool:
        return bool(params.get("judge", cls.DEFAULTS["judge"]))

    def __init__(self, ctx: MethodContext, **params: Any) -> None:
        self.params = take_params(params, self.DEFAULTS, self.name)
        super().__init__(
            ctx,
            budget=self.params["budget"],
            task_filter=self.params["task_filter"],
            seed_pool=self.params["seed_pool"],
        )
        self.params = take_params(params, self.DEFAULTS, self.name)
        self.store = AbstractionStore(self.path(RunDirectory.ABSTRACTIONS), fsync=ctx.fsync)
        self._judge_log = JsonlWriter(self.path(JUDGE_LOG), fsync=ctx.fsync) if self.params["judge"] else None
        self.judge_unparseable = 0  # this session's unparseable judge replies (all of them: ``judge_counts``)
        self.plant = Plant.from_params(self.params, ctx.benchmark)
        self._candidates = (
            JsonlWriter(self.path(RunDirectory.CANDIDATES), fsync=ctx.fsync) if self.plant.reads else None
        )

    def prepare(
        self, task: Task, initial_observation: str, *, phase: str, iteration: int, position: int
    ) -> TaskContext:
        emb = self.embed_task(task, initial_observation, phase, iteration)
        blocks: list[str] = []
        meta: dict[str, Any] = {}
        if self.show_trajectories:
            text, ids = self.records_context(task, emb)
            blocks.append(text)
            meta["retrieved_ids"] = list(ids)
        kind = abstraction_type_filter(self.params["task_filter"], task)  # S_k at M_k's granularity
        items = [] if emb is None else self.store.search(emb, k=int(self.params["budget"]), task_type=kind)
        blocks.append(format_stored(items))
        parents = tuple(a.abstraction_id for a, _ in items)
        meta["abstractions_shown"] = list(parents)
        return TaskContext(blocks=blocks, parents=parents, embedding=emb, meta=meta)

    def begin(self) -> None:
        """With ``seed_pool``: M_0 starts from the pool (as trajectory memory's does), and S_0 from one
        abstraction per seeded record, synthesized exactly as after a training episode (strategic for a
        success), so this design starts from the same expert evidence as the trajectory-keeping ones.
        Idempotent on resume: a seeded record whose abstraction is stored is not synthesized again."""
        super().begin()
        self._plant_skills()
        if self.seed_pool is None:
            return
        done = {a.source_records[0] for a in self.store.history() if a.created_iteration == 0 and a.source_records}
        for rec in [r for r in self.memory if r.iteration == SEED_ITERATION and r.record_id not in done]:
            if rec.embedding is None or rec.outcome.infra_failure:
                continue
            self._abstract(rec.task, rec.record_id, rec.embedding, iteration=SEED_ITERATION, position=-1, phase="seed")

    def _plant_skills(self) -> None:
        """Admit the planted skills to S_0 under their provenance ids (idempotent on resume), each indexed
        by the embedding of its text, as a frozen layer's JSON skills are; a skill that cannot be embedded
        stops the run (it could never be retrieved, and the condition would silently be none)."""
        known = {a.abstraction_id for a in self.store.history()}
        todo = [s for s in self.plant.planted if s.skill_id not in known]
        if not todo:
            return
        vectors = self.ctx.embedder.embed_many([s.text for s in todo], tags={"phase": "plant", "iteration": 0})
        for skill, vec in zip(todo, vectors):
            if vec is None:
                raise RuntimeError(f"planted skill {skill.skill_id}: the embedding request failed; re-run to retry")
            self.store.add(
                skill.text,
                kind="planted",
                abstraction_id=skill.skill_id,
                created_iteration=SEED_ITERATION,
                task_type=skill.task_type,
                name=skill.pair_id,
                embedding=vec,
            )

    def begin_iteration(self, iteration: int) -> None:
        """Parent deletion: once the planted iterations are over, the planted skills leave S_k (their
        descendants stay, and records keep naming them in P(m))."""
        if iteration <= self.plant.iterations:
            return
        for skill in self.plant.planted:
            if skill.skill_id in self.store:
                self.store.retire(skill.skill_id, reason=DELETION_REASON)

    def synthesis_input(self, task: Task, rec_id: int, embedding: Any) -> tuple[str, list[Retrieved]]:
        """H: the record ``rec_id`` plus the most similar stored records of the same outcome."""
        new = self.memory[rec_id]
        assert new.record_id == rec_id
        budget = int(self.params["budget"])
        success = new.outcome.success
        mode = "strategic" if success else "corrective"
        role = "success" if success else "failure"
        others = [
            r
            for r in self.memory.search(embedding, k=budget, task=task, success=success, role=role)
            if r.record.record_id != rec_id
        ]
        h = [Retrieved(new, 1.0, role)] + others[: budget - 1]
        if not success:
            h += self.memory.search(embedding, k=1, task=task, success=True, role="contrast")
        return mode, h

    def learn(self, task: Task, ctx: TaskContext, episode: EpisodeResult, *, iteration: int, position: int) -> None:
        rec = self.memory.add(
            task, episode.trajectory, episode.outcome, embedding=ctx.embedding, parents=ctx.parents, iteration=iteration
        )
        if ctx.embedding is None or episode.outcome.infra_failure:
            return  # nothing to index the abstraction by / no evidence about the agent
        ctx.synthesis_calls += self._abstract(
            task, rec.record_id, ctx.embedding, iteration=iteration, position=position
        )

    def _abstract(
        self, task: Task, rec_id: int, embedding: Any, *, iteration: int, position: int, phase: str = "train"
    ) -> int:
        """Synthesize one abstraction from record ``rec_id`` and its neighbours and store it (unless empty or
        rejected by the judge); returns the synthesis calls made."""
        mode, h = self.synthesis_input(task, rec_id, embedding)
        tags = {"phase": phase, "iteration": iteration, "task": task.key}
        g = synthesize(
            mode,
            task.instruction,
            h,
            self.ctx.llm,
            max_tokens=int(self.params["synthesis_max_tokens"]),
            tags=tags,
            wrap=False,
        )
        parents = parents_of_records(r.record for r in h)
        admitted = None
        if g.text and (self._judge_log is None or self._judge(task, g.text, h, iteration, position, tags)):
            admitted = self.store.add(
                g.text,
                kind="guidance",
                parents=parents,
                created_iteration=iteration,
                source_records=[r.record.record_id for r in h],
                task_type=task.task_type,
                embedding=embedding,
            )
        if self._candidates is not None and g.kappa:
            self._candidates.append(
                {
                    "phase": phase,
                    "iteration": iteration,
                    "position": position,
                    "task": task.key,
                    "task_type": task.task_type,
                    "mode": mode,
                    "source_records": [r.record.record_id for r in h],
                    "parents": list(parents),
                    "empty": not g.text,
                    **self.plant.verdicts(g.text, task, [r.record.task for r in h]),
                    "admitted": admitted is not None,
                    "abstraction_id": None if admitted is None else admitted.abstraction_id,
                }
            )
        return g.kappa  # post-episode synthesis (training cost)

    def _judge(
        self, task: Task, text: str, h: list[Retrieved], iteration: int, position: int, tags: dict[str, Any]
    ) -> bool:
        from antipersist_lib.core.synthesis import format_blocks

        reply = self.ctx.judge.chat(
            [
                {
                    "role": "user",
                    "content": JUDGE_PROMPT.format(
                        instruction=task.instruction, guidance=text, evidence=format_blocks(h, "Episode")
                    ),
                }
            ],
            purpose="judge",
            temperature=0.0,
            max_tokens=int(self.params["judge_max_tokens"]),
            tags=tags,
        )
        verdict = judge_verdict(reply.text)
        ok = verdict == "accept"
        assert self._judge_log is not None
        self._judge_log.append(
            {"iteration": iteration, "position": position, "task": task.key, "accepted": ok, "verdict": verdict}
        )
        if verdict == "unparseable":
            self.judge_unparseable += 1
            warnings.warn(
                f"the judge's reply for task {task.key} (iteration {iteration}) says neither ACCEPT nor REJECT: "
                f"recorded as unparseable and not admitted ({self.judge_unparseable} this session; "
                f"{JUDGE_LOG} counts them apart from rejections). Reply: {reply.text[:120]!r}",
                stacklevel=2,
            )
        return ok

    def snapshot(self, iteration: int, path: Path) -> None:
        self.store.snapshot(path, iteration=iteration, method=self.name)

    def stores(self) -> list[Any]:
        return [self.memory, self.store]

    def close(self) -> None:
        super().close()
        for log in (self._judge_log, self._candidates):
            if log is not None:
                log.close()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), **self.plant.describe()}


class JointMemory(AbstractionMemory):
    """Both stores in context: top-B trajectories and top-B stored abstractions."""

    name = "joint_memory"
    show_trajectories = True
