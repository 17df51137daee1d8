"""Consolidation studies (faulty-memories §3-4.2): profile checks, the study runner, tables and curves.

The runner is exercised end to end on ErrandWorld (the kit's test world, not a benchmark) with a scripted
loopback model: nothing here is a model result. The pool is the training episodes of a scripted ReAct run
(``pool_from_runs``), since ErrandWorld has no expert replay.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from antipersist_lib import studies
from antipersist_lib.analysis import faulty_paper
from antipersist_lib.consolidation import analysis, builds, evaluations, figures, study, study_folder
from antipersist_lib.consolidation import prompts as CP
from antipersist_lib.consolidation.bank import load_bank
from antipersist_lib.consolidation.pool import batches, load_pool
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "consolidation" / "smoke"

#: the scripted cheatsheet names where each object lies, in the form errand_policy follows
CHEATSHEET = (
    "<cheatsheet>go to garden, take the apple; go to garden, take the ball; go to attic, take the book; "
    "go to kitchen, take the cup; go to attic, take the lamp; go to kitchen, take the spoon</cheatsheet>"
)
WORKFLOW = "## Workflow: bring an object\nWhen to use: bring tasks\nSteps:\n1. go to <room> (expect: you see it)"


def responder(req: dict) -> str:
    """Scripted consolidators (DC, AWM, keep-all) by system message; everything else plays ErrandWorld."""
    msgs = req.get("messages") or [{}]
    system = msgs[0].get("content", "")
    if system == CP.DC_SYSTEM:
        return CHEATSHEET
    if system == CP.AWM_SYSTEM:
        return WORKFLOW
    if system == CP.KEEP_SYSTEM:
        return json.dumps({f"n{i}": "keep" for i in re.findall(r"### n(\d+)", msgs[1]["content"])})
    return errand_policy(req)


@pytest.fixture(scope="module")
def server():
    with LoopbackServer(responder=responder) as srv:
        yield srv


def endpoint(srv: LoopbackServer) -> Endpoint:
    return Endpoint(
        base_url=srv.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", timeout_s=10, max_retries=0
    )


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory, server) -> Path:
    """Six successful ErrandWorld training episodes of both task types (a scripted ReAct run)."""
    out = tmp_path_factory.mktemp("poolrun")
    spec = RunSpec(
        method="react",
        benchmark="errandworld",
        backbone="scripted",
        embedding="bow",
        seed=3,
        iterations=1,
        train_per_iteration=6,
        max_steps=8,
        heldout_limit=1,
        heldout_concurrency=1,
        out_root=str(out),
        cache_dir=None,
        progress=False,
    )
    run_cell(spec, endpoint=endpoint(server), embed_endpoint=endpoint(server))
    return spec.run_dir()


def write_profile(path: Path, **changes) -> Path:
    data = {
        "name": "tiny",
        "benchmark": "errandworld",
        "backbone": "scripted-loopback",
        "pool": {"runs": ["PLACEHOLDER"]},
        "builders": ["all", "fs2", "dc", "awm", "keep"],
        "builder_options": {"common": {"max_tokens": 64}, "all": {"log_chars": 300}},
        "regimes": {
            "static_all": {},
            "stream_het": {"regime": "stream", "batch_size": 2, "homogeneous": False, "builders": ["dc", "keep"]},
            "stream_hom": {"regime": "stream", "batch_size": 2, "homogeneous": True, "capacity": 2, "builders": ["dc"]},
            "dc_more": {"regime": "stream", "batch_size": 3, "initial": "static_all", "builders": ["dc"]},
        },
        "evaluation": {"seeds": [1, 2], "heldout_limit": 2, "max_steps": 4, "steps": {"every": 2}},
        "methods": {
            "trajectory_memory": {"seed_pool": True},
            "ap_trained": {"method": "anti_persistence", "seed_pool": True, "iterations": 2, "train_per_iteration": 2},
        },
        "response_cache": False,
    }
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory, server, pool_run):
    tmp = tmp_path_factory.mktemp("study")
    prof = write_profile(tmp / "tiny.yaml", pool={"runs": [str(pool_run)]})
    result = study.run_study(prof, tmp / "out", endpoint=endpoint(server), embed_endpoint=endpoint(server))
    return result, server


# -- the runner ---------------------------------------------------------------------------------------


def test_the_study_evaluates_every_build_step_and_seed(tiny_study):
    result, _ = tiny_study
    df = result.frame
    got = {(r.builder, r.condition, int(r.step), int(r.seed)) for r in df.itertuples()}
    expected = {("react", "no_memory", 0, s) for s in (1, 2)}
    for builder in ("all", "fs2", "dc", "awm", "keep"):
        expected |= {(builder, "static_all", 1, s) for s in (1, 2)}
    pool = load_pool(result.out / builds.POOL_FILE)

    def evaluated(start: int, size: int, homogeneous: bool) -> list[int]:  # every second update, and the last
        n = len(batches(pool, size, homogeneous, 0))
        return sorted({start + u for u in range(2, n + 1, 2)} | {start + n})

    for builder, cond, steps in (
        ("dc", "stream_het", evaluated(0, 2, False)),
        ("keep", "stream_het", evaluated(0, 2, False)),
        ("dc", "stream_hom", evaluated(0, 2, True)),
        ("dc", "dc_more", evaluated(1, 3, True)),  # continues the static_all bank (step 1)
    ):
        expected |= {(builder, cond, step, s) for step in steps for s in (1, 2)}
    expected |= {("trajectory_memory", "pool", 1, s) for s in (1, 2)}
    expected |= {("ap_trained", "pool + 2x2 training", 2, s) for s in (1, 2)}
    assert got == expected and len(df) == len(expected)
    assert set(df["benchmark"]) == {"errandworld"} and set(df["backbone"]) == {"scripted-loopback"}
    assert df["heldout_n"].eq(2).all() and df["success"].between(0, 1).all()
    cols = dict(zip(zip(df["builder"], df["condition"]), df["column"]))
    assert cols[("keep", "static_all")] == "one_pass_keep" and cols[("keep", "stream_het")] == "incr_keep"
    assert cols[("react", "no_memory")] == "no_mem" and cols[("fs2", "static_all")] == "fs2"
    fs = df[df["builder"] == "fs2"]
    assert fs["n_entries"].eq(2).all() and fs["examples_seen"].eq(6).all()
    hom = df[df["condition"] == "stream_hom"]
    assert hom["n_entries"].le(2).all() and hom["capacity"].eq(2).all() and hom["homogeneous"].all()
    more = df[(df["condition"] == "dc_more")]
    assert more["updates"].min() >= 1 and more["step"].min() >= 2 and more["initial"].eq("static_all").all()


def test_method_rows_start_from_the_pool_and_train_on_their_own(tiny_study):
    """The kit's methods stand beside the banks: same held-out games and seeds, the pool as M_0."""
    result, srv = tiny_study
    df, out = result.frame, result.out
    pool = load_pool(out / builds.POOL_FILE)
    methods = df[df["regime"] == study.METHOD_REGIME]
    assert set(methods["builder"]) == {"trajectory_memory", "ap_trained"} and methods["heldout_n"].eq(2).all()
    assert set(methods["examples_seen"]) == {6, 6 + 4} and set(methods["updates"]) == {0, 4}
    for rd in methods["run_dir"]:
        manifest = json.loads((out / rd / "manifest.json").read_text())
        assert manifest["method_params"]["seed_pool"] == str(out / builds.POOL_FILE)
        layout = RunDirectory(out / rd)
        # read_jsonl: the embeddings are in trajectories.emb, shown inline (issue 45)
        stored = [x.value for x in read_jsonl(layout.state_path(RunDirectory.TRAJECTORIES))]
        seeds = [r for r in stored if r["iteration"] == 0]
        assert [r["task"]["task_id"] for r in seeds] == [p.task.task_id for p in pool]  # the pool, in order, once
        trained = int(manifest["iterations"]) * int(manifest["train_per_iteration"])
        assert len(stored) == len(pool) + trained and all(r["embedding"] for r in seeds)
    # a pool trajectory's own action reached a held-out agent's context through retrieval
    actions = {s.action for p in pool for s in p.trajectory.steps if len(s.action) > 8}
    systems = [r["body"]["messages"][0]["content"] for r in srv.requests_for("/v1/chat/completions")]
    assert any("Outcome: SUCCESS" in s and any(a in s for a in actions) for s in systems)
    cells = analysis.trajectory_log_table(df).set_index("column")
    assert cells.loc["trajectory_memory", "label"] == "Trajectory memory"
    assert cells.loc["ap_trained", "condition"] == "pool + 2x2 training" and cells.loc["ap_trained", "step"] == 2
    assert not cells.loc[["trajectory_memory", "ap_trained"], "beaten"].any()  # never marked "(--)"
    assert study_folder.load_manifest(out)["methods"]["ap_trained"]["method"] == "anti_persistence"
    assert study.METHOD_REGIME not in set(analysis.regime_bars(df)["regime"])


