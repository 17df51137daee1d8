"""The ReAct loop over real HTTP with scripted replies."""

from __future__ import annotations

import pytest

from antipersist_lib.core.agent import NO_COMMAND_OBSERVATION, AgentConfig, run_episode
from antipersist_lib.envs.errand_world import ErrandWorld, make_tasks
from antipersist_lib.testing.loopback_server import QueueResponder

TASK = make_tasks("train", 1)[0]  # bring the apple (lives in the garden) to the attic


def test_scripted_episode_succeeds_and_records_every_step(make_clients):
    replies = [
        "Thought: find it.\nAction: go to garden\nAction: go to attic",  # only the first action runs
        "**Action:** `take apple`",
        "Action: go to attic.",
        "I will finish.\nAction: drop apple",
    ]
    c = make_clients(QueueResponder(replies))
    res = run_episode(ErrandWorld(), TASK, c.llm, config=AgentConfig(max_steps=10))
    assert res.outcome.success and not res.outcome.over_budget
    assert [s.action for s in res.trajectory.steps] == ["go to garden", "take apple", "go to attic", "drop apple"]
    assert res.llm_calls == 4 == c.ledger.count("execution")
    assert res.outcome.n_invalid == 0
    # the model saw its own previous reply and the observation
    last = c.server.requests[-1]["body"]["messages"]
    assert last[0]["role"] == "system" and "Commands: look, go to <room>" in last[0]["content"]
    assert last[-1]["content"].startswith("Observation: You go to the attic")


def test_invalid_replies_count_and_budget_ends_in_failure(make_clients):
    c = make_clients(QueueResponder(["Thought: hmm", "Action: dance", "", "think: plan first"], default="Action: look"))
    res = run_episode(ErrandWorld(), TASK, c.llm, config=AgentConfig(max_steps=6))
    steps = res.trajectory.steps
    assert len(steps) == 6 and res.llm_calls == 6
    assert not res.outcome.success and res.outcome.over_budget
    assert steps[0].observation == NO_COMMAND_OBSERVATION and not steps[0].valid
    assert steps[1].observation == "Nothing happens." and not steps[1].valid
    # the empty reply is retried by the client (it never becomes a step); the next reply is a
    # ReAct think pseudo-action, answered without touching the engine
    assert steps[2].action.startswith("think:") and steps[2].observation == "OK." and steps[2].valid
    assert sum(r.retries for r in c.ledger.records) == 1
    assert res.outcome.n_invalid == sum(1 for s in steps if not s.valid) >= 2


def test_engine_crash_is_an_infrastructure_failure(make_clients):
    c = make_clients(QueueResponder([], default="Action: go to garden"))
    res = run_episode(ErrandWorld(crash_at_step=2), TASK, c.llm, config=AgentConfig(max_steps=10))
    assert res.outcome.infra_failure and not res.outcome.success
    assert "crashed" in res.outcome.error
    assert res.trajectory.n_steps == 2


def test_reset_failure_is_an_infrastructure_failure(make_clients):
    c = make_clients()
    env = ErrandWorld()
    env.close()
    res = run_episode(env, TASK, c.llm)
    assert res.outcome.infra_failure and res.llm_calls == 0


def test_history_window_limits_prompt(make_clients):
    c = make_clients(QueueResponder([], default="Action: look"))
    run_episode(ErrandWorld(), TASK, c.llm, config=AgentConfig(max_steps=6, history_turns=2))
    chats = [r for r in c.server.requests if r["route"].endswith("chat/completions")]
    body = chats[-1]["body"]
    assert len(body["messages"]) == 2 + 2 * 2


def test_agent_config_validation():
    with pytest.raises(ValueError, match="max_steps"):
        AgentConfig(max_steps=0)


class _ListingWorld(ErrandWorld):
    """ErrandWorld that reports a fixed set of currently valid commands (as ALFWorld's engine does)."""

    def valid_actions(self):
        return ["look", "go to garden", "go to attic", "take apple"]


