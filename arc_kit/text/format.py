"""The text format of tasks: how a task is written as text, and how an answer's text is read back.

The default ``TextFormat`` is the one the method's authors trained their released models with (their
code, da-fr/Product-of-Experts-ARC-Paper, is in the sources of ``docs/method.md``)::

    <bos>ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjklmnpqrstuvwxyz     pre-prompt, once
    I012\\n345\\n+/-=O678\\n901\\n<eos>                           a train pair
    I...\\n+/-=O                                              the test input; the model writes
                                                             the output rows, "\\n" and <eos>

A grid's rows are joined by the row separator ``\\n``; the output prefix ``\\n+/-=O`` closes the
input's last row and the end of example ``\\n`` closes the output's, so every row is followed by
exactly one newline. The loss mask covers each output's rows, its closing newline and the eos.

A task longer than the token budget loses train pairs (``TextFormat.drop_order``); an answer is read
back as ``TextFormat.decoding`` says: by the authors' lenient rule (``read_grid``) or the kit's earlier
strict one (``encoder.TaskEncoder.decode_strict``).

This module needs numpy only; it knows nothing of token ids (``vocabulary``, ``encoder``), models or
augmentations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.data.grids import MAX_SIDE, format_grid, freeze
from arc_kit.data.tasks import Pair
from arc_kit.settings import DECODING_MODES

PREPROMPT = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjklmnpqrstuvwxyz"  # A-Z, a-z without I, O, i, o
DROP_ORDERS = ("last", "longest")  # which train pair goes first when a task is over the token budget


@dataclass(frozen=True)
class TextFormat:
    """How a task is written as text; the defaults reproduce the authors' released models."""

    preprompt: str = PREPROMPT  # learned "buffer" tokens at the start, once (the paper's pre-prompt)
    input_prefix: str = "I"  # opens every input grid
    output_prefix: str = "\n+/-=O"  # closes the input's last row and opens the output grid
    row_separator: str = "\n"  # between the rows of a grid
    end_of_example: str = "\n"  # closes the output's last row; the eos token follows
    use_bos: bool = True  # start every sequence with the tokenizer's bos token
    drop_order: str = "last"  # too long: drop train pairs from the end (the authors), or "longest" first
    decoding: str = "authors"  # how an answer's tokens are read back: the authors' lenient rule, or "strict"

    def __post_init__(self):
        if self.drop_order not in DROP_ORDERS:
            raise ValueError(f"drop_order must be one of {DROP_ORDERS}, got {self.drop_order!r}")
        if self.decoding not in DECODING_MODES:
            raise ValueError(f"decoding must be one of {DECODING_MODES}, got {self.decoding!r}")
        if not self.row_separator or any(ch.isdigit() for ch in self.row_separator):
            raise ValueError("row_separator must be non-empty and hold no digit")
        if any(ch.isdigit() for ch in self.end_of_example + self.output_prefix + self.input_prefix):
            raise ValueError("prefixes and the end of example must hold no digit")

    def grid_text(self, grid: np.ndarray) -> str:
        return format_grid(grid, self.row_separator)

    def task_text(self, train: Sequence[Pair], test_input: np.ndarray | None = None, answer: np.ndarray | None = None,
                  bos: str = "<bos>", eos: str = "<eos>") -> str:
        """The whole text, with the special tokens spelled out: for reading, not for encoding."""
        parts = [bos if self.use_bos else "", self.preprompt]
        for pair in train:
            parts += [self.input_prefix, self.grid_text(pair.input), self.output_prefix,
                      self.grid_text(pair.output), self.end_of_example, eos]
        if test_input is not None:
            parts += [self.input_prefix, self.grid_text(test_input), self.output_prefix]
            if answer is not None:
                parts += [self.grid_text(answer), self.end_of_example, eos]
        return "".join(parts)


class NotAGridError(ValueError):
    """Generated tokens that do not spell a grid; the message says why."""


def read_grid(text: str, row_separator: str = "\n") -> np.ndarray:
    """The grid in an answer's text, read as the authors read it; NotAGridError says why there is none.

    Their rule (``ArcDataset.decode`` in arc_loader.py, da-fr/Product-of-Experts-ARC-Paper@82619f6,
    lines 371-394): split the text at the row separator; in each row keep the characters that
    ``str.isdigit`` accepts, as ``int``; drop the rows left empty; what remains must be rectangular
    with 1-30 rows and columns. Letters, markers and special tokens in a row are ignored, and no
    end token is needed. A character that ``isdigit`` accepts but ``int`` does not (``"²"``) fails
    the whole answer, as theirs does.
    """
    try:
        rows = [[int(character) for character in row if character.isdigit()] for row in text.split(row_separator)]
    except ValueError:
        raise NotAGridError(f"a digit that is not a number in {text[:40]!r}") from None
    return grid_of_rows([row for row in rows if row], "an empty answer: no digit")


def grid_of_rows(rows: list[list[int]], empty: str) -> np.ndarray:
    """The grid of ``rows`` of digits; NotAGridError when there are none (``empty``), they are ragged or over 30."""
    if not rows:
        raise NotAGridError(empty)
    if len({len(row) for row in rows}) > 1:
        raise NotAGridError(f"ragged rows: widths {[len(row) for row in rows]}")
    if len(rows) > MAX_SIDE or len(rows[0]) > MAX_SIDE:
        raise NotAGridError(f"{len(rows)}x{len(rows[0])} is larger than {MAX_SIDE}x{MAX_SIDE}")
    return freeze(np.array(rows, dtype=np.uint8))
