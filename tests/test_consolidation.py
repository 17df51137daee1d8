"""Memory consolidation (faulty-memories §3-4): pools, batches, consolidators, regimes, evaluation.

Models are scripted over the loopback server (nothing here is a model result); the expert pools
replay real engine episodes (two ALFWorld games, one ScienceWorld variation).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from antipersist_lib.consolidation import prompts as CP
from antipersist_lib.consolidation.ace import ACE
from antipersist_lib.consolidation.awm import AWM, parse_workflows
from antipersist_lib.consolidation.bank import MemoryBank, MemoryEntry, load_bank
from antipersist_lib.consolidation.cheatsheet import DynamicCheatsheet
from antipersist_lib.consolidation.clin import CLIN
from antipersist_lib.consolidation.episodic import (
    FewShot,
    KeepCurator,
    all_logs,
    few_shot,
    one_pass_keep,
)
from antipersist_lib.consolidation.pool import (
    PoolRecord,
    batches,
    expert_pool,
    load_pool,
    pool_from_runs,
    save_pool,
    summarize,
    summarize_trajectory,
    summary_coverage,
)
from antipersist_lib.consolidation.regimes import (
    BANK_FILE,
    SNAPSHOTS_FILE,
    build_memory,
    incremental_keep,
    make_builder,
)
from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.envs.alfworld import category_of, read_game
from antipersist_lib.envs.partitions import load_partition
from antipersist_lib.errors import ReplyParseError
from antipersist_lib.methods import MethodContext, make_method, validate_method_params
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory
from antipersist_lib.replies import extract_json
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ScriptedResponder, bag_of_words_embedding

# -- helpers -------------------------------------------------------------------------------------


def rec(rid: str, kind: str = "put", success: bool = True, n_steps: int = 2, instruction: str = "") -> PoolRecord:
    steps = tuple(
        Step(f"go to place {i}", f"You arrive at place {i}. On it you see a thing {i}.", 0.0, i == n_steps - 1)
        for i in range(n_steps)
    )
    task = Task(0, "alfworld", kind, instruction or f"Your task is to: do the {kind} job {rid}.", "train", {})
    outcome = EpisodeOutcome(success, float(success), n_steps, 0)
    return PoolRecord(rid, task, Trajectory(f"You are in a room ({rid}).", steps), outcome, "test")


def make_pool(kinds=("clean", "heat", "put"), per: int = 4) -> list[PoolRecord]:
    return [rec(f"{k}{i}", k) for k in kinds for i in range(per)]


def by_system(system: str):
    return lambda req: (req.get("messages") or [{}])[0].get("content") == system


def chats(c, system: str) -> list[str]:
    """User prompts the server received under one system message."""
    return [
        r["body"]["messages"][1]["content"] for r in c.server.requests_for(ROUTE_CHAT) if by_system(system)(r["body"])
    ]


def bank_of(method: str, *entries: MemoryEntry, next_id: int = 10, capacity=None) -> MemoryBank:
    return MemoryBank(method, entries=list(entries), next_id=next_id, capacity=capacity)


class CountingBuilder:
    """Records every update's batch; adds one entry per record (no model)."""

    name = "counting"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def update(self, bank: MemoryBank, batch) -> MemoryBank:
        self.calls.append([r.rid for r in batch])
        out = bank.copy()
        out.step += 1
        for r in batch:
            out.entries.append(MemoryEntry(out.new_id("c"), r.rid, kind="rule", sources=[r.rid], created_step=out.step))
        out.history.append({"step": out.step, "batch": [r.rid for r in batch]})
        return out


# -- expert pools on the real engines --------------------------------------------------------------


def test_alfworld_expert_pool_replays_the_walkthrough_on_the_engine(alfworld_data, tmp_path):
    pool = expert_pool("alfworld", 1, seed=3, types=("put", "clean"), data_dir=alfworld_data)
    assert [r.task_type for r in pool] == ["put", "clean"]
    for r in pool:
        game = r.task.env_args["game"]
        assert category_of(game) == r.task_type and game.startswith("train/")
        walk = [a.lower() for a in read_game(alfworld_data, game)["walkthrough"]]
        assert [s.action for s in r.trajectory.steps] == walk  # the expert's own actions, all of them
        assert r.outcome.success and r.outcome.score == 1.0 and r.outcome.n_steps == len(walk)
        assert all(s.valid and s.observation.strip() for s in r.trajectory.steps)
        assert any(s.observation.startswith("You arrive at") for s in r.trajectory.steps)  # engine text
        assert r.trajectory.steps[-1].done and not any(s.done for s in r.trajectory.steps[:-1])
        assert r.trajectory.initial_observation.endswith(r.task.instruction)
        assert "Nothing happens." not in [s.observation for s in r.trajectory.steps]
    assert load_pool(save_pool(pool, tmp_path / "pool.jsonl")) == pool


def test_scienceworld_expert_pool_replays_gold_actions():
    (r,) = expert_pool("scienceworld", 1, seed=0, types=("lifespan-longest-lived",))
    assert r.outcome.success and r.outcome.score == 100.0
    assert r.task.env_args["task_name"] == "lifespan-longest-lived" and r.rid.startswith("scienceworld:")
    assert r.trajectory.steps and all(s.observation.strip() for s in r.trajectory.steps)
    assert r.trajectory.initial_observation.startswith(r.task.instruction)
    assert r.trajectory.steps[-1].done


def test_textworld_express_expert_pool_replays_the_partitions_training_games():
    pool = expert_pool("textworld_express", 2, seed=5, types=("twc", "cookingworld"))
    part = load_partition("textworld_express")
    train, held = {t.key for t in part.train}, {t.key for t in part.heldout}
    assert [r.task_type for r in pool] == ["twc", "twc", "cookingworld", "cookingworld"]
    assert len({r.rid for r in pool}) == 4 and all(r.rid.startswith("textworld_express:") for r in pool)
    for r in pool:
        assert r.task.benchmark == "textworld_express" and r.task.key in train and r.task.key not in held
        assert r.outcome.success and r.outcome.score == pytest.approx(1.0) and r.trajectory.steps[-1].done
        assert r.source == "expert:textworld_express"
    assert [r.rid for r in expert_pool("textworld_express", 2, seed=5, types=("twc",))] == [r.rid for r in pool[:2]]
    assert [r.rid for r in expert_pool("textworld_express", 2, seed=6, types=("twc",))] != [r.rid for r in pool[:2]]
    with pytest.raises(ValueError, match=r"unknown textworld_express task type\(s\) \['put'\]"):
        expert_pool("textworld_express", 1, seed=0, types=("put",))


def test_expert_pool_rejects_bad_requests(alfworld_data):
    with pytest.raises(ValueError, match="not 'webshop'"):
        expert_pool("webshop", 1, seed=0)
    with pytest.raises(ValueError, match="per_type must be an integer >= 1"):
        expert_pool("alfworld", 0, seed=0, data_dir=alfworld_data)
    with pytest.raises(ValueError, match=r"unknown ALFWorld task type\(s\) \['boil'\]; valid: \['put'"):
        expert_pool("alfworld", 1, seed=0, types=("boil",), data_dir=alfworld_data)
    with pytest.raises(ValueError, match="data_dir applies to alfworld only"):
        expert_pool("scienceworld", 1, seed=0, data_dir=alfworld_data)
    with pytest.raises(ValueError, match="split applies to alfworld only; textworld_express pools come from"):
        expert_pool("textworld_express", 1, seed=0, split="heldout")


