"""The documented request rules of the servers the kit talks to, enforced by the loopback server.

Why: a request shape (``serving.request_shape``) is only proven right against a server that refuses what the
real one refuses. ``LoopbackServer(api=...)`` applies one of these contracts to every chat request: it refuses
what that API documents as an error (HTTP 400 in the API's own wording), then wraps the scripted answer as that
server returns it (hidden reasoning tokens, a ``reasoning_content`` field, or ``<think>`` inline). Contracts:
OpenAI reasoning models, vLLM, llama.cpp's server and Anthropic's OpenAI-compatible endpoint; the rules each
enforces, as the kit reads the APIs' documentation, are listed in docs/protocol.md, "The papers' models and
their request shapes". Like the server itself, these are test instruments, not models.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from antipersist_lib.serving.request_shape import REASONING_EFFORTS

#: what a thinking model thinks before answering, given the request (tests put decoy actions in it)
Thinker = Callable[[dict[str, Any]], str]

#: fields OpenAI's chat completions API knows (a request naming another is refused)
OPENAI_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_completion_tokens",
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "reasoning_effort",
        "n",
        "stream",
        "response_format",
        "tools",
        "tool_choice",
        "user",
        "metadata",
        "store",
        "logprobs",
        "top_logprobs",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "parallel_tool_calls",
        "service_tier",
        "verbosity",
        "prediction",
        "modalities",
        "audio",
        "stream_options",
        "web_search_options",
        "prompt_cache_key",
        "safety_identifier",
    }
)


@dataclass(frozen=True)
class ContractReply:
    """One chat completion as the server sends it."""

    content: str | None
    finish_reason: str
    completion_tokens: int
    reasoning_tokens: int = 0
    extra_message: Mapping[str, Any] | None = None  # reasoning_content / reasoning beside the content


def _words(text: str) -> list[str]:
    return text.split()


def _budget(body: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        if isinstance(body.get(key), int):
            return int(body[key])
    return None


def _cut_at_stop(text: str, stop: Any) -> str:
    stops = [stop] if isinstance(stop, str) else [s for s in (stop or []) if isinstance(s, str) and s]
    cut = min((text.find(s) for s in stops if s in text), default=-1)
    return text[:cut] if cut >= 0 else text


class ApiContract:
    """A server's rules: ``refuse`` names what it rejects (None: accepted), ``reply`` shapes the answer."""

    name = "plain"

    def refuse(self, body: Mapping[str, Any]) -> tuple[str, str | None] | None:
        """(message, offending field) of a 400, or None."""
        return None

    def reply(self, body: Mapping[str, Any], answer: str) -> ContractReply:
        answer = _cut_at_stop(answer, body.get("stop"))
        budget = _budget(body)
        words = _words(answer)
        if budget is not None and len(words) > budget:
            return ContractReply(" ".join(words[:budget]), "length", budget)
        return ContractReply(answer, "stop", len(words))


class OpenAIReasoningContract(ApiContract):
    """GPT-5 family / o-series: refuses what those models refuse; spends ``reasoning_tokens`` (scaled by
    ``reasoning_effort``: minimal 1/4, low 1/2, medium 1, high 2, xhigh 3, none 0) before answering."""

    name = "openai-reasoning"
    EFFORT_SCALE = {"none": 0.0, "minimal": 0.25, "low": 0.5, "medium": 1.0, "high": 2.0, "xhigh": 3.0}

    def __init__(self, reasoning_tokens: int = 64) -> None:
        self.reasoning_tokens = reasoning_tokens

    def refuse(self, body: Mapping[str, Any]) -> tuple[str, str | None] | None:
        unknown = sorted(set(body) - OPENAI_FIELDS)
        if unknown:
            return f"Unrecognized request argument supplied: {unknown[0]}", unknown[0]
        if "max_tokens" in body:
            return (
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
                "max_tokens",
            )
        for key in ("temperature", "top_p"):
            if key in body and body[key] != 1:
                return (
                    f"Unsupported value: '{key}' does not support {body[key]} with this model. "
                    "Only the default (1) value is supported.",
                    key,
                )
        if "stop" in body:
            return "Unsupported parameter: 'stop' is not supported with this model.", "stop"
        effort = body.get("reasoning_effort")
        if effort is not None and effort not in REASONING_EFFORTS:
            return (
                f"Invalid value: '{effort}'. Supported values are: {', '.join(REASONING_EFFORTS)}.",
                "reasoning_effort",
            )
        return None

    def reply(self, body: Mapping[str, Any], answer: str) -> ContractReply:
        scale = self.EFFORT_SCALE[body.get("reasoning_effort") or "medium"]
        thinking = int(round(self.reasoning_tokens * scale))
        budget = _budget(body)
        if budget is not None and budget <= thinking:
            return ContractReply("", "length", budget, reasoning_tokens=budget)
        words = _words(answer)
        room = None if budget is None else budget - thinking
        if room is not None and len(words) > room:
            return ContractReply(" ".join(words[:room]), "length", budget, reasoning_tokens=thinking)
        return ContractReply(answer, "stop", thinking + len(words), reasoning_tokens=thinking)


