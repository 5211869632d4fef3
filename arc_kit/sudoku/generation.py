"""Generating Sudoku puzzles with unique solutions, seeded, with clue counts like Sudoku 3M's.

``generate_puzzle`` / ``generate_puzzles``: a random full grid from the solver, then clues removed
in random order while the solution stays unique, down to a target clue count drawn from Sudoku
3M's histogram (``SUDOKU_3M_CLUES``) or uniformly from a range; a pass that ends at a minimal
puzzle above the target is retried in a fresh order, so low targets are reached. Puzzle ``i``
comes from the generator seeded ``(seed, i)``. A puzzle is unique by construction: a full grid is, and
each removal is undone unless the solver still finds one solution only.

Needs numpy only; knows nothing of files, augmentations, models or text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import numpy as np

from arc_kit.data.tasks import Pair
from arc_kit.progress import progress_bar
from arc_kit.sudoku.rules import (
    SIZE,
    clue_count,
    count_solutions,
    grid_text,
    random_solution,
)

# Clue counts of Sudoku 3M's 3,000,000 puzzles (Radcliffe's Kaggle set, sudoku-3m.csv), as counted by
# `df.clues.value_counts()` in github.com/ryantran2165/sudoku-difficulty, preliminary_analysis.ipynb
# (mean 24.31, sd 1.10). One random removal pass to a minimal puzzle gives nearly this histogram
# (measured over 600 passes: 21: 0.2%, 22: 3.5%, 23: 19%, 24: 32%, 25: 30%, 26: 12%, 27: 3%).
SUDOKU_3M_CLUES = MappingProxyType({19: 1, 20: 210, 21: 8_204, 22: 115_931, 23: 556_412, 24: 1_058_407,
                                    25: 865_548, 26: 327_826, 27: 61_228, 28: 5_926, 29: 297, 30: 9, 31: 1})
# Removal passes per puzzle before the closest one above the target is kept: a pass reaches 22
# clues about 1 time in 27 and 21 about 1 in 600, so 20 and 19 (1 in 14,000 of Sudoku 3M) usually stop at 21-22.
MAX_PASSES = 200


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


def generate_puzzle(rng: np.random.Generator, clues=SUDOKU_3M_CLUES, max_passes: int = MAX_PASSES) -> Pair:
    """A puzzle with a unique solution (as Pair(puzzle, solution)), its clue count drawn from ``clues`` (a {count:
    weight} histogram, or a (low, high) range drawn uniformly); of at most ``max_passes``, the fewest clues kept."""
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
    return Pair(best.reshape(SIZE, SIZE), solution)


def generate_puzzles(count: int, seed: int = 0, clues=SUDOKU_3M_CLUES, start: int = 0, progress: bool = False,
                     exclude: Iterable[Pair] = ()) -> list[Pair]:
    """``count`` puzzles of the set named by ``seed``, from index ``start`` on; puzzle i is drawn from (seed, i).

    ``exclude``: pairs (another set, say) whose solution grid may not recur; a puzzle on one is skipped
    and the next index taken, so a test set stays disjoint from a training set.
    """

    taken = {grid_text(pair.output) for pair in exclude}
    pairs: list[Pair] = []
    index = start
    with progress_bar(total=count, desc="puzzles", disable=not progress) as bar:
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
    return dict(sorted(Counter(clue_count(pair.input) for pair in pairs).items()))

