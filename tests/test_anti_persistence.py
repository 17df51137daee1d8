"""Anti-Persistence per task (``protocol.run_task``), end to end over real HTTP with the scripted
ErrandWorld policy: the same class and config the protocol runs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from antipersist_lib.core.agent import AgentConfig
from antipersist_lib.core.config import AntiPersistenceConfig
from antipersist_lib.envs.errand_world import ErrandWorld, make_tasks
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.memory.outcome_log import FIELDS
from antipersist_lib.methods.anti_persistence import AntiPersistence
from antipersist_lib.methods.base import MethodContext
from antipersist_lib.runner.protocol import run_task
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ROUTE_EMBEDDINGS, FaultPlan
from antipersist_lib.testing.scripted_policy import GUIDANCE_MARKER, errand_policy

AGENT = AgentConfig(max_steps=4)


def build(make_clients, state_dir: Path, **params):
    c = make_clients(errand_policy, ledger_path=state_dir / "calls.jsonl")
    params = params or {"round_robin_iterations": 2}
    return c, method(c, state_dir, **params)


def method(c, state_dir: Path, **params) -> AntiPersistence:
    return AntiPersistence(MethodContext(c.llm, c.embedder, state_dir, 7, "errandworld", fsync=False), **params)


def run(ap, tasks, iteration, *, phase="train", env=None):
    env = env or ErrandWorld()
    return [
        run_task(ap, env, t, phase=phase, iteration=iteration, position=j, agent_config=AGENT)
        for j, t in enumerate(tasks)
    ]


def train(ap, tasks, iteration, env=None):
    return run(ap, tasks, iteration, env=env)


def kappa(r) -> int:
    return r["calls"]["synthesis"]


def test_training_updates_memory_and_log_with_skip_rule_k0(make_clients, tmp_path):
    c, ap = build(make_clients, tmp_path)
    tasks = make_tasks("train", 8)
    results = train(ap, tasks, iteration=1)
    assert len(ap.memory) == 8
    assert [r["meta"]["update_index"] for r in results] == list(range(8))
    assert not results[0]["meta"]["logged"] and results[0]["meta"]["log_skip_reason"] == "first_update"
    assert all(r["meta"]["logged"] for r in results[1:])
    assert len(ap.outcome_log) == 7
    # round-robin over positions 0..7 (the index within the iteration)
    assert [r["meta"]["mode"] for r in results] == ["none", "imitation", "strategic", "corrective"] * 2
    for r, rec in zip(results[1:], ap.outcome_log):
        success = r["outcome"]["success"]
        assert rec.mode == r["meta"]["mode"] and rec.raw_success == success
        assert rec.reward == pytest.approx(max(-1.0, min(1.0, int(success) - 0.05 * kappa(r))))
        assert rec.reward == pytest.approx(r["meta"]["reward"])
        assert rec.task_id == r["task"]["task_id"] and rec.task_type == r["task"]["task_type"]


def test_kappa_and_call_accounting(make_clients, tmp_path):
    c, ap = build(make_clients, tmp_path)
    results = train(ap, make_tasks("train", 12), iteration=1)
    assert sum(kappa(r) for r in results) == c.ledger.count("synthesis") > 0
    assert sum(r["calls"]["execution"] for r in results) == c.ledger.count("execution")
    assert c.ledger.count("embedding") == 12
    for r in results:
        assert r["calls"]["total"] == r["calls"]["execution"] + kappa(r)
        assert r["calls"]["post_episode_synthesis"] == 0  # Anti-Persistence synthesizes before acting only
        if r["meta"]["mode"] == "none":
            assert kappa(r) == 0
        if r["meta"]["synthesis_skipped"]:
            assert kappa(r) == 0


def test_embedding_failure_defaults_to_none_and_is_not_logged(make_clients, tmp_path):
    c, ap = build(make_clients, tmp_path)
    train(ap, make_tasks("train", 3), iteration=1)
    c.server.set_dead(True, route=ROUTE_EMBEDDINGS)
    (r,) = train(ap, make_tasks("train", 4)[3:], iteration=5)
    assert r["meta"]["mode"] == "none" and r["meta"]["branch"] == "no_embedding" and not r["embedding_ok"]
    assert not r["meta"]["logged"] and r["meta"]["log_skip_reason"] == "embedding_failed"
    assert ap.memory[r["meta"]["update_index"]].embedding is None  # stored, never retrievable
    assert len(ap.outcome_log) == 2


def test_infrastructure_failure_is_recorded_but_not_logged(make_clients, tmp_path):
    c, ap = build(make_clients, tmp_path)
    train(ap, make_tasks("train", 2), iteration=1)
    (r,) = train(ap, make_tasks("train", 3)[2:], iteration=1, env=ErrandWorld(crash_at_step=1))
    assert r["outcome"]["infra_failure"] and not r["meta"]["logged"]
    assert r["meta"]["log_skip_reason"] == "infrastructure_failure"
    assert ap.memory[r["meta"]["update_index"]].outcome.infra_failure
    assert len(ap.outcome_log) == 1
    # and the run continues: the next task is handled normally
    (nxt,) = train(ap, make_tasks("train", 4)[3:], iteration=1)
    assert nxt["meta"]["logged"]


def _digest(state_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(state_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(state_dir.rglob("*"))
        if p.is_file() and p.name != "calls.jsonl"
    }


def test_heldout_evaluation_writes_nothing(make_clients, tmp_path):
    c, ap = build(make_clients, tmp_path)
    train(ap, make_tasks("train", 8), iteration=1)
    before = _digest(tmp_path)
    assert set(before) == {"trajectories.jsonl", "outcome_log.jsonl", "trajectories.emb", "outcome_log.emb"}
    ap.freeze()
    held = run(ap, make_tasks("heldout", 5), iteration=4, phase="heldout")
    assert _digest(tmp_path) == before
    assert all("logged" not in r["meta"] and "post_episode_synthesis" not in r["calls"] for r in held)
    assert len(ap.memory) == 8 and len(ap.outcome_log) == 7


def test_guidance_is_discarded_nowhere_on_disk(make_clients, tmp_path):
    c, ap = build(make_clients, tmp_path)
    results = train(ap, make_tasks("train", 12), iteration=1) + train(ap, make_tasks("train", 12), iteration=2)
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text("".join(json.dumps(r) + "\n" for r in results))
    ap.close()
    c.ledger.close()
    # the guidance existed and reached the agent ...
    synthesized = [r for r in results if kappa(r) == 1]
    assert synthesized, "the test needs at least one synthesis call to be meaningful"
    shown = [r for r in c.server.requests_for(ROUTE_CHAT) if GUIDANCE_MARKER in r["body"]["messages"][0]["content"]]
    assert shown, "synthesized guidance must have been injected into an agent prompt"
    # ... and no byte of it is stored anywhere in the state folder, the episode records or the ledger
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"trajectories.jsonl", "outcome_log.jsonl", "calls.jsonl", "episodes.jsonl"}
    for p in files:
        assert GUIDANCE_MARKER.encode() not in p.read_bytes(), f"guidance text found in {p}"
    # the outcome log holds exactly the seven B.5 fields
    for line in read_jsonl(tmp_path / "outcome_log.jsonl"):
        assert set(line.value) == set(FIELDS)


def test_memory_helps_on_errand_world(make_clients, tmp_path):
    """With the same scripted policy, retrieved experience turns failures into successes."""
    c, ap = build(make_clients, tmp_path)
    held = make_tasks("heldout", 6)
    before = [r["outcome"]["success"] for r in run(ap, held, iteration=4, phase="heldout")]
    train(ap, make_tasks("train", 12), iteration=1)
    train(ap, make_tasks("train", 12), iteration=2)
    ap.close()
    # the same state folder, reopened with a fixed "none" policy: M_k and L_k are reloaded from disk
    ap_none = method(c, tmp_path, policy="fixed", fixed_mode="none")
    assert len(ap_none.memory) == 24 and len(ap_none.outcome_log) == 23
    after = [r["outcome"]["success"] for r in run(ap_none, held, iteration=4, phase="heldout")]
    assert sum(after) > sum(before)


def test_fixed_mode_and_config_validation(make_clients, tmp_path):
    c, ap = build(make_clients, tmp_path, policy="fixed", fixed_mode="strategic")
    results = train(ap, make_tasks("train", 3), iteration=7)
    assert all(r["meta"]["mode"] == "strategic" and r["meta"]["branch"] == "fixed" for r in results)
    with pytest.raises(ValueError, match="fixed_mode"):
        AntiPersistenceConfig(policy="fixed", fixed_mode="persist")
    with pytest.raises(ValueError, match="fixed_mode is only used with policy 'fixed'"):
        AntiPersistenceConfig(fixed_mode="strategic")
    with pytest.raises(ValueError, match="budget"):
        AntiPersistenceConfig(budget=0)
    with pytest.raises(ValueError, match=r"unknown Anti-Persistence parameter\(s\) \['gama'\]"):
        AntiPersistenceConfig.from_params({"gama": 0.9})
    with pytest.raises(ValueError, match="phase is 'eval'"):
        run(ap, make_tasks("train", 1), iteration=7, phase="eval")


def test_config_round_trips_through_method_parameters():
    """One config: the method's parameters are the config flattened, and back again."""
    cfg = AntiPersistenceConfig.from_params({"gamma": 0.99, "budget": 3, "max_record_chars": 2000, "persist": True})
    assert cfg.selector.gamma == 0.99 and cfg.budget == 3 and cfg.limits.max_record_chars == 2000 and cfg.persist
    assert AntiPersistenceConfig.from_params(cfg.params()) == cfg
    # the config's fields, plus how the frozen layer is shown (core/skill_layer.py) and what is planted
    # (core/planted.py: nothing by default)
    assert AntiPersistence.DEFAULTS == {
        **AntiPersistenceConfig().params(),
        "frozen_skills_retrieval": "top_b",
        "plant": None,
        "plant_condition": "none",
        "plant_iterations": 1,
    }


