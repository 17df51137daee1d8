"""Re-deriving a recorded mode decision from a run directory (``select --run``).

A run records the selector's full decision for every Anti-Persistence episode. This module rebuilds what the
selector saw then (the outcome log's prefix, the task embedding, the manifest's ``method_config`` with
``heldout_selection``, the stream ``selector.decision_rng(seed, phase, iteration, position)``) and decides again.
Nothing is written: the log is opened read-only. Floats are compared within last-bit differences
(``selector.decision_differences``), so a run recorded on another CPU still audits.

How each input is rebuilt, the command line and ``--sensitivity``: docs/auditing.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from antipersist_lib.core.config import AntiPersistenceConfig, recorded_config
from antipersist_lib.core.selector import (
    UNSUPPORTED_POLICIES,
    ModeSelector,
    decision_differences,
    decision_rng,
)
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.memory.outcome_log import OutcomeLog
from antipersist_lib.memory.trajectory_store import TASK_FILTERS, MemoryRecord, TrajectoryStore
from antipersist_lib.methods.anti_persistence import decide
from antipersist_lib.paths import repo_root
from antipersist_lib.records import PHASES, TRAIN
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.serving.embeddings import embed_text


@dataclass
class DecisionAudit:
    """A recorded decision beside the one re-derived from the run's files."""

    run_dir: str
    phase: str
    iteration: int
    position: int
    log_entries: int  # |L_k| the selector saw
    recorded: dict[str, Any]
    recomputed: dict[str, Any]

    @property
    def differences(self) -> list[str]:
        return decision_differences(self.recorded, self.recomputed)

    @property
    def reproduces(self) -> bool:
        return not self.differences

    def verdict(self) -> str:
        """One line: whether the decision reproduces, and what it was."""
        where = f"{self.phase} iteration {self.iteration}, position {self.position} ({self.log_entries} log entries)"
        rec = self.recorded
        if self.reproduces:
            return f"reproduces: {where}: mode {rec.get('mode')} by {rec.get('branch')}, as recorded"
        return f"DIFFERS: {where}: recorded {rec.get('mode')} by {rec.get('branch')}; differing: {self.differences}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "phase": self.phase,
            "iteration": self.iteration,
            "position": self.position,
            "log_entries": self.log_entries,
            "reproduces": self.reproduces,
            "differences": self.differences,
            "recorded": self.recorded,
            "recomputed": self.recomputed,
        }


def _episodes(run: Path, phase: str) -> list[dict[str, Any]]:
    return RunDirectory(run).read_episodes(phase)


def find_episode(run: Path, phase: str, iteration: int, position: int) -> dict[str, Any]:
    if phase not in PHASES:
        raise ValueError(f"phase is {phase!r}, expected one of {PHASES}")
    eps = _episodes(run, phase)
    found = [r for r in eps if r["iteration"] == iteration and r["position"] == position]
    if not found:
        have = sorted({(r["iteration"], r["position"]) for r in eps})
        raise ValueError(
            f"{run}: no {phase} episode at iteration {iteration}, position {position}; recorded: {have[:40]}"
        )
    if "decision" not in found[0].get("meta", {}):
        raise ValueError(
            f"{run}: the {phase} episode at iteration {iteration}, position {position} carries no selector "
            "decision (an infrastructure failure, or not an anti_persistence run)"
        )
    return found[0]


def log_entries_seen(run: Path, phase: str, iteration: int, position: int) -> int:
    """How many outcome-log entries existed when the decision was made."""
    train = _episodes(run, "train")
    if phase == TRAIN:
        return sum(
            1 for r in train if (r["iteration"], r["position"]) < (iteration, position) and r["meta"].get("logged")
        )
    return sum(1 for r in train if r["iteration"] <= iteration and r["meta"].get("logged"))


