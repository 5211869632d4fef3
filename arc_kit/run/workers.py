"""Several GPUs: one worker process per GPU, a task queue the parent owns, a watchdog, records merged.

The parent writes the tasks to solve into the run folder and starts ``python -m arc_kit worker
PLAN`` once per GPU, with ``CUDA_VISIBLE_DEVICES`` set to one entry of the parent's own list when it
has one (so a physical id stays physical), else to one index. The parent owns the queue and the
plan: it counts each task's tokens, queues the tasks longest first (``planner.Planner``), and hands
a worker that is ready and idle the next task, the rung the time left allows, and the task's
wall-clock caps (written to the worker's ``assignment.json``). Every finished task's timings refine
the speeds that price the tasks left (kept in ``speeds.json``, which a rerun starts from). Each
worker appends its records to its own file; the parent follows those files and rewrites
``submission.json`` (complete and valid at all times) as records come in.

The watchdog: a worker whose task runs ``hang_seconds`` past the task's own deadline, or whose
heartbeat (a file that a thread of the worker touches every few seconds) goes silent, is hung. It is
stopped like a worker that died (terminate, then kill); its task goes back to the queue once, then
gets fallback answers; the other tasks stay in the queue for the others; its GPU gets a fresh worker
(up to ``restarts`` times). At ``stop_at`` every worker still running is stopped, the tasks left get
fallback answers, and the last merge and write follow, so they happen before the limit. Every
task's result depends only on the seed and the task, so two workers give the same submission as
one. A rerun resumes: tasks already recorded by any worker (also of an earlier run with more
workers) are not queued again; a folder whose ``run.json`` holds other settings is refused, as
``run.solve`` refuses it.

This module knows processes, files and the planner; what a task's solving does is the solver's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arc_kit import progress
from arc_kit.model.bases import build_base, built_folder, is_built
from arc_kit.data.datasets import load_challenges
from arc_kit.data.grids import MAX_SIDE
from arc_kit.data.jsonio import read_json, write_json_atomically
from arc_kit.locking import holding_folder
from arc_kit.model.loading import (
    DELTA_INDEX,
    LoadSettings,
    is_delta_folder,
    load_encoder,
    load_model,
    model_info,
    token_budget_of,
)
from arc_kit.names import shown
from arc_kit.run.planner import FALLBACK, BudgetSettings, Planner, Speeds, TaskBudget, hours, measure
from arc_kit.provenance import run_info
from arc_kit.run.records import (
    TaskRecord,
    answers_from_records,
    append_record,
    fallback_record,
    read_records,
    write_records,
)
from arc_kit.run.runs import (
    RECORDS_FILE,
    SolveRun,
    clear_run,
    mark_correct,
    open_run,
    solve,
    solve_one,
    task_line,
    write_scores,
)
from arc_kit.settings import SamplerSettings, Settings, SolveSettings, ladder, setting
from arc_kit.run.solver import Solver
from arc_kit.data.submission import build_submission, write_submission
from arc_kit.data.tasks import InvalidDataError, TaskSet

logger = logging.getLogger(__name__)

ASSIGNMENT_FILE = "assignment.json"  # parent -> worker: the task to run next, or stop
READY_FILE = "ready"  # worker -> parent: the model is loaded
HEARTBEAT_FILE = "heartbeat"  # worker -> parent: touched every few seconds while the process lives
SPEEDS_FILE = "speeds.json"  # the speeds measured so far (a rerun starts from them)


@dataclass(frozen=True)
class WatchdogSettings(Settings):
    """When the parent gives up on a worker, and what it does then."""

    hang_seconds: float = setting(300.0, "a task this long past its own deadline is hung (the solver checks its "
                                         "deadline between steps, so a healthy one stops well within this)")
    stall_seconds: float = setting(120.0, "a worker whose model is loaded and whose step counter (every forward "
                                          "pass, and every turn of its idle loop, counts) has not moved for this "
                                          "long is hung: stopped, deadlocked, or stuck in a loop")
    silence_seconds: float = setting(900.0, "a worker still loading its model whose heartbeat is this old is hung")
    heartbeat_seconds: float = setting(5.0, "how often a worker writes its step counter")
    stop_seconds: float = setting(120.0, "with a deadline but no stop time, workers still running this long "
                                         "after the deadline are stopped")
    terminate_seconds: float = setting(15.0, "between asking a worker to stop (SIGTERM) and killing it")
    restarts: int = setting(2, "times a GPU whose worker died or hung gets a fresh one")
    retries: int = setting(1, "times the task of a worker that died or hung goes back to the queue before it "
                              "gets fallback answers")


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
                records.append(TaskRecord.from_json(json.loads(line)))
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


@holding_folder("out")  # the parent holds the run folder's lock; its workers never ask for it
def solve_in_workers(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, out: str | os.PathLike, *,
                     workers: int | None = None, gpus: Sequence[int | str] | None = None,
                     deadline: float | None = None, stop_at: float | None = None,
                     solutions: TaskSet | None = None, load_options: dict | None = None, poll_seconds: float = 1.0,
                     progress: bool = True, submission_path: str | os.PathLike | None = None,
                     submission_tasks: TaskSet | None = None, info: dict | None = None,
                     budget: BudgetSettings = BudgetSettings(), watchdog: WatchdogSettings = WatchdogSettings(),
                     workers_per_gpu: int | None = None, adopt: bool = False) -> SolveRun:
    """Solve ``tasks`` with worker processes that share the GPUs (one CPU process when there is none).

    ``workers`` (a total; those beyond the GPUs run on the CPU) wins over ``workers_per_gpu``; with
    neither, one worker per GPU starts, and when it has a deadline the first one measures a short
    solve (``calibration_settings``): its speeds become the planner's first estimates, and its peak
    memory sets how many more share each GPU (``workers_per_gpu_for``). A base-plus-delta model's
    base is prepared once, here, before any worker starts (``prepare_model``).

    ``deadline`` (seconds since the epoch) is when the planner wants the work done: tasks get
    cheaper rungs and caps to end by then. ``stop_at`` (default: ``watchdog.stop_seconds`` after the
    deadline) is when the parent stops every worker still running, whatever it does. Without a
    deadline nothing is capped and only a silent worker counts as hung. The submission
    (``out/submission.json`` unless ``submission_path`` says otherwise) covers every task of
    ``submission_tasks`` (default ``tasks``), solved or not (skipped ones of a lenient load included),
    and is rewritten as records come in. ``info`` goes into ``run.json`` (see ``run.open_run``).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = settings.replace(max_len=token_budget_of(model, settings.max_len))  # as each worker resolves it
    devices = [str(gpu) for gpu in gpus] if gpus is not None else visible_gpus()
    spread = workers is None  # slots go round the GPUs; else the first ones, then the CPU
    workers = workers or (len(devices) * (workers_per_gpu or 1) if devices else 1)
    started = time.monotonic()
    load_options = prepare_model(model, load_options, progress)
    if stop_at is None and deadline is not None:
        stop_at = deadline + watchdog.stop_seconds
    open_run(out, settings, run_info(**{"model": str(model), "tasks": len(tasks), **(info or {}), "workers": workers}),
             adopt=adopt)
    challenges_path = write_json_atomically(out / "tasks.json", TaskSet(tasks.tasks(), tasks.name).challenges_json())
    records = merged_records(out)
    answers = solutions if solutions is not None else (tasks if tasks.has_solutions else None)
    if answers is not None and not answers.known_outputs():
        answers = None
    todo = [task_id for task_id in tasks.ids if task_id not in records]
    speeds = _stored_speeds(out)
    planner = Planner(_sizes(tasks, todo, model, settings), settings, deadline if deadline is not None else math.inf,
                      speeds, workers=workers, longest_first=True, budget=budget)
    submission_path = Path(submission_path) if submission_path is not None else out / "submission.json"
    covered = submission_tasks if submission_tasks is not None else tasks
    mine = {task_id: records[task_id] for task_id in tasks.ids if task_id in records}

    def write() -> None:
        write_submission(submission_path, build_submission(covered, answers_from_records(mine),
                                                           attempts=settings.attempts), covered)

    write()
    plan = {"challenges": str(challenges_path), "max_side": tasks.max_side, "model": str(model),
            "settings": settings.to_json(), "load": load_options or {}, "heartbeat_seconds": watchdog.heartbeat_seconds}
    calibration = None  # (task id, settings) of the first worker's measurement, while it is awaited
    if deadline is not None and planner.remaining and not planner.speeds.measured_tasks:
        calibration = (_calibration_task(planner, bool(devices)), calibration_settings(settings))
    slots = [_new_slot(out, index, _device(index, devices, spread), plan,
                       calibration if index == 0 else None) for index in range(workers)]
    lost: dict[str, int] = {}  # task id -> times its worker died or hung on it
    solved = sum(record.share_correct for record in mine.values())
    report = _Progress(progress, len(tasks), deadline)

    def finish(task_id: str, record: TaskRecord) -> None:
        nonlocal solved
        planner.done(task_id, record.rung, None if record.failed else record.timings)
        if answers is not None and task_id in answers:
            mark_correct(record, tasks, answers, settings.attempts)
            solved += record.share_correct
        records[task_id] = mine[task_id] = record
        report.task(record, len(mine), solved if answers is not None else None)

    try:
        for slot in slots[:len(planner.remaining)]:  # no more workers than tasks
            _start(slot)
        report.started(slots, devices)
        while True:
            changed = False
            for slot in slots:  # 1. the records that came in
                for record in slot.follower.new_records():
                    if record.task_id in tasks and record.task_id not in mine:
                        finish(record.task_id, record)
                        changed = True
                    if record.task_id == slot.task:
                        slot.task, slot.task_deadline = None, math.inf
            if calibration is not None and (slots[0].ready or not slots[0].alive):
                per_gpu = _calibrate(slots[0], planner, *calibration, report, len(devices))
                calibration = None
                if per_gpu and spread and devices and workers_per_gpu is None:
                    more = [_new_slot(out, len(slots) + index, devices[index % len(devices)], plan, None)
                            for index in range(len(devices) * (per_gpu - 1))]
                    slots += more
                    planner.workers = len(slots)
                    for slot in more[:len(planner.remaining)]:
                        _start(slot)
                    report.started(slots, devices, added=len(more))
            now = time.time()
            if stop_at is not None and now >= stop_at:
                logger.warning("the run's stop time has come: stopping %d worker(s)", sum(s.alive for s in slots))
                break
            for slot in slots:  # 2. the watchdog
                why = _trouble(slot, now, watchdog)
                if why is None:
                    continue
                _stop(slot, watchdog.terminate_seconds, polite=False)
                logger.warning("worker %d %s; see %s", slot.index, why, slot.folder / "worker.log")
                for record in slot.follower.new_records():  # what it wrote before it went
                    if record.task_id in tasks and record.task_id not in mine:
                        finish(record.task_id, record)
                        changed = True
                    if record.task_id == slot.task:
                        slot.task = None
                if slot.task is not None:
                    task_id, slot.task, slot.task_deadline = slot.task, None, math.inf
                    lost[task_id] = lost.get(task_id, 0) + 1
                    if lost[task_id] <= watchdog.retries:
                        planner.requeue(task_id)
                    else:
                        finish(task_id, fallback_record(task_id, f"its worker died or hung {lost[task_id]} times"))
                        changed = True
                if planner.remaining and slot.starts <= watchdog.restarts:
                    _start(slot)
            for slot in slots:  # 3. work for the idle
                while slot.ready and slot.task is None and not slot.stopping:
                    if not planner.remaining:
                        slot.assign({"stop": True})
                        slot.stopping = True
                        break
                    task_id = planner.remaining[0]
                    rung = planner.choose(task_id)
                    planner.start(task_id)
                    if rung == FALLBACK:
                        finish(task_id, fallback_record(task_id, "out of time"))
                        changed = True
                        continue
                    caps = planner.budget(task_id, rung) if deadline is not None else None
                    slot.assign({"task_id": task_id, "rung": rung, "deadline": caps and caps.deadline,
                                 "search_seconds": caps and caps.search_seconds})
                    slot.task, slot.task_deadline = task_id, caps.deadline if caps else math.inf
                    report.assigned(task_id, slot, rung, planner)
            if changed:
                write()
                write_json_atomically(out / SPEEDS_FILE, planner.speeds.to_json())
            running = [slot for slot in slots if slot.task is not None]
            if not planner.remaining and not running:
                break
            if planner.remaining and not any(slot.alive for slot in slots):
                logger.warning("no worker left: %d task(s) get fallback answers", len(planner.remaining))
                for task_id in list(planner.remaining):
                    finish(task_id, fallback_record(task_id, "no worker left"))
                break
            report.tick(len(mine), solved if answers is not None else None)
            time.sleep(poll_seconds)
    finally:
        for slot in slots:  # nothing outlives the parent's loop: finished, stopped or failed
            _stop(slot, watchdog.terminate_seconds, polite=True)
            if slot.log is not None:
                slot.log.close()
    for slot in slots:  # records written between the last look and the stop
        for record in slot.follower.new_records():
            if record.task_id in tasks and record.task_id not in mine:
                finish(record.task_id, record)
    for task_id in [*planner.remaining, *(slot.task for slot in slots if slot.task and slot.task not in mine)]:
        if task_id not in mine:
            finish(task_id, fallback_record(task_id, "out of time"))
    ordered = {task_id: mine[task_id] for task_id in tasks.ids if task_id in mine}
    write_records(out / RECORDS_FILE, ordered.values())
    mine = ordered
    write()
    write_json_atomically(out / SPEEDS_FILE, planner.speeds.to_json())
    report.tick(len(mine), solved if answers is not None else None, force=True)
    run = SolveRun(out, ordered, submission_path, seconds=time.monotonic() - started)
    if answers is not None:
        run.score = write_scores(out, submission_path, ordered, answers, list(tasks.test_counts()), settings.attempts)
    return run


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


