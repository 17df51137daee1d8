"""The ARC-AGI Stream's selectable readings of the faulty-memories paper (arc/controller, prompts, study, analysis).

- Table 4's |B| (§6.1, Table 4): ``buffer_reading: batch`` (|B| fresh examples per step, buffer uncapped) or
  ``cap`` (a FIFO cap), and Buffer Size as the mean over the evaluated checkpoint memories;
- App. B.3's decision timing (``stream.decide_on: passing``), with Force's invariant;
- App. B.6's flat extraction schema and App. B.7's strategy selection (``stream.extraction_schema``,
  ``stream.solver_mode``);
- Fig. 2's setup (``fig2``: a slice the no-memory solver passes, revisited) and §4's two evaluation repeats;
- Fig. 9(a) / App. K.1's three-way source comparison (``source_ablation``).

Every model is a scripted loopback responder; each test fails if the reading it checks were coded otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from antipersist_lib import studies
from antipersist_lib.arc import analysis, figures, study, study_folder, study_profile
from antipersist_lib.arc.controller import (
    NO_PASSING_SOLVE,
    StreamConfig,
    evaluate,
    gt_code,
    run_stream,
)
from antipersist_lib.arc.decisions import parse_extraction, parse_selection, selection_or_fallback
from antipersist_lib.arc.prompts import (
    EMPTY_HISTORY,
    SELECTED_NONE,
    extraction_messages,
    render_grid,
)
from antipersist_lib.arc.prompts import PROMPTS as ARC_PROMPTS
from antipersist_lib.arc.stores import AbstractStore, EpisodicBuffer, Memory, StrategyDraft
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.errors import ReplyParseError
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.serving.preflight import PREFLIGHT_PROMPT
from antipersist_lib.testing.loopback_server import LoopbackServer, last_user_text
from tests.test_arc_controller import (
    WRONG,
    Model,
    buffer_ids,
    extraction_reply,
    fenced,
    ids,
    small_task,
    store_ids,
)

RETAIN = '{"action": "retain", "ids": []}'


@pytest.fixture(scope="module")
def tasks():
    """The controller tests' tasks (three shown examples each)."""
    return {
        "A1": small_task("detect_color_property", "recolor", 1),
        "B1": small_task("detect_largest_objects_select", "keep", 2),
        "A2": small_task("detect_color_property", "hollow", 3),
        "C1": small_task("compose_horizontal", "mark_center", 4),
    }


# -- App. B.3: when the memory decision is taken -----------------------------------------------------------


def test_decide_on_passing_skips_the_decision_after_a_failing_running_step(make_clients, tasks, tmp_path):
    stream = [tasks["A1"], tasks["B1"], tasks["A2"]]
    passing = {tasks["B1"].task_id}
    model = Model(stream, passes=lambda t, p: t.task_id in passing, decide=lambda n, p: RETAIN)
    clients = make_clients(model)
    cfg = StreamConfig(regime="auto", source="running", decide_on="passing")
    result = run_stream(stream, clients.llm, cfg, tmp_path / "passing")

    assert len(model.prompts["decide"]) == 1  # only the passing step asks for a decision
    assert result.calls["arc_decide"] == 1
    first, second, third = result.snapshots
    for snap in (first, third):
        assert snap["passed"] is False
        assert snap["decision"]["source"] == "skipped" and snap["decision"]["reason"] == NO_PASSING_SOLVE
    assert second["passed"] is True and second["decision"]["source"] == "model"
    assert buffer_ids(first) == ["E1"]  # the failed trajectory waits in the buffer for the next decision
    assert "Trajectory E1 (FAILED)" in model.prompts["decide"][0]

    every = Model(stream, passes=lambda t, p: t.task_id in passing, decide=lambda n, p: RETAIN)
    run_stream(stream, make_clients(every).llm, StreamConfig(regime="auto", source="running"), tmp_path / "every")
    assert len(every.prompts["decide"]) == 3  # the default decides after every step


def test_gt_steps_count_as_passing(make_clients, tasks, tmp_path):
    stream = [tasks["A1"], tasks["B1"]]
    model = Model(stream, passes=lambda t, p: False, decide=lambda n, p: RETAIN)
    cfg = StreamConfig(regime="episodic_only", source="gt", decide_on="passing")
    result = run_stream(stream, make_clients(model).llm, cfg, tmp_path)
    assert len(model.prompts["decide"]) == 2 and all(s["passed"] for s in result.snapshots)


