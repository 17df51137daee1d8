"""The six selection families of the paper's Table 5: a rule that picks objects, and scenes for it.

Each ``Family`` pairs a selector (which objects the skill is applied to; its keyword arguments are the task's
hidden rule parameters) with a seeded scene generator whose grids make that selection well defined. Selectors use
only builtins and ``find_objects``, so the ground-truth solution embeds their source (``Family.selector_source``)
and the sandbox runs the same code the kit imports.

The kit's scene choices (grid and object sizes, spacing, reserved colours) are in docs/faulty-memories.md, "The
ARC code's own readings, module by module" (Tasks).
"""

from __future__ import annotations

import inspect
import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from antipersist_lib.arc.grids import Grid, blank_grid
from antipersist_lib.arc.tools import find_objects

Shape = tuple[tuple[int, int], ...]
Rect = tuple[int, int, int, int]

# -- selectors (self-contained: builtins and find_objects only; their source goes into solutions) ------


def select_by_color(grid, target_color):
    """Objects whose color is target_color."""
    return [obj for obj in find_objects(grid) if obj["color"] == target_color]


def select_largest(grid):
    """The object(s) with the most cells; every object tied for the largest is selected."""
    objects = find_objects(grid)
    if not objects:
        return []
    largest = max(obj["size"] for obj in objects)
    return [obj for obj in objects if obj["size"] == largest]


def select_if_marker(grid, trigger_color):
    """All objects except the upper-left marker cell when that cell has trigger_color; otherwise none."""
    if grid[0][0] != trigger_color:
        return []
    return [obj for obj in find_objects(grid) if (0, 0) not in obj["cells"]]


def select_shape_mode(grid):
    """Objects whose shape (cells relative to the bounding box, color ignored) is the most frequent one."""
    groups = {}
    for obj in find_objects(grid):
        top, left = obj["bbox"][0], obj["bbox"][1]
        signature = tuple(sorted((r - top, c - left) for r, c in obj["cells"]))
        groups.setdefault(signature, []).append(obj)
    if not groups:
        return []
    most = max(len(members) for members in groups.values())
    return [obj for members in groups.values() if len(members) == most for obj in members]


def select_inside_frame(grid):
    """Objects strictly inside the bounding box of the frame, taken to be the largest object."""
    objects = find_objects(grid)
    if not objects:
        return []
    frame = max(objects, key=lambda obj: obj["size"])
    top, left, bottom, right = frame["bbox"]
    inside = []
    for obj in objects:
        o_top, o_left, o_bottom, o_right = obj["bbox"]
        if obj is not frame and o_top > top and o_left > left and o_bottom < bottom and o_right < right:
            inside.append(obj)
    return inside


def select_panel(grid, side):
    """Objects in the 'left' or 'right' panel of a grid split by a full-height one-color column."""
    height, width = len(grid), len(grid[0])
    separator = None
    for col in range(width):
        color = grid[0][col]
        if color != 0 and all(grid[row][col] == color for row in range(height)):
            separator = col
            break
    if separator is None:
        return []
    chosen = []
    for obj in find_objects(grid):
        o_left, o_right = obj["bbox"][1], obj["bbox"][3]
        if (side == "left" and o_right < separator) or (side == "right" and o_left > separator):
            chosen.append(obj)
    return chosen


# -- colors, shapes and placement -------------------------------------------------------------------


class SceneError(RuntimeError):
    """A scene could not be drawn (no room for an object); the generator redraws it."""


class ColorPool:
    """The task's colors 1-9 in a seeded order; ``take`` reserves one for a role (rule or skill)."""

    def __init__(self, rng: random.Random) -> None:
        self._free = list(range(1, 10))
        rng.shuffle(self._free)

    def take(self) -> int:
        if not self._free:
            raise SceneError("no color left to reserve")
        return self._free.pop()

    @property
    def palette(self) -> tuple[int, ...]:
        """Colors nobody reserved: what ordinary objects are painted with."""
        return tuple(sorted(self._free))


def normalize(cells) -> Shape:
    """Cells shifted so the bounding box starts at (0, 0), sorted: the shape signature."""
    top = min(r for r, _ in cells)
    left = min(c for _, c in cells)
    return tuple(sorted((r - top, c - left) for r, c in cells))


def mirrored(shape: Shape) -> Shape:
    right = max(c for _, c in shape)
    return normalize([(r, right - c) for r, c in shape])


