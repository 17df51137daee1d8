"""An OpenAI-compatible HTTP server on 127.0.0.1: a measuring instrument, not a model.

Why it exists: the kit's clients must be tested over real HTTP (timeouts, dropped sockets,
malformed bodies, rate limits) without a GPU or a model download, and later benchmarks need
an endpoint with a known, fixed latency. Everything it answers is scripted by the test
(``responder``) or computed by a deterministic hashing function (``embedder``); nothing here
is learned, and nothing it says may be reported as a model result.

Routes: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/embeddings``.
Every received request is recorded in ``LoopbackServer.requests`` (route, method, parsed
body, injected fault) so tests can assert exactly what the model was sent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import re
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from antipersist_lib.testing.api_contracts import ApiContract, ContractReply

Responder = Callable[[dict[str, Any]], str]
EmbedFn = Callable[[str], Sequence[float]]

#: Fault kinds the server can inject. ``400``/``401``/``404`` exist to test that clients do
#: *not* retry permanent errors; the rest are transient failures a client must survive.
FAULT_KINDS: tuple[str, ...] = (
    "timeout",
    "429",
    "500",
    "503",
    "malformed",
    "empty",
    "drop",
    "400",
    "401",
    "404",
)
TRANSIENT_FAULT_KINDS: tuple[str, ...] = ("timeout", "429", "500", "503", "malformed", "empty", "drop")

ROUTE_MODELS = "/v1/models"
ROUTE_CHAT = "/v1/chat/completions"
ROUTE_EMBEDDINGS = "/v1/embeddings"
ROUTES: tuple[str, ...] = (ROUTE_MODELS, ROUTE_CHAT, ROUTE_EMBEDDINGS)

_WORD = re.compile(r"[a-z0-9]+")


def bag_of_words_embedding(text: str, dim: int = 64) -> list[float]:
    """TEST INSTRUMENT, NOT AN EMBEDDING MODEL: a hashed bag-of-words vector.

    Lowercased alphanumeric word tokens are hashed with SHA-256 into ``dim`` buckets, the
    bucket counts are L2-normalised. It is deterministic across processes and platforms (no
    Python ``hash`` randomisation), so retrieval tests get stable, explainable similarities:
    texts sharing words have positive cosine similarity, disjoint texts have zero. It knows
    nothing about meaning; never use its numbers as a substitute for a real embedding model.
    Text without any word token maps to the all-zero vector (it has no direction).
    """
    if dim <= 0:
        raise ValueError("dim must be positive")
    vec = [0.0] * dim
    for token in _WORD.findall(text.lower()):
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        vec[int.from_bytes(digest[:8], "big") % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec] if norm > 0 else vec


def approx_tokens(text: str) -> int:
    """Whitespace word count: a stand-in for a tokenizer, good enough for accounting tests."""
    return len(text.split())


def message_text(message: Mapping[str, Any]) -> str:
    """Text of one chat message, also for OpenAI's list-of-parts content form."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def last_user_text(request: Mapping[str, Any]) -> str:
    for message in reversed(request.get("messages") or []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return message_text(message)
    return ""


Rule = tuple["str | Callable[[dict[str, Any]], bool]", "str | Responder"]


class ScriptedResponder:
    """Replies chosen by the first matching rule, so a test states its script up front.

    A rule is ``(matcher, reply)``. A string matcher matches when it is a substring of the last
    user message (``scope="last_user"``) or of all message texts joined (``scope="all"``); a
    callable matcher receives the whole request dict. ``reply`` is a string or a callable of the
    request. Unmatched requests get ``default``.
    """

    def __init__(self, rules: Sequence[Rule] = (), default: str | Responder = "", *, scope: str = "last_user") -> None:
        if scope not in ("last_user", "all"):
            raise ValueError("scope must be 'last_user' or 'all'")
        self.rules = list(rules)
        self.default = default
        self.scope = scope

    def _haystack(self, request: Mapping[str, Any]) -> str:
        if self.scope == "last_user":
            return last_user_text(request)
        return "\n".join(message_text(m) for m in request.get("messages") or [] if isinstance(m, Mapping))

    def __call__(self, request: dict[str, Any]) -> str:
        haystack = self._haystack(request)
        for matcher, reply in self.rules:
            hit = matcher in haystack if isinstance(matcher, str) else bool(matcher(request))
            if hit:
                return reply(request) if callable(reply) else reply
        return self.default(request) if callable(self.default) else self.default


class QueueResponder:
    """Returns the given replies in order, one per chat request (thread-safe).

    When the queue is empty it returns ``default`` if one was given, otherwise it raises,
    which the server turns into HTTP 500 so an over-long conversation is visible in a test.
    """

    def __init__(self, replies: Sequence[str], *, default: str | None = None) -> None:
        self._replies = list(replies)
        self._default = default
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._replies)

    def __call__(self, request: dict[str, Any]) -> str:
        with self._lock:
            if self._replies:
                return self._replies.pop(0)
        if self._default is not None:
            return self._default
        raise IndexError("QueueResponder has no replies left")


