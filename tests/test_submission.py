"""The Kaggle submission: build it complete, validate it, write and reload it, score it.

Every expected number here is worked out by hand from tiny tasks built in the test; nothing is
downloaded and no model is involved.
"""

from __future__ import annotations

import copy
import json
import os
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arc_kit.data.grids import grid_problems
from arc_kit.data.submission import (
    build_submission,
    detect_kind,
    load_submission,
    score_file,
    score_submission,
    solutions_problems,
    submission_problems,
    validate_file,
    write_submission,
)
from arc_kit.data.task_files import parse_tasks
from arc_kit.data.tasks import InvalidDataError

ZERO = [[0]]


def pair(grid_in, grid_out=None):
    return {"input": grid_in} if grid_out is None else {"input": grid_in, "output": grid_out}


def challenge(*test_inputs, train=(([[1]], [[2]]),)):
    return {"train": [pair(i, o) for i, o in train], "test": [pair(grid) for grid in test_inputs]}


# Three tasks in an order that is not sorted: "z" has two test inputs.
CHALLENGES = {
    "z": challenge([[3]], [[4, 4]]),
    "a": challenge([[5, 6], [7, 8]]),
    "m": challenge([[0]]),  # its test input is the fallback [[0]] itself
}
SOLUTIONS = {"z": [[[9]], [[1, 1]]], "a": [[[8, 7], [6, 5]]], "m": [[[2]]]}


@pytest.fixture
def tasks():
    return parse_tasks(copy.deepcopy(CHALLENGES), copy.deepcopy(SOLUTIONS), name="tiny")


def lenient(challenges):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_tasks(challenges, strict=False)


def attempts(entry):
    return entry["attempt_1"], entry["attempt_2"]


# ---------------------------------------------------------------------------------------------
# build_submission

def test_build_from_counts_fills_everything_with_the_empty_answer():
    submission = build_submission({"z": 2, "a": 1, "m": 3}, {})
    assert list(submission) == ["z", "a", "m"]  # the challenges' order, not sorted
    assert [len(entries) for entries in submission.values()] == [2, 1, 3]
    for entries in submission.values():
        for entry in entries:
            assert set(entry) == {"attempt_1", "attempt_2"}
            assert attempts(entry) == (ZERO, ZERO)  # nothing else to offer: the two cannot differ


def test_build_falls_back_to_the_test_input_then_the_empty_answer(tasks):
    submission = build_submission(tasks, {})
    assert list(submission) == ["z", "a", "m"]
    assert [attempts(e) for e in submission["z"]] == [([[3]], ZERO), ([[4, 4]], ZERO)]
    assert attempts(submission["a"][0]) == ([[5, 6], [7, 8]], ZERO)
    assert attempts(submission["m"][0]) == (ZERO, ZERO)  # the input is [[0]]: nothing different left
    assert submission_problems(submission, tasks) == []


def test_build_uses_candidates_in_order_and_fills_missing_test_inputs_and_attempts(tasks):
    answers = {
        "z": [[[[1]], [[2]], [[3]]]],  # three candidates for test 0, nothing for test 1
        "a": [[[[9]]]],  # one candidate: attempt_2 is the test input
        "unknown": [[[[1]]]],  # a task the challenges do not have is ignored
    }
    submission = build_submission(tasks, answers)
    assert list(submission) == ["z", "a", "m"]
    assert attempts(submission["z"][0]) == ([[1]], [[2]])
    assert attempts(submission["z"][1]) == ([[4, 4]], ZERO)
    assert attempts(submission["a"][0]) == ([[9]], [[5, 6], [7, 8]])
    assert attempts(submission["m"][0]) == (ZERO, ZERO)