def _method_config(man: dict[str, Any]) -> AntiPersistenceConfig:
    """The run's configuration: its recorded ``method_config`` (older runs: ``method_params``);
    names this version does not know are left out, parameters added since the run was recorded take
    the value it ran with (``config.LEGACY_PARAMS``: a manifest without ``heldout_selection`` made its
    held-out decisions ``as_training``), Table 3 fills the rest."""
    return recorded_config(man.get("method_config") or man.get("method_params") or {})


def run_config(run_dir: str | Path) -> tuple[AntiPersistenceConfig, int]:
    """The configuration and seed an anti_persistence run was recorded with (for ``select --log``)."""
    man = RunDirectory(Path(run_dir)).read_manifest()
    if man.get("method") != "anti_persistence":
        raise ValueError(
            f"{run_dir}: decisions are recorded by anti_persistence runs; this one is {man.get('method')!r}"
        )
    return _method_config(man), int(man["seed"])


def audit_decision(
    run_dir: str | Path,
    *,
    phase: str,
    iteration: int,
    position: int,
    embedding: Any = None,
    cache_dir: str | Path | None = None,
    config: AntiPersistenceConfig | None = None,
    neighbourhood_from_record: bool = False,
) -> DecisionAudit:
    """Re-derive the decision recorded at (phase, iteration, position) of an anti_persistence run.

    The task embedding: ``embedding`` if given; else, for training, the one stored in M_k; else
    (held-out) the run's response cache under ``cache_dir`` answers the embedding request; else,
    with ``neighbourhood_from_record``, the decision's recorded neighbourhood (ids and cosines)
    stands in for the search (valid while B-hat is the recorded one). ``config`` replaces the
    recorded configuration (a reading's sensitivity); None decides as the run did.
    """
    run = Path(run_dir)
    man = RunDirectory(run).read_manifest()
    if man.get("method") != "anti_persistence":
        raise ValueError(f"{run}: decisions are recorded by anti_persistence runs; this one is {man.get('method')!r}")
    cfg = _method_config(man) if config is None else config
    rec = find_episode(run, phase, iteration, position)
    recorded_nb = None
    if embedding is None and phase == TRAIN:
        k = rec["meta"]["update_index"]
        stored = [
            x.value
            for x in read_jsonl(RunDirectory(run).state_path(RunDirectory.TRAJECTORIES))
            if x.value.get("record_id") == k
        ]
        if not stored:
            raise ValueError(f"{run}: state/trajectories.jsonl has no record {k} (the episode's update index)")
        embedding = stored[0].get("embedding")
    elif embedding is None and cache_dir is None and neighbourhood_from_record:
        d = rec["meta"]["decision"]
        if d.get("branch") != "no_embedding":
            recorded_nb = (d.get("neighbours") or [], d.get("similarities") or [])
    elif embedding is None:
        if cache_dir is None:
            raise ValueError(
                "a held-out decision needs the task embedding: give the run's response cache (select --cache DIR; "
                "the run's manifest names it as cache_dir when the run recorded one) or an embedding (--embedding FILE)"
            )
        from antipersist_lib.runner.replay import replay_clients

        _, embedder = replay_clients(run, cache_dir)
        embedding = embedder.embed(
            embed_text(rec["task"]["instruction"], rec["trajectory"]["initial_observation"], cfg.embed_prefix_chars)
        )
    n = log_entries_seen(run, phase, iteration, position)
    full = OutcomeLog(RunDirectory(run).state_path(RunDirectory.OUTCOME_LOG), read_only=True)
    if len(full) < n:
        raise ValueError(
            f"{run}: state/outcome_log.jsonl has {len(full)} entries, fewer than the {n} the episode log implies"
        )
    decision = decide(
        ModeSelector(cfg.selector),
        full.head(n),
        None if embedding is None else np.asarray(embedding, dtype=np.float64),
        iteration=iteration,
        position=position,
        rng=decision_rng(int(man["seed"]), phase, iteration, position),
        policy=cfg.policy,
        fixed_mode=cfg.fixed_mode,
        phase=phase,
        neighbourhood=recorded_nb,
    )
    return DecisionAudit(str(run), phase, iteration, position, n, rec["meta"]["decision"], decision.to_dict())


