"""What a consolidation study profile's largest prompts and evaluated memories will take, estimated when the profile
loads (``check_profile_context``, called by ``profile.load_study_profile``), before any call; ``context`` holds the
checks made during the run. The profile's record counts (``pool_size``, ``update_count``, ``largest_update``,
``memory_logs``) are here too: the planner counts calls with them.

Kept apart from ``context`` because it renders prompts with the builders themselves (``regimes.make_builder``),
and the builders use ``context`` during the run.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from antipersist_lib.consolidation.bank import MemoryBank
from antipersist_lib.consolidation.context import BUILD_FIX, MEMORY_FIX, REFUSE, ContextSpec, default_reserve_tokens
from antipersist_lib.consolidation.episodic import AllLogs
from antipersist_lib.consolidation.pool import PoolRecord, summarize_trajectory
from antipersist_lib.consolidation.regimes import make_builder
from antipersist_lib.envs.partitions import load_partition
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory
from antipersist_lib.serving.context_budget import (
    CHARS_PER_TOKEN,
    messages_text,
    request_tokens,
    tokens_for_chars,
)
from antipersist_lib.studies import fail

#: an FS=N builder's name (fs64: a sample of 64 trajectory logs)
FS_PATTERN = re.compile(r"fs([1-9]\d*)")


@dataclass(frozen=True)
class PromptSize:
    """One load-time estimate: a build's largest consolidation prompt (``prompt="consolidation"``: its text plus the
    reply cap) or its evaluated memory (``"memory"``: the rendered memory plus ``reserve_tokens`` for the agent's own
    prompt), against the context length of the backbone it must fit."""

    build: str  # "builder/regime", or "builder/task_switch"
    prompt: str  # "consolidation" | "memory"
    backbone: str
    records: int  # records in the prompt, or trajectory logs in the memory
    chars: int
    tokens: int  # at CHARS_PER_TOKEN characters per token, reply cap or reserve included
    context_length: int | None
    reserve_tokens: int = 0

    @property
    def fits(self) -> bool:
        return self.context_length is None or self.tokens <= self.context_length

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "fits": self.fits}


@functools.lru_cache(maxsize=16)
def upper_bound_record(chars: int) -> PoolRecord:
    """A synthetic pool record whose summary at ``chars`` (``pool.summarize_trajectory``, with and without the
    outcome line) is ``chars`` characters long: a summary's upper bound, which a real record reaches when it is long
    enough (or passes only when its bare actions alone exceed it)."""

    def record(steps: int) -> PoolRecord:
        return PoolRecord(
            "x",
            Task(0, "synthetic", "synthetic", "t" * 120),
            Trajectory("i" * 2000, tuple(Step(f"act {j}", "o" * 400) for j in range(steps))),
            EpisodeOutcome(True, 1.0, steps),
        )

    def shortest(steps: int) -> int:
        r = record(steps)
        return min(len(summarize_trajectory(r, chars)), len(summarize_trajectory(r, chars, with_outcome=False)))

    return record(max(range(chars // 150 + 2), key=shortest))


def _records(chars: int, n: int) -> list[PoolRecord]:
    base = upper_bound_record(chars)
    return [replace(base, rid=f"x{i}") for i in range(1, n + 1)]


class _Reply:
    text = "{}"


class _Recorder:
    """Stands in for a builder's model: measures every request and answers an empty JSON object, which every
    builder reads as nothing to add (or as an unparsable reply, logged and harmless)."""

    def __init__(self) -> None:
        self.chars = self.tokens = 0

    def chat(self, messages: Sequence[dict[str, Any]], **kw: Any) -> _Reply:
        needed = request_tokens(messages, int(kw.get("max_tokens") or 0))
        if needed > self.tokens:
            self.chars, self.tokens = len(messages_text(messages)), needed
        return _Reply()

    def embed_many(self, texts: Sequence[str], **kw: Any) -> list[None]:  # pragma: no cover - never two bullets
        return [None for _ in texts]


def consolidation_prompt(builder: str, options: dict[str, Any], records: int) -> tuple[int, int] | None:
    """(characters, tokens with the reply cap) of the largest request ``builder`` sends for one update of ``records``
    records, each at its upper bound (``upper_bound_record`` at the builder's summary_chars), from an empty memory:
    the builder's own code renders the prompts (ACE's rollout attempts are summarized at the same budget). None for
    a builder that calls no model. The memory's own part is left out: an LLM-written memory (ACE playbook, AWM
    workflows, DC cheatsheet, CLIN rules, Keep's kept headers) has no bound before the run; ``ContextGuard`` checks
    every real request."""
    recorder = _Recorder()
    opts = dict(options)
    if builder in ("ace", "ace_gt") and opts.get("generator") == "rollout":
        opts["rollout"] = lambda record, playbook: record
    made = make_builder(builder, llm=recorder, embedder=recorder, seed=0, **opts)
    if not made.needs_llm or records < 1:
        return None
    made.update(MemoryBank(builder), _records(made.summary_chars, records))
    return recorder.chars, recorder.tokens


def log_memory(builder: str, options: dict[str, Any], logs: int) -> int:
    """Characters of an evaluated memory of ``logs`` trajectory logs at ``builder``'s log_chars (all, fs<N>, keep),
    each at its upper bound, as the agent is shown it (``MemoryBank.render``)."""
    made = make_builder(builder, llm=_Recorder(), seed=0, **options)
    bank = AllLogs(log_chars=made.log_chars).update(MemoryBank(builder), _records(made.log_chars, max(logs, 1)))
    return len(bank.render())


def memory_sizes(
    build: str, backbone: str, logs: int, chars: int, context_length: int | None, spec: ContextSpec
) -> PromptSize:
    """An evaluated memory of ``chars`` characters beside the agent's reserve, as ``fit_bank`` measures it."""
    reserve = 0
    if context_length is not None:
        reserve = spec.reserve_tokens if spec.reserve_tokens is not None else default_reserve_tokens(context_length)
    tokens = tokens_for_chars(chars) + reserve
    return PromptSize(build, "memory", backbone, logs, chars, tokens, context_length, reserve)


