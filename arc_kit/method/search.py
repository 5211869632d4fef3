"""The one search: depth-first search over lanes for every answer above a probability threshold (paper, Appendix A).

``search(engine, prompts, space, settings, guesses, drafts=, deadline=)`` searches each prompt as one
lane of the engine (a prompt alone is one lane) and returns a ``SearchResult`` per prompt. It works in
negative log-probabilities: a branch is pruned once its summed NLL exceeds ``-ln(threshold)``, so
every answer with probability >= threshold is returned, and nothing else. Each lane has its own
``Frontier`` (an explicit stack) and holds only its current path in the engine: going back to a
branch point feeds the next token at the branch's position, which is the engine's rewind. Every step
feeds each live lane its next branch in one engine call; a lane whose stack is empty or which
reached its forward-call cap leaves (``keep_lanes``).

A *guess* per prompt (the best answer so far under another augmentation, in this one's frame) is fed
with the prompt in one pass, which gives the distribution at every position of it at once; its path
is explored first. A *draft source* per prompt (``drafts.DraftSource``) makes the search speculative:
a step feeds a lane its branch's token and a draft of at most ``settings.draft_tokens`` tokens, and
the draft is walked as the guess is (``Frontier.walk``): each token followed while it is a child the
search would push, the siblings pushed as ``expand`` pushes them. Every position walked is one the
search explores anyway: the answers and NLLs are the same without drafts; only the order changes
(which matters only where a cap or the deadline cuts a search short: a step counts as one forward
call however long its draft). Only answer tokens are walked (no path through another can spell a
grid); their NLLs are the space's (``answers.answer_log_probs``). With ``settings.drafts`` "auto"
each step's draft lengths are chosen by cost (``step_costs.draft_lengths``): the engine's measured
costs of a step (``step_costs``, timed once its lanes are prefilled) against each draft token's
chance of being followed, counted over the lanes by the support its source gave it
(``step_costs.DraftOdds``, kept by the caller from search to search); otherwise every draft is fed whole.

Greedy decoding (``settings.kind`` "greedy") is the same search with one child per branch point, the
most probable token, and no threshold: under the full softmax chosen over the whole vocabulary (as
transformers' greedy ``generate`` chooses; a token outside the answer alphabet makes the NLL
infinite: it fails to decode), under "answer-mask" over the answer tokens.

Caps on the answer length and on each lane's steps bound the work, and so does a ``deadline`` (a
``time.monotonic()`` value: no model call starts after it); hitting one is said in the result
(``capped``), with what was found until then. Memory: lanes are searched in groups of at most
``limit.size`` (all at first); an out-of-memory error halves it (``answers.with_halving``) and starts
the group again as smaller groups, down to one lane; the results are the same whatever the sizes.

Knows nothing of tasks, grids, augmentations or the model under the engine: it maps token ids to completions.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from arc_kit.method.answers import AnswerSpace, BatchLimit, Completion, SearchResult, deadline_passed, with_halving
from arc_kit.method.drafts import DraftSource
from arc_kit.method.step_costs import PROBE_WIDTH, DraftOdds, StepCosts, draft_lengths
from arc_kit.settings import SEARCH_KINDS, SamplerSettings

SPARE_POSITIONS = 256  # room asked of the engine after the longest prompt and guess (it grows when paths need more)

DEADLINE_BEFORE_START = "deadline passed before the search started"


class Frontier:
    """One search's open branches, current path and finds; the part of the search that never touches the model."""

    def __init__(self, space: AnswerSpace, max_nll: float, greedy: bool = False):
        self.space, self.max_nll, self.greedy = space, max_nll, greedy
        self.allowed = frozenset(space.allowed_ids)
        self.completions: list[Completion] = []
        self.stack: list[tuple[int, int, float]] = []  # (depth of the parent, token, NLL with the token)
        self.dropped: Counter = Counter()
        self.path: list[int] = []

    def children(self, nll: float, increment: np.ndarray) -> dict[int, float]:
        """{token: the path's NLL with it} of the tokens worth following from here."""
        if self.greedy:  # the first of the most probable, as torch's argmax; a token no answer holds costs inf
            token = int(np.argmin(increment))
            return {token: nll + float(increment[token]) if token in self.allowed else math.inf}
        totals = nll + increment
        return {int(token): float(totals[token]) for token in np.flatnonzero(totals <= self.max_nll)}

    def expand(self, depth: int, children: dict[int, float], skip: int | None = None) -> None:
        """Record the eos child, push the other children (best on top), all but ``skip``."""
        eos, pushed = self.space.eos_id, []
        for token, total in children.items():
            if token == eos:
                self.completions.append(Completion(tuple(self.path[:depth]) + (eos,), total))
            elif token == skip:
                continue
            elif depth + 1 < self.space.max_length:  # room is left for at least the eos
                pushed.append((total, token))
            else:
                self.dropped["max length"] += 1
        pushed.sort(reverse=True)  # worst first, so the most probable child is popped next
        self.stack.extend((depth, token, total) for total, token in pushed)

    def walk(self, tokens: Sequence[int], increments: Sequence[np.ndarray], depth: int = 0, nll: float = 0.0) -> int:
        """Expand along ``tokens`` (a guess or a draft) from ``depth``; how many of its tokens were followed.

        ``increments[j]``: the distribution after the path's first ``depth`` tokens and ``tokens[:j]``
        (one more row than tokens: they are known already); ``nll``: the path's NLL at ``depth``. A
        token is followed while it is one of the children (within the threshold, and room is left for
        an eos after it), the siblings waiting on the stack; the path ends as the followed part.
        """
        for followed, increment in enumerate(increments):
            token = tokens[followed] if followed < len(tokens) else None
            children = self.children(nll, increment)
            follow = token is not None and token != self.space.eos_id and token in children \
                and depth + 1 < self.space.max_length
            self.expand(depth, children, skip=token if follow else None)
            if not follow:
                return followed
            self.path.append(token)
            nll = children[token]
            depth += 1
        return len(increments)

    def pop(self) -> tuple[int, int, float]:
        """The next branch (depth of its parent, token, NLL); the path is cut back to its parent."""
        depth, token, total = self.stack.pop()
        del self.path[depth:]
        return depth, token, total


