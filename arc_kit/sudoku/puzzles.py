"""Sudoku puzzles for the paper's section 5.5: an exact solver, a seeded generator, a CSV loader, augmentations.

A puzzle is a 9x9 grid with 0 for an empty cell; its solution is the filled grid. As a ``tasks.Pair``
the puzzle is the input and the solution the output, so the kit's text format, encoder, DFS and
scoring take puzzles as they take ARC test inputs (with no train pairs: the rules never change).

- ``count_solutions`` / ``solve``: an exact backtracking solver over bit masks (fewest candidates
  first, an explicit stack, no recursion); ``count_solutions(p, 2) == 1`` is the uniqueness check.
- ``generate_puzzle`` / ``generate_puzzles``: a random full grid from the solver, then clues removed
  in random order while the solution stays unique, down to a target clue count drawn from Sudoku
  3M's histogram (``SUDOKU_3M_CLUES``) or uniformly from a range; a pass that ends at a minimal
  puzzle above the target is retried in a fresh order, so low targets are reached. Puzzle ``i``
  comes from the generator seeded ``(seed, i)``. Every puzzle is checked unique.
- ``load_csv`` / ``write_csv``: the Sudoku 3M layout (``puzzle,solution`` as 81-character strings,
  '.' or '0' for an empty cell; other columns are ignored).
- ``SudokuAugmentation``: the symmetries that keep a Sudoku a Sudoku (digits permuted with 0 fixed,
  transposition, bands, rows within a band, stacks, columns within a stack): typed, invertible,
  with a compact key that ``from_key`` parses. It offers the grid/pair methods of
  ``augmentation.Augmentation``, so the solver's sampling and scoring take it as they are.
- ``SudokuPool``: puzzles under fresh augmentations, drawn lazily, as a training pool.

Needs numpy only; knows nothing of models or text.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np

from arc_kit.data.grids import freeze
from arc_kit.data.jsonio import check_regular_file
from arc_kit.data.tasks import Pair

SIZE = 9
ALL_DIGITS = 0b1111111110  # bits 1..9
# Clue counts of Sudoku 3M's 3,000,000 puzzles (Radcliffe's Kaggle set, sudoku-3m.csv), as counted by
# `df.clues.value_counts()` in github.com/ryantran2165/sudoku-difficulty, preliminary_analysis.ipynb
# (mean 24.31, sd 1.10). One random removal pass to a minimal puzzle gives nearly this histogram
# (measured over 600 passes: 21: 0.2%, 22: 3.5%, 23: 19%, 24: 32%, 25: 30%, 26: 12%, 27: 3%).
SUDOKU_3M_CLUES = MappingProxyType({19: 1, 20: 210, 21: 8_204, 22: 115_931, 23: 556_412, 24: 1_058_407,
                                    25: 865_548, 26: 327_826, 27: 61_228, 28: 5_926, 29: 297, 30: 9, 31: 1})
DEFAULT_CLUES = SUDOKU_3M_CLUES
# Removal passes per puzzle before the closest one above the target is kept: a pass reaches 22
# clues about 1 time in 27 and 21 about 1 in 600, so 20 and 19 (1 in 14,000 of Sudoku 3M) usually stop at 21-22.
MAX_PASSES = 200
_BOX = [(row // 3) * 3 + col // 3 for row in range(SIZE) for col in range(SIZE)]


# ---------------------------------------------------------------------------------------------
# Checking.

def _as_grid(grid) -> np.ndarray:
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


# ---------------------------------------------------------------------------------------------
# The exact solver.

def _search(puzzle, limit: int, rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Up to ``limit`` solutions, by backtracking on the cell with the fewest candidates.

    The stack holds (cell, untried digits) for every cell filled by the search; a dead end pops back
    to the latest cell with a digit left. ``rng`` shuffles the order digits are tried in.
    """
    cells = [int(v) for v in _as_grid(puzzle).reshape(-1)]
    rows, columns, boxes = [0] * SIZE, [0] * SIZE, [0] * SIZE
    for index, value in enumerate(cells):
        if value:
            if not 1 <= value <= 9:
                raise ValueError(f"a Sudoku cell holds 0-9, got {value}")
            bit, row, column, box = 1 << value, index // SIZE, index % SIZE, _BOX[index]
            if (rows[row] | columns[column] | boxes[box]) & bit:
                return []  # two equal clues in one unit
            rows[row] |= bit
            columns[column] |= bit
            boxes[box] |= bit
    empty = [index for index, value in enumerate(cells) if not value]

    def place(index: int, value: int, on: bool) -> None:
        bit = 1 << value
        row, column, box = index // SIZE, index % SIZE, _BOX[index]
        rows[row] ^= bit
        columns[column] ^= bit
        boxes[box] ^= bit
        cells[index] = value if on else 0

    def pick() -> tuple[int, list[int]] | None:
        """The empty cell with the fewest candidates and its digits; None when the grid is full."""
        best, best_mask, best_count = -1, 0, 10
        for index in empty:
            if cells[index]:
                continue
            mask = ALL_DIGITS & ~(rows[index // SIZE] | columns[index % SIZE] | boxes[_BOX[index]])
            count = bin(mask).count("1")
            if count < best_count:
                best, best_mask, best_count = index, mask, count
                if count <= 1:
                    break
        if best < 0:
            return None
        digits = [value for value in range(1, 10) if best_mask >> value & 1]
        if rng is not None and len(digits) > 1:
            digits = [digits[i] for i in rng.permutation(len(digits))]
        else:
            digits.reverse()  # popped from the end: 1 is tried first
        return best, digits

    solutions: list[np.ndarray] = []
    stack: list[tuple[int, list[int]]] = []
    frame = pick()
    while True:
        if frame is None:  # full: a solution
            solutions.append(np.array(cells, dtype=np.uint8).reshape(SIZE, SIZE))
            if len(solutions) >= limit:
                break
            frame = (-1, [])
        index, digits = frame
        if digits:
            place(index, digits.pop(), True)
            stack.append((index, digits))
            frame = pick()
            continue
        if not stack:  # every branch tried
            break
        index, digits = stack.pop()
        place(index, cells[index], False)
        frame = (index, digits)
    return solutions


def count_solutions(puzzle, limit: int = 2) -> int:
    """The number of solutions, counting stops at ``limit`` (2 is enough to tell unique from not)."""
    return len(_search(puzzle, limit))


def solve(puzzle) -> np.ndarray | None:
    """The first solution found (digits tried in order), or None when there is none."""
    found = _search(puzzle, 1)
    return freeze(found[0]) if found else None


def has_unique_solution(puzzle) -> bool:
    return count_solutions(puzzle, 2) == 1


# ---------------------------------------------------------------------------------------------
# The generator.

def random_solution(rng: np.random.Generator) -> np.ndarray:
    """A random full Sudoku grid: the solver on an empty grid, digits tried in random order."""
    return _search(np.zeros((SIZE, SIZE), dtype=np.uint8), 1, rng)[0]


def clue_weights(clues) -> dict[int, float]:
    """Target clue counts and their weights: a {count: weight} mapping as given, or a (low, high) range, uniform."""
    if isinstance(clues, Mapping):
        weights = {int(count): float(weight) for count, weight in clues.items() if weight > 0}
    else:
        low, high = clues
        weights = {count: 1.0 for count in range(int(low), int(high) + 1)}
    if not weights or not all(17 <= count <= 81 for count in weights):
        raise ValueError(f"clue counts must lie within 17-81, got {clues}")
    return weights


def _removal_pass(solution: np.ndarray, target: int, rng: np.random.Generator) -> np.ndarray:
    """Clues removed in random order, each kept out only if the solution stays unique, until ``target``
    clues are left or none can go (a minimal puzzle); the flat puzzle."""
    puzzle = solution.copy().reshape(-1)
    count = puzzle.size
    for index in rng.permutation(puzzle.size):
        if count <= target:
            break
        value = puzzle[index]
        puzzle[index] = 0
        if count_solutions(puzzle.reshape(SIZE, SIZE), 2) == 1:
            count -= 1
        else:
            puzzle[index] = value
    return puzzle


def generate_puzzle(rng: np.random.Generator, clues=DEFAULT_CLUES, max_passes: int = MAX_PASSES) -> Pair:
    """A puzzle with a unique solution (as Pair(puzzle, solution)), its clue count drawn from ``clues``.

    ``clues``: a {count: weight} histogram (default: Sudoku 3M's) or a (low, high) range drawn uniformly.
    One random full grid; removal passes (``_removal_pass``) in fresh random orders until one reaches
    the drawn target, at most ``max_passes``; the pass with the fewest clues is kept.
    """
    weights = clue_weights(clues)
    counts = sorted(weights)
    probabilities = np.array([weights[count] for count in counts]) / sum(weights.values())
    target = int(rng.choice(counts, p=probabilities))
    solution = random_solution(rng)
    best = None
    for _ in range(max(1, max_passes)):
        puzzle = _removal_pass(solution, target, rng)
        if best is None or np.count_nonzero(puzzle) < np.count_nonzero(best):
            best = puzzle
        if np.count_nonzero(best) <= target:
            break
    puzzle = best.reshape(SIZE, SIZE)
    if not (has_unique_solution(puzzle) and solves(puzzle, solution)):  # the check every puzzle passes
        raise AssertionError("generated a puzzle without a unique solution")
    return Pair(puzzle, solution)


def generate_puzzles(count: int, seed: int = 0, clues=DEFAULT_CLUES, start: int = 0, progress: bool = False,
                     exclude: Iterable[Pair] = ()) -> list[Pair]:
    """``count`` puzzles of the set named by ``seed``, from index ``start`` on; puzzle i is drawn from (seed, i).

    ``exclude``: pairs (another set, say) whose solution grid may not recur; a puzzle on one is skipped
    and the next index taken, so a test set stays disjoint from a training set.
    """
    from tqdm.auto import tqdm

    taken = {grid_text(pair.output) for pair in exclude}
    pairs: list[Pair] = []
    index = start
    with tqdm(total=count, desc="puzzles", disable=not progress) as bar:
        while len(pairs) < count:
            pair = generate_puzzle(np.random.default_rng((seed, index)), clues)
            index += 1
            if grid_text(pair.output) not in taken:
                pairs.append(pair)
                bar.update(1)
    return pairs


def parse_clues(text: str):
    """'sudoku-3m' as Sudoku 3M's histogram; '19-31' or '25' as a (low, high) range drawn uniformly."""
    if text.strip().lower() in ("sudoku-3m", "sudoku3m", "3m"):
        return dict(SUDOKU_3M_CLUES)
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+))?\s*", text)
    if not match:
        raise ValueError(f"not a clue range: {text!r} (expected like 22-27, or sudoku-3m)")
    low = int(match.group(1))
    clues = (low, int(match.group(2) or low))
    clue_weights(clues)  # the range check
    return clues


