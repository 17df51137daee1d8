"""A probe folder read back (``arc.probes`` wrote it) and the tables of Figs. 11, 8(b) and 8(a).

A probe folder holds ``study.json`` (the manifest), ``results.json`` / ``results.csv`` (one row per stream,
checkpoint step, evaluated family and kind), ``ledger.jsonl``, ``cache/`` and ``streams/<name>/`` (each stream's
records, ``stream.json`` written last). ``load_probes``, ``probes_manifest``, ``probes_note`` and ``summary`` read
it; ``overfit_table`` / ``overwrite_table`` / ``misgroup_table`` and their ``*_summary`` beside the paper's
statements (``FIGURE11_STATEMENT``, ...) are what notebook 10 and ``arc.figures`` show.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.arc.probe_profile import NO_MEMORY, REPEAT, VARIANT
from antipersist_lib.jsonl import read_json
from antipersist_lib.studies import MANIFEST_FILE, RESULTS_JSON

STREAMS_DIR = "streams"
EVALS_FILE = "evals.jsonl"
DONE_FILE = "stream.json"

#: the paper's statements for the three figures (it prints no numbers for them), paraphrased
FIGURE11_STATEMENT = (
    "Paper (§6.3, Fig. 11): with one strategy family fed again and again across consolidation cycles, accuracy "
    "holds on exact repeats of the seen problems but collapses on simple variations of the same family as the "
    "cycles add up: the memory fits the seen instances' surface, not the family's strategy."
)
FIGURE8B_STATEMENT = (
    "Paper (§1, §6.2, Fig. 8(b)): updates made on one task overwrite the memory of another, so accuracy on "
    "the first family's problems falls while a second family is streamed."
)
FIGURE8A_STATEMENT = (
    "Paper (§6, Fig. 8(a)): the agent misgroups experiences before abstracting them, pooling episodes that do "
    "not share a rule; the kit measures it on two single-family subsets streamed together versus apart."
)

RESULT_COLUMNS = (
    "stream",
    "probe",
    "regime",
    "step",
    "cycle",
    "phase",
    "eval_family",
    "eval_kind",
    "accuracy",
    "n_passed",
    "n_tasks",
    "buffer_size",
    "abstract_entries",
    "misclassified",
    "backbone",
)


def results_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), columns=list(RESULT_COLUMNS))
    ints = ("step", "cycle", "n_passed", "n_tasks", "buffer_size", "abstract_entries", "misclassified")
    return df.astype({**{c: int for c in ints}, "accuracy": float})


# -- reading back and the figures' tables -------------------------------------------------------------


def load_probes(out_dir: str | Path | None) -> pd.DataFrame:
    """The results table of a finished probe run (an empty table for None: notebook mode "paper")."""
    if out_dir is None:
        return results_frame([])
    path = Path(out_dir) / RESULTS_JSON
    if not path.exists():
        raise FileNotFoundError(f"no probe results at {path}: run `python -m antipersist_lib arc-probes` first")
    return results_frame(read_json(path)["rows"])


def probes_manifest(out_dir: str | Path) -> dict[str, Any]:
    path = Path(out_dir) / MANIFEST_FILE
    if not path.exists():
        raise FileNotFoundError(f"no probe manifest at {path}")
    return dict(read_json(path))


def probes_note(out_dir: str | Path | None) -> str:
    """The provenance line under every probe figure: the run's own (a scripted model says so), else the weak-
    model note when it ran on the embedded default, else ""."""
    if out_dir is None:
        return ""
    man = probes_manifest(out_dir)
    return str(man.get("provenance") or man.get("note") or "")


def _with_baseline(df: pd.DataFrame, probe: str) -> pd.DataFrame:
    """The probe's rows with accuracy in % and the no-memory accuracy of the same (family, kind) beside them."""
    rows = df[df["probe"] == probe].copy()
    base = df[df["stream"] == NO_MEMORY].set_index(["eval_family", "eval_kind"])["accuracy"]
    rows["accuracy_pct"] = 100.0 * rows["accuracy"]
    keys = list(zip(rows["eval_family"], rows["eval_kind"]))
    rows["no_memory_pct"] = [100.0 * float(base[k]) if k in base.index else float("nan") for k in keys]
    return rows.reset_index(drop=True)


