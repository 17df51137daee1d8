"""ARC-AGI Stream replies read into typed decisions: the parsers for the prompts of ``arc/prompts.py`` (paper App. B).

Parsers raise ``ReplyParseError`` naming what is wrong; the ``*_or_fallback`` helpers (used by the controller)
apply the documented fallbacks instead: an unreadable decision becomes Retain, an unreadable extraction leaves the
strategy memory unchanged, an unreadable selection shows no strategy. The judge's replies are read in ``judge.py``,
shared with the consolidation study.

The full fallback rules are in docs/faulty-memories.md, "The ARC code's own readings, module by module" (Reading
replies), and "Prompt variants" for the flat extraction and strategy selection parsers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from antipersist_lib.arc.prompts import EXTRACTION_SCHEMAS
from antipersist_lib.errors import ReplyParseError
from antipersist_lib.replies import extract_json, snippet

EXTRACTION_KINDS = ("retain", "new", "merge")


def find_json(reply: str, kind: type) -> Any:
    """The first JSON value of type ``kind`` (dict or list) in a reply: fenced blocks first, then inline.
    ``ReplyParseError`` quotes the start of the reply; a reply that is not text is a TypeError."""
    return extract_json(reply, kind, whole=False, fences="line", empty_error=False, quote_reply=True)


@dataclass(frozen=True)
class Decision:
    """A memory action. ``source``: model (parsed), fallback (unparseable -> retain), forced (Force),
    skipped (no call: the buffer is empty, or ``decide_on: passing`` and no solve of the step passed)."""

    action: str
    ids: tuple[str, ...] = ()
    source: str = "model"
    reason: str = ""
    error: str | None = None
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "ids": list(self.ids),
            "source": self.source,
            "reason": self.reason,
            "error": self.error,
            "warnings": list(self.warnings),
        }


_ACTION_ALIASES = {
    "retain": "retain",
    "keep": "retain",
    "delete": "delete",
    "remove": "delete",
    "consolidate": "consolidate",
    "strategy_extraction": "consolidate",
    "extract": "consolidate",
}


def _resolve_ids(raw: Any, known: Sequence[str]) -> tuple[list[str], list[str]]:
    """Known ids named by ``raw`` (ids, or ints as 1-based positions in ``known``) and warnings."""
    if raw is None:
        return [], []
    if isinstance(raw, str):
        raw = [part for part in re.split(r"[\s,]+", raw) if part]
    if not isinstance(raw, list):
        return [], [f"ids must be a list, got {type(raw).__name__}"]
    by_name = {k.lower(): k for k in known}
    found: list[str] = []
    warnings: list[str] = []
    for item in raw:
        if isinstance(item, bool):
            warnings.append(f"ignored id {item!r}")
            continue
        if isinstance(item, int) or (isinstance(item, str) and item.strip().isdigit()):
            pos = int(item)
            if 1 <= pos <= len(known):
                found.append(known[pos - 1])
            else:
                warnings.append(f"ignored position {item!r}: the buffer lists {len(known)} entries")
            continue
        name = str(item).strip().lower()
        if name in by_name:
            found.append(by_name[name])
        else:
            warnings.append(f"ignored unknown id {item!r}; known: {list(known)}")
    return list(dict.fromkeys(found)), warnings


def parse_decision(reply: str, *, allowed: Sequence[str], known_ids: Sequence[str]) -> Decision:
    """A decision reply as a Decision; ReplyParseError when it cannot be applied as asked."""
    obj = find_json(reply, dict)
    raw_action = obj.get("action")
    if not isinstance(raw_action, str):
        raise ReplyParseError(f"the decision object has no string 'action': {snippet(json.dumps(obj))!r}")
    key = re.sub(r"[\s-]+", "_", raw_action.strip().lower())
    action = _ACTION_ALIASES.get(key)
    if action is None:
        raise ReplyParseError(f"unknown action {raw_action!r}; expected one of {list(allowed)}")
    if action not in allowed:
        raise ReplyParseError(f"action {action!r} is not offered in this regime (offered: {list(allowed)})")
    reason = obj.get("reason") if isinstance(obj.get("reason"), str) else ""
    if action == "retain":
        return Decision("retain", (), "model", reason)
    ids, warnings = _resolve_ids(obj.get("ids", obj.get("entries")), known_ids)
    if not ids:
        detail = "; ".join(warnings) or "no ids given"
        raise ReplyParseError(f"{action} names no entry of the buffer ({detail})")
    return Decision(action, tuple(ids), "model", reason, warnings=tuple(warnings))


def decision_or_fallback(reply: str, *, allowed: Sequence[str], known_ids: Sequence[str]) -> Decision:
    """``parse_decision``, or the documented fallback: Retain, with the parse error recorded."""
    try:
        return parse_decision(reply, allowed=allowed, known_ids=known_ids)
    except ReplyParseError as exc:
        return Decision("retain", (), "fallback", error=str(exc))


@dataclass(frozen=True)
class ExtractionItem:
    """One item of an extraction reply; indices are 1-based as the prompt asks."""

    kind: str
    from_existing: tuple[int, ...] = ()
    from_functions: tuple[int, ...] = ()
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "from_existing": list(self.from_existing),
            "from_functions": list(self.from_functions),
            "text": self.text,
        }


@dataclass(frozen=True)
class ExtractionPlan:
    items: tuple[ExtractionItem, ...]
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"items": [i.to_dict() for i in self.items], "warnings": list(self.warnings)}


def _indices(raw: Any, limit: int, field_name: str, where: str, warnings: list[str]) -> tuple[int, ...]:
    if raw is None:
        return ()
    if isinstance(raw, (int, str)) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, list):
        warnings.append(f"{where}: {field_name} must be a list of 1-based indices, got {type(raw).__name__}")
        return ()
    kept: list[int] = []
    for value in raw:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            warnings.append(f"{where}: ignored {field_name} index {value!r} (valid: 1..{limit})")
            continue
        kept.append(value)
    return tuple(dict.fromkeys(kept))


def _text(item: dict[str, Any]) -> str:
    def as_text(value: Any) -> str:
        if isinstance(value, list):
            return "\n".join(str(v).strip() for v in value if str(v).strip())
        return str(value).strip() if value is not None else ""

    when = as_text(item.get("when_to_use"))
    body = as_text(item.get("solve_strategy", item.get("strategy", item.get("text"))))
    if when and body:
        return f"When to use: {when}\nStrategy:\n{body}"
    return body or (f"When to use: {when}" if when else "")


def _flat_text(raw: dict[str, Any], where: str, warnings: list[str]) -> str:
    """B.6's single free-form strategy string. A list is joined line by line and other values are
    ignored, each with a warning; B.4's ``when_to_use`` is not part of the flat schema and is ignored."""
    value = raw.get("strategy", raw.get("text"))
    if "when_to_use" in raw or "solve_strategy" in raw:
        warnings.append(f"{where}: the flat schema takes one 'strategy' string; other text fields ignored")
    if isinstance(value, list):
        warnings.append(f"{where}: 'strategy' is a list; its items were joined")
        return "\n".join(str(v).strip() for v in value if str(v).strip())
    if value is not None and not isinstance(value, str):
        warnings.append(f"{where}: 'strategy' must be a string, got {type(value).__name__}; ignored")
        return ""
    return (value or "").strip()


