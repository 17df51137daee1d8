"""ARC-AGI Stream studies: run a profile's grid of stream conditions and evaluate the memory at its checkpoints
for notebooks 09 and 10 (faulty-memories paper §4.1, §5, §6.1-6.2, Table 4, Figs. 2, 5, 7, 9, App. C.1, I, K.2).

``run_study(profile, out_dir)`` reads a study profile (``params/arc/*.yaml``), runs ``controller.run_stream``
once per condition of its grid (regime x source x buffer size [x tasks per step]) on a training pool, then
evaluates the memory as it stood at each checkpoint step on a held-out pool subset (and, optionally, on the
training slice the stream saw: Fig. 2's in-distribution regression), plus a no-memory baseline. It writes::

    <out_dir>/study.json                  manifest: profile, backbone, endpoint (no key), package versions,
                                          prompt hashes, task ids, checkpoints, calls, wall time
    <out_dir>/results.csv, results.json   one row per (condition, checkpoint step, evaluation set)
    <out_dir>/ledger.jsonl                one line per LLM call (counts and tags only, never text)
    <out_dir>/cache/                      response cache (when the profile keeps ``response_cache: true``)
    <out_dir>/conditions/<name>/          config.json, snapshots.jsonl, memory.json (run_stream), evals.jsonl,
                                          condition.json (written last: the condition is complete),
                                          judge.json and surgery.json when the profile asks for them

Re-running the same command resumes: complete conditions (``condition.json``) are kept, an incomplete
condition folder is cleared and re-run (its earlier calls are answered by the response cache).

Endpoint: ``endpoint=`` (an ``Endpoint``) wins; else the profile's ``backbone``: ``embedded`` starts the
embedded default (Gemma 3 270M on llama.cpp, as ``runner.main_job`` does) and labels everything with its
weak-model note; any other value is a backbone profile, a name in ``params/backbones/`` or a profile file
(a vLLM endpoint); ``backbone=`` (the command line's ``--base-url/--model``) replaces the profile's. The
backbone profile's agent decoding is not used: the stream's own ``temperature`` applies to every call.
Before the first piece of work the endpoint gets one small preflight request (``studies``).

Kit choices where the paper is silent:

- Step 0 is the empty memory (the stream's capacity, nothing stored); a checkpoint at step s evaluates the
  memory of snapshot s. Evaluation does not change the memory, so evaluating after the stream is the same
  as evaluating during it.
- The training slice is the first ``train_limit`` distinct tasks of the stream order (every condition of
  the grid sees them: the limit is capped at the fewest tasks any condition sees), graded on their test grids.
- ``task_examples`` may shrink the tasks (``n_train`` shown examples, ``n_test`` graded grids) so that a
  small model's context holds them; the paper uses 10 and 10 (the default).
- Table 4's numbers are the per-step coverage averaged over the stream (``lineage.average_coverage``).

Reading a study back: ``load_study``, ``load_manifest``, ``results``, ``summary``, ``study_note`` and the
notebooks' run-or-load step ``obtain_study``; the tables are in ``arc.analysis``, the figures in
``arc.figures``. Command line::

    python -m antipersist_lib arc-study --profile params/arc/smoke.yaml --out outputs/arc/smoke
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.arc.controller import (
    CONFIG_FILE,
    MEMORY_FILE,
    MEMORY_SOURCES,
    REGIMES,
    SNAPSHOTS_FILE,
    SOURCES,
    EvalResult,
    SolveRecord,
    StreamConfig,
    evaluate,
    load_snapshots,
    memory_at,
    run_stream,
    stream_batches,
)
from antipersist_lib.arc.generator import N_TEST, N_TRAIN, POOL_SIZES, ArcTask, make_task, pool_plan
from antipersist_lib.arc.isolation import ISOLATION_MODES
from antipersist_lib.arc.isolation import probe as probe_isolation
from antipersist_lib.arc.lineage import (
    judge_memory,
    label_counts,
    memory_surgery,
)
from antipersist_lib.arc.sandbox import UNISOLATED_WARNING, SandboxLimits
from antipersist_lib.arc.stores import AbstractStore, EpisodicBuffer, Memory
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, read_json, read_jsonl
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.serving.response_cache import ResponseCache
from antipersist_lib.studies import (
    BACKBONE_OPTION_KEYS,
    MANIFEST_FILE,
    StudyModels,
    StudyProfileError,  # noqa: F401  (re-exported: what a caller of run_study catches)
    check_backbone,
    check_int,
    check_list,
    check_mapping,
    command_line,
    fail,
    manifest_base,
    open_models,
    previous_wall_s,
    read_profile,
    with_restarts,
)

STUDY_FORMAT = 1
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"
LEDGER_FILE = "ledger.jsonl"
CACHE_DIR = "cache"
CONDITIONS_DIR = "conditions"
EVALS_FILE = "evals.jsonl"
DONE_FILE = "condition.json"
JUDGE_FILE = "judge.json"
SURGERY_FILE = "surgery.json"
NO_MEMORY = "no_memory"
EVAL_SETS = ("heldout", "train")

#: what run_study leaves in a condition folder (an incomplete one holding anything else is not cleared)
_CONDITION_FILES = {CONFIG_FILE, SNAPSHOTS_FILE, MEMORY_FILE, EVALS_FILE, DONE_FILE, JUDGE_FILE, SURGERY_FILE}

PROFILE_KEYS = {
    "name",
    "description",
    "backbone",
    "backbone_options",
    "seed",
    "train_pool",
    "heldout_pool",
    "task_examples",
    "steps",
    "tasks_per_step",
    "checkpoint_every",
    "checkpoints",
    "conditions",
    "no_memory",
    "stream",
    "evaluation",
    "judge",
    "surgery",
    "response_cache",
    "sandbox",
}
POOL_KEYS = {"name", "seed", "limit"}
EXAMPLE_KEYS = {"n_train", "n_test"}
CONDITION_KEYS = {"regime", "source", "buffer_size", "tasks_per_step"}
STREAM_KEYS = {
    "shuffle",
    "history_examples",
    "record_failures",
    "solver_memory",
    "tool_bodies",
    "temperature",
    "solver_max_tokens",
    "manager_max_tokens",
}
EVALUATION_KEYS = {"sets", "train_limit", "sources", "workers"}
JUDGE_KEYS = {"conditions", "max_tokens"}
SURGERY_KEYS = {"conditions", "max_entries", "eval_set"}

RESULT_COLUMNS = (
    "condition",
    "regime",
    "source",
    "buffer_capacity",
    "tasks_per_step",
    "step",
    "examples_seen",
    "eval_set",
    "accuracy",
    "n_passed",
    "n_tasks",
    "buffer_size",
    "abstract_entries",
    "covered",
    "fused",
    "consolidations",
    "backbone",
)


# -- the profile ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolSpec:
    name: str
    seed: int = 0
    limit: int | None = None


@dataclass(frozen=True)
class Condition:
    """One stream of the grid (or the no-memory baseline, ``regime == "none"``)."""

    name: str
    regime: str
    source: str = ""
    buffer_size: int | None = None
    tasks_per_step: int = 1

    @property
    def is_baseline(self) -> bool:
        return self.regime == "none"


@dataclass(frozen=True)
class StudyProfile:
    path: str
    name: str
    backbone: str
    train_pool: PoolSpec
    heldout_pool: PoolSpec
    steps: int
    checkpoints: tuple[int, ...]
    conditions: tuple[Condition, ...]
    no_memory: bool = True
    seed: int = 0
    n_train: int = N_TRAIN
    n_test: int = N_TEST
    stream: dict[str, Any] = field(default_factory=dict)
    eval_sets: tuple[str, ...] = ("heldout",)
    train_limit: int | None = None
    eval_sources: tuple[str, ...] = MEMORY_SOURCES
    eval_workers: int = 1
    judge: dict[str, Any] | None = None
    surgery: dict[str, Any] | None = None
    response_cache: bool = True
    sandbox: str = "kernel"  # how model-written code is isolated: "kernel" or, by explicit opt-in, "unisolated"
    backbone_options: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def limits(self) -> SandboxLimits:
        """The grader's limits, with the profile's isolation mode."""
        return SandboxLimits(isolation=self.sandbox)

    def stream_config(self, cond: Condition) -> StreamConfig:
        return StreamConfig(
            regime=cond.regime,
            source=cond.source,
            buffer_size=cond.buffer_size,
            steps=self.steps,
            tasks_per_step=cond.tasks_per_step,
            seed=self.seed,
            limits=self.limits,
            **self.stream,
        )

    def eval_kwargs(self) -> dict[str, Any]:
        """``evaluate``'s solver settings: the stream's own (tool bodies, decoding, token cap, sandbox limits)."""
        base = StreamConfig(limits=self.limits, **self.stream)
        return {
            "sources": self.eval_sources,
            "tool_bodies": base.tool_bodies,
            "temperature": base.temperature,
            "max_tokens": base.solver_max_tokens,
            "limits": self.limits,
            "workers": self.eval_workers,
        }

    def condition(self, name: str) -> Condition:
        for cond in self.all_conditions():
            if cond.name == name:
                return cond
        raise KeyError(f"no condition {name!r}; known: {[c.name for c in self.all_conditions()]}")

    def all_conditions(self) -> tuple[Condition, ...]:
        baseline = (Condition(NO_MEMORY, "none"),) if self.no_memory else ()
        return self.conditions + baseline


def _section(data: Any, key: str, allowed: set[str], path: Any) -> dict[str, Any]:
    return check_mapping(data.get(key), key, allowed, path)


def _pool(data: dict[str, Any], key: str, path: Any, *, required: bool = True) -> PoolSpec:
    spec = _section(data, key, POOL_KEYS, path)
    if not spec:
        if required:
            raise fail(path, f"{key!r} is required: {{name: one of {sorted(POOL_SIZES)}, seed, limit}}")
        return PoolSpec("heldout50")
    name = spec.get("name")
    if name not in POOL_SIZES:
        raise fail(path, f"{key}.name must be one of {sorted(POOL_SIZES)}, got {name!r}")
    seed = check_int(spec.get("seed", 0), f"{key}.seed", path)
    limit = check_int(spec.get("limit"), f"{key}.limit", path, minimum=1, optional=True)
    if limit is not None and limit > POOL_SIZES[name]:
        raise fail(path, f"{key}.limit {limit} exceeds the {POOL_SIZES[name]} tasks of pool {name!r}")
    return PoolSpec(name, int(seed or 0), limit)


def condition_name(regime: str, source: str, buffer_size: int | None, tasks_per_step: int) -> str:
    name = f"{regime}-{source}-b{buffer_size if buffer_size is not None else 'inf'}"
    return name + (f"-t{tasks_per_step}" if tasks_per_step != 1 else "")


def load_study_profile(path: str | Path) -> StudyProfile:
    """Read and check a study profile; any unknown or malformed key is named in the error."""
    path = Path(path)
    data = read_profile(path, PROFILE_KEYS)
    backbone = check_backbone(data, path)
    options = _section(data, "backbone_options", BACKBONE_OPTION_KEYS, path)
    train_pool = _pool(data, "train_pool", path)
    heldout_pool = _pool(data, "heldout_pool", path, required=False)
    examples = _section(data, "task_examples", EXAMPLE_KEYS, path)
    n_train = check_int(examples.get("n_train", N_TRAIN), "task_examples.n_train", path, minimum=1)
    n_test = check_int(examples.get("n_test", N_TEST), "task_examples.n_test", path, minimum=1)
    steps = check_int(data.get("steps"), "steps", path, minimum=1)
    base_tps = check_int(data.get("tasks_per_step", 1), "tasks_per_step", path, minimum=1)
    if "checkpoints" in data and "checkpoint_every" in data:
        raise fail(path, "give 'checkpoints' (a list of steps) or 'checkpoint_every', not both")
    if "checkpoints" in data:
        points = {check_int(s, "checkpoints[]", path) for s in check_list(data["checkpoints"], "checkpoints", path)}
    else:
        every = check_int(data.get("checkpoint_every", steps), "checkpoint_every", path, minimum=1)
        points = set(range(0, steps + 1, int(every or steps))) | {0}
    points.add(steps)
    late = sorted(p for p in points if p is not None and p > int(steps or 0))
    if late:
        raise fail(path, f"checkpoints {late} lie beyond the last step ({steps})")

    grid = _section(data, "conditions", CONDITION_KEYS, path)
    if not grid:
        raise fail(path, f"'conditions' is required: a mapping of {sorted(CONDITION_KEYS)} to lists of values")
    regimes = check_list(grid.get("regime", list(REGIMES)), "conditions.regime", path)
    sources = check_list(grid.get("source", ["gt"]), "conditions.source", path)
    buffers = check_list(grid.get("buffer_size", [8]), "conditions.buffer_size", path)
    per_step = check_list(grid.get("tasks_per_step", [base_tps]), "conditions.tasks_per_step", path)
    for r in regimes:
        if r not in REGIMES:
            raise fail(path, f"conditions.regime: {r!r} is not one of {REGIMES}")
    for s in sources:
        if s not in SOURCES:
            raise fail(path, f"conditions.source: {s!r} is not one of {SOURCES}")
    for b in buffers:
        check_int(b, "conditions.buffer_size", path, minimum=1, optional=True)
    for t in per_step:
        check_int(t, "conditions.tasks_per_step", path, minimum=1)
    conditions = tuple(
        Condition(condition_name(r, s, b, t), r, s, b, t)
        for r, s, b, t in itertools.product(regimes, sources, buffers, per_step)
    )
    if len({c.name for c in conditions}) != len(conditions):
        raise fail(path, "conditions: a value is listed twice")

    stream = _section(data, "stream", STREAM_KEYS, path)
    if "solver_memory" in stream:
        stream["solver_memory"] = tuple(check_list(stream["solver_memory"], "stream.solver_memory", path))
    evaluation = _section(data, "evaluation", EVALUATION_KEYS, path)
    sets = tuple(check_list(evaluation.get("sets", ["heldout"]), "evaluation.sets", path))
    bad_sets = [s for s in sets if s not in EVAL_SETS]
    if bad_sets:
        raise fail(path, f"evaluation.sets: {bad_sets} not in {EVAL_SETS}")
    sources_eval = tuple(check_list(evaluation.get("sources", list(MEMORY_SOURCES)), "evaluation.sources", path))
    bad_sources = [s for s in sources_eval if s not in MEMORY_SOURCES]
    if bad_sources:
        raise fail(path, f"evaluation.sources: {bad_sources} not in {MEMORY_SOURCES}")
    names = [c.name for c in conditions]
    judge = _optional_block(data, "judge", JUDGE_KEYS, names, path)
    surgery = _optional_block(data, "surgery", SURGERY_KEYS, names, path)
    if surgery is not None:
        check_int(surgery.get("max_entries"), "surgery.max_entries", path, minimum=1, optional=True)
        if surgery.setdefault("eval_set", "heldout") not in EVAL_SETS:
            raise fail(path, f"surgery.eval_set must be one of {EVAL_SETS}, got {surgery['eval_set']!r}")
    if judge is not None:
        check_int(judge.get("max_tokens", 1024), "judge.max_tokens", path, minimum=1)
    profile = StudyProfile(
        path=str(path),
        name=str(data.get("name", path.stem)),
        backbone=backbone,
        train_pool=train_pool,
        heldout_pool=heldout_pool,
        steps=int(steps or 1),
        checkpoints=tuple(sorted(int(p) for p in points if p is not None)),
        conditions=conditions,
        no_memory=_bool(data.get("no_memory", True), "no_memory", path),
        seed=int(check_int(data.get("seed", 0), "seed", path) or 0),
        n_train=int(n_train or N_TRAIN),
        n_test=int(n_test or N_TEST),
        stream=stream,
        eval_sets=sets,
        train_limit=check_int(evaluation.get("train_limit"), "evaluation.train_limit", path, minimum=1, optional=True),
        eval_sources=sources_eval,
        eval_workers=int(check_int(evaluation.get("workers", 1), "evaluation.workers", path, minimum=1) or 1),
        judge=judge,
        surgery=surgery,
        response_cache=_bool(data.get("response_cache", True), "response_cache", path),
        sandbox=_sandbox_mode(data.get("sandbox", "kernel"), path),
        backbone_options=options,
        raw=data,
    )
    for cond in conditions:  # StreamConfig's own checks, with the profile named
        try:
            profile.stream_config(cond)
        except (TypeError, ValueError) as exc:
            raise fail(path, f"stream settings: {exc}") from None
    return profile


def _sandbox_mode(value: Any, path: Any) -> str:
    if value not in ISOLATION_MODES:
        raise fail(
            path,
            f"sandbox must be one of {ISOLATION_MODES}, got {value!r} ('unisolated' runs model-written code without "
            "kernel isolation and is only for machines where that code cannot hurt anything)",
        )
    return str(value)


def sandbox_record(profile: StudyProfile) -> dict[str, Any]:
    """How this run isolates model-written code, checked now: the manifest's ``sandbox`` entry.

    Kernel isolation that this machine cannot provide raises ``SandboxUnavailable`` (naming the missing piece)
    before any model call; ``sandbox: unisolated`` is recorded as such and warned about on every run."""
    if profile.sandbox == "unisolated":
        return {"mode": "unisolated", "description": UNISOLATED_WARNING}
    iso = probe_isolation()
    return iso.to_dict() | {"description": iso.describe()}


def _bool(value: Any, key: str, path: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(path, f"{key!r} must be true or false, got {value!r}")
    return value


def _optional_block(
    data: dict[str, Any], key: str, allowed: set[str], names: list[str], path: Any
) -> dict[str, Any] | None:
    """``key: false`` (off), ``true`` (every condition) or a mapping with ``conditions: all | [names]``."""
    value = data.get(key, False)
    if value is False or value is None:
        return None
    block = {} if value is True else _section(data, key, allowed, path)
    chosen = block.get("conditions", "all")
    chosen = names if chosen == "all" else check_list(chosen, f"{key}.conditions", path)
    unknown = [c for c in chosen if c not in names]
    if unknown:
        raise fail(path, f"{key}.conditions names unknown condition(s) {unknown}; the grid has {names}")
    block["conditions"] = list(chosen)
    return block


# -- tasks --------------------------------------------------------------------------------------------


def pool_tasks(spec: PoolSpec, *, n_train: int = N_TRAIN, n_test: int = N_TEST) -> list[ArcTask]:
    """The first ``limit`` tasks of a pool (all when None), drawn with the given example counts."""
    plan = pool_plan(spec.name, spec.seed)[: spec.limit]
    return [make_task(e.family, e.skill, e.seed, n_train=n_train, n_test=n_test) for e in plan]


def seen_tasks(tasks: Sequence[ArcTask], config: StreamConfig) -> list[ArcTask]:
    """The distinct tasks a stream shows, in order of first appearance."""
    seen: dict[str, ArcTask] = {}
    for batch in stream_batches(tasks, config):
        for task in batch:
            seen.setdefault(task.task_id, task)
    return list(seen.values())


def training_slice(profile: StudyProfile, tasks: Sequence[ArcTask]) -> list[ArcTask]:
    """Fig. 2's in-distribution set: the first tasks of the stream order that every condition sees."""
    if not profile.conditions:
        return []
    per_condition = [seen_tasks(tasks, profile.stream_config(c)) for c in profile.conditions]
    k = min(len(s) for s in per_condition)
    if profile.train_limit is not None:
        k = min(k, profile.train_limit)
    return per_condition[0][:k]


