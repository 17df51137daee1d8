"""Run directories -> tidy tables for the notebooks (one row per run x iteration, or per cell).

``load_iterations(root)`` reads every run under ``root`` (any folder holding a ``manifest.json``)
and returns one row per (run, iteration) with held-out success, trajectory length, calls per task
(execution / synthesis / other), mode frequencies and synthesis-mode usage, recomputed from the
episode records (the run's own ``summary.json`` is not trusted blindly). ``table1(df)`` gives the
final-iteration mean and std over seeds per (method, backbone, benchmark), in percent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from antipersist_lib.analysis import paper, provenance, statistics
from antipersist_lib.records import MODES
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import summarize_iteration


def _roots(roots: Any) -> list[Path]:
    return [Path(r) for r in roots] if isinstance(roots, (list, tuple)) else [Path(roots)]


def find_runs(roots: Any, *, base: str | Path | None = None) -> list[Path]:
    """Every run directory (a folder with a ``manifest.json``) under one root or a list of roots;
    relative roots are taken from ``base`` when given."""
    out: list[Path] = []
    for root in _roots(roots):
        root = Path(base) / root if base is not None and not root.is_absolute() else root
        if not root.exists():
            raise FileNotFoundError(
                f"no run directories under {root}: run the experiment first or point runs_root elsewhere"
            )
        out += sorted(p.parent for p in root.rglob(RunDirectory.MANIFEST))
    return out


def load_manifest(run: str | Path) -> dict[str, Any]:
    return RunDirectory(run).read_manifest()


def load_iterations(roots: Any, *, base: str | Path | None = None) -> pd.DataFrame:
    """One row per (run, iteration) for every run under ``roots`` (a path or a list of paths)."""
    rows = []
    for run in find_runs(roots, base=base):
        man = load_manifest(run)
        held = RunDirectory(run).read_episodes("heldout")
        train = RunDirectory(run).read_episodes("train")
        for it in sorted({r["iteration"] for r in held}):
            s = summarize_iteration(it, held, train)
            row = {
                "run": str(run),
                "method": man["method"],
                "variant": run.parent.name,
                "backbone": man["backbone"],
                "benchmark": man["benchmark"],
                "seed": man["seed"],
                "iteration": it,
                "success": 100 * s.heldout_success,
                "n": s.heldout_n,
                "steps": s.mean_steps,
                "calls": s.mean_calls,
                "execution_calls": s.mean_execution_calls,
                "synthesis_calls": s.mean_synthesis_calls,
                "other_calls": s.mean_other_calls,
                "synthesis_mode_usage": s.synthesis_mode_usage,
            }
            row.update({f"mode_{m}": s.mode_frequencies.get(m) for m in MODES})
            rows.append(row)
    return pd.DataFrame(rows)


def final_iteration(df: pd.DataFrame) -> pd.DataFrame:
    """The last evaluated iteration of every run."""
    if df.empty:
        return df
    last = df.groupby("run")["iteration"].transform("max")
    return df[df["iteration"] == last]


def table1(df: pd.DataFrame, value: str = "success") -> pd.DataFrame:
    """Final-iteration mean and std over seeds per (method, backbone, benchmark)."""
    fin = final_iteration(df)
    g = fin.groupby(["method", "backbone", "benchmark"])[value]
    out = g.agg(["mean", "std", "count"]).reset_index()
    return out.rename(columns={"count": "seeds"})


def variants(df: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """Final-iteration mean success / usage of the named run folders (variant -> label).

    Returns one row per (label, benchmark, backbone) with the mean over seeds, for sweeps and
    ablations where each point is its own run folder (``params/main/ablations.yaml``).
    """
    fin = final_iteration(df)
    if fin.empty:
        return pd.DataFrame(columns=["label", "benchmark", "backbone", "success", "synthesis_mode_usage", "seeds"])
    fin = fin[fin["variant"].isin(names)]
    g = (
        fin.groupby(["variant", "benchmark", "backbone"])
        .agg(
            success=("success", "mean"),
            synthesis_mode_usage=("synthesis_mode_usage", "mean"),
            seeds=("seed", "nunique"),
        )
        .reset_index()
    )
    g["label"] = g["variant"].map(names)
    g = g.rename(columns={"variant": "run_folder"})
    return g[["label", "run_folder", "benchmark", "backbone", "success", "synthesis_mode_usage", "seeds"]]


def mode_frequencies(df: pd.DataFrame, *, variant: str = "anti_persistence") -> pd.DataFrame:
    """Figure 8: mode frequencies of the bandit averaged over all evaluated iterations and seeds,
    one row per (backbone, benchmark), one column per mode (fractions of held-out tasks)."""
    cols = [f"mode_{m}" for m in MODES]
    sub = df[(df["method"] == "anti_persistence") & (df["variant"] == variant)] if not df.empty else df
    if sub.empty:
        return pd.DataFrame(columns=["backbone", "benchmark", *MODES])
    out = sub.groupby(["backbone", "benchmark"])[cols].mean().reset_index()
    return out.rename(columns={f"mode_{m}": m for m in MODES})


def paper_frame(cells: list[Any]) -> pd.DataFrame:
    """``paper.Cell`` records as a DataFrame."""
    return pd.DataFrame([c.__dict__ for c in cells])


MODES_OF_NOTEBOOKS = ("paper", "load", "run")
ENGINE_PACKAGES = ("alfworld", "textworld", "scienceworld", "webshop", "appworld")


def obtain_runs(
    mode: str, runs_root: Any, *, run_profile: str | None = None, root: str | Path | None = None
) -> tuple[pd.DataFrame, Any]:
    """The run-or-load step every notebook shares.

    ``mode``: "paper" (no runs: the paper's numbers alone), "load" (read the run directories under
    ``runs_root``, a path or list of paths relative to the repository root) or "run" (first run the
    main-job profile ``run_profile`` on the embedded default, then load what it wrote). Returns the
    (run, iteration) table and the roots actually loaded.
    """
    from antipersist_lib.paths import repo_root

    root = Path(root) if root is not None else repo_root()
    if mode not in MODES_OF_NOTEBOOKS:
        raise ValueError(f"mode must be one of {MODES_OF_NOTEBOOKS}, got {mode!r}")
    if mode == "paper":
        return pd.DataFrame(), []
    if mode == "run":
        if not run_profile:
            raise ValueError("mode 'run' needs run_profile (a main-job profile under params/main/)")
        from antipersist_lib.runner.main_job import run_main

        run_main(root / run_profile, out=root / "outputs" / "main", execute_notebooks=False)
        runs_root = str(Path("outputs") / "main" / Path(run_profile).stem / "runs")
    return load_iterations(runs_root, base=root), runs_root


def manifest_table(df: pd.DataFrame) -> pd.DataFrame:
    """The manifest facts of every run used (closing cell of each notebook)."""
    rows = []
    for run in sorted(df["run"].unique()) if not df.empty else []:
        m = load_manifest(Path(run))
        rows.append(
            {
                "run": Path(run).parent.name,
                "method": m["method"],
                "benchmark": m["benchmark"],
                "backbone": m["backbone"],
                "model": m["endpoint"]["model"],
                "seed": m["seed"],
                "iterations": m["iterations"],
                "partition": m["partition_hash"][:12],
                "engine": ", ".join(f"{k} {v}" for k, v in (m.get("engine") or {}).items() if k in ENGINE_PACKAGES),
                "commit": (m.get("git_commit") or "")[:10],
                "params": m.get("method_params"),
            }
        )
    return pd.DataFrame(rows)


# --- the notebooks' tables: paper beside this run -------------------------------------------------
# Each function below builds one table a notebook writes to CSV or plots, so the notebook itself
# only configures (which runs, which ablation map), calls and shows.


def mean_std_table(cells: pd.DataFrame, *, index: Any, columns: Any) -> pd.DataFrame:
    """The paper's "mean ± std" cells (one decimal) pivoted like the printed table, so the CSV
    reads as the paper does instead of as two numeric columns."""
    text = cells["mean"].map("{:.1f}".format) + " ± " + cells["std"].map("{:.1f}".format)
    return cells.assign(cell=text).pivot(index=index, columns=columns, values="cell")


def paper_table1() -> pd.DataFrame:
    """Table 1 as printed: methods in the paper's row order, (backbone, benchmark) columns."""
    cells = paper_frame(paper.table1())
    rows = list(dict.fromkeys(cells["method"]))  # the paper's row order (a pivot sorts by name)
    return mean_std_table(cells, index="method", columns=["backbone", "benchmark"]).loc[rows]


