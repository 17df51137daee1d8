"""Append-only JSON Lines files: the only on-disk format for records that must never be lost.

Why one module: every store (trajectory memory, outcome log, episode records, call ledger)
needs the same two guarantees. Appends are a single ``write`` of one complete line on an
``O_APPEND`` descriptor, so concurrent writers in one process never interleave, and a crash
can at worst leave one torn final line. Readers skip malformed lines with a logged warning and
keep going, so a torn line never invalidates the records before or after it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

try:  # optional accelerator (a declared dependency; the kit still works without it)
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None  # type: ignore[assignment]

log = logging.getLogger(__name__)


def dumps_line(obj: Any) -> bytes:
    """One record as one UTF-8 line; refuses NaN so every line is strict JSON."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    if "\n" in text:  # json.dumps escapes newlines inside strings; this guards the invariant
        raise ValueError("a JSONL record may not contain a raw newline")
    return (text + "\n").encode("utf-8")


@contextlib.contextmanager
def _exclusive(fd: int) -> Iterator[None]:
    """An exclusive advisory lock on an open file (released on exit); a no-op where flock is missing."""
    if fcntl is None:
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


#: where bytes that no reader can use (a torn final line, a malformed line) are kept, beside their file
TORN_SUFFIX = ".torn"


def set_aside(path: Path, data: bytes) -> Path:
    """Append ``data`` (the bytes of damaged lines) to ``<path>.torn``: out of the readers' way, not destroyed."""
    aside = path.with_name(path.name + TORN_SUFFIX)
    with open(aside, "ab") as fh:
        fh.write(data if data.endswith(b"\n") else data + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    return aside


def set_aside_malformed(path: str | os.PathLike[str]) -> int:
    """Move every line of ``path`` that readers would skip (torn, invalid UTF-8 or JSON) into ``<path>.torn``,
    rewriting the file atomically with the good lines in order; returns how many were moved. Run once on a
    file that is not journaled (held-out episodes, the call ledger) when a run resumes, so one crash's
    fragment is warned about once, not on every later read."""
    path = Path(path)
    if not path.exists():
        return 0
    good: list[bytes] = []
    bad: list[bytes] = []
    with open(path, "rb") as fh:
        for raw in fh:
            ok = raw.endswith(b"\n")
            if ok and raw.strip():
                try:
                    _loads(raw.strip())
                except (ValueError, RecursionError):
                    ok = False
            (good if ok else bad).append(raw)
    if not bad:
        return 0
    set_aside(path, b"".join(b if b.endswith(b"\n") else b + b"\n" for b in bad))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    with open(tmp, "wb") as fh:
        fh.writelines(good)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    log.warning(
        "%s: set %d damaged line(s) aside in %s%s (once; readers skipped them)", path, len(bad), path.name, TORN_SUFFIX
    )
    return len(bad)


class JsonlWriter:
    """Appends records to one JSONL file; safe for threads of one process and for processes.

    On open, a file whose last byte is not a newline (a torn write from a crash) first has the
    fragment moved into ``<file>.torn`` (``set_aside``), so it is neither glued to the next record
    nor left for every later reader to warn about. Each append and that check hold an exclusive
    ``flock`` on the file: otherwise a writer opening the file while another process is in the
    middle of a large append would see its half-written line as torn.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        with _exclusive(self._fd):
            self._terminate_torn_tail()

    def _terminate_torn_tail(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            start = size
            while start > 0:  # back to the byte after the last newline (lines are small: read in blocks)
                fh.seek(max(0, start - 65536))
                block = fh.read(start - max(0, start - 65536))
                cut = block.rfind(b"\n")
                if cut >= 0:
                    start = start - len(block) + cut + 1
                    break
                start -= len(block)
            fh.seek(start)
            fragment = fh.read()
        aside = set_aside(self.path, fragment)
        os.ftruncate(self._fd, start)
        log.warning(
            "%s: its last line was torn (%d bytes, no newline): set aside in %s", self.path, len(fragment), aside.name
        )

    def append(self, obj: Any) -> None:
        data = dumps_line(obj)
        with self._lock, _exclusive(self._fd):
            written = os.write(self._fd, data)
            if written != len(data):  # pragma: no cover - only on a full disk
                raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
            if self._fsync:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


@dataclass(frozen=True)
class JsonlLine:
    """A parsed line and its 1-based line number in the file."""

    lineno: int
    value: Any


def _loads(line: bytes) -> Any:
    """``json.loads`` semantics, fast: orjson parses the common case (a 4096-float embedding line
    about 8x faster); anything orjson refuses (NaN literals, integers beyond 64 bits, lone
    surrogates, very deep nesting, bad UTF-8) is parsed, or rejected, by the standard library, so
    the accepted lines and their values are exactly those of ``json.loads``."""
    if _orjson is not None:
        try:
            return _orjson.loads(line)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(line.decode("utf-8"))


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[JsonlLine]:
    """Stream the valid records of a JSONL file in file order.

    Malformed lines (invalid UTF-8, invalid JSON, a torn final line) are skipped with a
    warning that names the file and line; loading continues. A missing file yields nothing.
    """
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                log.warning("%s:%d: skipping torn final line (%d bytes)", path, lineno, len(raw))
                continue
            stripped = raw.strip()
            if not stripped:
                continue
            try:
                value = _loads(stripped)
            # ValueError covers invalid UTF-8, invalid JSON and integer literals over Python's
            # digit limit; RecursionError, arrays/objects nested too deeply to decode
            except (ValueError, RecursionError) as exc:
                log.warning("%s:%d: skipping malformed line: %s", path, lineno, exc)
                continue
            yield JsonlLine(lineno, value)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write a whole file so readers see either the old or the new content, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    """One JSON document (a manifest, a memory, a results file)."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)
