"""``arc-kit kaggle check``: a built dataset's notebook run here as Kaggle would run it, then go or no-go.

``check_dataset`` reads what ``kaggle build`` wrote (the dataset: its wheels, its ``model/`` or the
Kaggle Model its ``model-source.json`` names; beside it the notebook folder that is pushed), links a
stand-in for ``/kaggle/input`` into a scratch folder (the competition with a few public tasks as its
placeholder test file and the evaluation files beside it, the dataset, and a local copy of each
Kaggle Model where Kaggle mounts them: nothing copied), and runs the notebook through nbclient in a
fresh copy of an environment of the image's versions (``image_environment``), never in the kit's own:
it installs the dataset's wheels offline, checks its settings, finds its model and solves as on Kaggle's first
run after a push (the placeholder's smoke job), with its settings as the competitor edited them (its ``CHANGES``
replaced only when asked), its folders told by the environment variables it reads (``ARC_KIT_INPUT``, ...). Its
printed lines are passed on as they come and read (``NotebookReport``); the run's records say which tasks the model
answered, and why the others got no answer.

Go needs all of it: every wheel of the dataset installed and the kit imported, the model the dataset
carries run (a notebook that runs another, the kit's shipped model say, is stopped at once and said
loudly), its check a go, the run ended, the model's own answers in a valid submission. This module
knows the built folders, Kaggle's mounts and the notebook's lines; the environment is
``image_environment``'s, the solving the notebook's.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from arc_kit.data.datasets import export_kaggle, load_dataset
from arc_kit.data.tasks import TaskSet
from arc_kit.kaggle.dataset_build import IMAGE_MANIFEST, ROOT
from arc_kit.kaggle.image_environment import (
    fresh_copy,
    image_environment,
    package_versions,
    start_notebook,
    stop_notebook,
)
from arc_kit.kaggle.model_input import MODEL_MARKERS, MODEL_SOURCE_FILE, ModelHandle
from arc_kit.names import listed

CHECK_DATASET = "arc-agi-2/evaluation"  # the public set the placeholder test file is made from
CHECK_TASKS = 2
# The method made cheap enough for a CPU, for a check that replaces the notebook's CHANGES (--changes): it proves the
# path, the model's answers included, not a score
CHECK_CHANGES = {"inference_augmentations": 1, "scoring_augmentations": 1, "sampler.kind": "greedy", "ttt.steps": 1,
                 "max_len": 2048}
SHOWN_VERSIONS = ("transformers", "tokenizers", "peft", "accelerate", "safetensors", "numpy", "ray", "torch")
RUN_FOLDER = "arc_kit_run"  # competition.RUN_FOLDER: below the working folder, the run's records
# How the notebook's lines that say something went wrong begin (notebooks/submission.py), and the kernel's own
SETTINGS_WRONG = ("a setting is wrong: ", "; nothing is run, the fallback submission stands")  # how it says a bad one
TROUBLE = (SETTINGS_WRONG[0], "cannot start (", "the run failed (", "the notebook raised", "installing the",
           "the kit does not import", "no arc-kit dataset below", "could not check ")


class CheckRefused(ValueError):
    """The folders given are no built dataset, or a Kaggle Model they name has no local copy: one line."""


@dataclass(frozen=True)
class BuiltDataset:
    """What ``kaggle build`` wrote, as the check needs it."""

    folder: Path
    notebook: Path  # the .ipynb that is pushed (the notebook folder's, else the dataset's own)
    dataset_id: str  # OWNER/SLUG
    competition: str
    wheels: tuple[str, ...]
    carries_model: bool  # model/ holds a model
    model_source: ModelHandle | None  # the Kaggle Model of model-source.json
    model_sources: tuple[ModelHandle, ...]  # the notebook's inputs (kernel-metadata.json)


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise CheckRefused(f"cannot read {path} ({type(error).__name__}): is it a folder `arc-kit kaggle build` "
                           "made?") from None
    if not isinstance(data, dict):
        raise CheckRefused(f"{path} holds no object: is it a folder `arc-kit kaggle build` made?")
    return data


def read_built_dataset(folder: str | os.PathLike, notebook_folder: str | os.PathLike | None = None) -> BuiltDataset:
    """The dataset in ``folder`` and its notebook folder (default: ``folder`` plus ``-notebook``); CheckRefused in
    one line when either is not what a build writes."""
    folder = Path(folder)
    notebook_folder = Path(notebook_folder) if notebook_folder else folder.parent / f"{folder.name}-notebook"
    wheels = tuple(sorted(path.name for path in (folder / "wheels").glob("*.whl")))
    if not any(name.startswith("arc_kit-") for name in wheels):
        raise CheckRefused(f"{folder} holds no wheels/arc_kit-*.whl: not a dataset `arc-kit kaggle build` made")
    dataset_id = str(_json(folder / "dataset-metadata.json").get("id", ""))
    if dataset_id.count("/") != 1:
        raise CheckRefused(f"{folder / 'dataset-metadata.json'} has no id OWNER/SLUG")
    kernel = _json(notebook_folder / "kernel-metadata.json")
    notebook = notebook_folder / str(kernel.get("code_file") or "submission.ipynb")
    if not notebook.is_file():
        raise CheckRefused(f"no notebook at {notebook}: build again, or pass --notebook with the folder you push")
    competitions = kernel.get("competition_sources") or []
    if not competitions:
        raise CheckRefused(f"{notebook_folder / 'kernel-metadata.json'} names no competition_sources")
    try:
        sources = tuple(ModelHandle.parse(handle) for handle in kernel.get("model_sources") or [])
        named = _json(folder / MODEL_SOURCE_FILE).get("model_source") if (folder / MODEL_SOURCE_FILE).exists() else None
        model_source = ModelHandle.parse(named) if named else None
    except ValueError as error:
        raise CheckRefused(str(error)) from None
    carries = any((folder / "model" / marker).exists() for marker in (*MODEL_MARKERS, "delta.json"))
    return BuiltDataset(folder, notebook, dataset_id, str(competitions[0]), wheels, carries, model_source, sources)


def mount_folder(input_root: Path, handle: ModelHandle) -> Path:
    """Where Kaggle mounts a Kaggle Model: ``MODEL/FRAMEWORK/VARIATION/VERSION`` below the input, lower case
    (version 1 when the handle names none)."""
    return input_root.joinpath(*handle.mount_parts[:3], str(handle.version or 1))


def simulated_input(root: Path, built: BuiltDataset, tasks: TaskSet,
                    kaggle_model: str | os.PathLike | None) -> tuple[Path, Path]:
    """(the stand-in for /kaggle/input below ``root``, the model folder the notebook must run in it); the dataset
    and the Kaggle Model are trees of links to their files (nothing copied)."""
    competition = root / "competitions" / built.competition
    export_kaggle(tasks, competition, "evaluation")  # the public files: the test file is the placeholder
    export_kaggle(tasks.without_solutions(), competition, "test")
    owner, slug = built.dataset_id.split("/")
    dataset = shutil.copytree(built.folder.resolve(), root / "datasets" / owner / slug, copy_function=os.symlink)
    handles = list(dict.fromkeys([*built.model_sources, *([built.model_source] if built.model_source else [])]))
    if handles and kaggle_model is None:
        raise CheckRefused(f"the notebook reads the Kaggle Model {handles[0]}: pass --kaggle-model DIR, a local copy "
                           "of it, to mount it where Kaggle mounts it")
    if len(handles) > 1:
        raise CheckRefused(f"the notebook names {len(handles)} Kaggle Models ({', '.join(map(str, handles))}); the "
                           "check mounts one")
    for handle in handles:
        shutil.copytree(Path(kaggle_model).resolve(), mount_folder(root, handle), copy_function=os.symlink)
    if built.carries_model:
        return root, dataset / "model"
    if built.model_source is not None:
        return root, mount_folder(root, built.model_source)
    raise CheckRefused(f"{built.folder} carries no model (no model/, no {MODEL_SOURCE_FILE}): build it again")


@dataclass
class NotebookReport:
    """What the notebook's printed lines said, read as they come."""

    expected_model: Path
    installed: tuple[str, ...] | None = None
    ready: bool | None = None
    model: Path | None = None
    model_check: str | None = None  # its go or no-go line
    settings_problem: str | None = None  # what it said is wrong with its settings (then it runs nothing)
    end: list[str] = field(default_factory=list)  # the end line, and the score line after it
    submission: str | None = None  # the submission's check ("valid" or its problems)
    trouble: list[str] = field(default_factory=list)  # lines that say something went wrong
    wrong_model: str | None = None  # the loud line, when the notebook runs another model than the dataset's

    def take(self, line: str) -> bool:
        """Read one printed line; True when the run must stop now (the notebook runs a model it should not)."""
        installed = re.match(r"installed \d+ wheel\(s\) from .+?: (.*)$", line)
        model = re.match(r"model (.+); input .+; output .+$", line)
        if installed:
            self.installed = tuple(sorted(name.strip() for name in installed.group(1).split(",")))
        elif line.startswith("ready: "):
            self.ready = line.strip() == "ready: True"
        elif model:
            self.model = Path(model.group(1))
            if not _same_folder(self.model, self.expected_model):
                self.wrong_model = _wrong_model_line(self.model, self.expected_model)
                return True
        elif (line.startswith(("go: ", "no-go: ")) and self.model is not None and self.model_check is None
              and not self.end):
            self.model_check = line.strip()
        elif re.match(r"\d+ tasks; ", line):
            self.end = [line.strip()]
        elif line.startswith("score ") and self.end:
            self.end.append(line.strip())
        elif re.search(r"submission\.json: (valid|\d+ problem)", line):
            self.submission = line.strip()
        elif line.startswith(TROUBLE):
            self.trouble.append(line.strip())
            if line.startswith(SETTINGS_WRONG[0]):
                self.settings_problem = line.strip().removeprefix(SETTINGS_WRONG[0]).removesuffix(SETTINGS_WRONG[1])
        return False


