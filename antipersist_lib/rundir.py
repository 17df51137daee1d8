"""A run directory: one (method, backbone, benchmark, seed) cell, resumable after any crash.

``RunDirectory`` is the one place the directory's file names are defined (manifest, journal, episode records,
call ledger, ``state/``, ``snapshots/``, ``demonstrations/``, summary, ``run.lock``) and reads them back;
``RunDirectory(path).open()`` takes a run for writing as an ``OpenRun`` (lock, manifest, journal, recovery).
What each file holds: docs/protocol.md, "Run directories"; how a run resumes: "Resuming".

Crash safety: a training episode writes its state files first, then its episode record, then its journal line,
which holds every state file's line count. On resume each state file is cut back to the counts of the last
journal line, so a half-finished episode leaves no trace and runs again, and no finished episode is lost or
repeated. Held-out episodes run on frozen state: each finished one is kept and only missing ones run.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antipersist_lib.errors import ManifestMismatchError, RunLockedError
from antipersist_lib.jsonl import JsonlWriter, atomic_write_json, read_jsonl
from antipersist_lib.paths import safe_file_name
from antipersist_lib.records import PHASES

log = logging.getLogger(__name__)


def count_lines(path: Path) -> int:
    """Complete (newline-terminated) lines in a file; 0 when it does not exist."""
    if not path.exists():
        return 0
    n = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            n += chunk.count(b"\n")
    return n


def truncate_lines(path: Path, n: int) -> int:
    """Cut ``path`` back to its first ``n`` complete lines; returns the number of lines dropped
    (a torn final fragment counts as one)."""
    if not path.exists():
        return 0
    offset = kept = dropped = 0
    with open(path, "rb") as fh:
        for raw in fh:
            if kept < n and raw.endswith(b"\n"):
                offset += len(raw)
                kept += 1
            else:
                dropped += 1
    if dropped == 0:
        return 0
    with open(path, "r+b") as fh:
        fh.truncate(offset)
        fh.flush()
        os.fsync(fh.fileno())
    log.warning("%s: dropped %d uncommitted line(s) left by an interrupted run", path, dropped)
    return dropped


@dataclass
class JournalState:
    """What the journal says is committed."""

    train_done: set[tuple[int, int]] = field(default_factory=set)  # (iteration, position)
    iterations_ended: set[int] = field(default_factory=set)
    last_state: dict[str, int] = field(default_factory=dict)


class RunDirectory:
    """The layout of one run directory: every file name in it is defined here, and nowhere else.

    Creating one touches nothing, so analysis code can ask it for paths and read a finished run;
    ``open()`` takes the directory for writing (an exclusive lock held until ``close``).
    """

    MANIFEST = "manifest.json"
    JOURNAL = "journal.jsonl"
    CALLS = "calls.jsonl"
    SUMMARY = "summary.json"
    LOCK = "run.lock"
    STATE = "state"
    SNAPSHOTS = "snapshots"
    #: beside the snapshots: their abstractions' embeddings, each once (``abstraction_store.read_snapshot``)
    SNAPSHOT_EMBEDDINGS = "abstractions.emb"
    DEMONSTRATIONS = "demonstrations"  # expert replays for icl_examples when the run has no cache_dir
    #: the stores' files inside ``state/`` (each method lists its own in ``Method.state_files``)
    TRAJECTORIES = "trajectories.jsonl"
    OUTCOME_LOG = "outcome_log.jsonl"
    #: their task embeddings, each entry named by a line of its journal (``jsonl.sidecar_path``); not
    #: line files, so not in ``state_files``: a line cut back on resume leaves its entry unnamed, and
    #: the rerun episode names it again
    TRAJECTORY_EMBEDDINGS = "trajectories.emb"
    OUTCOME_LOG_EMBEDDINGS = "outcome_log.emb"
    ABSTRACTIONS = "abstractions"  # an AbstractionStore folder
    ABSTRACTION_EVENTS = "abstractions/events.jsonl"  # its journal (abstraction_store.EVENTS_FILE)
    #: every synthesis invocation of a run that reads planted signatures (core/planted.py): P(H), the
    #: signatures its text carries, and whether it was admitted to S_k
    CANDIDATES = "candidates.jsonl"
    #: an LLM judge's second reading of the stored candidates' texts against the planted toxic rules, written
    #: after the run (``rule_judge.py``): one file per judge, ``judge_readings/<judge label>.jsonl``
    JUDGE_READINGS = "judge_readings"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    # -- file names -------------------------------------------------------------------------

    @property
    def manifest_path(self) -> Path:
        return self.path / self.MANIFEST

    @property
    def journal_path(self) -> Path:
        return self.path / self.JOURNAL

    @property
    def calls_path(self) -> Path:
        return self.path / self.CALLS

    @property
    def summary_path(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def lock_path(self) -> Path:
        return self.path / self.LOCK

    @property
    def state_dir(self) -> Path:
        return self.path / self.STATE

    @property
    def snapshot_dir(self) -> Path:
        return self.path / self.SNAPSHOTS

    @property
    def demonstrations_dir(self) -> Path:
        return self.path / self.DEMONSTRATIONS

    def episodes_path(self, phase: str) -> Path:
        """``episodes_train.jsonl`` or ``episodes_heldout.jsonl``."""
        if phase not in PHASES:
            raise ValueError(f"phase is {phase!r}, expected one of {PHASES}")
        return self.path / f"episodes_{phase}.jsonl"

    def state_path(self, name: str) -> Path:
        """A store's file under ``state/`` (e.g. ``RunDirectory.OUTCOME_LOG``)."""
        return self.state_dir / name

    def snapshot_path(self, iteration: int) -> Path:
        """Where a method writes its abstraction store after ``iteration`` (one name for every
        method, so the provenance audit and frozen-layer loading find any method's snapshots)."""
        return self.snapshot_dir / f"abstractions_iter_{iteration:02d}.json"

    @property
    def snapshot_embeddings_path(self) -> Path:
        return self.snapshot_dir / self.SNAPSHOT_EMBEDDINGS

    def judge_readings_path(self, judge: str) -> Path:
        """The readings file of the judge labelled ``judge`` (a model label, made a file name)."""
        return self.path / self.JUDGE_READINGS / f"{safe_file_name(judge)}.jsonl"

    def judge_readings_paths(self) -> list[Path]:
        """Every judge's readings file, by name."""
        return sorted((self.path / self.JUDGE_READINGS).glob("*.jsonl"))

    def snapshot_paths(self) -> list[Path]:
        """The abstraction snapshots in iteration order."""
        return sorted(self.snapshot_dir.glob("abstractions_iter_*.json"))

    # -- reading a run ----------------------------------------------------------------------

    def is_run(self) -> bool:
        return self.manifest_path.is_file()

    def read_manifest(self) -> dict[str, Any]:
        if not self.is_run():
            raise FileNotFoundError(f"{self.path} is not a run directory (no {self.MANIFEST})")
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))

    def read_episodes(self, phase: str) -> list[dict[str, Any]]:
        """The episode records of one phase, in file order (none when the file does not exist)."""
        return [x.value for x in read_jsonl(self.episodes_path(phase))]

    def heldout_done(self) -> set[tuple[int, int]]:
        """(iteration, position) of every finished held-out episode."""
        return {
            (int(x.value["iteration"]), int(x.value["position"]))
            for x in read_jsonl(self.episodes_path("heldout"))
            if isinstance(x.value, dict) and "iteration" in x.value and "position" in x.value
        }

    def is_complete(self) -> bool:
        """Whether every held-out episode of every iteration its manifest names is recorded (a finished run;
        a run still being made, or stopped, is not). Manifests without those counts are taken as complete."""
        man = self.read_manifest()
        iterations, n_heldout = man.get("iterations"), man.get("n_heldout")
        if iterations is None or n_heldout is None:
            return True
        done = self.heldout_done()
        return all((it, j) in done for it in range(1, int(iterations) + 1) for j in range(int(n_heldout)))

    def open(self) -> OpenRun:
        """Take the directory for writing (creates it; ``RunLockedError`` when another process holds it)."""
        return OpenRun(self)

    def check_resumable(self, manifest: dict[str, Any], identity_keys: Iterable[str]) -> None:
        """Before anything is asked of a model: an existing run held by another process raises
        ``RunLockedError``, one with another identity ``ManifestMismatchError`` (``OpenRun`` checks both again
        when it takes the folder). Writes nothing; a folder that is not a run yet passes."""
        if self.lock_path.exists():
            with open(self.lock_path) as fh:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise RunLockedError(_locked_message(self.path, fh.read().strip())) from None
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        if self.manifest_path.exists():
            _check_identity(self.path, self.read_manifest(), manifest, identity_keys)


