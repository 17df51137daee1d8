"""Seeding a trajectory store from a fixed pool (core.seeding): the faulty-memories study's method rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from antipersist_lib.core.seeding import SEED_ITERATION, read_seed_records, seed_store
from antipersist_lib.memory.trajectory_store import TrajectoryStore
from antipersist_lib.methods import make_method, validate_method_params
from antipersist_lib.methods.base import MethodContext
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory


class CountingEmbedder:
    """Deterministic vectors; counts the texts it was asked for."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed_many(self, texts, *, tags=None):
        self.texts.extend(texts)
        return [np.array([len(t) % 7 + 1.0, 1.0, float(i)]) for i, t in enumerate(texts)]

    def embed(self, text, *, tags=None):
        return self.embed_many([text], tags=tags)[0]


def write_pool(path: Path, n: int = 3) -> Path:
    lines = []
    for i in range(n):
        task = Task(i, "errandworld", "bring_item", f"bring the item {i}")
        traj = Trajectory(f"You are in room {i}.", (Step(f"go to room {i}", "ok"),))
        lines.append(
            json.dumps(
                {
                    "rid": f"r{i}",
                    "task": task.to_dict(),
                    "trajectory": traj.to_dict(),
                    "outcome": EpisodeOutcome(True).to_dict(),
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_seeding_adds_every_record_once_in_order_with_embeddings(tmp_path):
    pool = write_pool(tmp_path / "pool.jsonl")
    store = TrajectoryStore(tmp_path / "traj.jsonl", fsync=False)
    emb = CountingEmbedder()
    assert seed_store(store, pool, emb, prefix_chars=5) == 3
    assert [r.task.task_id for r in store] == [0, 1, 2]
    assert all(r.iteration == SEED_ITERATION and r.embedding is not None for r in store)
    assert emb.texts[0] == "bring the item 0\nInitial state: You a"  # the retrieval text, prefix-clipped
    assert seed_store(store, pool, emb, prefix_chars=5) == 0 and len(store) == 3  # resume: nothing twice
    store.close()


def test_an_interrupted_seed_is_completed_not_repeated(tmp_path):
    pool = write_pool(tmp_path / "pool.jsonl", n=4)
    records = read_seed_records(pool)
    store = TrajectoryStore(tmp_path / "traj.jsonl", fsync=False)
    for r in records[:2]:
        store.add(r.task, r.trajectory, r.outcome, embedding=[1.0, 0.0, 0.0], iteration=SEED_ITERATION)
    emb = CountingEmbedder()
    assert seed_store(store, pool, emb, prefix_chars=50) == 2 and len(emb.texts) == 2
    assert [r.task.task_id for r in store] == [0, 1, 2, 3]
    store.close()


def test_a_malformed_seed_file_names_the_line(tmp_path):
    pool = write_pool(tmp_path / "pool.jsonl", n=2)
    pool.write_text(pool.read_text() + '{"task": {}}\n')
    with pytest.raises(ValueError, match=r"pool.jsonl line 3: expected an object with task, trajectory and outcome"):
        read_seed_records(pool)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="holds no records"):
        read_seed_records(tmp_path / "empty.jsonl")


@pytest.mark.parametrize("method", ["anti_persistence", "trajectory_memory"])
def test_the_trajectory_methods_seed_their_store_at_begin(tmp_path, method):
    pool = write_pool(tmp_path / "pool.jsonl")
    ctx = MethodContext(None, CountingEmbedder(), tmp_path / method, 0, "errandworld", fsync=False)
    ctx.state_dir.mkdir()
    m = make_method(method, ctx, seed_pool=str(pool))
    assert len(m.memory) == 0  # construction writes nothing (parameter checks build methods with no model)
    m.begin()
    m.begin()
    assert len(m.memory) == 3 and m.describe()["seed_pool"] == str(pool)
    m.close()


def test_seed_pool_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="seed_pool: no such file"):
        validate_method_params("anti_persistence", {"seed_pool": str(tmp_path / "nope.jsonl")})
    with pytest.raises(ValueError, match="seed_pool must be a path"):
        validate_method_params("trajectory_memory", {"seed_pool": 3})
    with pytest.raises(ValueError, match=r"has no parameter\(s\) \['seed_pool'\]"):
        validate_method_params("expel", {"seed_pool": str(write_pool(tmp_path / "p.jsonl"))})


class CountingLLM:
    """Answers every synthesis request with a numbered guidance text; counts the requests."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def chat(self, messages, **kw):
        from types import SimpleNamespace

        self.calls.append({"messages": messages, **kw})
        return SimpleNamespace(text=f"Guidance {len(self.calls)}: go to the room first.", cached=False)


@pytest.mark.parametrize("method", ["abstraction_memory", "joint_memory"])
def test_the_abstraction_methods_seed_both_stores_at_begin_and_resume_without_repeating(tmp_path, method):
    pool = write_pool(tmp_path / "pool.jsonl")
    llm = CountingLLM()
    ctx = MethodContext(llm, CountingEmbedder(), tmp_path / method, 0, "errandworld", fsync=False)
    ctx.state_dir.mkdir()
    m = make_method(method, ctx, seed_pool=str(pool), synthesis_max_tokens=64)
    assert len(m.memory) == 0 and not llm.calls  # construction calls no model
    m.begin()
    seeded = [a for a in m.store.history() if a.created_iteration == SEED_ITERATION]
    assert len(m.memory) == 3 and len(seeded) == 3 and len(llm.calls) == 3
    # one abstraction per seeded record, from that record first (H: the record, then its neighbours)
    assert sorted(a.source_records[0] for a in seeded) == [0, 1, 2]
    assert all(c["tags"]["phase"] == "seed" and c["tags"]["iteration"] == SEED_ITERATION for c in llm.calls)
    m.close()
    # a resumed run reopens the stores and begins again: nothing is synthesized twice
    again = make_method(method, ctx, seed_pool=str(pool), synthesis_max_tokens=64)
    again.begin()
    assert len(llm.calls) == 3 and len(again.store.history()) == 3 and len(again.memory) == 3
    again.close()


def test_without_a_seed_pool_the_abstraction_store_starts_empty(tmp_path):
    llm = CountingLLM()
    ctx = MethodContext(llm, CountingEmbedder(), tmp_path / "a", 0, "errandworld", fsync=False)
    ctx.state_dir.mkdir()
    m = make_method("abstraction_memory", ctx)
    m.begin()
    assert len(m.memory) == 0 and len(m.store.history()) == 0 and not llm.calls
    m.close()
