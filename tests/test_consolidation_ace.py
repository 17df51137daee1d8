"""ACE as the original builds it: fixed playbook sections, a generator that runs the task on the
engine (``EpisodeRollout``), and the analyzer's pairwise dedup (faulty-memories G.3, H.1.1).

Models are scripted over the loopback server; the rollout test plays a real ALFWorld game.
"""

from __future__ import annotations

import json

import pytest
from errand_pool import errand_pool_run

from antipersist_lib.consolidation import prompts as CP
from antipersist_lib.consolidation.ace import ACE, ACE_SECTIONS
from antipersist_lib.consolidation.bank import MemoryBank, MemoryEntry
from antipersist_lib.consolidation.pool import PoolRecord, expert_pool
from antipersist_lib.consolidation.rollouts import ROLLOUT_SOURCE, EpisodeRollout
from antipersist_lib.core.agent import AgentConfig
from antipersist_lib.envs import make_env
from antipersist_lib.envs.alfworld import read_game
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ScriptedResponder


def rec(rid: str, kind: str = "put", success: bool = True) -> PoolRecord:
    steps = (Step("go to place 1", "You arrive at place 1.", 0.0, True),)
    task = Task(0, "alfworld", kind, f"Your task is to: do the {kind} job {rid}.", "train", {})
    return PoolRecord(rid, task, Trajectory(f"Room of {rid}.", steps), EpisodeOutcome(success, float(success), 1, 0))


def by_system(system: str):
    return lambda req: (req.get("messages") or [{}])[0].get("content") == system


def prompts_under(c, system: str) -> list[str]:
    return [
        r["body"]["messages"][1]["content"] for r in c.server.requests_for(ROUTE_CHAT) if by_system(system)(r["body"])
    ]


def axis_embedding(text: str) -> list[float]:
    """Bullets naming the same capital word embed identically; different words are orthogonal."""
    words = ["ALPHA", "BETA", "GAMMA", "DELTA"]
    return [1.0 if w in text else 0.0 for w in words] + [0.0 if any(w in text for w in words) else 1.0]


def scripted(make_clients, reflect: dict, curate: list, gen: str = "{}"):
    rules = [
        (by_system(CP.ACE_GENERATOR_SYSTEM), gen),
        (by_system(CP.ACE_REFLECTOR_SYSTEM), json.dumps(reflect)),
        (by_system(CP.ACE_CURATOR_SYSTEM), json.dumps(curate)),
    ]
    return make_clients(ScriptedResponder(rules), embedder=axis_embedding)


def test_playbook_has_the_fixed_sections_and_files_unknown_ones_under_others(make_clients):
    reflect = {
        "bullet_tags": [],
        "lessons": [
            {"section": "Common Mistakes to Avoid", "text": "GAMMA: never place before heating", "episodes": [1]},
            {"section": "kitchen lore", "text": "DELTA: fridges are in kitchens", "episodes": [2]},
        ],
    }
    curate = [
        {"op": "ADD", "section": "COMMON MISTAKES & pitfalls", "text": "GAMMA: never place before heating"},
        {"op": "ADD", "section": "problem solving heuristics", "text": "DELTA: search the kitchen first"},
        {"op": "ADD", "text": "BETA: check the counter", "lessons": [1]},
        {"op": "ADD", "section": "Strategies & Insights", "text": "ALPHA: plan the route"},
    ]
    c = scripted(make_clients, reflect, curate)
    out = ACE(c.llm, c.embedder).update(MemoryBank("ace"), [rec("r1"), rec("r2")])
    sections = {e.text.split(":")[0]: e.section for e in out.entries}
    # 'COMMON MISTAKES & pitfalls' names no section exactly -> others; an ADD without a section takes
    # its lesson's (already filed) section; '&' reads as 'and'
    assert sections == {
        "GAMMA": "others",
        "DELTA": "problem-solving heuristics",
        "BETA": "common mistakes to avoid",
        "ALPHA": "strategies and insights",
    }
    skipped = " ".join(out.history[-1]["skipped"])
    assert "kitchen lore" in skipped and "COMMON MISTAKES & pitfalls" in skipped
    (reflect_prompt,) = prompts_under(c, CP.ACE_REFLECTOR_SYSTEM)
    for section in ACE_SECTIONS:  # the empty playbook already shows every section, and the rule names them
        assert f"## {section}\n(empty)" in reflect_prompt
    assert CP.ACE_SECTIONS_FIXED.format(sections="; ".join(ACE_SECTIONS)) in reflect_prompt
    # free sections stay available
    c2 = scripted(make_clients, reflect, curate)
    free = ACE(c2.llm, c2.embedder, sections=None).update(MemoryBank("ace"), [rec("r1"), rec("r2")])
    assert {e.section for e in free.entries} == {
        "COMMON MISTAKES & pitfalls",
        "problem solving heuristics",
        "Common Mistakes to Avoid",
        "Strategies & Insights",
    }
    assert CP.ACE_SECTIONS_FREE in prompts_under(c2, CP.ACE_REFLECTOR_SYSTEM)[0]
    with pytest.raises(ValueError, match="distinct non-empty"):
        ACE(c.llm, c.embedder, sections=["a", "A"])