# -- the backbone ------------------------------------------------------------------------------------


# -- running ------------------------------------------------------------------------------------------


@dataclass
class StudyResult:
    out_dir: Path
    frame: pd.DataFrame
    manifest: dict[str, Any]


def _empty_memory(cond: Condition) -> Memory:
    return Memory(EpisodicBuffer(capacity=cond.buffer_size), AbstractStore())


def _eval_from_dict(data: dict[str, Any]) -> EvalResult:
    records = tuple(SolveRecord(**r) for r in data["records"])
    return EvalResult(float(data["accuracy"]), int(data["n_passed"]), int(data["n_tasks"]), records)


def _read_evals(folder: Path) -> list[dict[str, Any]]:
    path = folder / EVALS_FILE
    return [line.value for line in read_jsonl(path)] if path.exists() else []


def _clear_incomplete(folder: Path) -> None:
    if not folder.exists():
        return
    foreign = sorted(p.name for p in folder.iterdir() if p.name not in _CONDITION_FILES)
    if foreign:
        raise FileExistsError(
            f"{folder} is an incomplete condition folder holding files the study did not write ({foreign}); "
            "move them away or use a fresh --out"
        )
    shutil.rmtree(folder)


def _run_condition(
    profile: StudyProfile,
    cond: Condition,
    llm: LLMClient,
    train: Sequence[ArcTask],
    evalsets: dict[str, list[ArcTask]],
    folder: Path,
    backbone: str,
) -> dict[str, Any]:
    started = time.monotonic()
    calls: dict[str, int] = {}
    snapshots: list[dict[str, Any]] = []
    if not cond.is_baseline:
        config = profile.stream_config(cond)
        result = run_stream(train, llm, config, folder)
        snapshots, calls = result.snapshots, dict(result.calls)
    folder.mkdir(parents=True, exist_ok=True)
    steps = (0,) if cond.is_baseline else profile.checkpoints
    config = None if cond.is_baseline else profile.stream_config(cond)
    rows = []
    with JsonlWriter(folder / EVALS_FILE) as writer:
        for step in steps:
            memory = _empty_memory(cond) if step == 0 else memory_at(snapshots[step - 1])
            for eval_set, tasks in evalsets.items():
                res = evaluate(tasks, llm, memory, **profile.eval_kwargs())
                calls["arc_eval"] = calls.get("arc_eval", 0) + len(tasks)
                writer.append({"step": step, "eval_set": eval_set, **res.to_dict()})
                rows.append(_row(cond, step, eval_set, res, snapshots, backbone))
    done = {
        "condition": asdict(cond),
        "config": config.to_dict() if config else None,
        "checkpoints": list(steps),
        "calls": calls,
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }
    atomic_write_json(folder / DONE_FILE, done)
    return done


