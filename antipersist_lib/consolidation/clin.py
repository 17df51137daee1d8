"""CLIN (§3, §4.2; App. G.1, J): a bounded FIFO bank of causal rules the model edits or rewrites.

Kit choices where the paper is silent (its appendix gives roles, not prompts or update rules):

* CLIN: a replaced rule gets a new id and moves to the newest end of the FIFO queue; entries
  the model does not mention are retained; after the edit the oldest entries beyond the
  capacity are evicted. ``update="rewrite"`` (G.1) takes the reply as the whole new list instead,
  and ``seed_list="free_count"`` seeds an empty bank with a list of the model's chosen length.
"""

from __future__ import annotations

from typing import Any

from antipersist_lib.consolidation import prompts as P
from antipersist_lib.consolidation.bank import MemoryBank
from antipersist_lib.consolidation.consolidator import Consolidator, normalized, text_of
from antipersist_lib.consolidation.pool import PoolRecord
from antipersist_lib.errors import ReplyParseError
from antipersist_lib.replies import excerpt, extract_json

CLIN_OPS = ("retain", "delete", "replace", "add")
#: how CLIN's manager edits the bank: by delete / replace / add / retain operations ("ops", App. J) or by
#: rewriting the whole list every update ("rewrite"; App. G.1: "rewrites the entire memory at every stage")
CLIN_UPDATES = ("ops", "rewrite")
#: the call that starts an empty bank: the update prompt as any other ("capped") or a free-count list of
#: task-type-agnostic insights, the model choosing the count ("free_count"; App. G.1's seed)
CLIN_SEED_LISTS = ("capped", "free_count")


class CLIN(Consolidator):
    """A bounded bank of causal rules; the model retains, deletes, replaces or adds; FIFO eviction."""

    name = "clin"
    kind = "rule"
    id_prefix = "m"
    prompt_names = (
        "consolidation_clin_system",
        "consolidation_clin_update",
        "consolidation_clin_rewrite",
        "consolidation_clin_seed_free",
    )

    def __init__(
        self, llm: Any, *, capacity: int = 50, update: str = "ops", seed_list: str = "capped", **kw: Any
    ) -> None:
        super().__init__(llm, **kw)
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"CLIN capacity must be an integer >= 1, got {capacity!r}")
        if update not in CLIN_UPDATES:
            raise ValueError(f"CLIN update must be one of {CLIN_UPDATES}, got {update!r}")
        if seed_list not in CLIN_SEED_LISTS:
            raise ValueError(f"CLIN seed_list must be one of {CLIN_SEED_LISTS}, got {seed_list!r}")
        self.capacity = capacity
        self.update_mode = update
        self.seed_list = seed_list

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "capacity": self.capacity,
            "update": self.update_mode,
            "seed_list": self.seed_list,
        }

    def _apply(self, bank: MemoryBank, records: list[PoolRecord], event: dict[str, Any]) -> None:
        cap = min(self.capacity, bank.capacity or self.capacity)
        entries = "\n".join(f"[{e.id}] {e.text}" for e in bank.entries) or P.EMPTY_MEMORY
        notes = {
            i: f"Evaluation report: {'task completed' if r.outcome.success else 'task not completed'} "
            f"(score {r.outcome.score:g})"
            for i, r in enumerate(records, start=1)
        }
        episodes = self._episodes(records, with_outcome=False, notes=notes)
        if self.seed_list == "free_count" and not bank.entries:
            event["seed"] = "free_count"
            items = extract_json(
                self._chat(P.CLIN_SYSTEM, P.CLIN_SEED_FREE.format(episodes=episodes), "seed", event), list
            )
            self._rewrite(bank, items, records, event, cap=None)
            return
        if self.update_mode == "rewrite":
            prompt = P.CLIN_REWRITE.format(n=len(bank.entries), capacity=cap, entries=entries, episodes=episodes)
            self._rewrite(
                bank, extract_json(self._chat(P.CLIN_SYSTEM, prompt, "rewrite", event), list), records, event, cap=cap
            )
            return
        prompt = P.CLIN_UPDATE.format(
            n=len(bank.entries),
            capacity=cap,
            entries=entries,
            episodes=episodes,
        )
        ops = extract_json(self._chat(P.CLIN_SYSTEM, prompt, "update", event), list)
        batch_ids = [r.rid for r in records]
        for op in ops:
            kind = str(op.get("op", "")).lower() if isinstance(op, dict) else ""
            text = text_of(op.get("text")) if isinstance(op, dict) else ""
            target = (
                bank.get(op["id"])
                if kind in ("retain", "delete", "replace") and isinstance(op.get("id"), str)
                else None
            )
            if kind == "add" and text:
                e = self._entry(bank, text, batch_ids)
                bank.entries.append(e)
                event["ops"].append({"op": "add", "id": e.id})
            elif kind == "retain" and target is not None:
                event["ops"].append({"op": "retain", "id": target.id})
            elif kind == "delete" and target is not None:
                bank.entries.remove(target)
                event["ops"].append({"op": "delete", "id": target.id})
            elif kind == "replace" and target is not None and text:
                bank.entries.remove(target)
                e = self._entry(bank, text, target.sources + batch_ids)
                bank.entries.append(e)
                event["ops"].append({"op": "replace", "id": target.id, "by": e.id})
            else:
                event["skipped"].append(f"op {excerpt(str(op), 80)}")
        evicted = bank.evict_fifo(cap)
        if evicted:
            event["ops"].append({"op": "evict", "ids": evicted})

    def _rewrite(
        self, bank: MemoryBank, items: list[Any], records: list[PoolRecord], event: dict[str, Any], *, cap: int | None
    ) -> None:
        """The reply is the whole new list: an item whose text equals an old one's keeps that entry (its id and
        sources); any other is a new entry citing the old items it names (``from``) and the batch; old entries
        the list leaves out are deleted. Items past ``cap`` (the list's tail) are cut and logged."""
        texts = []
        for item in items:
            text = text_of(item.get("text")) if isinstance(item, dict) else text_of(item)
            if not text:
                event["skipped"].append(f"item {excerpt(str(item), 80)}")
                continue
            texts.append((text, item.get("from", []) if isinstance(item, dict) else []))
        if not texts:
            raise ReplyParseError("the rewrite holds no item: the memory is kept")
        if cap is not None and len(texts) > cap:
            event["ops"].append({"op": "cut", "count": len(texts) - cap})
            texts = texts[:cap]
        old = {normalized(e.text): e for e in bank.entries}
        batch_ids = [r.rid for r in records]
        kept, out = set(), []
        for text, cited in texts:
            same = old.get(normalized(text))
            if same is not None and same.id not in kept:
                kept.add(same.id)
                out.append(same)
                continue
            parents = [bank.get(c) for c in cited if isinstance(c, str)] if isinstance(cited, list) else []
            sources = [s for e in parents if e is not None for s in e.sources] + batch_ids
            e = self._entry(bank, text, sources)
            out.append(e)
            event["ops"].append({"op": "add", "id": e.id, "from": [p.id for p in parents if p is not None]})
        for e in bank.entries:
            if e.id not in kept:
                event["ops"].append({"op": "delete", "id": e.id})
        for e in out:
            if e.id in kept:
                event["ops"].append({"op": "retain", "id": e.id})
        bank.entries = out
