"""Solving task sets: the per-task solver, run folders and records, the planner, worker processes, tables.

``solver`` puts the method together for one task (TTT, DFS under augmentations, PoE); ``runs``
and ``records`` keep a run folder resumable (``outcome`` is a run's end line); ``planner`` fits a run
into its time, ``expectations`` guesses its first speeds from the model's size and the device, and
``estimates`` prices one from an earlier run's speeds (``expectations_table``: per model size and
GPU); ``workers`` spreads tasks over processes and GPUs (``worker_process`` is the worker's side,
``worker_slots`` the parent's view of one worker, ``calibration`` the first measured solve,
``pool_report`` the parent's log lines); ``tables``, ``bench``, ``engine_bench``, ``analysis`` and
``evaluation`` measure; ``model_check`` says whether a model folder is ready for the competition
(``arc-kit check-model``). It may import ``model``, ``search`` and everything below; it knows nothing
of Kaggle's files or the command line.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "runs": ("solve",),
    "solver": ("Solver",),
    "tables": ("run_table",),
    "workers": ("solve_in_workers",),
})