def _row(
    cond: Condition, step: int, eval_set: str, res: EvalResult, snapshots: Sequence[dict[str, Any]], backbone: str
) -> dict[str, Any]:
    snap = snapshots[step - 1] if step > 0 else None
    cov = snap["coverage"] if snap else {"covered": 0, "fused": None, "buffer_size": 0}
    abstract = len(snap["memory"]["abstract"]["entries"]) if snap else 0
    consolidations = sum(1 for s in snapshots[:step] if (s.get("extraction") or {}).get("applied"))
    return {
        "condition": cond.name,
        "regime": cond.regime,
        "source": cond.source,
        "buffer_capacity": cond.buffer_size,
        "tasks_per_step": cond.tasks_per_step,
        "step": step,
        "examples_seen": step * cond.tasks_per_step,
        "eval_set": eval_set,
        "accuracy": res.accuracy,
        "n_passed": res.n_passed,
        "n_tasks": res.n_tasks,
        "buffer_size": cov["buffer_size"],
        "abstract_entries": abstract,
        "covered": cov["covered"],
        "fused": cov["fused"],
        "consolidations": consolidations,
        "backbone": backbone,
    }


def _final_eval(folder: Path, eval_set: str) -> EvalResult | None:
    evals = [e for e in _read_evals(folder) if e["eval_set"] == eval_set]
    return _eval_from_dict(max(evals, key=lambda e: e["step"])) if evals else None


