"""Pictures of grids, tasks and candidate answers, in the standard ARC palette (matplotlib).

Every function returns a matplotlib Figure (or draws into a given Axes) and never calls
``plt.show``: notebooks display figures themselves, scripts save them. This module knows
nothing of models; it draws grids it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from arc_kit.tasks import Task

# The palette of the ARC testing interface: black, blue, red, green, yellow, grey, magenta,
# orange, sky blue, maroon.
ARC_COLOURS = ("#000000", "#0074D9", "#FF4136", "#2ECC40", "#FFDC00",
               "#AAAAAA", "#F012BE", "#FF851B", "#7FDBFF", "#870C25")
_UNKNOWN = "#FFFFFF"


def _colormap():
    from matplotlib.colors import BoundaryNorm, ListedColormap

    return ListedColormap(ARC_COLOURS), BoundaryNorm(np.arange(-0.5, 10.5, 1), 10)


def draw_grid(grid: np.ndarray | None, ax=None, title: str | None = None, *, lines: bool = True,
              title_color: str = "black"):
    """Draw one grid into ``ax`` (a new figure if None) and return the Axes; None draws a '?'."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(3, 3))
    ax.set_xticks([])
    ax.set_yticks([])
    if grid is None:
        ax.set_facecolor(_UNKNOWN)
        ax.text(0.5, 0.5, "?", ha="center", va="center", fontsize=20, transform=ax.transAxes)
    else:
        grid = np.asarray(grid)
        cmap, norm = _colormap()
        ax.imshow(grid, cmap=cmap, norm=norm, interpolation="nearest")
        if lines:
            height, width = grid.shape
            ax.set_xticks(np.arange(-0.5, width, 1), minor=True)
            ax.set_yticks(np.arange(-0.5, height, 1), minor=True)
            ax.grid(which="minor", color="#555555", linewidth=0.5 if max(grid.shape) < 20 else 0.25)
            ax.tick_params(which="minor", length=0)
    for spine in ax.spines.values():
        spine.set_color("#888888")
    if title:
        ax.set_title(title, fontsize=9, color=title_color)
    return ax


def draw_task(task: Task, answers: Sequence[Sequence[np.ndarray]] | None = None, *, title: str | None = None,
              cell_inches: float = 2.0, show_solutions: bool = True):
    """A task as columns of pairs (input above output), the test pairs last.

    ``answers[test_index]`` adds the given candidate grids below each test pair (attempts, say),
    titled green where they equal the known output and red where they do not.
    """
    import matplotlib.pyplot as plt

    columns = list(task.train) + list(task.test)
    answer_rows = max((len(a) for a in answers), default=0) if answers else 0
    rows = 2 + answer_rows
    figure, axes = plt.subplots(rows, len(columns), figsize=(cell_inches * len(columns), cell_inches * rows),
                                squeeze=False)
    for column, pair in enumerate(columns):
        is_test = column >= len(task.train)
        label = f"test {column - len(task.train)}" if is_test else f"train {column}"
        draw_grid(pair.input, axes[0][column], f"{label} input")
        output = pair.output if (show_solutions or not is_test) else None
        draw_grid(output, axes[1][column], f"{label} output")
        for row in range(answer_rows):
            ax = axes[2 + row][column]
            candidates = answers[column - len(task.train)] if is_test and answers and \
                column - len(task.train) < len(answers) else []
            if row < len(candidates):
                right = pair.output is not None and np.array_equal(np.asarray(candidates[row]), pair.output)
                color = "black" if pair.output is None else ("green" if right else "red")
                draw_grid(candidates[row], ax, f"attempt {row + 1}" + (" ✓" if right else ""), title_color=color)
            else:
                ax.axis("off")
    figure.suptitle(title or task.id)
    figure.tight_layout()
    return figure


def draw_grids(grids: Sequence[np.ndarray], labels: Sequence[str] | None = None, *, title: str | None = None,
               columns: int = 8, cell_inches: float = 1.8, highlight: Sequence[bool] | None = None):
    """A gallery of grids (candidates, augmented views...), with optional labels and green highlights."""
    import matplotlib.pyplot as plt

    count = max(len(grids), 1)
    columns = min(columns, count)
    rows = (count + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(cell_inches * columns, cell_inches * rows + 0.4),
                                squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index >= len(grids):
            ax.axis("off")
            continue
        color = "green" if highlight is not None and highlight[index] else "black"
        draw_grid(grids[index], ax, labels[index] if labels else None, title_color=color)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure
