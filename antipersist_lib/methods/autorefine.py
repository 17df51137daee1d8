"""AutoRefine baseline (paper Appendix D.3): utility-scored skills, multi-query MMR retrieval,
a single-call contrastive skill evolver, and periodic percentile pruning.

Where each item of D.3 lives
----------------------------
(i) Utility score. ``utility_score(n_inj, n_succ, eps)`` = n_succ / (n_inj + eps) * ln(1 + n_inj)
    with eps = 1e-3 (``eps``). The metadata triple (n_inj, n_succ, t_create) is the store's
    ``AbstractionStats.n_injected`` / ``n_success`` and ``Abstraction.created_iteration``. It is
    persisted in the store's append-only event log (``skills/events.jsonl``, replayed on load);
    ``skills/metadata.json`` is a derived JSON view (id, name, kind, task type, n_inj, n_succ,
    t_create, score) rewritten atomically after every ``end_iteration``, "alongside the skill
    files" as the paper puts it. ``AutoRefine.scores()`` gives the current scores.
(ii) Multi-query retrieval, in ``prepare``: one backbone call (purpose ``query_rewrite``,
    counted in ``TaskContext.other_calls``) rewrites the task description into *strategy*,
    *pitfall* and *actions* queries (``parse_rewrite``: a JSON object, or three labelled
    lines); with the description they are embedded in ONE ``embed_many`` call.
    ``select_skills`` computes rel(s) = max cosine over the queries, drops candidates with
    rel < ``similarity_floor`` (0.30), and re-ranks the rest with MMR,
    lambda * rel(s) - (1 - lambda) * max_{s' selected} cos(s, s'), lambda = ``mmr_lambda``
    (0.7), keeping ``top_k`` (5), concatenated under ``## Skills``. Candidates: kind
    ``general`` (general-skill set), ``mistake`` (common-mistakes set) and ``task`` with the
    current task's ``task_type`` (task-type-specific set).
(iii) Percentile pruning, ``_prune``: at iteration l > 0 with l % ``prune_every`` == 0, among
    active skills with n_inj >= ``prune_min_injections`` (3), retire the floor(``prune_fraction``
    * #eligible) lowest-scoring (20%). "Single transaction": the list is first committed as one
    plan line in ``autorefine_steps.jsonl``, then applied as retire events (a resumed run
    re-applies the same plan); retiring removes the skill from S_k and from the in-memory
    embedding cache (rebuilt on the next ``prepare``); a checkpoint
    ``skills/metadata_iter_XX.json`` is written atomically.
(iv) Contrastive evolver, ``_evolve``: ONE call (purpose ``skill_evolution``) showing at most
    ``evolver_max_failures`` (4) failures and ``evolver_max_successes`` (4) successes of this
    iteration, under a benchmark-specific system preamble (``EVOLVER_PREAMBLES``: ALFWorld,
    WebShop, ScienceWorld; a generic one otherwise), asking for a JSON array of skills
    {name, kind, task_type, content} whose content has a "Why it works" section contrasting
    the success and failure evidence. ``parse_skill_array`` is the four-stage fallback parser
    (direct ``json.loads``; fenced-block stripping; the last top-level bracketed array;
    per-object balanced-brace scanning). Non-slug names become ``dyn-N`` (``next_dyn_index``).
(v) Update loop. Step 1 (reset of the training retrieval log) is logical: the log
    ``retrieval_train.jsonl`` is append-only and ``end_iteration(l)`` reads only the lines of
    iteration l. Step 2 is the protocol running ``prepare``/``learn``. ``end_iteration(l)`` runs
    step 3 (``_credit``: for each skill in an episode's prompt n_inj += 1, and n_succ += 1 if
    that episode succeeded; nothing else is credited), step 4 (``_evolve``, t_create = l) and
    step 5 (``_prune`` + checkpoint).
(vi) Frozen evaluation: ``freeze()`` freezes S_k and M_k. Held-out ``prepare`` still rewrites
    queries and retrieves, but writes no file: its retrievals go to ``heldout_log`` (memory
    only, cleared at every ``freeze()``) and to ``TaskContext.meta["injected"]`` (the protocol
    keeps held-out episode records apart). ``learn`` / ``end_iteration`` raise
    ``FrozenStateError`` while frozen.

Provenance: a trajectory's parents P(m) are the ids of the skills injected into its prompt; an
evolved skill's parents are P(H), the union of the parents of the trajectories shown to the
evolver (``source_records`` names those trajectories).

Choices the paper leaves open (the kit's answers)
-------------------------------------------------
* ``log`` is the natural logarithm (the ranking is the same in any base).
* Query rewriting happens for every episode, even when S_k has no candidate (the paper says "for
  each episode"), so every ``prepare`` costs exactly one rewrite call and one embedding call.
  Rewrite decoding: a JSON object with keys strategy / pitfall / actions, else lines labelled
  ``Strategy:`` / ``Pitfall:`` / ``Actions:``; whatever labels are found are used; if none is
  found only the original description is embedded (``meta["rewrite_ok"] = False``).
* The "task description" is ``task.instruction``; if that is empty, the first 500 characters of
  the initial observation stand in for it.
* A skill's retrieval embedding is the embedding of its content (what is injected), not of its
  name (which may be a meaningless ``dyn-N``). Embedded once, when the skill is added, and
  stored on the immutable abstraction. A skill whose embedding failed is kept but is never
  retrieved.
* "Below the threshold" is strict: rel >= 0.30 survives. MMR ties go to the higher relevance,
  then the older skill; the first pick has no redundancy term.
* Injection format: ``## Skills`` header, then ``### <name>`` and the content of each selected
  skill, in MMR order. ``TaskContext.parents`` lists the injected ids in the same order.
* Training retrieval log: one line per training episode, written by ``learn`` (injected ids AND
  outcome in one append, so a crash leaves the episode either fully logged or not at all); the
  key is (task type, description, sha256 of the initial observation) plus ``Task.key``. If an
  (iteration, position) appears twice (a re-run episode), the last line counts.
* Episodes that ended in an infrastructure failure (outcome not attributable to the agent) are
  stored and logged but neither credited in step 3 nor shown to the evolver.
* Evolver evidence: when there are more than 4 failures (or successes), 4 are drawn uniformly
  without replacement with ``random.Random("autorefine-evolver:<seed>:<iteration>")``, then shown
  in record order. With no usable episode at all the evolver is not called (no evidence); with
  only one outcome present it is called and the prompt says the other side is empty.
* The evolver prompt also lists the names of the active skills (names only) so the model does not
  re-create them, and the task types seen in training so ``task`` skills can name one.
* Skill validation: ``content`` must be a non-empty string containing "Why it works"
  (case-insensitive); otherwise the skill is rejected and counted in the step log. ``kind`` is
  lower-cased and mapped from common variants (mistakes, pitfall -> mistake; task-specific ->
  task); a missing or unknown kind becomes ``general``. A ``task`` skill whose task_type is
  missing or not a task type seen in training is kept as ``general`` (task_type null);
  general / mistake skills carry no task_type.
* Names: a name that is not a slug (``^[a-z0-9]+(?:-[a-z0-9]+)*$``, no case folding), or that
  collides with any skill name ever created (retired ones included) or earlier in the same
  batch, becomes ``dyn-N``, N = 1 + the largest dyn index among all names ever created and
  those already assigned in the batch (so names are never reused and ids stay immutable). No cap
  on the number of skills per evolver call.
* Pruning: k = floor(prune_fraction * #eligible), computed exactly (``fractions.Fraction``), so
  fewer than 5 eligible skills means nothing is pruned; ties in score are broken by older
  t_create first, then smaller id.
* Checkpoints are named ``skills/metadata_iter_XX.json`` (two-digit iteration).
* Crash safety of ``end_iteration``: step 3 is idempotent per skill (each skill gets one stats
  event per iteration, tagged ``credited_iteration``); the evolver's decoded skills and the prune
  list are committed as plan lines in ``autorefine_steps.jsonl`` before they are applied, so a
  resumed ``end_iteration`` re-applies them instead of calling the evolver again.
* Seed skills (``seed_skills``: a JSON list of {name, kind, task_type, content}) are added once,
  when the store is empty, with t_create = -1 (before iteration 0); they must be valid (slug
  names, unique, kind in general|mistake|task, task_type for task skills) or construction fails.
  They need not carry a "Why it works" section (that rule is for the evolver's output).
* Temperatures are 0; token budgets: rewrite ``rewrite_max_tokens`` (256), evolver
  ``evolver_max_tokens`` (2048).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import re
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.core import prompts
from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.core.synthesis import format_record
from antipersist_lib.errors import FrozenStateError
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, read_jsonl
from antipersist_lib.memory.abstraction_store import EVENTS_FILE, Abstraction, AbstractionStore, parents_of_records
from antipersist_lib.memory.similarity import EmbeddingMatrix
from antipersist_lib.memory.trajectory_store import MemoryRecord, TrajectoryStore
from antipersist_lib.methods.base import Method, MethodContext, TaskContext, take_params
from antipersist_lib.records import Task
from antipersist_lib.rundir import RunDirectory

log = logging.getLogger(__name__)

PHASES = ("train", "heldout")
SKILL_KINDS = ("general", "mistake", "task")
SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
DYN = re.compile(r"^dyn-(\d+)$")
WHY = re.compile(r"why\s+it\s+works", re.IGNORECASE)
SKILLS_HEADER = "## Skills"
QUERY_LABELS = ("strategy", "pitfall", "actions")

# ---------------------------------------------------------------------------------------------
# Prompts (the kit's own wording)
# ---------------------------------------------------------------------------------------------

REWRITE_SYSTEM = "You turn task descriptions into short search queries for a library of agent skills."

REWRITE_PROMPT = """\
An agent is about to attempt this task:
{description}

