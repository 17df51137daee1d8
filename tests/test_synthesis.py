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
    h = prompts.prompt_hashes()
    for name in ("agent_system", "imitation", "strategic", "corrective", "factual_header", "header_corrective"):
        assert re.fullmatch(r"[0-9a-f]{16}", h[name])
    prompts.register_prompt("test_extra", "version 1")
    v1 = prompts.prompt_hashes()["test_extra"]
    prompts.register_prompt("test_extra", "version 2")
    assert prompts.prompt_hashes()["test_extra"] != v1
    prompts._EXTRA.pop("test_extra")
