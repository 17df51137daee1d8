"""Analyses of an ARC-AGI Stream run, read back from its per-step snapshots.

Strategy lineage (App. C.1), the misclassification count (§6.1, Fig. 7(a); ``count_entry`` for the per-entry
variant), average coverage (Table 4), memory surgery (App. I) and LLM-judge labels (§6.2, App. K.2). Ids are
immutable and never reused within a run, so an id found in any snapshot names one entry.

The kit's readings (what counts as one action, the ancestry walk, surgery's per-task flips over repeats) are in
docs/faulty-memories.md, "ARC-AGI Stream" (Analyses), "Memory surgery with evaluation repeats" and "The ARC
code's own readings, module by module" (Lineage and counts).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from antipersist_lib.arc.controller import EvalResult, evaluate
from antipersist_lib.arc.generator import ArcTask
from antipersist_lib.arc.prompts import judge_messages
from antipersist_lib.arc.stores import Memory
from antipersist_lib.judge import JUDGE_LABELS, UNPARSED_LABEL, judge_entries
from antipersist_lib.serving.llm import LLMClient

PURPOSE_JUDGE = "arc_judge"


class SnapshotIndex:
    """Every strategy and episode that appeared in a run's snapshots, by id (first appearance)."""

    def __init__(self, snapshots: Iterable[dict[str, Any]]) -> None:
        self.strategies: dict[str, dict[str, Any]] = {}
        self.episodes: dict[str, dict[str, Any]] = {}
        self.snapshots = list(snapshots)
        for snap in self.snapshots:
            for entry in snap["memory"]["abstract"]["entries"]:
                self.strategies.setdefault(entry["entry_id"], entry)
            gone = snap.get("consumed", []) + snap.get("deleted", []) + snap.get("evicted", [])
            for entry in snap["memory"]["episodic"]["entries"] + gone:
                self.episodes.setdefault(entry["entry_id"], entry)

    def strategy(self, entry_id: str) -> dict[str, Any]:
        if entry_id not in self.strategies:
            raise KeyError(f"strategy {entry_id!r} is in no snapshot of this run")
        return self.strategies[entry_id]

    def episode(self, entry_id: str) -> dict[str, Any]:
        if entry_id not in self.episodes:
            raise KeyError(f"episode {entry_id!r} is in no snapshot of this run")
        return self.episodes[entry_id]


def _index(source: SnapshotIndex | Iterable[dict[str, Any]]) -> SnapshotIndex:
    return source if isinstance(source, SnapshotIndex) else SnapshotIndex(source)


@dataclass(frozen=True)
class Trajectory:
    entry_id: str
    task_id: str
    family: str
    skill: str
    step: int


@dataclass(frozen=True)
class LineageNode:
    entry_id: str
    kind: str
    created_step: int
    from_existing: tuple[str, ...]
    from_functions: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Lineage:
    """A strategy's ancestry: ``nodes`` starts with the target, then ancestors breadth-first."""

    entry_id: str
    nodes: tuple[LineageNode, ...]
    trajectories: tuple[Trajectory, ...]

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.family for t in self.trajectories))

    @property
    def task_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.task_id for t in self.trajectories))

    @property
    def chain(self) -> tuple[LineageNode, ...]:
        """C.1's chain: from the target back through each node's first ``from_existing`` parent to a root."""
        by_id = {n.entry_id: n for n in self.nodes}
        chain = [by_id[self.entry_id]]
        while chain[-1].from_existing:
            chain.append(by_id[chain[-1].from_existing[0]])
        return tuple(chain)

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry_id": self.entry_id,
            "nodes": [asdict(n) for n in self.nodes],
            "trajectories": [asdict(t) for t in self.trajectories],
            "families": list(self.families),
        }


