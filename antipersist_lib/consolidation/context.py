"""Context budget: a prompt is measured against the backbone's context length before it is sent.

At the paper's scale "All" and any builder under Static-All put the whole pool into one prompt, past any
backbone's context, and a server would reject or silently cut it. So every consolidation prompt (``ContextGuard``)
and every evaluated memory (``fit_bank``) is measured first, with the kit's shared estimate
(``antipersist_lib.serving.context_budget``), and the profile's ``context.overflow`` decides: ``refuse`` (default) raises
``ContextOverflowError`` before any call, ``truncate_oldest`` drops the oldest records or entries and records
what it dropped. A backbone that states no context length is not checked (and the record says so).

Details and where drops are recorded: docs/faulty-memories.md, "Consolidation over trajectory pools" (Context
budget). The paper states no rule here (kit choice).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from antipersist_lib.consolidation.bank import MemoryBank
from antipersist_lib.errors import ContextOverflowError
from antipersist_lib.serving.context_budget import (
    CHARS_PER_TOKEN,
    PromptGuard,
    estimated_tokens,
)

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