@dataclass
class FaultPlan:
    """Which fault (if any) each incoming request gets.

    ``sequence`` is consumed one entry per request (``None`` = answer normally); once it is
    used up, each request gets a fault with ``probability``, its kind drawn from ``kinds``
    (weighted by ``weights``) by a ``random.Random(seed)``, so a run is reproducible for a
    given request order. ``routes`` limits which routes consume faults (None = all).
    ``hang_s`` is how long a ``"timeout"`` fault stalls before answering.
    """

    sequence: list[str | None] = field(default_factory=list)
    probability: float = 0.0
    kinds: tuple[str, ...] = TRANSIENT_FAULT_KINDS
    weights: tuple[float, ...] | None = None
    seed: int = 0
    hang_s: float = 5.0
    routes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for kind in [*self.sequence, *self.kinds]:
            if kind is not None and kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError("probability must be in [0, 1]")
        if self.weights is not None and len(self.weights) != len(self.kinds):
            raise ValueError("weights must have one entry per kind")
        self._pending = list(self.sequence)
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()

    @classmethod
    def scripted(
        cls, sequence: Sequence[str | None], *, hang_s: float = 5.0, routes: Sequence[str] | None = None
    ) -> FaultPlan:
        return cls(sequence=list(sequence), hang_s=hang_s, routes=tuple(routes) if routes is not None else None)

    @classmethod
    def random(
        cls,
        probability: float,
        *,
        seed: int = 0,
        kinds: Sequence[str] = TRANSIENT_FAULT_KINDS,
        weights: Sequence[float] | None = None,
        hang_s: float = 5.0,
        routes: Sequence[str] | None = None,
    ) -> FaultPlan:
        return cls(
            probability=probability,
            seed=seed,
            kinds=tuple(kinds),
            weights=tuple(weights) if weights is not None else None,
            hang_s=hang_s,
            routes=tuple(routes) if routes is not None else None,
        )

    def next_fault(self, route: str) -> str | None:
        if self.routes is not None and route not in self.routes:
            return None
        with self._lock:
            if self._pending:
                return self._pending.pop(0)
            if self.probability > 0 and self._rng.random() < self.probability:
                return self._rng.choices(self.kinds, weights=self.weights)[0]
            return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait for a handler stuck in a "timeout" fault
    # The stdlib default backlog (5) drops SYNs under a burst of concurrent clients, which
    # then stall ~1 s in TCP retransmission and would distort saturation measurements.
    request_queue_size = 512

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that gave up (timeouts) leave broken pipes behind; that is expected here.
        pass


