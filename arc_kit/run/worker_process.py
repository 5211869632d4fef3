"""One worker process of a pool: ``python -m arc_kit worker PLAN`` loads the model, then solves what the parent assigns.

The worker and its parent talk through files in the worker's folder, named here: the parent writes
``plan.json`` (what to load) and ``assignment.json`` (the task to run next, or stop); the worker
writes ``ready`` once its model is loaded, ``heartbeat`` (its step counter, from a thread, every few
seconds) and appends each task's record to its records file. A worker that a parent asked for a
calibration first times one short solve and writes what it measured (``calibration.measure_calibration``).

This module knows the worker's side of those files; the queue, the watchdog and the merge are the
parent's (``workers``), and what a task's solving does is the solver's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path

from arc_kit import progress
from arc_kit.data.datasets import load_challenges
from arc_kit.data.grids import MAX_SIDE
from arc_kit.data.jsonio import read_json
from arc_kit.data.tasks import InvalidDataError
from arc_kit.method.solver import Solver
from arc_kit.model.loading import LoadSettings, load_model
from arc_kit.run.calibration import measure_calibration
from arc_kit.run.planner import TaskBudget
from arc_kit.run.record_json import append_record
from arc_kit.run.runs import RECORDS_FILE, solve_one
from arc_kit.settings import SolveSettings, ladder

ASSIGNMENT_FILE = "assignment.json"  # parent -> worker: the task to run next, or stop
READY_FILE = "ready"  # worker -> parent: the model is loaded
HEARTBEAT_FILE = "heartbeat"  # worker -> parent: touched every few seconds while the process lives


class Heartbeat(threading.Thread):
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
    Heartbeat(folder / HEARTBEAT_FILE, float(plan.get("heartbeat_seconds", 5.0))).start()
    tasks = load_challenges(plan["challenges"], max_side=plan.get("max_side", MAX_SIDE))  # the set's own limit
    solver = _loaded_solver(plan)
    rungs = ladder(solver.settings)
    if plan.get("calibrate"):
        measure_calibration(solver, tasks, plan["calibrate"], folder)
    (folder / READY_FILE).write_text(f"{os.getpid()}\n")
    done = 0
    while True:
        progress.tick()  # waiting, but not stuck
        assignment = _read_assignment(folder)
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


def _loaded_solver(plan: dict) -> Solver:
    """The plan's model loaded into a solver, its forward passes counted as steps for the heartbeat."""
    settings = SolveSettings.from_json(plan["settings"])
    loaded = load_model(plan["model"], LoadSettings(**plan.get("load", {})))
    solver = Solver.from_loaded(loaded, settings)
    for model in {id(model): model for model in (getattr(loaded, "model", None), getattr(solver, "model", None))
                  if hasattr(model, "register_forward_hook")}.values():
        progress.count_forward_calls(model)  # every forward pass is a step: the heartbeat shows work moving
    return solver


def _read_assignment(folder: Path) -> dict | None:
    """The parent's last assignment in ``folder``, or None while there is none (or it is being replaced)."""
    try:
        return json.loads((folder / ASSIGNMENT_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return None
