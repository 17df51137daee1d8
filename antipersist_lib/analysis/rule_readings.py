"""An LLM judge's second reading of a run's stored candidates, as a record and a file (issue 40;
docs/reproduction.md, "A judge's second reading").

The signatures of ``core/planted.py`` are the first reading of a candidate's text and the one every rate is
built on; they are deterministic and miss paraphrases. ``rule_judge.py`` asks a model which of a pair's toxic
signatures a stored abstraction prescribes, and files one ``RuleReading`` per abstraction in the run's
``judge_readings/<judge>.jsonl``. This module holds the record and reads the files back, so the analysis
compares both readings without calling a model. A reading names the sha256 of the text it read: a text that
no longer matches is refused, never silently paired with another text's verdict.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from antipersist_lib.jsonl import read_jsonl
from antipersist_lib.paths import safe_file_name
from antipersist_lib.rundir import RunDirectory


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RuleReading:
    """One judge's verdict on one stored abstraction: the toxic signatures it says the text prescribes
    (``signatures``; None when its reply could not be read, ``error`` then says why)."""

    abstraction_id: str
    task_type: str
    pair_id: str
    text_sha256: str
    judge: str  # the judge's label (a backbone profile, the embedded model, or an ad-hoc model name)
    prompt_sha256: str  # the judge prompts' hash (rule_judge.PROMPT_SHA256): a new prompt means a new reading
    signatures: tuple[str, ...] | None
    reason: str = ""
    reply: str = ""
    error: str | None = None
    #: what answered (the embedded default: server, model file sha256 and chat template), when known
    judge_server: str | None = None
    #: ids the judge named without quoting the text (not counted: ``rule_judge.read_verdict``)
    unsupported: tuple[str, ...] = ()

    @property
    def read(self) -> bool:
        return self.signatures is not None

    @property
    def flagged(self) -> bool:
        return bool(self.signatures)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["signatures"] = None if self.signatures is None else list(self.signatures)
        out["unsupported"] = list(self.unsupported)
        return out

    @classmethod
    def from_dict(cls, row: dict[str, Any], where: str) -> RuleReading:
        try:
            sigs = row["signatures"]
            return cls(
                str(row["abstraction_id"]), str(row["task_type"]), str(row["pair_id"]), str(row["text_sha256"]),
                str(row["judge"]), str(row["prompt_sha256"]), None if sigs is None else tuple(str(s) for s in sigs),
                str(row.get("reason") or ""), str(row.get("reply") or ""), row.get("error"), row.get("judge_server"),
                tuple(str(x) for x in row.get("unsupported") or ()),
            )  # fmt: skip
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: not a judge reading ({type(exc).__name__}: {exc}): {row!r}") from None


#: a reading's key: (abstraction id, pair id); a text in the scope of two pairs is read once per pair
ReadingKey = tuple[str, str]


def read_readings(path: str | Path) -> dict[ReadingKey, RuleReading]:
    """One judge's readings file: the last reading of each (abstraction, pair) (a later line replaces an
    earlier one, as a re-reading with a new prompt does)."""
    out: dict[ReadingKey, RuleReading] = {}
    for line in read_jsonl(path):
        reading = RuleReading.from_dict(line.value, f"{path}:{line.lineno}")
        out[(reading.abstraction_id, reading.pair_id)] = reading
    return out


def run_readings(run_dir: str | Path) -> dict[str, dict[ReadingKey, RuleReading]]:
    """Every judge's readings of one run: judge label -> (abstraction id, pair id) -> reading (empty when
    none)."""
    out: dict[str, dict[ReadingKey, RuleReading]] = {}
    for path in RunDirectory(run_dir).judge_readings_paths():
        readings = read_readings(path)
        if readings:
            judges = {r.judge for r in readings.values()}
            if len(judges) != 1:
                raise ValueError(f"{path}: one judge's file holds readings of {sorted(judges)}")
            out[judges.pop()] = readings
    return out


def check_texts(run_dir: str | Path, readings: dict[str, dict[ReadingKey, RuleReading]], texts: dict[str, str]) -> None:
    """Refuse readings of texts the run no longer holds, or of other texts (``texts``: abstraction id -> text)."""
    for judge, by_key in readings.items():
        for (aid, _), r in by_key.items():
            if aid not in texts:
                raise ValueError(f"run {run_dir}: judge {judge!r} read {aid}, which the run's store does not hold")
            if text_sha256(texts[aid]) != r.text_sha256:
                raise ValueError(
                    f"run {run_dir}: judge {judge!r} read another text of {aid} than the store holds (sha256 "
                    f"{r.text_sha256[:12]}... vs {text_sha256(texts[aid])[:12]}...): judge the run again "
                    "(`python -m antipersist_lib reproduction-judge`)"
                )


#: beside the run directories (in the folder the judge read): each judge's calibration on the pairs' own skills
CALIBRATION_DIR = "judge_calibration"


def calibration_path(runs_root: str | Path, judge: str) -> Path:
    return Path(runs_root) / CALIBRATION_DIR / f"{safe_file_name(judge)}.json"


def read_calibrations(runs_root: str | Path) -> dict[str, dict[str, Any]]:
    """Every judge's calibration filed under ``runs_root``: judge -> its record (``line`` says it in words)."""
    out = {}
    for path in sorted((Path(runs_root) / CALIBRATION_DIR).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        out[str(data["judge"])] = data
    return out
