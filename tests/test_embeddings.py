"""Embedder and embed_text against a real loopback HTTP server."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from antipersist_lib.serving.embeddings import Embedder, embed_text
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.serving.response_cache import ResponseCache
from antipersist_lib.testing.loopback_server import ROUTE_EMBEDDINGS, FaultPlan, LoopbackServer, bag_of_words_embedding


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[LoopbackServer] = []

    def start(**kwargs: Any) -> LoopbackServer:
        srv = LoopbackServer(**kwargs).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def make(srv: LoopbackServer, ledger: Ledger | None = None, **kw: Any) -> Embedder:
    ep = Endpoint(
        base_url=srv.base_url, model="scripted", timeout_s=2.0, max_retries=3, backoff_base_s=0.01, backoff_max_s=0.05
    )
    return Embedder(ep, ledger=ledger if ledger is not None else Ledger(), **kw)


def test_embed_text_format_and_truncation() -> None:
    obs = "x" * 499 + "YZ" + "tail" * 100
    text = embed_text("put a mug on the desk", obs)
    assert text == "put a mug on the desk\nInitial state: " + "x" * 499 + "Y"
    assert text.count("x") == 499 and "Z" not in text and "tail" not in text
    assert embed_text("a", "short") == "a\nInitial state: short"
    assert embed_text("a", "abcdef", prefix_chars=3) == "a\nInitial state: abc"


def test_embed_returns_float64_vector_of_server_dim(serve: Any) -> None:
    srv = serve(embedder=lambda t: bag_of_words_embedding(t, dim=48))
    ledger = Ledger()
    vec = make(srv, ledger).embed("open the fridge", tags={"task": "k"})
    assert isinstance(vec, np.ndarray) and vec.dtype == np.float64 and vec.shape == (48,)
    assert np.allclose(vec, bag_of_words_embedding("open the fridge", dim=48))
    (req,) = srv.requests_for(ROUTE_EMBEDDINGS)
    assert req["body"]["input"] == ["open the fridge"] and req["body"]["model"] == "scripted"
    (rec,) = ledger.records
    assert rec.purpose == "embedding" and rec.ok and rec.prompt_tokens == 3 and rec.tags == {"task": "k"}


def test_embed_many_is_one_request_in_order(serve: Any) -> None:
    srv = serve()
    texts = ["alpha beta", "gamma", "delta epsilon zeta"]
    vecs = make(srv).embed_many(texts)
    assert srv.request_count == 1
    for text, vec in zip(texts, vecs):
        assert vec is not None and np.allclose(vec, bag_of_words_embedding(text))
    assert make(srv).embed_many([]) == [] and srv.request_count == 1


def test_dead_server_returns_none_without_raising(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    srv = serve()
    srv.set_dead(True)
    ledger = Ledger()
    with caplog.at_level(logging.WARNING, logger="antipersist_lib.serving.embeddings"):
        assert make(srv, ledger).embed("anything") is None
    assert len(srv.requests) == 4  # one try + 3 retries
    assert "fall back to mode 'none'" in caplog.text and srv.base_url in caplog.text
    (rec,) = ledger.records
    assert not rec.ok and rec.retries == 3 and rec.purpose == "embedding"


def test_stopped_server_returns_none() -> None:
    srv = LoopbackServer().start()
    emb = make(srv)
    srv.stop()
    assert emb.embed("x") is None
    assert emb.embed_many(["a", "b"]) == [None, None]


def test_http_500_then_none_and_transient_500_recovers(serve: Any) -> None:
    always = serve(faults=FaultPlan.scripted(["500"] * 10))
    assert make(always).embed("x") is None
    once = serve(faults=FaultPlan.scripted(["500", "drop"]))
    ledger = Ledger()
    vec = make(once, ledger).embed("x y")
    assert vec is not None and ledger.records[0].retries == 2


def test_embedder_exception_on_server_is_none(serve: Any) -> None:
    def broken(text: str) -> list[float]:
        raise RuntimeError("model crashed")

    srv = serve(embedder=broken)
    assert make(srv).embed("x") is None
    assert srv.request_count == 4


@pytest.mark.parametrize(
    "bad",
    [
        lambda t: [],  # empty vector
        lambda t: [1.0, float("nan"), 0.0],  # non-finite
    ],
)
def test_wrong_shape_is_none(serve: Any, bad: Any) -> None:
    srv = serve(embedder=bad)
    assert make(srv).embed("x") is None
    assert srv.request_count == 4  # treated as transient, so retried


def test_empty_fault_then_recovery(serve: Any) -> None:
    srv = serve(faults=FaultPlan.scripted(["empty", "malformed"]))
    vec = make(srv).embed("recover me")
    assert vec is not None and vec.shape == (64,)
    assert srv.fault_counts == {"empty": 1, "malformed": 1}


def test_expected_dim_guards_against_swapped_model(serve: Any) -> None:
    srv = serve(embedder=lambda t: bag_of_words_embedding(t, dim=32))
    assert make(srv, expected_dim=64).embed("x") is None
    assert make(srv, expected_dim=32).embed("x").shape == (32,)


def test_not_found_model_is_none_without_retries(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    srv = serve(strict_model=True, model_id="other-embedder")
    with caplog.at_level(logging.ERROR, logger="antipersist_lib.serving.embeddings"):
        assert make(srv).embed("x") is None
    assert srv.request_count == 1 and "404" in caplog.text


def test_cache_by_content_and_partial_batches(serve: Any, tmp_path: Path) -> None:
    srv = serve()
    ledger = Ledger()
    emb = make(srv, ledger, cache=ResponseCache(tmp_path))
    first = emb.embed("cached text")
    again = emb.embed("cached text")
    assert len(srv.requests_for(ROUTE_EMBEDDINGS)) == 1 and np.array_equal(first, again)
    assert [r.cached for r in ledger.records] == [False, True]
    both = emb.embed_many(["cached text", "new text"])
    assert len(srv.requests_for(ROUTE_EMBEDDINGS)) == 2
    assert srv.requests[-1]["body"]["input"] == ["new text"]  # only the miss is sent
    assert np.array_equal(both[0], first) and np.allclose(both[1], bag_of_words_embedding("new text"))


def test_failed_embeddings_are_not_cached(serve: Any, tmp_path: Path) -> None:
    srv = serve()
    srv.set_dead(True)
    emb = make(srv, cache=ResponseCache(tmp_path))
    assert emb.embed("x") is None
    assert not list(tmp_path.rglob("*.json"))
    srv.set_dead(False)
    assert emb.embed("x") is not None and len(list(tmp_path.rglob("*.json"))) == 1
