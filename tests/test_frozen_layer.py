"""Anti-Persistence's frozen skill layer (F.2): top-B retrieval by embedding similarity, whole-library
injection refused past the backbone's context length, one store per seed, and the skills shown on
record. Over real HTTP: the loopback server's hashed bag-of-words embedder ranks the skills."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from antipersist_lib.core.agent import AgentConfig
from antipersist_lib.core.skill_layer import SKILLS_HEADER, params_for_seed
from antipersist_lib.envs.errand_world import ErrandWorld, make_tasks
from antipersist_lib.methods.anti_persistence import AntiPersistence
from antipersist_lib.methods.base import MethodContext
from antipersist_lib.runner.protocol import run_task
from antipersist_lib.serving.context_budget import CHARS_PER_TOKEN
from antipersist_lib.serving.embeddings import embed_text
from antipersist_lib.serving.llm import LLMClient
from antipersist_lib.testing.loopback_server import ROUTE_EMBEDDINGS, bag_of_words_embedding
from antipersist_lib.testing.scripted_policy import errand_policy

#: the fixed mode 'none' makes no synthesis call, so each prepare() makes exactly one task embedding
QUIET = {"policy": "fixed", "fixed_mode": "none"}

#: skills worded without common words (and, under the test embedder's 64 hash buckets, without a
#: word sharing a bucket with the tasks' words): a task about the apple and the garden shares two
#: words with 'apple-garden', one with 'apple-kitchen', none with the others
LIBRARY = [
    {"name": "apple-garden", "content": "apple garden bowl"},
    {"name": "apple-kitchen", "content": "apple kitchen basket"},
    {"name": "ball-stairs", "content": "ball stairs"},
    {"name": "socks-attic", "content": "socks attic wardrobe"},
    {"name": "books-shelf", "content": "books shelf"},
]


def write_library(path: Path, skills=LIBRARY) -> Path:
    path.write_text(json.dumps(skills))
    return path


def method(c, state_dir: Path, *, seed: int = 7, llm=None, **params) -> AntiPersistence:
    ctx = MethodContext(llm or c.llm, c.embedder, state_dir, seed, "errandworld", fsync=False)
    return AntiPersistence(ctx, **{**QUIET, **params})


def task_about(obj: str, target: str, task_type: str = "bring_fruit"):
    base = make_tasks("train", 1)[0]
    return dataclasses.replace(
        base, instruction=f"Your task is to: bring the {obj} to the {target}.", task_type=task_type
    )


def expected_top(task, observation: str, skills, b: int) -> list[str]:
    """The ranking computed here, independently of the kit: cosine of bag-of-words vectors."""
    q = np.asarray(bag_of_words_embedding(embed_text(task.instruction, observation, 500)))
    sims = []
    for s in skills:
        v = np.asarray(bag_of_words_embedding(s["content"]))
        sims.append(float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v) + 1e-12)))
    order = sorted(range(len(skills)), key=lambda i: (-sims[i], i))
    return [skills[i]["name"] for i in order[:b]]


def shown_names(block: str) -> list[str]:
    return [line[4:] for line in block.splitlines() if line.startswith("### ")]


def test_top_b_shows_at_most_b_skills_the_most_similar_first(make_clients, tmp_path):
    c = make_clients(errand_policy)
    lib = write_library(tmp_path / "skills.json")
    ap = method(c, tmp_path / "ap", frozen_skills=str(lib), budget=2, task_filter="off")
    task, obs = task_about("apple", "garden"), ""
    ctx = ap.prepare(task, obs, phase="train", iteration=1, position=0)
    want = expected_top(task, obs, LIBRARY, 2)
    assert want == ["apple-garden", "apple-kitchen"]  # the ranking the library was written for
    assert ctx.meta["frozen_skills_shown"] == want
    layer = ctx.blocks[0]
    assert layer.startswith(SKILLS_HEADER) and shown_names(layer) == want
    assert "socks attic" not in layer  # the dissimilar skills stay out of the context
    ball = task_about("ball", "stairs", "bring_item")
    ctx = ap.prepare(ball, obs, phase="heldout", iteration=1, position=0)
    assert ctx.meta["frozen_skills_shown"] == expected_top(ball, obs, LIBRARY, 2)
    assert ctx.meta["frozen_skills_shown"][0] == "ball-stairs" and len(ctx.meta["frozen_skills_shown"]) == 2


def test_library_skills_are_embedded_once_per_run_in_library_order(make_clients, tmp_path):
    c = make_clients(errand_policy)
    ap = method(c, tmp_path / "ap", frozen_skills=str(write_library(tmp_path / "skills.json")), task_filter="off")
    for j, t in enumerate(make_tasks("train", 3)):
        ap.prepare(t, "You are in the hall.", phase="train", iteration=1, position=j)
    inputs = [r["body"]["input"] for r in c.server.requests_for(ROUTE_EMBEDDINGS)]
    batches = [x for x in inputs if isinstance(x, list) and len(x) == len(LIBRARY)]
    assert batches == [[s["content"] for s in LIBRARY]]  # one request, library order, never again
    assert len(inputs) == 3 + 1  # plus one task embedding per prepare


def test_task_filter_keeps_skills_of_other_task_types_out(make_clients, tmp_path):
    typed = [
        {"name": "fruit-rule", "content": "sock attic drawer", "task_type": "bring_fruit"},
        {"name": "item-rule", "content": "sock attic drawer", "task_type": "bring_item"},
        {"name": "any-rule", "content": "a general rule for every errand"},
    ]
    c = make_clients(errand_policy)
    lib = write_library(tmp_path / "typed.json", typed)
    sock = task_about("sock", "attic", "bring_item")
    by_type = method(c, tmp_path / "a", frozen_skills=str(lib), budget=5)
    shown = by_type.prepare(sock, "", phase="train", iteration=1, position=0).meta["frozen_skills_shown"]
    assert shown == ["item-rule", "any-rule"]  # an untyped skill is of every type
    off = method(c, tmp_path / "b", frozen_skills=str(lib), budget=5, task_filter="off")
    assert set(off.prepare(sock, "", phase="train", iteration=1, position=0).meta["frozen_skills_shown"]) == {
        "fruit-rule",
        "item-rule",
        "any-rule",
    }


def judge_run(root: Path, *, seed: int, skills: list[tuple[str, str, list[float] | None]], model: str | None) -> Path:
    """A finished abstraction-judge run's folder: its last snapshot and (optionally) its manifest."""
    run = root / f"seed{seed}"
    (run / "snapshots").mkdir(parents=True)
    active = [
        {"abstraction_id": aid, "text": text, "kind": "guidance", "task_type": None, "embedding": emb}
        for aid, text, emb in skills
    ]
    (run / "snapshots" / "abstractions_iter_01.json").write_text(json.dumps({"active": [{"abstraction_id": "old"}]}))
    (run / "snapshots" / "abstractions_iter_02.json").write_text(json.dumps({"active": active}))
    if model is not None:
        (run / "manifest.json").write_text(json.dumps({"embedding_endpoint": {"model": model}}))
    return run


