"""Seed a method's trajectory store with a fixed set of trajectories before it sees any task.

The faulty-memories study compares memory designs on one fixed trajectory pool (expert replays).
For the kit's trajectory-keeping methods (Anti-Persistence, trajectory memory) to stand beside the
consolidators on the same data, their store M_0 can start from that pool instead of empty
(method parameter ``seed_pool``). The file is the pool's JSONL: one ``{"task", "trajectory",
"outcome"}`` object per line (extra keys such as the pool's ``rid`` are ignored).

Seeded records carry ``iteration=0`` (training iterations are 1-based), no mode, and the same
retrieval embedding a trained record gets (``embed_text`` of instruction and initial
observation). They are written by ``Method.begin()``, after the protocol's crash recovery: a
seed interrupted before the run's first journal commit is cut back to nothing and redone whole.
Only Anti-Persistence's M_k is seeded; its outcome log L_k still starts empty, since a replayed
trajectory was produced under no mode and earns no mode a reward.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.memory.trajectory_store import TrajectoryStore
from antipersist_lib.records import EpisodeOutcome, Task, Trajectory
from antipersist_lib.serving.embeddings import embed_text

#: the iteration number seeded records carry (training iterations start at 1)
SEED_ITERATION = 0


@dataclass(frozen=True)
class SeedRecord:
    task: Task
    trajectory: Trajectory
    outcome: EpisodeOutcome


def read_seed_records(path: str | Path) -> list[SeedRecord]:
    """Every record of a seed file; raises with the file and line when one is malformed."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise FileNotFoundError(f"seed_pool: cannot read {path}: {exc}") from None
    out: list[SeedRecord] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            out.append(
                SeedRecord(
                    Task.from_dict(d["task"]),
                    Trajectory.from_dict(d["trajectory"]),
                    EpisodeOutcome.from_dict(d["outcome"]),
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"seed_pool {path} line {n}: expected an object with task, trajectory and outcome ({exc!r})"
            ) from None
    if not out:
        raise ValueError(f"seed_pool {path} holds no records")
    return out


def check_seed_pool(value: Any) -> str | None:
    """The ``seed_pool`` parameter as a path string (None: no seeding); the file must exist."""
    if value is None or value == "":
        return None
    if not isinstance(value, (str, Path)):
        raise ValueError(f"seed_pool must be a path to a pool JSONL file, got {value!r}")
    if not Path(value).is_file():
        raise ValueError(f"seed_pool: no such file {str(value)!r}")
    return str(value)


def seed_store(store: TrajectoryStore, path: str | Path, embedder: Any, *, prefix_chars: int) -> int:
    """Add the seed file's records that the store does not hold yet; returns how many were added.

    Idempotent on resume: the store's records with ``iteration == 0`` are the seeds already written,
    in file order, so only the rest are added (one embedding request for all of them)."""
    records = read_seed_records(path)
    done = sum(1 for r in store if r.iteration == SEED_ITERATION)
    todo = records[done:]
    if not todo:
        return 0
    texts = [embed_text(r.task.instruction, r.trajectory.initial_observation, prefix_chars) for r in todo]
    vectors = embedder.embed_many(texts, tags={"phase": "seed", "iteration": SEED_ITERATION})
    for r, vec in zip(todo, vectors):
        store.add(r.task, r.trajectory, r.outcome, embedding=vec, iteration=SEED_ITERATION)
    return len(todo)
