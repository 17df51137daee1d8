"""What a consolidation study profile costs before it starts (``consolidation --plan``).

Counted from the profile: each build's updates (Static-All: one; Static-Group: one per task type; a stream:
its stages, or its batches over the pool times its passes), times the builder's consolidation calls per
update as the recorded study ledgers measure them (tag ``builder``, per distinct ``step``; one a update when
no ledger holds the builder); each evaluated bank step, the no-memory row and each method row as a protocol run
of the held-out set per seed, at ``analysis.plan.Rates``' calls per episode. Task switching and surgery depend
on the banks built and are named in the notes, not counted. Nothing is started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from antipersist_lib.analysis.plan import (
    Plan,
    Rates,
    backbone_price,
    plan_purposes,
    plan_run,
    purpose_rates,
    recorded_runs,
    records,
)
from antipersist_lib.consolidation.context_estimate import pool_size, update_count
from antipersist_lib.consolidation.profile import Build, StudyProfile, load_study_profile
from antipersist_lib.paths import repo_root
from antipersist_lib.runner.spec import RunSpec, run_episode_counts


def _evaluated(profile: StudyProfile, build: Build, updates: int) -> int:
    rule = build.regime.steps if build.regime.steps is not None else profile.steps
    if build.regime.regime != "stream" or rule == "last":
        return 1
    if rule == "all":
        return updates
    if isinstance(rule, dict) and "every_pass" in rule:
        return max(build.regime.passes // int(rule["every_pass"]), 1)
    if isinstance(rule, dict):
        return updates // int(rule["every"]) + (updates % int(rule["every"]) != 0)
    return len(set(rule)) or 1


def _calls_per_update(roots: list[Path]) -> dict[str, float]:
    calls: dict[str, int] = {}
    steps: dict[str, set[Any]] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for ledger in root.rglob("ledger.jsonl"):
            for line in records(ledger):
                tags = line.get("tags") or {}
                builder = tags.get("builder")
                if line.get("purpose") != "consolidation" or not builder:
                    continue
                calls[builder] = calls.get(builder, 0) + 1
                steps.setdefault(builder, set()).add((str(ledger), tags.get("build"), tags.get("step")))
    return {b: calls[b] / len(steps[b]) for b in calls if steps.get(b)}


def plan_consolidation_study(profile_path: str | Path, out: Path, *, throughput: float | None = None) -> Plan:
    profile = load_study_profile(profile_path)
    recorded = [out, repo_root() / "tests" / "fixtures" / "consolidation"]
    rates = Rates(recorded_runs([*recorded, repo_root() / "tests" / "fixtures" / "runs"]))
    per_update = _calls_per_update(recorded)
    consolidation_rates = purpose_rates(recorded)
    price = backbone_price(profile.backbone)
    pool, pool_source = pool_size(profile, out)
    n_types = len(profile.pool.types or ()) or 6
    probe = RunSpec(
        method="react",
        benchmark=profile.benchmark,
        backbone=profile.backbone,
        iterations=1,
        train_per_iteration=1,
        heldout_limit=profile.heldout_limit,
        task_types=profile.task_types,
        heldout_set=profile.heldout_set,
    )
    _, heldout = run_episode_counts(probe)
    rows = []

    acting = list(profile.eval_backbones) or [profile.backbone]

    def evaluation(label: str, method: str, n_runs: int, episodes_each: int) -> None:
        for backbone in acting:
            rows.append(
                plan_run(
                    label=label if len(acting) == 1 else f"{label} by {backbone}",
                    benchmark=profile.benchmark,
                    method=method,
                    backbone=backbone,
                    episodes=n_runs * episodes_each,
                    max_steps=profile.max_steps,
                    rates=rates,
                    price=price if backbone == profile.backbone else backbone_price(backbone),
                )
            )

    seeds = len(profile.seeds)
    if profile.no_memory:
        evaluation("no-memory evaluation", "react", seeds, heldout)
    for build in profile.builds():
        updates = update_count(build, pool, n_types)
        each = per_update.get(build.builder)
        source = (
            f"{updates} updates ({pool_source}) x {each:.2f} consolidation calls an update (measured, {build.builder})"
            if each is not None
            else f"{updates} updates ({pool_source}) x 1 consolidation call an update (assumed: no ledger of {build.builder})"
        )
        rows.append(
            plan_purposes(
                label=f"build {build.key}",
                backbone=build.regime.backbone or profile.backbone,
                calls={"consolidation": updates * (each if each is not None else 1.0)},
                rates=consolidation_rates,
                calls_source=source,
                price=price if build.regime.backbone is None else backbone_price(build.regime.backbone),
                units=updates,
                unit="episodes",
            )
        )
        evaluation(f"evaluate {build.key}", "consolidated_memory", _evaluated(profile, build, updates) * seeds, heldout)
    for mrow in profile.methods:
        evaluation(f"method {mrow.name}", mrow.method, seeds, mrow.training_episodes + mrow.iterations * heldout)
    notes = [
        f"pool: {pool_source}; held-out set: {heldout} episodes per evaluation; {seeds} seed(s); "
        f"consolidated by {profile.backbone}, evaluated by {', '.join(acting)}"
    ]
    if profile.task_switch is not None or profile.surgery is not None:
        notes.append("not counted: task switching and surgery (their calls depend on the banks the study builds)")
    return Plan(f"consolidation {profile_path}", rows, throughput, notes)
