"""ARC-AGI Stream prompts (paper App. B); ``arc/decisions.py`` reads their replies into typed decisions.

The solver (B.1), failure banner (B.5), decision (B.3), extraction (B.4/B.6, C.1), flat extraction (B.6),
strategy selection (B.7) and judge (§6.2, App. K.2) prompts. The paper prints only their structure, so every
text here is the kit's own wording. Family and skill labels are never rendered into the solver, decision or
extraction prompts; only the judge, an analysis tool, is told an entry's problem types.

docs/faulty-memories.md, "Prompt variants" and "The ARC code's own readings, module by module" (Prompts).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Sequence
from typing import Any

from antipersist_lib.arc.families import FAMILIES
from antipersist_lib.arc.generator import SKILLS
from antipersist_lib.arc.sandbox import GradeResult
from antipersist_lib.arc.stores import Episode, Strategy
from antipersist_lib.arc.tools import TOOL_SOURCE

Grid = list[list[int]]

ACTIONS = ("retain", "delete", "consolidate")


# -- templates --------------------------------------------------------------------------------------

SOLVER_SYSTEM = "You solve ARC-style grid puzzles by writing a Python function. Think briefly, then answer with code."

SOLVER_PROMPT = """\
# Task: write solve(grid)

Each example below applies the same hidden rule to an input grid to produce its output grid. \
Write a Python function `solve(grid)` that implements the rule. A grid is a list of rows, each a \
list of ints 0-9; 0 is the background. Your code runs with the helpers in the tool buffer already \
defined (use them, do not redefine or import them); only the Python standard library is available.

## Examples ({n_examples})
{examples}

## Strategy memory
{memory}

## Tool buffer
{tools}
{helper_usage}
## History
Earlier trajectories, each with one example and the code written for it:
{history}

Reply with one Markdown-fenced Python block (```python ... ```) that defines solve(grid). \
{grading}"""

#: ``stream.helper_usage``: what the solver prompt says about calling the helpers, after the tool buffer. The
#: paper's B.1 prompt says nothing ("none"). A 1.5B model called the helpers as if they changed the grid in place
#: (7 of 8 programs returned None, params/arc/solver_check.yaml); "note" states the return value in one sentence;
#: "example" adds a worked call, which the same model copied verbatim as its answer in 8 of 8 tasks (measured).
HELPER_USAGE = {
    "none": "",
    "note": (
        "\nEvery helper returns a NEW grid and leaves the grid you pass it unchanged: write "
        "`grid = recolor(grid, objects, 3)` (not `recolor(grid, objects, 3)` alone) and make solve return the "
        "output grid.\n"
    ),
    "example": """
Every helper returns a NEW grid and leaves the grid you pass it unchanged, so always use what it \
returns. How the helpers are called (this shows the calls, not the rule of the examples above):
```python
def solve(grid):
    objects = find_objects(grid)          # a list of dicts with color, cells, size, bbox
    big = [o for o in objects if o["size"] >= 3]
    grid = keep(grid, big)                # keep the grid the helper returns
    return border(grid, big, 3)           # solve returns the output grid
```
""",
}
HELPER_USAGES = tuple(HELPER_USAGE)

#: what the solver is told about grading: during the stream the shown examples are graded, at evaluation
#: new inputs of the same puzzle that the prompt does not show (the reply is never told it can pass by
#: returning the shown outputs: such code fails on the other grids and is kept as a trajectory)
GRADED_ON_SHOWN = (
    "The first such block is graded by running solve on each example input above: every output must match "
    "exactly. Write the rule itself, not a lookup of these pairs: the code is kept and reused on other grids."
)
GRADED_ON_HIDDEN = (
    "The first such block is graded by running solve on other input grids of this puzzle, not shown here: "
    "every output must match exactly. Write the rule the examples share."
)

FAILURE_BANNER = """\
# FAILED ATTEMPT: this code solved {n_correct} of {n_examples} examples{status}.
# Input it failed on:
{input}
# Expected output:
{expected}
# Produced:
{produced}"""

DECISION_SYSTEM = "You manage the memory of an agent that solves grid puzzles by writing Python programs."

DECISION_PROMPT = """\
# Memory management decision