def clue_histogram(pairs: Iterable[Pair]) -> dict[int, int]:
    """{clue count: puzzles}, sorted by count."""
    counts: dict[int, int] = {}
    for pair in pairs:
        counts[clue_count(pair.input)] = counts.get(clue_count(pair.input), 0) + 1
    return dict(sorted(counts.items()))


# ---------------------------------------------------------------------------------------------
# Files: the Sudoku 3M layout.

def grid_from_text(text: str) -> np.ndarray:
    """An 81-character string ('.' or '0' for an empty cell) as a 9x9 grid."""
    text = text.strip()
    if len(text) != SIZE * SIZE or any(ch not in ".0123456789" for ch in text):
        raise ValueError(f"a Sudoku is 81 characters of 0-9 or '.', got {text[:30]!r} ({len(text)} characters)")
    return freeze(np.array([0 if ch == "." else int(ch) for ch in text], dtype=np.uint8).reshape(SIZE, SIZE))


def grid_text(grid) -> str:
    return "".join(str(int(cell)) for cell in _as_grid(grid).reshape(-1))


def load_csv(path: str | Path, limit: int | None = None, check: bool = True) -> list[Pair]:
    """Puzzles from a CSV with ``puzzle`` and ``solution`` columns (Sudoku 3M's layout; others ignored).

    ``check``: every solution must solve its puzzle (ValueError naming the row otherwise). What is no
    regular file (a FIFO, a folder) or no CSV text is a ValueError in one line too.
    """
    check_regular_file(path, "CSV file")  # a FIFO would be waited on forever
    with open(path, newline="", encoding="utf-8") as handle:
        try:
            return _read_pairs(csv.DictReader(handle), path, limit, check)
        except csv.Error as error:  # a NUL byte, a field over csv's limit...
            raise ValueError(f"{path}: not a CSV file of puzzles ({error})") from None


