"""Preflight: one tiny request to each endpoint a run needs, before its first task.

Why: a run whose embedding server is down does not crash; its methods fall back to mode ``none`` after each
task's retries and the run silently measures ReAct, while a dead chat endpoint costs every run of a grid its
full retry budget. So a run (``runner.protocol``), a study (``studies``) and a grid (once per distinct
endpoint, ``runner.grid``) first send each endpoint one small chat or embedding request, on its own connection
with ``PREFLIGHT_RETRIES`` retry and at most ``PREFLIGHT_TIMEOUT_S``. Probes bypass the ledger and the response
cache. A failure raises ``PreflightError`` naming every endpoint that failed (URL, model, profile), the error
and the fix. What passes and who checks what: docs/protocol.md, "Bring your own server" (Preflight);
docs/failures.md.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from antipersist_lib.errors import LLMError, LLMUnavailableError
from antipersist_lib.serving.llm import (
    Endpoint,
    _Backoff,
    _call_with_retries,
    _make_openai_client,
    _TransientReplyError,
    post_chat,
)

PREFLIGHT_PROMPT = "Reply with the single word OK."
PREFLIGHT_EMBED_TEXT = "preflight check"
PREFLIGHT_MAX_TOKENS = 4
PREFLIGHT_RETRIES = 1
PREFLIGHT_TIMEOUT_S = 30.0
KINDS = ("chat", "embedding")


class PreflightError(LLMUnavailableError):
    """An endpoint a run needs did not answer its preflight request; ``failures`` lists each one."""

    def __init__(self, message: str, failures: Sequence[ProbeResult] = ()) -> None:
        # ``failures`` has a default so that the exception survives pickling (a grid worker's result)
        last = failures[-1].error if failures else None
        super().__init__(message, retries=0, last_error=last)
        self.failures = list(failures)


@dataclass(frozen=True)
class Probe:
    """One endpoint to check: ``kind`` is "chat" or "embedding"; ``source`` says where it came from
    (a profile name or file, ``--base-url``, the embedded embedder, a label) for the error message."""

    kind: str
    endpoint: Endpoint
    source: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Probe.kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def key(self) -> tuple[str, str, str]:
        """What makes two probes the same check: kind, base URL (without a trailing slash), model."""
        return (self.kind, self.endpoint.base_url.rstrip("/"), self.endpoint.model)

    def describe(self) -> str:
        what = "chat endpoint" if self.kind == "chat" else "embedding endpoint"
        return f"{what} {self.endpoint.base_url} (model {self.endpoint.model!r}, {self.source})"


@dataclass(frozen=True)
class ProbeResult:
    probe: Probe
    ok: bool
    detail: str  # what answered, or the error
    seconds: float

    @property
    def error(self) -> str | None:
        return None if self.ok else self.detail


def _quick(endpoint: Endpoint, timeout_s: float) -> Endpoint:
    return dataclasses.replace(
        endpoint,
        timeout_s=min(endpoint.timeout_s, timeout_s),
        max_retries=PREFLIGHT_RETRIES,
        backoff_base_s=min(endpoint.backoff_base_s, 0.5),
        backoff_max_s=min(endpoint.backoff_max_s, 1.0),
    )


def _send(endpoint: Endpoint, purpose: str, request: Callable[[Any], str]) -> str:
    """Send ``request(client)`` with the endpoint's retries; its return value says what the endpoint did."""
    client = _make_openai_client(endpoint)
    try:
        out, _ = _call_with_retries(
            lambda: request(client),
            endpoint=endpoint,
            purpose=purpose,
            max_retries=endpoint.max_retries,
            backoff=_backoff(endpoint),
        )
        return out
    finally:
        client.close()


def _check_chat(endpoint: Endpoint) -> str:
    def once(client: Any) -> str:
        body, _ = endpoint.request_shape.body(
            [{"role": "user", "content": PREFLIGHT_PROMPT}],
            temperature=0.0,
            max_tokens=PREFLIGHT_MAX_TOKENS,
            stop=None,
            top_p=None,
            seed=None,
        )  # shaped like every call of the run (a GPT-5 model refuses max_tokens)
        post_chat(client, endpoint.model, body)  # raises on a reply without a choice holding a message
        return "answered a chat request"

    return _send(endpoint, "preflight chat", once)