def test_build_makes_the_attempts_differ_where_possible(tasks):
    answers = {
        "z": [[[[7]], [[7]], [[7]], [[8]]],  # duplicates are passed over
              [[[4, 4]]]],  # the candidate equals the test input: attempt_2 falls to [[0]]
        "a": [[np.array([[5, 6], [7, 8]])]],  # equal to the input as an array too
        "m": [[[[0]]]],  # equal to every fallback
    }
    submission = build_submission(tasks, answers)
    assert attempts(submission["z"][0]) == ([[7]], [[8]])
    assert attempts(submission["z"][1]) == ([[4, 4]], ZERO)
    assert attempts(submission["a"][0]) == ([[5, 6], [7, 8]], ZERO)
    assert attempts(submission["m"][0]) == (ZERO, ZERO)


@pytest.mark.parametrize("bad", [
    [[1, 2], [3]],  # ragged
    [[10]],  # not a colour
    [[-1]],
    [],  # empty
    [[]],
    None,
    "[[1]]",
    [[1.0]],
    [[True]],
    [[0] * 31],  # too wide
    np.array([[1, 2], [3, 12]]),
])
def test_build_skips_invalid_candidates(tasks, bad):
    submission = build_submission(tasks, {"a": [[bad, [[2]]]]})
    assert attempts(submission["a"][0]) == ([[2]], [[5, 6], [7, 8]])


def test_build_writes_plain_json_ints_from_numpy_candidates(tasks):
    submission = build_submission(tasks, {"z": [[np.array([[1, 2]], dtype=np.int64),
                                                np.array([[3]], dtype=np.uint8)]]})
    first, second = attempts(submission["z"][0])
    assert (first, second) == ([[1, 2]], [[3]])
    assert all(type(cell) is int for row in first + second for cell in row)
    json.dumps(submission)  # would raise on numpy scalars


def test_build_ignores_answers_beyond_the_test_inputs(tasks):
    submission = build_submission(tasks, {"a": [[[[1]]], [[[2]]], [[[3]]]]})
    assert len(submission["a"]) == 1
    assert attempts(submission["a"][0]) == ([[1]], [[5, 6], [7, 8]])


def test_build_covers_the_skipped_tasks_of_a_lenient_set_in_file_order():
    challenges = {
        "good1": challenge([[3]]),
        "bad": {"train": [{"input": [[1]]}],  # a train pair without output: the task is skipped
                "test": [pair([[5]]), pair([[10]])]},  # the second test input is itself invalid
        "broken": "not a task",
        "good2": challenge([[6]], [[7]]),
    }
    tasks = lenient(challenges)
    assert tasks.ids == ["good1", "good2"] and set(tasks.skipped) == {"bad", "broken"}
    submission = build_submission(tasks, {"bad": [[[[4]]]]})
    assert submission_problems(submission, tasks) == []
    assert set(submission) == set(challenges)
    assert [len(submission[task_id]) for task_id in challenges] == [1, 2, 1, 2]
    assert attempts(submission["bad"][0]) == ([[4]], [[5]])  # the answer, then the salvaged input
    assert attempts(submission["bad"][1]) == (ZERO, ZERO)  # nothing salvageable
    assert attempts(submission["broken"][0]) == (ZERO, ZERO)
    assert [attempts(e) for e in submission["good2"]] == [([[6]], ZERO), ([[7]], ZERO)]
    assert list(submission) == list(challenges)  # file order, skipped tasks where they stood


grid_values = st.one_of(
    st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=3), min_size=1, max_size=3),  # often ragged
    st.lists(st.lists(st.integers(-2, 12), min_size=2, max_size=2), min_size=1, max_size=2),  # bad colours
    st.none(),
    st.just([]),
)


@settings(max_examples=60, deadline=None)
@given(answers=st.dictionaries(st.sampled_from(["z", "a", "m", "x"]),
                               st.lists(st.lists(grid_values, max_size=4), max_size=3), max_size=4))
