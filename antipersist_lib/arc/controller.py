"""The ARC-AGI Stream loop (paper §3, §5): solve, grade, record the trajectory, manage memory.

``run_stream`` solves each step's tasks against the memory as the step began, grades them in the sandbox on the
shown examples, buffers the trajectories and takes one memory decision per step under the regime (Force, Auto or
Episodic-only), appending a snapshot of both stores to ``<out_dir>/snapshots.jsonl``; ``evaluate`` grades a
memory on held-out tasks. Unparseable replies fall back as ``arc/decisions.py`` says (Force still empties the
buffer), and an existing non-empty snapshot file is refused: a run directory is never resumed.

The step, the regimes and the kit's readings are in docs/faulty-memories.md, "The ARC code's own readings,
module by module" (A step) and "When the memory decision is taken" / "Prompt variants" (``decide_on``,
``extraction_schema``, ``solver_mode``).
"""

from __future__ import annotations

import ast
import math
import random
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from antipersist_lib.arc.decisions import (
    Decision,
    StrategyChoice,
    decision_or_fallback,
    parse_extraction,
    selection_or_fallback,
)
from antipersist_lib.arc.generator import ArcTask
from antipersist_lib.arc.prompts import (
    EXTRACTION_SCHEMAS,
    SELECTED_NONE,
    SOLVER_MODES,
    decision_messages,
    extraction_messages,
    failure_banner,
    selection_messages,
    solver_messages,
)
from antipersist_lib.arc.prompts import PROMPTS as ARC_PROMPTS
from antipersist_lib.arc.sandbox import DEFAULT_LIMITS, ExampleOutcome, GradeResult, SandboxLimits, grade
from antipersist_lib.arc.stores import AbstractStore, Episode, EpisodicBuffer, Memory, Strategy, StrategyDraft
from antipersist_lib.arc.tools import TOOL_SOURCE
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.errors import ReplyParseError
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, read_jsonl
from antipersist_lib.replies import extract_code
from antipersist_lib.serving.llm import LLMClient

REGIMES = ("force", "auto", "episodic_only")
SOURCES = ("gt", "running")
MEMORY_SOURCES = ("episodic", "abstract")
SNAPSHOTS_FILE = "snapshots.jsonl"
CONFIG_FILE = "config.json"
MEMORY_FILE = "memory.json"

PURPOSE_SOLVE = "arc_solve"
PURPOSE_DECIDE = "arc_decide"
PURPOSE_EXTRACT = "arc_extract"
PURPOSE_EVAL = "arc_eval"
PURPOSE_SELECT = "arc_select"

#: when the memory decision is taken: after every step, or (App. B.3) only after a step with a passing solve
DECIDE_ON = ("every_step", "passing")