class LoopbackServer:
    """OpenAI-compatible server on a free 127.0.0.1 port; use as a context manager.

    ``latency_s`` is slept on every request (before any fault), for saturation benchmarks.
    ``strict_model=True`` answers 404 for a model other than ``model_id``, as vLLM does.
    ``model_root``: what ``/v1/models`` reports as the model's ``root`` (vLLM: the weights' path), when set.
    ``context_tokens``: a chat prompt longer than this (``approx_tokens``) is refused with llama-server's 400
    (``exceed_context_size_error``), as a real server with that context refuses it.
    ``api``: a server's documented request rules (``testing.api_contracts``): what it refuses, and how it
    returns the scripted answer (hidden reasoning tokens, ``reasoning_content``, ``<think>`` inline).
    """

    def __init__(
        self,
        responder: Responder | None = None,
        embedder: EmbedFn | None = None,
        faults: FaultPlan | None = None,
        latency_s: float = 0.0,
        *,
        model_id: str = "scripted",
        model_root: str | None = None,
        strict_model: bool = False,
        context_tokens: int | None = None,
        api: ApiContract | None = None,
    ) -> None:
        self.api = api
        self.responder: Responder = responder or ScriptedResponder(default="OK")
        self.embedder: EmbedFn = embedder or bag_of_words_embedding
        self.faults = faults
        self.latency_s = latency_s
        self.model_id = model_id
        self.model_root = model_root
        self.strict_model = strict_model
        self.context_tokens = context_tokens
        self.requests: list[dict[str, Any]] = []
        self.fault_counts: dict[str, int] = {}
        self._dead: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server is not running")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LoopbackServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server(("127.0.0.1", 0), _make_handler(self))
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"loopback-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop promptly: wakes stalled handlers and closes kept-alive client connections."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test controls ---------------------------------------------------------------------

    def set_dead(self, dead: bool = True, route: str | None = None) -> None:
        """Make every request (or one route's) fail with 503, as a crashed backend would."""
        targets = ROUTES if route is None else (route,)
        with self._lock:
            for r in targets:
                (self._dead.add if dead else self._dead.discard)(r)

    def requests_for(self, route: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if r["route"] == route]

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    # -- internals used by the handler -----------------------------------------------------

    def _admit(self, route: str, method: str, body: Any, bearer: str | None, *, known: bool = True) -> str | None:
        """Record the request and decide its fault ("dead" included); unknown routes only
        get recorded, so a client probing a wrong path does not consume scripted faults."""
        with self._lock:
            dead = known and route in self._dead
        fault = "dead" if dead else (self.faults.next_fault(route) if self.faults and known else None)
        record = {
            "route": route,
            "method": method,
            "body": body,
            "fault": fault,
            "time": time.time(),
            # A fingerprint proves which key was sent without keeping the key itself.
            "bearer_sha256": hashlib.sha256(bearer.encode()).hexdigest()[:16] if bearer else None,
        }
        with self._lock:
            self.requests.append(record)
            if fault is not None:
                self.fault_counts[fault] = self.fault_counts.get(fault, 0) + 1
        return fault

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


def _error_body(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "code": code, "param": None}}