def test_analyzer_merges_any_similar_pair_old_or_new_and_sums_counters(make_clients):
    start = MemoryBank(
        "ace",
        entries=[
            MemoryEntry("b1", "ALPHA: heat first", section="others", sources=["s1"], helpful=2),
            MemoryEntry("b2", "BETA: look around", section="others", sources=["s2"]),
            MemoryEntry("b3", "BETA restated", section="others", sources=["s3"], harmful=1),
        ],
        next_id=4,
    )
    curate = [
        {"op": "UPDATE", "id": "b2", "text": "ALPHA again, in other words"},
        {"op": "ADD", "section": "others", "text": "GAMMA: a new idea"},
        {"op": "ADD", "section": "others", "text": "GAMMA twice"},
    ]
    reflect = {"bullet_tags": [], "lessons": [{"section": "others", "text": "x", "episodes": [1]}]}
    c = scripted(make_clients, reflect, curate)
    out = ACE(c.llm, c.embedder, generator="none").update(start, [rec("r1")])
    # b2 became an ALPHA bullet: it merges into b1, an old pair; b3 (BETA) has no twin left; the new GAMMAs merge
    assert out.ids == ["b1", "b3", "b4"]
    b1, b3, b4 = out.entries
    assert b1.text == "ALPHA: heat first" and b1.sources == ["s1", "s2", "r1"] and b1.helpful == 2
    assert b3.harmful == 1 and b4.text == "GAMMA: a new idea"
    merges = [op for op in out.history[-1]["ops"] if op["op"] == "merge"]
    assert merges == [
        {"op": "merge", "from": "b2", "into": "b1", "similarity": 1.0},
        {"op": "merge", "from": "b5", "into": "b4", "similarity": 1.0},
    ]
    # counters travel with a merge
    start.entries[1].helpful, start.entries[1].harmful = 3, 4
    out = ACE(c.llm, c.embedder, generator="none").update(start, [rec("r1")])
    assert (out.entries[0].helpful, out.entries[0].harmful) == (5, 4)
    # without a threshold nothing merges
    out = ACE(c.llm, c.embedder, generator="none", dedup_threshold=None).update(start, [rec("r1")])
    assert out.ids == ["b1", "b2", "b3", "b4", "b5"]


