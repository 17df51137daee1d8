"""The portable llama.cpp build behind the embedded default: one recipe, a named CPU baseline, proof of both.

pip's default llama.cpp build uses ``-march=native`` and dies (SIGILL, or exit -11) on a CPU that lacks one of
its build machine's instructions. So the kit builds llama.cpp once itself, from the sources vendored in the
pinned, hash-checked ``llama-cpp-python`` sdist, with native detection off and every instruction-set option set
for a named baseline (``Baseline``: ``x86-64-v3`` by default, ``x86-64-v2``, or ``native`` on request). Both
servers use the one library: upstream ``llama-server``, and ``llama-cpp-python`` (installed with
``-DLLAMA_BUILD=OFF``) through ``LLAMA_CPP_LIB_PATH``. ``system_info`` asks the built library which CPU features
it was compiled for; manifests record it and a test fails when it names anything beyond the baseline.
Baselines, build folders, install time and the CPU check: docs/embedded-default.md, "Portability".
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from antipersist_lib.errors import BenchmarkUnavailableError

#: the llama-cpp-python release whose vendored llama.cpp the kit builds (and whose Python binding it uses)
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
#: sha256 of ``llama_cpp_python-0.3.36.tar.gz`` on PyPI (pip checks it before the kit reads a byte)
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
#: where builds live (``<repo>/.data/llama.cpp`` by default); one folder per (version, baseline)
BUILD_DIR_ENV = "ANTIPERSIST_LLAMA_DIR"
BASELINE_ENV = "ANTIPERSIST_LLAMA_BASELINE"
INFO_FILE = "build-info.json"
#: written by the compile phase when it succeeds: its seconds, summed over the calls that reached cmake (make's compile, then the up-to-date check in `build`)
COMPILE_FILE = "compile.json"
#: the llama.cpp targets the kit needs: the server and the shared libraries llama-cpp-python loads
TARGETS = ("llama-server", "llama", "ggml")
#: included after llama.cpp's project() calls: its orchestration code (common, server, mtmd) at -O1
GLUE_O1_INCLUDE = Path(__file__).with_name("llama_glue_o1.cmake")

_ISA_OPTIONS = (
    "GGML_SSE42",
    "GGML_AVX",
    "GGML_AVX2",
    "GGML_FMA",
    "GGML_F16C",
    "GGML_BMI2",
    "GGML_AVX_VNNI",
    "GGML_AVX512",
    "GGML_AVX512_VBMI",
    "GGML_AVX512_VNNI",
    "GGML_AVX512_BF16",
    "GGML_AMX_TILE",
    "GGML_AMX_INT8",
    "GGML_AMX_BF16",
)
#: entries of llama.cpp's feature report that are build options, not CPU instructions
NON_ISA_REPORT_KEYS = frozenset(
    {"LLAMAFILE", "OPENMP", "REPACK", "ACCELERATE", "CPU_HBM", "KLEIDIAI", "SVE_CNT", "RVV_VLEN"}
)


@dataclass(frozen=True)
class Baseline:
    """A named CPU target: the ggml options that are on, the /proc/cpuinfo flags a CPU needs to run the build,
    and the instruction-set names llama.cpp's report may show for it."""

    name: str
    machine: str
    enabled: tuple[str, ...]
    cpu_flags: tuple[str, ...]
    report_features: frozenset[str]
    native: bool = False
    description: str = ""

    def cmake_options(self) -> dict[str, str]:
        if self.native:
            return {"GGML_NATIVE": "ON"}
        opts = {"GGML_NATIVE": "OFF"}
        if self.machine == "x86_64":
            opts.update({opt: ("ON" if opt in self.enabled else "OFF") for opt in _ISA_OPTIONS})
        return opts


BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline(
            "x86-64-v3",
            "x86_64",
            ("GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2"),
            ("sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"),
            frozenset({"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2"}),
            description="x86-64 with AVX2/FMA/F16C/BMI2 (Haswell, Zen and later); no AVX-512, AVX-VNNI or AMX",
        ),
        Baseline(
            "x86-64-v2",
            "x86_64",
            ("GGML_SSE42",),
            ("sse4_2",),
            frozenset({"SSE3", "SSSE3"}),
            description="x86-64 with SSE4.2 only (for CPUs without AVX2; several times slower)",
        ),
        Baseline(
            "native",
            platform.machine(),
            (),
            (),
            frozenset(),
            native=True,
            description="-march=native: fastest on this CPU, runs only on CPUs with the same instructions",
        ),
    )
}


def default_baseline() -> str:
    env = os.environ.get(BASELINE_ENV)
    if env:
        return env
    return "x86-64-v3" if platform.machine() in ("x86_64", "AMD64") else "native"


def get_baseline(name: str) -> Baseline:
    try:
        return BASELINES[name]
    except KeyError:
        raise ValueError(f"unknown llama.cpp baseline {name!r}; choose one of {sorted(BASELINES)}") from None


def cmake_args(baseline: Baseline) -> list[str]:
    """The whole configure line after ``-S/-B``: release, shared libraries, no network, no web UI, the glue
    code at -O1, the ISA."""
    opts = {
        "CMAKE_BUILD_TYPE": "Release",
        "BUILD_SHARED_LIBS": "ON",
        "LLAMA_CURL": "OFF",
        "LLAMA_OPENSSL": "OFF",
        "LLAMA_BUILD_TESTS": "OFF",
        "LLAMA_BUILD_EXAMPLES": "OFF",
        "LLAMA_BUILD_TOOLS": "ON",
        "LLAMA_BUILD_SERVER": "ON",
        "LLAMA_BUILD_UI": "OFF",
        "LLAMA_USE_PREBUILT_UI": "OFF",  # never fetch web assets at build time
        "GGML_CCACHE": "OFF",
        # common, the server and mtmd at -O1, the model's code (ggml, libllama) at -O3: a fifth less compile
        # (perf/compile_profile.py; docs/performance.md), the same replies
        "CMAKE_PROJECT_INCLUDE": str(GLUE_O1_INCLUDE),
        # $ORIGIN: the binaries find their libraries wherever the build folder is moved
        "CMAKE_BUILD_RPATH_USE_ORIGIN": "ON",
        **baseline.cmake_options(),
    }
    return [f"-D{k}={v}" for k, v in opts.items()]


# -- where a build is ---------------------------------------------------------------------------------------


def builds_root() -> Path:
    env = os.environ.get(BUILD_DIR_ENV)
    if env:
        return Path(env).expanduser()
    from antipersist_lib.paths import repo_root

    return repo_root() / ".data" / "llama.cpp"


@dataclass(frozen=True)
class LlamaBuild:
    """A finished build: its folder, the server binary, the library folder and what was recorded about it."""

    root: Path
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def bin_dir(self) -> Path:
        return self.root / "build" / "bin"

    @property
    def server(self) -> Path:
        return self.bin_dir / "llama-server"

    @property
    def lib_dir(self) -> Path:
        return self.bin_dir

    @property
    def baseline(self) -> str:
        return str(self.info.get("baseline", ""))

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment in which llama-cpp-python loads this build's library."""
        env = dict(os.environ if base is None else base)
        env["LLAMA_CPP_LIB_PATH"] = str(self.lib_dir)
        return env

    def describe(self) -> dict[str, Any]:
        """Manifest form: the recipe and llama.cpp's own report of the features it was compiled for."""
        keys = ("baseline", "llama_cpp_python", "sdist_sha256", "cmake_args", "compiler", "system_info")
        return {**{k: self.info.get(k) for k in keys}, "features": self.info.get("features"), "path": str(self.root)}


def build_dir(baseline: str, root: Path | None = None) -> Path:
    return (root or builds_root()) / f"{LLAMA_CPP_PYTHON_VERSION}-{baseline}"