def test_a_step_with_one_passing_solve_of_several_is_passing(make_clients, tasks, tmp_path):
    stream = [tasks["A1"], tasks["B1"], tasks["A2"], tasks["C1"]]
    passing = {tasks["B1"].task_id}
    model = Model(stream, passes=lambda t, p: t.task_id in passing, decide=lambda n, p: RETAIN)
    cfg = StreamConfig(regime="auto", source="running", decide_on="passing", tasks_per_step=2, buffer_size=None)
    result = run_stream(stream, make_clients(model).llm, cfg, tmp_path)
    assert [s["passed"] for s in result.snapshots] == [True, False]
    assert len(model.prompts["decide"]) == 1


def test_force_on_a_failing_step_neither_extracts_nor_keeps_the_episode(make_clients, tasks, tmp_path):
    stream = [tasks["A1"], tasks["B1"], tasks["A2"]]
    passing = {tasks["B1"].task_id}
    new = extraction_reply({"kind": "new", "from_functions": [1], "strategy": "lesson"})
    model = Model(stream, passes=lambda t, p: t.task_id in passing, extract=lambda n, p: new)
    cfg = StreamConfig(regime="force", source="running", decide_on="passing")
    result = run_stream(stream, make_clients(model).llm, cfg, tmp_path)

    assert len(model.prompts["extract"]) == 1 and model.prompts["decide"] == []
    assert all(buffer_ids(s) == [] for s in result.snapshots)  # Force's invariant holds on every step
    first, second, third = result.snapshots
    assert ids(first["discarded"]) == ["E1"] and first["consumed"] == [] and first["extraction"] is None
    assert ids(second["consumed"]) == ["E2"] and second["discarded"] == []
    assert ids(third["discarded"]) == ["E3"]
    assert store_ids(third) == ["S1"] and result.memory.abstract.get("S1").from_functions == ("E2",)
    assert "(FAILED" not in model.prompts["extract"][0]  # a failed attempt is never distilled under this reading


# -- App. B.6: the flat extraction schema ------------------------------------------------------------------


def test_flat_schema_prompt_and_store_text(make_clients, tasks, tmp_path):
    stream = [tasks["A1"], tasks["B1"]]
    replies = {
        1: extraction_reply({"kind": "new", "strategy": "FLAT-ONE", "from_functions": [1]}),
        2: extraction_reply({"from_existing": [1], "strategy": "FLAT-MERGED"}),  # no kind: a merge
    }
    model = Model(stream, extract=lambda n, p: replies[n])
    cfg = StreamConfig(regime="force", extraction_schema="flat")
    result = run_stream(stream, make_clients(model).llm, cfg, tmp_path)

    assert "flat JSON array" in model.prompts["extract"][0] and "when_to_use" not in model.prompts["extract"][0]
    first, second = result.snapshots
    (s1,) = first["memory"]["abstract"]["entries"]
    assert s1["text"] == "FLAT-ONE"  # one free-form string, no when/strategy pair
    assert first["extraction"]["schema"] == "flat"
    assert store_ids(second) == ["S2"]
    merged = result.memory.abstract.get("S2")
    assert merged.kind == "merge" and merged.from_existing == ("S1",) and merged.text == "FLAT-MERGED"
    assert any("no 'kind'" in w for w in second["extraction"]["warnings"])


def test_flat_parser_rules():
    reply = extraction_reply(
        {"kind": "retain", "from_existing": [2]},
        {"strategy": ["step one", "step two"], "from_functions": [1]},
        {"kind": "merge", "from_existing": [1], "strategy": "m"},
        {"kind": "new", "strategy": 7, "from_functions": [1]},
        {"kind": "new", "when_to_use": "x", "strategy": "s", "from_functions": [1]},
    )
    plan = parse_extraction(reply, n_existing=2, n_inputs=1, schema="flat")
    kinds = [(i.kind, i.text) for i in plan.items]
    assert kinds == [("retain", ""), ("new", "step one\nstep two"), ("merge", "m"), ("new", "s")]
    assert plan.items[2].from_functions == ()  # merge's from_functions is optional
    text = " ".join(plan.warnings)
    assert "joined" in text and "must be a string" in text and "other text fields ignored" in text
    # the structured schema keeps its when/strategy pair on the same item
    structured = parse_extraction(reply, n_existing=2, n_inputs=1)
    assert structured.items[-1].text.startswith("When to use: x")
    with pytest.raises(ReplyParseError):
        parse_extraction("no json here", n_existing=0, n_inputs=1, schema="flat")
    with pytest.raises(ValueError, match="schema must be one of"):
        extraction_messages([], [], schema="nested")


