"""Paper-grid rehearsal (issue 45): the paper's grid at its real shape, with the model replaced by a clock.

What runs: grid files written into one root, with the design of ``params/grid/paper.yaml`` (its eight methods,
its method parameters, K = 10 iterations of 50 training tasks, 50 steps, 16 concurrent held-out episodes) and
the run variants of the ablation grids that can run on ErrandWorld, on the kit's own test world instead of the
real engines (no ALFWorld, WebShop or ScienceWorld: their engines would dominate two cores). ErrandWorld is
sized to ALFWorld's pools (``errandworld.json`` in ``$ANTIPERSIST_PARTITIONS``: 180 training, 134 held-out
tasks), so a main run records the 1,840 episodes an ALFWorld run of the paper records.

The model: the loopback server in its own process (as ``perf.saturation``), every call delayed by a fixed
latency (default 20 ms, so the rehearsal is CPU-bound and measures the kit), replies padded to the paper's
mean completion length (read from ``grid paper.yaml --plan --totals``), embeddings of 4096 dimensions like
Qwen3-Embedding-8B's. Backbone "errand" plays ErrandWorld (``testing.scripted_policy.errand_policy``:
episodes of a few steps); backbone "look" only looks, so its episodes run all 50 steps; "judge" accepts.

How it is isolated: each grid is the real command line (``python -m antipersist_lib grid``) in a child
process; a sampler polls that process tree every 0.5 s with psutil (CPU, RSS, and which run each worker holds
open by its ``run.lock``), and the children's rusage gives the process pool's exact CPU. The server's CPU is
its own process's and is not counted as the kit's. Kit CPU per call as a fraction of 1 s is the kit's share
of a run whose model answers in 1 s per call. The kill test starts a grid on each executor (Ray, and the
process pool), kills its whole process tree with SIGKILL once a run has recorded two iterations, runs the same
command again, and checks that every (iteration, phase, position) is recorded exactly once. Notebooks 01-08 then run on the process pool's root.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from antipersist_lib.envs.errand_world import partition
from antipersist_lib.envs.partitions import save_partition
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.rundir import RunDirectory, count_lines

from . import loopback_process, row

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ROOT / "params" / "grid"
#: ALFWorld's pools (Table 4), the paper's largest held-out set: a main run is 10 x (50 + 134) episodes
TRAIN_POOL, HELDOUT = 180, 134
#: the ablation grids whose variants run on ErrandWorld, and those that cannot (why)
ABLATIONS = (
    "figure5_gamma",
    "figure6_policies",
    "figure7_lambda",
    "figure12_budgets",
    "table2_persist_vs_discard",
    "figure11b_retention",
    "reproduction_paper",
)
NOT_RUN = {
    "figure11a_skill_content": "AppWorld's skill libraries (params/skills/appworld-*.json), evaluation only",
    "figure11b_frozen_layer": "reads the frozen layer of a finished webshop abstraction-judge run",
}
KEY_ENV = "ANTIPERSIST_REHEARSAL_KEY"
FILLER = "so I keep to the plan and check each result before the next move".split()


@dataclass
class Sizes:
    """One grid's protocol sizes."""

    iterations: int
    train: int
    heldout: int
    steps: int = 50

    def label(self) -> str:
        return f"K={self.iterations} x {self.train} train + {self.heldout} held-out, {self.steps} steps"


FULL = Sizes(10, 50, HELDOUT)
SMALL = Sizes(2, 10, 16)
KILL = Sizes(4, 20, 40)


# -- the model: a scripted server with a clock ------------------------------------------------------------


