"""Failure behaviour of whole protocol runs over real HTTP (loopback server + ErrandWorld).

* a flaky endpoint (~20% of requests fail in every way ``FaultPlan`` knows) changes nothing
  but the retry counts and latencies in the ledger;
* a dead endpoint stops the run quickly with an error naming the URL and how to resume, and
  resuming after it comes back gives exactly the uninterrupted result;
* an engine that raises mid-episode is an infrastructure failure: recorded, kept out of the
  outcome log (skip rule 3), and the run goes on;
* bad settings are refused with the field named, before the first request to the model;
* the API key reaches the wire but no file: the manifest keeps only the variable's name.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from antipersist_lib.cli import main as cli_main
from antipersist_lib.envs import alfworld as alfworld_mod
from antipersist_lib.envs import scienceworld as scienceworld_mod
from antipersist_lib.envs.errand_world import ErrandWorld
from antipersist_lib.errors import BenchmarkUnavailableError, LLMUnavailableError
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner import doctor
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import TRANSIENT_FAULT_KINDS, FaultPlan, LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

#: the two methods exercised end to end: the paper's method and a persistent-memory baseline
METHODS = {
    "anti_persistence": {"round_robin_iterations": 1, "warmup_per_mode": 1},
    "abstraction_memory": {},
}

#: manifest fields that legitimately differ between two sessions of the same configuration
VOLATILE_MANIFEST_KEYS = {"started_at", "resumed", "cache_dir"}  # cache_dir: each run here has its own
#: ledger fields that legitimately differ between runs: wall time, retries spent, numbering
VOLATILE_CALL_KEYS = {"call_id", "latency_s", "timestamp", "retries", "cached"}


def _spec(root: Path, method: str, *, cache: Path | None = None, **kw: Any) -> RunSpec:
    opts: dict[str, Any] = dict(
        method=method,
        benchmark="errandworld",
        backbone="loopback",
        embedding="loopback",
        iterations=2,
        train_per_iteration=4,
        max_steps=5,
        heldout_concurrency=3,
        heldout_limit=4,
        method_params=METHODS[method],
        out_root=str(root),
        cache_dir=None if cache is None else str(cache),
        progress=False,
    )
    opts.update(kw)
    return RunSpec(**opts)


def _endpoint(srv: LoopbackServer, **kw: Any) -> Endpoint:
    opts: dict[str, Any] = dict(
        timeout_s=5.0, max_retries=8, backoff_base_s=0.001, backoff_max_s=0.005, api_key_env="ANTIPERSIST_TEST_KEY"
    )
    opts.update(kw)
    return Endpoint(base_url=srv.base_url, model="scripted", **opts)


def _values(path: Path) -> list[Any]:
    return [x.value for x in read_jsonl(path)]


def _canon(x: Any) -> str:
    return json.dumps(x, sort_keys=True)


def _call_signatures(run_dir: Path) -> Counter[str]:
    """The logical calls of a run (what was asked, by whom, with what result size), as a multiset."""
    return Counter(
        _canon({k: v for k, v in c.items() if k not in VOLATILE_CALL_KEYS})
        for c in _values(run_dir / "calls.jsonl")
        if c.get("ok", True)
    )


def assert_same_run(a: Path, b: Path, *, same_calls: bool = True) -> None:
    """Two run directories hold the same results: state and training files byte for byte,
    held-out records as a set (they finish in any order), journal, snapshots, summary, manifest."""
    state_a = sorted(p.relative_to(a) for p in (a / "state").rglob("*") if p.is_file())
    state_b = sorted(p.relative_to(b) for p in (b / "state").rglob("*") if p.is_file())
    assert state_a == state_b and state_a, "different state files"
    for rel in [*state_a, Path("episodes_train.jsonl"), Path("journal.jsonl")]:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), f"{rel} differs"
    snaps_a = sorted(p.name for p in (a / "snapshots").iterdir())
    assert snaps_a == sorted(p.name for p in (b / "snapshots").iterdir())
    for name in snaps_a:
        assert (a / "snapshots" / name).read_bytes() == (b / "snapshots" / name).read_bytes(), name
    held_a, held_b = _values(a / "episodes_heldout.jsonl"), _values(b / "episodes_heldout.jsonl")
    key = lambda r: (r["iteration"], r["position"])  # noqa: E731
    assert len({key(r) for r in held_b}) == len(held_b), "a held-out episode was recorded twice"
    assert {key(r): r for r in held_a} == {key(r): r for r in held_b}
    assert (
        json.loads((a / "summary.json").read_text())["iterations"]
        == json.loads((b / "summary.json").read_text())["iterations"]
    )
    man_a, man_b = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    for m in (man_a, man_b):
        for k in VOLATILE_MANIFEST_KEYS:
            m.pop(k, None)
    assert man_a == man_b
    if same_calls:
        assert _call_signatures(a) == _call_signatures(b)


# -- 1. flaky endpoint ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", list(METHODS))
def test_flaky_endpoint_gives_the_fault_free_result_and_counts_retries(tmp_path: Path, method: str) -> None:
    with LoopbackServer(responder=errand_policy) as srv:
        # a short client timeout; the "timeout" fault stalls longer than it, and is drawn less
        # often than the other kinds because each one costs a full timeout
        ep = _endpoint(srv, timeout_s=1.0)
        # the run's preflight probes are not ledger calls, and this test matches requests to ledger entries
        clean = _spec(tmp_path / "clean", method, preflight=False)
        run_cell(clean, endpoint=ep, embed_endpoint=ep, fsync=False)
        assert srv.fault_counts == {}
        n_clean = srv.request_count

        weights = [0.25 if k == "timeout" else 1.0 for k in TRANSIENT_FAULT_KINDS]
        srv.faults = FaultPlan.random(0.2, seed=11, kinds=TRANSIENT_FAULT_KINDS, weights=weights, hang_s=1.5)
        flaky = _spec(tmp_path / "flaky", method, preflight=False)
        run_cell(flaky, endpoint=ep, embed_endpoint=ep, fsync=False)
        faults = dict(srv.fault_counts)
        n_flaky = srv.request_count - n_clean

    n_faults = sum(faults.values())
    assert 0.1 < n_faults / n_flaky < 0.3, (n_faults, n_flaky)
    assert len(faults) >= 5, f"too few fault kinds were drawn: {faults}"
    a, b = clean.run_dir(), flaky.run_dir()
    assert_same_run(a, b)  # same results, and the same logical calls in the ledger
    calls_a, calls_b = _values(a / "calls.jsonl"), _values(b / "calls.jsonl")
    assert all(c["ok"] for c in calls_a + calls_b), "a call ran out of retries"
    retries_a, retries_b = (sum(c["retries"] for c in calls) for calls in (calls_a, calls_b))
    # the ledger accounts for every request the server received: one per call plus its retries
    assert n_clean == len(calls_a) + retries_a and n_flaky == len(calls_b) + retries_b
    # each injected fault cost exactly one counted retry (a slow machine may add a spurious
    # timeout or two, which are counted as retries too)
    assert n_faults <= retries_b <= n_faults + 3 and retries_a <= 3
    retried = Counter(c["purpose"] for c in calls_b if c["retries"])
    assert retried["execution"] > 0 and retried["embedding"] > 0


# -- 2. dead endpoint -------------------------------------------------------------------------------


PROFILE = {
    "name": "loopback",
    "model": "scripted",
    "api_key_env": "ANTIPERSIST_TEST_KEY",
    "max_retries": 3,
    "backoff_base_s": 0.001,
    "backoff_max_s": 0.005,
    "timeout_s": 5,
}


def _params_dir(tmp: Path, url: str, **backbone: Any) -> Path:
    """A params folder whose loopback profiles point at ``url``; ``backbone`` overrides fields."""
    d = tmp / "params"
    for kind in ("backbones", "embeddings"):
        (d / kind).mkdir(parents=True, exist_ok=True)
        fields = {**PROFILE, "base_url": url, **(backbone if kind == "backbones" else {})}
        (d / kind / "loopback.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in fields.items()))
    return d


def _cli_args(out: Path, cache: Path, method: str) -> list[str]:
    params = out.parent / f"{out.name}-run.yaml"
    params.write_text(json.dumps({"cache_dir": str(cache), "method_params": METHODS[method]}))
    return [
        "run",
        "--params",
        str(params),
        "--method",
        method,
        "--benchmark",
        "errandworld",
        "--backbone",
        "loopback",
        "--embedding",
        "loopback",
        "--iterations",
        "2",
        "--train-per-iteration",
        "4",
        "--max-steps",
        "5",
        "--heldout-concurrency",
        "3",
        "--heldout-limit",
        "4",
        "--out-root",
        str(out),
    ]


class _DiesAfter:
    """The scripted policy, until the n-th chat request: then the whole server goes dead."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0
        self.server: LoopbackServer | None = None
        self.died_at: float | None = None

    def __call__(self, request: dict[str, Any]) -> str:
        self.seen += 1
        if self.seen == self.n and self.server is not None:
            self.server.set_dead(True)
            self.died_at = time.monotonic()
        return errand_policy(request)


