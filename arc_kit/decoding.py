"""What every sampler shares: the answer alphabet, its log-probabilities, the KV-cache rewind.

An answer is the tokens a model writes after the output prefix: digits, row separators, the end
of example and eos. ``AnswerSpace`` holds those ids, the longest answer (a 30x30 grid) and how an
answer's probability is measured (``probabilities``): "full", the model's whole softmax (the
paper's P(s|q), the default), or "answer-mask", the softmax renormalised over the answer tokens.
``answer_log_probs`` gives the answer tokens' log-probabilities under either (every other token
-inf: no path through one can spell a grid), so that all samplers and the scorer measure an
answer's negative log-likelihood (NLL) the same way: ``score_answers`` measures many answers after
one prompt (its cache reused), ``sequence_nll`` is its slow reference. ``rewind_cache`` is the
one place that shortens a transformers KV cache: it works on transformers 5.17 and 5.2x, where
``DynamicCache.crop`` only takes a non-positive number of tokens to remove. The batched paths
(``batched_dfs``, ``scoring.score_prompts``) build, stack and reorder caches through
``cache_tensors``, ``cache_from_tensors`` and ``gather_cache``: the one place that reads a cache's
per-layer keys and values. ``deadline_passed`` is the one clock check of every search: a deadline is
a ``time.monotonic()`` value, and no search starts a model call once it has passed.

Knows nothing of tasks or augmentations; works on token ids.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from arc_kit.settings import PROBABILITY_MODES
from arc_kit.text_format import TaskEncoder


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


def rewind_cache(cache, length: int) -> None:
    """Shorten a KV cache to its first ``length`` positions, in place (never grows it)."""
    current = cache.get_seq_length()
    if length > current:
        raise ValueError(f"cannot rewind a cache of {current} positions to {length}")
    if length < current:
        cache.crop(length - current)  # a negative count: 'remove this many', in every version


def new_cache(model):
    """An empty dynamic KV cache for ``model``."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older signatures take no config
        return DynamicCache()


def cache_tensors(cache) -> list[tuple]:
    """The (keys, values) of every layer, each (batch, heads, length, head dim); transformers >= 4.56."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def cache_from_tensors(model, tensors) -> object:
    """A dynamic cache holding ``tensors`` (one (keys, values) per layer), through the public ``update``."""
    cache = new_cache(model)
    for index, (keys, values) in enumerate(tensors):
        cache.update(keys, values, index)
    return cache


def gather_cache(model, cache, rows, columns=None):
    """A new cache of the given ``rows`` (batch indices, repeats allowed) and, per row, ``columns``.

    ``rows``: a 1-D long tensor; ``columns``: None (all) or a (len(rows), length) long tensor of
    positions to take, in order, from each selected row.
    """
    tensors = []
    for keys, values in cache_tensors(cache):
        keys, values = keys[rows], values[rows]
        if columns is not None:
            index = columns.to(keys.device)[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
            keys, values = keys.gather(2, index), values.gather(2, index)
        tensors.append((keys, values))
    return cache_from_tensors(model, tensors)


def stack_caches(model, caches, width: int):
    """One cache of batch ``len(caches)`` from single-row caches, each right-padded with zeros to ``width``."""
    import torch

    layers = [cache_tensors(cache) for cache in caches]
    tensors = []
    for index in range(len(layers[0])):
        stacked = []
        for part in (0, 1):
            pieces = [lane[index][part] for lane in layers]
            padded = [torch.nn.functional.pad(piece, (0, 0, 0, width - piece.shape[2])) for piece in pieces]
            stacked.append(torch.cat(padded, dim=0))
        tensors.append(tuple(stacked))
    return cache_from_tensors(model, tensors)


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
    forward_calls: int = 0  # model calls after the prompt's
    tokens_processed: int = 0  # tokens fed to the model, prompt included
    seconds: float = 0.0
    capped: str | None = None  # why the search stopped early, if it did (a cap or its deadline was hit)
    dropped: dict[str, int] = field(default_factory=dict)  # paths abandoned, by reason

    def __post_init__(self):
        unique = {completion.ids: completion for completion in sorted(self.completions, key=lambda c: c.nll)}
        self.completions = sorted(unique.values(), key=lambda c: (c.nll, c.ids))


def score_answers(model, prompt_ids: Sequence[int], answers: Sequence[Sequence[int]], space: AnswerSpace,
                  batch_size: int = 16) -> np.ndarray:
    """The NLL of each answer (its tokens through eos) after the prompt, reusing the prompt's cache.

    The prompt is run once; the answers go through the model together in batches on copies of its
    cache (right-padded: causal attention keeps the padding out of every real token's view). Equal
    to ``sequence_nll`` up to float rounding.
    """
    import torch

    if not answers:
        return np.zeros(0)
    device = next(model.parameters()).device
    prompt = torch.tensor([int(t) for t in prompt_ids], dtype=torch.long, device=device)[None]
    with torch.no_grad():
        output = model(input_ids=prompt, past_key_values=new_cache(model), use_cache=True)
    prompt_cache = output.past_key_values
    mask = space.mask(output.logits.shape[-1], device)
    first = answer_log_probs(output.logits[0, -1], mask, space.probabilities)  # every answer's first token
    results = np.zeros(len(answers))
    for start in range(0, len(answers), batch_size):
        chunk = [torch.as_tensor([int(t) for t in answer], dtype=torch.long)
                 for answer in answers[start:start + batch_size]]
        count, longest = len(chunk), max(len(answer) for answer in chunk)
        targets = torch.full((count, longest), space.eos_id, dtype=torch.long)
        valid = torch.zeros((count, longest), dtype=torch.bool)
        for row, answer in enumerate(chunk):
            targets[row, :len(answer)] = answer
            valid[row, :len(answer)] = True
        targets, valid = targets.to(device), valid.to(device)
        log_probs = first.expand(count, 1, -1)
        if longest > 1:
            cache = copy.deepcopy(prompt_cache)
            cache.batch_repeat_interleave(count)
            with torch.no_grad():
                logits = model(input_ids=targets[:, :-1], past_key_values=cache, use_cache=True).logits
            log_probs = torch.cat([log_probs, answer_log_probs(logits, mask, space.probabilities)], dim=1)
        picked = log_probs.gather(-1, targets[..., None])[..., 0]
        picked = torch.where(valid, picked, torch.zeros_like(picked))
        results[start:start + count] = (-picked.sum(dim=1)).double().cpu().numpy()
    return results


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
