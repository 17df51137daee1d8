"""ARC-AGI Stream studies: run a profile's grid of stream conditions and evaluate their memories for notebooks 09-10.

``run_study(profile, out_dir)`` reads ``params/arc/*.yaml``, runs ``controller.run_stream`` once per condition
(regime x source x |B| [x tasks per step]) and evaluates each checkpoint memory on held-out tasks (optionally on
the training slice, Fig. 2) beside a no-memory baseline; ``obtain_study`` is the notebooks' run-or-load step.
Re-running resumes: complete conditions (``condition.json``) are kept, an incomplete one is re-run from the cache.
Command: ``python -m antipersist_lib arc-study --profile params/arc/smoke.yaml``.

docs/faulty-memories.md holds the paper map (its first table), the profile keys ("Readings of the paper,
selectable by profile") and the folder layout, endpoint rules and kit choices ("The ARC code's own readings,
module by module", A study folder). The profile is ``arc.study_profile``, reading a folder back
``arc.study_folder``, the tables ``arc.analysis``, the figures ``arc.figures``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.arc.context import CONTEXT_FIX, check_profile_context
from antipersist_lib.arc.controller import (
    CONFIG_FILE,
    MEMORY_FILE,
    SNAPSHOTS_FILE,
    EvalResult,
    SolveRecord,
    evaluate,
    load_snapshots,
    memory_at,
    run_stream,
)
from antipersist_lib.arc.generator import ArcTask
from antipersist_lib.arc.isolation import probe as probe_isolation
from antipersist_lib.arc.lineage import judge_memory, label_counts, memory_surgery
from antipersist_lib.arc.prompts import PROMPTS as ARC_PROMPTS
from antipersist_lib.arc.sandbox import UNISOLATED_WARNING
from antipersist_lib.arc.stores import AbstractStore, EpisodicBuffer, Memory
from antipersist_lib.arc.study_folder import (
    CONDITIONS_DIR,
    DONE_FILE,
    EVALS_FILE,
    FIG2_SLICE_FILE,
    JUDGE_FILE,
    RESULT_COLUMNS,
    SEED_DIR,
    SOURCES_FILE,
    SURGERY_FILE,
    condition_rows,
    load_study_rows,
    results_frame,
)
from antipersist_lib.arc.study_profile import (
    FIG2_EVAL_SET,
    FIG2_GROUP,
    SOURCE_ARMS,
    Condition,
    SliceSelection,
    StudyProfile,
    load_study_profile,
    pool_tasks,
    select_slice,
    training_slice,
)
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, read_json, read_jsonl
from antipersist_lib.serving.context_budget import PromptGuard
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.studies import (
    RESULTS_JSON,
    StudyRun,
    clear_incomplete,
    fail,
    obtain_folder,
    write_manifest,
    write_results,
)

STUDY_FORMAT = 1

#: what run_study leaves in a condition folder (an incomplete one holding anything else is not cleared)
CONDITION_FILES = {
    CONFIG_FILE,
    SNAPSHOTS_FILE,
    MEMORY_FILE,
    EVALS_FILE,
    DONE_FILE,
    JUDGE_FILE,
    SURGERY_FILE,
    SOURCES_FILE,
}


# -- the sandbox ----------------------------------------------------------------------------------------


def sandbox_record(profile: Any) -> dict[str, Any]:
    """How this run isolates model-written code, checked now: the manifest's ``sandbox`` entry.

    Kernel isolation that this machine cannot provide raises ``SandboxUnavailable`` (naming the missing piece)
    before any model call; ``sandbox: unisolated`` is recorded as such and warned about on every run. Any
    profile with a ``sandbox`` mode (the study's, the probes')."""
    if profile.sandbox == "unisolated":
        return {"mode": "unisolated", "description": UNISOLATED_WARNING}
    iso = probe_isolation()
    return iso.to_dict() | {"description": iso.describe()}


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
    steps = profile.checkpoints_of(cond)
    config = None if cond.is_baseline else profile.stream_config(cond)
    rows = []
    with JsonlWriter(folder / EVALS_FILE) as writer:
        for step in steps:
            memory = _empty_memory(cond) if step == 0 else memory_at(snapshots[step - 1])
            for eval_set, tasks in evalsets.items():
                res = evaluate(tasks, llm, memory, **profile.eval_kwargs())
                calls["arc_eval"] = calls.get("arc_eval", 0) + len(res.records)
                writer.append({"step": step, "eval_set": eval_set, **res.to_dict()})
                rows.append(_row(cond, step, eval_set, res, snapshots, backbone, profile.seed))
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
    cond: Condition,
    step: int,
    eval_set: str,
    res: EvalResult,
    snapshots: Sequence[dict[str, Any]],
    backbone: str,
    seed: int,
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
        "table4_b": cond.table4_b,
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
        "seed": seed,
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
    # consolidated strategies first (App. I removes one consolidated entry), then the buffered episodes
    entries = (memory.abstract.ids() + memory.episodic.ids())[: spec.get("max_entries")]
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


def _run_source_ablation(
    profile: StudyProfile, cond: Condition, llm: LLMClient, folder: Path, evalsets: dict[str, list[ArcTask]]
) -> None:
    """App. K.1 / Fig. 9(a): re-evaluate the memory of chosen checkpoints with the solver reading only the
    abstract store, only the episodic store, or both; writes ``sources.json``. An arm whose stores equal the
    study's own ``evaluation.sources`` reuses that evaluation (``evals.jsonl``) instead of calling again."""
    spec = profile.source_ablation or {}
    eval_set = spec.get("eval_set", "heldout")
    tasks = evalsets[eval_set]
    snapshots = load_snapshots(folder)
    own = {e["step"]: e for e in _read_evals(folder) if e["eval_set"] == eval_set}
    rows = []
    for step in spec.get("checkpoints") or profile.checkpoints:
        memory = _empty_memory(cond) if step == 0 else memory_at(snapshots[step - 1])
        for arm in spec["arms"]:
            stores = SOURCE_ARMS[arm]
            if set(stores) == set(profile.eval_sources) and step in own:
                res, reused = _eval_from_dict(own[step]), True
            else:
                res, reused = evaluate(tasks, llm, memory, **{**profile.eval_kwargs(), "sources": stores}), False
            rows.append(
                {
                    "step": step,
                    "arm": arm,
                    "sources": list(stores),
                    "eval_set": eval_set,
                    "accuracy": res.accuracy,
                    "n_passed": res.n_passed,
                    "n_tasks": res.n_tasks,
                    "reused": reused,
                }
            )
    atomic_write_json(folder / SOURCES_FILE, {"eval_set": eval_set, "rows": rows})


