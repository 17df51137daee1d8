"""The ARC sandbox grader: correct grading, and each protection against hostile solver code.

Every hostile-code test is written so that it fails if its protection were missing: the hostile code
does something that would succeed without the protection (connect to a live listener, write an existing
directory, leave sleeping children behind, allocate 1 GiB on a machine that has it) and reports what it
managed, or the test measures the effect outside the sandbox. Limits are small so the file runs in seconds.
"""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from antipersist_lib.arc.sandbox import (
    ExampleOutcome,
    GradeResult,
    SandboxLimits,
    grade,
    grade_reply,
)
from antipersist_lib.replies import extract_code

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox and these checks rely on Linux /proc")

FAST = SandboxLimits(wall_seconds=5.0, cpu_seconds=5, memory_bytes=256 << 20, max_file_bytes=64 << 10)
UNISOLATED = replace(FAST, isolation="unisolated")  # the explicit opt-out: rlimits and in-process guards only
MARGIN = 1.5  # seconds of slack over the wall limit for start-up, kill and reaping

FLIP = [
    {"input": [[1, 2, 3], [4, 5, 6]], "output": [[3, 2, 1], [6, 5, 4]]},
    {"input": [[0, 7]], "output": [[7, 0]]},
    {"input": [[9]], "output": [[9]]},
]
FLIP_CODE = "def solve(grid):\n    return [list(reversed(row)) for row in grid]\n"
ONE = [{"input": [[1]], "output": [[0]]}]  # hostile probes answer [[0]] when the protection held


def probe(body: str) -> str:
    """Solver code whose solve() runs ``body`` (which sets ``ok``) and answers [[0]] only if ``ok``."""
    return "def solve(grid):\n" + textwrap.indent(textwrap.dedent(body), "    ") + "    return [[0 if ok else 1]]\n"


def live_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes whose process group or session is ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # state ppid pgrp session ...
        if fields[0] not in ("Z", "X") and pgid in (int(fields[2]), int(fields[3])):
            found.append(int(entry))
    return found


