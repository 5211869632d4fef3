"""Depth-first search over several prompts at once: one lane per prompt, one decode step for all live lanes.

Each lane is the search of ``dfs.dfs_search`` (the same ``dfs.Frontier``: same threshold, same
pruning, same order of exploration, its own optional guess), so each lane returns what
``dfs_search`` returns for its prompt, NLLs equal up to float rounding. What is shared is the
model call: every step feeds the next token of every live lane in one batched forward.

The KV cache is a ``decoding.LaneCache``: one row per lane, allocated once. Prompts (each with
its guess) are run one at a time, exactly as ``dfs_search`` runs them, each copied into its row as
soon as it is made (the peak is the batch and one prompt's cache). After that every step writes one
column for all lanes in place; a lane's *valid* columns are its prompt and the columns of its
current path, and an attention mask (``valid``) hides the rest: padding, the unfollowed part of
its guess, and the branches it has left. Rewinding a lane therefore moves no memory; it only marks
columns invalid. Positions are given per lane (prompt length + depth), so a token sees the same
keys at the same rotary positions as in the single search. When the columns run out, each lane's
path is moved behind the prompts (and the room doubled if the paths still fill half of it). A lane
whose stack is empty, or which reaches the forward-call cap (per lane, as in ``dfs_search``), leaves
the batch. A ``deadline`` (``time.monotonic()``) is the whole call's: once it has passed no model
call starts, and every lane returns what it found so far, saying so in ``capped``.

Memory: the lanes of one call are searched in groups of at most ``limit.size`` (all at first), one
group after another, and each step's model calls take at most that many lanes. An out-of-memory
error halves the limit (``decoding.with_halving``): in a step, the step is made again in smaller
calls; anywhere else, or with one lane per call, the group starts again as smaller groups, down to
one lane (a sequential search). The results are the same whatever the sizes.

Knows nothing of tasks, grids or augmentations: it maps prompts' token ids to completions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from arc_kit.decoding import (AnswerSpace, BatchLimit, LaneCache, SearchResult, answer_log_probs, deadline_passed,
                              new_cache, with_halving)
from arc_kit.dfs import DEADLINE_BEFORE_START, DfsSettings, Frontier, clean_guess, deadline_message

SPARE_COLUMNS = 256  # columns after the longest prompt for the lanes' paths at first (doubled when they crowd it)


class _Lane:
    """One prompt's search inside the batch: its frontier, its cache columns and its counts."""

    def __init__(self, prompt_length: int, sequence_length: int, frontier: Frontier):
        self.prompt_length = prompt_length  # the prompt fills columns [0, prompt_length)
        self.sequence_length = sequence_length  # prompt and guess, as fed in the first pass
        self.frontier = frontier
        self.columns: list[int] = []  # the cache column of each token of the current path
        self.forward_calls = 0
        self.capped: str | None = None
        self.seconds = 0.0
        self.pending: tuple[int, float] = (0, 0.0)  # (depth of the parent, NLL) of the token being fed


def batched_dfs_search(model, prompts: Sequence[Sequence[int]], space: AnswerSpace,
                       settings: DfsSettings = DfsSettings(),
                       guesses: Sequence[Sequence[int] | None] | None = None, *,
                       deadline: float | None = None, limit: BatchLimit | None = None) -> list[SearchResult]:
    """``dfs_search`` of each prompt (with its guess), all searched together; one result per prompt.

    ``seconds`` of a result is the time from the start until its lane left the batch;
    ``settings.max_forward_calls`` caps each lane's own steps. Past ``deadline`` no model call starts
    (a lane whose first pass never ran returns no answers, ``capped`` saying why). ``limit``: the most
    lanes held and fed together (none at first), halved on out-of-memory errors; it ends as the size
    that fitted.
    """
    started = time.monotonic()
    guesses = list(guesses) if guesses is not None else [None] * len(prompts)
    if len(guesses) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(guesses)} guesses")
    guesses = [clean_guess(guess, space) for guess in guesses]
    limit = limit if limit is not None else BatchLimit("lanes")
    results: list[SearchResult] = []
    while len(results) < len(prompts):
        done = len(results)
        results += with_halving(limit, len(prompts) - done, lambda size, start=done: _search_group(
            model, prompts[start:start + size], guesses[start:start + size], space, settings, started, deadline,
            limit))
    return results


