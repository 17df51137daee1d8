"""Concurrent writers and crashes around writes.

* many threads (one shared writer, or one writer each) and several processes appending to one
  JSONL file never interleave or tear a line, even for lines longer than a pipe buffer;
* the call ledger numbers concurrent calls uniquely and writes each as one whole line;
* a second process opening a run directory that is in use is refused with a message naming the
  directory and the holder, before it makes any model request; a holder killed by SIGKILL
  leaves no stale lock behind;
* snapshots are replaced atomically: a process killed between writing the temporary file and
  renaming it leaves the previous snapshot intact, and readers never see a partial file.

(``tests/test_jsonl.py`` covers one shared writer with short lines; ``tests/test_protocol.py``
the lock within one process.)
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from antipersist_lib.errors import RunLockedError
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json
from antipersist_lib.memory.abstraction_store import AbstractionStore
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.testing.loopback_server import LoopbackServer

REPO = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _python(code: str, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        **kw,
    )  # type: ignore[arg-type]


def _physical_lines(path: Path) -> list[dict]:
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    return [json.loads(line) for line in raw[:-1].split(b"\n")]  # every physical line is a record


# -- JSONL appends ------------------------------------------------------------------------------------


def test_threads_with_shared_and_own_writers_never_tear_lines(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    shared = JsonlWriter(path, fsync=False)
    n_shared, n_own, per_thread = 6, 6, 60
    barrier = threading.Barrier(n_shared + n_own)
    errors: list[BaseException] = []

    def work(t: int, own: bool) -> None:
        try:
            writer = JsonlWriter(path, fsync=False) if own else shared
            rng = random.Random(t)
            barrier.wait()
            for i in range(per_thread):
                # 5-12 KB lines (longer than PIPE_BUF) with multi-byte characters and escapes
                pad = "".join(rng.choice('aé日\n"\\ ') for _ in range(rng.randint(5_000, 12_000)))
                writer.append({"t": t, "i": i, "pad": pad, "len": len(pad)})
            if own:
                writer.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t, t >= n_shared)) for t in range(n_shared + n_own)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    shared.close()
    assert not errors
    recs = _physical_lines(path)
    assert len(recs) == (n_shared + n_own) * per_thread
    assert all(len(r["pad"]) == r["len"] for r in recs)
    for t in range(n_shared + n_own):
        assert [r["i"] for r in recs if r["t"] == t] == list(range(per_thread))  # each thread's order kept


def test_processes_appending_to_one_file_never_tear_lines(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    go = tmp_path / "go"
    code = """
        import os, sys, time
        from antipersist_lib.jsonl import JsonlWriter
        path, go, who = sys.argv[1], sys.argv[2], int(sys.argv[3])
        w = JsonlWriter(path, fsync=False)
        while not os.path.exists(go):
            time.sleep(0.005)
        for i in range(150):
            w.append({"p": who, "i": i, "pad": "x" * (4000 + 37 * i)})
        w.close()
    """
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(path), str(go), str(p)], env=_env())
        for p in range(4)
    ]
    go.touch()  # all four start appending at about the same moment
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    recs = _physical_lines(path)
    assert len(recs) == 600
    for p in range(4):
        mine = [r for r in recs if r["p"] == p]
        assert [r["i"] for r in mine] == list(range(150))
        assert all(r["pad"] == "x" * (4000 + 37 * r["i"]) for r in mine)


def test_ledger_numbers_concurrent_calls_uniquely_and_writes_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    ledger = Ledger(path)
    barrier = threading.Barrier(12)

    def work(t: int) -> None:
        barrier.wait()
        for i in range(50):
            ledger.record("execution", "m", prompt_tokens=i, tags={"worker": t, "i": i})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    ledger.close()
    recs = _physical_lines(path)
    assert sorted(r["call_id"] for r in recs) == list(range(1, 601))
    assert [r["call_id"] for r in recs] == sorted(r["call_id"] for r in recs)  # ids in file order
    reloaded = Ledger(path)
    assert len(reloaded) == 600 and reloaded.record("x", "m").call_id == 601
    for t in range(12):
        assert reloaded.count("execution", worker=t) == 50
    reloaded.close()


# -- the run lock ---------------------------------------------------------------------------------------

OPEN_RUN = """
    import sys
    from antipersist_lib.rundir import RunDirectory
    from antipersist_lib.errors import RunLockedError
    try:
        RunDirectory(sys.argv[1]).open().close()
    except RunLockedError as exc:
        print(exc, file=sys.stderr)
        sys.exit(7)
