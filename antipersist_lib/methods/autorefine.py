"""AutoRefine baseline (paper Appendix D.3): utility-scored skills, multi-query MMR retrieval,
a single-call contrastive skill evolver, and periodic percentile pruning.

This module is the method (``prepare``, ``learn``, ``end_iteration``: crediting, evolving and pruning
skills in an ``AbstractionStore`` under ``skills/``); its prompts and reply readers are
``methods/autorefine_prompts.py``, the skill library's rules ``methods/autorefine_skills.py``.
Which code implements each of D.3's items (i)-(vi), and the kit's answers where the paper leaves a
choice open, are documented in docs/methods.md, "AutoRefine".
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.core.synthesis import format_record
from antipersist_lib.errors import FrozenStateError
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, read_jsonl
from antipersist_lib.memory.abstraction_store import EVENTS_FILE, Abstraction, AbstractionStore, parents_of_records
from antipersist_lib.memory.trajectory_store import MemoryRecord, TrajectoryStore
from antipersist_lib.methods.autorefine_prompts import (
    EVOLVER_PREAMBLE_GENERIC,
    EVOLVER_PREAMBLES,
    EVOLVER_PROMPT,
    NO_EPISODES,
    QUERY_LABELS,
    REWRITE_PROMPT,
    REWRITE_SYSTEM,
    parse_rewrite,
    parse_skill_array,
)
from antipersist_lib.methods.autorefine_skills import (
    SKILL_KINDS,
    SLUG,
    assign_names,
    format_skills,
    normalize_skill,
    select_skills,
    utility_score,
)
from antipersist_lib.methods.base import Method, MethodContext, TaskContext, take_params
from antipersist_lib.records import HELDOUT, PHASES, Task
from antipersist_lib.rundir import RunDirectory

log = logging.getLogger(__name__)


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
    prompt_families = ("kit", "autorefine")
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
        if phase == HELDOUT:
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