def test_each_type_takes_the_first_successful_replays_in_its_seeded_order_and_names_a_shortfall():
    """The draw shared by every engine's expert pool: failed replays are skipped (and counted as tried), the
    index handed to a replay is the record's position in the pool, and too few successes are refused unless
    allowed."""
    from antipersist_lib.consolidation import pool as P

    def attempt(candidate: int, index: int) -> PoolRecord | None:
        if candidate % 2:  # odd candidates "fail"
            return None
        task = Task(index, "textworld_express", "twc", f"game {candidate}", "train", {"n": candidate})
        return PoolRecord(f"r{candidate}", task, Trajectory("start"), EpisodeOutcome(True, 1.0, 1))

    out: list[PoolRecord] = []
    P._collect(out, "twc", range(10), 3, 7, False, attempt)
    evens_in_order = [c for c in P._draw(range(10), 7, "twc") if c % 2 == 0][:3]
    assert [r.task.env_args["n"] for r in out] == evens_in_order
    assert [r.task.task_id for r in out] == [0, 1, 2]
    P._collect(out, "twc", range(10, 14), 1, 7, False, attempt)  # a second type continues the indices
    assert out[-1].task.task_id == 3
    with pytest.raises(
        ValueError, match=r"only 5 of 6 expert replays succeeded for type 'coin' \(10 candidates tried\)"
    ):
        P._collect([], "coin", range(10), 6, 7, False, attempt)
    fewer: list[PoolRecord] = []
    P._collect(fewer, "coin", range(10), 6, 7, True, attempt)
    assert len(fewer) == 5


# -- pools: files, runs, summaries ---------------------------------------------------------------


def test_pool_round_trip_and_damaged_file(tmp_path):
    pool = make_pool(per=2)
    path = save_pool(pool, tmp_path / "pool.jsonl")
    assert load_pool(path) == pool
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], '{"rid": "x"}', *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=r"pool.jsonl:2: malformed record"):
        load_pool(path)
    with pytest.raises(ValueError, match="holds record id 'put0' twice"):
        save_pool([rec("put0"), rec("put0")], tmp_path / "dup.jsonl")
    with pytest.raises(ValueError, match="pool is empty"):
        save_pool([], tmp_path / "empty.jsonl")


def _fake_run(path: Path, outcomes: list[tuple[bool, bool]]) -> None:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text("{}")
    with open(path / "episodes_train.jsonl", "w") as fh:
        for pos, (success, infra) in enumerate(outcomes):
            r = rec(f"e{pos}", success=success)
            ep = {"iteration": 1, "position": pos, "task": r.task.to_dict(), "trajectory": r.trajectory.to_dict()}
            ep["outcome"] = EpisodeOutcome(success, infra_failure=infra).to_dict()
            fh.write(json.dumps(ep) + "\n")


def test_pool_from_runs_keeps_successes_and_names_each_record(tmp_path):
    _fake_run(tmp_path / "runs" / "a" / "seed42", [(True, False), (False, False), (False, True)])
    _fake_run(tmp_path / "runs" / "b" / "seed42", [(True, False)])
    runs = [tmp_path / "runs" / "a" / "seed42", tmp_path / "runs" / "b" / "seed42"]
    pool = pool_from_runs(runs)
    assert [r.rid for r in pool] == ["a/seed42#1.0", "b/seed42#1.0"]
    assert [r.rid for r in pool_from_runs(runs, successes_only=False)] == [
        "a/seed42#1.0",
        "a/seed42#1.1",
        "b/seed42#1.0",
    ]
    with pytest.raises(ValueError, match="is not a run directory"):
        pool_from_runs([tmp_path])
    with pytest.raises(ValueError, match="at least one run directory"):
        pool_from_runs([])


def test_summarized_log_is_deterministic_and_keeps_every_action_before_dropping_any():
    r = rec("long", n_steps=60)
    full = summarize_trajectory(r, 100_000)
    assert full == summarize_trajectory(r, 100_000)
    assert "Outcome: SUCCESS" in full and "60. go to place 59" in full
    assert "Outcome" not in summarize_trajectory(r, 100_000, with_outcome=False)
    short = summarize(r, 1500)  # the old rendering dropped 29 middle steps here
    assert len(short.text) <= 1500 and "steps omitted" not in short.text and short.actions_kept == 60
    assert all(f"\n{i + 1}. go to place {i}" in short.text for i in range(60))
    tiny = summarize(r, 600)  # not even the bare actions fit: middle steps go, and the count says so
    assert len(tiny.text) <= 600 and "steps omitted" in tiny.text
    assert 0 < tiny.actions_kept < 60 and tiny.fraction_kept == tiny.actions_kept / 60
    assert "1. go to place 0" in tiny.text and "60. go to place 59" in tiny.text  # opening and ending kept
    with pytest.raises(ValueError, match="max_chars must be an integer >= 200"):
        summarize_trajectory(r, 50)


def heat_record() -> PoolRecord:
    """An ALFWorld-shaped heat episode: a long room listing, long observations, the defining step in the middle."""
    room = "You are in the middle of a room. Looking quickly around you, you see " + ", ".join(
        f"a cabinet {i}" for i in range(30, 0, -1)
    )
    shelf = "On the countertop 1, you see " + ", ".join(f"a spoon {i}" for i in range(40))
    steps = (
        Step("go to countertop 1", f"You arrive at countertop 1. {shelf}.", 0.0, False),
        Step("take cup 1 from countertop 1", "You pick up the cup 1 from the countertop 1.", 0.0, False),
        Step("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed.", 0.0, False),
        Step("heat cup 1 with microwave 1", "You heat the cup 1 using the microwave 1.", 0.0, False),
        Step("go to cabinet 4", f"You arrive at cabinet 4. {shelf}.", 0.0, False),
        Step("move cup 1 to cabinet 4", "You move the cup 1 to the cabinet 4.", 1.0, True),
    )
    task = Task(0, "alfworld", "heat", "Your task is to: heat some cup and put it in cabinet.", "train", {})
    return PoolRecord("heat0", task, Trajectory(room, steps), EpisodeOutcome(True, 1.0, 6, 0), "test")


def test_a_900_character_summary_keeps_the_task_defining_step_and_clips_the_rest():
    r = heat_record()
    assert len(summarize_trajectory(r, 100_000)) > 900
    got = summarize(r, 900)
    assert len(got.text) <= 900 and got.actions_kept == got.actions == 6 and got.fraction_kept == 1.0
    assert "4. heat cup 1 with microwave 1" in got.text  # the old middle-dropping rendering lost this line
    assert "Task: Your task is to: heat some cup and put it in cabinet." in got.text  # the task sentence whole
    assert "a spoon 39" not in got.text  # the long observations are what gave way
    cover = summary_coverage([r, rec("short")], 900)
    assert cover["min_fraction_kept"] == 1.0 and cover["records_short"] == 0 and cover["records"] == 2
    starved = summary_coverage([r, rec("long", n_steps=60)], 600)
    assert starved["records_short"] == 1 and starved["actions_dropped"] > 0 and starved["min_fraction_kept"] < 1


#: the step that defines an ALFWorld type, as the expert walkthrough writes it
DEFINING_ACTION = {
    "clean": r"clean \S+ \d+ with sinkbasin",
    "heat": r"heat \S+ \d+ with microwave",
    "cool": r"cool \S+ \d+ with fridge",
}


