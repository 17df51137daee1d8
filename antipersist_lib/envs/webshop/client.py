"""The HTTP adapter to a running WebShop site: ``WebShopEnvironment``.

The engine is princeton-nlp/WebShop's Flask application (``web_agent_site/app.py``), started by the
user (``./run_dev.sh``, port 3000). The adapter plays goal ``i`` in a fresh ``..._fixed_{i}``
session, observes pages in WebShop's ``simple`` text mode and acts by following the links the site
renders (``antipersist_lib.envs.webshop.pages``); ``success`` is a reward of 1.0 on the done page.
The first request may take up to ``startup_timeout_s`` (900 s) while the site loads its products.

Caveat: the site draws prices and each goal's price bound with Python's unseeded ``random`` at
start-up, so a goal's price bound may differ after a restart; keep one site running for a whole
experiment, or seed ``random`` in the site's start-up. docs/benchmarks.md, "WebShop", has the
details.
"""

from __future__ import annotations

import http.client
import logging
import re
import secrets
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from antipersist_lib.envs.base import Environment, StepResult
from antipersist_lib.envs.webshop.goals import _same_goal
from antipersist_lib.envs.webshop.pages import Page, _key, parse_page, parse_webshop_action
from antipersist_lib.errors import BenchmarkUnavailableError, InfrastructureError
from antipersist_lib.records import Task

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:3000"

ACTION_HELP = """\
Actions (one per turn):
  search[query]   type a query into the search box (only on the search page; click[Back to Search] to get there)
  click[X]        click a button, product or option shown on the page, e.g. click[Next >], click[< Prev],
                  click[Back to Search], click[B078GWRC1J] (a product's ID), click[large] (an option value),
                  click[Description], click[Features], click[Reviews], click[Buy Now]
Choose the product's options (size, color, ...) before click[Buy Now]; buying ends the episode."""

SERVER_HINT = (
    "The WebShop site (princeton-nlp/WebShop's Flask app) must be running at {base_url}. To start it: "
    "`git clone https://github.com/princeton-nlp/WebShop webshop && cd webshop`, install it with "
    "`./setup.sh -d all` (Python deps, Java for the search index, product + instruction data, index build), "
    "point `web_agent_site/utils.py` at the full data (DEFAULT_FILE_PATH = items_shuffle.json, "
    "DEFAULT_ATTR_PATH = items_ins_v2.json; the 1,000-product default gives a different goal list), "
    "then `./run_dev.sh` (or `python -m web_agent_site.app --log --attrs`), which serves on port 3000. "
    "Pass base_url=... if it runs elsewhere."
)


# -- the adapter ---------------------------------------------------------------------------


