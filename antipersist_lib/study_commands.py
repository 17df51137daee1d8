"""The command lines of the faulty-memories studies: ``arc-study``, ``arc-probes`` and
``consolidation-study`` each run or resume one profile and print its table.

They live above the runners, not in them, so that what sits beside a runner (the cost planners in
``arc/plan.py`` and ``consolidation/plan.py``, the tables in ``consolidation/analysis.py``) may import the
runner without an import circle. ``studies.StudyCommand`` holds the shared options and exit codes; the kit's
``cli`` declares the same options on its subcommands and hands the parsed arguments to ``COMMANDS[name]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from antipersist_lib.arc.plan import plan_arc_study
from antipersist_lib.arc.probes import ProbeResult, run_probes
from antipersist_lib.arc.study import StudyResult as ArcStudyResult
from antipersist_lib.arc.study import run_study as run_arc_study
from antipersist_lib.consolidation.analysis import seed_means
from antipersist_lib.consolidation.plan import plan_consolidation_study
from antipersist_lib.consolidation.study import StudyResult as ConsolidationResult
from antipersist_lib.consolidation.study import run_study as run_consolidation_study
from antipersist_lib.consolidation.study_folder import load_task_switch
from antipersist_lib.consolidation.task_switch import switch_table
from antipersist_lib.studies import StudyCommand


def arc_study_table(result: ArcStudyResult) -> pd.DataFrame:
    """What ``arc-study`` prints: accuracy and memory size per condition and checkpoint."""
    cols = ["condition", "step", "eval_set", "accuracy", "buffer_size", "abstract_entries", "covered", "fused"]
    return result.frame[cols]


def arc_probes_table(result: ProbeResult) -> pd.DataFrame:
    """What ``arc-probes`` prints: accuracy per probe stream, checkpoint and evaluation family."""
    return result.frame[["stream", "step", "eval_family", "eval_kind", "accuracy", "abstract_entries"]]


def consolidation_table(result: ConsolidationResult) -> pd.DataFrame:
    """What ``consolidation-study`` prints: seed means per builder, condition and step, or a task-switch
    study's own table (its frame is empty)."""
    switch = load_task_switch(result.out)
    if result.frame.empty and switch:
        return switch_table(switch).round(1)
    cols = ["builder", "condition", "step", "n_entries", "update_errors", "success", "seeds"]
    return seed_means(result.frame)[cols].round(1)


ARC_STUDY = StudyCommand(
    study="arc",
    command="arc-study",
    description="Run an ARC-AGI Stream study profile.",
    run=run_arc_study,
    show=arc_study_table,
    plan=plan_arc_study,
)
ARC_PROBES = StudyCommand(
    study="arc",
    command="arc-probes",
    description="Run an ARC-AGI Stream probe profile (Figs. 8(a), 8(b), 11).",
    run=run_probes,
    show=arc_probes_table,
)
CONSOLIDATION_STUDY = StudyCommand(
    study="consolidation",
    command="consolidation-study",
    description="Run a consolidation study profile (faulty-memories §3-4.2): build memories, evaluate them.",
    run=run_consolidation_study,
    show=consolidation_table,
    plan=plan_consolidation_study,
)
#: the kit's subcommand names (``python -m antipersist_lib <name>``) -> their study command
COMMANDS = {"arc-study": ARC_STUDY, "arc-probes": ARC_PROBES, "consolidation": CONSOLIDATION_STUDY}


def arc_study_main(argv: Sequence[str] | None = None) -> int:
    return ARC_STUDY.main(argv)


def arc_probes_main(argv: Sequence[str] | None = None) -> int:
    return ARC_PROBES.main(argv)


def consolidation_study_main(argv: Sequence[str] | None = None) -> int:
    return CONSOLIDATION_STUDY.main(argv)
