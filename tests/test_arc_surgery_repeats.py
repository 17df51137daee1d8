"""Memory surgery's per-task flips read every evaluation repeat (``evaluation.repeats`` > 1), not the last one."""

from __future__ import annotations

import pytest

from antipersist_lib.arc.controller import EvalResult, SolveRecord
from antipersist_lib.arc.lineage import SurgeryResult, task_pass_rates


def _result(outcomes: dict[str, list[bool]]) -> EvalResult:
    """An evaluation as ``controller.evaluate`` orders it: repeat 0 of every task, then repeat 1, ..."""
    n_repeats = len(next(iter(outcomes.values())))
    records = tuple(
        SolveRecord(task, "fam", "skill", passes[rep], int(passes[rep]), 1, "ok", "code", repeat=rep)
        for rep in range(n_repeats)
        for task, passes in outcomes.items()
    )
    n_passed = sum(r.passed for r in records)
    return EvalResult(n_passed / len(records), n_passed, len(outcomes), records)


def test_task_pass_rates_average_each_task_s_repeats():
    rates = task_pass_rates(_result({"a": [True, False], "b": [True, True], "c": [False, False]}))
    assert rates == {"a": 0.5, "b": 1.0, "c": 0.0}


def test_flips_compare_pass_rates_over_all_repeats():
    base = _result({"up": [True, False], "down": [True, True], "same": [False, True], "never": [False, False]})
    ablated = _result({"up": [True, True], "down": [False, True], "same": [True, False], "never": [False, False]})
    surgery = SurgeryResult("S1", base, ablated)
    # the last repeat alone would call "down" unchanged (True -> True) and "same" a failure (True -> False)
    assert surgery.flips() == {"to_pass": ["up"], "to_fail": ["down"]}
    rate_changes = sum(task_pass_rates(ablated).values()) - sum(task_pass_rates(base).values())
    assert surgery.delta == pytest.approx(rate_changes / base.n_tasks) == 0.0
    assert surgery.to_dict()["to_fail"] == ["down"]


def test_with_one_repeat_a_flip_is_a_changed_pass_or_fail():
    base = _result({"a": [False], "b": [True], "c": [True]})
    ablated = _result({"a": [True], "b": [False], "c": [True], "new": [True]})
    assert SurgeryResult("S2", base, ablated).flips() == {"to_pass": ["a", "new"], "to_fail": ["b"]}