# -- App. B.7: strategy selection --------------------------------------------------------------------------


class Selecting(Model):
    """The controller tests' model, plus a route for the selection prompt."""

    def __init__(self, *args, select=lambda n, p: '{"choice": 1}', **kw) -> None:
        super().__init__(*args, **kw)
        self.select = select
        self.prompts["select"] = []

    def __call__(self, request: dict) -> str:
        text = last_user_text(request)
        if text.startswith("# Strategy selection"):
            self.prompts["select"].append(text)
            return self.select(len(self.prompts["select"]), text)
        return super().__call__(request)


def two_strategy_memory() -> Memory:
    store = AbstractStore()
    store.rewrite([StrategyDraft("new", "ALPHA-RULE"), StrategyDraft("new", "BETA-RULE")], {}, 0)
    return Memory(EpisodicBuffer(capacity=8), store)


def test_selection_shows_half_the_examples_and_only_the_chosen_strategy(make_clients, tasks):
    task = tasks["A1"]  # 3 shown examples
    model = Selecting([task], select=lambda n, p: '```json\n{"choice": 2, "reason": "fits"}\n```')
    res = evaluate([task], make_clients(model).llm, two_strategy_memory(), solver_mode="select")

    (sel,) = model.prompts["select"]
    assert "## Examples (2 of 3)" in sel and "Example 3" not in sel
    assert "### Strategy 1\nALPHA-RULE" in sel and "### Strategy 2\nBETA-RULE" in sel
    assert "## Tool buffer" in sel and "def " in sel  # the helper buffer
    solve = model.prompts["solve"][0]
    memory_block = solve.split("## Strategy memory")[1].split("## Tool buffer")[0]
    assert "BETA-RULE" in memory_block and "ALPHA-RULE" not in memory_block
    record = res.records[0]
    assert record.selection["index"] == 2 and record.selection["entry_id"] == "S2" and record.selection["called"]


def test_selection_variants_and_fallbacks(make_clients, tasks, tmp_path):
    task = tasks["A1"]
    memory = two_strategy_memory()
    proposal = '{"choice": "new", "strategy": "PROPOSED-RULE"}'

    open_model = Selecting([task], select=lambda n, p: proposal)
    evaluate([task], make_clients(open_model).llm, memory, solver_mode="select_open")
    assert '"new"' in open_model.prompts["select"][0]
    assert "### Proposed strategy\nPROPOSED-RULE" in open_model.prompts["solve"][0]

    closed = Selecting([task], select=lambda n, p: proposal)  # the closed variant may not propose
    res = evaluate([task], make_clients(closed).llm, memory, solver_mode="select")
    assert '"new"' not in closed.prompts["select"][0]
    assert SELECTED_NONE in closed.prompts["solve"][0] and "ALPHA-RULE" not in closed.prompts["solve"][0]
    assert res.records[0].selection["source"] == "fallback"

    # an empty memory: the closed variant has nothing to name and makes no call
    empty = Selecting([tasks["A1"], tasks["B1"]])
    cfg = StreamConfig(regime="episodic_only", solver_mode="select")
    result = run_stream([tasks["A1"], tasks["B1"]], make_clients(empty).llm, cfg, tmp_path)
    assert empty.prompts["select"] == [] and "arc_select" not in result.calls
    assert result.snapshots[0]["solves"][0]["selection"]["source"] == "skipped"


