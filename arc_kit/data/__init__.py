"""Tasks as data: grids, tasks and task sets, loading the public sets, JSON, augmentations, the submission.

The bottom floor of the method: numpy only (matplotlib in ``plotting``, never torch). It may import
``arc_kit.settings`` and ``arc_kit.names``; nothing here knows of text, models or runs.
``difficulty`` recomputes RE-ARC's difficulty, ``parts`` packs big files into checked parts; ``pictures`` draws
grids, tasks and augmentations as HTML (what Jupyter shows), ``plotting`` figures with matplotlib.
"""

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.datasets import load_challenges, load_dataset, load_folder, load_re_arc, load_tasks
from arc_kit.data.submission import build_submission, load_submission, score_submission, write_submission
from arc_kit.data.tasks import InvalidDataError, Pair, Task, TaskSet

__all__ = [
    "Augmentation", "InvalidDataError", "Pair", "Task", "TaskSet", "build_submission", "load_challenges",
    "load_dataset", "load_folder", "load_re_arc", "load_submission", "load_tasks", "score_submission",
    "write_submission",
]
