"""The Appendix C walkthrough replays a recorded run (real ALFWorld engine, recorded embedded-model
answers from the run's response cache, no model contacted) and proves the guidance was discarded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from antipersist_lib.analysis import walkthrough
from antipersist_lib.errors import LLMUnavailableError

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests/fixtures/runs/walkthrough/alfworld/embedded-gemma-3-270m/anti_persistence/seed42"
CACHE = ROOT / "tests/fixtures/cache/walkthrough"


@pytest.fixture(autouse=True)
def _data(alfworld_data, monkeypatch):
    monkeypatch.setenv("ALFWORLD_DATA", str(alfworld_data))


def test_training_task_replays_the_recorded_decision_update_and_discard(tmp_path):
    w = walkthrough.walk_with("load", RUN, cache_dir=CACHE, work_dir=tmp_path / "work", phase="train")
    assert w.reproduces_recorded_decision
    assert w.outcome == w.recorded_outcome
    assert w.decision["branch"] == "local_ucb"  # the fixture run was sized so the walkthrough shows UCB scores
    scores = [r["score"] for r in w.per_mode() if r["score"] is not None]
    chosen = [r for r in w.per_mode() if r["chosen"]][0]
    assert chosen["score"] == max(scores)
    # the update: exactly one raw trajectory into M_k, identical to what the run wrote there
    assert len(w.discard.appended["trajectories.jsonl"]) == 1 and w.discard.appended_matches_run
    assert w.discard.discarded and not w.discard.files_containing_guidance
    assert w.synthesis_calls == 1 and w.guidance.strip() and w.discard.files_searched > 0


def test_heldout_task_changes_nothing(tmp_path):
    w = walkthrough.walk_with("load", RUN, cache_dir=CACHE, work_dir=tmp_path / "work", phase="heldout")
    assert w.reproduces_recorded_decision and w.discard.state_unchanged and w.discard.discarded
    assert w.discard.appended == {"trajectories.jsonl": [], "outcome_log.jsonl": []}


def test_guidance_found_in_a_file_is_reported(tmp_path):
    w = walkthrough.walk_with("load", RUN, cache_dir=CACHE, work_dir=tmp_path / "work", phase="train")
    assert w.synthesis_calls == 1 and w.guidance.strip()
    (tmp_path / "work" / "leak.txt").write_text("stored: " + w.guidance)
    n, hits = walkthrough._files_containing(w.guidance, [tmp_path / "work"])
    assert hits == [str(tmp_path / "work" / "leak.txt")]


def test_a_request_missing_from_the_cache_is_named(tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(CACHE, cache)
    for f in sorted(cache.rglob("*.json")):  # drop the chat answers, keep the embeddings
        if f.relative_to(cache).parts[0].startswith("gemma"):
            f.unlink()
    with pytest.raises(LLMUnavailableError, match="not in the response cache"):
        walkthrough.walk_with("load", RUN, cache_dir=cache, work_dir=tmp_path / "work", phase="train")


def test_wrong_inputs_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no response cache for model"):
        walkthrough.walk_with("load", RUN, cache_dir=tmp_path, work_dir=tmp_path / "w")
    with pytest.raises(ValueError, match="mode must be"):
        walkthrough.walk_with("paper", RUN, cache_dir=CACHE, work_dir=tmp_path / "w")
    with pytest.raises(ValueError, match="no train episode at position 99"):
        walkthrough.choose_episode(RUN, 99)
    other = tmp_path / "react"
    other.mkdir()
    man = json.loads((RUN / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**man, "method": "react"}))
    with pytest.raises(ValueError, match="needs an anti_persistence run"):
        walkthrough.walk(other, llm=None, embedder=None, work_dir=tmp_path / "w")


def _nudge_embeddings(value):
    """Every float inside an "embedding" list moved by one ulp of float32, the precision the
    similarity products use (a float64 ulp would vanish when the rows are stored as float32)."""
    import numpy as np

    up = np.float32(np.inf)
    if isinstance(value, dict):
        return {
            k: (
                [float(np.nextafter(np.float32(x), up)) for x in v]
                if k == "embedding" and isinstance(v, list) and v
                else _nudge_embeddings(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_nudge_embeddings(v) for v in value]
    return value


def test_a_run_recorded_on_another_cpu_still_replays(tmp_path):
    """Stored embeddings one ulp off (state files and cached embeddings): the recomputed cosines
    differ in the last bits, yet the decision, the update and the discard proof are reproduced."""
    run, cache = tmp_path / "run", tmp_path / "cache"
    shutil.copytree(RUN, run)
    shutil.copytree(CACHE, cache)
    touched = 0
    for name in ("outcome_log.jsonl", "trajectories.jsonl"):
        path = run / "state" / name
        lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        path.write_text("".join(json.dumps(_nudge_embeddings(x)) + "\n" for x in lines))
        touched += len(lines)
    for f in sorted(cache.rglob("*.json")):
        data = json.loads(f.read_text())
        if "embedding" in data:
            f.write_text(json.dumps(_nudge_embeddings(data)))
            touched += 1
    assert touched > 3
    w = walkthrough.walk_with("load", run, cache_dir=cache, work_dir=tmp_path / "work", phase="train")
    assert w.decision != w.recorded_decision  # exact equality fails: the floats really moved
    assert w.decision_differences() == [] and w.reproduces_recorded_decision
    assert w.discard.appended_matches_run and w.discard.discarded
    h = walkthrough.walk_with("load", run, cache_dir=cache, work_dir=tmp_path / "work2", phase="heldout")
    assert h.reproduces_recorded_decision and h.discard.state_unchanged


def test_a_different_decision_is_named(tmp_path):
    w = walkthrough.walk_with("load", RUN, cache_dir=CACHE, work_dir=tmp_path / "work", phase="heldout")
    w.recorded_decision = {**w.recorded_decision, "mode": "imitation" if w.decision["mode"] != "imitation" else "none"}
    assert not w.reproduces_recorded_decision
    assert any(d.startswith("mode:") for d in w.decision_differences())


def test_the_report_section_shows_decision_estimates_guidance_and_discard(tmp_path):
    """What `make run` writes as walkthrough.md: the decision and its per-mode numbers, the guidance
    (from the replay only), the execution, and the proof of discard."""
    w = walkthrough.walk_with("load", RUN, cache_dir=CACHE, work_dir=tmp_path / "work", phase="train")
    text = walkthrough.markdown_report(w)
    chosen = next(r for r in w.per_mode() if r["chosen"])
    assert f"mode `{w.decision['mode']}` by branch `local_ucb`" in text and "recorded decision is reproduced" in text
    assert f"| {chosen['mode']} | {chosen['count']} | {chosen['estimate']:.3f} |" in text
    assert w.guidance.strip()[:200] in text and f"{len(w.neighbours)} outcome-log entr" in text
    assert f"occurs in 0 of {w.discard.files_searched} files" in text and "state files changed" in text  # training
    held = walkthrough.walk_with("load", RUN, cache_dir=CACHE, work_dir=tmp_path / "w2", phase="heldout")
    assert "byte-identical before and after" in walkthrough.markdown_report(held)


def test_the_main_job_writes_the_walkthrough_beside_its_tables_or_says_why_not(tmp_path, capsys):
    """`make run`'s step (commands.main_walkthrough): the profile's walkthrough benchmark names the run; the
    report is replayed from the main job's cache folder; without that cache the tables stand and the
    reason is printed."""
    from antipersist_lib.commands import main_walkthrough

    summary = {
        "walkthrough": "alfworld",
        "rows": [{"method": "anti_persistence", "benchmark": "alfworld", "run_dir": str(RUN)}],
    }
    main_walkthrough(summary, tmp_path)  # no cache under tmp_path yet
    assert "walkthrough: not written" in capsys.readouterr().out and not (tmp_path / "walkthrough.md").exists()
    shutil.copytree(CACHE, tmp_path / "cache")
    main_walkthrough(summary, tmp_path)
    out = capsys.readouterr().out
    assert "walkthrough (one held-out task" in out and "guidance found in 0 of" in out
    text = (tmp_path / "walkthrough.md").read_text()
    assert "**Decision**" in text and "**Proof of discard**: state files byte-identical" in text
    main_walkthrough({**summary, "walkthrough": "scienceworld"}, tmp_path)
    assert "no anti_persistence run on scienceworld" in capsys.readouterr().out
