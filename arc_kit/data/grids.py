"""Grids: checking JSON values and turning them into small read-only numpy arrays.

A grid is a 2-D ``numpy.uint8`` array of colours 0-9, 1 to 30 cells on each side (the competition's
limit, ``MAX_SIDE``). Data that is not for the competition (1-D ARC's long rows, say) may be
checked with a larger ``max_side``, up to ``LARGEST_SIDE`` (``check_max_side``); built grids
(``freeze``) accept that much, while parsing keeps ``MAX_SIDE`` unless told otherwise. This module
knows how a grid may look in JSON and says exactly what is wrong with one that does not; it
knows nothing of tasks, files or models.

Problems are short phrases that start with the place they concern (``train[2].output row 3 has
4 cells, expected 3``); callers prefix the task id.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from arc_kit.codec import json_type_name

MAX_SIDE = 30  # the ARC limit on both height and width
LARGEST_SIDE = 255  # the most any grid may have on a side (grid_key stores a side in one byte)
COLOURS = 10  # colours are the integers 0..9
GRID_DTYPE = np.uint8
MAX_CELL_PROBLEMS = 10  # bad cells listed per grid before the rest are only counted
_COLOUR_SET = frozenset(range(COLOURS))


def describe_value(value: Any) -> str:
    """A JSON-flavoured description of a bad value, for messages: ``'3' (a string)``."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, float):
        return f"{value!r} ({'a float' if value.is_integer() else 'a number with a fraction'})"
    if isinstance(value, str):
        return f"{value if len(value) <= 20 else value[:17] + '...'!r} (a string)"
    return json_type_name(value) if value is None or isinstance(value, (list, tuple, dict)) else repr(value)


def _looks_valid(value: Any, max_side: int = MAX_SIDE) -> bool:
    """A fast yes for the common case; a no only means 'look closer'."""
    if type(value) is not list or not 0 < len(value) <= max_side or type(value[0]) is not list:
        return False
    width = len(value[0])  # below: every cell an int (`type is int` rejects True/False) of a colour
    return 0 < width <= max_side and all(type(row) is list and len(row) == width and set(map(type, row)) == {int}
                                         and _COLOUR_SET.issuperset(row) for row in value)


def check_max_side(max_side: int, name: str = "max_side") -> int:
    """``max_side`` when it is an integer from 1 to ``LARGEST_SIDE``; ValueError in one line naming ``name`` if not."""
    whole = isinstance(max_side, (int, np.integer)) and not isinstance(max_side, bool)
    if not whole or not 0 < max_side <= LARGEST_SIDE:
        raise ValueError(f"{name} must be 1 to {LARGEST_SIDE} cells (the most a grid may have on a side), "
                         f"not {max_side!r}")
    return int(max_side)


def grid_problems(value: Any, where: str, max_side: int = MAX_SIDE) -> list[str]:
    """Every problem with ``value`` as a grid, each phrase starting with ``where``; [] if valid.

    ``max_side`` is the most cells allowed on a side: the competition's 30 unless told otherwise.
    """
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, tuple):
        value = [list(row) if isinstance(row, tuple) else row for row in value]
    max_side = check_max_side(max_side)
    if _looks_valid(value, max_side):
        return []
    if not isinstance(value, list):
        return [f"{where} is {json_type_name(value)}, expected a list of rows"]
    if not value:
        return [f"{where} is empty"]
    problems = []
    if len(value) > max_side:
        problems.append(f"{where} has {len(value)} rows, at most {max_side} allowed")
    # the first non-empty row sets the width (an empty first row must not make every other row 'ragged')
    width = next((len(row) for row in value if isinstance(row, list) and row), None)
    if width is not None and width > max_side:
        problems.append(f"{where} has {width} columns, at most {max_side} allowed")
    bad_cells = []
    for row_index, row in enumerate(value):
        if not isinstance(row, list):
            problems.append(f"{where} row {row_index} is {json_type_name(row)}, expected a list of cells")
            continue
        if not row:
            problems.append(f"{where} row {row_index} is empty")
            continue
        if width is not None and len(row) != width:
            problems.append(f"{where} row {row_index} has {len(row)} cells, expected {width}")
        for column_index, cell in enumerate(row):
            if not (type(cell) is int and 0 <= cell < COLOURS):  # `type is int` rejects True/False
                bad_cells.append(f"{where} row {row_index} column {column_index} holds "
                                 f"{describe_value(cell)}, expected an integer 0-9")
    problems.extend(bad_cells[:MAX_CELL_PROBLEMS])
    if len(bad_cells) > MAX_CELL_PROBLEMS:
        problems.append(f"{where} has {len(bad_cells) - MAX_CELL_PROBLEMS} more bad cells")
    if not problems:  # only the first row was bad in a way the loop does not report
        problems.append(f"{where} is not a grid")
    return problems


def to_grid(value: Any, where: str = "grid", max_side: int = MAX_SIDE) -> np.ndarray:
    """A read-only uint8 array from a JSON grid (or array); ValueError naming every problem."""
    problems = grid_problems(value, where, max_side)
    if problems:
        raise ValueError("; ".join(problems))
    grid = np.array(value, dtype=GRID_DTYPE)
    grid.setflags(write=False)
    return grid


def freeze(grid: Any) -> np.ndarray:
    """A read-only uint8 grid from an array-like, checked with numpy (cheap); ValueError if invalid.

    An array that is already an owned, read-only uint8 grid is returned as it is. Sides up to
    ``LARGEST_SIDE`` pass: which limit applies is decided where data is parsed.
    """
    if (isinstance(grid, np.ndarray) and grid.dtype == GRID_DTYPE and not grid.flags.writeable
            and grid.flags.owndata and grid.ndim == 2):
        return grid
    try:
        array = np.asarray(grid)
    except ValueError:  # ragged nested lists: numpy's message does not say where
        return to_grid(grid, max_side=LARGEST_SIDE)
    if (array.ndim != 2 or not (0 < array.shape[0] <= LARGEST_SIDE and 0 < array.shape[1] <= LARGEST_SIDE)
            or array.dtype.kind not in "iu" or (array.size and (array.min() < 0 or array.max() >= COLOURS))):
        return to_grid(grid, max_side=LARGEST_SIDE)  # the slow path names the problem (or accepts nested lists)
    grid = np.array(array, dtype=GRID_DTYPE, copy=True)
    grid.setflags(write=False)
    return grid


def grid_to_json(grid: np.ndarray) -> list[list[int]]:
    """A grid as JSON lists of Python ints."""
    return np.asarray(grid).tolist()


def grids_equal(first: Any, second: Any) -> bool:
    """True when two grids (arrays or nested lists) have the same shape and cells."""
    return first is not None and second is not None and bool(np.array_equal(first, second))


def grid_key(grid: np.ndarray) -> bytes:
    """A hashable key that is equal exactly when two grids are equal (shape and cells)."""
    grid = np.asarray(grid, dtype=GRID_DTYPE)
    return bytes(grid.shape) + grid.tobytes()


def format_grid(grid: np.ndarray, row_separator: str = "\n") -> str:
    """Rows of digits, one line a row (or joined by ``row_separator``): a text view for logs, reprs and prompts."""
    return row_separator.join("".join(str(int(cell)) for cell in row) for row in np.asarray(grid))
