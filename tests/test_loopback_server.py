"""The loopback server over raw HTTP (urllib): shapes, scripting, faults, dead switch, stop."""

from __future__ import annotations

import base64
import http.client
import json
import math
import struct
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from antipersist_lib.testing.loopback_server import (
    ROUTE_CHAT,
    ROUTE_EMBEDDINGS,
    FaultPlan,
    LoopbackServer,
    QueueResponder,
    ScriptedResponder,
    bag_of_words_embedding,
)


def _post(url: str, body: Any, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


CHAT = {
    "model": "scripted",
    "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go to the kitchen"}],
    "max_tokens": 50,
    "temperature": 0.0,
}


def test_models_route_lists_model_id() -> None:
    with LoopbackServer(model_id="tiny") as srv:
        status, body = _get(srv.base_url + "/models")
        assert srv.base_url.startswith("http://127.0.0.1:") and srv.base_url.endswith("/v1")
    assert status == 200
    payload = json.loads(body)
    assert payload["object"] == "list"
    assert [m["id"] for m in payload["data"]] == ["tiny"]


def test_chat_completion_shape_usage_and_recorded_request() -> None:
    responder = ScriptedResponder([("kitchen", "Action: go to kitchen")], default="nothing")
    with LoopbackServer(responder=responder) as srv:
        status, _, raw = _post(srv.base_url + "/chat/completions", CHAT)
        recorded = srv.requests
    assert status == 200
    body = json.loads(raw)
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert isinstance(body["created"], int) and body["model"] == "scripted"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "Action: go to kitchen"}
    assert choice["finish_reason"] == "stop"
    # whitespace word counts: "be brief" + "go to the kitchen" = 6; reply = 4
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 4, "total_tokens": 10}
    assert len(recorded) == 1
    assert recorded[0]["route"] == ROUTE_CHAT and recorded[0]["method"] == "POST"
    assert recorded[0]["body"] == CHAT and recorded[0]["fault"] is None
    assert recorded[0]["bearer_sha256"] is not None and "sk-test" not in json.dumps(recorded)


def test_scripted_responder_rules_scope_and_callables() -> None:
    req = {
        "messages": [
            {"role": "system", "content": "SECRET-SYSTEM"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "look around"}]},
        ]
    }
    last_user = ScriptedResponder([("SECRET-SYSTEM", "sys"), ("first", "old"), ("look", "new")], default="d")
    assert last_user(req) == "new"  # only the last user message is searched
    everything = ScriptedResponder([("SECRET-SYSTEM", "sys")], default="d", scope="all")
    assert everything(req) == "sys"
    by_predicate = ScriptedResponder([(lambda r: len(r["messages"]) == 4, lambda r: "n=4")], default="d")
    assert by_predicate(req) == "n=4"
    assert ScriptedResponder([("absent", "x")], default="fallback")(req) == "fallback"


def test_queue_responder_is_ordered_and_thread_safe() -> None:
    queue = QueueResponder([str(i) for i in range(200)])
    got: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            value = queue({})
            with lock:
                got.append(value)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=int) == [str(i) for i in range(200)]  # each reply exactly once
    assert queue.remaining == 0
    with pytest.raises(IndexError):
        queue({})
    assert QueueResponder([], default="z")({}) == "z"


def test_exhausted_queue_becomes_http_500() -> None:
    with LoopbackServer(responder=QueueResponder(["only"])) as srv:
        first = _post(srv.base_url + "/chat/completions", CHAT)
        second = _post(srv.base_url + "/chat/completions", CHAT)
    assert first[0] == 200 and json.loads(first[2])["choices"][0]["message"]["content"] == "only"
    assert second[0] == 500


def test_stop_and_max_tokens_truncate_like_a_server() -> None:
    with LoopbackServer(responder=lambda r: "one two three four five") as srv:
        _, _, a = _post(srv.base_url + "/chat/completions", {**CHAT, "max_tokens": 2})
        _, _, b = _post(srv.base_url + "/chat/completions", {**CHAT, "stop": [" three"]})
    a_choice, b_choice = json.loads(a)["choices"][0], json.loads(b)["choices"][0]
    assert a_choice["message"]["content"] == "one two" and a_choice["finish_reason"] == "length"
    assert b_choice["message"]["content"] == "one two" and b_choice["finish_reason"] == "stop"


def test_embeddings_shape_batch_and_base64() -> None:
    with LoopbackServer() as srv:
        status, _, raw = _post(srv.base_url + "/embeddings", {"model": "scripted", "input": ["a b", "c"]})
        _, _, raw64 = _post(
            srv.base_url + "/embeddings", {"model": "scripted", "input": "a b", "encoding_format": "base64"}
        )
    body = json.loads(raw)
    assert status == 200 and body["object"] == "list"
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(d["object"] == "embedding" and len(d["embedding"]) == 64 for d in body["data"])
    assert body["data"][0]["embedding"] == pytest.approx(bag_of_words_embedding("a b"))
    assert body["usage"]["prompt_tokens"] == 3
    packed = base64.b64decode(json.loads(raw64)["data"][0]["embedding"])
    assert list(struct.unpack("<64f", packed)) == pytest.approx(bag_of_words_embedding("a b"), abs=1e-6)


