"""A run killed with SIGKILL at random moments resumes to exactly the uninterrupted result."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.rundir import count_lines, truncate_lines
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

REPO = Path(__file__).resolve().parents[1]


def _params_dir(tmp: Path, url: str) -> Path:
    d = tmp / "params"
    for kind in ("backbones", "embeddings"):
        (d / kind).mkdir(parents=True)
        (d / kind / "loopback.yaml").write_text(
            f"name: loopback\nmodel: scripted\nbase_url: {url}\napi_key_env: ANTIPERSIST_TEST_KEY\nmax_retries: 2\nbackoff_base_s: 0.01\n"
        )
    return d


def _cmd(out_root: Path, method: str, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "antipersist_lib",
        "run",
        "--method",
        method,
        "--benchmark",
        "errandworld",
        "--backbone",
        "loopback",
        "--embedding",
        "loopback",
        "--iterations",
        "3",
        "--train-per-iteration",
        "10",
        "--max-steps",
        "4",
        "--heldout-concurrency",
        "3",
        "--out-root",
        str(out_root),
        *extra,
    ]


def _env(params: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["ANTIPERSIST_PARAMS"] = str(params)
    env["PYTHONPATH"] = str(REPO)
    return env


def _valid_lines(path: Path) -> list[dict]:
    return [x.value for x in read_jsonl(path)]


def _compare(a: Path, b: Path) -> None:
    # state files and training episodes: byte-identical, hence same records, same order
    for rel in (
        "episodes_train.jsonl",
        "state/trajectories.jsonl",
        "state/outcome_log.jsonl",
        "state/abstractions/events.jsonl",
    ):
        pa, pb = a / rel, b / rel
        assert pa.exists() == pb.exists(), rel
        if pa.exists():
            assert pa.read_bytes() == pb.read_bytes(), f"{rel} differs after resuming"
            for line in pa.read_bytes().splitlines():
                json.loads(line)  # no torn line
    # held-out episodes run concurrently, so compare them as a set keyed by (iteration, position)
    ha = {(r["iteration"], r["position"]): r for r in _valid_lines(a / "episodes_heldout.jsonl")}
    hb_list = _valid_lines(b / "episodes_heldout.jsonl")
    hb = {(r["iteration"], r["position"]): r for r in hb_list}
    assert len(hb) == len(hb_list), "a held-out episode was recorded twice"
    assert ha == hb
    ja = [(e["kind"], e["iteration"], e.get("position")) for e in _valid_lines(a / "journal.jsonl")]
    jb = [(e["kind"], e["iteration"], e.get("position")) for e in _valid_lines(b / "journal.jsonl")]
    assert ja == jb
    assert (
        json.loads((a / "summary.json").read_text())["iterations"]
        == json.loads((b / "summary.json").read_text())["iterations"]
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,extra",
    [
        ("anti_persistence", ["--method-param", "round_robin_iterations=1", "--method-param", "warmup_per_mode=1"]),
        ("abstraction_memory", []),
    ],
)
def test_sigkill_five_times_then_resume_equals_uninterrupted(tmp_path, method, extra):
    rng = random.Random(1234)
    with LoopbackServer(responder=errand_policy, latency_s=0.01) as srv:
        params = _params_dir(tmp_path, srv.base_url)
        env = _env(params)
        # separate working folders, hence separate response caches: the interrupted run pays
        # for its own calls and only its own cache helps it resume
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        t0 = time.monotonic()
        ref = subprocess.run(
            _cmd(tmp_path / "ref", method, extra),
            cwd=tmp_path / "a",
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        duration = time.monotonic() - t0
        assert ref.returncode == 0, ref.stderr[-2000:]
        # a resumed run replays its finished work from the journal and cache, so it ends sooner
        # than the reference: launch until five kills landed (at most ten launches)
        kills = 0
        for _ in range(10):
            if kills == 5:
                break
            proc = subprocess.Popen(
                _cmd(tmp_path / "killed", method, extra),
                cwd=tmp_path / "b",
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0.15, 0.5) * duration)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            proc.wait(timeout=60)
        final = subprocess.run(
            _cmd(tmp_path / "killed", method, extra),
            cwd=tmp_path / "b",
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert final.returncode == 0, final.stderr[-2000:]
    assert kills >= 3, "the run finished before most kills; the test did not interrupt it"
    run_a = next((tmp_path / "ref").rglob("manifest.json")).parent
    run_b = next((tmp_path / "killed").rglob("manifest.json")).parent
    _compare(run_a, run_b)
    manifest = json.loads((run_b / "manifest.json").read_text())
    assert manifest.get("resumed"), "the manifest should record the resumed sessions"


def test_truncate_lines_drops_only_the_uncommitted_suffix(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a":1}\n{"a":2}\n{"a":3}\n{"a":')
    assert count_lines(p) == 3
    assert truncate_lines(p, 2) == 2  # one full line and the torn fragment
    assert p.read_bytes() == b'{"a":1}\n{"a":2}\n'
    assert truncate_lines(p, 2) == 0
    assert truncate_lines(tmp_path / "missing.jsonl", 0) == 0
