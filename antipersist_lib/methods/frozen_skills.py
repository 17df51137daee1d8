"""A frozen skill library in every context (the AppWorld skill-content study, F.1).

The paper compares no supplied skills, useful skills and toxic skills (matched pairs with the
same scope, correct vs incorrect procedural rule) with the library frozen. Run this method three
times: ``library=None`` (no skills), ``library=useful.json``, ``library=toxic.json``. A library
is a JSON list of {"name", "content"} objects; the kit ships no AppWorld library (the paper's
were written by GPT-5.5 and are not published), so users bring their own.

The same library format is Anti-Persistence's ``frozen_skills`` layer (Figure 11b), which can
also take a run directory: its last abstraction snapshot becomes the library.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from antipersist_lib.methods.base import Method, MethodContext, TaskContext, take_params
from antipersist_lib.records import Task
from antipersist_lib.rundir import RunDirectory

SKILLS_HEADER = "## Skills (frozen library)"


def load_skill_library(path: str | Path) -> list[dict[str, str]]:
    """A JSON list of {"name", "content"} skills, or a run directory whose latest abstraction
    snapshot becomes the library (Figure 11b: judge-filtered skills frozen as a persistent layer).
    Errors name the file and the bad entry."""
    p = Path(path)
    if p.is_dir():
        return _library_from_run(p)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read skill library {p}: {exc}") from exc
    if not isinstance(data, list):
        raise ValueError(f"skill library {p} must be a JSON list of {{name, content}} objects")
    out = []
    for i, s in enumerate(data):
        if not isinstance(s, dict) or not isinstance(s.get("content"), str) or not s["content"].strip():
            raise ValueError(f"skill library {p}: entry {i} needs a non-empty 'content' string")
        out.append({"name": str(s.get("name", f"skill-{i}")), "content": s["content"].strip()})
    return out


def _library_from_run(run_dir: Path) -> list[dict[str, str]]:
    snaps = RunDirectory(run_dir).snapshot_paths()
    if not snaps:
        raise ValueError(
            f"skill library {run_dir}: a run directory must hold snapshots/abstractions_iter_*.json "
            "(run an abstraction-memory method there first)"
        )
    data = json.loads(snaps[-1].read_text(encoding="utf-8"))
    return [
        {"name": a.get("name") or a["abstraction_id"], "content": a["text"].strip()}
        for a in data.get("active", [])
        if a.get("text", "").strip()
    ]


def format_skills(skills: list[dict[str, str]]) -> str:
    if not skills:
        return ""
    return SKILLS_HEADER + "\n" + "\n\n".join(f"### {s['name']}\n{s['content']}" for s in skills)


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
