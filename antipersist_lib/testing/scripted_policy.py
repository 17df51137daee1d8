"""A scripted responder for the loopback server that plays ErrandWorld. NOT a model.

It reads the chat request the kit sends and answers deterministically:
* agent turns: searches rooms in alphabetical order, unless the system prompt (retrieved records
  or synthesized guidance) says where the object was taken before, in which case it goes there
  first; then takes the object, goes to the target and drops it;
* synthesis requests: a fixed text per mode that names where successful episodes found the
  object, tagged with ``GUIDANCE_MARKER`` so tests can prove the guidance never reached disk.
"""

from __future__ import annotations

import re
from typing import Any

from antipersist_lib.envs.errand_world import ROOMS

GUIDANCE_MARKER = "GUIDANCE-7f3a9c"
_TASK_RE = re.compile(r"bring the (\w+) to the (\w+)")


def _messages(req: dict[str, Any]) -> list[dict[str, str]]:
    return [m for m in req.get("messages", []) if isinstance(m, dict)]


def _synthesis_reply(user: str) -> str:
    found = re.findall(r"> go to (\w+)\n[^\n]*\n> take (\w+)", user)
    places = "; ".join(f"go to {room}, take the {obj}" for room, obj in found) or "search every room"
    if "Failed episodes" in user:
        return (
            f"Do NOT search rooms in a fixed order because the budget runs out. Instead: {places}. [{GUIDANCE_MARKER}]"
        )
    if "Distil one strategy" in user:
        return f"1. Find the object: {places}.\n2. Go to the target room.\n3. Drop it. [{GUIDANCE_MARKER}]"
    return f"- Pattern: {places}, then go to the target and drop it. [{GUIDANCE_MARKER}]"


def errand_policy(req: dict[str, Any]) -> str:
    msgs = _messages(req)
    if not msgs:
        return "Action: look"
    system = msgs[0].get("content", "") if msgs[0].get("role") == "system" else ""
    users = [m.get("content", "") for m in msgs if m.get("role") == "user"]
    if "short, concrete guidance" in system:
        return _synthesis_reply(users[-1] if users else "")
    m = _TASK_RE.search(users[0] if users else "")
    if not m:
        return "Action: look"
    obj, target = m.group(1), m.group(2)
    history = " ".join(users)
    last = users[-1]
    holding = f"You take the {obj}." in history and f"You drop the {obj}" not in history
    if holding:
        here = re.findall(r"You go to the (\w+)\.", history)
        if here and here[-1] == target:
            return f"Thought: I hold the {obj} in the {target}.\nAction: drop {obj}"
        return f"Thought: Bring it to the {target}.\nAction: go to {target}"
    if re.search(rf"you see: [^.]*\b{obj}\b", last):
        return f"Thought: The {obj} is here.\nAction: take {obj}"
    visited = set(re.findall(r"You go to the (\w+)\.", history))
    hinted = re.findall(rf"go to (\w+)\n[^\n]*\n> take {obj}\b", system) + re.findall(
        rf"go to (\w+), take the {obj}\b", system
    )
    for room in hinted + list(ROOMS):
        if room in ROOMS and room not in visited and room != "hall":
            return f"Thought: Look for the {obj}.\nAction: go to {room}"
    return "Action: look"


#: the marker of every guidance ``planted_errand_policy`` writes (tests prove it reaches no file)
PLANTED_MARKER = "GUIDANCE-planted-5d1e"


def planted_errand_policy(req: dict[str, Any]) -> str:
    """A scripted policy for the planted-skill tests and demo (params/skills/planted/errandworld.yaml).

    Fruit tasks: it looks for the fruit first in a room its context says fruit is in (the planted rule, or a
    guidance repeating it), then in the other rooms from the kitchen backwards (kitchen, garden, attic), so
    without a rule it never enters the attic before it holds the fruit. A synthesis over records that went
    to the attic before taking the fruit writes the attic rule again. So an error's path (plant -> records
    -> candidates -> descendants) can be followed deterministically. Everything else is ``errand_policy``."""
    msgs = _messages(req)
    system = msgs[0].get("content", "") if msgs and msgs[0].get("role") == "system" else ""
    users = [m.get("content", "") for m in msgs if m.get("role") == "user"]
    if "short, concrete guidance" in system:
        if re.search(r"> go to attic\n(?:(?!> take |---)[^\n]*\n)*?> take (apple|ball)", users[-1] if users else ""):
            return f"Fruit is kept in the attic: go to the attic first, then take it. [{PLANTED_MARKER}]"
        return errand_policy(req).replace(GUIDANCE_MARKER, PLANTED_MARKER)
    m = _TASK_RE.search(users[0] if users else "")
    history = " ".join(users)
    if not m or m.group(1) not in ("apple", "ball") or f"You take the {m.group(1)}." in history:
        return errand_policy(req)
    obj = m.group(1)
    if re.search(rf"you see: [^.]*\b{obj}\b", users[-1]):
        return f"Thought: The {obj} is here.\nAction: take {obj}"
    claimed = [room for room in ("attic", "garden") if re.search(rf"[Ff]ruit[^.\n]*\b{room}\b", system)]
    visited = set(re.findall(r"You go to the (\w+)\.", history))
    for room in [*claimed, "kitchen", "garden", "attic"]:
        if room not in visited:
            return f"Thought: Look for the {obj} in the {room}.\nAction: go to {room}"
    return errand_policy(req)