#: shape styles a skill can ask for: any blob, blobs that change under a mirror, solid rectangles
STYLES = ("blob", "asymmetric", "solid")
#: solid rectangles have an interior from 3 x 3 up, so hollow always changes them
SOLID_DIMS = ((3, 3), (3, 4), (4, 3), (4, 4))
BLOB_BOX = 4


def random_blob(rng: random.Random, size: int, box: int = BLOB_BOX) -> Shape:
    """A 4-connected shape of ``size`` cells grown cell by cell inside a box x box square."""
    if not 1 <= size <= box * box:
        raise SceneError(f"a blob of {size} cells does not fit a {box}x{box} box")
    cells = {(rng.randrange(box), rng.randrange(box))}
    while len(cells) < size:
        r, c = rng.choice(sorted(cells))
        dr, dc = rng.choice(((1, 0), (-1, 0), (0, 1), (0, -1)))
        if 0 <= r + dr < box and 0 <= c + dc < box:
            cells.add((r + dr, c + dc))
    return normalize(cells)


class Canvas:
    """A grid being drawn, with placement that keeps objects ``gap`` cells apart (diagonals included)."""

    def __init__(self, height: int, width: int) -> None:
        self.height, self.width = height, width
        self.grid: Grid = blank_grid(height, width)

    def paint(self, cells, color: int) -> None:
        for r, c in cells:
            self.grid[r][c] = color

    def is_free(self, cells, gap: int) -> bool:
        for r, c in cells:
            for nr in range(max(0, r - gap), min(self.height, r + gap + 1)):
                for nc in range(max(0, c - gap), min(self.width, c + gap + 1)):
                    if self.grid[nr][nc] != 0:
                        return False
        return True

    def place(
        self,
        rng: random.Random,
        shape: Shape,
        color: int,
        region: Rect,
        gap: int,
        avoid: Rect | None = None,
        tries: int = 40,
    ) -> Rect:
        """Paint ``shape`` at a random free spot inside ``region`` (and off ``avoid``); return its bbox."""
        top, left, bottom, right = region
        height = max(r for r, _ in shape) + 1
        width = max(c for _, c in shape) + 1
        if bottom - top + 1 < height or right - left + 1 < width:
            raise SceneError(f"a {height}x{width} shape does not fit region {region}")
        for _ in range(tries):
            dr = rng.randint(top, bottom - height + 1)
            dc = rng.randint(left, right - width + 1)
            box = (dr, dc, dr + height - 1, dc + width - 1)
            if avoid is not None and _overlap(box, avoid):
                continue
            cells = [(r + dr, c + dc) for r, c in shape]
            if self.is_free(cells, gap):
                self.paint(cells, color)
                return box
        raise SceneError(f"no free spot for a {height}x{width} shape in region {region}")


def _overlap(a: Rect, b: Rect) -> bool:
    return not (a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1])


@dataclass
class SceneContext:
    """What a scene generator may use: the task's rng, object colors, and the skill's needs.

    ``style`` picks the shapes the skill needs to visibly act on (asymmetric for flip_horizontal,
    solid rectangles for hollow); ``margin`` keeps objects off the region's edges (room for the
    translate offset or the border ring); ``gap`` is the minimum spacing between objects.
    """

    rng: random.Random
    palette: tuple[int, ...]
    style: str = "blob"
    margin: int = 0
    gap: int = 1

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"unknown shape style {self.style!r}; expected one of {STYLES}")
        if not self.palette:
            raise ValueError("SceneContext needs at least one object color")

    def color(self) -> int:
        return self.rng.choice(self.palette)

    def shape(self, size: int | None = None) -> Shape:
        """A random shape in the skill's style, of exactly ``size`` cells when given."""
        rng = self.rng
        if self.style == "solid":
            dims = [d for d in SOLID_DIMS if size is None or d[0] * d[1] == size]
            if not dims:
                raise SceneError(f"no solid rectangle has {size} cells")
            h, w = rng.choice(dims)
            return tuple((r, c) for r in range(h) for c in range(w))
        if self.style == "blob":
            return random_blob(rng, size if size is not None else rng.randint(2, 8))
        for _ in range(50):  # asymmetric: redraw until mirroring changes the shape
            shape = random_blob(rng, size if size is not None else rng.randint(3, 8))
            if mirrored(shape) != shape:
                return shape
        raise SceneError(f"no asymmetric shape of {size} cells found")

    def canvas(self, height: tuple[int, int], width: tuple[int, int]) -> Canvas:
        return Canvas(self.rng.randint(*height), self.rng.randint(*width))

    def inset(self, region: Rect) -> Rect:
        """``region`` shrunk by the margin on every side."""
        top, left, bottom, right = region
        m = self.margin
        return top + m, left + m, bottom - m, right - m

    def scatter(self, canvas: Canvas, items: list[tuple[Shape, int]], region: Rect, avoid: Rect | None = None):
        for shape, color in items:
            canvas.place(self.rng, shape, color, region, self.gap, avoid=avoid)


