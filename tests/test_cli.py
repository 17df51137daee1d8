"""The README's main command path (pipeline demo) and the selection-audit command."""

from __future__ import annotations

import json

from antipersist_lib.cli import main
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.testing.scripted_policy import GUIDANCE_MARKER


def test_demo_writes_runs_and_guidance_never_persists(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--iterations", "2"]) == 0
    out = capsys.readouterr().out
    assert "not a model or benchmark" in out  # honest label
    summary = json.loads((tmp_path / "summary.json").read_text())
    ap = summary["methods"]["anti_persistence"]
    react = summary["methods"]["react"]
    assert len(ap["heldout_success"]) == 2 and len(react["heldout_success"]) == 2
    assert ap["heldout_success"][-1] > react["heldout_success"][-1]
    run = tmp_path / "runs" / "errandworld" / "scripted-loopback" / "anti_persistence" / "seed42"
    assert ap["run_dir"] == str(run)
    manifest = json.loads((run / "manifest.json").read_text())
    assert set(manifest["prompt_hashes"]) >= {"agent_system", "imitation", "strategic", "corrective"}
    assert manifest["endpoint"]["api_key_env"] == "ANTIPERSIST_DEMO_KEY"
    for p in run.rglob("*"):
        if p.is_file():
            assert GUIDANCE_MARKER.encode() not in p.read_bytes(), p
    # ... while abstraction memory, which persists what it synthesizes, does store it
    abstraction = tmp_path / "runs" / "errandworld" / "scripted-loopback" / "abstraction_memory" / "seed42"
    assert any(GUIDANCE_MARKER.encode() in p.read_bytes() for p in abstraction.rglob("*.json*") if p.is_file())


def test_select_command_prints_the_audit(tmp_path, capsys):
    main(["demo", "--out", str(tmp_path), "--iterations", "2"])
    capsys.readouterr()
    log = tmp_path / "runs" / "errandworld" / "scripted-loopback" / "anti_persistence" / "seed42" / "state" / "outcome_log.jsonl"
    emb = next(iter(read_jsonl(log))).value["embedding"]
    (tmp_path / "emb.json").write_text(json.dumps(emb))
    assert main(["select", "--log", str(log), "--embedding", str(tmp_path / "emb.json"), "--iteration", "5", "--rho", "0.1"]) == 0
    decision = json.loads(capsys.readouterr().out)
    assert decision["branch"] in ("warmup", "epsilon", "local_ucb", "global_best")
    assert set(decision["scores"]) == {"none", "imitation", "strategic", "corrective"}


def test_select_command_rejects_bad_embedding_file(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("not json")
    assert main(["select", "--log", str(tmp_path / "log.jsonl"), "--embedding", str(tmp_path / "bad.json")]) == 2
    assert "cannot read an embedding" in capsys.readouterr().err


def test_tasks_command_lists_the_partition(capsys):
    assert main(["tasks", "--benchmark", "scienceworld", "--split", "heldout"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# scienceworld heldout: 60 tasks")
    assert len(out) == 61 and "task_name=boil" in out[1]
    assert main(["tasks", "--benchmark", "alfworld", "--split", "train", "--json"]) == 0
    tasks = json.loads(capsys.readouterr().out)
    assert len(tasks) == 180 and tasks[0]["env_args"]["game"].endswith("game.tw-pddl")


def test_tasks_command_explains_missing_webshop_partition(capsys):
    assert main(["tasks", "--benchmark", "webshop"]) == 2
    assert "instruction file" in capsys.readouterr().err
