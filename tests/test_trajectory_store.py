"""Trajectory memory M_k: mode-specific retrieval of Appendix B.3, filters, persistence."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest

from antipersist_lib.errors import FrozenStateError
from antipersist_lib.jsonl import read_jsonl, ref_of
from antipersist_lib.memory.trajectory_store import MemoryRecord, TrajectoryStore
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory

Q = np.array([1.0, 0.0])  # query embedding; a record at angle theta has similarity cos(theta)


def at(deg: float) -> list[float]:
    r = math.radians(deg)
    return [math.cos(r), math.sin(r)]


def task(i: int, task_type: str = "clean", benchmark: str = "alfworld") -> Task:
    return Task(task_id=i, benchmark=benchmark, task_type=task_type, instruction=f"task {i}")


def traj(i: int) -> Trajectory:
    return Trajectory(f"obs {i}", (Step(f"act {i}", f"seen {i}"),))


def ok(success: bool, infra: bool = False) -> EpisodeOutcome:
    return EpisodeOutcome(success=success, score=float(success), n_steps=1, infra_failure=infra)


def add(mem: TrajectoryStore, i: int, deg: float | None, success: bool, **kw):
    t = kw.pop("task", None) or task(i)
    infra = kw.pop("infra", False)
    return mem.add(t, traj(i), ok(success, infra), embedding=None if deg is None else at(deg), **kw)


def ids(results) -> list[int]:
    return [r.record.task.task_id for r in results]


# eight records of one task type, similarities cos(angle); S = success, F = failure
#   id:   0     1     2     3     4     5     6     7
#  deg:  10    20    30    40    50    60    70    80
#   y:    F     S     F     S     F     F     S     F
EIGHT = [
    (0, 10, False),
    (1, 20, True),
    (2, 30, False),
    (3, 40, True),
    (4, 50, False),
    (5, 60, False),
    (6, 70, True),
    (7, 80, False),
]


@pytest.fixture
def eight() -> TrajectoryStore:
    mem = TrajectoryStore()
    # add in a scrambled order so ranking cannot come from insertion order
    for i, deg, y in sorted(EIGHT, key=lambda x: (x[0] * 5) % 8):
        add(mem, i, deg, y)
    return mem


def test_none_returns_top_b_of_any_outcome(eight):
    got = eight.retrieve(Q, "none", task(99))
    assert ids(got) == [0, 1, 2, 3, 4]  # B = 5 by default, by similarity
    assert [r.role for r in got] == ["record"] * 5
    for r in got:
        assert r.similarity == pytest.approx(math.cos(math.radians(10 * (r.record.task.task_id + 1))), abs=1e-6)


@pytest.mark.parametrize("mode", ["imitation", "strategic"])
def test_imitation_and_strategic_return_only_successes(eight, mode):
    got = eight.retrieve(Q, mode, task(99))
    assert ids(got) == [1, 3, 6]  # all three successes, most similar first
    assert all(r.record.success for r in got)
    assert [r.role for r in got] == ["success"] * 3
    assert ids(eight.retrieve(Q, mode, task(99), budget=2)) == [1, 3]


def test_corrective_failures_then_one_contrast_success(eight):
    got = eight.retrieve(Q, "corrective", task(99))
    assert ids(got) == [0, 2, 4, 5, 7, 1]
    assert [r.role for r in got] == ["failure"] * 5 + ["contrast"]
    assert [r.record.success for r in got] == [False] * 5 + [True]
    # the contrast is the most similar success, not any success
    got = eight.retrieve(np.array(at(75)), "corrective", task(99), budget=2)
    assert ids(got) == [7, 5, 6]
    assert [r.role for r in got] == ["failure", "failure", "contrast"]


def test_corrective_without_successes_has_no_contrast():
    mem = TrajectoryStore()
    for i in range(3):
        add(mem, i, 10 * i, False)
    got = mem.retrieve(Q, "corrective", task(99))
    assert ids(got) == [0, 1, 2]
    assert all(r.role == "failure" for r in got)


def test_corrective_without_failures_only_contrast():
    mem = TrajectoryStore()
    for i in range(3):
        add(mem, i, 10 * i, True)
    got = mem.retrieve(Q, "corrective", task(99))
    assert ids(got) == [0] and got[0].role == "contrast"


def test_budget_respected(eight):
    assert len(eight.retrieve(Q, "none", task(99))) == 5
    assert ids(eight.retrieve(Q, "none", task(99), budget=1)) == [0]
    assert ids(eight.retrieve(Q, "none", task(99), budget=8)) == list(range(8))
    assert ids(eight.retrieve(Q, "none", task(99), budget=20)) == list(range(8))
    assert eight.retrieve(Q, "none", task(99), budget=0) == []
    got = eight.retrieve(Q, "corrective", task(99), budget=1)
    assert ids(got) == [0, 1] and [r.role for r in got] == ["failure", "contrast"]
    assert ids(eight.retrieve(Q, "corrective", task(99), budget=2, contrast=2)) == [0, 2, 1, 3]
    assert ids(eight.retrieve(Q, "corrective", task(99), budget=2, contrast=0)) == [0, 2]


def mixed_memory(task_filter: str) -> TrajectoryStore:
    mem = TrajectoryStore(task_filter=task_filter)
    # other task types / benchmarks are the MOST similar, so a missing filter would surface them
    add(mem, 0, 0, True, task=task(0, "heat", "alfworld"))
    add(mem, 1, 1, True, task=task(1, "clean", "scienceworld"))  # same type name, other benchmark
    add(mem, 2, 30, True, task=task(2, "clean", "alfworld"))
    add(mem, 3, 40, False, task=task(3, "clean", "alfworld"))
    add(mem, 4, 2, False, task=task(4, "cool", "alfworld"))
    add(mem, 5, 3, False, task=task(5, "boil", "scienceworld"))
    return mem


def test_task_type_filter_default():
    mem = mixed_memory("task_type")
    assert TrajectoryStore().task_filter == "task_type"
    query_task = task(99, "clean", "alfworld")
    for mode in ("none", "imitation", "strategic", "corrective"):
        got = mem.retrieve(Q, mode, query_task)
        assert all(r.record.task.task_type == "clean" and r.record.task.benchmark == "alfworld" for r in got), mode
    assert ids(mem.retrieve(Q, "none", query_task)) == [2, 3]
    assert ids(mem.retrieve(Q, "imitation", query_task)) == [2]
    assert ids(mem.retrieve(Q, "corrective", query_task)) == [3, 2]
    # a task type never seen before retrieves nothing
    assert mem.retrieve(Q, "none", task(99, "slice", "alfworld")) == []


def test_benchmark_filter():
    mem = mixed_memory("benchmark")
    got = mem.retrieve(Q, "none", task(99, "clean", "alfworld"))
    assert ids(got) == [0, 4, 2, 3]  # every alfworld type, no scienceworld
    got = mem.retrieve(Q, "none", task(99, "anything", "scienceworld"))
    assert ids(got) == [1, 5]
    assert mem.retrieve(Q, "none", task(99, "x", "webshop")) == []


def test_filter_off():
    mem = mixed_memory("off")
    assert ids(mem.retrieve(Q, "none", task(99, "clean", "alfworld"), budget=10)) == [0, 1, 4, 5, 2, 3]
    assert ids(mem.retrieve(Q, "imitation", task(99, "zzz", "webshop"))) == [0, 1, 2]


def test_unknown_filter_rejected():
    with pytest.raises(ValueError, match="task_filter"):
        TrajectoryStore(task_filter="type")


def test_no_embedding_and_infra_failures_stored_but_never_retrieved():
    mem = TrajectoryStore()
    add(mem, 0, None, True)  # embedding failed
    add(mem, 1, 0, True, infra=True)  # identical to the query, but an infrastructure failure
    add(mem, 2, 0, False, infra=True)
    add(mem, 3, 45, True)
    add(mem, 4, 60, False)
    assert len(mem) == 5
    assert [r.record_id for r in mem] == [0, 1, 2, 3, 4]
    assert mem[0].embedding is None and not mem[0].retrievable
    assert not mem[1].retrievable
    for mode in ("none", "imitation", "strategic", "corrective"):
        got = mem.retrieve(Q, mode, task(99), budget=10)
        assert set(ids(got)) <= {3, 4}, mode
    assert ids(mem.retrieve(Q, "none", task(99))) == [3, 4]
    assert ids(mem.retrieve(Q, "corrective", task(99))) == [4, 3]


def test_memory_with_only_unembedded_records():
    mem = TrajectoryStore()
    add(mem, 0, None, True)
    assert len(mem) == 1
    assert mem.retrieve(Q, "none", task(99)) == []


def test_retrieve_without_query_embedding_returns_nothing(eight):
    for mode in ("none", "imitation", "strategic", "corrective"):
        assert eight.retrieve(None, mode, task(99)) == []


def test_empty_memory_retrieves_nothing():
    assert TrajectoryStore().retrieve(Q, "corrective", task(0)) == []


def test_unknown_mode_rejected(eight):
    with pytest.raises(ValueError, match="mode"):
        eight.retrieve(Q, "abstraction", task(99))
    with pytest.raises(ValueError):
        eight.retrieve(None, "Imitation", task(99))


def test_wrong_embedding_dimension_rejected(tmp_path):
    p = tmp_path / "trajectories.jsonl"
    mem = TrajectoryStore(p)
    add(mem, 0, 10, True)
    with pytest.raises(ValueError, match="dimension"):
        mem.add(task(1), traj(1), ok(True), embedding=[1.0, 0.0, 0.0])
    assert len(mem) == 1
    mem.close()
    assert len(p.read_bytes().splitlines()) == 1  # nothing was written for the rejected record
    with pytest.raises(ValueError):
        eight_dim_query = np.ones(3)
        mem.retrieve(eight_dim_query, "none", task(99))


def test_freeze_blocks_add():
    mem = TrajectoryStore()
    add(mem, 0, 10, True)
    mem.freeze()
    assert mem.frozen
    with pytest.raises(FrozenStateError):
        add(mem, 1, 20, True)
    assert len(mem) == 1
    assert ids(mem.retrieve(Q, "none", task(99))) == [0]  # reading still works
    mem.unfreeze()
    add(mem, 1, 20, True)
    assert len(mem) == 2


def test_record_fields_and_parents_sorted():
    mem = TrajectoryStore()
    rec = add(mem, 0, 10, True, parents=["abs-000003", "abs-000001", "abs-000003"], iteration=4, mode="strategic")
    assert rec.record_id == 0
    assert rec.parents == ("abs-000001", "abs-000003")
    assert rec.iteration == 4 and rec.mode == "strategic"
    assert rec.embedding == pytest.approx(tuple(at(10)))
    assert mem[0] is rec


def build_persistent(path) -> TrajectoryStore:
    mem = TrajectoryStore(path)
    for i, deg, y in EIGHT:
        add(mem, i, deg, y, iteration=i // 3, mode="none" if i % 2 else "corrective")
    add(mem, 8, None, False)
    add(mem, 9, 5, True, infra=True)
    add(mem, 10, 15, True, task=task(10, "heat"))
    return mem


def all_retrievals(mem: TrajectoryStore):
    out = []
    for q in (Q, np.array(at(45)), np.array(at(85))):
        for mode in ("none", "imitation", "strategic", "corrective"):
            for t in (task(99), task(99, "heat")):
                out.append([(r.record, round(r.similarity, 12), r.role) for r in mem.retrieve(q, mode, t, budget=3)])
    return out


def test_reload_gives_identical_records_and_retrieval(tmp_path):
    p = tmp_path / "run" / "trajectories.jsonl"
    mem = build_persistent(p)
    before_records = list(mem)
    before = all_retrievals(mem)
    mem.close()

    again = TrajectoryStore(p)
    assert len(again) == 11
    assert list(again) == before_records
    assert all_retrievals(again) == before
    # and the reloaded store keeps appending with the next identifier
    rec = add(again, 11, 12, True)
    assert rec.record_id == 11
    again.close()
    assert len(TrajectoryStore(p)) == 12


def test_torn_final_line_skipped_on_reload(tmp_path, caplog):
    p = tmp_path / "trajectories.jsonl"
    mem = build_persistent(p)
    mem.close()
    full = p.read_bytes()
    p.write_bytes(full[:-40])  # the last record loses its tail and its newline
    with caplog.at_level(logging.WARNING):
        again = TrajectoryStore(p)
    assert len(again) == 10
    assert [r.record_id for r in again] == list(range(10))
    assert any("torn" in r.getMessage() for r in caplog.records)
    # the writer terminated the fragment; the next record gets id 10 and survives a reload
    rec = add(again, 10, 15, True)
    assert rec.record_id == 10
    again.close()
    third = TrajectoryStore(p)
    assert [r.record_id for r in third] == list(range(11))
    assert third[10].task.task_id == 10


def test_corrupt_middle_line_skipped_on_reload(tmp_path, caplog):
    p = tmp_path / "trajectories.jsonl"
    mem = TrajectoryStore(p)
    for i, deg, y in EIGHT[:5]:
        add(mem, i, deg, y)
    mem.close()
    lines = p.read_bytes().split(b"\n")
    lines[2] = b'{"record_id": 2, "task": {GARBAGE'
    p.write_bytes(b"\n".join(lines))
    with caplog.at_level(logging.WARNING):
        again = TrajectoryStore(p)
    assert any(f"{p}:3:" in r.getMessage() for r in caplog.records)
    # the records after the corrupt line are not lost
    assert [r.record_id for r in again] == [0, 1, 3, 4]
    assert ids(again.retrieve(Q, "none", task(99))) == [0, 1, 3, 4]
    assert ids(again.retrieve(Q, "corrective", task(99))) == [0, 4, 1]
    # new records never reuse an identifier already on disk
    rec = add(again, 5, 60, False)
    assert rec.record_id == 5
    again.close()
    assert [r.record_id for r in TrajectoryStore(p)] == [0, 1, 3, 4, 5]


def test_invalid_record_in_file_skipped(tmp_path, caplog):
    p = tmp_path / "trajectories.jsonl"
    mem = TrajectoryStore(p)
    add(mem, 0, 10, True)
    add(mem, 1, 20, False)
    mem.close()
    lines = p.read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[1])
    bad["mode"] = "telepathy"
    p.write_text(lines[0] + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        again = TrajectoryStore(p)
    assert [r.record_id for r in again] == [0]
    assert any(f"{p}:2:" in r.getMessage() for r in caplog.records)


def test_memory_record_from_file_is_memory_record(tmp_path):
    p = tmp_path / "t.jsonl"
    mem = TrajectoryStore(p, fsync=False)
    add(mem, 0, 10, True)
    mem.close()
    d = json.loads(p.read_text(encoding="utf-8"))
    assert "embedding" not in d and d["embedding_ref"] == ref_of(mem[0].embedding)  # the numbers are in t.emb
    # read as records (jsonl.read_jsonl), the line holds the numbers again, as old stores wrote them
    (line,) = read_jsonl(p)
    assert MemoryRecord.from_dict(line.value) == mem[0]
    assert MemoryRecord.from_dict(d, embedding=np.asarray(mem[0].embedding)) == mem[0]
