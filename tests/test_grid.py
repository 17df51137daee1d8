"""Scale-out grid: validation before any call, replicas round-robin, and the same run directories
from the serial path, a local process pool and a local Ray instance (resumable per run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from antipersist_lib.grid import load_grid, run_grid
from antipersist_lib.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy


def write_grid(tmp_path: Path, url: str, **over) -> Path:
    ep = {"name": "loopback", "model": "scripted", "base_url": url, "api_key_env": "ANTIPERSIST_TEST_KEY",
          "max_retries": 2, "backoff_base_s": 0.01}
    data = {
        "name": "tiny", "methods": ["react", "anti_persistence"], "benchmarks": ["errandworld"], "seeds": [1, 2],
        "backbones": [ep], "embedding": {**ep, "name": "loopback-embed"}, "iterations": 2, "train_per_iteration": 4,
        "max_steps": 4, "heldout_concurrency": 2, "method_params": {"anti_persistence": {"round_robin_iterations": 1, "warmup_per_mode": 1}},
        "out_root": str(tmp_path / "runs"), "cache_dir": str(tmp_path / "cache"), "executor": "serial", "max_parallel": 2,
    }
    data.update(over)
    p = tmp_path / "grid.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def state(run_dir: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for rel in ("episodes_train.jsonl", "state/trajectories.jsonl", "state/outcome_log.jsonl"):
        if (run_dir / rel).exists():
            out[rel] = (run_dir / rel).read_bytes()
    held = [json.loads(x) for x in (run_dir / "episodes_heldout.jsonl").read_text().splitlines()]
    out["heldout"] = sorted(json.dumps(r, sort_keys=True) for r in held)
    return out


@pytest.mark.parametrize("over, message", [
    ({"methods": ["reakt"]}, r"unknown method 'reakt'"),
    ({"executor": "slurm"}, r"executor is 'slurm'"),
    ({"seeds": []}, r"'seeds' must be a non-empty list"),
    ({"endpoints": {"other": ["http://x/v1"]}}, r"endpoints names backbone 'other'"),
    ({"iteratons": 3}, r"unknown key\(s\) \['iteratons'\]"),
    ({"max_steps": 0}, r"max_steps must be an integer >= 1"),
    ({"backbones": [{"name": "x", "model": "m"}]}, r"needs a non-empty 'base_url'"),
    ({"backbones": ["no-such-backbone"]}, r"unknown backbone profile 'no-such-backbone'"),
    ({"variants": {"v": {"method": "anti_persistence", "params": {"gama": 0.9}}}}, r"run 'v' \(anti_persistence\): .*no parameter\(s\) \['gama'\]"),
    ({"variants": {"v": {"method": "anti_persistence", "params": {"policy": "fixed"}}}}, r"run 'v'.*fixed_mode"),
])
def test_bad_grid_files_are_named_before_any_call(tmp_path, over, message):
    with LoopbackServer(responder=errand_policy) as srv:
        with pytest.raises(ValueError, match=message):
            load_grid(write_grid(tmp_path, srv.base_url, **over))
        assert srv.requests == []


def test_replicas_are_used_round_robin(tmp_path):
    g = load_grid(write_grid(tmp_path, "http://a/v1", endpoints={"loopback": ["http://a/v1", "http://b/v1"]}))
    assert len(g.runs) == 4
    assert [r.endpoint.base_url for r in g.runs] == ["http://a/v1", "http://b/v1", "http://a/v1", "http://b/v1"]
    assert {r.spec.run_name for r in g.runs} == {"react", "anti_persistence"}


@pytest.mark.slow
def test_serial_process_pool_and_ray_write_the_same_runs_and_resume(tmp_path):
    with LoopbackServer(responder=errand_policy, latency_s=0.002) as srv:
        results = {}
        for executor in ("serial", "process", "ray"):
            root = tmp_path / executor
            root.mkdir()
            grid = load_grid(write_grid(root, srv.base_url, executor=executor))
            outcomes = run_grid(grid, verbose=False)
            assert [o.status for o in outcomes] == ["ok"] * 4, [o.error for o in outcomes]
            summary = json.loads((Path(grid.out_root) / "grid_tiny.json").read_text())
            assert summary["runs"] == 4 and summary["failed"] == 0 and summary["executor"] == executor
            results[executor] = {Path(o.run_dir).relative_to(grid.out_root): state(Path(o.run_dir)) for o in outcomes}
        assert results["serial"] == results["process"] == results["ray"]
        # resuming a finished grid makes no new model call
        before = len(srv.requests)
        again = run_grid(load_grid(write_grid(tmp_path / "serial", srv.base_url, executor="process")), verbose=False)
        assert [o.status for o in again] == ["ok"] * 4 and len(srv.requests) == before


def test_a_failing_run_does_not_stop_the_grid(tmp_path):
    with LoopbackServer(responder=errand_policy) as srv:
        grid = load_grid(write_grid(tmp_path, srv.base_url, methods=["react"], seeds=[1],
                                    variants={"broken": {"method": "react"}}))
        (Path(grid.out_root) / "errandworld" / "loopback" / "broken" / "seed1").mkdir(parents=True)
        (Path(grid.out_root) / "errandworld" / "loopback" / "broken" / "seed1" / "manifest.json").write_text("{not json")
        outcomes = run_grid(grid, verbose=False)
    status = {o.run_name: o for o in outcomes}
    assert status["react"].status == "ok"
    assert status["broken"].status == "failed" and status["broken"].error
