"""One held-out task of a finished Anti-Persistence run, step by step (Appendix C).

``walk(run_dir, llm=..., embedder=...)`` re-runs the chosen held-out task of the run's last
iteration on a working copy of the run's final (frozen) state, exactly as the held-out
evaluation did: through the protocol's own ``run_task`` (with the run's in-context
demonstrations, if it showed any), watching the task with its ``capture`` hook. It shows the
selector's audit (neighbourhood, per-mode estimates, bonuses, scores), the retrieved records,
the temporary guidance, the execution, and then the proof that the guidance was discarded: the
state files are byte-identical before and after, the guidance text occurs in no file of the run
directory or the working copy, and the episode record has no field for it.

Replay: every request of a run is in its response cache, so ``runner.replay.replay_clients(run_dir, cache_dir)``
builds clients whose endpoint is unreachable: the walkthrough then runs without any model and
fails loudly (naming the cache) if a request is not cached. Pointing ``llm``/``embedder`` at a
live endpoint runs the same task afresh.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib import tolerance
from antipersist_lib.analysis.audit import log_entries_seen
from antipersist_lib.core.agent import AgentConfig
from antipersist_lib.core.selector import decision_differences
from antipersist_lib.envs import make_env
from antipersist_lib.errors import LLMUnavailableError
from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.methods import make_method, params_as_recorded
from antipersist_lib.methods.base import MethodContext
from antipersist_lib.records import HELDOUT, PHASES, TRAIN, Task
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import TaskCapture, run_task
from antipersist_lib.runner.replay import replay_clients
from antipersist_lib.serving.embeddings import Embedder
from antipersist_lib.serving.ledger import Ledger
from antipersist_lib.serving.llm import LLMClient

#: branches whose audit carries per-mode estimates, most informative first
BRANCH_PREFERENCE = ("local_ucb", "global_best", "epsilon", "warmup", "round_robin", "fixed", "random", "no_embedding")


@dataclass
class DiscardProof:
    """What the run keeps after the task, and where the guidance text is found (nowhere)."""

    phase: str
    state_hashes_before: dict[str, str]
    state_hashes_after: dict[str, str]
    appended: dict[str, list[dict[str, Any]]]  # state file -> records the task added (training only)
    files_searched: int
    files_containing_guidance: list[str]
    record_fields: list[str]
    appended_matches_run: (
        bool  # the records the replay added equal the ones the run wrote there (floats within rounding)
    )

    @property
    def state_unchanged(self) -> bool:
        return self.state_hashes_before == self.state_hashes_after

    @property
    def discarded(self) -> bool:
        """Guidance in no file, no field for it, and (held-out) no state change at all."""
        frozen_ok = self.state_unchanged if self.phase == HELDOUT else True
        return frozen_ok and not self.files_containing_guidance and "guidance" not in self.record_fields


@dataclass
class Walkthrough:
    run_dir: str
    phase: str
    task: Task
    iteration: int
    position: int
    update_index: int | None
    decision: dict[str, Any]
    recorded_decision: dict[str, Any]
    neighbours: list[dict[str, Any]]
    retrieved: list[dict[str, Any]]
    guidance: str
    synthesis_calls: int
    steps: list[dict[str, Any]]
    outcome: dict[str, Any]
    recorded_outcome: dict[str, Any]
    discard: DiscardProof

    def decision_differences(self) -> list[str]:
        """Where the replayed decision differs from the recorded one (empty when it reproduces).

        Same mode, branch, neighbour ids and counts; floats within rounding tolerance, because the
        cosines were computed on the recording machine's CPU and may differ here in the last bit.
        """
        return decision_differences(self.recorded_decision, self.decision)

    @property
    def reproduces_recorded_decision(self) -> bool:
        return not self.decision_differences()

    def per_mode(self) -> list[dict[str, Any]]:
        """One row per mode: neighbourhood count, estimate, bonus, UCB score (None where the branch had none)."""
        d = self.decision
        return [
            {
                "mode": m,
                "count": d["counts"].get(m),
                "estimate": d["estimates"].get(m),
                "bonus": d["bonuses"].get(m),
                "score": d["scores"].get(m),
                "chosen": m == d["mode"],
            }
            for m in d["counts"]
        ]


def _hashes(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _files_containing(text: str, roots: list[Path]) -> tuple[int, list[str]]:
    needle = text.strip().encode("utf-8")
    n, hits = 0, []
    if not needle:
        return 0, []
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                n += 1
                data = p.read_bytes()
                if needle in data or json.dumps(text.strip())[1:-1].encode("utf-8") in data:
                    hits.append(str(p))
    return n, hits


def choose_episode(run_dir: str | Path, position: int | None = None, phase: str = "train") -> dict[str, Any]:
    """An episode of the last iteration of ``phase``: ``position`` if given, else the one whose
    decision is most informative (UCB first), then one that synthesized guidance, then the lowest position."""
    if phase not in PHASES:
        raise ValueError(f"phase is {phase!r}, expected one of {PHASES}")
    run = Path(run_dir)
    held = RunDirectory(run).read_episodes(phase)
    if not held:
        raise ValueError(f"{run}: no {phase} episodes recorded")
    last = max(r["iteration"] for r in held)
    cands = [r for r in held if r["iteration"] == last and "decision" in r.get("meta", {})]
    if not cands:
        raise ValueError(f"{run}: the held-out episodes carry no selector decision (is this an anti_persistence run?)")
    if position is not None:
        found = [r for r in cands if r["position"] == position]
        if not found:
            raise ValueError(
                f"{run}: no {phase} episode at position {position} in iteration {last}; "
                f"positions: {sorted(r['position'] for r in cands)}"
            )
        return found[0]
    rank = {b: i for i, b in enumerate(BRANCH_PREFERENCE)}
    return min(
        cands, key=lambda r: (rank.get(r["meta"]["branch"], len(rank)), not r["calls"]["synthesis"], r["position"])
    )


def _state_before(run: Path, rec: dict[str, Any], work: Path) -> None:
    """Copy the run's state as it was before training update ``rec``: the first k records of M_k
    and the outcome-log entries of the updates before it (both files are append-only)."""
    k = int(rec["meta"]["update_index"])
    logged = log_entries_seen(run, "train", rec["iteration"], rec["position"])
    for name, keep in ((RunDirectory.TRAJECTORIES, k), (RunDirectory.OUTCOME_LOG, logged)):
        lines = RunDirectory(run).state_path(name).read_bytes().splitlines(keepends=True)
        if len(lines) < keep:
            raise ValueError(
                f"{run}: state/{name} has {len(lines)} records, fewer than the {keep} the episode log implies"
            )
        RunDirectory(work).state_path(name).write_bytes(b"".join(lines[:keep]))


def _demonstrations(man: dict[str, Any], task: Task, env: Any) -> Any:
    """The run's in-context demonstrations (agent option ``icl_examples``), or None when it showed none: the
    task's expert replays, read from the cache its manifest names (replayed on the engine again if that cache
    is gone: no model is involved); ``run_task`` puts them first in the context, as the run did."""
    demos = man.get("demonstrations")
    if not demos:
        return None
    from antipersist_lib.core.demonstrations import DemonstrationLibrary
    from antipersist_lib.envs.partitions import load_partition
    from antipersist_lib.paths import repo_root

    folder = Path(demos["cache"])
    if not folder.is_absolute() and not folder.exists() and (repo_root() / folder).exists():
        folder = repo_root() / folder
    library = DemonstrationLibrary(
        load_partition(man["benchmark"]), int(man["seed"]), int(demos["icl_examples"]), folder.parent.parent
    )
    library.prepare(env, [task.task_type])
    return library


def walk(
    run_dir: str | Path,
    *,
    llm: Any,
    embedder: Any,
    work_dir: str | Path,
    position: int | None = None,
    phase: str = "train",
    env: Any = None,
) -> Walkthrough:
    """Re-run one episode of the run's last iteration on a copy of the state it saw.

    ``phase="train"`` (Appendix C): the state before that training update; the task's raw
    trajectory enters M_k and its mode and reward enter L_k. ``phase="heldout"``: the final,
    frozen state; nothing may change.
    """
    run = Path(run_dir)
    src = RunDirectory(run)
    if not src.is_run():
        raise FileNotFoundError(
            f"{run} is not a run directory (no {RunDirectory.MANIFEST}); point run_dir at an anti_persistence run"
        )
    man = src.read_manifest()
    if man["method"] != "anti_persistence":
        raise ValueError(f"{run}: the walkthrough needs an anti_persistence run, this one is {man['method']!r}")
    rec = choose_episode(run, position, phase)
    task = Task.from_dict(rec["task"])
    work = Path(work_dir)
    dst = RunDirectory(work)
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src.state_dir, dst.state_dir)
    if phase == TRAIN:
        _state_before(run, rec, work)
    before = _hashes(dst.state_dir)
    sizes = {
        name: len(dst.state_path(name).read_bytes().splitlines())
        for name in (RunDirectory.TRAJECTORIES, RunDirectory.OUTCOME_LOG)
    }
    method = make_method(
        man["method"],
        MethodContext(llm, embedder, dst.state_dir, int(man["seed"]), man["benchmark"], fsync=False),
        # as recorded: a parameter added since the run (e.g. heldout_selection) takes the value it ran with
        **params_as_recorded(man["method"], man.get("method_params") or {}, man),
    )
    if phase == HELDOUT:
        method.freeze()  # held-out: nothing may be written
    own_env = env is None
    env = env or make_env(man["benchmark"], **man.get("benchmark_options", {}))
    captured: list[TaskCapture] = []
    try:
        record = run_task(
            method,
            env,
            task,
            phase=phase,
            iteration=rec["iteration"],
            position=rec["position"],
            agent_config=AgentConfig(**man["agent"]),
            demonstrations=_demonstrations(man, task, env),
            capture=captured.append,
        )
    finally:
        method.close()
        if own_env:
            env.close()
    if not captured:  # the engine could not load the task (an infrastructure-failure record)
        raise RuntimeError(f"{run}: task {task.key} could not be loaded for the replay: {record['outcome']}")
    seen = captured.pop()
    decision = seen.decision
    guidance = seen.guidance
    log = [x.value for x in read_jsonl(dst.state_path(RunDirectory.OUTCOME_LOG))]
    weights = decision["weights"] or [None] * len(decision["neighbours"])
    neighbours = [
        {
            "log_index": i,
            "similarity": s,
            "weight": w,
            "mode": log[i]["mode"],
            "reward": log[i]["reward"],
            "instruction": log[i].get("instruction", ""),
        }
        for i, s, w in zip(decision["neighbours"], decision["similarities"], weights)
    ]
    memory = {r.value["record_id"]: r.value for r in read_jsonl(dst.state_path(RunDirectory.TRAJECTORIES))}
    retrieved = [
        {
            "record_id": i,
            "instruction": memory[i]["task"]["instruction"],
            "success": memory[i]["outcome"]["success"],
            "steps": len(memory[i]["trajectory"]["steps"]),
        }
        for i in seen.retrieved_ids
        if i in memory
    ]
    after = _hashes(dst.state_dir)
    appended, matches = {}, True
    for name, n in sizes.items():
        new = [x.value for x in read_jsonl(dst.state_path(name))][n:]
        matches &= tolerance.close([x.value for x in read_jsonl(src.state_path(name))][n : n + len(new)], new)
        appended[name] = [
            {k: (f"<{len(v)} floats>" if k == "embedding" else v) for k, v in r.items() if k != "trajectory"}
            for r in new
        ]
    n, hits = _files_containing(guidance, [run, work]) if seen.context.synthesis_calls else (0, [])
    proof = DiscardProof(phase, before, after, appended, n, hits, sorted(record) + sorted(record["meta"]), matches)
    ep = seen.episode
    del seen  # the guidance's last holder besides the copy returned to the reader
    return Walkthrough(
        str(run),
        phase,
        task,
        rec["iteration"],
        rec["position"],
        rec["meta"].get("update_index"),
        decision,
        rec["meta"]["decision"],
        neighbours,
        retrieved,
        guidance,
        record["calls"]["synthesis"],
        [dataclasses.asdict(s) for s in ep.trajectory.steps],
        ep.outcome.to_dict(),
        rec["outcome"],
        proof,
    )


def walk_with(
    mode: str,
    run_dir: str | Path,
    *,
    cache_dir: str | Path | None,
    work_dir: str | Path,
    position: int | None = None,
    phase: str = "train",
) -> Walkthrough:
    """The notebook's entry point: ``mode="load"`` replays from the run's response cache (no
    model); ``mode="run"`` starts the embedded default backbone and embedder and asks them."""
    if mode == "load":
        if cache_dir is None:
            raise ValueError("mode 'load' replays from a response cache: give cache_dir")
        llm, embedder = replay_clients(run_dir, cache_dir)
        try:
            return walk(run_dir, llm=llm, embedder=embedder, work_dir=work_dir, position=position, phase=phase)
        except LLMUnavailableError as exc:
            raise LLMUnavailableError(
                f"replay: a request of this walkthrough is not in the response cache {cache_dir} "
                f"(was it written by this run, with this kit's prompts?); use mode 'run' to ask a model. ({exc})"
            ) from None
    if mode == "run":
        from antipersist_lib.serving.embedded import DEFAULT_MODEL, EmbeddedBackbone, EmbeddedEmbedder

        man = RunDirectory(run_dir).read_manifest()
        # the model the run was recorded with (its label is embedded-<registry name>), else the kit's default
        recorded = str(man.get("backbone", ""))
        model = recorded.removeprefix("embedded-") if recorded.startswith("embedded-") else DEFAULT_MODEL
        log_path = Path(work_dir).parent / "llama_server.log"
        with EmbeddedBackbone(model=model, log_path=log_path) as bb, EmbeddedEmbedder() as em:
            ledger = Ledger()
            llm = LLMClient(bb.endpoint, ledger=ledger, seed=int(man["seed"]))
            embedder = Embedder(em.endpoint, ledger=ledger)
            return walk(run_dir, llm=llm, embedder=embedder, work_dir=work_dir, position=position, phase=phase)
    raise ValueError(f"mode must be 'load' (replay the recorded run) or 'run' (embedded backbone), got {mode!r}")


def _num(x: Any, digits: int = 3) -> str:
    return "-" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


def markdown_report(w: Walkthrough, *, max_steps_shown: int = 12) -> str:
    """The walkthrough as a report section: the decision with its estimates, the retrieved records, the
    guidance, the execution, and the proof of discard (Appendix C's order)."""
    d = w.decision
    out = [
        f"## Walkthrough of one {w.phase} task (Appendix C), replayed from the run's response cache\n",
        f"Run `{w.run_dir}`, iteration {w.iteration}, position {w.position}: {w.task.key} ({w.task.task_type}).\n",
        f"Task: {w.task.instruction[:300]}\n",
        f"**Decision**: mode `{d['mode']}` by branch `{d['branch']}` ({d.get('reason', '')}), from a neighbourhood "
        f"of {len(w.neighbours)} outcome-log entr{'y' if len(w.neighbours) == 1 else 'ies'}"
        + (" (the recorded decision is reproduced)" if w.reproduces_recorded_decision else
           f" (differs from the recorded one: {'; '.join(w.decision_differences())})") + ".\n",
    ]  # fmt: skip
    if w.neighbours:
        out += ["| log entry | similarity | weight | mode | reward |", "|---|---|---|---|---|"]
        out += [
            f"| {n['log_index']} | {_num(n['similarity'])} | {_num(n['weight'])} | {n['mode']} | {_num(n['reward'])} |"
            for n in w.neighbours
        ]
        out.append("")
    out += ["| mode | count | estimate | bonus | score | chosen |", "|---|---|---|---|---|---|"]
    out += [
        f"| {r['mode']} | {_num(r['count'])} | {_num(r['estimate'])} | {_num(r['bonus'])} | {_num(r['score'])} | "
        f"{'yes' if r['chosen'] else ''} |"
        for r in w.per_mode()
    ]
    out.append("")
    out.append(f"**Retrieved records** ({len(w.retrieved)}):")
    out += [
        f"- record {r['record_id']}: {'success' if r['success'] else 'failure'}, {r['steps']} steps: "
        f"{r['instruction'][:120]}"
        for r in w.retrieved
    ] or ["- none"]
    text = w.guidance.strip()
    out += [
        "",
        f"**Temporary guidance** ({w.synthesis_calls} synthesis call{'s' if w.synthesis_calls != 1 else ''}; "
        "shown here from the replay, written to no file of the run):",
        "",
        "```text",
        (text[:1500] + (" ..." if len(text) > 1500 else "")) if text else "(none: this mode passes no guidance)",
        "```",
        "",
        f"**Execution**: {len(w.steps)} steps, success {w.outcome.get('success')}, score {_num(w.outcome.get('score'))} "
        f"(recorded: success {w.recorded_outcome.get('success')}, score {_num(w.recorded_outcome.get('score'))}).",
    ]
    out += [f"{i + 1}. `{s['action']}`" for i, s in enumerate(w.steps[:max_steps_shown])]
    p = w.discard
    same = p.state_hashes_before == p.state_hashes_after
    out += [
        "",
        "**Proof of discard**: state files "
        + ("byte-identical before and after" if same else "changed")
        + f" ({len(p.state_hashes_after)} files); the guidance text occurs in {len(p.files_containing_guidance)} of "
        f"{p.files_searched} files searched (the run directory and the working copy); the episode record's fields "
        f"({', '.join(p.record_fields)}) hold no guidance.",
        "",
    ]
    return "\n".join(out)
