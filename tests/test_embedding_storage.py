"""Issue 45, part 2: task embeddings in a binary file beside each store's journal.

What must hold: every embedding comes back exactly as appended (float32 entries where float32 is
exact, float64 otherwise); a torn or damaged entry costs only the record that names it, with a
warning, never a crash; a torn tail is set aside, not destroyed; committed runs written with the
numbers inline still load, alone or followed by new lines; and readers of the JSONL files
(``read_jsonl``) still see ``"embedding": [numbers]``.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from antipersist_lib.jsonl import (
    EMBEDDING_HEADER,
    EMBEDDING_REF,
    EmbeddingFile,
    encode_embedding,
    read_jsonl,
    sidecar_path,
)
from antipersist_lib.memory.outcome_log import OutcomeLog
from antipersist_lib.memory.trajectory_store import MemoryRecord, TrajectoryStore
from antipersist_lib.records import MODES, EpisodeOutcome, Step, Task, Trajectory

ROOT = Path(__file__).resolve().parents[1]
#: committed runs written before issue 45 (numbers inline): a loopback run's state (float64 bag-of-words
#: embeddings; kept apart from the reproduction demo's data, which is regenerated in the new format) and an
#: embedded-model run (float32 embeddings, 896 numbers a record)
OLD_RUNS = [
    ROOT / "tests/fixtures/old_format/errandworld-anti_persistence-toxic-seed1",
    ROOT / "tests/fixtures/runs/cpu/alfworld/embedded-qwen2.5-coder-1.5b-instruct/anti_persistence/seed1",
]
DIM = 32


def _vec(rng: np.random.Generator, exact32: bool) -> np.ndarray:
    v = rng.standard_normal(DIM)
    return v.astype(np.float32).astype(np.float64) if exact32 else v


def _append(log: OutcomeLog, i: int, emb: np.ndarray) -> None:
    log.append(
        embedding=emb,
        mode=MODES[i % len(MODES)],
        reward=0.5,
        raw_success=bool(i % 2),
        task_type="t",
        task_id=i,
        instruction=f"task {i}",
    )


def _log_with(tmp_path: Path, embs: list[np.ndarray]) -> Path:
    path = tmp_path / "outcome_log.jsonl"
    log = OutcomeLog(path, fsync=False)
    for i, e in enumerate(embs):
        _append(log, i, e)
    log.close()
    return path


def _raw_records(path: Path) -> list[dict]:
    """An old journal's records parsed with the standard library alone (the reference)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_embeddings_come_back_bit_for_bit_float32_where_exact(tmp_path):
    rng = np.random.default_rng(0)
    embs = [_vec(rng, exact32=i % 3 != 0) for i in range(9)]
    path = _log_with(tmp_path, embs)
    lines = _raw_records(path)
    assert all("embedding" not in d and len(d[EMBEDDING_REF]) == 32 for d in lines)
    size = sidecar_path(path).stat().st_size
    exact = sum(i % 3 != 0 for i in range(9))
    assert size == 9 * EMBEDDING_HEADER.size + exact * DIM * 4 + (9 - exact) * DIM * 8
    again = OutcomeLog(path, read_only=True)
    assert len(again) == 9
    for r, e in zip(again, embs):
        assert np.array_equal(np.array(r.embedding), e)
    # what every other reader sees: the numbers inline, in the old field's place
    for line, e in zip(read_jsonl(path), embs):
        assert list(line.value)[0] == "embedding" and line.value["embedding"] == e.tolist()