"""


def test_second_process_is_refused_with_a_clear_message_and_no_request(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "errandworld" / "loopback" / "react" / "seed42"
    held = RunDirectory(run).open()
    try:
        other = _python(OPEN_RUN, str(run))
        assert other.returncode == 7, other.stderr
        assert str(run) in other.stderr and f"pid {os.getpid()}" in other.stderr
        assert "in use by another process" in other.stderr and "before resuming" in other.stderr
        # the same through the command line: refused before any request to the model
        with LoopbackServer() as srv:
            params = tmp_path / "params"
            for kind in ("backbones", "embeddings"):
                (params / kind).mkdir(parents=True)
                (params / kind / "loopback.yaml").write_text(
                    f"model: scripted\nbase_url: {srv.base_url}\nmax_retries: 0\n"
                )
            env = {**_env(), "ANTIPERSIST_PARAMS": str(params)}
            cli = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "antipersist_lib",
                    "run",
                    "--method",
                    "react",
                    "--benchmark",
                    "errandworld",
                    "--backbone",
                    "loopback",
                    "--embedding",
                    "loopback",
                    "--iterations",
                    "1",
                    "--train-per-iteration",
                    "1",
                    "--out-root",
                    str(tmp_path / "runs"),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                cwd=tmp_path,
            )
            assert srv.request_count == 0
        assert cli.returncode == 2, cli.stderr
        assert cli.stderr.startswith("error: run directory") and f"pid {os.getpid()}" in cli.stderr
        assert "Traceback" not in cli.stderr
    finally:
        held.close()
    assert _python(OPEN_RUN, str(run)).returncode == 0  # free again once the holder closes it


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
            import sys, time
            from antipersist_lib.rundir import RunDirectory
            rd = RunDirectory(sys.argv[1]).open()
            print("locked", flush=True)
            time.sleep(60)
        """),
            str(run),
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        try:
            RunDirectory(run).open()
            raise AssertionError("the lock of a live holder was not respected")
        except RunLockedError as exc:
            assert f"pid {holder.pid}" in str(exc)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:  # pragma: no cover
            holder.kill()
    RunDirectory(run).open().close()  # the kernel released the lock with the process


# -- atomic snapshots -------------------------------------------------------------------------------------

CRASH_DURING_SNAPSHOT = """
    import os, signal, sys
    from antipersist_lib import jsonl
    from antipersist_lib.memory.abstraction_store import AbstractionStore

    target = sys.argv[1]
    store = AbstractionStore()
    store.add("old guidance", kind="guidance", embedding=[1.0, 0.0])
    store.snapshot(target, iteration=1)
    for i in range(200):
        store.add("new guidance %d " % i + "y" * 2000, kind="guidance", embedding=[0.0, 1.0])

    def crash(src, dst):  # the temporary file is written and synced; the process dies before the rename
        sys.stdout.write(os.path.basename(src) + "\\n")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    jsonl.os.replace = crash
    store.snapshot(target, iteration=2)
"""


def test_crash_between_write_and_rename_keeps_the_old_snapshot(tmp_path: Path) -> None:
    snaps = tmp_path / "snapshots"
    target = snaps / "abstractions_iter_01.json"
    proc = _python(CRASH_DURING_SNAPSHOT, str(target))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    old = json.loads(target.read_text(encoding="utf-8"))  # intact and complete
    assert old["iteration"] == 1 and [a["text"] for a in old["active"]] == ["old guidance"]
    tmp_name = proc.stdout.strip()
    assert tmp_name.startswith(".abstractions_iter_01.json.tmp-")
    leftover = snaps / tmp_name
    assert leftover.exists() and leftover.stat().st_size > 400_000  # the new content was fully written...
    assert json.loads(leftover.read_text(encoding="utf-8"))["iteration"] == 2
    # ...yet nothing that lists snapshots can pick the temporary file up
    assert sorted(p.name for p in snaps.glob("abstractions_iter_*.json")) == ["abstractions_iter_01.json"]
    assert sorted(p.name for p in snaps.glob("*.json")) == ["abstractions_iter_01.json"]
    # the next snapshot (the resumed run's) replaces it normally
    store = AbstractionStore()
    store.add("resumed", kind="guidance")
    store.snapshot(target, iteration=1)
    assert [a["text"] for a in json.loads(target.read_text(encoding="utf-8"))["active"]] == ["resumed"]


def test_readers_never_see_a_partial_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    atomic_write_json(path, {"v": -1, "pad": ""})
    stop = threading.Event()
    seen: list[int] = []
    bad: list[str] = []

    def writer(w: int) -> None:
        for i in range(40):
            atomic_write_json(path, {"v": w * 1000 + i, "pad": "z" * (50_000 + 1_000 * i)})

    def reader() -> None:
        while not stop.is_set():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                bad.append(str(exc))
                continue
            seen.append(data["v"])

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for th in readers + writers:
        th.start()
    for th in writers:
        th.join()
    stop.set()
    for th in readers:
        th.join()
    assert not bad, bad[:3]
    assert len(seen) > 10
    valid = {-1} | {w * 1000 + i for w in range(4) for i in range(40)}
    assert set(seen) <= valid
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no temporary file left
