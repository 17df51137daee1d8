"""ALFWorld adapter and partition: Table 4 counts, oracle replays, old syntax, failure kinds.

The game files come from ``$ALFWORLD_DATA``; when it is unset, a session fixture unpacks the
archive in ``<repo root>/../shared/data/alfworld/`` into a temporary folder. Without either the
data-dependent tests FAIL (they never skip): the engine tests run in CI.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from antipersist_lib.core.agent import AgentConfig, run_episode
from antipersist_lib.envs import alfworld as alfworld_mod
from antipersist_lib.envs import make_env
from antipersist_lib.envs.alfworld import (
    CATEGORIES,
    CATEGORY_ORDER,
    DATA_ENV_VAR,
    GAMES_DIRNAME,
    ALFWorldEnvironment,
    build_alfworld_partition,
    category_of,
    instruction_from_observation,
    list_games,
    read_game,
    resolve_alfworld_data,
)
from antipersist_lib.envs.partitions import PAPER_COUNTS, PARTITION_SEED, load_partition
from antipersist_lib.errors import BenchmarkUnavailableError, InfrastructureError
from antipersist_lib.records import Task
from antipersist_lib.testing.loopback_server import QueueResponder

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data" / "alfworld"
#: valid_unseen per category (the 134 unseen games of Reflexion/ExpeL)
HELDOUT_PER_CATEGORY = {"put": 24, "clean": 31, "heat": 23, "cool": 21, "examine": 18, "puttwo": 17}

PART = load_partition("alfworld")


def _first(split: str, category: str) -> Task:
    return next(t for t in PART.split(split) if t.task_type == category)


#: two games per category, one training and one held-out
ORACLE_TASKS = [_first(s, c) for c in CATEGORY_ORDER for s in ("train", "heldout")]


@pytest.fixture
def env(alfworld_data: Path):
    with ALFWorldEnvironment(alfworld_data) as e:
        yield e


def walkthrough(data: Path, task: Task) -> list[str]:
    return list(read_game(data, task.env_args["game"])["walkthrough"])


# ------------------------------------------------------------------------------------------
# partition (no engine)


def test_committed_partition_matches_table4():
    assert PART.benchmark == "alfworld" and PART.seed == PARTITION_SEED
    assert len(PART.train) == PAPER_COUNTS["alfworld"]["train"] == 180
    assert len(PART.heldout) == PAPER_COUNTS["alfworld"]["heldout"] == 134
    # 30 per category, listed category by category in the fixed order
    assert [t.task_type for t in PART.train] == [c for c in CATEGORY_ORDER for _ in range(30)]
    held_counts = {c: sum(t.task_type == c for t in PART.heldout) for c in CATEGORY_ORDER}
    assert held_counts == HELDOUT_PER_CATEGORY
    for split, folder in (("train", "train/"), ("heldout", "valid_unseen/")):
        tasks = PART.split(split)
        assert [t.task_id for t in tasks] == list(range(len(tasks)))
        for t in tasks:
            assert t.benchmark == "alfworld" and t.split == split
            assert t.env_args["game"].startswith(folder) and t.env_args["game"].endswith("/game.tw-pddl")
            assert t.task_type == category_of(t.env_args["game"])
            assert t.instruction.startswith("Your task is to: ") and t.instruction.endswith(".")
    heldout_games = [t.env_args["game"] for t in PART.heldout]
    assert heldout_games == sorted(heldout_games)
    train_games = [t.env_args["game"] for t in PART.train]
    assert len(set(train_games)) == 180 and len(set(heldout_games)) == 134
    assert not set(train_games) & set(heldout_games)
    dw = PART.drawn_with
    assert dw["seed"] == PARTITION_SEED and dw["source_splits"] == {"train": "train", "heldout": "valid_unseen"}
    assert dw["per_category"]["train"] == {c: 30 for c in CATEGORY_ORDER}
    assert dw["per_category"]["heldout"] == HELDOUT_PER_CATEGORY
    assert dw["alfworld"] and dw["textworld"]


def test_heldout_is_the_whole_valid_unseen_split(alfworld_data):
    games = list_games(alfworld_data, "valid_unseen")
    assert len(games) == 134
    assert [t.env_args["game"] for t in PART.heldout] == games


def test_rebuilding_with_the_seed_reproduces_the_committed_partition(alfworld_data):
    rebuilt = build_alfworld_partition(alfworld_data, PARTITION_SEED)
    assert rebuilt.train == PART.train and rebuilt.heldout == PART.heldout
    assert rebuilt.hash == PART.hash
    for key in ("seed", "source_splits", "pool_sizes", "per_category", "unsolvable_excluded", "method"):
        assert rebuilt.drawn_with[key] == PART.drawn_with[key]
    fast = build_alfworld_partition(alfworld_data, PARTITION_SEED, with_instructions=False)
    assert [t.env_args for t in fast.train] == [t.env_args for t in PART.train]
    assert all(t.instruction == "" for t in fast.train)
    other = build_alfworld_partition(alfworld_data, PARTITION_SEED + 1, with_instructions=False)
    assert [t.env_args for t in other.train] != [t.env_args for t in PART.train]
    assert [t.env_args for t in other.heldout] == [t.env_args for t in PART.heldout]


def test_category_of():
    assert set(CATEGORIES.values()) == set(CATEGORY_ORDER)
    assert category_of("train/pick_two_obj_and_place-Pen-None-Box-1/trial_x/game.tw-pddl") == "puttwo"
    assert category_of("look_at_obj_in_light-Book-None-DeskLamp-308") == "examine"
    assert category_of("valid_unseen/pick_cool_then_place_in_recep-Apple-None-Fridge-1/t/game.tw-pddl") == "cool"
    with pytest.raises(ValueError):
        category_of("train/something_else-1/trial/game.tw-pddl")


# ------------------------------------------------------------------------------------------
# data location


def _fake_games(root: Path) -> Path:
    d = root / GAMES_DIRNAME / "valid_unseen"
    d.mkdir(parents=True)
    return root / GAMES_DIRNAME


def test_resolve_accepts_the_parent_or_the_games_folder(tmp_path, monkeypatch):
    games = _fake_games(tmp_path / "data")
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    assert resolve_alfworld_data(tmp_path / "data") == games.resolve()
    assert resolve_alfworld_data(games) == games.resolve()
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path / "data"))
    assert resolve_alfworld_data() == games.resolve()
    monkeypatch.setenv(DATA_ENV_VAR, str(games))
    assert resolve_alfworld_data() == games.resolve()


def test_missing_data_raises_benchmark_unavailable(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    # the fallbacks (<repo>/.data/alfworld, ~/.cache/alfworld) hold no games either
    monkeypatch.setattr(alfworld_mod, "fallback_data_dirs", lambda: [tmp_path / "repo-data", tmp_path / "cache"])
    with pytest.raises(BenchmarkUnavailableError) as ei:
        resolve_alfworld_data(empty)
    msg = str(ei.value)
    assert DATA_ENV_VAR in msg and str(empty) in msg
    assert "alfworld-download" in msg and "make alfworld-data" in msg
    with pytest.raises(BenchmarkUnavailableError, match=DATA_ENV_VAR):
        resolve_alfworld_data()  # nothing given, variable unset
    with pytest.raises(BenchmarkUnavailableError, match=DATA_ENV_VAR):
        ALFWorldEnvironment()
    monkeypatch.setenv(DATA_ENV_VAR, str(empty))
    with pytest.raises(BenchmarkUnavailableError, match=DATA_ENV_VAR):
        resolve_alfworld_data()


def test_without_the_variable_the_games_are_found_in_the_repo_then_in_alfworlds_default(tmp_path, monkeypatch):
    """``make run`` unpacks the games into <repo>/.data/alfworld: doctor and run find them there without
    ALFWORLD_DATA; then alfworld's own default (~/.cache/alfworld); the error says what was looked at."""
    import antipersist_lib.paths as paths

    repo, home = tmp_path / "repo", tmp_path / "home"
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    monkeypatch.setattr(paths, "repo_root", lambda start=None: repo)
    monkeypatch.setenv("HOME", str(home))
    assert alfworld_mod.fallback_data_dirs() == [repo / ".data" / "alfworld", home / ".cache" / "alfworld"]
    with pytest.raises(BenchmarkUnavailableError) as ei:
        resolve_alfworld_data()
    msg = str(ei.value)
    assert f"${DATA_ENV_VAR} is not set" in msg
    assert str(repo / ".data" / "alfworld") in msg and str(home / ".cache" / "alfworld") in msg
    cached = _fake_games(home / ".cache" / "alfworld")
    assert resolve_alfworld_data() == cached.resolve()
    unpacked = _fake_games(repo / ".data" / "alfworld")
    assert resolve_alfworld_data() == unpacked.resolve()  # the repo's copy comes first
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path / "elsewhere"))
    with pytest.raises(BenchmarkUnavailableError, match="elsewhere"):
        resolve_alfworld_data()  # a variable that is set is never second-guessed
    monkeypatch.setenv(DATA_ENV_VAR, "")  # empty means unset
    assert resolve_alfworld_data() == unpacked.resolve()


