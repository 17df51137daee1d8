"""An ARC-AGI Stream probe profile (``params/arc/probes_*.yaml``), its single-family subsets and its schedules.

``load_probe_profile`` reads and checks a probe profile (every unknown or malformed key named with the file) and
renders every stream's largest prompts against the named backbone's context (``probe_prompt_sizes``). Its blocks are
``profile_fields`` specs (``PROFILE``, ``OVERFIT``, ``PAIR``; the study's stream, evaluation and example blocks,
narrowed), read as the study's (``arc.study_profile.read_block``). The tasks:
``family_subset`` (one family's seen tasks) and ``make_variants`` (their variations); ``probe_tasks`` draws both
for a profile. A stream's task order and checkpoints: ``schedule`` / ``step_schedule``. The runner is
``arc.probes``; reading a probe folder back and the figures' tables, ``arc.probe_tables``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from antipersist_lib.arc import context
from antipersist_lib.arc.controller import MEMORY_SOURCES, REGIMES, SOURCES, StreamConfig
from antipersist_lib.arc.families import FAMILY_IDS
from antipersist_lib.arc.generator import N_TEST, N_TRAIN, SKILL_IDS, ArcTask, derive_seed, make_task
from antipersist_lib.arc.sandbox import SandboxLimits
from antipersist_lib.arc.study_profile import (
    BUFFER_READINGS,
    HEADER,
    check_choices,
    check_sandbox_mode,
    eval_kwargs_of,
    read_block,
    read_stream,
    stream_config_of,
)
from antipersist_lib.arc.study_profile import EVALUATION as STUDY_EVALUATION
from antipersist_lib.arc.study_profile import EXAMPLES as STUDY_EXAMPLES
from antipersist_lib.arc.study_profile import STREAM as STUDY_STREAM
from antipersist_lib.profile_fields import BOOL, CHOICE, INT, Field, Fields
from antipersist_lib.serving.profiles import named_context_length
from antipersist_lib.studies import check_backbone, checker, fail, read_profile

#: the stream name of the no-memory baseline
NO_MEMORY = "no_memory"

PROBES = ("overfit", "overwrite", "misgroup")
#: what each probe's evaluation holds: exact repetitions of seen tasks, and (overfit) their variations
REPEAT, VARIANT = "repeat", "variant"
EVAL_KINDS = (REPEAT, VARIANT)

# -- the profile's blocks, each key stated once (``profile_fields``, as ``arc.study_profile``'s); the rules between
# keys are in the readers

PROFILE = Fields(
    *HEADER,
    Field("task_examples"),  # EXAMPLES
    Field("subset_size", INT, minimum=1),  # required
    Field("variants", INT, minimum=1, default=1),
    Field("regime", default=["force"], choices=REGIMES),  # a regime or a list of distinct ones
    Field("source", CHOICE, choices=SOURCES, default="gt"),
    Field("buffer_size", INT, minimum=1, nullable=True, default=8),  # buffer_reading: batch: not null
    Field("buffer_reading", CHOICE, choices=BUFFER_READINGS, default="cap"),
    Field("stream"),  # STREAM
    Field("evaluation"),  # EVALUATION
    Field("overfit"),  # OVERFIT; at least one of the PROBES
    Field("overwrite"),  # PAIR
    Field("misgroup"),  # PAIR
    Field("no_memory", BOOL, default=True),
    Field("response_cache", BOOL, default=True),
    Field("sandbox", default="kernel"),  # check_sandbox_mode
)
#: the study's examples, with two shown examples at least
EXAMPLES = Fields(replace(STUDY_EXAMPLES["n_train"], minimum=2), STUDY_EXAMPLES["n_test"])
#: the study's stream settings, checked as the study checks them, except the task order (a probe's schedule fixes it)
STREAM = Fields(*(f for f in STUDY_STREAM.fields if f.key != "shuffle"))
EVALUATION = Fields(STUDY_EVALUATION["sources"], STUDY_EVALUATION["workers"])
OVERFIT = Fields(
    Field("family", CHOICE, choices=FAMILY_IDS, what=f"one of {list(FAMILY_IDS)}"),  # required
    Field("cycles", INT, minimum=1, default=1),
)
PAIR = Fields(
    Field("families"),  # two distinct families, required (_pair)
    Field("cycles", INT, minimum=1, default=1),
)


# -- tasks: single-family subsets and their variations --------------------------------------------------


def family_subset(
    family: str, size: int, seed: int = 0, *, n_train: int = N_TRAIN, n_test: int = N_TEST
) -> list[ArcTask]:
    """``size`` tasks of one family: skills in a seeded order of the 7 (each once per 7), even task seeds."""
    if family not in FAMILY_IDS:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILY_IDS}")
    skills = list(SKILL_IDS)
    random.Random(derive_seed("arc-probe-skills", family, seed)).shuffle(skills)
    tasks = []
    for i in range(size):
        task_seed = 2 * (derive_seed("arc-probe-subset", family, seed, i) % 2**31)
        tasks.append(make_task(family, skills[i % len(skills)], task_seed, n_train=n_train, n_test=n_test))
    return tasks


def _same_inputs(a: ArcTask, b: ArcTask) -> bool:
    return any(x.input == y.input for x in a.train + a.test for y in b.train + b.test)


def make_variants(task: ArcTask, count: int, *, n_train: int = N_TRAIN, n_test: int = N_TEST) -> list[ArcTask]:
    """``count`` variations of a seen task: same family and skill, another (odd) seed, so new rule parameters
    and new grids; a draw sharing an input grid with the seen task (or an earlier variant) is redrawn."""
    variants: list[ArcTask] = []
    attempt = 0
    while len(variants) < count:
        seed = 2 * (derive_seed("arc-probe-variant", task.task_id, attempt) % 2**31) + 1
        attempt += 1
        variant = make_task(task.family, task.skill, seed, n_train=n_train, n_test=n_test)
        if any(_same_inputs(variant, other) for other in [task, *variants]):
            continue
        variants.append(variant)
    return variants


# -- the profile ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeStream:
    """One stream of a probe: ``phases`` (each a tuple of families streamed interleaved) follow each other,
    each shown ``cycles`` times; the memory is evaluated on ``eval_families`` x ``eval_kinds``."""

    name: str
    probe: str
    regime: str
    phases: tuple[tuple[str, ...], ...]
    cycles: int
    eval_families: tuple[str, ...]
    eval_kinds: tuple[str, ...] = (REPEAT,)


@dataclass(frozen=True)
class ProbeProfile:
    path: str
    name: str
    backbone: str
    streams: tuple[ProbeStream, ...]
    subset_size: int
    variants: int = 1
    seed: int = 0
    n_train: int = N_TRAIN
    n_test: int = N_TEST
    source: str = "gt"
    buffer_size: int | None = 8
    buffer_reading: str = "cap"  # "batch": buffer_size is the fresh tasks per step, buffer uncapped (the study's)
    stream: dict[str, Any] = field(default_factory=dict)
    eval_sources: tuple[str, ...] = MEMORY_SOURCES
    eval_workers: int = 1
    no_memory: bool = True
    response_cache: bool = True
    sandbox: str = "kernel"
    backbone_options: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def limits(self) -> SandboxLimits:
        return SandboxLimits(isolation=self.sandbox)

    @property
    def capacity(self) -> int | None:
        """The episodic buffer's FIFO cap: ``buffer_size`` under "cap", none under "batch"."""
        return None if self.buffer_reading == "batch" else self.buffer_size

    @property
    def tasks_per_step(self) -> int:
        """Fresh tasks per step: ``buffer_size`` under "batch" (at most; a step never spans two cycles), else 1."""
        return int(self.buffer_size or 1) if self.buffer_reading == "batch" else 1

    def stream_config(self, spec: ProbeStream) -> StreamConfig:
        """One pass over the stream's task list (``steps=None``): the list already holds every cycle."""
        return stream_config_of(
            self.stream,
            self.limits,
            regime=spec.regime,
            source=self.source,
            buffer_size=self.capacity,
            steps=None,
            tasks_per_step=self.tasks_per_step,
            seed=self.seed,
        )

    def eval_kwargs(self) -> dict[str, Any]:
        """``evaluate``'s settings: the streams' own solver settings (``StreamConfig.evaluate_kwargs``)."""
        return eval_kwargs_of(self.stream, self.limits, self.eval_sources, self.eval_workers)

    def families(self) -> tuple[str, ...]:
        """Every family some stream shows or evaluates, in first-use order."""
        seen = [f for s in self.streams for phase in s.phases for f in phase] + [
            f for s in self.streams for f in s.eval_families
        ]
        return tuple(dict.fromkeys(seen))

    def eval_keys(self) -> tuple[tuple[str, str], ...]:
        """Every (family, kind) some stream is evaluated on: what the no-memory baseline evaluates."""
        keys = [(f, k) for s in self.streams for f in s.eval_families for k in s.eval_kinds]
        return tuple(dict.fromkeys(keys))


