"""The one chat client for every backbone: vLLM, llama.cpp's server, the loopback test server.

Why one client: retries, caching and call accounting must behave identically whatever serves
the model, so the paper's call counts and the kit's resume guarantees do not depend on the
backend. The openai SDK's own retries are switched off (``max_retries=0``) so that every retry
is made, and counted, here.

Retry policy (shared with ``embeddings.Embedder`` through ``_call_with_retries``): timeouts,
connection errors, 408/409/429, any status >= 500, unparseable bodies and empty replies are
transient and retried with exponential backoff and seeded jitter; other 4xx statuses
(400/401/403/404/422...) are permanent and raised at once as ``LLMRequestError``. When the
retries are used up, ``LLMUnavailableError`` says which endpoint failed and that re-running the
same command resumes the run.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse

import openai

from antipersist_lib.errors import (
    ContextLengthError,
    LLMError,
    LLMRequestError,
    LLMUnavailableError,
    ReasoningBudgetError,
)
from antipersist_lib.jsonl import loads_json
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.request_shape import (
    DEFAULT_SHAPE,
    RequestShape,
    cut_at_stop,
    reasoning_text_fields,
    reasoning_tokens_of,
    shape_from,
    split_reasoning,
    usage_count,
)
from antipersist_lib.serving.response_cache import ResponseCache, cache_key

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], None]

_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
_RETRYABLE_4XX = {408, 409, 429}


class _TransientReplyError(Exception):
    """A 200 response that is unusable (wrong shape, empty content): retry it."""


@dataclass(frozen=True)
class Endpoint:
    """Where a model is served. Holds the *name* of the API-key variable, never the key; with none named
    (``api_key_env`` empty, the default) no key is sent, so a key reaches only a server its profile names it for."""

    base_url: str
    model: str
    api_key_env: str = ""
    timeout_s: float = 120.0
    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    context_length: int | None = None
    #: "native": send system messages as they are; "merge": fold the system message into the
    #: first user turn, for chat templates without a system role (Gemma's own template does this)
    system_prompt: str = "native"
    #: how requests are shaped for this server (``request_shape.PRESETS``); a preset name or a mapping is
    #: turned into a RequestShape here, so a manifest's ``describe()`` rebuilds the endpoint
    request_shape: RequestShape = DEFAULT_SHAPE
    #: what answers here when the URL cannot say it: the kit's embedded servers name their model file (their
    #: port changes at every start). None: the base URL and what the server reports of its model say it
    #: (``server_identity``), which is what keeps two servers' replies apart in the response cache
    server_id: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "request_shape", shape_from(self.request_shape, "Endpoint.request_shape"))
        if self.system_prompt not in ("native", "merge"):
            raise ValueError(f"Endpoint.system_prompt must be 'native' or 'merge', got {self.system_prompt!r}")
        if not self.base_url:
            raise ValueError("Endpoint.base_url is empty")
        if not self.model:
            raise ValueError("Endpoint.model is empty")
        if self.timeout_s <= 0:
            raise ValueError("Endpoint.timeout_s must be positive")
        if self.max_retries < 0:
            raise ValueError("Endpoint.max_retries must be >= 0")
        if self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise ValueError("Endpoint backoff times must be >= 0")

    def api_key(self) -> str:
        """Read at call time; "EMPTY" when no variable is named or it is unset, which vLLM and llama.cpp accept."""
        return (os.environ.get(self.api_key_env) if self.api_key_env else None) or "EMPTY"

    def describe(self) -> dict[str, Any]:
        """Manifest form: everything needed to reproduce the setup, and no secret."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "api_key_env": self.api_key_env,
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "backoff_base_s": self.backoff_base_s,
            "backoff_max_s": self.backoff_max_s,
            "context_length": self.context_length,
            "system_prompt": self.system_prompt,
            "request_shape": self.request_shape.describe(),
            # only when set, so a manifest written before the field rebuilds the same endpoint
            **({"server_id": self.server_id} if self.server_id else {}),
        }


