"""Consolidation studies: build memories under the paper's construction conditions, evaluate them, tabulate.

``run_study(profile, out_dir)`` reads a profile (``params/consolidation/*.yaml``, checked by
``consolidation.profile``), builds the fixed trajectory pool once, builds every (builder, regime) memory with
``regimes.build_memory`` and evaluates the chosen snapshots through the kit's protocol (method
``consolidated_memory``, one run per seed = one repeat), beside a no-memory row and the profile's ``methods``
rows. Re-running resumes. ``obtain_study`` is the notebooks' run-or-load step. Command:
``python -m antipersist_lib consolidation --profile params/consolidation/smoke.yaml``.

Paper map (§3, §4.1-4.2, Tables 2-3 and the rest), regimes, context budget, method rows, the folder layout,
backbone rules and the kit's readings (step 0, ``fs<N>``, Tables 2-3's conditions, the "(--)" rule):
docs/faulty-memories.md, "Consolidation over trajectory pools" and "The consolidation code's own readings, module
by module". Builds are ``consolidation.builds``, evaluations ``consolidation.evaluations``, reading a study back
``consolidation.study_folder``, tables ``consolidation.analysis``, figures ``consolidation.figures``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.consolidation import prompts as _consolidation_prompts  # noqa: F401  (registers prompts)
from antipersist_lib.consolidation.bank import load_bank
from antipersist_lib.consolidation.builds import (
    POOL_FILE,
    evaluation_steps,
    memory_dir,
    obtain_pool,
    pool_fingerprint,
    run_build,
    snapshot_steps,
    summaries_kept,
)
from antipersist_lib.consolidation.context_estimate import check_profile_context
from antipersist_lib.consolidation.evaluations import (
    build_fields,
    evaluators,
    fitted_memory,
    method_fields,
    no_memory_fields,
    progress,
    run_call_totals,
    run_evaluation,
    run_name,
)
from antipersist_lib.consolidation.pool import PoolRecord
from antipersist_lib.consolidation.profile import (
    METHOD_REGIME,
    NO_MEMORY,
    Build,
    StudyProfile,
    load_study_profile,
)
from antipersist_lib.consolidation.prompts import PROMPTS as CONSOLIDATION_PROMPTS
from antipersist_lib.consolidation.regimes import BANK_FILE, SNAPSHOTS_FILE, make_builder
from antipersist_lib.consolidation.study_folder import (
    SURGERY_RESULTS,
    SWITCH_RESULTS,
    results_frame,
    study_dirs,
)
from antipersist_lib.consolidation.surgery import SURGERY_DIR, memory_label, without
from antipersist_lib.consolidation.task_switch import check_sequence, judged, switch_banks
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.methods import prompt_hashes as method_prompt_hashes
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.studies import (
    RESULTS_JSON,
    StudyProfileError,
    StudyRun,
    relative_to,
    utc_now,
)

STUDY_FORMAT = 1


@dataclass
class StudyResult:
    out: Path
    frame: pd.DataFrame
    manifest: dict[str, Any]


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

    Context: the profile's largest prompts are estimated when it loads (``context_estimate.check_profile_context``); given
    another endpoint or backbone, the study's own backbone is checked against that endpoint's context instead, once
    it is open and before any call. The estimates go into the manifest (``context.estimates``)."""
    profile = load_study_profile(profile_path, context_check=endpoint is None and backbone is None)
    out = Path(out_dir)
    run = StudyRun.begin(profile, out, what="study")
    pool = obtain_pool(profile, out, root=Path(root) if root is not None else None)
    fingerprint = pool_fingerprint(pool, out / POOL_FILE)
    summaries = summaries_kept(profile, pool)
    rows: list[dict[str, Any]] = []
    builds_info: list[dict[str, Any]] = []
    with run.connect(
        backbone=backbone,
        endpoint=endpoint,
        embedding=profile.embedding,
        embed_endpoint=embed_endpoint,
        preflight=preflight,
        response_cache=profile.response_cache,
        per_model_cache=True,  # as the protocol's runs keep theirs, so builds and runs share one cache
    ) as run:
        models = run.models
        if models.note:
            print("note:", models.note)
        # the endpoint really used may not be the profile's backbone (--base-url, --backbone): its context decides
        estimates = [s.to_dict() for s in check_profile_context(profile, models.endpoint)]
        print(
            f"consolidation study {out}: {profile.benchmark}, model {models.endpoint.model} at "
            f"{models.endpoint.base_url}, {len(pool)} pool record(s)",
            flush=True,
        )
        regime_llms = _regime_llms(run)
        manifest = _manifest(run, fingerprint, status="running", regime_llms=regime_llms)
        manifest["summaries"] = summaries
        manifest["context"]["estimates"] = estimates
        run.write_manifest(manifest)
        llm = run.client(seed=profile.build_seed)
        from antipersist_lib.serving.embeddings import Embedder

        embedder = Embedder(models.embed_endpoint, ledger=run.ledger, cache=run.cache(models.embed_endpoint.model))
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
                    res = run_evaluation(
                        run, method=NO_MEMORY, method_params={}, name=NO_MEMORY, seed=seed, evaluator=ev
                    )
                    rows.append({**base, "backbone": ev.label, **no_memory_fields(), **res})
                    progress(rows[-1])
        for index, build in enumerate(all_builds, 1):
            b0 = time.monotonic()
            build_llm = regime_llms.get(build.regime.backbone or "", llm)

            def check_regime_backbone(name: str = build.regime.backbone or "", client: LLMClient = build_llm) -> None:
                """The preflight of a regime's own backbone, once per backbone."""
                if client is not llm and preflight and name not in checked_regime_backbones:
                    _check_regime_backbone(name, client, run)
                    checked_regime_backbones.add(name)

            run.unit(
                build.key,
                memory_dir(out, build) / BANK_FILE,
                lambda b=build, m=build_llm: run_build(profile, b, pool, out, m, embedder),
                what=f"build {build.key}",
                tags={"build": build.key, "built_by": build_llm.endpoint.model},
                embeddings=build.builder in ("ace", "ace_gt"),
                check=check_regime_backbone,
            )
            snaps = memory_dir(out, build) / SNAPSHOTS_FILE
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
                    memory_params, fit = fitted_memory(
                        profile, ev.endpoint, build, snaps, info, None if own else ev.label
                    )
                    builds_info[-1]["evaluation_context"][str(info.step) if own else f"{info.step} {ev.label}"] = fit
                    for seed in profile.seeds:
                        res = run_evaluation(
                            run,
                            method="consolidated_memory",
                            method_params=memory_params,
                            name=run_name(build.builder, r.name, info.step),
                            seed=seed,
                            evaluator=ev,
                        )
                        rows.append(
                            {
                                **base,
                                "backbone": ev.label,
                                **build_fields(build, info),
                                "memory_dropped": fit["dropped_entries"],
                                **res,
                            }
                        )
                        progress(rows[-1], f"bank {index} of {len(all_builds)}")
        if profile.surgery is not None:
            surgery_rows = _run_surgery(run)
            manifest_extra["surgery"] = {"rows": len(surgery_rows), "file": SURGERY_RESULTS}
        if profile.task_switch is not None:
            switch_rows = _run_task_switch(run, pool, llm, embedder)
            manifest_extra["task_switch"] = {"rows": len(switch_rows), "file": SWITCH_RESULTS}
        method_evals = len(profile.methods) * len(profile.seeds) * len(acting)
        for mrow in profile.methods:
            params = dict(mrow.params)
            if mrow.seed_pool:
                params["seed_pool"] = str(out / POOL_FILE)
            for ev in acting:
                for seed in profile.seeds:
                    res = run_evaluation(
                        run,
                        method=mrow.method,
                        method_params=params,
                        name=f"{METHOD_REGIME}--{mrow.name}",
                        seed=seed,
                        iterations=mrow.iterations,
                        train_per_iteration=mrow.train_per_iteration,
                        train_pool_limit=mrow.train_pool_limit,
                        evaluator=ev,
                    )
                    rows.append({**base, "backbone": ev.label, **method_fields(mrow, len(pool)), **res})
                    done = sum(1 for row in rows if row["regime"] == METHOD_REGIME)
                    progress(rows[-1], f"method evaluation {done} of {method_evals}")
        frame = results_frame(rows)
        run.write_results({"format": STUDY_FORMAT, "note": models.note, "rows": rows}, frame)
        manifest = _manifest(run, fingerprint, status="complete", regime_llms=regime_llms)
        manifest["context"]["estimates"] = estimates
        manifest.update(
            {
                "summaries": summaries,
                **manifest_extra,
                "builds": builds_info,
                "evaluations": len(rows),
                "calls": {"consolidation": run.ledger.totals(), "evaluation": run_call_totals(out, rows)},
                **run.wall(),  # wall_s: this invocation; wall_s_total: every invocation into this folder
                "finished_at": utc_now(),
            }
        )
        run.write_manifest(manifest)
    return StudyResult(out, frame, manifest)