def _calibration_task(planner: Planner, gpus: bool) -> str:
    """The task to measure on: on GPUs the longest (its peak memory is the run's), on the CPU the shortest."""
    sizes = sorted(planner.sizes.values(), key=lambda size: (size.training_tokens + size.prompt_tokens, size.task_id))
    return (sizes[-1] if gpus else sizes[0]).task_id


def prepare_model(model: str | os.PathLike, load_options: dict | None, progress: bool = True) -> dict:
    """The load options the workers get: for a base-plus-delta model, its base built once here (or found built)."""
    options = dict(load_options or {})
    if not is_delta_folder(model) or options.get("base_model"):
        return options
    name = json.loads((Path(model) / DELTA_INDEX).read_text())["base"]
    started, built = time.monotonic(), is_built(built_folder(name), name)
    folder = build_base(name, weights=options.get("base_weights"), download=options.get("download_base", True),
                        progress=progress)
    how = "found built" if built else f"built once by the parent in {time.monotonic() - started:.0f} s"
    message = f"base {name}: {how}, {folder}; every worker loads it from there"
    logger.info(message)
    if progress:
        print(message, flush=True)
    return {**options, "base_model": str(folder)}


def _device(index: int, devices: list[str], spread: bool) -> str:
    """Slot ``index``'s CUDA_VISIBLE_DEVICES: round the GPUs when ``spread``, else the first ones, then the CPU."""
    if spread and devices:
        return devices[index % len(devices)]
    return devices[index] if index < len(devices) else ""


