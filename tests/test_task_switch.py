"""The task-switch sequence (faulty-memories §6.2, Figs. 10 and 18): Fresh vs Cumulative banks, the
entry judge, and the running totals. A counting builder and a scripted judge (no model result here)."""

from __future__ import annotations

import json
import math
import re

import pytest
from errand_pool import errand_pool_run

from antipersist_lib.consolidation import prompts as CP
from antipersist_lib.consolidation.bank import MemoryBank, MemoryEntry, load_bank
from antipersist_lib.consolidation.pool import PoolRecord
from antipersist_lib.consolidation.task_switch import (
    JUDGE_FILE,
    check_sequence,
    final_gap,
    judge_bank,
    judged,
    switch_banks,
    switch_table,
    task_folder,
)
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ScriptedResponder


def rec(rid: str, kind: str) -> PoolRecord:
    task = Task(0, "scienceworld", kind, f"Do {kind}.", "train", {})
    steps = (Step("look around", "You see a room.", 0.0, True),)
    return PoolRecord(rid, task, Trajectory("start", steps), EpisodeOutcome(True, 100.0, 1, 0))


POOL = [rec(f"{k}{i}", k) for k in ("boil", "melt", "freeze") for i in range(3)]


class Counting:
    """One entry per record, citing it; counts the batches it saw."""

    name = "counting"
    batches: list[list[str]] = []

    def update(self, bank: MemoryBank, batch) -> MemoryBank:
        Counting.batches.append([r.rid for r in batch])
        out = bank.copy()
        out.step += 1
        for r in batch:
            out.entries.append(MemoryEntry(out.new_id("c"), f"lesson from {r.rid}", kind="rule", sources=[r.rid]))
        out.history.append({"step": out.step})
        return out


def test_fresh_holds_one_task_cumulative_all_tasks_so_far_and_finished_tasks_are_kept(tmp_path):
    Counting.batches = []
    seq = ["melt", "boil", "freeze"]
    fresh = switch_banks(POOL, seq, Counting, "fresh", tmp_path, batch_size=2)
    cumulative = switch_banks(POOL, seq, Counting, "cumulative", tmp_path, batch_size=2)
    assert [b.task_type for b in fresh] == seq and [b.index for b in cumulative] == [1, 2, 3]
    for i, b in enumerate(fresh):
        assert {s for e in load_bank(b.path).entries for s in e.sources} == {f"{seq[i]}{j}" for j in range(3)}
    for i, b in enumerate(cumulative):
        want = {f"{k}{j}" for k in seq[: i + 1] for j in range(3)}
        assert {s for e in load_bank(b.path).entries for s in e.sources} == want
    assert [b.entries for b in fresh] == [3, 3, 3] and [b.entries for b in cumulative] == [3, 6, 9]
    assert len(Counting.batches) == 12  # 3 records per task in batches of 2: 2 updates x 3 tasks x 2 setups
    first_task = Counting.batches[0] + Counting.batches[1]  # Fresh's first task: its 3 records, in 2 batches
    assert sorted(first_task) == ["melt0", "melt1", "melt2"] and {
        len(Counting.batches[0]),
        len(Counting.batches[1]),
    } == {1, 2}
    # a re-run rebuilds nothing; an unfinished task (no bank.json) is rebuilt from the previous bank
    (cumulative[2].path).unlink()
    again = switch_banks(POOL, seq, Counting, "cumulative", tmp_path, batch_size=2)
    assert [b.entries for b in again] == [3, 6, 9] and len(Counting.batches) == 14
    assert task_folder(tmp_path, "cumulative", 3, "freeze") == again[2].path.parent


def test_bad_sequences_and_setups_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match=r"no records of task type\(s\) \['grow'\]"):
        check_sequence(POOL, ["boil", "grow"])
    with pytest.raises(ValueError, match="repeats"):
        check_sequence(POOL, ["boil", "boil"])
    with pytest.raises(ValueError, match="non-empty list"):
        check_sequence(POOL, "boil")
    with pytest.raises(ValueError, match="setup must be one of"):
        switch_banks(POOL, ["boil"], Counting, "joint", tmp_path)


