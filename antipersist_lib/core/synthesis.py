"""The synthesis operator phi: retrieved records -> temporary guidance for one task (B.1-B.2).

``none`` formats the records verbatim (no call). The three synthesis modes make exactly one
LLM call each when the records they need exist, and none otherwise (empty-return rules):
imitation and strategic need at least one success; corrective needs at least one failure and
never falls back to another mode. kappa, the realised synthesis-call count, is 1 or 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from antipersist_lib.core import prompts
from antipersist_lib.memory.trajectory_store import MemoryRecord, Retrieved
from antipersist_lib.records import MODES


@dataclass(frozen=True)
class FormatLimits:
    """Per-record context budget of the synthesis input, so B records fit a shared context window.

    The paper is silent on clipping; these are the kit's choices (method parameters of the same
    names): each observation is cut to 300 characters, the initial observation to 500, and a
    record stops adding steps once it would exceed 4000 characters.
    """

    max_observation_chars: int = 300
    max_initial_chars: int = 500
    max_record_chars: int = 4000

    def __post_init__(self) -> None:
        for name in ("max_observation_chars", "max_initial_chars", "max_record_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 8:  # room for text and "..."
                raise ValueError(f"{name} must be an integer >= 8, got {value!r}")


def format_record(rec: MemoryRecord, *, label: str = "", limits: FormatLimits = FormatLimits()) -> str:
    """One record as text: instruction, outcome, initial observation, actions and observations.

    Only observed facts; the record's own mode and any guidance it ran under are not shown.
    """

    def clip(s: str, n: int) -> str:
        s = " ".join(s.split())
        return s if len(s) <= n else s[: n - 3] + "..."

    outcome = "SUCCESS" if rec.outcome.success else "FAILURE"
    lines = [
        f"{label}".strip(),
        f"Task: {clip(rec.task.instruction, 500)}",
        f"Outcome: {outcome} after {rec.outcome.n_steps} steps",
        f"Initial observation: {clip(rec.trajectory.initial_observation, limits.max_initial_chars)}",
    ]
    lines = [line for line in lines if line]
    body: list[str] = []
    used = sum(len(x) + 1 for x in lines)
    for step in rec.trajectory.steps:
        entry = f"> {step.action or '(no valid action)'}\n{clip(step.observation, limits.max_observation_chars)}"
        if used + len(entry) + 1 > limits.max_record_chars:
            body.append(f"... ({rec.trajectory.n_steps - len(body)} more steps omitted)")
            break
        body.append(entry)
        used += len(entry) + 1
    return "\n".join(lines + body)


def format_blocks(items: Sequence[Retrieved], title: str, limits: FormatLimits = FormatLimits()) -> str:
    """Records concatenated as ``--- {title} i ---`` blocks (the paper's placeholder format)."""
    return "\n\n".join(
        format_record(r.record, label=f"--- {title} {i} ---", limits=limits) for i, r in enumerate(items, start=1)
    )


@dataclass(frozen=True)
class Guidance:
    """Temporary context for one task. Held in memory only and discarded after execution."""

    mode: str
    text: str  # what is appended to the agent's system prompt ("" = nothing)
    kappa: int  # realised synthesis calls (0 or 1)
    record_ids: tuple[int, ...]  # memory records used (retrieved set H)
    skipped_reason: str | None = None  # why synthesis was skipped, when it was


def synthesize(
    mode: str,
    instruction: str,
    retrieved: Sequence[Retrieved],
    llm: Any,
    *,
    max_tokens: int = 1024,
    temperature: float = 0.0,
    limits: FormatLimits = FormatLimits(),
    tags: dict[str, Any] | None = None,
    wrap: bool = True,
) -> Guidance:
    """sigma = phi(H, mode). ``llm`` is an ``LLMClient`` (any object with the same ``chat``).

    ``wrap=False`` returns the synthesis model's text without the mode header (for methods that
    store it under a header of their own)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    ids = tuple(r.record.record_id for r in retrieved)
    if mode == "none":
        blocks = [
            format_record(r.record, label=f"--- Record {i} ---", limits=limits) for i, r in enumerate(retrieved, 1)
        ]
        text = prompts.wrap_factual(blocks)
        return Guidance("none", text, 0, ids, None if text else "no records retrieved")

    successes = [r for r in retrieved if r.role in ("success", "contrast")]
    failures = [r for r in retrieved if r.role == "failure"]
    if mode in ("imitation", "strategic"):
        if not successes:
            return Guidance(mode, "", 0, ids, "no successful trajectory retrieved")
        user = prompts.SYNTHESIS_PROMPTS[mode].format(
            instruction=instruction, success_text=format_blocks(successes, "Success", limits)
        )
    else:  # corrective
        if not failures:
            return Guidance(mode, "", 0, ids, "no failed trajectory retrieved")
        contrast = [r for r in retrieved if r.role == "contrast"]
        user = prompts.CORRECTIVE_PROMPT.format(
            instruction=instruction,
            failure_text=format_blocks(failures, "Failure", limits),
            success_text=format_blocks(contrast, "Success", limits) if contrast else prompts.NO_SUCCESS_REFERENCE,
        )
    reply = llm.chat(
        [{"role": "system", "content": prompts.SYNTHESIS_SYSTEM}, {"role": "user", "content": user}],
        purpose="synthesis",
        temperature=temperature,
        max_tokens=max_tokens,
        tags={**(tags or {}), "mode": mode},
    )
    text = prompts.wrap_guidance(mode, reply.text) if wrap else reply.text.strip()
    return Guidance(mode, text, 1, ids)
