"""Checks of the kit's reference numbers against the paper's own text, when that text is beside the checkout.

The faulty-memories paper's numbers live in ``analysis.faulty_paper`` as records; comparing them with literals
typed from the same paper would check nothing. These functions read the paper's Markdown
(``shared/paper/faulty-memories-paper.md``, next to the repository or inside it) and report every difference, so
a drifted record or a revised paper is named. Without the text (``find_paper`` returns None) there is nothing to
check and callers say so. The erosion profile is duck-typed, so this module does not import the consolidation
study.

Each check, its paper section and notebook: docs/faulty-memories.md, "Reference numbers checked against the
paper's text". A notebook runs its checks in one call, ``check_paper_text(root, notebook)`` (``NOTEBOOK_CHECKS``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.analysis import faulty_paper

PAPER_FILE = Path("paper") / "faulty-memories-paper.md"
#: the block heading each table's rows follow, as printed
TABLE_BLOCKS = {"appworld": "AppWorld (TGC%)", "alfworld": "ALFWorld (Task Success %)"}
WEBSHOP_CAPTION = "Table 3:"
_CELL = re.compile(r"^\$(\\mathbf\{)?(\d+)\}?(\^\{\*\})?\$( \$\(\\text\{--\}\)\$)?$")


def find_paper(root: str | Path) -> Path | None:
    """The paper's Markdown in ``<root>/shared/`` or ``<root>/../shared/`` (the kit's layout), else None."""
    base = Path(root).resolve()
    for shared in (base / "shared", base.parent / "shared"):
        path = shared / PAPER_FILE
        if path.is_file():
            return path
    return None


def paper_text(root: str | Path) -> str | None:
    path = find_paper(root)
    return None if path is None else path.read_text(encoding="utf-8")


def _value(v: float) -> str:
    return f"{v:.2f}" if isinstance(v, float) and not v.is_integer() else f"{int(v)}"


def _fmt(key: str) -> str:
    return _value(faulty_paper.stated(key).value)


#: sentences of the paper written from the records' values; each must occur in the text verbatim
STATED_SENTENCES: dict[str, Callable[[], str]] = {
    "figure1b_webshop": lambda: (
        f"AWM goes from ${_fmt('webshop_awm_8_examples')}$ at $8$ examples to ${_fmt('webshop_awm_128_examples')}$ "
        f"at $128$ while no-memory sits at ${_fmt('webshop_no_memory')}$"
    ),
    "figure1a_scienceworld": lambda: (
        f"with batches of {_fmt('sciworld_batch_size')} trajectories: the score peaks near step "
        f"{_fmt('sciworld_peak_step')} and declines through step {_fmt('sciworld_last_step')}"
    ),
    "figure2_before": lambda: (
        f"a {_fmt('arc19_slice_size')}-problem slice of the ARC-AGI Stream that GPT-5.4 solves at "
        f"${_fmt('arc19_no_memory_accuracy')}\\%$ accuracy without memory"
    ),
    "figure2_after": lambda: (
        f"brings GPT-5.4 down to ${_fmt('arc19_after_consolidation_accuracy')}\\%$ on the very problems it had "
        "previously solved (Fig. 2)"
    ),
    "figure6_segmentation": lambda: (
        f"only after {_fmt('segmentation_steps')} steps ({_fmt('segmentation_examples')} examples) does the model "
        f"admit all six problem types into the buffer"
    ),
    "figure6_force_step": lambda: (
        f"where the model must consolidate at every step ({_fmt('force_fresh_examples_per_step')} fresh examples)"
    ),
    "figure10_gap": lambda: f"Cumulative ends $+{_fmt('cumulative_behind_fresh')}$ points behind Fresh (Fig. 10)",
    "figure10_sequence": lambda: f"On the {_fmt('switch_tasks')}-task ScienceWorld switch sequence",
    "figure18_ratios": lambda: (
        f"over-generalized memories at $\\sim\\!{_fmt('overgeneralized_ratio')}\\times$ Fresh’s rate and garbage "
        f"memories at $\\sim\\!{_fmt('garbage_ratio')}\\times$"
    ),
    "figure16_baselines": lambda: (
        f"no-memory baselines ({_fmt('g1_no_memory_4b')}/48 for both 4B and 9B; {_fmt('g1_no_memory_27b')}/48 for 27B)"
    ),
    "figure16_peak": lambda: f"a small bump at stage 20 ({_fmt('g1_peak_4b_9b')}/48 wins)",
    "figure16_27b": lambda: f"it erodes to {_fmt('g1_stage200_27b')}/48 by stage 200",
}
#: the ``STATED_SENTENCES`` that carry §4.1's Fig. 1 (WebShop AWM, ScienceWorld CLIN) and Fig. 2 (ARC-AGI regression)
FIGURE1_SENTENCES = ("figure1b_webshop", "figure1a_scienceworld")
FIGURE2_SENTENCES = ("figure2_before", "figure2_after")
#: §6.1 (Fig. 6), §6.2 (Figs. 10 and 18) and App. G.1 (Fig. 16)
FIGURE6_SENTENCES = ("figure6_segmentation", "figure6_force_step")
SWITCH_SENTENCES = ("figure10_gap", "figure10_sequence", "figure18_ratios")
FIGURE16_SENTENCES = ("figure16_baselines", "figure16_peak", "figure16_27b")


def stated_mismatches(text: str, names: Sequence[str] = tuple(STATED_SENTENCES)) -> list[str]:
    """The ``STATED_SENTENCES`` (by name) that the paper's text does not contain, each with the sentence."""
    unknown = [n for n in names if n not in STATED_SENTENCES]
    if unknown:
        raise KeyError(f"no stated sentence {unknown}; known: {sorted(STATED_SENTENCES)}")
    return [
        f'{n}: the paper does not say "{STATED_SENTENCES[n]()}"' for n in names if STATED_SENTENCES[n]() not in text
    ]


