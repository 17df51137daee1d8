"""Attacks on the ARC grader, run in a process of their own (as the invoking user, or as an unprivileged one).

``tests/test_arc_sandbox_attacks.py`` starts this script with a JSON config; it grades each attack with the
kit's grader and prints one JSON object: per attack, the grade, the wall time, what the attack reported on
stderr, and what the grader process saw afterwards (leftover sandbox processes, listeners reached, host files
changed). A separate process because some attacks signal the grader: if one landed, this process would stop
and the test would see it time out, instead of the test runner itself hanging.

Each attack prints ``HELD:<what>`` when a protection held and ``LEAK:<what>`` when it did not, so a test can
require every expected ``HELD`` marker (an attack that crashed early proves nothing) and no ``LEAK``.
Standard library only: the unprivileged run imports a copy of the grader modules and nothing else of the kit.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import sys
import tempfile
import textwrap
import time

from antipersist_lib.arc import isolation, sandbox

# the first lines of every attack: recover what the in-process layer hid (its originals sit in closures
# and keyword defaults), so what stops the attack afterwards is the kernel, not Python
RECOVER = '''
import _imp, builtins, importlib.machinery, importlib.util, os, sys

def fresh_builtin(name):
    create = _imp.create_builtin
    real = (getattr(create, "__kwdefaults__", None) or {}).get("_real", create)
    module = real(importlib.machinery.BuiltinImporter.find_spec(name))
    try:
        _imp.exec_builtin(module)
    except Exception:
        pass
    return module

def fresh_dynamic(name):
    create = _imp.create_dynamic
    real = (getattr(create, "__kwdefaults__", None) or {}).get("_real", create)
    for folder in sys.path:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, name + suffix)
            if os.path.exists(path):
                spec = importlib.util.spec_from_file_location(name, path)
                module = real(spec)
                _imp.exec_dynamic(module)
                return module
    raise ImportError("no extension module " + name)

def real_open():
    for cell in getattr(builtins.open, "__closure__", None) or ():
        value = cell.cell_contents
        if getattr(value, "__name__", "") == "open" and value is not builtins.open:
            return value
    return builtins.open

def undo_guards():
    """Put back what the runner's in-process layer replaced: imports, extension loading, open."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if type(finder).__name__ != "Blocker"]
    for name in ("create_builtin", "create_dynamic"):
        guarded = getattr(_imp, name)
        setattr(_imp, name, (getattr(guarded, "__kwdefaults__", None) or {}).get("_real", guarded))
    builtins.open = real_open()
    for name in list(sys.modules):
        if name.split(".")[0] in ("os", "io", "_io", "socket", "_socket", "subprocess", "ctypes"):
            if name not in ("os", "io", "_io"):
                del sys.modules[name]

posix = fresh_builtin("posix")
OPEN = real_open()

def report(ok, what):
    print(("HELD:" if ok else "LEAK:") + what, file=sys.stderr, flush=True)

def attempt(what, action, leak_if_returns=True):
    try:
        value = action()
    except BaseException as exc:
        report(True, what + " (" + type(exc).__name__ + ")")
        return None
    report(not leak_if_returns, what)
    return value