def test_selection_in_the_stream_counts_its_calls(make_clients, tasks, tmp_path):
    stream = [tasks["A1"], tasks["B1"], tasks["A2"]]
    new = extraction_reply({"kind": "new", "from_functions": [1], "when_to_use": "w", "strategy": "LESSON"})
    model = Selecting(stream, extract=lambda n, p: new, select=lambda n, p: '{"choice": 1}')
    cfg = StreamConfig(regime="force", solver_mode="select")
    result = run_stream(stream, make_clients(model).llm, cfg, tmp_path)
    assert result.calls["arc_select"] == 2 == len(model.prompts["select"])  # step 1's memory was empty
    assert "LESSON" in model.prompts["solve"][1]


def test_selection_parser_rules():
    assert parse_selection('{"choice": "2"}', n_strategies=2, allow_new=False).index == 2
    assert parse_selection('{"choice": "Strategy 1"}', n_strategies=2, allow_new=False).index == 1
    assert parse_selection('{"choice": null}', n_strategies=2, allow_new=False).index is None
    assert parse_selection('{"strategy": 1}', n_strategies=1, allow_new=False).index == 1
    with pytest.raises(ReplyParseError, match="out of range"):
        parse_selection('{"choice": 3}', n_strategies=2, allow_new=False)
    with pytest.raises(ReplyParseError, match="without its text"):
        parse_selection('{"choice": "new"}', n_strategies=2, allow_new=True)
    fallback = selection_or_fallback("I would use the first one", n_strategies=2, allow_new=False)
    assert fallback.index is None and fallback.source == "fallback" and fallback.error


def test_new_prompts_are_registered_for_the_manifest():
    hashes = prompt_hashes(ARC_PROMPTS)
    assert {"arc_extraction_flat", "arc_selection", "arc_selection_system"} <= set(hashes)


# -- §4: evaluation repeats --------------------------------------------------------------------------------


def test_evaluation_repeats_average_and_differ_by_seed(make_clients, tasks):
    seen_seeds = []
    calls = {"n": 0}

    def responder(request: dict) -> str:
        seen_seeds.append(request.get("seed"))
        calls["n"] += 1
        task = tasks["A1"] if render_grid(tasks["A1"].train[0].input) in last_user_text(request) else tasks["B1"]
        # the first repeat passes both tasks, the second only A1
        ok = request.get("seed") in (None, 0) or task is tasks["A1"]
        return fenced(gt_code(task) if ok else WRONG)

    clients = make_clients(responder)
    res = evaluate([tasks["A1"], tasks["B1"]], clients.llm, Memory(EpisodicBuffer(8), AbstractStore()), repeats=2)
    assert calls["n"] == 4 and res.n_tasks == 2 and len(res.records) == 4
    assert res.n_passed == 3 and res.accuracy == pytest.approx(0.75)
    assert [r.repeat for r in res.records] == [0, 0, 1, 1]
    assert len(set(seen_seeds)) == 2  # repeat 1 carries a seed of its own


# -- Table 4: the |B| reading and the Buffer Size average --------------------------------------------------


BASE = {
    "name": "readings",
    "backbone": "embedded",
    "backbone_options": {"n_ctx": 65536},  # a context the load-time prompt check accepts
    "train_pool": {"name": "train19", "seed": 0},
    "heldout_pool": {"name": "heldout50", "seed": 0, "limit": 2},
    "task_examples": {"n_train": 2, "n_test": 2},
    "steps": 2,
    "checkpoint_every": 1,
    "conditions": {"regime": ["auto", "force"], "source": ["gt"], "buffer_size": [1, 8]},
}


