"""Preflight (serving/preflight.py): one small request to every endpoint a run, a grid or a study needs,
before any task; a dead endpoint stops everything in seconds, named, instead of a run that silently
falls back to mode ``none`` (ReAct) after every task's retries. Probes never reach the ledger or the cache.
Also: ``embedding: embedded`` starts the in-process embedder for the run and stops it afterwards."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from pathlib import Path

import pytest
import yaml

from antipersist_lib.runner.grid import grid_probes, load_grid, run_grid
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving import preflight
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.serving.preflight import PREFLIGHT_MAX_TOKENS, PREFLIGHT_PROMPT, PreflightError, Probe
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ROUTE_EMBEDDINGS, LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

AP_PARAMS = {"round_robin_iterations": 1, "warmup_per_mode": 1}


def dead_url() -> str:
    """A loopback port nobody listens on (connection refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def endpoint(url: str, model: str = "scripted") -> Endpoint:
    # the run's own budget is the default one (6 retries, seconds of backoff): the preflight must not use it
    return Endpoint(base_url=url, model=model, api_key_env="ANTIPERSIST_TEST_KEY")


def spec(tmp_path: Path, method: str = "anti_persistence", **kw) -> RunSpec:
    base = dict(
        method=method,
        benchmark="errandworld",
        backbone="loopback",
        embedding="bow",
        seed=1,
        iterations=1,
        train_per_iteration=2,
        max_steps=3,
        heldout_concurrency=1,
        heldout_limit=2,
        method_params=AP_PARAMS if method == "anti_persistence" else {},
        out_root=str(tmp_path / "runs"),
        cache_dir=None,
        progress=False,
    )
    base.update(kw)
    return RunSpec(**base)


def preflight_chats(srv: LoopbackServer) -> list[dict]:
    return [
        r
        for r in srv.requests_for(ROUTE_CHAT)
        if r["body"].get("messages", [{}])[-1].get("content") == PREFLIGHT_PROMPT
    ]


# -- the probes ------------------------------------------------------------------------------------


def test_a_live_endpoint_passes_with_one_small_request_each():
    with LoopbackServer(responder=errand_policy) as srv:
        results = preflight.run_preflight(
            [Probe("chat", endpoint(srv.base_url), "backbone x"), Probe("embedding", endpoint(srv.base_url), "emb y")]
        )
        assert [r.ok for r in results] == [True, True]
        (chat,) = srv.requests_for(ROUTE_CHAT)
        assert chat["body"]["max_tokens"] == PREFLIGHT_MAX_TOKENS <= 4
        assert len(srv.requests_for(ROUTE_EMBEDDINGS)) == 1
        assert "dimensional" in results[1].detail


def test_an_empty_completion_still_proves_the_endpoint_answers():
    """A reasoning model may spend all four tokens thinking: the reply is empty but the server is up."""
    with LoopbackServer(responder=lambda req: "") as srv:
        (r,) = preflight.run_preflight([Probe("chat", endpoint(srv.base_url), "backbone x")])
        assert r.ok


def test_a_dead_endpoint_is_reported_in_seconds_with_url_model_source_and_fix():
    url = dead_url()
    t0 = time.monotonic()
    with pytest.raises(PreflightError) as ei:
        preflight.run_preflight([Probe("embedding", endpoint(url, "Qwen/Qwen3-Embedding-8B"), "embedding my-emb")])
    assert time.monotonic() - t0 < 10  # one retry, short backoff: not the run's 6 retries (~50 s)
    msg = str(ei.value)
    assert url in msg and "Qwen/Qwen3-Embedding-8B" in msg and "embedding my-emb" in msg
    assert "Connection" in msg and "fix:" in msg and "--embedding embedded" in msg
    assert len(ei.value.failures) == 1 and not ei.value.failures[0].ok


def test_a_rejected_request_is_a_failure_too():
    with LoopbackServer(responder=errand_policy, model_id="served", strict_model=True) as srv:
        with pytest.raises(PreflightError, match=r"404"):
            preflight.run_preflight([Probe("chat", endpoint(srv.base_url, "wrong-name"), "backbone x")])


def test_every_failure_is_listed_and_each_endpoint_checked_once():
    dead = dead_url()
    with LoopbackServer(responder=errand_policy) as srv:
        probes = [
            Probe("chat", endpoint(srv.base_url), "backbone a"),
            Probe("chat", endpoint(srv.base_url + "/"), "backbone a again"),  # same endpoint
            Probe("chat", endpoint(dead, "m1"), "backbone b"),
            Probe("embedding", endpoint(dead, "e1"), "embedding c"),
        ]
        assert len(preflight.distinct(probes)) == 3
        with pytest.raises(PreflightError) as ei:
            preflight.run_preflight(probes)
        assert len(srv.requests_for(ROUTE_CHAT)) == 1
    msg = str(ei.value)
    assert "2 endpoint(s)" in msg and "backbone b" in msg and "embedding c" in msg and "backbone a" not in msg


# -- a run -----------------------------------------------------------------------------------------------


def test_a_run_without_its_embedding_server_stops_before_the_first_task(tmp_path):
    """The measured failure: Anti-Persistence with a reachable backbone and no embedding server used to run on,
    retrying every task's embedding and falling back to mode none (ReAct); now it stops at once."""
    dead = dead_url()
    with LoopbackServer(responder=errand_policy) as srv:
        s = spec(tmp_path)
        t0 = time.monotonic()
        with pytest.raises(PreflightError) as ei:
            run_cell(s, endpoint=endpoint(srv.base_url), embed_endpoint=endpoint(dead, "emb-model"), fsync=False)
        assert time.monotonic() - t0 < 15
        # only the chat probe reached the live server: no task ran
        assert len(srv.requests) == 1 and len(preflight_chats(srv)) == 1
    msg = str(ei.value)
    assert "embedding endpoint" in msg and dead in msg and "emb-model" in msg and "embedding bow" in msg
    run_dir = s.run_dir()  # nothing recorded but the manifest: the same command resumes cleanly
    for name in ("episodes_train.jsonl", "episodes_heldout.jsonl", "journal.jsonl", "calls.jsonl"):
        assert not (run_dir / name).exists() or not (run_dir / name).read_text().strip(), name


def test_a_dead_chat_endpoint_stops_the_run_and_names_it(tmp_path):
    dead = dead_url()
    with LoopbackServer(responder=errand_policy) as srv:
        with pytest.raises(PreflightError) as ei:
            run_cell(spec(tmp_path), endpoint=endpoint(dead, "org/chat"), embed_endpoint=endpoint(srv.base_url))
    assert "chat endpoint" in str(ei.value) and dead in str(ei.value) and "backbone loopback" in str(ei.value)


def test_react_needs_no_embedding_endpoint(tmp_path):
    with LoopbackServer(responder=errand_policy) as srv:
        summaries = run_cell(
            spec(tmp_path, method="react"), endpoint=endpoint(srv.base_url), embed_endpoint=endpoint(dead_url())
        )
        assert summaries and not srv.requests_for(ROUTE_EMBEDDINGS)


def test_probes_are_not_task_calls_and_a_finished_run_needs_no_endpoint(tmp_path):
    """The ledger (calls per task, the paper's counts) is the same with and without the preflight; the
    server saw exactly one chat and one embedding probe more. Re-running a finished run makes no request."""
    with LoopbackServer(responder=errand_policy) as srv:
        ep = endpoint(srv.base_url)
        counts, calls = {}, {}
        for flag in (False, True):
            before = {r: len(srv.requests_for(r)) for r in (ROUTE_CHAT, ROUTE_EMBEDDINGS)}
            s = spec(tmp_path / str(flag), preflight=flag)
            run_cell(s, endpoint=ep, embed_endpoint=ep, fsync=False)
            counts[flag] = {r: len(srv.requests_for(r)) - n for r, n in before.items()}
            calls[flag] = (s.run_dir() / "calls.jsonl").read_text().splitlines()
            held = [json.loads(x) for x in (s.run_dir() / "episodes_heldout.jsonl").read_text().splitlines()]
            assert all(r["embedding_ok"] for r in held)
        assert len(calls[True]) == len(calls[False]) and not any("preflight" in c for c in calls[True])
        assert counts[True][ROUTE_CHAT] == counts[False][ROUTE_CHAT] + 1
        assert counts[True][ROUTE_EMBEDDINGS] == counts[False][ROUTE_EMBEDDINGS] + 1
    dead = endpoint(dead_url())
    again = run_cell(spec(tmp_path / "True"), endpoint=dead, embed_endpoint=dead, fsync=False)
    assert again and again[-1].heldout_n == 2


def test_preflight_must_be_a_boolean(tmp_path):
    with pytest.raises(ValueError, match="preflight must be true or false"):
        spec(tmp_path, preflight="no")


# -- the in-process embedder ------------------------------------------------------------------------------


class FakeEmbedder:
    """Stands in for serving.embedded.EmbeddedEmbedder (MiniLM): a loopback server on the same interface."""

    instances: list[FakeEmbedder] = []

    def __init__(self, **kw) -> None:
        self.server = LoopbackServer()
        self.started = self.stopped = False
        FakeEmbedder.instances.append(self)

    def start(self) -> FakeEmbedder:
        self.server.start()
        self.started = True
        return self

    def stop(self) -> None:
        self.server.stop()
        self.stopped = True

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=self.server.base_url, model="all-MiniLM-L6-v2", api_key_env="ANTIPERSIST_TEST_KEY")


