"""AutoRefine's prompts (the kit's own wording) and the readers of their replies (paper Appendix D.3).

The method itself is ``methods/autorefine.py`` (its docstring says where each item of D.3 lives); the
skill library's rules (score, MMR selection, validation, names) are ``methods/autorefine_skills.py``.

- ``parse_rewrite`` decodes the query-rewrite reply: a JSON object with keys strategy / pitfall / actions,
  else lines labelled ``Strategy:`` / ``Pitfall:`` / ``Actions:``.
- ``parse_skill_array`` is the evolver's four-stage fallback parser (direct ``json.loads``; fenced-block
  stripping; the last top-level bracketed array; per-object scanning), built on ``antipersist_lib/replies.py``.
"""

from __future__ import annotations

import re
from typing import Any

from antipersist_lib.replies import fenced_blocks, json_value, json_values

QUERY_LABELS = ("strategy", "pitfall", "actions")

# ---------------------------------------------------------------------------------------------
# Prompts (the kit's own wording)
# ---------------------------------------------------------------------------------------------

REWRITE_SYSTEM = "You turn task descriptions into short search queries for a library of agent skills."

REWRITE_PROMPT = """\
An agent is about to attempt this task:
{description}

Rewrite the task as three short search queries for its skill library:
- Strategy: the overall approach or plan the task calls for;
- Pitfall: the mistakes an agent is most likely to make on it;
- Actions: the concrete commands or operations it will need.

Answer with exactly these three lines and nothing else:
Strategy: <query>
Pitfall: <query>
Actions: <query>"""

EVOLVER_PREAMBLES: dict[str, str] = {
    "alfworld": (
        "You maintain the skill library of an agent in ALFWorld, a text-based household simulator. "
        "The agent goes to receptacles, opens and closes them, takes and puts objects, and uses "
        "appliances (a microwave to heat, a fridge to cool, a sink basin to clean, a desk lamp to "
        "look at something) to finish pick-and-place style household goals within a step budget."
    ),
    "webshop": (
        "You maintain the skill library of an agent in WebShop, a simulated online store. The "
        "agent writes search queries, opens result pages, picks product options such as size or "
        "colour, and buys one item that must match the attributes, options and price limit the "
        "shopper asked for."
    ),
    "scienceworld": (
        "You maintain the skill library of an agent in ScienceWorld, a text-based simulator of "
        "elementary science experiments. The agent moves between rooms, picks up and moves "
        "objects and containers, operates devices (stoves, freezers, thermometers), changes and "
        "measures states of matter, and must focus on the right object to complete multi-step "
        "procedures."
    ),
}
EVOLVER_PREAMBLE_GENERIC = (
    "You maintain the skill library of an agent that completes tasks in a text-based environment, "
    "one command at a time."
)

EVOLVER_PROMPT = """\
Below are episodes from the latest round of training: up to {max_failures} that FAILED and up to \
{max_successes} that SUCCEEDED. Compare them. Work out what the successful episodes did that the \
failed ones did not, and which mistakes made the failed ones go wrong.

From this contrast, write new reusable skills. Each skill is a JSON object with these fields:
- "name": a short slug of lowercase letters, digits and hyphens (for example "search-closed-receptacles");
- "kind": "general" (helps on any task), "mistake" (a common mistake and how to avoid it) or "task" (only for one task type);
- "task_type": for kind "task", one of: {task_types}; otherwise null;
- "content": when the skill applies and what to do, in a few lines, followed by a section that \
starts with the line "Why it works:" and contrasts the success evidence with the failure evidence above.

Skills already in the library (do not write them again): {existing}

Only write skills that the episodes support. Reply with a JSON array of skill objects and nothing \
else; reply [] if the episodes teach nothing new.

=== Failed episodes ===
{failures}

=== Successful episodes ===
{successes}"""

NO_EPISODES = "(none in this round)"

#: AutoRefine's prompt family ("autorefine"), hashed into the manifests of its runs
PROMPTS: dict[str, str] = {
    "autorefine_rewrite_system": REWRITE_SYSTEM,
    "autorefine_rewrite": REWRITE_PROMPT,
    "autorefine_evolver": EVOLVER_PROMPT,
    "autorefine_preamble_generic": EVOLVER_PREAMBLE_GENERIC,
    **{f"autorefine_preamble_{bench}": text for bench, text in EVOLVER_PREAMBLES.items()},
}


