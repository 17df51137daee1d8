"""Tokens per second of the embedded backbone (the kit's llama.cpp build + a registry model) by thread count,
idle and with the other core(s) kept busy by a second process. Ratios are from one run.

    .venv/bin/python perf/embedded_tokens.py
    .venv/bin/python -m perf --only embedded   # the same, as rows of the suite's table
"""

from __future__ import annotations

import multiprocessing as mp
import time

from antipersist_lib.serving.embedded import EmbeddedBackbone
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import LLMClient

PROMPT = [
    {"role": "system", "content": "You are an agent in a text world. Answer with Thought: and Action: lines."},
    {
        "role": "user",
        "content": "You are in the middle of a room. You see a desk 1, a drawer 2, a shelf 3. "
        "Your task is to: put a mug on the desk. Begin.",
    },
]


def _burn(stop: mp.synchronize.Event) -> None:
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


def seconds_per_episode(episodes: int = 2, max_steps: int = 4) -> float:
    """Wall seconds per ALFWorld episode of ReAct on the embedded backbone (the main job's
    settings: 32 tokens per action, 4 steps), training and held-out together."""
    import tempfile

    from antipersist_lib.runner.protocol import run_cell
    from antipersist_lib.runner.spec import RunSpec
    from antipersist_lib.serving.embedded import EMBEDDER_MODEL, EmbeddedEmbedder

    with (
        tempfile.TemporaryDirectory(prefix="antipersist-bench-") as tmp,
        EmbeddedBackbone(threads=1) as bb,
        EmbeddedEmbedder() as em,
    ):
        spec = RunSpec(
            method="react",
            benchmark="alfworld",
            backbone=bb.label,
            embedding=EMBEDDER_MODEL,
            seed=42,
            iterations=1,
            train_per_iteration=episodes,
            max_steps=max_steps,
            heldout_concurrency=1,
            heldout_limit=episodes,
            agent={"max_tokens": 32},
            out_root=tmp,
            cache_dir=None,
            progress=False,
        )
        t = time.monotonic()
        run_cell(spec, endpoint=bb.endpoint, embed_endpoint=em.endpoint, fsync=False)
        return (time.monotonic() - t) / (2 * episodes)


def main_command_wall_s() -> tuple[float, str] | None:
    """The wall time the README's main command recorded on its last run here (``make run``
    writes outputs/main/smoke/results.json), if it ran."""
    import json
    from pathlib import Path

    path = Path("outputs/main/smoke/results.json")
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return float(data["wall_s"]), time.strftime("%Y-%m-%d %H:%M", time.gmtime(path.stat().st_mtime))


def run(quick: bool = False) -> list[dict]:
    """Suite entry (``python -m perf --embedded``): tokens/s per (threads, busy), seconds
    per episode, and the main command's recorded wall time; no targets."""
    from perf import row

    n = 2 if quick else 4
    rows = [(t, b, measure(t, b, n=n)) for t in (1, 2) for b in (False, True)]
    base = rows[0][2]
    out = []
    for t, b, v in rows:
        setting = f"{t} thread(s), other core {'busy' if b else 'idle'}, {n} replies of <= 64 tokens"
        out.append(row("embedded", setting, v, "tokens/s"))
        out.append(row("embedded", f"{setting}: ratio to 1 thread idle", v / base, "ratio"))
    out.append(
        row(
            "embedded",
            "ReAct on ALFWorld, 4 steps x 32 tokens, per episode",
            seconds_per_episode(1 if quick else 2),
            "s",
        )
    )
    recorded = main_command_wall_s()
    if recorded is not None:
        out.append(
            row("embedded", f"README main command, experiment part (recorded {recorded[1]} UTC)", recorded[0], "s")
        )
    return out


def main() -> None:
    rows = [(t, b, measure(t, b)) for t in (1, 2) for b in (False, True)]
    base = rows[0][2]
    print(f"{'threads':>7} {'other core busy':>15} {'tokens/s':>9} {'ratio to 1 thread idle':>23}")
    for t, b, v in rows:
        print(f"{t:>7} {str(b):>15} {v:>9.1f} {v / base:>23.2f}")


if __name__ == "__main__":
    main()