def test_a_scripted_cheatsheet_that_names_the_rooms_beats_no_memory(tiny_study):
    """The loop is wired: the bank a builder wrote reaches the agent's context at evaluation."""
    result, srv = tiny_study
    means = analysis.seed_means(result.frame)
    dc = means[(means["builder"] == "dc") & (means["condition"] == "static_all")]["success"].iloc[0]
    none = means[means["builder"] == "react"]["success"].iloc[0]
    assert dc == 100.0 and none < dc
    systems = [r["body"]["messages"][0]["content"] for r in srv.requests_for("/v1/chat/completions")]
    assert any("go to kitchen, take the cup" in s and "Cheatsheet" in s for s in systems)


def test_the_study_folder_holds_manifest_memories_and_runs(tiny_study):
    result, _ = tiny_study
    out = result.out
    m = study_folder.load_manifest(out)
    assert m["status"] == "complete" and m["backbone"] == "scripted-loopback" and m["note"] == ""
    assert m["pool"]["size"] == 6 and set(m["pool"]["types"]) == {"bring_fruit", "bring_item"}
    assert m["prompt_hashes"]["consolidation"]["consolidation_dc_rewrite"] and m["versions"]["python"]
    assert m["endpoint"]["api_key_env"] == "ANTIPERSIST_TEST_KEY" and "api_key" not in m["endpoint"]
    assert {b["regime"] for b in m["builds"] if b["builder"] == "dc"} == {
        "static_all",
        "stream_het",
        "stream_hom",
        "dc_more",
    }
    assert m["calls"]["consolidation"]["consolidation"]["calls"] >= 1
    kept = m["summaries"]  # per summary size: what reads it, and the share of actions the pool's summaries keep
    assert any("dc input" in v["read_by"] for v in kept.values())
    assert all(v["records"] == 6 and v["min_fraction_kept"] == 1.0 and v["actions_dropped"] == 0 for v in kept.values())
    bank = load_bank(out / "memories" / "dc" / "dc_more" / "snapshots.jsonl", 2)
    assert bank.meta["initial"] == {"method": "dc", "step": 1}
    for rd in result.frame["run_dir"]:
        assert (out / rd / "manifest.json").exists()
    text = json.dumps(m)
    assert "sk-" not in text and "Bearer" not in text


