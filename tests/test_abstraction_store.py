"""Abstraction store S_k: immutable identifiers, provenance through rewrites and merges, replay."""

from __future__ import annotations

import dataclasses
import json
import logging
import math

import numpy as np
import pytest

from antipersist_lib.errors import FrozenStateError
from antipersist_lib.memory.abstraction_store import (
    SNAPSHOT_EMBEDDINGS,
    STAT_FIELDS,
    Abstraction,
    AbstractionStore,
    parents_of_records,
    read_snapshot,
)
from antipersist_lib.memory.trajectory_store import MemoryRecord
from antipersist_lib.records import EpisodeOutcome, Task, Trajectory


def at(deg: float) -> list[float]:
    r = math.radians(deg)
    return [math.cos(r), math.sin(r)]


def test_sequential_immutable_ids():
    s = AbstractionStore()
    a = s.add("Open containers before searching them.", kind="rule")
    b = s.add("Heat with the microwave.", kind="skill", parents=["abs-000009", "abs-000002", "abs-000009"])
    c = s.add("Check the sink first.", kind="insight")
    assert [a.abstraction_id, b.abstraction_id, c.abstraction_id] == ["abs-000000", "abs-000001", "abs-000002"]
    assert b.parents == ("abs-000002", "abs-000009")  # sorted, deduplicated
    assert s.new_id() == "abs-000003"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.text = "changed"  # type: ignore[misc]
    assert s.get("abs-000000").text == "Open containers before searching them."
    assert len(s) == 3 and "abs-000001" in s


def test_custom_prefix_and_empty_text():
    s = AbstractionStore(prefix="rule")
    assert s.add("x", kind="rule").abstraction_id == "rule-000000"
    with pytest.raises(ValueError):
        s.add("   \n", kind="rule")
    assert len(s) == 1 and s.new_id() == "rule-000001"


def test_rewrite_creates_new_id_and_retires_old():
    s = AbstractionStore()
    old = s.add(
        "v1", kind="rule", parents=["abs-900000", "abs-900001"], task_type="heat", name="heating", created_iteration=1
    )
    other = s.add("unrelated", kind="insight")
    new = s.rewrite(old.abstraction_id, "v2", created_iteration=4, parents=["abs-900001", "abs-900005"])
    assert new.abstraction_id == "abs-000002"
    assert new.abstraction_id != old.abstraction_id
    assert new.text == "v2" and new.created_iteration == 4
    assert new.parents == ("abs-900000", "abs-900001", "abs-900005")  # union, sorted
    assert new.derived_from == ("abs-000000",)
    assert (new.kind, new.task_type, new.name) == ("rule", "heat", "heating")  # inherited
    # the old one is retired, not erased
    assert s.get("abs-000000") == old and old.text == "v1"
    assert [a.abstraction_id for a in s.active()] == ["abs-000001", "abs-000002"]
    assert "abs-000000" not in s
    assert [a.abstraction_id for a in s.history()] == ["abs-000000", "abs-000001", "abs-000002"]
    assert s.retired_reason("abs-000000") == "rewritten as abs-000002"
    assert s.retired_reason(other.abstraction_id) is None
    # a retired abstraction cannot be rewritten or retired again
    with pytest.raises(KeyError):
        s.rewrite("abs-000000", "v3", created_iteration=5)
    with pytest.raises(KeyError):
        s.retire("abs-000000")


def test_rewrite_can_override_kind():
    s = AbstractionStore()
    a = s.add("t", kind="rule")
    b = s.rewrite(a.abstraction_id, "t2", created_iteration=1, kind="insight")
    assert b.kind == "insight"


def test_merge_retires_inputs():
    s = AbstractionStore()
    a = s.add("a", kind="rule", parents=["p1"])
    b = s.add("b", kind="rule", parents=["p2", "p3"])
    c = s.add("c", kind="rule")
    m = s.merge([a.abstraction_id, b.abstraction_id], "a and b", created_iteration=2, kind="rule")
    assert m.abstraction_id == "abs-000003"
    assert m.parents == ("p1", "p2", "p3")
    assert m.derived_from == ("abs-000000", "abs-000001")
    assert [x.abstraction_id for x in s.active()] == ["abs-000002", "abs-000003"]
    assert s.retired_reason("abs-000000") == "merged into abs-000003"
    assert s.retired_reason("abs-000001") == "merged into abs-000003"
    assert s.get("abs-000001") == b and len(s.history()) == 4
    assert c.abstraction_id in s


