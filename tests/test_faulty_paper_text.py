"""The kit's faulty-memories records checked against the paper's own Markdown (``analysis.faulty_paper_text``).

Each check must pass on the real text and name the difference when either side changes: the text (an edited
copy) or the record (monkeypatched). Skipped only when the paper's text is not beside this checkout.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from antipersist_lib.analysis import faulty_paper
from antipersist_lib.analysis import faulty_paper_text as fpt
from antipersist_lib.consolidation import study

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def text() -> str:
    found = fpt.paper_text(ROOT)
    if found is None:
        pytest.skip("the paper's text (shared/paper/faulty-memories-paper.md) is not beside this checkout")
    return found


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


def test_find_paper_looks_in_shared_beside_or_inside_the_checkout(tmp_path):
    assert fpt.find_paper(tmp_path) is None and fpt.paper_text(tmp_path) is None
    inside = tmp_path / "shared" / "paper" / "faulty-memories-paper.md"
    inside.parent.mkdir(parents=True)
    inside.write_text("x", encoding="utf-8")
    assert fpt.find_paper(tmp_path) == inside.resolve()
    checkout = tmp_path / "repo"
    checkout.mkdir()
    assert fpt.find_paper(checkout) == inside.resolve() and fpt.paper_text(checkout) == "x"


# -- Tables 2 and 3, stated sentences, App. G schedule (notebooks 11 and 12) ---------------------------


def test_tables_2_and_3_match_and_a_changed_cell_is_named(text, monkeypatch):
    assert len(fpt.table23_rows(text)) == 10
    assert fpt.table23_mismatches(text) == []
    bold92 = "$\\mathbf{92}$"
    (problem,) = fpt.table23_mismatches(_replace_once(text, bold92, "$91$"))
    assert problem.startswith("alfworld GPT-5.4-Mini fs64: the paper prints") and "(91.0, False" in problem
    rows = dict(faulty_paper._T2_ALFWORLD)
    rows["GPT-5-Mini"] = [53, *rows["GPT-5-Mini"][1:]]
    monkeypatch.setattr(faulty_paper, "_T2_ALFWORLD", rows)
    (problem,) = fpt.table23_mismatches(text)
    assert problem.startswith("alfworld GPT-5-Mini no_mem:") and "(52.0, False, False, False)" in problem


def test_stated_sentences_match_and_a_changed_number_is_named(text, monkeypatch):
    assert fpt.stated_mismatches(text) == []
    (problem,) = fpt.stated_mismatches(_replace_once(text, "peaks near step 20", "peaks near step 25"))
    assert problem.startswith("figure1a_scienceworld: the paper does not say")
    changed = dict(faulty_paper.STATED)
    changed["webshop_awm_8_examples"] = dataclasses.replace(changed["webshop_awm_8_examples"], value=0.65)
    monkeypatch.setattr(faulty_paper, "STATED", changed)
    (problem,) = fpt.stated_mismatches(text, fpt.FIGURE1_SENTENCES)
    assert problem.startswith("figure1b_webshop:") and "$0.65$" in problem
    with pytest.raises(KeyError, match="no stated sentence"):
        fpt.stated_mismatches(text, ["figure3"])


def test_the_erosion_profile_s_schedule_matches_app_g(text):
    erosion = study.load_study_profile(ROOT / "params" / "consolidation" / "erosion_paper.yaml")
    assert fpt.erosion_profile_mismatches(text, erosion) == []
    g1 = erosion.regime("g1_one_per_type")
    changed = dataclasses.replace(
        erosion,
        regimes=tuple(
            dataclasses.replace(r, capacity=40, stages=dataclasses.replace(r.stages, rule="single_type"))
            if r is g1
            else r
            for r in erosion.regimes
        ),
    )
    problems = fpt.erosion_profile_mismatches(text, changed)
    assert any(p.startswith("G.1 capacity") for p in problems) and any(p.startswith("G.1 rule") for p in problems)
    assert len(problems) == 2


# -- ARC side: Table 4 and Fig. 2 (notebook 09), Table 12 (notebook 10), Table 11 (notebook 11) ---------


def test_table4_is_parsed_cell_by_cell_from_the_text(text):
    cells = fpt.table4_cells(text)
    assert len(cells) == 3 * 4
    assert {k for k, (v, _) in cells.items() if v is None} == {(1, "force", "buffer_size"), (8, "force", "buffer_size")}
    assert {k for k, (_, bold) in cells.items() if bold} == {(8, "force", "covered"), (8, "force", "fused")}
    assert fpt.table4_mismatches(text) == []


def test_table4_names_a_changed_printed_cell_or_bold(text):
    assert fpt.table4_mismatches(_replace_once(text, "$1.67$\t$2.17$", "$1.67$\t$2.71$")) == [
        "Table 4 Avg. Covered |B|=8 Auto: the paper prints (value, bold) = (2.71, False), the kit records (2.17, False)",
        "Table 4 Avg. Covered |B|=8 Auto: the paper prints 2.71, table4_frame() shows 2.17",
    ]
    (problem,) = fpt.table4_mismatches(_replace_once(text, "$\\mathbf{1.20}$", "$1.20$"))
    assert problem.startswith("Table 4 Avg. Fused |B|=8 Force:") and "(1.2, False)" in problem


def test_table4_names_a_changed_record_in_the_records_and_the_frame(text, monkeypatch):
    monkeypatch.setitem(faulty_paper._T4, (1, "auto"), (1.33, 1.00, 3.00))
    problems = fpt.table4_mismatches(text)
    assert problems == [
        "Table 4 Buffer Size |B|=1 Auto: the paper prints (value, bold) = (3.33, False), the kit records (3.0, False)",
        "Table 4 Buffer Size |B|=1 Auto: the paper prints 3.33, table4_frame() shows 3.0",
    ]


def test_table4_names_a_frame_that_drops_a_cell(text, monkeypatch):
    frame = faulty_paper.table4_frame()
    monkeypatch.setattr(faulty_paper, "table4_frame", lambda: frame.drop(index="Avg. Fused"))
    problems = fpt.table4_mismatches(text)
    assert len(problems) == 4 and all("Avg. Fused" in p and "table4_frame() shows absent" in p for p in problems)


def test_table4_parser_refuses_a_row_it_does_not_know(text):
    with pytest.raises(ValueError, match="Table 4 row the parser does not know: 'Avg. Merged'"):
        fpt.table4_cells(_replace_once(text, "Avg. Fused\t", "Avg. Merged\t"))


def test_figure2_sentences_match_and_a_changed_accuracy_is_named(text, monkeypatch):
    assert fpt.figure2_mismatches(text) == []
    (problem,) = fpt.figure2_mismatches(_replace_once(text, "down to $54\\%$", "down to $46\\%$"))
    assert problem.startswith("figure2_after: the paper does not say") and "$54\\%$" in problem
    changed = dict(faulty_paper.STATED)
    changed["arc19_no_memory_accuracy"] = dataclasses.replace(changed["arc19_no_memory_accuracy"], value=95.0)
    monkeypatch.setattr(faulty_paper, "STATED", changed)
    (problem,) = fpt.figure2_mismatches(text)
    assert problem.startswith("figure2_before:") and "$95\\%$" in problem


def test_table11_matches_and_a_changed_cell_is_named(text, monkeypatch):
    rows = fpt.table11_rows(text)
    assert rows["Qwen3.5-27B"] == {"no_memory": 19, "stage168": 37, "stage169": 24, "delta": -13}
    assert fpt.table11_mismatches(text) == []
    (problem,) = fpt.table11_mismatches(_replace_once(text, "Qwen3.5-9B\t15/48\t36/48", "Qwen3.5-9B\t15/48\t38/48"))
    assert problem == "Table 11 Qwen3.5-9B stage168: the paper prints 38, the kit records 36"
    records = faulty_paper.table11()
    monkeypatch.setattr(faulty_paper, "table11", lambda: [dataclasses.replace(records[0], delta=-5), *records[1:]])
    (problem,) = fpt.table11_mismatches(text)
    assert problem == "Table 11 Qwen3.5-4B delta: the paper prints -6, the kit records -5"
    monkeypatch.setattr(faulty_paper, "table11", lambda: records[:2])
    assert fpt.table11_mismatches(text) == ["Table 11 Qwen3.5-27B: printed, but the kit has no record"]
    with pytest.raises(ValueError, match="out of 50, its caption says 48"):
        fpt.table11_rows(_replace_once(text, "Qwen3.5-4B\t15/48", "Qwen3.5-4B\t15/50"))


def test_table12_matches_and_a_changed_cell_is_named(text, monkeypatch):
    rows = fpt.table12_rows(text)
    assert rows[("gpt-5-mini", "full (8 workflows)")] == {
        "wins": 18,
        "mean_reward": 0.49,
        "mean_steps": 18.2,
        "hit_step_cap": 22,
    }
    assert fpt.table12_mismatches(text) == []
    edited = _replace_once(text, "minus W8 (7 workflows)\t14/50\t0.37", "minus W8 (7 workflows)\t15/50\t0.38")
    assert sorted(fpt.table12_mismatches(edited)) == [
        "Table 12 ('gpt-5.4-mini', 'minus W8 (7 workflows)') mean_reward: the paper prints 0.38, the kit records 0.37",
        "Table 12 ('gpt-5.4-mini', 'minus W8 (7 workflows)') wins: the paper prints 15, the kit records 14",
    ]
    records = faulty_paper.table12()
    monkeypatch.setattr(
        faulty_paper, "table12", lambda: [*records[:3], dataclasses.replace(records[3], memory="minus W7")]
    )
    assert sorted(fpt.table12_mismatches(text)) == [
        "Table 12 ('gpt-5-mini', 'minus W7'): recorded by the kit, not printed",
        "Table 12 ('gpt-5-mini', 'minus W8 (7 workflows)'): printed, but the kit has no record",
    ]


@pytest.mark.parametrize(
    "group, record, value",
    [
        ("FIGURE6_SENTENCES", "segmentation_steps", 70),
        ("FIGURE6_SENTENCES", "force_fresh_examples_per_step", 6),
        ("SWITCH_SENTENCES", "cumulative_behind_fresh", 230),
        ("SWITCH_SENTENCES", "garbage_ratio", 2),
        ("SWITCH_SENTENCES", "switch_tasks", 16),
        ("FIGURE16_SENTENCES", "g1_no_memory_27b", 18),
        ("FIGURE16_SENTENCES", "g1_peak_4b_9b", 36),
        ("FIGURE16_SENTENCES", "g1_stage200_27b", 21),
    ],
)
def test_the_section_6_and_app_g_sentences_name_a_changed_record(text, monkeypatch, group, record, value):
    names = getattr(fpt, group)
    assert fpt.stated_mismatches(text, names) == []
    changed = dict(faulty_paper.STATED)
    changed[record] = dataclasses.replace(changed[record], value=value)
    monkeypatch.setattr(faulty_paper, "STATED", changed)
    (problem,) = fpt.stated_mismatches(text, names)
    assert f"{value}" in problem.split(":", 1)[1]


def test_tables_5_and_6_match_the_generator_and_a_change_is_named(text):
    from antipersist_lib.arc import analysis as arc_analysis

    families, skills = arc_analysis.taxonomy_tables()
    fam = list(families.itertuples(index=False, name=None))
    sk = list(skills.itertuples(index=False, name=None))
    assert len(fam) == 6 and len(sk) == 7
    assert fpt.taxonomy_mismatches(text, fam, sk) == []
    changed = [*sk[:2], ("recolor", "Repaint each selected object twice."), *sk[3:]]
    (problem,) = fpt.taxonomy_mismatches(text, fam, changed)
    assert problem.startswith("Table 6 row 3") and "twice" in problem
    (problem,) = fpt.taxonomy_mismatches(text, fam[:5], sk)
    assert problem.startswith("Table 5: the paper prints more rows") and "compose_horizontal" in problem
    edited = _replace_once(
        text, "detect_inside_frame_relation\tspatial containment", "detect_inside_frame_relation\tspatial nesting"
    )
    (problem,) = fpt.taxonomy_mismatches(edited, fam, sk)
    assert problem.startswith("Table 5 row 5") and "spatial nesting" in problem


def test_figures_12_and_13_draw_one_example_per_family_or_skill():
    from antipersist_lib.analysis.plots import text_overlaps
    from antipersist_lib.arc import analysis as arc_analysis
    from antipersist_lib.arc import figures as arc_figures

    tasks = arc_analysis.example_tasks(skill="recolor")
    assert [t.family for t in tasks] == list(arc_analysis.taxonomy_tables()[0]["strategy_id"])
    assert {t.skill for t in tasks} == {"recolor"} and all(len(t.train) == 2 for t in tasks)
    fig = arc_figures.plot_task_examples(tasks, by="family", title="Fig. 12")
    assert len(fig.axes) == 12 and [ax.get_title() for ax in fig.axes[:6]][0] == "detect color property"
    assert (fig.axes[0].images[0].get_array() == tasks[0].train[0].input).all()
    assert not text_overlaps(fig)
    per_skill = arc_analysis.example_tasks(family="detect_color_property")
    assert [t.skill for t in per_skill] == list(arc_analysis.taxonomy_tables()[1]["skill_id"])


def test_table1_names_a_kit_profile_for_each_setting_and_each_loads():
    """Table 1's settings mapped to profiles (notebook 12): every named profile exists and loads with its study's
    loader; only AppWorld has none."""
    from antipersist_lib.arc.probe_profile import load_probe_profile
    from antipersist_lib.arc.study_profile import load_study_profile as load_arc

    rows = faulty_paper.table1()
    assert len(rows) == 8 and {r.benchmark for r in rows} == {
        "ALFWorld",
        "ScienceWorld",
        "WebShop",
        "AppWorld",
        "ARC-AGI",
    }
    for r in rows:
        if not r.kit_profile.startswith("params/"):
            assert r.benchmark == "AppWorld"
            continue
        path = ROOT / r.kit_profile
        if "probes" in path.name:
            load_probe_profile(path)
        elif path.parent.name == "arc":
            load_arc(path)
        else:
            study.load_study_profile(path)
    assert list(faulty_paper.table1_frame().columns) == ["benchmark", "setting", "figures", "kit_profile"]
