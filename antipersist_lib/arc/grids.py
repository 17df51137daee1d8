"""ARC grids: the type, validation that names what is wrong, and object records.

A grid is a list of equal-length rows of colors 0-9, 0 being background. Grids arrive from JSON
files and from model-written code, so ``validate_grid`` checks everything a transformation relies
on and says where it broke (``train[3].output: row 2 has 5 cells, expected 6``).

Objects are found by ``tools.find_objects`` (the same code the sandbox runs); ``grid_objects``
wraps its dicts in ``GridObject`` records for kit code that prefers attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

from antipersist_lib.arc.tools import find_objects

Grid = list[list[int]]

BACKGROUND = 0
N_COLORS = 10
#: the largest side the kit accepts (ARC grids are at most 30 x 30)
MAX_SIDE = 30


class GridError(ValueError):
    """A grid is malformed; the message names the grid and the offending row, cell or value."""


def validate_grid(grid: object, where: str = "grid") -> Grid:
    """Return ``grid`` if it is a non-empty rectangular list of rows of ints 0-9, else raise GridError."""
    if not isinstance(grid, list):
        raise GridError(f"{where}: expected a list of rows, got {type(grid).__name__}")
    if not grid:
        raise GridError(f"{where}: has no rows")
    if len(grid) > MAX_SIDE:
        raise GridError(f"{where}: has {len(grid)} rows, at most {MAX_SIDE} allowed")
    width = None
    for r, row in enumerate(grid):
        if not isinstance(row, list):
            raise GridError(f"{where}: row {r} is a {type(row).__name__}, expected a list")
        if width is None:
            width = len(row)
            if width == 0:
                raise GridError(f"{where}: row 0 is empty")
            if width > MAX_SIDE:
                raise GridError(f"{where}: has {width} columns, at most {MAX_SIDE} allowed")
        elif len(row) != width:
            raise GridError(f"{where}: row {r} has {len(row)} cells, expected {width}")
        for c, value in enumerate(row):
            if isinstance(value, bool) or not isinstance(value, int):
                raise GridError(f"{where}: cell ({r}, {c}) is {value!r}, expected an int color 0-9")
            if not 0 <= value < N_COLORS:
                raise GridError(f"{where}: cell ({r}, {c}) is {value}, expected a color 0-9")
    return grid


def copy_grid(grid: Grid) -> Grid:
    """A deep copy, so a transformation cannot alter the grid it was given."""
    return [list(row) for row in grid]


def blank_grid(height: int, width: int) -> Grid:
    return [[BACKGROUND] * width for _ in range(height)]


def grid_shape(grid: Grid) -> tuple[int, int]:
    """(height, width)."""
    return len(grid), len(grid[0]) if grid else 0


def grids_equal(a: Grid, b: Grid) -> bool:
    """Cell-for-cell equality (shape included); what the grader means by a correct output."""
    return len(a) == len(b) and all(list(ra) == list(rb) for ra, rb in zip(a, b))


@dataclass(frozen=True)
class GridObject:
    """One single-color 4-connected object: its color and sorted (row, col) cells."""

    color: int
    cells: tuple[tuple[int, int], ...]

    @property
    def size(self) -> int:
        return len(self.cells)

    @property
    def bbox(self) -> tuple[int, int, int, int]:
        """(top, left, bottom, right), inclusive."""
        rows = [r for r, _ in self.cells]
        cols = [c for _, c in self.cells]
        return min(rows), min(cols), max(rows), max(cols)

    @property
    def shape(self) -> tuple[tuple[int, int], ...]:
        """Cells relative to the bounding box's top-left corner: equal for translated copies."""
        top, left, _, _ = self.bbox
        return tuple((r - top, c - left) for r, c in self.cells)

    @classmethod
    def from_tool(cls, obj: dict) -> GridObject:
        return cls(color=int(obj["color"]), cells=tuple(sorted((int(r), int(c)) for r, c in obj["cells"])))


def grid_objects(grid: Grid) -> list[GridObject]:
    """The objects of a validated grid, in the order ``find_objects`` reports them."""
    return [GridObject.from_tool(obj) for obj in find_objects(validate_grid(grid))]
