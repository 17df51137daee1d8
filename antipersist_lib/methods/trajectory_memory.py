"""Trajectory memory (Section 4.1): store every training trajectory, show the top-B similar ones.

Retrieval is Anti-Persistence's ``none`` mode without the bandit or synthesis: top-B records of
any outcome (same task type), shown verbatim with their outcomes under the factual-context
header. So the comparison with Anti-Persistence isolates mode selection and on-demand
synthesis. The kit's choice (the paper says only "retrieves stored trajectories"): records of
both outcomes, labelled, as in the ``none`` mode. ``seed_pool=<path>`` starts the store from a
fixed trajectory pool (``core.seeding``), as Anti-Persistence's does.
"""

from __future__ import annotations

from typing import Any

from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.core.config import TABLE3
from antipersist_lib.core.seeding import check_seed_pool, seed_store
from antipersist_lib.core.synthesis import synthesize
from antipersist_lib.memory.trajectory_store import TrajectoryStore
from antipersist_lib.methods.base import Method, MethodContext, TaskContext, take_params
from antipersist_lib.records import Task
from antipersist_lib.rundir import RunDirectory


class TrajectoryMemoryMethod(Method):
    name = "trajectory_memory"
    state_files = (RunDirectory.TRAJECTORIES,)
    #: B and the task-type filter as Anti-Persistence's (Table 3, ``anti_persistence.TABLE3``)
    DEFAULTS: dict[str, Any] = {"budget": TABLE3.budget, "task_filter": TABLE3.task_filter, "seed_pool": None}

    def __init__(self, ctx: MethodContext, **params: Any) -> None:
        super().__init__(ctx)
        self.params = take_params(params, self.DEFAULTS, self.name)
        if int(self.params["budget"]) < 1:
            raise ValueError(f"budget must be >= 1, got {self.params['budget']}")
        self.memory = TrajectoryStore(
            self.path(RunDirectory.TRAJECTORIES), task_filter=self.params["task_filter"], fsync=ctx.fsync
        )
        self.seed_pool = check_seed_pool(self.params.get("seed_pool"))  # subclasses may not take it

    def begin(self) -> None:
        if self.seed_pool is not None:
            seed_store(self.memory, self.seed_pool, self.ctx.embedder, prefix_chars=TABLE3.embed_prefix_chars)

    def records_context(self, task: Task, embedding: Any) -> tuple[str, tuple[int, ...]]:
        got = self.memory.retrieve(embedding, "none", task, budget=int(self.params["budget"]))
        g = synthesize("none", task.instruction, got, None)
        return g.text, g.record_ids

    def prepare(
        self, task: Task, initial_observation: str, *, phase: str, iteration: int, position: int
    ) -> TaskContext:
        emb = self.embed_task(task, initial_observation, phase, iteration)
        text, ids = self.records_context(task, emb)
        return TaskContext(blocks=[text], embedding=emb, meta={"retrieved_ids": list(ids)})

    def learn(self, task: Task, ctx: TaskContext, episode: EpisodeResult, *, iteration: int, position: int) -> None:
        self.memory.add(
            task, episode.trajectory, episode.outcome, embedding=ctx.embedding, parents=ctx.parents, iteration=iteration
        )

    def stores(self) -> list[Any]:
        return [self.memory]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **self.params}
