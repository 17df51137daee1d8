"""The helpers notebooks 09-12 call in one line each: the study status cell (``notebook.study_status``), the
paper-text checks (``faulty_paper_text.check_paper_text``) and the consistency checks of the tables they show
(``faulty_paper.check_*``). Each check must pass on consistent input and name what disagrees otherwise."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from antipersist_lib.analysis import faulty_paper, notebook
from antipersist_lib.analysis import faulty_paper_text as fpt
from antipersist_lib.arc import analysis as arc_analysis
from antipersist_lib.arc import study_folder as arc_folder
from antipersist_lib.consolidation import analysis as cons_analysis
from antipersist_lib.consolidation import study_folder as cons_folder

ROOT = Path(__file__).resolve().parents[1]
ARC_SMOKE = ROOT / "tests" / "fixtures" / "arc" / "smoke"
CONS_SMOKE = ROOT / "tests" / "fixtures" / "consolidation" / "smoke"
FAULTY_NOTEBOOKS = ("09_arc_stream", "10_arc_memory_anatomy", "11_consolidation_utility", "12_trajectory_logs")


def _code(name: str) -> str:
    data = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in data["cells"] if c["cell_type"] == "code")


# -- the status cell ---------------------------------------------------------------------------------


def test_status_of_the_arc_smoke_study_prints_note_folder_units_and_seeds(capsys):
    status = notebook.study_status(ARC_SMOKE, arc_folder, root=ROOT, seeds_reading="(several)")
    out = capsys.readouterr().out
    assert status.folders == (ARC_SMOKE,)
    assert status.note == arc_folder.study_note(ARC_SMOKE) and status.note
    assert out.startswith(f"NOTE: {status.note}\n")
    assert "study tests/fixtures/arc/smoke: profile params/arc/smoke.yaml, model gemma-3-270m" in out
    assert "conditions done: 4 of 4" in out and "pending" not in out
    assert "results: 4 conditions, checkpoints [0, 2, 4], seed(s) [0]\n" in out  # one seed: no seeds_reading
    pd.testing.assert_frame_equal(status.results, arc_folder.results(ARC_SMOKE))
    assert "\n".join(status.lines) + "\n" == out


def test_status_of_a_consolidation_study_counts_builds_and_evaluations(capsys):
    status = notebook.study_status([CONS_SMOKE], cons_folder, root=ROOT)
    out = capsys.readouterr().out
    man = cons_folder.load_manifest(CONS_SMOKE)
    assert f"builds done: {len(man['builds'])}, evaluations done: {man['evaluations']}\n" in out
    assert "status complete, seeds [42, 43]" in out and "seed(s) [42, 43]" in out
    assert len(status.results) == len(cons_folder.results([CONS_SMOKE]))


def test_status_of_no_study_prints_nothing(capsys):
    for found, reader in ((None, arc_folder), ([], cons_folder)):
        status = notebook.study_status(found, reader)
        assert status.folders == () and status.note == "" and status.lines == () and status.results.empty
    assert capsys.readouterr().out == ""


def _reader(manifest: dict, results: pd.DataFrame, progress: str = "") -> SimpleNamespace:
    """A study-folder reader as ``study_status`` uses it (duck-typed: the studies sit above analysis)."""
    return SimpleNamespace(
        results=lambda found: results,
        study_note=lambda found: "",
        load_manifest=lambda folder: manifest,
        seeds_progress=lambda folder, root=None: progress,
    )


def test_status_names_pending_conditions_seeds_and_the_resume_line(tmp_path, capsys):
    manifest = {
        "profile_path": "params/arc/x.yaml",
        "endpoint": {"model": "m"},
        "backbone": "b",
        "status": "partial",
        "seeds": [1, 2],
        "seeds_planned": [1, 2, 3],
        "conditions": [{"name": "force"}, {"name": "auto"}, {"name": "no_memory"}],
    }
    results = pd.DataFrame({"condition": ["force", "no_memory", "force"], "step": [0, 0, 4], "seed": [1, 1, 2]})
    status = notebook.study_status(
        tmp_path, _reader(manifest, results, "seeds complete: [1, 2] of [1, 2, 3]"), seeds_reading="(mean)"
    )
    out = capsys.readouterr().out
    assert "NOTE" not in out and status.note == ""
    assert "status partial, seeds [1, 2] of [1, 2, 3], pending [3]" in out
    assert "conditions done: 2 of 3, pending ['auto']" in out
    assert "seeds complete: [1, 2] of [1, 2, 3]\n" in out
    assert "results: 2 conditions, checkpoints [0, 4], seed(s) [1, 2] (mean)\n" in out


def test_unit_lines_of_a_running_consolidation_study_say_more_may_be_pending():
    lines = notebook.study_unit_lines(
        {"status": "running", "seeds": [7], "builds": [{}], "evaluations": 0}, pd.DataFrame()
    )
    assert lines == [
        "status running, seeds [7]",
        "builds done: 1, evaluations done: 0 (the study is running: more may be pending)",
    ]


def test_each_faulty_notebook_opens_with_one_status_call():
    for name in FAULTY_NOTEBOOKS:
        code = _code(name)
        assert len(re.findall(r"notebook\.study_status\(\s*found, study_folder", code)) == 1, name
        assert 'print("NOTE:", note)' not in code and "study_folder.study_note(found)" not in code, name


# -- the paper-text checks ---------------------------------------------------------------------------


def _table12_text(wins_first: int | None = None) -> str:
    """Table 12 printed as the paper prints it (tab-separated), from the records, optionally one cell changed."""
    lines = ["\t".join(fpt.TABLE12_HEADER)]
    for i, r in enumerate(faulty_paper.table12()):
        wins = wins_first if (i == 0 and wins_first is not None) else r.wins
        lines.append(f"{r.rollout}\t{r.memory}\t{wins}/50\t{r.mean_reward}\t{r.mean_steps}\t{r.hit_step_cap}/50")
    return "\n".join(lines) + "\n"


def _paper_root(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "shared" / fpt.PAPER_FILE
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return tmp_path


def _figure6_text() -> str:
    return "\n".join(fpt.STATED_SENTENCES[n]() for n in fpt.FIGURE6_SENTENCES) + "\n\n"


def test_check_paper_text_passes_on_a_text_that_prints_the_records(tmp_path, capsys):
    root = _paper_root(tmp_path, _figure6_text() + _table12_text())
    assert fpt.check_paper_text(root, "10_arc_memory_anatomy") == root / "shared" / fpt.PAPER_FILE
    out = capsys.readouterr().out
    assert out.startswith("checked against ") and "Table 12" in out and "Fig. 6" in out


def test_check_paper_text_raises_naming_every_difference(tmp_path):
    root = _paper_root(tmp_path, _table12_text(wins_first=8))  # one wrong cell, and no Fig. 6 sentences
    with pytest.raises(fpt.PaperTextMismatch) as err:
        fpt.check_paper_text(root, "10_arc_memory_anatomy")
    message = str(err.value)
    assert "Table 12 ('gpt-5.4-mini', 'full (8 workflows)') wins: the paper prints 8, the kit records 7" in message
    assert "figure6_segmentation" in message and "figure6_force_step" in message
    assert len(err.value.problems) == 3 and isinstance(err.value, AssertionError)


def test_check_paper_text_without_the_text_says_so_and_loads_nothing(tmp_path, capsys):
    def never():
        raise AssertionError("the erosion profile is loaded only when the text is there")

    assert fpt.check_paper_text(tmp_path, "11_consolidation_utility", erosion_profile=never) is None
    out = capsys.readouterr().out
    assert out.startswith("the paper's text is not beside this checkout: nothing to check") and "Table 11" in out


def test_check_paper_text_refuses_unknown_names_and_missing_inputs(tmp_path):
    with pytest.raises(KeyError, match="08_walkthrough"):
        fpt.check_paper_text(tmp_path, "08_walkthrough")
    with pytest.raises(KeyError, match="table99"):
        fpt.paper_text_mismatches("", ["table99"])
    with pytest.raises(ValueError, match="families and skills"):
        fpt.paper_text_mismatches("", ["taxonomy"])
    with pytest.raises(ValueError, match="erosion study profile"):
        fpt.paper_text_mismatches("", ["erosion_profile"])


def test_the_taxonomy_check_reads_the_generators_tables_as_frames():
    families, skills = arc_analysis.taxonomy_tables()

    def printed(header: str, table: pd.DataFrame) -> str:  # as the paper prints it (typographic apostrophes)
        rows = ("\t".join(str(x) for x in r).replace("'", "’") for r in table.itertuples(index=False))
        return header + "\n" + "\n".join(rows) + "\n\n"

    text = printed("strategy_id\tSelects by\tDefinition", families) + printed("skill_id\tDefinition", skills)
    assert fpt.paper_text_mismatches(text, ["taxonomy"], families=families, skills=skills) == []
    wrong = families.copy()
    wrong.iloc[0, 2] = "something else"
    (problem,) = fpt.paper_text_mismatches(text, ["taxonomy"], families=wrong, skills=skills)
    assert problem.startswith("Table 5 row 1:")


def test_every_faulty_notebook_checks_the_paper_text_in_one_call_of_its_own_name():
    assert set(fpt.NOTEBOOK_CHECKS) == set(FAULTY_NOTEBOOKS)
    assert {c for checks in fpt.NOTEBOOK_CHECKS.values() for c in checks} == set(fpt.PAPER_CHECKS)
    for name in FAULTY_NOTEBOOKS:
        code = _code(name)
        assert code.count("faulty_paper_text.check_paper_text(") == 1, name
        assert f'"{name}"' in code and "_mismatches(" not in code and "assert " not in code, name


# -- consistency checks: notebook 09 ----------------------------------------------------------------


def _regression(before: float, after: float) -> pd.DataFrame:
    return pd.DataFrame([{"source": "paper", "no_memory": before, "with_memory": after}])


def test_regression_check_compares_the_paper_row_with_the_records():
    before = faulty_paper.stated("arc19_no_memory_accuracy").value
    after = faulty_paper.stated("arc19_after_consolidation_accuracy").value
    assert faulty_paper.regression_problems(_regression(before, after)) == []
    (problem,) = faulty_paper.regression_problems(_regression(before, after + 1))
    assert "with_memory" in problem and "arc19_after_consolidation_accuracy" in problem
    assert faulty_paper.regression_problems(pd.DataFrame()) != []


def _results() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "condition": ["force-b8", "auto-b8", "auto-b1", "no_memory"],
            "regime": ["force", "auto", "auto", "none"],
            "table4_b": [8, 8, 1, None],
        }
    )


def test_coverage_check_names_missing_conditions_and_foreign_budgets():
    coverage = pd.DataFrame({"condition": ["force-b8", "auto-b8", "auto-b1"], "table4_b": [8, 8, 1]})
    assert faulty_paper.coverage_problems(coverage, _results()) == []
    (missing,) = faulty_paper.coverage_problems(coverage.iloc[:2], _results())
    assert "only in results: ['auto-b1']" in missing
    (budget,) = faulty_paper.coverage_problems(coverage.assign(table4_b=[8, 8, 50]), _results())
    assert "|B| [50]" in budget
    assert faulty_paper.coverage_problems(pd.DataFrame(), pd.DataFrame()) == []  # mode "paper"


def test_check_arc_stream_raises_one_error_listing_every_problem():
    before = faulty_paper.stated("arc19_no_memory_accuracy").value
    after = faulty_paper.stated("arc19_after_consolidation_accuracy").value
    coverage = pd.DataFrame({"condition": ["force-b8", "auto-b8", "auto-b1"], "table4_b": [8, 8, 1]})
    arms = pd.DataFrame({"arm": ["abstract_only", "both"]})
    faulty_paper.check_arc_stream(
        regression=_regression(before, after), results=_results(), coverage=coverage, arms=arms
    )
    with pytest.raises(faulty_paper.ConsistencyError) as err:
        faulty_paper.check_arc_stream(
            regression=_regression(before + 1, after),
            results=_results(),
            coverage=coverage,
            arms=pd.DataFrame({"arm": ["abstract_only", "buffer_only"]}),
        )
    assert len(err.value.problems) == 2 and "notebook 09" in str(err.value) and "buffer_only" in str(err.value)


def test_the_arc_stream_checks_pass_on_the_smoke_study():
    df = arc_folder.results(ARC_SMOKE)
    faulty_paper.check_arc_stream(
        regression=arc_analysis.regression_table(df),
        results=df,
        coverage=arc_analysis.coverage_table(ARC_SMOKE),
        arms=arc_analysis.source_ablation_table(ARC_SMOKE, df),
    )


# -- notebook 10 --------------------------------------------------------------------------------------


def test_misclassification_check_adds_up_the_steps_per_condition_and_seed():
    steps = pd.DataFrame({"seed": [0, 0, 1], "condition": ["a", "a", "a"], "misclassified": [1, 2, 5]})
    mis = pd.DataFrame({"seed": [0, 1], "condition": ["a", "a"], "misclassified": [3, 5]})
    assert faulty_paper.misclassification_problems(steps, mis) == []
    (problem,) = faulty_paper.misclassification_problems(steps, mis.assign(misclassified=[3, 4]))
    assert "'seed': 1" in problem and "shows 4" in problem and "add up to 5" in problem
    assert faulty_paper.misclassification_problems(pd.DataFrame(), pd.DataFrame()) == []


def test_the_anatomy_checks_pass_on_the_smoke_study_and_catch_a_changed_total():
    steps = arc_analysis.step_table(ARC_SMOKE)
    mis = arc_analysis.misclassification_table(ARC_SMOKE)
    example = arc_analysis.lineage_example(ARC_SMOKE)
    t12 = faulty_paper.table12_frame()
    faulty_paper.check_arc_anatomy(table12=t12, steps=steps, misclassifications=mis, lineage=example)
    with pytest.raises(faulty_paper.ConsistencyError, match="Fig. 7\\(a\\) shows"):
        faulty_paper.check_arc_anatomy(
            table12=t12,
            steps=steps,
            misclassifications=mis.assign(misclassified=mis["misclassified"] + 1),
            lineage=example,
        )
    with pytest.raises(faulty_paper.ConsistencyError, match="wins"):
        faulty_paper.check_arc_anatomy(
            table12=t12.assign(wins=t12["wins"] + 1), steps=steps, misclassifications=mis, lineage=example
        )


def test_lineage_check_wants_a_lineage_only_when_the_store_held_an_entry():
    assert faulty_paper.lineage_problems(pd.DataFrame({"abstract_entries": [0, 0]}), None) == []
    assert faulty_paper.lineage_problems(pd.DataFrame({"abstract_entries": [0, 2]}), object()) == []
    (problem,) = faulty_paper.lineage_problems(pd.DataFrame({"abstract_entries": [0, 2]}), None)
    assert "up to 2 entries" in problem


def test_probe_check_names_impossible_rows_and_a_summary_off_its_table():
    probes = pd.DataFrame({"n_passed": [1, 3], "n_tasks": [2, 2]})
    overfit = pd.DataFrame(
        {"cycle": [1, 2], "regime": ["auto", "auto"], "eval_kind": ["exact", "exact"], "accuracy_pct": [10.0, 20.0]}
    )
    summary = pd.DataFrame({"regime": ["auto"], "eval_kind": ["exact"], "last_cycle_pct": [20.0]})
    misgroup = pd.DataFrame({"stream": ["a", "m"], "streamed": ["alone", "mixed"], "misclassified": [0, -1]})
    problems = faulty_paper.probe_problems(probes, overfit, summary, misgroup)
    assert problems == ["probe row 1: 3 passed of 2 tasks"]  # a mixed stream's count is not checked
    problems = faulty_paper.probe_problems(
        probes.iloc[:1], overfit, summary.assign(last_cycle_pct=10.0), misgroup.assign(streamed="alone")
    )
    assert len(problems) == 2 and "last cycle is 10.0, the table's is 20.0" in problems[0] and "m: -1" in problems[1]
    faulty_paper.check_arc_probes(
        probes=pd.DataFrame(), overfit=pd.DataFrame(), overfit_summary=pd.DataFrame(), misgroup=pd.DataFrame()
    )


# -- notebook 11 --------------------------------------------------------------------------------------


def test_seed_check_names_a_bank_averaged_over_fewer_repeats():
    df = cons_folder.results([CONS_SMOKE])
    means = cons_analysis.seed_means(df)
    assert faulty_paper.seed_problems(means, df) == []
    short = means.copy()
    short.loc[short.index[0], "seeds"] = 1
    (problem,) = faulty_paper.seed_problems(short, df)
    assert "averaged over 1 seed(s), the study has 2" in problem


def test_task_type_and_task_switch_checks():
    by_type = pd.DataFrame({"task_type": ["pick", "clean"]})
    assert faulty_paper.task_type_problems(by_type, ["pick", "clean", "heat"]) == []
    assert "['clean']" in faulty_paper.task_type_problems(by_type, ["pick"])[0]
    switch = pd.DataFrame({"setup": ["fresh", "cumulative"], "score_total": [1.0, 2.0]})
    assert faulty_paper.task_switch_problems(switch) == []
    problems = faulty_paper.task_switch_problems(pd.DataFrame({"setup": ["fresh", "warm"], "score_total": [1.0, None]}))
    assert len(problems) == 2 and "['warm']" in problems[0] and "1 task-switch row(s)" in problems[1]
    with pytest.raises(faulty_paper.ConsistencyError, match="notebook 11"):
        faulty_paper.check_consolidation_utility(
            results=pd.DataFrame(), seed_means=pd.DataFrame(), probe_by_type=by_type, probe_task_types=[], switch=switch
        )


# -- notebook 12 --------------------------------------------------------------------------------------


def test_mark_rule_check_passes_on_the_paper_and_names_a_flipped_mark():
    cells = cons_analysis.paper_table_cells()
    assert faulty_paper.mark_rule_problems(cells) == []
    flipped = cells.copy()
    flipped.loc[flipped.index[0], "best_computed"] = not flipped.loc[flipped.index[0], "best"]
    (problem,) = faulty_paper.mark_rule_problems(flipped)
    assert problem.startswith(f"{cells.iloc[0]['source']} {cells.iloc[0]['benchmark']}") and "bold" in problem


def test_only_consolidators_carry_the_beaten_mark():
    cells = pd.DataFrame(
        {
            "benchmark": ["alfworld"] * 3,
            "backbone": ["b"] * 3,
            "column": ["all", "awm", "no_mem"],
            "beaten": [False, True, False],
        }
    )
    assert faulty_paper.beaten_column_problems(cells, cons_analysis.CONSOLIDATORS) == []
    (problem,) = faulty_paper.beaten_column_problems(
        cells.assign(beaten=[True, True, False]), cons_analysis.CONSOLIDATORS
    )
    assert "alfworld b all" in problem


def test_surgery_check_wants_same_episodes_and_one_entry_less_per_removal():
    outcomes = pd.DataFrame({"memory": ["full", "minus w1", "minus w2"], "entries": [3, 2, 2], "n": [4, 4, 4]})
    assert faulty_paper.surgery_problems(outcomes) == []
    problems = faulty_paper.surgery_problems(outcomes.assign(entries=[3, 2, 3], n=[4, 4, 2]))
    assert len(problems) == 2 and "[2, 4]" in problems[0] and "minus w2: 3 entries" in problems[1]
    assert faulty_paper.surgery_problems(outcomes.iloc[1:]) == ["the surgery table has no 'full' memory row"]
    with pytest.raises(faulty_paper.ConsistencyError, match="notebook 12"):
        faulty_paper.check_trajectory_logs(
            paper_cells=cons_analysis.paper_table_cells(),
            cells=pd.DataFrame(),
            consolidators=cons_analysis.CONSOLIDATORS,
            outcomes=outcomes.assign(n=[4, 4, 2]),
        )


def test_every_faulty_notebook_runs_its_consistency_checks_through_the_library():
    calls = {
        "09_arc_stream": ["faulty_paper.check_arc_stream("],
        "10_arc_memory_anatomy": ["faulty_paper.check_arc_anatomy(", "faulty_paper.check_arc_probes("],
        "11_consolidation_utility": ["faulty_paper.check_consolidation_utility("],
        "12_trajectory_logs": ["faulty_paper.check_trajectory_logs("],
    }
    for name, wanted in calls.items():
        code = _code(name)
        assert all(code.count(c) == 1 for c in wanted), name
        assert "assert " not in code, f"{name} still checks inline"
