"""The first worker's calibration: one short real solve, timed, whose speeds and peak memory start a pool.

A pool with a deadline and no speeds measured yet asks its first worker to time a short solve
(``calibration_settings``) of one task before it takes work: the worker writes what it measured to
``calibration.json`` (``measure_calibration``), the parent folds the timings into its planner's first estimates
and the peak memory into how many workers share each GPU (``calibrate``, ``workers_per_gpu_for``).

This module knows the measurement and what it means for the planner; starting and watching the
worker processes is ``workers``' and ``worker_slots``', loading the model ``worker_process``'.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from arc_kit.data.jsonio import write_json_atomically
from arc_kit.data.tasks import TaskSet
from arc_kit.run.planner import Planner, Speeds
from arc_kit.settings import SamplerSettings, SolveSettings

CALIBRATION_FILE = "calibration.json"  # worker -> parent: the first worker's measurement at the start
CUDA_CONTEXT_BYTES = 2**29  # what each process's CUDA context takes on a GPU besides its tensors (about 0.5 GiB)
MAX_WORKERS_PER_GPU = 8  # 8 processes on one H100 decoded 7.7 times as fast as one; more gain little


def workers_per_gpu_for(peak_bytes: float, total_bytes: float, gpus: int, cpus: int | None = None) -> int:
    """How many workers share one GPU: as many as 90% of its memory holds at the measured peak (each with
    its CUDA context), at most ``MAX_WORKERS_PER_GPU`` and at most the CPU cores per GPU, at least one."""
    cpus = cpus or os.cpu_count() or 1
    by_memory = int(0.9 * total_bytes // (peak_bytes + CUDA_CONTEXT_BYTES))
    return max(1, min(MAX_WORKERS_PER_GPU, by_memory, cpus // max(1, gpus)))


def calibration_settings(settings: SolveSettings) -> SolveSettings:
    """The short solve the first worker times at the start: two TTT steps, greedy under one augmentation, one
    scoring pass (per unit of work, what the planner prices every part of every rung with)."""
    return settings.replace(inference_augmentations=1, scoring_augmentations=1, sampler=SamplerSettings("greedy"),
                            ttt=settings.ttt.replace(steps=min(2, settings.ttt.steps)))


def calibration_task(planner: Planner, gpus: bool) -> str:
    """The task to measure on: on GPUs the longest (its peak memory is the run's), on the CPU the shortest."""
    sizes = sorted(planner.sizes.values(), key=lambda size: (size.training_tokens + size.prompt_tokens, size.task_id))
    return (sizes[-1] if gpus else sizes[0]).task_id


def calibrate(folder: Path, planner: Planner, task_id: str, settings: SolveSettings, report,
              gpus: int) -> int | None:
    """Fold the first worker's measurement (in its ``folder``) into the planner; the workers per GPU its peak
    memory allows, if known."""
    try:
        measured = json.loads((folder / CALIBRATION_FILE).read_text())
    except (OSError, ValueError):
        measured = {"error": "no calibration.json (the worker died first?)"}
    if measured.get("error") or not measured.get("timings"):
        report.note(f"calibration failed ({measured.get('error')}): the planner keeps its guessed speeds "
                    f"({planner.speeds.guess or 'the fixed assumption'})")
        return None
    speeds = Speeds.from_json({**planner.speeds.to_json(), "measured_tasks": 0, "measured_parts": {}})
    speeds.update(planner.sizes[task_id], settings, measured["timings"])  # a part it did not run keeps the guess
    speeds.measured_tasks, speeds.measured_parts = 0, {}  # a first estimate: the first real task replaces it
    planner.calibrate(speeds)
    per_gpu = None
    if measured.get("peak_bytes") and measured.get("total_bytes"):
        per_gpu = workers_per_gpu_for(measured["peak_bytes"], measured["total_bytes"], gpus)
    report.note(f"calibrated on task {task_id} in {measured['timings'].get('total', 0):.1f} s: "
                f"{speeds.training:.2e} s per training token, {speeds.generation:.2e} s per generated token, "
                f"{speeds.scoring:.2e} s per scored token"
                + (f"; peak {measured['peak_bytes'] / 2**30:.2f} GiB of {measured['total_bytes'] / 2**30:.1f} GiB: "
                   f"{per_gpu} worker(s) per GPU" if per_gpu else ""))
    return per_gpu


def measure_calibration(solver, tasks: TaskSet, calibration: dict, folder: Path) -> None:
    """The worker's side of the calibration: one short real solve (``Solver.solve_task``), timed; its peak memory."""
    try:
        settings = SolveSettings.from_json(calibration["settings"])
        record = solver.solve_task(tasks[calibration["task_id"]], settings=settings)
        measured = {"task_id": calibration["task_id"], "timings": record.timings,
                    "error": record.error, **_gpu_memory()}
    except Exception as error:  # noqa: BLE001 - a failed measurement leaves the assumed speeds, never the run
        measured = {"error": f"{type(error).__name__}: {error}"}
    write_json_atomically(folder / CALIBRATION_FILE, measured)


def _gpu_memory() -> dict:
    """This process's peak reserved GPU memory and the GPU's total, in bytes ({} on the CPU)."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {"peak_bytes": torch.cuda.max_memory_reserved(), "total_bytes": torch.cuda.get_device_properties(0).total_memory}
