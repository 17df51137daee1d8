"""RunSpec.task_types: a run restricted to chosen task types (the faulty-memories probes of Figs. 8(c)
and 10 evaluate one ALFWorld type or one ScienceWorld task). Scripted model, the errand-world engine."""

from __future__ import annotations

import json

import pytest
import yaml

from antipersist_lib.envs.partitions import load_partition
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.rundir import ManifestMismatchError
from antipersist_lib.runner.grid import load_grid
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec, of_types, work_left
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy


def spec(tmp_path, task_types, **kw):
    return RunSpec(
        method="react",
        benchmark="errandworld",
        backbone="scripted-loopback",
        embedding="bow",
        iterations=1,
        train_per_iteration=kw.pop("train_per_iteration", 2),
        max_steps=3,
        heldout_concurrency=1,
        task_types=task_types,
        name="types",
        out_root=str(tmp_path),
        cache_dir=None,
        progress=False,
        **kw,
    )


def test_a_run_trains_and_evaluates_only_the_chosen_types(tmp_path):
    s = spec(tmp_path, ["bring_fruit"])
    assert s.task_types == ("bring_fruit",)  # stored as a tuple: the spec stays hashable
    with LoopbackServer(responder=errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        (summary,) = run_cell(s, endpoint=ep, embed_endpoint=ep)
        assert summary.heldout_n == 2  # errand world holds 2 bring_fruit held-out tasks of 6
        for split in ("train", "heldout"):
            types = {r.value["task"]["task_type"] for r in read_jsonl(s.run_dir() / f"episodes_{split}.jsonl")}
            assert types == {"bring_fruit"}, split
        manifest = json.loads((s.run_dir() / "manifest.json").read_text())
        assert manifest["task_types"] == ["bring_fruit"] and manifest["n_heldout"] == 2
        assert not work_left(s)  # counts the restricted held-out set, so the finished run is finished
        with pytest.raises(ManifestMismatchError, match="task_types"):
            run_cell(spec(tmp_path, ["bring_item"]), endpoint=ep, embed_endpoint=ep)
        # an unrestricted run records no task_types (runs made before the option resume unchanged)
        free = spec(tmp_path / "free", None, train_per_iteration=0, heldout_limit=1)
        run_cell(free, endpoint=ep, embed_endpoint=ep)
        assert "task_types" not in json.loads((free.run_dir() / "manifest.json").read_text())


def test_bad_task_types_name_what_is_wrong(tmp_path):
    held = load_partition("errandworld").heldout
    assert [t.task_type for t in of_types(held, ["bring_item"])] == ["bring_item"] * 4
    assert of_types(held, None) == list(held)
    with pytest.raises(ValueError, match=r"\['bring_cake'\] not in this split; its task types are"):
        of_types(held, ["bring_cake"])
    with pytest.raises(ValueError, match="list of task type names"):
        of_types(held, "bring_item")
    for bad in ("bring_item", [], ["a", "a"], [""], [3]):
        with pytest.raises(ValueError, match="task_types must"):
            spec(tmp_path, bad)
    with LoopbackServer(responder=errand_policy) as server:
        ep = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        with pytest.raises(ValueError, match="bring_cake"):  # before any episode
            run_cell(spec(tmp_path, ["bring_cake"]), endpoint=ep, embed_endpoint=ep)
        assert not server.requests_for("/v1/chat/completions")


def _grid(tmp_path, url, **extra):
    ep = {"name": "loopback", "model": "scripted", "base_url": url, "api_key_env": "ANTIPERSIST_TEST_KEY"}
    data = {
        "methods": ["react"],
        "benchmarks": ["errandworld"],
        "backbones": [ep],
        "embedding": {**ep, "name": "loopback-embed"},
        "seeds": [1],
        "iterations": 1,
        "train_per_iteration": 3,
        "executor": "serial",
        "out_root": str(tmp_path / "runs"),
        **extra,
    }
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_grid_profiles_take_task_types_per_benchmark(tmp_path):
    with LoopbackServer(responder=errand_policy) as server:
        url = server.base_url
        grid = load_grid(_grid(tmp_path, url, task_types={"errandworld": ["bring_fruit"]}))
        assert {r.spec.task_types for r in grid.runs} == {("bring_fruit",)}
        assert {r.spec.task_types for r in load_grid(_grid(tmp_path, url)).runs} == {None}
        with pytest.raises(
            ValueError, match="task_types must be a mapping of the grid's benchmarks to lists of task types"
        ):
            load_grid(_grid(tmp_path, url, task_types=["bring_fruit"]))
        with pytest.raises(ValueError, match=r"task_types must map benchmarks of this grid \(\['errandworld'\]\)"):
            load_grid(_grid(tmp_path, url, task_types={"alfworld": ["cool"]}))
        with pytest.raises(ValueError, match="bring_cake"):
            load_grid(_grid(tmp_path, url, task_types={"errandworld": ["bring_cake"]}))
        # errand world has 4 bring_fruit training tasks: the pool check counts the restricted pool
        with pytest.raises(ValueError, match="exceeds 'errandworld'"):
            load_grid(_grid(tmp_path, url, task_types={"errandworld": ["bring_fruit"]}, train_per_iteration=5))
