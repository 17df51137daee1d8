"""The main job's results: one row per run (its final iteration, wall time and model calls), the mean and sd
over seeds per (benchmark, run) (``seed_summary``), and the tables it writes beside them (``results.csv``,
``summary.csv``, ``results.md``), each naming the backbone that produced it."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import atomic_write_text, read_jsonl
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.main_profile import setting
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.runner.summary import IterationSummary, run_summaries
from antipersist_lib.serving.embedded import EMBEDDER_MODEL, WEAK_MODEL_NOTE


def recorded_summaries(spec: RunSpec) -> list[IterationSummary]:
    """The per-iteration summaries of a finished run, recomputed from its episode logs (no model, no engine)."""
    return run_summaries(RunDirectory(spec.run_dir()))


def run_row(spec: RunSpec, summaries: list[IterationSummary], backbone: str, seconds: float | None) -> dict[str, Any]:
    last = summaries[-1]
    return {
        "backbone": backbone,
        "benchmark": spec.benchmark,
        "run": spec.name,
        "method": spec.method,
        "seed": spec.seed,
        "iterations": len(summaries),
        "heldout_success_final": last.heldout_success,
        "heldout_score_final": last.heldout_score,
        "heldout_n": last.heldout_n,
        "mean_calls_per_task": last.mean_calls,
        "mean_steps": last.mean_steps,
        # an evaluation-only run (train_per_iteration: 0) has no training success: null, not NaN (JSON has none)
        "train_success": None if math.isnan(last.train_success) else last.train_success,
        "seconds": None if seconds is None else round(seconds, 1),
        # the run's model calls (all its sessions) and how many the response cache answered
        **_ledger_counts(spec),
        "run_dir": str(spec.run_dir()),
    }


def _ledger_counts(spec: RunSpec) -> dict[str, int]:
    calls = [x.value for x in read_jsonl(RunDirectory(spec.run_dir()).calls_path) if isinstance(x.value, dict)]
    return {"model_calls": len(calls), "calls_replayed": sum(1 for c in calls if c.get("cached"))}


def recorded_backbone(specs: list[RunSpec]) -> dict[str, Any]:
    """The embedded backbone as the runs' manifests recorded it (one model for the whole profile, checked)."""
    seen: dict[str, dict[str, Any]] = {}
    for spec in specs:
        manifest = RunDirectory(spec.run_dir()).read_manifest()
        described = manifest.get("embedded_backbone")
        if not described:
            raise ValueError(f"{spec.run_dir()}: its manifest records no embedded backbone (not a main-job run)")
        seen[described["model"]["sha256"]] = described
    if len(seen) != 1:
        raise ValueError(f"the runs were made with {len(seen)} different model files: {sorted(seen)}")
    return next(iter(seen.values()))


def model_title(described: dict[str, Any]) -> str:
    """A recorded model's display title (the registry's, else its file name)."""
    from antipersist_lib.serving.models import REGISTRY

    name = described["model"].get("name")
    spec = REGISTRY.get(name) if name else None
    return spec.title if spec is not None else str(described["model"].get("file", name))


def agent_summary(prof: dict[str, Any]) -> str:
    """One line naming the agent settings a reader needs beside the numbers (steps, demonstrations, aids)."""
    agent = prof.get("agent", {}) or {}
    shots = int(agent.get("icl_examples", 0) or 0)
    steps = {b: setting(prof, b, "max_steps", 4) for b in prof.get("benchmarks", [])}
    if len(set(steps.values())) > 1:
        parts = ["steps per episode: " + ", ".join(f"{b} {n}" for b, n in steps.items())]
    else:
        parts = [f"{prof.get('max_steps', 4)} steps per episode"]
    parts.append(f"{shots} expert demonstration(s) per task" if shots else "no demonstrations")
    if agent.get("show_valid_actions"):
        parts.append(f"up to {agent['show_valid_actions']} valid commands listed")
    if agent.get("resample_repeats"):
        aids = [f"{agent.get('repeat_rule', 'no_op')} rule"]
        aids += [name for name in ("repeat_feedback", "resample_unlisted") if agent.get(name)]
        parts.append(f"loop-breaking: {agent['resample_repeats']} resample(s), " + ", ".join(aids))
    for bench, pool in (prof.get("seed_pools") or {}).items():
        parts.append(f"{bench}: memories seeded with {pool['per_type']} expert replay(s) per task type")
    for bench, over in (prof.get("agent_by_benchmark") or {}).items():
        parts.append(f"{bench}: " + ", ".join(f"{k}={v}" for k, v in over.items()))
    parts.append(f"temperature {agent.get('temperature', 0.0)}")
    return "; ".join(parts)