def _run_judge(profile: StudyProfile, llm: LLMClient, folder: Path) -> None:
    memory = Memory.from_dict(read_json(folder / MEMORY_FILE))
    labels = judge_memory(llm, memory, max_tokens=int((profile.judge or {}).get("max_tokens", 1024)))
    atomic_write_json(
        folder / JUDGE_FILE,
        {"labels": [asdict(label) for label in labels], "counts": label_counts(labels), "n_entries": len(labels)},
    )


def _run_surgery(profile: StudyProfile, llm: LLMClient, folder: Path, evalsets: dict[str, list[ArcTask]]) -> None:
    spec = profile.surgery or {}
    eval_set = spec.get("eval_set", "heldout")
    tasks = evalsets.get(eval_set)
    if not tasks:
        raise fail(profile.path, f"surgery.eval_set {eval_set!r} is not evaluated (evaluation.sets)")
    memory = Memory.from_dict(read_json(folder / MEMORY_FILE))
    baseline = _final_eval(folder, eval_set)
    entries = memory.entry_ids()[: spec.get("max_entries")]
    results = []
    for entry_id in entries:
        res = memory_surgery(
            tasks,
            llm,
            memory,
            entry_id,
            baseline=baseline,
            **profile.eval_kwargs(),
        )
        baseline = res.base
        kind = "episode" if entry_id.startswith("E") else "strategy"
        results.append({**res.to_dict(), "kind": kind, "eval_set": eval_set, "n_tasks": res.ablated.n_tasks})
    atomic_write_json(
        folder / SURGERY_FILE, {"eval_set": eval_set, "n_entries": len(memory.entry_ids()), "results": results}
    )


