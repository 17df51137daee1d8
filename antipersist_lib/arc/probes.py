"""ARC-AGI Stream probes on single-family subsets (faulty-memories paper §6, Figs. 8(a), 8(b), 11, App. D).

The paper runs three small experiments on subsets of the ARC-AGI Stream that hold one strategy family each
(its Table 1: "Subsets For Individual Experiments"). This module builds those subsets with the kit's seeded
generator, streams them through ``controller.run_stream`` and evaluates the memory at every cycle boundary
with ``controller.evaluate``:

- **overfit** (Fig. 11, §6.3): one family's subset is fed again and again, one cycle after another. Each
  checkpoint evaluates the memory on *exact repetitions* (the seen tasks themselves) and on *variations*
  (for every seen task, new tasks of the same family and the same skill drawn with other seeds: new hidden
  parameters and new grids). The paper: repetitions stay solved, variations collapse as cycles accumulate.
- **overwrite** (Fig. 8(b), §1 "updates on one task overwrite memory of another"): family A's subset for
  ``cycles`` cycles, then family B's for as many; the memory is evaluated on A's and B's seen tasks at every
  cycle boundary, so A's curve shows what B's updates do to A.
- **misgroup** (Fig. 8(a), §6 first mechanism, misgrouping before abstraction): A's and B's subsets streamed
  interleaved, beside one stream per family alone; each is evaluated on both families' seen tasks, and the
  mixed stream's consolidations that combine episodes of both families are counted
  (``lineage.misclassifications``, the Fig. 7(a) measure).

A no-memory evaluation of every evaluated set is the baseline of all three.

``run_probes(profile, out_dir)`` reads a probe profile (``params/arc/probes_*.yaml``) and writes::

    <out_dir>/study.json                manifest: profile, backbone, endpoint (no key), versions, prompt hashes,
                                        subset and variant task ids, streams, calls, sandbox, wall time
    <out_dir>/results.csv, results.json one row per (stream, checkpoint step, evaluated family, kind)
    <out_dir>/ledger.jsonl              one line per LLM call (counts and tags, never text)
    <out_dir>/cache/                    response cache (``response_cache: true``)
    <out_dir>/streams/<name>/           config.json, snapshots.jsonl, memory.json (run_stream), evals.jsonl,
                                        stream.json (written last: the stream is complete)

Re-running resumes: a complete stream (``stream.json``) is kept, an incomplete one is cleared and re-run (its
earlier calls come from the response cache).

Kit choices where the paper is silent:

- ``buffer_size`` is read as the study reads |B| (``buffer_reading``): "batch" (the paper profile, as the study's
  paper profile) streams up to |B| fresh tasks per step into an uncapped buffer, each cycle cut on its own so
  that a step never spans two cycles and every checkpoint is a cycle boundary; "cap" (default, the recorded
  fixtures) caps the buffer at |B| with one task per step.

- A single-family subset is ``subset_size`` tasks of that family, with skills taken in a seeded order of the
  7 skills (so a subset of 7 holds each skill once) and task seeds derived from the family, the profile seed
  and the position (even seeds; variants get odd seeds, so a variant can never be a seen task).
- A variation keeps the family and the skill and redraws everything else (rule parameters such as the target
  color, the skill's color or offset, and every grid); one whose inputs equal the seen task's is redrawn.
- An exact repetition is the seen task itself, shown with its shown examples and graded on its test grids
  (as ``study``'s training slice, Fig. 2); a variation is graded the same way.
- The paper does not caption Fig. 8(a); the kit reads it as the first mechanism of §6 (misgrouping) measured on
  two single-family subsets, and Fig. 8(b) as the overwriting the introduction cites it for.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.arc import context
from antipersist_lib.arc.controller import (
    CONFIG_FILE,
    MEMORY_FILE,
    MEMORY_SOURCES,
    REGIMES,
    SNAPSHOTS_FILE,
    SOURCES,
    StreamConfig,
    evaluate,
    memory_at,
    run_stream,
)
from antipersist_lib.arc.families import FAMILY_IDS
from antipersist_lib.arc.generator import N_TEST, N_TRAIN, SKILL_IDS, ArcTask, derive_seed, make_task
from antipersist_lib.arc.lineage import misclassifications
from antipersist_lib.arc.sandbox import SandboxLimits
from antipersist_lib.arc.stores import AbstractStore, EpisodicBuffer, Memory
from antipersist_lib.arc.study import BUFFER_READINGS, check_sandbox_mode, clear_incomplete, sandbox_record
from antipersist_lib.arc.study import STREAM_KEYS as STUDY_STREAM_KEYS
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, read_json
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.serving.profiles import named_context_length
from antipersist_lib.serving.response_cache import ResponseCache
from antipersist_lib.studies import (
    BACKBONE_OPTION_KEYS,
    MANIFEST_FILE,
    StudyModels,
    check_backbone,
    check_bool,
    check_int,
    check_list,
    check_mapping,
    check_names,
    fail,
    manifest_base,
    obtain_folder,
    open_models,
    previous_wall_s,
    read_profile,
    with_restarts,
)

PROBES_FORMAT = 1
RESULTS_CSV = "results.csv"
RESULTS_JSON = "results.json"
LEDGER_FILE = "ledger.jsonl"
CACHE_DIR = "cache"
STREAMS_DIR = "streams"
EVALS_FILE = "evals.jsonl"
DONE_FILE = "stream.json"
NO_MEMORY = "no_memory"

PROBES = ("overfit", "overwrite", "misgroup")
#: what each probe's evaluation holds: exact repetitions of seen tasks, and (overfit) their variations
REPEAT, VARIANT = "repeat", "variant"
EVAL_KINDS = (REPEAT, VARIANT)

#: the paper's statements for the three figures (it prints no numbers for them), paraphrased
FIGURE11_STATEMENT = (
    "Paper (§6.3, Fig. 11): with one strategy family fed again and again across consolidation cycles, accuracy "
    "holds on exact repeats of the seen problems but collapses on simple variations of the same family as the "
    "cycles add up: the memory fits the seen instances' surface, not the family's strategy."
)
FIGURE8B_STATEMENT = (
    "Paper (§1, §6.2, Fig. 8(b)): updates made on one task overwrite the memory of another, so accuracy on "
    "the first family's problems falls while a second family is streamed."
)
FIGURE8A_STATEMENT = (
    "Paper (§6, Fig. 8(a)): the agent misgroups experiences before abstracting them, pooling episodes that do "
    "not share a rule; the kit measures it on two single-family subsets streamed together versus apart."
)

PROFILE_KEYS = {
    "name",
    "description",
    "backbone",
    "backbone_options",
    "seed",
    "task_examples",
    "subset_size",
    "variants",
    "regime",
    "source",
    "buffer_size",
    "buffer_reading",
    "stream",
    "evaluation",
    "overfit",
    "overwrite",
    "misgroup",
    "no_memory",
    "response_cache",
    "sandbox",
}
EXAMPLE_KEYS = {"n_train", "n_test"}
#: the study's stream settings, except the task order (a probe's schedule fixes it)
STREAM_KEYS = STUDY_STREAM_KEYS - {"shuffle"}
EVALUATION_KEYS = {"sources", "workers"}
OVERFIT_KEYS = {"family", "cycles"}
PAIR_KEYS = {"families", "cycles"}

RESULT_COLUMNS = (
    "stream",
    "probe",
    "regime",
    "step",
    "cycle",
    "phase",
    "eval_family",
    "eval_kind",
    "accuracy",
    "n_passed",
    "n_tasks",
    "buffer_size",
    "abstract_entries",
    "misclassified",
    "backbone",
)

#: what run_probes leaves in a stream folder (an incomplete folder holding anything else is not cleared)
_STREAM_FILES = {CONFIG_FILE, SNAPSHOTS_FILE, MEMORY_FILE, EVALS_FILE, DONE_FILE}


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
        return StreamConfig(
            regime=spec.regime,
            source=self.source,
            buffer_size=self.capacity,
            steps=None,
            tasks_per_step=self.tasks_per_step,
            seed=self.seed,
            limits=self.limits,
            **self.stream,
        )

    def eval_kwargs(self) -> dict[str, Any]:
        """``evaluate``'s settings: the streams' own solver settings (``StreamConfig.evaluate_kwargs``)."""
        return {
            **StreamConfig(limits=self.limits, **self.stream).evaluate_kwargs(),
            "sources": self.eval_sources,
            "workers": self.eval_workers,
        }

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


def _cycles(block: dict[str, Any], key: str, path: Any) -> int:
    return int(check_int(block.get("cycles", 1), f"{key}.cycles", path, minimum=1) or 1)


def _pair(block: dict[str, Any], key: str, path: Any) -> tuple[str, str]:
    if "families" not in block:
        raise fail(path, f"'{key}.families' is required: two family names (e.g. [{FAMILY_IDS[0]}, {FAMILY_IDS[1]}])")
    names = check_names(block["families"], f"{key}.families", path)
    if len(names) != 2:
        raise fail(path, f"'{key}.families' must name exactly two families, got {names}")
    a, b = (_family(n, f"{key}.families[]", path) for n in names)
    return a, b


def probe_streams(data: dict[str, Any], regimes: Sequence[str], path: Any) -> tuple[ProbeStream, ...]:
    """The streams the profile's probe blocks ask for, one set per regime."""
    streams: list[ProbeStream] = []
    for regime in regimes:
        if "overfit" in data:
            block = check_mapping(data["overfit"], "overfit", OVERFIT_KEYS, path)
            if "family" not in block:
                raise fail(path, f"'overfit.family' is required: one of {list(FAMILY_IDS)}")
            fam = _family(block["family"], "overfit.family", path)
            cycles = _cycles(block, "overfit", path)
            streams.append(
                ProbeStream(f"overfit-{fam}-{regime}", "overfit", regime, ((fam,),), cycles, (fam,), EVAL_KINDS)
            )
        if "overwrite" in data:
            block = check_mapping(data["overwrite"], "overwrite", PAIR_KEYS, path)
            a, b = _pair(block, "overwrite", path)
            cycles = _cycles(block, "overwrite", path)
            name = f"overwrite-{a}-then-{b}-{regime}"
            streams.append(ProbeStream(name, "overwrite", regime, ((a,), (b,)), cycles, (a, b)))
        if "misgroup" in data:
            block = check_mapping(data["misgroup"], "misgroup", PAIR_KEYS, path)
            a, b = _pair(block, "misgroup", path)
            cycles = _cycles(block, "misgroup", path)
            streams.append(ProbeStream(f"mixed-{a}+{b}-{regime}", "misgroup", regime, ((a, b),), cycles, (a, b)))
            for fam in (a, b):
                streams.append(ProbeStream(f"only-{fam}-{regime}", "misgroup", regime, ((fam,),), cycles, (a, b)))
    return tuple(streams)


