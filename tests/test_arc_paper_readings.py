"""ARC-AGI Stream readings of issue 43 (item 6): the paper profile reads the appendix, not the kit's conveniences.

- §4's two evaluation repeats are two samples: ``evaluation.temperature`` and a seed per repeat, cached apart;
- App. B.2 / B.7: the Tool Buffer inlines the helper bodies (``stream.tool_bodies``);
- App. B.4 / B.6: the extraction prompt does not coach the grouping (``stream.extraction_coaching``);
- Table 4: an average over six memories gives the paper's sixths (``table4_memories``);
- the probes read |B| as the study does (``buffer_reading``);
- Fig. 7(a): a per-entry misclassification count beside the one with ancestry.

Every model is a scripted loopback responder (or ``tests/arc_scripted.py``); each test fails on the old behaviour.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from arc_scripted import run_scripted_probes

from antipersist_lib import studies
from antipersist_lib.arc import analysis, probe_profile, study_profile
from antipersist_lib.arc.controller import StreamConfig, evaluate, gt_code, load_snapshots, run_stream
from antipersist_lib.arc.lineage import misclassifications
from antipersist_lib.arc.prompts import (
    EXTRACTION_FLAT_GROUPING,
    EXTRACTION_GROUPING,
    extraction_messages,
    tool_signatures,
)
from antipersist_lib.arc.prompts import PROMPTS as ARC_PROMPTS
from antipersist_lib.arc.stores import AbstractStore, EpisodicBuffer, Memory
from antipersist_lib.arc.tools import TOOL_SOURCE
from antipersist_lib.core.prompts import prompt_hashes
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import LLMClient
from antipersist_lib.serving.response_cache import ResponseCache
from antipersist_lib.testing.loopback_server import last_user_text
from tests.test_arc_controller import FAM_A, FAM_B, MERGE_INTO_FIRST, Model, fenced, small_task

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "params" / "arc" / "paper.yaml"
PROBES_PAPER = ROOT / "params" / "arc" / "probes_paper.yaml"

BASE = {
    "name": "paper-readings",
    "backbone": "embedded",
    "backbone_options": {"n_ctx": 32768},  # room for the study's prompt-size check
    "train_pool": {"name": "train19", "seed": 0},
    "heldout_pool": {"name": "heldout50", "seed": 0, "limit": 2},
    "task_examples": {"n_train": 2, "n_test": 2},
    "steps": 2,
    "conditions": {"regime": ["auto"], "source": ["gt"], "buffer_size": [8]},
}


def write_yaml(tmp_path: Path, data: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tasks():
    return {
        "A1": small_task(FAM_A, "recolor", 1),
        "B1": small_task(FAM_B, "keep", 2),
        "A2": small_task(FAM_A, "hollow", 3),
    }


def empty_memory() -> Memory:
    return Memory(EpisodicBuffer(8), AbstractStore())


# -- §4: two repeats are two samples -----------------------------------------------------------------------


def test_evaluation_repeats_are_two_sampled_requests_cached_apart(make_clients, tasks, tmp_path):
    profile = study_profile.load_study_profile(
        write_yaml(tmp_path, {**BASE, "evaluation": {"repeats": 2, "temperature": 0.7}})
    )
    sent = []

    def responder(request: dict) -> str:
        sent.append((request.get("seed"), request.get("temperature")))
        return fenced(gt_code(tasks["A1"]))

    clients = make_clients(responder)
    cache = ResponseCache(tmp_path / "cache")
    llm = LLMClient(clients.endpoint, ledger=Ledger(), cache=cache, seed=0)
    kwargs = profile.eval_kwargs()
    first = evaluate([tasks["A1"]], llm, empty_memory(), **kwargs)

    assert sorted(sent) == [(0, 0.7), (1, 0.7)]  # a sampled request per repeat, each with its own seed
    entries = [p for p in (tmp_path / "cache").rglob("*.json") if len(p.stem) == 64]
    assert len(entries) == 2  # two cache entries, not one answer counted twice
    again = evaluate([tasks["A1"]], llm, empty_memory(), **kwargs)
    assert len(sent) == 2 and again.accuracy == first.accuracy == 1.0  # the replay comes from the cache

    with pytest.raises(studies.StudyProfileError, match="evaluation.temperature"):
        study_profile.load_study_profile(write_yaml(tmp_path, {**BASE, "evaluation": {"temperature": -1}}, "bad.yaml"))


def test_without_the_key_evaluation_keeps_the_stream_temperature(tmp_path):
    profile = study_profile.load_study_profile(write_yaml(tmp_path, {**BASE, "stream": {"temperature": 0.3}}))
    assert profile.eval_temperature is None and profile.eval_kwargs()["temperature"] == 0.3


# -- the paper profiles ---------------------------------------------------------------------------------


def body_only_line() -> str:
    """A line of the helpers' source that their signatures do not show."""
    shown = set(tool_signatures().splitlines())
    return next(line for line in TOOL_SOURCE.splitlines() if line.strip().startswith("return ") and line not in shown)