def seed_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (benchmark, run) of the results rows: mean and sample sd over seeds of held-out success
    (%), the engine's score, calls per task and steps, and the runs' summed wall time; in the rows' order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["benchmark"], r["run"]), []).append(r)

    def mean_sd(values: list[float]) -> tuple[float, float | None]:
        m = sum(values) / len(values)
        if len(values) < 2:
            return m, None
        return m, (sum((v - m) ** 2 for v in values) / (len(values) - 1)) ** 0.5

    out = []
    for (bench, run), rs in groups.items():
        success = mean_sd([100 * r["heldout_success_final"] for r in rs])
        score = mean_sd([r["heldout_score_final"] for r in rs])
        secs = [r["seconds"] for r in rs if r["seconds"] is not None]
        out.append(
            {
                "benchmark": bench,
                "run": run,
                "method": rs[0]["method"],
                "seeds": len(rs),
                "heldout_n": "/".join(sorted({str(r["heldout_n"]) for r in rs})),
                "success_mean": success[0],
                "success_sd": success[1],
                "score_mean": score[0],
                "score_sd": score[1],
                "calls_mean": mean_sd([r["mean_calls_per_task"] for r in rs])[0],
                "steps_mean": mean_sd([r["mean_steps"] for r in rs])[0],
                "hours": sum(secs) / 3600 if secs else None,
            }
        )
    return out


def _pm(mean: float, sd: float | None, decimals: int) -> str:
    return f"{mean:.{decimals}f}" + ("" if sd is None else f" ± {sd:.{decimals}f}")


def write_tables(
    out: Path,
    name: str,
    prof: dict[str, Any],
    rows: list[dict[str, Any]],
    described: dict[str, Any],
    display: str,
    wall: float,
    study_s: float,
    elapsed_s: float | None = None,
    n_profile: int | None = None,
) -> None:
    if not rows:  # a study stopped before its first run was complete: no table yet
        return
    with open(out / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    summary = seed_summary(rows)
    with open(out / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(summary[0]))
        w.writeheader()
        w.writerows(summary)
    features = ", ".join(described["llama_cpp_build"]["features"] or [])
    model = described["model"]
    lines = [
        f"# Main job ({name}) on the embedded default: {display}",
        "",
        f"> {WEAK_MODEL_NOTE}",
        "",
        f"Model file `{model['file']}` (sha256 `{model['sha256']}`); llama.cpp build for baseline "
        f"`{described['llama_cpp_build'].get('baseline')}` (compiled features: {features}); agent: {agent_summary(prof)}.",
        "",
    ]
    if n_profile is not None and n_profile > len(rows):
        lines += [
            f"**A study in progress**: {len(rows)} of the profile's {n_profile} runs are complete; the tables "
            "hold those only.",
            "",
        ]
    lines += [
        "Held-out results after the final iteration, mean ± sd over seeds (sd over the seeds' run means; "
        "n: held-out tasks per seed):",
        "",
        "| benchmark | run | seeds | n | held-out success (%) | held-out score | calls/task | steps | wall time (h) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in summary:
        lines.append(
            f"| {c['benchmark']} | {c['run']} | {c['seeds']} | {c['heldout_n']} | "
            f"{_pm(c['success_mean'], c['success_sd'], 1)} | {_pm(c['score_mean'], c['score_sd'], 2)} | "
            f"{c['calls_mean']:.2f} | {c['steps_mean']:.2f} | "
            + ("-" if c["hours"] is None else f"{c['hours']:.2f}")
            + " |"
        )
    lines += [
        "",
        "Each run:",
        "",
        "| benchmark | run | seed | held-out success (final it.) | held-out score | n | calls/task | steps | "
        "calls replayed from the cache | run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['benchmark']} | {r['run']} | {r['seed']} | {100 * r['heldout_success_final']:.1f}% | "
            f"{r['heldout_score_final']:.2f} | {r['heldout_n']} | "
            f"{r['mean_calls_per_task']:.2f} | {r['mean_steps']:.2f} | "
            f"{r['calls_replayed']} of {r['model_calls']} | `{r['run_dir']}` |"
        )
    lines += [
        "",
        "Held-out score is the engine's own: ScienceWorld's 0-100 partial credit (negative when the task was "
        "failed), ALFWorld's 0/1, TextWorldExpress's 0-1 partial credit.",
        "",
        f"Wall time of the runs, all sessions together: {study_s / 3600:.2f} h"
        + (
            f" (the study's elapsed time: {elapsed_s / 3600:.2f} h; runs made side by side overlap)"
            if elapsed_s is not None and elapsed_s < study_s - 1
            else ""
        )
        + f"; of this invocation: {wall / 60:.1f} min (backbone {display}, embedder {EMBEDDER_MODEL}).",
    ]
    atomic_write_text(out / "results.md", "\n".join(lines) + "\n")
