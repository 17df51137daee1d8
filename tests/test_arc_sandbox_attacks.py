"""The ARC grader attacked as a hostile model would: every attack must be contained by the kernel.

``tests/arc_attacks.py`` runs the attacks in a grader process of its own, once as the user running the
tests and, when that user is root, once more as an unprivileged user (uid 65534) through a copy of the
grader modules, so both ways the kit is run are covered. Each attack first recovers what the in-process layer
hides (originals from closures and keyword defaults, fresh ``posix``/``_socket`` modules), so what stops it
is the kernel sandbox. For every attack: no ``LEAK`` marker, every expected ``HELD`` marker, no pass, the
grader back within its wall limit plus one second, no sandbox process left, no listener reached; after all of
them: no watched host file changed and nothing written outside.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from antipersist_lib.arc import isolation, sandbox
from antipersist_lib.paths import repo_root

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="kernel isolation is Linux namespaces")

HELPER = Path(__file__).with_name("arc_attacks.py")
UNPRIVILEGED = 65534
WALL = 3.0
MARGIN = 1.0  # the bound: the grader returns within its wall limit plus one second


def _examples() -> list[dict]:
    """Two examples whose expected outputs are random: no attack can guess them."""
    rng = random.Random()
    return [
        {"input": [[1, 2], [3, 4]], "output": [[rng.randrange(10) for _ in range(3)] for _ in range(3)]},
        {"input": [[5]], "output": [[rng.randrange(10) for _ in range(4)] for _ in range(2)]},
    ]


def _config(folder: Path, **extra) -> Path:
    home = os.path.expanduser("~")
    secret = folder / "secret.txt"
    secret.write_text("secret-answer-key")
    secret.chmod(0o644)
    cfg = {
        "canary": "sk-canary-" + os.urandom(8).hex(),
        "secret_file": str(secret),
        "repo_file": str(repo_root() / "antipersist_lib" / "arc" / "generator.py"),
        "repo_root": str(repo_root()),
        "generator_file": str(repo_root() / "antipersist_lib" / "arc" / "generator.py"),
        "home": home,
        "wall_seconds": WALL,
        "cpu_seconds": 2,
        "tmpfs_bytes": 4 << 20,
        "max_processes": 0,
        "examples": _examples(),
        **extra,
    }
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    path.chmod(0o644)
    return path


def _run_helper(config: Path, *, interpreter: str, pythonpath: str, user: int | None) -> dict:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath, "LC_ALL": "C.UTF-8", "HOME": "/tmp"}
    kwargs = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
    done = subprocess.run(
        [interpreter, str(config.parent / "arc_attacks.py"), str(config)],
        capture_output=True,
        text=True,
        timeout=300,  # a stopped grader (an attack's SIGSTOP landing) shows up as this timeout
        env=env,
        cwd=str(config.parent),
        **kwargs,
    )
    assert done.returncode == 0, f"attack helper failed (exit {done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def _copy_grader(folder: Path) -> Path:
    """The grader modules alone, in a folder anyone can read (the unprivileged user cannot see the repo)."""
    root = folder / "lib"
    arc = root / "antipersist_lib" / "arc"
    arc.mkdir(parents=True)
    (root / "antipersist_lib" / "__init__.py").write_text("")
    (arc / "__init__.py").write_text("")
    source = repo_root() / "antipersist_lib"
    for name in ("errors.py", "replies.py"):
        shutil.copy(source / name, root / "antipersist_lib" / name)
    for name in ("sandbox.py", "sandbox_child.py", "isolation.py"):
        shutil.copy(source / "arc" / name, arc / name)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def _unprivileged_interpreter() -> str | None:
    """A Python 3.10+ the unprivileged user can run (the kit's may live under root's home)."""
    for candidate in (os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"):
        if not os.path.exists(candidate):
            continue
        try:
            probe = subprocess.run(
                [candidate, "-c", "import sys; assert sys.version_info >= (3, 10)"],
                capture_output=True,
                user=UNPRIVILEGED,
                group=UNPRIVILEGED,
                extra_groups=[],
                timeout=30,
            )
        except PermissionError:  # e.g. under root's home, which other users cannot enter
            continue
        if probe.returncode == 0:
            return candidate
    return None


def _folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="arc-attack-test-"))
    folder.chmod(0o755)
    shutil.copy(HELPER, folder / "arc_attacks.py")
    (folder / "arc_attacks.py").chmod(0o644)
    return folder


@pytest.fixture(scope="module", params=["invoking-user", "unprivileged"])
def report(request) -> dict:
    isolation.probe()  # a machine without isolation fails here, naming the missing piece
    folder = _folder()
    try:
        if request.param == "invoking-user":
            return _run_helper(_config(folder), interpreter=sys.executable, pythonpath=str(repo_root()), user=None)
        if os.getuid() != 0:
            pytest.skip("the unprivileged run needs root to switch users (the invoking user is unprivileged already)")
        interpreter = _unprivileged_interpreter()
        if interpreter is None:
            pytest.fail("no Python 3.10+ that uid 65534 can run (install python3 from the distribution)")
        lib = _copy_grader(folder)
        return _run_helper(_config(folder), interpreter=interpreter, pythonpath=str(lib), user=UNPRIVILEGED)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


ATTACKS = [
    "read_outside",
    "secrets",
    "write_outside",
    "processes",
    "network",
    "signal_grader",
    "forge_results",
    "fork_bomb",
    "floods",
    "answer_key",
    "sleep",
    "busy",
]


@pytest.mark.parametrize("guards", ["guards-on", "guards-off"])
@pytest.mark.parametrize("name", ATTACKS)
def test_attack_is_contained(report, name, guards):
    """guards-off runs the attack with the runner's in-process layer switched off: the kernel alone holds."""
    got = report["attacks"][f"{name}/{guards}"]
    tail = got["stderr_tail"]
    leaks = [line for line in tail.splitlines() if "LEAK:" in line]
    assert leaks == [], f"{name} got through: {leaks}"
    missing = [h for h in got["held_expected"] if f"HELD:{h}" not in tail]
    assert missing == [], f"{name}: expected protections not reported (did the attack run?): {missing}\n{tail[-2000:]}"
    assert not got["passed"] and got["n_correct"] == 0
    assert got["elapsed"] <= got["wall_limit"] + MARGIN, f"{name}: the grader took {got['elapsed']:.2f} s"
    assert got["leftovers"] == [], f"{name} left processes behind: {got['leftovers']}"
    assert got["listeners_reached"] == []


