"""Reading answers out of model replies: JSON values, fenced blocks, code. The kit's one home for it.

Models wrap what they were asked for in prose and Markdown fences, so each reader here looks in more than one
place. ``decode_json_at`` is the one decoder of a JSON value inside a longer text (``json_values`` and
``json_value`` build on it; a value nested too deep counts as no value). ``fenced_blocks`` reads fences in one of
``FENCE_STYLES``, kept apart because each caller's runs were recorded with its own reading. ``extract_json``
returns the first object or array of the wanted type (whole reply, then fenced blocks, then inline) or raises
``ReplyParseError`` naming what is missing; each caller applies its documented fallback (a consolidator keeps
its bank and logs the failure, so one bad reply never aborts a stream; the ARC stream's are in
``arc/decisions.py``). ``extract_code`` takes the first closed Python fence (the ARC grader), ``code_or_reply``
the lenient reading of AppWorld's shell; ``excerpt`` / ``snippet`` quote a bad reply. Imports only ``errors``,
so every layer may use it (docs/layout.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from antipersist_lib.errors import ReplyParseError

_DECODER = json.JSONDecoder()
_OPENERS = {dict: "{", list: "["}

# -- JSON values --------------------------------------------------------------------------------------------


def decode_json_at(text: str, start: int = 0) -> tuple[Any, int] | None:
    """(value, end) of the JSON value that begins exactly at ``text[start]``, text after it allowed; None when
    none decodes there (invalid JSON, leading whitespace, or nesting too deep for the decoder)."""
    try:
        return _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return None


def json_values(text: str, openers: str = "{[", *, nested: bool = True) -> Iterator[tuple[Any, int, int]]:
    """Every JSON value that decodes from a character of ``openers``, in text order: (value, start, end).

    ``nested=True`` tries every opening character, those inside an earlier value too; ``nested=False``
    goes on after the end of each value it yields (top-level values only)."""
    if not openers:
        return
    opener = re.compile("[" + re.escape(openers) + "]")
    pos = 0
    while (match := opener.search(text, pos)) is not None:
        start = match.start()
        decoded = decode_json_at(text, start)
        if decoded is None:
            pos = start + 1
            continue
        value, end = decoded
        yield value, start, end
        pos = start + 1 if nested else end


def json_value(text: str) -> Any:
    """``text`` decoded as one JSON document (JSON whitespace around it allowed); None when it is not one
    (invalid, or nested too deep). A document ``null`` also gives None: callers want objects or arrays."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


# -- fenced blocks ------------------------------------------------------------------------------------------

