"""Accounting of every LLM and embedding call: counts, tokens, latency, retries, tags.

Why: the paper's cost claims (how many execution vs. synthesis calls a configuration makes)
must be checked from records, not estimated, and a resumed run must keep counting where the
interrupted one stopped. The ledger is append-only JSONL, one line per call.

PRIVACY RULE: the ledger never stores prompt or response text, only counts, token numbers,
latency, retry counts, flags and short caller tags. Synthesized guidance must never reach disk
through the ledger; tag values are therefore limited to short scalars, and error strings are
truncated.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import JsonlWriter, read_jsonl

#: Purposes the kit itself uses; other strings ("reflection", "judge", ...) are allowed.
KNOWN_PURPOSES: tuple[str, ...] = ("execution", "synthesis", "embedding")

#: the per-call reasoning counts (``CallRecord``), absent from a line when zero
REASONING_FIELDS = ("reasoning_tokens", "reasoning_chars")

#: Longest string a tag value may be: enough for a task key, too short for a prompt.
MAX_TAG_CHARS = 200
#: Error strings are cut to this length so a server that echoes input cannot leak it in bulk.
MAX_ERROR_CHARS = 300

# Tags describe the *caller's* context (phase, task, iteration), so they live in a context
# variable: each thread / asyncio task sees only the tags it set. New threads start with no
# tags; pass ``tags=`` explicitly or run the worker under ``contextvars.copy_context()``.
_CONTEXT_TAGS: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("ledger_tags", default={})  # noqa: B039 - never mutated: set() replaces it


@dataclass
class CallRecord:
    """One call to a model endpoint, successful or not, served from cache or not."""

    call_id: int
    purpose: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False
    retries: int = 0
    ok: bool = True
    error: str | None = None
    tags: dict[str, Any] = field(default_factory=dict)
    timestamp: float = 0.0
    #: of ``completion_tokens``, those the server reports as reasoning; and the reasoning's length in
    #: characters (its text is never kept). Written only when non-zero, so other ledgers keep their lines.
    reasoning_tokens: int = 0
    reasoning_chars: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        # field by field, not ``asdict``: its recursive deep copy was a sixth of the client's own CPU per call
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["tags"] = dict(self.tags)
        for key in REASONING_FIELDS:
            if not out[key]:
                del out[key]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CallRecord:
        return cls(
            call_id=int(d["call_id"]),
            purpose=str(d["purpose"]),
            model=str(d.get("model", "")),
            prompt_tokens=int(d.get("prompt_tokens", 0)),
            completion_tokens=int(d.get("completion_tokens", 0)),
            latency_s=float(d.get("latency_s", 0.0)),
            cached=bool(d.get("cached", False)),
            retries=int(d.get("retries", 0)),
            ok=bool(d.get("ok", True)),
            error=None if d.get("error") is None else str(d["error"]),
            tags=dict(d.get("tags") or {}),
            timestamp=float(d.get("timestamp", 0.0)),
            reasoning_tokens=int(d.get("reasoning_tokens", 0)),
            reasoning_chars=int(d.get("reasoning_chars", 0)),
        )


def _check_tags(tags: dict[str, Any]) -> dict[str, Any]:
    """Refuse anything that could smuggle text to disk: tags are short scalars only."""
    for key, value in tags.items():
        if not isinstance(key, str):
            raise ValueError(f"ledger tag names must be strings, got {key!r}")
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise ValueError(f"ledger tag {key!r} must be a scalar, got {type(value).__name__}")
        if isinstance(value, str) and len(value) > MAX_TAG_CHARS:
            raise ValueError(
                f"ledger tag {key!r} is {len(value)} chars (max {MAX_TAG_CHARS}); "
                "the ledger must never hold prompt or response text"
            )
    return tags


def current_tags() -> dict[str, Any]:
    """Tags set by enclosing ``Ledger.tag`` blocks in this thread / task."""
    return dict(_CONTEXT_TAGS.get())


class Ledger:
    """Thread-safe call ledger, in memory and (with ``path``) appended to a JSONL file.

    Opening an existing file loads its records, so counts cover the whole (resumed) run and
    ``call_id`` numbering continues after the highest id found. ``fsync`` is off by default:
    each line is one ``write`` to the kernel, so a crashed process loses nothing; only a power
    loss could drop the last lines, and the ledger is accounting, not results.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, fsync: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._records: list[CallRecord] = []
        if self.path is not None:
            for line in read_jsonl(self.path):
                try:
                    self._records.append(CallRecord.from_dict(line.value))
                except (KeyError, TypeError, ValueError, OverflowError):
                    continue  # a foreign or damaged line; read_jsonl already skips torn ones
        self._next_id = max((r.call_id for r in self._records), default=0) + 1
        self._opened_with = len(self._records)  # what a resumed run had before this invocation
        self._writer = JsonlWriter(self.path, fsync=fsync) if self.path is not None else None

    def record(
        self,
        purpose: str,
        model: str,
        *,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        latency_s: float = 0.0,
        cached: bool = False,
        retries: int = 0,
        ok: bool = True,
        error: str | None = None,
        tags: dict[str, Any] | None = None,
        reasoning_tokens: int = 0,
        reasoning_chars: int = 0,
    ) -> CallRecord:
        """Append one call; context tags are merged under explicit ``tags``."""
        merged = _check_tags({**_CONTEXT_TAGS.get(), **(tags or {})})
        if error is not None and len(error) > MAX_ERROR_CHARS:
            error = error[: MAX_ERROR_CHARS - 3] + "..."
        with self._lock:
            rec = CallRecord(
                call_id=self._next_id,
                purpose=str(purpose),
                model=str(model),
                prompt_tokens=int(prompt_tokens),
                completion_tokens=int(completion_tokens),
                latency_s=float(latency_s),
                cached=bool(cached),
                retries=int(retries),
                ok=bool(ok),
                error=error,
                tags=merged,
                timestamp=time.time(),
                reasoning_tokens=int(reasoning_tokens),
                reasoning_chars=int(reasoning_chars),
            )
            self._next_id += 1
            self._records.append(rec)
            if self._writer is not None:
                self._writer.append(rec.to_dict())
        return rec

    def since_open(self) -> tuple[int, int, float | None]:
        """(calls, calls answered from the response cache, time of the last call) recorded since this
        ledger was opened: one invocation's share of a resumed run, for progress and closing lines."""
        with self._lock:
            mine = self._records[self._opened_with :]
            return len(mine), sum(r.cached for r in mine), (mine[-1].timestamp if mine else None)

    @property
    def records(self) -> list[CallRecord]:
        with self._lock:
            return list(self._records)

    def count(self, purpose: str | None = None, **tag_filters: Any) -> int:
        """Calls with this purpose (any if None) whose tags equal every filter given."""
        return sum(
            1
            for r in self.records
            if (purpose is None or r.purpose == purpose)
            and all(k in r.tags and r.tags[k] == v for k, v in tag_filters.items())
        )

    def totals(self) -> dict[str, dict[str, int | float]]:
        """Per purpose: calls, cached, failed, retries, tokens (cached calls count their tokens
        too, so a replayed run reports the same totals; ``uncached_tokens`` is what was paid)."""
        out: dict[str, dict[str, int | float]] = {}
        for r in self.records:
            t = out.setdefault(
                r.purpose,
                {
                    "calls": 0,
                    "cached": 0,
                    "failed": 0,
                    "retries": 0,
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                    "total_tokens": 0,
                    "uncached_tokens": 0,
                    "reasoning_tokens": 0,
                    "latency_s": 0.0,
                },
            )
            t["calls"] += 1
            t["cached"] += int(r.cached)
            t["failed"] += int(not r.ok)
            t["retries"] += r.retries
            t["prompt_tokens"] += r.prompt_tokens
            t["completion_tokens"] += r.completion_tokens
            t["total_tokens"] += r.total_tokens
            t["uncached_tokens"] += 0 if r.cached else r.total_tokens
            t["reasoning_tokens"] += r.reasoning_tokens
            t["latency_s"] += r.latency_s
        return out

    @contextmanager
    def tag(self, **tags: Any) -> Iterator[dict[str, Any]]:
        """Add tags to every call recorded inside the block, in this thread / task only."""
        merged = _check_tags({**_CONTEXT_TAGS.get(), **tags})
        token = _CONTEXT_TAGS.set(merged)
        try:
            yield dict(merged)
        finally:
            _CONTEXT_TAGS.reset(token)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)