def trace_lineage(snapshots: SnapshotIndex | Iterable[dict[str, Any]], entry_id: str) -> Lineage:
    """The ancestor strategies of ``entry_id`` and the trajectories that fed them (KeyError if unknown)."""
    index = _index(snapshots)
    nodes: list[LineageNode] = []
    trajectories: dict[str, Trajectory] = {}
    queue, seen = [entry_id], {entry_id}
    while queue:
        current = index.strategy(queue.pop(0))
        node = LineageNode(
            entry_id=current["entry_id"],
            kind=current["kind"],
            created_step=int(current.get("created_step", 0)),
            from_existing=tuple(current.get("from_existing", ())),
            from_functions=tuple(current.get("from_functions", ())),
            text=current["text"],
        )
        nodes.append(node)
        for episode_id in node.from_functions:
            ep = index.episode(episode_id)
            trajectories.setdefault(
                episode_id, Trajectory(episode_id, ep["task_id"], ep["family"], ep["skill"], int(ep.get("step", 0)))
            )
        for parent in node.from_existing:
            if parent not in seen:
                seen.add(parent)
                queue.append(parent)
    ordered = tuple(sorted(trajectories.values(), key=lambda t: (t.step, int(t.entry_id[1:]))))
    return Lineage(entry_id, tuple(nodes), ordered)


# -- misclassification (§6.1) ---------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryAction:
    """One new/merge item an extraction applied, with the families of the episodes it combines."""

    step: int
    entry_id: str
    kind: str
    families: tuple[str, ...]
    task_ids: tuple[str, ...]
    input_families: tuple[tuple[str, ...], ...] = ()  # each direct input's families (episode, or parent's ancestry)

    @property
    def misclassified(self) -> bool:
        return len(self.families) >= 2

    @property
    def misclassified_entry(self) -> bool:
        """Per entry: this action itself joins families; a mix inherited whole from one parent is not new."""
        return self.misclassified and not any(set(self.families) <= set(f) for f in self.input_families)


@dataclass(frozen=True)
class MisclassificationReport:
    count: int
    actions: tuple[MemoryAction, ...]  # every new/merge action examined, misclassified or not
    per_step: dict[int, int]  # step -> misclassified actions in that step
    count_entry: int = 0  # the per-entry variant: actions that join families themselves
    per_step_entry: dict[int, int] | None = None

    @property
    def misclassified(self) -> tuple[MemoryAction, ...]:
        return tuple(a for a in self.actions if a.misclassified)


def misclassifications(snapshots: SnapshotIndex | Iterable[dict[str, Any]]) -> MisclassificationReport:
    """Count memory actions that combine episodes of two or more families (paper Fig. 7(a))."""
    index = _index(snapshots)
    actions: list[MemoryAction] = []
    per_step: dict[int, int] = {}
    per_step_entry: dict[int, int] = {}
    for snap in index.snapshots:
        extraction = snap.get("extraction") or {}
        per_step[snap["step"]] = 0
        per_step_entry[snap["step"]] = 0
        if not extraction.get("applied"):
            continue
        for item in extraction["items"]:
            if item["kind"] == "retain":
                continue
            episodes = [index.episode(i) for i in item["from_functions_ids"]]
            parents = [trace_lineage(index, p) for p in item["from_existing_ids"]]
            families = tuple(dict.fromkeys([e["family"] for e in episodes] + [f for p in parents for f in p.families]))
            task_ids = tuple(dict.fromkeys([e["task_id"] for e in episodes] + [t for p in parents for t in p.task_ids]))
            inputs = tuple((e["family"],) for e in episodes) + tuple(p.families for p in parents)
            action = MemoryAction(snap["step"], item["entry_ids"][0], item["kind"], families, task_ids, inputs)
            actions.append(action)
            per_step[snap["step"]] += action.misclassified
            per_step_entry[snap["step"]] += action.misclassified_entry
    return MisclassificationReport(
        sum(per_step.values()), tuple(actions), per_step, sum(per_step_entry.values()), per_step_entry
    )


