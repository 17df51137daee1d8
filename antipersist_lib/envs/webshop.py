"""WebShop (Yao et al., 2022) driven over HTTP: the adapter talks to a running WebShop site.

The engine is princeton-nlp/WebShop's Flask application (``web_agent_site/app.py``), started by
the user (``./run_dev.sh`` serves it on port 3000). The adapter does what WebShop's own text
environment does, but against the real site instead of an in-process simulator:

* ``reset`` opens the goal's index page ``/{session_id}``. The site gives a session whose id
  contains ``fixed`` the goal with index ``int(session_id.split('_')[-1])`` of its (fixed,
  shuffled) goal list, so goal ``i`` is played in a session named ``..._fixed_{i}``; by default
  every episode gets a fresh session ``{session_prefix}-{token}-{n}_fixed_{i}`` so no server-side
  state is shared between episodes (``session_prefix=""`` uses the plain ``fixed_{i}``).
* The observation is WebShop's ``simple`` text mode: the page's visible text nodes, stripped,
  joined by `` [SEP] `` (so the index page reads ``WebShop [SEP] Instruction: [SEP] <goal>
  [SEP] Search``). Text inside ``<script>``/``<style>``/``<head>``, comments and elements the
  page hides (``style="display:none"``, ``hidden``) is left out; the latter keeps the done
  page's hidden target-product block out of the agent's (and the memory's) view.
* Actions are ``search[query]`` (only on a page with the search box, the index page) and
  ``click[X]`` where X is a clickable of the current page, compared case-insensitively, as in
  the original text environment: the buttons (Back to Search, Next >, < Prev, Description,
  Features, Reviews, Attributes, Buy Now), the product ASINs of a results page and the option
  values of an item page. The adapter follows the link the site itself renders for the
  clickable (form action, product href, the option radio's ``data-url``), so it moves exactly
  like a browser on the site; chosen options are carried in the item page's URLs by the site.
  An action that is not available on the current page is answered with ``valid=False`` and an
  explanation, without any request to the server.
* ``click[Buy Now]`` opens the done page, which shows WebShop's reward in ``#reward``; the
  episode ends there. ``score`` is that reward (0..1) and ``success`` is ``reward == 1.0``
  (within 1e-9), the usual WebShop success rate definition (ReAct, Reflexion, ExpeL).

Failures of the site (connection errors, HTTP errors, timeouts, pages that cannot be
understood) raise ``InfrastructureError``; a refused connection at ``reset`` raises
``BenchmarkUnavailableError`` that says how to start the site. The site loads its products and
search index when it serves its first request (minutes with the full 1.18M products), so the
adapter's first request may take up to ``startup_timeout_s`` (default 900 s); later requests
use ``timeout_s``.

Task partition (paper D.1): ``build_webshop_partition`` reads the user's goal file; held-out
is goal indices 0..99 and training 200 indices drawn with ``random.Random(seed)`` from the
rest (see its docstring for the accepted goal-file formats).

Reproducibility caveat (a property of the WebShop site, not of the adapter): the site draws
product prices and each goal's "price lower than X dollars" bound with Python's unseeded
``random`` when it starts, before seeding its goal shuffle, so goal ``i`` is the same product
and instruction after every restart but its price bound may differ. Keep one site running for
a whole experiment, or seed ``random`` in the site's start-up, to hold it fixed.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import random
import re
import secrets
import socket
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from antipersist_lib.envs.base import BenchmarkUnavailableError, Environment, InfrastructureError, StepResult
from antipersist_lib.envs.partitions import PAPER_COUNTS, PARTITION_SEED, Partition
from antipersist_lib.records import Task

log = logging.getLogger(__name__)

SEP = " [SEP] "
END_BUTTON = "buy now"
DEFAULT_BASE_URL = "http://127.0.0.1:3000"
#: goals in WebShop's human-instruction set (paper D.1)
PAPER_N_GOALS = 12087
N_HELDOUT = PAPER_COUNTS["webshop"]["heldout"]
N_TRAIN = PAPER_COUNTS["webshop"]["train"]
#: WebShop's site shuffles its goal list with ``random.seed(233)`` before indexing it
WEBSHOP_GOAL_SHUFFLE_SEED = 233

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

_IGNORED_TAGS = frozenset({"style", "script", "head", "title", "meta", "noscript", "template"})
_VOID_TAGS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)
_TOTAL_RE = re.compile(r"Total results", re.IGNORECASE)
_ACTION_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


# -- pages ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clickable:
    """One thing ``click[...]`` can act on: its text on the page and where it leads."""

    label: str  # as shown on the page ("Buy Now", "B078GWRC1J", "large")
    kind: str  # "button" | "product" | "option"
    url: str  # the link the site renders for it (form action, href or data-url)
    method: str = "get"  # "post" for form buttons

    @property
    def key(self) -> str:
        return _key(self.label)


@dataclass(frozen=True)
class Page:
    """What the adapter needs from one WebShop page (parsed by ``parse_page``)."""

    kind: str  # "index" | "results" | "item" | "sub" | "done" | "unknown"
    instruction: str | None
    text_observation: str
    clickables: tuple[Clickable, ...] = ()
    has_search: bool = False
    reward: float | None = None
    search_url: str | None = None  # the search form's action
    search_field: str = "search_query"
    search_method: str = "post"

    def clickable(self, label: str) -> Clickable | None:
        """The clickable named ``label`` (case- and whitespace-insensitive); later ones win."""
        k = _key(label)
        found = None
        for c in self.clickables:
            if c.key == k:
                found = c
        return found

    @property
    def clickable_labels(self) -> list[str]:
        seen: dict[str, str] = {}
        for c in self.clickables:
            seen.setdefault(c.key, c.label)
        return list(seen.values())


def _key(text: str) -> str:
    return " ".join(text.split()).lower()


def _is_hidden(attrs: dict[str, str | None]) -> bool:
    if "hidden" in attrs:
        return True
    style = (attrs.get("style") or "").replace(" ", "").lower()
    return "display:none" in style or "visibility:hidden" in style


class _PageParser(HTMLParser):
    """Tolerant one-pass reader of a WebShop page (the site's templates do not always nest)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        # open elements (tag, attributes); end tags close the nearest open element of their name
        self.stack: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self.clickables: list[Clickable] = []
        self.has_search = False
        self.search_url: str | None = None
        self.search_field = "search_query"
        self.search_method = "post"
        self.instruction_parts: list[str] | None = None
        self.reward_text: list[str] | None = None
        self.saw_reward = False
        self.saw_thankyou = False
        self.saw_total = False
        self._button: list[str] | None = None
        self._button_form: tuple[str, str] | None = None
        self._link: list[str] | None = None
        self._link_href = ""

    # context helpers
    def _in(self, pred) -> bool:
        return any(pred(t, a) for t, a in self.stack)

    def _ignored(self) -> bool:
        return self._in(lambda t, a: t in _IGNORED_TAGS)

    def _hidden(self) -> bool:
        return self._in(lambda t, a: _is_hidden(a))

    def _form(self) -> tuple[str, str] | None:
        for t, a in reversed(self.stack):
            if t == "form":
                return (a.get("action") or "", (a.get("method") or "get").lower())
        return None

    def _inside_id(self, ident: str) -> bool:
        return self._in(lambda t, a: a.get("id") == ident)

    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        attrs = {k.lower(): v for k, v in attrs_list}
        classes = (attrs.get("class") or "").split()
        ident = attrs.get("id")
        if ident == "reward":
            self.saw_reward = True
        if ident == "thankyou":
            self.saw_thankyou = True
        if tag == "input":
            itype = (attrs.get("type") or "text").lower()
            if ident == "search_input":
                self.has_search = True
                form = self._form()
                if form is not None:
                    self.search_url, self.search_method = form
                self.search_field = attrs.get("name") or "search_query"
            elif itype == "radio" and attrs.get("value") is not None:
                url = attrs.get("data-url") or ""
                self.clickables.append(Clickable(str(attrs["value"]), "option", url, "get"))
        if tag in _VOID_TAGS:
            return
        self.stack.append((tag, attrs))
        if tag == "button" and "btn" in classes and self._button is None:
            self._button = []
            self._button_form = self._form()
        elif tag == "a" and "product-link" in classes and self._link is None:
            self._link = []
            self._link_href = attrs.get("href") or ""
        elif ident == "instruction-text" and self.instruction_parts is None:
            self.instruction_parts = []
        elif tag == "pre" and self._inside_id("reward") and self.reward_text is None:
            self.reward_text = []

    def handle_startendtag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs_list)
        if tag not in _VOID_TAGS and self.stack and self.stack[-1][0] == tag:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                for t, a in reversed(self.stack[i:]):
                    self._close(t, a)
                del self.stack[i:]
                return
        # an end tag with no open element (the templates have a few): ignore it

    def _close(self, tag: str, attrs: dict[str, str | None]) -> None:
        if tag == "button" and self._button is not None:
            label = " ".join("".join(self._button).split())
            form = self._button_form
            if label and not self._hidden():
                url, method = form if form is not None else ("", "get")
                self.clickables.append(Clickable(label, "button", url, method))
            self._button = None
            self._button_form = None
        elif tag == "a" and self._link is not None and "product-link" in (attrs.get("class") or "").split():
            label = " ".join("".join(self._link).split())
            if label:
                self.clickables.append(Clickable(label, "product", self._link_href, "get"))
            self._link = None

    def handle_data(self, data: str) -> None:
        if self._ignored():
            return
        if self._button is not None:
            self._button.append(data)
        if self._link is not None:
            self._link.append(data)
        if self.instruction_parts is not None and self._inside_id("instruction-text"):
            self.instruction_parts.append(data)
        if self.reward_text is not None and self._inside_id("reward") and self._in(lambda t, a: t == "pre"):
            self.reward_text.append(data)
        if self._hidden():
            return
        s = data.strip()
        if s:
            self.texts.append(s)
            if _TOTAL_RE.search(s):
                self.saw_total = True