# -- the registry ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyParams:
    """A task's hidden family parameters: ``rule`` are the selector's keyword arguments (constants in
    the solution); ``scene`` only shapes the inputs (frame color, decoy marker colors, ...)."""

    rule: dict[str, Any] = field(default_factory=dict)
    scene: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """One selection family: its selector, how hidden parameters are drawn, and its scenes.

    ``schedule(rng, n)`` gives a per-example variant (key_marker: whether the marker triggers);
    ``selects_subset`` is False for all-or-none families, where an empty selection is an answer.
    """

    strategy_id: str
    selects_by: str
    definition: str
    selector: Callable[..., list[dict]]
    draw_params: Callable[[random.Random, ColorPool], FamilyParams]
    make_scene: Callable[[SceneContext, FamilyParams, Any], Grid]
    schedule: Callable[[random.Random, int], list[Any]] = lambda rng, n: [None] * n
    selects_subset: bool = True

    @property
    def selector_source(self) -> str:
        return textwrap.dedent(inspect.getsource(self.selector))

    def select(self, grid: Grid, rule: dict[str, Any]) -> list[dict]:
        return self.selector(grid, **rule)


def _full(canvas: Canvas) -> Rect:
    return 0, 0, canvas.height - 1, canvas.width - 1


def _colored(ctx: SceneContext, shapes: list[Shape]) -> list[tuple[Shape, int]]:
    return [(shape, ctx.color()) for shape in shapes]


def _params_color(rng: random.Random, colors: ColorPool) -> FamilyParams:
    return FamilyParams(rule={"target_color": colors.take()})


def _scene_color(ctx: SceneContext, params: FamilyParams, variant: Any) -> Grid:
    target = params.rule["target_color"]
    canvas = ctx.canvas((10, 14), (10, 14))
    items = [(ctx.shape(), target) for _ in range(ctx.rng.randint(1, 3))]
    items += _colored(ctx, [ctx.shape() for _ in range(ctx.rng.randint(1, 4))])
    ctx.rng.shuffle(items)
    ctx.scatter(canvas, items, ctx.inset(_full(canvas)))
    return canvas.grid


def _scene_largest(ctx: SceneContext, params: FamilyParams, variant: Any) -> Grid:
    canvas = ctx.canvas((10, 14), (10, 14))
    shapes = [ctx.shape() for _ in range(ctx.rng.randint(3, 5))]
    if ctx.rng.random() < 0.35:  # a tie for the largest (all tied objects are selected)
        shapes.append(ctx.shape(size=max(len(s) for s in shapes)))
    ctx.rng.shuffle(shapes)
    ctx.scatter(canvas, _colored(ctx, shapes), ctx.inset(_full(canvas)))
    return canvas.grid


def _params_marker(rng: random.Random, colors: ColorPool) -> FamilyParams:
    return FamilyParams(rule={"trigger_color": colors.take()}, scene={"decoy_colors": [colors.take(), colors.take()]})


