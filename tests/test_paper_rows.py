"""Main rows are main runs only, in the paper's shape.

The paper's grid files all write into one runs folder, so a root holds the main runs next to every
sweep and ablation. This module builds such a root: each ``params/grid/*.yaml``, shrunk to
ErrandWorld on the loopback server (same methods, variants, backbone names and seeds as the file;
two seeds, two iterations) and run by the real grid runner, into ``outputs/test/mixed-grid/runs``
(the ``test`` profile of notebooks 01-07 reads it). Then each table must have exactly the paper's
rows: 8 methods per setting in Table 1, Holm's family of 7 baselines in Table 7, Figures 2 and 9
per backbone, Table 6 per setting, and the ablation notebooks' points by folder name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from antipersist_lib.analysis import ablations, paper_tables, results, table7
from antipersist_lib.methods import TABLE1_METHODS
from antipersist_lib.runner.grid import load_grid, run_grid
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

ROOT = Path(__file__).resolve().parents[1]
MIXED = ROOT / "outputs" / "test" / "mixed-grid"
#: the main grid first; the retention runs before the frozen layer that reads them
GRID_ORDER = (
    "paper",
    "table2_persist_vs_discard",
    "figure5_gamma",
    "figure6_policies",
    "figure7_lambda",
    "figure12_budgets",
    "figure11a_skill_content",
    "figure11b_retention",
    "figure11b_frozen_layer",
)
#: grid files with a runs root of their own, outside the paper's tables (tested in their own module:
#: the reproduction study, tests/test_reproduction.py)
OWN_ROOT = {"reproduction_paper"}
PAPER_BACKBONES = ("llama-4-scout", "qwen3-coder-next", "gemma-4-31b-it")
pytestmark = pytest.mark.slow


def test_every_grid_file_is_in_the_mixed_root():
    assert set(GRID_ORDER) | OWN_ROOT == {p.stem for p in (ROOT / "params" / "grid").glob("*.yaml")}


def _endpoint(name: str, url: str) -> dict:
    return {
        "name": name,
        "model": "scripted",
        "base_url": url,
        "api_key_env": "ANTIPERSIST_TEST_KEY",
        "max_retries": 2,
        "backoff_base_s": 0.01,
    }


def _shrunk(name: str, url: str, out: Path) -> dict:
    """The grid file ``name`` on ErrandWorld and the loopback server, small, written under ``out``."""
    data = yaml.safe_load((ROOT / "params" / "grid" / f"{name}.yaml").read_text())
    text = yaml.safe_dump(data.get("variants") or {})
    text = text.replace("params/skills/appworld-", str(ROOT / "params" / "skills" / "alfworld-"))
    text = text.replace("outputs/runs/webshop/", f"{out}/runs/errandworld/")
    data["variants"] = yaml.safe_load(text)
    data.update(
        benchmarks=["errandworld"],
        backbones=[_endpoint(b, url) for b in data["backbones"]],
        embedding=_endpoint("loopback-embed", url),
        shared_server=True,
        seeds=data["seeds"][:2],
        iterations=min(int(data["iterations"]), 2),
        train_per_iteration=min(int(data["train_per_iteration"]), 4),
        heldout_limit=3,
        max_steps=6,
        heldout_concurrency=1,
        method_params={"anti_persistence": {"round_robin_iterations": 1, "warmup_per_mode": 1}},
        out_root=str(out / "runs"),
        cache_dir=str(out / "cache"),
        executor="serial",
        max_parallel=1,
    )
    if data.get("judge"):
        data["judge"] = _endpoint("loopback-judge", url)
    data.pop("endpoints", None)
    data.pop("embedding_endpoints", None)
    return data


def judging_errand_policy(req: dict) -> str:
    """The scripted ErrandWorld player, and a judge that accepts: the player's "Thought: ... Action: ..."
    is no verdict, and F.2's frozen layer refuses a store that unparseable replies left empty."""
    from antipersist_lib.testing.loopback_server import last_user_text

    if "Answer with one word on the first line: ACCEPT or REJECT" in last_user_text(req):
        return "ACCEPT\nIt is consistent with the episode."
    return errand_policy(req)


@pytest.fixture(scope="module")
def mixed_root() -> Path:
    shutil.rmtree(MIXED, ignore_errors=True)
    MIXED.mkdir(parents=True)
    with LoopbackServer(responder=judging_errand_policy) as srv:
        for name in GRID_ORDER:
            path = MIXED / f"{name}.yaml"
            path.write_text(yaml.safe_dump(_shrunk(name, srv.base_url, MIXED)))
            failed = [o for o in run_grid(load_grid(path), verbose=False) if o.status != "ok"]
            assert not failed, failed
    return MIXED / "runs"


