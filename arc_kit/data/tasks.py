"""Tasks: train pairs, test inputs and (when known) test outputs; checked parsing from JSON.

``Task`` and ``TaskSet`` are plain, immutable containers of numpy grids. Parsing a task from its
JSON form (``{"train": [...], "test": [...]}``) collects every problem with the exact place it
sits, so that a file can be fixed in one pass (a whole file's mapping: ``task_files.parse_tasks``).
This module knows nothing of files (see ``datasets``), text, models or augmentations.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from arc_kit.codec import json_type_name
from arc_kit.data.grids import (
    MAX_SIDE,
    check_max_side,
    format_grid,
    freeze,
    grid_problems,
    grid_to_json,
    grids_equal,
)
from arc_kit.data.pictures import pair_html, task_html
from arc_kit.names import shown


class InvalidDataError(ValueError):
    """Raised when input data is malformed; ``problems`` lists every problem found, one per line."""

    def __init__(self, problems: Sequence[str], source: str = ""):
        self.problems = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        count = len(self.problems)
        lines = "\n".join(f"  {problem}" for problem in self.problems)
        super().__init__(f"{head}{count} problem{'s' if count != 1 else ''}:\n{lines}")


@dataclass(frozen=True, eq=False)
class Pair:
    """One example: an input grid and its output grid (``None`` when the output is unknown)."""

    input: np.ndarray
    output: np.ndarray | None = None

    def __post_init__(self):
        object.__setattr__(self, "input", freeze(self.input))
        object.__setattr__(self, "output", None if self.output is None else freeze(self.output))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Pair):
            return NotImplemented
        outputs_equal = (self.output is None and other.output is None) or grids_equal(self.output, other.output)
        return grids_equal(self.input, other.input) and outputs_equal

    __hash__ = None  # mutable-looking content; compare, do not hash

    def to_json(self, with_output: bool = True) -> dict[str, Any]:
        data = {"input": grid_to_json(self.input)}
        if with_output and self.output is not None:
            data["output"] = grid_to_json(self.output)
        return data

    def __repr__(self) -> str:
        shape_in = "x".join(map(str, self.input.shape))
        shape_out = "?" if self.output is None else "x".join(map(str, self.output.shape))
        return f"Pair({shape_in} -> {shape_out})"

    def _repr_html_(self) -> str:
        """Jupyter's picture: input and output side by side, cells at one size."""
        return pair_html(self)


@dataclass(frozen=True, eq=False)
class Task:
    """An ARC task: ``train`` pairs with outputs, ``test`` pairs whose outputs may be unknown."""

    id: str
    train: tuple[Pair, ...]
    test: tuple[Pair, ...]

    def __post_init__(self):
        object.__setattr__(self, "train", tuple(self.train))
        object.__setattr__(self, "test", tuple(self.test))
        if not self.train:
            raise ValueError(f"task {shown(self.id)}: has no train pairs")
        if not self.test:
            raise ValueError(f"task {shown(self.id)}: has no test inputs")
        if any(pair.output is None for pair in self.train):
            raise ValueError(f"task {shown(self.id)}: every train pair needs an output")

    @property
    def test_inputs(self) -> list[np.ndarray]:
        return [pair.input for pair in self.test]

    @property
    def test_outputs(self) -> list[np.ndarray] | None:
        """The test outputs, or None unless all of them are known."""
        return [pair.output for pair in self.test] if self.has_solutions else None

    @property
    def has_solutions(self) -> bool:
        return all(pair.output is not None for pair in self.test)

    def without_solutions(self) -> Task:
        """The same task with its test outputs removed (what a solver may see)."""
        return Task(self.id, self.train, tuple(Pair(pair.input) for pair in self.test))

    def to_json(self, with_solutions: bool = False) -> dict[str, Any]:
        """The challenge form ``{"train": [...], "test": [{"input": ...}]}``; outputs only if asked."""
        return {"train": [pair.to_json() for pair in self.train],
                "test": [pair.to_json(with_output=with_solutions) for pair in self.test]}

    @classmethod
    def from_json(cls, task_id: str, data: Any, solutions: Any = None, *, max_side: int = MAX_SIDE) -> Task:
        """Parse and check one task; raises InvalidDataError listing every problem."""
        task, problems = parse_task(task_id, data, solutions, max_side=max_side)
        if problems:
            raise InvalidDataError(problems)
        return task

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Task):
            return NotImplemented
        return self.id == other.id and self.train == other.train and self.test == other.test

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        known = "with solutions" if self.has_solutions else "without solutions"
        return f"Task({self.id!r}: {len(self.train)} train, {len(self.test)} test, {known})"

    def _repr_html_(self) -> str:
        """Jupyter's picture (``pictures.task_html``): the pairs as columns, the test pairs last, cells at one size,
        each grid captioned with its size."""
        return task_html(self)

    def __str__(self) -> str:
        parts = [repr(self)]
        for name, pairs in (("train", self.train), ("test", self.test)):
            for index, pair in enumerate(pairs):
                parts.append(f"{name}[{index}].input:\n{format_grid(pair.input)}")
                if pair.output is not None:
                    parts.append(f"{name}[{index}].output:\n{format_grid(pair.output)}")
        return "\n".join(parts)


