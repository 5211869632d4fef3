"""The Kaggle ``submission.json``: build it complete, validate it, write it atomically, score it.

Format: ``{task_id: [{"attempt_1": grid, "attempt_2": grid}, ...]}`` with one dict per test input,
in order, for every task id of the challenges; both attempts always present. Where nothing
better exists an attempt falls back to the test input itself (right for the few tasks whose
answer is their input) and then to ``[[0]]``.

Metric (the competition's): per test output, 1 if either attempt equals it exactly; the total
divided by the number of test outputs. The paper's "solved tasks" count each task as the share
of its test outputs that are right; ``Score.task_score`` gives that view too.

Grid sides: a submission's grids keep the competition's 30 cells a side, unless its challenges are a
``TaskSet`` loaded with a larger ``max_side`` (a set that is not for the competition, explored or
scored at home) or a ``max_side`` is given: then that limit holds for the answers too. The metric
needs no limit: an attempt is right only when it equals the answer, which its set's limit bounds.

This module knows nothing of models; it reads what the solver found.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from arc_kit.codec import json_type_name
from arc_kit.data.grids import (
    LARGEST_SIDE,
    MAX_SIDE,
    check_max_side,
    grid_problems,
    grid_to_json,
    grids_equal,
)
from arc_kit.data.jsonio import read_json, write_json_atomically
from arc_kit.data.task_files import parse_tasks
from arc_kit.data.tasks import InvalidDataError, TaskSet, repeated_keys, unreadable_keys
from arc_kit.names import shown

if TYPE_CHECKING:
    import pandas

ATTEMPTS = ("attempt_1", "attempt_2")
EMPTY_ANSWER = ((0,),)


def _expected(challenges: TaskSet | Mapping[str, int]) -> dict[str, int]:
    if isinstance(challenges, TaskSet):
        return challenges.test_counts()
    return {task_id: int(count) for task_id, count in challenges.items()}


def side_limit(challenges: TaskSet | Mapping[str, int] | None = None, max_side: int | None = None) -> int:
    """The most cells a submission's grid may have on a side: ``max_side`` if given, else the limit
    a TaskSet was loaded with, else the competition's 30."""
    if max_side is not None:
        return check_max_side(max_side)
    return challenges.max_side if isinstance(challenges, TaskSet) else MAX_SIDE


def _fallback_grids(challenges: TaskSet | Mapping[str, int], task_id: str, index: int) -> list:
    """The fallback answers for one test input: its own input (when known), then [[0]]."""
    fallbacks = [np.array(EMPTY_ANSWER, dtype=np.uint8)]
    if isinstance(challenges, TaskSet) and task_id in challenges:
        return [challenges[task_id].test[index].input, *fallbacks]
    if isinstance(challenges, TaskSet) and task_id in challenges.skipped:  # a salvaged input, or None (passed over)
        return [*challenges.skipped[task_id].test_inputs[index:index + 1], *fallbacks]
    return fallbacks


def build_submission(challenges: TaskSet | Mapping[str, int], answers: Mapping[str, Sequence[Sequence[Any]]], *,
                     max_side: int | None = None, attempts: int = 2) -> dict[str, list[dict[str, list]]]:
    """A complete submission: every task id, every test input, both attempts.

    ``challenges`` is a TaskSet (skipped tasks included) or ``{task_id: number of test inputs}``.
    ``answers[task_id][test_index]`` lists candidate grids, best first; invalid grids (wider than
    ``side_limit(challenges, max_side)`` included) are passed over, missing ones are filled from the
    fallbacks, and the two attempts differ when possible. ``attempts=1`` (top-1): one answer is
    chosen so, and attempt_2 repeats it.
    """
    if attempts not in (1, 2):
        raise ValueError(f"attempts must be 1 or 2, got {attempts}")
    limit = side_limit(challenges, max_side)
    submission = {}
    for task_id, count in _expected(challenges).items():
        task_answers = answers.get(task_id, ())
        entries = []
        for index in range(count):
            candidates = list(task_answers[index]) if index < len(task_answers) else []
            chosen: list = []
            for grid in candidates + _fallback_grids(challenges, task_id, index):
                if len(chosen) < attempts and grid is not None and not grid_problems(grid, "", limit) \
                        and not any(grids_equal(grid, other) for other in chosen):
                    chosen.append(grid)
            chosen += [chosen[0]] * (2 - len(chosen))  # one attempt, or the only fallback left equals the first
            entries.append({name: grid_to_json(grid) for name, grid in zip(ATTEMPTS, chosen)})
        submission[task_id] = entries
    return submission


