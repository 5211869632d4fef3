"""``arc-kit estimate``: what a run would take at the speeds an earlier run measured, on the device that measured
them, and at the prior's (``expectations``) on the device asked about; the planner's ladder in a time budget.

``read_measured_run`` reads a run the kit wrote (``find_run``: a run folder, or a working folder holding one):
its settings, its own tasks (the pool's ``tasks.json``, else the tasks of its data set its records name; a
rehearsal's: the full run it stands for, ``FULL_RUN_TASKS``), its model, the device that measured it and its
workers. ``estimate`` prices tasks at the measured speeds (``planner.speeds_from_records``; a part no record
measured at the prior's for the measuring device) and at the prior's speeds. A measured speed stays on the device
that measured it: where the device asked about is another, both figures are given apart, and only a factor the
user states (``speedup``) converts one into the other. A measured figure's workers are the run's (or those asked
for on its device): one worker's seconds over all of them; a guessed figure prices a GPU, whose bandwidth its
workers share. With a time budget a figure also says how the planner would spend it (``plan``: the rungs of the
ladder it gives the tasks, and when their work ends). This module prices and formats; it measures nothing and
knows nothing of solving.
"""

from __future__ import annotations

import os
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from arc_kit.data.datasets import load_challenges, load_tasks
from arc_kit.data.jsonio import read_json
from arc_kit.data.tasks import InvalidDataError, TaskSet
from arc_kit.model.description import read_model_folder
from arc_kit.model.folders import default_model_path
from arc_kit.model.memory import Architecture
from arc_kit.run.expectations import device_named, guessed_on, shape_of_folder, sized
from arc_kit.run.planner import (
    FALLBACK,
    PARTS,
    Planner,
    Speeds,
    TaskSize,
    hours,
    measure,
    speeds_from_records,
    work_units,
)
from arc_kit.run.record_json import read_records
from arc_kit.run.runs import (
    FULL_RUN_TASKS,
    RECORDS_FILE,
    RUN_FILE,
    SPEEDS_FILE,
    TASKS_FILE,
    RunFolderError,
    read_run_info,
    read_run_settings,
)
from arc_kit.settings import SolveSettings, solve_preset

MAX_ESTIMATE_SECONDS = 100 * 31_536_000.0  # a century: an estimate beyond it comes from damaged speeds
UNRECORDED = "a device the run did not record"


@dataclass(frozen=True)
class Machine:
    """Where a figure's seconds run: a device (a GPU's name, "CPU", or ``UNRECORDED``), its GPUs, the workers."""

    device: str
    gpus: int  # 0: a CPU (or not recorded)
    workers: int  # in all

    def words(self) -> str:
        where = f"{self.gpus} {self.device}" if self.gpus else self.device
        return f"{where}, {self.workers} worker{'s' if self.workers != 1 else ''}"


@dataclass(frozen=True)
class Plan:
    """How the planner would spend ``seconds``: tasks per rung of the ladder (``FALLBACK``: none), and when their
    work would end."""

    seconds: float
    rungs: dict[int, int]
    ends: float

    def words(self) -> str:
        rungs = ", ".join(f"{count} at rung {rung}{' (the settings)' if rung == 0 else ''}"
                          for rung, count in sorted(self.rungs.items()) if rung != FALLBACK)
        fallback = self.rungs.get(FALLBACK, 0)
        return f"in {hours(self.seconds)} the planner gives {rungs or 'no task a rung'}" + \
            (f", {fallback} fallback answers only" if fallback else "") + f"; the work ends at {hours(self.ends)}"


@dataclass
class Figure:
    """The tasks' seconds at one set of speeds on one machine: measured, converted by the user's factor, or
    guessed by the prior."""

    how: str  # "measured", "converted" or "guessed"
    machine: Machine
    speeds: Speeds
    seconds: dict[str, float]  # wall seconds per part, and "total"
    plan: Plan | None = None
    source: str = ""  # whose speeds, in words

    def line(self) -> str:
        parts = {part: hours(seconds) for part, seconds in self.seconds.items()}
        return (f"{self.how}, on {self.machine.words()}: TTT {parts['training']}, generation {parts['generation']}, "
                f"scoring {parts['scoring']}; total {parts['total']} (h:mm:ss of wall time)")


