"""Anti-Persistence (Algorithm 1 with the branches of B.4): the method, its one config, its ablations.

Per task: embed, select a mode from the outcome log L_k, retrieve from the trajectory memory M_k,
synthesize temporary guidance, let the agent act with it, append the raw trajectory to M_k (and,
when eligible, the mode's reward to L_k), and discard the guidance: it is never written to M_k, L_k,
the episode record or the call ledger. ``runner.protocol.run_task`` runs one task end to end;
``run_cell`` runs the whole K-iteration protocol.

Its parameters are the fields of ``core.config.AntiPersistenceConfig``. The variants (policies, the
persist ablation, frozen and planted skill layers, seed pools) are documented in docs/methods.md,
"Anti-Persistence"; the kit's settings where the paper is silent in docs/choices.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.core.config import LEGACY_PARAMS, TABLE3, AntiPersistenceConfig
from antipersist_lib.core.planted import PLANT_DEFAULTS, Plant
from antipersist_lib.core.seeding import check_seed_pool, seed_store
from antipersist_lib.core.selector import ModeDecision, ModeSelector, Recorded, decision_rng
from antipersist_lib.core.skill_layer import FROZEN_LAYER_DEFAULTS, format_stored, frozen_layer, planted_layer
from antipersist_lib.core.synthesis import synthesize
from antipersist_lib.memory.abstraction_store import AbstractionStore, parents_of_records
from antipersist_lib.memory.outcome_log import OutcomeLog, cost_adjusted_reward, skip_reason
from antipersist_lib.memory.similarity import EmbeddingPool
from antipersist_lib.memory.trajectory_store import TrajectoryStore, abstraction_type_filter
from antipersist_lib.methods.base import Method, MethodContext, TaskContext, take_params
from antipersist_lib.records import SYNTHESIS_MODES, Task
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.serving.embeddings import embed_text


def decide(
    selector: ModeSelector,
    outcome_log: OutcomeLog,
    embedding: np.ndarray | None,
    *,
    iteration: int,
    position: int,
    rng: np.random.Generator,
    policy: str = "bandit",
    fixed_mode: str | None = None,
    phase: str = "train",
    neighbourhood: Recorded | None = None,
) -> ModeDecision:
    """Step 2 of Algorithm 1: the mode for this task (the bandit, or an ablation's fixed/random
    policy). A function of its inputs only, so an audit can re-derive a recorded decision.
    ``phase`` lets the bandit apply ``heldout_selection`` to held-out tasks; ``neighbourhood`` is
    for audits only (``ModeSelector.local_estimates``)."""
    if policy == "fixed":
        return selector.fixed(fixed_mode, embedding)  # type: ignore[arg-type]
    if policy == "random":
        return selector.random_policy(embedding, rng)
    return selector.select(
        outcome_log,
        embedding,
        iteration=iteration,
        position=position,
        rng=rng,
        phase=phase,
        neighbourhood=neighbourhood,
    )


class AntiPersistence(Method):
    """The method: trajectory memory M_k + outcome log L_k; S_k only for the persist ablation."""

    name = "anti_persistence"
    state_files = (RunDirectory.TRAJECTORIES, RunDirectory.OUTCOME_LOG, RunDirectory.ABSTRACTION_EVENTS)
    #: every method parameter and its default: ``AntiPersistenceConfig`` flattened (Table 3), and how
    #: the frozen layer is shown (``skill_layer.FROZEN_LAYER_DEFAULTS``)
    DEFAULTS: dict[str, Any] = {**TABLE3.params(), **FROZEN_LAYER_DEFAULTS, **PLANT_DEFAULTS}
    #: parameters that are not ``AntiPersistenceConfig`` fields
    LAYER_PARAMS = (*FROZEN_LAYER_DEFAULTS, *PLANT_DEFAULTS)
    #: runs recorded before top-B frozen-layer retrieval injected the whole library
    LEGACY_PARAMS = {**LEGACY_PARAMS, "frozen_skills_retrieval": "all"}

    def __init__(self, ctx: MethodContext, **params: Any) -> None:
        super().__init__(ctx)
        self.params = take_params(params, self.DEFAULTS, self.name)
        self.config = AntiPersistenceConfig.from_params(
            {k: v for k, v in self.params.items() if k not in self.LAYER_PARAMS}
        )
        self.selector = ModeSelector(self.config.selector)
        # M_k and L_k hold the same task embeddings: one pool, so one product per task scores both
        # (the selector's and the retrieval's rankings are unchanged; memory/similarity.py)
        pool = EmbeddingPool(dedupe=True)
        self.memory = TrajectoryStore(
            self.path(RunDirectory.TRAJECTORIES), task_filter=self.config.task_filter, fsync=ctx.fsync, pool=pool
        )
        self.outcome_log = OutcomeLog(self.path(RunDirectory.OUTCOME_LOG), fsync=ctx.fsync, pool=pool)
        self.store = (
            AbstractionStore(self.path(RunDirectory.ABSTRACTIONS), fsync=ctx.fsync) if self.config.persist else None
        )
        self.skill_layer = frozen_layer(
            self.config.frozen_skills,
            ctx,
            retrieval=self.params["frozen_skills_retrieval"],
            budget=self.config.budget,
            task_filter=self.config.task_filter,
        )
        self.seed_pool = check_seed_pool(self.config.seed_pool)
        self.plant = Plant.from_params(self.params, ctx.benchmark)
        if self.plant.planted and self.skill_layer is not None:
            raise ValueError("plant and frozen_skills both add a frozen layer; give one of them")
        self.plant_layer = planted_layer(
            self.plant,
            ctx,
            retrieval=self.params["frozen_skills_retrieval"],
            budget=self.config.budget,
            task_filter=self.config.task_filter,
        )

    def begin(self) -> None:
        """Seed M_0 from ``seed_pool`` (the records not yet written; nothing without one)."""
        if self.seed_pool is not None:
            seed_store(self.memory, self.seed_pool, self.ctx.embedder, prefix_chars=self.config.embed_prefix_chars)

    @property
    def update_index(self) -> int:
        """k: training attempts so far (every attempt enters M_k, so k = |M_k|)."""
        return len(self.memory)

    def prepare(
        self, task: Task, initial_observation: str, *, phase: str, iteration: int, position: int
    ) -> TaskContext:
        """Steps 1-4: embed, select a mode, retrieve, synthesize. Writes nothing."""
        cfg = self.config
        tags = {"phase": phase, "iteration": iteration, "task": task.key}
        # embedding_retries=None leaves the endpoint's retry policy alone; 0 is B.3's single call
        retries = {} if cfg.embedding_retries is None else {"max_retries": cfg.embedding_retries}
        emb = self.ctx.embedder.embed(
            embed_text(task.instruction, initial_observation, cfg.embed_prefix_chars), tags=tags, **retries
        )
        decision = decide(
            self.selector,
            self.outcome_log,
            emb,
            iteration=iteration,
            position=position,
            rng=decision_rng(self.ctx.seed, phase, iteration, position),
            policy=cfg.policy,
            fixed_mode=cfg.fixed_mode,
            phase=phase,
        )
        retrieved = self.memory.retrieve(emb, decision.mode, task, budget=cfg.budget, contrast=cfg.contrast)
        guidance = synthesize(
            decision.mode,
            task.instruction,
            retrieved,
            self.ctx.llm,
            max_tokens=cfg.synthesis_max_tokens,
            temperature=cfg.synthesis_temperature,
            limits=cfg.limits,
            tags=tags,
        )
        layer, shown = ("", []) if self.skill_layer is None else self.skill_layer.show(task, emb, tags=tags)
        parents: tuple[str, ...] = ()
        if self.plant_layer is not None and self.plant.active(iteration):
            layer, shown = self.plant_layer.show(task, emb, tags=tags)
            parents = tuple(shown)  # planted skills are persistent abstractions in context: P(m)
        blocks = [layer, guidance.text]
        meta: dict[str, Any] = {
            "mode": decision.mode,
            "branch": decision.branch,
            "decision": decision.to_dict(),
            "retrieved_ids": list(guidance.record_ids),
            "synthesis_skipped": guidance.skipped_reason,
            "update_index": self.update_index,
        }
        if self.skill_layer is not None:
            meta["frozen_skills_shown"] = shown
        if self.plant_layer is not None:
            meta["planted_shown"] = list(parents)
        if self.plant.reads and guidance.kappa and guidance.text:
            used = set(guidance.record_ids)
            meta["candidate"] = {  # the verdict on the guidance, never the guidance itself
                "parents": list(parents_of_records(r.record for r in retrieved if r.record.record_id in used)),
                **self.plant.verdicts(
                    guidance.text, task, [r.record.task for r in retrieved if r.record.record_id in used]
                ),
            }
        if self.store is not None:
            kind = abstraction_type_filter(cfg.task_filter, task)
            items = [] if emb is None else self.store.search(emb, k=cfg.budget, task_type=kind)
            blocks.insert(1, format_stored(items))
            parents = (*parents, *(a.abstraction_id for a, _ in items))
            meta["abstractions_shown"] = [a.abstraction_id for a, _ in items]
            if guidance.kappa and guidance.text:
                # persist-instead-of-discard: the raw guidance is kept in memory until learn()
                meta["_persist_text"] = guidance.text
        return TaskContext(blocks=blocks, parents=parents, embedding=emb, synthesis_calls=guidance.kappa, meta=meta)

    def learn(self, task: Task, ctx: TaskContext, episode: EpisodeResult, *, iteration: int, position: int) -> None:
        """Steps 6-7: the raw trajectory always enters M_k; the (embedding, mode, cost-adjusted
        reward) entry enters L_k unless a skip rule applies (first update, no embedding, engine
        failure). The reward and the skip reason go into the episode's metadata."""
        k = int(ctx.meta.get("update_index", self.update_index))
        mode = ctx.meta["mode"]
        reward = cost_adjusted_reward(episode.outcome.y, ctx.synthesis_calls, self.config.lam)
        self.memory.add(
            task,
            episode.trajectory,
            episode.outcome,
            embedding=ctx.embedding,
            parents=ctx.parents,
            iteration=iteration,
            mode=mode,
        )
        why = skip_reason(k, ctx.embedding, episode.outcome.infra_failure)
        if why is None:
            self.outcome_log.append(
                embedding=ctx.embedding,  # type: ignore[arg-type]  (skip_reason rules out None)
                mode=mode,
                reward=reward,
                raw_success=episode.outcome.success,
                task_type=task.task_type,
                task_id=task.task_id,
                instruction=task.instruction,
            )
        ctx.meta["reward"] = reward
        ctx.meta["logged"] = why is None
        ctx.meta["log_skip_reason"] = None if why is None else why.value
        text = ctx.meta.pop("_persist_text", None)
        if self.store is not None and text and ctx.embedding is not None and mode in SYNTHESIS_MODES:
            self.store.add(
                text,
                kind="guidance",
                parents=ctx.parents,
                created_iteration=iteration,
                source_records=ctx.meta["retrieved_ids"],
                task_type=task.task_type,
                embedding=ctx.embedding,
            )

    def snapshot(self, iteration: int, path: Path) -> None:
        if self.store is not None:
            self.store.snapshot(path, iteration=iteration, method=self.name)

    def stores(self) -> list[Any]:
        return [s for s in (self.memory, self.outcome_log, self.store) if s is not None]

    def describe(self) -> dict[str, Any]:
        frozen = {} if self.skill_layer is None else {"frozen_layer": self.skill_layer.describe()}
        return {"name": self.name, **self.params, **frozen, **self.plant.describe()}
