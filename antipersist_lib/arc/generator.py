"""ARC-AGI Stream tasks: one family x skill pair, seeded, with its ground-truth solver source.

``make_task(family, skill, seed)`` writes the ground-truth ``solve(grid)`` and produces every example output by
running it after ``TOOL_SOURCE``, so the solution reproduces its examples by construction; a degenerate draw is
redrawn from a derived seed (at most ``MAX_ATTEMPTS`` times, then ``TaskGenerationError``). The pools are
``train19``, ``train200``, ``train250``, ``heldout50`` and the ``fresh`` stream (paper §3-§6, App. D); each task
has 10 shown examples and 10 test grids.

The rejection rules, the balanced pair order and the seed derivation (training even, held-out odd, so ids never
collide) are in docs/faulty-memories.md, "ARC-AGI Stream" (Tasks) and "The ARC code's own readings, module by
module" (Tasks).
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from antipersist_lib.arc.families import FAMILIES, ColorPool, Family, FamilyParams, SceneContext, SceneError
from antipersist_lib.arc.grids import Grid, copy_grid, grids_equal, validate_grid
from antipersist_lib.arc.tools import SKILL_TOOLS, TOOL_SOURCE, find_objects

N_TRAIN = 10
N_TEST = 10
#: derived-seed redraws of a whole task before giving up
MAX_ATTEMPTS = 12
#: scene redraws for one example before the task attempt is abandoned
MAX_SCENE_TRIES = 30
TASK_FORMAT = 1


class TaskGenerationError(RuntimeError):
    """No acceptable task could be drawn for a family x skill x seed within the redraw budget."""


class TaskFormatError(ValueError):
    """A serialized task is malformed; the message names the field."""


# -- skills -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Skill:
    """One skill of Table 6: its tool helper, hidden parameters, and what its scenes need.

    ``constants`` maps each helper keyword to the constant name it gets in the solution source.
    """

    skill_id: str
    definition: str
    style: str = "blob"
    gap: int = 1
    constants: tuple[tuple[str, str], ...] = ()
    draw: Callable[[random.Random, ColorPool], dict[str, Any]] = lambda rng, colors: {}
    margin: Callable[[dict[str, Any]], int] = lambda params: 0

    @property
    def tool(self) -> Callable[..., Grid]:
        return SKILL_TOOLS[self.skill_id]


_OFFSETS = tuple((dr, dc) for dr in range(-2, 3) for dc in range(-2, 3) if (dr, dc) != (0, 0))


def _draw_offset(rng: random.Random, colors: ColorPool) -> dict[str, Any]:
    dr, dc = rng.choice(_OFFSETS)
    return {"dr": dr, "dc": dc}


_SKILL_LIST = (
    Skill("keep", "Retain selected objects unchanged; erase non-selected objects to background."),
    Skill(
        "border",
        "Draw a one-cell border around each selected object.",
        gap=2,
        constants=(("color", "BORDER_COLOR"),),
        draw=lambda rng, colors: {"color": colors.take()},
        margin=lambda params: 1,
    ),
    Skill(
        "recolor",
        "Repaint each selected object in a single new color.",
        constants=(("color", "NEW_COLOR"),),
        draw=lambda rng, colors: {"color": colors.take()},
    ),
    Skill(
        "translate",
        "Shift each selected object by a fixed offset.",
        constants=(("dr", "SHIFT_ROWS"), ("dc", "SHIFT_COLS")),
        draw=_draw_offset,
        margin=lambda params: max(abs(params["dr"]), abs(params["dc"])),
    ),
    Skill("flip_horizontal", "Mirror each selected object within its bounding box.", style="asymmetric"),
    Skill(
        "mark_center",
        "Mark the centroid cell of each selected object with a marker color.",
        constants=(("color", "MARK_COLOR"),),
        draw=lambda rng, colors: {"color": colors.take()},
    ),
    Skill("hollow", "Erase the interior of each selected object, leaving only its outer border.", style="solid"),
)

#: skill_id (paper Table 6, in the table's order) -> Skill
SKILLS: dict[str, Skill] = {skill.skill_id: skill for skill in _SKILL_LIST}
SKILL_IDS: tuple[str, ...] = tuple(SKILLS)


# -- records ----------------------------------------------------------------------------------------


@dataclass
class ArcExample:
    input: Grid
    output: Grid

    def to_dict(self) -> dict[str, Grid]:
        return {"input": copy_grid(self.input), "output": copy_grid(self.output)}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> ArcExample:
        if not isinstance(data, dict):
            raise TaskFormatError(f"{where}: expected an object with 'input' and 'output', got {type(data).__name__}")
        for key in ("input", "output"):
            if key not in data:
                raise TaskFormatError(f"{where}: missing {key!r}")
        return cls(
            input=copy_grid(validate_grid(data["input"], f"{where}.input")),
            output=copy_grid(validate_grid(data["output"], f"{where}.output")),
        )


@dataclass
class ArcTask:
    """One generated task: examples, the hidden parameters, and the ground-truth solver source.

    ``solution_source`` defines ``solve(grid)`` and needs ``TOOL_SOURCE`` prepended to run.
    ``attempt`` is which derived-seed redraw produced the task (0: the first draw was accepted).
    """

    task_id: str
    family: str
    skill: str
    seed: int
    train: list[ArcExample]
    test: list[ArcExample]
    solution_source: str
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempt: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": TASK_FORMAT,
            "task_id": self.task_id,
            "family": self.family,
            "skill": self.skill,
            "seed": self.seed,
            "attempt": self.attempt,
            "params": copy.deepcopy(self.params),
            "train": [ex.to_dict() for ex in self.train],
            "test": [ex.to_dict() for ex in self.test],
            "solution_source": self.solution_source,
        }

    @classmethod
    def from_dict(cls, data: Any) -> ArcTask:
        if not isinstance(data, dict):
            raise TaskFormatError(f"ArcTask.from_dict: expected an object, got {type(data).__name__}")
        required = ("format", "task_id", "family", "skill", "seed", "train", "test", "solution_source")
        missing = [key for key in required if key not in data]
        if missing:
            raise TaskFormatError(f"ArcTask.from_dict: missing {', '.join(map(repr, missing))}")
        if data["format"] != TASK_FORMAT:
            raise TaskFormatError(f"ArcTask.from_dict: format {data['format']!r} is not {TASK_FORMAT}")
        if data["family"] not in FAMILIES:
            raise TaskFormatError(
                f"ArcTask.from_dict: unknown family {data['family']!r}; expected one of {tuple(FAMILIES)}"
            )
        if data["skill"] not in SKILLS:
            raise TaskFormatError(f"ArcTask.from_dict: unknown skill {data['skill']!r}; expected one of {SKILL_IDS}")
        if isinstance(data["seed"], bool) or not isinstance(data["seed"], int):
            raise TaskFormatError(f"ArcTask.from_dict: seed {data['seed']!r} is not an int")
        for split in ("train", "test"):
            if not isinstance(data[split], list) or not data[split]:
                raise TaskFormatError(f"ArcTask.from_dict: {split!r} must be a non-empty list of examples")
        source = data["solution_source"]
        if not isinstance(source, str) or "def solve(" not in source:
            raise TaskFormatError("ArcTask.from_dict: solution_source must be Python source defining solve(grid)")
        params = data.get("params", {})
        if not isinstance(params, dict):
            raise TaskFormatError("ArcTask.from_dict: params must be an object")
        return cls(
            task_id=str(data["task_id"]),
            family=data["family"],
            skill=data["skill"],
            seed=data["seed"],
            train=[ArcExample.from_dict(ex, f"train[{i}]") for i, ex in enumerate(data["train"])],
            test=[ArcExample.from_dict(ex, f"test[{i}]") for i, ex in enumerate(data["test"])],
            solution_source=source,
            params=copy.deepcopy(params),
            attempt=int(data.get("attempt", 0)),
        )


# -- solutions --------------------------------------------------------------------------------------


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from its parts (SHA-256; never Python's per-process ``hash``)."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def make_task_id(family: str, skill: str, seed: int) -> str:
    return f"{family}.{skill}.{seed}"


def build_solution_source(family: Family, skill: Skill, rule: dict[str, Any], skill_params: dict[str, Any]) -> str:
    """Ground-truth ``solve`` source: constants, the family's selector, and the skill's helper call."""
    lines = [f"# Ground truth: select with {family.strategy_id}, then apply {skill.skill_id}."]
    lines += [f"{key.upper()} = {value!r}" for key, value in rule.items()]
    lines += [f"{name} = {skill_params[key]!r}" for key, name in skill.constants]
    select_args = "".join(f", {key}={key.upper()}" for key in rule)
    tool_args = "".join(f", {key}={name}" for key, name in skill.constants)
    solve = (
        "def solve(grid):\n"
        f"    selected = {family.selector.__name__}(grid{select_args})\n"
        f"    return {skill.tool.__name__}(grid, selected{tool_args})\n"
    )
    return "\n".join(lines) + "\n\n\n" + family.selector_source.rstrip() + "\n\n\n" + solve


def solver_namespace(solution_source: str) -> dict[str, Any]:
    """Exec ``TOOL_SOURCE`` + the solution in a fresh namespace (in-process; untrusted code goes to the sandbox)."""
    namespace: dict[str, Any] = {"__name__": "arc_solution"}
    exec(compile(TOOL_SOURCE + "\n\n" + solution_source, "<arc-solution>", "exec"), namespace)
    if not callable(namespace.get("solve")):
        raise ValueError("solution source does not define solve(grid)")
    return namespace


def load_solver(solution_source: str) -> Callable[[Grid], Grid]:
    return solver_namespace(solution_source)["solve"]


def check_solution(task: ArcTask, solution_source: str | None = None) -> list[str]:
    """Which examples the solution (the task's own by default) gets wrong; empty when it solves all."""
    solve = load_solver(task.solution_source if solution_source is None else solution_source)
    problems = []
    for split, examples in (("train", task.train), ("test", task.test)):
        for i, ex in enumerate(examples):
            try:
                got = solve(copy_grid(ex.input))
            except Exception as err:  # the report names the failing example instead of stopping
                problems.append(f"{split}[{i}]: solve raised {type(err).__name__}: {err}")
                continue
            if not grids_equal(got, ex.output):
                problems.append(f"{split}[{i}]: output differs from the expected grid")
    return problems


# -- generation -------------------------------------------------------------------------------------


class _Reject(Exception):
    """This draw of the task is unacceptable; redraw from the next derived seed."""


def _lookup(registry: dict[str, Any], key: str, what: str) -> Any:
    if key not in registry:
        raise ValueError(f"unknown {what} {key!r}; expected one of {tuple(registry)}")
    return registry[key]


def make_task(family: str, skill: str, seed: int, *, n_train: int = N_TRAIN, n_test: int = N_TEST) -> ArcTask:
    """Generate the task for (family, skill, seed); the same arguments always give the same task."""
    fam = _lookup(FAMILIES, family, "family")
    sk = _lookup(SKILLS, skill, "skill")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    if n_train < 2 or n_test < 1:
        raise ValueError(f"a task needs at least 2 training and 1 test example, got n_train={n_train}, n_test={n_test}")
    reasons = []
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(derive_seed("arc-task", family, skill, seed, attempt))
        try:
            return _draw_task(fam, sk, seed, attempt, rng, n_train, n_test)
        except _Reject as err:
            reasons.append(f"attempt {attempt}: {err}")
    raise TaskGenerationError(
        f"could not generate {family} x {skill} (seed {seed}) in {MAX_ATTEMPTS} attempts; last: {reasons[-1]}"
    )


def _draw_task(
    fam: Family, sk: Skill, seed: int, attempt: int, rng: random.Random, n_train: int, n_test: int
) -> ArcTask:
    colors = ColorPool(rng)
    fparams: FamilyParams = fam.draw_params(rng, colors)
    sparams = sk.draw(rng, colors)
    source = build_solution_source(fam, sk, fparams.rule, sparams)
    namespace = solver_namespace(source)
    solve, select = namespace["solve"], namespace[fam.selector.__name__]
    ctx = SceneContext(rng, colors.palette, style=sk.style, margin=sk.margin(sparams), gap=sk.gap)
    variants = fam.schedule(rng, n_train) + fam.schedule(rng, n_test)
    examples: list[ArcExample] = []
    selected_any = False
    seen: set[str] = set()
    for index, variant in enumerate(variants):
        problem = "no scene drawn"
        for _ in range(MAX_SCENE_TRIES):
            try:
                grid = validate_grid(fam.make_scene(ctx, fparams, variant), "scene")
            except SceneError as err:
                problem = str(err)
                continue
            selection = select(copy_grid(grid), **fparams.rule)
            output = validate_grid(solve(copy_grid(grid)), "solution output")
            problem = _example_problem(fam, grid, output, selection, seen)
            if problem is None:
                seen.add(repr(grid))
                examples.append(ArcExample(input=grid, output=output))
                selected_any = selected_any or (index < n_train and bool(selection))
                break
        else:
            raise _Reject(f"example {index}: {problem}")
    if not selected_any:
        raise _Reject("the selection is empty in every training example")
    return ArcTask(
        task_id=make_task_id(fam.strategy_id, sk.skill_id, seed),
        family=fam.strategy_id,
        skill=sk.skill_id,
        seed=seed,
        train=examples[:n_train],
        test=examples[n_train:],
        solution_source=source,
        params={"family": {**fparams.rule, **fparams.scene}, "skill": dict(sparams)},
        attempt=attempt,
    )


def _example_problem(fam: Family, grid: Grid, output: Grid, selection: list[dict], seen: set[str]) -> str | None:
    """Why this example is unacceptable, or None."""
    if repr(grid) in seen:
        return "input repeats an earlier example"
    if fam.selects_subset:
        if not selection:
            return "empty selection"
        if len(selection) == len(find_objects(grid)):
            return "every object is selected, so the rule is invisible"
    if selection and grids_equal(output, grid):
        return "output equals input"
    return None


# -- pools ------------------------------------------------------------------------------------------

#: pool name -> number of tasks (paper: 19-task slice, 200- and 250-task streams, 50 held-out)
POOL_SIZES: dict[str, int] = {"train19": 19, "train200": 200, "train250": 250, "heldout50": 50}
HELDOUT_POOLS: frozenset[str] = frozenset({"heldout50"})
#: the pool of fresh tasks, sized by the stream that reads it (module docstring)
FRESH_POOL = "fresh"


@dataclass(frozen=True)
class PoolEntry:
    """One slot of a pool: what ``make_task`` is called with, and the resulting task id."""

    position: int
    family: str
    skill: str
    seed: int

    @property
    def task_id(self) -> str:
        return make_task_id(self.family, self.skill, self.seed)


def pool_plan(name: str, seed: int = 0, *, size: int | None = None) -> list[PoolEntry]:
    """The pool's family x skill x task-seed slots, in stream order, without generating any task. ``size`` is
    the length of the ``fresh`` pool (required there, refused for the fixed pools)."""
    if name == FRESH_POOL:
        if size is None or isinstance(size, bool) or size < 1:
            raise ValueError(f"the {FRESH_POOL!r} pool needs a size >= 1 (the stream's steps x tasks per step)")
        return _fresh_plan(seed, size)
    if size is not None:
        raise ValueError(f"pool {name!r} has a fixed size; only the {FRESH_POOL!r} pool takes one")
    size = _lookup(POOL_SIZES, name, "pool")
    order = random.Random(derive_seed("arc-pool-order", name, seed))
    families, skills = list(FAMILIES), list(SKILLS)
    order.shuffle(families)
    order.shuffle(skills)
    pairs = [(families[p % len(families)], skills[p % len(skills)]) for p in range(size)]
    return _numbered(name, seed, pairs, parity=1 if name in HELDOUT_POOLS else 0)


def _fresh_plan(seed: int, size: int) -> list[PoolEntry]:
    """Every family x skill pair equally often (the first ``size % 42`` pairs of a seeded order once more), then
    the whole sequence shuffled: a step's families are whatever the draw gives."""
    rng = random.Random(derive_seed("arc-pool-order", FRESH_POOL, seed))
    grid = [(f, k) for f in FAMILIES for k in SKILLS]
    rng.shuffle(grid)
    pairs = [grid[p % len(grid)] for p in range(size)]
    rng.shuffle(pairs)
    return _numbered(FRESH_POOL, seed, pairs, parity=0)


def _numbered(name: str, seed: int, pairs: list[tuple[str, str]], *, parity: int) -> list[PoolEntry]:
    """Slots with task seeds derived from the pool name, its seed and the position; ids unique in the pool."""
    entries: list[PoolEntry] = []
    used: set[str] = set()
    for position, (family, skill) in enumerate(pairs):
        task_seed = 2 * (derive_seed("arc-pool", name, seed, position) % 2**31) + parity
        entry = PoolEntry(position, family, skill, task_seed)
        while entry.task_id in used:  # keep ids unique within the pool (and the parity)
            entry = PoolEntry(position, entry.family, entry.skill, entry.seed + 2)
        used.add(entry.task_id)
        entries.append(entry)
    return entries


def task_pool(name: str, seed: int = 0, *, size: int | None = None) -> list[ArcTask]:
    """Generate every task of the pool, in stream order."""
    return [make_task(e.family, e.skill, e.seed) for e in pool_plan(name, seed, size=size)]
