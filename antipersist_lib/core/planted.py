"""Planted skills: matched useful / toxic pairs whose toxic rule can be found again in any text.

F.1 supplies matched skills (same scope, a correct or a wrong procedural rule) and measures their
immediate effect. To measure error reproduction, the wrong rule must be recognisable in everything
written after it (synthesized guidance, stored abstractions, executed commands), so every toxic rule
carries *signatures* with two deterministic readings: ``text`` (term groups one clause must hit, with
no negation cue) and ``command`` (a regular expression over executed commands, with optional
``when`` / ``until`` / ``until_command``). Rates computed from them are recomputed exactly from the
records; an LLM judge may add a second reading, never replace this one.

The text reading has two forms. The *plain* one reads the text alone. The *goal-aware* one also knows
the goals of the task the text was written for and of the tasks whose records it was written from:
moving the object into the receptacle a goal names is that task's last step, not a use of the
receptacle as an appliance ("put a hot apple in fridge": a note saying "move the hot apple to the
fridge" does not say that the fridge heats). It drops such placements from a clause before reading
it, unless the placement is how the process is done ("put it in the fridge to heat it", "heat it by
putting it in the fridge"). It flags a subset of what the plain reading flags (a placement is only
ever removed; negation is read on the whole clause).

Pairs files are ``params/skills/planted/<benchmark>.yaml``. docs/reproduction.md, "The design",
documents the signatures, the file format, the provenance ids and the conditions.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.paths import repo_root
from antipersist_lib.profile_fields import ANY, STR, Checker, Field, Fields
from antipersist_lib.records import Task
from antipersist_lib.serving.profiles import read_mapping

#: the three conditions of the design: nothing planted, the useful skills, the toxic skills
CONDITIONS: tuple[str, ...] = ("none", "useful", "toxic")
PLANTED_CONDITIONS: tuple[str, ...] = ("useful", "toxic")
#: prefix of every planted skill's provenance id
PLANT_PREFIX = "plant-"


def _non_empty_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value)


def _regex(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


#: a pairs file, one pair, one signature: every key stated once (``profile_fields``)
FILE = Fields(
    Field("benchmark", STR, required=True),  # compared with the benchmark asked for
    Field("pairs", ANY, required=True, test=_non_empty_list, what="a non-empty list"),
)
PAIR = Fields(
    Field(
        "id",
        STR,
        required=True,
        test=lambda v: re.fullmatch(r"[a-z0-9][a-z0-9-]*", v),
        what="lower-case letters, digits and hyphens",
    ),
    Field("task_type", STR, required=True, nullable=True, what="a task type name"),
    Field("useful", STR, required=True, test=str.strip, what="the skill's text"),
    Field("toxic", STR, required=True, test=str.strip, what="the skill's text"),
    Field("signatures", ANY, required=True, test=_non_empty_list, what="a non-empty list"),
)
SIGNATURE = Fields(
    Field("id", STR, required=True),
    Field("text", ANY, required=True, test=_non_empty_list, what="a non-empty list of term groups (lists of terms)"),
    Field("command", ANY, required=True, test=_regex, what="a regular expression string"),
    *(
        Field(k, ANY, nullable=True, test=_regex, what="a regular expression string")
        for k in ("when", "until", "until_command")
    ),
)

_NEGATION = re.compile(r"\b(?:not|never|no|avoid|without|cannot|nothing)\b|n't\b", re.IGNORECASE)
#: "instead of X" / "rather than X": X (up to the next punctuation) is the rejected alternative
_REJECTED = re.compile(r"\b(?:instead\s+of|rather\s+than)\b[^,.;:!?\n]*", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"[.!?;\n]+(?:\s|$)|[;\n]|\b(?:because|but|however|otherwise|instead)\b", re.IGNORECASE)


def clauses(text: str) -> list[str]:
    """``text`` cut into the clauses the text reading checks one at a time (module docstring)."""
    kept = _REJECTED.sub(" ", text)
    return [c.strip() for c in _CLAUSE_BREAK.split(kept) if c and c.strip()]


def _term_pattern(term: str) -> re.Pattern[str]:
    return re.compile(r"\b" + re.escape(term.lower()) + r"\w*", re.IGNORECASE)


#: a goal's placement: a verb of putting and, in the same sentence, the receptacle the object ends in or on
_GOAL_PLACEMENT = re.compile(
    r"\b(?:put|place|move|bring|take|set|drop)\b[^.;:!?\n]*?\b(?:in|on|into|onto|inside|to)\s+"
    r"(?:the\s+|a\s+|an\s+)?([a-z]+)",
    re.IGNORECASE,
)
_PLACING = (
    r"(?:move|moving|moved|put|putting|place|placing|placed|take|taking|took|bring|bringing|brought|carry|"
    r"carrying|carried|drop|dropping|dropped|return|returning|returned|set|setting)"
)
#: the moved object: a few words, none of which starts another action or names another place
_MOVED = r"(?:\s+(?!(?:and|then|to|in|into|on|onto|inside|with|using|so|until|or)\b)[\w'-]+){0,6}?"
_ARTICLE = r"(?:the\s+|a\s+|an\s+)?"


#: what the goal-aware reading is given: one task's instruction, several, or none (the plain reading)
Goals = str | Iterable[str] | None


def goal_receptacles(goals: Goals) -> tuple[str, ...]:
    """The receptacles the goals (tasks' instructions) put their object in or on, lower case, in order
    ("Your task is to: put a hot apple in fridge." -> ("fridge",)); () when they name none."""
    texts = [goals] if isinstance(goals, str) else list(goals or ())
    return tuple(dict.fromkeys(m.group(1).lower() for g in texts for m in _GOAL_PLACEMENT.finditer(g or "")))


@dataclass(frozen=True)
class Signature:
    """One wrong action and object a toxic rule prescribes (module docstring)."""

    signature_id: str
    pair_id: str
    task_type: str | None
    text: tuple[tuple[str, ...], ...]
    command: str
    when: str | None = None
    until: str | None = None
    until_command: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_terms", tuple(tuple(_term_pattern(t) for t in g) for g in self.text))
        object.__setattr__(self, "_command", re.compile(self.command, re.IGNORECASE))
        object.__setattr__(self, "_when", None if self.when is None else re.compile(self.when, re.IGNORECASE))
        object.__setattr__(self, "_until", None if self.until is None else re.compile(self.until, re.IGNORECASE))
        object.__setattr__(
            self,
            "_until_command",
            None if self.until_command is None else re.compile(self.until_command, re.IGNORECASE),
        )

    def in_scope(self, task_type: str | None) -> bool:
        """A signature of a typed pair reads only texts and episodes of that task type."""
        return self.task_type is None or task_type is None or task_type == self.task_type

    def clause_hits(self, clause: str, receptacles: Sequence[str] = ()) -> bool:
        """Whether ``clause`` asserts this wrong rule; ``receptacles``: those the goals put their object in or
        on (``goal_receptacles``), whose plain placements are dropped first (module docstring)."""
        if _NEGATION.search(clause):
            return False
        read = self._without_goal_placements(clause, receptacles) if receptacles else clause
        return all(any(p.search(read) for p in group) for group in self._terms)  # type: ignore[attr-defined]

    def in_text(self, text: str, receptacles: Sequence[str] = ()) -> bool:
        """Whether some clause of ``text`` asserts this wrong rule (goal-aware when ``receptacles`` are given)."""
        return any(self.clause_hits(c, receptacles) for c in clauses(text or ""))

    def meets(self, receptacles: Sequence[str]) -> tuple[str, ...]:
        """The receptacles among ``receptacles`` that one of this signature's terms names: only those
        make the goal-aware reading differ from the plain one."""
        terms = [p for group in self._terms for p in group]  # type: ignore[attr-defined]
        return tuple(r for r in receptacles if any(p.fullmatch(r) for p in terms))

    def _without_goal_placements(self, clause: str, receptacles: Sequence[str]) -> str:
        targets = self.meets(receptacles)
        if not targets:
            return clause
        process = [p for group in self._terms for p in group if not any(p.fullmatch(t) for t in targets)]  # type: ignore[attr-defined]
        place = re.compile(
            rf"\b{_PLACING}\b{_MOVED}\s+(?:to|in|into|on|onto|inside)\s+{_ARTICLE}"
            rf"(?:{'|'.join(re.escape(t) for t in targets)})\w*(?:\s+\d+)?\b",
            re.IGNORECASE,
        )
        kept, last = [], 0
        for m in place.finditer(clause):
            before = clause[: m.start()]
            after = clause[m.end() :]
            # the placement is how the process is done: "by putting it in the fridge", "... to heat it"
            if re.search(r"\b(?:by|via)\s+$", before, re.IGNORECASE) or _purpose(after, process):
                continue
            kept.append(clause[last : m.start()])
            last = m.end()
        kept.append(clause[last:])
        return " ".join(kept)

    def first_following_step(self, initial_observation: str, steps: Sequence[Any]) -> int | None:
        """The index of the first step whose command follows this wrong rule (``command``, after an
        observation matching ``when``, before ``until`` or ``until_command`` end the reading), or None. ``steps``: records with ``action`` and ``observation``
        (``records.Step`` or their dicts)."""
        seen = initial_observation or ""
        for i, step in enumerate(steps):
            if self._until is not None and self._until.search(seen):  # type: ignore[attr-defined]
                return None
            action = str(_field(step, "action")).strip().lower()
            context_ok = self._when is None or bool(self._when.search(seen))  # type: ignore[attr-defined]
            if context_ok and self._command.search(action):  # type: ignore[attr-defined]
                return i
            if self._until_command is not None and self._until_command.search(action):  # type: ignore[attr-defined]
                return None
            seen += "\n" + str(_field(step, "observation"))
        return None


def _purpose(after: str, process: Sequence[re.Pattern[str]]) -> bool:
    """Whether the words right after a placement name the process as its purpose ("to heat it", "and
    let it cool", "so that it gets hot")."""
    m = re.match(r"\s*,?\s*(?:to|and|so|until|for|then)\b((?:\s+[\w'-]+){1,4})", after, re.IGNORECASE)
    return bool(m) and any(p.search(m.group(1)) for p in process)


def _field(step: Any, name: str) -> Any:
    return step[name] if isinstance(step, dict) else getattr(step, name)


@dataclass(frozen=True)
class PlantedPair:
    """A useful and a toxic skill with the same scope; ``signatures`` read the toxic one."""

    pair_id: str
    task_type: str | None
    useful: str
    toxic: str
    signatures: tuple[Signature, ...]

    def text(self, condition: str) -> str:
        check_condition(condition, planted=True)
        return self.useful if condition == "useful" else self.toxic

    def skill_id(self, condition: str) -> str:
        check_condition(condition, planted=True)
        return f"{PLANT_PREFIX}{self.pair_id}-{condition}"


@dataclass(frozen=True)
class PlantedSkill:
    """One skill as it is planted: provenance id, pair, condition, scope and text."""

    skill_id: str
    pair_id: str
    condition: str
    task_type: str | None
    text: str


@dataclass(frozen=True)
class PlantedSkills:
    """Every pair of one benchmark's file, and the readings of their toxic rules."""

    benchmark: str
    pairs: tuple[PlantedPair, ...]
    path: str
    sha256: str

    def skills(self, condition: str) -> list[PlantedSkill]:
        """The skills planted under ``condition`` (none under ``none``), in file order."""
        check_condition(condition)
        if condition == "none":
            return []
        return [
            PlantedSkill(p.skill_id(condition), p.pair_id, condition, p.task_type, p.text(condition))
            for p in self.pairs
        ]

    def skill_ids(self, condition: str) -> set[str]:
        return {s.skill_id for s in self.skills(condition)}

    @property
    def signatures(self) -> tuple[Signature, ...]:
        return tuple(s for p in self.pairs for s in p.signatures)

    def detect(self, text: str, task_type: str | None = None, goals: Goals = None) -> tuple[str, ...]:
        """The toxic signatures ``text`` (written for a task of ``task_type``; None: any) asserts: the plain
        reading, or the goal-aware one when ``goals`` are given (the instructions of the task it was written for
        and of its source records' tasks; module docstring)."""
        receptacles = goal_receptacles(goals)
        return tuple(s.signature_id for s in self.signatures if s.in_scope(task_type) and s.in_text(text, receptacles))

    def signature(self, signature_id: str) -> Signature:
        for s in self.signatures:
            if s.signature_id == signature_id:
                return s
        raise KeyError(f"{self.path} has no signature {signature_id!r}")

    def followed(self, task_type: str, initial_observation: str, steps: Sequence[Any]) -> tuple[str, ...]:
        """The toxic signatures whose command an episode of ``task_type`` executed."""
        return tuple(
            s.signature_id
            for s in self.signatures
            if (s.task_type is None or s.task_type == task_type)
            and s.first_following_step(initial_observation, steps) is not None
        )

    def in_scope(self, task_type: str) -> bool:
        """Whether some pair covers tasks of ``task_type`` (behaviour is measured on those only)."""
        return any(p.task_type is None or p.task_type == task_type for p in self.pairs)

    def pairs_in_scope(self, task_type: str | None) -> tuple[str, ...]:
        """The pairs whose signatures read a text written for ``task_type`` (None: every pair), as ``detect``."""
        return tuple(p.pair_id for p in self.pairs if task_type is None or p.task_type in (None, task_type))

    def pair(self, pair_id: str) -> PlantedPair:
        for p in self.pairs:
            if p.pair_id == pair_id:
                return p
        raise KeyError(f"{self.path} has no pair {pair_id!r}; its pairs are {[p.pair_id for p in self.pairs]}")

    def describe(self) -> dict[str, Any]:
        """What a manifest records: the file, its hash, the pairs and their signatures."""
        return {
            "path": self.path,
            "sha256": self.sha256,
            "benchmark": self.benchmark,
            "pairs": [p.pair_id for p in self.pairs],
            "signatures": [s.signature_id for s in self.signatures],
        }


def check_condition(condition: Any, *, planted: bool = False) -> str:
    allowed = PLANTED_CONDITIONS if planted else CONDITIONS
    if condition not in allowed:
        raise ValueError(f"plant_condition is {condition!r}, expected one of {allowed}")
    return str(condition)


def pairs_file(path: str | Path, benchmark: str) -> Path:
    """The pairs file of ``benchmark``: ``path`` itself, or ``path/<benchmark>.yaml`` for a folder; a relative
    path that is not found from the working directory is taken from the repository root."""
    p = Path(path)
    if not p.exists() and not p.is_absolute() and (repo_root() / p).exists():
        p = repo_root() / p  # a profile's path from the repository root, read from another folder
    if p.is_dir():
        p = p / f"{benchmark}.yaml"
    if not p.is_file():
        raise ValueError(
            f"plant: no planted-skill file {p} (give a pairs file, or a folder holding <benchmark>.yaml, "
            "e.g. params/skills/planted)"
        )
    return p


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list) or not value:
        raise ValueError(f"{where} must be a non-empty list of terms")
    if not all(isinstance(t, str) and t.strip() for t in value):
        raise ValueError(f"{where}: every term must be a non-empty string, got {value!r}")
    return tuple(t.strip() for t in value)


def _signature(d: Any, pair_id: str, task_type: str | None, where: str, check: Checker) -> Signature:
    v = check.read(d, where, SIGNATURE)
    text = tuple(_strings(g, f"{check.where}: {where}.text[{i}]") for i, g in enumerate(v["text"]))
    for key in ("command", "when", "until", "until_command"):
        if v[key] is not None:
            try:
                re.compile(v[key])
            except re.error as exc:
                raise check.fail(f"{where}.{key}: not a valid regular expression ({exc}): {v[key]!r}") from None
    return Signature(v["id"], pair_id, task_type, text, v["command"], v["when"], v["until"], v["until_command"])


def read_planted(path: str | Path, benchmark: str) -> PlantedSkills:
    """Read and check one benchmark's pairs file; every error names the file and the entry. Each toxic
    skill must hit one of its own signatures, and no useful skill may hit any: a signature that misses
    its own rule, or flags the correct one, would make every rate built on it wrong."""
    p = pairs_file(path, benchmark)
    check = Checker(p, lambda message: ValueError(f"{p}: {message}"), label="{key}")
    data = check.read(read_mapping(p), None, FILE)
    if data["benchmark"] != benchmark:
        raise check.fail(f"holds pairs for benchmark {data['benchmark']!r}, not {benchmark!r}")
    pairs: list[PlantedPair] = []
    for i, d in enumerate(data["pairs"]):
        where = f"pairs[{i}]"
        v = check.read(d, where, PAIR)
        pid, kind = v["id"], v["task_type"]
        pair = PlantedPair(
            pid,
            kind,
            " ".join(v["useful"].split()),
            " ".join(v["toxic"].split()),
            tuple(_signature(s, pid, kind, f"{where}.signatures[{j}]", check) for j, s in enumerate(v["signatures"])),
        )
        if not any(s.in_text(pair.toxic) for s in pair.signatures):
            raise check.fail(f"{where}: no signature of pair {pid!r} detects its own toxic skill")
        pairs.append(pair)
    _check_unique([q.pair_id for q in pairs], f"{p}: pair ids")
    skills = PlantedSkills(benchmark, tuple(pairs), str(p), hashlib.sha256(p.read_bytes()).hexdigest())
    _check_unique([s.signature_id for s in skills.signatures], f"{p}: signature ids")
    for q in pairs:
        hit = skills.detect(q.useful, q.task_type)
        if hit:
            raise check.fail(f"the useful skill of pair {q.pair_id!r} is flagged by signature(s) {list(hit)}")
    return skills


def _check_unique(ids: Iterable[str], what: str) -> None:
    seen: list[str] = []
    for i in ids:
        if i in seen:
            raise ValueError(f"{what} must be unique; {i!r} repeats")
        seen.append(i)


#: the method parameters of a run that plants skills (abstraction memory, joint memory,
#: Anti-Persistence), with their defaults: nothing planted, nothing read
PLANT_DEFAULTS: dict[str, Any] = {"plant": None, "plant_condition": "none", "plant_iterations": 1}
#: why a planted skill leaves the store (Remark 1's parent deletion)
DELETION_REASON = "parent deletion (planted skill removed after its iterations)"


@dataclass(frozen=True)
class Plant:
    """A run's planting: which pairs (``skills``; None when the run names no file), which condition,
    and through which iteration the planted skills stay in memory (deleted from iteration
    ``iterations + 1`` on). With a file and condition ``none`` nothing is planted but every
    synthesized candidate is still read for the toxic signatures: the unexposed baseline."""

    skills: PlantedSkills | None
    condition: str = "none"
    iterations: int = 1

    @classmethod
    def from_params(cls, params: dict[str, Any], benchmark: str) -> Plant:
        condition = check_condition(params.get("plant_condition", "none"))
        n = params.get("plant_iterations", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"plant_iterations must be an integer >= 1, got {n!r}")
        path = params.get("plant")
        if path in (None, ""):
            if condition != "none":
                raise ValueError(
                    f"plant_condition is {condition!r} but no plant file is given: set plant to a pairs file "
                    "or to a folder of them (params/skills/planted)"
                )
            return cls(None, condition, n)
        if not isinstance(path, (str, Path)):
            raise ValueError(f"plant must be a path to a pairs file or folder, got {path!r}")
        return cls(read_planted(path, benchmark), condition, n)

    @property
    def reads(self) -> bool:
        """Whether candidates are read for the toxic signatures (a pairs file is given)."""
        return self.skills is not None

    @property
    def planted(self) -> list[PlantedSkill]:
        return [] if self.skills is None else self.skills.skills(self.condition)

    def active(self, iteration: int) -> bool:
        """Whether the planted skills are in memory during ``iteration`` (the seed phase is 0)."""
        return bool(self.planted) and iteration <= self.iterations

    def detect(self, text: str, task_type: str | None, goals: Goals = None) -> list[str]:
        return [] if self.skills is None else list(self.skills.detect(text, task_type, goals))

    def verdicts(self, text: str, task: Task, sources: Iterable[Task] = ()) -> dict[str, list[str]]:
        """What a synthesis record keeps of ``text``, written for ``task`` from records of the ``sources`` tasks:
        the plain reading's signatures, the goal-aware reading's and the receptacles the goals name (module
        docstring), never the text."""
        goals = [task.instruction, *(t.instruction for t in sources)]
        return {
            "signatures": self.detect(text, task.task_type),
            "goal_aware_signatures": self.detect(text, task.task_type, goals),
            "goal_receptacles": list(goal_receptacles(goals)),
        }

    def describe(self) -> dict[str, Any]:
        if self.skills is None:
            return {}
        return {
            "plant": {
                **self.skills.describe(),
                "condition": self.condition,
                "iterations": self.iterations,
                "planted_ids": [s.skill_id for s in self.planted],
            }
        }