@pytest.mark.slow
def test_alfworld_paper_profiles_summaries_keep_every_action_of_every_type(alfworld_data):
    from antipersist_lib.consolidation.builds import summaries_kept, summary_budgets
    from antipersist_lib.consolidation.profile import load_study_profile

    pool = expert_pool("alfworld", 2, seed=0, data_dir=alfworld_data)
    assert {r.task_type for r in pool} == {"put", "clean", "heat", "cool", "examine", "puttwo"}
    root = Path(__file__).resolve().parents[1] / "params" / "consolidation"
    profiles = [load_study_profile(p) for p in sorted(root.glob("*paper*.yaml"))]
    profiles = [p for p in profiles if p.benchmark == "alfworld"]
    assert len(profiles) >= 3  # paper, erosion_paper, probe_two_types_paper
    for profile in profiles:
        for chars in summary_budgets(profile):
            for r in pool:
                for with_outcome in (True, False):
                    got = summarize(r, chars, with_outcome=with_outcome)
                    assert got.actions_kept == got.actions, (profile.name, chars, r.rid)
                    if r.task_type in DEFINING_ACTION:  # the step the old 900-character summary dropped
                        assert re.search(DEFINING_ACTION[r.task_type], got.text), (profile.name, chars, r.rid)
        assert all(v["min_fraction_kept"] == 1.0 for v in summaries_kept(profile, pool).values()), profile.name


def test_paper_profile_keeps_keep_logs_at_alls_size_and_uncapped():
    from antipersist_lib.consolidation.profile import load_study_profile

    paper = load_study_profile(Path(__file__).resolve().parents[1] / "params" / "consolidation" / "paper.yaml")
    keep = make_builder("keep", llm=object(), **paper.options("keep"))
    assert keep.log_chars == make_builder("all", **paper.options("all")).log_chars == 900  # was 4000
    assert keep.capped is False and keep.describe()["capped"] is False


def test_an_uncapped_keep_is_not_evicted_by_a_capped_stream(make_clients):
    def keep_all(req):
        return json.dumps({f"n{i}": "keep" for i in re.findall(r"### n(\d+)", req["messages"][1]["content"])})

    c = make_clients(ScriptedResponder([(by_system(CP.KEEP_SYSTEM), keep_all)]))
    pool = make_pool(per=3)
    capped = build_memory(pool, KeepCurator(c.llm), "stream", batch_size=3, homogeneous=True, seed=1, capacity=4)
    free = build_memory(
        pool, KeepCurator(c.llm, capped=False), "stream", batch_size=3, homogeneous=True, seed=1, capacity=4
    )
    assert len(capped.entries) == 4 and len(free.entries) == 9
    assert not any(op["op"] == "evict" for ev in free.history for op in ev["ops"])
    with pytest.raises(ValueError, match="capped must be true or false"):
        KeepCurator(c.llm, capped="no")


def test_log_chars_summary_stores_logs_at_the_consolidators_size():
    from antipersist_lib.consolidation.profile import load_study_profile

    r = heat_record()
    logs = all_logs([r])  # default: 4000
    same = make_builder("all", summary_chars=700, log_chars="summary")
    assert same.log_chars == 700
    bank = same.update(MemoryBank("all"), [r])
    assert bank.entries[0].text == summarize_trajectory(r, 700) != logs.entries[0].text
    with pytest.raises(ValueError, match="log_chars must be an integer >= 200 or 'summary'"):
        make_builder("all", log_chars="input")
    sw = load_study_profile(Path(__file__).resolve().parents[1] / "params" / "consolidation" / "scienceworld.yaml")
    clin = make_builder("clin", llm=object(), **sw.options("clin"))
    assert make_builder("all", **sw.options("all")).log_chars == clin.summary_chars  # was 1000 against 3000


# -- batches -------------------------------------------------------------------------------------


def test_homogeneous_batches_hold_one_type_and_cover_the_pool_once():
    pool = make_pool(per=5)
    got = batches(pool, 2, homogeneous=True, seed=7)
    assert all(len({r.task_type for r in b}) == 1 and 1 <= len(b) <= 2 for b in got)
    assert Counter(r.rid for b in got for r in b) == Counter(r.rid for r in pool)  # each exactly once
    assert len(got) == 9  # 3 per type: 2 + 2 + 1
    assert got == batches(pool, 2, homogeneous=True, seed=7)
    assert any(batches(pool, 2, homogeneous=True, seed=s) != got for s in range(1, 6))
    kinds = [[b[0].task_type for b in batches(pool, 2, homogeneous=True, seed=s)] for s in range(6)]
    assert any(k != sorted(k) for k in kinds)  # the batch order is shuffled, not type after type


def test_heterogeneous_batches_mix_types_and_cover_the_pool_once():
    pool = make_pool(per=4)
    got = batches(pool, 3, homogeneous=False, seed=1)
    assert len(got) == 4 and all(len({r.task_type for r in b}) == 3 for b in got)
    assert Counter(r.rid for b in got for r in b) == Counter(r.rid for r in pool)
    pairs = batches(pool, 2, homogeneous=False, seed=1)
    assert all(len({r.task_type for r in b}) == 2 for b in pairs)


def test_batches_reject_bad_input():
    pool = make_pool(per=2)
    for size in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="batch size must be an integer >= 1"):
            batches(pool, size, homogeneous=True, seed=0)
    with pytest.raises(ValueError, match="heterogeneous batches need at least two task types"):
        batches(make_pool(kinds=("put",)), 2, homogeneous=False, seed=0)
    with pytest.raises(TypeError, match=r"pool\[0\] is a dict"):
        batches([{}], 1, homogeneous=True, seed=0)


# -- consolidators -------------------------------------------------------------------------------


def _unit(*v: float) -> list[float]:
    return list(v)


def controlled_embedding(text: str) -> list[float]:
    """Known cosines: NEARDUP.ALPHA = 0.75 exactly, FRESH.ALPHA = 0.74, BETA orthogonal to both."""
    if "NEARDUP" in text:
        return _unit(0.75, math.sqrt(1 - 0.75**2), 0.0)
    if "FRESH" in text:
        return _unit(0.74, 0.0, math.sqrt(1 - 0.74**2))
    if "ALPHA" in text:
        return _unit(1.0, 0.0, 0.0)
    if "BETA" in text:
        return _unit(0.0, 1.0, 0.0)
    return (bag_of_words_embedding(text, 3) + [0.0] * 3)[:3]


GEN = '{"1": ["b1"], "2": ["b2", "zz"]}'
REFLECT = """Here is my analysis.
```json
{"bullet_tags": [{"episode": 1, "id": "b1", "tag": "helpful"}, {"episode": 2, "id": "b2", "tag": "harmful"},
                 {"id": "b99", "tag": "helpful"}],
 "lessons": [{"section": "heating", "text": "NEARDUP lesson", "episodes": [1]},
             {"section": "placing", "text": "FRESH lesson", "episodes": [2]}]}
```"""
CURATE = """Operations:
[{"op": "ADD", "section": "heating", "text": "NEARDUP: heat it in the microwave first", "lessons": [1]},
 {"op": "ADD", "text": "FRESH: put the object down directly", "lessons": [2]},
 {"op": "ADD", "text": "FRESH restated in other words", "lessons": [2]},
 {"op": "UPDATE", "id": "b2", "text": "BETA refined: check the target first", "lessons": [2]},
 {"op": "UPDATE", "id": "nope", "text": "no such bullet"}]"""


def ace_clients(make_clients, reflect: str = REFLECT, curate: str = CURATE):
    rules = [
        (by_system(CP.ACE_GENERATOR_SYSTEM), GEN),
        (by_system(CP.ACE_REFLECTOR_SYSTEM), reflect),
        (by_system(CP.ACE_CURATOR_SYSTEM), curate),
    ]
    return make_clients(ScriptedResponder(rules), embedder=controlled_embedding)


