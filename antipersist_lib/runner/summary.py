"""A run's per-iteration summaries (Table 1, Table 6, Figures 2b, 7 and 8), recomputed from its episode records,
and the ``summary.json`` a run writes beside them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.records import MODES, SYNTHESIS_MODES
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.spec import RunSpec


@dataclass
class IterationSummary:
    iteration: int
    heldout_success: float
    heldout_n: int
    mean_steps: float
    mean_calls: float
    mean_execution_calls: float
    mean_synthesis_calls: float
    mean_other_calls: float
    infra_failures: int
    mode_frequencies: dict[str, float]
    synthesis_mode_usage: float | None
    train_success: float
    train_n: int
    train_mode_frequencies: dict[str, float]
    #: mean engine score of the held-out episodes (ScienceWorld's 0-100 partial credit; 1/0 where the engine
    #: has only success): it moves before success does
    heldout_score: float = float("nan")


def mode_fractions(records: list[dict[str, Any]]) -> dict[str, float]:
    """The fraction of ``records`` (episode records) whose method chose each mode; {} when none
    recorded a mode (methods without modes)."""
    modes = [r["meta"].get("mode") for r in records if r["meta"].get("mode")]
    return {m: (modes.count(m) / len(modes)) for m in MODES} if modes else {}


def summarize_iteration(iteration: int, heldout: list[dict[str, Any]], train: list[dict[str, Any]]) -> IterationSummary:
    """Held-out success and cost (Table 1, Table 6), trajectory length (Figure 2b), and mode
    frequencies (Figure 8) / synthesis-mode usage (Figure 7) for one iteration."""

    def mean(xs: list[float]) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    h = [r for r in heldout if r["iteration"] == iteration]
    t = [r for r in train if r["iteration"] == iteration]
    hf = mode_fractions(h)
    return IterationSummary(
        iteration=iteration,
        heldout_success=mean([float(r["outcome"]["success"]) for r in h]),
        heldout_n=len(h),
        mean_steps=mean([r["outcome"]["n_steps"] for r in h]),
        mean_calls=mean([r["calls"]["total"] for r in h]),
        mean_execution_calls=mean([r["calls"]["execution"] for r in h]),
        mean_synthesis_calls=mean([r["calls"]["synthesis"] for r in h]),
        mean_other_calls=mean([r["calls"]["other"] for r in h]),
        infra_failures=sum(1 for r in h if r["outcome"]["infra_failure"]),
        mode_frequencies=hf,
        synthesis_mode_usage=(sum(hf.get(m, 0.0) for m in SYNTHESIS_MODES) if hf else None),
        train_success=mean([float(r["outcome"]["success"]) for r in t]),
        train_n=len(t),
        train_mode_frequencies=mode_fractions(t),
        heldout_score=mean([float(r["outcome"].get("score", 0.0)) for r in h]),
    )


def run_summaries(layout: RunDirectory) -> list[IterationSummary]:
    """Every evaluated iteration's summary, recomputed from the run's episode records (no model, no engine)."""
    train = layout.read_episodes("train")
    held = layout.read_episodes("heldout")
    return [summarize_iteration(i, held, train) for i in sorted({r["iteration"] for r in held})]


def write_summaries(layout: RunDirectory, spec: RunSpec) -> list[IterationSummary]:
    """``run_summaries``, also written to the run's ``summary.json`` (non-finite numbers as null)."""
    out = run_summaries(layout)
    atomic_write_json(
        layout.summary_path,
        {
            "run": str(layout.path),
            "method": spec.method,
            "benchmark": spec.benchmark,
            "backbone": spec.backbone_label,
            "seed": spec.seed,
            "iterations": [_finite(dataclasses.asdict(s)) for s in out],
        },
    )
    return out


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in d.items()}
