"""Sections 4.2-4.3: the text's counted claims, Figure 4, and which held-out denominators Tables 1-2's ALFWorld
cells can come from. The claims compare one-decimal cell means, as the paper's sentences compare its printed
table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from antipersist_lib.analysis import paper
from antipersist_lib.analysis.paper_tables import DYNAMICS_FIGURES, MEMORY_CONFIGURATIONS
from antipersist_lib.analysis.results import paper_frame, paper_order, table1
from antipersist_lib.methods import TABLE1_METHODS

#: the agent baselines of Table 1 (the paper's "strongest agent baseline on average" is one of these)
AGENT_BASELINES = ("react", "reflexion", "expel", "autorefine")


def _one_decimal_cells(t1: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(backbone, benchmark) -> {method: mean rounded to one decimal}, settings in the paper's order."""
    if t1 is None or t1.empty:
        return {}
    cells = paper_order(t1[["method", "backbone", "benchmark", "mean"]].dropna(subset=["mean"]))
    out: dict[tuple[str, str], dict[str, float]] = {}
    for r in cells.itertuples(index=False):
        out.setdefault((r.backbone, r.benchmark), {})[r.method] = round(float(r.mean), 1)
    return out


def _missing(
    cells: dict[tuple[str, str], dict[str, float]], settings: list[tuple[str, str]], need: tuple[str, ...]
) -> str:
    """ "" when every setting has every needed method, else "not computed (missing ...)" naming what is absent."""
    if not settings:
        return "not computed (missing settings: none of this run's settings applies)"
    gaps = {m: [s for s in settings if m not in cells[s]] for m in need}
    parts = []
    for m, where in gaps.items():
        if len(where) == len(settings):
            parts.append(m)
        elif where:
            parts.append(f"{m} in " + ", ".join(f"{b}/{k}" for b, k in where))
    return f"not computed (missing {', '.join(parts)})" if parts else ""


def text_claims(t1: pd.DataFrame) -> pd.DataFrame:
    """The counted claims of Sections 4.2-4.3 recounted on a Table 1 frame (``table1(runs)``, or any frame with
    method, backbone, benchmark, mean), one row per claim of ``paper.TEXT_CLAIMS``: claim, sentence, paper (the
    count the paper prints), this_run (the same count on ``t1``), settings (how many settings it is counted over)
    and agrees. Cell means are compared at one decimal, as printed; "higher" is strictly higher.

    Settings are ``t1``'s own: the nine-setting claims count over all of them, the six-setting ones (Figure 2's
    and Figure 4's) over those whose backbone is not Figure 9's (Gemma-4-31B-it). A claim whose methods are
    absent from any of its settings reads "not computed (missing ...)" instead of a count over fewer methods."""
    cells = _one_decimal_cells(t1)
    every = list(cells)
    six = [s for s in every if s[0] not in DYNAMICS_FIGURES["figure9"]]
    ap = "anti_persistence"

    def count(settings: list[tuple[str, str]], need: tuple[str, ...], hit: Any) -> tuple[str, int]:
        miss = _missing(cells, settings, need)
        if miss:
            return miss, len(settings)
        return f"{sum(bool(hit(cells[s])) for s in settings)} of {len(settings)}", len(settings)

    def average(method: str) -> tuple[str, int]:
        miss = _missing(cells, every, (method,))
        if miss:
            return miss, len(every)
        return f"{sum(cells[s][method] for s in every) / len(every):.1f}", len(every)

    def strongest() -> tuple[str, int]:
        miss = _missing(cells, every, AGENT_BASELINES)
        if miss:
            return miss, len(every)
        avg = {m: round(sum(cells[s][m] for s in every) / len(every), 1) for m in AGENT_BASELINES}
        top = max(avg.values())
        return " = ".join(m for m in AGENT_BASELINES if avg[m] == top), len(every)

    def autorefine_vs_abstraction() -> tuple[str, int]:
        need = ("autorefine", "abstraction_memory")
        miss = _missing(cells, six, need)
        if miss:
            return miss, len(six)
        diff = [cells[s]["autorefine"] - cells[s]["abstraction_memory"] for s in six]
        b, e = sum(d > 1e-9 for d in diff), sum(abs(d) <= 1e-9 for d in diff)
        return f"better {b}, equal {e}, worse {len(six) - b - e} of {len(six)}", len(six)

    def beats(other: str) -> Any:
        return lambda c: c[ap] > c[other]

    computed = {
        "best": count(every, tuple(TABLE1_METHODS), lambda c: all(c[ap] > v for m, v in c.items() if m != ap)),
        "beats_trajectory_memory": count(every, (ap, "trajectory_memory"), beats("trajectory_memory")),
        "beats_abstraction_memory": count(every, (ap, "abstraction_memory"), beats("abstraction_memory")),
        "beats_joint_memory": count(every, (ap, "joint_memory"), beats("joint_memory")),
        "average_anti_persistence": average(ap),
        "average_trajectory_memory": average("trajectory_memory"),
        "average_abstraction_memory": average("abstraction_memory"),
        "average_joint_memory": average("joint_memory"),
        "average_reflexion": average("reflexion"),
        "strongest_agent_baseline": strongest(),
        "abstraction_below_trajectory": count(
            every,
            ("abstraction_memory", "trajectory_memory"),
            lambda c: c["abstraction_memory"] < c["trajectory_memory"],
        ),
        "joint_below_trajectory": count(
            every, ("joint_memory", "trajectory_memory"), lambda c: c["joint_memory"] < c["trajectory_memory"]
        ),
        "best_memory_configuration_figure2": count(
            six, MEMORY_CONFIGURATIONS, lambda c: all(c[ap] > c[m] for m in MEMORY_CONFIGURATIONS if m != ap)
        ),
        "autorefine_vs_abstraction": autorefine_vs_abstraction(),
        "beats_autorefine": count(six, (ap, "autorefine"), beats("autorefine")),
    }
    rows = []
    for claim, sentence, stated in paper.TEXT_CLAIMS:
        mine, n = computed[claim]
        agrees = None if mine.startswith("not computed") else mine == stated
        rows.append(
            {"claim": claim, "sentence": sentence, "paper": stated, "this_run": mine, "settings": n, "agrees": agrees}
        )
    return pd.DataFrame(rows)