def _task_id_problems(mapping: dict, challenges) -> tuple[list[str], list[tuple[str, Any]], dict[str, int] | None]:
    """A submission's or solutions' problems with its task ids (repeated, unreadable, missing, unknown), its
    entries that could be read, and the test counts the challenges expect (None without challenges)."""
    problems = [f"task {shown(task_id)}: appears {times} times (only the last copy counts)"
                for task_id, times in repeated_keys(mapping).items()]
    unreadable = unreadable_keys(mapping)
    problems += [f"task {shown(task_id)}: cannot be read: {why}" for task_id, why in unreadable.items()]
    expected = None if challenges is None else _expected(challenges)
    if expected is not None:
        problems += [f"task {shown(task_id)}: missing" for task_id in expected if task_id not in mapping]
        problems += [f"task {shown(task_id)}: not in the challenges" for task_id in mapping if task_id not in expected]
    return problems, [(task_id, value) for task_id, value in mapping.items() if task_id not in unreadable], expected


def submission_problems(submission: Any, challenges: TaskSet | Mapping[str, int] | None = None, *,
                        max_side: int | None = None) -> list[str]:
    """Every problem with a submission; checked against the challenges (ids and test counts) if given, grid sides
    against ``side_limit``."""
    limit = side_limit(challenges, max_side)
    if not isinstance(submission, dict):
        return [f"the submission is {json_type_name(submission)}, expected an object mapping task ids to lists"]
    problems, readable, expected = _task_id_problems(submission, challenges)
    for task_id, entries in readable:
        prefix = f"task {shown(task_id)}:"
        if not isinstance(entries, list):
            problems.append(f"{prefix} is {json_type_name(entries)}, expected a list of attempt objects")
            continue
        if expected is not None and task_id in expected and len(entries) != expected[task_id]:
            problems.append(f"{prefix} has {len(entries)} entries for {expected[task_id]} test inputs")
        if not entries:
            problems.append(f"{prefix} has no entries")
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict):
                problems.append(f"{prefix} [{index}] is {json_type_name(entry)}, expected an object with "
                                "attempt_1 and attempt_2")
                continue
            problems += [f"{prefix} [{index}] holds {key!r} {times} times (JSON keeps only the last, so which "
                         "answer counts cannot be told)" for key, times in repeated_keys(entry).items()]
            for name in ATTEMPTS:
                if name not in entry:
                    problems.append(f"{prefix} [{index}] missing {name}")
                else:
                    problems += [f"{prefix} {p}" for p in grid_problems(entry[name], f"[{index}].{name}", limit)]
            problems += [f"{prefix} [{index}] has an unexpected key {key!r}" for key in entry if key not in ATTEMPTS]
    return problems


def solutions_problems(solutions: Any, challenges: TaskSet | Mapping[str, int] | None = None, *,
                       max_side: int | None = None) -> list[str]:
    """Every problem with a solutions mapping ``{task_id: [grid, ...]}``; grid sides: ``side_limit``."""
    limit = side_limit(challenges, max_side)
    if not isinstance(solutions, dict):
        return [f"the solutions are {json_type_name(solutions)}, expected an object mapping task ids to lists"]
    problems, readable, expected = _task_id_problems(solutions, challenges)
    for task_id, grids in readable:
        if not isinstance(grids, list) or not grids:
            what = json_type_name(grids) if not isinstance(grids, list) else "empty"
            problems.append(f"task {shown(task_id)}: is {what}, expected a list of grids")
            continue
        if expected is not None and task_id in expected and len(grids) != expected[task_id]:
            problems.append(f"task {shown(task_id)}: has {len(grids)} solutions for {expected[task_id]} test inputs")
        for index, grid in enumerate(grids):
            problems += [f"task {shown(task_id)}: {p}" for p in grid_problems(grid, f"[{index}]", limit)]
    return problems


