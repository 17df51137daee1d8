"""Append-only JSON Lines files: the only on-disk format for records that must never be lost
(with, for the stores of task embeddings, a binary file of the embeddings beside the journal:
the last section).

Why one module: every store (trajectory memory, outcome log, episode records, call ledger)
needs the same two guarantees. Appends are a single ``write`` of one complete line on an
``O_APPEND`` descriptor, so concurrent writers in one process never interleave, and a crash
can at worst leave one torn final line. Readers skip malformed lines with a logged warning and
keep going, so a torn line never invalidates the records before or after it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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


#: the field by which a store's journal line names its embedding in the binary file beside it
#: (``jsonl.py``) instead of holding the numbers
EMBEDDING_REF = "embedding_ref"

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
                    loads_json(raw.strip())
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


def loads_json(line: bytes) -> Any:
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


def read_jsonl(path: str | os.PathLike[str], *, inline_embeddings: bool = True) -> Iterator[JsonlLine]:
    """Stream the valid records of a JSONL file in file order.

    Malformed lines (invalid UTF-8, invalid JSON, a torn final line) are skipped with a
    warning that names the file and line; loading continues. A missing file yields nothing.

    A store's line that names its embedding in the binary file beside the journal
    (``"embedding_ref"``, ``jsonl.py``) is shown as old journals held it, with
    ``"embedding": [numbers]`` in its place, so no reader needs to know where the numbers are
    kept; the stores themselves read the binary file directly (``inline_embeddings=False``).
    A line whose embedding entry is missing (torn, damaged) is yielded as stored, with a warning.
    """
    path = Path(path)
    if not path.exists():
        return
    sidecar = None
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                log.warning("%s:%d: skipping torn final line (%d bytes)", path, lineno, len(raw))
                continue
            stripped = raw.strip()
            if not stripped:
                continue
            try:
                value = loads_json(stripped)
            # ValueError covers invalid UTF-8, invalid JSON and integer literals over Python's
            # digit limit; RecursionError, arrays/objects nested too deeply to decode
            except (ValueError, RecursionError) as exc:
                log.warning("%s:%d: skipping malformed line: %s", path, lineno, exc)
                continue
            if inline_embeddings and isinstance(value, dict) and isinstance(value.get(EMBEDDING_REF), str):
                if sidecar is None:  # read once, for the first line that needs it
                    sidecar = EmbeddingFile(sidecar_path(path))
                value = sidecar.inline(value, f"{path}:{lineno}")
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


# -- task embeddings beside a journal ---------------------------------------------------------

# Task embeddings in a binary file beside a store's JSONL journal (issue 45).
#
# Why: printed as decimals, a 4096-dimension embedding is ~80 KB of JSON, so 10,000 records were
# ~840 MB, took ~27 s to append and 6.4 s to reload. Here each embedding is written once, as raw
# little-endian floats, into ``<journal stem>.emb`` beside the journal (``outcome_log.jsonl`` +
# ``outcome_log.emb``), and the journal line names it by digest instead of holding the numbers::
#
#     {"embedding_ref": "<32 hex digits>", "mode": ..., ...}
#
# An entry is a 28-byte header and its payload::
#
#     magic  b"APE1"            4 bytes
#     dtype  b"f" | b"d"        1 byte (float32 | float64), then 3 zero bytes
#     dim    uint32             4 bytes, little-endian
#     digest blake2b-128        16 bytes, of the payload
#     payload                   dim little-endian floats of that dtype
#
# Precision: the payload is float32 whenever float32 holds the vector exactly, which is what an
# embedding endpoint returns (models compute in float32; JSON or base64 replies carry those
# values), and float64 otherwise. So nothing recorded changes: a reloaded embedding equals, bit for
# bit, the float64 vector that was appended, and the similarity rows (float32 already) and every
# ranking are unchanged; real runs pay 4 bytes a number, not 8.
#
# The digest is both the checksum and the entry's name: the journal line holds it, so a line is a
# function of its record alone (``OutcomeRecord.to_dict`` writes the same bytes wherever it runs,
# which ``runner/repair.py`` relies on to rebuild a lost line exactly). 128 bits, not a crc32,
# because a name must not collide: among 10,000 entries two crc32 values collide with ~1 %
# probability. An embedding already in the file is not written again (a task seen in several
# iterations has one entry), which also keeps a resumed run's file byte-identical to an
# uninterrupted one: the interrupted episode's entry is the one the rerun needs.
#
# Crash safety, as for the lines above: the entry is one ``write`` on an ``O_APPEND``
# descriptor, written (and fsynced) before the journal line that names it, so a crash leaves at
# worst a torn final entry that no line names, or a complete entry no line names yet. Opening for
# writing sets a torn tail aside into ``<stem>.emb.torn`` (kept, not destroyed) and cuts it off;
# readers never need that: an entry whose digest does not match, or that ends past the end of the
# file, is simply not indexed, and a line naming it is skipped with a logged warning, exactly like
# a torn JSON line. A damaged stretch in the middle of the file is skipped up to the next entry
# that verifies.
#
# Old journals hold the numbers inline (``"embedding": [...]``); every reader still takes them, and
# a file may mix both (old lines, then new ones after a resume with this kit).

EMBEDDING_SUFFIX = ".emb"
EMBEDDING_MAGIC = b"APE1"
EMBEDDING_HEADER = struct.Struct("<4sc3xI16s")
EMBEDDING_DTYPES = {b"f": np.dtype("<f4"), b"d": np.dtype("<f8")}
EMBEDDING_DIGEST_BYTES = 16


def sidecar_path(journal: str | os.PathLike[str]) -> Path:
    """The embedding file beside a journal: ``outcome_log.jsonl`` -> ``outcome_log.emb``."""
    return Path(journal).with_suffix(EMBEDDING_SUFFIX)


def encode_embedding(vec: Any) -> tuple[str, bytes]:
    """(reference, entry bytes) of one embedding: float32 payload when exact, float64 otherwise."""
    v = np.asarray(vec, dtype=np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError("empty embedding vector")
    with np.errstate(over="ignore"):  # beyond float32's range: inf, not equal, so float64
        v32 = v.astype("<f4")
    code = b"f" if np.array_equal(v32.astype(np.float64), v) else b"d"
    payload = v32.tobytes() if code == b"f" else v.astype("<f8").tobytes()
    digest = hashlib.blake2b(payload, digest_size=EMBEDDING_DIGEST_BYTES).digest()
    return digest.hex(), EMBEDDING_HEADER.pack(EMBEDDING_MAGIC, code, v.size, digest) + payload


def ref_of(vec: Any) -> str:
    """The ``embedding_ref`` a journal line holds for this embedding."""
    return encode_embedding(vec)[0]


class EmbeddingFile:
    """One ``.emb`` file: an index of its verified entries, and appends.

    ``EmbeddingFile(path)`` reads and verifies the whole file once (a missing file is empty);
    ``get(ref)`` then returns an embedding by the reference a journal line holds. Nothing is
    written until ``open_for_append`` (which sets a torn tail aside) and the first ``put`` that
    adds an entry, so a store opened for reading, or one that never gets an embedding, leaves
    no file behind.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.path = Path(path)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._fd = -1
        self._data = b""  # the file as read when opened; released by ``release``
        self._index: dict[str, tuple[int, bytes, int]] = {}  # ref -> (payload offset, dtype code, dim)
        self._size = 0  # bytes of the file (after any torn tail is cut)
        self._torn_at: int | None = None
        if self.path.exists():
            with open(self.path, "rb") as fh:
                self._data = fh.read()
            self._scan()
        self._size = len(self._data)

    def _scan(self) -> None:
        """Index every entry that verifies; a stretch that does not is warned about and skipped."""
        data, size = self._data, len(self._data)
        view = memoryview(data)
        pos, bad_from = 0, None
        while pos < size:
            entry = self._entry_at(view, pos)
            if entry is None:
                bad_from = pos if bad_from is None else bad_from
                nxt = data.find(EMBEDDING_MAGIC, pos + 1)
                if nxt < 0:
                    break
                pos = nxt
                continue
            if bad_from is not None:
                log.warning(
                    "%s: bytes %d-%d are no readable embedding entry (damaged): skipped", self.path, bad_from, pos
                )
                bad_from = None
            ref, code, dim, end = entry
            self._index.setdefault(ref, (pos + EMBEDDING_HEADER.size, code, dim))
            pos = end
        if bad_from is not None:
            self._torn_at = bad_from
            log.warning(
                "%s: its last %d bytes are a torn entry (a write cut short): ignored", self.path, size - bad_from
            )

    @staticmethod
    def _entry_at(view: memoryview, pos: int) -> tuple[str, bytes, int, int] | None:
        """(reference, dtype code, dimension, end offset) of a complete, verified entry at ``pos``; else None."""
        if len(view) - pos < EMBEDDING_HEADER.size:
            return None
        magic, code, dim, digest = EMBEDDING_HEADER.unpack_from(view, pos)
        if magic != EMBEDDING_MAGIC or code not in EMBEDDING_DTYPES or dim == 0:
            return None
        end = pos + EMBEDDING_HEADER.size + dim * EMBEDDING_DTYPES[code].itemsize
        if end > len(view):
            return None
        if (
            hashlib.blake2b(view[pos + EMBEDDING_HEADER.size : end], digest_size=EMBEDDING_DIGEST_BYTES).digest()
            != digest
        ):
            return None
        return digest.hex(), code, dim, end

    def __contains__(self, ref: object) -> bool:
        return ref in self._index

    def __len__(self) -> int:
        return len(self._index)

    def get(self, ref: str) -> np.ndarray | None:
        """The embedding ``ref`` names, as stored (float32 or float64; a fresh array), or None
        when the file holds no verified entry of that name (torn, damaged or missing)."""
        where = self._index.get(ref) if isinstance(ref, str) else None
        if where is None:
            return None
        off, code, dim = where
        dtype = EMBEDDING_DTYPES[code]
        if off + dim * dtype.itemsize <= len(self._data):
            return np.frombuffer(self._data, dtype=dtype, count=dim, offset=off).astype(dtype.newbyteorder("="))
        with open(self.path, "rb") as fh:  # an entry appended after the file was read
            fh.seek(off)
            return np.frombuffer(fh.read(dim * dtype.itemsize), dtype=dtype).astype(dtype.newbyteorder("="))

    def inline(self, record: dict[str, Any], where: str) -> dict[str, Any]:
        """``record`` with its ``embedding_ref`` replaced by ``"embedding": [numbers]`` in the same
        place, as old journals held it; unchanged (with a warning) when the entry is not there."""
        vec = self.get(record[EMBEDDING_REF])
        if vec is None:
            log.warning(
                "%s: its embedding %s is not in %s (torn, damaged or missing)",
                where,
                record[EMBEDDING_REF],
                self.path.name,
            )
            return record
        numbers = vec.astype(np.float64).tolist()
        return {
            ("embedding" if k == EMBEDDING_REF else k): (numbers if k == EMBEDDING_REF else v)
            for k, v in record.items()
        }

    def release(self) -> None:
        """Drop the bytes read at open (the index stays; ``get`` then reads from the file)."""
        self._data = b""

    # -- writing ---------------------------------------------------------------------------

    def open_for_append(self) -> None:
        """Set a torn tail aside into ``<name>.torn`` and cut it off, so the next entry starts clean."""
        if self._torn_at is None:
            return
        with open(self.path, "r+b") as fh:
            fh.seek(self._torn_at)
            fragment = fh.read()
            aside = self.path.with_name(self.path.name + TORN_SUFFIX)
            with open(aside, "ab") as out:
                out.write(fragment)
                out.flush()
                os.fsync(out.fileno())
            fh.truncate(self._torn_at)
            fh.flush()
            os.fsync(fh.fileno())
        log.warning("%s: set its torn last entry (%d bytes) aside in %s", self.path, len(fragment), aside.name)
        self._size, self._torn_at = self._torn_at, None
        self._data = self._data[: self._size]

    def put(self, vec: Any) -> str:
        """Write ``vec`` unless an equal entry is already there; returns its reference."""
        ref, entry = encode_embedding(vec)
        self.put_entry(ref, entry)
        return ref

    def put_entry(self, ref: str, entry: bytes) -> None:
        """``put`` for an entry already encoded (``encode_embedding``): the caller needed its reference first."""
        with self._lock:
            if ref in self._index:
                return
            if self._torn_at is not None:
                raise RuntimeError(f"{self.path}: call open_for_append() before writing (the file has a torn tail)")
            if self._fd < 0:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            written = os.write(self._fd, entry)
            if written != len(entry):  # pragma: no cover - only on a full disk
                raise OSError(f"short write to {self.path}: {written} of {len(entry)} bytes")
            if self._fsync:
                os.fsync(self._fd)
            code = entry[4:5]
            dim = (len(entry) - EMBEDDING_HEADER.size) // EMBEDDING_DTYPES[code].itemsize
            self._index[ref] = (self._size + EMBEDDING_HEADER.size, code, dim)
            self._size += len(entry)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass
