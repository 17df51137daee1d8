"""Issue 42: no committed record is ever dropped. A line the journal committed and that was cut afterwards is
rebuilt from the run's other records (the outcome log from the training episodes and trajectory records, the
trajectory records from the episodes and the outcome log) or named, with the fix, before anything is changed;
a crash's fragment in a file without a journal is set aside once, not warned about on every later read."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from antipersist_lib.jsonl import TORN_SUFFIX, JsonlWriter, read_jsonl, set_aside_malformed
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.repair import (
    CommittedRecordLostError,
    lost_committed,
    repair_committed,
    repair_embeddings,
)
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

PARAMS = {"round_robin_iterations": 1, "warmup_per_mode": 1}
STATE = ("episodes_train.jsonl", "state/trajectories.jsonl", "state/outcome_log.jsonl")


def _spec(root: Path, iterations: int) -> RunSpec:
    return RunSpec(
        method="anti_persistence",
        benchmark="errandworld",
        backbone="scripted-loopback",
        embedding="loopback-bag-of-words",
        seed=3,
        iterations=iterations,
        train_per_iteration=5,
        max_steps=4,
        heldout_concurrency=2,
        method_params=PARAMS,
        name="ap",
        out_root=str(root / "runs"),
        cache_dir=str(root / "cache"),
        progress=False,
    )


def _run(spec: RunSpec) -> Path:
    with LoopbackServer(responder=errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        run_cell(spec, endpoint=ep, embed_endpoint=ep)
    return spec.run_dir()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished two-iteration Anti-Persistence run whose last training episode was logged."""
    run = _run(_spec(tmp_path_factory.mktemp("repair"), 2))
    last = [x.value for x in read_jsonl(run / "episodes_train.jsonl")][-1]
    assert last["meta"]["logged"] and last["embedding_ok"]
    return run


