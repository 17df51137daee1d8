"""ARC-AGI Stream probes on single-family subsets (arc/probes.py; faulty-memories paper Figs. 8(a), 8(b), 11).

The runs use the kit's scripted test model (tests/arc_scripted.py) on the loopback server: it copies the stored
code of a task whose first input it has seen, else the newest stored code, else returns the input. So an exact
repetition passes once its task is in memory, the no-memory baseline passes nothing, and which stored code a
prompt holds decides each number: the tests read the pipeline through it. The same run is compared with the
recorded fixture notebook 10 loads (tests/fixtures/arc/probes_scripted).
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import yaml
from arc_scripted import SCRIPTED_NOTE, ScriptedArcModel, run_scripted_probes

from antipersist_lib.arc import figures, probe_profile, probe_tables, probes, study_profile
from antipersist_lib.arc.families import FAMILY_IDS
from antipersist_lib.arc.generator import SKILL_IDS, check_solution
from antipersist_lib.cli import main as cli_main
from antipersist_lib.studies import StudyProfileError

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "params" / "arc" / "probes_smoke.yaml"
PAPER = ROOT / "params" / "arc" / "probes_paper.yaml"
FIXTURE = ROOT / "tests" / "fixtures" / "arc" / "probes_scripted"
LARGEST, SHAPE, FRAME, COLOR = (
    "detect_largest_objects_select",
    "group_by_shape_then_select",
    "detect_inside_frame_relation",
    "detect_color_property",
)


def write_profile(tmp_path: Path, data: dict, name: str = "probe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The smoke profile against the scripted model, then the same command again (a resume with nothing to do)."""
    tmp = tmp_path_factory.mktemp("probes")
    model = ScriptedArcModel()
    result = run_scripted_probes(SMOKE, tmp / "out", model=model, log=lambda *a: None)
    solves_first = model.solves
    again = run_scripted_probes(SMOKE, tmp / "out", model=model, log=lambda *a: None)
    return {"result": result, "again": again, "model": model, "solves_first": solves_first, "out": tmp / "out"}


# -- tasks ------------------------------------------------------------------------------------------


def test_variants_keep_family_and_skill_but_change_the_grids_and_the_rule_draw():
    subset = probe_profile.family_subset(COLOR, 3, seed=0, n_train=3, n_test=2)
    for task in subset:
        variants = probe_profile.make_variants(task, 2, n_train=3, n_test=2)
        assert len(variants) == 2
        for v in variants:
            assert (v.family, v.skill) == (task.family, task.skill)
            assert v.task_id != task.task_id and v.seed % 2 == 1 and task.seed % 2 == 0
            seen_inputs = [ex.input for ex in task.train + task.test]
            assert all(ex.input not in seen_inputs for ex in v.train + v.test)
            assert check_solution(v) == []  # a variant is a real task: its own ground truth solves it
        assert variants[0].task_id != variants[1].task_id
        assert [v.task_id for v in probe_profile.make_variants(task, 2, n_train=3, n_test=2)] == [
            v.task_id for v in variants
        ]
    # the color-property family hides a target color: across the variants it is redrawn, not fixed
    colors = {
        v.params["family"]["target_color"]
        for t in subset
        for v in probe_profile.make_variants(t, 2, n_train=3, n_test=2)
    }
    assert len(colors) > 1


def test_a_subset_holds_one_family_and_each_skill_once_per_seven():
    subset = probe_profile.family_subset(FRAME, 8, seed=0, n_train=2, n_test=1)
    assert {t.family for t in subset} == {FRAME}
    assert sorted(t.skill for t in subset[:7]) == sorted(SKILL_IDS) and subset[7].skill == subset[0].skill
    assert len({t.task_id for t in subset}) == 8
    assert [t.task_id for t in probe_profile.family_subset(FRAME, 8, seed=0, n_train=2, n_test=1)] == [
        t.task_id for t in subset
    ]
    assert [t.task_id for t in probe_profile.family_subset(FRAME, 8, seed=1, n_train=2, n_test=1)] != [
        t.task_id for t in subset
    ]
    with pytest.raises(ValueError, match="unknown family 'nope'"):
        probe_profile.family_subset("nope", 1)