def _family(value: Any, key: str, path: Any) -> str:
    if value not in FAMILY_IDS:
        raise fail(path, f"{key} must be one of {list(FAMILY_IDS)}, got {value!r}")
    return str(value)


def _pair(value: Any, key: str, path: Any) -> tuple[tuple[str, str], int]:
    """A two-family probe block: its families and its cycles."""
    block = checker(path).mapping(value, key, PAIR.keys)
    if "families" not in block:
        raise fail(path, f"'{key}.families' is required: two family names (e.g. [{FAMILY_IDS[0]}, {FAMILY_IDS[1]}])")
    spec = read_block(path, block, key, PAIR)
    names = checker(path).names(spec["families"], f"{key}.families")
    if len(names) != 2:
        raise fail(path, f"'{key}.families' must name exactly two families, got {names}")
    a, b = (_family(n, f"{key}.families[]", path) for n in names)
    return (a, b), spec["cycles"]


def probe_streams(data: dict[str, Any], regimes: Sequence[str], path: Any) -> tuple[ProbeStream, ...]:
    """The streams the profile's probe blocks ask for, one set per regime."""
    overfit = overwrite = misgroup = None
    if "overfit" in data:
        block = checker(path).mapping(data["overfit"], "overfit", OVERFIT.keys)
        if "family" not in block:
            raise fail(path, f"'overfit.family' is required: one of {list(FAMILY_IDS)}")
        overfit = read_block(path, block, "overfit", OVERFIT)
    if "overwrite" in data:
        overwrite = _pair(data["overwrite"], "overwrite", path)
    if "misgroup" in data:
        misgroup = _pair(data["misgroup"], "misgroup", path)
    streams: list[ProbeStream] = []
    for regime in regimes:
        if overfit is not None:
            fam, cycles = overfit["family"], overfit["cycles"]
            streams.append(
                ProbeStream(f"overfit-{fam}-{regime}", "overfit", regime, ((fam,),), cycles, (fam,), EVAL_KINDS)
            )
        if overwrite is not None:
            (a, b), cycles = overwrite
            name = f"overwrite-{a}-then-{b}-{regime}"
            streams.append(ProbeStream(name, "overwrite", regime, ((a,), (b,)), cycles, (a, b)))
        if misgroup is not None:
            (a, b), cycles = misgroup
            streams.append(ProbeStream(f"mixed-{a}+{b}-{regime}", "misgroup", regime, ((a, b),), cycles, (a, b)))
            for fam in (a, b):
                streams.append(ProbeStream(f"only-{fam}-{regime}", "misgroup", regime, ((fam,),), cycles, (a, b)))
    return tuple(streams)


