"""What an engine step costs, and how many draft tokens pay for it: the draft lengths of ``drafts`` "auto".

``StepCosts`` is an engine's model of one step's seconds, measured on its device by timed steps
(``engine.Engine.step_costs``): ``fixed`` per step, ``lane`` per lane fed, ``token`` per token
fed and ``slot`` per lane and position of the step's width (its longest run: what the runs padded
to it cost). The eager step feeds the runs ragged, so there a draft costs mostly its own tokens;
a compiled step computes its lane bucket times its run bucket whatever the runs (``buckets``), so
there only ``fixed`` and ``slot`` count. On the 2-core CPU a token costs a half to two thirds of what a
lane's share of a step does at 16 lanes; on a GPU a step is mostly fixed cost (docs/results.md).

``DraftOdds`` counts, over the lanes of one search, how often a draft token was followed, by its
*support*: how much of the path its source saw coming (``drafts.DraftSource.supported``) plus the
tokens of the draft followed before it, in classes 0, 1, 2-3, 4-7, ... (a source that keeps being
right is right more often). Before any count of its class, a token is taken to be followed (one of
one): so a search tries drafts, and learns from its first steps where they do not pay.

``draft_lengths(costs, chances)`` is the cap. A followed draft token saves its lane a step, worth
a step of one token a lane shared among the lanes; a fed one costs a token, and lengthening the
step's longest run a slot per lane. For each width of the step it feeds each lane the draft tokens
whose chance (``DraftOdds.chances``) times that saving exceeds a token's cost, and keeps the width
whose expected saving exceeds the step's extra cost by most. So a step of few lanes, or a device
that pays per step, gets long drafts; many lanes on a device that pays per token get short ones,
only where they are likely to be followed.

Whatever lengths it picks, the search's answers and NLLs are the same (``search``: a draft's tokens
are walked, never trusted); only the steps taken and their seconds change. Knows seconds and
chances; knows nothing of models, paths or tasks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

SUPPORT_CLASSES = 7  # supports 0, 1, 2-3, 4-7, 8-15, 16-31, 32 and more
PROBE_WIDTH = 4  # the run length of the widest timed step (``StepCosts.measured``): the costs are linear in it, and
# on the CPU at 16 lanes the probes at 8 cost 5 s, 40 steps' worth (docs/results.md)


def lane_bucket(count: int) -> int:
    """The next power of two: the rows of a cache that holds ``count`` lanes, the run length a compiled step pads
    ``count`` tokens to."""
    return 1 << max(0, int(count) - 1).bit_length()


@dataclass(frozen=True)
class StepCosts:
    """Seconds of one step (module docstring): ``fixed + lane * lanes + token * tokens + slot * lanes * width``."""

    fixed: float
    lane: float
    token: float
    slot: float
    buckets: bool = False  # a compiled step: lanes and width rounded up to powers of two, every slot computed

    def seconds(self, runs: Sequence[int]) -> float:
        """A step's seconds, feeding each lane a run of ``runs[i]`` tokens."""
        lanes, width = len(runs), max(runs, default=0)
        if self.buckets:
            lanes, width = lane_bucket(lanes), lane_bucket(width)
        return self.fixed + self.lane * lanes + self.token * sum(runs) + self.slot * lanes * width

    @classmethod
    def measured(cls, lanes: int, width: int, one: float, every: float, wide: float, one_wide: float | None,
                 buckets: bool = False) -> StepCosts:
        """The costs of timed steps of ``lanes`` lanes (negative terms, from noise, taken as 0): ``one``: one lane
        fed a token; ``every``: every lane a token; ``wide``: every lane ``width`` tokens; ``one_wide``: one lane
        ``width`` tokens, the others one. Compiled (``buckets``), only ``every`` and ``wide`` tell anything; with
        one lane, ``fixed`` holds ``lane`` and ``token`` holds ``slot`` (they are the same there)."""
        if buckets:
            rows, wide_rows = lane_bucket(lanes), lane_bucket(width)
            slot = max(wide - every, 0.0) / (rows * (wide_rows - 1))
            return cls(max(every - slot * rows, 0.0), 0.0, 0.0, slot, buckets=True)
        per_position = max(wide - every, 0.0) / (lanes * (width - 1))  # a token and its slot
        if lanes == 1 or one_wide is None:
            return cls(max(every - per_position, 0.0), 0.0, per_position, 0.0)
        token = min(max(wide - one_wide, 0.0) / ((lanes - 1) * (width - 1)), per_position)
        lane = max((every - one) / (lanes - 1) - per_position, 0.0)
        return cls(max(one - lane - per_position, 0.0), lane, token, per_position - token)

    @classmethod
    def timed(cls, step: Callable[[list[int]], object], lanes: int, width: int, compiled: bool) -> StepCosts:
        """``measured`` from timed steps of ``lanes`` live lanes, ``step(lengths)`` feeding row r a run of
        ``lengths[r]`` tokens: one lane and every lane fed a token, every lane ``width`` tokens, one lane ``width``
        and the others one (compiled, ``buckets``: only the second and third). Eagerly the best of two; compiled the
        best of three after one that builds the graph."""

        def seconds(lengths: list[int]) -> float:
            times = []
            for _ in range(4 if compiled else 2):  # eagerly a probe costs what a search's steps do: few
                started = time.perf_counter()
                step(lengths)
                times.append(time.perf_counter() - started)
            return min(times[1:] if compiled else times)

        one = 0.0 if compiled else seconds([1])
        every = one if lanes == 1 and not compiled else seconds([1] * lanes)
        wide = seconds([width] * lanes)
        one_wide = None if compiled or lanes == 1 else seconds([width] + [1] * (lanes - 1))
        return cls.measured(lanes, width, one, every, wide, one_wide, buckets=compiled)


