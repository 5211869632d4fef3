"""The product of experts (paper, section 4): candidates, their per-augmentation NLLs, the aggregations, the choice.

A ``Candidate`` is one distinct answer grid in the task's original frame with what is known of it:
its NLL under each augmentation it was generated in, and under each scoring augmentation (measured
by the engine's scoring, ``solver.Solver.score``). The aggregations are small pure functions from a
candidate's per-augmentation NLLs to one NLL (lower is better): product of probabilities (the sum of
NLLs; the paper's choice and the default), min, max and sum of probabilities. ``select`` takes the
best (two, or as many as asked).

Knows grids and numbers; knows nothing of models, engines or how the NLLs were measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np


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
    """-log sum_j P_j, computed stably (every probability 0: -log 0 = inf)."""
    return float(-np.logaddexp.reduce(-np.asarray(nlls, dtype=float)))


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

    derived_json: ClassVar[tuple[str, ...]] = ("aggregates",)  # written after the fields (``arc_kit.codec``)

    @property
    def best_generation_nll(self) -> float:
        return min(self.generation_nlls.values()) if self.generation_nlls else float("inf")

    def aggregate(self, name: str) -> float:
        if name == "generation":
            return self.best_generation_nll
        return AGGREGATIONS[name](self.scoring_nlls) if self.scoring_nlls else float("inf")  # inf: never scored

    def __repr__(self) -> str:
        size = "x".join(map(str, np.shape(self.grid)))
        scored = (f", PoE {self.aggregate('product'):.3f} (summed NLL over {len(self.scoring_nlls)} views)"
                  if self.scoring_nlls else "")
        return (f"Candidate({size} grid, generation NLL {self.best_generation_nll:.3f} (best of "
                f"{len(self.generation_nlls)} augmentation(s)){scored})")

    @property
    def aggregates(self) -> dict[str, float] | None:
        """Every aggregate, once scored: written into a record for readers of the JSON (``derived_json``), and
        recomputed, never read back."""
        return {name: self.aggregate(name) for name in AGGREGATIONS} if self.scoring_nlls else None


def select(candidates: Sequence[Candidate], aggregation: str = "product", count: int = 2) -> list[int]:
    """Indices of the ``count`` best candidates by an aggregation ('generation': best sampling NLL).

    Ties go to the candidate with the better generation NLL, then to the earlier one.
    """
    if aggregation not in AGGREGATIONS and aggregation != "generation":
        raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {[*AGGREGATIONS, 'generation']}")
    order = sorted(range(len(candidates)), key=lambda i: (candidates[i].aggregate(aggregation),
                                                          candidates[i].best_generation_nll, i))
    return order[:count]