def test_retire_unknown_raises_keyerror():
    s = AbstractionStore()
    with pytest.raises(KeyError):
        s.retire("abs-000123")
    with pytest.raises(KeyError):
        s.get("abs-000123")
    with pytest.raises(KeyError):
        s.update_stats("abs-000123", votes=1)


def test_replaying_duplicate_add_fails(tmp_path, caplog):
    s = AbstractionStore()
    a = s.add("x", kind="rule")
    with pytest.raises(ValueError, match="already exists"):
        s._apply({"op": "add", "abstraction": {**a.to_dict(), "text": "tampered"}})
    assert s.get(a.abstraction_id).text == "x"

    d = tmp_path / "store"
    disk = AbstractionStore(d)
    a = disk.add("original", kind="rule")
    disk.close()
    with open(d / "events.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"op": "add", "abstraction": {**a.to_dict(), "text": "tampered"}}) + "\n")
        fh.write(json.dumps({"op": "frobnicate"}) + "\n")
        fh.write(json.dumps({"op": "retire", "id": "abs-999999"}) + "\n")
    with caplog.at_level(logging.WARNING):
        again = AbstractionStore(d)
    assert again.get("abs-000000").text == "original"
    assert len(again.history()) == 1
    assert sum("skipping invalid store event" in r.getMessage() for r in caplog.records) == 3
    assert any(":2:" in r.getMessage() and "already exists" in r.getMessage() for r in caplog.records)
    assert again.add("next", kind="rule").abstraction_id == "abs-000001"


def test_stats_accumulate_and_survive_reload(tmp_path):
    d = tmp_path / "store"
    s = AbstractionStore(d)
    a = s.add("a", kind="rule")
    b = s.add("b", kind="rule")
    s.update_stats(a.abstraction_id, n_injected=1)
    s.update_stats(a.abstraction_id, n_injected=1, n_success=1)
    st = s.update_stats(a.abstraction_id, n_injected=3, n_success=1, votes=-2, extra={"note": "x"})
    s.update_stats(b.abstraction_id, votes=4)
    assert (st.n_injected, st.n_success, st.votes, st.extra) == (5, 2, -2, {"note": "x"})
    s.retire(b.abstraction_id, reason="pruned")
    s.update_stats(b.abstraction_id, votes=1)  # stats of a retired abstraction may still move
    s.close()

    again = AbstractionStore(d)
    sa, sb = again.stats("abs-000000"), again.stats("abs-000001")
    assert (sa.n_injected, sa.n_success, sa.votes, sa.extra) == (5, 2, -2, {"note": "x"})
    assert (sb.n_injected, sb.n_success, sb.votes) == (0, 0, 5)
    assert [x.abstraction_id for x in again.active()] == ["abs-000000"]
    assert again.retired_reason("abs-000001") == "pruned"
    assert again.get("abs-000001").text == "b"
    assert again.new_id() == "abs-000002"
    assert again.add("c", kind="rule").abstraction_id == "abs-000002"


def test_unknown_stats_field_raises():
    s = AbstractionStore()
    a = s.add("a", kind="rule")
    with pytest.raises(ValueError, match="unknown stats field"):
        s.update_stats(a.abstraction_id, n_failures=1)
    with pytest.raises(ValueError):
        s._apply({"op": "stats", "id": a.abstraction_id, "delta": {"bogus": 1}})
    assert STAT_FIELDS == ("n_injected", "n_success", "votes")


def test_snapshot(tmp_path):
    s = AbstractionStore()
    a = s.add("a", kind="rule", parents=["p"], embedding=[1.0, 0.0])
    b = s.add("b", kind="insight")
    s.update_stats(a.abstraction_id, n_injected=2, n_success=1)
    s.retire(b.abstraction_id)
    out = tmp_path / "snaps" / "iter_003.json"
    s.snapshot(out, iteration=3, method="abstraction_memory")
    snap = read_snapshot(out)
    assert snap["iteration"] == 3 and snap["method"] == "abstraction_memory"
    assert snap["n_created"] == 2
    assert [x["abstraction_id"] for x in snap["active"]] == ["abs-000000"]
    act = snap["active"][0]
    assert act["text"] == "a" and act["parents"] == ["p"] and act["embedding"] == [1.0, 0.0]
    assert act["stats"] == {"n_injected": 2, "n_success": 1, "votes": 0, "extra": {}}
    assert Abstraction.from_dict(act) == a
    s.update_stats(a.abstraction_id, votes=1)
    s.snapshot(out, iteration=4)
    assert read_snapshot(out)["active"][0]["stats"]["votes"] == 1
    assert sorted(p.name for p in out.parent.iterdir()) == [SNAPSHOT_EMBEDDINGS, "iter_003.json"]


def test_snapshots_name_embeddings_and_hold_each_once_however_many_iterations(tmp_path):
    """Issue 45's rehearsal: every snapshot rewrote every abstraction's 4096-d embedding as JSON text, so a
    run's snapshots grew with the square of its iterations (143 MiB per abstraction-memory run) and so did
    the memory that wrote them. Each embedding is now written once, beside the snapshots."""
    rng = np.random.default_rng(0)
    s = AbstractionStore()
    folder = tmp_path / "snapshots"
    for it in range(1, 6):
        for _ in range(4):  # four new abstractions per iteration
            s.add(f"rule {len(s)}", kind="rule", embedding=rng.standard_normal(256).astype(np.float32))
        s.snapshot(folder / f"abstractions_iter_{it:02d}.json", iteration=it)
    raw = json.loads((folder / "abstractions_iter_05.json").read_text(encoding="utf-8"))
    assert all(a["embedding_ref"] and "embedding" not in a for a in raw["active"])  # named, not written
    emb = folder / SNAPSHOT_EMBEDDINGS
    assert emb.stat().st_size < 20 * (256 * 4 + 64)  # 20 embeddings, each once (float32), not 4+8+...+20
    last = read_snapshot(folder / "abstractions_iter_05.json")
    assert [Abstraction.from_dict(a) for a in last["active"]] == list(s)  # every value back, exactly
    assert "embedding" not in read_snapshot(folder / "abstractions_iter_05.json", embeddings=False)["active"][0]
    # a snapshot written before this change (the numbers inline) reads as it is
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"iteration": 1, "active": [list(s)[0].to_dict()]}), encoding="utf-8")
    assert Abstraction.from_dict(read_snapshot(old)["active"][0]) == list(s)[0]


