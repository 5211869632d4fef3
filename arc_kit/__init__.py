"""arc_kit: ARC-AGI with a language model as a product of experts (Franzen, Disselhoff, Hartmann, 2025).

The subpackages follow the method's stages, from the bottom up: ``data`` (tasks, loaders,
augmentations, the submission), ``text`` (the format and vocabulary), ``model`` (loading, bases,
training), ``method`` (the method on one task: test-time training, the decode engines, DFS, PoE
scoring, the solver), ``run`` (run folders, the planner, workers), ``experiments`` (the paper's
tables, analysis, benchmarks), then ``kaggle`` and ``sudoku``, and ``cli`` on top. This top
level hands on the numpy-only names the notebooks use; model code imports torch when it is used.
"""

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.datasets import (
    find_competition_files,
    load_challenges,
    load_dataset,
    load_folder,
    load_re_arc,
    load_tasks,
)
from arc_kit.data.pictures import picture
from arc_kit.data.submission import build_submission, load_submission, score_submission, write_submission
from arc_kit.data.tasks import InvalidDataError, Pair, Task, TaskSet
from arc_kit.progress import progress_bar  # noqa: F401 - before torch's floors: it quiets tqdm.auto's Jupyter warning
from arc_kit.provenance import __version__
from arc_kit.text import TaskEncoder, TextFormat, Vocabulary

__all__ = [
    "Augmentation", "InvalidDataError", "Pair", "Task", "TaskEncoder", "TaskSet", "TextFormat", "Vocabulary",
    "build_submission", "find_competition_files", "load_challenges", "load_dataset", "load_folder",
    "load_re_arc", "load_submission", "load_tasks", "picture", "score_submission", "write_submission", "__version__",
]