def write_profile(tmp_path: Path, data: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_buffer_readings_build_different_streams(tmp_path):
    batch = study_profile.load_study_profile(write_profile(tmp_path, {**BASE, "buffer_reading": "batch"}, "b.yaml"))
    auto8 = batch.condition("auto-gt-binf-t8")
    assert (auto8.buffer_size, auto8.tasks_per_step, auto8.table4_b, auto8.buffer_reading) == (None, 8, 8, "batch")
    cfg = batch.stream_config(auto8)
    assert cfg.buffer_size is None and cfg.tasks_per_step == 8
    assert batch.condition("auto-gt-binf").table4_b == 1

    cap = study_profile.load_study_profile(write_profile(tmp_path, BASE, "c.yaml"))  # the default reading
    auto8 = cap.condition("auto-gt-b8")
    assert (auto8.buffer_size, auto8.tasks_per_step, auto8.table4_b, auto8.buffer_reading) == (8, 1, 8, "cap")
    assert {c.name for c in cap.conditions}.isdisjoint(c.name for c in batch.conditions)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"buffer_reading": "fifo"}, r"buffer_reading must be one of \('cap', 'batch'\)"),
        ({"buffer_reading": "batch", "tasks_per_step": 8}, r"buffer_reading: batch takes the tasks per step"),
        (
            {"buffer_reading": "batch", "conditions": {"regime": ["auto"], "buffer_size": [None]}},
            r"'conditions.buffer_size' must be an integer >= 1",
        ),
        ({"coverage_average": "runs"}, r"coverage_average must be one of"),
        ({"stream": {"decide_on": "always"}}, r"stream\.decide_on must be one of \('every_step', 'passing'\)"),
        ({"stream": {"solver_mode": "pick"}}, r"stream\.solver_mode must be one of"),
        ({"stream": {"extraction_schema": "nested"}}, r"stream\.extraction_schema must be one of"),
        ({"evaluation": {"repeats": 0}}, r"'evaluation.repeats' must be an integer >= 1"),
        ({"fig2": {"select": "best"}}, r"fig2\.select must be one of"),
        ({"fig2": {"n_task": 3}}, r"fig2\.n_task"),
        ({"source_ablation": {"conditions": ["auto-gt-b8"], "arms": ["mixed"]}}, r"source_ablation\.arms"),
        ({"source_ablation": {"conditions": ["auto-gt-b8"], "checkpoints": [5]}}, r"source_ablation\.checkpoints"),
    ],
)
def test_bad_reading_keys_are_named(tmp_path, change, message):
    path = write_profile(tmp_path, {**BASE, **change})
    with pytest.raises(studies.StudyProfileError, match=message) as info:
        study_profile.load_study_profile(path)
    assert str(path) in str(info.value)


def snap(step: int, buffer: int, covered: int, fused: float | None) -> dict:
    return {"step": step, "coverage": {"buffer_size": buffer, "covered": covered, "fused": fused}}


def test_buffer_size_is_the_mean_over_the_checkpoint_memories():
    snaps = [snap(1, 2, 0, None), snap(2, 4, 1, 1.0), snap(3, 6, 2, 1.5), snap(4, 8, 3, 2.0)]
    at = analysis.table4_averages(snaps, average_over="checkpoints", checkpoints=[0, 2, 4])
    assert at["buffer_size"] == 6.0 and at["covered"] == 2.0 and at["fused"] == 1.5 and at["n_steps"] == 2
    every = analysis.table4_averages(snaps, average_over="steps")
    assert every["buffer_size"] == 5.0 and every["covered"] == 1.5 and every["fused"] == 1.5
    with pytest.raises(ValueError, match="no snapshot at the checkpoints"):
        analysis.table4_averages(snaps, checkpoints=[0, 9])


def fake_study(out: Path, conditions: list[dict], snaps_by_name: dict[str, list[dict]]) -> Path:
    """A study folder holding only what the Table 4 helpers read: the manifest and per-step snapshots."""
    out.mkdir(parents=True)
    atomic_write_json(out / "study.json", {"conditions": conditions, "checkpoints": [0, 2, 4]})
    for name, snaps in snaps_by_name.items():
        with JsonlWriter(out / "conditions" / name / "snapshots.jsonl") as writer:
            for s in snaps:
                writer.append({**s, "memory": {"episodic": {"entries": []}, "abstract": {"entries": []}}})
    return out


