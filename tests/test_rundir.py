"""The run-directory layout has one owner (``RunDirectory``); the stores share one journaled base."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from antipersist_lib.errors import FrozenStateError
from antipersist_lib.memory.abstraction_store import EVENTS_FILE, AbstractionStore
from antipersist_lib.memory.outcome_log import OutcomeLog
from antipersist_lib.memory.trajectory_store import TrajectoryStore
from antipersist_lib.records import EpisodeOutcome, Task, Trajectory
from antipersist_lib.rundir import RunDirectory
from antipersist_lib.runner.protocol import run_cell
from antipersist_lib.runner.spec import RunSpec
from antipersist_lib.serving.llm import Endpoint
from antipersist_lib.testing.loopback_server import LoopbackServer
from antipersist_lib.testing.scripted_policy import errand_policy

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_RUNS = ROOT / "tests" / "fixtures" / "runs"


def named_by_layout(rd: RunDirectory) -> set[Path]:
    """Every path the layout names for a run with up to 9 iterations."""
    names = {rd.manifest_path, rd.journal_path, rd.calls_path, rd.summary_path, rd.lock_path}
    names |= {rd.episodes_path(p) for p in ("train", "heldout")}
    names |= {rd.state_path(n) for n in (RunDirectory.TRAJECTORIES, RunDirectory.OUTCOME_LOG)}
    names |= {rd.state_path(n) for n in (RunDirectory.TRAJECTORY_EMBEDDINGS, RunDirectory.OUTCOME_LOG_EMBEDDINGS)}
    names |= {rd.state_path(RunDirectory.ABSTRACTION_EVENTS), rd.state_path(RunDirectory.CANDIDATES)}
    names |= {rd.snapshot_path(i) for i in range(1, 10)} | {rd.snapshot_embeddings_path}
    # a judge's readings, written after the run (rule_judge.py): the file the layout names for the judge it holds
    for path in rd.judge_readings_paths():
        judges = {json.loads(line)["judge"] for line in path.read_text(encoding="utf-8").splitlines() if line}
        names |= {rd.judge_readings_path(j) for j in judges}
    return names


def test_a_layout_touches_nothing_and_names_every_file(tmp_path):
    rd = RunDirectory(tmp_path / "run")
    assert rd.episodes_path("heldout").name == "episodes_heldout.jsonl"
    assert rd.snapshot_path(3).relative_to(rd.path).as_posix() == "snapshots/abstractions_iter_03.json"
    assert not (tmp_path / "run").exists(), "asking a layout for paths must not create anything"
    assert not rd.is_run() and rd.read_episodes("train") == [] and rd.heldout_done() == set()
    with pytest.raises(ValueError, match="phase is 'eval'"):
        rd.episodes_path("eval")
    with pytest.raises(FileNotFoundError, match=r"is not a run directory \(no manifest.json\)"):
        rd.read_manifest()
    assert RunDirectory.ABSTRACTION_EVENTS == f"{RunDirectory.ABSTRACTIONS}/{EVENTS_FILE}"


def test_every_file_a_run_writes_is_named_by_the_layout(tmp_path):
    """A real run (Anti-Persistence with the persist ablation, so abstractions and snapshots exist)
    writes only files that ``RunDirectory`` names, and its readers give back what was written."""
    with LoopbackServer(responder=errand_policy) as server:
        endpoint = Endpoint(base_url=server.base_url, model="scripted", api_key_env="ANTIPERSIST_DEMO_KEY")
        spec = RunSpec(
            method="anti_persistence",
            benchmark="errandworld",
            backbone="scripted-loopback",
            embedding="loopback-bag-of-words",
            iterations=2,
            train_per_iteration=6,
            max_steps=4,
            heldout_concurrency=2,
            method_params={"persist": True, "round_robin_iterations": 1, "warmup_per_mode": 1},
            out_root=str(tmp_path / "runs"),
            cache_dir=None,
            progress=False,
        )
        run_cell(spec, endpoint=endpoint, embed_endpoint=endpoint)
    rd = RunDirectory(spec.run_dir())
    written = {p for p in rd.path.rglob("*") if p.is_file()}
    assert written - named_by_layout(rd) == set()
    assert {rd.snapshot_path(1), rd.snapshot_path(2), rd.state_path(RunDirectory.OUTCOME_LOG)} <= written
    assert rd.snapshot_paths() == [rd.snapshot_path(1), rd.snapshot_path(2)]
    assert rd.read_manifest()["method"] == "anti_persistence"
    assert len(rd.read_episodes("train")) == 12
    assert rd.heldout_done() == {(it, j) for it in (1, 2) for j in range(6)}


@pytest.mark.parametrize("run", sorted(p.parent for p in FIXTURE_RUNS.rglob("manifest.json")), ids=str)
def test_committed_fixture_runs_follow_the_layout(run):
    rd = RunDirectory(run)
    assert {p for p in run.rglob("*") if p.is_file()} - named_by_layout(rd) == set()


# -- the journaled stores ------------------------------------------------------------------------------------


def _task() -> Task:
    return Task(task_id=1, benchmark="errandworld", task_type="bring_item", instruction="bring the cup", split="train")


def _fill(tmp_path: Path) -> dict[str, Path]:
    """One record in each store's file, then a torn half-line appended to each."""
    traj = TrajectoryStore(tmp_path / "trajectories.jsonl", fsync=False)
    traj.add(_task(), Trajectory("obs"), EpisodeOutcome(True), embedding=[1.0, 0.0])
    log = OutcomeLog(tmp_path / "outcome_log.jsonl", fsync=False)
    log.append(
        embedding=[1.0, 0.0],
        mode="none",
        reward=1.0,
        raw_success=True,
        task_type="bring_item",
        task_id=1,
        instruction="bring the cup",
    )
    store = AbstractionStore(tmp_path / "abstractions", fsync=False)
    store.add("a rule", kind="rule")
    for s in (traj, log, store):
        s.close()
    files = {"traj": traj.path, "log": log.path, "store": store.path}
    for p in files.values():
        with open(p, "ab") as fh:
            fh.write(b'{"torn": ')
    return files


