"""ALFWorld adapter (TextWorld engine, alfworld >= 0.4 game files ``json_2.1.1``).

Plays the ``game.tw-pddl`` files that ``alfworld-download`` installs (found through
``ALFWORLD_DATA``, ``resolve_alfworld_data``) through the kit's ``Environment`` interface. alfworld
0.4 places objects with ``move X to Y``; the older ``put X in/on Y`` of the ReAct/Reflexion prompts
answers "Nothing happens." there, so ``normalize_action`` translates it. An engine exception raises
``InfrastructureError``; missing data or engine raises ``BenchmarkUnavailableError`` with the fix.

``build_alfworld_partition`` draws the Table 4 partition (134 ``valid_unseen`` games held out, 30
``train`` games per category), committed as ``antipersist_lib/data/partitions/alfworld.json``
(``python -m antipersist_lib.envs.alfworld [--data DIR]`` redraws it). docs/benchmarks.md,
"ALFWorld", has the details.
"""

from __future__ import annotations

import json
import os
import random
import re
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from antipersist_lib.envs.base import Environment, StepResult
from antipersist_lib.envs.partitions import PARTITION_SEED, heldout_set_path, save_partition
from antipersist_lib.errors import BenchmarkUnavailableError, InfrastructureError
from antipersist_lib.records import Partition, Task

BENCHMARK = "alfworld"
#: one lock for every engine instance of the process: concurrent held-out workers each have an
#: adapter, but textworld's registry and PDDL loader share global state
_ENGINE_LOCK = threading.RLock()
DATA_ENV_VAR = "ALFWORLD_DATA"
GAMES_DIRNAME = "json_2.1.1"
GAME_FILENAME = "game.tw-pddl"
TRAIN_SPLIT = "train"
HELDOUT_SPLIT = "valid_unseen"
TRAIN_PER_CATEGORY = 30
#: the faulty-memories paper's evaluation split (App. F.1 ``eval_id_balanced_48``: 8 games per task type of the
#: in-distribution test split, ``valid_seen``), a held-out set of ``envs.partitions.HELDOUT_SETS``
SEEN_HELDOUT_SET = "valid_seen_balanced_48"
SEEN_SPLIT = "valid_seen"
SEEN_PER_CATEGORY = 8
#: a balanced 50-game subset of the partition's 134 held-out games (valid_unseen), a held-out set of
#: ``envs.partitions.HELDOUT_SETS`` beside the full partition; neither is "the paper's" (docs/protocol.md)
UNSEEN_HELDOUT_SET = "valid_unseen_balanced_50"
UNSEEN_HELDOUT_SIZE = 50

#: task-folder prefix -> short task type (the task-type retrieval filter uses the short name)
CATEGORIES: dict[str, str] = {
    "pick_and_place_simple": "put",
    "look_at_obj_in_light": "examine",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "pick_two_obj_and_place": "puttwo",
}
#: fixed order in which the training draw visits the categories (and lists the drawn games)
CATEGORY_ORDER: tuple[str, ...] = ("put", "clean", "heat", "cool", "examine", "puttwo")

WELCOME_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
INVALID_OBSERVATION = "Nothing happens."
TASK_PREFIX = "Your task is to: "

ACTION_HELP = (
    "ALFWorld commands (alfworld 0.4 syntax; X and Y are names with their number, e.g. 'apple 1', "
    "'countertop 2'):\n"
    "  look                     look around your current location\n"
    "  inventory                check what you are carrying\n"
    "  go to Y                  go to a receptacle, e.g. go to cabinet 1\n"
    "  open Y / close Y         open or close a receptacle\n"
    "  take X from Y            pick up an object from a receptacle\n"
    "  move X to Y              put an object you carry in or on a receptacle\n"
    "  heat X with Y            heat an object with a receptacle (e.g. microwave 1)\n"
    "  cool X with Y            cool an object with a receptacle (e.g. fridge 1)\n"
    "  clean X with Y           clean an object with a receptacle (e.g. sinkbasin 1)\n"
    "  slice X with Y           slice an object with a sharp object (e.g. knife 1)\n"
    "  use X                    use an object, e.g. turn on a desklamp: use desklamp 1\n"
    "  examine X                examine an object or a receptacle\n"
    "To put an object in or on a receptacle write 'move X to Y' (not 'put X in/on Y'). "
    "You can carry one object at a time. An action the game does not accept answers "
    "'Nothing happens.'"
)