def figure2_mismatches(text: str) -> list[str]:
    """§4.1's Fig. 2 numbers (slice size, accuracy without memory, after consolidation) the text does not state."""
    return stated_mismatches(text, FIGURE2_SENTENCES)


def erosion_profile_mismatches(text: str, profile: Any) -> list[str]:
    """The App. G.1 / G.2 sentences, written from an erosion study profile's regimes (``g1_one_per_type``,
    ``g2_single_type``: batch size, stage count, the n=64 subset, capacity, evaluation interval), that the
    paper's text does not contain; ``params/consolidation/erosion_paper.yaml`` is such a profile."""
    g1, g2 = profile.regime("g1_one_per_type"), profile.regime("g2_single_type")
    rule = g1.steps if g1.steps is not None else profile.steps
    every = rule.get("every") if isinstance(rule, dict) else None
    sentences = {
        "G.1 stages": f"produced by a {g1.stages.count}-stage iterative consolidation run on ALFWorld",
        "G.1 batch": (
            f"a fresh mini-batch of  ${g1.batch_size}$  abstracts ( $1$  per task type, drawn from the  "
            f"$n{{=}}{g1.stages.per_type_limit}$  subset"
        ),
        "G.1 capacity": f"the memory capacity is {g1.capacity}.",
        "G.1 evaluation": f"We evaluate the consolidated memory at every {every} stages",
        "G.2 batch": (
            f"Each stage feeds the manager a mini-batch of  ${g2.batch_size}$  trajectories drawn from a single "
            "(randomly chosen) task type"
        ),
        "G.2 capacity": f"memory capacity is {g2.capacity} items",
    }
    rules = {"G.1 rule": (g1.stages.rule, "one_per_type"), "G.2 rule": (g2.stages.rule, "single_type")}
    problems = [f"{k}: the paper does not say {v!r}" for k, v in sentences.items() if v not in text]
    problems += [
        f"{k}: the profile samples {got!r}, App. G describes {want!r}"
        for k, (got, want) in rules.items()
        if got != want
    ]
    return problems


def _row(line: str) -> tuple[str, list[tuple[float | None, bool, bool, bool]]]:
    backbone, *cells = line.split("\t")
    out: list[tuple[float | None, bool, bool, bool]] = []
    for raw in cells:
        if raw.strip() == "—":
            out.append((None, False, False, False))
            continue
        m = _CELL.match(raw.strip())
        if m is None:
            raise ValueError(f"a Tables 2-3 cell the parser does not know: {raw!r} in row {backbone!r}")
        out.append((float(m.group(2)), bool(m.group(1)), bool(m.group(4)), bool(m.group(3))))
    return backbone, out