def test_schedules_repeat_interleave_and_checkpoint_every_cycle():
    subsets = {"A": ["a1", "a2"], "B": ["b1", "b2", "b3"]}
    overfit = probe_profile.ProbeStream("o", "overfit", "force", (("A",),), 3, ("A",))
    order, points = probe_profile.schedule(overfit, subsets)
    assert order == ["a1", "a2"] * 3
    assert [(p.step, p.cycle, p.phase) for p in points] == [(0, 0, ""), (2, 1, "A"), (4, 2, "A"), (6, 3, "A")]
    overwrite = probe_profile.ProbeStream("w", "overwrite", "force", (("A",), ("B",)), 2, ("A", "B"))
    order, points = probe_profile.schedule(overwrite, subsets)
    assert order == ["a1", "a2", "a1", "a2", "b1", "b2", "b3", "b1", "b2", "b3"]
    assert [(p.step, p.phase) for p in points] == [(0, ""), (2, "A"), (4, "A"), (7, "B"), (10, "B")]
    mixed = probe_profile.ProbeStream("m", "misgroup", "force", (("A", "B"),), 1, ("A", "B"))
    order, points = probe_profile.schedule(mixed, subsets)
    assert order == ["a1", "b1", "a2", "b2", "b3"] and points[-1].phase == "A+B"


# -- profiles -----------------------------------------------------------------------------------------


GOOD = {
    "name": "probe",
    "subset_size": 2,
    "task_examples": {"n_train": 2, "n_test": 1},
    "overfit": {"family": LARGEST, "cycles": 2},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"subset_sise": 2}, r"unknown.*subset_sise"),
        ({"subset_size": 0}, r"'subset_size' must be an integer >= 1"),
        ({"overfit": {"family": "largest", "cycles": 2}}, r"overfit.family must be one of"),
        ({"overfit": {"family": LARGEST, "cycle": 2}}, r"overfit.cycle"),
        ({"overfit": {"family": LARGEST, "cycles": 0}}, r"'overfit.cycles' must be an integer >= 1"),
        ({"overwrite": {"families": [LARGEST]}}, r"'overwrite.families' must name exactly two families"),
        ({"misgroup": {"cycles": 1}}, r"'misgroup.families' is required"),
        ({"regime": ["force", "sometimes"]}, r"regime: 'sometimes' is not one of"),
        ({"source": "oracle"}, r"source must be one of"),
        ({"variants": True}, r"'variants' must be an integer >= 1"),
        ({"stream": {"temprature": 0.0}}, r"stream.temprature"),
        # the probe's stream choices are checked as the study's are (they were passed through unchecked)
        ({"stream": {"helper_usage": "always"}}, r"stream\.helper_usage must be one of .*got 'always'"),
        ({"stream": {"decide_on": "x"}}, r"stream\.decide_on must be one of .*got 'x'"),
        ({"evaluation": {"sources": ["episodic", "notes"]}}, r"evaluation.sources"),
        ({"sandbox": "none"}, r"sandbox must be one of"),
    ],
)
def test_profile_errors_name_the_key_and_the_file(tmp_path, change, message):
    path = write_profile(tmp_path, {**GOOD, **change})
    with pytest.raises(StudyProfileError, match=message) as info:
        probe_profile.load_probe_profile(path)
    assert str(path) in str(info.value)


def test_probe_profile_reads_the_study_blocks_it_shares(tmp_path):
    # the study's stream settings but the task order, its evaluation sources and workers, two shown examples at least
    assert study_profile.STREAM.keys - probe_profile.STREAM.keys == {"shuffle"}
    assert probe_profile.EVALUATION.keys == {"sources", "workers"}
    with pytest.raises(StudyProfileError, match=r"'task_examples.n_train' must be an integer >= 2, got 1"):
        probe_profile.load_probe_profile(write_profile(tmp_path, {**GOOD, "task_examples": {"n_train": 1}}))
    with pytest.raises(StudyProfileError, match=r"buffer_reading must be one of \('cap', 'batch'\), got 'size'"):
        probe_profile.load_probe_profile(write_profile(tmp_path, {**GOOD, "buffer_reading": "size"}))
    profile = probe_profile.load_probe_profile(
        write_profile(tmp_path, {**GOOD, "stream": {"solver_memory": "abstract"}}), context_check=False
    )
    assert profile.stream == {"solver_memory": ("abstract",)}
    assert "repeats" not in profile.eval_kwargs() and profile.eval_kwargs()["sources"] == ("episodic", "abstract")