@pytest.fixture(scope="module")
def runs(mixed_root: Path) -> pd.DataFrame:
    return results.load_iterations(mixed_root)


def test_the_root_mixes_main_runs_with_every_ablation(runs):
    folders = set(runs["variant"])
    assert set(TABLE1_METHODS) <= folders
    for names in (ablations.POLICIES, ablations.SKILL_CONTENT, ablations.RETENTION, *ablations.SWEEPS.values()):
        assert set(names) <= folders, sorted(set(names) - folders)
    assert "frozen_skills" in set(runs["method"])  # the skill-library runs are in the same root


def test_table1_has_the_eight_methods_per_setting_from_main_runs_only(runs):
    t1 = results.table1(runs)
    assert list(dict.fromkeys(t1["method"])) == list(TABLE1_METHODS)  # the paper's row order
    assert list(dict.fromkeys(t1["backbone"])) == list(PAPER_BACKBONES)  # the paper's column order
    assert len(t1) == 8 * 3 and (t1["seeds"] == 2).all()
    fin = results.final_iteration(runs)
    for method in ("anti_persistence", "abstraction_memory"):
        for bb in PAPER_BACKBONES:
            main = fin[(fin["variant"] == method) & (fin["backbone"] == bb)]["success"]
            cell = t1[(t1["method"] == method) & (t1["backbone"] == bb)].iloc[0]
            assert cell["mean"] == pytest.approx(main.mean()) and cell["seeds"] == main.size == 2
    # the ablations really are in the root, and would have changed the cell had they been averaged in
    ap_qwen = fin[(fin["method"] == "anti_persistence") & (fin["backbone"] == "qwen3-coder-next")]
    assert ap_qwen["variant"].nunique() > 10


def test_table7_pairs_seven_baselines_over_the_settings(runs):
    t7 = table7.table7_of_runs(runs)
    assert list(t7.index) == [m for m in TABLE1_METHODS if m != "anti_persistence"]
    assert (t7["n"] == 3).all()  # three settings: one benchmark x the three backbones


def test_table6_and_figure3_per_setting_in_the_papers_order(runs):
    t6 = paper_tables.table6(runs)
    assert len(t6) == 24 and list(dict.fromkeys(t6["method"])) == list(TABLE1_METHODS)
    printed = paper_tables.table6_beside_paper(runs)
    assert list(printed.index) == list(TABLE1_METHODS)
    assert [c[0] for c in dict.fromkeys((bb, bench) for bb, bench, _ in printed.columns)] == list(PAPER_BACKBONES)
    pts = paper_tables.figure3_points(runs)
    assert sorted(pts.loc[pts["source"] == "this run", "method"]) == sorted(paper_tables.MEMORY_CONFIGURATIONS)


def test_dynamics_are_per_backbone_from_main_runs(runs):
    curves = paper_tables.iteration_curves(runs)
    figs = paper_tables.dynamics_figures(curves)
    assert figs == {"figure2": ("llama-4-scout", "qwen3-coder-next"), "figure9": ("gemma-4-31b-it",)}
    assert set(curves["method"]) == set(TABLE1_METHODS)
    assert len(curves) == 8 * 3 * 2  # methods x backbones x iterations: no backbone averaged away


def test_figure8_counts_the_main_bandit_runs_training_decisions(runs):
    freq = results.mode_frequencies(runs)
    assert list(freq["backbone"]) == list(PAPER_BACKBONES)
    main = runs[(runs["variant"] == "anti_persistence") & (runs["backbone"] == "qwen3-coder-next")]
    row = freq[freq["backbone"] == "qwen3-coder-next"].iloc[0]
    assert row["none"] == pytest.approx(main["train_mode_none"].mean())
    policy_none = runs[runs["variant"] == "policy-none"]
    assert (policy_none["train_mode_none"] == 1.0).all()  # the fixed policy would have moved it


def test_ablation_points_are_read_by_folder_name(runs):
    pol = results.variants(runs, ablations.POLICIES)
    assert set(pol["label"]) == set(ablations.POLICIES.values()) and (pol["seeds"] == 2).all()
    assert set(pol["backbone"]) >= {"qwen3-coder-next"}
    gamma = paper_tables.sweep_frame(runs, "gamma", ablations.SWEEPS["gamma"])
    mine = gamma[gamma["source"].str.startswith("this run") & (gamma["source"] == "this run: qwen3-coder-next")]
    assert sorted(mine["value"]) == sorted(ablations.SWEEPS["gamma"].values())


