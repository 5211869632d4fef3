"""`arc-kit kaggle check`'s parts, in-process: the built folders read, the stand-in input, the tasks, the verdict.

The whole check, a notebook run in an environment of the image's versions, is ``tests/test_install.py``'s
(one environment for every case there); what a check decides from what it reads is here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from arc_kit import __version__
from arc_kit.cli import main
from arc_kit.data.datasets import load_dataset
from arc_kit.kaggle import local_check
from arc_kit.kaggle.model_input import MODEL_SOURCE_FILE, ModelHandle, overridden_model
from arc_kit.text import TaskEncoder, Vocabulary

ROOT = Path(__file__).resolve().parents[1]
HANDLE = "someone/arc-model/transformers/tiny/2"


def built(tmp_path: Path, model_folder: Path | None = None, handle: str | None = None) -> Path:
    """The folders a build writes, as far as the check reads them: wheels, metadata, model or handle, notebook."""
    dataset = tmp_path / "build" / "arc-kit"
    (dataset / "wheels").mkdir(parents=True)
    for name in (f"arc_kit-{__version__}-py3-none-any.whl", "gguf-0.19.0-py3-none-any.whl"):
        (dataset / "wheels" / name).write_bytes(b"")
    (dataset / "dataset-metadata.json").write_text(json.dumps({"id": "someone/arc-kit"}))
    if model_folder is not None:
        (dataset / "model").symlink_to(model_folder)
    if handle is not None:
        (dataset / MODEL_SOURCE_FILE).write_text(json.dumps({"model_source": handle}))
    notebook = dataset.parent / "arc-kit-notebook"
    notebook.mkdir()
    (notebook / "submission.ipynb").write_text("{}")
    (notebook / "kernel-metadata.json").write_text(json.dumps({
        "code_file": "submission.ipynb", "competition_sources": ["arc-prize-2026-arc-agi-2"],
        "model_sources": [handle] if handle else []}))
    return dataset


def test_a_built_dataset_is_read_and_what_no_build_wrote_is_refused_in_one_line(tmp_path, model_folder):
    dataset = built(tmp_path, model_folder)
    found = local_check.read_built_dataset(dataset)
    assert found.wheels == ("arc_kit-0.1.0-py3-none-any.whl", "gguf-0.19.0-py3-none-any.whl") and found.carries_model
    assert found.notebook == dataset.parent / "arc-kit-notebook" / "submission.ipynb"
    assert (found.dataset_id, found.competition, found.model_sources) == ("someone/arc-kit", "arc-prize-2026-arc-agi-2",
                                                                          ())
    with pytest.raises(local_check.CheckRefused, match="holds no wheels/arc_kit-.*not a dataset"):
        local_check.read_built_dataset(model_folder)
    (dataset.parent / "arc-kit-notebook" / "submission.ipynb").unlink()
    with pytest.raises(local_check.CheckRefused, match="no notebook at .*pass --notebook"):
        local_check.read_built_dataset(dataset)


def test_the_stand_in_input_mounts_the_dataset_and_the_kaggle_model_where_kaggle_does(tmp_path, model_folder):
    dataset = built(tmp_path, handle=HANDLE)
    found = local_check.read_built_dataset(dataset)
    tasks = load_dataset("arc-agi-1/evaluation").select(["66e6c45b"])
    with pytest.raises(local_check.CheckRefused, match=f"reads the Kaggle Model {HANDLE}: pass --kaggle-model DIR"):
        local_check.simulated_input(tmp_path / "refused", found, tasks, None)
    root, expected = local_check.simulated_input(tmp_path / "input", found, tasks, model_folder)
    assert expected == root / "arc-model" / "transformers" / "tiny" / "2"  # MODEL/FRAMEWORK/VARIATION/VERSION
    for name in os.listdir(model_folder):  # each file a link to the copy: nothing copied
        assert (expected / name).is_symlink() and (expected / name).resolve() == (model_folder / name).resolve()
    assert (root / "datasets" / "someone" / "arc-kit" / MODEL_SOURCE_FILE).is_symlink()
    competition = root / "competitions" / "arc-prize-2026-arc-agi-2"
    assert json.loads((competition / "arc-agi_test_challenges.json").read_text()).keys() == {"66e6c45b"}
    assert (competition / "arc-agi_evaluation_solutions.json").exists()  # the placeholder: public, scored


def test_the_check_runs_the_shortest_arc_agi_2_evaluation_tasks():
    tasks = load_dataset("arc-agi-2/evaluation")
    encoder = TaskEncoder(Vocabulary())
    by_tokens = sorted(tasks.tasks(), key=lambda task: (sum(
        len(encoder.encode_prompt(task.train, test, max_len=10**7, log_drops=False))
        + len(encoder.encode_answer(test)) for test in task.test_inputs), task.id))
    assert local_check.check_tasks(3).ids == [task.id for task in by_tokens[:3]]


def lines_of_a_run(report: local_check.NotebookReport, wheels: list[str], model: Path, answered: int) -> None:
    """What the notebook prints on its way, in its own words (notebooks/submission.py, competition.CompetitionRun)."""
    for line in ["fallback submission for 2 tasks from /in/arc-agi_test_challenges.json",
                 f"installed {len(wheels)} wheel(s) from /in/wheels: {', '.join(wheels)}", "ready: True",
                 f"model {model}; input /in; output /out", "folder: ...", f"go: {model} (llama, 84 K parameters)",
                 f"2 tasks; answered by the model: {answered}, correct: 0 (of 2 with known solutions)",
                 "score 0.00% (0/2 test outputs); 0/2 tasks (0.00%)", "/out/submission.json: valid"]:
        assert not report.take(line)


def test_go_needs_every_wheel_the_dataset_s_model_and_the_models_own_answers(tmp_path):
    wheels = ("arc_kit-0.1.0-py3-none-any.whl", "gguf-0.19.0-py3-none-any.whl")
    model = tmp_path / "in" / "model"
    report = local_check.NotebookReport(model)
    lines_of_a_run(report, list(wheels), model, 2)
    assert local_check.problem_of(report, wheels, 2, 2, 0) is None
    more = tuple(sorted((*wheels, "bitsandbytes-0.50.2-py3-none-any.whl")))
    assert local_check.problem_of(report, more, 2, 2, 0) == (
        "the notebook installed 2 wheel(s), the dataset holds 3; not installed: bitsandbytes-0.50.2-py3-none-any.whl")
    assert local_check.problem_of(report, wheels, 0, 2, 0) == \
        "the model answered none of the 2 task(s): every attempt is a fallback"
    why = "no answer ended within the token budget: is the model trained on this format? (2 of 2 task(s))"
    assert local_check.problem_of(report, wheels, 0, 2, 0, why) == f"the model answered none of the 2 task(s): {why}"
    assert local_check.problem_of(report, wheels, 2, 2, 1).startswith("the run did not end")
    elsewhere = local_check.NotebookReport(model)
    assert not elsewhere.take("ready: True")
    assert elsewhere.take(f"model {ROOT / 'kaggle_dataset' / 'model'}; input /in; output /out")  # stop at once
    assert elsewhere.wrong_model.startswith(f"!!! WRONG MODEL: the notebook runs {ROOT / 'kaggle_dataset' / 'model'} "
                                            "(the kit's shipped model), not the dataset's model")


def test_the_notebook_says_loudly_when_its_model_setting_replaces_the_datasets_model(tmp_path, model_folder):
    root = tmp_path / "input"
    dataset = root / "datasets" / "someone" / "arc-kit"
    dataset.mkdir(parents=True)
    mounted = Path(shutil.copytree(model_folder, root / "arc-model" / "transformers" / "tiny" / "2"))
    (dataset / MODEL_SOURCE_FILE).write_text(json.dumps({"model_source": HANDLE}))
    assert overridden_model(None, dataset, root) is None
    assert overridden_model(HANDLE, dataset, root) is None  # the same model, named
    shipped = ROOT / "kaggle_dataset" / "model"
    assert overridden_model(str(shipped), dataset, root) == (
        f"WARNING: MODEL = '{shipped}' is run ({shipped}), not the model the dataset carries ({mounted}): the "
        "submission will be that model's")
    assert ModelHandle.parse(HANDLE).version == 2


def test_kaggle_check_refuses_in_one_line_before_anything_runs(tmp_path, model_folder, capsys):
    dataset = built(tmp_path, handle=HANDLE)
    assert main(["kaggle", "check", str(dataset)]) == 1
    error = capsys.readouterr().err.strip()
    assert error == (f"arc-kit kaggle: error: the notebook reads the Kaggle Model {HANDLE}: pass --kaggle-model DIR, "
                     "a local copy of it, to mount it where Kaggle mounts it")
    assert main(["kaggle", "check", str(dataset), "--kaggle-model", str(tmp_path)]) == 1
    assert "is no model folder (no config.json)" in capsys.readouterr().err
    assert main(["kaggle", "check", str(dataset), "--changes", "[1]"]) == 1
    assert capsys.readouterr().err.strip() == ("arc-kit kaggle: error: --changes must be an object of settings by "
                                               'their dotted paths, e.g. {"ttt.steps": 8}; got [1]')
    assert main(["kaggle", "check", str(dataset), "--changes", '{"ttt.step": 1}']) == 1
    assert capsys.readouterr().err.strip() == ("arc-kit kaggle: error: ttt.step: no such setting; did you mean "
                                               "ttt.steps?")


def test_the_check_runs_the_notebooks_own_changes_unless_asked_and_a_wrong_setting_is_its_no_go(tmp_path):
    environment = local_check.notebook_environment(tmp_path / "in", tmp_path / "out", tmp_path, 2, None,
                                                   tmp_path / "python")
    assert "ARC_KIT_CHANGES" not in environment  # the notebook's own CHANGES, as the competitor edited them
    asked = local_check.notebook_environment(tmp_path / "in", tmp_path / "out", tmp_path, 2, {"ttt.steps": 1},
                                             tmp_path / "python")
    assert json.loads(asked["ARC_KIT_CHANGES"]) == {"ttt.steps": 1}
    wheels = ("arc_kit-0.1.0-py3-none-any.whl",)
    report = local_check.NotebookReport(tmp_path / "in" / "model")
    for line in [f"installed 1 wheel(s) from /in/wheels: {wheels[0]}", "ready: True",  # the notebook's own words
                 "a setting is wrong: ttt.step: no such setting; did you mean ttt.steps?; nothing is run, the fallback "
                 "submission stands"]:
        assert not report.take(line)
    assert local_check.problem_of(report, wheels, 0, 2, 0) == ("a setting of the notebook is wrong: ttt.step: no such "
                                                               "setting; did you mean ttt.steps?")