def table23_rows(text: str) -> dict[tuple[str, str], list[tuple[float | None, bool, bool, bool]]]:
    """(benchmark, backbone) -> the printed cells (value, bold, beaten, footnote) of Tables 2 and 3."""
    lines = text.splitlines()
    try:
        starts = {bench: lines.index(head) for bench, head in TABLE_BLOCKS.items()}
        starts["webshop"] = next(i for i, line in enumerate(lines) if line.startswith(WEBSHOP_CAPTION)) - 4
    except (ValueError, StopIteration):
        raise ValueError("the paper's text has no Tables 2-3 blocks where the parser looks for them") from None
    rows = {}
    for bench, start in starts.items():
        for line in lines[start : start + 7]:
            if "\t$" in line and not line.startswith(("Backbone", "\t")):
                backbone, cells = _row(line)
                rows[(bench, backbone)] = cells
    return rows


def table23_mismatches(text: str) -> list[str]:
    """Every Tables 2-3 cell where ``faulty_paper`` differs from the paper's text (or is missing on either side)."""
    parsed = table23_rows(text)
    records = {(r.benchmark, r.backbone, r.column): r for r in faulty_paper.table2() + faulty_paper.table3()}
    problems = []
    for (bench, backbone), cells in parsed.items():
        if len(cells) != len(faulty_paper.COLUMNS):
            problems.append(f"{bench} {backbone}: {len(cells)} cells printed, {len(faulty_paper.COLUMNS)} expected")
            continue
        for column, (value, bold, beaten, note) in zip(faulty_paper.COLUMNS, cells):
            rec = records.pop((bench, backbone, column), None)
            if rec is None:
                problems.append(f"{bench} {backbone} {column}: printed, but the kit has no record")
                continue
            kit = (rec.value, rec.bold, rec.beaten, bool(rec.note))
            if kit != (value, bold, beaten, note):
                problems.append(
                    f"{bench} {backbone} {column}: the paper prints (value, bold, (--), *) = "
                    f"{(value, bold, beaten, note)}, the kit records {kit}"
                )
    problems.extend(f"{b} {bb} {c}: recorded by the kit, not printed" for b, bb, c in records)
    return problems


# -- Table 4 (ARC-AGI Stream memory coverage) --------------------------------------------------------

TABLE4_CAPTION = "Table 4:"
_T4_CELL = re.compile(r"^\$(\\mathbf\{)?(\d+(?:\.\d+)?)\}?\$$")
_BUDGET = re.compile(r"^\$\\?\|B\\?\|\{=\}(\d+)\$$")  # "$\|B\|{=}8$" (Markdown-escaped bars) or "$|B|{=}8$"


def _table4_columns(budgets: str, regimes: str) -> list[tuple[int, str]]:
    """(|B|, regime) per data column: the budget header spans the columns up to the next budget."""
    budget_cells, regime_cells = budgets.split("\t")[1:], regimes.split("\t")[1:]
    columns, budget = [], None
    for j, regime in enumerate(regime_cells):
        head = budget_cells[j].strip() if j < len(budget_cells) else ""
        if head:
            m = _BUDGET.match(head)
            if m is None:
                raise ValueError(f"a Table 4 header cell the parser does not know: {head!r}")
            budget = int(m.group(1))
        if budget is None:
            raise ValueError(f"Table 4's column {j + 1} has no |B| header: {budgets!r}")
        columns.append((budget, regime.strip().lower()))
    return columns


def table4_cells(text: str) -> dict[tuple[int, str, str], tuple[float | None, bool]]:
    """(|B|, regime, metric) -> (value, bold) as Table 4 prints them ("—" is None)."""
    lines = text.splitlines()
    labels = {label: metric for metric, label in faulty_paper.TABLE4_LABELS.items()}
    caption = next((i for i, line in enumerate(lines) if line.startswith(TABLE4_CAPTION)), None)
    if caption is None:
        raise ValueError(f"the paper's text has no line starting {TABLE4_CAPTION!r}")
    block = [line for line in lines[max(0, caption - 8) : caption] if "\t" in line]
    head = [i for i, line in enumerate(block) if _BUDGET.match(line.split("\t")[1].strip() if "\t" in line else "")]
    if not head or head[0] + 1 >= len(block):
        raise ValueError("Table 4's |B| header is not where the parser looks for it (just above its caption)")
    columns = _table4_columns(block[head[0]], block[head[0] + 1])
    cells: dict[tuple[int, str, str], tuple[float | None, bool]] = {}
    for line in block[head[0] + 2 :]:
        label, *raw = line.split("\t")
        if label not in labels:
            raise ValueError(f"a Table 4 row the parser does not know: {label!r}")
        if len(raw) != len(columns):
            raise ValueError(f"Table 4 row {label!r}: {len(raw)} cells under {len(columns)} columns")
        for (budget, regime), cell in zip(columns, raw):
            if cell.strip() == "—":
                cells[(budget, regime, labels[label])] = (None, False)
                continue
            m = _T4_CELL.match(cell.strip())
            if m is None:
                raise ValueError(f"a Table 4 cell the parser does not know: {cell!r} in row {label!r}")
            cells[(budget, regime, labels[label])] = (float(m.group(2)), bool(m.group(1)))
    return cells


