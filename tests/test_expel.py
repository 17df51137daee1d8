"""ExpeL over real HTTP: ErrandWorld episodes, scripted insight replies, the voted insight list."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from pathlib import Path

import pytest

from antipersist_lib import methods
from antipersist_lib.core.agent import AgentConfig, run_episode
from antipersist_lib.envs.errand_world import ErrandWorld, make_tasks
from antipersist_lib.errors import FrozenStateError
from antipersist_lib.methods.base import MethodContext
from antipersist_lib.methods.expel import (
    HEADER_EXAMPLES,
    HEADER_INSIGHTS,
    INSIGHT_SYSTEM,
    ExpeL,
    InsightOp,
    parse_operations,
)
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ScriptedResponder
from antipersist_lib.testing.scripted_policy import errand_policy

TRAIN = make_tasks("train", 12)
HELD = make_tasks("heldout", 12)
FAIL = AgentConfig(max_steps=2)
PASS = AgentConfig(max_steps=8)
MIXED = AgentConfig(max_steps=4)  # book and lamp (attic, searched first) succeed; the rest fail


def _is_insight(req) -> bool:
    msgs = req.get("messages") or []
    return bool(msgs) and msgs[0].get("role") == "system" and msgs[0].get("content") == INSIGHT_SYSTEM


def clients(make_clients, reply=None):
    counter = itertools.count(1)
    reply = reply or (lambda req: f"ADD: Insight number {next(counter)} about searching rooms.")
    return make_clients(ScriptedResponder([(_is_insight, reply)], default=errand_policy))


def build(c, state_dir: Path, **params) -> ExpeL:
    ctx = MethodContext(
        llm=c.llm, embedder=c.embedder, state_dir=state_dir, seed=0, benchmark="errandworld", fsync=False
    )
    return ExpeL(ctx, **params)


def attempt(
    m: ExpeL, c, task, iteration: int, config: AgentConfig, *, parents=None, phase: str = "train", learn: bool = True
):
    env = ErrandWorld()
    obs = env.reset(task)
    tctx = m.prepare(task, obs, phase=phase, iteration=iteration, position=0)
    if parents is not None:  # hand-set provenance, to test how P(H) propagates
        tctx = dataclasses.replace(tctx, parents=tuple(parents))
    ep = run_episode(
        env,
        task,
        c.llm,
        context_blocks=tctx.blocks,
        config=config,
        initial_observation=obs,
        tags={"phase": phase, "iteration": iteration, "task": task.key},
    )
    if learn:
        m.learn(task, tctx, ep, iteration=iteration, position=0)
    return tctx, ep


def insight_requests(c):
    return [r["body"] for r in c.server.requests_for(ROUTE_CHAT) if _is_insight(r["body"])]


def digest(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()
    }


# -- the operations parser ---------------------------------------------------------------------


def test_parse_operations_on_messy_output():
    reply = """Here are my operations:
1. ADD: Always check the inventory before leaving a room.
- edit 2: Search rooms where similar objects were found before.
* **UPVOTE 1**
downvote #3
AGREE 9
EDIT 7: A brand-new idea phrased as an edit.
REMOVE: no number here
ADD:
EDIT 1
blah blah, I think insight 2 is good
UPVOTE 1
(3) Disagree 2
  add 4: "Drop the object only in the target room."
