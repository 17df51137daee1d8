"""AppWorld adapter: clear errors without the package or its data, code extraction, episodes on
a fake ``appworld`` module (code reaches only ``world.execute``), and the F.1 task sample."""

from __future__ import annotations

import random
import sys
import types
from types import SimpleNamespace

import pytest

import antipersist_lib.envs.appworld as aw
from antipersist_lib.envs import make_env
from antipersist_lib.envs.appworld import (
    F1_N_TASKS,
    AppWorldEnvironment,
    appworld_tasks,
    load_appworld_task_ids,
    sample_appworld_tasks,
)
from antipersist_lib.envs.partitions import PARTITION_SEED
from antipersist_lib.errors import BenchmarkUnavailableError, InfrastructureError
from antipersist_lib.records import Task
from antipersist_lib.replies import code_or_reply

INSTALL_STEPS = ("pip install appworld", "appworld install", "appworld download data", "APPWORLD_ROOT")


def appworld_task(tid: str = "82e2fac_1", i: int = 0) -> Task:
    return Task(task_id=i, benchmark="appworld", task_type="appworld", split="heldout", env_args={"task_id": tid})


# -- missing package / data ----------------------------------------------------------------


def test_missing_package_names_install_steps(monkeypatch):
    monkeypatch.setitem(sys.modules, "appworld", None)  # import appworld -> ImportError, as here
    with pytest.raises(BenchmarkUnavailableError) as info:
        AppWorldEnvironment()
    assert all(step in str(info.value) for step in INSTALL_STEPS)
    with pytest.raises(BenchmarkUnavailableError):
        make_env("appworld")
    with pytest.raises(BenchmarkUnavailableError):
        load_appworld_task_ids("dev")


def test_package_really_absent_here():
    try:
        import appworld  # noqa: F401
    except ImportError:
        with pytest.raises(BenchmarkUnavailableError, match="appworld download data"):
            AppWorldEnvironment(experiment_name="x")
    else:  # pragma: no cover - only where AppWorld is installed
        pytest.skip("appworld is installed in this environment")


# -- a fake appworld module ----------------------------------------------------------------


class FakeTracker:
    def __init__(self, passes: int, fails: int) -> None:
        self.passes = [{"requirement": f"r{i}", "label": None} for i in range(passes)]
        self.failures = [{"requirement": f"f{i}", "trace": "", "label": None} for i in range(fails)]
        self.num_tests = passes + fails
        self.success = fails == 0


class FakeWorld:
    """Records the code it receives; completes on complete_task, answers 42 correctly."""

    instances: list[FakeWorld] = []

    def __init__(self, task_id: str, experiment_name: str = "default", **options) -> None:
        if task_id == "missing_1":
            raise Exception("The task directory (/data/tasks/missing_1) doesn't exist.")
        if task_id == "broken_1":
            raise RuntimeError("database is locked")
        self.task_id, self.experiment_name, self.options = task_id, experiment_name, options
        self.task = SimpleNamespace(
            instruction="How many songs are in my Spotify library?",
            supervisor=SimpleNamespace(
                first_name="Ada", last_name="Lovelace", email="ada@example.com", phone_number="5550100"
            ),
        )
        self.executed: list[str] = []
        self.completed = False
        self.answer = None
        self.entered = self.exited = False
        self.evaluations = 0
        FakeWorld.instances.append(self)

    def __enter__(self):
        self.entered = True
        return self

    def __exit__(self, *exc):
        self.exited = True

    def execute(self, code: str) -> str:
        self.executed.append(code)
        if code == "explode()":
            raise RuntimeError("shell died")
        if "complete_task" in code:
            self.completed = True
            self.answer = "42" if "42" in code else "other"
            return "Execution successful."
        if "1/0" in code:
            return 'Execution failed. Traceback:\n  File "<python-input>", line 1\nZeroDivisionError: division by zero'
        return f"ran {len(code.splitlines())} line(s)"

    def task_completed(self) -> bool:
        return self.completed

    def evaluate(self):
        self.evaluations += 1
        if self.answer == "42":
            return FakeTracker(3, 0)
        return FakeTracker(1, 2)