def parse_page(html: str) -> Page:
    """Parse one WebShop page into its kind, instruction, simple-mode text and clickables.

    Pure function (no I/O) so it can be tested on saved pages. Kinds: ``index`` (has the search
    box), ``results`` (a results list), ``item`` (has Buy Now), ``sub`` (Description / Features
    / Reviews / Attributes of an item), ``done`` (shows the reward) and ``unknown``.
    """
    p = _PageParser()
    try:
        p.feed(html)
        p.close()
    except Exception as exc:  # html.parser is lenient; this is defensive
        raise ValueError(f"could not parse the page: {exc!r}") from exc
    clickables = tuple(c for c in p.clickables if c.key != "search")
    instruction = None
    if p.instruction_parts is not None:
        text = " ".join(" ".join(p.instruction_parts).split())
        text = re.sub(r"^instruction:\s*", "", text, flags=re.IGNORECASE).strip()
        instruction = text or None
    reward = None
    if p.reward_text:
        raw = "".join(p.reward_text).strip()
        try:
            reward = float(raw)
        except ValueError:
            reward = None
    keys = {c.key for c in clickables}
    if p.saw_reward or p.saw_thankyou:
        kind = "done"
    elif p.has_search:
        kind = "index"
    elif END_BUTTON in keys:
        kind = "item"
    elif p.saw_total or any(c.kind == "product" for c in clickables):
        kind = "results"
    elif "back to search" in keys:
        kind = "sub"
    else:
        kind = "unknown"
    return Page(
        kind=kind,
        instruction=instruction,
        text_observation=SEP.join(p.texts),
        clickables=clickables,
        has_search=p.has_search,
        reward=reward,
        search_url=p.search_url,
        search_field=p.search_field,
        search_method=p.search_method,
    )


