"""The embedded default: the real llama.cpp server with Gemma 3 270M and the MiniLM embedder,
reached through the kit's own clients (slow; CI runs it)."""

from __future__ import annotations

import numpy as np
import pytest

from antipersist_lib.core import prompts
from antipersist_lib.serving.embedded import BACKBONE_MODEL, EmbeddedBackbone, EmbeddedEmbedder, rendered_prompt
from antipersist_lib.serving.embeddings import Embedder
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import LLMClient, merge_system


def test_system_prompt_is_folded_into_the_first_user_turn_as_gemma_does():
    msgs = [
        {"role": "system", "content": "RULES"},
        {"role": "user", "content": "TASK"},
        {"role": "assistant", "content": "Action: look"},
        {"role": "user", "content": "Observation: OK"},
    ]
    merged = merge_system(msgs)
    assert merged[0] == {"role": "user", "content": "RULES\n\nTASK"} and len(merged) == 3
    text = rendered_prompt(msgs)
    assert text.startswith("<start_of_turn>user\nRULES\n\nTASK<end_of_turn>\n")
    assert "<start_of_turn>model\nAction: look<end_of_turn>\n" in text
    assert text.endswith("<start_of_turn>model\n")


@pytest.mark.slow
def test_real_embedded_server_answers_chat_and_embeddings(tmp_path):
    ledger = Ledger(tmp_path / "calls.jsonl")
    with EmbeddedBackbone(log_path=tmp_path / "llama.log") as bb, EmbeddedEmbedder() as em:
        llm = LLMClient(bb.endpoint, ledger=ledger)
        system = prompts.agent_system_prompt("Commands: look, go to <room>.")
        reply = llm.chat(
            [{"role": "system", "content": system}, {"role": "user", "content": "You are in the hall. Begin."}],
            purpose="execution",
            max_tokens=16,
        )
        assert isinstance(reply.text, str) and reply.text.strip()
        assert 0 < reply.completion_tokens <= 16 and reply.prompt_tokens > 100  # the system prompt arrived
        emb = Embedder(em.endpoint, ledger=ledger)
        a = emb.embed("put a clean mug in the coffee machine")
        b = emb.embed("place a washed cup into the coffeemaker")
        c = emb.embed("measure the temperature of boiling water")
        assert a.shape == (384,) and np.all(np.isfinite(a))

        def cos(x, y):
            return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))

        assert cos(a, b) > cos(a, c)  # a real sentence embedder, not a hash
        assert bb.endpoint.model == BACKBONE_MODEL and ledger.count("execution") == 1 and ledger.count("embedding") == 3
    # the server process is gone after the context exits
    assert bb._proc is None


@pytest.mark.slow
def test_a_killed_server_is_seen_and_restarted_on_the_same_address(tmp_path):
    import signal

    with EmbeddedBackbone(log_path=tmp_path / "llama.log") as bb:
        url = bb.base_url
        assert bb.exit_code is None
        bb._proc.send_signal(signal.SIGKILL)  # what the kernel's OOM killer does
        bb._proc.wait(timeout=30)
        assert bb.exit_code == -signal.SIGKILL
        bb.restart()
        assert bb.exit_code is None and bb.base_url == url
        reply = LLMClient(bb.endpoint, ledger=Ledger()).chat(
            [{"role": "user", "content": "Say hi."}], purpose="execution", max_tokens=4
        )
        assert reply.completion_tokens >= 1
