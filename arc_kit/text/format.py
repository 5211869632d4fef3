"""The text format of tasks, the 64-symbol vocabulary, and encoding tasks to token ids and back.

The default ``TextFormat`` is the one the method's authors trained their released models with
(``../shared/docs/method-notes.md``)::

    <bos>ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjklmnpqrstuvwxyz     pre-prompt, once
    I012\\n345\\n+/-=O678\\n901\\n<eos>                           a train pair
    I...\\n+/-=O                                              the test input; the model writes
                                                             the output rows, "\\n" and <eos>

A grid's rows are joined by the row separator ``\\n``; the output prefix ``\\n+/-=O`` closes the
input's last row and the end of example ``\\n`` closes the output's, so every row is followed by
exactly one newline. The loss mask covers each output's rows, its closing newline and the eos.

A task longer than the token budget loses train pairs: by default the last one in the current
order first, as the authors did (``TextFormat.drop_order = "longest"`` drops the longest first).
An answer is read as ``TextFormat.decoding`` says (``TaskEncoder.decode_answer``): ``authors``, the
authors' decoder (``read_grid``): the text up to the first eos (all of it without one) split at the
row separators, every non-digit character dropped, empty rows skipped; ``strict``, the kit's earlier
rule: digits and row separators only, up to an eos that must be there.

Token ids come from a ``GridTokenizer``: the fixed ``Vocabulary`` of 64 symbols used by models
trained from scratch, or ``HuggingFaceTokenizer`` wrapping a (vocabulary-shrunk) pretrained one.
Each part of the format is encoded on its own and grids by table lookup, which equals encoding
the whole text whenever every digit is one token (true of both).

This module needs numpy only; it knows nothing of models or augmentations.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from arc_kit.data.grids import MAX_SIDE, freeze
from arc_kit.names import shown
from arc_kit.settings import DECODING_MODES, DEFAULT_TOKEN_BUDGET
from arc_kit.data.tasks import Pair

logger = logging.getLogger(__name__)

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
        return self.row_separator.join("".join(str(int(c)) for c in row) for row in np.asarray(grid))

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


@runtime_checkable
class GridTokenizer(Protocol):
    """What the encoder needs from a tokenizer: text to ids without specials, and the special ids."""

    vocab_size: int
    bos_id: int | None
    eos_id: int
    pad_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


BOS, EOS, PAD = "<bos>", "<eos>", "<pad>"


@dataclass(frozen=True)
class Vocabulary:
    """The fixed 64-symbol vocabulary of models trained from scratch.

    ids 0-9 are the digits (so a colour is its own id), then the row separator ``\\n``, the
    input prefix ``I``, the output marker ``+/-=O`` as one symbol, ``<bos>``, ``<eos>``,
    ``<pad>``, and the 48 pre-prompt letters. Text is split by longest match.
    """

    symbols: tuple[str, ...] = field(default_factory=lambda: (
        *"0123456789", "\n", "I", "+/-=O", BOS, EOS, PAD, *PREPROMPT))

    def __post_init__(self):
        if len(set(self.symbols)) != len(self.symbols):
            raise ValueError("vocabulary symbols must be distinct")
        for name in (BOS, EOS, PAD):
            if name not in self.symbols:
                raise ValueError(f"vocabulary needs {name}")
        object.__setattr__(self, "_ids", {symbol: index for index, symbol in enumerate(self.symbols)})
        lengths = sorted({len(symbol) for symbol in self.symbols if symbol not in (BOS, EOS, PAD)}, reverse=True)
        object.__setattr__(self, "_lengths", tuple(lengths))

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    @property
    def bos_id(self) -> int:
        return self._ids[BOS]

    @property
    def eos_id(self) -> int:
        return self._ids[EOS]

    @property
    def pad_id(self) -> int:
        return self._ids[PAD]

    def encode(self, text: str) -> list[int]:
        ids, position = [], 0
        while position < len(text):
            for length in self._lengths:
                symbol_id = self._ids.get(text[position:position + length])
                if symbol_id is not None and text[position:position + length] not in (BOS, EOS, PAD):
                    ids.append(symbol_id)
                    position += length
                    break
            else:
                raise ValueError(f"the vocabulary has no symbol for {text[position]!r} "
                                 f"(at position {position} of {text[:40]!r})")
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.symbols[int(i)] for i in ids)

    def token_strings(self) -> list[str]:
        return list(self.symbols)


class HuggingFaceTokenizer:
    """Adapts a ``transformers`` tokenizer (already shrunk to single characters) to GridTokenizer."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.bos_id = tokenizer.bos_token_id
        self.eos_id = tokenizer.eos_token_id
        if self.eos_id is None:
            raise ValueError("the tokenizer has no eos token")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False,
                                     clean_up_tokenization_spaces=False)


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
    rows = [row for row in rows if row]
    if not rows:
        raise NotAGridError("an empty answer: no digit")
    if len({len(row) for row in rows}) > 1:
        raise NotAGridError(f"ragged rows: widths {[len(row) for row in rows]}")
    if len(rows) > MAX_SIDE or len(rows[0]) > MAX_SIDE:
        raise NotAGridError(f"{len(rows)}x{len(rows[0])} is larger than {MAX_SIDE}x{MAX_SIDE}")
    return freeze(np.array(rows, dtype=np.uint8))


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
        return (np.concatenate([self.input_prefix, self.encode_grid(pair.input), self.output_prefix]),
                self.encode_answer(pair.output))

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
            if self.format.drop_order == "last":
                victim = kept[-1]
            else:
                victim = max(kept, key=lambda i: (pair_lengths[i], i))
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
        if not rows:
            raise NotAGridError("an empty answer: no digit before eos")
        widths = {len(r) for r in rows}
        if len(widths) > 1:
            raise NotAGridError(f"ragged rows: widths {[len(r) for r in rows]}")
        if len(rows) > MAX_SIDE or len(rows[0]) > MAX_SIDE:
            raise NotAGridError(f"{len(rows)}x{len(rows[0])} is larger than {MAX_SIDE}x{MAX_SIDE}")
        return freeze(np.array(rows, dtype=np.uint8))

    def text(self, ids: Sequence[int]) -> str:
        """The ids as text, special tokens spelled out (for looking at)."""
        return self.tokenizer.decode([int(i) for i in ids])