# ---------------------------------------------------------------------------------------------
# (ii) reading the query rewrite
# ---------------------------------------------------------------------------------------------

_LABEL_KEYS = {
    "strategy": "strategy",
    "strategies": "strategy",
    "pitfall": "pitfall",
    "pitfalls": "pitfall",
    "action": "actions",
    "actions": "actions",
}
# Written so that no two adjacent repeats match the same characters and the leading run stays
# on its line: the older form took cubic time on a reply of many blank lines (1000 newlines:
# 8 s). It finds the same labels and values.
_LABEL_LINE = re.compile(
    r"^(?:[^\S\n]|[\-*#>\d.)])*(strategy|strategies|pitfalls?|actions?)\s*(?:\*+\s*)?[:\-\u2013\u2014]\s*(?:\*+\s*)?(\S(?:.*\S)?)",
    re.IGNORECASE | re.MULTILINE,
)


def _clean_query(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = "; ".join(str(v) for v in value if isinstance(v, (str, int, float)))
    if not isinstance(value, str):
        return ""
    return " ".join(value.strip().strip("*\"'`").split())


def parse_rewrite(text: str) -> dict[str, str]:
    """Decode the strategy / pitfall / actions queries; {} when nothing usable is found.

    Accepts a JSON object (optionally fenced or surrounded by prose) with those keys, or lines
    labelled ``Strategy:``, ``Pitfall:``, ``Actions:`` (bullets, numbering and bold allowed).
    """
    out: dict[str, str] = {}
    for obj, _start, _end in json_values(text, "{"):  # invalid, too deep or over-long values are skipped
        if isinstance(obj, dict):
            for k, v in obj.items():
                label = _LABEL_KEYS.get(str(k).strip().lower())
                q = _clean_query(v)
                if label and q and label not in out:
                    out[label] = q
            if out:
                return out
    for m in _LABEL_LINE.finditer(text):
        label = _LABEL_KEYS[m.group(1).lower()]
        q = _clean_query(m.group(2))
        if q and label not in out:
            out[label] = q
    return out


# ---------------------------------------------------------------------------------------------
# (iv) the evolver's four-stage fallback parser
# ---------------------------------------------------------------------------------------------


def _skill_items(value: Any) -> list[dict[str, Any]] | None:
    """A decoded value as a list of skill dicts, or None when it is not one."""
    if isinstance(value, dict):
        inner = value.get("skills")
        if isinstance(inner, list):
            value = inner
        elif "content" in value:
            return [value]
        else:
            return None
    if isinstance(value, list):
        dicts = [v for v in value if isinstance(v, dict)]
        if value and not dicts:
            return None
        return dicts
    return None


def parse_skill_array(text: str) -> tuple[list[dict[str, Any]], str]:
    """Decode the evolver's reply as a list of skill dicts; returns (skills, stage).

    Stages, first success wins: ``direct`` (json.loads of the whole reply), ``fenced`` (each
    ```...``` block), ``last_array`` (the last top-level ``[...]`` that decodes to objects),
    ``objects`` (every brace-balanced ``{...}`` that decodes to an object with a name or
    content). ``none``: nothing decodable (an empty list, never an exception).
    """
    text = text or ""
    # every stage treats a value nested too deep to decode like invalid JSON
    items = _skill_items(json_value(text.strip()))
    if items is not None:
        return items, "direct"
    for _tag, body in fenced_blocks(text, "inline"):
        items = _skill_items(json_value(body))
        if items is not None:
            return items, "fenced"
    last: list[dict[str, Any]] | None = None
    for value, _start, _end in json_values(text, "[", nested=False):
        items = _skill_items(value)
        if items is not None:
            last = items
    if last is not None:
        return last, "last_array"
    found: list[dict[str, Any]] = []
    resume = 0  # an object taken whole is not searched again for the objects inside it
    for obj, start, end in json_values(text, "{"):
        if start >= resume and isinstance(obj, dict) and ("content" in obj or "name" in obj):
            found.append(obj)
            resume = end
    if found:
        return found, "objects"
    return [], "none"
