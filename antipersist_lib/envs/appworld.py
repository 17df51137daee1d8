"""AppWorld (Trivedi et al., 2024) through the ``appworld`` package, for the F.1 skill study.

The agent writes Python that calls AppWorld's app APIs; the adapter hands it only to
``world.execute(code)``, AppWorld's own sandboxed shell, and never ``exec``s or ``eval``s model code
in the kit's process. ``success`` is AppWorld's evaluation (every task test passes), ``score`` the
fraction of tests passed. AppWorld keeps one open world per process (its constructor closes the
others), so use one ``AppWorldEnvironment`` per process.

The package is imported lazily; without it or its data the adapter raises
``BenchmarkUnavailableError`` with the install steps. ``sample_appworld_tasks``,
``appworld_tasks`` and ``build_appworld_partition`` draw and save the study's 30 held-out tasks.
docs/benchmarks.md, "AppWorld", documents reset, step, evaluation and the partition.
"""

from __future__ import annotations

import logging
import os
import random
import sys
from collections.abc import Iterable
from importlib import import_module, metadata
from pathlib import Path
from typing import Any

from antipersist_lib.envs.base import Environment, StepResult
from antipersist_lib.envs.partitions import PARTITION_SEED
from antipersist_lib.errors import BenchmarkUnavailableError, InfrastructureError
from antipersist_lib.records import Partition, Task
from antipersist_lib.replies import code_or_reply

log = logging.getLogger(__name__)

#: tasks in the paper's AppWorld study (Appendix F.1)
F1_N_TASKS = 30
FAILED_PREFIX = "Execution failed"

INSTALL_HINT = (
    "AppWorld is not set up: install it with `pip install appworld`, unpack its apps with "
    "`appworld install`, download the task data with `appworld download data`, and set "
    "`APPWORLD_ROOT` to the directory that holds the downloaded `data/` folder (the directory "
    "where `appworld download data` was run; the current directory is the default)."
)

ACTION_HELP = """\
Act by writing Python code in one ```python ... ``` block per turn; it runs in AppWorld's shell
and you see what it prints. Variables persist between turns.
  apis.api_docs.show_app_descriptions()                       list the apps
  apis.api_docs.show_api_descriptions(app_name='spotify')     list an app's APIs
  apis.api_docs.show_api_doc(app_name='spotify', api_name='login')   one API's parameters
  apis.supervisor.show_account_passwords()                    the supervisor's app passwords
  apis.<app>.<api>(...)                                       call an API (print what you need)
When the task is done, call apis.supervisor.complete_task() -- with answer=... if the task asks a
question -- which ends the episode."""


def _import_appworld() -> Any:
    try:
        return import_module("appworld")
    except ImportError as exc:
        raise BenchmarkUnavailableError(INSTALL_HINT) from exc


def appworld_data_dir(module: Any | None = None) -> Path:
    """Where AppWorld looks for its data: its own path store, else ``$APPWORLD_ROOT/data``."""
    try:
        store = import_module("appworld.common.path_store").path_store
        data = getattr(store, "data", None)
        if data:
            return Path(data)
    except Exception:  # not the real package, or an older layout: fall back to the env var
        pass
    return Path(os.environ.get("APPWORLD_ROOT") or ".") / "data"


def require_appworld() -> Any:
    """The ``appworld`` module with its data present, or BenchmarkUnavailableError."""
    mod = _import_appworld()
    if not hasattr(mod, "AppWorld"):
        raise BenchmarkUnavailableError(f"the installed `appworld` package has no AppWorld class. {INSTALL_HINT}")
    tasks_dir = appworld_data_dir(mod) / "tasks"
    if not tasks_dir.is_dir():
        raise BenchmarkUnavailableError(f"AppWorld's task data was not found at {tasks_dir}. {INSTALL_HINT}")
    return mod


def load_appworld_task_ids(dataset: str = "dev") -> list[str]:
    """``appworld.load_task_ids(dataset)`` (train, dev, test_normal, test_challenge)."""
    mod = require_appworld()
    try:
        return [str(t) for t in mod.load_task_ids(dataset)]
    except Exception as exc:
        raise BenchmarkUnavailableError(
            f"AppWorld could not list the {dataset!r} tasks ({exc}). {INSTALL_HINT}"
        ) from exc


def sample_appworld_tasks(task_ids: Iterable[str], n: int = F1_N_TASKS, seed: int = PARTITION_SEED) -> list[str]:
    """``n`` distinct task ids drawn with ``random.Random(seed)`` (F.1: 30 random tasks).

    The ids are de-duplicated and sorted before drawing, so the draw depends only on the set
    of ids, not on the order they were listed in; the sample is returned sorted.
    """
    pool = sorted({str(t) for t in task_ids})
    if n < 0 or n > len(pool):
        raise ValueError(f"cannot draw {n} tasks from {len(pool)} distinct task ids")
    return sorted(random.Random(seed).sample(pool, n))


