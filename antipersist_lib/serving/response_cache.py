"""On-disk, content-addressed cache of model responses.

Why: an interrupted run resumes without paying twice for calls it already made, and a finished
run replays deterministically from its cache. The key is the SHA-256 of the canonical JSON of
the whole request: kind ("chat" | "embedding"), model, messages or input text, and every
decoding parameter (temperature, max_tokens, top_p, stop, seed, ...). The run seed is part of
the key, so runs with different seeds never share sampled answers.

The server is part of the key too: the clients (``serving.llm``) never use a cache folder as it is
but its folder for one server, ``root/<server digest>/`` (``for_server``), whose ``server.identity`` (JSON) says
what answered there (the base URL and what the server reports of the model it serves, or, for the
kit's embedded servers, the model file's sha256). A second server behind the same model name, or new
weights behind an unchanged name that the server reports, gets a folder of its own, never the first
one's replies.

Layout: one small JSON file per key at ``<folder>/<key[:2]>/<key>.json``, written atomically, so a
crash leaves either the old entry or the new one. A corrupt entry is a miss (with a warning)
and is overwritten by the next ``put``. Unlike the call ledger, the cache does hold response
text: that is its whole purpose, so keep it inside the run directory.
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

log = logging.getLogger(__name__)

_KEY = re.compile(r"^[0-9a-f]{64}$")
#: the file in a server's cache folder that says which server it holds replies of
SERVER_FILE = "server.identity"  # JSON, named so that no glob for entries (*.json) counts it


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
