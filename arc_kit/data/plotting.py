"""Figures with matplotlib: a task as a PNG file (``arc-kit show``), the run's curves, a training loss.

Every function returns a matplotlib Figure (or draws into a given Axes) and never calls
``plt.show``: notebooks display figures themselves, scripts save them. Grids in a notebook or a
report are drawn as HTML (``pictures``: tasks, augmentations and records show themselves in
Jupyter); here a task is drawn for a picture file, in the same palette (``pictures.ARC_COLOURS``).
This module knows nothing of models; it draws what it is given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.pictures import ARC_COLOURS, size_text
from arc_kit.data.tasks import Task
from arc_kit.names import file_name, shown
from arc_kit.outputs import claim_file, replacing

PICTURE_SOFTWARE = "arc-kit show"  # in every picture ``save_task_picture`` writes (PNG text): how it knows its own

_UNKNOWN = "#FFFFFF"


def draw_grid(grid: np.ndarray | None, ax=None, title: str | None = None, *, title_color: str = "black"):
    """Draw one grid into ``ax`` (a new figure if None) and return the Axes; None draws a '?'. A grid's title ends
    with its size (height x width)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import BoundaryNorm, ListedColormap

    if ax is None:
        _, ax = plt.subplots(figsize=(3, 3))
    ax.set_xticks([])
    ax.set_yticks([])
    if grid is None:
        ax.set_facecolor(_UNKNOWN)
        ax.text(0.5, 0.5, "?", ha="center", va="center", fontsize=20, transform=ax.transAxes)
    else:
        grid = np.asarray(grid)
        ax.imshow(grid, cmap=ListedColormap(ARC_COLOURS), norm=BoundaryNorm(np.arange(-0.5, 10.5, 1), 10),
                  interpolation="nearest", aspect="equal")
        height, width = grid.shape
        ax.set_xticks(np.arange(-0.5, width, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, height, 1), minor=True)
        ax.grid(which="minor", color="#555555", linewidth=0.5 if max(grid.shape) < 20 else 0.25)
        ax.tick_params(which="minor", length=0)
        title = f"{title} {size_text(grid)}" if title else size_text(grid)
    ax.spines[:].set_color("#888888")
    if title:
        ax.set_title(title, fontsize=8, color=title_color)
    return ax


TITLE_INCHES, GAP_INCHES = 0.3, 0.2  # room above a panel for its title, and between panels


def draw_task(task: Task, answers: Sequence[Sequence[np.ndarray]] | None = None, *, title: str | None = None,
              largest_inches: float = 2.0, show_solutions: bool = True):
    """A task as columns of pairs (input above output), the test pairs last, every cell the same size.

    A cell is ``largest_inches`` over the task's longest side (at most 0.3 inches), so a 2x2 input is drawn
    smaller than its 6x6 output. ``answers[test_index]`` adds the given grids below each test pair
    (attempts, say), titled green where they equal the known output and red where they do not.
    """
    import matplotlib.pyplot as plt

    columns = list(task.train) + list(task.test)
    answers = answers or []
    answer_rows = max((len(a) for a in answers), default=0)
    slots = []  # per column, per row: (grid or None, title, colour), or None for an empty slot
    for column, pair in enumerate(columns):
        test_index = column - len(task.train)  # negative for a train pair
        label = f"test {test_index}" if test_index >= 0 else f"train {column}"
        hidden = not show_solutions and test_index >= 0
        cells = [(pair.input, f"{label} input", "black"), (None if hidden else pair.output, f"{label} output", "black")]
        candidates = answers[test_index] if 0 <= test_index < len(answers) else []
        for row in range(answer_rows):
            if row < len(candidates):
                right = pair.output is not None and np.array_equal(np.asarray(candidates[row]), pair.output)
                colour = "black" if pair.output is None else ("green" if right else "red")
                cells.append((np.asarray(candidates[row]), f"attempt {row + 1}" + (" ✓" if right else ""), colour))
            else:
                cells.append(None)
        slots.append(cells)
    shapes = [np.shape(cell[0]) for cells in slots for cell in cells if cell is not None and cell[0] is not None]
    cell = min(0.3, largest_inches / max((max(shape) for shape in shapes), default=1))
    size = lambda slot, axis: (np.shape(slot[0])[axis] if slot[0] is not None else 3) * cell  # noqa: E731
    widths = [max(1.0, *(size(slot, 1) for slot in cells if slot is not None)) for cells in slots]
    heights = [max(size(cells[row], 0) for cells in slots if cells[row] is not None) for row in range(2 + answer_rows)]
    figure_width = sum(widths) + GAP_INCHES * (len(widths) + 1)
    figure_height = sum(heights) + (TITLE_INCHES + GAP_INCHES) * len(heights) + 0.5  # 0.5: the figure's title
    figure = plt.figure(figsize=(figure_width, figure_height))
    top = figure_height - 0.5
    for row, height in enumerate(heights):
        top -= TITLE_INCHES
        left = GAP_INCHES
        for column, cells in enumerate(slots):
            slot = cells[row]
            panel_width, panel_height = (size(slot, 1), size(slot, 0)) if slot is not None else (1.0, height)
            ax = figure.add_axes(((left + (widths[column] - panel_width) / 2) / figure_width,
                                  (top - panel_height) / figure_height, panel_width / figure_width,
                                  panel_height / figure_height))
            if slot is None:
                ax.axis("off")
            else:
                draw_grid(slot[0], ax, slot[1], title_color=slot[2])
            left += widths[column] + GAP_INCHES
        top -= height + GAP_INCHES
    figure.suptitle(title or shown(task.id), parse_math=False)  # an id is text, never TeX (``$`` in it)
    return figure


