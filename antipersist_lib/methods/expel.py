"""ExpeL (Zhao et al., AAAI 2024) as a compared method: voted insights plus retrieved successes.

Every training trajectory is stored; at the end of each iteration the backbone compares failed and
successful episodes (and groups of successes) and edits a voted insight list, kept in an
``AbstractionStore`` (``insights/events.jsonl``). A task's context shows the active insights and the
most similar successful trajectories of its type. The original's three stages, the kit's version and
its eight deviations from the original are documented in docs/methods.md, "ExpeL".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.core.config import TABLE3
from antipersist_lib.core.prompts import numbered_lines
from antipersist_lib.core.synthesis import FormatLimits, format_record
from antipersist_lib.errors import FrozenStateError
from antipersist_lib.memory.abstraction_store import EVENTS_FILE, Abstraction, AbstractionStore, parents_of_records
from antipersist_lib.memory.trajectory_store import MemoryRecord, TrajectoryStore
from antipersist_lib.methods.base import Method, MethodContext, TaskContext, take_params
from antipersist_lib.records import Task
from antipersist_lib.rundir import RunDirectory

log = logging.getLogger(__name__)

NEW_INSIGHT_VOTES = 2

INSIGHT_SYSTEM = (
    "You keep a short list of general insights for an agent that completes tasks in a text "
    "environment. You study the agent's earlier episodes and change the list so that it helps "
    "the agent on future tasks of the same kinds."
)

OPERATIONS_HELP = """\
Reply only with operations on the insight list, one per line, in this form:
ADD: <a new insight>
EDIT <number>: <an improved wording of that insight>
UPVOTE <number>
DOWNVOTE <number>
UPVOTE an insight these episodes confirm; DOWNVOTE one they show to be wrong, misleading or
useless; EDIT one that is close but should be corrected or made more general; ADD only what the
list does not already say. Insights must be general and actionable: they should help with other
tasks of these kinds, so leave out object names, places and numbers that mattered only in these
episodes. Use the numbers of the current list. If nothing should change, reply NONE.{full_note}"""

FULL_NOTE = (
    "\nThe list is full ({n} insights). A new insight can only stay by displacing the lowest-voted "
    "one, so prefer EDIT, UPVOTE and DOWNVOTE to ADD."
)

COMPARE_PROMPT = """\
Current insights:
{insights}

Two attempts at the same task:
{instruction}

The attempt that FAILED:
{failure}

The attempt that SUCCEEDED:
{success}

Compare the two attempts. Find the decisions where they diverge and what the successful attempt
did that the failed one did not (or the other way round). Then update the insight list so that
an agent following it would not make the failed attempt's mistakes.

{operations_help}"""

SUCCESS_PROMPT = """\
Current insights:
{insights}

Successful attempts at tasks:
{successes}

Find what these successful attempts have in common: the order of sub-goals, the commands that
worked, how the agent found what it needed and how it recovered from setbacks. Then update the
insight list so that it captures these habits.

{operations_help}"""

NO_INSIGHTS = "(none yet)"

HEADER_INSIGHTS = "## Insights from past experience"
PREAMBLE_INSIGHTS = "Insights learned from earlier episodes (most supported first):"
HEADER_EXAMPLES = "## Successful examples of similar tasks"
PREAMBLE_EXAMPLES = "Earlier episodes of similar tasks that succeeded:"

#: this method's prompt family ("expel"), hashed into the manifests of its runs
PROMPTS: dict[str, str] = {
    "expel_system": INSIGHT_SYSTEM,
    "expel_operations": OPERATIONS_HELP,
    "expel_full_note": FULL_NOTE,
    "expel_compare": COMPARE_PROMPT,
    "expel_success": SUCCESS_PROMPT,
    "expel_no_insights": NO_INSIGHTS,
    "expel_header_insights": HEADER_INSIGHTS + "\n" + PREAMBLE_INSIGHTS,
    "expel_header_examples": HEADER_EXAMPLES + "\n" + PREAMBLE_EXAMPLES,
}

DEFAULTS: dict[str, Any] = {
    "max_compare_calls": 8,  # fail/success comparisons per iteration
    "max_success_calls": 4,  # all-success groups per iteration
    "success_group_size": 4,
    "max_insights": 20,
    "k_examples": TABLE3.budget,  # retrieved successful trajectories (the paper's budget B=5, Table 3)
    "max_tokens": TABLE3.synthesis_max_tokens,  # per insight call (Table 3's 1024 synthesis tokens)
    "temperature": 0.0,
    "trajectory_chars": 4000,  # clip per trajectory, in insight prompts and examples
}

INSIGHTS_DIR = "insights"

# -- parsing the model's operations ------------------------------------------------------------

OPS = ("add", "edit", "upvote", "downvote")
_VERBS = {
    "add": "add",
    "edit": "edit",
    "upvote": "upvote",
    "agree": "upvote",
    "downvote": "downvote",
    "remove": "downvote",
    "disagree": "downvote",
}
_LEAD = re.compile(r"^\s*(?:(?:[-*+•>]|\(?\d{1,3}[.)\]:]|\[\d{1,3}\])\s*)+")
_OP_LINE = re.compile(
    r"^(?P<verb>add|edit|upvote|agree|downvote|remove|disagree)\b"  # the operation
    r"\s*(?:(?:insight|rule|item|no\.?|number)\s*)?#?\s*(?P<index>\d+)?"  # optional index
    r"\s*(?:[:.)\]\-–—=>]+)?\s*(?P<text>.*)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class InsightOp:
    """One parsed operation; ``index`` is 0-based into the list shown (None for ADD)."""

    kind: str  # "add", "edit", "upvote", "downvote"
    index: int | None
    text: str = ""


def _clean_text(text: str) -> str:
    text = text.strip().strip("*_`").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return " ".join(text.split())


def parse_operations(reply: str, n_insights: int) -> list[InsightOp]:
    """Operations from a model reply; never raises.

    Lines are matched case-insensitively after leading bullets/numbering and markdown emphasis
    are stripped; anything that is not an operation is skipped. Indices are 1-based in the
    reply: UPVOTE/DOWNVOTE out of ``1..n_insights`` are dropped, an EDIT out of range becomes an
    ADD of its text, and an index on ADD is ignored. Each insight gets at most one
    EDIT/UPVOTE/DOWNVOTE (the first one).
    """
    out: list[InsightOp] = []
    touched: set[int] = set()
    if not isinstance(reply, str):
        return out
    for raw in reply.splitlines():
        line = _LEAD.sub("", raw).strip().lstrip("*_`#").strip()
        line = line.replace("**", "").replace("__", "")
        m = _OP_LINE.match(line)
        if not m:
            continue
        kind = _VERBS[m.group("verb").lower()]
        idx_s = m.group("index")
        text = _clean_text(m.group("text") or "")
        if kind == "add":
            if len(text) >= 3:
                out.append(InsightOp("add", None, text))
            continue
        if idx_s is None:
            continue  # EDIT/UPVOTE/DOWNVOTE without a number: malformed
        idx = int(idx_s) - 1
        in_range = 0 <= idx < n_insights
        if kind == "edit":
            if len(text) < 3:
                continue
            if not in_range:
                out.append(InsightOp("add", None, text))
                continue
        elif not in_range:
            continue
        if idx in touched:
            continue
        touched.add(idx)
        out.append(InsightOp(kind, idx, text if kind == "edit" else ""))
    return out


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".")


class ExpeL(Method):
    """Insights with votes (extracted each iteration) plus retrieved successful examples."""

    name = "expel"
    prompt_families = ("kit", "expel")
    state_files = (RunDirectory.TRAJECTORIES, f"{INSIGHTS_DIR}/{EVENTS_FILE}")

    def __init__(self, ctx: MethodContext, **params: Any) -> None:
        super().__init__(ctx)
        p = take_params(
            params,
            DEFAULTS,
            self.name,
            minimums={
                "max_compare_calls": 0,
                "max_success_calls": 0,
                "k_examples": 0,
                "success_group_size": 1,
                "max_insights": 1,
                "max_tokens": 1,
                "temperature": 0,
                "trajectory_chars": 200,
            },
        )
        self.max_compare_calls = int(p["max_compare_calls"])
        self.max_success_calls = int(p["max_success_calls"])
        self.success_group_size = int(p["success_group_size"])
        self.max_insights = int(p["max_insights"])
        self.k_examples = int(p["k_examples"])
        self.max_tokens = int(p["max_tokens"])
        self.temperature = float(p["temperature"])
        self.trajectory_chars = int(p["trajectory_chars"])
        self.limits = FormatLimits(max_record_chars=self.trajectory_chars)
        Path(ctx.state_dir).mkdir(parents=True, exist_ok=True)
        self.memory = TrajectoryStore(self.path(RunDirectory.TRAJECTORIES), task_filter="task_type", fsync=ctx.fsync)
        self.store = AbstractionStore(self.path(INSIGHTS_DIR), prefix="ins", fsync=ctx.fsync)

    # -- the insight list ------------------------------------------------------------------

    def votes(self, abstraction_id: str) -> int:
        return self.store.stats(abstraction_id).votes

    def insights(self) -> list[Abstraction]:
        """Active insights, most votes first; ties keep the older insight first."""
        active = [a for a in self.store if a.kind == "insight"]
        order = sorted(range(len(active)), key=lambda i: -self.votes(active[i].abstraction_id))
        return [active[i] for i in order]

    def _add(self, text: str, parents: Sequence[str], records: Sequence[int], iteration: int) -> Abstraction:
        a = self.store.add(text, kind="insight", parents=parents, created_iteration=iteration, source_records=records)
        self.store.update_stats(a.abstraction_id, votes=NEW_INSIGHT_VOTES)
        return a

    def apply_operations(
        self,
        ops: Sequence[InsightOp],
        shown: Sequence[Abstraction],
        *,
        parents: Sequence[str],
        records: Sequence[int] = (),
        iteration: int,
    ) -> dict[str, int]:
        """Apply parsed operations whose indices refer to ``shown``; returns counts per kind.

        Operations on an insight that an earlier operation of the same reply already removed are
        skipped. The cap is enforced afterwards.
        """
        if self._frozen:
            raise FrozenStateError("ExpeL is frozen (held-out evaluation may not write its state)")
        applied = {k: 0 for k in OPS}
        applied["capped"] = 0
        for op in ops:
            if op.kind == "add":
                dup = next((a for a in self.store if a.kind == "insight" and _norm(a.text) == _norm(op.text)), None)
                if dup is not None:
                    self.store.update_stats(dup.abstraction_id, votes=1)
                    applied["upvote"] += 1
                else:
                    self._add(op.text, parents, records, iteration)
                    applied["add"] += 1
                continue
            if op.index is None or not 0 <= op.index < len(shown):
                continue
            target = shown[op.index]
            aid = target.abstraction_id
            if aid not in self.store:
                continue
            if op.kind == "upvote" or (op.kind == "edit" and _norm(op.text) == _norm(target.text)):
                self.store.update_stats(aid, votes=1)
                applied["upvote"] += 1
            elif op.kind == "edit":
                old_votes = self.votes(aid)
                new = self.store.rewrite(
                    aid, op.text, created_iteration=iteration, parents=parents, source_records=tuple(records)
                )
                self.store.update_stats(new.abstraction_id, votes=old_votes + 1)
                applied["edit"] += 1
            elif op.kind == "downvote":
                st = self.store.update_stats(aid, votes=-1)
                applied["downvote"] += 1
                if st.votes <= 0:
                    self.store.retire(aid, reason="votes reached 0")
        applied["capped"] = self._enforce_cap()
        return applied

    def _enforce_cap(self) -> int:
        retired = 0
        while True:
            active = [a for a in self.store if a.kind == "insight"]
            if len(active) <= self.max_insights:
                return retired
            # lowest votes; among equals the oldest (store order is creation order)
            victim = min(range(len(active)), key=lambda i: (self.votes(active[i].abstraction_id), i))
            self.store.retire(active[victim].abstraction_id, reason=f"cap of {self.max_insights} insights")
            retired += 1

    # -- insight extraction ----------------------------------------------------------------

    def _insight_list_text(self, shown: Sequence[Abstraction]) -> str:
        return numbered_lines([a.text for a in shown]) if shown else NO_INSIGHTS

    def _operations_help(self, n_shown: int) -> str:
        note = FULL_NOTE.format(n=n_shown) if n_shown >= self.max_insights else ""
        return OPERATIONS_HELP.format(full_note=note)

    def compare_pairs(self, iteration: int) -> list[tuple[MemoryRecord, MemoryRecord]]:
        """(failure, success) pairs of one task, each holding one episode of ``iteration``:
        the iteration's episodes most recent first, one per task, each with the most recent
        opposite-outcome episode of the same task in memory."""
        usable = [r for r in self.memory if not r.outcome.infra_failure]
        latest: dict[tuple[str, bool], MemoryRecord] = {}
        for r in usable:  # memory order is chronological
            latest[(r.task.key, r.success)] = r
        pairs: list[tuple[MemoryRecord, MemoryRecord]] = []
        seen: set[str] = set()
        for r in reversed([r for r in usable if r.iteration == iteration]):
            if r.task.key in seen:
                continue
            seen.add(r.task.key)
            other = latest.get((r.task.key, not r.success))
            if other is None:
                continue
            pairs.append((r, other) if not r.success else (other, r))
            if len(pairs) >= self.max_compare_calls:
                break
        return pairs

    def success_groups(self, iteration: int) -> list[list[MemoryRecord]]:
        """Groups of this iteration's successes: per task type, most recent first, chunked,
        taken round-robin across task types (first-seen type first)."""
        recent = [
            r
            for r in reversed(list(self.memory))
            if r.iteration == iteration and r.success and not r.outcome.infra_failure
        ]
        by_type: dict[str, list[MemoryRecord]] = {}
        for r in recent:
            by_type.setdefault(f"{r.task.benchmark}/{r.task.task_type}", []).append(r)
        chunks = {
            t: [rs[i : i + self.success_group_size] for i in range(0, len(rs), self.success_group_size)]
            for t, rs in by_type.items()
        }
        groups: list[list[MemoryRecord]] = []
        depth = 0
        while len(groups) < self.max_success_calls and any(depth < len(c) for c in chunks.values()):
            for c in chunks.values():
                if depth < len(c) and len(groups) < self.max_success_calls:
                    groups.append(c[depth])
            depth += 1
        return groups

    def _extract(
        self, user: str, records: Sequence[MemoryRecord], shown: list[Abstraction], *, iteration: int, extraction: str
    ) -> dict[str, int]:
        reply = self.ctx.llm.chat(
            [{"role": "system", "content": INSIGHT_SYSTEM}, {"role": "user", "content": user}],
            purpose="insight",
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            tags={"phase": "train", "iteration": iteration, "task": records[0].task.key, "extraction": extraction},
        )
        ops = parse_operations(reply.text, len(shown))
        return self.apply_operations(
            ops,
            shown,
            parents=parents_of_records(records),
            records=[r.record_id for r in records],
            iteration=iteration,
        )

    def end_iteration(self, iteration: int) -> None:
        if self._frozen:
            raise FrozenStateError("ExpeL is frozen (held-out evaluation may not write its state)")
        with self._lock:
            for failure, success in self.compare_pairs(iteration):
                shown = self.insights()
                user = COMPARE_PROMPT.format(
                    insights=self._insight_list_text(shown),
                    instruction=" ".join(failure.task.instruction.split()),
                    failure=format_record(failure, limits=self.limits),
                    success=format_record(success, limits=self.limits),
                    operations_help=self._operations_help(len(shown)),
                )
                self._extract(user, [failure, success], shown, iteration=iteration, extraction="compare")
            for group in self.success_groups(iteration):
                shown = self.insights()
                text = "\n\n".join(
                    format_record(r, label=f"--- Success {i} ---", limits=self.limits) for i, r in enumerate(group, 1)
                )
                user = SUCCESS_PROMPT.format(
                    insights=self._insight_list_text(shown),
                    successes=text,
                    operations_help=self._operations_help(len(shown)),
                )
                self._extract(user, group, shown, iteration=iteration, extraction="all_success")

    # -- the interface ---------------------------------------------------------------------

    def prepare(
        self, task: Task, initial_observation: str, *, phase: str, iteration: int, position: int
    ) -> TaskContext:
        embedding = self.embed_task(task, initial_observation, phase, iteration)
        shown = self.insights()
        blocks: list[str] = []
        if shown:
            blocks.append(HEADER_INSIGHTS + "\n" + PREAMBLE_INSIGHTS + "\n" + numbered_lines([a.text for a in shown]))
        examples = []
        if embedding is not None and self.k_examples > 0:
            examples = self.memory.search(embedding, k=self.k_examples, task=task, success=True, role="success")
        if examples:
            body = "\n\n".join(
                format_record(r.record, label=f"--- Example {i} ---", limits=self.limits)
                for i, r in enumerate(examples, 1)
            )
            blocks.append(HEADER_EXAMPLES + "\n" + PREAMBLE_EXAMPLES + "\n\n" + body)
        return TaskContext(
            blocks=blocks,
            parents=tuple(a.abstraction_id for a in shown),
            embedding=embedding,
            meta={"n_insights": len(shown), "example_records": [r.record.record_id for r in examples]},
        )

    def learn(self, task: Task, ctx: TaskContext, episode: EpisodeResult, *, iteration: int, position: int) -> None:
        if self._frozen:
            raise FrozenStateError("ExpeL is frozen (held-out evaluation may not write its state)")
        with self._lock:
            self.memory.add(
                task,
                episode.trajectory,
                episode.outcome,
                embedding=ctx.embedding,
                parents=ctx.parents,
                iteration=iteration,
            )

    def snapshot(self, iteration: int, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.store.snapshot(path, method=self.name, iteration=iteration, n_trajectories=len(self.memory))

    def stores(self) -> list[Any]:
        return [self.memory, self.store]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "max_compare_calls": self.max_compare_calls,
            "max_success_calls": self.max_success_calls,
            "success_group_size": self.success_group_size,
            "max_insights": self.max_insights,
            "k_examples": self.k_examples,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "trajectory_chars": self.trajectory_chars,
        }