@pytest.mark.parametrize(
    "method,die_after,phase",
    [
        ("anti_persistence", 12, "train"),  # of ~75 chat requests: inside iteration 1's training
        ("abstraction_memory", 30, "heldout"),  # of ~76: inside iteration 1's concurrent held-out evaluation
    ],
)
def test_dead_endpoint_stops_with_the_url_and_resume_equals_uninterrupted(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    method: str,
    die_after: int,
    phase: str,
) -> None:
    dying = _DiesAfter(die_after)
    with LoopbackServer(responder=dying) as srv:
        dying.server = srv
        monkeypatch.setenv("ANTIPERSIST_PARAMS", str(_params_dir(tmp_path, srv.base_url)))
        monkeypatch.delenv("ANTIPERSIST_BASE_URL", raising=False)
        monkeypatch.delenv("ANTIPERSIST_EMBED_BASE_URL", raising=False)
        args = _cli_args(tmp_path / "interrupted", tmp_path / "cache-b", method)
        rc = cli_main(args)
        stopped = time.monotonic()
        err = capsys.readouterr().err
        assert dying.died_at is not None, "the server never died: the run is shorter than expected"
        assert rc == 3, err
        assert stopped - dying.died_at < 10.0  # bounded: a few fast retries, not a hang
        assert srv.base_url in err and "'scripted'" in err
        assert "re-run the same command to resume" in err
        assert "Traceback" not in err

        run_b = next((tmp_path / "interrupted").rglob("manifest.json")).parent
        done_before = len(_values(run_b / "journal.jsonl"))
        held_before = len(_values(run_b / "episodes_heldout.jsonl"))
        if phase == "train":
            assert 0 < done_before < 4 and held_before == 0
        else:  # iteration 1 committed (4 episodes + its end), its evaluation incomplete
            assert done_before == 5 and held_before < 4
        # the lock was released: the directory can be opened again at once
        RunDirectory(run_b).open().close()

        srv.set_dead(False)
        dying.n = -1
        assert cli_main(args) == 0
        assert cli_main(_cli_args(tmp_path / "reference", tmp_path / "cache-a", method)) == 0
    run_a = next((tmp_path / "reference").rglob("manifest.json")).parent
    journal = _values(run_b / "journal.jsonl")
    assert 0 < done_before < len(journal), "the interruption did not fall inside the run"
    manifest = json.loads((run_b / "manifest.json").read_text())
    assert len(manifest["resumed"]) == 1
    # results equal; the ledger also holds the interrupted session's failed and repeated calls
    assert_same_run(run_a, run_b, same_calls=False)
    failed = [c for c in _values(run_b / "calls.jsonl") if not c["ok"]]
    assert failed and all("503" in c["error"] for c in failed)