@pytest.mark.parametrize("reading", ["batch", "cap"])
def test_table4_puts_the_run_under_its_paper_b(tmp_path, reading):
    snaps = [snap(1, 10, 1, None), snap(2, 40, 2, 1.0), snap(3, 70, 3, 1.0), snap(4, 60, 4, 1.2)]
    if reading == "batch":
        cond = {"name": "auto-gt-binf-t8", "buffer_size": None, "tasks_per_step": 8, "table4_b": 8}
    else:
        cond = {"name": "auto-gt-b8", "buffer_size": 8, "tasks_per_step": 1, "table4_b": 8}
    cond |= {"regime": "auto", "source": "gt", "buffer_reading": reading, "group": "grid"}
    out = fake_study(tmp_path / reading, [cond], {cond["name"]: snaps})
    cov = analysis.coverage_table(out)
    assert cov.iloc[0]["buffer_size"] == 50.0 and cov.iloc[0]["average_over"] == "checkpoints"
    t4 = analysis.table4_beside_paper(out)
    cell = t4[(t4["metric"] == "Buffer Size") & (t4["|B|"] == 8) & (t4["regime"] == "auto")].iloc[0]
    assert cell["this run"] == 50.0 and cell["paper"] == 50.0 and cell["condition"] == cond["name"]
    assert t4[(t4["|B|"] == 1)]["this run"].isna().all()


def test_a_study_without_table4_b_reads_its_buffer_size_as_the_cap(tmp_path):
    cond = {"name": "auto-gt-b1", "regime": "auto", "source": "gt", "buffer_size": 1, "tasks_per_step": 1}
    out = fake_study(tmp_path / "old", [cond], {"auto-gt-b1": [snap(2, 1, 1, 1.0), snap(4, 1, 2, 1.0)]})
    t4 = analysis.table4_beside_paper(out)
    assert t4[(t4["metric"] == "Avg. Covered") & (t4["|B|"] == 1) & (t4["regime"] == "auto")].iloc[0][
        "this run"
    ] == pytest.approx(1.5)


# -- one study with every reading: batch |B|, passing-only decisions, Fig. 2, repeats, K.1 ----------------


class StudyModel:
    """The solver passes a task when the prompt carries a trajectory, or (without one) when the task is easy."""

    def __init__(self, pool, easy: set[str]) -> None:
        self.tasks, self.easy = pool, easy
        self.decisions = 0
        self.solves = 0
        self.seeds: set = set()

    def __call__(self, request: dict) -> str:
        text = last_user_text(request)
        if text == PREFLIGHT_PROMPT:
            return "OK"
        if text.startswith("# Task: write solve(grid)"):
            self.seeds.add(request.get("seed"))
            self.solves += 1
            shown = text.split("## Strategy memory")[0]
            task = next(t for t in self.tasks if render_grid(t.train[0].input) in shown)
            ok = EMPTY_HISTORY not in text or task.task_id in self.easy
            return f"```python\n{gt_code(task) if ok else WRONG}```\n"
        if text.startswith("# Memory management decision"):
            self.decisions += 1
            return RETAIN
        if text.startswith("# Strategy extraction"):
            return '```json\n[{"kind": "new", "from_functions": [1], "when_to_use": "w", "strategy": "s"}]\n```'
        raise AssertionError(f"unexpected prompt {text[:60]!r}")


FULL = {
    **BASE,
    "buffer_reading": "batch",
    "conditions": {"regime": ["auto", "force"], "source": ["gt"], "buffer_size": [1, 2]},
    "stream": {"decide_on": "passing", "solver_max_tokens": 2048, "manager_max_tokens": 512},
    "evaluation": {"sets": ["heldout"], "repeats": 2},
    "fig2": {"select": "no_memory_pass", "n_tasks": 3, "revisits": 2, "regime": ["force"]},
    "source_ablation": {"conditions": ["auto-gt-binf-t2"], "checkpoints": [1, 2]},
}


@pytest.fixture(scope="module")
def full_study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("readings")
    path = write_profile(tmp, FULL)
    prof = study_profile.load_study_profile(path)
    train = study_profile.pool_tasks(prof.train_pool, n_train=2, n_test=2)
    heldout = study_profile.pool_tasks(prof.heldout_pool, n_train=2, n_test=2)
    easy = {t.task_id for t in train[1::2]}  # every other pool task passes without memory
    model = StudyModel(train + heldout, easy)
    with LoopbackServer(responder=model) as srv:
        endpoint = Endpoint(base_url=srv.base_url, model="scripted", max_retries=1)
        result = study.run_study(path, tmp / "out", endpoint=endpoint, log=lambda *a: None)
        solves_first = model.solves
        study.run_study(path, tmp / "out", endpoint=endpoint, log=lambda *a: None)  # resume: all complete
    return {"result": result, "model": model, "train": train, "out": tmp / "out", "solves_first": solves_first}