def _copy(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


def _last_state(run: Path) -> dict[str, int]:
    entries = [x.value for x in read_jsonl(run / "journal.jsonl")]
    return next(e["state"] for e in reversed(entries) if isinstance(e.get("state"), dict))


def _last_line_start(path: Path) -> int:
    data = path.read_bytes()
    return data.rstrip(b"\n").rfind(b"\n") + 1


@pytest.mark.parametrize("rel", ["state/outcome_log.jsonl", "state/trajectories.jsonl"])
def test_a_committed_last_line_cut_at_every_byte_is_rebuilt_exactly(finished, tmp_path, rel):
    original = (finished / rel).read_bytes()
    start = _last_line_start(finished / rel)
    committed = _last_state(finished)
    work = _copy(finished, tmp_path / "run")
    target = work / rel
    work_files = [work / r for r in STATE]
    for cut in range(start, len(original)):  # every byte offset of the last line: nothing of it to all but \n
        target.write_bytes(original[:cut])
        (work / (rel + TORN_SUFFIX)).unlink(missing_ok=True)
        assert [lost.first_line for lost in lost_committed(work, work_files, committed)] == [original.count(b"\n")]
        done = repair_committed(RunDirectory(work), work_files, committed)
        assert len(done) == 1 and "rebuilt 1 committed line" in done[0]
        assert target.read_bytes() == original, f"cut at byte {cut} of {len(original)}"
        if cut > start:  # the damaged bytes are kept, not destroyed
            assert (work / (rel + TORN_SUFFIX)).read_bytes() == original[start:cut] + b"\n"
    assert lost_committed(finished, [finished / r for r in STATE], committed) == []  # the original is whole


@pytest.mark.parametrize("rel", ["state/outcome_log.jsonl", "state/trajectories.jsonl"])
def test_a_lost_line_whose_embedding_entry_was_cut_too_is_rebuilt_with_its_entry(finished, tmp_path, rel):
    """A line names its embedding in the binary file beside the journal (``.emb``); a crash or copy that cut
    both must not leave a rebuilt line naming an entry that is gone (the record would be skipped on load)."""
    from antipersist_lib.jsonl import EMBEDDING_REF, sidecar_path

    work = _copy(finished, tmp_path / "run")
    journal, emb = work / rel, sidecar_path(work / rel)
    original_journal, original_emb = journal.read_bytes(), emb.read_bytes()
    last = json.loads(original_journal.splitlines()[-1])
    assert EMBEDDING_REF in last  # the line names its embedding; the numbers are in the .emb file
    journal.write_bytes(original_journal[: _last_line_start(journal) + 7])
    emb.write_bytes(original_emb[:-9])  # the last entry torn
    done = repair_committed(RunDirectory(work), [work / r for r in STATE], _last_state(finished))
    assert len(done) == 1 and "rebuilt 1 committed line" in done[0]
    assert journal.read_bytes() == original_journal
    # the cut entry may be an earlier line's (an embedding is stored once): the resume's second step puts
    # back every entry a committed line names, from the other store's file
    done = repair_embeddings(RunDirectory(work), [work / r for r in STATE])
    assert emb.read_bytes() == original_emb
    assert [x.value for x in read_jsonl(journal)] == [x.value for x in read_jsonl(finished / rel)]
    assert repair_embeddings(RunDirectory(work), [work / r for r in STATE]) == []  # nothing left to do


def test_an_embedding_entry_no_file_holds_stops_the_run_naming_the_file(finished, tmp_path):
    from antipersist_lib.jsonl import sidecar_path

    work = _copy(finished, tmp_path / "run")
    for rel in ("state/outcome_log.jsonl", "state/trajectories.jsonl"):
        sidecar_path(work / rel).write_bytes(b"")  # both copies of every embedding gone
    with pytest.raises(CommittedRecordLostError, match=r"no longer holds and no other file of the run does"):
        repair_embeddings(RunDirectory(work), [work / r for r in STATE])


def test_a_resumed_run_keeps_the_committed_entry_the_old_kit_dropped(finished, tmp_path):
    """The reported case: the last outcome-log line cut, then the run extended by an iteration. It continues
    with every entry (the undamaged copy's 8 of 8 in the report, not 7) and ends as the undamaged copy does."""
    base = finished.parents[4]  # <root>/runs/<benchmark>/<backbone>/<name>/<seed>: <root> holds runs and cache
    damaged = _copy(finished, tmp_path / "damaged" / finished.relative_to(base))
    intact = _copy(finished, tmp_path / "intact" / finished.relative_to(base))
    log_file = damaged / "state/outcome_log.jsonl"
    data = log_file.read_bytes()
    log_file.write_bytes(data[: _last_line_start(log_file) + 40])
    for root in ("damaged", "intact"):
        shutil.copytree(base / "cache", tmp_path / root / "cache")
        _run(_spec(tmp_path / root, 3))
    for rel in STATE:
        assert (damaged / rel).read_bytes() == (intact / rel).read_bytes(), rel


@pytest.mark.parametrize("rel", ["episodes_train.jsonl", "state/trajectories.jsonl"])
def test_a_line_no_other_file_holds_stops_the_run_naming_file_line_and_fix(finished, tmp_path, rel):
    work = _copy(finished, tmp_path / "run")
    target = work / rel
    if rel == "state/trajectories.jsonl":  # its embedding is in the outcome log: cut both last lines
        for r in (rel, "state/outcome_log.jsonl"):
            (work / r).write_bytes((work / r).read_bytes()[: _last_line_start(work / r) + 5])
    else:
        target.write_bytes(target.read_bytes()[: _last_line_start(target) + 5])
    before = {r: (work / r).read_bytes() for r in STATE}
    n = before[rel].count(b"\n") + 1
    with pytest.raises(CommittedRecordLostError) as err:
        repair_committed(RunDirectory(work), [work / r for r in STATE], _last_state(finished))
    message = str(err.value)
    assert f"line {n}" in message and "Restore" in message and "Nothing was changed" in message
    assert {r: (work / r).read_bytes() for r in STATE} == before  # nothing was changed


def test_a_torn_fragment_is_set_aside_once_and_never_warned_about_again(tmp_path, caplog):
    path = tmp_path / "episodes_heldout.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":2}\n{"a":')
    with caplog.at_level(logging.WARNING):
        with JsonlWriter(path) as w:
            w.append({"a": 3})
    assert path.read_bytes() == b'{"a":1}\n{"a":2}\n{"a":3}\n'
    assert (tmp_path / ("episodes_heldout.jsonl" + TORN_SUFFIX)).read_bytes() == b'{"a":\n'
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert [x.value["a"] for x in read_jsonl(path)] == [1, 2, 3]
        JsonlWriter(path).close()
    assert not caplog.records  # repaired once: later readers and writers are silent


def test_fragments_an_older_kit_left_inside_a_file_are_set_aside_once(tmp_path, caplog):
    path = tmp_path / "calls.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":\n{"a":2}\nnot json\n')
    assert set_aside_malformed(path) == 2
    assert path.read_bytes() == b'{"a":1}\n{"a":2}\n'
    assert (tmp_path / ("calls.jsonl" + TORN_SUFFIX)).read_bytes() == b'{"a":\nnot json\n'
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert set_aside_malformed(path) == 0 and [x.value["a"] for x in read_jsonl(path)] == [1, 2]
    assert not caplog.records
