"""What every store shares: an append-only JSONL journal, a frozen flag, and a read-only mode.

The trajectory memory, the outcome log and the abstraction store keep their state as one
append-only JSONL file (or in memory only) and reload it in order. Writes are refused when the store
is frozen (held-out evaluation) or opened read-only (an audit; the file must exist and is never
created, repaired or appended to). docs/protocol.md, "The stores", explains both states.

Subclasses load their file with ``_journal_lines()`` in ``__init__``, then call ``_open_journal()``;
every write goes through ``_journal_append``. Stores of task embeddings (``embeddings = True``) keep
the numbers in a binary file beside the journal (``jsonl.py``), named by a line's
``"embedding_ref"`` and found with ``_stored_embedding``; ``_journal_append`` writes the embedding
before the line naming it. Old journals with inline numbers load as before (docs/protocol.md,
"Store files").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from antipersist_lib.errors import FrozenStateError
from antipersist_lib.jsonl import EMBEDDING_REF, EmbeddingFile, JsonlLine, JsonlWriter, read_jsonl, sidecar_path


class JournaledStore:
    """Base of the stores. ``what`` names the store in error messages."""

    what: str = "store"
    #: whether the store's records carry task embeddings, kept in ``<journal stem>.emb``
    embeddings: bool = False

    def __init__(self, path: str | os.PathLike[str] | None, *, fsync: bool = True, read_only: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self.read_only = read_only
        if read_only and (self.path is None or not self.path.is_file()):
            raise FileNotFoundError(
                f"no {self.what} at {self.path} (read-only mode reads an existing file; it never creates one)"
            )
        self._fsync = fsync
        self._frozen = False
        self._writer: JsonlWriter | None = None
        self._embedding_file: EmbeddingFile | None = None
        if self.embeddings and self.path is not None:
            self._embedding_file = EmbeddingFile(sidecar_path(self.path), fsync=fsync)

    def _journal_lines(self) -> Iterator[JsonlLine]:
        """The stored lines in order (none for an in-memory store); torn or invalid JSON is skipped.
        Lines keep their ``embedding_ref`` (``_stored_embedding`` reads it without a detour via lists)."""
        if self.path is None:
            return iter(())
        return read_jsonl(self.path, inline_embeddings=False)

    def _stored_embedding(self, value: Any) -> np.ndarray | None:
        """The embedding a loaded line names by ``embedding_ref`` (float32 or float64, as stored); None
        when the line holds none that way. Raises ValueError when the entry is not in the file (torn,
        damaged or missing), so the line is skipped and warned about like any invalid record."""
        if not isinstance(value, dict) or EMBEDDING_REF not in value:
            return None
        ref = value[EMBEDDING_REF]
        vec = None if self._embedding_file is None else self._embedding_file.get(ref)
        if vec is None:
            where = "no embedding file" if self.path is None else sidecar_path(self.path).name
            raise ValueError(f"field {EMBEDDING_REF!r}: embedding {ref!r} is not in {where} (torn, damaged or missing)")
        return vec

    def _open_journal(self) -> None:
        """Open the file for appending after loading it (repairs a torn last line and sets a torn
        embedding entry aside); not when read-only."""
        if self._embedding_file is not None:
            self._embedding_file.release()  # loaded: the bytes read at open are no longer needed
        if self.path is not None and not self.read_only:
            self._writer = JsonlWriter(self.path, fsync=self._fsync)
            if self._embedding_file is not None:
                self._embedding_file.open_for_append()

    def _check_writable(self) -> None:
        if self._frozen:
            raise FrozenStateError(f"the {self.what} is frozen (held-out evaluation may not write it)")
        if self.read_only:
            raise FrozenStateError(f"the {self.what} {self.path} was opened read-only (for an audit)")

    def _journal_append(self, record: dict[str, Any], embedding: tuple[str, bytes] | None = None) -> None:
        """Write one record (callers check ``_check_writable`` before changing anything in memory);
        ``embedding`` (``jsonl.encode_embedding``'s reference and entry) goes into the embedding file
        first, so a line never names a missing entry."""
        if self._writer is not None:
            if embedding is not None and self._embedding_file is not None:
                ref, entry = embedding
                if record.get(EMBEDDING_REF) != ref:  # the line must name exactly what is written
                    raise ValueError(f"record names embedding {record.get(EMBEDDING_REF)!r}, the entry is {ref!r}")
                self._embedding_file.put_entry(ref, entry)
            self._writer.append(record)

    def freeze(self) -> None:
        self._frozen = True

    def unfreeze(self) -> None:
        self._frozen = False

    @property
    def frozen(self) -> bool:
        return self._frozen

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._embedding_file is not None:
            self._embedding_file.close()
