"""WebShop goals and the paper's task partition (D.1).

Task partition (paper D.1): ``build_webshop_partition`` reads the user's goal file; held-out
is goal indices 0..99 and training 200 indices drawn with ``random.Random(seed)`` from the
rest (see its docstring for the accepted goal-file formats).

``_same_goal`` is how the adapter (``antipersist_lib.envs.webshop.client``) checks that the
site's instruction for a goal is the partition's (the site appends a price clause).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from antipersist_lib.envs.partitions import PAPER_COUNTS, PARTITION_SEED
from antipersist_lib.records import Partition, Task

#: goals in WebShop's human-instruction set (paper D.1)
PAPER_N_GOALS = 12087
N_HELDOUT = PAPER_COUNTS["webshop"]["heldout"]
N_TRAIN = PAPER_COUNTS["webshop"]["train"]
#: WebShop's site shuffles its goal list with ``random.seed(233)`` before indexing it
WEBSHOP_GOAL_SHUFFLE_SEED = 233


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
    "build_webshop_partition",
    "draw_webshop_split",
    "load_webshop_goals",
)
