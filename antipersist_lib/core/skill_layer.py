"""The skill layer: persistent skills in a context, as components the methods share.

* The frozen skill library (F.1, F.2): a JSON list of {"name", "content"} objects (optionally
  "task_type") or a run directory whose last abstraction snapshot becomes the library (``{seed}`` in
  the path is the run's seed); ``read_skills`` reads it, ``format_skills`` renders it.
* ``FrozenLayer``: Anti-Persistence's frozen persistent layer (F.2), read once and never updated,
  showing each task its top-B skills by embedding similarity (or all of them,
  ``frozen_skills_retrieval: all``, refused past the backbone's context length); planted skills
  (``core.planted``) use the same layer (``planted_layer``).
* ``format_stored`` renders S_k's stored abstractions; ``judge_counts`` reads how a run's LLM judge
  decided (``JUDGE_LOG``).

A layer is built from the method's context (``methods.base.MethodContext``: seed, embedder, backbone).
docs/choices.md, "F.2 (Figure 11b)", documents how the layer is read, ranked and sized.
"""

from __future__ import annotations

import json
import logging
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.core.planted import Plant
from antipersist_lib.memory.abstraction_store import read_snapshot
from antipersist_lib.memory.similarity import EPS
from antipersist_lib.memory.trajectory_store import abstraction_type_filter
from antipersist_lib.records import Task
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.serving.context_budget import CHARS_PER_TOKEN, backbone_context_length, estimated_tokens

log = logging.getLogger(__name__)

SKILLS_HEADER = "## Skills (frozen library)"
#: the one placeholder a frozen-layer path may hold: the run's seed (each seed reads its own store)
SEED_PLACEHOLDER = "{seed}"
#: how the frozen layer reaches a context: the B most similar skills per task, or the whole library
FROZEN_RETRIEVALS = ("top_b", "all")
#: Anti-Persistence's frozen-layer parameters that are not in ``AntiPersistenceConfig``
FROZEN_LAYER_DEFAULTS: dict[str, Any] = {"frozen_skills_retrieval": "top_b"}


@dataclass(frozen=True)
class Skill:
    """One frozen skill: ``skill_id`` names it in episode records (a snapshot's abstraction id, or
    the JSON library's name); ``embedding`` is the stored task embedding of a snapshot abstraction."""

    skill_id: str
    name: str
    content: str
    task_type: str | None = None
    embedding: tuple[float, ...] | None = None


@dataclass(frozen=True)
class SkillSource:
    """Where a library came from, for the manifest: the path as resolved, JSON file or run
    directory, the snapshot read, and the embedding model of the run that wrote it (if known)."""

    path: str
    kind: str  # "json" | "run" | "planted"
    snapshot: str | None = None
    embedding_model: str | None = None


def resolve_library_path(path: str, seed: int) -> str:
    """``path`` with ``{seed}`` replaced by ``seed``; any other ``{...}`` is refused, so a typo
    (``{Seed}``) never reads a folder literally named so."""
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"frozen_skills must be a non-empty path string, got {path!r}")
    rest = path.replace(SEED_PLACEHOLDER, "")
    if "{" in rest or "}" in rest:
        raise ValueError(f"frozen_skills path {path!r}: the only placeholder allowed is {SEED_PLACEHOLDER}")
    return path.replace(SEED_PLACEHOLDER, str(seed))


