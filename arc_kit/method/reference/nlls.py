"""Answers' NLLs through transformers' own forward: many answers after one prompt on its cache, and the slow reference.

``score_answers`` runs the prompt once and the answers together on its cache (``batch_size`` at a
time, halved after an out-of-memory error: ``engine.with_halving``); ``nlls_after_prompts`` is its
one call, which the reference engine's scoring shares; ``sequence_nll`` is the slow, obviously-right
reference (one full forward per answer, no cache) that tests and the scoring benchmark hold the
others against. Works on token ids and a transformers model; knows nothing of searches or tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from arc_kit.method.answers import AnswerSpace, answer_log_probs, answer_targets, summed_nlls
from arc_kit.method.engine import BatchLimit, with_halving
from arc_kit.method.reference.caches import call_with_cache, full_attention_tensors, new_cache, prefix_cache


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