def table4_mismatches(text: str) -> list[str]:
    """Every Table 4 cell where ``faulty_paper.table4()`` (value, bold) or ``table4_frame()`` (value) differs
    from the paper's text, or exists on one side only."""
    printed = table4_cells(text)
    records = {(c.buffer, c.regime, c.metric): c for c in faulty_paper.table4()}
    frame = faulty_paper.table4_frame()
    problems = []
    for key in sorted(set(printed) | set(records), key=str):
        budget, regime, metric = key
        where = f"Table 4 {faulty_paper.TABLE4_LABELS.get(metric, metric)} |B|={budget} {regime.capitalize()}"
        if key not in records:
            problems.append(f"{where}: printed, but the kit has no record")
            continue
        if key not in printed:
            problems.append(f"{where}: recorded by the kit, not printed")
            continue
        kit = (records[key].value, records[key].bold)
        if kit != printed[key]:
            problems.append(f"{where}: the paper prints (value, bold) = {printed[key]}, the kit records {kit}")
        column = (f"|B|={budget}", regime.capitalize())
        label = faulty_paper.TABLE4_LABELS[metric]
        shown = frame.loc[label, column] if label in frame.index and column in frame.columns else "absent"
        shown = None if not isinstance(shown, str) and pd.isna(shown) else shown
        if shown != printed[key][0]:
            problems.append(f"{where}: the paper prints {printed[key][0]}, table4_frame() shows {shown}")
    return problems


# -- Tables 11 and 12 (App. G.2 collapse, App. I.1 Workflow-8 surgery) ------------------------------

#: each table's tab-separated header as printed, and the record field each printed column holds
TABLE11_HEADER = {
    "Rollout policy": "rollout",
    "no memory": "no_memory",
    "stage 168 (50 items)": "stage168",
    "stage 169 (1 item)": "stage169",
    "$\\Delta$": "delta",
}
TABLE12_HEADER = {
    "Rollout": "rollout",
    "Memory": "memory",
    "wins/50": "wins",
    "mean reward": "mean_reward",
    "mean steps": "mean_steps",
    "hit step cap": "hit_step_cap",
}
#: the "out of" of the counts each table prints (n episodes per cell, stated in its caption)
EPISODES_PER_CELL = {"Table 11": 48, "Table 12": 50}
_MATH_INT = re.compile(r"^\$(-?\d+)\$$")


def _count(raw: str, source: str) -> int:
    """ "15/48" -> 15, checking the denominator; "$-6$" -> -6."""
    raw = raw.strip()
    if "/" in raw:
        wins, out_of = raw.split("/")
        if int(out_of) != EPISODES_PER_CELL[source]:
            raise ValueError(f"{source} prints {raw!r}: out of {out_of}, its caption says {EPISODES_PER_CELL[source]}")
        return int(wins)
    m = _MATH_INT.match(raw)
    if m is None:
        raise ValueError(f"a {source} count the parser does not know: {raw!r}")
    return int(m.group(1))


def _tab_table(text: str, header: dict[str, str], source: str) -> list[dict[str, str]]:
    """The rows under ``header``'s tab-separated line, up to the first blank line, as field -> printed cell."""
    lines = text.splitlines()
    wanted = "\t".join(header)
    start = next((i for i, line in enumerate(lines) if line.strip() == wanted), None)
    if start is None:
        raise ValueError(f"the paper's text has no tab-separated {source} header {wanted!r}")
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = line.split("\t")
        if len(cells) != len(header):
            raise ValueError(f"{source} row {line!r}: {len(cells)} cells under {len(header)} columns")
        rows.append(dict(zip(header.values(), (c.strip() for c in cells))))
    return rows