def _flat_kind(raw: dict[str, Any], where: str, warnings: list[str]) -> str:
    """An item's kind; the flat schema's items may leave it out, and then it follows from the fields:
    strategy text with ``from_existing`` is a merge, text without it is new, no text is a retain."""
    if raw.get("kind") is not None:
        return str(raw.get("kind", "")).strip().lower()
    has_text = bool(str(raw.get("strategy") or "").strip())
    kind = ("merge" if raw.get("from_existing") else "new") if has_text else "retain"
    warnings.append(f"{where}: no 'kind'; read as {kind} from its fields")
    return kind


def parse_extraction(reply: str, *, n_existing: int, n_inputs: int, schema: str = "structured") -> ExtractionPlan:
    """An extraction reply as an ExtractionPlan; invalid items are skipped with a warning.

    ReplyParseError when there is no JSON array, or when a non-empty array has no valid item
    (an empty array is valid: it drops every strategy). ``schema="flat"`` (B.6) reads one free-form
    ``strategy`` string per item (``_flat_text``) and infers a missing ``kind`` (``_flat_kind``).
    """
    if schema not in EXTRACTION_SCHEMAS:
        raise ValueError(f"schema must be one of {EXTRACTION_SCHEMAS}, got {schema!r}")
    try:
        value = find_json(reply, list)
    except ReplyParseError:
        try:  # tolerate {"strategies": [...]}
            obj = find_json(reply, dict)
        except ReplyParseError:
            obj = {}
        value = next((obj[k] for k in ("strategies", "memory", "items") if isinstance(obj.get(k), list)), None)
        if value is None:
            raise ReplyParseError(f"no JSON array of strategies found in the reply: {snippet(reply)!r}") from None
    warnings: list[str] = []
    items: list[ExtractionItem] = []
    for n, raw in enumerate(value, start=1):
        where = f"item {n}"
        if not isinstance(raw, dict):
            warnings.append(f"{where}: skipped, not an object")
            continue
        kind = _flat_kind(raw, where, warnings) if schema == "flat" else str(raw.get("kind", "")).strip().lower()
        if kind not in EXTRACTION_KINDS:
            warnings.append(f"{where}: skipped, kind {raw.get('kind')!r} is not one of {EXTRACTION_KINDS}")
            continue
        existing = _indices(raw.get("from_existing"), n_existing, "from_existing", where, warnings)
        functions = _indices(raw.get("from_functions"), n_inputs, "from_functions", where, warnings)
        text = _flat_text(raw, where, warnings) if schema == "flat" else _text(raw)
        if kind == "retain":
            if not existing:
                warnings.append(f"{where}: skipped, retain names no existing strategy")
                continue
            items.append(ExtractionItem("retain", existing))
            continue
        if not text:
            warnings.append(f"{where}: skipped, {kind} has no strategy text")
            continue
        if kind == "merge" and not existing:
            warnings.append(f"{where}: merge names no existing strategy; kept as a new entry")
            kind = "new"
        if kind == "new" and not functions:
            warnings.append(f"{where}: new entry names no trajectory")
        items.append(ExtractionItem(kind, existing if kind == "merge" else (), functions, text))
    if value and not items:
        raise ReplyParseError("no valid item in the extraction reply: " + "; ".join(warnings))
    return ExtractionPlan(tuple(items), tuple(warnings))


