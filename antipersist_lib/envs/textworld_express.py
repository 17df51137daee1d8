"""TextWorldExpress on its own engine (PyPI ``textworld-express``, a Scala simulator in a JVM).

**A small-model proxy, not one of the papers' benchmarks**: ALFWorld-like games that run offline,
cost milliseconds a step and are partly solvable by a 1.5B model, so memory can help or hurt. No
number measured here is comparable with any number in the papers.

Task types are three games at one fixed difficulty each (``GAMES``: ``twc``, ``coin``,
``cookingworld``); training tasks come from the engine's train fold of seeds, held-out tasks from its
test fold. Success is the engine's ``tasksuccess``, ``score`` its normalised score. The engine's gold
paths (``gold_actions``) are replayed as expert demonstrations. docs/benchmarks.md, "TextWorldExpress
(a small-model proxy)", has the details.
"""

from __future__ import annotations

import random
from importlib import metadata
from typing import Any

from antipersist_lib.envs.base import Environment, StepResult
from antipersist_lib.envs.partitions import PARTITION_SEED
from antipersist_lib.envs.scienceworld import close_engine, java_version, jvm_exited, jvm_state, require_java
from antipersist_lib.errors import BenchmarkUnavailableError, InfrastructureError
from antipersist_lib.records import Partition, Task

BENCHMARK = "textworld_express"
#: the version the partition and the measurements were made with (pinned in pyproject.toml)
VALIDATED_VERSION = "1.1.0"
INVALID_PREFIX = "Unknown action"
#: task type -> (engine game name, its generation parameters): one fixed difficulty per type
GAMES: dict[str, tuple[str, str]] = {
    "twc": ("twc", "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0"),
    "coin": ("coin", "numLocations=3,numDistractorItems=0,includeDoors=0,limitInventorySize=0"),
    "cookingworld": (
        "cookingworld",
        "numLocations=1,numIngredients=1,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
    ),
}
FOLDS = ("train", "dev", "test")
TRAIN_PER_TYPE = 20
HELDOUT_PER_TYPE = 10

ACTION_HELP = """\
TextWorldExpress commands (OBJ and LOC are names exactly as the observation writes them):
  look around | inventory | read OBJ | eat OBJ
  take OBJ | put OBJ in LOC | put OBJ on LOC | open LOC | close LOC
  move north | move south | move east | move west   (go to a neighbouring room)
  slice OBJ | chop OBJ | dice OBJ | cook OBJ in LOC | prepare meal
An action the game does not know answers "Unknown action"."""


def _require_engine() -> Any:
    require_java("TextWorldExpress")
    try:
        from textworld_express import TextWorldExpressEnv
    except ImportError as exc:
        raise BenchmarkUnavailableError(
            f"the `textworld-express` package is not installed: `pip install textworld-express=={VALIDATED_VERSION}` "
            "(the kit's own install step does this)."
        ) from exc

    class Engine(TextWorldExpressEnv):
        """The package's engine, closed once and only by the adapter: the package's own ``__del__``
        shuts the py4j gateway down again whenever the garbage collector runs, which can be in the
        middle of a compile and (CPython 3.11) crashes it with "AST constructor recursion depth
        mismatch"; the JVM still dies with the process (``die_on_exit``)."""

        _closed = False

        def close(self) -> None:
            if self._closed:
                return
            self._closed = True
            gateway = self._gateway
            if gateway.java_process.poll() is None:
                super().close()
            else:  # a dead JVM: asking it to shut down only retries a refused connection
                gateway._gateway_client.close()
                gateway.shutdown_callback_server()

        def __del__(self) -> None:
            pass

    return Engine