def lingering(pgid: int, within: float = 3.0) -> list[int]:
    """Live members of the group still there after ``within`` seconds (SIGKILL takes a moment to land)."""
    deadline = time.monotonic() + within
    while (members := live_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return members


def live_process_count() -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc", entry, "stat").read_text()
            except OSError:
                continue
            count += stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")
    return count


# --------------------------------------------------------------------------------------------------
# Grading


def test_correct_solve_passes_every_example():
    result = grade(FLIP_CODE, FLIP, limits=FAST)
    assert isinstance(result, GradeResult)
    assert (result.status, result.passed, result.n_correct, result.n_examples) == ("ok", True, 3, 3)
    assert [o.outcome for o in result.outcomes] == ["correct"] * 3
    assert result.outcomes[0].output == [[3, 2, 1], [6, 5, 4]]
    assert result.to_dict()["n_correct"] == 3


def test_preamble_helpers_are_available_to_the_code():
    preamble = "def flip_h(grid):\n    return [row[::-1] for row in grid]\n"
    result = grade("def solve(grid):\n    return flip_h(grid)\n", FLIP, preamble=preamble, limits=FAST)
    assert result.passed


def test_wrong_solve_is_not_passed_and_counts_per_example():
    result = grade("def solve(grid):\n    return grid\n", FLIP, limits=FAST)
    assert result.status == "ok" and not result.passed
    assert result.n_correct == 1 < result.n_examples  # only the 1x1 example is its own mirror image
    assert [o.outcome for o in result.outcomes] == ["wrong", "wrong", "correct"]
    assert result.outcomes[0].output == [[1, 2, 3], [4, 5, 6]]


def test_exceptions_and_invalid_outputs_are_per_example():
    code = textwrap.dedent(
        """
        def solve(grid):
            n = grid[0][0]
            if n == 1:
                raise ValueError("boom")
            if n == 2:
                return [[1, 2], [3]]
            if n == 3:
                return [[True]]
            if n == 4:
                return [[10]]
            if n == 5:
                return "[[5]]"
            return tuple(tuple(row) for row in grid)  # tuples are accepted as rows
        """
    )
    examples = [{"input": [[n]], "output": [[n]]} for n in range(1, 7)]
    result = grade(code, examples, limits=FAST)
    assert result.status == "output_invalid" and not result.passed
    outcomes = [o.outcome for o in result.outcomes]
    assert outcomes == ["error", "invalid", "invalid", "invalid", "invalid", "correct"]
    assert "ValueError: boom" in result.outcomes[0].error
    assert "not rectangular" in result.outcomes[1].error
    assert "bool" in result.outcomes[2].error and "10" in result.outcomes[3].error
    assert "str" in result.outcomes[4].error
    assert result.n_correct == 1


def test_syntax_error_no_solve_and_load_error():
    broken = grade("def solve(grid)\n    return grid\n", FLIP, limits=FAST)
    assert broken.status == "syntax_error" and not broken.passed and "line 1" in broken.error
    assert all(o.outcome == "not_run" for o in broken.outcomes)
    bad_tools = grade(FLIP_CODE, FLIP, preamble="def helper(:\n", limits=FAST)
    assert bad_tools.status == "syntax_error" and "preamble" in bad_tools.error
    assert grade("x = 1\n", FLIP, limits=FAST).status == "no_solve"
    assert grade("solve = 3\n", FLIP, limits=FAST).status == "no_solve"
    loading = grade("import numpy\n" + FLIP_CODE, FLIP, limits=FAST)  # -S: standard library only
    assert loading.status == "load_error" and "numpy" in loading.error


def test_common_standard_library_modules_still_import():
    """The in-process denial must not break ordinary solver code (threading, random, typing, ...)."""
    modules = (
        "collections, copy, dataclasses, functools, heapq, itertools, json, logging, math, queue, random, re, "
        "statistics, string, threading, typing, concurrent.futures, multiprocessing, pathlib, tempfile, hashlib"
    )
    result = grade(f"import {modules}\n" + FLIP_CODE, FLIP, limits=FAST)
    assert result.passed, result.error


def test_bad_examples_are_rejected_with_a_reason():
    with pytest.raises(TypeError, match="examples must be a list"):
        grade(FLIP_CODE, {"input": [[1]], "output": [[1]]})
    with pytest.raises(ValueError, match="empty"):
        grade(FLIP_CODE, [])
    with pytest.raises(ValueError, match=r"examples\[1\] has no 'output'"):
        grade(FLIP_CODE, [{"input": [[1]], "output": [[1]]}, {"input": [[1]]}])
    with pytest.raises(ValueError, match=r"examples\[0\]\['input'\] cell \[0\]\[1\] must be an int 0-9, got 12"):
        grade(FLIP_CODE, [{"input": [[1, 12]], "output": [[1]]}])
    with pytest.raises(ValueError, match=r"examples\[0\]\['output'\] is not rectangular"):
        grade(FLIP_CODE, [{"input": [[1]], "output": [[1, 2], [3]]}])
    with pytest.raises(TypeError, match="code must be a str"):
        grade(b"def solve(g): return g", FLIP)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="wall_seconds"):
        SandboxLimits(wall_seconds=0)


# --------------------------------------------------------------------------------------------------
# Extracting the code


def test_extract_code_takes_the_first_python_fence():
    reply = (
        "Idea: mirror.\n```text\n```python\nnot code\n```\n```python\nFIRST = 1\n```\nthen\n```py\nSECOND = 2\n```\n"
    )
    assert extract_code(reply) == "FIRST = 1\n"
    assert extract_code("```py\nA = 1\n```\n```python\nB = 2\n```") == "A = 1\n"
    assert extract_code("before\n```\nBARE = 1\n```\n") == "BARE = 1\n"
    assert extract_code("no code here, just `inline` text") is None
    assert extract_code("```python\nunclosed = True\n") is None
    assert extract_code("```json\n{}\n```") is None


def test_grade_reply_extracts_and_reports_no_code():
    reply = f"Here is my solution.\n```python\n{FLIP_CODE}```\n```python\ndef solve(grid):\n    return grid\n```\n"
    assert grade_reply(reply, FLIP, limits=FAST).passed
    missing = grade_reply("I could not solve it.", FLIP, limits=FAST)
    assert (missing.status, missing.passed, missing.n_correct, missing.n_examples) == ("no_code", False, 0, 3)
    assert missing.outcomes[0] == ExampleOutcome(0, "not_run", missing.error)


# --------------------------------------------------------------------------------------------------
# Hostile code: time, processes, memory


@pytest.mark.parametrize("isolation", ["kernel", "unisolated"])
def test_infinite_loop_times_out_and_leaves_no_process(isolation):
    limits = SandboxLimits(wall_seconds=1.0, cpu_seconds=30, isolation=isolation)
    started = time.monotonic()
    result = grade("def solve(grid):\n    while True:\n        pass\n", FLIP, limits=limits)
    elapsed = time.monotonic() - started
    assert result.status == "timeout" and not result.passed and "wall-clock" in result.error
    assert elapsed < limits.wall_seconds + MARGIN
    assert result.pid is not None and lingering(result.pid) == []