def test_the_engine_gets_the_folder_the_kit_resolved(tmp_path, monkeypatch):
    """alfworld's import reads $ALFWORLD_DATA (and sets it to ~/.cache/alfworld when unset): the kit sets it
    to the resolved folder first, so the engine and every later resolve of the process see the same games."""
    games = _fake_games(tmp_path / "data")
    monkeypatch.setenv(DATA_ENV_VAR, "")  # restored after the test
    alfworld_mod._load_engine(games)
    assert alfworld_mod.os.environ[DATA_ENV_VAR] == str(tmp_path / "data")
    assert resolve_alfworld_data() == games.resolve()
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path / "users"))
    alfworld_mod._load_engine(games)
    assert alfworld_mod.os.environ[DATA_ENV_VAR] == str(tmp_path / "users")  # a user's setting is kept


@pytest.mark.skipif(
    not (REPO_ROOT / ".data" / "alfworld" / GAMES_DIRNAME).is_dir(), reason="no games unpacked in this checkout"
)
def test_a_fresh_process_finds_the_unpacked_games_and_hands_them_to_alfworld(tmp_path):
    """The reported problem, end to end: without ALFWORLD_DATA, ``make run``'s copy is found and alfworld's
    own module sees the same folder."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != DATA_ENV_VAR}
    env["HOME"] = str(tmp_path)  # no ~/.cache/alfworld to fall back to
    code = (
        "from antipersist_lib.envs.alfworld import ALFWorldEnvironment\n"
        "e = ALFWorldEnvironment()\n"
        "import os, alfworld.info\n"
        "print(e.data_dir)\n"
        "print(os.environ['ALFWORLD_DATA'])\n"
        "print(alfworld.info.ALFWORLD_DATA)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    unpacked = REPO_ROOT / ".data" / "alfworld"
    assert out[:3] == [str((unpacked / GAMES_DIRNAME).resolve()), str(unpacked.resolve()), str(unpacked.resolve())]


# ------------------------------------------------------------------------------------------
# adapter without loading a game


def test_registry_builds_the_adapter_and_reports_the_engine(alfworld_data):
    with make_env("alfworld", data_dir=alfworld_data) as e:
        assert isinstance(e, ALFWorldEnvironment) and e.benchmark == "alfworld"
        info = e.engine_info()
        assert info["alfworld"] == "0.4.2" and info["textworld"] == "1.7.0"
        assert info["action_syntax"] == "move X to Y" and info["data_dir"] == str(alfworld_data)
        assert "move X to Y" in e.action_help and "take X from Y" in e.action_help
        assert e.valid_actions() is None  # nothing loaded yet
        with pytest.raises(InfrastructureError):
            e.step("look")


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("put apple 1 in fridge 1", "move apple 1 to fridge 1"),
        ("Put  Apple 1 on   CounterTop 2", "move apple 1 to countertop 2"),
        ("put mug 2 in/on coffeemachine 1", "move mug 2 to coffeemachine 1"),
        ("put pen 1 into drawer 3", "move pen 1 to drawer 3"),
        ("move apple 1 to fridge 1", "move apple 1 to fridge 1"),
        ("take apple 1", "take apple 1"),
        ("take apple 1 from fridge 1", "take apple 1 from fridge 1"),
        ("  Go   to Cabinet 1 ", "go to cabinet 1"),
    ],
)
def test_normalize_action(alfworld_data, raw, expected):
    with ALFWorldEnvironment(alfworld_data) as e:
        assert e.normalize_action(raw) == expected


def test_missing_game_file_is_benchmark_unavailable(alfworld_data, make_clients):
    task = Task(0, "alfworld", "put", split="heldout", env_args={"game": "valid_unseen/nope/trial/game.tw-pddl"})
    with ALFWorldEnvironment(alfworld_data) as e:
        with pytest.raises(BenchmarkUnavailableError, match="missing"):
            e.reset(task)
        res = run_episode(e, task, make_clients().llm)  # the agent loop: infrastructure, not agent
    assert res.outcome.infra_failure and not res.outcome.success and res.llm_calls == 0


# ------------------------------------------------------------------------------------------
# the real engine


@pytest.mark.slow
@pytest.mark.parametrize("task", ORACLE_TASKS, ids=lambda t: f"{t.split}-{t.task_type}-{t.task_id}")
def test_oracle_walkthrough_wins(env, alfworld_data, task):
    obs = env.reset(task)
    assert not obs.startswith("-=") and "Welcome" not in obs
    assert obs.endswith(task.instruction) and instruction_from_observation(obs) == task.instruction
    assert env.valid_actions() and not env.success
    actions = walkthrough(alfworld_data, task)
    res = None
    for i, action in enumerate(actions):
        assert not env.success, f"won before the end of the walkthrough (step {i})"
        res = env.step(env.normalize_action(action))
        assert res.valid, f"walkthrough step {i} {action!r} rejected: {res.observation!r}"
        assert res.done == (i == len(actions) - 1)
    assert res is not None and res.done and res.reward == 1.0
    assert env.success and env.score == 1.0
    assert env.episode_stats.steps == len(actions) and env.episode_stats.invalid == 0


@pytest.mark.slow
def test_old_put_syntax_is_translated_and_wins(env, alfworld_data):
    task = _first("heldout", "put")
    actions = walkthrough(alfworld_data, task)
    moves = [i for i, a in enumerate(actions) if a.startswith("move ")]
    assert moves, "a put game's walkthrough places its object with 'move X to Y'"
    obj, recep = actions[moves[-1]][len("move ") :].split(" to ", 1)
    old = f"put {obj} in/on {recep}"
    env.reset(task)
    for a in actions[: moves[-1]]:
        assert env.step(env.normalize_action(a)).valid
    raw = env.step(old)  # the installed engine does not know the old syntax...
    assert not raw.valid and raw.observation == "Nothing happens." and not env.success
    res = env.step(env.normalize_action(old))  # ...so the adapter translates it
    assert res.valid and res.done and env.success


@pytest.mark.slow
def test_invalid_action_is_counted(env):
    task = _first("heldout", "examine")
    env.reset(task)
    acts = env.valid_actions()
    assert acts and "look" in acts and "inventory" in acts
    bad = env.step(env.normalize_action("fly to the moon"))
    assert not bad.valid and bad.observation == "Nothing happens." and not bad.done and bad.reward == 0.0
    good = env.step("look")
    assert good.valid and good.info["admissible_commands"]
    assert (env.episode_stats.steps, env.episode_stats.valid, env.episode_stats.invalid) == (2, 1, 1)
    env.reset(task)  # counts are per episode
    assert env.episode_stats.steps == 0


@pytest.mark.slow
def test_agent_episode_with_scripted_model_succeeds(env, alfworld_data, make_clients):
    task = _first("train", "put")
    actions = walkthrough(alfworld_data, task)
    replies = [f"Thought: step {i + 1} of the plan.\nAction: {a}" for i, a in enumerate(actions)]
    # the model writes the placement in the old ReAct syntax; the agent loop normalizes it
    last_move = max(i for i, a in enumerate(actions) if a.startswith("move "))
    obj, recep = actions[last_move][len("move ") :].split(" to ", 1)
    replies[last_move] = f"Thought: place it.\nAction: put {obj} in/on {recep}"
    c = make_clients(QueueResponder(replies))
    res = run_episode(env, task, c.llm, config=AgentConfig(max_steps=50))
    out = res.outcome
    assert out.success and not out.infra_failure and not out.over_budget, out
    assert out.score == 1.0 and out.n_steps == len(actions) and out.n_invalid == 0
    assert res.trajectory.initial_observation.endswith(task.instruction)
    assert res.trajectory.steps[last_move].action == actions[last_move]
    system = c.server.requests[0]["body"]["messages"][0]["content"]
    assert "move X to Y" in system


@pytest.mark.slow
@pytest.mark.parametrize("how", ["closed", "raises"])
def test_engine_dying_mid_episode_is_an_infrastructure_failure(env, alfworld_data, make_clients, how):
    task = _first("heldout", "heat")
    actions = walkthrough(alfworld_data, task)
    calls = {"n": 0}

    def responder(request):
        calls["n"] += 1
        if calls["n"] == 3:  # kill the engine behind the adapter's back before the 3rd action
            if how == "closed":
                env._env.close()
            else:

                def boom(*_a, **_k):
                    raise OSError("textworld process died")

                env._env.step = boom
        return f"Action: {actions[calls['n'] - 1]}"

    c = make_clients(responder)
    res = run_episode(env, task, c.llm, config=AgentConfig(max_steps=50))
    out = res.outcome
    assert out.infra_failure and not out.success and not out.over_budget
    assert "engine failure at step 2" in out.error and "InfrastructureError" in out.error
    assert res.trajectory.n_steps == 3
    assert [s.action for s in res.trajectory.steps] == actions[:3]
    assert [s.valid for s in res.trajectory.steps] == [True, True, False]
    # the adapter recovers: the next reset starts a fresh engine
    obs = env.reset(task)
    assert obs.endswith(task.instruction) and env.step(env.normalize_action(actions[0])).valid
