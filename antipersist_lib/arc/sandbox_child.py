"""The ARC grader's child program: it runs inside the sandbox and grades nothing itself.

``arc/sandbox.py`` passes this file's source text as the program of ``python -I -S -c`` (inside the
bubblewrap sandbox of ``arc/isolation.py``, or as a plain child when unisolated), exactly as it passed the
string it used to hold: the sandbox's read-only view holds no file of the kit. Standard library only, and
nothing runs on import. The program sets rlimits, reads the job (preamble, code, example inputs) from stdin,
switches on the in-process guards, runs the code and reports each example's result as one JSON line on its
private copy of the original stdout; ``arc/sandbox.py`` documents the protocol and does the grading.
"""

import os
import sys


def _set_limits(lim):
    import resource

    def cap(which, soft, hard):
        old_soft, old_hard = resource.getrlimit(which)
        if old_hard != resource.RLIM_INFINITY:
            hard = min(hard, old_hard)
            soft = min(soft, hard)
        resource.setrlimit(which, (soft, hard))

    cap(resource.RLIMIT_AS, lim["memory_bytes"], lim["memory_bytes"])
    cap(resource.RLIMIT_CPU, lim["cpu_seconds"], lim["cpu_seconds"] + 1)
    cap(resource.RLIMIT_FSIZE, lim["max_file_bytes"], lim["max_file_bytes"])
    cap(resource.RLIMIT_NOFILE, lim["max_open_files"], lim["max_open_files"])
    cap(resource.RLIMIT_NPROC, lim["max_processes"], lim["max_processes"])
    cap(resource.RLIMIT_CORE, 0, 0)


_NO_IMPORT = frozenset((
    "ctypes", "_ctypes", "subprocess", "_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels",
    "_interpreters", "_testcapi", "_testinternalcapi", "_testmultiphase", "_testsinglephase", "_testbuffer",
    "_testimportmultiple", "posix", "_io", "_socket", "socket", "resource", "_imp",
))  # fmt: skip


