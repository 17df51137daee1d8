"""Backbone and embedding profiles: one base URL per model (own variable > global variable >
base_url), the shipped profiles' distinct ports, the agent's decoding per backbone, and field
validation that names the file and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from antipersist_lib.serving.profiles import agent_decoding, backbone_endpoint, embedding_endpoint, load_profile

ROOT = Path(__file__).resolve().parents[1]
URL_VARS = (
    "ANTIPERSIST_BASE_URL",
    "ANTIPERSIST_EMBED_BASE_URL",
    "ANTIPERSIST_URL_LLAMA_4_SCOUT",
    "ANTIPERSIST_URL_QWEN3_CODER_NEXT",
    "ANTIPERSIST_URL_GEMMA_4_31B_IT",
    "ANTIPERSIST_URL_QWEN3_EMBEDDING_8B",
    "ANTIPERSIST_URL_QWEN3_5_4B",
    "ANTIPERSIST_URL_QWEN3_5_9B",
    "ANTIPERSIST_URL_QWEN3_5_27B",
    "ANTIPERSIST_URL_GPT_5_MINI",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv("ANTIPERSIST_PARAMS", raising=False)
    for var in URL_VARS:
        monkeypatch.delenv(var, raising=False)


def write_profile(tmp_path: Path, kind: str, name: str, **fields) -> Path:
    d = tmp_path / "params" / kind
    d.mkdir(parents=True, exist_ok=True)
    data = {"name": name, "model": f"org/{name}", "base_url": "http://127.0.0.1:9000/v1", **fields}
    (d / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return tmp_path / "params"


def test_shipped_profiles_have_their_own_port_variable_and_serve_line():
    """Self-served models (vLLM) each get a port of their own and a ``vllm serve`` line that uses it; hosted
    APIs an https URL. Every profile has its own base-URL variable and says what the papers say of it."""
    ports, hosted = {}, {}
    for kind in ("backbones", "embeddings"):
        for path in sorted((ROOT / "params" / kind).glob("*.yaml")):
            data = load_profile(kind, path.stem)
            assert data["base_url_env"] == "ANTIPERSIST_URL_" + re.sub(r"[^A-Z0-9]", "_", path.stem.upper())
            if data["base_url"].startswith("https://"):
                hosted[path.stem] = (
                    data["base_url"],
                    data["api_key_env"],
                    backbone_endpoint(path.stem).request_shape.preset,
                )
                continue
            port = int(re.search(r":(\d+)/v1$", data["base_url"]).group(1))
            comment = path.read_text().split("\nname:")[0]
            assert "vllm serve" in comment and f"--port {port}" in comment, (
                f"{path}: its vllm serve line must use port {port}"
            )
            ports[path.stem] = port
            if kind == "backbones":
                assert backbone_endpoint(path.stem).request_shape.preset == "vllm", path
            assert kind == "embeddings" or data.get("paper"), f"{path}: say what the papers say of the model"
    assert ports == {
        "llama-4-scout": 8000,
        "qwen3-coder-next": 8001,
        "gemma-4-31b-it": 8002,
        "qwen3-embedding-8b": 8003,
        "qwen3.5-4b": 8010,
        "qwen3.5-9b": 8011,
        "qwen3.5-27b": 8012,
    }
    openai = "https://api.openai.com/v1"
    assert hosted == {
        **{
            m: (openai, "OPENAI_API_KEY", "openai-reasoning")
            for m in ("gpt-5.4", "gpt-5.4-mini", "gpt-5-mini", "gpt-5-nano", "gpt-5.5")
        },
        "gpt-4.1": (openai, "OPENAI_API_KEY", "openai-chat"),
        "gpt-4o": (openai, "OPENAI_API_KEY", "openai-chat"),
        "claude-haiku-4.5": ("https://api.anthropic.com/v1", "ANTHROPIC_API_KEY", "anthropic-openai"),
    }
    for size in ("4b", "9b", "27b"):  # the faulty-memories paper's no-thinking rollouts
        shape = backbone_endpoint(f"qwen3.5-{size}").request_shape
        assert shape.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}


def test_url_precedence_own_variable_then_global_then_file(monkeypatch):
    assert backbone_endpoint("qwen3-coder-next").base_url == "http://127.0.0.1:8001/v1"
    monkeypatch.setenv("ANTIPERSIST_BASE_URL", "http://router:9000/v1")
    assert backbone_endpoint("qwen3-coder-next").base_url == "http://router:9000/v1"
    assert backbone_endpoint("llama-4-scout").base_url == "http://router:9000/v1"
    monkeypatch.setenv("ANTIPERSIST_URL_QWEN3_CODER_NEXT", "http://gpu-2:8001/v1")
    assert backbone_endpoint("qwen3-coder-next").base_url == "http://gpu-2:8001/v1"
    assert backbone_endpoint("llama-4-scout").base_url == "http://router:9000/v1"  # only its own model moved
    # embeddings: their own global variable, not the backbones'
    assert embedding_endpoint("qwen3-embedding-8b").base_url == "http://127.0.0.1:8003/v1"
    monkeypatch.setenv("ANTIPERSIST_EMBED_BASE_URL", "http://emb:9001/v1")
    assert embedding_endpoint("qwen3-embedding-8b").base_url == "http://emb:9001/v1"
    monkeypatch.setenv("ANTIPERSIST_URL_QWEN3_EMBEDDING_8B", "http://gpu-3:8003/v1")
    assert embedding_endpoint("qwen3-embedding-8b").base_url == "http://gpu-3:8003/v1"
    monkeypatch.setenv("ANTIPERSIST_URL_QWEN3_CODER_NEXT", "")  # empty = unset
    assert backbone_endpoint("qwen3-coder-next").base_url == "http://router:9000/v1"


def test_agent_decoding_from_the_profile():
    for name in ("llama-4-scout", "qwen3-coder-next", "gemma-4-31b-it"):
        assert agent_decoding(name) == {"temperature": 0.7, "top_p": 0.95}
    assert agent_decoding("embedded-gemma-3-270m") == {}  # a label without a profile file


def test_agent_decoding_only_the_keys_present(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTIPERSIST_PARAMS", str(write_profile(tmp_path, "backbones", "greedy", temperature=0)))
    assert agent_decoding("greedy") == {"temperature": 0.0}
    write_profile(tmp_path, "backbones", "plain")
    assert agent_decoding("plain") == {}
    ep = backbone_endpoint("greedy")  # decoding is the agent's, not the endpoint's
    assert not hasattr(ep, "temperature") and "temperature" not in ep.describe()


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"temperature": -0.1}, r"'temperature' must be a number in \[0, 2\]"),
        ({"temperature": 2.5}, r"'temperature' must be a number in \[0, 2\]"),
        ({"temperature": "hot"}, r"'temperature' must be a number in \[0, 2\]"),
        ({"temperature": True}, r"'temperature' must be a number in \[0, 2\]"),
        ({"top_p": 0}, r"'top_p' must be a number in \(0, 1\]"),
        ({"top_p": 1.5}, r"'top_p' must be a number in \(0, 1\]"),
        ({"base_url_env": "MY-URL"}, r"'base_url_env' must name an environment variable"),
        ({"base_url_env": 3}, r"'base_url_env' must name an environment variable"),
        ({"base_url": "http://user:sk-secret@host/v1"}, r"'base_url' carries credentials.*api_key_env"),
        ({"base_url": ""}, r"'base_url' must be a non-empty string"),
        ({"temprature": 0.5}, r"unknown key\(s\) \['temprature'\]"),
    ],
)
def test_bad_fields_name_the_file_and_field(tmp_path, monkeypatch, fields, message):
    params = write_profile(tmp_path, "backbones", "bad", **fields)
    monkeypatch.setenv("ANTIPERSIST_PARAMS", str(params))
    with pytest.raises(ValueError, match=message) as info:
        load_profile("backbones", "bad")
    assert str(params / "backbones" / "bad.yaml") in str(info.value)
    assert "sk-secret" not in str(info.value)


def test_credentials_in_a_url_variable_are_refused(monkeypatch):
    monkeypatch.setenv("ANTIPERSIST_URL_LLAMA_4_SCOUT", "http://me:sk-secret@gpu-1:8000/v1")
    with pytest.raises(ValueError, match=r"\$ANTIPERSIST_URL_LLAMA_4_SCOUT carries credentials") as info:
        backbone_endpoint("llama-4-scout")
    assert "sk-secret" not in str(info.value)


def test_manifest_form_has_the_url_and_never_the_key(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sk-not-in-manifests")
    monkeypatch.setenv("ANTIPERSIST_URL_GEMMA_4_31B_IT", "http://gpu-3:8002/v1")
    described = backbone_endpoint("gemma-4-31b-it").describe()
    assert described["base_url"] == "http://gpu-3:8002/v1" and described["api_key_env"] == "VLLM_API_KEY"
    assert "sk-not-in-manifests" not in repr(described)


# -- a profile by path, and an ad-hoc endpoint ---------------------------------------------------------------


def test_the_name_or_file_rule():
    from antipersist_lib.serving.profiles import is_profile_path, profile_label

    for name in ("gemma-4-31b-it", "qwen3-embedding-8b", "my.model.v2", "embedded"):
        assert not is_profile_path(name) and profile_label(name) == name
    for path, label in (
        ("my-model.yaml", "my-model"),
        ("./my-model.yaml", "my-model"),
        ("/abs/dir/served.YML", "served"),
        ("models/without-suffix", "without-suffix"),
        ("~/x.yml", "x"),
    ):
        assert is_profile_path(path) and profile_label(path) == label


def test_a_profile_file_anywhere_is_validated_like_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    good = tmp_path / "mine" / "my-model.yaml"
    good.write_text(
        "name: my-model\nmodel: org/served\nbase_url: http://gpu-9:8000/v1\nbase_url_env: AP_TEST_MY_URL\n"
        "api_key_env: MY_KEY\ntemperature: 0.3\n"
    )
    for value in (str(good), "mine/my-model.yaml", "./mine/my-model.yaml"):
        ep = backbone_endpoint(value)
        assert (ep.model, ep.base_url, ep.api_key_env) == ("org/served", "http://gpu-9:8000/v1", "MY_KEY")
        assert agent_decoding(value) == {"temperature": 0.3}
    monkeypatch.setenv("AP_TEST_MY_URL", "http://gpu-10:8000/v1")  # its own URL variable still wins
    assert backbone_endpoint("mine/my-model.yaml").base_url == "http://gpu-10:8000/v1"
    assert embedding_endpoint(str(good)).model == "org/served"  # embedding profiles by path too

    bad = tmp_path / "mine" / "bad.yaml"
    bad.write_text("model: org/x\nbase_url: http://h/v1\ntop_p: 3\n")
    with pytest.raises(ValueError, match=r"'top_p' must be a number in \(0, 1\]") as info:
        backbone_endpoint("mine/bad.yaml")
    assert "bad.yaml" in str(info.value)
    (tmp_path / "mine" / "typo.yaml").write_text("model: org/x\nbase_url: http://h/v1\ntemprature: 1\n")
    with pytest.raises(ValueError, match=r"typo.yaml: unknown key\(s\) \['temprature'\]"):
        load_profile("backbones", "mine/typo.yaml")
    with pytest.raises(ValueError, match=r"backbone profile file .*missing.yaml does not exist"):
        backbone_endpoint("./missing.yaml")
    assert agent_decoding("./missing.yaml") == {}  # a label, not a file: no decoding
    with pytest.raises(ValueError, match=r"unknown backbone profile 'my-model'.*or give a path"):
        backbone_endpoint("my-model")  # a bare name is never looked up in the working directory


def test_embedded_is_not_an_embedding_profile():
    with pytest.raises(ValueError, match="in-process MiniLM"):
        embedding_endpoint("embedded")


def test_an_adhoc_endpoint_is_checked_like_a_profile_and_labelled_by_its_model():
    from antipersist_lib.serving.profiles import adhoc_endpoint, adhoc_label, is_profile_path

    ep = adhoc_endpoint("http://10.0.0.5:8000/v1", "Qwen/Qwen3-8B", api_key_env="MY_KEY", context_length=32768)
    assert (ep.base_url, ep.model) == ("http://10.0.0.5:8000/v1", "Qwen/Qwen3-8B")
    assert (ep.api_key_env, ep.context_length) == ("MY_KEY", 32768)
    assert adhoc_endpoint("http://h/v1", "m").api_key_env == ""  # no key unless the user names its variable
    assert adhoc_label("Qwen/Qwen3-8B") == "Qwen_Qwen3-8B" and adhoc_label("Llama-3.1-8B") == "Llama-3.1-8B"
    assert not is_profile_path(adhoc_label("odd.yaml")) and not is_profile_path(adhoc_label("a/b"))
    for kw, message in (
        ({"base_url": "http://me:sk-secret@h/v1"}, "carries credentials"),
        ({"base_url": "localhost:8000"}, "must be an http"),
        ({"api_key_env": "sk-abc-123"}, "must name the environment variable"),
        ({"context_length": 0}, "'context_length' must be a positive integer"),
        ({"model": ""}, "'model' must be a non-empty string"),
    ):
        args = {"base_url": "http://h/v1", "model": "m", **kw}
        with pytest.raises(ValueError, match=message) as info:
            adhoc_endpoint(args.pop("base_url"), args.pop("model"), **args)
        assert "--base-url" in str(info.value) and "sk-secret" not in str(info.value)


def test_endpoint_flags_conflicts_are_refused():
    import argparse

    from antipersist_lib.serving.profiles import add_endpoint_arguments, endpoint_from_arguments

    parser = argparse.ArgumentParser()
    add_endpoint_arguments(parser)
    assert endpoint_from_arguments(parser.parse_args([])) is None
    ep = endpoint_from_arguments(parser.parse_args(["--base-url", "http://h/v1", "--model", "m"]))
    assert (ep.base_url, ep.model) == ("http://h/v1", "m")
    with pytest.raises(ValueError, match="not both"):
        endpoint_from_arguments(parser.parse_args(["--base-url", "http://h/v1", "--model", "m"]), backbone="x")
    with pytest.raises(ValueError, match="--model .*need --base-url"):
        endpoint_from_arguments(parser.parse_args(["--model", "m"]))
    with pytest.raises(ValueError, match="--context-length .*need --base-url"):
        endpoint_from_arguments(parser.parse_args(["--context-length", "9"]))
    with pytest.raises(ValueError, match="--base-url needs --model"):
        endpoint_from_arguments(parser.parse_args(["--base-url", "http://h/v1"]))


def test_a_key_is_sent_only_where_a_profile_or_flag_names_its_variable(monkeypatch):
    """An OPENAI_API_KEY in the environment must not reach a --base-url server nobody named a key for."""
    import hashlib

    from antipersist_lib.serving.ledger import Ledger
    from antipersist_lib.serving.llm import LLMClient
    from antipersist_lib.serving.profiles import adhoc_endpoint
    from antipersist_lib.testing.loopback_server import ROUTE_CHAT, LoopbackServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-openai-key")
    monkeypatch.setenv("MY_KEY", "sk-for-this-server")
    with LoopbackServer(responder=lambda r: "OK") as srv:
        for kw in ({}, {"api_key_env": "MY_KEY"}):
            ep = adhoc_endpoint(srv.base_url, "scripted", **kw)
            LLMClient(ep, ledger=Ledger()).chat([{"role": "user", "content": "hi"}], purpose="doctor", max_tokens=2)
        sent = [r["bearer_sha256"] for r in srv.requests_for(ROUTE_CHAT)]

    def fingerprint(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    assert sent == [fingerprint("EMPTY"), fingerprint("sk-for-this-server")]
    assert fingerprint("sk-real-openai-key") not in sent
