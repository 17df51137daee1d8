"""ARC-AGI Stream studies (arc/study.py) and the faulty-memories paper's numbers (analysis/faulty_paper.py).

The study runs against a scripted loopback model passed as an explicit endpoint: the solver writes a task's
ground-truth code only when its prompt carries at least one buffered trajectory, so held-out accuracy is 0
with an empty buffer and 1 once the episodic store holds something. That makes each checkpoint's number
depend on the memory of exactly that step (Force keeps no episode; Auto and Episodic-only keep them).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from antipersist_lib import studies, study_commands
from antipersist_lib.analysis import faulty_paper, plots
from antipersist_lib.arc import analysis, figures, study, study_folder, study_profile
from antipersist_lib.arc.controller import gt_code
from antipersist_lib.arc.prompts import EMPTY_HISTORY, render_grid
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.serving.preflight import PREFLIGHT_PROMPT
from antipersist_lib.testing.loopback_server import LoopbackServer, last_user_text

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-test-never-written-0123456789"
EXTRACTION = (
    '```json\n[{"kind": "merge", "from_existing": [1], "from_functions": [1], '
    '"when_to_use": "grids", "strategy": "copy the input"}]\n```'
)

TINY = {
    "name": "tiny",
    "backbone": "embedded",  # overridden by the explicit endpoint: nothing is started
    "backbone_options": {"n_ctx": 65536},  # a context the load-time prompt check accepts
    "train_pool": {"name": "train19", "seed": 0},
    "heldout_pool": {"name": "heldout50", "seed": 0, "limit": 2},
    "task_examples": {"n_train": 2, "n_test": 2},
    "steps": 3,
    "checkpoint_every": 2,
    "conditions": {"regime": ["force", "auto", "episodic_only"], "source": ["gt"], "buffer_size": [8]},
    "stream": {"solver_max_tokens": 2048, "manager_max_tokens": 512},
    "evaluation": {"sets": ["heldout", "train"], "train_limit": 2},
    "judge": {"conditions": ["force-gt-b8"]},
    "surgery": {"conditions": ["auto-gt-b8"], "max_entries": 2},
}


class Model:
    """Routes each request by its prompt heading; counts solver calls."""

    def __init__(self, tasks) -> None:
        self.tasks = tasks
        self.solves = 0

    def __call__(self, request: dict) -> str:
        text = last_user_text(request)
        if text == PREFLIGHT_PROMPT:  # the study's one-off endpoint check before its first condition
            self.preflights = getattr(self, "preflights", 0) + 1
            return "OK"
        if text.startswith("# Task: write solve(grid)"):
            self.solves += 1
            shown = text.split("## Strategy memory")[0]
            task = next(t for t in self.tasks if render_grid(t.train[0].input) in shown)
            code = gt_code(task) if EMPTY_HISTORY not in text else "def solve(grid):\n    return [[0]]\n"
            return f"```python\n{code}```\n"
        if text.startswith("# Memory management decision"):
            return '{"action": "retain", "ids": []}'
        if text.startswith("# Strategy extraction"):
            return EXTRACTION
        if text.startswith("# Memory entry review"):
            return '{"label": "over-generalized", "reason": "applies to everything"}'
        raise AssertionError(f"unexpected prompt {text[:60]!r}")


def write_profile(tmp_path: Path, data: dict, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def profile_tasks(profile: Path) -> list:
    """Every task a study profile's streams and evaluations can show the model (the scripted model's pool)."""
    prof = study_profile.load_study_profile(profile)
    return study_profile.pool_tasks(prof.train_pool, n_train=2, n_test=2) + study_profile.pool_tasks(
        prof.heldout_pool, n_train=2, n_test=2
    )


@contextlib.contextmanager
def scripted_endpoint(model: Model):
    """An explicit endpoint to ``model`` on a loopback server (so no backbone is started), keyed by SECRET."""
    with pytest.MonkeyPatch.context() as mp, LoopbackServer(responder=model) as srv:
        mp.setenv("ANTIPERSIST_STUDY_TEST_KEY", SECRET)
        yield Endpoint(base_url=srv.base_url, model="scripted", api_key_env="ANTIPERSIST_STUDY_TEST_KEY", max_retries=1)


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    """One run of the tiny profile (shared by the tests that only read it) and its model."""
    tmp = tmp_path_factory.mktemp("study")
    profile = write_profile(tmp, TINY)
    model = Model(profile_tasks(profile))
    with scripted_endpoint(model) as endpoint:
        result = study.run_study(profile, tmp / "out", endpoint=endpoint, log=lambda *a: None)
        solves_first = model.solves
        again = study.run_study(profile, tmp / "out", endpoint=endpoint, log=lambda *a: None)
    return {"result": result, "again": again, "model": model, "solves_first": solves_first, "profile": profile}


def test_study_writes_one_row_per_condition_checkpoint_and_evaluation_set(tiny_study):
    df = tiny_study["result"].frame
    streams = ["force-gt-b8", "auto-gt-b8", "episodic_only-gt-b8"]
    expected = {(c, s, e) for c in streams for s in (0, 2, 3) for e in ("heldout", "train")}
    expected |= {("no_memory", 0, "heldout"), ("no_memory", 0, "train")}
    assert set(zip(df["condition"], df["step"], df["eval_set"])) == expected and len(df) == len(expected)
    assert list(df.columns) == list(study_folder.RESULT_COLUMNS)
    assert set(df[df["eval_set"] == "heldout"]["n_tasks"]) == {2} and set(df[df["eval_set"] == "train"]["n_tasks"]) == {
        2
    }

    final = df[df["step"] == 3].set_index(["condition", "eval_set"])
    # the solver passes only with a trajectory in its prompt: the step's memory decides the number
    assert (df[df["step"] == 0]["accuracy"] == 0).all()
    assert final.loc[("auto-gt-b8", "heldout"), "accuracy"] == 1.0
    assert final.loc[("episodic_only-gt-b8", "train"), "accuracy"] == 1.0
    assert final.loc[("force-gt-b8", "heldout"), "accuracy"] == 0.0  # Force keeps no episode
    # memory columns: Force empties the buffer and builds a merge chain; the others keep GT episodes
    assert final.loc[("force-gt-b8", "heldout"), "buffer_size"] == 0
    assert final.loc[("force-gt-b8", "heldout"), "abstract_entries"] == 1
    assert final.loc[("force-gt-b8", "heldout"), "consolidations"] == 3
    assert final.loc[("force-gt-b8", "heldout"), "covered"] == 3 and final.loc[("force-gt-b8", "heldout"), "fused"] == 3
    assert final.loc[("auto-gt-b8", "heldout"), "buffer_size"] == 3
    assert final.loc[("auto-gt-b8", "heldout"), "abstract_entries"] == 0
    assert df[df["condition"] == "no_memory"]["regime"].eq("none").all()


def test_study_folder_manifest_and_no_secret(tiny_study):
    out = tiny_study["result"].out_dir
    for name in ("study.json", "results.csv", "results.json", "ledger.jsonl"):
        assert (out / name).exists(), name
    for cond in ("force-gt-b8", "auto-gt-b8", "episodic_only-gt-b8"):
        for name in ("config.json", "snapshots.jsonl", "memory.json", "evals.jsonl", "condition.json"):
            assert (out / "conditions" / cond / name).exists(), (cond, name)
    man = study_folder.load_manifest(out)
    assert man["status"] == "complete" and man["backbone"] == "scripted" and not man["embedded"]
    assert man["endpoint"]["api_key_env"] == "ANTIPERSIST_STUDY_TEST_KEY"
    assert man["checkpoints"] == [0, 2, 3] and len(man["train_task_ids"]) == 19
    assert len(man["eval_task_ids"]["heldout"]) == 2 and man["eval_task_ids"]["train"] == man["train_task_ids"][:2]
    assert {"arc_solver", "arc_decision", "arc_extraction", "arc_judge"} <= set(man["prompt_hashes"])
    assert all(k.startswith("arc_") and len(v) == 16 for k, v in man["prompt_hashes"].items())
    assert "python" in man["versions"] and man["study"] == "arc" and man["calls"]["arc_solve"] == 9
    assert man["sandbox"]["mode"] == "kernel" and "bubblewrap" in man["sandbox"]["description"]
    assert man["sandbox"]["seccomp_arch"] in ("x86_64", "aarch64", None)
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path


def test_rerun_resumes_without_new_solver_calls(tiny_study):
    assert tiny_study["model"].solves == tiny_study["solves_first"]
    # the endpoint was checked once, before the first condition; the complete re-run needed no check
    assert tiny_study["model"].preflights == 1
    pd.testing.assert_frame_equal(tiny_study["again"].frame, tiny_study["result"].frame)


def test_load_study_round_trip(tiny_study):
    out = tiny_study["result"].out_dir
    loaded = study_folder.load_study(out)
    pd.testing.assert_frame_equal(loaded, tiny_study["result"].frame)
    csv = pd.read_csv(out / "results.csv")
    assert list(csv.columns) == list(study_folder.RESULT_COLUMNS) and len(csv) == len(loaded)
    with pytest.raises(FileNotFoundError, match="no study results"):
        study_folder.load_study(out / "nowhere")


def test_analyses_read_the_study_back(tiny_study):
    out = tiny_study["result"].out_dir
    steps = analysis.step_table(out)
    assert len(steps) == 9 and steps.groupby("condition")["step"].max().eq(3).all()
    force = steps[steps["condition"] == "force-gt-b8"]
    assert force["misclassified_cumulative"].tolist() == [0, 1, 2]  # each merge adds a family

    # Table 4's averages run over the evaluated checkpoint memories (steps 2 and 3 here; step 0 is empty)
    cov = analysis.coverage_table(out).set_index("condition")
    assert cov.loc["force-gt-b8", "covered"] == pytest.approx(2.5) and cov.loc["auto-gt-b8", "buffer_size"] == 2.5
    every = analysis.coverage_table(out, average_over="steps").set_index("condition")  # steps 1, 2, 3
    assert every.loc["force-gt-b8", "covered"] == pytest.approx(2.0) and every.loc["auto-gt-b8", "buffer_size"] == 2
    t4 = analysis.table4_beside_paper(out)
    cell = t4[(t4["metric"] == "Avg. Covered") & (t4["|B|"] == 8) & (t4["regime"] == "force")].iloc[0]
    assert cell["paper"] == 5.00 and cell["this run"] == pytest.approx(2.5) and cell["condition"] == "force-gt-b8"
    assert t4[t4["|B|"] == 1]["this run"].isna().all()  # no |B| = 1 condition in this study

    lin = analysis.lineage_example(out)
    assert lin is not None and lin.condition == "force-gt-b8"
    assert lin.chain["entry_id"].tolist() == ["S3", "S2", "S1"] and lin.chain["kind"].tolist()[-1] == "new"
    assert len(lin.trajectories) == 3

    mis = analysis.misclassification_table(out).set_index("condition")
    assert mis.loc["force-gt-b8", "misclassified"] == 2 and mis.loc["auto-gt-b8", "actions"] == 0

    judge = analysis.judge_table(out)
    assert judge is not None and judge.set_index("condition").loc["force-gt-b8", "over-generalized"] == 1
    surgery = analysis.surgery_table(out)
    assert surgery is not None and surgery["entry_id"].tolist() == ["E1", "E2"]
    assert (surgery["full_accuracy"] == 1.0).all()  # removing one of three episodes leaves the others in the prompt

    reg = analysis.regression_table(study_folder.load_study(out))
    assert reg.iloc[0]["no_memory"] == 100.0 and reg.iloc[0]["with_memory"] == 54.0
    assert set(reg["condition"][1:]) == {"force-gt-b8", "auto-gt-b8", "episodic_only-gt-b8"}

    curves = analysis.utility_table(study_folder.load_study(out))
    assert set(curves["condition"]) == {"force-gt-b8", "auto-gt-b8", "episodic_only-gt-b8"}
    assert (curves["no_memory_pct"] == 0).all()
    fig = figures.plot_utility(curves, title="t")
    assert fig.axes


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"stpes": 3}, r"unknown key\(s\) \['stpes'\]"),
        ({"conditions": {"regime": ["auto"], "regim": ["x"]}}, r"conditions\.regim"),
        ({"conditions": {"regime": ["forced"]}}, r"conditions\.regime: 'forced'"),
        ({"train_pool": {"name": "train7"}}, r"train_pool\.name"),
        ({"heldout_pool": {"name": "heldout50", "limit": 51}}, r"heldout_pool\.limit 51"),
        ({"checkpoints": [0, 9], "checkpoint_every": None}, r"checkpoints \[9\] lie beyond"),
        ({"checkpoints": [0, 2]}, r"give 'checkpoints' \(a list of steps\) or 'checkpoint_every', not both"),
        ({"stream": {"temprature": 0.0}}, r"stream\.temprature"),
        ({"evaluation": {"sets": ["test"]}}, r"evaluation\.sets"),
        (
            {"surgery": {"conditions": ["auto-gt-b1"]}},
            r"surgery\.conditions names unknown condition\(s\) \['auto-gt-b1'\]",
        ),
        ({"steps": 0}, r"'steps' must be an integer >= 1"),
        ({"sandbox": "none"}, r"sandbox must be one of \('kernel', 'unisolated'\), got 'none'"),
        ({"seed": 1, "seeds": [1, 2]}, r"give 'seed' \(one study\) or 'seeds'"),
        ({"seeds": [1, 2, 1]}, r"'seeds' lists a seed twice: \[1, 2, 1\]"),
        ({"seeds": 3}, r"'seeds' must be a list of integers, got 3"),
        ({"seeds": [1, "two"]}, r"'seeds\[\]' must be an integer"),
    ],
)
def test_bad_profile_names_the_key(tmp_path, change, message):
    data = {k: v for k, v in {**TINY, **change}.items() if v is not None}  # None: leave the key out
    path = write_profile(tmp_path, data)
    with pytest.raises(studies.StudyProfileError, match=message) as info:
        study_profile.load_study_profile(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"steps": None}, r"'steps' must be an integer >= 1; it is missing"),
        (
            {"stream": {"decide_on": "always"}},
            r"stream\.decide_on must be one of \('every_step', 'passing'\), got 'always'",
        ),
        ({"stream": "fast"}, r"'stream' must be a mapping with keys from \["),
        ({"evaluation": {"temperature": -1}}, r"'evaluation\.temperature' must be a number >= 0 or null, got -1"),
        ({"source_ablation": {"arms": [[]]}}, r"source_ablation\.arms: \[\[\]\] not in \('abstract_only'"),
        ({"source_ablation": {"checkpoints": []}}, r"'source_ablation\.checkpoints' must list at least one value"),
        ({"judge": {"max_tokens": 0}}, r"'judge\.max_tokens' must be an integer >= 1, got 0"),
        ({"surgery": {"eval_set": "test"}}, r"surgery\.eval_set must be one of \('heldout', 'train'\), got 'test'"),
    ],
)
def test_profile_blocks_read_by_their_fields_name_the_key(tmp_path, change, message):
    data = {k: v for k, v in {**TINY, **change}.items() if v is not None}  # None: leave the key out
    path = write_profile(tmp_path, data)
    with pytest.raises(studies.StudyProfileError, match=message) as info:
        study_profile.load_study_profile(path, context_check=False)
    assert str(path) in str(info.value)


def test_profile_blocks_keep_only_the_keys_given_and_fill_the_rest(tmp_path):
    prof = study_profile.load_study_profile(
        write_profile(tmp_path, {**TINY, "stream": {"solver_memory": "episodic"}, "surgery": True}),
        context_check=False,
    )
    assert prof.stream == {"solver_memory": ("episodic",)}  # StreamConfig has the other settings' defaults
    assert prof.surgery == {"conditions": [c.name for c in prof.conditions], "eval_set": "heldout"}
    assert prof.judge == {"conditions": ["force-gt-b8"]}  # judge.max_tokens' default is the runner's
    assert (prof.n_train, prof.eval_repeats, prof.eval_temperature, prof.table4_memories) == (2, 1, None, None)
    assert set(study_profile.PROFILE.keys) >= {"stream", "evaluation", "fig2", "source_ablation", "episodic_capacity"}


def test_unisolated_is_an_explicit_choice_carried_to_every_grade(tmp_path):
    kernel = study_profile.load_study_profile(write_profile(tmp_path, TINY, "kernel.yaml"))
    assert kernel.sandbox == "kernel" and kernel.eval_kwargs()["limits"].isolation == "kernel"
    prof = study_profile.load_study_profile(write_profile(tmp_path, {**TINY, "sandbox": "unisolated"}))
    assert all(prof.stream_config(c).limits.isolation == "unisolated" for c in prof.conditions)
    assert prof.eval_kwargs()["limits"].isolation == "unisolated"
    record = study.sandbox_record(prof)
    assert record["mode"] == "unisolated" and "WITHOUT kernel isolation" in record["description"]


def test_missing_isolation_refuses_before_any_model_call(tmp_path, monkeypatch, capsys):
    from antipersist_lib.arc.isolation import SandboxUnavailable

    def unavailable():
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: install bubblewrap (`make sandbox`)")

    monkeypatch.setattr(study, "probe_isolation", unavailable)
    calls = []
    with LoopbackServer(responder=lambda request: calls.append(request) or "OK") as srv:
        endpoint = Endpoint(base_url=srv.base_url, model="scripted", max_retries=0)
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            study.run_study(write_profile(tmp_path, TINY), tmp_path / "out", endpoint=endpoint, log=lambda *a: None)
        assert calls == [] and not (tmp_path / "out").exists()
        code = study_commands.arc_study_main(
            ["--profile", str(write_profile(tmp_path, TINY)), "--out", str(tmp_path / "cli")]
        )
    assert code == 4 and "bubblewrap (bwrap) is not installed" in capsys.readouterr().err


def test_unknown_backbone_profile_is_named(tmp_path):
    path = write_profile(tmp_path, {**TINY, "backbone": "no-such-model"})
    with pytest.raises(studies.StudyProfileError, match="unknown backbone profile 'no-such-model'"):
        study.run_study(path, tmp_path / "out", log=lambda *a: None)


def test_the_shipped_profiles_load():
    smoke = study_profile.load_study_profile(ROOT / "params" / "arc" / "smoke.yaml")
    assert smoke.backbone == "embedded" and smoke.checkpoints[0] == 0 and smoke.no_memory
    assert {c.regime for c in smoke.conditions} == {"force", "auto", "episodic_only"}
    paper = study_profile.load_study_profile(ROOT / "params" / "arc" / "paper.yaml")
    assert paper.heldout_pool.name == "heldout50" and paper.heldout_pool.limit is None
    # Table 4's |B| read as the tasks per step, the buffer capped at Table 4's 50: |B| = 1 and 8, GT and Running
    assert {(c.table4_b, c.tasks_per_step, c.buffer_size) for c in paper.conditions} == {(1, 1, 50), (8, 8, 50)}
    assert {c.source for c in paper.conditions} == {"gt", "running"}
    assert set(paper.surgery["conditions"]) <= {c.name for c in paper.conditions}
    cpu = study_profile.load_study_profile(
        ROOT / "params" / "arc" / "cpu.yaml"
    )  # issue 22: three seeds on the 1.5B model
    assert (
        cpu.seeds == (1, 2, 3)
        and cpu.stream["shuffle"]
        and cpu.backbone_options["model"] == "qwen2.5-coder-1.5b-instruct"
    )
    assert {c.regime for c in cpu.conditions} == {"force", "auto", "episodic_only"} and cpu.no_memory


def test_the_committed_fixture_matches_the_smoke_profile():
    out = ROOT / "tests" / "fixtures" / "arc" / "smoke"
    df = study_folder.load_study(out)
    man = study_folder.load_manifest(out)
    prof = study_profile.load_study_profile(ROOT / "params" / "arc" / "smoke.yaml")
    assert man["status"] == "complete" and man["embedded"] and man["note"]
    assert [c["name"] for c in man["conditions"]] == [c.name for c in prof.all_conditions()]
    assert set(df["step"]) == set(prof.checkpoints)
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 2_000_000


# -- the paper's numbers -------------------------------------------------------------------------------


def test_table2_and_3_cells_match_the_text():
    cell = faulty_paper.cell
    assert cell("alfworld", "GPT-5.4-Mini", "fs64").value == 92 and cell("alfworld", "GPT-5.4-Mini", "fs64").bold
    assert cell("appworld", "Qwen3.5-27B", "ace_gt").value == 76 and cell("appworld", "Qwen3.5-27B", "ace_gt").bold
    ace = cell("appworld", "Claude-Haiku-4.5", "ace")
    assert ace.value == 74 and ace.bold and not ace.beaten
    assert cell("appworld", "GPT-5-Mini", "dc").value == 8 and cell("appworld", "GPT-5-Mini", "dc").beaten
    assert cell("alfworld", "Claude-Haiku-4.5", "one_pass_keep").value == 90
    assert cell("webshop", "GPT-5-Mini", "ace").value is None  # "—"
    star = cell("webshop", "GPT-5.4-Mini", "ace")
    assert star.value == 0 and "GPT-5-Mini" in star.note
    assert cell("webshop", "GPT-5.4-Mini", "no_mem").value == 18
    assert len(faulty_paper.table2()) == 7 * 11 and len(faulty_paper.table3()) == 3 * 11
    with pytest.raises(KeyError, match="no cell"):
        cell("alfworld", "Qwen3.5-27B", "all")  # Table 2 has no ALFWorld row for Qwen3.5-27B


def test_paper_frames_have_the_printed_shape():
    wide = faulty_paper.tables23_frame()
    assert wide.shape == (10, 11) and list(wide.columns)[0] == "NoMem"
    t4 = faulty_paper.table4_frame()
    assert t4.loc["Avg. Covered", ("|B|=8", "Force")] == 5.0 and pd.isna(t4.loc["Buffer Size", ("|B|=1", "Force")])
    assert json.dumps(faulty_paper.stated_frame().reset_index().to_dict("records"))  # plain data


def test_command_line_names_a_bad_key(tmp_path, capsys):
    path = write_profile(tmp_path, {**TINY, "stpes": 3})
    assert study_commands.arc_study_main(["--profile", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "unknown key(s) ['stpes']" in capsys.readouterr().err


def test_obtain_study_modes(tiny_study, tmp_path):
    assert study.obtain_study("paper", "anything", root=tmp_path) is None
    out = tiny_study["result"].out_dir
    assert study.obtain_study("load", out, root=tmp_path) == out  # an absolute study_dir is kept
    with pytest.raises(FileNotFoundError, match="no study results"):
        study.obtain_study("load", "missing", root=tmp_path)
    with pytest.raises(ValueError, match="needs a study profile"):
        study.obtain_study("run", "x", root=tmp_path)
    empty = study_folder.results(None)
    assert empty.empty and list(empty.columns) == list(study_folder.RESULT_COLUMNS)
    assert (
        analysis.step_table(None).empty
        and analysis.lineage_example(None) is None
        and analysis.judge_table(None) is None
    )


def test_figure6_buffer_composition_counts_families_per_step(tiny_study):
    out = tiny_study["result"].out_dir
    comp = analysis.buffer_composition(out)
    assert list(comp.columns) == list(analysis.COMPOSITION_COLUMNS)
    # every family has a row at every snapshot step of every stream, so absent families show as 0
    per_step = comp.groupby(["condition", "step"])["family"].nunique()
    assert (per_step == len(analysis.FAMILIES)).all()
    # Auto keeps the GT episodes it retained (3 steps, 1 task each); Force empties its buffer every step
    sizes = comp.groupby(["condition", "step"])["entries"].sum()
    steps = analysis.step_table(out).set_index(["condition", "step"])["buffer_size"]
    assert sizes.sort_index().tolist() == steps.sort_index().tolist()
    assert sizes[("auto-gt-b8", 3)] == 3 and sizes[("force-gt-b8", 3)] == 0
    assert analysis.figure6_condition(comp) == "auto-gt-b8"
    admitted = analysis.families_admitted(comp).set_index("condition")
    assert admitted.loc["force-gt-b8", "most_families"] == 0
    assert admitted.loc["auto-gt-b8", "all_families_at_step"] is None  # 3 tasks cannot cover 6 families
    fig = figures.plot_buffer_composition(comp, "auto-gt-b8", title="Fig. 6", paper_step=71)
    assert fig.axes and not plots.text_overlaps(fig)


def test_families_admitted_finds_the_first_full_step():
    fams = list(analysis.FAMILIES)
    rows = [
        {"condition": "c", "step": step, "family": f, "entries": int(i < step)}
        for step in (1, 6, 7)
        for i, f in enumerate(fams)
    ]
    comp = pd.DataFrame(rows).assign(regime="auto", source="gt", buffer_capacity=8)
    got = analysis.families_admitted(comp).iloc[0]
    assert got["all_families_at_step"] == 6 and got["most_families"] == 6 and got["steps"] == 7
    assert analysis.figure6_condition(comp.iloc[0:0]) is None


def test_an_evaluation_only_profile_runs_the_no_memory_solver_alone(tmp_path):
    prof = study_profile.load_study_profile(ROOT / "params" / "arc" / "solver_check.yaml")
    assert prof.conditions == () and prof.no_memory and prof.heldout_pool.limit == 8
    data = yaml.safe_load((ROOT / "params" / "arc" / "solver_check.yaml").read_text())
    data["no_memory"] = False
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(studies.StudyProfileError, match="nothing to run"):
        study_profile.load_study_profile(bad)


def test_the_solver_prompt_explains_helper_returns_only_when_the_profile_asks(tmp_path):
    """A 1.5B model called the helpers as if they changed the grid in place (7 of 8 programs returned None,
    issue 22). The paper's prompt (helper_usage none) stays as it was; "note" and "example" say it."""
    from antipersist_lib.arc.prompts import HELPER_USAGE, solver_messages
    from antipersist_lib.arc.tools import TOOL_NAMES

    def user(usage):
        return solver_messages([], [], [], helper_usage=usage)[1]["content"]

    assert "returns a NEW grid" not in user("none")
    assert "returns a NEW grid" in user("note") and "grid = recolor(grid, objects, 3)" in user("note")
    assert "```python\ndef solve(grid):" in user("example") and "return border(" in user("example")
    assert {"find_objects", "keep", "border", "recolor"} <= set(TOOL_NAMES)  # the text calls helpers that exist
    assert set(HELPER_USAGE) == {"none", "note", "example"}
    with pytest.raises(ValueError, match="helper_usage must be one of"):
        solver_messages([], [], [], helper_usage="always")
    data = yaml.safe_load((ROOT / "params" / "arc" / "solver_check.yaml").read_text())
    data["stream"]["helper_usage"] = "always"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(studies.StudyProfileError, match="stream.helper_usage must be one of"):
        study_profile.load_study_profile(bad)


