"""The README's main command path (pipeline demo) and the selection-audit command."""

from __future__ import annotations

import json

import pytest

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
    assert manifest["prompt_families"] == ["kit"]  # Anti-Persistence's own family, named; no other method's
    assert not any(k.startswith(("reflexion_", "expel_", "arc_")) for k in manifest["prompt_hashes"])
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
    log = (
        tmp_path
        / "runs"
        / "errandworld"
        / "scripted-loopback"
        / "anti_persistence"
        / "seed42"
        / "state"
        / "outcome_log.jsonl"
    )
    emb = next(iter(read_jsonl(log))).value["embedding"]
    (tmp_path / "emb.json").write_text(json.dumps(emb))
    assert (
        main(
            ["select", "--log", str(log), "--embedding", str(tmp_path / "emb.json"), "--iteration", "5", "--rho", "0.1"]
        )
        == 0
    )
    decision = json.loads(capsys.readouterr().out)
    assert decision["branch"] in ("warmup", "epsilon", "local_ucb", "global_best")
    assert set(decision["scores"]) == {"none", "imitation", "strategic", "corrective"}


def test_select_command_rejects_bad_embedding_file(tmp_path, capsys):
    (tmp_path / "log.jsonl").write_text("")
    (tmp_path / "bad.json").write_text("not json")
    assert main(["select", "--log", str(tmp_path / "log.jsonl"), "--embedding", str(tmp_path / "bad.json")]) == 2
    assert "cannot read an embedding" in capsys.readouterr().err


def test_select_audit_never_creates_or_repairs_a_log(tmp_path, capsys):
    """An audit reads: a missing log is an error (no empty file appears), and a log with a torn
    last line is left byte-identical (a writer would terminate the torn line)."""
    (tmp_path / "emb.json").write_text(json.dumps([1.0, 0.0]))
    missing = tmp_path / "nowhere" / "outcome_log.jsonl"
    assert main(["select", "--log", str(missing), "--embedding", str(tmp_path / "emb.json")]) == 2
    assert "no outcome log" in capsys.readouterr().err and not missing.parent.exists()
    torn = tmp_path / "outcome_log.jsonl"
    entry = {
        "embedding": [1.0, 0.0],
        "mode": "none",
        "reward": 1.0,
        "raw_success": True,
        "task_type": "t",
        "task_id": 1,
        "instruction": "x",
    }
    torn.write_bytes((json.dumps(entry) + "\n").encode() + b'{"embedding": [0.5')
    before = torn.read_bytes()
    assert main(["select", "--log", str(torn), "--embedding", str(tmp_path / "emb.json"), "--iteration", "5"]) == 0
    assert torn.read_bytes() == before
    assert json.loads(capsys.readouterr().out)["counts"]["none"] == 1


