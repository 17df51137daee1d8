"""What each registry model earns on the real engines, and what it costs on this CPU.

Why: the embedded default's model and the main job's sizes are chosen by measurement. For each model this
runs ReAct (no memory) on the first ``n`` held-out tasks of ALFWorld and ScienceWorld through the kit's own
protocol (``run_cell``: real engines, the kit's prompts, evaluation only), with the settings given, and
reports held-out success, the engines' score (ScienceWorld's 0-100 partial credit), steps, seconds per
episode, and generated tokens/s as the ledger saw them (completion tokens over call latency, cached calls
excluded). The run directories stay under ``--out`` (resumable; a second invocation only adds what is missing).

    .venv/bin/python -m perf.model_sweep --models qwen2.5-coder-1.5b-instruct --n 4 --max-steps 30 --icl 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from antipersist_lib.runner.protocol import RunSpec, run_cell
from antipersist_lib.serving.embedded import DEFAULT_SERVER, EMBEDDER_MODEL, EmbeddedBackbone, EmbeddedEmbedder
from antipersist_lib.serving.ledger import Ledger


def _ledger_rates(run_dir: Path) -> dict[str, float]:
    ledger = Ledger(run_dir / "calls.jsonl")  # opened only to read the run's records
    recs = [r for r in ledger.records if r.purpose == "execution" and r.ok and not r.cached]
    ledger.close()
    tokens = sum(r.completion_tokens for r in recs)
    seconds = sum(r.latency_s for r in recs)
    return {
        "calls": len(recs),
        "tokens_per_s": tokens / seconds if seconds else float("nan"),
        "s_per_call": seconds / len(recs) if recs else float("nan"),
        "prompt_tokens_per_call": sum(r.prompt_tokens for r in recs) / len(recs) if recs else float("nan"),
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
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m perf.model_sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--benchmarks", nargs="+", default=["alfworld", "scienceworld"])
    ap.add_argument("--n", type=int, default=4, help="first N held-out tasks of each benchmark")
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--icl", type=int, default=0, help="expert demonstrations per task (agent icl_examples)")
    ap.add_argument("--max-tokens", type=int, default=64)
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
        )
    with open(out / "results.jsonl", "a", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