def _same_folder(first: Path, second: Path) -> bool:
    return os.path.realpath(first) == os.path.realpath(second)


def _wrong_model_line(used: Path, expected: Path) -> str:
    """The loud line: the notebook runs ``used``, not the dataset's model ``expected``."""
    shipped = _same_folder(used, ROOT / "kaggle_dataset" / "model")
    what = "the kit's shipped model" if shipped else "a model the dataset does not carry"
    return (f"!!! WRONG MODEL: the notebook runs {used} ({what}), not the dataset's model {expected}: on Kaggle it "
            "would submit another model's answers, or find no model at all (is MODEL set in its settings cell?)")


@dataclass
class LocalCheck:
    """The check's outcome: its go or no-go, what it found, the folders it used."""

    report: NotebookReport
    problem: str | None
    wheels: tuple[str, ...]
    answered: int = 0
    tasks: int = 0
    minutes: float = 0.0
    scratch: Path | None = None

    @property
    def go(self) -> bool:
        return self.problem is None

    def lines(self) -> list[str]:
        """The summary: the model folder, the wheels, the end line, then go or no-go."""
        report = self.report
        installed = listed(report.installed) if report.installed is not None else "none (the install failed)"
        lines = [f"model folder run: {report.model or 'none'}"
                 + (" (the dataset's)" if report.model and not report.wrong_model else ""),
                 f"wheels installed: {installed}",
                 f"end line: {' / '.join(report.end) if report.end else 'none (the run did not end)'}"]
        if report.wrong_model:
            lines.append(report.wrong_model)
        if self.go:
            return lines + [f"go: the notebook installed the dataset's {len(self.wheels)} wheel(s), ran its model and "
                            f"submitted the model's answers to {self.answered} of {self.tasks} task(s) "
                            f"({self.minutes:.1f} minutes)"]
        return lines + [f"no-go: {self.problem}"]


