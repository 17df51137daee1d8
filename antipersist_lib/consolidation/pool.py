"""The trajectory pool every memory builder consumes, so that regimes differ only in schedule.

The paper holds the pool fixed across Static-All, Static-Group, Stream and the episodic-only
baselines (§3, §4.2); a pool is therefore a plain list of ``PoolRecord`` (task, trajectory,
outcome) with a stable id that memory entries cite as provenance. Pools come from replaying the
engines' own expert actions (the GT expert trajectories of Table 1: 128 per type on ALFWorld) or
from the training episodes of earlier runs, and are saved as JSONL.

Kit choices where the paper is silent: an expert replay that does not end in success is skipped
and the next game of that type is drawn instead (so every record is a real success); the
heterogeneous batches interleave task types round-robin, so each batch mixes as many types as
it can; ``summarize_trajectory`` is a deterministic text rendering (no LLM) that, past its character
budget, shortens the initial observation, the step observations and then the task sentence, and drops
middle steps only when the bare actions alone do not fit (``summarize`` counts the actions kept).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.envs.expert import EXPERT_BENCHMARKS, replay
from antipersist_lib.jsonl import atomic_write_text, dumps_line
from antipersist_lib.records import EpisodeOutcome, Task, Trajectory
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.textfit import keep_ends

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolRecord:
    """One trajectory of the pool; ``rid`` is what memory entries cite in their provenance."""

    rid: str
    task: Task
    trajectory: Trajectory
    outcome: EpisodeOutcome
    source: str = ""

    @property
    def task_type(self) -> str:
        return self.task.task_type

    def to_dict(self) -> dict[str, Any]:
        return {
            "rid": self.rid,
            "source": self.source,
            "task": self.task.to_dict(),
            "trajectory": self.trajectory.to_dict(),
            "outcome": self.outcome.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PoolRecord:
        return cls(
            rid=str(d["rid"]),
            task=Task.from_dict(d["task"]),
            trajectory=Trajectory.from_dict(d["trajectory"]),
            outcome=EpisodeOutcome.from_dict(d["outcome"]),
            source=str(d.get("source", "")),
        )


def check_pool(pool: Sequence[PoolRecord], what: str = "pool") -> list[PoolRecord]:
    """The pool as a list; raises when it is empty, holds a non-record or repeats an id."""
    records = list(pool)
    if not records:
        raise ValueError(f"{what} is empty")
    seen: set[str] = set()
    for i, r in enumerate(records):
        if not isinstance(r, PoolRecord):
            raise TypeError(f"{what}[{i}] is a {type(r).__name__}, expected a PoolRecord")
        if r.rid in seen:
            raise ValueError(f"{what} holds record id {r.rid!r} twice")
        seen.add(r.rid)
    return records


# -- save / load -------------------------------------------------------------------------------


def save_pool(pool: Sequence[PoolRecord], path: str | os.PathLike[str]) -> Path:
    """One record per line, written atomically (a pool is built once, then only read)."""
    records = check_pool(pool)
    p = Path(path)
    atomic_write_text(p, b"".join(dumps_line(r.to_dict()) for r in records).decode("utf-8"))
    return p


def load_pool(path: str | os.PathLike[str]) -> list[PoolRecord]:
    """Strict reader: a pool with a damaged line would silently change every regime's input,
    so any bad line raises, naming the file and line."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read trajectory pool {p}: {exc}") from exc
    out = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(PoolRecord.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"trajectory pool {p}:{lineno}: malformed record ({exc!r})") from exc
    return check_pool(out, f"trajectory pool {p}")


# -- pools from earlier runs -------------------------------------------------------------------