@pytest.fixture
def fake_appworld(monkeypatch, tmp_path):
    mod = types.ModuleType("appworld")
    mod.AppWorld = FakeWorld
    mod.load_task_ids = lambda dataset="train": [f"{i:07x}_{j}" for i in range(20) for j in (1, 2, 3)]
    mod.__version__ = "0.0.fake"
    monkeypatch.setitem(sys.modules, "appworld", mod)
    (tmp_path / "data" / "tasks").mkdir(parents=True)
    monkeypatch.setenv("APPWORLD_ROOT", str(tmp_path))
    FakeWorld.instances.clear()
    return mod


@pytest.fixture
def no_inprocess_exec(monkeypatch):
    """Make any exec/eval called from the adapter module fail loudly."""

    def boom(*a, **k):
        raise AssertionError("the adapter must not exec/eval model code in the kit's process")

    monkeypatch.setattr(aw, "exec", boom, raising=False)
    monkeypatch.setattr(aw, "eval", boom, raising=False)
    monkeypatch.setattr(aw, "compile", boom, raising=False)


def test_missing_data_names_download(fake_appworld, monkeypatch, tmp_path):
    monkeypatch.setenv("APPWORLD_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(BenchmarkUnavailableError) as info:
        AppWorldEnvironment()
    assert "appworld download data" in str(info.value) and "nowhere" in str(info.value)


def test_episode_routes_code_only_through_execute(fake_appworld, no_inprocess_exec):
    marker = "ANTIPERSIST_APPWORLD_SENTINEL"
    with AppWorldEnvironment(experiment_name="f1_useful", dataset="dev") as env:
        obs = env.reset(appworld_task("82e2fac_1"))
        world = FakeWorld.instances[-1]
        assert world.task_id == "82e2fac_1" and world.experiment_name == "f1_useful" and world.entered
        assert "How many songs are in my Spotify library?" in obs
        assert "Ada Lovelace" in obs and "ada@example.com" in obs and "5550100" in obs

        reply = (
            f"Thought: look around first.\n```python\nimport builtins\nbuiltins.{marker} = 1\nprint(apis)\n```\nDone."
        )
        code = env.normalize_action(reply)
        r = env.step(code)
        assert world.executed == [f"import builtins\nbuiltins.{marker} = 1\nprint(apis)"]
        assert not hasattr(__import__("builtins"), marker)  # nothing ran in this process
        assert r.valid and not r.done and r.observation == "ran 3 line(s)"

        r = env.step("x = 1/0")
        assert not r.valid and not r.done and r.observation.startswith("Execution failed")

        r = env.step("   ")
        assert not r.valid and len(world.executed) == 2  # empty code is not sent

        r = env.step(env.normalize_action("```python\napis.supervisor.complete_task(answer=42)\n```"))
        assert r.done and r.valid and r.reward == 1.0
        assert r.info["evaluation"] == {"success": True, "pass_count": 3, "num_tests": 3, "score": 1.0}
        assert env.success is True and env.score == 1.0
        assert world.evaluations == 1  # evaluated once, then cached
        assert env.episode_stats.steps == 4 and env.episode_stats.invalid == 2
        after = env.step("print(1)")
        assert not after.valid and after.done and len(world.executed) == 3
        info = env.engine_info()
        assert info["appworld"] == "0.0.fake" and "world.evaluate().success" in info["success"]
    assert world.exited


def test_wrong_answer_and_unfinished_episode(fake_appworld):
    env = AppWorldEnvironment()
    env.reset(appworld_task("aaaaaaa_1"))
    r = env.step("apis.supervisor.complete_task(answer=7)")
    assert r.done and r.reward == pytest.approx(1 / 3)
    assert env.success is False and env.score == pytest.approx(1 / 3)

    env.reset(appworld_task("bbbbbbb_2"))  # the previous world is released
    first, second = FakeWorld.instances[-2:]
    assert first.exited and not second.exited
    env.step("print('thinking')")
    # the episode ends over budget without complete_task: AppWorld judges the final state
    assert second.evaluations == 0
    assert env.success is False and second.evaluations == 1
    env.close()
    assert second.exited
    with pytest.raises(InfrastructureError):
        env.reset(appworld_task())


def test_engine_failures(fake_appworld):
    env = AppWorldEnvironment()
    with pytest.raises(InfrastructureError):
        env.step("print(1)")  # before reset
    with pytest.raises(BenchmarkUnavailableError, match="missing_1"):
        env.reset(appworld_task("missing_1"))
    with pytest.raises(InfrastructureError, match="database is locked"):
        env.reset(appworld_task("broken_1"))
    env.reset(appworld_task())
    with pytest.raises(InfrastructureError, match="shell died"):
        env.step("explode()")
    with pytest.raises(ValueError, match="task_id"):
        env.reset(Task(task_id=0, benchmark="appworld", task_type="appworld"))


def test_registry_and_task_ids(fake_appworld):
    env = make_env("appworld", experiment_name="e")
    assert isinstance(env, AppWorldEnvironment) and env.benchmark == "appworld"
    assert env.valid_actions() is None and "complete_task" in env.action_help
    ids = load_appworld_task_ids("dev")
    assert len(ids) == 60
    picked = sample_appworld_tasks(ids)
    tasks = appworld_tasks(picked, dataset="dev")
    assert [t.env_args["task_id"] for t in tasks] == picked and [t.task_id for t in tasks] == list(range(30))
    assert all(t.benchmark == "appworld" and t.split == "heldout" and t.env_args["dataset"] == "dev" for t in tasks)


# -- code extraction -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, code",
    [
        (
            "Thought: list apps.\n```python\nprint(apis.api_docs.show_app_descriptions())\n```",
            "print(apis.api_docs.show_app_descriptions())",
        ),
        (
            "```py\nfor s in songs:\n    if s['liked']:\n        n += 1\n```",
            "for s in songs:\n    if s['liked']:\n        n += 1",
        ),
        ("```\nx = 1\n```", "x = 1"),
        ('```json\n{"a": 1}\n```\nthen\n```python\nprint(2)\n```\n```python\nprint(3)\n```', "print(2)"),
        ("Here:\n```python\nprint(1)\nprint(2)", "print(1)\nprint(2)"),  # cut off before the closing fence
        (
            "print(apis.spotify.login(username='a', password='b'))",
            "print(apis.spotify.login(username='a', password='b'))",
        ),
        ("`print(1)`", "print(1)"),
        ("\n\n    x = 1\n", "    x = 1"),
        ("", ""),
    ],
)
def test_code_or_reply(reply, code):
    assert code_or_reply(reply) == code


