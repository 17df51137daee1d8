"""Provenance audit of abstraction memory (Appendix A.1 / E.3, Figure 10).

Works after the fact on a run directory (the abstraction store's event log, the per-iteration snapshots and the
held-out episode log) and only reads, so nothing here can influence a run. It labels abstractions by
Definition 1 (eligible, flagged; ineligible ones stay unclassified) and computes the descendant rates alpha_emp
and alpha_0 (an empty group leaves a rate ``None``, never 0).

Definitions: docs/auditing.md, "Provenance audit of abstraction memory". The kit's choices (the "did not
retrieve" group counts only episodes evaluated while s was stored, ``pool="all"`` for every episode; engine
failures left out): docs/choices.md, "Provenance audit".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.memory.abstraction_store import read_snapshot
from antipersist_lib.rundir import RunDirectory

N_MIN = 3
DELTA = 0.05
POOLS = ("available", "all")


@dataclass(frozen=True)
class AbstractionLabel:
    """One stored abstraction's audit row."""

    abstraction_id: str
    parents: tuple[str, ...]
    created_iteration: int
    n_plus: int
    n_minus: int
    y_plus: float | None
    y_minus: float | None
    eligible: bool
    flagged: bool | None  # None = unclassified


@dataclass(frozen=True)
class DescendantRates:
    """alpha_emp and alpha_0 with the counts behind them (the paper gives no counts; we do)."""

    run: str
    variant: str  # the run folder (method, or a named variant such as "persist")
    method: str
    backbone: str
    benchmark: str
    seed: int
    n_abstractions: int  # ever stored
    n_eligible: int
    n_flagged: int
    n_with_flagged_parent: int  # |V| with F = 1
    n_without_flagged_parent: int  # |V| with F = 0
    flagged_with_flagged_parent: int
    flagged_without_flagged_parent: int

    @property
    def alpha_emp(self) -> float | None:
        return _rate(self.flagged_with_flagged_parent, self.n_with_flagged_parent)

    @property
    def alpha_0(self) -> float | None:
        return _rate(self.flagged_without_flagged_parent, self.n_without_flagged_parent)

    @property
    def gap(self) -> float | None:
        a, b = self.alpha_emp, self.alpha_0
        return None if a is None or b is None else a - b

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "alpha_emp": self.alpha_emp, "alpha_0": self.alpha_0, "gap": self.gap}