def default_thinker(body: dict[str, Any]) -> str:
    return "The user wants an answer. Let me consider the options before I reply."


class VLLMContract(ApiContract):
    """vLLM serving a thinking model (Qwen3 / Qwen3.5): it thinks unless ``chat_template_kwargs`` says
    ``enable_thinking: false``; ``reasoning_parser`` puts the thinking into ``reasoning_field``, else it is
    inline in ``<think>`` tags. Thinking words count against the completion budget first."""

    name = "vllm"

    def __init__(
        self,
        *,
        thinks_by_default: bool = True,
        reasoning_parser: bool = False,
        reasoning_field: str = "reasoning_content",
        thinker: Thinker = default_thinker,
    ) -> None:
        self.thinks_by_default = thinks_by_default
        self.reasoning_parser = reasoning_parser
        self.reasoning_field = reasoning_field
        self.thinker = thinker

    def refuse(self, body: Mapping[str, Any]) -> tuple[str, str | None] | None:
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            return "chat_template_kwargs must be an object", "chat_template_kwargs"
        return None

    def thinks(self, body: Mapping[str, Any]) -> bool:
        kwargs = body.get("chat_template_kwargs") or {}
        return bool(kwargs.get("enable_thinking", self.thinks_by_default))

    def reply(self, body: Mapping[str, Any], answer: str) -> ContractReply:
        if not self.thinks(body):
            return super().reply(body, answer)
        thought = self.thinker(dict(body))
        thought_words = _words(thought)
        budget = _budget(body)
        if budget is not None and len(thought_words) >= budget:  # cut while thinking
            partial = " ".join(thought_words[:budget])
            if self.reasoning_parser:
                return ContractReply(None, "length", budget, extra_message={self.reasoning_field: partial})
            return ContractReply(f"<think>\n{partial}", "length", budget)
        room = {} if budget is None else {"max_tokens": budget - len(thought_words), "max_completion_tokens": None}
        plain = super().reply({**body, **room}, answer)
        used = len(thought_words) + plain.completion_tokens
        if self.reasoning_parser:
            return ContractReply(
                plain.content, plain.finish_reason, used, extra_message={self.reasoning_field: thought}
            )
        return ContractReply(f"<think>\n{thought}\n</think>\n\n{plain.content}", plain.finish_reason, used)


class LlamaCppContract(VLLMContract):
    """llama.cpp's llama-server with its reasoning parser on (its default): ``reasoning_content``."""

    name = "llama-cpp"

    def __init__(self, *, thinks_by_default: bool = True, thinker: Thinker = default_thinker) -> None:
        super().__init__(thinks_by_default=thinks_by_default, reasoning_parser=True, thinker=thinker)


class AnthropicCompatContract(ApiContract):
    """Anthropic's OpenAI SDK compatibility: temperature above 1 is capped at 1 (``capped`` counts them),
    ``seed`` is ignored (``ignored_seeds`` counts them)."""

    name = "anthropic-openai"

    def __init__(self) -> None:
        self.capped = 0
        self.ignored_seeds = 0

    def refuse(self, body: Mapping[str, Any]) -> tuple[str, str | None] | None:
        if isinstance(body.get("temperature"), (int, float)) and body["temperature"] > 1:
            self.capped += 1
        if "seed" in body:
            self.ignored_seeds += 1
        if body.get("n", 1) != 1:
            return "n must be 1", "n"
        return None
