"""In-context demonstrations (agent option ``icl_examples``): which training tasks are shown, the
on-disk cache, the rendering in the agent's own reply format, the budget, the option's checks,
the protocol's wiring (manifest, episode records, system prompt) and, marked slow, expert replays
on the real ALFWorld and ScienceWorld engines.

The fast tests use ErrandWorld with an expert of the test's own (``expert_actions``), so a replay
is a real episode of a real (tiny) engine; nothing here is a model result.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from antipersist_lib.core import prompts
from antipersist_lib.core.actions import parse_action
from antipersist_lib.core.agent import AgentConfig, icl_chars_needed
from antipersist_lib.core.demonstrations import (
    Demonstration,
    DemonstrationLibrary,
    candidate_order,
    render_block,
    render_demonstration,
)
from antipersist_lib.envs.base import StepResult
from antipersist_lib.envs.errand_world import HOME, ErrandWorld, make_tasks
from antipersist_lib.envs.expert import expert_actions, has_expert_paths, replay_expert
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.records import EpisodeOutcome, Partition, Step, Task, Trajectory
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

BENCH = "alfworld"  # the fake engine poses as a benchmark with expert paths (RunSpec checks the name)


class ExpertErrands(ErrandWorld):
    """ErrandWorld plus an expert: fetch the object from its home room, carry it to the target.
    Tasks listed in ``broken`` get an expert path that never drops the object (its replay fails).
    ``resets`` counts episodes started, i.e. replays plus agent episodes."""

    benchmark = BENCH
    resets = 0

    def __init__(self, broken: frozenset[int] = frozenset(), long_text: bool = False, **kw) -> None:
        super().__init__(**kw)
        self.broken = broken
        self.long_text = long_text

    def expert_actions(self, task: Task) -> list[str]:
        obj, target = task.env_args["object"], task.env_args["target"]
        plan = [f"go to {HOME[obj]}", f"take {obj}", f"go to {target}", f"drop {obj}"]
        return plan[:-1] if task.task_id in self.broken else plan

    def _reset(self, task: Task) -> str:
        type(self).resets += 1
        obs = super()._reset(task)
        return ("A long description of the hall. " * 40 + obs) if self.long_text else obs

    def _step(self, action: str) -> StepResult:
        res = super()._step(action)
        if self.long_text:
            return StepResult(res.observation + " Nothing else of note." * 30, res.reward, res.done, res.valid)
        return res


def partition(n_train: int = 12, n_heldout: int = 4) -> Partition:
    return Partition(
        BENCH,
        0,
        {"test": True},
        tuple(make_tasks("train", n_train, BENCH)),
        tuple(make_tasks("heldout", n_heldout, BENCH)),
    )


@pytest.fixture(autouse=True)
def _count_from_zero():
    ExpertErrands.resets = 0


def test_expert_replay_plays_the_engine_and_reports_its_outcome():
    env = ExpertErrands(broken=frozenset({1}))
    ok, bad = make_tasks("train", 2, BENCH)
    traj, outcome = replay_expert(env, ok)
    assert [s.action for s in traj.steps] == expert_actions(env, ok)
    assert outcome.success and traj.steps[-1].observation.endswith("Task complete.")
    assert traj.initial_observation.startswith(ok.instruction)
    _, failed = replay_expert(env, bad)
    assert not failed.success and failed.n_steps == 3
    assert has_expert_paths(env) and not has_expert_paths(ErrandWorld())
    with pytest.raises(ValueError, match="benchmark 'errandworld' has no expert paths"):
        expert_actions(ErrandWorld(), ok)


def test_demonstrations_are_training_tasks_of_the_same_type_never_the_task(tmp_path):
    part = partition()
    env = ExpertErrands(broken=frozenset({0, 2}))  # two failing replays: an apple (fruit) and a book (item)
    lib = DemonstrationLibrary(part, seed=7, count=2, cache_dir=tmp_path)
    lib.prepare(env, {t.task_type for t in part.train + part.heldout})
    train_keys = {t.key: t for t in part.train}
    ids = lib.describe()["train_task_ids"]
    assert set(ids) == {"bring_fruit", "bring_item"} and all(len(v) == 3 for v in ids.values())
    assert not {0, 2} & set(ids["bring_item"] + ids["bring_fruit"])
    for task in part.train + part.heldout:
        shown = lib.for_task(task)
        assert len(shown) == 2
        for d in shown:
            assert d.task.key in train_keys and train_keys[d.task.key] == d.task  # training split only
            assert d.task.task_type == task.task_type and d.task.key != task.key
            assert d.outcome.success and d.trajectory.steps[-1].done
    # the task that heads its type's list gets the next two instead of itself
    first = next(t for t in part.train if t.task_id == ids["bring_item"][0])
    assert [d.task.task_id for d in lib.for_task(first)] == ids["bring_item"][1:3]
    # the order is the seeded candidate order (successes only); held-out tasks were never replayed
    order = [t.task_id for t in candidate_order(part.train, "bring_item", 7) if t.task_id != 2]
    assert ids["bring_item"] == order[:3]
    assert ExpertErrands.resets == lib.replays <= 8
    # deterministic per seed; another seed draws another order
    again = DemonstrationLibrary(part, seed=7, count=2, cache_dir=tmp_path / "other")
    again.prepare(ExpertErrands(broken=frozenset({0, 2})), {"bring_item", "bring_fruit"})
    assert again.describe()["train_task_ids"] == ids
    base = [t.task_id for t in candidate_order(part.train, "bring_item", 7)]
    assert any([t.task_id for t in candidate_order(part.train, "bring_item", s)] != base for s in range(8, 13))


def test_a_type_without_a_successful_replay_shows_none(tmp_path, caplog):
    part = partition()
    fruit = frozenset(t.task_id for t in part.train if t.task_type == "bring_fruit")
    lib = DemonstrationLibrary(part, seed=5, count=1, cache_dir=tmp_path)
    lib.prepare(ExpertErrands(broken=fruit), {"bring_fruit", "bring_item"})
    assert lib.replays == len(fruit) + 2  # every fruit candidate tried, two items suffice
    assert lib.describe()["train_task_ids"]["bring_fruit"] == [] and "shown none" in caplog.text
    held = next(t for t in part.heldout if t.task_type == "bring_fruit")
    assert lib.for_task(held) == [] and render_block(lib.for_task(held), 6000) == ""
    again = DemonstrationLibrary(part, seed=5, count=1, cache_dir=tmp_path)
    again.prepare(ExpertErrands(broken=fruit), {"bring_fruit"})
    assert again.replays == 0  # the failed tries are cached too


def test_demonstrations_are_cached_so_a_second_library_does_not_touch_the_engine(tmp_path):
    part = partition()
    lib = DemonstrationLibrary(part, seed=3, count=2, cache_dir=tmp_path)
    lib.prepare(ExpertErrands(), {"bring_item", "bring_fruit"})
    assert lib.replays == 6 and ExpertErrands.resets == 6  # count + 1 per type, every replay succeeds
    files = sorted(p.name for p in lib.folder.glob("*.json"))
    assert files == ["bring_fruit.json", "bring_item.json"]

    class NoEngine(ExpertErrands):
        def _reset(self, task):
            raise AssertionError("the cache should have answered")

    second = DemonstrationLibrary(part, seed=3, count=2, cache_dir=tmp_path)
    second.prepare(NoEngine(), {"bring_item", "bring_fruit"})
    assert second.replays == 0 and ExpertErrands.resets == 6
    task = next(t for t in part.heldout if t.task_type == "bring_item")
    assert [d.to_dict() for d in second.for_task(task)] == [d.to_dict() for d in lib.for_task(task)]
    # asking for more extends the cache: only the missing replays run
    more = DemonstrationLibrary(part, seed=3, count=3, cache_dir=tmp_path)
    more.prepare(ExpertErrands(), {"bring_item"})
    assert more.replays == 1 and [d.task.task_id for d in more.for_task(task)][:2] == [
        d.task.task_id for d in lib.for_task(task)
    ]
    # another seed is another file; a damaged file is rebuilt
    DemonstrationLibrary(part, seed=4, count=2, cache_dir=tmp_path).prepare(ExpertErrands(), {"bring_item"})
    assert (tmp_path / lib.folder.parent.name / "seed4" / "bring_item.json").is_file()
    lib.path("bring_fruit").write_text("{not json", encoding="utf-8")
    rebuilt = DemonstrationLibrary(part, seed=3, count=2, cache_dir=tmp_path)
    rebuilt.prepare(ExpertErrands(), {"bring_fruit"})
    assert rebuilt.replays == 3 and json.loads(lib.path("bring_fruit").read_text())["seed"] == 3


def _reply_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("Action:")]


def test_rendering_uses_the_agents_reply_format_and_parses_back_to_the_expert_actions(tmp_path):
    part = partition()
    env = ExpertErrands()
    lib = DemonstrationLibrary(part, seed=1, count=2, cache_dir=tmp_path)
    lib.prepare(env, {"bring_item", "bring_fruit"})
    task = part.heldout[1]
    shown = lib.for_task(task)
    block = render_block(shown, 6000)
    assert block.startswith(prompts.DEMONSTRATIONS_HEADER + "\n" + prompts.DEMONSTRATIONS_PREAMBLE)
    examples = re.split(r"^### Example \d+$", block, flags=re.MULTILINE)[1:]
    assert len(examples) == 2
    for demo, text in zip(shown, examples):
        replies = _reply_lines(text)
        # what the agent's own parser reads from each demonstrated reply is the expert's command
        assert [parse_action(r).action for r in replies] == expert_actions(env, demo.task)
        assert [s.action for s in demo.trajectory.steps] == expert_actions(env, demo.task)
        # every reply is followed by what the engine answered, in the agent's observation format
        lines = text.strip().splitlines()
        for r in replies:
            nxt = lines[lines.index(r) + 1]
            assert nxt.startswith("Observation: ")
        assert demo.trajectory.initial_observation in text and task.instruction not in text
        assert lines[-1] == prompts.DEMONSTRATION_END
    # the block goes first in the agent's system prompt, after the fixed prompt
    system = prompts.agent_system_prompt(env.action_help, [block, "## Method context"])
    assert system.index(prompts.DEMONSTRATIONS_HEADER) < system.index("## Method context")
    assert render_block([], 6000) == ""


def test_rejected_steps_are_left_out_and_a_think_or_reshaped_command_disqualifies_a_replay():
    from antipersist_lib.core.demonstrations import usable

    task = make_tasks("train", 1, BENCH)[0]
    ok = EpisodeOutcome(True, 1.0, 3)
    steps = (
        Step("go to garden", "You go to the garden.", 0, False, True),
        Step("dance", "Nothing happens.", 0, False, False),
        Step("take apple", "You take the apple. Task complete.", 1, True, True),
    )
    demo = Demonstration(task, Trajectory("start", steps), ok)
    text = render_demonstration(1, demo, 2000)
    assert [parse_action(r).action for r in _reply_lines(text)] == ["go to garden", "take apple"]
    assert "dance" not in text and usable(demo)
    for bad in ("think: where is it", 'take "apple".', "go  to garden"):
        odd = Demonstration(task, Trajectory("start", (Step(bad, "ok", 0, True, True),)), ok)
        assert not usable(odd), bad
    assert not usable(Demonstration(task, Trajectory("start", steps[:1]), EpisodeOutcome(False, 0.0, 1)))


def test_budget_clips_observations_then_middle_steps_and_never_exceeds_it(tmp_path):
    part = partition()
    env = ExpertErrands(long_text=True)
    lib = DemonstrationLibrary(part, seed=2, count=2, cache_dir=tmp_path)
    lib.prepare(env, {"bring_item"})
    task = next(t for t in part.heldout if t.task_type == "bring_item")
    shown = lib.for_task(task)
    full = render_block(shown, 100_000)
    assert len(shown[0].trajectory.initial_observation) > 1300
    # observations are cut even with room to spare: initial in the middle (both ends kept), steps at the end
    assert " ... " in full and shown[0].task.instruction in full
    assert max(len(line) for line in full.splitlines() if line.startswith("Observation: ")) <= 13 + 250
    for budget in (icl_chars_needed(2), 2000, 3000, 4000):
        block = render_block(shown, budget)
        assert len(block) <= budget, budget
        replies = [parse_action(r).action for r in _reply_lines(block)]
        assert replies, budget
        # whatever is kept is a real expert command, in order, with the opening step kept
        assert replies[0] == expert_actions(env, shown[0].task)[0]
    tight = render_block(shown, icl_chars_needed(2))
    assert "left out for space" in tight and prompts.DEMONSTRATION_END in tight


def test_option_values_are_checked_with_the_field_named():
    assert AgentConfig().icl_examples == 0  # the paper's setting: no demonstrations
    for bad in (-1, 11, True, 1.5, "2"):
        with pytest.raises(ValueError, match="icl_examples must be an integer in"):
            AgentConfig(icl_examples=bad)
    for bad in (100, 0, True, 3000.0):
        with pytest.raises(ValueError, match="icl_max_chars must be an integer >= 1000"):
            AgentConfig(icl_max_chars=bad)
    with pytest.raises(
        ValueError, match="icl_max_chars = 1000 leaves fewer than 600 characters for each of icl_examples = 3"
    ):
        AgentConfig(icl_examples=3, icl_max_chars=1000)
    common = dict(method="react", backbone="loopback", embedding="loopback")
    RunSpec(benchmark="alfworld", agent={"icl_examples": 2, "icl_max_chars": 4000}, **common)
    RunSpec(benchmark="scienceworld", agent={"icl_examples": 1}, **common)
    RunSpec(benchmark="webshop", agent={"icl_examples": 0}, **common)
    for bench in ("webshop", "appworld", "errandworld"):
        with pytest.raises(ValueError, match=rf"icl_examples = 2, but benchmark '{bench}' has no expert paths"):
            RunSpec(benchmark=bench, agent={"icl_examples": 2}, **common)
    with pytest.raises(ValueError, match="agent: icl_max_chars must be"):
        RunSpec(benchmark="alfworld", agent={"icl_examples": 1, "icl_max_chars": -5}, **common)
    with pytest.raises(ValueError, match="agent: icl_examples must be"):
        RunSpec(benchmark="alfworld", agent={"icl_examples": "two"}, **common)
    with pytest.raises(ValueError, match="count must be an integer >= 1"):
        DemonstrationLibrary(partition(), 0, 0, "unused")
    with pytest.raises(ValueError, match="benchmark 'errandworld' has no expert paths"):
        DemonstrationLibrary(partition(), 0, 1, "unused").prepare(ErrandWorld(), {"bring_item"})


def _spec(tmp_path, agent, **kw):
    return RunSpec(
        method="react",
        benchmark=BENCH,
        backbone="loopback",
        embedding="loopback",
        seed=11,
        iterations=1,
        train_per_iteration=3,
        max_steps=6,
        heldout_concurrency=2,
        heldout_limit=2,
        agent=agent,
        out_root=str(tmp_path / "runs"),
        cache_dir=str(tmp_path / "cache"),
        progress=False,
        **kw,
    )


def _run(spec, events):
    with LoopbackServer(responder=errand_policy) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", max_retries=1, backoff_base_s=0.01)
        run_cell(
            spec,
            endpoint=ep,
            embed_endpoint=ep,
            env_factory=ExpertErrands,
            partition=partition(),
            fsync=False,
            on_event=lambda kind, data: events.append((kind, data)),
        )
        firsts = [r["body"]["messages"][0] for r in srv.requests_for(ROUTE_CHAT)]
        agent = prompts.AGENT_SYSTEM.splitlines()[0]
        return [m["content"] for m in firsts if m.get("role") == "system" and agent in m["content"]]


def test_a_run_shows_demonstrations_records_them_and_resumes_without_replaying(tmp_path):
    events: list = []
    spec = _spec(tmp_path, {"icl_examples": 2, "icl_max_chars": 3000})
    systems = _run(spec, events)
    run_dir = spec.run_dir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["agent"]["icl_examples"] == 2 and manifest["agent"]["icl_max_chars"] == 3000
    ids = manifest["demonstrations"]["train_task_ids"]
    assert set(ids) == {"bring_item", "bring_fruit"} and all(len(v) == 3 for v in ids.values())
    assert "demonstrations_header" in manifest["prompt_hashes"]
    (built,) = [d for k, d in events if k == "demonstrations"]
    assert built["replays"] == 6
    assert (tmp_path / "cache" / "demonstrations").is_dir() and not (run_dir / "demonstrations").exists()
    records = [x.value for x in read_jsonl(run_dir / "episodes_train.jsonl")]
    records += [x.value for x in read_jsonl(run_dir / "episodes_heldout.jsonl")]
    assert len(records) == 5
    for rec in records:
        kind, tid = rec["task"]["task_type"], rec["task"]["task_id"]
        assert len(rec["demonstrations"]) == 2 and set(rec["demonstrations"]) <= set(ids[kind])
        if rec["phase"] == "train":
            assert tid not in rec["demonstrations"]
    assert systems and all(s.count("### Example ") == 2 and prompts.DEMONSTRATIONS_HEADER in s for s in systems)
    assert all(len(s.split(prompts.DEMONSTRATIONS_HEADER, 1)[1]) <= 3000 for s in systems)
    # a second session on the same run (and cache) replays nothing
    events.clear()
    _run(spec, events)
    (again,) = [d for k, d in events if k == "demonstrations"]
    assert again["replays"] == 0 and again["train_task_ids"] == ids
    # a run without a response cache keeps its replays in the run directory
    nocache = _spec(tmp_path, {"icl_examples": 1}, name="nocache")
    nocache = dataclasses.replace(nocache, cache_dir=None)
    _run(nocache, [])
    assert list((nocache.run_dir() / "demonstrations").rglob("*.json"))


def test_a_run_without_the_option_shows_none_and_keeps_its_old_manifest_shape(tmp_path):
    events: list = []
    spec = _spec(tmp_path, {})
    systems = _run(spec, events)
    manifest = json.loads((spec.run_dir() / "manifest.json").read_text())
    assert "icl_examples" not in manifest["agent"] and "demonstrations" not in manifest
    assert not any(k == "demonstrations" for k, _ in events) and ExpertErrands.resets > 0
    assert not any(prompts.DEMONSTRATIONS_HEADER in s for s in systems)
    rec = next(read_jsonl(spec.run_dir() / "episodes_train.jsonl")).value
    assert "demonstrations" not in rec
    # icl_examples: 0 written out is the same configuration (a run made before the option resumes)
    _run(_spec(tmp_path, {"icl_examples": 0}), [])


# -- the real engines ------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_engines_give_demonstrations_from_their_expert_paths(alfworld_data, tmp_path):
    from antipersist_lib.envs.alfworld import ALFWorldEnvironment, read_game
    from antipersist_lib.envs.partitions import load_partition
    from antipersist_lib.envs.scienceworld import ScienceWorldEnvironment

    # ALFWorld: two replays of "put" training games (one demonstration per task, plus a spare)
    part = load_partition("alfworld")
    lib = DemonstrationLibrary(part, seed=42, count=1, cache_dir=tmp_path)
    with ALFWorldEnvironment(alfworld_data) as env:
        lib.prepare(env, {"put"})
    assert lib.replays == 2
    held = next(t for t in part.heldout if t.task_type == "put")
    (demo,) = lib.for_task(held)
    assert demo.task in part.train and demo.task.task_type == "put" and demo.outcome.success
    walk = [a.lower() for a in read_game(alfworld_data, demo.task.env_args["game"])["walkthrough"]]
    block = render_block([demo], AgentConfig().icl_max_chars)
    assert [parse_action(r).action for r in _reply_lines(block)] == walk
    assert demo.task.instruction in block and "You arrive at" in block
    assert len(block) <= AgentConfig().icl_max_chars
    own = lib.for_task(demo.task)  # the demonstrated game itself gets the spare
    assert own and own[0].task.key != demo.task.key
    # ScienceWorld: one gold path, from a one-task training split
    sw = load_partition("scienceworld")
    one = Partition(
        "scienceworld",
        sw.seed,
        sw.drawn_with,
        tuple(t for t in sw.train if t.task_type == "lifespan-longest-lived")[:1],
        tuple(t for t in sw.heldout if t.task_type == "lifespan-longest-lived")[:1],
    )
    sw_lib = DemonstrationLibrary(one, seed=42, count=1, cache_dir=tmp_path)
    with ScienceWorldEnvironment() as env:
        sw_lib.prepare(env, {"lifespan-longest-lived"})
        (sdemo,) = sw_lib.for_task(one.heldout[0])
        gold = [" ".join(a.split()) for a in env.gold_actions(sdemo.task)]
    assert sdemo.outcome.success and sdemo.outcome.score >= 100 and sdemo.task == one.train[0]
    sblock = render_block([sdemo], 3000)
    replies = [parse_action(r).action for r in _reply_lines(sblock)]
    shown = [s.action for s in sdemo.trajectory.steps if s.valid]
    assert replies == shown and shown == [a for a in gold if a in shown][: len(shown)]
    assert len(sblock) <= 3000 and sdemo.task.instruction[:40] in sblock


def test_keep_ends_alternates_from_both_ends_within_the_budget():
    from antipersist_lib.textfit import keep_ends

    pieces = ["aaaa", "bbbb", "cccc", "dddd", "eeee"]  # 5 characters each with the newline
    assert keep_ends(pieces, 25) == (pieces[:3], pieces[3:])
    assert keep_ends(pieces, 15) == (["aaaa", "bbbb"], ["eeee"])
    assert keep_ends(pieces, 14) == (["aaaa"], ["eeee"])
    assert keep_ends(pieces, 4) == ([], [])
    assert keep_ends([], 100) == ([], [])
