"""Every compared method, by name (paper Section 4.1 and the ablations).

| name | what it keeps and shows |
|---|---|
| react | nothing |
| reflexion | per-task verbal reflections after failures |
| expel | extracted insights (ADD/EDIT/UPVOTE/DOWNVOTE) + similar successful trajectories |
| autorefine | utility-scored skills, multi-query MMR retrieval, contrastive evolver, pruning (D.3) |
| trajectory_memory | stored trajectories (top-B, any outcome) |
| abstraction_memory | stored synthesized abstractions (top-B); ``judge=True``: LLM-judge admission (F.2) |
| joint_memory | both |
| anti_persistence | trajectories + outcome log, temporary guidance; variants: ``persist``, ``policy``, ``fixed_mode``, ``frozen_skills`` |
| frozen_skills | a fixed skill library (none / useful / toxic, AppWorld study F.1) |
| consolidated_memory | a memory bank built offline by ``consolidation`` (the faulty-memories study's evaluation) |
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from antipersist_lib.core import prompts
from antipersist_lib.methods.base import Method, MethodContext, TaskContext

METHODS: dict[str, tuple[str, str]] = {
    "react": ("antipersist_lib.methods.react", "ReAct"),
    "reflexion": ("antipersist_lib.methods.reflexion", "Reflexion"),
    "expel": ("antipersist_lib.methods.expel", "ExpeL"),
    "autorefine": ("antipersist_lib.methods.autorefine", "AutoRefine"),
    "trajectory_memory": ("antipersist_lib.methods.trajectory_memory", "TrajectoryMemoryMethod"),
    "abstraction_memory": ("antipersist_lib.methods.abstraction_memory", "AbstractionMemory"),
    "joint_memory": ("antipersist_lib.methods.abstraction_memory", "JointMemory"),
    "anti_persistence": ("antipersist_lib.methods.anti_persistence", "AntiPersistence"),
    "frozen_skills": ("antipersist_lib.methods.frozen_skills", "FrozenSkills"),
    "consolidated_memory": ("antipersist_lib.consolidation.method", "ConsolidatedMemory"),
}
#: the eight methods of Table 1, in the paper's row order
TABLE1_METHODS: tuple[str, ...] = (
    "react",
    "reflexion",
    "expel",
    "autorefine",
    "trajectory_memory",
    "abstraction_memory",
    "joint_memory",
    "anti_persistence",
)


def method_class(name: str) -> type[Method]:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; expected one of {tuple(METHODS)}")
    module, cls = METHODS[name]
    return getattr(import_module(module), cls)


def make_method(name: str, ctx: MethodContext, **params: Any) -> Method:
    return method_class(name)(ctx, **params)


def import_all() -> None:
    """Import every method module (they load lazily), e.g. so that all their prompts are registered."""
    for module, _ in METHODS.values():
        import_module(module)


def prompt_texts() -> dict[str, str]:
    """Every prompt of the kit and of every method (ExpeL, Reflexion, AutoRefine, the abstraction
    judge), by name: the method modules load lazily, so they are imported first."""
    import_all()
    return prompts.prompt_texts()


def prompt_hashes() -> dict[str, str]:
    """The hashes a run manifest records: every prompt, whichever method ran."""
    return prompts.prompt_hashes(prompt_texts())


def validate_method_params(name: str, params: dict[str, Any], benchmark: str = "errandworld") -> None:
    """Build the method once with no model, in a throw-away state folder, so that unknown or bad
    parameters fail before a grid starts (constructors validate; none of them calls a model)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="antipersist-check-") as tmp:
        make_method(name, MethodContext(None, None, Path(tmp), 0, benchmark, fsync=False), **params).close()


__all__ = [
    "import_all",
    "prompt_hashes",
    "prompt_texts",
    "validate_method_params",
    "METHODS",
    "TABLE1_METHODS",
    "Method",
    "MethodContext",
    "TaskContext",
    "make_method",
    "method_class",
]