Remove Insight 3: it is wrong
"""
    assert parse_operations(reply, 3) == [
        InsightOp("add", None, "Always check the inventory before leaving a room."),
        InsightOp("edit", 1, "Search rooms where similar objects were found before."),
        InsightOp("upvote", 0, ""),
        InsightOp("downvote", 2, ""),
        InsightOp("add", None, "A brand-new idea phrased as an edit."),  # EDIT out of range -> ADD
        InsightOp("add", None, "Drop the object only in the target room."),
    ]
    assert parse_operations("", 3) == []
    assert parse_operations("NONE", 3) == []
    assert parse_operations("\x00\x01 ??? :::\n\n###", 5) == []
    assert parse_operations(None, 2) == []  # type: ignore[arg-type]
    assert parse_operations("UPVOTE 0\nDOWNVOTE -1\nUPVOTE 1", 0) == []  # nothing to vote on
    assert parse_operations("AGREE 2: the insight text is repeated here", 2) == [InsightOp("upvote", 1, "")]
    assert parse_operations("**Edit 1** - Check every room once.", 1) == [
        InsightOp("edit", 0, "Check every room once.")
    ]
    assert parse_operations("Adding more insights\nremoved 1", 2) == []


# -- the vote arithmetic -----------------------------------------------------------------------


def test_votes_removal_and_edit(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path)
    m.apply_operations(
        [InsightOp("add", None, "Insight A."), InsightOp("add", None, "Insight B.")],
        [],
        parents=("p1",),
        records=(7,),
        iteration=1,
    )
    a, b = m.insights()
    assert (m.votes(a.abstraction_id), m.votes(b.abstraction_id)) == (2, 2)
    assert a.parents == ("p1",) and a.source_records == (7,) and a.kind == "insight" and a.created_iteration == 1

    shown = m.insights()
    m.apply_operations([InsightOp("upvote", 0), InsightOp("downvote", 1)], shown, parents=(), iteration=2)
    assert (m.votes(a.abstraction_id), m.votes(b.abstraction_id)) == (3, 1)
    m.apply_operations([InsightOp("downvote", 1)], m.insights(), parents=(), iteration=2)
    assert b.abstraction_id not in m.store and m.store.retired_reason(b.abstraction_id) == "votes reached 0"
    assert [x.abstraction_id for x in m.insights()] == [a.abstraction_id]

    m.apply_operations(
        [InsightOp("edit", 0, "Insight A, sharper.")], m.insights(), parents=("p2",), records=(9,), iteration=3
    )
    (new,) = m.insights()
    assert new.abstraction_id != a.abstraction_id and new.derived_from == (a.abstraction_id,)
    assert new.text == "Insight A, sharper." and m.votes(new.abstraction_id) == 4
    assert new.parents == ("p1", "p2") and new.created_iteration == 3
    assert a.abstraction_id not in m.store and m.store.get(a.abstraction_id).text == "Insight A."  # history kept
    # an ADD that repeats an active insight and an EDIT that changes nothing are upvotes
    applied = m.apply_operations(
        [InsightOp("add", None, "insight a, SHARPER"), InsightOp("edit", 0, "Insight A, sharper.")],
        m.insights(),
        parents=(),
        iteration=3,
    )
    assert applied["upvote"] == 2 and applied["add"] == applied["edit"] == 0
    assert [x.abstraction_id for x in m.insights()] == [new.abstraction_id] and m.votes(new.abstraction_id) == 6


def test_cap_retires_lowest_voted_oldest_first(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path, max_insights=3)
    m.apply_operations(
        [InsightOp("add", None, t) for t in ("A rule.", "B rule.", "C rule.")], [], parents=(), iteration=1
    )
    m.apply_operations([InsightOp("upvote", 0)], m.insights(), parents=(), iteration=1)  # A: 3
    applied = m.apply_operations([InsightOp("add", None, "D rule.")], m.insights(), parents=(), iteration=2)
    assert applied["capped"] == 1
    assert [x.text for x in m.insights()] == ["A rule.", "C rule.", "D rule."]
    applied = m.apply_operations(
        [InsightOp("add", None, "E rule."), InsightOp("add", None, "F rule.")], m.insights(), parents=(), iteration=2
    )
    assert applied["capped"] == 2 and len(m.store) == 3
    assert [x.text for x in m.insights()] == ["A rule.", "E rule.", "F rule."]
    retired = [h for h in m.store.history() if h.abstraction_id not in m.store]
    assert [h.text for h in retired] == ["B rule.", "C rule.", "D rule."]
    assert all("cap" in m.store.retired_reason(h.abstraction_id) for h in retired)


# -- insight extraction ------------------------------------------------------------------------


def test_added_insight_parents_are_the_union_over_shown_trajectories(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path)
    cup, spoon = TRAIN[3], TRAIN[5]
    attempt(m, c, cup, 1, PASS, parents=("ins-000901",))
    attempt(m, c, spoon, 1, PASS, parents=("ins-000902",))  # not shown in the comparison
    attempt(m, c, cup, 2, FAIL, parents=("ins-000903", "ins-000904"))
    m.end_iteration(2)
    assert c.ledger.count("insight") == 1  # one comparison; iteration 2 has no success
    (ins,) = m.insights()
    assert ins.parents == ("ins-000901", "ins-000903", "ins-000904")
    assert ins.source_records == (2, 0) and m.votes(ins.abstraction_id) == 2
    (body,) = insight_requests(c)
    user = body["messages"][1]["content"]
    assert "FAILED" in user and "SUCCEEDED" in user and cup.instruction in user and spoon.instruction not in user
    assert "(none yet)" in user
    (rec,) = [r for r in c.ledger.records if r.purpose == "insight"]
    assert rec.tags["phase"] == "train" and rec.tags["iteration"] == 2 and rec.tags["task"] == cup.key


def test_end_iteration_call_budget_and_this_iterations_episodes(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path, max_compare_calls=3, max_success_calls=1, success_group_size=2)
    for t in TRAIN:
        attempt(m, c, t, 1, PASS)
    m.end_iteration(1)
    assert c.ledger.count("insight") == 1  # all successes, no failure: one success group
    for t in TRAIN:  # retrieved examples would guide every errand: only book and lamp get the steps
        attempt(m, c, t, 2, PASS if t.env_args["object"] in ("book", "lamp") else FAIL)
    outcomes = {r.task.task_id: r.success for r in m.memory if r.iteration == 2}
    assert sum(outcomes.values()) == 4 and len(outcomes) == 12

    pairs = m.compare_pairs(2)
    assert len(pairs) == 3
    assert [f.task.task_id for f, _ in pairs] == [11, 9, 7]  # most recent failures first
    for f, s in pairs:
        assert f.iteration == 2 and not f.success and s.success and s.task.key == f.task.key and s.iteration == 1
    groups = m.success_groups(2)
    assert len(groups) == 1 and len(groups[0]) == 2
    assert all(r.iteration == 2 and r.success for r in groups[0])

    m.end_iteration(2)
    assert c.ledger.count("insight", iteration=2) == 3 + 1
    assert c.ledger.count("insight") == 5
    reqs = insight_requests(c)[1:]
    compare = [r["messages"][1]["content"] for r in reqs if "FAILED" in r["messages"][1]["content"]]
    assert [
        next(t.task_id for t in TRAIN if f"Two attempts at the same task:\n{t.instruction}" in u) for u in compare
    ] == [11, 9, 7]
    success_user = [
        r["messages"][1]["content"] for r in reqs if "Successful attempts at tasks" in r["messages"][1]["content"]
    ]
    assert len(success_user) == 1 and success_user[0].count("Outcome: SUCCESS") == 2
    assert "Outcome: FAILURE" not in success_user[0]
    # every insight shown to a later call is in that call's list
    assert "1. Insight number 1 about searching rooms." in compare[0]
    assert len(m.insights()) == 5
    # an iteration without episodes makes no call
    m.end_iteration(3)
    assert c.ledger.count("insight") == 5


def test_garbage_replies_never_crash(make_clients, tmp_path):
    c = clients(make_clients, reply=lambda req: "I cannot comply.\n\nEDIT: ???\nUPVOTE lots\n42")
    m = build(c, tmp_path)
    for it, cfg in ((1, PASS), (2, FAIL)):
        for t in TRAIN[:4]:
            attempt(m, c, t, it, cfg)
        m.end_iteration(it)
    assert c.ledger.count("insight") > 0 and m.insights() == []


def test_full_list_is_announced(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path, max_insights=1, max_success_calls=2, success_group_size=1)
    attempt(m, c, TRAIN[2], 1, PASS)
    attempt(m, c, TRAIN[4], 1, PASS)
    m.end_iteration(1)
    first, second = [r["messages"][1]["content"] for r in insight_requests(c)]
    assert "The list is full" not in first and "The list is full (1 insights)" in second
    assert len(m.insights()) == 1


# -- inference ---------------------------------------------------------------------------------


def test_prepare_orders_insights_and_shows_only_successful_same_type_examples(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path)
    for t in TRAIN:
        attempt(m, c, t, 1, MIXED)  # item successes (book, lamp), fruit and item failures
    for t in TRAIN[:2]:
        attempt(m, c, t, 1, PASS)  # fruit successes
    m.apply_operations(
        [InsightOp("add", None, t) for t in ("Rule A.", "Rule B.", "Rule C.")], [], parents=(), iteration=1
    )
    shown = m.insights()
    m.apply_operations([InsightOp("upvote", 2), InsightOp("upvote", 1)], shown, parents=(), iteration=1)
    assert [x.text for x in m.insights()] == ["Rule B.", "Rule C.", "Rule A."]  # ties: older first
    m.apply_operations([InsightOp("upvote", 1)], m.insights(), parents=(), iteration=1)  # C: 4, B: 3, A: 2
    held = HELD[3]  # a cup task (bring_item)
    tctx = m.prepare(held, ErrandWorld().reset(held), phase="heldout", iteration=1, position=0)
    ins_block, ex_block = tctx.blocks
    assert ins_block.startswith(HEADER_INSIGHTS)
    assert ins_block.index("Rule C.") < ins_block.index("Rule B.") < ins_block.index("Rule A.")
    assert tctx.parents == tuple(a.abstraction_id for a in m.insights())
    assert [m.store.get(p).text for p in tctx.parents] == ["Rule C.", "Rule B.", "Rule A."]
    assert ex_block.startswith(HEADER_EXAMPLES)
    ids = tctx.meta["example_records"]
    assert 0 < len(ids) <= 5
    by_id = {r.record_id: r for r in m.memory}
    assert all(by_id[i].success and by_id[i].task.task_type == held.task_type for i in ids)
    assert "Outcome: FAILURE" not in ex_block and ex_block.count("Outcome: SUCCESS") == len(ids)
    assert len(ids) == sum(1 for r in m.memory if r.success and r.task.task_type == "bring_item")
    # k_examples limits the examples; no insight, no header
    m2 = build(c, tmp_path / "other", k_examples=1)
    tctx = m2.prepare(held, ErrandWorld().reset(held), phase="heldout", iteration=1, position=0)
    assert tctx.blocks == [] and tctx.parents == ()


# -- persistence and freezing ------------------------------------------------------------------


def test_state_survives_reconstruction(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path)
    for it, cfg in ((1, PASS), (2, MIXED)):
        for t in TRAIN[:6]:
            attempt(m, c, t, it, cfg)
        m.end_iteration(it)
    m.apply_operations(
        [InsightOp("upvote", 1), InsightOp("edit", 0, "Edited insight.")], m.insights(), parents=(), iteration=2
    )
    held = HELD[3]
    obs = ErrandWorld().reset(held)
    before = m.prepare(held, obs, phase="heldout", iteration=2, position=0)
    state = [(a.to_dict(), m.votes(a.abstraction_id)) for a in m.insights()]
    hist = [a.to_dict() for a in m.store.history()]
    mem = [r.to_dict() for r in m.memory]
    m.snapshot(2, RunDirectory(tmp_path.parent).snapshot_path(2))
    m.close()
    assert set(ExpeL.state_files) <= set(digest(tmp_path))

    m2 = build(c, tmp_path)
    assert [(a.to_dict(), m2.votes(a.abstraction_id)) for a in m2.insights()] == state
    assert [a.to_dict() for a in m2.store.history()] == hist
    assert [r.to_dict() for r in m2.memory] == mem
    after = m2.prepare(held, obs, phase="heldout", iteration=2, position=0)
    assert (after.blocks, after.parents, after.meta) == (before.blocks, before.parents, before.meta)
    snap = json.loads((tmp_path.parent / "snapshots" / "abstractions_iter_02.json").read_text())
    assert snap["iteration"] == 2 and [a["abstraction_id"] for a in snap["active"]] == [
        a[0]["abstraction_id"] for a in sorted(state, key=lambda s: s[0]["abstraction_id"])
    ]
    assert {a["abstraction_id"]: a["stats"]["votes"] for a in snap["active"]} == {
        a["abstraction_id"]: v for a, v in state
    }


def test_frozen_raises_and_prepare_writes_nothing(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path)
    for it, cfg in ((1, PASS), (2, FAIL)):
        for t in TRAIN[:3]:
            attempt(m, c, t, it, cfg)
        m.end_iteration(it)
    assert m.insights()
    before = digest(tmp_path)
    m.freeze()
    assert m.frozen and m.store.frozen and m.memory.frozen
    tctx, ep = attempt(m, c, HELD[3], 2, MIXED, phase="heldout", learn=False)
    assert tctx.parents
    with pytest.raises(FrozenStateError):
        m.learn(HELD[3], tctx, ep, iteration=2, position=0)
    with pytest.raises(FrozenStateError):
        m.end_iteration(2)
    with pytest.raises(FrozenStateError):
        m.apply_operations([InsightOp("add", None, "New.")], [], parents=(), iteration=2)
    assert digest(tmp_path) == before
    m.unfreeze()
    m.learn(TRAIN[0], tctx, ep, iteration=3, position=0)
    assert digest(tmp_path) != before


def test_parameters(make_clients, tmp_path):
    c = clients(make_clients)
    with pytest.raises(ValueError, match="valid: .*max_insights"):
        build(c, tmp_path, max_insight=5)
    with pytest.raises(ValueError):
        build(c, tmp_path, success_group_size=0)
    m = build(c, tmp_path)
    assert m.describe() == {
        "name": "expel",
        "max_compare_calls": 8,
        "max_success_calls": 4,
        "success_group_size": 4,
        "max_insights": 20,
        "k_examples": 5,
        "max_tokens": 1024,
        "temperature": 0.0,
        "trajectory_chars": 4000,
    }
    assert {"expel_compare", "expel_success", "expel_operations"} <= set(
        methods.prompt_hashes(methods.method_class("expel").prompt_families)
    )