def pool_from_runs(run_dirs: Iterable[str | os.PathLike[str]], successes_only: bool = True) -> list[PoolRecord]:
    """The training episodes of run directories (infrastructure failures never enter).

    Record ids are ``<run path relative to the runs' common folder>#<iteration>.<position>``,
    unique across the runs given and readable in a bank's provenance."""
    dirs = [Path(d) for d in run_dirs]
    if not dirs:
        raise ValueError("pool_from_runs needs at least one run directory")
    for d in dirs:
        if not RunDirectory(d).is_run():
            raise ValueError(f"{d} is not a run directory (no {RunDirectory.MANIFEST})")
    resolved = [d.resolve() for d in dirs]
    common = Path(os.path.commonpath(resolved)) if len(resolved) > 1 else resolved[0].parent
    out: list[PoolRecord] = []
    for d, full in zip(dirs, resolved):
        label = full.relative_to(common).as_posix() or full.name
        for i, ep in enumerate(RunDirectory(d).read_episodes("train")):
            try:
                outcome = EpisodeOutcome.from_dict(ep["outcome"])
                rec = PoolRecord(
                    rid=f"{label}#{int(ep.get('iteration', 0))}.{int(ep.get('position', i))}",
                    task=Task.from_dict(ep["task"]),
                    trajectory=Trajectory.from_dict(ep["trajectory"]),
                    outcome=outcome,
                    source=str(d),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(
                    f"{RunDirectory(d).episodes_path('train')}: episode {i} is malformed ({exc!r})"
                ) from exc
            if outcome.infra_failure or (successes_only and not outcome.success):
                continue
            out.append(rec)
    if not out:
        kind = "successful training episodes" if successes_only else "training episodes"
        raise ValueError(f"no {kind} in {', '.join(str(d) for d in dirs)}")
    return check_pool(out)


# -- expert replays ----------------------------------------------------------------------------
# ``replay`` and ``EXPERT_BENCHMARKS`` live in envs/expert.py (the agent's in-context
# demonstrations replay the same expert paths); both stay importable from here.


def expert_pool(
    benchmark: str,
    per_type: int,
    seed: int,
    *,
    types: Sequence[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    split: str = "train",
    allow_fewer: bool = False,
) -> list[PoolRecord]:
    """``per_type`` expert trajectories per task type, replayed through the engine.

    ALFWorld: games of ``split`` (default ``train``, disjoint from the held-out ``valid_unseen``)
    drawn per category in a seeded order; the game file's ``walkthrough`` is replayed. Types are
    the kit's short names (put, clean, heat, cool, examine, puttwo). ScienceWorld: the engine's
    train variations of each task name in a seeded order, replaying ``gold_actions``. A replay
    that does not succeed (or an unsolvable game) is skipped and the next candidate is drawn;
    when a type runs out of candidates the call fails unless ``allow_fewer``. TextWorldExpress: the
    training games of the kit's committed partition (the engine's train fold), replaying the engine's
    gold path; its held-out games come from the engine's test fold, so the pool never holds one."""
    if benchmark not in EXPERT_BENCHMARKS:
        raise ValueError(f"expert replay exists for {EXPERT_BENCHMARKS}, not {benchmark!r}")
    if isinstance(per_type, bool) or not isinstance(per_type, int) or per_type < 1:
        raise ValueError(f"per_type must be an integer >= 1, got {per_type!r}")
    if benchmark == "alfworld":
        return _alfworld_pool(per_type, seed, types, data_dir, split, allow_fewer)
    if data_dir is not None:
        raise ValueError("data_dir applies to alfworld only")
    if split != "train":  # the other engines' pools are their training variations / games, never held-out ones
        raise ValueError(
            f"split applies to alfworld only; {benchmark} pools come from its training tasks, got {split!r}"
        )
    if benchmark == "scienceworld":
        return _scienceworld_pool(per_type, seed, types, allow_fewer)
    return _partition_pool(benchmark, per_type, seed, types, allow_fewer)


def _draw(candidates: Sequence[Any], seed: int, key: str) -> list[Any]:
    """A seeded order of one type's candidates, independent of which other types are drawn."""
    order = list(candidates)
    random.Random(f"{seed}:{key}").shuffle(order)
    return order


def _short_of(kind: str, got: int, want: int, tried: int, allow_fewer: bool) -> None:
    if got < want and not allow_fewer:
        raise ValueError(
            f"only {got} of {want} expert replays succeeded for type {kind!r} ({tried} candidates tried); "
            "ask for fewer per type or pass allow_fewer=True"
        )


def _collect(
    out: list[PoolRecord],
    kind: str,
    candidates: Sequence[Any],
    per_type: int,
    seed: int,
    allow_fewer: bool,
    attempt: Callable[[Any, int], PoolRecord | None],
) -> None:
    """Append to ``out`` the first ``per_type`` candidates of one type (in their seeded order) whose expert replay
    succeeds; ``attempt(candidate, index)`` replays one and returns None for a failed or unusable one."""
    got = tried = 0
    for candidate in _draw(candidates, seed, kind):
        if got == per_type:
            break
        tried += 1
        record = attempt(candidate, len(out))
        if record is None:
            continue
        out.append(record)
        got += 1
    _short_of(kind, got, per_type, tried, allow_fewer)


def _alfworld_pool(
    per_type: int, seed: int, types: Sequence[str] | None, data_dir: Any, split: str, allow_fewer: bool
) -> list[PoolRecord]:
    from antipersist_lib.envs.alfworld import (
        CATEGORY_ORDER,
        ALFWorldEnvironment,
        category_of,
        instruction_from_game,
        list_games,
        read_game,
    )

    wanted = list(types) if types is not None else list(CATEGORY_ORDER)
    bad = [t for t in wanted if t not in CATEGORY_ORDER]
    if bad or not wanted:
        raise ValueError(f"unknown ALFWorld task type(s) {bad}; valid: {list(CATEGORY_ORDER)}")
    by_type: dict[str, list[str]] = {t: [] for t in wanted}
    for rel in list_games(data_dir, split):
        cat = category_of(rel)
        if cat in by_type:
            by_type[cat].append(rel)
    out: list[PoolRecord] = []
    with ALFWorldEnvironment(data_dir) as env:

        def attempt(rel: str, index: int) -> PoolRecord | None:
            game = read_game(data_dir, rel)
            if game.get("solvable") is not True:
                return None
            task = Task(index, "alfworld", category_of(rel), instruction_from_game(game), split, {"game": rel})
            traj, outcome = replay(env, task, list(game.get("walkthrough") or []))
            if not outcome.success:
                log.warning("expert replay of %s did not succeed; drawing another game", rel)
                return None
            rid = "alfworld:" + rel.removesuffix("/game.tw-pddl")
            return PoolRecord(rid, task, traj, outcome, source="expert:alfworld")

        for kind in wanted:
            _collect(out, kind, by_type[kind], per_type, seed, allow_fewer, attempt)
    return check_pool(out, "expert pool")


def _scienceworld_pool(per_type: int, seed: int, types: Sequence[str] | None, allow_fewer: bool) -> list[PoolRecord]:
    from antipersist_lib.envs.scienceworld import ScienceWorldEnvironment

    out: list[PoolRecord] = []
    with ScienceWorldEnvironment() as env:
        names = env.task_names()
        wanted = list(types) if types is not None else names
        bad = [t for t in wanted if t not in names]
        if bad or not wanted:
            raise ValueError(f"unknown ScienceWorld task name(s) {bad}; valid: {names}")

        def attempt(name: str, variation: Any, index: int) -> PoolRecord | None:
            args = {"task_name": name, "variation": int(variation)}
            task = Task(index, "scienceworld", name, env.instruction(name, variation), "train", args)
            traj, outcome = replay(env, task, env.gold_actions(task))
            if not outcome.success:
                log.warning("expert replay of %s variation %s did not succeed; drawing another", name, variation)
                return None
            return PoolRecord(f"scienceworld:{name}:{variation}", task, traj, outcome, "expert:scienceworld")

        for name in wanted:
            train, _dev, _test = env.variations(name)
            _collect(out, name, sorted(train), per_type, seed, allow_fewer, functools.partial(attempt, name))
    return check_pool(out, "expert pool")


def _partition_pool(
    benchmark: str, per_type: int, seed: int, types: Sequence[str] | None, allow_fewer: bool
) -> list[PoolRecord]:
    """Expert replays of the training tasks of the kit's committed partition of ``benchmark`` (the engines
    whose games are drawn from seeds, TextWorldExpress), each type's tried in a seeded order."""
    from antipersist_lib.envs import make_env
    from antipersist_lib.envs.expert import replay_expert
    from antipersist_lib.envs.partitions import load_partition

    train = load_partition(benchmark).train
    names = list(dict.fromkeys(t.task_type for t in train))
    wanted = list(types) if types is not None else names
    bad = [t for t in wanted if t not in names]
    if bad or not wanted:
        raise ValueError(f"unknown {benchmark} task type(s) {bad}; valid: {names}")
    out: list[PoolRecord] = []
    with make_env(benchmark) as env:

        def attempt(task: Task, _index: int) -> PoolRecord | None:
            traj, outcome = replay_expert(env, task)
            if not outcome.success:
                log.warning("expert replay of %s did not succeed; drawing another", task.key)
                return None
            return PoolRecord(f"{benchmark}:{task.key}", task, traj, outcome, f"expert:{benchmark}")

        for kind in wanted:
            _collect(out, kind, [t for t in train if t.task_type == kind], per_type, seed, allow_fewer, attempt)
    return check_pool(out, "expert pool")


# -- batches -------------------------------------------------------------------------------------


def group_by_type(pool: Sequence[PoolRecord]) -> dict[str, list[PoolRecord]]:
    """Task type -> its records in pool order; types sorted by name (a fixed group order)."""
    groups: dict[str, list[PoolRecord]] = {}
    for r in pool:
        groups.setdefault(r.task_type, []).append(r)
    return {t: groups[t] for t in sorted(groups)}


def batches(pool: Sequence[PoolRecord], size: int, homogeneous: bool, seed: int) -> list[list[PoolRecord]]:
    """Split the pool into Stream batches that cover every record exactly once.

    Homogeneous: each type's records are shuffled and cut into batches of ``size`` (a type's last
    batch may be smaller), then the batch order is shuffled, so each update sees one task type.
    Heterogeneous: each type's records are shuffled and the types interleaved round-robin before
    cutting, so each batch mixes as many types as it can (one per type when ``size`` equals the
    number of types, as in the paper's six-type ALFWorld stream)."""
    records = check_pool(pool)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"batch size must be an integer >= 1, got {size!r}")
    rng = random.Random(seed)
    groups = group_by_type(records)
    for members in groups.values():
        rng.shuffle(members)
    if homogeneous:
        out = [members[i : i + size] for members in groups.values() for i in range(0, len(members), size)]
        rng.shuffle(out)
        return out
    if len(groups) < 2 and size > 1:
        raise ValueError(f"heterogeneous batches need at least two task types; the pool has only {list(groups)}")
    kinds = list(groups)
    rng.shuffle(kinds)
    order: list[PoolRecord] = []
    for i in range(max(len(m) for m in groups.values())):
        order.extend(groups[k][i] for k in kinds if i < len(groups[k]))
    return [order[i : i + size] for i in range(0, len(order), size)]


#: per-stage sampling rules of a staged stream (``stage_batches``)
STAGE_RULES = ("one_per_type", "single_type")


def stage_batches(
    pool: Sequence[PoolRecord],
    stages: int,
    size: int,
    rule: str,
    seed: int,
    *,
    per_type_limit: int | None = None,
) -> list[list[PoolRecord]]:
    """Draw ``stages`` mini-batches from the pool, each stage independently (faulty-memories G.1, G.2).

    Unlike ``batches``, stages do not partition the pool: every stage is a fresh draw, so a record can
    return in a later stage (G.1 runs 200 stages of 6 over a 64-per-type pool). ``one_per_type``: one
    record of every task type per stage, so ``size`` must equal the number of types (G.1);
    ``single_type``: one task type chosen uniformly at random per stage, then ``size`` distinct records
    of it (G.2). ``per_type_limit`` keeps only the first N records of each type in pool order (G.1's
    n=64 subset of the n=128 pool). Draws come from one generator seeded by ``seed``."""
    records = check_pool(pool)
    for key, value in (("stages", stages), ("stage batch size", size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {value!r}")
    if rule not in STAGE_RULES:
        raise ValueError(f"stage rule must be one of {STAGE_RULES}, got {rule!r}")
    if per_type_limit is not None and (
        isinstance(per_type_limit, bool) or not isinstance(per_type_limit, int) or per_type_limit < 1
    ):
        raise ValueError(f"per_type_limit must be None or an integer >= 1, got {per_type_limit!r}")
    groups = {t: m[:per_type_limit] if per_type_limit else m for t, m in group_by_type(records).items()}
    rng = random.Random(seed)
    kinds = list(groups)
    if rule == "one_per_type":
        if size != len(kinds):
            raise ValueError(
                f"stage rule 'one_per_type' draws one record of each task type, so the batch size must equal the "
                f"number of types in the pool ({len(kinds)}: {kinds}); got batch size {size}"
            )
        return [[rng.choice(groups[k]) for k in kinds] for _ in range(stages)]
    short = {k: len(m) for k, m in groups.items() if len(m) < size}
    if short:
        raise ValueError(
            f"stage rule 'single_type' draws {size} distinct records of one task type per stage, but these types "
            f"hold fewer: {short}; lower the batch size or enlarge the pool"
        )
    return [rng.sample(groups[rng.choice(kinds)], size) for _ in range(stages)]


# -- summarized trajectory logs ------------------------------------------------------------------

#: characters kept of each step's observation and of the initial observation when the budget allows
STEP_OBSERVATION_CHARS = 200
INITIAL_OBSERVATION_CHARS = 600
#: the initial observation shrinks to this before any step's observation is clipped below its full clip
INITIAL_OBSERVATION_FLOOR = 150
#: the task sentence is cut to no fewer characters than this, and only once every observation is gone
INSTRUCTION_FLOOR = 160


@dataclass(frozen=True)
class TrajectorySummary:
    """A record's summary and how many of its actions it shows. The actions are what a consolidator
    learns the task from (the clean / heat / cool step defines an ALFWorld type), so a summary that
    could not show them all says so here: ``actions_kept < actions``."""

    text: str
    actions: int
    actions_kept: int

    @property
    def fraction_kept(self) -> float:
        return self.actions_kept / self.actions if self.actions else 1.0


def summarize_trajectory(record: PoolRecord, max_chars: int = 4000, *, with_outcome: bool = True) -> str:
    """The "Trajectory Logs (Summarized)" text of one record (``summarize``'s text)."""
    return summarize(record, max_chars, with_outcome=with_outcome).text


def summarize(record: PoolRecord, max_chars: int = 4000, *, with_outcome: bool = True) -> TrajectorySummary:
    """The "Trajectory Logs (Summarized)" text of one record: deterministic, no LLM.

    Header (task type, instruction, outcome), the initial observation and one line per step
    (``action -> observation``, each observation cut to ``STEP_OBSERVATION_CHARS``). Past ``max_chars``
    the text is compressed, never a step dropped while something else can give way, in this order and
    each only as far as needed: the initial observation down to ``INITIAL_OBSERVATION_FLOOR``; every
    step's observation, to one common clip (short observations stay whole; at 0 the line is the action
    alone); the rest of the initial observation; the task sentence down to ``INSTRUCTION_FLOOR``. Only
    when even the bare actions do not fit do middle steps give way to an "(N steps omitted)" line,
    keeping the opening and the ending, and ``actions_kept`` counts what is left. ``with_outcome=False``
    hides the outcome (ACE without ground-truth labels must judge from the observations)."""
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 200:
        raise ValueError(f"max_chars must be an integer >= 200, got {max_chars!r}")
    t, o = record.task, record.outcome
    steps = record.trajectory.steps
    initial = record.trajectory.initial_observation.strip()
    if t.instruction and initial.endswith(t.instruction):  # the engine repeats the task sentence
        initial = initial[: -len(t.instruction)]
    full = len(" ".join(t.instruction.split()))  # the task sentence's length on one line

    def head(instruction_cap: int, initial_cap: int) -> list[str]:
        lines = [f"Task type: {t.task_type}"]
        if t.instruction:
            lines.append(f"Task: {t.instruction if instruction_cap >= full else _clip(t.instruction, instruction_cap)}")
        if with_outcome:
            lines.append(f"Outcome: {'SUCCESS' if o.success else 'FAILURE'} (score {o.score:g}, {o.n_steps} steps)")
        if initial_cap >= 4:
            lines.append("Initial observation: " + _clip(initial, initial_cap))
        return lines + ["Steps:"]

    def step_lines(observation_cap: int) -> list[str]:
        out = []
        for i, s in enumerate(steps, start=1):
            line = f"{i}. {s.action or '(no command)'}{'' if s.valid else ' [invalid]'}"
            out.append(line + f" -> {_clip(s.observation, observation_cap)}" if observation_cap >= 4 else line)
        return out

    def size(instruction_cap: int, initial_cap: int, observation_cap: int) -> int:
        return len("\n".join(head(instruction_cap, initial_cap) + step_lines(observation_cap)))

    floor = min(INITIAL_OBSERVATION_FLOOR, INITIAL_OBSERVATION_CHARS)

    def fits(instruction_cap: int, initial_cap: int, observation_cap: int) -> bool:
        return size(instruction_cap, initial_cap, observation_cap) <= max_chars

    def stages() -> Iterable[tuple[int | None, int | None, int | None]]:  # lazily: most records stop at the first
        yield full, INITIAL_OBSERVATION_CHARS, STEP_OBSERVATION_CHARS
        yield (
            full,
            _largest(floor, INITIAL_OBSERVATION_CHARS, lambda c: fits(full, c, STEP_OBSERVATION_CHARS)),
            (STEP_OBSERVATION_CHARS),
        )
        yield full, floor, _largest(0, STEP_OBSERVATION_CHARS, lambda c: fits(full, floor, c))
        yield full, _largest(0, floor, lambda c: fits(full, c, 0)), 0
        yield _largest(min(INSTRUCTION_FLOOR, full), full, lambda c: fits(c, 0, 0)), 0, 0

    for instruction_cap, initial_cap, observation_cap in stages():
        if instruction_cap is None or initial_cap is None or observation_cap is None:
            continue
        if fits(instruction_cap, initial_cap, observation_cap):
            text = "\n".join(head(instruction_cap, initial_cap) + step_lines(observation_cap))
            return TrajectorySummary(text, len(steps), len(steps))
    # not even the bare actions fit: the middle steps give way, counted
    top = head(min(INSTRUCTION_FLOOR, full), 0)
    lines = step_lines(0)
    front, back = keep_ends(lines, max_chars - len("\n".join(top)) - 40)
    omitted = len(lines) - len(front) - len(back)
    body = front + ([f"... ({omitted} steps omitted) ..."] if omitted else []) + back
    text = "\n".join(top + body)
    if len(text) <= max_chars:
        return TrajectorySummary(text, len(steps), len(front) + len(back))
    cut = text[: max_chars - 3] + "..."  # a header longer than the budget: the steps the cut left whole
    whole = sum(1 for line in front + back if f"\n{line}\n" in cut + "\n")
    return TrajectorySummary(cut, len(steps), whole)


def summary_coverage(pool: Sequence[PoolRecord], max_chars: int, *, with_outcome: bool = True) -> dict[str, Any]:
    """How many of their actions the pool's summaries at ``max_chars`` show (a study's manifest records it
    per summary size): the smallest and the mean fraction, the records short of one, the actions dropped."""
    summaries = [summarize(r, max_chars, with_outcome=with_outcome) for r in check_pool(pool)]
    fractions = [s.fraction_kept for s in summaries]
    return {
        "max_chars": max_chars,
        "records": len(summaries),
        "min_fraction_kept": round(min(fractions), 4),
        "mean_fraction_kept": round(sum(fractions) / len(fractions), 4),
        "records_short": sum(1 for s in summaries if s.actions_kept < s.actions),
        "actions_dropped": sum(s.actions - s.actions_kept for s in summaries),
    }


def _largest(lo: int, hi: int, fits: Callable[[int], bool]) -> int | None:
    """The largest n in [lo, hi] with ``fits(n)`` (``fits`` holds up to some n, then never); None when none does."""
    if lo > hi or not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _clip(text: str, n: int) -> str:
    """``text`` on one line in at most ``n`` characters ("" when fewer than 4 leave no room for a word)."""
    flat = " ".join(str(text).split())
    if len(flat) <= n:
        return flat
    return flat[: n - 3] + "..." if n >= 4 else ""