# -- a study of several seeds ------------------------------------------------------------------------------

SEEDED = {**TINY, "seeds": [1, 2], "stream": {**TINY["stream"], "shuffle": True}}


@pytest.fixture(scope="module")
def seeded_study(tmp_path_factory):
    """The tiny profile with two seeds (each seed shuffles the stream its own way), run twice (the second
    run resumes), beside the same profile run for seed 2 alone."""
    tmp = tmp_path_factory.mktemp("seeds")
    profile = write_profile(tmp, SEEDED)
    model = Model(profile_tasks(profile))
    alone = {k: v for k, v in SEEDED.items() if k != "seeds"} | {"seed": 2}
    with scripted_endpoint(model) as endpoint:
        result = study.run_study(profile, tmp / "out", endpoint=endpoint, log=lambda *a: None)
        solves_first = model.solves
        again = study.run_study(profile, tmp / "out", endpoint=endpoint, log=lambda *a: None)
        solves_again = model.solves
        single = study.run_study(write_profile(tmp, alone, "alone.yaml"), tmp / "alone", endpoint=endpoint, log=print)
    return {
        "result": result,
        "again": again,
        "single": single,
        "solves_first": solves_first,
        "solves_again": solves_again,
        "profile": profile,
    }


def test_each_seed_is_a_whole_study_in_its_own_folder(seeded_study):
    out = seeded_study["result"].out_dir
    assert study_folder.is_multi_seed(out) and not study_folder.is_multi_seed(out / "seed1")
    assert study_folder.seed_folders(out) == [(1, out / "seed1"), (2, out / "seed2")]
    for seed in (1, 2):
        man = study_folder.load_manifest(out / f"seed{seed}")
        assert man["seed"] == seed and man["status"] == "complete" and man["profile"]["seed"] == seed
        assert "seeds" not in man["profile"] and set(study_folder.load_study(out / f"seed{seed}")["seed"]) == {seed}
    # the seed shuffles the stream: the two seeds stream other tasks of the same pool
    snaps = {k: study_folder.condition_snapshots(out / f"seed{k}", "auto-gt-b8") for k in (1, 2)}
    orders = [[r["task_id"] for s in snaps[k] for r in s["solves"]] for k in (1, 2)]
    assert orders[0] != orders[1] and len(orders[0]) == len(orders[1]) == 3
    # a seed's study is the same study the profile makes for that seed alone
    pd.testing.assert_frame_equal(study_folder.load_study(out / "seed2"), seeded_study["single"].frame)


