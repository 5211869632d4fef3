"""The decode engine's interface: what the searches and the scorer ask of a model, and nothing more.

A search holds *lanes*, one per prompt, numbered 0.. in the order they were started:
``start(lanes, capacity, space)`` makes room for them (``capacity``: positions per lane, a hint:
an engine grows it when a position needs more); ``prefill(lane, ids, logits_from)`` runs a lane's
prompt (and guess) and returns the next-token NLLs after each of ``ids[:logits_from]``,
``ids[:logits_from + 1]``, ... ``ids``; ``step(tokens, positions)`` feeds every live lane one token
at its position and returns each lane's next-token NLLs; ``step_runs(runs, positions)`` feeds each
live lane a run of tokens at consecutive positions from its own (a DFS branch's token and its
draft) and returns an NLL row after each token of each run, all lanes in one model call (``step``
is its case of runs of one token). A lane's tokens occupy positions 0, 1, ... in order, so feeding
a token at position p forgets everything the lane held at p and after: that is the DFS's rewind.
``keep_lanes(lanes)`` keeps the given live lanes (increasing), which become lanes 0.. in that
order; ``release()`` ends the search; ``steps`` counts the steps made. NLLs are
``-answer_log_probs`` under the space given to ``start`` (``answers.answer_log_probs``), as
float64 numpy rows.

Scoring: ``score(prompts, answers, space)`` gives the NLL of every answer after its prompt, each
prompt run once and its keys and values reused by all its answers, in as few batched calls as
memory allows (out of memory, the answers per call and then the prompts per call are halved:
``with_halving`` makes a call again with half the rows, ``BatchLimit``, down to one, and every
batched call of the searches does the same); an engine supplies the two calls it is made of, ``prompt_prefixes``
and ``nlls_after``.

``refresh()`` makes an engine read its model's weights again after they changed (a test-time
adapter trained, reset, enabled or disabled). ``model`` is the transformers model the engine reads
(the reference-only samplers, stochastic sampling and beam search, call its ``generate``).

Implementations: ``reference.engine.ReferenceEngine`` (transformers' forward and caches, the
trusted reference) and ``fast.static_engine.StaticEngine`` (the fast one); ``engines.make_engine``
chooses. Knows nothing of tasks, grids or which model family runs underneath.
"""

from __future__ import annotations

import gc
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from arc_kit.method.answers import AnswerSpace

logger = logging.getLogger(__name__)
T = TypeVar("T")


def out_of_memory_errors() -> tuple[type, ...]:
    """The errors of an allocation the accelerator could not make (``torch.OutOfMemoryError`` where it exists)."""
    import torch

    return tuple({torch.cuda.OutOfMemoryError, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)})