Step {step}. Later puzzles are solved with this memory in context. The buffer below holds raw \
trajectories (one example and the code written for it); entries marked NEW come from this step. \
{capacity_note}
{memory_section}
## Buffer
{history}

## Actions
{actions}

Choose exactly one action. Reply with one JSON object and nothing else, for example:
{{"action": "retain", "ids": []}}"""

DECISION_ACTIONS = {
    "retain": '- "retain": keep every trajectory in the buffer as it is (ids: []).',
    "delete": '- "delete": remove the listed trajectories from the buffer for good (ids: the entries to remove).',
    "consolidate": (
        '- "consolidate": distil the listed trajectories into the strategy memory; they leave the '
        "buffer and the strategy memory is rewritten from them (ids: the entries to distil)."
    ),
}

DECISION_MEMORY_SECTION = """
## Strategy memory
{memory}
"""

EXTRACTION_SYSTEM = "You distil reusable problem-solving strategies from solved grid puzzles."

EXTRACTION_PROMPT = """\
# Strategy extraction

Rewrite the strategy memory of an agent that solves grid puzzles by writing Python `solve(grid)` \
functions. Below are the current strategies and the trajectories selected for consolidation, both \
numbered from 1. A trajectory marked FAILED did not solve its puzzle; its banner shows an input, \
the expected output and what the code produced.

## Current strategy memory
{memory}

## Selected trajectories
{inputs}

## What to return
The complete new strategy memory, as a JSON array whose items are each one of:
- {{"kind": "retain", "from_existing": [i]}}: keep existing strategy i unchanged;
- {{"kind": "new", "from_functions": [k, ...], "when_to_use": "...", "strategy": "..."}}: a new \
strategy distilled from trajectories k;
- {{"kind": "merge", "from_existing": [i, ...], "from_functions": [k, ...], "when_to_use": "...", \
"strategy": "..."}}: one strategy that replaces existing strategies i, combined with trajectories k.
`from_existing` counts the current strategies, `from_functions` the selected trajectories. An \
existing strategy that no item names is dropped.{grouping} Say in "when_to_use" which puzzles the strategy applies to and which it \
does not; give the steps of the solution in "strategy". Reply with the JSON array in a ```json block."""

EXTRACTION_FLAT_PROMPT = """\
# Strategy extraction

Rewrite the strategy memory of an agent that solves grid puzzles by writing Python `solve(grid)` \
functions. Below are the current strategies and the trajectories selected for consolidation, both \
numbered from 1. A trajectory marked FAILED did not solve its puzzle; its banner shows an input, \
the expected output and what the code produced.

## Current strategy memory
{memory}

## Selected trajectories
{inputs}

## What to return
A flat JSON array that is the whole new strategy memory. Each element is one of three kinds:
- {{"kind": "retain", "from_existing": [i]}}: strategy i stays as it is;
- {{"kind": "new", "strategy": "...", "from_functions": [k, ...]}}: a fresh strategy drawn from \
trajectories k;
- {{"kind": "merge", "from_existing": [i, ...], "strategy": "...", "from_functions": [k, ...]}}: \
existing strategies i rewritten into one, optionally with trajectories k as further evidence \
(`from_functions` may be left out).
"strategy" is one plain string in your own words: what kind of puzzle it fits and how to solve \
it. `from_existing` numbers the current strategies and `from_functions` the selected trajectories. \
Any current strategy that no element mentions is removed.{grouping} Reply with the JSON array in a ```json \
block."""

#: the kit's coaching against misgrouping (``coaching=True``); the paper's B.4 / B.6 prompts carry no such sentence
EXTRACTION_GROUPING = " Put together only trajectories that follow the same underlying rule."
EXTRACTION_FLAT_GROUPING = " Only trajectories governed by the same rule belong in one strategy."

SELECTION_SYSTEM = "You pick which stored strategy an agent should follow on a grid puzzle before it writes code."

SELECTION_PROMPT = """\
# Strategy selection

A solver will write a Python `solve(grid)` function for the puzzle below. Before it does, choose \
the strategy from memory that it should follow. Only some of the puzzle's examples are shown here.

## Tool buffer
Helpers the solver can call:
{tools}

