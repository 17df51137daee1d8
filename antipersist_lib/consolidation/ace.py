"""ACE and ACE_GT (§3, §4.2; App. G.3, H.1.1): a sectioned playbook of counted bullets, built by a generator,
a reflector, a curator and an analyzer over the shared ``Consolidator`` base.

Per update the generator either runs the batch's tasks with the playbook in context (``rollout=``, as the
original does) or names the bullets each task calls for; the reflector tags bullets and writes lessons, the
curator adds or updates bullets, and the analyzer merges a bullet into its most similar earlier one at cosine
similarity >= 0.75 (G.3). ACE_GT differs from ACE only in seeing the target.

The paper gives roles, not prompts or update rules; the kit's readings (the seven ``ACE_SECTIONS``, reflector
granularity, merge modes, ``playbook_token_cap``) are in docs/faulty-memories.md, "ACE as the original builds it"
and "The consolidation code's own readings, module by module".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from antipersist_lib.consolidation import prompts as P
from antipersist_lib.consolidation.bank import MemoryBank, MemoryEntry
from antipersist_lib.consolidation.consolidator import Consolidator, text_of, unique
from antipersist_lib.consolidation.pool import PoolRecord, summarize_trajectory
from antipersist_lib.errors import ReplyParseError
from antipersist_lib.memory.similarity import cosine
from antipersist_lib.replies import as_int_list, excerpt, extract_json
from antipersist_lib.serving.context_budget import estimated_tokens

#: what ACE's generator does per update: run every task with the playbook on the engine ("rollout", the
#: original's design), name the bullets each task calls for ("bullets", no engine needed), or nothing
ACE_GENERATORS = ("rollout", "bullets", "none")
#: the paper's ACE dedup threshold (G.3, H.1.1)
ACE_DEDUP_THRESHOLD = 0.75
#: how often ACE's reflector is called: once per record ("per_record"; G.2: "the reflector emits bullet
#: candidates from each trajectory") or once over the whole batch ("per_batch", the kit's earlier, cheaper reading)
ACE_REFLECTOR_GRANULARITY = ("per_record", "per_batch")
#: which bullets the analyzer compares: every pair ("any_pair"; G.3), only this update's new or rewritten bullets
#: with the others ("new_only"), or none ("none": no embedder needed)
ACE_MERGE = ("any_pair", "new_only", "none")
#: the fixed sections of the original ACE playbook (ace-agent/ace), in its order; the paper's
#: snapshots (H.1.1) show two of them. Bullets in no known section go to the last one.
ACE_SECTIONS = (
    "strategies and insights",
    "formulas and calculations",
    "code snippets and templates",
    "common mistakes to avoid",
    "problem-solving heuristics",
    "context clues and indicators",
    "others",
)


def _section_key(name: str) -> str:
    """A section name as compared: lower case, '&' read as 'and', only letters and digits."""
    return re.sub(r"[^a-z0-9]+", " ", name.lower().replace("&", " and ")).strip()


class ACE(Consolidator):
    """Generator / reflector / curator over a sectioned playbook of counted bullets, plus the analyzer.

    The generator either runs each task of the batch with the playbook in context (``rollout``: the
    original's design, where the reflector learns from the generator's own attempts) or, without an
    environment, names the bullets each task calls for. The analyzer merges every pair of bullets
    whose embeddings are at least ``dedup_threshold`` similar (paper G.3: "any pair")."""

    kind = "bullet"
    id_prefix = "b"
    prompt_names = (
        "consolidation_ace_generator_system",
        "consolidation_ace_generator",
        "consolidation_ace_reflector_system",
        "consolidation_ace_reflector",
        "consolidation_ace_labels_shown",
        "consolidation_ace_labels_hidden",
        "consolidation_ace_labels_shown_attempts",
        "consolidation_ace_labels_attempt_outcome",
        "consolidation_ace_token_budget",
        "consolidation_ace_sections_fixed",
        "consolidation_ace_sections_free",
        "consolidation_ace_attempt",
        "consolidation_ace_reference",
        "consolidation_ace_curator_system",
        "consolidation_ace_curator",
    )

    def __init__(
        self,
        llm: Any,
        embedder: Any,
        *,
        ground_truth: bool = False,
        dedup_threshold: float | None = ACE_DEDUP_THRESHOLD,
        generator: str = "bullets",
        sections: Sequence[str] | None = ACE_SECTIONS,
        rollout: Callable[[PoolRecord, str], PoolRecord] | None = None,
        reflector: str = "per_batch",
        merge: str = "any_pair",
        playbook_token_cap: int | None = None,
        **kw: Any,
    ) -> None:
        self.name = "ace_gt" if ground_truth else "ace"
        super().__init__(llm, **kw)
        if reflector not in ACE_REFLECTOR_GRANULARITY:
            raise ValueError(f"reflector must be one of {ACE_REFLECTOR_GRANULARITY}, got {reflector!r}")
        if merge not in ACE_MERGE:
            raise ValueError(f"merge must be one of {ACE_MERGE}, got {merge!r}")
        if playbook_token_cap is not None and (
            isinstance(playbook_token_cap, bool) or not isinstance(playbook_token_cap, int) or playbook_token_cap < 1
        ):
            raise ValueError(f"playbook_token_cap must be None (no cap) or an integer >= 1, got {playbook_token_cap!r}")
        if merge == "none":
            dedup_threshold = None
        if dedup_threshold is not None:
            if embedder is None:
                raise ValueError("ACE deduplicates new bullets by embedding: pass embedder= (or dedup_threshold=None)")
            if not 0.0 < float(dedup_threshold) <= 1.0:
                raise ValueError(f"dedup_threshold must be in (0, 1], got {dedup_threshold!r}")
        if sections is not None:
            names = [_section_key(x) if isinstance(x, str) else "" for x in sections]
            if not names or not all(names) or len(set(names)) != len(names):
                raise ValueError(
                    f"sections must be distinct non-empty names (or None for free sections), got {sections!r}"
                )
        if generator not in ACE_GENERATORS:
            raise ValueError(f"generator must be one of {ACE_GENERATORS}, got {generator!r}")
        if rollout is not None and not callable(rollout):
            raise ValueError(f"rollout must be callable (record, playbook) -> PoolRecord, got {rollout!r}")
        if rollout is not None and generator != "rollout":
            raise ValueError(f"rollout= is the generator of generator='rollout', not of {generator!r}")
        self.embedder = embedder
        self.ground_truth = bool(ground_truth)
        self.dedup_threshold = None if dedup_threshold is None else float(dedup_threshold)
        self.generator = generator
        self.sections = None if sections is None else tuple(str(x).strip() for x in sections)
        self.rollout = rollout
        self.reflector = reflector
        self.merge = merge if self.dedup_threshold is not None else "none"
        self.playbook_token_cap = playbook_token_cap

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "ground_truth": self.ground_truth,
            "dedup_threshold": self.dedup_threshold,
            "generator": self.generator,
            "sections": list(self.sections) if self.sections is not None else None,
            "reflector": self.reflector,
            "merge": self.merge,
            "playbook_token_cap": self.playbook_token_cap,
        }

    def _section_rule(self) -> str:
        if self.sections is None:
            return P.ACE_SECTIONS_FREE
        return P.ACE_SECTIONS_FIXED.format(sections="; ".join(self.sections))

    def _section(self, name: str, event: dict[str, Any]) -> str:
        """The playbook section ``name`` files under: itself when sections are free, else the fixed
        section it names (case, '&'/'and' and punctuation ignored) or the last one ("others")."""
        if self.sections is None:
            return name
        wanted = _section_key(name)
        for section in self.sections:
            if _section_key(section) == wanted:
                return section
        if name:
            event["skipped"].append(f"section {excerpt(name, 60)!r}: filed under {self.sections[-1]!r}")
        return self.sections[-1]

    def _playbook(self, bank: MemoryBank) -> str:
        bullets = [e for e in bank.entries if e.kind == "bullet"]
        if self.sections is None:
            if not bullets:
                return P.EMPTY_MEMORY
            return "\n".join(
                f"[{e.id}] ({e.section or 'general'}; helpful {e.helpful}, harmful {e.harmful}) {e.text}"
                for e in bullets
            )
        known = set(self.sections)
        parts = []
        for section in self.sections:
            members = [
                e for e in bullets if e.section == section or (section == self.sections[-1] and e.section not in known)
            ]
            lines = [f"[{e.id}] (helpful {e.helpful}, harmful {e.harmful}) {e.text}" for e in members]
            parts.append(f"## {section}\n" + ("\n".join(lines) if lines else "(empty)"))
        return "\n\n".join(parts)

    def _apply(self, bank: MemoryBank, records: list[PoolRecord], event: dict[str, Any]) -> None:
        bullets = {e.id for e in bank.entries if e.kind == "bullet"}
        if self.generator == "rollout" and self.rollout is None:
            raise RuntimeError(
                "ACE's generator 'rollout' runs each task on the benchmark's engine: pass rollout= "
                "(consolidation.rollouts.EpisodeRollout; the consolidation study does), or set generator: bullets"
            )
        if self.generator == "rollout":
            blocks = self._attempts(bank, records, event)
            label_note = P.ACE_LABELS_SHOWN_ATTEMPTS if self.ground_truth else P.ACE_LABELS_ATTEMPT_OUTCOME
        else:
            used = self._generate(bank, records, bullets, event) if self.generator == "bullets" and bullets else {}
            notes = {i: "Bullets used: " + (", ".join(ids) or "none") for i, ids in used.items()}
            blocks = [
                summarize_trajectory(r, self.summary_chars, with_outcome=self.ground_truth)
                + (f"\n{notes[i]}" if i in notes else "")
                for i, r in enumerate(records, start=1)
            ]
            label_note = P.ACE_LABELS_SHOWN if self.ground_truth else P.ACE_LABELS_HIDDEN
        if self.reflector == "per_batch":
            groups = [list(range(len(records)))]
        else:  # G.2: the reflector reads each trajectory on its own
            groups = [[i] for i in range(len(records))]
        found: list[tuple[str, str, list[str]]] = []
        for group in groups:
            found += self._reflect(bank, [blocks[i] for i in group], [records[i] for i in group], label_note, event)
        before = {e.id: e.text for e in bank.entries if e.kind == "bullet"}
        if found:
            lesson_text = "\n".join(
                f"{i}. [{sec or 'general'}] {text}" for i, (sec, text, _) in enumerate(found, start=1)
            )
            rule = self._section_rule()
            if self.playbook_token_cap is not None:
                rule += " " + P.ACE_TOKEN_BUDGET.format(
                    cap=self.playbook_token_cap, now=estimated_tokens(self._playbook(bank))
                )
            ops = extract_json(
                self._chat(
                    P.ACE_CURATOR_SYSTEM,
                    P.ACE_CURATOR.format(playbook=self._playbook(bank), lessons=lesson_text, section_rule=rule),
                    "curator",
                    event,
                ),
                list,
            )
            self._curate(bank, ops, found, records, event)
        changed = {e.id for e in bank.entries if e.kind == "bullet" and before.get(e.id) != e.text}
        self._analyze(bank, event, changed if self.merge == "new_only" else None)
        self._cap(bank, event)

    def _reflect(
        self,
        bank: MemoryBank,
        blocks: list[str],
        records: list[PoolRecord],
        label_note: str,
        event: dict[str, Any],
    ) -> list[tuple[str, str, list[str]]]:
        """One reflector call over ``records`` (their episode texts ``blocks``): tags applied, lessons returned."""
        episodes = "\n\n".join(f"### Episode {i}\n{b}" for i, b in enumerate(blocks, start=1))
        reply = self._chat(
            P.ACE_REFLECTOR_SYSTEM,
            P.ACE_REFLECTOR.format(
                playbook=self._playbook(bank),
                episodes=episodes,
                label_note=label_note,
                section_rule=self._section_rule(),
            ),
            "reflector",
            event,
        )
        obj = extract_json(reply, dict)
        tags, lessons = obj.get("bullet_tags", []), obj.get("lessons", [])
        if not isinstance(tags, list) or not isinstance(lessons, list):
            raise ReplyParseError("the reflector's 'bullet_tags' and 'lessons' must be lists")
        self._apply_tags(bank, tags, event)
        return self._lessons(lessons, records, event)

    def _cap(self, bank: MemoryBank, event: dict[str, Any]) -> None:
        """``playbook_token_cap``: drop the bullets with the worst helpful-minus-harmful record (the oldest first
        among equals) until the rendered playbook fits; the dropped ids are logged."""
        if self.playbook_token_cap is None:
            return
        dropped: list[str] = []
        while estimated_tokens(self._playbook(bank)) > self.playbook_token_cap:
            bullets = [e for e in bank.entries if e.kind == "bullet"]
            if not bullets:
                break
            worst = min(bullets, key=lambda e: (e.helpful - e.harmful, e.updated_step))
            bank.entries.remove(worst)
            dropped.append(worst.id)
        if dropped:
            event["ops"].append({"op": "cap", "ids": dropped, "tokens": estimated_tokens(self._playbook(bank))})

    def _attempts(self, bank: MemoryBank, records: list[PoolRecord], event: dict[str, Any]) -> list[str]:
        """The generator's rollouts, one per task, as the reflector's episodes. Each shows the attempt's own
        outcome (the original ACE's environment feedback, for ACE and ACE_GT alike); only ACE_GT also sees
        the target, the pool's own run of the task as a reference."""
        assert self.rollout is not None
        playbook = bank.render()
        blocks, summary = [], []
        for record in records:
            attempt = self.rollout(record, playbook)
            if not isinstance(attempt, PoolRecord):
                raise TypeError(f"ACE's rollout must return a PoolRecord, got {type(attempt).__name__}")
            summary.append(
                {
                    "task": record.rid,
                    "success": attempt.outcome.success,
                    "steps": attempt.outcome.n_steps,
                    "infra_failure": attempt.outcome.infra_failure,
                }
            )
            text = P.ACE_ATTEMPT.format(attempt=summarize_trajectory(attempt, self.summary_chars, with_outcome=True))
            if self.ground_truth:
                ref = summarize_trajectory(record, self.summary_chars, with_outcome=True)
                text += "\n" + P.ACE_REFERENCE.format(reference=ref)
            blocks.append(f"{text}\nBullets used: any (the whole playbook was in context)")
        event["rollouts"] = summary
        return blocks

    def _generate(
        self, bank: MemoryBank, records: list[PoolRecord], bullets: set[str], event: dict[str, Any]
    ) -> dict[int, list[str]]:
        tasks = "\n".join(
            f"{i}. ({r.task_type}) {r.task.instruction or r.trajectory.initial_observation[:300]}"
            for i, r in enumerate(records, start=1)
        )
        obj = extract_json(
            self._chat(
                P.ACE_GENERATOR_SYSTEM,
                P.ACE_GENERATOR.format(playbook=self._playbook(bank), tasks=tasks),
                "generator",
                event,
            ),
            dict,
        )
        used: dict[int, list[str]] = {}
        for key, ids in obj.items():
            nums = as_int_list(key)
            if not nums or not 1 <= nums[0] <= len(records) or not isinstance(ids, list):
                event["skipped"].append(f"generator: task {key!r}")
                continue
            used[nums[0]] = [i for i in ids if isinstance(i, str) and i in bullets]
        return used

    def _apply_tags(self, bank: MemoryBank, tags: list[Any], event: dict[str, Any]) -> None:
        for t in tags:
            entry = bank.get(t.get("id")) if isinstance(t, dict) and isinstance(t.get("id"), str) else None
            tag = str(t.get("tag", "")).lower() if isinstance(t, dict) else ""
            if entry is None or entry.kind != "bullet" or tag not in ("helpful", "harmful", "neutral"):
                event["skipped"].append(f"tag {excerpt(str(t), 80)}")
                continue
            if tag == "neutral":
                continue
            setattr(entry, tag, getattr(entry, tag) + 1)
            event["ops"].append({"op": "tag", "id": entry.id, "tag": tag})

    def _lessons(
        self, lessons: list[Any], records: list[PoolRecord], event: dict[str, Any]
    ) -> list[tuple[str, str, list[str]]]:
        """(section, text, source ids); a lesson that names no valid episode cites the whole batch."""
        out = []
        for item in lessons:
            text = text_of(item.get("text")) if isinstance(item, dict) else ""
            if not text:
                event["skipped"].append(f"lesson {excerpt(str(item), 80)}")
                continue
            nums = [n for n in as_int_list(item.get("episodes", [])) if 1 <= n <= len(records)]
            rids = [records[n - 1].rid for n in nums] or [r.rid for r in records]
            out.append((self._section(text_of(item.get("section")), event), text, rids))
        return out

    def _curate(
        self,
        bank: MemoryBank,
        ops: list[Any],
        lessons: list[tuple[str, str, list[str]]],
        records: list[PoolRecord],
        event: dict[str, Any],
    ) -> None:
        added: list[MemoryEntry] = []  # joins the bank after the loop: an UPDATE names bullets the curator saw
        for op in ops:
            kind = str(op.get("op", "")).upper() if isinstance(op, dict) else ""
            text = text_of(op.get("text")) if isinstance(op, dict) else ""
            refs = [n for n in as_int_list(op.get("lessons", [])) if 1 <= n <= len(lessons)] if kind else []
            sources = [s for n in refs for s in lessons[n - 1][2]] or [r.rid for r in records]
            entry = bank.get(op["id"]) if kind == "UPDATE" and isinstance(op.get("id"), str) else None
            if kind == "ADD" and text:
                named = text_of(op.get("section"))
                section = self._section(named, event) if named else (lessons[refs[0] - 1][0] if refs else "")
                if not section and self.sections is not None:
                    section = self.sections[-1]
                added.append(self._entry(bank, text, sources, section=section))
            elif entry is not None and entry.kind == "bullet" and text:
                entry.text, entry.updated_step = text, bank.step
                entry.sources = unique(entry.sources + sources)
                event["ops"].append({"op": "update", "id": entry.id})
            else:
                event["skipped"].append(f"curator {excerpt(str(op), 80)}")
        for e in added:
            bank.entries.append(e)
            event["ops"].append({"op": "add", "id": e.id})

    def _analyze(self, bank: MemoryBank, event: dict[str, Any], only: set[str] | None = None) -> None:
        """The analyzer: every bullet whose embedding is at least ``dedup_threshold`` similar to an
        earlier bullet (old or new) merges into the most similar one of those. The earlier bullet
        keeps its id, text and section, and gains the later one's sources and counters. ``only``
        (``merge: new_only``): just these bullets may merge into another; other pairs stay apart."""
        if self.dedup_threshold is None:
            return
        bullets = [e for e in bank.entries if e.kind == "bullet"]
        if len(bullets) < 2:
            return
        vectors = self._embed([e.text for e in bullets], event)
        kept: list[tuple[MemoryEntry, np.ndarray]] = []
        dropped: set[str] = set()
        for e, v in zip(bullets, vectors):
            if v is None:
                event["skipped"].append(f"no embedding for bullet {e.id}: kept without dedup")
                continue
            scored = [(cosine(v, w), other) for other, w in kept if w.shape == v.shape]
            sim, twin = max(scored, key=lambda x: x[0], default=(-1.0, None))
            if twin is not None and sim >= self.dedup_threshold - 1e-9 and (only is None or e.id in only):
                twin.sources = unique(twin.sources + e.sources)
                twin.helpful += e.helpful
                twin.harmful += e.harmful
                twin.updated_step = bank.step
                dropped.add(e.id)
                event["ops"].append({"op": "merge", "from": e.id, "into": twin.id, "similarity": round(float(sim), 4)})
                continue
            kept.append((e, v))
        if dropped:
            bank.entries = [e for e in bank.entries if e.id not in dropped]

    def _embed(self, texts: list[str], event: dict[str, Any]) -> list[np.ndarray | None]:
        tags = {"builder": self.name, "step": event["step"]}
        if hasattr(self.embedder, "embed_many"):
            vecs = list(self.embedder.embed_many(texts, tags=tags))
        else:
            vecs = [self.embedder.embed(t) for t in texts]
        return [None if v is None else np.asarray(v, dtype=np.float64).reshape(-1) for v in vecs]