Rewrite the task as three short search queries for its skill library:
- Strategy: the overall approach or plan the task calls for;
- Pitfall: the mistakes an agent is most likely to make on it;
- Actions: the concrete commands or operations it will need.

Answer with exactly these three lines and nothing else:
Strategy: <query>
Pitfall: <query>
Actions: <query>"""

EVOLVER_PREAMBLES: dict[str, str] = {
    "alfworld": (
        "You maintain the skill library of an agent in ALFWorld, a text-based household simulator. "
        "The agent goes to receptacles, opens and closes them, takes and puts objects, and uses "
        "appliances (a microwave to heat, a fridge to cool, a sink basin to clean, a desk lamp to "
        "look at something) to finish pick-and-place style household goals within a step budget."
    ),
    "webshop": (
        "You maintain the skill library of an agent in WebShop, a simulated online store. The "
        "agent writes search queries, opens result pages, picks product options such as size or "
        "colour, and buys one item that must match the attributes, options and price limit the "
        "shopper asked for."
    ),
    "scienceworld": (
        "You maintain the skill library of an agent in ScienceWorld, a text-based simulator of "
        "elementary science experiments. The agent moves between rooms, picks up and moves "
        "objects and containers, operates devices (stoves, freezers, thermometers), changes and "
        "measures states of matter, and must focus on the right object to complete multi-step "
        "procedures."
    ),
}
EVOLVER_PREAMBLE_GENERIC = (
    "You maintain the skill library of an agent that completes tasks in a text-based environment, "
    "one command at a time."
)

EVOLVER_PROMPT = """\
Below are episodes from the latest round of training: up to {max_failures} that FAILED and up to \
{max_successes} that SUCCEEDED. Compare them. Work out what the successful episodes did that the \
failed ones did not, and which mistakes made the failed ones go wrong.