def load_probe_profile(path: str | Path, *, context_check: bool = True) -> ProbeProfile:
    """Read and check a probe profile; any unknown or malformed key is named with the file. With ``context_check``
    every stream's largest prompts are rendered and refused when they exceed the named backbone's context
    (``probe_prompt_sizes``, as the study does)."""
    path = Path(path)
    data = read_profile(path, set(PROFILE.keys))
    if "subset_size" not in data:
        raise fail(path, "'subset_size' is required: how many tasks each single-family subset holds")
    top = read_block(path, data, None, PROFILE)
    backbone = check_backbone(data, path)
    examples = read_block(path, data.get("task_examples"), "task_examples", EXAMPLES)
    regimes = check_choices(top["regime"], "regime", PROFILE["regime"], path, each=True)
    if len(set(regimes)) != len(regimes):
        raise fail(path, f"regime lists a value twice: {regimes}")
    buffer_reading, buffer_size = top["buffer_reading"], top["buffer_size"]
    if buffer_reading == "batch" and buffer_size is None:
        raise fail(path, "buffer_reading: batch reads buffer_size as the fresh tasks per step; give a number")
    if not any(p in data for p in PROBES):
        raise fail(path, f"no probe asked for: give at least one of {list(PROBES)}")
    streams = probe_streams(data, regimes, path)
    stream = read_stream(data.get("stream"), path, STREAM)
    evaluation = read_block(path, data.get("evaluation"), "evaluation", EVALUATION)
    sources = tuple(check_choices(evaluation["sources"], "evaluation.sources", EVALUATION["sources"], path))
    profile = ProbeProfile(
        path=str(path),
        name=str(data.get("name", path.stem)),
        backbone=backbone,
        streams=streams,
        subset_size=top["subset_size"],
        variants=top["variants"],
        seed=top["seed"],
        n_train=examples["n_train"],
        n_test=examples["n_test"],
        source=top["source"],
        buffer_size=buffer_size,
        buffer_reading=buffer_reading,
        stream=stream,
        eval_sources=sources,
        eval_workers=evaluation["workers"],
        no_memory=top["no_memory"],
        response_cache=top["response_cache"],
        sandbox=check_sandbox_mode(top["sandbox"], path),
        backbone_options=top["backbone_options"],
        raw=data,
    )
    for spec in streams:  # StreamConfig's own checks, with the profile named
        try:
            profile.stream_config(spec)
        except (TypeError, ValueError) as exc:
            raise fail(path, f"stream settings: {exc}") from None
    if context_check:
        try:
            context_length, model = named_context_length(profile.backbone, profile.backbone_options)
        except ValueError as exc:
            raise fail(path, f"'backbone': {exc}") from None
        if context_length is not None:
            message = context.refusal(probe_prompt_sizes(profile), int(context_length), model)
            if message is not None:
                raise fail(path, message)
    return profile