def _make_handler(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like real serving stacks

        def setup(self) -> None:
            super().setup()
            # Small header/body writes + Nagle + delayed ACK would add ~40 ms to every call.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with server._lock:
                server._connections.add(self.connection)

        def finish(self) -> None:
            with server._lock:
                server._connections.discard(self.connection)
            try:
                super().finish()
            except OSError:
                pass

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            pass

        # -- plumbing ----------------------------------------------------------------------

        def _send(
            self, status: int, payload: Any, headers: Mapping[str, str] | None = None, raw: bytes | None = None
        ) -> None:
            data = raw if raw is not None else json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                # end_headers() inlined so headers and body leave in one write (stdlib buffer)
                self._headers_buffer.append(b"\r\n" + data)
                self.flush_headers()
            except OSError:
                self.close_connection = True

        def _read_body(self) -> tuple[Any, bool]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
            if not raw:
                return None, True
            try:
                return json.loads(raw.decode("utf-8")), True
            except (UnicodeDecodeError, json.JSONDecodeError):
                return raw.decode("utf-8", "replace"), False

        def _bearer(self) -> str | None:
            auth = self.headers.get("Authorization") or ""
            return auth[7:] if auth.startswith("Bearer ") else None

        def _dispatch(self, method: str) -> None:
            route = self.path.split("?", 1)[0].rstrip("/")
            body, parsed = self._read_body() if method == "POST" else (None, True)
            if route not in ROUTES or (route == ROUTE_MODELS) != (method == "GET"):
                server._admit(route, method, body, self._bearer(), known=False)
                self._send(404, _error_body(f"no route {method} {route}", "not_found"))
                return
            fault = server._admit(route, method, body, self._bearer())
            server._wait(server.latency_s)
            if fault is not None and self._apply_fault(fault, route):
                return
            if not parsed or (method == "POST" and not isinstance(body, dict)):
                self._send(400, _error_body("request body must be a JSON object", "invalid_request_error"))
                return
            if route == ROUTE_MODELS:
                self._send(200, self._models(empty=fault == "empty"))
            elif route == ROUTE_CHAT:
                self._chat(body, empty=fault == "empty")
            else:
                self._embeddings(body, empty=fault == "empty")

        def _apply_fault(self, fault: str, route: str) -> bool:
            """Act out a fault; True when the response has been sent (or withheld)."""
            if fault == "timeout":
                server._wait(server.faults.hang_s if server.faults else 5.0)
                return False  # then answer normally; the client has usually given up by now
            if fault in ("empty",):
                return False
            if fault == "drop":
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return True
            if fault == "malformed":
                self._send(200, None, raw=b'{"id": "chatcmpl-broken", "choices": [')
                return True
            if fault == "429":
                self._send(
                    429, _error_body("rate limited (injected)", "rate_limit_exceeded"), headers={"Retry-After": "0"}
                )
                return True
            if fault == "dead":
                self._send(503, _error_body("endpoint is dead (injected)", "service_unavailable"))
                return True
            status = int(fault)
            self._send(status, _error_body(f"injected HTTP {status}", f"http_{status}"))
            return True

        # -- routes ------------------------------------------------------------------------

        def _models(self, *, empty: bool) -> dict[str, Any]:
            entry = {"id": server.model_id, "object": "model", "created": int(time.time()), "owned_by": "loopback"}
            if server.model_root is not None:
                entry["root"] = server.model_root
            return {"object": "list", "data": [] if empty else [entry]}

        def _check_model(self, body: Mapping[str, Any]) -> bool:
            model = body.get("model")
            if server.strict_model and model != server.model_id:
                self._send(404, _error_body(f"The model `{model}` does not exist.", "model_not_found"))
                return False
            return True

        def _chat(self, body: dict[str, Any], *, empty: bool) -> None:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
                self._send(400, _error_body("'messages' must be a non-empty list", "invalid_request_error"))
                return
            if not self._check_model(body):
                return
            prompt_tokens = sum(approx_tokens(message_text(m)) for m in messages)
            if server.context_tokens is not None and prompt_tokens > server.context_tokens:
                self._send(
                    400,
                    _error_body(
                        "the request exceeds the available context size, try increasing it",
                        "exceed_context_size_error",
                    ),
                )
                return
            refused = server.api.refuse(body) if server.api is not None else None
            if refused is not None:
                message, param = refused
                self._send(
                    400,
                    {
                        "error": {
                            "message": message,
                            "type": "invalid_request_error",
                            "param": param,
                            "code": "unsupported_parameter" if param else None,
                        }
                    },
                )
                return
            try:
                content = "" if empty else str(server.responder(body))
            except Exception as exc:  # the responder is test code; surface its failure as a 500
                self._send(500, _error_body(f"responder failed: {exc!r}", "server_error"))
                return
            if server.api is not None and not empty:
                shaped = server.api.reply(body, content)
            else:
                cut, why = _apply_stop_and_length(content, body.get("stop"), body.get("max_tokens"))
                shaped = ContractReply(cut, why, approx_tokens(cut))
            usage: dict[str, Any] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": shaped.completion_tokens,
                "total_tokens": prompt_tokens + shaped.completion_tokens,
            }
            if shaped.reasoning_tokens:
                usage["completion_tokens_details"] = {"reasoning_tokens": shaped.reasoning_tokens}
            self._send(
                200,
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model") or server.model_id,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": shaped.content, **(shaped.extra_message or {})},
                            "finish_reason": shaped.finish_reason,
                            "logprobs": None,
                        }
                    ],
                    "usage": usage,
                },
            )

        def _embeddings(self, body: dict[str, Any], *, empty: bool) -> None:
            inputs = body.get("input")
            if isinstance(inputs, str):
                inputs = [inputs]
            if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
                self._send(400, _error_body("'input' must be a string or a list of strings", "invalid_request_error"))
                return
            if not self._check_model(body):
                return
            try:
                vectors = [[] if empty else [float(x) for x in server.embedder(t)] for t in inputs]
            except Exception as exc:
                self._send(500, _error_body(f"embedder failed: {exc!r}", "server_error"))
                return
            as_base64 = body.get("encoding_format") == "base64"
            data = [
                {"object": "embedding", "index": i, "embedding": _to_base64(v) if as_base64 else v}
                for i, v in enumerate(vectors)
            ]
            tokens = sum(approx_tokens(t) for t in inputs)
            self._send(
                200,
                {
                    "object": "list",
                    "data": data,
                    "model": body.get("model") or server.model_id,
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            )

        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            self._dispatch("GET")

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            self._dispatch("POST")

    return Handler


def _to_base64(vector: Sequence[float]) -> str:
    """The OpenAI base64 encoding: little-endian float32 bytes."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def _apply_stop_and_length(content: str, stop: Any, max_tokens: Any) -> tuple[str, str]:
    """Truncate like a real server: at the first stop string, then to ``max_tokens`` words."""
    stops = [stop] if isinstance(stop, str) else [s for s in (stop or []) if isinstance(s, str) and s]
    cut = min((content.find(s) for s in stops if s in content), default=-1)
    if cut >= 0:
        content = content[:cut]
    if isinstance(max_tokens, int) and max_tokens >= 0:
        words = content.split()
        if len(words) > max_tokens:
            return " ".join(words[:max_tokens]), "length"
    return content, "stop"
