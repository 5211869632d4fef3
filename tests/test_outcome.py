"""The run's end line: tasks the model answered, and how many were right where the solutions are known."""

from __future__ import annotations

import numpy as np

from arc_kit.data.submission import score_submission
from arc_kit.data.tasks import Task, TaskSet
from arc_kit.method.records import FALLBACK_RUNG, TaskRecord, TestResult, fallback_record
from arc_kit.run.runs import answered_by_model, outcome_parts

GRID = np.array([[1, 2], [3, 4]])


def answered(task_id: str, grids) -> TaskRecord:
    return TaskRecord(task_id, [TestResult([grid], [], [], []) for grid in grids])


def test_only_finished_tasks_with_attempts_count_as_answered_by_the_model():
    assert answered_by_model(answered("a", [GRID]))
    assert not answered_by_model(TaskRecord("b"))  # model work, but no attempt: the fallbacks stand
    assert not answered_by_model(TaskRecord("c", [TestResult([], [], [], [])]))
    assert not answered_by_model(fallback_record("d", "out of time"))
    assert not answered_by_model(TaskRecord("e", [TestResult([GRID], [], [], [])], error="RuntimeError: boom"))
    assert not answered_by_model(TaskRecord("f", [TestResult([GRID], [], [], [])], rung=FALLBACK_RUNG))


def test_the_line_counts_right_tasks_among_those_with_known_solutions_shares_included():
    train = [{"input": [[0]], "output": [[0]]}]
    solutions = TaskSet([Task.from_json("one", {"train": train, "test": [{"input": [[1]], "output": GRID.tolist()}]}),
                         Task.from_json("two", {"train": train, "test": [{"input": [[1]], "output": GRID.tolist()},
                                                                        {"input": [[2]], "output": [[5]]}]})])
    records = {"one": answered("one", [GRID]), "two": answered("two", [GRID, GRID]), "three": TaskRecord("three")}
    submission = {task_id: [{"attempt_1": grid.tolist(), "attempt_2": [[0]]} for grid in
                            (GRID,) * len(solutions[task_id].test)] for task_id in solutions.ids}
    score = score_submission(submission, solutions)
    assert outcome_parts(records, score) == ["answered by the model: 2", "correct: 1.5 (of 2 with known solutions)"]
    assert outcome_parts(records) == ["answered by the model: 2", "correct: unknown (no solutions known)"]