def _new_slot(out: Path, index: int, device: str, plan: dict, calibration) -> WorkerSlot:
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


def _calibrate(slot: WorkerSlot, planner: Planner, task_id: str, settings: SolveSettings, report,
               gpus: int) -> int | None:
    """Fold the first worker's measurement into the planner; the workers per GPU its peak memory allows, if known."""
    try:
        measured = json.loads((slot.folder / CALIBRATION_FILE).read_text())
    except (OSError, ValueError):
        measured = {"error": "no calibration.json (the worker died first?)"}
    if measured.get("error") or not measured.get("timings"):
        report.note(f"calibration failed ({measured.get('error')}): the planner starts from assumed speeds")
        return None
    speeds = Speeds()
    speeds.update(planner.sizes[task_id], settings, measured["timings"])
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


def _measure(solver, tasks: TaskSet, calibration: dict, folder: Path) -> None:
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


def _size_of(path: Path) -> int:
    """The bytes of ``path`` up to its last whole line (0 when there is no such file)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return data.rfind(b"\n") + 1


def _stored_speeds(out: Path) -> Speeds:
    """The speeds an earlier run in ``out`` measured, or the assumed ones."""
    try:
        return Speeds.from_json(json.loads((out / SPEEDS_FILE).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return Speeds()


def _start(slot: WorkerSlot) -> None:
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


def _trouble(slot: WorkerSlot, now: float, watchdog: WatchdogSettings) -> str | None:
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


def _stop(slot: WorkerSlot, grace: float, *, polite: bool) -> None:
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


class _Progress:
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


def _sizes(tasks: TaskSet, task_ids: Sequence[str], model, settings: SolveSettings) -> list:
    """Each task's token counts, for the planner; the tokenizer suffices."""
    if not task_ids:
        return []
    encoder = load_encoder(model, max_len=settings.max_len)
    return [measure(tasks[task_id], encoder, settings.max_len) for task_id in task_ids]