def _manifest(
    profile: StudyProfile,
    bb: StudyModels,
    train: Sequence[ArcTask],
    evalsets: dict[str, list[ArcTask]],
    status: str,
    started: float,
    before_s: float,
    sandbox: dict[str, Any],
    ledger: Ledger | None = None,
    cache: ResponseCache | None = None,
) -> dict[str, Any]:
    calls = Counter(r.purpose for r in ledger.records) if ledger is not None else Counter()
    m = manifest_base("arc", STUDY_FORMAT, profile.path, profile.name, profile.raw, bb, status)
    wall = time.monotonic() - started
    m.update(
        {
            "seed": profile.seed,
            "steps": profile.steps,
            "checkpoints": list(profile.checkpoints),
            "conditions": [asdict(c) for c in profile.all_conditions()],
            "task_examples": {"n_train": profile.n_train, "n_test": profile.n_test},
            "train_pool": asdict(profile.train_pool),
            "heldout_pool": asdict(profile.heldout_pool),
            "train_task_ids": [t.task_id for t in train],
            "eval_task_ids": {k: [t.task_id for t in v] for k, v in evalsets.items()},
            "prompt_hashes": {k: v for k, v in prompt_hashes().items() if k.startswith("arc_")},
            "calls": dict(sorted(calls.items())),
            "cached_calls": sum(r.cached for r in ledger.records) if ledger is not None else 0,
            "sandbox": sandbox,
            "wall_s": round(wall, 1),  # this invocation
            "wall_s_total": round(before_s + wall, 1),  # every invocation into this folder
        }
    )
    return m


