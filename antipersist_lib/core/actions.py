"""Turning a chat model's reply into one environment command.

Chat models write more than asked: a thought, several actions, markdown, quotes. The agent
executes only the first action. Rules, in order:

1. the first line that starts with ``Action:`` (any case, optional markdown emphasis, numbering
   or ``>`` prompt marker) gives the command; an empty ``Action:`` line takes the next
   non-empty line;
2. otherwise the first non-empty line that is not a ``Thought:``/``Reasoning:``/``Plan:`` line
   (a bare ReAct ``think: ...`` line is a think pseudo-action, as in the original ReAct prompts);
3. the command is cleaned: surrounding quotes, backticks and brackets of code spans removed,
   a leading ``>`` removed, whitespace collapsed, a trailing period removed.

A reply with no usable command (empty, only a thought, or only punctuation) yields ``None``:
the turn is counted as an invalid action and still uses one step of the budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_ACTION_CHARS = 300

# No two adjacent repeats may match the same characters (as in the older "\s*[-*\s]*\s*"):
# that made matching cubic in the length of a whitespace run, and a reply with a few thousand
# spaces stalled the agent for minutes. The languages matched are unchanged.
_ACTION_RE = re.compile(
    r"^[-*\d.)\s]*(?:(?:\*\*|__)\s*)?action\s*(?:\d+\s*)?(?:(?:\*\*|__)\s*)?[:：]\s*(?:\*\*|__)?(.*)$", re.IGNORECASE
)
_THOUGHT_RE = re.compile(
    r"^[-*\s]*(?:(?:\*\*|__)\s*)?(?:thought|reasoning|plan)\s*(?:(?:\*\*|__)\s*)?[:：]", re.IGNORECASE
)
_THINK_ACTION_RE = re.compile(r"^think\s*:", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedAction:
    action: str | None  # None: no usable command
    thought: str  # the text before the action (for the record; not executed)
    is_think: bool = False  # a ReAct "think: ..." pseudo-action (no environment step)


def clean_command(text: str) -> str:
    s = text.strip()
    s = re.sub(r"^(?:\*\*|__)|(?:\*\*|__)$", "", s).strip()
    if s.startswith(">"):
        s = s[1:].strip()
    if len(s) >= 2 and s[-1] == "." and s[-2] in "`'\"":  # `take apple`. : period after the quote
        s = s[:-1]
    for _ in range(2):
        if len(s) >= 2 and s[0] == s[-1] and s[0] in "`'\"":
            s = s[1:-1].strip()
    s = s.strip("`").strip()
    s = " ".join(s.split())
    if s.endswith(".") and not s.endswith(".."):
        s = s[:-1].rstrip()
    return s[:MAX_ACTION_CHARS].rstrip()  # the cut may fall just after a space


def parse_action(reply: str | None) -> ParsedAction:
    """First executable command in a model reply (see module docstring)."""
    if not reply:
        return ParsedAction(None, "")
    lines = reply.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    thought_lines: list[str] = []
    candidate: str | None = None
    for i, line in enumerate(lines):
        m = _ACTION_RE.match(line)
        if m:
            candidate = m.group(1)
            if not candidate.strip():  # "Action:" alone: the command is on the next non-empty line
                candidate = next((x for x in lines[i + 1 :] if x.strip()), "")
            break
        thought_lines.append(line)
    if candidate is None:
        thought_lines = []
        for line in lines:
            stripped = line.strip()
            if not stripped or stripped.startswith("```"):
                continue
            if _THOUGHT_RE.match(stripped):
                thought_lines.append(stripped)
                continue
            candidate = stripped
            break
    thought = "\n".join(x for x in thought_lines if x.strip()).strip()
    if candidate is None:
        return ParsedAction(None, thought)
    action = clean_command(candidate)
    if not re.search(r"\w", action):
        return ParsedAction(None, thought)
    if _THINK_ACTION_RE.match(action):
        return ParsedAction(action, thought, is_think=True)
    return ParsedAction(action, thought)
