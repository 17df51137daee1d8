"""Anti-Persistence for one task (Algorithm 1 with the branches of B.4).

embed -> select mode -> retrieve -> synthesize (or not) -> execute with the guidance ->
append the trajectory to M_k (and the outcome to L_k when eligible) -> discard the guidance.

The guidance lives only in a local variable of ``run_task``: it is never returned in the
result, written to M_k, L_k, the episode record or the call ledger. What persists is the raw
trajectory, its outcome, and which mode was used with what reward.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from antipersist_lib.core.agent import AgentConfig, run_episode
from antipersist_lib.core.selector import PHASES, ModeDecision, ModeSelector, SelectorConfig, decision_rng
from antipersist_lib.core.synthesis import FormatLimits, Guidance, synthesize
from antipersist_lib.envs.base import Environment
from antipersist_lib.memory.outcome_log import OutcomeLog, cost_adjusted_reward, skip_reason
from antipersist_lib.memory.trajectory_memory import TASK_FILTERS, Retrieved, TrajectoryMemory
from antipersist_lib.records import MODES, EpisodeOutcome, Task, Trajectory
from antipersist_lib.serving.embeddings import embed_text

log = logging.getLogger(__name__)

#: method parameter name -> FormatLimits field (synthesis input budget per retrieved record)
LIMIT_PARAMETERS = {
    "max_observation_chars": "max_observation_chars",
    "max_initial_chars": "max_initial_chars",
    "max_record_chars": "max_record_chars",
}


@dataclass(frozen=True)
class AntiPersistenceConfig:
    """Every Anti-Persistence hyperparameter, in one place.

    The defaults are the paper's Table 3 (B = 5, B-hat = 10, c = 0.5, gamma = 0.998, rho = 0.7,
    W_init = 3, three round-robin iterations, epsilon = 0.1, lambda = 0.05, 1024 synthesis tokens)
    plus the kit's documented choices where the paper is silent (observation and record clipping
    in the synthesis input, the task-type filter, the contrast count). ``TABLE3`` below is this
    object with its defaults; the protocol method, the per-task API, the ``select`` command and
    the ablation maps all read their defaults from it. ``params()`` / ``from_params()`` convert
    to and from the flat method-parameter names a run's ``method_params`` use.
    """

    budget: int = 5  # B: records per retrieval
    contrast: int = 1  # contrasting successes shown with the failures in corrective mode
    lam: float = 0.05  # cost weight lambda in r = clip(y - lambda * kappa, -1, 1)
    embed_prefix_chars: int = 500  # initial observation prefix in the embedding text (B.3)
    synthesis_max_tokens: int = 1024
    synthesis_temperature: float = 0.0  # B.2: the synthesis LLM decodes greedily
    task_filter: str = "task_type"  # retrieval candidates: same task type ("task_type"), same "benchmark", or "off"
    selector: SelectorConfig = field(default_factory=SelectorConfig)
    fixed_mode: str | None = None  # ablations: always use this mode instead of the bandit
    limits: FormatLimits = field(default_factory=FormatLimits)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError(f"budget (B) must be >= 1, got {self.budget}")
        if self.contrast < 0:
            raise ValueError(f"contrast must be >= 0, got {self.contrast}")
        if self.lam < 0:
            raise ValueError(f"lam (lambda) must be >= 0, got {self.lam}")
        if self.synthesis_max_tokens < 1:
            raise ValueError(f"synthesis_max_tokens must be >= 1, got {self.synthesis_max_tokens}")
        if self.task_filter not in TASK_FILTERS:
            raise ValueError(f"task_filter is {self.task_filter!r}, expected one of {TASK_FILTERS}")
        if self.fixed_mode is not None and self.fixed_mode not in MODES:
            raise ValueError(f"fixed_mode is {self.fixed_mode!r}, expected one of {MODES} or None")

    def params(self) -> dict[str, Any]:
        """The flat method parameters (selector and clipping fields lifted to the top level)."""
        out: dict[str, Any] = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("selector", "limits", "fixed_mode")
        }
        out.update(self.selector.to_dict())
        out.update({name: getattr(self.limits, attr) for name, attr in LIMIT_PARAMETERS.items()})
        return out

    @classmethod
    def from_params(cls, params: dict[str, Any], *, fixed_mode: str | None = None) -> AntiPersistenceConfig:
        """Build from flat method parameters; names outside ``params()`` are an error naming them."""
        defaults = cls().params()
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            raise ValueError(f"unknown Anti-Persistence parameter(s) {unknown}; valid: {sorted(defaults)}")
        p = {**defaults, **params}
        sel = {f.name: p[f.name] for f in fields(SelectorConfig)}
        lim = FormatLimits(**{attr: p[name] for name, attr in LIMIT_PARAMETERS.items()})
        top = {f.name: p[f.name] for f in fields(cls) if f.name not in ("selector", "limits", "fixed_mode")}
        return cls(**top, selector=SelectorConfig(**sel), limits=lim, fixed_mode=fixed_mode)


#: the paper's Table 3 defaults (with the kit's documented choices): the one source every default is read from
TABLE3 = AntiPersistenceConfig()


@dataclass(frozen=True)
class PreparedContext:
    """Everything decided before execution. Holds the guidance: keep it in memory only."""

    task: Task
    initial_observation: str
    embedding: np.ndarray | None
    decision: ModeDecision
    retrieved: tuple[Retrieved, ...]
    guidance: Guidance


@dataclass(frozen=True)
class TaskResult:
    """The per-episode record that is stored. Deliberately has no field for guidance text."""

    task: Task
    phase: str
    iteration: int
    position: int
    mode: str
    branch: str
    decision: dict[str, Any]
    kappa: int
    reward: float
    outcome: EpisodeOutcome
    retrieved_ids: tuple[int, ...]
    synthesis_skipped: str | None
    execution_calls: int
    synthesis_calls: int
    embedding_ok: bool
    memory_record_id: int | None
    logged: bool
    log_skip_reason: str | None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["task"] = self.task.to_dict()
        d["outcome"] = self.outcome.to_dict()
        d["retrieved_ids"] = list(self.retrieved_ids)
        return d


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
) -> ModeDecision:
    """Step 2 of Algorithm 1: the mode for this task (the bandit, or an ablation's fixed/random policy)."""
    if policy == "fixed":
        return selector.fixed(fixed_mode, embedding)  # type: ignore[arg-type]
    if policy == "random":
        return selector.random_policy(embedding, rng)
    return selector.select(outcome_log, embedding, iteration=iteration, position=position, rng=rng)


@dataclass(frozen=True)
class Update:
    """What one training attempt left in the stores."""

    record_id: int
    reward: float
    logged: bool
    skip_reason: str | None


def record_attempt(
    memory: TrajectoryMemory,
    outcome_log: OutcomeLog,
    task: Task,
    trajectory: Trajectory,
    outcome: EpisodeOutcome,
    *,
    embedding: np.ndarray | None,
    mode: str,
    kappa: int,
    lam: float,
    update_index: int,
    iteration: int,
    parents: tuple[str, ...] = (),
) -> Update:
    """Steps 6-7: the raw trajectory always enters M_k; the (embedding, mode, cost-adjusted reward)
    entry enters L_k unless a skip rule applies (first update, no embedding, engine failure)."""
    reward = cost_adjusted_reward(outcome.y, kappa, lam)
    rec = memory.add(task, trajectory, outcome, embedding=embedding, parents=parents, iteration=iteration, mode=mode)
    why = skip_reason(update_index, embedding, outcome.infra_failure)
    if why is None:
        outcome_log.append(
            embedding=embedding,
            mode=mode,
            reward=reward,
            raw_success=outcome.success,
            task_type=task.task_type,
            task_id=task.task_id,
            instruction=task.instruction,
        )
    return Update(rec.record_id, reward, why is None, None if why is None else why.value)


class AntiPersistence:
    """The method: trajectory memory M_k + outcome log L_k, an empty abstraction store."""

    def __init__(
        self,
        memory: TrajectoryMemory,
        outcome_log: OutcomeLog,
        llm: Any,
        embedder: Any,
        *,
        config: AntiPersistenceConfig = AntiPersistenceConfig(),
        seed: int = 0,
    ) -> None:
        self.memory = memory
        self.outcome_log = outcome_log
        self.llm = llm
        self.embedder = embedder
        self.config = config
        self.seed = int(seed)
        self.selector = ModeSelector(config.selector)

    @property
    def update_index(self) -> int:
        """k: training attempts so far (every attempt enters M_k, so k = |M_k|)."""
        return len(self.memory)

    def _rng(self, phase: str, iteration: int, position: int) -> np.random.Generator:
        return decision_rng(self.seed, phase, iteration, position)

    def embed(self, task: Task, initial_observation: str, tags: dict[str, Any] | None = None) -> np.ndarray | None:
        text = embed_text(task.instruction, initial_observation, self.config.embed_prefix_chars)
        return self.embedder.embed(text, tags=tags)

    def prepare(
        self,
        task: Task,
        initial_observation: str,
        *,
        iteration: int,
        position: int,
        phase: str,
        tags: dict[str, Any] | None = None,
    ) -> PreparedContext:
        """Steps 1-4: embed, select a mode, retrieve, synthesize. Makes no writes."""
        if phase not in PHASES:
            raise ValueError(f"phase is {phase!r}, expected one of {PHASES}")
        tags = dict(tags or {})
        embedding = self.embed(task, initial_observation, tags)
        decision = decide(
            self.selector,
            self.outcome_log,
            embedding,
            iteration=iteration,
            position=position,
            rng=self._rng(phase, iteration, position),
            policy="bandit" if self.config.fixed_mode is None else "fixed",
            fixed_mode=self.config.fixed_mode,
        )
        retrieved = self.memory.retrieve(
            embedding, decision.mode, task, budget=self.config.budget, contrast=self.config.contrast
        )
        guidance = synthesize(
            decision.mode,
            task.instruction,
            retrieved,
            self.llm,
            max_tokens=self.config.synthesis_max_tokens,
            temperature=self.config.synthesis_temperature,
            limits=self.config.limits,
            tags=tags,
        )
        return PreparedContext(task, initial_observation, embedding, decision, tuple(retrieved), guidance)

    def run_task(
        self,
        task: Task,
        env: Environment,
        *,
        iteration: int,
        position: int,
        training: bool,
        agent_config: AgentConfig = AgentConfig(),
    ) -> TaskResult:
        """Run one task end to end; during training also update M_k and L_k. ``position`` is the
        task's 0-based index within its iteration (it drives round-robin and seeds the decision)."""
        phase = "train" if training else "heldout"
        k = self.update_index
        tags = {"phase": phase, "iteration": iteration, "task": task.key}
        try:
            initial_observation = env.reset(task)
        except Exception as exc:
            log.warning("engine failed to load %s: %s", task.key, exc)
            return self._finish_infra(task, phase, iteration, position, k, f"reset: {exc!r}")

        prepared = self.prepare(
            task, initial_observation, iteration=iteration, position=position, phase=phase, tags=tags
        )
        guidance = prepared.guidance
        episode = run_episode(
            env,
            task,
            self.llm,
            context_blocks=[guidance.text],
            config=agent_config,
            initial_observation=initial_observation,
            tags=tags,
        )
        kappa = guidance.kappa
        decision = prepared.decision
        embedding = prepared.embedding
        reward = cost_adjusted_reward(episode.outcome.y, kappa, self.config.lam)
        record_id: int | None = None
        logged = False
        reason = None
        if training:
            upd = record_attempt(
                self.memory,
                self.outcome_log,
                task,
                episode.trajectory,
                episode.outcome,
                embedding=embedding,
                mode=decision.mode,
                kappa=kappa,
                lam=self.config.lam,
                update_index=k,
                iteration=iteration,
            )
            record_id, reward, logged, reason = upd.record_id, upd.reward, upd.logged, upd.skip_reason
        result = TaskResult(
            task=task,
            phase=phase,
            iteration=iteration,
            position=position,
            mode=decision.mode,
            branch=decision.branch,
            decision=decision.to_dict(),
            kappa=kappa,
            reward=reward,
            outcome=episode.outcome,
            retrieved_ids=guidance.record_ids,
            synthesis_skipped=guidance.skipped_reason,
            execution_calls=episode.llm_calls,
            synthesis_calls=kappa,
            embedding_ok=embedding is not None,
            memory_record_id=record_id,
            logged=logged,
            log_skip_reason=reason,
        )
        del guidance, prepared  # discard sigma: nothing above kept a reference to its text
        return result

    def _finish_infra(self, task: Task, phase: str, iteration: int, position: int, k: int, error: str) -> TaskResult:
        outcome = EpisodeOutcome(False, infra_failure=True, error=error)
        record_id = None
        if phase == "train":
            record_id = self.memory.add(
                task, Trajectory(""), outcome, embedding=None, iteration=iteration, mode=None
            ).record_id
        decision = self.selector.fixed("none", None)
        return TaskResult(
            task,
            phase,
            iteration,
            position,
            "none",
            "infrastructure_failure",
            decision.to_dict(),
            0,
            0.0,
            outcome,
            (),
            "engine failed before the episode started",
            0,
            0,
            False,
            record_id,
            False,
            "infrastructure_failure" if phase == "train" else None,
        )
