"""Depth-first search for every answer whose probability is at least a threshold (paper, Appendix A).

The search works in negative log-probabilities: a branch is pruned as soon as its summed NLL
exceeds ``-ln(threshold)``, so every answer with probability >= threshold is returned, and nothing
else (at most ``1 / threshold`` answers). It runs on an explicit stack, not recursion, on a decode
engine (``engine.DecodeEngine``) whose lane holds the current path only (the memory of
greedy decoding): going back to a branch point feeds the next token at the branch's position,
which is the engine's rewind; the prompt is never recomputed.

``search_lanes`` runs several such searches together, one engine lane per prompt, one engine step
for all live lanes (``batched_dfs`` groups its prompts and handles memory); ``dfs_search`` is its
one-lane case. Each lane has its own ``Frontier``, so every lane explores exactly as a search alone.

An optional *guess* (the best answer found so far under another augmentation, mapped into this
one's frame) is fed together with the prompt in one forward pass, which yields the cache and the
distribution at every position of the guess at once; its path is explored first. An optional
*draft source* per prompt (``drafts.DraftSource``) makes the search speculative: each step feeds a
lane its branch's token and a draft of at most ``settings.draft_tokens`` tokens (``DecodeEngine.step_runs``),
and the draft is walked as the guess is (``Frontier.walk``): each token followed while it keeps the
path within the threshold, the siblings at every position pushed as ``expand`` pushes them. Every
position walked is one the search explores anyway, so the answers and their NLLs are the same as
without drafts; only the order of exploration changes (which matters only where a cap or the
deadline cuts the search short: a step with a draft counts as one forward call). The positions after
the first refused draft token are wasted; the next step at the lane overwrites them. Only answer tokens
are walked (a path through any other token can never spell a grid, so pruning it is exact); their
NLLs are the space's (``answers.answer_log_probs``: the full softmax by default). Caps on the answer
length and on the number of forward calls bound the work, and so does an optional ``deadline`` (a
``time.monotonic()`` value: no model call starts after it); hitting one is reported in the result
(``capped``), which holds what was found until then.

Knows nothing of tasks, grids, augmentations or the model under the engine: it maps a prompt's
token ids to completions.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

from arc_kit.method.answers import AnswerSpace, Completion, SearchResult, deadline_passed
from arc_kit.method.drafts import DraftSource
from arc_kit.method.engine import BatchLimit, DecodeEngine
from arc_kit.method.engines import as_engine
from arc_kit.settings import SamplerSettings

SPARE_POSITIONS = 256  # room asked of the engine after the longest prompt and guess (it grows when paths need more)


class Frontier:
    """One search's open branches, current path and finds; the part of DFS that never touches the model.

    ``dfs_search`` and ``batched_dfs.batched_dfs_search`` (one frontier per lane) share it, so both
    push, prune and record children in exactly the same order.
    """

    def __init__(self, space: AnswerSpace, max_nll: float):
        self.space, self.max_nll = space, max_nll
        self.allowed = frozenset(space.allowed_ids)
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

    def walk(self, tokens: Sequence[int], increments: Sequence[np.ndarray], depth: int = 0, nll: float = 0.0) -> int:
        """Expand along ``tokens`` (a guess or a draft) from ``depth``; how many of its tokens were followed.

        ``increments[j]``: the distribution after the path's first ``depth`` tokens and ``tokens[:j]``
        (one more row than tokens: they are known already); ``nll``: the path's NLL at ``depth``. A
        token is followed while it keeps the path within the threshold (and room is left for an eos
        after it), the siblings waiting on the stack; the path ends as the followed part.
        """
        for followed, increment in enumerate(increments):
            token = tokens[followed] if followed < len(tokens) else None
            follow = (token is not None and token != self.space.eos_id and nll + increment[token] <= self.max_nll
                      and depth + 1 < self.space.max_length)
            self.expand(depth, nll, increment, skip=token if follow else None)
            if not follow:
                return followed
            self.path.append(token)
            nll += float(increment[token])
            depth += 1
        return len(increments)

    def walk_guess(self, guess: Sequence[int], increments: np.ndarray) -> int:
        """Expand along the guess, whose distributions ``increments[d]`` are known; the depth followed.

        Siblings wait on the stack; the path ends as the followed part of the guess.
        """
        return self.walk(guess, increments)

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


def dfs_search(engine, prompt_ids: Sequence[int], space: AnswerSpace, settings: SamplerSettings = SamplerSettings(),
               guess: Sequence[int] | None = None, *, deadline: float | None = None,
               drafts: DraftSource | None = None) -> SearchResult:
    """Every answer with probability >= ``settings.threshold`` after ``prompt_ids``, best first.

    ``settings``: the sampler's own (its ``threshold``, ``max_forward_calls`` and ``draft_tokens``
    bound the search; the default is the paper's T = 9%). ``engine``: a ``DecodeEngine`` (or a
    model: ``engines.as_engine``). Past ``deadline`` (``time.monotonic()``) no model call starts:
    the answers found so far come back, ``capped`` says so (with no call at all when it had passed
    before the search began). ``drafts``: where each step's draft comes from (none: one token per
    step); the same answers either way.
    """
    return search_lanes(as_engine(engine), [prompt_ids], [clean_guess(guess, space)], space, settings,
                        time.monotonic(), deadline, drafts=[drafts])[0]


class _Lane:
    """One prompt's search among the lanes: its frontier and its counts."""

    def __init__(self, prompt_length: int, sequence_length: int, frontier: Frontier, drafts: DraftSource | None):
        self.prompt_length = prompt_length  # the path's token at depth d is fed at position prompt_length + d
        self.sequence_length = sequence_length  # prompt and guess, as fed in the first pass
        self.frontier = frontier
        self.drafts = drafts
        self.forward_calls = 0  # steps
        self.draft_tokens = 0  # draft tokens fed
        self.draft_accepted = 0  # draft tokens followed: positions that cost no step of their own
        self.capped: str | None = None
        self.seconds = 0.0
        self.pending: tuple[int, float, list[int]] = (0, 0.0, [])  # (depth, NLL) of the branch fed, and its draft
        self.answers_told = 0  # completions the draft source has been told of

    def draft(self, depth: int, limit: int) -> list[int]:
        """The draft after the path (its branch at ``depth`` just taken), cut to what a walk could follow:
        answer tokens before any eos, at most ``limit``, none past the room left for an eos."""
        space = self.frontier.space
        room = min(limit, space.max_length - depth - 2)
        if self.drafts is None or room <= 0:
            return []
        draft = []
        for token in self.drafts.propose(self.frontier.path, room)[:room]:
            token = int(token)
            if token == space.eos_id or token not in self.frontier.allowed:
                break
            draft.append(token)
        return draft

    def tell_answers(self) -> None:
        """Tell the draft source of the answers found since it was last told."""
        completions = self.frontier.completions
        if self.drafts is not None:
            for completion in completions[self.answers_told:]:
                self.drafts.found(completion.ids)
        self.answers_told = len(completions)


