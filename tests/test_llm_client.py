"""LLMClient, Ledger and ResponseCache against a real loopback HTTP server (no SDK patching)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from antipersist_lib.errors import LLMRequestError, LLMUnavailableError
from antipersist_lib.serving.ledger import CallRecord, Ledger, current_tags
from antipersist_lib.serving.llm import (
    ChatReply,
    Endpoint,
    LLMClient,
    ServerReply,
    _TransientReplyError,
    parse_chat_reply,
    server_identity,
)
from antipersist_lib.serving.response_cache import SERVER_FILE, ResponseCache, cache_key
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, FaultPlan, LoopbackServer, QueueResponder

MSGS = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Task: put a clean mug on the desk."},
]


@pytest.fixture
def serve() -> Iterator[Any]:
    """Factory that starts loopback servers and stops them all at teardown."""
    started: list[LoopbackServer] = []

    def start(**kwargs: Any) -> LoopbackServer:
        srv = LoopbackServer(**kwargs).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def endpoint(srv: LoopbackServer, **kw: Any) -> Endpoint:
    params: dict[str, Any] = {"timeout_s": 5.0, "max_retries": 4, "backoff_base_s": 0.01, "backoff_max_s": 0.05}
    params.update(kw)
    return Endpoint(base_url=srv.base_url, model="scripted", **params)


def chat_requests(srv: LoopbackServer) -> list[dict[str, Any]]:
    return srv.requests_for(ROUTE_CHAT)


# -- request/response ------------------------------------------------------------------------


def test_reply_arrives_and_server_received_exactly_what_was_sent(serve: Any) -> None:
    srv = serve(responder=lambda r: "Action: take mug 1 from shelf 1")
    ledger = Ledger()
    client = LLMClient(endpoint(srv), ledger=ledger, seed=1234)
    reply = client.chat(MSGS, purpose="execution", temperature=0.7, max_tokens=77, stop=["\n\n"], top_p=0.9)
    assert isinstance(reply, ChatReply)
    assert reply.text == "Action: take mug 1 from shelf 1"
    assert reply.finish_reason == "stop" and reply.cached is False and reply.retries == 0
    assert reply.prompt_tokens == 4 + 8 and reply.completion_tokens == 7  # server's word counts
    (received,) = chat_requests(srv)
    body = received["body"]
    assert body["messages"] == MSGS
    assert body["model"] == "scripted"
    assert body["max_tokens"] == 77 and body["temperature"] == 0.7 and body["top_p"] == 0.9
    assert body["seed"] == 1234 and body["stop"] == ["\n\n"]


def test_no_seed_means_no_seed_field(serve: Any) -> None:
    srv = serve()
    LLMClient(endpoint(srv), ledger=Ledger()).chat(MSGS, purpose="execution")
    assert "seed" not in chat_requests(srv)[0]["body"]


def test_ledger_records_purpose_tokens_latency_and_tags(serve: Any) -> None:
    srv = serve(responder=lambda r: "a b c", latency_s=0.05)
    ledger = Ledger()
    client = LLMClient(endpoint(srv), ledger=ledger)
    with ledger.tag(phase="train", iteration=3):
        client.chat(MSGS, purpose="execution", tags={"task": "alfworld/train/7"})
        client.chat(MSGS[1:], purpose="synthesis")
    client.chat(MSGS, purpose="judge")
    recs = ledger.records
    assert [r.purpose for r in recs] == ["execution", "synthesis", "judge"]
    assert [r.call_id for r in recs] == [1, 2, 3]
    assert recs[0].tags == {"phase": "train", "iteration": 3, "task": "alfworld/train/7"}
    assert recs[1].tags == {"phase": "train", "iteration": 3} and recs[2].tags == {}
    assert recs[0].prompt_tokens == 12 and recs[0].completion_tokens == 3 and recs[1].prompt_tokens == 8
    assert all(r.latency_s >= 0.05 and r.ok and not r.cached for r in recs)
    assert ledger.count() == 3 and ledger.count("execution") == 1
    assert ledger.count(phase="train") == 2 and ledger.count("synthesis", iteration=3) == 1
    assert ledger.count(iteration=4) == 0
    totals = ledger.totals()
    assert totals["execution"]["calls"] == 1 and totals["execution"]["total_tokens"] == 15
    assert totals["synthesis"]["prompt_tokens"] == 8


# -- retries ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "faults",
    [
        ["429"],
        ["500"],
        ["503"],
        ["malformed"],
        ["empty"],
        ["drop"],
        ["429", "500", "malformed", "empty", "drop"],
    ],
)
def test_transient_faults_are_retried_and_counted(serve: Any, faults: list[str]) -> None:
    srv = serve(responder=lambda r: "done", faults=FaultPlan.scripted(faults))
    ledger = Ledger()
    sleeps: list[float] = []
    client = LLMClient(endpoint(srv, max_retries=6), ledger=ledger, sleep=sleeps.append, seed=0)
    reply = client.chat(MSGS, purpose="execution")
    assert reply.text == "done" and reply.retries == len(faults)
    assert len(chat_requests(srv)) == len(faults) + 1
    assert len(sleeps) == len(faults)
    assert srv.fault_counts == {k: faults.count(k) for k in set(faults)}
    (rec,) = ledger.records
    assert rec.ok and rec.retries == len(faults) and rec.completion_tokens == 1


def test_every_retry_is_visible_at_the_default_log_level(serve: Any, caplog: Any) -> None:
    """A waiting run says why: each retry is a WARNING naming the endpoint, the error and the next wait."""
    import logging

    srv = serve(responder=lambda r: "done", faults=FaultPlan.scripted(["503", "500"]))
    client = LLMClient(endpoint(srv, max_retries=6), ledger=Ledger(), sleep=lambda s: None, seed=0)
    with caplog.at_level(logging.WARNING):
        client.chat(MSGS, purpose="execution")
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 2
    assert srv.base_url in lines[0] and "HTTP 503" in lines[0] and "retry 1 of 6 in" in lines[0]
    assert "HTTP 500" in lines[1] and "retry 2 of 6" in lines[1]


def test_timeout_is_retried(serve: Any) -> None:
    srv = serve(responder=lambda r: "late but fine", faults=FaultPlan.scripted(["timeout"], hang_s=6.0))
    client = LLMClient(endpoint(srv, timeout_s=0.5), ledger=Ledger())
    start = time.monotonic()
    reply = client.chat(MSGS, purpose="execution")
    elapsed = time.monotonic() - start
    assert reply.text == "late but fine" and reply.retries == 1
    assert 0.4 < elapsed < 4.0  # gave up after ~0.5 s instead of waiting the 6 s hang (margin for a loaded CI)
    assert reply.latency_s == pytest.approx(elapsed, abs=0.1)


def test_backoff_is_exponential_capped_and_seeded() -> None:
    def delays(seed: int) -> list[float]:
        sleeps: list[float] = []
        with LoopbackServer(faults=FaultPlan.scripted(["500"] * 5)) as srv:
            ep = endpoint(srv, max_retries=5, backoff_base_s=1.0, backoff_max_s=8.0)
            reply = LLMClient(ep, ledger=Ledger(), seed=seed, sleep=sleeps.append).chat(MSGS, purpose="execution")
        assert reply.retries == 5
        return sleeps

    a, b, c = delays(7), delays(7), delays(8)
    assert len(a) == 5 and a == b and a != c
    for i, d in enumerate(a):
        ceiling = min(8.0, 2.0**i)  # 1, 2, 4, 8, 8 (capped)
        assert ceiling / 2 <= d <= ceiling


@pytest.mark.parametrize("fault,status", [("400", 400), ("401", 401), ("404", 404)])
def test_permanent_errors_are_not_retried(serve: Any, fault: str, status: int) -> None:
    srv = serve(faults=FaultPlan.scripted([fault]))
    ledger = Ledger()
    client = LLMClient(endpoint(srv), ledger=ledger)
    with pytest.raises(LLMRequestError) as info:
        client.chat(MSGS, purpose="synthesis")
    assert len(chat_requests(srv)) == 1
    assert f"HTTP {status}" in str(info.value) and srv.base_url in str(info.value)
    assert not isinstance(info.value, LLMUnavailableError)
    (rec,) = ledger.records
    assert not rec.ok and rec.retries == 0 and rec.purpose == "synthesis" and f"HTTP {status}" in rec.error


def test_unknown_model_is_a_clear_404_without_retries(serve: Any) -> None:
    srv = serve(strict_model=True, model_id="served-model")
    with pytest.raises(LLMRequestError, match="does not exist"):
        LLMClient(endpoint(srv), ledger=Ledger()).chat(MSGS, purpose="execution")
    assert len(chat_requests(srv)) == 1


def test_dead_endpoint_raises_unavailable_within_bounded_time(serve: Any) -> None:
    srv = serve()
    srv.set_dead(True)
    ledger = Ledger()
    client = LLMClient(endpoint(srv, max_retries=3), ledger=ledger)
    start = time.monotonic()
    with pytest.raises(LLMUnavailableError) as info:
        client.chat(MSGS, purpose="synthesis", tags={"task": "t1"})
    assert time.monotonic() - start < 3.0
    message = str(info.value)
    assert srv.base_url in message and "'scripted'" in message and "synthesis" in message
    assert "503" in message and "re-run the same command" in message
    assert info.value.retries == 3 and len(chat_requests(srv)) == 4
    (rec,) = ledger.records
    assert not rec.ok and rec.retries == 3 and rec.tags == {"task": "t1"}


def test_stopped_server_connection_refused_is_unavailable() -> None:
    srv = LoopbackServer().start()
    ep = endpoint(srv, max_retries=2)
    srv.stop()
    with pytest.raises(LLMUnavailableError, match="Connection"):
        LLMClient(ep, ledger=Ledger()).chat(MSGS, purpose="execution")


def test_concurrent_chats_get_their_own_replies(serve: Any) -> None:
    lock = threading.Lock()
    in_flight = {"now": 0, "peak": 0}

    def responder(r: dict) -> str:  # counts the requests the server holds at once (no wall-clock bound)
        with lock:
            in_flight["now"] += 1
            in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
        time.sleep(0.1)
        with lock:
            in_flight["now"] -= 1
        return "echo " + r["messages"][-1]["content"]

    srv = serve(responder=responder)
    ledger = Ledger()
    client = LLMClient(endpoint(srv), ledger=ledger)
    results: dict[int, str] = {}

    def work(i: int) -> None:
        results[i] = client.chat([{"role": "user", "content": f"q{i}"}], purpose="execution", tags={"worker": i}).text

    threads = [threading.Thread(target=work, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: f"echo q{i}" for i in range(24)}
    assert in_flight["peak"] > 1  # the client does not serialize requests: they overlapped at the server
    assert sorted(r.call_id for r in ledger.records) == list(range(1, 25))
    assert sorted(r.tags["worker"] for r in ledger.records) == list(range(24))


# -- cache -----------------------------------------------------------------------------------


def test_cache_hit_makes_no_request_and_is_marked(serve: Any, tmp_path: Path) -> None:
    srv = serve(responder=QueueResponder(["first answer", "second answer"]))
    ledger = Ledger()
    cache = ResponseCache(tmp_path / "cache")
    client = LLMClient(endpoint(srv), ledger=ledger, cache=cache, seed=1)
    a = client.chat(MSGS, purpose="execution")
    before = len(chat_requests(srv))
    b = client.chat(MSGS, purpose="execution")
    assert len(chat_requests(srv)) == before == 1
    assert (a.text, a.cached) == ("first answer", False)
    assert (b.text, b.cached, b.retries) == ("first answer", True, 0)
    assert b.prompt_tokens == a.prompt_tokens and b.completion_tokens == a.completion_tokens
    assert [r.cached for r in ledger.records] == [False, True]
    assert ledger.totals()["execution"]["uncached_tokens"] == a.prompt_tokens + a.completion_tokens
    # a fresh client on the same cache dir (a resumed run) also replays without HTTP
    replay = LLMClient(endpoint(srv), ledger=Ledger(), cache=ResponseCache(tmp_path / "cache"), seed=1)
    assert replay.chat(MSGS, purpose="execution").text == "first answer" and len(chat_requests(srv)) == 1


def test_seed_and_decoding_parameters_are_part_of_the_key(serve: Any, tmp_path: Path) -> None:
    srv = serve(responder=QueueResponder(["s1", "s2", "hot", "short"]))
    cache = ResponseCache(tmp_path)
    one = LLMClient(endpoint(srv), ledger=Ledger(), cache=cache, seed=1)
    two = LLMClient(endpoint(srv), ledger=Ledger(), cache=cache, seed=2)
    assert one.chat(MSGS, purpose="execution").text == "s1"
    assert two.chat(MSGS, purpose="execution").text == "s2"
    assert one.chat(MSGS, purpose="execution", temperature=1.0).text == "hot"
    assert one.chat(MSGS, purpose="execution", max_tokens=5).text == "short"
    assert len(chat_requests(srv)) == 4
    assert one.chat(MSGS, purpose="execution").text == "s1" and len(chat_requests(srv)) == 4
    base = {"kind": "chat", "model": "m", "messages": MSGS, "temperature": 0.0, "seed": 1}
    assert cache_key(base) != cache_key({**base, "seed": 2})
    assert cache_key(base) == cache_key(dict(reversed(list(base.items()))))  # order-insensitive


def test_corrupt_cache_file_is_a_miss_and_gets_rewritten(serve: Any, tmp_path: Path) -> None:
    srv = serve(responder=QueueResponder(["fresh", "again"]))
    cache = ResponseCache(tmp_path)
    client = LLMClient(endpoint(srv), ledger=Ledger(), cache=cache, seed=3)
    client.chat(MSGS, purpose="execution")
    (entry,) = list(tmp_path.rglob("*.json"))
    assert entry.parent.name == entry.stem[:2] and len(entry.stem) == 64
    entry.write_text('{"text": "trunc', encoding="utf-8")
    reply = client.chat(MSGS, purpose="execution")
    assert reply.text == "again" and not reply.cached and len(chat_requests(srv)) == 2
    assert json.loads(entry.read_text(encoding="utf-8"))["text"] == "again"
    assert client.cache.get(entry.stem)["text"] == "again"


def test_failed_calls_are_not_cached(serve: Any, tmp_path: Path) -> None:
    srv = serve(responder=lambda r: "back")
    srv.set_dead(True)
    cache = ResponseCache(tmp_path)
    client = LLMClient(endpoint(srv, max_retries=1), ledger=Ledger(), cache=cache)
    with pytest.raises(LLMUnavailableError):
        client.chat(MSGS, purpose="execution")
    assert not list(tmp_path.rglob("*.json"))
    srv.set_dead(False)
    assert client.chat(MSGS, purpose="execution").text == "back"
    assert len(list(tmp_path.rglob("*.json"))) == 1


def test_disabled_cache_always_calls(serve: Any, tmp_path: Path) -> None:
    srv = serve()
    client = LLMClient(endpoint(srv), ledger=Ledger(), cache=ResponseCache(tmp_path, enabled=False))
    client.chat(MSGS, purpose="execution")
    client.chat(MSGS, purpose="execution")
    assert srv.request_count == 2 and not list(tmp_path.rglob("*.json"))


# -- ledger ----------------------------------------------------------------------------------


def test_ledger_file_round_trip_and_call_id_continuation(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    first = Ledger(path)
    first.record("execution", "m", prompt_tokens=10, completion_tokens=2, latency_s=0.5, tags={"task": "a"})
    first.record("synthesis", "m", ok=False, error="HTTP 503", retries=6)
    first.close()
    with open(path, "ab") as fh:
        fh.write(b'{"call_id": 99, "purp')  # a torn final line from a crash
    second = Ledger(path)
    assert [r.call_id for r in second.records] == [1, 2]
    assert second.records[0] == CallRecord.from_dict(second.records[0].to_dict())
    assert second.records[0].tags == {"task": "a"} and second.records[1].error == "HTTP 503"
    rec = second.record("execution", "m")
    assert rec.call_id == 3
    second.close()
    ids = [
        CallRecord.from_dict(json.loads(line)).call_id
        for line in path.read_text().splitlines()
        if line.strip().endswith("}")
    ]
    assert ids == [1, 2, 3]
    assert Ledger(path).count("execution") == 2


def test_ledger_tags_are_isolated_per_thread() -> None:
    ledger = Ledger()
    barrier = threading.Barrier(4)

    def work(i: int) -> None:
        with ledger.tag(worker=i, phase="eval"):
            barrier.wait()  # all four blocks are open at the same time
            for _ in range(5):
                ledger.record("execution", "m")
                time.sleep(0.001)
            assert current_tags() == {"worker": i, "phase": "eval"}
        assert current_tags() == {}

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert ledger.count(worker=i) == 5
    assert ledger.count(phase="eval") == 20
    with ledger.tag(phase="outer"):
        with ledger.tag(iteration=2):
            assert ledger.record("x", "m").tags == {"phase": "outer", "iteration": 2}
        assert ledger.record("x", "m").tags == {"phase": "outer"}


def test_ledger_refuses_text_in_tags_and_truncates_errors() -> None:
    ledger = Ledger()
    with pytest.raises(ValueError, match="never hold prompt"):
        ledger.record("synthesis", "m", tags={"guidance": "x" * 1000})
    with pytest.raises(ValueError):
        ledger.record("synthesis", "m", tags={"messages": [{"role": "user"}]})
    assert len(ledger.record("x", "m", ok=False, error="e" * 5000).error) <= 300


def test_ledger_never_stores_prompt_or_reply_text(serve: Any, tmp_path: Path) -> None:
    secret_prompt = "GUIDANCE-SENTINEL-prompt-words"
    srv = serve(responder=lambda r: "REPLY-SENTINEL-text")
    ledger = Ledger(tmp_path / "calls.jsonl")
    LLMClient(endpoint(srv), ledger=ledger).chat([{"role": "user", "content": secret_prompt}], purpose="synthesis")
    ledger.close()
    text = (tmp_path / "calls.jsonl").read_text()
    assert '"purpose":"synthesis"' in text
    assert "SENTINEL" not in text


# -- secrets ---------------------------------------------------------------------------------


def test_api_key_never_reaches_ledger_cache_or_repr(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-loopback-SECRET-0123456789abcdef"
    monkeypatch.setenv("AP_TEST_KEY", key)
    srv = serve(responder=lambda r: "ok")
    ep = endpoint(srv, api_key_env="AP_TEST_KEY")
    ledger = Ledger(tmp_path / "ledger.jsonl")
    client = LLMClient(ep, ledger=ledger, cache=ResponseCache(tmp_path / "cache"), seed=5)
    client.chat(MSGS, purpose="execution")
    client.chat(MSGS, purpose="execution")
    ledger.close()
    # the key was really used on the wire...
    assert chat_requests(srv)[0]["bearer_sha256"] == hashlib.sha256(key.encode()).hexdigest()[:16]
    # ...but is nowhere on disk or in the endpoint's printable forms
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(encoding="utf-8", errors="replace"), path
    assert key not in repr(ep) and key not in json.dumps(ep.describe())
    assert ep.describe()["api_key_env"] == "AP_TEST_KEY"
    assert ep.api_key() == key
    monkeypatch.delenv("AP_TEST_KEY")
    assert ep.api_key() == "EMPTY"  # read at call time, never stored


def test_ping_lists_models(serve: Any) -> None:
    srv = serve(model_id="qwen-test")
    client = LLMClient(endpoint(srv), ledger=Ledger())
    assert client.ping() == ["qwen-test"]
    srv.set_dead(True)
    with pytest.raises(LLMUnavailableError):
        client.ping()
    assert len(client.ledger) == 0


def test_endpoint_validation() -> None:
    with pytest.raises(ValueError):
        Endpoint(base_url="", model="m")
    with pytest.raises(ValueError):
        Endpoint(base_url="http://x/v1", model="m", max_retries=-1)
    with pytest.raises(ValueError):
        LLMClient(Endpoint(base_url="http://127.0.0.1:9/v1", model="m"), ledger=Ledger()).chat([], purpose="execution")


# -- the cache knows its server ----------------------------------------------------------------------


def test_two_servers_with_one_model_name_never_share_replies(tmp_path: Path) -> None:
    """Issue 42: a second server behind the same ``--model`` got the first one's replies from the cache."""
    with LoopbackServer(responder=lambda r: "from A") as a, LoopbackServer(responder=lambda r: "from B") as b:
        first = LLMClient(endpoint(a), ledger=Ledger(), cache=ResponseCache(tmp_path), seed=1)
        second = LLMClient(endpoint(b), ledger=Ledger(), cache=ResponseCache(tmp_path), seed=1)
        assert first.chat(MSGS, purpose="execution").text == "from A"
        reply = second.chat(MSGS, purpose="execution")
        assert (reply.text, reply.cached) == ("from B", False) and len(chat_requests(b)) == 1
        again = LLMClient(endpoint(a), ledger=Ledger(), cache=ResponseCache(tmp_path), seed=1)
        assert again.chat(MSGS, purpose="execution").cached  # the same server still replays
        urls = {a.base_url, b.base_url}
    folders = sorted(p.parent for p in tmp_path.rglob(SERVER_FILE))
    assert len(folders) == 2
    said = {json.loads((f / SERVER_FILE).read_text())["base_url"] for f in folders}
    assert said == urls