def params_for_seed(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """A run's method parameters with ``{seed}`` in every string value replaced by ``seed``. Grids and
    main-job profiles give each run its own concrete path this way, so its manifest names the store
    it read and a run recorded with a literal seed folder keeps its identity."""
    return {k: v.replace(SEED_PLACEHOLDER, str(seed)) if isinstance(v, str) else v for k, v in params.items()}


def read_skills(path: str | Path) -> tuple[list[Skill], SkillSource]:
    """The skills of a JSON library or of a run directory's last abstraction snapshot; errors name
    the file and the bad entry."""
    p = Path(path)
    if p.is_dir():
        return _skills_from_run(p)
    if not p.exists():
        raise ValueError(
            f"cannot read skill library {p}: it does not exist (expected a JSON list of {{name, content}} "
            "skills, or a run directory holding snapshots/abstractions_iter_*.json)"
        )
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
        task_type = s.get("task_type")
        if task_type is not None and not isinstance(task_type, str):
            raise ValueError(f"skill library {p}: entry {i}: 'task_type' must be a string, got {task_type!r}")
        name = str(s.get("name", f"skill-{i}"))
        out.append(Skill(name, name, s["content"].strip(), task_type))
    return out, SkillSource(str(p), "json")


def _skills_from_run(run_dir: Path) -> tuple[list[Skill], SkillSource]:
    layout = RunDirectory(run_dir)
    snaps = layout.snapshot_paths()
    if not snaps:
        seeds = sorted(d.name for d in run_dir.glob("seed*") if d.is_dir())
        hint = (
            f"; it looks like a run's root (it holds {', '.join(seeds)}): name one seed's folder, or end "
            f"the path in seed{SEED_PLACEHOLDER} so each run reads its own seed's store"
            if seeds
            else " (run an abstraction-memory method there first)"
        )
        raise ValueError(f"skill library {run_dir}: a run directory must hold snapshots/abstractions_iter_*.json{hint}")
    try:
        data = read_snapshot(snaps[-1])
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read skill library snapshot {snaps[-1]}: {exc}") from exc
    skills = [
        Skill(
            str(a["abstraction_id"]),
            str(a.get("name") or a["abstraction_id"]),
            a["text"].strip(),
            a.get("task_type"),
            None if a.get("embedding") is None else tuple(float(x) for x in a["embedding"]),
        )
        for a in data.get("active", [])
        if a.get("text", "").strip()
    ]
    counts = judge_counts(run_dir)
    verdicts = ", ".join(f"{k} {v}" for k, v in counts.items())
    if counts["unparseable"]:
        warnings.warn(
            f"skill library {run_dir}: {counts['unparseable']} of the judge's replies were unparseable "
            f"(neither ACCEPT nor REJECT) and their candidates were not admitted (judge verdicts: {verdicts})",
            stacklevel=3,
        )
    if not skills:
        raise ValueError(
            f"skill library {run_dir}: its last snapshot {snaps[-1].name} holds no abstraction, so the frozen "
            f"layer would be empty (judge verdicts: {verdicts}); an empty layer is no F.2 condition: check "
            "the judge's replies (state/judge.jsonl) or the run that made the store"
        )
    model = None
    if layout.is_run():
        try:
            manifest = layout.read_manifest()
        except (OSError, ValueError):
            manifest = {}
        model = (manifest.get("embedding_endpoint") or {}).get("model")
        planned, last = manifest.get("iterations"), int(snaps[-1].stem.rsplit("_", 1)[-1])
        if isinstance(planned, int) and last < planned:
            raise ValueError(
                f"skill library {run_dir}: the run has snapshots up to iteration {last} of its {planned}; "
                "a frozen layer is the store after the last iteration, so finish that run first (re-run its "
                "grid or profile: it resumes)"
            )
    return skills, SkillSource(str(run_dir), "run", snaps[-1].name, model)


def load_skill_library(path: str | Path) -> list[dict[str, str]]:
    """A JSON list of {"name", "content"} skills, or a run directory whose latest abstraction
    snapshot becomes the library (Figure 11b: judge-filtered skills frozen as a persistent layer).
    Errors name the file and the bad entry."""
    skills, _ = read_skills(path)
    return [{"name": s.name, "content": s.content} for s in skills]


def format_skills(skills: list[dict[str, str]]) -> str:
    if not skills:
        return ""
    return SKILLS_HEADER + "\n" + "\n\n".join(f"### {s['name']}\n{s['content']}" for s in skills)


class FrozenLayer:
    """Anti-Persistence's frozen persistent skill layer (F.2): read once, never updated.

    ``show`` is called from concurrent held-out workers: the one-time content embedding runs under
    a lock and the vectors are only read afterwards.
    """

    def __init__(
        self,
        path: str,
        ctx: Any,
        *,
        retrieval: str = "top_b",
        budget: int = 5,
        task_filter: str = "task_type",
        skills: tuple[list[Skill], SkillSource] | None = None,
    ) -> None:
        if retrieval not in FROZEN_RETRIEVALS:
            raise ValueError(f"frozen_skills_retrieval is {retrieval!r}, expected one of {FROZEN_RETRIEVALS}")
        self.template = path
        self.path = resolve_library_path(path, ctx.seed)
        # ``skills``: given by the caller (planted skills, read from their pairs file at ``path``)
        self.skills, self.source = read_skills(self.path) if skills is None else skills
        ids = [s.skill_id for s in self.skills]
        doubles = sorted({i for i in ids if ids.count(i) > 1})
        if doubles:
            raise ValueError(
                f"skill library {self.path}: skill names must be unique so episode records can name the "
                f"skills shown; repeated: {doubles}"
            )
        self.retrieval = retrieval
        self.budget = int(budget)
        self.task_filter = task_filter
        self.embedder = ctx.embedder
        self._lock = threading.Lock()
        self._vectors: dict[str, np.ndarray] = {}
        self.embeddings_from = self._reuse_snapshot_embeddings()
        self.context_length = backbone_context_length(ctx.llm)
        whole = format_skills(self._as_dicts(self.skills))
        self.layer_chars, self.layer_tokens = len(whole), estimated_tokens(whole)
        self.context_check = self._check_context(ctx.llm)

    @staticmethod
    def _as_dicts(skills: list[Skill]) -> list[dict[str, str]]:
        return [{"name": s.name, "content": s.content} for s in skills]

    def _reuse_snapshot_embeddings(self) -> str:
        """Take a snapshot's stored task embeddings when the run that wrote them embedded with this
        run's model (or the model is unknown on either side); otherwise every skill is embedded by
        content, since vectors of two models are not comparable."""
        own = getattr(getattr(self.embedder, "endpoint", None), "model", None)
        src = self.source.embedding_model
        if src and own and src != own:
            return f"content (the snapshot was embedded with {src!r}, this run embeds with {own!r})"
        stored = [s for s in self.skills if s.embedding is not None]
        for s in stored:
            self._vectors[s.skill_id] = np.asarray(s.embedding, dtype=np.float64)
        if stored and len(stored) == len(self.skills):
            return "snapshot"
        return "snapshot and content" if stored else "content"

    def _check_context(self, llm: Any) -> str:
        """Whole-library injection must fit the backbone's context; refused (before any call) when
        the estimate exceeds it, and said plainly when the context length is unknown."""
        if self.retrieval != "all":
            return "not needed (top_b)"
        if llm is None:
            return "not checked: no backbone yet"
        if self.context_length is None:
            model = getattr(getattr(llm, "endpoint", None), "model", "?")
            msg = (
                f"frozen_skills_retrieval='all': the backbone {model!r} has no stated context length (set "
                "context_length in its profile, or --context-length), so whether the whole library "
                f"(about {self.layer_tokens} tokens) fits was not checked"
            )
            log.warning(msg)
            return "not checked: " + msg
        if self.layer_tokens > self.context_length:
            raise ValueError(
                f"frozen_skills_retrieval='all' would put the whole library {self.path} ({len(self.skills)} "
                f"skills, {self.layer_chars} characters, about {self.layer_tokens} tokens at "
                f"{CHARS_PER_TOKEN} characters per token) into every context, but the backbone "
                f"{llm.endpoint.model!r} has a context length of {self.context_length} tokens; use "
                "frozen_skills_retrieval='top_b' (the B most similar skills per task) or a smaller library"
            )
        return f"ok: about {self.layer_tokens} of {self.context_length} tokens"

    def _candidates(self, task: Task) -> list[Skill]:
        """Skills of the task's type (or of no recorded type), at the granularity of the method's
        ``task_filter``, as S_k is searched."""
        kind = abstraction_type_filter(self.task_filter, task)
        return [s for s in self.skills if kind is None or s.task_type in (None, kind)]

    def _embed_missing(self, tags: dict[str, Any]) -> None:
        """Embed every skill without a vector, in library order, in one request; a skill whose
        embedding failed is tried again at the next task."""
        with self._lock:
            todo = [s for s in self.skills if s.skill_id not in self._vectors]
            if not todo or self.embedder is None:
                return
            vectors = self.embedder.embed_many([s.content for s in todo], tags=tags)
            for s, v in zip(todo, vectors):
                if v is not None:
                    self._vectors[s.skill_id] = np.asarray(v, dtype=np.float64)

    def select(self, task: Task, query: np.ndarray | None, *, tags: dict[str, Any] | None = None) -> list[Skill]:
        """The skills this task's context gets: all of them, or the top B of the task's type by cosine
        similarity to the task embedding (ties in library order; none without a task embedding)."""
        if self.retrieval == "all":
            return list(self.skills)
        if query is None:
            return []
        self._embed_missing({**(tags or {}), "layer": "frozen_skills"})
        pool = [s for s in self._candidates(task) if s.skill_id in self._vectors]
        if not pool:
            return []
        q = np.asarray(query, dtype=np.float64).reshape(-1)
        mat = np.stack([self._vectors[s.skill_id] for s in pool])
        if mat.shape[1] != q.size:
            raise ValueError(
                f"frozen layer {self.path}: skill embeddings have dimension {mat.shape[1]} but this run's task "
                f"embeddings have dimension {q.size}; the library was embedded with another model"
            )
        sims = mat @ q / (np.linalg.norm(mat, axis=1) * np.linalg.norm(q) + EPS)
        order = np.argsort(-sims, kind="stable")[: self.budget]
        return [pool[int(i)] for i in order]

    def show(
        self, task: Task, query: np.ndarray | None, *, tags: dict[str, Any] | None = None
    ) -> tuple[str, list[str]]:
        """The context block and the ids of the skills in it (for the episode's meta)."""
        chosen = self.select(task, query, tags=tags)
        return format_skills(self._as_dicts(chosen)), [s.skill_id for s in chosen]

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.template,
            "resolved": self.path,
            "source": self.source.kind,
            "snapshot": self.source.snapshot,
            "n_skills": len(self.skills),
            "retrieval": self.retrieval,
            "budget": self.budget if self.retrieval == "top_b" else None,
            "embeddings": self.embeddings_from if self.retrieval == "top_b" else None,
            "layer_tokens_estimate": self.layer_tokens,
            "chars_per_token": CHARS_PER_TOKEN,
            "context_length": self.context_length,
            "context_check": self.context_check,
        }


