"""Issue 43: a consolidation study profile whose largest prompt cannot fit its backbone is refused when it loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from antipersist_lib.consolidation import context_estimate as ctx
from antipersist_lib.consolidation.context import REFUSE
from antipersist_lib.consolidation.context_estimate import check_profile_context, profile_prompt_sizes
from antipersist_lib.consolidation.pool import summarize_trajectory
from antipersist_lib.consolidation.profile import load_study_profile
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.studies import StudyProfileError

ROOT = Path(__file__).resolve().parents[1]
PAPER_PROFILES = sorted((ROOT / "params" / "consolidation").glob("*paper*.yaml"))


def _copy(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load((ROOT / "params" / "consolidation" / "paper.yaml").read_text())
    for key, value in changes.items():
        data[key] = value
    path = tmp_path / "paper_copy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("chars", [200, 900, 1800, 4000])
def test_the_synthetic_record_reaches_the_summary_budget(chars):
    record = ctx.upper_bound_record(chars)
    assert len(summarize_trajectory(record, chars)) == chars
    assert len(summarize_trajectory(record, chars, with_outcome=False)) == chars


@pytest.mark.parametrize("path", PAPER_PROFILES, ids=lambda p: p.stem)
def test_every_paper_profile_loads_or_is_refused_with_the_sizes(path):
    try:
        profile = load_study_profile(path)
    except StudyProfileError as exc:
        assert re.search(r"about \d+ characters, \d+ tokens", str(exc)) and "Fix:" in str(exc)
        return
    sizes = check_profile_context(profile)
    assert sizes and all(s.fits for s in sizes if profile.context.overflow == REFUSE)
    assert all(s.context_length for s in sizes)  # every paper backbone states its context


def test_the_paper_profile_estimates_its_whole_pool_prompts():
    sizes = profile_prompt_sizes(load_study_profile(ROOT / "params" / "consolidation" / "paper.yaml"))
    by = {(s.build, s.prompt): s for s in sizes}
    dc_all = by["dc/static_all", "consolidation"]
    assert dc_all.records == 768 and dc_all.chars > 768 * 900 and dc_all.tokens > dc_all.chars // 3 + 4096 - 1
    assert by["dc/static_group", "consolidation"].records == 128
    assert by["dc/stream", "consolidation"].records == 6
    assert by["all/static_all", "memory"].records == 768 and by["all/stream", "memory"].records == 50  # cap 50
    assert by["fs16/static_all", "memory"].records == 16
    assert ("ace/static_all", "memory") not in by  # an LLM-written memory has no bound before the run


def test_a_larger_summary_budget_is_refused_at_load_naming_the_build_and_the_fix(tmp_path):
    data = yaml.safe_load((ROOT / "params" / "consolidation" / "paper.yaml").read_text())
    path = _copy(
        tmp_path, builder_options={**data["builder_options"], "common": {"max_tokens": 4096, "summary_chars": 3000}}
    )
    with pytest.raises(StudyProfileError) as err:
        load_study_profile(path)
    text = str(err.value)
    assert "build dc/static_all" in text and "768 record(s)" in text and "'gpt-5.4-mini' holds 272000" in text
    assert "truncate_oldest" in text and "batch_size" in text  # the fixes
    assert load_study_profile(path, context_check=False).context.overflow == "refuse"


def test_a_small_context_backbone_is_refused_and_truncate_oldest_loads(tmp_path):
    path = _copy(tmp_path, backbone="qwen3.5-27b")
    with pytest.raises(StudyProfileError, match=r"build \w+/static_all.*'Qwen/[^']*' holds 32768.*Fix:"):
        load_study_profile(path)
    lenient = _copy(tmp_path, backbone="qwen3.5-27b", context={"overflow": "truncate_oldest"})
    profile = load_study_profile(lenient)
    sizes = check_profile_context(profile)
    assert any(not s.fits and s.context_length == 32768 for s in sizes)  # estimated, recorded, not refused


def test_an_endpoint_override_is_checked_against_its_own_context(tmp_path):
    path = _copy(tmp_path, backbone="qwen3.5-27b")
    profile = load_study_profile(path, context_check=False)
    big = Endpoint(base_url="http://localhost:1/v1", model="served", context_length=1_000_000)
    assert all(s.fits for s in check_profile_context(profile, big))
    small = Endpoint(base_url="http://localhost:1/v1", model="served", context_length=8192)
    with pytest.raises(StudyProfileError, match="'served' holds 8192"):
        check_profile_context(profile, small)


def test_scienceworld_pool_is_sized_by_the_engines_stored_train_variations():
    """allow_fewer: a task gives at most its train variations (the engine's, stored in the partition), so the
    Table 9 pool is 386 logs, not 15 x 40 = 600, and All's memory fits (600 would not)."""
    from antipersist_lib.consolidation.context_estimate import expert_counts, pool_size

    profile = load_study_profile(ROOT / "params" / "consolidation" / "scienceworld.yaml")
    counts = expert_counts(profile)
    assert counts["identify-life-stages-1"] == 6 and counts["boil"] == 14 and counts["use-thermometer"] == 40
    assert pool_size(profile)[0] == sum(counts.values()) == 386
