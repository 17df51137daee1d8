"""How a dead child process is reported: its signal by name, the tail of its log, what to do next.

Why: "endpoint unavailable" after a server crashed hides the one fact that matters (a SIGILL or a general
protection fault means the binary does not fit this CPU; SIGKILL usually means the kernel's OOM killer).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from pathlib import Path

#: what a signal most often means for a llama.cpp server, and the fix the kit suggests
SIGNAL_HINTS = {
    signal.SIGILL: "an instruction this CPU does not have: the llama.cpp build does not fit this CPU",
    signal.SIGSEGV: "a crash in native code; a build compiled for another CPU (native flags) often dies this way",
    signal.SIGBUS: "a crash in native code (bad memory access; a truncated model file can cause it)",
    signal.SIGKILL: "killed from outside, most often by the kernel's out-of-memory killer (see `dmesg`)",
    signal.SIGABRT: "llama.cpp aborted (an assertion or an unreadable model file; the log tail says which)",
}


def describe_exit(returncode: int | None) -> str:
    """``-11`` -> ``"killed by signal 11 (SIGSEGV)"``; ``1`` -> ``"exit code 1"``."""
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-returncode} ({name})"
    return f"exit code {returncode}"


def signal_hint(returncode: int | None) -> str:
    if returncode is None or returncode >= 0:
        return ""
    try:
        return SIGNAL_HINTS.get(signal.Signals(-returncode), "")
    except ValueError:
        return ""


def log_tail(path: Path | None, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file ("" when there is none)."""
    if path is None:
        return ""
    try:
        data = Path(path).read_bytes()[-65536:]
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])


#: run in the child before the real program: ask the kernel for SIGTERM when the kit's process dies
#: (``PR_SET_PDEATHSIG`` = 1), quit if the kit already died before that (the child was re-parented), then
#: become the program (``execv``: same pid, so the kit's handle on it stays valid). A failed ``prctl`` is
#: written to the log and the program still starts, untied.
_TIE_SHIM = (
    "import ctypes, os, signal, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.prctl(1, int(signal.SIGTERM), 0, 0, 0) != 0:\n"
    "    print('antipersist: prctl(PR_SET_PDEATHSIG) failed: ' + os.strerror(ctypes.get_errno())"
    " + '; this process will outlive a killed kit', file=sys.stderr, flush=True)\n"
    "elif os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(0)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def tied_to_parent(command: list[str], parent_pid: int | None = None) -> list[str]:
    """``command`` prefixed so that the child gets SIGTERM when the kit's process dies, however it dies.
    Why: a main job stopped with SIGTERM or SIGKILL runs no cleanup, and an orphaned llama-server kept two
    cores busy until found by hand (measured while writing this). The prefix is this Python calling
    ``prctl`` itself, not ``setpriv --pdeathsig``: util-linux's ``setpriv`` is missing on slim machines
    (a CI machine among them), where the server then outlived the kit. Only from the main thread (the signal
    follows the thread that started the child: a worker thread that ends would take the server with it), only
    on Linux, and only for a program found on ``PATH`` (otherwise ``command`` as is, so that ``Popen`` raises
    its usual error). ``parent_pid`` is the process that will start the child (default: this one)."""
    program = shutil.which(command[0]) if command else None
    if (
        not sys.platform.startswith("linux")
        or program is None
        or threading.current_thread() is not threading.main_thread()
    ):
        return list(command)
    parent = os.getpid() if parent_pid is None else parent_pid
    return [sys.executable, "-I", "-c", _TIE_SHIM, str(parent), program, *command[1:]]