_ENGINE_HINT = "install the pinned engine: pip install alfworld==0.4.2 textworld==1.7.0"


# --------------------------------------------------------------------------------------------
# data location


def _games_root(candidate: Path) -> Path | None:
    """``candidate`` itself or its ``json_2.1.1`` child, when it holds the split folders."""
    child = candidate / GAMES_DIRNAME
    if child.is_dir():
        return child
    if candidate.is_dir() and (
        candidate.name == GAMES_DIRNAME or (candidate / HELDOUT_SPLIT).is_dir() or (candidate / TRAIN_SPLIT).is_dir()
    ):
        return candidate
    return None


def fallback_data_dirs() -> list[Path]:
    """Where the games are looked for when neither ``data_dir`` nor ``$ALFWORLD_DATA`` is given, in order:
    ``<repo>/.data/alfworld`` (what ``make alfworld-data`` / ``make run`` unpack) and alfworld's own default
    ``~/.cache/alfworld`` (what ``alfworld-download`` fills when the variable is unset)."""
    from antipersist_lib.paths import repo_root

    return [repo_root() / ".data" / "alfworld", Path("~/.cache/alfworld").expanduser()]


def resolve_alfworld_data(path: str | os.PathLike[str] | None = None) -> Path:
    """The ``json_2.1.1`` folder of the ALFWorld games.

    Looks at ``path`` if given, else at ``$ALFWORLD_DATA``, else (the variable unset or empty) at
    ``fallback_data_dirs()``: ``<repo>/.data/alfworld``, then ``~/.cache/alfworld``. Each may name the folder
    that contains ``json_2.1.1/`` (what ``alfworld-download`` fills) or ``json_2.1.1`` itself. Raises
    ``BenchmarkUnavailableError`` saying what was looked at and how to get the data.
    """
    if path is not None:
        source, raw = "the data_dir argument", str(path)
    else:
        source, raw = f"${DATA_ENV_VAR}", os.environ.get(DATA_ENV_VAR, "")
    looked: list[str] = []
    candidates = [Path(raw).expanduser()] if raw else fallback_data_dirs()
    for cand in candidates:
        found = _games_root(cand)
        if found is not None:
            return found.resolve()
        looked += [str(cand), str(cand / GAMES_DIRNAME)]
    where = (
        f"{source} = {raw!r}; looked for the game folders at " + " and ".join(looked)
        if raw
        else f"{source} is not set (and no data_dir was given); looked for the game folders at " + " and ".join(looked)
    )
    raise BenchmarkUnavailableError(
        f"ALFWorld game files ({GAMES_DIRNAME}/{{train,valid_unseen,...}}/<task>/<trial>/{GAME_FILENAME}) "
        f"not found: {where}. Fix: set {DATA_ENV_VAR} to the folder that contains {GAMES_DIRNAME}/ "
        f"(or to {GAMES_DIRNAME} itself) or pass data_dir. To get the files, either run "
        f"`alfworld-download` (it fills ${DATA_ENV_VAR}, default ~/.cache/alfworld), or run "
        f"`make alfworld-data`, which unpacks the archive from ../shared/data/alfworld/ "
        f"(alfworld-games-json_2.1.1.tar.xz), and point {DATA_ENV_VAR} at the result."
    )


def category_of(game_relpath: str | os.PathLike[str]) -> str:
    """Short task type ("put", "clean", ...) of a game path (its task folder's prefix)."""
    for part in Path(game_relpath).parts:
        prefix = part.split("-", 1)[0]
        if prefix in CATEGORIES:
            return CATEGORIES[prefix]
    raise ValueError(f"no ALFWorld task category in game path {str(game_relpath)!r}")