class DraftOdds:
    """How often one search's draft tokens were followed, by support class (module docstring)."""

    def __init__(self):
        self.followed = np.ones(SUPPORT_CLASSES)  # before any count: one of one
        self.tried = np.ones(SUPPORT_CLASSES)

    @staticmethod
    def support_class(support: int) -> int:
        return min(int(support).bit_length(), SUPPORT_CLASSES - 1)

    def chances(self, support: int, length: int) -> list[float]:
        """The chance that a draft proposed with ``support`` is followed through each of its first ``length``
        tokens (never increasing)."""
        chance, chances = 1.0, []
        for offset in range(length):
            kind = self.support_class(support + offset)
            chance *= self.followed[kind] / self.tried[kind]
            chances.append(chance)
        return chances

    def count(self, support: int, fed: int, followed: int) -> None:
        """A draft of ``fed`` tokens proposed with ``support`` whose first ``followed`` were followed: each token up
        to the first one not followed was tried (those after it were never reached)."""
        for offset in range(min(followed + 1, fed)):
            kind = self.support_class(support + offset)
            self.tried[kind] += 1
            self.followed[kind] += offset < followed


def draft_lengths(costs: StepCosts, chances: Sequence[Sequence[float]]) -> list[int]:
    """How many tokens of its draft each lane of a step is fed (module docstring). ``chances[i]``: lane i's
    ``DraftOdds.chances`` for its whole draft."""
    lanes = len(chances)
    plain = costs.seconds([1] * lanes)
    saving = plain / lanes  # a lane's step, with its share of the step's fixed cost
    best, best_gain = [0] * lanes, 0.0
    for width in range(1, max((len(lane) for lane in chances), default=0) + 1):
        lengths = [sum(1 for chance in lane[:width] if chance * saving > costs.token) for lane in chances]
        saved = saving * sum(sum(lane[:length]) for lane, length in zip(chances, lengths))
        gain = saved - (costs.seconds([1 + length for length in lengths]) - plain)
        if gain > best_gain:
            best, best_gain = lengths, gain
    return best
