"""``consolidated_memory``: evaluate a built memory bank the way the paper does (§3).

Every entry of the bank goes into every context ("we provide all memory entries in context"),
and nothing is ever learned or written: the bank was built offline (``regimes.build_memory``),
so a run uses ``train_per_iteration=0`` and only held-out episodes. ``memory`` is a bank JSON or
a ``snapshots.jsonl`` with ``step`` (default: its last step), so each point of a
utility-vs-updates curve is one run of this method. The paper averages two repeats per
question; that is the run's seeds, not this method's business.
"""

from __future__ import annotations

import hashlib
from typing import Any

from antipersist_lib.consolidation import prompts as _prompts  # noqa: F401  (registers the builders' prompts)
from antipersist_lib.consolidation.bank import load_bank
from antipersist_lib.methods.base import Method, MethodContext, TaskContext, take_params
from antipersist_lib.records import Task


class ConsolidatedMemory(Method):
    name = "consolidated_memory"
    uses_embeddings = False  # the bank's entries all go in context: no retrieval
    DEFAULTS: dict[str, Any] = {"memory": None, "step": None}

    def __init__(self, ctx: MethodContext, **params: Any) -> None:
        super().__init__(ctx)
        self.params = take_params(params, self.DEFAULTS, self.name)
        memory, step = self.params["memory"], self.params["step"]
        if not isinstance(memory, str) or not memory:
            raise ValueError(
                f"method {self.name!r} needs memory=<bank.json or snapshots.jsonl> (a path), got {memory!r}"
            )
        self.bank = load_bank(memory, step)
        self.block = self.bank.render()
        self.digest = hashlib.sha256(self.block.encode("utf-8")).hexdigest()[:16]

    def prepare(
        self, task: Task, initial_observation: str, *, phase: str, iteration: int, position: int
    ) -> TaskContext:
        return TaskContext(
            blocks=[self.block] if self.block else [],
            meta={"memory_step": self.bank.step, "memory_entries": len(self.bank.entries), "memory_hash": self.digest},
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "memory": self.params["memory"],
            "step": self.bank.step,
            "builder": self.bank.method,
            "n_entries": len(self.bank.entries),
            "memory_hash": self.digest,
            "build": self.bank.meta,
        }
