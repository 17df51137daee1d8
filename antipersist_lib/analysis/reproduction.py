"""Error reproduction measured from run records with planted skills (issue 40; docs/reproduction.md).

A run plants the useful or toxic skills of a pairs file (``core.planted``), or nothing, and records every
synthesis input's parent set with the toxic signatures its text carries. From those records alone (no model is
called) this module computes, per design, condition, seed and iteration: exposure q, reproduction alpha,
admission eta (Anti-Persistence's zero is checked on its run directory, not assumed), persistence, behaviour
and the immediate effect (F.1). Every rate has a 95 % bootstrap interval; an undefined rate stays undefined.

Definitions and the bootstrap: docs/reproduction.md, "The measures".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.analysis.rule_readings import ReadingKey, RuleReading, check_texts, run_readings
from antipersist_lib.core.planted import PLANT_PREFIX, Goals, PlantedSkills, goal_receptacles, read_planted
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.memory.abstraction_store import AbstractionStore, read_snapshot
from antipersist_lib.records import Task
from antipersist_lib.rundir import RunDirectory

#: designs whose runs hold an abstraction store; every other design's candidates are never admitted
STORING_DESIGNS = ("abstraction_memory", "joint_memory")
#: the no-memory reference for behaviour
REFERENCE = "react"
BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0

#: how a candidate's goal-aware verdict was obtained (``goal_aware``): recorded at synthesis; read again from
#: its stored text; equal to the plain verdict because the task's goal names no receptacle a flagged signature
#: names; or the plain verdict kept because neither a recorded verdict nor the text exists (a run recorded
#: before the goal-aware reading, whose candidate was not stored)
GOAL_RECORDED, GOAL_REREAD, GOAL_UNCHANGED, GOAL_KEPT_PLAIN = "recorded", "re-read", "unchanged", "kept plain"


@dataclass(frozen=True)
class Candidate:
    """One synthesis invocation as the analysis reads it."""

    design: str
    condition: str
    benchmark: str
    seed: int
    iteration: int
    phase: str
    task_type: str
    parents: tuple[str, ...]
    signatures: tuple[str, ...]
    admitted: bool
    exposed: bool  # P(H) holds a flagged abstraction (a planted toxic skill or a flagged descendant)
    direct: bool  # P(H) holds a planted toxic skill itself
    abstraction_id: str | None = None  # the stored abstraction it became (storing designs, when admitted)
    #: ``signatures`` is the goal-aware reading (core/planted.py); this is the plain one, and how the former
    #: was obtained (GOAL_RECORDED, ...)
    plain_signatures: tuple[str, ...] = ()
    goal_reading: str = GOAL_RECORDED

    @property
    def flagged(self) -> bool:
        return bool(self.signatures)

    @property
    def flagged_plain(self) -> bool:
        return bool(self.plain_signatures)


@dataclass(frozen=True)
class EpisodeFact:
    """One episode in the pairs' scope: what it did with respect to the toxic rules."""

    design: str
    condition: str
    benchmark: str
    seed: int
    iteration: int
    phase: str
    position: int
    task_type: str
    followed: tuple[str, ...]
    success: bool
    score: float
    exposed: bool  # a planted toxic skill or a flagged abstraction was in its context


@dataclass(frozen=True)
class StoredFact:
    """One active stored abstraction at an iteration's snapshot (planted skills excluded)."""

    design: str
    condition: str
    benchmark: str
    seed: int
    iteration: int
    abstraction_id: str
    flagged: bool  # by the goal-aware reading
    descends_from_toxic_plant: bool
    flagged_plain: bool = False  # by the plain reading