# -- actions -------------------------------------------------------------------------------


def parse_webshop_action(action: str) -> tuple[str, str] | None:
    """``("search"|"click", argument)`` for ``search[...]``/``click[...]`` (any case, spaces
    tolerated around the verb and brackets), or None when the text is neither."""
    m = _ACTION_RE.match(action or "")
    if m is None:
        return None
    return m.group(1).lower(), " ".join(m.group(2).split())


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


def _same_goal(partition_instruction: str, site_instruction: str) -> bool:
    """Whether the site's instruction starts with the partition's (the site adds a price clause)."""
    norm = lambda s: re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()  # noqa: E731
    a, b = norm(partition_instruction), norm(site_instruction)
    return bool(a) and b.startswith(a)


# -- partition -----------------------------------------------------------------------------


def load_webshop_goals(
    goals_path: str | Path, *, products_path: str | Path | None = None
) -> tuple[list[str], dict[str, Any]]:
    """Goal instructions in the order of the WebShop site's goal list (index i = ``fixed_i``).

    Accepted files (JSON):

    1. a list of strings: WebShop's ``baseline_models/data/human_goals.json`` (12,087
       instructions in the site's goal order) -- the recommended input;
    2. a list of goal objects with an ``"instruction_text"`` field: the list WebShop's
       ``get_human_goals`` builds, as the site holds it after its shuffle (e.g. ``json.dump``
       of the app's ``goals``); extra fields are ignored;
    3. the raw ``items_human_ins.json``: a dict ``{asin: [{"instruction": ...,
       "instruction_attributes": [...], "instruction_options": ..., ...}, ...]}``. Goals are
       rebuilt as ``get_human_goals`` does (entries without attributes are skipped, the
       instruction's trailing periods stripped) and shuffled like the site
       (``random.seed(233); random.shuffle(goals)``). The site lists goals in the order of its
       product file, so give ``products_path`` (``items_shuffle.json``) to reproduce the site's
       indices exactly; without it the dict's order is used and the result is flagged
       ``order_exact: False``.

    Returns (instructions, info about the file).
    """
    path = Path(goals_path)
    raw = path.read_bytes()
    data = json.loads(raw.decode("utf-8"))
    info: dict[str, Any] = {"goals_file": path.name, "goals_sha256": hashlib.sha256(raw).hexdigest()}
    if isinstance(data, list):
        out: list[str] = []
        kinds = set()
        for i, g in enumerate(data):
            if isinstance(g, str):
                kinds.add("strings")
                out.append(g.strip())
            elif isinstance(g, dict) and isinstance(g.get("instruction_text"), str):
                kinds.add("goal objects")
                out.append(g["instruction_text"].strip())
            else:
                raise ValueError(f"{path}: goal {i} is neither a string nor an object with 'instruction_text'")
        if len(kinds) > 1:
            raise ValueError(f"{path}: mixes instruction strings and goal objects")
        info["format"] = (
            "list of instruction strings (human_goals.json)"
            if kinds == {"strings"}
            else "list of goal objects (get_human_goals)"
        )
        info["order_exact"] = True
        return out, info
    if isinstance(data, dict):
        order: list[str]
        if products_path is not None:
            products = json.loads(Path(products_path).read_text(encoding="utf-8"))
            order, seen = [], set()
            for p in products:
                asin = str(p.get("asin", ""))
                if asin == "nan" or len(asin) > 10 or asin in seen:  # the site's own filter
                    continue
                seen.add(asin)
                order.append(asin)
            info["products_file"] = Path(products_path).name
            info["order_exact"] = True
        else:
            order = list(data)
            info["order_exact"] = False
        goals: list[str] = []
        for asin in order:
            entries = data.get(asin)
            if not entries:
                continue
            if not isinstance(entries, list):
                raise ValueError(f"{path}: entry {asin!r} is not a list of instructions")
            for e in entries:
                if not isinstance(e, dict) or not isinstance(e.get("instruction"), str):
                    raise ValueError(f"{path}: entry {asin!r} has an instruction without an 'instruction' string")
                if len(e.get("instruction_attributes") or []) == 0:
                    continue
                goals.append(e["instruction"].strip(".").strip())
        random.Random(WEBSHOP_GOAL_SHUFFLE_SEED).shuffle(goals)
        info["format"] = "items_human_ins.json (dict keyed by ASIN), rebuilt and shuffled with seed 233"
        return goals, info
    raise ValueError(f"{path}: expected a JSON list of goals or a dict keyed by ASIN, got {type(data).__name__}")


