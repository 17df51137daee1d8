"""The embedded backbone's two servers compared: llama-server vs llama-cpp-python, 1..4 concurrent episodes.

Why: held-out evaluation runs several episodes at once (``heldout_concurrency``). llama-cpp-python's server
answers one request at a time with one prompt cache, so concurrent episodes evict each other's prefixes;
llama-server keeps one slot per episode (its own cached prefix) and decodes the slots together
(continuous batching). Both run the kit's same portable library and the same model file.

Each "episode" is a ReAct-shaped conversation of ``steps`` calls: the same system prompt (an ALFWorld-sized
instruction block), then per step the model's reply and a fixed observation appended, so a call re-reads
a growing prefix of the one before it, exactly the pattern a real episode has. Every call generates up to
``max_tokens`` tokens at temperature 0. Measured per (server, concurrency): generated tokens/s over the
wall time, and episodes/hour. The engines' own time is not included (it is the same for both servers).

    .venv/bin/python -m perf.embedded_servers [--model NAME] [--steps 4] [--max-concurrency 4] [--servers ...]
    .venv/bin/python -m perf --only servers      # the same, as rows of the suite's table
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

from antipersist_lib.serving.embedded import DEFAULT_MODEL, SERVERS, EmbeddedBackbone
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import LLMClient

SYSTEM = (
    "You are an agent in a household text world. Each turn, answer with one line 'Action: <command>'. "
    "Commands: go to <receptacle>, open <receptacle>, close <receptacle>, take <object> from <receptacle>, "
    "move <object> to <receptacle>, examine <object>, use <object>, heat <object> with microwave 1, "
    "cool <object> with fridge 1, clean <object> with sinkbasin 1, look, inventory. "
) * 6
OBSERVATION = (
    "Observation: You arrive at countertop 1. On the countertop 1, you see a apple 1, a bread 1, a butterknife 2, "
    "a cellphone 1, a creditcard 1, a dishsponge 1, a egg 2, and a knife 1."
)


def _episode(llm: LLMClient, episode: int, steps: int, max_tokens: int, tokens: list[int]) -> None:
    task = f"You are in the middle of a room (episode {episode}). Your task is to: put a clean apple in the fridge."
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for _ in range(steps):
        r = llm.chat(msgs, purpose="bench", max_tokens=max_tokens, temperature=0.0)
        tokens.append(r.completion_tokens)
        msgs += [{"role": "assistant", "content": r.text or "Action: look"}, {"role": "user", "content": OBSERVATION}]


def measure(
    server: str, concurrency: int, *, model: str, steps: int, max_tokens: int, threads: int = 1, rounds: int = 1
) -> dict[str, float]:
    """Run ``rounds`` x ``concurrency`` episodes, ``concurrency`` at a time; tokens/s and episodes/hour."""
    parallel = concurrency if server == "llama-server" else 1
    with EmbeddedBackbone(model=model, server=server, parallel=parallel, threads=threads, n_ctx=4096) as bb:
        llm = LLMClient(bb.endpoint, ledger=Ledger())
        tokens: list[int] = []
        t0 = time.monotonic()
        for r in range(rounds):
            workers = [
                threading.Thread(target=_episode, args=(llm, r * concurrency + i, steps, max_tokens, tokens))
                for i in range(concurrency)
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
        wall = time.monotonic() - t0
    episodes = rounds * concurrency
    return {
        "tokens_per_s": sum(tokens) / wall,
        "episodes_per_hour": episodes / wall * 3600,
        "s_per_call": wall / (episodes * steps) * concurrency,
        "wall_s": wall,
        "calls": len(tokens),
    }


def sweep(
    *, model: str, steps: int, max_tokens: int, max_concurrency: int, threads: int = 1, servers: tuple = SERVERS
) -> list[dict]:
    results = []
    for server in servers:
        for c in range(1, max_concurrency + 1):
            m = measure(server, c, model=model, steps=steps, max_tokens=max_tokens, threads=threads)
            results.append({"server": server, "concurrency": c, "threads": threads, **m})
            print(
                f"{server:>16} c={c} threads={threads}: {m['tokens_per_s']:6.1f} tokens/s, "
                f"{m['episodes_per_hour']:7.1f} episodes/h, {m['s_per_call']:.1f} s per call "
                f"({m['wall_s']:.0f} s)",
                flush=True,
            )
    return results


def run(quick: bool = False) -> list[dict]:
    """Suite entry (``python -m perf --only servers``): both servers at 1..4 (quick: 1..2) concurrent episodes."""
    from perf import row

    res = sweep(
        model="qwen2.5-coder-0.5b-instruct", steps=2 if quick else 4, max_tokens=24, max_concurrency=2 if quick else 4
    )
    out = []
    base = next(r for r in res if r["server"] == "llama-cpp-python" and r["concurrency"] == 1)["episodes_per_hour"]
    for r in res:
        setting = f"{r['server']}, {r['concurrency']} concurrent episode(s)"
        out.append(row("servers", f"{setting}: tokens/s", r["tokens_per_s"], "tokens/s"))
        out.append(row("servers", f"{setting}: episodes/hour", r["episodes_per_hour"], "episodes/h"))
        out.append(row("servers", f"{setting}: ratio to llama-cpp-python at 1", r["episodes_per_hour"] / base, "ratio"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m perf.embedded_servers", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-concurrency", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS))
    ap.add_argument("--out", help="also write the results as JSON here")
    args = ap.parse_args()
    res = sweep(
        model=args.model,
        steps=args.steps,
        max_tokens=args.max_tokens,
        max_concurrency=args.max_concurrency,
        threads=args.threads,
        servers=tuple(args.servers),
    )
    if args.out:
        Path(args.out).write_text(json.dumps({"model": args.model, "results": res}, indent=1) + "\n")


if __name__ == "__main__":
    main()
