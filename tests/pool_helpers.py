"""What the pool's tests share (not a test module): a fake solve that runs in real Ray actors, and ways to watch them.

``fake_workers`` makes every actor of the pools that start after it load a fake solve instead of a model
(``actors.load_solver`` replaced in the driver, which hands it to each actor; this module travels with
it by value, so the actors need not find it on their path). The fake answers [[7]] (then [[7, 7]]) at
once, or as ``behaviour`` says for a task: ``die`` (the process exits), ``die-once``, ``hang`` (sleeps,
making no engine step), ``hang-once``, ``held`` (waits while ``marks/hold`` is there), or ``work`` (2 s
of engine steps, as a model's forward passes make them, then the answer). Each try of a task leaves an
empty file in ``marks`` (``<task>.<try>.<pid>``), so a test can tell who tried what and whether that
process still runs; each load another (``loads``: where the actor runs, the model folder it got and that
folder's digest). A record's ``extra`` says where it was made (the actor's ``CUDA_VISIBLE_DEVICES``, its
node, its niceness) and the caps it got.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

TASK_IDS = ["6ea4a07e", "00576224", "be03b35f", "66e6c45b"]  # not in id order: records must follow this order


def read_json(path: Path):
    return json.loads(Path(path).read_text())


def solve_in_pool(tasks, model, settings, out, **options):
    """A solve on Ray's actors, however many (``jobs.solve_job`` with ``ray=True``)."""
    from arc_kit.run.jobs import solve_job

    return solve_job(tasks, model, settings, out, ray=True, **options)


def fake_workers(patch, marks: Path, behaviour: dict[str, str], *, silent: bool = False,
                 wait_for_loads: int = 0, broken: bool = False, peak_gib: float | None = None) -> None:
    """From now on (until ``patch`` undoes it) every pool's actors load the fake solve (``silent``: loading never
    ends; ``broken``: it raises; ``wait_for_loads``: no answer before that many actors have loaded; ``peak_gib``:
    each actor reports this peak memory on a 24 GiB GPU with its records). Each load leaves a file in ``marks``
    (``load.<pid>.<CUDA_VISIBLE_DEVICES>``, holding the node, the model folder and its digest), each try of a task
    another."""
    import ray.cloudpickle

    from arc_kit.run import actors

    marks.mkdir(parents=True, exist_ok=True)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    patch.setattr(actors, "load_solver", functools.partial(fake_load, dict(behaviour), str(marks), silent,
                                                           wait_for_loads, broken, peak_gib))


def fake_load(behaviour: dict, marks: str, silent: bool, wait_for_loads: int, broken: bool, peak_gib, model: str,
              settings: dict, load_options: dict, work):
    from arc_kit.settings import SolveSettings

    if silent:
        time.sleep(3600)
    if broken:
        raise FileNotFoundError(f"{model}: no weights (a fake)")
    device = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    Path(marks, f"load.{os.getpid()}.{device}").write_text(json.dumps(
        {"node": _node(), "model": model, "model_digest": folder_digest(model)}))
    return FakeSolver(behaviour, marks, model, SolveSettings.from_json(settings), wait_for_loads, peak_gib)


def loads(marks: Path) -> list[dict]:
    """What each actor's load left in ``marks``: its pid, device, node, model folder and that folder's digest."""
    found = []
    for path in marks.glob("load.*"):
        _, pid, device = path.name.split(".", 2)
        found.append({"pid": int(pid), "device": device, **json.loads(path.read_text())})
    return found


def folder_digest(folder: str | Path) -> str:
    """A digest of every file of a folder (names and bytes), to tell a received copy from another model."""
    digest = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class FakeSolver:
    """Answers [[7]] then [[7, 7]] to every test input, or dies, hangs or works first (the module's docstring).

    It serves an actor (``solve``, ``memory``) and, for a one-process run to compare with, ``jobs.solve``
    (``settings``, ``solve_with_retry``).
    """

    def __init__(self, behaviour: dict, marks: str, model: str, settings, wait_for_loads: int = 0,
                 peak_gib: float | None = None):
        self.behaviour, self.marks, self.model, self.settings = behaviour, marks, model, settings
        self.wait_for_loads, self.peak_gib = wait_for_loads, peak_gib

    def solve_with_retry(self, task, rung=0, rungs=None, deadline=None, search_share=None):
        return self.solve(task, rung, None)

    def solve(self, task, rung, budget):
        from arc_kit import progress
        from arc_kit.method.records import TaskRecord, TestResult

        ends = time.monotonic() + 120
        while len(list(Path(self.marks).glob("load.*"))) < self.wait_for_loads and time.monotonic() < ends:
            time.sleep(0.05)
        tries = len([name for name in os.listdir(self.marks) if name.startswith(task.id + ".")])
        Path(self.marks, f"{task.id}.{tries}.{os.getpid()}").touch()
        what = self.behaviour.get(task.id, "solve")
        if what == "hang" or (what == "hang-once" and tries == 0):
            while True:  # no engine step: the watchdog's stall, or the task's deadline, tells
                time.sleep(60)
        while what == "held" and os.path.exists(os.path.join(self.marks, "hold")):  # until the test lets it go
            time.sleep(0.05)
        if what == "die" or (what == "die-once" and tries == 0):
            os._exit(3)
        if what == "work":
            ends = time.monotonic() + 2.0
            while time.monotonic() < ends:
                progress.tick()
                time.sleep(0.01)
        record = TaskRecord(task.id, tests=[TestResult([np.array([[7]]), np.array([[7, 7]])], [], [], [])
                                            for _ in task.test_inputs],
                            timings={"ttt": 0.5, "generation": 0.25, "scoring": 0.125, "total": 0.875}, rung=rung)
        record.extra = {"device": os.environ.get("CUDA_VISIBLE_DEVICES"), "node": _node(), "niceness": os.nice(0),
                        "budget": None if budget is None else [budget.deadline, budget.search_share]}
        return record

    def memory(self):
        return {} if self.peak_gib is None else {"peak_bytes": self.peak_gib * 2**30, "total_bytes": 24 * 2**30}


def _node() -> str | None:
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def tries(marks: Path, task_id: str) -> list[int]:
    """The process ids that tried ``task_id``, in order."""
    found = [path.name.split(".") for path in marks.iterdir() if path.name.startswith(task_id + ".")]
    return [int(pid) for _, _, pid in sorted(found, key=lambda parts: int(parts[1]))]


def is_running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "zombie" not in status.read_text()


def processes_naming(text: str) -> list[int]:
    """The processes whose command line holds ``text`` (a Ray session's folder, say)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text in entry.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
