"""Reading a run's records: where the right answer ranked, and what other DFS thresholds would have given.

Pure functions over the JSON records that ``solver.solve`` writes and the known test outputs:
- ``rank_table``: the right answer's rank among the candidates by generation probability (the
  best single augmentation) and by the product of experts (the paper's rank-improvement figure);
- ``threshold_curve``: for thresholds at or above the run's, the share of test outputs whose right
  answer DFS would have found and the share the product of experts would have selected. Both are
  exact, not estimates: DFS at T returns every answer with probability >= T under some
  augmentation, which the records hold, and a candidate's scores do not depend on the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from arc_kit.scoring import AGGREGATIONS
from arc_kit.tasks import TaskSet


def _answers(solutions: TaskSet | Mapping[str, Sequence]) -> dict[str, list[np.ndarray]]:
    if isinstance(solutions, TaskSet):
        return {task.id: task.test_outputs for task in solutions.tasks() if task.has_solutions}
    return {task_id: [np.asarray(grid) for grid in grids] for task_id, grids in solutions.items()}


def _right_index(candidates: list[dict], answer: np.ndarray) -> int | None:
    for index, candidate in enumerate(candidates):
        grid = np.asarray(candidate["grid"])
        if grid.shape == answer.shape and np.array_equal(grid, answer):
            return index
    return None


def _rank(values: Sequence[float], index: int) -> int:
    """1-based rank of ``values[index]`` (lower is better; ties count against it)."""
    return int(sum(1 for value in values if value <= values[index]))


def rank_table(records: Mapping[str, dict], solutions, aggregation: str = "product"):
    """One row per test output whose right answer is among the candidates: its ranks before and after PoE."""
    import pandas as pd

    answers, rows = _answers(solutions), []
    for task_id, record in records.items():
        for test_index, test in enumerate(record.get("test", [])):
            if task_id not in answers or test_index >= len(answers[task_id]):
                continue
            candidates = test["candidates"]
            right = _right_index(candidates, answers[task_id][test_index])
            if right is None:
                continue
            generation = [min(c["generation_nlls"].values()) for c in candidates]
            row = {"task_id": task_id, "test_index": test_index, "candidates": len(candidates),
                   "rank_generation": _rank(generation, right)}
            if all(c["scoring_nlls"] for c in candidates):
                scores = [AGGREGATIONS[aggregation](c["scoring_nlls"]) for c in candidates]
                row["rank_poe"] = _rank(scores, right)
            rows.append(row)
    return pd.DataFrame(rows, columns=["task_id", "test_index", "candidates", "rank_generation", "rank_poe"])


def threshold_curve(records: Mapping[str, dict], solutions, thresholds: Sequence[float],
                    aggregation: str = "product"):
    """Per threshold T: share of test outputs whose right answer has probability >= T (found), and
    share where it is among the two best of those candidates by the aggregation (selected)."""
    import pandas as pd

    answers = _answers(solutions)
    outputs = sum(len(answers[task_id]) for task_id in records if task_id in answers)
    rows = []
    for threshold in thresholds:
        limit = -np.log(threshold)
        found = selected = 0
        for task_id, record in records.items():
            for test_index, test in enumerate(record.get("test", [])):
                if task_id not in answers or test_index >= len(answers[task_id]):
                    continue
                kept = [c for c in test["candidates"] if min(c["generation_nlls"].values()) <= limit]
                right = _right_index(kept, answers[task_id][test_index])
                if right is None:
                    continue
                found += 1
                if all(c["scoring_nlls"] for c in kept):
                    scores = [AGGREGATIONS[aggregation](c["scoring_nlls"]) for c in kept]
                else:
                    scores = [min(c["generation_nlls"].values()) for c in kept]
                best_two = sorted(range(len(kept)), key=lambda i: (scores[i], i))[:2]
                selected += right in best_two
        rows.append({"threshold": threshold, "found": found / outputs if outputs else 0.0,
                     "selected": selected / outputs if outputs else 0.0})
    return pd.DataFrame(rows)


def run_threshold(records: Mapping[str, dict]) -> float | None:
    """The lowest probability among all recorded candidates: thresholds at or above it are exact."""
    nlls = [min(c["generation_nlls"].values()) for record in records.values() for test in record.get("test", [])
            for c in test["candidates"] if c["generation_nlls"]]
    return float(np.exp(-max(nlls))) if nlls else None
