"""ACE's generator on a real engine: run a pool record's task with the playbook in context.

The original ACE learns from the generator's own attempts: the generator answers each training
task with the current playbook, and the reflector reads that attempt with its outcome (ACE_GT also
with the ground-truth solution).
``EpisodeRollout`` is that generator for an agent benchmark: it resets the benchmark's engine to
the record's task, runs the kit's ReAct agent (``core.agent.run_episode``) with the rendered
playbook as a context block, and returns the attempt as a ``PoolRecord`` the reflector can read.
One engine serves every call (the builder calls it one task at a time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from antipersist_lib.consolidation.pool import PoolRecord
from antipersist_lib.core.agent import AgentConfig, run_episode

#: the source label of a generator attempt (the pool's own records keep theirs)
ROLLOUT_SOURCE = "ace_generator"


@dataclass
class EpisodeRollout:
    """``(record, playbook) -> PoolRecord``: one episode of ``record.task`` on ``env`` by ``llm``."""

    env: Any
    llm: Any
    config: AgentConfig = field(default_factory=AgentConfig)
    builder: str = "ace"
    calls: int = 0

    def __call__(self, record: PoolRecord, playbook: str) -> PoolRecord:
        if not isinstance(record, PoolRecord):
            raise TypeError(f"a rollout runs a PoolRecord's task, got {type(record).__name__}")
        self.calls += 1
        result = run_episode(
            self.env,
            record.task,
            self.llm,
            context_blocks=[playbook] if playbook else [],
            config=self.config,
            tags={"builder": self.builder, "role": "generator", "task": record.rid},
        )
        return PoolRecord(
            rid=f"{record.rid}#attempt{self.calls}",
            task=record.task,
            trajectory=result.trajectory,
            outcome=result.outcome,
            source=ROLLOUT_SOURCE,
        )
