"""What every search shares: the answer alphabet, its log-probabilities, a search's completions and result, memory.

An answer is the tokens a model writes after the output prefix: digits, row separators, the end
of example and eos. ``AnswerSpace`` holds those ids, the longest answer (a 30x30 grid) and how an
answer's probability is measured (``probabilities``): "full", the model's whole softmax (the
paper's P(s|q), the default), or "answer-mask", the softmax renormalised over the answer tokens.
``answer_log_probs`` gives the answer tokens' log-probabilities under either (every other token
-inf: no path through one can spell a grid), so that all samplers and the scorer measure an
answer's negative log-likelihood (NLL) the same way (``answer_targets`` and ``summed_nlls`` sum an
answer's NLL from them). A search returns a ``SearchResult`` of ``Completion``s (token ids and NLL).
``deadline_passed`` is the one clock check of every search: a deadline is a ``time.monotonic()``
value, and no search starts a model call once it has passed. ``with_halving`` is the one answer to an
out-of-memory error of a batched model call (the search's lanes, the scorer's answer rows): the call
again with half the rows (``BatchLimit``), down to one.

Knows nothing of tasks, augmentations or how a model is called; works on token ids.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from arc_kit.settings import PROBABILITY_MODES
from arc_kit.text import TaskEncoder

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class AnswerSpace:
    """The tokens an answer may hold, its end (eos), its longest length in tokens, how it is measured."""

    allowed_ids: tuple[int, ...]
    eos_id: int
    max_length: int  # tokens, eos included
    probabilities: str = "full"  # "full": the model's whole softmax; "answer-mask": renormalised over allowed_ids

    def __post_init__(self):
        if self.probabilities not in PROBABILITY_MODES:
            raise ValueError(f"unknown probabilities {self.probabilities!r}; expected one of {PROBABILITY_MODES}")

    @classmethod
    def from_encoder(cls, encoder: TaskEncoder, probabilities: str = "full") -> AnswerSpace:
        return cls(tuple(int(i) for i in encoder.answer_token_ids), int(encoder.eos_id), int(encoder.max_answer_len),
                   probabilities)

    def mask(self, vocab_size: int, device=None):
        """A bool tensor over the vocabulary: True where a token may occur in an answer."""
        import torch

        mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        mask[list(self.allowed_ids)] = True
        return mask


def answer_log_probs(logits, allowed_mask, probabilities: str = "full"):
    """Log-probabilities of the allowed tokens (others -inf), in float32, as ``probabilities`` measures them
    (``AnswerSpace``: under "full" the allowed tokens' probabilities sum to less than 1); logits (..., vocab)."""
    import torch

    if probabilities == "full":
        return torch.log_softmax(logits.float(), dim=-1).masked_fill(~allowed_mask, float("-inf"))
    if probabilities == "answer-mask":
        return torch.log_softmax(logits.float().masked_fill(~allowed_mask, float("-inf")), dim=-1)
    raise ValueError(f"unknown probabilities {probabilities!r}; expected one of {PROBABILITY_MODES}")


def deadline_passed(deadline: float | None) -> bool:
    """Whether ``deadline`` (a ``time.monotonic()`` value; None: no deadline) has passed."""
    return deadline is not None and time.monotonic() >= deadline


@dataclass(frozen=True)
class Completion:
    """One answer: its token ids (eos last) and summed NLL (under its ``AnswerSpace.probabilities``)."""

    ids: tuple[int, ...]
    nll: float


@dataclass
class SearchResult:
    """What a sampler returns for one prompt."""

    completions: list[Completion]  # sorted by NLL, best first; distinct
    forward_calls: int = 0  # model calls after the prompt's (a DFS step with a draft is one)
    tokens_processed: int = 0  # tokens fed to the model, prompt (and guess, and drafts) included
    capped: str | None = None  # why the search stopped early, if it did (a cap or its deadline was hit)
    dropped: dict[str, int] = field(default_factory=dict)  # paths abandoned, by reason
    draft_tokens: int = 0  # DFS: draft tokens fed after branch tokens
    draft_accepted: int = 0  # DFS: of them, those followed (each saved a step)

    def __post_init__(self):
        unique = {completion.ids: completion for completion in sorted(self.completions, key=lambda c: c.nll)}
        self.completions = sorted(unique.values(), key=lambda c: (c.nll, c.ids))


def answer_targets(answers: Sequence[Sequence[int]], pad: int):
    """(targets, valid): the answers right-padded with ``pad`` into a (rows, longest) long tensor, and where real."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    tokens = [torch.as_tensor([int(t) for t in answer], dtype=torch.long) for answer in answers]
    valid = [torch.ones(len(answer), dtype=torch.bool) for answer in tokens]
    return pad_sequence(tokens, batch_first=True, padding_value=pad), pad_sequence(valid, batch_first=True)


def summed_nlls(log_probs, targets, valid) -> np.ndarray:
    """Minus the sum of ``log_probs`` (rows, length, vocab) at ``targets`` where ``valid``: float64, one per row."""
    picked = log_probs.gather(-1, targets[..., None])[..., 0].masked_fill(~valid, 0.0)
    return (-picked.sum(dim=1)).double().cpu().numpy()


@dataclass
class BatchLimit:
    """The most rows one batched model call may take: any number at first, halved after each out-of-memory error.

    A caller that keeps one across calls never tries again a size that ran out of memory.
    """

    what: str  # what a row is, for the log: "lanes", "answers"
    size: int | None = None  # None: as many as asked

    def take(self, wanted: int) -> int:
        return wanted if self.size is None else max(1, min(wanted, self.size))

    def halve(self, tried: int) -> None:
        """After ``tried`` rows ran out of memory: at most half as many from now on."""
        self.size = max(1, min(self.size or tried, tried // 2))
        logger.warning("out of memory with %d %s per model call; going on with %d", tried, self.what, self.size)


def with_halving(limit: BatchLimit, wanted: int, attempt: Callable[[int], T]) -> T:
    """``attempt(size)`` with ``size = limit.take(wanted)``, halved and tried again after an out-of-memory error.

    ``attempt`` must be safe to repeat. An error with one row is raised: nothing smaller is left to try.
    ``torch.cuda.OutOfMemoryError`` is every device's (``torch.OutOfMemoryError``) where torch has one.
    """
    import torch

    while True:
        size = limit.take(wanted)
        try:
            return attempt(size)
        except torch.cuda.OutOfMemoryError:
            if size <= 1:
                raise
        release_memory()  # outside the handler: the failed call's tensors are unreachable by now
        limit.halve(size)


def release_memory() -> None:
    """Return what an interrupted model call left to the allocator (after an out-of-memory error, say)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
