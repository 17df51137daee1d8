"""Re-deriving a recorded mode decision from a run directory (``select --run``).

A run records, for every Anti-Persistence episode, the selector's full decision. This module
rebuilds what the selector saw at that moment and decides again:

* the outcome log ``L_k`` as it was then: the first ``n`` entries of ``state/outcome_log.jsonl``
  (the file is append-only), where ``n`` counts the logged training attempts before the episode
  (training) or up to the end of that iteration's training (held-out);
* the task embedding: for a training episode the one stored with its record in
  ``state/trajectories.jsonl``; for a held-out episode it is asked of the run's response cache
  (or given by the caller);
* the hyperparameters from the manifest's ``method_config`` (``heldout_selection`` included: a
  manifest without it is an older run, whose held-out decisions were ``as_training``), the random stream from
  ``selector.decision_rng(seed, phase, iteration, position)``.

Nothing is written: the log is opened read-only. The comparison tolerates last-bit float
differences (``selector.decision_differences``), so a run recorded on another CPU still audits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.core.config import AntiPersistenceConfig, recorded_config
from antipersist_lib.core.selector import PHASES, ModeSelector, decision_differences, decision_rng
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.memory.outcome_log import OutcomeLog
from antipersist_lib.methods.anti_persistence import decide
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
    if phase == "train":
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
) -> DecisionAudit:
    """Re-derive the decision recorded at (phase, iteration, position) of an anti_persistence run.

    The task embedding: ``embedding`` if given; else, for training, the one stored in M_k; else
    (held-out) the run's response cache under ``cache_dir`` answers the embedding request.
    """
    run = Path(run_dir)
    man = RunDirectory(run).read_manifest()
    if man.get("method") != "anti_persistence":
        raise ValueError(f"{run}: decisions are recorded by anti_persistence runs; this one is {man.get('method')!r}")
    cfg = _method_config(man)
    rec = find_episode(run, phase, iteration, position)
    if embedding is None and phase == "train":
        k = rec["meta"]["update_index"]
        stored = [
            x.value
            for x in read_jsonl(RunDirectory(run).state_path(RunDirectory.TRAJECTORIES))
            if x.value.get("record_id") == k
        ]
        if not stored:
            raise ValueError(f"{run}: state/trajectories.jsonl has no record {k} (the episode's update index)")
        embedding = stored[0].get("embedding")
    elif embedding is None:
        if cache_dir is None:
            raise ValueError(
                "a held-out decision needs the task embedding: give the run's response cache (select --cache DIR; "
                "the run's manifest names it as cache_dir when the run recorded one) or an embedding (--embedding FILE)"
            )
        from antipersist_lib.analysis.walkthrough import replay_clients

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
    )
    return DecisionAudit(str(run), phase, iteration, position, n, rec["meta"]["decision"], decision.to_dict())
