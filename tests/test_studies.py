"""What both faulty-memories study runners share (studies.py): profile checks, restarts, manifest, resume."""

from __future__ import annotations

import json

import pytest

from antipersist_lib import studies
from antipersist_lib.errors import EmbeddedServerError, LLMUnavailableError
from antipersist_lib.serving.llm import Endpoint


class DyingServer:
    """Stands in for the embedded llama.cpp server: reports an exit code and counts restarts."""

    def __init__(self, exit_code: int | None = 139) -> None:
        self.exit_code = exit_code
        self.restarts = 0

    def restart(self) -> None:
        self.restarts += 1

    def crash_report(self, what: str = "") -> str:
        return f"the embedded llama.cpp server is not serving: {what}\nprocess: killed by signal 11 (SIGSEGV)"


def models(server=None) -> studies.StudyModels:
    return studies.StudyModels(Endpoint("http://127.0.0.1:9/v1", "m", api_key_env="STUDY_KEY"), "m", False, server)


def test_profile_checks_name_the_file_and_the_key(tmp_path):
    path = tmp_path / "p.yaml"
    with pytest.raises(studies.StudyProfileError, match=r"p.yaml: unknown key\(s\) \['pool.sed'\]"):
        studies.checker(path).mapping({"sed": 1}, "pool", {"seed"})
    with pytest.raises(studies.StudyProfileError, match=r"'seeds' lists a name twice"):
        studies.checker(path).names(["a", "a"], "seeds")
    with pytest.raises(studies.StudyProfileError, match=r"'steps' must be an integer >= 1, got True"):
        studies.checker(path).integer(True, "steps", minimum=1)
    with pytest.raises(studies.StudyProfileError, match=r"'backbone' must be 'embedded' or a profile name"):
        studies.check_backbone({"backbone": ""}, path)
    assert studies.check_backbone({}, path) == studies.EMBEDDED
    path.write_text("name: x\nbackbones: y\n")
    with pytest.raises(studies.StudyProfileError, match="backbones"):
        studies.read_profile(path, {"name", "backbone"})


def test_a_dead_embedded_server_is_restarted_and_the_work_redone():
    server, calls, cleared = DyingServer(), [], []

    def work():
        calls.append(1)
        if len(calls) < 3:
            raise LLMUnavailableError("connection refused")
        return "done"

    got = studies.with_restarts(models(server), "a build", work, before=lambda: cleared.append(1), log=lambda m: None)
    assert got == "done" and server.restarts == 2 and len(cleared) == 3  # cleared before every attempt


def test_restarts_give_up_and_other_endpoints_are_not_restarted():
    server = DyingServer()

    def never():
        raise LLMUnavailableError("down")

    with pytest.raises(EmbeddedServerError, match=r"(?s)died during x.*SIGSEGV.*died 4 times"):
        studies.with_restarts(models(server), "x", never, log=lambda m: None)
    assert server.restarts == studies.MAX_BACKBONE_RESTARTS
    alive = DyingServer(exit_code=None)  # still running: the endpoint itself is unreachable, restarting won't help
    with pytest.raises(LLMUnavailableError):
        studies.with_restarts(models(alive), "x", never, log=lambda m: None)
    with pytest.raises(LLMUnavailableError):
        studies.with_restarts(models(None), "x", never, log=lambda m: None)  # a user's endpoint
    assert alive.restarts == 0


def test_the_manifest_names_the_key_variable_never_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDY_KEY", "sk-do-not-write-me")
    m = studies.manifest_base("arc", 1, "p.yaml", "smoke", {"name": "smoke"}, models(), "running")
    assert m["endpoint"]["api_key_env"] == "STUDY_KEY" and m["study"] == "arc" and m["versions"]["python"]
    assert "sk-do-not-write-me" not in json.dumps(m)
    assert "embedding" not in m  # a study without embeddings records none
    (tmp_path / studies.MANIFEST_FILE).write_text(json.dumps({"wall_s": 5.0, "wall_s_total": 12.5}))
    assert studies.previous_wall_s(tmp_path) == 12.5
    assert studies.previous_wall_s(tmp_path / "nowhere") == 0.0


# -- bring your own server: profile files, an ad-hoc endpoint, the in-process embedder, the preflight --------


def dead_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_backbone_and_embedding_profile_files_are_checked_with_the_study_profile(tmp_path):
    study = tmp_path / "study.yaml"
    good = tmp_path / "mine.yaml"
    good.write_text("model: org/m\nbase_url: http://gpu:8000/v1\n")
    assert studies.check_backbone({"backbone": str(good)}, study) == str(good)
    assert studies.check_backbone({"backbone": "llama-4-scout"}, study) == "llama-4-scout"  # names: checked later
    with pytest.raises(studies.StudyProfileError) as info:
        studies.check_backbone({"backbone": str(tmp_path / "gone.yaml")}, study)
    assert (
        str(study) in str(info.value)
        and "'backbone'" in str(info.value)
        and "gone.yaml does not exist" in str(info.value)
    )
    bad = tmp_path / "bad.yml"
    bad.write_text("model: org/m\nbase_url: http://gpu:8000/v1\ntimeout_s: soon\n")
    with pytest.raises(studies.StudyProfileError, match=r"'embedding'.*bad.yml: field 'timeout_s' must be a number"):
        studies.check_embedding({"embedding": str(bad)}, study, "qwen3-embedding-8b")
    assert studies.check_embedding({"embedding": "embedded"}, study, "x") == "embedded"
    assert studies.check_embedding({}, study, "qwen3-embedding-8b") == "qwen3-embedding-8b"
    with pytest.raises(studies.StudyProfileError, match="'embedding' must be a profile name"):
        studies.check_embedding({"embedding": 3}, study, "x")


