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

from collections.abc import Iterable
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


def params_as_recorded(name: str, params: dict[str, Any], manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The parameters to build method ``name`` with for a run whose manifest is ``manifest`` (None:
    a new run). ``params`` plus, for each parameter the method gained after that run was recorded
    (``LEGACY_PARAMS``) and that neither ``params`` nor the manifest's ``method_config`` names, the
    value the run behaved as: so an old run resumes and replays as it ran, not with a new default.
    The run's identity (its ``method_params``) is unchanged."""
    if manifest is None:
        return dict(params)
    if not isinstance(manifest, dict):
        raise ValueError(f"manifest must be a mapping, got {type(manifest).__name__}")
    recorded = manifest.get("method_config") or manifest.get("method_params") or {}
    out = dict(params)
    for key, value in method_class(name).LEGACY_PARAMS.items():
        if key not in recorded and key not in out:
            out[key] = value
    return out


#: every prompt family a run of the kit's methods can use: name -> the module that exports it as ``PROMPTS``.
#: A method names the families it uses (``Method.prompt_families``) and its runs hash exactly those, so a
#: manifest does not depend on what the launching process happened to import.
PROMPT_FAMILIES: dict[str, str] = {
    "kit": "antipersist_lib.core.prompts",
    "reflexion": "antipersist_lib.methods.reflexion",
    "expel": "antipersist_lib.methods.expel",
    "autorefine": "antipersist_lib.methods.autorefine_prompts",
    "abstraction": "antipersist_lib.methods.abstraction_memory",
}


def family_prompts(names: Iterable[str] | None = None) -> list[dict[str, str]]:
    """The named families' templates (default: every family), each a name -> template mapping."""
    names = list(PROMPT_FAMILIES) if names is None else list(names)
    unknown = [n for n in names if n not in PROMPT_FAMILIES]
    if unknown:
        raise ValueError(f"unknown prompt famil(ies) {unknown}; known: {sorted(PROMPT_FAMILIES)}")
    return [import_module(PROMPT_FAMILIES[n]).PROMPTS for n in names]


def prompt_texts(names: Iterable[str] | None = None) -> dict[str, str]:
    """Every template of the named families (default: all), by name."""
    return {name: text for family in family_prompts(names) for name, text in family.items()}


def prompt_hashes(names: Iterable[str] | None = None) -> dict[str, str]:
    """The hashes of the named families' templates (default: all), by name: what a run manifest records."""
    return prompts.prompt_hashes(*family_prompts(names))


class _EndpointOnly:
    """The backbone as a method sees it while being validated: its endpoint (a constructor may read
    its context length), and no way to call it."""

    def __init__(self, endpoint: Any) -> None:
        self.endpoint = endpoint

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a method constructor called the backbone while its parameters were being validated")


def validate_method_params(
    name: str, params: dict[str, Any], benchmark: str = "errandworld", *, seed: int = 0, endpoint: Any = None
) -> None:
    """Build the method once with no model, in a throw-away state folder, so that unknown or bad
    parameters fail before a grid starts (constructors validate; none of them calls a model).
    ``seed``: the run's seed (a frozen layer's ``{seed}`` path is read for it); ``endpoint``: the
    backbone's endpoint, whose context length a whole-library frozen layer is checked against."""
    import tempfile
    from pathlib import Path

    llm = None if endpoint is None else _EndpointOnly(endpoint)
    with tempfile.TemporaryDirectory(prefix="antipersist-check-") as tmp:
        make_method(name, MethodContext(llm, None, Path(tmp), seed, benchmark, fsync=False), **params).close()


__all__ = [
    "PROMPT_FAMILIES",
    "family_prompts",
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
    "params_as_recorded",
]
