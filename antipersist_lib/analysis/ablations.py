"""Which run folder is which ablation or sweep point (``params/main/ablations.yaml``).

Each point of Table 2, Figures 5, 6, 7, 11 and 12 is one run folder (a named variant of the
main-job profile, or the default method run itself). The notebooks read these maps; a test checks
that they agree with the profile, so a renamed variant cannot silently drop out of a figure.
"""

from __future__ import annotations

from antipersist_lib.core.config import TABLE3

#: the default configuration (Table 3) that every sweep passes through
DEFAULT_RUN = "anti_persistence"

#: Table 2: discard (the method) vs persist (synthesized guidance kept as abstractions)
PERSISTENCE = {DEFAULT_RUN: "discard", "persist": "persist"}

#: Figure 6: the bandit vs fixed single-mode policies and a uniform random policy
POLICIES = {
    DEFAULT_RUN: "bandit",
    "policy-none": "fixed: none",
    "policy-imitation": "fixed: imitation",
    "policy-strategic": "fixed: strategic",
    "policy-corrective": "fixed: corrective",
    "policy-random": "random",
}

#: the method parameter each swept symbol sets
SWEEP_PARAMETERS = {"gamma": "gamma", "lambda": "lam", "B": "budget", "B_hat": "neighbourhood"}
_T3 = TABLE3.params()

#: Figures 5, 7, 12: run folder -> parameter value, per swept parameter; the default run's value is Table 3's
SWEEPS: dict[str, dict[str, float]] = {
    "gamma": {"gamma-0.98": 0.98, "gamma-0.99": 0.99, DEFAULT_RUN: _T3["gamma"], "gamma-1.0": 1.0},
    "lambda": {"lambda-0": 0.0, DEFAULT_RUN: _T3["lam"], "lambda-0.2": 0.2, "lambda-0.5": 0.5},
    "B": {"B-1": 1, DEFAULT_RUN: _T3["budget"], "B-10": 10},
    "B_hat": {"Bhat-3": 3, "Bhat-5": 5, DEFAULT_RUN: _T3["neighbourhood"], "Bhat-20": 20},
}

#: Figure 11(a): frozen skill libraries (the paper: AppWorld; the smoke profile: ALFWorld libraries in params/skills)
SKILL_CONTENT = {"skills-none": "no skills", "skills-useful": "useful skills", "skills-toxic": "toxic skills"}

#: Figure 11(b): selective retention
RETENTION = {
    "abstraction_memory": "no filter",
    "abstraction-judge": "LLM-judge filter",
    DEFAULT_RUN: "no frozen layer",
    "frozen-layer": "frozen filtered layer",
}