def _read_pairs(reader: csv.DictReader, path, limit: int | None, check: bool) -> list[Pair]:
    """The rows of ``load_csv``'s open file."""
    pairs = []
    missing = {"puzzle", "solution"} - set(reader.fieldnames or [])
    if missing:
        raise ValueError(f"{path}: no {' or '.join(sorted(missing))} column (found {reader.fieldnames})")
    for line, row in enumerate(reader, start=2):
        if limit is not None and len(pairs) >= limit:
            break
        puzzle, solution = grid_from_text(row["puzzle"] or ""), grid_from_text(row["solution"] or "")  # short row
        if check and not solves(puzzle, solution):
            raise ValueError(f"{path}, line {line}: the solution does not solve the puzzle")
        pairs.append(Pair(puzzle, solution))
    return pairs


def write_csv(path: str | Path, pairs: Iterable[Pair]) -> Path:
    """Write ``puzzle,solution,clues`` rows (readable by ``load_csv``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["puzzle", "solution", "clues"])
        for pair in pairs:
            writer.writerow([grid_text(pair.input), grid_text(pair.output), clue_count(pair.input)])
    return path


# ---------------------------------------------------------------------------------------------
# Augmentations.

IDENTITY_DIGITS = tuple(range(10))
IDENTITY_LINES = tuple(range(SIZE))
_KEY = re.compile(r"^t([01])-d([0-9]{10})-r([0-8]{9})-c([0-8]{9})$")


def _is_line_permutation(order: tuple[int, ...]) -> bool:
    """True for a permutation of 0-8 that moves whole bands and rows only within a band."""
    if sorted(order) != list(IDENTITY_LINES):
        return False
    return all(len({line // 3 for line in order[band * 3:band * 3 + 3]}) == 1 for band in range(3))


def random_line_permutation(rng: np.random.Generator) -> tuple[int, ...]:
    """Bands in random order, and the three lines of each band in random order."""
    return tuple(int(band * 3 + line) for band in rng.permutation(3) for line in rng.permutation(3))


@dataclass(frozen=True)
class SudokuAugmentation:
    """A digit permutation (0 fixed), an optional transposition, and row and column permutations.

    Applied in that order: ``digits[d]`` is the new digit of ``d``; then the grid is transposed if
    ``transpose``; then new row ``i`` is old row ``rows[i]`` and new column ``j`` old column
    ``columns[j]``. Rows and columns move only as bands/stacks and within them, so every Sudoku
    stays a Sudoku. Key: ``t<0|1>-d<10 digits>-r<9 rows>-c<9 columns>``.
    """

    digits: tuple[int, ...] = IDENTITY_DIGITS
    transpose: bool = False
    rows: tuple[int, ...] = IDENTITY_LINES
    columns: tuple[int, ...] = IDENTITY_LINES

    def __post_init__(self):
        object.__setattr__(self, "digits", tuple(int(d) for d in self.digits))
        object.__setattr__(self, "transpose", bool(self.transpose))
        object.__setattr__(self, "rows", tuple(int(r) for r in self.rows))
        object.__setattr__(self, "columns", tuple(int(c) for c in self.columns))
        if sorted(self.digits) != list(IDENTITY_DIGITS) or self.digits[0] != 0:
            raise ValueError(f"digits must be a permutation of 0-9 that keeps 0, got {self.digits}")
        for name in ("rows", "columns"):
            if not _is_line_permutation(getattr(self, name)):
                raise ValueError(f"{name} must permute bands and lines within bands, got {getattr(self, name)}")
        object.__setattr__(self, "_digit_table", np.array(self.digits, dtype=np.uint8))
        object.__setattr__(self, "_inverse_digits", np.argsort(self.digits).astype(np.uint8))
        object.__setattr__(self, "_inverse_rows", np.argsort(self.rows))
        object.__setattr__(self, "_inverse_columns", np.argsort(self.columns))

    # -- constructors ----------------------------------------------------------------------------
    @classmethod
    def identity(cls) -> SudokuAugmentation:
        return cls()

    @classmethod
    def random(cls, rng: np.random.Generator, *, transpose: bool | None = None) -> SudokuAugmentation:
        """Random digits (0 fixed), bands, rows, stacks, columns; transposition drawn unless given."""
        digits = (0, *(int(d) + 1 for d in rng.permutation(9)))
        if transpose is None:
            transpose = bool(rng.integers(2))
        return cls(digits, transpose, random_line_permutation(rng), random_line_permutation(rng))

    @classmethod
    def inference_set(cls, rng: np.random.Generator, count: int = 8) -> list[SudokuAugmentation]:
        """``count`` views: the identity first, then random ones, transposed every other time."""
        return [cls.identity() if index == 0 else cls.random(rng, transpose=bool(index % 2))
                for index in range(count)]

    @classmethod
    def from_key(cls, key: str) -> SudokuAugmentation:
        """Parse ``t<0|1>-d<10 digits>-r<9 rows>-c<9 columns>`` (the only place keys are parsed)."""
        match = _KEY.match(key.strip())
        if not match:
            raise ValueError(f"not a Sudoku augmentation key: {key!r} "
                             "(expected like 't1-d0312456789-r012345678-c345012678')")
        transpose, digits, rows, columns = match.groups()
        return cls(tuple(map(int, digits)), transpose == "1", tuple(map(int, rows)), tuple(map(int, columns)))

    # -- properties ------------------------------------------------------------------------------
    @property
    def key(self) -> str:
        return (f"t{int(self.transpose)}-d{''.join(map(str, self.digits))}-r{''.join(map(str, self.rows))}"
                f"-c{''.join(map(str, self.columns))}")

    @property
    def is_identity(self) -> bool:
        return self == SudokuAugmentation()

    def __str__(self) -> str:
        return self.key

    # -- grids and pairs -------------------------------------------------------------------------
    def apply_grid(self, grid) -> np.ndarray:
        grid = self._digit_table[_as_grid(grid)]
        if self.transpose:
            grid = grid.T
        return freeze(grid[np.ix_(self.rows, self.columns)])

    def invert_grid(self, grid) -> np.ndarray:
        """Undo apply_grid on a grid in this augmentation's frame (an answer, say)."""
        grid = np.asarray(_as_grid(grid))[np.ix_(self._inverse_rows, self._inverse_columns)]
        if self.transpose:
            grid = grid.T
        return freeze(self._inverse_digits[grid])

    def apply_pair(self, pair: Pair) -> Pair:
        return Pair(self.apply_grid(pair.input), None if pair.output is None else self.apply_grid(pair.output))

    def apply_pairs(self, pairs: Sequence[Pair]) -> list[Pair]:
        """Every pair transformed, order kept (the interface of ``augmentation.Augmentation``)."""
        return [self.apply_pair(pair) for pair in pairs]


class SudokuPool(Sequence):
    """A training pool: ``copies`` views of each puzzle, item i being puzzle ``i % n`` under a fresh
    random ``SudokuAugmentation`` drawn from (seed, i), made when asked for (nothing is stored)."""

    def __init__(self, pairs: Sequence[Pair], copies: int = 1000, seed: int = 0):
        if not pairs:
            raise ValueError("a Sudoku pool needs puzzles")
        self.pairs, self.copies, self.seed = list(pairs), int(copies), int(seed)

    def __len__(self) -> int:
        return len(self.pairs) * self.copies

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        index %= len(self)
        augmentation = SudokuAugmentation.random(np.random.default_rng((self.seed, index)))
        return augmentation.apply_pair(self.pairs[index % len(self.pairs)])
