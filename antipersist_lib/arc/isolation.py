"""Kernel isolation for model-written code: a bubblewrap sandbox with a minimal read-only view.

Code a language model wrote is treated as hostile, and guards inside the Python process can be undone by the code
itself, so the ARC grader runs each program where the kernel decides what it may do: new user, PID, network,
mount and IPC namespaces, a read-only view of the interpreter and standard library only, a private size-capped
tmpfs, a seccomp filter, rlimits and a deadline that kills the whole PID namespace.

When bubblewrap is missing or the kernel refuses user namespaces, :func:`probe` raises
:class:`SandboxUnavailable` naming the fix, and the grader runs nothing unless the profile says
``sandbox: unisolated`` (see ``arc/sandbox.py``). The threat model and every enforced layer are in
docs/arc-sandbox.md, "What the kernel enforces".
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from collections import deque
from dataclasses import asdict, dataclass

from antipersist_lib.errors import InfrastructureError

#: the profile's ``sandbox:`` values
ISOLATION_MODES = ("kernel", "unisolated")

#: where the sandbox's writable tmpfs sits (the program's cwd, HOME and TMPDIR)
SANDBOX_TMP = "/tmp"

#: the uid and gid the program has inside its user namespace (not root: no capabilities there either)
SANDBOX_UID = 65534

INSTALL_HINT = "install bubblewrap (`make sandbox`, or `sudo apt-get install bubblewrap`)"


class SandboxUnavailable(InfrastructureError):
    """Kernel isolation cannot be set up on this machine; the message names the missing piece and the fix."""


# --------------------------------------------------------------------------------------------------
# seccomp: a classic-BPF filter written out by hand (no libseccomp needed)

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

# syscalls that no grading program needs and that an escape would; numbers from the kernel's unistd tables
_DENIED = {
    "x86_64": {
        "fork": 57, "vfork": 58, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "socket": 41,
        "socketpair": 53, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "pidfd_open": 434, "pidfd_getfd": 438,
        "process_madvise": 440, "name_to_handle_at": 303, "open_by_handle_at": 304, "acct": 163,
        "syslog": 103, "quotactl": 179, "reboot": 169, "swapon": 167, "swapoff": 168,
    },
    "aarch64": {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "keyctl": 219, "add_key": 217,
        "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "unshare": 97,
        "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "socket": 198, "socketpair": 199, "kexec_load": 104,
        "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "pidfd_open": 434, "pidfd_getfd": 438, "process_madvise": 440,
        "name_to_handle_at": 264, "open_by_handle_at": 265, "acct": 89, "syslog": 116, "quotactl": 60,
        "reboot": 142, "swapon": 224, "swapoff": 225,
    },
}  # fmt: skip
_CLONE = {"x86_64": 56, "aarch64": 220}
_CLONE3 = 435
_X32_BIT = 0x40000000  # x86-64's x32 ABI: every number with this bit is refused
_CLONE_THREAD = 0x00010000
_EPERM, _ENOSYS = 1, 38

# classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h)
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data; args are u64, little-endian low word first


def seccomp_arch() -> str | None:
    """The machine name this module has syscall tables for, or None (then no seccomp filter is loaded)."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if machine in _AUDIT_ARCH and sys.byteorder == "little" else None


