"""What an ARC-AGI Stream study profile costs before it starts (``arc-study --plan``).

Calls are counted from the profile, per condition and seed: one solver call per streamed task (two with B.7's
selection first), at most one decision per solve (Auto, Episodic-only) and one extraction per step (Force; at
most one for Auto), one evaluation call per checkpoint, evaluation task and repeat; the Fig. 2 slice
selection, the source ablation, the judge and the surgery as their own rows. Tokens per call come from the
study ledgers already recorded (this output folder's and the kit's fixtures), per call purpose
(``analysis.plan.purpose_rates``). Nothing is started.
"""

from __future__ import annotations

from pathlib import Path

from antipersist_lib.analysis.plan import Plan, backbone_price, plan_purposes, purpose_rates
from antipersist_lib.arc.generator import POOL_SIZES
from antipersist_lib.arc.study_profile import PoolSpec, StudyProfile, load_study_profile
from antipersist_lib.paths import repo_root

#: the entries a final abstract store holds, for the judge's and the surgery's calls before a run has made one
#: (the kit's assumption; the real count is read from the store when the run gets there)
ASSUMED_ENTRIES = 20


def _pool_size(spec: PoolSpec) -> int:
    if spec.name not in POOL_SIZES:  # the fresh pool: sized by the profile (its limit)
        return int(spec.limit or 0)
    return min(spec.limit or POOL_SIZES[spec.name], POOL_SIZES[spec.name])


def _eval_tasks(profile: StudyProfile) -> int:
    heldout = _pool_size(profile.heldout_pool) if "heldout" in profile.eval_sets else 0
    train = 0
    if "train" in profile.eval_sets:
        train = min(profile.train_limit or _pool_size(profile.train_pool), _pool_size(profile.train_pool))
    return heldout + train


def plan_arc_study(profile_path: str | Path, out: Path, *, throughput: float | None = None) -> Plan:
    profile = load_study_profile(profile_path)
    seeds = profile.seeds or (profile.seed,)
    rates = purpose_rates([out, repo_root() / "tests" / "fixtures" / "arc"])
    price = backbone_price(profile.backbone)
    selecting = str(profile.stream.get("solver_mode", "direct")).startswith("select")
    repeats = profile.eval_repeats
    eval_tasks = _eval_tasks(profile)
    heldout = _pool_size(profile.heldout_pool)
    counted = "counted from the profile (decisions and extractions: at most one a solve / a step)"
    rows = []
    for seed in seeds:
        for cond in profile.all_conditions():
            calls: dict[str, float] = {}
            units = 0
            if not cond.is_baseline:
                cfg = profile.stream_config(cond)
                solves = cfg.steps * cond.tasks_per_step
                units += solves
                calls["arc_solve"] = solves
                if selecting:
                    calls["arc_select"] = solves
                if cond.regime in ("auto", "episodic_only"):
                    calls["arc_decide"] = solves
                if cond.regime in ("force", "auto"):
                    calls["arc_extract"] = cfg.steps
            fig2 = profile.fig2 is not None and cond.group != "grid"
            per_checkpoint = profile.fig2.n_tasks if fig2 and profile.fig2 else eval_tasks
            evals = len(profile.checkpoints_of(cond)) * per_checkpoint * repeats
            calls["arc_eval"] = evals * (2 if selecting else 1)
            units += evals
            rows.append(
                plan_purposes(
                    label=f"seed{seed}/{cond.name}",
                    backbone=profile.backbone,
                    calls=calls,
                    rates=rates,
                    calls_source=counted,
                    price=price,
                    units=units,
                    unit="solves",
                )
            )
            extra: dict[str, float] = {}
            parts = []
            if profile.judge and cond.name in profile.judge.get("conditions", ()):
                extra["arc_judge"] = ASSUMED_ENTRIES
                parts.append("judge")
            if profile.surgery and cond.name in profile.surgery.get("conditions", ()):
                entries = min(profile.surgery.get("max_entries") or ASSUMED_ENTRIES, ASSUMED_ENTRIES)
                extra["arc_eval"] = entries * heldout * repeats
                parts.append("surgery")
            if profile.source_ablation and cond.name in profile.source_ablation.get("conditions", ()):
                ablation = profile.source_ablation
                n = len(ablation.get("checkpoints", ())) * len(ablation.get("arms", ())) * heldout * repeats
                extra["arc_eval"] = extra.get("arc_eval", 0) + n
                parts.append("source ablation")
            if extra:
                rows.append(
                    plan_purposes(
                        label=f"seed{seed}/{cond.name} ({', '.join(parts)})",
                        backbone=profile.backbone,
                        calls=extra,
                        rates=rates,
                        calls_source=f"counted from the profile, {ASSUMED_ENTRIES} final entries assumed (kit's guess)",
                        price=price,
                        units=int(sum(extra.values())),
                        unit="solves",
                    )
                )
        if profile.fig2 is not None:
            pool = _pool_size(profile.train_pool)
            rows.append(
                plan_purposes(
                    label=f"seed{seed}/fig2 slice selection",
                    backbone=profile.backbone,
                    calls={"arc_eval": pool * repeats},
                    rates=rates,
                    calls_source="at most every training-pool task solved without memory, each repeat",
                    price=price,
                    units=pool * repeats,
                    unit="solves",
                )
            )
    notes = [f"{len(seeds)} seed(s) x {len(profile.all_conditions())} condition(s); backbone {profile.backbone}"]
    return Plan(f"arc-study {profile_path}", rows, throughput, notes)