@pytest.fixture
def fake_embedder(monkeypatch):
    from antipersist_lib.serving import embedded

    FakeEmbedder.instances = []
    monkeypatch.setattr(embedded, "EmbeddedEmbedder", FakeEmbedder)
    return FakeEmbedder


def test_embedding_embedded_is_started_for_the_run_and_stopped_after(tmp_path, fake_embedder):
    with LoopbackServer(responder=errand_policy) as srv:
        s = spec(tmp_path, embedding="embedded")
        run_cell(s, endpoint=endpoint(srv.base_url), fsync=False)
        assert not srv.requests_for(ROUTE_EMBEDDINGS)  # the chat server embedded nothing
    (em,) = fake_embedder.instances
    assert em.started and em.stopped
    assert len(em.server.requests_for(ROUTE_EMBEDDINGS)) > 1  # the probe and the tasks' embeddings
    man = json.loads((s.run_dir() / "manifest.json").read_text())
    assert man["embedding"] == "embedded" and man["embedding_endpoint"]["model"] == "all-MiniLM-L6-v2"


def test_a_dead_chat_endpoint_is_named_before_the_embedder_loads(tmp_path, fake_embedder):
    """Issue 42: with the embedded embedder, a dead backbone was reported only after MiniLM had loaded."""
    s = spec(tmp_path, embedding="embedded")
    with pytest.raises(PreflightError):
        run_cell(s, endpoint=endpoint(dead_url()), fsync=False)
    (em,) = fake_embedder.instances
    assert not em.started and not s.run_dir().exists()