def test_paper_profile_samples_inlines_helper_bodies_and_does_not_coach(make_clients, tasks):
    paper = study_profile.load_study_profile(PAPER)
    kwargs = paper.eval_kwargs()
    assert kwargs["temperature"] > 0 and kwargs["repeats"] == 2
    assert paper.table4_memories == 6
    cfg = paper.stream_config(paper.conditions[0])
    assert cfg.tool_bodies is True and cfg.extraction_coaching is False

    prompts: list[str] = []

    def responder(request: dict) -> str:
        prompts.append(last_user_text(request))
        return fenced(gt_code(tasks["A1"]))

    evaluate([tasks["A1"]], make_clients(responder).llm, empty_memory(), **{**kwargs, "repeats": 1, "workers": 1})
    assert body_only_line() in prompts[0]  # B.2: the bodies are inlined into the Tool Buffer

    probe = probe_profile.load_probe_profile(PROBES_PAPER)
    probe_cfg = probe.stream_config(probe.streams[0])
    assert probe_cfg.tool_bodies is True and probe_cfg.extraction_coaching is False


# -- App. B.4 / B.6: no coaching against misgrouping ------------------------------------------------------


def test_extraction_prompt_coaches_only_when_the_profile_asks(make_clients, tasks, tmp_path):
    for schema, sentence in (("structured", EXTRACTION_GROUPING), ("flat", EXTRACTION_FLAT_GROUPING)):
        coached = extraction_messages([], [], schema=schema)[1]["content"]
        plain = extraction_messages([], [], schema=schema, coaching=False)[1]["content"]
        assert sentence.strip() in coached and sentence.strip() not in plain
        assert plain == coached.replace(sentence, "")  # nothing else changes
    assert {"arc_extraction_grouping", "arc_extraction_flat_grouping"} <= set(prompt_hashes(ARC_PROMPTS))

    stream = [tasks["A1"], tasks["B1"]]
    model = Model(stream, extract=lambda n, p: "[]")
    run_stream(stream, make_clients(model).llm, StreamConfig(regime="force", extraction_coaching=False), tmp_path)
    assert model.prompts["extract"] and not any(EXTRACTION_GROUPING.strip() in p for p in model.prompts["extract"])


# -- Table 4: six memories give sixths --------------------------------------------------------------------


def snapshot(step: int, covered: int, buffer: int) -> dict:
    return {"step": step, "coverage": {"covered": covered, "fused": 1.0 if covered else None, "buffer_size": buffer}}


def test_table4_over_six_memories_gives_the_papers_sixths():
    covered = [0, 1, 2, 2, 2, 2, 3, 3, 2, 3, 3, 3]  # steps 1..12; the six memories 2, 4, ..., 12 hold 1+2+2+3+3+3
    buffer = [1, 3, 3, 2, 4, 4, 5, 1, 6, 3, 2, 2]  # at those steps 3+2+4+1+3+2 = 15
    snaps = [snapshot(i + 1, c, b) for i, (c, b) in enumerate(zip(covered, buffer))]
    assert analysis.table4_memory_steps(12, 6) == [2, 4, 6, 8, 10, 12]
    six = analysis.table4_averages(snaps, memories=6)
    assert six["n_steps"] == 6
    assert six["covered"] == pytest.approx(14 / 6) and round(six["covered"], 2) == 2.33
    assert six["buffer_size"] == pytest.approx(15 / 6) and round(six["buffer_size"], 2) == 2.5
    # the checkpoint average (every 3 steps: four memories) gives quarters, not the paper's sixths
    at = analysis.table4_averages(snaps, average_over="checkpoints", checkpoints=[0, 3, 6, 9, 12])
    assert (4 * at["covered"]).is_integer() and not (6 * at["covered"]).is_integer()
    assert analysis.table4_memory_steps(400, 6) == [67, 133, 200, 267, 333, 400]


