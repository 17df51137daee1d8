"""``--plan``: what a grid, a main-job profile or a study costs before it starts, where each number comes from,
and the ledger's actual numbers beside the plan after a run."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from antipersist_lib.analysis.paper import table6
from antipersist_lib.analysis.plan import (
    ASSUMED_TOKENS,
    Rates,
    RecordedRun,
    actual_beside_plan,
    plan_specs,
    recorded_runs,
)
from antipersist_lib.arc.plan import plan_arc_study
from antipersist_lib.cli import main
from antipersist_lib.consolidation.plan import plan_consolidation_study
from antipersist_lib.envs.partitions import PAPER_COUNTS
from antipersist_lib.runner.grid import load_grid

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def nothing_starts(monkeypatch):
    """Planning may start no process and open no connection."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"the planner tried to start or reach something: {args!r:.120}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def write_run(folder: Path, *, benchmark: str, method: str, backbone: str, episodes: int, calls: list[tuple]) -> Path:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"benchmark": benchmark, "method": method, "backbone": backbone}))
    (folder / "episodes_train.jsonl").write_text("".join("{}\n" for _ in range(episodes)))
    lines = [
        {"call_id": i, "purpose": purpose, "model": "m", "prompt_tokens": p, "completion_tokens": c, "ok": ok}
        for i, (purpose, p, c, ok) in enumerate(calls, 1)
    ]
    (folder / "calls.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def test_the_paper_grid_plan_counts_its_runs_and_episodes_and_starts_nothing(capsys, nothing_starts):
    assert main(["grid", "params/grid/paper.yaml", "--plan", "--totals", "--throughput", "1000"]) == 0
    out = capsys.readouterr().out
    grid = load_grid(ROOT / "params" / "grid" / "paper.yaml", plan=True)
    per_method = {b: 10 * (50 + PAPER_COUNTS[b]["heldout"]) for b in ("alfworld", "webshop", "scienceworld")}
    runs = len(grid.runs)
    episodes = sum(per_method[r.spec.benchmark] for r in grid.runs)
    assert runs == 8 * 3 * 3 * 3 and f"total: {runs} runs, {episodes:,} episodes" in out
    assert "nothing is started" in out and "Table 6" in out and "h at 1,000 tokens/s" in out
    # the ALFWorld ReAct runs on llama-4-scout: Table 6 has no ReAct row, so the mean of its four methods
    plan = plan_specs("paper", [r.spec for r in grid.runs], roots=[])
    cells = [c.mean for c in table6() if c.benchmark == "alfworld" and c.backbone == "llama-4-scout"]
    react = next(
        r for r in plan.runs if r.method == "react" and r.benchmark == "alfworld" and r.backbone == "llama-4-scout"
    )
    assert react.calls.value == pytest.approx(sum(cells) / len(cells) * per_method["alfworld"])
    ap = next(
        r
        for r in plan.runs
        if r.method == "anti_persistence" and r.benchmark == "alfworld" and r.backbone == "llama-4-scout"
    )
    cell = next(
        c.mean
        for c in table6()
        if (c.method, c.benchmark, c.backbone) == ("anti_persistence", "alfworld", "llama-4-scout")
    )
    assert (
        ap.calls.value == pytest.approx(cell * per_method["alfworld"])
        and "Table 6 (anti_persistence" in ap.calls.source
    )
    assert ap.prompt_tokens.value == pytest.approx(ASSUMED_TOKENS[0] * ap.calls.value)  # no record: the stated guess


def test_rates_prefer_runs_of_the_same_setting_then_the_paper_then_other_models(tmp_path):
    write_run(tmp_path / "a", benchmark="alfworld", method="react", backbone="llama-4-scout", episodes=4,
              calls=[("execution", 100, 10, True)] * 20 + [("embedding", 5, 0, True)] * 7 + [("execution", 0, 0, False)])  # fmt: skip
    write_run(tmp_path / "b", benchmark="textworld_express", method="expel", backbone="tiny", episodes=2,
              calls=[("execution", 50, 5, True)] * 6 + [("reflection", 200, 20, True)] * 2)  # fmt: skip
    rates = Rates(recorded_runs([tmp_path]))
    measured = rates.calls_per_episode("alfworld", "react", "llama-4-scout", 50)
    assert measured.value == 5.0 and measured.source.startswith("measured")  # 20 ok chat calls / 4 episodes
    paper = rates.calls_per_episode("alfworld", "joint_memory", "llama-4-scout", 50)
    assert "Table 6 (joint_memory" in paper.source
    cells = [c.mean for c in table6() if c.benchmark == "webshop"]  # another model on a paper benchmark
    bench = rates.calls_per_episode("webshop", "react", "my-model", 30)
    assert bench.value == pytest.approx(sum(cells) / len(cells)) and "over the paper's backbones" in bench.source
    other = rates.calls_per_episode("textworld_express", "expel", "my-model", 30)  # not a paper benchmark
    assert other.value == 4.0 and "another model" in other.source
    assumed = rates.calls_per_episode("appworld", "react", "my-model", 30)
    assert assumed.value == 30 and assumed.source.startswith("assumed")
    prompt, completion = rates.tokens_per_call("textworld_express", "react", "x")
    assert prompt.value == pytest.approx((6 * 50 + 2 * 200) / 8) and completion.value == pytest.approx(70 / 8)
    assert RecordedRun.read(tmp_path / "nothing") is None


def test_a_priced_profile_is_costed_and_the_ledger_goes_beside_the_plan(tmp_path, monkeypatch):
    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.runner.spec import RunSpec
    from antipersist_lib.serving.llm import Endpoint
    from antipersist_lib.testing.api_contracts import OpenAIReasoningContract
    from antipersist_lib.testing.loopback_server import LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    spec = RunSpec(method="react", benchmark="errandworld", backbone="gpt-5-mini", embedding="bow", seed=1,
                   iterations=1, train_per_iteration=2, max_steps=6, heldout_limit=2, heldout_concurrency=1,
                   out_root=str(tmp_path / "runs"), cache_dir=None, progress=False)  # fmt: skip
    plan = plan_specs("one run", [spec], roots=[])
    (run,) = plan.runs
    assert run.episodes == 2 + 2 and run.calls.value == 6 * 4  # no record, no Table 6 cell: one call a step
    assert run.cost_usd == pytest.approx((run.prompt_tokens.value * 0.25 + run.completion_tokens.value * 2.0) / 1e6)
    assert "gpt-5-mini.yaml price_per_mtok" in run.price_source
    with LoopbackServer(responder=errand_policy, api=OpenAIReasoningContract(reasoning_tokens=10)) as srv:
        monkeypatch.setenv("ANTIPERSIST_URL_GPT_5_MINI", srv.base_url)
        run_cell(spec, embed_endpoint=Endpoint(base_url=srv.base_url, model="bow", max_retries=0))
    calls = [json.loads(x) for x in (spec.run_dir() / "calls.jsonl").read_text().splitlines()]
    chat = [c for c in calls if c["purpose"] != "embedding"]
    beside = actual_beside_plan(plan)
    total = beside.splitlines()[-1].split()
    assert total[0] == "total" and int(total[2].replace(",", "")) == len(chat)
    assert int(total[4].replace(",", "")) == sum(c["prompt_tokens"] + c["completion_tokens"] for c in chat)


def test_the_arc_plan_counts_what_the_recorded_cpu_study_made(nothing_starts, tmp_path):
    plan = plan_arc_study(ROOT / "params" / "arc" / "cpu.yaml", tmp_path)
    recorded = json.loads((ROOT / "tests" / "fixtures" / "arc" / "cpu" / "seed1" / "study.json").read_text())
    seed1 = sum(r.calls.value for r in plan.runs if r.label.startswith("seed1/"))
    assert seed1 == sum(recorded["calls"].values())  # every solve, decision, extraction and evaluation counted
    assert {r.label.split("/")[0] for r in plan.runs} == {"seed1", "seed2", "seed3"}


def test_the_consolidation_plan_is_near_what_the_recorded_cpu_study_made(nothing_starts, tmp_path):
    plan = plan_consolidation_study(ROOT / "params" / "consolidation" / "cpu.yaml", tmp_path)
    recorded = json.loads((ROOT / "tests" / "fixtures" / "consolidation" / "cpu" / "study.json").read_text())
    made = recorded["calls"]["evaluation"]["calls"] + recorded["calls"]["consolidation"]["consolidation"]["calls"]
    planned = plan.totals()["calls"]
    assert abs(planned - made) / made < 0.1, (planned, made)


def test_study_and_main_plans_through_the_command_line(capsys, nothing_starts, tmp_path):
    assert (
        main(
            [
                "consolidation",
                "--profile",
                "params/consolidation/erosion_paper.yaml",
                "--out",
                str(tmp_path),
                "--plan",
                "--totals",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "plan for consolidation" in out and "USD for the priced runs" in out  # gpt-5-nano is priced, gpt-5.4 not
    assert main(["arc-study", "--profile", "params/arc/paper.yaml", "--out", str(tmp_path), "--plan", "--totals"]) == 0
    assert "counted from the profile" in capsys.readouterr().out
    assert main(["main", "--profile", "params/main/smoke.yaml", "--out", str(tmp_path), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "the embedded default runs on this machine: no charge" in out and not list(tmp_path.rglob("manifest.json"))
