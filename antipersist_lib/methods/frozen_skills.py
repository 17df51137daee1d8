"""A frozen skill library as a method of its own: F.1 (the AppWorld skill-content study).

F.1 compares no supplied skills, useful skills and toxic skills (matched pairs with the same scope,
correct vs incorrect procedural rule) with the library frozen. Run ``frozen_skills`` three times:
``library=None`` (no skills), ``library=useful.json``, ``library=toxic.json``; every skill is in
every context. A library is a JSON list of {"name", "content"} objects (optionally "task_type"); the
kit ships no AppWorld library (the paper's were written by GPT-5.5 and are not published), so users
bring their own. The library's format and reader, and Anti-Persistence's frozen layer (F.2), are
``core.skill_layer``.
"""

from __future__ import annotations

from typing import Any

from antipersist_lib.core.skill_layer import format_skills, load_skill_library
from antipersist_lib.methods.base import Method, MethodContext, TaskContext, take_params
from antipersist_lib.records import Task


class FrozenSkills(Method):
    name = "frozen_skills"
    uses_embeddings = False
    DEFAULTS: dict[str, Any] = {"library": None}

    def __init__(self, ctx: MethodContext, **params: Any) -> None:
        super().__init__(ctx)
        self.params = take_params(params, self.DEFAULTS, self.name)
        self.skills = load_skill_library(self.params["library"]) if self.params["library"] else []

    def prepare(
        self, task: Task, initial_observation: str, *, phase: str, iteration: int, position: int
    ) -> TaskContext:
        return TaskContext(blocks=[format_skills(self.skills)], meta={"skills": [s["name"] for s in self.skills]})

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "library": self.params["library"], "n_skills": len(self.skills)}
