"""Sudoku puzzles as files, augmentations and a training pool, for the paper's section 5.5.

A puzzle is a 9x9 grid with 0 for an empty cell; its solution is the filled grid. As a ``tasks.Pair``
the puzzle is the input and the solution the output, so the kit's text format, encoder, DFS and
scoring take puzzles as they take ARC test inputs (with no train pairs: the rules never change).

- ``load_csv`` / ``write_csv``: the Sudoku 3M layout (``puzzle,solution`` as 81-character strings,
  '.' or '0' for an empty cell; other columns are ignored).
- ``SudokuAugmentation``: the symmetries that keep a Sudoku a Sudoku, typed, invertible, with a key;
  its digits and transposition are an ``augmentation.Augmentation``, whose grid and pair methods it
  shares, so the solver's sampling and scoring take it as they are.
- ``SudokuPool``: puzzles under fresh augmentations, drawn lazily, as a training pool.

Needs numpy only; knows nothing of models or text.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.grids import freeze
from arc_kit.data.jsonio import check_regular_file
from arc_kit.data.tasks import Pair
from arc_kit.names import listed, shown
from arc_kit.outputs import replacing
from arc_kit.sudoku.rules import SIZE, as_grid, clue_count, grid_from_text, grid_text, solves
from arc_kit.text.format import NotAGridError


# ---------------------------------------------------------------------------------------------
# Files: the Sudoku 3M layout.

def load_csv(path: str | Path, limit: int | None = None, check: bool = True) -> list[Pair]:
    """Puzzles from a CSV with ``puzzle`` and ``solution`` columns (Sudoku 3M's layout; others ignored).

    ``check``: every solution must solve its puzzle (ValueError naming the row otherwise). What is no
    regular file (a FIFO, a folder) or no CSV text is a ValueError in one line too.
    """
    check_regular_file(path, "CSV file")  # a FIFO would be waited on forever
    pairs = []
    with open(path, newline="", encoding="utf-8") as handle:
        try:
            reader = csv.DictReader(handle)
            missing = {"puzzle", "solution"} - set(reader.fieldnames or [])
            if missing:
                raise ValueError(f"{path}: no {' or '.join(sorted(missing))} column (found "
                                 f"{listed(map(shown, reader.fieldnames or []), 100) or 'none'})")
            for line, row in itertools.islice(enumerate(reader, start=2), limit):
                puzzle, solution = grid_from_text(row["puzzle"] or ""), grid_from_text(row["solution"] or "")
                if check and not solves(puzzle, solution):  # (a short row's missing cells read as "")
                    raise ValueError(f"{path}, line {line}: the solution does not solve the puzzle")
                pairs.append(Pair(puzzle, solution))
        except csv.Error as error:  # a NUL byte, a field over csv's limit...
            raise ValueError(f"{path}: not a CSV file of puzzles ({error})") from None
    return pairs


def write_csv(path: str | Path, pairs: Iterable[Pair]) -> Path:
    """Write ``puzzle,solution,clues`` rows (readable by ``load_csv``)."""
    path = Path(path)
    with replacing(path, newline="") as handle:  # written aside, renamed into place: never through a link
        writer = csv.writer(handle)
        writer.writerow(["puzzle", "solution", "clues"])
        for pair in pairs:
            writer.writerow([grid_text(pair.input), grid_text(pair.output), clue_count(pair.input)])
    return path


# ---------------------------------------------------------------------------------------------
# Augmentations.

LINES = tuple(range(SIZE))
_KEY = re.compile(r"^t([01])-d([0-9]{10})-r([0-8]{9})-c([0-8]{9})$")


def _is_line_permutation(order: tuple[int, ...]) -> bool:
    """True for a permutation of 0-8 that moves whole bands and rows only within a band."""
    return sorted(order) == list(LINES) and all(len({line // 3 for line in order[band * 3:band * 3 + 3]}) == 1
                                                for band in range(3))


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

    digits: tuple[int, ...] = tuple(range(10))
    transpose: bool = False
    rows: tuple[int, ...] = LINES
    columns: tuple[int, ...] = LINES

    def __post_init__(self):
        if sorted(self.digits) != list(range(10)) or self.digits[0] != 0:
            raise ValueError(f"digits must be a permutation of 0-9 that keeps 0, got {self.digits}")
        for name in ("rows", "columns"):
            if not _is_line_permutation(getattr(self, name)):
                raise ValueError(f"{name} must permute bands and lines within bands, got {getattr(self, name)}")
        # the digits and the transposition: a colour permutation and symmetry 4 (the transpose)
        object.__setattr__(self, "_square", Augmentation(4 if self.transpose else 0, self.digits))

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
        return [cls() if index == 0 else cls.random(rng, transpose=bool(index % 2))
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

    @property
    def key(self) -> str:
        return (f"t{int(self.transpose)}-d{''.join(map(str, self.digits))}-r{''.join(map(str, self.rows))}"
                f"-c{''.join(map(str, self.columns))}")

    def __str__(self) -> str:
        return self.key

    def apply_grid(self, grid) -> np.ndarray:
        return freeze(self._square.apply_grid(as_grid(grid))[np.ix_(self.rows, self.columns)])

    def invert_grid(self, grid) -> np.ndarray:
        """Undo apply_grid on a grid in this augmentation's frame (an answer, say); an answer that is no 9x9 grid
        is no Sudoku answer (``NotAGridError``, as the solver counts an answer that reads as no grid)."""
        if np.shape(grid) != (SIZE, SIZE):
            raise NotAGridError(f"a Sudoku answer is 9x9, got {'x'.join(map(str, np.shape(grid)))}")
        return self._square.invert_grid(as_grid(grid)[np.ix_(np.argsort(self.rows), np.argsort(self.columns))])

    apply_pair = Augmentation.apply_pair  # both grids (the output where there is one) through apply_grid

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

    def __getitem__(self, index: int) -> Pair:
        if not 0 <= index < len(self):  # (the trainer asks by position; iteration ends at the IndexError)
            raise IndexError(index)
        augmentation = SudokuAugmentation.random(np.random.default_rng((self.seed, int(index))))
        return augmentation.apply_pair(self.pairs[index % len(self.pairs)])