def seccomp_program(arch: str, *, allow_threads: bool) -> bytes:
    """The compiled filter (an array of ``struct sock_filter``) that bubblewrap loads with ``--seccomp``.

    Any other architecture in ``seccomp_data.arch`` (e.g. 32-bit ``int 0x80`` calls on x86-64) kills the
    process; denied calls fail with EPERM, ``clone3`` with ENOSYS.
    """
    if arch not in _AUDIT_ARCH:
        raise ValueError(f"no syscall table for {arch!r}; known: {sorted(_AUDIT_ARCH)}")
    denied = sorted(_DENIED[arch].values())
    # layout: arch check, x32 check (x86-64), one JEQ per denied number, clone, clone3, allow, then targets
    prog: list[tuple[int, int, int, int]] = []
    deny_at: list[int] = []  # indexes of jumps to "deny"
    prog.append((_LD_ABS_W, 0, 0, _OFF_ARCH))
    prog.append((_JEQ_K, 1, 0, _AUDIT_ARCH[arch]))
    prog.append((_RET_K, 0, 0, _RET_KILL_PROCESS))
    prog.append((_LD_ABS_W, 0, 0, _OFF_NR))
    if arch == "x86_64":
        deny_at.append(len(prog))
        prog.append((_JGE_K, 0, 0, _X32_BIT))
    for nr in denied:
        deny_at.append(len(prog))
        prog.append((_JEQ_K, 0, 0, nr))
    clone_at = len(prog)
    prog.append((_JEQ_K, 0, 0, _CLONE[arch]))
    clone3_at = len(prog)
    prog.append((_JEQ_K, 0, 0, _CLONE3))
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    deny = len(prog)
    prog.append((_RET_K, 0, 0, _RET_ERRNO | _EPERM))
    enosys = len(prog)
    prog.append((_RET_K, 0, 0, _RET_ERRNO | _ENOSYS))
    check_clone = len(prog)
    prog.append((_LD_ABS_W, 0, 0, _OFF_ARG0))
    if allow_threads:
        prog.append((_JSET_K, 0, 1, _CLONE_THREAD))  # a thread: allow; else fall through to deny
        prog.append((_RET_K, 0, 0, _RET_ALLOW))
    prog.append((_RET_K, 0, 0, _RET_ERRNO | _EPERM))

    def jump(at: int, target: int) -> int:
        offset = target - at - 1
        if not 0 <= offset <= 255:
            raise AssertionError("seccomp filter too long for an 8-bit jump")
        return offset

    for at in deny_at:
        code, _jt, jf, k = prog[at]
        prog[at] = (code, jump(at, deny), jf, k)
    code, _jt, jf, k = prog[clone_at]
    prog[clone_at] = (code, jump(clone_at, check_clone), jf, k)
    code, _jt, jf, k = prog[clone3_at]
    prog[clone3_at] = (code, jump(clone3_at, enosys), jf, k)
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def denied_syscalls(arch: str) -> tuple[str, ...]:
    """Names of the calls the filter refuses outright (process creation is refused through clone's flags)."""
    return tuple(sorted(_DENIED[arch]))


# --------------------------------------------------------------------------------------------------
# The view: what the sandboxed interpreter can see

# extension modules whose shared libraries the view leaves out (GUI, terminal, FFI, TLS, databases, NIS: no
# grading program needs them, and without libffi even a recovered ``ctypes`` cannot load; hashlib keeps its
# built-in digests)
_SKIPPED_EXTENSIONS = (
    "_tkinter", "_curses", "_curses_panel", "readline", "_ctypes", "_ctypes_test", "_dbm", "_gdbm", "nis",
    "_ssl", "_hashlib", "_crypt", "_sqlite3", "spwd", "ossaudiodev",
)  # fmt: skip

# run with the interpreter itself, outside the sandbox (trusted: the kit's own code): which files it maps
_PROBE = r"""
import importlib, json, os, sys, sysconfig
skip = set(sys.argv[1].split(","))
dynload = os.path.join(sysconfig.get_paths()["platstdlib"], "lib-dynload")
names = []
if os.path.isdir(dynload):
    for entry in sorted(os.listdir(dynload)):
        if entry.endswith(".so"):
            name = entry.split(".")[0]
            if name not in skip:
                names.append(name)
for name in names:
    try:
        importlib.import_module(name)
    except Exception:
        pass
maps = []
with open("/proc/self/maps") as fh:
    for line in fh:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            maps.append(parts[5].rstrip("\n"))
paths = sysconfig.get_paths()
print(json.dumps({
    "executable": os.path.realpath(sys.executable),
    "stdlib": os.path.realpath(paths["stdlib"]),
    "platstdlib": os.path.realpath(paths["platstdlib"]),
    "site": sorted({os.path.realpath(paths[k]) for k in ("purelib", "platlib")}),
    "maps": sorted(set(maps)),
    "version": sys.version.split()[0],
}))
"""


@dataclass(frozen=True)
class View:
    """Read-only binds, symlinks and masked folders that make up the sandbox's filesystem."""

    interpreter: str  # the real path of the Python the program runs in
    python_version: str
    binds: tuple[str, ...]  # bound read-only at the same path
    symlinks: tuple[tuple[str, str], ...]  # (target, link path), recreated as on the host
    masked: tuple[str, ...]  # folders inside a bind, covered by an empty read-only tmpfs (site-packages)


