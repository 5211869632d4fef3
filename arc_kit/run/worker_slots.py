"""The parent's side of each worker process: its slot, how it starts and stops, what the watchdog asks of it.

A slot is one worker process seen from the parent: its folder (plan, assignment, heartbeat,
records), its device (``CUDA_VISIBLE_DEVICES``), the task it runs and that task's deadline. The
parent starts a slot's worker as ``python -m arc_kit worker PLAN`` (``start_worker``), asks whether
it is dead or hung (``trouble``, under ``WatchdogSettings``), stops it politely or not
(``stop_worker``), and follows the records it appends (``RecordFollower``).

This module knows processes and the files they share; the queue, the planner and the merge are
``workers``', the worker's own loop is ``worker_process``'.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arc_kit.data.jsonio import write_json_atomically
from arc_kit.method.records import TaskRecord
from arc_kit.names import shown
from arc_kit.run.calibration import CALIBRATION_FILE
from arc_kit.run.record_json import from_json, read_records
from arc_kit.run.runs import RECORDS_FILE
from arc_kit.run.worker_process import ASSIGNMENT_FILE, HEARTBEAT_FILE, READY_FILE
from arc_kit.settings import Settings, setting

logger = logging.getLogger("arc_kit.run.workers")  # the pool's one log, whichever of its modules writes


@dataclass(frozen=True)
class WatchdogSettings(Settings):
    """When the parent gives up on a worker, and what it does then."""

    hang_seconds: float = setting(300.0, "a task this long past its own deadline is hung (the solver checks its "
                                         "deadline between steps, so a healthy one stops well within this)", at_least=0)
    stall_seconds: float = setting(120.0, "a worker whose model is loaded and whose step counter (every forward "
                                          "pass, and every turn of its idle loop, counts) has not moved for this "
                                          "long is hung: stopped, deadlocked, or stuck in a loop", at_least=0)
    silence_seconds: float = setting(900.0, "a worker still loading its model whose heartbeat is this old is hung",
                                    at_least=0)
    heartbeat_seconds: float = setting(5.0, "how often a worker writes its step counter", above=0)
    stop_seconds: float = setting(120.0, "with a deadline but no stop time, workers still running this long "
                                         "after the deadline are stopped", at_least=0)
    terminate_seconds: float = setting(15.0, "between asking a worker to stop (SIGTERM) and killing it", at_least=0)
    restarts: int = setting(2, "times a GPU whose worker died or hung gets a fresh one", at_least=0)
    retries: int = setting(1, "times the task of a worker that died or hung goes back to the queue before it "
                              "gets fallback answers", at_least=0)


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them for a child process.

    The parent's own ``CUDA_VISIBLE_DEVICES`` entries when it is set (physical ids or UUIDs: a
    child given ``1`` of ``"2,3"`` would see the machine's GPU 1, not the parent's second); else
    ``0 .. n-1`` for the GPUs torch counts.
    """
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    return [str(index) for index in range(gpu_count())]


def merged_records(out: Path) -> dict[str, TaskRecord]:
    """The records of every worker folder in ``out``, also those of an earlier run with more workers."""
    records = {}
    folders = sorted(out.glob("worker-*"), key=lambda folder: (len(folder.name), folder.name))
    for folder in folders:
        records.update(read_records(folder / RECORDS_FILE))
    return records


class RecordFollower:
    """The records appended to one file since the last call (a line still being written waits for the next)."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0

    def new_records(self) -> list[TaskRecord]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # whole lines only
        self.offset += end
        records = []
        for line in data[:end].splitlines():
            try:
                records.append(from_json(TaskRecord, json.loads(line)))
            except (ValueError, TypeError):
                logger.warning("%s: skipped a line that is no record", self.path)
        return records


@dataclass
class WorkerSlot:
    """One GPU's worker process, seen from the parent."""

    index: int
    device: str  # its CUDA_VISIBLE_DEVICES ("" for the CPU)
    folder: Path
    process: Any = None
    log: Any = None
    starts: int = 0
    started_at: float = 0.0
    sequence: int = 0  # of the last assignment written
    task: str | None = None  # the task it runs
    task_deadline: float = math.inf  # that task's own deadline (seconds since the epoch)
    stopping: bool = False  # told to stop (nothing left, or the run's end)
    follower: RecordFollower | None = None  # its records file
    steps: str = ""  # its step counter as last read from its heartbeat file
    moved_at: float = 0.0  # when that counter last moved

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def ready(self) -> bool:
        return self.alive and (self.folder / READY_FILE).exists()

    def heartbeat_age(self, now: float) -> float:
        try:
            return now - max((self.folder / HEARTBEAT_FILE).stat().st_mtime, self.started_at)
        except FileNotFoundError:
            return now - self.started_at

    def stalled_for(self, now: float) -> float:
        """Seconds since the worker's step counter last moved, counted from when its model was loaded."""
        try:
            steps = (self.folder / HEARTBEAT_FILE).read_text()
            ready_at = (self.folder / READY_FILE).stat().st_mtime
        except OSError:
            return 0.0
        if steps and steps != self.steps:
            self.steps, self.moved_at = steps, now
        return now - max(self.moved_at, ready_at, self.started_at)

    def assign(self, message: dict) -> None:
        self.sequence += 1
        write_json_atomically(self.folder / ASSIGNMENT_FILE, {"sequence": self.sequence, **message})