# --------------------------------------------------------------------------------------------
# held-out selection on the frozen state (heldout_selection) and B.3's embedding failure

#: every coverage device on: round-robin in iterations 1-3, warmup never met, always explore
COVERAGE = {"round_robin_iterations": 3, "warmup_per_mode": 50, "epsilon": 1.0}


def _trained(make_clients, tmp_path: Path, name: str, **params):
    """A method trained on 6 tasks of iteration 1, then frozen for held-out evaluation."""
    (tmp_path / name).mkdir()
    c, ap = build(make_clients, tmp_path / name, **params)
    train(ap, make_tasks("train", 6), iteration=1)
    ap.freeze()
    return c, ap


def test_heldout_decisions_exploit_the_frozen_log_by_default(make_clients, tmp_path):
    """Iteration 1 (round-robin), warmup pending and epsilon = 1: no held-out decision takes a
    coverage branch or draws epsilon; training decisions still do."""
    c, ap = _trained(make_clients, tmp_path, "exploit", **COVERAGE)
    assert ap.describe()["heldout_selection"] == "exploit"
    for iteration in (1, 6):
        held = run(ap, make_tasks("heldout", 6), iteration=iteration, phase="heldout")
        assert {r["meta"]["branch"] for r in held} <= {"local_ucb", "global_best"}
        assert all(r["meta"]["decision"]["epsilon_draw"] is None for r in held)
        assert all("heldout_selection='exploit'" in r["meta"]["decision"]["reason"] for r in held)
    ap.unfreeze()
    assert {r["meta"]["branch"] for r in train(ap, make_tasks("train", 4), iteration=1)} == {"round_robin"}


