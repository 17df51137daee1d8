"""ARC-AGI Stream probes on single-family subsets (faulty-memories paper §6, Figs. 8(a), 8(b), 11, App. D).

Builds the paper's single-family subsets with the kit's generator, streams them through ``controller.run_stream``
and evaluates the memory at every cycle boundary, beside a no-memory baseline: **overfit** (Fig. 11: exact
repetitions against variations), **overwrite** (Fig. 8(b): family A, then family B) and **misgroup** (Fig. 8(a):
A and B interleaved, beside each alone). ``run_probes(profile, out_dir)`` reads ``params/arc/probes_*.yaml``
and resumes: a complete stream (``stream.json``) is kept, an incomplete one re-run.

The probes, their folder layout and the kit's choices (subsets, variations, ``buffer_reading``) are in
docs/faulty-memories.md, "Single-family probes: Figs. 8(a), 8(b), 11"; the profile is ``arc.probe_profile``,
the tables ``arc.probe_tables``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.arc import context
from antipersist_lib.arc.controller import (
    CONFIG_FILE,
    MEMORY_FILE,
    SNAPSHOTS_FILE,
    evaluate,
    memory_at,
    run_stream,
)
from antipersist_lib.arc.lineage import misclassifications
from antipersist_lib.arc.probe_profile import (
    NO_MEMORY,
    Checkpoint,
    ProbeProfile,
    ProbeStream,
    ProbeTasks,
    load_probe_profile,
    probe_prompt_sizes,
    probe_tasks,
    step_schedule,
)
from antipersist_lib.arc.probe_tables import DONE_FILE, EVALS_FILE, RESULT_COLUMNS, STREAMS_DIR, results_frame
from antipersist_lib.arc.prompts import PROMPTS as ARC_PROMPTS
from antipersist_lib.arc.stores import AbstractStore, EpisodicBuffer, Memory
from antipersist_lib.arc.study import sandbox_record
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, read_json
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.studies import RESULTS_JSON, StudyRun, clear_incomplete, fail, obtain_folder

PROBES_FORMAT = 1

#: what run_probes leaves in a stream folder (an incomplete folder holding anything else is not cleared)
STREAM_FILES = {CONFIG_FILE, SNAPSHOTS_FILE, MEMORY_FILE, EVALS_FILE, DONE_FILE}


# -- running --------------------------------------------------------------------------------------


@dataclass
class ProbeResult:
    out_dir: Path
    frame: pd.DataFrame
    manifest: dict[str, Any]


def _row(
    spec: ProbeStream | None,
    point: Checkpoint,
    family: str,
    kind: str,
    accuracy: float,
    n_passed: int,
    n_tasks: int,
    snapshots: Sequence[dict[str, Any]],
    misclassified: int,
    backbone: str,
) -> dict[str, Any]:
    snap = snapshots[point.step - 1] if point.step > 0 else None
    return {
        "stream": spec.name if spec else NO_MEMORY,
        "probe": spec.probe if spec else "none",
        "regime": spec.regime if spec else "none",
        "step": point.step,
        "cycle": point.cycle,
        "phase": point.phase,
        "eval_family": family,
        "eval_kind": kind,
        "accuracy": accuracy,
        "n_passed": n_passed,
        "n_tasks": n_tasks,
        "buffer_size": len(snap["memory"]["episodic"]["entries"]) if snap else 0,
        "abstract_entries": len(snap["memory"]["abstract"]["entries"]) if snap else 0,
        "misclassified": misclassified,
        "backbone": backbone,
    }


def _run_stream(
    profile: ProbeProfile,
    spec: ProbeStream | None,
    llm: LLMClient,
    tasks: ProbeTasks,
    folder: Path,
    backbone: str,
) -> dict[str, Any]:
    """Stream ``spec`` (None: the no-memory baseline, evaluation only) and evaluate it at every checkpoint."""
    started = time.monotonic()
    calls: dict[str, int] = {}
    snapshots: list[dict[str, Any]] = []
    per_step: dict[int, int] = {}
    if spec is None:
        points, keys = [Checkpoint(0, 0, "")], profile.eval_keys()
    else:
        batches, points = step_schedule(spec, tasks.subsets, profile.tasks_per_step)
        order = [t for batch in batches for t in batch]
        result = run_stream(order, llm, profile.stream_config(spec), folder, batches=batches)
        snapshots, calls = result.snapshots, dict(result.calls)
        per_step = misclassifications(snapshots).per_step
        keys = tuple((f, k) for f in spec.eval_families for k in spec.eval_kinds)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    with JsonlWriter(folder / EVALS_FILE) as writer:
        for point in points:
            if point.step == 0:
                memory = Memory(EpisodicBuffer(capacity=profile.capacity), AbstractStore())
            else:
                memory = memory_at(snapshots[point.step - 1])
            mis = sum(n for s, n in per_step.items() if s <= point.step)
            for family, kind in keys:
                evalset = tasks.eval_set(family, kind)
                res = evaluate(evalset, llm, memory, **profile.eval_kwargs())
                calls["arc_eval"] = calls.get("arc_eval", 0) + len(evalset)
                writer.append({"step": point.step, "eval_family": family, "eval_kind": kind, **res.to_dict()})
                rows.append(
                    _row(spec, point, family, kind, res.accuracy, res.n_passed, res.n_tasks, snapshots, mis, backbone)
                )
    done = {
        "stream": asdict(spec) if spec else None,
        "checkpoints": [asdict(p) for p in points],
        "calls": calls,
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }
    atomic_write_json(folder / DONE_FILE, done)
    return done


def _manifest(
    run: StudyRun,
    tasks: ProbeTasks,
    status: str,
    sandbox: dict[str, Any],
    provenance: str,
    *,
    calls: bool = False,
) -> dict[str, Any]:
    """The probes' manifest; ``calls``: the ledger's counts (the finished run's), else none yet."""
    profile: ProbeProfile = run.profile
    m = run.manifest("arc-probes", PROBES_FORMAT, status)
    m.update(
        {
            "provenance": provenance,
            "seed": profile.seed,
            "task_examples": {"n_train": profile.n_train, "n_test": profile.n_test},
            "subset_size": profile.subset_size,
            "variants_per_task": profile.variants,
            "source": profile.source,
            "buffer_size": profile.buffer_size,
            "buffer_reading": profile.buffer_reading,
            "streams": [asdict(s) for s in profile.streams] + ([{"name": NO_MEMORY}] if profile.no_memory else []),
            "subset_task_ids": {f: [t.task_id for t in ts] for f, ts in tasks.subsets.items()},
            "variant_task_ids": {f: [t.task_id for t in ts] for f, ts in tasks.variants.items()},
            "prompt_hashes": prompt_hashes(ARC_PROMPTS),
            "calls": run.calls() if calls else {},
            "cached_calls": run.cached_calls() if calls else 0,
            "sandbox": sandbox,
            **run.wall(),
        }
    )
    return m


def run_probes(
    profile_path: str | Path,
    out_dir: str | Path,
    *,
    endpoint: Endpoint | None = None,
    backbone: str | Endpoint | None = None,
    preflight: bool = True,
    response_cache: bool | None = None,
    provenance: str = "",
    log: Any = print,
) -> ProbeResult:
    """Run (or resume) every stream of a probe profile; returns the results table and the manifest.

    ``endpoint`` / ``backbone`` as in ``study.run_study``; ``response_cache`` overrides the profile's key;
    ``provenance`` is a line recorded in the manifest and shown under every figure (e.g. that a scripted test
    model, not an LLM, produced the run)."""
    # another endpoint than the profile's backbone: its context is checked once it is open
    profile = load_probe_profile(profile_path, context_check=endpoint is None and backbone is None)
    sandbox = sandbox_record(profile)
    log(("WARNING: " if sandbox["mode"] == "unisolated" else "sandbox: ") + sandbox["description"])
    out = Path(out_dir)
    run = StudyRun.begin(profile, out, what="probes", log=log)
    tasks = probe_tasks(profile)
    use_cache = profile.response_cache if response_cache is None else response_cache
    specs: list[ProbeStream | None] = list(profile.streams) + ([None] if profile.no_memory else [])
    with run.connect(backbone=backbone, endpoint=endpoint, preflight=preflight, response_cache=use_cache) as run:
        bb = run.models
        if bb.endpoint.context_length is not None:
            message = context.refusal(probe_prompt_sizes(profile), bb.endpoint.context_length, bb.endpoint.model)
            if message is not None:
                raise fail(profile.path, message)
        if bb.note:
            log(f"NOTE: {bb.note}")
        cache = run.cache()
        log(
            f"probes {out}: {len(specs)} stream(s), model {bb.endpoint.model} at "
            f"{bb.endpoint.base_url}, response cache {cache.root if cache is not None else 'off'}"
        )
        llm = run.client(seed=profile.seed)
        run.write_manifest(_manifest(run, tasks, "running", sandbox, provenance))
        for spec in specs:
            name = spec.name if spec else NO_MEMORY
            folder = out / STREAMS_DIR / name
            run.unit(
                name,
                folder / DONE_FILE,
                lambda s=spec, f=folder: _run_stream(profile, s, llm, tasks, f, bb.label),
                what=f"probe stream {name}",
                clear=lambda f=folder: clear_incomplete(f, STREAM_FILES, "probe stream"),
                tags={"stream": name},
            )
        names = [s.name if s else NO_MEMORY for s in specs]
        rows = [r for n in names for r in read_json(out / STREAMS_DIR / n / DONE_FILE)["rows"]]
        frame = results_frame(rows)
        run.write_results({"columns": list(RESULT_COLUMNS), "rows": rows}, frame)
        manifest = _manifest(run, tasks, "complete", sandbox, provenance, calls=True)
        run.write_manifest(manifest)
    return ProbeResult(out, frame, manifest)


# -- the notebook's run-or-load step --------------------------------------------------------------------------


def obtain_probes(
    mode: str,
    probes_dir: str | Path,
    *,
    profile: str | Path | None = None,
    root: str | Path | None = None,
    out_root: str | Path = "outputs/arc",
    endpoint: Endpoint | None = None,
) -> Path | None:
    """The notebook's run-or-load step, as ``study.obtain_study``: "paper" None, "load" ``probes_dir``, "run" the
    profile into ``<out_root>/<profile name>`` (resuming)."""
    return obtain_folder(
        mode,
        probes_dir,
        profile=profile,
        root=root,
        out_root=out_root,
        run=lambda prof, out: run_probes(prof, out, endpoint=endpoint),
        results_file=RESULTS_JSON,
        what="probe",
    )
