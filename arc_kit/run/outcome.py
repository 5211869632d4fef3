"""A run's end line: the tasks the model answered, and how many were right where the solutions are known.

``outcome_parts`` gives the line's parts as a list, so that a caller adds parts of its own (a share of
accepted drafts, the minutes taken) before it joins them: ``answered by the model: 6, correct: 1 (of 6 with
known solutions)``. "Answered by the model" counts the tasks whose submitted attempts came
from the model (a finished solve with at least one attempt), not every task that got model work;
"correct" counts the tasks an attempt got right (a task of several test outputs counts its share of
them), among the tasks whose solutions are known (the submission's ``Score``). This module knows
records and scores; it knows nothing of how they were made.
"""

from __future__ import annotations

from collections.abc import Mapping

from arc_kit.data.submission import Score
from arc_kit.method.records import TaskRecord


def answered_by_model(record: TaskRecord) -> bool:
    """True when the task's submitted attempts are the model's: it finished with at least one attempt."""
    return record.got_model_work and any(test.attempts for test in record.tests)


def outcome_parts(records: Mapping[str, TaskRecord], score: Score | None = None) -> list[str]:
    """``answered by the model: N`` and ``correct: K (of M with known solutions)`` (or that none are known)."""
    answered = sum(1 for record in records.values() if answered_by_model(record))
    parts = [f"answered by the model: {answered}"]
    if score is not None and len(score.table):
        parts.append(f"correct: {score.tasks_credited:g} (of {len(score.table)} with known solutions)")
    else:
        parts.append("correct: unknown (no solutions known)")
    return parts