def test_ace_counters_curation_and_dedup_at_075(make_clients):
    c = ace_clients(make_clients)
    start = bank_of(
        "ace",
        MemoryEntry("b1", "ALPHA: heat before placing", section="heating", sources=["old1"]),
        MemoryEntry("b2", "BETA: place where asked", section="placing", sources=["old2"]),
        next_id=3,
    )
    batch = [rec("r1", "heat"), rec("r2", "put")]
    out = ACE(c.llm, c.embedder).update(start, batch)
    assert start.entries[0].helpful == 0 and start.step == 0  # the input bank is untouched
    assert out.step == 1 and out.ids == ["b1", "b2", "b4"]
    b1, b2, b4 = out.entries
    assert (b1.helpful, b1.harmful, b2.helpful, b2.harmful) == (1, 0, 0, 1)
    assert b1.text == "ALPHA: heat before placing" and b1.sources == ["old1", "r1"]  # cos 0.75: merged
    assert b2.text == "BETA refined: check the target first" and b2.sources == ["old2", "r2"]
    assert b4.text == "FRESH: put the object down directly" and b4.sources == ["r2"]  # cos 0.74: added
    event = out.history[-1]
    merges = [op for op in event["ops"] if op["op"] == "merge"]
    assert merges == [
        {"op": "merge", "from": "b3", "into": "b1", "similarity": 0.75},
        {"op": "merge", "from": "b5", "into": "b4", "similarity": 1.0},
    ]
    assert event["calls"] == 3 and event["error"] is None
    assert any("b99" in s for s in event["skipped"]) and any("nope" in s for s in event["skipped"])
    (reflect,) = chats(c, CP.ACE_REFLECTOR_SYSTEM)
    assert "Bullets used: b1" in reflect and "Bullets used: b2\n" in reflect + "\n"  # 'zz' is not a bullet
    assert "Outcome:" not in reflect and CP.ACE_LABELS_HIDDEN in reflect  # plain ACE: labels hidden
    assert c.ledger.count("consolidation", builder="ace") == 3


def test_ace_gt_shows_labels_and_skips_the_generator_on_an_empty_playbook(make_clients):
    c = ace_clients(make_clients)
    out = ACE(c.llm, c.embedder, ground_truth=True).update(MemoryBank("ace_gt"), [rec("r1"), rec("r2", success=False)])
    assert not chats(c, CP.ACE_GENERATOR_SYSTEM) and out.history[-1]["calls"] == 2
    (reflect,) = chats(c, CP.ACE_REFLECTOR_SYSTEM)
    assert "Outcome: SUCCESS" in reflect and "Outcome: FAILURE" in reflect and CP.ACE_LABELS_SHOWN in reflect
    assert [e.text for e in out.entries] == [
        "NEARDUP: heat it in the microwave first",
        "FRESH: put the object down directly",
    ]
    # 'heating' is none of the original's fixed sections: filed under the last one
    assert out.entries[0].section == "others" and out.entries[0].sources == ["r1"]


def test_ace_unparseable_reply_leaves_the_bank_unchanged(make_clients):
    c = ace_clients(make_clients, reflect="I could not decide anything useful.")
    start = bank_of("ace", MemoryEntry("b1", "ALPHA lesson"), next_id=2)
    out = ACE(c.llm, c.embedder).update(start, [rec("r1")])
    assert out.entries == start.entries and out.next_id == 2 and out.step == 1
    assert out.history[-1]["error"] == "no JSON dict in the reply"
    assert out.history[-1]["reply"].startswith("I could not decide")
    with pytest.raises(ValueError, match="pass embedder="):
        ACE(c.llm, None)
    # the reflector's tags are not applied either when the curator's reply fails later in the update
    c = ace_clients(make_clients, curate="ADD a bullet about heating, please.")
    start = bank_of("ace", MemoryEntry("b1", "ALPHA lesson"), MemoryEntry("b2", "BETA lesson"), next_id=3)
    out = ACE(c.llm, c.embedder).update(start, [rec("r1"), rec("r2")])
    assert out.entries == start.entries and out.history[-1]["calls"] == 3
    assert out.history[-1]["error"] == "no JSON list in the reply" and out.history[-1]["ops"] == []


def test_clin_ops_and_fifo_eviction_at_capacity(make_clients):
    reply = json.dumps(
        [
            {"op": "delete", "id": "m2"},
            {"op": "replace", "id": "m3", "text": "opening the fridge SHOULD BE NECESSARY to cool"},
            {"op": "add", "text": "rule A"},
            {"op": "add", "text": "rule B"},
            {"op": "retain", "id": "m4"},
            {"op": "fly", "id": "m1"},
        ]
    )
    c = make_clients(ScriptedResponder([(by_system(CP.CLIN_SYSTEM), reply)]))
    start = bank_of(
        "clin",
        *(MemoryEntry(f"m{i}", f"old rule {i}", kind="rule", sources=[f"s{i}"]) for i in (1, 2, 3, 4)),
        next_id=5,
    )
    out = CLIN(c.llm, capacity=3).update(start, [rec("r1"), rec("r2", success=False)])
    # after the edit: m1, m4, m5 (replaces m3), m6 (A), m7 (B) -> FIFO drops the two oldest
    assert out.ids == ["m5", "m6", "m7"]
    assert out.get("m5").text.startswith("opening the fridge") and out.get("m5").sources == ["s3", "r1", "r2"]
    event = out.history[-1]
    assert {"op": "evict", "ids": ["m1", "m4"]} in event["ops"] and {"op": "retain", "id": "m4"} in event["ops"]
    assert any("fly" in s for s in event["skipped"])
    (prompt,) = chats(c, CP.CLIN_SYSTEM)
    assert "at most 3" in prompt and "first in, first out" in prompt and "[m2] old rule 2" in prompt
    assert "Evaluation report: task completed" in prompt and "Evaluation report: task not completed" in prompt
    with pytest.raises(ValueError, match="CLIN capacity must be an integer >= 1"):
        CLIN(c.llm, capacity=0)


def test_clin_keeps_unmentioned_entries(make_clients):
    c = make_clients(ScriptedResponder([(by_system(CP.CLIN_SYSTEM), '[{"op": "add", "text": "new rule"}]')]))
    start = bank_of("clin", MemoryEntry("m1", "kept rule", kind="rule"), next_id=2)
    out = CLIN(c.llm, capacity=5).update(start, [rec("r1")])
    assert [e.text for e in out.entries] == ["kept rule", "new rule"]


def test_dc_rewrite_replaces_the_whole_cheatsheet(make_clients):
    c = make_clients(ScriptedResponder([(by_system(CP.DC_SYSTEM), "Sure.\n<cheatsheet>\nNEW SHEET\n</cheatsheet>")]))
    start = bank_of("dc", MemoryEntry("cs1", "OLD SHEET", kind="cheatsheet", sources=["a"]), next_id=2)
    out = DynamicCheatsheet(c.llm).update(start, [rec("r1"), rec("r2")])
    assert [(e.id, e.text) for e in out.entries] == [("cs2", "NEW SHEET")]
    assert out.entries[0].sources == ["a", "r1", "r2"]
    (prompt,) = chats(c, CP.DC_SYSTEM)
    assert "OLD SHEET" in prompt and "Episode 2" in prompt


