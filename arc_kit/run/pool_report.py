"""What a worker pool's parent prints and logs: each finished task, workers started, assignments, progress.

This module knows how to word the pool's news; the pool itself (its slots, its queue) is ``workers``'.
"""

from __future__ import annotations

import logging
import math
import time

from arc_kit.method.records import TaskRecord
from arc_kit.run.planner import Planner, hours
from arc_kit.run.runs import task_line
from arc_kit.run.worker_slots import WorkerSlot

logger = logging.getLogger("arc_kit.run.workers")  # the pool's one log, whichever of its modules writes


class PoolReport:
    """The parent's report: one line per finished task, and every minute tasks done, solved and time left."""

    def __init__(self, enabled: bool, total: int, deadline: float | None, every: float = 60.0):
        self.enabled, self.total, self.deadline, self.every = enabled, total, deadline, every
        self.last = time.monotonic()

    def task(self, record: TaskRecord, done: int, solved: float | None) -> None:
        if self.enabled:
            print(task_line(record), flush=True)

    def note(self, message: str) -> None:
        logger.info(message)
        if self.enabled:
            print(message, flush=True)

    def started(self, slots: list[WorkerSlot], devices: list[str], added: int = 0) -> None:
        """How many worker processes are running, and where (counted, not intended)."""
        running = [slot for slot in slots if slot.process is not None]
        gpus = sorted({slot.device for slot in running if slot.device})
        on_cpu = sum(1 for slot in running if not slot.device)
        where = [f"{sum(1 for slot in running if slot.device == gpu)} on GPU {gpu}" for gpu in gpus]
        where += [f"{on_cpu} on the CPU"] if on_cpu else []
        more = f"started {added} more: " if added else "started "
        self.note(f"{more}{len(running)} worker process(es) running ({', '.join(where) or 'none'})")

    def assigned(self, task_id: str, slot: WorkerSlot, rung: int, planner: Planner) -> None:
        """The task's rung and caps, and when the work left is projected to end at that rung."""
        if not self.enabled:
            return
        left = planner.estimate(planner.remaining, rung) / planner.workers
        cap = "" if not math.isfinite(slot.task_deadline) else f", capped at {hours(slot.task_deadline - time.time())}"
        deadline = "" if self.deadline is None else f" (deadline in {hours(self.deadline - time.time())})"
        print(f"task {task_id} -> worker {slot.index}: rung {rung}{cap}; {len(planner.remaining)} task(s) queued, "
              f"projected to finish in {hours(left)}{deadline}", flush=True)

    def tick(self, done: int, solved: float | None, force: bool = False) -> None:
        if not self.enabled or (not force and time.monotonic() - self.last < self.every):
            return
        self.last = time.monotonic()
        print("progress: " + progress_line(done, self.total, solved, self.deadline), flush=True)


def progress_line(done: int, total: int, solved: float | None, deadline: float | None) -> str:
    """``12/120 tasks done, 3 solved, 5:32:10 left`` (the solved part when answers are known, time when bounded)."""
    parts = [f"{done}/{total} tasks done"]
    if solved is not None:
        parts.append(f"{solved:g} solved")
    if deadline is not None:
        parts.append(f"{hours(max(0.0, deadline - time.time()))} left")
    return ", ".join(parts)