def draw_webshop_split(
    n_goals: int, *, seed: int = PARTITION_SEED, n_heldout: int = N_HELDOUT, n_train: int = N_TRAIN
) -> tuple[list[int], list[int]]:
    """(held-out goal indices 0..n_heldout-1, sorted training indices drawn from the rest)."""
    if n_goals < n_heldout + n_train:
        raise ValueError(f"need at least {n_heldout + n_train} goals, got {n_goals}")
    heldout = list(range(n_heldout))
    train = sorted(random.Random(seed).sample(range(n_heldout, n_goals), n_train))
    return heldout, train


def build_webshop_partition(
    goals_path: str | Path,
    seed: int = PARTITION_SEED,
    *,
    products_path: str | Path | None = None,
) -> Partition:
    """The D.1 WebShop partition from the user's goal file (formats: ``load_webshop_goals``).

    Held-out: goal indices 0..99, i.e. the site's sessions ``fixed_0``..``fixed_99`` (the
    first 100 goals of WebShop's 500-goal test range, the goals ReAct-style LLM agents
    evaluate on). Training: 200 indices drawn uniformly without replacement with
    ``random.Random(seed).sample(range(100, N), 200)`` from the remaining N-100 goals (11,987
    for the full set), listed in increasing order. ``task_id`` is the goal index,
    ``env_args = {"goal_index": i}``, ``task_type = "webshop"``. A file whose goal count is
    not 12,087 still gives a partition; the count is recorded in ``drawn_with`` and a warning
    is issued.
    """
    goals, info = load_webshop_goals(goals_path, products_path=products_path)
    n = len(goals)
    heldout_idx, train_idx = draw_webshop_split(n, seed=seed)
    if n != PAPER_N_GOALS:
        warnings.warn(
            f"WebShop goal file {Path(goals_path).name} has {n} goals, not the paper's {PAPER_N_GOALS}; "
            "the partition is built but will not match the paper's task set",
            stacklevel=2,
        )
    if info.get("order_exact") is False:
        warnings.warn(
            "items_human_ins.json without products_path: goal indices follow the file's order and may "
            "not match the site's fixed_i goals; pass products_path=items_shuffle.json or use human_goals.json",
            stacklevel=2,
        )

    def task(i: int, split: str) -> Task:
        return Task(
            task_id=i,
            benchmark="webshop",
            task_type="webshop",
            instruction=goals[i],
            split=split,
            env_args={"goal_index": i},
        )

    drawn_with = {
        **info,
        "n_goals": n,
        "paper_n_goals": PAPER_N_GOALS,
        "n_goals_matches_paper": n == PAPER_N_GOALS,
        "heldout": f"goal indices 0..{N_HELDOUT - 1} (site sessions fixed_0..fixed_{N_HELDOUT - 1})",
        "train": f"random.Random({seed}).sample(range({N_HELDOUT}, {n}), {N_TRAIN}), sorted",
    }
    return Partition(
        benchmark="webshop",
        seed=seed,
        drawn_with=drawn_with,
        train=tuple(task(i, "train") for i in train_idx),
        heldout=tuple(task(i, "heldout") for i in heldout_idx),
        notes=(
            "Held-out: WebShop goals 0-99 (fixed_0..fixed_99). Training: 200 goals drawn uniformly with a "
            "fixed seed from the remaining goals. task_id is the WebShop goal index. Instructions come from "
            "the goal file; the site appends a price clause to them."
        ),
    )


__all__: Sequence[str] = (
    "ACTION_HELP",
    "Clickable",
    "Page",
    "WebShopEnvironment",
    "build_webshop_partition",
    "draw_webshop_split",
    "load_webshop_goals",
    "parse_page",
    "parse_webshop_action",
)
