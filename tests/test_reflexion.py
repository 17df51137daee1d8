"""Reflexion over real HTTP: the loopback server plays ErrandWorld and writes scripted reflections."""

from __future__ import annotations

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
from antipersist_lib.methods.reflexion import (
    HEADER_OWN,
    HEADER_SIMILAR,
    REFLECTION_SYSTEM,
    Reflexion,
)
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ScriptedResponder
from antipersist_lib.testing.scripted_policy import errand_policy

TRAIN = make_tasks("train", 12)
HELD = make_tasks("heldout", 12)
CUP, SPOON, APPLE, BOOK = TRAIN[3], TRAIN[5], TRAIN[0], TRAIN[2]  # cup/spoon: bring_item, apple: bring_fruit
FAIL = AgentConfig(max_steps=2)  # too short for any errand
PASS = AgentConfig(max_steps=8)  # long enough for every errand


def _is_reflection(req) -> bool:
    msgs = req.get("messages") or []
    return bool(msgs) and msgs[0].get("role") == "system" and msgs[0].get("content") == REFLECTION_SYSTEM


def clients(make_clients):
    counter = itertools.count(1)
    responder = ScriptedResponder(
        [
            (
                _is_reflection,
                lambda req: (
                    f"Reflection {next(counter)}: I searched the wrong rooms; next time I will go to the kitchen first."
                ),
            )
        ],
        default=errand_policy,
    )
    return make_clients(responder)


def build(c, state_dir: Path, **params) -> Reflexion:
    ctx = MethodContext(
        llm=c.llm, embedder=c.embedder, state_dir=state_dir, seed=0, benchmark="errandworld", fsync=False
    )
    return Reflexion(ctx, **params)


def attempt(m: Reflexion, c, task, iteration: int, config: AgentConfig, *, phase: str = "train", learn: bool = True):
    env = ErrandWorld()
    obs = env.reset(task)
    tctx = m.prepare(task, obs, phase=phase, iteration=iteration, position=0)
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


def digest(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()
    }


def reflection_requests(c):
    return [r["body"] for r in c.server.requests_for(ROUTE_CHAT) if _is_reflection(r["body"])]


def test_failure_makes_one_reflection_and_success_none(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path)
    tctx, ep = attempt(m, c, CUP, 1, FAIL)
    assert not ep.outcome.success
    assert tctx.parents == () and tctx.blocks == []
    assert c.ledger.count("reflection") == 1
    (rec,) = [r for r in c.ledger.records if r.purpose == "reflection"]
    assert rec.tags["phase"] == "train" and rec.tags["iteration"] == 1 and rec.tags["task"] == CUP.key
    (refl,) = m.store.active()
    assert refl.kind == "reflection" and refl.name == CUP.key and refl.task_type == CUP.task_type
    assert refl.text.startswith("Reflection 1:")
    assert refl.parents == () and refl.source_records == (0,)
    assert m.memory[0].task == CUP and not m.memory[0].success
    # the prompt holds the task, the failed trajectory and (no) earlier reflections, at 256 tokens, T=0
    (body,) = reflection_requests(c)
    user = body["messages"][1]["content"]
    assert CUP.instruction in user and "> go to attic" in user and "(none)" in user
    assert body["max_tokens"] == 256 and body["temperature"] == 0.0

    tctx, ep = attempt(m, c, BOOK, 1, PASS)
    assert ep.outcome.success
    assert c.ledger.count("reflection") == 1 and len(m.store) == 1
    assert len(m.memory) == 2 and m.memory[1].success  # successes are stored as trajectories too