def test_dc_without_tags_keeps_the_old_sheet_and_logs_why(make_clients):
    c = make_clients(ScriptedResponder([(by_system(CP.DC_SYSTEM), "NEW SHEET but no tags")]))
    start = bank_of("dc", MemoryEntry("cs1", "OLD SHEET", kind="cheatsheet"), next_id=2)
    out = DynamicCheatsheet(c.llm).update(start, [rec("r1")])
    assert out.entries == start.entries and out.step == 1
    assert "no non-empty <cheatsheet>" in out.history[-1]["error"]


def test_awm_adds_workflows_induced_from_successes_only(make_clients):
    reply = """## Workflow: Heat and place
When to use: heat tasks
Steps:
1. go to {receptacle}

**Workflow: Find an object**
Steps:
1. open {receptacle}
"""
    c = make_clients(ScriptedResponder([(by_system(CP.AWM_SYSTEM), reply)]))
    start = bank_of("awm", MemoryEntry("w1", "Steps:\n1. open {receptacle}", kind="workflow", title="Find an object"))
    out = AWM(c.llm).update(start, [rec("win", "heat"), rec("loss", "heat", success=False)])
    assert [(e.title, e.kind) for e in out.entries] == [("Find an object", "workflow"), ("Heat and place", "workflow")]
    assert out.entries[1].text.startswith("When to use: heat tasks") and out.entries[1].sources == ["win"]
    assert any("already stored" in s for s in out.history[-1]["skipped"])
    (prompt,) = chats(c, CP.AWM_SYSTEM)
    assert "do the heat job win" in prompt and "job loss" not in prompt
    none = AWM(c.llm).update(out, [rec("loss2", success=False)])
    assert none.entries == out.entries and none.history[-1]["calls"] == 0
    assert parse_workflows("NONE") == []


def test_awm_revise_rewrites_removes_and_adds_workflows_in_neutral_words(make_clients):
    """H.1.2 reports stored workflows edited between epochs: ``mode: revise`` rewrites a workflow in place (its
    id kept), removes one and adds one; the append mode could only add. No ALFWorld word reaches the prompt."""
    reply = """## Workflow w1: Find an item, checked
When to use: any search task
Steps:
1. search {item} (expect: a result list)

## Remove: w2

## Workflow: Compare two results
Steps:
1. open {result} (expect: its page)
"""
    c = make_clients(ScriptedResponder([(by_system(CP.AWM_SYSTEM), reply)]))
    start = bank_of(
        "awm",
        MemoryEntry("w1", "Steps:\n1. open {thing}", kind="workflow", title="Find an item", sources=["old"]),
        MemoryEntry("w2", "Steps:\n1. repeat", kind="workflow", title="Loop"),
        MemoryEntry("w3", "Steps:\n1. stop", kind="workflow", title="Stop"),
        next_id=4,
    )
    out = AWM(c.llm, mode="revise").update(start, [rec("win", "heat")])
    assert [(e.id, e.title) for e in out.entries] == [
        ("w1", "Find an item, checked"),
        ("w3", "Stop"),
        ("w4", "Compare two results"),
    ]
    assert out.entries[0].text.startswith("When to use: any search task") and out.entries[0].sources == ["old", "win"]
    assert "Remove" not in out.entries[2].text
    ops = [(op["op"], op["id"]) for op in out.history[-1]["ops"]]
    assert ops == [("delete", "w2"), ("update", "w1"), ("add", "w4")]
    (prompt,) = chats(c, CP.AWM_SYSTEM)
    assert "## Workflow w1: Find an item" in prompt  # the model sees the ids it may rewrite
    assert not re.search(r"receptacle|\{object\}", prompt, re.I)
    assert CP.AWM_PLACEHOLDERS_GENERIC in prompt
    named = make_clients(ScriptedResponder([(by_system(CP.AWM_SYSTEM), "NONE")]))
    AWM(named.llm, placeholders=["product", "size"]).update(MemoryBank("awm"), [rec("win")])
    (prompt,) = chats(named, CP.AWM_SYSTEM)
    assert "{product}, {size}" in prompt and "receptacle" not in prompt
    with pytest.raises(ValueError, match="AWM mode"):
        AWM(c.llm, mode="rewrite")


def test_clin_rewrite_replaces_the_whole_list_and_the_seed_is_free_count(make_clients):
    """G.1: the manager rewrites the entire memory (at most 50 items) at every stage, and the seed is a
    free-count list; the ops mode kept every entry the model did not mention."""
    seed_reply = json.dumps([{"text": f"insight {i}"} for i in range(12)])
    c = make_clients(ScriptedResponder([(by_system(CP.CLIN_SYSTEM), seed_reply)]))
    builder = CLIN(c.llm, capacity=5, update="rewrite", seed_list="free_count")
    seeded = builder.update(MemoryBank("clin"), [rec("a"), rec("b")])
    assert len(seeded.entries) == 12  # the model chose the count; the seed is not cut to the cap
    (seed_prompt,) = chats(c, CP.CLIN_SYSTEM)
    assert "there is no target count" in " ".join(seed_prompt.split()) and "at most" not in seed_prompt
    stage = json.dumps(
        [{"text": "insight 3", "from": ["m4"]}, {"text": "merged 1+2", "from": ["m2", "m3"]}]
        + [{"text": f"new {i}"} for i in range(6)]
    )
    c2 = make_clients(ScriptedResponder([(by_system(CP.CLIN_SYSTEM), stage)]))
    builder = CLIN(c2.llm, capacity=5, update="rewrite", seed_list="free_count")
    out = builder.update(seeded, [rec("c")])
    assert [e.text for e in out.entries] == ["insight 3", "merged 1+2", "new 0", "new 1", "new 2"]
    assert out.entries[0].id == "m4"  # copied unchanged: the same entry
    assert out.entries[1].sources == ["a", "b", "c"]
    ops = out.history[-1]["ops"]
    assert {"op": "cut", "count": 3} in ops and sum(op["op"] == "delete" for op in ops) == 11
    (prompt,) = chats(c2, CP.CLIN_SYSTEM)
    assert "complete list of at most 5 items" in prompt
    assert builder.describe()["update"] == "rewrite"
    with pytest.raises(ValueError, match="update must be one of"):
        CLIN(c.llm, update="append")


def test_keep_curator_keeps_deletes_and_drops_undecided(make_clients):
    reply = '{"n1": "keep", "n2": "delete", "t1": "delete", "n9": "keep", "t2": "maybe"}'
    c = make_clients(ScriptedResponder([(by_system(CP.KEEP_SYSTEM), reply)]))
    start = bank_of(
        "keep",
        MemoryEntry("t1", "Task type: put\nTask: old one", kind="trajectory"),
        MemoryEntry("t2", "Task type: put\nTask: other", kind="trajectory"),
        next_id=3,
    )
    out = KeepCurator(c.llm).update(start, [rec("a"), rec("b"), rec("c")])
    assert out.ids == ["t2", "t3"] and out.entries[1].sources == ["a"] and out.entries[1].kind == "trajectory"
    skipped = out.history[-1]["skipped"]
    assert any(s.startswith("n3: no keep/delete decision") for s in skipped)
    assert any("n9" in s for s in skipped) and any("t2" in s for s in skipped)
    (prompt,) = chats(c, CP.KEEP_SYSTEM)
    assert "[t1] Task type: put | Task: old one" in prompt and "### n3" in prompt


def test_one_pass_keep_is_one_call_over_the_whole_pool(make_clients):
    pool = make_pool(per=2)
    decide = {f"n{i}": "keep" if i % 2 else "delete" for i in range(1, len(pool) + 1)}
    c = make_clients(ScriptedResponder([(by_system(CP.KEEP_SYSTEM), json.dumps(decide))]))
    out = one_pass_keep(pool, c.llm)
    assert c.ledger.count("consolidation") == 1
    assert [e.sources[0] for e in out.entries] == [r.rid for r in pool[::2]]


