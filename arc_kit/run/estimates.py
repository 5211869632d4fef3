"""What a run would cost: seconds for other tasks or settings, at the speeds an earlier run measured.

``estimate_from_folder`` reads a run folder's settings, data set and records, prices the speeds they
show (``planner.speeds_from_records``) and applies them to the tasks and settings asked about
(``planner.estimate_run``), for a number of processes on a machine some times faster. It is what
``arc-kit estimate`` prints; it knows nothing of solving.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from arc_kit.data.datasets import load_tasks
from arc_kit.data.tasks import TaskSet
from arc_kit.model.loading import load_encoder, token_budget_of
from arc_kit.run.planner import Speeds, estimate_run, speeds_from_records
from arc_kit.run.records import read_records
from arc_kit.run.runs import RECORDS_FILE, RUN_FILE, RunFolderError, read_run_info, read_run_settings
from arc_kit.settings import SolveSettings


@dataclass
class Estimate:
    """The planner's estimate of a run, from the speeds an earlier run measured."""

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


def estimate_from_folder(folder: str | os.PathLike, tasks: TaskSet, model: str | os.PathLike,
                         target: SolveSettings | None = None, *, workers: int = 1, speedup: float = 1.0) -> Estimate:
    """Seconds ``target`` (default: the measured run's own settings) would take on ``tasks``, at the
    speeds the run in ``folder`` measured, in ``workers`` processes on a machine ``speedup`` times
    faster; ``model`` is the folder whose tokenizer counts tokens."""
    if workers < 1 or speedup <= 0:
        raise ValueError(f"workers must be at least 1 and speedup positive, got {workers} and {speedup}")
    settings = read_run_settings(folder)
    dataset = read_run_info(folder).get("dataset", "arc-agi-1/evaluation")
    if not isinstance(dataset, str):
        raise RunFolderError(f"{folder}: its {RUN_FILE} names no data set (its dataset is no string)")
    measured_tasks = load_tasks(dataset, strict=False)
    encoder = load_encoder(model, max_len=settings.max_len)
    speeds = speeds_from_records(read_records(Path(folder) / RECORDS_FILE), measured_tasks, encoder, settings)
    target = target or settings
    target = target.replace(max_len=token_budget_of(model, target.max_len))
    seconds = estimate_run(tasks, load_encoder(model, max_len=target.max_len), target, speeds)
    return Estimate(speeds, {part: seconds[part] for part in ("training", "generation", "scoring", "total")},
                    len(tasks), target, workers, speedup)
