"""WebShop pages: the page model and the HTML parsing behind the adapter's observations and actions.

Pure functions and data (no I/O), so they can be tested on saved pages; the adapter that fetches the
pages is ``antipersist_lib.envs.webshop.client``. ``parse_page`` turns a page into its ``simple``
text observation (visible text joined by `` [SEP] ``; hidden elements, such as the done page's
target product, are left out), its ``Clickable`` items with the links the site renders for them, and
the done page's reward (``Page.reward``). docs/benchmarks.md, "WebShop", describes the observation
and the action syntax.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser

SEP = " [SEP] "
END_BUTTON = "buy now"

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


__all__: Sequence[str] = (
    "Clickable",
    "Page",
    "parse_page",
    "parse_webshop_action",
)
