"""The embedded default: the kit's portable llama.cpp build serving registry models, the MiniLM embedder,
reached through the kit's own clients; a server that dies is reported with its signal, log tail and fix."""

from __future__ import annotations

import signal
import stat
import sys
import textwrap

import numpy as np
import pytest

from antipersist_lib.core import prompts
from antipersist_lib.errors import EmbeddedServerError
from antipersist_lib.serving.embedded import EmbeddedBackbone, EmbeddedEmbedder
from antipersist_lib.serving.embeddings import Embedder
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llama_build import LlamaBuild
from antipersist_lib.serving.llm import LLMClient, merge_system
from antipersist_lib.serving.models import ResolvedModel

#: the smallest registry model: the server mechanics do not depend on the model's quality
SMALL = "gemma-3-270m"

# A stand-in llama-server: answers /health like the real one, then dies the way a build compiled for another
# CPU does (a general protection fault: SIGSEGV) on the first generation request.
CRASHING_SERVER = textwrap.dedent(
    """\
    import json, os, signal, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"status": "ok"}).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def do_POST(self):
            print("ggml_compute_forward: fault in libggml-cpu.so", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        def log_message(self, *a):
            pass
    print("main: server is listening", file=sys.stderr, flush=True)
    HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def _fake_backbone(tmp_path, script: str) -> EmbeddedBackbone:
    bin_dir = tmp_path / "build" / "build" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "server.py").write_text(script)
    exe = bin_dir / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} "$(dirname "$0")/server.py" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    bb = EmbeddedBackbone(model=str(gguf), log_path=tmp_path / "server.log", startup_timeout_s=30)
    bb.model = ResolvedModel("tiny", gguf, "0" * 64, 4, "gguf", "native")
    bb.build = LlamaBuild(tmp_path / "build", {"baseline": "x86-64-v3"})
    return bb


def test_a_server_that_dies_on_its_first_token_is_reported_with_signal_log_tail_and_fix(tmp_path):
    bb = _fake_backbone(tmp_path, CRASHING_SERVER)
    with pytest.raises(EmbeddedServerError) as err:
        bb.start()
    text = str(err.value)
    assert "self-check" in text and "killed by signal 11 (SIGSEGV)" in text
    assert "fault in libggml-cpu.so" in text  # the log tail
    assert "llama info" in text and "make llama-rebuild" in text  # the fix
    assert "unavailable" not in text
    assert bb.exit_code is None and bb._proc is None  # nothing left running


def test_labels_name_the_registry_model_whole_before_anything_is_resolved(tmp_path):
    assert EmbeddedBackbone(model="qwen2.5-coder-0.5b-instruct").label == "embedded-qwen2.5-coder-0.5b-instruct"
    assert EmbeddedBackbone(model=str(tmp_path / "my.model.gguf")).label == "embedded-my.model"


def test_bad_server_options_are_named():
    with pytest.raises(ValueError, match="embedded server must be one of"):
        EmbeddedBackbone(server="vllm")
    with pytest.raises(ValueError, match="parallel must be a positive integer"):
        EmbeddedBackbone(parallel=0)
    with pytest.raises(ValueError, match="one slot"):
        EmbeddedBackbone(server="llama-cpp-python", parallel=2)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['gpu'\]"):
        EmbeddedBackbone.from_options({"gpu": True})


def test_llama_server_gets_each_slot_the_full_context_and_the_models_own_template(tmp_path):
    bb = EmbeddedBackbone(model="m", n_ctx=4096, parallel=3, port=1234)
    bb.model = ResolvedModel("m", tmp_path / "m.gguf", "0" * 64, 4, "gguf", "native")
    bb.build = LlamaBuild(tmp_path, {"baseline": "x86-64-v3"})
    cmd = bb.command()
    assert cmd[cmd.index("--ctx-size") + 1] == str(3 * 4096) and cmd[cmd.index("--parallel") + 1] == "3"
    assert "--jinja" in cmd and "--chat-template" not in cmd
    bb.model = ResolvedModel("g", tmp_path / "g.gguf", "0" * 64, 4, "gemma", "merge")
    cmd = bb.command()
    assert cmd[cmd.index("--chat-template") + 1] == "gemma" and "--jinja" not in cmd and "--no-jinja" in cmd
    assert bb.endpoint.system_prompt == "merge"
    bb.server = "llama-cpp-python"
    assert "--chat_format" in bb.command() and bb.build.env()["LLAMA_CPP_LIB_PATH"] == str(bb.build.lib_dir)


@pytest.mark.slow
def test_real_embedded_server_answers_chat_and_embeddings(tmp_path):
    ledger = Ledger(tmp_path / "calls.jsonl")
    with EmbeddedBackbone(model=SMALL, log_path=tmp_path / "llama.log") as bb, EmbeddedEmbedder() as em:
        assert bb.first_token_s is not None  # the self-check generated a token before start() returned
        info = bb.describe()
        assert info["model"]["sha256"] == bb.model.sha256 and info["llama_cpp_build"]["features"]
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
        assert bb.endpoint.model == SMALL and ledger.count("execution") == 1 and ledger.count("embedding") == 3

        # what the model reads: Gemma's template has no system role, so the kit folds it into the first turn
        msgs = [
            {"role": "system", "content": "RULES"},
            {"role": "user", "content": "TASK"},
            {"role": "assistant", "content": "Action: look"},
            {"role": "user", "content": "Observation: OK"},
        ]
        assert merge_system(msgs)[0] == {"role": "user", "content": "RULES\n\nTASK"}
        text = bb.rendered_prompt(msgs)
        assert "<start_of_turn>user\nRULES\n\nTASK<end_of_turn>\n" in text
        assert "<start_of_turn>model\nAction: look<end_of_turn>\n" in text
        assert text.endswith("<start_of_turn>model\n")
    assert bb._proc is None  # the server process is gone after the context exits


@pytest.mark.slow
def test_an_instruction_model_is_served_with_the_chatml_template_stored_in_its_file(tmp_path):
    with EmbeddedBackbone(model="qwen2.5-coder-0.5b-instruct", log_path=tmp_path / "llama.log") as bb:
        text = bb.rendered_prompt([{"role": "system", "content": "RULES"}, {"role": "user", "content": "TASK"}])
        assert "<|im_start|>system\nRULES<|im_end|>" in text and "<|im_start|>user\nTASK<|im_end|>" in text
        assert text.rstrip().endswith("<|im_start|>assistant")
        reply = LLMClient(bb.endpoint, ledger=Ledger()).chat(
            [{"role": "user", "content": "Reply with the single word: yes"}], purpose="execution", max_tokens=4
        )
        assert "yes" in reply.text.lower()  # an instruction model follows an instruction


@pytest.mark.slow
def test_a_killed_server_is_seen_reported_and_restarted_on_the_same_address(tmp_path):
    with EmbeddedBackbone(model=SMALL, log_path=tmp_path / "llama.log") as bb:
        url = bb.base_url
        assert bb.exit_code is None
        bb._proc.send_signal(signal.SIGKILL)  # what the kernel's OOM killer does
        bb._proc.wait(timeout=30)
        assert bb.exit_code == -signal.SIGKILL
        report = bb.crash_report("it died during a test")
        assert "killed by signal 9 (SIGKILL)" in report and "out-of-memory" in report and "fix:" in report
        bb.restart()
        assert bb.exit_code is None and bb.base_url == url and bb.first_token_s is not None
        reply = LLMClient(bb.endpoint, ledger=Ledger()).chat(
            [{"role": "user", "content": "Say hi."}], purpose="execution", max_tokens=4
        )
        assert reply.completion_tokens >= 1


@pytest.mark.slow
def test_the_llama_cpp_python_server_runs_on_the_same_portable_library(tmp_path):
    with EmbeddedBackbone(model=SMALL, server="llama-cpp-python", log_path=tmp_path / "llama.log") as bb:
        reply = LLMClient(bb.endpoint, ledger=Ledger()).chat(
            [{"role": "user", "content": "Say hi."}], purpose="execution", max_tokens=4
        )
        assert reply.completion_tokens >= 1 and bb.first_token_s is not None


def test_a_server_started_by_the_kit_dies_when_the_kit_is_killed(tmp_path):
    """A main job stopped with SIGKILL runs no cleanup: its llama-server must not live on as an orphan. The
    parent runs with a PATH that holds only ``sleep``, as on a slim machine without util-linux's ``setpriv``
    (a CI machine was one, and the child outlived the parent there)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from antipersist_lib.serving.process_report import tied_to_parent

    assert tied_to_parent(["sleep", "1"])[-2:] == [shutil.which("sleep"), "1"]
    slim_bin = tmp_path / "bin"
    slim_bin.mkdir()
    (slim_bin / "sleep").symlink_to(shutil.which("sleep"))
    parent_code = (
        "import subprocess, sys, time\n"
        "from antipersist_lib.serving.process_report import tied_to_parent\n"
        "p = subprocess.Popen(tied_to_parent(['sleep', '300']))\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PATH": str(slim_bin)},
    )
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 30  # wait until the child is the program itself, past the tie
    while open(f"/proc/{child}/comm").read().strip() != "sleep":
        assert time.monotonic() < deadline, "the child never became `sleep`"
        time.sleep(0.05)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # a zombie of an exited child shows in /proc as state Z until init reaps it
        try:
            if open(f"/proc/{child}/stat").read().split()[2] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.2)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the child outlived the killed parent")


def test_a_tied_child_whose_kit_died_before_the_tie_never_starts_its_program(tmp_path):
    """The kit can die between fork and ``prctl``; the child, re-parented by then, must quit instead of
    running untied. Simulated by naming a parent that is not the child's."""
    import os
    import subprocess
    import threading

    from antipersist_lib.serving.process_report import tied_to_parent

    marker = tmp_path / "ran"
    command = tied_to_parent(["touch", str(marker)], parent_pid=os.getppid())  # not the child's parent
    assert subprocess.run(command, timeout=60).returncode == 0
    assert not marker.exists()
    assert subprocess.run(tied_to_parent(["touch", str(marker)]), timeout=60).returncode == 0
    assert marker.exists()  # with the true parent the program runs
    # a missing program and a worker thread get the command as is (Popen raises; no thread-bound tie)
    assert tied_to_parent(["no-such-program-xyz", "1"]) == ["no-such-program-xyz", "1"]
    seen = []
    worker = threading.Thread(target=lambda: seen.append(tied_to_parent(["sleep", "1"])))
    worker.start()
    worker.join()
    assert seen == [["sleep", "1"]]
