"""A consolidation study's evaluations: a bank, the no-memory agent or a kit method run on the held-out set
through the kit's protocol (``run_cell``, one run per seed), and the results row each becomes.

``run_evaluation`` runs one (restarting a dead embedded server); ``evaluators`` names the models that act on the
banks; ``fitted_memory`` checks an evaluated bank against the acting model's context (``context.fit_bank``);
``no_memory_fields`` / ``method_fields`` / ``build_fields`` say which condition a row belongs to. The runner is
``consolidation.study``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.consolidation.bank import load_bank
from antipersist_lib.consolidation.builds import StepInfo
from antipersist_lib.consolidation.context import fit_bank
from antipersist_lib.consolidation.profile import (
    METHOD_REGIME,
    NO_MEMORY,
    NO_MEMORY_CONDITION,
    Build,
    MethodRow,
    StudyProfile,
    table_column,
)
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.studies import CACHE_DIR, StudyModels, StudyRun, relative_to

RUNS_DIR = "runs"
FITTED_DIR = "fitted"


def run_evaluation(
    run: StudyRun,
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
    """One protocol run of the held-out set by ``evaluator`` (default: the study's backbone), into the study's
    ``runs/`` (resumed when it holds the run), restarted with a dead embedded server; its row's results."""
    profile: StudyProfile = run.profile
    models, out = run.models, run.out
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
    summaries = run.restarts(
        f"run {name} seed {seed}",
        lambda: run_cell(spec, endpoint=evaluator.endpoint, embed_endpoint=models.embed_endpoint),
    )
    last = summaries[-1]
    held = [r for r in RunDirectory(spec.run_dir()).read_episodes("heldout") if r.get("iteration") == last.iteration]
    scores = [float(r["outcome"].get("score", 0.0)) for r in held]
    return {
        "seed": int(seed),
        "heldout_n": last.heldout_n,
        "success": finite(last.heldout_success),
        "score": finite(sum(scores) / len(scores)) if scores else None,
        "infra_failures": last.infra_failures,
        "mean_steps": finite(last.mean_steps),
        "mean_calls": finite(last.mean_calls),
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


def finite(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else float(x)


def run_name(builder: str, regime: str, step: int) -> str:
    return f"{builder}--{regime}--s{step}"


def fitted_memory(
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


def no_memory_fields() -> dict[str, Any]:
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


def method_fields(row: MethodRow, pool_size: int) -> dict[str, Any]:
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


def build_fields(build: Build, info: StepInfo) -> dict[str, Any]:
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


def progress(row: dict[str, Any], where: str = "") -> None:
    """One line per finished evaluation; ``where``: how far the study has come (e.g. "method evaluation 2 of 4")."""
    success = row["success"]
    print(
        f"  {row['builder']:>6} {row['condition']:<16} step {row['step']:>3} seed {row['seed']}: held-out success "
        f"{'n/a' if success is None else f'{100 * success:5.1f}%'} (n={row['heldout_n']}, "
        + ("kit method" if row["regime"] == METHOD_REGIME else f"{row['n_entries']} entries")
        + (f"; {where})" if where else ")"),
        flush=True,
    )


def run_call_totals(out: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
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