def _lockdown(root):
    """Best-effort in-process denial of processes, network and writes outside ``root``."""
    import _imp
    import _io
    import _socket
    import builtins
    import io
    import posix
    import resource
    import signal
    import socket

    def deny(what):
        def denied(*args, **kwargs):
            raise PermissionError(what + " is disabled in the ARC sandbox")

        return denied

    def patch(name, value, *modules):
        for module in modules:
            if hasattr(module, name):
                setattr(module, name, value)

    # processes, signals to others, escaping the process group, raising limits
    for name in (
        "fork", "forkpty", "system", "popen", "execv", "execve", "execl", "execle", "execlp", "execlpe",
        "execvp", "execvpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp",
        "spawnlpe", "posix_spawn", "posix_spawnp", "kill", "killpg", "setsid", "setpgid", "setpgrp",
        "setuid", "setgid", "seteuid", "setegid", "setreuid", "setregid", "setresuid", "setresgid",
        "setgroups", "chroot", "pidfd_open", "unshare", "setns",
    ):  # fmt: skip
        patch(name, deny("os." + name), os, posix)
    patch("pidfd_send_signal", deny("signal.pidfd_send_signal"), signal)
    patch("setrlimit", deny("resource.setrlimit"), resource)
    patch("prlimit", deny("resource.prlimit"), resource)

    # network
    real_socket = socket.socket

    class DeniedSocket(real_socket):
        def __init__(self, *args, **kwargs):
            raise PermissionError("network access is disabled in the ARC sandbox")

    for name in ("socket", "SocketType"):
        patch(name, DeniedSocket, socket, _socket)
    for name in (
        "create_connection", "create_server", "socketpair", "fromfd", "fromshare", "getaddrinfo",
        "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo", "getfqdn", "dup",
    ):  # fmt: skip
        patch(name, deny("socket." + name), socket, _socket)

    # writes outside the sandbox directory
    realpath = os.path.realpath
    fsdecode, fspath = os.fsdecode, os.fspath
    prefix = root.rstrip(os.sep) + os.sep

    def check(path, what):
        if isinstance(path, int):
            return  # an already open descriptor
        full = realpath(fsdecode(fspath(path)))
        if full != root and not full.startswith(prefix):
            raise PermissionError(f"{what}: {full} is outside the ARC sandbox directory")

    write_modes = frozenset("wax+")
    real_open = _io.open

    def guarded_open(file, mode="r", *args, **kwargs):
        if isinstance(mode, str) and write_modes.intersection(mode):
            check(file, "open for writing")
        return real_open(file, mode, *args, **kwargs)

    real_fileio = _io.FileIO

    class GuardedFileIO(real_fileio):
        def __init__(self, file, mode="r", *args, **kwargs):
            if isinstance(mode, str) and write_modes.intersection(mode):
                check(file, "FileIO for writing")
            super().__init__(file, mode, *args, **kwargs)

    patch("open", guarded_open, builtins, io, _io)
    patch("FileIO", GuardedFileIO, io, _io)

    real_os_open = posix.open
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def guarded_os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & write_flags:
            if dir_fd is not None:
                raise PermissionError("os.open for writing relative to dir_fd is disabled in the ARC sandbox")
            check(path, "os.open for writing")
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    patch("open", guarded_os_open, os, posix)

    def guard_paths(name, positions, keywords):
        real = getattr(posix, name, None)
        if real is None:
            return

        def guarded(*args, **kwargs):
            for key in ("dir_fd", "src_dir_fd", "dst_dir_fd"):
                if kwargs.get(key) is not None:
                    raise PermissionError(
                        f"os.{name} relative to a directory descriptor is disabled in the ARC sandbox"
                    )
            for pos in positions:
                if pos < len(args):
                    check(args[pos], "os." + name)
            for key in keywords:
                if key in kwargs:
                    check(kwargs[key], "os." + name)
            return real(*args, **kwargs)

        patch(name, guarded, os, posix)

    guard_paths("remove", (0,), ("path",))
    guard_paths("unlink", (0,), ("path",))
    guard_paths("rmdir", (0,), ("path",))
    guard_paths("mkdir", (0,), ("path",))
    guard_paths("truncate", (0,), ("path",))
    guard_paths("rename", (0, 1), ("src", "dst"))
    guard_paths("replace", (0, 1), ("src", "dst"))
    guard_paths("symlink", (1,), ("dst",))
    for name in (
        "link", "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown", "chflags", "lchflags", "utime",
        "mknod", "mkfifo", "setxattr", "removexattr", "fchdir",
    ):  # fmt: skip
        patch(name, deny("os." + name), os, posix)

    # fresh copies of the patched or forbidden modules (import, reload, _imp.create_*)
    class Blocker:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.partition(".")[0] in _NO_IMPORT:
                raise ImportError(f"module {name!r} is not available in the ARC sandbox")
            return None

    sys.meta_path.insert(0, Blocker())
    for name in ("create_builtin", "create_dynamic"):
        real = getattr(_imp, name)

        def guarded(spec, *args, _real=real):
            if str(getattr(spec, "name", "")).partition(".")[0] in _NO_IMPORT:
                raise ImportError(f"module {spec.name!r} is not available in the ARC sandbox")
            return _real(spec, *args)

        setattr(_imp, name, guarded)
    for name in list(sys.modules):
        if name.partition(".")[0] in ("ctypes", "_ctypes", "subprocess", "_posixsubprocess"):
            del sys.modules[name]


