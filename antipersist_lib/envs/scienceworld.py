"""ScienceWorld on its own engine (PyPI ``scienceworld``, a Scala simulator run in a JVM).

One JVM is started lazily and reused across episodes; each episode calls
``load(task_name, variation, simplification)``. Success is the engine's score reaching 100.
The default simplification is ``easy`` (teleporting, open doors, self-watering greenhouse,
no electrical actions), the common setting for LLM agents with a 50-step budget; the paper does
not state one, so it is recorded in every manifest and configurable.

Ambiguous commands: the engine sometimes answers "Ambiguous request" with numbered options and
waits for a number. The adapter answers with option 0 on the agent's behalf and shows the
agent what was chosen (the usual practice of ScienceWorld LLM agents); this costs no extra
step of the agent's budget.
"""

from __future__ import annotations

import logging
import random
import shutil
import subprocess
from importlib import metadata
from typing import Any

from antipersist_lib.envs.base import Environment, StepResult
from antipersist_lib.envs.partitions import PARTITION_SEED
from antipersist_lib.errors import BenchmarkUnavailableError, InfrastructureError
from antipersist_lib.records import Partition, Task
from antipersist_lib.serving.process_report import describe_exit

log = logging.getLogger(__name__)

INVALID_OBSERVATION = "No known action matches that input."
AMBIGUOUS_PREFIX = "Ambiguous request"
SIMPLIFICATIONS = ("", "easy")

ACTION_HELP = """\
Commands (replace OBJ/LOC with names from the observations):
  look around | look at OBJ | look in OBJ | inventory | task
  go to LOC | open OBJ | close OBJ | teleport to LOC
  pick up OBJ | put down OBJ | move OBJ to OBJ | pour OBJ into OBJ
  focus on OBJ (only on the object the task asks about: focusing on the wrong one ends the task)
  activate OBJ | deactivate OBJ | use OBJ on OBJ | mix OBJ | dunk OBJ into OBJ
  connect OBJ to OBJ | disconnect OBJ | eat OBJ | flush OBJ | read OBJ
  wait | wait1  (let time pass)"""


def java_version() -> str | None:
    """The Java runtime's version line, or None when no ``java`` is on PATH."""
    java = shutil.which("java")
    if java is None:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def _java_process(engine: Any) -> Any:
    """The JVM process py4j launched for ``engine`` (both engines keep it on their gateway), or None."""
    return getattr(getattr(engine, "_gateway", None), "java_process", None)


def jvm_exited(engine: Any) -> bool:
    """Whether the py4j-launched JVM behind ``engine`` has exited. Why ask first: py4j answers a call to a dead
    JVM with nested connection retries, after which CPython 3.11's next compile can fail with "AST constructor
    recursion depth mismatch" (seen in the test suite after a killed JVM)."""
    proc = _java_process(engine)
    return proc is not None and proc.poll() is not None


def jvm_state(engine: Any) -> str:
    """How the JVM behind ``engine`` stands, for error messages: running, or how it died (its exit code or signal,
    named as the kit names every dead child process: ``serving.process_report.describe_exit``)."""
    proc = _java_process(engine)
    code = proc.poll() if proc is not None else None
    if code is None:
        return "the JVM is still running"
    return f"the JVM died ({describe_exit(code)}); the next episode starts a fresh one"


def close_engine(engine: Any) -> None:
    """Close a py4j engine that may already be dead (nothing to report then)."""
    if engine is not None:
        try:
            engine.close()
        except Exception:  # the JVM may already be gone
            pass


def require_java(engine: str) -> None:
    """Raise ``BenchmarkUnavailableError`` with the fix when no Java runtime is on PATH (engines run in a JVM)."""
    if java_version() is None:
        raise BenchmarkUnavailableError(
            f"{engine} needs a Java runtime (java on PATH): install it with "
            "`apt-get install -y default-jre-headless` (Debian/Ubuntu) or any JRE >= 11; "
            "`make java` does this on Debian-based machines."
        )


def _require_engine() -> Any:
    require_java("ScienceWorld")
    try:
        from scienceworld import ScienceWorldEnv
    except ImportError as exc:
        raise BenchmarkUnavailableError(
            "the `scienceworld` package is not installed: `pip install scienceworld==1.2.3` "
            "(the kit's own install step does this)."
        ) from exc
    return ScienceWorldEnv