def test_load_study_round_trips_and_rerunning_resumes(tiny_study, server, tmp_path, capsys):
    result, _ = tiny_study
    loaded = study_folder.load_study(result.out)
    pd.testing.assert_frame_equal(loaded, result.frame)
    assert list(loaded.columns) == list(study_folder.RESULT_COLUMNS)
    assert pd.read_csv(result.out / studies.RESULTS_CSV).shape == loaded.shape
    n_calls = len(server.requests)
    again = study.run_study(
        result.out.parent / "tiny.yaml", result.out, endpoint=endpoint(server), embed_endpoint=endpoint(server)
    )
    assert len(server.requests) == n_calls  # every build and run was complete: nothing was asked again
    pd.testing.assert_frame_equal(again.frame, loaded)
    # its lines say how far the study has come: banks and the kit's method evaluations counted out of their totals
    printed = capsys.readouterr().out
    n_banks = len(list(study.load_study_profile(result.out.parent / "tiny.yaml", context_check=False).builds()))
    assert (
        f"{n_banks} bank(s) to build or reload and evaluate, 2 no-memory evaluation(s), 4 method evaluation(s)"
        in printed
    )
    assert f"[bank {n_banks} of {n_banks}: " in printed and f"; bank {n_banks} of {n_banks})" in printed
    assert "kit method; method evaluation 4 of 4)" in printed
    with pytest.raises(FileNotFoundError, match="no study results"):
        study_folder.load_study(tmp_path)


def test_curves_and_bars_from_a_study(tiny_study):
    result, _ = tiny_study
    curves = analysis.utility_curves(result.frame)
    dc = curves[(curves["builder"] == "dc") & (curves["condition"] == "stream_het")]
    assert list(dc["step"])[0] == 0 and dc["point"].iloc[0] == "no memory (step 0)" and len(dc) >= 3
    assert (
        not (curves["condition"] == "dc_more").any() or curves.loc[curves["condition"] == "dc_more", "step"].min() > 0
    )
    bars = analysis.regime_bars(result.frame)
    dc_bars = bars[bars["builder"] == "dc"]
    assert list(dc_bars["regime"]) == ["static_all", "stream", "stream", "stream"]
    assert dc_bars["no_memory"].notna().all()
    hom = analysis.homogeneity_curves(result.frame)
    assert set(hom.loc[hom["builder"] == "dc", "batches"]) == {"homogeneous", "heterogeneous"}
    for fig in (
        figures.plot_utility(curves, reference=analysis.paper_reference(), title="t"),
        figures.plot_regime_bars(bars, title="t", note="n"),
        figures.plot_homogeneity(hom, title="t"),
    ):
        assert fig.axes


def test_the_table_of_a_study_names_its_conditions(tiny_study):
    result, _ = tiny_study
    cells = analysis.trajectory_log_table(result.frame)
    by = cells.set_index("column")
    assert list(cells["column"]) == [
        "no_mem",
        "all",
        "fs2",
        "incr_keep",
        "one_pass_keep",
        "awm",
        "dc",
        "trajectory_memory",
        "ap_trained",
    ]
    assert by.loc["dc", "condition"] == "stream_het" and by.loc["dc", "step"] == 3  # stream preferred, last step
    assert by.loc["all", "condition"] == "static_all" and by.loc["incr_keep", "condition"] == "stream_het"
    shown = analysis.table_display(cells)
    assert list(shown.columns) == [
        "NoMem",
        "All",
        "FS=2",
        "Incr. Keep",
        "One-Pass Keep",
        "AWM",
        "DC",
        "Trajectory memory",
        "AP_TRAINED",
    ]
    beside = analysis.tables_beside_paper(cells)
    assert list(beside.index) == [("this run", "errandworld", "scripted-loopback")]  # the paper has no ErrandWorld
    assert figures.plot_table(cells, title="t").axes


# -- the "(--)" and best-in-row marks ----------------------------------------------------------------


def _frame(rows):
    base = dict(
        benchmark="alfworld",
        backbone="m",
        batch_size=None,
        homogeneous=None,
        capacity=None,
        initial=None,
        updates=1,
        examples_seen=6,
        n_entries=1,
        memory_chars=10,
        update_errors=0,
        heldout_n=10,
        score=0.0,
        infra_failures=0,
        mean_steps=1.0,
        mean_calls=1.0,
        run_dir="r",
    )
    out = []
    for builder, column, regime, step, seed, success in rows:
        cond = "no_memory" if builder == "react" else regime
        out.append(
            {
                **base,
                "builder": builder,
                "column": column,
                "condition": cond,
                "regime": regime,
                "step": step,
                "seed": seed,
                "success": success,
            }
        )
    return study_folder.results_frame(out)