def table11_rows(text: str) -> dict[str, dict[str, int]]:
    """rollout -> {no_memory, stage168, stage169, delta} as Table 11 prints them (wins out of 48)."""
    return {
        row["rollout"]: {k: _count(v, "Table 11") for k, v in row.items() if k != "rollout"}
        for row in _tab_table(text, TABLE11_HEADER, "Table 11")
    }


def table12_rows(text: str) -> dict[tuple[str, str], dict[str, float]]:
    """(rollout, memory) -> {wins, mean_reward, mean_steps, hit_step_cap} as Table 12 prints them."""
    out = {}
    for row in _tab_table(text, TABLE12_HEADER, "Table 12"):
        out[(row["rollout"], row["memory"])] = {
            "wins": _count(row["wins"], "Table 12"),
            "mean_reward": float(row["mean_reward"]),
            "mean_steps": float(row["mean_steps"]),
            "hit_step_cap": _count(row["hit_step_cap"], "Table 12"),
        }
    return out


def _record_mismatches(source: str, printed: dict[Any, dict[str, float]], records: dict[Any, Any]) -> list[str]:
    problems = [f"{source} {key}: printed, but the kit has no record" for key in printed if key not in records]
    problems += [f"{source} {key}: recorded by the kit, not printed" for key in records if key not in printed]
    for key in printed.keys() & records.keys():
        for field, value in printed[key].items():
            kit = getattr(records[key], field)
            if kit != value:
                problems.append(f"{source} {key} {field}: the paper prints {value}, the kit records {kit}")
    return problems


def table11_mismatches(text: str) -> list[str]:
    """Every Table 11 cell where ``faulty_paper.table11()`` differs from the paper's text."""
    return _record_mismatches("Table 11", table11_rows(text), {r.rollout: r for r in faulty_paper.table11()})


def table12_mismatches(text: str) -> list[str]:
    """Every Table 12 cell where ``faulty_paper.table12()`` differs from the paper's text."""
    records = {(r.rollout, r.memory): r for r in faulty_paper.table12()}
    return _record_mismatches("Table 12", table12_rows(text), records)


def taxonomy_mismatches(
    text: str, families: Sequence[tuple[str, str, str]], skills: Sequence[tuple[str, str]]
) -> list[str]:
    """Tables 5 and 6 (App. A) against the generator's families (strategy_id, selects by, definition) and skills
    (skill_id, definition): every row as printed, tab-separated, in the paper's order. Taken as plain tuples so
    the analysis layer does not import the ARC study."""
    lines = text.splitlines()
    problems = []
    for name, header, rows in (
        ("Table 5", "strategy_id\tSelects by\tDefinition", families),
        ("Table 6", "skill_id\tDefinition", skills),
    ):
        if header not in lines:
            problems.append(f"{name}: the header {header!r} is not in the text")
            continue
        start = lines.index(header) + 1
        printed = [tuple(line.split("\t")) for line in lines[start : start + len(rows) + 1] if "\t" in line]
        kit = [tuple(str(x).replace("'", "’") for x in r) for r in rows]
        for i, row in enumerate(kit):
            got = printed[i] if i < len(printed) else None
            if got != row:
                problems.append(f"{name} row {i + 1}: the paper prints {got}, the kit has {row}")
        if len(printed) > len(kit):
            problems.append(f"{name}: the paper prints more rows than the kit's {len(kit)}: {printed[len(kit) :]}")
    return problems


# -- one call per notebook ---------------------------------------------------------------------------


class PaperTextMismatch(AssertionError):
    """The kit's records differ from the paper's own text; ``problems`` lists every difference."""

    def __init__(self, path: Path, problems: Sequence[str]):
        self.path, self.problems = path, list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} difference(s) between the kit's records and {path}:\n{lines}")


#: every check a notebook can ask ``check_paper_text`` for: name -> (what it covers, as the notebook says it)
PAPER_CHECKS = {
    "table4": "Table 4 (every cell, value and bold)",
    "figure2": "Fig. 2's stated accuracies (§4.1)",
    "taxonomy": "Tables 5-6 (the generator's families and skills)",
    "table12": "Table 12 (every cell)",
    "figure6": "Fig. 6's numbers (§6.1: steps, examples, fresh examples per step)",
    "figure1": "Fig. 1's stated values (§4.1)",
    "figure16": "Fig. 16's stated values (App. G.1)",
    "switch": "Figs. 10 and 18's stated values (§6.2)",
    "table11": "Table 11 (App. G.2's collapse)",
    "erosion_profile": "the erosion profile's App. G schedule",
    "table23": 'Tables 2 and 3 (every cell: value, bold, "(--)", "*")',
}
#: the checks each faulty-memories notebook runs
NOTEBOOK_CHECKS = {
    "09_arc_stream": ("table4", "figure2", "taxonomy"),
    "10_arc_memory_anatomy": ("table12", "figure6"),
    "11_consolidation_utility": ("figure1", "figure16", "switch", "table11", "erosion_profile"),
    "12_trajectory_logs": ("table23",),
}