class ScienceWorldEnvironment(Environment):
    benchmark = "scienceworld"
    action_help = ACTION_HELP

    def __init__(self, *, simplification: str = "easy", env_step_limit: int = 100) -> None:
        if simplification not in SIMPLIFICATIONS:
            raise ValueError(f"simplification is {simplification!r}, expected one of {SIMPLIFICATIONS}")
        if env_step_limit < 1:
            raise ValueError(f"env_step_limit must be >= 1, got {env_step_limit}")
        self.simplification = simplification
        self.env_step_limit = env_step_limit
        self._env: Any = None
        self._score = 0.0
        self._done = False
        self._valid_cache: list[str] | None = None

    # -- engine lifecycle ------------------------------------------------------------------

    def _engine(self) -> Any:
        if self._env is None:
            cls = _require_engine()
            try:
                self._env = cls("", envStepLimit=self.env_step_limit)
            except Exception as exc:
                raise InfrastructureError(f"could not start the ScienceWorld JVM: {exc!r}") from exc
        return self._env

    def _drop_engine(self) -> None:
        env, self._env = self._env, None
        close_engine(env)

    def close(self) -> None:
        self._drop_engine()

    def check_available(self) -> None:
        """Java and the ``scienceworld`` package (the JVM itself starts with the first task)."""
        _require_engine()

    # -- episodes --------------------------------------------------------------------------

    def _load(self, task: Task, gold: bool = False) -> Any:
        try:
            name = str(task.env_args["task_name"])
            variation = int(task.env_args["variation"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"ScienceWorld task {task.key} needs env_args task_name and variation: {exc!r}") from exc
        env = self._engine()
        try:
            env.load(name, variation, self.simplification, generateGoldPath=gold)
            return env
        except Exception as exc:
            self._drop_engine()  # a failed load usually means a dead JVM: start afresh next time
            raise InfrastructureError(f"ScienceWorld failed to load {name} variation {variation}: {exc!r}") from exc

    def _reset(self, task: Task) -> str:
        env = self._load(task)
        try:
            obs, info = env.reset()
            desc = env.get_task_description()
        except Exception as exc:
            self._drop_engine()
            raise InfrastructureError(f"ScienceWorld reset failed: {exc!r}") from exc
        self._score = float(info.get("score", 0) or 0)
        self._done = False
        self._valid_cache = None
        return f"{desc}\n\n{obs.strip()}"

    def _step(self, action: str) -> StepResult:
        if self._env is None:
            raise InfrastructureError("ScienceWorld engine is not running (step before reset, or the JVM died)")
        try:
            if jvm_exited(self._env):
                raise ConnectionError("the JVM is gone")  # py4j's retries on a refused port can crash CPython 3.11
            obs, reward, done, info = self._env.step(action)
            if obs.startswith(AMBIGUOUS_PREFIX):
                options = obs
                obs, reward2, done, info = self._env.step("0")
                reward = (reward or 0) + (reward2 or 0)
                first = options.splitlines()[1].strip() if len(options.splitlines()) > 1 else "option 0"
                obs = f"(Ambiguous command; the first match was used: {first})\n{obs}"
        except Exception as exc:
            state = jvm_state(self._env)
            self._drop_engine()
            raise InfrastructureError(f"ScienceWorld step failed: {exc!r}; {state}") from exc
        self._valid_cache = None
        score = float(info.get("score", self._score) or 0)
        self._score = score
        finished = bool(done) or score >= 100
        self._done = finished
        valid = obs.strip() != INVALID_OBSERVATION
        return StepResult(
            obs.strip(), float(reward or 0), finished, valid, {"score": score, "moves": info.get("moves")}
        )

    @property
    def success(self) -> bool:
        return self._score >= 100

    @property
    def score(self) -> float:
        return self._score

    def valid_actions(self) -> list[str] | None:
        if self._env is None:
            return None
        if self._valid_cache is None:
            try:
                self._valid_cache = list(self._env.get_valid_action_object_combinations())
            except Exception as exc:
                raise InfrastructureError(f"ScienceWorld could not list valid actions: {exc!r}") from exc
        return self._valid_cache

    def normalize_action(self, action: str) -> str:
        return " ".join(action.strip().split())

    def gold_actions(self, task: Task) -> list[str]:
        """The engine's own expert action sequence for ``task`` (used by the oracle tests)."""
        env = self._load(task, gold=True)
        try:
            return list(env.get_gold_action_sequence())
        except Exception as exc:
            raise InfrastructureError(f"ScienceWorld could not produce a gold path: {exc!r}") from exc

    def engine_info(self) -> dict[str, Any]:
        try:
            version = metadata.version("scienceworld")
        except metadata.PackageNotFoundError:
            version = None
        return {
            "benchmark": self.benchmark,
            "scienceworld": version,
            "java": java_version(),
            "simplification": self.simplification,
            "env_step_limit": self.env_step_limit,
            "success": "score >= 100",
        }

    # -- partition -------------------------------------------------------------------------

    def task_names(self) -> list[str]:
        return list(self._engine().get_task_names())

    def variations(self, task_name: str) -> tuple[list[int], list[int], list[int]]:
        """(train, dev, test) variations of one task type, as the engine splits them."""
        env = self._engine()
        env.load(task_name, 0, self.simplification)
        return list(env.get_variations_train()), list(env.get_variations_dev()), list(env.get_variations_test())

    def instruction(self, task_name: str, variation: int) -> str:
        env = self._engine()
        env.load(task_name, variation, self.simplification)
        return str(env.get_task_description())


def draw_scienceworld_variations(
    variations: dict[str, tuple[list[int], list[int], list[int]]],
    *,
    seed: int = PARTITION_SEED,
    n_train: int = 5,
    n_heldout: int = 2,
) -> dict[str, tuple[list[int], list[int]]]:
    """The D.1 draw, separated from the engine so it can be re-checked without a JVM.

    ``variations[name] = (train, dev, test)`` as the engine splits each task type. One
    ``random.Random(seed)`` stream, task types in the given order, samples ``n_train`` training
    variations from the engine's train variations and ``n_heldout`` held-out variations from its
    test variations, so the two never overlap and evaluation is on unseen variations. Where a
    type has fewer than ``n_train`` train variations (identify-life-stages-2 has 4), the missing
    ones are sampled from its dev variations.
    """
    rng = random.Random(seed)
    out = {}
    for name, (train, dev, test) in variations.items():
        train, dev, test = sorted(train), sorted(dev), sorted(test)
        if len(test) < n_heldout or len(train) + len(dev) < n_train:
            raise ValueError(
                f"{name}: needs {n_train} train/dev and {n_heldout} test variations, "
                f"has {len(train)}+{len(dev)} and {len(test)}"
            )
        if len(train) >= n_train:
            chosen = rng.sample(train, n_train)
        else:
            chosen = train + rng.sample(dev, n_train - len(train))
        out[name] = (sorted(chosen), sorted(rng.sample(test, n_heldout)))
    return out


def build_scienceworld_partition(
    *, seed: int = PARTITION_SEED, simplification: str = "easy"
) -> tuple[Partition, dict[str, Any]]:
    """Draw the 150/60 partition on the engine; returns it and the variation lists it drew from.

    The variation pools are stored in ``drawn_with["pools"]`` so the draw can be re-checked
    without a JVM (``draw_scienceworld_variations(pools, seed)``)."""
    with ScienceWorldEnvironment(simplification=simplification) as env:
        names = env.task_names()
        pools = {name: env.variations(name) for name in names}
        drawn = draw_scienceworld_variations(pools, seed=seed)
        splits: dict[str, list[Task]] = {"train": [], "heldout": []}
        for name in names:
            tr, he = drawn[name]
            for split, vars_ in (("train", tr), ("heldout", he)):
                for v in vars_:
                    splits[split].append(
                        Task(
                            task_id=len(splits[split]),
                            benchmark="scienceworld",
                            task_type=name,
                            instruction=env.instruction(name, v),
                            split=split,
                            env_args={"task_name": name, "variation": v},
                        )
                    )
        info = env.engine_info()
    part = Partition(
        benchmark="scienceworld",
        seed=seed,
        drawn_with={
            "scienceworld": info["scienceworld"],
            "simplification": simplification,
            "train_source": "engine train variations (dev variations where train has fewer than 5)",
            "heldout_source": "engine test variations",
            "per_type": {"train": 5, "heldout": 2},
            "pools": {n: [sorted(a), sorted(b), sorted(c)] for n, (a, b, c) in pools.items()},
        },
        train=tuple(splits["train"]),
        heldout=tuple(splits["heldout"]),
        notes="Stratified: 5 training variations from the engine's train split (topped up from "
        "its dev split where train has fewer) and 2 held-out variations from its test split for "
        "each of the 30 task types (D.1), one seeded draw.",
    )
    return part, {n: [list(a), list(b), list(c)] for n, (a, b, c) in pools.items()}
