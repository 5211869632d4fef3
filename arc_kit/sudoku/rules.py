"""The rules of Sudoku: 9x9 grids, what solves a puzzle, and an exact solver that counts solutions.

A puzzle is a 9x9 grid with 0 for an empty cell; its solution is the filled grid.
``count_solutions`` / ``solve``: an exact backtracking solver over bit masks (fewest candidates
first, an explicit stack, no recursion); ``count_solutions(p, 2) == 1`` is the uniqueness check.

Needs numpy only; knows nothing of generating puzzles, files, augmentations, models or text.
"""

from __future__ import annotations

import numpy as np

from arc_kit.data.grids import freeze

SIZE = 9
ALL_DIGITS = 0b1111111110  # bits 1..9
_UNITS = [(row, SIZE + column, 2 * SIZE + row // 3 * 3 + column // 3) for row in range(SIZE) for column in range(SIZE)]


# ---------------------------------------------------------------------------------------------
# Grids and checking.

def as_grid(grid) -> np.ndarray:
    """The grid as an array; ValueError unless it is 9x9."""
    grid = np.asarray(grid)
    if grid.shape != (SIZE, SIZE):
        raise ValueError(f"a Sudoku grid is 9x9, got {'x'.join(map(str, grid.shape))}")
    return grid


def is_valid_solution(grid) -> bool:
    """True when the grid is 9x9 and every row, column and box holds the digits 1-9 once."""
    grid = np.asarray(grid)
    if grid.shape != (SIZE, SIZE):
        return False
    digits = set(range(1, 10))
    boxes = grid.reshape(3, 3, 3, 3).transpose(0, 2, 1, 3).reshape(SIZE, SIZE)
    return all(set(map(int, line)) == digits for part in (grid, grid.T, boxes) for line in part)


def keeps_clues(puzzle, grid) -> bool:
    """True when the grid has the puzzle's shape and agrees with every clue."""
    puzzle, grid = np.asarray(puzzle), np.asarray(grid)
    return grid.shape == puzzle.shape and bool(np.all((puzzle == 0) | (puzzle == grid)))


def solves(puzzle, grid) -> bool:
    """True when the grid is a valid Sudoku that keeps the puzzle's clues (for a unique puzzle: its solution)."""
    return is_valid_solution(grid) and keeps_clues(puzzle, grid)


def score_answer(puzzle, answer) -> float:
    """1.0 for an answer that solves the puzzle, else 0.0 (the top-1 score of one attempt)."""
    return 1.0 if answer is not None and solves(puzzle, answer) else 0.0


def clue_count(puzzle) -> int:
    return int(np.count_nonzero(np.asarray(puzzle)))


def grid_from_text(text: str) -> np.ndarray:
    """An 81-character string ('.' or '0' for an empty cell) as a 9x9 grid."""
    text = text.strip()
    if len(text) != SIZE * SIZE or any(ch not in ".0123456789" for ch in text):
        raise ValueError(f"a Sudoku is 81 characters of 0-9 or '.', got {text[:30]!r} ({len(text)} characters)")
    return freeze(np.array([0 if ch == "." else int(ch) for ch in text], dtype=np.uint8).reshape(SIZE, SIZE))


def grid_text(grid) -> str:
    return "".join(str(int(cell)) for cell in as_grid(grid).reshape(-1))


# ---------------------------------------------------------------------------------------------
# The exact solver.

class _Board:
    """A puzzle being filled: its 81 cells, and for each unit (9 rows, 9 columns, 9 boxes) a bit mask of its digits."""

    def __init__(self, puzzle):
        """The board of a puzzle's clues; ``clash`` when two equal clues share a unit (no solution then)."""
        clues = [int(value) for value in as_grid(puzzle).reshape(-1)]
        self.cells, self.units = [0] * len(clues), [0] * 3 * SIZE
        self.empty = [index for index, value in enumerate(clues) if not value]
        for index, value in enumerate(clues):
            if value:
                if not 1 <= value <= 9:
                    raise ValueError(f"a Sudoku cell holds 0-9, got {value}")
                self.set(index, value)
        # each clue toggles its bit in 3 units, so a digit twice in a unit leaves that unit a bit short
        self.clash = sum(bin(unit).count("1") for unit in self.units) < 3 * (len(clues) - len(self.empty))

    def set(self, index: int, value: int) -> None:
        """The cell set to ``value`` (0: cleared), its units' bits toggled to match."""
        bit = 1 << (value or self.cells[index])
        for unit in _UNITS[index]:
            self.units[unit] ^= bit
        self.cells[index] = value

    def pick(self, rng: np.random.Generator | None) -> tuple[int, list[int]] | None:
        """The empty cell with the fewest candidates and its digits (the last tried first); None when it is full."""
        best, best_mask, best_count, cells, units = -1, 0, 10, self.cells, self.units
        for index in self.empty:
            if cells[index]:
                continue
            row, column, box = _UNITS[index]  # the digits in its units: the solver's innermost loop
            mask = ALL_DIGITS & ~(units[row] | units[column] | units[box])
            count = bin(mask).count("1")
            if count < best_count:
                best, best_mask, best_count = index, mask, count
                if count <= 1:
                    break
        if best < 0:
            return None
        digits = [value for value in range(1, 10) if best_mask >> value & 1]
        if rng is not None and len(digits) > 1:
            return best, [digits[i] for i in rng.permutation(len(digits))]
        return best, digits[::-1]  # popped from the end: 1 is tried first


def _search(puzzle, limit: int, rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Up to ``limit`` solutions, by backtracking on the cell with the fewest candidates.

    The stack holds (cell, untried digits) for every cell filled by the search; a dead end pops back
    to the latest cell with a digit left. ``rng`` shuffles the order digits are tried in.
    """
    board = _Board(puzzle)
    if board.clash:
        return []
    solutions: list[np.ndarray] = []
    stack: list[tuple[int, list[int]]] = []
    frame = board.pick(rng)
    while True:
        if frame is None:  # full: a solution
            solutions.append(np.array(board.cells, dtype=np.uint8).reshape(SIZE, SIZE))
            if len(solutions) >= limit:
                break
            frame = (-1, [])
        index, digits = frame
        if digits:
            board.set(index, digits.pop())
            stack.append((index, digits))
            frame = board.pick(rng)
            continue
        if not stack:  # every branch tried
            break
        index, digits = stack.pop()
        board.set(index, 0)
        frame = (index, digits)
    return solutions


def count_solutions(puzzle, limit: int = 2) -> int:
    """The number of solutions, counting stops at ``limit`` (2 is enough to tell unique from not)."""
    return len(_search(puzzle, limit))


def solve(puzzle) -> np.ndarray | None:
    """The first solution found (digits tried in order), or None when there is none."""
    found = _search(puzzle, 1)
    return freeze(found[0]) if found else None


def random_solution(rng: np.random.Generator) -> np.ndarray:
    """A random full Sudoku grid: the solver on an empty grid, digits tried in random order."""
    return _search(np.zeros((SIZE, SIZE), dtype=np.uint8), 1, rng)[0]

