"""The OpenAI-compatible embeddings client and the paper's ``embed_text``.

Why ``embed`` returns None instead of raising: when a trajectory cannot be embedded, the
paper's rule is to fall back to mode ``none`` and skip its outcome-log record, so an endpoint
failure is an expected outcome the caller handles, not a crash. Retries use the same policy as
the chat client (``llm._call_with_retries``); a response of the wrong shape (no data, an empty
or non-finite vector, the wrong dimension) counts as transient and is retried too.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from antipersist_lib.errors import LLMError, LLMRequestError
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import (
    Endpoint,
    Sleep,
    _Backoff,
    _call_with_retries,
    _make_openai_client,
    _ServerScopedCache,
    _TransientReplyError,
)
from antipersist_lib.serving.response_cache import ResponseCache, cache_key

log = logging.getLogger(__name__)

#: Characters of the initial observation kept by ``embed_text`` (the paper's truncate(obs, 500)).
OBSERVATION_PREFIX_CHARS = 500


def embed_text(instruction: str, initial_observation: str, prefix_chars: int = OBSERVATION_PREFIX_CHARS) -> str:
    """The text a trajectory is retrieved by.

    Paper: embed_text = instruction ‖ "Initial state:" ‖ truncate(obs, 500). The kit puts a
    newline before and a space after "Initial state:" so the last instruction word and the first
    observation word never fuse into one token.
    """
    return f"{instruction}\nInitial state: {initial_observation[:prefix_chars]}"


def _valid_vector(values: Any, expected_dim: int | None) -> list[float]:
    if not isinstance(values, (list, tuple)) or not values:
        raise _TransientReplyError("empty embedding vector")
    try:
        vec = [float(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise _TransientReplyError("non-numeric embedding vector") from exc
    if not all(math.isfinite(v) for v in vec):
        raise _TransientReplyError("non-finite values in embedding vector")
    if expected_dim is not None and len(vec) != expected_dim:
        raise _TransientReplyError(f"embedding has dimension {len(vec)}, expected {expected_dim}")
    return vec


class Embedder(_ServerScopedCache):
    """Embeds texts through ``POST /v1/embeddings``; None (with a warning) on failure.

    ``expected_dim`` guards against a silently swapped embedding model mid-run. Each
    ``embed``/``embed_many`` call makes at most one HTTP request (plus retries) and one ledger
    record with purpose "embedding"; ``cached`` is True when no request was needed.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        ledger: Ledger,
        cache: ResponseCache | None = None,
        max_retries: int | None = None,
        expected_dim: int | None = None,
        seed: int | None = None,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.endpoint = endpoint
        self.ledger = ledger
        self.max_retries = endpoint.max_retries if max_retries is None else int(max_retries)
        self.expected_dim = expected_dim
        self._backoff = _Backoff(endpoint.backoff_base_s, endpoint.backoff_max_s, seed, sleep)
        self._client = _make_openai_client(endpoint)
        self._init_cache(cache)

    def _key(self, text: str) -> str:
        return cache_key({"kind": "embedding", "model": self.endpoint.model, "input": text})

    def _once(self, texts: list[str]) -> tuple[list[list[float]], int]:
        resp = self._client.embeddings.create(model=self.endpoint.model, input=texts, encoding_format="float")
        data = getattr(resp, "data", None)
        if not isinstance(data, list) or len(data) != len(texts):
            raise _TransientReplyError(
                f"expected {len(texts)} embeddings, got {len(data) if isinstance(data, list) else 'none'}"
            )
        try:
            ordered = sorted(data, key=lambda d: int(d.index))
        except (AttributeError, TypeError, ValueError) as exc:
            raise _TransientReplyError("embedding items without a valid index") from exc
        vectors = [_valid_vector(getattr(d, "embedding", None), self.expected_dim) for d in ordered]
        if len({len(v) for v in vectors}) > 1:
            raise _TransientReplyError("embeddings of different dimensions in one response")
        usage = getattr(resp, "usage", None)
        return vectors, int(getattr(usage, "prompt_tokens", 0) or 0)

    def embed(
        self, text: str, *, tags: dict[str, Any] | None = None, max_retries: int | None = None
    ) -> np.ndarray | None:
        return self.embed_many([text], tags=tags, max_retries=max_retries)[0]

    def embed_many(
        self, texts: Sequence[str], *, tags: dict[str, Any] | None = None, max_retries: int | None = None
    ) -> list[np.ndarray | None]:
        """One vector (or None) per text, in order; uncached texts go in a single request.

        ``max_retries`` overrides the client's for this call: a method that follows B.3 literally
        (one embedding call, no retry) passes 0."""
        if max_retries is not None and (
            isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0
        ):
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        texts = [str(t) for t in texts]
        out: list[np.ndarray | None] = [None] * len(texts)
        if not texts:
            return out
        started = time.monotonic()
        missing: list[int] = []
        cache = self.cache
        for i, text in enumerate(texts):
            hit = cache.get(self._key(text)) if cache is not None else None
            try:
                if hit is not None:
                    out[i] = np.asarray(_valid_vector(hit.get("embedding"), self.expected_dim), dtype=np.float64)
            except _TransientReplyError:
                log.warning("embedding cache entry for text %d is unusable; re-embedding", i)
            if out[i] is None:
                missing.append(i)
        if not missing:
            self.ledger.record(
                "embedding", self.endpoint.model, latency_s=time.monotonic() - started, cached=True, tags=tags
            )
            return out
        batch = [texts[i] for i in missing]
        try:
            (vectors, tokens), retries = _call_with_retries(
                lambda: self._once(batch),
                endpoint=self.endpoint,
                purpose="embedding",
                max_retries=self.max_retries if max_retries is None else max_retries,
                backoff=self._backoff,
            )
        except LLMError as exc:
            self.ledger.record(
                "embedding",
                self.endpoint.model,
                latency_s=time.monotonic() - started,
                retries=exc.retries,
                ok=False,
                error=exc.last_error,
                tags=tags,
            )
            level = logging.ERROR if isinstance(exc, LLMRequestError) else logging.WARNING
            log.log(
                level,
                "embedding unavailable from %s (model %r) for %d text(s) after %d "
                "retries; callers fall back to mode 'none'. Last error: %s",
                self.endpoint.base_url,
                self.endpoint.model,
                len(batch),
                exc.retries,
                exc.last_error,
            )
            return out
        for i, vec in zip(missing, vectors):
            out[i] = np.asarray(vec, dtype=np.float64)
            if cache is not None:
                cache.put(self._key(texts[i]), {"embedding": vec})
        self.ledger.record(
            "embedding",
            self.endpoint.model,
            prompt_tokens=tokens,
            latency_s=time.monotonic() - started,
            retries=retries,
            tags=tags,
        )
        return out

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Embedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