def figure4_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Figure 4, tidy (source, backbone, benchmark, method, mean, std, seeds): final held-out success of abstraction
    memory, AutoRefine and Anti-Persistence from Table 1, the paper's six settings (Llama-4-Scout and
    Qwen3-Coder-Next) and this run's main runs on every setting whose backbone is not Figure 9's."""
    cols = ["source", "backbone", "benchmark", "method", "mean", "std", "seeds"]
    p = paper_frame(paper.table1())
    p = p[p["method"].isin(paper.FIGURE4_METHODS) & p["backbone"].isin(paper.FIGURE4_BACKBONES)]
    p = p.assign(source="paper", seeds=3)
    mine = table1(runs) if not runs.empty else pd.DataFrame(columns=cols)
    mine = mine[mine["method"].isin(paper.FIGURE4_METHODS) & ~mine["backbone"].isin(DYNAMICS_FIGURES["figure9"])]
    both = pd.concat([p[cols], mine.assign(source="this run")[cols]], ignore_index=True)
    return both.reset_index(drop=True)


def fits_mean_of_seed_scores(value: float, n_tasks: int, seeds: int = 3, decimals: int = 1) -> bool:
    """Whether ``value`` (a printed mean, in %) can be the mean of ``seeds`` scores k/``n_tasks``: some integer
    K in 0..seeds*n_tasks with 100*K/(seeds*n_tasks) rounding to ``value`` at ``decimals`` decimals."""
    total = seeds * n_tasks
    k = round(value * total / 100)
    return any(
        0 <= j <= total and round(100 * j / total, decimals) == round(value, decimals) for j in (k - 1, k, k + 1)
    )


def alfworld_denominator_cells(n_tasks: tuple[int, ...] = (paper.ALFWORLD_HELDOUT, 50)) -> pd.DataFrame:
    """Every ALFWorld cell of the paper's Tables 1 and 2 (24 + 4: Table 2's discard column repeats Table 1's
    Anti-Persistence cells) with, per held-out size n, whether its mean can be the mean of three k/n scores."""
    cells = paper_frame([c for c in paper.table1() + paper.table2() if c.benchmark == "alfworld"])
    for n in n_tasks:
        cells[f"fits_{n}"] = [fits_mean_of_seed_scores(v, n) for v in cells["mean"]]
    return cells


def alfworld_denominator_finding(n_tasks: tuple[int, ...] = (paper.ALFWORLD_HELDOUT, 50)) -> pd.DataFrame:
    """Per held-out size n: how many of Tables 1-2's ALFWorld cells (28) can be means of three k/n scores, and the
    chance that a one-decimal value drawn uniformly from 0.0-100.0 can (n = 134: Table 4's held-out set; n = 50:
    scores in multiples of 2 %). Many more cells than chance fit n = 50, fewer than chance fit n = 134."""
    cells = alfworld_denominator_cells(n_tasks)
    grid = [i / 10 for i in range(1001)]
    rows = []
    for n in n_tasks:
        rows.append(
            {
                "n_tasks": n,
                "cells": len(cells),
                "fit": int(cells[f"fits_{n}"].sum()),
                "share": float(cells[f"fits_{n}"].mean()),
                "chance": sum(fits_mean_of_seed_scores(v, n) for v in grid) / len(grid),
            }
        )
    return pd.DataFrame(rows).set_index("n_tasks")
