"""The numbers "Useful Memories Become Faulty When Continuously Updated by LLMs" reports, as reference data.

Source: ``shared/paper/faulty-memories-paper.md``. Every record names where its value is printed; notebooks show
"paper vs. this run" from these records and copy none. Cells the paper marks "—" are ``None``. Covered: Tables
2-4, 11 and 12, and ``STATED`` for numbers the text gives without a table; where the paper contradicts itself
(the 19 ARC-AGI problems' 54%) the record says which reading it keeps.

What each table's fields mean: docs/faulty-memories.md, "The reference records"; the checks against the
paper's text are ``analysis.faulty_paper_text``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