def test_figure10_audits_abstraction_memory_main_runs_by_default(runs):
    audited, _ = paper_tables.audit_abstractions(runs)
    assert {(r.method, r.variant) for r in audited} == {("abstraction_memory", "abstraction_memory")}
    assert len(audited) == 3 * 2
    judged, _ = paper_tables.audit_abstractions(runs, variants=["abstraction-judge", "persist"])
    assert {r.variant for r in judged} == {"abstraction-judge", "persist"}


def test_notebooks_01_to_07_show_the_papers_row_sets(mixed_root):
    from antipersist_lib.runner.notebooks_runner import execute_all

    only = [
        "01_main_results",
        "02_dynamics",
        "03_persist_vs_discard",
        "04_mode_selection",
        "05_sensitivity",
        "06_provenance_audit",
        "07_skill_content",
    ]
    done = execute_all("test", only=only, root=ROOT)
    assert [d.notebook[:2] for d in done] == [n[:2] for n in only]
    out = ROOT / "outputs"
    t1 = pd.read_csv(out / "01_main_results" / "test" / "table1_this_run.csv")
    assert list(dict.fromkeys(t1["method"])) == list(TABLE1_METHODS) and len(t1) == 24
    t7 = pd.read_csv(out / "01_main_results" / "test" / "table7_this_run.csv")
    assert len(t7) == 7
    t6 = pd.read_csv(out / "01_main_results" / "test" / "table6_this_run.csv")
    assert len(t6) == 24
    dyn = out / "02_dynamics" / "test"
    assert (dyn / "figure2_dynamics.png").exists() and (dyn / "figure9_dynamics.png").exists()
    assert not list(dyn.glob("this_run_*"))  # every backbone of the root is one of the paper's
    f8 = pd.read_csv(out / "04_mode_selection" / "test" / "figure8_mode_frequencies.csv")
    assert list(f8["backbone"]) == list(PAPER_BACKBONES)
    f10 = pd.read_csv(out / "06_provenance_audit" / "test" / "figure10_rates.csv")
    assert set(f10.loc[f10["source"] == "this run", "variant"]) == {"abstraction_memory"}


def test_every_figure_of_notebooks_01_to_07_is_readable(runs):
    """No overlapping labels, notes or legends in any figure drawn from the mixed root."""
    from antipersist_lib.analysis import paper, plots, provenance

    note = "Produced by a scripted responder on ErrandWorld: the figure's layout is under test, not its values. " * 2
    figs = {"figure3": plots.cost_vs_success(paper_tables.figure3_points(runs), title="Figure 3", note=note)}
    curves = paper_tables.iteration_curves(runs)
    final = paper_tables.paper_final_success(list(paper_tables.MEMORY_CONFIGURATIONS))
    for name, bbs in paper_tables.dynamics_figures(curves).items():
        figs[name] = plots.dynamics(curves, final, backbones=bbs, title=name, note=note)
    for name, cells, names, key in (
        ("table2", paper.table2(), ablations.PERSISTENCE, "variant"),
        ("figure6", paper.figure6_policies(), ablations.POLICIES, "policy"),
    ):
        mine = results.variants(runs, names).rename(columns={"label": key})
        both = paper_tables.beside_paper(cells, mine, key=key)
        figs[name] = plots.success_bars(
            both, x="setting", hue=key, title=name, note=note, hue_order=list(names.values())
        )
    for panel, names in (("Figure 11a", ablations.SKILL_CONTENT), ("Figure 11b", ablations.RETENTION)):
        f = paper_tables.figure11_panel(runs, panel, names)
        figs[panel] = plots.success_bars(
            f, x="source", hue="condition", title=panel, note=note, hue_order=list(names.values())
        )
    figs["figure5"] = plots.sweep(
        paper_tables.sweep_frame(runs, "gamma", ablations.SWEEPS["gamma"]), param="γ", title="5", note=note
    )
    figs["figure7"] = plots.lambda_two_axes(
        paper_tables.sweep_frame(runs, "lambda", ablations.SWEEPS["lambda"]), title="7", note=note
    )
    f12 = paper_tables.figure12_frame(runs, ablations.SWEEPS)
    figs.update(plots.sweep_per_parameter(f12, {"B": "B", "B_hat": "B̂"}, title="Figure 12: {param}", note=note))
    figs["figure8"] = plots.mode_heatmaps(results.mode_frequencies(runs), title="Figure 8", note=note)
    audited, _ = paper_tables.audit_abstractions(runs)
    pooled = pd.DataFrame(provenance.pooled_by_setting(audited))
    figs["figure10"] = plots.provenance_rates(paper_tables.figure10_settings(pooled), title="Figure 10", note=note)
    bad = {name: plots.text_overlaps(fig) for name, fig in figs.items()}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}
