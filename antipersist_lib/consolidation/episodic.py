"""The episodic-only baselines of Tables 2-3: "Trajectory Logs (Summarized)".

They consume the same pool as the consolidators but never abstract across episodes: each entry
is one summarized trajectory (``pool.summarize_trajectory``). All keeps every record; FS=N a
seeded uniform sample of N; Incr. Keep streams batches past the model, which answers keep or
delete for each new log (and may delete kept ones); One-Pass Keep is the same curator given the
whole pool in a single call (the ``static_all`` regime).

Kit choices: the curator sees kept logs by their header lines only (task, outcome), new logs in
full; a new log the model gives no decision for is dropped and logged, a kept log it does not
mention stays. The sample of FS=N is listed in pool order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from antipersist_lib.consolidation import prompts as P
from antipersist_lib.consolidation.bank import MemoryBank
from antipersist_lib.consolidation.consolidator import Consolidator
from antipersist_lib.consolidation.pool import PoolRecord, check_pool, summarize_trajectory
from antipersist_lib.replies import excerpt, extract_json

#: characters of each log kept in the bank (the agent reads these in full)
LOG_CHARS = 4000
#: ``log_chars`` value that stores each log at the builder's ``summary_chars``, the size a consolidator reads
#: (§4.2: the trajectory baseline "stores the same experience" the consolidators compress)
AS_SUMMARY = "summary"


class _Logs(Consolidator):
    kind = "trajectory"
    id_prefix = "t"

    def __init__(self, llm: Any = None, *, log_chars: int | str = LOG_CHARS, **kw: Any) -> None:
        super().__init__(llm, **kw)
        if log_chars == AS_SUMMARY:
            log_chars = self.summary_chars
        if isinstance(log_chars, bool) or not isinstance(log_chars, int) or log_chars < 200:
            raise ValueError(f"log_chars must be an integer >= 200 or {AS_SUMMARY!r}, got {log_chars!r}")
        self.log_chars = log_chars

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "log_chars": self.log_chars}

    def _log(self, bank: MemoryBank, record: PoolRecord) -> None:
        e = self._entry(bank, summarize_trajectory(record, self.log_chars), [record.rid], title=record.task_type)
        bank.entries.append(e)


class AllLogs(_Logs):
    """Every record, appended (no model)."""

    name = "all"
    needs_llm = False

    def _apply(self, bank: MemoryBank, records: list[PoolRecord], event: dict[str, Any]) -> None:
        for r in records:
            self._log(bank, r)
        event["ops"].append({"op": "add", "n": len(records)})


class FewShot(_Logs):
    """FS=N: a seeded sample of N records of the whole pool (use it with ``static_all``)."""

    needs_llm = False

    def __init__(self, n: int, seed: int = 0, **kw: Any) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"FS=N needs an integer N >= 1, got {n!r}")
        self.name = f"fs{n}"
        super().__init__(None, **kw)
        self.n, self.seed = n, int(seed)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "n": self.n, "seed": self.seed}

    def _apply(self, bank: MemoryBank, records: list[PoolRecord], event: dict[str, Any]) -> None:
        if bank.entries:
            raise ValueError("FS=N downsamples the whole pool once: build it with the static_all regime")
        if self.n > len(records):
            raise ValueError(f"FS={self.n} asks for more shots than the {len(records)} records given")
        picked = set(random.Random(self.seed).sample(range(len(records)), self.n))
        for i, r in enumerate(records):
            if i in picked:
                self._log(bank, r)
        event["ops"].append({"op": "sample", "n": self.n, "seed": self.seed})


class KeepCurator(_Logs):
    """The model answers keep or delete per log; kept logs accumulate (Incr. / One-Pass Keep).

    ``capped=False`` (the paper profile): a capped stream's FIFO eviction does not touch the kept logs,
    since the paper gives Keep no cap (Tables 2-3: its delete decisions alone bound it)."""

    name = "keep"
    prompt_names = ("consolidation_keep_system", "consolidation_keep_decide")

    def __init__(self, llm: Any = None, *, capped: bool = True, **kw: Any) -> None:
        super().__init__(llm, **kw)
        if not isinstance(capped, bool):
            raise ValueError(f"capped must be true or false, got {capped!r}")
        self.capped = capped

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "capped": self.capped}

    def _apply(self, bank: MemoryBank, records: list[PoolRecord], event: dict[str, Any]) -> None:
        kept = [e for e in bank.entries if e.kind == "trajectory"]
        kept_text = "\n".join(f"[{e.id}] " + " | ".join(e.text.splitlines()[:3]) for e in kept) or P.EMPTY_MEMORY
        new_text = "\n\n".join(
            f"### n{i}\n{summarize_trajectory(r, self.summary_chars)}" for i, r in enumerate(records, start=1)
        )
        reply = self._chat(P.KEEP_SYSTEM, P.KEEP_DECIDE.format(kept=kept_text, new=new_text), "decide", event)
        decisions = {str(k).strip(): _decision(v) for k, v in extract_json(reply, dict).items()}
        kept_ids = {e.id for e in kept}
        new_keys = {f"n{i}" for i in range(1, len(records) + 1)}
        for key, verdict in decisions.items():
            if verdict is None or (key not in kept_ids and key not in new_keys):
                event["skipped"].append(f"decision {excerpt(key, 60)}: {verdict or 'not keep/delete'}")
            elif key in kept_ids and verdict == "delete":
                bank.entries = [e for e in bank.entries if e.id != key]
                event["ops"].append({"op": "delete", "id": key})
        for i, r in enumerate(records, start=1):
            verdict = decisions.get(f"n{i}")
            if verdict == "keep":
                self._log(bank, r)
                event["ops"].append({"op": "keep", "rid": r.rid})
            elif verdict == "delete":
                event["ops"].append({"op": "drop", "rid": r.rid})
            else:
                event["skipped"].append(f"n{i}: no keep/delete decision (dropped)")


def _decision(value: Any) -> str | None:
    word = str(value).strip().lower() if not isinstance(value, bool) else ("keep" if value else "delete")
    if word in ("keep", "retain", "yes"):
        return "keep"
    if word in ("delete", "remove", "drop", "discard", "no"):
        return "delete"
    return None


# -- one-call builders ---------------------------------------------------------------------------


def all_logs(pool: Sequence[PoolRecord], *, log_chars: int = LOG_CHARS) -> MemoryBank:
    """Trajectory Logs (Summarized), All: every record of the pool."""
    return AllLogs(log_chars=log_chars).update(MemoryBank("all"), check_pool(pool))


def few_shot(pool: Sequence[PoolRecord], n: int, seed: int, *, log_chars: int = LOG_CHARS) -> MemoryBank:
    """FS=N: a seeded sample of N records (the same seed gives the same shots)."""
    builder = FewShot(n, seed, log_chars=log_chars)
    return builder.update(MemoryBank(builder.name), check_pool(pool))


def one_pass_keep(pool: Sequence[PoolRecord], llm: Any, **kw: Any) -> MemoryBank:
    """One-Pass Keep: one keep/delete call over the whole pool."""
    return KeepCurator(llm, **kw).update(MemoryBank("keep"), check_pool(pool))