def _ap_run(tmp_path):
    """A small anti_persistence run whose decisions include round-robin, warmup, epsilon and UCB ones."""
    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.runner.spec import RunSpec
    from antipersist_lib.serving.llm import Endpoint
    from antipersist_lib.testing.loopback_server import LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    spec = RunSpec(
        method="anti_persistence",
        benchmark="errandworld",
        backbone="scripted-loopback",
        embedding="loopback-bag-of-words",
        seed=5,
        iterations=4,
        train_per_iteration=6,
        max_steps=4,
        heldout_concurrency=2,
        method_params={"round_robin_iterations": 1, "warmup_per_mode": 1, "epsilon": 0.4, "rho": 0.0},
        name="ap",
        out_root=str(tmp_path / "runs"),
        cache_dir=str(tmp_path / "cache"),
        progress=False,
    )
    with LoopbackServer(responder=errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        run_cell(spec, endpoint=ep, embed_endpoint=ep)
    return spec.run_dir()


def test_select_rederives_every_recorded_decision_of_a_run(tmp_path, capsys):
    """The select command seeds its stream as the method does ([seed, phase, iteration, position]),
    so each decision of a run, epsilon draws included, is re-derived from the run's files; the
    state is not touched."""
    run = _ap_run(tmp_path)
    state = {p.name: p.read_bytes() for p in (run / "state").iterdir() if p.is_file()}
    branches = set()
    for phase in ("train", "heldout"):
        for line in (run / f"episodes_{phase}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            args = [
                "select",
                "--run",
                str(run),
                "--phase",
                phase,
                "--iteration",
                str(rec["iteration"]),
                "--position",
                str(rec["position"]),
            ]
            # held-out decisions need the task embedding from the run's response cache, which the manifest names
            assert json.loads((run / "manifest.json").read_text())["cache_dir"] == str((tmp_path / "cache").resolve())
            assert main(args) == 0, capsys.readouterr().err
            captured = capsys.readouterr()
            audit = json.loads(captured.out)
            assert audit["reproduces"] and audit["recomputed"]["mode"] == rec["meta"]["mode"]
            assert captured.err == f"reproduces: {phase} iteration {rec['iteration']}, position {rec['position']} " + (
                f"({audit['log_entries']} log entries): mode {rec['meta']['mode']} by {rec['meta']['branch']}, "
                "as recorded\n"
            )
            branches.add(audit["recorded"]["branch"])
    assert {"round_robin", "epsilon", "local_ucb"} <= branches
    assert {p.name: p.read_bytes() for p in (run / "state").iterdir() if p.is_file()} == state


def test_select_run_reports_a_decision_that_does_not_reproduce(tmp_path, capsys):
    """Seeding differently (the old [seed, iteration, position] stream) changes epsilon draws: caught."""
    run = _ap_run(tmp_path)
    man = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**man, "seed": man["seed"] + 1}))
    rec = [json.loads(x) for x in (run / "episodes_train.jsonl").read_text().splitlines()]
    target = next(r for r in rec if r["meta"]["branch"] not in ("round_robin", "warmup"))
    code = main(
        ["select", "--run", str(run), "--iteration", str(target["iteration"]), "--position", str(target["position"])]
    )
    captured = capsys.readouterr()
    assert code == 1 and "epsilon_draw" in captured.err and captured.err.startswith("DIFFERS: train iteration")


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


def test_agent_decoding_comes_from_the_backbone_profile_and_is_recorded(tmp_path, monkeypatch):
    """A backbone profile's temperature/top_p reach every execution request and the manifest;
    a run's own agent block overrides them; synthesis stays at temperature 0."""
    import shutil
    from pathlib import Path

    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.runner.spec import RunSpec
    from antipersist_lib.testing.loopback_server import LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    params = tmp_path / "params"
    shutil.copytree(Path(__file__).resolve().parents[1] / "params", params)
    with LoopbackServer(responder=errand_policy) as server:
        (params / "backbones" / "sampling.yaml").write_text(
            f"name: sampling\nmodel: scripted\nbase_url: {server.base_url}\napi_key_env: ANTIPERSIST_DEMO_KEY\n"
            "temperature: 0.7\ntop_p: 0.95\n"
        )
        (params / "embeddings" / "bow.yaml").write_text(f"name: bow\nmodel: scripted\nbase_url: {server.base_url}\n")
        monkeypatch.setenv("ANTIPERSIST_PARAMS", str(params))
        for name, agent, expected in (("profile", {}, (0.7, 0.95)), ("override", {"temperature": 0.2}, (0.2, 0.95))):
            before = len(server.requests)
            spec = RunSpec(
                method="anti_persistence",
                benchmark="errandworld",
                backbone="sampling",
                embedding="bow",
                seed=1,
                iterations=1,
                train_per_iteration=4,
                max_steps=3,
                heldout_concurrency=1,
                heldout_limit=2,
                agent=agent,
                name=name,
                out_root=str(tmp_path / "runs"),
                cache_dir=None,
                progress=False,
                method_params={"round_robin_iterations": 1, "warmup_per_mode": 1, "synthesis_max_tokens": 256},
            )
            run_cell(spec)
            bodies = [r["body"] for r in server.requests[before:] if r["route"].endswith("/chat/completions")]
            execution = [b for b in bodies if b["max_tokens"] == 1024]
            synthesis = [b for b in bodies if b["max_tokens"] == 256]
            assert execution and all((b["temperature"], b.get("top_p")) == expected for b in execution)
            assert all(b["temperature"] == 0.0 and "top_p" not in b for b in synthesis)
            man = json.loads((spec.run_dir() / "manifest.json").read_text())
            assert (man["agent"]["temperature"], man["agent"]["top_p"]) == expected