def test_valid_commands_are_listed_under_the_latest_observation_only(make_clients):
    c = make_clients(QueueResponder(["Action: go to garden", "Action: take apple", "Action: go to attic"]))
    cfg = AgentConfig(max_steps=3, show_valid_actions=3, stop_at_observation=True)
    run_episode(_ListingWorld(), TASK, c.llm, config=cfg)
    bodies = [r["body"] for r in c.server.requests if r["body"].get("messages")]
    first = bodies[0]["messages"][-1]["content"]
    assert first.endswith("Valid commands now: look, go to garden, go to attic (and 1 more)")
    last = bodies[-1]["messages"]
    listed = [m for m in last if m["role"] == "user" and "Valid commands now:" in m["content"]]
    assert len(listed) == 1 and listed[0] is last[-1]  # earlier turns went back to the plain observation
    assert last[1]["content"].endswith("Reply with a Thought line and an Action line.")
    assert all(b.get("stop") == ["\nObservation:"] for b in bodies)
    plain = make_clients(QueueResponder([], default="Action: look"))
    run_episode(_ListingWorld(), TASK, plain.llm, config=AgentConfig(max_steps=2))
    sent = [r["body"] for r in plain.server.requests if r["body"].get("messages")]
    assert all("Valid commands" not in m["content"] for b in sent for m in b["messages"])
    assert all("stop" not in b for b in sent)  # the paper's setting: no list, no stop sequence


def test_small_model_aids_are_validated():
    with pytest.raises(ValueError, match="show_valid_actions must be an integer >= 0"):
        AgentConfig(show_valid_actions=-1)
    with pytest.raises(ValueError, match="stop_at_observation must be true or false"):
        AgentConfig(stop_at_observation="yes")


def test_a_repeated_no_op_is_resampled_with_a_new_seed_and_counted(make_clients):
    # greedy replies repeat an invalid command; the resample (another temperature and seed) breaks the loop
    c = make_clients(QueueResponder(["Action: dance", "Action: dance", "Action: go to garden", "Action: take apple"]))
    cfg = AgentConfig(max_steps=3, resample_repeats=2, repeat_temperature=0.9)
    res = run_episode(ErrandWorld(), TASK, c.llm, config=cfg)
    assert [s.action for s in res.trajectory.steps] == ["dance", "go to garden", "take apple"]
    assert res.llm_calls == 4 == c.ledger.count("execution")  # the resample is an execution call
    bodies = [r["body"] for r in c.server.requests if r["body"].get("messages")]
    assert [b["temperature"] for b in bodies] == [0.0, 0.0, 0.9, 0.0]
    assert bodies[2]["seed"] != bodies[1].get("seed")  # a new sample, and a new response-cache key
    assert bodies[2]["messages"] == bodies[1]["messages"]
    # off (the paper's setting): the repeat is executed as the model wrote it
    plain = make_clients(QueueResponder(["Action: dance", "Action: dance"], default="Action: look"))
    res = run_episode(ErrandWorld(), TASK, plain.llm, config=AgentConfig(max_steps=2))
    assert [s.action for s in res.trajectory.steps] == ["dance", "dance"] and res.llm_calls == 2


def test_repeats_of_a_valid_command_count_only_when_nothing_changed():
    from antipersist_lib.core.agent import repeats_a_no_op
    from antipersist_lib.records import Step

    moved = [Step("go to garden", "You are in the garden.", 0.0, False, True, "")]
    assert not repeats_a_no_op("go to garden", moved)  # valid, and only once so far
    same = moved + [
        Step("look", "You see a tree.", 0.0, False, True, ""),
        Step("look", "You see a tree.", 0.0, False, True, ""),
    ]
    assert repeats_a_no_op("look", same) and not repeats_a_no_op("go to garden", same)
    assert repeats_a_no_op("dance", [Step("dance", "Nothing happens.", 0.0, False, False, "")])
    assert not repeats_a_no_op(None, same)
    with pytest.raises(ValueError, match="resample_repeats must be an integer in"):
        AgentConfig(resample_repeats=9)