def test_dead_endpoint_from_the_start_fails_fast_in_process(tmp_path: Path) -> None:
    with LoopbackServer(responder=errand_policy) as srv:
        srv.set_dead(True)
        ep = _endpoint(srv, max_retries=2)
        spec = _spec(tmp_path, "anti_persistence")
        url = srv.base_url
        start = time.monotonic()
        with pytest.raises(LLMUnavailableError) as info:
            run_cell(spec, endpoint=ep, embed_endpoint=ep, fsync=False)
        assert time.monotonic() - start < 10.0
    assert url in str(info.value) and "resume" in str(info.value)
    assert not _values(spec.run_dir() / "journal.jsonl")  # nothing committed
    assert not _values(spec.run_dir() / "episodes_train.jsonl")


# -- 3. engine failure mid-episode ------------------------------------------------------------------


class _CrashingWorld(ErrandWorld):
    """ErrandWorld whose engine throws (a plain exception, as a buggy engine would) on the
    second step of some tasks."""

    CRASH_TASKS = {("train", 2), ("train", 5), ("heldout", 1)}

    def _step(self, action: str):
        assert self._task is not None
        if (self._task.split, self._task.task_id) in self.CRASH_TASKS and self.t >= 1:
            raise RuntimeError("engine exploded (injected)")
        return super()._step(action)