def test_records_per_task_takes_each_tasks_first_records(tmp_path):
    """``records_per_task``: a count for every task, or one per task (the paper: Table 9's rollout cases per
    task); a task the mapping does not name, or with fewer records, keeps what it has."""
    Counting.batches = []
    seq = ["melt", "boil", "freeze"]
    capped = switch_banks(POOL, seq, Counting, "fresh", tmp_path / "int", batch_size=4, records_per_task=2)
    assert [b.records for b in capped] == [b.entries for b in capped] == [2, 2, 2]
    assert {s for e in load_bank(capped[0].path).entries for s in e.sources} == {"melt0", "melt1"}
    mixed = switch_banks(
        POOL, seq, Counting, "cumulative", tmp_path / "map", batch_size=4, records_per_task={"melt": 1, "boil": 9}
    )
    assert [b.records for b in mixed] == [1, 3, 3] and [b.entries for b in mixed] == [1, 4, 7]


def test_the_task_switch_paper_profile_takes_table_9s_rollouts_per_task():
    from pathlib import Path

    from antipersist_lib.consolidation.profile import load_study_profile

    root = Path(__file__).resolve().parents[1] / "params" / "consolidation"
    paper = load_study_profile(root / "task_switch_paper.yaml")
    counts = paper.task_switch.records_per_task
    assert isinstance(counts, dict) and set(counts) == set(paper.task_switch.sequence)
    assert sum(counts.values()) == 485 and (counts["identify-life-stages-1"], counts["grow-fruit"]) == (12, 40)
    assert paper.pool.per_type >= max(counts.values())  # the pool holds up to the largest count per task
    smoke = load_study_profile(root / "task_switch_smoke.yaml")
    assert smoke.task_switch.records_per_task is None  # the recorded fixture's setting: all of the pool


def by_system(req):
    return req["messages"][0]["content"] == CP.SWITCH_JUDGE_SYSTEM


def test_judge_labels_every_entry_with_its_source_types_and_keeps_the_verdicts(make_clients, tmp_path):
    def reply(req):
        text = req["messages"][1]["content"]
        if "ALWAYS" in text:
            return json.dumps({"label": "Over-Generalized", "reason": "drops the condition"})
        if "EMPTYISH" in text:
            return "I am not sure what to say."
        return '{"label": "normal"}'

    c = make_clients(ScriptedResponder([(by_system, reply)]))
    bank = MemoryBank(
        "clin",
        entries=[
            MemoryEntry("m1", "ALWAYS heat first", sources=["boil0", "melt1"]),
            MemoryEntry("m2", "use the stove for boiling", sources=["boil1"]),
            MemoryEntry("m3", "EMPTYISH", sources=["unknown-rid"]),
        ],
    )
    types = {r.rid: r.task_type for r in POOL}
    rows = judge_bank(bank, c.llm, types)
    assert [r["label"] for r in rows] == ["over-generalized", "normal", "unparsed"]
    assert rows[2]["error"] and rows[0]["reason"] == "drops the condition"
    prompts = [r["body"]["messages"][1]["content"] for r in c.server.requests_for(ROUTE_CHAT)]
    assert "task types:\nboil, melt\n" in prompts[0] and "(not recorded)" in prompts[2]
    # judged() keeps the verdicts beside the bank and re-reads them
    Counting.batches = []
    (b,) = switch_banks(POOL, ["boil"], Counting, "fresh", tmp_path, batch_size=3)
    first = judged(b, c.llm, types)
    assert (b.path.parent / JUDGE_FILE).exists() and len(first) == 3
    n = len(c.server.requests_for(ROUTE_CHAT))
    assert judged(b, c.llm, types) == first and len(c.server.requests_for(ROUTE_CHAT)) == n