def draw_rank_improvement(ranks, clip: int = 25):
    """The right answer's rank by generation probability against its rank by the product of experts.

    ``ranks`` is ``analysis.rank_table``'s frame; points under the diagonal are test outputs PoE helped. Each dot
    is labelled with its task (and test input, where a task has several); dots that fall on one place share a label.
    """
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(5, 5))
    ranks = ranks.dropna(subset=["rank_poe"])
    before = np.minimum(ranks["rank_generation"].to_numpy(float), clip)
    after = np.minimum(ranks["rank_poe"].to_numpy(float), clip)
    ax.scatter(before, after, alpha=0.6, s=24)
    several = ranks.groupby("task_id")["test_index"].transform("count").to_numpy() > 1
    names: dict[tuple[float, float], list[str]] = {}
    for x, y, task_id, test_index, many in zip(before, after, ranks["task_id"], ranks["test_index"], several):
        names.setdefault((x, y), []).append(shown(task_id) + (f"/{test_index}" if many else ""))
    for (x, y), labels in names.items():
        ax.annotate(", ".join(labels), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.plot([1, clip], [1, clip], color="grey", linewidth=1, linestyle="--")
    ax.set_xlabel(f"rank by generation probability (clipped at {clip})")
    ax.set_ylabel("rank by product of experts")
    better, worse = int((after < before).sum()), int((after > before).sum())
    ax.set_title(f"{len(before)} test outputs with the right answer among the candidates, at {len(names)} places: "
                 f"PoE better {better}, worse {worse}", fontsize=8, wrap=True)
    figure.tight_layout()
    return figure


# (column, label, marker, line style) of each line of a threshold curve; the first two set the y range
TASK_CURVE_LINES = (("found", "right answer among the candidates", "o", "-"),
                    ("selected", "right answer in the two attempts (PoE)", "o", "-"))


def draw_threshold_curve(curve, run_threshold: float | None = None, *, lines=TASK_CURVE_LINES,
                         ylabel: str = "share of test outputs", title: str = "",
                         threshold_label: str | None = "the run's threshold", legend_size: int = 8):
    """Shares found and selected against the DFS threshold (``analysis.threshold_curve``), one line each."""
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(5.5, 3.5))
    for column, label, marker, style in lines:
        ax.plot(curve["threshold"], curve[column], marker=marker, linestyle=style, label=label)
    if run_threshold is not None:
        ax.axvline(run_threshold, color="grey", linestyle=":", linewidth=1, label=threshold_label)
    ax.set_xscale("log")
    ax.set_xlabel("DFS threshold T (minimum probability)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(0.05, float(curve[[lines[0][0], lines[1][0]]].to_numpy().max()) * 1.15))
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=legend_size)
    figure.tight_layout()
    return figure


def draw_loss_curve(log):
    """Loss and learning rate against the step, from ``training_log.csv`` (a path or a frame)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    log = pd.read_csv(log) if not isinstance(log, pd.DataFrame) else log
    figure, loss_axis = plt.subplots(figsize=(7, 3.5))
    loss_axis.plot(log["step"], log["loss"], color="tab:blue")
    loss_axis.set_xlabel("optimizer step")
    loss_axis.set_ylabel("loss (nats per output token)", color="tab:blue")
    rate_axis = loss_axis.twinx()
    rate_axis.plot(log["step"], log["learning_rate"], color="tab:orange", alpha=0.6)
    rate_axis.set_ylabel("learning rate", color="tab:orange")
    figure.tight_layout()
    return figure


def save_task_picture(task: Task, out: str | os.PathLike | None = None, augmentation_key: str | None = None,
                      dpi: int = 100) -> str:
    """Draw ``task`` (under the augmentation with that key, if given) to a PNG file; its path.

    The default file name is the task id's ``names.file_name`` with ``.png``, in the working folder
    (``<task id>.png`` for an ordinary id; an id such as ``../x`` never names a file elsewhere); an ``out``
    that is a folder gets that name inside it, and one without a suffix gets ``.png``. The file is new, or
    a picture this function wrote (``outputs.claim_file``): any other file is never replaced. Uses
    matplotlib's file backend, so it works without a screen.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    title = shown(task.id)
    if augmentation_key:
        augmentation = Augmentation.from_key(augmentation_key)
        task, title = augmentation.apply(task), f"{shown(task.id)} under {augmentation.key}"
    out = Path(out or ".")
    if out.is_dir():
        out = out / file_name(task.id, ".png")
    elif not out.suffix:
        out = out.with_name(out.name + ".png")
    claim_file(out, "show", own=is_task_picture)
    figure = draw_task(task, title=title)
    try:
        with replacing(out, binary=True) as handle:  # written aside, renamed into place: never through a link
            figure.savefig(handle, dpi=dpi, format="png", metadata={"Software": PICTURE_SOFTWARE})
    finally:
        plt.close(figure)
    return str(out)


def is_task_picture(path: Path) -> bool:
    """True when ``path`` is a PNG that ``save_task_picture`` wrote: its text names ``PICTURE_SOFTWARE`` (read by
    Pillow, matplotlib's own reader, from the chunks before the pixels)."""
    from PIL import Image

    try:
        with Image.open(path, formats=["PNG"]) as image:
            return image.info.get("Software") == PICTURE_SOFTWARE
    except Exception:  # whatever Pillow raises on a file that is no PNG, a damaged one or a bomb: not the kit's
        return False