def release_memory() -> None:
    """Return what an interrupted model call left to the allocator (after an out-of-memory error)."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass
class BatchLimit:
    """The most rows one batched model call may take: any number at first, halved after each out-of-memory error.

    A caller that keeps one across calls never tries again a size that ran out of memory.
    """

    what: str  # what a row is, for the log: "lanes", "prompts", "answers"
    size: int | None = None  # None: as many as asked

    def take(self, wanted: int) -> int:
        return wanted if self.size is None else max(1, min(wanted, self.size))

    def halve(self, tried: int) -> None:
        """After ``tried`` rows ran out of memory: at most half as many from now on."""
        self.size = max(1, min(self.size or tried, tried // 2))
        logger.warning("out of memory with %d %s per model call; going on with %d", tried, self.what, self.size)


def with_halving(limit: BatchLimit, wanted: int, attempt: Callable[[int], T]) -> T:
    """``attempt(size)`` with ``size = limit.take(wanted)``, halved and tried again after an out-of-memory error.

    ``attempt`` must be safe to repeat. An error with one row is raised: nothing smaller is left to try.
    """
    while True:
        size = limit.take(wanted)
        try:
            return attempt(size)
        except out_of_memory_errors():
            if size <= 1:
                raise
        release_memory()  # outside the handler: the failed call's tensors are unreachable by now
        limit.halve(size)


class DecodeEngine(ABC):
    """Lanes of searches and batched scoring on one model (module docstring)."""

    kind: str = ""
    model = None
    steps: int = 0  # the steps made (calls of ``step`` or ``step_runs``, whatever the lanes or runs): a search's cost

    # -- lanes ---------------------------------------------------------------------------------
    @abstractmethod
    def start(self, lanes: int, capacity: int, space: AnswerSpace, limit: BatchLimit | None = None) -> None:
        """Room for ``lanes`` lanes of about ``capacity`` positions each, measured under ``space``.

        ``limit``: the most lanes one model call may take (an engine that splits steps halves it on
        out-of-memory errors; one that does not raises them)."""

    @abstractmethod
    def prefill(self, lane: int, ids: Sequence[int], logits_from: int) -> np.ndarray:
        """Run ``ids`` as lane ``lane``'s first tokens; NLL rows (len(ids) - logits_from + 1, vocab)."""

    @abstractmethod
    def step(self, tokens: Sequence[int], positions: Sequence[int]) -> np.ndarray:
        """Feed live lane i ``tokens[i]`` at ``positions[i]``; NLL rows (live lanes, vocab)."""

    @abstractmethod
    def step_runs(self, runs: Sequence[Sequence[int]], positions: Sequence[int]) -> list[np.ndarray]:
        """Feed live lane i ``runs[i]`` (at least one token) at ``positions[i]``, ``positions[i] + 1``, ...;
        per lane its NLL rows (len(runs[i]), vocab), row j after ``runs[i][:j + 1]``."""

    @abstractmethod
    def keep_lanes(self, lanes: Sequence[int]) -> None:
        """Keep only these live lanes (increasing); they become lanes 0, 1, ... in this order."""

    @abstractmethod
    def release(self) -> None:
        """End the lanes' search (an engine may keep its buffers for the next one)."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Rows of the output head: the width of every NLL row."""

    def refresh(self) -> None:
        """Read the model's weights again (after its adapter changed); a no-op for an engine that reads them live."""

    # -- scoring -------------------------------------------------------------------------------
    @abstractmethod
    def prompt_prefixes(self, prompts: Sequence[Sequence[int]], space: AnswerSpace):
        """Run ``prompts`` together (right-padded); what ``nlls_after`` needs of them (keys, values, first NLLs)."""

    @abstractmethod
    def nlls_after(self, prefixes, answers: Sequence[Sequence[int]], rows: Sequence[int],
                   space: AnswerSpace) -> np.ndarray:
        """The NLL of ``answers[i]`` (through its eos) after prompt ``rows[i]`` of ``prefixes``, in one call."""

    def score(self, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[Sequence[int]]], space: AnswerSpace,
              batch_size: int = 16, prompt_batch_size: int | None = None, *, prompt_limit: BatchLimit | None = None,
              answer_limit: BatchLimit | None = None) -> list[np.ndarray]:
        """The NLLs of ``answers[p]`` after ``prompts[p]``, for every p.

        Up to ``prompt_batch_size`` (default ``batch_size``) prompts run together, and up to
        ``batch_size`` (prompt, answer) rows per answer call. An out-of-memory error halves the answer
        rows per call (``answer_limit``), and past one row the prompts per call (``prompt_limit``);
        the limits end as the sizes that fitted. Prompts without answers are never run.
        """
        if len(answers) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(answers)} lists of answers")
        results = [np.zeros(len(chunk)) for chunk in answers]
        prompt_limit = prompt_limit if prompt_limit is not None else BatchLimit("prompts")
        answer_limit = answer_limit if answer_limit is not None else BatchLimit("answers")
        group_size = prompt_batch_size or batch_size
        order = [p for p in range(len(prompts)) if len(answers[p])]
        done = 0
        while done < len(order):
            done += with_halving(prompt_limit, min(group_size, len(order) - done),
                                 lambda size, start=done: self._score_group(
                                     prompts, answers, order[start:start + size], space, batch_size, answer_limit,
                                     results))
        return results

    def _score_group(self, prompts, answers, group: list[int], space: AnswerSpace, batch_size: int,
                     limit: BatchLimit, results: list[np.ndarray]) -> int:
        """The answers of the prompts ``group`` (indices) scored into ``results``; how many prompts that was.

        Safe to repeat: it writes the same numbers again.
        """
        prefixes = self.prompt_prefixes([prompts[p] for p in group], space)
        pairs = sorted(((row, a) for row, p in enumerate(group) for a in range(len(answers[p]))),
                       key=lambda pair: len(answers[group[pair[0]]][pair[1]]))  # similar lengths together

        def score(chunk: list[tuple[int, int]]) -> int:
            nlls = self.nlls_after(prefixes, [answers[group[row]][a] for row, a in chunk], [row for row, _ in chunk],
                                   space)
            for (row, a), nll in zip(chunk, nlls):
                results[group[row]][a] = nll
            return len(chunk)

        done = 0
        while done < len(pairs):
            done += with_halving(limit, min(batch_size, len(pairs) - done),
                                 lambda size, start=done: score(pairs[start:start + size]))
        return len(group)