def game_of(task: Task) -> tuple[str, str, int, str]:
    """(game name, generation parameters, seed, fold) of ``task``; a malformed task names what is missing."""
    try:
        game = str(task.env_args["game"])
        params = str(task.env_args["params"])
        seed = int(task.env_args["seed"])
        fold = str(task.env_args["fold"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"TextWorldExpress task {task.key} needs env_args game, params, seed and fold: {exc!r}"
        ) from exc
    if fold not in FOLDS:
        raise ValueError(f"TextWorldExpress task {task.key}: fold is {fold!r}, expected one of {FOLDS}")
    return game, params, seed, fold


class TextWorldExpressEnvironment(Environment):
    benchmark = BENCHMARK
    action_help = ACTION_HELP

    def __init__(self, *, env_step_limit: int = 100) -> None:
        if env_step_limit < 1:
            raise ValueError(f"env_step_limit must be >= 1, got {env_step_limit}")
        self.env_step_limit = env_step_limit
        self._env: Any = None
        self._loaded: tuple[str, str] | None = None
        self._info: dict[str, Any] = {}

    # -- engine lifecycle ------------------------------------------------------------------

    def _engine(self) -> Any:
        if self._env is None:
            cls = _require_engine()
            try:
                self._env = cls(envStepLimit=self.env_step_limit)
            except Exception as exc:
                raise InfrastructureError(f"could not start the TextWorldExpress JVM: {exc!r}") from exc
            self._loaded = None
        return self._env

    def _drop_engine(self) -> None:
        env, self._env = self._env, None
        self._loaded = None
        close_engine(env)

    def close(self) -> None:
        self._drop_engine()

    def check_available(self) -> None:
        """Java and the ``textworld-express`` package (the JVM starts with the first task)."""
        _require_engine()

    # -- episodes --------------------------------------------------------------------------

    def _start(self, task: Task, gold: bool = False) -> tuple[str, dict[str, Any]]:
        game, params, seed, fold = game_of(task)
        env = self._engine()
        try:
            if self._loaded != (game, params):
                env.load(gameName=game, gameParams=params)
                self._loaded = (game, params)
            obs, info = env.reset(seed=seed, gameFold=fold, generateGoldPath=gold)
        except Exception as exc:
            state = jvm_state(self._env)
            self._drop_engine()  # a failed reset usually means a dead JVM: start afresh next time
            raise InfrastructureError(
                f"TextWorldExpress failed to start {game} seed {seed} ({fold}): {exc!r}; {state}"
            ) from exc
        return str(obs), dict(info)

    def _reset(self, task: Task) -> str:
        obs, info = self._start(task)
        self._info = info
        return f"{str(info.get('taskDescription', '')).strip()}\n\n{obs.strip()}"

    def _step(self, action: str) -> StepResult:
        if self._env is None:
            raise InfrastructureError("TextWorldExpress engine is not running (step before reset, or the JVM died)")
        try:
            if jvm_exited(self._env):
                raise ConnectionError("the JVM is gone")  # py4j's retries on a refused port can crash CPython 3.11
            obs, reward, done, info = self._env.step(action)
        except Exception as exc:
            state = jvm_state(self._env)
            self._drop_engine()
            raise InfrastructureError(f"TextWorldExpress step failed: {exc!r}; {state}") from exc
        self._info = dict(info)
        finished = bool(done) or bool(info.get("tasksuccess")) or bool(info.get("taskfailure"))
        valid = not str(obs).strip().startswith(INVALID_PREFIX)
        return StepResult(
            str(obs).strip(),
            float(reward or 0),
            finished,
            valid,
            {"score": self.score, "moves": info.get("numMoves"), "failed": bool(info.get("taskfailure"))},
        )

    @property
    def success(self) -> bool:
        return bool(self._info.get("tasksuccess"))

    @property
    def score(self) -> float:
        return float(self._info.get("score", 0.0) or 0.0)

    def valid_actions(self) -> list[str] | None:
        acts = self._info.get("validActions")
        return None if acts is None else [str(a) for a in acts]

    def normalize_action(self, action: str) -> str:
        return " ".join(action.strip().split())

    def gold_actions(self, task: Task) -> list[str]:
        """The engine's own gold path for ``task`` (replayed as expert demonstrations), without its
        opening ``look around`` (the first observation is already the room's description) and without
        its detours: Coin Collector's gold path is a random walk that differs from call to call, so a
        move straight back where it came from is dropped with the move before it
        (``without_detours``), which makes the path the same every time on these tree-shaped maps."""
        self._start(task, gold=True)
        try:
            path = [str(a) for a in self._env.getGoldActionSequence()]
        except Exception as exc:
            raise InfrastructureError(f"TextWorldExpress could not produce a gold path: {exc!r}") from exc
        if path[:1] == ["look around"]:  # the reset already showed the room: a demonstration that opens
            path = path[1:]  # with it teaches a small model to look around again and again
        return without_detours(path)

    def engine_info(self) -> dict[str, Any]:
        try:
            version = metadata.version("textworld-express")
        except metadata.PackageNotFoundError:
            version = None
        return {
            "benchmark": self.benchmark,
            "textworld_express": version,
            "java": java_version(),
            "games": {k: f"{g}: {p}" for k, (g, p) in GAMES.items()},
            "env_step_limit": self.env_step_limit,
            "success": "the engine's tasksuccess",
            "score": "the engine's normalised score in [0, 1]",
            "proxy": "a small-model proxy, not one of the papers' benchmarks",
        }

    def fold_seeds(self, task_type: str) -> dict[str, list[int]]:
        """The engine's seeds of each fold for one task type."""
        game, params = GAMES[task_type]
        env = self._engine()
        env.load(gameName=game, gameParams=params)
        self._loaded = (game, params)
        return {
            "train": sorted(int(s) for s in env.getValidSeedsTrain()),
            "dev": sorted(int(s) for s in env.getValidSeedsDev()),
            "test": sorted(int(s) for s in env.getValidSeedsTest()),
        }


OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def without_detours(actions: list[str]) -> list[str]:
    """``actions`` with every ``move D`` immediately undone by ``move opposite(D)`` removed (repeatedly,
    so a walk there and back through several rooms collapses too); nothing else changes."""
    out: list[str] = []
    for a in actions:
        parts = a.split()
        if (
            out
            and len(parts) == 2
            and parts[0] == "move"
            and out[-1].split()[:1] == ["move"]
            and OPPOSITE.get(out[-1].split()[-1]) == parts[1]
        ):
            out.pop()
            continue
        out.append(a)
    return out


def draw_textworld_express_seeds(
    folds: dict[str, dict[str, list[int]]],
    *,
    seed: int = PARTITION_SEED,
    n_train: int = TRAIN_PER_TYPE,
    n_heldout: int = HELDOUT_PER_TYPE,
) -> dict[str, tuple[list[int], list[int]]]:
    """The draw, apart from the engine so it can be re-checked without a JVM: one
    ``random.Random(seed)`` visits the task types in order and samples ``n_train`` seeds of the
    engine's train fold and ``n_heldout`` of its test fold (listed in draw order)."""
    rng = random.Random(seed)
    out = {}
    for name, by_fold in folds.items():
        train, test = sorted(by_fold["train"]), sorted(by_fold["test"])
        if len(train) < n_train or len(test) < n_heldout:
            raise ValueError(
                f"{name}: needs {n_train} train and {n_heldout} test seeds, has {len(train)} and {len(test)}"
            )
        out[name] = (rng.sample(train, n_train), rng.sample(test, n_heldout))
    return out


def build_textworld_express_partition(
    *, seed: int = PARTITION_SEED, n_train: int = TRAIN_PER_TYPE, n_heldout: int = HELDOUT_PER_TYPE
) -> Partition:
    """Draw the partition on the engine: per task type ``n_train`` training games from the train
    fold and ``n_heldout`` held-out games from the test fold; each task's instruction is the
    engine's task description followed by its first observation (what the agent sees at reset)."""
    with TextWorldExpressEnvironment() as env:
        folds = {name: env.fold_seeds(name) for name in GAMES}
        drawn = draw_textworld_express_seeds(folds, seed=seed, n_train=n_train, n_heldout=n_heldout)
        splits: dict[str, list[Task]] = {"train": [], "heldout": []}
        for name, (game, params) in GAMES.items():
            for split, fold, seeds in (("train", "train", drawn[name][0]), ("heldout", "test", drawn[name][1])):
                for s in seeds:
                    task = Task(
                        task_id=len(splits[split]),
                        benchmark=BENCHMARK,
                        task_type=name,
                        instruction="",
                        split=split,
                        env_args={"game": game, "params": params, "seed": s, "fold": fold},
                    )
                    text = env.reset(task)
                    splits[split].append(
                        Task(task.task_id, BENCHMARK, name, " ".join(text.split()), split, dict(task.env_args))
                    )
        info = env.engine_info()
    return Partition(
        benchmark=BENCHMARK,
        seed=seed,
        drawn_with={
            "textworld_express": info["textworld_express"],
            "games": {k: {"game": g, "params": p} for k, (g, p) in GAMES.items()},
            "train_source": "engine train fold",
            "heldout_source": "engine test fold",
            "per_type": {"train": n_train, "heldout": n_heldout},
            "fold_sizes": {n: {f: len(v) for f, v in by.items()} for n, by in folds.items()},
        },
        train=tuple(splits["train"]),
        heldout=tuple(splits["heldout"]),
        notes=f"A small-model proxy, not a paper benchmark. Per task type {n_train} training games from the "
        f"engine's train fold and {n_heldout} held-out games from its test fold, one seeded draw.",
    )