def test_last_three_reflections_of_the_same_task(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path, transfer="none")
    contexts = []
    for it in range(1, 5):
        tctx, ep = attempt(m, c, CUP, it, FAIL)
        assert not ep.outcome.success
        contexts.append(tctx)
    refls = m.reflections_for(CUP.key)
    assert [r.text.split(":")[0] for r in refls] == ["Reflection 1", "Reflection 2", "Reflection 3", "Reflection 4"]
    ids = [r.abstraction_id for r in refls]
    # provenance: each reflection's parents are the reflections in context when its trajectory ran
    assert refls[0].parents == ()
    assert refls[1].parents == (ids[0],)
    assert refls[3].parents == tuple(sorted(ids[:3]))
    assert [rec.parents for rec in m.memory] == [(), (ids[0],), tuple(ids[:2]), tuple(ids[:3])]
    assert contexts[3].parents == tuple(ids[:3])
    # the previous reflections reach the reflection prompt (at most three of them)
    last_user = reflection_requests(c)[-1]["messages"][1]["content"]
    assert "Reflection 3:" in last_user and "Reflection 1:" in last_user
    # next attempt: the last three, not the oldest
    env = ErrandWorld()
    tctx = m.prepare(CUP, env.reset(CUP), phase="train", iteration=5, position=0)
    assert tctx.parents == tuple(ids[1:])
    (block,) = tctx.blocks
    assert block.startswith(HEADER_OWN)
    assert "Reflection 2:" in block and "Reflection 3:" in block and "Reflection 4:" in block
    assert "Reflection 1:" not in block
    assert tctx.meta["reflections"] == "own" and json.dumps(tctx.meta)
    # and the agent actually sees them in its system prompt
    ep = run_episode(env, CUP, c.llm, context_blocks=tctx.blocks, config=FAIL, initial_observation=env.reset(CUP))
    agent_sys = [
        r["body"]["messages"][0]["content"] for r in c.server.requests_for(ROUTE_CHAT) if not _is_reflection(r["body"])
    ][-1]
    assert "Reflection 4:" in agent_sys and "Reflection 1:" not in agent_sys
    assert ep.llm_calls == 2


def test_similar_task_transfer_and_strict_original(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path / "transfer")
    for it in (1, 2):
        attempt(m, c, SPOON, it, FAIL)
        attempt(m, c, CUP, it, FAIL)
        attempt(m, c, APPLE, it, FAIL)
    held_cup = HELD[3]
    assert "cup" in held_cup.instruction and held_cup.task_type == CUP.task_type and held_cup.key != CUP.key
    m.freeze()
    tctx = m.prepare(held_cup, ErrandWorld().reset(held_cup), phase="heldout", iteration=2, position=0)
    cup_ids = tuple(a.abstraction_id for a in m.reflections_for(CUP.key))
    assert len(cup_ids) == 2 and tctx.parents == cup_ids
    (block,) = tctx.blocks
    assert block.startswith(HEADER_SIMILAR) and CUP.instruction in block
    assert tctx.meta == {"reflections": "similar_task", "n_reflections": 2, "source_tasks": [CUP.key]}
    # a held-out fruit task only draws on fruit tasks
    held_apple = HELD[0]
    tctx = m.prepare(held_apple, ErrandWorld().reset(held_apple), phase="heldout", iteration=2, position=0)
    assert set(tctx.parents) == {a.abstraction_id for a in m.reflections_for(APPLE.key)}
    m.close()

    c2 = clients(make_clients)
    strict = build(c2, tmp_path / "strict", transfer="none")
    attempt(strict, c2, CUP, 1, FAIL)
    tctx = strict.prepare(held_cup, ErrandWorld().reset(held_cup), phase="heldout", iteration=1, position=0)
    assert tctx.blocks == [] and tctx.parents == () and tctx.meta["reflections"] == "none"


def test_transfer_tasks_and_max_reflections(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path, transfer_tasks=2, max_reflections=1)
    for it in (1, 2):
        attempt(m, c, CUP, it, FAIL)
        attempt(m, c, SPOON, it, FAIL)
    tctx = m.prepare(HELD[3], ErrandWorld().reset(HELD[3]), phase="heldout", iteration=2, position=0)
    assert len(tctx.blocks) == 2 and len(tctx.parents) == 2
    assert tctx.meta["source_tasks"] == [CUP.key, SPOON.key]  # most similar first
    assert tctx.parents == (
        m.reflections_for(CUP.key)[-1].abstraction_id,
        m.reflections_for(SPOON.key)[-1].abstraction_id,
    )


