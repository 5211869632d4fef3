"""Augmentations: a symmetry of the square, a colour permutation and an order of the train pairs.

An ``Augmentation`` is a small, typed, hashable value. It applies to grids and tasks (every grid,
inputs and outputs alike, and it reorders the train pairs), inverts on an answer grid, and has a
compact text key (``s5-c3012456789-o2,0,1``) that ``Augmentation.from_key`` parses; nothing else
parses keys. Random augmentations come only from an explicit ``numpy.random.Generator``.

This module needs numpy only; it knows nothing of text, models or files.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.data.grids import COLOURS, freeze
from arc_kit.data.pictures import augmentation_html
from arc_kit.data.tasks import Pair, Task
from arc_kit.settings import SolveSettings

SYMMETRY_NAMES = ("identity", "rot90", "rot180", "rot270",
                  "transpose", "transpose+rot90", "transpose+rot180", "transpose+rot270")
IDENTITY_COLOURS = tuple(range(COLOURS))


def apply_symmetry(grid: np.ndarray, symmetry: int) -> np.ndarray:
    """One of the 8 symmetries of the square: optionally transpose, then rotate 90 degrees k times."""
    if not 0 <= symmetry < 8:
        raise ValueError(f"symmetry must be 0-7, got {symmetry}")
    grid = np.asarray(grid)
    if symmetry >= 4:
        grid = grid.T
    return np.rot90(grid, k=symmetry % 4)


# k quarter turns are undone by 4 - k; a transpose, then turns, is a reflection: its own inverse
SYMMETRY_INVERSE = (0, 3, 2, 1, 4, 5, 6, 7)


def balanced_symmetries(rng: np.random.Generator, count: int) -> list[int]:
    """``count`` symmetries, each of the 8 used ``count // 8`` or ``count // 8 + 1`` times.

    The authors' test-time training uses each symmetry exactly 8 times in its 64 sequences. Every
    consecutive block of 8 is a fresh random order of all 8 (the last block cut short), so any
    prefix is as even as it can be too: a run stopped early is balanced up to its last block.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return [int(symmetry) for _ in range(-(-count // 8)) for symmetry in rng.permutation(8)][:count]


# the order may be empty ("-o"): Augmentation.random(rng, 0) gives order=(), whose key must parse too
_KEY = re.compile(r"^s([0-7])-c([0-9]{10})(?:-o((?:[0-9]+(?:,[0-9]+)*)?))?$")


@dataclass(frozen=True)
class Augmentation:
    """A symmetry (0-7, see SYMMETRY_NAMES), a colour permutation and an optional train-pair order.

    ``colours[c]`` is the new colour of colour ``c``; ``order[i]`` is the index of the original
    train pair that comes ``i``-th (None keeps the order and fits any number of pairs).
    """

    symmetry: int = 0
    colours: tuple[int, ...] = IDENTITY_COLOURS
    order: tuple[int, ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "symmetry", int(self.symmetry))
        object.__setattr__(self, "colours", tuple(int(c) for c in self.colours))
        if not 0 <= self.symmetry < 8:
            raise ValueError(f"symmetry must be 0-7, got {self.symmetry}")
        if sorted(self.colours) != list(IDENTITY_COLOURS):
            raise ValueError(f"colours must be a permutation of 0-9, got {self.colours}")
        if self.order is not None:
            order = tuple(int(i) for i in self.order)
            if sorted(order) != list(range(len(order))):
                raise ValueError(f"order must be a permutation of 0..{len(order) - 1}, got {order}")
            object.__setattr__(self, "order", order)
        object.__setattr__(self, "_colour_table", np.array(self.colours, dtype=np.uint8))
        object.__setattr__(self, "_inverse_table", np.argsort(self.colours).astype(np.uint8))

    @classmethod
    def random(cls, rng: np.random.Generator, train_count: int | None = None, *, symmetry: int | None = None,
               keep_background: bool = False) -> Augmentation:
        """A random symmetry (unless given), colour permutation and (if ``train_count``) order, drawn in that order.

        keep_background: colour 0 stays 0 and only 1-9 are permuted.
        """
        symmetry = int(rng.integers(8)) if symmetry is None else symmetry
        colours = (0, *(rng.permutation(COLOURS - 1) + 1)) if keep_background else rng.permutation(COLOURS)
        return cls(symmetry, colours, None if train_count is None else rng.permutation(train_count))

    @classmethod
    def inference_set(cls, rng: np.random.Generator, train_count: int | None = None,
                      count: int = SolveSettings().inference_augmentations, *,
                      keep_background: bool = False) -> list[Augmentation]:
        """The paper's set: symmetries 0..7 in turn (each twice for 16), fresh colours and order each time."""
        return [cls.random(rng, train_count, symmetry=index % 8, keep_background=keep_background)
                for index in range(count)]

    @classmethod
    def from_key(cls, key: str) -> Augmentation:
        """Parse ``s<symmetry>-c<10 colours>[-o<i,j,...>]`` (the only place keys are parsed)."""
        match = _KEY.match(key.strip())
        if not match:
            raise ValueError(f"not an augmentation key: {key!r} (expected like 's5-c3012456789-o2,0,1')")
        symmetry, colours, order = match.groups()
        return cls(int(symmetry), tuple(int(c) for c in colours),
                   None if order is None else tuple(int(i) for i in order.split(",") if i))

    @property
    def key(self) -> str:
        key = f"s{self.symmetry}-c{''.join(map(str, self.colours))}"
        return key if self.order is None else key + "-o" + ",".join(map(str, self.order))

    @property
    def symmetry_name(self) -> str:
        """The symmetry's name (``SYMMETRY_NAMES``): identity, rot90, ..., transpose+rot270."""
        return SYMMETRY_NAMES[self.symmetry]

    @property
    def name(self) -> str:
        """The whole augmentation in words: ``rot90, colours 3012456789`` (colour c becomes the c-th digit), then the
        train pairs' order when it has one."""
        colours = "unchanged" if self.colours == IDENTITY_COLOURS else "".join(map(str, self.colours))
        return f"{self.symmetry_name}, colours {colours}" + ("" if self.order is None else
                                                             f", order {','.join(map(str, self.order))}")

    def __str__(self) -> str:
        return self.key

    def __repr__(self) -> str:
        return f"Augmentation({SYMMETRY_NAMES[self.symmetry]}, colours={''.join(map(str, self.colours))}" + \
            ("" if self.order is None else f", order={list(self.order)}") + ")"

    def _repr_html_(self) -> str:
        """Jupyter's picture: the symmetry on an example grid, the colour map as swatches, the order."""
        return augmentation_html(self)

    def apply_grid(self, grid: np.ndarray) -> np.ndarray:
        return freeze(apply_symmetry(self._colour_table[np.asarray(grid)], self.symmetry))

    def invert_grid(self, grid: np.ndarray) -> np.ndarray:
        """Undo apply_grid on a grid in this augmentation's frame (an answer, say)."""
        return freeze(self._inverse_table[apply_symmetry(np.asarray(grid), SYMMETRY_INVERSE[self.symmetry])])

    def reorder(self, items: Sequence) -> list:
        if self.order is None:
            return list(items)
        if len(self.order) != len(items):
            raise ValueError(f"augmentation {self.key} orders {len(self.order)} pairs, the task has {len(items)}")
        return [items[i] for i in self.order]

    def apply_pair(self, pair: Pair) -> Pair:
        return Pair(self.apply_grid(pair.input), None if pair.output is None else self.apply_grid(pair.output))

    def apply_pairs(self, pairs: Sequence[Pair]) -> list[Pair]:
        """Reorder (if this augmentation has an order) and transform every grid."""
        return [self.apply_pair(pair) for pair in self.reorder(pairs)]

    def apply(self, task: Task) -> Task:
        """The task as this augmentation sees it: train pairs reordered, every grid transformed."""
        return Task(task.id, tuple(self.apply_pairs(task.train)), tuple(self.apply_pair(p) for p in task.test))
