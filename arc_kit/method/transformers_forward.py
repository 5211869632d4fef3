"""transformers' own forward, one lane at a time: the tests' oracle, and the path for a model the engine cannot run.

``TransformersDecoder`` does what the searches and the scorer ask of ``engine.Engine`` (lanes
started, prefilled, stepped with runs at positions, kept and released; answers scored; no cost model
of its steps) with the model's own forward and one ``DynamicCache`` per lane, as the paper's authors decode: a step at
position p first crops the lane's cache to p (``crop`` with a non-positive count: how many positions
to remove, the one form every transformers 5 takes), then feeds the run. Each lane is a model call
of its own; a prompt's answers are scored one after another on its cache, cropped back after each.
It runs any causal language model transformers runs (8-bit weights, an architecture outside the
Llama family), slower (``engine.FALLBACK_SLOWDOWN``). ``sequence_nll`` is the slow, obviously-right
reference of scoring: one full forward per answer, no cache.

Knows transformers' forward and cache; knows nothing of tasks, grids or the searches' bookkeeping.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from arc_kit.method.answers import AnswerSpace, answer_log_probs


@functools.cache
def _cache_keyword(model_class) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def call_with_cache(model, cache, ids: Sequence[int]):
    """``(logits (tokens, vocab), cache)`` of ``ids`` fed to ``model`` after ``cache`` (None: an empty one), on every
    transformers the kit runs on: 5.2x renamed the keyword ``past_key_values`` to ``cache``. A peft model is asked
    about the model it wraps, which takes the keyword."""
    import torch
    from transformers import DynamicCache

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    keyword = _cache_keyword(type(base))
    tensor = torch.tensor([[int(token) for token in ids]], dtype=torch.long, device=next(model.parameters()).device)
    with torch.no_grad():
        output = model(input_ids=tensor, **{keyword: DynamicCache() if cache is None else cache}, use_cache=True)
    return output.logits[0], getattr(output, keyword)


def crop(cache, length: int) -> None:
    """Shorten ``cache`` to its first ``length`` positions, in place, as the authors rewind it."""
    current = cache.get_seq_length()
    if length > current:
        raise ValueError(f"cannot rewind a cache of {current} positions to {length}")
    if length < current:
        cache.crop(length - current)  # a negative count: 'remove this many', in every version


class TransformersDecoder:
    """The engine's lanes and scoring on the model's own forward and caches (module docstring)."""

    kind = "transformers"

    def __init__(self, model, *, on_step: Callable[[], None] | None = None):
        self.model, self.on_step = model, on_step or (lambda: None)
        self.steps = 0
        self._caches: list = []
        self._space: AnswerSpace | None = None

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    def refresh(self) -> None:
        """Nothing to read again: every call reads the model as it is."""

    def _nlls(self, logits, space: AnswerSpace) -> np.ndarray:
        return (-answer_log_probs(logits, space.mask(logits.shape[-1], logits.device),
                                  space.probabilities)).double().cpu().numpy()

    def _call(self, cache, ids):
        self.on_step()
        return call_with_cache(self.model, cache, ids)

    def start(self, lanes: int, capacity: int, space: AnswerSpace) -> None:
        self._caches, self._space = [None] * lanes, space

    def prefill(self, lane: int, ids: Sequence[int], logits_from: int) -> np.ndarray:
        logits, self._caches[lane] = self._call(None, ids)
        return self._nlls(logits[logits_from - 1:], self._space)

    def step(self, runs: Sequence[Sequence[int]], positions: Sequence[int]) -> list[np.ndarray]:
        self.steps += 1
        rows = []
        for lane, (run, position) in enumerate(zip(runs, positions)):
            crop(self._caches[lane], int(position))
            logits, self._caches[lane] = self._call(self._caches[lane], run)
            rows.append(self._nlls(logits, self._space))
        return rows

    def step_costs(self, positions: Sequence[int], width: int) -> None:
        """No cost model: each lane is a model call of its own, whose overhead a draft token barely adds to (on the
        CPU, a step of 16 lanes costs about 5 of the engine's: docs/results.md), so "auto" feeds whole drafts."""
        return None

    def keep_lanes(self, lanes: Sequence[int]) -> None:
        self._caches = [self._caches[lane] for lane in lanes]

    def release(self) -> None:
        self._caches = []

    def score(self, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[Sequence[int]]], space: AnswerSpace,
              batch_size: int = 16, limit=None) -> list[np.ndarray]:
        """The NLLs of ``answers[p]`` after ``prompts[p]``: each prompt run once, each answer fed on its cache and
        cropped away again (``batch_size`` and ``limit`` are the engine's; one answer at a time needs neither)."""
        results = []
        for prompt, chunk in zip(prompts, answers, strict=True):
            nlls = np.zeros(len(chunk))
            if len(chunk):
                logits, cache = self._call(None, prompt)
                first = self._nlls(logits[-1], space)
                for index, answer in enumerate(chunk):
                    answer = [int(token) for token in answer]
                    rows = [first]
                    if len(answer) > 1:
                        logits, cache = self._call(cache, answer[:-1])
                        rows += list(self._nlls(logits, space))
                        crop(cache, len(prompt))
                    nlls[index] = sum(float(row[token]) for row, token in zip(rows, answer))
            results.append(nlls)
        return results


def sequence_nll(model, prompt_ids, answers: list, space: AnswerSpace) -> list[float]:
    """Reference NLLs: one full forward (no cache) per answer. Slow and obviously right; for tests and benchmarks."""
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
