"""Shared fixtures: a loopback OpenAI-compatible server and clients wired to it."""

from __future__ import annotations

import os
import tarfile
import uuid
from pathlib import Path

import pytest

from antipersist_lib.envs.alfworld import DATA_ENV_VAR, resolve_alfworld_data
from antipersist_lib.serving.embeddings import Embedder
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import Endpoint, LLMClient
from antipersist_lib.testing.loopback_server import LoopbackServer

# every sandbox this session grades (here and in its subprocesses) carries this token (arc/sandbox.py)
os.environ.setdefault("ANTIPERSIST_SANDBOX_OWNER", f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}")

#: where the shared ALFWorld archive lies beside a checkout (and beside CI's clone)
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "alfworld"


def fast_endpoint(server: LoopbackServer, **kw) -> Endpoint:
    """Endpoint with tiny timeouts/backoff so failure tests stay fast."""
    opts = dict(timeout_s=5.0, max_retries=3, backoff_base_s=0.001, backoff_max_s=0.01)
    opts.update(kw)
    return Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", **opts)


class Clients:
    def __init__(self, server: LoopbackServer, ledger: Ledger, seed: int = 0) -> None:
        self.server = server
        self.ledger = ledger
        self.endpoint = fast_endpoint(server)
        self.llm = LLMClient(self.endpoint, ledger=ledger, seed=seed)
        self.embedder = Embedder(self.endpoint, ledger=ledger)


@pytest.fixture
def make_clients():
    """make_clients(responder, ledger_path=None) -> Clients (server stopped after the test)."""
    servers: list[LoopbackServer] = []

    def factory(responder=None, ledger_path=None, **server_kw) -> Clients:
        srv = LoopbackServer(responder=responder, **server_kw).start()
        servers.append(srv)
        return Clients(srv, Ledger(ledger_path))

    yield factory
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def alfworld_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``json_2.1.1`` folder: from $ALFWORLD_DATA, else unpacked from the shared archive."""
    if os.environ.get(DATA_ENV_VAR):
        return resolve_alfworld_data()  # a wrong setting fails here with the fix in the message
    archives = sorted(SHARED_DATA.glob("*.tar.xz"))
    if not archives:
        pytest.fail(
            f"ALFWorld game files unavailable: {DATA_ENV_VAR} is unset and no *.tar.xz archive in "
            f"{SHARED_DATA}. Set {DATA_ENV_VAR} (run `alfworld-download`, or `make alfworld-data`)."
        )
    dest = tmp_path_factory.mktemp("alfworld_data")
    for archive in archives:
        with tarfile.open(archive) as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, filter="data")
            else:  # pragma: no cover - Python without extraction filters
                tf.extractall(dest)
    return resolve_alfworld_data(dest)


def _sandbox_processes() -> list[str]:
    """Live processes of this session's ARC sandboxes (a study or another suite grading beside it is not ours)."""
    from antipersist_lib.arc.sandbox import sandbox_processes

    return sandbox_processes()


def pytest_sessionfinish(session, exitstatus):
    """After the suite, no process of any ARC sandbox may be alive: each grade must take all of its own along."""
    import time

    left = _sandbox_processes()
    if left:  # a SIGKILL sent at the very end may take a moment to land
        time.sleep(1.0)
        left = _sandbox_processes()
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"ARC sandbox processes left after the suite: {left}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