def _rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def stored_abstractions(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Every abstraction ever added to the run's store (retired ones included), by id."""
    events = RunDirectory(run_dir).state_path(RunDirectory.ABSTRACTION_EVENTS)
    if not events.exists():
        raise FileNotFoundError(
            f"{run_dir}: no abstraction event log at {events.relative_to(run_dir)}; "
            "the provenance audit needs a method that stores abstractions"
        )
    out: dict[str, dict[str, Any]] = {}
    for item in read_jsonl(events):
        ev = item.value
        if ev.get("op") == "add":
            a = ev["abstraction"]
            out[a["abstraction_id"]] = a
    return out


def available_by_iteration(run_dir: Path) -> dict[int, set[str]]:
    """iteration -> ids in the store during that iteration's held-out evaluation (snapshots)."""
    out = {}
    for snap in RunDirectory(run_dir).snapshot_paths():
        data = read_snapshot(snap, embeddings=False)
        out[int(data["iteration"])] = {a["abstraction_id"] for a in data.get("active", [])}
    return out


def label_abstractions(
    abstractions: dict[str, dict[str, Any]],
    episodes: Iterable[dict[str, Any]],
    available: dict[int, set[str]] | None = None,
    *,
    n_min: int = N_MIN,
    delta: float = DELTA,
    pool: str = "available",
) -> list[AbstractionLabel]:
    """Operational labels for every stored abstraction from held-out episodes."""
    if pool not in POOLS:
        raise ValueError(f"pool is {pool!r}, expected one of {POOLS}")
    if pool == "available" and available is None:
        raise ValueError("pool 'available' needs the per-iteration store contents (snapshots)")
    eps = [e for e in episodes if not e["outcome"].get("infra_failure")]
    labels = []
    for sid, a in abstractions.items():
        plus, minus = [], []
        for e in eps:
            y = 1.0 if e["outcome"]["success"] else 0.0
            if sid in (e.get("parents") or ()):
                plus.append(y)
            elif pool == "all" or sid in (available or {}).get(int(e["iteration"]), set()):
                minus.append(y)
        y_plus, y_minus = _mean(plus), _mean(minus)
        eligible = len(plus) >= n_min and len(minus) > 0
        flagged = (y_minus - y_plus >= delta - 1e-12) if eligible else None  # type: ignore[operator]
        labels.append(
            AbstractionLabel(
                sid,
                tuple(a.get("parents") or ()),
                int(a.get("created_iteration", 0)),
                len(plus),
                len(minus),
                y_plus,
                y_minus,
                eligible,
                flagged,
            )
        )
    return labels


def descendant_counts(labels: list[AbstractionLabel]) -> dict[str, int]:
    """Counts for alpha_emp / alpha_0 over V (eligible abstractions; all kit records carry parents)."""
    flagged = {lab.abstraction_id for lab in labels if lab.flagged}
    c = {
        "n_eligible": 0,
        "n_flagged": len(flagged),
        "n_with_flagged_parent": 0,
        "n_without_flagged_parent": 0,
        "flagged_with_flagged_parent": 0,
        "flagged_without_flagged_parent": 0,
    }
    for lab in labels:
        if not lab.eligible:
            continue
        c["n_eligible"] += 1
        if set(lab.parents) & flagged:
            c["n_with_flagged_parent"] += 1
            c["flagged_with_flagged_parent"] += int(bool(lab.flagged))
        else:
            c["n_without_flagged_parent"] += 1
            c["flagged_without_flagged_parent"] += int(bool(lab.flagged))
    return c


def audit_run(
    run_dir: str | Path, *, n_min: int = N_MIN, delta: float = DELTA, pool: str = "available"
) -> tuple[DescendantRates, list[AbstractionLabel]]:
    """Labels and descendant rates for one run directory."""
    run = Path(run_dir)
    man = RunDirectory(run).read_manifest()
    abstractions = stored_abstractions(run)
    episodes = RunDirectory(run).read_episodes("heldout")
    labels = label_abstractions(
        abstractions, episodes, available_by_iteration(run), n_min=n_min, delta=delta, pool=pool
    )
    rates = DescendantRates(
        str(run),
        run.parent.name,
        man["method"],
        man["backbone"],
        man["benchmark"],
        int(man["seed"]),
        len(abstractions),
        **descendant_counts(labels),
    )
    return rates, labels


def audit_runs(run_dirs: Iterable[str | Path], **kw: Any) -> list[DescendantRates]:
    """``audit_run`` over many runs; runs without an abstraction store are skipped."""
    out = []
    for run in run_dirs:
        if RunDirectory(run).state_path(RunDirectory.ABSTRACTION_EVENTS).exists():
            out.append(audit_run(run, **kw)[0])
    return out


def pooled_by_setting(rates: list[DescendantRates]) -> list[dict[str, Any]]:
    """Pool seeds of the same (run folder, backbone, benchmark) by summing counts (rates stay
    undefined when a pooled group is empty)."""
    groups: dict[tuple[str, str, str], list[DescendantRates]] = {}
    for r in rates:
        groups.setdefault((r.variant, r.backbone, r.benchmark), []).append(r)
    out = []
    for (variant, bb, bench), rs in sorted(groups.items()):
        keys = (
            "n_abstractions",
            "n_eligible",
            "n_flagged",
            "n_with_flagged_parent",
            "n_without_flagged_parent",
            "flagged_with_flagged_parent",
            "flagged_without_flagged_parent",
        )
        tot = {k: sum(getattr(r, k) for r in rs) for k in keys}
        a_emp = _rate(tot["flagged_with_flagged_parent"], tot["n_with_flagged_parent"])
        a_0 = _rate(tot["flagged_without_flagged_parent"], tot["n_without_flagged_parent"])
        out.append(
            {
                "variant": variant,
                "method": rs[0].method,
                "backbone": bb,
                "benchmark": bench,
                "seeds": len(rs),
                **tot,
                "alpha_emp": a_emp,
                "alpha_0": a_0,
                "gap": None if a_emp is None or a_0 is None else a_emp - a_0,
            }
        )
    return out
