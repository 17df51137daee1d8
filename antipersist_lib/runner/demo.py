"""The pipeline demo: the whole protocol on the kit's test instruments.

What it is: ReAct, the three persistent-memory configurations and Anti-Persistence run through
the real protocol (training, end-of-iteration updates, frozen held-out evaluation, resumable run
directories) on ErrandWorld, a four-room test world, with the "model" being a scripted policy
behind the loopback OpenAI-compatible server. Every call goes through the same client, embedder,
selector, retrieval, synthesis and agent loop that real runs use. What it is not: a benchmark
or a model; its numbers say nothing about the paper's claims.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import atomic_write_json
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

LABEL = "pipeline demo: scripted loopback policy on ErrandWorld (test instruments, not a model or benchmark)"
DEMO_METHODS: dict[str, dict[str, Any]] = {
    "react": {},
    "trajectory_memory": {},
    "abstraction_memory": {},
    "joint_memory": {},
    # 4 modes x W_init=3 and 3 round-robin iterations need more tasks than the demo has
    "anti_persistence": {"round_robin_iterations": 1, "warmup_per_mode": 1},
}


def _errand_spec(
    name: str,
    method: str,
    params: dict[str, Any],
    out: Path,
    *,
    seed: int,
    iterations: int,
    max_steps: int,
    verbose: bool,
    heldout_limit: int | None = None,
    heldout_concurrency: int = 3,
) -> RunSpec:
    """One demo run on ErrandWorld behind the loopback server (its scripted policy is the "model")."""
    return RunSpec(
        method=method,
        benchmark="errandworld",
        backbone="scripted-loopback",
        embedding="loopback-bag-of-words",
        seed=seed,
        iterations=iterations,
        train_per_iteration=6,
        max_steps=max_steps,
        heldout_limit=heldout_limit,
        heldout_concurrency=heldout_concurrency,
        method_params=params,
        name=name,
        out_root=str(out / "runs"),
        cache_dir=None,
        progress=verbose,
    )


def run_demo(
    out: str | Path = "outputs/demo", *, iterations: int = 3, seed: int = 42, verbose: bool = True
) -> dict[str, Any]:
    """Run every demo method; returns per-method held-out success per iteration and run dirs."""
    out = Path(out)
    if (out / "runs").exists():
        shutil.rmtree(out / "runs")  # the demo always starts fresh
    summary: dict[str, Any] = {"label": LABEL, "methods": {}}
    with LoopbackServer(responder=errand_policy) as server:
        endpoint = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        for method, params in DEMO_METHODS.items():
            spec = _errand_spec(
                method, method, params, out, seed=seed, iterations=iterations, max_steps=4, verbose=verbose
            )
            its = run_cell(spec, endpoint=endpoint, embed_endpoint=endpoint)
            summary["methods"][method] = {
                "run_dir": str(spec.run_dir()),
                "heldout_success": [s.heldout_success for s in its],
                "mean_calls": [s.mean_calls for s in its],
            }
    atomic_write_json(out / "summary.json", summary)
    return summary


#: the reproduction demo's runs: ReAct, and each design that can hold a planted skill under each condition
REPRODUCTION_DESIGNS = ("abstraction_memory", "joint_memory", "anti_persistence")
REPRODUCTION_CONDITIONS = ("none", "useful", "toxic")


def run_reproduction_demo(
    out: str | Path = "outputs/demo-reproduction", *, seeds: tuple[int, ...] = (1, 2), verbose: bool = True
) -> list[Path]:
    """The error-reproduction design (docs/reproduction.md) on the test instruments: ErrandWorld's planted
    pair (params/skills/planted/errandworld.yaml) in abstraction and joint memory's store or as
    Anti-Persistence's frozen layer for iteration 1, deleted from iteration 2 on, ReAct beside them, with
    ``planted_errand_policy`` as the "model" (it follows a rule in its context and writes it again from
    records that followed it). Its runs feed the reproduction analysis and notebook 13's smoke profile;
    its rates describe the scripted policy, nothing else. Returns the run directories."""
    from antipersist_lib.testing.scripted_policy import planted_errand_policy

    out = Path(out)
    if (out / "runs").exists():
        shutil.rmtree(out / "runs")
    plant = "params/skills/planted/errandworld.yaml"  # from the repository root wherever the demo runs
    plan = [("react", "react", {})] + [
        (f"{d}-{c}", d, {"plant": plant, "plant_condition": c})
        for d in REPRODUCTION_DESIGNS
        for c in REPRODUCTION_CONDITIONS
    ]
    done = []
    with LoopbackServer(responder=planted_errand_policy) as server:
        endpoint = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        for seed in seeds:
            for name, method, params in plan:
                extra = DEMO_METHODS["anti_persistence"] if method == "anti_persistence" else {}
                spec = _errand_spec(
                    name,
                    method,
                    {**params, **extra},
                    out,
                    seed=seed,
                    iterations=3,
                    max_steps=5,  # a detour through the attic costs the task (one step more than the budget)
                    heldout_limit=4,
                    heldout_concurrency=1,
                    verbose=verbose,
                )
                run_cell(spec, endpoint=endpoint, embed_endpoint=endpoint)
                done.append(spec.run_dir())
    return done
