"""Token ids for the text format: what the encoder needs of a tokenizer, and the two it is given.

Token ids come from a ``GridTokenizer``: the fixed ``Vocabulary`` of 64 symbols used by models
trained from scratch, or ``HuggingFaceTokenizer`` wrapping a (vocabulary-shrunk) pretrained one.

This module needs the standard library only (a ``transformers`` tokenizer is handed in, never
imported); it knows the format's symbols, and nothing of grids, tasks or models.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from arc_kit.text.format import PREPROMPT


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
        ids = {symbol: index for index, symbol in enumerate(self.symbols)}
        plain = sorted((symbol for symbol in self.symbols if symbol not in (BOS, EOS, PAD)), key=len, reverse=True)
        for name, value in (("_ids", ids), ("_longest_first", re.compile("|".join(map(re.escape, plain)))),
                            ("vocab_size", len(self.symbols)), ("bos_id", ids[BOS]), ("eos_id", ids[EOS]),
                            ("pad_id", ids[PAD])):  # GridTokenizer's attributes, fixed with the symbols
            object.__setattr__(self, name, value)

    def encode(self, text: str) -> list[int]:
        ids, position = [], 0
        while position < len(text):
            match = self._longest_first.match(text, position)  # the longest symbol there (specials never match)
            if match is None:
                raise ValueError(f"the vocabulary has no symbol for {text[position]!r} "
                                 f"(at position {position} of {text[:40]!r})")
            ids.append(self._ids[match.group()])
            position = match.end()
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.symbols[int(i)] for i in ids)


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
