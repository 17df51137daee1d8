"""Dynamic Cheatsheet (§3, §4.2): each update rewrites the whole cheatsheet.

Kit choices where the paper is silent (its appendix gives roles, not prompts or update rules):

* DC: the whole cheatsheet is replaced by the model's rewrite; it cites every source of the
  sheet it replaces plus the batch.
"""

from __future__ import annotations

import re
from typing import Any

from antipersist_lib.consolidation import prompts as P
from antipersist_lib.consolidation.bank import MemoryBank
from antipersist_lib.consolidation.consolidator import Consolidator
from antipersist_lib.consolidation.pool import PoolRecord
from antipersist_lib.errors import ReplyParseError

_CHEATSHEET = re.compile(r"<cheatsheet>(.*?)</cheatsheet>", re.S | re.I)


class DynamicCheatsheet(Consolidator):
    """Cumulative rewrite: each update replaces the whole cheatsheet with the model's new one."""

    name = "dc"
    kind = "cheatsheet"
    id_prefix = "cs"
    prompt_names = ("consolidation_dc_system", "consolidation_dc_rewrite")

    def _apply(self, bank: MemoryBank, records: list[PoolRecord], event: dict[str, Any]) -> None:
        sheets = [e for e in bank.entries if e.kind == "cheatsheet"]
        current = "\n\n".join(e.text for e in sheets) or P.EMPTY_MEMORY
        reply = self._chat(
            P.DC_SYSTEM, P.DC_REWRITE.format(cheatsheet=current, episodes=self._episodes(records)), "rewrite", event
        )
        m = _CHEATSHEET.search(reply)
        if m is None or not m.group(1).strip():
            raise ReplyParseError("no non-empty <cheatsheet>...</cheatsheet> in the reply")
        sources = [s for e in sheets for s in e.sources] + [r.rid for r in records]
        bank.entries = [e for e in bank.entries if e.kind != "cheatsheet"]
        e = self._entry(bank, m.group(1), sources)
        bank.entries.append(e)
        event["ops"].append({"op": "rewrite", "id": e.id, "replaced": [s.id for s in sheets]})
