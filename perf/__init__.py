"""Speed and scale benchmarks of the kit, run by one command: ``python -m perf``.

Why a suite: the paper's cost claims and the kit's "runs on a laptop" promise are only as good
as measurements taken together, on one machine, in one run. Every benchmark module exposes
``run(quick: bool) -> list[dict]`` and returns rows made by ``row()``; ``run_suite`` collects
them and ``markdown()`` renders the table. Targets live in the rows, never in tests.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

#: name -> module; each module has ``run(quick) -> rows``
BENCHMARKS: dict[str, str] = {
    "saturation": "perf.saturation",
    "overhead": "perf.overhead",
    "reload": "perf.reload",
    "planning": "perf.planning",
    "embedded": "perf.embedded_tokens",
    "servers": "perf.embedded_servers",
    "rehearsal": "perf.rehearsal",
}
#: run only when asked for (embedded, servers: need the local llama.cpp model and take minutes, ``--embedded``)
OPTIONAL: frozenset[str] = frozenset({"embedded", "servers", "rehearsal"})
#: of those, run only by name (``--only``): the paper-grid rehearsal takes about half an hour
ON_REQUEST: frozenset[str] = frozenset({"rehearsal"})

COLUMNS = ("benchmark", "setting", "measured", "unit", "target", "ratio", "pass")


def row(
    benchmark: str, setting: str, measured: float, unit: str, target: tuple[str, float] | None = None
) -> dict[str, Any]:
    """One table row. ``target`` is ``(">=", x)`` or ``("<", x)``; ``ratio`` is oriented so that
    ratio >= 1 means the target is met (measured/target for ">=", target/measured for "<")."""
    measured = float(measured)
    out: dict[str, Any] = {
        "benchmark": benchmark,
        "setting": setting,
        "measured": measured,
        "unit": unit,
        "target": None,
        "ratio": None,
        "pass": None,
    }
    if target is not None:
        op, value = target
        if op == ">=":
            ratio, ok = measured / value, measured >= value
        elif op == "<":
            ratio, ok = (value / measured if measured > 0 else None), measured < value
        else:
            raise ValueError(f"unknown target operator {op!r}")
        out.update({"target": f"{op} {value:g}", "ratio": ratio, "pass": bool(ok)})
    return out


def run_suite(
    only: str | None = None, *, quick: bool = False, embedded: bool = False, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """Run the selected benchmarks in order; ``only`` names one of ``BENCHMARKS``."""
    if only is not None and only not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {only!r}; expected one of {tuple(BENCHMARKS)}")
    names = [only] if only else [n for n in BENCHMARKS if n not in ON_REQUEST and (n not in OPTIONAL or embedded)]
    rows: list[dict[str, Any]] = []
    for name in names:
        log(f"[benchmarks] {name}{' (quick)' if quick else ''} ...")
        t = time.perf_counter()
        rows += importlib.import_module(BENCHMARKS[name]).run(quick)
        log(f"[benchmarks] {name} done in {time.perf_counter() - t:.1f} s")
    return rows


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "PASS" if v else "MISS"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table as GitHub Markdown (also what the command prints)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_fmt(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"
