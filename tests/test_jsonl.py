"""Append-only JSONL: ordering, tolerance to corrupt and torn lines, thread safety, atomic writes."""

from __future__ import annotations

import json
import logging
import math
import os
import threading

import pytest

from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, atomic_write_text, dumps_line, read_jsonl

LOGGER = "antipersist_lib.jsonl"


def values(path):
    return [line.value for line in read_jsonl(path)]


def test_records_come_back_in_order(tmp_path):
    p = tmp_path / "sub" / "dir" / "log.jsonl"  # parents are created
    recs = [{"i": i, "text": f"record {i}", "nested": {"x": [i, i + 1]}} for i in range(50)]
    with JsonlWriter(p) as w:
        for r in recs:
            w.append(r)
    lines = list(read_jsonl(p))
    assert [ln.value for ln in lines] == recs
    assert [ln.lineno for ln in lines] == list(range(1, 51))
    raw = p.read_bytes()
    assert raw.count(b"\n") == 50 and raw.endswith(b"\n")


def test_unicode_and_newlines_inside_strings_stay_one_line(tmp_path):
    p = tmp_path / "u.jsonl"
    rec = {"text": "line one\nline two\r\n\u2028 ünïcödé 日本"}
    with JsonlWriter(p, fsync=False) as w:
        w.append(rec)
        w.append({"k": 2})
    assert p.read_bytes().count(b"\n") == 2
    assert values(p) == [rec, {"k": 2}]


def test_missing_file_yields_nothing(tmp_path):
    assert list(read_jsonl(tmp_path / "absent.jsonl")) == []


def test_malformed_middle_line_and_invalid_utf8_skipped_with_warning(tmp_path, caplog):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(
        b'{"i": 0}\n'
        b'{"i": 1, oops\n'  # line 2: invalid JSON
        b'{"i": 2}\n'
        b'\xff\xfe{"i": 99}\n'  # line 4: invalid UTF-8
        b"\n"  # line 5: blank, silently ignored
        b'{"i": 3}\n'
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        lines = list(read_jsonl(p))
    assert [ln.value for ln in lines] == [{"i": 0}, {"i": 2}, {"i": 3}]
    assert [ln.lineno for ln in lines] == [1, 3, 6]
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(msgs) == 2
    assert any(f"{p}:2:" in m for m in msgs)
    assert any(f"{p}:4:" in m for m in msgs)


def test_torn_final_line_skipped(tmp_path, caplog):
    p = tmp_path / "torn.jsonl"
    p.write_bytes(b'{"i": 0}\n{"i": 1}\n{"i": 2, "te')
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        got = values(p)
    assert got == [{"i": 0}, {"i": 1}]
    msgs = [r.getMessage() for r in caplog.records]
    assert any(f"{p}:3:" in m and "torn" in m for m in msgs)


def test_complete_json_without_newline_is_still_treated_as_torn(tmp_path):
    # a final line without its newline may be a prefix of a longer record: never trust it
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"i": 0}\n{"i": 1}')
    assert values(p) == [{"i": 0}]


def test_reopening_writer_sets_the_torn_fragment_aside(tmp_path, caplog):
    p = tmp_path / "crash.jsonl"
    with JsonlWriter(p) as w:
        w.append({"i": 0})
    with open(p, "ab") as fh:
        fh.write(b'{"i": 1, "partial')  # crash mid-write
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with JsonlWriter(p) as w:
            w.append({"i": 2})
    assert any("torn" in r.getMessage() for r in caplog.records)
    assert p.read_bytes() == b'{"i":0}\n{"i":2}\n'  # readers never meet the fragment again
    assert (tmp_path / "crash.jsonl.torn").read_bytes() == b'{"i": 1, "partial\n'  # kept, not destroyed
    assert values(p) == [{"i": 0}, {"i": 2}]


def test_reopening_intact_file_adds_nothing(tmp_path):
    p = tmp_path / "ok.jsonl"
    with JsonlWriter(p) as w:
        w.append({"i": 0})
    before = p.read_bytes()
    JsonlWriter(p).close()
    assert p.read_bytes() == before
    with JsonlWriter(p) as w:
        w.append({"i": 1})
    assert values(p) == [{"i": 0}, {"i": 1}]


def test_concurrent_appends_do_not_interleave(tmp_path):
    p = tmp_path / "threads.jsonl"
    n_threads, per_thread = 8, 200
    pad = "x" * 300  # long-ish lines make interleaving visible if it happened
    w = JsonlWriter(p, fsync=False)
    start = threading.Barrier(n_threads)

    def worker(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            w.append({"t": t, "i": i, "pad": pad})

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    w.close()

    raw_lines = p.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""
    raw_lines = raw_lines[:-1]
    assert len(raw_lines) == n_threads * per_thread == 1600
    parsed = [json.loads(x) for x in raw_lines]  # every physical line is one whole record
    assert all(d["pad"] == pad and set(d) == {"t", "i", "pad"} for d in parsed)
    assert sorted((d["t"], d["i"]) for d in parsed) == [(t, i) for t in range(n_threads) for i in range(per_thread)]
    # each thread's own records keep their order
    for t in range(n_threads):
        assert [d["i"] for d in parsed if d["t"] == t] == list(range(per_thread))


def test_dumps_line_format_and_rejects_nan():
    assert dumps_line({"a": 1, "b": "é"}) == '{"a":1,"b":"é"}\n'.encode()
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError):
            dumps_line({"x": bad})


def test_writer_rejects_nan_without_writing(tmp_path):
    p = tmp_path / "n.jsonl"
    with JsonlWriter(p) as w:
        w.append({"i": 0})
        with pytest.raises(ValueError):
            w.append({"x": [1.0, float("nan")]})
        w.append({"i": 1})
    assert values(p) == [{"i": 0}, {"i": 1}]
    assert p.read_bytes().count(b"\n") == 2


def test_atomic_write_json_replaces_content_and_leaves_no_temp(tmp_path):
    p = tmp_path / "snap" / "state.json"
    atomic_write_json(p, {"v": 1, "items": [1, 2]})
    assert json.loads(p.read_text(encoding="utf-8")) == {"v": 1, "items": [1, 2]}
    atomic_write_json(p, {"v": 2})
    assert json.loads(p.read_text(encoding="utf-8")) == {"v": 2}
    assert p.read_text(encoding="utf-8").endswith("\n")
    assert sorted(os.listdir(p.parent)) == ["state.json"]
    with pytest.raises(ValueError):
        atomic_write_json(p, {"bad": float("nan")})
    assert json.loads(p.read_text(encoding="utf-8")) == {"v": 2}  # old content survives


def test_atomic_write_text(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("old", encoding="utf-8")
    atomic_write_text(p, "new ünïcödé")
    assert p.read_text(encoding="utf-8") == "new ünïcödé"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_a_writer_opened_during_another_processs_append_adds_no_stray_newline(tmp_path):
    """Another process holds the file's lock while half of its line is on disk: a writer opened
    then must wait, not mistake the half line for a torn one and add a newline into the file."""
    import fcntl
    import time

    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n')
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b'{"b": ')
    opened: list[JsonlWriter] = []
    t = threading.Thread(target=lambda: opened.append(JsonlWriter(path, fsync=False)))
    t.start()
    time.sleep(0.3)
    assert not opened  # still waiting for the lock
    os.write(fd, b"2}\n")
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    t.join(10)
    opened[0].append({"c": 3})
    opened[0].close()
    lines = path.read_bytes().split(b"\n")
    assert lines[:2] == [b'{"a": 1}', b'{"b": 2}'] and b"" not in lines[:-1] and len(lines) == 4