def test_normalize_action_extracts_code(fake_appworld):
    env = AppWorldEnvironment()
    assert env.normalize_action("Action:\n```python\nprint('hi')\n```") == "print('hi')"


# -- F.1 sampling --------------------------------------------------------------------------


def test_sample_appworld_tasks():
    ids = [f"{i:07x}_{j}" for i in range(19) for j in (1, 2, 3)]  # 57 ids, like AppWorld's dev set
    a = sample_appworld_tasks(ids)
    assert len(a) == F1_N_TASKS == len(set(a)) and set(a) <= set(ids)
    assert a == sample_appworld_tasks(ids, n=30, seed=PARTITION_SEED)
    shuffled = ids[:] + ids[:5]
    random.Random(1).shuffle(shuffled)
    assert sample_appworld_tasks(shuffled) == a  # independent of listing order and duplicates
    assert sample_appworld_tasks(ids, seed=43) != a
    with pytest.raises(ValueError):
        sample_appworld_tasks(ids[:10])


def test_agent_loop_passes_the_whole_code_block(fake_appworld, make_clients):
    """Multi-line code written by the model reaches world.execute intact (raw_actions)."""
    from antipersist_lib.core.agent import AgentConfig, run_episode
    from antipersist_lib.testing.loopback_server import QueueResponder

    replies = [
        "Thought: list the apps.\n```python\nfor app in ['spotify', 'gmail']:\n    print(app)\n```",
        "```python\napis.supervisor.complete_task(answer=42)\n```",
    ]
    c = make_clients(QueueResponder(replies))
    env = AppWorldEnvironment()
    res = run_episode(env, appworld_task("82e2fac_1"), c.llm, config=AgentConfig(max_steps=5))
    world = FakeWorld.instances[-1]
    assert world.executed[0] == "for app in ['spotify', 'gmail']:\n    print(app)"
    assert res.outcome.success and res.trajectory.n_steps == 2


# -- the F.1 partition and the command line ------------------------------------------------