def mrec(i: int, parents) -> MemoryRecord:
    return MemoryRecord(i, Task(i, "alfworld", "clean"), Trajectory("o"), EpisodeOutcome(True), None, tuple(parents))


def test_parents_of_records():
    recs = [mrec(0, ["abs-000003", "abs-000001"]), mrec(1, []), mrec(2, ["abs-000001", "abs-000007"])]
    assert parents_of_records(recs) == ("abs-000001", "abs-000003", "abs-000007")
    assert parents_of_records([]) == ()
    assert parents_of_records([mrec(0, [])]) == ()
    assert parents_of_records([object()]) == ()  # no parents attribute: contributes nothing


def test_frozen_store_rejects_writes(tmp_path):
    d = tmp_path / "store"
    s = AbstractionStore(d)
    a = s.add("a", kind="rule")
    s.freeze()
    assert s.frozen
    with pytest.raises(FrozenStateError):
        s.add("b", kind="rule")
    with pytest.raises(FrozenStateError):
        s.retire(a.abstraction_id)
    with pytest.raises(FrozenStateError):
        s.update_stats(a.abstraction_id, votes=1)
    with pytest.raises(FrozenStateError):
        s.rewrite(a.abstraction_id, "a2", created_iteration=1)
    # nothing changed in memory or on disk
    assert [x.abstraction_id for x in s.active()] == ["abs-000000"]
    assert s.stats(a.abstraction_id).votes == 0
    assert s.new_id() == "abs-000001"
    s.close()
    assert len((d / "events.jsonl").read_bytes().splitlines()) == 1
    s.unfreeze()
    assert not s.frozen


