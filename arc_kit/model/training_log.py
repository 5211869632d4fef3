"""A training run's loss log: ``training_log.csv``, one row per logged step, and the loss curve drawn from it.

The log is append-only with a fixed header (``LOG_COLUMNS``); a resumed run cuts the rows past its
checkpoint and appends from there, so no step is written twice. This module knows the log's
columns and files; it knows nothing of models, optimizers or how a step is trained (``training``).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path

from arc_kit.data.plotting import draw_loss_curve
from arc_kit.outputs import appending, remove_entry, replacing

LOG_COLUMNS = ("step", "loss", "learning_rate", "embedding_learning_rate", "tokens", "tokens_per_second",
               "elapsed_seconds")


def start_log(path: Path) -> None:
    """The log's header, where ``path`` holds no regular file yet (written through ``outputs``: never through a
    link): the rows go after it, appended, or after those a resumed run kept (``cut_log``)."""
    if not (path.is_file() and not path.is_symlink()):
        with replacing(path, newline="") as handle:
            csv.writer(handle).writerow(LOG_COLUMNS)


def cut_log(path: Path, step: int) -> None:
    """Drop the rows after ``step`` (a resumed run redoes them); at step 0 the file goes entirely. A log that
    is no regular file of the run's (a link) goes too: the run starts its own."""
    if not (path.exists() or path.is_symlink()):
        return
    if step == 0 or path.is_symlink() or not path.is_file():
        remove_entry(path)
        return
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    kept = [row for row in rows[1:] if row and row[0].isdigit() and int(row[0]) <= step]
    with replacing(path, newline="") as handle:
        csv.writer(handle).writerows([rows[0] if rows else list(LOG_COLUMNS), *kept])


def append_row(path: Path, step: int, loss: float, rates: Mapping[str | None, float], tokens: int,
               window_seconds: float, elapsed_seconds: float) -> None:
    """One row of ``LOG_COLUMNS`` appended: ``rates`` are the learning rates by parameter group name, ``tokens``
    those of the ``window_seconds`` since the last row, ``elapsed_seconds`` the run's time so far."""
    row = {"step": step, "loss": f"{loss:.5f}", "learning_rate": f"{rates.get('weights', rates.get('embeddings')):.3e}",
           "embedding_learning_rate": f"{rates.get('embeddings', 0.0):.3e}",
           "tokens": tokens, "tokens_per_second": f"{tokens / max(window_seconds, 1e-9):.1f}",
           "elapsed_seconds": f"{elapsed_seconds:.1f}"}
    with appending(path, newline="") as handle:
        csv.writer(handle).writerow([row[column] for column in LOG_COLUMNS])


def plot_loss_curve(log_path: Path, out_path: Path) -> None:
    """Save ``plotting.draw_loss_curve`` of training_log.csv as a PNG (nothing when the log is empty)."""
    import matplotlib.pyplot as plt
    import pandas as pd

    log = pd.read_csv(log_path)
    if log.empty:
        return
    figure = draw_loss_curve(log)
    with replacing(out_path, binary=True) as handle:  # never through a link
        figure.savefig(handle, dpi=100, format="png")
    plt.close(figure)