@dataclass(frozen=True)
class ChatReply:
    """A completed chat call; ``latency_s`` is wall time including retries and backoff."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cached: bool
    retries: int
    finish_reason: str | None
    #: what went to reasoning (counted, never kept): its tokens as the server reports them, its characters
    reasoning_tokens: int = 0
    reasoning_chars: int = 0


# -- shared plumbing (also used by embeddings.py) ----------------------------------------------


def _make_openai_client(endpoint: Endpoint) -> openai.OpenAI:
    """SDK client with its own retries off. Loopback hosts ignore proxy variables, since a
    proxy can never reach a server on this machine's 127.0.0.1."""
    kwargs: dict[str, Any] = {}
    if (urlparse(endpoint.base_url).hostname or "") in _LOOPBACK_HOSTS:
        kwargs["http_client"] = openai.DefaultHttpxClient(trust_env=False)
    return openai.OpenAI(
        base_url=endpoint.base_url, api_key=endpoint.api_key(), max_retries=0, timeout=endpoint.timeout_s, **kwargs
    )


@dataclass(frozen=True)
class ServerReply:
    """What the kit reads from a chat completion: the first choice's text and finish reason, and the
    usage counts (reasoning is only counted, its text never kept)."""

    content: str | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    #: characters of reasoning the server sent in fields beside the content
    reasoning_field_chars: int


def post_chat(client: openai.OpenAI, model: str, body: Mapping[str, Any]) -> ServerReply:
    """One chat completion through the SDK. ``body`` is already exactly what goes on the wire (the
    request shape built it, and the response cache keys on it), so it is sent with the SDK's generic
    ``post`` rather than ``chat.completions.create``, whose typed-parameter transform cost a quarter of
    the client's CPU per call (perf/saturation.py) and changes nothing in plain JSON. The SDK still
    sends, authenticates and raises its status errors; the reply comes back as its bytes and is read
    here, since building the SDK's typed ``ChatCompletion`` cost another fifth of its CPU per call for
    the five values the kit reads."""
    raw = client.post("/chat/completions", body={"model": model, **body}, cast_to=bytes)
    try:
        payload = loads_json(raw)
    except ValueError as exc:  # not JSON, or not UTF-8: a proxy's page, a cut body
        raise _TransientReplyError(f"malformed chat response: not JSON ({len(raw)} bytes)") from exc
    return parse_chat_reply(payload)


