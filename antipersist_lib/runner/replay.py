"""Clients that replay a recorded run from its response cache, with no model behind them.

The walkthrough re-runs a held-out task this way and the selector audit re-embeds a held-out task
this way: the clients carry the run's own endpoint settings (so every cache key matches) but an
address where nothing answers, so a request the cache does not hold fails at once, naming it.
"""

from __future__ import annotations

from pathlib import Path

from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import _slug, replay_cache
from antipersist_lib.serving.embeddings import Embedder
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient

UNREACHABLE = "http://127.0.0.1:9/v1"  # discard port: nothing answers, so a cache miss fails at once


def replay_clients(
    run_dir: str | Path, cache_dir: str | Path, *, ledger: Ledger | None = None
) -> tuple[LLMClient, Embedder]:
    """(chat client, embedder) of the run ``run_dir`` answering only from the response cache under
    ``cache_dir``, in the folders of the servers the run recorded (``protocol.replay_cache``)."""
    man = RunDirectory(run_dir).read_manifest()
    ledger = ledger or Ledger()
    chat = Endpoint(**{**man["endpoint"], "base_url": UNREACHABLE, "max_retries": 0, "timeout_s": 5.0})
    emb = Endpoint(**{**man["embedding_endpoint"], "base_url": UNREACHABLE, "max_retries": 0, "timeout_s": 5.0})
    cache_root = Path(cache_dir)
    for ep in (chat, emb):
        if not (cache_root / _slug(ep.model)).is_dir():
            raise FileNotFoundError(
                f"no response cache for model {ep.model!r} under {cache_root} "
                "(replay needs the cache the run wrote; use a live endpoint instead)"
            )
    llm = LLMClient(chat, ledger=ledger, cache=replay_cache(cache_root, man, "backbone"), seed=int(man["seed"]))
    embedder = Embedder(emb, ledger=ledger, cache=replay_cache(cache_root, man, "embedding"))
    return llm, embedder
