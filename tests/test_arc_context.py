"""The ARC-AGI Stream study's episodic budget, its stream of fresh tasks and its context check (issue 43, item 1
and 5): the paper profile must run to its end at the paper's scale, or be refused when it loads."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from antipersist_lib import studies
from antipersist_lib.arc import context, study_profile
from antipersist_lib.arc.controller import StreamConfig, gt_code, run_stream
from antipersist_lib.arc.families import FAMILIES
from antipersist_lib.arc.generator import FRESH_POOL, make_task, pool_plan
from antipersist_lib.arc.prompts import decision_messages, render_grid
from antipersist_lib.errors import ContextOverflowError
from antipersist_lib.serving.context_budget import CHARS_PER_TOKEN, PromptGuard, request_tokens
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import last_user_text

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "params" / "arc" / "paper.yaml"
GPT_54_CONTEXT = 272000  # params/backbones/gpt-5.4.yaml


def paper_copy(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load(PAPER.read_text())
    data.update(changes)
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_paper_profile_fits_its_backbone_at_the_last_checkpoint():
    profile = study_profile.load_study_profile(PAPER)  # the check runs while it loads
    sizes = context.profile_prompt_sizes(profile)
    assert {s.prompt for s in sizes} == {"solver", "evaluation", "decision", "extraction"}
    largest = max(sizes, key=lambda s: s.tokens)
    assert largest.tokens <= GPT_54_CONTEXT
    # the buffer really is full in the measured prompts: 50 carried at |B| = 8, and the step's 8 new in a decision
    auto8 = [s for s in sizes if s.condition == "auto-gt-b50-t8"]
    assert {s.prompt: s.episodes for s in auto8} == {"solver": 50, "evaluation": 50, "decision": 58, "extraction": 58}
    assert context.named_context_length(profile) == (GPT_54_CONTEXT, "gpt-5.4")


def test_the_uncapped_paper_profile_is_refused_when_it_loads_with_sizes_and_fix(tmp_path):
    data = yaml.safe_load(PAPER.read_text())
    uncapped = {
        "episodic_capacity": None,  # the names of the chosen conditions follow the capacity
        "surgery": {**data["surgery"], "conditions": ["auto-gt-binf-t8"]},
        "source_ablation": {**data["source_ablation"], "conditions": ["auto-gt-binf-t8"]},
    }
    with pytest.raises(studies.StudyProfileError) as err:
        study_profile.load_study_profile(paper_copy(tmp_path, **uncapped))
    msg = str(err.value)
    assert "would not fit the context length of 'gpt-5.4', 272000 tokens" in msg
    # the worst prompt: an uncapped |B| = 8 stream holds 400 x 8 episodes at its last step
    assert "with 3208 buffered episode(s)" in msg and "characters, about" in msg
    assert "episodic_capacity" in msg and "longer context" in msg
    # the same profile without the check loads (a run then checks against the endpoint it really uses)
    assert study_profile.load_study_profile(paper_copy(tmp_path, **uncapped), context_check=False)


def test_the_estimate_is_never_below_the_prompts_a_stream_really_sends(make_clients, tmp_path):
    tasks = [make_task(e.family, e.skill, e.seed, n_train=3, n_test=2) for e in pool_plan("train19")[:8]]
    sent: dict[str, list[str]] = {"solver": [], "decision": []}

    def responder(request: dict) -> str:
        text = last_user_text(request)
        whole = "\n".join(m["content"] for m in request["messages"])
        if text.startswith("# Task: write solve(grid)"):
            sent["solver"].append(whole)
            task = next(t for t in tasks if render_grid(t.train[0].input) in text.split("## Strategy memory")[0])
            return f"```python\n{gt_code(task)}```"
        sent["decision"].append(whole)
        return '{"action": "retain", "ids": []}'

    config = StreamConfig(regime="auto", source="gt", buffer_size=3, steps=4, tasks_per_step=2)
    run_stream(tasks, make_clients(responder).llm, config, tmp_path)
    estimated = {s.prompt: s for s in context.condition_prompts("c", config, 4, tasks, tasks[:2])}
    assert max(len(t) for t in sent["solver"]) <= estimated["solver"].chars
    assert max(len(t) for t in sent["decision"]) <= estimated["decision"].chars
    assert (estimated["solver"].episodes, estimated["decision"].episodes) == (3, 5)  # capacity 3, then 2 new


class _Reply:
    text = "ok"


class _Model:
    def __init__(self, context_length: int | None) -> None:
        self.endpoint = Endpoint(base_url="http://127.0.0.1:9/v1", model="m", context_length=context_length)
        self.calls = 0

    def chat(self, messages, **kw):
        self.calls += 1
        return _Reply()


def test_the_guard_refuses_a_request_past_the_context_before_sending_it():
    model = _Model(context_length=1000)
    guard = PromptGuard(model, what=lambda tags: f"ARC-AGI Stream {tags['purpose']} at step {tags['step']}", fix="X")
    small = [{"role": "user", "content": "a" * 300}]
    assert guard.chat(small, purpose="arc_solve", max_tokens=100, tags={"step": 3}).text == "ok"
    big = [{"role": "user", "content": "a" * (3 * 1000)}]
    with pytest.raises(ContextOverflowError) as err:
        guard.chat(big, purpose="arc_decide", max_tokens=100, tags={"step": 7})
    assert model.calls == 1  # the long one never left
    assert "ARC-AGI Stream arc_decide at step 7" in str(err.value) and "Fix: X" in str(err.value)
    assert err.value.needed_tokens == 1000 + 100 and request_tokens(big, 100) == 1100
    assert PromptGuard(_Model(None), what="w", fix="f").chat(big, max_tokens=10).text == "ok"  # nothing stated
    assert CHARS_PER_TOKEN == 3


def test_the_decision_prompt_states_the_paper_budget():
    profile = study_profile.load_study_profile(PAPER)
    config = profile.stream_config(profile.condition("auto-gt-b50-t8"))
    assert (config.buffer_size, config.tasks_per_step) == (50, 8)
    text = decision_messages(1, [], [], allowed=("retain",), capacity=config.buffer_size)[1]["content"]
    assert "keeps at most 50 trajectories" in text


def test_episodic_capacity_per_b_and_its_errors(tmp_path):
    base = {
        "name": "cap",
        "backbone": "embedded",
        "backbone_options": {"n_ctx": 65536},
        "train_pool": {"name": FRESH_POOL},
        "heldout_pool": {"name": "heldout50", "limit": 2},
        "task_examples": {"n_train": 2, "n_test": 2},
        "steps": 3,
        "buffer_reading": "batch",
        "conditions": {"regime": ["auto"], "source": ["gt"], "buffer_size": [1, 8]},
    }

    def load(**changes):
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump({**base, **changes}))
        return study_profile.load_study_profile(path)

    mixed = load(episodic_capacity={1: None, 8: 50})
    assert [(c.name, c.buffer_size, c.table4_b) for c in mixed.conditions] == [
        ("auto-gt-binf", None, 1),
        ("auto-gt-b50-t8", 50, 8),
    ]
    assert {c.buffer_size for c in load(episodic_capacity=12).conditions} == {12}
    assert {c.buffer_size for c in load().conditions} == {None}
    with pytest.raises(studies.StudyProfileError, match=r"names no capacity for \|B\| = 8"):
        load(episodic_capacity={1: 5})
    with pytest.raises(studies.StudyProfileError, match="goes with buffer_reading: batch"):
        load(buffer_reading="cap", episodic_capacity=5, conditions={"regime": ["auto"], "buffer_size": [8]})
    with pytest.raises(studies.StudyProfileError, match="episodic_capacity must be an integer"):
        load(episodic_capacity="fifty")


def test_the_fresh_pool_is_balanced_shuffled_new_and_reproducible():
    plan = pool_plan(FRESH_POOL, 0, size=400)
    assert len(plan) == 400 and len({e.task_id for e in plan}) == 400
    assert plan == pool_plan(FRESH_POOL, 0, size=400) and plan != pool_plan(FRESH_POOL, 1, size=400)
    assert plan[:100] == pool_plan(FRESH_POOL, 0, size=400)[:100]
    pairs = Counter((e.family, e.skill) for e in plan)
    assert len(pairs) == 42 and max(pairs.values()) - min(pairs.values()) <= 1  # every pair, within one
    assert all(e.seed % 2 == 0 for e in plan)  # training parity: never a held-out id
    assert not {e.task_id for e in plan} & {e.task_id for e in pool_plan("heldout50")}
    # a stream of fresh examples: some 8-task steps miss a family; the fixed pools' rotation never does
    steps = [{e.family for e in plan[i : i + 8]} for i in range(0, 400, 8)]
    assert any(len(s) < len(FAMILIES) for s in steps)
    fixed = pool_plan("train200")
    assert all(len({e.family for e in fixed[i : i + 8]}) == len(FAMILIES) for i in range(0, 200, 8))
    with pytest.raises(ValueError, match="needs a size"):
        pool_plan(FRESH_POOL, 0)
    with pytest.raises(ValueError, match="fixed size"):
        pool_plan("train200", 0, size=10)


def test_the_fixed_pools_are_unchanged():
    digests = {
        name: hashlib.sha256(json.dumps([(e.family, e.skill, e.seed) for e in pool_plan(name)]).encode()).hexdigest()
        for name in ("train19", "train200", "train250", "heldout50")
    }
    assert {k: v[:12] for k, v in digests.items()} == {
        "train19": "e5e759389291",
        "train200": "40551baa6192",
        "train250": "5afc1aa26cff",
        "heldout50": "943a7539d3ea",
    }


def test_a_stream_that_would_cycle_a_fixed_pool_must_say_so(tmp_path):
    with pytest.raises(studies.StudyProfileError, match=r"read 3200 tasks .* from pool 'train200' of 200") as err:
        study_profile.load_study_profile(paper_copy(tmp_path, train_pool={"name": "train200", "seed": 0}))
    assert "name: fresh" in str(err.value) and "revisit: true" in str(err.value)
    revisiting = study_profile.load_study_profile(paper_copy(tmp_path, train_pool={"name": "train200"}, revisit=True))
    assert revisiting.train_pool.name == "train200"
    fresh = study_profile.load_study_profile(PAPER)
    tasks = study_profile.pool_tasks(fresh.train_pool.__class__(FRESH_POOL, 0, 16), n_train=2, n_test=2)
    assert len({t.task_id for t in tasks}) == 16
    with pytest.raises(studies.StudyProfileError, match="drop 'limit'"):
        study_profile.load_study_profile(paper_copy(tmp_path, train_pool={"name": FRESH_POOL, "limit": 10}))


def test_the_probe_profiles_are_checked_too(tmp_path):
    from antipersist_lib.arc import probe_profile

    paper = ROOT / "params" / "arc" / "probes_paper.yaml"
    sizes = probe_profile.probe_prompt_sizes(probe_profile.load_probe_profile(paper))
    assert max(s.tokens for s in sizes) <= GPT_54_CONTEXT
    # the Auto overfit stream: 7 tasks x 10 cycles, |B| = 8 per step, uncapped: all 70 episodes or more held
    overfit = [s for s in sizes if s.condition.startswith("overfit") and s.condition.endswith("auto")]
    overfit = [s for s in overfit if s.prompt == "evaluation"]
    assert overfit and min(s.episodes for s in overfit) >= 70
    small = yaml.safe_load(paper.read_text()) | {"backbone": "qwen3.5-4b"}  # 32768 tokens
    path = tmp_path / "probes.yaml"
    path.write_text(yaml.safe_dump(small))
    with pytest.raises(
        studies.StudyProfileError, match="would not fit the context length of 'Qwen/Qwen3.5-4B', 32768 tokens"
    ):
        probe_profile.load_probe_profile(path)