def slot_device(index: int, devices: list[str], spread: bool) -> str:
    """Slot ``index``'s CUDA_VISIBLE_DEVICES: round the GPUs when ``spread``, else the first ones, then the CPU."""
    if spread and devices:
        return devices[index % len(devices)]
    return devices[index] if index < len(devices) else ""


def new_slot(out: Path, index: int, device: str, plan: dict, calibration) -> WorkerSlot:
    """A worker's folder and plan (with the calibration to run first, if any), and its slot."""
    folder = out / f"worker-{index}"
    folder.mkdir(exist_ok=True)
    (folder / CALIBRATION_FILE).unlink(missing_ok=True)
    own = {**plan, "calibrate": {"task_id": calibration[0], "settings": calibration[1].to_json()}} if calibration \
        else plan
    (folder / "plan.json").write_text(json.dumps(own, indent=2) + "\n")
    slot = WorkerSlot(index, device, folder, follower=RecordFollower(folder / RECORDS_FILE))
    slot.follower.offset = _size_of(folder / RECORDS_FILE)  # earlier records are already the parent's
    return slot


def _size_of(path: Path) -> int:
    """The bytes of ``path`` up to its last whole line (0 when there is no such file)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return data.rfind(b"\n") + 1


def start_worker(slot: WorkerSlot) -> None:
    """Start (or start again) the worker of ``slot``; it reads its plan and waits for assignments."""
    for name in (READY_FILE, HEARTBEAT_FILE, ASSIGNMENT_FILE):
        (slot.folder / name).unlink(missing_ok=True)
    if slot.log is not None:
        slot.log.close()
    environment = dict(os.environ)
    environment["CUDA_VISIBLE_DEVICES"] = slot.device
    slot.log = open(slot.folder / "worker.log", "a")
    command = [sys.executable, "-m", "arc_kit", "worker", str(slot.folder / "plan.json")]
    slot.process = subprocess.Popen(command, env=environment, stdout=slot.log, stderr=subprocess.STDOUT)
    slot.starts += 1
    slot.started_at = time.time()
    slot.sequence, slot.stopping, slot.steps = 0, False, ""


def trouble(slot: WorkerSlot, now: float, watchdog: WatchdogSettings) -> str | None:
    """Why ``slot``'s worker must be given up on, or None while it is well (or was never started, or is done)."""
    if slot.process is None or (slot.stopping and slot.task is None):
        return None
    status = slot.process.poll()
    if status is not None:
        return f"exited with status {status}"
    if slot.task is not None and now > slot.task_deadline + watchdog.hang_seconds:
        return f"hung: task {shown(slot.task)} is {now - slot.task_deadline:.0f} s past its deadline"
    if not slot.ready:
        if slot.heartbeat_age(now) > watchdog.silence_seconds:
            return f"hung: no heartbeat for {slot.heartbeat_age(now):.0f} s"
        return None
    stalled = slot.stalled_for(now)
    if stalled > watchdog.stall_seconds:
        doing = f"on task {shown(slot.task)}" if slot.task else "between tasks"
        return f"hung: no progress {doing} for {stalled:.0f} s (its step counter stands at {slot.steps.strip()})"
    return None


def stop_worker(slot: WorkerSlot, grace: float, *, polite: bool) -> None:
    """Stop ``slot``'s worker: ``polite``ly (a stop message, ``grace`` seconds to leave), then SIGTERM, then SIGKILL."""
    process = slot.process
    if process is None:
        return
    steps = [("ask", grace)] if polite else []
    for step, seconds in [*steps, ("terminate", grace), ("kill", None)]:
        if process.poll() is not None:
            break
        if step == "ask" and not slot.stopping and slot.ready:
            slot.assign({"stop": True})  # a worker between tasks leaves by itself
        elif step == "terminate":
            process.terminate()
            if hasattr(signal, "SIGCONT"):  # a stopped process acts on SIGTERM only once it runs again
                process.send_signal(signal.SIGCONT)
        elif step == "kill":
            process.kill()
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            continue
    slot.process = None
    slot.stopping = True