def test_running_totals_and_the_final_gap():
    rows = []
    for setup, scores, flagged in (
        ("fresh", [(60, 80), (50, 50), (90, 70)], [0, 1, 0]),
        ("cumulative", [(40, 40), (20, 30), (10, 20)], [1, 3, 4]),
    ):
        for i, (a, b) in enumerate(scores, start=1):
            labels = ["over-generalized"] * flagged[i - 1] + ["normal", "garbage"]
            for seed, score in enumerate((a, b)):
                rows.append(
                    {"setup": setup, "index": i, "task_type": f"t{i}", "seed": seed, "score": score, "labels": labels}
                )
    table = switch_table(rows)
    fresh = table[table.setup == "fresh"]
    assert list(fresh["score"]) == [70.0, 50.0, 80.0] and list(fresh["score_total"]) == [70.0, 120.0, 200.0]
    assert list(fresh["over-generalized_total"]) == [0.0, 1.0, 1.0] and list(fresh["garbage_total"]) == [1.0, 2.0, 3.0]
    cum = table[table.setup == "cumulative"]
    assert list(cum["score_total"]) == [40.0, 65.0, 80.0] and list(cum["over-generalized_total"]) == [1, 4, 8]
    gap = final_gap(table)
    assert gap["score_gap"] == 120.0 and gap["over-generalized_ratio"] == 8.0 and gap["garbage_ratio"] == 1.0
    # without judge labels the counts are empty, not zero
    bare = switch_table([{"setup": "fresh", "index": 1, "task_type": "t1", "score": 5}])
    assert bare["garbage"].isna().all() and math.isnan(bare["garbage_total"].iloc[0])
    assert final_gap(bare)["score_gap"] is None
    with pytest.raises(ValueError, match="unknown setup"):
        switch_table([{"setup": "joint", "index": 1, "task_type": "t", "score": 1}])


def test_a_study_runs_the_task_switch_and_resumes(tmp_path):
    """``task_switch`` in a consolidation study profile, end to end on ErrandWorld (the kit's test world) with a
    scripted model: per setup and task one bank, one judged verdict per entry, one run per seed restricted to
    the task's type; a re-run makes no new call."""
    import yaml

    from antipersist_lib.consolidation import study, study_folder
    from antipersist_lib.serving.llm import Endpoint
    from antipersist_lib.testing.loopback_server import LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    def responder(req):
        system = req["messages"][0]["content"]
        if system == CP.DC_SYSTEM:  # one cheatsheet naming the batch's first task
            task = re.search(r"Task: (.*)", req["messages"][1]["content"]).group(1)
            return f"<cheatsheet>remember: {task}</cheatsheet>"
        if system == CP.SWITCH_JUDGE_SYSTEM:
            return '{"label": "garbage"}' if "bring the" in req["messages"][1]["content"] else '{"label": "normal"}'
        return errand_policy(req)

    with LoopbackServer(responder=responder) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", max_retries=0)
        pool_dir = errand_pool_run(tmp_path / "poolrun", ep, train=6)
        profile = {
            "name": "switch",
            "benchmark": "errandworld",
            "backbone": "scripted-loopback",
            "pool": {"runs": [str(pool_dir)]},
            "builders": ["dc"],
            "builder_options": {"dc": {"max_tokens": 64}},
            "task_switch": {"builder": "dc", "sequence": ["bring_fruit", "bring_item"], "batch_size": 2},
            "evaluation": {"seeds": [1, 2], "heldout_limit": 1, "max_steps": 4, "no_memory": False},
            "response_cache": False,
        }
        path = tmp_path / "switch.yaml"
        path.write_text(yaml.safe_dump(profile))
        result = study.run_study(path, tmp_path / "out", endpoint=ep, embed_endpoint=ep)
        rows = study_folder.load_task_switch(result.out)
        n_requests = len(srv.requests_for(ROUTE_CHAT))
        study.run_study(path, tmp_path / "out", endpoint=ep, embed_endpoint=ep)  # resumes: nothing to redo
        assert len(srv.requests_for(ROUTE_CHAT)) == n_requests
    assert [(r["setup"], r["index"], r["task_type"], r["seed"]) for r in rows] == [
        (setup, i, t, seed)
        for setup in ("fresh", "cumulative")
        for i, t in ((1, "bring_fruit"), (2, "bring_item"))
        for seed in (1, 2)
    ]
    assert all(r["heldout_n"] == 1 for r in rows)
    for r in rows:  # each run evaluated only its own task type
        manifest = json.loads((result.out / r["run_dir"] / "manifest.json").read_text())
        assert manifest["task_types"] == [r["task_type"]]
        assert manifest["method"] == "consolidated_memory"
    cum2 = next(r for r in rows if r["setup"] == "cumulative" and r["index"] == 2)
    fresh2 = next(r for r in rows if r["setup"] == "fresh" and r["index"] == 2)
    assert cum2["labels"] and fresh2["labels"] and cum2["entries"] == len(cum2["labels"])
    assert result.manifest["task_switch"] == {"rows": 8, "file": study_folder.SWITCH_RESULTS}
    table = switch_table(rows)
    assert list(table["setup"]) == ["cumulative", "cumulative", "fresh", "fresh"]
    assert table["score_total"].notna().all()
    with pytest.raises(study.StudyProfileError, match="task_switch.builder"):
        bad = dict(profile, task_switch={"builder": "awm"})
        path.write_text(yaml.safe_dump(bad))
        study.run_study(path, tmp_path / "bad", endpoint=ep, embed_endpoint=ep)


