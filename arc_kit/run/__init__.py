"""Solving task sets: run folders, the planner, a pool of Ray actors.

``runs`` keeps a run folder resumable and writes its submission and its end line (``locking`` holds a
folder for one process; ``record_json`` reads and writes the records' files, their JSON the kit's one codec's, grids its
leaf);
``planner`` fits a run into its time, ``expectations`` guesses its first speeds by one stated prior
(a decode step's memory-bandwidth floor on the device times a factor; its table per model size and
GPU; how many workers share a GPU), and ``estimates`` prices a run at the speeds an earlier one
measured, on the device that measured them, beside the prior's;
``pool`` runs a task set through one pool of workers and keeps its run folder in one loop (``jobs``: a solve's
outputs; ``workers``: Ray actors on this machine's GPUs and CPUs or a cluster's, or one worker in this process;
``ray_session`` starts and stops Ray, ``actors`` is a worker's side);
``model_check`` says whether a model folder is ready for the competition (``arc-kit check-model``);
``report`` writes a run as one HTML page (``arc-kit report``).
The method on one task is ``method.solver``'s, and the records it returns are ``method.records``'.
It may import ``method``, ``model`` and everything below; it knows nothing of the tables, Kaggle's
files or the command line.
"""

from arc_kit.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "pool": ("run_in_pool",),
    "jobs": ("solve", "solve_job"),
})