def test_snapshot_embeddings_are_reused_when_the_same_model_made_them(make_clients, tmp_path):
    """The stored vectors, not the texts, rank the skills: the text of 'a-match' shares no word with
    the task, its stored task embedding is the task's own."""
    c = make_clients(errand_policy)
    task, obs = task_about("apple", "garden"), "You are in the hall."
    mine = bag_of_words_embedding(embed_text(task.instruction, obs, 500))
    other = bag_of_words_embedding("socks hide in the attic drawer")
    skills = [("a-other", "bring the apple to the garden", other), ("a-match", "zzz qqq", mine)]
    run = judge_run(tmp_path / "judge", seed=7, skills=skills, model="scripted")
    ap = method(c, tmp_path / "ap", frozen_skills=str(run), budget=1)
    assert ap.describe()["frozen_layer"]["embeddings"] == "snapshot"
    assert ap.prepare(task, obs, phase="train", iteration=1, position=0).meta["frozen_skills_shown"] == ["a-match"]
    # the one embedding request is the task's: no skill text was embedded
    assert [r["body"]["input"] for r in c.server.requests_for(ROUTE_EMBEDDINGS)] == [
        [embed_text(task.instruction, obs, 500)]
    ]
    # another embedding model made the vectors: they are not comparable, the texts are embedded instead
    moved = judge_run(tmp_path / "judge2", seed=7, skills=skills, model="another-embedder")
    ap2 = method(c, tmp_path / "ap2", frozen_skills=str(moved), budget=1)
    assert ap2.describe()["frozen_layer"]["embeddings"].startswith("content (the snapshot was embedded with")
    assert ap2.prepare(task, obs, phase="train", iteration=1, position=0).meta["frozen_skills_shown"] == ["a-other"]


