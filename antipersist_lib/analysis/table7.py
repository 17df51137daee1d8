"""Table 7's paired tests on this run: Anti-Persistence (or another reference) against each other method of
Table 1, on the final-iteration cell means of the main runs (settings paired, as the paper did) or with the
held-out episodes themselves as the paired units (the same task, seed and iteration under two methods),
which is the test that can see a difference with few settings (one backbone on a CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.analysis import statistics
from antipersist_lib.analysis.results import find_runs, load_manifest, table1
from antipersist_lib.methods import TABLE1_METHODS
from antipersist_lib.rundir import RunDirectory


def task_outcomes(roots: Any, *, base: str | Path | None = None, complete_only: bool = True) -> pd.DataFrame:
    """One row per held-out episode of every main run under ``roots``: method, backbone, benchmark, seed,
    iteration, task, task type, success (0/100) and the engine's score; the units a task-level paired test
    pairs (the same task, seed and iteration under two methods). Roots are read as ``load_iterations`` reads
    them (the first root holding a run wins; runs still in progress left out unless ``complete_only`` is False)."""
    rows = []
    seen: set[tuple[str, str, str, int]] = set()
    for run in find_runs(roots, base=base, complete_only=complete_only):
        man = load_manifest(run)
        identity = (run.parent.name, man["backbone"], man["benchmark"], man["seed"])
        if identity in seen or not (run.parent.name == man["method"] and man["method"] in TABLE1_METHODS):
            continue
        seen.add(identity)
        for r in RunDirectory(run).read_episodes("heldout"):
            rows.append(
                {
                    "method": man["method"],
                    "backbone": man["backbone"],
                    "benchmark": man["benchmark"],
                    "seed": man["seed"],
                    "iteration": r["iteration"],
                    "task": r["task"]["task_id"],
                    "task_type": r["task"].get("task_type"),
                    "success": 100.0 * bool(r["outcome"]["success"]),
                    "score": float(r["outcome"].get("score", 0.0) or 0.0),
                    "infra_failure": bool(r["outcome"].get("infra_failure")),
                }
            )
    return pd.DataFrame(rows)


def paired_by_task(
    outcomes: pd.DataFrame,
    value: str = "score",
    *,
    final_only: bool = True,
    reference: str = "anti_persistence",
    benchmark: str | None = None,
) -> pd.DataFrame | None:
    """Table 7's paired tests with held-out episodes as the paired units: ``reference`` (Anti-Persistence, as in
    the paper; or e.g. ReAct, to ask what each memory design adds) minus each other method on the same
    (backbone, benchmark, seed, iteration, task), on ``value`` ("score" or "success"); each comparison pairs
    the units both of its methods have (column ``n``), so a method still missing runs narrows only its own
    comparison. With few settings (one
    backbone on a CPU) this is the test that can see a difference; units where either episode was an
    infrastructure failure, or a method has no episode, are left out. ``final_only``: only each run's last
    evaluated iteration. ``benchmark``: that benchmark's units only. Scores are on each engine's own scale
    (ScienceWorld 0-100, the others 0-1), so pooling several benchmarks' scores is refused: ask per benchmark
    (``paired_per_benchmark``). None when there is nothing to pair."""
    if outcomes.empty or reference not in set(outcomes["method"]):
        return None
    df = outcomes if benchmark is None else outcomes[outcomes["benchmark"] == benchmark]
    if value == "score" and df["benchmark"].nunique() > 1:
        raise ValueError(
            f"scores of {sorted(df['benchmark'].unique())} are on different scales: pair them per benchmark "
            "(benchmark=..., or paired_per_benchmark)"
        )
    if final_only:
        last = df.groupby(["method", "backbone", "benchmark", "seed"])["iteration"].transform("max")
        df = df[df["iteration"] == last]
    keys = ["backbone", "benchmark", "seed", "iteration", "task"]
    bad = df[df["infra_failure"]][keys].drop_duplicates()
    if not bad.empty:
        df = df.merge(bad, on=keys, how="left", indicator=True)
        df = df[df["_merge"] == "left_only"].drop(columns="_merge")
    if df.empty:
        return None
    wide = df.pivot_table(index=keys, columns="method", values=value, aggfunc="first")
    methods = [m for m in TABLE1_METHODS if m in wide.columns and m != reference]
    if reference not in wide.columns:
        return None
    pairs = {}
    for m in methods:  # each comparison on the units both methods made (a study in progress lacks some runs)
        both = wide[[reference, m]].dropna()
        if len(both) >= 2:
            pairs[m] = (both[reference].tolist(), both[m].tolist())
    if not pairs:
        return None
    return table7_frame(statistics.paired_comparisons(pairs, wilcoxon_method="auto"))


def paired_per_benchmark(
    outcomes: pd.DataFrame, value: str = "score", *, reference: str = "anti_persistence", final_only: bool = True
) -> pd.DataFrame | None:
    """``paired_by_task`` for each benchmark on its own (Holm's family: one benchmark's comparisons), as one
    frame indexed by (benchmark, baseline); None when no benchmark has anything to pair."""
    if outcomes is None or outcomes.empty:
        return None
    frames = {}
    for bench in dict.fromkeys(outcomes["benchmark"]):
        t = paired_by_task(outcomes, value, final_only=final_only, reference=reference, benchmark=bench)
        if t is not None:
            frames[bench] = t
    if not frames:
        return None
    return pd.concat(frames, names=["benchmark"])


def table7_frame(comparisons: list[Any]) -> pd.DataFrame:
    """``statistics.table7`` rows as a frame indexed by baseline (the paper's Table 7 layout)."""
    return pd.DataFrame([c.to_dict() for c in comparisons]).set_index("baseline")


def table7_of_runs(runs: pd.DataFrame, *, decimals: int | None = None) -> pd.DataFrame | None:
    """Table 7's paired tests on this run's own final-iteration means of the main runs (settings =
    backbone/benchmark; Holm's family = the baselines among the paper's seven that this run has).
    Settings where some method has no run are left out. None when there is no Anti-Persistence row
    or fewer than two methods or settings to pair. ``decimals``: None pairs the unrounded means; 1
    pairs the one-decimal means Table 1 prints, as the paper's Table 7 did (``table7_of_runs_both``)."""
    t1 = table1(runs)
    if t1.empty:
        return None
    cells = t1.assign(setting=t1["backbone"] + "/" + t1["benchmark"]).pivot(
        index="method", columns="setting", values="mean"
    )
    cells = cells.loc[[m for m in TABLE1_METHODS if m in cells.index]].dropna(axis=1)
    if "anti_persistence" not in cells.index or len(cells.columns) < 2 or len(cells.index) < 2:
        return None
    return table7_frame(statistics.table7({m: cells.loc[m].tolist() for m in cells.index}, decimals=decimals))


def table7_of_runs_both(runs: pd.DataFrame) -> pd.DataFrame | None:
    """``table7_of_runs`` twice, one above the other (index: means, baseline): "unrounded" and
    "one-decimal" (the cell means as Table 1 prints them, which is what the paper's Table 7 paired)."""
    both = {
        "unrounded": table7_of_runs(runs),
        "one-decimal": table7_of_runs(runs, decimals=1),
    }
    if both["unrounded"] is None:
        return None
    return pd.concat(both, names=["means"])