def paper_table2() -> pd.DataFrame:
    """Table 2 as printed: one row per (backbone, benchmark), discard beside persist."""
    return mean_std_table(paper_frame(paper.table2()), index=["backbone", "benchmark"], columns="variant")[
        ["discard", "persist"]
    ]


def paper_table6() -> pd.DataFrame:
    """Table 6: mean LLM calls per held-out task, method x (backbone, benchmark)."""
    return paper_frame(paper.table6()).pivot(index="method", columns=["backbone", "benchmark"], values="mean")


def beside_paper_mean(t1: pd.DataFrame) -> pd.DataFrame:
    """``table1(runs)`` with the paper's Table 1 mean of the same (method, benchmark) averaged over
    its three backbones: this run's backbone is none of them, so a per-backbone match does not exist."""
    p1 = paper_frame(paper.table1())
    avg = (
        p1[["method", "benchmark", "mean"]]
        .groupby(["method", "benchmark"])
        .mean()
        .rename(columns={"mean": "paper mean (avg over backbones)"})
        .reset_index()
    )
    return t1.merge(avg, on=["method", "benchmark"], how="left")


def table7_frame(comparisons: list[Any]) -> pd.DataFrame:
    """``statistics.table7`` rows as a frame indexed by baseline (the paper's Table 7 layout)."""
    return pd.DataFrame([c.to_dict() for c in comparisons]).set_index("baseline")