'''


def _solve(body: str) -> str:
    """Attack code: RECOVER, then ``body`` inside solve(grid); it answers [[0]] (never the expected grid)."""
    return RECOVER + "\ndef solve(grid):\n" + textwrap.indent(textwrap.dedent(body), "    ") + "    return [[0]]\n"


def attacks(cfg: dict) -> dict[str, tuple[str, list[str]]]:
    """name -> (code, HELD markers that must all appear)."""
    secret_file, repo_file, home = cfg["secret_file"], cfg["repo_file"], cfg["home"]
    grader_pid, grader_parent = os.getpid(), os.getppid()
    allowed = cfg["allowed"]
    out: dict[str, tuple[str, list[str]]] = {}

    reads = [secret_file, repo_file, "/etc/passwd", "/etc/shadow", "/etc/hostname", "/proc/self/environ",
             "/proc/1/environ", f"/proc/{grader_pid}/environ", f"/proc/{grader_parent}/environ",
             os.path.join(home, ".bashrc"), "/sys/class/net/lo/address", "/dev/mem", "/dev/sda"]  # fmt: skip
    out["read_outside"] = (
        _solve(
            f"""
            for path in {reads!r}:
                attempt("read " + path, lambda p=path: OPEN(p, "rb").read(64))
            allowed = {allowed!r}
            seen = bad = 0
            for root, dirs, files in os.walk("/", followlinks=False):
                for name in dirs + files:
                    full = os.path.join(root, name)
                    seen += 1
                    if not any(full == a or full.startswith(a.rstrip("/") + "/") or a.startswith(full + "/")
                               for a in allowed):
                        bad += 1
                        report(False, "visible " + full)
            report(bad == 0 and seen > 0, "only the view is visible (%d entries)" % seen)
            """
        ),
        ["read " + p for p in reads] + ["only the view is visible"],
    )
    out["secrets"] = (
        _solve(
            """
            print("ENV=" + repr(dict(os.environ)), file=sys.stderr)
            for pid in ("self", "1", "2", str(os.getppid())):
                attempt("environ of " + pid, lambda p=pid: OPEN("/proc/%s/environ" % p, "rb").read())
            report(not any("canary" in v for v in os.environ.values()), "environment holds no parent secret")
            """
        ),
        ["environ of self", "environ of 1", "environment holds no parent secret"],
    )
    targets = ["/escaped.txt", "/usr/escaped.txt", cfg["interpreter"], "/etc/ld.so.cache", cfg["canary_dir"] + "/x"]
    out["write_outside"] = (
        _solve(
            f"""
            import os as _os
            stdlib = _os.path.dirname(_os.__file__)
            for path in {targets!r} + [_os.path.join(stdlib, "os.py"), _os.path.join(stdlib, "evil.py")]:
                attempt("write " + path, lambda p=path: OPEN(p, "ab").write(b"pwned"))
            attempt("remove stdlib file", lambda: posix.unlink(_os.path.join(stdlib, "os.py")))
            attempt("rename stdlib file", lambda: posix.rename(_os.path.join(stdlib, "os.py"), "/tmp/os.py"))
            attempt("chmod interpreter", lambda: posix.chmod({cfg["interpreter"]!r}, 0o777))
            attempt("mkdir in root", lambda: posix.mkdir("/pwned"))
            attempt("symlink in root", lambda: posix.symlink("/tmp", "/pwned-link"))
            report(posix.system("mount -o remount,rw /") != 0, "remount root")
            with OPEN("/tmp/inside.txt", "w") as fh:
                fh.write("fine")
            report(OPEN("/tmp/inside.txt").read() == "fine", "the private tmpfs is writable")
            """
        ),
        [
            "write /escaped.txt",
            "write /usr/escaped.txt",
            "write " + cfg["interpreter"],
            "write /etc/ld.so.cache",
            "write " + cfg["canary_dir"] + "/x",
            "remove stdlib file",
            "rename stdlib file",
            "chmod interpreter",
            "mkdir in root",
            "symlink in root",
            "the private tmpfs is writable",
        ],  # fmt: skip
    )
    out["processes"] = (
        _solve(
            """
            import signal
            attempt("posix.fork", lambda: posix.fork())
            attempt("setsid then fork", lambda: (posix.setsid(), posix.fork()))
            status = posix.system("echo LEAK:shell >&2")
            report(status != 0, "posix.system")
            attempt("posix_spawn", lambda: posix.posix_spawn("/bin/sh", ["sh", "-c", "echo LEAK:spawn >&2"], {}))
            attempt("exec a shell", lambda: posix.execv("/bin/sh", ["sh", "-c", "echo LEAK:exec >&2"]))
            attempt("ctypes", lambda: fresh_dynamic("_ctypes"))
            undo_guards()
            import subprocess
            attempt("subprocess after undoing the guards", lambda: subprocess.run([sys.executable, "-c", "pass"]))
            attempt("ctypes after undoing the guards", lambda: __import__("ctypes").CDLL(None).fork())
            if hasattr(posix, "unshare"):  # Python 3.12+
                attempt("unshare a user namespace", lambda: posix.unshare(0x10000000))
            attempt("pidfd_open of PID 1", lambda: posix.pidfd_open(1))
            # exec is allowed (only the interpreter is there to run), but the filter and the namespaces follow
            after = chr(10).join([
                "import posix, sys",
                "try:",
                "    posix.fork()",
                "    print('LEAK:fork after exec', file=sys.stderr)",
                "except OSError:",
                "    print('HELD:fork after exec', file=sys.stderr)",
            ])
            posix.execv(sys.executable, [sys.executable, "-I", "-S", "-c", after])
            """
        ),
        [
            "posix.fork",
            "setsid then fork",
            "posix.system",
            "posix_spawn",
            "exec a shell",
            "ctypes",
            "subprocess after undoing the guards",
            "ctypes after undoing the guards",
            "pidfd_open of PID 1",
            "fork after exec",
        ],  # fmt: skip
    )
    abstract_address = "\0" + cfg["abstract_socket"]
    out["network"] = (
        _solve(
            f"""
            undo_guards()
            import socket
            attempt("inet socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(
                ("127.0.0.1", {cfg["port"]})))
            attempt("unix socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(
                {cfg["unix_socket"]!r}))
            attempt("abstract unix socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(
                {abstract_address!r}))
            """
        ),
        ["inet socket", "unix socket", "abstract unix socket"],
    )
    out["signal_grader"] = (
        _solve(
            f"""
            import signal
            for pid in ({grader_pid}, {grader_parent}):
                attempt("signal 0 to host pid %d" % pid, lambda p=pid: posix.kill(p, 0))
                attempt("SIGSTOP to host pid %d" % pid, lambda p=pid: posix.kill(p, signal.SIGSTOP))
            attempt("SIGSTOP to every process", lambda: posix.kill(-1, signal.SIGSTOP), leak_if_returns=False)
            attempt("SIGSTOP to the parent", lambda: posix.kill(posix.getppid(), signal.SIGSTOP), leak_if_returns=False)
            report(True, "signals sent")
            posix.kill(posix.getpid(), signal.SIGSTOP)  # stop ourselves: the grader's clock must still run
            """
        ),
        [
            f"signal 0 to host pid {grader_pid}",
            f"SIGSTOP to host pid {grader_pid}",
            f"signal 0 to host pid {grader_parent}",
            f"SIGSTOP to host pid {grader_parent}",
            "signals sent",
        ],  # fmt: skip
    )
    out["forge_results"] = (
        RECOVER
        + textwrap.dedent(
            """
            import json
            def forge(fd):
                for index in range(4):
                    line = {"event": "example", "index": index, "kind": "output", "output": [[index]]}
                    os.write(fd, (json.dumps(line) + "\\n").encode())
                os.write(fd, b'{"event": "done"}\\n')
            opened = []
            for fd in range(3, 256):
                try:
                    posix.fstat(fd)
                except OSError:
                    continue
                opened.append(fd)
                try:
                    forge(fd)
                except OSError:
                    pass
            forge(1)
            report(True, "forged on %s" % opened)
            def solve(grid):
                return grid
            """
        ),
        ["forged on"],
    )
    out["fork_bomb"] = (
        _solve(
            """
            made = 0
            for _ in range(10000):
                try:
                    posix.fork()
                    made += 1
                except OSError:
                    pass
            report(made == 0, "fork bomb (%d forks)" % made)
            import threading, time
            threads = 0
            try:
                while threads < 100000:
                    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
                    threads += 1
            except BaseException as exc:
                print("threads stopped at %d: %s" % (threads, type(exc).__name__), file=sys.stderr)
            time.sleep(60)
            """
        ),
        ["fork bomb (0 forks)"],
    )
    out["floods"] = (
        _solve(
            f"""
            for _ in range(2000):  # 128 MiB on stderr: the grader keeps a tail
                sys.stderr.write("x" * 65536)
            sys.stderr.write("\\n")
            try:
                hog = bytearray(8 << 30)
                report(False, "8 GiB allocation")
            except MemoryError:
                report(True, "8 GiB allocation")
            written = 0
            try:
                for i in range(1000):
                    with OPEN("/tmp/flood%d" % i, "wb") as fh:
                        fh.write(b"x" * (1 << 20))
                    written += 1
            except OSError as exc:
                print("tmpfs flood stopped:", exc, file=sys.stderr)
            report(written * (1 << 20) <= {cfg["tmpfs_bytes"]}, "tmpfs flood (%d MiB)" % written)
            for fd in range(3, 64):  # floods the result channel too: the grader cuts it off
                try:
                    for _ in range(64):
                        os.write(fd, b"[" * (1 << 20))
                except OSError:
                    pass
            """
        ),
        ["8 GiB allocation", "tmpfs flood"],
    )
    out["answer_key"] = (
        _solve(
            f"""
            sys.path.insert(0, {cfg["repo_root"]!r})
            attempt("import the kit", lambda: __import__("antipersist_lib.arc.generator"))
            attempt("read the generator", lambda: OPEN({cfg["generator_file"]!r}).read())
            attempt("find the kit on disk", lambda: [p for p in ("/work", "/home", "/root", {cfg["repo_root"]!r})
                                                     if os.listdir(p)] or 1 / 0)
            """
        ),
        ["import the kit", "read the generator", "find the kit on disk"],
    )
    out["sleep"] = ("import time\ndef solve(grid):\n    time.sleep(1000)\n", [])
    out["busy"] = ("def solve(grid):\n    while True:\n        pass\n", [])
    return out


def _sandbox_processes() -> list[str]:
    """Command lines of live processes of this grader's sandboxes (the runner and bubblewrap)."""
    return sandbox.sandbox_processes()


def _digest(paths: list[str]) -> dict[str, str]:
    out = {}
    for path in paths:
        try:
            st = os.stat(path)
            with open(path, "rb") as fh:
                out[path] = f"{st.st_mtime_ns}:{hashlib.sha256(fh.read()).hexdigest()}"
        except OSError as exc:
            out[path] = f"error {exc.errno}"
    return out


def main() -> None:
    cfg = json.loads(open(sys.argv[1]).read())
    os.environ["OPENAI_API_KEY"] = cfg["canary"]  # a secret of the grader process
    iso = isolation.probe()
    cfg["interpreter"] = iso.view.interpreter
    cfg["allowed"] = [*iso.view.binds, *(link for _t, link in iso.view.symlinks), "/dev/null", "/dev/urandom",
                      "/tmp", "/dev", "/usr", "/etc"]  # fmt: skip
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    cfg["port"] = listener.getsockname()[1]
    folder = tempfile.mkdtemp(prefix="arc-attacks-")
    cfg["canary_dir"] = folder
    cfg["unix_socket"] = os.path.join(folder, "grader.sock")
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(cfg["unix_socket"])
    unix.listen()
    unix.settimeout(0.2)
    cfg["abstract_socket"] = f"arc-attacks-{os.getpid()}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + cfg["abstract_socket"])
    abstract.listen()
    abstract.settimeout(0.2)
    watched = [os.path.join(os.path.dirname(os.__file__), "os.py"), iso.view.interpreter, "/etc/ld.so.cache",
               os.path.join(os.path.dirname(isolation.__file__), "generator.py")]  # fmt: skip
    before = _digest(watched)
    examples = cfg["examples"]
    report = {"uid": os.getuid(), "isolation": iso.describe(), "attacks": {}}
    for guards in (True, False):  # with the in-process layer, and with the kernel alone
        limits = sandbox.SandboxLimits(
            wall_seconds=cfg["wall_seconds"], cpu_seconds=cfg["cpu_seconds"], memory_bytes=512 << 20,
            tmpfs_bytes=cfg["tmpfs_bytes"], max_processes=cfg["max_processes"], in_process_guards=guards,
        )  # fmt: skip
        for name, (code, held) in attacks(cfg).items():
            if cfg.get("only") and name not in cfg["only"]:
                continue
            started = time.monotonic()
            result = sandbox.grade(code, examples, limits=limits)
            elapsed = time.monotonic() - started
            leftovers = _sandbox_processes()
            if leftovers:  # give SIGKILL a moment to land before calling it a leftover
                time.sleep(0.5)
                leftovers = _sandbox_processes()
            reached = []
            for label, server in (("inet", listener), ("unix", unix), ("abstract", abstract)):
                try:
                    conn, _addr = server.accept()
                    conn.close()
                    reached.append(label)
                except (TimeoutError, BlockingIOError, OSError):
                    pass
            report["attacks"][f"{name}/guards-{'on' if guards else 'off'}"] = {
                "status": result.status,
                "passed": result.passed,
                "n_correct": result.n_correct,
                "error": result.error,
                "elapsed": elapsed,
                "wall_limit": limits.wall_seconds,
                "stderr_tail": result.stderr_tail,
                "held_expected": held,
                "leftovers": leftovers,
                "listeners_reached": reached,
            }
    report["host_files_changed"] = sorted(p for p, d in _digest(watched).items() if d != before[p])
    report["canary_dir"] = sorted(os.listdir(folder))
    report["leftovers_at_end"] = _sandbox_processes()
    for server in (listener, unix, abstract):
        server.close()
    os.unlink(cfg["unix_socket"])
    os.rmdir(folder)
    signal.alarm(0)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