def _pad(text: str, tokens: int) -> str:
    """An agent turn padded with neutral words to about ``tokens`` words (synthesis replies are kept)."""
    if "Action:" not in text:
        return text
    thought, _, action = text.rpartition("Action:")
    words = thought.replace("Thought:", "").split()
    extra = max(0, tokens - len(words) - len(action.split()) - 2)
    words += (FILLER * (extra // len(FILLER) + 1))[:extra]
    return f"Thought: {' '.join(words)}\nAction:{action}"


def _responder(reply_tokens: int) -> Any:
    from antipersist_lib.testing.scripted_policy import errand_policy

    def respond(req: dict[str, Any]) -> str:
        model = req.get("model")
        if model == "judge":
            return "ACCEPT"
        text = "Thought: I look around.\nAction: look" if model == "look" else errand_policy(req)
        return _pad(text, reply_tokens)

    return respond


def _serve(latency_s: float, reply_tokens: int) -> None:
    """Child-process entry: serve until stdin closes; the first stdout line is the base URL. The server's
    request log is emptied every second: a rehearsal sends hundreds of thousands of requests."""
    from antipersist_lib.testing.loopback_server import LoopbackServer, bag_of_words_embedding

    def embed(text: str) -> list[float]:
        return bag_of_words_embedding(text, 4096)

    with LoopbackServer(_responder(reply_tokens), embed, latency_s=latency_s) as srv:
        print(srv.base_url, flush=True)
        done = threading.Event()
        threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
        while not done.wait(1.0):
            with srv._lock:
                srv.requests.clear()


# -- the grids ----------------------------------------------------------------------------------------------


def paper_totals() -> dict[str, float]:
    """runs, episodes, calls, input and output tokens of the whole paper grid, from the planner."""
    out = subprocess.run(
        [sys.executable, "-m", "antipersist_lib", "grid", str(GRIDS / "paper.yaml"), "--plan", "--totals"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    m = re.search(r"total: ([\d,]+) runs, ([\d,]+) episodes.*?, ([\d,]+) calls, ([\d,]+) input \+ ([\d,]+) output", out)
    if m is None:
        raise RuntimeError(f"cannot read the planner's totals from:\n{out}")
    keys = ("runs", "episodes", "calls", "input_tokens", "output_tokens")
    return {k: float(v.replace(",", "")) for k, v in zip(keys, m.groups(), strict=True)}


def _endpoint(url: str, name: str, model: str) -> dict[str, Any]:
    return {"name": name, "model": model, "base_url": url, "api_key_env": KEY_ENV, "max_retries": 2}


def _variants() -> dict[str, dict[str, Any]]:
    """Every run variant of the ablation grids that runs on ErrandWorld, with its grid's shared parameters."""
    out: dict[str, dict[str, Any]] = {}
    for name in ABLATIONS:
        data = yaml.safe_load((GRIDS / f"{name}.yaml").read_text(encoding="utf-8"))
        shared = data.get("method_params") or {}
        for vname, v in (data.get("variants") or {}).items():
            params = {**(shared.get(v["method"]) or {}), **(v.get("params") or {})}
            out[vname] = {"method": v["method"], "params": params}
    return out


def write_grid(
    root: Path, name: str, url: str, sizes: Sizes, *, methods: list[str], variants: dict[str, Any], model: str
) -> Path:
    """A grid file of the paper's design on ErrandWorld, one seed (42), every endpoint the loopback server."""
    paper = yaml.safe_load((GRIDS / "paper.yaml").read_text(encoding="utf-8"))
    judged = any(v["params"].get("judge") for v in variants.values())
    data = {
        "name": name,
        "methods": methods,
        "variants": variants,
        "method_params": paper["method_params"],
        "benchmarks": ["errandworld"],
        "seeds": [42],
        "backbones": [_endpoint(url, "loopback", model)],
        "embedding": _endpoint(url, "loopback-embed", "embed"),
        "shared_server": True,
        "iterations": sizes.iterations,
        "train_per_iteration": sizes.train,
        "heldout_limit": sizes.heldout,
        "max_steps": sizes.steps,
        "heldout_concurrency": paper["heldout_concurrency"],
        "agent": paper["agent"],
        "out_root": str(root / "runs"),
        "cache_dir": None,  # every call reaches the server, as with a sampling model
        "max_parallel": 2,
    }
    if judged:
        data["judge"] = _endpoint(url, "loopback-judge", "judge")
    if not methods:
        del data["methods"]
    path = root / f"grid_{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _grid_env(root: Path) -> dict[str, str]:
    parts = root / "partitions"
    if not (parts / "errandworld.json").exists():
        save_partition(partition(n_train=TRAIN_POOL, n_heldout=HELDOUT), parts / "errandworld.json")
    return {**os.environ, "ANTIPERSIST_PARTITIONS": str(parts), KEY_ENV: "rehearsal", "PYTHONUNBUFFERED": "1"}


# -- watching a grid: CPU, RSS per (run, iteration) -----------------------------------------------------------


def _last_iteration(run_dir: Path) -> int:
    """The iteration a run is in: that of the last training episode it recorded (1 before any)."""
    path = RunDirectory(run_dir).episodes_path("train")
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            lines = fh.read().splitlines()
        for line in reversed(lines):
            try:
                return int(json.loads(line)["iteration"])
            except (ValueError, KeyError):
                continue
    except OSError:
        pass
    return 1


@dataclass
class Watch:
    """What the sampler saw of one grid process tree."""

    cpu: dict[tuple[int, float], tuple[str, float]] = field(default_factory=dict)  # (pid, start) -> (kind, s)
    rss: dict[tuple[str, int], float] = field(default_factory=dict)  # (run dir, iteration) -> peak MB
    peak_tree_mb: float = 0.0

    def kit_cpu(self) -> float:
        return sum(s for kind, s in self.cpu.values() if kind != "ray")

    def ray_cpu(self) -> float:
        return sum(s for kind, s in self.cpu.values() if kind == "ray")


def _kind(proc: Any) -> str:
    """driver (the grid command), worker (a process-pool or Ray worker) or ray (Ray's own daemons)."""
    try:
        cmd = " ".join(proc.cmdline())
    except Exception:  # noqa: BLE001 - gone meanwhile
        return "ray"
    if "multiprocessing" in cmd or cmd.startswith("ray::"):
        return "worker"
    return "driver" if "antipersist_lib grid" in cmd else "ray"


def _sample(pid: int, watch: Watch, stop: threading.Event, every_s: float = 0.5) -> None:
    import psutil

    while not stop.wait(every_s):
        try:
            top = psutil.Process(pid)
            procs = [top, *top.children(recursive=True)]
        except psutil.Error:
            continue
        tree = 0.0
        for p in procs:
            try:
                with p.oneshot():
                    t, mb, kind = p.cpu_times(), p.memory_info().rss / 2**20, _kind(p)
                    lock = next((f.path for f in p.open_files() if f.path.endswith(RunDirectory.LOCK)), None)
                watch.cpu[(p.pid, p.create_time())] = (kind, t.user + t.system)
            except psutil.Error:
                continue
            tree += mb
            if lock is not None:
                run = str(Path(lock).parent)
                key = (run, _last_iteration(Path(run)))
                watch.rss[key] = max(watch.rss.get(key, 0.0), mb)
        watch.peak_tree_mb = max(watch.peak_tree_mb, tree)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_grid(path: Path, env: dict[str, str], executor: str, *, kill_when: Any = None) -> dict[str, Any]:
    """The grid command in a child process (its own session), watched; ``kill_when(root)`` true: SIGKILL to
    the whole tree. Returns wall, children's CPU (rusage), the sampler's ``Watch`` and whether it was killed."""
    import psutil

    before, t0 = _children_cpu(), time.monotonic()
    log = open(path.with_suffix(f".{executor}.log"), "a", encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "antipersist_lib", "grid", str(path), "--executor", executor],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    watch, stop = Watch(), threading.Event()
    sampler = threading.Thread(target=_sample, args=(proc.pid, watch, stop), daemon=True)
    sampler.start()
    killed = False
    while proc.poll() is None:
        time.sleep(0.5)
        if kill_when is not None and kill_when():
            tree = [proc, *psutil.Process(proc.pid).children(recursive=True)]
            os.killpg(proc.pid, signal.SIGKILL)
            for p in tree[1:]:  # Ray's daemons start sessions of their own
                try:
                    p.kill()
                except psutil.Error:
                    pass
            killed = True
            break
    proc.wait()
    stop.set()
    sampler.join()
    log.close()
    return {
        "wall_s": time.monotonic() - t0,
        "rusage_cpu_s": _children_cpu() - before,
        "watch": watch,
        "killed": killed,
        "rc": proc.returncode,
    }


# -- what the runs recorded -----------------------------------------------------------------------------------


def _du(path: Path) -> int:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in (root / "runs").rglob(RunDirectory.MANIFEST))


def recorded(run_dir: Path) -> dict[str, Any]:
    """Episodes, calls, prompt tokens and disk of one run folder."""
    layout = RunDirectory(run_dir)
    calls = [x.value for x in read_jsonl(layout.calls_path)]
    prompt = [c.get("prompt_tokens") or (c.get("usage") or {}).get("prompt_tokens") or 0 for c in calls]
    return {
        "train": count_lines(layout.episodes_path("train")),
        "heldout": count_lines(layout.episodes_path("heldout")),
        "calls": len(calls),
        "prompt_tokens": sum(prompt) / len(prompt) if prompt else 0.0,
        "bytes": _du(run_dir),
    }


def exactly_once(run_dir: Path, sizes: Sizes) -> list[str]:
    """Every (iteration, phase, position) once and the expected counts, else what is wrong."""
    layout, problems = RunDirectory(run_dir), []
    for phase, per in (("train", sizes.train), ("heldout", sizes.heldout)):
        keys = Counter((x.value["iteration"], x.value["position"]) for x in read_jsonl(layout.episodes_path(phase)))
        twice = sum(1 for n in keys.values() if n > 1)
        if twice or len(keys) != sizes.iterations * per:
            problems.append(f"{run_dir.name}/{phase}: {len(keys)} distinct of {sizes.iterations * per}, {twice} twice")
    return problems


# -- the rehearsal ------------------------------------------------------------------------------------------------


def _cpu_rows(tag: str, cpu_s: float, episodes: int, calls: int, setting: str) -> list[dict[str, Any]]:
    return [
        row("rehearsal", f"{tag}: kit CPU ({setting})", cpu_s, "s"),
        row("rehearsal", f"{tag}: episodes recorded", episodes, "episodes"),
        row("rehearsal", f"{tag}: model calls recorded", calls, "calls"),
        row("rehearsal", f"{tag}: kit CPU per episode", 1e3 * cpu_s / max(episodes, 1), "ms"),
        row("rehearsal", f"{tag}: kit CPU per call", 1e3 * cpu_s / max(calls, 1), "ms"),
        row(
            "rehearsal",
            f"{tag}: kit CPU share of a run at 1 s per model call (CPU per call / 1 s)",
            cpu_s / max(calls, 1),
            "fraction",
            ("<", 0.05),
        ),
    ]


def _slope(points: list[tuple[int, float]]) -> float:
    """Least-squares MB per iteration."""
    n = len(points)
    if n < 2:
        return 0.0
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def _rss_rows(watch: Watch, sizes: Sizes) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """Per run: the worker's peak RSS in each iteration (last / first, and the slope over iterations 2-K)."""
    per_run: dict[str, dict[int, float]] = {}
    for (run, it), mb in watch.rss.items():
        per_run.setdefault(run, {})[it] = mb
    rows, series = [], {}
    for run, by_it in sorted(per_run.items()):
        pts = sorted(by_it.items())
        name = Path(run).parent.name
        series[name] = [round(mb, 1) for _, mb in pts]
        if len(pts) < sizes.iterations:
            continue  # sampled in too few iterations to say
        setting = f"peak RSS of {name}'s worker, iteration {pts[-1][0]} (iteration 1: {pts[0][1]:.0f} MiB)"
        rows.append(row("rehearsal", setting, pts[-1][1], "MiB"))
        rows.append(row("rehearsal", f"{name}: RSS slope over iterations 2-{pts[-1][0]}", _slope(pts[1:]), "MiB/it"))
    return rows, series


def rehearse(
    out: Path, *, latency_s: float, executors: tuple[str, ...], ablation_sizes: Sizes, notebooks: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The whole rehearsal under ``out``; rows and a JSON-able record of everything measured."""
    totals = paper_totals()
    reply_tokens = round(totals["output_tokens"] / totals["calls"])
    paper_methods = yaml.safe_load((GRIDS / "paper.yaml").read_text(encoding="utf-8"))["methods"]
    server, url = loopback_process.start("perf.rehearsal", latency_s, reply_tokens)
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    record: dict[str, Any] = {"paper": totals, "reply_tokens": reply_tokens, "latency_s": latency_s, "grids": {}}
    try:
        if "process" in executors:
            root = out / "process"
            env = _grid_env(root)
            grids = {
                "main": (FULL, write_grid(root, "main", url, FULL, methods=paper_methods, variants={}, model="errand")),
                "long": (
                    SMALL,
                    write_grid(
                        root,
                        "long",
                        url,
                        SMALL,
                        methods=[],
                        model="look",
                        variants={
                            "react-look": {"method": "react", "params": {}},
                            "anti_persistence-look": {"method": "anti_persistence", "params": {"embedding_retries": 0}},
                        },
                    ),
                ),
                "ablations": (
                    ablation_sizes,
                    write_grid(
                        root, "ablations", url, ablation_sizes, methods=[], variants=_variants(), model="errand"
                    ),
                ),
            }
            for name, (sizes, path) in grids.items():
                rows += _measure_grid(record, name, path, env, "process", sizes)
            rows += _disk_rows(record, root)
            if notebooks:
                rows += _notebook_rows(record, root)
        for executor in executors:
            rows += _kill_test(record, out / f"kill-{executor}", url, paper_methods, executor)
    finally:
        loopback_process.stop(server)
    record["load_before"], record["load_after"] = load_before, os.getloadavg()
    rows += _extrapolate(record, totals)
    return rows, record


def _measure_grid(
    record: dict[str, Any], name: str, path: Path, env: dict[str, str], executor: str, sizes: Sizes
) -> list[dict[str, Any]]:
    res = run_grid(path, env, executor)
    root = path.parent
    runs = [r for r in run_dirs(root) if yaml.safe_load(path.read_text())["out_root"] in str(r)]
    names = _grid_run_names(path)
    runs = [r for r in runs if r.parent.name in names]
    rec = {r.parent.name: recorded(r) for r in runs}
    episodes = sum(v["train"] + v["heldout"] for v in rec.values())
    calls = sum(v["calls"] for v in rec.values())
    watch = res["watch"]
    cpu = res["rusage_cpu_s"] if executor == "process" else watch.kit_cpu()
    setting = f"{len(runs)} runs, {sizes.label()}, {executor} pool"
    rows = _cpu_rows(name, cpu, episodes, calls, setting)
    rows.append(row("rehearsal", f"{name}: wall", res["wall_s"], "s"))
    rss_rows, series = _rss_rows(watch, sizes)
    rows += rss_rows if name == "main" else []
    problems = [p for r in runs for p in exactly_once(r, sizes)]
    rows.append(row("rehearsal", f"{name}: runs with an episode missing or twice", len(problems), "runs"))
    record["grids"][name] = {
        "executor": executor,
        "sizes": sizes.__dict__,
        "rc": res["rc"],
        "wall_s": res["wall_s"],
        "cpu_s": cpu,
        "sampled_cpu_s": watch.kit_cpu(),
        "peak_tree_mb": watch.peak_tree_mb,
        "runs": rec,
        "rss_per_iteration": series,
        "problems": problems,
    }
    return rows


def _grid_run_names(path: Path) -> set[str]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return set(data.get("methods") or []) | set(data.get("variants") or {})


def _disk_rows(record: dict[str, Any], root: Path) -> list[dict[str, Any]]:
    main = record["grids"]["main"]["runs"]
    sizes = sorted(v["bytes"] for v in main.values())
    total = _du(root / "runs")
    record["disk"] = {"main_runs": {k: v["bytes"] for k, v in main.items()}, "root_bytes": total}
    return [
        row("rehearsal", "disk per main run (full size): smallest", sizes[0] / 2**20, "MiB"),
        row("rehearsal", "disk per main run (full size): largest", sizes[-1] / 2**20, "MiB"),
        row("rehearsal", "disk per main run (full size): mean", sum(sizes) / len(sizes) / 2**20, "MiB"),
        row("rehearsal", f"disk, whole rehearsal root ({len(run_dirs(root))} runs)", total / 2**20, "MiB"),
    ]


def _notebook_rows(record: dict[str, Any], root: Path) -> list[dict[str, Any]]:
    """Notebooks 01-08 on the rehearsal's root (mode load), each timed; a failure is recorded, not raised."""
    from antipersist_lib.runner.notebooks_runner import execute_all, notebook_paths

    runs = root / "runs"
    ap = next((r for r in run_dirs(root) if r.parent.name == "anti_persistence"), None)
    overrides = {"runs_root": str(runs), "mode": "load", "run_dir": str(ap), "cache_dir": None}
    rows, times = [], {}
    for nb in [p.stem for p in notebook_paths(ROOT)][:8]:
        t = time.monotonic()
        try:
            execute_all(
                "paper", only=[nb], root=ROOT, overrides=overrides, out_dir_for=lambda n: root / "notebooks" / n
            )
            times[nb] = {"seconds": time.monotonic() - t, "error": None}
        except Exception as exc:  # noqa: BLE001 - a notebook that cannot read this root (NotebookError)
            times[nb] = {"seconds": time.monotonic() - t, "error": str(exc).splitlines()[0][:300]}
        status = "ok" if times[nb]["error"] is None else "FAILED"
        rows.append(row("rehearsal", f"notebook {nb} on the root ({status})", times[nb]["seconds"], "s"))
    record["notebooks"] = times
    return rows


def _kill_test(record: dict[str, Any], root: Path, url: str, methods: list[str], executor: str) -> list[dict[str, Any]]:
    """The main design on one executor (``ray`` or ``process``): SIGKILL the whole tree once a run has
    recorded two iterations, then the same command again; every (iteration, phase, position) once, every
    expected episode there. On the process pool the kill lands on the driver and its pool workers at once,
    mid-episode, as an out-of-memory kill or a lost node would."""
    kills = record.setdefault("kill", {})
    if executor == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            kills[executor] = {"skipped": "ray is not installed in this environment"}
            return []
    env = _grid_env(root)
    path = write_grid(root, "kill", url, KILL, methods=methods, variants={}, model="errand")

    def two_iterations_done() -> bool:
        return any(count_lines(RunDirectory(r).episodes_path("heldout")) >= 2 * KILL.heldout for r in run_dirs(root))

    first = run_grid(path, env, executor, kill_when=two_iterations_done)
    before = {r.parent.name: recorded(r) for r in run_dirs(root)}
    second = run_grid(path, env, executor)
    after = {r.parent.name: recorded(r) for r in run_dirs(root)}
    problems = [p for r in run_dirs(root) for p in exactly_once(r, KILL)]
    episodes = sum(
        v["train"]
        + v["heldout"]
        - before.get(k, {"train": 0, "heldout": 0})["train"]
        - before.get(k, {"train": 0, "heldout": 0})["heldout"]
        for k, v in after.items()
    )
    calls = sum(v["calls"] - before.get(k, {"calls": 0})["calls"] for k, v in after.items())
    w = second["watch"]
    kills[executor] = {
        "sizes": KILL.__dict__,
        "killed": first["killed"],
        "killed_after_s": first["wall_s"],
        "episodes_before_kill": {k: v["train"] + v["heldout"] for k, v in before.items()},
        "resume_rc": second["rc"],
        "resume_wall_s": second["wall_s"],
        "resume_kit_cpu_s": w.kit_cpu() if executor == "ray" else second["rusage_cpu_s"],
        "resume_ray_daemons_cpu_s": w.ray_cpu() if executor == "ray" else None,
        "runs": len(after),
        "problems": problems,
    }
    setting = f"{len(after)} runs, {KILL.label()}, {executor} (after the kill)"
    rows = _cpu_rows(executor, kills[executor]["resume_kit_cpu_s"], episodes, calls, setting)
    if executor == "ray":
        rows.append(row("rehearsal", "ray: Ray's own daemons' CPU (gcs, raylet, agents)", w.ray_cpu(), "s"))
    rows.append(
        row(
            "rehearsal",
            f"{executor}: kill -9 after {first['wall_s']:.0f} s, then the same command: runs",
            len(after),
            "runs",
        )
    )
    rows.append(
        row(
            "rehearsal",
            f"{executor}: kill -9 then rerun: runs with an episode missing or twice",
            len(problems),
            "runs",
            ("<", 1),
        )
    )
    return rows


def _extrapolate(record: dict[str, Any], totals: dict[str, float]) -> list[dict[str, Any]]:
    """The whole paper grid from the main grid's per-episode and per-call figures, in the open."""
    main = record["grids"].get("main")
    if not main:
        return []
    episodes = sum(v["train"] + v["heldout"] for v in main["runs"].values())
    calls = sum(v["calls"] for v in main["runs"].values())
    long = record["grids"].get("long", {})
    long_calls = sum(v["calls"] for v in long.get("runs", {}).values())
    per_call = long["cpu_s"] / long_calls if long_calls else main["cpu_s"] / calls
    per_episode_main = main["cpu_s"] / episodes
    disk_per_episode = sum(v["bytes"] for v in main["runs"].values()) / episodes
    # a long episode's records grow with its steps as a real benchmark's do: bytes per call bound them
    disk_per_call = sum(v["bytes"] for v in long.get("runs", {}).values()) / long_calls if long_calls else 0.0
    ex = {
        "kit_cpu_h_by_calls": totals["calls"] * per_call / 3600,
        "kit_cpu_h_by_episodes": totals["episodes"] * per_episode_main / 3600,
        "model_h_at_1s": totals["calls"] / 3600,
        "disk_gb_by_episodes": totals["episodes"] * disk_per_episode / 1e9,
        "disk_gb_by_calls": totals["calls"] * disk_per_call / 1e9,
        "per_call_s": per_call,
        "per_episode_s": per_episode_main,
    }
    record["extrapolation"] = ex
    return [
        row(
            "rehearsal",
            f"paper grid ({totals['runs']:.0f} runs, {totals['calls']:,.0f} calls): kit CPU at the long-episode CPU per call",
            ex["kit_cpu_h_by_calls"],
            "CPU h",
        ),
        row(
            "rehearsal",
            f"paper grid ({totals['episodes']:,.0f} episodes): kit CPU at the main grid's CPU per episode",
            ex["kit_cpu_h_by_episodes"],
            "CPU h",
        ),
        row("rehearsal", "paper grid: model time at 1 s per call (serial)", ex["model_h_at_1s"], "h"),
        row("rehearsal", "paper grid: disk at the main grid's bytes per episode", ex["disk_gb_by_episodes"], "GB"),
        row("rehearsal", "paper grid: disk at the long-episode grid's bytes per call", ex["disk_gb_by_calls"], "GB"),
    ]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """The suite's entry (``python -m perf --only rehearsal``): the full rehearsal (18 minutes on two busy
    cores; ``--quick``: the Ray kill test only) in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="rehearsal-") as tmp:
        rows, _ = rehearse(
            Path(tmp),
            latency_s=0.02,
            executors=("ray",) if quick else ("process", "ray"),
            ablation_sizes=SMALL,
            notebooks=not quick,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.rehearsal", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", default="outputs/rehearsal", help="root of the grids and runs (a previous rehearsal's is replaced)"
    )
    ap.add_argument("--latency", type=float, default=0.02, help="seconds per model call (default 0.02)")
    ap.add_argument(
        "--executor",
        choices=("both", "process", "ray"),
        default="both",
        help="process: the full-size grids and the kill -9 test on the process pool; ray: the kill -9 test on a local Ray instance",
    )
    ap.add_argument(
        "--ablations-full", action="store_true", help="ablation variants at full size too (about an hour more)"
    )
    ap.add_argument("--no-notebooks", action="store_true", help="skip timing notebooks 01-08")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    if out.exists() and any(out.iterdir()):
        marks = (
            "rehearsal.json",
            "process/partitions/errandworld.json",
            "ray/partitions/errandworld.json",  # the Ray kill test's folder before the process pool had one
            "kill-ray/partitions/errandworld.json",
            "kill-process/partitions/errandworld.json",
        )
        if not any((out / m).exists() for m in marks):
            ap.error(f"--out {out} holds files that are not a rehearsal's; name an empty or new folder")
        shutil.rmtree(out)  # a previous rehearsal's root: runs would resume instead of being measured
    out.mkdir(parents=True)
    executors = ("process", "ray") if args.executor == "both" else (args.executor,)
    t = time.monotonic()
    rows, record = rehearse(
        out,
        latency_s=args.latency,
        executors=executors,
        ablation_sizes=FULL if args.ablations_full else SMALL,
        notebooks=not args.no_notebooks,
    )
    record["wall_s"] = time.monotonic() - t
    from . import markdown

    print(markdown(rows))
    (out / "rehearsal.json").write_text(json.dumps({"rows": rows, "record": record}, indent=1, default=str) + "\n")
    (out / "rehearsal.md").write_text(markdown(rows), encoding="utf-8")
    print(f"wrote {out / 'rehearsal.json'} and {out / 'rehearsal.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        _serve(float(sys.argv[2]), int(sys.argv[3]))
    else:
        raise SystemExit(main())
