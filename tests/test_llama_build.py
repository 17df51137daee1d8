"""The portable llama.cpp build: the recipe names its baseline, and the built library proves it.

The slow test reads llama.cpp's own report of the features the installed build was compiled for and fails
when it names anything beyond the baseline: a native build on an AVX-512 machine fails it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from antipersist_lib.errors import BenchmarkUnavailableError
from antipersist_lib.serving import llama_build
from antipersist_lib.serving.llama_build import BASELINES

# what a -march=native build reports on a Sapphire Rapids CPU (the machine the portability issue was seen on)
SAPPHIRE_RAPIDS_NATIVE = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX_VNNI = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)
PORTABLE = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "


def _options(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args)


def test_the_default_recipe_turns_native_detection_off_and_names_every_instruction_set():
    opts = _options(llama_build.cmake_args(BASELINES["x86-64-v3"]))
    assert opts["GGML_NATIVE"] == "OFF"
    for on in ("GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2"):
        assert opts[on] == "ON"
    for off in ("GGML_AVX512", "GGML_AVX512_VBMI", "GGML_AVX512_VNNI", "GGML_AVX512_BF16", "GGML_AVX_VNNI"):
        assert opts[off] == "OFF"
    assert opts["GGML_AMX_TILE"] == opts["GGML_AMX_INT8"] == opts["GGML_AMX_BF16"] == "OFF"
    # nothing is fetched at build time, and the shared libraries are what llama-cpp-python loads
    assert opts["LLAMA_CURL"] == "OFF" and opts["LLAMA_USE_PREBUILT_UI"] == "OFF" and opts["BUILD_SHARED_LIBS"] == "ON"
    older = _options(llama_build.cmake_args(BASELINES["x86-64-v2"]))
    assert older["GGML_SSE42"] == "ON" and older["GGML_AVX"] == older["GGML_AVX2"] == "OFF"
    assert _options(llama_build.cmake_args(BASELINES["native"]))["GGML_NATIVE"] == "ON"  # only when asked


def test_a_native_build_on_an_avx512_machine_is_beyond_the_baseline_and_a_portable_one_is_not():
    native = llama_build.parse_system_info(SAPPHIRE_RAPIDS_NATIVE)
    assert llama_build.beyond_baseline(native, BASELINES["x86-64-v3"]) == {
        "AVX_VNNI",
        "AVX512",
        "AVX512_VBMI",
        "AVX512_VNNI",
        "AVX512_BF16",
        "AMX_INT8",
    }
    portable = llama_build.parse_system_info(PORTABLE)
    assert llama_build.beyond_baseline(portable, BASELINES["x86-64-v3"]) == set()
    assert "LLAMAFILE" not in llama_build.compiled_features(portable)  # build options are not instructions
    assert llama_build.beyond_baseline(portable, BASELINES["x86-64-v2"]) == {"AVX", "AVX2", "F16C", "FMA", "BMI2"}
    # a report that names no instruction set checks nothing: unverifiable, never "within the baseline"
    for silent in ("", "CPU : LLAMAFILE = 1 | REPACK = 1 |"):
        report = llama_build.parse_system_info(silent)
        assert llama_build.beyond_baseline(report, BASELINES["x86-64-v3"]) == set()
        assert llama_build.unverifiable(report, BASELINES["x86-64-v3"])
    assert not llama_build.unverifiable(portable, BASELINES["x86-64-v3"])


def test_a_cpu_without_avx2_is_refused_before_start_with_the_fix():
    old_cpu = {"fpu", "sse", "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "popcnt"}
    with pytest.raises(BenchmarkUnavailableError, match=r"lacks avx2, fma, f16c, bmi2.*LLAMA_BASELINE=x86-64-v2"):
        llama_build.check_cpu(BASELINES["x86-64-v3"], old_cpu)
    llama_build.check_cpu(BASELINES["x86-64-v2"], old_cpu)  # the older baseline runs there
    assert llama_build.cpu_flags("processor: 0\nflags\t\t: fpu avx2 fma\n") == {"fpu", "avx2", "fma"}


def test_a_missing_build_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setenv(llama_build.BUILD_DIR_ENV, str(tmp_path))
    with pytest.raises(BenchmarkUnavailableError, match=r"llama.cpp is not built.*make llama"):
        llama_build.installed_build("x86-64-v3")
    with pytest.raises(ValueError, match="unknown llama.cpp baseline 'avx9'"):
        llama_build.get_baseline("avx9")


@pytest.mark.slow
def test_the_installed_build_uses_nothing_beyond_its_baseline_by_llama_cpps_own_report():
    build = llama_build.installed_build()
    base = BASELINES[build.baseline]
    report_text = llama_build.system_info(build.lib_dir)  # asked afresh from the library, not from the record
    report = llama_build.parse_system_info(report_text)
    assert "AVX2" in report or base.name != "x86-64-v3"
    if not base.native:
        assert llama_build.beyond_baseline(report, base) == set(), report_text
        # built by the recipe's instruction-set choices (a build made before a change that only affects compile
        # time, such as the glue code's -O1, is not rebuilt: its replies are the same)
        isa = lambda args: {k: v for k, v in _options(args).items() if k.startswith("GGML_")}  # noqa: E731
        assert isa(build.info["cmake_args"]) == isa(llama_build.cmake_args(base))
    info = json.loads((build.root / llama_build.INFO_FILE).read_text())
    assert info["features"] == sorted(llama_build.compiled_features(report))
    # the server binary of the same build runs on this CPU
    out = subprocess.run([str(build.server), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_the_compile_phase_needs_only_the_standard_library():
    """make install runs the compile phase with the system Python before .venv is filled: importing it
    must not pull in any third-party package."""
    import sys

    from antipersist_lib.paths import repo_root

    code = (
        "import sys; before = set(sys.modules); import antipersist_lib.serving.llama_build as m; "
        "names = {n.split('.')[0] for n in set(sys.modules) - before}; "
        "print(sorted(n for n in names if n not in sys.stdlib_module_names and n != 'antipersist_lib'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root(), check=True)
    assert out.stdout.strip() == "[]"


def test_the_compile_phase_names_an_unknown_baseline(capsys):
    assert llama_build.main(["compile", "--baseline", "x86-64-v9"]) == 1
    assert "x86-64-v9" in capsys.readouterr().err


def test_a_long_compile_says_how_far_it_is(tmp_path, monkeypatch):
    """Issue 42: `llama build` printed nothing for 13 minutes. The build passes on cmake's percentages."""
    import sys

    from antipersist_lib.serving import llama_build

    monkeypatch.setattr(llama_build, "PROGRESS_EVERY_S", 0.0)
    script = "import time\nfor p in (5, 40, 100):\n    print(f'[ {p:2d}%] Building CXX object x.o', flush=True)\n    time.sleep(0.05)\n"
    said: list[str] = []
    log = tmp_path / "build.log"
    llama_build._run_logged([sys.executable, "-c", script], log, "cmake build", progress=said.append)
    assert [line.split(":")[1].split("%")[0].strip() for line in said] == ["5", "40", "100"]
    assert all(line.startswith("  cmake build:") and "after" in line for line in said)
    assert "[ 40%] Building CXX object x.o" in log.read_text()  # the full output still goes to the log


@pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("c++") is None, reason="needs cmake and a C++ compiler"
)
def test_the_glue_include_lowers_only_the_orchestration_targets_to_o1(tmp_path):
    """serving/llama_glue_o1.cmake, included after every project() call (also a subproject's, as ggml's), gives
    the targets llama.cpp's common code, server and mtmd -O1 after the release -O3, and leaves the model's
    code (ggml, libllama) at -O3: configured on a project that names its targets as llama.cpp does."""
    src = tmp_path / "src"
    (src / "ggml").mkdir(parents=True)
    for name in ("common", "server", "mtmd", "llama", "cpu"):
        (src / f"{name}.cpp").write_text(f"int {name}_fn() {{ return 1; }}\n")
    (src / "ggml" / "CMakeLists.txt").write_text("project(ggml CXX)\nadd_library(ggml-cpu ../cpu.cpp)\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.19)\nproject(llama.cpp CXX)\nadd_subdirectory(ggml)\n"
        "add_library(llama-common common.cpp)\nadd_library(server-context server.cpp)\nadd_library(mtmd mtmd.cpp)\n"
        "add_library(llama llama.cpp)\n"
    )
    include = llama_build.GLUE_O1_INCLUDE
    subprocess.run(
        ["cmake", "-S", str(src), "-B", str(tmp_path / "b"), "-DCMAKE_BUILD_TYPE=Release",
         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", f"-DCMAKE_PROJECT_INCLUDE={include}"],
        check=True, capture_output=True,
    )  # fmt: skip
    levels = {
        Path(e["file"]).stem: re.findall(r"\s(-O\d)", e["command"])
        for e in json.loads((tmp_path / "b" / "compile_commands.json").read_text())
    }
    assert levels == {"common": ["-O3", "-O1"], "server": ["-O3", "-O1"], "mtmd": ["-O3", "-O1"],
                      "llama": ["-O3"], "cpu": ["-O3"]}  # fmt: skip
    assert f"-DCMAKE_PROJECT_INCLUDE={include}" in llama_build.cmake_args(BASELINES["x86-64-v3"])  # the kit's recipe
