"""A run's tasks through the one pool of workers, and the one loop that keeps its run folder: the driver.

``run_in_pool`` is how every job that works on a task set runs it: ``solve``, ``dry-run`` and the Kaggle job
(``jobs``), the paper's tables (``experiments.tables``). What a worker does on a task and what the run keeps of it
are the caller's ``Outputs``: a solve at a rung within caps, kept as a submission, scores and a report
(``jobs.SolveOutputs``); a table's stages, kept as the table. The workers are Ray actors (``workers.RayWorkers``:
this machine's own Ray, or a cluster's at ``address``) or, where one worker suffices (``workers.uses_ray``), this
process with its solver loaded here (``workers.InProcess``); the same loop drives either.

Everything given is checked before the run folder is claimed (the model's folder and tokenizer, its weights whole,
the load options, the address, Ray's import; in this process the model is loaded). The folder is opened
(``runs.open_run``: one of other settings is refused before Ray starts), its records read, and the tasks left
queued (``planner.Planner``: in their order for one worker without a deadline, else cheapest first for one worker
and longest first for several, priced with the speeds measured so far, ``speeds.json``). The loop: a loaded, idle
worker gets the next task at the rung the time left allows, with the task's caps (a table's tasks at rung 0,
uncapped, none started past the deadline). ``finish`` takes every finished task, however it ran: the planner learns
its speeds, its record is appended to the records file, the submission (or the table) is rewritten and its line
printed. The watchdog (``workers.Slot.trouble``) gives up on a worker whose process died (or whose node went), that
has not loaded its model after ``load_seconds``, whose task runs past its deadline by as long again as it was given,
or whose engine made no step for ``stall_seconds`` (a SIGSTOP, a hang; ``actors.SlotActor.steps``): it is killed,
its task goes back to the queue once (then gets fallback answers) and its slot gets a fresh worker (up to
``restarts`` times). At ``stop_at`` every worker is stopped. The loop's end (``wind_up``): the tasks left get
fallback answers, the records are rewritten in task order, and the last writes follow (``Outputs.end``: the
submission, the scores and the report; or the table). With a deadline and no speeds measured, the first tasks are
priced with guessed speeds; the first task to finish measures them (``first_task_line``), the queue is priced again,
and its peak GPU memory says how many more actors share each GPU. Every task's result depends only on the seed and
the task, so a pool gives the submission one process gives; a rerun resumes.

Ray's own death is a fault like an actor's, of every actor at once (``ray_is_there``, once a poll): the run stops
at once with one line (``RayLostError``), its records and its submission, complete and valid since the start,
kept and no fallback record written for the tasks left, so that the same command run again resumes and does them
(``workers.RayWorkers.lost`` says how Ray is looked at, and why the run does not go on in one process).

This module knows the planner, the run folder and the workers' calls; nothing of Ray's start or a worker's side.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import sys
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from arc_kit.data.jsonio import read_json, write_json_atomically
from arc_kit.data.tasks import TaskSet
from arc_kit.method.solver import Solver
from arc_kit.model.devices import visible_gpus
from arc_kit.model.description import read_model_folder
from arc_kit.names import shown
from arc_kit.progress import progress_bar
from arc_kit.provenance import run_info
from arc_kit.run.expectations import first_speeds, first_task_line, speeds_for_model, visible_gpu_name
from arc_kit.run.locking import hold_folder
from arc_kit.run.planner import FALLBACK, Planner, Speeds, TaskSize, hours, measure
from arc_kit.run.ray_session import RayLostError, ray_session
from arc_kit.run.record_json import append_record, from_json, read_records, stream_records, write_records
from arc_kit.run.runs import RUN_KIND, SPEEDS_FILE, TASKS_FILE, check_run_folder, open_run
from arc_kit.run.workers import InProcess, RayWorkers, Slot, checked_for_ray, loaded_here, uses_ray
from arc_kit.settings import LoadSettings, PoolSettings, SolveSettings

logger = logging.getLogger(__name__)


class Outputs(Protocol):
    """What a run does on each task and keeps of it (``jobs.SolveOutputs``, ``experiments.tables.TableOutputs``)."""

    command: str  # the command that runs it: in the run folder's marker, on its progress bar
    records_file: str  # its records' file in the run folder
    record_kind: type  # a record's dataclass (``record_json``)
    work: Any  # a worker's side, sent to each: ``work(solver, task, rung, budget)`` -> the task's record
    ladder: bool  # the planner's rungs and caps apply (a solve); else rung 0, uncapped (a table)

    def fallback(self, task_id: str, why: str) -> Any | None: ...  # a task given no model work: its record, or None
    def took(self, record) -> float | None: ...  # a record marked against the known answers: its share right, or None
    def measured(self, record) -> tuple[int, dict | None]: ...  # its rung, and the timings the planner learns from
    def line(self, record) -> str: ...  # its progress line
    def write(self, records: dict) -> None: ...  # the submission (or the table) of the records so far
    def end(self, records: dict, seconds: float) -> Any: ...  # the last writes: what the run returns


def run_in_pool(tasks: TaskSet, outputs: Outputs, settings: SolveSettings, out: str | os.PathLike, *,
                model: str | os.PathLike | None = None, solver: Solver | None = None, workers: int | None = None,
                workers_per_gpu: int | None = None, address: str | None = None, shared_model: bool = False,
                deadline: float | None = None, stop_at: float | None = None, load_options: dict | None = None,
                progress: bool = True, info: dict | None = None, pool: PoolSettings = PoolSettings(),
                restart: bool = False, ray: bool | None = None):
    """``tasks`` through the pool into run folder ``out`` (the module's docstring); ``outputs.end``'s result.

    With ``solver`` (loaded already, its settings the run's) one worker runs in this process; else the model in folder
    ``model``: on Ray actors where ``ray`` (default: ``workers.uses_ray``) says so (``shared_model``: its path is good
    on every node of the cluster at ``address``, so nothing of it is sent), else loaded here. ``workers`` (a total;
    with ``address``, over the cluster's GPUs, and those beyond them on CPUs) wins over ``workers_per_gpu``; with
    neither, one actor per GPU starts (one on a CPU without GPUs), and with a deadline the first measures how many
    more fit. ``deadline`` (seconds since the epoch) is when the planner wants the work done; ``stop_at`` is when
    every worker is stopped, whatever it does (both ``runs.run_clock``'s; without a stop time, each task's own deadline
    and the watchdog bound the workers). ``info`` goes into
    ``run.json``; ``restart`` as ``runs.open_run`` takes it. The driver holds the folder's lock throughout, and
    alone writes it.
    """
    out, command = Path(out), outputs.command
    check_run_folder(out, command, restart=restart)  # a folder the kit may not write, or in use: refused at once
    where: dict[str, Any] = {"workers": 1}
    encoder = None
    if solver is None and not (uses_ray(workers, workers_per_gpu, address, deadline) if ray is None else ray):
        solver, where = loaded_here(model, settings, load_options)  # refused now, before the folder is claimed
    if solver is None:
        folder = read_model_folder(model, LoadSettings(**(load_options or {})).base_model)  # options the actors take
        settings = settings.replace(max_len=folder.token_budget(settings.max_len))  # as each actor resolves it
        encoder, load_options, where = checked_for_ray(model, settings, load_options, workers=workers,
                                                       workers_per_gpu=workers_per_gpu, address=address,
                                                       progress=progress)
    else:
        settings = solver.settings
    started = time.monotonic()
    with hold_folder(out, RUN_KIND, command):
        open_run(out, settings, run_info(**{"tasks": len(tasks), **where, **(info or {})}), restart=restart,
                 command=command)
        # the tasks it solves, for ``estimates`` where its data set does not load elsewhere (Kaggle's hidden test file)
        write_json_atomically(out / TASKS_FILE, TaskSet(tasks.tasks(), tasks.name).challenges_json())
        run = _Pool.opened(tasks, outputs, settings, out, encoder, model=model, solver=solver, workers=where["workers"],
                           deadline=deadline, stop_at=stop_at, limits=pool, progress=progress)
        try:
            if run.planner.remaining:  # a rerun with nothing left to do needs no worker
                run.begin(solver, model, load_options, workers=workers, workers_per_gpu=workers_per_gpu,
                          address=address, shared_model=shared_model)
            return run.wind_up(started)
        finally:
            run.bar.close()


@dataclass
class _Pool:
    """The driver's state while its workers run: the queue (its planner), the slots, the records, the outputs.

    One call of ``run_in_pool`` makes one; its methods are the steps of the driver's loop.
    """

    tasks: TaskSet
    outputs: Outputs
    settings: SolveSettings  # the run's, as its workers' solvers resolve them
    out: Path
    planner: Planner
    mine: dict  # this run's tasks' records (the folder's others stay in its file: ``wind_up``)
    deadline: float | None
    bar: Any  # the progress bar over the tasks left
    stop_at: float | None = None
    limits: PoolSettings = field(default_factory=PoolSettings)
    progress: bool = True
    priced: bool = False  # the planner's speeds are real estimates (``speeds.json`` is kept)
    workers: Any = None  # ``workers.RayWorkers`` or ``workers.InProcess``
    slots: list[Slot] = field(default_factory=list)
    waiting: dict = field(default_factory=dict)  # each awaited answer: (its slot, what it answers)
    measuring: bool = False  # nothing measured yet: the first finished task sets the speeds and actors per GPU
    lost: dict[str, int] = field(default_factory=dict)  # task id -> times its worker died or hung on it
    solved: float | None = None  # the share right so far, where the answers are known
    ray_looked_at: float = 0.0  # when Ray itself was last looked at (``ray_is_there``)

    @classmethod
    def opened(cls, tasks: TaskSet, outputs: Outputs, settings: SolveSettings, out: Path, encoder, *, model, solver,
               workers: int, deadline: float | None, progress: bool, **options) -> _Pool:
        """The pool of an opened run folder: the records already there, the tasks left queued (the module's
        docstring), the outputs written from the records so far."""
        records = read_records(out / outputs.records_file, outputs.record_kind, tasks.ids)  # this run's, line by line
        todo = [task_id for task_id in tasks.ids if task_id not in records]
        if records:  # this run's tasks: read for them alone
            logger.warning("resuming: %d of %d tasks already done in %s", len(tasks) - len(todo), len(tasks), out)
        priced = outputs.ladder and (deadline is not None or solver is None)  # else they run in their order
        encoder = solver.encoder if priced and solver is not None else encoder
        sizes = [measure(tasks[task_id], encoder, settings.max_len) if priced else TaskSize(task_id, 0, 0, 0, 0)
                 for task_id in todo]
        speeds = Speeds()
        if priced:
            speeds = _stored_speeds(out) or (speeds_for_model(solver.model, settings, sizes) if solver is not None
                                             else first_speeds(model, settings, sizes,
                                                               visible_gpu_name() if visible_gpus() else None))
        planner = Planner(sizes, settings, deadline if deadline is not None else math.inf, speeds, workers=workers,
                          longest_first=solver is None)
        mine = {task_id: records[task_id] for task_id in tasks.ids if task_id in records}
        # in one process a bar counts the tasks beside their lines; Ray's actors' runs (a cluster's, a notebook's
        # log) print a line as each task is handed out instead, and their lost Ray or SIGTERM is one line alone
        bar = progress_bar(total=len(todo), desc=outputs.command, unit="task", leave=False,
                           disable=not progress or solver is None)
        pool = cls(tasks, outputs, settings, out, planner, mine, deadline, bar, progress=progress, priced=priced,
                   **options)
        shares = [share for share in map(outputs.took, mine.values()) if share is not None]
        pool.solved = sum(shares) if shares else None
        outputs.write(mine)  # complete at once: the records' answers, fallbacks for the rest
        return pool

    # -- the start ------------------------------------------------------------------------------------------------

    def begin(self, solver: Solver | None, model, load_options: dict, *, workers: int | None,
              workers_per_gpu: int | None, address: str | None, shared_model: bool) -> None:
        """The workers started (this process's one, or Ray's actors in a session of Ray's), the loop run, every
        worker stopped however it ends."""
        self.measuring = self.priced and self.deadline is not None and not self.planner.speeds.measured_tasks
        if solver is not None:
            self.run_with(InProcess(solver, self.outputs.work))
            return
        cpus = max(os.cpu_count() or 1, workers or 1)  # this machine's Ray: room for every CPU slot asked for
        gpus = 0 if address else len(visible_gpus())
        with ray_session(self.out, address=address, cpus=cpus, gpus=gpus, settings=self.limits) as session:
            self.run_with(RayWorkers(session, model, load_options, self.settings, self.outputs.work,
                                     self.limits, workers=workers, workers_per_gpu=workers_per_gpu, address=address,
                                     shared_model=shared_model))

    def run_with(self, workers) -> None:
        """The loop on ``workers``' slots, which are all stopped however it ends."""
        self.workers = workers
        try:
            self.add_slots(workers.first)
            self.watch()
        finally:
            workers.close(self.slots)
            self.waiting = {}

    def add_slots(self, added: list[Slot]) -> None:
        """Take the slots ``added`` and start their workers, no more of them than tasks queued."""
        self.slots += added
        self.planner.workers = len(self.slots)
        for slot in added[:len(self.planner.remaining)]:
            self.start(slot)
        if self.workers.remote:
            self.note(self.workers.started(self.slots, len(added)))

    def start(self, slot: Slot) -> None:
        """Start (or start again) ``slot``'s worker and ask it to load its solver."""
        slot.loaded, slot.task, slot.steps, slot.asking = None, None, -1, False
        slot.starts, slot.started_at = slot.starts + 1, time.time()
        self.waiting[self.workers.start(slot)] = (slot, "load")

    # -- the loop -------------------------------------------------------------------------------------------------

    def watch(self) -> None:
        """The driver's loop: answers in, the stop time, the watchdog, work for the idle, steps asked."""
        while True:
            self.ray_is_there(time.time())  # before Ray is asked anything more
            self.take_answers()
            self.workers.check_signals()  # a SIGTERM that came meanwhile, raised here: outside Ray's calls
            now = time.time()
            if self.stop_at is not None and now >= self.stop_at:
                logger.warning("the run's stop time has come: stopping %d worker(s)",
                               sum(slot.actor is not None for slot in self.slots))
                break
            for slot in self.slots:
                why = slot.trouble(now, self.limits)
                if why is not None:
                    self.give_up_on(slot, why)
            for slot in self.slots:
                self.feed(slot)
            self.ask_steps(now)
            if self.is_over():
                break

    def take_answers(self) -> None:
        """Wait up to ``poll_seconds`` for an answer, then take every answer in (a task's record, a load, steps)."""
        pending = list(self.waiting)
        if not pending:
            time.sleep(self.limits.poll_seconds)
            return
        for reference in self.workers.ready(pending, self.limits.poll_seconds):
            if reference in self.waiting:  # not dropped by a give-up on its slot since
                self.take(reference, *self.waiting.pop(reference))

    def take(self, reference, slot: Slot, what: str) -> None:
        """One answer of ``slot``'s worker; a worker that died (or whose call raised) is given up on."""
        try:
            value = self.workers.value(reference)
        except Exception as error:  # noqa: BLE001 - a dead actor, a lost node, a call that raised: all the same here
            self.give_up_on(slot, _what_happened(error))
            return
        now = time.time()
        if what == "steps":
            slot.asking = False
            if value != slot.steps:
                slot.steps, slot.moved_at = value, now
        elif what == "load":
            slot.loaded, slot.moved_at = value, now
            logger.info("worker %d loaded the model: pid %s on node %s, GPU %r", slot.index, value["pid"],
                        value["node"][:12], value["device"])
            if value["niceness"] > self.workers.niceness:  # a cluster's Ray, which it may not override
                logger.warning("worker %d runs at niceness %d, below the driver's priority: its Ray starts workers "
                               "so (`ray start --head --system-config='{\"worker_niceness\": 0}'` does not)",
                               slot.index, value["niceness"])
        else:
            task_id, slot.task, slot.task_deadline = slot.task, None, math.inf
            record = from_json(self.outputs.record_kind, value["record"])
            if task_id in self.tasks and task_id not in self.mine:
                self.finish(task_id, record)
                if self.measuring:
                    self.measured(task_id, self.outputs.measured(record)[1], value["memory"])

    def measured(self, task_id: str, timings: dict | None, memory: dict) -> None:
        """The first finished task's measurement: the queue priced again with its speeds; as many more actors started
        as its peak memory allows."""
        self.measuring = False
        self.planner.calibrate(self.planner.speeds)
        per_gpu, line = first_task_line(self.planner, task_id, timings, memory, self.workers.gpus)
        self.note(line)
        self.add_slots(self.workers.more_slots(per_gpu, first=len(self.slots)))

    def ray_is_there(self, now: float) -> None:
        """Ray's own death is a fault like an actor's, of every actor at once: its GCS or this node's raylet found
        gone (looked at once a poll) stops the run with ``RayLostError``, its records and its complete submission
        kept, no fallback record written for the tasks left: a rerun resumes and does them."""
        if now - self.ray_looked_at < self.limits.poll_seconds:
            return
        self.ray_looked_at = now
        lost = self.workers.lost()
        if lost is not None:  # every record in came with its write, in the loop's last turn
            raise RayLostError(f"Ray was lost mid-run ({lost}): stopped with {len(self.mine)} of {len(self.tasks)} "
                               f"task(s) done; {self.out} keeps their records and a complete submission (fallback "
                               "answers for the rest): run the same command again to go on")

    def give_up_on(self, slot: Slot, why: str) -> None:
        """Kill a dead or hung worker; its task back to the queue (or fallback answers); a fresh worker."""
        self.waiting = {reference: (owner, what) for reference, (owner, what) in self.waiting.items()
                        if owner is not slot}
        self.workers.kill(slot, hung=True)
        pid = slot.loaded["pid"] if slot.loaded else None
        logger.warning("worker %d%s %s (its output: Ray's logs, worker-*-%s.err)", slot.index,
                       f" (pid {pid})" if pid else "", why, pid or "PID")
        task_id, slot.task, slot.task_deadline = slot.task, None, math.inf
        if task_id is not None:
            self.lost[task_id] = self.lost.get(task_id, 0) + 1
            if self.lost[task_id] <= self.limits.retries:
                self.planner.requeue(task_id)
            else:
                self.fall_back(task_id, f"its worker died or hung {self.lost[task_id]} times")
        if self.planner.remaining and slot.starts <= self.limits.restarts:
            self.start(slot)

    def feed(self, slot: Slot) -> None:
        """Work for a loaded, idle worker: the next task at the rung the time left allows, with its caps."""
        while slot.idle and self.planner.remaining:
            task_id = self.planner.remaining[0]
            rung = self.planner.choose(task_id) if self.outputs.ladder else \
                0 if self.deadline is None or time.time() < self.deadline else FALLBACK
            self.planner.start(task_id)
            if rung == FALLBACK:
                self.fall_back(task_id, "out of time")
                continue
            caps = self.planner.budget(task_id, rung) if self.deadline is not None and self.outputs.ladder else None
            slot.task, slot.task_started, slot.task_deadline = task_id, time.time(), caps.deadline if caps else math.inf
            if self.progress and self.workers.remote:
                cap = "" if caps is None else f", capped at {hours(caps.deadline - time.time())}"
                left = self.planner.estimate(self.planner.remaining, rung) / self.planner.workers
                ends = "" if self.deadline is None else f" (deadline in {hours(self.deadline - time.time())})"
                self.say(f"task {shown(task_id)} -> worker {slot.index}: rung {rung}{cap}; "
                         f"{len(self.planner.remaining)} task(s) queued, projected to finish in {hours(left)}{ends}")
            seconds = None if caps is None else (caps.deadline - time.time(), caps.search_share)
            self.waiting[self.workers.call(slot, "solve", self.tasks[task_id], rung, seconds)] = (slot, "solve")

    def ask_steps(self, now: float) -> None:
        """Ask every loaded worker for its engine steps, at most once a poll (a stopped one never answers)."""
        for slot in self.slots:
            if slot.actor is not None and slot.loaded is not None and not slot.asking \
                    and now - slot.asked_at >= self.limits.poll_seconds:
                slot.asking, slot.asked_at = True, now
                self.waiting[self.workers.call(slot, "steps")] = (slot, "steps")

    def finish(self, task_id: str, record) -> None:
        """A finished task, however it ran: the planner learns its speeds, the answers mark it, it is appended to the
        records file, the submission (or the table) is rewritten, and its line printed."""
        self.planner.done(task_id, *self.outputs.measured(record))
        share = self.outputs.took(record)
        if share is not None:
            self.solved = (self.solved or 0.0) + share
        self.mine[task_id] = record
        append_record(self.out / self.outputs.records_file, record)  # never through a link (``outputs.appending``)
        self.outputs.write(self.mine)
        if self.priced:
            # with the workers that measured them: an estimate shares one worker's seconds among as many
            write_json_atomically(self.out / SPEEDS_FILE, {**self.planner.speeds.to_json(), "workers": len(self.slots)})
        if self.deadline is not None:
            self.bar.set_description(f"{self.outputs.command} ({hours(max(0.0, self.deadline - time.time()))} left)",
                                     refresh=False)
        if self.solved is not None:
            self.bar.set_postfix(solved=f"{self.solved:g}/{len(self.mine)}", refresh=False)
        self.bar.update(1)
        self.say(self.outputs.line(record))

    def fall_back(self, task_id: str, why: str) -> None:
        """``task_id`` without model work: its fallback record finished, where its outputs have one."""
        record = self.outputs.fallback(task_id, why)
        if record is not None:
            self.finish(task_id, record)

    def is_over(self) -> bool:
        """Whether the loop ends: nothing queued or running, or tasks queued and no worker left (fallbacks for them)."""
        running = [slot for slot in self.slots if slot.task is not None]
        if not self.planner.remaining and not running:
            return True
        if self.planner.remaining and not any(slot.actor is not None for slot in self.slots):
            logger.warning("no worker left: %d task(s) get fallback answers", len(self.planner.remaining))
            for task_id in list(self.planner.remaining):
                self.planner.start(task_id)
                self.fall_back(task_id, "no worker left")
            return True
        return False

    def say(self, line: str) -> None:
        if self.progress:
            self.bar.write(line)  # above the bar, where there is one; else printed
            sys.stdout.flush()

    def note(self, message: str) -> None:
        logger.info(message)
        self.say(message)

    def wind_up(self, started: float):
        """The loop's end: fallback answers for the tasks left, the records in task order, the last writes."""
        running = [slot.task for slot in self.slots if slot.task]
        for task_id in [*self.planner.remaining, *running]:
            if task_id not in self.mine:
                self.fall_back(task_id, "out of time")
        ordered = {task_id: self.mine[task_id] for task_id in self.tasks.ids if task_id in self.mine}
        path, kind = self.out / self.outputs.records_file, self.outputs.record_kind
        others = (record for record in stream_records(path, kind)  # other runs' tasks, as they stand, a line at a
                  if record.task_id not in ordered)  # time from the file replaced (a line that is none is said)
        write_records(path, itertools.chain(ordered.values(), others))
        self.mine = ordered
        self.outputs.write(ordered)
        return self.outputs.end(ordered, time.monotonic() - started)


def _what_happened(error: BaseException) -> str:
    """One line on a worker's end: what its call raised, or how it died."""
    cause = getattr(error, "cause", None)  # a call that raised: Ray's error (and ``workers.CallFailed``) carries it
    if isinstance(cause, BaseException):
        return f"failed: {type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[0]}"
    return f"died: {(str(error).strip().splitlines() or [type(error).__name__])[0].rstrip('.')}"


def _stored_speeds(out: Path) -> Speeds | None:
    """The speeds an earlier run in ``out`` measured, or None."""
    with suppress(OSError, ValueError, TypeError):
        return Speeds.from_json(read_json(out / SPEEDS_FILE))
    return None
