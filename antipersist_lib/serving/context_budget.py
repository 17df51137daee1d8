"""Whether a prompt fits a backbone's context, measured by the kit before the request is sent: the kit's one
token estimate, beside the clients that send the requests.

Why one home: a server that is sent too long a prompt rejects it (or silently cuts it) hours into a study; the
frozen skill layer, the consolidation study and the ARC-AGI Stream study all measure their prompts the same way
first, so a paper profile is refused when it loads, with the sizes and the fix, rather than failing mid-run.

Sizes are estimated at ``CHARS_PER_TOKEN`` characters per token, which over-counts tokens for prose (BPE
tokenizers average about four characters per token on English and fewer on code and JSON), plus the reply cap
(``max_tokens``) of the call. A backbone that states no context length is not checked, and the record says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from antipersist_lib.errors import ContextOverflowError

#: characters per token assumed for every context check (an over-estimate of tokens, see the module docstring)
CHARS_PER_TOKEN = 3


def tokens_for_chars(chars: int) -> int:
    """Tokens ``chars`` characters of text may take, by ``CHARS_PER_TOKEN`` (an over-estimate for prose)."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def estimated_tokens(text: str) -> int:
    """Tokens ``text`` may take, by ``CHARS_PER_TOKEN`` (an over-estimate for prose)."""
    return tokens_for_chars(len(text))


def backbone_context_length(llm: Any) -> int | None:
    """The backbone's context length as its endpoint states it (a profile's ``context_length``, the
    embedded default's ``n_ctx``, ``--context-length``); None when nobody stated it."""
    return getattr(getattr(llm, "endpoint", None), "context_length", None)


def messages_text(messages: Sequence[dict[str, Any]]) -> str:
    """The text a chat request sends (every message's content, one per line)."""
    return "\n".join(str(m.get("content") or "") for m in messages)


def request_tokens(messages: Sequence[dict[str, Any]], reply_tokens: int) -> int:
    """Estimated tokens of a request: its text plus the reply cap the call reserves."""
    return estimated_tokens(messages_text(messages)) + int(reply_tokens or 0)


def overflow_message(
    what: str, *, chars: int, needed: int, context_length: int, model: str, fix: str, kind: str = "prompt"
) -> str:
    """One sentence for every refusal: what was measured, its size, the context and the fix."""
    return (
        f"{what}: a {kind} of {chars} characters (about {needed} tokens at {CHARS_PER_TOKEN} characters per token, "
        f"reply cap included) does not fit the context length of {model!r}, {context_length} tokens. Fix: {fix}"
    )


class PromptGuard:
    """Wraps a model client: every ``chat`` request is measured (text plus reply cap) against the context length
    and refused with ``ContextOverflowError`` before it is sent. ``what`` names the caller in the message (a
    callable gets the request's ``tags``, so a message can name the step); other attributes are the client's."""

    def __init__(
        self, llm: Any, *, what: str | Callable[[dict[str, Any]], str], fix: str, kind: str = "prompt"
    ) -> None:
        self.llm = llm
        self.what = what
        self.kind = kind
        self.fix = fix
        self.context_length = backbone_context_length(llm)
        self.largest_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)

    def check(self, messages: Sequence[dict[str, Any]], reply_tokens: int, tags: dict[str, Any] | None = None) -> int:
        """The request's estimated tokens; raises when they exceed the context length."""
        text = messages_text(messages)
        needed = estimated_tokens(text) + int(reply_tokens or 0)
        self.largest_tokens = max(self.largest_tokens, needed)
        if self.context_length is not None and needed > self.context_length:
            what = self.what(dict(tags or {})) if callable(self.what) else self.what
            model = getattr(getattr(self.llm, "endpoint", None), "model", "?")
            raise ContextOverflowError(
                overflow_message(
                    what,
                    chars=len(text),
                    needed=needed,
                    context_length=self.context_length,
                    model=model,
                    fix=self.fix,
                    kind=self.kind,
                ),
                needed_tokens=needed,
                context_length=self.context_length,
                reply_tokens=int(reply_tokens or 0),
            )
        return needed

    def chat(self, messages: Sequence[dict[str, Any]], **kw: Any) -> Any:
        self.check(messages, int(kw.get("max_tokens") or 0), {**(kw.get("tags") or {}), "purpose": kw.get("purpose")})
        return self.llm.chat(messages, **kw)

    def record(self) -> dict[str, Any]:
        """What a manifest says about the check."""
        return {
            "context_length": self.context_length,
            "chars_per_token": CHARS_PER_TOKEN,
            "checked": self.context_length is not None,
            "largest_request_tokens": self.largest_tokens,
        }
