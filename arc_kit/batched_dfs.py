"""Depth-first search over several prompts at once: one lane per prompt, one decode step for all live lanes.

Each lane is the search of ``dfs.dfs_search`` (the same ``dfs.Frontier``: same threshold, same
pruning, same order of exploration, its own optional guess), so each lane returns what
``dfs_search`` returns for its prompt, NLLs equal up to float rounding. What is shared is the
model call: every step feeds the next token of every live lane in one batched forward.

The KV cache is one batched dynamic cache. Prompts (each with its guess) are run one at a time,
exactly as ``dfs_search`` runs them, and stacked right-padded to a common width. After that every
step appends one column for all lanes; a lane's *valid* columns are its prompt and the columns of
its current path, and an attention mask (``valid``) hides the rest: padding, the unfollowed part
of its guess, and the branches it has left. Rewinding a lane therefore moves no memory; it only
marks columns invalid. Positions are given per lane (prompt length + depth), so a token sees the
same keys at the same rotary positions as in the single search. When the abandoned columns
outnumber the live ones, the cache is compacted (each lane's path gathered behind the prompts).
A lane whose stack is empty, or which reaches the forward-call cap (per lane, as in
``dfs_search``), leaves the batch. A ``deadline`` (``time.monotonic()``) is the whole call's: once it
has passed no model call starts, and every lane returns what it found so far, saying so in ``capped``.

Knows nothing of tasks, grids or augmentations: it maps prompts' token ids to completions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from arc_kit.decoding import (AnswerSpace, SearchResult, answer_log_probs, deadline_passed, gather_cache, new_cache,
                              stack_caches)
from arc_kit.dfs import DEADLINE_BEFORE_START, DfsSettings, Frontier, clean_guess, deadline_message

COMPACTION_SLACK = 64  # abandoned columns tolerated beyond the longest live path before compacting


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
                       deadline: float | None = None) -> list[SearchResult]:
    """``dfs_search`` of each prompt (with its guess), all searched together; one result per prompt.

    ``seconds`` of a result is the time from the start until its lane left the batch;
    ``settings.max_forward_calls`` caps each lane's own steps. Past ``deadline`` no model call starts
    (a lane whose first pass never ran returns no answers, ``capped`` saying why).
    """
    import torch

    started = time.monotonic()
    device = next(model.parameters()).device
    guesses = list(guesses) if guesses is not None else [None] * len(prompts)
    if len(guesses) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(guesses)} guesses")
    if not prompts:
        return []
    max_nll = -math.log(settings.threshold)

    # The first pass, lane by lane, as dfs_search makes it: the cache and the guess's distributions.
    lanes, caches, mask = [], [], None
    with torch.no_grad():
        for prompt_ids, guess in zip(prompts, guesses):
            if deadline_passed(deadline):
                break
            guess = clean_guess(guess, space)
            ids = torch.tensor([*map(int, prompt_ids), *guess], dtype=torch.long, device=device)[None]
            output = model(input_ids=ids, past_key_values=new_cache(model), use_cache=True)
            if mask is None:
                mask = space.mask(output.logits.shape[-1], device)
            increments = (-answer_log_probs(output.logits[0, len(prompt_ids) - 1:], mask, space.probabilities)
                          ).double().cpu().numpy()
            lane = _Lane(len(prompt_ids), ids.shape[1], Frontier(space, max_nll))
            followed = lane.frontier.walk_guess(guess, increments)
            lane.columns = list(range(lane.prompt_length, lane.prompt_length + followed))
            lanes.append(lane)
            caches.append(output.past_key_values)
            del output
    if len(lanes) < len(prompts):  # the deadline came during the first passes: no step is taken
        for lane in lanes:
            _still_searching(lane, settings, started, out_of_time=True)
        return ([_result(lane) for lane in lanes]
                + [SearchResult([], capped=DEADLINE_BEFORE_START) for _ in prompts[len(lanes):]])
    width = max(lane.sequence_length for lane in lanes)
    cache = stack_caches(model, caches, width)
    del caches
    valid = torch.zeros((len(lanes), width), dtype=torch.bool)  # on the CPU; rows follow `live`
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
                rows = torch.tensor(keep, dtype=torch.long)
                cache = gather_cache(model, cache, rows.to(device))
                valid = valid[rows]
                live = [live[row] for row in keep]
            length = valid.shape[1]
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
            valid = torch.cat([valid, torch.zeros((len(live), 1), dtype=torch.bool)], dim=1)
            valid[:, length] = True
            output = model(input_ids=torch.tensor(tokens, device=device)[:, None],
                           attention_mask=valid.to(device=device, dtype=torch.long),
                           position_ids=torch.tensor(positions, device=device)[:, None],
                           past_key_values=cache, use_cache=True)
            cache = output.past_key_values
            increments = (-answer_log_probs(output.logits[:, -1], mask, space.probabilities)).double().cpu().numpy()
            for row, index in enumerate(live):
                lane = lanes[index]
                depth, total = lane.pending
                lane.frontier.expand(depth + 1, total, increments[row])
            longest = max(len(lanes[index].columns) for index in live)
            if valid.shape[1] - width > 2 * longest + COMPACTION_SLACK:
                cache, valid = _compact(model, cache, [lanes[index] for index in live], width, longest)

    return [_result(lane) for lane in lanes]


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


def _compact(model, cache, lanes: list[_Lane], width: int, longest: int):
    """The cache with each lane's path moved to the columns right after the prompts; the new mask."""
    import torch

    columns = torch.zeros((len(lanes), width + longest), dtype=torch.long)
    valid = torch.zeros((len(lanes), width + longest), dtype=torch.bool)
    columns[:, :width] = torch.arange(width)
    for row, lane in enumerate(lanes):
        columns[row, width:width + len(lane.columns)] = torch.tensor(lane.columns, dtype=torch.long)
        valid[row, :lane.prompt_length] = True
        valid[row, width:width + len(lane.columns)] = True
        lane.columns = list(range(width, width + len(lane.columns)))
    device = next(model.parameters()).device
    rows = torch.arange(len(lanes), device=device)
    return gather_cache(model, cache, rows, columns), valid
