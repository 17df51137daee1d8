"""On-disk, content-addressed cache of model responses.

Why: an interrupted run resumes without paying twice for calls it already made, and a finished run replays
deterministically from its cache. The key is the SHA-256 of the whole request's canonical JSON (kind, model,
messages or input, every decoding parameter, the seed), and each server has its own folder (``for_server``,
with a ``server.identity`` file), so a second server or new weights behind the same model name never get the
first one's replies. Each entry is one JSON file written atomically, so a crash leaves the old entry or the new
one; a corrupt entry is a miss with a warning. The cache holds reply text (unlike the call ledger): keep it with
the runs it serves. Identity, layout and where each command puts it: docs/protocol.md, "The response cache".
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.paths import safe_file_name

log = logging.getLogger(__name__)

_KEY = re.compile(r"^[0-9a-f]{64}$")
#: the file in a server's cache folder that says which server it holds replies of
SERVER_FILE = "server.identity"  # JSON, named so that no glob for entries (*.json) counts it


def cache_folder(cache_dir: str | Path, model: str) -> Path:
    """Where ``model``'s replies are filed under a response cache folder ``cache_dir`` (the model's name made a
    folder name): a run, a study and a replay all find a model's replies there."""
    return Path(cache_dir) / safe_file_name(model)


def model_cache(cache_dir: str | Path | None, model: str) -> ResponseCache | None:
    """The response cache of ``model``'s replies under ``cache_dir``; None when there is no ``cache_dir`` (the
    run keeps no cache). Every client of a run or study gets its cache here, one folder per model."""
    return ResponseCache(cache_folder(cache_dir, model)) if cache_dir else None


def canonical_json(obj: Any) -> str:
    """One spelling per value: sorted keys, no whitespace, strict JSON (no NaN)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def cache_key(request: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of the canonical JSON of a request description."""
    if "kind" not in request:
        raise ValueError("a cache request needs a 'kind' ('chat' or 'embedding')")
    return hashlib.sha256(canonical_json(dict(request)).encode("utf-8")).hexdigest()


def server_digest(server: Mapping[str, Any]) -> str:
    """The folder name of one server's replies: 16 hex digits of its identity's canonical JSON."""
    return hashlib.sha256(canonical_json(dict(server)).encode("utf-8")).hexdigest()[:16]


class ResponseCache:
    """Content-addressed JSON store; ``enabled=False`` turns every call into a no-op miss. ``server``: the
    identity of the one server whose replies this folder holds (``for_server``), None for a root."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        enabled: bool = True,
        server: Mapping[str, Any] | None = None,
        also_read: Sequence[str | os.PathLike[str]] = (),
    ) -> None:
        self.root = Path(root)
        self.enabled = enabled
        self.server = None if server is None else dict(server)
        #: folders read after ``root`` and never written: a replay of a run resumed against another server
        self.also_read = [Path(p) for p in also_read]
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def for_server(self, server: Mapping[str, Any]) -> ResponseCache:
        """This cache's folder for the server ``server`` identifies (``root/<server_digest>/``), with the
        identity written beside its entries so a person can tell the folders apart. A cache already
        scoped to a server (a replay that names the recorded one) is returned as it is."""
        if self.server is not None:
            return self
        scoped = ResponseCache(self.root / server_digest(server), self.enabled, server)
        marker = scoped.root / SERVER_FILE
        if self.enabled and not marker.exists():
            atomic_write_json(marker, dict(server))
        return scoped

    key = staticmethod(cache_key)

    def path_for(self, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"not a cache key (64 lowercase hex digits): {key!r}")
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        value: Any = None
        for folder in (self.root, *self.also_read):
            value = self._read(folder / self.path_for(key).relative_to(self.root))
            if value is not None:
                break
        with self._lock:
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
        return value

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        value: Any = None
        try:
            with open(path, encoding="utf-8") as fh:
                value = json.load(fh)
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            log.warning("response cache: corrupt entry %s (%s); treating as a miss", path, exc)
        if value is not None and not isinstance(value, dict):
            log.warning("response cache: entry %s is not a JSON object; treating as a miss", path)
            value = None
        return value

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        atomic_write_json(self.path_for(key), dict(value))

    def __contains__(self, key: str) -> bool:
        return self.enabled and self.path_for(key).exists()