def test_table_marks_consolidators_beaten_by_a_trajectory_log_on_a_hand_made_frame():
    df = _frame(
        [
            ("react", "no_mem", "none", 0, 1, 0.50),
            ("react", "no_mem", "none", 0, 2, 0.50),
            ("all", "all", "static_all", 1, 1, 0.80),
            ("all", "all", "static_all", 1, 2, 0.70),  # mean 75
            ("fs16", "fs16", "static_all", 1, 1, 0.60),
            ("ace", "ace", "stream", 4, 1, 0.90),  # last step: 90 > 75, not beaten, best
            ("ace", "ace", "stream", 2, 1, 0.10),
            ("awm", "awm", "stream", 4, 1, 0.75),  # ties the best log: not beaten
            ("dc", "dc", "stream", 4, 1, 0.60),  # beaten by All (75)
            ("dc", "dc", "static_all", 1, 1, 0.99),  # static_all is not the preferred regime
            ("ace_gt", "ace_gt", "static_all", 1, 1, 0.74),  # only static_all exists: used; 74 < 75
        ]
    )
    cells = analysis.trajectory_log_table(df).set_index("column")
    assert cells.loc["all", "value"] == 75.0 and cells.loc["ace", "value"] == 90.0 and cells.loc["ace", "step"] == 4
    assert cells.loc["dc", "condition"] == "stream" and cells.loc["ace_gt", "condition"] == "static_all"
    beaten = cells["beaten"].to_dict()
    assert beaten == {
        "no_mem": False,
        "all": False,
        "fs16": False,
        "ace_gt": True,
        "ace": False,
        "awm": False,
        "dc": True,
    }
    assert cells.index[cells["best"]].tolist() == ["ace"]
    row = analysis.table_display(cells.reset_index()).iloc[0].to_dict()
    assert row == {
        "NoMem": "50",
        "All": "75",
        "FS=16": "60",
        "ACE_GT": "74 (--)",
        "ACE": "**90**",
        "AWM": "75",
        "DC": "60 (--)",
    }
    beside = analysis.tables_beside_paper(cells.reset_index())
    assert [i[0] for i in beside.index] == ["Table 2"] * 3 + ["this run"]
    assert beside.loc[("Table 2", "alfworld", "GPT-5.4-Mini"), "FS=64"] == "**92**"
    assert beside.loc[("this run", "alfworld", "m"), "FS=64"] == "" and "FS=32" in beside.columns
    assert beside.loc[("this run", "alfworld", "m")].tolist()[-2:] == ["75", "60 (--)"]  # no footnote mark
    # at one decimal 74.6 is below 75.0; at the paper's integer precision it ties and is not marked
    assert analysis.row_marks({"all": 75.0, "dc": 74.6}, decimals=0)[0] == {"dc": False}
    assert analysis.row_marks({"all": 75.0, "dc": 74.6}, decimals=1)[0] == {"dc": True}
    assert analysis.row_marks({"all": 81, "fs64": 81, "ace": 60})[1] == {"all", "fs64"}  # ties: both best


def test_the_mark_rule_reproduces_every_mark_the_paper_prints():
    cells = analysis.paper_table_cells()
    assert len(cells) == len(faulty_paper.table2()) + len(faulty_paper.table3())
    assert (cells["beaten"] == cells["beaten_computed"]).all()
    assert (cells["best"] == cells["best_computed"]).all()
    t3 = analysis.table_display(analysis.paper_table_cells(source="Table 3"))
    assert t3.loc[("Table 3", "webshop", "GPT-5.4-Mini"), "ACE"] == "0 (*)"
    assert t3.loc[("Table 3", "webshop", "GPT-5.4-Mini"), "AWM"] == "23 (--)"
    assert t3.loc[("Table 3", "webshop", "GPT-5-Mini"), "ACE_GT"] == "—"


