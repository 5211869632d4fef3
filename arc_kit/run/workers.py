"""The pool's workers as its driver sees them: an actor per slot on Ray, or one worker in this process.

Both kinds answer the driver (``pool``) alike. ``start(slot)`` makes a slot's worker and asks it to load its solver
(an answer to wait for: where it runs); ``call(slot, name, *arguments)`` asks it to ``solve`` a task (the run's
kind of work on it) or for its engine's ``steps``; ``ready`` gives the answers in, ``value`` one answer (or raises
what its call raised), ``kill`` ends a worker, ``lost`` says whether Ray itself is gone, ``check_signals`` hands on a
SIGTERM held meanwhile, ``more_slots`` the slots a measured peak memory makes room for, and ``close`` ends them all.

``RayWorkers`` starts an ``actors.SlotActor`` per slot on a Ray session (``ray_session``): round the cluster's GPUs,
several sharing one, or on CPUs (``slot_layout``), each placed on its GPU's bundle (``ray_session.gpu_bundles``),
the model's files served from the driver's node to the others (``actors.ModelServer``) unless its path is shared.
``InProcess`` is one slot whose worker is this process, with a solver loaded already: each call runs at once, so its
answer is ready when ``call`` returns, and there is nothing to kill or lose. ``uses_ray`` says which a run needs;
``loaded_here`` and ``checked_for_ray`` make each ready before the run folder is claimed. This module knows Ray's
calls and the actors' methods; nothing of the queue, the records or the run folder.
"""

from __future__ import annotations

import math
import os
import signal
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from arc_kit.method.solver import Solver
from arc_kit.model.devices import visible_gpus
from arc_kit.model.description import read_model_folder
from arc_kit.model.loading import load_model, model_info
from arc_kit.names import shown
from arc_kit.run import actors
from arc_kit.run.expectations import MAX_WORKERS_PER_GPU, device_of, visible_gpu_name
from arc_kit.run.ray_session import actor_options, check_address, gpu_bundles, import_ray
from arc_kit.settings import LoadSettings, PoolSettings, SolveSettings
from arc_kit.text import TaskEncoder


def uses_ray(workers: int | None, workers_per_gpu: int | None, address: str | None, deadline: float | None) -> bool:
    """Whether a run needs Ray: an address, several workers, or GPUs a pool serves better than one process (several
    of them, workers per GPU asked for, or one with a deadline, whose first task may find room for more)."""
    if address:
        return True
    if workers is not None:
        return workers > 1
    gpus = visible_gpus()
    return bool(gpus) and (bool(workers_per_gpu) or len(gpus) > 1 or deadline is not None)


def loaded_here(model, settings: SolveSettings, load_options: dict | None) -> tuple[Solver, dict]:
    """The solver of one worker in this process, the model in folder ``model`` loaded now (before the run folder is
    claimed: a model that does not load is refused first), and what ``run.json`` records of where it runs."""
    loaded = load_model(model, LoadSettings(**(load_options or {})))
    device = device_of(next(loaded.model.parameters()).device)  # what measured the run's speeds
    return Solver.from_loaded(loaded, settings), {"model": model_info(loaded), "device": device,
                                                  "gpus": int(device != "CPU"), "workers": 1}


def checked_for_ray(model, settings: SolveSettings, load_options: dict | None, *, workers: int | None,
                    workers_per_gpu: int | None, address: str | None, progress: bool) -> tuple[TaskEncoder, dict, dict]:
    """What Ray's actors will load, checked here before the run folder is claimed (the model's folder and tokenizer,
    its weights whole, the load options, Ray's import, the address): the model's encoder, the actors' load options (a
    base-plus-delta's base built once, ``actors.prepare_model``), and what ``run.json`` records of where they run."""
    folder = read_model_folder(model, LoadSettings(**(load_options or {})).base_model)  # options the actors take
    encoder = folder.encoder(max_len=settings.max_len)  # the folder and its tokenizer: refused now, or never
    folder.check_weights()  # its weights whole
    import_ray()
    if address:
        check_address(address)
    gpus = [] if address else visible_gpus()
    where = {"model": str(model), "workers": workers or worker_count(len(gpus), workers_per_gpu),
             **({"address": address} if address else {"device": visible_gpu_name() if gpus else "CPU",
                                                      "gpus": len(gpus)})}
    return encoder, actors.prepare_model(model, load_options, progress), where


def worker_count(gpus: int, workers_per_gpu: int | None) -> int:
    """The workers when none are asked for: ``workers_per_gpu`` (or one) on each GPU, else one on a CPU."""
    return gpus * (workers_per_gpu or 1) if gpus else 1