def run_study(
    profile_path: str | Path,
    out_dir: str | Path,
    *,
    endpoint: Endpoint | None = None,
    backbone: str | Endpoint | None = None,
    preflight: bool = True,
    log: Any = print,
) -> StudyResult:
    """Run (or resume) every condition of a study profile; returns the results table and the manifest.

    ``backbone`` replaces the profile's backbone (a profile name or file, or an ad-hoc ``Endpoint`` from
    ``--base-url/--model``). Before the first condition, judge or surgery still to do, the chat endpoint
    gets one small request (``StudyModels.check_endpoints``; ``preflight=False`` skips it)."""
    profile = load_study_profile(profile_path)
    sandbox = sandbox_record(profile)  # refuses here, before any model call, when isolation is missing
    log(("WARNING: " if sandbox["mode"] == "unisolated" else "sandbox: ") + sandbox["description"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    before_s = previous_wall_s(out)
    train = pool_tasks(profile.train_pool, n_train=profile.n_train, n_test=profile.n_test)
    heldout = pool_tasks(profile.heldout_pool, n_train=profile.n_train, n_test=profile.n_test)
    evalsets = {"heldout": heldout, "train": training_slice(profile, train)}
    evalsets = {k: v for k, v in evalsets.items() if k in profile.eval_sets}
    with open_models(
        profile.path,
        profile.backbone if backbone is None else backbone,
        out,
        backbone_options=profile.backbone_options,
        endpoint=endpoint,
        preflight=preflight,
    ) as bb:
        if bb.note:
            log(f"NOTE: {bb.note}")
        cache = ResponseCache(out / CACHE_DIR) if profile.response_cache else None
        with Ledger(out / LEDGER_FILE) as ledger:
            llm = LLMClient(bb.endpoint, ledger=ledger, cache=cache, seed=profile.seed)
            atomic_write_json(
                out / MANIFEST_FILE, _manifest(profile, bb, train, evalsets, "running", started, before_s, sandbox)
            )
            for cond in profile.all_conditions():
                folder = out / CONDITIONS_DIR / cond.name
                if (folder / DONE_FILE).exists():
                    log(f"{cond.name}: complete, kept")
                else:
                    bb.check_endpoints(f"study {out}")
                    t0 = time.monotonic()
                    with ledger.tag(condition=cond.name):
                        with_restarts(
                            bb,
                            f"condition {cond.name}",
                            lambda c=cond, f=folder: _run_condition(profile, c, llm, train, evalsets, f, bb.label),
                            before=lambda f=folder: _clear_incomplete(f),
                            log=log,
                        )
                    log(f"{cond.name}: done in {time.monotonic() - t0:.0f} s")
                if profile.judge and cond.name in profile.judge["conditions"] and not (folder / JUDGE_FILE).exists():
                    bb.check_endpoints(f"study {out}")
                    with ledger.tag(condition=cond.name):
                        _run_judge(profile, llm, folder)
                if (
                    profile.surgery
                    and cond.name in profile.surgery["conditions"]
                    and not (folder / SURGERY_FILE).exists()
                ):
                    bb.check_endpoints(f"study {out}")
                    with ledger.tag(condition=cond.name):
                        _run_surgery(profile, llm, folder, evalsets)
            rows = [row for cond in profile.all_conditions() for row in _condition_rows(out, cond.name)]
            frame = _frame(rows)
            atomic_write_json(out / RESULTS_JSON, {"columns": list(RESULT_COLUMNS), "rows": rows})
            frame.to_csv(out / RESULTS_CSV, index=False)
            manifest = _manifest(profile, bb, train, evalsets, "complete", started, before_s, sandbox, ledger, cache)
            atomic_write_json(out / MANIFEST_FILE, manifest)
    return StudyResult(out, frame, manifest)


def _condition_rows(out: Path, name: str) -> list[dict[str, Any]]:
    return list(read_json(out / CONDITIONS_DIR / name / DONE_FILE)["rows"])


def _frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    types = {"step": int, "examples_seen": int, "n_passed": int, "n_tasks": int, "tasks_per_step": int}
    return df.astype({**types, "buffer_capacity": "Int64", "accuracy": float, "fused": float})


# -- reading a study back -------------------------------------------------------------------------------


def load_study(out_dir: str | Path) -> pd.DataFrame:
    """The results table of a finished study: one row per (condition, checkpoint step, evaluation set)."""
    path = Path(out_dir) / RESULTS_JSON
    if not path.exists():
        raise FileNotFoundError(f"no study results at {path}: run `python -m antipersist_lib.arc.study` first")
    data = read_json(path)
    return _frame(data["rows"])


def load_manifest(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST_FILE
    if not path.exists():
        raise FileNotFoundError(f"no study manifest at {path}")
    return dict(read_json(path))


def results(out_dir: str | Path | None) -> pd.DataFrame:
    """``load_study``, or an empty results table when there is no study (notebook mode "paper")."""
    return load_study(out_dir) if out_dir is not None else _frame([])


def summary(out_dir: str | Path | None) -> dict[str, Any]:
    """What a study ran: backbone, grid, pools, checkpoints, calls and wall time (for a notebook's last cell)."""
    if out_dir is None:
        return {"study": None}
    man = load_manifest(out_dir)
    keys = ("name", "profile_path", "backbone", "steps", "checkpoints", "task_examples", "train_pool", "heldout_pool")
    return {
        **{k: man.get(k) for k in keys},
        "model": man["endpoint"]["model"],
        "conditions": [c["name"] for c in man["conditions"]],
        "eval_tasks": {k: len(v) for k, v in man["eval_task_ids"].items()},
        "calls": man["calls"],
        "cached_calls": man["cached_calls"],
        "wall_s": man["wall_s"],
        "git_commit": man["git_commit"],
        "prompt_hashes": man["prompt_hashes"],
    }


def condition_names(out_dir: str | Path | None, *, streams_only: bool = True) -> list[str]:
    """Conditions of the study, in the profile's order (``streams_only``: without the no-memory baseline)."""
    if out_dir is None:
        return []
    conds = load_manifest(out_dir)["conditions"]
    return [c["name"] for c in conds if not (streams_only and c["regime"] == "none")]


def condition_snapshots(out_dir: str | Path, name: str) -> list[dict[str, Any]]:
    return load_snapshots(Path(out_dir) / CONDITIONS_DIR / name)


def condition_specs(out_dir: str | Path | None) -> dict[str, dict[str, Any]]:
    """The manifest's conditions by name ({} for no study)."""
    return {} if out_dir is None else {c["name"]: c for c in load_manifest(out_dir)["conditions"]}


def study_note(out_dir: str | Path | None) -> str:
    """The kit's weak-model note (``serving.embedded.WEAK_MODEL_NOTE``) when the study ran on the embedded
    default, else "": the provenance line under every figure."""
    if out_dir is None or not load_manifest(out_dir).get("embedded"):
        return ""
    from antipersist_lib.serving.embedded import WEAK_MODEL_NOTE

    return WEAK_MODEL_NOTE


def obtain_study(
    mode: str,
    study_dir: str | Path,
    *,
    profile: str | Path | None = None,
    root: str | Path | None = None,
    out_root: str | Path = "outputs/arc",
    endpoint: Endpoint | None = None,
) -> Path | None:
    """The notebooks' run-or-load step. "paper": None; "load": ``study_dir``; "run": run ``profile`` into
    ``<out_root>/<profile name>`` (resuming) and return that folder. Relative paths are taken from ``root``."""
    from antipersist_lib.paths import repo_root

    base = Path(root) if root is not None else repo_root()
    if mode == "paper":
        return None
    if mode == "load":
        path = base / study_dir
        if not (path / RESULTS_JSON).exists():
            raise FileNotFoundError(f"no study results at {path}: run the study first or point study_dir elsewhere")
        return path
    if mode == "run":
        if not profile:
            raise ValueError("mode 'run' needs a study profile (params/arc/*.yaml)")
        out = base / out_root / Path(profile).stem
        run_study(base / profile, out, endpoint=endpoint)
        return out
    raise ValueError(f"mode must be one of ('paper', 'load', 'run'), got {mode!r}")


# -- command line ---------------------------------------------------------------------------------------


def _show(result: StudyResult) -> pd.DataFrame:
    cols = ["condition", "step", "eval_set", "accuracy", "buffer_size", "abstract_entries", "covered", "fused"]
    return result.frame[cols]


def main(argv: Sequence[str] | None = None) -> int:
    return command_line(
        argv, study="arc", description="Run an ARC-AGI Stream study profile.", run=run_study, show=_show
    )


if __name__ == "__main__":
    raise SystemExit(main())
