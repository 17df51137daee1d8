"""Context budget: a prompt is measured against the backbone's context length before it is sent.

At the paper's scale the episodic baseline "All" and any builder under Static-All put the whole pool
into one prompt (768 ALFWorld trajectories are about 0.8M characters), far beyond any backbone's
context. A server would reject or silently cut such a request; the kit instead measures every
consolidation prompt (``ContextGuard``, wrapped around a builder's model) and every evaluated memory
(``fit_bank``) first, and follows the profile's ``context.overflow`` policy:

- ``refuse`` (default): raise ``ContextOverflowError`` naming the builder, regime, prompt size,
  context length and the fixes, before any call is made;
- ``truncate_oldest``: a consolidation update drops the oldest records of its batch (batch order,
  which is pool order under Static-All) until its prompts fit; an evaluated memory drops its oldest
  entries (creation step, then bank order) until it fits beside ``reserve_tokens``. What was dropped
  is recorded in the update's history event, the bank's ``meta["context"]`` and the study manifest.

Sizes are estimated as every context check of the kit does (``antipersist_lib.context_budget``, shared
with the frozen skill layer and the ARC-AGI Stream study): ``CHARS_PER_TOKEN`` characters per token, an
over-estimate for prose, plus the reply cap (``max_tokens``) for a consolidation call. A backbone that
states no context length is not checked, and the record says so. The paper states no rule here (kit choice).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from antipersist_lib.consolidation.bank import MemoryBank
from antipersist_lib.consolidation.episodic import AllLogs
from antipersist_lib.consolidation.pool import PoolRecord, summarize_trajectory
from antipersist_lib.context_budget import (
    CHARS_PER_TOKEN,
    PromptGuard,
    estimated_tokens,
    messages_text,
    request_tokens,
)
from antipersist_lib.errors import ContextOverflowError
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory

log = logging.getLogger(__name__)

REFUSE = "refuse"
TRUNCATE_OLDEST = "truncate_oldest"
CONTEXT_POLICIES = (REFUSE, TRUNCATE_OLDEST)
#: tokens held back for the agent's own prompt (instructions, task, steps so far, reply) beside an evaluated
#: memory, when the profile does not say: a quarter of the context length, at most this many
MAX_DEFAULT_RESERVE_TOKENS = 16384


def default_reserve_tokens(context_length: int) -> int:
    return min(MAX_DEFAULT_RESERVE_TOKENS, context_length // 4)


@dataclass(frozen=True)
class ContextSpec:
    """A profile's ``context`` block: what to do when a prompt is too long, and the evaluation reserve."""

    overflow: str = REFUSE
    reserve_tokens: int | None = None  # None: ``default_reserve_tokens``

    def __post_init__(self) -> None:
        if self.overflow not in CONTEXT_POLICIES:
            raise ValueError(f"context overflow policy must be one of {CONTEXT_POLICIES}, got {self.overflow!r}")


#: what a consolidation prompt too long for its backbone can do (the call-time and the load-time refusal)
BUILD_FIX = (
    "set 'context: {overflow: truncate_oldest}' in the study profile (drops the batch's oldest records "
    "until the prompt fits), use a stream regime with a smaller batch_size, lower "
    "builder_options summary_chars or max_tokens, or use a backbone with a longer context"
)
#: what an evaluated memory too long for the agent's context can do (the evaluation-time and the load-time refusal)
MEMORY_FIX = (
    "set 'context: {overflow: truncate_oldest}' in the study profile (shows the newest entries "
    "that fit), shrink the memory (builder_options log_chars, an fs<N> sample instead of all), or use a "
    "backbone with a longer context"
)


class ContextGuard(PromptGuard):
    """Wraps a builder's model: every ``chat`` request is measured (text plus reply cap) against the
    context length and refused with ``ContextOverflowError`` when it does not fit (``PromptGuard``, the
    kit's one request check). Other attributes (``endpoint``, ``ledger``) are the wrapped client's."""

    def __init__(self, llm: Any, *, builder: str, regime: str, policy: str = REFUSE) -> None:
        super().__init__(
            llm,
            what=f"builder {builder!r} under regime {regime!r} (policy {policy!r})",
            fix=BUILD_FIX,
            kind="consolidation prompt",
        )
        self.builder = builder
        self.regime = regime
        self.policy = policy

    def record(self) -> dict[str, Any]:
        """What the bank's ``meta["context"]`` says about the check."""
        return {
            "policy": self.policy,
            "context_length": self.context_length,
            "chars_per_token": CHARS_PER_TOKEN,
            "checked": self.context_length is not None,
        }


