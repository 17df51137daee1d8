"""Consolidation studies: build memories under the paper's construction conditions, evaluate them, tabulate.

"Useful Memories Become Faulty When Continuously Updated by LLMs" §3 (Static-All / Static-Group / Stream with
batch size, homogeneous vs heterogeneous batches, capped vs unbounded banks; evaluation with every entry in
context, two repeats per question), §4.1 (utility vs number of updates, Figs. 1, 3, 4) and §4.2 (Tables 2-3:
trajectory-log baselines vs consolidators, with the red "(--)" mark).

``run_study(profile, out_dir)`` reads a study profile (``params/consolidation/*.yaml``, checked by
``consolidation.profile``), builds the fixed trajectory pool once (expert replays, earlier runs' episodes or
a pool file), builds every (builder, regime) memory with ``regimes.build_memory`` (one snapshot per update step), then evaluates the bank at each chosen
step through the kit's protocol (``run_cell``, method ``consolidated_memory``, ``train_per_iteration=0``,
one iteration, one run per seed = one repeat), plus a no-memory row (``react``) and, under ``methods``, the
kit's own methods as rows beside them (Anti-Persistence, trajectory memory, ExpeL, ...; see "Method rows"
below). It writes::

    <out_dir>/study.json                    manifest: profile, backbone label, endpoints (no key), package
                                            versions, git commit, prompt hashes, pool fingerprint, builds,
                                            LLM call totals, wall time
    <out_dir>/results.csv, results.json     one row per (builder, regime, step, seed): held-out success/score
    <out_dir>/pool.jsonl                    the trajectory pool every builder consumed
    <out_dir>/memories/<builder>/<regime>/  snapshots.jsonl (one line per update step) and bank.json (and
                                            fitted/step<N>.json when a memory was cut to the context)
    <out_dir>/runs/...                      the protocol's run directories (one per evaluated bank and seed)
    <out_dir>/ledger.jsonl                  the consolidation calls (counts and tags, never text)
    <out_dir>/cache/                        response cache (``response_cache: true``)

Re-running the same command resumes: a finished build (``bank.json``) is kept, an unfinished one is rebuilt
(its calls are answered by the response cache) and the protocol resumes its own run directories.

Backbone: ``endpoint=`` wins; else the profile's ``backbone``: ``embedded`` starts the embedded default
(Gemma 3 270M on llama.cpp and all-MiniLM-L6-v2, as ``runner.main_job`` does) and labels everything with
its weak-model note; any other value is a backbone profile, a name in ``params/backbones/`` or a profile
file (its embedder: ``embedding``, a profile name or file, or ``embedded`` for the in-process MiniLM;
``embed_endpoint=`` wins); ``backbone=`` (the command line's ``--base-url/--model``) replaces the profile's.
The same model consolidates and acts, as in the paper's Tables 2-3, unless a regime names its own ``backbone``
(a backbone profile): that regime's banks are built by that model, with its own response cache folder, while
the study's backbone evaluates them and builds every other regime. This is §4.1 / Fig. 4's two-model setting
(a Static-Group or Static-All seed by a stronger model, continued by streamed updates of another, App. G.1);
``study.json`` records each such regime's endpoint (``regime_backbones``) and every build's ``built_by``.

Context budget (``context.py``, profile key ``context``): every consolidation prompt is measured against the
building model's stated context length before it is sent, and every evaluated memory against the evaluating
model's, minus a reserve for the agent's own prompt. ``overflow: refuse`` (default) stops with the builder,
regime, sizes and fixes named; ``truncate_oldest`` drops the batch's oldest records (consolidation) or the
memory's oldest entries (evaluation, written to ``memories/<builder>/<regime>/fitted/step<N>.json`` and
evaluated instead). The build's bank meta (``build_context`` in the manifest), each build's
``evaluation_context`` per step, and the results column ``memory_dropped`` record what happened.

Repeated passes and stages (``regimes.build_memory``): a stream regime with ``passes: N`` cycles the pool N
times (App. F.3 / J.1.3, H.1.2) and ``evaluation.steps: {every_pass: k}`` evaluates at the end of every k-th
pass (results column ``pass``); ``stages: {count, rule, per_type_limit}`` draws fresh batches per stage
(App. G.1 / G.2), whose utility curve is read with ``{every: k}`` stages.

Kit choices where the paper is silent:

- Step 0 of every stream is the empty bank, whose utility is the no-memory row: it is not re-evaluated, and
  the curves take it from the no-memory row. Static regimes are evaluated at their last step only.
- ``fs<N>`` (FS=N) is a one-off sample of the whole pool, so it is built under ``static_all`` regimes only;
  ``keep`` streamed is Incr. Keep, ``keep`` under ``static_all`` is One-Pass Keep.
- Tables 2-3 take each column at the last step of one condition: trajectory logs from ``static_all``,
  consolidators from the first regime of ``regime_preference`` the study has (default: stream, then
  static_all, then static_group); the chosen condition is listed beside every cell. "(--)" marks a
  consolidator whose value (at the table's precision) is below at least one trajectory-log column of the
  same row; ties are not marked. This rule reproduces every mark the paper prints (checked in the tests).

Method rows (profile key ``methods``, one entry per row; the key names the row, ``method`` the kit method,
default the key): each is run through the same protocol on the same held-out games and seeds as the banks.
``seed_pool: true`` starts the method's trajectory store from this study's pool (``methods.seeding``; only
``anti_persistence`` and ``trajectory_memory`` keep one), so it sees exactly the consolidators' data;
``iterations`` x ``train_per_iteration`` (default 1 x 0) lets it also learn from its own training episodes
on the benchmark's training split, as in the kit's main protocol (Anti-Persistence's bandit needs those:
with an empty outcome log its first ``round_robin_iterations`` iterations cycle the modes). The row is read
at the last iteration; its ``condition`` says how it got its memory. These rows are neither trajectory logs
nor consolidators, so they never carry or cause the "(--)" mark.

Reading a study back: ``load_study``, ``load_manifest``, ``results`` (several folders, e.g. one per backbone,
stack into one frame), ``summary``, ``builds_table``, ``study_note`` and the notebooks' run-or-load step
``obtain_study``; the tables (Figs. 1, 3, 4 shapes, Tables 2-3) are in ``consolidation.analysis``, the
figures in ``consolidation.figures``. Command line::

    python -m antipersist_lib consolidation --profile params/consolidation/smoke.yaml --out outputs/consolidation/smoke
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.consolidation import prompts as _consolidation_prompts  # noqa: F401  (registers prompts)
from antipersist_lib.consolidation.bank import MemoryBank, load_bank
from antipersist_lib.consolidation.context import fit_bank
from antipersist_lib.consolidation.pool import (
    PoolRecord,
    expert_pool,
    load_pool,
    pool_from_runs,
    save_pool,
    summary_coverage,
)
from antipersist_lib.consolidation.profile import (
    METHOD_REGIME,
    NO_MEMORY,
    NO_MEMORY_CONDITION,
    Build,
    MethodRow,
    StudyProfile,
    check_profile_context,
    load_study_profile,
    table_column,
)
from antipersist_lib.consolidation.regimes import BANK_FILE, SNAPSHOTS_FILE, build_memory, make_builder
from antipersist_lib.consolidation.rollouts import EpisodeRollout
from antipersist_lib.consolidation.surgery import SURGERY_DIR, memory_label, without
from antipersist_lib.consolidation.task_switch import check_sequence, judged, switch_banks
from antipersist_lib.core.agent import AgentConfig
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.envs import make_env
from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import RunSpec, run_cell
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.serving.profiles import agent_decoding
from antipersist_lib.serving.response_cache import ResponseCache
from antipersist_lib.studies import (
    MANIFEST_FILE,
    StudyModels,
    StudyProfileError,  # (re-exported: what a caller of run_study catches)
    manifest_base,
    open_models,
    previous_wall_s,
    relative_to,
    utc_now,
    with_restarts,
)

STUDY_FORMAT = 1
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"
POOL_FILE = "pool.jsonl"
#: the task-switch sequence's rows (Figs. 10 and 18): one per (setup, task, seed)
SWITCH_RESULTS = "task_switch.json"
#: the memory surgery's rows (App. I.1, Tables 12-13): one per (memory: full or minus one entry, seed)
SURGERY_RESULTS = "surgery.json"
MEMORIES_DIR = "memories"
RUNS_DIR = "runs"
CACHE_DIR = "cache"
LEDGER_FILE = "ledger.jsonl"
FITTED_DIR = "fitted"
#: what identifies one evaluated bank (a row of a table is these, averaged over seeds)
CONDITION_COLUMNS = (
    "benchmark",
    "backbone",
    "builder",
    "column",
    "condition",
    "regime",
    "batch_size",
    "homogeneous",
    "capacity",
    "initial",
)
RESULT_COLUMNS = (
    *CONDITION_COLUMNS,
    "step",
    "updates",
    "examples_seen",
    "n_entries",
    "memory_chars",
    "update_errors",
    "pass",
    "memory_dropped",
    "seed",
    "heldout_n",
    "success",
    "score",
    "infra_failures",
    "mean_steps",
    "mean_calls",
    "run_dir",
)

# -- pools, builds --------------------------------------------------------------------------------------


def obtain_pool(profile: StudyProfile, out: Path, *, root: Path | None = None) -> list[PoolRecord]:
    """The study's pool: ``<out>/pool.jsonl`` when a previous (resumed) run saved it, else built and saved."""
    saved = out / POOL_FILE
    if saved.exists():
        return load_pool(saved)
    base = root or Path.cwd()
    spec = profile.pool
    if spec.kind == "expert":
        pool = expert_pool(
            profile.benchmark,
            int(spec.per_type or 1),
            spec.seed,
            types=spec.types,
            split=spec.split,
            allow_fewer=spec.allow_fewer,
        )
    elif spec.kind == "runs":
        pool = pool_from_runs([base / r for r in spec.runs], successes_only=spec.successes_only)
    else:
        pool = load_pool(base / str(spec.file))
    save_pool(pool, saved)
    return pool