def test_read_only_stores_read_everything_and_change_nothing(tmp_path):
    files = _fill(tmp_path)
    before = {k: p.read_bytes() for k, p in files.items()}
    traj = TrajectoryStore(files["traj"], read_only=True)
    log = OutcomeLog(files["log"], read_only=True)
    store = AbstractionStore(tmp_path / "abstractions", read_only=True)
    assert len(traj) == 1 and len(log) == 1 and len(store) == 1
    with pytest.raises(FrozenStateError, match="trajectory memory .* was opened read-only"):
        traj.add(_task(), Trajectory("obs"), EpisodeOutcome(False), embedding=[0.0, 1.0])
    with pytest.raises(FrozenStateError, match="outcome log .* was opened read-only"):
        log.append(
            embedding=[0.0, 1.0], mode="none", reward=0.0, raw_success=False, task_type="t", task_id=2, instruction=""
        )
    with pytest.raises(FrozenStateError, match="abstraction store .* was opened read-only"):
        store.add("another rule", kind="rule")
    for s in (traj, log, store):
        s.close()
    # the torn tails are still there: a read-only open never repairs a file
    assert {k: p.read_bytes() for k, p in files.items()} == before
    assert len(traj) == 1 and len(log) == 1 and len(store) == 1


def test_read_only_needs_an_existing_file_and_opening_for_writing_repairs_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trajectory memory at"):
        TrajectoryStore(tmp_path / "missing.jsonl", read_only=True)
    with pytest.raises(FileNotFoundError, match="no abstraction store at"):
        AbstractionStore(tmp_path / "nowhere", read_only=True)
    assert not (tmp_path / "nowhere").exists()
    files = _fill(tmp_path)
    TrajectoryStore(files["traj"], fsync=False).close()
    # a writer sets the torn line aside (kept beside the file) so the next append starts a line of its own
    assert files["traj"].read_bytes().endswith(b"\n") and b'{"torn": ' not in files["traj"].read_bytes()
    assert files["traj"].with_name(files["traj"].name + ".torn").read_bytes() == b'{"torn": \n'


def test_frozen_stores_refuse_writes_until_unfrozen(tmp_path):
    for store, write in (
        (TrajectoryStore(), lambda s: s.add(_task(), Trajectory("o"), EpisodeOutcome(True), embedding=None)),
        (AbstractionStore(), lambda s: s.add("rule", kind="rule")),
    ):
        store.freeze()
        assert store.frozen
        with pytest.raises(FrozenStateError, match="is frozen"):
            write(store)
        store.unfreeze()
        write(store)
        assert len(store) == 1


# -- the package layers ---------------------------------------------------------------------------------------


def _package_imports() -> dict[str, set[str]]:
    """subpackage (or top-level module) -> the kit's subpackages/modules it imports, lazy imports included."""
    lib = ROOT / "antipersist_lib"
    graph: dict[str, set[str]] = {}
    for path in lib.rglob("*.py"):
        rel = path.relative_to(lib).parts
        unit = rel[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "antipersist_lib" and len(parts) > 1 and parts[1] != unit:
                    graph.setdefault(unit, set()).add(parts[1])
    return graph


def _first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """The first import cycle a depth-first search meets (its nodes, the first repeated at the end), or None."""
    state: dict[str, int] = {}

    def visit(u: str, path: list[str]) -> list[str] | None:
        state[u] = 1
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return [*path, u][[*path, u].index(v) :] + [v]
            if state.get(v) is None and (found := visit(v, [*path, u])) is not None:
                return found
        state[u] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])) is not None:
            return found
    return None