def list_games(data_dir: str | os.PathLike[str] | None, split: str) -> list[str]:
    """Sorted game paths (relative to ``json_2.1.1``, POSIX form) of one split."""
    root = resolve_alfworld_data(data_dir)
    split_dir = root / split
    if not split_dir.is_dir():
        raise BenchmarkUnavailableError(f"ALFWorld split folder {split_dir} is missing (incomplete {GAMES_DIRNAME}?)")
    return sorted(p.relative_to(root).as_posix() for p in split_dir.glob(f"*/*/{GAME_FILENAME}"))


def read_game(data_dir: str | os.PathLike[str] | None, game_relpath: str) -> dict[str, Any]:
    """The parsed ``game.tw-pddl`` JSON (pddl_domain, grammar, pddl_problem, solvable, walkthrough)."""
    path = resolve_alfworld_data(data_dir) / game_relpath
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BenchmarkUnavailableError(f"ALFWorld game file {path} is missing") from exc


_TASK_RULE = re.compile(r'"task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*("(?:[^"\\]|\\.)*")\s*\}\s*\]')


def instruction_from_game(game: dict[str, Any]) -> str:
    """The "Your task is to: ..." sentence the engine prints, read from the game's text grammar.

    The intro the engine prints is ``<banner>\\n\\n#look.feedback#\\n\\n#task#``; the ``task``
    rule has a single literal right-hand side in every json_2.1.1 game (checked against the
    engine's printed observation for every game in the committed partition).
    """
    matches = _TASK_RULE.findall(str(game.get("grammar", "")))
    if len(matches) != 1:
        raise ValueError(f"expected one 'task' rule in the game grammar, found {len(matches)}")
    text = json.loads(matches[0])
    if not text.startswith(TASK_PREFIX) or "#" in text or "{" in text:
        raise ValueError(f"unexpected task rule in the game grammar: {text!r}")
    return text


def instruction_from_observation(observation: str) -> str:
    """The "Your task is to: ..." sentence of an initial observation."""
    i = observation.rfind(TASK_PREFIX)
    if i < 0:
        raise ValueError("observation holds no 'Your task is to:' sentence")
    return observation[i:].strip()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# --------------------------------------------------------------------------------------------
# the adapter

_PUT_RE = re.compile(r"^put (?P<obj>.+?) (?:in ?/ ?on|on ?/ ?in|into|onto|inside|in|on) (?P<recep>.+)$")


def _load_engine(data_dir: Path | None = None) -> tuple[Any, Any, Any, Any]:
    """Import textworld and alfworld's wrappers. alfworld's import reads ``$ALFWORLD_DATA`` (it runs
    ``os.makedirs`` on it, and sets it to ``~/.cache/alfworld`` when unset), so an unset or empty variable
    is first set to the folder the kit resolved (``data_dir``, the parent of its ``json_2.1.1``): the engine
    and every later ``resolve_alfworld_data()`` of this process (held-out workers) then see the same games."""
    if not os.environ.get(DATA_ENV_VAR):
        if data_dir is not None:
            os.environ[DATA_ENV_VAR] = str(data_dir.parent if data_dir.name == GAMES_DIRNAME else data_dir)
        elif DATA_ENV_VAR in os.environ:
            # an empty setting means "unset": alfworld's os.makedirs("") would crash on it
            del os.environ[DATA_ENV_VAR]
    try:
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise BenchmarkUnavailableError(f"ALFWorld engine not importable ({exc}); {_ENGINE_HINT}") from exc
    return textworld, textworld.gym, AlfredDemangler, AlfredInfos