#: the three readings of a fenced block: (pattern with groups tag and body, whether the body is stripped)
FENCE_STYLES: dict[str, tuple[re.Pattern[str], bool]] = {
    # ```json, ```JSON or a bare ```, then a line break; other tags are not blocks (the consolidators)
    "json": (re.compile(r"```(json|JSON)?\s*\n(.*?)```", re.DOTALL), True),
    # any tag, the rest of the opening line skipped, the body as written (the ARC stream's parsers)
    "line": (re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[^\n]*\n(.*?)```", re.DOTALL), False),
    # any tag, the line break optional, so ```[...]``` on one line is a block too (AutoRefine's evolver)
    "inline": (re.compile(r"```([A-Za-z0-9_-]*)[ \t]*\n?(.*?)```", re.DOTALL), True),
    # as "line", with + and . in a tag (c++, python3.11), the body as written (AppWorld's code reader)
    "code": (re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)```", re.DOTALL), False),
}


def fenced_blocks(text: str, style: str = "line") -> Iterator[tuple[str, str]]:
    """(tag, body) of each closed Markdown-fenced block of ``text`` under the reading ``style``, in order."""
    try:
        pattern, strip = FENCE_STYLES[style]
    except KeyError:
        raise ValueError(f"fence style must be one of {sorted(FENCE_STYLES)}, got {style!r}") from None
    for match in pattern.finditer(text):
        body = match.group(2)
        yield match.group(1) or "", body.strip() if strip else body


# -- the first JSON object or array of a reply --------------------------------------------------------------


def extract_json(
    text: str,
    want: type | tuple[type, ...] = (dict, list),
    *,
    whole: bool = True,
    fences: str = "json",
    empty_error: bool = True,
    quote_reply: bool = False,
) -> Any:
    """The first JSON value of type ``want`` (``dict``, ``list`` or both) in a model reply.

    Looked for in order: the whole reply (``whole``), each fenced block (``fences``: a ``FENCE_STYLES``
    reading), then the first value that decodes inline from a ``{`` or ``[``. Raises ``ReplyParseError``
    when there is none: ``"no JSON dict in the reply"``, or with ``quote_reply`` in JSON's words and with the
    start of the reply, ``"no JSON object found in the reply: '...'"``. ``empty_error``: a blank or non-text
    reply raises ``ReplyParseError("empty reply")``; without it a non-text reply is a TypeError and a blank
    one is searched like any other.
    """
    kinds = want if isinstance(want, tuple) else (want,)
    if not kinds or any(k not in _OPENERS for k in kinds):
        raise ValueError(f"want must be dict, list or both, got {want!r}")
    if not isinstance(text, str):
        if empty_error:
            raise ReplyParseError("empty reply")
        raise TypeError(f"reply must be a str, got {type(text).__name__}")
    if empty_error and not text.strip():
        raise ReplyParseError("empty reply")
    if whole and isinstance(value := json_value(text.strip()), kinds):
        return value
    for _tag, body in fenced_blocks(text, fences):
        if isinstance(value := json_value(body), kinds):
            return value
    for value, _start, _end in json_values(text, "".join(_OPENERS[k] for k in kinds)):
        if isinstance(value, kinds):
            return value
    if quote_reply:
        what = " or ".join("object" if k is dict else "array" for k in kinds)
        raise ReplyParseError(f"no JSON {what} found in the reply: {snippet(text)!r}")
    raise ReplyParseError(f"no JSON {' or '.join(k.__name__ for k in kinds)} in the reply")


# -- code ---------------------------------------------------------------------------------------------------

_CODE_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,})[ \t]*([^`\s]*)[^`]*$")
_PYTHON_INFO = {"", "python", "py", "python3"}


def extract_code(reply: str) -> str | None:
    """The first closed Markdown-fenced Python block (```python, ```py, ```python3 or bare ```); else None.

    Blocks tagged with another language (```text, ```json) are skipped whole, so a fence inside them is not
    mistaken for code. An unclosed fence (a reply cut off mid-block) counts as no block.
    """
    if not isinstance(reply, str):
        raise TypeError(f"reply must be a str, got {type(reply).__name__}")
    lines = reply.splitlines()
    i = 0
    while i < len(lines):
        match = _CODE_FENCE_OPEN.match(lines[i])
        if match is None:
            i += 1
            continue
        ticks, info = len(match.group(1)), match.group(2).lower()
        close = re.compile(r"^ {0,3}`{" + str(ticks) + r",}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), None)
        if end is None:
            return None
        if info in _PYTHON_INFO:
            body = lines[i + 1 : end]
            return "\n".join(body) + "\n" if body else ""
        i = end + 1
    return None


_OPEN_CODE_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*)\Z", re.DOTALL)
_LENIENT_PYTHON = {"python", "py", "python3", "ipython", ""}


def code_or_reply(text: str) -> str:
    """The code of a reply for an engine that runs whatever it is given (AppWorld's shell), never None.

    The first fenced block tagged python/py/ipython (or untagged) wins, else the first block in any other
    language; a reply cut off inside an opening Python fence gives everything after it; an unfenced reply is
    the code as it is (one wrapped in single backticks is unwrapped). Blank lines around it are removed,
    indentation kept. The ARC grader's ``extract_code`` is strict instead: a reply without a closed Python
    block is not graded.
    """
    if not text:
        return ""
    s = text.replace("\r\n", "\n").replace("\r", "\n")
    blocks = list(fenced_blocks(s, "code"))
    for tag, body in blocks:
        if tag.lower() in _LENIENT_PYTHON:
            return body.strip("\n").rstrip()
    if blocks:
        return blocks[0][1].strip("\n").rstrip()
    cut_off = _OPEN_CODE_FENCE.search(s)
    if cut_off is not None and cut_off.group(1).lower() in _LENIENT_PYTHON:
        return cut_off.group(2).strip("\n").rstrip()
    stripped = s.strip()
    if len(stripped) >= 2 and stripped.startswith("`") and stripped.endswith("`") and "\n" not in stripped:
        return stripped.strip("`").strip()
    return s.strip("\n").rstrip()


# -- values and excerpts ------------------------------------------------------------------------------------


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
    """The start of a bad reply as written (``n`` characters, then "..."), kept in a history to be read later."""
    flat = str(text or "")
    return flat if len(flat) <= n else flat[:n] + "..."


def snippet(text: str, limit: int = 120) -> str:
    """The start of a reply on one line (whitespace runs become one space), ``limit`` characters at most with
    the "..." that marks a cut: for error messages."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
