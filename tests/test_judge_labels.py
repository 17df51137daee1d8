"""The one LLM judge of the faulty-memories studies (antipersist_lib/judge.py): the ARC study's ``judge_memory``
and the consolidation study's ``judge_bank`` ask it the same way, one call per entry, and read its replies with
the same labels and the same ``unparsed`` fallback."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from antipersist_lib import judge
from antipersist_lib.arc import lineage
from antipersist_lib.arc.prompts import judge_messages
from antipersist_lib.arc.stores import AbstractStore, Episode, EpisodicBuffer, Memory, StrategyDraft
from antipersist_lib.consolidation import prompts as CP
from antipersist_lib.consolidation import task_switch
from antipersist_lib.consolidation.bank import MemoryBank, MemoryEntry

ROOT = Path(__file__).resolve().parents[1]


class RecordingLLM:
    """Keeps every chat() call as (messages, kwargs) and answers with the next canned reply."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[list[dict[str, str]], dict]] = []

    def chat(self, messages, **kwargs):
        self.calls.append((messages, kwargs))
        return SimpleNamespace(text=self.replies[len(self.calls) - 1])


def arc_memory() -> Memory:
    eps = {"E1": Episode("E1", "tA", "detect_color_property", "recolor", [], "code", True)}
    store = AbstractStore()
    drafts = [StrategyDraft("new", "recolor every cell", (), ("E1",)), StrategyDraft("new", "keep the grid", (), ())]
    drafts.append(StrategyDraft("new", "swap colors", (), ()))
    store.rewrite(drafts, eps, step=1)
    return Memory(EpisodicBuffer(capacity=8, entries=[eps["E1"]], next_number=2), store)


REPLIES = ['{"label": "Over_Generalization", "reason": "too broad"}', "garbage.", "It depends, really."]


def test_the_arc_judge_asks_once_per_strategy_and_reads_an_unreadable_reply_as_unparsed():
    memory = arc_memory()
    llm = RecordingLLM(REPLIES)
    labels = lineage.judge_memory(llm, memory, max_tokens=77)
    ids = [s.entry_id for s in memory.abstract]
    assert [m for m, _ in llm.calls] == [judge_messages(s) for s in memory.abstract]
    for (_, kw), entry_id in zip(llm.calls, ids, strict=True):
        assert kw == {"purpose": "arc_judge", "temperature": 0.0, "max_tokens": 77, "tags": {"entry_id": entry_id}}
    assert [(x.entry_id, x.label, x.reason) for x in labels] == [
        (ids[0], "over-generalized", "too broad"),
        (ids[1], "garbage", ""),
        (ids[2], judge.UNPARSED_LABEL, ""),
    ]
    assert "It depends" in labels[2].error and labels[0].error is None
    assert lineage.label_counts(labels) == {
        "normal": 0,
        "over-generalized": 1,
        "over-specific": 0,
        "garbage": 1,
        "unparsed": 1,
    }


def test_the_task_switch_judge_asks_once_per_entry_with_its_tags_first_and_the_entry_last():
    bank = MemoryBank(
        "clin",
        entries=[
            MemoryEntry("m1", "ALWAYS heat first", sources=["boil0", "melt1"]),
            MemoryEntry("m2", "  ", sources=["unknown"]),
            MemoryEntry("m3", "use the stove", sources=["boil0"]),
        ],
    )
    llm = RecordingLLM(REPLIES)
    rows = task_switch.judge_bank(bank, llm, {"boil0": "boil", "melt1": "melt"}, tags={"setup": "fresh", "task": 2})
    (first, _), (second, _), _ = llm.calls
    assert first[0] == {"role": "system", "content": CP.SWITCH_JUDGE_SYSTEM}
    assert first[1]["content"] == CP.SWITCH_JUDGE.format(evidence="boil, melt", entry="ALWAYS heat first")
    assert second[1]["content"] == CP.SWITCH_JUDGE.format(evidence="(not recorded)", entry="(empty)")
    for (_, kw), entry_id in zip(llm.calls, ["m1", "m2", "m3"], strict=True):
        assert {k: v for k, v in kw.items() if k != "tags"} == {
            "purpose": "judge",
            "temperature": 0.0,
            "max_tokens": 512,
        }
        # the order of the tags is part of a request's bytes (the response caches are keyed on them)
        assert list(kw["tags"].items()) == [("setup", "fresh"), ("task", 2), ("entry", entry_id)]
    assert [(r["entry"], r["label"], r["reason"]) for r in rows] == [
        ("m1", "over-generalized", "too broad"),
        ("m2", "garbage", ""),
        ("m3", "unparsed", ""),
    ]
    assert list(rows[0]) == ["entry", "label", "reason", "error"] and "It depends" in rows[2]["error"]


def test_both_study_judges_read_their_replies_through_the_one_loop(monkeypatch):
    """A reading swapped in judge.py is the one both studies see: neither keeps a reader of its own."""
    seen = []

    def spy(reply: str) -> judge.JudgeVerdict:
        seen.append(reply)
        return judge.JudgeVerdict("normal", "spy")

    monkeypatch.setattr(judge, "judge_or_fallback", spy)
    arc = lineage.judge_memory(RecordingLLM(["a", "b", "c"]), arc_memory())
    bank = MemoryBank("clin", entries=[MemoryEntry("m1", "x"), MemoryEntry("m2", "y")])
    switch = task_switch.judge_bank(bank, RecordingLLM(["d", "e"]), {})
    assert seen == ["a", "b", "c", "d", "e"]
    assert {x.reason for x in arc} == {r["reason"] for r in switch} == {"spy"}


@pytest.mark.parametrize(
    ("reply", "label"),
    [
        ('{"label": "Over_Generalization", "reason": "too broad"}', "over-generalized"),
        ('```json\n{"label": "over-specialized"}\n```', "over-specific"),
        ("'normal'", "normal"),
        ("Useless garbage", "garbage"),
        ('{"label": "brilliant"}', "unparsed"),
        ("", "unparsed"),
    ],
)
def test_a_reply_is_read_into_one_of_the_four_labels_or_unparsed(reply, label):
    verdict = judge.judge_or_fallback(reply)
    assert verdict.label == label and (verdict.error is None) == (label != "unparsed")
    assert label in (*judge.JUDGE_LABELS, judge.UNPARSED_LABEL)


def test_the_labels_and_their_reader_are_defined_once_in_the_kit():
    defined = {}
    for path in sorted((ROOT / "antipersist_lib").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = []
            if isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            for name in names:
                if name in {"JUDGE_LABELS", "UNPARSED_LABEL", "JudgeVerdict", "parse_judge", "judge_or_fallback"}:
                    defined.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    assert defined == {
        name: ["antipersist_lib/judge.py"]
        for name in ("JUDGE_LABELS", "UNPARSED_LABEL", "JudgeVerdict", "parse_judge", "judge_or_fallback")
    }