def appworld_tasks(task_ids: Iterable[str], *, split: str = "heldout", dataset: str | None = None) -> list[Task]:
    """Kit ``Task`` records for AppWorld task ids (``task_id`` = position in the list)."""
    out = []
    for i, tid in enumerate(task_ids):
        env_args: dict[str, Any] = {"task_id": str(tid)}
        if dataset is not None:
            env_args["dataset"] = dataset
        out.append(Task(task_id=i, benchmark="appworld", task_type="appworld", split=split, env_args=env_args))
    return out


def _appworld_version() -> str | None:
    try:
        return metadata.version("appworld")
    except metadata.PackageNotFoundError:
        return getattr(sys.modules.get("appworld"), "__version__", None)


def build_appworld_partition(dataset: str = "dev", seed: int = PARTITION_SEED, n: int = F1_N_TASKS) -> Partition:
    """The F.1 partition from the installed package's ``dataset`` task ids: ``n`` tasks drawn by
    ``sample_appworld_tasks`` (held-out), the remaining ids in sorted order (training pool)."""
    ids = sorted(set(load_appworld_task_ids(dataset)))
    held = sample_appworld_tasks(ids, n=n, seed=seed)
    chosen = set(held)
    train = [t for t in ids if t not in chosen]
    return Partition(
        benchmark="appworld",
        seed=seed,
        drawn_with={
            "appworld": _appworld_version(),
            "dataset": dataset,
            "n_task_ids": len(ids),
            "heldout_n": n,
            "draw": "sorted(random.Random(seed).sample(sorted(task_ids), n))",
        },
        train=tuple(appworld_tasks(train, split="train", dataset=dataset)),
        heldout=tuple(appworld_tasks(held, split="heldout", dataset=dataset)),
        notes=(
            f"Appendix F.1: {n} randomly selected AppWorld tasks ({dataset} set), evaluated with frozen skill "
            "libraries; the other tasks of the set form the training pool, which F.1 does not use."
        ),
    )


def _supervisor_text(sup: Any) -> str:
    if sup is None:
        return ""
    get = (lambda k: sup.get(k)) if isinstance(sup, dict) else (lambda k: getattr(sup, k, None))
    name = " ".join(str(x) for x in (get("first_name"), get("last_name")) if x)
    parts = [f"name: {name}"] if name else []
    for key, label in (("email", "email"), ("phone_number", "phone number")):
        v = get(key)
        if v:
            parts.append(f"{label}: {v}")
    return "; ".join(parts) if parts else str(sup)


