"""Memory surgery on a consolidated bank (faulty-memories App. I.1, Tables 12-13): the bank whole and minus one
entry at a time, evaluated on the same tasks and seeds; outcomes and action categories per memory. ErrandWorld
(the kit's test world) and a scripted model: nothing here is a model result."""

from __future__ import annotations

import json

import pytest
import yaml
from errand_pool import errand_pool_run

from antipersist_lib.consolidation import study, study_folder, surgery
from antipersist_lib.consolidation.bank import MemoryBank, MemoryEntry, load_bank
from antipersist_lib.consolidation.profile import load_study_profile
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy


def test_webshop_actions_fall_into_table_13s_categories():
    """App. I.1's six categories under the paper's names; "< Prev" counts with the page turns (I.1), an option
    on a product page is a variant click, a product tab is none of the six."""
    assert surgery.WEBSHOP_CATEGORIES == (
        "search",
        "click ASIN",
        "click variant",
        "click [Next >]",
        "click back",
        "click [Buy Now]",
    )
    cat = surgery.webshop_category
    assert cat("search[red shirt under 30 dollars]") == "search"
    assert cat("click[B09ABCDEF1]") == "click ASIN" and cat("click[b0123456zz]") == "click ASIN"
    assert cat("click[large]") == cat("click[b16-red]") == "click variant"
    assert cat("click[Next >]") == cat("click[next &gt;]") == cat("click[< Prev]") == "click [Next >]"
    assert cat("click[Buy Now]") == "click [Buy Now]" and cat("click[Back to Search]") == "click back"
    assert cat("click[Description]") == "other click" and cat("think[hmm]") == "other"
    assert surgery.action_category("alfworld", "go to desk 1") == "go"
    assert surgery.action_category("webshop", "  ") == "(no command)"


def test_webshop_action_table_has_table_13s_rows(monkeypatch):
    """Table 13's shape for WebShop: the six categories in the paper's order, "Buy Now (eps)", and a page-turn
    share that counts "< Prev" with "Next >"."""
    episodes = {
        "full": [
            ["search[shoes]", "click[Next >]", "click[< Prev]", "click[Next >]", "click[b0123456zz]", "click[Buy Now]"],
            ["search[hat]", "click[Next >]"],
        ],
        "w8": [["search[shoes]", "click[b0123456zz]", "click[large]", "click[Buy Now]"]],
    }

    def fake_rows(run_dir):
        return [{"trajectory": {"steps": [{"action": a} for a in ep]}} for ep in episodes[str(run_dir)]]

    monkeypatch.setattr(surgery, "episode_rows", fake_rows)
    rows = [{"removed": None, "run_dir": "full"}, {"removed": "W8", "run_dir": "w8"}]
    table = surgery.action_table(rows, [], "webshop").set_index("memory")
    assert list(table.columns) == ["actions", *surgery.WEBSHOP_CATEGORIES, "Buy Now (eps)", "page-turn share"]
    assert table.loc["full", "click [Next >]"] == 4 and table.loc["full", "page-turn share"] == 4 / 8
    assert table.loc["full", "Buy Now (eps)"] == 1 and table.loc["minus W8", "Buy Now (eps)"] == 1
    assert table.loc["minus W8", "click variant"] == 1 and table.loc["minus W8", "click back"] == 0


def test_without_removes_one_entry_and_names_a_missing_one():
    bank = MemoryBank("awm", entries=[MemoryEntry("w1", "a"), MemoryEntry("w2", "b")])
    out = surgery.without(bank, "w1")
    assert out.ids == ["w2"] and bank.ids == ["w1", "w2"] and out.meta["surgery"] == {"removed": "w1"}
    with pytest.raises(KeyError, match=r"no entry 'w9' in this memory; it holds \['w1', 'w2'\]"):
        surgery.without(bank, "w9")


def _profile(pool_dir, **over):
    data = {
        "name": "surgery",
        "benchmark": "errandworld",
        "backbone": "scripted-loopback",
        "pool": {"runs": [str(pool_dir)]},
        "builders": ["all"],
        "builder_options": {"all": {"log_chars": 300}},
        "regimes": {"static_all": {}},
        "surgery": {"builder": "all", "regime": "static_all", "remove": "all"},
        "evaluation": {"seeds": [1, 2], "heldout_limit": 2, "max_steps": 4, "no_memory": False},
        "response_cache": False,
    }
    data.update(over)
    return data


@pytest.fixture(scope="module")
def surgery_study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("surgery")
    with LoopbackServer(responder=errand_policy) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", max_retries=0)
        pool_dir = errand_pool_run(tmp / "poolrun", ep, train=3)
        path = tmp / "surgery.yaml"
        path.write_text(yaml.safe_dump(_profile(pool_dir)))
        result = study.run_study(path, tmp / "out", endpoint=ep, embed_endpoint=ep)
        n = len(srv.requests_for("/v1/chat/completions"))
        again = study.run_study(path, tmp / "out", endpoint=ep, embed_endpoint=ep)  # resumes: no new call
        assert len(srv.requests_for("/v1/chat/completions")) == n
    return result, again, path, pool_dir