def average_coverage(snapshots: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Table 4's Avg. Covered / Avg. Fused / Buffer Size over a run's steps (fused over steps with entries)."""
    rows = [snap["coverage"] for snap in snapshots]
    if not rows:
        raise ValueError("average_coverage needs at least one snapshot")
    fused = [r["fused"] for r in rows if r["fused"] is not None]
    return {
        "covered": sum(r["covered"] for r in rows) / len(rows),
        "fused": sum(fused) / len(fused) if fused else None,
        "buffer_size": sum(r["buffer_size"] for r in rows) / len(rows),
        "n_steps": len(rows),
    }


# -- memory surgery (App. I) ----------------------------------------------------------------------


def task_pass_rates(result: EvalResult) -> dict[str, float]:
    """Task id -> the fraction of its evaluation repeats that passed (1.0 or 0.0 with a single repeat),
    in the order the tasks were first evaluated."""
    passes: dict[str, list[bool]] = {}
    for record in result.records:
        passes.setdefault(record.task_id, []).append(record.passed)
    return {task: sum(outcomes) / len(outcomes) for task, outcomes in passes.items()}


@dataclass(frozen=True)
class SurgeryResult:
    entry_id: str
    base: EvalResult
    ablated: EvalResult

    @property
    def delta(self) -> float:
        """Ablated minus full accuracy: positive when removing the entry helps."""
        return self.ablated.accuracy - self.base.accuracy

    def flips(self) -> dict[str, list[str]]:
        """Task ids whose pass rate over the evaluation's repeats rose (``to_pass``) or fell (``to_fail``)
        when the entry was removed.

        Kit reading: with ``evaluation.repeats`` > 1 a task's outcome is the fraction of its repeats that
        passed (``task_pass_rates``), the same mean the accuracy takes (§4: "average two repeats per
        question"), so a task flips when that fraction changes in either direction, and the summed changes
        over ``n_tasks`` equal ``delta``. With one repeat this is the plain pass/fail flip. A task the full
        memory's evaluation lacks counts as never passing there.
        """
        base = task_pass_rates(self.base)
        ablated = task_pass_rates(self.ablated)
        return {
            "to_pass": [t for t, rate in ablated.items() if rate > base.get(t, 0.0)],
            "to_fail": [t for t, rate in ablated.items() if rate < base.get(t, 0.0)],
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry_id": self.entry_id,
            "base_accuracy": self.base.accuracy,
            "ablated_accuracy": self.ablated.accuracy,
            "delta": self.delta,
            **self.flips(),
        }


def memory_surgery(
    tasks: Sequence[ArcTask],
    llm: LLMClient,
    memory: Memory,
    entry_id: str,
    *,
    baseline: EvalResult | None = None,
    **eval_kw: Any,
) -> SurgeryResult:
    """Evaluate ``memory`` with and without exactly one entry (KeyError if it is not in memory).

    Pass ``baseline`` (an ``evaluate`` result for the full memory) to reuse it across entries.
    """
    ablated_memory = memory.without(entry_id)
    base = baseline if baseline is not None else evaluate(tasks, llm, memory, **eval_kw)
    ablated = evaluate(tasks, llm, ablated_memory, **eval_kw)
    return SurgeryResult(entry_id, base, ablated)


# -- LLM-judge labels (§6.2) ----------------------------------------------------------------------


@dataclass(frozen=True)
class EntryLabel:
    entry_id: str
    label: str  # one of JUDGE_LABELS, or UNPARSED_LABEL
    reason: str = ""
    error: str | None = None


def judge_memory(
    llm: LLMClient, memory: Memory, *, temperature: float = 0.0, max_tokens: int = 1024
) -> list[EntryLabel]:
    """One judge call per abstract entry (``judge.judge_entries``); the judge sees the entry and its source
    problem types."""
    verdicts = judge_entries(
        llm,
        ((strategy.entry_id, judge_messages(strategy)) for strategy in memory.abstract),
        purpose=PURPOSE_JUDGE,
        temperature=temperature,
        max_tokens=max_tokens,
        id_tag="entry_id",
    )
    return [EntryLabel(entry_id, v.label, v.reason, v.error) for entry_id, v in verdicts]


def label_counts(labels: Iterable[EntryLabel]) -> dict[str, int]:
    """Counts per label, every label present (zero when unused), ``unparsed`` last."""
    counts = Counter(label.label for label in labels)
    return {name: counts.get(name, 0) for name in (*JUDGE_LABELS, UNPARSED_LABEL)}