def refusal(sizes: Sequence[PromptSize]) -> str | None:
    """The message naming every estimate that does not fit its backbone's context and the fixes; None when all fit."""
    over = sorted((s for s in sizes if not s.fits), key=lambda s: -s.tokens)
    if not over:
        return None
    parts = []
    for s in over[:6]:
        if s.prompt == "consolidation":
            parts.append(
                f"build {s.build}: its largest consolidation prompt ({s.records} record(s) at summary_chars, empty "
                f"memory) is about {s.chars} characters, {s.tokens} tokens with the reply cap, but {s.backbone!r} "
                f"holds {s.context_length}"
            )
        else:
            parts.append(
                f"build {s.build}: its evaluated memory ({s.records} trajectory log(s) at log_chars) is about {s.chars} "
                f"characters, {s.tokens - s.reserve_tokens} tokens, plus {s.reserve_tokens} reserved for the agent's "
                f"own prompt, but {s.backbone!r} holds {s.context_length}"
            )
    fixes = []
    if any(s.prompt == "consolidation" for s in over):
        fixes.append(f"for a consolidation prompt, {BUILD_FIX}")
    if any(s.prompt == "memory" for s in over):
        fixes.append(f"for an evaluated memory, {MEMORY_FIX}")
    return (
        f"{len(over)} estimate(s) of this study would not fit the backbone's context (at {CHARS_PER_TOKEN} characters "
        f"per token; context.overflow is 'refuse'; refused at load, before any model call): {'; '.join(parts)}. "
        f"Fix: {'; '.join(fixes)}"
    )


# -- a study profile's sizes ----------------------------------------------------------------------------------


#: pool size when the pool is read from runs or a file that do not exist yet (the kit's assumption)
ASSUMED_POOL = 64


def expert_counts(profile: Any) -> dict[str, int]:
    """Records per task type of an expert pool (``pool.expert``): per_type each, an upper bound under
    ``allow_fewer`` (ScienceWorld: at most its train variations, stored in its partition's ``drawn_with.pools``; a replay
    that fails may still leave fewer); empty for a pool of runs or a file."""
    pool = profile.pool
    if pool.kind != "expert" or not pool.per_type:
        return {}
    types = pool.types or tuple(
        dict.fromkeys(t.task_type for t in getattr(load_partition(profile.benchmark), pool.split))
    )
    if pool.allow_fewer and profile.benchmark == "scienceworld":  # a task gives what its train variations hold
        engine_pools = load_partition("scienceworld").drawn_with.get("pools", {})  # the engine's, stored
        return {t: min(pool.per_type, len(engine_pools[t][0])) if t in engine_pools else pool.per_type for t in types}
    return dict.fromkeys(types, pool.per_type)


def pool_size(profile: Any, out: Path | None = None) -> tuple[int, str]:
    """How many records the study's pool holds, and where the count comes from: expert replays (per type x task
    types, or what the split holds with ``allow_fewer``), the pool already written to ``out``, an existing
    ``pool.file``, else ``ASSUMED_POOL``."""
    pool = profile.pool
    counts = expert_counts(profile)
    if counts:
        fewer = " (at most: allow_fewer)" if pool.allow_fewer else ""
        return sum(counts.values()), f"{pool.per_type} expert replays x {len(counts)} task types{fewer}"
    for saved, what in (
        (out / "pool.jsonl" if out is not None else None, "the pool already written to"),
        (
            Path(pool.file) if pool.file else None,
            "the pool file",
        ),
    ):
        if saved is not None and saved.is_file():
            with saved.open(encoding="utf-8") as fh:
                return sum(1 for line in fh if line.strip()), f"{what} {saved}"
    return (
        ASSUMED_POOL,
        f"assumed {ASSUMED_POOL} trajectories (the pool is read from runs or a file when the study starts)",
    )


def update_count(build: Any, pool: int, n_types: int) -> int:
    """How many updates a build makes: Static-All one, Static-Group one per task type, a stream its stages or
    its batches over the pool times its passes."""
    r = build.regime
    if r.regime == "static_all":
        return 1
    if r.regime == "static_group":
        return max(n_types, 1)
    if r.stages is not None:
        return r.stages.count
    return math.ceil(pool / max(r.batch_size or 1, 1)) * r.passes