def _check_embedding(endpoint: Endpoint) -> str:
    from antipersist_lib.serving.embeddings import _valid_vector

    def once(client: Any) -> str:
        resp = client.embeddings.create(model=endpoint.model, input=[PREFLIGHT_EMBED_TEXT], encoding_format="float")
        data = getattr(resp, "data", None)
        if not isinstance(data, list) or len(data) != 1:
            raise _TransientReplyError("malformed embeddings response (expected one vector)")
        vec = _valid_vector(getattr(data[0], "embedding", None), None)
        return f"answered with a {len(vec)}-dimensional embedding"

    return _send(endpoint, "preflight embedding", once)


def _backoff(endpoint: Endpoint) -> _Backoff:
    return _Backoff(endpoint.backoff_base_s, endpoint.backoff_max_s, 0, time.sleep)


def check(probe: Probe, *, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> ProbeResult:
    """Send the probe's one request (``PREFLIGHT_RETRIES`` retry, timeout at most ``timeout_s``); never raises
    for an endpoint error, the result says what happened."""
    endpoint = _quick(probe.endpoint, timeout_s)
    started = time.monotonic()
    try:
        detail = (_check_chat if probe.kind == "chat" else _check_embedding)(endpoint)
        ok = True
    except LLMError as exc:
        ok, detail = False, exc.last_error or str(exc)
    except Exception as exc:  # noqa: BLE001 - a bad URL or an SDK error is a failed check, reported as such
        ok, detail = False, f"{type(exc).__name__}: {exc}"
    return ProbeResult(probe, ok, detail, round(time.monotonic() - started, 3))


def distinct(probes: Iterable[Probe]) -> list[Probe]:
    """One probe per (kind, base URL, model), first occurrence kept, in order."""
    seen: dict[tuple[str, str, str], Probe] = {}
    for p in probes:
        seen.setdefault(p.key, p)
    return list(seen.values())


def _fix(probe: Probe) -> str:
    if probe.kind == "chat":
        return (
            "start the chat server (e.g. `vllm serve <model> --port <port>`, docs/protocol.md) or point the run at "
            "the right one (the profile's base_url / its base_url_env variable, or --base-url/--model), and check "
            f"the model name and the API-key variable {probe.endpoint.api_key_env!r}"
        )
    return (
        "start the embedding server (e.g. `vllm serve Qwen/Qwen3-Embedding-8B --task embed --port 8003`) or point "
        "the run at it (params/embeddings, $ANTIPERSIST_EMBED_BASE_URL), or use the in-process embedder "
        "(`--embedding embedded` / `embedding: embedded`); methods that retrieve need embeddings, without them "
        "they would silently run as ReAct"
    )


def failure_message(failures: Sequence[ProbeResult], what: str) -> str:
    lines = [f"{what}: {len(failures)} endpoint(s) did not answer the preflight request; nothing was run."]
    for r in failures:
        lines.append(f"- {r.probe.describe()}: {r.detail}")
        lines.append(f"  fix: {_fix(r.probe)}")
    lines.append(
        "Once they answer, re-run the same command to resume (completed work is kept). "
        "`python -m antipersist_lib doctor` checks endpoints; the preflight is skipped only by an explicit "
        "preflight: false."
    )
    return "\n".join(lines)


def run_preflight(
    probes: Iterable[Probe], *, what: str = "preflight", timeout_s: float = PREFLIGHT_TIMEOUT_S
) -> list[ProbeResult]:
    """Check every distinct probe (all of them, even after a failure, so the message lists every dead
    endpoint); raise ``PreflightError`` when any failed, else return the results."""
    results = [check(p, timeout_s=timeout_s) for p in distinct(probes)]
    failed = [r for r in results if not r.ok]
    if failed:
        raise PreflightError(failure_message(failed, what), failed)
    return results


def describe_results(results: Sequence[ProbeResult]) -> list[dict[str, Any]]:
    """JSON form (for logs and grid summaries)."""
    return [
        {
            "kind": r.probe.kind,
            "base_url": r.probe.endpoint.base_url,
            "model": r.probe.endpoint.model,
            "source": r.probe.source,
            "ok": r.ok,
            "detail": r.detail,
            "seconds": r.seconds,
        }
        for r in results
    ]