def test_each_seed_reads_its_own_seeds_store(make_clients, tmp_path):
    c = make_clients(errand_policy)
    root = tmp_path / "abstraction-judge"
    for seed in (42, 43):
        judge_run(root, seed=seed, skills=[(f"s{seed}", f"a skill admitted in seed {seed}", None)], model=None)
    template = str(root / "seed{seed}")
    for seed in (42, 43):
        ap = method(c, tmp_path / f"ap{seed}", seed=seed, frozen_skills=template)
        layer = ap.describe()["frozen_layer"]
        assert layer["path"] == template and layer["resolved"] == str(root / f"seed{seed}")
        assert layer["snapshot"] == "abstractions_iter_02.json"  # the last snapshot
        shown = ap.prepare(task_about("apple", "garden"), "", phase="train", iteration=1, position=0)
        assert shown.meta["frozen_skills_shown"] == [f"s{seed}"]
    assert params_for_seed({"frozen_skills": template, "budget": 5}, 43) == {
        "frozen_skills": str(root / "seed43"),
        "budget": 5,
    }
    with pytest.raises(ValueError, match=r"seed44: it does not exist"):
        method(c, tmp_path / "ap44", seed=44, frozen_skills=template)
    with pytest.raises(ValueError, match=r"the only placeholder allowed is \{seed\}"):
        method(c, tmp_path / "typo", frozen_skills=str(root / "seed{Seed}"))
    with pytest.raises(ValueError, match=r"a run's root \(it holds seed42, seed43\).*seed\{seed\}"):
        method(c, tmp_path / "root", frozen_skills=str(root))