def write_submission(path: str | os.PathLike, submission: Mapping,
                     challenges: TaskSet | Mapping[str, int] | None = None, *, max_side: int | None = None) -> Path:
    """Validate, write atomically (temporary file, then rename), reload and check the reload."""
    problems = submission_problems(submission, challenges, max_side=max_side)
    if problems:
        raise InvalidDataError(problems, f"refusing to write {path}")
    # Valid grids may be numpy arrays or tuples, which json cannot write: store them as lists.
    submission = {task_id: [{name: grid_to_json(entry[name]) for name in ATTEMPTS} for entry in entries]
                  for task_id, entries in submission.items()}
    path = write_json_atomically(path, submission)
    if read_json(path) != submission:
        raise OSError(f"{path}: the file read back differs from what was written")
    return path


def load_submission(path: str | os.PathLike, challenges: TaskSet | Mapping[str, int] | None = None, *,
                    max_side: int | None = None) -> dict:
    """Read a submission and raise InvalidDataError listing every problem, if any."""
    submission = read_json(path)
    problems = submission_problems(submission, challenges, max_side=max_side)
    if problems:
        raise InvalidDataError(problems, str(path))
    return submission


@dataclass(frozen=True)
class Score:
    """A submission's score against solutions."""

    correct: int  # test outputs that one of the attempts got exactly right
    total: int  # test outputs in the solutions
    table: pandas.DataFrame  # one row per task: task_id, test_outputs, correct, score, attempt details

    @property
    def score(self) -> float:
        """The competition metric: right test outputs / all test outputs."""
        return self.correct / self.total if self.total else 0.0

    @property
    def task_score(self) -> float:
        """The paper's view: the mean over tasks of each task's share of right outputs."""
        return float(self.table["score"].mean()) if len(self.table) else 0.0

    @property
    def tasks_credited(self) -> float:
        """Tasks solved with fractional credit, as in the paper's '286.5/400'."""
        return float(self.table["score"].sum())

    def __str__(self) -> str:
        return (f"score {self.score:.2%} ({self.correct}/{self.total} test outputs); "
                f"{self.tasks_credited:g}/{len(self.table)} tasks ({self.task_score:.2%})")


def score_submission(submission: Mapping, solutions: Mapping[str, Sequence] | TaskSet, attempts: int = 2) -> Score:
    """Score every test output of ``solutions``; missing or malformed attempts count as wrong.

    A TaskSet counts its skipped tasks too, against the solutions salvaged for them
    (``TaskSet.known_outputs``): what an independent scorer of the solutions file counts.
    ``attempts``: 2, the competition's (either attempt right), or 1, top-1 (attempt_1 only).
    """
    import pandas as pd

    if attempts not in (1, 2):
        raise ValueError(f"attempts must be 1 or 2, got {attempts}")
    if not isinstance(submission, Mapping):
        raise InvalidDataError(submission_problems(submission))
    if isinstance(solutions, TaskSet):
        unknown = [task.id for task in solutions.tasks() if not task.has_solutions]
        if unknown:
            raise ValueError(f"no test outputs known for {len(unknown)} task(s), e.g. {unknown[:3]}; "
                             "nothing to score against")
        solutions = solutions.known_outputs()
    rows = []
    for task_id, outputs in solutions.items():
        entries = submission.get(task_id)
        entries = entries if isinstance(entries, list) else []
        hits, which = 0, []
        for index, answer in enumerate(outputs):
            entry = entries[index] if index < len(entries) and isinstance(entries[index], dict) else {}
            right = [name for name in ATTEMPTS[:attempts] if attempt_is_right(entry.get(name), answer)]
            hits += bool(right)
            which.append(right[0] if right else "-")
        rows.append({"task_id": task_id, "test_outputs": len(outputs), "correct": hits,
                     "score": hits / len(outputs) if len(outputs) else 0.0, "right_attempts": " ".join(which)})
    table = pd.DataFrame(rows, columns=["task_id", "test_outputs", "correct", "score", "right_attempts"])
    return Score(int(table["correct"].sum()), int(table["test_outputs"].sum()), table)


def attempt_is_right(attempt: Any, answer: Any) -> bool:
    """The competition's test for one attempt: a valid grid equal to the answer, shape and cells.

    The one place the kit decides whether an attempt is right; an attempt that is no valid grid
    (missing, malformed JSON) is wrong. No side limit of its own: a right attempt has the answer's
    sides, and the answer was checked against its set's limit when it was loaded.
    """
    if attempt is None or answer is None or grid_problems(attempt, "", LARGEST_SIDE):
        return False
    return grids_equal(attempt, answer)