def clean_guess(guess: Sequence[int] | None, space: AnswerSpace) -> list[int]:
    """A guess as a list of ints, cut to the longest answer and after its first eos."""
    guess = [] if guess is None else [int(t) for t in guess][: space.max_length]  # a list or an array
    if space.eos_id in guess:
        guess = guess[: guess.index(space.eos_id) + 1]
    return guess


@dataclass
class _Lane:
    """One prompt's search among the lanes: its frontier and its counts."""

    prompt_length: int  # the path's token at depth d is fed at position prompt_length + d
    sequence_length: int  # prompt and guess, as fed in the first pass
    frontier: Frontier
    drafts: DraftSource | None
    forward_calls: int = 0  # steps
    draft_tokens: int = 0  # draft tokens fed
    draft_accepted: int = 0  # draft tokens followed: positions that cost no step of their own
    capped: str | None = None
    pending: tuple[int, float, list[int], int] = (0, 0.0, [], 0)  # (depth, NLL) of the branch fed, its draft, support
    answers_told: int = 0  # completions the draft source has been told of

    def draft(self, depth: int, limit: int) -> tuple[list[int], int]:
        """The draft after the path (its branch at ``depth`` just taken) and its support, cut to what a walk could
        follow: answer tokens before any eos, at most ``limit``, none past the room left for an eos."""
        space = self.frontier.space
        room = min(limit, space.max_length - depth - 2)
        if self.drafts is None or room <= 0:
            return [], 0
        proposal, support = self.drafts.supported(self.frontier.path, room)
        return list(itertools.takewhile(lambda token: token != space.eos_id and token in self.frontier.allowed,
                                        map(int, proposal[:room]))), support

    def tell_answers(self) -> None:
        """Tell the draft source of the answers found since it was last told."""
        completions = self.frontier.completions
        if self.drafts is not None:
            for completion in completions[self.answers_told:]:
                self.drafts.found(completion.ids)
        self.answers_told = len(completions)


