"""One worker of a pool: it loads the model once, then does the run's kind of work on the tasks the driver hands it.

``SlotActor`` (made a Ray actor by ``workers.RayWorkers``, placed by ``ray_session.actor_options``; or made in the
driver's process around a solver loaded there, ``workers.InProcess``) answers three calls: ``load`` (the model, from
this node's disk or received through Ray, see below, loaded by the loader the driver hands it: ``load_solver``),
``solve`` (the run's work on one task, ``SlotSolver``: a solve at the rung and within the caps the driver chose, or
a table's stages; its record, as JSON, and the process's peak GPU memory so far) and ``steps`` (the engine steps
made so far; it answers while a solve runs, so the driver's watchdog can tell a working actor from a stopped one;
``load_solver`` installs the count).

Nothing assumes a shared file system. ``ModelServer``, an actor on the driver's node, hands out the
model's files in pieces; an actor on another node writes them into that node's cache
(``receive_model``: one folder per model, made once under a lock and shared by the node's actors).
An actor on the driver's node, or any actor when the model's path is shared by every node, loads
from the path itself. The tasks come with the calls, the kind of work (a function the driver names: ``runs.solve_one``,
a table's) with the load.

The driver prepares the model first: a base-plus-delta's base is built once, on its node
(``prepare_model``), and ``model_folders`` names what an actor needs. This module knows the solver,
model folders and Ray's actor calls; the queue, the watchdog and the records are ``pool``'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arc_kit import progress
from arc_kit.model.bases import build_base, built_folder, is_built
from arc_kit.model.description import read_model_folder
from arc_kit.model.folders import is_delta_folder
from arc_kit.outputs import kit_subfolder, replace_file, replacing
from arc_kit.run.planner import TaskBudget
from arc_kit.run.record_json import to_json
from arc_kit.settings import LoadSettings, SolveSettings

logger = logging.getLogger(__name__)

MODEL_CACHE = "arc-kit-models"  # below a node's temporary folder: models received from the driver's node
COMPLETE = ".complete"  # in a received model's folder: every file arrived


class SlotSolver:
    """The model loaded for one slot: its solver, and the run's kind of work on a task, ``work(solver, task, rung,
    budget)``, which returns the task's record."""

    def __init__(self, solver, work):
        self.solver, self.work = solver, work

    def solve(self, task, rung: int, budget: TaskBudget | None):
        return self.work(self.solver, task, rung, budget)

    def memory(self) -> dict:
        """This process's peak reserved GPU memory and its GPU's total, in bytes ({} on the CPU)."""
        import torch

        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return {}
        return {"peak_bytes": torch.cuda.max_memory_reserved(),
                "total_bytes": torch.cuda.get_device_properties(0).total_memory}


def load_solver(model: str, settings: dict, load_options: dict, work) -> SlotSolver:
    """The model in folder ``model`` loaded with ``load_options`` (``settings.LoadSettings``' fields) into a solver
    with ``settings`` (``SolveSettings.to_json``) that does ``work`` on a task. Its engine's steps are counted
    through ``on_step`` (the engine never calls the model's forward), every forward pass of its models (test-time
    training's, transformers' own forward) by a hook, each model once."""
    from arc_kit.method.solver import Solver
    from arc_kit.model.loading import load_model

    loaded = load_model(model, LoadSettings(**load_options))
    solver = Solver.from_loaded(loaded, SolveSettings.from_json(settings), on_step=progress.tick)
    for torch_model in {id(each): each for each in (loaded.model, solver.model)}.values():
        progress.count_forward_calls(torch_model)
    return SlotSolver(solver, work)


@dataclass(frozen=True)
class ModelSource:
    """Where an actor finds the model: its folders by role (``model``, and ``base_model`` for the base it goes on),
    the driver's node, and the server of their files for other nodes (None: the paths are good on every node)."""

    folders: dict[str, str]
    node: str
    server: Any = None
    chunk_bytes: int = 16 * 2**20

    def here(self, node: str) -> dict[str, str]:
        """The folders' paths on ``node``: the driver's own there (or with a shared path), else received."""
        if self.server is None or node == self.node:
            return dict(self.folders)
        return {role: str(receive_model(self.server, role, self.chunk_bytes)) for role in self.folders}