def _regime_pool(profile: Any, regime: Any, pool: int) -> int:
    """Records a regime builds from: the pool, or (``types``) those of its task types where the count is known."""
    counts = expert_counts(profile)
    if regime.types is not None and counts:
        return min(pool, sum(counts.get(t, 0) for t in regime.types))
    return pool


def largest_update(profile: Any, build: Any, pool: int) -> int:
    """Records the largest update of a build consolidates at once: Static-All the regime's whole pool,
    Static-Group its largest task type (expert replays: per_type; otherwise bounded by the whole pool), a stream
    its batch size."""
    r = build.regime
    records = _regime_pool(profile, r, pool)
    if r.regime == "static_all":
        return records
    if r.regime == "static_group":
        counts = expert_counts(profile)
        return min(records, max(counts.values())) if counts else records
    return min(records, r.batch_size or 1)


def memory_logs(profile: Any, build: Any, pool: int) -> int | None:
    """The most trajectory logs an episodic baseline's evaluated memory holds, known before the run: FS=N its N;
    All and Keep every record the regime adds (a stream: its stages' batches or the pool times its passes), plus
    what the bank it continues from holds, down to the regime's capacity when the builder is capped. None for an
    LLM-written memory (ACE playbook, AWM, DC, CLIN), which has no bound before the run (``fit_bank`` checks it)."""
    fs = FS_PATTERN.fullmatch(build.builder)
    if fs is not None:
        return int(fs.group(1))
    if build.builder not in ("all", "keep"):
        return None
    r = build.regime
    n = _regime_pool(profile, r, pool)
    if r.regime == "stream":
        n = r.stages.count * (r.batch_size or 1) if r.stages is not None else n * r.passes
    if r.initial is not None:
        n += memory_logs(profile, replace(build, regime=profile.regime(r.initial)), pool) or 0
    capped = build.builder == "all" or profile.options(build.builder).get("capped", True)
    return min(n, r.capacity) if capped and r.capacity is not None else n


def profile_prompt_sizes(profile: Any, endpoint: Any = None) -> list[PromptSize]:
    """Every build's largest consolidation prompt (``context.consolidation_prompt``: its largest update's records
    at summary_chars, the builder's own prompt, the reply cap) against the backbone that builds it, and every
    episodic baseline's evaluated memory (``memory_logs`` x log_chars, plus the reserve) against each evaluation
    backbone; the task-switch builder's batches as build "<builder>/task_switch". ``endpoint`` (an ``Endpoint``: the
    one a run really uses) replaces the study's own backbone; backbones named by a regime or ``evaluation.backbones``
    are read from their profiles. A backbone stating no context length gives sizes with ``context_length`` None."""
    named: dict[str | None, tuple[int | None, str]] = {}

    def context_of(backbone: str | None) -> tuple[int | None, str]:
        if backbone not in named:
            if backbone is None and endpoint is not None:
                named[backbone] = (endpoint.context_length, str(endpoint.model))
            else:
                from antipersist_lib.serving.profiles import named_context_length

                name = profile.backbone if backbone is None else backbone
                try:
                    named[backbone] = named_context_length(name, profile.backbone_options if backbone is None else None)
                except ValueError as exc:
                    raise fail(profile.path, f"backbone {name!r}: {exc}") from None
        return named[backbone]

    pool, _ = pool_size(profile)
    sizes = []
    for build in profile.builds():
        options = profile.options(build.builder)
        records = largest_update(profile, build, pool)
        prompt = consolidation_prompt(build.builder, options, records)
        if prompt is not None:
            length, model = context_of(build.regime.backbone)
            sizes.append(PromptSize(build.key, "consolidation", model, records, *prompt, length))
        logs = memory_logs(profile, build, pool)
        if logs is not None:
            chars = log_memory(build.builder, options, logs)
            for backbone in profile.eval_backbones or (None,):
                length, model = context_of(backbone)
                sizes.append(memory_sizes(build.key, model, logs, chars, length, profile.context))
    switch = profile.task_switch
    if switch is not None:
        prompt = consolidation_prompt(switch.builder, profile.options(switch.builder), switch.batch_size)
        if prompt is not None:
            length, model = context_of(None)
            key = f"{switch.builder}/task_switch"
            sizes.append(PromptSize(key, "consolidation", model, switch.batch_size, *prompt, length))
    return sizes


def check_profile_context(profile: Any, endpoint: Any = None) -> list[PromptSize]:
    """``profile_prompt_sizes``; under ``context.overflow: refuse`` a size past its backbone's context is refused
    (``StudyProfileError`` naming the build, the sizes and the fixes). Under ``truncate_oldest`` the sizes are
    returned (the study manifest records them) and the run cuts what does not fit."""
    sizes = profile_prompt_sizes(profile, endpoint)
    if profile.context.overflow == REFUSE:
        message = refusal(sizes)
        if message is not None:
            raise fail(profile.path, message)
    return sizes