def test_fig2_slice_is_the_first_tasks_the_no_memory_solver_passes(full_study):
    out, train = full_study["out"], full_study["train"]
    sel = json.loads((out / study_folder.FIG2_SLICE_FILE).read_text())
    assert sel["task_ids"] == [t.task_id for t in train[1::2][:3]] and sel["shortfall"] == 0
    assert sel["repeats"] == 2
    snaps = study_folder.condition_snapshots(out, "fig2-force-gt-binf")
    assert [s["solves"][0]["task_id"] for s in snaps] == sel["task_ids"] * 2  # the slice revisited twice
    df = full_study["result"].frame
    fig2 = df[df["eval_set"] == study_profile.FIG2_EVAL_SET]
    assert sorted(fig2["step"]) == [0, 3, 6] and set(fig2["n_tasks"]) == {3}
    assert float(fig2[fig2["step"] == 0]["accuracy"].iloc[0]) == 1.0  # 100 % without memory, by selection
    reg = analysis.regression_table(df)
    row = reg[reg["condition"] == "fig2-force-gt-binf"].iloc[0]
    assert row["no_memory"] == 100.0 and row["n_tasks"] == 3
    assert "fig2-force-gt-binf" not in set(analysis.coverage_table(out)["condition"])  # not a Table 4 stream


def test_a_resumed_study_reuses_the_slice_and_makes_no_call(full_study):
    assert full_study["model"].solves == full_study["solves_first"]


def test_fig2_shortfall_keeps_what_passed(make_clients, tasks):
    pool = [tasks["A1"], tasks["B1"], tasks["A2"]]

    def responder(request: dict) -> str:
        text = last_user_text(request)
        task = next(t for t in pool if render_grid(t.train[0].input) in text)
        return fenced(gt_code(task) if task is tasks["B1"] else WRONG)

    kept, sel = study_profile.select_slice(
        pool, make_clients(responder).llm, study_profile.Fig2Spec(n_tasks=2), {"repeats": 1, "workers": 1}
    )
    assert [t.task_id for t in kept] == [tasks["B1"].task_id] and sel.shortfall == 1 and sel.n_tried == 3


def test_the_study_records_the_readings(full_study):
    out, df = full_study["out"], full_study["result"].frame
    man = study_folder.load_manifest(out)
    assert man["buffer_reading"] == "batch" and man["eval_repeats"] == 2
    assert man["fig2"]["selection"]["task_ids"]
    grid = df[(df["regime"] != "none") & (df["eval_set"] == "heldout")]
    assert set(zip(grid["condition"], grid["table4_b"], grid["tasks_per_step"])) == {
        ("auto-gt-binf", 1, 1),
        ("auto-gt-binf-t2", 2, 2),
        ("force-gt-binf", 1, 1),
        ("force-gt-binf-t2", 2, 2),
    }
    assert grid["buffer_capacity"].isna().all()
    snaps = study_folder.condition_snapshots(out, "auto-gt-binf-t2")
    assert len(snaps[0]["solves"]) == 2 and len(buffer_ids(snaps[-1])) == 4  # uncapped: 2 tasks x 2 steps kept
    # every evaluation solves each held-out task twice (two seeds)
    assert full_study["model"].seeds == {0, 1}  # the client's seed 0, and repeat 1's seed 0 + 1
    t4 = analysis.coverage_table(out)
    assert t4.set_index("condition").loc["auto-gt-binf-t2", "buffer_size"] == pytest.approx((2 + 4) / 2)


def test_source_ablation_shows_the_three_arms(full_study):
    out, df = full_study["out"], full_study["result"].frame
    table = analysis.source_ablation_table(out, df)
    assert set(zip(table["step"], table["arm"])) == {
        (s, a) for s in (1, 2) for a in ("abstract_only", "episodic_only", "both")
    }
    by = table.set_index(["step", "arm"])["accuracy_pct"]
    # the model passes held-out tasks only with a trajectory in its prompt
    assert by[(2, "episodic_only")] == 100.0 and by[(2, "both")] == 100.0 and by[(2, "abstract_only")] == 0.0
    assert table[table["arm"] == "both"]["reused"].all()  # the study's own evaluation, not called again
    assert set(table["label"]) == {"Abstract Only", "Episodic Only", "Both (Auto)"}
    fig = figures.plot_source_ablation(table, title="t")
    assert fig.axes
    assert analysis.source_ablation_table(None).empty