def test_subpackages_form_layers_without_cycles():
    graph = _package_imports()
    assert "errand_world" not in str(graph.get("envs", set())), "envs must not reach into testing/"
    assert "testing" not in graph.get("envs", set()) and "runner" not in graph.get("methods", set())
    # depth-first search for a cycle between subpackages
    cycle = _first_cycle(graph)
    assert cycle is None, f"import cycle between subpackages: {' -> '.join(cycle or [])}"
    # the leaves import nothing else of the kit
    for leaf in ("errors", "jsonl", "tolerance", "textfit"):
        assert graph.get(leaf, set()) <= {"errors"}, f"{leaf} must stay at the bottom"


#: the layers docs/layout.md states, bottom first: a unit imports only units of its own layer or of lower ones.
#: The faulty-memories wing (studies, arc, consolidation and their commands) stands on top of the main house:
#: its planners, figures and tables reuse analysis/, and the consolidation study runs the kit's methods as rows.
LAYERS = (
    {"errors"},
    {"jsonl", "tolerance", "textfit", "paths", "versions", "replies", "profile_fields"},
    {"records", "rundir"},
    {"memory", "serving"},
    {"envs"},
    {"core"},
    {"methods"},
    {"testing"},
    {"runner"},
    {"analysis"},
    {"studies", "judge", "rule_judge"},
    {"arc"},
    {"consolidation"},
    {"study_commands"},
    {"commands"},
    {"cli"},
)


def test_every_import_between_units_goes_down_the_stated_layers():
    """Issue 46: docs/layout.md stated an order the code did not have (arc imports analysis); the order is
    now one list here, and an import that climbs it fails with the two units named."""
    level = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    graph = _package_imports()
    lib = ROOT / "antipersist_lib"
    units = {p.name.removesuffix(".py") for p in lib.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    units -= {"__init__", "__main__"}
    assert units <= set(level), (
        f"units missing from LAYERS (place them in docs/layout.md too): {sorted(units - set(level))}"
    )
    upward = sorted(
        f"{unit} -> {dep}" for unit, deps in graph.items() if unit in level for dep in deps if level[dep] > level[unit]
    )
    assert not upward, f"imports that climb the layers: {upward}"
    assert graph["__init__"] <= LAYERS[2] | LAYERS[0], "the package's __init__ reaches only the records floor"


def _module_imports() -> dict[str, set[str]]:
    """module -> the kit's modules it imports, function-local imports included; ``from pkg import mod``
    counts as importing ``pkg.mod`` when that is a module (a package's ``__init__`` is the package)."""
    lib = ROOT / "antipersist_lib"
    modules = {}
    for path in lib.rglob("*.py"):
        parts = ("antipersist_lib", *path.relative_to(lib).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            found = []
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            graph[module] |= {name for name in found if name in modules and name != module}
    return graph


def test_no_two_modules_import_each_other_even_from_inside_a_function():
    """Issue 46: four two-module circles were held together by function-local imports, which the package
    test cannot see (both ends in one package)."""
    graph = _module_imports()
    assert len(graph) > 100 and "antipersist_lib.runner.main_profile" in graph["antipersist_lib.runner.grid"]
    cycle = _first_cycle(graph)
    assert cycle is None, f"import circle between modules: {' -> '.join(cycle or [])}"


def test_a_run_extended_by_iterations_says_so_in_its_manifest(tmp_path):
    """Issue 42: extending a run with more iterations left the manifest at the old count (and is_complete then
    read the old count: a run extended but not finished looked complete)."""
    layout = RunDirectory(tmp_path / "run")
    with layout.open() as rd:
        assert rd.check_or_write_manifest({"method": "react", "iterations": 2, "n_heldout": 1}, ["method"]) is False
    with layout.open() as rd:
        assert rd.check_or_write_manifest({"method": "react", "iterations": 3, "n_heldout": 1}, ["method"]) is True
    man = layout.read_manifest()
    assert man["iterations"] == 3 and len(man["resumed"]) == 1
    layout.episodes_path("heldout").write_text(
        "".join(json.dumps({"iteration": i, "position": 0}) + "\n" for i in (1, 2)), encoding="utf-8"
    )
    assert not layout.is_complete()  # iteration 3's held-out episode is still to come