def overfit_table(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 11: per overfit stream and checkpoint, accuracy on exact repetitions and on variations."""
    cols = ["stream", "regime", "step", "cycle", "eval_family", "eval_kind", "accuracy_pct", "no_memory_pct"]
    cols += ["n_passed", "n_tasks", "abstract_entries", "buffer_size"]
    return _with_baseline(df, "overfit")[cols] if not df.empty else pd.DataFrame(columns=cols)


def overwrite_table(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 8(b): per overwrite stream and checkpoint, accuracy on each family's seen tasks, with the family
    being streamed at that point (``phase``) and the step where the second family starts (``switch_step``)."""
    cols = ["stream", "regime", "step", "cycle", "phase", "eval_family", "accuracy_pct", "no_memory_pct"]
    cols += ["n_passed", "n_tasks", "switch_step"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    rows = _with_baseline(df, "overwrite")
    switch = {}
    for name, sub in rows.groupby("stream"):
        first = sub.loc[sub["step"] > 0, "phase"].iloc[0] if (sub["step"] > 0).any() else ""
        switch[name] = int(sub.loc[(sub["step"] > 0) & (sub["phase"] == first), "step"].max())
    rows["switch_step"] = rows["stream"].map(switch)
    return rows[cols]


def misgroup_table(df: pd.DataFrame) -> pd.DataFrame:
    """Fig. 8(a): each misgroup stream's final memory evaluated on both families, beside the no-memory baseline,
    with the stream's misclassified consolidations (actions combining episodes of both families)."""
    cols = ["stream", "regime", "streamed", "eval_family", "accuracy_pct", "no_memory_pct", "misclassified"]
    cols += ["n_passed", "n_tasks", "abstract_entries"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    rows = _with_baseline(df, "misgroup")
    final = rows[rows["step"] == rows.groupby("stream")["step"].transform("max")].copy()
    final["streamed"] = final["phase"].map(lambda p: "mixed" if "+" in p else f"only {p}")
    return final[cols].reset_index(drop=True)


#: what the paper says each quantity does (its figures print no numbers), for the summaries' ``paper`` column
PAPER_EXPECTS = {
    ("overfit", REPEAT): "stays (Fig. 11)",
    ("overfit", VARIANT): "collapses (Fig. 11)",
    ("overwrite", "first"): "falls while the second family streams (Fig. 8(b))",
    ("overwrite", "second"): "not stated (the family streamed last)",
    ("misgroup", "accuracy"): "mixed below alone (misgrouped abstractions, Fig. 8(a))",
}


def overfit_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Fig. 11 beside the paper: per regime and kind, accuracy after the first and the last cycle."""
    cols = ["regime", "eval_kind", "first_cycle_pct", "last_cycle_pct", "change_pp", "no_memory_pct", "paper"]
    rows = []
    for (regime, kind), sub in table[table["cycle"] > 0].groupby(["regime", "eval_kind"], sort=False):
        sub = sub.sort_values("cycle")
        first, last = float(sub["accuracy_pct"].iloc[0]), float(sub["accuracy_pct"].iloc[-1])
        rows.append(
            [
                regime,
                kind,
                first,
                last,
                last - first,
                float(sub["no_memory_pct"].iloc[0]),
                PAPER_EXPECTS[("overfit", kind)],
            ]
        )
    return pd.DataFrame(rows, columns=cols)


def overwrite_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Fig. 8(b) beside the paper: per regime and family, accuracy when the first family's stream ends (the
    switch) and at the end of the second family's stream."""
    cols = ["regime", "eval_family", "role", "at_switch_pct", "at_end_pct", "change_pp", "no_memory_pct", "paper"]
    rows = []
    for regime, sub in table.groupby("regime", sort=False):
        switch, end = int(sub["switch_step"].iloc[0]), int(sub["step"].max())
        for i, family in enumerate(dict.fromkeys(sub["eval_family"])):
            fam = sub[sub["eval_family"] == family].set_index("step")["accuracy_pct"]
            role = "first" if i == 0 else "second"
            base = float(sub.loc[sub["eval_family"] == family, "no_memory_pct"].iloc[0])
            at_switch, at_end = float(fam[switch]), float(fam[end])
            rows.append(
                [regime, family, role, at_switch, at_end, at_end - at_switch, base, PAPER_EXPECTS[("overwrite", role)]]
            )
    return pd.DataFrame(rows, columns=cols)


def misgroup_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Fig. 8(a) beside the paper: per regime and family, the final accuracy after the mixed stream and after
    the family's own stream, and the mixed stream's cross-family memory actions."""
    cols = ["regime", "eval_family", "mixed_pct", "alone_pct", "change_pp", "mixed_misclassified", "paper"]
    rows = []
    for regime, sub in table.groupby("regime", sort=False):
        mixed = sub[sub["streamed"] == "mixed"].set_index("eval_family")
        for family in dict.fromkeys(sub["eval_family"]):
            alone = sub[(sub["streamed"] == f"only {family}") & (sub["eval_family"] == family)]
            m, a = float(mixed.loc[family, "accuracy_pct"]), float(alone["accuracy_pct"].iloc[0])
            mis = int(mixed.loc[family, "misclassified"])
            rows.append([regime, family, m, a, m - a, mis, PAPER_EXPECTS[("misgroup", "accuracy")]])
    return pd.DataFrame(rows, columns=cols)


def summary(out_dir: str | Path | None) -> dict[str, Any]:
    """What a probe run ran (for the notebook's last cell)."""
    if out_dir is None:
        return {"probes": None}
    man = probes_manifest(out_dir)
    keys = ("name", "profile_path", "backbone", "provenance", "subset_size", "variants_per_task", "task_examples")
    return {
        **{k: man.get(k) for k in keys},
        "model": man["endpoint"]["model"],
        "streams": [s["name"] for s in man["streams"]],
        "calls": man["calls"],
        "wall_s": man["wall_s"],
    }