def _rows(table: Any) -> list[tuple[Any, ...]]:
    """A table's rows as plain tuples: a DataFrame's (its columns in order, no index), else the rows as given."""
    if isinstance(table, pd.DataFrame):
        return list(table.itertuples(index=False, name=None))
    return [tuple(r) for r in table]


def paper_text_mismatches(
    text: str,
    checks: Sequence[str],
    *,
    families: Any = None,
    skills: Any = None,
    erosion_profile: Any = None,
) -> list[str]:
    """Every difference the named ``checks`` (keys of ``PAPER_CHECKS``) find between the kit and ``text``.
    "taxonomy" needs ``families`` and ``skills`` (as ``taxonomy_mismatches``, or the DataFrames of
    ``arc.analysis.taxonomy_tables``, read row by row); "erosion_profile" needs the
    erosion study profile, or a function of no argument returning it (called only here, when there is a text)."""
    unknown = [c for c in checks if c not in PAPER_CHECKS]
    if unknown:
        raise KeyError(f"no paper-text check {unknown}; known: {sorted(PAPER_CHECKS)}")
    problems: list[str] = []
    for check in checks:
        if check == "table4":
            problems += table4_mismatches(text)
        elif check == "figure2":
            problems += figure2_mismatches(text)
        elif check == "taxonomy":
            if families is None or skills is None:
                raise ValueError("the 'taxonomy' check needs the generator's families and skills (Tables 5 and 6)")
            problems += taxonomy_mismatches(text, _rows(families), _rows(skills))
        elif check == "table12":
            problems += table12_mismatches(text)
        elif check == "figure6":
            problems += stated_mismatches(text, FIGURE6_SENTENCES)
        elif check == "figure1":
            problems += stated_mismatches(text, FIGURE1_SENTENCES)
        elif check == "figure16":
            problems += stated_mismatches(text, FIGURE16_SENTENCES)
        elif check == "switch":
            problems += stated_mismatches(text, SWITCH_SENTENCES)
        elif check == "table11":
            problems += table11_mismatches(text)
        elif check == "erosion_profile":
            if erosion_profile is None:
                raise ValueError("the 'erosion_profile' check needs the erosion study profile (App. G.1 / G.2)")
            profile = erosion_profile() if callable(erosion_profile) else erosion_profile
            problems += erosion_profile_mismatches(text, profile)
        elif check == "table23":
            problems += table23_mismatches(text)
    return problems


def check_paper_text(
    root: str | Path,
    notebook: str,
    *,
    families: Any = None,
    skills: Any = None,
    erosion_profile: Any = None,
    show: bool = True,
) -> Path | None:
    """A faulty-memories notebook's checks against the paper's own text (``NOTEBOOK_CHECKS[notebook]``), one
    call: the paper's path when every check passes (printed: "checked against <path>: <what>"), None when the
    text is not beside the checkout (printed: nothing to check against). A difference raises
    ``PaperTextMismatch`` listing each. ``families``, ``skills``, ``erosion_profile``: as
    ``paper_text_mismatches``."""
    if notebook not in NOTEBOOK_CHECKS:
        raise KeyError(f"no paper-text checks for notebook {notebook!r}; known: {sorted(NOTEBOOK_CHECKS)}")
    checks = NOTEBOOK_CHECKS[notebook]
    covered = "; ".join(PAPER_CHECKS[c] for c in checks)
    path = find_paper(root)
    if path is None:
        if show:
            print(f"the paper's text is not beside this checkout: nothing to check {covered} against")
        return None
    problems = paper_text_mismatches(
        path.read_text(encoding="utf-8"), checks, families=families, skills=skills, erosion_profile=erosion_profile
    )
    if problems:
        raise PaperTextMismatch(path, problems)
    if show:
        print(f"checked against {path}: {covered}")
    return path
