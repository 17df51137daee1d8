"""How a chat request is shaped for the server that receives it, and how its reply is read back.

Why a module of its own: servers disagree about the same request. OpenAI's reasoning models (GPT-5 family,
o-series) refuse ``max_tokens`` and any temperature but the default and take no ``stop``; vLLM takes
``chat_template_kwargs`` (Qwen3 / Qwen3.5 run without thinking through ``{"enable_thinking": false}``);
Anthropic's OpenAI-compatible endpoint caps temperature at 1 and ignores ``seed``. A backbone profile names
one preset (``request_shape: vllm``) or a preset with overrides, and ``LLMClient`` shapes every call with it,
so one code path serves them all.

Reasoning is never read as the answer: ``split_reasoning`` removes ``<think>`` blocks from the content (also
an unterminated one, and a block whose opening tag the chat template wrote), and the client reads the
reasoning fields servers send (``reasoning_content``, ``reasoning``) only to count them.

The default preset (``openai-compatible``) sends exactly what the kit always sent, so its cache keys are
unchanged; every other shape adds ``RequestShape.cache_fields`` to the key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")
#: OpenAI's ``reasoning_effort`` values (``none`` from GPT-5.1, ``xhigh`` from GPT-5.2)
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
#: body fields the client sets itself; ``extra_body`` may not name them
RESERVED_FIELDS = (
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "reasoning_effort",
    "stream",
    "n",
)


@dataclass(frozen=True)
class RequestShape:
    """What one chat request carries besides its messages.

    ``reasoning_budget_tokens`` is added to every call's completion budget: callers ask for the tokens their
    *answer* needs (an agent action: 48), and a model that thinks first needs room for its thinking on top.
    ``max_temperature``: the server's ceiling; a profile asking for more is refused when it loads."""

    preset: str = "openai-compatible"
    token_field: str = "max_tokens"
    send_sampling: bool = True  # temperature and top_p
    send_seed: bool = True
    send_stop: bool = True  # False: the client cuts the answer at the stop strings itself
    reasoning_effort: str | None = None
    reasoning_budget_tokens: int = 0
    max_temperature: float | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = f"request_shape {self.preset!r}"
        if self.token_field not in TOKEN_FIELDS:
            raise ValueError(f"{where}: token_field must be one of {TOKEN_FIELDS}, got {self.token_field!r}")
        for name in ("send_sampling", "send_seed", "send_stop"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{where}: {name} must be true or false, got {getattr(self, name)!r}")
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(
                f"{where}: reasoning_effort must be one of {REASONING_EFFORTS} (or absent), got {self.reasoning_effort!r}"
            )
        budget = self.reasoning_budget_tokens
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(f"{where}: reasoning_budget_tokens must be an integer >= 0, got {budget!r}")
        ceiling = self.max_temperature
        if ceiling is not None and (isinstance(ceiling, bool) or not isinstance(ceiling, (int, float)) or ceiling <= 0):
            raise ValueError(f"{where}: max_temperature must be a positive number, got {ceiling!r}")
        if not isinstance(self.extra_body, Mapping):
            raise ValueError(f"{where}: extra_body must be a mapping, got {type(self.extra_body).__name__}")
        clash = sorted(set(self.extra_body) & set(RESERVED_FIELDS))
        if clash:
            raise ValueError(
                f"{where}: extra_body may not set {clash}: the kit sets them (token_field, send_sampling, "
                "send_seed, send_stop and reasoning_effort shape them)"
            )
        try:
            json.dumps(dict(self.extra_body), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{where}: extra_body must be plain JSON (strings, numbers, lists, mappings): {exc}"
            ) from None
        object.__setattr__(self, "extra_body", dict(self.extra_body))

    def describe(self) -> dict[str, Any]:
        """Manifest form; ``RequestShape(**describe())`` rebuilds it."""
        return {
            f.name: (dict(self.extra_body) if f.name == "extra_body" else getattr(self, f.name)) for f in fields(self)
        }

    @property
    def is_default(self) -> bool:
        return self.describe() == DEFAULT_SHAPE.describe()

    def identity(self) -> dict[str, Any] | None:
        """A run's identity part: what this shape sends differently from the default, None when nothing
        (``vllm`` and ``llama-cpp`` send what the kit always sent, so runs made before shapes resume)."""
        mine = {k: v for k, v in self.describe().items() if k != "preset"}
        base = {k: v for k, v in DEFAULT_SHAPE.describe().items() if k != "preset"}
        return None if mine == base else mine

    def cache_fields(self) -> dict[str, Any]:
        """What the response cache key adds for this shape: nothing for the default (its keys predate shapes),
        else the whole shape, so a changed shape never reuses a reply."""
        return {} if self.is_default else {"request_shape": self.describe()}

    def check_temperature(self, temperature: float, where: str) -> None:
        """Refuse a temperature the server would silently cap (Anthropic's compatible endpoint caps at 1)."""
        if self.send_sampling and self.max_temperature is not None and temperature > self.max_temperature:
            raise ValueError(
                f"{where}: temperature {temperature} is above {self.max_temperature}, the most the "
                f"{self.preset!r} request shape's server accepts (it would cap it without saying so)"
            )

    def body(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float,
        max_tokens: int,
        stop: Sequence[str] | None,
        top_p: float | None,
        seed: int | None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the body sent, minus the model; what the caller asked for that this shape does not send).

        The second part goes into the cache key: a resample at another seed must not reuse the reply of the
        sample before it just because the server is not told the seed."""
        self.check_temperature(temperature, "a chat call")
        sent: dict[str, Any] = {"messages": messages}
        unsent: dict[str, Any] = {}
        if self.send_sampling:
            sent["temperature"] = float(temperature)
            if top_p is not None:
                sent["top_p"] = float(top_p)
        else:
            unsent["temperature"] = float(temperature)
            if top_p is not None:
                unsent["top_p"] = float(top_p)
        sent[self.token_field] = int(max_tokens) + self.reasoning_budget_tokens
        if stop is not None:
            (sent if self.send_stop else unsent)["stop"] = list(stop)
        if seed is not None:
            (sent if self.send_seed else unsent)["seed"] = int(seed)
        if self.reasoning_effort is not None:
            sent["reasoning_effort"] = self.reasoning_effort
        sent.update(self.extra_body)
        return sent, unsent


DEFAULT_SHAPE = RequestShape()

#: the named presets; a profile may override any field of one (``{preset: vllm, extra_body: {...}}``)
PRESETS: dict[str, RequestShape] = {
    # what the kit always sent: vLLM, llama.cpp's server, most OpenAI-compatible servers
    "openai-compatible": DEFAULT_SHAPE,
    # vLLM (the paper's servers): the same fields; thinking is switched through extra_body's chat_template_kwargs
    "vllm": RequestShape(preset="vllm"),
    # llama.cpp's llama-server (the embedded default): the same fields
    "llama-cpp": RequestShape(preset="llama-cpp"),
    # OpenAI's reasoning models (GPT-5 family, o-series): max_completion_tokens; no temperature, top_p, stop
    # or seed (the first three are refused with HTTP 400); room for hidden reasoning on top of the answer
    "openai-reasoning": RequestShape(
        preset="openai-reasoning",
        token_field="max_completion_tokens",
        send_sampling=False,
        send_seed=False,
        send_stop=False,
        reasoning_budget_tokens=4096,
    ),
    # OpenAI's chat models without reasoning (GPT-4.1, GPT-4o): max_completion_tokens, everything else sent
    "openai-chat": RequestShape(preset="openai-chat", token_field="max_completion_tokens"),
    # Anthropic's OpenAI SDK compatibility endpoint (Claude): temperature at most 1, seed ignored (not sent)
    "anthropic-openai": RequestShape(preset="anthropic-openai", send_seed=False, max_temperature=1.0),
}


def shape_from(value: Any, where: str) -> RequestShape:
    """A profile's ``request_shape``: a preset name, a mapping with ``preset`` and overrides, a manifest's
    ``describe()`` or a ``RequestShape``; errors name ``where``."""
    if value is None:
        return DEFAULT_SHAPE
    if isinstance(value, RequestShape):
        return value
    if isinstance(value, str):
        if value not in PRESETS:
            raise ValueError(f"{where}: unknown request_shape {value!r}; presets: {sorted(PRESETS)}")
        return PRESETS[value]
    if isinstance(value, Mapping):
        preset = value.get("preset", DEFAULT_SHAPE.preset)
        if preset not in PRESETS:
            raise ValueError(f"{where}: unknown request_shape preset {preset!r}; presets: {sorted(PRESETS)}")
        known = {f.name for f in fields(RequestShape)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"{where}: unknown request_shape field(s) {unknown}; allowed: {sorted(known)}")
        overrides = {k: v for k, v in value.items() if k != "preset"}
        if "extra_body" in overrides and overrides["extra_body"] is None:
            overrides["extra_body"] = {}
        try:
            return replace(PRESETS[preset], **overrides)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    raise ValueError(f"{where}: request_shape must be a preset name or a mapping, got {type(value).__name__}")


# -- reading a reply --------------------------------------------------------------------------------------

_OPEN = "<think>"
_CLOSE = "</think>"
_BLOCK = re.compile(re.escape(_OPEN) + r".*?" + re.escape(_CLOSE), re.DOTALL)


@dataclass(frozen=True)
class SplitReply:
    """A reply's content with its inline reasoning taken out."""

    answer: str
    reasoning_chars: int
    unterminated: bool  # a think block that never closed (the reply was cut while thinking)


def split_reasoning(content: str) -> SplitReply:
    """The answer of ``content`` without its ``<think>...</think>`` blocks (stripped of the whitespace around
    them; content without a think tag is returned exactly as it is).

    Also handled: a closing tag with no opening one (templates that write ``<think>`` into the prompt, so the
    reply starts inside the block: everything up to the first ``</think>`` is reasoning) and an opening tag
    that never closes (everything after it is reasoning; ``unterminated``)."""
    if _OPEN not in content and _CLOSE not in content:
        return SplitReply(content, 0, False)  # no reasoning: the content exactly as sent
    reasoning = 0
    text = content
    first_close, first_open = text.find(_CLOSE), text.find(_OPEN)
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        reasoning += first_close
        text = text[first_close + len(_CLOSE) :]
    for block in _BLOCK.findall(text):
        reasoning += len(block) - len(_OPEN) - len(_CLOSE)
    text = _BLOCK.sub("", text)
    unterminated = False
    open_at = text.find(_OPEN)
    if open_at >= 0:
        reasoning += len(text) - open_at - len(_OPEN)
        text = text[:open_at]
        unterminated = True
    return SplitReply(text.strip(), reasoning, unterminated)


def cut_at_stop(text: str, stop: Sequence[str] | None) -> str:
    """``text`` up to the first of the stop strings, as a server that was sent them would return it."""
    cut = min((text.find(s) for s in stop or () if s and s in text), default=-1)
    return text[:cut] if cut >= 0 else text


def reasoning_text_fields(message: Mapping[str, Any]) -> int:
    """Characters of reasoning a server sent beside the content in a reply's ``message`` object (vLLM and
    llama.cpp: ``reasoning_content``; newer vLLM and gateways: ``reasoning``); only counted, never kept."""
    return sum(len(v) for v in (message.get("reasoning_content"), message.get("reasoning")) if isinstance(v, str))


def reasoning_tokens_of(usage: Mapping[str, Any]) -> int:
    """A reply's ``usage.completion_tokens_details.reasoning_tokens``, 0 when the server does not report it."""
    details = usage.get("completion_tokens_details")
    return usage_count(details.get("reasoning_tokens") if isinstance(details, Mapping) else None)


def usage_count(value: Any) -> int:
    """A reply's token count as an int (0 when absent, not a number, or not finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0
    return int(value)