def test_an_adhoc_backbone_replaces_the_profiles_and_keeps_its_embedding(tmp_path):
    emb = tmp_path / "emb.yaml"
    emb.write_text("model: org/embedder\nbase_url: http://gpu:8003/v1\n")
    adhoc = Endpoint("http://gpu:8000/v1", "Org/Chat-7B", api_key_env="MY_KEY")
    with studies.open_models(tmp_path / "s.yaml", adhoc, tmp_path, embedding=str(emb)) as m:
        assert m.endpoint is adhoc and m.label == "Org_Chat-7B" and not m.embedded
        assert m.embed_endpoint.model == "org/embedder" and m.embed_label == str(emb)
    with studies.open_models(tmp_path / "s.yaml", str(emb), tmp_path) as m:  # a backbone profile file
        assert m.endpoint.model == "org/embedder" and m.label == str(emb) and m.embed_endpoint is None


def test_embedding_embedded_starts_the_in_process_embedder_with_any_backbone(tmp_path, monkeypatch):
    from antipersist_lib.serving import embedded

    events = []

    class FakeEmbedder:
        def __enter__(self):
            events.append("start")
            return self

        def __exit__(self, *exc):
            events.append("stop")

        @property
        def endpoint(self):
            return Endpoint("http://127.0.0.1:7/v1", "all-MiniLM-L6-v2")

    monkeypatch.setattr(embedded, "EmbeddedEmbedder", FakeEmbedder)
    with studies.open_models(tmp_path / "s.yaml", "llama-4-scout", tmp_path, embedding="embedded") as m:
        assert events == ["start"] and m.embed_label == "embedded"
        assert m.embed_endpoint.model == "all-MiniLM-L6-v2" and m.endpoint.model != "all-MiniLM-L6-v2"
    assert events == ["start", "stop"]


def test_the_study_preflight_names_a_dead_endpoint_and_checks_a_live_one_once():
    from antipersist_lib.serving.preflight import PreflightError
    from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ROUTE_EMBEDDINGS, LoopbackServer

    dead = dead_url()
    m = studies.StudyModels(Endpoint(dead, "org/chat"), "my-backbone", False)
    with pytest.raises(PreflightError) as info:
        m.check_endpoints("study out/x")
    assert dead in str(info.value) and "org/chat" in str(info.value) and "my-backbone" in str(info.value)
    with LoopbackServer() as srv:
        live = Endpoint(srv.base_url, "scripted")
        m = studies.StudyModels(live, "b", False, embed_endpoint=live, embed_label="e")
        m.check_endpoints("s", embeddings=False)
        m.check_endpoints("s", embeddings=False)
        assert len(srv.requests_for(ROUTE_CHAT)) == 1 and not srv.requests_for(ROUTE_EMBEDDINGS)
        m.check_endpoints("s")  # now the embedding endpoint too, the chat endpoint not again
        assert len(srv.requests_for(ROUTE_CHAT)) == 1 and len(srv.requests_for(ROUTE_EMBEDDINGS)) == 1
        off = studies.StudyModels(Endpoint(dead, "x"), "b", False, preflight=False)
        off.check_endpoints("s")  # skipped only explicitly


def test_the_study_command_line_takes_an_adhoc_endpoint(tmp_path, capsys):
    import pandas as pd

    from antipersist_lib.serving.preflight import PreflightError

    got = []

    def run(profile, out, **kw):
        got.append(kw)
        if kw.get("backbone") is not None and kw["backbone"].model == "down":
            raise PreflightError("preflight: chat endpoint down")
        return None

    def cli(*argv):
        return studies.StudyCommand(
            study="arc",
            command="arc-study",
            description="",
            run=run,
            show=lambda r: pd.DataFrame(),
        ).main(["--profile", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "o"), *argv])

    assert cli() == 0 and got[-1] == {}
    assert cli("--base-url", "http://h:1/v1", "--model", "org/m", "--api-key-env", "KEY") == 0
    ep = got[-1]["backbone"]
    assert (ep.base_url, ep.model, ep.api_key_env) == ("http://h:1/v1", "org/m", "KEY")
    n = len(got)
    assert cli("--model", "org/m") == 2 and len(got) == n  # refused before the study starts
    assert "need --base-url" in capsys.readouterr().err
    assert cli("--base-url", "http://h:1/v1", "--model", "down") == 3
    assert "chat endpoint down" in capsys.readouterr().err