def test_cpu_limit_stops_a_busy_loop_before_the_wall_limit():
    limits = SandboxLimits(wall_seconds=20.0, cpu_seconds=1)
    started = time.monotonic()
    result = grade("while True:\n    pass\n", FLIP, limits=limits)
    assert result.status == "timeout" and "CPU" in result.error
    assert time.monotonic() - started < 5.0


FORK_BOMB = """
import os
import time

def solve(grid):
{how}
    started = 0
    for _ in range(20):  # guarded: a bounded, linear "bomb" of sleeping children, not an exponential one
        try:
            pid = FORK()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            EXIT(0)
        started += 1
    print("forked", started, flush=True)
    time.sleep(30)
"""
ESCAPED_FORK = (  # a deliberate escape from the in-process denial: a fresh posix module
    "import _imp, importlib.machinery\n"
    'fresh = _imp.create_builtin.__kwdefaults__["_real"](importlib.machinery.BuiltinImporter.find_spec("posix"))\n'
    "FORK, EXIT = fresh.fork, fresh._exit"
)


@pytest.mark.parametrize("isolation", ["kernel", "unisolated"])
@pytest.mark.parametrize("how", ["FORK, EXIT = os.fork, os._exit", ESCAPED_FORK], ids=["os.fork", "escaped-fork"])
def test_fork_bomb_is_contained_and_cleaned_up(how, isolation):
    """os.fork is denied in-process; the escaped fork is refused by seccomp (kernel), or stopped by
    RLIMIT_NPROC and the group kill (unisolated)."""
    before = live_process_count()
    limits = SandboxLimits(wall_seconds=1.5, cpu_seconds=30, isolation=isolation)
    started = time.monotonic()
    result = grade(FORK_BOMB.format(how=textwrap.indent(how, "    ")), ONE, limits=limits)
    assert time.monotonic() - started < limits.wall_seconds + MARGIN
    assert result.status == "timeout" and not result.passed
    if how is not ESCAPED_FORK or isolation == "kernel":
        assert "forked 0" in result.stderr_tail
    assert lingering(result.pid) == []
    deadline = time.monotonic() + 5.0  # other work on the machine may come and go; ours must not linger
    while live_process_count() > before + 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_process_count() <= before + 10


def test_process_and_signal_functions_are_unavailable():
    code = probe(
        """
        import os, sys
        failures = 0
        for attempt in (
            lambda: os.fork(),
            lambda: os.system("true"),
            lambda: os.kill(os.getppid(), 0),
            lambda: os.setsid(),
            lambda: __import__("subprocess").run(["true"]),
            lambda: __import__("ctypes"),
        ):
            try:
                attempt()
            except (PermissionError, ImportError, OSError):
                failures += 1
        ok = failures == 6
        """
    )
    result = grade(code, ONE, limits=FAST)
    assert result.passed, result.outcomes


def test_memory_hog_is_stopped():
    limits = SandboxLimits(wall_seconds=10.0, cpu_seconds=10, memory_bytes=256 << 20)
    code = "def solve(grid):\n    chunks = []\n    for _ in range(16):\n        chunks.append(b'x' * (64 << 20))\n    return [[0]]\n"
    started = time.monotonic()
    result = grade(code, ONE, limits=limits)  # 1 GiB: fits the machine, not the 256 MiB limit
    assert result.status in ("memory", "crashed") and not result.passed
    assert time.monotonic() - started < limits.wall_seconds
    top_level = grade("hog = [0] * (1 << 26)\n" + FLIP_CODE, FLIP, limits=limits)
    assert top_level.status in ("memory", "crashed")


# --------------------------------------------------------------------------------------------------
# Hostile code: files, network, environment, output


