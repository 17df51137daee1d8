"""A consolidation pool for tests: a scripted ReAct run's training episodes on ErrandWorld (the kit's test world),
read by a study profile's ``pool.runs``. Shared by the consolidation study tests (not a test module itself)."""

from __future__ import annotations

from pathlib import Path

from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint


def errand_endpoint(base_url: str) -> Endpoint:
    return Endpoint(base_url=base_url, model="scripted", api_key_env="ANTIPERSIST_TEST_KEY", max_retries=0)


def errand_pool_run(out_root: Path, endpoint: Endpoint, *, train: int, seed: int = 3) -> Path:
    """Run ``train`` training episodes (and one held-out) of scripted ReAct; returns the run folder."""
    spec = RunSpec(
        method="react",
        benchmark="errandworld",
        backbone="scripted",
        embedding="bow",
        seed=seed,
        iterations=1,
        train_per_iteration=train,
        max_steps=8,
        heldout_limit=1,
        heldout_concurrency=1,
        out_root=str(out_root),
        cache_dir=None,
        progress=False,
    )
    run_cell(spec, endpoint=endpoint, embed_endpoint=endpoint)
    return spec.run_dir()