#: the open readings a run's mode decisions can be re-derived under: SelectorConfig field -> its
#: values. ``task_filter`` is not one: the bandit's neighbourhood searches the whole outcome log
#: (B.3), so the task-type granularity changes what is retrieved, never which mode is chosen.
MODE_READINGS: dict[str, tuple[str, ...]] = {"unsupported": UNSUPPORTED_POLICIES}


@dataclass
class ReadingCount:
    """How many of a run's recorded decisions of one phase pick another mode under one reading."""

    reading: str
    value: str
    phase: str
    decisions: int
    changed: int
    changed_at: list[tuple[int, int]]  # (iteration, position) of each changed decision
    branch_changed: int = 0  # decisions taken by another branch (the mode may still agree)


@dataclass
class SensitivityReport:
    """Every recorded decision of a run re-derived under each value of each open reading.

    Each decision is re-derived on the log the run actually had (a per-decision counterfactual,
    not a replay of the run: a changed mode would have changed later logs too). ``reproduced``
    counts the decisions that re-derive exactly as recorded under the run's own configuration;
    a count under the recorded value is 0 changes whenever all of them reproduce.
    """

    run_dir: str
    recorded: dict[str, str]  # reading -> the value the run was recorded with
    decisions: dict[str, int]  # phase -> decisions with a recorded selector decision
    reproduced: dict[str, int]
    counts: list[ReadingCount]
    #: training retrievals under each ``task_filter`` (``retrieval_sensitivity``; no mode changes)
    retrieval: list[ReadingCount] = field(default_factory=list)

    def lines(self) -> list[str]:
        """One line per reading value and phase: changed / total."""
        out = []
        for c in self.counts:
            mark = " (recorded)" if self.recorded.get(c.reading) == c.value else ""
            out.append(
                f"{c.reading}={c.value}{mark} {c.phase}: {c.changed}/{c.decisions} decisions change mode "
                f"({c.branch_changed} change branch)"
            )
        for c in self.retrieval:
            mark = " (recorded)" if self.recorded.get(c.reading) == c.value else ""
            out.append(f"{c.reading}={c.value}{mark} {c.phase}: {c.changed}/{c.decisions} retrieved sets change")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "recorded": dict(self.recorded),
            "decisions": dict(self.decisions),
            "reproduced": dict(self.reproduced),
            "counts": [{**vars(c), "changed_at": [list(x) for x in c.changed_at]} for c in self.counts],
            "retrieval": [{**vars(c), "changed_at": [list(x) for x in c.changed_at]} for c in self.retrieval],
        }


def reading_sensitivity(
    run_dir: str | Path,
    *,
    readings: dict[str, tuple[str, ...]] | None = None,
    cache_dir: str | Path | None = None,
    task_filters: tuple[str, ...] = TASK_FILTERS,
) -> SensitivityReport:
    """Re-derive every recorded decision of an anti_persistence run under each value of each open
    reading (default ``MODE_READINGS``) and count, per phase, the decisions whose mode changes.

    No model is called: training embeddings come from M_k; held-out ones from ``cache_dir`` when
    given, else the decision's recorded neighbourhood stands in (``audit_decision``). Each of
    ``task_filters`` adds the count of training retrievals it changes (``retrieval_sensitivity``).
    """
    run = Path(run_dir)
    readings = MODE_READINGS if readings is None else readings
    base = run_config(run)[0]
    recorded = {name: str(getattr(base.selector, name)) for name in readings}
    decisions: dict[str, int] = {}
    reproduced: dict[str, int] = {}
    counts: list[ReadingCount] = []
    for phase in PHASES:
        eps = [r for r in _episodes(run, phase) if "decision" in r.get("meta", {})]
        decisions[phase] = len(eps)
        where = [(int(r["iteration"]), int(r["position"])) for r in eps]
        kw = {"phase": phase, "cache_dir": cache_dir, "neighbourhood_from_record": True}
        reproduced[phase] = sum(audit_decision(run, iteration=i, position=p, **kw).reproduces for i, p in where)
        for name, values in readings.items():
            for value in values:
                cfg = replace(base, selector=replace(base.selector, **{name: value}))
                changed, branches = [], 0
                for (i, p), r in zip(where, eps):
                    a = audit_decision(run, iteration=i, position=p, config=cfg, **kw)
                    if a.recomputed["mode"] != r["meta"]["decision"]["mode"]:
                        changed.append((i, p))
                    branches += a.recomputed["branch"] != r["meta"]["decision"]["branch"]
                counts.append(ReadingCount(name, value, phase, len(eps), len(changed), changed, branches))
    recorded["task_filter"] = base.task_filter
    retrieval = [retrieval_sensitivity(run, f) for f in task_filters]
    return SensitivityReport(str(run), recorded, decisions, reproduced, counts, retrieval)