@pytest.mark.parametrize("limits", [FAST, UNISOLATED], ids=["kernel", "unisolated"])
def test_writes_outside_the_sandbox_are_refused(tmp_path, limits):
    """Kernel: the host folder is not even in the view; unisolated: the in-process layer refuses the write."""
    target = tmp_path / "escaped"
    code = probe(
        f"""
        import os, pathlib, shutil
        target = {str(target)!r}
        refused = 0
        for attempt in (
            lambda: open(target + ".open", "w").write("x"),
            lambda: pathlib.Path(target + ".pathlib").write_text("x"),
            lambda: os.open(target + ".osopen", os.O_WRONLY | os.O_CREAT),
            lambda: os.mkdir(target + ".dir"),
            lambda: os.symlink(target + ".open", "link") or open("link", "w").write("x"),
            lambda: shutil.rmtree({str(tmp_path)!r}),
        ):
            try:
                attempt()
            except OSError:
                refused += 1
        os.symlink("/", "rootlink")  # a planted link must not make the clean-up touch the outside
        os.makedirs("sub/dir")
        with open("inside.txt", "w") as handle:  # the sandbox directory itself stays writable
            handle.write("fine")
        ok = refused == 6 and open("inside.txt").read() == "fine"
        """
    )
    result = grade(code, ONE, limits=limits)
    assert result.passed, result.outcomes
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("limits", [FAST, UNISOLATED], ids=["kernel", "unisolated"])
def test_file_size_is_capped_and_the_cwd_is_thrown_away(limits):
    limit = limits.max_file_bytes
    name = f"big-{os.getpid()}-{time.monotonic_ns()}.bin"
    code = probe(
        f"""
        import os
        print("CWD=" + os.getcwd(), flush=True)
        try:
            with open({name!r}, "wb") as handle:
                handle.write(b"x" * {10 * limit})
            capped = False
        except OSError:
            capped = True
        ok = capped and os.path.getsize({name!r}) <= {limit}
        """
    )
    result = grade(code, ONE, limits=limits)
    assert result.passed, result.outcomes
    cwd = next(line[4:] for line in result.stderr_tail.splitlines() if line.startswith("CWD="))
    assert os.path.realpath(cwd) != os.path.realpath(os.getcwd())
    assert not os.path.exists(os.path.join(cwd, name))  # the kernel sandbox's /tmp is its own tmpfs
    if limits.isolation == "unisolated":
        assert not os.path.exists(cwd)


def test_network_connections_fail():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        code = probe(
            f"""
            import socket, _socket
            failed = 0
            for attempt in (
                lambda: socket.create_connection(("127.0.0.1", {port}), timeout=1),
                lambda: socket.socket().connect(("127.0.0.1", {port})),
                lambda: _socket.socket().connect(("127.0.0.1", {port})),
                lambda: __import__("urllib.request").request.urlopen("http://127.0.0.1:{port}/", timeout=1),
            ):
                try:
                    attempt()
                except OSError:
                    failed += 1
            ok = failed == 4
            """
        )
        result = grade(code, ONE, limits=FAST)
        assert result.passed, result.outcomes
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):  # nothing reached the listener
            listener.accept()


def test_parent_environment_is_not_visible(monkeypatch):
    monkeypatch.setenv("ANTIPERSIST_SANDBOX_SECRET", "hunter2-secret")
    code = probe(
        """
        import os
        try:
            environ = open("/proc/self/environ", "rb").read()
        except OSError:  # no /proc in the kernel sandbox
            environ = b""
        ok = "ANTIPERSIST_SANDBOX_SECRET" not in os.environ and b"hunter2" not in environ
        ok = ok and set(os.environ) <= {"PATH", "LANG", "LC_ALL", "HOME", "TMPDIR", "LC_CTYPE", "PWD"}
        """
    )
    for limits in (FAST, UNISOLATED):
        result = grade(code, ONE, limits=limits)
        assert result.passed, (limits.isolation, result.outcomes)


def test_prints_do_not_break_grading():
    code = textwrap.dedent(
        """
        import os, sys
        print('{"event": "done"}')
        def solve(grid):
            print('{"event": "example", "index": 0, "kind": "output", "output": [[0]]}')
            os.write(1, b'{"event": "fatal", "status": "ok"}\\n')
            sys.__stdout__.write("noise " * 20000)
            print("progress", file=sys.stderr)
            return [list(reversed(row)) for row in grid]
        """
    )
    result = grade(code, FLIP, limits=FAST)
    assert result.passed and result.n_correct == 3, result.outcomes
    assert "noise" in result.stderr_tail and len(result.stderr_tail) <= FAST.stderr_tail_bytes


def test_oversized_results_are_cut_off():
    limits = SandboxLimits(wall_seconds=5.0, max_output_bytes=50_000)
    result = grade("def solve(grid):\n    return [[1] * 300 for _ in range(300)]\n", FLIP, limits=limits)
    assert result.status == "output_invalid" and not result.passed and "50000" in result.error


# --------------------------------------------------------------------------------------------------
# Isolation modes