def test_surgery_evaluates_the_whole_bank_and_each_bank_minus_one_entry(surgery_study):
    result, again, _, _ = surgery_study
    out = result.out
    rows = study_folder.load_surgery(out)
    bank = load_bank(out / "memories" / "all" / "static_all" / "bank.json")
    assert len(bank.ids) == 3
    assert [(r["removed"], r["seed"]) for r in rows] == [(x, s) for x in [None, *bank.ids] for s in (1, 2)]
    for r in rows:
        edited = load_bank(out / r["memory"])
        assert edited.ids == [i for i in bank.ids if i != r["removed"]] and r["entries"] == len(edited.ids)
        manifest = json.loads((out / r["run_dir"] / "manifest.json").read_text())
        assert manifest["method"] == "consolidated_memory" and manifest["method_params"]["memory"].endswith(r["memory"])
    assert result.manifest["surgery"] == {"rows": 8, "file": study_folder.SURGERY_RESULTS}
    assert study_folder.load_surgery(again.out) == rows

    table = surgery.outcome_table(rows, [out])
    assert list(table["memory"]) == ["full", *(f"minus {i}" for i in bank.ids)]
    assert table["n"].eq(4).all() and table["wins"].between(0, 4).all()  # 2 tasks x 2 seeds each
    assert (table["delta_wins"] == table["wins"] - table["wins"].iloc[0]).all()
    actions = surgery.action_table(rows, [out], "errandworld")
    assert list(actions["memory"]) == list(table["memory"])
    verbs = [c for c in actions.columns if c not in ("memory", "actions")]
    assert (actions[verbs].sum(axis=1) == actions["actions"]).all() and actions["actions"].gt(0).all()
    steps = [sum(len(e["trajectory"]["steps"]) for e in surgery.episode_rows(out / r["run_dir"])) for r in rows[:2]]
    assert actions["actions"].iloc[0] == sum(steps)


def test_surgery_profiles_name_what_is_wrong(tmp_path, surgery_study):
    _, _, _, pool_dir = surgery_study

    def load(**over):
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump(_profile(pool_dir, **over)))
        return load_study_profile(path, context_check=False)  # its backbone is a scripted endpoint's name

    assert load().surgery == study.load_study_profile(surgery_study[2], context_check=False).surgery
    with pytest.raises(study.StudyProfileError, match="'surgery.regime' must name a regime"):
        load(surgery={"builder": "all", "regime": "stream"})
    with pytest.raises(study.StudyProfileError, match="'surgery.builder' must be a builder of regime"):
        load(surgery={"builder": "dc", "regime": "static_all"})
    with pytest.raises(study.StudyProfileError, match="unknown key"):
        load(surgery={"builder": "all", "regime": "static_all", "entry": "e1"})
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(_profile(pool_dir, surgery={"builder": "all", "regime": "static_all", "remove": ["zz9"]}))
    )
    with LoopbackServer(responder=errand_policy) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", max_retries=0)
        with pytest.raises(study.StudyProfileError, match=r"'surgery.remove' names \['zz9'\]"):
            study.run_study(path, tmp_path / "out", endpoint=ep, embed_endpoint=ep)


def test_surgery_can_take_the_bank_at_the_end_of_a_pass(tmp_path, surgery_study):
    """App. I.1 operates on the epoch-1 memory of a 3-epoch AWM run: ``step: {pass: 1}``."""
    _, _, _, pool_dir = surgery_study
    data = _profile(
        pool_dir,
        regimes={"epochs": {"regime": "stream", "batch_size": 2, "passes": 2, "homogeneous": False}},
        surgery={"builder": "all", "regime": "epochs", "step": {"pass": 1}, "remove": "all"},
        evaluation={"seeds": [1], "heldout_limit": 1, "max_steps": 3, "no_memory": False},
    )
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with LoopbackServer(responder=errand_policy) as srv:
        ep = Endpoint(base_url=srv.base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", max_retries=0)
        result = study.run_study(path, tmp_path / "out", endpoint=ep, embed_endpoint=ep)
    rows = study_folder.load_surgery(result.out)
    assert {r["step"] for r in rows} == {2}  # 3 records in batches of 2: the first pass ends at update 2
    assert [r["entries"] for r in rows] == [3, 2, 2, 2]
    data["surgery"]["step"] = {"pass": 3}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(study.StudyProfileError, match="makes fewer passes"):
        load_study_profile(path)


def test_the_recorded_fixture_is_the_smoke_profile_and_loads():
    """tests/fixtures/consolidation/surgery_smoke (notebook 12) was made from the profile as committed, by the model
    it names; its tables have one row per memory, each removal one entry short of the full bank."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = root / "tests" / "fixtures" / "consolidation" / "surgery_smoke"
    manifest = study_folder.load_manifest(out)
    data = yaml.safe_load((root / "params" / "consolidation" / "surgery_smoke.yaml").read_text())
    assert manifest["status"] == "complete" and manifest["profile"] == data
    assert manifest["embedded_backbone"]["model"]["name"] == data["backbone_options"]["model"]
    rows = study_folder.load_surgery(out)
    table = surgery.outcome_table(rows, [out])
    assert table["memory"].iloc[0] == "full" and len(table) == len({r["removed"] for r in rows})
    assert (table["entries"].iloc[1:] == table["entries"].iloc[0] - 1).all()
    assert not surgery.action_table(rows, [out], "alfworld").empty