def test_the_figure_draws_both_setups_and_both_flagged_totals():
    from antipersist_lib.analysis.plots import plt, text_overlaps
    from antipersist_lib.consolidation.figures import plot_task_switch

    rows = [
        {"setup": s, "index": i, "task_type": f"t{i}", "score": 10 * i, "labels": ["garbage"] * i}
        for s in ("fresh", "cumulative")
        for i in (1, 2, 3)
    ]
    fig = plot_task_switch(switch_table(rows), title="task switch", note="scripted", statement="paper: +203")
    left, right = fig.axes[:2]
    assert [line.get_label() for line in left.get_lines()] == ["fresh", "cumulative"]
    assert list(left.get_lines()[0].get_ydata()) == [10.0, 30.0, 60.0]
    labels = [line.get_label() for line in right.get_lines()]
    assert labels == [f"{s}: {f}" for s in ("fresh", "cumulative") for f in ("over-generalized", "garbage")]
    assert list(right.get_lines()[1].get_ydata()) == [1.0, 3.0, 6.0]
    assert not text_overlaps(fig)
    plt.close(fig)
    bare = plot_task_switch(switch_table([{"setup": "fresh", "index": 1, "task_type": "t", "score": 1}]), title="x")
    assert "no judge labels" in [t.get_text() for t in bare.axes[1].texts]
    plt.close(bare)


def test_the_recorded_fixture_is_the_smoke_profile_and_loads():
    """tests/fixtures/consolidation/task_switch_smoke (notebook 11) was made from the profile as committed, by the
    model it names, and holds one row per setup, task and seed."""
    from pathlib import Path

    import yaml

    from antipersist_lib.consolidation import study_folder

    root = Path(__file__).resolve().parents[1]
    folder = root / "tests" / "fixtures" / "consolidation" / "task_switch_smoke"
    manifest = study_folder.load_manifest(folder)
    profile = yaml.safe_load((root / "params" / "consolidation" / "task_switch_smoke.yaml").read_text())
    assert manifest["status"] == "complete" and manifest["profile"] == profile
    assert manifest["embedded_backbone"]["model"]["name"] == profile["backbone_options"]["model"]
    assert len(manifest["embedded_backbone"]["model"]["sha256"]) == 64  # the model file's hash is recorded
    rows = study_folder.load_task_switch(folder)
    assert {(r["setup"], r["index"], r["task_type"]) for r in rows} == {
        (s, i, t) for s in ("fresh", "cumulative") for i, t in ((1, "boil"), (2, "melt"))
    }
    assert all(r["labels"] is None or len(r["labels"]) == r["entries"] for r in rows)
    table = switch_table(rows)
    assert len(table) == 4 and table["score_total"].notna().all()
