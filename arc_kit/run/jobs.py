"""What ``arc-kit solve``, ``dry-run`` and ``kaggle run`` run: the method on a task set, in this process or in a pool.

One worker solves in this process (``runs.solve``; Ray is neither started nor imported); a run that
needs more (``uses_pool``) makes a pool of Ray actors (``pool.solve_in_pool``). This module knows
which; how either runs is ``runs``' and ``pool``'s.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

from arc_kit.data.tasks import TaskSet
from arc_kit.method.solver import Solver
from arc_kit.model.devices import visible_gpus
from arc_kit.model.loading import load_model, model_info
from arc_kit.provenance import run_info
from arc_kit.run.expectations import device_of
from arc_kit.run.locking import FolderInUseError, hold_folder
from arc_kit.run.pool import solve_in_pool
from arc_kit.run.report import write_report_quietly
from arc_kit.run.runs import REPORT_FILE, RUN_KIND, SolveRun, check_run_folder, solve
from arc_kit.settings import LoadSettings, SolveSettings


def uses_pool(workers: int | None, workers_per_gpu: int | None, address: str | None, deadline: float | None) -> bool:
    """Whether a run needs a pool: an address, several workers, or GPUs a pool serves better than one process
    (several of them, workers per GPU asked for, or one with a deadline, whose first task may find room for more)."""
    if address:
        return True
    if workers is not None:
        return workers > 1
    gpus = visible_gpus()
    return bool(gpus) and (bool(workers_per_gpu) or len(gpus) > 1 or deadline is not None)


def solve_job(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, out: str | os.PathLike, *,
              workers: int | None = None, workers_per_gpu: int | None = None, address: str | None = None,
              shared_model: bool = False, restart: bool = False, deadline: float | None = None,
              load_options: dict | None = None, info: dict | None = None, progress: bool = True,
              **pool_options) -> SolveRun:
    """The method on a task set, in this process or in a pool (``uses_pool``): what ``arc-kit solve`` runs.

    ``restart`` discards an earlier run in ``out`` first, whichever way it was run; otherwise a rerun
    resumes. ``pool_options`` go to ``solve_in_pool`` (``stop_at``, ``solutions``, ``submission_path``...);
    in this process only ``solutions`` applies (a deadline bounds each task, and nothing stops a hang).
    The model is loaded (in a pool: its folder and tokenizer checked) before ``out`` is claimed, so that a
    refused run leaves the file system as it found it. Either way the run's report (``report``) is written beside
    its submission, ``report_path``.
    """
    check_run_folder(out, restart=restart)  # a folder the kit may not write, or in use: refused first
    if uses_pool(workers, workers_per_gpu, address, deadline):
        run = solve_in_pool(tasks, model, settings, out, workers=workers, workers_per_gpu=workers_per_gpu,
                            address=address, shared_model=shared_model, deadline=deadline, load_options=load_options,
                            progress=progress, info=info, restart=restart, **pool_options)
    else:
        loaded = load_model(model, LoadSettings(**(load_options or {})))
        solver = Solver.from_loaded(loaded, settings)
        device = device_of(next(loaded.model.parameters()).device)  # what measured the run's speeds
        run = solve(tasks, solver, out, deadline=deadline, progress=progress, solutions=pool_options.get("solutions"),
                    info=run_info(model=model_info(loaded), device=device, gpus=int(device != "CPU"), **(info or {})),
                    restart=restart)
    beside = Path(pool_options.get("submission_path") or run.submission_path).parent  # the Kaggle job's: its working
    with suppress(FolderInUseError), hold_folder(out, RUN_KIND, "solve"):  # a run started on it since: no report
        run.report_path = write_report_quietly(out, beside / REPORT_FILE, tasks=tasks,
                                               solutions=pool_options.get("solutions"))
    return run
