"""The engines' own expert paths, replayed on the real engine.

Two users: the faulty-memories study's expert trajectory pools (``consolidation/pool.py``) and
the agent's in-context demonstrations (``core/demonstrations.py``). Both need the engine's
observations, not just the expert's commands, so the commands are played on the engine.

Where the expert commands come from: ALFWorld's game file ``walkthrough`` (the PDDL planner's
plan shipped with every game); ScienceWorld's ``get_gold_action_sequence`` for the loaded
variation; TextWorldExpress's gold path for the game's seed. Any other environment may supply its own by defining ``expert_actions(task)``; the
remaining benchmarks (WebShop, AppWorld, the test world ErrandWorld) have none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from antipersist_lib.records import EpisodeOutcome, Step, Task, Trajectory

#: benchmarks whose engines ship an expert action sequence for every task
EXPERT_BENCHMARKS = ("alfworld", "scienceworld", "textworld_express")


def has_expert_paths(env: Any) -> bool:
    """True when ``expert_actions(env, task)`` can answer for this environment."""
    return callable(getattr(env, "expert_actions", None)) or getattr(env, "benchmark", "") in EXPERT_BENCHMARKS


def expert_actions(env: Any, task: Task) -> list[str]:
    """The expert's command sequence for ``task`` on ``env`` (not yet played).

    ALFWorld reads the game's ``walkthrough`` (empty for a game the file marks unsolvable, so its
    replay fails and is skipped); ScienceWorld asks the engine for the variation's gold path."""
    own = getattr(env, "expert_actions", None)
    if callable(own):
        return [str(a) for a in own(task)]
    benchmark = getattr(env, "benchmark", "")
    if benchmark == "alfworld":
        from antipersist_lib.envs.alfworld import read_game

        rel = task.env_args.get("game")
        if not rel:
            raise ValueError(f"ALFWorld task {task.key} has no env_args['game']")
        game = read_game(env.data_dir, str(rel))
        if game.get("solvable") is not True:
            return []
        return [str(a) for a in game.get("walkthrough") or []]
    if benchmark in ("scienceworld", "textworld_express"):
        return [str(a) for a in env.gold_actions(task)]
    raise ValueError(
        f"benchmark {benchmark!r} has no expert paths to replay (they exist for {', '.join(EXPERT_BENCHMARKS)})"
    )


def replay(env: Any, task: Task, actions: Sequence[str]) -> tuple[Trajectory, EpisodeOutcome]:
    """Play ``actions`` on the real engine, so the trajectory carries the engine's observations
    (a list of expert actions alone would teach a reader nothing about what it sees)."""
    obs = env.reset(task)
    steps: list[Step] = []
    for action in actions:
        act = env.normalize_action(action)
        res = env.step(act)
        steps.append(Step(act, res.observation, res.reward, res.done, res.valid, ""))
        if res.done:
            break
    traj = Trajectory(obs, tuple(steps))
    outcome = EpisodeOutcome(
        success=bool(env.success), score=float(env.score), n_steps=traj.n_steps, n_invalid=traj.n_invalid
    )
    return traj, outcome


def replay_expert(env: Any, task: Task) -> tuple[Trajectory, EpisodeOutcome]:
    """The expert path of ``task`` played on ``env``: its trajectory and the engine's outcome."""
    return replay(env, task, expert_actions(env, task))
