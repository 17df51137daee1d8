"""Committed records that were damaged after their commit: rebuilt from the files that still hold them, or
named with the fix, never dropped.

A resumed run cuts every state file back to the line counts of its last journal commit (``OpenRun.recover``).
A line the journal did count may still be lost later (a copy cut short, a full disk, a hand edit), and cutting
back would then drop it silently. ``repair_committed`` runs before any cut: it rewrites lost lines of
``state/outcome_log.jsonl`` and ``state/trajectories.jsonl`` from the training episode records and from each
other. Any other lost line stops the run with ``CommittedRecordLostError`` naming the file, the line and what to
do; the torn fragment is kept beside the file as ``<name>.torn``, so no byte is destroyed. Which fact comes from
where: docs/protocol.md, "Resuming"; the failure table: docs/failures.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import (
    EMBEDDING_REF,
    EmbeddingFile,
    JsonlWriter,
    encode_embedding,
    read_jsonl,
    set_aside,
    sidecar_path,
)
from antipersist_lib.memory.outcome_log import OutcomeRecord
from antipersist_lib.memory.trajectory_store import MemoryRecord
from antipersist_lib.rundir import RunDirectory, count_lines

log = logging.getLogger(__name__)


class CommittedRecordLostError(RuntimeError):
    """A line the journal committed is damaged or missing and cannot be rebuilt from the other records."""


@dataclass(frozen=True)
class LostLines:
    """A state file holding fewer complete lines than the journal committed."""

    path: Path
    committed: int  # lines the last commit counted
    complete: int  # newline-terminated lines the file holds now

    @property
    def first_line(self) -> int:
        """The 1-based number of the first committed line that is no longer there."""
        return self.complete + 1


def lost_committed(run_dir: Path, files: Iterable[Path], committed: dict[str, int]) -> list[LostLines]:
    """The files among ``files`` with fewer complete lines than ``committed`` (the journal's last state)."""
    lost = []
    for p in files:
        want = committed.get(str(p.relative_to(run_dir)), 0)
        have = count_lines(p)
        if have < want:
            lost.append(LostLines(p, want, have))
    return lost


def _keep_fragment(path: Path, complete: int) -> Path | None:
    """Cut ``path`` back to its ``complete`` lines, setting whatever followed them aside (``jsonl.set_aside``)."""
    with open(path, "rb") as fh:
        data = fh.read()
    offset = 0
    for _ in range(complete):
        offset = data.index(b"\n", offset) + 1
    if offset == len(data):
        return None
    aside = set_aside(path, data[offset:])
    with open(path, "r+b") as fh:
        fh.truncate(offset)
        fh.flush()
        os.fsync(fh.fileno())
    return aside


def _values(path: Path) -> list[Any]:
    return [x.value for x in read_jsonl(path)]


def _train_episodes(layout: RunDirectory) -> list[dict[str, Any]]:
    return [r for r in _values(layout.episodes_path("train")) if isinstance(r, dict)]


def _same_episode(record: dict[str, Any], episode: dict[str, Any]) -> bool:
    """Whether a trajectory record stores this training episode (its task, iteration and first steps)."""
    task, ep_task = record.get("task") or {}, episode["task"]
    return (
        task.get("task_id") == ep_task.get("task_id")
        and task.get("benchmark") == ep_task.get("benchmark")
        and record.get("iteration") == episode.get("iteration")
        and record.get("trajectory") == episode.get("trajectory")
    )


def _rebuild_outcome_log(layout: RunDirectory, have: int, want: int) -> list[OutcomeRecord]:
    logged = [e for e in _train_episodes(layout) if (e.get("meta") or {}).get("logged")]
    stored = _values(layout.state_path(RunDirectory.TRAJECTORIES))
    out = []
    for i in range(have, want):
        if i >= len(logged):
            raise LookupError(f"episodes_train.jsonl holds {len(logged)} logged training episode(s), not {i + 1}")
        ep = logged[i]
        match = [r for r in stored if isinstance(r, dict) and _same_episode(r, ep) and r.get("embedding")]
        if not match:
            raise LookupError(
                f"no trajectory record with an embedding for training episode (iteration {ep['iteration']}, "
                f"position {ep['position']})"
            )
        task = ep["task"]
        entry = {
            "embedding": match[-1]["embedding"],
            "mode": ep["meta"]["mode"],
            "reward": float(ep["meta"]["reward"]),
            "raw_success": bool(ep["outcome"]["success"]),
            "task_type": task["task_type"],
            "task_id": int(task["task_id"]),
            "instruction": task["instruction"],
        }
        out.append(OutcomeRecord.from_dict(entry))
    return out


def _rebuild_trajectories(layout: RunDirectory, have: int, want: int) -> list[MemoryRecord]:
    stored = [r for r in _values(layout.state_path(RunDirectory.TRAJECTORIES)) if isinstance(r, dict)]
    episodes = _train_episodes(layout)
    # the records a run's training adds are its episodes in order, after any seeded records (M_0)
    seeded = len(stored) - sum(1 for e in episodes if any(_same_episode(r, e) for r in stored))
    log_entries = _values(layout.state_path(RunDirectory.OUTCOME_LOG))
    logged = [e for e in episodes if (e.get("meta") or {}).get("logged")]
    out = []
    next_id = (int(stored[-1]["record_id"]) + 1) if stored else 0
    for i in range(have, want):
        k = i - seeded
        if not 0 <= k < len(episodes):
            raise LookupError(f"episodes_train.jsonl holds no training episode for trajectory record {i + 1}")
        ep = episodes[k]
        meta = ep.get("meta") or {}
        if not ep.get("embedding_ok", True):
            embedding = None
        elif meta.get("logged") and logged.index(ep) < len(log_entries):
            embedding = log_entries[logged.index(ep)]["embedding"]
        else:
            raise LookupError(
                f"the embedding of training episode (iteration {ep['iteration']}, position {ep['position']}) "
                "is in no other file"
            )
        record = {
            "record_id": next_id,
            "task": ep["task"],
            "trajectory": ep["trajectory"],
            "outcome": ep["outcome"],
            "embedding": embedding,
            "parents": sorted(set(ep.get("parents") or [])),
            "iteration": ep["iteration"],
            "mode": meta.get("mode"),
        }
        out.append(MemoryRecord.from_dict(record))
        next_id += 1
    return out


#: state file name -> how its lost lines are rebuilt (layout, complete lines, committed lines): the records
REBUILDERS = {
    RunDirectory.OUTCOME_LOG: _rebuild_outcome_log,
    RunDirectory.TRAJECTORIES: _rebuild_trajectories,
}


def repair_committed(layout: RunDirectory, files: Iterable[Path], committed: dict[str, int]) -> list[str]:
    """Rebuild every committed line that ``files`` lost since the journal's last commit ``committed``;
    returns what was done, one line per file. Raises ``CommittedRecordLostError`` (naming the file, the
    line and the fix) where a lost line cannot be rebuilt; the file is then left as it was."""
    done = []
    for lost in lost_committed(layout.path, files, committed):
        rel = lost.path.relative_to(layout.path)
        rebuild = REBUILDERS.get(lost.path.name)
        why = f"the kit cannot rebuild {lost.path.name} lines from other records"
        records = None
        if rebuild is not None:
            try:
                records = rebuild(layout, lost.complete, lost.committed)
            except (LookupError, KeyError, TypeError, ValueError) as exc:
                why = str(exc)
        if records is None:
            raise CommittedRecordLostError(
                f"{lost.path}: line {lost.first_line} (of {lost.committed} that the journal committed) is "
                f"damaged or missing, and {why}. Nothing was changed. Restore {rel} from a copy of the run "
                "and run the same command again; or move the run folder away to start the run afresh."
            )
        aside = _keep_fragment(lost.path, lost.complete)
        # each line names its embedding in the binary file beside the journal: the entry goes in first
        # (a no-op where the file still holds it), as the store itself writes them
        embeddings = EmbeddingFile(sidecar_path(lost.path))
        try:
            embeddings.open_for_append()
            for rec in records:
                if rec.embedding is not None:
                    embeddings.put(rec.embedding)
        finally:
            embeddings.close()
        with JsonlWriter(lost.path) as writer:
            for rec in records:
                writer.append(rec.to_dict())  # written as the store writes it
        note = f"; the damaged bytes are kept in {aside.name}" if aside is not None else ""
        message = (
            f"{rel}: rebuilt {len(records)} committed line(s) from line {lost.first_line} on, from the run's "
            f"other records{note}"
        )
        log.warning("%s", message)
        done.append(message)
    return done


def repair_embeddings(layout: RunDirectory, files: Iterable[Path]) -> list[str]:
    """Put back the embedding entries that lines of ``files`` name but their ``.emb`` file lost (a copy cut
    short, a damaged stretch), taking each from the other store's ``.emb``: an entry is named by a digest of
    its bytes, so one embedding has one name in both files. Call it after the cut back to the last commit,
    so every line it checks is committed. Raises ``CommittedRecordLostError`` (naming the file and the fix)
    where no file holds an entry; what was put back before stays, and is correct."""
    journals = [p for p in files if p.name in REBUILDERS and p.exists()]
    sidecars = {p: EmbeddingFile(sidecar_path(p)) for p in journals}
    done = []
    try:
        for path in journals:
            own = sidecars[path]
            named = (x.value.get(EMBEDDING_REF) for x in read_jsonl(path, inline_embeddings=False))
            missing = [ref for ref in dict.fromkeys(named) if isinstance(ref, str) and ref not in own]
            if not missing:
                continue
            own.open_for_append()
            for ref in missing:
                source = next((f for q, f in sidecars.items() if q != path and ref in f), None)
                vec = source.get(ref) if source is not None else None
                if vec is None:
                    rel = own.path.relative_to(layout.path)
                    raise CommittedRecordLostError(
                        f"{path}: a committed line names embedding {ref}, which {rel} no longer holds and no other "
                        f"file of the run does. Restore {rel} from a copy of the run and run the same command "
                        "again; or move the run folder away to start the run afresh."
                    )
                again, entry = encode_embedding(vec)
                if again != ref:  # pragma: no cover - the encoding is a function of the bytes
                    raise RuntimeError(f"{source.path}: entry {ref} re-encodes as {again}")
                own.put_entry(ref, entry)
            message = (
                f"{own.path.relative_to(layout.path)}: put back {len(missing)} embedding entr"
                f"{'y' if len(missing) == 1 else 'ies'} that committed lines name, from the run's other store"
            )
            log.warning("%s", message)
            done.append(message)
    finally:
        for f in sidecars.values():
            f.close()
    return done
