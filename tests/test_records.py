"""JSON round-trips of every stored record type, and the derived counts of a trajectory."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from antipersist_lib.jsonl import EMBEDDING_REF, ref_of
from antipersist_lib.memory.abstraction_store import Abstraction
from antipersist_lib.memory.outcome_log import OutcomeRecord
from antipersist_lib.memory.trajectory_store import MemoryRecord
from antipersist_lib.records import MODES, SYNTHESIS_MODES, EpisodeOutcome, Step, Task, Trajectory


def through_json(obj):
    """to_dict -> JSON text -> from_dict, as the JSONL stores do it. The two stores whose lines name their
    embedding in the binary file beside the journal are round-tripped both ways: the numbers inline (old
    journals, ``read_jsonl``'s view), and the line as written with the embedding handed back by the store."""
    if not isinstance(obj, (MemoryRecord, OutcomeRecord)):
        return type(obj).from_dict(json.loads(json.dumps(obj.to_dict(), allow_nan=False)))
    inline = type(obj).from_dict(json.loads(json.dumps(obj.to_dict(inline=True), allow_nan=False)))
    line = json.loads(json.dumps(obj.to_dict(), allow_nan=False))
    if obj.embedding is not None:
        assert line[EMBEDDING_REF] == ref_of(obj.embedding) and "embedding" not in line
    stored = type(obj).from_dict(line, embedding=None if obj.embedding is None else np.asarray(obj.embedding))
    assert stored == inline
    return inline


TASK = Task(
    task_id=17,
    benchmark="alfworld",
    task_type="pick_and_place",
    instruction="Your task is to: put a clean apple in the fridge. ünïcödé",
    split="valid_unseen",
    env_args={"game_file": "/data/x/game.tw-pddl", "nested": {"a": [1, 2, 3]}},
)
STEPS = (
    Step("go to fridge 1", "You arrive at fridge 1.", 0.0, False, True, "Thought: t\nAction: go to fridge 1"),
    Step("", "Nothing happens.", 0.0, False, False, "hmm"),
    Step("open fridge 1", "You open the fridge 1.", 0.5, False, True, "Action: open fridge 1"),
    Step("xyzzy", "Nothing happens.", 0.0, False, False, ""),
    Step("put apple 1 in/on fridge 1", "Done.", 1.0, True, True, "Action: put apple 1 in/on fridge 1"),
)
TRAJ = Trajectory("You are in the middle of a room.\nLooking around you, you see ...", STEPS)
OUTCOME = EpisodeOutcome(
    success=True, score=1.0, n_steps=5, n_invalid=2, over_budget=False, infra_failure=False, error=None
)


def test_modes_are_the_four_in_fixed_order():
    assert MODES == ("none", "imitation", "strategic", "corrective")
    assert SYNTHESIS_MODES == ("imitation", "strategic", "corrective")


def test_task_round_trip_and_key():
    back = through_json(TASK)
    assert back == TASK
    assert back.env_args == {"game_file": "/data/x/game.tw-pddl", "nested": {"a": [1, 2, 3]}}
    assert TASK.key == "alfworld/valid_unseen/17"


def test_task_defaults_when_optional_fields_missing():
    t = Task.from_dict({"task_id": "3", "benchmark": "webshop", "task_type": "shop"})
    assert t == Task(3, "webshop", "shop", "", "train", {})
    assert t.key == "webshop/train/3"


def test_step_round_trip():
    for s in STEPS:
        back = through_json(s)
        assert back == s
        assert type(back.reward) is float and type(back.valid) is bool


def test_trajectory_round_trip_and_counts():
    back = through_json(TRAJ)
    assert back == TRAJ
    assert isinstance(back.steps, tuple)
    assert TRAJ.n_steps == 5
    assert TRAJ.n_invalid == 2  # the steps at positions 1 and 3
    assert back.n_steps == 5 and back.n_invalid == 2


def test_trajectory_from_list_is_tuple_and_empty_counts():
    t = Trajectory("obs", [Step("a", "b"), Step("c", "d", valid=False)])
    assert isinstance(t.steps, tuple)
    assert (t.n_steps, t.n_invalid) == (2, 1)
    empty = Trajectory("")
    assert (empty.n_steps, empty.n_invalid) == (0, 0)
    assert through_json(empty) == empty
    assert Trajectory.from_dict({"initial_observation": "x"}) == Trajectory("x", ())


@pytest.mark.parametrize(
    "outcome",
    [
        OUTCOME,
        EpisodeOutcome(False),
        EpisodeOutcome(False, 0.0, 50, 7, over_budget=True),
        EpisodeOutcome(False, 0.0, 3, 0, infra_failure=True, error="engine failure at step 2: RuntimeError('jvm')"),
        EpisodeOutcome(True, 87.5, 12, 1),
    ],
)
def test_episode_outcome_round_trip(outcome):
    back = through_json(outcome)
    assert back == outcome
    assert back.y == int(outcome.success)


def test_episode_outcome_y():
    assert EpisodeOutcome(True).y == 1
    assert EpisodeOutcome(False).y == 0


@pytest.mark.parametrize("embedding", [None, (0.25, -1.5, 3.0)])
def test_memory_record_round_trip(embedding):
    rec = MemoryRecord(
        record_id=4,
        task=TASK,
        trajectory=TRAJ,
        outcome=OUTCOME,
        embedding=embedding,
        parents=("abs-000001", "abs-000007"),
        iteration=3,
        mode="corrective",
    )
    back = through_json(rec)
    assert back == rec
    assert back.retrievable is (embedding is not None)
    assert back.success is True


def test_memory_record_rejects_unknown_mode_and_infra_not_retrievable():
    d = MemoryRecord(0, TASK, TRAJ, OUTCOME, (1.0,), mode=None).to_dict(inline=True)
    assert MemoryRecord.from_dict(d).mode is None
    d["mode"] = "telepathy"
    with pytest.raises(ValueError, match="mode"):
        MemoryRecord.from_dict(d)
    infra = MemoryRecord(0, TASK, TRAJ, EpisodeOutcome(False, infra_failure=True), (1.0, 0.0))
    assert not infra.retrievable


def test_outcome_record_round_trip():
    rec = OutcomeRecord((0.5, -0.25, 1.0), "strategic", 0.95, True, "alfworld", 12, "put a mug in the sink")
    back = through_json(rec)
    assert back == dataclasses.replace(rec, timestamp=back.timestamp)
    # the timestamp is positional metadata, never serialised
    assert "timestamp" not in rec.to_dict()
    assert OutcomeRecord.from_dict(rec.to_dict(inline=True), timestamp=9).timestamp == 9


@pytest.mark.parametrize("embedding", [None, (1.0, 2.0)])
def test_abstraction_round_trip(embedding):
    a = Abstraction(
        abstraction_id="abs-000042",
        text="When the fridge is closed, open it before putting things in.",
        kind="rule",
        parents=("abs-000001", "abs-000003"),
        created_iteration=5,
        derived_from=("abs-000040",),
        source_records=(3, 9, 11),
        task_type="pick_and_place",
        name="fridge-rule",
        embedding=embedding,
    )
    back = through_json(a)
    assert back == a
    assert isinstance(back.parents, tuple) and isinstance(back.source_records, tuple)


def test_abstraction_minimal_fields():
    a = Abstraction.from_dict({"abstraction_id": "x-000000", "text": "t", "kind": "insight"})
    assert a == Abstraction("x-000000", "t", "insight")
    assert through_json(a) == a