def test_engine_failure_mid_episode_is_recorded_skipped_and_the_run_continues(tmp_path: Path) -> None:
    with LoopbackServer(responder=errand_policy) as srv:
        ep = _endpoint(srv)
        spec = _spec(tmp_path, "anti_persistence", train_per_iteration=12, heldout_limit=6)
        summaries = run_cell(spec, endpoint=ep, embed_endpoint=ep, env_factory=_CrashingWorld, fsync=False)
    run = spec.run_dir()
    train, held = _values(run / "episodes_train.jsonl"), _values(run / "episodes_heldout.jsonl")
    assert len(train) == 24 and len(held) == 12  # nothing was lost: the run went on
    crashed = [r for r in train if (r["task"]["split"], r["task"]["task_id"]) in _CrashingWorld.CRASH_TASKS]
    assert len(crashed) == 4  # two tasks, both iterations
    for r in crashed:
        assert r["outcome"]["infra_failure"] and not r["outcome"]["success"]
        assert "engine exploded" in r["outcome"]["error"] and "step 1" in r["outcome"]["error"]
        assert r["outcome"]["n_steps"] == 2
        assert not r["meta"]["logged"]
        assert r["meta"]["log_skip_reason"] in ("infrastructure_failure", "first_update")
    assert sum(r["meta"]["log_skip_reason"] == "infrastructure_failure" for r in crashed) >= 3
    others = [r for r in train if r not in crashed]
    assert not any(r["outcome"]["infra_failure"] for r in others)
    assert sum(r["meta"]["logged"] for r in train) == len(_values(run / "state" / "outcome_log.jsonl"))
    logged_ids = {(r["task_id"], r["instruction"]) for r in _values(run / "state" / "outcome_log.jsonl")}
    assert not logged_ids & {(r["task"]["task_id"], r["task"]["instruction"]) for r in crashed}
    # held-out crashes count as infrastructure failures in the summary, per iteration
    assert [s.infra_failures for s in summaries] == [1, 1]
    # the crashed trajectories stay in trajectory memory (M_k), flagged as infrastructure failures
    mem = _values(run / "state" / "trajectories.jsonl")
    assert len(mem) == 24
    assert sorted(m["task"]["task_id"] for m in mem if m["outcome"]["infra_failure"]) == [2, 2, 5, 5]


# -- 4. bad input is refused before any model call -------------------------------------------------


@pytest.mark.parametrize(
    "settings,field",
    [
        ({"iteratons": 3}, "iteratons"),
        ({"seed": "42"}, "seed"),
        ({"iterations": 2.5}, "iterations"),
        ({"heldout_concurrency": 0}, "heldout_concurrency"),
        ({"heldout_limit": "all"}, "heldout_limit"),
        ({"method_params": ["budget", 3]}, "method_params"),
        ({"agent": {"temp": 0.1}}, "agent"),
        ({"method": "antipersistence"}, "method"),
        ({"benchmark": "alfred"}, "benchmark"),
    ],
)
def test_bad_run_settings_name_the_field_before_any_request(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    settings: dict[str, Any],
    field: str,
) -> None:
    base = {
        "method": "react",
        "benchmark": "errandworld",
        "backbone": "loopback",
        "embedding": "loopback",
        "iterations": 1,
        "train_per_iteration": 1,
        "max_steps": 2,
        "out_root": str(tmp_path / "runs"),
        "cache_dir": None,
        "progress": False,
    }
    with pytest.raises(ValueError, match=field):
        RunSpec.from_dict({**base, **settings})
    # the same through the command line and a params YAML, with a live server that must stay idle
    with LoopbackServer(responder=errand_policy) as srv:
        monkeypatch.setenv("ANTIPERSIST_PARAMS", str(_params_dir(tmp_path, srv.base_url)))
        path = tmp_path / "run.yaml"
        path.write_text(json.dumps({**base, **settings}))
        assert cli_main(["run", "--params", str(path)]) == 2
        assert srv.request_count == 0
    err = capsys.readouterr().err
    assert err.startswith("error:") and field in err and "Traceback" not in err