def probe_prompt_sizes(profile: ProbeProfile) -> list[context.PromptSize]:
    """Every probe stream's largest prompts (``arc.context``): the buffer as full as its whole schedule allows,
    the evaluated subsets and variations as the evaluation's tasks."""
    tasks = probe_tasks(profile)
    evaluated = [t for family in tasks.subsets for t in tasks.subsets[family] + tasks.variants.get(family, [])]
    sizes = []
    for spec in profile.streams:
        batches, _points = step_schedule(spec, tasks.subsets, profile.tasks_per_step)
        streamed = [t for batch in batches for t in batch]
        config = replace(profile.stream_config(spec), steps=len(batches))
        sizes += context.condition_prompts(spec.name, config, len(batches), streamed, evaluated, profile.eval_sources)
    return sizes


# -- schedules ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Checkpoint:
    """A cycle boundary: the memory after ``step`` stream steps, while ``phase`` was being streamed."""

    step: int
    cycle: int
    phase: str


@dataclass
class ProbeTasks:
    """The subsets (by family) and the variations of their tasks (by family, in subset order)."""

    subsets: dict[str, list[ArcTask]]
    variants: dict[str, list[ArcTask]]

    def eval_set(self, family: str, kind: str) -> list[ArcTask]:
        return list(self.subsets[family] if kind == REPEAT else self.variants[family])


def probe_tasks(profile: ProbeProfile) -> ProbeTasks:
    kw = {"n_train": profile.n_train, "n_test": profile.n_test}
    subsets = {f: family_subset(f, profile.subset_size, profile.seed, **kw) for f in profile.families()}
    with_variants = {f for s in profile.streams if VARIANT in s.eval_kinds for f in s.eval_families}
    variants = {
        f: [v for task in subsets[f] for v in make_variants(task, profile.variants, **kw)]
        for f in subsets
        if f in with_variants
    }
    return ProbeTasks(subsets, variants)


def schedule(spec: ProbeStream, subsets: dict[str, list[ArcTask]]) -> tuple[list[ArcTask], list[Checkpoint]]:
    """The stream's task list (each phase's subsets interleaved, repeated ``cycles`` times, phase after phase)
    and its checkpoints: step 0 and every cycle's last step."""
    order: list[ArcTask] = []
    points = [Checkpoint(0, 0, "")]
    cycle = 0
    for phase in spec.phases:
        lists = [subsets[f] for f in phase]
        one_cycle = [lst[i] for i in range(max(len(lst) for lst in lists)) for lst in lists if i < len(lst)]
        for _ in range(spec.cycles):
            order.extend(one_cycle)
            cycle += 1
            points.append(Checkpoint(len(order), cycle, "+".join(phase)))
    return order, points


def step_schedule(
    spec: ProbeStream, subsets: dict[str, list[ArcTask]], per_step: int = 1
) -> tuple[list[list[ArcTask]], list[Checkpoint]]:
    """``schedule`` cut into steps of up to ``per_step`` tasks, each cycle on its own (its last step may hold
    fewer), so that every checkpoint still falls on a cycle boundary; checkpoints count steps."""
    order, points = schedule(spec, subsets)
    batches: list[list[ArcTask]] = []
    ends = {0: 0}
    for before, point in zip(points, points[1:]):
        cycle_tasks = order[before.step : point.step]
        batches.extend(cycle_tasks[i : i + per_step] for i in range(0, len(cycle_tasks), per_step))
        ends[point.step] = len(batches)
    return batches, [replace(p, step=ends[p.step]) for p in points]