def _run_task_switch(run: StudyRun, pool: list[PoolRecord], llm: Any, embedder: Any) -> list[dict[str, Any]]:
    """The task-switch sequence (``task_switch``): every setup's bank after every task, each evaluated on that
    task's held-out cases with every entry in context (one run per seed) and judged entry by entry; one row per
    (setup, task, seed) in ``task_switch.json``. Banks, verdicts and runs are kept, so a re-run resumes."""
    profile: StudyProfile = run.profile
    models, out = run.models, run.out
    spec = profile.task_switch
    assert spec is not None
    sequence = check_sequence(pool, spec.sequence or list(dict.fromkeys(r.task_type for r in pool)))
    source_types = {r.rid: r.task_type for r in pool}
    rows: list[dict[str, Any]] = []
    for setup in spec.setups:
        banks = run.restarts(
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
                verdicts = run.restarts(f"judge {setup} task {bank.index}", lambda b=bank: judged(b, llm, source_types))
                labels = [v["label"] for v in verdicts]
            for seed in profile.seeds:
                res = run_evaluation(
                    run,
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


def _run_surgery(run: StudyRun) -> list[dict[str, Any]]:
    """Memory surgery (``surgery``): the chosen bank whole and without each chosen entry, each written to
    ``surgery/<memory>.json`` and evaluated once per seed on the study's held-out tasks; rows in
    ``surgery.json``. Finished runs are kept, so a re-run resumes."""
    profile: StudyProfile = run.profile
    models, out = run.models, run.out
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
            res = run_evaluation(
                run,
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


def _regime_llms(run: StudyRun) -> dict[str, LLMClient]:
    """A client per backbone that a regime names (``regimes.<name>.backbone``): Fig. 4's seed bank is built by
    one model and continued by another. Each has its own response cache folder and shares the study's ledger
    (its calls are tagged ``built_by``)."""
    from antipersist_lib.serving.profiles import backbone_endpoint

    profile: StudyProfile = run.profile
    clients: dict[str, LLMClient] = {}
    for r in profile.regimes:
        if r.backbone is None or r.backbone in clients:
            continue
        try:
            ep = backbone_endpoint(r.backbone)
        except ValueError as exc:
            raise StudyProfileError(f"study profile {profile.path}: 'regimes.{r.name}.backbone': {exc}") from None
        clients[r.backbone] = run.client(ep, seed=profile.build_seed)
    return clients


def _check_regime_backbone(name: str, client: LLMClient, run: StudyRun) -> None:
    from antipersist_lib.serving.preflight import Probe, run_preflight

    run_preflight([Probe("chat", client.endpoint, f"regime backbone {name}")], what=run.where)


def _manifest(
    run: StudyRun,
    fingerprint: dict[str, Any],
    *,
    status: str,
    regime_llms: dict[str, LLMClient] | None = None,
) -> dict[str, Any]:
    profile: StudyProfile = run.profile
    models = run.models
    m = run.manifest("consolidation", STUDY_FORMAT, status)
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
            # the consolidators' family, and every family the kit's methods (the study's method rows) can use
            "prompt_hashes": {"consolidation": prompt_hashes(CONSOLIDATION_PROMPTS), "methods": method_prompt_hashes()},
            # the models that act on the banks when they are not the study's backbone (evaluation.backbones)
            **(
                {"evaluation_backbones": {ev.label: ev.endpoint.describe() for ev in evaluators(profile, models)}}
                if profile.eval_backbones
                else {}
            ),
            "started_at": run.started_at,
        }
    )
    return m


# -- the notebooks' run-or-load step ----------------------------------------------------------------------


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
        paths = [base / d for d in study_dirs(study_dir)]
        for p in paths:
            if not (p / RESULTS_JSON).exists():
                raise FileNotFoundError(f"no study results at {p}: run the study first or point study_dir elsewhere")
        return paths
    if mode == "run":
        profiles = study_dirs(profile)
        if not profiles:
            raise ValueError("mode 'run' needs a study profile (params/consolidation/*.yaml)")
        outs = []
        for prof in profiles:
            out = base / out_root / prof.stem
            run_study(base / prof, out, endpoint=endpoint, root=base)
            outs.append(out)
        return outs
    raise ValueError(f"mode must be one of ('paper', 'load', 'run'), got {mode!r}")