def search_lanes(engine: DecodeEngine, prompts: Sequence[Sequence[int]], guesses: list[list[int]], space: AnswerSpace,
                 settings: SamplerSettings, started: float, deadline: float | None,
                 limit: BatchLimit | None = None,
                 drafts: Sequence[DraftSource | None] | None = None) -> list[SearchResult]:
    """``dfs_search`` of each prompt (with its cleaned guess and its draft source), all on one engine's lanes.

    One result per prompt. Each lane's first pass (prompt and guess in one forward) is made alone,
    as a single search makes it; then every step feeds each live lane its next branch's token and
    that branch's draft. A lane whose stack is empty, or which reached its forward-call cap, leaves
    (``keep_lanes``). ``deadline`` is the whole call's; ``seconds`` of a result is the time from
    ``started`` until its lane left. ``limit`` goes to the engine (``DecodeEngine.start``).
    """
    max_nll = -math.log(settings.threshold)
    drafts = list(drafts) if drafts is not None else [None] * len(prompts)
    width = max(len(prompt) + len(guess) for prompt, guess in zip(prompts, guesses))
    engine.start(len(prompts), width + SPARE_POSITIONS, space, limit)
    try:
        lanes = _first_passes(engine, prompts, guesses, drafts, space, max_nll, deadline)
        if len(lanes) < len(prompts):  # the deadline came during the first passes: no step is taken
            for lane in lanes:
                _still_searching(lane, settings, started, out_of_time=True)
            return ([_result(lane) for lane in lanes]
                    + [SearchResult([], capped=DEADLINE_BEFORE_START) for _ in prompts[len(lanes):]])
        _steps(engine, lanes, settings, started, deadline)
    finally:
        engine.release()
    return [_result(lane) for lane in lanes]