def _balanced_flags(rng: random.Random, n: int) -> list[bool]:
    """About half True, and both values present whenever n >= 2 (so the gate is observable)."""
    if n < 2:
        return [rng.random() < 0.5 for _ in range(n)]
    k = min(n - 1, max(1, n // 2 + rng.choice((-1, 0, 1))))
    flags = [True] * k + [False] * (n - k)
    rng.shuffle(flags)
    return flags


def _scene_marker(ctx: SceneContext, params: FamilyParams, triggered: Any) -> Grid:
    canvas = ctx.canvas((10, 14), (10, 14))
    marker = params.rule["trigger_color"] if triggered else ctx.rng.choice(params.scene["decoy_colors"])
    canvas.paint([(0, 0)], marker)
    shapes = [ctx.shape() for _ in range(ctx.rng.randint(2, 5))]
    ctx.scatter(canvas, _colored(ctx, shapes), ctx.inset(_full(canvas)))
    return canvas.grid


def _scene_shape(ctx: SceneContext, params: FamilyParams, variant: Any) -> Grid:
    canvas = ctx.canvas((12, 16), (12, 16))
    mode = ctx.shape()
    count = ctx.rng.randint(2, 4)
    shapes = [mode] * count
    used = {mode}
    for _ in range(ctx.rng.randint(1, 3)):
        other = next((s for s in (ctx.shape() for _ in range(20)) if s not in used), None)
        if other is None:
            break
        used.add(other)
        shapes += [other] * ctx.rng.randint(1, count - 1)
    ctx.rng.shuffle(shapes)
    ctx.scatter(canvas, _colored(ctx, shapes), ctx.inset(_full(canvas)))
    return canvas.grid


def _params_frame(rng: random.Random, colors: ColorPool) -> FamilyParams:
    return FamilyParams(scene={"frame_color": colors.take()})


def _scene_frame(ctx: SceneContext, params: FamilyParams, variant: Any) -> Grid:
    rng = ctx.rng
    room = 2 * (ctx.gap - 1)  # wider spacing (border rings) needs a larger frame and grid
    canvas = ctx.canvas((14 + room, 16 + room), (14 + room, 16 + room))
    fh, fw = rng.randint(8 + room, 10 + room), rng.randint(8 + room, 10 + room)
    top, left = rng.randint(0, canvas.height - fh), rng.randint(0, canvas.width - fw)
    bottom, right = top + fh - 1, left + fw - 1
    ring = [
        (r, c)
        for r in range(top, bottom + 1)
        for c in range(left, right + 1)
        if r in (top, bottom) or c in (left, right)
    ]
    canvas.paint(ring, params.scene["frame_color"])
    inside = [ctx.shape() for _ in range(rng.randint(1, 2))]
    ctx.scatter(canvas, _colored(ctx, inside), (top + 1, left + 1, bottom - 1, right - 1))
    outside = [ctx.shape() for _ in range(rng.randint(1, 3))]
    ctx.scatter(canvas, _colored(ctx, outside), ctx.inset(_full(canvas)), avoid=(top, left, bottom, right))
    return canvas.grid


def _params_panel(rng: random.Random, colors: ColorPool) -> FamilyParams:
    return FamilyParams(rule={"side": rng.choice(("left", "right"))}, scene={"separator_color": colors.take()})


def _scene_panel(ctx: SceneContext, params: FamilyParams, variant: Any) -> Grid:
    rng = ctx.rng
    panel = rng.randint(7, 9)
    canvas = Canvas(rng.randint(9, 13), 2 * panel + 1)
    canvas.paint([(r, panel) for r in range(canvas.height)], params.scene["separator_color"])
    for region in ((0, 0, canvas.height - 1, panel - 1), (0, panel + 1, canvas.height - 1, canvas.width - 1)):
        shapes = [ctx.shape() for _ in range(rng.randint(1, 3))]
        ctx.scatter(canvas, _colored(ctx, shapes), ctx.inset(region))
    return canvas.grid


_FAMILY_LIST = (
    Family(
        "detect_color_property",
        "intrinsic (color)",
        "objects of a target color (inferred from the examples)",
        select_by_color,
        _params_color,
        _scene_color,
    ),
    Family(
        "detect_largest_objects_select",
        "intrinsic (size extremum)",
        "the largest object(s) by cell count (ties all selected)",
        select_largest,
        lambda rng, colors: FamilyParams(),
        _scene_largest,
    ),
    Family(
        "detect_key_marker_rule",
        "global conditional cue",
        "all-or-none global selection gated by the upper-left cell's color",
        select_if_marker,
        _params_marker,
        _scene_marker,
        schedule=_balanced_flags,
        selects_subset=False,
    ),
    Family(
        "group_by_shape_then_select",
        "cross-object relation",
        "objects in the shape-frequency mode group",
        select_shape_mode,
        lambda rng, colors: FamilyParams(),
        _scene_shape,
    ),
    Family(
        "detect_inside_frame_relation",
        "spatial containment",
        "objects strictly inside a hollow frame",
        select_inside_frame,
        _params_frame,
        _scene_frame,
    ),
    Family(
        "compose_horizontal",
        "cross-grid structure",
        "the left or right sub-scene of a two-panel input",
        select_panel,
        _params_panel,
        _scene_panel,
    ),
)

#: strategy_id (paper Table 5, in the table's order) -> Family
FAMILIES: dict[str, Family] = {family.strategy_id: family for family in _FAMILY_LIST}
FAMILY_IDS: tuple[str, ...] = tuple(FAMILIES)