def repeated_keys(mapping: Any) -> dict[str, int]:
    """Keys that a JSON object held more than once, with how often (``jsonio`` notes them when it reads a file)."""
    return dict(getattr(mapping, "repeated_keys", None) or {})


def unreadable_keys(mapping: Any) -> dict[str, str]:
    """Keys of a JSON object whose values could not be read (None in the object), with why (``jsonio`` notes them)."""
    return dict(getattr(mapping, "unreadable_keys", None) or {})


def _parse_pairs(task_id: str, data: Mapping, part: str, need_output: bool,
                 problems: list[str], max_side: int = MAX_SIDE) -> list[tuple[np.ndarray | None, ...]] | None:
    """``data[part]``'s pairs as (input, output) grids, None where one is missing or bad; ``problems`` says why."""
    prefix = f"task {shown(task_id)}:"
    if part not in data:
        problems.append(f"{prefix} missing '{part}'")
        return None
    pairs = data[part]
    if not isinstance(pairs, list):
        problems.append(f"{prefix} '{part}' is {json_type_name(pairs)}, expected a list of pairs")
        return None
    if not pairs:
        problems.append(f"{prefix} has no {'train pairs' if part == 'train' else 'test inputs'}")
        return None
    parsed = []
    for index, pair in enumerate(pairs):
        where = f"{part}[{index}]"
        if not isinstance(pair, dict):
            problems.append(f"{prefix} {where} is {json_type_name(pair)}, expected an object with 'input'"
                            + (" and 'output'" if need_output else ""))
            parsed.append((None, None))
            continue
        problems.extend(f"{prefix} {where} holds key {key!r} {times} times (JSON keeps only the last)"
                        for key, times in repeated_keys(pair).items())
        grids = []
        for key in ("input", "output"):
            if key not in pair:
                if key == "input" or need_output:
                    problems.append(f"{prefix} {where} missing '{key}'")
                grids.append(None)
                continue
            found = grid_problems(pair[key], f"{where}.{key}", max_side)
            problems.extend(f"{prefix} {problem}" for problem in found)
            grids.append(None if found else pair[key])  # checked: Pair only makes it an array
        parsed.append(tuple(grids))
    return parsed


def parse_task(task_id: str, data: Any, solutions: Any = None, *,
               max_side: int = MAX_SIDE) -> tuple[Task | None, list[str]]:
    """Check one task's JSON (and optionally its list of solution grids).

    Returns ``(task, [])`` when all is well, else ``(None, problems)`` with every problem found,
    each prefixed ``task <id>:``. ``max_side``: the most cells on a grid's side, the competition's
    30 unless the data is for exploration or training only (up to ``grids.LARGEST_SIDE``).
    """
    prefix = f"task {shown(task_id)}:"
    max_side = check_max_side(max_side)
    if not isinstance(data, dict):
        return None, [f"{prefix} is {json_type_name(data)}, expected an object with 'train' and 'test'"]
    problems: list[str] = [f"{prefix} key {key!r} appears {times} times" for key, times in repeated_keys(data).items()]
    problems += [f"{prefix} {key!r} cannot be read: {why}" for key, why in unreadable_keys(data).items()]
    if unreadable_keys(data):
        return None, problems  # the unreadable part would only be reported again as missing
    train = _parse_pairs(task_id, data, "train", True, problems, max_side)
    test = _parse_pairs(task_id, data, "test", False, problems, max_side)
    if solutions is not None and not isinstance(solutions, list):
        problems.append(f"{prefix} solutions are {json_type_name(solutions)}, expected a list of grids")
    elif solutions is not None:
        if test is not None and len(solutions) != len(test):
            problems.append(f"{prefix} has {len(solutions)} solutions for {len(test)} test inputs")
        for index, value in enumerate(solutions):
            problems.extend(f"{prefix} {problem}" for problem in grid_problems(value, f"solutions[{index}]", max_side))
    if problems:
        return None, problems
    outputs = [grid_out for _, grid_out in test] if solutions is None else solutions
    return Task(task_id, tuple(Pair(*pair) for pair in train),
                tuple(Pair(grid_in, grid_out) for (grid_in, _), grid_out in zip(test, outputs))), []


@dataclass(frozen=True)
class SkippedTask:
    """A task that could not be loaded: its problems, and how many test inputs it seems to have.

    ``test_inputs`` and ``solutions`` hold what could be salvaged (a grid, or None where the file's
    grid is bad); ``solutions`` is None when no list of solutions was given for the task.
    """

    id: str
    problems: tuple[str, ...]
    test_count: int = 1
    test_inputs: tuple[np.ndarray | None, ...] = ()
    solutions: tuple[np.ndarray | None, ...] | None = None


