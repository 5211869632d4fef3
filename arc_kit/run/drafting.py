"""The draft sources of one test input's searches, made from what the solver knows (``search.drafts``).

``draft_source(kind, encoder, prompt_ids, test_input, augmentation, grids)`` gives the DFS under one
augmentation its source, as ``SamplerSettings.drafts`` names it:

- "none": no source (one token per step);
- "prompt": prompt lookup in the augmented prompt;
- "all": first the answers read position by position: ``grids`` (the candidates found so far under
  the other augmentations, best first) mapped into this augmentation's frame, then the augmented
  test input itself; each written as an answer, so that while the path's rows have a reference's
  width, its cells are read one for one (the answers the search finds join them as it finds them);
  and prompt lookup in the prompt and the path; of the two proposals, the one that saw more of the
  path's latest tokens coming (``MostSupported``).

A row separator, the end of example and the eos are the structure tokens that give an answer its
shape. Knows the text format and the augmentations; knows nothing of how the search walks a draft.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from arc_kit.data.augmentation import Augmentation
from arc_kit.search.drafts import AlignedAnswers, DraftSource, MostSupported, PromptLookup
from arc_kit.settings import DRAFT_SOURCES
from arc_kit.text import TaskEncoder


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
    references = [encoder.encode_answer(augmentation.apply_grid(grid)) for grid in grids]
    references.append(encoder.encode_answer(augmentation.apply_grid(test_input)))
    structure = [*encoder.row_separator.tolist(), *encoder.end_of_example.tolist(), encoder.eos_id]
    return MostSupported([AlignedAnswers(references, structure), lookup])
