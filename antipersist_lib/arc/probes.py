"""ARC-AGI Stream probes on single-family subsets (faulty-memories paper §6, Figs. 8(a), 8(b), 11, App. D).

The paper runs three small experiments on subsets of the ARC-AGI Stream that hold one strategy family each
(its Table 1: "Subsets For Individual Experiments"). This module builds those subsets with the kit's seeded
generator, streams them through ``controller.run_stream`` and evaluates the memory at every cycle boundary
with ``controller.evaluate``:

- **overfit** (Fig. 11, §6.3): one family's subset is fed again and again, one cycle after another. Each
  checkpoint evaluates the memory on *exact repetitions* (the seen tasks themselves) and on *variations*
  (for every seen task, new tasks of the same family and the same skill drawn with other seeds: new hidden
  parameters and new grids). The paper: repetitions stay solved, variations collapse as cycles accumulate.
- **overwrite** (Fig. 8(b), §1 "updates on one task overwrite memory of another"): family A's subset for
  ``cycles`` cycles, then family B's for as many; the memory is evaluated on A's and B's seen tasks at every
  cycle boundary, so A's curve shows what B's updates do to A.
- **misgroup** (Fig. 8(a), §6 first mechanism, misgrouping before abstraction): A's and B's subsets streamed
  interleaved, beside one stream per family alone; each is evaluated on both families' seen tasks, and the
  mixed stream's consolidations that combine episodes of both families are counted
  (``lineage.misclassifications``, the Fig. 7(a) measure).

A no-memory evaluation of every evaluated set is the baseline of all three.

``run_probes(profile, out_dir)`` reads a probe profile (``params/arc/probes_*.yaml``) and writes::

    <out_dir>/study.json                manifest: profile, backbone, endpoint (no key), versions, prompt hashes,
                                        subset and variant task ids, streams, calls, sandbox, wall time
    <out_dir>/results.csv, results.json one row per (stream, checkpoint step, evaluated family, kind)
    <out_dir>/ledger.jsonl              one line per LLM call (counts and tags, never text)
    <out_dir>/cache/                    response cache (``response_cache: true``)
    <out_dir>/streams/<name>/           config.json, snapshots.jsonl, memory.json (run_stream), evals.jsonl,
                                        stream.json (written last: the stream is complete)

The profile, subsets and schedules are ``arc.probe_profile``; reading a probe folder back and the figures'
tables (Figs. 11, 8(b), 8(a)) are ``arc.probe_tables``.

Re-running resumes: a complete stream (``stream.json``) is kept, an incomplete one is cleared and re-run (its
earlier calls come from the response cache).

Kit choices where the paper is silent:

- ``buffer_size`` is read as the study reads |B| (``buffer_reading``): "batch" (the paper profile, as the study's
  paper profile) streams up to |B| fresh tasks per step into an uncapped buffer, each cycle cut on its own so
  that a step never spans two cycles and every checkpoint is a cycle boundary; "cap" (default, the recorded
  fixtures) caps the buffer at |B| with one task per step.

- A single-family subset is ``subset_size`` tasks of that family, with skills taken in a seeded order of the
  7 skills (so a subset of 7 holds each skill once) and task seeds derived from the family, the profile seed
  and the position (even seeds; variants get odd seeds, so a variant can never be a seen task).
- A variation keeps the family and the skill and redraws everything else (rule parameters such as the target
  color, the skill's color or offset, and every grid); one whose inputs equal the seen task's is redrawn.
- An exact repetition is the seen task itself, shown with its shown examples and graded on its test grids
  (as ``study``'s training slice, Fig. 2); a variation is graded the same way.
- The paper does not caption Fig. 8(a); the kit reads it as the first mechanism of §6 (misgrouping) measured on
  two single-family subsets, and Fig. 8(b) as the overwriting the introduction cites it for.
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