def test_prompts_command_lists_every_methods_prompts(capsys):
    """In a fresh interpreter (nothing imported yet), the command still lists every method's prompts."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "antipersist_lib", "prompts"], capture_output=True, text=True, check=True
    ).stdout
    names = {line.split()[1] for line in out.splitlines()}
    assert {"agent_system", "imitation", "strategic", "corrective", "abstraction_judge"} <= names
    assert any(n.startswith("expel_") for n in names) and any(n.startswith("reflexion_") for n in names)
    assert any(n.startswith("autorefine_") for n in names)
    # and the related study's systems: the ARC-AGI Stream controller and the consolidators
    assert {"arc_solver", "arc_decision", "arc_extraction"} <= names, sorted(names)
    assert {f"consolidation_{b}" for b in ("ace_curator", "awm_induce", "clin_update", "dc_rewrite")} <= names
    assert main(["prompts", "--show", "abstraction_judge"]) == 0
    from antipersist_lib.methods.abstraction_memory import JUDGE_PROMPT

    assert capsys.readouterr().out == JUDGE_PROMPT + "\n"
    assert main(["prompts", "--show", "nope"]) == 2
    assert "no prompt named 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("arc-study", "study profile"),
        ("consolidation", "'methods.x.method' must be a kit method"),
    ],
)
def test_study_commands_run_the_study_runners_and_name_profile_errors(tmp_path, capsys, command, message):
    bad = tmp_path / "bad.yaml"
    if command == "consolidation":
        bad.write_text(
            "benchmark: errandworld\npool: {runs: [x]}\nbuilders: [all]\nregimes: {static_all: {}}\n"
            "methods: {x: {method: mem0, seed_pool: true}}\n"
        )
    else:
        bad.write_text("name: bad\nregimes: {force: {regime: sometimes}}\n")
    assert main([command, "--profile", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and str(bad) in err
    assert not (tmp_path / "out" / "study.json").exists()


# -- bring your own server: a profile file, --base-url/--model, the preflight -------------------------------

RUN_ARGS = [
    "run",
    "--method",
    "react",
    "--benchmark",
    "errandworld",
    "--iterations",
    "1",
    "--train-per-iteration",
    "2",
    "--max-steps",
    "3",
    "--heldout-limit",
    "2",
    "--heldout-concurrency",
    "1",
    "--no-cache",
]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--backbone", "llama-4-scout", "--base-url", "http://127.0.0.1:1/v1", "--model", "m"], "not both"),
        (["--model", "m"], "--model describe an ad-hoc endpoint and need --base-url"),
        (["--api-key-env", "MY_KEY", "--backbone", "llama-4-scout"], "--api-key-env describe"),
        (["--base-url", "http://127.0.0.1:1/v1"], "--base-url needs --model"),
        (["--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--api-key-env", "sk-1-2"], "--api-key-env must name"),
    ],
)
def test_run_refuses_contradictory_endpoint_flags(tmp_path, capsys, extra, message):
    assert main([*RUN_ARGS, "--out-root", str(tmp_path / "runs"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_run_on_an_adhoc_endpoint_records_it_and_never_the_key(tmp_path, monkeypatch, capsys):
    from antipersist_lib.testing.loopback_server import ROUTE_EMBEDDINGS, LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    monkeypatch.setenv("AP_CLI_SECRET_KEY", "sk-cli-never-on-disk")
    with LoopbackServer(responder=errand_policy) as srv:
        url = srv.base_url
        emb = tmp_path / "profiles" / "my-embedder.yaml"
        emb.parent.mkdir()
        emb.write_text(f"model: scripted\nbase_url: {srv.base_url}\n")
        argv = [
            *RUN_ARGS,
            "--method",
            "trajectory_memory",
            "--out-root",
            str(tmp_path / "runs"),
            "--base-url",
            srv.base_url,
            "--model",
            "org/Scripted-1.5",
            "--api-key-env",
            "AP_CLI_SECRET_KEY",
            "--context-length",
            "8192",
            "--embedding",
            str(emb),
        ]
        assert main(argv) == 0, capsys.readouterr().err
        assert srv.requests_for(ROUTE_EMBEDDINGS)  # the embedding profile file was used
        models = {r["body"].get("model") for r in srv.requests}
        assert models == {"org/Scripted-1.5", "scripted"}
    run = tmp_path / "runs" / "errandworld" / "org_Scripted-1.5" / "trajectory_memory" / "seed42"
    man = json.loads((run / "manifest.json").read_text())
    assert man["backbone"] == "org_Scripted-1.5"
    assert man["endpoint"]["base_url"] == url and man["endpoint"]["model"] == "org/Scripted-1.5"
    assert man["endpoint"]["api_key_env"] == "AP_CLI_SECRET_KEY" and man["endpoint"]["context_length"] == 8192
    assert man["embedding"] == "my-embedder" and man["embedding_profile"] == str(emb.resolve())
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert b"sk-cli-never-on-disk" not in p.read_bytes(), p


def test_run_with_a_backbone_profile_file(tmp_path, monkeypatch, capsys):
    from antipersist_lib.testing.loopback_server import LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    monkeypatch.chdir(tmp_path)
    with LoopbackServer(responder=errand_policy) as srv:
        (tmp_path / "served.yaml").write_text(f"model: scripted\nbase_url: {srv.base_url}\ntemperature: 0.25\n")
        assert main([*RUN_ARGS, "--backbone", "./served.yaml", "--out-root", "runs"]) == 0, capsys.readouterr().err
        chats = [r["body"] for r in srv.requests if r["route"].endswith("/chat/completions")]
    man = json.loads((tmp_path / "runs" / "errandworld" / "served" / "react" / "seed42" / "manifest.json").read_text())
    assert man["backbone"] == "served" and man["backbone_profile"] == str((tmp_path / "served.yaml").resolve())
    assert man["agent"]["temperature"] == 0.25  # the file's decoding, as for a shipped profile
    assert any(b["temperature"] == 0.25 for b in chats)


def test_run_stops_at_once_when_its_server_is_down(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    argv = [*RUN_ARGS, "--out-root", str(tmp_path / "runs"), "--base-url", url, "--model", "org/m"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "preflight" in err and "chat endpoint" in err and url in err and "org/m" in err and "fix:" in err
    assert not list((tmp_path / "runs").rglob("episodes_*.jsonl"))


def test_doctor_checks_an_adhoc_endpoint(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    assert main(["doctor", "--base-url", url, "--model", "org/m"]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "--base-url" in x)
    assert line.startswith("[MISSING]") and url in line and "org/m" in line
    sandbox = next(x for x in out.splitlines() if x.startswith("[ok] ARC sandbox"))  # bubblewrap: make test installs it
    assert "kernel isolation: bubblewrap" in sandbox
    assert main(["doctor", "--backbone", "llama-4-scout", "--base-url", url, "--model", "m"]) == 2


def test_study_commands_forward_the_endpoint_flags(tmp_path, monkeypatch):
    """The kit's cli hands its parsed arguments to the study command, which calls the runner directly."""
    import dataclasses

    import pandas as pd

    from antipersist_lib import study_commands

    seen = []

    def run(profile, out, **kw):
        seen.append((profile, str(out), kw))

    for name, command in list(study_commands.COMMANDS.items()):
        fake = dataclasses.replace(command, run=run, show=lambda result: pd.DataFrame())
        monkeypatch.setitem(study_commands.COMMANDS, name, fake)
    flags = ["--base-url", "http://h:1/v1", "--model", "org/m", "--api-key-env", "K", "--context-length", "99"]
    assert main(["arc-study", "--profile", "p.yaml", *flags]) == 0
    assert (
        main(["consolidation", "--profile", "q.yaml", "--out", "o", "--base-url", "http://h:1/v1", "--model", "m"]) == 0
    )
    (p1, out1, kw1), (p2, out2, kw2) = seen
    assert (p1, out1, p2, out2) == ("p.yaml", "outputs/arc/p", "q.yaml", "o")
    ep = kw1["backbone"]
    assert (ep.base_url, ep.model, ep.api_key_env, ep.context_length) == ("http://h:1/v1", "org/m", "K", 99)
    assert (kw2["backbone"].base_url, kw2["backbone"].model) == ("http://h:1/v1", "m")


