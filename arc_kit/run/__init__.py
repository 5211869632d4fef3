"""Solving task sets: run folders, the planner, worker processes.

``runs`` keeps a run folder resumable and writes its submission (``outcome`` is a run's end line;
``locking`` holds a folder for one process; ``record_json`` reads and writes the records' files, their
JSON derived from the record dataclasses);
``planner`` fits a run into its time, ``expectations`` guesses its first speeds from the model's
size and the device (``bandwidth``: a decode step's memory-bandwidth floor), and ``estimates``
prices one from an earlier run's speeds (``expectations_table``: per model size and GPU);
``workers`` spreads tasks over processes and GPUs (``worker_process`` is the worker's side,
``worker_slots`` the parent's view of one worker, ``calibration`` the first measured solve,
``pool_report`` the parent's log lines); ``model_check`` says whether a model folder is ready for
the competition (``arc-kit check-model``). The method on one task is ``method.solver``'s, and the
records it returns are ``method.records``'. It may import ``method``, ``model`` and everything
below; it knows nothing of the tables, Kaggle's files or the command line.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "runs": ("solve",),
    "workers": ("solve_in_workers",),
})