def _manifest(
    run: StudyRun,
    train: Sequence[ArcTask],
    evalsets: dict[str, list[ArcTask]],
    status: str,
    sandbox: dict[str, Any],
    *,
    calls: bool = False,
    fig2: SliceSelection | None = None,
) -> dict[str, Any]:
    """The study's manifest; ``calls``: the ledger's counts (the finished study's), else none yet."""
    profile: StudyProfile = run.profile
    m = run.manifest("arc", STUDY_FORMAT, status)
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
            "prompt_hashes": prompt_hashes(ARC_PROMPTS),
            "calls": run.calls() if calls else {},
            "cached_calls": run.cached_calls() if calls else 0,
            "sandbox": sandbox,
            "buffer_reading": profile.buffer_reading,
            "coverage_average": profile.coverage_average,
            "eval_repeats": profile.eval_repeats,
            "eval_temperature": profile.eval_temperature,
            "table4_memories": profile.table4_memories,
            "fig2": {**asdict(profile.fig2), "selection": fig2.to_dict() if fig2 else None} if profile.fig2 else None,
            "source_ablation": profile.source_ablation,
            **run.wall(),  # wall_s: this invocation; wall_s_total: every invocation into this folder
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
    gets one small request (``StudyModels.check_endpoints``; ``preflight=False`` skips it). A profile with
    ``seeds`` runs one whole study per seed (``run_seeds``)."""
    # another endpoint than the profile's backbone: run_profile checks the context against that one
    profile = load_study_profile(profile_path, context_check=endpoint is None and backbone is None)
    run = run_seeds if profile.seeds else run_profile
    return run(profile, Path(out_dir), endpoint=endpoint, backbone=backbone, preflight=preflight, log=log)


def run_profile(
    profile: StudyProfile,
    out: Path,
    *,
    endpoint: Endpoint | None = None,
    backbone: str | Endpoint | None = None,
    preflight: bool = True,
    log: Any = print,
) -> StudyResult:
    """``run_study`` for one loaded profile of one seed, into ``out``."""
    if profile.seeds:
        raise ValueError(f"study profile {profile.path} names several seeds: run it with run_seeds")
    sandbox = sandbox_record(profile)  # refuses here, before any model call, when isolation is missing
    log(("WARNING: " if sandbox["mode"] == "unisolated" else "sandbox: ") + sandbox["description"])
    run = StudyRun.begin(profile, out, what="study", log=log)
    train = pool_tasks(profile.train_pool, n_train=profile.n_train, n_test=profile.n_test)
    heldout = pool_tasks(profile.heldout_pool, n_train=profile.n_train, n_test=profile.n_test)
    evalsets = {"heldout": heldout, "train": training_slice(profile, train)}
    evalsets = {k: v for k, v in evalsets.items() if k in profile.eval_sets}
    with run.connect(
        backbone=backbone, endpoint=endpoint, preflight=preflight, response_cache=profile.response_cache
    ) as run:
        bb = run.models
        if bb.note:
            log(f"NOTE: {bb.note}")
        # the endpoint really used may not be the profile's backbone (--base-url): its context decides
        sizes = check_profile_context(profile, bb.endpoint.context_length, bb.endpoint.model)
        if bb.endpoint.context_length is not None and sizes:
            log(
                f"context: the largest prompt needs about {max(z.tokens for z in sizes)} of "
                f"{bb.endpoint.context_length} tokens"
            )
        cache = run.cache()
        conditions = list(profile.all_conditions())
        log(
            f"study {out}: {len(conditions)} condition(s) on {len(train)} stream task(s) "
            f"({', '.join(f'{k} {len(v)}' for k, v in evalsets.items())} evaluated), model {bb.endpoint.model} at "
            f"{bb.endpoint.base_url}, response cache {cache.root if cache is not None else 'off'}"
        )
        llm = PromptGuard(
            run.client(seed=profile.seed),
            what=lambda tags: f"ARC-AGI Stream {tags.get('purpose') or 'call'} at step {tags.get('step', '?')}",
            fix=CONTEXT_FIX,
        )
        run.write_manifest(_manifest(run, train, evalsets, "running", sandbox))
        fig2_tasks, fig2_sel = _fig2_slice(run, train, llm)
        for n, cond in enumerate(conditions, start=1):
            folder = out / CONDITIONS_DIR / cond.name
            tasks_of, sets_of = (
                (fig2_tasks, {FIG2_EVAL_SET: fig2_tasks}) if cond.group == FIG2_GROUP else (train, evalsets)
            )
            run.unit(
                cond.name,
                folder / DONE_FILE,
                lambda c=cond, f=folder, t=tasks_of, e=sets_of: _run_condition(profile, c, llm, t, e, f, bb.label),
                what=f"condition {cond.name}",
                clear=lambda f=folder: clear_incomplete(f, CONDITION_FILES, "condition"),
                tags={"condition": cond.name},
                position=(n, len(conditions)),
            )
            if profile.judge and cond.name in profile.judge["conditions"] and not (folder / JUDGE_FILE).exists():
                run.check_endpoints()
                with run.ledger.tag(condition=cond.name):
                    _run_judge(profile, llm, folder)
            if profile.surgery and cond.name in profile.surgery["conditions"] and not (folder / SURGERY_FILE).exists():
                run.check_endpoints()
                with run.ledger.tag(condition=cond.name):
                    _run_surgery(profile, llm, folder, evalsets)
            if (
                profile.source_ablation
                and cond.name in profile.source_ablation["conditions"]
                and not (folder / SOURCES_FILE).exists()
            ):
                run.check_endpoints()
                with run.ledger.tag(condition=cond.name, ablation="sources"):
                    _run_source_ablation(profile, cond, llm, folder, evalsets)
        rows = [
            {**row, "seed": row.get("seed", profile.seed)}  # conditions recorded before rows named their seed
            for cond in profile.all_conditions()
            for row in condition_rows(out, cond.name)
        ]
        frame = results_frame(rows)
        run.write_results({"columns": list(RESULT_COLUMNS), "rows": rows}, frame)
        manifest = _manifest(run, train, evalsets, "complete", sandbox, calls=True, fig2=fig2_sel)
        run.write_manifest(manifest)
    return StudyResult(out, frame, manifest)


def run_seeds(
    profile: StudyProfile,
    out: Path,
    *,
    endpoint: Endpoint | None = None,
    backbone: str | Endpoint | None = None,
    preflight: bool = True,
    log: Any = print,
) -> StudyResult:
    """One whole study per seed of ``profile.seeds``, each in its own ``SEED_DIR`` subfolder of ``out`` (resumable
    like any study: a complete seed is re-read, an interrupted one resumes), then the results of every seed in
    one table (its ``seed`` column) and a manifest that names the seed folders and adds up their calls and wall
    time. A seed's folder is a study like any other: the anatomy readers take it alone."""
    if (out / CONDITIONS_DIR).exists():
        raise FileExistsError(
            f"{out} holds a study of one seed; a profile with seeds {list(profile.seeds)} needs its own --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    raw = {k: v for k, v in profile.raw.items() if k != "seeds"}
    done: list[StudyResult] = []
    for n, seed in enumerate(profile.seeds, 1):
        folder = out / SEED_DIR.format(seed=seed)
        log(f"seed {seed} ({n} of {len(profile.seeds)}): {folder}")
        one = replace(profile, seed=seed, seeds=(), raw={**raw, "seed": seed})
        done.append(run_profile(one, folder, endpoint=endpoint, backbone=backbone, preflight=preflight, log=log))
        frame, manifest = _write_seeds_index(profile, out, done)
    return StudyResult(out, frame, manifest)


def _write_seeds_index(
    profile: StudyProfile, out: Path, done: Sequence[StudyResult]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The results table and manifest of a study of several seeds, over the seeds complete so far: written after
    every seed, so that an interrupted study (hours on a CPU) can be read with the seeds it has finished. Its
    ``seeds`` are the complete ones, ``seeds_planned`` the profile's; ``status`` is "partial" until all are done."""
    seeds = [int(r.manifest["seed"]) for r in done]
    rows = [row for result in done for row in load_study_rows(result.out_dir)]
    frame = results_frame(rows)
    write_results(out, {"columns": list(RESULT_COLUMNS), "rows": rows, "seeds": seeds}, frame)
    calls: Counter[str] = Counter()
    for result in done:
        calls.update(result.manifest.get("calls", {}))
    manifest = {
        **done[0].manifest,
        "profile_path": profile.path,
        "profile": profile.raw,
        "seed": None,
        "seeds": seeds,
        "seeds_planned": list(profile.seeds),
        "seed_dirs": {str(seed): SEED_DIR.format(seed=seed) for seed in seeds},
        "status": "complete" if len(seeds) == len(profile.seeds) else "partial",
        "calls": dict(sorted(calls.items())),
        "cached_calls": sum(int(r.manifest.get("cached_calls", 0)) for r in done),
        "wall_s": round(sum(float(r.manifest.get("wall_s", 0.0)) for r in done), 1),
        "wall_s_total": round(sum(float(r.manifest.get("wall_s_total", 0.0)) for r in done), 1),
        "seed_manifests": {
            str(seed): {k: r.manifest.get(k) for k in ("git_commit", "wall_s_total", "calls", "prompt_hashes")}
            for seed, r in zip(seeds, done)
        },
    }
    write_manifest(out, manifest)
    return frame, manifest


def _fig2_slice(run: StudyRun, train: Sequence[ArcTask], llm: LLMClient) -> tuple[list[ArcTask], SliceSelection | None]:
    """Select (or, on a resumed run, read back) Fig. 2's slice from the training pool; ``fig2_slice.json``."""
    profile: StudyProfile = run.profile
    if profile.fig2 is None:
        return [], None
    path = run.out / FIG2_SLICE_FILE
    by_id = {t.task_id: t for t in train}
    if path.exists():
        sel = SliceSelection(**{**read_json(path), "task_ids": tuple(read_json(path)["task_ids"])})
    else:
        if profile.fig2.select == "no_memory_pass":
            run.check_endpoints()
        with run.ledger.tag(condition=f"{FIG2_GROUP}-selection"):
            _kept, sel = select_slice(train, llm, profile.fig2, profile.eval_kwargs())
        atomic_write_json(path, sel.to_dict())
    if not sel.task_ids:
        raise RuntimeError(
            f"fig2: the no-memory solver passed none of the {sel.n_tried} pool tasks tried; there is no slice "
            "to stream (use a stronger backbone, or fig2.select: first)"
        )
    if sel.shortfall:
        run.log(
            f"WARNING: fig2 slice holds {len(sel.task_ids)} of {sel.n_tasks} tasks: the pool had no more tasks "
            "the no-memory solver passes (fig2_slice.json)"
        )
    return [by_id[t] for t in sel.task_ids], sel


# -- the notebooks' run-or-load step ----------------------------------------------------------------------


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
    return obtain_folder(
        mode,
        study_dir,
        profile=profile,
        root=root,
        out_root=out_root,
        run=lambda prof, out: run_study(prof, out, endpoint=endpoint),
        results_file=RESULTS_JSON,
        what="study",
    )
