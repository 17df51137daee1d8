"""What both faulty-memories study runners share (studies.py): profile checks, restarts, manifest, resume."""

from __future__ import annotations

import json

import pytest

from antipersist_lib import studies
from antipersist_lib.errors import LLMUnavailableError
from antipersist_lib.serving.llm import Endpoint


class DyingServer:
    """Stands in for the embedded llama.cpp server: reports an exit code and counts restarts."""

    def __init__(self, exit_code: int | None = 139) -> None:
        self.exit_code = exit_code
        self.restarts = 0

    def restart(self) -> None:
        self.restarts += 1


def models(server=None) -> studies.StudyModels:
    return studies.StudyModels(Endpoint("http://127.0.0.1:9/v1", "m", api_key_env="STUDY_KEY"), "m", False, server)


def test_profile_checks_name_the_file_and_the_key(tmp_path):
    path = tmp_path / "p.yaml"
    with pytest.raises(studies.StudyProfileError, match=r"p.yaml: unknown key\(s\) \['pool.sed'\]"):
        studies.check_mapping({"sed": 1}, "pool", {"seed"}, path)
    with pytest.raises(studies.StudyProfileError, match=r"'seeds' lists a name twice"):
        studies.check_names(["a", "a"], "seeds", path)
    with pytest.raises(studies.StudyProfileError, match=r"'steps' must be an integer >= 1, got True"):
        studies.check_int(True, "steps", path, minimum=1)
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

    with pytest.raises(LLMUnavailableError):
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