def test_revisiting_an_observation_with_the_same_command_is_a_loop():
    from antipersist_lib.core.agent import revisits
    from antipersist_lib.records import Step

    west_east = [
        Step("move west", "You are in the pantry.", 0.0, False, True, ""),
        Step("move east", "You are in the kitchen.", 0.0, False, True, ""),
    ]
    start = "Your task ... You are in the kitchen."
    # back in the kitchen: the first move west left from the initial observation (task text included),
    # not from this description, so going west again is not a revisit yet
    assert not revisits("move west", west_east, start)
    around = west_east + [Step("move west", "You are in the pantry.", 0.0, False, True, "")]
    assert revisits("move east", around, start)  # pantry -> east was done from this very observation
    assert not revisits("take coin", around, start) and not revisits(None, around, start)
    looks = [Step("look around", "A room.", 0.0, False, True, "")]
    assert not revisits("look around", looks, "Task. A room.")  # from the initial observation: new
    assert revisits("look around", looks + [Step("look around", "A room.", 0.0, False, True, "")], "Task. A room.")
    with pytest.raises(ValueError, match="repeat_rule must be one of"):
        AgentConfig(repeat_rule="cycle")


def test_the_revisit_rule_resamples_an_oscillation_that_the_no_op_rule_lets_through(make_clients):
    replies = ["Action: go to garden", "Action: go to kitchen", "Action: go to garden", "Action: go to kitchen"]
    cfg = dict(max_steps=4, resample_repeats=1)
    plain = make_clients(QueueResponder(list(replies), default="Action: look"))
    res = run_episode(ErrandWorld(), TASK, plain.llm, config=AgentConfig(**cfg))
    assert res.llm_calls == 4  # the no-op rule sees nothing wrong: every step changed the room
    loop = make_clients(QueueResponder(list(replies), default="Action: look"))
    res = run_episode(ErrandWorld(), TASK, loop.llm, config=AgentConfig(**cfg, repeat_rule="revisit"))
    actions = [s.action for s in res.trajectory.steps]
    bodies = [r["body"] for r in loop.server.requests if r["body"].get("messages")]
    # garden -> kitchen -> garden again: "go to kitchen" from the garden was done before, so it is re-asked
    assert actions[:3] == ["go to garden", "go to kitchen", "go to garden"] and res.llm_calls > 4
    assert any(b["temperature"] == 0.7 for b in bodies)


def test_repeat_feedback_shows_the_rejected_reply_and_why_and_keeps_it_out_of_the_history(make_clients):
    replies = [
        "Action: look",
        "Action: look",  # the room again: from here, a third look goes round the same loop
        "Thought: again.\nAction: look",  # a revisit: re-asked
        "Action: go to garden",  # the resample, told why
    ]
    c = make_clients(QueueResponder(list(replies), default="Action: take apple"))
    cfg = AgentConfig(max_steps=4, resample_repeats=1, repeat_rule="revisit", repeat_feedback=True)
    res = run_episode(ErrandWorld(), TASK, c.llm, config=cfg)
    assert [s.action for s in res.trajectory.steps] == ["look", "look", "go to garden", "take apple"]
    assert res.trajectory.steps[2].model_output == "Action: go to garden" and res.llm_calls == 5
    bodies = [r["body"] for r in c.server.requests if r["body"].get("messages")]
    resample = next(b for b in bodies if b["temperature"] == 0.7)
    assert resample["messages"][-2] == {"role": "assistant", "content": "Thought: again.\nAction: look"}
    assert 'You already sent "look" after this same observation' in resample["messages"][-1]["content"]
    # the feedback exchange is never part of the conversation the model sees afterwards
    assert not any("You already sent" in m["content"] for b in bodies if b is not resample for m in b["messages"])
    with pytest.raises(ValueError, match="repeat_feedback must be true or false"):
        AgentConfig(repeat_feedback="yes")


class _Listing(ErrandWorld):
    """ErrandWorld that lists a fixed set of valid commands (as TextWorldExpress and ALFWorld do)."""

    def __init__(self, valid):
        super().__init__()
        self.valid = valid

    def valid_actions(self):
        return list(self.valid)


