"""Kaggle glue: the competition run that never loses a submission, and the dataset that carries the kit.

``run_competition`` is what the submission notebook calls: find the competition files under
``/kaggle/input`` (the current competition's folder, ``COMPETITION``, first), write a complete
fallback ``submission.json`` at once, notice when the test file is the public placeholder (then run
a short smoke job), otherwise solve every test task within the time budget on all GPUs, keeping the
submission complete and valid after every task and stopping the workers before the limit.

``build_dataset`` assembles the folder uploaded as a Kaggle dataset: the package as a wheel, the
wheels of whatever the kit needs that the competition image lacks (from a recorded
``ImageManifest``, written on Kaggle by ``RECORD_IMAGE_CELL``), a model, ``dataset-metadata.json``
and a README. ``simulate_competition_input`` builds a stand-in for ``/kaggle/input`` from public
data, so the whole path runs on any machine. This module knows Kaggle's folders and files; the
solving is ``workers``' and the planning ``planner``'s.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from arc_kit import __version__
from arc_kit import workers as worker_pool  # called through the module, so that a replaced solve_in_workers is used
from arc_kit.datasets import export_kaggle, find_competition_files, load_challenges, load_dataset
from arc_kit.locking import holding_folder
from arc_kit.bases import locate_wheel
from arc_kit.models import DELTA_INDEX, default_model_path, is_delta_folder, token_budget_of
from arc_kit.records import answers_from_records, read_records
from arc_kit.run import RECORDS_FILE, RUN_FILE, RunFolderError, check_run, clear_run, has_records
from arc_kit.settings import CompetitionSettings, SolveSettings, smoke
from arc_kit.submission import build_submission, load_submission, write_submission
from arc_kit.tasks import TaskSet

logger = logging.getLogger(__name__)
KAGGLE_WORKING = Path("/kaggle/working")
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "arc_kit.json", "training_log.csv", "loss_curve.png",
               "adapter_config.json", "delta.json", "plan.json", "training_call.log")


COMPETITION = "arc-prize-2026-arc-agi-2"  # the competition's slug: its folder's name, and kernel-metadata's source
RUN_FOLDER = "arc_kit_run"  # below the working folder: the run's records, plans and worker folders


@dataclass
class CompetitionRun:
    submission_path: Path
    placeholder: bool
    tasks: int  # every task id of the test file, malformed ones included
    solved_tasks: int  # tasks that got model work (the rest have fallback answers)
    seconds: float
    error: str | None = None  # why solving stopped early, if it did (the submission is complete anyway)


@holding_folder("working", RUN_FOLDER)  # one job at a time in a working folder: its lock, from the start
def run_competition(model: str | os.PathLike, settings: SolveSettings = SolveSettings(), *,
                    input_root: str | os.PathLike = "/kaggle/input", working: str | os.PathLike = KAGGLE_WORKING,
                    started: float | None = None, hours: float = CompetitionSettings.hours,
                    safety_minutes: float = CompetitionSettings.safety_minutes,
                    stop_minutes: float = CompetitionSettings.stop_minutes,
                    smoke_tasks: int = CompetitionSettings.smoke_tasks, workers: int | None = None,
                    load_options: dict | None = None, force_full: bool = False, progress: bool = True,
                    competition: str = COMPETITION, restart: bool = False, adopt: bool = False) -> CompetitionRun:
    """The competition notebook's job; ``submission.json`` in ``working`` is valid from the first second.

    The limit is ``hours`` after ``started``: the planner plans to end ``safety_minutes`` before it,
    and workers still running ``stop_minutes`` before it are stopped, so the last write comes first.
    An earlier run of the same settings in ``working`` is resumed (its records kept); one of other
    settings is refused (``run.RunFolderError``) before anything is written, unless ``restart``
    discards it (records left without a ``run.json`` too, unless ``adopt`` keeps them). Past that nothing
    raises: a failure is reported in ``error`` and the submission on disk stays complete.
    """
    started = time.time() if started is None else started
    if not 0 <= stop_minutes <= safety_minutes:
        raise ValueError(f"stop_minutes ({stop_minutes}) must lie between 0 and safety_minutes ({safety_minutes})")
    working = Path(working)
    files = find_competition_files(input_root, competition=competition)
    if files.test_challenges is None:
        raise FileNotFoundError(f"no arc-agi_test_challenges.json below {input_root}")
    tasks = load_challenges(files.test_challenges, strict=False)  # bad tasks still get answers
    # Kaggle sets KAGGLE_IS_COMPETITION_RERUN when it runs the notebook on the hidden test set
    rerun = bool(os.environ.get("KAGGLE_IS_COMPETITION_RERUN"))
    placeholder = files.is_placeholder_test() and not (force_full or rerun)
    chosen = tasks.head(smoke_tasks) if placeholder else tasks
    run_settings = smoke(settings) if placeholder else settings
    run_folder = working / RUN_FOLDER
    if restart:
        clear_run(run_folder)
    if (run_folder / RUN_FILE).exists() or has_records(run_folder):  # refused loudly, before anything is written
        try:
            check_run(run_folder, run_settings.replace(max_len=run_settings.max_len or token_budget_of(model)),
                      adopt=adopt)
        except RunFolderError as refusal:  # in this command's words
            raise RunFolderError(str(refusal).replace("another --out", "another --working")) from None
    working.mkdir(parents=True, exist_ok=True)
    submission_path = working / "submission.json"
    earlier = read_records(run_folder / RECORDS_FILE) if (run_folder / RECORDS_FILE).exists() else {}
    attempts = settings.attempts
    write_submission(submission_path, build_submission(tasks, answers_from_records(earlier), attempts=attempts),
                     tasks)  # at once
    limit = started + 3600 * hours
    deadline, stop_at = limit - 60 * safety_minutes, limit - 60 * stop_minutes
    solutions = _public_solutions(files, chosen) if placeholder else None
    workers = workers or max(1, len(worker_pool.visible_gpus()))
    if progress:
        job = f"placeholder: a smoke job on {len(chosen)}" if placeholder else f"solving all {len(chosen)}"
        skipped = f" ({len(tasks.skipped)} malformed: fallback answers)" if tasks.skipped else ""
        print(f"{len(tasks.test_counts())} test tasks{skipped} in {files.test_challenges}; {job} on {workers} worker(s); "
              f"{time_left(deadline)} to plan in", flush=True)
    records, error = dict(earlier), None
    try:  # from here on nothing may fail the notebook: the submission on disk is always complete
        run = worker_pool.solve_in_workers(chosen, model, run_settings, run_folder, workers=workers,
                                           deadline=deadline, stop_at=stop_at, load_options=load_options,
                                           progress=progress, submission_path=submission_path,
                                           submission_tasks=tasks, solutions=solutions, adopt=adopt)
        records = run.records
    except Exception as failure:  # noqa: BLE001 - reported in the result and the log, never raised
        error = f"{type(failure).__name__}: {failure}"
        logger.error("the solving run failed, the fallback submission stands: %s", error)
        try:
            records.update(worker_pool.merged_records(run_folder))
        except Exception:  # noqa: BLE001 - the records on disk may be what broke
            pass
    try:
        write_submission(submission_path, build_submission(tasks, answers_from_records(records), attempts=attempts),
                         tasks)
        load_submission(submission_path, tasks)  # reload and check, as Kaggle will read it
    except Exception as failure:  # noqa: BLE001 - the records broke it: the fallbacks, then
        error = error or f"{type(failure).__name__}: {failure}"
        write_submission(submission_path, build_submission(tasks, {}), tasks)
    solved = sum(1 for record in records.values() if record.got_model_work)
    return CompetitionRun(submission_path, placeholder, len(tasks.test_counts()), solved, time.time() - started, error)


def time_left(deadline: float) -> str:
    from arc_kit.planner import hours

    return hours(max(0.0, deadline - time.time()))


def _public_solutions(files, chosen: TaskSet) -> TaskSet | None:
    """The solutions of the placeholder's tasks where the competition ships them (its evaluation files)."""
    if files.evaluation_challenges is None or files.evaluation_solutions is None:
        return None
    try:
        public = load_challenges(files.evaluation_challenges, files.evaluation_solutions, strict=False)
        known = [task_id for task_id in chosen.ids if task_id in public]
        return public.select(known) if known else None
    except Exception:  # noqa: BLE001 - progress is a nicety: never a reason to stop
        return None