def _interp_path(executable: str) -> str | None:
    """The ELF program interpreter (PT_INTERP, e.g. /lib64/ld-linux-x86-64.so.2) of ``executable``."""
    try:
        with open(executable, "rb") as fh:
            head = fh.read(64)
            if head[:4] != b"\x7fELF":
                return None
            bits64, little = head[4] == 2, head[5] == 1
            end = "<" if little else ">"
            if bits64:
                (phoff,) = struct.unpack(end + "Q", head[32:40])
                phentsize, phnum = struct.unpack(end + "HH", head[54:58])
            else:
                (phoff,) = struct.unpack(end + "I", head[28:32])
                phentsize, phnum = struct.unpack(end + "HH", head[42:46])
            for i in range(phnum):
                fh.seek(phoff + i * phentsize)
                ph = fh.read(phentsize)
                if struct.unpack(end + "I", ph[:4])[0] != 3:  # PT_INTERP
                    continue
                if bits64:
                    (offset,) = struct.unpack(end + "Q", ph[8:16])
                    (size,) = struct.unpack(end + "Q", ph[32:40])
                else:
                    (offset,) = struct.unpack(end + "I", ph[4:8])
                    (size,) = struct.unpack(end + "I", ph[16:20])
                fh.seek(offset)
                return fh.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def symlinks_on_the_way(path: str) -> tuple[list[tuple[str, str]], str]:
    """Every (target, link) met while resolving ``path`` component by component, and the real path."""
    links: list[tuple[str, str]] = []
    parts = deque(p for p in path.split("/") if p)
    current = "/"
    hops = 0
    while parts:
        name = parts.popleft()
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        if os.path.islink(candidate):
            hops += 1
            if hops > 40:
                raise OSError(f"too many symlinks resolving {path}")
            target = os.readlink(candidate)
            links.append((target, candidate))
            if target.startswith("/"):
                current = "/"
            parts.extendleft(reversed([p for p in target.split("/") if p]))
        else:
            current = candidate
    return links, current


