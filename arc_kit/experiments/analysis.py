"""Reading a run's records: where the right answer ranked, and what other DFS thresholds would have given.

Pure functions over ``records.TaskRecord`` values and the known test outputs:
- ``rank_table``: the right answer's rank among the candidates by generation probability (the
  best single augmentation) and by the product of experts (the paper's rank-improvement figure);
- ``threshold_curve``: for thresholds at or above the run's, the share of test outputs whose right
  answer DFS would have found and the share the selection would have chosen. Both are exact, not
  estimates: DFS at T returns every answer with probability >= T under some augmentation, which
  the records hold, and a candidate's scores do not depend on the others. Selection is
  ``scoring.select``, the solver's own;
- ``draft_share``: the share of the searches' draft tokens that they followed (a run's end line);
- ``commonest_unanswered``: why the tasks the model gave no answer for got none, the commonest reason.
Knows records and the selection rule; nothing of models.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from arc_kit.data.grids import grid_key
from arc_kit.data.tasks import TaskSet
from arc_kit.method.records import TaskRecord
from arc_kit.method.experts import Candidate, select


def _answers(solutions: TaskSet | Mapping[str, Sequence]) -> dict[str, list[np.ndarray]]:
    if isinstance(solutions, TaskSet):
        return {task.id: task.test_outputs for task in solutions.tasks() if task.has_solutions}
    return {task_id: [np.asarray(grid) for grid in grids] for task_id, grids in solutions.items()}


def _right_index(candidates: Sequence[Candidate], answer: np.ndarray) -> int | None:
    key = grid_key(answer)
    return next((index for index, candidate in enumerate(candidates) if grid_key(candidate.grid) == key), None)


def _rank(values: Sequence[float], index: int) -> int:
    """1-based rank of ``values[index]`` (lower is better; ties count against it)."""
    return int(sum(1 for value in values if value <= values[index]))


def _outputs(records: Mapping[str, TaskRecord], answers: Mapping[str, list]):
    """(task id, test index, candidates, right answer) for every recorded test output with a known answer."""
    for task_id, record in records.items():
        for test_index, test in enumerate(record.tests):
            if task_id in answers and test_index < len(answers[task_id]):
                yield task_id, test_index, test.candidates, answers[task_id][test_index]


def rank_table(records: Mapping[str, TaskRecord], solutions, aggregation: str = "product"):
    """One row per test output whose right answer is among the candidates: its ranks before and after PoE."""
    import pandas as pd

    rows = []
    for task_id, test_index, candidates, answer in _outputs(records, _answers(solutions)):
        right = _right_index(candidates, answer)
        if right is None:
            continue
        generation = [candidate.best_generation_nll for candidate in candidates]
        row = {"task_id": task_id, "test_index": test_index, "candidates": len(candidates),
               "rank_generation": _rank(generation, right)}
        if all(candidate.scoring_nlls for candidate in candidates):
            row["rank_poe"] = _rank([candidate.aggregate(aggregation) for candidate in candidates], right)
        rows.append(row)
    return pd.DataFrame(rows, columns=["task_id", "test_index", "candidates", "rank_generation", "rank_poe"])


def threshold_curve(records: Mapping[str, TaskRecord], solutions, thresholds: Sequence[float],
                    aggregation: str = "product", attempts: int = 2):
    """Per threshold T: share of test outputs whose right answer has probability >= T (found), and
    share where it is among the ``attempts`` best of those candidates by the aggregation (selected)."""
    import pandas as pd

    answers = _answers(solutions)
    outputs = sum(len(answers[task_id]) for task_id in records if task_id in answers)
    rows = []
    for threshold in thresholds:
        limit = -np.log(threshold)
        found = selected = 0
        for _, _, candidates, answer in _outputs(records, answers):
            kept = [candidate for candidate in candidates if candidate.best_generation_nll <= limit]
            right = _right_index(kept, answer)
            if right is None:
                continue
            found += 1
            rule = aggregation if all(candidate.scoring_nlls for candidate in kept) else "generation"
            selected += right in select(kept, rule, attempts)
        rows.append({"threshold": threshold, "found": found / outputs if outputs else 0.0,
                     "selected": selected / outputs if outputs else 0.0})
    return pd.DataFrame(rows)


def draft_share(records: Iterable[TaskRecord]) -> str:
    """``drafts: 71% of 5120 tokens followed`` over the records' searches (``drafts: none fed`` without drafts)."""
    fed = followed = 0
    for record in records:
        for test in record.tests:
            fed, followed = fed + test.search.draft_tokens, followed + test.search.draft_accepted
    return f"drafts: {followed / fed:.0%} of {fed} tokens followed" if fed else "drafts: none fed"


NOT_TRAINED = "is the model trained on this format?"


def unanswered_reason(record: TaskRecord) -> str | None:
    """Why a task has no answer of the model's, as its record says; None when it has one."""
    if record.error is not None:
        return f"the method failed ({record.error.split(':')[0]})"
    if record.skipped is not None or not record.got_model_work:
        return f"no model work ({record.skipped or 'fallback answers'})"
    if any(test.attempts for test in record.tests):
        return None
    searches = [test.search for test in record.tests]
    answers, not_grids = sum(stats.answers for stats in searches), sum(stats.not_grids for stats in searches)
    capped = " ".join(cap for stats in searches for cap in stats.capped)
    if answers and answers == not_grids:
        return f"every answer the model wrote was no grid: {NOT_TRAINED}"
    if any(stats.dropped.get("max length") for stats in searches):
        return f"no answer ended within the token budget: {NOT_TRAINED}"
    if "forward-call cap" in capped or "deadline" in capped:
        stop = "call cap" if "forward-call cap" in capped else "deadline"
        return f"the search stopped at its {stop} before an answer ended"
    return f"no answer was as probable as the search's threshold: {NOT_TRAINED}"


def commonest_unanswered(records: Iterable[TaskRecord]) -> str | None:
    """The commonest reason among the tasks without an answer of the model's, with its count ("no answer ended
    within the token budget: is the model trained on this format? (2 of 2 tasks)"); None when every task has one."""
    reasons = Counter(reason for record in records if (reason := unanswered_reason(record)) is not None)
    if not reasons:
        return None
    reason, count = reasons.most_common(1)[0]
    return f"{reason} ({count} of {sum(reasons.values())} task(s))"