@dataclass
class RunRecords:
    """What one run directory contributes."""

    path: str
    design: str
    condition: str
    benchmark: str
    seed: int
    plant_iterations: int
    candidates: list[Candidate] = field(default_factory=list)
    episodes: list[EpisodeFact] = field(default_factory=list)
    stored: list[StoredFact] = field(default_factory=list)
    stores_abstractions: bool = False
    flagged_ids: set[str] = field(default_factory=set)  # B: every abstraction a toxic signature flags
    #: judges' second readings (rule_judge.py): judge -> (abstraction id, pair id) -> reading
    readings: dict[str, dict[ReadingKey, RuleReading]] = field(default_factory=dict)
    #: abstraction id -> the pairs whose scope covers it (what a judge reads it against), and its text
    pairs_of: dict[str, tuple[str, ...]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rate:
    """A rate with its counts and 95 % bootstrap interval; ``value`` is None when undefined."""

    value: float | None
    numerator: int
    denominator: int
    low: float | None = None
    high: float | None = None
    #: what the counts are: "rate" (k of n), "gap" (exposed and unexposed units), "mean" (n units), "difference"
    #: (pairs, and pairs with a nonzero difference)
    kind: str = "rate"

    def text(self, digits: int = 2) -> str:
        counts = {
            "rate": f"{self.numerator}/{self.denominator}",
            "gap": f"{self.numerator} exposed, {self.denominator} unexposed",
            "mean": f"n = {self.denominator}",
            "difference": f"{self.denominator} pairs, {self.numerator} nonzero",
        }[self.kind]
        if self.value is None:
            return f"undefined ({counts})"
        ci = "" if self.low is None else f" [{self.low:.{digits}f}, {self.high:.{digits}f}]"
        return f"{self.value:.{digits}f}{ci} ({counts})"


def bootstrap(
    units: Sequence[tuple[int, Sequence[float]]], stat: Callable[[np.ndarray], float | None]
) -> tuple[float | None, float | None]:
    """The 95 % percentile interval of ``stat`` over ``units`` = (seed, row of floats): seeds drawn with
    replacement, then each drawn seed's rows with replacement; ``stat`` gets the drawn rows as a 2-D
    array and may return None (undefined on that draw: left out). Deterministic (a fixed generator)."""
    if not units:
        return None, None
    by_seed: dict[int, list[Sequence[float]]] = {}
    for seed, row in units:
        by_seed.setdefault(seed, []).append(row)
    groups = [np.asarray(rows, dtype=float).reshape(len(rows), -1) for rows in by_seed.values()]
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    draws = []
    for _ in range(BOOTSTRAP_REPS):
        picked = rng.integers(0, len(groups), size=len(groups))
        rows = np.concatenate([groups[i][rng.integers(0, len(groups[i]), size=len(groups[i]))] for i in picked])
        got = stat(rows)
        if got is not None:
            draws.append(got)
    if not draws:
        return None, None
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def _column_mean(rows: np.ndarray) -> float:
    return float(rows[:, 0].mean())


def rate(units: Sequence[tuple[int, bool]]) -> Rate:
    """The fraction of true units, with counts and its seed-then-unit bootstrap interval."""
    n, k = len(units), sum(1 for _, v in units if v)
    if n == 0:
        return Rate(None, 0, 0)
    low, high = bootstrap([(s, (float(v),)) for s, v in units], _column_mean)
    return Rate(k / n, k, n, low, high)


def mean_of(units: Sequence[tuple[int, float]], kind: str = "mean") -> Rate:
    """The mean of (seed, value) units with its interval; ``kind="difference"`` for paired differences
    (the counts are then pairs and pairs with a nonzero difference)."""
    if not units:
        return Rate(None, 0, 0, kind=kind)
    low, high = bootstrap([(s, (float(v),)) for s, v in units], _column_mean)
    return Rate(float(np.mean([v for _, v in units])), sum(1 for _, v in units if v), len(units), low, high, kind)


def mean_difference(pairs: Sequence[tuple[int, float]]) -> Rate:
    """The mean of paired differences (seed, a - b), with its interval."""
    return mean_of(pairs, "difference")


# -- reading runs ---------------------------------------------------------------------------------------


def planted_for(benchmark: str, plant: str | Path, cache: dict[str, PlantedSkills | None]) -> PlantedSkills | None:
    """The pairs of ``benchmark``: from ``plant`` (a folder of ``<benchmark>.yaml`` files, or one file);
    None when it has none for that benchmark. A file that exists but is wrong is an error, never skipped."""
    if benchmark not in cache:
        p = Path(plant)
        if p.is_file():
            from antipersist_lib.serving.profiles import read_mapping

            cache[benchmark] = read_planted(p, benchmark) if read_mapping(p).get("benchmark") == benchmark else None
        else:
            cache[benchmark] = read_planted(p, benchmark) if (p / f"{benchmark}.yaml").is_file() else None
    return cache[benchmark]


def run_condition(manifest: dict[str, Any]) -> tuple[str, int]:
    """A run's condition (none / useful / toxic) and its planted iterations, from its parameters."""
    params = manifest.get("method_params") or {}
    return str(params.get("plant_condition", "none")), int(params.get("plant_iterations", 1))


def _check_pairs_file(manifest: dict[str, Any], skills: PlantedSkills, path: Path) -> None:
    recorded = ((manifest.get("method_config") or {}).get("plant") or {}).get("sha256")
    if recorded and recorded != skills.sha256:
        raise ValueError(
            f"run {path} read planted skills with sha256 {recorded[:12]}..., but {skills.path} now has "
            f"{skills.sha256[:12]}...: the pairs file changed since the run, so its recorded verdicts and a new "
            "reading would disagree; restore the file the run used (git) or re-run the study"
        )


def _lineage(history: dict[str, Any]) -> dict[str, set[str]]:
    """Every abstraction's ancestors along recorded synthesis edges (parents, and what it rewrote)."""
    memo: dict[str, set[str]] = {}

    def up(aid: str, seen: frozenset[str] = frozenset()) -> set[str]:
        if aid in memo:
            return memo[aid]
        a = history.get(aid)
        direct = set() if a is None else set(a.parents) | set(a.derived_from)
        out = set(direct)
        for p in direct - seen:
            out |= up(p, seen | {aid})
        memo[aid] = out
        return out

    for aid in history:
        up(aid)
    return memo


@dataclass
class RunGoals:
    """The goals the goal-aware reading needs (core/planted.py): every task's instruction the run recorded, by
    task key (its memory's records and its episodes) and by memory record id."""

    by_task: dict[str, str] = field(default_factory=dict)
    by_record: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of(cls, layout: RunDirectory) -> RunGoals:
        out = cls()
        memory = layout.state_path(RunDirectory.TRAJECTORIES)
        for path in (memory, *(layout.episodes_path(p) for p in ("train", "heldout"))):
            if not path.is_file():
                continue
            for line in read_jsonl(path):
                task = line.value.get("task")
                if isinstance(task, dict) and "task_id" in task:
                    t = Task.from_dict(task)
                    out.by_task[t.key] = t.instruction
                    if path == memory and "record_id" in line.value:
                        out.by_record[int(line.value["record_id"])] = t.instruction
        return out

    def of_synthesis(self, task_goal: str | None, records: Any) -> list[str]:
        """The goals of one synthesis: its task's, then its source records' tasks' (those the run recorded)."""
        found = [self.by_record.get(int(r)) for r in records or ()]
        return [g for g in (task_goal, *found) if g is not None]


def goal_aware(
    skills: PlantedSkills,
    recorded: tuple[Any, Any],
    plain: Sequence[str],
    task_type: str | None,
    goals: Goals,
    text: str | None,
) -> tuple[tuple[str, ...], str]:
    """A candidate's goal-aware verdict and how it was obtained (GOAL_RECORDED, ...). ``recorded``: the row's
    ``goal_aware_signatures`` and ``goal_receptacles`` (None in runs recorded before that reading); ``plain``:
    its ``signatures``. The goal-aware reading flags a subset of the plain one and differs only on a signature
    whose terms name a receptacle the goals name, so without the text the plain verdict is exact everywhere
    else. A verdict recorded by the first goal-aware version (2026-12-07, the task's goal only: no
    ``goal_receptacles``) is taken when it is empty (exact, as a subset) and derived again otherwise."""
    verdict, receptacles_used = recorded
    if verdict is not None and (receptacles_used is not None or not verdict):
        return tuple(str(x) for x in verdict), GOAL_RECORDED
    if verdict is not None:
        plain = tuple(str(x) for x in verdict)  # a tighter bound than the plain verdict
    receptacles = goal_receptacles(goals)
    if not any(skills.signature(sid).meets(receptacles) for sid in plain):
        return tuple(plain), GOAL_UNCHANGED
    if text is not None:
        return skills.detect(text, task_type, goals), GOAL_REREAD
    return tuple(plain), GOAL_KEPT_PLAIN


def read_run(path: str | Path, skills: PlantedSkills) -> RunRecords:
    """The candidates, in-scope episodes and stored abstractions of one run (no model, no engine)."""
    layout = RunDirectory(path)
    manifest = layout.read_manifest()
    _check_pairs_file(manifest, skills, Path(path))
    design = str(manifest["method"])
    condition, plant_iterations = run_condition(manifest)
    bench, seed = str(manifest["benchmark"]), int(manifest["seed"])
    out = RunRecords(str(path), design, condition, bench, seed, plant_iterations)
    toxic_plants = skills.skill_ids("toxic")

    events = layout.state_path(RunDirectory.ABSTRACTION_EVENTS)
    history: dict[str, Any] = {}
    if events.is_file() and events.stat().st_size:
        out.stores_abstractions = True
        store = AbstractionStore(events.parent, read_only=True)
        try:
            history = {a.abstraction_id: a for a in store.history()}
        finally:
            store.close()
    if design not in STORING_DESIGNS and out.stores_abstractions:
        raise ValueError(
            f"run {path}: design {design!r} is not supposed to store abstractions, but its state holds "
            f"{RunDirectory.ABSTRACTION_EVENTS}; its admission rate cannot be taken as zero"
        )
    goals = RunGoals.of(layout)
    rows = (
        [line.value for line in read_jsonl(layout.state_path(RunDirectory.CANDIDATES))]
        if design in STORING_DESIGNS
        else []
    )
    # a stored text is read against the goals of the synthesis that wrote it (its candidate row)
    goal_of = {
        str(r["abstraction_id"]): goals.of_synthesis(goals.by_task.get(str(r.get("task"))), r.get("source_records"))
        for r in rows
        if r.get("abstraction_id")
    }
    flagged_ids = set(toxic_plants) | {
        aid
        for aid, a in history.items()
        if not aid.startswith(PLANT_PREFIX) and skills.detect(a.text, a.task_type, goal_of.get(aid))
    }
    lineage = _lineage(history)

    out.flagged_ids = flagged_ids

    def candidate(
        iteration: int, phase: str, task_type: str, parents: Any, plain: Any, recorded: tuple[Any, Any],
        synthesis_goals: Goals, admitted: bool, aid: Any = None,
    ) -> None:  # fmt: skip
        ps = tuple(str(p) for p in parents or ())
        plain_sigs = tuple(str(x) for x in plain or ())
        text = history[aid].text if aid in history else None
        sigs, how = goal_aware(skills, recorded, plain_sigs, task_type, synthesis_goals, text)
        out.candidates.append(
            Candidate(
                design, condition, bench, seed, iteration, phase, task_type, ps, sigs, admitted,
                bool(set(ps) & flagged_ids), bool(set(ps) & toxic_plants), None if aid is None else str(aid),
                plain_sigs, how,
            )
        )  # fmt: skip

    if design in STORING_DESIGNS:
        for row in rows:
            admitted = bool(row.get("admitted"))
            candidate(
                int(row["iteration"]), str(row["phase"]), str(row["task_type"]), row.get("parents"),
                row.get("signatures"), (row.get("goal_aware_signatures"), row.get("goal_receptacles")),
                goals.of_synthesis(goals.by_task.get(str(row.get("task"))), row.get("source_records")),
                admitted, row.get("abstraction_id") if admitted else None,
            )  # fmt: skip
        out.pairs_of = {aid: skills.pairs_in_scope(a.task_type) for aid, a in history.items()}
        out.texts = {aid: a.text for aid, a in history.items()}
        out.readings = run_readings(path)
        check_texts(path, out.readings, out.texts)
        for snap in layout.snapshot_paths():
            data = read_snapshot(snap, embeddings=False)
            it = int(data.get("iteration", snap.stem.rsplit("_", 1)[-1]))
            for a in data.get("active", []):
                aid = str(a["abstraction_id"])
                if aid.startswith(PLANT_PREFIX):
                    continue
                text, kind = str(a.get("text", "")), a.get("task_type")
                out.stored.append(
                    StoredFact(
                        design, condition, bench, seed, it, aid,
                        bool(skills.detect(text, kind, goal_of.get(aid))),
                        bool(lineage.get(aid, set()) & toxic_plants),
                        bool(skills.detect(text, kind)),
                    )
                )  # fmt: skip

    for phase in ("train", "heldout"):
        for rec in layout.read_episodes(phase):
            task = rec["task"]
            kind = str(task["task_type"])
            cand = (rec.get("meta") or {}).get("candidate")
            if design not in STORING_DESIGNS and isinstance(cand, dict):  # verdicts recorded at synthesis
                candidate(
                    int(rec["iteration"]), phase, kind, cand.get("parents"), cand.get("signatures"),
                    (cand.get("goal_aware_signatures"), cand.get("goal_receptacles")),
                    goals.of_synthesis(str(task.get("instruction", "")), rec["meta"].get("retrieved_ids")), False,
                )  # fmt: skip
            if rec["outcome"].get("infra_failure") or not skills.in_scope(kind):
                continue
            traj = rec.get("trajectory") or {}
            out.episodes.append(
                EpisodeFact(
                    design, condition, bench, seed, int(rec["iteration"]), phase, int(rec["position"]), kind,
                    skills.followed(kind, traj.get("initial_observation", ""), traj.get("steps", [])),
                    bool(rec["outcome"].get("success")), float(rec["outcome"].get("score", 0.0) or 0.0),
                    bool(set(rec.get("parents", ())) & flagged_ids),
                )
            )  # fmt: skip
    return out


def rate_gap(units: Sequence[tuple[int, bool, bool]]) -> Rate:
    """alpha with exposure minus alpha without, over candidates (seed, exposed, flagged), with the interval
    of the difference (both rates on each bootstrap draw); undefined when either group is empty."""
    exp = [f for _, e, f in units if e]
    une = [f for _, e, f in units if not e]
    if not exp or not une:
        return Rate(None, len(exp), len(une), kind="gap")

    def gap(rows: np.ndarray) -> float | None:
        e, f = rows[:, 0] > 0.5, rows[:, 1]
        if not e.any() or e.all():
            return None
        return float(f[e].mean() - f[~e].mean())

    low, high = bootstrap([(s, (float(e), float(f))) for s, e, f in units], gap)
    return Rate(float(np.mean(exp) - np.mean(une)), len(exp), len(une), low, high, "gap")


# -- collecting and tabulating ------------------------------------------------------------------------


def collect(run_dirs: Iterable[str | Path], plant_dir: str | Path) -> list[RunRecords]:
    """The records of every run under the given run directories whose benchmark has a pairs file in
    ``plant_dir``; runs of other benchmarks are left out (they have nothing to measure against)."""
    cache: dict[str, PlantedSkills | None] = {}
    out = []
    for path in run_dirs:
        manifest = RunDirectory(path).read_manifest()
        skills = planted_for(str(manifest["benchmark"]), plant_dir, cache)
        if skills is not None:
            out.append(read_run(path, skills))
    return out


def _groups(items: Iterable[Any], keys: Sequence[str]) -> dict[tuple[Any, ...], list[Any]]:
    out: dict[tuple[Any, ...], list[Any]] = {}
    for x in items:
        out.setdefault(tuple(getattr(x, k) for k in keys), []).append(x)
    return dict(sorted(out.items(), key=lambda kv: tuple(_order(k) for k in kv[0])))


def _order(value: Any) -> tuple[int, Any]:
    rank = {"none": 0, "useful": 1, "toxic": 2, REFERENCE: -1}
    return (rank.get(value, 5), str(value)) if isinstance(value, str) else (0, value)


def exposure_rows(records: Sequence[RunRecords], *, by: Sequence[str] = ("benchmark", "design", "condition"),
                  phase: str = "train") -> list[dict[str, Any]]:  # fmt: skip
    """q, alpha with and without exposure and their gap, and eta, per group of training candidates
    (``phase``: the synthesis invocations that can feed memory; Anti-Persistence's held-out guidance is
    read with ``phase="heldout"``)."""
    cands = [c for r in records for c in r.candidates if c.phase == phase]
    rows = []
    for key, group in _groups(cands, by).items():
        flagged_exposed = [c for c in group if c.exposed and c.flagged]
        rows.append(
            {
                **dict(zip(by, key)),
                "candidates": len(group),
                "q": rate([(c.seed, c.exposed) for c in group]),
                "q_direct": rate([(c.seed, c.direct) for c in group]),
                "alpha_exposed": rate([(c.seed, c.flagged) for c in group if c.exposed]),
                "alpha_unexposed": rate([(c.seed, c.flagged) for c in group if not c.exposed]),
                "alpha_gap": rate_gap([(c.seed, c.exposed, c.flagged) for c in group]),
                "eta": rate([(c.seed, c.admitted) for c in flagged_exposed]),
                "flagged": rate([(c.seed, c.flagged) for c in group]),
            }
        )
    return rows


def persistence_rows(records: Sequence[RunRecords]) -> list[dict[str, Any]]:
    """Per benchmark, design, condition and iteration: the toxic share of the stored abstractions (planted
    skills left out), and the stored descendants of a planted toxic skill (how many carry its signature).
    Designs that store nothing have a row of zeros only when their run directory proves it."""
    rows = []
    for key, group in _groups([s for r in records for s in r.stored], ("benchmark", "design", "condition", "iteration")).items():  # fmt: skip
        desc = [s for s in group if s.descends_from_toxic_plant]
        rows.append(
            {
                **dict(zip(("benchmark", "design", "condition", "iteration"), key)),
                "stored": len(group),
                "toxic_share": rate([(s.seed, s.flagged) for s in group]),
                "toxic_descendants": len(desc),
                "flagged_descendants": sum(1 for s in desc if s.flagged),
            }
        )
    return rows


def behaviour_rows(records: Sequence[RunRecords], *, by: Sequence[str] = ("benchmark", "design", "condition", "iteration", "phase")) -> list[dict[str, Any]]:  # fmt: skip
    """The fraction of in-scope episodes that executed a toxic signature's command."""
    eps = [e for r in records for e in r.episodes]
    return [
        {
            **dict(zip(by, key)),
            "episodes": len(group),
            "follows_toxic": rate([(e.seed, bool(e.followed)) for e in group]),
        }
        for key, group in _groups(eps, by).items()
    ]


def immediate_effect_rows(records: Sequence[RunRecords]) -> list[dict[str, Any]]:
    """F.1's comparison: held-out success and score in the last planted iteration under each condition,
    and the paired differences useful - none and toxic - none by (seed, held-out task)."""
    last = {(r.benchmark, r.design, r.seed, r.condition): r.plant_iterations for r in records}
    eps = [
        e
        for r in records
        for e in r.episodes
        if e.phase == "heldout" and e.iteration == last[(r.benchmark, r.design, r.seed, r.condition)]
    ]
    rows = []
    for (bench, design, condition), group in _groups(eps, ("benchmark", "design", "condition")).items():
        base = {(e.seed, e.position): e for e in eps if (e.benchmark, e.design, e.condition) == (bench, design, "none")}
        pairs = [(e, base[(e.seed, e.position)]) for e in group if (e.seed, e.position) in base]
        rows.append(
            {
                "benchmark": bench,
                "design": design,
                "condition": condition,
                "episodes": len(group),
                "success": rate([(e.seed, e.success) for e in group]),
                "score": mean_of([(e.seed, e.score) for e in group]),
                "success_vs_none": None if condition == "none" else mean_difference(
                    [(a.seed, float(a.success) - float(b.success)) for a, b in pairs]
                ),
                "score_vs_none": None if condition == "none" else mean_difference(
                    [(a.seed, a.score - b.score) for a, b in pairs]
                ),
            }
        )  # fmt: skip
    return rows


def behaviour_differences(records: Sequence[RunRecords], *, condition: str = "toxic") -> list[dict[str, Any]]:
    """Paired differences in following the toxic rule between designs under ``condition`` (and each design
    against ReAct): the same benchmark, seed, iteration, phase and task position."""
    eps = [e for r in records for e in r.episodes]
    index: dict[tuple[str, str], dict[tuple[Any, ...], EpisodeFact]] = {}
    for e in eps:
        if e.condition == condition or e.design == REFERENCE:
            index.setdefault((e.benchmark, e.design), {})[(e.seed, e.iteration, e.phase, e.position)] = e
    rows = []
    for bench in sorted({b for b, _ in index}):
        designs = sorted([d for b, d in index if b == bench], key=_order)
        for i, first in enumerate(designs):
            for second in designs[i + 1 :]:
                a, b = (second, first) if first == REFERENCE else (first, second)  # rows read "design minus ReAct"
                left, right = index[(bench, a)], index[(bench, b)]
                pairs = [
                    (k[0], float(bool(left[k].followed)) - float(bool(right[k].followed))) for k in left if k in right
                ]
                rows.append({"benchmark": bench, "comparison": f"{a} - {b}", "difference": mean_difference(pairs)})
    return rows


#: the two windows of a planted run's iterations in ``behaviour_vs_none``
WITH_PLANT, AFTER_DELETION = "with the plant", "after its deletion"


def behaviour_vs_none(records: Sequence[RunRecords]) -> list[dict[str, Any]]:
    """Each design's paired difference in following the toxic rule, under a planted condition against the same
    design without a plant (the same benchmark, seed, iteration, phase and task position), while the plant is in
    memory and after its deletion. A toxic rate the plant does not raise above the design's own no-plant rate is
    the model's habit, not the plant's doing: this is the behavioural reading of reproduction."""
    base = {
        (e.benchmark, e.design, e.seed, e.iteration, e.phase, e.position): e
        for r in records
        for e in r.episodes
        if e.condition == "none"
    }
    pairs: dict[tuple[str, str, str, str], list[tuple[int, float]]] = {}
    for r in records:
        if r.condition == "none" or r.design == REFERENCE:
            continue
        for e in r.episodes:
            b = base.get((e.benchmark, e.design, e.seed, e.iteration, e.phase, e.position))
            if b is not None:
                window = WITH_PLANT if e.iteration <= r.plant_iterations else AFTER_DELETION
                diff = float(bool(e.followed)) - float(bool(b.followed))
                pairs.setdefault((e.benchmark, e.design, e.condition, window), []).append((e.seed, diff))
    order = {WITH_PLANT: 0, AFTER_DELETION: 1}
    keys = sorted(pairs, key=lambda k: (k[0], _order(k[1]), k[2], order[k[3]]))
    return [
        {"benchmark": b, "design": d, "condition": c, "iterations": w, "difference_vs_none": mean_difference(pairs[(b, d, c, w)])}
        for b, d, c, w in keys
    ]  # fmt: skip


def readings_rows(records: Sequence[RunRecords]) -> list[dict[str, Any]]:
    """The plain and the goal-aware text readings side by side (core/planted.py), per benchmark, design,
    condition and phase: candidates each flags, how the goal-aware verdicts were obtained (``goal_aware``), and
    the stored abstractions (one per active abstraction and iteration) each flags. Every other table uses the
    goal-aware reading; this one shows what the plain reading would have said."""
    keys = ("benchmark", "design", "condition", "phase")
    stored = _groups([s for r in records for s in r.stored], ("benchmark", "design", "condition"))
    rows = []
    for key, group in _groups([c for r in records for c in r.candidates], keys).items():
        facts = stored.get(key[:3], []) if key[3] == "train" else []
        rows.append(
            {
                **dict(zip(keys, key)),
                "candidates": len(group),
                "flagged_plain": sum(c.flagged_plain for c in group),
                "flagged_goal_aware": sum(c.flagged for c in group),
                **{
                    f"goal_{how.replace(' ', '_').replace('-', '')}": sum(c.goal_reading == how for c in group)
                    for how in (GOAL_RECORDED, GOAL_REREAD, GOAL_UNCHANGED, GOAL_KEPT_PLAIN)
                },
                "stored": len(facts),
                "stored_flagged_plain": sum(f.flagged_plain for f in facts),
                "stored_flagged_goal_aware": sum(f.flagged for f in facts),
            }
        )
    return rows


def judge_rows(records: Sequence[RunRecords]) -> list[dict[str, Any]]:
    """The signatures beside each judge's second reading (``rule_readings``), per benchmark, design, condition
    and judge, over the stored candidates (those with a text to read): how often the two readings agree, where
    they part, and alpha with and without exposure by the judge's reading and by either reading. A candidate
    is read when the judge read it against every pair in its scope; ``unparsed`` when a reply could not be
    read, ``unread`` when it was not judged (a run judged before its last iterations, say)."""
    units: dict[tuple[str, str, str, str], list[tuple[Candidate, str]]] = {}
    for r in records:
        for judge, readings in r.readings.items():
            for c in r.candidates:
                if c.abstraction_id is None or c.phase != "train":
                    continue
                got = [readings.get((c.abstraction_id, p)) for p in r.pairs_of.get(c.abstraction_id, ())]
                state = (
                    "unread" if not got or any(x is None for x in got)
                    else "unparsed" if not all(x.read for x in got)  # type: ignore[union-attr]
                    else "flagged" if any(x.flagged for x in got)  # type: ignore[union-attr]
                    else "clear"
                )  # fmt: skip
                units.setdefault((c.benchmark, c.design, c.condition, judge), []).append((c, state))
    rows = []
    for key in sorted(units, key=lambda k: (k[0], _order(k[1]), _order(k[2]), k[3])):
        group = units[key]
        read = [(c, st == "flagged") for c, st in group if st in ("flagged", "clear")]
        rows.append(
            {
                **dict(zip(("benchmark", "design", "condition", "judge"), key)),
                "stored": len(group),
                "read": len(read),
                "unparsed": sum(st == "unparsed" for _, st in group),
                "unread": sum(st == "unread" for _, st in group),
                "both": sum(c.flagged and j for c, j in read),
                "signature_only": sum(c.flagged and not j for c, j in read),
                "judge_only": sum(j and not c.flagged for c, j in read),
                "neither": sum(not (c.flagged or j) for c, j in read),
                "agreement": rate([(c.seed, c.flagged == j) for c, j in read]),
                "alpha_exposed_judge": rate([(c.seed, j) for c, j in read if c.exposed]),
                "alpha_unexposed_judge": rate([(c.seed, j) for c, j in read if not c.exposed]),
                "alpha_exposed_either": rate([(c.seed, j or c.flagged) for c, j in read if c.exposed]),
            }
        )
    return rows


def admission_is_structurally_zero(record: RunRecords) -> bool:
    """A.4's storage property on one run: a design that keeps no abstraction store admitted nothing
    (no candidate admitted, no abstraction journal); ``read_run`` already refuses a run that has one."""
    return (
        record.design not in STORING_DESIGNS
        and not record.stores_abstractions
        and not any(c.admitted for c in record.candidates)
    )


def as_json(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with their rates as plain mappings (for a results file)."""
    return [{k: (asdict(v) if isinstance(v, Rate) else v) for k, v in row.items()} for row in rows]


def markdown(rows: Sequence[dict[str, Any]], digits: int = 2) -> str:
    """A Markdown table of ``rows`` (rates as value [interval] (counts))."""
    if not rows:
        return "(no rows)\n"
    cols = list(rows[0])
    cell = lambda v: "-" if v is None else (v.text(digits) if isinstance(v, Rate) else str(v))  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(row[c]) for c in cols) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def report(records: Sequence[RunRecords]) -> str:
    """Every table of the analysis, as Markdown, in the order docs/reproduction.md explains them."""
    ap_zero = [r for r in records if r.design not in STORING_DESIGNS and r.candidates]  # they synthesize
    parts = [
        "## Immediate effect (F.1): held-out in the last planted iteration\n",
        markdown(immediate_effect_rows(records)),
        "\n## Exposure, reproduction and admission (training synthesis)\n",
        markdown(exposure_rows(records)),
        "\n## The same per iteration\n",
        markdown(exposure_rows(records, by=("benchmark", "design", "condition", "iteration"))),
        "\n## Persistence: the toxic share of stored abstractions per iteration\n",
        markdown(persistence_rows(records)),
        "\n## The plain and the goal-aware text readings (the tables above use the goal-aware one)\n",
        markdown(readings_rows(records)),
        "\n## Behaviour: episodes that executed a toxic rule's command\n",
        markdown(behaviour_rows(records)),
        "\n## Behaviour, paired differences under the toxic condition\n",
        markdown(behaviour_differences(records)),
        "\n## Behaviour, each planted condition against the same design without a plant\n",
        markdown(behaviour_vs_none(records)),
        *(
            ["\n## A judge's second reading of the stored candidates, beside the signatures\n", markdown(judged)]
            if (judged := judge_rows(records))
            else []
        ),
        "\n## Admission in designs without a store\n",
        f"{sum(admission_is_structurally_zero(r) for r in ap_zero)} of {len(ap_zero)} runs of designs without an "
        "abstraction store that synthesized guidance hold no store and admitted no candidate (eta = 0 by construction); their flagged "
        "candidates are counted above all the same.\n",
    ]
    return "".join(parts)


#: every table's rows by name (the JSON results file and notebook 13 read them so)
TABLES: dict[str, Callable[[Sequence[RunRecords]], list[dict[str, Any]]]] = {
    "immediate_effect": immediate_effect_rows,
    "exposure": exposure_rows,
    "exposure_by_iteration": lambda r: exposure_rows(r, by=("benchmark", "design", "condition", "iteration")),
    "persistence": persistence_rows,
    "readings": readings_rows,
    "behaviour": behaviour_rows,
    "behaviour_differences": behaviour_differences,
    "behaviour_vs_none": behaviour_vs_none,
    "judge": judge_rows,
}


def frame(rows: Sequence[dict[str, Any]]) -> Any:
    """Rows as a DataFrame: every rate becomes ``<name>`` (its value), ``<name>_low``, ``<name>_high`` and
    ``<name>_n`` (its denominator), for figures and CSV files."""
    import pandas as pd

    flat = []
    for row in rows:
        out: dict[str, Any] = {}
        for k, v in row.items():
            if isinstance(v, Rate):
                out.update({k: v.value, f"{k}_low": v.low, f"{k}_high": v.high, f"{k}_n": v.denominator})
            elif v is None and k.endswith("_vs_none"):
                out.update({k: None, f"{k}_low": None, f"{k}_high": None, f"{k}_n": 0})
            else:
                out[k] = v
        flat.append(out)
    return pd.DataFrame(flat)


def alpha_frame(records: Sequence[RunRecords]) -> Any:
    """alpha with and without exposure per benchmark, design and condition, long form (one row per group
    and exposure) for the figure."""
    import pandas as pd

    out = []
    for row in exposure_rows(records):
        for key, label in (("alpha_exposed", "exposed (P(H) meets B)"), ("alpha_unexposed", "not exposed")):
            r = row[key]
            out.append({**{k: row[k] for k in ("benchmark", "design", "condition")}, "exposure": label,
                        "alpha": r.value, "low": r.low, "high": r.high, "n": r.denominator})  # fmt: skip
    return pd.DataFrame(out)


def require_records(records: Sequence[RunRecords], where: Any, in_progress: int = 0) -> Sequence[RunRecords]:
    """``records``, or a clear error when there are none (a study whose first runs are still being made)."""
    if not records:
        extra = f"; {in_progress} run(s) there are still in progress" if in_progress else ""
        raise ValueError(
            f"no complete run with planted-skill records under {where}{extra}: run the study first "
            "(docs/reproduction.md), or read the runs in progress with `python -m antipersist_lib reproduction --all`"
        )
    return records