def test_the_seeds_results_are_one_table_and_the_manifest_adds_them_up(seeded_study):
    res = seeded_study["result"]
    per_seed = [study_folder.load_study(res.out_dir / f"seed{k}") for k in (1, 2)]
    pd.testing.assert_frame_equal(res.frame, pd.concat(per_seed, ignore_index=True))
    pd.testing.assert_frame_equal(study_folder.load_study(res.out_dir), res.frame)
    assert list(res.frame.columns) == list(study_folder.RESULT_COLUMNS) and res.frame["seed"].tolist().count(1) == len(
        per_seed[0]
    )
    man = study_folder.load_manifest(res.out_dir)  # as the resumed run left it, beside the seeds' own
    assert (
        man == json.loads(json.dumps(seeded_study["again"].manifest))
        and man["seeds"] == [1, 2]
        and man["seed_dirs"] == {"1": "seed1", "2": "seed2"}
        and man["seed"] is None
    )
    mans = [study_folder.load_manifest(res.out_dir / f"seed{k}") for k in (1, 2)]
    assert man["calls"]["arc_eval"] == sum(m["calls"]["arc_eval"] for m in mans)
    assert man["wall_s_total"] == pytest.approx(sum(m["wall_s_total"] for m in mans), abs=0.2)
    assert man["profile"]["seeds"] == [1, 2] and study_folder.summary(res.out_dir)["seeds"] == [1, 2]
    assert study_folder.summary(res.out_dir / "seed1")["seeds"] == [1]
    assert SECRET not in json.dumps(man)


