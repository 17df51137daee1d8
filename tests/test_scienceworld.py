"""ScienceWorld on its real engine: partition (Table 4), oracle replay, agent episodes, failures."""

from __future__ import annotations

from collections import Counter

import pytest

from antipersist_lib.core.agent import AgentConfig, run_episode
from antipersist_lib.envs.partitions import PAPER_COUNTS, PARTITION_SEED, load_partition
from antipersist_lib.envs.scienceworld import ScienceWorldEnvironment, draw_scienceworld_variations
from antipersist_lib.testing.loopback_server import QueueResponder

PART = load_partition("scienceworld")
POOLS = PART.drawn_with["pools"]


def test_partition_matches_table4():
    assert len(PART.train) == PAPER_COUNTS["scienceworld"]["train"] == 150
    assert len(PART.heldout) == PAPER_COUNTS["scienceworld"]["heldout"] == 60
    assert len(POOLS) == 30
    train_types = Counter(t.task_type for t in PART.train)
    held_types = Counter(t.task_type for t in PART.heldout)
    assert set(train_types) == set(held_types) == set(POOLS)
    assert set(train_types.values()) == {5} and set(held_types.values()) == {2}
    assert [t.task_id for t in PART.train] == list(range(150))
    assert all(t.split == "train" for t in PART.train) and all(t.split == "heldout" for t in PART.heldout)


def test_partition_is_non_overlapping_and_uses_engine_splits():
    for name, (train, dev, test) in POOLS.items():
        tr = {t.env_args["variation"] for t in PART.train if t.task_type == name}
        he = {t.env_args["variation"] for t in PART.heldout if t.task_type == name}
        assert not tr & he
        assert he <= set(test)  # held-out = unseen (engine test) variations
        assert tr <= set(train) | set(dev)
        if len(train) >= 5:
            assert tr <= set(train)


def test_partition_draw_is_reproducible_without_the_engine():
    drawn = draw_scienceworld_variations({n: tuple(v) for n, v in POOLS.items()}, seed=PART.seed)
    for name, (tr, he) in drawn.items():
        assert tr == sorted(t.env_args["variation"] for t in PART.train if t.task_type == name)
        assert he == sorted(t.env_args["variation"] for t in PART.heldout if t.task_type == name)
    other = draw_scienceworld_variations({n: tuple(v) for n, v in POOLS.items()}, seed=PARTITION_SEED + 1)
    assert other != drawn


def test_partition_hash_is_stable():
    assert PART.hash == load_partition("scienceworld").hash and len(PART.hash) == 16


@pytest.fixture(scope="module")
def sw():
    # The engine's own step limit (default 100) would stop gold paths that are longer than
    # that (inclined-plane and genetics tasks take 100-370 steps), so the oracle lifts it.
    with ScienceWorldEnvironment(env_step_limit=100_000) as env:
        yield env


@pytest.mark.slow
def test_stored_pools_are_the_engines(sw):
    names = sw.task_names()
    assert names == list(POOLS)
    for name in names[::6]:
        assert [sorted(x) for x in sw.variations(name)] == POOLS[name]


#: (task type, split, position): one task of 10 different types, across both splits.
ORACLE_SAMPLE = [t for i, t in enumerate(PART.train) if i % 25 == 0] + [
    t for i, t in enumerate(PART.heldout) if i % 15 == 7
]


@pytest.mark.slow
@pytest.mark.parametrize("task", ORACLE_SAMPLE, ids=lambda t: f"{t.split}-{t.task_type}-v{t.env_args['variation']}")
def test_oracle_gold_path_succeeds(sw, task):
    gold = sw.gold_actions(task)
    obs = sw.reset(task)
    assert task.instruction.split(".")[0] in obs
    for action in gold:
        if sw.step(action).done:
            break
    assert sw.success and sw.score >= 100


@pytest.mark.slow
def test_invalid_action_and_valid_actions(sw):
    task = PART.heldout[0]
    sw.reset(task)
    r = sw.step("fly to the moon")
    assert not r.valid and sw.episode_stats.invalid == 1 and sw.episode_stats.steps == 1
    acts = sw.valid_actions()
    assert "look around" in acts
    info = sw.engine_info()
    assert info["scienceworld"] == "1.2.3" and info["java"] and info["simplification"] == "easy"


@pytest.mark.slow
def test_agent_episode_on_the_engine(sw, make_clients):
    task = next(t for t in PART.train if t.task_type == "find-living-thing")
    gold = sw.gold_actions(task)
    assert len(gold) < 50
    c = make_clients(QueueResponder([f"Thought: next step.\nAction: {a}" for a in gold]))
    res = run_episode(sw, task, c.llm, config=AgentConfig(max_steps=50))
    assert res.outcome.success and res.outcome.score >= 100 and not res.outcome.infra_failure
    assert res.trajectory.n_steps == len(gold) == c.ledger.count("execution")


@pytest.mark.slow
def test_killed_jvm_is_an_infrastructure_failure_and_the_adapter_recovers(make_clients):
    env = ScienceWorldEnvironment()
    task = PART.train[5]
    env.reset(task)

    def kill_then_act(request):
        env._env._gateway.java_process.kill()  # the engine dies mid-episode
        env._env._gateway.java_process.wait(timeout=30)
        return "Action: look around"

    c = make_clients(QueueResponder([], default="Action: look around"))
    first = run_episode(env, task, c.llm, config=AgentConfig(max_steps=3))
    assert first.outcome.success is False and not first.outcome.infra_failure
    c2 = make_clients(kill_then_act)
    res = run_episode(env, task, c2.llm, config=AgentConfig(max_steps=3))
    assert res.outcome.infra_failure and not res.outcome.success and res.outcome.error
    assert "the JVM died (killed by signal 9" in res.outcome.error  # the signal is named, not just 'unavailable'
    # the next episode starts a fresh JVM
    again = run_episode(env, task, c.llm, config=AgentConfig(max_steps=2))
    assert not again.outcome.infra_failure
    env.close()
