"""What each registry model earns on the real engines, and what it costs on this CPU.

Why: the embedded default's model and the main job's sizes are chosen by measurement. For each model this
runs ReAct (no memory) on ``n`` held-out tasks (task types in turn) of ALFWorld and ScienceWorld through the kit's own
protocol (``run_cell``: real engines, the kit's prompts, evaluation only), with the settings given, and
reports held-out success, the engines' score (ScienceWorld's 0-100 partial credit, with the score the same
tasks have before any action, since some start above 0), steps, seconds per
episode, and generated tokens/s as the ledger saw them (completion tokens over call latency, cached calls
excluded). With ``arc`` among the benchmarks it also reports the ARC-Stream pass rate without memory on the
first ``n`` tasks of the study's held-out pool (the kit's solver prompt and grader). The run directories stay
under ``--out`` (resumable; a second invocation only adds what is missing; ARC answers come from the cache).

    .venv/bin/python -m perf.model_sweep --models qwen2.5-coder-1.5b-instruct --n 4 --max-steps 30 --icl 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from antipersist_lib.arc.controller import evaluate
from antipersist_lib.arc.stores import AbstractStore, EpisodicBuffer, Memory
from antipersist_lib.arc.study_profile import PoolSpec, pool_tasks
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.embedded import DEFAULT_SERVER, EMBEDDER_MODEL, EmbeddedBackbone, EmbeddedEmbedder
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import LLMClient
from antipersist_lib.serving.response_cache import ResponseCache

#: ARC-Stream in the sweep: held-out tasks of the study's held-out pool, 3 shown and 2 graded examples
ARC = "arc"
ARC_EXAMPLES = {"n_train": 3, "n_test": 2}


def _ledger_rates(run_dir: Path, purpose: str = "execution") -> dict[str, float]:
    ledger = Ledger(run_dir / "calls.jsonl")  # opened only to read the run's records
    recs = [r for r in ledger.records if r.purpose == purpose and r.ok and not r.cached]
    ledger.close()
    tokens = sum(r.completion_tokens for r in recs)
    seconds = sum(r.latency_s for r in recs)
    return {
        "calls": len(recs),
        "tokens_per_s": tokens / seconds if seconds else float("nan"),
        "s_per_call": seconds / len(recs) if recs else float("nan"),
        "prompt_tokens_per_call": sum(r.prompt_tokens for r in recs) / len(recs) if recs else float("nan"),
    }


def _reset_scores(spec: RunSpec) -> list[float]:
    """ScienceWorld's score for each held-out task of ``spec`` before any action: some tasks start above 0
    (measured: 8 on a chemistry-mix and 20 on a paint variation), so a score is read against this floor."""
    from antipersist_lib.envs.partitions import load_partition
    from antipersist_lib.envs.scienceworld import ScienceWorldEnvironment
    from antipersist_lib.records import limited_tasks

    env = ScienceWorldEnvironment()
    try:
        out = []
        for task in limited_tasks(load_partition(spec.benchmark).heldout, spec.heldout_limit, spec.subset):
            env.reset(task)
            out.append(env.score)
        return out
    finally:
        env.close()


def _arc_row(bb: EmbeddedBackbone, *, n: int, max_tokens: int, concurrency: int, out: Path) -> dict[str, Any]:
    """ARC-Stream pass rate without memory on the first ``n`` tasks of the held-out pool (``heldout50``)."""
    tasks = pool_tasks(PoolSpec("heldout50", 0, n), **ARC_EXAMPLES)
    folder = out / "arc" / bb.label / f"n{n}-tok{max_tokens}"
    folder.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(folder / "calls.jsonl")
    llm = LLMClient(bb.endpoint, ledger=ledger, cache=ResponseCache(out / "cache"), seed=0)
    t0 = time.monotonic()
    result = evaluate(
        tasks, llm, Memory(EpisodicBuffer(capacity=8), AbstractStore()), max_tokens=max_tokens, workers=concurrency
    )
    wall = time.monotonic() - t0
    ledger.close()
    statuses: dict[str, int] = {}
    for r in result.records:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    (folder / "eval.json").write_text(json.dumps(result.to_dict(), indent=1), encoding="utf-8")
    return {
        "benchmark": ARC,
        "n": result.n_tasks,
        "success": result.accuracy,
        "score": sum(r.n_correct / max(r.n_examples, 1) for r in result.records) / max(result.n_tasks, 1),
        "statuses": statuses,
        "examples": ARC_EXAMPLES,
        "wall_s": wall,
        "s_per_episode": wall / max(result.n_tasks, 1),
        **_ledger_rates(folder, purpose="arc_eval"),
    }


def sweep_model(
    model: str,
    benchmarks: list[str],
    *,
    n: int,
    max_steps: int,
    icl: int,
    max_tokens: int,
    concurrency: int,
    out: Path,
    server: str = DEFAULT_SERVER,
    threads: int = 1,
    threads_batch: int | None = None,
    valid_actions: int = 0,
    stop: bool = False,
    temperature: float = 0.0,
    resample: int = 0,
    arc_max_tokens: int = 512,
) -> list[dict[str, Any]]:
    rows = []
    parallel = concurrency if server == "llama-server" else 1
    with (
        threadpool_limits(limits=1),
        EmbeddedBackbone(
            model=model,
            server=server,
            threads=threads,
            threads_batch=threads_batch,
            parallel=parallel,
            n_ctx=8192,
            log_path=out / f"{model}.log",
        ) as bb,
        EmbeddedEmbedder() as em,
    ):
        for bench in benchmarks:
            if bench == ARC:
                row = {
                    "model": model,
                    "server": server,
                    "threads": threads,
                    "threads_batch": bb.threads_batch,
                    "concurrency": concurrency,
                    "max_tokens": arc_max_tokens,
                    **_arc_row(bb, n=n, max_tokens=arc_max_tokens, concurrency=concurrency, out=out),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
                continue
            spec = RunSpec(
                method="react",
                benchmark=bench,
                backbone=bb.label,
                embedding=EMBEDDER_MODEL,
                seed=42,
                iterations=1,
                train_per_iteration=0,
                max_steps=max_steps,
                heldout_concurrency=concurrency,
                heldout_limit=n,
                agent={
                    "max_tokens": max_tokens,
                    "icl_examples": icl,
                    "show_valid_actions": valid_actions,
                    "stop_at_observation": stop,
                    "temperature": temperature,
                    "resample_repeats": resample,
                },
                name=f"react-icl{icl}-va{valid_actions}-stop{int(stop)}-steps{max_steps}-tok{max_tokens}-t{temperature:g}"
                + (f"-rs{resample}" if resample else ""),
                out_root=str(out / "runs"),
                cache_dir=str(out / "cache"),
                progress=False,
            )
            t0 = time.monotonic()
            summary = run_cell(spec, endpoint=bb.endpoint, embed_endpoint=em.endpoint, backbone_info=bb.describe())[-1]
            wall = time.monotonic() - t0
            row = {
                "model": model,
                "server": server,
                "benchmark": bench,
                "n": summary.heldout_n,
                "max_steps": max_steps,
                "icl_examples": icl,
                "show_valid_actions": valid_actions,
                "stop_at_observation": stop,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "resample_repeats": resample,
                "threads": threads,
                "threads_batch": bb.threads_batch,
                "concurrency": concurrency,
                "success": summary.heldout_success,
                "score": summary.heldout_score,
                "mean_steps": summary.mean_steps,
                "wall_s": wall,
                "s_per_episode": wall / max(summary.heldout_n, 1),
                **_ledger_rates(spec.run_dir()),
            }
            if bench == "scienceworld":
                floor = _reset_scores(spec)
                row["score_at_reset"] = sum(floor) / len(floor)
                row["score_gain"] = summary.heldout_score - row["score_at_reset"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m perf.model_sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument(
        "--benchmarks", nargs="+", default=["alfworld", "scienceworld"], help="alfworld, scienceworld and/or arc"
    )
    ap.add_argument("--n", type=int, default=4, help="N held-out tasks of each benchmark, task types in turn")
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--icl", type=int, default=0, help="expert demonstrations per task (agent icl_examples)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--arc-max-tokens", type=int, default=512, help="solver reply cap on ARC")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--server", default=DEFAULT_SERVER)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--threads-batch", type=int, help="threads for prompt processing (default: --threads)")
    ap.add_argument("--valid-actions", type=int, default=0, help="agent show_valid_actions (0 = off)")
    ap.add_argument("--stop", action="store_true", help="agent stop_at_observation")
    ap.add_argument("--temperature", type=float, default=0.0, help="agent temperature (0 = greedy)")
    ap.add_argument("--resample", type=int, default=0, help="agent resample_repeats (0 = off)")
    ap.add_argument("--out", default="outputs/perf/model_sweep")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in args.models:
        rows += sweep_model(
            model,
            args.benchmarks,
            n=args.n,
            max_steps=args.max_steps,
            icl=args.icl,
            max_tokens=args.max_tokens,
            concurrency=args.concurrency,
            out=out,
            server=args.server,
            threads=args.threads,
            threads_batch=args.threads_batch,
            valid_actions=args.valid_actions,
            stop=args.stop,
            temperature=args.temperature,
            resample=args.resample,
            arc_max_tokens=args.arc_max_tokens,
        )
    with open(out / "results.jsonl", "a", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
