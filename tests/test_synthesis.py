"""phi: empty-return rules, kappa, headers and what the synthesis model receives."""

from __future__ import annotations

import re

import numpy as np
import pytest

from antipersist_lib.core import prompts
from antipersist_lib.core.synthesis import synthesize
from antipersist_lib.memory.trajectory_store import TrajectoryStore
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory
from antipersist_lib.testing.loopback_server import ScriptedResponder

TASK = Task(0, "errandworld", "bring_item", "bring the cup to the hall")


def memory_with(successes: int, failures: int) -> TrajectoryStore:
    m = TrajectoryStore()
    for i in range(successes + failures):
        ok = i < successes
        traj = Trajectory(
            f"start {i}",
            (
                Step("go to kitchen", "You go to the kitchen."),
                Step("take cup", "You take the cup." if ok else "Nothing happens.", valid=ok),
            ),
        )
        m.add(TASK, traj, EpisodeOutcome(ok, n_steps=2), embedding=[1.0, 0.1 * i])
    return m


def chat_requests(server):
    return [r for r in server.requests if r["route"].endswith("chat/completions")]


@pytest.mark.parametrize("mode", ["imitation", "strategic"])
def test_no_success_means_no_guidance_and_no_call(make_clients, mode):
    c = make_clients(ScriptedResponder(default="should never be asked"))
    m = memory_with(successes=0, failures=3)
    got = m.retrieve(np.array([1.0, 0.0]), mode, TASK)
    g = synthesize(mode, TASK.instruction, got, c.llm)
    assert got == [] and g.text == "" and g.kappa == 0 and g.skipped_reason
    assert chat_requests(c.server) == [] and c.ledger.count("synthesis") == 0


def test_corrective_without_failures_returns_nothing_and_never_falls_back(make_clients):
    c = make_clients(ScriptedResponder(default="should never be asked"))
    m = memory_with(successes=3, failures=0)
    got = m.retrieve(np.array([1.0, 0.0]), "corrective", TASK)
    assert [r.role for r in got] == ["contrast"]  # a success is retrieved, but no failure
    g = synthesize("corrective", TASK.instruction, got, c.llm)
    assert g.text == "" and g.kappa == 0 and "failed" in g.skipped_reason
    assert chat_requests(c.server) == []


def test_corrective_call_shape_and_header(make_clients):
    c = make_clients(ScriptedResponder(default="Do NOT take the cup twice because nothing happens."))
    m = memory_with(successes=0, failures=2)
    got = m.retrieve(np.array([1.0, 0.0]), "corrective", TASK)
    g = synthesize("corrective", TASK.instruction, got, c.llm)
    assert g.kappa == 1 and g.text.startswith("## Avoidance Rules (corrective reflection)\nDo NOT take")
    (req,) = chat_requests(c.server)
    body = req["body"]
    assert body["temperature"] == 0 and body["max_tokens"] == 1024
    user = body["messages"][-1]["content"]
    assert prompts.NO_SUCCESS_REFERENCE in user
    assert len(re.findall(r"--- Failure \d ---", user)) == 2
    assert c.ledger.count("synthesis") == 1


def test_corrective_uses_one_contrast_success(make_clients):
    c = make_clients(ScriptedResponder(default="Do NOT stop early because the cup stays."))
    m = memory_with(successes=2, failures=6)
    got = m.retrieve(np.array([1.0, 0.0]), "corrective", TASK)
    assert [r.role for r in got].count("failure") == 5 and [r.role for r in got].count("contrast") == 1
    synthesize("corrective", TASK.instruction, got, c.llm)
    user = chat_requests(c.server)[0]["body"]["messages"][-1]["content"]
    assert "--- Success 1 ---" in user and "--- Success 2 ---" not in user
    assert prompts.NO_SUCCESS_REFERENCE not in user


@pytest.mark.parametrize(
    "mode,header",
    [
        ("imitation", "## Behavioral Patterns (imitation)"),
        ("strategic", "## Task-Specific Strategy (strategic reflection)"),
    ],
)
def test_success_modes_headers_and_inputs(make_clients, mode, header):
    c = make_clients(ScriptedResponder(default="1. go to kitchen\n2. take cup"))
    m = memory_with(successes=7, failures=2)
    got = m.retrieve(np.array([1.0, 0.0]), mode, TASK)
    assert len(got) == 5 and all(r.record.success for r in got)
    g = synthesize(mode, TASK.instruction, got, c.llm)
    assert g.kappa == 1 and g.text.startswith(header + "\n1. go to kitchen")
    user = chat_requests(c.server)[0]["body"]["messages"][-1]["content"]
    assert len(re.findall(r"--- Success \d ---", user)) == 5 and TASK.instruction in user


def test_none_mode_is_factual_and_free(make_clients):
    c = make_clients(ScriptedResponder(default="should never be asked"))
    m = memory_with(successes=1, failures=1)
    got = m.retrieve(np.array([1.0, 0.0]), "none", TASK)
    g = synthesize("none", TASK.instruction, got, c.llm)
    assert g.kappa == 0 and g.text.startswith(prompts.FACTUAL_HEADER)
    assert "Outcome: SUCCESS" in g.text and "Outcome: FAILURE" in g.text and "> take cup" in g.text
    empty = synthesize("none", TASK.instruction, [], c.llm)
    assert empty.text == "" and empty.kappa == 0
    assert chat_requests(c.server) == []


def test_prompt_hashes_cover_every_prompt_and_track_changes():
    h = prompts.prompt_hashes(prompts.PROMPTS)
    for name in ("agent_system", "imitation", "strategic", "corrective", "factual_header", "header_corrective"):
        assert re.fullmatch(r"[0-9a-f]{16}", h[name])
    v1 = prompts.prompt_hashes({"test_extra": "version 1"})["test_extra"]
    assert prompts.prompt_hashes({"test_extra": "version 2"})["test_extra"] != v1
    with pytest.raises(ValueError, match="appear in two families"):
        prompts.prompt_hashes(prompts.PROMPTS, {"agent_system": "another text"})


def test_a_manifest_hashes_its_methods_families_whatever_the_process_imported(tmp_path):
    """Issue 46: prompts registered themselves on import, so a manifest's hashes depended on what the launching
    process happened to import (arc prompts appeared in main runs started from a consolidation study)."""
    import antipersist_lib.arc.prompts  # noqa: F401  (imported on purpose: it must not leak into the hashes)
    import antipersist_lib.consolidation.prompts  # noqa: F401
    from antipersist_lib import methods

    for name in methods.METHODS:
        families = methods.method_class(name).prompt_families
        assert set(families) <= set(methods.PROMPT_FAMILIES) and families[0] == "kit", name
        hashes = methods.prompt_hashes(families)
        assert not any(k.startswith(("arc_", "consolidation_")) for k in hashes), name
        assert set(hashes) == {n for fam in methods.family_prompts(families) for n in fam}
    assert set(methods.prompt_hashes(["kit"])) == set(prompts.PROMPTS)
    assert "expel_compare" in methods.prompt_hashes(methods.method_class("expel").prompt_families)
    assert "expel_compare" not in methods.prompt_hashes(methods.method_class("reflexion").prompt_families)
    with pytest.raises(ValueError, match="unknown prompt famil"):
        methods.prompt_hashes(["arc"])


def test_numbered_lines_collapse_each_item_to_one_line():
    from antipersist_lib.core.prompts import numbered_lines

    assert numbered_lines(["check  the\nfridge ", "open it"]) == "1. check the fridge\n2. open it"
    assert numbered_lines([]) == ""
