"""Mode selection for Anti-Persistence: the local KNN-UCB contextual bandit (Section 3.2, eqs. 2-3,
Algorithm 1; B.3-B.5).

For each task ``ModeSelector.select`` picks one of ``MODES`` from the outcome log ``L_k`` and returns a
``ModeDecision`` naming the branch that fired and every number behind it, so that a recorded decision
can be re-derived and audited without a model. The branches, in order: no embedding (``none``),
round-robin, per-mode warmup, epsilon, the trust test (global-best), local KNN-UCB; a held-out decision
under ``heldout_selection="exploit"`` skips round-robin, warmup and epsilon. The equations as computed,
and every reading where the paper is silent (branch order, ties, the decay anchor, unsupported modes,
held-out decisions), are in docs/choices.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from antipersist_lib import tolerance
from antipersist_lib.memory.outcome_log import OutcomeLog
from antipersist_lib.memory.similarity import top_k
from antipersist_lib.records import HELDOUT, MODES, PHASES

BRANCHES: tuple[str, ...] = (
    "no_embedding",
    "round_robin",
    "warmup",
    "epsilon",
    "global_best",
    "local_ucb",
    "fixed",
    "random",
)
"""``fixed`` and ``random`` are not bandit branches: they mark the fixed-mode and uniformly random
policies of the Figure 6 ablation."""
#: the local branch when some mode has no weight in N: "exclude" (default: compare the supported
#: modes), "fallback" (global-best when any mode is unsupported), "zero" (score it 0 + bonus)
UNSUPPORTED_POLICIES: tuple[str, ...] = ("exclude", "fallback", "zero")
#: how held-out decisions are made: "exploit" (default: no round-robin, warmup or epsilon on the
#: frozen log) or "as_training" (every branch, as in training; runs recorded before the option)
HELDOUT_SELECTIONS: tuple[str, ...] = ("exploit", "as_training")


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


@dataclass(frozen=True)
class SelectorConfig:
    """Bandit hyperparameters; the defaults are the paper's Table 3."""

    neighbourhood: int = 10  # B_hat: top-B_hat outcome-log entries form N
    c: float = 0.5  # UCB coefficient
    gamma: float = 0.998  # recency decay, in (0, 1]
    rho: float = 0.7  # KNN trust threshold on the mean neighbourhood similarity
    warmup_per_mode: int = 3  # W_init
    round_robin_iterations: int = 3
    epsilon: float = 0.1
    unsupported: str = "exclude"  # readings of an unsupported mode: "exclude", "fallback" or "zero"
    heldout_selection: str = "exploit"  # held-out: "exploit" (frozen log, no coverage devices) or "as_training"

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ValueError(f"SelectorConfig.{name} must be {allowed}, got {getattr(self, name)!r}")

        need(_is_int(self.neighbourhood) and self.neighbourhood >= 1, "neighbourhood", "an integer >= 1")
        need(_is_real(self.c) and math.isfinite(self.c) and self.c >= 0, "c", "a finite number >= 0")
        need(_is_real(self.gamma) and 0 < self.gamma <= 1, "gamma", "a number in (0, 1]")
        need(_is_real(self.rho) and -1 <= self.rho <= 1, "rho", "a number in [-1, 1]")
        need(_is_int(self.warmup_per_mode) and self.warmup_per_mode >= 0, "warmup_per_mode", "an integer >= 0")
        need(
            _is_int(self.round_robin_iterations) and self.round_robin_iterations >= 0,
            "round_robin_iterations",
            "an integer >= 0",
        )
        need(_is_real(self.epsilon) and 0 <= self.epsilon <= 1, "epsilon", "a number in [0, 1]")
        need(self.unsupported in UNSUPPORTED_POLICIES, "unsupported", f"one of {UNSUPPORTED_POLICIES}")
        need(self.heldout_selection in HELDOUT_SELECTIONS, "heldout_selection", f"one of {HELDOUT_SELECTIONS}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: a neighbourhood as a decision records it: (log ids, raw cosine similarities)
Recorded = tuple[Sequence[int], Sequence[float]]


def _opt_float(x: float | None) -> float | None:
    return None if x is None else float(x)


@dataclass(frozen=True)
class LocalEstimates:
    """The local KNN-UCB quantities for one task, before any branch override.

    ``neighbours`` are outcome-log indices (= timestamps), most similar first, aligned with
    ``similarities`` (raw cosines) and ``weights``. ``counts``/``estimates``/``bonuses``/``scores``
    are keyed by mode; an estimate is None when the mode has no positive weight in N, and its
    score is then None (``unsupported="exclude"`` or ``"fallback"``) or ``0.0 + bonus`` (``"zero"``). ``best`` is the
    argmax over defined scores (ties to the earliest mode), None when no score is defined.
    """

    neighbours: tuple[int, ...]
    similarities: tuple[float, ...]
    mean_similarity: float | None
    weights: tuple[float, ...]
    counts: dict[str, int]
    estimates: dict[str, float | None]
    bonuses: dict[str, float | None]
    scores: dict[str, float | None]
    best: str | None


@dataclass(frozen=True)
class ModeDecision:
    """The audit record of one mode selection.

    ``branch`` is one of ``BRANCHES`` and ``reason`` says in one sentence why it was taken. The
    neighbourhood fields (``neighbours``, ``similarities``, ``mean_similarity``, ``weights``) are
    filled whenever N was computed (``global_best`` after a failed trust test, ``local_ucb``) and
    empty / None otherwise. ``counts`` holds neighbourhood counts n_mu on ``local_ucb`` and
    log-wide record counts on every other branch. ``estimates`` are the local r_hat on
    ``local_ucb``, the global recency-weighted means on ``global_best``, and None otherwise;
    None always means undefined. ``bonuses`` are set only on ``local_ucb``. ``scores`` are
    estimate + bonus on ``local_ucb`` (None for an excluded unsupported mode; ``0.0 + bonus`` under
    ``unsupported="zero"``) and equal the estimates on ``global_best``. ``epsilon_draw`` is the
    uniform draw compared with epsilon, for every decision that reached the epsilon step.
    """

    mode: str
    branch: str
    reason: str
    neighbours: tuple[int, ...] = ()
    similarities: tuple[float, ...] = ()
    mean_similarity: float | None = None
    weights: tuple[float, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)
    estimates: dict[str, float | None] = field(default_factory=dict)
    bonuses: dict[str, float | None] = field(default_factory=dict)
    scores: dict[str, float | None] = field(default_factory=dict)
    epsilon_draw: float | None = None

    def __post_init__(self) -> None:
        if self.branch not in BRANCHES:
            raise ValueError(f"ModeDecision.branch must be one of {BRANCHES}, got {self.branch!r}")
        if self.mode not in MODES:
            raise ValueError(f"ModeDecision.mode must be one of {MODES}, got {self.mode!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (plain ints, floats, strings, lists; None for undefined values)."""
        return {
            "mode": self.mode,
            "branch": self.branch,
            "reason": self.reason,
            "neighbours": [int(i) for i in self.neighbours],
            "similarities": [float(s) for s in self.similarities],
            "mean_similarity": _opt_float(self.mean_similarity),
            "weights": [float(w) for w in self.weights],
            "counts": {str(m): int(n) for m, n in self.counts.items()},
            "estimates": {str(m): _opt_float(v) for m, v in self.estimates.items()},
            "bonuses": {str(m): _opt_float(v) for m, v in self.bonuses.items()},
            "scores": {str(m): _opt_float(v) for m, v in self.scores.items()},
            "epsilon_draw": _opt_float(self.epsilon_draw),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModeDecision:
        return cls(
            mode=str(d["mode"]),
            branch=str(d["branch"]),
            reason=str(d.get("reason", "")),
            neighbours=tuple(int(i) for i in d.get("neighbours", ())),
            similarities=tuple(float(s) for s in d.get("similarities", ())),
            mean_similarity=_opt_float(d.get("mean_similarity")),
            weights=tuple(float(w) for w in d.get("weights", ())),
            counts={str(m): int(n) for m, n in (d.get("counts") or {}).items()},
            estimates={str(m): _opt_float(v) for m, v in (d.get("estimates") or {}).items()},
            bonuses={str(m): _opt_float(v) for m, v in (d.get("bonuses") or {}).items()},
            scores={str(m): _opt_float(v) for m, v in (d.get("scores") or {}).items()},
            epsilon_draw=_opt_float(d.get("epsilon_draw")),
        )


def _argmax_defined(values: Sequence[float | None]) -> int | None:
    """Index of the largest non-None value; ties go to the earliest index."""
    best: int | None = None
    for i, v in enumerate(values):
        if v is not None and (best is None or v > values[best]):  # type: ignore[operator]
            best = i
    return best


class ModeSelector:
    """The Anti-Persistence mode controller (see the module docstring for the full procedure)."""

    def __init__(self, config: SelectorConfig = SelectorConfig(), modes: Sequence[str] = MODES) -> None:
        if not isinstance(config, SelectorConfig):
            raise TypeError(f"config must be a SelectorConfig, got {type(config).__name__}")
        modes = tuple(modes)
        if not modes:
            raise ValueError("modes must name at least one mode")
        unknown = [m for m in modes if m not in MODES]
        if unknown:
            raise ValueError(f"unknown mode(s) {unknown}; allowed: {MODES}")
        if len(set(modes)) != len(modes):
            raise ValueError(f"modes contains duplicates: {modes}")
        self.config = config
        self.modes: tuple[str, ...] = modes
        # MODES index -> position in self.modes (-1 for a mode this selector does not use)
        self._pos = np.full(len(MODES), -1, dtype=np.int64)
        for j, m in enumerate(modes):
            self._pos[MODES.index(m)] = j
        self._default = "none" if "none" in modes else modes[0]

    # -- helpers ---------------------------------------------------------------------------

    def _log_modes(self, log: OutcomeLog) -> np.ndarray:
        """Position in ``self.modes`` of every log record (-1 for records of other modes)."""
        idx = log.modes
        return self._pos[idx] if idx.size else np.zeros(0, dtype=np.int64)

    def log_counts(self, log: OutcomeLog) -> dict[str, int]:
        """Number of records per selector mode in the whole outcome log."""
        pos = self._log_modes(log)
        counts = np.bincount(pos[pos >= 0], minlength=len(self.modes))
        return {m: int(counts[j]) for j, m in enumerate(self.modes)}

    def _check_embedding(self, log: OutcomeLog, embedding: Any) -> np.ndarray:
        q = np.asarray(embedding, dtype=np.float64).reshape(-1)
        if q.size == 0:
            raise ValueError("task embedding is empty")
        if not np.all(np.isfinite(q)):
            raise ValueError("task embedding contains NaN or infinite values")
        dim = log.matrix.dim
        if dim is not None and q.size != dim:
            raise ValueError(f"task embedding has dimension {q.size}, the outcome log holds dimension {dim}")
        return q

    # -- estimators ------------------------------------------------------------------------

    def global_estimates(self, log: OutcomeLog) -> tuple[dict[str, int], dict[str, float | None], str]:
        """Global-best: per-mode recency-weighted mean reward over the whole log.

        Returns (log-wide counts, estimates with None for modes without records, chosen mode).
        Weights are ``gamma ** (t_last - t_i)``; each mode's weights are anchored at its own latest
        timestamp instead, which leaves every weighted mean unchanged and cannot underflow.
        """
        gamma = self.config.gamma
        k = len(self.modes)
        pos = self._log_modes(log)
        keep = pos >= 0
        pos, t, r = pos[keep], log.timestamps[keep], log.rewards[keep]
        counts = np.bincount(pos, minlength=k)
        last = np.full(k, -1, dtype=np.int64)
        if pos.size:
            np.maximum.at(last, pos, t)
        w = np.power(gamma, (last[pos] - t).astype(np.float64))
        wsum = np.bincount(pos, weights=w, minlength=k)
        rsum = np.bincount(pos, weights=w * r, minlength=k)
        estimates: dict[str, float | None] = {}
        for j, m in enumerate(self.modes):
            estimates[m] = float(rsum[j] / wsum[j]) if counts[j] > 0 and wsum[j] > 0 else None
        best = _argmax_defined([estimates[m] for m in self.modes])
        chosen = self._default if best is None else self.modes[best]
        return {m: int(counts[j]) for j, m in enumerate(self.modes)}, estimates, chosen

    def local_estimates(
        self, log: OutcomeLog, embedding: Any, *, neighbourhood: Recorded | None = None
    ) -> LocalEstimates:
        """Neighbourhood, weights, estimates, bonuses and scores of Algorithm 1 (no overrides).

        Useful on its own for notebooks; ``select`` uses it on the trust and local branches.
        ``neighbourhood`` (log ids, raw cosines) replaces the search when a decision is re-derived
        from its record without the task embedding (held-out decisions of a run without a cache).
        """
        cfg = self.config
        k = len(self.modes)
        if neighbourhood is None:
            q = self._check_embedding(log, embedding)
            sims_all = log.matrix.similarities(q)  # one mat-vec over the entire log
            nb = top_k(sims_all, cfg.neighbourhood)
            sims = sims_all[nb]
        else:
            nb = np.asarray(neighbourhood[0], dtype=np.int64)
            sims = np.asarray(neighbourhood[1], dtype=np.float64)
            if nb.size != sims.size or (nb.size and (nb.min() < 0 or nb.max() >= len(log))):
                raise ValueError(
                    f"a recorded neighbourhood must pair ids of the {len(log)}-entry log with similarities"
                )
        n = int(nb.size)
        if n == 0:
            empty: dict[str, Any] = {m: None for m in self.modes}
            return LocalEstimates(
                (), (), None, (), {m: 0 for m in self.modes}, dict(empty), dict(empty), dict(empty), None
            )

        t = log.timestamps[nb]
        r = log.rewards[nb]
        pos = self._log_modes(log)[nb]
        t_max = int(t.max())
        w = np.maximum(sims, 0.0) * np.power(cfg.gamma, (t_max - t).astype(np.float64))
        keep = pos >= 0
        counts = np.bincount(pos[keep], minlength=k)
        wsum = np.bincount(pos[keep], weights=w[keep], minlength=k)
        rsum = np.bincount(pos[keep], weights=w[keep] * r[keep], minlength=k)
        bonus = cfg.c * np.sqrt(math.log(n) / np.maximum(counts, 1))

        estimates: dict[str, float | None] = {}
        bonuses: dict[str, float | None] = {}
        scores: dict[str, float | None] = {}
        for j, m in enumerate(self.modes):
            est = float(rsum[j] / wsum[j]) if wsum[j] > 0 else None
            estimates[m] = est
            bonuses[m] = float(bonus[j])
            if est is not None:
                scores[m] = est + float(bonus[j])
            elif cfg.unsupported == "zero":
                scores[m] = 0.0 + float(bonus[j])
            else:
                scores[m] = None
        best = _argmax_defined([scores[m] for m in self.modes])
        return LocalEstimates(
            neighbours=tuple(int(i) for i in nb),
            similarities=tuple(float(s) for s in sims),
            mean_similarity=float(np.mean(sims)),
            weights=tuple(float(x) for x in w),
            counts={m: int(counts[j]) for j, m in enumerate(self.modes)},
            estimates=estimates,
            bonuses=bonuses,
            scores=scores,
            best=None if best is None else self.modes[best],
        )

    def fixed(self, mode: str, embedding: Any = None, reason: str | None = None) -> ModeDecision:
        """A decision imposed from outside the bandit (fixed-mode ablations of Figure 6)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        none_est: dict[str, float | None] = {m: None for m in self.modes}
        return ModeDecision(
            mode=mode,
            branch="fixed",
            reason=reason or f"Mode '{mode}' is fixed by the configuration (no bandit selection).",
            estimates=dict(none_est),
            bonuses=dict(none_est),
            scores=dict(none_est),
        )

    def random_policy(self, embedding: Any, rng: np.random.Generator) -> ModeDecision:
        """The random-policy ablation of Figure 6: a uniformly random mode for every task."""
        mode = self.modes[int(rng.integers(len(self.modes)))]
        none_est: dict[str, float | None] = {m: None for m in self.modes}
        return ModeDecision(
            mode=mode,
            branch="random",
            reason="Uniformly random mode (random-policy ablation).",
            estimates=dict(none_est),
            bonuses=dict(none_est),
            scores=dict(none_est),
        )

    # -- the decision ----------------------------------------------------------------------

    def select(
        self,
        log: OutcomeLog,
        embedding: np.ndarray | Sequence[float] | None,
        *,
        iteration: int,
        position: int,
        rng: np.random.Generator,
        phase: str = "train",
        neighbourhood: Recorded | None = None,
    ) -> ModeDecision:
        """Choose the mode for one task; ``iteration`` is 1-based, ``position`` 0-based.

        ``phase`` ("train" or "heldout") matters only with ``heldout_selection="exploit"``: a
        held-out decision then skips round-robin, warmup and epsilon (module docstring).
        ``neighbourhood``: see ``local_estimates``; with it, ``embedding`` may be None (audits only).
        """
        cfg = self.config
        if not _is_int(iteration) or iteration < 1:
            raise ValueError(f"iteration must be an integer >= 1, got {iteration!r}")
        if not _is_int(position) or position < 0:
            raise ValueError(f"position must be an integer >= 0, got {position!r}")
        if phase not in PHASES:
            raise ValueError(f"phase is {phase!r}, expected one of {PHASES}")
        decision = self._select(log, embedding, iteration, position, rng, phase, neighbourhood)
        if phase == HELDOUT:
            how = (
                "no round-robin, warmup or epsilon on the frozen log"
                if cfg.heldout_selection == "exploit"
                else "every training branch applies"
            )
            decision = replace(
                decision, reason=f"Held-out, heldout_selection={cfg.heldout_selection!r} ({how}): {decision.reason}"
            )
        return decision

    def _select(
        self,
        log: OutcomeLog,
        embedding: np.ndarray | Sequence[float] | None,
        iteration: int,
        position: int,
        rng: np.random.Generator,
        phase: str,
        neighbourhood: Recorded | None = None,
    ) -> ModeDecision:
        cfg = self.config
        exploit = phase == HELDOUT and cfg.heldout_selection == "exploit"
        none_est = {m: None for m in self.modes}

        # 1. embedding failure (B.3)
        if embedding is None and neighbourhood is None:
            return ModeDecision(
                mode=self._default,
                branch="no_embedding",
                reason=f"The task has no embedding (embedding call failed), so the controller defaults to '{self._default}'.",
                counts=self.log_counts(log),
                estimates=dict(none_est),
                bonuses=dict(none_est),
                scores=dict(none_est),
            )
        if neighbourhood is None:
            self._check_embedding(log, embedding)
        if exploit:  # held-out on the frozen log: straight to the trust test (steps 5-6)
            return self._trust_then_ucb(log, embedding, None, neighbourhood)

        # 2. round-robin over the first iterations
        if iteration <= cfg.round_robin_iterations:
            mode = self.modes[position % len(self.modes)]
            return ModeDecision(
                mode=mode,
                branch="round_robin",
                reason=(
                    f"Iteration {iteration} <= {cfg.round_robin_iterations} round-robin iterations: "
                    f"position {position} mod {len(self.modes)} selects '{mode}'."
                ),
                counts=self.log_counts(log),
                estimates=dict(none_est),
                bonuses=dict(none_est),
                scores=dict(none_est),
            )

        # 3. per-mode warmup, log-wide counts, fewest first
        counts = self.log_counts(log)
        fewest = min(self.modes, key=lambda m: counts[m])  # min keeps the first of equal keys
        if counts[fewest] < cfg.warmup_per_mode:
            return ModeDecision(
                mode=fewest,
                branch="warmup",
                reason=(
                    f"Per-mode warmup: '{fewest}' has {counts[fewest]} < {cfg.warmup_per_mode} records "
                    f"in the outcome log, the fewest of any mode."
                ),
                counts=counts,
                estimates=dict(none_est),
                bonuses=dict(none_est),
                scores=dict(none_est),
            )

        # 4. epsilon-greedy: exactly one uniform draw per decision reaching this step
        u = float(rng.random())
        if u < cfg.epsilon:
            mode = self.modes[int(rng.integers(len(self.modes)))]
            return ModeDecision(
                mode=mode,
                branch="epsilon",
                reason=f"Exploration: draw {u:.4f} < epsilon {cfg.epsilon}, uniformly random mode '{mode}'.",
                counts=counts,
                estimates=dict(none_est),
                bonuses=dict(none_est),
                scores=dict(none_est),
                epsilon_draw=u,
            )

        return self._trust_then_ucb(log, embedding, u, neighbourhood)

    def _trust_then_ucb(
        self, log: OutcomeLog, embedding: Any, u: float | None, neighbourhood: Recorded | None = None
    ) -> ModeDecision:
        """Steps 5-6: the trust test, then local KNN-UCB or the global-best fallback; ``u`` is
        the epsilon draw that preceded them (None when none was made)."""
        cfg = self.config
        # 5. neighbourhood and trust test
        if len(log) == 0:
            return self._global_decision(log, None, u, "The outcome log is empty")
        local = self.local_estimates(log, embedding, neighbourhood=neighbourhood)
        if local.mean_similarity is None:
            raise ValueError(
                "the recorded neighbourhood is empty, but the log is not: the decision cannot be re-derived"
            )
        if local.mean_similarity < cfg.rho:
            return self._global_decision(
                log,
                local,
                u,
                f"Mean neighbourhood similarity {local.mean_similarity:.4f} < rho {cfg.rho} (untrusted neighbourhood)",
            )
        if local.best is None:
            return self._global_decision(
                log, local, u, "No mode has positive weight in the neighbourhood (no local estimate is defined)"
            )
        missing = [m for m in self.modes if local.estimates[m] is None]
        if missing and cfg.unsupported == "fallback":
            return self._global_decision(
                log,
                local,
                u,
                f"Mode(s) {missing} have no positive weight in the neighbourhood (unsupported='fallback')",
            )

        # 6. local KNN-UCB
        mode = local.best
        return ModeDecision(
            mode=mode,
            branch="local_ucb",
            reason=(
                f"Trusted neighbourhood of {len(local.neighbours)} (mean similarity {local.mean_similarity:.4f} >= rho "
                f"{cfg.rho}): '{mode}' has the highest UCB score {local.scores[mode]:.4f}."
            ),
            neighbours=local.neighbours,
            similarities=local.similarities,
            mean_similarity=local.mean_similarity,
            weights=local.weights,
            counts=local.counts,
            estimates=local.estimates,
            bonuses=local.bonuses,
            scores=local.scores,
            epsilon_draw=u,
        )

    def _global_decision(
        self, log: OutcomeLog, local: LocalEstimates | None, u: float | None, why: str
    ) -> ModeDecision:
        counts, estimates, mode = self.global_estimates(log)
        if all(v is None for v in estimates.values()):
            tail = f"no mode has a logged record, so global-best defaults to '{mode}'."
        else:
            tail = f"global-best picks '{mode}' with recency-weighted mean reward {estimates[mode]:.4f} over the whole log."
        return ModeDecision(
            mode=mode,
            branch="global_best",
            reason=f"{why}; {tail}",
            neighbours=local.neighbours if local else (),
            similarities=local.similarities if local else (),
            mean_similarity=local.mean_similarity if local else None,
            weights=local.weights if local else (),
            counts=counts,
            estimates=estimates,
            bonuses={m: None for m in self.modes},
            scores=dict(estimates),
            epsilon_draw=u,
        )


def decision_rng(seed: int, phase: str, iteration: int, position: int) -> np.random.Generator:
    """The random stream of one decision: ``default_rng([seed, phase index, iteration, position])``.

    The method draws from it when it selects, and the audit API re-creates it from the same four
    values, so every recorded decision (an epsilon draw included) can be re-derived later.
    """
    if phase not in PHASES:
        raise ValueError(f"phase is {phase!r}, expected one of {PHASES}")
    for name, v in (("seed", seed), ("iteration", iteration), ("position", position)):
        if not _is_int(v) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    return np.random.default_rng([int(seed), PHASES.index(phase), int(iteration), int(position)])


def select_mode(
    log: OutcomeLog,
    embedding: np.ndarray | Sequence[float] | None,
    *,
    iteration: int,
    position: int,
    seed: int = 0,
    phase: str = "train",
    config: SelectorConfig = SelectorConfig(),
    modes: Sequence[str] = MODES,
) -> ModeDecision:
    """Choose a mode in one call, reproducibly: the audit API.

    The random stream is ``decision_rng(seed, phase, iteration, position)``, exactly the one the
    method uses, so the same (log, embedding, seed, phase, iteration, position, config) always
    gives the decision the run recorded.
    """
    rng = decision_rng(seed, phase, iteration, position)
    return ModeSelector(config, modes).select(
        log, embedding, iteration=iteration, position=position, rng=rng, phase=phase
    )


def decision_differences(recorded: dict[str, Any], recomputed: dict[str, Any]) -> list[str]:
    """Where a recomputed decision (``ModeDecision.to_dict()``) differs from a recorded one.

    The chosen mode, the branch, the neighbour ids and the counts must be equal; floats
    (similarities, weights, estimates, bonuses, scores, epsilon draw) may differ by rounding
    (``tolerance.REL_TOL``), as they do between CPUs. Neighbours whose similarities tie within
    that tolerance may come in either order. The ``reason`` sentence is derived text and is not
    compared.
    """
    a = {k: v for k, v in recorded.items() if k != "reason"}
    b = {k: v for k, v in recomputed.items() if k != "reason"}
    ids_a, ids_b = list(a.get("neighbours") or []), list(b.get("neighbours") or [])
    if ids_a != ids_b and sorted(ids_a) == sorted(ids_b) and len(set(ids_a)) == len(ids_a):
        order = [ids_b.index(i) for i in ids_a]  # align the recomputed neighbours with the recorded order
        b = dict(b, neighbours=ids_a)
        for key in ("similarities", "weights"):
            if len(b.get(key) or []) == len(order):
                b[key] = [b[key][j] for j in order]
    return tolerance.differences(a, b)


__all__ = [
    "BRANCHES",
    "HELDOUT_SELECTIONS",
    "UNSUPPORTED_POLICIES",
    "LocalEstimates",
    "ModeDecision",
    "ModeSelector",
    "SelectorConfig",
    "Recorded",
    "decision_differences",
    "decision_rng",
    "select_mode",
]
