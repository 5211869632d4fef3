"""What every sampler shares: the answer alphabet, masked log-probabilities, the KV-cache rewind.

An answer is the tokens a model writes after the output prefix: digits, row separators, the end
of example and eos. ``AnswerSpace`` holds those ids and the longest answer (a 30x30 grid);
``answer_log_probs`` masks every other token out before the softmax, so that all samplers and
the scorer measure an answer's negative log-likelihood (NLL) the same way. ``rewind_cache`` is the
one place that shortens a transformers KV cache: it works on transformers 5.17 and 5.2x, where
``DynamicCache.crop`` only takes a non-positive number of tokens to remove. The batched paths
(``batched_dfs``, ``scoring.score_prompts``) build, stack and reorder caches through
``cache_tensors``, ``cache_from_tensors`` and ``gather_cache``: the one place that reads a cache's
per-layer keys and values.

Knows nothing of tasks or augmentations; works on token ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from arc_kit.text_format import TaskEncoder


@dataclass(frozen=True)
class AnswerSpace:
    """The tokens an answer may hold, its end (eos) and its longest length in tokens."""

    allowed_ids: tuple[int, ...]
    eos_id: int
    max_length: int  # tokens, eos included

    @classmethod
    def from_encoder(cls, encoder: TaskEncoder) -> AnswerSpace:
        return cls(tuple(int(i) for i in encoder.answer_token_ids), int(encoder.eos_id), int(encoder.max_answer_len))

    def mask(self, vocab_size: int, device=None):
        """A bool tensor over the vocabulary: True where a token may occur in an answer."""
        import torch

        mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        mask[list(self.allowed_ids)] = True
        return mask


def answer_log_probs(logits, allowed_mask):
    """log-softmax over the allowed tokens only (others -inf), in float32; logits (..., vocab)."""
    import torch

    logits = logits.float().masked_fill(~allowed_mask, float("-inf"))
    return torch.log_softmax(logits, dim=-1)


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
    """One answer: its token ids (eos last) and summed NLL under the masked distribution."""

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
    capped: str | None = None  # why the search stopped early, if it did (a cap was hit)
    dropped: dict[str, int] = field(default_factory=dict)  # paths abandoned, by reason

    def __post_init__(self):
        unique = {completion.ids: completion for completion in sorted(self.completions, key=lambda c: c.nll)}
        self.completions = sorted(unique.values(), key=lambda c: (c.nll, c.ids))


def sequence_nll(model, prompt_ids, answers: list, space: AnswerSpace) -> list[float]:
    """Reference NLLs: one full forward (no cache) per answer. Slow and obviously right; for tests."""
    import torch

    device = next(model.parameters()).device
    results = []
    for answer in answers:
        ids = torch.tensor(np.concatenate([prompt_ids, answer]), device=device)[None]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1]
        log_probs = answer_log_probs(logits, space.mask(logits.shape[-1], device))
        picked = log_probs[torch.arange(len(answer), device=device), torch.as_tensor(answer, device=device)]
        results.append(float(-picked.sum()))
    return results