def installed_build(baseline: str | None = None) -> LlamaBuild:
    """The finished build for ``baseline`` (default: ``$ANTIPERSIST_LLAMA_BASELINE`` or x86-64-v3)."""
    name = baseline or default_baseline()
    root = build_dir(name)
    info_path = root / INFO_FILE
    if not info_path.exists():
        raise BenchmarkUnavailableError(
            f"llama.cpp is not built for baseline {name!r} (no {info_path}). Fix: `make llama` (or "
            f"`python -m antipersist_lib llama build --baseline {name}`); minutes on 2 cores (docs/embedded-default.md)."
        )
    build = LlamaBuild(root, json.loads(info_path.read_text(encoding="utf-8")))
    if not build.server.exists():
        raise BenchmarkUnavailableError(
            f"the llama.cpp build in {root} has no {build.server}; rebuild with `make llama`"
        )
    return build


# -- the CPU this runs on -------------------------------------------------------------------------------------


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The instruction-set flags the kernel reports for this CPU (empty where /proc/cpuinfo has none)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def missing_cpu_flags(baseline: Baseline, flags: set[str] | None = None) -> list[str]:
    """Flags the baseline needs that this CPU lacks (none for ``native`` or when the CPU cannot be read)."""
    have = cpu_flags() if flags is None else flags
    if not have:
        return []
    return [f for f in baseline.cpu_flags if f not in have]


def check_cpu(baseline: Baseline, flags: set[str] | None = None) -> None:
    """Refuse to start a build on a CPU that lacks one of its baseline's instructions, and say what to do."""
    missing = missing_cpu_flags(baseline, flags)
    if missing:
        raise BenchmarkUnavailableError(
            f"this CPU lacks {', '.join(missing)}, which the llama.cpp build for baseline {baseline.name!r} "
            f"({baseline.description}) needs; it would die with SIGILL. Fix: rebuild for an older baseline, "
            "`make llama LLAMA_BASELINE=x86-64-v2` (SSE4.2 only) or for this CPU, `make llama LLAMA_BASELINE=native`, "
            "and run with ANTIPERSIST_LLAMA_BASELINE set to the same name."
        )


# -- llama.cpp's own report ---------------------------------------------------------------------------------


def parse_system_info(text: str) -> dict[str, str]:
    """``"CPU : SSE3 = 1 | AVX2 = 1 | ..."`` -> ``{"SSE3": "1", "AVX2": "1", ...}``."""
    return {m.group(1): m.group(2) for m in re.finditer(r"([A-Z][A-Z0-9_]*)\s*=\s*([^\s|]+)", text)}


def compiled_features(report: dict[str, str]) -> set[str]:
    """The instruction-set extensions the report says the build uses (build options left out)."""
    return {k for k, v in report.items() if v == "1" and k not in NON_ISA_REPORT_KEYS}


def beyond_baseline(report: dict[str, str], baseline: Baseline) -> set[str]:
    """Compiled-in instruction sets the baseline does not allow (the portability test wants none)."""
    return compiled_features(report) - set(baseline.report_features)


def unverifiable(report: dict[str, str], baseline: Baseline) -> bool:
    """True when the report names no instruction set although the baseline has some: a build whose CPU
    backend is loaded at run time (``GGML_BACKEND_DL``) reports nothing until it is loaded, and an empty
    report would otherwise pass ``beyond_baseline`` without a single feature checked."""
    return bool(baseline.report_features) and not compiled_features(report)


