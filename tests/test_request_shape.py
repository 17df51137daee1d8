"""Request shapes against servers that enforce their APIs' documented rules, through the real openai SDK.

The contract servers (``testing.api_contracts``) refuse what OpenAI's reasoning models, vLLM, llama.cpp's
server and Anthropic's compatible endpoint refuse, and return reasoning the way each does; the kit's
presets must get a correct request past each, read the answer and never the reasoning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from antipersist_lib.arc.controller import select_strategy
from antipersist_lib.arc.generator import task_pool
from antipersist_lib.arc.stores import Strategy
from antipersist_lib.core.agent import AgentConfig, run_episode
from antipersist_lib.core.synthesis import synthesize
from antipersist_lib.envs.errand_world import ErrandWorld, make_tasks
from antipersist_lib.errors import LLMRequestError, ReasoningBudgetError
from antipersist_lib.memory.trajectory_store import TrajectoryStore
from antipersist_lib.records import EpisodeOutcome, Step, Trajectory
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.serving.preflight import PREFLIGHT_PROMPT
from antipersist_lib.serving.request_shape import (
    DEFAULT_SHAPE,
    PRESETS,
    RequestShape,
    shape_from,
    split_reasoning,
)
from antipersist_lib.serving.response_cache import ResponseCache, cache_key
from antipersist_lib.testing.api_contracts import (
    AnthropicCompatContract,
    LlamaCppContract,
    OpenAIReasoningContract,
    VLLMContract,
)
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, LoopbackServer

TASK = make_tasks("train", 1)[0]  # ErrandWorld: bring the apple (in the garden) to the attic
MSGS = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Task: go north."}]


def client(server: LoopbackServer, shape: Any, **kw: Any) -> tuple[LLMClient, Ledger]:
    ledger = Ledger()
    ep = Endpoint(
        base_url=server.base_url,
        model="scripted",
        api_key_env="ANTIPERSIST_TEST_KEY",
        max_retries=3,
        backoff_base_s=0.001,
        backoff_max_s=0.01,
        request_shape=shape,
    )
    return LLMClient(ep, ledger=ledger, seed=7, **kw), ledger


def bodies(server: LoopbackServer) -> list[dict[str, Any]]:
    return [r["body"] for r in server.requests_for(ROUTE_CHAT)]


# -- what each preset sends --------------------------------------------------------------------------------


def test_the_default_shape_sends_what_the_kit_always_sent_and_keeps_its_cache_keys(tmp_path):
    with LoopbackServer(responder=lambda r: "Action: go north") as srv:
        llm, _ = client(srv, "openai-compatible", cache=ResponseCache(tmp_path / "cache"))
        llm.chat(MSGS, purpose="execution", temperature=0.2, max_tokens=48, stop=["\nObservation"], top_p=0.9)
        (body,) = bodies(srv)
    assert {k: v for k, v in body.items() if k != "messages"} == {
        "model": "scripted",
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 48,
        "stop": ["\nObservation"],
        "seed": 7,
    }
    # the key of a request made before request shapes existed: kind, model and the body, nothing else
    legacy = cache_key({"kind": "chat", "model": "scripted", **{k: v for k, v in body.items() if k != "model"}})
    assert llm.cache.get(legacy) is not None  # the same key, in the folder of the server that answered


def test_an_openai_reasoning_model_refuses_the_default_shape_with_its_own_words():
    with LoopbackServer(responder=lambda r: "Action: go north", api=OpenAIReasoningContract()) as srv:
        llm, ledger = client(srv, DEFAULT_SHAPE)
        with pytest.raises(LLMRequestError, match="'max_tokens' is not supported with this model"):
            llm.chat(MSGS, purpose="execution", max_tokens=48)
        assert len(bodies(srv)) == 1  # permanent: not retried
    assert ledger.records[-1].ok is False


def test_the_openai_reasoning_preset_gets_past_the_contract_and_cuts_at_stop_itself():
    answer = "Thought: north is open.\nAction: go north\nObservation: you go north"
    with LoopbackServer(responder=lambda r: answer, api=OpenAIReasoningContract(reasoning_tokens=40)) as srv:
        llm, ledger = client(srv, "openai-reasoning")
        reply = llm.chat(MSGS, purpose="execution", temperature=0.0, max_tokens=48, stop=["\nObservation"], top_p=0.9)
        (body,) = bodies(srv)
    assert set(body) == {"model", "messages", "max_completion_tokens"}
    assert body["max_completion_tokens"] == 48 + PRESETS["openai-reasoning"].reasoning_budget_tokens
    assert reply.text == "Thought: north is open.\nAction: go north"  # the stop string was applied here
    assert reply.reasoning_tokens == 40
    rec = ledger.records[-1]
    assert rec.reasoning_tokens == 40 and rec.ok


def test_reasoning_effort_and_extra_body_are_sent_verbatim():
    shape = {"preset": "openai-reasoning", "reasoning_effort": "low", "reasoning_budget_tokens": 100}
    with LoopbackServer(responder=lambda r: "fine", api=OpenAIReasoningContract(reasoning_tokens=64)) as srv:
        llm, _ = client(srv, shape)
        reply = llm.chat(MSGS, purpose="judge", max_tokens=10)
        (body,) = bodies(srv)
    assert body["reasoning_effort"] == "low" and body["max_completion_tokens"] == 110
    assert reply.reasoning_tokens == 32  # low effort: half the contract's 64
    vllm = {"preset": "vllm", "extra_body": {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20}}
    with LoopbackServer(responder=lambda r: "Action: go north", api=VLLMContract()) as srv:
        llm, _ = client(srv, vllm)
        reply = llm.chat(MSGS, purpose="execution", max_tokens=48, temperature=0.7, top_p=0.8)
        (body,) = bodies(srv)
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["top_k"] == 20
    assert body["max_tokens"] == 48 and body["temperature"] == 0.7 and body["seed"] == 7
    assert reply.text == "Action: go north" and reply.reasoning_chars == 0


def test_an_unknown_field_reaches_openai_as_the_refusal_it_is():
    shape = {"preset": "openai-reasoning", "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}
    with LoopbackServer(responder=lambda r: "x", api=OpenAIReasoningContract()) as srv:
        llm, _ = client(srv, shape)
        with pytest.raises(LLMRequestError, match="Unrecognized request argument supplied: chat_template_kwargs"):
            llm.chat(MSGS, purpose="execution", max_tokens=8)


def test_anthropic_shape_sends_no_seed_and_a_profile_above_its_temperature_ceiling_is_refused():
    contract = AnthropicCompatContract()
    with LoopbackServer(responder=lambda r: "Action: go north", api=contract) as srv:
        llm, _ = client(srv, "anthropic-openai")
        llm.chat(MSGS, purpose="execution", max_tokens=48, temperature=0.7)
        (body,) = bodies(srv)
        with pytest.raises(ValueError, match="above 1.0"):
            llm.chat(MSGS, purpose="execution", max_tokens=48, temperature=1.3)
    assert "seed" not in body and body["max_tokens"] == 48 and contract.ignored_seeds == 0 and contract.capped == 0
    from antipersist_lib.serving.profiles import validate_profile

    with pytest.raises(ValueError, match="temperature 1.5 is above 1.0"):
        validate_profile(
            {"model": "claude", "base_url": "http://x/v1", "request_shape": "anthropic-openai", "temperature": 1.5},
            "p.yaml",
        )


# -- reasoning is never the answer -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "answer", "unterminated"),
    [
        ("<think>go south</think>\n\nAction: go north", "Action: go north", False),
        ("I should go south.</think>Action: go north", "Action: go north", False),  # template opened the block
        ("<think>a</think>Action: go <think>b</think>north", "Action: go north", False),
        ("<think>still thinking about Action: go south", "", True),
        ("Action: go north", "Action: go north", False),
        ("  Action: go north\n", "  Action: go north\n", False),  # no tag: the content exactly as it is
    ],
)
def test_split_reasoning(content, answer, unterminated):
    split = split_reasoning(content)
    assert (split.answer, split.unterminated) == (answer, unterminated)
    assert split.reasoning_chars > 0 or "think" not in content


def test_inline_think_blocks_and_reasoning_fields_are_counted_not_kept(tmp_path):
    decoy = 'Action: go south {"choice": 9}'
    for contract in (
        VLLMContract(thinker=lambda r: decoy),
        VLLMContract(reasoning_parser=True, thinker=lambda r: decoy),
        VLLMContract(reasoning_parser=True, reasoning_field="reasoning", thinker=lambda r: decoy),
        LlamaCppContract(thinker=lambda r: decoy),
    ):
        with LoopbackServer(responder=lambda r: "Action: go north", api=contract) as srv:
            llm, ledger = client(srv, "vllm", cache=ResponseCache(tmp_path / contract.name))
            reply = llm.chat(MSGS, purpose="execution", max_tokens=48)
        assert reply.text == "Action: go north"
        assert reply.reasoning_chars == len(decoy) or reply.reasoning_chars >= len(decoy)
        assert ledger.records[-1].reasoning_chars == reply.reasoning_chars
    cached = [json.loads(p.read_text()) for p in (tmp_path).rglob("*.json")]
    assert cached and all("go south" not in c["text"] for c in cached)


def test_a_reply_cut_while_thinking_is_a_permanent_error_that_names_the_fix():
    for contract, shape in (
        (OpenAIReasoningContract(reasoning_tokens=500), {"preset": "openai-reasoning", "reasoning_budget_tokens": 0}),
        (VLLMContract(thinker=lambda r: "hmm " * 100), "vllm"),
        (VLLMContract(reasoning_parser=True, thinker=lambda r: "hmm " * 100), "vllm"),
    ):
        with LoopbackServer(responder=lambda r: "Action: go north", api=contract) as srv:
            llm, ledger = client(srv, shape)
            with pytest.raises(ReasoningBudgetError) as err:
                llm.chat(MSGS, purpose="execution", max_tokens=48)
            assert len(bodies(srv)) == 1, "a budget error must not be retried as an outage"
        text = str(err.value)
        assert "reasoning_budget_tokens" in text and "reasoning_effort" in text and "enable_thinking" in text
        assert ledger.records[-1].ok is False and "no answer" in ledger.records[-1].error


def test_an_empty_reply_without_reasoning_is_still_retried_as_transient():
    replies = iter(["", "Action: go north"])
    with LoopbackServer(responder=lambda r: next(replies)) as srv:
        llm, _ = client(srv, "vllm")
        assert llm.chat(MSGS, purpose="execution", max_tokens=48).text == "Action: go north"
        assert len(bodies(srv)) == 2


# -- the kit's readers see only the answer -----------------------------------------------------------------


def _thinking_server(answer_of, thought: str) -> LoopbackServer:
    return LoopbackServer(responder=answer_of, api=VLLMContract(thinker=lambda r: thought))


def test_the_agent_executes_the_action_after_the_think_block():
    task = TASK
    with _thinking_server(lambda r: "Action: go to garden", "Action: go to kitchen") as srv:
        llm, _ = client(srv, "vllm")
        res = run_episode(ErrandWorld(), task, llm, config=AgentConfig(max_steps=1))
        history = bodies(srv)
    assert [s.action for s in res.trajectory.steps] == ["go to garden"]
    assert all("kitchen" not in s.action + s.observation for s in res.trajectory.steps)
    assert len(history) == 1


def test_synthesis_guidance_holds_no_reasoning():
    store = TrajectoryStore()
    trajectory = Trajectory("You are in the hall.", (Step("go to garden", "You go to the garden."),))
    store.add(TASK, trajectory, EpisodeOutcome(True, n_steps=1), embedding=[1.0, 0.0])
    retrieved = store.retrieve(np.array([1.0, 0.0]), "imitation", TASK)
    with _thinking_server(lambda r: "Go to the garden first.", "SECRET-REASONING go to the cellar") as srv:
        llm, _ = client(srv, "vllm")
        guidance = synthesize("imitation", TASK.instruction, retrieved, llm)
    assert "Go to the garden first." in guidance.text and "SECRET-REASONING" not in guidance.text


def test_an_arc_selection_reads_the_json_after_the_think_block():
    task = task_pool("train19")[0]
    strategies = [Strategy(f"s{i}", f"strategy {i}", "new") for i in (1, 2, 3)]
    with _thinking_server(lambda r: '{"choice": 2, "reason": "fits"}', '{"choice": 3, "reason": "decoy"}') as srv:
        llm, _ = client(srv, "vllm")
        choice, called = select_strategy(task, llm, strategies)
    assert called and choice.index == 2 and choice.reason == "fits"


# -- profiles ------------------------------------------------------------------------------------------------


def test_shape_from_names_what_is_wrong():
    assert shape_from("vllm", "p") is PRESETS["vllm"]
    assert shape_from(None, "p") is DEFAULT_SHAPE
    assert shape_from(RequestShape(preset="x").describe() | {"preset": "vllm"}, "p").preset == "vllm"
    with pytest.raises(ValueError, match="unknown request_shape 'gpt5'"):
        shape_from("gpt5", "p.yaml")
    with pytest.raises(ValueError, match=r"unknown request_shape field\(s\) \['max_tokens'\]"):
        shape_from({"preset": "vllm", "max_tokens": 3}, "p.yaml")
    with pytest.raises(ValueError, match=r"extra_body may not set \['temperature'\]"):
        shape_from({"preset": "vllm", "extra_body": {"temperature": 0}}, "p.yaml")
    with pytest.raises(ValueError, match="reasoning_effort must be one of"):
        shape_from({"preset": "openai-reasoning", "reasoning_effort": "maximum"}, "p.yaml")


def test_a_changed_shape_never_reuses_a_cached_reply(tmp_path):
    cache = tmp_path / "cache"
    with LoopbackServer(responder=lambda r: "Action: go north") as srv:
        for shape in ("openai-compatible", "vllm", {"preset": "vllm", "extra_body": {"top_k": 5}}):
            llm, _ = client(srv, shape, cache=ResponseCache(cache))
            assert llm.chat(MSGS, purpose="execution", max_tokens=48).cached is False
        llm, _ = client(srv, "vllm", cache=ResponseCache(cache))
        assert llm.chat(MSGS, purpose="execution", max_tokens=48).cached is True


def test_the_manifest_form_rebuilds_the_endpoint():
    ep = Endpoint(
        base_url="http://x/v1", model="m", request_shape={"preset": "openai-reasoning", "reasoning_effort": "high"}
    )
    again = Endpoint(**ep.describe())
    assert again == ep and again.request_shape.reasoning_effort == "high"
    assert json.loads(json.dumps(ep.describe()))["request_shape"]["token_field"] == "max_completion_tokens"


def test_unshaped_callers_are_none(tmp_path: Path):
    """Every chat request of the kit goes through ``llm.post_chat`` (LLMClient and the preflight's shaped
    body): no other module builds a chat completion itself."""
    root = Path(__file__).resolve().parents[1] / "antipersist_lib"
    texts = {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in root.rglob("*.py")}
    assert [name for name, text in texts.items() if "chat.completions.create(" in text] == []
    # besides post_chat, only the embedded server's self-check (one token, before the server is handed out)
    assert sorted(name for name, text in texts.items() if "/chat/completions" in text) == [
        "serving/embedded.py",
        "serving/llm.py",
        "testing/loopback_server.py",
    ]
    assert sorted(name for name, text in texts.items() if "post_chat(" in text) == [
        "serving/llm.py",
        "serving/preflight.py",
    ]


# -- whole runs through the papers' model profiles ----------------------------------------------------------


def _run_through_profile(tmp_path: Path, monkeypatch, backbone: str, api: Any) -> tuple[Path, list[dict[str, Any]]]:
    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.runner.spec import RunSpec
    from antipersist_lib.testing.scripted_policy import errand_policy

    with LoopbackServer(responder=errand_policy, api=api) as srv:
        var = "ANTIPERSIST_URL_" + backbone.upper().replace("-", "_").replace(".", "_")
        monkeypatch.setenv(var, srv.base_url)
        spec = RunSpec(
            method="anti_persistence",
            benchmark="errandworld",
            backbone=backbone,
            embedding="bow",
            seed=1,
            iterations=2,
            train_per_iteration=3,
            max_steps=8,
            heldout_limit=2,
            heldout_concurrency=1,
            method_params={"round_robin_iterations": 1, "warmup_per_mode": 1},
            out_root=str(tmp_path / "runs"),
            cache_dir=None,
            progress=False,
        )
        embed = Endpoint(base_url=srv.base_url, model="bow", api_key_env="ANTIPERSIST_TEST_KEY", max_retries=0)
        summaries = run_cell(spec, embed_endpoint=embed)
        sent = bodies(srv)
    assert len(summaries) == 2
    return spec.run_dir(), sent


def test_a_run_on_the_gpt5_profile_sends_only_what_openai_reasoning_models_accept(tmp_path, monkeypatch):
    run_dir, sent = _run_through_profile(
        tmp_path, monkeypatch, "gpt-5-mini", OpenAIReasoningContract(reasoning_tokens=30)
    )
    assert len(sent) > 20
    for body in sent:
        assert not {"max_tokens", "temperature", "top_p", "stop", "seed"} & set(body), body.keys()
        assert body["model"] == "gpt-5-mini" and body["max_completion_tokens"] > 4096
    calls = [json.loads(x) for x in (run_dir / "calls.jsonl").read_text().splitlines()]
    assert {c["purpose"] for c in calls} >= {"execution", "synthesis"}
    assert all(c["ok"] for c in calls) and all(
        c["reasoning_tokens"] == 30 for c in calls if c["purpose"] != "embedding"
    )
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["endpoint"]["request_shape"]["preset"] == "openai-reasoning"
    assert man["request_shape"]["token_field"] == "max_completion_tokens"  # part of the run's identity
    held = [json.loads(x) for x in (run_dir / "episodes_heldout.jsonl").read_text().splitlines()]
    assert held and any(e["outcome"]["success"] for e in held)  # actions cut at the stop string by the kit still run


def test_a_run_on_a_no_thinking_qwen35_profile_never_lets_the_model_think(tmp_path, monkeypatch):
    decoy = "Action: go to cellar"
    contract = VLLMContract(thinks_by_default=True, thinker=lambda r: decoy)
    run_dir, sent = _run_through_profile(tmp_path, monkeypatch, "qwen3.5-9b", contract)
    for body in sent:
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
        assert "max_tokens" in body and ("seed" in body or body["messages"][-1]["content"] == PREFLIGHT_PROMPT)
    execution = [b for b in sent if "Commands:" in b["messages"][0]["content"]]
    assert execution and {b["temperature"] for b in execution} >= {0.7} and {b.get("top_p") for b in execution} == {0.8}
    assert "cellar" not in (run_dir / "episodes_train.jsonl").read_text()
    calls = [json.loads(x) for x in (run_dir / "calls.jsonl").read_text().splitlines()]
    assert not any(c.get("reasoning_chars") for c in calls)
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["request_shape"]["extra_body"] == {"chat_template_kwargs": {"enable_thinking": False}}


def test_the_admission_judge_reads_its_verdict_after_the_think_block(tmp_path):
    """F.2's judge answers ACCEPT after thinking REJECT: the kit admits, since only the answer is read."""
    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.runner.spec import RunSpec
    from antipersist_lib.testing.scripted_policy import errand_policy

    def answer(req: dict[str, Any]) -> str:
        asked = req["messages"][-1]["content"]
        return "ACCEPT\nIt is consistent." if "ACCEPT or REJECT" in asked else errand_policy(req)

    contract = VLLMContract(thinker=lambda r: "REJECT. This skill is wrong, REJECT it.")
    with LoopbackServer(responder=answer, api=contract) as srv:
        spec = RunSpec(method="abstraction_memory", benchmark="errandworld", backbone="loopback", embedding="bow",
                       seed=1, iterations=1, train_per_iteration=3, max_steps=4, heldout_limit=1,
                       heldout_concurrency=1, method_params={"judge": True}, out_root=str(tmp_path / "runs"),
                       cache_dir=None, progress=False)  # fmt: skip
        ep, _ = client(srv, "vllm")
        run_cell(spec, endpoint=ep.endpoint, embed_endpoint=ep.endpoint)
    verdicts = [json.loads(x) for x in (spec.run_dir() / "state" / "judge.jsonl").read_text().splitlines()]
    assert verdicts and all(v["accepted"] for v in verdicts)