@dataclass
class FittedBank:
    """An evaluated memory after the context check: the bank to show and what the check did."""

    bank: MemoryBank
    record: dict[str, Any]

    @property
    def truncated(self) -> bool:
        return bool(self.record.get("dropped_entries"))


def fit_bank(
    bank: MemoryBank,
    *,
    context_length: int | None,
    spec: ContextSpec,
    builder: str,
    regime: str,
    step: int,
    model: str = "?",
) -> FittedBank:
    """The memory an agent is shown, measured against ``context_length`` minus the reserve; refused or cut
    from its oldest entries by ``spec.overflow`` (module docstring)."""
    text = bank.render()
    tokens = estimated_tokens(text)
    record: dict[str, Any] = {
        "policy": spec.overflow,
        "context_length": context_length,
        "memory_chars": len(text),
        "memory_tokens": tokens,
        "dropped_entries": 0,
    }
    if context_length is None:
        record["checked"] = False
        log.warning(
            "builder %r under regime %r, step %s: the backbone %r states no context length, so whether its memory "
            "(%s characters) fits was not checked",
            builder,
            regime,
            step,
            model,
            len(text),
        )
        return FittedBank(bank, record)
    reserve = spec.reserve_tokens if spec.reserve_tokens is not None else default_reserve_tokens(context_length)
    budget = context_length - reserve
    record.update({"checked": True, "reserve_tokens": reserve, "budget_tokens": budget})
    if tokens <= budget:
        return FittedBank(bank, record)
    if spec.overflow == REFUSE:
        raise ContextOverflowError(
            f"builder {builder!r} under regime {regime!r}, step {step}: its memory is {len(text)} characters (about "
            f"{tokens} tokens at {CHARS_PER_TOKEN} characters per token), but the agent's context on {model!r} holds "
            f"{context_length} tokens, {reserve} of them reserved for the agent's own prompt, so {budget} for the "
            f"memory. Fix: {MEMORY_FIX}",
            needed_tokens=tokens + reserve,
            context_length=context_length,
        )
    order = sorted(range(len(bank.entries)), key=lambda i: (bank.entries[i].created_step, i))
    lo, hi = 1, len(order)  # drop the k oldest: the smallest k that fits (rendering grows with the entries kept)
    while lo < hi:
        mid = (lo + hi) // 2
        if estimated_tokens(_render_without(bank, order[:mid])) <= budget:
            hi = mid
        else:
            lo = mid + 1
    if lo >= len(order):
        raise ContextOverflowError(
            f"builder {builder!r} under regime {regime!r}, step {step}: not even the newest memory entry fits the "
            f"{budget} tokens left for the memory on {model!r} ({context_length} tokens, {reserve} reserved); "
            "policy 'truncate_oldest' would show an empty memory. Fix: lower context.reserve_tokens or shrink the "
            "entries (builder_options log_chars)",
            needed_tokens=tokens + reserve,
            context_length=context_length,
        )
    gone = set(order[:lo])
    fitted = bank.copy()
    fitted.entries = [e for i, e in enumerate(fitted.entries) if i not in gone]
    record.update(
        {
            "dropped_entries": len(gone),
            "dropped_ids": [bank.entries[i].id for i in order[:lo]],
            "kept_entries": len(fitted.entries),
            "shown_chars": len(fitted.render()),
        }
    )
    fitted.meta = {**fitted.meta, "context_fit": record}
    return FittedBank(fitted, record)


def _render_without(bank: MemoryBank, drop: Sequence[int]) -> str:
    gone = set(drop)
    return MemoryBank(bank.method, entries=[e for i, e in enumerate(bank.entries) if i not in gone]).render()


def keep_fraction(overflow: ContextOverflowError, n: int) -> int:
    """How many of ``n`` batch records to try next after an overflow: the prompt text scaled down to the room
    the reply cap leaves, always at least one fewer than before. The prompt's fixed part (instructions, the
    memory) does not shrink with the batch, so this never drops more than needed and the retries descend to
    the largest count that fits."""
    room = overflow.context_length - overflow.reply_tokens
    text = max(overflow.needed_tokens - overflow.reply_tokens, 1)
    return min(n - 1, math.floor(n * room / text)) if room > 0 else 0


# -- before the run: the largest prompt and memory a profile can send (``profile.check_profile_context``) -------------


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
    from antipersist_lib.consolidation.regimes import make_builder

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
    from antipersist_lib.consolidation.regimes import make_builder

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
