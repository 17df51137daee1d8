"""The pipeline demo: the whole Anti-Persistence data flow on the kit's test instruments.

What it is: Anti-Persistence and a memory-less ReAct agent, run for a few iterations of
training and frozen held-out evaluation on ErrandWorld (a four-room test world), with the
"model" being a scripted policy behind the loopback OpenAI-compatible server. Every call goes
through the same client, embedder, selector, retrieval, synthesis and agent loop that real runs
use. What it is not: a benchmark or a model; its numbers say nothing about the paper's claims.
The embedded llama.cpp backbone and the real benchmarks replace both in later stages of the kit.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from . import prompts
from .agent import AgentConfig, run_episode
from .anti_persistence import AntiPersistence, AntiPersistenceConfig
from .embeddings import Embedder
from .jsonl import JsonlWriter, atomic_write_json
from .ledger import Ledger
from .llm import Endpoint, LLMClient
from .loopback_server import LoopbackServer
from .outcome_log import OutcomeLog
from .selector import SelectorConfig
from .testing.errand_world import ErrandWorld, make_tasks
from .testing.scripted_policy import errand_policy
from .trajectory_memory import TrajectoryMemory
from .versions import git_commit, package_versions

LABEL = "pipeline demo: scripted loopback policy on ErrandWorld (test instruments, not a model or benchmark)"


def run_demo(
    out: str | Path = "outputs/demo",
    *,
    iterations: int = 3,
    train_per_iteration: int = 6,
    n_train: int = 12,
    n_heldout: int = 6,
    max_steps: int = 4,
    seed: int = 42,
    verbose: bool = True,
) -> dict[str, Any]:
    """Run ReAct and Anti-Persistence side by side; returns per-iteration held-out success."""
    out = Path(out)
    train, held = make_tasks("train", n_train), make_tasks("heldout", n_heldout)
    agent_cfg = AgentConfig(max_steps=max_steps)
    # 4 modes x W_init=3 would need more training tasks than the demo has, so the demo shortens
    # the warmups; the paper's defaults apply everywhere else.
    ap_cfg = AntiPersistenceConfig(selector=SelectorConfig(round_robin_iterations=1, warmup_per_mode=1))
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(len(train))[:train_per_iteration] for _ in range(iterations)]
    summary: dict[str, Any] = {"label": LABEL, "methods": {}}

    with LoopbackServer(responder=errand_policy) as server:
        endpoint = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        for method in ("react", "anti_persistence"):
            run_dir = out / f"{method}-errandworld-seed{seed}"
            if run_dir.exists():
                shutil.rmtree(run_dir)  # the demo always starts fresh
            run_dir.mkdir(parents=True)
            ledger = Ledger(run_dir / "calls.jsonl")
            llm = LLMClient(endpoint, ledger=ledger, seed=seed)
            embedder = Embedder(endpoint, ledger=ledger)
            memory = TrajectoryMemory(run_dir / "trajectories.jsonl")
            olog = OutcomeLog(run_dir / "outcome_log.jsonl")
            ap = AntiPersistence(memory, olog, llm, embedder, config=ap_cfg, seed=seed)
            atomic_write_json(run_dir / "manifest.json", {
                "label": LABEL,
                "method": method,
                "benchmark": "errandworld (test world)",
                "seed": seed,
                "iterations": iterations,
                "train_per_iteration": train_per_iteration,
                "max_steps": max_steps,
                "endpoint": endpoint.describe(),
                "anti_persistence": _jsonable(asdict(ap_cfg)) if method == "anti_persistence" else None,
                "prompt_hashes": prompts.prompt_hashes(),
                "versions": package_versions(),
                "git_commit": git_commit(),
            })
            train_log = JsonlWriter(run_dir / "episodes_train.jsonl")
            held_log = JsonlWriter(run_dir / "episodes_heldout.jsonl")
            curve = []
            env = ErrandWorld()
            for it in range(1, iterations + 1):
                for idx in orders[it - 1]:
                    task = train[int(idx)]
                    if method == "react":
                        res = run_episode(env, task, llm, config=agent_cfg, tags={"phase": "train", "iteration": it})
                        train_log.append({"iteration": it, "task": task.to_dict(), "outcome": res.outcome.to_dict()})
                    else:
                        r = ap.run_task(task, env, iteration=it, training=True, agent_config=agent_cfg)
                        train_log.append(r.to_dict())
                memory.freeze(); olog.freeze()
                wins = 0
                for j, task in enumerate(held):
                    if method == "react":
                        res = run_episode(env, task, llm, config=agent_cfg, tags={"phase": "heldout", "iteration": it})
                        held_log.append({"iteration": it, "task": task.to_dict(), "outcome": res.outcome.to_dict()})
                        wins += res.outcome.success
                    else:
                        r = ap.run_task(task, env, iteration=it, position=j, training=False, agent_config=agent_cfg)
                        held_log.append(r.to_dict())
                        wins += r.outcome.success
                memory.unfreeze(); olog.unfreeze()
                rate = wins / len(held)
                curve.append(rate)
                if verbose:
                    print(f"[{method:>16}] iteration {it}: held-out success {100 * rate:5.1f}%  "
                          f"|M|={len(memory)} |L|={len(olog)} calls={len(ledger)}")
            for w in (train_log, held_log, memory, olog, ledger):
                w.close()
            summary["methods"][method] = {"run_dir": str(run_dir), "heldout_success": curve, "llm_calls": ledger.totals()}
    atomic_write_json(out / "summary.json", summary)
    return summary


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))