@pytest.mark.parametrize(
    "override,needle",
    [
        ({"backbone": "no-such-model"}, "backbone profile 'no-such-model'"),
        ({"embedding": "no-such-embedder"}, "embedding profile 'no-such-embedder'"),
        ({"method_params": {"budgte": 3}}, "budgte"),
        ({"method_params": {"budget": "five"}}, "budget"),
        ({"method_params": {"judge": "yes"}}, "judge"),
        ({"benchmark_options": {"crash_at": 3}}, "benchmark_options"),
        ({"benchmark_options": {"crash_at": 3}}, "crash_at"),
    ],
)
def test_bad_names_and_method_params_are_refused_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: dict[str, Any], needle: str
) -> None:
    with LoopbackServer(responder=errand_policy) as srv:
        monkeypatch.setenv("ANTIPERSIST_PARAMS", str(_params_dir(tmp_path, srv.base_url)))
        spec = RunSpec.from_dict(
            {
                "method": "abstraction_memory",
                "benchmark": "errandworld",
                "backbone": "loopback",
                "embedding": "loopback",
                "iterations": 1,
                "train_per_iteration": 1,
                "max_steps": 2,
                "out_root": str(tmp_path / "runs"),
                "cache_dir": None,
                "progress": False,
                **override,
            }
        )
        with pytest.raises(ValueError) as info:
            run_cell(spec)
        assert srv.request_count == 0, "a model request was made before the settings were checked"
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "override,field",
    [
        ({"max_retry": 3}, "max_retry"),
        ({"timeout_s": "fast"}, "timeout_s"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_retries": "3"}, "max_retries"),
        ({"max_retries": -1}, "max_retries"),
        ({"backoff_base_s": [1]}, "backoff_base_s"),
        ({"api_key_env": 12}, "api_key_env"),
        ({"system_prompt": "merged"}, "system_prompt"),
        ({"model": ""}, "model"),
    ],
)
def test_bad_backbone_profile_names_file_and_field(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    override: dict[str, Any],
    field: str,
) -> None:
    with LoopbackServer(responder=errand_policy) as srv:
        params = _params_dir(tmp_path, srv.base_url, **override)
        monkeypatch.setenv("ANTIPERSIST_PARAMS", str(params))
        rc = cli_main(
            [
                "run",
                "--method",
                "react",
                "--benchmark",
                "errandworld",
                "--backbone",
                "loopback",
                "--embedding",
                "loopback",
                "--iterations",
                "1",
                "--train-per-iteration",
                "1",
                "--out-root",
                str(tmp_path / "runs"),
                "--no-cache",
            ]
        )
        assert srv.request_count == 0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert field in err and str(params / "backbones" / "loopback.yaml") in err and "Traceback" not in err


def test_missing_java_stops_a_scienceworld_run_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(scienceworld_mod.shutil, "which", lambda name, *a, **k: None)
    # doctor names the missing piece and the fix
    (java,) = [c for c in doctor.run_checks() if c.name.startswith("Java")]
    assert not java.ok and "java" in java.detail and "apt-get install" in java.fix
    with LoopbackServer(responder=errand_policy) as srv:
        monkeypatch.setenv("ANTIPERSIST_PARAMS", str(_params_dir(tmp_path, srv.base_url)))
        rc = cli_main(
            [
                "run",
                "--method",
                "react",
                "--benchmark",
                "scienceworld",
                "--backbone",
                "loopback",
                "--embedding",
                "loopback",
                "--iterations",
                "1",
                "--train-per-iteration",
                "1",
                "--heldout-limit",
                "1",
                "--train-pool-limit",
                "2",
                "--out-root",
                str(tmp_path / "runs"),
                "--no-cache",
            ]
        )
        assert srv.request_count == 0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Java runtime" in err and "apt-get install" in err
    # nothing was written, not even the run folder: once Java is installed the same command starts cleanly
    assert not (tmp_path / "runs").exists()


