"""Grade untrusted, model-written ARC solvers in a throw-away sandbox.

Each :func:`grade` call runs the tool preamble and the code in a fresh ``python -I -S`` child
(``arc/sandbox_child.py``) and calls ``solve(grid)`` on the example inputs there; only the inputs enter the
sandbox, and the grader alone holds the expected outputs and compares them, so a program cannot see the answers
or claim a pass. Isolation (``SandboxLimits.isolation``) is ``"kernel"`` by default (``arc/isolation.py``;
missing bubblewrap or user namespaces raise ``SandboxUnavailable`` and nothing runs) or ``"unisolated"``, an
explicit opt-out that gives hostile code your files and the network: use it only where that cannot hurt.
The in-process guards are defence in depth only; a program can undo them.

Threat model and enforced layers: docs/arc-sandbox.md; the child's output channel, namespace and accepted grid
types: its section "How one grading call runs".
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from antipersist_lib.arc import isolation
from antipersist_lib.arc.isolation import SANDBOX_TMP, SandboxUnavailable  # noqa: F401  (re-exported)
from antipersist_lib.errors import InfrastructureError
from antipersist_lib.replies import decode_json_at, extract_code

#: what an unisolated run says on every start and records in its manifest
UNISOLATED_WARNING = (
    "sandbox: unisolated - model-written code runs WITHOUT kernel isolation (only rlimits and in-process "
    "guards, which hostile code can undo): it can read your files and secrets and reach the network. "
    "Use this only where that code cannot hurt anything; remove 'sandbox: unisolated' to isolate it."
)

#: an argument of every runner process, so a process list can tell leftover sandbox processes apart
RUNNER_MARKER = "antipersist-arc-sandbox"
#: whose grades a sandbox process belongs to: a token child processes inherit (the test suite sets one per
#: session), else this process's id; it is in every runner's command line, so leftovers can be told apart
#: from another grader's (a study, a second suite) running on the same machine
OWNER_ENV = "ANTIPERSIST_SANDBOX_OWNER"


def owner_token() -> str:
    return os.environ.get(OWNER_ENV) or f"pid{os.getpid()}"


def sandbox_processes(owner: str | None = None) -> list[str]:
    """Live processes (not zombies) of the sandboxes graded for ``owner`` (default: ``owner_token()``): the
    runner and bubblewrap, whose command lines carry the marker and the owner token."""
    tag = json.dumps({"owner": owner or owner_token()})[1:-1]
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X") and RUNNER_MARKER in cmd and tag in cmd:
            found.append(f"{entry} {state} {cmd[:120]}")
    return found


Grid = list[list[int]]

#: overall statuses of a grading run
STATUSES = (
    "ok",  # the child ran every example (some may be wrong or have raised)
    "no_code",  # grade_reply only: the reply has no fenced Python block
    "no_solve",  # the code ran but defines no callable ``solve``
    "syntax_error",  # the code (or the preamble) does not compile
    "load_error",  # the code raised while being executed at top level, before solve was called
    "timeout",  # wall-clock or CPU limit exceeded
    "memory",  # MemoryError (the address-space limit) at top level or in an example
    "crashed",  # the child died without a complete result (signal, os._exit, broken protocol)
    "output_invalid",  # solve returned a non-grid for some example, or the results were too large
)

#: statuses the runner reports itself when it stops before the examples
_FATAL_STATUSES = frozenset({"syntax_error", "no_solve", "load_error", "memory"})

#: per-example outcomes
OUTCOMES = ("correct", "wrong", "error", "invalid", "not_run")


@dataclass(frozen=True)
class SandboxLimits:
    """Limits for one grading run; small defaults suit ARC grids (<= 30x30, tiny programs)."""

    wall_seconds: float = 10.0  # all examples together, interpreter start-up included
    cpu_seconds: int = 10  # RLIMIT_CPU soft limit (SIGXCPU); the hard limit is one second more
    memory_bytes: int = 1 << 30  # RLIMIT_AS: address space of the child
    max_file_bytes: int = 1 << 20  # RLIMIT_FSIZE: largest file the child may write
    max_open_files: int = 64  # RLIMIT_NOFILE
    max_processes: int = 0  # RLIMIT_NPROC; > 0 also lets the kernel sandbox start threads (processes: never)
    max_output_bytes: int = 4 << 20  # result stream cap; more kills the child (status output_invalid)
    stderr_tail_bytes: int = 8192  # how much of the end of stderr (user prints included) is kept
    tmpfs_bytes: int = 16 << 20  # size of the sandbox's only writable place (kernel isolation)
    isolation: str = "kernel"  # "kernel" (bubblewrap, see arc/isolation.py) or "unisolated" (opt-in only)
    in_process_guards: bool = True  # defence in depth; False only to test what the kernel holds on its own

    def __post_init__(self) -> None:
        if not self.wall_seconds > 0:
            raise ValueError(f"SandboxLimits.wall_seconds must be > 0, got {self.wall_seconds!r}")
        isolation.check_mode(self.isolation)
        if not self.in_process_guards and self.isolation != "kernel":
            raise ValueError("SandboxLimits.in_process_guards=False needs isolation='kernel' (nothing else would hold)")
        for name in (
            "cpu_seconds", "memory_bytes", "max_file_bytes", "max_open_files", "max_output_bytes", "tmpfs_bytes"
        ):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive int, got {value!r}")
        for name in ("max_processes", "stderr_tail_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"SandboxLimits.{name} must be an int >= 0, got {value!r}")
        if self.max_open_files < 16:
            raise ValueError("SandboxLimits.max_open_files must be >= 16 (the interpreter needs a few)")


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True)
class ExampleOutcome:
    """What happened on one example: ``outcome`` is one of OUTCOMES, ``error`` says why when not correct."""

    index: int
    outcome: str
    error: str | None = None
    output: Grid | None = None  # the (valid) grid solve returned, when it returned one


@dataclass(frozen=True)
class GradeResult:
    """The verdict on one program; ``passed`` means status ok and every example exactly equal."""

    status: str
    passed: bool
    n_correct: int
    n_examples: int
    outcomes: tuple[ExampleOutcome, ...]
    error: str | None = None  # detail for a non-ok status (syntax error text, limit hit, ...)
    stderr_tail: str = ""
    wall_seconds: float = 0.0
    returncode: int | None = None  # of the child; negative = killed by that signal
    pid: int | None = field(default=None, compare=False)  # the grader's child (bubblewrap, or the runner unisolated)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (for records and logs)."""
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# Validating grids and examples