def parse_chat_reply(payload: Any) -> ServerReply:
    """The kit's reading of a chat completion's JSON; a reply without a first choice holding a
    message, or with content that is not text, is a transient error (retried)."""
    choices = payload.get("choices") if isinstance(payload, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise _TransientReplyError("malformed chat response: no choice with a message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _TransientReplyError("malformed chat response: content is not text")
    finish = choice.get("finish_reason")
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return ServerReply(
        content=content,
        finish_reason=finish if isinstance(finish, str) else None,
        prompt_tokens=usage_count(usage.get("prompt_tokens")),
        completion_tokens=usage_count(usage.get("completion_tokens")),
        reasoning_tokens=reasoning_tokens_of(usage),
        reasoning_field_chars=reasoning_text_fields(message),
    )


def _is_transient(exc: BaseException) -> bool:
    if isinstance(
        exc, (openai.APIConnectionError, openai.APIResponseValidationError, json.JSONDecodeError, _TransientReplyError)
    ):
        return True  # APITimeoutError is an APIConnectionError
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in _RETRYABLE_4XX
    return False


#: how servers word a prompt that does not fit: llama-server ("exceeds the available context size",
#: exceed_context_size_error), vLLM and OpenAI ("maximum context length", context_length_exceeded)
_CONTEXT_MARKERS = ("context size", "context length", "context_length_exceeded", "exceed_context_size")


def exceeds_context(exc: BaseException) -> bool:
    """Whether an endpoint's error is its refusal of a prompt longer than the model's context (a 400)."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code != 400:
        return False
    text = f"{exc.message} {getattr(exc, 'body', '')}".lower()
    return any(m in text for m in _CONTEXT_MARKERS)


def _describe_error(exc: BaseException) -> str:
    """One line naming the error and, for connection errors, the transport-level cause."""
    if isinstance(exc, openai.APIStatusError):
        text = f"HTTP {exc.status_code} {type(exc).__name__}: {exc.message}"
    else:
        text = f"{type(exc).__name__}: {exc}"
        cause = exc.__cause__
        if isinstance(exc, openai.APIConnectionError) and cause is not None:
            text = f"{text.rstrip('.')} ({type(cause).__name__}: {cause})"
    return text.rstrip(".")


class _Backoff:
    """Exponential backoff with jitter from a seeded RNG, so test runs are reproducible."""

    def __init__(self, base_s: float, max_s: float, seed: int | None, sleep: Sleep) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self.sleep = sleep
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def delay(self, attempt: int) -> float:
        """Seconds before retry number ``attempt`` (0-based): in [d/2, d], d = base * 2^attempt."""
        ceiling = min(self.max_s, self.base_s * (2 ** min(attempt, 32)))
        with self._lock:
            return ceiling / 2 + self._rng.uniform(0.0, ceiling / 2)


#: a call in flight is reported at WARNING after this share of its endpoint's ``timeout_s`` (and again after each
#: further share), but never sooner than ``STALL_REPORT_MIN_S``: a server that accepts and never answers is named
#: within 30 s at the default 120 s timeout (20 s at the preflight's 30 s), and a slow CPU server (900 s) is not reported
#: for ordinary waits
STALL_REPORT_SHARE = 0.25
STALL_REPORT_MIN_S = 20.0


class _StallWatch:
    """One thread for the process that names every call waiting longer than its endpoint's report interval:
    the endpoint, the model, how long so far and when the attempt gives up (``timeout_s``), so a stalled server
    is never a silent hang."""

    def __init__(self, tick_s: float = 2.0) -> None:
        self._tick_s = tick_s
        self._lock = threading.Lock()
        self._calls: dict[int, list[Any]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None

    def begin(self, endpoint: Endpoint, purpose: str) -> int:
        with self._lock:
            self._next += 1
            now = time.monotonic()
            self._calls[self._next] = [endpoint, purpose, now, now]
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="stall-watch", daemon=True)
                self._thread.start()
            return self._next

    def end(self, token: int) -> None:
        with self._lock:
            self._calls.pop(token, None)

    def watched(self, attempt: Callable[[], T], endpoint: Endpoint, purpose: str) -> T:
        """``attempt()``, reported while it waits too long."""
        token = self.begin(endpoint, purpose)
        try:
            return attempt()
        finally:
            self.end(token)

    def _loop(self) -> None:
        while True:
            time.sleep(self._tick_s)
            now = time.monotonic()
            with self._lock:
                due = []
                for entry in self._calls.values():
                    endpoint, purpose, started, reported = entry
                    every = max(STALL_REPORT_MIN_S, STALL_REPORT_SHARE * endpoint.timeout_s)
                    if now - reported >= every:
                        entry[3] = now
                        due.append((endpoint, purpose, now - started))
            for endpoint, purpose, waited in due:
                log.warning(
                    "still waiting for the %s reply from %s (model %s): %.0f s so far; this attempt gives up at "
                    "%.0f s (the endpoint's timeout_s)",
                    purpose,
                    endpoint.base_url,
                    endpoint.model,
                    waited,
                    endpoint.timeout_s,
                )


_STALLS = _StallWatch()


def _call_with_retries(
    attempt: Callable[[], T], *, endpoint: Endpoint, purpose: str, max_retries: int, backoff: _Backoff
) -> tuple[T, int]:
    """Run ``attempt`` until it succeeds; returns (result, retries used).

    Raises ``LLMRequestError`` on a permanent error and ``LLMUnavailableError`` when the
    retry budget is spent; both carry ``retries`` so the caller can account for them.
    Anything that is not an endpoint error (a bug) propagates unchanged.
    """
    retries = 0
    while True:
        try:
            return _STALLS.watched(attempt, endpoint, purpose), retries
        except Exception as exc:  # classified below; non-endpoint errors are re-raised
            if isinstance(exc, openai.APIStatusError) and exceeds_context(exc):
                raise ContextLengthError(
                    f"{endpoint.base_url} (model {endpoint.model!r}) refused the {purpose} request as longer than "
                    f"the model's context: {_describe_error(exc)}. Give the server a larger context (the embedded "
                    "default's n_ctx, vLLM's --max-model-len) or send less (agent history_turns, a smaller "
                    "retrieval budget).",
                    retries=retries,
                    last_error=_describe_error(exc),
                ) from exc
            if isinstance(exc, openai.APIStatusError) and not _is_transient(exc):
                raise LLMRequestError(
                    f"{endpoint.base_url} (model {endpoint.model!r}) rejected the {purpose} request: "
                    f"{_describe_error(exc)}. This is not retried: check the model name, "
                    + (
                        f"the API key variable {endpoint.api_key_env!r}"
                        if endpoint.api_key_env
                        else "the API key (none is sent: name its variable with the profile's api_key_env or "
                        "--api-key-env)"
                    )
                    + ", and the request parameters (the profile's request_shape).",
                    retries=retries,
                    last_error=_describe_error(exc),
                ) from exc
            if not _is_transient(exc):
                if isinstance(exc, LLMError):
                    exc.retries = retries
                raise
            if retries >= max_retries:
                raise LLMUnavailableError(
                    f"LLM endpoint {endpoint.base_url} (model {endpoint.model!r}) is unavailable: "
                    f"the {purpose} call failed after {retries} retries; last error: "
                    f"{_describe_error(exc)}. Completed work is saved; once the endpoint is back, "
                    f"re-run the same command to resume the run.",
                    retries=retries,
                    last_error=_describe_error(exc),
                ) from exc
            wait = backoff.delay(retries)
            retries += 1
            # at WARNING, so a user sees why a run waits (a stopped server otherwise looks like a silent hang)
            log.warning(
                "%s call to %s (model %s) failed: %s; retry %d of %d in %.1f s",
                purpose,
                endpoint.base_url,
                endpoint.model,
                _describe_error(exc),
                retries,
                max_retries,
                wait,
            )
            backoff.sleep(wait)


# -- chat client ---------------------------------------------------------------------------------


def merge_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fold leading system messages into the first user turn ("system\n\nuser"), the way
    templates without a system role (Gemma's) present a system prompt."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    head = "\n\n".join(str(x) for x in system)
    if rest and rest[0]["role"] == "user":
        rest[0]["content"] = f"{head}\n\n{rest[0]['content']}"
        return rest
    return [{"role": "user", "content": head}] + rest


def _plain_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if not messages:
        raise ValueError("chat() needs at least one message")
    out = []
    for m in messages:
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise ValueError(f"a chat message needs 'role' and 'content': {m!r:.80}")
        out.append(dict(m))
    return out


def url_without_secrets(url: str) -> str:
    """``url`` without user, password, query or fragment, for manifests and cache identities: profiles refuse
    credentials in URLs, and this keeps a key that slipped into a query string off disk too."""
    parsed = urlparse(url)
    host = parsed.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    netloc = host + (f":{parsed.port}" if parsed.port else "")
    return parsed._replace(netloc=netloc, query="", fragment="").geturl()


#: fields of a ``/v1/models`` entry that say what is served (vLLM: the weights' ``root`` and ``max_model_len``;
#: llama.cpp: ``meta``, the file's size and parameter count); ``created`` is left out, since vLLM stamps it
#: with the time of the listing itself
SERVED_FIELDS = ("id", "root", "parent", "owned_by", "max_model_len", "meta")
#: how long the one listing that reads a server's identity may take (a port that never answers costs no more)
IDENTITY_TIMEOUT_S = 10.0


def server_identity(endpoint: Endpoint, client: Any = None) -> dict[str, Any]:
    """What answers at ``endpoint``, as the response cache keys on it: the endpoint's ``server_id`` where it
    names one (the embedded servers); otherwise the base URL without secrets and the server's own entry for
    the model in ``/v1/models`` (read once, ``IDENTITY_TIMEOUT_S``, no retry; ``served`` is None when the
    listing fails or does not name the model, so such a server is told apart by its URL alone)."""
    if endpoint.server_id:
        return {"model": endpoint.model, "server": endpoint.server_id}
    served: dict[str, Any] | None = None
    if client is not None:
        try:
            page = client.with_options(timeout=IDENTITY_TIMEOUT_S, max_retries=0).models.list()
            for entry in getattr(page, "data", None) or []:
                if str(getattr(entry, "id", "")) == endpoint.model:
                    data = entry.model_dump() if hasattr(entry, "model_dump") else dict(vars(entry))
                    served = {k: data[k] for k in SERVED_FIELDS if data.get(k) is not None}
                    break
        except Exception as exc:  # any failure only makes the identity coarser, never wrong
            log.info("%s: no model listing for the cache identity (%s)", endpoint.base_url, _describe_error(exc))
    return {"model": endpoint.model, "base_url": url_without_secrets(endpoint.base_url), "served": served}


class _ServerScopedCache:
    """The response cache of a client, scoped to its server on first use (``ResponseCache.for_server``)."""

    endpoint: Endpoint
    _client: Any

    def _init_cache(self, cache: ResponseCache | None) -> None:
        self._cache_root = cache
        self._scoped: ResponseCache | None = None
        self._scope_lock = threading.Lock()

    @property
    def cache(self) -> ResponseCache | None:
        """The cache folder of this client's server (None without a cache); the identity is read once."""
        if self._cache_root is None or not self._cache_root.enabled:
            return self._cache_root
        with self._scope_lock:
            if self._scoped is None:
                self._scoped = self._cache_root.for_server(server_identity(self.endpoint, self._client))
            return self._scoped

    @cache.setter
    def cache(self, value: ResponseCache | None) -> None:
        self._init_cache(value)

    def cache_identity(self) -> dict[str, Any] | None:
        """The server identity this client's cache entries are filed under (for the manifest), or None."""
        cache = self.cache
        return None if cache is None else cache.server


class LLMClient(_ServerScopedCache):
    """Chat completions with retries, an optional response cache and a ledger entry per call.

    Thread-safe: the SDK client, the cache (atomic files) and the ledger all tolerate
    concurrent use, so held-out evaluation may call ``chat`` from many threads.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        ledger: Ledger,
        cache: ResponseCache | None = None,
        seed: int | None = None,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.endpoint = endpoint
        self.ledger = ledger
        self.seed = seed
        self._backoff = _Backoff(endpoint.backoff_base_s, endpoint.backoff_max_s, seed, sleep)
        self._client = _make_openai_client(endpoint)
        self._init_cache(cache)

    def _request(
        self,
        messages: list[dict[str, Any]],
        temperature: float,
        max_tokens: int,
        stop: Sequence[str] | str | None,
        top_p: float | None,
        seed: int | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(exactly what is sent, minus the model; what was asked for but not sent): the endpoint's request
        shape decides which fields go (``request_shape.RequestShape.body``); both go into the cache key."""
        stops = None if stop is None else ([stop] if isinstance(stop, str) else list(stop))
        return self.endpoint.request_shape.body(
            messages,
            temperature=temperature,
            max_tokens=max_tokens,
            stop=stops,
            top_p=top_p,
            seed=seed if seed is not None else self.seed,
        )

    def _once(self, request: dict[str, Any], unsent: dict[str, Any], purpose: str) -> dict[str, Any]:
        reply = post_chat(self._client, self.endpoint.model, request)
        finish = reply.finish_reason
        split = split_reasoning(reply.content or "")
        reasoning_chars = split.reasoning_chars + reply.reasoning_field_chars
        reasoning_tokens = reply.reasoning_tokens
        answer = cut_at_stop(split.answer, unsent.get("stop"))
        if not answer:
            if finish == "length" or split.unterminated or reasoning_chars or reasoning_tokens:
                raise self._no_answer(request, purpose, finish, split.unterminated, reasoning_chars, reasoning_tokens)
            raise _TransientReplyError("empty reply content")
        return {
            "text": answer,
            "finish_reason": finish,
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "reasoning_tokens": reasoning_tokens,
            "reasoning_chars": reasoning_chars,
        }

    def _no_answer(
        self,
        request: dict[str, Any],
        purpose: str,
        finish: str | None,
        unterminated: bool,
        reasoning_chars: int,
        reasoning_tokens: int,
    ) -> ReasoningBudgetError:
        """The permanent error of a reply without an answer, naming the budget and the ways to free it."""
        shape = self.endpoint.request_shape
        budget = request.get(shape.token_field)
        if finish == "length" or unterminated:
            why = f"it was cut at its completion budget ({shape.token_field}={budget})"
        else:
            why = "it ended after its reasoning without writing one"
        spent = (
            f"{reasoning_tokens} reasoning tokens" if reasoning_tokens else f"{reasoning_chars} characters of reasoning"
        )
        detail = f"no answer ({why}; {spent})"
        return ReasoningBudgetError(
            f"{self.endpoint.base_url} (model {self.endpoint.model!r}) returned no answer to the {purpose} request: "
            f"{why}, after {spent}. This is not retried: the same request gives the same reply. Give it room "
            f"(the backbone profile's request_shape.reasoning_budget_tokens, now {shape.reasoning_budget_tokens}, "
            f"is added to every call's budget), lower request_shape.reasoning_effort (now {shape.reasoning_effort!r}), "
            "or turn thinking off (Qwen3 / Qwen3.5 on vLLM: request_shape.extra_body: "
            "{chat_template_kwargs: {enable_thinking: false}}).",
            last_error=detail,
        )

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        purpose: str,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        stop: Sequence[str] | str | None = None,
        top_p: float | None = None,
        tags: dict[str, Any] | None = None,
        seed: int | None = None,
    ) -> ChatReply:
        """One chat call; ``seed`` overrides the client's request seed for this call (a resample must
        differ from the sample before it, and the response cache keys on the seed). ``max_tokens`` is the
        answer's budget; the request shape adds its reasoning budget on top."""
        plain = _plain_messages(messages)
        if self.endpoint.system_prompt == "merge":
            plain = merge_system(plain)
        request, unsent = self._request(plain, temperature, max_tokens, stop, top_p, seed)
        shape = self.endpoint.request_shape
        key = cache_key(
            {
                "kind": "chat",
                "model": self.endpoint.model,
                **request,
                **({"unsent": unsent} if unsent else {}),
                **shape.cache_fields(),
            }
        )
        started = time.monotonic()
        cache = self.cache
        if cache is not None:
            hit = cache.get(key)
            if hit is not None and isinstance(hit.get("text"), str) and hit["text"]:
                reply = ChatReply(
                    text=hit["text"],
                    prompt_tokens=int(hit.get("prompt_tokens", 0)),
                    completion_tokens=int(hit.get("completion_tokens", 0)),
                    latency_s=time.monotonic() - started,
                    cached=True,
                    retries=0,
                    finish_reason=hit.get("finish_reason"),
                    reasoning_tokens=int(hit.get("reasoning_tokens", 0)),
                    reasoning_chars=int(hit.get("reasoning_chars", 0)),
                )
                self._account(purpose, reply, tags)
                return reply
        try:
            value, retries = _call_with_retries(
                lambda: self._once(request, unsent, purpose),
                endpoint=self.endpoint,
                purpose=purpose,
                max_retries=self.endpoint.max_retries,
                backoff=self._backoff,
            )
        except LLMError as exc:
            self.ledger.record(
                purpose,
                self.endpoint.model,
                latency_s=time.monotonic() - started,
                retries=exc.retries,
                ok=False,
                error=exc.last_error,
                tags=tags,
            )
            raise
        if cache is not None:
            cache.put(key, value)
        reply = ChatReply(
            text=value["text"],
            prompt_tokens=value["prompt_tokens"],
            completion_tokens=value["completion_tokens"],
            latency_s=time.monotonic() - started,
            cached=False,
            retries=retries,
            finish_reason=value["finish_reason"],
            reasoning_tokens=value["reasoning_tokens"],
            reasoning_chars=value["reasoning_chars"],
        )
        self._account(purpose, reply, tags)
        return reply

    def _account(self, purpose: str, reply: ChatReply, tags: dict[str, Any] | None) -> None:
        self.ledger.record(
            purpose,
            self.endpoint.model,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            latency_s=reply.latency_s,
            cached=reply.cached,
            retries=reply.retries,
            reasoning_tokens=reply.reasoning_tokens,
            reasoning_chars=reply.reasoning_chars,
            tags=tags,
        )

    def ping(self, *, retries: int = 0) -> list[str]:
        """Model ids the endpoint serves (for ``doctor``); not recorded in the ledger."""

        def once() -> list[str]:
            page = self._client.models.list()
            data = getattr(page, "data", None)
            if not isinstance(data, list):
                raise _TransientReplyError("malformed /models response")
            return [str(m.id) for m in data]

        ids, _ = _call_with_retries(
            once, endpoint=self.endpoint, purpose="ping", max_retries=retries, backoff=self._backoff
        )
        return ids

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