def test_heldout_decisions_as_training_keep_the_coverage_branches(make_clients, tmp_path):
    c, ap = _trained(make_clients, tmp_path, "as_training", heldout_selection="as_training", **COVERAGE)
    held = run(ap, make_tasks("heldout", 6), iteration=1, phase="heldout")
    assert [r["meta"]["branch"] for r in held] == ["round_robin"] * 6
    assert [r["meta"]["mode"] for r in held] == ["none", "imitation", "strategic", "corrective", "none", "imitation"]
    assert {r["meta"]["branch"] for r in run(ap, make_tasks("heldout", 2), iteration=6, phase="heldout")} == {"warmup"}
    explore = {"round_robin_iterations": 0, "warmup_per_mode": 0, "epsilon": 1.0}
    c2, ap2 = _trained(make_clients, tmp_path, "explore", heldout_selection="as_training", **explore)
    assert {r["meta"]["branch"] for r in run(ap2, make_tasks("heldout", 3), iteration=2, phase="heldout")} == {
        "epsilon"
    }
    with pytest.raises(ValueError, match="heldout_selection"):
        method(c2, tmp_path / "explore", heldout_selection="greedy")


def test_embedding_retries_zero_is_one_request_then_mode_none(make_clients, tmp_path):
    """B.3: one embedding call; if it fails the task runs in mode none, with no second request."""
    c, ap = _trained(make_clients, tmp_path, "zero", embedding_retries=0, round_robin_iterations=0)
    ap.unfreeze()
    sent = len(c.server.requests_for(ROUTE_EMBEDDINGS))
    c.server.faults = FaultPlan.scripted(["503"], routes=[ROUTE_EMBEDDINGS])  # one transient failure
    (r,) = train(ap, make_tasks("train", 7)[6:], iteration=2)
    assert r["meta"]["mode"] == "none" and r["meta"]["branch"] == "no_embedding" and not r["embedding_ok"]
    assert r["meta"]["log_skip_reason"] == "embedding_failed"
    assert len(c.server.requests_for(ROUTE_EMBEDDINGS)) == sent + 1
    assert ap.describe()["embedding_retries"] == 0  # recorded in the manifest's method_config
    failed = [x for x in read_jsonl(tmp_path / "zero" / "calls.jsonl") if x.value.get("ok") is False]
    assert len(failed) == 1 and failed[0].value["retries"] == 0