class FakeRollout:
    """Returns a failing attempt of the record's task and remembers the playbook it was given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, record: PoolRecord, playbook: str) -> PoolRecord:
        self.seen.append((record.rid, playbook))
        steps = (Step("open the WRONG drawer", "The drawer is empty.", 0.0, False),)
        return PoolRecord(
            record.rid + "#a", record.task, Trajectory("start", steps), EpisodeOutcome(False, 0.0, 1, 0), "gen"
        )


@pytest.mark.parametrize("ground_truth", [False, True])
def test_rollout_generator_shows_the_attempts_to_the_reflector(make_clients, ground_truth):
    start = MemoryBank("ace", entries=[MemoryEntry("b1", "ALPHA: heat first", section="others")], next_id=2)
    reflect = {"bullet_tags": [{"episode": 1, "id": "b1", "tag": "harmful"}], "lessons": []}
    c = scripted(make_clients, reflect, [])
    rollout = FakeRollout()
    builder = ACE(c.llm, c.embedder, ground_truth=ground_truth, generator="rollout", rollout=rollout)
    out = builder.update(start, [rec("r1"), rec("r2")])
    assert [rid for rid, _ in rollout.seen] == ["r1", "r2"]
    assert all("ALPHA: heat first" in playbook for _, playbook in rollout.seen)  # the agent's view of the bank
    assert not prompts_under(c, CP.ACE_GENERATOR_SYSTEM)  # the rollouts replace the bullet-naming call
    (prompt,) = prompts_under(c, CP.ACE_REFLECTOR_SYSTEM)
    assert prompt.count("open the WRONG drawer") == 2
    # the attempt's own outcome is the environment's feedback: both variants see it (the original ACE does)
    assert prompt.count("Outcome: FAILURE") == 2
    assert ("Outcome: SUCCESS" in prompt) == ground_truth  # the reference's outcome
    assert ("Reference run of the same task" in prompt) == ground_truth  # the target (the pool's run): GT only
    assert ("go to place 1" in prompt) == ground_truth
    assert (CP.ACE_LABELS_SHOWN_ATTEMPTS in prompt) == ground_truth
    assert (CP.ACE_LABELS_ATTEMPT_OUTCOME in prompt) != ground_truth and CP.ACE_LABELS_HIDDEN not in prompt
    event = out.history[-1]
    assert event["rollouts"] == [
        {"task": "r1", "success": False, "steps": 1, "infra_failure": False},
        {"task": "r2", "success": False, "steps": 1, "infra_failure": False},
    ]
    assert out.entries[0].harmful == 1 and builder.describe()["generator"] == "rollout"


def test_episode_rollout_plays_the_task_on_the_alfworld_engine(make_clients, alfworld_data):
    (record,) = expert_pool("alfworld", 1, seed=3, types=("put",), data_dir=alfworld_data)
    walk = [a.lower() for a in read_game(alfworld_data, record.task.env_args["game"])["walkthrough"]]
    played: list[str] = []

    def replay_walkthrough(req: dict) -> str:
        action = walk[len(played)]
        played.append(action)
        return f"Thought: follow the plan.\nAction: {action}"

    c = make_clients(ScriptedResponder([], default=replay_walkthrough))
    with make_env("alfworld", data_dir=str(alfworld_data)) as env:
        rollout = EpisodeRollout(env, c.llm, AgentConfig(max_steps=len(walk) + 5))
        attempt = rollout(record, "## others\n[b1] PLAYBOOK-MARKER")
    assert isinstance(attempt, PoolRecord) and attempt.source == ROLLOUT_SOURCE
    assert attempt.rid == record.rid + "#attempt1" and attempt.task == record.task
    assert attempt.outcome.success and [s.action for s in attempt.trajectory.steps] == walk
    (first, *_) = c.server.requests_for(ROUTE_CHAT)
    assert "PLAYBOOK-MARKER" in first["body"]["messages"][0]["content"]  # the playbook is in the agent's context


def test_the_study_runs_aces_generator_on_the_engine(tmp_path):
    """``builder_options.ace.generator: rollout``: the study gives ACE an episode runner on the benchmark's
    engine (ErrandWorld, the kit's test world, with a scripted agent), and the reflector sees the attempts."""
    import yaml

    from antipersist_lib.consolidation import study
    from antipersist_lib.consolidation.bank import load_bank
    from antipersist_lib.serving.llm import Endpoint
    from antipersist_lib.testing.loopback_server import LoopbackServer
    from antipersist_lib.testing.scripted_policy import errand_policy

    reflect = json.dumps(
        {"bullet_tags": [], "lessons": [{"section": "others", "text": "ALPHA: look in the garden", "episodes": [1]}]}
    )
    curate = json.dumps([{"op": "ADD", "section": "others", "text": "ALPHA: look in the garden", "lessons": [1]}])
    reflector_prompts: list[str] = []

    def responder(req):
        system = req["messages"][0]["content"]
        if system == CP.ACE_REFLECTOR_SYSTEM:
            reflector_prompts.append(req["messages"][1]["content"])
            return reflect
        if system == CP.ACE_CURATOR_SYSTEM:
            return curate
        return errand_policy(req)

    with LoopbackServer(responder=responder, embedder=axis_embedding) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", max_retries=0)
        pool_dir = errand_pool_run(tmp_path / "poolrun", ep, train=3)
        profile = {
            "name": "ace-rollout",
            "benchmark": "errandworld",
            "backbone": "scripted-loopback",
            "pool": {"runs": [str(pool_dir)]},
            "builders": ["ace_gt"],
            "builder_options": {"ace_gt": {"generator": "rollout", "max_tokens": 64}},
            "regimes": {"static_all": {}},
            "evaluation": {"seeds": [1], "heldout_limit": 1, "max_steps": 4, "no_memory": False},
            "response_cache": False,
        }
        path = tmp_path / "ace.yaml"
        path.write_text(yaml.safe_dump(profile))
        result = study.run_study(path, tmp_path / "out", endpoint=ep, embed_endpoint=ep)
    bank = load_bank(result.out / "memories" / "ace_gt" / "static_all" / "bank.json")
    (event,) = bank.history
    pool_ids = [r["task"] for r in event["rollouts"]]
    assert len(pool_ids) == len(event["batch"]) == 3 and pool_ids == event["batch"]
    assert all(r["steps"] >= 1 and not r["infra_failure"] for r in event["rollouts"])
    (prompt,) = reflector_prompts
    assert prompt.count("The agent's attempt at this task") == 3 and prompt.count("Reference run of the same task") == 3
    assert [e.text for e in bank.entries] == ["ALPHA: look in the garden"]
    assert bank.meta["builder"]["generator"] == "rollout"


def test_a_rollout_generator_without_an_engine_is_refused_with_the_fix(make_clients):
    c = scripted(make_clients, {"bullet_tags": [], "lessons": []}, [])
    builder = ACE(c.llm, c.embedder, generator="rollout")  # constructible: the study supplies the engine later
    out = None
    with pytest.raises(RuntimeError, match="pass rollout="):
        out = builder.update(MemoryBank("ace"), [rec("r1")])
    assert out is None
    with pytest.raises(ValueError, match="generator must be one of"):
        ACE(c.llm, c.embedder, generator="rollouts")
    with pytest.raises(ValueError, match="rollout= is the generator"):
        ACE(c.llm, c.embedder, rollout=FakeRollout())


# -- the paper's reading as profile keys (issue 43) ----------------------------------------------


def paper_profiles():
    from pathlib import Path

    from antipersist_lib.consolidation.profile import load_study_profile

    root = Path(__file__).resolve().parents[1] / "params" / "consolidation"
    return {p.stem: load_study_profile(p) for p in sorted(root.glob("*paper*.yaml"))}


def test_paper_profiles_run_aces_generator_and_its_paper_reading():
    """Every paper profile that builds ACE runs its generator on the engine (so ACE and ACE_GT differ by the
    target, Table 2), reflects per trajectory (G.2), merges any pair (G.3) and caps nothing (H.1.1)."""
    runs_ace = {name: p for name, p in paper_profiles().items() if {"ace", "ace_gt"} & set(p.builders)}
    assert "paper" in runs_ace
    for name, profile in runs_ace.items():
        for b in {"ace", "ace_gt"} & set(profile.builders):
            opts = profile.options(b)
            assert opts.get("generator") == "rollout", (name, b)
            assert opts.get("reflector") == "per_record" and opts.get("merge") == "any_pair", (name, b)
            assert opts.get("playbook_token_cap") is None, (name, b)


def test_paper_profiles_revise_awm_and_rewrite_the_erosion_list():
    """H.1.2: AWM re-induces and edits; G.1: the erosion manager rewrites the whole list, seeded free-count;
    Fig. 1(b): AWM read after 8 to 128 examples."""
    profiles = paper_profiles()
    for name, profile in profiles.items():
        if "awm" in profile.builders:
            assert profile.options("awm").get("mode") == "revise", name
    erosion = profiles["erosion_paper"].options("clin")
    assert erosion["update"] == "rewrite" and erosion["seed_list"] == "free_count" and erosion["capacity"] == 50
    fig1b = profiles["webshop_awm_paper"].regime("fig1b")
    assert fig1b.batch_size == 8 and fig1b.steps == [1, 2, 4, 8, 16]  # 8, 16, 32, 64, 128 examples


def test_plain_ace_sees_its_rollouts_outcome_but_not_the_reference(make_clients):
    class Win(FakeRollout):
        def __call__(self, record, playbook):
            a = super().__call__(record, playbook)
            return PoolRecord(a.rid, a.task, a.trajectory, EpisodeOutcome(True, 1.0, 1, 0), "gen")

    prompts = {}
    for gt in (False, True):
        c = scripted(make_clients, {"bullet_tags": [], "lessons": []}, [])
        ACE(c.llm, c.embedder, ground_truth=gt, generator="rollout", rollout=Win()).update(
            MemoryBank("ace"), [rec("r1", success=False)]
        )
        (prompts[gt],) = prompts_under(c, CP.ACE_REFLECTOR_SYSTEM)
    # the rollout succeeded where the pool's run failed: plain ACE reads the rollout's SUCCESS, never the target
    assert "Outcome: SUCCESS" in prompts[False] and "Outcome: FAILURE" not in prompts[False]
    assert "Reference run" not in prompts[False] and "go to place 1" not in prompts[False]
    assert "Reference run" in prompts[True] and "go to place 1" in prompts[True]
    assert "Outcome: FAILURE" in prompts[True]  # the reference's own outcome


def test_reflector_per_record_reads_each_trajectory_alone_and_the_curator_once(make_clients):
    reflect = {"bullet_tags": [], "lessons": [{"section": "others", "text": "ALPHA: a lesson", "episodes": [1]}]}
    curate = [{"op": "ADD", "section": "others", "text": "BETA: one bullet", "lessons": [2]}]
    c = scripted(make_clients, reflect, curate)
    builder = ACE(c.llm, c.embedder, reflector="per_record", generator="none")
    out = builder.update(MemoryBank("ace"), [rec("r1"), rec("r2"), rec("r3")])
    reflections = prompts_under(c, CP.ACE_REFLECTOR_SYSTEM)
    assert len(reflections) == 3 and all(p.count("### Episode") == 1 for p in reflections)
    assert [f"job r{i}" in p for i, p in enumerate(reflections, start=1)] == [True] * 3
    (curation,) = prompts_under(c, CP.ACE_CURATOR_SYSTEM)
    assert curation.count("ALPHA: a lesson") == 3  # every record's lessons reach one curator call
    assert out.entries[0].sources == ["r2"]  # lesson 2 came from the second record's reflection
    assert out.history[-1]["calls"] == 4 and builder.describe()["reflector"] == "per_record"
    with pytest.raises(ValueError, match="reflector must be one of"):
        ACE(c.llm, c.embedder, reflector="per_step")


def test_merge_new_only_leaves_old_pairs_and_the_token_cap_drops_the_worst(make_clients):
    start = MemoryBank(
        "ace",
        entries=[
            MemoryEntry("b1", "ALPHA: old one", section="others", helpful=2),
            MemoryEntry("b2", "ALPHA: old twin", section="others"),
            MemoryEntry("b3", "GAMMA: " + "x" * 300, section="others", harmful=1),
        ],
        next_id=4,
    )
    curate = [{"op": "ADD", "section": "others", "text": "BETA: new"}, {"op": "ADD", "text": "BETA: new twin"}]
    reflect = {"bullet_tags": [], "lessons": [{"section": "others", "text": "BETA", "episodes": [1]}]}
    c = scripted(make_clients, reflect, curate)
    out = ACE(c.llm, c.embedder, generator="none", merge="new_only").update(start, [rec("r1")])
    assert out.ids == ["b1", "b2", "b3", "b4"]  # the old ALPHA pair stays apart; the new BETA twin merged
    c = scripted(make_clients, reflect, curate)
    any_pair = ACE(c.llm, c.embedder, generator="none").update(start, [rec("r1")])
    assert any_pair.ids == ["b1", "b3", "b4"]
    c = scripted(make_clients, reflect, curate)
    builder = ACE(c.llm, c.embedder, generator="none", merge="none", playbook_token_cap=120)
    capped = builder.update(start, [rec("r1")])
    (curation,) = prompts_under(c, CP.ACE_CURATOR_SYSTEM)
    assert "may hold about 120 tokens" in curation
    # the 300-character bullet with a harmful mark goes first; the rest fit
    assert "b3" not in capped.ids and "b1" in capped.ids
    (cap_op,) = [op for op in capped.history[-1]["ops"] if op["op"] == "cap"]
    assert cap_op["ids"][0] == "b3" and cap_op["tokens"] <= 120
    assert builder.describe()["merge"] == "none" and builder.dedup_threshold is None