class WebShopEnvironment(Environment):
    """WebShop episodes on a running WebShop site (see the module docstring).

    Task ``env_args``: ``{"goal_index": i}`` (the site's goal ``i``, session ``..._fixed_{i}``).
    ``success`` is ``reward == 1.0``; ``score`` is the reward of the purchase (0 before it).
    """

    benchmark = "webshop"
    action_help = ACTION_HELP

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        timeout_s: float = 30,
        session_prefix: str = "antipersist",
        startup_timeout_s: float = 900,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9-]*", session_prefix):
            raise ValueError("session_prefix may only contain letters, digits and '-'")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = float(timeout_s)
        # the site loads its products and search index on the first request it serves, which
        # takes minutes with the full product set: the adapter's first reset waits this long
        self.startup_timeout_s = max(float(startup_timeout_s), self.timeout_s)
        self._served = False
        self.session_prefix = session_prefix
        self._token = secrets.token_hex(3)
        self._episodes = 0
        self._page: Page | None = None
        self._url: str | None = None
        self._session: str | None = None
        self._reward: float = 0.0
        self._done = False
        self._closed = False
        self.instruction_mismatch = False
        host = urllib.parse.urlsplit(self.base_url).hostname or ""
        # a loopback site must not be sent through an http_proxy from the environment
        handlers = [urllib.request.ProxyHandler({})] if host in ("localhost", "::1") or host.startswith("127.") else []
        self._opener = urllib.request.build_opener(*handlers)

    # -- HTTP -------------------------------------------------------------------------------

    def session_id(self, goal_index: int) -> str:
        """The session name for the next episode on goal ``goal_index``."""
        if not self.session_prefix:
            return f"fixed_{goal_index}"
        return f"{self.session_prefix}-{self._token}-{self._episodes}_fixed_{goal_index}"

    def _absolute(self, url: str) -> str:
        """``url`` against base_url, with anything a browser would escape percent-encoded."""
        url = urllib.parse.quote(url, safe=":/?#[]@!$&'()*+,;=%~-._")
        if url.startswith(("http://", "https://")):
            return url
        return urllib.parse.urljoin(self.base_url + "/", url)

    def _fetch(
        self, url: str, *, data: dict[str, str] | None = None, method: str = "get", at_reset: bool = False
    ) -> tuple[str, str]:
        """GET/POST ``url``; returns (final url after redirects, body)."""
        timeout = self.timeout_s if self._served else self.startup_timeout_s
        body = None
        headers = {"User-Agent": "antipersist-webshop-adapter"}
        if method == "post" or data is not None:
            body = urllib.parse.urlencode(data or {}).encode("utf-8")
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                raw = resp.read()
                final = resp.geturl()
                charset = resp.headers.get_content_charset() or "utf-8"
            self._served = True
        except urllib.error.HTTPError as exc:
            raise InfrastructureError(f"WebShop site answered HTTP {exc.code} for {url}") from exc
        except urllib.error.URLError as exc:
            if at_reset and _unreachable(exc.reason):
                raise self._unavailable(exc.reason) from exc
            raise InfrastructureError(f"WebShop site request failed for {url}: {exc.reason!r}") from exc
        except TimeoutError as exc:
            raise InfrastructureError(f"WebShop site timed out after {timeout}s for {url}") from exc
        except OSError as exc:
            if at_reset and _unreachable(exc):
                raise self._unavailable(exc) from exc
            raise InfrastructureError(f"WebShop site connection failed for {url}: {exc!r}") from exc
        except (http.client.HTTPException, ValueError) as exc:
            raise InfrastructureError(f"WebShop site request for {url} failed: {exc!r}") from exc
        return final, raw.decode(charset, errors="replace")

    def _unavailable(self, reason: object) -> BenchmarkUnavailableError:
        return BenchmarkUnavailableError(
            f"cannot connect to the WebShop site at {self.base_url} ({reason}). "
            + SERVER_HINT.format(base_url=self.base_url)
        )

    def _load(
        self, url: str, *, data: dict[str, str] | None = None, method: str = "get", at_reset: bool = False
    ) -> Page:
        final, html = self._fetch(url, data=data, method=method, at_reset=at_reset)
        try:
            page = parse_page(html)
        except ValueError as exc:
            raise InfrastructureError(f"unparseable WebShop page at {final}: {exc}") from exc
        if page.kind == "unknown":
            raise InfrastructureError(f"unrecognised WebShop page at {final} (is {self.base_url} a WebShop site?)")
        self._url = final
        self._page = page
        return page

    # -- Environment ------------------------------------------------------------------------

    def _reset(self, task: Task) -> str:
        if self._closed:
            raise InfrastructureError("the WebShop adapter was closed")
        try:
            goal = int(task.env_args["goal_index"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"WebShop task {task.key} needs env_args['goal_index'] (an int): {task.env_args!r}"
            ) from exc
        self._episodes += 1
        self._session = self.session_id(goal)
        self._reward = 0.0
        self._done = False
        self._page = None
        url = f"{self.base_url}/{urllib.parse.quote(self._session)}"
        page = self._load(url, at_reset=True)
        if page.kind != "index" or not page.instruction:
            raise InfrastructureError(
                f"WebShop session {self._session} did not open on the search page with an instruction"
            )
        self.instruction_mismatch = bool(task.instruction) and not _same_goal(task.instruction, page.instruction)
        if self.instruction_mismatch:
            log.warning(
                "WebShop goal %d: the site's instruction %r does not match the partition's %r "
                "(is the site running on the full product set?)",
                goal,
                page.instruction,
                task.instruction,
            )
        return page.text_observation

    def _step(self, action: str) -> StepResult:
        if self._page is None:
            raise InfrastructureError("WebShop step before reset")
        if self._done:
            return StepResult(
                "The episode is over: the product was bought.", valid=False, done=True, info={"page": "done"}
            )
        parsed = parse_webshop_action(action)
        page = self._page
        if parsed is None:
            return StepResult(
                f"Invalid action {action!r}: use search[query] or click[X].\n{self._available_text(page)}",
                valid=False,
                info={"page": page.kind},
            )
        verb, arg = parsed
        if verb == "search":
            if not page.has_search:
                return StepResult(
                    "You cannot search on this page: the search box is only on the search page "
                    f"(click[Back to Search] first).\n{self._available_text(page)}",
                    valid=False,
                    info={"page": page.kind},
                )
            if not arg:
                return StepResult(
                    "search[] needs a query, e.g. search[blue ceramic mug].", valid=False, info={"page": page.kind}
                )
            target = self._absolute(page.search_url or f"/{urllib.parse.quote(self._session or '')}")
            new = self._load(target, data={page.search_field: arg}, method="post")
            return StepResult(new.text_observation, info={"page": new.kind, "url": self._url})
        # click
        if _key(arg) == "search":
            return StepResult(
                "To search, use search[query] on the search page."
                + ("" if page.has_search else " click[Back to Search] first."),
                valid=False,
                info={"page": page.kind},
            )
        c = page.clickable(arg)
        if c is None:
            return StepResult(
                f"Invalid action: there is no {arg!r} to click on this page.\n{self._available_text(page)}",
                valid=False,
                info={"page": page.kind},
            )
        if not c.url:
            raise InfrastructureError(f"WebShop page offers {c.label!r} without a link to follow")
        new = self._load(self._absolute(c.url), method=c.method)
        info: dict[str, Any] = {"page": new.kind, "url": self._url}
        if new.kind == "done":
            if new.reward is None:
                raise InfrastructureError(f"WebShop done page without a readable reward at {self._url}")
            self._reward = max(0.0, min(1.0, float(new.reward)))
            self._done = True
            info["reward"] = self._reward
            return StepResult(new.text_observation, reward=self._reward, done=True, info=info)
        return StepResult(new.text_observation, info=info)

    def _available_text(self, page: Page) -> str:
        acts = self.valid_actions() or []
        return "Available actions: " + ", ".join(acts) if acts else "No actions are available."

    @property
    def success(self) -> bool:
        return self._done and abs(self._reward - 1.0) < 1e-9

    @property
    def score(self) -> float:
        return self._reward if self._done else 0.0

    @property
    def page(self) -> Page | None:
        """The current page (for tests and debugging)."""
        return self._page

    def valid_actions(self) -> list[str] | None:
        page = self._page
        if page is None or self._done:
            return []
        acts = ["search[<query>]"] if page.has_search else []
        acts += [f"click[{label}]" for label in page.clickable_labels]
        return acts

    def normalize_action(self, action: str) -> str:
        """``Click [ Buy  Now ]`` -> ``click[Buy Now]``; other text is only stripped."""
        s = (action or "").strip()
        parsed = parse_webshop_action(s)
        if parsed is None:
            return s
        return f"{parsed[0]}[{parsed[1]}]"

    def engine_info(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "engine": "princeton-nlp/WebShop Flask site over HTTP",
            "base_url": self.base_url,
            "session": "{prefix}-{token}-{n}_fixed_{goal_index}" if self.session_prefix else "fixed_{goal_index}",
            "session_prefix": self.session_prefix,
            "observation": "simple text mode (visible text joined by ' [SEP] ')",
            "success": "reward == 1.0",
            "score": "reward of the purchase (0..1)",
            "timeout_s": self.timeout_s,
            "startup_timeout_s": self.startup_timeout_s,
        }

    def close(self) -> None:
        self._closed = True
        self._page = None


def _unreachable(reason: object) -> bool:
    """Connection refused or unknown host: nothing is serving at base_url."""
    return isinstance(reason, (ConnectionRefusedError, socket.gaierror))


__all__: Sequence[str] = (
    "ACTION_HELP",
    "WebShopEnvironment",
)