@dataclass
class Slot:
    """One worker's place (its number, and the GPU it shares, None: the CPU) and its worker, seen from the driver."""

    index: int
    gpu: int | None
    actor: Any = None
    starts: int = 0
    started_at: float = 0.0  # when its worker was asked to load
    loaded: dict | None = None  # where it runs (pid, node, GPU), once its solver is loaded
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

    def trouble(self, now: float, limits: PoolSettings) -> str | None:
        """Why its worker must be given up on (the pool's watchdog), or None while it is well (or was never
        started): no model after ``load_seconds``, no engine step for ``stall_seconds``, or its task past its deadline
        by as long again as it was given (the solver stops at its deadline within a step; past it, only a scoring
        pass begun in time and the record remain)."""
        if self.actor is None:
            return None
        if self.loaded is None:
            waited = now - self.started_at
            return f"hung: no model after {waited:.0f} s" if waited > limits.load_seconds else None
        if self.task is None:
            return None
        doing = f"task {shown(self.task)}"
        if now - self.task_deadline > self.task_deadline - self.task_started:
            return f"hung: {doing} is {now - self.task_deadline:.0f} s past its deadline"
        stalled = now - max(self.moved_at, self.task_started)
        if stalled > limits.stall_seconds:
            count = f"its count stands at {self.steps}" if self.steps >= 0 else "its count never came"
            return f"hung: no engine step on {doing} for {stalled:.0f} s ({count})"
        return None


def slot_layout(workers: int, gpus: int, spread: bool, first: int = 0) -> list[Slot]:
    """``workers`` slots numbered from ``first``: round the ``gpus`` when ``spread``, else one on each of the first
    GPUs and the rest on the CPU."""
    if spread and gpus:
        return [Slot(index, index % gpus) for index in range(first, first + workers)]
    return [Slot(index, index if index < gpus else None) for index in range(first, first + workers)]


def _niceness() -> int:
    return os.nice(0) if hasattr(os, "nice") else 0


