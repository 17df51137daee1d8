"""Fig. 4's setting (faulty-memories §4.1 "A strong memory is not a fixed point", item 3): a Static-Group memory
built by the strongest model, then streamed further by a weaker one over the same pool, with heterogeneous and
homogeneous batches, and three Qwen3.5 solvers acting on every memory (``params/consolidation/fig4_paper.yaml``)."""

from __future__ import annotations

from pathlib import Path

from antipersist_lib.consolidation.profile import load_study_profile

ROOT = Path(__file__).resolve().parents[1]


def test_the_fig4_profile_seeds_static_group_by_the_strong_model_and_streams_by_the_weak_one():
    prof = load_study_profile(ROOT / "params" / "consolidation" / "fig4_paper.yaml")
    assert prof.benchmark == "alfworld" and prof.pool.per_type == 128  # Table 1: 128 GT trajectories per type
    seed = prof.regime("strong_seed")
    assert seed.regime == "static_group" and seed.backbone == "gpt-5.4" and seed.initial is None
    assert prof.backbone == "gpt-5-nano"  # the study's backbone builds the streams
    streams = [r for r in prof.regimes if r.regime == "stream"]
    assert {r.homogeneous for r in streams} == {False, True}  # §4.1 item 3: mixed vs one task at a time
    for r in streams:
        assert r.initial == "strong_seed" and r.backbone is None and (r.batch_size, r.capacity) == (6, 50)
    assert prof.eval_backbones == ("qwen3.5-27b", "qwen3.5-9b", "qwen3.5-4b")
    assert prof.heldout_set == "valid_seen_balanced_48"
    # every stream continues every builder's seed bank: the seed is built first
    keys = [b.key for b in prof.builds()]
    assert all(keys.index(f"{b}/strong_seed") < keys.index(f"{b}/weak_stream") for b in prof.builders)