@dataclass(frozen=True)
class StreamConfig:
    """One ARC-AGI Stream run. ``buffer_size`` is the episodic capacity (paper |B| = 1 or 8; None = unbounded)."""

    regime: str = "auto"
    source: str = "gt"
    buffer_size: int | None = 8
    steps: int | None = None  # default: enough steps to see every task once
    tasks_per_step: int = 1
    seed: int = 0
    shuffle: bool = False
    history_examples: int = 1
    record_failures: bool = True
    solver_memory: tuple[str, ...] = MEMORY_SOURCES
    tool_bodies: bool = False
    temperature: float = 0.0
    solver_max_tokens: int = 4096
    manager_max_tokens: int = 4096
    limits: SandboxLimits = DEFAULT_LIMITS
    decide_on: str = "every_step"  # "passing": App. B.3's timing (decide only after a passing solve)
    extraction_schema: str = "structured"  # "flat": App. B.6's schema
    extraction_coaching: bool = True  # the kit's sentence against misgrouping in the extraction prompt (paper: none)
    solver_mode: str = "direct"  # "select" / "select_open": App. B.7's selection call before synthesis
    helper_usage: str = "none"  # "note" / "example": the solver prompt says how helpers return (prompts.HELPER_USAGE)

    def evaluate_kwargs(self) -> dict[str, Any]:
        """``evaluate``'s solver settings, the stream's own: tool bodies, decoding, token cap, sandbox limits and
        solver mode (a study and its probes evaluate the way their streams solve)."""
        return {
            "tool_bodies": self.tool_bodies,
            "temperature": self.temperature,
            "max_tokens": self.solver_max_tokens,
            "limits": self.limits,
            "solver_mode": self.solver_mode,
            "helper_usage": self.helper_usage,
        }

    def __post_init__(self) -> None:
        if self.regime not in REGIMES:
            raise ValueError(f"regime must be one of {REGIMES}, got {self.regime!r}")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")
        if self.buffer_size is not None and (isinstance(self.buffer_size, bool) or self.buffer_size < 1):
            raise ValueError(f"buffer_size must be >= 1 or None, got {self.buffer_size!r}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps!r}")
        if self.tasks_per_step < 1 or self.history_examples < 1:
            raise ValueError("tasks_per_step and history_examples must be >= 1")
        for key, allowed in (
            ("decide_on", DECIDE_ON),
            ("extraction_schema", EXTRACTION_SCHEMAS),
            ("solver_mode", SOLVER_MODES),
        ):
            if getattr(self, key) not in allowed:
                raise ValueError(f"{key} must be one of {allowed}, got {getattr(self, key)!r}")
        unknown = [s for s in self.solver_memory if s not in MEMORY_SOURCES]
        if unknown:
            raise ValueError(f"solver_memory entries must be in {MEMORY_SOURCES}, got {unknown}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["solver_memory"] = list(self.solver_memory)
        return data


@dataclass(frozen=True)
class SolveRecord:
    """One solver call and its grade (family/skill for analysis only)."""

    task_id: str
    family: str
    skill: str
    passed: bool
    n_correct: int
    n_examples: int
    status: str
    code: str | None
    error: str | None = None
    repeat: int = 0  # evaluation repeat (0: the first or only one)
    selection: dict[str, Any] | None = None  # B.7: the StrategyChoice and the chosen entry id, when selecting

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StreamResult:
    config: StreamConfig
    memory: Memory
    snapshots: list[dict[str, Any]]
    snapshots_path: Path
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def solve_accuracy(self) -> float:
        """Fraction of the stream's solver calls whose code passed (the online curve's mean)."""
        solves = [s for snap in self.snapshots for s in snap["solves"]]
        return sum(s["passed"] for s in solves) / len(solves) if solves else 0.0


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    n_passed: int
    n_tasks: int
    records: tuple[SolveRecord, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "accuracy": self.accuracy,
            "n_passed": self.n_passed,
            "n_tasks": self.n_tasks,
            "records": [r.to_dict() for r in self.records],
        }


# -- solving --------------------------------------------------------------------------------------


def task_examples(task: ArcTask, split: str = "train") -> list[dict[str, Any]]:
    return [ex.to_dict() for ex in (task.train if split == "train" else task.test)]


#: the name every ground-truth selector gets when the model sees it (the real names say the family)
NEUTRAL_SELECTOR = "select_objects"


def gt_code(task: ArcTask) -> str:
    """The ground-truth solution as the model sees it: no family in sight.

    The generator's source names the family in its leading comment, in the selector's name
    (``select_if_marker``) and in the selector's docstring; the study's lineage and judge analyses compare
    what the model writes into memory with those labels, so the model must not be handed them. Here the
    comment and docstrings go, and the selector is renamed to ``NEUTRAL_SELECTOR`` (its body, the constants
    and the tool call stay, so the code still solves the task)."""
    tree = ast.parse(task.solution_source)
    selectors = {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name != "solve"}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                if isinstance(body[0].value.value, str) and len(body) > 1:
                    node.body = body[1:]
            if node.name in selectors:
                node.name = NEUTRAL_SELECTOR
        elif isinstance(node, ast.Name) and node.id in selectors:
            node.id = NEUTRAL_SELECTOR
    return ast.unparse(tree) + "\n"


def solve_task(
    task: ArcTask,
    llm: LLMClient,
    memory: Memory,
    *,
    sources: Sequence[str] = MEMORY_SOURCES,
    grade_split: str = "train",
    tool_bodies: bool = False,
    temperature: float = 0.0,
    max_tokens: int = 4096,
    limits: SandboxLimits = DEFAULT_LIMITS,
    purpose: str = PURPOSE_SOLVE,
    tags: dict[str, Any] | None = None,
    solver_mode: str = "direct",
    seed: int | None = None,
    repeat: int = 0,
    helper_usage: str = "none",
) -> tuple[SolveRecord, GradeResult]:
    """Solver prompt with the chosen memory sources, then a sandbox grade of the reply's code.

    ``solver_mode`` "select"/"select_open" first runs B.7's selection call (``select_strategy``) and shows
    only the chosen strategy in the solver's memory block. ``seed`` overrides the request seed (evaluation
    repeats differ by it, so the response cache keeps them apart)."""
    if solver_mode not in SOLVER_MODES:
        raise ValueError(f"solver_mode must be one of {SOLVER_MODES}, got {solver_mode!r}")
    strategies = list(memory.abstract) if "abstract" in sources else []
    history = list(memory.episodic) if "episodic" in sources else []
    graded_on = "shown" if grade_split == "train" else "hidden"
    tags = {"task_id": task.task_id, **(tags or {})}
    selection = None
    memory_block = None
    if solver_mode != "direct":
        choice, called = select_strategy(
            task,
            llm,
            strategies,
            allow_new=solver_mode == "select_open",
            tool_bodies=tool_bodies,
            temperature=temperature,
            max_tokens=max_tokens,
            tags=tags,
            seed=seed,
        )
        chosen = strategies[choice.index - 1] if choice.index is not None else None
        memory_block = _selected_block(chosen, choice)
        selection = {**choice.to_dict(), "called": called, "entry_id": chosen.entry_id if chosen else None}
    messages = solver_messages(
        task_examples(task),
        strategies,
        history,
        tool_bodies=tool_bodies,
        graded_on=graded_on,
        memory_block=memory_block,
        helper_usage=helper_usage,
    )
    reply = llm.chat(messages, purpose=purpose, temperature=temperature, max_tokens=max_tokens, tags=tags, seed=seed)
    code = extract_code(reply.text)
    examples = task_examples(task, grade_split)
    if code is None:
        result = _no_code(len(examples))
    else:
        result = grade(code, examples, preamble=TOOL_SOURCE, limits=limits)
    record = SolveRecord(
        task_id=task.task_id,
        family=task.family,
        skill=task.skill,
        passed=result.passed,
        n_correct=result.n_correct,
        n_examples=result.n_examples,
        status=result.status,
        code=code,
        error=result.error,
        repeat=repeat,
        selection=selection,
    )
    return record, result


def select_strategy(
    task: ArcTask,
    llm: LLMClient,
    strategies: Sequence[Strategy],
    *,
    allow_new: bool = False,
    tool_bodies: bool = False,
    temperature: float = 0.0,
    max_tokens: int = 4096,
    tags: dict[str, Any] | None = None,
    seed: int | None = None,
) -> tuple[StrategyChoice, bool]:
    """B.7's selection call on half the task's shown examples; (choice, whether a call was made).

    With an empty strategy memory the closed variant has nothing to name and makes no call (recorded as
    ``skipped``); the open variant still asks, since it may propose a strategy."""
    if not strategies and not allow_new:
        return StrategyChoice(None, "", "skipped"), False
    reply = llm.chat(
        selection_messages(task_examples(task), strategies, tool_bodies=tool_bodies, allow_new=allow_new),
        purpose=PURPOSE_SELECT,
        temperature=temperature,
        max_tokens=max_tokens,
        tags=dict(tags or {}),
        seed=seed,
    )
    return selection_or_fallback(reply.text, n_strategies=len(strategies), allow_new=allow_new), True


def _selected_block(chosen: Strategy | None, choice: StrategyChoice) -> str:
    """The synthesis prompt's memory block: the chosen stored strategy, a proposed one, or none."""
    if chosen is not None:
        return f"### Strategy {chosen.entry_id}\n{chosen.text.strip()}"
    if choice.new_text:
        return f"### Proposed strategy\n{choice.new_text}"
    return SELECTED_NONE


def _no_code(n: int) -> GradeResult:
    why = "the reply has no closed Markdown-fenced Python block"
    outcomes = tuple(ExampleOutcome(i, "not_run", why) for i in range(n))
    return GradeResult("no_code", False, 0, n, outcomes, error=why)


def make_episode(
    task: ArcTask, record: SolveRecord, result: GradeResult, config: StreamConfig, entry_id: str, step: int
) -> Episode | None:
    """The trajectory this solve adds to the buffer (None: a failure not recorded)."""
    shown = task_examples(task)[: config.history_examples]
    if config.source == "gt":
        return Episode(entry_id, task.task_id, task.family, task.skill, shown, gt_code(task), True, "", "gt", step)
    if not record.passed and not config.record_failures:
        return None
    banner = "" if record.passed else failure_banner(result, task_examples(task))
    code = record.code if record.code is not None else ""
    return Episode(entry_id, task.task_id, task.family, task.skill, shown, code, record.passed, banner, "running", step)


# -- memory management ----------------------------------------------------------------------------


def allowed_actions(regime: str) -> tuple[str, ...]:
    return {"auto": ("retain", "delete", "consolidate"), "episodic_only": ("retain", "delete")}.get(regime, ())


def consolidate(
    llm: LLMClient, memory: Memory, inputs: Sequence[Episode], step: int, config: StreamConfig, calls: Counter
) -> dict[str, Any]:
    """Run the extraction prompt on ``inputs`` and apply its plan; the snapshot's extraction record."""
    existing = list(memory.abstract)
    reply = llm.chat(
        extraction_messages(existing, inputs, schema=config.extraction_schema, coaching=config.extraction_coaching),
        purpose=PURPOSE_EXTRACT,
        temperature=config.temperature,
        max_tokens=config.manager_max_tokens,
        tags={"step": step, "regime": config.regime},
    )
    calls[PURPOSE_EXTRACT] += 1
    record: dict[str, Any] = {
        "applied": False,
        "input_ids": [e.entry_id for e in inputs],
        "existing_ids": [s.entry_id for s in existing],
        "items": [],
        "created": [],
        "retained": [],
        "dropped": [],
        "warnings": [],
        "error": None,
        "schema": config.extraction_schema,
    }
    try:
        plan = parse_extraction(
            reply.text, n_existing=len(existing), n_inputs=len(inputs), schema=config.extraction_schema
        )
    except ReplyParseError as exc:
        record["error"] = str(exc)
        return record
    drafts = [
        StrategyDraft(
            kind=item.kind,
            text=item.text,
            from_existing=tuple(existing[i - 1].entry_id for i in item.from_existing),
            from_functions=tuple(inputs[k - 1].entry_id for k in item.from_functions),
        )
        for item in plan.items
    ]
    created = iter(memory.abstract.rewrite(drafts, {e.entry_id: e for e in inputs}, step))
    for item, draft in zip(plan.items, drafts, strict=True):
        entry_ids = list(draft.from_existing) if item.kind == "retain" else [next(created).entry_id]
        record["items"].append(
            {
                **item.to_dict(),
                "from_existing_ids": list(draft.from_existing),
                "from_functions_ids": list(draft.from_functions),
                "entry_ids": entry_ids,
            }
        )
        record["retained" if item.kind == "retain" else "created"].extend(entry_ids)
    record["retained"] = list(dict.fromkeys(record["retained"]))
    record["dropped"] = [s.entry_id for s in existing if s.entry_id not in memory.abstract]
    record["warnings"] = list(plan.warnings)
    record["applied"] = True
    return record


#: the skipped decision's reason under ``decide_on: passing`` (a step without a passing solve)
NO_PASSING_SOLVE = "no solve of this step passed (decide_on: passing)"


def step_passed(graded: Sequence[tuple[ArcTask, SolveRecord, GradeResult]], config: StreamConfig) -> bool:
    """Whether a step counts as passing for ``decide_on: passing``: a GT step always does (its trajectory is
    the ground truth); a Running step does when at least one of its solves passed."""
    return config.source == "gt" or any(record.passed for _task, record, _result in graded)


def _decide(
    llm: LLMClient,
    memory: Memory,
    step: int,
    new_ids: list[str],
    config: StreamConfig,
    calls: Counter,
    *,
    passed: bool = True,
) -> Decision:
    buffer = memory.episodic
    if config.decide_on == "passing" and not passed:
        return Decision("retain", (), "skipped", reason=NO_PASSING_SOLVE)
    if config.regime == "force":
        return (
            Decision("consolidate", tuple(buffer.ids()), "forced") if len(buffer) else Decision("retain", (), "skipped")
        )
    if not len(buffer):
        return Decision("retain", (), "skipped")
    allowed = allowed_actions(config.regime)
    strategies = list(memory.abstract) if config.regime == "auto" else None
    messages = decision_messages(
        step, list(buffer), strategies, allowed=allowed, capacity=buffer.capacity, new_ids=new_ids
    )
    reply = llm.chat(
        messages,
        purpose=PURPOSE_DECIDE,
        temperature=config.temperature,
        max_tokens=config.manager_max_tokens,
        tags={"step": step, "regime": config.regime},
    )
    calls[PURPOSE_DECIDE] += 1
    return decision_or_fallback(reply.text, allowed=allowed, known_ids=buffer.ids())


def run_step(
    step: int, batch: Sequence[ArcTask], llm: LLMClient, memory: Memory, config: StreamConfig, calls: Counter
) -> dict[str, Any]:
    """One stream step; mutates ``memory`` and returns the step's snapshot record."""
    graded = []
    for task in batch:  # every task of the step sees the memory as it stood at the step's start
        record, result = solve_task(
            task,
            llm,
            memory,
            sources=config.solver_memory,
            tool_bodies=config.tool_bodies,
            temperature=config.temperature,
            max_tokens=config.solver_max_tokens,
            limits=config.limits,
            tags={"step": step, "regime": config.regime},
            solver_mode=config.solver_mode,
            helper_usage=config.helper_usage,
        )
        calls[PURPOSE_SOLVE] += 1
        if record.selection is not None and record.selection["called"]:
            calls[PURPOSE_SELECT] += 1
        graded.append((task, record, result))
    buffer = memory.episodic
    new_ids = []
    for task, record, result in graded:
        episode = make_episode(task, record, result, config, f"E{buffer.next_number}", step)
        if episode is not None:
            buffer.append(episode)
            new_ids.append(episode.entry_id)

    passed = step_passed(graded, config)
    decision = _decide(llm, memory, step, new_ids, config, calls, passed=passed)
    deleted: list[Episode] = []
    consumed: list[Episode] = []
    discarded: list[Episode] = []
    extraction = None
    if decision.action == "delete":
        deleted = buffer.remove(decision.ids)
    elif decision.action == "consolidate":
        inputs = [buffer.get(i) for i in decision.ids]
        extraction = consolidate(llm, memory, inputs, step, config, calls)
        if extraction["applied"] or config.regime == "force":
            consumed = buffer.remove(decision.ids)
    if config.regime == "force" and decision.source == "skipped" and decision.reason == NO_PASSING_SOLVE:
        discarded = buffer.clear()  # Force keeps no episode between rounds; a failing step is not distilled
    elif config.regime == "force":
        consumed += buffer.clear()
    evicted = buffer.enforce_capacity()
    return {
        "step": step,
        "regime": config.regime,
        "source": config.source,
        "solves": [r.to_dict() for _t, r, _g in graded],
        "appended": new_ids,
        "decision": decision.to_dict(),
        "extraction": extraction,
        "deleted": [e.to_dict() for e in deleted],
        "consumed": [e.to_dict() for e in consumed],
        "evicted": [e.to_dict() for e in evicted],
        "discarded": [e.to_dict() for e in discarded],
        "passed": passed,
        "memory": memory.to_dict(),
        "coverage": memory.coverage().to_dict(),
    }


def stream_batches(tasks: Sequence[ArcTask], config: StreamConfig) -> list[list[ArcTask]]:
    """The tasks of each step: the (optionally shuffled) list, cycled when ``steps`` asks for more."""
    order = list(tasks)
    if config.shuffle:
        random.Random(config.seed).shuffle(order)
    per = config.tasks_per_step
    steps = config.steps if config.steps is not None else math.ceil(len(order) / per)
    if config.steps is None:
        return [order[i * per : (i + 1) * per] for i in range(steps)]
    return [[order[(i * per + j) % len(order)] for j in range(per)] for i in range(steps)]


def run_stream(
    tasks: Sequence[ArcTask],
    llm: LLMClient,
    config: StreamConfig,
    out_dir: str | Path,
    *,
    batches: Sequence[Sequence[ArcTask]] | None = None,
) -> StreamResult:
    """Run the stream, writing ``config.json``, one snapshot per step and the final ``memory.json``.

    ``batches`` gives the steps already cut (a probe's schedule keeps each step inside one cycle); by default
    ``stream_batches`` cuts ``tasks`` by the config."""
    if not tasks:
        raise ValueError("run_stream needs at least one task")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    snapshots_path = out / SNAPSHOTS_FILE
    if snapshots_path.exists() and snapshots_path.stat().st_size > 0:
        raise FileExistsError(f"{snapshots_path} already holds a run; use a fresh out_dir")
    batches = [list(b) for b in batches] if batches is not None else stream_batches(tasks, config)
    hashes = prompt_hashes(ARC_PROMPTS)
    atomic_write_json(
        out / CONFIG_FILE,
        {"config": config.to_dict(), "task_ids": [t.task_id for t in tasks], "prompt_hashes": hashes},
    )
    memory = Memory(EpisodicBuffer(capacity=config.buffer_size), AbstractStore())
    calls: Counter = Counter()
    snapshots = []
    with JsonlWriter(snapshots_path) as writer:
        for step, batch in enumerate(batches, start=1):
            snapshot = run_step(step, batch, llm, memory, config, calls)
            writer.append(snapshot)
            snapshots.append(snapshot)
    atomic_write_json(out / MEMORY_FILE, memory.to_dict())
    return StreamResult(config, memory, snapshots, snapshots_path, dict(calls))


def load_snapshots(path: str | Path) -> list[dict[str, Any]]:
    """The per-step snapshots of a run (a run directory or its snapshots file), in step order."""
    path = Path(path)
    if path.is_dir():
        path = path / SNAPSHOTS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no snapshot file at {path}")
    return sorted((line.value for line in read_jsonl(path)), key=lambda s: s["step"])


def memory_at(snapshot: dict[str, Any]) -> Memory:
    """The memory as it stood after the snapshot's step."""
    return Memory.from_dict(snapshot["memory"])


# -- held-out evaluation ----------------------------------------------------------------------------


def evaluate(
    tasks: Sequence[ArcTask],
    llm: LLMClient,
    memory: Memory,
    *,
    sources: Sequence[str] = MEMORY_SOURCES,
    tool_bodies: bool = False,
    temperature: float = 0.0,
    max_tokens: int = 4096,
    limits: SandboxLimits = DEFAULT_LIMITS,
    workers: int = 1,
    solver_mode: str = "direct",
    repeats: int = 1,
    helper_usage: str = "none",
) -> EvalResult:
    """Solve each held-out task with ``memory`` in the solver prompt; a pass = every test grid right.

    ``sources`` restricts which stores condition the solver (App. K.1: episodic only, abstract only, both).
    ``repeats`` > 1 solves every task that many times (§4: "average two repeats per question"); repeat r > 0
    sends the request seed ``llm.seed + r`` so that its sample (and its cache entry) differs from repeat 0.
    ``accuracy`` is then the mean pass rate over all task x repeat solves, ``n_passed`` counts passing solves
    and ``n_tasks`` stays the number of tasks.
    """
    unknown = [s for s in sources if s not in MEMORY_SOURCES]
    if unknown:
        raise ValueError(f"sources must be in {MEMORY_SOURCES}, got {unknown}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats!r}")

    def one(job: tuple[ArcTask, int]) -> SolveRecord:
        task, rep = job
        seed = None if rep == 0 else int(getattr(llm, "seed", None) or 0) + rep
        record, _result = solve_task(
            task,
            llm,
            memory,
            sources=sources,
            grade_split="test",
            tool_bodies=tool_bodies,
            temperature=temperature,
            max_tokens=max_tokens,
            limits=limits,
            purpose=PURPOSE_EVAL,
            solver_mode=solver_mode,
            seed=seed,
            repeat=rep,
            helper_usage=helper_usage,
        )
        return record

    jobs = [(task, rep) for rep in range(repeats) for task in tasks]
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            records = tuple(pool.map(one, jobs))
    else:
        records = tuple(one(job) for job in jobs)
    n_passed = sum(r.passed for r in records)
    return EvalResult(n_passed / len(records) if records else 0.0, n_passed, len(tasks), records)