def retrieval_sensitivity(run_dir: str | Path, task_filter: str) -> ReadingCount:
    """How many training retrievals of an anti_persistence run change under another task-type
    granularity (``task_filter``): each episode's M_k is rebuilt from ``state/trajectories.jsonl``
    and retrieved from with the recorded mode and the stored embedding, once under the run's
    filter and once under ``task_filter``; ``changed`` counts differing record sets. Held-out
    retrievals are left out (their embeddings are not kept in the run)."""
    run = Path(run_dir)
    cfg = run_config(run)[0]
    records = [
        MemoryRecord.from_dict(x.value) for x in read_jsonl(RunDirectory(run).state_path(RunDirectory.TRAJECTORIES))
    ]
    stores = {f: TrajectoryStore(task_filter=f) for f in {cfg.task_filter, task_filter}}
    eps = sorted(
        (r for r in _episodes(run, "train") if "decision" in r.get("meta", {})), key=lambda r: r["meta"]["update_index"]
    )
    changed, added = [], 0
    for r in eps:
        k = r["meta"]["update_index"]
        while added < len(records) and records[added].record_id < k:
            m = records[added]
            for store in stores.values():
                store.add(m.task, m.trajectory, m.outcome, embedding=m.embedding, iteration=m.iteration, mode=m.mode)
            added += 1
        own = [m for m in records if m.record_id == k]
        if not own or own[0].embedding is None:
            continue  # no embedding: nothing is retrieved under any filter
        emb, task = np.asarray(own[0].embedding), own[0].task
        got = {
            f: [
                x.record.record_id
                for x in s.retrieve(emb, r["meta"]["mode"], task, budget=cfg.budget, contrast=cfg.contrast)
            ]
            for f, s in stores.items()
        }
        if got[cfg.task_filter] != got[task_filter]:
            changed.append((int(r["iteration"]), int(r["position"])))
    return ReadingCount("task_filter", task_filter, "train", len(eps), len(changed), changed)


def sensitivity_table(runs_root: str | Path) -> pd.DataFrame:
    """``reading_sensitivity`` of every anti_persistence run under ``runs_root`` (relative paths are
    read from the repository root) that kept its state, one row per run, reading, value and phase."""
    root = Path(runs_root)
    root = root if root.is_absolute() else repo_root() / root
    rows = []
    for man in sorted(root.rglob("manifest.json")):
        run = man.parent
        if json.loads(man.read_text()).get("method") != "anti_persistence":
            continue
        if not RunDirectory(run).state_path(RunDirectory.TRAJECTORIES).is_file():
            continue  # a fixture without state/: nothing to re-derive from
        report = reading_sensitivity(run)
        for what, counts in (("mode", report.counts), ("retrieved set", report.retrieval)):
            for c in counts:
                recorded = " (recorded)" if report.recorded.get(c.reading) == c.value else ""
                rows.append(
                    {
                        "run": str(run.relative_to(root)),
                        "reading": c.reading,
                        "value": c.value + recorded,
                        "phase": c.phase,
                        "what": what,
                        "changed": c.changed,
                        "of": c.decisions,
                        "branch changed": c.branch_changed,
                    }
                )
    return pd.DataFrame(rows)