def test_what_the_server_reports_of_its_model_is_part_of_its_identity(tmp_path: Path) -> None:
    """New weights behind an unchanged name and URL: vLLM reports them in /v1/models (root), so the cache
    files the new server's replies apart; an embedded server's identity is its model file, not its port."""
    with LoopbackServer(responder=lambda r: "old weights") as srv:
        ep = endpoint(srv)
        old = server_identity(ep, LLMClient(ep, ledger=Ledger())._client)
        assert old["served"]["id"] == "scripted" and old["base_url"] == srv.base_url
        srv.model_root = "/models/new-checkpoint"
        new = server_identity(ep, LLMClient(ep, ledger=Ledger())._client)
        assert new["served"]["root"] == "/models/new-checkpoint" and new != old
    gone = server_identity(ep, LLMClient(ep, ledger=Ledger())._client)  # nothing answers: the URL alone
    assert gone == {"model": "scripted", "base_url": ep.base_url, "served": None}
    one = server_identity(Endpoint("http://127.0.0.1:1/v1", "m", server_id="embedded llama-server: m sha256 ab"))
    two = server_identity(Endpoint("http://127.0.0.1:2/v1", "m", server_id="embedded llama-server: m sha256 ab"))
    assert one == two == {"model": "m", "server": "embedded llama-server: m sha256 ab"}