class _Heartbeat(threading.Thread):
    """Writes the process's step counter (``progress.steps``) to a file every few seconds (a daemon thread).

    The thread beats while the process lives, so the file's age says only that; the counter in it
    moves only while the main thread works, which is what the parent watches.
    """

    def __init__(self, path: Path, seconds: float):
        super().__init__(daemon=True, name="arc-kit-heartbeat")
        self.path, self.seconds = path, seconds

    def run(self) -> None:
        while True:
            self.path.write_text(f"{progress.steps()}\n")
            time.sleep(self.seconds)


PLAN_FIELDS = {"challenges": str, "model": str, "settings": dict, "load": dict, "max_side": int,
               "heartbeat_seconds": (int, float)}  # what the parent writes into a worker's plan.json


def read_plan(path: Path) -> dict:
    """A worker's ``plan.json`` (``jsonio.read_json``: never a FIFO waited on); InvalidDataError, in one line,
    for one the parent did not write (no object, a field missing or of another kind, an unknown loading option)."""
    plan = read_json(path)
    if not isinstance(plan, dict):
        raise InvalidDataError(["not a worker's plan: it holds no object"], str(path))
    wrong = [f"{key} is {'missing' if key not in plan else 'of the wrong kind'}" for key, kind in PLAN_FIELDS.items()
             if (key in ("challenges", "model", "settings") and key not in plan)
             or (key in plan and (not isinstance(plan[key], kind) or isinstance(plan[key], bool)))]
    options = {option.name for option in dataclasses.fields(LoadSettings)}
    if isinstance(plan.get("load"), dict):
        wrong += [f"load holds {key!r}, no loading option" for key in plan["load"] if key not in options]
    if wrong:
        raise InvalidDataError([f"not a worker's plan: {', '.join(wrong)}"], str(path))
    return plan