def table7_of_runs(runs: pd.DataFrame) -> pd.DataFrame | None:
    """Table 7's paired tests on this run's own final-iteration means (settings = backbone/benchmark);
    None when there is no Anti-Persistence row or fewer than two methods or settings to pair."""
    if runs.empty:
        return None
    cells = (
        table1(runs)
        .assign(setting=lambda d: d["backbone"] + "/" + d["benchmark"])
        .pivot(index="method", columns="setting", values="mean")
    )
    if "anti_persistence" not in cells.index or len(cells.columns) < 2 or len(cells.index) < 2:
        return None
    return table7_frame(statistics.table7({m: cells.loc[m].tolist() for m in cells.index}))


def figure3_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Figure 3: one (calls, success) point per method, the paper's averaged over its nine settings
    (Tables 6 and 1) and this run's over its final iterations."""
    avg_calls = paper_frame(paper.table6()).groupby("method")["mean"].mean()
    avg_success = paper_frame(paper.table1()).groupby("method")["mean"].mean()
    points = pd.DataFrame(
        {
            "method": avg_calls.index,
            "calls": avg_calls.values,
            "success": avg_success.loc[avg_calls.index].values,
            "source": "paper",
        }
    )
    if not runs.empty:
        fin = final_iteration(runs).groupby("method")[["calls", "success"]].mean().reset_index()
        points = pd.concat([points, fin.assign(source="this run")], ignore_index=True)
    return points


def paper_final_success(methods: list[str]) -> pd.DataFrame:
    """Figures 2 and 9: the paper prints its curves as images, so its Table 1 final-iteration values
    of ``methods`` (column ``success``) are the only numbers to mark on them."""
    p1 = paper_frame(paper.table1())
    return p1[p1["method"].isin(methods)].rename(columns={"mean": "success"})


