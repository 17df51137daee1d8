"""Provenance audit: operational labels (n_min, delta), eligibility, alpha_emp / alpha_0 and undefined rates."""

from __future__ import annotations

import json

import pytest

from antipersist_lib.analysis.provenance import audit_run, descendant_counts, label_abstractions, pooled_by_setting
from antipersist_lib.memory.abstraction_store import AbstractionStore
from antipersist_lib.rundir import RunDirectory


def ep(it, parents, success, infra=False):
    return {"iteration": it, "parents": list(parents), "outcome": {"success": success, "infra_failure": infra}}


ABS = {
    "A": {"parents": [], "created_iteration": 1},
    "B": {"parents": ["A"], "created_iteration": 2},
    "C": {"parents": ["A"], "created_iteration": 2},
    "D": {"parents": [], "created_iteration": 1},
    "E": {"parents": ["D"], "created_iteration": 2},
}
AVAILABLE = {1: {"A", "D"}, 2: {"A", "B", "C", "D", "E"}}


def episodes():
    out = []
    # iteration 1: A retrieved 3x, all failures; D retrieved 3x, all successes
    out += [ep(1, ["A"], False)] * 3 + [ep(1, ["D"], True)] * 3
    # iteration 2: B 3x failing, C 3x succeeding, E 3x with 2/3 successes, one engine failure with B
    out += [ep(2, ["B"], False)] * 3 + [ep(2, ["C"], True)] * 3 + [ep(2, ["E"], True)] * 2 + [ep(2, ["E"], False)]
    out += [ep(2, ["B"], True, infra=True)]
    return out


def test_labels_follow_the_definition():
    labels = {lab.abstraction_id: lab for lab in label_abstractions(ABS, episodes(), AVAILABLE)}
    a = labels["A"]
    # A: n+ = 3 (y+ = 0); n- = the 3 D episodes of iteration 1 + 9 valid episodes of iteration 2 (A was available)
    assert (a.n_plus, a.n_minus, a.y_plus) == (3, 12, 0.0)
    assert a.y_minus == pytest.approx((3 + 3 + 2) / 12) and a.flagged is True
    assert labels["D"].flagged is False  # y+ = 1.0 beats the rest
    assert labels["B"].n_plus == 3 and labels["B"].flagged is True  # the engine failure is left out
    # B was not available in iteration 1: its "did not retrieve" group is iteration 2 only (C 3x, E 3x)
    assert labels["B"].n_minus == 6
    assert labels["C"].flagged is False
    e = labels["E"]  # y+ = 2/3, y- = 3/6 -> y- - y+ < 0 -> not flagged
    assert e.eligible and e.flagged is False


def test_n_min_and_empty_comparison_group_leave_abstractions_unclassified():
    eps = [ep(1, ["A"], False)] * 2 + [ep(1, [], True)]
    lab = label_abstractions({"A": ABS["A"]}, eps, {1: {"A"}})[0]
    assert lab.n_plus == 2 and not lab.eligible and lab.flagged is None
    only_plus = [ep(1, ["A"], False)] * 5
    lab = label_abstractions({"A": ABS["A"]}, only_plus, {1: {"A"}})[0]
    assert lab.n_minus == 0 and not lab.eligible and lab.flagged is None


def test_delta_threshold_is_inclusive_and_configurable():
    eps = [ep(1, ["A"], True)] * 19 + [ep(1, ["A"], False)] + [ep(1, [], True)] * 10  # y- - y+ = 0.05
    assert label_abstractions({"A": ABS["A"]}, eps, {1: {"A"}})[0].flagged is True
    assert label_abstractions({"A": ABS["A"]}, eps, {1: {"A"}}, delta=0.06)[0].flagged is False


