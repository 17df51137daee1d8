"""The paper's self-improvement protocol (Section 4.1, Appendix D.1) for one Table-1 cell.

For iterations 1..K: sample ``train_per_iteration`` training tasks without replacement in an
order fixed by the seed (the same for every method), run them sequentially — each updates the
method's memory — then run the method's end-of-iteration update, freeze all state and evaluate
the full held-out set. Held-out episodes may retrieve but never write; they run concurrently
(frozen state makes them independent), each worker with its own engine instance, so a vLLM
server is kept busy. Everything is written to a resumable run directory (``rundir.py``).

``run_cell(RunSpec(...))`` is what the command line and the notebooks call; ``run_task`` runs one
task of any method (the walkthrough replays one through it, watching with ``capture``). What defines
a run is ``runner.spec``; its per-iteration summaries are ``runner.summary``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.core.agent import AgentConfig, EpisodeResult, run_episode
from antipersist_lib.core.demonstrations import Demonstration, DemonstrationLibrary, render_block
from antipersist_lib.core.prompts import agent_system_prompt
from antipersist_lib.envs import make_env
from antipersist_lib.envs.base import Environment
from antipersist_lib.envs.partitions import load_partition
from antipersist_lib.errors import BenchmarkUnavailableError
from antipersist_lib.jsonl import JsonlWriter, set_aside_malformed
from antipersist_lib.methods import make_method, method_class, params_as_recorded, prompt_hashes
from antipersist_lib.methods.base import Method, MethodContext, TaskContext
from antipersist_lib.records import PHASES, TRAIN, EpisodeOutcome, Partition, Task, Trajectory, limited_tasks
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.progress import Progress, ledger_activity
from antipersist_lib.runner.repair import repair_committed, repair_embeddings
from antipersist_lib.runner.spec import (
    AID_DEFAULTS,
    ICL_KEYS,
    IDENTITY_KEYS,
    RunSpec,
    of_types,
    training_schedule,
    uses_embeddings,
    uses_judge,
    work_left,
)
from antipersist_lib.runner.summary import IterationSummary, write_summaries
from antipersist_lib.serving.embeddings import Embedder
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.serving.response_cache import ResponseCache, model_cache
from antipersist_lib.versions import git_commit, package_versions

log = logging.getLogger(__name__)


# -- one task ---------------------------------------------------------------------------------


@dataclass
class TaskCapture:
    """What one task of ``run_task`` showed on its way, handed to its ``capture`` observer once the task is
    done (the walkthrough reads it). Nothing of it is written anywhere by the protocol.

    ``context`` is the method's ``TaskContext`` after the task: its ``meta`` holds Anti-Persistence's
    decision with its per-mode estimates (``meta["decision"]``) and the retrieved record ids
    (``meta["retrieved_ids"]``), its ``blocks`` the method's context (Anti-Persistence's temporary guidance
    last). ``context_blocks`` is the context as the agent got it (the demonstrations block first), and
    ``system_prompt`` the system prompt built from it; ``record`` is the episode record the task returns."""

    task: Task
    phase: str
    iteration: int
    position: int
    context: TaskContext
    demonstrations: list[Demonstration]
    context_blocks: list[str]
    system_prompt: str
    episode: EpisodeResult
    record: dict[str, Any]

    @property
    def decision(self) -> dict[str, Any] | None:
        """The method's recorded decision (Anti-Persistence: mode, branch, neighbourhood, per-mode estimates)."""
        return self.context.meta.get("decision")

    @property
    def retrieved_ids(self) -> list[Any]:
        """The ids of the trajectory-memory records the method retrieved for this task."""
        return list(self.context.meta.get("retrieved_ids", []))

    @property
    def guidance(self) -> str:
        """The method's last context block: Anti-Persistence's temporary guidance ("" when it has none)."""
        return self.context.blocks[-1] if self.context.blocks else ""


