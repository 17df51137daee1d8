"""The generator and the sandboxed grader agree: every family x skill's ground-truth solution passes
the grader on all its examples, in the child process the grader runs model code in."""

from __future__ import annotations

import sys

import pytest

from antipersist_lib.arc.families import FAMILY_IDS
from antipersist_lib.arc.generator import SKILL_IDS, make_task
from antipersist_lib.arc.sandbox import grade, grade_reply
from antipersist_lib.arc.tools import TOOL_SOURCE

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox grader needs Linux")


@pytest.mark.parametrize("family", FAMILY_IDS)
def test_ground_truth_passes_the_grader_for_every_skill(family):
    for skill in SKILL_IDS:
        task = make_task(family, skill, seed=11)
        examples = [e.to_dict() for e in (*task.train, *task.test)]
        result = grade(task.solution_source, examples, preamble=TOOL_SOURCE)
        assert result.status == "ok" and result.passed, (family, skill, result.error, result.stderr_tail)
        assert result.n_correct == result.n_examples == len(task.train) + len(task.test) == 20


def test_a_solution_for_another_skill_fails_and_a_fenced_reply_is_graded():
    task = make_task("detect_color_property", "recolor", seed=3)
    other = make_task("detect_color_property", "hollow", seed=3)
    examples = [e.to_dict() for e in task.train]
    wrong = grade(other.solution_source, examples, preamble=TOOL_SOURCE)
    assert wrong.status == "ok" and not wrong.passed and wrong.n_correct < wrong.n_examples
    reply = f"The selected objects get a new colour.\n```python\n{task.solution_source}\n```\n"
    assert grade_reply(reply, examples, preamble=TOOL_SOURCE).passed