@dataclass
class Estimate:
    """A run's estimate: what is priced, each figure, and where the run's parts came from."""

    what: str  # the tasks and settings priced, in words
    settings: SolveSettings
    figures: list[Figure]
    notes: list[str] = field(default_factory=list)  # where the tasks, model and device came from

    def figure(self, how: str) -> Figure | None:
        return next((figure for figure in self.figures if figure.how == how), None)

    def lines(self) -> list[str]:
        """What ``arc-kit estimate`` prints (and a rehearsal after its run): the notes, each figure's speeds and
        their sources, then the tasks' seconds and plan on each figure's machine."""
        lines = list(self.notes)
        for figure in self.figures:
            speeds = figure.speeds
            lines += [f"speeds {figure.how} on {figure.machine.device} ({figure.source}): training "
                      f"{speeds.training:.3g} s/token-step, generation {speeds.generation:.3g} s/unit, scoring "
                      f"{speeds.scoring:.3g} s/prompt token", *(f"  {line}" for line in speeds.sources())]
        lines.append(f"{self.what}:")
        for figure in self.figures:
            lines.append(f"  {figure.line()}")
            if figure.plan is not None:
                lines.append(f"    {figure.plan.words()}")
        return lines


@dataclass(frozen=True)
class MeasuredRun:
    """What a run's own files say for an estimate."""

    folder: Path
    settings: SolveSettings
    tasks: TaskSet  # the tasks it timed
    default_tasks: TaskSet  # what an estimate prices by default: its own tasks, a rehearsal's full run
    default_words: str
    model: Path  # the run's model where it is here, else the model whose tokenizer counts its tokens
    shape: Architecture | None  # the run's model's shape (its folder's, or the one recorded with it)
    machine: Machine  # the device that measured its speeds, its GPUs, its workers
    records: dict
    plan_hours: float | None  # a rehearsal's: the hours a full run plans in
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
    """The run of ``path`` (``find_run``) as its files say; ``model`` overrides the model it names."""
    folder = find_run(path)
    info, settings = read_run_info(folder), read_run_settings(folder)
    tasks, notes, records = run_tasks(folder, info)
    default, words = tasks, f"the run's {len(tasks)} tasks"
    if (folder / FULL_RUN_TASKS).is_file():
        default = load_challenges(folder / FULL_RUN_TASKS, strict=False)
        words = f"the {len(default)} tasks of the full run it rehearses ({FULL_RUN_TASKS})"
    recorded = info.get("model")
    named = model or (recorded.get("path") if isinstance(recorded, dict) else recorded)  # a solve records a dict
    machine = _run_machine(folder, info)
    notes.append(f"the device that measured it: {machine.words()} (its {RUN_FILE})")
    rehearsal = info.get("rehearsal") if isinstance(info.get("rehearsal"), dict) else {}
    plan_hours = rehearsal.get("plan_hours") if isinstance(rehearsal.get("plan_hours"), (int, float)) else None
    common = dict(folder=folder, settings=settings, tasks=tasks, default_tasks=default, default_words=words,
                  machine=machine, records=records, plan_hours=plan_hours, notes=notes)
    if isinstance(named, (str, os.PathLike)) and str(named) and Path(named).exists():
        notes.append(f"the model: {named}" + ("" if model else f" (named in its {RUN_FILE})"))
        return MeasuredRun(model=Path(named), shape=shape_of_folder(named), **common)
    try:
        shape = Architecture(**info["model_shape"])  # as the Kaggle job recorded it
    except (KeyError, TypeError):
        shape = None
    notes.append(f"the model: {named or 'none named'}, not here: tokens counted with {default_model_path()}'s "
                 "tokenizer (every shrunk model writes a symbol a token); "
                 + (f"its recorded shape ({sized(shape)}) prices what the run did not measure" if shape else
                    "what the run did not measure is priced at the kit's fixed assumption (pass --model)"))
    return MeasuredRun(model=default_model_path(), shape=shape, **common)