# -- profiles -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pool": {"runs": ["x"], "file": "y"}}, r"exactly one of 'pool.expert', 'pool.runs', 'pool.file'"),
        ({"pool": {"expert": {"per_type": 1}}}, r"'pool.expert' replays exist for .*not benchmark 'errandworld'"),
        ({"pool": {"runs": ["x"], "sucesses_only": True}}, r"unknown key\(s\) \['pool.sucesses_only'\]"),
        ({"builders": ["all", "mem0"]}, r"'builders': unknown builder\(s\) \['mem0'\]"),
        ({"builders": None}, r"'builders' is required"),
        ({"regimes": {"stream": {"batch_size": 0}}}, r"'regimes.stream.batch_size' must be an integer >= 1"),
        ({"regimes": {"s": {"regime": "streaming"}}}, r"'regimes.s.regime' must be one of"),
        ({"regimes": {"static_all": {"batch_size": 4}}}, r"'regimes.static_all.batch_size' applies to the stream"),
        ({"regimes": {"static_all": {"capasity": 4}}}, r"unknown key\(s\) \['regimes.static_all.capasity'\]"),
        ({"regimes": {"static_all": {"builders": ["ace"]}}}, r"'regimes.static_all.builders' names \['ace'\]"),
        (
            {"regimes": {"static_all": {}, "s": {"regime": "stream", "batch_size": 2, "initial": "nope"}}},
            r"'regimes.s.initial' must name another regime",
        ),
        ({"regimes": {"s": {"regime": "stream", "batch_size": 2}}}, r"fs<N> \(FS=N\), which is built under static_all"),
        ({"evaluation": {"seeds": [1, 1]}}, r"'evaluation.seeds' must be a list of distinct integers"),
        ({"evaluation": {"steps": "first"}}, r"'evaluation.steps' must be"),
        ({"evaluation": {"agent": {"max_token": 3}}}, r"unknown key\(s\) \['evaluation.agent.max_token'\]"),
        ({"evaluation": {"heldout": 3}}, r"unknown key\(s\) \['evaluation.heldout'\]"),
        ({"builder_options": {"dc": {"max_tokens": 0}}}, r"'builder_options' for 'dc': max_tokens must be"),
        ({"builder_options": {"ace": {}}}, r"unknown key\(s\) \['builder_options.ace'\]"),
        ({"benchmark": "alfworl"}, r"'benchmark' must be one of"),
        ({"regimens": {}}, r"unknown key\(s\) \['regimens'\]"),
        ({"methods": {"expel": {"seed_pool": True}}}, r"'methods.expel.seed_pool': 'expel' keeps no trajectory store"),
        ({"methods": {"anti_persistence": {}}}, r"'methods.anti_persistence': the method would start and stay empty"),
        ({"methods": {"x": {"method": "mem0", "seed_pool": True}}}, r"'methods.x.method' must be a kit method"),
        ({"methods": {"dc": {"method": "expel", "iterations": 1}}}, r"the row name 'dc' is taken"),
        (
            {"methods": {"trajectory_memory": {"seed_pool": True, "params": {"budgett": 2}}}},
            r"'methods.trajectory_memory.params': .*no parameter\(s\) \['budgett'\]",
        ),
        (
            {"methods": {"anti_persistence": {"seed_pool": True, "params": {"seed_pool": "x"}}}},
            r"the study sets it",
        ),
        ({"methods": {"expel": {"train_per_iteration": -1}}}, r"'methods.expel.train_per_iteration' must be"),
        (  # no training and held-out 'exploit': every decision is mode none, the trajectory-memory row again
            {"methods": {"anti_persistence": {"seed_pool": True}}},
            r"'methods.anti_persistence': without training episodes the outcome log stays empty.*mode 'none'",
        ),
        ({"regimes": {"static_all": {"passes": 2}}}, r"'regimes.static_all.passes' applies to the stream regime"),
        (
            {"regimes": {"static_all": {}, "s": {"regime": "stream", "batch_size": 2, "passes": 0}}},
            r"'regimes.s.passes' must be an integer >= 1",
        ),
        (
            {"regimes": {"static_all": {}, "s": {"regime": "stream", "batch_size": 2, "stages": {"count": 3}}}},
            r"'regimes.s.stages.rule' must be one of \('one_per_type', 'single_type'\)",
        ),
        (
            {"regimes": {"static_all": {}, "s": {"regime": "stream", "batch_size": 2, "stages": {"rule": "x"}}}},
            r"'regimes.s.stages.rule' must be one of",
        ),
        (
            {"regimes": {"static_all": {}, "s": {"regime": "stream", "batch_size": 2, "stages": {"rules": 1}}}},
            r"unknown key\(s\) \['regimes.s.stages.rules'\]",
        ),
        (
            {
                "regimes": {
                    "static_all": {},
                    "s": {
                        "regime": "stream",
                        "batch_size": 2,
                        "passes": 2,
                        "stages": {"count": 2, "rule": "single_type"},
                    },
                }
            },
            r"'regimes.s': 'passes' cycles the whole pool and 'stages' draws fresh batches per stage; give one",
        ),
        (
            {
                "regimes": {
                    "static_all": {},
                    "s": {
                        "regime": "stream",
                        "batch_size": 2,
                        "homogeneous": False,
                        "stages": {"count": 2, "rule": "single_type"},
                    },
                }
            },
            r"'regimes.s.homogeneous' contradicts 'stages.rule: single_type'",
        ),
        ({"regimes": {"static_all": {"backbone": "embedded"}}}, r"'regimes.static_all.backbone' must be a backbone"),
        ({"regimes": {"static_all": {"backbone": "/nope/b.yaml"}}}, r"'regimes.static_all.backbone'"),
        ({"context": {"overflow": "truncate"}}, r"'context.overflow' must be one of \('refuse', 'truncate_oldest'\)"),
        ({"context": {"reserve": 3}}, r"unknown key\(s\) \['context.reserve'\]"),
        ({"evaluation": {"steps": {"every": 2, "every_pass": 1}}}, r"takes one of 'every' \(updates\) or 'every_pass'"),
    ],
)
def test_bad_profile_keys_are_named(tmp_path, change, message):
    prof = write_profile(tmp_path / "bad.yaml", **change)
    with pytest.raises(study.StudyProfileError, match=message) as info:
        study.load_study_profile(prof)
    assert str(prof) in str(info.value)


