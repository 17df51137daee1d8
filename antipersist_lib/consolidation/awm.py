"""AWM, Agent Workflow Memory (§3, §4.2; App. H.1.2): workflows induced from successful episodes.

Kit choices where the paper is silent (its appendix gives roles, not prompts or update rules):

* AWM: workflows are induced from the batch's successful episodes only (no call when there are
  none); ``mode="append"`` appends them (an exact repeat is skipped), ``mode="revise"`` may also
  rewrite stored workflows in place and remove them (H.1.2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from antipersist_lib.consolidation import prompts as P
from antipersist_lib.consolidation.bank import MemoryBank
from antipersist_lib.consolidation.consolidator import Consolidator, normalized, unique
from antipersist_lib.consolidation.pool import PoolRecord
from antipersist_lib.errors import ReplyParseError

_WORKFLOW_HEAD = re.compile(r"^[ \t]*(?:#{1,6}[ \t]*|\*\*)?Workflow\b[^:\n]*:[ \t]*(.+?)[ \t]*(?:\*\*)?[ \t]*$", re.M)
#: the id a revised workflow's head names ("## Workflow w3: title")
_WORKFLOW_ID = re.compile(r"Workflow[ \t]+\[?([A-Za-z]+\d+)\]?[ \t]*:")
_WORKFLOW_REMOVE = re.compile(
    r"^[ \t]*(?:#{1,6}[ \t]*|\*\*)?Remove\b[^:\n]*:[ \t]*\[?([A-Za-z]+\d+)\]?[^\n]*", re.M | re.I
)
#: what an AWM update does with the memory: add new workflows only ("append", the kit's earlier reading) or
#: induce the memory again, rewriting, removing and adding workflows ("revise"; the original AWM re-induces,
#: and H.1.2 reports W1 and W7 edited between epochs)
AWM_MODES = ("revise", "append")


def parse_workflows(text: str) -> list[tuple[str, str]]:
    """(title, body) of every "## Workflow: <title>" section of a reply."""
    heads = list(_WORKFLOW_HEAD.finditer(text or ""))
    out = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        out.append((m.group(1).strip().strip("*").strip(), text[m.end() : end].strip()))
    return out


class AWM(Consolidator):
    """Agent Workflow Memory: induce workflows from successful episodes; ``mode`` says whether an update may
    rewrite and remove stored workflows (``revise``) or only append new ones (``append``).

    ``placeholders`` (e.g. ``["product", "attribute"]``) names the benchmark's own words for the prompt's
    placeholder examples; without it the prompt names none, so no benchmark's vocabulary leaks into another's."""

    name = "awm"
    kind = "workflow"
    id_prefix = "w"
    prompt_names = (
        "consolidation_awm_system",
        "consolidation_awm_induce",
        "consolidation_awm_revise",
        "consolidation_awm_placeholders_generic",
        "consolidation_awm_placeholders_named",
    )

    def __init__(self, llm: Any, *, mode: str = "append", placeholders: Sequence[str] | None = None, **kw: Any):
        super().__init__(llm, **kw)
        if mode not in AWM_MODES:
            raise ValueError(f"AWM mode must be one of {AWM_MODES}, got {mode!r}")
        if placeholders is not None and (
            isinstance(placeholders, str)
            or not placeholders
            or not all(isinstance(w, str) and re.fullmatch(r"[A-Za-z_][\w ]*", w) for w in placeholders)
        ):
            raise ValueError(f"placeholders must be a non-empty list of words (or None), got {placeholders!r}")
        self.mode = mode
        self.placeholders = None if placeholders is None else tuple(placeholders)

    def describe(self) -> dict[str, Any]:
        placeholders = list(self.placeholders) if self.placeholders is not None else None
        return {**super().describe(), "mode": self.mode, "placeholders": placeholders}

    def _placeholder_rule(self) -> str:
        if self.placeholders is None:
            return P.AWM_PLACEHOLDERS_GENERIC
        return P.AWM_PLACEHOLDERS_NAMED.format(examples=", ".join("{" + w + "}" for w in self.placeholders))

    def _apply(self, bank: MemoryBank, records: list[PoolRecord], event: dict[str, Any]) -> None:
        wins = [r for r in records if r.outcome.success]
        if not wins:
            event["skipped"].append("no successful episode in the batch: nothing to induce from")
            return
        stored = [e for e in bank.entries if e.kind == "workflow"]
        rule = self._placeholder_rule()
        if self.mode == "revise":
            listing = "\n\n".join(f"## Workflow {e.id}: {e.title}\n{e.text}" for e in stored) or P.EMPTY_MEMORY
            prompt = P.AWM_REVISE.format(workflows=listing, episodes=self._episodes(wins), placeholder_rule=rule)
        else:
            listing = "\n\n".join(f"## Workflow: {e.title}\n{e.text}" for e in stored) or P.EMPTY_MEMORY
            prompt = P.AWM_INDUCE.format(workflows=listing, episodes=self._episodes(wins), placeholder_rule=rule)
        reply = self._chat(P.AWM_SYSTEM, prompt, "induce", event)
        removed = self._remove(bank, reply, event) if self.mode == "revise" else set()
        if self.mode == "revise":
            reply = _WORKFLOW_REMOVE.sub("", reply)  # a removal line is no part of a workflow's body
        found = parse_workflows(reply)
        if not found:
            if removed or reply.strip().strip(".").upper() == "NONE":
                return
            raise ReplyParseError("no '## Workflow: <title>' section in the reply")
        if self.mode == "revise":
            found = self._revise(bank, reply, found, wins, removed, event)
        seen = {normalized(e.title + "\n" + e.text) for e in stored}
        for title, body in found:
            key = normalized(title + "\n" + body)
            if not body or key in seen:
                event["skipped"].append(f"workflow {title!r}: {'empty' if not body else 'already stored'}")
                continue
            seen.add(key)
            e = self._entry(bank, body, [r.rid for r in wins], title=title)
            bank.entries.append(e)
            event["ops"].append({"op": "add", "id": e.id})

    def _remove(self, bank: MemoryBank, reply: str, event: dict[str, Any]) -> set[str]:
        """The "## Remove: w5" lines of a revision: those workflows leave the memory."""
        removed: set[str] = set()
        for m in _WORKFLOW_REMOVE.finditer(reply):
            entry = bank.get(m.group(1).lower())
            if entry is None or entry.kind != "workflow":
                event["skipped"].append(f"remove {m.group(1)!r}: no such workflow")
                continue
            bank.entries.remove(entry)
            removed.add(entry.id)
            event["ops"].append({"op": "delete", "id": entry.id})
        return removed

    def _revise(
        self,
        bank: MemoryBank,
        reply: str,
        found: list[tuple[str, str]],
        wins: list[PoolRecord],
        removed: set[str],
        event: dict[str, Any],
    ) -> list[tuple[str, str]]:
        """Rewrite in place every workflow whose head names a stored id (it keeps its id and gains the batch
        as sources); returns the workflows that name none, to be added as new ones."""
        heads = [m.group(0) for m in _WORKFLOW_HEAD.finditer(reply)]
        new = []
        for head, (title, body) in zip(heads, found):
            m = _WORKFLOW_ID.search(head)
            if m is None:
                new.append((title, body))
                continue
            entry = bank.get(m.group(1).lower())
            if entry is None or entry.kind != "workflow" or not body:
                why = "removed in the same reply" if m.group(1).lower() in removed else "no such workflow or no body"
                event["skipped"].append(f"workflow {m.group(1)!r}: {why}")
                continue
            if normalized(entry.title + "\n" + entry.text) == normalized(title + "\n" + body):
                continue  # repeated unchanged: kept as it is
            entry.title, entry.text, entry.updated_step = title, body, bank.step
            entry.sources = unique(entry.sources + [r.rid for r in wins])
            event["ops"].append({"op": "update", "id": entry.id})
        return new
