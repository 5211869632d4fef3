"""Draft sources of the speculative DFS: proposals of how a path goes on, checked by the model, never trusted.

A ``DraftSource`` maps a search's path (the answer's token ids so far, after the prompt, its
newest token last) to a proposed continuation of at most ``limit`` tokens (``supported``), and says
how well it saw the path coming (its *support*: how many of the path's latest tokens it would have
proposed; with "auto" drafts, what the search's odds of a draft token are counted by). The search walks a
draft as it walks a guess (``search``): a right draft saves the steps of the positions it covers, a wrong
one costs only the positions it wasted, never an answer. ``found`` tells a source of each answer the
search finds (a later branch often ends like an earlier answer).

- ``PromptLookup``: the longest suffix of the prompt and path that occurs earlier in the prompt or
  the path (at its most recent occurrence); proposes the tokens that follow it there.
- ``AlignedAnswers``: whole answers (token ids) read position by position: while the path's
  structure tokens (row separators, the end of the answer) stand where a reference has its own,
  the reference from the path's length on, taken from the one that agrees with the path at most
  positions. A grid of the same width is then read cell by cell. The answers the search finds join
  its references.
- ``MostSupported``: of several sources' proposals, the one with the most support (the earlier
  source on ties).

``draft_source(kind, encoder, prompt_ids, test_input, augmentation, grids)`` makes the source of the
DFS under one augmentation, as ``SamplerSettings.drafts`` names it: "none" (no source, one token per
step), "prompt" (prompt lookup in the augmented prompt) or "all" (and "auto", whose lengths the
search chooses by cost: ``step_costs``): the answers read position by
position (``grids``, the candidates found so far under the other augmentations, best first, mapped
into this augmentation's frame, then the augmented test input itself, each written as an answer) and
prompt lookup in the prompt and the path, the better supported of the two (``MostSupported``). A row
separator, the end of example and the eos are the structure tokens that give an answer its shape.

The sources know token ids only; ``draft_source`` alone knows the text format and the augmentations.
Nothing here knows models or how the search walks a draft.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.settings import DRAFT_SOURCES
from arc_kit.text import TaskEncoder


class DraftSource:
    """Proposes a continuation of a path (module docstring); the base proposes nothing."""

    def supported(self, path: Sequence[int], limit: int) -> tuple[list[int], int]:
        """At most ``limit`` tokens that may follow ``path``, and their support (module docstring); ([], 0)
        without a proposal."""
        return [], 0

    def found(self, answer: Sequence[int]) -> None:
        """The search found ``answer`` (its token ids, eos last); a source may learn from it."""


class PromptLookup(DraftSource):
    """Prompt lookup (module docstring): the occurrence looked for in the prompt and, with ``in_path``, in the path too
    (a grid that repeats its own rows). A suffix shorter than ``min_length`` tokens proposes nothing (too common to
    mean anything); suffixes are matched up to ``max_length`` tokens."""

    def __init__(self, prompt: Sequence[int], min_length: int = 2, max_length: int = 64, in_path: bool = True):
        self.prompt = np.asarray([int(token) for token in prompt], dtype=np.int64)
        self.min_length, self.max_length, self.in_path = min_length, max_length, in_path

    def supported(self, path: Sequence[int], limit: int) -> tuple[list[int], int]:
        """The support is the length of the matched suffix within the path."""
        if limit <= 0 or not len(path):
            return [], 0
        path = np.asarray([int(token) for token in path], dtype=np.int64)
        text = np.concatenate([self.prompt, path])
        searched = text[:-1] if self.in_path else self.prompt[:-1]  # where a match may end: a token follows it
        tail = text[-self.max_length:]
        ends = np.flatnonzero(searched == tail[-1])
        matched = 1
        while ends.size and matched < len(tail):
            longer = ends[ends >= matched]
            longer = longer[text[longer - matched] == tail[-1 - matched]]
            if not longer.size:
                break
            ends, matched = longer, matched + 1
        if not ends.size or matched < self.min_length:
            return [], 0
        start = int(ends[-1]) + 1  # the most recent occurrence
        return text[start:start + limit].tolist(), min(matched, len(path))


class AlignedAnswers(DraftSource):
    """Whole answers read position by position while the path's structure matches theirs (module docstring).

    ``references``: answers (token ids), earlier ones preferred on ties; ``structure``: the tokens
    that give an answer its shape (row separators, end of example, eos). The answers found by the
    search are added (first among equals) unless ``learn`` is off.
    """

    def __init__(self, references: Sequence[Sequence[int]], structure: Sequence[int], learn: bool = True):
        self.references = [np.asarray([int(token) for token in reference], dtype=np.int64)
                           for reference in references if len(reference)]
        self.structure = np.asarray(sorted({int(token) for token in structure}), dtype=np.int64)
        self.learn = learn

    def found(self, answer: Sequence[int]) -> None:
        if self.learn:
            answer = np.asarray([int(token) for token in answer], dtype=np.int64)
            if not any(len(answer) == len(known) and np.array_equal(answer, known) for known in self.references):
                self.references.insert(0, answer)

    def supported(self, path: Sequence[int], limit: int) -> tuple[list[int], int]:
        """The support is the run of the path's latest tokens the reference holds (the newest not required:
        a branch that leaves the reference there is often read on by it)."""
        length = len(path)
        if limit <= 0 or not self.references:
            return [], 0
        path = np.asarray([int(token) for token in path], dtype=np.int64)
        path_structure = np.isin(path, self.structure)
        best, best_agreement = None, -1
        for reference in self.references:
            if len(reference) <= length:
                continue
            written = reference[:length]
            shaped = path_structure | np.isin(written, self.structure)
            if not np.array_equal(path[shaped], written[shaped]):  # a row break or the end elsewhere: another shape
                continue
            agreement = int(np.count_nonzero(path == written))
            if agreement > best_agreement:
                best, best_agreement = reference, agreement
        if best is None:
            return [], 0
        differing = np.flatnonzero(path[:-1] != best[:length - 1])
        support = length - 1 - (int(differing[-1]) + 1 if differing.size else 0) + int(path[-1] == best[length - 1])
        return best[length:length + limit].tolist(), support


class MostSupported(DraftSource):
    """The proposal with the most support among the sources' (the earlier source on ties); every source is
    told of every answer found."""

    def __init__(self, sources: Sequence[DraftSource]):
        self.sources = list(sources)

    def supported(self, path: Sequence[int], limit: int) -> tuple[list[int], int]:
        best: tuple[list[int], int] = ([], 0)
        for source in self.sources:
            proposal, support = source.supported(path, limit)
            if proposal and (not best[0] or support > best[1]):
                best = (proposal, support)
        return best

    def found(self, answer: Sequence[int]) -> None:
        for source in self.sources:
            source.found(answer)


def draft_source(kind: str, encoder: TaskEncoder, prompt_ids: Sequence[int], test_input: np.ndarray,
                 augmentation: Augmentation, grids: Sequence[np.ndarray] = ()) -> DraftSource | None:
    """The draft source of ``kind`` for the search of ``prompt_ids`` (module docstring); None for "none"."""
    if kind not in DRAFT_SOURCES:
        raise ValueError(f"unknown drafts {kind!r}; expected one of {DRAFT_SOURCES}")
    if kind == "none":
        return None
    lookup = PromptLookup(prompt_ids)
    if kind == "prompt":
        return lookup
    references = [encoder.encode_answer(augmentation.apply_grid(grid)) for grid in (*grids, test_input)]
    structure = [*encoder.row_separator.tolist(), *encoder.end_of_example.tolist(), encoder.eos_id]
    return MostSupported([AlignedAnswers(references, structure), lookup])
