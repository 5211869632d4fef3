"""Depth-first search for every answer whose probability is at least a threshold (paper, Appendix A).

The search works in negative log-probabilities: a branch is pruned as soon as its summed NLL
exceeds ``-ln(threshold)``, so every answer with probability >= threshold is returned, and nothing
else (at most ``1 / threshold`` answers). It runs on an explicit stack, not recursion, with one
KV cache holding the current path only (the memory of greedy decoding): going back to a branch
point rewinds the cache (``decoding.rewind_cache``) and never recomputes the prompt.

An optional *guess* (the best answer found so far under another augmentation, mapped into this
one's frame) is fed together with the prompt in one forward pass, which yields the cache and the
distribution at every position of the guess at once; its path is explored first. Only answer tokens
are walked (a path through any other token can never spell a grid, so pruning it is exact); their
NLLs are the space's (``decoding.answer_log_probs``: the full softmax by default). Caps on the answer
length and on the number of forward calls bound the work, and so does an optional ``deadline`` (a
``time.monotonic()`` value: no model call starts after it); hitting one is reported in the result
(``capped``), which holds what was found until then.

Knows nothing of tasks, grids or augmentations: it maps a prompt's token ids to completions.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.decoding import (AnswerSpace, Completion, SearchResult, answer_log_probs, deadline_passed, new_cache,
                              rewind_cache)
from arc_kit.settings import SamplerSettings


@dataclass(frozen=True)
class DfsSettings:
    """The search's bounds; the defaults are the sampler's (``settings.SamplerSettings``: the paper's T = 9%)."""

    threshold: float = SamplerSettings().threshold  # minimum probability of a returned answer
    max_forward_calls: int = SamplerSettings().max_forward_calls  # single-token model calls before it stops

    def __post_init__(self):
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be a probability in (0, 1], got {self.threshold}")


class Frontier:
    """One search's open branches, current path and finds; the part of DFS that never touches the model.

    ``dfs_search`` and ``batched_dfs.batched_dfs_search`` (one frontier per lane) share it, so both
    push, prune and record children in exactly the same order.
    """

    def __init__(self, space: AnswerSpace, max_nll: float):
        self.space, self.max_nll = space, max_nll
        self.completions: list[Completion] = []
        self.stack: list[tuple[int, int, float]] = []  # (depth of the parent, token, NLL with the token)
        self.dropped: Counter = Counter()
        self.path: list[int] = []

    def expand(self, depth: int, nll: float, increment: np.ndarray, skip: int | None = None) -> None:
        """Record the eos child, push the other children within the threshold (best on top)."""
        eos = self.space.eos_id
        totals = nll + increment
        children = []
        for token in np.flatnonzero(totals <= self.max_nll):
            token = int(token)
            if token == eos:
                self.completions.append(Completion(tuple(self.path[:depth]) + (eos,), float(totals[token])))
            elif token == skip:
                continue
            elif depth + 1 < self.space.max_length:  # room is left for at least the eos
                children.append((float(totals[token]), token))
            else:
                self.dropped["max length"] += 1
        children.sort(reverse=True)  # worst first, so the most probable child is popped next
        self.stack.extend((depth, token, total) for total, token in children)

    def walk_guess(self, guess: Sequence[int], increments: np.ndarray) -> int:
        """Expand along the guess, whose distributions ``increments[d]`` are known; the depth followed.

        Siblings wait on the stack; the path ends as the followed part of the guess.
        """
        nll, depth = 0.0, 0
        while True:
            increment = increments[depth]
            token = guess[depth] if depth < len(guess) else None
            follow = (token is not None and token != self.space.eos_id and nll + increment[token] <= self.max_nll
                      and depth + 1 < self.space.max_length)
            self.expand(depth, nll, increment, skip=token if follow else None)
            if not follow:
                return depth
            self.path.append(token)
            nll += float(increment[token])
            depth += 1

    def pop(self) -> tuple[int, int, float]:
        """The next branch (depth of its parent, token, NLL); the path is cut back to its parent."""
        depth, token, total = self.stack.pop()
        del self.path[depth:]
        return depth, token, total


DEADLINE_BEFORE_START = "deadline passed before the search started"


def deadline_message(branches: int) -> str:
    """What ``capped`` says of a search stopped by its deadline."""
    return f"deadline reached with {branches} branches left"


def clean_guess(guess: Sequence[int] | None, space: AnswerSpace) -> list[int]:
    """A guess as a list of ints, cut to the longest answer and after its first eos."""
    guess = [] if guess is None else [int(t) for t in guess][: space.max_length]  # a list or an array
    if space.eos_id in guess:
        guess = guess[: guess.index(space.eos_id) + 1]
    return guess


def dfs_search(model, prompt_ids: Sequence[int], space: AnswerSpace, settings: DfsSettings = DfsSettings(),
               guess: Sequence[int] | None = None, *, deadline: float | None = None) -> SearchResult:
    """Every answer with probability >= ``settings.threshold`` after ``prompt_ids``, best first.

    Past ``deadline`` (``time.monotonic()``) no model call starts: the answers found so far come
    back, ``capped`` says so (with no call at all when it had passed before the search began).
    """
    import torch

    started = time.monotonic()
    if deadline_passed(deadline):
        return SearchResult([], capped=DEADLINE_BEFORE_START)
    device = next(model.parameters()).device
    guess = clean_guess(guess, space)
    prompt_length = len(prompt_ids)
    ids = torch.tensor([*map(int, prompt_ids), *guess], dtype=torch.long, device=device)[None]
    with torch.no_grad():
        output = model(input_ids=ids, past_key_values=new_cache(model), use_cache=True)
    cache = output.past_key_values
    mask = space.mask(output.logits.shape[-1], device)
    # increments[d][t]: NLL of token t after the prompt and guess[:d]
    increments = (-answer_log_probs(output.logits[0, prompt_length - 1:], mask, space.probabilities)
                  ).double().cpu().numpy()

    frontier = Frontier(space, -math.log(settings.threshold))
    frontier.walk_guess(guess, increments)  # its distributions are already computed

    forward_calls, capped = 0, None
    with torch.no_grad():
        while frontier.stack:
            if forward_calls >= settings.max_forward_calls:
                capped = (f"forward-call cap of {settings.max_forward_calls} reached with "
                          f"{len(frontier.stack)} branches left")
                break
            if deadline_passed(deadline):
                capped = deadline_message(len(frontier.stack))
                break
            depth, token, total = frontier.pop()
            rewind_cache(cache, prompt_length + depth)
            output = model(input_ids=torch.tensor([[token]], device=device), past_key_values=cache, use_cache=True)
            cache = output.past_key_values
            forward_calls += 1
            frontier.path.append(token)
            increment = (-answer_log_probs(output.logits[0, -1], mask, space.probabilities)).double().cpu().numpy()
            frontier.expand(depth + 1, total, increment)
    return SearchResult(frontier.completions, forward_calls=forward_calls,
                        tokens_processed=ids.shape[1] + forward_calls, seconds=time.monotonic() - started,
                        capped=capped, dropped=dict(frontier.dropped))