def test_a_study_of_seeds_resumes_without_new_solver_calls(seeded_study):
    assert seeded_study["solves_again"] == seeded_study["solves_first"]
    pd.testing.assert_frame_equal(seeded_study["again"].frame, seeded_study["result"].frame)


def test_an_interrupted_study_of_seeds_reads_as_its_complete_seeds_and_resumes(tmp_path, monkeypatch):
    profile = write_profile(tmp_path, SEEDED)
    out = tmp_path / "out"
    whole = study.run_profile

    def interrupted_in_seed_2(prof, folder, **kwargs):
        if prof.seed == 2:
            raise KeyboardInterrupt  # as a user's Ctrl-C (or a kill) hours into the second seed
        return whole(prof, folder, **kwargs)

    model = Model(profile_tasks(profile))
    with scripted_endpoint(model) as endpoint:
        monkeypatch.setattr(study, "run_profile", interrupted_in_seed_2)
        with pytest.raises(KeyboardInterrupt):
            study.run_study(profile, out, endpoint=endpoint, log=lambda *a: None)
        man = study_folder.load_manifest(out)
        assert man["status"] == "partial" and man["seeds"] == [1] and man["seeds_planned"] == [1, 2]
        assert study_folder.seed_folders(out) == [(1, out / "seed1")]
        pd.testing.assert_frame_equal(study_folder.load_study(out), study_folder.load_study(out / "seed1"))
        assert set(analysis.step_table(out)["seed"]) == {1}
        line = study_folder.seeds_progress(out)
        assert line.startswith("seeds complete: [1] of [1, 2]") and line.endswith(f"--out {out.as_posix()}`)")
        # inside a checkout, the folder is named relative to it (a command that works on another machine)
        assert study_folder.seeds_progress(out, root=tmp_path).endswith(
            f"--out {out.relative_to(tmp_path).as_posix()}`)"
        )
        assert study_folder.summary(out)["status"] == "partial" and study_folder.summary(out)["seeds_planned"] == [1, 2]

        monkeypatch.setattr(study, "run_profile", whole)
        solves = model.solves
        done = study.run_study(profile, out, endpoint=endpoint, log=lambda *a: None)
    assert model.solves > solves  # seed 2 ran; seed 1 was re-read
    assert done.manifest["status"] == "complete" and done.manifest["seeds"] == [1, 2]
    assert study_folder.seeds_progress(out) == "" and study_folder.seeds_progress(out / "seed1") == ""
    assert set(study_folder.load_study(out)["seed"]) == {1, 2}