def test_an_embedding_seen_again_is_stored_once(tmp_path):
    e = _vec(np.random.default_rng(1), exact32=True)
    path = _log_with(tmp_path, [e, e, e])
    assert sidecar_path(path).stat().st_size == EMBEDDING_HEADER.size + DIM * 4
    assert len(OutcomeLog(path, read_only=True)) == 3


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.99])
def test_a_torn_last_entry_costs_its_record_only_and_is_set_aside(tmp_path, caplog, keep):
    rng = np.random.default_rng(2)
    embs = [_vec(rng, exact32=True) for _ in range(4)]
    path = _log_with(tmp_path, embs)
    emb_file = sidecar_path(path)
    data = emb_file.read_bytes()
    entry = EMBEDDING_HEADER.size + DIM * 4
    cut = len(data) - entry + int(keep * entry)  # the last entry written only in part, its line written
    emb_file.write_bytes(data[:cut])
    with caplog.at_level(logging.WARNING):
        audit = OutcomeLog(path, read_only=True)
    assert len(audit) == 3 and audit.skipped_lines == 1
    assert any(":4:" in r.getMessage() and "not in outcome_log.emb" in r.getMessage() for r in caplog.records)
    assert emb_file.read_bytes() == data[:cut]  # read-only: nothing changed
    log = OutcomeLog(path, fsync=False)  # opening to write sets the torn bytes aside
    assert emb_file.read_bytes() == data[: len(data) - entry]
    aside = emb_file.with_name(emb_file.name + ".torn")
    assert (aside.read_bytes() if keep else b"") == data[len(data) - entry : cut]  # kept, not destroyed
    _append(log, 4, embs[3])  # the same task again, and the run goes on
    log.close()
    again = OutcomeLog(path, read_only=True)
    # line 4 names its embedding by content, so the entry written again makes that record whole again
    assert [r.task_id for r in again] == [0, 1, 2, 3, 4]
    assert all(np.array_equal(np.array(r.embedding), e) for r, e in zip(again, [*embs, embs[3]]))


def test_a_damaged_entry_mid_file_costs_its_record_only(tmp_path, caplog):
    rng = np.random.default_rng(3)
    embs = [_vec(rng, exact32=False) for _ in range(5)]
    path = _log_with(tmp_path, embs)
    emb_file = sidecar_path(path)
    data = bytearray(emb_file.read_bytes())
    entry = EMBEDDING_HEADER.size + DIM * 8
    data[2 * entry + EMBEDDING_HEADER.size + 5] ^= 0xFF  # one payload byte of the third entry
    emb_file.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        log = OutcomeLog(path, fsync=False)
    assert [r.task_id for r in log] == [0, 1, 3, 4]
    assert any("damaged" in r.getMessage() for r in caplog.records)
    _append(log, 5, embs[2])  # appends go on after the damage, and are found again
    log.close()
    assert [r.task_id for r in OutcomeLog(path, read_only=True)] == [0, 1, 2, 3, 4, 5]  # the entry is whole again
    data = bytearray(emb_file.read_bytes())
    data[0:4] = b"XXXX"  # a damaged header: the scan finds the next entry
    emb_file.write_bytes(bytes(data))
    assert [r.task_id for r in OutcomeLog(path, read_only=True)] == [1, 2, 3, 4, 5]


