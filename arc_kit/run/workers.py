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
``runs.solve`` refuses it.

This module is the parent's loop (``solve_in_workers``) and ``solve_job``; each worker process's
own loop is ``worker_process``' (``run_worker``, importable here too), the parent's view of one
worker (its slot, start, stop, the watchdog's checks) ``worker_slots``', the first worker's
measurement ``calibration``'s, and the lines the parent prints ``pool_report``'s. This module knows
processes, files and the planner; what a task's solving does is the solver's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from arc_kit.data.jsonio import write_json_atomically
from arc_kit.data.submission import build_submission, write_submission
from arc_kit.data.tasks import TaskSet
from arc_kit.method.records import TaskRecord, answers_from_records, fallback_record
from arc_kit.method.solver import Solver
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
from arc_kit.run.expectations import first_speeds, visible_gpu_name
from arc_kit.run.locking import holding_folder
from arc_kit.run.planner import FALLBACK, BudgetSettings, Planner, Speeds, measure
from arc_kit.run.pool_report import PoolReport
from arc_kit.run.record_json import write_records
from arc_kit.run.runs import (
    RECORDS_FILE,
    RUN_KIND,
    SolveRun,
    clear_run,
    mark_correct,
    open_run,
    solve,
    write_scores,
)
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


@holding_folder("out", kind=RUN_KIND, command="solve")  # the parent holds the run folder's lock (its workers
# never ask for it), in a folder a run may write (``runs.RUN_KIND``)
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
    and is rewritten as records come in. ``info`` goes into ``run.json`` (see ``runs.open_run``).
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
    pool = _Pool.opened(tasks, model, settings, out, workers=workers, budget=budget, solutions=solutions,
                        submission_path=submission_path, submission_tasks=submission_tasks, deadline=deadline,
                        stop_at=stop_at, watchdog=watchdog, poll_seconds=poll_seconds, devices=devices, spread=spread,
                        workers_per_gpu=workers_per_gpu)
    pool.write()
    plan = {"challenges": str(challenges_path), "max_side": tasks.max_side, "model": str(model),
            "settings": settings.to_json(), "load": load_options or {}, "heartbeat_seconds": watchdog.heartbeat_seconds}
    pool.make_slots(plan, workers)
    pool.report = PoolReport(progress, len(tasks), deadline)
    try:
        pool.start()
        pool.watch()
    finally:
        pool.stop_all()
    return pool.wind_up(started)


@dataclass
class _Pool:
    """The parent's state while its workers run: the queue (its planner), the slots, the records, the submission.

    One call of ``solve_in_workers`` makes one; its methods are the steps of the parent's loop.
    """

    tasks: TaskSet
    settings: SolveSettings
    out: Path
    planner: Planner
    records: dict[str, TaskRecord]  # every worker folder's, also those of tasks this run does not solve
    mine: dict[str, TaskRecord]  # this run's tasks' records
    answers: TaskSet | None  # the known solutions, if any: tasks get marked as they finish
    submission_path: Path
    covered: TaskSet  # the tasks the submission covers
    deadline: float | None
    watchdog: WatchdogSettings = field(default_factory=WatchdogSettings)
    stop_at: float | None = None
    poll_seconds: float = 1.0
    workers_per_gpu: int | None = None
    devices: list[str] = field(default_factory=list)
    spread: bool = True
    plan: dict = field(default_factory=dict)  # what every worker's plan.json holds
    # (task id, settings) of the first worker's measurement, while it is awaited
    calibration: tuple[str, SolveSettings] | None = None
    slots: list[WorkerSlot] = field(default_factory=list)
    lost: dict[str, int] = field(default_factory=dict)  # task id -> times its worker died or hung on it
    solved: float = 0.0
    report: PoolReport | None = None
    changed: bool = False  # a record came in since the last write

    @classmethod
    def opened(cls, tasks: TaskSet, model, settings: SolveSettings, out: Path, *, workers: int, budget: BudgetSettings,
               solutions: TaskSet | None, submission_path: str | os.PathLike | None,
               submission_tasks: TaskSet | None, deadline: float | None, **options) -> _Pool:
        """The pool of an opened run folder: the records already there, the tasks left queued longest first;
        ``options`` are the pool's other fields (its limits, its devices)."""
        records = merged_records(out)
        answers = solutions if solutions is not None else (tasks if tasks.has_solutions else None)
        if answers is not None and not answers.known_outputs():
            answers = None
        todo = [task_id for task_id in tasks.ids if task_id not in records]
        sizes = _sizes(tasks, todo, model, settings)
        speeds = _stored_speeds(out) or first_speeds(model, settings, sizes,
                                                     visible_gpu_name() if options.get("devices") else None)
        planner = Planner(sizes, settings, deadline if deadline is not None else math.inf, speeds, workers=workers,
                          longest_first=True, budget=budget)
        submission_path = Path(submission_path) if submission_path is not None else out / "submission.json"
        covered = submission_tasks if submission_tasks is not None else tasks
        mine = {task_id: records[task_id] for task_id in tasks.ids if task_id in records}
        return cls(tasks, settings, out, planner, records, mine, answers, submission_path, covered, deadline, **options)

    def make_slots(self, plan: dict, workers: int) -> None:
        """Each worker's folder, plan and slot; the first one's plan asks for the calibration when the planner
        has no speeds measured and a deadline to meet."""
        self.plan = plan
        if self.deadline is not None and self.planner.remaining and not self.planner.speeds.measured_tasks:
            self.calibration = (calibration_task(self.planner, bool(self.devices)), calibration_settings(self.settings))
        self.slots = [new_slot(self.out, index, slot_device(index, self.devices, self.spread), plan,
                               self.calibration if index == 0 else None) for index in range(workers)]
        self.solved = sum(record.share_correct for record in self.mine.values())

    def write(self) -> None:
        """The submission of every covered task, from the records so far (fallback answers for the others)."""
        write_submission(self.submission_path, build_submission(self.covered, answers_from_records(self.mine),
                                                                attempts=self.settings.attempts), self.covered)

    def finish(self, task_id: str, record: TaskRecord) -> None:
        """Take ``record`` as ``task_id``'s: the planner learns its speeds, the answers mark it, the report shows it."""
        self.planner.done(task_id, record.rung, None if record.failed else record.timings)
        if self.answers is not None and task_id in self.answers:
            mark_correct(record, self.tasks, self.answers, self.settings.attempts)
            self.solved += record.share_correct
        self.records[task_id] = self.mine[task_id] = record
        self.report.task(record, len(self.mine), self.solved_so_far)
        self.changed = True

    @property
    def solved_so_far(self) -> float | None:
        """The tasks solved so far (shares of a task count), when the answers are known."""
        return self.solved if self.answers is not None else None

    def start(self) -> None:
        """Start the workers, no more of them than tasks."""
        for slot in self.slots[:len(self.planner.remaining)]:  # no more workers than tasks
            start_worker(slot)
        self.report.started(self.slots, self.devices)

    def watch(self) -> None:
        """The parent's loop: records in, the calibration, the stop time, the watchdog, work for the idle, writes."""
        while True:
            self.changed = False
            for slot in self.slots:  # 1. the records that came in
                self.take_records(slot)
            if self.calibration is not None and (self.slots[0].ready or not self.slots[0].alive):
                self.calibrate()
            now = time.time()
            if self.stop_at is not None and now >= self.stop_at:
                logger.warning("the run's stop time has come: stopping %d worker(s)", sum(s.alive for s in self.slots))
                break
            for slot in self.slots:  # 2. the watchdog
                why = trouble(slot, now, self.watchdog)
                if why is not None:
                    self.give_up_on(slot, why)
            for slot in self.slots:  # 3. work for the idle
                self.feed(slot)
            if self.changed:
                self.write()
                self.write_speeds()
            if self.is_over():
                break
            self.report.tick(len(self.mine), self.solved_so_far)
            time.sleep(self.poll_seconds)

    def take_records(self, slot: WorkerSlot) -> None:
        """The records ``slot``'s worker appended since the last look; its task is done once its record is in."""
        for record in slot.follower.new_records():
            if record.task_id in self.tasks and record.task_id not in self.mine:
                self.finish(record.task_id, record)
            if record.task_id == slot.task:
                slot.task, slot.task_deadline = None, math.inf

    def calibrate(self) -> None:
        """Fold the first worker's measurement into the planner; start as many more workers as its memory allows."""
        per_gpu = calibrate(self.slots[0].folder, self.planner, *self.calibration, self.report, len(self.devices))
        self.calibration = None
        if per_gpu and self.spread and self.devices and self.workers_per_gpu is None:
            more = [new_slot(self.out, len(self.slots) + index, self.devices[index % len(self.devices)], self.plan,
                             None) for index in range(len(self.devices) * (per_gpu - 1))]
            self.slots += more
            self.planner.workers = len(self.slots)
            for slot in more[:len(self.planner.remaining)]:
                start_worker(slot)
            self.report.started(self.slots, self.devices, added=len(more))

    def give_up_on(self, slot: WorkerSlot, why: str) -> None:
        """Stop a dead or hung worker; keep what it wrote; its task back to the queue (or fallback answers); restart."""
        stop_worker(slot, self.watchdog.terminate_seconds, polite=False)
        logger.warning("worker %d %s; see %s", slot.index, why, slot.folder / "worker.log")
        self.take_records(slot)  # what it wrote before it went
        if slot.task is not None:
            task_id, slot.task, slot.task_deadline = slot.task, None, math.inf
            self.lost[task_id] = self.lost.get(task_id, 0) + 1
            if self.lost[task_id] <= self.watchdog.retries:
                self.planner.requeue(task_id)
            else:
                self.finish(task_id, fallback_record(task_id, f"its worker died or hung {self.lost[task_id]} times"))
        if self.planner.remaining and slot.starts <= self.watchdog.restarts:
            start_worker(slot)

    def feed(self, slot: WorkerSlot) -> None:
        """Work for a ready, idle worker: the next task at the rung the time left allows, or stop when none is left."""
        while slot.ready and slot.task is None and not slot.stopping:
            if not self.planner.remaining:
                slot.assign({"stop": True})
                slot.stopping = True
                break
            task_id = self.planner.remaining[0]
            rung = self.planner.choose(task_id)
            self.planner.start(task_id)
            if rung == FALLBACK:
                self.finish(task_id, fallback_record(task_id, "out of time"))
                continue
            caps = self.planner.budget(task_id, rung) if self.deadline is not None else None
            slot.assign({"task_id": task_id, "rung": rung, "deadline": caps and caps.deadline,
                         "search_seconds": caps and caps.search_seconds})
            slot.task, slot.task_deadline = task_id, caps.deadline if caps else math.inf
            self.report.assigned(task_id, slot, rung, self.planner)

    def is_over(self) -> bool:
        """Whether the loop ends: nothing queued or running, or tasks queued and no worker left (fallbacks for them)."""
        running = [slot for slot in self.slots if slot.task is not None]
        if not self.planner.remaining and not running:
            return True
        if self.planner.remaining and not any(slot.alive for slot in self.slots):
            logger.warning("no worker left: %d task(s) get fallback answers", len(self.planner.remaining))
            for task_id in list(self.planner.remaining):
                self.finish(task_id, fallback_record(task_id, "no worker left"))
            return True
        return False

    def write_speeds(self) -> None:
        write_json_atomically(self.out / SPEEDS_FILE, self.planner.speeds.to_json())

    def stop_all(self) -> None:
        """Nothing outlives the parent's loop: finished, stopped or failed, every worker is stopped."""
        for slot in self.slots:
            stop_worker(slot, self.watchdog.terminate_seconds, polite=True)
            if slot.log is not None:
                slot.log.close()

    def wind_up(self, started: float) -> SolveRun:
        """The last records, fallback answers for the tasks left, the records in task order, the last writes."""
        for slot in self.slots:  # records written between the last look and the stop
            for record in slot.follower.new_records():
                if record.task_id in self.tasks and record.task_id not in self.mine:
                    self.finish(record.task_id, record)
        running = [slot.task for slot in self.slots if slot.task and slot.task not in self.mine]
        for task_id in [*self.planner.remaining, *running]:
            if task_id not in self.mine:
                self.finish(task_id, fallback_record(task_id, "out of time"))
        ordered = {task_id: self.mine[task_id] for task_id in self.tasks.ids if task_id in self.mine}
        write_records(self.out / RECORDS_FILE, ordered.values())
        self.mine = ordered
        self.write()
        self.write_speeds()
        self.report.tick(len(self.mine), self.solved_so_far, force=True)
        run = SolveRun(self.out, ordered, self.submission_path, seconds=time.monotonic() - started)
        if self.answers is not None:
            run.score = write_scores(self.out, self.submission_path, ordered, self.answers,
                                     list(self.tasks.test_counts()), self.settings.attempts)
        return run


def _sizes(tasks: TaskSet, task_ids: Sequence[str], model, settings: SolveSettings) -> list:
    """Each task's token counts, for the planner; the tokenizer suffices."""
    if not task_ids:
        return []
    encoder = load_encoder(model, max_len=settings.max_len)
    return [measure(tasks[task_id], encoder, settings.max_len) for task_id in task_ids]


def _stored_speeds(out: Path) -> Speeds | None:
    """The speeds an earlier run in ``out`` measured, or None."""
    try:
        return Speeds.from_json(json.loads((out / SPEEDS_FILE).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


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


@holding_folder("out", kind=RUN_KIND, command="solve")
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


__all__ = ["SPEEDS_FILE", "WatchdogSettings", "merged_records", "prepare_model", "run_worker",
           "solve_in_workers", "solve_job", "visible_gpus"]  # run_worker: what ``python -m arc_kit worker`` calls
