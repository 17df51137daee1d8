"""Every prompt the kit sends, in one place, so users can read, diff and version them.

The agent prompt is shared by every method (the paper holds the agent prompt fixed across
methods, D.2); method-specific context is appended to its system message. The three synthesis
prompts implement the mode definitions of Appendix B.1-B.2 (the paper prints only their
interfaces; the wording here is the kit's own). Each run records the hashes of the prompt families it
uses in its manifest, so a changed prompt is visible in every result it touches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

# ---------------------------------------------------------------------------------------------
# The agent (ReAct-style, one action per turn)
# ---------------------------------------------------------------------------------------------

AGENT_SYSTEM = """\
You are an agent that completes tasks in a text-based environment, one command at a time.

Each turn you see the latest observation. Answer in this format:
Thought: <one short sentence about what to do next and why>
Action: <exactly one command>

Only the first Action line is executed. Use object and place names exactly as the observations
write them. If a command changes nothing, do not repeat it; try something else.
{action_help}"""

AGENT_TASK = """\
{observation}

Begin. Reply with a Thought line and an Action line."""

AGENT_OBSERVATION = "Observation: {observation}"
#: agent option repeat_feedback: what a resample is told about the reply it replaces
REPEAT_FEEDBACK = """You already sent "{command}" after this same observation earlier in this episode, and it led nowhere: sending it again will not help. Reply with a different command (one command only)."""
#: agent option resample_unlisted (with repeat_feedback): what a resample is told about an unlisted command
UNLISTED_FEEDBACK = """"{command}" is not one of the valid commands listed under the latest observation. Reply with exactly one of the listed commands."""
#: the latest observation with the engine's valid commands (agent option show_valid_actions)
VALID_ACTIONS = """\
{observation}
Valid commands now: {commands}{more}"""


def agent_system_prompt(action_help: str = "", context_blocks: Iterable[str] = ()) -> str:
    """The agent's system message: the fixed prompt, the benchmark's command syntax, then any
    method context (retrieved records, synthesized guidance, stored abstractions)."""
    text = AGENT_SYSTEM.format(action_help=("\n" + action_help.strip() + "\n") if action_help.strip() else "")
    blocks = [b.strip() for b in context_blocks if b and b.strip()]
    if blocks:
        text = text.rstrip() + "\n\n" + "\n\n".join(blocks)
    return text


# ---------------------------------------------------------------------------------------------
# In-context demonstrations (agent option icl_examples; core/demonstrations.py renders them)
# ---------------------------------------------------------------------------------------------

DEMONSTRATIONS_HEADER = "## Solved examples"
DEMONSTRATIONS_PREAMBLE = """\
Solved episodes of other tasks of this kind (the environment's expert plan). Each "Action:" line
is one reply, in the format your replies must end with (Thoughts left out); the other lines are
what the environment answered. Use the names in your own observations, not these."""
DEMONSTRATION_TITLE = "### Example {number}"
DEMONSTRATION_REPLY = "Action: {action}"
DEMONSTRATION_OMITTED = "[... {count} more action(s) and their observations left out for space ...]"
DEMONSTRATION_END = "[Task completed.]"

# ---------------------------------------------------------------------------------------------
# Synthesis prompts (phi), temperature 0, 1024 tokens
# ---------------------------------------------------------------------------------------------

SYNTHESIS_SYSTEM = (
    "You write short, concrete guidance for an agent that acts in a text environment. "
    "You only see earlier episodes; the agent will act on the new task right after reading you."
)

IMITATION_PROMPT = """\
New task:
{instruction}

Successful episodes from earlier, similar tasks:
{success_text}

From these successes, extract the behavioural patterns the agent can reuse on the new task:
- action sequences that worked, written as command templates with placeholders for objects
  and places (e.g. "go to <place>", "take <object> from <place>");
- the observation that told the agent each step had worked, or that it should switch steps;
- when each pattern applies and how to adapt it to the new task.
Do not copy an episode line by line, and do not turn names or locations that belonged only to
an earlier episode into rules. Answer with at most 8 bullet points and nothing else."""

STRATEGIC_PROMPT = """\
New task:
{instruction}

Successful episodes from earlier, similar tasks:
{success_text}

Distil one strategy for the new task from these successes:
1. Sub-goals, in the order the agent should reach them.
2. How to find and use what each sub-goal needs (where to look first, which commands work).
3. How to recover when a command fails or the expected object is not where it was expected.
Keep what transfers to the new task; leave out details that were true only in an earlier
episode (particular object numbers, rooms, or products). Answer with the numbered plan only,
at most 12 lines."""

CORRECTIVE_PROMPT = """\
New task:
{instruction}

Failed episodes from earlier, similar tasks:
{failure_text}

A successful episode for contrast:
{success_text}

Find what went wrong in the failed episodes: the failure modes, the decision points where the
agent went astray, and errors that recur across episodes. Use the successful episode, if there
is one, to see what the right move was at those points. Write avoidance rules for the new task,
each on its own line in the form
Do NOT <action or habit> because <observed consequence>. Instead: <what to do>.
("Instead" may be omitted when no better move is evident.) At most 8 rules, nothing else."""

NO_SUCCESS_REFERENCE = "(no successful reference available)"

SYNTHESIS_PROMPTS: dict[str, str] = {
    "imitation": IMITATION_PROMPT,
    "strategic": STRATEGIC_PROMPT,
    "corrective": CORRECTIVE_PROMPT,
}

# ---------------------------------------------------------------------------------------------
# Injection wrappers (headers from Appendix B.1-B.2)
# ---------------------------------------------------------------------------------------------

GUIDANCE_HEADERS: dict[str, str] = {
    "imitation": "## Behavioral Patterns (imitation)",
    "strategic": "## Task-Specific Strategy (strategic reflection)",
    "corrective": "## Avoidance Rules (corrective reflection)",
}

FACTUAL_HEADER = "## Past Episodes (factual records)"
FACTUAL_PREAMBLE = (
    "Records of earlier episodes on similar tasks, with their observed outcomes. They are what "
    "happened, not advice: an episode marked FAILURE shows what did not work."
)


def numbered_lines(items: Sequence[str]) -> str:
    """Items as a 1-based numbered list, each on one line (its inner whitespace collapsed), the way
    the baselines show their insights and reflections."""
    return "\n".join(f"{i}. {' '.join(t.split())}" for i, t in enumerate(items, start=1))


def wrap_guidance(mode: str, text: str) -> str:
    """Put synthesized guidance under its mode's header (empty text gives an empty block)."""
    text = text.strip()
    return f"{GUIDANCE_HEADERS[mode]}\n{text}" if text else ""


def wrap_factual(record_blocks: Sequence[str]) -> str:
    """The `none` mode's context: retrieved records verbatim, no inferred rules, no LLM call."""
    blocks = [b for b in record_blocks if b.strip()]
    if not blocks:
        return ""
    return FACTUAL_HEADER + "\n" + FACTUAL_PREAMBLE + "\n\n" + "\n\n".join(blocks)


# ---------------------------------------------------------------------------------------------
# Hashes for run manifests
# ---------------------------------------------------------------------------------------------


#: the kit's own prompt family ("kit"): the agent, its demonstrations, the three synthesis modes and the
#: context headers. Every prompt module exports its family as ``PROMPTS``; a run hashes the families it uses,
#: named explicitly (``methods.PROMPT_FAMILIES``), so its manifest never depends on what else was imported.
PROMPTS: dict[str, str] = {
    "agent_system": AGENT_SYSTEM,
    "agent_task": AGENT_TASK,
    "agent_observation": AGENT_OBSERVATION,
    "agent_valid_actions": VALID_ACTIONS,
    "agent_repeat_feedback": REPEAT_FEEDBACK,
    "agent_unlisted_feedback": UNLISTED_FEEDBACK,
    "synthesis_system": SYNTHESIS_SYSTEM,
    "imitation": IMITATION_PROMPT,
    "strategic": STRATEGIC_PROMPT,
    "corrective": CORRECTIVE_PROMPT,
    "no_success_reference": NO_SUCCESS_REFERENCE,
    "factual_header": FACTUAL_HEADER + "\n" + FACTUAL_PREAMBLE,
    "demonstrations_header": DEMONSTRATIONS_HEADER + "\n" + DEMONSTRATIONS_PREAMBLE,
    "demonstration_turns": "\n".join(
        (DEMONSTRATION_TITLE, DEMONSTRATION_REPLY, AGENT_OBSERVATION, DEMONSTRATION_OMITTED, DEMONSTRATION_END)
    ),
    **{f"header_{m}": h for m, h in GUIDANCE_HEADERS.items()},
}


def prompt_hashes(*families: Mapping[str, str]) -> dict[str, str]:
    """sha256 (first 16 hex digits) of every template of the given families (each a name -> template
    mapping, a module's ``PROMPTS``), by name, sorted. A name in two families is refused: a hash must
    name one text."""
    texts: dict[str, str] = {}
    for family in families:
        clash = sorted(set(texts) & set(family))
        if clash:
            raise ValueError(f"prompt name(s) {clash} appear in two families")
        texts.update(family)
    return {name: hashlib.sha256(texts[name].encode("utf-8")).hexdigest()[:16] for name in sorted(texts)}
