"""Where the first install's compile time goes (issue 45): every translation unit of the kit's llama.cpp
build, timed.

``make install`` compiles llama.cpp's ``llama-server`` and libraries from source (serving/llama_build.py).
This builds the same targets from the same source tree and the same configure line into a separate folder,
with a compiler launcher that records each compiler call's CPU time (links are not wrapped: they are in the wall
time only) (user + system of the child, from
``wait4``) and wall time. CPU seconds add up across jobs and are far less disturbed by other work on the
machine than wall time, so two variants can be compared even beside a running study. ``--variant`` adds
cmake options to the kit's own line (``release``: none). The table groups the seconds by part of the tree
(ggml's CPU backend, ggml's base, libllama, common, the server, the multimodal library, vendored code)
and lists the costliest files.

    python -m perf.compile_profile [--variant release] [--jobs 1] [--out outputs/benchmarks/compile]

Needs a finished build (``make install``): its ``src`` folder is reused, nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from antipersist_lib.serving.llama_build import TARGETS, build_dir, cmake_args, default_baseline, get_baseline

#: extra cmake options per variant, after the kit's own configure line
VARIANTS: dict[str, list[str]] = {
    "release": [],
    "o2": ["-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG", "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG"],
    "o1": ["-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG", "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"],
    # libllama alone has about 220 small files (one per model architecture) that parse the same headers
    "unity": ["-DCMAKE_UNITY_BUILD=ON"],
    # the kit's recipe before issue 45 adopted llama_glue_o1.cmake: everything at -O3
    "all-o3": ["-DCMAKE_PROJECT_INCLUDE={out}/no-include.cmake"],  # an empty file in --out
    "glue-o0": ["-DKIT_GLUE_OPT=-O0"],  # the glue code unoptimised
}

#: parts of the tree, first match wins (paths relative to the source folder)
PARTS = (
    ("ggml/src/ggml-cpu/", "ggml CPU backend"),
    ("ggml/", "ggml base"),
    ("src/", "libllama"),
    ("common/", "common"),
    ("tools/server/", "server"),
    ("tools/mtmd/", "multimodal (mtmd)"),
    ("vendor/", "vendored"),
)

LAUNCHER = """import json, os, subprocess, sys, time
args = sys.argv[1:]
source = args[args.index("-c") + 1] if "-c" in args else None
start = time.monotonic()
proc = subprocess.Popen(args)
_, status, usage = os.wait4(proc.pid, 0)
code = os.waitstatus_to_exitcode(status)
row = {"source": source, "user_s": usage.ru_utime, "sys_s": usage.ru_stime, "wall_s": time.monotonic() - start,
       "exit": code}
with open(os.environ["KIT_COMPILE_LOG"], "a") as fh:
    fh.write(json.dumps(row) + "\\n")