def test_build_is_always_complete_and_valid(answers):
    tasks = parse_tasks(copy.deepcopy(CHALLENGES))
    submission = build_submission(tasks, answers)
    assert submission_problems(submission, tasks) == []
    for task_id, entries in submission.items():
        for index, entry in enumerate(entries):
            first, second = attempts(entry)
            candidates = answers.get(task_id, [])
            candidates = candidates[index] if index < len(candidates) else []
            offered = [grid for grid in candidates if grid is not None and not grid_problems(grid, "")]
            if offered:
                assert first == offered[0]  # the best valid candidate comes first
            if first != ZERO or tasks[task_id].test[index].input.tolist() != ZERO:
                assert first != second  # a different fallback always exists here


# ---------------------------------------------------------------------------------------------
# submission_problems and solutions_problems

COUNTS = {"a": 2, "b": 1}


def good_submission():
    return {"a": [{"attempt_1": [[1]], "attempt_2": [[2]]}, {"attempt_1": [[3, 3]], "attempt_2": [[4], [4]]}],
            "b": [{"attempt_1": [[5]], "attempt_2": [[6]]}]}


def good_solutions():
    return {"a": [[[1]], [[2, 2]]], "b": [[[3]]]}


def test_good_files_have_no_problems(tasks):
    assert submission_problems(good_submission()) == []
    assert submission_problems(good_submission(), COUNTS) == []
    assert solutions_problems(good_solutions()) == []
    assert solutions_problems(good_solutions(), COUNTS) == []
    assert solutions_problems(SOLUTIONS, tasks) == []
    assert submission_problems(build_submission(tasks, {}), tasks) == []