def test_a_study_of_seeds_refuses_a_folder_of_one_seed(seeded_study, tmp_path):
    single = seeded_study["single"].out_dir
    with pytest.raises(FileExistsError, match=r"holds a study of one seed; a profile with seeds \[1, 2\]"):
        study.run_study(seeded_study["profile"], single, log=lambda *a: None)


def test_analyses_stack_the_seeds_and_average_what_they_set_beside_the_paper(seeded_study):
    out = seeded_study["result"].out_dir
    one = {k: out / f"seed{k}" for k in (1, 2)}
    cov = analysis.coverage_table(out)
    assert list(cov.columns) == ["seed", *analysis.TABLE4_COLUMNS] and set(cov["seed"]) == {1, 2}
    for k in (1, 2):
        mine = cov[cov["seed"] == k].drop(columns="seed").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, analysis.coverage_table(one[k]))
    assert "seed" not in analysis.coverage_table(one[1]).columns  # one study's tables are as they were
    t4 = analysis.table4_beside_paper(out)
    cell = t4[(t4["metric"] == "Avg. Covered") & (t4["|B|"] == 8) & (t4["regime"] == "auto")].iloc[0]
    both = [analysis.table4_beside_paper(one[k]) for k in (1, 2)]
    values = [b.loc[cell.name, "this run"] for b in both]
    assert cell["this run"] == pytest.approx(sum(values) / 2)

    for table in (analysis.step_table, analysis.misclassification_table, analysis.decision_table):
        stacked = table(out)
        assert set(stacked["seed"]) == {1, 2} and len(stacked) == sum(len(table(one[k])) for k in (1, 2))
    judge = analysis.judge_table(out)
    assert judge is not None and set(judge["seed"]) == {1, 2}
    lin = analysis.lineage_example(out)
    assert lin is not None and lin.seed in (1, 2) and lin.condition == "force-gt-b8"
    assert analysis.lineage_example(out, entry_id="S3").seed == 1  # the first seed whose final memory holds it
    with pytest.raises(KeyError, match="of any seed"):
        analysis.lineage_example(out, entry_id="S99")
    with pytest.raises(ValueError, match=r"a study of several seeds: condition 'auto-gt-b8' is recorded in each of"):
        study_folder.condition_snapshots(out, "auto-gt-b8")


