"""Fixed task partitions (paper Table 4, Appendix D.1), stored as data files in the kit.

Every method, seed and iteration uses the same training and held-out tasks, drawn once with a fixed
seed by the adapters' ``build_*`` functions and committed as
``antipersist_lib/data/partitions/<benchmark>.json``; ``partition_hash`` goes into every run manifest.
``ANTIPERSIST_PARTITIONS`` names a folder searched first (and written by ``save_partition``);
WebShop's and AppWorld's partitions are built by the user (``BUILD_COMMANDS``). Named held-out sets
(``HELDOUT_SETS``, ``RunSpec.heldout_set``) change only what is evaluated.

docs/benchmarks.md, "Partition files", documents the file format, the meaning of ``task_id``,
ErrandWorld and the held-out sets.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

from antipersist_lib.records import Partition

#: Table 4 counts, checked by the tests against the committed files.
PAPER_COUNTS: dict[str, dict[str, int]] = {
    "alfworld": {"train": 180, "heldout": 134},
    "webshop": {"train": 200, "heldout": 100},
    "scienceworld": {"train": 150, "heldout": 60},
}
PARTITION_SEED = 42


#: how to (re)build each benchmark's partition file
BUILD_COMMANDS = {
    "webshop": "python -m antipersist_lib partition webshop --goals <your WebShop instruction file (human_goals.json or items_human_ins.json)>",
    "appworld": "python -m antipersist_lib partition appworld",
    "alfworld": "python -m antipersist_lib partition alfworld",
    "scienceworld": "python -m antipersist_lib partition scienceworld",
    "textworld_express": "python -m antipersist_lib partition textworld_express",
}


#: named held-out sets a run may evaluate on instead of the partition's held-out split, per benchmark
HELDOUT_SETS: dict[str, tuple[str, ...]] = {"alfworld": ("valid_seen_balanced_48", "valid_unseen_balanced_50")}


def partition_dirs() -> list[Path]:
    """Where partition files are looked for, in order: ``$ANTIPERSIST_PARTITIONS``, then the kit's."""
    kit = Path(str(resources.files("antipersist_lib") / "data" / "partitions"))
    env = os.environ.get("ANTIPERSIST_PARTITIONS")
    return [Path(env), kit] if env else [kit]


def partition_path(benchmark: str) -> Path:
    """The first existing ``<benchmark>.json`` of ``partition_dirs()``, else where it would be written."""
    dirs = partition_dirs()
    return next(
        (d / f"{benchmark}.json" for d in dirs if (d / f"{benchmark}.json").exists()), dirs[0] / f"{benchmark}.json"
    )


def heldout_set_path(benchmark: str, name: str) -> Path:
    """The file of the held-out set ``name`` of ``benchmark``; an unknown name is an error naming the known ones."""
    check_heldout_set(benchmark, name)
    return partition_path(f"{benchmark}.{name}")


def check_heldout_set(benchmark: str, name: str | None) -> None:
    """None (the partition's own held-out split) or one of ``HELDOUT_SETS[benchmark]``."""
    known = HELDOUT_SETS.get(benchmark, ())
    if name is not None and name not in known:
        raise ValueError(
            f"heldout_set: {benchmark!r} has no held-out set {name!r}; "
            f"known: {list(known) or 'none'} (null: the partition's own held-out split)"
        )


def load_partition(
    benchmark: str, path: str | os.PathLike[str] | None = None, *, heldout_set: str | None = None
) -> Partition:
    """The committed partition of ``benchmark`` (or one at ``path``); a missing file raises
    FileNotFoundError naming the file and the command that builds it. With ``heldout_set`` its held-out split
    is that set's tasks (``drawn_with["heldout_set"]`` says how they were drawn); the training split is kept."""
    if heldout_set is not None:
        base = load_partition(benchmark, path)
        alt_path = heldout_set_path(benchmark, heldout_set)
        if not alt_path.exists():
            raise FileNotFoundError(
                f"no held-out set {heldout_set!r} for {benchmark!r} at {alt_path}. "
                f"Build it with `{BUILD_COMMANDS[benchmark]} --heldout-set {heldout_set}`."
            )
        alt = Partition.from_dict(json.loads(alt_path.read_text(encoding="utf-8")))
        if alt.benchmark != benchmark:
            raise ValueError(f"{alt_path} holds a held-out set of {alt.benchmark!r}, not {benchmark!r}")
        drawn = {**base.drawn_with, "heldout_set": {"name": heldout_set, **alt.drawn_with}}
        return Partition(benchmark, base.seed, drawn, base.train, alt.heldout, f"{base.notes} {alt.notes}".strip())
    if benchmark == "errandworld" and path is None:
        # the test world is generated (12 training / 6 held-out tasks); a file in $ANTIPERSIST_PARTITIONS alone
        # (never the kit's folder) sizes it otherwise, e.g. perf.rehearsal's paper-sized pools
        env = os.environ.get("ANTIPERSIST_PARTITIONS")
        if not env or not (Path(env) / "errandworld.json").exists():
            from antipersist_lib.envs.errand_world import partition as errand_partition

            return errand_partition()
        path = Path(env) / "errandworld.json"
    p = Path(path) if path is not None else partition_path(benchmark)
    if not p.exists():
        where = " or ".join(str(d / f"{benchmark}.json") for d in partition_dirs()) if path is None else str(p)
        build = f" Build it with `{BUILD_COMMANDS[benchmark]}`." if benchmark in BUILD_COMMANDS else ""
        raise FileNotFoundError(f"no partition file for {benchmark!r} at {where}.{build}")
    part = Partition.from_dict(json.loads(p.read_text(encoding="utf-8")))
    if part.benchmark != benchmark:
        raise ValueError(f"{p} holds the partition of {part.benchmark!r}, not {benchmark!r}")
    return part


def save_partition(part: Partition, path: str | os.PathLike[str] | None = None) -> Path:
    p = Path(path) if path is not None else partition_dirs()[0] / f"{part.benchmark}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(part.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return p