def run_tasks(folder: Path, info: dict) -> tuple[TaskSet, list[str], dict]:
    """The tasks the run in ``folder`` timed and their records: its pool's ``tasks.json``, else those of its data set
    (where it loads here), else of a rehearsal's full run, that its records name. Only those tasks' records are read
    (``record_json.read_records``: a line at a time, the file bounded)."""
    path = folder / RECORDS_FILE

    def records_of(tasks: TaskSet) -> dict:
        return read_records(path, task_ids=tasks.ids) if path.exists() else {}

    if (folder / TASKS_FILE).is_file():
        tasks = load_challenges(folder / TASKS_FILE, strict=False)
        return tasks, [f"the tasks: {folder / TASKS_FILE} (what its workers were given)"], records_of(tasks)
    dataset = info.get("dataset")
    sources = [(dataset, load_tasks)] if isinstance(dataset, str) else []
    if (folder / FULL_RUN_TASKS).is_file():
        sources.append((folder / FULL_RUN_TASKS, load_challenges))
    for source, load in sources:
        try:
            loaded = load(source, strict=False)
        except (InvalidDataError, OSError, ValueError):
            continue
        records = records_of(loaded)
        timed = [task_id for task_id in loaded.ids if task_id in records]
        return loaded.select(timed), [f"the tasks: the {len(timed)} of {source} its records name"], records
    raise RunFolderError(f"{folder}: its {RUN_FILE} names no data set that loads here ({dataset or 'none'}) and it "
                         f"holds no {TASKS_FILE}: which tasks its records timed cannot be told")


def _run_machine(folder: Path, info: dict) -> Machine:
    """The device a run measured on (its ``run.json``'s, or the device its model was loaded on), its GPUs, and its
    workers (the most a pool ran, in ``speeds.json``, else as it started)."""
    model = info.get("model") if isinstance(info.get("model"), dict) else {}
    device = info.get("device") or ("CPU" if str(model.get("device", "")).startswith("cpu") else None)
    workers = info.get("workers")
    with suppress(OSError, ValueError, TypeError, AttributeError, InvalidDataError):
        workers = read_json(folder / SPEEDS_FILE).get("workers") or workers
    gpus = info.get("gpus")
    return Machine(device if isinstance(device, str) else UNRECORDED, gpus if isinstance(gpus, int) else 0,
                   workers if isinstance(workers, int) and workers > 0 else 1)


def plan(sizes: list[TaskSize], settings: SolveSettings, speeds: Speeds, seconds: float, workers: int) -> Plan:
    """What the planner does with ``sizes`` in ``seconds`` at ``speeds`` with ``workers`` sharing the work: each
    task's rung as it would choose it, the clock moved on by the task's seconds over the workers."""
    now = [0.0]
    planner = Planner(sizes, settings, seconds, Speeds(**{part: getattr(speeds, part) for part, _ in PARTS}),
                      clock=lambda: now[0], workers=workers, longest_first=workers > 1)
    rungs = Counter()
    for task_id in list(planner.remaining):
        rung = planner.choose(task_id)
        planner.start(task_id)
        rungs[rung] += 1
        if rung != FALLBACK:
            now[0] += planner.speeds.seconds(planner.sizes[task_id], planner.rungs[rung]) / workers
    return Plan(seconds, dict(rungs), now[0])


def estimate(run: MeasuredRun | None, tasks: TaskSet | None = None, model: str | os.PathLike | None = None,
             target: SolveSettings | None = None, *, device: str | None = None, gpus: int = 0,
             workers_per_gpu: int = 1, speedup: float | None = None, hours_to_plan: float | None = None,
             what: str | None = None) -> Estimate:
    """``tasks`` (default: the run's ``default_tasks``) at ``target`` (default: the run's settings, the paper's
    without a run), measured by ``run`` and guessed by the prior, on ``gpus`` GPUs named ``device`` with
    ``workers_per_gpu`` each (None: the run's own machine, this CPU without a run); ``speedup``: the user's factor
    from the measuring device to the one asked about; ``hours_to_plan`` (default: a rehearsal's): the planner's
    rungs in that time. ``model`` (default: the run's, else the shipped model) counts tokens and gives the shape."""
    if gpus < 0 or workers_per_gpu < 1 or (speedup is not None and speedup <= 0) or (device and not gpus):
        raise ValueError(f"gpus {gpus}, workers_per_gpu {workers_per_gpu}, speedup {speedup}: a device needs its "
                         "GPUs counted, workers a GPU at least 1, speedup positive")
    tasks = tasks if tasks is not None else (run.default_tasks if run else None)
    if tasks is None:
        raise ValueError("no tasks to price: name them (--dataset) or give a run (--records)")
    model = run.model if run else Path(model or default_model_path())
    shape = run.shape if run else shape_of_folder(model)
    target = target or (run.settings if run else solve_preset("paper"))
    target = target.replace(max_len=read_model_folder(model).token_budget(target.max_len))
    encoder = read_model_folder(model).encoder(max_len=target.max_len)
    sizes = [measure(task, encoder, target.max_len) for task in tasks.tasks()]
    units = {part: sum(work_units(size, target)[part] for size in sizes) for part, _ in PARTS}
    asked = Machine(device, gpus, gpus * workers_per_gpu) if device else (run.machine if run else Machine("CPU", 0, 1))
    plan_seconds = 3600 * hours_to_plan if hours_to_plan else (3600 * run.plan_hours if run and run.plan_hours else
                                                                None)
    figures, notes = [], list(run.notes) if run else []
    if run is not None:
        figures += _measured_figures(run, asked, device, speedup, units, sizes, target, plan_seconds, notes)
    guessed = guessed_on(shape, asked.device, target, sizes)
    if device_named(asked.device) is not None and shape is not None:
        figures.append(_figure("guessed", asked, guessed, units, max(1, asked.gpus), sizes, target, plan_seconds,
                               "the prior, " + ("a GPU's: its workers share it" if asked.gpus else "one process")))
    else:
        notes.append(f"no prior for {asked.device}: {guessed.guess}")
    settings_words = "the run's settings" if run and target == run.settings.replace(max_len=target.max_len) else \
        "the settings asked for"
    what = what or (run.default_words if run and tasks is run.default_tasks else f"{len(tasks)} tasks")
    return Estimate(f"{what} at {settings_words} ({target.description})", target, figures, notes)