def _set(path, value):
    def change(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return data
    return change


def _append(path, value):
    def change(data):
        target = data
        for key in path:
            target = target[key]
        target.append(value)
        return data
    return change


def _delete(*path):
    def change(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
        return data
    return change


SUBMISSION_DEFECTS = {
    "not an object": (lambda s: list(s.values()), ["the submission is a list, expected an object"]),
    "a string": (lambda s: "submission", ["the submission is a string"]),
    "task missing": (_delete("b"), ["task b: missing"]),
    "extra task": (_set(["c"], [{"attempt_1": [[1]], "attempt_2": [[1]]}]), ["task c: not in the challenges"]),
    "too few entries": (_delete("a", 1), ["task a: has 1 entries for 2 test inputs"]),
    "too many entries": (_append(["b"], {"attempt_1": [[1]], "attempt_2": [[1]]}),
                         ["task b: has 2 entries for 1 test inputs"]),
    "no entries": (_set(["b"], []), ["task b: has 0 entries for 1 test inputs", "task b: has no entries"]),
    "entries not a list": (_set(["b"], {"attempt_1": [[1]], "attempt_2": [[1]]}),
                           ["task b: is an object, expected a list of attempt objects"]),
    "entry not an object": (_set(["a", 1], [[1]]), ["task a: [1] is a list, expected an object"]),
    "attempt_1 missing": (_delete("a", 0, "attempt_1"), ["task a: [0] missing attempt_1"]),
    "attempt_2 missing": (_delete("b", 0, "attempt_2"), ["task b: [0] missing attempt_2"]),
    "ragged attempt": (_set(["a", 1, "attempt_1"], [[1, 2], [3]]), ["task a: [1].attempt_1 row 1 has 1 cells"]),
    "value 10": (_set(["b", 0, "attempt_2"], [[1, 10]]),
                 ["task b: [0].attempt_2 row 0 column 1 holds 10, expected an integer 0-9"]),
    "empty attempt": (_set(["a", 0, "attempt_2"], []), ["task a: [0].attempt_2 is empty"]),
    "null attempt": (_set(["a", 0, "attempt_1"], None), ["task a: [0].attempt_1 is null"]),
    "unexpected key": (_set(["a", 0, "attempt_3"], [[1]]), ["task a: [0] has an unexpected key 'attempt_3'"]),
}


@pytest.mark.parametrize("defect", SUBMISSION_DEFECTS)
def test_submission_problems_catch_each_defect(defect):
    change, expected = SUBMISSION_DEFECTS[defect]
    problems = submission_problems(change(good_submission()), COUNTS)
    assert len(problems) == len(expected), problems
    for problem, phrase in zip(problems, expected):
        assert problem.startswith(phrase), (problem, phrase)


def test_submission_problems_lists_every_problem_at_once():
    submission = good_submission()
    del submission["a"][0]["attempt_2"]
    submission["b"][0]["attempt_1"] = [[11]]
    submission["extra"] = []
    problems = submission_problems(submission, COUNTS)
    assert any("task a: [0] missing attempt_2" in p for p in problems)
    assert any("task b: [0].attempt_1 row 0 column 0 holds 11" in p for p in problems)
    assert any("task extra: not in the challenges" in p for p in problems)
    # without challenges the ids and counts are not checked, the rest still is
    assert not any("not in the challenges" in p for p in submission_problems(submission))
    assert len(submission_problems(submission)) == len(problems) - 1


SOLUTIONS_DEFECTS = {
    "not an object": (lambda s: [s["a"]], ["the solutions are a list, expected an object"]),
    "task missing": (_delete("a"), ["task a: missing"]),
    "extra task": (_set(["c"], [[[1]]]), ["task c: not in the challenges"]),
    "too few grids": (_delete("a", 1), ["task a: has 1 solutions for 2 test inputs"]),
    "too many grids": (_append(["b"], [[1]]), ["task b: has 2 solutions for 1 test inputs"]),
    "not a list": (_set(["b"], {"output": [[1]]}), ["task b: is an object, expected a list of grids"]),
    "empty list": (_set(["b"], []), ["task b: is empty, expected a list of grids"]),
    "ragged grid": (_set(["a", 0], [[1], [2, 3]]), ["task a: [0] row 1 has 2 cells"]),
    "value 10": (_set(["a", 1], [[10, 0]]), ["task a: [1] row 0 column 0 holds 10"]),
    "empty grid": (_set(["b", 0], []), ["task b: [0] is empty"]),
    "grid a string": (_set(["b", 0], "[[1]]"), ["task b: [0] is a string, expected a list of rows"]),
}


@pytest.mark.parametrize("defect", SOLUTIONS_DEFECTS)
def test_solutions_problems_catch_each_defect(defect):
    change, expected = SOLUTIONS_DEFECTS[defect]
    problems = solutions_problems(change(good_solutions()), COUNTS)
    assert len(problems) == len(expected), problems
    for problem, phrase in zip(problems, expected):
        assert problem.startswith(phrase), (problem, phrase)


# ---------------------------------------------------------------------------------------------
# write_submission and load_submission

def test_write_submission_is_atomic_and_reloads_equal(tmp_path, tasks):
    submission = build_submission(tasks, {"z": [[[[1]], [[2]]]]})
    path = write_submission(tmp_path / "out" / "submission.json", submission, tasks)
    assert path == tmp_path / "out" / "submission.json"
    assert [p.name for p in path.parent.iterdir()] == ["submission.json"]  # no temporary file left
    assert json.loads(path.read_text()) == submission
    assert load_submission(path) == submission
    assert load_submission(path, tasks) == submission


def test_write_submission_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch, tasks):
    path = write_submission(tmp_path / "submission.json", build_submission(tasks, {}), tasks)
    before = path.read_bytes()

    def broken_fsync(descriptor):  # the disk "fills up" as the file written aside is flushed
        raise OSError("no space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="no space left"):
        write_submission(path, build_submission(tasks, {"a": [[[[1]]]]}), tasks)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["submission.json"]


def test_write_submission_accepts_numpy_and_tuple_grids(tmp_path):
    submission = {"a": [{"attempt_1": np.array([[1, 2]], dtype=np.uint8), "attempt_2": ((3,), (4,))}]}
    path = write_submission(tmp_path / "submission.json", submission, {"a": 1})
    assert load_submission(path) == {"a": [{"attempt_1": [[1, 2]], "attempt_2": [[3], [4]]}]}


@pytest.mark.parametrize("defect", ["task missing", "value 10", "attempt_2 missing", "not an object"])
def test_write_submission_refuses_an_invalid_submission(tmp_path, defect):
    change, expected = SUBMISSION_DEFECTS[defect]
    path = tmp_path / "submission.json"
    with pytest.raises(InvalidDataError) as caught:
        write_submission(path, change(good_submission()), COUNTS)
    assert caught.value.problems[0].startswith(expected[0])
    assert str(path) in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a temporary file


def test_load_submission_raises_listing_every_problem(tmp_path):
    submission = good_submission()
    submission["a"][0]["attempt_1"] = [[1, 2], [3]]
    del submission["b"]
    path = tmp_path / "submission.json"
    path.write_text(json.dumps(submission))
    with pytest.raises(InvalidDataError) as caught:
        load_submission(path)
    assert [p.split(" row")[0] for p in caught.value.problems] == ["task a: [0].attempt_1"]
    with pytest.raises(InvalidDataError) as caught:
        load_submission(path, COUNTS)
    assert "task b: missing" in caught.value.problems
    assert len(caught.value.problems) == 2
    assert caught.value.source == str(path)


def test_load_submission_reports_a_missing_file_and_invalid_json(tmp_path):
    with pytest.raises(InvalidDataError, match="no such file"):
        load_submission(tmp_path / "absent.json")
    (tmp_path / "broken.json").write_text('{"a": [')
    with pytest.raises(InvalidDataError, match="invalid JSON at line 1"):
        load_submission(tmp_path / "broken.json")


# ---------------------------------------------------------------------------------------------
# The metric

def entry(first, second):
    return {"attempt_1": first, "attempt_2": second}


def test_one_of_two_test_outputs_right_scores_half_the_task():
    solutions = {"t": [[[1]], [[2]]]}
    score = score_submission({"t": [entry([[1]], [[0]]), entry([[0]], [[3]])]}, solutions)
    assert (score.correct, score.total) == (1, 2)
    assert score.score == 0.5
    assert score.task_score == 0.5
    assert score.tasks_credited == 0.5


def test_a_right_attempt_2_counts():
    score = score_submission({"t": [entry([[0]], [[1, 2]])]}, {"t": [[[1, 2]]]})
    assert score.correct == 1 and score.score == 1.0
    assert score.table.loc[0, "right_attempts"] == "attempt_2"


def test_exact_match_needs_the_same_shape_and_cells():
    answer = [[1, 2], [3, 4]]
    near_misses = [[[1, 2, 3, 4]], [[1, 2], [3, 5]], [[1, 3], [2, 4]], [[1, 2]], [[1, 2], [3, 4], [0, 0]]]
    for miss in near_misses:
        assert score_submission({"t": [entry(miss, miss)]}, {"t": [answer]}).correct == 0, miss
    assert score_submission({"t": [entry(answer, [[0]])]}, {"t": [answer]}).correct == 1


def test_malformed_attempts_and_entries_count_as_wrong_not_as_errors():
    solutions = {"t": [[[1]], [[2]], [[3]], [[4]]]}
    submission = {"t": [
        entry([[1], [1, 1]], [[1]]),  # a ragged attempt_1, a right attempt_2
        "not an entry",
        {"attempt_1": [[3]]},  # attempt_2 missing: attempt_1 still counts
        entry(None, [[10]]),
    ]}
    score = score_submission(submission, solutions)
    assert score.correct == 2
    assert score.table.loc[0, "right_attempts"] == "attempt_2 - attempt_1 -"


def test_missing_tasks_count_zero_and_the_two_averages_differ():
    solutions = {
        "both": [[[1]], [[2]]],  # 2 outputs, both right: task share 1
        "half": [[[3]], [[4]]],  # 2 outputs, one right: task share 1/2
        "wrong": [[[5]]],  # 1 output, wrong: 0
        "missing": [[[6]]],  # not in the submission: 0
    }
    submission = {
        "both": [entry([[1]], [[0]]), entry([[0]], [[2]])],
        "half": [entry([[3]], [[3]]), entry([[0]], [[0]])],
        "wrong": [entry([[6]], [[7]])],
        "extra": [entry([[1]], [[1]])],  # a task the solutions do not know is ignored
    }
    score = score_submission(submission, solutions)
    assert (score.correct, score.total) == (3, 6)
    assert score.score == pytest.approx(3 / 6)
    assert score.task_score == pytest.approx((1 + 0.5 + 0 + 0) / 4)
    assert score.tasks_credited == pytest.approx(1.5)
    table = score.table
    assert list(table.columns) == ["task_id", "test_outputs", "correct", "score", "right_attempts"]
    assert table["task_id"].tolist() == ["both", "half", "wrong", "missing"]  # the solutions' order
    assert table["test_outputs"].tolist() == [2, 2, 1, 1]
    assert table["correct"].tolist() == [2, 1, 0, 0]
    assert table["score"].tolist() == [1.0, 0.5, 0.0, 0.0]
    assert table["right_attempts"].tolist() == ["attempt_1 attempt_2", "attempt_1 -", "-", "-"]
    assert str(score) == "score 50.00% (3/6 test outputs); 1.5/4 tasks (37.50%)"


def test_scoring_against_a_task_set_and_the_identity_baseline(tasks):
    # The identity baseline is right only where the answer is the input: none here.
    assert score_submission(build_submission(tasks, {}), tasks).correct == 0
    answers = {task.id: [[output] for output in task.test_outputs] for task in tasks.tasks()}
    perfect = score_submission(build_submission(tasks, answers), tasks)
    assert (perfect.correct, perfect.total, perfect.score, perfect.task_score) == (4, 4, 1.0, 1.0)
    # the same answers as attempt_2, behind a wrong attempt_1
    answers = {task.id: [[[[9, 9, 9]], output] for output in task.test_outputs] for task in tasks.tasks()}
    assert score_submission(build_submission(tasks, answers), SOLUTIONS).score == 1.0


def test_scoring_needs_known_solutions_and_an_object(tasks):
    with pytest.raises(ValueError, match="no test outputs known"):
        score_submission(build_submission(tasks, {}), tasks.without_solutions())
    with pytest.raises(InvalidDataError, match="the submission is a list"):
        score_submission([], SOLUTIONS)


def test_an_empty_score_is_zero_not_an_error():
    score = score_submission({}, {})
    assert (score.score, score.task_score, score.tasks_credited, len(score.table)) == (0.0, 0.0, 0.0, 0)


# ---------------------------------------------------------------------------------------------
# detect_kind and validate_file

def write(folder, name, data):
    path = folder / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_detect_kind_tells_the_three_files_apart():
    assert detect_kind(CHALLENGES) == "challenges"
    assert detect_kind({"t": {"test": []}}) == "challenges"
    assert detect_kind(SOLUTIONS) == "solutions"
    assert detect_kind(good_submission()) == "submission"
    assert detect_kind({"t": [{"attempt_2": [[1]]}]}) == "submission"


@pytest.mark.parametrize("data", [{}, [], [CHALLENGES], "text", None, 3, {"t": []}, {"t": [{}]}, {"t": 1}])
def test_detect_kind_refuses_what_it_cannot_tell(data):
    with pytest.raises(InvalidDataError, match="cannot tell whether"):
        detect_kind(data)


def test_validate_file_on_good_files(tmp_path, tasks):
    assert validate_file(write(tmp_path, "c.json", CHALLENGES)) == ("challenges", [])
    assert validate_file(write(tmp_path, "s.json", SOLUTIONS)) == ("solutions", [])
    submission = write(tmp_path, "sub.json", build_submission(tasks, {}))
    assert validate_file(submission) == ("submission", [])
    assert validate_file(submission, "submission", tasks) == ("submission", [])
    assert validate_file(tmp_path / "s.json", challenges=tasks) == ("solutions", [])


def test_validate_file_lists_the_problems_of_each_kind(tmp_path, tasks):
    bad_challenges = copy.deepcopy(CHALLENGES)
    bad_challenges["z"]["train"][0]["output"] = [[1, 2], [3]]
    del bad_challenges["a"]["test"]
    kind, problems = validate_file(write(tmp_path, "c.json", bad_challenges))
    assert kind == "challenges"
    assert len(problems) == 2
    assert problems[0].startswith("task z: train[0].output row 1 has 1 cells")
    assert problems[1] == "task a: missing 'test'"

    kind, problems = validate_file(write(tmp_path, "s.json", {"z": [[[1]]], "a": [[[12]]]}), challenges=tasks)
    assert kind == "solutions"
    assert sorted(problems) == sorted(["task m: missing", "task z: has 1 solutions for 2 test inputs",
                                       "task a: [0] row 0 column 0 holds 12, expected an integer 0-9"])

    submission = build_submission(tasks, {})
    del submission["z"][1]
    submission["a"][0]["attempt_1"] = []
    kind, problems = validate_file(write(tmp_path, "sub.json", submission), challenges=tasks)
    assert kind == "submission"
    assert problems == ["task z: has 1 entries for 2 test inputs", "task a: [0].attempt_1 is empty"]


def test_validate_file_with_a_given_kind_checks_that_kind(tmp_path):
    path = write(tmp_path, "c.json", CHALLENGES)
    kind, problems = validate_file(path, "submission")
    assert kind == "submission"
    assert problems and all("expected a list of attempt objects" in p for p in problems)
    with pytest.raises(ValueError, match="unknown kind"):
        validate_file(path, "answers")


@pytest.mark.parametrize("content, phrase", [
    ('{"a": [', "invalid JSON at line 1"),
    ("", "invalid JSON"),
    ("[1, 2]", "cannot tell whether"),
    ('{"t": []}', "cannot tell whether"),
])
def test_validate_file_on_unreadable_files_never_raises(tmp_path, content, phrase):
    kind, problems = validate_file(write(tmp_path, "x.json", content))
    assert kind == "auto"
    assert len(problems) == 1 and phrase in problems[0]


def test_validate_file_on_a_missing_file_or_a_folder(tmp_path):
    assert validate_file(tmp_path / "absent.json") == ("auto", [f"no such file: {tmp_path / 'absent.json'}"])
    kind, problems = validate_file(tmp_path, "submission")
    assert kind == "submission" and problems == [f"{tmp_path} is a folder, expected a JSON file"]
    bytes_path = tmp_path / "latin1.json"
    bytes_path.write_bytes(b'{"\xe9": 1}')  # latin-1, not UTF-8
    assert "not UTF-8" in validate_file(bytes_path)[1][0]


# ---------------------------------------------------------------------------------------------
# Sets that are not for the competition: answers as wide as the set's own limit

WIDE_CHALLENGES = {"w": challenge([[3] * 40], train=(([[1] * 40], [[2] * 40]),)), "s": challenge([[4]])}
WIDE_SOLUTIONS = {"w": [[[5] * 40]], "s": [[[6, 6]]]}


def reference_correct(submission, solutions):
    """The metric written plainly: a test output counts when either attempt equals it as JSON."""
    return sum(any(entry.get(name) == answer for name in ("attempt_1", "attempt_2"))
               for task_id, answers in solutions.items() for entry, answer in zip(submission.get(task_id, []), answers))


def test_a_wide_set_keeps_and_scores_its_wide_answers_and_the_competition_keeps_30():
    tasks = parse_tasks(copy.deepcopy(WIDE_CHALLENGES), copy.deepcopy(WIDE_SOLUTIONS), max_side=40)
    wide_answer, too_wide = np.full((1, 40), 5, dtype=np.uint8), np.ones((1, 41), dtype=np.uint8)
    answers = {"w": [[too_wide, wide_answer]], "s": [[[[6, 6]]]]}
    submission = build_submission(tasks, answers)
    assert attempts(submission["w"][0]) == ([[5] * 40], [[3] * 40])  # 41 wide passed over; the input as fallback
    assert submission_problems(submission, tasks) == [] and solutions_problems(WIDE_SOLUTIONS, tasks) == []
    score = score_submission(submission, tasks)
    assert (score.correct, score.total) == (reference_correct(submission, WIDE_SOLUTIONS), 2) == (2, 2)
    assert score_submission(submission, WIDE_SOLUTIONS).correct == 2  # the answers bound the attempts
    # the competition's limit where no wider set says otherwise: counts, or an explicit 30
    for limit in ({"challenges": {"w": 1, "s": 1}}, {"challenges": tasks, "max_side": 30}):
        competition = build_submission(limit["challenges"], answers, max_side=limit.get("max_side"))
        assert competition["w"][0]["attempt_1"] == [[0]] and competition["s"][0]["attempt_1"] == [[6, 6]]
        assert "task w: [0].attempt_1 has 40 columns, at most 30 allowed" in submission_problems(submission, **limit)
    assert "task w: [0] has 40 columns, at most 30 allowed" in solutions_problems(WIDE_SOLUTIONS)
    assert submission_problems(submission, max_side=39) != [] and submission_problems(submission, max_side=40) == []


def test_write_load_and_score_files_of_a_wide_set(tmp_path):
    tasks = parse_tasks(copy.deepcopy(WIDE_CHALLENGES), copy.deepcopy(WIDE_SOLUTIONS), max_side=40)
    path = write_submission(tmp_path / "submission.json", build_submission(tasks, {"w": [[[[5] * 40]]]}), tasks)
    assert load_submission(path, tasks)["w"][0]["attempt_1"] == [[5] * 40]
    with pytest.raises(InvalidDataError, match="40 columns, at most 30 allowed"):
        load_submission(path, {"w": 1, "s": 1})
    score, problems = score_file(path, WIDE_SOLUTIONS, max_side=40)
    assert (score.correct, problems) == (1, [])
    score, problems = score_file(path, tasks)  # a TaskSet brings its own limit
    assert (score.correct, problems) == (1, [])
    score, problems = score_file(path, WIDE_SOLUTIONS)
    assert score.correct == 1 and any("40 columns, at most 30 allowed" in problem for problem in problems)
    write(tmp_path, "solutions.json", WIDE_SOLUTIONS)
    for name, kind in (("submission.json", "submission"), ("solutions.json", "solutions")):
        assert validate_file(tmp_path / name, max_side=40) == (kind, [])
        found_kind, problems = validate_file(tmp_path / name)
        assert found_kind == kind and any("40 columns, at most 30 allowed" in problem for problem in problems)


DEEP = "[" * 50_000 + "]" * 50_000  # past json's recursion limit on every Python the kit supports


def test_entries_json_cannot_read_are_named_in_submissions_and_solutions(tmp_path):
    good = json.dumps([{"attempt_1": [[1]], "attempt_2": [[1]]}])
    path = write(tmp_path, "submission.json", '{"a": ' + good + ', "b": ' + DEEP + ', "c": ' + "9" * 5001 + "}")
    kind, problems = validate_file(path)
    assert kind == "submission" and [problem.split(":")[0] for problem in problems] == ["task b", "task c"]
    assert problems[0].startswith("task b: cannot be read: JSON nested too deeply")
    assert problems[1].startswith("task c: cannot be read: a number with 5001 digits")
    score, problems = score_file(path, {"a": [[[1]]], "b": [[[1]]], "c": [[[1]]]})
    assert (score.correct, score.total) == (1, 3) and len(problems) == 2
    path = write(tmp_path, "solutions.json", '{"a": [[[1]]], "b": ' + DEEP + "}")
    kind, problems = validate_file(path)
    assert kind == "solutions" and len(problems) == 1 and problems[0].startswith("task b: cannot be read: JSON")
    kind, problems = validate_file(write(tmp_path, "only.json", '{"b": ' + DEEP + "}"))
    assert problems[0].startswith("task b: cannot be read: JSON nested too deeply") and "--kind" in problems[1]