def test_the_in_process_embedder_is_stopped_when_the_run_fails(tmp_path, fake_embedder, monkeypatch):
    with LoopbackServer(responder=errand_policy) as srv:
        monkeypatch.setattr(FakeEmbedder, "endpoint", property(lambda self: endpoint(dead_url())))
        with pytest.raises(PreflightError, match="embedding"):
            run_cell(spec(tmp_path, embedding="embedded"), endpoint=endpoint(srv.base_url), fsync=False)
    (em,) = fake_embedder.instances
    assert em.started and em.stopped


def test_a_run_that_fails_a_check_leaves_no_folder_and_the_fixed_command_starts_afresh(tmp_path):
    """Issue 42: a failed preflight, or a bad method parameter, left a run folder behind, and the corrected
    command was then refused as 'a different configuration'."""
    s = spec(tmp_path)
    dead = endpoint(dead_url())
    with pytest.raises(PreflightError):
        run_cell(s, endpoint=dead, embed_endpoint=dead, fsync=False)
    bad = dataclasses.replace(s, method_params={"gama": 0.9})
    with pytest.raises(ValueError, match="gama"):
        run_cell(bad, endpoint=dead, embed_endpoint=dead, fsync=False)
    assert not Path(s.out_root).exists()
    with LoopbackServer(responder=errand_policy) as srv:
        run_cell(s, endpoint=endpoint(srv.base_url), embed_endpoint=endpoint(srv.base_url), fsync=False)
    assert (s.run_dir() / "summary.json").exists()