def simulate_competition_input(folder: str | os.PathLike, dataset: str = "arc-agi-1/evaluation",
                               tasks: int | None = 10) -> Path:
    """A stand-in for /kaggle/input: a public set as test (the placeholder), evaluation files beside it."""
    folder = Path(folder) / "competitions" / COMPETITION
    chosen = load_dataset(dataset)
    if tasks:
        chosen = chosen.head(tasks)
    export_kaggle(chosen, folder, "evaluation")
    export_kaggle(chosen.without_solutions(), folder, "test")
    return folder.parents[1]


# ---------------------------------------------------------------------------------------------
# The dataset.

def _setuptools_ready() -> bool:
    """True when a setuptools that builds this project (64 or newer) is importable here."""
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 64


def build_wheel(destination: str | os.PathLike) -> Path:
    """Build the arc_kit wheel from this checkout into ``destination`` (no dependencies)."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "pyproject.toml").exists():
        raise FileNotFoundError("build_dataset needs an arc_kit checkout (pyproject.toml beside the package)")
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    before = set(destination.glob("*.whl"))
    # Built from a clean copy: in the checkout, setuptools reuses its build/ folder, whose copies of
    # modules deleted or renamed since would ship in the wheel.
    with tempfile.TemporaryDirectory(prefix="arc-kit-wheel-") as scratch:
        source = Path(scratch) / "source"
        shutil.copytree(root / "arc_kit", source / "arc_kit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (root / name).exists():
                shutil.copy2(root / name, source / name)
        # With setuptools at hand no network is needed; else pip fetches it (Python 3.12 venvs lack it).
        isolation = ["--no-build-isolation"] if _setuptools_ready() else []
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation,
                        "--wheel-dir", str(destination), str(source)], check=True)
    built = [path for path in destination.glob("arc_kit-*.whl") if path not in before] or \
        sorted(destination.glob(f"arc_kit-{__version__}-*.whl"))
    if not built:
        raise RuntimeError("pip wheel reported success but left no arc_kit wheel")
    return built[0]


IMAGE_MANIFEST = Path(__file__).resolve().parents[1] / "kaggle_dataset" / "kaggle-image.json"  # if recorded

# The recipe cell (kaggle_dataset/README.md, step 2): run in a Kaggle notebook on the competition's
# image, it records what the image has, with the standard library alone (no internet needed).
RECORD_IMAGE_CELL = """\
import datetime, importlib.metadata, json, platform, re