def test_resample_unlisted_reasks_a_command_the_listed_ones_do_not_hold(make_clients):
    replies = ["Action: take apple, go to attic", "Action: go to garden", "Action: take apple"]
    cfg = dict(max_steps=2, show_valid_actions=10, resample_repeats=1, repeat_feedback=True)
    c = make_clients(QueueResponder(list(replies), default="Action: look"))
    valid = ["look", "go to garden", "go to kitchen", "take apple"]
    res = run_episode(_Listing(valid), TASK, c.llm, config=AgentConfig(**cfg, resample_unlisted=True))
    assert [s.action for s in res.trajectory.steps] == ["go to garden", "take apple"] and res.llm_calls == 3
    told = [r["body"]["messages"][-1]["content"] for r in c.server.requests if r["body"].get("temperature") == 0.7]
    assert told == [
        '"take apple, go to attic" is not one of the valid commands listed under the latest observation.'
        " Reply with exactly one of the listed commands."
    ]
    # off, or a cut list (more valid commands than the prompt shows): the command is sent as it is
    for env, kw in ((_Listing(valid), {}), (_Listing(valid * 3), {"resample_unlisted": True})):
        c = make_clients(QueueResponder(list(replies), default="Action: look"))
        cut = dict(cfg, show_valid_actions=len(valid) * 2) if len(env.valid) > len(valid) else cfg
        res = run_episode(env, TASK, c.llm, config=AgentConfig(**cut, **kw))
        assert res.trajectory.steps[0].action == "take apple, go to attic" and res.llm_calls == 2


def test_a_prompt_that_outgrows_the_context_ends_the_episode_over_budget_with_its_score(make_clients):
    from antipersist_lib.testing.loopback_server import approx_tokens, message_text

    replies = ["Action: go to garden", "Action: take apple", "Action: go to attic", "Action: drop apple"]
    # measure the prompt the third call sends, then serve a context one token short of it
    probe = make_clients(QueueResponder(replies))
    run_episode(ErrandWorld(), TASK, probe.llm, config=AgentConfig(max_steps=10))
    third = probe.server.requests[2]["body"]["messages"]
    limit = sum(approx_tokens(message_text(m)) for m in third) - 1
    c = make_clients(QueueResponder(replies), context_tokens=limit)
    res = run_episode(ErrandWorld(), TASK, c.llm, config=AgentConfig(max_steps=10))
    out = res.outcome
    assert [s.action for s in res.trajectory.steps] == ["go to garden", "take apple"]  # the two that fit
    assert out.over_budget and not out.success and not out.infra_failure  # the agent's budget, not the engine's
    assert out.error.startswith("context full at step 2") and "exceeds the available context size" in out.error
    assert res.llm_calls == 2 and out.n_steps == 2


def test_a_context_refusal_is_named_with_its_fix_and_not_retried(make_clients):
    from antipersist_lib.errors import ContextLengthError, LLMRequestError

    c = make_clients(QueueResponder([], default="Action: look"), context_tokens=5)
    with pytest.raises(ContextLengthError, match=r"longer than the model's context.*n_ctx.*history_turns") as err:
        c.llm.chat([{"role": "user", "content": "a prompt of far more than five tokens, surely"}], purpose="execution")
    assert isinstance(err.value, LLMRequestError) and err.value.retries == 0
    assert len(c.server.requests) == 1  # a permanent refusal: asked once
    # another 400 stays a plain request error
    from antipersist_lib.serving.llm import exceeds_context

    assert not exceeds_context(ValueError("context size"))


def test_the_docs_list_every_agent_field_as_the_code_defines_it():
    """docs/protocol.md's agent table is AgentConfig's own metadata (issue 42: it documented 6 of 13 fields)."""
    import dataclasses
    import re
    from pathlib import Path

    from antipersist_lib.core.agent import agent_fields_table

    doc = (Path(__file__).resolve().parents[1] / "docs" / "protocol.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- agent-fields:begin[^>]*-->\n(.*?)\n<!-- agent-fields:end -->", doc, re.S)
    assert block is not None and block.group(1) == agent_fields_table()
    named = set(re.findall(r"^\| `(\w+)` \|", block.group(1), re.M))
    assert named == {f.name for f in dataclasses.fields(AgentConfig)} - {"max_steps"}
    assert all(f.metadata.get("doc") for f in dataclasses.fields(AgentConfig))
