"""Setting-level statistics of Table 7 (Appendix F.3), computed from any Table 1.

For each baseline: the paired differences (Anti-Persistence minus baseline) over the settings,
their mean, a nominal unadjusted 95 % t-interval, a two-sided paired t-test, an exact two-sided
Wilcoxon signed-rank test, Holm's step-down correction over the baselines within each test
family, and the number of settings with a positive (and with a negative) difference. Feed it the paper's one-decimal
cell means (``paper.table1_means()``) or a Table 1 built from this kit's runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Comparison:
    baseline: str
    n: int
    mean_diff: float
    ci_low: float
    ci_high: float
    t_stat: float
    p_t: float
    p_t_holm: float
    w_stat: float
    p_wilcoxon: float
    p_wilcoxon_holm: float
    positive: int
    negative: int

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (monotone, capped at 1), in the input order."""
    p = np.asarray(pvalues, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def printed_means(values: Sequence[float], decimals: int = 1) -> list[float]:
    """Cell means as a table prints them (``f"{v:.1f}"`` read back): the paper's Table 7 paired its
    Table 1's one-decimal means, not the unrounded ones."""
    return [float(f"{float(v):.{decimals}f}") for v in values]


def table7(
    cells: dict[str, Sequence[float]],
    *,
    method: str = "anti_persistence",
    confidence: float = 0.95,
    wilcoxon_method: str = "exact",
    decimals: int | None = None,
) -> list[Comparison]:
    """One Comparison per baseline (every key of ``cells`` except ``method``), settings paired by position.

    ``wilcoxon_method``: "exact" for the paper's few settings; "auto" for many paired units with ties
    (e.g. task-level pairs, where most differences are 0 and scipy's exact distribution does not apply).
    ``decimals``: pair the means rounded as a table prints them (1: the paper's one-decimal Table 1
    means, ``printed_means``); None (the default) pairs them unrounded."""
    if method not in cells:
        raise ValueError(f"no row for {method!r} in the table (rows: {sorted(cells)})")
    if decimals is not None:
        cells = {m: printed_means(v, decimals) for m, v in cells.items()}
    pairs = {b: (cells[method], cells[b]) for b in cells if b != method}
    for b, (ours, other) in pairs.items():
        if len(other) != len(ours):
            raise ValueError(f"{b!r} has {len(other)} settings, {method!r} has {len(ours)}")
    return paired_comparisons(pairs, confidence=confidence, wilcoxon_method=wilcoxon_method)


def paired_comparisons(
    pairs: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    confidence: float = 0.95,
    wilcoxon_method: str = "exact",
) -> list[Comparison]:
    """``table7`` where each baseline brings its own paired units: ``pairs[baseline] = (ours, theirs)``, paired
    by position (e.g. the held-out episodes both methods made, while a study is still missing some runs of
    one method); Holm's correction over the baselines as in ``table7``."""
    rows = []
    for b, (ours_values, other_values) in pairs.items():
        ours = np.asarray(ours_values, dtype=float)
        other = np.asarray(other_values, dtype=float)
        if other.shape != ours.shape:
            raise ValueError(f"{b!r}: {other.size} values to pair with {ours.size}")
        d = ours - other
        n = d.size
        mean = float(d.mean())
        se = float(d.std(ddof=1) / np.sqrt(n))
        half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * se)
        t = stats.ttest_rel(ours, other) if np.any(d != 0) else None  # identical: no difference to test
        w = stats.wilcoxon(d, alternative="two-sided", method=wilcoxon_method) if np.any(d != 0) else None
        rows.append(
            dict(
                baseline=b,
                n=n,
                mean_diff=mean,
                ci_low=mean - half,
                ci_high=mean + half,
                t_stat=float(t.statistic) if t else float("nan"),
                p_t=float(t.pvalue) if t else 1.0,
                w_stat=float(w.statistic) if w else float("nan"),
                p_wilcoxon=float(w.pvalue) if w else 1.0,
                positive=int(np.sum(d > 0)),
                negative=int(np.sum(d < 0)),
            )
        )
    pt = holm([r["p_t"] for r in rows])
    pw = holm([r["p_wilcoxon"] for r in rows])
    return [Comparison(p_t_holm=a, p_wilcoxon_holm=b, **r) for r, a, b in zip(rows, pt, pw)]