def test_state_survives_reconstruction(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path)
    for it in (1, 2):
        attempt(m, c, CUP, it, FAIL)
        attempt(m, c, BOOK, it, PASS)
    obs = ErrandWorld().reset(CUP)
    before = m.prepare(CUP, obs, phase="train", iteration=3, position=0)
    held_before = m.prepare(HELD[3], ErrandWorld().reset(HELD[3]), phase="heldout", iteration=3, position=0)
    hist = [a.to_dict() for a in m.store.history()]
    mem = [r.to_dict() for r in m.memory]
    m.close()
    assert set(Reflexion.state_files) <= set(digest(tmp_path))

    m2 = build(c, tmp_path)
    assert [a.to_dict() for a in m2.store.history()] == hist
    assert [r.to_dict() for r in m2.memory] == mem and len(mem) == 4
    after = m2.prepare(CUP, obs, phase="train", iteration=3, position=0)
    assert (after.blocks, after.parents) == (before.blocks, before.parents)
    held_after = m2.prepare(HELD[3], ErrandWorld().reset(HELD[3]), phase="heldout", iteration=3, position=0)
    assert (held_after.blocks, held_after.parents) == (held_before.blocks, held_before.parents)
    # identifiers continue after the restored ones
    attempt(m2, c, CUP, 3, FAIL)
    new = m2.reflections_for(CUP.key)[-1]
    assert new.abstraction_id not in {h["abstraction_id"] for h in hist}
    assert new.parents == before.parents


def test_frozen_writes_nothing(make_clients, tmp_path):
    c = clients(make_clients)
    m = build(c, tmp_path)
    attempt(m, c, CUP, 1, FAIL)
    before = digest(tmp_path)
    calls = c.ledger.count("reflection")
    m.freeze()
    assert m.frozen and m.store.frozen and m.memory.frozen
    tctx, ep = attempt(m, c, CUP, 2, FAIL, phase="heldout", learn=False)
    assert tctx.parents and not ep.outcome.success
    with pytest.raises(FrozenStateError):
        m.learn(CUP, tctx, ep, iteration=2, position=0)
    m.prepare(HELD[3], ErrandWorld().reset(HELD[3]), phase="heldout", iteration=2, position=1)
    m.snapshot(2, RunDirectory(tmp_path.parent).snapshot_path(2))  # analysis snapshots go elsewhere and are allowed
    assert digest(tmp_path) == before
    assert c.ledger.count("reflection") == calls
    m.unfreeze()
    m.learn(CUP, tctx, ep, iteration=2, position=0)
    assert c.ledger.count("reflection") == calls + 1
    snap = json.loads((tmp_path.parent / "snapshots" / "abstractions_iter_02.json").read_text())
    assert snap["iteration"] == 2 and len(snap["active"]) == 1


def test_parameters(make_clients, tmp_path):
    c = clients(make_clients)
    with pytest.raises(ValueError, match="valid: .*max_reflections"):
        build(c, tmp_path, max_reflection=3)
    with pytest.raises(ValueError, match="transfer"):
        build(c, tmp_path, transfer="everything")
    with pytest.raises(ValueError):
        build(c, tmp_path, max_reflections=0)
    m = build(c, tmp_path, max_tokens=128)
    assert m.describe() == {
        "name": "reflexion",
        "max_reflections": 3,
        "transfer": "similar_task",
        "transfer_tasks": 1,
        "max_tokens": 128,
        "temperature": 0.0,
        "trajectory_chars": 4000,
    }
    assert m.name == "reflexion"
    assert "reflexion_reflect" in methods.prompt_hashes(methods.method_class("reflexion").prompt_families)