def test_partition_builder_draws_30_distinct_ids_deterministically(monkeypatch):
    from antipersist_lib.envs.appworld import build_appworld_partition

    ids = [f"{i:07x}_{j}" for i in range(19) for j in (1, 2, 3)]
    monkeypatch.setattr(aw, "load_appworld_task_ids", lambda dataset="dev": list(reversed(ids)) + ids[:4])
    a, b = build_appworld_partition(), build_appworld_partition(seed=PARTITION_SEED)
    held = [t.env_args["task_id"] for t in a.heldout]
    train = [t.env_args["task_id"] for t in a.train]
    assert len(held) == F1_N_TASKS == len(set(held)) and set(held) <= set(ids)
    assert held == sample_appworld_tasks(ids)  # the adapter's seeded draw, whatever order the package lists
    assert sorted(train) == sorted(set(ids) - set(held)) and not set(train) & set(held)
    assert a == b and a.hash == b.hash
    assert build_appworld_partition(seed=43).hash != a.hash
    assert all(t.benchmark == "appworld" and t.split == "heldout" and t.env_args["dataset"] == "dev" for t in a.heldout)
    assert a.drawn_with["dataset"] == "dev" and a.drawn_with["n_task_ids"] == 57 and a.seed == PARTITION_SEED


@pytest.fixture
def no_partitions(tmp_path, monkeypatch):
    """An empty partition folder searched first, the kit's own never holding appworld.json here."""
    from antipersist_lib.envs import partitions

    d = tmp_path / "partitions"
    d.mkdir()
    monkeypatch.setattr(partitions, "partition_dirs", lambda: [d])
    return d


def test_cli_without_the_package_exits_2_and_records_nothing(tmp_path, monkeypatch, capsys, no_partitions):
    from antipersist_lib.cli import main

    monkeypatch.setitem(sys.modules, "appworld", None)
    out = tmp_path / "out"
    for args in (
        ["partition", "appworld", "--out", str(out / "appworld.json")],
        [
            "run",
            "--method",
            "frozen_skills",
            "--benchmark",
            "appworld",
            "--backbone",
            "qwen3-coder-next",
            "--out-root",
            str(out / "runs"),
            "--no-cache",
        ],
    ):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: AppWorld is not set up") and all(step in err for step in INSTALL_STEPS)
    assert main(["tasks", "--benchmark", "appworld"]) == 2
    assert "`python -m antipersist_lib partition appworld`" in capsys.readouterr().err
    assert not out.exists() and list(no_partitions.iterdir()) == []


def test_cli_builds_lists_and_runs_the_f1_partition(fake_appworld, tmp_path, monkeypatch, capsys, no_partitions):
    import json

    from antipersist_lib.cli import main
    from antipersist_lib.testing.loopback_server import LoopbackServer

    assert main(["partition", "appworld"]) == 0
    assert "wrote 30 training and 30 held-out tasks" in capsys.readouterr().out
    assert main(["tasks", "--benchmark", "appworld", "--json"]) == 0
    held = json.loads(capsys.readouterr().out)
    assert [t["env_args"]["task_id"] for t in held] == sample_appworld_tasks(fake_appworld.load_task_ids())
    done = "```python\napis.supervisor.complete_task(answer=42)\n```"
    with LoopbackServer(responder=lambda request: done) as srv:
        params = tmp_path / "params"
        for kind in ("backbones", "embeddings"):
            (params / kind).mkdir(parents=True)
            (params / kind / "loopback.yaml").write_text(f"model: scripted\nbase_url: {srv.base_url}\nmax_retries: 1\n")
        monkeypatch.setenv("ANTIPERSIST_PARAMS", str(params))
        assert (
            main(
                [
                    "run",
                    "--method",
                    "frozen_skills",
                    "--benchmark",
                    "appworld",
                    "--backbone",
                    "loopback",
                    "--embedding",
                    "loopback",
                    "--iterations",
                    "1",
                    "--train-per-iteration",
                    "1",
                    "--heldout-limit",
                    "2",
                    "--heldout-concurrency",
                    "1",
                    "--max-steps",
                    "3",
                    "--out-root",
                    str(tmp_path / "runs"),
                    "--no-cache",
                ]
            )
            == 0
        )
    assert "final held-out success 100.0%" in capsys.readouterr().out
    run = tmp_path / "runs" / "appworld" / "loopback" / "frozen_skills" / "seed42"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["engine"]["appworld"] == "0.0.fake" and manifest["n_heldout"] == 2
    opened = [w.task_id for w in FakeWorld.instances]
    assert opened[-2:] == [t["env_args"]["task_id"] for t in held[:2]]