def _episode_record(
    task: Task,
    phase: str,
    iteration: int,
    position: int,
    ctx: TaskContext,
    ep: EpisodeResult,
    stats: dict[str, int],
    *,
    shown: list[Demonstration] | None = None,
    prepared_synthesis: int | None = None,
) -> dict[str, Any]:
    """The record of one episode, as ``episodes_<phase>.jsonl`` holds it. ``shown``: the demonstrations in its
    context (None: the run shows none; the record then has no ``demonstrations`` field). ``prepared_synthesis``:
    for a training task, the synthesis calls made before ``method.learn``; its calls then count those as
    ``synthesis`` and learn's own as ``post_episode_synthesis``."""
    meta = {k: v for k, v in ctx.meta.items() if not k.startswith("_")}  # private keys never reach disk
    synthesis = ctx.synthesis_calls if prepared_synthesis is None else prepared_synthesis
    calls = {
        "execution": ep.llm_calls,
        "synthesis": synthesis,
        "other": ctx.other_calls,
        "total": ep.llm_calls + synthesis + ctx.other_calls,
    }
    if prepared_synthesis is not None:
        calls["post_episode_synthesis"] = ctx.synthesis_calls - prepared_synthesis
    return {
        "phase": phase,
        "iteration": iteration,
        "position": position,
        "task": task.to_dict(),
        "meta": meta,
        "parents": list(ctx.parents),
        "embedding_ok": ctx.embedding is not None,
        "outcome": ep.outcome.to_dict(),
        "calls": calls,
        "engine_steps": stats,
        "trajectory": ep.trajectory.to_dict(),
        **({} if shown is None else {"demonstrations": [d.task.task_id for d in shown]}),
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
    capture: Callable[[TaskCapture], None] | None = None,
) -> dict[str, Any]:
    """One task end to end, the way the protocol runs every task of every method: reset the
    engine, ``method.prepare`` (mode, retrieval, guidance), the ReAct episode with the method's
    context, and for a training task ``method.learn``. Returns the episode record that goes to
    ``episodes_<phase>.jsonl``; the context itself (Anti-Persistence's guidance) is dropped here.

    With ``demonstrations`` (agent option ``icl_examples``) the task's expert demonstrations go
    first in the system prompt's context, before the method's, and the record lists their
    training task ids under ``demonstrations``.

    ``capture``: called once the task is done with a ``TaskCapture`` (the method's context with its
    decision, retrieved records and guidance, the prompts, the episode and its record), for a reader
    that watches one task (the Appendix C walkthrough); it changes nothing of the task or its record.

    ``position`` is the task's 0-based index within its iteration (it drives round-robin and
    seeds the decision). An engine that cannot load the task gives an infrastructure-failure
    record (nothing is learned from it, nothing captured); a missing engine or data stops the run."""
    if phase not in PHASES:
        raise ValueError(f"phase is {phase!r}, expected one of {PHASES}")
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
    blocks = [demo_block, *ctx.blocks] if demo_block else ctx.blocks
    ep = run_episode(
        env,
        task,
        method.ctx.llm,
        context_blocks=blocks,
        config=agent_config,
        initial_observation=obs,
        tags={"phase": phase, "iteration": iteration, "task": task.key},
    )
    stats = dataclasses.asdict(env.episode_stats)
    prepared = None
    if phase == TRAIN:
        prepared = ctx.synthesis_calls  # what learn adds is counted apart (post-episode synthesis)
        method.learn(task, ctx, ep, iteration=iteration, position=position)
    record = _episode_record(
        task,
        phase,
        iteration,
        position,
        ctx,
        ep,
        stats,
        shown=shown if demonstrations is not None else None,
        prepared_synthesis=prepared,
    )
    if capture is not None:
        prompt = agent_system_prompt(env.action_help, blocks)
        capture(TaskCapture(task, phase, iteration, position, ctx, shown, list(blocks), prompt, ep, record))
    return record


# -- the K iterations -------------------------------------------------------------------------


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
            # the prompt families this method uses, named explicitly (methods.PROMPT_FAMILIES), and their hashes
            "prompt_families": list(method_class(s.method).prompt_families),
            "prompt_hashes": prompt_hashes(method_class(s.method).prompt_families),
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
            llm = LLMClient(
                self.endpoint, ledger=ledger, cache=model_cache(spec.cache_dir, self.endpoint.model), seed=spec.seed
            )
            embedder = Embedder(
                self.embed_endpoint, ledger=ledger, cache=model_cache(spec.cache_dir, self.embed_endpoint.model)
            )
            judge_llm = None
            if self.judge_endpoint is not None:  # its own client, cache and model; the run's ledger
                judge_cache = model_cache(spec.cache_dir, self.judge_endpoint.model)
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
                bar = Progress(len(order), f"{spec.method} it{it} train", spec.progress, ledger_activity(ledger))
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
                summary = write_summaries(layout, spec)
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

        bar = Progress(len(todo), f"{self.spec.method} it{it} held-out", self.spec.progress, activity)
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


def _profile_files(spec: RunSpec) -> dict[str, str]:
    """The manifest's record of profiles given as files (``backbone_profile`` / ``embedding_profile``: the
    absolute path), beside the labels; nothing for profile names."""
    from antipersist_lib.serving.profiles import is_profile_path, profile_file

    out = {}
    for key, kind, value in (("backbone", "backbones", spec.backbone), ("embedding", "embeddings", spec.embedding)):
        if is_profile_path(value) and profile_file(kind, value).is_file():
            out[f"{key}_profile"] = str(profile_file(kind, value).resolve())
    return out


def run_cell(spec: RunSpec, **kw: Any) -> list[IterationSummary]:
    """Run (or resume) one cell; see ``Runner`` for the keyword arguments. Unless ``spec.preflight`` is
    false, a run with work left first checks its endpoints (``Runner.preflight``) and stops with
    ``PreflightError`` before any task when one does not answer."""
    return Runner(spec, **kw).run()