def _same_folder_aliases(real: str) -> list[tuple[str, str]]:
    """Symlinks beside ``real`` that resolve to it (a library's soname link, e.g. libz.so.1 -> libz.so.1.2.13)."""
    folder = os.path.dirname(real)
    out = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for entry in entries:
        if entry.is_symlink() and os.path.realpath(entry.path) == real:
            out.append((os.readlink(entry.path), entry.path))
    return out


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def build_view(interpreter: str) -> View:
    """Probe ``interpreter`` for what it loads and turn that into the sandbox's binds and links."""
    try:
        done = subprocess.run(
            [interpreter, "-I", "-S", "-c", _PROBE, ",".join(_SKIPPED_EXTENSIONS)],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(
            f"could not probe the interpreter {interpreter!r} for the sandbox view: {exc}"
        ) from exc
    if done.returncode != 0:
        raise SandboxUnavailable(
            f"the interpreter probe for the sandbox view failed (exit {done.returncode}): {done.stderr[-1500:]}"
        )
    info = json.loads(done.stdout)
    stdlib, platstdlib = info["stdlib"], info["platstdlib"]
    roots = sorted({stdlib, platstdlib}, key=len)
    roots = [r for i, r in enumerate(roots) if not any(_inside(r, o) for o in roots[:i])]
    binds: set[str] = {info["executable"], *roots}
    symlinks: dict[str, str] = {}
    # the root's own links (/lib -> usr/lib on merged-/usr systems): the loader's paths go through them
    for entry in os.scandir("/"):
        if entry.is_symlink():
            symlinks[entry.path] = os.readlink(entry.path)
    loader = _interp_path(info["executable"])
    wanted = [p for p in info["maps"] if os.path.isfile(p)]
    if loader:
        wanted.append(loader)
    for path in wanted:
        links, real = symlinks_on_the_way(path)
        for target, link in links:
            symlinks.setdefault(link, target)
        if not any(_inside(real, r) for r in roots):
            binds.add(real)
        for target, link in _same_folder_aliases(real):
            symlinks.setdefault(link, target)
    if os.path.isfile("/etc/ld.so.cache"):
        binds.add("/etc/ld.so.cache")
    masked = tuple(sorted(s for s in info["site"] if os.path.isdir(s) and any(_inside(s, r) for r in roots)))
    # a link whose path is itself bound (or inside a bind) would clash with the bind: drop it
    links = tuple(sorted((t, link) for link, t in symlinks.items() if not any(_inside(link, b) for b in binds)))
    return View(info["executable"], info["version"], tuple(sorted(binds)), links, masked)


# --------------------------------------------------------------------------------------------------
# bubblewrap


@dataclass(frozen=True)
class Isolation:
    """A working kernel sandbox on this machine: bubblewrap, its features, the view and the seccomp arch."""

    bwrap: str
    bwrap_version: str
    features: tuple[str, ...]  # optional bubblewrap flags this version has
    seccomp_arch: str | None
    view: View

    def describe(self) -> str:
        """One line for logs and manifests."""
        seccomp = f"seccomp {self.seccomp_arch}" if self.seccomp_arch else "no seccomp filter (unknown arch)"
        return (
            f"kernel isolation: bubblewrap {self.bwrap_version} (user, pid, net, mount, ipc, uts namespaces; "
            f"read-only view of Python {self.view.python_version} stdlib only; {seccomp})"
        )

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["view"] = {"interpreter": self.view.interpreter, "python_version": self.view.python_version}
        out["mode"] = "kernel"
        return out

    def command(self, argv: list[str], *, tmpfs_bytes: int, info_fd: int, seccomp_fd: int | None) -> list[str]:
        """The bubblewrap command line that runs ``argv`` (the interpreter first) inside the sandbox."""
        cmd = [
            self.bwrap,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--uid", str(SANDBOX_UID),
            "--gid", str(SANDBOX_UID),
            "--hostname", "sandbox",
            "--die-with-parent",
            "--new-session",
            "--cap-drop", "ALL",
        ]  # fmt: skip
        if "--disable-userns" in self.features:
            cmd.append("--disable-userns")
        for target, link in self.view.symlinks:
            cmd += ["--symlink", target, link]
        for path in self.view.binds:
            cmd += ["--ro-bind", path, path]
        for path in self.view.masked:
            cmd += ["--tmpfs", path, "--remount-ro", path]
        for dev in ("/dev/null", "/dev/urandom"):
            cmd += ["--dev-bind", dev, dev]
        if "--size" in self.features:
            cmd += ["--size", str(tmpfs_bytes)]
        if "--perms" in self.features:
            cmd += ["--perms", "1777"]
        cmd += ["--tmpfs", SANDBOX_TMP, "--remount-ro", "/", "--chdir", SANDBOX_TMP, "--info-fd", str(info_fd)]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        return cmd + ["--", *argv]


_OPTIONAL_FLAGS = ("--disable-userns", "--size", "--perms")


def _bwrap_features(bwrap: str) -> tuple[str, str]:
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
        helptext = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bubblewrap at {bwrap} does not run ({exc}); {INSTALL_HINT}") from exc
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", version.stdout + version.stderr)
    return (match.group(1) if match else "unknown"), helptext.stdout + helptext.stderr


def _trial(iso: Isolation) -> None:
    """Start the interpreter in the sandbox once; a failure says what the kernel or bubblewrap refused."""
    read, write = os.pipe()
    sec_read = None
    try:
        if iso.seccomp_arch:
            sec_read, sec_write = os.pipe()
            os.write(sec_write, seccomp_program(iso.seccomp_arch, allow_threads=False))
            os.close(sec_write)
        check = "import json, math, collections, itertools, functools, copy, random, re, hashlib; print('ok')"
        cmd = iso.command(
            [iso.view.interpreter, "-I", "-S", "-c", check], tmpfs_bytes=1 << 20, info_fd=write, seccomp_fd=sec_read
        )
        fds = [write] + ([sec_read] if sec_read is not None else [])
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=60, pass_fds=fds, env={"PATH": "/usr/bin:/bin"}
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SandboxUnavailable(f"bubblewrap could not start a sandbox: {exc}") from exc
    finally:
        for fd in (read, write, sec_read):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
    if done.returncode != 0 or done.stdout.strip() != "ok":
        tail = (done.stderr or done.stdout)[-1500:].strip()
        hint = ""
        if "namespace" in tail.lower() or "permission" in tail.lower() or "operation not permitted" in tail.lower():
            hint = (
                "; the kernel refused a user namespace: enable unprivileged user namespaces "
                "(sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1 where it exists, "
                "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu) or run in a container that allows them"
            )
        raise SandboxUnavailable(f"bubblewrap could not run Python in a sandbox (exit {done.returncode}): {tail}{hint}")


@functools.cache
def probe(interpreter: str | None = None) -> Isolation:
    """The kernel sandbox this machine offers (checked once per process and interpreter).

    Raises :class:`SandboxUnavailable` naming the missing piece (no bubblewrap, user namespaces refused,
    the interpreter does not start in the view) and the fix.
    """
    bwrap = shutil.which("bwrap") or next((p for p in ("/usr/bin/bwrap", "/bin/bwrap") if os.access(p, os.X_OK)), None)
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}")
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(f"kernel isolation needs Linux namespaces; this is {sys.platform}")
    version, helptext = _bwrap_features(bwrap)
    features = tuple(flag for flag in _OPTIONAL_FLAGS if re.search(re.escape(flag) + r"\b", helptext))
    arch = seccomp_arch()
    if arch is None and os.geteuid() == 0:
        raise SandboxUnavailable(
            f"no seccomp syscall table for {platform.machine()!r} (the kit has x86_64 and aarch64), and as root the "
            "kernel does not apply RLIMIT_NPROC, so nothing would stop a fork bomb: run the grader as an "
            "unprivileged user, or add this architecture's table to antipersist_lib/arc/isolation.py"
        )
    real = os.path.realpath(interpreter or sys.executable)
    iso = Isolation(bwrap, version, features, arch, build_view(real))
    _trial(iso)
    return iso


def check_mode(mode: str) -> str:
    """``mode`` when it is one of ISOLATION_MODES; ValueError naming the choices otherwise."""
    if mode not in ISOLATION_MODES:
        raise ValueError(f"sandbox must be one of {ISOLATION_MODES}, got {mode!r}")
    return mode
