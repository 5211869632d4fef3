"""Where a pool's actors go, and the first actor's calibration: how many share a GPU, and what it measures first.

A slot is one actor's place: one of the cluster's GPUs (by its index, which is the pool's bundle of
that GPU) or the CPU. ``slot_layout`` says where each goes: round the GPUs, or the first ones on the
GPUs and the rest on the CPU. A pool with a deadline and no speeds measured asks its first actor to
time one short real solve (``calibration_settings``) of one task (``calibration_task``) before it
takes work; ``fold_calibration`` makes the timings the planner's first estimates and the peak
memory the number of actors that share each GPU (``workers_per_gpu_for``).

This module knows the planner and these numbers; nothing of Ray or processes (``pool`` starts the actors).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from arc_kit.run.planner import Planner, Speeds
from arc_kit.settings import SamplerSettings, SolveSettings

CUDA_CONTEXT_BYTES = 2**29  # what each process's CUDA context takes on a GPU besides its tensors (about 0.5 GiB)
MAX_WORKERS_PER_GPU = 8  # 8 processes on one H100 decoded 7.7 times as fast as one; more gain little


@dataclass(frozen=True)
class Slot:
    """One actor's place: its number, and the GPU it shares (None: the CPU)."""

    index: int
    gpu: int | None


def slot_layout(workers: int, gpus: int, spread: bool, first: int = 0) -> list[Slot]:
    """``workers`` slots numbered from ``first``: round the ``gpus`` when ``spread``, else one on each of the first
    GPUs and the rest on the CPU."""
    if spread and gpus:
        return [Slot(index, index % gpus) for index in range(first, first + workers)]
    return [Slot(index, index if index < gpus else None) for index in range(first, first + workers)]


def workers_per_gpu_for(peak_bytes: float, total_bytes: float, gpus: int, cpus: int | None = None) -> int:
    """How many actors share one GPU: as many as 90% of its memory holds at the measured peak (each with its CUDA
    context), at most ``MAX_WORKERS_PER_GPU`` and at most the CPU cores per GPU, at least one."""
    cpus = cpus or os.cpu_count() or 1
    by_memory = int(0.9 * total_bytes // (peak_bytes + CUDA_CONTEXT_BYTES))
    return max(1, min(MAX_WORKERS_PER_GPU, by_memory, cpus // max(1, gpus)))


def calibration_settings(settings: SolveSettings) -> SolveSettings:
    """The short solve the first actor times at the start: two TTT steps, greedy under one augmentation, one
    scoring pass (per unit of work, what the planner prices every part of every rung with)."""
    return settings.replace(inference_augmentations=1, scoring_augmentations=1, sampler=SamplerSettings("greedy"),
                            ttt=settings.ttt.replace(steps=min(2, settings.ttt.steps)))


def calibration_task(planner: Planner, gpus: bool) -> str:
    """The task to measure on: on GPUs the longest (its peak memory is the run's), on the CPU the shortest."""
    sizes = sorted(planner.sizes.values(), key=lambda size: (size.training_tokens + size.prompt_tokens, size.task_id))
    return (sizes[-1] if gpus else sizes[0]).task_id


def fold_calibration(planner: Planner, task_id: str, settings: SolveSettings, measured: dict,
                     gpus: int) -> tuple[int | None, str]:
    """Fold the first actor's measurement into the planner: (the actors per GPU its peak memory allows, if known;
    the line that says what was measured)."""
    if measured.get("error") or not measured.get("timings"):
        return None, (f"calibration failed ({measured.get('error') or 'no timings'}): the planner keeps its guessed "
                      f"speeds ({planner.speeds.guess or 'the fixed assumption'})")
    speeds = Speeds.from_json({**planner.speeds.to_json(), "measured_tasks": 0, "measured_parts": {}})
    speeds.update(planner.sizes[task_id], settings, measured["timings"])  # a part it did not run keeps the guess
    speeds.measured_tasks, speeds.measured_parts = 0, {}  # a first estimate: the first real task replaces it
    planner.calibrate(speeds)
    per_gpu = None
    if measured.get("peak_bytes") and measured.get("total_bytes"):
        per_gpu = workers_per_gpu_for(measured["peak_bytes"], measured["total_bytes"], gpus)
    line = (f"calibrated on task {task_id} in {measured['timings'].get('total', 0):.1f} s: "
            f"{speeds.training:.2e} s per training token, {speeds.generation:.2e} s per generated token, "
            f"{speeds.scoring:.2e} s per scored token")
    if per_gpu:
        line += (f"; peak {measured['peak_bytes'] / 2**30:.2f} GiB of {measured['total_bytes'] / 2**30:.1f} GiB: "
                 f"{per_gpu} worker(s) per GPU")
    return per_gpu, line