def test_a_stalled_server_is_named_while_the_call_waits(monkeypatch, caplog) -> None:
    """Issue 42: a port that accepts and never answers gave a minute of silence. The call is named at WARNING
    while it waits (endpoint, model, seconds so far, when it gives up), before the timeout and the retry."""
    import logging

    from antipersist_lib.serving import llm as llm_module

    monkeypatch.setattr(llm_module, "STALL_REPORT_MIN_S", 0.5)
    plan = FaultPlan(sequence=["timeout"], hang_s=4.0, routes=(ROUTE_CHAT,))
    with LoopbackServer(responder=lambda r: "late", faults=plan) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", timeout_s=3.0, max_retries=1, backoff_base_s=0.01)
        with caplog.at_level(logging.WARNING, logger="antipersist_lib.serving.llm"):
            reply = LLMClient(ep, ledger=Ledger()).chat(MSGS, purpose="execution")
        url = srv.base_url
    assert reply.text == "late" and reply.retries == 1
    stalls = [r.getMessage() for r in caplog.records if r.getMessage().startswith("still waiting")]
    assert stalls and url in stalls[0] and "gives up at 3 s" in stalls[0], stalls
    retry = [r.getMessage() for r in caplog.records if "retry 1 of 1" in r.getMessage()]
    assert retry  # the timeout itself is named too, then the retry answers