def run_worker(plan_path: str | os.PathLike, poll_seconds: float = 0.05) -> int:
    """The body of ``python -m arc_kit worker PLAN``: load the model, then solve what the parent assigns.

    Each assignment names a task, its rung and its caps (a deadline in seconds since the epoch, a
    cap per search); the record is appended to the worker's records file. A stop message, or a
    parent that is gone, ends the worker.
    """
    plan_path = Path(plan_path)
    folder = plan_path.parent
    plan = read_plan(plan_path)
    parent = os.getppid()
    _Heartbeat(folder / HEARTBEAT_FILE, float(plan.get("heartbeat_seconds", 5.0))).start()
    tasks = load_challenges(plan["challenges"], max_side=plan.get("max_side", MAX_SIDE))  # the set's own limit
    settings = SolveSettings.from_json(plan["settings"])
    loaded = load_model(plan["model"], LoadSettings(**plan.get("load", {})))
    solver = Solver.from_loaded(loaded, settings)
    for model in {id(model): model for model in (getattr(loaded, "model", None), getattr(solver, "model", None))
                  if hasattr(model, "register_forward_hook")}.values():
        progress.count_forward_calls(model)  # every forward pass is a step: the heartbeat shows work moving
    rungs = ladder(solver.settings)
    if plan.get("calibrate"):
        _measure(solver, tasks, plan["calibrate"], folder)
    (folder / READY_FILE).write_text(f"{os.getpid()}\n")
    done = 0
    while True:
        progress.tick()  # waiting, but not stuck
        try:
            assignment = json.loads((folder / ASSIGNMENT_FILE).read_text())
        except (FileNotFoundError, ValueError):
            assignment = None
        if assignment is None or assignment.get("sequence", 0) <= done:
            if os.getppid() != parent:  # the parent is gone: nobody reads what this worker would write
                return 1
            time.sleep(poll_seconds)
            continue
        done = assignment["sequence"]
        if assignment.get("stop"):
            return 0
        budget = None
        if assignment.get("deadline") is not None:
            budget = TaskBudget(float(assignment["deadline"]), float(assignment["search_seconds"]))
        record = solve_one(solver, tasks[assignment["task_id"]], int(assignment["rung"]), rungs, budget)
        append_record(folder / RECORDS_FILE, record)


