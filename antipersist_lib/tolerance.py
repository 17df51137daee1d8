"""Comparing numbers recorded on one machine with numbers recomputed on another.

A run's decisions hold cosines, weights and scores computed with BLAS; another CPU (or another
BLAS build) may round the last bit differently. Replays and audits therefore compare JSON-like
records field by field: integers, strings, booleans and ``None`` exactly, floats within a
relative tolerance. ``differences`` names every field that differs, so a failed check says where.
"""

from __future__ import annotations

import math
from typing import Any

#: Cosines come from float32 dot products (``similarity.EmbeddingMatrix``); BLAS kernels of other
#: CPUs sum them in another order, which moves a cosine by up to ~sqrt(d) float32 ulps (~1e-6 for
#: d = 4096). Weights, estimates and scores inherit that. A real change of a decision shows up in
#: its exactly compared parts (mode, branch, neighbour ids, counts), never only in these digits.
REL_TOL = 1e-5
ABS_TOL = 1e-5


def _is_float(x: Any) -> bool:
    return isinstance(x, float)


def differences(
    recorded: Any, recomputed: Any, *, rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL, path: str = ""
) -> list[str]:
    """Paths (``a.b[3]``) where two JSON-like values differ beyond the float tolerance."""
    where = path or "<root>"
    if _is_float(recorded) or _is_float(recomputed):
        nums = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (recorded, recomputed))
        if nums and math.isclose(recorded, recomputed, rel_tol=rel_tol, abs_tol=abs_tol):
            return []
        return [f"{where}: {recorded!r} != {recomputed!r}"]
    if isinstance(recorded, dict) and isinstance(recomputed, dict):
        out = []
        for key in sorted(set(recorded) | set(recomputed), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in recorded or key not in recomputed:
                out.append(f"{sub}: only in the {'recorded' if key in recorded else 'recomputed'} value")
            else:
                out += differences(recorded[key], recomputed[key], rel_tol=rel_tol, abs_tol=abs_tol, path=sub)
        return out
    if isinstance(recorded, (list, tuple)) and isinstance(recomputed, (list, tuple)):
        if len(recorded) != len(recomputed):
            return [f"{where}: length {len(recorded)} != {len(recomputed)}"]
        out = []
        for i, (a, b) in enumerate(zip(recorded, recomputed)):
            out += differences(a, b, rel_tol=rel_tol, abs_tol=abs_tol, path=f"{path}[{i}]")
        return out
    return [] if recorded == recomputed else [f"{where}: {recorded!r} != {recomputed!r}"]


def close(recorded: Any, recomputed: Any, *, rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL) -> bool:
    """True when the two values agree exactly except for floats within the tolerance."""
    return not differences(recorded, recomputed, rel_tol=rel_tol, abs_tol=abs_tol)