## Examples ({n_examples} of {n_total})
{examples}

## Strategy memory
{memory}

## What to return
{choices}
Reply with one JSON object and nothing else."""

SELECTION_CHOICES_CLOSED = (
    'Name the stored strategy that fits this puzzle by its number: {"choice": 2, "reason": "..."}. '
    'If none fits, reply {"choice": null, "reason": "..."}.'
)
SELECTION_CHOICES_OPEN = (
    'Name the stored strategy that fits this puzzle by its number: {"choice": 2, "reason": "..."}. '
    'If none fits, you may describe a better one instead: {"choice": "new", "strategy": "<plain text>"}, '
    'or reply {"choice": null} to go without one.'
)

#: the solver prompt's memory block under strategy selection: the one strategy chosen, or why there is none
SELECTED_NONE = "(no strategy selected for this puzzle)"

JUDGE_SYSTEM = "You review the memory of an agent that solves grid puzzles, one entry at a time."

JUDGE_PROMPT = """\
# Memory entry review

The agent keeps the strategy below in its memory. It was distilled from puzzles of these problem types:
{evidence}

## Strategy
{entry}

Label the strategy with exactly one of:
- "normal": correct and actionable for the problem types it came from, with conditions that say when it applies;
- "over-generalized": states its rule more broadly than its source puzzles support, or drops the conditions \
under which it applies, so it would mislead on related but different puzzles;
- "over-specific": tied to the particular colors, positions, sizes or instances of its source puzzles, so it \
hardly transfers;
- "garbage": vague, malformed, self-contradictory or not actionable.
Reply with one JSON object: {{"label": "<label>", "reason": "<one sentence>"}}"""

EMPTY_MEMORY = "(no strategies stored)"
EMPTY_HISTORY = "(no trajectories)"

#: the ARC-AGI Stream's prompt family ("arc"), hashed into its studies' manifests and checkpoints
PROMPTS: dict[str, str] = {
    "arc_solver_system": SOLVER_SYSTEM,
    "arc_solver": SOLVER_PROMPT,
    "arc_graded_on_shown": GRADED_ON_SHOWN,
    "arc_graded_on_hidden": GRADED_ON_HIDDEN,
    "arc_failure_banner": FAILURE_BANNER,
    "arc_decision_system": DECISION_SYSTEM,
    "arc_decision": DECISION_PROMPT + "\n" + "\n".join(DECISION_ACTIONS.values()) + DECISION_MEMORY_SECTION,
    "arc_extraction_system": EXTRACTION_SYSTEM,
    "arc_extraction": EXTRACTION_PROMPT,
    "arc_extraction_flat": EXTRACTION_FLAT_PROMPT,
    "arc_extraction_grouping": EXTRACTION_GROUPING,
    "arc_extraction_flat_grouping": EXTRACTION_FLAT_GROUPING,
    "arc_selection_system": SELECTION_SYSTEM,
    "arc_selection": SELECTION_PROMPT + "\n" + SELECTION_CHOICES_CLOSED + "\n" + SELECTION_CHOICES_OPEN,
    "arc_selected_none": SELECTED_NONE,
    "arc_judge_system": JUDGE_SYSTEM,
    "arc_judge": JUDGE_PROMPT,
}


# -- rendering --------------------------------------------------------------------------------------


def render_grid(grid: Grid) -> str:
    """A grid as a Python literal, one row per line (the solver can paste it into code)."""
    rows = [json.dumps(list(row)) for row in grid]
    return "[" + ",\n ".join(rows) + "]"


def _comment(text: str) -> str:
    return "\n".join("#   " + line for line in text.splitlines())


def render_examples(examples: Sequence[dict[str, Any]]) -> str:
    blocks = []
    for i, ex in enumerate(examples, start=1):
        blocks.append(f"Example {i}\nInput:\n{render_grid(ex['input'])}\nOutput:\n{render_grid(ex['output'])}")
    return "\n\n".join(blocks)


def tool_signatures(source: str = TOOL_SOURCE) -> str:
    """Each helper's ``def`` line and docstring (the B.1 tool buffer without bodies)."""
    lines = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            header = ast.get_source_segment(source, node).splitlines()[0]
            doc = ast.get_docstring(node) or ""
            lines.append(header + ("\n" + "\n".join("    " + d for d in doc.splitlines()) if doc else ""))
    return "\n\n".join(lines)


