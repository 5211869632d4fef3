"""What a run would cost: seconds for other tasks or settings, at measured speeds where there are some, guessed ones
elsewhere; and the table of what to expect per model size and GPU.

``estimate_from_folder`` reads a run folder's settings, data set and records, prices the speeds they
show (``planner.speeds_from_records``) and applies them to the tasks and settings asked about
(``planner.estimate_run``), for a number of processes on a machine some times faster. A part no
record measured (a run that recorded no speeds: every part) is priced at the speed
``expectations.guessed_speeds`` guesses for the model on the device named (``Speeds.sources`` says
which is which); without a run folder every part is guessed. ``expectations_for`` is the model size x
GPU table (``expectations_table``) for a task set. They are what ``arc-kit estimate`` prints; this
module knows nothing of solving.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from arc_kit.data.datasets import load_tasks
from arc_kit.data.tasks import TaskSet
from arc_kit.model.loading import load_encoder, token_budget_of
from arc_kit.run.expectations import Device, guessed_speeds, shape_of_folder
from arc_kit.run.expectations_table import expectations_table, paper_check
from arc_kit.run.planner import Speeds, estimate_run, measure, speeds_from_records
from arc_kit.run.record_json import read_records
from arc_kit.run.runs import RECORDS_FILE, RUN_FILE, RunFolderError, read_run_info, read_run_settings
from arc_kit.settings import SolveSettings, solve_preset

PAPER_CHECK_TASKS = "arc-agi-1/evaluation"  # the set the paper's timed run solved
MAX_ESTIMATE_SECONDS = 100 * 31_536_000.0  # a century: an estimate beyond it comes from damaged speeds


@dataclass
class Estimate:
    """The planner's estimate of a run, from the speeds an earlier run measured (and guesses where it did not)."""

    speeds: Speeds
    seconds: dict[str, float]  # training, generation, scoring, total (one process, the measuring machine)
    tasks: int
    settings: SolveSettings
    workers: int = 1  # processes sharing the work
    speedup: float = 1.0  # how many times faster the target machine is than the measuring one

    @property
    def wall_seconds(self) -> dict[str, float]:
        """``seconds`` on the target machine, shared by the workers."""
        return {part: seconds / (self.speedup * self.workers) for part, seconds in self.seconds.items()}


def estimate_from_folder(folder: str | os.PathLike | None, tasks: TaskSet, model: str | os.PathLike,
                         target: SolveSettings | None = None, *, workers: int = 1, speedup: float = 1.0,
                         device: Device | None = None) -> Estimate:
    """Seconds ``target`` (default: the measured run's own settings, or the paper's without a run) would take on
    ``tasks``, at the speeds the run in ``folder`` measured (None: no run), in ``workers`` processes on a machine
    ``speedup`` times faster; a part it did not measure at the speed guessed for ``model`` (whose tokenizer counts
    tokens) on ``device`` (None: the CPU)."""
    if workers < 1 or speedup <= 0:
        raise ValueError(f"workers must be at least 1 and speedup positive, got {workers} and {speedup}")
    measured_settings = read_run_settings(folder) if folder is not None else None
    target = target or measured_settings or solve_preset("paper")
    target = target.replace(max_len=token_budget_of(model, target.max_len))
    encoder = load_encoder(model, max_len=target.max_len)
    sizes = [measure(task, encoder, target.max_len) for task in tasks.tasks()]
    speeds = guessed_speeds(shape_of_folder(model), device, target, sizes)
    if folder is not None:
        dataset = read_run_info(folder).get("dataset", "arc-agi-1/evaluation")
        if not isinstance(dataset, str):
            raise RunFolderError(f"{folder}: its {RUN_FILE} names no data set (its dataset is no string)")
        measured_tasks = load_tasks(dataset, strict=False)
        speeds = speeds_from_records(read_records(Path(folder) / RECORDS_FILE), measured_tasks,
                                     load_encoder(model, max_len=measured_settings.max_len), measured_settings, speeds)
    seconds = estimate_run(tasks, encoder, target, speeds)
    if not all(0 <= value <= MAX_ESTIMATE_SECONDS for value in seconds.values()):
        raise ValueError(f"the speeds give {seconds['total'] / 3600:.3g} hours, beyond any run: "
                         f"{folder or 'the guesses'} cannot be right (a damaged record?)")
    return Estimate(speeds, {part: seconds[part] for part in ("training", "generation", "scoring", "total")},
                    len(tasks), target, workers, speedup)


def expectations_for(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, what: str,
                     check: bool = True) -> list[str]:
    """The model size x GPU table for ``tasks`` at ``settings`` (tokens counted by ``model``'s tokenizer: every
    shrunk model writes a symbol a token), and, with ``check``, the paper's timed run priced the same way."""
    settings = settings.replace(max_len=token_budget_of(model, settings.max_len))
    encoder = load_encoder(model, max_len=settings.max_len)
    lines = expectations_table([measure(task, encoder, settings.max_len) for task in tasks.tasks()], settings, what)
    if check:
        paper_tasks = load_tasks(PAPER_CHECK_TASKS)
        lines += ["", paper_check([measure(task, encoder, settings.max_len) for task in paper_tasks.tasks()],
                                  settings)]
    return lines
