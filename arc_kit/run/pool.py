"""A run's tasks on Ray: an actor per slot, the queue and the watchdog in the driver, which alone writes the run folder.

The pool's driver (``solve_in_pool``; ``jobs.solve_job`` says when a run needs one) checks what it is given (the
model's folder and tokenizer, its weights whole, the load options, the address, Ray's import) before it claims the
run folder, opens it (``runs.open_run``: one of other settings is refused before Ray starts), takes the records there
(``runs.run_records``: an earlier kit's worker folders too) and queues the tasks left longest first
(``planner.Planner``, priced with the speeds measured so far, ``speeds.json``). It starts Ray
(``ray_session``) and an actor per slot (``slot_layout``: round the cluster's GPUs, several sharing one, or on
CPUs), each loading the model once (``actors``). Its loop: a loaded, idle actor gets the next task with
the rung the time left allows and the task's caps; a finished task's record is appended to
``records.jsonl``, its timings refine the planner's speeds, and ``submission.json`` is rewritten
(complete and valid at all times). The watchdog gives up on an actor whose process died (or whose node
went), that has not loaded its model after ``load_seconds``, whose task runs ``hang_seconds`` past its
deadline, or whose engine made no step for ``stall_seconds`` (a SIGSTOP, a hang;
``actors.SlotActor.steps``): it is killed, its task goes back to the queue once (then gets fallback
answers) and its slot gets a fresh actor (up to ``restarts`` times). At ``stop_at`` every actor is
stopped, the tasks left get fallback answers and the last writes follow. With a deadline and no speeds
measured, the first tasks are priced with guessed speeds; the first task to finish measures them
(``first_task_line``), the queue is priced again, and its peak GPU memory says how many more
actors share each GPU. Every task's result depends only on the seed and the task, so a pool gives the
submission one process gives; a rerun resumes.

Ray's own death is a fault like an actor's, of every actor at once. Once a poll the watchdog looks at Ray itself
(``ray_session.Session.lost``: its GCS's port, this node's raylet's socket; Ray's own health checks take 15 s and
more to tell, and a call into a Ray whose GCS is gone blocks until Ray ends the process a minute later). Found
gone, the run stops at once with one line (``RayLostError``): the actors here are killed by their pids, nothing more
is asked of Ray, and no fallback record is written for the tasks left, so that the same command run again resumes
and does them; the records of the tasks done and the submission, complete and valid since the start, stay. It
does not go on in one process: the driver holds no model, and a rerun on a Ray that works is what the user wants to
choose. (A node other than the driver's lost: its actors die, and are given up on one by one.)

This module knows the planner, the run folder and the actors' calls; nothing of Ray's start or an actor's side.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import signal
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arc_kit.data.jsonio import read_json, write_json_atomically
from arc_kit.data.submission import build_submission, write_submission
from arc_kit.data.tasks import TaskSet
from arc_kit.method.records import TaskRecord, answers_from_records, fallback_record
from arc_kit.model.devices import visible_gpus
from arc_kit.model.loading import check_loadable, load_encoder, token_budget_of
from arc_kit.names import shown
from arc_kit.provenance import run_info
from arc_kit.run import actors
from arc_kit.run.expectations import MAX_WORKERS_PER_GPU, first_speeds, visible_gpu_name, workers_per_gpu_for
from arc_kit.run.locking import hold_folder
from arc_kit.run.planner import FALLBACK, Planner, Speeds, hours, measure
from arc_kit.run.ray_session import RayLostError, actor_options, check_address, gpu_bundles, import_ray, ray_session
from arc_kit.run.record_json import append_record, from_json, stream_records, write_records
from arc_kit.run.runs import RECORDS_FILE, RUN_KIND, SPEEDS_FILE, SUBMISSION_FILE, TASKS_FILE, SolveRun, \
    check_run_folder, mark_correct, open_run, run_records, task_line, write_scores
from arc_kit.settings import BudgetSettings, LoadSettings, PoolSettings, SolveSettings

logger = logging.getLogger(__name__)


def solve_in_pool(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, out: str | os.PathLike, *,
                  workers: int | None = None, workers_per_gpu: int | None = None, address: str | None = None,
                  shared_model: bool = False, deadline: float | None = None, stop_at: float | None = None,
                  solutions: TaskSet | None = None, load_options: dict | None = None, progress: bool = True,
                  submission_path: str | os.PathLike | None = None, submission_tasks: TaskSet | None = None,
                  info: dict | None = None, budget: BudgetSettings = BudgetSettings(),
                  pool: PoolSettings = PoolSettings(), restart: bool = False) -> SolveRun:
    """Solve ``tasks`` with a pool of Ray actors (the module's docstring): this machine's own Ray, or the cluster at
    ``address`` (``shared_model``: the model's path is good on every node, so nothing of it is sent).

    ``workers`` (a total; with ``address``, over the cluster's GPUs, and those beyond them on CPUs) wins
    over ``workers_per_gpu``; with neither, one actor per GPU starts (one on a CPU without GPUs), and
    with a deadline the first measures how many more fit. A base-plus-delta model's base is prepared
    once, here. ``deadline`` (seconds since the epoch) is when the planner wants the work done;
    ``stop_at`` (default: ``pool.stop_seconds`` after it) is when every actor is stopped, whatever it
    does. The submission (``out/submission.json`` unless ``submission_path`` says otherwise) covers every
    task of ``submission_tasks`` (default ``tasks``), solved or not. ``info`` goes into ``run.json``;
    ``restart`` as ``runs.open_run`` takes it. Everything it is given (the model's folder and
    tokenizer, the load options, the address, Ray itself) is checked before ``out`` is claimed; the driver holds
    its lock throughout, and alone writes it.
    """
    out = Path(out)
    check_run_folder(out, restart=restart)  # a folder the kit may not write, or in use: refused at once
    settings = settings.replace(max_len=token_budget_of(model, settings.max_len))  # as each actor resolves it
    encoder = load_encoder(model, max_len=settings.max_len)  # the folder and its tokenizer: refused now, or never
    check_loadable(model, LoadSettings(**(load_options or {})))  # its weights whole, options the actors take
    import_ray()
    if address:
        check_address(address)
    started = time.monotonic()
    load_options = actors.prepare_model(model, load_options, progress)
    if stop_at is None and deadline is not None:
        stop_at = deadline + pool.stop_seconds
    local_gpus = [] if address else visible_gpus()
    device = {} if address else {"device": visible_gpu_name() if local_gpus else "CPU", "gpus": len(local_gpus)}
    info = run_info(**{"model": str(model), "tasks": len(tasks), **(info or {}), **device,
                       "workers": workers or _count(len(local_gpus), workers_per_gpu),
                       **({"address": address} if address else {})})
    with hold_folder(out, RUN_KIND, "solve"):
        open_run(out, settings, info, restart=restart)
        # the tasks it solves, for ``estimates`` where its data set does not load elsewhere (Kaggle's hidden test file)
        write_json_atomically(out / TASKS_FILE, TaskSet(tasks.tasks(), tasks.name).challenges_json())
        run = _Pool.opened(tasks, model, encoder, settings, out, workers=workers or 1, budget=budget,
                           solutions=solutions, submission_path=submission_path, submission_tasks=submission_tasks,
                           deadline=deadline, stop_at=stop_at, limits=pool, progress=progress)
        run.write()
        if run.planner.remaining:  # a rerun with nothing left to do needs no Ray
            cpus = max(os.cpu_count() or 1, workers or 1)  # this machine's Ray: room for every CPU slot asked for
            with ray_session(out, address=address, cpus=cpus, gpus=len(local_gpus), settings=pool) as session:
                try:
                    run.session = session
                    run.begin(session.ray, model, load_options, workers=workers, workers_per_gpu=workers_per_gpu,
                              address=address, shared_model=shared_model)
                    run.watch()
                finally:
                    run.stop_all()
        return run.wind_up(started)


def _count(gpus: int, workers_per_gpu: int | None) -> int:
    """The workers when none are asked for: ``workers_per_gpu`` (or one) on each GPU, else one on a CPU."""
    return gpus * (workers_per_gpu or 1) if gpus else 1


@dataclass
class Slot:
    """One actor's place (its number, and the GPU it shares, None: the CPU) and its actor, seen from the driver."""

    index: int
    gpu: int | None
    actor: Any = None
    starts: int = 0
    started_at: float = 0.0  # when its actor was asked to load
    loaded: dict | None = None  # where it runs (pid, node, GPU), once its model is loaded
    task: str | None = None  # the task it runs
    task_started: float = 0.0
    task_deadline: float = math.inf  # that task's own deadline (seconds since the epoch)
    steps: int = -1  # its engine steps as last read
    moved_at: float = 0.0  # when they last moved
    asked_at: float = 0.0  # when its steps were last asked for
    asking: bool = False  # an answer about its steps is awaited

    @property
    def idle(self) -> bool:
        return self.actor is not None and self.loaded is not None and self.task is None


def slot_layout(workers: int, gpus: int, spread: bool, first: int = 0) -> list[Slot]:
    """``workers`` slots numbered from ``first``: round the ``gpus`` when ``spread``, else one on each of the first
    GPUs and the rest on the CPU."""
    if spread and gpus:
        return [Slot(index, index % gpus) for index in range(first, first + workers)]
    return [Slot(index, index if index < gpus else None) for index in range(first, first + workers)]


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


@dataclass
class _Pool:
    """The driver's state while its actors run: the queue (its planner), the slots, the records, the submission.

    One call of ``solve_in_pool`` makes one; its methods are the steps of the driver's loop.
    """

    tasks: TaskSet
    settings: SolveSettings
    out: Path
    planner: Planner
    mine: dict[str, TaskRecord]  # this run's tasks' records (the folder's others stay in its file: ``wind_up``)
    answers: TaskSet | None  # the known solutions, if any: tasks get marked as they finish
    submission_path: Path
    covered: TaskSet  # the tasks the submission covers
    deadline: float | None
    stop_at: float | None = None
    limits: PoolSettings = field(default_factory=PoolSettings)
    progress: bool = True
    ray: Any = None
    session: Any = None  # ``ray_session.Session``: a SIGTERM held while Ray's calls block
    slots: list[Slot] = field(default_factory=list)
    waiting: dict = field(default_factory=dict)  # each awaited answer: (its slot, what it answers)
    start_options: dict = field(default_factory=dict)  # how an actor is made and loaded
    measuring: bool = False  # nothing measured yet: the first finished task sets the speeds and actors per GPU
    lost: dict[str, int] = field(default_factory=dict)  # task id -> times its actor died or hung on it
    solved: float = 0.0
    changed: bool = False  # a record came in since the last write
    last_report: float = field(default_factory=time.monotonic)
    ray_looked_at: float = 0.0  # when Ray itself was last looked at (``ray_is_there``)
    ray_lost: bool = False  # it was lost: nothing more is asked of it

    @classmethod
    def opened(cls, tasks: TaskSet, model, encoder, settings: SolveSettings, out: Path, *, workers: int,
               budget: BudgetSettings, solutions: TaskSet | None, submission_path, submission_tasks: TaskSet | None,
               deadline: float | None, **options) -> _Pool:
        """The pool of an opened run folder: the records already there, the tasks left queued longest first."""
        records = run_records(out, task_ids=tasks.ids)  # read a line at a time: this run's tasks only
        answers = solutions if solutions is not None else (tasks if tasks.has_solutions else None)
        if answers is not None and not answers.known_outputs():
            answers = None
        todo = [task_id for task_id in tasks.ids if task_id not in records]
        sizes = [measure(tasks[task_id], encoder, settings.max_len) for task_id in todo]  # the planner's counts
        speeds = _stored_speeds(out) or first_speeds(model, settings, sizes,
                                                     visible_gpu_name() if visible_gpus() else None)
        planner = Planner(sizes, settings, deadline if deadline is not None else math.inf, speeds, workers=workers,
                          longest_first=True, budget=budget)
        submission_path = Path(submission_path) if submission_path is not None else out / SUBMISSION_FILE
        mine = {task_id: records[task_id] for task_id in tasks.ids if task_id in records}
        pool = cls(tasks, settings, out, planner, mine, answers, submission_path,
                   submission_tasks if submission_tasks is not None else tasks, deadline, **options)
        pool.solved = sum(record.share_correct for record in mine.values())
        return pool

    # -- the start ------------------------------------------------------------------------------------------------

    def begin(self, ray, model, load_options: dict, *, workers: int | None, workers_per_gpu: int | None,
              address: str | None, shared_model: bool) -> None:
        """The slots on the cluster's GPUs (or CPUs), the model's source, the first actors started."""
        self.ray = ray
        gpus = int(ray.cluster_resources().get("GPU", 0))  # this machine's own Ray's: those it was started with
        node = ray.get_runtime_context().get_node_id()  # the driver's
        spread = workers is None  # slots go round the GPUs; else the first ones, then the CPUs
        count = workers or _count(gpus, workers_per_gpu)
        self.measuring = self.deadline is not None and bool(self.planner.remaining) \
            and not self.planner.speeds.measured_tasks
        layout = slot_layout(count, gpus, spread)
        used = gpus if spread else sum(slot.gpu is not None for slot in layout)
        folders = actors.model_folders(model, load_options)
        cluster = address is not None or sum(node["Alive"] for node in ray.nodes()) > 1  # nodes may join later
        server = None
        if cluster and not shared_model:  # on the driver's node
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
            server = ray.remote(actors.ModelServer).options(num_cpus=0, scheduling_strategy=here).remote(folders)
        self.start_options = {
            "actor_class": ray.remote(actors.SlotActor), "bundles": gpu_bundles(ray, used, self.limits.load_seconds),
            "fraction": 1 / max(MAX_WORKERS_PER_GPU, workers_per_gpu or 1), "server": server, "spread": spread,
            "workers_per_gpu": workers_per_gpu, "gpus": used, "node": node,
            "niceness": os.nice(0) if hasattr(os, "nice") else 0,  # the driver's: each actor takes it where it may
            "load": (actors.load_solver,  # read now: a test's replacement travels to the actors
                     actors.ModelSource(folders, node, server, self.limits.chunk_megabytes * 2**20),
                     self.settings.to_json(), dict(load_options))}
        self.add_slots(layout)

    def add_slots(self, added: list[Slot]) -> None:
        """Take the slots ``added`` and start their actors, no more of them than tasks queued."""
        self.slots += added
        self.planner.workers = len(self.slots)
        for slot in added[:len(self.planner.remaining)]:
            self.start(slot)
        running = [slot for slot in self.slots if slot.actor is not None]
        where = [f"{sum(slot.gpu == gpu for slot in running)} on GPU {gpu}"
                 for gpu in sorted({slot.gpu for slot in running if slot.gpu is not None})]
        on_cpus = sum(slot.gpu is None for slot in running)
        where += [f"{on_cpus} on CPUs"] if on_cpus else []
        more = f"started {len(added)} more: " if len(self.slots) > len(added) else "started "
        self.note(f"{more}{len(running)} worker(s) on Ray ({', '.join(where) or 'none'})")

    def start(self, slot: Slot) -> None:
        """Start (or start again) ``slot``'s actor and ask it to load the model."""
        options = self.start_options
        actor = options["actor_class"].options(**actor_options(slot.gpu, options["bundles"],
                                                               options["fraction"])).remote()
        slot.actor, slot.loaded, slot.task, slot.steps, slot.asking = actor, None, None, -1, False
        slot.starts, slot.started_at = slot.starts + 1, time.time()
        self.waiting[actor.load.remote(*options["load"], options["niceness"])] = (slot, "load")

    # -- the loop -------------------------------------------------------------------------------------------------

    def watch(self) -> None:
        """The driver's loop: answers in, the stop time, the watchdog, work for the idle, steps asked, writes."""
        while True:
            self.changed = False
            self.ray_is_there(time.time())  # before Ray is asked anything more
            self.take_answers()
            self.session.check_signals()  # a SIGTERM that came meanwhile, raised here: outside Ray's calls
            now = time.time()
            if self.stop_at is not None and now >= self.stop_at:
                logger.warning("the run's stop time has come: stopping %d worker(s)",
                               sum(slot.actor is not None for slot in self.slots))
                break
            for slot in self.slots:
                why = self.trouble(slot, now)
                if why is not None:
                    self.give_up_on(slot, why)
            for slot in self.slots:
                self.feed(slot)
            self.ask_steps(now)
            if self.changed:
                self.write()
                self.write_speeds()
            if self.is_over():
                break
            self.tick()

    def take_answers(self) -> None:
        """Wait up to ``poll_seconds`` for an answer, then take every answer in (a task's record, a load, steps)."""
        pending = list(self.waiting)
        if not pending:
            time.sleep(self.limits.poll_seconds)
            return
        ready, _ = self.ray.wait(pending, num_returns=1, timeout=self.limits.poll_seconds)
        if ready:
            ready, _ = self.ray.wait(pending, num_returns=len(pending), timeout=0)
        for reference in ready:
            if reference in self.waiting:  # not dropped by a give-up on its slot since
                self.take(reference, *self.waiting.pop(reference))

    def take(self, reference, slot: Slot, what: str) -> None:
        """One answer of ``slot``'s actor; an actor that died (or raised) is given up on."""
        try:
            value = self.ray.get(reference)
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
            if value["niceness"] > self.start_options["niceness"]:  # a cluster's Ray, which it may not override
                logger.warning("worker %d runs at niceness %d, below the driver's priority: its Ray starts workers "
                               "so (`ray start --head --system-config='{\"worker_niceness\": 0}'` does not)",
                               slot.index, value["niceness"])
        else:
            task_id, slot.task, slot.task_deadline = slot.task, None, math.inf
            record = from_json(TaskRecord, value["record"])
            if task_id in self.tasks and task_id not in self.mine:
                self.finish(task_id, record)
                if self.measuring:
                    self.measured(task_id, None if record.failed else record.timings, value["memory"])

    def measured(self, task_id: str, timings: dict | None, memory: dict) -> None:
        """The first finished task's measurement: the queue priced again with its speeds; as many more actors started
        as its peak memory allows."""
        self.measuring = False
        self.planner.calibrate(self.planner.speeds)
        options = self.start_options
        per_gpu, line = first_task_line(self.planner, task_id, timings, memory, options["gpus"])
        self.note(line)
        if per_gpu and options["spread"] and options["gpus"] and options["workers_per_gpu"] is None:
            self.add_slots(slot_layout(options["gpus"] * (per_gpu - 1), options["gpus"], True, first=len(self.slots)))

    def ray_is_there(self, now: float) -> None:
        """Ray's own death is a fault like an actor's, of every actor at once: its GCS or this node's raylet found
        gone (``Session.lost``, looked at once a poll) stops the run with ``RayLostError``, its records and its
        complete submission kept, no fallback record written for the tasks left: a rerun resumes and does them."""
        if now - self.ray_looked_at < self.limits.poll_seconds:
            return
        self.ray_looked_at = now
        lost = self.session.lost()
        if lost is not None:  # every record in came with its write, in the loop's last turn
            self.ray_lost = True
            raise RayLostError(f"Ray was lost mid-run ({lost}): stopped with {len(self.mine)} of {len(self.tasks)} "
                               f"task(s) done; {self.out} keeps their records and a complete submission (fallback "
                               "answers for the rest): run the same command again to go on")

    def trouble(self, slot: Slot, now: float) -> str | None:
        """Why ``slot``'s actor must be given up on, or None while it is well (or was never started)."""
        if slot.actor is None:
            return None
        if slot.loaded is None:
            waited = now - slot.started_at
            return f"hung: no model after {waited:.0f} s" if waited > self.limits.load_seconds else None
        if slot.task is None:
            return None
        doing = f"task {shown(slot.task)}"
        if now > slot.task_deadline + self.limits.hang_seconds:
            return f"hung: {doing} is {now - slot.task_deadline:.0f} s past its deadline"
        stalled = now - max(slot.moved_at, slot.task_started)
        if stalled > self.limits.stall_seconds:
            count = f"its count stands at {slot.steps}" if slot.steps >= 0 else "its count never came"
            return f"hung: no engine step on {doing} for {stalled:.0f} s ({count})"
        return None

    def give_up_on(self, slot: Slot, why: str) -> None:
        """Kill a dead or hung actor; its task back to the queue (or fallback answers); a fresh actor."""
        self.waiting = {reference: (owner, what) for reference, (owner, what) in self.waiting.items()
                        if owner is not slot}
        self.kill(slot, hung=True)
        pid = slot.loaded["pid"] if slot.loaded else None
        logger.warning("worker %d%s %s (its output: Ray's logs, worker-*-%s.err)", slot.index,
                       f" (pid {pid})" if pid else "", why, pid or "PID")
        task_id, slot.task, slot.task_deadline = slot.task, None, math.inf
        if task_id is not None:
            self.lost[task_id] = self.lost.get(task_id, 0) + 1
            if self.lost[task_id] <= self.limits.retries:
                self.planner.requeue(task_id)
            else:
                self.finish(task_id, fallback_record(task_id, f"its worker died or hung {self.lost[task_id]} times"))
        if self.planner.remaining and slot.starts <= self.limits.restarts:
            self.start(slot)

    def kill(self, slot: Slot, hung: bool = False) -> None:
        """Kill ``slot``'s actor. On this node its process is also sent SIGKILL when ``hung`` (a stopped process
        would wait for Ray's kill, and outlive a Ray shut down meanwhile), else SIGCONT (one stopped but not yet
        found so ends with the rest, as Ray's kill asks; a running one ignores it)."""
        if slot.actor is not None:
            if not self.ray_lost:  # a Ray without its GCS would block the call
                with suppress(Exception):  # already gone
                    self.ray.kill(slot.actor, no_restart=True)
            if slot.loaded and slot.loaded["node"] == self.start_options.get("node"):
                with suppress(OSError):  # gone already
                    os.kill(slot.loaded["pid"], signal.SIGKILL if hung else signal.SIGCONT)
        slot.actor, slot.asking = None, False

    def feed(self, slot: Slot) -> None:
        """Work for a loaded, idle actor: the next task at the rung the time left allows, with its caps."""
        while slot.idle and self.planner.remaining:
            task_id = self.planner.remaining[0]
            rung = self.planner.choose(task_id)
            self.planner.start(task_id)
            if rung == FALLBACK:
                self.finish(task_id, fallback_record(task_id, "out of time"))
                continue
            caps = self.planner.budget(task_id, rung) if self.deadline is not None else None
            slot.task, slot.task_started, slot.task_deadline = task_id, time.time(), caps.deadline if caps else math.inf
            seconds = None if caps is None else (caps.deadline - time.time(), caps.search_seconds)
            self.waiting[slot.actor.solve.remote(self.tasks[task_id], rung, seconds)] = (slot, "solve")
            if self.progress:
                cap = "" if caps is None else f", capped at {hours(caps.deadline - time.time())}"
                left = self.planner.estimate(self.planner.remaining, rung) / self.planner.workers
                ends = "" if self.deadline is None else f" (deadline in {hours(self.deadline - time.time())})"
                print(f"task {shown(task_id)} -> worker {slot.index}: rung {rung}{cap}; "
                      f"{len(self.planner.remaining)} task(s) queued, projected to finish in {hours(left)}{ends}",
                      flush=True)

    def ask_steps(self, now: float) -> None:
        """Ask every loaded actor for its engine steps, at most once a poll (a stopped one never answers)."""
        for slot in self.slots:
            if slot.actor is not None and slot.loaded is not None and not slot.asking \
                    and now - slot.asked_at >= self.limits.poll_seconds:
                slot.asking, slot.asked_at = True, now
                self.waiting[slot.actor.steps.remote()] = (slot, "steps")

    def finish(self, task_id: str, record: TaskRecord) -> None:
        """Take ``record`` as ``task_id``'s: the planner learns its speeds, the answers mark it, it is appended."""
        self.planner.done(task_id, record.rung, None if record.failed else record.timings)
        if self.answers is not None and task_id in self.answers:
            mark_correct(record, self.tasks, self.answers, self.settings.attempts)
            self.solved += record.share_correct
        self.mine[task_id] = record
        append_record(self.out / RECORDS_FILE, record)  # never through a link (``outputs.appending``)
        if self.progress:
            print(task_line(record), flush=True)
        self.changed = True

    def is_over(self) -> bool:
        """Whether the loop ends: nothing queued or running, or tasks queued and no actor left (fallbacks for them)."""
        running = [slot for slot in self.slots if slot.task is not None]
        if not self.planner.remaining and not running:
            return True
        if self.planner.remaining and not any(slot.actor is not None for slot in self.slots):
            logger.warning("no worker left: %d task(s) get fallback answers", len(self.planner.remaining))
            for task_id in list(self.planner.remaining):
                self.finish(task_id, fallback_record(task_id, "no worker left"))
            return True
        return False

    # -- writes and the end ---------------------------------------------------------------------------------------

    def write(self) -> None:
        """The submission of every covered task, from the records so far (fallback answers for the others)."""
        write_submission(self.submission_path, build_submission(self.covered, answers_from_records(self.mine),
                                                                attempts=self.settings.attempts), self.covered)

    def write_speeds(self) -> None:
        # with the workers that measured them: an estimate shares one worker's seconds among as many
        write_json_atomically(self.out / SPEEDS_FILE, {**self.planner.speeds.to_json(), "workers": len(self.slots)})

    def note(self, message: str) -> None:
        logger.info(message)
        if self.progress:
            print(message, flush=True)

    def tick(self, force: bool = False) -> None:
        """Every minute: tasks done, solved (when known) and the time left."""
        if not self.progress or (not force and time.monotonic() - self.last_report < 60):
            return
        self.last_report = time.monotonic()
        parts = [f"{len(self.mine)}/{len(self.tasks)} tasks done"]
        parts += [f"{self.solved:g} solved"] if self.answers is not None else []
        parts += [f"{hours(max(0.0, self.deadline - time.time()))} left"] if self.deadline is not None else []
        print("progress: " + ", ".join(parts), flush=True)

    def stop_all(self) -> None:
        """Nothing outlives the loop: finished, stopped or failed, every actor (and the model's server) is killed."""
        for slot in self.slots:
            self.kill(slot, hung=self.ray_lost)  # Ray lost: its actors here killed by their pids
        self.waiting = {}
        options = self.start_options
        if self.ray_lost:
            return
        if options.get("server") is not None:
            self.ray.kill(options["server"], no_restart=True)
        if options.get("bundles") is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(options["bundles"])

    def wind_up(self, started: float) -> SolveRun:
        """Fallback answers for the tasks left, the records in task order, the last writes, the scores."""
        running = [slot.task for slot in self.slots if slot.task]
        for task_id in [*self.planner.remaining, *running]:
            if task_id not in self.mine:
                self.finish(task_id, fallback_record(task_id, "out of time"))
        ordered = {task_id: self.mine[task_id] for task_id in self.tasks.ids if task_id in self.mine}
        others = (record for record in stream_records(self.out / RECORDS_FILE, warn=False)  # other runs' tasks, as
                  if record.task_id not in ordered)  # they stand, a line at a time from the file replaced
        write_records(self.out / RECORDS_FILE, itertools.chain(ordered.values(), others))
        self.mine = ordered
        self.write()
        self.write_speeds()
        self.tick(force=True)
        run = SolveRun(self.out, ordered, self.submission_path, seconds=time.monotonic() - started)
        if self.answers is not None:
            run.score = write_scores(self.out, self.submission_path, ordered, self.answers,
                                     list(self.tasks.test_counts()), self.settings.attempts)
        return run


def _what_happened(error: BaseException) -> str:
    """One line on an actor's end: what its call raised, or how it died."""
    cause = getattr(error, "cause", None)  # a call that raised: Ray's error wraps what it raised
    if isinstance(cause, BaseException):
        return f"failed: {type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[0]}"
    return f"died: {(str(error).strip().splitlines() or [type(error).__name__])[0].rstrip('.')}"


def _stored_speeds(out: Path) -> Speeds | None:
    """The speeds an earlier run in ``out`` measured, or None."""
    with suppress(OSError, ValueError, TypeError):
        return Speeds.from_json(read_json(out / SPEEDS_FILE))
    return None