def pool_fingerprint(pool: Sequence[PoolRecord], path: Path | None = None) -> dict[str, Any]:
    """Size, per-type counts, the hash of the record ids (as the banks' meta) and of the pool file's bytes."""
    types: dict[str, int] = {}
    for r in pool:
        types[r.task_type] = types.get(r.task_type, 0) + 1
    out: dict[str, Any] = {
        "size": len(pool),
        "types": dict(sorted(types.items())),
        "successes": sum(1 for r in pool if r.outcome.success),
        "hash": hashlib.sha256("\n".join(r.rid for r in pool).encode("utf-8")).hexdigest()[:16],
        "sources": sorted({r.source for r in pool}),
    }
    if path is not None and path.exists():
        out["file_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def summary_budgets(profile: StudyProfile) -> dict[int, list[str]]:
    """Each size at which the study's builders summarize pool records -> what reads it there: ``<builder> input``
    (the prompt of a builder that calls a model) or ``<builder> log`` (a trajectory log stored in its bank)."""
    uses: dict[int, list[str]] = {}
    for b in profile.builders:
        builder = make_builder(b, llm=object(), embedder=object(), seed=0, **profile.options(b))
        if builder.needs_llm:
            uses.setdefault(builder.summary_chars, []).append(f"{b} input")
        if getattr(builder, "log_chars", None) is not None:
            uses.setdefault(builder.log_chars, []).append(f"{b} log")
    return dict(sorted(uses.items()))


def summaries_kept(profile: StudyProfile, pool: Sequence[PoolRecord]) -> dict[str, Any]:
    """The manifest's ``summaries``: per summary size the study uses, what reads it and how many of its actions
    each of the pool's summaries keeps (``pool.summary_coverage``, outcome line included: the longer form), so a
    budget too small for every action is visible in the study folder, not only in the prompts."""
    return {str(n): {"read_by": uses, **summary_coverage(pool, n)} for n, uses in summary_budgets(profile).items()}


def memory_dir(out: str | Path, build: Build) -> Path:
    return Path(out) / MEMORIES_DIR / build.builder / build.regime.name


def _run_build(profile: StudyProfile, build: Build, pool: list[PoolRecord], out: Path, llm: Any, embedder: Any) -> Path:
    """Build one memory into its folder (kept when finished); ``llm`` is the model of the build's regime."""
    folder = memory_dir(out, build)
    if (folder / BANK_FILE).exists():
        return folder / SNAPSHOTS_FILE
    if folder.exists():  # an unfinished build: start again (the response cache answers its calls)
        shutil.rmtree(folder)
    r = build.regime
    initial = None
    if r.initial is not None:
        base = memory_dir(out, Build(build.builder, profile.regime(r.initial)))
        initial = (
            load_bank(base / BANK_FILE) if r.initial_step is None else load_bank(base / SNAPSHOTS_FILE, r.initial_step)
        )
    pool = regime_pool(pool, r)
    options = profile.options(build.builder)
    env = None
    if build.builder in ("ace", "ace_gt") and options.get("generator") == "rollout":
        # ACE's generator plays each task of a batch on the benchmark's engine with the playbook in context
        env = make_env(profile.benchmark, **profile.benchmark_options)
        backbone = build.regime.backbone or profile.backbone
        config = AgentConfig(max_steps=profile.max_steps, **{**agent_decoding(backbone), **profile.agent})
        options = {**options, "rollout": EpisodeRollout(env, llm, config, builder=build.builder)}
    builder = make_builder(build.builder, llm=llm, embedder=embedder, seed=profile.build_seed, **options)
    try:
        _build(profile, build, pool, builder, folder, initial)
    finally:
        if env is not None:
            env.close()
    return folder / SNAPSHOTS_FILE


def regime_pool(pool: list[PoolRecord], regime: Any) -> list[PoolRecord]:
    """The records a regime builds from: the whole pool, or (``types``) those of its task types, in pool order.
    A type the pool lacks is an error naming the pool's types."""
    if regime.types is None:
        return pool
    held = list(dict.fromkeys(r.task_type for r in pool))
    missing = [t for t in regime.types if t not in held]
    if missing:
        raise ValueError(f"regimes.{regime.name}.types: the pool has no records of {missing}; it holds {held}")
    return [r for r in pool if r.task_type in regime.types]


def _build(
    profile: StudyProfile, build: Build, pool: list[PoolRecord], builder: Any, folder: Path, initial: Any
) -> None:
    r = build.regime
    build_memory(
        pool,
        builder,
        r.regime,
        batch_size=r.batch_size,
        homogeneous=True if r.homogeneous is None else r.homogeneous,
        capacity=r.capacity,
        seed=profile.build_seed,
        out_dir=folder,
        initial=initial,
        passes=r.passes,
        stages=r.stages,
        context_overflow=profile.context.overflow,
        regime_name=r.name,
    )


@dataclass(frozen=True)
class StepInfo:
    """What a snapshot step of a build holds (the memory a run evaluates)."""

    step: int
    updates: int
    examples_seen: int
    n_entries: int
    memory_chars: int
    update_errors: int
    pass_index: int | None = None  # the pool pass (1-based) this step's update belongs to; None: not cycled
    pass_end: bool = False  # this step's update ends a pass over the pool
    stage: int | None = None  # the stage of a staged stream


def snapshot_steps(snapshots: str | Path) -> list[StepInfo]:
    """Every step of a snapshots file with its memory's size, the examples the builder had seen and the
    updates whose reply could not be parsed (the bank then stayed as it was)."""
    lines = [json.loads(x) for x in Path(snapshots).read_text(encoding="utf-8").splitlines() if x.strip()]
    out, seen, errors = [], 0, 0
    first = int(lines[0]["step"]) if lines else 0
    for line in lines:
        event = line.get("event") or {}
        seen += len(event.get("batch", []) or [])
        errors += 1 if event.get("error") else 0
        bank = MemoryBank.from_dict(line["bank"])
        out.append(
            StepInfo(
                int(line["step"]),
                int(line["step"]) - first,
                seen,
                len(bank.entries),
                len(bank.render()),
                errors,
                pass_index=event.get("pass"),
                pass_end=bool(event.get("pass_end", False)),
                stage=event.get("stage"),
            )
        )
    return out


def evaluation_steps(profile: StudyProfile, build: Build, steps: Sequence[StepInfo]) -> list[StepInfo]:
    """The steps of one build that are evaluated (never its first: the empty or initial bank). Static regimes:
    the last step; streams: the regime's ``steps``, else the profile's ``evaluation.steps`` ("last", "all",
    a list of bank steps, ``{every: k}`` updates, or ``{every_pass: k}``: the end of every k-th pass over the
    pool), the last step always included."""
    if len(steps) < 2:
        return []
    later = steps[1:]
    rule = build.regime.steps if build.regime.steps is not None else profile.steps
    if build.regime.regime != "stream" or rule == "last":
        return [later[-1]]
    if rule == "all":
        return later
    if isinstance(rule, dict) and "every_pass" in rule:
        k = int(rule["every_pass"])
        return [
            s for s in later if (s.pass_end and s.pass_index is not None and s.pass_index % k == 0) or s is later[-1]
        ]
    if isinstance(rule, dict):
        k = int(rule["every"])
        return [s for s in later if s.updates % k == 0 or s is later[-1]]
    wanted = set(rule)
    return [s for s in later if s.step in wanted or s is later[-1]]


# -- the backbone -------------------------------------------------------------------------------------


# -- running a study ------------------------------------------------------------------------------------


@dataclass
class StudyResult:
    out: Path
    frame: pd.DataFrame
    manifest: dict[str, Any]


def _evaluate(
    profile: StudyProfile,
    models: StudyModels,
    out: Path,
    *,
    method: str,
    method_params: dict[str, Any],
    name: str,
    seed: int,
    iterations: int = 1,
    train_per_iteration: int = 0,
    train_pool_limit: int | None = None,
    task_types: Sequence[str] | None = None,
    heldout_limit: int | None = None,
    evaluator: Evaluator | None = None,
) -> dict[str, Any]:
    """One protocol run of the held-out set by ``evaluator`` (default: the study's backbone)."""
    evaluator = evaluator or Evaluator(models.label, models.endpoint)
    spec = RunSpec(
        method=method,
        benchmark=profile.benchmark,
        backbone=evaluator.label,
        embedding=models.embed_label,
        seed=int(seed),
        iterations=iterations,
        train_per_iteration=train_per_iteration,
        train_pool_limit=train_pool_limit,
        max_steps=profile.max_steps,
        heldout_concurrency=profile.heldout_concurrency,
        heldout_limit=profile.heldout_limit if heldout_limit is None else heldout_limit,
        task_types=profile.task_types if task_types is None else tuple(task_types),
        heldout_set=profile.heldout_set,
        method_params=method_params,
        benchmark_options=dict(profile.benchmark_options),
        agent=dict(profile.agent),
        name=name,
        out_root=str(out / RUNS_DIR),
        cache_dir=str(out / CACHE_DIR) if profile.response_cache else None,
        progress=False,
        preflight=models.preflight,  # each run with work left checks its endpoints (a finished one needs none)
    )
    summaries = with_restarts(
        models,
        f"run {name} seed {seed}",
        lambda: run_cell(spec, endpoint=evaluator.endpoint, embed_endpoint=models.embed_endpoint),
    )
    last = summaries[-1]
    held = [r for r in RunDirectory(spec.run_dir()).read_episodes("heldout") if r.get("iteration") == last.iteration]
    scores = [float(r["outcome"].get("score", 0.0)) for r in held]
    return {
        "seed": int(seed),
        "heldout_n": last.heldout_n,
        "success": _finite(last.heldout_success),
        "score": _finite(sum(scores) / len(scores)) if scores else None,
        "infra_failures": last.infra_failures,
        "mean_steps": _finite(last.mean_steps),
        "mean_calls": _finite(last.mean_calls),
        "run_dir": relative_to(spec.run_dir(), out),
    }


@dataclass(frozen=True)
class Evaluator:
    """A model that acts on the banks: its label (the rows' ``backbone``) and endpoint."""

    label: str
    endpoint: Endpoint


def evaluators(profile: StudyProfile, models: StudyModels) -> list[Evaluator]:
    """The study's backbone, or the profile's ``evaluation.backbones`` (each bank is evaluated by each)."""
    if not profile.eval_backbones:
        return [Evaluator(models.label, models.endpoint)]
    from antipersist_lib.serving.profiles import backbone_endpoint, profile_label

    return [Evaluator(profile_label(name), backbone_endpoint(name)) for name in profile.eval_backbones]


def _finite(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else float(x)


def _run_name(builder: str, regime: str, step: int) -> str:
    return f"{builder}--{regime}--s{step}"


def _write_results(out: Path, rows: list[dict[str, Any]], note: str) -> pd.DataFrame:
    frame = _frame(rows)
    frame.to_csv(out / RESULTS_CSV, index=False)
    atomic_write_json(out / RESULTS_JSON, {"format": STUDY_FORMAT, "note": note, "rows": rows})
    return frame


def run_study(
    profile_path: str | Path,
    out_dir: str | Path,
    *,
    endpoint: Endpoint | None = None,
    embed_endpoint: Endpoint | None = None,
    root: str | Path | None = None,
    backbone: str | Endpoint | None = None,
    preflight: bool = True,
) -> StudyResult:
    """Build every memory of the profile, evaluate each chosen step per seed (and the no-memory row), and
    write the study folder (see the module docstring). Paths in the profile (``pool.runs``, ``pool.file``)
    are taken from ``root`` (default: the working directory). Re-running resumes.

    ``backbone`` replaces the profile's backbone (a profile name or file, or an ad-hoc ``Endpoint`` from
    ``--base-url/--model``). Preflight: before a build still to do, the chat endpoint (and for ACE, which
    deduplicates by embedding, the embedding endpoint) gets one small request; every evaluation run with work
    left checks its own endpoints (``RunSpec.preflight``). ``preflight=False`` skips both.

    Context: the profile's largest prompts are estimated when it loads (``profile.check_profile_context``); given
    another endpoint or backbone, the study's own backbone is checked against that endpoint's context instead, once
    it is open and before any call. The estimates go into the manifest (``context.estimates``)."""
    profile = load_study_profile(profile_path, context_check=endpoint is None and backbone is None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    started = utc_now()
    before = previous_wall_s(out)
    pool = obtain_pool(profile, out, root=Path(root) if root is not None else None)
    fingerprint = pool_fingerprint(pool, out / POOL_FILE)
    summaries = summaries_kept(profile, pool)
    rows: list[dict[str, Any]] = []
    builds_info: list[dict[str, Any]] = []
    ledger = Ledger(out / LEDGER_FILE)
    try:
        with open_models(
            profile.path,
            profile.backbone if backbone is None else backbone,
            out,
            backbone_options=profile.backbone_options,
            endpoint=endpoint,
            embedding=profile.embedding,
            embed_endpoint=embed_endpoint,
            preflight=preflight,
        ) as models:
            if models.note:
                print("note:", models.note)
            # the endpoint really used may not be the profile's backbone (--base-url, --backbone): its context decides
            estimates = [s.to_dict() for s in check_profile_context(profile, models.endpoint)]
            print(
                f"consolidation study {out}: {profile.benchmark}, model {models.endpoint.model} at "
                f"{models.endpoint.base_url}, {len(pool)} pool record(s)",
                flush=True,
            )
            regime_llms = _regime_llms(profile, ledger, out)
            manifest = _manifest(profile, models, fingerprint, started, status="running", regime_llms=regime_llms)
            manifest["summaries"] = summaries
            manifest["context"]["estimates"] = estimates
            atomic_write_json(out / MANIFEST_FILE, manifest)
            cache = ResponseCache(out / CACHE_DIR / _slug(models.endpoint.model)) if profile.response_cache else None
            embed_cache = (
                ResponseCache(out / CACHE_DIR / _slug(models.embed_endpoint.model)) if profile.response_cache else None
            )
            llm = LLMClient(models.endpoint, ledger=ledger, cache=cache, seed=profile.build_seed)
            from antipersist_lib.serving.embeddings import Embedder

            embedder = Embedder(models.embed_endpoint, ledger=ledger, cache=embed_cache)
            checked_regime_backbones: set[str] = set()
            base = {"benchmark": profile.benchmark, "backbone": models.label}
            manifest_extra: dict[str, Any] = {}
            all_builds = list(profile.builds())
            print(
                f"{len(all_builds)} bank(s) to build or reload and evaluate"
                + (f", {len(profile.seeds)} no-memory evaluation(s)" if profile.no_memory else "")
                + (f", {len(profile.methods) * len(profile.seeds)} method evaluation(s)" if profile.methods else "")
                + " (finished parts are reloaded, not redone)",
                flush=True,
            )
            acting = evaluators(profile, models)
            if profile.no_memory:
                for ev in acting:
                    for seed in profile.seeds:
                        res = _evaluate(
                            profile,
                            models,
                            out,
                            method=NO_MEMORY,
                            method_params={},
                            name=NO_MEMORY,
                            seed=seed,
                            evaluator=ev,
                        )
                        rows.append({**base, "backbone": ev.label, **_no_memory_fields(), **res})
                        _progress(rows[-1])
            for index, build in enumerate(all_builds, 1):
                b0 = time.monotonic()
                build_llm = regime_llms.get(build.regime.backbone or "", llm)
                if not (memory_dir(out, build) / BANK_FILE).exists():
                    models.check_endpoints(f"study {out}", embeddings=build.builder in ("ace", "ace_gt"))
                    if build_llm is not llm and preflight and build.regime.backbone not in checked_regime_backbones:
                        _check_regime_backbone(build.regime.backbone or "", build_llm, out)
                        checked_regime_backbones.add(build.regime.backbone or "")
                with ledger.tag(build=build.key, built_by=build_llm.endpoint.model):
                    snaps = with_restarts(
                        models,
                        f"build {build.key}",
                        lambda b=build, m=build_llm: _run_build(profile, b, pool, out, m, embedder),
                    )
                steps = snapshot_steps(snaps)
                chosen = evaluation_steps(profile, build, steps)
                r = build.regime
                builds_info.append(
                    {
                        "builder": build.builder,
                        "regime": r.name,
                        "label": r.label(),
                        "steps": steps[-1].step if steps else 0,
                        "final_entries": steps[-1].n_entries if steps else 0,
                        "update_errors": steps[-1].update_errors if steps else 0,
                        "evaluated_steps": [s.step for s in chosen],
                        "memory": relative_to(snaps, out),
                        "built_by": {
                            "backbone": build.regime.backbone or models.label,
                            "model": build_llm.endpoint.model,
                        },
                        "build_context": load_bank(snaps.parent / BANK_FILE).meta.get("context"),
                        "evaluation_context": {},
                        "build_s": round(time.monotonic() - b0, 1),
                    }
                )
                print(
                    f"[bank {index} of {len(all_builds)}: {build.key}] {builds_info[-1]['steps']} steps, {builds_info[-1]['final_entries']} entries, "
                    f"{builds_info[-1]['update_errors']} unparseable replies; evaluating steps "
                    f"{builds_info[-1]['evaluated_steps']}",
                    flush=True,
                )
                for info in chosen:
                    for ev in acting:
                        own = ev.label == models.label
                        memory_params, fit = _fitted_memory(
                            profile, ev.endpoint, build, snaps, info, None if own else ev.label
                        )
                        builds_info[-1]["evaluation_context"][str(info.step) if own else f"{info.step} {ev.label}"] = (
                            fit
                        )
                        for seed in profile.seeds:
                            res = _evaluate(
                                profile,
                                models,
                                out,
                                method="consolidated_memory",
                                method_params=memory_params,
                                name=_run_name(build.builder, r.name, info.step),
                                seed=seed,
                                evaluator=ev,
                            )
                            rows.append(
                                {
                                    **base,
                                    "backbone": ev.label,
                                    **_build_fields(build, info),
                                    "memory_dropped": fit["dropped_entries"],
                                    **res,
                                }
                            )
                            _progress(rows[-1], f"bank {index} of {len(all_builds)}")
            if profile.surgery is not None:
                surgery_rows = _run_surgery(profile, models, out)
                manifest_extra["surgery"] = {"rows": len(surgery_rows), "file": SURGERY_RESULTS}
            if profile.task_switch is not None:
                switch_rows = _run_task_switch(profile, models, out, pool, llm, embedder)
                manifest_extra["task_switch"] = {"rows": len(switch_rows), "file": SWITCH_RESULTS}
            method_evals = len(profile.methods) * len(profile.seeds) * len(acting)
            for mrow in profile.methods:
                params = dict(mrow.params)
                if mrow.seed_pool:
                    params["seed_pool"] = str(out / POOL_FILE)
                for ev in acting:
                    for seed in profile.seeds:
                        res = _evaluate(
                            profile,
                            models,
                            out,
                            method=mrow.method,
                            method_params=params,
                            name=f"{METHOD_REGIME}--{mrow.name}",
                            seed=seed,
                            iterations=mrow.iterations,
                            train_per_iteration=mrow.train_per_iteration,
                            train_pool_limit=mrow.train_pool_limit,
                            evaluator=ev,
                        )
                        rows.append({**base, "backbone": ev.label, **_method_fields(mrow, len(pool)), **res})
                        done = sum(1 for row in rows if row["regime"] == METHOD_REGIME)
                        _progress(rows[-1], f"method evaluation {done} of {method_evals}")
            frame = _write_results(out, rows, models.note)
            manifest = _manifest(profile, models, fingerprint, started, status="complete", regime_llms=regime_llms)
            manifest["context"]["estimates"] = estimates
            manifest.update(
                {
                    "summaries": summaries,
                    **manifest_extra,
                    "builds": builds_info,
                    "evaluations": len(rows),
                    "calls": {"consolidation": ledger.totals(), "evaluation": _run_call_totals(out, rows)},
                    "wall_s": round(time.monotonic() - t0, 1),  # this invocation
                    "wall_s_total": round(before + time.monotonic() - t0, 1),  # every invocation into this folder
                    "finished_at": utc_now(),
                }
            )
            atomic_write_json(out / MANIFEST_FILE, manifest)
    finally:
        ledger.close()
    return StudyResult(out, frame, manifest)


def _run_task_switch(
    profile: StudyProfile, models: StudyModels, out: Path, pool: list[PoolRecord], llm: Any, embedder: Any
) -> list[dict[str, Any]]:
    """The task-switch sequence (``task_switch``): every setup's bank after every task, each evaluated on that
    task's held-out cases with every entry in context (one run per seed) and judged entry by entry; one row per
    (setup, task, seed) in ``task_switch.json``. Banks, verdicts and runs are kept, so a re-run resumes."""
    spec = profile.task_switch
    assert spec is not None
    sequence = check_sequence(pool, spec.sequence or list(dict.fromkeys(r.task_type for r in pool)))
    source_types = {r.rid: r.task_type for r in pool}
    rows: list[dict[str, Any]] = []
    for setup in spec.setups:
        banks = with_restarts(
            models,
            f"task switch {setup}",
            lambda s=setup: switch_banks(
                pool,
                sequence,
                lambda: make_builder(
                    spec.builder, llm=llm, embedder=embedder, seed=profile.build_seed, **profile.options(spec.builder)
                ),
                s,
                out,
                batch_size=spec.batch_size,
                capacity=spec.capacity,
                seed=profile.build_seed,
                records_per_task=spec.records_per_task,
            ),
        )
        for bank in banks:
            labels = None
            if spec.judge:
                verdicts = with_restarts(
                    models, f"judge {setup} task {bank.index}", lambda b=bank: judged(b, llm, source_types)
                )
                labels = [v["label"] for v in verdicts]
            for seed in profile.seeds:
                res = _evaluate(
                    profile,
                    models,
                    out,
                    method="consolidated_memory",
                    method_params={"memory": str(bank.path)},
                    name=f"switch--{setup}--{bank.index:02d}-{bank.task_type}",
                    seed=seed,
                    task_types=[bank.task_type],
                    heldout_limit=spec.heldout_limit,
                )
                rows.append(
                    {
                        "benchmark": profile.benchmark,
                        "backbone": models.label,
                        "builder": spec.builder,
                        "setup": setup,
                        "index": bank.index,
                        "task_type": bank.task_type,
                        "entries": bank.entries,
                        "records": bank.records,
                        "labels": labels,
                        "memory": relative_to(bank.path, out),
                        **res,
                    }
                )
                print(
                    f"  switch {setup:<10} task {bank.index:>2} {bank.task_type:<28} seed {seed}: "
                    f"score {res['score']}, {bank.entries} entries",
                    flush=True,
                )
    atomic_write_json(out / SWITCH_RESULTS, {"sequence": sequence, "rows": rows})
    return rows


def _run_surgery(profile: StudyProfile, models: StudyModels, out: Path) -> list[dict[str, Any]]:
    """Memory surgery (``surgery``): the chosen bank whole and without each chosen entry, each written to
    ``surgery/<memory>.json`` and evaluated once per seed on the study's held-out tasks; rows in
    ``surgery.json``. Finished runs are kept, so a re-run resumes."""
    spec = profile.surgery
    assert spec is not None
    build = Build(spec.builder, profile.regime(spec.regime))
    snaps = memory_dir(out, build) / SNAPSHOTS_FILE
    step = spec.step
    if spec.end_of_pass is not None:
        ends = [s.step for s in snapshot_steps(snaps) if s.pass_end and s.pass_index == spec.end_of_pass]
        if not ends:
            raise StudyProfileError(
                f"study profile {profile.path}: no snapshot ends pass {spec.end_of_pass} in {snaps}"
            )
        step = ends[0]
    bank = load_bank(snaps, step)
    removed = list(spec.remove) if spec.remove is not None else list(bank.ids)
    unknown = [i for i in removed if i not in bank.ids]
    if unknown:
        raise StudyProfileError(
            f"study profile {profile.path}: 'surgery.remove' names {unknown}, which the {spec.builder} bank of "
            f"regime {spec.regime!r} at step {bank.step} does not hold (it holds {bank.ids})"
        )
    folder = out / SURGERY_DIR
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for entry in [None, *removed]:
        edited = bank if entry is None else without(bank, entry)
        path = folder / f"{memory_label(entry).replace(' ', '_')}.json"
        if not path.exists():
            edited.save(path)
        for seed in profile.seeds:
            res = _evaluate(
                profile,
                models,
                out,
                method="consolidated_memory",
                method_params={"memory": str(path)},
                name=f"surgery--{spec.builder}--{spec.regime}--{memory_label(entry).replace(' ', '_')}",
                seed=seed,
            )
            rows.append(
                {
                    "benchmark": profile.benchmark,
                    "backbone": models.label,
                    "builder": spec.builder,
                    "regime": spec.regime,
                    "step": bank.step,
                    "removed": entry,
                    "title": None if entry is None else (bank.get(entry).title or None),
                    "entries": len(edited.entries),
                    "memory": relative_to(path, out),
                    **res,
                }
            )
            print(
                f"  surgery {memory_label(entry):<14} seed {seed}: success {res['success']}, "
                f"{len(edited.entries)} entries",
                flush=True,
            )
    atomic_write_json(out / SURGERY_RESULTS, {"bank": relative_to(snaps, out), "step": bank.step, "rows": rows})
    return rows


def _extra_rows(found: Any, file: str) -> list[dict[str, Any]]:
    """The rows of one of a study's extra result files (``file``) in every folder of ``found``."""
    rows: list[dict[str, Any]] = []
    for d in _dirs(found):
        path = Path(d) / file
        if path.exists():
            rows.extend(json.loads(path.read_text(encoding="utf-8"))["rows"])
    return rows


def load_surgery(found: Any) -> list[dict[str, Any]]:
    """The memory-surgery rows of a study folder (or folders); [] when it ran no surgery."""
    return _extra_rows(found, SURGERY_RESULTS)


def load_task_switch(found: Any) -> list[dict[str, Any]]:
    """The task-switch rows of a study folder (or folders); [] when it ran no task switch."""
    return _extra_rows(found, SWITCH_RESULTS)


def _regime_llms(profile: StudyProfile, ledger: Ledger, out: Path) -> dict[str, LLMClient]:
    """A client per backbone that a regime names (``regimes.<name>.backbone``): Fig. 4's seed bank is built by
    one model and continued by another. Each has its own response cache folder and shares the study's ledger
    (its calls are tagged ``built_by``)."""
    from antipersist_lib.serving.profiles import backbone_endpoint

    clients: dict[str, LLMClient] = {}
    for r in profile.regimes:
        if r.backbone is None or r.backbone in clients:
            continue
        try:
            ep = backbone_endpoint(r.backbone)
        except ValueError as exc:
            raise StudyProfileError(f"study profile {profile.path}: 'regimes.{r.name}.backbone': {exc}") from None
        cache = ResponseCache(out / CACHE_DIR / _slug(ep.model)) if profile.response_cache else None
        clients[r.backbone] = LLMClient(ep, ledger=ledger, cache=cache, seed=profile.build_seed)
    return clients


def _check_regime_backbone(name: str, client: LLMClient, out: Path) -> None:
    from antipersist_lib.serving.preflight import Probe, run_preflight

    run_preflight([Probe("chat", client.endpoint, f"regime backbone {name}")], what=f"study {out}")


def _fitted_memory(
    profile: StudyProfile, endpoint: Endpoint, build: Build, snaps: Path, info: StepInfo, label: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The evaluated memory's method parameters after the context check (``context.fit_bank``) against the
    acting model's context: the snapshot step itself, or (``truncate_oldest`` past the budget) a bank file of the
    newest entries that fit, written beside the build as ``fitted/step<N>.json`` (``fitted/<label>/`` for an
    evaluation backbone other than the study's); and the check's record."""
    bank = load_bank(snaps, info.step)
    fitted = fit_bank(
        bank,
        context_length=endpoint.context_length,
        spec=profile.context,
        builder=build.builder,
        regime=build.regime.name,
        step=info.step,
        model=endpoint.model,
    )
    if not fitted.truncated:
        return {"memory": str(snaps), "step": info.step}, fitted.record
    path = snaps.parent / FITTED_DIR / (label or "") / f"step{info.step}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    fitted.bank.save(path)
    return {"memory": str(path)}, fitted.record


def _slug(s: str) -> str:  # the protocol's cache folder name for a model (so both share one cache)
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in s)


def _no_memory_fields() -> dict[str, Any]:
    return {
        "builder": NO_MEMORY,
        "column": "no_mem",
        "condition": NO_MEMORY_CONDITION,
        "regime": "none",
        "batch_size": None,
        "homogeneous": None,
        "capacity": None,
        "initial": None,
        "step": 0,
        "updates": 0,
        "examples_seen": 0,
        "n_entries": 0,
        "memory_chars": 0,
        "update_errors": 0,
    }


def _method_fields(row: MethodRow, pool_size: int) -> dict[str, Any]:
    seen = (pool_size if row.seed_pool else 0) + row.training_episodes
    return {
        "builder": row.name,
        "column": row.name,
        "condition": row.condition(),
        "regime": METHOD_REGIME,
        "batch_size": None,
        "homogeneous": None,
        "capacity": None,
        "initial": None,
        "step": row.iterations,
        "updates": row.training_episodes,
        "examples_seen": seen,
        "n_entries": None,
        "memory_chars": None,
        "update_errors": 0,
    }


def _build_fields(build: Build, info: StepInfo) -> dict[str, Any]:
    r = build.regime
    return {
        "builder": build.builder,
        "column": table_column(build.builder, r.regime),
        "condition": r.name,
        "regime": r.regime,
        "batch_size": r.batch_size,
        "homogeneous": r.homogeneous,
        "capacity": r.capacity,
        "initial": r.initial,
        "step": info.step,
        "updates": info.updates,
        "examples_seen": info.examples_seen,
        "n_entries": info.n_entries,
        "memory_chars": info.memory_chars,
        "update_errors": info.update_errors,
        "pass": info.pass_index,
    }


def _progress(row: dict[str, Any], where: str = "") -> None:
    """One line per finished evaluation; ``where``: how far the study has come (e.g. "method evaluation 2 of 4")."""
    success = row["success"]
    print(
        f"  {row['builder']:>6} {row['condition']:<16} step {row['step']:>3} seed {row['seed']}: held-out success "
        f"{'n/a' if success is None else f'{100 * success:5.1f}%'} (n={row['heldout_n']}, "
        + ("kit method" if row["regime"] == METHOD_REGIME else f"{row['n_entries']} entries")
        + (f"; {where})" if where else ")"),
        flush=True,
    )


def _run_call_totals(out: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    totals: dict[str, float] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached": 0}
    for row in rows:
        path = RunDirectory(out / str(row["run_dir"])).calls_path
        if not path.exists():
            continue
        for rec in Ledger(path).records:
            totals["calls"] += 1
            totals["cached"] += int(rec.cached)
            totals["prompt_tokens"] += rec.prompt_tokens
            totals["completion_tokens"] += rec.completion_tokens
    return totals


def _manifest(
    profile: StudyProfile,
    models: StudyModels,
    fingerprint: dict[str, Any],
    started: str,
    *,
    status: str,
    regime_llms: dict[str, LLMClient] | None = None,
) -> dict[str, Any]:
    from antipersist_lib.methods import prompt_hashes as all_prompt_hashes

    consolidation = {k: v for k, v in prompt_hashes().items() if k.startswith("consolidation_")}
    m = manifest_base("consolidation", STUDY_FORMAT, profile.path, profile.name, profile.raw, models, status)
    m.update(
        {
            "benchmark": profile.benchmark,
            "pool": fingerprint,
            "regimes": {r.name: r.label() for r in profile.regimes},
            "methods": {
                r.name: {"method": r.method, "condition": r.condition(), "params": r.params} for r in profile.methods
            },
            "seeds": list(profile.seeds),
            # the held-out set every memory is evaluated on (null: the partition's own held-out split; each run's
            # manifest also records it and the partition hash)
            "heldout_set": profile.heldout_set,
            "context": {"overflow": profile.context.overflow, "reserve_tokens": profile.context.reserve_tokens},
            "regime_backbones": {
                r.name: {"backbone": r.backbone, "endpoint": (regime_llms or {})[r.backbone].endpoint.describe()}
                for r in profile.regimes
                if r.backbone is not None and r.backbone in (regime_llms or {})
            },
            "prompt_hashes": {"consolidation": consolidation, "all": all_prompt_hashes()},
            # the models that act on the banks when they are not the study's backbone (evaluation.backbones)
            **(
                {"evaluation_backbones": {ev.label: ev.endpoint.describe() for ev in evaluators(profile, models)}}
                if profile.eval_backbones
                else {}
            ),
            "started_at": started,
        }
    )
    return m


# -- loading ----------------------------------------------------------------------------------------


def _frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    for col in ("step", "updates", "examples_seen", "n_entries", "memory_chars", "update_errors", "seed", "heldout_n"):
        df[col] = pd.to_numeric(df[col]).astype("Int64")
    for col in ("success", "score", "mean_steps", "mean_calls"):
        df[col] = pd.to_numeric(df[col]).astype(float)
    for col in ("batch_size", "capacity", "infra_failures", "pass", "memory_dropped"):
        df[col] = pd.to_numeric(df[col]).astype("Int64")
    df["homogeneous"] = df["homogeneous"].astype("boolean")
    return df


def load_study(out_dir: str | Path) -> pd.DataFrame:
    """The tidy results of a study folder: one row per (builder, regime, step, seed), columns ``RESULT_COLUMNS``."""
    path = Path(out_dir) / RESULTS_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FileNotFoundError(f"no study results at {path}: run the study first ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{path} is not a consolidation study's results (no 'rows' list)")
    return _frame(data["rows"])


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(out_dir) / MANIFEST_FILE).read_text(encoding="utf-8"))


def _dirs(found: Any) -> list[Path]:
    if found is None:
        return []
    if isinstance(found, (str, Path)):
        return [Path(found)]
    return [Path(f) for f in found]


def results(found: Any) -> pd.DataFrame:
    """Every study of ``found`` (a folder, a list of folders, or None in mode "paper") in one frame."""
    frames = [load_study(d) for d in _dirs(found)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else _frame([])


def study_note(found: Any) -> str:
    """The weak-model note when any study of ``found`` ran on the embedded default, else ""."""
    for d in _dirs(found):
        note = load_manifest(d).get("note")
        if note:
            return str(note)
    return ""


def summary(found: Any) -> pd.DataFrame:
    """One row per study: backbone, pool, builds, evaluations, consolidation calls, wall time, versions."""
    out = []
    for d in _dirs(found):
        m = load_manifest(d)
        cons = (m.get("calls") or {}).get("consolidation", {}).get("consolidation", {})
        out.append(
            {
                "study": str(d),
                "name": m.get("name"),
                "benchmark": m.get("benchmark"),
                "backbone": m.get("backbone"),
                "pool": f"{m['pool']['size']} records {m['pool']['types']} (hash {m['pool']['hash']})",
                "builds": len(m.get("builds", [])),
                "evaluations": m.get("evaluations"),
                "consolidation_calls": cons.get("calls", 0),
                "unparseable_updates": sum(b.get("update_errors", 0) for b in m.get("builds", [])),
                "seeds": m.get("seeds"),
                "wall_s": m.get("wall_s_total", m.get("wall_s")),
                "git_commit": m.get("git_commit"),
                "status": m.get("status"),
            }
        )
    return pd.DataFrame(out)


def builds_table(found: Any) -> pd.DataFrame:
    """Every build of every study: steps, final entries, replies that could not be parsed, evaluated steps."""
    out = []
    for d in _dirs(found):
        m = load_manifest(d)
        for b in m.get("builds", []):
            out.append({"backbone": m.get("backbone"), **{k: v for k, v in b.items() if k != "memory"}})
    return pd.DataFrame(out)


def obtain_study(
    mode: str,
    study_dir: Any,
    *,
    profile: Any = None,
    root: str | Path | None = None,
    out_root: str | Path = "outputs/consolidation",
    endpoint: Endpoint | None = None,
) -> list[Path]:
    """The notebooks' run-or-load step. "paper": []; "load": the folder(s) of ``study_dir``; "run": run each
    ``profile`` into ``<out_root>/<profile name>`` (resuming) and return those folders. Relative paths are
    taken from ``root``."""
    from antipersist_lib.paths import repo_root

    base = Path(root) if root is not None else repo_root()
    if mode == "paper":
        return []
    if mode == "load":
        paths = [base / d for d in _dirs(study_dir)]
        for p in paths:
            if not (p / RESULTS_JSON).exists():
                raise FileNotFoundError(f"no study results at {p}: run the study first or point study_dir elsewhere")
        return paths
    if mode == "run":
        profiles = _dirs(profile)
        if not profiles:
            raise ValueError("mode 'run' needs a study profile (params/consolidation/*.yaml)")
        outs = []
        for prof in profiles:
            out = base / out_root / prof.stem
            run_study(base / prof, out, endpoint=endpoint, root=base)
            outs.append(out)
        return outs
    raise ValueError(f"mode must be one of ('paper', 'load', 'run'), got {mode!r}")