From this contrast, write new reusable skills. Each skill is a JSON object with these fields:
- "name": a short slug of lowercase letters, digits and hyphens (for example "search-closed-receptacles");
- "kind": "general" (helps on any task), "mistake" (a common mistake and how to avoid it) or "task" (only for one task type);
- "task_type": for kind "task", one of: {task_types}; otherwise null;
- "content": when the skill applies and what to do, in a few lines, followed by a section that \
starts with the line "Why it works:" and contrasts the success evidence with the failure evidence above.

Skills already in the library (do not write them again): {existing}

Only write skills that the episodes support. Reply with a JSON array of skill objects and nothing \
else; reply [] if the episodes teach nothing new.

=== Failed episodes ===
{failures}

=== Successful episodes ===
{successes}"""

NO_EPISODES = "(none in this round)"

prompts.register_prompt("autorefine_rewrite_system", REWRITE_SYSTEM)
prompts.register_prompt("autorefine_rewrite", REWRITE_PROMPT)
prompts.register_prompt("autorefine_evolver", EVOLVER_PROMPT)
prompts.register_prompt("autorefine_preamble_generic", EVOLVER_PREAMBLE_GENERIC)
for _bench, _text in EVOLVER_PREAMBLES.items():
    prompts.register_prompt(f"autorefine_preamble_{_bench}", _text)


# ---------------------------------------------------------------------------------------------
# (i) utility score
# ---------------------------------------------------------------------------------------------


def utility_score(n_inj: int, n_succ: int, eps: float = 1e-3) -> float:
    """score(s) = n_succ / (n_inj + eps) * ln(1 + n_inj)  (Eq. 4)."""
    return n_succ / (n_inj + eps) * math.log1p(n_inj)


# ---------------------------------------------------------------------------------------------
# (ii) query rewriting and MMR selection
# ---------------------------------------------------------------------------------------------

_LABEL_KEYS = {
    "strategy": "strategy",
    "strategies": "strategy",
    "pitfall": "pitfall",
    "pitfalls": "pitfall",
    "action": "actions",
    "actions": "actions",
}
# Written so that no two adjacent repeats match the same characters and the leading run stays
# on its line: the older form took cubic time on a reply of many blank lines (1000 newlines:
# 8 s). It finds the same labels and values.
_LABEL_LINE = re.compile(
    r"^(?:[^\S\n]|[\-*#>\d.)])*(strategy|strategies|pitfalls?|actions?)\s*(?:\*+\s*)?[:\-\u2013\u2014]\s*(?:\*+\s*)?(\S(?:.*\S)?)",
    re.IGNORECASE | re.MULTILINE,
)


def _clean_query(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = "; ".join(str(v) for v in value if isinstance(v, (str, int, float)))
    if not isinstance(value, str):
        return ""
    return " ".join(value.strip().strip("*\"'`").split())


def parse_rewrite(text: str) -> dict[str, str]:
    """Decode the strategy / pitfall / actions queries; {} when nothing usable is found.

    Accepts a JSON object (optionally fenced or surrounded by prose) with those keys, or lines
    labelled ``Strategy:``, ``Pitfall:``, ``Actions:`` (bullets, numbering and bold allowed).
    """
    out: dict[str, str] = {}
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except (ValueError, RecursionError):  # also too-deep nesting, over-long integers
            continue
        if isinstance(obj, dict):
            for k, v in obj.items():
                label = _LABEL_KEYS.get(str(k).strip().lower())
                q = _clean_query(v)
                if label and q and label not in out:
                    out[label] = q
            if out:
                return out
    for m in _LABEL_LINE.finditer(text):
        label = _LABEL_KEYS[m.group(1).lower()]
        q = _clean_query(m.group(2))
        if q and label not in out:
            out[label] = q
    return out


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
# (iv) the four-stage fallback parser and skill validation
# ---------------------------------------------------------------------------------------------


def _skill_items(value: Any) -> list[dict[str, Any]] | None:
    """A decoded value as a list of skill dicts, or None when it is not one."""
    if isinstance(value, dict):
        inner = value.get("skills")
        if isinstance(inner, list):
            value = inner
        elif "content" in value:
            return [value]
        else:
            return None
    if isinstance(value, list):
        dicts = [v for v in value if isinstance(v, dict)]
        if value and not dicts:
            return None
        return dicts
    return None


def _balanced_end(text: str, start: int) -> int | None:
    """End (exclusive) of the brace-balanced span opening at ``start``, string-aware."""
    depth = 0
    in_str = esc = False
    for j in range(start, len(text)):
        c = text[j]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def parse_skill_array(text: str) -> tuple[list[dict[str, Any]], str]:
    """Decode the evolver's reply as a list of skill dicts; returns (skills, stage).

    Stages, first success wins: ``direct`` (json.loads of the whole reply), ``fenced`` (each
    ```...``` block), ``last_array`` (the last top-level ``[...]`` that decodes to objects),
    ``objects`` (every brace-balanced ``{...}`` that decodes to an object with a name or
    content). ``none``: nothing decodable (an empty list, never an exception).
    """
    text = text or ""
    # every stage treats RecursionError (nesting too deep to decode) like invalid JSON
    try:
        items = _skill_items(json.loads(text.strip()))
        if items is not None:
            return items, "direct"
    except (ValueError, RecursionError):
        pass
    for m in re.finditer(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", text, re.DOTALL):
        try:
            items = _skill_items(json.loads(m.group(1).strip()))
        except (ValueError, RecursionError):
            continue
        if items is not None:
            return items, "fenced"
    decoder = json.JSONDecoder()
    last: list[dict[str, Any]] | None = None
    i = 0
    while True:
        i = text.find("[", i)
        if i < 0:
            break
        try:
            value, end = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            i += 1
            continue
        items = _skill_items(value) if isinstance(value, list) else None
        if items is not None:
            last = items
        i = end
    if last is not None:
        return last, "last_array"
    found: list[dict[str, Any]] = []
    i = 0
    while True:
        i = text.find("{", i)
        if i < 0:
            break
        end = _balanced_end(text, i)
        if end is not None:
            try:
                obj = json.loads(text[i:end])
            except (ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict) and ("content" in obj or "name" in obj):
                found.append(obj)
                i = end
                continue
        i += 1
    if found:
        return found, "objects"
    return [], "none"


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


# ---------------------------------------------------------------------------------------------
# The method
# ---------------------------------------------------------------------------------------------


def _obs_hash(observation: str) -> str:
    return hashlib.sha256(observation.encode("utf-8")).hexdigest()[:16]


def _description(task: Task, initial_observation: str) -> str:
    return task.instruction.strip() or initial_observation[:500].strip()


class AutoRefine(Method):
    """AutoRefine (Qiu et al.), as adapted in the paper's Appendix D.3. See the module docstring."""

    name = "autorefine"
    state_files = (
        RunDirectory.TRAJECTORIES,
        f"skills/{EVENTS_FILE}",
        "retrieval_train.jsonl",
        "autorefine_steps.jsonl",
    )
    DEFAULTS: dict[str, Any] = {
        "eps": 1e-3,
        "similarity_floor": 0.30,
        "mmr_lambda": 0.7,
        "top_k": 5,
        "prune_every": 2,
        "prune_fraction": 0.20,
        "prune_min_injections": 3,
        "evolver_max_failures": 4,
        "evolver_max_successes": 4,
        "evolver_max_tokens": 2048,
        "rewrite_max_tokens": 256,
        "seed_skills": None,
    }

    def __init__(self, ctx: MethodContext, **params: Any) -> None:
        super().__init__(ctx)
        p = take_params(params, self.DEFAULTS, self.name)
        self.eps = float(p["eps"])
        self.similarity_floor = float(p["similarity_floor"])
        self.mmr_lambda = float(p["mmr_lambda"])
        self.top_k = int(p["top_k"])
        self.prune_every = int(p["prune_every"])
        self.prune_fraction = float(p["prune_fraction"])
        self.prune_min_injections = int(p["prune_min_injections"])
        self.evolver_max_failures = int(p["evolver_max_failures"])
        self.evolver_max_successes = int(p["evolver_max_successes"])
        self.evolver_max_tokens = int(p["evolver_max_tokens"])
        self.rewrite_max_tokens = int(p["rewrite_max_tokens"])
        self.seed_skills = None if p["seed_skills"] is None else str(p["seed_skills"])
        self._check_params()
        self.params = {**p, "seed_skills": self.seed_skills}
        self.memory = TrajectoryStore(self.path(RunDirectory.TRAJECTORIES), task_filter="task_type", fsync=ctx.fsync)
        self.store = AbstractionStore(self.path("skills"), prefix="skill", fsync=ctx.fsync)
        self._retrieval = JsonlWriter(self.path("retrieval_train.jsonl"), fsync=ctx.fsync)
        self._steps = JsonlWriter(self.path("autorefine_steps.jsonl"), fsync=ctx.fsync)
        self.heldout_log: list[dict[str, Any]] = []
        self._cache_key: tuple[int, int] | None = None
        self._cache: list[Abstraction] = []
        if self.seed_skills is not None and not self.store.history():
            self._add_seed_skills(Path(self.seed_skills))

    def _check_params(self) -> None:
        problems = []
        if not self.eps > 0:
            problems.append(f"eps must be > 0, got {self.eps}")
        if not -1.0 <= self.similarity_floor <= 1.0:
            problems.append(f"similarity_floor must be in [-1, 1], got {self.similarity_floor}")
        if not 0.0 <= self.mmr_lambda <= 1.0:
            problems.append(f"mmr_lambda must be in [0, 1], got {self.mmr_lambda}")
        if self.top_k < 1:
            problems.append(f"top_k must be >= 1, got {self.top_k}")
        if self.prune_every < 1:
            problems.append(f"prune_every must be >= 1, got {self.prune_every}")
        if not 0.0 <= self.prune_fraction <= 1.0:
            problems.append(f"prune_fraction must be in [0, 1], got {self.prune_fraction}")
        if self.prune_min_injections < 0:
            problems.append(f"prune_min_injections must be >= 0, got {self.prune_min_injections}")
        if self.evolver_max_failures < 0 or self.evolver_max_successes < 0:
            problems.append("evolver_max_failures / evolver_max_successes must be >= 0")
        if self.evolver_max_tokens < 1 or self.rewrite_max_tokens < 1:
            problems.append("evolver_max_tokens / rewrite_max_tokens must be >= 1")
        if problems:
            raise ValueError(f"method {self.name!r}: " + "; ".join(problems))

    # -- skills ----------------------------------------------------------------------------

    def score(self, skill_id: str) -> float:
        st = self.store.stats(skill_id)
        return utility_score(st.n_injected, st.n_success, self.eps)

    def scores(self) -> dict[str, float]:
        """Utility score of every active skill."""
        return {a.abstraction_id: self.score(a.abstraction_id) for a in self.store}

    def skills(self) -> list[Abstraction]:
        return self.store.active()

    def add_skills(
        self,
        skills: Sequence[dict[str, Any]],
        *,
        created_iteration: int,
        parents: Iterable[str] = (),
        source_records: Iterable[int] = (),
        tags: dict[str, Any] | None = None,
    ) -> list[Abstraction]:
        """Embed the contents (one call) and add validated skills {name, kind, task_type, content}."""
        if self._frozen or self.store.frozen:
            raise FrozenStateError("AutoRefine is frozen (held-out evaluation may not add skills)")
        skills = list(skills)
        if not skills:
            return []
        vectors = self.ctx.embedder.embed_many([s["content"] for s in skills], tags=tags)
        parents = tuple(parents)
        source_records = tuple(source_records)
        added = []
        for s, vec in zip(skills, vectors):
            if vec is None:
                log.warning("skill %r has no embedding (embedding call failed); it will never be retrieved", s["name"])
            added.append(
                self.store.add(
                    s["content"],
                    kind=s["kind"],
                    task_type=s.get("task_type"),
                    name=s["name"],
                    parents=parents,
                    created_iteration=created_iteration,
                    source_records=source_records,
                    embedding=vec,
                )
            )
        return added

    def _add_seed_skills(self, path: Path) -> None:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"{path}: seed skills must be a JSON list")
        seen: set[str] = set()
        skills = []
        for i, d in enumerate(data):
            if not isinstance(d, dict):
                raise ValueError(f"{path}: entry {i} is not an object")
            name, kind, content = d.get("name"), d.get("kind"), d.get("content")
            task_type = d.get("task_type")
            if not isinstance(name, str) or not SLUG.match(name) or name in seen:
                raise ValueError(f"{path}: entry {i} needs a unique slug name, got {name!r}")
            if kind not in SKILL_KINDS:
                raise ValueError(f"{path}: entry {i} has kind {kind!r}, expected one of {SKILL_KINDS}")
            if not isinstance(content, str) or not content.strip():
                raise ValueError(f"{path}: entry {i} has no content")
            if kind == "task" and not (isinstance(task_type, str) and task_type):
                raise ValueError(f"{path}: entry {i} is a task skill without task_type")
            seen.add(name)
            skills.append(
                {
                    "name": name,
                    "kind": kind,
                    "task_type": task_type if kind == "task" else None,
                    "content": content.strip(),
                }
            )
        self.add_skills(skills, created_iteration=-1, tags={"method": self.name, "step": "seed_skills"})
        self._write_metadata(None)

    def _candidates(self, task_type: str) -> list[Abstraction]:
        with self._lock:
            key = (len(self.store.history()), len(self.store))
            if key != self._cache_key:  # an add or a retire invalidates the cache
                self._cache = [a for a in self.store if a.embedding is not None]
                self._cache_key = key
            pool = self._cache
        return [a for a in pool if a.kind in ("general", "mistake") or (a.kind == "task" and a.task_type == task_type)]

    # -- (ii) prepare -------------------------------------------------------------------------

    def prepare(
        self, task: Task, initial_observation: str, *, phase: str, iteration: int, position: int
    ) -> TaskContext:
        if phase not in PHASES:
            raise ValueError(f"phase is {phase!r}, expected one of {PHASES}")
        tags = {"phase": phase, "iteration": iteration, "task": task.key, "method": self.name}
        description = _description(task, initial_observation)
        reply = self.ctx.llm.chat(
            [
                {"role": "system", "content": REWRITE_SYSTEM},
                {"role": "user", "content": REWRITE_PROMPT.format(description=description)},
            ],
            purpose="query_rewrite",
            temperature=0.0,
            max_tokens=self.rewrite_max_tokens,
            tags=tags,
        )
        rewritten = parse_rewrite(reply.text)
        queries = [description] + [rewritten[label] for label in QUERY_LABELS if label in rewritten]
        vectors = self.ctx.embedder.embed_many(queries, tags=tags)
        usable = [v for v in vectors if v is not None]
        cands = self._candidates(task.task_type)
        picked = (
            select_skills(
                usable,
                [np.asarray(a.embedding) for a in cands],
                floor=self.similarity_floor,
                lam=self.mmr_lambda,
                k=self.top_k,
            )
            if usable
            else []
        )
        chosen = [cands[i] for i, _ in picked]
        injected = [a.abstraction_id for a in chosen]
        meta = {
            "injected": injected,
            "relevance": [round(r, 6) for _, r in picked],
            "rewrite_ok": bool(rewritten),
            "n_queries": len(usable),
            "n_candidates": len(cands),
        }
        if phase == "heldout":
            entry = {
                "iteration": iteration,
                "position": position,
                "task": task.key,
                "task_type": task.task_type,
                "obs_sha256": _obs_hash(initial_observation),
                "injected": injected,
            }
            with self._lock:
                self.heldout_log.append(entry)
        return TaskContext(
            blocks=[format_skills(chosen)] if chosen else [],
            parents=tuple(injected),
            embedding=vectors[0],
            other_calls=1,
            meta=meta,
        )

    # -- learn -------------------------------------------------------------------------------

    def learn(self, task: Task, ctx: TaskContext, episode: EpisodeResult, *, iteration: int, position: int) -> None:
        if self._frozen:
            raise FrozenStateError("AutoRefine is frozen (held-out episodes may not update it)")
        injected = [str(x) for x in ctx.meta.get("injected", ctx.parents)]
        rec = self.memory.add(
            task, episode.trajectory, episode.outcome, embedding=ctx.embedding, parents=injected, iteration=iteration
        )
        obs = episode.trajectory.initial_observation
        self._retrieval.append(
            {
                "iteration": iteration,
                "position": position,
                "task": task.key,
                "task_type": task.task_type,
                "description": _description(task, obs),
                "obs_sha256": _obs_hash(obs),
                "injected": injected,
                "success": bool(episode.outcome.success),
                "infra_failure": bool(episode.outcome.infra_failure),
                "record_id": rec.record_id,
            }
        )

    def retrieval_log(self, iteration: int) -> list[dict[str, Any]]:
        """This iteration's training retrieval log (the per-iteration "reset" is this filter);
        a repeated (iteration, position) keeps its last line."""
        by_pos: dict[Any, dict[str, Any]] = {}
        for line in read_jsonl(self.path("retrieval_train.jsonl")):
            v = line.value
            if isinstance(v, dict) and v.get("iteration") == iteration:
                by_pos[v.get("position")] = v
        return list(by_pos.values())

    # -- (v) end of iteration -------------------------------------------------------------------

    def end_iteration(self, iteration: int) -> None:
        if self._frozen:
            raise FrozenStateError("AutoRefine is frozen (held-out evaluation may not update it)")
        plans = [
            line.value
            for line in read_jsonl(self.path("autorefine_steps.jsonl"))
            if isinstance(line.value, dict) and line.value.get("iteration") == iteration
        ]
        self._credit(iteration)
        self._evolve(iteration, next((p for p in plans if p.get("step") == "evolve"), None))
        retired: list[str] = []
        prune_now = iteration > 0 and iteration % self.prune_every == 0
        if prune_now:
            retired = self._prune(iteration, next((p for p in plans if p.get("step") == "prune"), None))
        self._write_metadata(iteration, retired=retired, checkpoint=prune_now)

    def _credit(self, iteration: int) -> dict[str, tuple[int, int]]:
        """Step 3: n_inj += 1 per episode a skill was injected in; n_succ += 1 if it succeeded."""
        delta: dict[str, list[int]] = {}
        for line in self.retrieval_log(iteration):
            if line.get("infra_failure"):
                continue
            for sid in dict.fromkeys(line.get("injected") or []):
                d = delta.setdefault(str(sid), [0, 0])
                d[0] += 1
                d[1] += int(bool(line.get("success")))
        for sid, (n_inj, n_succ) in delta.items():
            try:
                st = self.store.stats(sid)
            except KeyError:
                log.warning("retrieval log names unknown skill %s; not credited", sid)
                continue
            if st.extra.get("credited_iteration") == iteration:
                continue  # already credited (a resumed end_iteration)
            self.store.update_stats(sid, n_injected=n_inj, n_success=n_succ, extra={"credited_iteration": iteration})
        return {k: (v[0], v[1]) for k, v in delta.items()}

    def _evidence(self, iteration: int) -> tuple[list[MemoryRecord], list[MemoryRecord]]:
        recs = [r for r in self.memory if r.iteration == iteration and not r.outcome.infra_failure]
        rng = random.Random(f"autorefine-evolver:{self.ctx.seed}:{iteration}")

        def pick(items: list[MemoryRecord], n: int) -> list[MemoryRecord]:
            if len(items) <= n:
                return items
            return sorted(rng.sample(items, n), key=lambda r: r.record_id)

        failures = pick([r for r in recs if not r.success], self.evolver_max_failures)
        successes = pick([r for r in recs if r.success], self.evolver_max_successes)
        return failures, successes

    def evolver_messages(
        self, failures: Sequence[MemoryRecord], successes: Sequence[MemoryRecord]
    ) -> list[dict[str, str]]:
        task_types = sorted({r.task.task_type for r in self.memory})
        existing = sorted(a.name for a in self.store if a.name)
        user = EVOLVER_PROMPT.format(
            max_failures=self.evolver_max_failures,
            max_successes=self.evolver_max_successes,
            task_types=", ".join(task_types) if task_types else "(none)",
            existing=", ".join(existing) if existing else "(none yet)",
            failures="\n\n".join(format_record(r, label=f"--- Failure {i} ---") for i, r in enumerate(failures, 1))
            or NO_EPISODES,
            successes="\n\n".join(format_record(r, label=f"--- Success {i} ---") for i, r in enumerate(successes, 1))
            or NO_EPISODES,
        )
        preamble = EVOLVER_PREAMBLES.get(self.ctx.benchmark.lower(), EVOLVER_PREAMBLE_GENERIC)
        return [{"role": "system", "content": preamble}, {"role": "user", "content": user}]

    def _evolve(self, iteration: int, plan: dict[str, Any] | None) -> list[Abstraction]:
        """Step 4: one contrastive evolver call; new skills get t_create = iteration."""
        if plan is None:
            failures, successes = self._evidence(iteration)
            shown = list(failures) + list(successes)
            plan = {
                "iteration": iteration,
                "step": "evolve",
                "called": bool(shown),
                "stage": None,
                "skills": [],
                "rejected": [],
                "parents": list(parents_of_records(shown)),
                "source_records": [r.record_id for r in shown],
            }
            if shown:
                reply = self.ctx.llm.chat(
                    self.evolver_messages(failures, successes),
                    purpose="skill_evolution",
                    temperature=0.0,
                    max_tokens=self.evolver_max_tokens,
                    tags={"phase": "train", "iteration": iteration, "method": self.name},
                )
                raw, stage = parse_skill_array(reply.text)
                known = {r.task.task_type for r in self.memory}
                accepted = []
                for item in raw:
                    skill, reason = normalize_skill(item, known)
                    if skill is None:
                        plan["rejected"].append({"name": str(item.get("name"))[:80], "reason": reason})
                    else:
                        accepted.append(skill)
                plan["stage"] = stage
                plan["skills"] = assign_names(accepted, (a.name for a in self.store.history()))
                if stage == "none":
                    log.warning(
                        "iteration %d: the skill evolver's reply could not be decoded; no new skills", iteration
                    )
                for r in plan["rejected"]:
                    log.info("iteration %d: evolver skill %r rejected: %s", iteration, r["name"], r["reason"])
            self._steps.append(plan)
        have = {a.name for a in self.store.history()}
        todo = [s for s in plan["skills"] if s["name"] not in have]  # a resumed run skips added ones
        return self.add_skills(
            todo,
            created_iteration=iteration,
            parents=plan["parents"],
            source_records=plan["source_records"],
            tags={"phase": "train", "iteration": iteration, "method": self.name},
        )

    def _prune(self, iteration: int, plan: dict[str, Any] | None) -> list[str]:
        """Step 5 / (iii): retire the bottom floor(fraction * eligible) skills by score."""
        if plan is None:
            eligible = [
                a for a in self.store if self.store.stats(a.abstraction_id).n_injected >= self.prune_min_injections
            ]
            n = math.floor(Fraction(str(self.prune_fraction)) * len(eligible))
            ranked = sorted(
                eligible, key=lambda a: (self.score(a.abstraction_id), a.created_iteration, a.abstraction_id)
            )
            plan = {
                "iteration": iteration,
                "step": "prune",
                "eligible": len(eligible),
                "retire": [a.abstraction_id for a in ranked[:n]],
            }
            self._steps.append(plan)  # the transaction's commit point
        for sid in plan["retire"]:
            if sid in self.store:
                self.store.retire(sid, reason=f"pruned at iteration {iteration} (score {self.score(sid):.6f})")
        return list(plan["retire"])

    def metadata(self) -> list[dict[str, Any]]:
        """The (n_inj, n_succ, t_create) triple and score of every active skill."""
        out = []
        for a in self.store:
            st = self.store.stats(a.abstraction_id)
            out.append(
                {
                    "id": a.abstraction_id,
                    "name": a.name,
                    "kind": a.kind,
                    "task_type": a.task_type,
                    "n_inj": st.n_injected,
                    "n_succ": st.n_success,
                    "t_create": a.created_iteration,
                    "score": utility_score(st.n_injected, st.n_success, self.eps),
                }
            )
        return out

    def _write_metadata(self, iteration: int | None, *, retired: Sequence[str] = (), checkpoint: bool = False) -> None:
        doc = {"iteration": iteration, "eps": self.eps, "skills": self.metadata(), "retired": list(retired)}
        atomic_write_json(self.path("skills/metadata.json"), doc)
        if checkpoint:
            atomic_write_json(self.path(f"skills/metadata_iter_{iteration:02d}.json"), doc)

    # -- (vi) freezing, snapshots ------------------------------------------------------------

    def freeze(self) -> None:
        super().freeze()
        self.store.freeze()
        self.memory.freeze()
        with self._lock:
            self.heldout_log = []  # a separate log per held-out evaluation, never carried forward

    def unfreeze(self) -> None:
        super().unfreeze()
        self.store.unfreeze()
        self.memory.unfreeze()

    def snapshot(self, iteration: int, path: Path) -> None:
        self.store.snapshot(path, iteration=iteration, method=self.name, scores=self.scores())

    def close(self) -> None:
        self.memory.close()
        self.store.close()
        self._retrieval.close()
        self._steps.close()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **self.params}