class ALFWorldEnvironment(Environment):
    """One ALFWorld game per episode; ``Task.env_args = {"game": <path relative to json_2.1.1>}``."""

    benchmark = BENCHMARK
    action_help = ACTION_HELP

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *, max_episode_steps: int = 100) -> None:
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
        self.data_dir = resolve_alfworld_data(data_dir)
        self.max_episode_steps = int(max_episode_steps)
        self._tw, self._twgym, self._demangler_cls, self._infos_cls = _load_engine(self.data_dir)
        self._env: Any = None
        self._won = False
        self._done = False
        self._admissible: list[str] = []
        self.game_path: Path | None = None

    # -- episode ------------------------------------------------------------------------------

    def _reset(self, task: Task) -> str:
        rel = task.env_args.get("game")
        if not rel:
            raise ValueError(f"task {task.key} has no env_args['game'] (game path relative to {GAMES_DIRNAME})")
        game = (self.data_dir / str(rel)).resolve()
        if not game.is_file():
            raise BenchmarkUnavailableError(
                f"ALFWorld game file {game} (task {task.key}) is missing from {self.data_dir}; "
                f"is {DATA_ENV_VAR} pointing at the complete {GAMES_DIRNAME} game set?"
            )
        self._close_engine()
        self._won, self._done, self._admissible = False, False, []
        try:
            with _ENGINE_LOCK:  # textworld's gym registry and game loader are not thread-safe
                infos_req = self._tw.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
                env_id = self._twgym.register_games(
                    [str(game)],
                    infos_req,
                    max_episode_steps=self.max_episode_steps,
                    wrappers=[self._demangler_cls(shuffle=False), self._infos_cls],
                    name="antipersist-alfworld",
                )
                try:
                    self._env = self._twgym.make(env_id)
                finally:
                    self._twgym.registry.pop(env_id, None)  # one game per registration: keep it small
                obs, infos = self._env.reset()
        except Exception as exc:
            self._close_engine()
            raise InfrastructureError(f"ALFWorld engine failed to load {rel}: {exc!r}") from exc
        self.game_path = game
        self._update(infos)
        return self._strip_banner(obs)

    def _step(self, action: str) -> StepResult:
        if self._env is None:
            raise InfrastructureError("ALFWorld engine is not running (step before reset, or after close)")
        try:
            with _ENGINE_LOCK:
                obs, _score, done, infos = self._env.step(action)
        except Exception as exc:
            raise InfrastructureError(f"ALFWorld engine failed on {action!r}: {exc!r}") from exc
        self._update(infos)
        self._done = bool(done)
        obs = str(obs).strip()
        return StepResult(
            observation=obs,
            reward=float(self._won),
            done=self._done,
            valid=obs != INVALID_OBSERVATION,
            info={"admissible_commands": list(self._admissible)},
        )

    def _update(self, infos: Any) -> None:
        try:
            self._won = bool(infos["won"])
            self._admissible = list(infos.get("admissible_commands") or [])
        except Exception as exc:
            raise InfrastructureError(f"ALFWorld engine returned malformed infos: {exc!r}") from exc

    @staticmethod
    def _strip_banner(obs: str) -> str:
        text = str(obs).strip()
        if text.startswith(WELCOME_BANNER):
            text = text[len(WELCOME_BANNER) :].strip()
        return text

    # -- state --------------------------------------------------------------------------------

    @property
    def success(self) -> bool:
        return self._won

    @property
    def done(self) -> bool:
        return self._done

    def valid_actions(self) -> list[str] | None:
        if self._env is None:
            return None
        return list(self._admissible)

    def normalize_action(self, action: str) -> str:
        """Lowercase, collapse whitespace, and rewrite ``put X in/on Y`` to ``move X to Y``."""
        a = " ".join(str(action).lower().split())
        m = _PUT_RE.match(a)
        if m:
            a = f"move {m.group('obj')} to {m.group('recep')}"
        return a

    def engine_info(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "alfworld": _version("alfworld"),
            "textworld": _version("textworld"),
            "data_dir": str(self.data_dir),
            "games": GAMES_DIRNAME,
            "action_syntax": "move X to Y",
            "max_episode_steps": self.max_episode_steps,
            "wrappers": ["AlfredDemangler(shuffle=False)", "AlfredInfos"],
        }

    def _close_engine(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            except Exception:  # closing a dead engine must not mask the original failure
                pass

    def close(self) -> None:
        self._close_engine()


# --------------------------------------------------------------------------------------------
# partition (paper Table 4)


def build_alfworld_partition(
    data_dir: str | os.PathLike[str] | None = None,
    seed: int = PARTITION_SEED,
    *,
    per_category: int = TRAIN_PER_CATEGORY,
    with_instructions: bool = True,
) -> Partition:
    """Draw the ALFWorld partition.

    Held-out: every solvable game of ``valid_unseen``, sorted by path. Training: one
    ``random.Random(seed)`` visits the categories in ``CATEGORY_ORDER`` and takes
    ``rng.sample(pool, per_category)`` from each category's sorted pool of solvable ``train``
    games; the drawn games are listed category by category in that order (draw order inside a
    category). ``task_id`` is the position in the split. Instructions are the "Your task is
    to: ..." sentence of each game's text grammar (what the engine prints at reset); with
    ``with_instructions=False`` they are left empty (faster; same games).
    """
    root = resolve_alfworld_data(data_dir)
    unsolvable: dict[str, list[str]] = {}

    def solvable_games(split: str) -> list[tuple[str, dict[str, Any]]]:
        out, bad = [], []
        for rel in list_games(root, split):
            game = read_game(root, rel)
            (out if game.get("solvable") is True else bad).append((rel, game))
        unsolvable[split] = [rel for rel, _ in bad]
        return out

    def make_task(i: int, rel: str, game: dict[str, Any], split: str) -> Task:
        return Task(
            task_id=i,
            benchmark=BENCHMARK,
            task_type=category_of(rel),
            instruction=instruction_from_game(game) if with_instructions else "",
            split=split,
            env_args={"game": rel},
        )

    heldout_games = solvable_games(HELDOUT_SPLIT)
    train_pool = solvable_games(TRAIN_SPLIT)
    by_cat: dict[str, list[tuple[str, dict[str, Any]]]] = {c: [] for c in CATEGORY_ORDER}
    for rel, game in train_pool:  # already sorted by path
        by_cat[category_of(rel)].append((rel, game))

    rng = random.Random(seed)
    drawn: list[tuple[str, dict[str, Any]]] = []
    for cat in CATEGORY_ORDER:
        pool = by_cat[cat]
        if len(pool) < per_category:
            raise ValueError(f"category {cat!r} has only {len(pool)} solvable training games (< {per_category})")
        drawn.extend(rng.sample(pool, per_category))

    train = tuple(make_task(i, rel, g, "train") for i, (rel, g) in enumerate(drawn))
    heldout = tuple(make_task(i, rel, g, "heldout") for i, (rel, g) in enumerate(heldout_games))

    def counts(tasks: tuple[Task, ...]) -> dict[str, int]:
        return {c: sum(1 for t in tasks if t.task_type == c) for c in CATEGORY_ORDER}

    n_bad = {s: len(unsolvable[s]) for s in (TRAIN_SPLIT, HELDOUT_SPLIT)}
    drawn_with = {
        "seed": seed,
        "alfworld": _version("alfworld"),
        "textworld": _version("textworld"),
        "games": GAMES_DIRNAME,
        "source_splits": {"train": TRAIN_SPLIT, "heldout": HELDOUT_SPLIT},
        "pool_sizes": {
            "train": {c: len(by_cat[c]) for c in CATEGORY_ORDER},
            "heldout": len(heldout_games),
        },
        "per_category": {"train": counts(train), "heldout": counts(heldout)},
        "unsolvable_excluded": n_bad,
        "method": (
            f"heldout = all solvable {HELDOUT_SPLIT} games sorted by path; train = random.Random({seed}) "
            f"then rng.sample(sorted solvable {TRAIN_SPLIT} games of the category, {per_category}) for "
            f"categories {list(CATEGORY_ORDER)} in that order"
        ),
        "instruction_source": "the 'task' rule of each game's text grammar (equal to the engine's reset observation)",
    }
    notes = (
        f"ALFWorld (paper Table 4): {len(train)} training games ({per_category} per category x "
        f"{len(CATEGORY_ORDER)}) drawn from {TRAIN_SPLIT}; {len(heldout)} held-out games = the whole "
        f"{HELDOUT_SPLIT} split (the unseen games of Reflexion/ExpeL). Only games whose file says "
        f"solvable=true were eligible; unsolvable games excluded: {n_bad}. "
        f"env_args.game is relative to {GAMES_DIRNAME} (${DATA_ENV_VAR}/{GAMES_DIRNAME})."
    )
    return Partition(BENCHMARK, seed, drawn_with, train, heldout, notes)


def build_alfworld_seen_heldout(
    data_dir: str | os.PathLike[str] | None = None,
    seed: int = PARTITION_SEED,
    *,
    per_category: int = SEEN_PER_CATEGORY,
    with_instructions: bool = True,
) -> Partition:
    """Draw the held-out set ``valid_seen_balanced_48`` (its training split is empty; ``load_partition``'s
    ``heldout_set`` puts it beside the partition's training games).

    Why: the faulty-memories paper evaluates consolidation on a 48-game subset of the in-distribution test split
    with 8 games per task type (App. F.1); which 8 it does not say, so the kit draws them: one
    ``random.Random(seed)`` visits the categories in ``CATEGORY_ORDER`` and takes ``rng.sample(pool,
    per_category)`` of each category's solvable ``valid_seen`` games sorted by path, listed category by
    category (draw order inside a category)."""
    root = resolve_alfworld_data(data_dir)
    by_cat: dict[str, list[tuple[str, dict[str, Any]]]] = {c: [] for c in CATEGORY_ORDER}
    unsolvable = 0
    for rel in list_games(root, SEEN_SPLIT):
        game = read_game(root, rel)
        if game.get("solvable") is True:
            by_cat[category_of(rel)].append((rel, game))
        else:
            unsolvable += 1
    rng = random.Random(seed)
    drawn: list[tuple[str, dict[str, Any]]] = []
    for cat in CATEGORY_ORDER:
        if len(by_cat[cat]) < per_category:
            raise ValueError(f"category {cat!r} has only {len(by_cat[cat])} solvable {SEEN_SPLIT} games")
        drawn.extend(rng.sample(by_cat[cat], per_category))
    heldout = tuple(
        Task(
            task_id=i,
            benchmark=BENCHMARK,
            task_type=category_of(rel),
            instruction=instruction_from_game(game) if with_instructions else "",
            split="heldout",
            env_args={"game": rel},
        )
        for i, (rel, game) in enumerate(drawn)
    )
    drawn_with = {
        "seed": seed,
        "alfworld": _version("alfworld"),
        "textworld": _version("textworld"),
        "games": GAMES_DIRNAME,
        "source_splits": {"heldout": SEEN_SPLIT},
        "pool_sizes": {"heldout": {c: len(by_cat[c]) for c in CATEGORY_ORDER}},
        "per_category": {"heldout": {c: per_category for c in CATEGORY_ORDER}},
        "unsolvable_excluded": {SEEN_SPLIT: unsolvable},
        "method": (
            f"random.Random({seed}) then rng.sample(sorted solvable {SEEN_SPLIT} games of the category, "
            f"{per_category}) for categories {list(CATEGORY_ORDER)} in that order"
        ),
    }
    notes = (
        f"ALFWorld held-out set {SEEN_HELDOUT_SET}: {len(heldout)} games of the in-distribution {SEEN_SPLIT} "
        f"split, {per_category} per task type (faulty-memories paper App. F.1, eval_id_balanced_48)."
    )
    return Partition(BENCHMARK, seed, drawn_with, (), heldout, notes)


def build_alfworld_unseen_heldout(
    partition: Partition | None = None, seed: int = PARTITION_SEED, *, size: int = UNSEEN_HELDOUT_SIZE
) -> Partition:
    """Draw the held-out set ``valid_unseen_balanced_50`` from the partition's own held-out games (its training
    split is empty; ``load_partition``'s ``heldout_set`` puts it beside the partition's training games).

    Why: Tables 1-2's ALFWorld means fit three seeds of k/50 scores far more often than k/134 (docs/protocol.md,
    "The denominator"), so a 50-game set is offered beside the full 134. Balanced over the six task types as evenly
    as ``size`` allows: ``size // 6`` games per type, and one more for ``size % 6`` types. One ``random.Random(seed)``
    first picks those types (``rng.sample(CATEGORY_ORDER, size % 6)``), then visits the types in ``CATEGORY_ORDER``
    and takes ``rng.sample`` of each type's held-out games sorted by path; tasks keep the partition's task ids and
    are listed type by type (draw order inside a type). Needs no game files: the partition (``partition`` or the
    committed one) holds every held-out game."""
    from antipersist_lib.envs.partitions import load_partition

    base = partition if partition is not None else load_partition(BENCHMARK)
    by_cat: dict[str, list[Task]] = {c: [] for c in CATEGORY_ORDER}
    for task in base.heldout:
        by_cat[task.task_type].append(task)
    rng = random.Random(seed)
    extra = set(rng.sample(CATEGORY_ORDER, size % len(CATEGORY_ORDER)))
    per = {c: size // len(CATEGORY_ORDER) + (c in extra) for c in CATEGORY_ORDER}
    drawn: list[Task] = []
    for cat in CATEGORY_ORDER:
        pool = sorted(by_cat[cat], key=lambda t: t.env_args["game"])
        if len(pool) < per[cat]:
            raise ValueError(f"task type {cat!r} has only {len(pool)} held-out games, {per[cat]} asked")
        drawn.extend(rng.sample(pool, per[cat]))
    drawn_with = {
        "seed": seed,
        "source_splits": {"heldout": f"the partition's held-out split ({HELDOUT_SPLIT})"},
        "source_partition_hash": base.hash,
        "pool_sizes": {"heldout": {c: len(by_cat[c]) for c in CATEGORY_ORDER}},
        "per_category": {"heldout": per},
        "method": (
            f"random.Random({seed}); rng.sample({list(CATEGORY_ORDER)}, {size % len(CATEGORY_ORDER)}) types take one "
            f"more than {size // len(CATEGORY_ORDER)}; then rng.sample(the type's held-out games sorted by path, n) "
            "for the types in that order"
        ),
    }
    notes = (
        f"ALFWorld held-out set {UNSEEN_HELDOUT_SET}: {len(drawn)} of the partition's {len(base.heldout)} held-out "
        f"{HELDOUT_SPLIT} games, balanced over the six task types; the kit's option beside the full partition, "
        "not the paper's set."
    )
    return Partition(BENCHMARK, seed, drawn_with, (), tuple(drawn), notes)


def main(argv: list[str] | None = None) -> int:
    """Regenerate the committed partition file: ``python -m antipersist_lib.envs.alfworld``."""
    import argparse

    ap = argparse.ArgumentParser(description="Draw the ALFWorld partition and write it.")
    ap.add_argument("--data", default=None, help=f"game folder (default: ${DATA_ENV_VAR})")
    ap.add_argument("--seed", type=int, default=PARTITION_SEED)
    ap.add_argument("--out", default=None, help="output file (default: the committed partition)")
    ap.add_argument(
        "--heldout-set",
        choices=[SEEN_HELDOUT_SET, UNSEEN_HELDOUT_SET],
        default=None,
        help=f"draw this held-out set instead of the partition ({SEEN_HELDOUT_SET}: faulty-memories App. F.1; "
        f"{UNSEEN_HELDOUT_SET}: 50 of the partition's held-out games, balanced over the task types)",
    )
    args = ap.parse_args(argv)
    if args.heldout_set == UNSEEN_HELDOUT_SET:
        part = build_alfworld_unseen_heldout(seed=args.seed)
        out = args.out or heldout_set_path(BENCHMARK, args.heldout_set)
    elif args.heldout_set:
        part = build_alfworld_seen_heldout(args.data, args.seed)
        out = args.out or heldout_set_path(BENCHMARK, args.heldout_set)
    else:
        part = build_alfworld_partition(args.data, args.seed)
        out = args.out
    path = save_partition(part, out)
    print(f"wrote {path}: {len(part.train)} train, {len(part.heldout)} heldout, hash {part.hash}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
