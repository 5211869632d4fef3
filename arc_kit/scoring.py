"""Scoring answers, and selecting them by a product of experts over augmented views (paper, section 4).

The NLL of many answers after one prompt is ``decoding.score_answers`` (the prompt run once, its
KV cache reused by all answers). ``score_prompts`` does the same for many prompts at once: the
prompts go through the model together (right-padded), each once, and every (prompt, answer) pair
becomes one row of batched forwards that read its prompt's rows of that cache one layer at a time
(``decoding.nlls_after_prompts``: never a copy of the whole cache), an attention mask hiding the
prompt's padding and positions given per row; out of memory, the rows and then the prompts per
forward are halved (``decoding.with_halving``). ``augmented_nlls``
scores candidates under each scoring augmentation (augmented prompt, augmented answer), one
augmentation after another or, ``batched``, all together through ``score_prompts``.

The aggregations are small pure functions from a candidate's per-augmentation NLLs to one NLL
(lower is better): product of probabilities (the sum of NLLs; the paper's choice and the default),
min, max and sum of probabilities. ``select`` takes the best (two, or as many as asked).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from arc_kit import decoding
from arc_kit.augmentation import Augmentation
from arc_kit.decoding import (AnswerSpace, BatchLimit, answer_log_probs, cache_tensors, new_cache, nlls_after_prompts,
                              with_halving)
from arc_kit.grids import LARGEST_SIDE, grid_to_json, to_grid
from arc_kit.tasks import Pair
from arc_kit.text_format import TaskEncoder


def score_prompts(model, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[Sequence[int]]],
                  space: AnswerSpace, batch_size: int = 16, prompt_batch_size: int | None = None, *,
                  prompt_limit: BatchLimit | None = None, answer_limit: BatchLimit | None = None) -> list[np.ndarray]:
    """``decoding.score_answers`` of each prompt's answers, in as few batched forwards as memory allows.

    ``answers[p]`` are scored after ``prompts[p]``. Up to ``prompt_batch_size`` (default
    ``batch_size``) prompts share one forward and one cache; up to ``batch_size`` (prompt, answer)
    rows share each answer forward (``decoding.nlls_after_prompts``: each layer's prompt rows are
    assembled only while it runs; one prompt's rows are an expanded view). An out-of-memory error
    halves the answer rows per forward (``answer_limit``), and past one row the prompts per forward
    (``prompt_limit``); the limits end as the sizes that fitted. Equal to ``decoding.score_answers``
    up to float rounding.
    """
    if len(answers) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(answers)} lists of answers")
    results = [np.zeros(len(chunk)) for chunk in answers]
    prompt_limit = prompt_limit if prompt_limit is not None else BatchLimit("prompts")
    answer_limit = answer_limit if answer_limit is not None else BatchLimit("answers")
    group_size = prompt_batch_size or batch_size
    order = [p for p in range(len(prompts)) if len(answers[p])]  # prompts without answers are never run
    done = 0
    while done < len(order):
        done += with_halving(prompt_limit, min(group_size, len(order) - done), lambda size, start=done: _score_group(
            model, prompts, answers, order[start:start + size], space, batch_size, answer_limit, results))
    return results


def _score_group(model, prompts, answers, group: list[int], space: AnswerSpace, batch_size: int,
                 limit: BatchLimit, results: list[np.ndarray]) -> int:
    """The answers of the prompts ``group`` (indices) scored into ``results``; how many prompts that was.

    Safe to repeat: it writes the same numbers again.
    """
    import torch

    device = next(model.parameters()).device
    lengths = [len(prompts[p]) for p in group]
    width = max(lengths)
    ids = torch.full((len(group), width), space.eos_id, dtype=torch.long)
    for row, p in enumerate(group):
        ids[row, :lengths[row]] = torch.tensor([int(t) for t in prompts[p]], dtype=torch.long)
    last = torch.tensor(lengths) - 1
    kept = torch.unique(last)  # logits at each prompt's last position only, not at every position
    with torch.no_grad():
        # Right padding needs no attention mask here: causal attention keeps every real token
        # from seeing the padding after it. Answers mask the padding out.
        output = model(input_ids=ids.to(device), past_key_values=new_cache(model), use_cache=True,
                       logits_to_keep=kept.to(device))
    mask = space.mask(output.logits.shape[-1], device)
    picked_last = torch.searchsorted(kept, last)
    first = answer_log_probs(output.logits[torch.arange(len(group)), picked_last.to(device)], mask,
                             space.probabilities)
    tensors = cache_tensors(output.past_key_values)
    del output
    pairs = sorted(((row, a) for row, p in enumerate(group) for a in range(len(answers[p]))),
                   key=lambda pair: len(answers[group[pair[0]]][pair[1]]))  # similar lengths together

    def score(chunk: list[tuple[int, int]]) -> int:
        nlls = nlls_after_prompts(model, tensors, first, [answers[group[row]][a] for row, a in chunk],
                                  [row for row, _ in chunk], space, lengths)
        for (row, a), nll in zip(chunk, nlls):
            results[group[row]][a] = nll
        return len(chunk)

    done = 0
    while done < len(pairs):
        done += with_halving(limit, min(batch_size, len(pairs) - done),
                             lambda size, start=done: score(pairs[start:start + size]))
    return len(group)


def augmented_nlls(model, encoder: TaskEncoder, train: Sequence[Pair], test_input: np.ndarray,
                   candidates: Sequence[np.ndarray], augmentations: Sequence[Augmentation],
                   batch_size: int = 16, max_len: int | None = None, batched: bool = False,
                   probabilities: str = "full") -> np.ndarray:
    """NLLs of candidate grids (original frame) under each augmentation: shape (candidates, augmentations).

    ``batched``: every augmentation's prompt and answers together (``score_prompts``); otherwise one
    augmentation after another (``decoding.score_answers``). The same numbers up to float rounding.
    ``probabilities``: as ``decoding.AnswerSpace.probabilities`` (the full softmax by default).
    """
    space = AnswerSpace.from_encoder(encoder, probabilities)
    table = np.zeros((len(candidates), len(augmentations)))
    prompts, answers = [], []
    for augmentation in augmentations:
        prompt = encoder.encode_prompt(augmentation.apply_pairs(train), augmentation.apply_grid(test_input),
                                       max_len=max_len)
        prompts.append(prompt.ids)
        answers.append([encoder.encode_answer(augmentation.apply_grid(grid)) for grid in candidates])
    if batched:
        columns = score_prompts(model, prompts, answers, space, batch_size)
    else:
        limit = BatchLimit("answers")  # one for all augmentations: a size that ran out of memory is not tried again
        columns = [decoding.score_answers(model, prompt, chunk, space, batch_size, limit=limit)
                   for prompt, chunk in zip(prompts, answers)]
    for column, nlls in enumerate(columns):
        table[:, column] = nlls
    return table


# ---------------------------------------------------------------------------------------------
# Aggregations: per-augmentation NLLs -> one NLL, lower is better.

def product_of_probabilities(nlls: Sequence[float]) -> float:
    """-log prod_j P_j: the product of experts (geometric mean up to a constant)."""
    return float(np.sum(nlls))


def min_probability(nlls: Sequence[float]) -> float:
    """-log min_j P_j: a candidate is as good as its worst view."""
    return float(np.max(nlls))


def max_probability(nlls: Sequence[float]) -> float:
    """-log max_j P_j: a candidate is as good as its best view."""
    return float(np.min(nlls))


def sum_of_probabilities(nlls: Sequence[float]) -> float:
    """-log sum_j P_j, computed stably."""
    values = -np.asarray(nlls, dtype=float)
    top = values.max()
    if not np.isfinite(top):  # every probability 0: -log 0 = inf (inf - inf below would be nan)
        return float(-top)
    return float(-(top + np.log(np.exp(values - top).sum())))


AGGREGATIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "product": product_of_probabilities,
    "min": min_probability,
    "max": max_probability,
    "sum": sum_of_probabilities,
}


@dataclass
class Candidate:
    """One distinct answer to a test input, in the task's original frame, and what is known of it."""

    grid: np.ndarray
    generation_nlls: dict[str, float] = field(default_factory=dict)  # augmentation key -> NLL where sampled
    scoring_nlls: list[float] = field(default_factory=list)  # one per scoring augmentation
    extra: dict = field(default_factory=dict, repr=False, compare=False)  # fields of a later kit, kept as they are

    @property
    def found_by(self) -> list[str]:
        return list(self.generation_nlls)

    @property
    def best_generation_nll(self) -> float:
        return min(self.generation_nlls.values()) if self.generation_nlls else float("inf")

    def aggregate(self, name: str) -> float:
        if name == "generation":
            return self.best_generation_nll
        if not self.scoring_nlls:
            return float("inf")
        return AGGREGATIONS[name](self.scoring_nlls)

    def to_json(self) -> dict:
        """The record layout: the grid, its NLLs, and every aggregate (for readers of the JSON)."""
        data = {"grid": grid_to_json(self.grid), "generation_nlls": dict(self.generation_nlls),
                "scoring_nlls": list(self.scoring_nlls)}
        if self.scoring_nlls:
            data["aggregates"] = {name: self.aggregate(name) for name in AGGREGATIONS}
        return {**data, **self.extra}

    @classmethod
    def from_json(cls, data) -> Candidate:
        """The inverse of ``to_json``; fields it does not know are kept in ``extra`` (the aggregates are recomputed)."""
        extra = {key: value for key, value in data.items()
                 if key not in ("grid", "generation_nlls", "scoring_nlls", "aggregates")}
        return cls(to_grid(data["grid"], max_side=LARGEST_SIDE),  # a wide set's candidates are wide
                   {str(k): float(v) for k, v in data.get("generation_nlls", {}).items()},
                   [float(v) for v in data.get("scoring_nlls", [])], extra)


def select(candidates: Sequence[Candidate], aggregation: str = "product", count: int = 2) -> list[int]:
    """Indices of the ``count`` best candidates by an aggregation ('generation': best sampling NLL).

    Ties go to the candidate with the better generation NLL, then to the earlier one.
    """
    if aggregation not in AGGREGATIONS and aggregation != "generation":
        raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {[*AGGREGATIONS, 'generation']}")
    order = sorted(range(len(candidates)), key=lambda i: (candidates[i].aggregate(aggregation),
                                                          candidates[i].best_generation_nll, i))
    return order[:count]
