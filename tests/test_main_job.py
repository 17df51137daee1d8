"""Main-job profiles: validation names the bad field, variants layer their params, and the
ablation maps used by the notebooks agree with params/main/ablations.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from antipersist_lib.analysis import ablations
from antipersist_lib.runner.main_job import load_profile, run_plan

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, data):
    p = tmp_path / "profile.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_shipped_profiles_load():
    for name in ("smoke", "ablations", "walkthrough"):
        assert run_plan(load_profile(ROOT / "params" / "main" / f"{name}.yaml"))


@pytest.mark.parametrize(
    "data, message",
    [
        ({"methods": ["react"], "benchmark": ["alfworld"]}, r"benchmark"),
        ({"methods": ["reakt"]}, r"unknown method 'reakt'"),
        ({"variants": {"x": {"method": "nope"}}}, r"variant 'x': unknown method 'nope'"),
        ({"variants": {"x": {"params": {}}}}, r"variant 'x' needs a mapping with a 'method' key"),
        ({"variants": {"x": {"method": "react", "parms": {}}}}, r"variant 'x' has unknown key\(s\) \['parms'\]"),
        ({"methods": ["react"], "variants": {"react": {"method": "react"}}}, r"collides"),
        ({"methods": ["react"], "notebooks": ["99_nothing"]}, r"unknown notebook\(s\) \['99_nothing'\]"),
        ({"benchmarks": ["alfworld"]}, r"nothing to run"),
    ],
)
def test_bad_profiles_name_the_problem(tmp_path, data, message):
    with pytest.raises(ValueError, match=message):
        load_profile(write(tmp_path, data))


def test_variant_params_layer_over_method_params(tmp_path):
    prof = load_profile(
        write(
            tmp_path,
            {
                "methods": ["anti_persistence"],
                "variants": {"g": {"method": "anti_persistence", "params": {"gamma": 0.9}}},
                "method_params": {"anti_persistence": {"gamma": 0.5, "budget": 3}},
            },
        )
    )
    assert run_plan(prof) == [
        ("anti_persistence", "anti_persistence", {"gamma": 0.5, "budget": 3}),
        ("g", "anti_persistence", {"gamma": 0.9, "budget": 3}),
    ]


def test_ablation_maps_match_the_ablations_profile():
    prof = load_profile(ROOT / "params" / "main" / "ablations.yaml")
    plan = {name: (method, params) for name, method, params in run_plan(prof)}
    defaults = plan[ablations.DEFAULT_RUN][1]
    for symbol, points in ablations.SWEEPS.items():
        key = ablations.SWEEP_PARAMETERS[symbol]
        for name, value in points.items():
            assert name in plan, f"sweep point {name} missing from the profile"
            method, params = plan[name]
            assert method == "anti_persistence"
            if name == ablations.DEFAULT_RUN:
                from antipersist_lib.methods.anti_persistence import AntiPersistence

                assert AntiPersistence.DEFAULTS[key] == value  # the default point is the default setting
                continue
            assert params[key] == value
            assert {k: v for k, v in params.items() if k != key} == defaults  # one parameter changes at a time
    for names in (ablations.PERSISTENCE, ablations.POLICIES, ablations.SKILL_CONTENT, ablations.RETENTION):
        assert set(names) <= set(plan)
    assert plan["persist"][1]["persist"] is True
    assert plan["policy-random"][1]["policy"] == "random"
    assert plan["skills-toxic"][0] == "frozen_skills" and Path(ROOT / plan["skills-toxic"][1]["library"]).exists()


def test_table3_defaults_have_one_source():
    """The paper's Table 3 values live in anti_persistence.TABLE3; the protocol method, the select
    command and the ablation maps read them from there (changing TABLE3 changes all of them)."""
    from antipersist_lib.cli import build_parser
    from antipersist_lib.core.config import TABLE3
    from antipersist_lib.methods.anti_persistence import AntiPersistence

    paper_table3 = {
        "neighbourhood": 10,
        "c": 0.5,
        "gamma": 0.998,
        "rho": 0.7,
        "warmup_per_mode": 3,
        "round_robin_iterations": 3,
        "epsilon": 0.1,
        "lam": 0.05,
        "budget": 5,
        "contrast": 1,
        "synthesis_max_tokens": 1024,
        "task_filter": "task_type",
        "embed_prefix_chars": 500,
    }
    t3 = TABLE3.params()
    assert {k: t3[k] for k in paper_table3} == paper_table3
    assert TABLE3.synthesis_temperature == 0.0
    for key, value in AntiPersistence.DEFAULTS.items():
        if key in t3:
            assert value == t3[key], key
    for symbol, key in ablations.SWEEP_PARAMETERS.items():
        assert ablations.SWEEPS[symbol][ablations.DEFAULT_RUN] == t3[key]
    sub = build_parser()._subparsers._group_actions[0].choices["select"]
    assert sub.get_default("iteration") == TABLE3.selector.round_robin_iterations + 1
    helps = {a.dest: a.help for a in sub._actions}
    for key in ("neighbourhood", "gamma", "rho", "c", "epsilon"):
        assert f"default {t3[key]}" in helps[key]