def _as_grid(value):
    """(grid, None) for a valid grid (tuples become lists), else (None, reason)."""
    if not isinstance(value, (list, tuple)):
        return None, f"solve returned {type(value).__name__}, expected a list of rows"
    if not value:
        return None, "solve returned an empty grid (no rows)"
    rows = []
    width = None
    for r, row in enumerate(value):
        if not isinstance(row, (list, tuple)):
            return None, f"row {r} is {type(row).__name__}, expected a list of ints"
        if not row:
            return None, f"row {r} is empty"
        if width is None:
            width = len(row)
        elif len(row) != width:
            return None, f"not rectangular: row {r} has {len(row)} cells, row 0 has {width}"
        for c, cell in enumerate(row):
            if type(cell) is not int or not 0 <= cell <= 9:
                shown = repr(cell) if type(cell) is int else type(cell).__name__
                return None, f"cell [{r}][{c}] is {shown}, expected an int 0-9"
        rows.append(list(row))
    return rows, None


def _main():
    import json
    import linecache
    import traceback

    limits = json.loads(sys.argv[2])
    _set_limits(limits)
    result_fd = os.dup(1)  # the private result channel (not inherited: dup() fds are non-inheritable)
    os.dup2(2, 1)  # user prints, even os.write(1, ...), go to stderr
    job = json.loads(sys.stdin.buffer.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull)
    sys.dont_write_bytecode = True

    write, dumps, _exit = os.write, json.dumps, os._exit
    format_exception, format_exception_only = traceback.format_exception, traceback.format_exception_only

    def emit(obj):
        data = memoryview((dumps(obj, separators=(",", ":")) + "\n").encode())
        while data:
            data = data[write(result_fd, data) :]

    def describe(exc, tb=None):
        try:
            text = "".join(
                format_exception(type(exc), exc, tb) if tb is not None else format_exception_only(type(exc), exc)
            )
        except BaseException:
            text = type(exc).__name__
        return text[-2000:]

    streams = (sys.stdout, sys.stderr)

    def finish(code=0):
        for stream in streams:
            try:
                stream.flush()
            except BaseException:
                pass
        _exit(code)

    units = []
    for filename, source in (("<tools>", job["preamble"]), ("<solution>", job["code"])):
        if not source:
            continue
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            units.append(compile(source, filename, "exec"))
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            where = "the tool preamble" if filename == "<tools>" else "the code"
            emit({"event": "fatal", "status": "syntax_error", "error": f"{where}: " + describe(exc)})
            finish()

    reserve = bytearray(4 << 20)  # freed on MemoryError so the runner can still report
    namespace = {"__name__": "__solution__", "__builtins__": __builtins__}
    if limits["guards"]:
        _lockdown(os.path.realpath(os.getcwd()))
    try:
        for unit in units:
            exec(unit, namespace)
    except MemoryError as exc:
        del reserve
        emit({"event": "fatal", "status": "memory", "error": describe(exc)})
        finish()
    except BaseException as exc:
        emit({"event": "fatal", "status": "load_error", "error": describe(exc, exc.__traceback__.tb_next)})
        finish()
    solve = namespace.get("solve")
    if not callable(solve):
        why = "the code defines no solve(grid) function" if solve is None else "solve is not callable"
        emit({"event": "fatal", "status": "no_solve", "error": why})
        finish()
    for index, grid in enumerate(job["inputs"]):
        try:
            value = solve(grid)
        except MemoryError as exc:
            reserve = None
            emit({"event": "example", "index": index, "kind": "error", "memory": True, "error": describe(exc)})
            try:
                reserve = bytearray(4 << 20)
            except MemoryError:
                pass
            continue
        except BaseException as exc:
            emit(
                {"event": "example", "index": index, "kind": "error", "error": describe(exc, exc.__traceback__.tb_next)}
            )
            continue
        try:
            rows, why = _as_grid(value)
        except BaseException as exc:
            rows, why = None, "the returned value could not be read: " + describe(exc)
        if rows is None:
            emit({"event": "example", "index": index, "kind": "invalid", "error": why})
        else:
            emit({"event": "example", "index": index, "kind": "output", "output": rows})
        del value, rows
    emit({"event": "done"})
    finish()


if __name__ == "__main__":  # run as ``python -I -S -c <this source>`` by the grader
    _main()
