"""On-disk, content-addressed cache of model responses.

Why: an interrupted run resumes without paying twice for calls it already made, and a finished
run replays deterministically from its cache. The key is the SHA-256 of the canonical JSON of
the whole request: kind ("chat" | "embedding"), model, messages or input text, and every
decoding parameter (temperature, max_tokens, top_p, stop, seed, ...). The run seed is part of
the key, so runs with different seeds never share sampled answers.

Layout: one small JSON file per key at ``root/<key[:2]>/<key>.json``, written atomically, so a
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import atomic_write_json

log = logging.getLogger(__name__)

_KEY = re.compile(r"^[0-9a-f]{64}$")


def canonical_json(obj: Any) -> str:
    """One spelling per value: sorted keys, no whitespace, strict JSON (no NaN)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def cache_key(request: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of the canonical JSON of a request description."""
    if "kind" not in request:
        raise ValueError("a cache request needs a 'kind' ('chat' or 'embedding')")
    return hashlib.sha256(canonical_json(dict(request)).encode("utf-8")).hexdigest()


class ResponseCache:
    """Content-addressed JSON store; ``enabled=False`` turns every call into a no-op miss."""

    def __init__(self, root: str | os.PathLike[str], enabled: bool = True) -> None:
        self.root = Path(root)
        self.enabled = enabled
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    key = staticmethod(cache_key)

    def path_for(self, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"not a cache key (64 lowercase hex digits): {key!r}")
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        path = self.path_for(key)
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
        with self._lock:
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
        return value

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        if not self.enabled:
            return
        atomic_write_json(self.path_for(key), dict(value))

    def __contains__(self, key: str) -> bool:
        return self.enabled and self.path_for(key).exists()