def test_profile_needs_a_subset_size_and_a_probe(tmp_path):
    no_size = write_profile(tmp_path, {k: v for k, v in GOOD.items() if k != "subset_size"}, "a.yaml")
    with pytest.raises(StudyProfileError, match="'subset_size' is required"):
        probe_profile.load_probe_profile(no_size)
    no_probe = write_profile(tmp_path, {k: v for k, v in GOOD.items() if k != "overfit"}, "b.yaml")
    with pytest.raises(StudyProfileError, match=r"no probe asked for.*overfit.*overwrite.*misgroup"):
        probe_profile.load_probe_profile(no_probe)


def test_shipped_profiles_load_and_the_paper_profile_follows_the_paper():
    paper = probe_profile.load_probe_profile(PAPER)
    assert (paper.n_train, paper.n_test, paper.buffer_size, paper.source) == (10, 10, 8, "gt")
    overfit = [s for s in paper.streams if s.probe == "overfit"]
    assert {s.regime for s in overfit} == {"force", "auto"} and all(s.cycles == 10 for s in overfit)
    assert all(s.eval_kinds == ("repeat", "variant") for s in overfit)
    assert set(paper.families()) <= set(FAMILY_IDS) and paper.subset_size == 7
    smoke = probe_profile.load_probe_profile(SMOKE)
    assert [s.name for s in smoke.streams][:5] == [
        f"overfit-{LARGEST}-force",
        f"overwrite-{LARGEST}-then-{SHAPE}-force",
        f"mixed-{FRAME}+{COLOR}-force",
        f"only-{FRAME}-force",
        f"only-{COLOR}-force",
    ]