def _check_grid(value: Any, where: str) -> Grid:
    """``value`` as a list-of-lists grid, or ValueError naming ``where`` and what is wrong."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where} must be a list of rows, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{where} is an empty grid (no rows)")
    width = None
    rows: Grid = []
    for r, row in enumerate(value):
        if not isinstance(row, (list, tuple)):
            raise ValueError(f"{where} row {r} must be a list, got {type(row).__name__}")
        if not row:
            raise ValueError(f"{where} row {r} is empty")
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise ValueError(f"{where} is not rectangular: row {r} has {len(row)} cells, row 0 has {width}")
        for c, cell in enumerate(row):
            if type(cell) is not int or not 0 <= cell <= 9:
                shown = repr(cell) if type(cell) is int else type(cell).__name__
                raise ValueError(f"{where} cell [{r}][{c}] must be an int 0-9, got {shown}")
        rows.append(list(row))
    return rows


def _check_examples(examples: Any) -> tuple[list[Grid], list[Grid]]:
    """Inputs and expected outputs of ``examples``; ValueError/TypeError naming the bad entry."""
    if not isinstance(examples, (list, tuple)):
        raise TypeError(
            f"examples must be a list of {{'input': grid, 'output': grid}} dicts, got {type(examples).__name__}"
        )
    if not examples:
        raise ValueError("examples is empty: there is nothing to grade")
    inputs: list[Grid] = []
    outputs: list[Grid] = []
    for i, example in enumerate(examples):
        if not isinstance(example, dict):
            raise TypeError(f"examples[{i}] must be a dict with 'input' and 'output', got {type(example).__name__}")
        missing = [key for key in ("input", "output") if key not in example]
        if missing:
            raise ValueError(f"examples[{i}] has no {' or '.join(repr(k) for k in missing)} key")
        inputs.append(_check_grid(example["input"], f"examples[{i}]['input']"))
        outputs.append(_check_grid(example["output"], f"examples[{i}]['output']"))
    return inputs, outputs


# --------------------------------------------------------------------------------------------------
# The child runner: ``arc/sandbox_child.py`` (standard library only), whose source text is the program of
# ``python -I -S -c``, so the sandbox's read-only view still holds no file of the kit

_RUNNER = Path(__file__).with_name("sandbox_child.py").read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# Running the child


@dataclass
class _ChildRun:
    """Raw facts about one child run, before interpretation."""

    pid: int
    events: list[dict[str, Any]]
    stderr_tail: bytes
    timed_out: bool
    output_overflow: bool
    returncode: int | None
    cpu_seconds: float
    wall_seconds: float


def _kill_group(pgid: int) -> None:
    """SIGKILL every process in the child's group (the child is its leader, so pgid == its pid)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _has_exited(pid: int) -> bool:
    """Whether the child exited, without reaping it (a zombie leader keeps its pgid from being reused)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _remove_tree(path: str) -> None:
    """Delete the throw-away directory even if the child removed permissions inside it."""
    for root, dirs, _files in os.walk(path):  # top-down: a directory is opened after its mode is fixed
        for name in dirs:
            child = os.path.join(root, name)
            if not os.path.islink(child):  # never follow a link the child planted (it may point outside)
                try:
                    os.chmod(child, 0o700)
                except OSError:
                    pass
    shutil.rmtree(path, ignore_errors=True)


def _parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` from /proc (None when it is gone or /proc is unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class _Namespace:
    """The sandbox's PID namespace as the grader sees it: bubblewrap, then (once known) the namespace's PID 1.

    Killing PID 1 of a PID namespace makes the kernel kill every process in it, so :meth:`kill` ends the
    program and anything it started, whatever session or group they moved to. The host PID of PID 1 comes
    from bubblewrap's ``--info-fd`` and is only trusted when it is bubblewrap's own child; it is pinned with a
    pidfd so a reused PID can never be hit.
    """

    def __init__(self, bwrap_pid: int) -> None:
        self.bwrap_pid = bwrap_pid
        self.info = bytearray()
        self.init_pid: int | None = None
        self._pidfd: int | None = None
        self._lock = threading.Lock()
        self._closed = False

    def feed(self, chunk: bytes) -> None:
        """Bytes from the info descriptor; the first complete JSON object names PID 1."""
        if self.init_pid is not None or len(self.info) > 65536:
            return
        self.info += chunk
        decoded = decode_json_at(self.info.decode("utf-8", errors="replace").lstrip())
        if decoded is None:
            return
        obj, _end = decoded
        pid = obj.get("child-pid") if isinstance(obj, dict) else None
        if type(pid) is not int or pid <= 1 or _parent_pid(pid) != self.bwrap_pid:
            self.info = bytearray(b"x" * 65537)  # never trust anything later on this channel
            return
        pidfd = None
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                pidfd = None
            if pidfd is not None and _parent_pid(pid) != self.bwrap_pid:  # it died and the PID was reused
                os.close(pidfd)
                return
        with self._lock:
            if self._closed:
                if pidfd is not None:
                    os.close(pidfd)
                return
            self.init_pid, self._pidfd = pid, pidfd

    def kill(self) -> None:
        """SIGKILL PID 1 of the namespace (the kernel takes every process in it along) and bubblewrap."""
        with self._lock:
            if self._pidfd is not None:
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except OSError:
                    pass
            elif self.init_pid is not None and _parent_pid(self.init_pid) == self.bwrap_pid:
                try:
                    os.kill(self.init_pid, signal.SIGKILL)
                except OSError:
                    pass
        _kill_group(self.bwrap_pid)  # bubblewrap leads its own group; --die-with-parent takes PID 1 along

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None


def _exit_code(status: int, kernel: bool) -> int:
    """The child's exit code; negative = killed by that signal (bubblewrap reports a signal N as 128 + N)."""
    code = os.waitstatus_to_exitcode(status)
    if kernel and 128 < code < 128 + 65:
        return -(code - 128)
    return code