class TaskSet(Mapping[str, Task]):
    """An ordered, read-only collection of tasks, looked up by id (or by position with an int).

    ``skipped`` holds the tasks that a lenient load could not use, so that a submission can still
    give every task id an answer. ``order`` lists every id, skipped ones included, in file order
    (default: the tasks, then the skipped ones). ``max_side`` is the most cells a side of the
    set's grids may have, the limit it was loaded with, which its submission's answers keep too;
    None: the competition's 30, or the set's widest grid where that is more.
    """

    def __init__(self, tasks: Iterable[Task], name: str = "", skipped: Mapping[str, SkippedTask] | None = None,
                 order: Iterable[str] | None = None, max_side: int | None = None):
        self._tasks: dict[str, Task] = {}
        for task in tasks:
            if task.id in self._tasks:
                raise ValueError(f"task {shown(task.id)}: appears twice in {name or 'the task set'}")
            self._tasks[task.id] = task
        if max_side is None:
            sides = [side for task in self._tasks.values() for pair in (*task.train, *task.test)
                     for grid in (pair.input, pair.output) if grid is not None for side in grid.shape]
            max_side = max([MAX_SIDE, *sides])
        self.max_side = check_max_side(max_side)
        self.name = name
        self.skipped: dict[str, SkippedTask] = dict(skipped or {})
        self._ids = list(self._tasks)
        self._order = list(dict.fromkeys(order)) if order is not None else []

    def __getitem__(self, key: str | int) -> Task:
        if isinstance(key, (int, np.integer)):
            return self._tasks[self._ids[key]]
        try:
            return self._tasks[key]
        except KeyError:
            raise KeyError(f"no task {key!r} in {self.name or 'this task set'} ({len(self)} tasks)") from None

    def lookup(self, key: str) -> Task:
        """A task by id, or, when ``key`` is a number that is no id, by position (KeyError naming both)."""
        if key in self._tasks:
            return self._tasks[key]
        if key.isdigit() and int(key) < len(self):
            return self[int(key)]
        raise KeyError(f"no task {key!r} in {self.name or 'this task set'} ({len(self)} tasks), neither as an id "
                       "nor as a position")

    def __contains__(self, key: object) -> bool:
        return key in self._tasks  # ids only: positions are for lookup, not membership

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def tasks(self) -> list[Task]:
        return [self._tasks[task_id] for task_id in self._ids]

    @property
    def has_solutions(self) -> bool:
        return all(task.has_solutions for task in self._tasks.values())

    def test_counts(self) -> dict[str, int]:
        """Every task id, skipped ones included, with its number of test inputs (file order)."""
        counts = {task_id: skipped.test_count for task_id, skipped in self.skipped.items()}
        counts.update((task_id, len(task.test)) for task_id, task in self._tasks.items())
        ids = dict.fromkeys([*self._order, *self._tasks, *self.skipped])  # ids missing from the order go last
        return {task_id: counts[task_id] for task_id in ids if task_id in counts}

    def select(self, ids: Iterable[str]) -> TaskSet:
        ids = list(ids)  # skipped ids are kept as skipped; an unknown id is a KeyError
        return TaskSet([self[task_id] for task_id in ids if task_id not in self.skipped], self.name,
                       {i: s for i, s in self.skipped.items() if i in ids}, order=ids, max_side=self.max_side)

    def head(self, count: int) -> TaskSet:
        """The first ``count`` task ids in sorted order (a stable choice for quick runs), skipped ones kept as skipped."""
        return self.select(sorted([*self._tasks, *self.skipped])[:count])

    def known_outputs(self) -> dict[str, list[np.ndarray | None]]:
        """The test outputs to score against, by task id (file order), skipped tasks' salvaged solutions included.

        A skipped task counts when a list of solutions was given for it; a bad grid in that list
        is None there (no attempt can equal it). Tasks with no known outputs are left out.
        """
        outputs = {}
        for task_id in self.test_counts():
            known = self._tasks[task_id].test_outputs if task_id in self._tasks else self.skipped[task_id].solutions
            if known is not None:
                outputs[task_id] = list(known)
        return outputs

    def without_solutions(self) -> TaskSet:
        return TaskSet([task.without_solutions() for task in self.tasks()], self.name, self.skipped,
                       order=self._order, max_side=self.max_side)

    def challenges_json(self) -> dict[str, Any]:
        return {task.id: task.to_json(with_solutions=False) for task in self.tasks()}

    def __repr__(self) -> str:
        name = f"{self.name!r}, " if self.name else ""
        skipped = f", {len(self.skipped)} skipped" if self.skipped else ""
        side = f", max side {self.max_side}" if self.max_side != MAX_SIDE else ""
        return f"TaskSet({name}{len(self)} tasks{skipped}{side})"
