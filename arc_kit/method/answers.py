"""What every sampler shares: the answer alphabet, its log-probabilities, scoring answers after a prompt.

An answer is the tokens a model writes after the output prefix: digits, row separators, the end
of example and eos. ``AnswerSpace`` holds those ids, the longest answer (a 30x30 grid) and how an
answer's probability is measured (``probabilities``): "full", the model's whole softmax (the
paper's P(s|q), the default), or "answer-mask", the softmax renormalised over the answer tokens.
``answer_log_probs`` gives the answer tokens' log-probabilities under either (every other token
-inf: no path through one can spell a grid), so that all samplers and the scorer measure an
answer's negative log-likelihood (NLL) the same way: ``score_answers`` measures many answers after
one prompt (its cache reused), ``sequence_nll`` is its slow reference. The model calls go through ``caches`` (transformers' KV caches as the reference decode engine and
the scorer use them). Out of memory, ``with_halving`` makes a call again with half the rows
(``BatchLimit``), down to one. ``deadline_passed`` is the one clock check of every search: a deadline
is a ``time.monotonic()`` value, and no search starts a model call once it has passed.

Knows nothing of tasks or augmentations; works on token ids.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from arc_kit.method.reference.caches import call_with_cache, full_attention_tensors, new_cache, prefix_cache
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
    """Log-probabilities of the allowed tokens (others -inf), in float32; logits (..., vocab).

    "full": the log-softmax over the whole vocabulary, then every other token set to -inf (so the
    allowed tokens' probabilities sum to less than 1); "answer-mask": the log-softmax over the
    allowed tokens only (they sum to 1).
    """
    import torch

    if probabilities == "full":
        return torch.log_softmax(logits.float(), dim=-1).masked_fill(~allowed_mask, float("-inf"))
    if probabilities == "answer-mask":
        return torch.log_softmax(logits.float().masked_fill(~allowed_mask, float("-inf")), dim=-1)
    raise ValueError(f"unknown probabilities {probabilities!r}; expected one of {PROBABILITY_MODES}")


def deadline_passed(deadline: float | None) -> bool:
    """Whether ``deadline`` (a ``time.monotonic()`` value; None: no deadline) has passed."""
    return deadline is not None and time.monotonic() >= deadline


def earliest(*deadlines: float | None) -> float | None:
    """The earliest of the given deadlines (None where none is set)."""
    known = [deadline for deadline in deadlines if deadline is not None]
    return min(known) if known else None


def out_of_memory_errors() -> tuple[type, ...]:
    """The errors of an allocation the accelerator could not make (``torch.OutOfMemoryError`` where it exists)."""
    import torch

    return tuple({torch.cuda.OutOfMemoryError, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)})


def release_memory() -> None:
    """Return what an interrupted model call left to the allocator (after an out-of-memory error)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass
class BatchLimit:
    """The most rows one batched model call may take: any number at first, halved after each out-of-memory error.

    A caller that keeps one across calls never tries again a size that ran out of memory.
    """

    what: str  # what a row is, for the log: "lanes", "prompts", "answers"
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
    """
    while True:
        size = limit.take(wanted)
        try:
            return attempt(size)
        except out_of_memory_errors():
            if size <= 1:
                raise
        release_memory()  # outside the handler: the failed call's tensors are unreachable by now
        limit.halve(size)


@dataclass(frozen=True)
class Completion:
    """One answer: its token ids (eos last) and summed NLL (under its ``AnswerSpace.probabilities``)."""

    ids: tuple[int, ...]
    nll: float

    @property
    def probability(self) -> float:
        return float(np.exp(-self.nll))


@dataclass
class SearchResult:
    """What a sampler returns for one prompt."""

    completions: list[Completion]  # sorted by NLL, best first; distinct
    forward_calls: int = 0  # model calls after the prompt's (a DFS step with a draft is one)
    tokens_processed: int = 0  # tokens fed to the model, prompt (and guess, and drafts) included
    seconds: float = 0.0
    capped: str | None = None  # why the search stopped early, if it did (a cap or its deadline was hit)
    dropped: dict[str, int] = field(default_factory=dict)  # paths abandoned, by reason
    draft_tokens: int = 0  # DFS: draft tokens fed after branch tokens
    draft_accepted: int = 0  # DFS: of them, those followed (each saved a step)

    def __post_init__(self):
        unique = {completion.ids: completion for completion in sorted(self.completions, key=lambda c: c.nll)}
        self.completions = sorted(unique.values(), key=lambda c: (c.nll, c.ids))


def score_answers(model, prompt_ids: Sequence[int], answers: Sequence[Sequence[int]], space: AnswerSpace,
                  batch_size: int = 16, *, limit: BatchLimit | None = None) -> np.ndarray:
    """The NLL of each answer (its tokens through eos) after the prompt, reusing the prompt's cache.

    The prompt is run once; the answers go through the model together, ``batch_size`` at a time
    (fewer once one such call ran out of memory: ``limit``), each call reading the prompt's cache
    through an expanded view (``nlls_after_prompts``). Equal to ``sequence_nll`` up to float rounding.
    """
    import torch

    if not answers:
        return np.zeros(0)
    device = next(model.parameters()).device
    prompt = torch.tensor([int(t) for t in prompt_ids], dtype=torch.long, device=device)[None]
    with torch.no_grad():
        output, cache = call_with_cache(model, new_cache(model), input_ids=prompt)
    tensors = full_attention_tensors(cache)
    first = answer_log_probs(output.logits[:, -1], space.mask(output.logits.shape[-1], device), space.probabilities)
    del output
    limit = limit if limit is not None else BatchLimit("answers")
    results = np.zeros(len(answers))

    def score(start: int, size: int) -> int:
        chunk = answers[start:start + size]
        results[start:start + len(chunk)] = nlls_after_prompts(model, tensors, first, chunk, [0] * len(chunk), space)
        return len(chunk)

    done = 0
    while done < len(answers):
        done += with_halving(limit, min(batch_size, len(answers) - done), lambda size, start=done: score(start, size))
    return results


def nlls_after_prompts(model, tensors, first, answers: Sequence[Sequence[int]], rows: Sequence[int],
                       space: AnswerSpace, prompt_lengths: Sequence[int] | None = None) -> np.ndarray:
    """The NLL of ``answers[i]`` after prompt ``rows[i]`` of a stored prompt cache, all in one model call.

    ``tensors``: the prompts' ``cache_tensors``; ``first``: (prompts, vocabulary) log-probabilities
    of each prompt's first answer token; ``prompt_lengths``: each prompt's length where the prompts
    are right-padded to the cache's width (their padding is then masked out and positions are given
    per row); None: every prompt fills the cache. Answers are right-padded too: causal attention
    keeps their padding out of every real token's view. When every answer reads one prompt, its
    cache is an expanded view, not a copy (``prefix_cache``).
    """
    import torch

    device = first.device
    targets, valid = answer_targets(answers, space.eos_id)
    count, longest = targets.shape
    targets, valid = targets.to(device), valid.to(device)
    rows = torch.as_tensor(list(rows), dtype=torch.long)
    log_probs = first[rows.to(device)][:, None]
    if longest > 1:
        shared = bool((rows == rows[0]).all())
        cache = prefix_cache(model, tensors, int(rows[0]) if shared else rows.to(device))
        options = {}
        if prompt_lengths is not None:
            lengths = torch.as_tensor(list(prompt_lengths), dtype=torch.long)[rows]
            prompt_valid = torch.arange(tensors[0][0].shape[2])[None, :] < lengths[:, None]
            attention = torch.cat([prompt_valid, torch.ones((count, longest - 1), dtype=torch.bool)], dim=1)
            options = {"attention_mask": attention.to(device, torch.long),
                       "position_ids": (lengths[:, None] + torch.arange(longest - 1)[None, :]).to(device)}
        with torch.no_grad():
            logits = call_with_cache(model, cache, input_ids=targets[:, :-1], **options)[0].logits
        del cache
        mask = space.mask(logits.shape[-1], device)
        log_probs = torch.cat([log_probs, answer_log_probs(logits, mask, space.probabilities)], dim=1)
    return summed_nlls(log_probs, targets, valid)


def answer_targets(answers: Sequence[Sequence[int]], pad: int):
    """(targets, valid): the answers right-padded with ``pad`` into a (rows, longest) long tensor, and where real."""
    import torch

    tokens = [torch.as_tensor([int(t) for t in answer], dtype=torch.long) for answer in answers]
    longest = max(len(answer) for answer in tokens)
    targets = torch.full((len(tokens), longest), pad, dtype=torch.long)
    valid = torch.zeros((len(tokens), longest), dtype=torch.bool)
    for row, answer in enumerate(tokens):
        targets[row, :len(answer)] = answer
        valid[row, :len(answer)] = True
    return targets, valid


def summed_nlls(log_probs, targets, valid) -> np.ndarray:
    """Minus the sum of ``log_probs`` (rows, length, vocab) at ``targets`` where ``valid``: float64, one per row."""
    import torch

    picked = log_probs.gather(-1, targets[..., None])[..., 0]
    picked = torch.where(valid, picked, torch.zeros_like(picked))
    return (-picked.sum(dim=1)).double().cpu().numpy()


def sequence_nll(model, prompt_ids, answers: list, space: AnswerSpace) -> list[float]:
    """Reference NLLs: one full forward (no cache) per answer. Slow and obviously right; for tests."""
    import torch

    device = next(model.parameters()).device
    results = []
    for answer in answers:
        ids = torch.tensor(np.concatenate([prompt_ids, answer]), device=device)[None]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1]
        log_probs = answer_log_probs(logits, space.mask(logits.shape[-1], device), space.probabilities)
        picked = log_probs[torch.arange(len(answer), device=device), torch.as_tensor(answer, device=device)]
        results.append(float(-picked.sum()))
    return results