def iteration_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Figures 2 and 9: held-out success and mean trajectory length per iteration, averaged over
    seeds per (benchmark, backbone, method); empty when no runs are loaded."""
    if runs.empty:
        return pd.DataFrame()
    return runs.groupby(["benchmark", "backbone", "method", "iteration"])[["success", "steps"]].mean().reset_index()


def beside_paper(cells: list[Any], mine: pd.DataFrame, *, key: str) -> pd.DataFrame:
    """The paper's points and this run's in one tidy frame (columns source, benchmark, ``key``,
    success, setting) for grouped bars: ``cells`` are ``paper.Cell`` records whose variant names the
    point (a ``"<key>=" `` prefix is dropped), ``mine`` is ``variants(...)`` with label renamed to ``key``.
    The setting ("paper: <backbone> / <benchmark>") keeps each backbone's bars apart."""
    p = paper_frame(cells).rename(columns={"mean": "success"})
    p[key] = p["variant"].str.removeprefix(f"{key}=")
    cols = ["source", "benchmark", key, "success"]
    both = pd.concat(
        [
            p.assign(source="paper: " + p["backbone"])[cols],
            mine.assign(source="this run: " + mine["backbone"])[cols],
        ],
        ignore_index=True,
    )
    both["setting"] = both["source"] + " / " + both["benchmark"]
    return both


def discard_minus_persist(cells: list[Any]) -> pd.Series:
    """Table 2's claim: the success gap discard - persist per (backbone, benchmark)."""
    gaps = paper_frame(cells).pivot(index=["backbone", "benchmark"], columns="variant", values="mean")
    return (gaps["discard"] - gaps["persist"]).rename("discard_minus_persist")


def mode_facts(freq: pd.DataFrame) -> pd.DataFrame:
    """Figure 8's statements checked on this run: how many modes each setting used and whether
    'none' was used at all (``freq`` from ``mode_frequencies``)."""
    return pd.DataFrame(
        [
            {
                "backbone": r.backbone,
                "benchmark": r.benchmark,
                "modes used": int(sum(r[m] > 0 for m in ("none", "imitation", "strategic", "corrective"))),
                "none used": bool(r["none"] > 0),
            }
            for _, r in freq.iterrows()
        ]
    )


def paper_sweep(param: str) -> list[Any]:
    """The paper's reported points of one sweep: gamma (Figure 5), lambda (Figure 7), B and B_hat
    (Figure 12a and 12b)."""
    sweeps = {
        "gamma": paper.figure5_gamma,
        "lambda": paper.figure7_lambda,
        "B": lambda: [c for c in paper.figure12_budgets() if c.source == "Figure 12a"],
        "B_hat": lambda: [c for c in paper.figure12_budgets() if c.source == "Figure 12b"],
    }
    if param not in sweeps:
        raise ValueError(f"no paper sweep {param!r}; known: {sorted(sweeps)}")
    return sweeps[param]()


def sweep_frame(runs: pd.DataFrame, param: str, folders: dict[str, float]) -> pd.DataFrame:
    """One sweep, tidy (source, benchmark, value, success, synthesis_mode_usage): the paper's points
    (``paper_sweep(param)``; usage not reported, so None) and this run's, where ``folders`` maps each
    run folder to its parameter value (``ablations.SWEEPS[param]``)."""
    p = paper_frame(paper_sweep(param)).rename(columns={"mean": "success"})
    p["value"] = p["variant"].str.split("=").str[1].astype(float)
    p["source"] = "paper: " + p["backbone"]
    p["synthesis_mode_usage"] = None
    mine = variants(runs, {k: str(v) for k, v in folders.items()})
    mine = mine.assign(value=mine["label"].astype(float), source="this run: " + mine["backbone"])
    cols = ["source", "benchmark", "value", "success", "synthesis_mode_usage"]
    return pd.concat([p[cols], mine[cols]], ignore_index=True)