def load_probe_profile(path: str | Path, *, context_check: bool = True) -> ProbeProfile:
    """Read and check a probe profile; any unknown or malformed key is named with the file. With ``context_check``
    every stream's largest prompts are rendered and refused when they exceed the named backbone's context
    (``probe_prompt_sizes``, as the study does)."""
    path = Path(path)
    data = read_profile(path, PROFILE_KEYS)
    backbone = check_backbone(data, path)
    options = check_mapping(data.get("backbone_options"), "backbone_options", BACKBONE_OPTION_KEYS, path)
    examples = check_mapping(data.get("task_examples"), "task_examples", EXAMPLE_KEYS, path)
    n_train = check_int(examples.get("n_train", N_TRAIN), "task_examples.n_train", path, minimum=2)
    n_test = check_int(examples.get("n_test", N_TEST), "task_examples.n_test", path, minimum=1)
    if "subset_size" not in data:
        raise fail(path, "'subset_size' is required: how many tasks each single-family subset holds")
    subset_size = check_int(data["subset_size"], "subset_size", path, minimum=1)
    variants = check_int(data.get("variants", 1), "variants", path, minimum=1)
    regimes = check_list(data.get("regime", ["force"]), "regime", path)
    for r in regimes:
        if r not in REGIMES:
            raise fail(path, f"regime: {r!r} is not one of {REGIMES}")
    if len(set(regimes)) != len(regimes):
        raise fail(path, f"regime lists a value twice: {regimes}")
    source = data.get("source", "gt")
    if source not in SOURCES:
        raise fail(path, f"source must be one of {SOURCES}, got {source!r}")
    buffer_size = check_int(data.get("buffer_size", 8), "buffer_size", path, minimum=1, optional=True)
    buffer_reading = data.get("buffer_reading", "cap")
    if buffer_reading not in BUFFER_READINGS:
        raise fail(path, f"buffer_reading must be one of {BUFFER_READINGS}, got {buffer_reading!r}")
    if buffer_reading == "batch" and buffer_size is None:
        raise fail(path, "buffer_reading: batch reads buffer_size as the fresh tasks per step; give a number")
    if not any(p in data for p in PROBES):
        raise fail(path, f"no probe asked for: give at least one of {list(PROBES)}")
    streams = probe_streams(data, regimes, path)
    stream = check_mapping(data.get("stream"), "stream", STREAM_KEYS, path)
    if "solver_memory" in stream:
        stream["solver_memory"] = tuple(check_list(stream["solver_memory"], "stream.solver_memory", path))
    evaluation = check_mapping(data.get("evaluation"), "evaluation", EVALUATION_KEYS, path)
    sources = tuple(check_list(evaluation.get("sources", list(MEMORY_SOURCES)), "evaluation.sources", path))
    bad = [s for s in sources if s not in MEMORY_SOURCES]
    if bad:
        raise fail(path, f"evaluation.sources: {bad} not in {MEMORY_SOURCES}")
    sandbox = check_sandbox_mode(data.get("sandbox", "kernel"), path)
    profile = ProbeProfile(
        path=str(path),
        name=str(data.get("name", path.stem)),
        backbone=backbone,
        streams=streams,
        subset_size=int(subset_size or 1),
        variants=int(variants or 1),
        seed=int(check_int(data.get("seed", 0), "seed", path) or 0),
        n_train=int(n_train or N_TRAIN),
        n_test=int(n_test or N_TEST),
        source=str(source),
        buffer_size=buffer_size,
        buffer_reading=str(buffer_reading),
        stream=stream,
        eval_sources=sources,
        eval_workers=int(check_int(evaluation.get("workers", 1), "evaluation.workers", path, minimum=1) or 1),
        no_memory=check_bool(data.get("no_memory", True), "no_memory", path),
        response_cache=check_bool(data.get("response_cache", True), "response_cache", path),
        sandbox=str(sandbox),
        backbone_options=options,
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


# -- running --------------------------------------------------------------------------------------


@dataclass
class ProbeResult:
    out_dir: Path
    frame: pd.DataFrame
    manifest: dict[str, Any]


def _row(
    spec: ProbeStream | None,
    point: Checkpoint,
    family: str,
    kind: str,
    accuracy: float,
    n_passed: int,
    n_tasks: int,
    snapshots: Sequence[dict[str, Any]],
    misclassified: int,
    backbone: str,
) -> dict[str, Any]:
    snap = snapshots[point.step - 1] if point.step > 0 else None
    return {
        "stream": spec.name if spec else NO_MEMORY,
        "probe": spec.probe if spec else "none",
        "regime": spec.regime if spec else "none",
        "step": point.step,
        "cycle": point.cycle,
        "phase": point.phase,
        "eval_family": family,
        "eval_kind": kind,
        "accuracy": accuracy,
        "n_passed": n_passed,
        "n_tasks": n_tasks,
        "buffer_size": len(snap["memory"]["episodic"]["entries"]) if snap else 0,
        "abstract_entries": len(snap["memory"]["abstract"]["entries"]) if snap else 0,
        "misclassified": misclassified,
        "backbone": backbone,
    }


def _run_stream(
    profile: ProbeProfile,
    spec: ProbeStream | None,
    llm: LLMClient,
    tasks: ProbeTasks,
    folder: Path,
    backbone: str,
) -> dict[str, Any]:
    """Stream ``spec`` (None: the no-memory baseline, evaluation only) and evaluate it at every checkpoint."""
    started = time.monotonic()
    calls: dict[str, int] = {}
    snapshots: list[dict[str, Any]] = []
    per_step: dict[int, int] = {}
    if spec is None:
        points, keys = [Checkpoint(0, 0, "")], profile.eval_keys()
    else:
        batches, points = step_schedule(spec, tasks.subsets, profile.tasks_per_step)
        order = [t for batch in batches for t in batch]
        result = run_stream(order, llm, profile.stream_config(spec), folder, batches=batches)
        snapshots, calls = result.snapshots, dict(result.calls)
        per_step = misclassifications(snapshots).per_step
        keys = tuple((f, k) for f in spec.eval_families for k in spec.eval_kinds)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    with JsonlWriter(folder / EVALS_FILE) as writer:
        for point in points:
            if point.step == 0:
                memory = Memory(EpisodicBuffer(capacity=profile.capacity), AbstractStore())
            else:
                memory = memory_at(snapshots[point.step - 1])
            mis = sum(n for s, n in per_step.items() if s <= point.step)
            for family, kind in keys:
                evalset = tasks.eval_set(family, kind)
                res = evaluate(evalset, llm, memory, **profile.eval_kwargs())
                calls["arc_eval"] = calls.get("arc_eval", 0) + len(evalset)
                writer.append({"step": point.step, "eval_family": family, "eval_kind": kind, **res.to_dict()})
                rows.append(
                    _row(spec, point, family, kind, res.accuracy, res.n_passed, res.n_tasks, snapshots, mis, backbone)
                )
    done = {
        "stream": asdict(spec) if spec else None,
        "checkpoints": [asdict(p) for p in points],
        "calls": calls,
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
    }
    atomic_write_json(folder / DONE_FILE, done)
    return done


def _manifest(
    profile: ProbeProfile,
    bb: StudyModels,
    tasks: ProbeTasks,
    status: str,
    started: float,
    before_s: float,
    sandbox: dict[str, Any],
    provenance: str,
    ledger: Ledger | None = None,
) -> dict[str, Any]:
    calls = Counter(r.purpose for r in ledger.records) if ledger is not None else Counter()
    m = manifest_base("arc-probes", PROBES_FORMAT, profile.path, profile.name, profile.raw, bb, status)
    wall = time.monotonic() - started
    m.update(
        {
            "provenance": provenance,
            "seed": profile.seed,
            "task_examples": {"n_train": profile.n_train, "n_test": profile.n_test},
            "subset_size": profile.subset_size,
            "variants_per_task": profile.variants,
            "source": profile.source,
            "buffer_size": profile.buffer_size,
            "buffer_reading": profile.buffer_reading,
            "streams": [asdict(s) for s in profile.streams] + ([{"name": NO_MEMORY}] if profile.no_memory else []),
            "subset_task_ids": {f: [t.task_id for t in ts] for f, ts in tasks.subsets.items()},
            "variant_task_ids": {f: [t.task_id for t in ts] for f, ts in tasks.variants.items()},
            "prompt_hashes": {k: v for k, v in prompt_hashes().items() if k.startswith("arc_")},
            "calls": dict(sorted(calls.items())),
            "cached_calls": sum(r.cached for r in ledger.records) if ledger is not None else 0,
            "sandbox": sandbox,
            "wall_s": round(wall, 1),
            "wall_s_total": round(before_s + wall, 1),
        }
    )
    return m


def run_probes(
    profile_path: str | Path,
    out_dir: str | Path,
    *,
    endpoint: Endpoint | None = None,
    backbone: str | Endpoint | None = None,
    preflight: bool = True,
    response_cache: bool | None = None,
    provenance: str = "",
    log: Any = print,
) -> ProbeResult:
    """Run (or resume) every stream of a probe profile; returns the results table and the manifest.

    ``endpoint`` / ``backbone`` as in ``study.run_study``; ``response_cache`` overrides the profile's key;
    ``provenance`` is a line recorded in the manifest and shown under every figure (e.g. that a scripted test
    model, not an LLM, produced the run)."""
    # another endpoint than the profile's backbone: its context is checked once it is open
    profile = load_probe_profile(profile_path, context_check=endpoint is None and backbone is None)
    sandbox = sandbox_record(profile)
    log(("WARNING: " if sandbox["mode"] == "unisolated" else "sandbox: ") + sandbox["description"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    before_s = previous_wall_s(out)
    tasks = probe_tasks(profile)
    use_cache = profile.response_cache if response_cache is None else response_cache
    specs: list[ProbeStream | None] = list(profile.streams) + ([None] if profile.no_memory else [])
    with open_models(
        profile.path,
        profile.backbone if backbone is None else backbone,
        out,
        backbone_options=profile.backbone_options,
        endpoint=endpoint,
        preflight=preflight,
    ) as bb:
        if bb.endpoint.context_length is not None:
            message = context.refusal(probe_prompt_sizes(profile), bb.endpoint.context_length, bb.endpoint.model)
            if message is not None:
                raise fail(profile.path, message)
        if bb.note:
            log(f"NOTE: {bb.note}")
        cache = ResponseCache(out / CACHE_DIR) if use_cache else None
        log(
            f"probes {out}: {len(specs)} stream(s), model {bb.endpoint.model} at "
            f"{bb.endpoint.base_url}, response cache {cache.root if cache is not None else 'off'}"
        )
        with Ledger(out / LEDGER_FILE) as ledger:
            llm = LLMClient(bb.endpoint, ledger=ledger, cache=cache, seed=profile.seed)
            atomic_write_json(
                out / MANIFEST_FILE,
                _manifest(profile, bb, tasks, "running", started, before_s, sandbox, provenance),
            )
            for spec in specs:
                name = spec.name if spec else NO_MEMORY
                folder = out / STREAMS_DIR / name
                if (folder / DONE_FILE).exists():
                    log(f"{name}: complete, kept")
                    continue
                bb.check_endpoints(f"probes {out}")
                log(f"{name}: started")
                t0 = time.monotonic()
                with ledger.tag(stream=name):
                    with_restarts(
                        bb,
                        f"probe stream {name}",
                        lambda s=spec, f=folder: _run_stream(profile, s, llm, tasks, f, bb.label),
                        before=lambda f=folder: clear_incomplete(f, _STREAM_FILES, "probe stream"),
                        log=log,
                    )
                log(f"{name}: done in {time.monotonic() - t0:.0f} s")
            names = [s.name if s else NO_MEMORY for s in specs]
            rows = [r for n in names for r in read_json(out / STREAMS_DIR / n / DONE_FILE)["rows"]]
            frame = _frame(rows)
            atomic_write_json(out / RESULTS_JSON, {"columns": list(RESULT_COLUMNS), "rows": rows})
            frame.to_csv(out / RESULTS_CSV, index=False)
            manifest = _manifest(profile, bb, tasks, "complete", started, before_s, sandbox, provenance, ledger)
            atomic_write_json(out / MANIFEST_FILE, manifest)
    return ProbeResult(out, frame, manifest)


def _frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    ints = ("step", "cycle", "n_passed", "n_tasks", "buffer_size", "abstract_entries", "misclassified")
    return df.astype({**{c: int for c in ints}, "accuracy": float})


# -- reading back and the figures' tables -------------------------------------------------------------


def load_probes(out_dir: str | Path | None) -> pd.DataFrame:
    """The results table of a finished probe run (an empty table for None: notebook mode "paper")."""
    if out_dir is None:
        return _frame([])
    path = Path(out_dir) / RESULTS_JSON
    if not path.exists():
        raise FileNotFoundError(f"no probe results at {path}: run `python -m antipersist_lib arc-probes` first")
    return _frame(read_json(path)["rows"])


def probes_manifest(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST_FILE
    if not path.exists():
        raise FileNotFoundError(f"no probe manifest at {path}")
    return dict(read_json(path))


def probes_note(out_dir: str | Path | None) -> str:
    """The provenance line under every probe figure: the run's own (a scripted model says so), else the weak-
    model note when it ran on the embedded default, else ""."""
    if out_dir is None:
        return ""
    man = probes_manifest(out_dir)
    return str(man.get("provenance") or man.get("note") or "")


def obtain_probes(
    mode: str,
    probes_dir: str | Path,
    *,
    profile: str | Path | None = None,
    root: str | Path | None = None,
    out_root: str | Path = "outputs/arc",
    endpoint: Endpoint | None = None,
) -> Path | None:
    """The notebook's run-or-load step, as ``study.obtain_study``: "paper" None, "load" ``probes_dir``, "run" the
    profile into ``<out_root>/<profile name>`` (resuming)."""
    return obtain_folder(
        mode,
        probes_dir,
        profile=profile,
        root=root,
        out_root=out_root,
        run=lambda prof, out: run_probes(prof, out, endpoint=endpoint),
        results_file=RESULTS_JSON,
        what="probe",
    )


def _with_baseline(df: pd.DataFrame, probe: str) -> pd.DataFrame:
    """The probe's rows with accuracy in % and the no-memory accuracy of the same (family, kind) beside them."""
    rows = df[df["probe"] == probe].copy()
    base = df[df["stream"] == NO_MEMORY].set_index(["eval_family", "eval_kind"])["accuracy"]
    rows["accuracy_pct"] = 100.0 * rows["accuracy"]
    keys = list(zip(rows["eval_family"], rows["eval_kind"]))
    rows["no_memory_pct"] = [100.0 * float(base[k]) if k in base.index else float("nan") for k in keys]
    return rows.reset_index(drop=True)


def overfit_table(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 11: per overfit stream and checkpoint, accuracy on exact repetitions and on variations."""
    cols = ["stream", "regime", "step", "cycle", "eval_family", "eval_kind", "accuracy_pct", "no_memory_pct"]
    cols += ["n_passed", "n_tasks", "abstract_entries", "buffer_size"]
    return _with_baseline(df, "overfit")[cols] if not df.empty else pd.DataFrame(columns=cols)


def overwrite_table(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 8(b): per overwrite stream and checkpoint, accuracy on each family's seen tasks, with the family
    being streamed at that point (``phase``) and the step where the second family starts (``switch_step``)."""
    cols = ["stream", "regime", "step", "cycle", "phase", "eval_family", "accuracy_pct", "no_memory_pct"]
    cols += ["n_passed", "n_tasks", "switch_step"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    rows = _with_baseline(df, "overwrite")
    switch = {}
    for name, sub in rows.groupby("stream"):
        first = sub.loc[sub["step"] > 0, "phase"].iloc[0] if (sub["step"] > 0).any() else ""
        switch[name] = int(sub.loc[(sub["step"] > 0) & (sub["phase"] == first), "step"].max())
    rows["switch_step"] = rows["stream"].map(switch)
    return rows[cols]


def misgroup_table(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 8(a): each misgroup stream's final memory evaluated on both families, beside the no-memory baseline,
    with the stream's misclassified consolidations (actions combining episodes of both families)."""
    cols = ["stream", "regime", "streamed", "eval_family", "accuracy_pct", "no_memory_pct", "misclassified"]
    cols += ["n_passed", "n_tasks", "abstract_entries"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    rows = _with_baseline(df, "misgroup")
    final = rows[rows["step"] == rows.groupby("stream")["step"].transform("max")].copy()
    final["streamed"] = final["phase"].map(lambda p: "mixed" if "+" in p else f"only {p}")
    return final[cols].reset_index(drop=True)


#: what the paper says each quantity does (its figures print no numbers), for the summaries' ``paper`` column
PAPER_EXPECTS = {
    ("overfit", REPEAT): "stays (Fig. 11)",
    ("overfit", VARIANT): "collapses (Fig. 11)",
    ("overwrite", "first"): "falls while the second family streams (Fig. 8(b))",
    ("overwrite", "second"): "not stated (the family streamed last)",
    ("misgroup", "accuracy"): "mixed below alone (misgrouped abstractions, Fig. 8(a))",
}


def overfit_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Fig. 11 beside the paper: per regime and kind, accuracy after the first and the last cycle."""
    cols = ["regime", "eval_kind", "first_cycle_pct", "last_cycle_pct", "change_pp", "no_memory_pct", "paper"]
    rows = []
    for (regime, kind), sub in table[table["cycle"] > 0].groupby(["regime", "eval_kind"], sort=False):
        sub = sub.sort_values("cycle")
        first, last = float(sub["accuracy_pct"].iloc[0]), float(sub["accuracy_pct"].iloc[-1])
        rows.append(
            [
                regime,
                kind,
                first,
                last,
                last - first,
                float(sub["no_memory_pct"].iloc[0]),
                PAPER_EXPECTS[("overfit", kind)],
            ]
        )
    return pd.DataFrame(rows, columns=cols)


def overwrite_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Fig. 8(b) beside the paper: per regime and family, accuracy when the first family's stream ends (the
    switch) and at the end of the second family's stream."""
    cols = ["regime", "eval_family", "role", "at_switch_pct", "at_end_pct", "change_pp", "no_memory_pct", "paper"]
    rows = []
    for regime, sub in table.groupby("regime", sort=False):
        switch, end = int(sub["switch_step"].iloc[0]), int(sub["step"].max())
        for i, family in enumerate(dict.fromkeys(sub["eval_family"])):
            fam = sub[sub["eval_family"] == family].set_index("step")["accuracy_pct"]
            role = "first" if i == 0 else "second"
            base = float(sub.loc[sub["eval_family"] == family, "no_memory_pct"].iloc[0])
            at_switch, at_end = float(fam[switch]), float(fam[end])
            rows.append(
                [regime, family, role, at_switch, at_end, at_end - at_switch, base, PAPER_EXPECTS[("overwrite", role)]]
            )
    return pd.DataFrame(rows, columns=cols)


def misgroup_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Fig. 8(a) beside the paper: per regime and family, the final accuracy after the mixed stream and after
    the family's own stream, and the mixed stream's cross-family memory actions."""
    cols = ["regime", "eval_family", "mixed_pct", "alone_pct", "change_pp", "mixed_misclassified", "paper"]
    rows = []
    for regime, sub in table.groupby("regime", sort=False):
        mixed = sub[sub["streamed"] == "mixed"].set_index("eval_family")
        for family in dict.fromkeys(sub["eval_family"]):
            alone = sub[(sub["streamed"] == f"only {family}") & (sub["eval_family"] == family)]
            m, a = float(mixed.loc[family, "accuracy_pct"]), float(alone["accuracy_pct"].iloc[0])
            mis = int(mixed.loc[family, "misclassified"])
            rows.append([regime, family, m, a, m - a, mis, PAPER_EXPECTS[("misgroup", "accuracy")]])
    return pd.DataFrame(rows, columns=cols)


def summary(out_dir: str | Path | None) -> dict[str, Any]:
    """What a probe run ran (for the notebook's last cell)."""
    if out_dir is None:
        return {"probes": None}
    man = probes_manifest(out_dir)
    keys = ("name", "profile_path", "backbone", "provenance", "subset_size", "variants_per_task", "task_examples")
    return {
        **{k: man.get(k) for k in keys},
        "model": man["endpoint"]["model"],
        "streams": [s["name"] for s in man["streams"]],
        "calls": man["calls"],
        "wall_s": man["wall_s"],
    }
