"""Outcome log L_k: the seven-field schema of B.5, the skip rules, the reward, and the read protocol."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from antipersist_lib.errors import FrozenStateError
from antipersist_lib.jsonl import read_jsonl, ref_of
from antipersist_lib.memory.outcome_log import (
    FIELDS,
    INSTRUCTION_MAX_CHARS,
    OutcomeLog,
    OutcomeRecord,
    SkipReason,
    cost_adjusted_reward,
    skip_reason,
)

SEVEN = {"embedding", "mode", "reward", "raw_success", "task_type", "task_id", "instruction"}
#: as stored: the embedding's numbers are in outcome_log.emb, the line names them (issue 45)
SEVEN_STORED = (SEVEN - {"embedding"}) | {"embedding_ref"}


def entry(i: int, mode: str = "none", **over):
    d = dict(
        embedding=[float(i), 1.0, -0.5],
        mode=mode,
        reward=1.0 if i % 2 else -0.05,
        raw_success=bool(i % 2),
        task_type="alfworld",
        task_id=i,
        instruction=f"instruction {i}",
    )
    d.update(over)
    return d


def test_fields_constant_is_the_papers_seven():
    assert FIELDS == ("embedding", "mode", "reward", "raw_success", "task_type", "task_id", "instruction")
    assert INSTRUCTION_MAX_CHARS == 500


def test_stored_line_has_exactly_seven_fields(tmp_path):
    p = tmp_path / "outcome_log.jsonl"
    log = OutcomeLog(p)
    log.append(**entry(1, "corrective"))
    log.append(**entry(2, "imitation"))
    log.close()
    lines = p.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    for line in lines:
        d = json.loads(line)
        assert set(d) == SEVEN_STORED
        assert not any("guid" in k or "text" in k or "timestamp" in k for k in d)
    assert json.loads(lines[0])["embedding_ref"] == ref_of([1.0, 1.0, -0.5])
    # read as records, the line shows the seven fields with the numbers back in place
    d = next(iter(read_jsonl(p))).value
    assert list(d) == list(FIELDS)
    assert d == {
        "embedding": [1.0, 1.0, -0.5],
        "mode": "corrective",
        "reward": 1.0,
        "raw_success": True,
        "task_type": "alfworld",
        "task_id": 1,
        "instruction": "instruction 1",
    }
    assert type(d["task_id"]) is int and type(d["raw_success"]) is bool


def test_append_rejects_extra_field_like_guidance():
    log = OutcomeLog(None)
    with pytest.raises(TypeError):
        log.append(**entry(1), guidance="always open the fridge first")  # type: ignore[call-arg]
    assert len(log) == 0


def test_instruction_truncated_to_500_chars(tmp_path):
    p = tmp_path / "l.jsonl"
    log = OutcomeLog(p)
    long = "abcdefghij" * 80  # 800 chars
    rec = log.append(**entry(1, instruction=long))
    assert rec.instruction == long[:500] and len(rec.instruction) == 500
    log.append(**entry(2, instruction="x" * 500))
    log.close()
    stored = [json.loads(x)["instruction"] for x in p.read_text(encoding="utf-8").splitlines()]
    assert stored == [long[:500], "x" * 500]
    # a hand-written over-long line is truncated on load as well
    d = entry(3, instruction="y" * 700)
    with open(p, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(d) + "\n")
    again = OutcomeLog(p)
    assert again[2].instruction == "y" * 500
    assert OutcomeRecord((1.0,), "none", 0.0, False, "t", 0, "z" * 600).to_dict()["instruction"] == "z" * 500


def test_skip_rules():
    # rule 1: k = 0 first, whatever else is true
    assert skip_reason(0, [0.1, 0.2], False) is SkipReason.FIRST_UPDATE
    assert skip_reason(0, None, False) is SkipReason.FIRST_UPDATE
    assert skip_reason(0, None, True) is SkipReason.FIRST_UPDATE
    # rule 2: missing embedding
    assert skip_reason(1, None, False) is SkipReason.EMBEDDING_FAILED
    assert skip_reason(7, None, True) is SkipReason.EMBEDDING_FAILED
    # rule 3: infrastructure failure
    assert skip_reason(3, [0.1], True) is SkipReason.INFRASTRUCTURE_FAILURE
    # eligible
    assert skip_reason(1, [0.1, 0.2], False) is None
    assert skip_reason(12, np.zeros(4), False) is None
    assert SkipReason.FIRST_UPDATE.value == "first_update"
    assert SkipReason.EMBEDDING_FAILED.value == "embedding_failed"
    assert SkipReason.INFRASTRUCTURE_FAILURE.value == "infrastructure_failure"


def test_cost_adjusted_reward_hand_cases():
    assert cost_adjusted_reward(1, 0, 0.05) == 1.0
    assert cost_adjusted_reward(1, 1, 0.05) == pytest.approx(0.95, abs=1e-15)
    assert cost_adjusted_reward(0, 1, 0.05) == pytest.approx(-0.05, abs=1e-15)
    assert cost_adjusted_reward(0, 0, 0.05) == 0.0
    assert cost_adjusted_reward(0, 1, 2.0) == -1.0  # -2 clipped
    assert cost_adjusted_reward(1, 3, 1.0) == -1.0  # -2 clipped
    assert cost_adjusted_reward(1, 2, 0.25) == 0.5
    assert cost_adjusted_reward(1, 0, 0.0) == 1.0
    assert cost_adjusted_reward(2, 0, 0.05) == 1.0  # upper clip
    for y in (0, 1):
        for kappa in (0, 1, 2, 10):
            for lam in (0.0, 0.05, 0.5, 3.0):
                assert -1.0 <= cost_adjusted_reward(y, kappa, lam) <= 1.0
    assert isinstance(cost_adjusted_reward(1, 0, 0.05), float)


def test_cost_adjusted_reward_rejects_negative_inputs():
    with pytest.raises(ValueError, match="kappa"):
        cost_adjusted_reward(1, -1, 0.05)
    with pytest.raises(ValueError, match="lambda"):
        cost_adjusted_reward(1, 1, -0.05)


def write_lines(p, lines: list[bytes]) -> None:
    p.write_bytes(b"".join(lines))


def line(d) -> bytes:
    return (json.dumps(d) + "\n").encode("utf-8")


def corrupted_file(p):
    missing = entry(4)
    del missing["reward"]
    write_lines(
        p,
        [
            line(entry(0, "none")),  # 1 ok -> t=0
            b'{"embedding": [1.0, 2.0, 3.0], "mode": "none", "rew\n',  # 2 invalid JSON
            line(entry(1, "imitation")),  # 3 ok -> t=1
            line(entry(2, "telepathy")),  # 4 bad mode
            line(entry(3, "strategic")),  # 5 ok -> t=2
            line(missing),  # 6 missing field
            line(entry(5, "corrective", embedding=[1.0, 2.0])),  # 7 wrong dimension
            line(entry(6, "corrective")),  # 8 ok -> t=3
            line(entry(7, "none", reward=1.5)),  # 9 reward out of [-1, 1]
            b"\xff\xfe not utf-8\n",  # 10 invalid UTF-8
            line(entry(8, "imitation")),  # 11 ok -> t=4
            b'{"embedding": [8.0, 1.0, -0.5], "mode": "st',  # 12 torn final line
        ],
    )


def test_corrupted_log_reloads_valid_records_in_order(tmp_path, caplog):
    p = tmp_path / "outcome_log.jsonl"
    corrupted_file(p)
    with caplog.at_level(logging.WARNING):
        log = OutcomeLog(p)
    assert len(log) == 5
    assert [r.task_id for r in log] == [0, 1, 3, 6, 8]
    assert [r.mode for r in log] == ["none", "imitation", "strategic", "corrective", "imitation"]
    assert [r.timestamp for r in log] == [0, 1, 2, 3, 4]
    assert log.timestamps.tolist() == [0, 1, 2, 3, 4]
    assert log.skipped_lines == 7
    warned = {n for n in (2, 4, 6, 7, 9, 10, 12) if any(f"{p}:{n}:" in r.getMessage() for r in caplog.records)}
    assert warned == {2, 4, 6, 7, 9, 10, 12}
    assert sum(r.levelno == logging.WARNING for r in caplog.records) >= 7
    assert log.matrix.dim == 3 and len(log.matrix) == 5
    np.testing.assert_allclose(log.matrix.similarities([8.0, 1.0, -0.5])[4], 1.0, rtol=1e-6)


def test_append_after_reload_continues_timestamps(tmp_path):
    p = tmp_path / "outcome_log.jsonl"
    corrupted_file(p)
    log = OutcomeLog(p)
    rec = log.append(**entry(9, "strategic"))
    assert rec.timestamp == 5
    assert log.timestamps.tolist() == [0, 1, 2, 3, 4, 5]
    log.close()
    # the torn fragment was set aside, so the new record is intact on the next load
    again = OutcomeLog(p)
    assert [r.task_id for r in again] == [0, 1, 3, 6, 8, 9]
    assert [r.timestamp for r in again] == [0, 1, 2, 3, 4, 5]
    assert again.skipped_lines == 6  # the six damaged lines inside the file; the torn tail is gone


def test_clean_reload_round_trip(tmp_path):
    p = tmp_path / "outcome_log.jsonl"
    log = OutcomeLog(p)
    appended = [log.append(**entry(i, m)) for i, m in enumerate(["none", "corrective", "corrective", "strategic"])]
    log.close()
    again = OutcomeLog(p)
    assert list(again) == appended
    assert again.skipped_lines == 0
    assert OutcomeLog(tmp_path / "new.jsonl").skipped_lines == 0


def test_append_validates(tmp_path):
    log = OutcomeLog(None)
    log.append(**entry(0))
    with pytest.raises(ValueError, match="dimension"):
        log.append(**entry(1, embedding=[1.0, 2.0]))
    with pytest.raises(ValueError, match="mode"):
        log.append(**entry(1, mode="abstraction"))
    with pytest.raises(ValueError, match="reward"):
        log.append(**entry(1, reward=1.01))
    with pytest.raises(ValueError, match="embedding"):
        log.append(**entry(1, embedding=[1.0, float("nan"), 0.0]))
    assert len(log) == 1


def test_frozen_log_rejects_append(tmp_path):
    p = tmp_path / "l.jsonl"
    log = OutcomeLog(p)
    log.append(**entry(0))
    log.freeze()
    assert log.frozen
    with pytest.raises(FrozenStateError):
        log.append(**entry(1))
    assert len(log) == 1
    log.close()
    assert len(p.read_bytes().splitlines()) == 1
    log.unfreeze()
    assert not log.frozen


def test_modes_rewards_counts():
    log = OutcomeLog(None)
    assert log.mode_counts() == {"none": 0, "imitation": 0, "strategic": 0, "corrective": 0}
    assert log.modes.tolist() == [] and log.rewards.tolist() == []
    seq = [("corrective", -0.05), ("none", 1.0), ("corrective", 0.95), ("strategic", 0.0), ("corrective", -1.0)]
    for i, (m, r) in enumerate(seq):
        log.append(**entry(i, m, reward=r))
    assert log.modes.tolist() == [3, 0, 3, 2, 3]
    assert log.modes.dtype == np.int64
    assert log.rewards.tolist() == [-0.05, 1.0, 0.95, 0.0, -1.0]
    assert log.mode_counts() == {"none": 1, "imitation": 0, "strategic": 1, "corrective": 3}
    assert log[2].mode == "corrective" and log[2].timestamp == 2


def test_from_dict_rejects_bad_types():
    good = entry(1)
    assert OutcomeRecord.from_dict(good).task_id == 1
    for field, value in [
        ("raw_success", 1),
        ("task_id", True),
        ("task_id", 1.5),
        ("task_type", 3),
        ("instruction", None),
        ("embedding", []),
        ("embedding", [1.0, "2"]),
        ("embedding", [True, 1.0]),
        ("reward", True),
        ("reward", -1.5),
    ]:
        with pytest.raises(ValueError):
            OutcomeRecord.from_dict({**good, field: value})
    with pytest.raises(ValueError):
        OutcomeRecord.from_dict([1, 2, 3])