# -- episodic baselines and regimes ----------------------------------------------------------


def test_all_and_fs_downsampling_are_seeded():
    pool = make_pool(per=10)
    assert [e.sources for e in all_logs(pool).entries] == [[r.rid] for r in pool]
    a, b = few_shot(pool, 8, seed=1), few_shot(pool, 8, seed=1)
    assert len(a.entries) == 8 and [e.text for e in a.entries] == [e.text for e in b.entries]
    picks = {tuple(e.sources[0] for e in few_shot(pool, 8, seed=s).entries) for s in range(5)}
    assert len(picks) > 1  # another seed, other shots
    order = [r.rid for r in pool]
    assert all(list(p) == sorted(p, key=order.index) for p in picks)  # listed in pool order
    with pytest.raises(ValueError, match="FS=31 asks for more shots than the 30 records"):
        few_shot(pool, 31, seed=0)
    with pytest.raises(ValueError, match="use it with|static_all regime"):
        build_memory(pool, FewShot(2, 0), "stream", batch_size=5)


def test_regimes_make_one_update_per_pool_group_or_batch(tmp_path):
    pool = make_pool(per=4)
    b = CountingBuilder()
    build_memory(pool, b, "static_all")
    assert b.calls == [[r.rid for r in pool]]
    b = CountingBuilder()
    out = build_memory(pool, b, "static_group")
    assert [{rid.rstrip("0123456789") for rid in c} for c in b.calls] == [{"clean"}, {"heat"}, {"put"}]
    assert len(out.entries) == 12 and len(set(out.ids)) == 12 and out.step == 3
    assert [e.get("group") for e in out.history] == ["clean", "heat", "put"]
    b = CountingBuilder()
    out = build_memory(pool, b, "stream", batch_size=5, homogeneous=False, seed=2, out_dir=tmp_path / "s")
    assert len(b.calls) == 3 and [len(c) for c in b.calls] == [5, 5, 2] and out.step == 3
    lines = (tmp_path / "s" / SNAPSHOTS_FILE).read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1, 2, 3]
    at2 = load_bank(tmp_path / "s" / SNAPSHOTS_FILE, 2)
    assert at2.step == 2 and len(at2.entries) == 10 and len(at2.history) == 2
    assert load_bank(tmp_path / "s" / BANK_FILE).to_dict() == out.to_dict()
    assert out.meta["regime"] == "stream" and out.meta["pool"]["size"] == 12


def test_llm_update_calls_per_regime(make_clients):
    c = make_clients(ScriptedResponder([(by_system(CP.DC_SYSTEM), "<cheatsheet>sheet</cheatsheet>")]))
    pool = make_pool(per=4)
    build_memory(pool, "dc", "static_all", llm=c.llm)
    assert c.ledger.count("consolidation") == 1
    out = build_memory(pool, "dc", "static_group", llm=c.llm)
    assert c.ledger.count("consolidation") == 1 + 3 and len(out.entries) == 3  # one sheet per type
    out = build_memory(pool, "dc", "stream", batch_size=3, homogeneous=True, llm=c.llm)
    n = len(batches(pool, 3, homogeneous=True, seed=0))
    assert n == 6 and c.ledger.count("consolidation") == 1 + 3 + n and out.step == n and len(out.entries) == 1
    assert set(out.meta["prompt_hashes"]) == {"consolidation_dc_system", "consolidation_dc_rewrite"}


def test_capped_stream_evicts_oldest_entries_first():
    pool = make_pool(per=4)
    out = build_memory(pool, make_builder("all"), "stream", batch_size=3, homogeneous=True, seed=5, capacity=4)
    last_batch = batches(pool, 3, homogeneous=True, seed=5)[-1]
    assert len(out.entries) == 4 and out.capacity == 4
    assert [e.sources[0] for e in out.entries][-3:] == [r.rid for r in last_batch]
    assert any(op["op"] == "evict" for ev in out.history for op in ev["ops"])
    unbounded = build_memory(pool, make_builder("all"), "stream", batch_size=3, homogeneous=True, seed=5)
    assert len(unbounded.entries) == 12


def test_build_memory_rejects_bad_input(tmp_path):
    pool = make_pool(per=2)
    with pytest.raises(ValueError, match="unknown regime 'streaming'"):
        build_memory(pool, "all", "streaming")
    with pytest.raises(ValueError, match="the stream regime needs batch_size"):
        build_memory(pool, "all", "stream")
    with pytest.raises(ValueError, match="batch_size applies to the stream regime only"):
        build_memory(pool, "all", "static_all", batch_size=2)
    with pytest.raises(ValueError, match="capacity must be None"):
        build_memory(pool, "all", "static_all", capacity=0)
    with pytest.raises(ValueError, match="unknown memory builder 'mem0'"):
        build_memory(pool, "mem0", "static_all")
    with pytest.raises(ValueError, match="builder 'dc' calls a model: pass llm="):
        build_memory(pool, "dc", "static_all")
    with pytest.raises(TypeError, match="builder must be a name or have update"):
        build_memory(pool, object(), "static_all")
    build_memory(pool, "all", "static_all", out_dir=tmp_path)
    with pytest.raises(FileExistsError, match="snapshots.jsonl already exists"):
        build_memory(pool, "all", "static_all", out_dir=tmp_path)


def test_continuing_from_an_initial_bank(tmp_path):
    pool = make_pool(per=2)
    first = build_memory(pool, CountingBuilder(), "static_group")
    more = build_memory(
        pool, CountingBuilder(), "stream", batch_size=6, homogeneous=False, initial=first, out_dir=tmp_path
    )
    assert more.step == first.step + 1 and len(more.entries) == 12 and more.meta["initial"]["step"] == 3
    assert load_bank(tmp_path / SNAPSHOTS_FILE, 3).to_dict(with_history=False)["entries"] == [
        e.to_dict() for e in first.entries
    ]


# -- the bank -------------------------------------------------------------------------------------


def test_bank_json_round_trip_render_and_errors(tmp_path):
    bank = bank_of(
        "mixed",
        MemoryEntry("b1", "lesson one", section="heat", helpful=2, harmful=1, sources=["r1"]),
        MemoryEntry("w2", "1. go to {x}", kind="workflow", title="Go"),
        MemoryEntry("t3", "Task type: put", kind="trajectory"),
    )
    bank.history.append({"step": 1, "error": None})
    assert load_bank(bank.save(tmp_path / "b.json")) == bank
    text = bank.render()
    assert "- [b1] (helpful 2, harmful 1) lesson one" in text and "### heat" in text
    assert "### Go\n1. go to {x}" in text and "### Log 1\nTask type: put" in text
    assert MemoryBank("empty").render() == ""
    assert bank.evict_fifo(1) == ["b1", "w2"] and bank.ids == ["t3"]
    (tmp_path / "bad.json").write_text('{"method": "x"}')
    with pytest.raises(ValueError, match=r"bad.json: a memory bank needs field\(s\) \['entries'\]"):
        load_bank(tmp_path / "bad.json")
    (tmp_path / "dup.json").write_text(
        '{"method": "x", "entries": [{"id": "a", "text": "1"}, {"id": "a", "text": "2"}]}'
    )
    with pytest.raises(ValueError, match=r"repeats entry id\(s\) \['a'\]"):
        load_bank(tmp_path / "dup.json")
    with pytest.raises(ValueError, match="applies to a snapshots .jsonl file"):
        load_bank(tmp_path / "b.json", 1)
    with pytest.raises(ValueError, match="bank capacity must be None or an integer >= 1"):
        MemoryBank("x", capacity=0)