packages = {}
for distribution in importlib.metadata.distributions():
    name = re.sub(r"[-_.]+", "-", (distribution.metadata["Name"] or "")).lower()
    if name:
        packages[name] = distribution.version
try:
    from packaging.tags import sys_tags
    platforms = sorted({tag.platform for tag in sys_tags()} - {"any"})
except ImportError:
    platforms = []
manifest = {"recorded": datetime.date.today().isoformat(), "python": platform.python_version(),
            "platforms": platforms, "packages": dict(sorted(packages.items()))}
with open("kaggle-image.json", "w") as handle:  # a notebook runs in /kaggle/working
    json.dump(manifest, handle, indent=1)
print(f"{len(packages)} packages, Python {manifest['python']}: kaggle-image.json")
"""


@dataclass(frozen=True)
class ImageManifest:
    """What a Kaggle image has, as ``RECORD_IMAGE_CELL`` recorded it: package versions, Python, wheel platforms."""

    packages: dict[str, str]  # normalised name -> version
    python: str
    platforms: tuple[str, ...] = ()
    recorded: str = ""
    source: str = ""

    @classmethod
    def read(cls, path: str | os.PathLike) -> ImageManifest:
        """The manifest in ``path``; ValueError in one line when it is not one."""
        try:
            data = json.loads(Path(path).read_text())
            packages = {_normalise(name): str(version) for name, version in data["packages"].items()}
            return cls(packages, str(data["python"]), tuple(data.get("platforms") or ()), str(data.get("recorded", "")),
                       str(path))
        except FileNotFoundError:
            raise FileNotFoundError(f"no image manifest at {path}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"{path} is no image manifest ({type(error).__name__}: {error}); write one with the "
                             "recipe in kaggle_dataset/README.md") from None

    def satisfies(self, requirement) -> bool:
        """True when the image has a version of ``requirement`` (a ``packaging`` Requirement) that it accepts."""
        from packaging.version import InvalidVersion, Version

        version = self.packages.get(_normalise(requirement.name))
        if version is None:
            return False
        try:
            return requirement.specifier.contains(Version(version), prereleases=True)
        except InvalidVersion:
            return False


def _normalise(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_requirements(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's metadata."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(item for item in archive.namelist() if item.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8")
    return [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]


def resolve_wheels(requirements: list[str], folder: Path, image: ImageManifest) -> list[Path]:
    """Put into ``folder`` a wheel of every requirement the image lacks (or has too old), and of theirs.

    A wheel already in ``folder`` (an extra wheel, say) that fits is used as it is; the rest come from
    ``pip download --no-deps`` for the image's Python and platforms (offline: RuntimeError in one
    line). Returns the wheels the image needs, in the order they were resolved.
    """
    from packaging.requirements import Requirement

    environment = {"python_version": ".".join(image.python.split(".")[:2]), "python_full_version": image.python,
                   "extra": ""}
    queue, seen, needed = list(requirements), set(), []
    while queue:
        requirement = Requirement(queue.pop(0))
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue  # an extra's, or another Python's
        name = _normalise(requirement.name)
        if name in seen or image.satisfies(requirement):
            continue
        seen.add(name)
        wheel = _wheel_in(folder, requirement) or _download_wheel(requirement, folder, image)
        needed.append(wheel)
        queue.extend(wheel_requirements(wheel))
    return needed


def _wheel_in(folder: Path, requirement) -> Path | None:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    for path in sorted(folder.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if _normalise(name) == _normalise(requirement.name) and \
                requirement.specifier.contains(version, prereleases=True):
            return path
    return None


def _download_wheel(requirement, folder: Path, image: ImageManifest) -> Path:
    """``pip download --no-deps`` of ``requirement`` for the image into ``folder``; the wheel."""
    target = ["--only-binary=:all:", "--python-version", ".".join(image.python.split(".")[:2])]
    for platform_tag in image.platforms:
        target += ["--platform", platform_tag]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet",
               *(target if image.platforms else []), "--dest", str(folder), str(requirement)]
    before = set(folder.glob("*.whl"))
    result = subprocess.run(command, capture_output=True, text=True)
    wheel = _wheel_in(folder, requirement) if result.returncode == 0 else None
    if wheel is None:
        for path in set(folder.glob("*.whl")) - before:  # a source archive or the wrong thing: not ours
            path.unlink()
        raise RuntimeError(f"cannot download a wheel of {requirement} (offline?): put one in the --extra-wheels "
                           "folder and build again")
    return wheel


LICENCE = "other"  # Kaggle's name for "other (specified in description)": the parts have their own licences


def build_dataset(out: str | os.PathLike, model: str | os.PathLike | None = None, *, title: str = "arc-kit",
                  dataset_id: str = "YOUR_KAGGLE_USERNAME/arc-kit", extra_wheels: str | os.PathLike | None = None,
                  image_manifest: str | os.PathLike | None = None) -> Path:
    """Assemble the Kaggle dataset folder: wheels/, model/, dataset-metadata.json, README.md.

    ``wheels/`` holds the kit, the wheels in ``extra_wheels``, and, given a recorded image manifest
    (default ``kaggle_dataset/kaggle-image.json`` when it exists), every package the kit needs that
    the image lacks or has too old, with theirs; without one, a one-line warning says that only the
    kit (and a base's carrier and ``gguf``) are in it.
    """
    out = Path(out)
    model = Path(model) if model is not None else default_model_path()
    delta = is_delta_folder(model)
    if not (model / "config.json").exists() and not delta:
        raise FileNotFoundError(f"{model} is not a model folder")
    manifest_path = Path(image_manifest) if image_manifest else (IMAGE_MANIFEST if IMAGE_MANIFEST.exists() else None)
    image = ImageManifest.read(manifest_path) if manifest_path else None
    wheels = out / "wheels"
    wheel = build_wheel(wheels)
    if extra_wheels:
        for path in Path(extra_wheels).glob("*.whl"):
            shutil.copy2(path, wheels / path.name)
    requirements = [line for line in wheel_requirements(wheel) if "extra ==" not in line]
    if delta:  # the base is built on Kaggle from its package's wheel (a carrier of the weights), read with gguf
        base_wheel = locate_wheel(json.loads((model / DELTA_INDEX).read_text())["base"])
        shutil.copy2(base_wheel, wheels / base_wheel.name)
    if image is not None:
        resolve_wheels(requirements, wheels, image)
    else:
        logger.warning("no image manifest: wheels/ holds the kit%s only; record one (kaggle_dataset/README.md, "
                       "step 2) so that the build adds what the image lacks", " and the base" if delta else "")
        if delta and not list(wheels.glob("gguf-*.whl")):
            from packaging.requirements import Requirement

            gguf = next(line for line in requirements if _normalise(Requirement(line).name) == "gguf")
            _download_wheel(Requirement(gguf), wheels, ImageManifest({}, sys.version.split()[0]))
    target = out / "model"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in model.iterdir():
        if path.suffix == ".safetensors" or path.name in MODEL_FILES or path.name.endswith(".safetensors.index.json"):
            shutil.copy2(path, target / path.name)
    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    if (notebooks / "submission.ipynb").exists():
        shutil.copy2(notebooks / "submission.ipynb", out / "submission.ipynb")
    metadata = {"title": title, "id": dataset_id, "licenses": [{"name": LICENCE}],
                "subtitle": "arc_kit: product-of-experts ARC solver, its wheel and a model",
                "description": DATASET_LICENCES, "keywords": ["arc-prize", "abstraction-and-reasoning"]}
    (out / "dataset-metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    (out / "README.md").write_text(DATASET_README.format(version=__version__, wheel=wheel.name, model=model.name,
                                                         licences=DATASET_LICENCES) + "\n")
    return out


DATASET_LICENCES = ("Licences: the arc_kit wheel is MIT (its LICENSE file); every other wheel keeps its own "
                    "licence (in its metadata); the model's weights derive from its base model and keep that "
                    "model's licence (SmolLM2-135M-Instruct: Apache-2.0).")


DATASET_README = """# arc-kit {version}

The arc_kit package and a model, for ARC Prize notebooks that run without internet.

- `wheels/{wheel}`: the package, plus every package it needs that the competition image lacks (from the
  recorded image manifest) and any extra wheels added when the dataset was built; the notebook installs them
  all at once, offline (`pip install --no-index --no-deps --find-links wheels wheels/*.whl`).
- `model/`: the model (from `{model}`): config and safetensors weights, or a named base plus the trained
  delta (`delta.json`, `adapter_config.json`, `delta-*.safetensors`; the base is built on first use from
  its package's wheel in `wheels/`), the tokenizer, and how it was trained (`arc_kit.json`,
  `training_log.csv`, `loss_curve.png`).
- `submission.ipynb`: the competition notebook; attach this dataset and the competition, then run it.

{licences}

Made with `arc-kit kaggle build`; see kaggle_dataset/README.md in the arc_kit repository."""