sys.exit(code)
"""


def part_of(source: str, src: Path) -> str:
    try:
        rel = Path(source).resolve().relative_to(src.resolve()).as_posix()
    except ValueError:
        return "generated"
    return next((name for prefix, name in PARTS if rel.startswith(prefix)), "other")


def timed_build(
    src: Path, work: Path, options: list[str], *, targets: tuple[str, ...], jobs: int, out: Path
) -> tuple[list[dict[str, Any]], float, float]:
    """Configure ``src`` into a fresh ``work`` with ``options`` and the timing launcher, build ``targets``:
    (one row per compiler call, configure seconds, wall seconds). A failing compile fails the build, with the
    compiler's exit status."""
    src, work, out = src.resolve(), work.resolve(), out.resolve()  # the compiler runs in the build's folders
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    launcher = out / "launcher.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    log = out / f"units-{work.name}.jsonl"
    log.unlink(missing_ok=True)
    env = {**os.environ, "KIT_COMPILE_LOG": str(log)}
    wrap = f"{sys.executable};{launcher}"
    configure = [
        "cmake", "-S", str(src), "-B", str(work), *options,
        f"-DCMAKE_C_COMPILER_LAUNCHER={wrap}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={wrap}",
    ]  # fmt: skip
    t0 = time.monotonic()
    subprocess.run(configure, check=True, env=env, stdout=subprocess.DEVNULL)
    configured = time.monotonic() - t0
    subprocess.run(
        ["cmake", "--build", str(work), "--config", "Release", "-j", str(jobs), "--target", *targets],
        check=True, env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    units = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [u for u in units if u["source"]], configured, time.monotonic() - t0


def cpu_s(unit: dict[str, Any]) -> float:
    return float(unit["user_s"]) + float(unit["sys_s"])


def by_part(units: list[dict[str, Any]], src: Path) -> dict[str, float]:
    """CPU seconds per part of the tree, costliest first."""
    out: dict[str, float] = {}
    for u in units:
        part = part_of(u["source"], src)
        out[part] = out.get(part, 0.0) + cpu_s(u)
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def profile(
    variant: str, *, jobs: int, out: Path, baseline: str | None = None, targets: tuple[str, ...] = TARGETS
) -> dict[str, Any]:
    base = get_baseline(baseline or default_baseline())
    src = build_dir(base.name) / "src"
    if not (src / "CMakeLists.txt").is_file():
        raise SystemExit(f"no llama.cpp source at {src}: run `make install` first (it downloads and builds it)")
    load = os.getloadavg()[0]
    out = out.resolve()
    (out / "no-include.cmake").write_text("# nothing: every target keeps the release -O3\n", encoding="utf-8")
    options = [*cmake_args(base), *(o.format(out=out) for o in VARIANTS[variant])]
    units, configured, wall = timed_build(src, out / f"build-{variant}", options, targets=targets, jobs=jobs, out=out)

    def shown(source: str) -> str:
        return (
            source
            if part_of(source, src) == "generated"
            else Path(source).resolve().relative_to(src.resolve()).as_posix()
        )

    return {
        "variant": variant,
        "extra_cmake_options": VARIANTS[variant],
        "jobs": jobs,
        "load_average_at_start": load,
        "configure_s": round(configured, 1),
        "wall_s": round(wall, 1),
        "units": len(units),
        "compile_cpu_s": round(sum(cpu_s(u) for u in units), 1),
        "by_part_cpu_s": by_part(units, src),
        "top_units": [
            {"source": shown(u["source"]), "cpu_s": round(cpu_s(u), 1)}
            for u in sorted(units, key=cpu_s, reverse=True)[:15]
        ],
        "binary_dir": str(out / f"build-{variant}"),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"variant {result['variant']} ({' '.join(result['extra_cmake_options']) or 'the kit`s own line'}), "
        f"{result['jobs']} job(s), load {result['load_average_at_start']:.1f} at start: {result['units']} units, "
        f"compile {result['compile_cpu_s']} CPU-s, wall {result['wall_s']} s (configure and links included)",
        "",
        "| part | CPU-s | share |",
        "|---|---|---|",
    ]
    total = result["compile_cpu_s"] or 1.0
    lines += [f"| {k} | {v} | {v / total:.0%} |" for k, v in result["by_part_cpu_s"].items()]
    lines += ["", "| costliest units | CPU-s |", "|---|---|"]
    lines += [f"| {u['source']} | {u['cpu_s']} |" for u in result["top_units"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perf.compile_profile", description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=tuple(VARIANTS), default="release")
    ap.add_argument("--jobs", type=int, default=1, help="parallel compiler calls (CPU seconds add up the same)")
    ap.add_argument("--out", default="outputs/benchmarks/compile")
    ap.add_argument("--keep", action="store_true", help="keep the build folder (to measure the result's speed)")
    ap.add_argument("--target", action="append", help=f"a cmake target (repeatable; default {' '.join(TARGETS)})")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = profile(args.variant, jobs=args.jobs, out=out, targets=tuple(args.target or TARGETS))
    if not args.keep:
        shutil.rmtree(result["binary_dir"])
    (out / f"profile-{args.variant}.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    text = markdown(result)
    (out / f"profile-{args.variant}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
