"""AutoRefine baseline (Appendix D.3): score, multi-query MMR retrieval, metadata credit,
contrastive evolver and its fallback parser, percentile pruning, freezing and reloading.

Everything runs over real HTTP against the loopback server. Query and skill embeddings are
controlled: the server's embedder maps known strings to chosen unit vectors in R^6 (others to
the zero vector), so every similarity below can be computed by hand.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from antipersist_lib.core.agent import EpisodeResult
from antipersist_lib.errors import FrozenStateError
from antipersist_lib.methods import make_method
from antipersist_lib.methods.autorefine import AutoRefine
from antipersist_lib.methods.autorefine_prompts import (
    EVOLVER_PREAMBLE_GENERIC,
    EVOLVER_PREAMBLES,
    parse_rewrite,
    parse_skill_array,
)
from antipersist_lib.methods.autorefine_skills import assign_names, next_dyn_index, normalize_skill, utility_score
from antipersist_lib.methods.base import MethodContext, TaskContext
from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.testing.loopback_server import ROUTE_CHAT, ROUTE_EMBEDDINGS, ScriptedResponder

DIM = 6


def e(*pairs: tuple[int, float]) -> list[float]:
    """Vector with the given (axis, value) entries; axes are 1-based."""
    v = [0.0] * DIM
    for axis, value in pairs:
        v[axis - 1] = value
    return v


def unit_mix(axis_a: int, a: float, axis_b: int) -> list[float]:
    """a * e_{axis_a} + sqrt(1 - a^2) * e_{axis_b} (a unit vector with cosine a to e_{axis_a})."""
    return e((axis_a, a), (axis_b, math.sqrt(1 - a * a)))


# query strings -> basis vectors: description e1, strategy e2, pitfall e3, actions e4
QUERY_VECS = {"DESC": e((1, 1.0)), "STRAT": e((2, 1.0)), "PIT": e((3, 1.0)), "ACT": e((4, 1.0))}
REWRITE_OK = "Strategy: STRAT\nPitfall: PIT\nActions: ACT"
REWRITE_MARK = "Rewrite the task as three short search queries"
EVOLVER_MARK = "=== Failed episodes ==="


def embedder_for(table: dict[str, list[float]]):
    def fn(text: str) -> list[float]:
        return table.get(text, [0.0] * DIM)

    return fn


def responder(rewrite: str = REWRITE_OK, evolver: str = "[]") -> ScriptedResponder:
    return ScriptedResponder([(REWRITE_MARK, rewrite), (EVOLVER_MARK, evolver)], default="OK")


def method(c, tmp_path: Path, benchmark: str = "alfworld", **params) -> AutoRefine:
    ctx = MethodContext(
        llm=c.llm, embedder=c.embedder, state_dir=tmp_path / "state", seed=7, benchmark=benchmark, fsync=False
    )
    return AutoRefine(ctx, **params)


def put(m: AutoRefine, name: str, vec, kind: str = "general", task_type: str | None = None, t: int = 0):
    return m.store.add(
        f"content of {name}", kind=kind, task_type=task_type, name=name, embedding=vec, created_iteration=t
    )


def task(i: int, task_type: str = "clean", instruction: str = "DESC") -> Task:
    return Task(task_id=i, benchmark="alfworld", task_type=task_type, instruction=instruction)


def episode(success: bool, obs: str = "You are in a room.", infra: bool = False) -> EpisodeResult:
    traj = Trajectory(obs, (Step("look", "You see a desk."),))
    return EpisodeResult(traj, EpisodeOutcome(success=success, score=float(success), n_steps=1, infra_failure=infra), 1)


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def chat_bodies(c, mark: str) -> list[dict]:
    return [
        r["body"] for r in c.server.requests_for(ROUTE_CHAT) if any(mark in m["content"] for m in r["body"]["messages"])
    ]


# ---------------------------------------------------------------------------------------------
# (i) score
# ---------------------------------------------------------------------------------------------


def test_score_by_hand():
    assert utility_score(4, 3) == pytest.approx(3 / 4.001 * math.log(5))
    assert utility_score(4, 3) == pytest.approx(1.2067767401)
    assert utility_score(3, 1) == pytest.approx(0.4619441390)
    assert utility_score(5, 5) == pytest.approx(1.7914011890)
    assert utility_score(10, 0) == 0.0
    assert utility_score(0, 0) == 0.0
    # frequency discount: same effectiveness, more retrievals -> higher score
    assert utility_score(1, 1) < utility_score(2, 2) < utility_score(8, 8)


# ---------------------------------------------------------------------------------------------
# (ii) retrieval
# ---------------------------------------------------------------------------------------------


def retrieval_library(m: AutoRefine) -> dict[str, str]:
    """rel (max cosine over DESC/STRAT/PIT/ACT), by hand:
    A 1.0 (DESC); A2 cos5deg = 0.9962 (DESC), cos(A, A2) = 0.9962; B 0.8 (STRAT), cos(A, B) = 0;
    C 0.29 (below the floor); D 0.31 (PIT, task 'clean'); E 1.0 but task type 'heat';
    F 0.5 (ACT, task 'clean')."""
    ids = {}
    ids["A"] = put(m, "a", e((1, 1.0))).abstraction_id
    ids["A2"] = put(m, "a2", e((1, math.cos(math.radians(5))), (5, math.sin(math.radians(5))))).abstraction_id
    ids["B"] = put(m, "b", e((2, 0.8), (6, 0.6)), kind="mistake").abstraction_id
    ids["C"] = put(m, "c", unit_mix(1, 0.29, 5)).abstraction_id
    ids["D"] = put(m, "d", unit_mix(3, 0.31, 6), kind="task", task_type="clean").abstraction_id
    ids["E"] = put(m, "e", e((1, 1.0)), kind="task", task_type="heat").abstraction_id
    ids["F"] = put(m, "f", unit_mix(4, 0.5, 6), kind="task", task_type="clean").abstraction_id
    return ids


def test_retrieval_floor_candidates_and_mmr_order(make_clients, tmp_path):
    c = make_clients(responder(), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    ids = retrieval_library(m)
    ctx = m.prepare(task(0), "You are in a room.", phase="train", iteration=0, position=0)
    # MMR by hand (lambda 0.7): A first; then B 0.7*0.8 = 0.56 beats A2 0.7*0.9962 - 0.3*0.9962 = 0.398;
    # then A2 (0.398) beats F (0.35 - 0.3*cos(F,B)=0.52 -> 0.194) and D (0.217 - 0.3*0.570 = 0.046);
    # then F, then D. C (0.29 < 0.30) and E (other task type) are never candidates.
    want = [ids[k] for k in ("A", "B", "A2", "F", "D")]
    assert list(ctx.parents) == want
    assert ctx.meta["injected"] == want
    assert ctx.meta["relevance"] == pytest.approx([1.0, 0.8, math.cos(math.radians(5)), 0.5, 0.31], abs=1e-5)
    assert ctx.meta["n_candidates"] == 6  # A A2 B C (general/mistake) + D F (task 'clean'); not E
    assert ctx.meta["rewrite_ok"] is True
    assert ctx.other_calls == 1 and ctx.synthesis_calls == 0
    block = ctx.blocks[0]
    assert block.startswith("## Skills")
    assert block.index("### a\n") < block.index("### b\n") < block.index("### a2\n")
    assert "### c\n" not in block and "### e\n" not in block
    # exactly one rewrite call and one embedding call carrying the four queries
    assert c.ledger.count("query_rewrite") == 1
    assert c.ledger.count("embedding") == 1
    assert c.server.requests_for(ROUTE_EMBEDDINGS)[-1]["body"]["input"] == ["DESC", "STRAT", "PIT", "ACT"]
    assert ctx.embedding is not None and np.allclose(ctx.embedding, QUERY_VECS["DESC"])


def test_top_k_and_mmr_prefers_diverse_skill(make_clients, tmp_path):
    c = make_clients(responder(), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path, top_k=2)
    ids = retrieval_library(m)
    ctx = m.prepare(task(0), "obs", phase="train", iteration=0, position=0)
    assert list(ctx.parents) == [ids["A"], ids["B"]]  # not the near-duplicate A2
    m.close()
    # lambda = 1 is pure relevance: the near-duplicate comes second
    c2 = make_clients(responder(), embedder=embedder_for(QUERY_VECS))
    m2 = method(c2, tmp_path / "pure", top_k=2, mmr_lambda=1.0)
    ids2 = retrieval_library(m2)
    ctx2 = m2.prepare(task(0), "obs", phase="train", iteration=0, position=0)
    assert list(ctx2.parents) == [ids2["A"], ids2["A2"]]


def test_other_task_type_sees_its_own_task_skills(make_clients, tmp_path):
    c = make_clients(responder(), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    ids = retrieval_library(m)
    ctx = m.prepare(task(0, task_type="heat"), "obs", phase="train", iteration=0, position=0)
    assert ids["E"] in ctx.parents
    assert ids["D"] not in ctx.parents and ids["F"] not in ctx.parents
    assert ctx.meta["n_candidates"] == 5  # A A2 B C E


def test_rewrite_garbage_falls_back_to_description(make_clients, tmp_path):
    c = make_clients(responder(rewrite="Sorry, I can't do that."), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    ids = retrieval_library(m)
    ctx = m.prepare(task(0), "obs", phase="train", iteration=0, position=0)
    # only DESC is embedded: A (1.0) and A2 (0.996) pass the floor; B, D, F need the rewritten queries
    assert list(ctx.parents) == [ids["A"], ids["A2"]]
    assert ctx.meta["rewrite_ok"] is False and ctx.meta["n_queries"] == 1
    assert c.server.requests_for(ROUTE_EMBEDDINGS)[-1]["body"]["input"] == ["DESC"]
    assert c.ledger.count("query_rewrite") == 1 and c.ledger.count("embedding") == 1


def test_rewrite_json_and_empty_store(make_clients, tmp_path):
    c = make_clients(
        responder(rewrite='```json\n{"strategy": "STRAT", "pitfall": "PIT", "actions": "ACT"}\n```'),
        embedder=embedder_for(QUERY_VECS),
    )
    m = method(c, tmp_path)
    ctx = m.prepare(task(0), "obs", phase="train", iteration=0, position=0)  # nothing stored yet
    assert ctx.blocks == [] and ctx.parents == () and ctx.meta["rewrite_ok"] is True
    assert c.ledger.count("query_rewrite") == 1 and c.ledger.count("embedding") == 1
    assert c.server.requests_for(ROUTE_EMBEDDINGS)[-1]["body"]["input"] == ["DESC", "STRAT", "PIT", "ACT"]


def test_parse_rewrite_forms():
    assert parse_rewrite("Strategy: s\nPitfall: p\nActions: a") == {"strategy": "s", "pitfall": "p", "actions": "a"}
    assert parse_rewrite("1. **Strategy**: plan it\n2. **Pitfalls**: rushing\n3. **Action**: open drawer") == {
        "strategy": "plan it",
        "pitfall": "rushing",
        "actions": "open drawer",
    }
    assert parse_rewrite('Here: {"Strategy": "x", "Pitfall": "y", "Actions": ["go", "take"]}') == {
        "strategy": "x",
        "pitfall": "y",
        "actions": "go; take",
    }
    assert parse_rewrite("Pitfall: only this one") == {"pitfall": "only this one"}
    assert parse_rewrite("no labels at all {not json}") == {}


# ---------------------------------------------------------------------------------------------
# (v) step 3: metadata credit; held-out isolation; reload
# ---------------------------------------------------------------------------------------------


def test_metadata_credits_only_injected_skills_and_successes(make_clients, tmp_path):
    c = make_clients(responder(rewrite="garbage"), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    g = put(m, "g", e((1, 1.0))).abstraction_id
    t_clean = put(m, "t-clean", e((1, 1.0)), kind="task", task_type="clean").abstraction_id
    t_heat = put(m, "t-heat", e((1, 1.0)), kind="task", task_type="heat").abstraction_id
    plan = [(task(0, "clean"), True), (task(1, "clean"), False), (task(2, "heat"), True)]
    for pos, (tk, ok) in enumerate(plan):
        ctx = m.prepare(tk, "You are in a room.", phase="train", iteration=0, position=pos)
        m.learn(tk, ctx, episode(ok), iteration=0, position=pos)
    # nothing is credited before the end of the iteration
    assert all(m.store.stats(s).n_injected == 0 for s in (g, t_clean, t_heat))
    lines = m.retrieval_log(0)
    assert [ln["injected"] for ln in lines] == [[g, t_clean], [g, t_clean], [g, t_heat]]
    assert [ln["success"] for ln in lines] == [True, False, True]
    assert lines[0]["task_type"] == "clean" and lines[0]["description"] == "DESC"
    assert lines[0]["obs_sha256"] == hashlib.sha256(b"You are in a room.").hexdigest()[:16]
    assert [r.parents for r in m.memory] == [tuple(sorted((g, t_clean)))] * 2 + [tuple(sorted((g, t_heat)))]

    m.end_iteration(0)
    st = {s: (m.store.stats(s).n_injected, m.store.stats(s).n_success) for s in (g, t_clean, t_heat)}
    # t-clean: two injections, one success; the heat success (t-clean absent) is not credited to it
    assert st == {g: (3, 2), t_clean: (2, 1), t_heat: (1, 1)}
    assert m.scores()[g] == pytest.approx(2 / 3.001 * math.log(4))
    assert c.ledger.count("skill_evolution") == 1  # the evolver ran once (it returned [])
    meta = json.loads((tmp_path / "state" / "skills" / "metadata.json").read_text())
    by_name = {s["name"]: s for s in meta["skills"]}
    assert (by_name["t-clean"]["n_inj"], by_name["t-clean"]["n_succ"], by_name["t-clean"]["t_create"]) == (2, 1, 0)
    m.close()

    # reload: the event log restores the metadata; re-running step 3 does not credit twice
    m2 = method(c, tmp_path)
    assert {s: (m2.store.stats(s).n_injected, m2.store.stats(s).n_success) for s in st} == st
    assert len(m2.memory) == 3 and len(m2.retrieval_log(0)) == 3
    m2.end_iteration(0)
    assert {s: (m2.store.stats(s).n_injected, m2.store.stats(s).n_success) for s in st} == st
    assert c.ledger.count("skill_evolution") == 1  # the committed evolver result is reused
    # the next iteration's log starts empty (the per-iteration reset)
    assert m2.retrieval_log(1) == []


def test_infra_failures_are_not_credited(make_clients, tmp_path):
    c = make_clients(responder(rewrite="garbage"), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    g = put(m, "g", e((1, 1.0))).abstraction_id
    ctx = m.prepare(task(0), "obs", phase="train", iteration=0, position=0)
    m.learn(task(0), ctx, episode(False, infra=True), iteration=0, position=0)
    m.end_iteration(0)
    assert m.store.stats(g).n_injected == 0
    assert c.ledger.count("skill_evolution") == 0  # no usable evidence: no evolver call


def test_heldout_prepare_writes_nothing(make_clients, tmp_path):
    c = make_clients(responder(), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    ids = retrieval_library(m)
    ctx = m.prepare(task(0), "obs", phase="train", iteration=0, position=0)
    m.learn(task(0), ctx, episode(True), iteration=0, position=0)
    m.end_iteration(0)
    before = tree_digest(tmp_path / "state")
    stats_before = {s: (m.store.stats(s).n_injected, m.store.stats(s).n_success) for s in ids.values()}
    m.freeze()
    outs = [
        m.prepare(task(100 + i, split_type), "held obs", phase="heldout", iteration=0, position=i)
        for i, split_type in enumerate(("clean", "heat"))
    ]
    assert outs[0].meta["injected"] == [ids[k] for k in ("A", "B", "A2", "F", "D")]
    assert outs[0].other_calls == 1
    assert [h["injected"] for h in m.heldout_log] == [o.meta["injected"] for o in outs]
    with pytest.raises(FrozenStateError):
        m.learn(task(100), outs[0], episode(True), iteration=0, position=0)
    with pytest.raises(FrozenStateError):
        m.end_iteration(0)
    assert tree_digest(tmp_path / "state") == before
    assert {s: (m.store.stats(s).n_injected, m.store.stats(s).n_success) for s in ids.values()} == stats_before
    m.unfreeze()
    m.end_iteration(1)  # the held-out retrievals never reach the training credit
    assert {s: (m.store.stats(s).n_injected, m.store.stats(s).n_success) for s in ids.values()} == stats_before
    m.freeze()
    assert m.heldout_log == []  # a new held-out evaluation starts a new log


# ---------------------------------------------------------------------------------------------
# (iv) evolver
# ---------------------------------------------------------------------------------------------

SKILL_OK = {
    "name": "check-drawers",
    "kind": "general",
    "task_type": None,
    "content": "Open every drawer before giving up.\nWhy it works: the success opened drawer 2; the failure never did.",
}


def test_parser_stage_direct():
    skills, stage = parse_skill_array(json.dumps([SKILL_OK]))
    assert stage == "direct" and skills == [SKILL_OK]
    assert parse_skill_array("[]") == ([], "direct")
    assert parse_skill_array(json.dumps({"skills": [SKILL_OK]})) == ([SKILL_OK], "direct")


def test_parser_stage_fenced():
    text = "Here are the skills:\n```json\n" + json.dumps([SKILL_OK], indent=2) + "\n```\nDone."
    assert parse_skill_array(text) == ([SKILL_OK], "fenced")


def test_parser_stage_last_array():
    other = {**SKILL_OK, "name": "second"}
    text = (
        "I considered [1, 2] first. Draft: "
        + json.dumps([SKILL_OK])
        + "\nFinal answer: "
        + json.dumps([other])
        + " -- end"
    )
    assert parse_skill_array(text) == ([other], "last_array")


def test_parser_stage_objects_salvages_broken_array():
    good = json.dumps(SKILL_OK)
    text = "[" + good + ', {"name": "x-y", "kind": "general", "content": "cut off mid-str'
    skills, stage = parse_skill_array(text)
    assert stage == "objects" and skills == [SKILL_OK]
    # an unclosed wrapper object: the inner skills are still found
    text2 = '{"skills": [' + good + ", " + json.dumps({**SKILL_OK, "name": "b"}) + ', {"name": "c", "cont'
    skills2, stage2 = parse_skill_array(text2)
    assert stage2 == "objects" and [s["name"] for s in skills2] == ["check-drawers", "b"]
    # braces inside strings do not confuse the scanner
    tricky = {**SKILL_OK, "content": "Use {curly} text. Why it works: }{ balanced?"}
    assert parse_skill_array("junk " + json.dumps(tricky) + " {broken")[0] == [tricky]


def test_parser_total_garbage():
    assert parse_skill_array("I could not find any skills, sorry.") == ([], "none")
    assert parse_skill_array("") == ([], "none")
    assert parse_skill_array("{{{{ [[[[ ") == ([], "none")


def test_normalize_and_names():
    ok, why = normalize_skill(
        {"name": "n", "kind": "Mistakes", "task_type": "clean", "content": "x. why it works: y"}, {"clean"}
    )
    assert why is None and ok == {"name": "n", "kind": "mistake", "task_type": None, "content": "x. why it works: y"}
    assert normalize_skill({"name": "n", "content": "no section"}, set()) == (None, "no 'Why it works' section")
    assert (
        normalize_skill({"name": "n", "kind": "task", "task_type": "heat", "content": "Why it works: z"}, {"clean"})[0][
            "kind"
        ]
        == "general"
    )
    assert (
        normalize_skill({"name": "n", "kind": "task", "task_type": "clean", "content": "Why it works: z"}, {"clean"})[
            0
        ]["task_type"]
        == "clean"
    )
    assert next_dyn_index(["a", "dyn-3", "dyn-x", None]) == 4
    assert next_dyn_index([]) == 1
    named = assign_names(
        [{"name": "Bad Name"}, {"name": "good-one"}, {"name": "under_score"}, {"name": "a"}, {"name": None}],
        ["dyn-3", "a"],
    )
    assert [s["name"] for s in named] == ["dyn-4", "good-one", "dyn-5", "dyn-6", "dyn-7"]


def fill_iteration(m: AutoRefine, iteration: int, n_fail: int, n_succ: int) -> None:
    for i in range(n_fail):
        tk = task(i, instruction=f"fail task {i}")
        m.learn(
            tk,
            TaskContext(meta={"injected": [f"P-f{i}"]}),
            episode(False, obs=f"fobs {i}"),
            iteration=iteration,
            position=i,
        )
    for i in range(n_succ):
        tk = task(50 + i, instruction=f"win task {i}")
        m.learn(
            tk,
            TaskContext(meta={"injected": [f"P-s{i}"]}),
            episode(True, obs=f"sobs {i}"),
            iteration=iteration,
            position=n_fail + i,
        )


def test_evolver_end_to_end(make_clients, tmp_path):
    reply = (
        "Based on the contrast:\n```json\n"
        + json.dumps(
            [
                {
                    "name": "Check Drawers",
                    "kind": "general",
                    "content": "Open drawers. Why it works: success opened them.",
                },
                {
                    "name": "look-first",
                    "kind": "mistake",
                    "task_type": "clean",
                    "content": "Look first.\nWhy it works: failures skipped it.",
                },
                {"name": "no-why", "kind": "general", "content": "Just do it."},
                {
                    "name": "bad_name",
                    "kind": "task",
                    "task_type": "clean",
                    "content": "Rinse at the sink. why it works: contrast.",
                },
                {"name": "odd-type", "kind": "task", "task_type": "unknown", "content": "Why it works: z"},
            ]
        )
        + "\n```"
    )
    c = make_clients(responder(evolver=reply), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    put(m, "dyn-3", e((1, 1.0)))
    fill_iteration(m, 1, n_fail=6, n_succ=6)
    m.end_iteration(1)

    assert c.ledger.count("skill_evolution") == 1
    (body,) = chat_bodies(c, EVOLVER_MARK)
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert system == EVOLVER_PREAMBLES["alfworld"]
    assert user.count("--- Failure ") == 4 and user.count("--- Success ") == 4
    assert "Why it works:" in user and "dyn-3" in user  # the rule and the existing names
    assert body["max_tokens"] == 2048 and body["temperature"] == 0.0
    shown_f = [i for i in range(6) if f"Task: fail task {i}\n" in user]
    shown_s = [i for i in range(6) if f"Task: win task {i}\n" in user]
    assert len(shown_f) == 4 and len(shown_s) == 4

    new = [a for a in m.store if a.created_iteration == 1]
    assert [(a.name, a.kind, a.task_type) for a in new] == [
        ("dyn-4", "general", None),
        ("look-first", "mistake", None),
        ("dyn-5", "task", "clean"),
        ("odd-type", "general", None),
    ]
    parents = tuple(sorted({f"P-f{i}" for i in shown_f} | {f"P-s{i}" for i in shown_s}))
    shown_records = [
        r.record_id
        for r in m.memory
        if r.task.instruction in {f"fail task {i}" for i in shown_f} | {f"win task {i}" for i in shown_s}
    ]
    for a in new:
        assert a.parents == parents
        assert sorted(a.source_records) == sorted(shown_records)
        assert a.embedding is not None
        assert m.store.stats(a.abstraction_id).n_injected == 0
    assert all("Why it works" in a.text or "why it works" in a.text for a in new)
    steps = [json.loads(x) for x in (tmp_path / "state" / "autorefine_steps.jsonl").read_text().splitlines()]
    (ev,) = [s for s in steps if s["step"] == "evolve"]
    assert ev["stage"] == "fenced" and ev["rejected"] == [{"name": "no-why", "reason": "no 'Why it works' section"}]

    # the sample is seeded: a second method with the same seed shows the same episodes
    c2 = make_clients(responder(evolver="[]"), embedder=embedder_for(QUERY_VECS))
    m2 = method(c2, tmp_path / "again")
    fill_iteration(m2, 1, n_fail=6, n_succ=6)
    m2.end_iteration(1)
    (body2,) = chat_bodies(c2, EVOLVER_MARK)
    assert [i for i in range(6) if f"Task: fail task {i}\n" in body2["messages"][1]["content"]] == shown_f


def test_evolver_garbage_and_generic_preamble(make_clients, tmp_path):
    c = make_clients(
        responder(evolver="The episodes are interesting but I have nothing to add."), embedder=embedder_for(QUERY_VECS)
    )
    m = method(c, tmp_path, benchmark="errandworld")
    fill_iteration(m, 0, n_fail=1, n_succ=0)  # failures only: still one call
    m.end_iteration(0)
    assert c.ledger.count("skill_evolution") == 1 and len(m.store) == 0
    (body,) = chat_bodies(c, EVOLVER_MARK)
    assert body["messages"][0]["content"] == EVOLVER_PREAMBLE_GENERIC
    assert "=== Successful episodes ===\n(none in this round)" in body["messages"][1]["content"]


def test_evolver_only_uses_this_iterations_episodes(make_clients, tmp_path):
    c = make_clients(responder(), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    fill_iteration(m, 0, n_fail=2, n_succ=0)
    m.end_iteration(0)
    m.learn(task(99, instruction="late win"), TaskContext(), episode(True), iteration=1, position=0)
    m.end_iteration(1)
    bodies = chat_bodies(c, EVOLVER_MARK)
    assert len(bodies) == 2
    second = bodies[1]["messages"][1]["content"]
    assert "late win" in second and "fail task" not in second


# ---------------------------------------------------------------------------------------------
# (iii) pruning
# ---------------------------------------------------------------------------------------------


def pruning_library(m: AutoRefine) -> dict[str, str]:
    spec = {  # name: (n_inj, n_succ, t_create)
        "zero-old": (3, 0, 0),
        "zero-mid": (4, 0, 1),
        "zero-new": (3, 0, 2),
        "s31": (3, 1, 0),
        "s32": (3, 2, 0),
        "s33": (3, 3, 0),
        "s44": (4, 4, 0),
        "s51": (5, 1, 0),
        "s55": (5, 5, 0),
        "s63": (6, 3, 0),
        "young": (2, 0, 0),  # ineligible (n_inj < 3), score 0
    }
    ids = {}
    for name, (n_inj, n_succ, t) in spec.items():
        a = put(m, name, e((1, 1.0)), t=t)
        m.store.update_stats(a.abstraction_id, n_injected=n_inj, n_success=n_succ)
        ids[name] = a.abstraction_id
    return ids


def test_pruning_even_iterations_bottom_fifth_of_eligible(make_clients, tmp_path):
    c = make_clients(responder(), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    ids = pruning_library(m)
    state = tmp_path / "state" / "skills"
    for it in (0, 1):
        m.end_iteration(it)
        assert len(m.store) == 11 and not (state / f"metadata_iter_{it:02d}.json").exists()
    m.end_iteration(2)
    # 10 eligible -> floor(0.2 * 10) = 2 retired: three skills score 0; the two oldest go
    assert ids["zero-old"] not in m.store and ids["zero-mid"] not in m.store
    assert ids["zero-new"] in m.store and ids["young"] in m.store
    assert len(m.store) == 9
    assert "pruned at iteration 2" in m.store.retired_reason(ids["zero-old"])
    ck = json.loads((state / "metadata_iter_02.json").read_text())
    assert ck["iteration"] == 2 and sorted(ck["retired"]) == sorted([ids["zero-old"], ids["zero-mid"]])
    assert {s["id"] for s in ck["skills"]} == {a.abstraction_id for a in m.store}
    assert next(s for s in ck["skills"] if s["name"] == "s55")["score"] == pytest.approx(5 / 5.001 * math.log(6))
    m.end_iteration(3)
    assert len(m.store) == 9 and not (state / "metadata_iter_03.json").exists()
    # iteration 4: 9 eligible -> floor(1.8) = 1: zero-new (score 0) goes; young is still protected
    m.end_iteration(4)
    assert ids["zero-new"] not in m.store and ids["young"] in m.store and len(m.store) == 8
    assert c.ledger.count("skill_evolution") == 0  # no episodes, no evolver calls
    # a re-run of a pruned iteration re-applies the committed plan and retires nothing more
    m.end_iteration(4)
    assert len(m.store) == 8


def test_pruning_rounds_down(make_clients, tmp_path):
    c = make_clients(responder(), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    for i in range(4):  # 4 eligible -> floor(0.8) = 0
        a = put(m, f"k{i}", e((1, 1.0)))
        m.store.update_stats(a.abstraction_id, n_injected=3, n_success=0)
    m.end_iteration(2)
    assert len(m.store) == 4


# ---------------------------------------------------------------------------------------------
# construction, parameters, seeds, snapshots
# ---------------------------------------------------------------------------------------------


def test_params(make_clients, tmp_path):
    c = make_clients(responder(), embedder=embedder_for(QUERY_VECS))
    with pytest.raises(ValueError, match="no parameter"):
        method(c, tmp_path, budget=3)
    with pytest.raises(ValueError, match="top_k"):
        method(c, tmp_path / "x", top_k=0)
    m = method(c, tmp_path / "ok")
    d = m.describe()
    assert d["name"] == "autorefine"
    assert (
        d["eps"],
        d["similarity_floor"],
        d["mmr_lambda"],
        d["top_k"],
        d["prune_every"],
        d["prune_fraction"],
        d["prune_min_injections"],
        d["evolver_max_failures"],
        d["evolver_max_successes"],
    ) == (1e-3, 0.30, 0.7, 5, 2, 0.20, 3, 4, 4)
    ctx = MethodContext(
        llm=c.llm, embedder=c.embedder, state_dir=tmp_path / "reg", seed=0, benchmark="alfworld", fsync=False
    )
    assert isinstance(make_method("autorefine", ctx), AutoRefine)


def test_seed_skills_and_snapshot(make_clients, tmp_path):
    seeds = [
        {"name": "search-thoroughly", "kind": "general", "task_type": None, "content": "SEEDGEN"},
        {"name": "rinse-in-sink", "kind": "task", "task_type": "clean", "content": "SEEDTASK"},
    ]
    path = tmp_path / "seeds.json"
    path.write_text(json.dumps(seeds))
    table = {**QUERY_VECS, "SEEDGEN": e((1, 1.0)), "SEEDTASK": e((2, 1.0))}
    c = make_clients(responder(), embedder=embedder_for(table))
    m = method(c, tmp_path, seed_skills=str(path))
    got = [(a.name, a.kind, a.task_type, a.created_iteration) for a in m.store]
    assert got == [("search-thoroughly", "general", None, -1), ("rinse-in-sink", "task", "clean", -1)]
    ctx = m.prepare(task(0), "obs", phase="train", iteration=0, position=0)
    assert [m.store.get(i).name for i in ctx.parents] == ["search-thoroughly", "rinse-in-sink"]
    m.snapshot(0, RunDirectory(tmp_path / "run").snapshot_path(0))
    snap = json.loads((tmp_path / "run" / "snapshots" / "abstractions_iter_00.json").read_text())
    assert (
        snap["method"] == "autorefine"
        and len(snap["active"]) == 2
        and set(snap["scores"]) == {a.abstraction_id for a in m.store}
    )
    m.close()
    m2 = method(c, tmp_path, seed_skills=str(path))  # not added twice
    assert len(m2.store) == 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "Not A Slug", "kind": "general", "content": "x"}]))
    with pytest.raises(ValueError, match="slug"):
        method(c, tmp_path / "other", seed_skills=str(bad))


def test_state_survives_reconstruction(make_clients, tmp_path):
    reply = json.dumps([{"name": "new-skill", "kind": "general", "content": "Do X. Why it works: Y."}])
    c = make_clients(responder(evolver=reply), embedder=embedder_for(QUERY_VECS))
    m = method(c, tmp_path)
    ids = pruning_library(m)
    fill_iteration(m, 2, n_fail=1, n_succ=1)
    m.end_iteration(2)
    active = [a.abstraction_id for a in m.store]
    stats = {a: (m.store.stats(a).n_injected, m.store.stats(a).n_success) for a in active}
    m.close()
    m2 = method(c, tmp_path)
    assert [a.abstraction_id for a in m2.store] == active
    assert {a: (m2.store.stats(a).n_injected, m2.store.stats(a).n_success) for a in active} == stats
    assert ids["zero-old"] not in m2.store and "new-skill" in {a.name for a in m2.store}
    assert m2.store.get(ids["zero-old"]).name == "zero-old"  # history keeps retired skills
    assert len(m2.memory) == 2
    # new ids continue after the old ones and dyn names continue above existing ones
    nxt = m2.add_skills([{"name": "later", "kind": "general", "task_type": None, "content": "c"}], created_iteration=3)
    assert nxt[0].abstraction_id not in stats and nxt[0].abstraction_id > max(stats)
