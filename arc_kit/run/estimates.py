"""What a run would cost: seconds for other tasks or settings, at measured speeds where there are some, guessed ones
elsewhere; and the table of what to expect per model size and GPU.

``estimate_from_folder`` reads a run the kit wrote (a run folder, or a folder holding one: a Kaggle run's
working folder holds its run in ``arc_kit_run/``), takes the tasks it solved and the model it ran from
its own records (``run.json``'s data set where it loads here, else the ``tasks.json`` its pool wrote;
``run.json``'s model, and the shape recorded with it where the model is not here), prices the speeds its
records show (``planner.speeds_from_records``: every task that finished with the model) and applies them
to the tasks and settings asked about (their ``planner.work_units``). A part no record measured is priced
at the speed ``expectations.guessed_speeds`` guesses for the model on the GPU named (``Speeds.sources``
says which is which); without a run every part is guessed.

The wall time is for a machine stated in its units: ``gpus`` GPUs with ``workers_per_gpu`` worker
processes sharing each (none: this machine's CPU, one process). A measured speed is one worker's, as the
run measured it (sharing its GPU as that run's workers did), so a measured part takes its seconds over
all the workers; a guessed speed is one process alone on a GPU, and workers sharing a GPU overlap only
their host overheads (``expectations.PartCost.with_workers``), exactly as ``--table`` prices a cell
(``expectations_table.expected_cell``). ``expectations_for`` is that table for a task set. They are what
``arc-kit estimate`` prints; this module knows nothing of solving.
"""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from arc_kit.data.datasets import load_challenges, load_tasks
from arc_kit.data.tasks import InvalidDataError, TaskSet
from arc_kit.model.folders import default_model_path
from arc_kit.model.loading import load_encoder, token_budget_of
from arc_kit.model.memory import Architecture
from arc_kit.run.expectations import Device, guessed_speeds, shape_of_folder, sized
from arc_kit.run.expectations_table import Machine, expectations_table, expected_cell, paper_check
from arc_kit.run.planner import PARTS, Speeds, measure, speeds_from_records, work_units
from arc_kit.run.record_json import read_records
from arc_kit.run.runs import RECORDS_FILE, RUN_FILE, TASKS_FILE, RunFolderError, read_run_info, read_run_settings
from arc_kit.settings import SolveSettings, solve_preset

PAPER_CHECK_TASKS = "arc-agi-1/evaluation"  # the set the paper's timed run solved
MAX_ESTIMATE_SECONDS = 100 * 31_536_000.0  # a century: an estimate beyond it comes from damaged speeds


@dataclass
class Estimate:
    """The planner's estimate of a run, from the speeds an earlier run measured (and guesses where it did not)."""

    speeds: Speeds
    seconds: dict[str, float]  # training, generation, scoring, total: one worker at the measured (or guessed) speeds
    wall_seconds: dict[str, float]  # the same on the machine of ``machine``
    tasks: int
    settings: SolveSettings
    machine: str  # the wall time's unit, in words
    notes: list[str] = field(default_factory=list)  # where the run's tasks and model came from


@dataclass(frozen=True)
class MeasuredRun:
    """What a run's own records say for an estimate: its folder, settings, the tasks it solved, its model."""

    folder: Path
    settings: SolveSettings
    tasks: TaskSet
    model: Path  # the run's model where it is here, else the model whose tokenizer counts its tokens
    shape: Architecture | None  # the run's model's shape (its folder's, or the one recorded with it)
    notes: list[str]


def find_run(path: str | os.PathLike) -> Path:
    """The run folder of ``path``: itself when it holds a ``run.json``, else its one subfolder that does (a Kaggle
    run's working folder); RunFolderError in one line when there is none, or several."""
    path = Path(path)
    if (path / RUN_FILE).is_file():
        return path
    below = sorted(folder for folder in path.iterdir() if (folder / RUN_FILE).is_file()) if path.is_dir() else []
    if len(below) == 1:
        return below[0]
    if below:
        raise RunFolderError(f"{path} holds {len(below)} runs ({', '.join(folder.name for folder in below[:3])}): "
                             "give one of them")
    raise RunFolderError(f"{path} holds no run ({RUN_FILE} missing, in it and in its folders)")


def read_measured_run(path: str | os.PathLike, model: str | os.PathLike | None = None) -> MeasuredRun:
    """The run of ``path`` (``find_run``) as its records say: ``model`` overrides the model it names."""
    folder = find_run(path)
    info, settings = read_run_info(folder), read_run_settings(folder)
    tasks, notes = _run_tasks(folder, info)
    named = model or info.get("model")
    if named and Path(named).exists():
        notes.append(f"the model: {named}" + ("" if model else f" (named in its {RUN_FILE})"))
        return MeasuredRun(folder, settings, tasks, Path(named), shape_of_folder(named), notes)
    try:
        shape = Architecture(**info["model_shape"])  # as the Kaggle job recorded it
    except (KeyError, TypeError):
        shape = None
    notes.append(f"the model: {named or 'none named'}, not here: tokens counted with {default_model_path()}'s "
                 "tokenizer (every shrunk model writes a symbol a token); "
                 + (f"its recorded shape ({sized(shape)}) prices what the run did not measure" if shape else
                    "what the run did not measure is priced at the kit's fixed assumption (pass --model)"))
    return MeasuredRun(folder, settings, tasks, default_model_path(), shape, notes)