def test_extract_json_finds_the_answer_in_prose_and_fences():
    assert extract_json('Sure! {"a": 1} hope that helps', dict) == {"a": 1}
    assert extract_json('```json\n[{"op": "add"}]\n```', list) == [{"op": "add"}]
    assert extract_json('note [see 1] then [{"op": "x"}]', list) == [{"op": "x"}]  # the first that decodes
    with pytest.raises(ReplyParseError, match="no JSON dict"):
        extract_json("[1, 2]", dict)
    with pytest.raises(ReplyParseError, match="empty reply"):
        extract_json("  ", dict)


# -- the evaluation method ------------------------------------------------------------------------


def test_consolidated_memory_shows_every_entry_and_writes_nothing(tmp_path):
    pool = make_pool(per=2)
    built = build_memory(pool, "all", "stream", batch_size=2, out_dir=tmp_path / "build")
    state = tmp_path / "state"
    ctx = MethodContext(llm=None, embedder=None, state_dir=state, seed=0, benchmark="alfworld", fsync=False)
    m = make_method("consolidated_memory", ctx, memory=str(tmp_path / "build" / BANK_FILE))
    task = Task(0, "alfworld", "put", "Your task is to: put a thing.", "heldout", {})
    tctx = m.prepare(task, "You are in a room.", phase="heldout", iteration=1, position=0)
    (block,) = tctx.blocks
    assert len(block) > 1000 and all(e.text in block for e in built.entries)  # every entry, not a subset
    assert tctx.meta["memory_entries"] == 6 and tctx.meta["memory_step"] == 3
    ep = EpisodeResult(Trajectory("obs"), EpisodeOutcome(True), 1)
    m.learn(task, tctx, ep, iteration=1, position=0)
    m.end_iteration(1)
    m.snapshot(1, tmp_path / "snap.json")
    assert m.prepare(task, "x", phase="train", iteration=2, position=0).blocks == [block]  # learned nothing
    assert not state.exists() or not any(state.iterdir())
    assert not (tmp_path / "snap.json").exists() and m.state_files == ()
    early = make_method("consolidated_memory", ctx, memory=str(tmp_path / "build" / SNAPSHOTS_FILE), step=1)
    assert early.prepare(task, "x", phase="heldout", iteration=1, position=0).meta["memory_entries"] == 2
    empty = make_method("consolidated_memory", ctx, memory=str(tmp_path / "build" / SNAPSHOTS_FILE), step=0)
    assert empty.prepare(task, "x", phase="heldout", iteration=1, position=0).blocks == []
    validate_method_params("consolidated_memory", {"memory": str(tmp_path / "build" / BANK_FILE)})


def test_consolidated_memory_rejects_bad_parameters(tmp_path):
    build_memory(make_pool(per=1), "all", "static_all", out_dir=tmp_path)
    snaps = str(tmp_path / SNAPSHOTS_FILE)
    with pytest.raises(ValueError, match="needs memory=<bank.json or snapshots.jsonl>"):
        validate_method_params("consolidated_memory", {})
    with pytest.raises(ValueError, match=r"has no step 7; it holds steps 0..1"):
        validate_method_params("consolidated_memory", {"memory": snaps, "step": 7})
    with pytest.raises(ValueError, match="step must be an integer >= 0"):
        validate_method_params("consolidated_memory", {"memory": snaps, "step": "last"})
    with pytest.raises(ValueError, match="cannot read memory bank"):
        validate_method_params("consolidated_memory", {"memory": str(tmp_path / "missing.json")})
    with pytest.raises(ValueError, match=r"has no parameter\(s\) \['library'\]"):
        validate_method_params("consolidated_memory", {"memory": snaps, "library": "x"})


def test_incremental_keep_streams_batches_past_the_curator(make_clients):
    import re

    def keep_all(req):
        return json.dumps({f"n{i}": "keep" for i in re.findall(r"### n(\d+)", req["messages"][1]["content"])})

    c = make_clients(ScriptedResponder([(by_system(CP.KEEP_SYSTEM), keep_all)]))
    pool = make_pool(per=3)
    out = incremental_keep(pool, c.llm, batch_size=2, homogeneous=False, seed=4)
    n = len(batches(pool, 2, homogeneous=False, seed=4))
    assert c.ledger.count("consolidation") == n == out.step == 5
    assert sorted(s for e in out.entries for s in e.sources) == sorted(r.rid for r in pool)
    later = chats(c, CP.KEEP_SYSTEM)[-1]
    assert later.count("\n[t") >= 8  # the kept logs so far are shown to the curator