@holding_folder("out")
def solve_job(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, out: str | os.PathLike, *,
              workers: int | None = None, restart: bool = False, deadline: float | None = None,
              load_options: dict | None = None, info: dict | None = None, progress: bool = True,
              workers_per_gpu: int | None = None, adopt: bool = False) -> SolveRun:
    """The method on a task set, in this process or in worker processes: what ``arc-kit solve`` runs.

    ``workers`` (a total) or ``workers_per_gpu`` say how many processes; with neither, several GPUs,
    or one GPU and a deadline (the first worker then measures how many fit), get a worker pool, and
    anything else runs in this process. ``restart`` discards an earlier run in ``out`` first,
    whichever way it was run; otherwise a rerun resumes.
    """
    gpus = visible_gpus()
    if restart:
        clear_run(out)
    if workers is not None:
        pool = workers > 1
    else:
        pool = bool(gpus) and (bool(workers_per_gpu) or len(gpus) > 1 or deadline is not None)
    if pool:
        return solve_in_workers(tasks, model, settings, out, workers=workers, workers_per_gpu=workers_per_gpu,
                                deadline=deadline, load_options=load_options, progress=progress, info=info,
                                adopt=adopt)
    loaded = load_model(model, LoadSettings(**(load_options or {})))
    solver = Solver.from_loaded(loaded, settings)
    return solve(tasks, solver, out, deadline=deadline, progress=progress,
                 info=run_info(model=model_info(loaded), **(info or {})), adopt=adopt)