def test_the_command_line_runs_the_probes_and_names_profile_errors(tmp_path, capsys):
    bad = write_profile(tmp_path, {**GOOD, "overfit": {"family": "nope"}})
    assert cli_main(["arc-probes", "--profile", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "overfit.family" in err and str(bad) in err


# -- a scripted run ----------------------------------------------------------------------------------------


def test_rows_cover_every_stream_checkpoint_and_evaluated_set(smoke_run):
    df = smoke_run["result"].frame
    assert list(df.columns) == list(probe_tables.RESULT_COLUMNS)
    overfit = df[df["stream"] == f"overfit-{LARGEST}-force"]
    assert sorted(set(zip(overfit["step"], overfit["eval_kind"]))) == [
        (s, k) for s in (0, 2, 4, 6) for k in ("repeat", "variant")
    ]
    base = df[df["stream"] == probe_profile.NO_MEMORY]
    assert set(zip(base["eval_family"], base["eval_kind"])) == {
        (LARGEST, "repeat"),
        (LARGEST, "variant"),
        (SHAPE, "repeat"),
        (FRAME, "repeat"),
        (COLOR, "repeat"),
    }
    assert (df["n_tasks"] == 2).all()
    assert (base["accuracy"] == 0).all()  # the scripted model with no memory returns the input: never right


def test_exact_repetitions_pass_once_seen_and_variations_are_other_tasks(smoke_run):
    df = smoke_run["result"].frame
    for regime in ("force", "auto"):
        rows = df[(df["stream"] == f"overfit-{LARGEST}-{regime}") & (df["eval_kind"] == "repeat")]
        assert rows.set_index("cycle")["accuracy"].to_dict() == {0: 0.0, 1: 1.0, 2: 1.0, 3: 1.0}
    man = smoke_run["result"].manifest
    seen = set(man["subset_task_ids"][LARGEST])
    variants = man["variant_task_ids"][LARGEST]
    assert len(variants) == 2 and not seen & set(variants)
    assert [v.split(".")[:2] for v in variants] == [s.split(".")[:2] for s in man["subset_task_ids"][LARGEST]]


def test_overwrite_and_misgroup_read_the_memory_of_their_step(smoke_run):
    df = smoke_run["result"].frame.set_index(["stream", "step", "eval_family"])
    # Auto with a 2-slot buffer: family B's two episodes evict A's, so A's repeats are lost after the switch
    auto = f"overwrite-{LARGEST}-then-{SHAPE}-auto"
    assert df.loc[(auto, 2, LARGEST), "accuracy"] == 1.0 and df.loc[(auto, 4, LARGEST), "accuracy"] == 0.0
    assert df.loc[(auto, 4, SHAPE), "accuracy"] == 1.0 and df.loc[(auto, 4, SHAPE), "buffer_size"] == 2
    # Force merges every trajectory into one entry: only the mixed stream combines two families
    assert df.loc[(f"mixed-{FRAME}+{COLOR}-force", 4, FRAME), "misclassified"] > 0
    assert df.loc[(f"only-{FRAME}-force", 2, FRAME), "misclassified"] == 0
    assert df.loc[(f"only-{FRAME}-force", 2, COLOR), "accuracy"] == 0.0  # a family's memory has no other's code


def test_resume_keeps_complete_streams_and_reruns_only_an_incomplete_one(smoke_run, tmp_path):
    out = smoke_run["out"]
    assert smoke_run["model"].solves == smoke_run["solves_first"]  # the second command made no solver call
    pd.testing.assert_frame_equal(smoke_run["again"].frame, smoke_run["result"].frame)
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(out, copy)
    target = copy / "streams" / f"only-{COLOR}-auto"
    (target / probe_tables.DONE_FILE).unlink()  # as if the run had stopped inside this stream
    kept = copy / "streams" / f"only-{FRAME}-auto" / probe_tables.DONE_FILE
    kept_mtime = kept.stat().st_mtime_ns
    model = ScriptedArcModel()
    result = run_scripted_probes(SMOKE, copy, model=model, log=lambda *a: None)
    # that stream alone: 2 stream steps + 2 checkpoints x 2 evaluated families x 2 tasks
    assert model.solves == 2 + 2 * 2 * 2
    assert kept.stat().st_mtime_ns == kept_mtime
    pd.testing.assert_frame_equal(result.frame, smoke_run["result"].frame)
    (target / probe_tables.DONE_FILE).unlink()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="notes.txt"):
        run_scripted_probes(SMOKE, copy, model=ScriptedArcModel(), log=lambda *a: None)


def test_the_run_says_it_was_scripted_and_matches_the_recorded_fixture(smoke_run):
    man = smoke_run["result"].manifest
    assert man["provenance"] == SCRIPTED_NOTE and man["status"] == "complete" and man["study"] == "arc-probes"
    assert probe_tables.probes_note(smoke_run["out"]).startswith("SCRIPTED")
    recorded = json.loads((FIXTURE / "results.json").read_text())["rows"]
    assert recorded == json.loads((smoke_run["out"] / "results.json").read_text())["rows"]
    assert probe_tables.probes_note(FIXTURE) == SCRIPTED_NOTE


# -- tables and figures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded():
    return probe_tables.load_probes(FIXTURE)


def test_overfit_figure_draws_repeats_variations_and_their_baselines(recorded):
    table = probe_tables.overfit_table(recorded)
    fig = figures.plot_overfit(table, title="t")
    axes = [ax for ax in fig.axes if ax.get_lines()]
    assert [ax.get_title() for ax in axes] == [f"force: {LARGEST}", f"auto: {LARGEST}"]
    lines = {line.get_label(): line for line in axes[1].get_lines()}
    assert set(lines) == {
        "exact repetitions",
        "variations (same family and skill)",
        "no memory, repeat",
        "no memory, variant",
    }
    auto = table[table["regime"] == "auto"]
    for kind, label in figures.PROBE_KIND_LABELS.items():
        rows = auto[auto["eval_kind"] == kind].sort_values("cycle")
        assert list(lines[label].get_xdata()) == rows["cycle"].tolist()
        assert list(lines[label].get_ydata()) == rows["accuracy_pct"].tolist()
    summary = probe_tables.overfit_summary(table).set_index(["regime", "eval_kind"])
    assert summary.loc[("auto", "repeat"), "last_cycle_pct"] == 100.0
    assert summary.loc[("auto", "variant"), "paper"] == "collapses (Fig. 11)"
    plt.close("all")


def test_overwrite_figure_draws_each_family_and_the_switch(recorded):
    table = probe_tables.overwrite_table(recorded)
    assert set(table["switch_step"]) == {2}
    fig = figures.plot_overwrite(table, title="t")
    ax = next(a for a in fig.axes if a.get_title() == "auto")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines[f"{LARGEST} tasks"].get_ydata()) == [0.0, 100.0, 0.0]
    assert list(lines[f"{SHAPE} tasks"].get_ydata()) == [0.0, 0.0, 100.0]
    assert list(lines["second family starts"].get_xdata()) == [2.0, 2.0]
    summary = probe_tables.overwrite_summary(table).set_index(["regime", "role"])
    assert summary.loc[("auto", "first"), "change_pp"] == -100.0
    plt.close("all")