def test_the_kit_profiles_load():
    smoke = study.load_study_profile(ROOT / "params" / "consolidation" / "smoke.yaml")
    paper = study.load_study_profile(ROOT / "params" / "consolidation" / "paper.yaml")
    assert smoke.benchmark == paper.benchmark == "alfworld" and smoke.backbone == "embedded"
    assert len(smoke.seeds) == len(paper.seeds) == 2  # the paper's two repeats
    assert {r.regime for r in paper.regimes} == {"static_all", "static_group", "stream"}
    assert {"ace", "ace_gt", "awm", "dc", "all", "fs64", "fs32", "fs16", "keep"} <= set(paper.builders)
    assert {m.name for m in paper.methods} == {"trajectory_memory", "anti_persistence", "expel"}
    sw = study.load_study_profile(ROOT / "params" / "consolidation" / "scienceworld.yaml")  # context check included
    assert sw.benchmark == "scienceworld" and len(sw.pool.types) == 15  # Table 9's tasks
    assert {r.capacity for r in sw.regimes if r.regime == "stream"} == {20, 50, 100}
    rounds = sw.regime("rounds")  # App. J.1.3: 20 rounds over the pool, evaluated after each
    assert (rounds.passes, rounds.steps, rounds.batch_size) == (20, {"every_pass": 1}, 4)
    assert {(r.batch_size, r.capacity) for r in paper.regimes if r.regime == "stream" and r.capacity} == {(6, 50)}
    erosion = study.load_study_profile(ROOT / "params" / "consolidation" / "erosion_paper.yaml")
    seed = erosion.regime("seed")  # App. G.1: a one-call seed by a stronger model, then 200 stages of 6, cap 50
    assert seed.regime == "static_all" and seed.backbone not in (None, erosion.backbone)
    rules = {}
    for name in ("g1_one_per_type", "g2_single_type"):
        r = erosion.regime(name)
        assert (r.initial, r.batch_size, r.capacity, r.stages.count, r.stages.per_type_limit) == (
            "seed",
            6,
            50,
            200,
            64,
        )
        rules[name] = (r.stages.rule, r.homogeneous)
    assert rules == {"g1_one_per_type": ("one_per_type", False), "g2_single_type": ("single_type", True)}
    assert erosion.steps == {"every": 20} and erosion.heldout_limit == 48
    cpu = study.load_study_profile(ROOT / "params" / "consolidation" / "cpu.yaml")  # issue 22's CPU study
    assert cpu.benchmark == "textworld_express" and cpu.backbone_options["model"] == "qwen2.5-coder-1.5b-instruct"
    assert cpu.pool.kind == "expert" and cpu.heldout_concurrency == cpu.backbone_options["parallel"] == 2
    assert {m.name for m in cpu.methods} == {"trajectory_memory", "anti_persistence"}
    assert all(m.training_episodes == 8 for m in cpu.methods)  # as params/main/cpu.yaml: 2 iterations x 4 games
    (ap,) = (m for m in smoke.methods if m.method == "anti_persistence")  # untrained: held-out cycles the modes
    assert ap.params["heldout_selection"] == "as_training" and ap.train_per_iteration == 0


def test_the_recorded_smoke_fixture_loads():
    df = study_folder.load_study(FIXTURE)
    m = study_folder.load_manifest(FIXTURE)
    assert m["status"] == "complete" and m["embedded"] and m["note"]
    assert set(df["seed"]) and df["seed"].nunique() == 2 and set(df["benchmark"]) == {"alfworld"}
    assert {"react", "all", "dc", "awm", "ace"} <= set(df["builder"])
    kit = df[df["regime"] == study.METHOD_REGIME]  # the kit's methods, started from the fixture's own pool
    assert set(kit["builder"]) == {"trajectory_memory", "anti_persistence"} and set(kit["condition"]) == {"pool"}
    assert kit["heldout_n"].eq(2).all() and kit["seed"].nunique() == 2
    assert {"static_all", "stream"} <= set(df["regime"])
    assert not analysis.trajectory_log_table(df).empty


def test_obtain_study_loads_runs_or_shows_the_paper_alone(tmp_path, server, pool_run):
    assert study.obtain_study("paper", "anything", root=tmp_path) == []
    assert (
        study_folder.results([]).empty
        and study_folder.study_note([]) == ""
        and analysis.trajectory_log_table(study_folder.results([])).empty
    )
    with pytest.raises(FileNotFoundError, match="no study results"):
        study.obtain_study("load", "missing", root=tmp_path)
    with pytest.raises(ValueError, match="mode must be one of"):
        study.obtain_study("lod", "x", root=tmp_path)
    prof = write_profile(
        tmp_path / "mini.yaml",
        pool={"runs": [str(pool_run)]},
        builders=["all"],
        builder_options=None,
        regimes={"static_all": {}},
        evaluation={"seeds": [5], "heldout_limit": 1, "max_steps": 2},
        methods=None,
    )
    (out,) = study.obtain_study(
        "run", None, profile="mini.yaml", root=tmp_path, out_root="o", endpoint=endpoint(server)
    )
    assert out == tmp_path / "o" / "mini"
    df = study_folder.results(out)
    assert sorted(df["builder"]) == ["all", "react"] and prof.exists()
    assert study_folder.results([out, out]).shape[0] == 2 * len(df)  # several studies (e.g. one per backbone) stack


# -- two backbones, repeated passes, the context budget -------------------------------------------------

SEED_SHEET = "<cheatsheet>SEED-MODEL SHEET: go to kitchen, take the cup</cheatsheet>"


