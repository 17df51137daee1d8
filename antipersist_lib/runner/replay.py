"""Clients that replay a recorded run from its response cache, with no model behind them, and the cache
folders they read (``replay_cache``: the servers the run's manifest recorded, first invocation first).

The walkthrough re-runs a held-out task this way and the selector audit re-embeds a held-out task
this way: the clients carry the run's own endpoint settings (so every cache key matches) but an
address where nothing answers, so a request the cache does not hold fails at once, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from antipersist_lib.rundir import RunDirectory
from antipersist_lib.serving.embeddings import Embedder
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient, server_identity
from antipersist_lib.serving.response_cache import ResponseCache, cache_folder

UNREACHABLE = "http://127.0.0.1:9/v1"  # discard port: nothing answers, so a cache miss fails at once

#: the manifest's endpoint record of each role a replay reads from the cache
_MANIFEST_ENDPOINTS = {"backbone": "endpoint", "embedding": "embedding_endpoint"}


def recorded_servers(manifest: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The server identities a recorded run's ``role`` ("backbone" or "embedding") filed its cached replies
    under, first invocation first: the manifest's ``cache_identity`` and those of its ``resumed`` entries.
    For a run recorded before identities: the one its embedded server has (fixed by the model file,
    whatever the port), else its base URL alone."""
    from antipersist_lib.serving.embedded import EMBEDDER_SERVER_ID, embedded_server_id
    from antipersist_lib.serving.profiles import EMBEDDED

    found: list[dict[str, Any]] = []
    for entry in [manifest, *(manifest.get("resumed") or [])]:
        ident = (entry.get("cache_identity") or {}).get(role)
        if ident and ident not in found:
            found.append(dict(ident))
    if found:
        return found
    ep = manifest[_MANIFEST_ENDPOINTS[role]]
    server_id = ep.get("server_id")
    info = manifest.get("embedded_backbone") or {}
    if not server_id and role == "backbone" and info.get("model"):
        m = info["model"]
        server_id = embedded_server_id(info["server"], m["name"], m["sha256"], m["chat_template"])
    if not server_id and role == "embedding" and manifest.get("embedding") == EMBEDDED:
        server_id = EMBEDDER_SERVER_ID
    return [server_identity(Endpoint(**{**ep, "server_id": server_id}))]


def replay_cache(cache_root: str | Path, manifest: dict[str, Any], role: str) -> ResponseCache:
    """The response cache of a recorded run's ``role``, for a replay whose client cannot reach (or ask) the
    server: ``<cache_root>/<model>/<server>/`` of the first invocation's server, reading those of later
    invocations after it (a run resumed against another server)."""
    ep = manifest[_MANIFEST_ENDPOINTS[role]]
    root = ResponseCache(cache_folder(cache_root, ep["model"]))
    first, *later = (root.for_server(s) for s in recorded_servers(manifest, role))
    return ResponseCache(first.root, server=first.server, also_read=[c.root for c in later])


def replay_clients(
    run_dir: str | Path, cache_dir: str | Path, *, ledger: Ledger | None = None
) -> tuple[LLMClient, Embedder]:
    """(chat client, embedder) of the run ``run_dir`` answering only from the response cache under
    ``cache_dir``, in the folders of the servers the run recorded (``replay_cache``)."""
    man = RunDirectory(run_dir).read_manifest()
    ledger = ledger or Ledger()
    chat = Endpoint(**{**man["endpoint"], "base_url": UNREACHABLE, "max_retries": 0, "timeout_s": 5.0})
    emb = Endpoint(**{**man["embedding_endpoint"], "base_url": UNREACHABLE, "max_retries": 0, "timeout_s": 5.0})
    cache_root = Path(cache_dir)
    for ep in (chat, emb):
        if not cache_folder(cache_root, ep.model).is_dir():
            raise FileNotFoundError(
                f"no response cache for model {ep.model!r} under {cache_root} "
                "(replay needs the cache the run wrote; use a live endpoint instead)"
            )
    llm = LLMClient(chat, ledger=ledger, cache=replay_cache(cache_root, man, "backbone"), seed=int(man["seed"]))
    embedder = Embedder(emb, ledger=ledger, cache=replay_cache(cache_root, man, "embedding"))
    return llm, embedder
