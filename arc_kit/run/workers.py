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

This module is the parent's loop (``solve_in_workers``) and ``solve_job``; each worker process's
own loop is ``worker_process``' (``run_worker``, importable here too), the parent's view of one
worker (its slot, start, stop, the watchdog's checks) ``worker_slots``', and the first worker's
measurement ``calibration``'s. This module knows processes, files and the planner; what a task's
solving does is the solver's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path

from arc_kit.data.jsonio import write_json_atomically
from arc_kit.data.submission import build_submission, write_submission
from arc_kit.data.tasks import TaskSet
from arc_kit.locking import holding_folder
from arc_kit.model.bases import build_base, built_folder, is_built
from arc_kit.model.loading import (
    DELTA_INDEX,
    LoadSettings,
    is_delta_folder,
    load_encoder,
    load_model,
    model_info,
    token_budget_of,
)
from arc_kit.provenance import run_info
from arc_kit.run.calibration import calibrate, calibration_settings, calibration_task
from arc_kit.run.planner import FALLBACK, BudgetSettings, Planner, Speeds, hours, measure
from arc_kit.run.records import TaskRecord, answers_from_records, fallback_record, write_records
from arc_kit.run.runs import (
    RECORDS_FILE,
    SolveRun,
    clear_run,
    mark_correct,
    open_run,
    solve,
    task_line,
    write_scores,
)
from arc_kit.run.solver import Solver
from arc_kit.run.worker_process import run_worker
from arc_kit.run.worker_slots import (
    WatchdogSettings,
    WorkerSlot,
    merged_records,
    new_slot,
    slot_device,
    start_worker,
    stop_worker,
    trouble,
    visible_gpus,
)
from arc_kit.settings import SolveSettings

logger = logging.getLogger(__name__)

SPEEDS_FILE = "speeds.json"  # the speeds measured so far (a rerun starts from them)


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
        calibration = (calibration_task(planner, bool(devices)), calibration_settings(settings))
    slots = [new_slot(out, index, slot_device(index, devices, spread), plan,
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
            start_worker(slot)
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
                per_gpu = calibrate(slots[0].folder, planner, *calibration, report, len(devices))
                calibration = None
                if per_gpu and spread and devices and workers_per_gpu is None:
                    more = [new_slot(out, len(slots) + index, devices[index % len(devices)], plan, None)
                            for index in range(len(devices) * (per_gpu - 1))]
                    slots += more
                    planner.workers = len(slots)
                    for slot in more[:len(planner.remaining)]:
                        start_worker(slot)
                    report.started(slots, devices, added=len(more))
            now = time.time()
            if stop_at is not None and now >= stop_at:
                logger.warning("the run's stop time has come: stopping %d worker(s)", sum(s.alive for s in slots))
                break
            for slot in slots:  # 2. the watchdog
                why = trouble(slot, now, watchdog)
                if why is None:
                    continue
                stop_worker(slot, watchdog.terminate_seconds, polite=False)
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
                    start_worker(slot)
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
            stop_worker(slot, watchdog.terminate_seconds, polite=True)
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


def _stored_speeds(out: Path) -> Speeds:
    """The speeds an earlier run in ``out`` measured, or the assumed ones."""
    try:
        return Speeds.from_json(json.loads((out / SPEEDS_FILE).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return Speeds()


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


__all__ = ["SPEEDS_FILE", "WatchdogSettings", "merged_records", "prepare_model", "progress_line", "run_worker",
           "solve_in_workers", "solve_job", "visible_gpus"]  # run_worker: what ``python -m arc_kit worker`` calls
