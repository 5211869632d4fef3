"""A task set parsed from a challenges file's mapping (and its solutions'): every problem found, bad tasks set aside.

``parse_tasks`` reads each task with ``tasks.parse_task``; strict, it raises ``InvalidDataError``
listing every problem in every task; lenient, it keeps the good tasks and sets the bad ones aside
(``SkippedTask``, with what of their test inputs and solutions could be salvaged). This module knows
the JSON mappings ``jsonio`` reads (their repeated and unreadable keys); it knows nothing of files,
text, models or augmentations.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from arc_kit.codec import json_type_name
from arc_kit.data.grids import MAX_SIDE, check_max_side, grid_problems, to_grid
from arc_kit.data.tasks import InvalidDataError, SkippedTask, Task, TaskSet, parse_task, repeated_keys, unreadable_keys
from arc_kit.names import listed, shown


def parse_tasks(challenges: Any, solutions: Any = None, *, source: str = "", strict: bool = True,
                name: str = "", max_side: int = MAX_SIDE) -> TaskSet:
    """Build a TaskSet from a challenges mapping (and optionally a solutions mapping).

    strict: raise InvalidDataError listing every problem in every task. Lenient: skip the bad
    tasks with one warning and keep them in ``TaskSet.skipped``. A task id the file holds twice
    (``repeated_keys``) is a problem of that task. ``max_side``: as in ``parse_task``; the set keeps it.
    """
    max_side = check_max_side(max_side)
    top_problems = _file_problems(challenges, solutions, source)
    tasks, skipped = _parse_each_task(challenges, solutions, max_side)
    all_problems = [*top_problems, *(problem for task in skipped.values() for problem in task.problems)]
    if all_problems and strict:
        raise InvalidDataError(all_problems, source)
    if all_problems:
        firsts = [problem for s in skipped.values() for problem in s.problems[:1]] + top_problems
        warnings.warn(f"{source or 'tasks'}: skipped {len(skipped)} bad task(s) of {len(challenges)}"
                      + (f": {listed(firsts, separator='; ')}" if firsts else ""), stacklevel=2)
    return TaskSet(tasks, name=name, skipped=skipped, order=challenges, max_side=max_side)


def _file_problems(challenges: Any, solutions: Any, source: str) -> list[str]:
    """The problems of the files as a whole; InvalidDataError (strict or not) where no task can be read."""
    if not isinstance(challenges, dict):
        raise InvalidDataError([f"the file holds {json_type_name(challenges)}, expected an object "
                                "mapping task ids to tasks"], source)
    if not challenges:  # strict or not: a run on it would answer nothing, a submission with no task
        raise InvalidDataError(["the file holds no tasks (an empty object), expected an object mapping task ids "
                                "to tasks"], source)
    top_problems = []
    if solutions is not None:
        if not isinstance(solutions, dict):
            raise InvalidDataError([f"the solutions hold {json_type_name(solutions)}, expected an object "
                                    "mapping task ids to lists of grids"], source)
        extra = [task_id for task_id in solutions if task_id not in challenges]
        top_problems += [f"task {shown(task_id)}: has solutions but no challenge" for task_id in extra]
        top_problems += [f"task {shown(task_id)}: appears {times} times in the solutions (only the last copy was "
                         "read)" for task_id, times in repeated_keys(solutions).items()]
    return top_problems


def _parse_each_task(challenges: dict, solutions: dict | None,
                     max_side: int) -> tuple[list[Task], dict[str, SkippedTask]]:
    """The good tasks in the file's order, and the bad ones with their problems, by task id."""
    tasks, skipped = [], {}
    repeated, unreadable = repeated_keys(challenges), unreadable_keys(challenges)
    unreadable_solutions = unreadable_keys(solutions)
    for task_id, data in challenges.items():
        prefix = f"task {shown(task_id)}:"
        task_solutions = None if solutions is None else solutions.get(task_id)
        if task_id in unreadable or task_id in unreadable_solutions:  # the rest of the file was read: skip only it
            why = unreadable.get(task_id) or f"its solutions: {unreadable_solutions[task_id]}"
            problems, task_solutions = [f"{prefix} cannot be read: {why}"], None
        elif solutions is not None and task_solutions is None:
            problems = [f"{prefix} missing from the solutions"]
        else:
            task, problems = parse_task(task_id, data, task_solutions, max_side=max_side)
            if task_id in repeated:  # a JSON object keeps the last copy; which one was meant cannot be told
                problems = [f"{prefix} appears {repeated[task_id]} times in the file (task ids must be unique; only "
                            "the last copy was read)", *problems]
        if not problems:
            tasks.append(task)
            continue
        inputs = data["test"] if isinstance(data, dict) and isinstance(data.get("test"), list) else []
        salvaged = _salvaged([pair.get("input") if isinstance(pair, dict) else None for pair in inputs], max_side)
        skipped[task_id] = SkippedTask(task_id, tuple(problems), max(len(inputs), 1), salvaged,
                                       _salvaged(task_solutions, max_side))
    return tasks, skipped


def _salvaged(grids: Any, max_side: int) -> tuple[np.ndarray | None, ...] | None:
    """The valid grids of a (possibly malformed) list of grids, None where one is bad; None for no list."""
    if not isinstance(grids, list):
        return None
    return tuple(None if grid_problems(grid, "", max_side) else to_grid(grid, max_side=max_side) for grid in grids)