def _first_passes(engine: DecodeEngine, prompts, guesses, drafts, space: AnswerSpace, max_nll: float,
                  deadline: float | None) -> list[_Lane]:
    """Each lane's prompt and guess in one pass, lane by lane, until the deadline; the lanes made."""
    lanes = []
    for lane_index, (prompt_ids, guess, source) in enumerate(zip(prompts, guesses, drafts)):
        if deadline_passed(deadline):
            break
        ids = [*map(int, prompt_ids), *guess]
        # increments[d][t]: NLL of token t after the prompt and guess[:d]
        increments = engine.prefill(lane_index, ids, len(prompt_ids))
        lane = _Lane(len(prompt_ids), len(ids), Frontier(space, max_nll), source)
        lane.frontier.walk_guess(guess, increments)  # its distributions are already computed
        lane.tell_answers()
        lanes.append(lane)
    return lanes


def _steps(engine: DecodeEngine, lanes: list[_Lane], settings: SamplerSettings, started: float,
           deadline: float | None) -> None:
    """Step every live lane until none is left (each lane's branch, the most probable first, per step)."""
    live = list(range(len(lanes)))  # the lane of each engine lane
    while True:
        out_of_time = deadline_passed(deadline)
        keep = [row for row, index in enumerate(live) if _still_searching(lanes[index], settings, started, out_of_time)]
        if len(keep) < len(live):  # lanes that finished leave
            if not keep:
                return
            engine.keep_lanes(keep)
            live = [live[row] for row in keep]
        runs, positions = [], []
        for index in live:
            lane = lanes[index]
            depth, token, total = lane.frontier.pop()
            lane.frontier.path.append(token)
            draft = lane.draft(depth, settings.draft_tokens)
            lane.forward_calls += 1
            lane.draft_tokens += len(draft)
            runs.append([token, *draft])
            positions.append(lane.prompt_length + depth)  # everything the lane held from here on is forgotten
            lane.pending = (depth, total, draft)
        if all(len(run) == 1 for run in runs):  # no drafts: the one-token step
            increments = [row[None] for row in engine.step([run[0] for run in runs], positions)]
        else:  # each lane's distributions after its branch's token and after each draft token
            increments = engine.step_runs(runs, positions)
        for row, index in enumerate(live):
            lane = lanes[index]
            depth, total, draft = lane.pending
            lane.draft_accepted += lane.frontier.walk(draft, increments[row], depth + 1, total)
            lane.tell_answers()


def _result(lane: _Lane) -> SearchResult:
    return SearchResult(lane.frontier.completions, forward_calls=lane.forward_calls,
                        tokens_processed=lane.sequence_length + lane.forward_calls + lane.draft_tokens,
                        seconds=lane.seconds, capped=lane.capped, dropped=dict(lane.frontier.dropped),
                        draft_tokens=lane.draft_tokens, draft_accepted=lane.draft_accepted)


def _still_searching(lane: _Lane, settings: SamplerSettings, started: float, out_of_time: bool) -> bool:
    """Whether the lane has a branch to explore within its cap and time; if not, it is finished (and timed)."""
    within_cap = lane.forward_calls < settings.max_forward_calls
    if lane.frontier.stack and within_cap and not out_of_time:
        return True
    if lane.frontier.stack:  # the call cap first, then the deadline
        lane.capped = (deadline_message(len(lane.frontier.stack)) if within_cap else
                       f"forward-call cap of {settings.max_forward_calls} reached with "
                       f"{len(lane.frontier.stack)} branches left")
    lane.seconds = time.monotonic() - started
    return False