def seed_responder(req: dict) -> str:
    """The second backbone: writes its own cheatsheet, and would play ErrandWorld if it were (wrongly) asked."""
    system = (req.get("messages") or [{}])[0].get("content", "")
    return SEED_SHEET if system == CP.DC_SYSTEM else errand_policy(req)


def _dc_requests(srv: LoopbackServer) -> int:
    return sum(
        1 for r in srv.requests_for("/v1/chat/completions") if r["body"]["messages"][0]["content"] == CP.DC_SYSTEM
    )


def test_a_seed_bank_built_by_one_backbone_is_continued_by_another(tmp_path, pool_run):
    """Fig. 4: Static-Group by one model, then streamed updates (here two passes) by the study's model."""
    with LoopbackServer(responder=responder) as main, LoopbackServer(responder=seed_responder) as seed_srv:
        seed_profile = tmp_path / "seed-model.yaml"
        seed_profile.write_text(
            yaml.safe_dump(
                {"name": "seed-model", "model": "seed-model", "base_url": seed_srv.base_url, "context_length": 100000}
            )
        )
        prof = write_profile(
            tmp_path / "two.yaml",
            pool={"runs": [str(pool_run)]},
            builders=["dc"],
            builder_options={"common": {"max_tokens": 64}},
            regimes={
                "seed": {"regime": "static_group", "backbone": str(seed_profile)},
                "more": {"regime": "stream", "batch_size": 2, "homogeneous": False, "initial": "seed", "passes": 2},
            },
            evaluation={
                "seeds": [1],
                "heldout_limit": 1,
                "max_steps": 4,
                "steps": {"every_pass": 1},
                "no_memory": False,
            },
            methods=None,
        )
        res = study.run_study(prof, tmp_path / "out", endpoint=endpoint(main), embed_endpoint=endpoint(main))
        pool = load_pool(res.out / builds.POOL_FILE)
        n_types = len({r.task_type for r in pool})
        per_pass = len(batches(pool, 2, False, 0))
        assert _dc_requests(seed_srv) == n_types  # the seed bank: one call per task type, all by the seed model
        assert _dc_requests(main) == 2 * per_pass  # the continuation: every update of both passes by the study's model
        others = [
            r
            for r in seed_srv.requests_for("/v1/chat/completions")
            if r["body"]["messages"][0]["content"] != CP.DC_SYSTEM
        ]
        assert len(others) <= 1  # at most the preflight probe: no agent ever ran on the seed model
        seed_url = seed_srv.base_url
    m = study_folder.load_manifest(res.out)
    assert m["regime_backbones"]["seed"]["endpoint"]["base_url"] == seed_url
    assert m["regime_backbones"]["seed"]["endpoint"]["model"] == "seed-model" and "more" not in m["regime_backbones"]
    built = {b["regime"]: b["built_by"]["model"] for b in m["builds"]}
    assert built == {"seed": "seed-model", "more": "scripted"}
    start = load_bank(res.out / "memories" / "dc" / "more" / "snapshots.jsonl", n_types)
    assert "SEED-MODEL SHEET" in start.render()  # the continuation starts from the seed model's bank
    more = res.frame[res.frame["condition"] == "more"]
    assert list(more["pass"]) == [1, 2]  # evaluated at the end of each pass
    assert list(more["step"]) == [n_types + per_pass, n_types + 2 * per_pass]
    assert list(more["updates"]) == [per_pass, 2 * per_pass] and more["examples_seen"].eq([6, 12]).all()


def test_banks_built_by_one_model_are_evaluated_by_each_evaluation_backbone(tmp_path, pool_run):
    """G.1: gpt-5-nano consolidates, three Qwen3.5 sizes act. Here: the study's model builds, two other
    loopback models each evaluate every bank and get their own no-memory row; none of them consolidates."""
    with (
        LoopbackServer(responder=responder) as main,
        LoopbackServer(responder=errand_policy, model_id="actor-a") as a,
        LoopbackServer(responder=errand_policy, model_id="actor-b") as b,
    ):
        actors = []
        for name, srv in (("actor-a", a), ("actor-b", b)):
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump({"model": name, "base_url": srv.base_url, "context_length": 100000}))
            actors.append(str(path))
        prof = write_profile(
            tmp_path / "acting.yaml",
            pool={"runs": [str(pool_run)]},
            builders=["dc"],
            builder_options={"common": {"max_tokens": 64}},
            regimes={"static_all": {}},
            evaluation={"backbones": actors, "seeds": [1], "heldout_limit": 1, "max_steps": 4},
            methods=None,
        )
        res = study.run_study(prof, tmp_path / "out", endpoint=endpoint(main), embed_endpoint=endpoint(main))
        assert _dc_requests(main) == 1 and _dc_requests(a) == _dc_requests(b) == 0  # only the study's model builds
        agent_turns = {
            name: [
                r
                for r in srv.requests_for("/v1/chat/completions")
                if "Commands:" in r["body"]["messages"][0]["content"]
            ]
            for name, srv in (("main", main), ("actor-a", a), ("actor-b", b))
        }
        assert agent_turns["main"] == [] and agent_turns["actor-a"] and agent_turns["actor-b"]
        assert {r["body"]["model"] for r in agent_turns["actor-b"]} == {"actor-b"}
    rows = res.frame
    assert sorted(zip(rows["backbone"], rows["builder"])) == [
        ("actor-a", "dc"),
        ("actor-a", "react"),
        ("actor-b", "dc"),
        ("actor-b", "react"),
    ]
    m = study_folder.load_manifest(res.out)
    assert set(m["evaluation_backbones"]) == {"actor-a", "actor-b"}
    assert m["evaluation_backbones"]["actor-a"]["model"] == "actor-a"
    with pytest.raises(study.StudyProfileError, match="names a backbone twice"):
        study.load_study_profile(write_profile(tmp_path / "twice.yaml", evaluation={"backbones": [actors[0]] * 2}))