def render_tools(bodies: bool = False) -> str:
    return "```python\n" + (TOOL_SOURCE.rstrip() if bodies else tool_signatures()) + "\n```"


def render_strategies(strategies: Iterable[Strategy], *, numbered: bool = False) -> str:
    """Strategies by id (solver, decision) or by 1-based position (extraction, where indices are asked for)."""
    blocks = []
    for i, s in enumerate(strategies, start=1):
        label = f"Strategy {i}" if numbered else f"Strategy {s.entry_id}"
        blocks.append(f"### {label}\n{s.text.strip()}")
    return "\n\n".join(blocks) if blocks else EMPTY_MEMORY


def render_episode(ep: Episode, label: str, *, new: bool = False) -> str:
    status = "passed" if ep.passed else "FAILED"
    parts = [f"### {label} ({status}{', NEW' if new else ''})"]
    for ex in ep.examples:
        parts.append(f"Input:\n{render_grid(ex['input'])}\nOutput:\n{render_grid(ex['output'])}")
    parts.append("```python\n" + ep.rendered_code().rstrip() + "\n```")
    return "\n".join(parts)


def render_history(episodes: Iterable[Episode], *, numbered: bool = False, new_ids: Iterable[str] = ()) -> str:
    fresh = set(new_ids)
    blocks = [
        render_episode(ep, f"Trajectory {i}" if numbered else f"Trajectory {ep.entry_id}", new=ep.entry_id in fresh)
        for i, ep in enumerate(episodes, start=1)
    ]
    return "\n\n".join(blocks) if blocks else EMPTY_HISTORY


def failure_banner(result: GradeResult, examples: Sequence[dict[str, Any]]) -> str:
    """The B.5 comment banner for a failed grade: the first failing example and what the code produced."""
    failing = next((o for o in result.outcomes if o.outcome != "correct"), None)
    index = failing.index if failing is not None else 0
    example = examples[index] if examples else {"input": [[0]], "output": [[0]]}
    if failing is not None and failing.output is not None:
        produced = render_grid(failing.output)
    else:
        why = (failing.error if failing is not None else None) or result.error or result.status
        produced = f"no grid: {why.strip().splitlines()[-1] if why.strip() else result.status}"
    return FAILURE_BANNER.format(
        n_correct=result.n_correct,
        n_examples=result.n_examples,
        status="" if result.status == "ok" else f" ({result.status})",
        input=_comment(render_grid(example["input"])),
        expected=_comment(render_grid(example["output"])),
        produced=_comment(produced),
    )