def test_shipped_paper_profile_reads_the_paper():
    root = Path(__file__).resolve().parents[1]
    paper = study_profile.load_study_profile(root / "params" / "arc" / "paper.yaml")
    assert paper.buffer_reading == "batch" and paper.coverage_average == "checkpoints"
    # |B| fresh tasks per step, the buffer's budget apart from it: Table 4's 50 (kit's choice at |B| = 1)
    assert {(c.table4_b, c.tasks_per_step, c.buffer_size) for c in paper.conditions} == {(1, 1, 50), (8, 8, 50)}
    assert paper.train_pool.name == "fresh" and paper.train_pool.limit == 400 * 8
    assert paper.stream["decide_on"] == "passing" and paper.eval_repeats == 2
    assert paper.fig2 is not None and (paper.fig2.n_tasks, paper.fig2.revisits) == (19, 10)
    assert paper.fig2.select == "no_memory_pass" and paper.fig2.steps == 190
    assert paper.source_ablation["arms"] == ["abstract_only", "episodic_only", "both"]
    assert set(paper.eval_sources) == {"episodic", "abstract"}
    smoke = study_profile.load_study_profile(root / "params" / "arc" / "smoke.yaml")
    assert smoke.buffer_reading == "cap" and [c.name for c in smoke.conditions][0] == "force-gt-b8"


def test_fixture_still_loads_with_the_new_columns():
    out = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "arc" / "smoke"
    df = study_folder.load_study(out)
    assert (df["table4_b"].dropna() == df["buffer_capacity"].dropna()).all()
    t4 = analysis.table4_beside_paper(out)
    assert set(t4[t4["this run"].notna()]["|B|"]) <= {8}
    assert isinstance(analysis.source_ablation_table(out, df), pd.DataFrame)


def test_memory_broke_lists_tasks_solved_without_memory_and_worse_with_it(tmp_path):
    """App. D.5 (Figs. 14-15): a held-out task the solver gets 10/10 without memory and 2/10 with the final memory."""
    import json

    from antipersist_lib.arc import analysis as arc_analysis

    def rec(task, correct, code, repeat=0):
        return {
            "task_id": task,
            "family": "detect_inside_frame_relation",
            "skill": "mark_center",
            "passed": correct == 10,
            "n_correct": correct,
            "n_examples": 10,
            "status": "ok",
            "code": code,
            "repeat": repeat,
        }

    def write(name, lines):
        folder = tmp_path / "conditions" / name
        folder.mkdir(parents=True)
        (folder / "evals.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    write(
        "no_memory",
        [{"step": 0, "eval_set": "heldout", "records": [rec("t1", 10, "def solve(g): good"), rec("t2", 4, "x")]}],
    )
    write(
        "auto-gt-b8",
        [
            {"step": 0, "eval_set": "heldout", "records": [rec("t1", 10, "early"), rec("t2", 4, "y")]},
            {"step": 4, "eval_set": "heldout", "records": [rec("t1", 2, "def solve(g): bad"), rec("t2", 6, "z")]},
            {"step": 4, "eval_set": "heldout", "records": [rec("t1", 4, "again", repeat=1), rec("t2", 6, "z", 1)]},
            {"step": 4, "eval_set": "train", "records": [rec("t9", 0, "train set")]},
        ],
    )
    write("force-gt-b8", [{"step": 4, "eval_set": "heldout", "records": [rec("t2", 1, "w")]}])
    table = arc_analysis.memory_broke(tmp_path)
    assert list(zip(table["condition"], table["task_id"])) == [("auto-gt-b8", "t1"), ("force-gt-b8", "t2")]
    first = table.iloc[0]
    assert (first["step"], first["correct_without"], first["correct_with"], first["drop"]) == (4, 10, 3, 7)
    assert first["code_without"] == "def solve(g): good" and first["code_with"] == "def solve(g): bad"
    assert arc_analysis.memory_broke(tmp_path, eval_set="train").empty and arc_analysis.memory_broke(None).empty
