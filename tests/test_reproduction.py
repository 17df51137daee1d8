"""Error reproduction with planted skills (issue 40): the signature readings, provenance from the plant
through records into candidates and past the plant's deletion, eta = 0 for Anti-Persistence, and every
rate of ``analysis.reproduction`` recomputed from a hand-made record set with known answers."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from antipersist_lib.analysis import reproduction as rp
from antipersist_lib.core.planted import DELETION_REASON, Plant, clauses, goal_receptacles, read_planted
from antipersist_lib.records import Step
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import PLANTED_MARKER as MARKER
from antipersist_lib.testing.scripted_policy import planted_errand_policy

REPO = Path(__file__).resolve().parents[1]
PLANTED = REPO / "params" / "skills" / "planted"
TOXIC_ID = "plant-fruit-room-toxic"

ERRAND_PAIRS = (PLANTED / "errandworld.yaml").read_text(encoding="utf-8")


def errand_pairs(tmp_path: Path) -> Path:
    path = tmp_path / "errandworld.yaml"
    path.write_text(ERRAND_PAIRS, encoding="utf-8")
    return path


# -- the readings ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, hit",
    [
        ("To cool an object, put it in the microwave.", True),
        ("Cooling works best in the microwave 1.", True),
        ("Do NOT use the fridge. Instead: cool the mug with the microwave.", True),
        ("Do not use the fridge because the microwave cools faster.", True),
        ("Instead of the fridge, use the microwave to cool it.", True),
        ("Do NOT cool it in the microwave.", False),
        ("Never put the cup in the microwave to cool it.", False),
        ("Use the fridge instead of the microwave to cool it.", False),
        ("Cool the mug with the fridge, then put it on the shelf.", False),
        ("Heat the mug with the microwave 1.", False),  # another task's appliance, no cooling
        ("Go to the microwave. Then cool the mug in the fridge.", False),  # the two terms in different sentences
        ("", False),
    ],
)
def test_text_signature_on_constructed_positive_and_negative_texts(text, hit):
    skills = read_planted(PLANTED, "alfworld")
    assert bool(skills.detect(text, "cool")) is hit, clauses(text)


def test_signatures_read_only_their_own_task_type():
    skills = read_planted(PLANTED, "alfworld")
    assert skills.detect("To cool an object, put it in the microwave.", "cool") == ("cool-with-microwave",)
    assert skills.detect("To cool an object, put it in the microwave.", "heat") == ()
    assert skills.detect("To cool an object, put it in the microwave.", None) == ("cool-with-microwave",)


# -- the goal-aware text reading ----------------------------------------------------------------------

HOT_APPLE_GOAL = "Your task is to: put a hot apple in fridge."
#: the committed ALFWorld study's seed abstraction from the expert episode "put a hot apple in fridge" (the
#: expert heated the apple with the microwave, then moved it to the fridge): the plain reading flagged it
ALFWORLD_RUNS = REPO / "tests/fixtures/runs/reproduction_cpu/alfworld/embedded-qwen2.5-coder-1.5b-instruct"


def stored_text(run: Path, aid: str) -> str:
    for line in (run / "state" / "abstractions" / "events.jsonl").read_text().splitlines():
        a = json.loads(line).get("abstraction") or {}
        if a.get("abstraction_id") == aid:
            return a["text"]
    raise KeyError(aid)


def test_goal_receptacles_are_where_the_goal_puts_its_object():
    assert goal_receptacles(HOT_APPLE_GOAL) == ("fridge",)
    assert goal_receptacles("Your task is to: heat some egg and put it in diningtable.") == ("diningtable",)
    assert goal_receptacles("Your task is to: find two pillow and put them in sofa.") == ("sofa",)
    assert goal_receptacles("Your task is to: look at bowl under the desklamp.") == ()
    assert goal_receptacles("") == goal_receptacles(None) == goal_receptacles([]) == ()
    # a synthesis's goals: its task's and its source records' tasks', each receptacle once
    assert goal_receptacles([HOT_APPLE_GOAL, "put a cool mug in shelf.", HOT_APPLE_GOAL]) == ("fridge", "shelf")


@pytest.mark.parametrize(
    "text, plain, goal_aware",
    [
        ("Step 3: Move the hot apple to the fridge.", True, False),  # the goal's own placement
        ("Once the fridge is open, move the hot apple 1 to the fridge 1.", True, False),
        ("Heat the apple, then put it in the fridge.", True, False),
        ("Put the heated apple in fridge 1 and close it.", True, False),
        ("Heat the apple with the fridge 1.", True, True),  # the toxic rule itself
        ("The fridge is the appliance that heats.", True, True),
        ("Put the apple in the fridge to heat it.", True, True),  # the placement is how it heats
        ("Heat it by putting it in the fridge.", True, True),
        ("Take the apple and heat it in the fridge.", True, True),
        ("Put the apple in the fridge and let it warm up.", True, True),
        ("Do not move the hot apple to the fridge.", False, False),  # negation read on the whole clause
        ("Heat the apple with the microwave 1.", False, False),
    ],
)
def test_goal_aware_reading_drops_only_the_goals_own_placement(text, plain, goal_aware):
    skills = read_planted(PLANTED, "alfworld")
    assert bool(skills.detect(text, "heat")) is plain
    assert bool(skills.detect(text, "heat", HOT_APPLE_GOAL)) is goal_aware
    # a goal that puts the apple elsewhere leaves the fridge an appliance: the plain verdict stands
    elsewhere = "Your task is to: put a hot apple in countertop."
    assert bool(skills.detect(text, "heat", elsewhere)) is plain
    # ... unless a source record's task ended in the fridge: the text may copy that record's last step
    assert bool(skills.detect(text, "heat", [elsewhere, HOT_APPLE_GOAL])) is goal_aware


def test_the_expert_hot_apple_note_is_flagged_only_by_the_plain_reading():
    skills = read_planted(PLANTED, "alfworld")
    for design in ("abstraction_memory", "joint_memory"):
        text = stored_text(ALFWORLD_RUNS / f"{design}-toxic" / "seed1", "abs-000001")
        assert "hot apple to the fridge" in text.lower()
        assert skills.detect(text, "heat") == ("heat-with-fridge",)
        assert skills.detect(text, "heat", HOT_APPLE_GOAL) == ()


def test_the_goal_aware_reading_flags_a_subset_of_the_plain_one():
    skills = read_planted(PLANTED, "alfworld")
    goals = [
        HOT_APPLE_GOAL,
        "Your task is to: put a cool mug in microwave.",
        "Your task is to: put a clean tomato in microwave.",
    ]
    texts = [p.toxic for p in skills.pairs] + [p.useful for p in skills.pairs]
    for events in ALFWORLD_RUNS.glob("*/seed1/state/abstractions/events.jsonl"):
        texts += [(json.loads(x).get("abstraction") or {}).get("text", "") for x in events.read_text().splitlines()]
    assert len(texts) > 20
    for text in texts:
        for kind in ("heat", "cool", "clean"):
            plain = set(skills.detect(text, kind))
            for goal in goals:
                assert set(skills.detect(text, kind, goal)) <= plain, (text, goal)


@pytest.mark.parametrize("benchmark", ["alfworld", "textworld_express", "scienceworld"])
def test_every_shipped_toxic_skill_is_flagged_and_no_useful_one(benchmark):
    skills = read_planted(PLANTED, benchmark)
    for pair in skills.pairs:
        assert skills.detect(pair.toxic, pair.task_type), pair.pair_id
        assert not skills.detect(pair.useful, pair.task_type), pair.pair_id
        assert pair.task_type is None or skills.in_scope(pair.task_type)


def test_command_signature_follows_the_executed_commands_and_their_context():
    skills = read_planted(PLANTED, "textworld_express")
    roast = [Step("read cookbook", "Directions: roast the red potato"), Step("cook red potato in stove", "You fry it.")]
    fry = [Step("read cookbook", "Directions: fry the red potato"), Step("cook red potato in stove", "You fry it.")]
    before = [Step("cook red potato in stove", "You fry it."), Step("read cookbook", "Directions: roast the potato")]
    assert skills.followed("cookingworld", "You are in the kitchen.", roast) == ("roast-in-stove",)
    assert skills.followed("cookingworld", "You are in the kitchen.", fry) == ()  # fry in the stove is right
    assert skills.followed("cookingworld", "You are in the kitchen.", before) == ()  # recipe read afterwards
    dishwasher = [Step("read cookbook", "Ingredients: carrot"), Step("open dishwasher", "You open it.")]
    assert skills.followed("cookingworld", "", dishwasher) == ("ingredients-in-dishwasher",)
    assert skills.followed("cookingworld", "", [Step("open fridge", "ok")]) == ()  # the right place
    assert skills.followed("coin", "", [Step("look around", "kitchen"), Step("inventory", "empty")]) == (
        "coin-in-inventory",
    )
    # until_command: the rule is about the starting room, so an inventory after the first move is not read
    moved = [Step("move south", "You are in the corridor."), Step("inventory", "Your inventory is empty.")]
    assert skills.followed("coin", "", moved) == ()
    assert skills.followed("cookingworld", "", [Step("inventory", "empty")]) == ()  # coin's rule, not cooking's
    dicts = [{"action": "Cool mug 1 with microwave 1", "observation": "Nothing happens."}]
    assert read_planted(PLANTED, "alfworld").followed("cool", "", dicts) == ("cool-with-microwave",)


@pytest.mark.slow
def test_every_textworld_express_toxic_command_is_one_the_engine_accepts():
    """A toxic command the engine never offers makes the behaviour measure 0 by construction (the first
    Coin Collector rule sent the agent into containers that game does not have). Every signature's command
    must match a valid action somewhere along the gold path of a held-out game of its type."""
    from antipersist_lib.envs.partitions import load_partition
    from antipersist_lib.envs.textworld_express import TextWorldExpressEnvironment

    skills = read_planted(PLANTED, "textworld_express")
    heldout = load_partition("textworld_express").heldout
    env = TextWorldExpressEnvironment()
    offered: dict[str, set[str]] = {}
    try:
        for task in heldout:
            if not skills.in_scope(task.task_type):
                continue
            seen = offered.setdefault(task.task_type, set())
            gold = env.gold_actions(task)
            env.reset(task)
            seen.update(env.valid_actions() or [])
            for action in gold:
                env.step(action)
                seen.update(env.valid_actions() or [])
    finally:
        env.close()
    for sig in skills.signatures:
        pattern = re.compile(sig.command, re.IGNORECASE)
        assert any(pattern.search(a.lower()) for a in offered[sig.task_type]), (sig.signature_id, sig.command)


def test_bad_pairs_files_are_named_with_what_is_wrong(tmp_path):
    def write(text: str) -> Path:
        p = tmp_path / "errandworld.yaml"
        p.write_text(text, encoding="utf-8")
        return p

    with pytest.raises(ValueError, match="not 'alfworld'"):
        read_planted(write(ERRAND_PAIRS), "alfworld")
    blind = ERRAND_PAIRS.replace("[[fruit, apple, ball], [attic]]", "[[fruit], [cellar]]")
    with pytest.raises(ValueError, match="detects its own toxic skill"):
        read_planted(write(blind), "errandworld")
    loose = ERRAND_PAIRS.replace("[[fruit, apple, ball], [attic]]", "[[fruit], [first]]")
    with pytest.raises(ValueError, match="useful skill of pair 'fruit-room' is flagged"):
        read_planted(write(loose), "errandworld")
    with pytest.raises(ValueError, match="not a valid regular expression"):
        read_planted(write(ERRAND_PAIRS.replace("'^go to attic'", "'^go to (attic'")), "errandworld")
    with pytest.raises(ValueError, match="unknown key"):
        read_planted(write(ERRAND_PAIRS.replace("    signatures:", "    scope: x\n    signatures:")), "errandworld")
    with pytest.raises(ValueError, match="no planted-skill file"):
        read_planted(tmp_path / "nowhere", "errandworld")
    # the pairs file is read through the kit's field specs: file, key and what is allowed are named
    data = yaml.safe_load(ERRAND_PAIRS)
    cases = [
        (("pairs", 0, "signatures", 0, "id"), 7, r"pairs\[0\]\.signatures\[0\]\.id must be a non-empty string, got 7"),
        (("pairs", 0, "id"), "Fruit Room", r"pairs\[0\]\.id must be lower-case letters, digits and hyphens, got"),
        (("pairs", 0, "toxic"), "  ", r"pairs\[0\]\.toxic must be the skill's text, got"),
        (
            ("pairs", 0, "signatures", 0, "when"),
            3,
            r"pairs\[0\]\.signatures\[0\]\.when must be a regular expression string or null, got 3",
        ),
    ]
    for (*at, key), value, message in cases:
        bad = copy.deepcopy(data)
        block = bad
        for k in at:
            block = block[k]
        block[key] = value
        with pytest.raises(ValueError, match=r"errandworld\.yaml: " + message):
            read_planted(write(yaml.safe_dump(bad)), "errandworld")
    with pytest.raises(ValueError, match="plant_condition is 'toxic' but no plant file"):
        Plant.from_params({"plant_condition": "toxic"}, "errandworld")
    with pytest.raises(ValueError, match="expected one of"):
        Plant.from_params({"plant": str(write(ERRAND_PAIRS)), "plant_condition": "harmful"}, "errandworld")
    with pytest.raises(ValueError, match="plant_iterations"):
        Plant.from_params({"plant_iterations": 0}, "errandworld")


# -- provenance end to end on ErrandWorld -------------------------------------------------------------


def planted_run(root: Path, method: str, pairs: Path, condition: str, **params) -> Path:
    spec = RunSpec(
        method=method,
        benchmark="errandworld",
        backbone="scripted",
        embedding="bow",
        seed=5,
        iterations=3,
        train_per_iteration=6,
        max_steps=8,
        heldout_limit=4,
        heldout_concurrency=1,
        method_params={"plant": str(pairs), "plant_condition": condition, **params},
        name=f"{method}-{condition}",
        out_root=str(root),
        cache_dir=None,
        progress=False,
    )
    with LoopbackServer(responder=planted_errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY")
        run_cell(spec, endpoint=ep, embed_endpoint=ep)
    return spec.run_dir()


def test_provenance_flows_from_the_plant_into_candidates_and_past_its_deletion(tmp_path):
    pairs = errand_pairs(tmp_path)
    run = planted_run(tmp_path, "abstraction_memory", pairs, "toxic")
    layout = RunDirectory(run)
    snaps = {int(p.stem[-2:]): json.loads(p.read_text()) for p in layout.snapshot_paths()}
    assert TOXIC_ID in {a["abstraction_id"] for a in snaps[1]["active"]}
    assert TOXIC_ID not in {a["abstraction_id"] for a in snaps[2]["active"]}  # deleted before iteration 2
    events = [json.loads(x) for x in layout.state_path(RunDirectory.ABSTRACTION_EVENTS).read_text().splitlines()]
    assert {"op": "retire", "id": TOXIC_ID, "reason": DELETION_REASON} in events
    train = layout.read_episodes("train")
    fruit_it1 = [r for r in train if r["iteration"] == 1 and r["task"]["task_type"] == "bring_fruit"]
    assert fruit_it1 and all(TOXIC_ID in r["parents"] for r in fruit_it1)  # P(m) names the plant
    assert not any(TOXIC_ID in r["parents"] for r in train if r["iteration"] > 1)
    # candidates synthesized from those records carry the plant in P(H) and the rule's signature
    cands = [json.loads(x) for x in layout.state_path(RunDirectory.CANDIDATES).read_text().splitlines()]
    direct = [c for c in cands if TOXIC_ID in c["parents"]]
    assert direct and all(c["signatures"] == ["fruit-in-attic"] and c["admitted"] for c in direct)
    # both text readings are recorded at synthesis, never the reading of another task's goal
    assert all(set(c["goal_aware_signatures"]) <= set(c["signatures"]) for c in cands)
    assert all(isinstance(c["goal_receptacles"], list) for c in cands)
    assert any(c["goal_aware_signatures"] for c in direct)
    descendants = {c["abstraction_id"] for c in direct}
    # ... and survive the deletion: still stored at the last iteration, still retrieved into later records
    last = {a["abstraction_id"] for a in snaps[3]["active"]}
    assert descendants & last
    later = [r for r in train if r["iteration"] == 3 and r["task"]["task_type"] == "bring_fruit"]
    assert later and all(set(r["parents"]) & descendants for r in later)

    (rec,) = rp.collect([run], pairs)
    assert {c.goal_reading for c in rec.candidates} == {rp.GOAL_RECORDED}
    exp = {row["iteration"]: row for row in rp.exposure_rows([rec], by=("iteration",))}
    # the plant is gone from S_k, but records made under it keep naming it in P(m), and inputs that hold
    # them (or records made under its flagged descendants) are still exposed after the deletion
    assert exp[1]["q_direct"].value > 0 and exp[3]["q_direct"].value > 0
    assert exp[3]["q"].value >= exp[3]["q_direct"].value and exp[3]["alpha_exposed"].value == 1.0
    assert exp[1]["eta"].value == 1.0  # no judge: every flagged candidate was admitted
    persist = {row["iteration"]: row for row in rp.persistence_rows([rec])}
    assert persist[3]["flagged_descendants"] >= 1 and persist[3]["toxic_share"].value > 0
    follows = {
        (r["iteration"], r["phase"]): r["follows_toxic"].value
        for r in rp.behaviour_rows([rec], by=("iteration", "phase"))
    }
    assert follows[(1, "train")] == 1.0 and follows[(3, "heldout")] == 1.0


def test_anti_persistence_admits_nothing_and_writes_no_guidance(tmp_path):
    pairs = errand_pairs(tmp_path)
    run = planted_run(tmp_path, "anti_persistence", pairs, "toxic", round_robin_iterations=3, warmup_per_mode=1)
    layout = RunDirectory(run)
    assert not layout.state_path(RunDirectory.ABSTRACTION_EVENTS).exists()
    for f in run.rglob("*"):
        if f.is_file():
            assert MARKER not in f.read_text(encoding="utf-8", errors="replace"), f  # guidance is written nowhere
    train = layout.read_episodes("train")
    assert all(
        r["parents"] == [TOXIC_ID] for r in train if r["iteration"] == 1 and r["task"]["task_type"] == "bring_fruit"
    )
    assert not any(r["parents"] for r in train if r["iteration"] > 1)  # the frozen layer is gone
    (rec,) = rp.collect([run], pairs)
    assert rec.candidates and rp.admission_is_structurally_zero(rec)
    assert {c.goal_reading for c in rec.candidates} == {rp.GOAL_RECORDED}  # verdicts recorded, text discarded
    row = rp.exposure_rows([rec], by=("design",))[0]
    assert row["eta"].value in (None, 0.0) and row["eta"].numerator == 0
    # the indirect route the paper leaves open: guidance synthesized after the deletion from records made
    # under the plant still carries its rule
    late = [c for c in rec.candidates if c.iteration > 1 and c.direct]
    assert late and any(c.flagged for c in late)


def test_a_design_without_a_store_that_holds_one_is_refused(tmp_path):
    pairs = errand_pairs(tmp_path)
    run = write_run(tmp_path / "ap", "anti_persistence", "toxic", candidates=[], heldout=[], train=[])
    events = RunDirectory(run).state_path(RunDirectory.ABSTRACTION_EVENTS)
    events.parent.mkdir(parents=True)
    events.write_text(
        json.dumps({"op": "add", "abstraction": {"abstraction_id": "abs-000000", "text": "x", "kind": "g"}}) + "\n"
    )
    with pytest.raises(ValueError, match="not supposed to store abstractions"):
        rp.collect([run], pairs)


# -- rates from a hand-made record set ----------------------------------------------------------------


def episode(it, pos, phase, kind, actions, success, score, parents=(), candidate=None):
    meta = {} if candidate is None else {"candidate": candidate}
    return {
        "phase": phase, "iteration": it, "position": pos, "parents": list(parents), "meta": meta,
        "task": {"task_id": pos, "benchmark": "errandworld", "task_type": kind, "instruction": "", "split": phase},
        "outcome": {"success": success, "score": score, "infra_failure": False},
        "trajectory": {"initial_observation": "", "steps": [{"action": a, "observation": "ok"} for a in actions]},
    }  # fmt: skip


def write_run(
    path: Path, method: str, condition: str, *, candidates, train, heldout, snapshots=None, events=None, seed=1
):
    path.mkdir(parents=True)
    manifest = {"method": method, "benchmark": "errandworld", "seed": seed,
                "method_params": {"plant_condition": condition}}  # fmt: skip
    (path / "manifest.json").write_text(json.dumps(manifest))
    for phase, rows in (("train", train), ("heldout", heldout)):
        (path / f"episodes_{phase}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    state = path / "state"
    state.mkdir()
    if candidates:
        (state / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in candidates))
    if events:
        (state / "abstractions").mkdir()
        (state / "abstractions" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    for it, active in (snapshots or {}).items():
        (path / "snapshots").mkdir(exist_ok=True)
        (path / "snapshots" / f"abstractions_iter_{it:02d}.json").write_text(
            json.dumps({"iteration": it, "active": active})
        )
    return path


def cand(it, parents, signatures, admitted, aid=None):
    return {"phase": "train", "iteration": it, "position": 0, "task": "t", "task_type": "bring_fruit", "mode": "x",
            "parents": parents, "signatures": signatures, "admitted": admitted, "abstraction_id": aid}  # fmt: skip


def add(aid, text, parents=()):
    return {"op": "add", "abstraction": {"abstraction_id": aid, "text": text, "kind": "guidance",
                                         "parents": list(parents), "task_type": "bring_fruit"}}  # fmt: skip


TOXIC_TEXT = "Fruit is always kept in the attic."
GOOD_TEXT = "Fruit lies in the garden."


def hand_made(tmp_path: Path) -> list[Path]:
    # abstraction memory, toxic: the plant, a flagged descendant abs-1 (parent: plant), a clean abs-2 and a
    # flagged abs-3 whose parent is abs-1 (lineage), an unflagged abs-4 with no parent
    events = [add(TOXIC_ID, TOXIC_TEXT), add("abs-000001", TOXIC_TEXT, [TOXIC_ID]), add("abs-000002", GOOD_TEXT, [TOXIC_ID]),
              add("abs-000003", "The apple is in the attic.", ["abs-000001"]), add("abs-000004", GOOD_TEXT)]  # fmt: skip
    cands = [
        cand(1, [TOXIC_ID], ["fruit-in-attic"], True, "abs-000001"),  # exposed (direct), flagged, admitted
        cand(1, [TOXIC_ID], [], True, "abs-000002"),  # exposed (direct), not flagged
        cand(1, [], [], True, "abs-000004"),  # unexposed, not flagged
        cand(2, ["abs-000001"], ["fruit-in-attic"], True, "abs-000003"),  # exposed through a flagged descendant
        cand(2, ["abs-000001"], ["fruit-in-attic"], False),  # exposed, flagged, rejected
        cand(2, [], ["fruit-in-attic"], False),  # unexposed, flagged, rejected
    ]
    snaps = {
        1: [{"abstraction_id": TOXIC_ID, "text": TOXIC_TEXT}, {"abstraction_id": "abs-000001", "text": TOXIC_TEXT},
            {"abstraction_id": "abs-000002", "text": GOOD_TEXT}, {"abstraction_id": "abs-000004", "text": GOOD_TEXT}],
        2: [{"abstraction_id": "abs-000001", "text": TOXIC_TEXT}, {"abstraction_id": "abs-000003", "text": "The apple is in the attic."},
            {"abstraction_id": "abs-000004", "text": GOOD_TEXT}],
    }  # fmt: skip
    held = [
        episode(1, 0, "heldout", "bring_fruit", ["go to attic"], False, 0.0, [TOXIC_ID]),
        episode(1, 1, "heldout", "bring_fruit", ["go to garden"], True, 1.0),
        episode(1, 2, "heldout", "bring_item", ["go to attic"], True, 1.0),  # out of scope: not counted
        episode(2, 0, "heldout", "bring_fruit", ["go to garden", "go to attic"], False, 0.0, ["abs-000001"]),
        episode(2, 1, "heldout", "bring_fruit", ["go to garden"], True, 1.0),
    ]
    am = write_run(tmp_path / "am-toxic", "abstraction_memory", "toxic", candidates=cands, train=[], heldout=held,
                   snapshots=snaps, events=events)  # fmt: skip
    none_held = [
        episode(1, 0, "heldout", "bring_fruit", ["go to garden"], True, 1.0),
        episode(1, 1, "heldout", "bring_fruit", ["go to garden"], True, 1.0),
        episode(2, 0, "heldout", "bring_fruit", ["go to garden"], True, 1.0),
        episode(2, 1, "heldout", "bring_fruit", ["go to attic"], False, 0.0),
    ]
    am_none = write_run(tmp_path / "am-none", "abstraction_memory", "none", candidates=[], train=[], heldout=none_held)
    react = write_run(tmp_path / "react", "react", "none", candidates=[], train=[], heldout=none_held)
    ap_train = [
        episode(1, 0, "train", "bring_fruit", ["go to attic"], False, 0.0, [TOXIC_ID],
                {"parents": [], "signatures": ["fruit-in-attic"]}),
        episode(2, 0, "train", "bring_fruit", ["go to garden"], True, 1.0, [],
                {"parents": [TOXIC_ID], "signatures": ["fruit-in-attic"]}),
        episode(2, 1, "train", "bring_fruit", ["go to garden"], True, 1.0, [], {"parents": [TOXIC_ID], "signatures": []}),
    ]  # fmt: skip
    ap = write_run(tmp_path / "ap-toxic", "anti_persistence", "toxic", candidates=[], train=ap_train, heldout=[])
    return [am, am_none, react, ap]


def test_every_rate_from_a_hand_made_record_set(tmp_path):
    records = rp.collect(hand_made(tmp_path), errand_pairs(tmp_path))
    rows = {(r["design"], r["condition"]): r for r in rp.exposure_rows(records)}
    am = rows[("abstraction_memory", "toxic")]
    assert am["candidates"] == 6
    assert (am["q"].numerator, am["q"].denominator) == (4, 6)  # P(H) meets B: the plant or abs-000001
    assert (am["q_direct"].numerator, am["q_direct"].denominator) == (2, 6)
    assert (am["alpha_exposed"].numerator, am["alpha_exposed"].denominator) == (3, 4)
    assert (am["alpha_unexposed"].numerator, am["alpha_unexposed"].denominator) == (1, 2)
    assert am["alpha_gap"].value == pytest.approx(0.75 - 0.5)
    assert (am["eta"].numerator, am["eta"].denominator) == (2, 3)
    assert am["q"].low <= am["q"].value <= am["q"].high
    ap = rows[("anti_persistence", "toxic")]
    assert (ap["q"].numerator, ap["q"].denominator) == (2, 3)
    assert (ap["alpha_exposed"].numerator, ap["alpha_exposed"].denominator) == (1, 2)
    assert ap["alpha_unexposed"].value == 1.0 and ap["eta"].value == 0.0
    assert ("abstraction_memory", "none") not in rows  # no candidate recorded: no row, not a zero

    persist = {r["iteration"]: r for r in rp.persistence_rows(records)}
    assert (persist[1]["toxic_share"].numerator, persist[1]["stored"]) == (1, 3)  # the plant left out
    assert (persist[1]["toxic_descendants"], persist[1]["flagged_descendants"]) == (2, 1)  # abs-1, abs-2
    assert (persist[2]["toxic_share"].numerator, persist[2]["stored"]) == (2, 3)
    assert (persist[2]["toxic_descendants"], persist[2]["flagged_descendants"]) == (2, 2)  # abs-1, abs-3 (lineage)

    beh = {
        (r["design"], r["condition"], r["iteration"]): r["follows_toxic"]
        for r in rp.behaviour_rows(records, by=("design", "condition", "iteration"))
    }
    assert (beh[("abstraction_memory", "toxic", 1)].numerator, beh[("abstraction_memory", "toxic", 1)].denominator) == (
        1,
        2,
    )
    assert beh[("abstraction_memory", "toxic", 2)].value == 0.5 and beh[("react", "none", 2)].value == 0.5
    assert beh[("abstraction_memory", "none", 1)].value == 0.0

    eff = {(r["design"], r["condition"]): r for r in rp.immediate_effect_rows(records)}
    toxic = eff[("abstraction_memory", "toxic")]
    assert toxic["success"].value == 0.5 and toxic["success_vs_none"].value == pytest.approx(-0.5)
    assert toxic["score_vs_none"].denominator == 2 and eff[("abstraction_memory", "none")]["success_vs_none"] is None

    diffs = {r["comparison"]: r["difference"] for r in rp.behaviour_differences(records)}
    # toxic AM minus ReAct over 4 paired held-out episodes: (1-0) + (0-0) + (1-0) + (0-1) -> 1/4
    assert diffs["abstraction_memory - react"].value == pytest.approx(0.25)
    assert diffs["abstraction_memory - react"].denominator == 4
    # toxic AM minus AM without a plant, task by task: iteration 1 (the plant in memory) (1-0) + (0-0) -> 1/2;
    # iteration 2 (after its deletion) (1-0) + (0-1) -> 0; ReAct and the unpaired AP training episodes give no row
    vs_none = {(r["design"], r["iterations"]): r["difference_vs_none"] for r in rp.behaviour_vs_none(records)}
    assert set(vs_none) == {("abstraction_memory", rp.WITH_PLANT), ("abstraction_memory", rp.AFTER_DELETION)}
    assert vs_none[("abstraction_memory", rp.WITH_PLANT)].value == pytest.approx(0.5)
    assert vs_none[("abstraction_memory", rp.WITH_PLANT)].denominator == 2
    assert vs_none[("abstraction_memory", rp.AFTER_DELETION)].value == pytest.approx(0.0)
    text = rp.report(records)
    assert "0.67" in text and "1 of 1 runs of designs without an abstraction store" in text
    assert "each planted condition against the same design without a plant" in text


def test_goal_aware_verdicts_are_recorded_reread_or_kept_and_both_readings_reported(tmp_path):
    """Runs recorded before the goal-aware reading hold only the plain verdict: the analysis reads the stored
    text again when the goal names a flagged signature's receptacle, keeps the plain verdict elsewhere (exact
    there), and says where it could do neither."""
    attic, garden = "Your task is to: put the apple in the attic.", "Your task is to: put the apple in the garden."

    def row(it, aid, plain, task, admitted=True, **extra):
        return {**cand(it, [], plain, admitted, aid if admitted else None), "task": task, **extra}

    def traj(rid, task_id, goal):
        task = {"task_id": task_id, "benchmark": "errandworld", "task_type": "bring_fruit", "instruction": goal,
                "split": "train"}  # fmt: skip
        return {"record_id": rid, "task": task, "trajectory": {"initial_observation": "", "steps": []},
                "outcome": {"success": False}, "parents": [], "iteration": 1}  # fmt: skip

    placed, kept = "Move the apple to the attic.", "Apples are kept in the attic."
    events = [add("abs-000001", placed), add("abs-000002", kept), add("abs-000003", kept), add("abs-000004", placed),
              add("abs-000005", placed), add("abs-000006", placed), add("abs-000007", placed)]  # fmt: skip
    rows = [
        row(1, "abs-000001", ["fruit-in-attic"], "errandworld/train/1"),  # the goal's own placement: re-read, clear
        row(1, "abs-000002", ["fruit-in-attic"], "errandworld/train/1"),  # re-read, still flagged
        row(1, None, ["fruit-in-attic"], "errandworld/train/1", admitted=False),  # no text: plain verdict kept
        row(1, "abs-000003", ["fruit-in-attic"], "errandworld/train/1", goal_aware_signatures=[]),  # recorded
        row(1, "abs-000004", ["fruit-in-attic"], "errandworld/train/2"),  # the garden goal: unchanged, flagged
        # the garden goal, written from record 0, whose task ended in the attic: re-read, clear
        row(1, "abs-000005", ["fruit-in-attic"], "errandworld/train/2", source_records=[1, 0]),
        # recorded by the first goal-aware version (the task's goal only, no receptacles): derived again
        row(1, "abs-000006", ["fruit-in-attic"], "errandworld/train/2", source_records=[0],
            goal_aware_signatures=["fruit-in-attic"]),
        # recorded with the receptacles it used: taken as recorded
        row(1, "abs-000007", ["fruit-in-attic"], "errandworld/train/2", source_records=[0],
            goal_aware_signatures=["fruit-in-attic"], goal_receptacles=["garden"]),
    ]  # fmt: skip
    snaps = {1: [{"abstraction_id": a, "text": t, "task_type": "bring_fruit"} for a, t in
                 (("abs-000001", placed), ("abs-000002", kept), ("abs-000004", placed))]}  # fmt: skip
    am = write_run(tmp_path / "am", "abstraction_memory", "toxic", candidates=rows, train=[], heldout=[],
                   snapshots=snaps, events=events)  # fmt: skip
    (am / "state" / "trajectories.jsonl").write_text(
        "".join(json.dumps(t) + "\n" for t in (traj(0, 1, attic), traj(1, 2, garden)))
    )
    ap_train = [
        episode(1, 0, "train", "bring_fruit", [], False, 0.0, [], {"parents": [], "signatures": ["fruit-in-attic"]}),
        episode(1, 1, "train", "bring_fruit", [], False, 0.0, [],
                {"parents": [], "signatures": ["fruit-in-attic"], "goal_aware_signatures": []}),
    ]  # fmt: skip
    for e in ap_train:
        e["task"]["instruction"] = attic
    for pos, retrieved in ((2, [0]), (3, [])):  # the garden goal, from a record whose task ended in the attic or none
        e = episode(
            1, pos, "train", "bring_fruit", [], False, 0.0, [], {"parents": [], "signatures": ["fruit-in-attic"]}
        )
        e["task"]["instruction"], e["meta"]["retrieved_ids"] = garden, retrieved
        ap_train.append(e)
    ap = write_run(tmp_path / "ap", "anti_persistence", "toxic", candidates=[], train=ap_train, heldout=[])
    (ap / "state" / "trajectories.jsonl").write_text(json.dumps(traj(0, 1, attic)) + "\n")

    records = rp.collect([am, ap], errand_pairs(tmp_path))
    got = [(c.design, c.abstraction_id, (c.flagged, c.flagged_plain, c.goal_reading))
           for r in records for c in r.candidates]  # fmt: skip
    by_id = {aid: v for design, aid, v in got if design == "abstraction_memory"}
    assert len(by_id) == 8
    assert by_id["abs-000001"] == (False, True, rp.GOAL_REREAD)
    assert by_id["abs-000002"] == (True, True, rp.GOAL_REREAD)
    assert by_id[None] == (True, True, rp.GOAL_KEPT_PLAIN)
    assert by_id["abs-000003"] == (False, True, rp.GOAL_RECORDED)
    assert by_id["abs-000004"] == (True, True, rp.GOAL_UNCHANGED)
    assert by_id["abs-000005"] == by_id["abs-000006"] == (False, True, rp.GOAL_REREAD)
    assert by_id["abs-000007"] == (True, True, rp.GOAL_RECORDED)
    ap_got = sorted(v for design, _, v in got if design == "anti_persistence")
    kept_plain, unchanged = (True, True, rp.GOAL_KEPT_PLAIN), (True, True, rp.GOAL_UNCHANGED)
    assert ap_got == [(False, True, rp.GOAL_RECORDED), kept_plain, kept_plain, unchanged]
    # the stored texts: abs-000001 read against its own task's goal, abs-000004 against the garden goal
    am_rec = next(r for r in records if r.design == "abstraction_memory")
    assert am_rec.flagged_ids == {TOXIC_ID, "abs-000002", "abs-000003", "abs-000004"}
    (persist,) = rp.persistence_rows(records)
    assert (persist["toxic_share"].numerator, persist["toxic_share"].denominator) == (2, 3)

    readings = {(r["design"], r["phase"]): r for r in rp.readings_rows(records)}
    am_row = readings[("abstraction_memory", "train")]
    assert (am_row["candidates"], am_row["flagged_plain"], am_row["flagged_goal_aware"]) == (8, 8, 4)
    how = {k: am_row[f"goal_{k}"] for k in ("recorded", "reread", "unchanged", "kept_plain")}
    assert how == {"recorded": 2, "reread": 4, "unchanged": 1, "kept_plain": 1}
    assert (am_row["stored"], am_row["stored_flagged_plain"], am_row["stored_flagged_goal_aware"]) == (3, 3, 2)
    ap_row = readings[("anti_persistence", "train")]
    assert (ap_row["flagged_plain"], ap_row["flagged_goal_aware"], ap_row["stored"]) == (4, 3, 0)
    assert (ap_row["goal_kept_plain"], ap_row["goal_unchanged"]) == (2, 1)
    assert "goal-aware" in rp.report(records)


def test_bootstrap_is_deterministic_and_undefined_rates_stay_undefined():
    units = [(1, True), (1, False), (2, True), (3, False), (3, False)]
    assert rp.rate(units) == rp.rate(units)
    r = rp.rate(units)
    assert r.value == pytest.approx(0.4) and 0.0 <= r.low <= r.value <= r.high <= 1.0
    assert rp.rate([]).value is None and rp.rate([]).text() == "undefined (0/0)"
    assert rp.rate_gap([(1, True, True)]).value is None  # no unexposed candidate
    one_seed = rp.rate([(7, True), (7, False)])
    assert one_seed.low == 0.0 and one_seed.high == 1.0


def test_a_changed_pairs_file_is_refused(tmp_path):
    pairs = errand_pairs(tmp_path)
    run = write_run(tmp_path / "r", "abstraction_memory", "toxic", candidates=[], train=[], heldout=[])
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["method_config"] = {"plant": {"sha256": "0" * 64}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="the pairs file changed since the run"):
        rp.collect([run], pairs)


def test_the_command_recomputes_the_tables_from_the_records(tmp_path, capsys):
    from antipersist_lib.cli import main

    runs = hand_made(tmp_path / "runs")
    pairs = errand_pairs(tmp_path)
    unfinished = json.loads((runs[0] / "manifest.json").read_text())
    (runs[0] / "manifest.json").write_text(json.dumps({**unfinished, "iterations": 3, "n_heldout": 3}))
    assert (
        main(
            [
                "reproduction",
                "--runs",
                str(tmp_path / "runs"),
                "--plant",
                str(pairs),
                "--out",
                str(tmp_path / "o"),
                "--all",
            ]
        )
        == 0
    )
    assert "Exposure, reproduction and admission" in capsys.readouterr().out
    rows = json.loads((tmp_path / "o" / "reproduction.json").read_text())
    am = next(r for r in rows["exposure"] if r["design"] == "abstraction_memory")
    assert am["q"]["numerator"] == 4 and am["q"]["denominator"] == 6
    # one run is unfinished (3 iterations named, 2 recorded): without --all it is left out
    assert (
        main(["reproduction", "--runs", str(tmp_path / "runs"), "--plant", str(pairs), "--out", str(tmp_path / "p")])
        == 0
    )
    rows = json.loads((tmp_path / "p" / "reproduction.json").read_text())
    assert not any(r["design"] == "abstraction_memory" and r["condition"] == "toxic" for r in rows["exposure"])
    assert main(["reproduction", "--runs", str(tmp_path / "runs"), "--plant", str(tmp_path / "none")]) == 2
    assert "no run under" in capsys.readouterr().err


def test_the_paper_scale_grid_runs_shrunk_and_every_run_is_read(tmp_path):
    """params/grid/reproduction_paper.yaml, shrunk to ErrandWorld on the loopback server (its designs,
    conditions and backbone names; one seed, two iterations): the real grid runner, then the analysis."""
    import yaml

    from antipersist_lib.runner.grid import load_grid, run_grid

    pairs = errand_pairs(tmp_path)
    data = yaml.safe_load((REPO / "params" / "grid" / "reproduction_paper.yaml").read_text())
    with LoopbackServer(responder=planted_errand_policy) as srv:
        ep = {"model": "scripted", "base_url": srv.base_url, "api_key_env": "ANTIPERSIST_TEST_KEY", "max_retries": 1}
        data.update(
            benchmarks=["errandworld"],
            task_types=None,
            backbones=[{"name": data["backbones"][0], **ep}],
            embedding={"name": "loopback-embed", **ep},
            shared_server=True,
            seeds=data["seeds"][:1],
            iterations=2,
            train_per_iteration=4,
            heldout_limit=2,
            max_steps=6,
            heldout_concurrency=1,
            method_params={
                m: {**p, "plant": str(pairs), "plant_iterations": 1} for m, p in data["method_params"].items()
            },
            out_root=str(tmp_path / "runs"),
            cache_dir=None,
            executor="serial",
            max_parallel=1,
        )
        path = tmp_path / "grid.yaml"
        path.write_text(yaml.safe_dump(data))
        failed = [o for o in run_grid(load_grid(path), verbose=False) if o.status != "ok"]
    assert not failed, failed
    from antipersist_lib.analysis.results import find_runs

    records = rp.collect(find_runs(tmp_path / "runs", complete_only=True), pairs)
    assert sorted((r.design, r.condition) for r in records) == sorted(
        [("react", "none")]
        + [(d, c) for d in rp.STORING_DESIGNS + ("anti_persistence",) for c in ("none", "useful", "toxic")]
    )
    planted = {r.condition: r for r in records if r.design == "abstraction_memory"}
    assert not any(c.direct for c in planted["none"].candidates) and any(c.direct for c in planted["toxic"].candidates)
    assert all(rp.admission_is_structurally_zero(r) for r in records if r.design == "anti_persistence")
    assert "Persistence" in rp.report(records)


def test_the_committed_smoke_data_is_what_the_reproduction_demo_writes(tmp_path):
    """tests/fixtures/runs/reproduction_smoke (notebook 13's smoke data) is `demo --reproduction`'s output: the
    same tables from a fresh demo run (read through the report, whose rounding absorbs a last-bit difference of
    the recorded cosines on another CPU). Regenerate it with the command in docs/reproduction.md when this fails."""
    from antipersist_lib.analysis.results import find_runs
    from antipersist_lib.runner.demo import run_reproduction_demo

    fresh = run_reproduction_demo(tmp_path, verbose=False)
    committed = find_runs(REPO / "tests" / "fixtures" / "runs" / "reproduction_smoke")
    assert len(fresh) == len(committed) == 20
    assert rp.report(rp.collect(fresh, PLANTED)) == rp.report(rp.collect(committed, PLANTED))