class AppWorldEnvironment(Environment):
    """AppWorld episodes; the agent's actions are Python code run by ``world.execute`` only.

    Task ``env_args``: ``{"task_id": "<appworld task id>"}``. ``success`` is
    ``world.evaluate().success`` (all of the task's tests pass); ``score`` is the fraction of
    tests passed. ``appworld_options`` are passed to ``AppWorld(...)`` unchanged.
    """

    benchmark = "appworld"
    action_help = ACTION_HELP
    raw_actions = True  # the model writes a code block; the agent loop passes the whole reply

    def __init__(self, *, experiment_name: str = "antipersist", dataset: str = "dev", **appworld_options: Any) -> None:
        self._mod = require_appworld()
        self.experiment_name = experiment_name
        self.dataset = dataset
        self.appworld_options = dict(appworld_options)
        self._world: Any = None
        self._task_id: str | None = None
        self._completed = False
        self._evaluation: dict[str, Any] | None = None
        self._closed = False

    # -- world lifetime ---------------------------------------------------------------------

    def _close_world(self) -> None:
        world, self._world = self._world, None
        if world is None:
            return
        try:
            world.__exit__(None, None, None)
        except Exception as exc:  # releasing a broken world must not hide the episode's result
            log.warning("AppWorld world for %s did not close cleanly: %r", self._task_id, exc)

    def _reset(self, task: Task) -> str:
        if self._closed:
            raise InfrastructureError("the AppWorld adapter was closed")
        task_id = task.env_args.get("task_id")
        if not task_id:
            raise ValueError(f"AppWorld task {task.key} needs env_args['task_id']: {task.env_args!r}")
        self._close_world()
        self._task_id = str(task_id)
        self._completed = False
        self._evaluation = None
        try:
            world = self._mod.AppWorld(
                task_id=self._task_id, experiment_name=self.experiment_name, **self.appworld_options
            )
            world = world.__enter__() or world
        except ImportError as exc:
            raise BenchmarkUnavailableError(f"AppWorld could not load its apps ({exc}). {INSTALL_HINT}") from exc
        except Exception as exc:
            msg = str(exc)
            if "doesn't exist" in msg or "does not exist" in msg or isinstance(exc, FileNotFoundError):
                raise BenchmarkUnavailableError(
                    f"AppWorld has no data for task {self._task_id!r} ({msg}); check the task id, or: {INSTALL_HINT}"
                ) from exc
            raise InfrastructureError(f"AppWorld failed to open task {self._task_id}: {exc!r}") from exc
        self._world = world
        try:
            instruction = str(world.task.instruction)
            supervisor = _supervisor_text(getattr(world.task, "supervisor", None))
        except Exception as exc:
            raise InfrastructureError(f"AppWorld task {self._task_id} has no readable instruction: {exc!r}") from exc
        lines = []
        if supervisor:
            lines.append(f"Supervisor (the user you act for) -- {supervisor}")
        lines.append(f"Task: {instruction}")
        return "\n".join(lines)

    def _step(self, action: str) -> StepResult:
        world = self._world
        if world is None:
            raise InfrastructureError("AppWorld step before reset (or after close)")
        if self._completed:
            return StepResult("The task was already completed; the episode is over.", valid=False, done=True)
        code = code_or_reply(action)
        if not code.strip():
            return StepResult("No code found: write Python code in a ```python ... ``` block.", valid=False)
        try:
            output = world.execute(code)
        except Exception as exc:
            raise InfrastructureError(f"AppWorld execute failed on task {self._task_id}: {exc!r}") from exc
        output = "" if output is None else str(output)
        valid = not output.lstrip().startswith(FAILED_PREFIX)
        try:
            completed = bool(world.task_completed())
        except Exception as exc:
            raise InfrastructureError(f"AppWorld task_completed failed on task {self._task_id}: {exc!r}") from exc
        if not completed:
            return StepResult(output, valid=valid)
        self._completed = True
        ev = self._evaluate()
        return StepResult(output, reward=float(ev["score"]), done=True, valid=valid, info={"evaluation": ev})

    def _evaluate(self) -> dict[str, Any]:
        if self._evaluation is not None:
            return self._evaluation
        if self._world is None:
            raise InfrastructureError("AppWorld evaluate without an open task")
        try:
            tracker = self._world.evaluate()
            success = bool(tracker.success)
            passes = len(getattr(tracker, "passes", []) or [])
            num_tests = getattr(tracker, "num_tests", None)
            if num_tests is None:
                num_tests = passes + len(getattr(tracker, "failures", []) or [])
            num_tests = int(num_tests)
        except Exception as exc:
            raise InfrastructureError(f"AppWorld evaluate failed on task {self._task_id}: {exc!r}") from exc
        score = (passes / num_tests) if num_tests else float(success)
        self._evaluation = {"success": success, "pass_count": passes, "num_tests": num_tests, "score": score}
        return self._evaluation

    @property
    def success(self) -> bool:
        if self._world is None and self._evaluation is None:
            return False
        return bool(self._evaluate()["success"])

    @property
    def score(self) -> float:
        if self._world is None and self._evaluation is None:
            return 0.0
        return float(self._evaluate()["score"])

    @property
    def evaluation(self) -> dict[str, Any] | None:
        """The last evaluation (success, pass_count, num_tests, score), if run."""
        return self._evaluation

    def valid_actions(self) -> list[str] | None:
        return None  # free-form code

    def normalize_action(self, action: str) -> str:
        """The code to run: the reply's first ```python block (see ``replies.code_or_reply``)."""
        return code_or_reply(action)

    def engine_info(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "appworld": _appworld_version(),
            "experiment_name": self.experiment_name,
            "dataset": self.dataset,
            "appworld_options": self.appworld_options,
            "data_dir": str(appworld_data_dir(self._mod)),
            "execution": "world.execute (AppWorld's sandboxed shell); never exec/eval in the kit",
            "success": "world.evaluate().success (all task tests pass)",
            "score": "passed tests / num_tests",
        }

    def close(self) -> None:
        self._close_world()
        self._closed = True


__all__ = [
    "ACTION_HELP",
    "AppWorldEnvironment",
    "F1_N_TASKS",
    "INSTALL_HINT",
    "appworld_data_dir",
    "appworld_tasks",
    "build_appworld_partition",
    "load_appworld_task_ids",
    "require_appworld",
    "sample_appworld_tasks",
]