def test_models_command_lists_the_registry_and_says_what_the_cache_holds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANTIPERSIST_MODELS_DIR", str(tmp_path))
    assert main(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"gemma-3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"}
    assert all(r["cache"] == "not fetched" and r["path"].startswith(str(tmp_path)) for r in rows.values())
    assert rows["qwen2.5-coder-1.5b-instruct"]["sha256"].startswith("cc324af0")
    (tmp_path / "gemma-3-270m-q4_k_m.gguf").write_bytes(b"GGUF")  # there, but never verified
    assert main(["models", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["cache"] == "present, unverified"
    assert main(["models", "verify", "gemma-3-270m"]) == 2  # the pinned hash does not match: exit 2, named
    assert "expected a5fd3b62" in capsys.readouterr().err
    assert main(["models", "fetch"]) == 2
    assert "name a model" in capsys.readouterr().err


def test_llama_info_without_a_build_says_how_to_make_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANTIPERSIST_LLAMA_DIR", str(tmp_path))
    assert main(["llama", "info"]) == 2
    assert "make llama" in capsys.readouterr().err


@pytest.mark.slow
def test_llama_info_reports_the_installed_builds_features_within_its_baseline(capsys):
    assert main(["llama", "info"]) == 0
    out = capsys.readouterr().out
    assert "beyond the baseline: nothing" in out and "this CPU:   runs it" in out and "GGML_NATIVE=OFF" in out


def test_a_reader_that_stops_early_gets_no_traceback():
    """`python -m antipersist_lib grid ... --plan | head -1`: the output is cut, the command ends quietly."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "antipersist_lib", "grid", "params/grid/paper.yaml", "--plan"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader goes away before the first line is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_doctor_passes_when_only_an_optional_part_is_missing(capsys, monkeypatch):
    """Issue 42: `doctor` exited 1 when only bubblewrap (the ARC study's sandbox) was missing."""
    from antipersist_lib.arc import isolation
    from antipersist_lib.runner import doctor

    monkeypatch.setattr(doctor, "run_checks", lambda **kw: [doctor.Check("Java runtime (ScienceWorld)", True, "17")])

    def no_bwrap():
        raise FileNotFoundError("bwrap not found")

    monkeypatch.setattr(isolation, "probe", no_bwrap)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "[missing, optional] ARC sandbox" in out and "needed only for: the ARC-AGI Stream study" in out
    monkeypatch.setattr(doctor, "run_checks", lambda **kw: [doctor.Check("Java runtime (ScienceWorld)", False, "no")])
    assert main(["doctor"]) == 1  # a part every job needs still fails it


def test_every_option_of_every_command_says_what_it_is():
    """Issue 42: --help listed no names and no defaults; every option now has a help line (which shows its
    default, see cli._HelpFormatter) and run offers its methods and benchmarks as choices."""
    import argparse

    from antipersist_lib.cli import build_parser
    from antipersist_lib.envs import BENCHMARKS
    from antipersist_lib.methods import METHODS

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    silent = {
        name: [a.dest for a in sp._actions if not a.help and not isinstance(a, argparse._HelpAction)]
        for name, sp in sub.choices.items()
    }
    assert {k: v for k, v in silent.items() if v} == {}
    run = sub.choices["run"]
    choices = {a.dest: a.choices for a in run._actions}
    assert set(choices["method"]) == set(METHODS) and set(choices["benchmark"]) == set(BENCHMARKS)
    text = run.format_help()
    assert "(default 10)" in text and "(default 42)" in text and "anti_persistence" in text
    import re

    assert "(default: smoke)" in re.sub(r"\s+", " ", sub.choices["notebooks"].format_help())


def test_a_run_with_method_params_and_no_name_is_announced_as_an_ablation_folder(tmp_path, capsys, monkeypatch):
    """Such a run used to fall silently out of the main tables (its folder is method + a hash)."""
    from antipersist_lib.runner import protocol

    ran = []
    monkeypatch.setattr(protocol, "run_cell", lambda spec, **kw: ran.append(spec) or [])
    base = ["run", "--method", "anti_persistence", "--benchmark", "errandworld", "--backbone", "loopback"]
    base += ["--out-root", str(tmp_path / "runs"), "--no-cache"]
    assert main([*base, "--method-param", "gamma=0.99"]) == 0
    out = capsys.readouterr().out
    folder = ran[-1].run_name
    assert folder.startswith("anti_persistence-") and f"this run's folder is '{folder}'" in out
    assert "an ablation folder" in out and "main tables" in out and "leave this run out" in out
    assert main([*base, "--method-param", "gamma=0.99", "--name", "gamma-0.99"]) == 0  # named: the user chose it
    assert main(base) == 0  # the default folder is the main run's
    assert "ablation folder" not in capsys.readouterr().out