def frozen_layer(path: str | None, ctx: Any, *, retrieval: str, budget: int, task_filter: str) -> FrozenLayer | None:
    """Anti-Persistence's layer, or None without ``frozen_skills``; the retrieval value is checked
    either way, so a misspelt value is never silently ignored."""
    if retrieval not in FROZEN_RETRIEVALS:
        raise ValueError(f"frozen_skills_retrieval is {retrieval!r}, expected one of {FROZEN_RETRIEVALS}")
    if path is None:
        return None
    return FrozenLayer(path, ctx, retrieval=retrieval, budget=budget, task_filter=task_filter)


def planted_layer(plant: Plant, ctx: Any, *, retrieval: str, budget: int, task_filter: str) -> FrozenLayer | None:
    """The planted skills of ``plant`` as a frozen layer (F.2's mechanism), each named by its provenance
    id; None when nothing is planted."""
    if not plant.planted or plant.skills is None:
        return None
    skills = [Skill(s.skill_id, s.skill_id, s.text, s.task_type) for s in plant.planted]
    source = SkillSource(plant.skills.path, "planted")
    return FrozenLayer(
        plant.skills.path, ctx, retrieval=retrieval, budget=budget, task_filter=task_filter, skills=(skills, source)
    )


# -- stored abstractions (S_k) in a context ---------------------------------------------------

STORED_HEADER = "## Stored Guidance (abstraction memory)"


def format_stored(items: list[tuple[Any, float]]) -> str:
    if not items:
        return ""
    body = "\n\n".join(f"[{a.abstraction_id}] {a.text.strip()}" for a, _ in items)
    return f"{STORED_HEADER}\n{body}"


# -- the judge's verdicts of the run that made a store ----------------------------------------

#: the judge's verdicts of a run, in its state folder (one line per judged candidate)
JUDGE_LOG = "judge.jsonl"


def judge_counts(run_dir: str | Path) -> dict[str, int]:
    """How the judge of a run (``state/judge.jsonl``) decided: accepted, rejected, unparseable (all 0
    when the run has no judge log). Lines written before verdicts were recorded count by ``accepted``."""
    counts = {"accepted": 0, "rejected": 0, "unparseable": 0}
    path = RunDirectory(run_dir).state_dir / JUDGE_LOG
    if not path.exists():
        return counts
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        verdict = rec.get("verdict") or ("accept" if rec.get("accepted") else "reject")
        counts[{"accept": "accepted", "reject": "rejected"}.get(verdict, "unparseable")] += 1
    return counts
