"""What a consolidation study profile's largest prompts and evaluated memories will take, estimated when the profile
loads (``profile.check_profile_context``), before any call; ``context`` holds the checks made during the run.

Kept apart from ``context`` because it renders prompts with the builders themselves (``regimes.make_builder``),
and the builders use ``context`` during the run.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from antipersist_lib.consolidation.bank import MemoryBank
from antipersist_lib.consolidation.context import BUILD_FIX, MEMORY_FIX, ContextSpec, default_reserve_tokens
from antipersist_lib.consolidation.episodic import AllLogs
from antipersist_lib.consolidation.pool import PoolRecord, summarize_trajectory
from antipersist_lib.consolidation.regimes import make_builder
from antipersist_lib.context_budget import (
    CHARS_PER_TOKEN,
    messages_text,
    request_tokens,
)
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory


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
    tokens = math.ceil(chars / CHARS_PER_TOKEN) + reserve
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