def any_attempt_right(attempts: Sequence[Any], answer: Any) -> bool:
    """True when one of the attempts is right (the competition counts a test output once)."""
    return any(attempt_is_right(attempt, answer) for attempt in attempts)


def score_file(submission_path: str | os.PathLike, solutions: Mapping[str, Sequence] | TaskSet,
               challenges: TaskSet | Mapping[str, int] | None = None, *,
               max_side: int | None = None) -> tuple[Score, list[str]]:
    """Score a submission file; (the score, every problem with the file).

    The submission is checked against the solutions' task ids and test counts (and against
    ``challenges`` when given), its grid sides against ``max_side`` (default: the limit of the
    challenges or solutions TaskSet, else 30); missing or malformed attempts score as wrong.
    InvalidDataError when the file is no submission at all (not JSON, not an object).
    """
    submission = read_json(submission_path)
    if not isinstance(submission, dict):
        raise InvalidDataError(submission_problems(submission), str(submission_path))
    expected = challenges if challenges is not None else solutions if isinstance(solutions, TaskSet) \
        else {task_id: len(grids) for task_id, grids in solutions.items()}
    if max_side is None and isinstance(solutions, TaskSet) and not isinstance(expected, TaskSet):
        max_side = solutions.max_side
    problems = submission_problems(submission, expected, max_side=max_side)
    return score_submission(submission, solutions), problems


def detect_kind(data: Any) -> str:
    """'challenges', 'solutions' or 'submission', from the shape of the first entry that tells."""
    if isinstance(data, dict) and data:
        for entry in data.values():
            first = entry[0] if isinstance(entry, list) and entry else None
            if isinstance(entry, dict) and ("train" in entry or "test" in entry):
                return "challenges"
            if isinstance(first, dict) and any(name in first for name in ATTEMPTS):
                return "submission"
            if isinstance(first, list):
                return "solutions"
        task_id, first = next(iter(data.items()))
        what = "an empty list" if first == [] else "an empty object" if first == {} else json_type_name(first)
        which = "its only task" if len(data) == 1 else f"none of its {len(data)} tasks looks like one, the first"
        raise InvalidDataError([f"cannot tell whether this is a challenges, solutions or submission file: {which}, "
                                f"task {shown(task_id)}, is {what} (a challenge is an object with 'train' and 'test'; "
                                "use --kind to check it as one kind)"])
    what = "an empty object" if isinstance(data, dict) else json_type_name(data)
    raise InvalidDataError([f"cannot tell whether this is a challenges, solutions or submission file: it holds {what}, "
                            "expected an object mapping task ids to tasks, solutions or attempts"])


def validate_file(path: str | os.PathLike, kind: str = "auto", challenges: TaskSet | Mapping[str, int] | None = None,
                  *, max_side: int = MAX_SIDE) -> tuple[str, list[str]]:
    """(kind, every problem) for a challenges, solutions or submission file; never raises on bad data. ``max_side``:
    the competition's 30 unless the file belongs to a set that is not for the competition (as in ``load_tasks``)."""
    max_side = check_max_side(max_side)
    try:
        data = read_json(path)
    except InvalidDataError as error:
        return kind, error.problems
    try:
        kind = detect_kind(data) if kind == "auto" else kind
    except InvalidDataError as error:
        unreadable = [f"task {shown(task_id)}: cannot be read: {why}" for task_id, why in unreadable_keys(data).items()]
        return kind, unreadable + (["cannot tell from the rest whether this is a challenges, solutions or submission "
                                    "file (use --kind to check it as one kind)"] if unreadable else error.problems)
    if kind == "challenges":
        try:
            parse_tasks(data, source=str(path), strict=True, max_side=max_side)
        except InvalidDataError as error:
            return kind, error.problems
        return kind, []
    if kind == "solutions":
        return kind, solutions_problems(data, challenges, max_side=max_side)
    if kind == "submission":
        return kind, submission_problems(data, challenges, max_side=max_side)
    raise ValueError(f"unknown kind {kind!r}; expected challenges, solutions or submission")