class SlotActor:
    """One slot's worker (see the module's docstring); made by Ray with no arguments, or around ``slot_solver``."""

    def __init__(self, slot_solver: SlotSolver | None = None):
        self.slot_solver, self.loaded = slot_solver, {}

    def load(self, loader, source: ModelSource, settings: dict, load_options: dict, work, niceness: int = 0) -> dict:
        """Load the model with ``loader(model, settings, load_options, work)``; where this actor runs (pid, node,
        GPU) and at what priority: the driver's ``niceness``, where this process may take it (a cluster's Ray starts
        its workers at its own ``worker_niceness``, 15 by default; only a privileged process may lower its own)."""
        import ray

        with suppress(OSError, AttributeError):  # no privilege, or no such call on this system
            os.setpriority(os.PRIO_PROCESS, 0, niceness)
        node = ray.get_runtime_context().get_node_id()
        paths = source.here(node)
        options = {**load_options, **({"base_model": paths["base_model"]} if "base_model" in paths else {})}
        self.slot_solver = loader(paths["model"], settings, options, work)
        self.loaded = {"pid": os.getpid(), "node": node, "device": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                       "model": paths["model"], "niceness": os.nice(0) if hasattr(os, "nice") else niceness}
        return self.loaded

    def solve(self, task, rung: int, caps: tuple[float, float] | None) -> dict:
        """``task`` at ``rung`` within ``caps`` (seconds from now for the task, seconds for each search; None:
        uncapped): its record's JSON, and this process's peak GPU memory so far ({} on a CPU). The caps count from
        this node's clock, whatever the driver's says."""
        budget = None if caps is None else TaskBudget(time.time() + caps[0], caps[1])
        return {"record": to_json(self.slot_solver.solve(task, rung, budget)), "memory": self.slot_solver.memory()}

    def steps(self) -> int:
        """The engine steps this process has made so far (what the driver's watchdog watches move)."""
        return progress.steps()


def model_files(folder: Path) -> dict[str, Path]:
    """A model folder's files by their names inside it: every file (links followed) but hidden ones and a training
    folder's ``checkpoints/`` (optimizer states no load reads)."""
    files = {}
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if path.is_file() and not any(part.startswith(".") or part == "checkpoints" for part in parts):
            files["/".join(parts)] = path
    return files


class ModelServer:
    """Hands out the files of a model's folders in pieces (an actor on the driver's node)."""

    def __init__(self, folders: dict[str, str]):
        self.folders = folders
        self.files = {role: model_files(Path(folder)) for role, folder in folders.items()}

    def listing(self, role: str) -> dict:
        """The folder of ``role``: its path on the driver's node and its files' names, sizes and change times."""
        return {"folder": self.folders[role], "files": [[name, path.stat().st_size, path.stat().st_mtime_ns]
                                                        for name, path in self.files[role].items()]}

    def piece(self, role: str, name: str, offset: int, size: int) -> bytes:
        with open(self.files[role][name], "rb") as handle:  # KeyError: a name it does not list
            handle.seek(offset)
            return handle.read(size)


def receive_model(server, role: str, chunk_bytes: int) -> Path:
    """The folder of ``role`` copied from the server into this node's cache (once: later actors find it there)."""
    import ray
    from filelock import FileLock

    listing = ray.get(server.listing.remote(role))
    digest = hashlib.sha256(json.dumps(listing, sort_keys=True).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / MODEL_CACHE
    cache.mkdir(parents=True, exist_ok=True)
    folder = cache / digest
    with FileLock(str(cache / f"{digest}.lock")):
        if (folder / COMPLETE).exists():
            return folder
        partial = cache / f"{digest}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        for name, size, _ in listing["files"]:
            kit_subfolder((partial / name).parent, within=cache)
            with replacing(partial / name, within=cache, binary=True) as handle:  # never through a link
                for offset in range(0, size, chunk_bytes):
                    handle.write(ray.get(server.piece.remote(role, name, offset, chunk_bytes)))
        replace_file(partial / COMPLETE, json.dumps(listing), within=cache)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(partial, folder)
    return folder


def model_folders(model: str | os.PathLike, load_options: dict) -> dict[str, str]:
    """The folders an actor needs, by role: the model's, and the base it goes on when that is a local folder
    (a base-plus-delta's, prepared by ``prepare_model``; an adapter's, given or named in its config)."""
    folders = {"model": str(Path(model).resolve())}
    base = load_options.get("base_model")
    if base is None:
        base = read_model_folder(model).adapter_config.get("base_model_name_or_path")
    if isinstance(base, str) and (Path(base) / "config.json").is_file():
        folders["base_model"] = str(Path(base).resolve())
    return folders


def prepare_model(model: str | os.PathLike, load_options: dict | None, progress: bool = True) -> dict:
    """The load options the actors get: for a base-plus-delta model, its base built once here (or found built)."""
    options = dict(load_options or {})
    if not is_delta_folder(model) or options.get("base_model"):
        return options
    name = read_model_folder(model).base_name
    started, built = time.monotonic(), is_built(built_folder(name), name)
    folder = build_base(name, weights=options.get("base_weights"), download=options.get("download_base", True),
                        progress=progress)
    how = "found built" if built else f"built once by the driver in {time.monotonic() - started:.0f} s"
    message = f"base {name}: {how}, {folder}; every worker loads it from there"
    logger.info(message)
    if progress:
        print(message, flush=True)
    return {**options, "base_model": str(folder)}
