"""``arc-kit estimate``: what a run would cost, at the speeds an earlier run measured (guessed ones where it measured
none), and the table of what to expect per model size and machine (``--table``).

``estimate_from_folder`` reads a run the kit wrote (``find_run``; its tasks and model as its own records say,
``read_measured_run``), prices the speeds its records show (``planner.speeds_from_records``: every task that
finished with the model) and applies them to the tasks and settings asked about (their ``planner.work_units``).
A part no record measured is priced at the speed ``expectations.guessed_speeds`` guesses for the model on the
GPU named (``Speeds.sources`` says which is which); without a run every part is guessed.

The wall time is for a machine stated in its units: ``gpus`` GPUs with ``workers_per_gpu`` worker
processes sharing each (none: this machine's CPU, one process). A measured speed is one worker's, as the
run measured it (sharing its GPU as that run's workers did), so a measured part takes its seconds over
all the workers; a guessed speed is one process alone on a GPU, and workers sharing a GPU overlap only
their host overheads (``expectations.PartCost.with_workers``), exactly as ``--table`` prices a cell.

Every cell of the table (``expected_cell``; ``expectations_for`` for a task set) is derived, none measured (no
run of a whole task set on a GPU is on record): the tasks' work units priced by ``expectations.part_costs``
(host overhead plus floor times ratio, each from a measurement it names), as many worker processes a GPU as its
memory holds at the weights and the lanes' KV cache (``expectations.workers_per_gpu_for``), the work shared by
the machine's GPUs. A cell also gives the least time, every part at its floor with no overhead. A model whose
weights and cache do not fit one GPU says so. ``paper_check`` prices the one run of a large model whose time is
published, the paper's (NeMo-Minitron-8B in 4 bits, one RTX 4090, 400 ARC-AGI-1 evaluation tasks, its DFS
searching one augmentation at a time), so that the table's error can be judged against it; it prices
transformers' own decode (its forward and caches, as the authors' code decodes). This module prices and
formats; it measures nothing and knows nothing of solving.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

from arc_kit.data.datasets import load_challenges, load_tasks
from arc_kit.data.tasks import InvalidDataError, TaskSet
from arc_kit.model.folders import default_model_path
from arc_kit.model.loading import load_encoder, token_budget_of
from arc_kit.model.memory import Architecture, kv_cache_bytes, parameters, weight_bytes
from arc_kit.run.expectations import (
    BANDWIDTH_RATIO,
    COMPUTE_RATIO,
    CUDA_CONTEXT_BYTES,
    DECODE_OVERHEAD,
    FAST_BANDWIDTH_RATIO,
    FAST_DECODE_OVERHEAD,
    MAX_WORKERS_PER_GPU,
    MEASUREMENTS,
    NEMO_8B,
    TABLE_SHAPES,
    TRAINING_OVERHEAD,
    Device,
    Typical,
    decodes_on_fast_engine,
    gpu_named,
    guessed_speeds,
    part_costs,
    shape_of_folder,
    sized,
    workers_per_gpu_for,
)
from arc_kit.run.planner import PARTS, Speeds, TaskSize, hours, measure, speeds_from_records, work_units
from arc_kit.run.record_json import read_records
from arc_kit.run.runs import RECORDS_FILE, RUN_FILE, TASKS_FILE, RunFolderError, read_run_info, read_run_settings
from arc_kit.settings import SolveSettings, solve_preset

PAPER_CHECK_TASKS = "arc-agi-1/evaluation"  # the set the paper's timed run solved
MAX_ESTIMATE_SECONDS = 100 * 31_536_000.0  # a century: an estimate beyond it comes from damaged speeds


@dataclass(frozen=True)
class Machine:
    device: Device
    count: int  # GPUs
    label: str


TABLE_MACHINES = (Machine(gpu_named("L4"), 4, "4x L4 (Kaggle)"), Machine(gpu_named("T4"), 1, "T4"),
                  Machine(gpu_named("H100"), 1, "H100"))
# The paper's Table 3 and appendix (the authors' run, not the kit's): NeMo-Minitron-8B in 4 bits on one RTX 4090,
# the 400 ARC-AGI-1 evaluation tasks, 16 + 16 augmentations, DFS at T = 9%: test-time training 51 s a task,
# candidate generation 9:32 h, 20:50 h in all.
PAPER_RUN = {"training": 400 * 51.0, "generation": 9 * 3600 + 32 * 60.0, "total": 20 * 3600 + 50 * 60.0}


@dataclass
class Cell:
    """One model on one machine: seconds per part and in all, the workers a GPU and the lanes each decodes
    together, the least seconds."""

    seconds: dict[str, float] = field(default_factory=dict)  # training, generation, scoring, total
    workers: int = 0
    lanes: int = 0  # the KV cache's lanes a worker holds (fewer than the augmentations where memory is short)
    least: float = 0.0
    unfit: str = ""  # why the model does not fit one GPU ("" when it does)

    def text(self, lanes: int) -> str:
        if self.unfit:
            return f"does not fit ({self.unfit})"
        fewer = f", {self.lanes} lanes" if self.lanes < lanes else ""
        return f"{self.seconds['total'] / 3600:.1f} h d ({self.workers}/GPU{fewer}; least {self.least / 3600:.2f} h)"


def worker_bytes(shape: Architecture, typical: Typical, lanes: int) -> float:
    """What one worker holds on its GPU: the weights, and the KV cache of ``lanes`` lanes of a test input."""
    return weight_bytes(shape) + lanes * (typical.prompt + typical.answer) * kv_cache_bytes(shape, 1, 1)


def expected_cell(sizes: Sequence[TaskSize], settings: SolveSettings, shape: Architecture, machine: Machine,
                  workers: int | None = None, lanes: float | None = None) -> Cell:
    """The seconds ``sizes`` take at ``settings`` for ``shape`` on ``machine`` (``workers`` a GPU: as many as fit;
    the lanes halved, as the engine halves them, while a worker's cache does not fit; ``lanes``: searched
    together, default as a solve does)."""
    typical = Typical.of(sizes, settings, lanes)
    memory, lanes = machine.device.memory, settings.inference_augmentations
    while lanes > 1 and worker_bytes(shape, typical, lanes) + CUDA_CONTEXT_BYTES > 0.9 * memory:
        lanes //= 2
    need = worker_bytes(shape, typical, lanes)
    if need + CUDA_CONTEXT_BYTES > 0.9 * memory:
        return Cell(unfit=f"{weight_bytes(shape) / 1e9:.1f} GB of weights, {memory / 1e9:.0f} GB")
    typical = replace(typical, lanes=max(1.0, typical.lanes * lanes / settings.inference_augmentations))
    workers = workers or workers_per_gpu_for(need, memory, 1, cpus=MAX_WORKERS_PER_GPU)
    units = {part: 0.0 for part, _ in PARTS}
    for size in sizes:
        for part, amount in work_units(size, settings).items():
            units[part] += amount
    costs = part_costs(shape, machine.device, typical, decodes_on_fast_engine(settings))
    seconds = {part: units[part] * costs[part].with_workers(workers) / machine.count for part in units}
    least = sum(units[part] * costs[part].floor for part in units) / machine.count
    return Cell({**seconds, "total": sum(seconds.values())}, workers, lanes, least)


def ratio_lines() -> list[str]:
    """What every derived cell rests on: each overhead and ratio, and the measurement it comes from."""
    lines = [f"- {name}: {measurement.value:.6g}, {measurement.what} ({measurement.source})"
             for name, measurement in MEASUREMENTS.items() if name != "cpu_speeds"]
    return lines + [
        f"- decode overhead: {DECODE_OVERHEAD * 1e3:.2f} ms a layer a step (decode_step less its bandwidth floor, "
        "over 30 layers); a scoring forward's overhead is priced the same",
        f"- training overhead: {TRAINING_OVERHEAD * 1e3:.2f} ms a layer a step, and compute ratio: "
        f"{COMPUTE_RATIO:.2f} x the arithmetic floor at the GPU's peak (ttt_step and finetune_step, each a step's "
        "overhead plus the ratio times its arithmetic at the H100's 989 TFLOP/s, solved together); scoring "
        "forwards' arithmetic takes the same ratio",
        f"- the engine (compiled, CUDA graphs): decode overhead {FAST_DECODE_OVERHEAD * 1e3:.3f} ms a layer a step "
        f"and bandwidth ratio {FAST_BANDWIDTH_RATIO:.2f} x the decode floor (fast_overhead_step and fast_step, each "
        "28 layers' overhead plus the ratio times its floor, solved together); "
        "generation is priced so when the settings decode on it (the default), 4-bit models' at the bf16 figures "
        "(the engine's 4-bit GPU step is not measured); scoring forwards are priced as transformers'",
        f"- transformers' decode's bandwidth ratio: {BANDWIDTH_RATIO:g} x the decode floor: not measured (the 135M "
        "model's step is all overhead)"]


def expectations_table(sizes: Sequence[TaskSize], settings: SolveSettings, what: str) -> list[str]:
    """The table's lines: a row per model (``TABLE_SHAPES``), a column per machine (``TABLE_MACHINES``), each cell
    derived (d); the ratios below it."""
    engine = "the compiled engine's decode" if decodes_on_fast_engine(settings) else "transformers' decode"
    lines = [f"expected hours for {what} at {settings.description}; d: derived (host overhead + floor x "
             f"measured ratio, {engine}), no cell measured; least: every part at its floor",
             "", "| model | parameters | " + " | ".join(machine.label for machine in TABLE_MACHINES) + " |",
             "|---|---|" + "---|" * len(TABLE_MACHINES)]
    for shape in TABLE_SHAPES:
        cells = [expected_cell(sizes, settings, shape, machine).text(settings.inference_augmentations)
                 for machine in TABLE_MACHINES]
        bits = "4-bit" if shape.four_bit else "bf16"
        lines.append(f"| {shape.name}, {bits} | {parameters(shape).total / 1e9:.2f}B | " + " | ".join(cells) + " |")
    return lines + ["", "ratios:", *ratio_lines()]


def paper_check(sizes: Sequence[TaskSize], settings: SolveSettings) -> str:
    """The table's model against the paper's own run (``PAPER_RUN``), on ``sizes`` (the 400 ARC-AGI-1 tasks)."""
    machine = Machine(gpu_named("RTX 4090"), 1, "RTX 4090")
    cell = expected_cell(sizes, settings.replace(engine_compile="off"), NEMO_8B.with_four_bit(), machine, workers=1,
                         lanes=1)
    predicted = {part: hours(seconds) for part, seconds in cell.seconds.items()}
    measured = {part: hours(seconds) for part, seconds in PAPER_RUN.items()}
    return (f"check against the paper's run (NeMo-Minitron-8B, 4-bit, one RTX 4090, {len(sizes)} tasks, one "
            f"augmentation searched at a time): TTT {predicted['training']} (paper {measured['training']}), "
            f"generation {predicted['generation']} (paper {measured['generation']}), scoring "
            f"{predicted['scoring']}; total {predicted['total']} (paper {measured['total']}), "
            f"{cell.seconds['total'] / PAPER_RUN['total']:.2f}x the paper's")



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
        speeds = speeds_from_records(read_records(run.folder / RECORDS_FILE, task_ids=run.tasks.ids), run.tasks,
                                     counting, run.settings, speeds)
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
