"""Pictures of grids, tasks and candidate answers, in the standard ARC palette (matplotlib).

Every function returns a matplotlib Figure (or draws into a given Axes) and never calls
``plt.show``: notebooks display figures themselves, scripts save them. This module knows
nothing of models; it draws grids it is given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.tasks import Task
from arc_kit.names import file_name, shown
from arc_kit.outputs import claim_file, replacing

PICTURE_SOFTWARE = "arc-kit show"  # in every picture ``save_task_picture`` writes (PNG text): how it knows its own

# The palette of the ARC testing interface: black, blue, red, green, yellow, grey, magenta,
# orange, sky blue, maroon.
ARC_COLOURS = ("#000000", "#0074D9", "#FF4136", "#2ECC40", "#FFDC00",
               "#AAAAAA", "#F012BE", "#FF851B", "#7FDBFF", "#870C25")
_UNKNOWN = "#FFFFFF"


def draw_grid(grid: np.ndarray | None, ax=None, title: str | None = None, *, title_color: str = "black"):
    """Draw one grid into ``ax`` (a new figure if None) and return the Axes; None draws a '?'."""
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
                  interpolation="nearest")
        height, width = grid.shape
        ax.set_xticks(np.arange(-0.5, width, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, height, 1), minor=True)
        ax.grid(which="minor", color="#555555", linewidth=0.5 if max(grid.shape) < 20 else 0.25)
        ax.tick_params(which="minor", length=0)
    ax.spines[:].set_color("#888888")
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
    answers = answers or []
    answer_rows = max((len(a) for a in answers), default=0)
    rows = 2 + answer_rows
    figure, axes = plt.subplots(rows, len(columns), figsize=(cell_inches * len(columns), cell_inches * rows),
                                squeeze=False)
    for column, pair in enumerate(columns):
        test_index = column - len(task.train)  # negative for a train pair
        label = f"test {test_index}" if test_index >= 0 else f"train {column}"
        draw_grid(pair.input, axes[0][column], f"{label} input")
        draw_grid(pair.output if show_solutions or test_index < 0 else None, axes[1][column], f"{label} output")
        candidates = answers[test_index] if 0 <= test_index < len(answers) else []
        for row in range(answer_rows):
            ax = axes[2 + row][column]
            if row < len(candidates):
                right = pair.output is not None and np.array_equal(np.asarray(candidates[row]), pair.output)
                color = "black" if pair.output is None else ("green" if right else "red")
                draw_grid(candidates[row], ax, f"attempt {row + 1}" + (" ✓" if right else ""), title_color=color)
            else:
                ax.axis("off")
    figure.suptitle(title or shown(task.id), parse_math=False)  # an id is text, never TeX (``$`` in it)
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


def draw_rank_improvement(ranks, clip: int = 25):
    """The right answer's rank by generation probability against its rank by the product of experts.

    ``ranks`` is ``analysis.rank_table``'s frame; points under the diagonal are tasks PoE helped.
    """
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(4.5, 4.5))
    ranks = ranks.dropna(subset=["rank_poe"])
    before = np.minimum(ranks["rank_generation"].to_numpy(float), clip)
    after = np.minimum(ranks["rank_poe"].to_numpy(float), clip)
    jitter = np.random.default_rng(0).uniform(-0.15, 0.15, size=(2, len(before)))  # fixed: a drawing, not data
    ax.scatter(before + jitter[0], after + jitter[1], alpha=0.6, s=18)
    ax.plot([1, clip], [1, clip], color="grey", linewidth=1, linestyle="--")
    ax.set_xlabel(f"rank by generation probability (clipped at {clip})")
    ax.set_ylabel("rank by product of experts")
    better, worse = int((after < before).sum()), int((after > before).sum())
    ax.set_title(f"{len(before)} right answers found: PoE better {better}, worse {worse}", fontsize=9)
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


def draw_nll_heatmap(nlls, augmentation_keys: Sequence[str], labels: Sequence[str] | None = None,
                     title: str | None = None):
    """Candidates x scoring augmentations, coloured by NLL (darker is more probable)."""
    import matplotlib.pyplot as plt

    nlls = np.asarray(nlls, dtype=float)
    figure, ax = plt.subplots(figsize=(max(4, 0.45 * nlls.shape[1] + 2), max(2, 0.4 * nlls.shape[0] + 1.2)))
    image = ax.imshow(nlls, cmap="viridis_r", aspect="auto")
    ax.set_xticks(range(len(augmentation_keys)), [key[:2] for key in augmentation_keys], fontsize=7)
    ax.set_yticks(range(nlls.shape[0]), labels or [f"candidate {i}" for i in range(nlls.shape[0])], fontsize=8)
    ax.set_xlabel("scoring augmentation (symmetry)")
    figure.colorbar(image, ax=ax, label="NLL (nats)")
    ax.set_title(title or "per-augmentation NLL of each candidate", fontsize=9)
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