def test_bag_of_words_embedding_properties() -> None:
    v = bag_of_words_embedding("Open the FRIDGE, open it!", dim=32)
    assert len(v) == 32 and math.isclose(math.sqrt(sum(x * x for x in v)), 1.0)
    assert v == bag_of_words_embedding("open the fridge open it", dim=32)  # case/punctuation-blind
    wide = bag_of_words_embedding("open the fridge open it", dim=4096)
    # counts open=2, the=1, fridge=1, it=1, then L2-normalised (no collisions at this width)
    assert sorted(x for x in wide if x) == pytest.approx([1 / math.sqrt(7)] * 3 + [2 / math.sqrt(7)])
    a, b = bag_of_words_embedding("apple banana"), bag_of_words_embedding("cherry apple")
    assert sum(x * y for x, y in zip(a, b)) > 0
    assert bag_of_words_embedding("...") == [0.0] * 64
    assert len(bag_of_words_embedding("x", dim=7)) == 7


def test_embedder_exception_is_http_500() -> None:
    def broken(text: str) -> list[float]:
        raise RuntimeError("no")

    with LoopbackServer(embedder=broken) as srv:
        status, _, raw = _post(srv.base_url + "/embeddings", {"model": "scripted", "input": "x"})
    assert status == 500 and "error" in json.loads(raw)


def test_scripted_faults_are_consumed_in_order_and_counted() -> None:
    plan = FaultPlan.scripted(["429", "500", "503", "malformed", "empty", None])
    with LoopbackServer(responder=lambda r: "fine", faults=plan) as srv:
        results = [_post(srv.base_url + "/chat/completions", CHAT) for _ in range(6)]
        counts = dict(srv.fault_counts)
        faults = [r["fault"] for r in srv.requests]
    assert [r[0] for r in results] == [429, 500, 503, 200, 200, 200]
    assert results[0][1].get("Retry-After") == "0" and json.loads(results[0][2])["error"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(results[3][2])
    assert json.loads(results[4][2])["choices"][0]["message"]["content"] == ""
    assert json.loads(results[5][2])["choices"][0]["message"]["content"] == "fine"
    assert counts == {"429": 1, "500": 1, "503": 1, "malformed": 1, "empty": 1}
    assert faults == ["429", "500", "503", "malformed", "empty", None]


def test_timeout_fault_hangs_and_drop_fault_sends_nothing() -> None:
    plan = FaultPlan.scripted(["timeout", "drop"], hang_s=3.0)
    with LoopbackServer(faults=plan) as srv:
        start = time.monotonic()
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            _post(srv.base_url + "/chat/completions", CHAT, timeout=0.3)
        assert time.monotonic() - start < 2.0
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
        conn.request(
            "POST", "/v1/chat/completions", body=json.dumps(CHAT), headers={"Content-Type": "application/json"}
        )
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            conn.getresponse()
        conn.close()
        assert srv.fault_counts == {"timeout": 1, "drop": 1}


def test_random_fault_plan_is_reproducible_per_seed() -> None:
    def draws(seed: int) -> list[str | None]:
        plan = FaultPlan.random(0.5, seed=seed, kinds=["429", "500"])
        return [plan.next_fault(ROUTE_CHAT) for _ in range(200)]

    a, b, c = draws(1), draws(1), draws(2)
    assert a == b and a != c
    assert 60 < sum(x is not None for x in a) < 140
    assert set(a) == {None, "429", "500"}
    only_chat = FaultPlan.scripted(["500"], routes=[ROUTE_CHAT])
    assert only_chat.next_fault(ROUTE_EMBEDDINGS) is None and only_chat.next_fault(ROUTE_CHAT) == "500"
    with pytest.raises(ValueError):
        FaultPlan.scripted(["teapot"])


def test_dead_switch_per_route_and_revival() -> None:
    with LoopbackServer(responder=lambda r: "alive") as srv:
        srv.set_dead(True, route=ROUTE_CHAT)
        assert _post(srv.base_url + "/chat/completions", CHAT)[0] == 503
        assert _post(srv.base_url + "/embeddings", {"model": "m", "input": "x"})[0] == 200
        srv.set_dead(True)
        assert _get(srv.base_url + "/models")[0] == 503
        srv.set_dead(False)
        assert _post(srv.base_url + "/chat/completions", CHAT)[0] == 200
        assert srv.fault_counts == {"dead": 2}


def test_strict_model_404_and_bad_requests_400() -> None:
    with LoopbackServer(strict_model=True, model_id="real") as srv:
        assert _post(srv.base_url + "/chat/completions", {**CHAT, "model": "other"})[0] == 404
        assert _post(srv.base_url + "/chat/completions", {**CHAT, "model": "real"})[0] == 200
        assert _post(srv.base_url + "/chat/completions", {"model": "real", "messages": []})[0] == 400
        assert _post(srv.base_url + "/embeddings", {"model": "real", "input": [1, 2]})[0] == 400
        assert _post(srv.base_url + "/nope", {})[0] == 404
        assert srv.requests[-1]["route"] == "/v1/nope" and srv.requests[-1]["fault"] is None


def test_latency_is_applied_per_request() -> None:
    with LoopbackServer(latency_s=0.2) as srv:
        start = time.monotonic()
        _get(srv.base_url + "/models")
        assert time.monotonic() - start >= 0.2


def test_stop_is_prompt_even_with_a_hanging_request_and_keepalive_connection() -> None:
    srv = LoopbackServer(faults=FaultPlan.scripted(["timeout"], hang_s=30.0, routes=[ROUTE_CHAT])).start()
    port = srv.port
    idle = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    idle.request("GET", "/v1/models")
    idle.getresponse().read()  # leaves a kept-alive connection open on the server
    hanging = threading.Thread(target=lambda: _post(srv.base_url + "/chat/completions", CHAT, timeout=40), daemon=True)
    hanging.start()
    time.sleep(0.2)
    start = time.monotonic()
    srv.stop()
    assert time.monotonic() - start < 2.0
    hanging.join(timeout=5)
    assert not hanging.is_alive()
    with pytest.raises(OSError):
        _get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
    idle.close()