# -- the probes read |B| as the study does ----------------------------------------------------------------


def test_probe_steps_stay_inside_a_cycle_under_the_batch_reading():
    spec = probe_profile.ProbeStream("mixed", "misgroup", "force", ((FAM_A, FAM_B),), 2, (FAM_A, FAM_B))
    subsets = {FAM_A: [small_task(FAM_A, "recolor", 1)] * 2, FAM_B: [small_task(FAM_B, "keep", 2)] * 2}
    batches, points = probe_profile.step_schedule(spec, subsets, per_step=3)
    assert [len(b) for b in batches] == [3, 1, 3, 1]  # a cycle of 4 tasks: one step of 3, one of 1
    assert [p.step for p in points] == [0, 2, 4] and [p.cycle for p in points] == [0, 1, 2]


def test_probes_with_batch_reading_stream_fresh_tasks_into_an_uncapped_buffer(tmp_path):
    data = yaml.safe_load((ROOT / "params" / "arc" / "probes_smoke.yaml").read_text(encoding="utf-8"))
    for key in ("overwrite", "misgroup"):
        data.pop(key)
    data.update({"regime": ["auto"], "subset_size": 2, "buffer_size": 2, "buffer_reading": "batch", "no_memory": False})
    data["overfit"]["cycles"] = 2
    profile = probe_profile.load_probe_profile(write_yaml(tmp_path, data, "probe.yaml"))
    assert profile.capacity is None and profile.tasks_per_step == 2
    result = run_scripted_probes(profile.path, tmp_path / "out", log=lambda *a: None)
    rows = result.frame[result.frame["eval_kind"] == "repeat"].sort_values("step")
    assert list(rows["step"]) == [0, 1, 2]  # 2 tasks per step, one step per cycle
    assert list(rows["buffer_size"]) == [0, 2, 4]  # |B| = 2 fresh tasks per step; the buffer keeps all 4
    assert result.manifest["buffer_reading"] == "batch"
    folder = tmp_path / "out" / "streams" / profile.streams[0].name
    snaps = load_snapshots(folder)
    assert [len(s["solves"]) for s in snaps] == [2, 2]

    with pytest.raises(Exception, match="buffer_reading"):
        probe_profile.load_probe_profile(write_yaml(tmp_path, {**data, "buffer_reading": "size"}, "bad.yaml"))


def test_paper_probe_profile_reads_b_as_the_study():
    probe = probe_profile.load_probe_profile(PROBES_PAPER)
    paper = study_profile.load_study_profile(PAPER)
    assert probe.buffer_reading == paper.buffer_reading == "batch"
    cfg = probe.stream_config(probe.streams[0])
    assert (cfg.buffer_size, cfg.tasks_per_step) == (None, 8)


# -- Fig. 7(a): misclassification with and without ancestry ---------------------------------------------


def test_per_entry_misclassification_does_not_count_an_inherited_mix_again(make_clients, tasks, tmp_path):
    stream = [tasks["A1"], tasks["B1"], tasks["A2"]]  # S1 <- A1; S2 <- S1 + B1 (mixes); S3 <- S2 + A2 (inherits)
    model = Model(stream, extract=lambda n, p: MERGE_INTO_FIRST)
    run_stream(stream, make_clients(model).llm, StreamConfig(regime="force"), tmp_path)
    report = misclassifications(load_snapshots(tmp_path))
    assert report.count == 2 and report.per_step == {1: 0, 2: 1, 3: 1}  # ancestry: S3 carries S2's mix
    assert report.count_entry == 1 and report.per_step_entry == {1: 0, 2: 1, 3: 0}
    assert [a.misclassified_entry for a in report.actions] == [False, True, False]