def figure12_frame(runs: pd.DataFrame, sweeps: dict[str, dict[str, float]]) -> pd.DataFrame:
    """Figure 12: the B and B_hat sweeps in one frame, told apart by the column ``parameter``."""
    return pd.concat(
        [sweep_frame(runs, prm, sweeps[prm]).assign(parameter=prm) for prm in ("B", "B_hat")], ignore_index=True
    )


def best_paper_point(param: str) -> pd.Series:
    """The variant with the highest reported success per benchmark in the paper's sweep ``param``
    (the paper's claim: the Table 3 defaults are the best points)."""
    df = paper_frame(paper_sweep(param))
    return df.loc[df.groupby("benchmark")["mean"].idxmax(), "variant"]


def audit_abstractions(runs: pd.DataFrame, **kw: Any) -> tuple[list[Any], pd.DataFrame]:
    """Figure 10's labels: ``provenance.audit_run`` (``kw``: n_min, delta, pool) for every loaded run
    that has an abstraction store. Returns the runs' descendant rates and one row per stored
    abstraction with its run, method and benchmark."""
    audited, labels = [], []
    for run in sorted(runs["run"].unique()) if not runs.empty else []:
        try:
            rates, labs = provenance.audit_run(run, **kw)
        except FileNotFoundError:
            continue  # methods without an abstraction store
        audited.append(rates)
        labels += [
            {"run": rates.run, "method": rates.method, "benchmark": rates.benchmark, **lab.__dict__} for lab in labs
        ]
    return audited, pd.DataFrame(labels)


def figure10_table(pooled: pd.DataFrame, ref: dict[str, Any] | None = None) -> pd.DataFrame:
    """Figure 10: the paper's one reported number (the largest gap; group rates not given, so None)
    as the first row, then this run's pooled rates (``provenance.pooled_by_setting``)."""
    ref = ref or paper.FIGURE10_LARGEST_GAP
    paper_row = pd.DataFrame(
        [
            {
                "variant": "abstraction_memory",
                "method": "abstraction_memory",
                "backbone": ref["backbone"],
                "benchmark": ref["benchmark"],
                "source": "paper",
                "alpha_emp": None,
                "alpha_0": None,
                "gap": ref["gap"],
            }
        ]
    )
    return pd.concat([paper_row, pooled.assign(source="this run")], ignore_index=True)


def figure10_settings(pooled: pd.DataFrame) -> pd.DataFrame:
    """The pooled rates with a three-line ``setting`` label (run folder, backbone, benchmark) for
    ``plots.provenance_rates``; one "(no runs)" setting with undefined rates when nothing was audited."""
    if pooled.empty:
        return pd.DataFrame({"setting": ["(no runs)"], "alpha_emp": [None], "alpha_0": [None]})
    return pooled.assign(setting=pooled["variant"] + "\n" + pooled["backbone"] + "\n" + pooled["benchmark"])


def figure11_panel(runs: pd.DataFrame, panel: str, folders: dict[str, str]) -> pd.DataFrame:
    """One panel of Figure 11 (``panel``: "Figure 11a" or "Figure 11b"), tidy (source, condition,
    success): the paper's conditions and this run's, ``folders`` mapping run folder -> condition.
    The source names the benchmark because the paper's (AppWorld) may differ from this run's."""
    p11 = paper_frame(paper.figure11()).rename(columns={"mean": "success"})
    p = p11[p11["source"] == panel].assign(
        source="paper: " + p11["backbone"] + " / " + p11["benchmark"], condition=p11["variant"]
    )
    mine = variants(runs, folders)
    mine = mine.assign(source="this run: " + mine["backbone"] + " / " + mine["benchmark"], condition=mine["label"])
    cols = ["source", "condition", "success"]
    return pd.concat([p[cols], mine[cols]], ignore_index=True)


def by_condition(panel: pd.DataFrame, folders: dict[str, str]) -> pd.DataFrame:
    """A Figure 11 panel as conditions x sources, rows in the ablation map's order."""
    return panel.pivot(index="condition", columns="source", values="success").loc[list(folders.values())]
