"""The paper's self-improvement protocol (Section 4.1, Appendix D.1) for one Table-1 cell.

For iterations 1..K: sample ``train_per_iteration`` training tasks without replacement in an
order fixed by the seed (the same for every method), run them sequentially — each updates the
method's memory — then run the method's end-of-iteration update, freeze all state and evaluate
the full held-out set. Held-out episodes may retrieve but never write; they run concurrently
(frozen state makes them independent), each worker with its own engine instance, so a vLLM
server is kept busy. Everything is written to a resumable run directory (``rundir.py``).

``run_cell(RunSpec(...))`` is what the command line and the notebooks call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.core.agent import AgentConfig, EpisodeResult, run_episode
from antipersist_lib.core.demonstrations import DemonstrationLibrary, render_block
from antipersist_lib.envs import BENCHMARKS, make_env
from antipersist_lib.envs.base import Environment
from antipersist_lib.envs.expert import EXPERT_BENCHMARKS
from antipersist_lib.envs.partitions import check_heldout_set, load_partition
from antipersist_lib.errors import BenchmarkUnavailableError
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, set_aside_malformed
from antipersist_lib.methods import METHODS, make_method, method_class, params_as_recorded, prompt_hashes
from antipersist_lib.methods.base import Method, MethodContext, TaskContext
from antipersist_lib.records import (
    MODES,
    SUBSET_ORDERS,
    SYNTHESIS_MODES,
    EpisodeOutcome,
    Partition,
    Task,
    Trajectory,
    limited_tasks,
)
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.repair import repair_committed, repair_embeddings
from antipersist_lib.serving.embeddings import Embedder
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient, server_identity
from antipersist_lib.serving.response_cache import ResponseCache
from antipersist_lib.versions import git_commit, package_versions

log = logging.getLogger(__name__)

#: AgentConfig fields a run's ``agent:`` block may set (max_steps is the run's own field)
AGENT_KEYS = (
    "max_tokens",
    "temperature",
    "top_p",
    "history_turns",
    "icl_examples",
    "icl_max_chars",
    "show_valid_actions",
    "stop_at_observation",
    "resample_repeats",
    "repeat_temperature",
    "repeat_rule",
    "repeat_feedback",
    "resample_unlisted",
)
#: small-model aids (core/agent.py) and their off values: a manifest records them only when on, so
#: runs made before they existed resume unchanged
AID_DEFAULTS = {
    "show_valid_actions": 0,
    "stop_at_observation": False,
    "resample_repeats": 0,
    "repeat_temperature": 0.7,
    "repeat_rule": "no_op",
    "repeat_feedback": False,
    "resample_unlisted": False,
}
#: the in-context demonstration fields (core/demonstrations.py); a manifest records them only
#: when demonstrations are on, so runs made before they existed resume unchanged
ICL_KEYS = ("icl_examples", "icl_max_chars")

#: manifest fields that must match for a run to be resumed
IDENTITY_KEYS = (
    "method",
    "method_params",
    "benchmark",
    "benchmark_options",
    "backbone",
    "embedding",
    "seed",
    "train_per_iteration",
    "max_steps",
    "agent",
    "partition_hash",
    "train_pool_limit",
    "heldout_limit",
    "subset",
    "task_types",
    "judge",
    "request_shape",
    "heldout_set",
)


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one run (one cell of Table 1, or one ablation point)."""

    method: str
    benchmark: str
    backbone: str  # profile name (params/backbones), profile file path, or a label when ``endpoint`` is given
    seed: int = 42
    iterations: int = 10
    train_per_iteration: int = 50
    max_steps: int = 50
    heldout_concurrency: int = 8
    heldout_limit: int | None = None  # evaluate only N held-out tasks (smoke runs)
    train_pool_limit: int | None = None  # draw training tasks from N of the pool only (smoke runs)
    #: how the two limits pick their N tasks: "balanced" (task types in turn) or "first" (records.limited_tasks)
    subset: str = "balanced"
    #: only tasks of these types, in training and held-out alike (before the limits): a probe on chosen task
    #: types, e.g. the faulty-memories study's Fig. 8(c) (one ALFWorld type) or Fig. 10 (one ScienceWorld task)
    task_types: tuple[str, ...] | None = None
    #: evaluate on this named held-out set instead of the partition's held-out split (``envs.partitions.
    #: HELDOUT_SETS``; e.g. ALFWorld's valid_seen_balanced_48, the faulty-memories paper's App. F.1 split);
    #: None: the partition's own (ALFWorld: valid_unseen, the main paper's Table 4)
    heldout_set: str | None = None
    method_params: dict[str, Any] = field(default_factory=dict)
    benchmark_options: dict[str, Any] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)  # AgentConfig fields except max_steps
    embedding: str = "qwen3-embedding-8b"  # profile name (params/embeddings), file path, "embedded", or a label
    out_root: str = "outputs/runs"
    cache_dir: str | None = "outputs/cache"  # None disables the response cache
    name: str | None = None  # run folder name (default: method + a hash of non-default params)
    progress: bool = True
    #: check the chat (and, for methods that embed, the embedding) endpoint with one small request before
    #: the first task (serving/preflight.py); false only when the caller has checked them or counts requests
    preflight: bool = True
    #: the LLM judge's model (F.2's judge is a separate model): a backbone profile name or file, or a label
    #: when the runner is given ``judge_endpoint``; None: the backbone judges. Only for a method that judges
    #: (``Method.uses_judge``, e.g. abstraction_memory with judge: true)
    judge: str | None = None
    #: the seeds of the profile (main job or grid) this run is one of; recorded in the manifest so that the
    #: tables can name a cell that averages fewer seeds even when every cell is short. Not part of the
    #: run's identity (adding a seed to a profile does not change its runs); None for a run made alone
    seeds_planned: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.preflight, bool):
            raise ValueError(f"preflight must be true or false, got {self.preflight!r}")
        if self.method not in METHODS:
            raise ValueError(f"method: unknown {self.method!r}; expected one of {tuple(METHODS)}")
        if self.benchmark not in BENCHMARKS:
            raise ValueError(f"benchmark: unknown {self.benchmark!r}; expected one of {BENCHMARKS}")
        for f in ("seed",):
            if not isinstance(getattr(self, f), int) or isinstance(getattr(self, f), bool):
                raise ValueError(f"{f} must be an integer, got {getattr(self, f)!r}")
        for f in ("iterations", "max_steps", "heldout_concurrency"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{f} must be an integer >= 1, got {v!r}")
        v = self.train_per_iteration  # 0: evaluation only (e.g. F.1's frozen skill libraries)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"train_per_iteration must be an integer >= 0, got {v!r}")
        for f in ("heldout_limit", "train_pool_limit"):
            v = getattr(self, f)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{f} must be null or an integer >= 1, got {v!r}")
        if self.subset not in SUBSET_ORDERS:
            raise ValueError(f"subset must be one of {SUBSET_ORDERS}, got {self.subset!r}")
        check_heldout_set(self.benchmark, self.heldout_set)
        if self.seeds_planned is not None:
            planned = self.seeds_planned
            if isinstance(planned, (str, bytes)) or not isinstance(planned, (list, tuple)):
                raise ValueError(f"seeds_planned must be null or a list of seeds, got {planned!r}")
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in planned) or self.seed not in planned:
                raise ValueError(
                    f"seeds_planned must list integer seeds including this run's seed {self.seed}, got {list(planned)!r}"
                )
            object.__setattr__(self, "seeds_planned", tuple(sorted(set(planned))))
        if self.task_types is not None:
            types = self.task_types
            if isinstance(types, str) or not isinstance(types, (list, tuple)):
                raise ValueError(f"task_types must be null or a list of task type names, got {types!r}")
            if not types or not all(isinstance(t, str) and t for t in types) or len(set(types)) != len(types):
                raise ValueError(f"task_types must list distinct, non-empty task type names, got {list(types)!r}")
            object.__setattr__(self, "task_types", tuple(types))
        for f in ("method_params", "benchmark_options", "agent"):
            if not isinstance(getattr(self, f), dict):
                raise ValueError(f"{f} must be a mapping, got {type(getattr(self, f)).__name__}")
        unknown = sorted(set(self.agent) - set(AGENT_KEYS))
        if unknown:
            raise ValueError(f"agent: unknown field(s) {unknown}; allowed: {', '.join(AGENT_KEYS)}")
        if self.judge is not None:
            if not isinstance(self.judge, str) or not self.judge:
                raise ValueError(f"judge must be a backbone profile name or file, got {self.judge!r}")
            if not uses_judge(self.method, self.method_params):
                raise ValueError(
                    f"judge names a model ({self.judge!r}), but method {self.method!r} with these parameters "
                    "calls no judge (abstraction_memory and joint_memory do with judge: true)"
                )
        icl = {k: self.agent[k] for k in ICL_KEYS if k in self.agent}
        if icl:
            try:
                n = AgentConfig(**icl).icl_examples
            except ValueError as exc:
                raise ValueError(f"agent: {exc}") from exc
            if n and self.benchmark not in EXPERT_BENCHMARKS:
                raise ValueError(
                    f"agent: icl_examples = {n}, but benchmark {self.benchmark!r} has no expert paths to build "
                    f"demonstrations from (they exist for {', '.join(EXPERT_BENCHMARKS)}); set icl_examples to 0"
                )

    @property
    def run_name(self) -> str:
        if self.name:
            return self.name
        if not self.method_params:
            return self.method
        digest = hashlib.sha256(json.dumps(self.method_params, sort_keys=True).encode()).hexdigest()[:8]
        return f"{self.method}-{digest}"

    @property
    def backbone_label(self) -> str:
        """The backbone as run folders and manifests name it: the profile name, or a profile file's stem."""
        from antipersist_lib.serving.profiles import profile_label

        return profile_label(self.backbone)

    @property
    def judge_label(self) -> str | None:
        """The judge profile as manifests name it (None: the backbone judges)."""
        from antipersist_lib.serving.profiles import profile_label

        return None if self.judge is None else profile_label(self.judge)

    @property
    def embedding_label(self) -> str:
        from antipersist_lib.serving.profiles import profile_label

        return profile_label(self.embedding)

    def run_dir(self) -> Path:
        return Path(self.out_root) / self.benchmark / self.backbone_label / self.run_name / f"seed{self.seed}"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        """Build from a params mapping; unknown keys are an error naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown run setting(s) {unknown}; allowed: {sorted(names)}")
        missing = [k for k in ("method", "benchmark", "backbone") if k not in d]
        if missing:
            raise ValueError(f"missing run setting(s) {missing}")
        return cls(**d)


def training_schedule(n_pool: int, iterations: int, per_iteration: int, seed: int) -> list[list[int]]:
    """Per iteration, ``per_iteration`` pool indices sampled without replacement, in a seeded
    order that depends only on the seed and the iteration (so every method sees the same)."""
    if per_iteration > n_pool:
        raise ValueError(f"train_per_iteration={per_iteration} exceeds the training pool of {n_pool} tasks")
    return [
        [int(i) for i in np.random.default_rng([seed, it]).permutation(n_pool)[:per_iteration]]
        for it in range(1, iterations + 1)
    ]


@dataclass
class IterationSummary:
    iteration: int
    heldout_success: float
    heldout_n: int
    mean_steps: float
    mean_calls: float
    mean_execution_calls: float
    mean_synthesis_calls: float
    mean_other_calls: float
    infra_failures: int
    mode_frequencies: dict[str, float]
    synthesis_mode_usage: float | None
    train_success: float
    train_n: int
    train_mode_frequencies: dict[str, float]
    #: mean engine score of the held-out episodes (ScienceWorld's 0-100 partial credit; 1/0 where the engine
    #: has only success): it moves before success does
    heldout_score: float = float("nan")


def mode_fractions(records: list[dict[str, Any]]) -> dict[str, float]:
    """The fraction of ``records`` (episode records) whose method chose each mode; {} when none
    recorded a mode (methods without modes)."""
    modes = [r["meta"].get("mode") for r in records if r["meta"].get("mode")]
    return {m: (modes.count(m) / len(modes)) for m in MODES} if modes else {}


def summarize_iteration(iteration: int, heldout: list[dict[str, Any]], train: list[dict[str, Any]]) -> IterationSummary:
    """Held-out success and cost (Table 1, Table 6), trajectory length (Figure 2b), and mode
    frequencies (Figure 8) / synthesis-mode usage (Figure 7) for one iteration."""

    def mean(xs: list[float]) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    h = [r for r in heldout if r["iteration"] == iteration]
    t = [r for r in train if r["iteration"] == iteration]
    hf = mode_fractions(h)
    return IterationSummary(
        iteration=iteration,
        heldout_success=mean([float(r["outcome"]["success"]) for r in h]),
        heldout_n=len(h),
        mean_steps=mean([r["outcome"]["n_steps"] for r in h]),
        mean_calls=mean([r["calls"]["total"] for r in h]),
        mean_execution_calls=mean([r["calls"]["execution"] for r in h]),
        mean_synthesis_calls=mean([r["calls"]["synthesis"] for r in h]),
        mean_other_calls=mean([r["calls"]["other"] for r in h]),
        infra_failures=sum(1 for r in h if r["outcome"]["infra_failure"]),
        mode_frequencies=hf,
        synthesis_mode_usage=(sum(hf.get(m, 0.0) for m in SYNTHESIS_MODES) if hf else None),
        train_success=mean([float(r["outcome"]["success"]) for r in t]),
        train_n=len(t),
        train_mode_frequencies=mode_fractions(t),
        heldout_score=mean([float(r["outcome"].get("score", 0.0)) for r in h]),
    )


#: how often a progress bar's activity line is refreshed while an episode runs (episodes take minutes)
ACTIVITY_REFRESH_S = 5.0


def ledger_activity(ledger: Ledger) -> Callable[[], str]:
    """A progress bar's activity line: the model calls this invocation made, how many the response cache
    answered, and how long ago the last one ended (a stalled server shows as a growing age)."""

    def line() -> str:
        calls, cached, last = ledger.since_open()
        age = "" if last is None else f", last {time.time() - last:.0f} s ago"
        return f"{calls} calls ({cached} cached){age}"

    return line


class _Progress:
    """A tqdm bar when tqdm is installed and progress is on; silent otherwise. With ``activity``, a thread
    refreshes the bar's postfix every ``ACTIVITY_REFRESH_S``, so the line moves while an episode runs."""

    def __init__(self, total: int, desc: str, enabled: bool, activity: Callable[[], str] | None = None) -> None:
        self.bar = None
        self._stop = threading.Event()
        if enabled:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, desc=desc, leave=False)
            except ImportError:
                pass
        if self.bar is not None and activity is not None:
            threading.Thread(target=self._refresh, args=(activity,), name="progress", daemon=True).start()

    def _refresh(self, activity: Callable[[], str]) -> None:
        while not self._stop.wait(ACTIVITY_REFRESH_S):
            bar = self.bar
            if bar is None:
                return
            try:
                bar.set_postfix_str(activity(), refresh=True)
            except Exception:  # a closed bar: stop quietly
                return

    def update(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.close()


def _episode_record(
    task: Task, phase: str, iteration: int, position: int, ctx: TaskContext, ep: EpisodeResult, stats: dict[str, int]
) -> dict[str, Any]:
    meta = {k: v for k, v in ctx.meta.items() if not k.startswith("_")}  # private keys never reach disk
    return {
        "phase": phase,
        "iteration": iteration,
        "position": position,
        "task": task.to_dict(),
        "meta": meta,
        "parents": list(ctx.parents),
        "embedding_ok": ctx.embedding is not None,
        "outcome": ep.outcome.to_dict(),
        "calls": {
            "execution": ep.llm_calls,
            "synthesis": ctx.synthesis_calls,
            "other": ctx.other_calls,
            "total": ep.llm_calls + ctx.synthesis_calls + ctx.other_calls,
        },
        "engine_steps": stats,
        "trajectory": ep.trajectory.to_dict(),
    }


def run_task(
    method: Method,
    env: Environment,
    task: Task,
    *,
    phase: str,
    iteration: int,
    position: int,
    agent_config: AgentConfig,
    demonstrations: DemonstrationLibrary | None = None,
) -> dict[str, Any]:
    """One task end to end, the way the protocol runs every task of every method: reset the
    engine, ``method.prepare`` (mode, retrieval, guidance), the ReAct episode with the method's
    context, and for a training task ``method.learn``. Returns the episode record that goes to
    ``episodes_<phase>.jsonl``; the context itself (Anti-Persistence's guidance) is dropped here.

    With ``demonstrations`` (agent option ``icl_examples``) the task's expert demonstrations go
    first in the system prompt's context, before the method's, and the record lists their
    training task ids under ``demonstrations``.

    ``position`` is the task's 0-based index within its iteration (it drives round-robin and
    seeds the decision). An engine that cannot load the task gives an infrastructure-failure
    record (nothing is learned from it); a missing engine or data stops the run."""
    if phase not in ("train", "heldout"):
        raise ValueError(f"phase is {phase!r}, expected 'train' or 'heldout'")
    try:
        obs = env.reset(task)
    except BenchmarkUnavailableError:
        raise  # engine or data missing (no Java, no game files): stop with the fix, record nothing
    except Exception as exc:  # the engine could not load the task: recorded, not learned from
        log.warning("%s task %s could not be loaded: %r", phase, task.key, exc)
        ep = EpisodeResult(Trajectory(""), EpisodeOutcome(False, infra_failure=True, error=f"reset: {exc!r}"), 0)
        return _episode_record(task, phase, iteration, position, TaskContext(), ep, {})
    ctx = method.prepare(task, obs, phase=phase, iteration=iteration, position=position)
    shown = demonstrations.for_task(task) if demonstrations is not None else []
    demo_block = render_block(shown, agent_config.icl_max_chars)
    ep = run_episode(
        env,
        task,
        method.ctx.llm,
        context_blocks=[demo_block, *ctx.blocks] if demo_block else ctx.blocks,
        config=agent_config,
        initial_observation=obs,
        tags={"phase": phase, "iteration": iteration, "task": task.key},
    )
    stats = dataclasses.asdict(env.episode_stats)
    if phase == "heldout":
        rec = _episode_record(task, phase, iteration, position, ctx, ep, stats)
        if demonstrations is not None:
            rec["demonstrations"] = [d.task.task_id for d in shown]
        return rec
    before = ctx.synthesis_calls
    method.learn(task, ctx, ep, iteration=iteration, position=position)
    rec = _episode_record(task, phase, iteration, position, ctx, ep, stats)
    if demonstrations is not None:
        rec["demonstrations"] = [d.task.task_id for d in shown]
    rec["calls"]["post_episode_synthesis"] = ctx.synthesis_calls - before
    rec["calls"]["synthesis"] = before
    rec["calls"]["total"] = ep.llm_calls + before + ctx.other_calls
    return rec


class Runner:
    """Runs one ``RunSpec``; ``run()`` returns the per-iteration summaries."""

    def __init__(
        self,
        spec: RunSpec,
        *,
        endpoint: Endpoint | None = None,
        embed_endpoint: Endpoint | None = None,
        judge_endpoint: Endpoint | None = None,
        env_factory: Callable[[], Environment] | None = None,
        partition: Partition | None = None,
        fsync: bool = True,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        backbone_info: dict[str, Any] | None = None,
    ) -> None:
        from antipersist_lib.serving.profiles import EMBEDDED, agent_decoding, backbone_endpoint, embedding_endpoint

        self.spec = spec
        # what served the model when the caller started it (the embedded default: server, model file and its
        # sha256, the llama.cpp build's compiled features); recorded in the manifest, not part of the identity
        self.backbone_info = backbone_info
        self.endpoint = endpoint or backbone_endpoint(spec.backbone)
        # the judge model's endpoint when the run names one (``spec.judge``); None: the backbone judges
        self.judge_endpoint = judge_endpoint or (backbone_endpoint(spec.judge) if spec.judge else None)
        if self.judge_endpoint is not None and spec.judge is None:
            raise ValueError("judge_endpoint needs spec.judge: the label the manifest names the judge by")
        # ``embedding: embedded``: the in-process MiniLM embedder, started by ``run`` and stopped after it
        self._embedder_server: Any = None
        self._first_env: Environment | None = None  # the engine the checks started, reused for training
        self._checked = False  # whether the endpoints answered the preflight (``_check_before_folder``)
        if embed_endpoint is None and spec.embedding == EMBEDDED:
            from antipersist_lib.serving.embedded import EmbeddedEmbedder

            self._embedder_server = EmbeddedEmbedder()
        self.embed_endpoint: Endpoint = embed_endpoint or (
            None if self._embedder_server is not None else embedding_endpoint(spec.embedding)
        )
        self.env_factory = env_factory or (lambda: make_env(spec.benchmark, **spec.benchmark_options))
        self.partition = partition or load_partition(spec.benchmark, heldout_set=spec.heldout_set)
        self.fsync = fsync
        self.on_event = on_event or (lambda kind, data: None)
        method_class(spec.method)  # fail early on import problems
        # decoding is the backbone's (its profile's temperature/top_p); the run's agent block wins
        self.agent_config = AgentConfig(max_steps=spec.max_steps, **{**agent_decoding(spec.backbone), **spec.agent})
        train = limited_tasks(of_types(self.partition.train, spec.task_types), spec.train_pool_limit, spec.subset)
        self.train_pool = train
        self.heldout = limited_tasks(of_types(self.partition.heldout, spec.task_types), spec.heldout_limit, spec.subset)
        self.schedule = training_schedule(len(train), spec.iterations, spec.train_per_iteration, spec.seed)

    # -- setup ------------------------------------------------------------------------------

    def _manifest(
        self,
        env: Environment | None,
        method: Method | None,
        demonstrations: DemonstrationLibrary | None = None,
        servers: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The run's manifest; without ``env`` and ``method`` (the checks before the run folder) it still holds
        every ``IDENTITY_KEYS`` field, and leaves out what only they know."""
        s = self.spec
        agent = dataclasses.asdict(self.agent_config)
        if not self.agent_config.icl_examples:  # off: the agent block of runs made before the option
            agent = {k: v for k, v in agent.items() if k not in ICL_KEYS}
        agent = {k: v for k, v in agent.items() if not (k in AID_DEFAULTS and v == AID_DEFAULTS[k])}
        extra = {"demonstrations": demonstrations.describe()} if demonstrations is not None else {}
        if servers:  # the servers the response cache files replies under (replay_cache reads them back)
            extra["cache_identity"] = servers
        if self.spec.cache_dir:  # where they are (select and the walkthrough find the cache through it)
            extra["cache_dir"] = str(Path(self.spec.cache_dir).resolve())
        return {
            "kit": "antipersist",
            "method": s.method,
            "method_params": s.method_params,
            **({"method_config": method.describe()} if method is not None else {}),
            "benchmark": s.benchmark,
            "benchmark_options": s.benchmark_options,
            **({"engine": env.engine_info()} if env is not None else {}),
            "partition_hash": self.partition.hash,
            "partition_seed": self.partition.seed,
            "train_pool_limit": s.train_pool_limit,
            "heldout_limit": s.heldout_limit,
            # recorded only when a limit is set (without one every task is used in split order), so
            # unlimited runs made before the option resume unchanged
            **({"subset": s.subset} if s.heldout_limit or s.train_pool_limit else {}),
            # recorded only when set, so runs made before the option resume unchanged
            **({"task_types": list(s.task_types)} if s.task_types else {}),
            # which held-out set (recorded only when not the partition's own, so earlier runs resume unchanged)
            **({"heldout_set": s.heldout_set} if s.heldout_set else {}),
            "n_train_pool": len(self.train_pool),
            "n_heldout": len(self.heldout),
            "backbone": s.backbone_label,
            **_profile_files(s),
            "endpoint": self.endpoint.describe(),
            # what the request shape sends unlike the default; absent when nothing, so earlier runs resume
            **({"request_shape": shaped} if (shaped := self.endpoint.request_shape.identity()) else {}),
            **({"embedded_backbone": self.backbone_info} if self.backbone_info else {}),
            "embedding": s.embedding_label,
            **({"embedding_endpoint": self.embed_endpoint.describe()} if self.embed_endpoint is not None else {}),
            **self._judge_manifest(),
            "seed": s.seed,
            # the profile's seeds (recorded only when known, so runs made alone or before it resume unchanged)
            **({"seeds_planned": list(s.seeds_planned)} if s.seeds_planned else {}),
            "iterations": s.iterations,
            "train_per_iteration": s.train_per_iteration,
            "max_steps": s.max_steps,
            "agent": agent,
            **extra,
            "heldout_concurrency": s.heldout_concurrency,
            "prompt_hashes": prompt_hashes(),
            "versions": package_versions(),
            "git_commit": git_commit(),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> list[IterationSummary]:
        """Run or resume. Everything that can be checked without the run folder is checked before it is
        written (``_check_before_folder``), so a run that fails a check leaves nothing behind and the corrected
        command starts afresh. With ``embedding: embedded`` the in-process embedder is started after the
        cheaper checks (it takes seconds to load) and stopped however the run ends."""
        try:
            self._check_before_folder()
            return self._run()
        finally:
            if self._embedder_server is not None:
                self._embedder_server.stop()

    def _start_embedder(self) -> None:
        if self._embedder_server is not None:
            self._embedder_server.start()  # a no-op when it runs already
            self.embed_endpoint = self._embedder_server.endpoint

    def _check_before_folder(self) -> None:
        """In order of cost, before the run folder exists: the method's parameters (built once with no
        model), the engine (no Java, no game data), the chat endpoints, then the embedder (started here when
        embedded) and its endpoint. A finished run, or one with ``preflight: false``, asks no endpoint."""
        from antipersist_lib.methods import validate_method_params

        s = self.spec
        validate_method_params(s.method, s.method_params, s.benchmark, seed=s.seed, endpoint=self.endpoint)
        # a run held by another process, or one recorded with another configuration, is refused before any request
        RunDirectory(s.run_dir()).check_resumable(self._manifest(None, None), IDENTITY_KEYS)
        self._checked = s.preflight and self.work_left()
        if not self._checked:
            self._start_embedder()
            return
        env = self.env_factory()
        try:
            getattr(env, "check_available", lambda: None)()  # no Java: named before any request
            self.preflight(("chat",))
            self._start_embedder()
            self.preflight(("embedding",))
        except BaseException:
            env.close()
            raise
        self._first_env = env

    def work_left(self) -> bool:
        return work_left(self.spec, len(self.heldout))

    def _judge_manifest(self) -> dict[str, Any]:
        """``judge`` (identity: the judge profile's label, only when one is named, so runs made before the
        option resume unchanged) and ``judge_model`` (which model judged: profile, model, base URL without
        secrets, and whether it is the backbone), for a method that judges; nothing otherwise."""
        from antipersist_lib.serving.llm import url_without_secrets

        s = self.spec
        if not uses_judge(s.method, s.method_params):
            return {}
        ep = self.judge_endpoint or self.endpoint
        model = {
            "profile": s.judge_label or s.backbone_label,
            "is_backbone": self.judge_endpoint is None,
            "model": ep.model,
            "base_url": url_without_secrets(ep.base_url),
        }
        return {**({"judge": s.judge_label} if s.judge else {}), "judge_model": model}

    def preflight(self, kinds: Sequence[str] = ("chat", "embedding")) -> None:
        """One small chat request (and one to the judge model when the run names one), and one embedding
        request when the method embeds, before the run folder is written; ``PreflightError`` names the endpoint
        that failed. Not recorded in the ledger or the cache."""
        from antipersist_lib.serving.preflight import Probe, run_preflight

        s = self.spec
        probes = []
        if "chat" in kinds:
            probes.append(Probe("chat", self.endpoint, f"backbone {s.backbone}"))
            if self.judge_endpoint is not None:
                probes.append(Probe("chat", self.judge_endpoint, f"judge {s.judge}"))
        if "embedding" in kinds and uses_embeddings(s.method):
            probes.append(Probe("embedding", self.embed_endpoint, f"embedding {s.embedding}"))
        if probes:
            run_preflight(probes, what=f"run {s.benchmark}/{s.backbone_label}/{s.run_name}/seed{s.seed}")

    def _run(self) -> list[IterationSummary]:
        spec = self.spec
        layout = RunDirectory(spec.run_dir())
        rd = layout.open()
        method: Method | None = None
        envs: list[Environment] = []
        try:
            journal = rd.read_journal()
            state_paths = [layout.state_path(f) for f in method_class(spec.method).state_files] + [
                layout.episodes_path("train")
            ]
            # a committed line damaged since its commit is rebuilt (or named) before the cut back to the commit
            repair_committed(layout, state_paths, journal.last_state)
            rd.recover(state_paths, journal.last_state)
            repair_embeddings(layout, state_paths)  # an entry a committed line names, lost from its .emb
            for unjournaled in (layout.episodes_path("heldout"), layout.calls_path):
                set_aside_malformed(unjournaled)  # a crash's fragment is set aside once, not warned about forever
            ledger = Ledger(layout.calls_path)
            cache = ResponseCache(Path(spec.cache_dir) / _slug(self.endpoint.model)) if spec.cache_dir else None
            embed_cache = (
                ResponseCache(Path(spec.cache_dir) / _slug(self.embed_endpoint.model)) if spec.cache_dir else None
            )
            llm = LLMClient(self.endpoint, ledger=ledger, cache=cache, seed=spec.seed)
            embedder = Embedder(self.embed_endpoint, ledger=ledger, cache=embed_cache)
            judge_llm = None
            if self.judge_endpoint is not None:  # its own client, cache and model; the run's ledger
                judge_cache = (
                    ResponseCache(Path(spec.cache_dir) / _slug(self.judge_endpoint.model)) if spec.cache_dir else None
                )
                judge_llm = LLMClient(self.judge_endpoint, ledger=ledger, cache=judge_cache, seed=spec.seed)
            # a resumed run keeps the behaviour it was recorded with: parameters the method gained since
            # take the value the run ran with (LEGACY_PARAMS); its identity (method_params) is unchanged
            recorded = layout.read_manifest() if layout.is_run() else None
            method = make_method(
                spec.method,
                MethodContext(llm, embedder, layout.state_dir, spec.seed, spec.benchmark, self.fsync, judge_llm),
                **params_as_recorded(spec.method, spec.method_params, recorded),
            )
            train_env = self._first_env or self.env_factory()
            envs.append(train_env)
            check = self._checked  # the endpoints answered before the folder was written (run())
            demos = self._demonstrations(layout, train_env)
            # the servers the cache files this invocation's replies under (a run with nothing left asks none)
            servers = {
                role: ident
                for role, client in (("backbone", llm), ("embedding", embedder), ("judge", judge_llm))
                if self.work_left() and client is not None and (ident := client.cache_identity()) is not None
            }
            resumed = rd.check_or_write_manifest(self._manifest(train_env, method, demos, servers), IDENTITY_KEYS)
            method.begin()
            work = self.work_left()
            if spec.progress and work:
                print(self._start_header(rd.path, resumed, len(journal.train_done), llm.cache, check), flush=True)
            if resumed:
                self.on_event("resume", {"run_dir": str(rd.path), "train_done": len(journal.train_done)})
            train_writer = JsonlWriter(layout.episodes_path("train"), fsync=self.fsync)
            held_writer = JsonlWriter(layout.episodes_path("heldout"), fsync=self.fsync)
            held_finished = layout.heldout_done()
            summaries: list[IterationSummary] = []

            for it in range(1, spec.iterations + 1):
                # training: sequential, each episode updates memory, then a journal commit
                order = self.schedule[it - 1]
                if it not in journal.iterations_ended:
                    method.begin_iteration(it)  # idempotent: a resumed iteration calls it again
                bar = _Progress(len(order), f"{spec.method} it{it} train", spec.progress, ledger_activity(ledger))
                for pos, idx in enumerate(order):
                    if (it, pos) in journal.train_done:
                        bar.update()
                        continue
                    task = self.train_pool[idx]
                    rec = run_task(
                        method,
                        train_env,
                        task,
                        phase="train",
                        iteration=it,
                        position=pos,
                        agent_config=self.agent_config,
                        demonstrations=demos,
                    )
                    train_writer.append(rec)
                    rd.commit({"kind": "train", "iteration": it, "position": pos}, state_paths)
                    journal.train_done.add((it, pos))
                    bar.update()
                    self.on_event("train_episode", rec)
                bar.close()
                if it not in journal.iterations_ended:
                    method.end_iteration(it)
                    method.snapshot(it, layout.snapshot_path(it))
                    rd.commit({"kind": "iteration_end", "iteration": it}, state_paths)
                    journal.iterations_ended.add(it)
                    self.on_event("iteration_end", {"iteration": it})

                # held-out: frozen, concurrent, only missing episodes
                method.freeze()
                try:
                    todo = [(j, t) for j, t in enumerate(self.heldout) if (it, j) not in held_finished]
                    self._evaluate(method, todo, it, held_writer, held_finished, envs, demos, ledger_activity(ledger))
                finally:
                    method.unfreeze()
                summary = self._summaries(layout)
                summaries = summary
                cur = next(s for s in summary if s.iteration == it)
                self.on_event("evaluation", dataclasses.asdict(cur))
                if spec.progress:
                    print(
                        f"[{spec.benchmark}/{spec.backbone_label}/{spec.run_name}/seed{spec.seed}] iteration {it}: "
                        f"held-out success {100 * cur.heldout_success:5.1f}% (n={cur.heldout_n}), "
                        f"{cur.mean_calls:.2f} calls/task, {cur.mean_steps:.1f} steps",
                        flush=True,
                    )
            train_writer.close()
            held_writer.close()
            if spec.progress and work:
                calls, cached, _ = ledger.since_open()
                where = f" from {llm.cache.root}" if llm.cache is not None else " (the response cache is off)"
                print(f"[{self._label()}] this invocation: {calls} model calls, {cached} replayed{where}", flush=True)
            ledger.close()
            return summaries
        finally:
            if method is not None:
                method.close()
            for e in envs:
                try:
                    e.close()
                except Exception:
                    pass
            rd.close()

    def _label(self) -> str:
        s = self.spec
        return f"{s.benchmark}/{s.backbone_label}/{s.run_name}/seed{s.seed}"

    def _start_header(
        self, run_dir: Path, resumed: bool, train_done: int, cache: ResponseCache | None, checked: bool
    ) -> str:
        """What a run says before its first task: where it writes, what it talks to, what it will do."""
        s = self.spec
        n_train = sum(len(o) for o in self.schedule)
        state = f"resuming ({train_done} of {n_train} training episodes done)" if resumed else "new"
        lines = [
            f"[{self._label()}] {state}: {run_dir}",
            f"  backbone {self.endpoint.model} at {self.endpoint.base_url}"
            + (" (answered the preflight)" if checked else " (not checked here)"),
            f"  {s.iterations} iteration(s) of {s.train_per_iteration} training task(s) from a pool of "
            f"{len(self.train_pool)}, {len(self.heldout)} held-out task(s) after each, at most {s.max_steps} steps",
            "  response cache: " + (str(cache.root) if cache is not None else "off"),
        ]
        return "\n".join(lines)

    def _evaluate(
        self,
        method: Method,
        todo: list[tuple[int, Task]],
        it: int,
        writer: JsonlWriter,
        finished: set[tuple[int, int]],
        envs: list[Environment],
        demonstrations: DemonstrationLibrary | None = None,
        activity: Callable[[], str] | None = None,
    ) -> None:
        if not todo:
            return
        local = threading.local()
        lock = threading.Lock()

        def env_for_thread() -> Environment:
            if getattr(local, "env", None) is None:
                local.env = self.env_factory()
                with lock:
                    envs.append(local.env)
            return local.env

        def one(j: int, task: Task) -> dict[str, Any]:
            env = env_for_thread()
            return run_task(
                method,
                env,
                task,
                phase="heldout",
                iteration=it,
                position=j,
                agent_config=self.agent_config,
                demonstrations=demonstrations,
            )

        bar = _Progress(len(todo), f"{self.spec.method} it{it} held-out", self.spec.progress, activity)
        workers = min(self.spec.heldout_concurrency, len(todo))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="heldout") as pool:
            futures = [pool.submit(one, j, t) for j, t in todo]
            try:
                for fut in as_completed(futures):
                    rec = fut.result()
                    writer.append(rec)
                    finished.add((it, rec["position"]))
                    bar.update()
                    self.on_event("heldout_episode", rec)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        bar.close()

    def _demonstrations(self, layout: RunDirectory, env: Environment) -> DemonstrationLibrary | None:
        """The run's in-context demonstrations (agent option ``icl_examples``), built before the
        first task for every task type the run meets (scheduled training and held-out tasks), so the
        manifest can name them; replays are
        cached under ``cache_dir`` (else the run directory) and never run twice."""
        n = self.agent_config.icl_examples
        if not n:
            return None
        spec = self.spec
        root = Path(spec.cache_dir) / "demonstrations" if spec.cache_dir else layout.demonstrations_dir
        library = DemonstrationLibrary(self.partition, spec.seed, n, root)
        # only the types of the tasks this run will meet (its scheduled training tasks and its held-out
        # tasks), not every type of the pool: a ScienceWorld pool has 30 types, a smoke run meets a few
        scheduled = [self.train_pool[i] for it in self.schedule for i in it]
        library.prepare(env, {t.task_type for t in [*scheduled, *self.heldout]})
        self.on_event("demonstrations", {"replays": library.replays, **library.describe()})
        return library

    def _summaries(self, layout: RunDirectory) -> list[IterationSummary]:
        train = layout.read_episodes("train")
        held = layout.read_episodes("heldout")
        its = sorted({r["iteration"] for r in held})
        out = [summarize_iteration(i, held, train) for i in its]
        atomic_write_json(
            layout.summary_path,
            {
                "run": str(layout.path),
                "method": self.spec.method,
                "benchmark": self.spec.benchmark,
                "backbone": self.spec.backbone_label,
                "seed": self.spec.seed,
                "iterations": [_finite(dataclasses.asdict(s)) for s in out],
            },
        )
        return out


def run_episode_counts(spec: RunSpec) -> tuple[int, int]:
    """(training, held-out) episodes per iteration of ``spec``, from its own task lists, starting nothing. A
    benchmark whose partition file is not built yet is counted from Table 4's split sizes (``--plan`` only)."""
    from antipersist_lib.envs.partitions import PAPER_COUNTS

    try:
        partition = load_partition(spec.benchmark, heldout_set=spec.heldout_set)
    except Exception:  # noqa: BLE001 - a missing or unbuilt partition: Table 4's sizes, or the run's own limits
        counts = PAPER_COUNTS.get(spec.benchmark)
        heldout = (
            spec.heldout_limit if counts is None else min(spec.heldout_limit or counts["heldout"], counts["heldout"])
        )
        if heldout is None:
            raise ValueError(
                f"{spec.benchmark}: no partition file and no Table 4 size; build the partition or set heldout_limit"
            ) from None
        return spec.train_per_iteration, int(heldout)
    train = limited_tasks(of_types(partition.train, spec.task_types), spec.train_pool_limit, spec.subset)
    heldout = limited_tasks(of_types(partition.heldout, spec.task_types), spec.heldout_limit, spec.subset)
    return min(spec.train_per_iteration, len(train)), len(heldout)


def of_types(tasks: Sequence[Task], types: Sequence[str] | None) -> list[Task]:
    """The tasks of the given types (all when None), in split order. A type the split does not hold is
    an error naming the types it does hold: a typo must not leave a probe silently empty."""
    if types is None:
        return list(tasks)
    if isinstance(types, str) or not isinstance(types, (list, tuple)):
        raise ValueError(f"task_types must be a list of task type names, got {types!r}")
    held = list(dict.fromkeys(t.task_type for t in tasks))
    missing = [t for t in types if t not in held]
    if missing:
        raise ValueError(f"task_types: {missing} not in this split; its task types are {held}")
    wanted = set(types)
    return [t for t in tasks if t.task_type in wanted]


def work_left(spec: RunSpec, n_heldout: int | None = None) -> bool:
    """False only when every held-out episode of every iteration is recorded: a finished run, which a re-run
    merely re-reads (it makes no call and needs no endpoint). ``n_heldout``: the run's held-out tasks
    (default: from the benchmark's partition and ``heldout_limit``)."""
    if n_heldout is None:
        heldout = of_types(load_partition(spec.benchmark, heldout_set=spec.heldout_set).heldout, spec.task_types)
        n_heldout = len(limited_tasks(heldout, spec.heldout_limit, spec.subset))
    layout = RunDirectory(spec.run_dir())
    if not layout.is_run() or not n_heldout:
        return True
    done = layout.heldout_done()
    return any((it, j) not in done for it in range(1, spec.iterations + 1) for j in range(n_heldout))


def uses_judge(method: str, params: dict[str, Any]) -> bool:
    """Whether a run of ``method`` with ``params`` calls an LLM judge (``Method.uses_judge``)."""
    return method_class(method).uses_judge(params)


def uses_embeddings(method: str) -> bool:
    """Whether a method calls the embedder (``Method.uses_embeddings``; ReAct and fixed libraries do not)."""
    return bool(getattr(method_class(method), "uses_embeddings", True))


def _profile_files(spec: RunSpec) -> dict[str, str]:
    """The manifest's record of profiles given as files (``backbone_profile`` / ``embedding_profile``: the
    absolute path), beside the labels; nothing for profile names."""
    from antipersist_lib.serving.profiles import is_profile_path, profile_file

    out = {}
    for key, kind, value in (("backbone", "backbones", spec.backbone), ("embedding", "embeddings", spec.embedding)):
        if is_profile_path(value) and profile_file(kind, value).is_file():
            out[f"{key}_profile"] = str(profile_file(kind, value).resolve())
    return out


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in d.items()}


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