def _search_group(model, prompts: Sequence[Sequence[int]], guesses: list[list[int]], space: AnswerSpace,
                  settings: DfsSettings, started: float, deadline: float | None, limit: BatchLimit
                  ) -> list[SearchResult]:
    """The lanes of ``prompts`` searched together in one ``LaneCache``, from their first passes on."""
    import torch

    device = next(model.parameters()).device
    max_nll = -math.log(settings.threshold)
    width = max(len(prompt) + len(guess) for prompt, guess in zip(prompts, guesses))
    cache = LaneCache(len(prompts), width + SPARE_COLUMNS)

    # The first pass, lane by lane, as dfs_search makes it: the cache and the guess's distributions.
    lanes, mask = [], None
    with torch.no_grad():
        for row, (prompt_ids, guess) in enumerate(zip(prompts, guesses)):
            if deadline_passed(deadline):
                break
            ids = torch.tensor([*map(int, prompt_ids), *guess], dtype=torch.long, device=device)[None]
            output = model(input_ids=ids, past_key_values=new_cache(model), use_cache=True)
            if mask is None:
                mask = space.mask(output.logits.shape[-1], device)
            increments = (-answer_log_probs(output.logits[0, len(prompt_ids) - 1:], mask, space.probabilities)
                          ).double().cpu().numpy()
            cache.put(row, output.past_key_values)
            del output
            lane = _Lane(len(prompt_ids), ids.shape[1], Frontier(space, max_nll))
            followed = lane.frontier.walk_guess(guess, increments)
            lane.columns = list(range(lane.prompt_length, lane.prompt_length + followed))
            lanes.append(lane)
    if len(lanes) < len(prompts):  # the deadline came during the first passes: no step is taken
        for lane in lanes:
            _still_searching(lane, settings, started, out_of_time=True)
        return ([_result(lane) for lane in lanes]
                + [SearchResult([], capped=DEADLINE_BEFORE_START) for _ in prompts[len(lanes):]])
    cache.length = width
    valid = torch.zeros((len(lanes), cache.capacity), dtype=torch.bool)  # on the CPU; rows follow `live`
    for row, lane in enumerate(lanes):
        valid[row, :lane.prompt_length] = True
        valid[row, lane.columns] = True
    live = list(range(len(lanes)))  # the lane of each cache row

    with torch.no_grad():
        while True:
            out_of_time = deadline_passed(deadline)
            keep = [row for row, index in enumerate(live)
                    if _still_searching(lanes[index], settings, started, out_of_time)]
            if len(keep) < len(live):  # lanes that finished leave the batch
                if not keep:
                    break
                cache.keep_rows(keep)
                valid = valid[keep]
                live = [live[row] for row in keep]
            if cache.length == cache.capacity:  # no column left for this step
                valid = _compact(cache, [lanes[index] for index in live], width)
            length = cache.length
            tokens, positions = [], []
            for row, index in enumerate(live):
                lane = lanes[index]
                depth, token, total = lane.frontier.pop()
                valid[row, lane.columns[depth:]] = False  # the rewind: the abandoned branch is hidden
                del lane.columns[depth:]
                lane.columns.append(length)
                lane.frontier.path.append(token)
                lane.forward_calls += 1
                tokens.append(token)
                positions.append(lane.prompt_length + depth)
                lane.pending = (depth, total)
            valid[:, length] = True
            step = (torch.tensor(tokens, device=device)[:, None], torch.tensor(positions, device=device)[:, None],
                    valid[:, :length + 1].to(device=device, dtype=torch.long))
            increments = with_halving(limit, len(live),
                                      lambda size, step=step: _step(model, cache, step, mask, space, size))
            cache.length += 1
            for row, index in enumerate(live):
                lane = lanes[index]
                depth, total = lane.pending
                lane.frontier.expand(depth + 1, total, increments[row])

    return [_result(lane) for lane in lanes]


def _step(model, cache: LaneCache, step: tuple, mask, space: AnswerSpace, size: int):
    """The next-token NLLs of every live row after feeding it ``step``'s token, ``size`` rows per model call.

    Safe to repeat: each call writes the same column of its rows.
    """
    import numpy as np

    tokens, positions, attention = step
    pieces = []
    for start in range(0, tokens.shape[0], size):
        rows = slice(start, min(start + size, tokens.shape[0]))
        output = model(input_ids=tokens[rows], attention_mask=attention[rows], position_ids=positions[rows],
                       past_key_values=cache.view(model, rows), use_cache=True)
        pieces.append((-answer_log_probs(output.logits[:, -1], mask, space.probabilities)).double().cpu().numpy())
        del output
    return np.concatenate(pieces)


def _result(lane: _Lane) -> SearchResult:
    return SearchResult(lane.frontier.completions, forward_calls=lane.forward_calls,
                        tokens_processed=lane.sequence_length + lane.forward_calls, seconds=lane.seconds,
                        capped=lane.capped, dropped=dict(lane.frontier.dropped))


def _still_searching(lane: _Lane, settings: DfsSettings, started: float, out_of_time: bool) -> bool:
    """Whether the lane has a branch to explore within its cap and time; if not, it is finished (and timed)."""
    within_cap = lane.forward_calls < settings.max_forward_calls
    if lane.frontier.stack and within_cap and not out_of_time:
        return True
    if lane.frontier.stack:  # the same precedence as dfs_search: the call cap, then the deadline
        lane.capped = (deadline_message(len(lane.frontier.stack)) if within_cap else
                       f"forward-call cap of {settings.max_forward_calls} reached with "
                       f"{len(lane.frontier.stack)} branches left")
    lane.seconds = time.monotonic() - started
    return False


def _compact(cache: LaneCache, lanes: list[_Lane], width: int):
    """Each lane's path moved to the columns right after the prompts, the room doubled first if the paths
    would fill half of it; the new mask. The first ``len(lanes)`` rows of ``cache`` are the lanes' rows, in order.
    """
    import torch

    longest = max(len(lane.columns) for lane in lanes)
    room = cache.capacity - width
    if 2 * longest >= room:  # one layer at a time; the finished lanes' rows are dropped on the way
        cache.grow(width + max(2 * room, longest + 1), rows=len(lanes))
    columns = torch.zeros((len(lanes), longest), dtype=torch.long)  # shorter paths padded with column 0 (masked)
    for row, lane in enumerate(lanes):
        columns[row, :len(lane.columns)] = torch.tensor(lane.columns, dtype=torch.long)
        lane.columns = list(range(width, width + len(lane.columns)))
    cache.move_columns(columns, width)
    valid = torch.zeros((len(lanes), cache.capacity), dtype=torch.bool)
    for row, lane in enumerate(lanes):
        valid[row, :lane.prompt_length] = True
        valid[row, lane.columns] = True
    return valid