def problem_of(report: NotebookReport, wheels: tuple[str, ...], answered: int, tasks: int,
               exit_status: int | None, unanswered: str | None = None) -> str | None:
    """Why the run is a no-go, the first reason found; None for a go. ``unanswered``: why the tasks without the
    model's answer got none, the commonest reason (``analysis.commonest_unanswered``)."""
    if report.wrong_model:
        return f"the notebook runs {report.model}, not the dataset's model {report.expected_model}"
    if report.ready is not True:
        return f"the kit was not installed: {report.trouble[0] if report.trouble else 'the notebook did not say why'}"
    if report.installed != wheels:
        installed = set(report.installed or ())
        missing, extra = sorted(set(wheels) - installed), sorted(installed - set(wheels))
        return (f"the notebook installed {len(installed)} wheel(s), the dataset holds {len(wheels)}"
                + (f"; not installed: {listed(missing)}" if missing else "")
                + (f"; not the dataset's: {listed(extra)}" if extra else ""))
    if report.settings_problem is not None:
        return f"a setting of the notebook is wrong: {report.settings_problem}"
    if report.model is None:
        return f"the notebook found no model: {report.trouble[0] if report.trouble else 'it did not say why'}"
    if report.model_check is None or not report.model_check.startswith("go: "):
        return f"the model's check in the notebook: {report.model_check or 'not printed'}"
    if exit_status not in (0, None) or not report.end:
        last = report.trouble[-1] if report.trouble else f"the notebook ended with exit status {exit_status}"
        return f"the run did not end: {last}"
    if report.submission is None or not report.submission.endswith("valid"):
        return f"the submission: {report.submission or 'not checked'}"
    if answered == 0:
        return f"the model answered none of the {tasks} task(s): " + (unanswered or "every attempt is a fallback")
    return None