class RayWorkers:
    """An actor per slot on a Ray ``session`` (the module's docstring), loading the model in folder ``model``."""

    remote = True

    def __init__(self, session, model, load_options: dict, settings: SolveSettings, work, limits: PoolSettings, *,
                 workers: int | None, workers_per_gpu: int | None, address: str | None, shared_model: bool):
        ray = self.ray = session.ray
        self.session, self.lost_ray = session, False
        gpus = int(ray.cluster_resources().get("GPU", 0))  # this machine's own Ray's: those it was started with
        self.node = ray.get_runtime_context().get_node_id()  # the driver's
        self.spread, self.workers_per_gpu = workers is None, workers_per_gpu  # spread: slots go round the GPUs
        self.first = slot_layout(workers or worker_count(gpus, workers_per_gpu), gpus, self.spread)
        self.gpus = gpus if self.spread else sum(slot.gpu is not None for slot in self.first)
        folders = actors.model_folders(model, load_options)
        cluster = address is not None or sum(node["Alive"] for node in ray.nodes()) > 1  # nodes may join later
        self.server = None
        if cluster and not shared_model:  # on the driver's node
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = NodeAffinitySchedulingStrategy(node_id=self.node, soft=False)
            self.server = ray.remote(actors.ModelServer).options(num_cpus=0, scheduling_strategy=here).remote(folders)
        self.actor_class = ray.remote(actors.SlotActor)
        self.bundles = gpu_bundles(ray, self.gpus, limits.load_seconds)
        self.fraction = 1 / max(MAX_WORKERS_PER_GPU, workers_per_gpu or 1)
        self.niceness = _niceness()  # the driver's: each actor takes it where it may
        self.load = (actors.load_solver,  # read now: a test's replacement travels to the actors
                     actors.ModelSource(folders, self.node, self.server, limits.chunk_megabytes * 2**20),
                     settings.to_json(), dict(load_options), work)

    def more_slots(self, per_gpu: int | None, first: int) -> list[Slot]:
        """The slots to add when a measured peak memory allows ``per_gpu`` actors on each GPU (none where the layout
        was asked for)."""
        if not (per_gpu and self.spread and self.gpus and self.workers_per_gpu is None):
            return []
        return slot_layout(self.gpus * (per_gpu - 1), self.gpus, True, first=first)

    @staticmethod
    def started(slots: list[Slot], added: int) -> str:
        """The line that says where the actors run, ``added`` of them just started."""
        running = [slot for slot in slots if slot.actor is not None]
        where = [f"{sum(slot.gpu == gpu for slot in running)} on GPU {gpu}"
                 for gpu in sorted({slot.gpu for slot in running if slot.gpu is not None})]
        on_cpus = sum(slot.gpu is None for slot in running)
        where += [f"{on_cpus} on CPUs"] if on_cpus else []
        more = f"started {added} more: " if len(slots) > added else "started "
        return f"{more}{len(running)} worker(s) on Ray ({', '.join(where) or 'none'})"

    def start(self, slot: Slot):
        """``slot``'s actor made (placed on its GPU's bundle, or a CPU) and asked to load the model."""
        slot.actor = self.actor_class.options(**actor_options(slot.gpu, self.bundles, self.fraction)).remote()
        return slot.actor.load.remote(*self.load, self.niceness)

    def call(self, slot: Slot, name: str, *arguments):
        return getattr(slot.actor, name).remote(*arguments)

    def ready(self, pending: list, timeout: float) -> list:
        """The answers in among ``pending``, after waiting up to ``timeout`` seconds for the first."""
        ready, _ = self.ray.wait(pending, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = self.ray.wait(pending, num_returns=len(pending), timeout=0)
        return ready

    def value(self, reference):
        return self.ray.get(reference)

    def kill(self, slot: Slot, hung: bool = False) -> None:
        """Kill ``slot``'s actor. On this node its process is also sent SIGKILL when ``hung`` (a stopped process would
        wait for Ray's kill, and outlive a Ray shut down meanwhile), else SIGCONT (one stopped but not yet found so
        ends with the rest, as Ray's kill asks; a running one ignores it)."""
        if slot.actor is not None:
            if not self.lost_ray:  # a Ray without its GCS would block the call
                with suppress(Exception):  # already gone
                    self.ray.kill(slot.actor, no_restart=True)
            if slot.loaded and slot.loaded["node"] == self.node and slot.loaded["pid"] != os.getpid():
                with suppress(OSError):  # gone already
                    os.kill(slot.loaded["pid"], signal.SIGKILL if hung or self.lost_ray else signal.SIGCONT)
        slot.actor, slot.asking = None, False

    def lost(self) -> str | None:
        """What of Ray is gone, or None; once gone, nothing more is asked of it. ``ray_session.Session.lost`` looks at
        its GCS's port and this node's raylet's socket: Ray's own health checks take 15 s and more to tell, and a call
        into a Ray whose GCS is gone blocks until Ray ends the process a minute later. The run then stops (the pool's
        ``RayLostError``), its actors here killed by their pids: it does not go on in one process, as the driver
        holds no model and a rerun on a Ray that works is the user's to choose. (A node other than the driver's
        lost: its actors die, and are given up on one by one.)"""
        found = self.session.lost()
        self.lost_ray = self.lost_ray or found is not None
        return found

    def check_signals(self) -> None:
        self.session.check_signals()

    def close(self, slots: list[Slot]) -> None:
        """Every actor killed (by its pid where Ray is lost), the model's server and the GPUs' bundles given back."""
        for slot in slots:
            self.kill(slot)
        if self.lost_ray:
            return
        if self.server is not None:
            self.ray.kill(self.server, no_restart=True)
        if self.bundles is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.bundles)


class CallFailed(Exception):
    """What an in-process call raised, carried as Ray's error carries it (``cause``)."""

    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.cause = cause


@dataclass(eq=False)  # each answer its own key among those awaited
class Answer:
    """An in-process call's answer, ready as the call returns: its value, or what it raised."""

    value: Any = None
    error: Exception | None = None


class InProcess:
    """One slot whose worker is this process, with ``solver`` loaded already (the module's docstring)."""

    remote, gpus = False, 0

    def __init__(self, solver, work):
        self.solver, self.work, self.niceness = solver, work, _niceness()
        self.first = [Slot(0, None)]

    def more_slots(self, per_gpu: int | None, first: int) -> list[Slot]:
        return []

    def start(self, slot: Slot) -> Answer:
        slot.actor = actors.SlotActor(actors.SlotSolver(self.solver, self.work))
        return Answer({"pid": os.getpid(), "node": "this process", "niceness": self.niceness,
                       "device": os.environ.get("CUDA_VISIBLE_DEVICES", "")})

    def call(self, slot: Slot, name: str, *arguments) -> Answer:
        try:
            return Answer(getattr(slot.actor, name)(*arguments))
        except Exception as error:  # noqa: BLE001 - the driver gives up on the worker, as on an actor whose call raised
            return Answer(error=error)

    def ready(self, pending: list, timeout: float) -> list:
        return list(pending)

    def value(self, answer: Answer):
        if answer.error is not None:
            raise CallFailed(answer.error)
        return answer.value

    def kill(self, slot: Slot, hung: bool = False) -> None:
        slot.actor, slot.asking = None, False

    def lost(self) -> None:
        return None

    def check_signals(self) -> None:
        return None

    def close(self, slots: list[Slot]) -> None:
        for slot in slots:
            self.kill(slot)