def test_unisolated_grades_the_same_and_guards_cannot_be_dropped_there():
    for limits in (FAST, UNISOLATED):
        result = grade(FLIP_CODE, FLIP, limits=limits)
        assert result.passed and result.n_correct == 3, limits.isolation
    with pytest.raises(ValueError, match="in_process_guards=False needs isolation='kernel'"):
        SandboxLimits(isolation="unisolated", in_process_guards=False)
    with pytest.raises(ValueError, match="sandbox must be one of"):
        SandboxLimits(isolation="docker")


def test_missing_bubblewrap_is_named_with_the_fix(monkeypatch):
    from antipersist_lib.arc import isolation

    isolation.probe.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(isolation.os, "access", lambda path, mode: False)
    try:
        with pytest.raises(isolation.SandboxUnavailable, match=r"bubblewrap \(bwrap\) is not installed.*make sandbox"):
            grade(FLIP_CODE, FLIP, limits=FAST)
    finally:
        isolation.probe.cache_clear()


def test_refused_user_namespaces_are_reported_with_bubblewraps_words(monkeypatch, tmp_path):
    """A bwrap that cannot create namespaces (here: a stand-in that fails like one) is named, with its message."""
    from antipersist_lib.arc import isolation

    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in --version) echo "bubblewrap 0.8.0";; --help) echo "--size --perms";; '
        "*) echo 'bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
        "non-privileged user namespaces' >&2; exit 1;; esac\n"
    )
    fake.chmod(0o755)
    isolation.probe.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        with pytest.raises(isolation.SandboxUnavailable, match="No permissions to creating new namespace") as info:
            isolation.probe()
        assert "user.max_user_namespaces" in str(info.value)
    finally:
        isolation.probe.cache_clear()


def test_seccomp_filter_shape():
    """Every jump lands inside the program and the last instructions return; numbers differ per arch."""
    import struct

    from antipersist_lib.arc import isolation

    for arch in ("x86_64", "aarch64"):
        for threads in (False, True):
            prog = isolation.seccomp_program(arch, allow_threads=threads)
            assert len(prog) % 8 == 0
            ins = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
            for at, (code, jt, jf, _k) in enumerate(ins):
                if code & 0x07 == 0x05:  # a jump
                    assert at + 1 + max(jt, jf) < len(ins)
            assert ins[-1][0] == 0x06
    with pytest.raises(ValueError, match="no syscall table"):
        isolation.seccomp_program("riscv64", allow_threads=False)


def test_threads_follow_max_processes():
    code = probe(
        """
        import threading
        try:
            thread = threading.Thread(target=lambda: None)
            thread.start()
            thread.join()
            started = True
        except RuntimeError:
            started = False
        print("STARTED=%s" % started, flush=True)
        ok = True
        """
    )
    none = grade(code, ONE, limits=FAST)
    some = grade(code, ONE, limits=replace(FAST, max_processes=64))
    assert "STARTED=False" in none.stderr_tail and "STARTED=True" in some.stderr_tail, (none, some)


def test_a_sandbox_that_cannot_start_is_an_infrastructure_error_and_leaks_no_descriptor(monkeypatch):
    from antipersist_lib.arc import sandbox
    from antipersist_lib.errors import InfrastructureError

    grade(FLIP_CODE, FLIP, limits=FAST)  # the isolation probe is done and cached before counting

    def refuse(*args, **kwargs):
        raise OSError(7, "Argument list too long")

    monkeypatch.setattr(sandbox.subprocess, "Popen", refuse)
    before = len(os.listdir("/proc/self/fd"))
    for limits in (FAST, UNISOLATED):
        with pytest.raises(InfrastructureError, match="could not start the ARC sandbox.*Argument list too long"):
            grade(FLIP_CODE, FLIP, limits=limits)
    assert len(os.listdir("/proc/self/fd")) == before


def test_leftover_checks_count_only_their_own_graders_sandboxes():
    """A study grading beside the suite is not the suite's leftover: processes are told apart by owner token."""
    import json as _json
    import subprocess
    import sys
    import time

    from antipersist_lib.arc.sandbox import RUNNER_MARKER, owner_token, sandbox_processes

    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", RUNNER_MARKER, _json.dumps({"owner": "someone-else"})]
    )
    try:
        for _ in range(50):
            if sandbox_processes("someone-else"):
                break
            time.sleep(0.05)
        assert any(str(other.pid) in p for p in sandbox_processes("someone-else"))
        assert not any(str(other.pid) in p for p in sandbox_processes())  # not this session's
        assert owner_token().startswith("pytest-")  # conftest gives the session its own token
    finally:
        other.kill()
        other.wait()