class OpenRun:
    """A run directory held by this process (exclusive lock): manifest, journal, crash recovery."""

    def __init__(self, layout: RunDirectory) -> None:
        self.layout = layout
        self.path = layout.path
        self.path.mkdir(parents=True, exist_ok=True)
        layout.state_dir.mkdir(exist_ok=True)
        layout.snapshot_dir.mkdir(exist_ok=True)
        self._lock_fh = open(layout.lock_path, "a+")
        try:
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_fh.seek(0)
            holder = self._lock_fh.read().strip()
            self._lock_fh.close()
            raise RunLockedError(_locked_message(self.path, holder)) from None
        self._lock_fh.seek(0)
        self._lock_fh.truncate()
        self._lock_fh.write(f"pid {os.getpid()}\n")
        self._lock_fh.flush()
        self._journal: JsonlWriter | None = None

    # -- manifest ---------------------------------------------------------------------------

    def check_or_write_manifest(self, manifest: dict[str, Any], identity_keys: Iterable[str]) -> bool:
        """Write the manifest of a new run, or check that a resumed run has the same identity.

        Returns True when resuming. Fields outside ``identity_keys`` (versions, commit, time)
        may differ between sessions; their latest values are kept in ``resumed`` entries, and those of
        ``CURRENT_ON_RESUME`` replace the stored ones.
        """
        path = self.layout.manifest_path
        if path.exists():
            old = json.loads(path.read_text(encoding="utf-8"))
            _check_identity(self.path, old, manifest, identity_keys)
            for k in CURRENT_ON_RESUME:  # what the run is now (a run extended by iterations says so)
                if k in manifest:
                    old[k] = manifest[k]
            old.setdefault("resumed", []).append(
                {
                    k: manifest.get(k)
                    for k in ("versions", "git_commit", "started_at", "cache_identity")
                    if k in manifest
                }
            )
            atomic_write_json(path, old)
            return True
        atomic_write_json(path, manifest)
        return False

    # -- journal ----------------------------------------------------------------------------

    def read_journal(self) -> JournalState:
        st = JournalState()
        for line in read_jsonl(self.layout.journal_path):
            e = line.value
            if not isinstance(e, dict) or "kind" not in e:
                continue
            if e["kind"] == "train":
                st.train_done.add((int(e["iteration"]), int(e["position"])))
            elif e["kind"] == "iteration_end":
                st.iterations_ended.add(int(e["iteration"]))
            if isinstance(e.get("state"), dict):
                st.last_state = {str(k): int(v) for k, v in e["state"].items()}
        return st

    def state_vector(self, files: Iterable[Path]) -> dict[str, int]:
        return {str(p.relative_to(self.path)): count_lines(p) for p in files}

    def recover(self, files: Iterable[Path], committed: dict[str, int]) -> int:
        """Cut every state file back to its committed line count (0 when never committed)."""
        dropped = 0
        for p in files:
            rel = str(p.relative_to(self.path))
            dropped += truncate_lines(p, committed.get(rel, 0))
        return dropped

    def commit(self, entry: dict[str, Any], files: Iterable[Path]) -> None:
        if self._journal is None:
            self._journal = JsonlWriter(self.layout.journal_path)
        self._journal.append({**entry, "state": self.state_vector(files)})

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
        try:
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
            self._lock_fh.close()
        except (OSError, ValueError):
            pass

    def __enter__(self) -> OpenRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: manifest fields outside the identity that a resumed run updates to the resuming invocation's value:
#: ``iterations`` (a run extended with more iterations; ``is_complete`` reads it)
CURRENT_ON_RESUME = ("iterations",)


def _locked_message(path: Path, holder: str) -> str:
    return (
        f"run directory {path} is in use by another process ({holder or 'unknown'}); "
        "wait for it to finish or stop it before resuming"
    )


def _check_identity(path: Path, old: dict[str, Any], new: dict[str, Any], identity_keys: Iterable[str]) -> None:
    diffs = [k for k in identity_keys if _canon(old.get(k)) != _canon(new.get(k))]
    if diffs:
        details = "; ".join(f"{k}: stored {old.get(k)!r}, now {new.get(k)!r}" for k in diffs)
        raise ManifestMismatchError(
            f"{path} holds a run with a different configuration ({details}). "
            "Use another output directory or run name, or delete the old run."
        )


def _canon(x: Any) -> str:
    return json.dumps(x, sort_keys=True, default=str)