def search(engine, prompts: Sequence[Sequence[int]], space: AnswerSpace, settings: SamplerSettings = SamplerSettings(),
           guesses: Sequence[Sequence[int] | None] | None = None, *, drafts: Sequence[DraftSource | None] | None = None,
           deadline: float | None = None, limit: BatchLimit | None = None,
           odds: DraftOdds | None = None) -> list[SearchResult]:
    """Every answer with probability >= ``settings.threshold`` after each prompt (best first), or its greedy answer.

    ``engine``: an ``engine.Engine`` (or ``transformers_forward.TransformersDecoder``). ``settings``:
    the sampler's own (``kind`` dfs or greedy; the ``threshold``, ``max_forward_calls`` per lane and
    ``draft_tokens`` bound the search; the default is the paper's T = 9%; a guess is used only with
    ``use_guess``). ``guesses``, ``drafts``: one (or None) per prompt; a group started again after an
    out-of-memory error keeps what its sources learnt (proposals only: the answers are the same). Past
    ``deadline`` no model call starts (a lane whose first pass never ran returns no answers, ``capped``
    saying why). ``limit``: the most lanes held and fed together (none at first), halved on out-of-memory
    errors. ``odds``: what "auto" drafts learnt so far of how often draft tokens are followed (counted into;
    None: a fresh count).
    """
    if settings.kind not in SEARCH_KINDS:
        raise ValueError(f"the method searches by {' or '.join(SEARCH_KINDS)}, not {settings.kind!r} (the paper's "
                         "other samplers run in the samplers table)")
    guesses = list(guesses) if guesses is not None else [None] * len(prompts)
    drafts = list(drafts) if drafts is not None else [None] * len(prompts)
    for name, given in (("guesses", guesses), ("draft sources", drafts)):
        if len(given) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(given)} {name}")
    guesses = [clean_guess(guess, space) if settings.kind == "dfs" and settings.use_guess else []
               for guess in guesses]
    limit = limit if limit is not None else BatchLimit("lanes")
    odds = odds if odds is not None else DraftOdds()
    results: list[SearchResult] = []
    while len(results) < len(prompts):
        done = len(results)
        results += with_halving(limit, len(prompts) - done, lambda size, start=done: _search_lanes(
            engine, prompts[start:start + size], guesses[start:start + size], space, settings, deadline,
            drafts[start:start + size], odds))
    return results


def _search_lanes(engine, prompts: Sequence[Sequence[int]], guesses: list[list[int]], space: AnswerSpace,
                  settings: SamplerSettings, deadline: float | None,
                  drafts: Sequence[DraftSource | None], odds: DraftOdds) -> list[SearchResult]:
    """The search of each prompt (with its cleaned guess and its draft source) on the engine's lanes, one group: each
    lane's first pass (prompt and guess in one forward) alone, then steps of every live lane together."""
    greedy = settings.kind == "greedy"
    engine_space = space  # greedy under the full softmax chooses among every token: the engine gives all their NLLs
    if greedy and space.probabilities == "full":
        engine_space = AnswerSpace(tuple(range(engine.vocab_size)), space.eos_id, space.max_length, "full")
    max_nll = math.inf if greedy else -math.log(settings.threshold)
    width = max(len(prompt) + len(guess) for prompt, guess in zip(prompts, guesses))
    engine.start(len(prompts), width + SPARE_POSITIONS, engine_space)
    try:
        lanes = []
        for lane_index, (prompt_ids, guess, source) in enumerate(zip(prompts, guesses, drafts)):
            if deadline_passed(deadline):  # the deadline came during the first passes: no step is taken
                for lane in lanes:
                    _still_searching(lane, settings, out_of_time=True)
                return ([_result(lane) for lane in lanes]
                        + [SearchResult([], capped=DEADLINE_BEFORE_START) for _ in prompts[len(lanes):]])
            ids = [*map(int, prompt_ids), *guess]
            # increments[d][t]: NLL of token t after the prompt and guess[:d]
            increments = engine.prefill(lane_index, ids, len(prompt_ids))
            lane = _Lane(len(prompt_ids), len(ids), Frontier(space, max_nll, greedy), source)
            lane.frontier.walk(guess, increments)  # its distributions are already computed
            lane.tell_answers()
            lanes.append(lane)
        _steps(engine, lanes, settings, deadline, _step_costs(engine, lanes, settings, deadline), odds)
    finally:
        engine.release()
    return [_result(lane) for lane in lanes]


