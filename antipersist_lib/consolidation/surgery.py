"""Memory surgery on a consolidated bank (faulty-memories App. I.1, Tables 12 and 13).

The paper removes one workflow (W8) from an AWM memory built on WebShop and compares outcomes (Table 12) and
action categories (Table 13) with and without it. The kit does this for any bank of a consolidation study: the
profile's ``surgery`` block names a build, a step and the entries to remove; the study evaluates the full bank
and each edited bank on the same held-out tasks and seeds (``study._run_surgery``). This module holds the bank
edit, the action categories and the tables.

Categories (I.1's six for WebShop, product-page tabs as "other click", other benchmarks by verb) and the kit's
choices: docs/faulty-memories.md, "Memory surgery on a consolidated bank".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.consolidation.bank import MemoryBank
from antipersist_lib.rundir import RunDirectory

#: the full bank's row label (the other rows are "minus <entry id>")
FULL = "full"
SURGERY_DIR = "surgery"
#: WebShop's action categories (App. I.1's six, Table 13's rows), named and ordered as the paper prints them
WEBSHOP_CATEGORIES = ("search", "click ASIN", "click variant", "click [Next >]", "click back", "click [Buy Now]")
#: Table 13's last row: the episodes that issued at least one click [Buy Now]
BUY_NOW_EPISODES = "Buy Now (eps)"
#: a product page's tabs: clicks that are none of I.1's six categories
WEBSHOP_TABS = ("description", "features", "reviews", "attributes")


def without(bank: MemoryBank, entry_id: str) -> MemoryBank:
    """A copy of ``bank`` without the entry ``entry_id``; an unknown id is an error naming the bank's ids."""
    if entry_id not in bank.ids:
        raise KeyError(f"no entry {entry_id!r} in this memory; it holds {bank.ids}")
    out = bank.copy()
    out.entries = [e for e in out.entries if e.id != entry_id]
    out.meta = {**out.meta, "surgery": {"removed": entry_id}}
    return out


def memory_label(removed: str | None) -> str:
    return FULL if removed is None else f"minus {removed}"


def webshop_category(action: str) -> str:
    """Table 13's category of one WebShop action (``search[...]``, ``click[...]``)."""
    a = action.strip().lower()
    if a.startswith("search"):
        return "search"
    m = re.fullmatch(r"click\s*\[(.*)\]", a)
    if not m:
        return "other"
    target = m.group(1).strip()
    if target.startswith(("next", "< prev", "prev")):  # I.1: "< Prev" counts with the page turns
        return "click [Next >]"
    if target == "buy now":
        return "click [Buy Now]"
    if target.startswith("back to search"):
        return "click back"
    if re.fullmatch(r"b[0-9a-z]{9}", target):  # a result's ASIN
        return "click ASIN"
    if target in WEBSHOP_TABS:
        return "other click"
    return "click variant"


def action_category(benchmark: str, action: str) -> str:
    """The category of an action: WebShop's Table 13 categories, else the action's first word."""
    if not action or not action.strip():
        return "(no command)"
    if benchmark == "webshop":
        return webshop_category(action)
    return action.strip().split()[0].lower()


def episode_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """The last iteration's held-out episodes of a run: outcome and every action."""
    episodes = RunDirectory(Path(run_dir)).read_episodes("heldout")
    last = max((e.get("iteration", 1) for e in episodes), default=1)
    return [e for e in episodes if e.get("iteration", 1) == last]


def outcome_table(rows: Sequence[dict[str, Any]], roots: Iterable[str | Path]) -> pd.DataFrame:
    """Table 12's shape: per memory (full, minus each entry), summed over seeds: wins of n episodes, mean reward
    (score), mean steps and the episodes that hit the step cap. ``rows`` are the study's surgery rows
    (``study.load_surgery``), ``roots`` the study folders their ``run_dir`` paths are relative to."""
    roots = [Path(r) for r in roots]
    out = []
    for memory, members in _by_memory(rows).items():
        episodes = [e for r in members for e in episode_rows(_resolve(r["run_dir"], roots))]
        if not episodes:
            continue
        n = len(episodes)
        out.append(
            {
                "memory": memory,
                "removed": members[0].get("removed"),
                "entries": members[0].get("entries"),
                "n": n,
                "wins": sum(bool(e["outcome"].get("success")) for e in episodes),
                "mean_reward": sum(float(e["outcome"].get("score", 0.0)) for e in episodes) / n,
                "mean_steps": sum(int(e["outcome"].get("n_steps", 0)) for e in episodes) / n,
                "cap_hits": sum(bool(e["outcome"].get("over_budget")) for e in episodes),
            }
        )
    cols = ["memory", "removed", "entries", "n", "wins", "mean_reward", "mean_steps", "cap_hits"]
    frame = pd.DataFrame(out, columns=cols)
    if frame.empty:
        return frame
    full = frame[frame["memory"] == FULL]
    if not full.empty:
        frame["delta_wins"] = frame["wins"] - int(full["wins"].iloc[0])
    return frame


def action_table(rows: Sequence[dict[str, Any]], roots: Iterable[str | Path], benchmark: str) -> pd.DataFrame:
    """Table 13's shape: action counts per category for each memory, summed over seeds and episodes, with the
    number of episodes that issued at least one click [Buy Now] (WebShop) and the page-turn share of all
    actions."""
    roots = [Path(r) for r in roots]
    out = []
    for memory, members in _by_memory(rows).items():
        counts: Counter[str] = Counter()
        bought = 0
        for r in members:
            for e in episode_rows(_resolve(r["run_dir"], roots)):
                cats = [action_category(benchmark, s.get("action", "")) for s in e["trajectory"]["steps"]]
                counts.update(cats)
                bought += "click [Buy Now]" in cats
        total = sum(counts.values())
        row: dict[str, Any] = {"memory": memory, "actions": total}
        order = list(WEBSHOP_CATEGORIES) if benchmark == "webshop" else sorted(counts)
        for c in order + sorted(set(counts) - set(order)):
            row[c] = counts.get(c, 0)
        if benchmark == "webshop":
            row[BUY_NOW_EPISODES] = bought
            row["page-turn share"] = counts["click [Next >]"] / total if total else None
        out.append(row)
    if not out:
        return pd.DataFrame(columns=["memory", "actions"])
    frame = pd.DataFrame(out)
    counts_cols = [c for c in frame.columns if c not in ("memory", "page-turn share")]
    frame[counts_cols] = frame[counts_cols].fillna(0).astype(int)  # a category one memory never used: 0 actions
    return frame


def _by_memory(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r.get("removed") is not None, str(r.get("removed") or ""))):
        grouped.setdefault(memory_label(r.get("removed")), []).append(r)
    return grouped


def _resolve(run_dir: str, roots: list[Path]) -> Path:
    for root in roots:
        if (root / run_dir).exists():
            return root / run_dir
    return Path(run_dir)
