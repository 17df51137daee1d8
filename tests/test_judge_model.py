"""The LLM judge of F.2 as a model of its own: a run, a grid or a main-job profile names a judge
profile; judge requests go to that model through the same client and ledger (purpose "judge"),
the preflight checks it, and the manifest records which model judged (the backbone when none is
named). Two loopback servers tell the backbone and the judge apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.serving.preflight import PREFLIGHT_PROMPT
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, LoopbackServer, last_user_text
from antipersist_lib.testing.scripted_policy import errand_policy

JUDGE_ASKS = "Answer with one word on the first line: ACCEPT or REJECT"


def endpoint(url: str, model: str) -> Endpoint:
    return Endpoint(base_url=url, model=model, api_key_env="ANTIPERSIST_TEST_KEY", max_retries=1, backoff_base_s=0.001)


def spec(tmp_path: Path, **over) -> RunSpec:
    base = dict(
        method="abstraction_memory",
        benchmark="errandworld",
        backbone="loopback",
        embedding="loopback-embed",
        seed=1,
        iterations=1,
        train_per_iteration=4,
        max_steps=4,
        heldout_concurrency=1,
        heldout_limit=2,
        method_params={"judge": True},
        out_root=str(tmp_path / "runs"),
        cache_dir=None,
        progress=False,
    )
    return RunSpec(**{**base, **over})


def judge_prompts(server: LoopbackServer) -> list[str]:
    return [t for t in (last_user_text(r["body"]) for r in server.requests_for(ROUTE_CHAT)) if JUDGE_ASKS in t]


def calls(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "calls.jsonl").read_text().splitlines()]


def test_a_judge_profile_receives_every_judge_request_and_is_recorded(tmp_path):
    with (
        LoopbackServer(responder=errand_policy) as backbone,
        LoopbackServer(responder=lambda req: "ACCEPT\nIt is consistent.", model_id="judge-model") as judge,
    ):
        s = spec(tmp_path, judge="gpt-judge")
        run_cell(
            s,
            endpoint=endpoint(backbone.base_url, "scripted"),
            embed_endpoint=endpoint(backbone.base_url, "scripted"),
            judge_endpoint=endpoint(judge.base_url, "judge-model"),
        )
        run_dir = s.run_dir()
        verdicts = [json.loads(x) for x in (run_dir / "state" / "judge.jsonl").read_text().splitlines()]
        assert verdicts and all(v["accepted"] for v in verdicts)  # the judge model's ACCEPT decided
        assert len(judge_prompts(judge)) == len(verdicts) and judge_prompts(backbone) == []
        judge_chat = [last_user_text(r["body"]) for r in judge.requests_for(ROUTE_CHAT)]
        assert judge_chat.count(PREFLIGHT_PROMPT) == 1  # preflighted like the backbone
        assert {r["body"]["model"] for r in judge.requests_for(ROUTE_CHAT)} == {"judge-model"}
        judge_url = judge.base_url
    ledger = calls(run_dir)
    judged = [c for c in ledger if c["purpose"] == "judge"]
    assert len(judged) == len(verdicts) and {c["model"] for c in judged} == {"judge-model"}
    assert {c["model"] for c in ledger if c["purpose"] == "execution"} == {"scripted"}
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["judge"] == "gpt-judge"
    assert man["judge_model"] == {
        "profile": "gpt-judge",
        "is_backbone": False,
        "model": "judge-model",
        "base_url": judge_url,
    }
    # the judge is part of the run's identity: another judge in the same folder is refused
    with pytest.raises(ValueError, match=r"judge: stored 'gpt-judge', now 'other-judge'"):
        run_cell(
            spec(tmp_path, judge="other-judge", iterations=2),
            endpoint=endpoint("http://127.0.0.1:9/v1", "scripted"),
            judge_endpoint=endpoint("http://127.0.0.1:9/v1", "x"),
            embed_endpoint=endpoint("http://127.0.0.1:9/v1", "scripted"),
        )


def test_without_a_judge_profile_the_backbone_judges_and_says_so(tmp_path):
    with LoopbackServer(responder=errand_policy) as backbone:
        s = spec(tmp_path)
        ep = endpoint(backbone.base_url, "scripted")
        run_cell(s, endpoint=ep, embed_endpoint=ep)
        assert judge_prompts(backbone)
        backbone_url = backbone.base_url
    man = json.loads((s.run_dir() / "manifest.json").read_text())
    assert "judge" not in man  # the identity of runs made before the option is unchanged
    assert man["judge_model"] == {
        "profile": "loopback",
        "is_backbone": True,
        "model": "scripted",
        "base_url": backbone_url,
    }
    assert {c["model"] for c in calls(s.run_dir()) if c["purpose"] == "judge"} == {"scripted"}


def test_manifest_urls_carry_no_secret():
    from antipersist_lib.serving.llm import url_without_secrets

    assert (
        url_without_secrets("https://user:key@api.example.com:8443/v1?api_key=k#x") == "https://api.example.com:8443/v1"
    )
    assert url_without_secrets("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


def test_a_judge_for_a_method_that_does_not_judge_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"judge names a model \('gpt-judge'\), but method 'abstraction_memory'"):
        spec(tmp_path, judge="gpt-judge", method_params={})
    with pytest.raises(ValueError, match=r"method 'react' with these parameters calls no judge"):
        spec(tmp_path, judge="gpt-judge", method="react", method_params={})


def write_grid(tmp_path: Path, url: str, judge_url: str, **over) -> Path:
    ep = {"name": "loopback", "model": "scripted", "base_url": url, "api_key_env": "ANTIPERSIST_TEST_KEY"}
    data = {
        "name": "judged",
        "methods": ["abstraction_memory"],
        "variants": {"abstraction-judge": {"method": "abstraction_memory", "params": {"judge": True}}},
        "benchmarks": ["errandworld"],
        "seeds": [1],
        "backbones": [ep],
        "embedding": {**ep, "name": "loopback-embed"},
        "judge": {"name": "gpt-judge", "model": "judge-model", "base_url": judge_url},
        "iterations": 1,
        "train_per_iteration": 4,
        "max_steps": 4,
        "heldout_limit": 2,
        "heldout_concurrency": 1,
        "out_root": str(tmp_path / "runs"),
        "cache_dir": None,
        "executor": "serial",
    }
    data.update(over)
    p = tmp_path / "grid.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_a_grid_judge_goes_to_the_runs_that_judge_only(tmp_path):
    from antipersist_lib.runner.grid import grid_probes, load_grid, run_grid

    with (
        LoopbackServer(responder=errand_policy) as backbone,
        LoopbackServer(responder=lambda req: "REJECT\nNot supported.", model_id="judge-model") as judge,
    ):
        grid = load_grid(write_grid(tmp_path, backbone.base_url, judge.base_url))
        runs = {r.spec.run_name: r for r in grid.runs}
        assert runs["abstraction-judge"].spec.judge == "gpt-judge"
        assert runs["abstraction-judge"].judge_endpoint.base_url == judge.base_url
        # the run without a judge keeps its identity (the main grid's run) and gets no judge
        assert runs["abstraction_memory"].spec.judge is None and runs["abstraction_memory"].judge_endpoint is None
        assert ("chat", judge.base_url, "judge-model") in {p.key for p in grid_probes(grid)}
        outcomes = run_grid(grid, verbose=False)
        assert [o.status for o in outcomes] == ["ok", "ok"], [o.error for o in outcomes]
        assert judge_prompts(judge) and judge_prompts(backbone) == []
    run_dir = Path(runs["abstraction-judge"].spec.run_dir())
    verdicts = [json.loads(x) for x in (run_dir / "state" / "judge.jsonl").read_text().splitlines()]
    assert verdicts and not any(v["accepted"] for v in verdicts)  # the judge's REJECT kept S_k empty
    assert json.loads((run_dir / "manifest.json").read_text())["judge_model"]["model"] == "judge-model"


def test_grid_and_main_job_refuse_a_judge_no_run_uses(tmp_path):
    from antipersist_lib.runner.grid import load_grid
    from antipersist_lib.runner.main_profile import judge_model, load_profile

    with pytest.raises(ValueError, match=r"judge names 'gpt-judge', but no run of the grid calls a judge"):
        load_grid(write_grid(tmp_path, "http://a/v1", "http://j/v1", variants={}))
    with pytest.raises(ValueError, match=r"judge: an inline endpoint needs a non-empty 'base_url'"):
        load_grid(write_grid(tmp_path, "http://a/v1", "http://j/v1", judge={"name": "j", "model": "m"}))
    with pytest.raises(ValueError, match=r"backbone 'loopback' \(scripted\) and judge 'gpt-judge' \(judge-model\)"):
        load_grid(write_grid(tmp_path, "http://a/v1", "http://a/v1"))  # one server, two models
    profile = tmp_path / "main.yaml"
    profile.write_text(yaml.safe_dump({"methods": ["abstraction_memory"], "judge": "llama-4-scout"}))
    with pytest.raises(ValueError, match=r"judge names 'llama-4-scout', but no run of the profile calls a judge"):
        load_profile(profile)
    profile.write_text(
        yaml.safe_dump(
            {
                "methods": ["abstraction_memory"],
                "variants": {"abstraction-judge": {"method": "abstraction_memory", "params": {"judge": True}}},
                "judge": "llama-4-scout",
            }
        )
    )
    prof = load_profile(profile)
    assert judge_model(prof, profile).endpoint.model == "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def test_an_unparseable_judge_reply_is_counted_apart_warned_and_an_empty_frozen_layer_is_refused(tmp_path):
    """A reply with neither ACCEPT nor REJECT used to count silently as a rejection, and a frozen layer
    made of a store the judge emptied that way was accepted as an (empty) F.2 condition."""
    from antipersist_lib.core.skill_layer import judge_counts, read_skills
    from antipersist_lib.methods.abstraction_memory import judge_verdict

    assert [judge_verdict(t) for t in ("ACCEPT\nfine", "reject: no", "I am not sure.", "")] == [
        "accept",
        "reject",
        "unparseable",
        "unparseable",
    ]
    with (
        LoopbackServer(responder=errand_policy) as backbone,
        LoopbackServer(responder=lambda req: "I am not sure about this one.", model_id="judge-model") as judge,
    ):
        s = spec(tmp_path, judge="gpt-judge")
        with pytest.warns(UserWarning, match="neither ACCEPT nor REJECT: recorded as unparseable"):
            run_cell(
                s,
                endpoint=endpoint(backbone.base_url, "scripted"),
                embed_endpoint=endpoint(backbone.base_url, "scripted"),
                judge_endpoint=endpoint(judge.base_url, "judge-model"),
            )
    verdicts = [json.loads(x) for x in (s.run_dir() / "state" / "judge.jsonl").read_text().splitlines()]
    assert verdicts and {v["verdict"] for v in verdicts} == {"unparseable"}
    assert not any(v["accepted"] for v in verdicts)  # still not admitted
    assert judge_counts(s.run_dir()) == {"accepted": 0, "rejected": 0, "unparseable": len(verdicts)}
    with (
        pytest.warns(UserWarning, match="judge's replies were unparseable"),
        pytest.raises(
            ValueError,
            match=rf"frozen layer would be empty \(judge verdicts: accepted 0, rejected 0, unparseable {len(verdicts)}\)",
        ),
    ):
        read_skills(s.run_dir())