def _all_profile(tmp_path: Path, pool_run: Path, overflow: str) -> Path:
    return write_profile(
        tmp_path / f"{overflow}.yaml",
        pool={"runs": [str(pool_run)]},
        builders=["all"],
        builder_options={"all": {"log_chars": 300}},
        regimes={"static_all": {}},
        evaluation={"seeds": [1], "heldout_limit": 1, "max_steps": 3, "no_memory": False},
        methods=None,
        context={"overflow": overflow, "reserve_tokens": 50},
    )


def test_an_evaluated_memory_past_the_context_is_refused_or_cut_from_its_oldest_entries(tmp_path, pool_run, server):
    import dataclasses

    small = dataclasses.replace(endpoint(server), context_length=350)  # 300 tokens left for the memory
    # the run's own endpoint is checked at start (issue 43): refused naming the build, before any bank is built
    with pytest.raises(
        study.StudyProfileError, match=r"build all/static_all: its evaluated memory .* 'scripted' holds 350"
    ):
        study.run_study(
            _all_profile(tmp_path, pool_run, "refuse"), tmp_path / "refused", endpoint=small, embed_endpoint=small
        )
    assert not (tmp_path / "refused" / "runs").exists()  # refused before any agent ran
    n_before = len(server.requests)
    res = study.run_study(
        _all_profile(tmp_path, pool_run, "truncate_oldest"), tmp_path / "cut", endpoint=small, embed_endpoint=small
    )
    full = load_bank(res.out / "memories" / "all" / "static_all" / "bank.json")
    fitted = load_bank(res.out / "memories" / "all" / "static_all" / evaluations.FITTED_DIR / "step1.json")
    dropped = int(res.frame["memory_dropped"].iloc[0])
    assert 0 < dropped < len(full.entries) and fitted.ids == full.ids[dropped:]  # the newest entries stay
    record = study_folder.load_manifest(res.out)["builds"][0]["evaluation_context"]["1"]
    assert (
        record["dropped_entries"] == dropped
        and record["budget_tokens"] == 300
        and record["policy"] == "truncate_oldest"
    )
    context = study_folder.load_manifest(res.out)["context"]
    assert (context["overflow"], context["reserve_tokens"]) == ("truncate_oldest", 50)
    assert any(e["build"] == "all/static_all" and not e["fits"] for e in context["estimates"])  # recorded, not refused
    systems = [
        r["body"]["messages"][0]["content"] for r in server.requests[n_before:] if r.get("body", {}).get("messages")
    ]
    assert any(full.entries[-1].text[:80] in s for s in systems)
    assert not any(full.entries[0].text[:80] in s for s in systems)


def test_a_staged_stream_from_a_profile_draws_each_stage_afresh(tmp_path, pool_run, server):
    """App. G.1's schedule through the runner: stages of one record per type, read every 2 stages."""
    prof = write_profile(
        tmp_path / "staged.yaml",
        pool={"runs": [str(pool_run)]},
        builders=["dc"],
        builder_options={"common": {"max_tokens": 64}},
        regimes={
            "static_all": {},
            "staged": {
                "regime": "stream",
                "batch_size": 2,
                "capacity": 3,
                "initial": "static_all",
                "stages": {"count": 5, "rule": "one_per_type", "per_type_limit": 2},
                "steps": {"every": 2},
            },
        },
        evaluation={"seeds": [1], "heldout_limit": 1, "max_steps": 3, "no_memory": False},
        methods=None,
    )
    res = study.run_study(prof, tmp_path / "out", endpoint=endpoint(server), embed_endpoint=endpoint(server))
    pool = load_pool(res.out / builds.POOL_FILE)
    first_two = {t: [r.rid for r in pool if r.task_type == t][:2] for t in {r.task_type for r in pool}}
    lines = [json.loads(x) for x in (res.out / "memories/dc/staged/snapshots.jsonl").read_text().splitlines()]
    events = [x["event"] for x in lines if x["event"]]
    assert [e["stage"] for e in events] == [1, 2, 3, 4, 5]
    for e in events:  # one record of each type, from the first two of each type only
        assert sorted(next(t for t, ids in first_two.items() if rid in ids) for rid in e["batch"]) == sorted(first_two)
    bank = load_bank(res.out / "memories/dc/staged/bank.json")
    assert bank.meta["stages"] == {"count": 5, "rule": "one_per_type", "per_type_limit": 2} and bank.capacity == 3
    staged = res.frame[res.frame["condition"] == "staged"]
    assert list(staged["updates"]) == [2, 4, 5] and list(staged["step"]) == [3, 5, 6]
    assert not staged["homogeneous"].any() and staged["pass"].isna().all()