def test_the_trajectory_store_keeps_records_without_an_embedding_as_before(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    mem = TrajectoryStore(path, fsync=False)
    task = Task(1, "alfworld", "clean", "clean the mug")
    e = _vec(np.random.default_rng(4), exact32=True)
    mem.add(task, Trajectory("o", (Step("a", "b"),)), EpisodeOutcome(True), embedding=None)
    mem.add(task, Trajectory("o"), EpisodeOutcome(False), embedding=e)
    mem.close()
    lines = _raw_records(path)
    assert lines[0]["embedding"] is None and EMBEDDING_REF not in lines[0]
    assert lines[1][EMBEDDING_REF] == encode_embedding(e)[0]
    again = TrajectoryStore(path, read_only=True)
    assert again[0] == mem[0] and again[1] == mem[1] and again[1].embedding == tuple(e.tolist())
    assert [MemoryRecord.from_dict(x.value) for x in read_jsonl(path)] == [mem[0], mem[1]]


@pytest.mark.parametrize("run", OLD_RUNS, ids=lambda p: p.name)
def test_a_committed_old_format_run_loads_as_before(run):
    state = run / "state"
    old_log = _raw_records(state / "outcome_log.jsonl")
    log = OutcomeLog(state / "outcome_log.jsonl", read_only=True)
    assert len(log) == len(old_log) > 0
    for rec, d in zip(log, old_log):
        assert list(rec.embedding) == [float(x) for x in d["embedding"]]  # exact, no float32 rounding
        assert (rec.mode, rec.reward, rec.raw_success, rec.task_id) == (
            d["mode"],
            d["reward"],
            d["raw_success"],
            d["task_id"],
        )
    old_mem = _raw_records(state / "trajectories.jsonl")
    mem = TrajectoryStore(state / "trajectories.jsonl", read_only=True)
    assert [r.record_id for r in mem] == [d["record_id"] for d in old_mem]
    for rec, d in zip(mem, old_mem):
        assert rec == MemoryRecord.from_dict(d)
    assert [x.value for x in read_jsonl(state / "outcome_log.jsonl")] == old_log
    assert not sidecar_path(state / "outcome_log.jsonl").exists()  # reading wrote nothing


@pytest.mark.parametrize("run", OLD_RUNS, ids=lambda p: p.name)
def test_an_old_run_resumed_with_this_kit_mixes_both_kinds_of_line(run, tmp_path):
    state = tmp_path / "state"
    shutil.copytree(run / "state", state)
    before = {p.name: p.read_bytes() for p in state.iterdir()}
    old = list(OutcomeLog(state / "outcome_log.jsonl", read_only=True))
    old_mem = list(TrajectoryStore(state / "trajectories.jsonl", read_only=True))
    dim = len(old[0].embedding)
    log = OutcomeLog(state / "outcome_log.jsonl", fsync=False)
    mem = TrajectoryStore(state / "trajectories.jsonl", fsync=False)
    rng = np.random.default_rng(5)
    new = [_vec(rng, exact32=True)[:1].repeat(dim) * rng.standard_normal(dim).astype(np.float32) for _ in range(3)]
    for i, e in enumerate(new):
        _append(log, 1000 + i, e)
        mem.add(Task(1000 + i, "errandworld", "t", "new"), Trajectory("o"), EpisodeOutcome(True), embedding=e)
    log.close()
    mem.close()
    for name, data in before.items():  # the old lines are untouched; new lines follow them
        assert (state / name).read_bytes().startswith(data)
    log = OutcomeLog(state / "outcome_log.jsonl", read_only=True)
    assert [r.embedding for r in log] == [r.embedding for r in old] + [tuple(e.tolist()) for e in new]
    mem = TrajectoryStore(state / "trajectories.jsonl", read_only=True)
    assert list(mem)[: len(old_mem)] == old_mem and len(mem) == len(old_mem) + 3
    inlined = [x.value for x in read_jsonl(state / "outcome_log.jsonl")]
    assert all("embedding" in d and EMBEDDING_REF not in d for d in inlined)
    assert inlined[-1]["embedding"] == new[-1].tolist()


def test_read_jsonl_yields_a_line_whose_entry_is_missing_as_stored(tmp_path, caplog):
    path = _log_with(tmp_path, [_vec(np.random.default_rng(6), exact32=True)])
    sidecar_path(path).unlink()
    with caplog.at_level(logging.WARNING):
        (line,) = read_jsonl(path)
    assert EMBEDDING_REF in line.value and "embedding" not in line.value
    assert any("not in outcome_log.emb" in r.getMessage() for r in caplog.records)


def test_the_embedding_file_refuses_nothing_it_can_store_exactly():
    f = EmbeddingFile("/nonexistent/never.emb")  # a missing file is an empty one; nothing is written
    big = np.array([1e300, -2.5, 0.1])  # beyond float32: kept as float64
    ref, entry = encode_embedding(big)
    assert entry[4:5] == b"d" and len(entry) == EMBEDDING_HEADER.size + 3 * 8
    assert encode_embedding(np.float32([0.5, -0.0, 3.0]))[1][4:5] == b"f"
    assert len(f) == 0 and f.get(ref) is None
    with pytest.raises(ValueError, match="empty embedding"):
        encode_embedding([])