def test_whole_library_past_the_context_length_is_refused_naming_the_sizes(make_clients, tmp_path):
    c = make_clients(errand_policy)
    lib = write_library(tmp_path / "skills.json")
    tiny = LLMClient(dataclasses.replace(c.endpoint, context_length=50), ledger=c.ledger)
    with pytest.raises(ValueError) as err:
        method(c, tmp_path / "ap", llm=tiny, frozen_skills=str(lib), frozen_skills_retrieval="all")
    text = str(err.value)
    layer_chars = len(SKILLS_HEADER) + 1 + sum(len(f"### {s['name']}\n{s['content']}") + 2 for s in LIBRARY) - 2
    tokens = -(-layer_chars // CHARS_PER_TOKEN)
    assert f"5 skills, {layer_chars} characters, about {tokens} tokens at 3 characters per token" in text
    assert "context length of 50 tokens" in text and "frozen_skills_retrieval='top_b'" in text
    assert c.server.requests == []  # refused before any call
    # the same library fits a long context: every skill is in every context, each on record
    roomy = LLMClient(dataclasses.replace(c.endpoint, context_length=4096), ledger=c.ledger)
    ap = method(c, tmp_path / "ok", llm=roomy, frozen_skills=str(lib), frozen_skills_retrieval="all")
    assert ap.describe()["frozen_layer"]["context_check"] == f"ok: about {tokens} of 4096 tokens"
    ctx = ap.prepare(task_about("apple", "garden"), "", phase="train", iteration=1, position=0)
    assert ctx.meta["frozen_skills_shown"] == [s["name"] for s in LIBRARY]


def test_an_unknown_context_length_is_said_not_guessed(make_clients, tmp_path, caplog):
    c = make_clients(errand_policy)
    assert c.endpoint.context_length is None
    ap = method(
        c, tmp_path / "ap", frozen_skills=str(write_library(tmp_path / "s.json")), frozen_skills_retrieval="all"
    )
    check = ap.describe()["frozen_layer"]["context_check"]
    assert check.startswith("not checked: ") and "no stated context length" in check
    assert "no stated context length" in caplog.text
    with pytest.raises(ValueError, match=r"frozen_skills_retrieval is 'every'"):
        method(c, tmp_path / "bad", frozen_skills_retrieval="every")


def test_episode_records_name_the_skills_shown(make_clients, tmp_path):
    c = make_clients(errand_policy)
    ap = method(c, tmp_path / "ap", frozen_skills=str(write_library(tmp_path / "s.json")), budget=2)
    env = ErrandWorld()
    for j, t in enumerate(make_tasks("train", 2)):
        rec = run_task(ap, env, t, phase="train", iteration=1, position=j, agent_config=AgentConfig(max_steps=3))
        shown = rec["meta"]["frozen_skills_shown"]
        assert 1 <= len(shown) <= 2 and set(shown) <= {s["name"] for s in LIBRARY}
    plain = method(c, tmp_path / "plain")
    rec = run_task(
        plain, env, make_tasks("train", 1)[0], phase="train", iteration=1, position=0, agent_config=AgentConfig()
    )
    assert "frozen_skills_shown" not in rec["meta"]  # runs without a layer record nothing new


def test_a_grid_refuses_a_whole_library_its_backbone_cannot_hold_before_any_run(tmp_path):
    import yaml

    from antipersist_lib.runner.grid import load_grid

    lib = write_library(tmp_path / "skills.json")
    backbone = {"name": "small", "model": "m", "base_url": "http://127.0.0.1:9/v1", "context_length": 40}

    def grid(retrieval: str) -> Path:
        p = tmp_path / f"{retrieval}.yaml"
        layer = {"frozen_skills": str(lib), "frozen_skills_retrieval": retrieval}
        p.write_text(
            yaml.safe_dump(
                {
                    "variants": {"frozen-layer": {"method": "anti_persistence", "params": layer}},
                    "benchmarks": ["errandworld"],
                    "seeds": [1],
                    "backbones": [backbone],
                    "embedding": {**backbone, "name": "e", "model": "e", "context_length": 512},
                    "train_per_iteration": 2,
                    "out_root": str(tmp_path / "runs"),
                    "shared_server": True,
                }
            )
        )
        return p

    with pytest.raises(ValueError, match=r"run 'frozen-layer' \(anti_persistence\): .*context length of 40 tokens"):
        load_grid(grid("all"))
    assert not (tmp_path / "runs").exists()
    assert [r.spec.method_params["frozen_skills_retrieval"] for r in load_grid(grid("top_b")).runs] == ["top_b"]


def test_a_run_recorded_before_top_b_resumes_with_the_whole_library(tmp_path):
    """Runs made when the layer was always injected whole keep that behaviour on resume; new runs and
    runs that recorded the option keep theirs."""
    from antipersist_lib.methods import params_as_recorded

    params = {"frozen_skills": "lib.json"}
    old = {"method_config": {"name": "anti_persistence", "budget": 5, "frozen_skills": "lib.json"}}
    assert params_as_recorded("anti_persistence", params, old)["frozen_skills_retrieval"] == "all"
    assert "frozen_skills_retrieval" not in params_as_recorded("anti_persistence", params, None)
    new = {"method_config": {**old["method_config"], "frozen_skills_retrieval": "top_b"}}
    assert "frozen_skills_retrieval" not in params_as_recorded("anti_persistence", params, new)


def test_an_unfinished_judge_run_is_refused_naming_its_progress(tmp_path):
    from antipersist_lib.core.skill_layer import read_skills

    run = judge_run(tmp_path / "judge", seed=42, skills=[("s", "a skill", None)], model="scripted")
    (run / "manifest.json").write_text(json.dumps({"embedding_endpoint": {"model": "scripted"}, "iterations": 10}))
    with pytest.raises(ValueError, match=r"snapshots up to iteration 2 of its 10; .* finish that run first"):
        read_skills(run)
    (run / "manifest.json").write_text(json.dumps({"embedding_endpoint": {"model": "scripted"}, "iterations": 2}))
    skills, source = read_skills(run)
    assert [s.skill_id for s in skills] == ["s"] and source.snapshot == "abstractions_iter_02.json"
