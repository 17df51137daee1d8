"""The numbers "Useful Memories Become Faulty When Continuously Updated by LLMs" reports, as reference data.

Source: ``shared/paper/faulty-memories-paper.md``. Every record names where its value is printed; notebooks show
"paper vs. this run" from these records and copy none. Cells the paper marks "—" are ``None``. Covered: Tables
2-4, 11 and 12, and ``STATED`` for numbers the text gives without a table; where the paper contradicts itself
(the 19 ARC-AGI problems' 54%) the record says which reading it keeps.

What each table's fields mean: docs/faulty-memories.md, "The reference records"; the checks against the
paper's text are ``analysis.faulty_paper_text``. The consistency checks of notebooks 09-12 (``check_*``: the
tables a notebook shows agree with each other and with these records) are here too, raising ``ConsistencyError``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

#: Tables 2 and 3 column ids, in the paper's order, and their printed labels
COLUMNS = ("no_mem", "all", "fs64", "fs32", "fs16", "incr_keep", "one_pass_keep", "ace_gt", "ace", "awm", "dc")
COLUMN_LABELS = {
    "no_mem": "NoMem",
    "all": "All",
    "fs64": "FS=64",
    "fs32": "FS=32",
    "fs16": "FS=16",
    "incr_keep": "Incr. Keep",
    "one_pass_keep": "One-Pass Keep",
    "ace_gt": "ACE_GT",
    "ace": "ACE",
    "awm": "AWM",
    "dc": "DC",
}
#: the "Trajectory Logs (Summarized)" group of Tables 2 and 3 (episodic-only baselines)
TRAJECTORY_LOG_COLUMNS = ("all", "fs64", "fs32", "fs16", "incr_keep", "one_pass_keep")
#: the consolidators (lesson-style memory methods)
CONSOLIDATOR_COLUMNS = ("ace_gt", "ace", "awm", "dc")


@dataclass(frozen=True)
class Reported:
    """One cell of Table 2 or 3."""

    source: str  # "Table 2", "Table 3"
    benchmark: str  # "appworld", "alfworld", "webshop"
    metric: str  # "TGC %", "task success %", "mean reward x100"
    backbone: str  # as printed, e.g. "GPT-5.4-Mini"
    column: str  # one of COLUMNS
    value: float | None  # None: "—" (not measured)
    bold: bool = False  # best in its row
    beaten: bool = False  # red "(--)": beaten by a trajectory-log baseline of the same row
    note: str = ""

    @property
    def label(self) -> str:
        return COLUMN_LABELS[self.column]


def _cells(source: str, benchmark: str, metric: str, rows: dict[str, list[object]]) -> list[Reported]:
    """Rows as printed: a number, None ("—"), or (number, flags) with flags from "b" (bold),
    "x" (red "(--)" marker) and "*" (Table 3's footnote)."""
    out = []
    for backbone, values in rows.items():
        if len(values) != len(COLUMNS):
            raise AssertionError(f"{source} {benchmark} {backbone}: {len(values)} cells, expected {len(COLUMNS)}")
        for column, cell in zip(COLUMNS, values):
            value, flags = cell if isinstance(cell, tuple) else (cell, "")  # type: ignore[misc]
            out.append(
                Reported(
                    source,
                    benchmark,
                    metric,
                    backbone,
                    column,
                    None if value is None else float(value),  # type: ignore[arg-type]
                    bold="b" in flags,
                    beaten="x" in flags,
                    note="evaluated by GPT-5-Mini (Table 3 footnote *)" if "*" in flags else "",
                )
            )
    return out


# Table 2, top: AppWorld, Task Goal Completion (%)
_T2_APPWORLD = {
    "Qwen3.5-27B": [66, 73, 66, 65, 68, 69, 69, (76, "b"), (65, "x"), (68, "x"), (68, "x")],
    "GPT-5-Mini": [14, (23, "b"), 15, 20, 16, 15, 19, (10, "x"), (13, "x"), (19, "x"), (8, "x")],
    "GPT-5.4-Mini": [52, 59, 58, 58, 54, (64, "b"), 57, (57, "x"), (52, "x"), (52, "x"), (52, "x")],
    "Claude-Haiku-4.5": [68, 66, 69, 69, 70, 70, 59, (60, "x"), (74, "b"), (68, "x"), (64, "x")],
}
# Table 2, bottom: ALFWorld, task success (%)
_T2_ALFWORLD = {
    "GPT-5.4-Mini": [54, 90, (92, "b"), 81, 77, 85, 81, (85, "x"), (79, "x"), (65, "x"), (58, "x")],
    "GPT-5-Mini": [52, (81, "b"), (81, "b"), 77, 67, 75, 65, (56, "x"), (60, "x"), (48, "x"), (50, "x")],
    "Claude-Haiku-4.5": [79, (92, "b"), 85, 77, 73, 79, 90, (83, "x"), (73, "x"), (81, "x"), (81, "x")],
}
# Table 3: WebShop, mean reward x 100 ("00*" and "03*" were evaluated by GPT-5-Mini)
_T3_WEBSHOP = {
    "GPT-5.4-Mini": [18, 47, 44, 49, (51, "b"), 40, 41, None, (0, "*"), (23, "x"), (3, "*")],
    "GPT-5-Mini": [39, 53, 41, (63, "b"), 49, 49, 50, None, None, (59, "x"), None],
    "Claude-Haiku-4.5": [19, 59, (63, "b"), 55, 49, 54, 54, None, None, (32, "x"), None],
}


def table2() -> list[Reported]:
    """Table 2: AppWorld TGC (%) and ALFWorld task success (%), backbone x column."""
    return _cells("Table 2", "appworld", "TGC %", _T2_APPWORLD) + _cells(
        "Table 2", "alfworld", "task success %", _T2_ALFWORLD
    )


def table3() -> list[Reported]:
    """Table 3: WebShop mean reward x 100, backbone x column."""
    return _cells("Table 3", "webshop", "mean reward x100", _T3_WEBSHOP)


def cell(benchmark: str, backbone: str, column: str) -> Reported:
    """One cell of Table 2 (AppWorld, ALFWorld) or Table 3 (WebShop); KeyError naming what exists."""
    for rec in table2() + table3():
        if (rec.benchmark, rec.backbone, rec.column) == (benchmark, backbone, column):
            return rec
    known = sorted({(r.benchmark, r.backbone) for r in table2() + table3()})
    raise KeyError(f"no cell {benchmark!r} x {backbone!r} x {column!r}; rows: {known}; columns: {COLUMNS}")


def tables23_frame(records: list[Reported] | None = None) -> pd.DataFrame:
    """Tables 2 and 3 as printed: one row per (benchmark, backbone), one column per method label."""
    records = table2() + table3() if records is None else records
    rows: dict[tuple[str, str, str], dict[str, float | None]] = {}
    for r in records:
        rows.setdefault((r.source, r.benchmark, r.backbone), {})[r.label] = r.value
    wide = pd.DataFrame.from_dict(rows, orient="index").reindex(columns=[COLUMN_LABELS[c] for c in COLUMNS])
    wide.index = pd.MultiIndex.from_tuples(wide.index, names=["source", "benchmark", "backbone"])
    return wide


# -- Table 4: memory coverage (ARC-AGI Stream, GT source) -----------------------------------------

TABLE4_METRICS = ("covered", "fused", "buffer_size")
TABLE4_LABELS = {"covered": "Avg. Covered", "fused": "Avg. Fused", "buffer_size": "Buffer Size"}


@dataclass(frozen=True)
class CoverageCell:
    """One cell of Table 4: |B| (the paper's budget) x regime x metric."""

    buffer: int  # |B| = 1 or 8
    regime: str  # "auto" | "force"
    metric: str  # one of TABLE4_METRICS
    value: float | None  # None: "—" (Force keeps no episodic entry)
    bold: bool = False
    source: str = "Table 4"


_T4 = {
    (1, "auto"): (1.33, 1.00, 3.33),
    (1, "force"): (1.67, 1.04, None),
    (8, "auto"): (2.17, 1.06, 50.00),
    (8, "force"): (5.00, 1.20, None),
}


def table4() -> list[CoverageCell]:
    """Table 4 (Memory Coverage). Note: the reported buffer sizes (3.33 at |B| = 1, 50.00 at |B| = 8)
    exceed |B|, so |B| cannot be a hard cap on the episodic buffer's size between steps; the paper
    does not define it further (§6.1 speaks of "8 fresh examples" per Force step)."""
    out = []
    for (buffer, regime), values in _T4.items():
        for metric, value in zip(TABLE4_METRICS, values):
            bold = buffer == 8 and regime == "force" and metric in ("covered", "fused")
            out.append(CoverageCell(buffer, regime, metric, value, bold))
    return out


def table4_frame() -> pd.DataFrame:
    """Table 4 as printed: rows Avg. Covered / Avg. Fused / Buffer Size, columns (|B|, regime)."""
    rows = {}
    for c in table4():
        rows.setdefault(TABLE4_LABELS[c.metric], {})[(f"|B|={c.buffer}", c.regime.capitalize())] = c.value
    df = pd.DataFrame(rows).T
    df.columns = pd.MultiIndex.from_tuples(df.columns, names=["|B|", "regime"])
    return df


# -- Tables 11 and 12 ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SurgeryRow:
    """Table 12 (App. I.1): the WebShop memory with and without Workflow 8, n = 50 episodes."""

    rollout: str
    memory: str  # "full (8 workflows)" | "minus W8 (7 workflows)"
    wins: int  # out of 50
    mean_reward: float
    mean_steps: float
    hit_step_cap: int  # out of 50
    source: str = "Table 12"


def table12() -> list[SurgeryRow]:
    return [
        SurgeryRow("gpt-5.4-mini", "full (8 workflows)", 7, 0.23, 12.4, 0),
        SurgeryRow("gpt-5.4-mini", "minus W8 (7 workflows)", 14, 0.37, 11.4, 0),
        SurgeryRow("gpt-5-mini", "full (8 workflows)", 18, 0.49, 18.2, 22),
        SurgeryRow("gpt-5-mini", "minus W8 (7 workflows)", 23, 0.59, 15.8, 17),
    ]


def table12_frame() -> pd.DataFrame:
    df = pd.DataFrame([asdict(r) for r in table12()])
    full = df[df["memory"].str.startswith("full")].set_index("rollout")
    minus = df[df["memory"].str.startswith("minus")].set_index("rollout")
    df["delta_wins"] = df["rollout"].map(minus["wins"] - full["wins"]).where(df["memory"].str.startswith("minus"))
    return df


@dataclass(frozen=True)
class CollapseRow:
    """Table 11 (App. G.2): one consolidation step (50 items -> 1) on ALFWorld, wins out of 48."""

    rollout: str
    no_memory: int
    stage168: int  # 50 items
    stage169: int  # 1 item
    delta: int
    source: str = "Table 11"


def table11() -> list[CollapseRow]:
    return [
        CollapseRow("Qwen3.5-4B", 15, 35, 29, -6),
        CollapseRow("Qwen3.5-9B", 15, 36, 26, -10),
        CollapseRow("Qwen3.5-27B", 19, 37, 24, -13),
    ]


def table11_frame() -> pd.DataFrame:
    """Table 11 as printed: wins/48 without memory, at stage 168 (50 items) and 169 (1 item), and the change."""
    return pd.DataFrame([asdict(r) for r in table11()])


# -- numbers the text states -----------------------------------------------------------------------


@dataclass(frozen=True)
class Stated:
    """A number stated in the text (or a figure caption), with where it is stated."""

    key: str
    value: float
    unit: str
    source: str  # e.g. "§4.1, Fig. 2"
    text: str  # what the number is, in the paper's words where possible
    note: str = ""


_STATED = (
    # §4.1 / Fig. 2: in-distribution regression on the 19-problem ARC-AGI slice (GPT-5.4, GT solutions)
    Stated(
        "arc19_no_memory_accuracy", 100.0, "%", "§4.1, Fig. 2", "GPT-5.4 accuracy on the 19-problem slice, no memory"
    ),
    Stated(
        "arc19_after_consolidation_accuracy",
        54.0,
        "%",
        "§4.1, Fig. 2",
        "GPT-5.4 accuracy on the same 19 problems after streaming them (GT solutions) through consolidation",
        note="§1 states the same as 'fails on 46% of them'; the abstract says 'fails on 54%' (the paper is inconsistent)",
    ),
    Stated("arc19_slice_size", 19, "problems", "§4.1, Fig. 2", "problems in the slice"),
    # §4.1 / Fig. 1(b): AWM on WebShop
    Stated("webshop_awm_8_examples", 0.64, "score", "§4.1, Fig. 1(b)", "AWM at 8 examples"),
    Stated("webshop_awm_128_examples", 0.20, "score", "§4.1, Fig. 1(b)", "AWM at 128 examples"),
    Stated("webshop_no_memory", 0.20, "score", "§4.1, Fig. 1(b)", "no-memory baseline"),
    # §4.1 / Fig. 1(a): ScienceWorld with CLIN
    Stated("sciworld_batch_size", 4, "trajectories", "§4.1, Fig. 1(a)", "trajectories per update batch"),
    Stated("sciworld_peak_step", 20, "step", "§4.1, Fig. 1(a)", "the score peaks near step 20"),
    Stated("sciworld_last_step", 100, "step", "§4.1, Fig. 1(a)", "and declines through step 100"),
    # §5 / Fig. 5, App. K.1
    Stated("arc_stream_steps", 400, "steps", "§5, Fig. 5", "training steps of the self-solve stream (Auto vs Force)"),
    Stated("arc_heldout_tasks", 50, "tasks", "Table 1, Figs. 7, 9, Table 4", "held-out tasks of the GT stream"),
    # §6.1 / Fig. 6, Fig. 7(a)
    Stated(
        "segmentation_steps", 71, "steps", "§6.1, Fig. 6", "steps before the model admits all six types into the buffer"
    ),
    Stated("segmentation_examples", 568, "examples", "§6.1, Fig. 6", "examples seen by then (8 per step)"),
    Stated("problem_types", 6, "types", "§6.1, App. A", "problem types (families)"),
    Stated("force_fresh_examples_per_step", 8, "examples", "§6.1", "fresh examples per Force step"),
    # §6.2 / Fig. 10, App. K.2 / Fig. 18
    Stated("cumulative_behind_fresh", 203, "points", "§6.2, Fig. 10", "Cumulative ends +203 points behind Fresh"),
    Stated("switch_tasks", 15, "tasks", "§6.2, Fig. 10", "ScienceWorld task-switch sequence length"),
    Stated("overgeneralized_ratio", 5, "x", "§6.2, App. K.2", "over-generalized entries, Cumulative vs Fresh (~5x)"),
    Stated("garbage_ratio", 20, "x", "§6.2, App. K.2", "garbage entries, Cumulative vs Fresh (~20x)"),
    # App. D.5
    Stated("d5_passes", 10, "passes", "App. D.5", "19 tasks revisited 10 times (190 steps) collapse to one entry"),
    Stated(
        "d5_entries_after_250", 2, "entries", "App. D.5", "entries after streaming 250 tasks once (both group-by-shape)"
    ),
    Stated("d5_solved_without_memory", 10, "of 10 test grids", "App. D.5, Fig. 15", "held-out task without memory"),
    Stated(
        "d5_solved_with_memory", 2, "of 10 test grids", "App. D.5, Fig. 15", "the same task with the collapsed memory"
    ),
    # App. G.1 / Fig. 16 (ALFWorld erosion, wins out of 48)
    Stated("g1_no_memory_4b", 15, "wins/48", "App. G.1, Fig. 16", "Qwen3.5-4B without memory"),
    Stated("g1_no_memory_27b", 19, "wins/48", "App. G.1, Fig. 16", "Qwen3.5-27B without memory"),
    Stated("g1_peak_4b_9b", 35, "wins/48", "App. G.1, Fig. 16", "4B and 9B peak at stage 20"),
    Stated("g1_stage200_27b", 22, "wins/48", "App. G.1, Fig. 16", "27B at stage 200"),
    # App. F.4
    Stated(
        "appworld_training_tgc", 61.4, "%", "App. F.4", "mean TGC of the 140 AppWorld training trajectories (86/140)"
    ),
)
STATED: dict[str, Stated] = {s.key: s for s in _STATED}

#: what the paper states about ARC-AGI Stream figures without printing their values
FIGURE5_STATEMENT = (
    "Paper (Fig. 5, 400 self-solve steps): Auto, which keeps episodes by default and consolidates sparingly, "
    "generally outperforms Force on both backbones tested; per the abstract, Auto doubles Force's accuracy."
)
FIGURE9_STATEMENT = (
    "Paper (Fig. 9(a), GT stream, 50 held-out tasks): Episodic Management Only matches or exceeds Auto; "
    "abstract-only memory collapses accuracy back to the no-memory baseline."
)
FIGURE7A_STATEMENT = (
    "Paper (Fig. 7(a)): under Force the model routinely merges episodes across problem classes "
    "(misclassification count: memory actions combining episodes of two or more families)."
)
FIGURE7B_STATEMENT = (
    "Paper (Fig. 7(b)): under Auto the agent saturates the episodic buffer quickly at both budgets "
    "while keeping the abstract store sparse."
)
FIGURE6_STATEMENT = (
    "Paper (§6.1, Fig. 6): under Auto the model converges to a clean episodic store covering all 6 problem "
    "types, but only after 71 steps (568 examples, 8 per step)."
)
JUDGE_STATEMENT = (
    "Paper (§6.2, App. K.2, ScienceWorld task switching): Cumulative accumulates over-generalized entries "
    "at ~5x and garbage entries at ~20x Fresh's rate (LLM judge)."
)


def stated(key: str) -> Stated:
    if key not in STATED:
        raise KeyError(f"no stated number {key!r}; known: {sorted(STATED)}")
    return STATED[key]


def stated_frame() -> pd.DataFrame:
    return pd.DataFrame([asdict(s) for s in _STATED]).set_index("key")


# -- Table 1: the paper's settings, and the kit's profile for each ------------------------------------


@dataclass(frozen=True)
class Setting:
    """One row of Table 1 (the settings used across the paper) and the kit profile that runs it."""

    benchmark: str
    setting: str
    figures: str
    kit_profile: str


def table1() -> list[Setting]:
    return [
        Setting(
            "ALFWorld",
            "GT expert trajectories (128 per type, 6 types)",
            "Figs. 3, 4",
            "params/consolidation/paper.yaml",
        ),
        Setting(
            "ScienceWorld",
            "offline task stream, batch size 4 (GPT5.4-mini)",
            "Fig. 1(a)",
            "params/consolidation/scienceworld.yaml",
        ),
        Setting(
            "ScienceWorld", "self-solve task-switch sequence", "Fig. 10", "params/consolidation/task_switch_paper.yaml"
        ),
        Setting("WebShop", "AWM, 50-episode held-out eval", "Fig. 1(b)", "params/consolidation/webshop_awm_paper.yaml"),
        Setting(
            "AppWorld", "AWM with trajectories from AgentGym", "Table 2", "(none shipped: pool.runs of AppWorld runs)"
        ),
        Setting(
            "ARC-AGI", "subsets for individual experiments", "Figs. 11, 8(b), 8(a), 2", "params/arc/probes_paper.yaml"
        ),
        Setting(
            "ARC-AGI",
            "stream: offline GT solutions; eval on 50 held-out tasks",
            "Figs. 9, 7; Table 4",
            "params/arc/paper.yaml",
        ),
        Setting("ARC-AGI", "stream: self-solve, 400 steps", "Fig. 5", "params/arc/paper.yaml"),
    ]


def table1_frame() -> pd.DataFrame:
    return pd.DataFrame([asdict(s) for s in table1()])


# -- consistency checks of notebooks 09-12 ---------------------------------------------------------
# Each ``*_problems`` function takes the tables a notebook shows (plain DataFrames, so this layer imports no
# study) and returns one sentence per disagreement, naming it; each ``check_*`` runs a notebook's checks and
# raises ``ConsistencyError`` listing every problem. An empty table (mode "paper", no study) has nothing to
# disagree about.


class ConsistencyError(AssertionError):
    """Two tables a notebook shows, or a table and the kit's records, disagree; ``problems`` names each."""

    def __init__(self, what: str, problems: list[str]):
        self.what, self.problems = what, list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{what}: {len(self.problems)} inconsistenc{'y' if len(problems) == 1 else 'ies'}:\n{lines}")


def raise_problems(what: str, problems: list[str]) -> None:
    """Raise ``ConsistencyError`` naming ``what`` was checked when ``problems`` holds any."""
    if problems:
        raise ConsistencyError(what, problems)


def _column(frame: pd.DataFrame, col: str) -> pd.Series:
    return frame[col] if col in frame.columns else pd.Series([], dtype=object)


def _set(frame: pd.DataFrame, col: str) -> set[Any]:
    return set(_column(frame, col).dropna().tolist())


# 09: the ARC-AGI Stream


def regression_problems(regression: pd.DataFrame) -> list[str]:
    """Fig. 2's table (``arc.analysis.regression_table``) opens with the paper's row: its no-memory and
    after-stream accuracies must be the kit's records (``stated``)."""
    if regression.empty:
        return ["Fig. 2's table has no rows: its first row should be the paper's"]
    first = regression.iloc[0]
    problems = []
    for col, key in (("no_memory", "arc19_no_memory_accuracy"), ("with_memory", "arc19_after_consolidation_accuracy")):
        if first.get(col) != stated(key).value:
            problems.append(
                f"Fig. 2's paper row shows {col} = {first.get(col)}, the record {key} is {stated(key).value}"
            )
    return problems


def coverage_problems(coverage: pd.DataFrame, results: pd.DataFrame) -> list[str]:
    """The coverage table (per-step coverage averaged over the snapshots) has one row set per stream condition
    of the results (no-memory excluded), and every stream sits under a Table 4 |B| the results hold."""
    streams = set(results.loc[_column(results, "regime") != "none", "condition"]) if not results.empty else set()
    shown = _set(coverage, "condition")
    problems = []
    if shown != streams:
        problems.append(
            f"the coverage table's conditions {sorted(shown)} are not the study's stream conditions {sorted(streams)}"
            f" (only in coverage: {sorted(shown - streams)}; only in results: {sorted(streams - shown)})"
        )
    extra = _set(coverage, "table4_b") - _set(results, "table4_b")
    if extra:
        problems.append(f"the coverage table places streams under |B| {sorted(extra)}, which no result row has")
    return problems


#: the memory sources App. K.1's ablation reads (Abstract Only, Episodic Only, both)
SOURCE_ARMS = ("abstract_only", "episodic_only", "both")


def source_ablation_problems(arms: pd.DataFrame) -> list[str]:
    """Every arm of the source ablation's table is one of ``SOURCE_ARMS``."""
    unknown = _set(arms, "arm") - set(SOURCE_ARMS)
    return [f"the source ablation shows arm(s) {sorted(unknown)}; known: {list(SOURCE_ARMS)}"] if unknown else []


def check_arc_stream(
    *, regression: pd.DataFrame, results: pd.DataFrame, coverage: pd.DataFrame, arms: pd.DataFrame
) -> None:
    """Notebook 09's checks: ``regression_problems``, ``coverage_problems``, ``source_ablation_problems``."""
    raise_problems(
        "notebook 09 (ARC-AGI Stream)",
        regression_problems(regression) + coverage_problems(coverage, results) + source_ablation_problems(arms),
    )


# 10: the memory's anatomy and the single-family probes


def table12_frame_problems(frame: pd.DataFrame) -> list[str]:
    """The Table 12 frame a notebook shows holds the records' wins, row by row."""
    shown, kept = _column(frame, "wins").tolist(), [r.wins for r in table12()]
    return [] if shown == kept else [f"the shown Table 12 has wins {shown}, the records {kept}"]


def misclassification_problems(steps: pd.DataFrame, misclassifications: pd.DataFrame) -> list[str]:
    """Fig. 7(a)'s totals (``arc.analysis.misclassification_table``) are the per-step counts of the step
    table added up per condition (and seed, in a study of several)."""
    if steps.empty and misclassifications.empty:
        return []
    keys = ["seed", "condition"] if "seed" in steps.columns and "seed" in misclassifications.columns else ["condition"]
    per_step = steps.groupby(keys, as_index=False)["misclassified"].sum()
    totals = misclassifications.merge(per_step, on=keys, how="left", suffixes=("", "_per_step"))
    totals = totals.fillna({"misclassified_per_step": 0})
    wrong = totals[totals["misclassified"] != totals["misclassified_per_step"]]
    return [
        f"{dict(zip(keys, (getattr(r, k) for k in keys)))}: Fig. 7(a) shows {r.misclassified} misclassified "
        f"actions, the steps add up to {r.misclassified_per_step}"
        for r in wrong.itertuples(index=False)
    ]


def lineage_problems(steps: pd.DataFrame, lineage: Any) -> list[str]:
    """A study whose abstract store ever held an entry has a lineage to show (``lineage`` is not None)."""
    entries = _column(steps, "abstract_entries")
    if lineage is None and bool((entries != 0).any()):
        return [f"the abstract store held up to {int(entries.max())} entries, yet no lineage example was found"]
    return []


def check_arc_anatomy(
    *, table12: pd.DataFrame, steps: pd.DataFrame, misclassifications: pd.DataFrame, lineage: Any
) -> None:
    """Notebook 10's checks of its study tables: ``table12_frame_problems``, ``misclassification_problems``,
    ``lineage_problems``."""
    raise_problems(
        "notebook 10 (memory anatomy)",
        table12_frame_problems(table12)
        + misclassification_problems(steps, misclassifications)
        + lineage_problems(steps, lineage),
    )


def probe_problems(
    probes: pd.DataFrame, overfit: pd.DataFrame, overfit_summary: pd.DataFrame, misgroup: pd.DataFrame
) -> list[str]:
    """The single-family probes' tables: every probe row is one evaluation of its whole set (0 <= passed <=
    tasks, tasks > 0), Fig. 11's summary reads the last cycle of its table, and no misclassification count of a
    stream run alone is negative."""
    problems = []
    if not probes.empty:
        bad = probes[(probes["n_passed"] > probes["n_tasks"]) | (probes["n_tasks"] <= 0)]
        problems += [f"probe row {r.Index}: {r.n_passed} passed of {r.n_tasks} tasks" for r in bad.itertuples()]
    if not overfit.empty:
        last = overfit[overfit["cycle"] == overfit["cycle"].max()].set_index(["regime", "eval_kind"])["accuracy_pct"]
        for r in overfit_summary.itertuples(index=False):
            shown = last.get((r.regime, r.eval_kind))
            if shown != r.last_cycle_pct:
                problems.append(
                    f"Fig. 11 {r.regime} / {r.eval_kind}: the summary's last cycle is {r.last_cycle_pct}, "
                    f"the table's is {shown}"
                )
    if not misgroup.empty:
        alone = misgroup[misgroup["streamed"] != "mixed"]
        negative = alone[alone["misclassified"] < 0]
        problems += [f"Fig. 8(a) {r.stream}: {r.misclassified} misclassified actions" for r in negative.itertuples()]
    return problems


def check_arc_probes(
    *, probes: pd.DataFrame, overfit: pd.DataFrame, overfit_summary: pd.DataFrame, misgroup: pd.DataFrame
) -> None:
    """Notebook 10's checks of its probe tables (``probe_problems``)."""
    raise_problems("notebook 10 (single-family probes)", probe_problems(probes, overfit, overfit_summary, misgroup))


# 11: consolidation utility


def seed_problems(seed_means: pd.DataFrame, results: pd.DataFrame) -> list[str]:
    """Every evaluated bank (a row of ``consolidation.analysis.seed_means``) is averaged over all the study's
    repeats (seeds)."""
    if seed_means.empty:
        return []
    want = results["seed"].nunique()
    short = seed_means[seed_means["seeds"] != want]
    return [
        f"{r.condition} step {r.step}: averaged over {r.seeds} seed(s), the study has {want}"
        for r in short.itertuples(index=False)
    ]


def task_type_problems(by_type: pd.DataFrame, task_types: Any) -> list[str]:
    """Every row of the probe's per-type table is one of the profile's evaluated task types."""
    allowed = list(task_types or ())
    unknown = _set(by_type, "task_type") - set(allowed)
    if unknown:
        return [f"the probe shows task type(s) {sorted(unknown)}, its profile evaluates {allowed}"]
    return []


#: the task-switch setups (Figs. 10 and 18)
SWITCH_SETUPS = ("fresh", "cumulative")


def task_switch_problems(switch: pd.DataFrame) -> list[str]:
    """The task-switch table: setups are ``SWITCH_SETUPS`` and every row carries its running total."""
    problems = []
    unknown = _set(switch, "setup") - set(SWITCH_SETUPS)
    if unknown:
        problems.append(f"the task-switch table shows setup(s) {sorted(unknown)}; known: {list(SWITCH_SETUPS)}")
    missing = int(_column(switch, "score_total").isna().sum())
    if missing:
        problems.append(f"{missing} task-switch row(s) have no running total (score_total)")
    return problems


def check_consolidation_utility(
    *,
    results: pd.DataFrame,
    seed_means: pd.DataFrame,
    probe_by_type: pd.DataFrame,
    probe_task_types: Any,
    switch: pd.DataFrame,
) -> None:
    """Notebook 11's checks: ``seed_problems``, ``task_type_problems``, ``task_switch_problems``."""
    raise_problems(
        "notebook 11 (consolidation utility)",
        seed_problems(seed_means, results)
        + task_type_problems(probe_by_type, probe_task_types)
        + task_switch_problems(switch),
    )


# 12: trajectory logs and surgery


def mark_rule_problems(paper_cells: pd.DataFrame) -> list[str]:
    """The library's mark rule reproduces every "(--)" and bold cell Tables 2-3 print (``beaten`` vs
    ``beaten_computed``, ``best`` vs ``best_computed``)."""
    problems = []
    for printed, computed, mark in (("beaten", "beaten_computed", '"(--)"'), ("best", "best_computed", "bold")):
        wrong = paper_cells[paper_cells[printed] != paper_cells[computed]]
        problems += [
            f"{r.source} {r.benchmark} {r.backbone} {r.column}: printed {mark} {getattr(r, printed)}, "
            f"the rule computes {getattr(r, computed)}"
            for r in wrong.itertuples(index=False)
        ]
    return problems


def beaten_column_problems(cells: pd.DataFrame, consolidators: Any) -> list[str]:
    """Only consolidator columns carry "(--)" in this run's cells; no-memory and the logs never do."""
    if cells.empty:
        return []
    wrong = cells[cells["beaten"].astype(bool) & ~cells["column"].isin(list(consolidators))]
    return [f'{r.benchmark} {r.backbone} {r.column}: marked "(--)" but not a consolidator' for r in wrong.itertuples()]


def surgery_problems(outcomes: pd.DataFrame) -> list[str]:
    """Table 12's shape for this run: every memory evaluated on the same number of episodes, and every removal
    one entry short of the full memory."""
    if outcomes.empty:
        return []
    problems = []
    if outcomes["n"].nunique() != 1:
        problems.append(f"the memories were evaluated on different episode counts {sorted(set(outcomes['n']))}")
    full = outcomes[outcomes["memory"] == "full"]["entries"]
    if full.empty:
        return [*problems, "the surgery table has no 'full' memory row"]
    for r in outcomes[outcomes["memory"] != "full"].itertuples(index=False):
        if r.entries != full.iloc[0] - 1:
            problems.append(f"{r.memory}: {r.entries} entries, the full memory has {full.iloc[0]} (one more expected)")
    return problems


def check_trajectory_logs(
    *, paper_cells: pd.DataFrame, cells: pd.DataFrame, consolidators: Any, outcomes: pd.DataFrame
) -> None:
    """Notebook 12's checks: ``mark_rule_problems``, ``beaten_column_problems``, ``surgery_problems``."""
    raise_problems(
        "notebook 12 (trajectory logs)",
        mark_rule_problems(paper_cells) + beaten_column_problems(cells, consolidators) + surgery_problems(outcomes),
    )