def system_info(lib_dir: Path, timeout_s: float = 60.0) -> str:
    """llama.cpp's own report (``llama_print_system_info``), asked in a child process so that a library that
    cannot run here kills the child, not the caller."""
    code = "import sys, llama_cpp; sys.stdout.write(llama_cpp.llama_print_system_info().decode())"
    env = dict(os.environ)
    env["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        from antipersist_lib.serving.process_report import describe_exit

        tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
        raise BenchmarkUnavailableError(
            f"loading the llama.cpp library in {lib_dir} failed ({describe_exit(proc.returncode)}):\n{tail}"
        )
    return proc.stdout.strip()


# -- the build ---------------------------------------------------------------------------------------------


def _download_sdist(dest: Path, log: Callable[[str], None]) -> Path:
    req = dest / "requirements.txt"
    req.write_text(f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} --hash=sha256:{SDIST_SHA256}\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:", "--require-hashes"]
    cmd += ["--disable-pip-version-check", "--quiet", "-d", str(dest), "-r", str(req)]
    log(f"downloading the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sources (llama.cpp is vendored in them)")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchmarkUnavailableError(
            f"pip could not download llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} sources (exit {proc.returncode}):\n"
            + "\n".join(proc.stderr.strip().splitlines()[-10:])
        )
    found = sorted(dest.glob("llama_cpp_python-*.tar.gz"))
    if len(found) != 1:
        raise BenchmarkUnavailableError(f"pip left {len(found)} llama-cpp-python sdists in {dest}")
    return found[0]


def _extract_vendor(sdist: Path, dest: Path) -> Path:
    """Unpack only ``vendor/llama.cpp`` of the sdist into ``dest/src`` (no member may leave ``dest``)."""
    src = dest / "src"
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
    with tarfile.open(sdist, "r:gz") as tf:
        members = []
        for m in tf.getmembers():
            if not m.name.startswith(prefix) or ".." in Path(m.name).parts:
                continue
            if not (m.isfile() or m.isdir()):
                continue
            m.name = m.name[len(prefix) :]
            if m.name:
                members.append(m)
        tf.extractall(src, members=members, filter="data")
    return src


def _compiler() -> str:
    try:
        out = subprocess.run(["c++", "--version"], capture_output=True, text=True, timeout=30).stdout
        return out.splitlines()[0] if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


#: how often a long compile says how far it is (cmake prints "[ 42%] Building ..." lines into the log)
PROGRESS_EVERY_S = 15.0
_PERCENT = re.compile(rb"^\[\s*(\d+)%\]")


def _run_logged(cmd: list[str], log_path: Path, what: str, progress: Callable[[str], None] | None = None) -> None:
    """Run ``cmd`` with its output appended to ``log_path``; with ``progress``, the last percentage cmake printed
    is passed on every ``PROGRESS_EVERY_S`` seconds, so minutes of compiling are never silent."""
    started = last = time.monotonic()
    with open(log_path, "ab") as fh:
        fh.write(("\n$ " + " ".join(cmd) + "\n").encode())
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            m = _PERCENT.match(line)
            now = time.monotonic()
            if progress is not None and m and now - last >= PROGRESS_EVERY_S:
                last = now
                progress(f"  {what}: {int(m.group(1))}% after {now - started:.0f} s")
        proc.wait()
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise BenchmarkUnavailableError(f"{what} failed (exit {proc.returncode}); last lines of {log_path}:\n{tail}")


def compile_sources(
    baseline: str | None = None,
    *,
    jobs: int | None = None,
    root: Path | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Download, configure and compile llama.cpp for ``baseline`` (``build`` then checks and records it).

    Needs only the standard library, pip, cmake and a C++ compiler, so ``make install`` runs it with the
    system Python while pip fills the kit's environment. Returns the build folder; an up-to-date tree
    only costs cmake's check. The seconds spent are kept in ``compile.json`` for the build record."""
    base = get_baseline(baseline or default_baseline())
    if base.machine == "x86_64" and platform.machine() not in ("x86_64", "AMD64"):
        raise ValueError(f"baseline {base.name!r} is for x86-64; this machine is {platform.machine()} (use 'native')")
    dest = build_dir(base.name, root)
    if force and dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if not (dest / "src" / "CMakeLists.txt").exists():
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            sdist = _download_sdist(Path(tmp), log)
            _extract_vendor(sdist, dest)
    args = cmake_args(base)
    log_path = dest / "build.log"
    jobs = jobs or os.cpu_count() or 1
    log(f"compiling llama.cpp for baseline {base.name} ({base.description}) with {jobs} jobs; log: {log_path}")
    _run_logged(["cmake", "-S", str(dest / "src"), "-B", str(dest / "build"), *args], log_path, "cmake configure")
    _run_logged(
        ["cmake", "--build", str(dest / "build"), "--config", "Release", "-j", str(jobs), "--target", *TARGETS],
        log_path,
        "cmake build",
        progress=lambda line: log(line),
    )
    record = dest / COMPILE_FILE
    spent = time.monotonic() - t0
    earlier = json.loads(record.read_text(encoding="utf-8")).get("compile_s", 0.0) if record.exists() else 0.0
    record.write_text(json.dumps({"compile_s": round(earlier + spent, 1), "cmake_args": args}) + "\n", encoding="utf-8")
    return dest


def build(
    baseline: str | None = None,
    *,
    jobs: int | None = None,
    root: Path | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> LlamaBuild:
    """Build llama.cpp for ``baseline`` into ``<root>/<version>-<baseline>``; a finished build is reused.

    The build-info file is written last, so an interrupted build is simply continued by the next call."""
    base = get_baseline(baseline or default_baseline())
    dest = build_dir(base.name, root)
    info_path = dest / INFO_FILE
    if info_path.exists() and not force:
        return LlamaBuild(dest, json.loads(info_path.read_text(encoding="utf-8")))
    compile_sources(base.name, jobs=jobs, root=root, force=force, log=log)
    args = cmake_args(base)
    result = LlamaBuild(dest)
    report_text = system_info(result.lib_dir)
    report = parse_system_info(report_text)
    info = {
        "baseline": base.name,
        "baseline_description": base.description,
        "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
        "sdist_sha256": SDIST_SHA256,
        "llama_cpp_source": f"vendor/llama.cpp of the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist",
        "cmake_args": args,
        "targets": list(TARGETS),
        "compiler": _compiler(),
        "built_on": {"machine": platform.machine(), "cpu_flags_missing_for_baseline": missing_cpu_flags(base)},
        "system_info": report_text,
        "features": sorted(compiled_features(report)),
        "build_s": json.loads((dest / COMPILE_FILE).read_text(encoding="utf-8"))["compile_s"],
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if not base.native and unverifiable(report, base):
        raise BenchmarkUnavailableError(
            f"the build for baseline {base.name!r} reports no instruction set (llama.cpp's report: "
            f"{report_text!r}), so its portability cannot be checked; a build with runtime-loaded CPU backends "
            "(GGML_BACKEND_DL) says nothing until one is loaded. The build was not marked finished"
        )
    extra = beyond_baseline(report, base) if not base.native else set()
    if extra:
        raise BenchmarkUnavailableError(
            f"the build for baseline {base.name!r} reports instructions beyond it: {sorted(extra)} "
            f"(llama.cpp's report: {report_text}); the recipe is wrong, the build was not marked finished"
        )
    tmp_info = info_path.with_name(INFO_FILE + ".tmp")
    tmp_info.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp_info, info_path)
    log(f"llama.cpp built in {info['build_s']:.0f} s; compiled features: {', '.join(info['features'])}")
    return LlamaBuild(dest, info)


def main(argv: list[str] | None = None) -> int:
    """``python -m antipersist_lib.serving.llama_build compile``: the compile phase alone, runnable by any
    Python 3 (``make install`` starts it before the kit's environment exists)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m antipersist_lib.serving.llama_build")
    ap.add_argument("phase", choices=["compile"])
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--jobs", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        compile_sources(args.baseline, jobs=args.jobs)
    except (BenchmarkUnavailableError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
