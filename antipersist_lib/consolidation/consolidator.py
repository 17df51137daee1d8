"""The consolidators' shared base (§3, §4.2): ``Consolidator``, which ACE (``ace``), AWM (``awm``), Dynamic
Cheatsheet (``cheatsheet``), CLIN (``clin``) and the trajectory-log baselines (``episodic``) extend.

Every builder has one interface, ``update(memory, batch) -> MemoryBank``: a new bank (the input
is never modified) one step later, so the regimes (``regimes.py``) can schedule any of them and
keep every intermediate bank. An update that meets a reply it cannot parse returns the entries
unchanged and logs the failure (with the start of the reply) in the bank's history; single bad
items inside a parsable reply (an unknown id, an empty text) are skipped and logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from antipersist_lib.consolidation.bank import MemoryBank, MemoryEntry
from antipersist_lib.consolidation.pool import PoolRecord, check_pool, summarize_trajectory
from antipersist_lib.errors import ReplyParseError
from antipersist_lib.replies import excerpt

#: characters of each summarized episode in a consolidation prompt
SUMMARY_CHARS = 3000


class Consolidator:
    """Base builder: copies the bank, runs ``_apply`` on the copy, logs one history event."""

    name = "base"
    kind = "bullet"
    id_prefix = "e"
    prompt_names: tuple[str, ...] = ()
    needs_llm = True
    #: whether the regime's FIFO capacity evicts this builder's oldest entries (Incr. Keep may opt out)
    capped = True

    def __init__(
        self,
        llm: Any = None,
        *,
        summary_chars: int = SUMMARY_CHARS,
        max_tokens: int = 4096,
        temperature: float = 0.0,
    ) -> None:
        if self.needs_llm and llm is None:
            raise ValueError(f"builder {self.name!r} calls a model: pass llm=")
        if isinstance(summary_chars, bool) or not isinstance(summary_chars, int) or summary_chars < 200:
            raise ValueError(f"summary_chars must be an integer >= 200, got {summary_chars!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        self.llm = llm
        self.summary_chars = summary_chars
        self.max_tokens = max_tokens
        self.temperature = float(temperature)
        self._last_reply = ""

    def describe(self) -> dict[str, Any]:
        return {
            "builder": self.name,
            "summary_chars": self.summary_chars,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }

    def update(self, memory: MemoryBank, batch: Sequence[PoolRecord]) -> MemoryBank:
        if not isinstance(memory, MemoryBank):
            raise TypeError(f"memory must be a MemoryBank, got {type(memory).__name__}")
        records = check_pool(batch, "batch")
        before = memory.copy()
        before.step += 1
        event: dict[str, Any] = {
            "step": before.step,
            "builder": self.name,
            "batch": [r.rid for r in records],
            "calls": 0,
            "ops": [],
            "skipped": [],
            "error": None,
        }
        bank = before.copy()
        self._last_reply = ""
        try:
            self._apply(bank, records, event)
        except ReplyParseError as exc:  # the documented fallback: entries unchanged, failure logged
            bank = before
            event["ops"] = []
            event["error"] = str(exc)
            event["reply"] = excerpt(self._last_reply)
        evicted = bank.evict_fifo() if self.capped else []
        if evicted:
            event["ops"].append({"op": "evict", "ids": evicted})
        bank.history.append(event)
        return bank

    def _apply(self, bank: MemoryBank, records: list[PoolRecord], event: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------

    def _chat(self, system: str, prompt: str, role: str, event: dict[str, Any]) -> str:
        reply = self.llm.chat(
            [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            purpose="consolidation",
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            tags={"builder": self.name, "role": role, "step": event["step"]},
        )
        event["calls"] += 1
        self._last_reply = reply.text
        return reply.text

    def _episodes(
        self, records: list[PoolRecord], *, with_outcome: bool = True, notes: dict[int, str] | None = None
    ) -> str:
        blocks = []
        for i, r in enumerate(records, start=1):
            text = summarize_trajectory(r, self.summary_chars, with_outcome=with_outcome)
            extra = (notes or {}).get(i)
            blocks.append(f"### Episode {i}\n{text}" + (f"\n{extra}" if extra else ""))
        return "\n\n".join(blocks)

    def _entry(self, bank: MemoryBank, text: str, sources: list[str], **fields: Any) -> MemoryEntry:
        return MemoryEntry(
            id=bank.new_id(self.id_prefix),
            text=text.strip(),
            kind=self.kind,
            sources=unique(sources),
            created_step=bank.step,
            updated_step=bank.step,
            **fields,
        )


def unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def text_of(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def normalized(text: str) -> str:
    """Text as compared for repeats: lower case, whitespace runs as one space."""
    return " ".join(text.lower().split())