def _measured_figures(run: MeasuredRun, asked: Machine, device: str | None, speedup: float | None, units: dict,
                      sizes: list[TaskSize], settings: SolveSettings, plan_seconds: float | None,
                      notes: list[str]) -> list[Figure]:
    """The figure at the run's speeds (a part none measured at the prior's for the measuring device): on the machine
    asked about when it is the measuring device (or none is named), else on the run's own, beside it the same
    converted by the user's ``speedup`` (or a note that nothing converts it)."""
    counting = read_model_folder(run.model).encoder(max_len=run.settings.max_len)
    guessed = guessed_on(run.shape, run.machine.device, settings, sizes)
    speeds = speeds_from_records(run.records, run.tasks, counting, run.settings, guessed)
    measuring = device_named(run.machine.device)
    same = device is None or (measuring is not None and device_named(device) is measuring)
    on = asked if same else run.machine
    source = f"{speeds.measured_tasks} tasks of {run.folder}, one worker's"
    figures = [_figure("measured", on, speeds, units, on.workers, sizes, settings, plan_seconds, source)]
    if not same and speedup:
        figures.append(_figure("converted", asked, speeds, units, asked.workers * speedup, sizes, settings,
                               plan_seconds, f"{source} on {run.machine.device}, {speedup:g}x by your --speedup"))
    elif not same:
        notes.append(f"measured on {run.machine.device}, asked about {device}: no factor between the two is on "
                     "record, so each figure stays on its own device (--speedup N converts at your factor)")
    return figures


def _figure(how: str, machine: Machine, speeds: Speeds, units: dict, parallel: float, sizes, settings: SolveSettings,
            plan_seconds: float | None, source: str) -> Figure:
    """The wall seconds of ``units`` at ``speeds`` shared by ``parallel`` workers (or GPUs), and the plan."""
    seconds = {part: getattr(speeds, part) * units[part] / parallel for part, _ in PARTS}
    total = sum(seconds.values())
    if not all(0 <= value <= MAX_ESTIMATE_SECONDS for value in (*seconds.values(), total)):
        raise ValueError(f"the {how} speeds give {total / 3600:.3g} hours, beyond any run: they cannot be right "
                         "(a damaged record?)")
    scaled = Speeds(**{part: getattr(speeds, part) * machine.workers / parallel for part, _ in PARTS})
    chosen = plan(sizes, settings, scaled, plan_seconds, machine.workers) if plan_seconds else None
    return Figure(how, machine, speeds, {**seconds, "total": total}, chosen, source)


def estimate_from_folder(folder: str | os.PathLike | None, tasks: TaskSet | None = None,
                         model: str | os.PathLike | None = None, target: SolveSettings | None = None,
                         **options) -> Estimate:
    """``estimate`` of the run of ``folder`` (None: no run, every speed guessed)."""
    run = read_measured_run(folder, model) if folder is not None else None
    return estimate(run, tasks, model, target, **options)