def _run_tasks(folder: Path, info: dict) -> tuple[TaskSet, list[str]]:
    """The tasks the run in ``folder`` solved: its data set where it loads here, else its pool's ``tasks.json``."""
    dataset = info.get("dataset")
    if isinstance(dataset, str):
        with suppress(InvalidDataError, OSError, ValueError):
            return load_tasks(dataset, strict=False), [f"the tasks: {dataset} (its {RUN_FILE})"]
    if (folder / TASKS_FILE).is_file():
        return load_challenges(folder / TASKS_FILE, strict=False), \
            [f"the tasks: {folder / TASKS_FILE} (what its workers were given)"]
    raise RunFolderError(f"{folder}: its {RUN_FILE} names no data set that loads here ({dataset or 'none'}) and it "
                         f"holds no {TASKS_FILE}: which tasks its records timed cannot be told")


def estimate_from_folder(folder: str | os.PathLike | None, tasks: TaskSet, model: str | os.PathLike | None = None,
                         target: SolveSettings | None = None, *, gpus: int = 0, workers_per_gpu: int = 1,
                         speedup: float = 1.0, device: Device | None = None) -> Estimate:
    """Seconds ``target`` (default: the measured run's own settings, or the paper's without a run) would take on
    ``tasks``, at the speeds the run of ``folder`` measured (None: no run), on ``gpus`` GPUs of ``device`` with
    ``workers_per_gpu`` workers each (0 GPUs: this CPU, one process), ``speedup`` times faster than measured; a
    part it did not measure at the speed guessed for the model on ``device`` (None: the CPU). ``model`` (default:
    the run's, else the shipped model) counts the tokens and gives the shape the guesses are for."""
    if gpus < 0 or workers_per_gpu < 1 or speedup <= 0 or (gpus and device is None) or (not gpus and
                                                                                       workers_per_gpu > 1):
        raise ValueError(f"gpus {gpus}, workers_per_gpu {workers_per_gpu}, speedup {speedup}: gpus must be 0 (this "
                         "CPU, one process) or name the GPU, workers a GPU at least 1 (and GPUs to share), speedup "
                         "positive")
    run = read_measured_run(folder, model) if folder is not None else None
    model = run.model if run else Path(model or default_model_path())
    shape = run.shape if run else shape_of_folder(model)
    target = target or (run.settings if run else solve_preset("paper"))
    target = target.replace(max_len=token_budget_of(model, target.max_len))
    encoder = load_encoder(model, max_len=target.max_len)
    sizes = [measure(task, encoder, target.max_len) for task in tasks.tasks()]
    speeds = guessed_speeds(shape, device, target, sizes)
    if run is not None:
        counting = load_encoder(model, max_len=run.settings.max_len)
        speeds = speeds_from_records(read_records(run.folder / RECORDS_FILE), run.tasks, counting, run.settings,
                                     speeds)
    seconds = {part: getattr(speeds, part) * sum(work_units(size, target)[part] for size in sizes) for part, _ in PARTS}
    if not all(0 <= value <= MAX_ESTIMATE_SECONDS for value in (*seconds.values(), sum(seconds.values()))):
        raise ValueError(f"the speeds give {sum(seconds.values()) / 3600:.3g} hours, beyond any run: "
                         f"{folder or 'the guesses'} cannot be right (a damaged record?)")
    wall = _wall_seconds(seconds, speeds, sizes, target, shape, device, gpus, workers_per_gpu)
    wall = {part: value / speedup for part, value in wall.items()}
    return Estimate(speeds, {**seconds, "total": sum(seconds.values())}, {**wall, "total": sum(wall.values())},
                    len(tasks), target, machine_words(device, gpus, workers_per_gpu, speedup,
                                                      measured=bool(speeds.measured_parts)), run.notes if run else [])


def _wall_seconds(seconds: dict[str, float], speeds: Speeds, sizes, settings: SolveSettings,
                  shape: Architecture | None, device: Device | None, gpus: int, workers_per_gpu: int) -> dict:
    """Per part, the wall seconds on ``gpus`` x ``workers_per_gpu``, measured or guessed (the module's docstring)."""
    workers = max(1, gpus) * workers_per_gpu
    wall = {part: value / workers for part, value in seconds.items()}
    if gpus and shape is not None:
        cell = expected_cell(sizes, settings, shape, Machine(device, gpus, device.name), workers=workers_per_gpu)
        for part, _ in PARTS:
            if not speeds.measured_parts.get(part) and cell.seconds:
                wall[part] = cell.seconds[part]
    return wall


def machine_words(device: Device | None, gpus: int, workers_per_gpu: int, speedup: float = 1.0,
                  measured: bool = False) -> str:
    """The wall time's unit: the machine, its workers, the speed of the measured parts."""
    faster = f", {speedup:g}x the measured speed" if speedup != 1 else \
        (", the measured parts at the speed of the machine that measured them (--speedup scales it)"
         if measured and gpus else "")
    if not gpus:
        return f"this CPU, one process{faster}"
    return f"{gpus} {device.name} x {workers_per_gpu} worker(s) each{faster}"


def expectations_for(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, what: str) -> list[str]:
    """The model size x GPU table for ``tasks`` at ``settings`` (tokens counted by ``model``'s tokenizer: every
    shrunk model writes a symbol a token), and the paper's timed run priced the same way."""
    settings = settings.replace(max_len=token_budget_of(model, settings.max_len))
    encoder = load_encoder(model, max_len=settings.max_len)
    table = expectations_table([measure(task, encoder, settings.max_len) for task in tasks.tasks()], settings, what)
    paper = [measure(task, encoder, settings.max_len) for task in load_tasks(PAPER_CHECK_TASKS).tasks()]
    return [*table, "", paper_check(paper, settings)]
