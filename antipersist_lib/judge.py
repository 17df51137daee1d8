"""The LLM judge of the faulty-memories studies (§6.2, App. K.2): its labels, a reply read into a verdict, and
the one loop that asks it about each memory entry (``rule_judge.py``, the planted-rule study's second
reading, asks through the same loop with its own question and reader).

Both studies judge through here: ``arc/lineage.py:judge_memory`` labels an ARC run's abstract strategies and
``consolidation/task_switch.py:judge_bank`` a consolidated bank's entries. Each builds its own messages (the
ARC judge prompt sees Table 5 / 6 problem types, the task-switch one the task types of an entry's records) and
its own tags; the calls, their order and the reading of the replies are this module's.

A reply is read as a JSON object with a ``label`` (fenced blocks first, then inline), or else as a bare label;
spellings such as ``Over_Generalization`` are mapped onto the four labels. A reply that holds no known label
is ``"unparsed"``, counted apart from the four (docs/faulty-memories.md, "Reading replies").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from antipersist_lib.errors import ReplyParseError
from antipersist_lib.replies import extract_json, snippet

JUDGE_LABELS = ("normal", "over-generalized", "over-specific", "garbage")
UNPARSED_LABEL = "unparsed"

_LABEL_ALIASES = {
    "over-generalization": "over-generalized",
    "overgeneralized": "over-generalized",
    "over-specialization": "over-specific",
    "over-specialized": "over-specific",
    "overspecific": "over-specific",
    "useless-garbage": "garbage",
}


@dataclass(frozen=True)
class JudgeVerdict:
    label: str  # one of JUDGE_LABELS, or UNPARSED_LABEL
    reason: str = ""
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "reason": self.reason, "error": self.error}


def _normalize_label(raw: str) -> str | None:
    key = re.sub(r"[\s_]+", "-", raw.strip().lower())
    key = _LABEL_ALIASES.get(key, key)
    return key if key in JUDGE_LABELS else None


def parse_judge(reply: str) -> JudgeVerdict:
    """A judge reply as a JudgeVerdict; ReplyParseError when it holds no known label."""
    try:
        obj = extract_json(reply, dict, whole=False, fences="line", empty_error=False, quote_reply=True)
    except ReplyParseError:
        obj = None
    if obj is not None and isinstance(obj.get("label"), str):
        label = _normalize_label(obj["label"])
        if label is None:
            raise ReplyParseError(f"unknown label {obj['label']!r}; expected one of {JUDGE_LABELS}")
        reason = obj.get("reason") if isinstance(obj.get("reason"), str) else ""
        return JudgeVerdict(label, reason)
    bare = _normalize_label(reply.strip().strip(".\"'`"))
    if bare is not None:
        return JudgeVerdict(bare)
    raise ReplyParseError(f"no label found in the judge reply: {snippet(reply)!r}")


def judge_or_fallback(reply: str) -> JudgeVerdict:
    """``parse_judge``, or the documented fallback label ``"unparsed"``."""
    try:
        return parse_judge(reply)
    except ReplyParseError as exc:
        return JudgeVerdict(UNPARSED_LABEL, error=str(exc))


def judge_entries(
    llm: Any,
    items: Iterable[tuple[str, list[dict[str, str]]]],
    *,
    purpose: str,
    temperature: float,
    max_tokens: int,
    id_tag: str,
    tags: Mapping[str, Any] | None = None,
    read: Callable[[str], Any] | None = None,
) -> list[tuple[str, Any]]:
    """One judge call per ``(entry id, messages)`` of ``items``, in their order: each entry's verdict, its reply
    read by ``read`` (default: the four labels; ``rule_judge.py`` reads its own question's replies).

    Every call is tagged with ``tags`` and then ``{id_tag: entry id}``. ``items`` is read lazily, so an entry's
    messages are built just before its call."""
    reader = read or judge_or_fallback  # looked up at the call: the one reading of the four labels
    out = []
    for entry_id, messages in items:
        reply = llm.chat(
            messages,
            purpose=purpose,
            temperature=temperature,
            max_tokens=max_tokens,
            tags={**(tags or {}), id_tag: entry_id},
        )
        out.append((entry_id, reader(reply.text)))
    return out
