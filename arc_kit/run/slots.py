"""Where a pool's actors go, and how many share a GPU once the first task has measured its peak memory.

A slot is one actor's place: one of the cluster's GPUs (by its index, which is the pool's bundle of
that GPU) or the CPU (``slot_layout``). A pool with a deadline and nothing measured starts one actor per
GPU; the first task that finishes (the longest, on one GPU: the queue runs longest first) measures the
speeds, and ``first_task_line`` makes its peak memory the number of actors that share each GPU.

This module knows the planner and these numbers; nothing of Ray or processes (``pool`` starts the actors).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from arc_kit.run.planner import Planner

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


def first_task_line(planner: Planner, task_id: str, timings: dict | None, memory: dict,
                    gpus: int) -> tuple[int | None, str]:
    """What the first task a pool finishes tells it when it had measured nothing (its timings are the planner's
    already, ``Planner.done``): the actors per GPU its peak memory allows (None when not measured), and the line
    that says what was measured."""
    speeds = planner.speeds
    if not timings:
        line = (f"task {task_id} measured nothing: the planner keeps its guessed speeds "
                f"({speeds.guess or 'the fixed assumption'})")
    else:
        line = (f"measured on task {task_id} in {timings.get('total', 0):.1f} s: {speeds.training:.2e} s per training "
                f"token, {speeds.generation:.2e} s per generated token, {speeds.scoring:.2e} s per scored token")
    per_gpu = None
    if memory.get("peak_bytes") and memory.get("total_bytes"):
        per_gpu = workers_per_gpu_for(memory["peak_bytes"], memory["total_bytes"], gpus)
        line += (f"; peak {memory['peak_bytes'] / 2**30:.2f} GiB of {memory['total_bytes'] / 2**30:.1f} GiB: "
                 f"{per_gpu} worker(s) per GPU")
    return per_gpu, line