def test_a_protocol_run_evaluates_the_bank_in_every_held_out_context(tmp_path):
    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.runner.spec import RunSpec
    from antipersist_lib.serving.llm import Endpoint
    from antipersist_lib.testing.loopback_server import LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    bank = bank_of("clin", MemoryEntry("m1", "SEARCHING THE ATTIC FIRST MAY CONTRIBUTE to finding", kind="rule"))
    path = bank.save(tmp_path / "bank.json")
    spec = RunSpec(
        method="consolidated_memory",
        method_params={"memory": str(path)},
        benchmark="errandworld",
        backbone="scripted-loopback",
        embedding="bow",
        seed=1,
        iterations=1,
        train_per_iteration=0,
        max_steps=3,
        preflight=False,  # every chat request's system message is inspected below
        heldout_concurrency=1,
        heldout_limit=2,
        out_root=str(tmp_path / "runs"),
        cache_dir=None,
        progress=False,
    )
    with LoopbackServer(responder=errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        (summary,) = run_cell(spec, endpoint=ep, embed_endpoint=ep)
        systems = {r["body"]["messages"][0]["content"] for r in server.requests_for(ROUTE_CHAT)}
    assert summary.heldout_n == 2 and summary.train_n == 0
    assert systems and all("SEARCHING THE ATTIC FIRST MAY CONTRIBUTE to finding" in s for s in systems)
    state = spec.run_dir() / "state"
    assert not state.exists() or not any(state.rglob("*"))


# -- repeated passes, stages, context budget (App. F.3 / J.1.3, H.1.2, G.1, G.2) ------------------------


def test_passes_cycle_the_pool_and_mark_where_each_pass_ends(tmp_path):
    pool = make_pool(per=4)  # 12 records, 3 types
    b = CountingBuilder()
    out = build_memory(pool, b, "stream", batch_size=4, homogeneous=False, seed=7, passes=3, out_dir=tmp_path / "p")
    assert len(b.calls) == 9 and out.step == 9
    for p in range(3):  # each pass covers every record once; pass p is batched with seed + p
        this_pass = b.calls[3 * p : 3 * p + 3]
        assert sorted(r for c in this_pass for r in c) == sorted(r.rid for r in pool)
        assert this_pass == [[r.rid for r in batch] for batch in batches(pool, 4, False, 7 + p)]
    assert b.calls[:3] != b.calls[3:6]  # batches are cut afresh each pass
    assert [(e["pass"], e["pass_end"]) for e in out.history] == [(p, i == 2) for p in (1, 2, 3) for i in range(3)]
    assert out.meta["passes"] == 3 and out.meta["stages"] is None
    one = CountingBuilder()
    build_memory(pool, one, "stream", batch_size=4, homogeneous=False, seed=7)
    assert one.calls == b.calls[:3]  # one pass is exactly the plain stream


def test_stage_one_per_type_draws_each_type_once_per_stage_from_the_subset():
    from antipersist_lib.consolidation.regimes import StageSpec

    pool = make_pool(per=5)  # clean0..4, heat0..4, put0..4
    b = CountingBuilder()
    out = build_memory(
        pool, b, "stream", batch_size=3, seed=1, stages=StageSpec(count=12, rule="one_per_type", per_type_limit=2)
    )
    assert len(b.calls) == 12 and [e["stage"] for e in out.history] == list(range(1, 13))
    for batch in b.calls:
        assert sorted(rid.rstrip("0123456789") for rid in batch) == ["clean", "heat", "put"]
    drawn = Counter(r for c in b.calls for r in c)
    assert set(drawn) <= {f"{k}{i}" for k in ("clean", "heat", "put") for i in (0, 1)}  # only the first 2 per type
    assert max(drawn.values()) > 1  # stages are fresh draws: records recur
    assert out.meta["stages"] == {"count": 12, "rule": "one_per_type", "per_type_limit": 2}
    assert out.meta["homogeneous"] is False  # the rule, not the default, says how batches are composed


def test_stage_single_type_draws_a_whole_batch_of_one_random_type():
    from antipersist_lib.consolidation.pool import stage_batches

    pool = make_pool(per=4)
    drawn = stage_batches(pool, 20, 3, "single_type", seed=4)
    kinds = [{r.task_type for r in b} for b in drawn]
    assert all(len(k) == 1 for k in kinds) and len({next(iter(k)) for k in kinds}) > 1
    assert all(len({r.rid for r in b}) == 3 for b in drawn)  # distinct records within a stage
    assert stage_batches(pool, 20, 3, "single_type", seed=4) == drawn  # seeded
    assert stage_batches(pool, 20, 3, "single_type", seed=5) != drawn


def test_passes_and_stages_reject_bad_input():
    from antipersist_lib.consolidation.pool import stage_batches
    from antipersist_lib.consolidation.regimes import StageSpec

    pool = make_pool(per=2)
    with pytest.raises(ValueError, match="passes and stages apply to the stream regime only"):
        build_memory(pool, "all", "static_all", passes=2)
    with pytest.raises(ValueError, match="either passes .* or stages"):
        build_memory(pool, "all", "stream", batch_size=3, passes=2, stages=StageSpec(3, "one_per_type"))
    with pytest.raises(ValueError, match="passes must be an integer >= 1"):
        build_memory(pool, "all", "stream", batch_size=3, passes=0)
    with pytest.raises(ValueError, match=r"batch size must equal the number of types in the pool \(3"):
        stage_batches(pool, 2, 6, "one_per_type", seed=0)
    with pytest.raises(ValueError, match=r"hold fewer: \{'clean': 2, 'heat': 2, 'put': 2\}"):
        stage_batches(pool, 2, 3, "single_type", seed=0)
    with pytest.raises(ValueError, match="stage rule must be one of"):
        StageSpec(3, "by_type")


def _sized(c, context_length: int):
    import dataclasses

    from antipersist_lib.serving.llm import LLMClient

    return LLMClient(dataclasses.replace(c.endpoint, context_length=context_length), ledger=c.ledger)


def test_a_consolidation_prompt_past_the_context_is_refused_before_sending(make_clients):
    from antipersist_lib.consolidation.context import ContextOverflowError

    c = make_clients(ScriptedResponder([(by_system(CP.DC_SYSTEM), "<cheatsheet>sheet</cheatsheet>")]))
    pool = make_pool(per=4)
    with pytest.raises(ContextOverflowError) as err:
        build_memory(pool, "dc", "static_all", llm=_sized(c, 300), context_overflow="refuse", regime_name="ungrouped")
    msg = str(err.value)
    assert "builder 'dc' under regime 'ungrouped'" in msg and "context length of 'scripted', 300 tokens" in msg
    assert re.search(r"a consolidation prompt of \d+ characters \(about \d+ tokens", msg)
    assert "truncate_oldest" in msg and "batch_size" in msg  # the fixes
    assert not c.server.requests_for(ROUTE_CHAT)  # nothing was sent
    ok = build_memory(pool, "dc", "static_all", llm=_sized(c, 100_000), context_overflow="refuse")
    assert ok.meta["context"]["checked"] and ok.meta["context"]["truncated_updates"] == 0
    assert 0 < ok.meta["context"]["largest_prompt_tokens"] <= 100_000


def test_truncate_oldest_drops_the_batch_s_oldest_records_until_the_prompt_fits(make_clients):
    from antipersist_lib.consolidation.context import ContextOverflowError
    from antipersist_lib.serving.context_budget import estimated_tokens

    c = make_clients(ScriptedResponder([(by_system(CP.DC_SYSTEM), "<cheatsheet>sheet</cheatsheet>")]))
    pool = make_pool(per=4)
    limit = 1200
    dc = make_builder("dc", llm=_sized(c, limit), max_tokens=100)
    out = build_memory(pool, dc, "static_all", context_overflow="truncate_oldest")
    (event,) = out.history
    cut = event["context_truncated"]
    kept = pool[len(cut["dropped"]) :]
    assert cut["dropped"] == [r.rid for r in pool[: len(cut["dropped"])]] and cut["kept"] == len(kept) >= 1
    (prompt,) = chats(c, CP.DC_SYSTEM)  # only the fitting prompt was sent
    assert all(f"job {r.rid}." in prompt for r in kept) and f"job {pool[0].rid}." not in prompt
    assert estimated_tokens(CP.DC_SYSTEM + "\n" + prompt) + 100 <= limit
    assert out.meta["context"]["truncated_updates"] == 1
    assert out.meta["context"]["dropped_records"] == len(cut["dropped"])
    with pytest.raises(ContextOverflowError):  # keeping one more record would not have fitted: the fewest were cut
        one_more = pool[len(cut["dropped"]) - 1 :]
        build_memory(
            one_more, make_builder("dc", llm=_sized(c, limit), max_tokens=100), "static_all", context_overflow="refuse"
        )


def test_fit_bank_refuses_or_shows_the_newest_entries_that_fit():
    from antipersist_lib.consolidation.context import ContextOverflowError, ContextSpec, fit_bank
    from antipersist_lib.serving.context_budget import estimated_tokens

    bank = all_logs(make_pool(per=4), log_chars=300)
    tokens = estimated_tokens(bank.render())
    spec = ContextSpec("refuse", reserve_tokens=100)
    assert not fit_bank(bank, context_length=tokens + 100, spec=spec, builder="all", regime="r", step=1).truncated
    with pytest.raises(ContextOverflowError, match=r"builder 'all' under regime 'static_all', step 1: its memory is"):
        fit_bank(bank, context_length=tokens + 99, spec=spec, builder="all", regime="static_all", step=1)
    cut = ContextSpec("truncate_oldest", reserve_tokens=100)
    budget = tokens // 2
    fitted = fit_bank(bank, context_length=budget + 100, spec=cut, builder="all", regime="r", step=1)
    n = fitted.record["dropped_entries"]
    assert fitted.truncated and fitted.bank.ids == bank.ids[n:]  # the newest entries stay
    assert estimated_tokens(fitted.bank.render()) <= budget
    one_more = MemoryBank("all", entries=bank.entries[n - 1 :])
    assert estimated_tokens(one_more.render()) > budget  # the fewest entries were dropped
    assert fitted.bank.meta["context_fit"]["dropped_ids"] == bank.ids[:n]
    unknown = fit_bank(bank, context_length=None, spec=spec, builder="all", regime="r", step=1)
    assert unknown.record["checked"] is False and not unknown.truncated
