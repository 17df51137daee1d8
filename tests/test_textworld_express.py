"""TextWorldExpress (the small-model proxy) on its real engine: partition, gold paths, episodes, failures."""

from __future__ import annotations

from collections import Counter

import pytest

from antipersist_lib.core.agent import AgentConfig, run_episode
from antipersist_lib.envs import BENCHMARKS, make_env
from antipersist_lib.envs.expert import expert_actions, has_expert_paths, replay_expert
from antipersist_lib.envs.partitions import PARTITION_SEED, load_partition
from antipersist_lib.envs.textworld_express import (
    GAMES,
    HELDOUT_PER_TYPE,
    TRAIN_PER_TYPE,
    TextWorldExpressEnvironment,
    draw_textworld_express_seeds,
    game_of,
    without_detours,
)
from antipersist_lib.errors import InfrastructureError
from antipersist_lib.records import Task, limited_tasks
from antipersist_lib.testing.loopback_server import QueueResponder

PART = load_partition("textworld_express")


def test_partition_has_every_type_in_both_folds():
    assert "textworld_express" in BENCHMARKS
    assert Counter(t.task_type for t in PART.train) == {k: TRAIN_PER_TYPE for k in GAMES}
    assert Counter(t.task_type for t in PART.heldout) == {k: HELDOUT_PER_TYPE for k in GAMES}
    assert {t.env_args["fold"] for t in PART.train} == {"train"}
    assert {t.env_args["fold"] for t in PART.heldout} == {"test"}  # evaluation on games never trained on
    assert [t.task_id for t in PART.heldout] == list(range(len(PART.heldout)))
    for t in PART.train + PART.heldout:
        assert (t.env_args["game"], t.env_args["params"]) == GAMES[t.task_type]
        assert t.instruction.startswith(("Your task is", "You are hungry"))


def test_partition_draw_is_reproducible_without_the_engine():
    sizes = PART.drawn_with["fold_sizes"]
    folds = {
        n: {"train": list(range(s["train"])), "test": list(range(20000, 20000 + s["test"]))} for n, s in sizes.items()
    }
    drawn = draw_textworld_express_seeds(folds, seed=PART.seed)
    for name, (tr, he) in drawn.items():
        assert tr == [t.env_args["seed"] for t in PART.train if t.task_type == name]
        assert he == [t.env_args["seed"] for t in PART.heldout if t.task_type == name]
    assert draw_textworld_express_seeds(folds, seed=PARTITION_SEED + 1) != drawn
    with pytest.raises(ValueError, match="needs 20 train"):
        draw_textworld_express_seeds({"twc": {"train": [1, 2], "test": list(range(50))}})


def test_a_small_heldout_subset_covers_every_type():
    assert Counter(t.task_type for t in limited_tasks(PART.heldout, 3)) == {k: 1 for k in GAMES}


def test_a_malformed_task_names_what_is_missing():
    with pytest.raises(ValueError, match="needs env_args game, params, seed and fold"):
        game_of(Task(0, "textworld_express", "twc", env_args={"game": "twc"}))
    bad = Task(0, "textworld_express", "twc", env_args={"game": "twc", "params": "", "seed": 1, "fold": "valid"})
    with pytest.raises(ValueError, match="fold is 'valid'"):
        game_of(bad)


@pytest.fixture(scope="module")
def twx():
    with make_env("textworld_express") as env:
        yield env


@pytest.mark.parametrize(
    "task",
    [next(t for t in PART.heldout if t.task_type == k) for k in GAMES] + [PART.train[0]],
    ids=lambda t: f"{t.split}-{t.task_type}",
)
def test_the_engines_gold_path_succeeds_when_replayed(twx, task):
    assert has_expert_paths(twx)
    actions = expert_actions(twx, task)
    assert actions and "look around" not in actions[:1]  # the reset already described the room
    traj, outcome = replay_expert(twx, task)
    assert outcome.success and outcome.score == pytest.approx(1.0) and outcome.n_invalid == 0
    assert traj.n_steps == len(actions)
    assert task.instruction.split(".")[0] in traj.initial_observation


def test_the_coin_walk_loses_its_detours_so_demonstrations_repeat(twx):
    assert without_detours(
        ["look around", "move west", "move east", "move west", "move east", "move south", "take coin"]
    ) == [
        "look around",
        "move south",
        "take coin",
    ]
    assert without_detours(["move north", "move west", "move east", "move south", "take coin"]) == ["take coin"]
    assert without_detours(["open fridge", "take apple", "move east"]) == ["open fridge", "take apple", "move east"]
    task = next(t for t in PART.heldout if t.task_type == "coin")
    assert len({tuple(twx.gold_actions(task)) for _ in range(8)}) == 1  # the engine's walk alone differs


def test_invalid_action_partial_score_and_valid_actions(twx):
    task = next(t for t in PART.heldout if t.task_type == "twc")
    obs = twx.reset(task)
    assert obs.startswith("Your task is to pick up objects")
    r = twx.step("fly to the moon")
    assert not r.valid and not r.done and twx.episode_stats.invalid == 1
    gold = twx.gold_actions(task)
    twx.reset(task)
    takes = [a for a in gold if a.startswith("take ")]
    puts = [a for a in gold if a.startswith(("put ", "open "))]
    for a in takes:
        assert a in twx.valid_actions()
        assert twx.step(a).valid
    taken = twx.score
    # one of two items put away: partial credit that grows, no success yet
    first_put = next(i for i, a in enumerate(puts) if a.startswith("put "))
    for a in puts[: first_put + 1]:
        twx.step(a)
    assert 0 < taken < twx.score < 1 and not twx.success
    info = twx.engine_info()
    assert info["textworld_express"] == "1.1.0" and info["java"] and "proxy" in info


def test_an_agent_episode_on_the_engine(twx, make_clients):
    task = next(t for t in PART.train if t.task_type == "coin")
    gold = twx.gold_actions(task)
    c = make_clients(QueueResponder([f"Thought: next step.\nAction: {a}" for a in gold]))
    res = run_episode(twx, task, c.llm, config=AgentConfig(max_steps=30))
    assert res.outcome.success and not res.outcome.infra_failure
    assert res.trajectory.n_steps == len(gold) == c.ledger.count("execution")


def test_a_killed_jvm_is_an_infrastructure_failure_that_names_the_signal(make_clients):
    env = TextWorldExpressEnvironment()
    task = PART.train[0]
    env.reset(task)
    proc = env._env._gateway.java_process
    proc.kill()  # the engine dies mid-episode
    proc.wait(timeout=30)
    with pytest.raises(InfrastructureError, match="killed by signal 9"):
        env.step("look around")
    c = make_clients(QueueResponder([], default="Action: look around"))
    again = run_episode(env, task, c.llm, config=AgentConfig(max_steps=2))  # a fresh JVM
    assert not again.outcome.infra_failure and again.trajectory.n_steps == 2
    env.close()
