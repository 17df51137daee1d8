"""Anti-Persistence per task, end to end over real HTTP with the scripted ErrandWorld policy."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from antipersist_lib.core.agent import AgentConfig
from antipersist_lib.core.anti_persistence import AntiPersistence, AntiPersistenceConfig
from antipersist_lib.core.selector import SelectorConfig
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.memory.outcome_log import FIELDS, OutcomeLog
from antipersist_lib.memory.trajectory_memory import TrajectoryMemory
from antipersist_lib.testing.errand_world import ErrandWorld, make_tasks
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ROUTE_EMBEDDINGS
from antipersist_lib.testing.scripted_policy import GUIDANCE_MARKER, errand_policy

AGENT = AgentConfig(max_steps=4)


def build(make_clients, run_dir: Path | None, **cfg):
    c = make_clients(errand_policy, ledger_path=None if run_dir is None else run_dir / "calls.jsonl")
    memory = TrajectoryMemory(None if run_dir is None else run_dir / "trajectories.jsonl")
    olog = OutcomeLog(None if run_dir is None else run_dir / "outcome_log.jsonl")
    config = (
        AntiPersistenceConfig(**cfg)
        if cfg
        else AntiPersistenceConfig(selector=SelectorConfig(round_robin_iterations=2))
    )
    return c, AntiPersistence(memory, olog, c.llm, c.embedder, config=config, seed=7)


def train(ap, tasks, iteration, env=None):
    env = env or ErrandWorld()
    return [
        ap.run_task(t, env, iteration=iteration, position=j, training=True, agent_config=AGENT)
        for j, t in enumerate(tasks)
    ]


def test_training_updates_memory_and_log_with_skip_rule_k0(make_clients):
    c, ap = build(make_clients, None)
    tasks = make_tasks("train", 8)
    results = train(ap, tasks, iteration=1)
    assert len(ap.memory) == 8
    assert not results[0].logged and results[0].log_skip_reason == "first_update"
    assert all(r.logged for r in results[1:])
    assert len(ap.outcome_log) == 7
    # round-robin over positions 0..7 (the index within the iteration)
    assert [r.mode for r in results] == ["none", "imitation", "strategic", "corrective"] * 2
    for r, rec in zip(results[1:], ap.outcome_log):
        assert rec.mode == r.mode and rec.raw_success == r.outcome.success
        assert rec.reward == pytest.approx(max(-1.0, min(1.0, int(r.outcome.success) - 0.05 * r.kappa)))
        assert rec.task_id == r.task.task_id and rec.task_type == r.task.task_type


def test_kappa_and_call_accounting(make_clients):
    c, ap = build(make_clients, None)
    results = train(ap, make_tasks("train", 12), iteration=1)
    assert sum(r.kappa for r in results) == c.ledger.count("synthesis") > 0
    assert sum(r.execution_calls for r in results) == c.ledger.count("execution")
    assert c.ledger.count("embedding") == 12
    for r in results:
        assert r.synthesis_calls == r.kappa
        if r.mode == "none":
            assert r.kappa == 0
        if r.synthesis_skipped:
            assert r.kappa == 0


def test_embedding_failure_defaults_to_none_and_is_not_logged(make_clients):
    c, ap = build(make_clients, None)
    train(ap, make_tasks("train", 3), iteration=1)
    c.server.set_dead(True, route=ROUTE_EMBEDDINGS)
    (r,) = train(ap, make_tasks("train", 4)[3:], iteration=5)
    assert r.mode == "none" and r.branch == "no_embedding" and not r.embedding_ok
    assert not r.logged and r.log_skip_reason == "embedding_failed"
    assert ap.memory[r.memory_record_id].embedding is None  # stored, never retrievable
    assert len(ap.outcome_log) == 2


def test_infrastructure_failure_is_recorded_but_not_logged(make_clients):
    c, ap = build(make_clients, None)
    train(ap, make_tasks("train", 2), iteration=1)
    (r,) = train(ap, make_tasks("train", 3)[2:], iteration=1, env=ErrandWorld(crash_at_step=1))
    assert r.outcome.infra_failure and not r.logged and r.log_skip_reason == "infrastructure_failure"
    assert ap.memory[r.memory_record_id].outcome.infra_failure
    assert len(ap.outcome_log) == 1
    # and the run continues: the next task is handled normally
    (nxt,) = train(ap, make_tasks("train", 4)[3:], iteration=1)
    assert nxt.logged


def _digest(run_dir: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.iterdir())
        if p.is_file() and p.name != "calls.jsonl"
    }


def test_heldout_evaluation_writes_nothing(make_clients, tmp_path):
    c, ap = build(make_clients, tmp_path)
    train(ap, make_tasks("train", 8), iteration=1)
    before = _digest(tmp_path)
    ap.memory.freeze()
    ap.outcome_log.freeze()
    held = [
        ap.run_task(t, ErrandWorld(), iteration=4, position=j, training=False, agent_config=AGENT)
        for j, t in enumerate(make_tasks("heldout", 5))
    ]
    assert _digest(tmp_path) == before
    assert all(r.memory_record_id is None and not r.logged for r in held)
    assert len(ap.memory) == 8


def test_guidance_is_discarded_nowhere_on_disk(make_clients, tmp_path):
    c, ap = build(make_clients, tmp_path)
    results = train(ap, make_tasks("train", 12), iteration=1) + train(ap, make_tasks("train", 12), iteration=2)
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in results))
    ap.memory.close()
    ap.outcome_log.close()
    c.ledger.close()
    # the guidance existed and reached the agent ...
    synthesized = [r for r in results if r.kappa == 1]
    assert synthesized, "the test needs at least one synthesis call to be meaningful"
    shown = [r for r in c.server.requests_for(ROUTE_CHAT) if GUIDANCE_MARKER in r["body"]["messages"][0]["content"]]
    assert shown, "synthesized guidance must have been injected into an agent prompt"
    # ... and no byte of it is stored anywhere in the run directory
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"trajectories.jsonl", "outcome_log.jsonl", "calls.jsonl", "episodes.jsonl"}
    for p in files:
        assert GUIDANCE_MARKER.encode() not in p.read_bytes(), f"guidance text found in {p}"
    # the outcome log holds exactly the seven B.5 fields
    for line in read_jsonl(tmp_path / "outcome_log.jsonl"):
        assert set(line.value) == set(FIELDS)


def test_memory_helps_on_errand_world(make_clients):
    """With the same scripted policy, retrieved experience turns failures into successes."""
    c, ap = build(make_clients, None)
    held = make_tasks("heldout", 6)
    before = [
        ap.run_task(t, ErrandWorld(), iteration=4, position=j, training=False, agent_config=AGENT).outcome.success
        for j, t in enumerate(held)
    ]
    train(ap, make_tasks("train", 12), iteration=1)
    train(ap, make_tasks("train", 12), iteration=2)
    ap_none = AntiPersistence(
        ap.memory, ap.outcome_log, ap.llm, ap.embedder, config=AntiPersistenceConfig(fixed_mode="none")
    )
    after = [
        ap_none.run_task(t, ErrandWorld(), iteration=4, position=j, training=False, agent_config=AGENT).outcome.success
        for j, t in enumerate(held)
    ]
    assert sum(after) > sum(before)


def test_fixed_mode_and_config_validation(make_clients):
    c, ap = build(make_clients, None, fixed_mode="strategic")
    results = train(ap, make_tasks("train", 3), iteration=7)
    assert all(r.mode == "strategic" and r.branch == "fixed" for r in results)
    with pytest.raises(ValueError, match="fixed_mode"):
        AntiPersistenceConfig(fixed_mode="persist")
    with pytest.raises(ValueError, match="budget"):
        AntiPersistenceConfig(budget=0)