def test_no_secret_of_the_grader_is_readable(report):
    tails = "\n".join(a["stderr_tail"] for a in report["attacks"].values())
    assert "sk-canary" not in tails and "secret-answer-key" not in tails


def test_the_clock_cannot_be_stopped(report):
    """A program that stops itself (or tries to stop the grader) still ends at the wall limit."""
    for guards in ("guards-on", "guards-off"):
        for name in ("signal_grader", "sleep", "fork_bomb", "busy"):
            got = report["attacks"][f"{name}/{guards}"]
            assert got["status"] == "timeout", (name, guards, got["status"], got["error"])


def test_floods_end_as_limits(report):
    for guards in ("guards-on", "guards-off"):
        floods = report["attacks"][f"floods/{guards}"]
        assert floods["status"] == "output_invalid" and "exceeded" in floods["error"], floods["error"]
        assert len(floods["stderr_tail"]) <= sandbox.DEFAULT_LIMITS.stderr_tail_bytes


def test_nothing_outside_changed_and_nothing_is_left(report):
    assert report["host_files_changed"] == []
    assert report["canary_dir"] == ["grader.sock"]  # the grader's own listening socket, nothing else
    assert report["leftovers_at_end"] == []


def test_the_runs_were_kernel_isolated(report, request):
    assert "kernel isolation: bubblewrap" in report["isolation"]
    if request.node.callspec.params.get("report") == "unprivileged":
        assert report["uid"] == UNPRIVILEGED