def test_misgroup_figure_draws_mixed_alone_and_no_memory_bars(recorded):
    table = probe_tables.misgroup_table(recorded)
    fig = figures.plot_misgroup(table, title="t")
    ax = next(a for a in fig.axes if a.get_title() == "force")
    bars = {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers}
    force = table[table["regime"] == "force"]
    mixed_mis = int(force.loc[force["streamed"] == "mixed", "misclassified"].max())
    assert mixed_mis > 0
    assert bars[f"mixed ({mixed_mis} cross-family memory actions)"] == [100.0, 100.0]
    assert bars[f"only {FRAME}"] == [100.0, 0.0] and bars[f"only {COLOR}"] == [0.0, 100.0]
    assert bars["no memory"] == [0.0, 0.0]
    summary = probe_tables.misgroup_summary(table).set_index(["regime", "eval_family"])
    assert summary.loc[("auto", FRAME), "mixed_pct"] == 50.0 and summary.loc[("auto", FRAME), "alone_pct"] == 100.0
    plt.close("all")


def test_figures_and_summaries_accept_no_run():
    empty = probe_tables.load_probes(None)
    for table_fn, plot, summarize in (
        (probe_tables.overfit_table, figures.plot_overfit, probe_tables.overfit_summary),
        (probe_tables.overwrite_table, figures.plot_overwrite, probe_tables.overwrite_summary),
        (probe_tables.misgroup_table, figures.plot_misgroup, probe_tables.misgroup_summary),
    ):
        table = table_fn(empty)
        assert summarize(table).empty
        fig = plot(table, title="t")
        assert any("no probe run loaded" in t.get_text() for ax in fig.axes for t in ax.texts)
    assert probes.obtain_probes("paper", "anywhere") is None and probe_tables.probes_note(None) == ""
    with pytest.raises(ValueError, match="mode must be one of"):
        probes.obtain_probes("live", "anywhere")
    plt.close("all")


def test_the_notebook_fixture_is_the_smoke_profile_on_the_embedded_default():
    """tests/fixtures/arc/probes_smoke (notebook 10's smoke data) was made from the profile as committed, by the
    embedded model it names, and holds every stream of the profile with the no-memory baseline."""
    import yaml

    folder = ROOT / "tests" / "fixtures" / "arc" / "probes_smoke"
    manifest = json.loads((folder / "study.json").read_text())
    profile = yaml.safe_load((ROOT / "params" / "arc" / "probes_smoke.yaml").read_text())
    assert manifest["status"] == "complete" and manifest["profile"] == profile
    assert manifest["embedded_backbone"]["model"]["name"] == profile["backbone_options"]["model"]
    assert len(manifest["embedded_backbone"]["model"]["sha256"]) == 64
    df = probe_tables.load_probes(folder)
    scripted = probe_tables.load_probes(FIXTURE)
    assert set(df["stream"]) == set(scripted["stream"])  # the same profile, the same streams
    assert len(df) == len(scripted) and df["n_tasks"].gt(0).all()
    assert probe_tables.probes_note(folder) != SCRIPTED_NOTE
