"""Depth-first search over several prompts at once: one engine lane per prompt, one decode step for all live lanes.

Each lane is the search of ``dfs.dfs_search`` (the same ``dfs.Frontier``: same threshold, same
pruning, same order of exploration, its own optional guess and draft source), so each lane returns
what ``dfs_search`` returns for its prompt, NLLs equal up to float rounding. What is shared is the
model call: every step feeds the next token (and its draft) of every live lane in one engine step
(``dfs.search_lanes``). How the lanes' keys and values are held, rewound and compacted is the
engine's business (``engine``). A ``deadline`` (``time.monotonic()``) is the whole call's:
once it has passed no model call starts, and every lane returns what it found so far, saying so in
``capped``.

Memory: the lanes of one call are searched in groups of at most ``limit.size`` (all at first), one
group after another. An out-of-memory error halves the limit (``engine.with_halving``): an engine
that splits its steps (the reference) first makes the step again in smaller calls; an error
anywhere else, or with one lane per call, starts the group again as smaller groups, down to one
lane (a sequential search). The results are the same whatever the sizes.

Knows nothing of tasks, grids or augmentations: it maps prompts' token ids to completions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from arc_kit.method.answers import AnswerSpace, SearchResult
from arc_kit.method.dfs import clean_guess, search_lanes
from arc_kit.method.drafts import DraftSource
from arc_kit.method.engine import BatchLimit, with_halving
from arc_kit.method.engines import as_engine
from arc_kit.settings import SamplerSettings


def batched_dfs_search(engine, prompts: Sequence[Sequence[int]], space: AnswerSpace,
                       settings: SamplerSettings = SamplerSettings(),
                       guesses: Sequence[Sequence[int] | None] | None = None, *,
                       deadline: float | None = None, limit: BatchLimit | None = None,
                       drafts: Sequence[DraftSource | None] | None = None) -> list[SearchResult]:
    """``dfs_search`` of each prompt (its guess, its draft source), all searched together; one result per prompt.

    ``engine``: a ``DecodeEngine`` (or a model: ``engines.as_engine``). ``seconds`` of a result is
    the time from the start until its lane left the batch; ``settings.max_forward_calls`` caps each
    lane's own steps. Past ``deadline`` no model call starts (a lane whose first pass never ran
    returns no answers, ``capped`` saying why). ``limit``: the most lanes held and fed together
    (none at first), halved on out-of-memory errors; it ends as the size that fitted. ``drafts``: one
    source (or None) per prompt; a group started again after an out-of-memory error keeps what its
    sources learnt (proposals only: the answers are the same).
    """
    started = time.monotonic()
    guesses = list(guesses) if guesses is not None else [None] * len(prompts)
    if len(guesses) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(guesses)} guesses")
    drafts = list(drafts) if drafts is not None else [None] * len(prompts)
    if len(drafts) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(drafts)} draft sources")
    if not prompts:
        return []
    engine = as_engine(engine)
    guesses = [clean_guess(guess, space) for guess in guesses]
    limit = limit if limit is not None else BatchLimit("lanes")
    results: list[SearchResult] = []
    while len(results) < len(prompts):
        done = len(results)
        results += with_halving(limit, len(prompts) - done, lambda size, start=done: search_lanes(
            engine, prompts[start:start + size], guesses[start:start + size], space, settings, started, deadline,
            limit, drafts[start:start + size]))
    return results
