"""Per-skill tool helpers (paper App. A.3 / B.2), as importable functions and as source text.

The paper inlines the helper bodies into the solver prompt and prepends them to ground-truth and
model-written ``solve`` code, which runs in a sandbox that cannot import the kit. So the helpers
listed in ``TOOL_FUNCTIONS`` are written to use nothing but builtins and each other, and
``TOOL_SOURCE`` is their own source text (``inspect.getsource``): exec'ing it defines the very
functions imported here, so the two forms cannot drift apart (the tests check both).

Every skill helper takes the grid and the family's selected objects (dicts from ``find_objects``)
and returns a new grid; the input grid is never modified. Helpers that move or mirror objects
erase all selected objects first and repaint them after, so the order of the objects never matters.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable


def find_objects(grid: list[list[int]]) -> list[dict]:
    """Single-color 4-connected objects (0 is background), ordered by their first cell in row-major order.

    Each object is a dict: color, cells (sorted (row, col) tuples), size (cell count) and
    bbox (top, left, bottom, right), inclusive.
    """
    height = len(grid)
    width = len(grid[0]) if height else 0
    seen = [[False] * width for _ in range(height)]
    objects = []
    for row in range(height):
        for col in range(width):
            color = grid[row][col]
            if color == 0 or seen[row][col]:
                continue
            seen[row][col] = True
            stack = [(row, col)]
            cells = []
            while stack:
                r, c = stack.pop()
                cells.append((r, c))
                for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
                    if 0 <= nr < height and 0 <= nc < width and not seen[nr][nc] and grid[nr][nc] == color:
                        seen[nr][nc] = True
                        stack.append((nr, nc))
            cells.sort()
            rows = [r for r, _ in cells]
            cols = [c for _, c in cells]
            bbox = (min(rows), min(cols), max(rows), max(cols))
            objects.append({"color": color, "cells": cells, "size": len(cells), "bbox": bbox})
    return objects


def keep(grid: list[list[int]], objects: list[dict]) -> list[list[int]]:
    """Keep the given objects unchanged and erase everything else to background."""
    out = [[0] * len(row) for row in grid]
    for obj in objects:
        for r, c in obj["cells"]:
            out[r][c] = obj["color"]
    return out


def border(grid: list[list[int]], objects: list[dict], color: int) -> list[list[int]]:
    """Draw a one-cell ring of `color` just outside each object's bounding box, on background cells only."""
    out = [row[:] for row in grid]
    height, width = len(out), len(out[0])
    for obj in objects:
        top, left, bottom, right = obj["bbox"]
        for r in range(top - 1, bottom + 2):
            for c in range(left - 1, right + 2):
                on_ring = r in (top - 1, bottom + 1) or c in (left - 1, right + 1)
                if on_ring and 0 <= r < height and 0 <= c < width and out[r][c] == 0:
                    out[r][c] = color
    return out


def recolor(grid: list[list[int]], objects: list[dict], color: int) -> list[list[int]]:
    """Repaint every cell of each object in `color`."""
    out = [row[:] for row in grid]
    for obj in objects:
        for r, c in obj["cells"]:
            out[r][c] = color
    return out


def translate(grid: list[list[int]], objects: list[dict], dr: int, dc: int) -> list[list[int]]:
    """Shift each object by dr rows and dc columns; cells that leave the grid are dropped."""
    out = [row[:] for row in grid]
    height, width = len(out), len(out[0])
    for obj in objects:
        for r, c in obj["cells"]:
            out[r][c] = 0
    for obj in objects:
        for r, c in obj["cells"]:
            if 0 <= r + dr < height and 0 <= c + dc < width:
                out[r + dr][c + dc] = obj["color"]
    return out


def flip_horizontal(grid: list[list[int]], objects: list[dict]) -> list[list[int]]:
    """Mirror each object left-right within its own bounding box (column c goes to left + right - c)."""
    out = [row[:] for row in grid]
    for obj in objects:
        for r, c in obj["cells"]:
            out[r][c] = 0
    for obj in objects:
        left, right = obj["bbox"][1], obj["bbox"][3]
        for r, c in obj["cells"]:
            out[r][left + right - c] = obj["color"]
    return out


def mark_center(grid: list[list[int]], objects: list[dict], color: int) -> list[list[int]]:
    """Paint the centroid cell of each object (mean row and mean column, rounded down) in `color`."""
    out = [row[:] for row in grid]
    for obj in objects:
        cells = obj["cells"]
        row = sum(r for r, _ in cells) // len(cells)
        col = sum(c for _, c in cells) // len(cells)
        out[row][col] = color
    return out


def hollow(grid: list[list[int]], objects: list[dict]) -> list[list[int]]:
    """Erase each object's interior (cells whose eight neighbours all belong to it), leaving its outline."""
    out = [row[:] for row in grid]
    for obj in objects:
        cells = {(r, c) for r, c in obj["cells"]}
        for r, c in cells:
            if all((r + dr, c + dc) in cells for dr in (-1, 0, 1) for dc in (-1, 0, 1)):
                out[r][c] = 0
    return out


#: the helpers whose source makes up TOOL_SOURCE (the object finder first: the others consume its objects)
TOOL_FUNCTIONS: tuple[Callable, ...] = (
    find_objects,
    keep,
    border,
    recolor,
    translate,
    flip_horizontal,
    mark_center,
    hollow,
)

#: skill_id (paper Table 6) -> its helper; every helper is called as helper(grid, objects, **params)
SKILL_TOOLS: dict[str, Callable[..., list[list[int]]]] = {
    "keep": keep,
    "border": border,
    "recolor": recolor,
    "translate": translate,
    "flip_horizontal": flip_horizontal,
    "mark_center": mark_center,
    "hollow": hollow,
}

TOOL_NAMES: tuple[str, ...] = tuple(fn.__name__ for fn in TOOL_FUNCTIONS)

#: the helpers' own source, ready to prepend to a solver that runs where the kit cannot be imported
TOOL_SOURCE: str = (
    "# ARC tool helpers (antipersist_lib.arc.tools): standard library only.\n\n\n"
    + "\n\n".join(textwrap.dedent(inspect.getsource(fn)) for fn in TOOL_FUNCTIONS).rstrip()
    + "\n"
)