def answered_tasks(working: Path) -> tuple[int, str | None]:
    """(the tasks whose submitted attempts are the model's, why the others got none: the commonest reason), from the
    run's records ((0, None) when there are none)."""
    from arc_kit.experiments.analysis import commonest_unanswered
    from arc_kit.run.record_json import read_records
    from arc_kit.run.runs import answered_by_model

    path = working / RUN_FOLDER / "records.jsonl"
    records = read_records(path).values() if path.exists() else []
    return sum(1 for record in records if answered_by_model(record)), commonest_unanswered(records)


def check_tasks(count: int = CHECK_TASKS, dataset: str = CHECK_DATASET) -> TaskSet:
    """The ``count`` shortest tasks of ``dataset`` (prompt and expected answer tokens, one a symbol)."""
    from arc_kit.run.planner import shortest_tasks
    from arc_kit.text import TaskEncoder, Vocabulary

    return shortest_tasks(load_dataset(dataset), TaskEncoder(Vocabulary()), count)


def notebook_environment(input_root: Path, working: Path, scratch: Path, tasks: int, changes: dict | None,
                         python: Path, workers: int = 0) -> dict:
    """The notebook's environment variables: the stand-in folders, its ``CHANGES`` when ``changes`` replace them
    (None: its own), its ``WORKERS`` (0: its default), offline pip; none of this process's ``ARC_KIT_`` settings (the
    notebook must find its model and read its own settings as on Kaggle), Python or pip settings."""
    kept = {key: value for key, value in os.environ.items()
            if not key.startswith(("PIP_", "PYTHON", "ARC_KIT_", "VIRTUAL_ENV", "JUPYTER", "KAGGLE_"))}
    return {**kept, "ARC_KIT_INPUT": str(input_root), "ARC_KIT_WORKING": str(working),
            "ARC_KIT_CACHE": str(scratch / "cache"), **({"ARC_KIT_CHANGES": json.dumps(changes)} if changes is not None
                                                         else {}),
            "ARC_KIT_SMOKE_TASKS": str(tasks), "ARC_KIT_WORKERS": str(workers), "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "JUPYTER_DATA_DIR": str(scratch / "jupyter"),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",  # the kernel's debugger: no warning about this Python's build
            "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def follow_notebook(running, report: NotebookReport, echo: Callable[[str], None]) -> int | None:
    """Pass the running notebook's lines on (indented) and read them; its exit status, or None when it was stopped
    (it ran a model it should not). Stopped at the end, or at once (an interrupt too), with its kernel and workers."""
    try:
        for line in running.stdout:
            line = line.rstrip().split("\r")[-1]  # a progress bar's last state
            echo(f"  | {line}")
            if report.take(line):
                echo(report.wrong_model)
                return None
        return running.wait()
    finally:
        stop_notebook(running)


def check_dataset(folder: str | os.PathLike, *, notebook_folder: str | os.PathLike | None = None,
                  kaggle_model: str | os.PathLike | None = None, tasks: TaskSet | None = None,
                  changes: dict | None = None, environments: str | os.PathLike | None = None,
                  image_manifest: str | os.PathLike | None = None, keep: bool = False,
                  scratch: str | os.PathLike | None = None, echo: Callable[[str], None] = print,
                  workers: int = 0) -> LocalCheck:
    """Run the built dataset ``folder``'s notebook as Kaggle would, on ``tasks`` (default ``check_tasks()``) with its
    own settings (``changes``: its ``CHANGES`` replaced, ``CHECK_CHANGES`` cheap enough for a CPU), and say go or
    no-go (``LocalCheck``).

    ``workers``: the notebook's ``WORKERS`` (0, its default: one here, in its own process; 2: two Ray actors, as
    Kaggle's GPUs run it). ``kaggle_model``: a local copy of the Kaggle Model the notebook reads. ``environments``:
    where the environment of ``image_manifest``'s versions (default: the one builds use) is kept (default: the kit's
    cache). The stand-in input, the environment's copy and the outputs (``working/``) go into ``scratch`` (a new or
    empty folder, kept), else a new temporary folder, removed after unless ``keep``. ``echo`` is given every line:
    the check's own and the notebook's (indented).
    """
    from arc_kit.model.bases import cache_folder

    built = read_built_dataset(folder, notebook_folder)
    if kaggle_model is not None and not any((Path(kaggle_model) / marker).exists() for marker in MODEL_MARKERS):
        raise CheckRefused(f"--kaggle-model {kaggle_model} is no model folder (no config.json)")
    tasks = tasks if tasks is not None else check_tasks()
    keep = keep or scratch is not None
    if scratch is not None and Path(scratch).exists() and any(Path(scratch).iterdir()):
        raise CheckRefused(f"{scratch} is not empty: the check works in a new or empty folder")
    scratch = Path(scratch) if scratch is not None else Path(tempfile.mkdtemp(prefix="arc-kit-check-"))
    try:
        return _check_in(built, scratch, kaggle_model, tasks, changes,
                         Path(environments) if environments else cache_folder() / "environments",
                         Path(image_manifest or IMAGE_MANIFEST), echo, workers)
    finally:
        if keep:
            echo(f"kept {scratch} (the stand-in input, the environment's copy, the run's outputs in working/)")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def _check_in(built: BuiltDataset, scratch: Path, kaggle_model, tasks: TaskSet, changes: dict | None,
              environments: Path,
              manifest: Path, echo: Callable[[str], None], workers: int) -> LocalCheck:
    """The check's body, in ``scratch``."""
    input_root, expected = simulated_input(scratch / "input", built, tasks, kaggle_model)
    echo(f"checking {built.folder} with the notebook {built.notebook}, as Kaggle runs it after a push: the "
         f"placeholder's smoke job on {len(tasks)} task(s) of {tasks.name or 'a public set'} "
         f"({listed(tasks.ids)}), " + ("the notebook's own CHANGES" if changes is None
                                          else f"CHANGES = {json.dumps(changes)} (--changes)"))
    echo(f"/kaggle/input stands in at {input_root}: competitions/{built.competition}, datasets/{built.dataset_id}"
         + "".join(f", {'/'.join(mount_folder(input_root, handle).relative_to(input_root).parts)} (from "
                   f"{kaggle_model})" for handle in built.model_sources))
    kept = image_environment(environments, manifest)
    python = fresh_copy(kept, scratch / "environment")
    versions = package_versions(python, SHOWN_VERSIONS)
    echo(f"environment: a copy of {kept.parents[1]} (the image's versions, {manifest.name}): "
         + ", ".join(f"{name} {version}" for name, version in versions.items())
         + f" (torch: this machine's build, linked in; Python {platform.python_version()}, this machine's)")
    working = scratch / "working"
    report = NotebookReport(expected)
    notebook = Path(shutil.copy2(built.notebook, scratch / "submission.ipynb"))
    started = time.monotonic()
    environment = notebook_environment(input_root, working, scratch, len(tasks), changes, python, workers)
    exit_status = follow_notebook(start_notebook(python, notebook, environment, scratch), report, echo)
    answered, unanswered = answered_tasks(working)
    problem = problem_of(report, built.wheels, answered, len(tasks), exit_status, unanswered)
    return LocalCheck(report, problem, built.wheels, answered, len(tasks), (time.monotonic() - started) / 60, scratch)