def test_descendant_rates_and_undefined_groups():
    labels = label_abstractions(ABS, episodes(), AVAILABLE)
    c = descendant_counts(labels)
    # flagged: A, B. V = all five (eligible). F=1: B, C (parent A) -> 1 of 2 flagged
    # F=0: A, D, E -> A flagged -> 1 of 3
    assert c["n_flagged"] == 2
    assert (c["n_with_flagged_parent"], c["flagged_with_flagged_parent"]) == (2, 1)
    assert (c["n_without_flagged_parent"], c["flagged_without_flagged_parent"]) == (3, 1)
    # nothing flagged -> the F=1 group is empty -> alpha_emp undefined, not 0
    good = [ep(1, ["A"], True)] * 3 + [ep(1, [], False)]
    c2 = descendant_counts(label_abstractions({"A": ABS["A"]}, good, {1: {"A"}}))
    assert c2["n_with_flagged_parent"] == 0
    pooled = pooled_by_setting([])
    assert pooled == []


def test_pool_all_compares_with_every_heldout_episode():
    labels = {lab.abstraction_id: lab for lab in label_abstractions(ABS, episodes(), None, pool="all")}
    assert labels["B"].n_minus == 12  # iteration-1 episodes now count too
    with pytest.raises(ValueError, match="pool"):
        label_abstractions(ABS, episodes(), None, pool="available")


def test_audit_run_reads_a_run_directory(tmp_path):
    run = tmp_path / "run"
    store = AbstractionStore(run / "state" / "abstractions", fsync=False)
    a = store.add("check the drawer first", kind="rule", parents=(), created_iteration=1, task_type="pick")
    b = store.add("open everything", kind="rule", parents=(a.abstraction_id,), created_iteration=1, task_type="pick")
    (run / "snapshots").mkdir(parents=True)
    store.snapshot(RunDirectory(run).snapshot_path(1), iteration=1, method="abstraction_memory")
    store.close()
    (run / "manifest.json").write_text(
        json.dumps({"method": "abstraction_memory", "backbone": "m", "benchmark": "alfworld", "seed": 1})
    )
    eps = [ep(1, [a.abstraction_id], False)] * 3 + [ep(1, [b.abstraction_id], False)] * 3 + [ep(1, [], True)] * 2
    (run / "episodes_heldout.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
    rates, labels = audit_run(run)
    assert rates.n_abstractions == 2 and rates.n_flagged == 2
    # b's parent a is flagged and b is flagged -> alpha_emp = 1; a has no flagged parent and is flagged -> alpha_0 = 1
    assert rates.alpha_emp == 1.0 and rates.alpha_0 == 1.0 and rates.gap == 0.0
    pooled = pooled_by_setting([rates, rates])
    assert pooled[0]["seeds"] == 2 and pooled[0]["n_with_flagged_parent"] == 2 and pooled[0]["alpha_emp"] == 1.0


def test_audit_run_names_a_missing_store(tmp_path):
    (tmp_path / "manifest.json").write_text(
        json.dumps({"method": "react", "backbone": "m", "benchmark": "alfworld", "seed": 1})
    )
    with pytest.raises(FileNotFoundError, match="abstraction event log"):
        audit_run(tmp_path)


def test_figure10s_paper_profile_says_how_many_settings_the_kit_audits():
    """Its comment said "six logged settings" (the paper's figure) while the kit audits every setting of
    the main grid's abstraction-memory runs: the number it states is now the number the grid makes."""
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    grid = yaml.safe_load((root / "params" / "grid" / "paper.yaml").read_text())
    assert "abstraction_memory" in grid["methods"]
    audited = len(grid["backbones"]) * len(grid["benchmarks"])
    words = {"six": 6, "nine": 9}
    comment = " ".join(
        line
        for line in (root / "params" / "06_provenance_audit" / "paper.yaml").read_text().splitlines()
        if line.startswith("#")
    )
    stated = re.search(r"audits every setting of the main grid[^:]*: (\w+)", comment)
    assert stated and words[stated.group(1)] == audited == 9
    assert "six logged settings" in comment  # the paper's own figure, named as such
