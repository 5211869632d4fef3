"""Depth-first search for every answer whose probability is at least a threshold (paper, Appendix A).

The search works in negative log-probabilities: a branch is pruned as soon as its summed NLL
exceeds ``-ln(threshold)``, so every answer with probability >= threshold is returned, and nothing
else (at most ``1 / threshold`` answers). It runs on an explicit stack, not recursion, with one
KV cache holding the current path only (the memory of greedy decoding): going back to a branch
point rewinds the cache (``decoding.rewind_cache``) and never recomputes the prompt.

An optional *guess* (the best answer found so far under another augmentation, mapped into this
one's frame) is fed together with the prompt in one forward pass, which yields the cache and the
distribution at every position of the guess at once; its path is explored first. Tokens that
cannot occur in an answer are masked out (``decoding.answer_log_probs``). Caps on the answer
length and on the number of forward calls bound the work; hitting one is reported in the result.

Knows nothing of tasks, grids or augmentations: it maps a prompt's token ids to completions.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.decoding import AnswerSpace, Completion, SearchResult, answer_log_probs, new_cache, rewind_cache


@dataclass(frozen=True)
class DfsSettings:
    """The search's bounds; the paper's final runs used T = 9%."""

    threshold: float = 0.09  # minimum probability of a returned answer
    max_forward_calls: int = 20_000  # single-token model calls per search before it stops (reported)

    def __post_init__(self):
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be a probability in (0, 1], got {self.threshold}")


def dfs_search(model, prompt_ids: Sequence[int], space: AnswerSpace, settings: DfsSettings = DfsSettings(),
               guess: Sequence[int] | None = None) -> SearchResult:
    """Every answer with probability >= ``settings.threshold`` after ``prompt_ids``, best first."""
    import torch

    started = time.monotonic()
    device = next(model.parameters()).device
    max_nll = -math.log(settings.threshold)
    eos = space.eos_id
    guess = [] if guess is None else [int(t) for t in guess][: space.max_length]  # a list or an array
    if eos in guess:
        guess = guess[: guess.index(eos) + 1]
    prompt_length = len(prompt_ids)
    ids = torch.tensor([*map(int, prompt_ids), *guess], dtype=torch.long, device=device)[None]
    with torch.no_grad():
        output = model(input_ids=ids, past_key_values=new_cache(model), use_cache=True)
    cache = output.past_key_values
    mask = space.mask(output.logits.shape[-1], device)
    # increments[d][t]: NLL of token t after the prompt and guess[:d]
    increments = (-answer_log_probs(output.logits[0, prompt_length - 1:], mask)).double().cpu().numpy()

    completions: list[Completion] = []
    stack: list[tuple[int, int, float]] = []  # (depth of the parent, token, NLL with the token)
    dropped: Counter = Counter()
    path: list[int] = []

    def expand(depth: int, nll: float, increment: np.ndarray, skip: int | None = None) -> None:
        """Record the eos child, push the other children within the threshold (best on top)."""
        totals = nll + increment
        children = []
        for token in np.flatnonzero(totals <= max_nll):
            token = int(token)
            if token == eos:
                completions.append(Completion(tuple(path[:depth]) + (eos,), float(totals[token])))
            elif token == skip:
                continue
            elif depth + 1 < space.max_length:  # room is left for at least the eos
                children.append((float(totals[token]), token))
            else:
                dropped["max length"] += 1
        children.sort(reverse=True)  # worst first, so the most probable child is popped next
        stack.extend((depth, token, total) for total, token in children)

    # Walk the guess: its distributions are already computed; siblings wait on the stack.
    nll, depth = 0.0, 0
    while True:
        increment = increments[depth]
        token = guess[depth] if depth < len(guess) else None
        follow = (token is not None and token != eos and nll + increment[token] <= max_nll
                  and depth + 1 < space.max_length)
        expand(depth, nll, increment, skip=token if follow else None)
        if not follow:
            break
        path.append(token)
        nll += float(increment[token])
        depth += 1

    forward_calls, capped = 0, None
    with torch.no_grad():
        while stack:
            if forward_calls >= settings.max_forward_calls:
                capped = f"forward-call cap of {settings.max_forward_calls} reached with {len(stack)} branches left"
                break
            depth, token, total = stack.pop()
            del path[depth:]
            rewind_cache(cache, prompt_length + depth)
            output = model(input_ids=torch.tensor([[token]], device=device), past_key_values=cache, use_cache=True)
            cache = output.past_key_values
            forward_calls += 1
            path.append(token)
            increment = (-answer_log_probs(output.logits[0, -1], mask)).double().cpu().numpy()
            expand(depth + 1, total, increment)
    return SearchResult(completions, forward_calls=forward_calls, tokens_processed=ids.shape[1] + forward_calls,
                        seconds=time.monotonic() - started, capped=capped, dropped=dict(dropped))