def test_search_ranks_by_cosine_and_filters():
    s = AbstractionStore()
    s.add("r40 heat", kind="rule", task_type="heat", embedding=at(40))  # 0
    s.add("r10 clean", kind="rule", task_type="clean", embedding=at(10))  # 1
    s.add("i20 global", kind="insight", task_type=None, embedding=at(20))  # 2
    s.add("no embedding", kind="rule", task_type="clean")  # 3
    s.add("r5 clean, retired", kind="rule", task_type="clean", embedding=at(5))  # 4
    s.add("s30 clean", kind="skill", task_type="clean", embedding=at(30))  # 5
    s.add("r80 clean", kind="rule", task_type="clean", embedding=at(80))  # 6
    s.retire("abs-000004")
    q = np.array([1.0, 0.0])

    got = s.search(q, k=10)
    assert [a.abstraction_id for a, _ in got] == ["abs-000001", "abs-000002", "abs-000005", "abs-000000", "abs-000006"]
    for (_, sim), deg in zip(got, (10, 20, 30, 40, 80)):
        assert sim == pytest.approx(math.cos(math.radians(deg)), abs=1e-6)

    assert [a.abstraction_id for a, _ in s.search(q, k=2)] == ["abs-000001", "abs-000002"]
    # task_type keeps that type and the untyped (global) ones
    assert [a.abstraction_id for a, _ in s.search(q, k=10, task_type="clean")] == [
        "abs-000001",
        "abs-000002",
        "abs-000005",
        "abs-000006",
    ]
    assert [a.abstraction_id for a, _ in s.search(q, k=10, task_type="heat")] == ["abs-000002", "abs-000000"]
    assert [a.abstraction_id for a, _ in s.search(q, k=10, kinds=["rule"])] == [
        "abs-000001",
        "abs-000000",
        "abs-000006",
    ]
    assert [a.abstraction_id for a, _ in s.search(q, k=10, task_type="clean", kinds={"skill", "insight"})] == [
        "abs-000002",
        "abs-000005",
    ]
    assert s.search(q, k=10, kinds=["reflection"]) == []
    assert s.search(q, k=0) == []
    assert [a.abstraction_id for a, _ in s.search(np.array(at(85)), k=1)] == ["abs-000006"]


def test_reload_preserves_everything(tmp_path):
    d = tmp_path / "store"
    s = AbstractionStore(d, fsync=False)
    a = s.add("a", kind="rule", parents=["x"], source_records=[3, 1], embedding=[0.5, 0.5], task_type="t", name="n")
    b = s.rewrite(a.abstraction_id, "a2", created_iteration=2, parents=["y"])
    c = s.add("c", kind="insight")
    m = s.merge([b.abstraction_id, c.abstraction_id], "m", created_iteration=3, kind="rule")
    s.close()
    again = AbstractionStore(d)
    assert again.history() == s.history()
    assert again.active() == [m]
    assert again.get(b.abstraction_id).parents == ("x", "y")
    assert again.get(a.abstraction_id).source_records == (3, 1)
    assert m.parents == ("x", "y")


def test_search_over_the_kept_embeddings_equals_a_matrix_of_the_candidates_alone():
    """The store keeps its embeddings as they arrive and a search is one product over them; it must rank
    exactly as the matrix of the candidates alone did (the code before), retired ones, filters and ties too."""
    from antipersist_lib.memory.similarity import EmbeddingMatrix, top_k

    for seed in range(4):
        rng = np.random.default_rng(seed)
        s = AbstractionStore()
        base = rng.standard_normal((6, 64)).astype(np.float32)
        for i in range(150):
            vec = base[i % 6] if i % 5 == 0 else rng.standard_normal(64).astype(np.float32)  # exact ties
            s.add(
                f"r{i}",
                kind=("rule", "skill")[i % 2],
                task_type=(None, "clean", "heat")[i % 3],
                embedding=None if i % 11 == 0 else vec,
            )
        for a in list(s)[::7]:
            s.retire(a.abstraction_id, reason="test")
        q = rng.standard_normal(64)
        for task_type, kinds, k in ((None, None, 5), ("clean", None, 8), ("heat", ["skill"], 3), (None, ["rule"], 200)):
            cands = [
                a
                for a in s
                if a.embedding is not None
                and (task_type is None or a.task_type in (None, task_type))
                and (kinds is None or a.kind in kinds)
            ]
            mat = EmbeddingMatrix()
            for a in cands:
                mat.append(np.asarray(a.embedding))
            sims = mat.similarities(q)
            expected = [(cands[i].abstraction_id, float(sims[i])) for i in top_k(sims, k)]
            got = [(a.abstraction_id, score) for a, score in s.search(q, k=k, task_type=task_type, kinds=kinds)]
            assert got == expected, (seed, task_type, kinds, k)
    with pytest.raises(ValueError, match="dimension 3"):
        s.add("wrong size", kind="rule", embedding=[1.0, 2.0, 3.0])
    assert "wrong size" not in {a.text for a in s}  # refused before anything was registered or written
