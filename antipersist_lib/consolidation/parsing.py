"""Reading structured answers out of model replies.

Models wrap JSON in prose or code fences, so the parser tries the whole reply, then each fenced
block, then the first JSON value that decodes from any ``{`` or ``[``. A reply with no usable
answer raises ``ReplyError``; the consolidators catch it, leave the bank unchanged and log the
failure in the bank's history (the documented fallback), so one bad reply never aborts a stream.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)```", re.DOTALL)


class ReplyError(ValueError):
    """A model reply that holds no answer in the requested format."""


def extract_json(text: str, want: type | tuple[type, ...] = (dict, list)) -> Any:
    """The first JSON value of type ``want`` in ``text``."""
    if not isinstance(text, str) or not text.strip():
        raise ReplyError("empty reply")
    candidates = [text.strip(), *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for cand in candidates:
        try:
            value = json.loads(cand)
        except ValueError:
            continue
        if isinstance(value, want):
            return value
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch not in "{[":
            continue
        try:
            value, _ = decoder.raw_decode(text, i)
        except ValueError:
            continue
        if isinstance(value, want):
            return value
    names = want.__name__ if isinstance(want, type) else " or ".join(t.__name__ for t in want)
    raise ReplyError(f"no JSON {names} in the reply")


def as_int_list(value: Any) -> list[int]:
    """Integers from a list (or a single value) of numbers or numeric strings; others dropped."""
    items = value if isinstance(value, list) else [value]
    out = []
    for v in items:
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            out.append(v)
        elif isinstance(v, str) and v.strip().lstrip("#").isdigit():
            out.append(int(v.strip().lstrip("#")))
    return out


def excerpt(text: str, n: int = 300) -> str:
    """The start of a bad reply, kept in the history so the failure can be read later."""
    flat = str(text or "")
    return flat if len(flat) <= n else flat[:n] + "..."
