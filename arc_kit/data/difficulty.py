"""RE-ARC's difficulty of a generated example, recomputed from its grids, and leaving out the easiest examples.

The authors' initial fine-tune drops the easiest half of each RE-ARC task's examples
(``remove_easiest=0.5`` in finetune_NemoReArc1200.py; ``load_from_rearc`` in arc_loader.py sorts by
``pso_difficulties`` from RE-ARC's ``metadata.json``). Our RE-ARC has no ``metadata.json``, so the
difficulty is recomputed here by RE-ARC's own formula (``get_pso_difficulty`` in michaelhodel/re-arc
main.py, commit b9c7432): the mean of three shares,

- pixels: the input's and output's cells together over 1800 (two 30x30 grids),
- symbols: the colours present in input or output over 10,
- objects: the density of objects, each grid's count of 4-connected single-colour regions
  (background included: ``objects(grid, T, F, F)``) over its cells, averaged over the two grids.

Not checked against a real ``metadata.json`` (none here); the formula is the one the generator wrote
it with. Needs numpy only; knows nothing of sequences or models.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from arc_kit.data.tasks import Pair


def region_count(grid: np.ndarray) -> int:
    """How many 4-connected regions of one colour the grid holds (each cell is in exactly one).

    Labels start as cell indices; each round every pair of equal neighbours takes the smaller label
    of the two and every label then jumps to its label's label, until nothing changes. The labels
    then name one cell per region.
    """
    grid = np.asarray(grid)
    height, width = grid.shape
    index = np.arange(height * width).reshape(height, width)
    across = grid[:, 1:] == grid[:, :-1]
    down = grid[1:, :] == grid[:-1, :]
    first = np.concatenate([index[:, :-1][across], index[:-1, :][down]])
    second = np.concatenate([index[:, 1:][across], index[1:, :][down]])
    labels = np.arange(height * width)
    while True:
        smaller = np.minimum(labels[first], labels[second])
        updated = labels.copy()
        np.minimum.at(updated, first, smaller)
        np.minimum.at(updated, second, smaller)
        updated = updated[updated]  # jump: a label's label is in the same region and no larger
        if np.array_equal(updated, labels):
            return int(len(np.unique(labels)))
        labels = updated


def pso_difficulty(pair: Pair) -> float:
    """RE-ARC's PSO difficulty of one example: (pixels + symbols + objects) / 3, each a share (module docstring)."""
    grid_in, grid_out = np.asarray(pair.input), np.asarray(pair.output)
    pixels = (grid_in.size + grid_out.size) / 1800
    symbols = len(np.union1d(np.unique(grid_in), np.unique(grid_out))) / 10
    objects = (region_count(grid_in) / grid_in.size + region_count(grid_out) / grid_out.size) / 2
    return (pixels + symbols + objects) / 3


def drop_easiest(pool: Sequence[Pair], share: float) -> tuple[Pair, ...]:
    """The pool without its easiest ``share`` by ``pso_difficulty``, hardest last, as the authors sort.

    Their ``load_from_rearc``: a stable sort by difficulty, then the first ``int(len * share)`` left
    out. The examples kept come in that order (the sampler shuffles them anyway).
    """
    if not 0 <= share < 1:
        raise ValueError(f"the share to drop must be in [0, 1), got {share}")
    if share == 0:
        return tuple(pool)
    order = np.argsort([pso_difficulty(pair) for pair in pool], kind="stable")
    return tuple(pool[int(i)] for i in order[int(len(pool) * share):])