# -- reading a reply ---------------------------------------------------------------------------


def test_a_reply_is_read_from_its_json_counting_reasoning_fields_and_tokens() -> None:
    reply = parse_chat_reply(
        {
            "choices": [
                {
                    "message": {"content": "Action: look", "reasoning_content": "abcd", "reasoning": "xy"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": 9,
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
        }
    )
    assert reply == ServerReply("Action: look", "stop", 12, 9, 5, 6)
    # usage absent, a boolean where a count belongs, a finish reason that is not text: zeros and None
    bare = parse_chat_reply(
        {"choices": [{"message": {"content": None}, "finish_reason": 3}], "usage": {"prompt_tokens": True}}
    )
    assert bare == ServerReply(None, None, 0, 0, 0, 0)
    odd = parse_chat_reply(
        {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": float("nan"), "completion_tokens": 4.0}}
    )
    assert (odd.prompt_tokens, odd.completion_tokens) == (0, 4)


@pytest.mark.parametrize(
    "payload",
    [
        [],
        {},
        {"choices": []},
        {"choices": [{}]},
        {"choices": [{"message": "text"}]},
        {"choices": [{"message": {"content": 7}}]},
    ],
)
def test_a_reply_without_a_readable_first_choice_is_transient(payload: Any) -> None:
    with pytest.raises(_TransientReplyError):
        parse_chat_reply(payload)