def test_missing_alfworld_data_is_named_by_doctor_and_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(alfworld_mod.DATA_ENV_VAR, str(tmp_path / "nowhere"))
    (alf,) = [c for c in doctor.run_checks() if c.name.startswith("ALFWorld")]
    assert not alf.ok and alfworld_mod.DATA_ENV_VAR in alf.detail and str(tmp_path / "nowhere") in alf.detail
    assert "alfworld-download" in alf.fix or "make alfworld-data" in alf.fix
    with LoopbackServer(responder=errand_policy) as srv:
        ep = _endpoint(srv)
        spec = RunSpec(
            method="react",
            benchmark="alfworld",
            backbone="loopback",
            embedding="loopback",
            iterations=1,
            train_per_iteration=1,
            max_steps=2,
            heldout_limit=1,
            out_root=str(tmp_path / "runs"),
            cache_dir=None,
            progress=False,
        )
        with pytest.raises(BenchmarkUnavailableError, match=alfworld_mod.DATA_ENV_VAR):
            run_cell(spec, endpoint=ep, embed_endpoint=ep)
        assert srv.request_count == 0


# -- 7. secrets ---------------------------------------------------------------------------------------


def test_api_key_from_the_environment_never_reaches_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    var = "AP_SECRET_" + secrets.token_hex(4).upper()
    key = "sk-" + secrets.token_urlsafe(32)
    monkeypatch.setenv(var, key)
    with LoopbackServer(responder=errand_policy) as srv:
        ep = _endpoint(srv, api_key_env=var)
        spec = _spec(
            tmp_path / "runs",
            "anti_persistence",
            cache=tmp_path / "cache",
            iterations=1,
            train_per_iteration=3,
            heldout_limit=2,
        )
        run_cell(spec, endpoint=ep, embed_endpoint=ep, fsync=False)
        bearers = {r["bearer_sha256"] for r in srv.requests}
    assert bearers == {hashlib.sha256(key.encode()).hexdigest()[:16]}  # the key was really sent
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "calls.jsonl" for p in files)
    assert len([p for p in files if (tmp_path / "cache") in p.parents]) > 10  # the response cache was used
    for p in files:
        assert key.encode() not in p.read_bytes(), p
    manifest = json.loads((spec.run_dir() / "manifest.json").read_text())
    for which in ("endpoint", "embedding_endpoint"):
        assert manifest[which]["api_key_env"] == var
        assert set(manifest[which]) == set(Endpoint(base_url="http://x/v1", model="m").describe())


@pytest.mark.slow
def test_api_key_never_reaches_an_executed_notebook_or_its_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from antipersist_lib.runner.notebooks_runner import execute_all

    var = "AP_SECRET_" + secrets.token_hex(4).upper()
    key = "sk-" + secrets.token_urlsafe(32)
    monkeypatch.setenv(var, key)
    repo = Path(__file__).resolve().parents[1]
    with LoopbackServer(responder=errand_policy) as srv:
        ep = _endpoint(srv, api_key_env=var)
        spec = _spec(
            tmp_path / "runs",
            "anti_persistence",
            cache=tmp_path / "cache",
            iterations=1,
            train_per_iteration=3,
            heldout_limit=2,
        )
        run_cell(spec, endpoint=ep, embed_endpoint=ep, fsync=False)
    root = tmp_path / "kit"
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(repo / "notebooks" / "01_main_results.ipynb", root / "notebooks")
    shutil.copytree(repo / "params" / "01_main_results", root / "params" / "01_main_results")
    done = execute_all("smoke", root=root, overrides={"runs_root": str(tmp_path / "runs"), "mode": "load"})
    executed = done[0].output
    text = executed.read_text()
    assert str(tmp_path / "runs") in text  # the papermill parameters cell is in the executed copy
    assert key not in text
    for p in [q for q in tmp_path.rglob("*") if q.is_file()]:
        assert key.encode() not in p.read_bytes(), p