def _run_child(job: bytes, limits: SandboxLimits, workdir: str | None) -> _ChildRun:
    """Start the runner (in the kernel sandbox, or in ``workdir`` when unisolated), feed it ``job``, collect
    its result lines and stderr tail. A watchdog thread kills it at the wall-clock deadline whatever happens."""
    runner_limits = {
        "memory_bytes": limits.memory_bytes,
        "cpu_seconds": limits.cpu_seconds,
        "max_file_bytes": limits.max_file_bytes,
        "max_open_files": limits.max_open_files,
        "max_processes": limits.max_processes,
        "guards": limits.in_process_guards,
        "owner": owner_token(),  # read by no one inside: it names the grader to leftover checks
    }
    kernel = limits.isolation == "kernel"
    home = SANDBOX_TMP if kernel else workdir
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": home, "TMPDIR": home}
    info_read = info_write = seccomp_read = None
    pass_fds: tuple[int, ...] = ()
    if kernel:
        iso = isolation.probe()
        argv = [iso.view.interpreter, "-I", "-S", "-c", _RUNNER, RUNNER_MARKER, json.dumps(runner_limits)]
        info_read, info_write = os.pipe()
        if iso.seccomp_arch:
            seccomp_read, seccomp_write = os.pipe()
            program = isolation.seccomp_program(iso.seccomp_arch, allow_threads=limits.max_processes > 0)
            os.write(seccomp_write, program)  # a few hundred bytes: fits the pipe buffer
            os.close(seccomp_write)
        cmd = iso.command(argv, tmpfs_bytes=limits.tmpfs_bytes, info_fd=info_write, seccomp_fd=seccomp_read)
        pass_fds = tuple(fd for fd in (info_write, seccomp_read) if fd is not None)
        cwd = None
    else:
        cmd = [sys.executable, "-I", "-S", "-c", _RUNNER, RUNNER_MARKER, json.dumps(runner_limits)]
        cwd = workdir
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            close_fds=True,
            pass_fds=pass_fds,
            start_new_session=True,
        )
    except OSError as exc:
        if info_read is not None:  # the other two are closed just below
            os.close(info_read)
        raise InfrastructureError(f"could not start the ARC sandbox ({cmd[0]!r}): {exc}") from exc
    finally:
        for fd in (info_write, seccomp_read):  # the child holds its copies
            if fd is not None:
                os.close(fd)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    namespace = _Namespace(proc.pid) if kernel else None
    deadline = started + limits.wall_seconds
    stop = threading.Event()

    def kill() -> None:
        if namespace is not None:
            namespace.kill()
        else:
            _kill_group(proc.pid)

    fired = threading.Event()

    def watchdog() -> None:  # runs however the reading loop below is doing
        if not stop.wait(max(0.0, deadline - time.monotonic())):
            fired.set()
            kill()

    guard = threading.Thread(target=watchdog, name=f"arc-sandbox-watchdog-{proc.pid}", daemon=True)
    guard.start()
    in_fd, out_fd, err_fd = proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno()
    for fd in (in_fd, out_fd, err_fd):
        os.set_blocking(fd, False)
    sel = selectors.DefaultSelector()
    sel.register(out_fd, selectors.EVENT_READ)
    sel.register(err_fd, selectors.EVENT_READ)
    sel.register(in_fd, selectors.EVENT_WRITE)
    if info_read is not None:
        os.set_blocking(info_read, False)
        sel.register(info_read, selectors.EVENT_READ)
    pending = memoryview(job)
    readers = {out_fd, err_fd}
    out = bytearray()
    err = bytearray()
    grace_end: float | None = None  # after the child exits: a moment to drain, not a timeout
    timed_out = overflow = False
    try:
        while readers or pending:
            now = time.monotonic()
            if grace_end is not None and now >= grace_end:
                break
            if now >= deadline:
                timed_out = True
                break
            if grace_end is None and _has_exited(proc.pid):
                kill()  # stragglers would keep the pipes open
                grace_end = min(deadline, now + 1.0)
            for key, _mask in sel.select(timeout=min(deadline - now, 0.05)):
                fd = key.fd
                if fd == in_fd:
                    try:
                        pending = pending[os.write(in_fd, pending[:65536]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # the child died before reading everything
                        pending = memoryview(b"")
                    if not pending:
                        sel.unregister(in_fd)
                        proc.stdin.close()
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if fd == info_read:
                    if chunk and namespace is not None:
                        namespace.feed(chunk)
                    else:
                        sel.unregister(fd)
                    continue
                if not chunk:
                    sel.unregister(fd)
                    readers.discard(fd)
                elif fd == out_fd:
                    out += chunk
                    if len(out) > limits.max_output_bytes:
                        overflow = True
                        break
                else:
                    err += chunk
                    if len(err) > 2 * limits.stderr_tail_bytes + 65536:
                        del err[: len(err) - limits.stderr_tail_bytes]
            if overflow:
                break
    finally:
        stop.set()
        kill()
        timed_out = timed_out or fired.is_set()  # the watchdog may have ended it while the loop was draining
        sel.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        if info_read is not None:
            os.close(info_read)
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = _exit_code(status, kernel)
            cpu = usage.ru_utime + usage.ru_stime
        except ChildProcessError:
            proc.returncode, cpu = None, 0.0
        if namespace is not None:
            namespace.close()
        guard.join()
    wall = time.monotonic() - started
    events = []
    complete = out[: out.rfind(b"\n") + 1]  # a torn last line (killed mid-write) is dropped
    for line in complete.splitlines():
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):  # the program may write anything here, e.g. "[" * 10**6
            continue
        if isinstance(event, dict):
            events.append(event)
    tail = bytes(err[-limits.stderr_tail_bytes :]) if limits.stderr_tail_bytes else b""
    return _ChildRun(proc.pid, events, tail, timed_out, overflow, proc.returncode, cpu, wall)


# --------------------------------------------------------------------------------------------------
# Grading


def _not_run(n: int, why: str) -> tuple[ExampleOutcome, ...]:
    return tuple(ExampleOutcome(i, "not_run", why) for i in range(n))


def grade(
    code: str,
    examples: list[dict[str, Any]],
    *,
    preamble: str = "",
    limits: SandboxLimits = DEFAULT_LIMITS,
) -> GradeResult:
    """Run ``preamble + code`` in the sandbox, call ``solve`` on each example input, compare exactly.

    ``examples`` is a list of ``{"input": grid, "output": grid}``; only the inputs reach the child.
    Raises TypeError/ValueError naming the bad argument; everything the code does is reported in the
    result, never raised.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {type(code).__name__}")
    if not isinstance(preamble, str):
        raise TypeError(f"preamble must be a str, got {type(preamble).__name__}")
    if not isinstance(limits, SandboxLimits):
        raise TypeError(f"limits must be a SandboxLimits, got {type(limits).__name__}")
    inputs, expected = _check_examples(examples)
    n = len(inputs)
    job = json.dumps({"preamble": preamble, "code": code, "inputs": inputs}).encode()
    if limits.isolation == "kernel":
        run = _run_child(job, limits, None)  # the program's only writable place is the sandbox's own tmpfs
    else:
        workdir = tempfile.mkdtemp(prefix="arc-sandbox-")
        try:
            run = _run_child(job, limits, workdir)
        finally:
            _remove_tree(workdir)

    outcomes: dict[int, ExampleOutcome] = {}
    fatal: dict[str, Any] | None = None
    done = memory = invalid = False
    for event in run.events:
        kind = event.get("event")
        if kind == "fatal" and fatal is None and event.get("status") in _FATAL_STATUSES:
            fatal = event
        elif kind == "done":
            done = True
        elif kind == "example":
            index = event.get("index")
            if type(index) is not int or not 0 <= index < n or index in outcomes:
                continue
            if event.get("kind") == "output":
                try:
                    grid = _check_grid(event.get("output"), "output")
                except ValueError as exc:
                    outcomes[index] = ExampleOutcome(index, "invalid", str(exc))
                    invalid = True
                    continue
                if grid == expected[index]:
                    outcomes[index] = ExampleOutcome(index, "correct", None, grid)
                else:
                    outcomes[index] = ExampleOutcome(index, "wrong", "output differs from the expected grid", grid)
            elif event.get("kind") == "invalid":
                outcomes[index] = ExampleOutcome(index, "invalid", str(event.get("error")))
                invalid = True
            else:
                outcomes[index] = ExampleOutcome(index, "error", str(event.get("error")))
                memory = memory or bool(event.get("memory"))

    stderr_tail = run.stderr_tail.decode("utf-8", errors="replace")
    error: str | None = None
    if run.output_overflow:
        status, error = "output_invalid", f"the results exceeded {limits.max_output_bytes} bytes"
    elif fatal is not None:
        status, error = str(fatal["status"]), str(fatal.get("error"))
    elif done:
        status = "memory" if memory else "output_invalid" if invalid else "ok"
        seen = [outcomes[i] for i in sorted(outcomes)]
        if status == "memory":
            first = next((o for o in seen if o.outcome == "error" and "MemoryError" in (o.error or "")), None)
        elif status == "output_invalid":
            first = next((o for o in seen if o.outcome == "invalid"), None)
        else:
            first = None
        if first is not None:
            last_line = ((first.error or "").strip().splitlines() or [""])[-1]
            error = f"example {first.index}: {last_line}"
    elif run.timed_out:
        status, error = "timeout", f"wall-clock limit of {limits.wall_seconds:g} s exceeded"
    elif run.returncode == -signal.SIGXCPU or (
        run.returncode == -signal.SIGKILL and run.cpu_seconds >= limits.cpu_seconds - 0.05
    ):
        status, error = "timeout", f"CPU limit of {limits.cpu_seconds} s exceeded"
    elif "MemoryError" in stderr_tail[-500:]:
        status, error = "memory", "MemoryError (memory limit) before the runner could report"
    else:
        status, error = "crashed", f"the child exited with {run.returncode} before reporting every example"

    why_not_run = error or status
    ordered = tuple(outcomes.get(i) or ExampleOutcome(i, "not_run", why_not_run) for i in range(n))
    n_correct = sum(o.outcome == "correct" for o in ordered)
    return GradeResult(
        status=status,
        passed=status == "ok" and n_correct == n,
        n_correct=n_correct,
        n_examples=n,
        outcomes=ordered,
        error=error,
        stderr_tail=stderr_tail,
        wall_seconds=run.wall_seconds,
        returncode=run.returncode,
        pid=run.pid,
    )


def grade_reply(
    reply: str,
    examples: list[dict[str, Any]],
    *,
    preamble: str = "",
    limits: SandboxLimits = DEFAULT_LIMITS,
) -> GradeResult:
    """Extract the first fenced Python block of a model reply and grade it; status no_code when there is none."""
    code = extract_code(reply)
    if code is None:
        inputs, _expected = _check_examples(examples)
        why = "the reply has no closed Markdown-fenced Python block"
        return GradeResult("no_code", False, 0, len(inputs), _not_run(len(inputs), why), error=why)
    return grade(code, examples, preamble=preamble, limits=limits)