@pytest.mark.slow
def test_the_real_minilm_embedder_serves_a_run(tmp_path):
    pytest.importorskip("sentence_transformers")
    with LoopbackServer(responder=errand_policy) as srv:
        s = spec(tmp_path, method="trajectory_memory", embedding="embedded")
        run_cell(s, endpoint=endpoint(srv.base_url), fsync=False)
    man = json.loads((s.run_dir() / "manifest.json").read_text())
    assert man["embedding_endpoint"]["model"] == "all-MiniLM-L6-v2"
    held = [json.loads(x) for x in (s.run_dir() / "episodes_heldout.jsonl").read_text().splitlines()]
    assert held and all(r["embedding_ok"] for r in held)


# -- a grid -------------------------------------------------------------------------------------------------


def write_grid(tmp_path: Path, chat_urls: list[str], embed_url: str | None, **over) -> Path:
    backbones = [
        {"name": f"b{i}", "model": f"org/m{i}", "base_url": u, "api_key_env": "ANTIPERSIST_TEST_KEY"}
        for i, u in enumerate(chat_urls)
    ]
    data = {
        "name": "pf",
        "methods": ["react", "anti_persistence"],
        "benchmarks": ["errandworld"],
        "seeds": [1, 2, 3],
        "backbones": backbones,
        "embedding": "embedded" if embed_url is None else {"name": "e", "model": "org/e", "base_url": embed_url},
        "iterations": 1,
        "train_per_iteration": 2,
        "max_steps": 3,
        "heldout_limit": 1,
        "heldout_concurrency": 1,
        "method_params": {"anti_persistence": AP_PARAMS},
        "out_root": str(tmp_path / "runs"),
        "cache_dir": None,
        "executor": "serial",
        **over,
    }
    p = tmp_path / "grid.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_a_grid_checks_each_distinct_endpoint_once_and_launches_nothing_when_one_is_dead(tmp_path):
    dead_a, dead_e = dead_url(), dead_url()
    with LoopbackServer(responder=errand_policy) as srv:
        live = srv.base_url
        grid = load_grid(write_grid(tmp_path, [live, dead_a], dead_e))
        assert len(grid.runs) == 12
        probes = grid_probes(grid)
        assert sorted((p.kind, p.endpoint.base_url) for p in probes) == sorted(
            [("chat", srv.base_url), ("chat", dead_a), ("embedding", dead_e)]
        )
        t0 = time.monotonic()
        with pytest.raises(PreflightError) as ei:
            run_grid(grid, verbose=False)
        assert time.monotonic() - t0 < 15  # not 12 runs x their retries
        assert len(srv.requests) == 1  # the live backbone's one probe; no run was launched
    msg = str(ei.value)
    assert "grid pf" in msg and dead_a in msg and dead_e in msg and "org/m1" in msg and live not in msg
    assert not (tmp_path / "runs" / "errandworld").exists()


def test_grid_probes_skip_what_no_unfinished_run_needs(tmp_path):
    with LoopbackServer(responder=errand_policy) as srv:
        react_only = load_grid(write_grid(tmp_path, [srv.base_url], dead_url(), methods=["react"]))
        assert [p.kind for p in grid_probes(react_only)] == ["chat"]  # ReAct embeds nothing
        (tmp_path / "b").mkdir()
        embedded = load_grid(write_grid(tmp_path / "b", [srv.base_url], None))
        assert [p.kind for p in grid_probes(embedded)] == ["chat"]  # each run checks its own embedder
        assert all(r.embed_endpoint is None and r.spec.embedding == "embedded" for r in embedded.runs)
        outcomes = run_grid(react_only, verbose=False)
        assert all(o.status == "ok" for o in outcomes)
        assert grid_probes(react_only) == []  # every run finished: nothing to check, nothing needed
