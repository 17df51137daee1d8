"""Tokens per second of the embedded backbone (llama.cpp + Gemma 3 270M) by thread count,
idle and with the other core(s) kept busy by a second process. Ratios are from one run.

    .venv/bin/python benchmarks/embedded_tokens.py
    .venv/bin/python -m benchmarks --only embedded   # the same, as rows of the suite's table
"""

from __future__ import annotations

import multiprocessing as mp
import time

from antipersist_lib.embedded import EmbeddedBackbone
from antipersist_lib.ledger import Ledger
from antipersist_lib.llm import LLMClient

PROMPT = [{"role": "system", "content": "You are an agent in a text world. Answer with Thought: and Action: lines."},
          {"role": "user", "content": "You are in the middle of a room. You see a desk 1, a drawer 2, a shelf 3. "
                                      "Your task is to: put a mug on the desk. Begin."}]


def _burn(stop: "mp.synchronize.Event") -> None:
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1000003


def measure(threads: int, busy: bool, n: int = 4, max_tokens: int = 64) -> float:
    stop = mp.Event()
    burner = mp.Process(target=_burn, args=(stop,)) if busy else None
    if burner:
        burner.start()
    try:
        with EmbeddedBackbone(threads=threads) as bb:
            llm = LLMClient(bb.endpoint, ledger=Ledger())
            llm.chat(PROMPT, purpose="warmup", max_tokens=8)
            toks, secs = 0, 0.0
            for i in range(n):
                msgs = [PROMPT[0], {"role": "user", "content": PROMPT[1]["content"] + f" (attempt {i})"}]
                t = time.monotonic()
                r = llm.chat(msgs, purpose="bench", max_tokens=max_tokens)
                secs += time.monotonic() - t
                toks += r.completion_tokens
            return toks / secs
    finally:
        if burner:
            stop.set()
            burner.join()


def run(quick: bool = False) -> list[dict]:
    """Suite entry (``python -m benchmarks --embedded``): one row per (threads, busy), no target."""
    from benchmarks import row

    n = 2 if quick else 4
    rows = [(t, b, measure(t, b, n=n)) for t in (1, 2) for b in (False, True)]
    base = rows[0][2]
    out = []
    for t, b, v in rows:
        setting = f"{t} thread(s), other core {'busy' if b else 'idle'}, {n} replies of <= 64 tokens"
        out.append(row("embedded", setting, v, "tokens/s"))
        out.append(row("embedded", f"{setting}: ratio to 1 thread idle", v / base, "ratio"))
    return out


def main() -> None:
    rows = [(t, b, measure(t, b)) for t in (1, 2) for b in (False, True)]
    base = rows[0][2]
    print(f"{'threads':>7} {'other core busy':>15} {'tokens/s':>9} {'ratio to 1 thread idle':>23}")
    for t, b, v in rows:
        print(f"{t:>7} {str(b):>15} {v:>9.1f} {v / base:>23.2f}")


if __name__ == "__main__":
    main()