def test_utility_over_seeds_is_their_mean_and_sd(seeded_study):
    out = seeded_study["result"].out_dir
    df = study_folder.load_study(out)
    curves = analysis.utility_table(df)
    summary = analysis.utility_summary(curves).set_index(["condition", "step"])
    assert set(summary["n_seeds"]) == {2}
    for (cond, step), grp in curves.groupby(["condition", "step"]):
        assert summary.loc[(cond, step), "accuracy_pct_mean"] == pytest.approx(grp["accuracy_pct"].mean())
        assert summary.loc[(cond, step), "accuracy_pct_sd"] == pytest.approx(grp["accuracy_pct"].std(), nan_ok=True)
    one = analysis.utility_summary(analysis.utility_table(study_folder.load_study(out / "seed1")))
    assert set(one["n_seeds"]) == {1} and one["accuracy_pct_sd"].isna().all()
    reg = analysis.regression_table(df).set_index("condition")
    per_seed = [
        analysis.regression_table(study_folder.load_study(out / f"seed{k}")).set_index("condition") for k in (1, 2)
    ]
    for cond in ("force-gt-b8", "auto-gt-b8"):
        assert reg.loc[cond, "with_memory"] == pytest.approx(sum(p.loc[cond, "with_memory"] for p in per_seed) / 2)
    assert figures.plot_utility(curves, title="seeds").axes


@pytest.mark.slow
def test_notebooks_09_and_10_show_a_study_of_several_seeds(seeded_study):
    from antipersist_lib.runner.notebooks_runner import execute_all

    out = seeded_study["result"].out_dir
    done = execute_all(
        "smoke",
        only=["09_arc_stream", "10_arc_memory_anatomy"],
        root=ROOT,
        overrides={"mode": "load", "study_dir": str(out)},
    )
    nb09, nb10 = (d.output for d in done)
    assert "seed(s) [1, 2] (tables and figures: the mean over seeds" in nb09.read_text()
    over = pd.read_csv(nb09.parent / "utility_vs_updates_heldout_over_seeds.csv")
    expected = analysis.utility_summary(analysis.utility_table(study_folder.load_study(out)))
    assert set(over["n_seeds"]) == {2} and over["accuracy_pct_mean"].tolist() == pytest.approx(
        expected["accuracy_pct_mean"].tolist()
    )
    steps = pd.read_csv(nb10.parent / "steps.csv")
    assert set(steps["seed"]) == {1, 2} and "seed(s) [1, 2]" in nb10.read_text()
