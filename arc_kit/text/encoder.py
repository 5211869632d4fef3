"""Encoding tasks to token ids and back: prompts, training sequences with loss masks, the token budget, answers.

A ``TaskEncoder`` writes a task in one ``format.TextFormat`` with one ``vocabulary.GridTokenizer``.
Each part of the format is encoded on its own and grids by table lookup, which equals encoding
the whole text whenever every digit is one token (true of both tokenizers the kit has). Train
pairs that do not fit the token budget are dropped (``TextFormat.drop_order``), and generated ids
are read back as ``TextFormat.decoding`` says.

This module needs numpy only; it knows nothing of models or augmentations.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.data.grids import MAX_SIDE
from arc_kit.data.tasks import Pair
from arc_kit.names import shown
from arc_kit.settings import DEFAULT_TOKEN_BUDGET
from arc_kit.text.format import NotAGridError, TextFormat, grid_of_rows, read_grid
from arc_kit.text.vocabulary import GridTokenizer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Encoded:
    """Token ids with a loss mask (True on output tokens) and the train pairs the budget dropped."""

    ids: np.ndarray  # int64, shape (length,)
    loss_mask: np.ndarray  # bool, shape (length,)
    kept: tuple[int, ...]  # indices of the train pairs written, in order
    dropped: tuple[int, ...] = ()  # indices of the train pairs left out to fit the budget

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def labels(self) -> np.ndarray:
        """Labels for a causal LM loss: the ids on output tokens, -100 elsewhere."""
        return np.where(self.loss_mask, self.ids, -100)


class TaskTooLongError(ValueError):
    """Even with every train pair dropped, the test input and the answer room exceed the budget."""


class TaskEncoder:
    """Encodes tasks for training, prompting and scoring, and decodes answers, for one format and tokenizer."""

    def __init__(self, tokenizer: GridTokenizer, text_format: TextFormat = TextFormat(),
                 max_len: int = DEFAULT_TOKEN_BUDGET):
        self.tokenizer = tokenizer
        self.format = text_format
        self.max_len = max_len
        digit_ids = []
        for digit in "0123456789":
            ids = tokenizer.encode(digit)
            if len(ids) != 1:
                raise ValueError(f"the tokenizer writes the digit {digit} as {len(ids)} tokens; grids need one "
                                 "token per digit (shrink the vocabulary first)")
            digit_ids.append(ids[0])
        self.digit_ids = np.array(digit_ids, dtype=np.int64)
        self.bos = np.array([tokenizer.bos_id] if text_format.use_bos else [], dtype=np.int64)
        if text_format.use_bos and tokenizer.bos_id is None:
            raise ValueError("the format starts with bos but the tokenizer has none")
        self.eos_id = int(tokenizer.eos_id)
        encode = lambda text: np.array(tokenizer.encode(text), dtype=np.int64)  # noqa: E731
        self.preprompt = encode(text_format.preprompt)
        self.input_prefix = encode(text_format.input_prefix)
        self.output_prefix = encode(text_format.output_prefix)
        self.row_separator = encode(text_format.row_separator)
        self.end_of_example = encode(text_format.end_of_example)
        self.answer_token_ids = np.unique(np.concatenate(
            [self.digit_ids, self.row_separator, self.end_of_example, [self.eos_id]]))
        self.max_answer_len = len(self.encode_answer(np.zeros((MAX_SIDE, MAX_SIDE), dtype=np.uint8)))
        self._id_to_digit = {int(token): digit for digit, token in enumerate(self.digit_ids)}

    # -- pieces ----------------------------------------------------------------------------------
    def encode_grid(self, grid: np.ndarray) -> np.ndarray:
        """A grid's rows as ids, joined by the row separator (nothing before or after)."""
        grid = np.asarray(grid)
        cells = self.digit_ids[grid]
        if len(self.row_separator) == 0:
            return cells.reshape(-1)
        separators = np.broadcast_to(self.row_separator, (grid.shape[0], len(self.row_separator)))
        return np.concatenate([cells, separators], axis=1).reshape(-1)[:-len(self.row_separator)]

    def encode_answer(self, grid: np.ndarray) -> np.ndarray:
        """What the model writes after the output prefix: rows, end of example, eos."""
        return np.concatenate([self.encode_grid(grid), self.end_of_example, [self.eos_id]])

    def _pair_pieces(self, pair: Pair) -> tuple[np.ndarray, np.ndarray]:
        """(prompt part, output part) of one train pair."""
        return self._query(pair.input), self.encode_answer(pair.output)

    def pair_tokens(self, pair: Pair) -> int:
        """Tokens one train pair takes in a sequence: input, output prefix, output, end, eos."""
        prompt, output = self._pair_pieces(pair)
        return len(prompt) + len(output)

    def _query(self, grid: np.ndarray) -> np.ndarray:
        return np.concatenate([self.input_prefix, self.encode_grid(grid), self.output_prefix])

    # -- budget ----------------------------------------------------------------------------------
    def _fit(self, pair_lengths: Sequence[int], fixed: int, budget: int) -> tuple[list[int], list[int]]:
        """Keep train pairs in order, dropping pairs until ``fixed`` + kept fits the budget.

        ``drop_order`` "last" drops the last pair in the current order first (the authors' rule);
        "longest" drops the longest first (the later one of equal lengths).
        """
        kept = list(range(len(pair_lengths)))
        dropped = []
        while kept and fixed + sum(pair_lengths[i] for i in kept) > budget:
            victim = kept[-1] if self.format.drop_order == "last" else max(kept, key=lambda i: (pair_lengths[i], i))
            kept.remove(victim)
            dropped.append(victim)
        return kept, sorted(dropped)

    # -- whole sequences ---------------------------------------------------------------------------
    def encode_prompt(self, train: Sequence[Pair], test_input: np.ndarray, *, max_len: int | None = None,
                      answer_room: int | None = None, task_id: str = "", log_drops: bool = True) -> Encoded:
        """The generation prompt: pre-prompt, train pairs, test input, output prefix.

        Room for ``answer_room`` tokens (default: the longest possible answer, a 30x30 grid) is
        kept inside ``max_len``; train pairs are dropped (``drop_order``) until it fits. The test
        input is never cut: TaskTooLongError if it cannot fit.
        """
        total = self.max_len if max_len is None else max_len
        room = self.max_answer_len if answer_room is None else answer_room
        budget = total - room
        pieces = [np.concatenate(self._pair_pieces(pair)) for pair in train]
        query = self._query(test_input)
        fixed = len(self.bos) + len(self.preprompt) + len(query)
        if fixed > budget:
            raise TaskTooLongError(f"task {shown(task_id or '?')}: the test input needs {fixed} tokens and the answer "
                                   f"{room} more, over the budget of {total}")
        kept, dropped = self._fit([len(piece) for piece in pieces], fixed, budget)
        if dropped and log_drops:
            logger.warning("task %s: dropped train pair(s) %s of %d to fit %d tokens", shown(task_id or "?"),
                           dropped, len(train), budget)
        ids = np.concatenate([self.bos, self.preprompt, *(pieces[i] for i in kept), query])
        return Encoded(ids, np.zeros(len(ids), dtype=bool), tuple(kept), tuple(dropped))

    def encode_training(self, pairs: Sequence[Pair], *, mask_first_output: bool = True,
                        max_len: int | None = None) -> Encoded:
        """A training sequence of pairs (the last one plays the test); loss on outputs only.

        ``mask_first_output`` leaves the first written output out of the loss: it cannot be
        predicted without an example. Earlier pairs are dropped (``drop_order``) to fit ``max_len``;
        the last pair is always kept (TaskTooLongError if it alone does not fit).
        """
        if not pairs:
            raise ValueError("a training sequence needs at least one pair")
        budget = self.max_len if max_len is None else max_len
        pieces = [self._pair_pieces(pair) for pair in pairs]
        lengths = [len(a) + len(b) for a, b in pieces]
        fixed = len(self.bos) + len(self.preprompt) + lengths[-1]
        if fixed > budget:
            raise TaskTooLongError(f"the last pair alone needs {fixed} tokens, over the budget of {budget}")
        kept, dropped = self._fit(lengths[:-1], fixed, budget)
        kept.append(len(pairs) - 1)
        ids = [self.bos, self.preprompt]
        mask = [np.zeros(len(self.bos) + len(self.preprompt), dtype=bool)]
        for position, index in enumerate(kept):
            prompt, output = pieces[index]
            ids += [prompt, output]
            mask += [np.zeros(len(prompt), dtype=bool),
                     np.full(len(output), not (mask_first_output and position == 0), dtype=bool)]
        return Encoded(np.concatenate(ids), np.concatenate(mask), tuple(kept), tuple(dropped))

    # -- decoding ----------------------------------------------------------------------------------
    def decode_answer(self, ids: Sequence[int]) -> np.ndarray:
        """The grid spelled by generated ids; NotAGridError says why not. ``format.decoding`` says how.

        ``authors``: the ids up to and including the first eos (all of them without one) as text,
        read by ``read_grid``, the authors' rule. ``strict``: ``decode_strict``.
        """
        if self.format.decoding == "strict":
            return self.decode_strict(ids)
        ids = [int(i) for i in ids]
        if self.eos_id in ids:
            ids = ids[:ids.index(self.eos_id) + 1]
        return read_grid(self.tokenizer.decode(ids), self.format.row_separator)

    def decode_strict(self, ids: Sequence[int]) -> np.ndarray:
        """The grid spelled by generated ids up to eos, read strictly (the kit's earlier rule).

        The ids before eos (which must be there), less a closing end of example if there is one,
        split at the row separators; empty rows are skipped. What is left must be digits only: any
        other token refuses the answer. At least one row, all of one width, at most 30x30.
        """
        ids = [int(i) for i in ids]
        if self.eos_id not in ids:
            raise NotAGridError("no end: the answer has no eos token")
        ids = ids[:ids.index(self.eos_id)]
        end = [int(i) for i in self.end_of_example]
        if end and ids[len(ids) - len(end):] == end:
            ids = ids[:len(ids) - len(end)]
        return grid_of_rows(self._digit_rows(ids), "an empty answer: no digit before eos")

    def _digit_rows(self, ids: list[int]) -> list[list[int]]:
        """The digits of ``ids`` split at the row separators, empty rows skipped; NotAGridError on any other id."""
        separator = [int(i) for i in self.row_separator]
        rows, row, position = [], [], 0
        while position < len(ids):
            if ids[position:position + len(separator)] == separator:
                if row:  # an empty row (two separators in a row, or one at the end) is skipped
                    rows.append(row)
                row, position = [], position + len(separator)
                continue
            digit = self._id_to_digit.get(ids[position])
            if digit is None:
                text = self.tokenizer.decode([ids[position]])
                raise NotAGridError(f"a non-digit {text!r} in row {len(rows)}")
            row.append(digit)
            position += 1
        if row:
            rows.append(row)
        return rows

    def text(self, ids: Sequence[int]) -> str:
        """The ids as text, special tokens spelled out (for looking at)."""
        return self.tokenizer.decode([int(i) for i in ids])
