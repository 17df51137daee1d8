"""AutoRefine's skill library rules (paper Appendix D.3): the utility score, multi-query MMR selection, the
injected block, and the validation and naming of evolved skills.

The method itself is ``methods/autorefine.py`` (its docstring gives the kit's answers to what D.3 leaves
open); the prompts and the readers of their replies are ``methods/autorefine_prompts.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from antipersist_lib.memory.abstraction_store import Abstraction
from antipersist_lib.memory.similarity import EmbeddingMatrix

SKILL_KINDS = ("general", "mistake", "task")
SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
DYN = re.compile(r"^dyn-(\d+)$")
WHY = re.compile(r"why\s+it\s+works", re.IGNORECASE)
SKILLS_HEADER = "## Skills"

# ---------------------------------------------------------------------------------------------
# (i) utility score
# ---------------------------------------------------------------------------------------------


def utility_score(n_inj: int, n_succ: int, eps: float = 1e-3) -> float:
    """score(s) = n_succ / (n_inj + eps) * ln(1 + n_inj)  (Eq. 4)."""
    return n_succ / (n_inj + eps) * math.log1p(n_inj)


# ---------------------------------------------------------------------------------------------
# (ii) MMR selection and the injected block
# ---------------------------------------------------------------------------------------------


def select_skills(
    query_vectors: Sequence[np.ndarray],
    skill_vectors: Sequence[np.ndarray],
    *,
    floor: float,
    lam: float,
    k: int,
) -> list[tuple[int, float]]:
    """Indices (into ``skill_vectors``) chosen by floor + MMR, in selection order, with rel.

    rel(s) = max_q cos(q, s); candidates with rel < floor are dropped; then repeatedly pick
    argmax lam * rel(s) - (1 - lam) * max_{s' picked} cos(s, s') (0 before the first pick).
    """
    if not query_vectors or not skill_vectors or k <= 0:
        return []
    mat = EmbeddingMatrix()
    for v in skill_vectors:
        mat.append(np.asarray(v, dtype=np.float64))
    rel = np.max(np.stack([mat.similarities(np.asarray(q, dtype=np.float64)) for q in query_vectors]), axis=0)
    # ties: higher relevance first, then the earlier (older) skill
    pool = sorted((i for i in range(len(rel)) if rel[i] >= floor), key=lambda i: (-rel[i], i))
    chosen: list[int] = []
    redundancy = np.zeros(len(rel), dtype=np.float64)
    while pool and len(chosen) < k:
        best, best_val = None, -math.inf
        for i in pool:
            val = lam * rel[i] - ((1.0 - lam) * redundancy[i] if chosen else 0.0)
            if val > best_val:
                best, best_val = i, val
        assert best is not None
        chosen.append(best)
        pool.remove(best)
        sims = mat.similarities(mat.row(best))
        redundancy = np.maximum(redundancy, sims) if len(chosen) > 1 else sims
    return [(i, float(rel[i])) for i in chosen]


def format_skills(skills: Sequence[Abstraction]) -> str:
    if not skills:
        return ""
    body = "\n\n".join(f"### {a.name or a.abstraction_id}\n{a.text.strip()}" for a in skills)
    return f"{SKILLS_HEADER}\nSkills learned from earlier episodes; apply those that fit this task.\n\n{body}"


# ---------------------------------------------------------------------------------------------
# (iv) validation and names of evolved skills
# ---------------------------------------------------------------------------------------------


_KIND_ALIASES = {
    "general": "general",
    "general-skill": "general",
    "general_skill": "general",
    "generic": "general",
    "mistake": "mistake",
    "mistakes": "mistake",
    "common-mistake": "mistake",
    "common_mistake": "mistake",
    "common-mistakes": "mistake",
    "common_mistakes": "mistake",
    "pitfall": "mistake",
    "pitfalls": "mistake",
    "task": "task",
    "task-specific": "task",
    "task_specific": "task",
    "task-type": "task",
    "task_type": "task",
}


def normalize_skill(raw: dict[str, Any], known_task_types: Iterable[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(skill, None) or (None, reason). ``name`` is returned as given (renaming comes later)."""
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        return None, "no content"
    if not WHY.search(content):
        return None, "no 'Why it works' section"
    kind = _KIND_ALIASES.get(str(raw.get("kind") or "").strip().lower(), "general")
    task_type = raw.get("task_type")
    task_type = task_type.strip() if isinstance(task_type, str) and task_type.strip() else None
    if kind == "task" and (task_type is None or task_type not in set(known_task_types)):
        kind = "general"
    if kind != "task":
        task_type = None
    name = raw.get("name")
    return {
        "name": name.strip() if isinstance(name, str) else None,
        "kind": kind,
        "task_type": task_type,
        "content": content.strip(),
    }, None


def next_dyn_index(names: Iterable[str | None]) -> int:
    """Smallest N above the largest existing dyn-N index (1 when there is none)."""
    top = 0
    for n in names:
        m = DYN.match(n or "")
        if m:
            top = max(top, int(m.group(1)))
    return top + 1


def assign_names(skills: list[dict[str, Any]], existing: Iterable[str | None]) -> list[dict[str, Any]]:
    """Rename non-slug or colliding names to dyn-N (N above every existing dyn index)."""
    taken = {n for n in existing if n}
    out = []
    for s in skills:
        name = s.get("name")
        if not isinstance(name, str) or not SLUG.match(name) or name in taken:
            name = f"dyn-{next_dyn_index(taken)}"
        taken.add(name)
        out.append({**s, "name": name})
    return out