#: the manifest's endpoint record of each role a replay reads from the cache
_MANIFEST_ENDPOINTS = {"backbone": "endpoint", "embedding": "embedding_endpoint"}


def recorded_servers(manifest: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The server identities a recorded run's ``role`` ("backbone" or "embedding") filed its cached replies
    under, first invocation first: the manifest's ``cache_identity`` and those of its ``resumed`` entries.
    For a run recorded before identities: the one its embedded server has (fixed by the model file,
    whatever the port), else its base URL alone."""
    from antipersist_lib.serving.embedded import EMBEDDER_SERVER_ID, embedded_server_id
    from antipersist_lib.serving.profiles import EMBEDDED

    found: list[dict[str, Any]] = []
    for entry in [manifest, *(manifest.get("resumed") or [])]:
        ident = (entry.get("cache_identity") or {}).get(role)
        if ident and ident not in found:
            found.append(dict(ident))
    if found:
        return found
    ep = manifest[_MANIFEST_ENDPOINTS[role]]
    server_id = ep.get("server_id")
    info = manifest.get("embedded_backbone") or {}
    if not server_id and role == "backbone" and info.get("model"):
        m = info["model"]
        server_id = embedded_server_id(info["server"], m["name"], m["sha256"], m["chat_template"])
    if not server_id and role == "embedding" and manifest.get("embedding") == EMBEDDED:
        server_id = EMBEDDER_SERVER_ID
    return [server_identity(Endpoint(**{**ep, "server_id": server_id}))]


def replay_cache(cache_root: str | Path, manifest: dict[str, Any], role: str) -> ResponseCache:
    """The response cache of a recorded run's ``role``, for a replay whose client cannot reach (or ask) the
    server: ``<cache_root>/<model>/<server>/`` of the first invocation's server, reading those of later
    invocations after it (a run resumed against another server)."""
    ep = manifest[_MANIFEST_ENDPOINTS[role]]
    root = ResponseCache(Path(cache_root) / _slug(ep["model"]))
    first, *later = (root.for_server(s) for s in recorded_servers(manifest, role))
    return ResponseCache(first.root, server=first.server, also_read=[c.root for c in later])


def run_cell(spec: RunSpec, **kw: Any) -> list[IterationSummary]:
    """Run (or resume) one cell; see ``Runner`` for the keyword arguments. Unless ``spec.preflight`` is
    false, a run with work left first checks its endpoints (``Runner.preflight``) and stops with
    ``PreflightError`` before any task when one does not answer."""
    return Runner(spec, **kw).run()