def test_embedding_retries_default_keeps_the_endpoint_retries(make_clients, tmp_path):
    c, ap = _trained(make_clients, tmp_path, "default", round_robin_iterations=0)
    ap.unfreeze()
    assert ap.describe()["embedding_retries"] is None
    sent = len(c.server.requests_for(ROUTE_EMBEDDINGS))
    c.server.faults = FaultPlan.scripted(["503"], routes=[ROUTE_EMBEDDINGS])
    (r,) = train(ap, make_tasks("train", 7)[6:], iteration=2)
    assert r["embedding_ok"] and r["meta"]["branch"] != "no_embedding"
    assert len(c.server.requests_for(ROUTE_EMBEDDINGS)) == sent + 2  # the failure, then its retry
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="embedding_retries"):
            AntiPersistenceConfig(embedding_retries=bad)


def test_the_baselines_read_table3_from_the_one_source():
    """Abstraction memory's and ExpeL's B and synthesis tokens, and every method's 500-character
    embedding prefix, come from ``core.config.TABLE3``: a changed source changes them (they were
    literals of their own before). A fresh interpreter imports the methods after the change."""
    import subprocess
    import sys

    script = """
import dataclasses, json
from antipersist_lib.core import config
config.TABLE3 = dataclasses.replace(
    config.TABLE3, budget=3, synthesis_max_tokens=77, task_filter="benchmark", embed_prefix_chars=11
)
from antipersist_lib.methods import abstraction_memory, base, expel, trajectory_memory

class Embedder:
    def embed(self, text, tags=None):
        self.text = text

class Ctx:
    embedder = Embedder()

class Task:
    instruction, key = "go", "t/1"

m = base.Method.__new__(base.Method)
m.ctx = Ctx()
m.embed_task(Task(), "x" * 40, "train", 1)
print(json.dumps({
    "am": [abstraction_memory.AbstractionMemory.DEFAULTS[k] for k in ("budget", "task_filter", "synthesis_max_tokens")],
    "tm": trajectory_memory.TrajectoryMemoryMethod.DEFAULTS["budget"],
    "expel": [expel.DEFAULTS["k_examples"], expel.DEFAULTS["max_tokens"]],
    "prefix": m.ctx.embedder.text.count("x"),
}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"am": [3, "benchmark", 77], "tm": 3, "expel": [3, 77], "prefix": 11}
    from antipersist_lib.core.config import TABLE3
    from antipersist_lib.serving.embeddings import OBSERVATION_PREFIX_CHARS

    assert TABLE3.embed_prefix_chars == OBSERVATION_PREFIX_CHARS == 500  # one number, read by the config
