"""``task_filter`` governs S_k retrieval as it governs M_k's (persist ablation, abstraction and joint
memory): "task_type" shows only stored abstractions of the task's own type, "benchmark" and "off"
show any. The outcome log's neighbourhood never filters by type (Algorithm 1 searches all of L_k)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from antipersist_lib.envs.errand_world import ErrandWorld, make_tasks
from antipersist_lib.memory.trajectory_store import abstraction_type_filter
from antipersist_lib.methods import make_method
from antipersist_lib.methods.base import MethodContext
from antipersist_lib.records import Task
from antipersist_lib.testing.scripted_policy import errand_policy

TASKS = make_tasks("train", 12)
FRUIT = next(t for t in TASKS if t.task_type == "bring_fruit")
ITEM = next(t for t in TASKS if t.task_type == "bring_item")
#: (method, parameters that give it an abstraction store S_k)
WITH_S_K = [
    ("anti_persistence", {"persist": True, "policy": "fixed", "fixed_mode": "none"}),
    ("abstraction_memory", {}),
    ("joint_memory", {}),
]


def _shown(make_clients, tmp_path: Path, method: str, params: dict, task_filter: str) -> dict[str, list[str]]:
    """Store one abstraction of type bring_fruit, then ask the method for a task of each type."""
    c = make_clients(errand_policy, ledger_path=tmp_path / "calls.jsonl")
    m = make_method(
        method,
        MethodContext(c.llm, c.embedder, tmp_path, 3, "errandworld", fsync=False),
        task_filter=task_filter,
        **params,
    )
    env = ErrandWorld()
    stored = m.store.add(
        "Fruit is kept in the kitchen.",
        kind="guidance",
        task_type=FRUIT.task_type,
        embedding=c.embedder.embed(FRUIT.instruction),
    )
    m.freeze()
    out = {}
    for task in (FRUIT, ITEM):
        ctx = m.prepare(task, env.reset(task), phase="heldout", iteration=1, position=0)
        out[task.task_type] = ctx.meta["abstractions_shown"]
        assert list(ctx.parents) == ctx.meta["abstractions_shown"]
    m.close()
    assert out[FRUIT.task_type] == [stored.abstraction_id]  # its own type: always retrievable
    return out


@pytest.mark.parametrize("method, params", WITH_S_K)
def test_task_type_filter_hides_abstractions_of_another_type(make_clients, tmp_path, method, params):
    assert _shown(make_clients, tmp_path, method, params, "task_type")[ITEM.task_type] == []


@pytest.mark.parametrize("task_filter", ["off", "benchmark"])
@pytest.mark.parametrize("method, params", WITH_S_K)
def test_without_the_type_filter_another_type_is_retrieved(make_clients, tmp_path, method, params, task_filter):
    shown = _shown(make_clients, tmp_path, method, params, task_filter)
    assert shown[ITEM.task_type] == shown[FRUIT.task_type] and len(shown[ITEM.task_type]) == 1


def test_abstraction_type_filter_maps_each_setting():
    task = Task(1, "errandworld", "bring_item")
    assert abstraction_type_filter("task_type", task) == "bring_item"
    assert abstraction_type_filter("benchmark", task) is None
    assert abstraction_type_filter("off", task) is None
    with pytest.raises(ValueError, match="task_filter is 'type'"):
        abstraction_type_filter("type", task)


def test_outcome_log_neighbourhood_ignores_task_type():
    """L_k keeps task_type as a record field only: the selector's neighbourhood spans every type."""
    from antipersist_lib.core.selector import ModeSelector, SelectorConfig
    from antipersist_lib.memory.outcome_log import OutcomeLog

    log = OutcomeLog(None)
    for i, kind in enumerate(("bring_fruit", "bring_item", "other_type")):
        log.append(
            embedding=[1.0, 0.0],
            mode="none",
            reward=1.0,
            raw_success=True,
            task_type=kind,
            task_id=i,
            instruction="x",
        )
    local = ModeSelector(SelectorConfig()).local_estimates(log, np.array([1.0, 0.0]))
    assert sorted(local.neighbours) == [0, 1, 2]