@dataclass(frozen=True)
class StrategyChoice:
    """A B.7 selection reply. ``index``: 1-based stored strategy; ``new_text``: a proposed strategy (open
    variant); neither: no strategy. ``source``: model, skipped (nothing to choose from) or fallback."""

    index: int | None = None
    new_text: str = ""
    source: str = "model"
    reason: str = ""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_NONE_WORDS = {"", "none", "null", "no", "neither"}


def parse_selection(reply: str, *, n_strategies: int, allow_new: bool) -> StrategyChoice:
    """A selection reply as a StrategyChoice; ReplyParseError when it names no valid choice.

    Accepted: ``{"choice": <1..n>}`` (also a digit string, "Strategy 2" or "S2"-style "2"), ``{"choice": null}``
    or "none" for no strategy and, when ``allow_new``, ``{"choice": "new", "strategy": "..."}``. The keys
    ``strategy``/``index`` are read when ``choice`` is absent."""
    obj = find_json(reply, dict)
    reason = obj.get("reason") if isinstance(obj.get("reason"), str) else ""
    key = next((k for k in ("choice", "index", "strategy") if k in obj), None)
    if key is None:
        raise ReplyParseError(f"the selection object has no 'choice': {snippet(json.dumps(obj))!r}")
    raw = obj[key]
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word == "new":
            text = obj.get("strategy") if key != "strategy" else obj.get("text")
            if not allow_new:
                raise ReplyParseError("the reply proposes a new strategy, but only a stored one may be named")
            if not isinstance(text, str) or not text.strip():
                raise ReplyParseError("the reply proposes a new strategy without its text ('strategy')")
            return StrategyChoice(None, text.strip(), "model", reason)
        if word in _NONE_WORDS:
            return StrategyChoice(None, "", "model", reason)
        digits = re.fullmatch(r"(?:strategy\s*)?s?(\d+)", word)
        if digits is None:
            if key == "strategy" and allow_new and len(word) > 20:  # a bare proposed text
                return StrategyChoice(None, raw.strip(), "model", reason)
            raise ReplyParseError(f"choice {raw!r} names no stored strategy")
        raw = int(digits.group(1))
    if raw is None:
        return StrategyChoice(None, "", "model", reason)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ReplyParseError(f"choice must be a strategy number, got {raw!r}")
    if not 1 <= raw <= n_strategies:
        raise ReplyParseError(f"choice {raw} is out of range: the memory lists {n_strategies} strategies")
    return StrategyChoice(raw, "", "model", reason)


def selection_or_fallback(reply: str, *, n_strategies: int, allow_new: bool) -> StrategyChoice:
    """``parse_selection``, or the documented fallback: no strategy in the synthesis call (never the whole
    memory, which would turn the variant back into B.1), with the parse error recorded."""
    try:
        return parse_selection(reply, n_strategies=n_strategies, allow_new=allow_new)
    except ReplyParseError as exc:
        return StrategyChoice(None, "", "fallback", error=str(exc))
