"""Hand-computed checks of the mode selector (paper Section 3.2, Algorithm 1, B.3-B.5).

Embeddings are 2-d unit vectors with easy cosines against the query q = [1, 0]:
A = [1, 0] (sim 1), B = [0.8, 0.6] (sim 0.8), C = [0.6, 0.8] (sim 0.6), D = [0, 1] (sim 0),
NEG = [-0.6, 0.8] (sim -0.6). The log stores float32 rows, so cosines are compared with a
relative tolerance of 1e-6. Rewards come from cost_adjusted_reward(y, kappa, 0.05):
none success 1.0, none failure 0.0, synthesis success 0.95, synthesis failure -0.05.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from antipersist_lib.core.selector import (
    BRANCHES,
    ModeDecision,
    ModeSelector,
    SelectorConfig,
    select_mode,
)
from antipersist_lib.memory.outcome_log import OutcomeLog, cost_adjusted_reward
from antipersist_lib.records import MODES

A = [1.0, 0.0]
B = [0.8, 0.6]
C = [0.6, 0.8]
D = [0.0, 1.0]
NEG = [-0.6, 0.8]
Q = np.array([1.0, 0.0])

# no warmup, no exploration: isolates the trust test and the local / global branches
PLAIN = dict(warmup_per_mode=0, epsilon=0.0)
AFTER_RR = 4  # first iteration after the 3 round-robin iterations


def approx(x):
    return pytest.approx(x, rel=1e-6, abs=1e-9)


def add(log: OutcomeLog, emb, mode: str, success: bool) -> None:
    kappa = 0 if mode == "none" else 1
    log.append(
        embedding=emb,
        mode=mode,
        reward=cost_adjusted_reward(int(success), kappa, 0.05),
        raw_success=success,
        task_type="alfworld",
        task_id=len(log),
        instruction=f"task {len(log)}",
    )


def make_log(entries) -> OutcomeLog:
    log = OutcomeLog(None)
    for emb, mode, success in entries:
        add(log, emb, mode, success)
    return log


def decide(log, emb=Q, *, iteration=AFTER_RR, position=0, seed=0, **cfg) -> ModeDecision:
    return select_mode(log, emb, iteration=iteration, position=position, seed=seed, config=SelectorConfig(**cfg))


def full_log(n_per_mode: int = 3) -> OutcomeLog:
    """n records of every mode, all at embedding A (so a query at A trusts the neighbourhood)."""
    return make_log([(A, m, True) for _ in range(n_per_mode) for m in MODES])


# The main local example (6 entries, q = A):
#   t  emb  mode        y  r      sim
#   0  A    none        1  1.0    1
#   1  A    none        1  1.0    1
#   2  B    imitation   1  0.95   0.8
#   3  C    strategic   0  -0.05  0.6
#   4  A    none        0  0.0    1
#   5  B    imitation   0  -0.05  0.8
# mean sim = 5.2 / 6 = 0.866667
LOCAL = [
    (A, "none", True),
    (A, "none", True),
    (B, "imitation", True),
    (C, "strategic", False),
    (A, "none", False),
    (B, "imitation", False),
]


# --------------------------------------------------------------------------------------------
# branches


def test_branches_constant():
    assert BRANCHES == (
        "no_embedding",
        "round_robin",
        "warmup",
        "epsilon",
        "global_best",
        "local_ucb",
        "fixed",
        "random",
    )


def test_fixed_decision_is_marked_and_validated():
    sel = ModeSelector()
    d = sel.fixed("corrective")
    assert d.mode == "corrective" and d.branch == "fixed"
    assert all(v is None for v in d.scores.values())
    with pytest.raises(ValueError, match="mode must be one of"):
        sel.fixed("reflect")


def test_no_embedding_defaults_to_none_before_everything_else():
    log = full_log()
    for it in (1, 2, 3, 4, 10):  # even during round-robin
        d = decide(log, None, iteration=it, position=1)
        assert d.mode == "none"
        assert d.branch == "no_embedding"
        assert "embedding" in d.reason
        assert d.epsilon_draw is None
    # also with an empty log and warmup pending
    d = decide(OutcomeLog(None), None, iteration=5)
    assert (d.mode, d.branch) == ("none", "no_embedding")


def test_round_robin_cycles_through_all_modes_by_position():
    log = OutcomeLog(None)  # round-robin does not look at the log
    for it in (1, 2, 3):
        chosen = [decide(log, iteration=it, position=p).mode for p in range(8)]
        assert chosen == ["none", "imitation", "strategic", "corrective"] * 2
        d = decide(log, iteration=it, position=6)
        assert d.branch == "round_robin"
        assert d.epsilon_draw is None  # no randomness consumed
    # iteration 4 is past the default 3 round-robin iterations: warmup takes over
    assert decide(log, iteration=4, position=1).branch == "warmup"
    # a config without round-robin skips straight on
    assert decide(log, iteration=1, position=1, round_robin_iterations=0).branch == "warmup"


def test_warmup_picks_least_used_mode_with_log_wide_counts():
    # log counts: none 3, imitation 3, strategic 2, corrective 3 -> strategic (2 < 3)
    entries = [(D, m, True) for m in ("none", "imitation", "corrective") for _ in range(3)]
    entries += [(D, "strategic", False)] * 2
    d = decide(make_log(entries))
    assert (d.mode, d.branch) == ("strategic", "warmup")
    assert d.counts == {"none": 3, "imitation": 3, "strategic": 2, "corrective": 3}
    assert d.epsilon_draw is None


def test_warmup_tie_breaks_to_earliest_mode():
    # none 3, imitation 1, strategic 3, corrective 1: imitation and corrective tie -> imitation
    entries = [(A, "none", True)] * 3 + [(A, "strategic", True)] * 3
    entries += [(A, "imitation", True), (A, "corrective", False)]
    d = decide(make_log(entries))
    assert (d.mode, d.branch) == ("imitation", "warmup")
    # empty log: all four tie at 0 -> none
    d = decide(OutcomeLog(None))
    assert (d.mode, d.branch) == ("none", "warmup")
    assert d.counts == {m: 0 for m in MODES}


def test_warmup_done_when_every_mode_has_enough_records():
    d = decide(full_log(3), epsilon=0.0)
    assert d.branch == "local_ucb"
    d = decide(full_log(2), epsilon=0.0, warmup_per_mode=2)
    assert d.branch == "local_ucb"
    assert decide(full_log(2), epsilon=0.0, warmup_per_mode=3).branch == "warmup"


def test_epsilon_one_always_explores_with_reproducible_draws():
    log = full_log()
    for pos in range(6):
        d = decide(log, position=pos, seed=11, epsilon=1.0)
        assert d.branch == "epsilon"
        # replicate the documented stream: rng([seed, phase index, iteration, position]); u, then integers(4)
        rng = np.random.default_rng([11, 0, AFTER_RR, pos])
        u = rng.random()
        j = int(rng.integers(4))
        assert d.epsilon_draw == u
        assert d.mode == MODES[j]
        assert all(v is None for v in d.scores.values())


def test_epsilon_zero_never_explores_but_still_draws():
    log = full_log()
    for pos in range(6):
        d = decide(log, position=pos, epsilon=0.0)
        assert d.branch == "local_ucb"
        assert d.epsilon_draw == np.random.default_rng([0, 0, AFTER_RR, pos]).random()
        assert 0.0 <= d.epsilon_draw < 1.0


def test_epsilon_comes_after_warmup():
    d = decide(OutcomeLog(None), epsilon=1.0)  # warmup pending
    assert d.branch == "warmup"


def test_global_best_when_mean_similarity_below_rho():
    # q = A; neighbours: t0 at B (0.8), t1 at D (0), t2 at D (0): mean 0.8/3 = 0.2667 < 0.7
    log = make_log([(B, "imitation", True), (D, "none", True), (D, "none", False)])
    d = decide(log, **PLAIN)
    assert d.branch == "global_best"
    assert "rho" in d.reason
    assert d.mean_similarity == approx(0.8 / 3)
    assert d.neighbours == (0, 1, 2)  # neighbourhood is reported although not trusted
    # global (gamma = 0.998, t_last = 2): none: w1 = 0.998, w2 = 1 -> (0.998*1 + 1*0) / 1.998
    assert d.estimates["none"] == approx(0.998 / 1.998)  # 0.499499
    assert d.estimates["imitation"] == approx(0.95)  # single record
    assert d.estimates["strategic"] is None and d.estimates["corrective"] is None
    assert d.mode == "imitation"
    assert d.counts == {"none": 2, "imitation": 1, "strategic": 0, "corrective": 0}
    assert all(v is None for v in d.bonuses.values())
    assert d.scores == d.estimates


def test_local_ucb_branch_reported():
    d = decide(make_log(LOCAL), gamma=1.0, **PLAIN)
    assert d.branch == "local_ucb"
    assert "UCB" in d.reason


# --------------------------------------------------------------------------------------------
# the trust threshold


def test_rho_boundary_equal_is_trusted_just_below_falls_back():
    # q = B = [0.8, 0.6]; log at A (sim 0.8) and D (sim 0.6): mean 0.7 up to float32 rounding
    log = make_log([(A, "none", True), (D, "imitation", True)])
    q = np.array(B)
    sims = log.matrix.similarities(q)  # the library's cosine (not the selector), to get the float
    m = float(np.mean(np.sort(sims)[::-1]))
    assert m == pytest.approx(0.7, abs=1e-6)
    d = decide(log, q, rho=m, **PLAIN)
    assert d.branch == "local_ucb"
    assert d.mean_similarity == m
    d = decide(log, q, rho=float(np.nextafter(m, 2.0)), **PLAIN)
    assert d.branch == "global_best"
    # clearly on either side of the default 0.7
    assert decide(log, q, rho=0.69, **PLAIN).branch == "local_ucb"
    assert decide(log, q, rho=0.71, **PLAIN).branch == "global_best"


# --------------------------------------------------------------------------------------------
# local KNN-UCB numbers


def test_local_ucb_hand_computed_with_decay():
    # gamma = 0.5, c = 0.5, t_max = 5, weights w_i = sim_i * 0.5**(5 - t_i):
    #   w0 = 1 * 1/32 = 0.03125   w1 = 1 * 1/16 = 0.0625   w2 = 0.8 * 1/8 = 0.1
    #   w3 = 0.6 * 1/4 = 0.15     w4 = 1 * 1/2 = 0.5       w5 = 0.8 * 1 = 0.8
    # none:      W = 0.59375, sum w r = 0.03125 + 0.0625 = 0.09375  -> 3/19 = 0.157895, n = 3
    # imitation: W = 0.9, sum w r = 0.1*0.95 - 0.8*0.05 = 0.055    -> 0.061111, n = 2
    # strategic: W = 0.15, r = -0.05                                 -> -0.05, n = 1
    # corrective: absent -> undefined (excluded)
    # bonus = 0.5 * sqrt(ln 6 / max(n,1)), ln 6 = 1.7917595:
    #   n=3: 0.5*sqrt(0.5972532) = 0.3864105; n=2: 0.5*sqrt(0.8958797) = 0.4732546;
    #   n=1 (and n=0): 0.5*sqrt(1.7917595) = 0.6692830
    # scores: none 0.5443053, imitation 0.5343657, strategic 0.6192830 -> strategic
    d = decide(make_log(LOCAL), gamma=0.5, c=0.5, rho=0.7, **PLAIN)
    assert d.branch == "local_ucb"
    # neighbours most similar first, ties by earlier index
    assert d.neighbours == (0, 1, 4, 2, 5, 3)
    assert d.similarities == tuple(approx(s) for s in (1, 1, 1, 0.8, 0.8, 0.6))
    assert d.mean_similarity == approx(5.2 / 6)
    assert d.weights == tuple(approx(w) for w in (0.03125, 0.0625, 0.5, 0.1, 0.8, 0.15))
    assert d.counts == {"none": 3, "imitation": 2, "strategic": 1, "corrective": 0}
    assert d.estimates["none"] == approx(3 / 19)
    assert d.estimates["imitation"] == approx(0.055 / 0.9)
    assert d.estimates["strategic"] == approx(-0.05)
    assert d.estimates["corrective"] is None
    b3 = 0.5 * math.sqrt(math.log(6) / 3)
    b2 = 0.5 * math.sqrt(math.log(6) / 2)
    b1 = 0.5 * math.sqrt(math.log(6))
    assert (b3, b2, b1) == (approx(0.3864105), approx(0.4732546), approx(0.6692830))
    assert d.bonuses == {"none": approx(b3), "imitation": approx(b2), "strategic": approx(b1), "corrective": approx(b1)}
    assert d.scores["none"] == approx(0.5443053)
    assert d.scores["imitation"] == approx(0.5343657)
    assert d.scores["strategic"] == approx(0.6192830)
    assert d.scores["corrective"] is None
    assert d.mode == "strategic"


def test_gamma_changes_the_choice():
    # gamma = 1: weights are the sims.
    #   none: W = 3, sum = 2 -> 0.666667;  imitation: W = 1.6, sum = 0.76 - 0.04 -> 0.45
    #   strategic: -0.05.  scores: none 0.666667 + 0.386411 = 1.053077,
    #   imitation 0.45 + 0.473255 = 0.923255, strategic -0.05 + 0.669283 = 0.619283 -> none
    d1 = decide(make_log(LOCAL), gamma=1.0, **PLAIN)
    assert d1.estimates["none"] == approx(2 / 3)
    assert d1.estimates["imitation"] == approx(0.45)
    assert d1.scores["none"] == approx(1.0530772)
    assert d1.mode == "none"
    d05 = decide(make_log(LOCAL), gamma=0.5, **PLAIN)
    assert d05.mode == "strategic"  # see test_local_ucb_hand_computed_with_decay


def test_bonus_is_exactly_zero_with_one_neighbour():
    log = make_log([(A, "imitation", True)])
    d = decide(log, **PLAIN)
    assert d.branch == "local_ucb"
    assert d.neighbours == (0,)
    assert all(b == 0.0 for b in d.bonuses.values())  # ln 1 = 0
    assert d.scores == {"none": None, "imitation": 0.95, "strategic": None, "corrective": None}
    assert d.mode == "imitation"


def test_neighbourhood_is_top_bhat_with_stable_ties():
    # sims: t0 C 0.6, t1 A 1, t2 A 1, t3 B 0.8 -> top-2 = (1, 2)
    log = make_log([(C, "none", True), (A, "imitation", True), (A, "strategic", False), (B, "none", False)])
    d = decide(log, neighbourhood=2, gamma=1.0, **PLAIN)
    assert d.neighbours == (1, 2)
    # imitation 0.95 + 0.5*sqrt(ln2) = 0.95 + 0.416277; strategic -0.05 + 0.416277
    assert d.scores["imitation"] == approx(0.95 + 0.5 * math.sqrt(math.log(2)))
    assert d.counts == {"none": 0, "imitation": 1, "strategic": 1, "corrective": 0}
    assert d.mode == "imitation"


def test_decay_anchored_at_t_max_unaffected_by_entries_outside_the_neighbourhood():
    cfg = dict(neighbourhood=6, gamma=0.5, **PLAIN)
    base = decide(make_log(LOCAL), **cfg)
    # append 5 far-away entries (sim 0 < 0.6): they are newer but never enter N
    far = [(D, "corrective", True)] * 5
    after = decide(make_log(LOCAL + far), **cfg)
    # prepend them: every neighbour's timestamp shifts by +5
    before = decide(make_log(far + LOCAL), **cfg)
    for d in (after, before):
        assert d.branch == "local_ucb"
        assert d.mode == base.mode == "strategic"
        assert d.estimates == {m: (None if v is None else approx(v)) for m, v in base.estimates.items()}
        assert d.weights == tuple(approx(w) for w in base.weights)
        assert d.scores == {m: (None if v is None else approx(v)) for m, v in base.scores.items()}
    assert after.neighbours == base.neighbours
    assert before.neighbours == tuple(i + 5 for i in base.neighbours)


def test_negative_similarity_neighbours_get_zero_weight():
    # q = A, gamma = 1, rho = 0.3:
    #   t0 A   imitation fail  r -0.05 sim 1
    #   t1 NEG imitation succ  r  0.95 sim -0.6 -> weight 0
    #   t2 A   none succ       r  1.0  sim 1
    #   t3 A   none fail       r  0.0  sim 1
    #   t4 NEG strategic succ  r  0.95 sim -0.6 -> weight 0 -> strategic undefined
    # mean sim = (3 - 1.2) / 5 = 0.36 >= rho = 0.3 (trusted)
    # imitation: W = 1 -> -0.05 (the negative neighbour's 0.95 is ignored), n = 2
    # none: W = 2 -> 0.5, n = 2; bonus(n=2) = 0.5*sqrt(ln5/2) = 0.5*sqrt(0.8047190) = 0.4485306
    # scores: none 0.9485306, imitation 0.3985306, strategic None, corrective None -> none
    log = make_log(
        [
            (A, "imitation", False),
            (NEG, "imitation", True),
            (A, "none", True),
            (A, "none", False),
            (NEG, "strategic", True),
        ]
    )
    d = decide(log, gamma=1.0, rho=0.3, **PLAIN)
    assert d.branch == "local_ucb"
    assert d.mean_similarity == approx(0.36)
    assert d.neighbours == (0, 2, 3, 1, 4)
    assert d.similarities[3:] == (approx(-0.6), approx(-0.6))
    assert d.weights[3:] == (0.0, 0.0)
    assert d.counts == {"none": 2, "imitation": 2, "strategic": 1, "corrective": 0}
    assert d.estimates["imitation"] == approx(-0.05)
    assert d.estimates["none"] == approx(0.5)
    assert d.estimates["strategic"] is None
    assert d.scores["none"] == approx(0.9485306)
    assert d.scores["imitation"] == approx(0.3985306)
    assert d.scores["strategic"] is None
    assert d.mode == "none"


def test_unsupported_modes_excluded_by_default_vs_zero():
    # From the decayed example: corrective is absent (undefined). Excluded -> strategic (0.619283).
    # With "zero": corrective scores 0 + 0.669283 = 0.669283 > 0.619283 -> corrective.
    excl = decide(make_log(LOCAL), gamma=0.5, **PLAIN)
    zero = decide(make_log(LOCAL), gamma=0.5, unsupported="zero", **PLAIN)
    assert excl.mode == "strategic" and excl.scores["corrective"] is None
    assert zero.branch == "local_ucb"
    assert zero.estimates["corrective"] is None  # still undefined; only its score is filled
    assert zero.scores["corrective"] == approx(0.6692830)
    assert zero.mode == "corrective"


def test_no_supported_mode_falls_back_to_global():
    # only negative-similarity neighbours; rho = -1 trusts them, but every weight is 0
    log = make_log([(NEG, "imitation", True), (NEG, "none", False)])
    d = decide(log, rho=-1.0, gamma=1.0, **PLAIN)
    assert d.branch == "global_best"
    assert "positive weight" in d.reason
    # global: imitation 0.95, none 0.0 -> imitation
    assert d.mode == "imitation"
    # under "zero" both are 0 + 0.5*sqrt(ln2): tie -> none, on the local branch
    z = decide(log, rho=-1.0, gamma=1.0, unsupported="zero", **PLAIN)
    assert (z.branch, z.mode) == ("local_ucb", "none")


def test_local_score_tie_goes_to_earliest_mode():
    # two identical entries for strategic and imitation: equal estimates and bonuses
    log = make_log([(A, "strategic", True), (A, "imitation", True)])
    d = decide(log, **PLAIN)
    assert d.scores["imitation"] == d.scores["strategic"]
    assert d.mode == "imitation"


# --------------------------------------------------------------------------------------------
# global best


def test_global_best_hand_computed_recency_weighted():
    # all entries at D: sim 0 to q = A -> untrusted. gamma = 0.5, t_last = 4, w = 0.5**(4 - t):
    #   t0 none 1.0 (1/16)  t1 none 1.0 (1/8)  t2 imitation -0.05 (1/4)
    #   t3 imitation 0.95 (1/2)  t4 none 0.0 (1)
    # none:      (1/16 + 1/8) / (1/16 + 1/8 + 1) = 0.1875 / 1.1875 = 3/19 = 0.157895
    # imitation: (-0.0125 + 0.475) / 0.75 = 0.616667 -> imitation
    # (with gamma = 1 the plain means are none 2/3, imitation 0.45 -> none)
    entries = [
        (D, "none", True),
        (D, "none", True),
        (D, "imitation", False),
        (D, "imitation", True),
        (D, "none", False),
    ]
    d = decide(make_log(entries), gamma=0.5, **PLAIN)
    assert d.branch == "global_best"
    assert d.estimates == {
        "none": approx(3 / 19),
        "imitation": approx(0.4625 / 0.75),
        "strategic": None,
        "corrective": None,
    }
    assert d.counts == {"none": 3, "imitation": 2, "strategic": 0, "corrective": 0}
    assert d.mode == "imitation"
    d1 = decide(make_log(entries), gamma=1.0, **PLAIN)
    assert d1.estimates["none"] == approx(2 / 3) and d1.estimates["imitation"] == approx(0.45)
    assert d1.mode == "none"


def test_global_best_tie_goes_to_earliest_mode():
    log = make_log([(D, "strategic", True), (D, "imitation", True)])  # both 0.95 with gamma = 1
    d = decide(log, gamma=1.0, **PLAIN)
    assert d.branch == "global_best"
    assert d.mode == "imitation"


def test_empty_log_global_best_is_none():
    d = decide(OutcomeLog(None), **PLAIN)
    assert (d.mode, d.branch) == ("none", "global_best")
    assert "empty" in d.reason
    assert d.neighbours == () and d.mean_similarity is None
    assert d.estimates == {m: None for m in MODES}
    assert d.counts == {m: 0 for m in MODES}


# --------------------------------------------------------------------------------------------
# determinism, API, validation, serialisation


def test_select_mode_deterministic_and_position_dependent():
    log = full_log()
    a = select_mode(log, Q, iteration=5, position=3, seed=7)
    b = select_mode(log, Q, iteration=5, position=3, seed=7)
    assert a == b
    assert a.epsilon_draw == np.random.default_rng([7, 0, 5, 3]).random()  # phase "train" has index 0
    as_training = SelectorConfig(heldout_selection="as_training")  # held-out draws epsilon only then
    held = select_mode(log, Q, iteration=5, position=3, seed=7, phase="heldout", config=as_training)
    assert held.epsilon_draw == np.random.default_rng([7, 1, 5, 3]).random() != a.epsilon_draw
    with pytest.raises(ValueError, match="phase"):
        select_mode(log, Q, iteration=5, position=3, seed=7, phase="test")
    cfg = SelectorConfig(epsilon=1.0)
    modes = {select_mode(log, Q, iteration=5, position=p, seed=7, config=cfg).mode for p in range(20)}
    assert len(modes) > 1
    draws = {select_mode(log, Q, iteration=5, position=p, seed=7).epsilon_draw for p in range(5)}
    assert len(draws) == 5


def test_mode_selector_with_explicit_rng_matches_select_mode():
    log = full_log()
    sel = ModeSelector(SelectorConfig(epsilon=0.5))
    for p in range(5):
        d = sel.select(log, Q, iteration=4, position=p, rng=np.random.default_rng([0, 0, 4, p]))
        assert d == select_mode(log, Q, iteration=4, position=p, config=SelectorConfig(epsilon=0.5))


def test_local_estimates_helper_matches_local_branch():
    sel = ModeSelector(SelectorConfig(gamma=0.5))
    le = sel.local_estimates(make_log(LOCAL), Q)
    assert le.best == "strategic"
    assert le.scores["strategic"] == approx(0.6192830)
    empty = sel.local_estimates(OutcomeLog(None), Q)
    assert empty.neighbours == () and empty.best is None and empty.mean_similarity is None


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(gamma=0), "gamma"),
        (dict(gamma=1.5), "gamma"),
        (dict(rho=2), "rho"),
        (dict(rho=-1.5), "rho"),
        (dict(neighbourhood=0), "neighbourhood"),
        (dict(neighbourhood=2.5), "neighbourhood"),
        (dict(neighbourhood=True), "neighbourhood"),
        (dict(epsilon=-0.1), "epsilon"),
        (dict(epsilon=1.1), "epsilon"),
        (dict(c=-1), "c"),
        (dict(c=float("inf")), "c"),
        (dict(warmup_per_mode=-1), "warmup_per_mode"),
        (dict(round_robin_iterations=-1), "round_robin_iterations"),
        (dict(unsupported="bogus"), "unsupported"),
        (dict(heldout_selection="greedy"), "heldout_selection"),
    ],
)
def test_config_validation_names_the_field(kwargs, name):
    with pytest.raises(ValueError, match=rf"SelectorConfig\.{name} must be"):
        SelectorConfig(**kwargs)


def test_config_defaults_are_table_3():
    cfg = SelectorConfig()
    assert (cfg.neighbourhood, cfg.c, cfg.gamma, cfg.rho) == (10, 0.5, 0.998, 0.7)
    assert (cfg.warmup_per_mode, cfg.round_robin_iterations, cfg.epsilon) == (3, 3, 0.1)
    assert cfg.unsupported == "exclude"
    assert cfg.heldout_selection == "exploit"  # the paper's frozen held-out evaluation (4.1, D.1)
    SelectorConfig(gamma=1.0, rho=-1.0, epsilon=1.0, c=0.0, warmup_per_mode=0, round_robin_iterations=0)


def test_bad_arguments_raise():
    log = full_log()
    with pytest.raises(ValueError, match="iteration"):
        select_mode(log, Q, iteration=0, position=0)
    with pytest.raises(ValueError, match="position"):
        select_mode(log, Q, iteration=4, position=-1)
    with pytest.raises(ValueError, match="dimension"):
        select_mode(log, np.ones(3), iteration=4, position=0)
    with pytest.raises(ValueError, match="NaN"):
        select_mode(log, np.array([np.nan, 1.0]), iteration=4, position=0)
    with pytest.raises(ValueError, match="unknown mode"):
        ModeSelector(modes=("none", "bogus"))


def test_mode_subset_selector():
    # an ablation without 'none': round-robin cycles over the subset, empty log falls back to modes[0]
    sel = ModeSelector(SelectorConfig(**PLAIN), modes=("imitation", "strategic"))
    rng = np.random.default_rng(0)
    assert [sel.select(OutcomeLog(None), Q, iteration=1, position=p, rng=rng).mode for p in range(3)] == [
        "imitation",
        "strategic",
        "imitation",
    ]
    assert sel.select(OutcomeLog(None), Q, iteration=4, position=0, rng=rng).mode == "imitation"
    # 'none' records in the log occupy neighbourhood slots but are never chosen
    log = make_log([(A, "none", True), (A, "strategic", False)])
    d = sel.select(log, Q, iteration=4, position=0, rng=rng)
    assert d.mode == "strategic" and set(d.estimates) == {"imitation", "strategic"}


def test_to_dict_is_json_serialisable_and_round_trips():
    decisions = [
        decide(make_log(LOCAL), gamma=0.5, **PLAIN),  # local_ucb with a None estimate
        decide(OutcomeLog(None), **PLAIN),  # global_best on an empty log
        decide(full_log(), None),  # no_embedding
        decide(full_log(), epsilon=1.0),  # epsilon
    ]
    for d in decisions:
        dd = d.to_dict()
        text = json.dumps(dd, allow_nan=False)
        back = json.loads(text)
        for key in ("mode", "branch", "reason", "estimates", "bonuses", "scores", "counts", "epsilon_draw"):
            assert key in back
        assert ModeDecision.from_dict(back) == d
    local = decisions[0].to_dict()
    assert local["branch"] == "local_ucb"
    assert local["estimates"]["corrective"] is None
    assert local["counts"] == {"none": 3, "imitation": 2, "strategic": 1, "corrective": 0}
    assert isinstance(local["neighbours"][0], int)


def test_decisions_compare_within_rounding_but_not_beyond():
    """A log whose embeddings are one float32 ulp off (another CPU's rounding) gives the same
    decision up to the last digits; a different mode, branch or neighbour set is reported."""
    from antipersist_lib.core.selector import decision_differences

    rng = np.random.default_rng(3)
    embs = rng.normal(size=(12, 64))
    log = make_log([(e, MODES[i % 4], i % 3 == 0) for i, e in enumerate(embs)])
    nudged = make_log(
        [
            (np.nextafter(e.astype(np.float32), np.float32(np.inf)).astype(np.float64), MODES[i % 4], i % 3 == 0)
            for i, e in enumerate(embs)
        ]
    )
    q = embs[0] + 0.05 * rng.normal(size=64)
    cfg = SelectorConfig(rho=0.0, epsilon=0.0, warmup_per_mode=1)
    a = select_mode(log, q, iteration=5, position=2, seed=1, config=cfg).to_dict()
    b = select_mode(nudged, q, iteration=5, position=2, seed=1, config=cfg).to_dict()
    assert a["branch"] == "local_ucb" and a["similarities"] != b["similarities"]
    assert decision_differences(a, b) == []
    # neighbours whose cosines tie within rounding may swap places
    swapped = dict(
        b,
        neighbours=[b["neighbours"][1], b["neighbours"][0], *b["neighbours"][2:]],
        similarities=[b["similarities"][1], b["similarities"][0], *b["similarities"][2:]],
        weights=[b["weights"][1], b["weights"][0], *b["weights"][2:]],
    )
    assert decision_differences(a, swapped) == []
    other = next(m for m in MODES if m != a["mode"])
    assert any(d.startswith("mode:") for d in decision_differences(a, dict(b, mode=other)))
    assert any(
        d.startswith("neighbours") for d in decision_differences(a, dict(b, neighbours=[99, *b["neighbours"][1:]]))
    )
    assert any(
        d.startswith("scores.")
        for d in decision_differences(
            a, dict(b, scores={**b["scores"], a["mode"]: 0.5 + (b["scores"][a["mode"]] or 0)})
        )
    )


# --------------------------------------------------------------------------------------------
# held-out selection (heldout_selection): "exploit" on the frozen log, or "as_training"

COVERAGE = ("round_robin", "warmup", "epsilon")


def heldout(log, emb=Q, *, iteration, position=0, seed=0, **cfg) -> ModeDecision:
    return select_mode(
        log, emb, iteration=iteration, position=position, seed=seed, phase="heldout", config=SelectorConfig(**cfg)
    )


@pytest.mark.parametrize("iteration", [1, 2, 3, 4, 9])
def test_heldout_exploit_never_takes_a_coverage_branch(iteration):
    """Round-robin iteration, warmup pending (W_init > any count) and epsilon = 1: held-out under
    "exploit" still decides by the trust test and UCB, without an epsilon draw."""
    log = make_log([(A, "none", True), (B, "strategic", False), (A, "imitation", True)])
    for position in range(8):
        d = heldout(log, iteration=iteration, position=position, epsilon=1.0, warmup_per_mode=50)
        assert d.branch not in COVERAGE and d.branch in ("local_ucb", "global_best")
        assert d.epsilon_draw is None
        assert "heldout_selection='exploit'" in d.reason
        # the same decision training's final step (no coverage devices left) would make
        final = decide(log, iteration=AFTER_RR, position=position, epsilon=0.0, warmup_per_mode=0)
        assert (d.mode, d.branch, d.scores) == (final.mode, final.branch, final.scores)


def test_heldout_exploit_fallbacks_are_the_training_ones():
    # an empty log: global-best, which gives 'none' (B.1 at initialization); no embedding: 'none'
    d = heldout(OutcomeLog(None), iteration=1, epsilon=1.0)
    assert (d.mode, d.branch, d.epsilon_draw) == ("none", "global_best", None)
    assert heldout(full_log(), None, iteration=7, epsilon=1.0).branch == "no_embedding"
    # an untrusted neighbourhood (mean similarity 0 < rho) falls back to global-best over the log
    log = make_log([(D, "none", False), (D, "corrective", True)])
    d = heldout(log, iteration=1, epsilon=1.0, warmup_per_mode=5)
    assert (d.branch, d.mode) == ("global_best", "corrective")


def test_heldout_as_training_keeps_every_branch():
    log = make_log([(A, "none", True), (B, "strategic", False), (A, "imitation", True)])
    rr = [heldout(log, iteration=1, position=p, heldout_selection="as_training") for p in range(4)]
    assert [d.branch for d in rr] == ["round_robin"] * 4 and [d.mode for d in rr] == list(MODES)
    assert "heldout_selection='as_training'" in rr[0].reason
    warm = heldout(log, iteration=5, heldout_selection="as_training")
    assert (warm.branch, warm.mode) == ("warmup", "corrective")
    explore = heldout(log, iteration=5, warmup_per_mode=0, epsilon=1.0, heldout_selection="as_training")
    assert explore.branch == "epsilon" and explore.epsilon_draw is not None


def test_heldout_selection_does_not_touch_training_decisions():
    log = make_log([(A, "none", True), (B, "strategic", False)])
    for iteration, position in ((1, 2), (5, 0), (5, 3)):
        a = decide(log, iteration=iteration, position=position, epsilon=0.5, heldout_selection="exploit")
        b = decide(log, iteration=iteration, position=position, epsilon=0.5, heldout_selection="as_training")
        assert a == b and "Held-out" not in a.reason


# --------------------------------------------------------------------------------------------
# the reading of an unsupported mode (issue 44): compare the supported modes, or fall back


def test_unsupported_fallback_sends_a_neighbourhood_missing_a_mode_to_global_best():
    # LOCAL at gamma 0.5 has no corrective entry. "exclude" compares the other three on the local
    # branch -> strategic (0.619283). "fallback" takes the global-best branch instead: recency means
    # over the whole log anchored per mode, none = (0.0625 + 0.125 + 0) / 1.1875 = 0.157895,
    # imitation = (0.95 * 0.125 - 0.05) / 1.125 = 0.061111, strategic = -0.05 -> none.
    excl = decide(make_log(LOCAL), gamma=0.5, unsupported="exclude", **PLAIN)
    fall = decide(make_log(LOCAL), gamma=0.5, unsupported="fallback", **PLAIN)
    assert (excl.branch, excl.mode) == ("local_ucb", "strategic")
    assert (fall.branch, fall.mode) == ("global_best", "none")
    assert "['corrective']" in fall.reason and "fallback" in fall.reason
    assert fall.estimates["none"] == approx(0.1578947)
    assert fall.neighbours == excl.neighbours  # the neighbourhood is still reported


def test_unsupported_fallback_changes_nothing_when_every_mode_is_supported():
    log = full_log()
    for setting in ("exclude", "fallback"):
        d = decide(log, unsupported=setting, **PLAIN)
        assert d.branch == "local_ucb" and d.mode == decide(log, **PLAIN).mode


def test_a_recorded_neighbourhood_re_derives_the_decision_without_the_embedding():
    log = make_log(LOCAL)
    for setting in ("exclude", "fallback", "zero"):
        cfg = SelectorConfig(gamma=0.5, unsupported=setting, **PLAIN)
        sel = ModeSelector(cfg)
        first = sel.select(log, Q, iteration=AFTER_RR, position=0, rng=np.random.default_rng(0))
        again = sel.select(
            log,
            None,
            iteration=AFTER_RR,
            position=0,
            rng=np.random.default_rng(0),
            neighbourhood=(first.neighbours, first.similarities),
        )
        assert again.to_dict() == first.to_dict()
