"""Kaggle glue: the competition run that never loses a submission, and the dataset that carries the kit.

``run_competition`` is what the submission notebook calls: find the competition files under
``/kaggle/input``, write a complete fallback ``submission.json`` at once, notice when the test file
is the public placeholder (then run a short smoke job), otherwise solve every test task within the
time budget on all GPUs, keeping the submission complete and valid after every task.

``build_dataset`` assembles the folder uploaded as a Kaggle dataset: the package as a wheel, a
model, ``dataset-metadata.json`` and a README. ``simulate_competition_input`` builds a stand-in for
``/kaggle/input`` from public data, so the whole path runs on any machine.
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
from dataclasses import dataclass
from pathlib import Path

from arc_kit import __version__
from arc_kit import workers as worker_pool  # called through the module, so that a replaced solve_in_workers is used
from arc_kit.datasets import export_kaggle, find_competition_files, load_challenges, load_dataset
from arc_kit.bases import locate_wheel
from arc_kit.models import DELTA_INDEX, default_model_path, is_delta_folder
from arc_kit.records import answers_from_records
from arc_kit.settings import SolveSettings, smoke
from arc_kit.submission import build_submission, load_submission, write_submission

logger = logging.getLogger(__name__)
KAGGLE_WORKING = Path("/kaggle/working")
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "arc_kit.json", "training_log.csv", "loss_curve.png",
               "adapter_config.json", "delta.json", "plan.json", "training_call.log")


@dataclass
class CompetitionRun:
    submission_path: Path
    placeholder: bool
    tasks: int
    solved_tasks: int  # tasks that got model work (the rest have fallback answers)
    seconds: float
    error: str | None = None  # why solving stopped early, if it did (the submission is complete anyway)


def run_competition(model: str | os.PathLike, settings: SolveSettings = SolveSettings(), *,
                    input_root: str | os.PathLike = "/kaggle/input", working: str | os.PathLike = KAGGLE_WORKING,
                    started: float | None = None, hours: float = 12.0, safety_minutes: float = 45.0,
                    smoke_tasks: int = 3, workers: int | None = None, load_options: dict | None = None,
                    force_full: bool = False) -> CompetitionRun:
    """The competition notebook's job; ``submission.json`` in ``working`` is valid from the first second."""
    started = time.time() if started is None else started
    working = Path(working)
    working.mkdir(parents=True, exist_ok=True)
    files = find_competition_files(input_root)
    if files.test_challenges is None:
        raise FileNotFoundError(f"no arc-agi_test_challenges.json below {input_root}")
    tasks = load_challenges(files.test_challenges, strict=False)  # bad tasks still get answers
    submission_path = working / "submission.json"
    write_submission(submission_path, build_submission(tasks, {}), tasks)  # fallback answers, at once
    # Kaggle sets KAGGLE_IS_COMPETITION_RERUN when it runs the notebook on the hidden test set
    rerun = bool(os.environ.get("KAGGLE_IS_COMPETITION_RERUN"))
    placeholder = files.is_placeholder_test() and not (force_full or rerun)
    chosen = tasks.head(smoke_tasks) if placeholder else tasks
    run_settings = smoke(settings) if placeholder else settings
    deadline = started + 3600 * hours - 60 * safety_minutes
    workers = workers or max(1, worker_pool.gpu_count())
    records, error = {}, None
    try:  # from here on nothing may fail the notebook: the submission on disk is always complete
        run = worker_pool.solve_in_workers(chosen, model, run_settings, working / "arc_kit_run", workers=workers,
                                           deadline=deadline, load_options=load_options, progress=False,
                                           submission_path=submission_path, submission_tasks=tasks)
        records = run.records
    except Exception as failure:  # noqa: BLE001 - reported in the result and the log, never raised
        error = f"{type(failure).__name__}: {failure}"
        logger.error("the solving run failed, the fallback submission stands: %s", error)
    write_submission(submission_path, build_submission(tasks, answers_from_records(records)), tasks)
    load_submission(submission_path, tasks)  # reload and check, as Kaggle will read it
    solved = sum(1 for record in records.values() if record.got_model_work)
    return CompetitionRun(submission_path, placeholder, len(tasks), solved, time.time() - started, error)


def simulate_competition_input(folder: str | os.PathLike, dataset: str = "arc-agi-1/evaluation",
                               tasks: int | None = 10) -> Path:
    """A stand-in for /kaggle/input: a public set as test (the placeholder), evaluation files beside it."""
    folder = Path(folder) / "competitions" / "arc-prize-simulated"
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


def _download_wheel_of(package: str, destination: Path) -> None:
    """``pip download --no-deps`` of the installed version of ``package`` (offline: one line saying what to do)."""
    from importlib.metadata import version

    requirement = f"{package}=={version(package)}"
    result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                             "--dest", str(destination), requirement], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"cannot download {requirement} (offline?): put its wheel in the --extra-wheels folder")


def build_dataset(out: str | os.PathLike, model: str | os.PathLike | None = None, *, title: str = "arc-kit",
                  dataset_id: str = "YOUR_KAGGLE_USERNAME/arc-kit", extra_wheels: str | os.PathLike | None = None,
                  ) -> Path:
    """Assemble the Kaggle dataset folder: wheels/, model/, dataset-metadata.json, README.md."""
    out = Path(out)
    model = Path(model) if model is not None else default_model_path()
    delta = is_delta_folder(model)
    if not (model / "config.json").exists() and not delta:
        raise FileNotFoundError(f"{model} is not a model folder")
    wheel = build_wheel(out / "wheels")
    if extra_wheels:
        for path in Path(extra_wheels).glob("*.whl"):
            shutil.copy2(path, out / "wheels" / path.name)
    if delta:  # the base is built on Kaggle from its package's wheel, read with gguf
        base_wheel = locate_wheel(json.loads((model / DELTA_INDEX).read_text())["base"])
        shutil.copy2(base_wheel, out / "wheels" / base_wheel.name)
        if not list((out / "wheels").glob("gguf-*.whl")):
            _download_wheel_of("gguf", out / "wheels")
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
    metadata = {"title": title, "id": dataset_id, "licenses": [{"name": "MIT"}],
                "subtitle": "arc_kit: product-of-experts ARC solver, its wheel and a model",
                "keywords": ["arc-prize", "abstraction-and-reasoning"]}
    (out / "dataset-metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    (out / "README.md").write_text(DATASET_README.format(version=__version__, wheel=wheel.name,
                                                         model=model.name) + "\n")
    return out


DATASET_README = """# arc-kit {version}

The arc_kit package and a model, for ARC Prize notebooks that run without internet.

- `wheels/{wheel}`: the package (`pip install --no-index --find-links /kaggle/input/arc-kit/wheels arc-kit`),
  plus any extra wheels added when the dataset was built (unsloth, bitsandbytes, ...).
- `model/`: the model (from `{model}`): config and safetensors weights, or a named base plus the trained
  delta (`delta.json`, `adapter_config.json`, `delta-*.safetensors`; the base is built on first use from
  its package's wheel in `wheels/`), the tokenizer, and how it was trained (`arc_kit.json`,
  `training_log.csv`, `loss_curve.png`).
- `submission.ipynb`: the competition notebook; attach this dataset and the competition, then run it.

Made with `arc-kit kaggle build`; see kaggle_dataset/README.md in the arc_kit repository."""