def _step_costs(engine, lanes: list[_Lane], settings: SamplerSettings, deadline: float | None) -> StepCosts | None:
    """The engine's costs of a step, for "auto" drafts (None: every draft is fed whole), measured at each lane's
    first position past its prompt and guess."""
    if settings.drafts != "auto" or not settings.draft_tokens or all(lane.drafts is None for lane in lanes) \
            or deadline_passed(deadline):  # no model call after the deadline
        return None
    return engine.step_costs([lane.sequence_length for lane in lanes], min(settings.draft_tokens + 1, PROBE_WIDTH))


def _steps(engine, lanes: list[_Lane], settings: SamplerSettings, deadline: float | None,
           costs: StepCosts | None, odds: DraftOdds) -> None:
    """Step every live lane until none is left (each lane's branch, the most probable first, per step), its drafts
    cut to ``draft_lengths`` under ``costs`` and ``odds`` (counted into; ``costs`` None: fed whole, not counted)."""
    live = list(range(len(lanes)))  # the lane of each engine lane
    while True:
        out_of_time = deadline_passed(deadline)
        keep = [row for row, index in enumerate(live) if _still_searching(lanes[index], settings, out_of_time)]
        if len(keep) < len(live):  # lanes that finished leave
            if not keep:
                return
            engine.keep_lanes(keep)
            live = [live[row] for row in keep]
        runs, positions = _branches(lanes, live, settings, costs, odds)
        # each lane's distributions after its branch's token and after each draft token
        for lane_rows, index in zip(engine.step(runs, positions), live):
            lane = lanes[index]
            depth, total, draft, support = lane.pending
            followed = lane.frontier.walk(draft, lane_rows, depth + 1, total)
            if costs is not None:
                odds.count(support, len(draft), followed)
            lane.draft_accepted += followed
            lane.tell_answers()


def _branches(lanes: list[_Lane], live: list[int], settings: SamplerSettings, costs: StepCosts | None,
              odds: DraftOdds) -> tuple[list[list[int]], list[int]]:
    """The runs (each live lane's next branch's token and its draft) and their positions of the next step."""
    branches = []
    for index in live:
        lane = lanes[index]
        depth, token, total = lane.frontier.pop()
        lane.frontier.path.append(token)
        branches.append((depth, token, total, *lane.draft(depth, settings.draft_tokens)))
    lengths = [len(branch[3]) for branch in branches] if costs is None else draft_lengths(
        costs, [odds.chances(support, len(draft)) for _, _, _, draft, support in branches])
    runs, positions = [], []
    for index, (depth, token, total, draft, support), length in zip(live, branches, lengths):
        lane = lanes[index]
        lane.forward_calls += 1
        lane.draft_tokens += length
        runs.append([token, *draft[:length]])
        positions.append(lane.prompt_length + depth)  # everything the lane held from here on is forgotten
        lane.pending = (depth, total, draft[:length], support)
    return runs, positions


def _result(lane: _Lane) -> SearchResult:
    return SearchResult(lane.frontier.completions, forward_calls=lane.forward_calls,
                        tokens_processed=lane.sequence_length + lane.forward_calls + lane.draft_tokens,
                        capped=lane.capped, dropped=dict(lane.frontier.dropped),
                        draft_tokens=lane.draft_tokens, draft_accepted=lane.draft_accepted)


def _still_searching(lane: _Lane, settings: SamplerSettings, out_of_time: bool) -> bool:
    """Whether the lane has a branch to explore within its cap and time; if not, it is finished."""
    within_cap = lane.forward_calls < settings.max_forward_calls
    if lane.frontier.stack and within_cap and not out_of_time:
        return True
    if lane.frontier.stack:  # the call cap first, then the deadline
        lane.capped = (f"{'deadline' if within_cap else f'forward-call cap of {settings.max_forward_calls}'} reached "
                       f"with {len(lane.frontier.stack)} branches left")
    return False
