"""What every store shares: an append-only JSONL journal, a frozen flag, and a read-only mode.

The trajectory memory, the outcome log and the abstraction store all keep their state as one
append-only JSONL file (or in memory only, with no file), reload it in order when opened, and
refuse writes in two situations:

* frozen: held-out evaluation froze the method's stores (``freeze`` / ``unfreeze``), so that
  evaluation can retrieve but never learn;
* read-only: an audit opened an existing file to read it. The file must exist, and it is never
  created, repaired or appended to (opening for writing would cut a torn last line).

Subclasses load their file with ``_journal_lines()`` in ``__init__`` and then call
``_open_journal()``; every write goes through ``_journal_append``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from antipersist_lib.errors import FrozenStateError
from antipersist_lib.jsonl import JsonlLine, JsonlWriter, read_jsonl


class JournaledStore:
    """Base of the stores. ``what`` names the store in error messages."""

    what: str = "store"

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

    def _journal_lines(self) -> Iterator[JsonlLine]:
        """The stored lines in order (none for an in-memory store); torn or invalid JSON is skipped."""
        if self.path is None:
            return iter(())
        return read_jsonl(self.path)

    def _open_journal(self) -> None:
        """Open the file for appending after loading it (repairs a torn last line); not when read-only."""
        if self.path is not None and not self.read_only:
            self._writer = JsonlWriter(self.path, fsync=self._fsync)

    def _check_writable(self) -> None:
        if self._frozen:
            raise FrozenStateError(f"the {self.what} is frozen (held-out evaluation may not write it)")
        if self.read_only:
            raise FrozenStateError(f"the {self.what} {self.path} was opened read-only (for an audit)")

    def _journal_append(self, record: dict[str, Any]) -> None:
        """Write one record (callers check ``_check_writable`` before changing anything in memory)."""
        if self._writer is not None:
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