def chat(system: str, user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def solver_messages(
    examples: Sequence[dict[str, Any]],
    strategies: Sequence[Strategy],
    history: Sequence[Episode],
    *,
    tool_bodies: bool = False,
    graded_on: str = "shown",
    memory_block: str | None = None,
    helper_usage: str = "none",
) -> list[dict[str, str]]:
    """The B.1 prompt; ``graded_on`` says what the reply is graded on: the ``shown`` examples (the stream)
    or ``hidden`` inputs of the same task (evaluation). ``memory_block`` replaces the strategy listing
    (B.7's synthesis call shows only the selected strategy)."""
    if graded_on not in ("shown", "hidden"):
        raise ValueError(f"graded_on must be 'shown' or 'hidden', got {graded_on!r}")
    if helper_usage not in HELPER_USAGE:
        raise ValueError(f"helper_usage must be one of {HELPER_USAGES}, got {helper_usage!r}")
    user = SOLVER_PROMPT.format(
        n_examples=len(examples),
        examples=render_examples(examples),
        memory=render_strategies(strategies) if memory_block is None else memory_block,
        tools=render_tools(tool_bodies),
        helper_usage=HELPER_USAGE[helper_usage],
        history=render_history(history),
        grading=GRADED_ON_SHOWN if graded_on == "shown" else GRADED_ON_HIDDEN,
    )
    return chat(SOLVER_SYSTEM, user)


def decision_messages(
    step: int,
    history: Sequence[Episode],
    strategies: Sequence[Strategy] | None,
    *,
    allowed: Sequence[str],
    capacity: int | None,
    new_ids: Iterable[str] = (),
) -> list[dict[str, str]]:
    """The B.3 prompt; ``strategies=None`` omits the strategy section (Episodic Management Only)."""
    unknown = [a for a in allowed if a not in ACTIONS]
    if unknown or not allowed:
        raise ValueError(f"allowed actions must be a non-empty subset of {ACTIONS}, got {list(allowed)}")
    if capacity is None:
        capacity_note = "The buffer has no size limit."
    else:
        capacity_note = (
            f"The buffer keeps at most {capacity} trajectories between steps; "
            "if more remain after your action, the oldest are dropped."
        )
    section = "" if strategies is None else DECISION_MEMORY_SECTION.format(memory=render_strategies(strategies))
    user = DECISION_PROMPT.format(
        step=step,
        capacity_note=capacity_note,
        memory_section=section,
        history=render_history(history, new_ids=new_ids),
        actions="\n".join(DECISION_ACTIONS[a] for a in ACTIONS if a in allowed),
    )
    return chat(DECISION_SYSTEM, user)


EXTRACTION_SCHEMAS = ("structured", "flat")
SOLVER_MODES = ("direct", "select", "select_open")


def extraction_messages(
    strategies: Sequence[Strategy],
    inputs: Sequence[Episode],
    *,
    schema: str = "structured",
    coaching: bool = True,
) -> list[dict[str, str]]:
    """The B.4 prompt (``structured``: when_to_use + strategy per item) or B.6's ``flat`` schema.

    ``coaching`` adds the kit's sentence telling the model to group only trajectories of one rule; the paper's
    prompts do not coach, since misgrouping is what §6.1 measures (``stream.extraction_coaching: false``)."""
    if schema not in EXTRACTION_SCHEMAS:
        raise ValueError(f"schema must be one of {EXTRACTION_SCHEMAS}, got {schema!r}")
    template = EXTRACTION_PROMPT if schema == "structured" else EXTRACTION_FLAT_PROMPT
    grouping = EXTRACTION_GROUPING if schema == "structured" else EXTRACTION_FLAT_GROUPING
    user = template.format(
        memory=render_strategies(strategies, numbered=True),
        inputs=render_history(inputs, numbered=True),
        grouping=grouping if coaching else "",
    )
    return chat(EXTRACTION_SYSTEM, user)


def selection_examples(examples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """B.7 shows half of the task's examples to the selection call: the first ceil(n/2) (at least one)."""
    return list(examples[: max(1, (len(examples) + 1) // 2)])


def selection_messages(
    examples: Sequence[dict[str, Any]],
    strategies: Sequence[Strategy],
    *,
    tool_bodies: bool = False,
    allow_new: bool = False,
) -> list[dict[str, str]]:
    """The B.7 selection prompt: helper buffer, half the examples, the numbered strategy memory."""
    shown = selection_examples(examples)
    user = SELECTION_PROMPT.format(
        tools=render_tools(tool_bodies),
        n_examples=len(shown),
        n_total=len(examples),
        examples=render_examples(shown),
        memory=render_strategies(strategies, numbered=True),
        choices=SELECTION_CHOICES_OPEN if allow_new else SELECTION_CHOICES_CLOSED,
    )
    return chat(SELECTION_SYSTEM, user)


def judge_evidence(families: Iterable[str], skills: Iterable[str]) -> str:
    """Problem types behind an entry, described with the paper's Table 5 / Table 6 definitions."""
    lines = [f"- selects {FAMILIES[f].definition}" if f in FAMILIES else f"- selects by {f}" for f in families]
    lines += [f"- then: {SKILLS[s].definition}" if s in SKILLS else f"- then applies {s}" for s in skills]
    return "\n".join(lines) if lines else "- (unknown)"


def judge_messages(strategy: Strategy) -> list[dict[str, str]]:
    user = JUDGE_PROMPT.format(evidence=judge_evidence(strategy.families, strategy.skills), entry=strategy.text)
    return chat(JUDGE_SYSTEM, user)
