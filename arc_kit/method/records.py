"""Typed records of a run: what the method found for each task (``TaskRecord``, one JSON line per task in
``records.jsonl``).

``TaskRecord`` holds a task's outcome (its fields say what), per test input a ``TestResult``: the
candidates (grids in the task's original frame with their per-augmentation NLLs), the attempts chosen,
the augmentations used and search statistics. Each record keeps the fields of a later kit it was read
with (``extra``).
Their JSON is derived from these dataclasses by the kit's one codec (``arc_kit.codec``; ``run.record_json``
reads and writes the record files); a field's metadata says what the JSON needs beyond its name and type
(``json``: the name it is written under; ``when_set``: left out while None).

This module is the only place that declares a task record's layout. It knows grids and candidates; it
knows nothing of models, settings, JSON or how the records were made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arc_kit.method.experts import Candidate
from arc_kit.method.record_view import record_html, verdict_text

FALLBACK_RUNG = -1  # the rung beyond the ladder: no model work, fallback answers
WHEN_SET = {"when_set": True}  # a field the JSON leaves out while it is None


@dataclass
class SearchStats:
    """What candidate generation did for one test input, over all its inference augmentations."""

    forward_calls: int = 0  # model calls after each prompt's, per search (lanes stepped together count each)
    tokens: int = 0  # tokens fed to the model, prompts (and guesses, and drafts) included
    answers: int = 0  # completions returned by the sampler
    not_grids: int = 0  # completions that did not spell a grid
    capped: list[str] = field(default_factory=list)  # searches stopped by a cap, and why
    dropped: dict[str, int] = field(default_factory=dict)  # paths abandoned, by reason
    prompt_tokens: list[int] = field(default_factory=list)  # per augmentation
    dropped_train_pairs: int = 0  # train pairs left out of prompts to fit the budget
    engine_steps: int = 0  # the engine's steps (one feeds every lane searched together; a draft rides along)
    draft_tokens: int = 0  # draft tokens fed after the searches' branch tokens
    draft_accepted: int = 0  # of them, those the searches followed (each saved a step of its lane)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are


@dataclass
class TestResult:
    """Everything found for one test input."""

    attempts: list[np.ndarray] = field(default_factory=list)  # the chosen answers, best first (one or two)
    candidates: list[Candidate] = field(default_factory=list)
    inference_augmentations: list[str] = field(default_factory=list)  # augmentation keys
    scoring_augmentations: list[str] = field(default_factory=list)
    search: SearchStats = field(default_factory=SearchStats)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are

    __test__ = False  # not a pytest test class despite the name

    def __repr__(self) -> str:
        return (f"TestResult({len(self.attempts)} attempt(s), {len(self.candidates)} candidate(s), "
                f"{len(self.inference_augmentations)} + {len(self.scoring_augmentations)} augmentations, "
                f"{self.search.forward_calls} forward calls)")


@dataclass
class TrainingSummary:
    """What one task's test-time training did."""

    steps: int = 0
    seconds: float = 0.0
    skipped: str | None = None  # why no training happened ("off", "fewer than 2 train pairs", ...)
    first_loss: float | None = None
    last_loss: float | None = None  # the mean of the last 8 steps
    stopped: str | None = None  # why training ended before its last step (the task's deadline)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are


@dataclass
class TaskRecord:
    """One task's outcome; see the module docstring."""

    task_id: str
    tests: list[TestResult] = field(default_factory=list,  # one per test input ([] when it failed or was skipped)
                                    metadata={"json": "test"})
    timings: dict[str, float] = field(default_factory=dict)  # seconds: ttt, generation, scoring, total
    error: str | None = None  # "Type: message" when the method failed on this task
    traceback: str | None = field(default=None, metadata=WHEN_SET)
    rung: int = 0  # the ladder rung it ran at; FALLBACK_RUNG: no model work
    ttt: TrainingSummary | None = field(default=None, metadata=WHEN_SET)
    correct: list[bool] | None = field(default=None, metadata=WHEN_SET)  # per test output, when the answers were known
    skipped: str | None = field(default=None, metadata=WHEN_SET)  # why it got fallback answers only ("out of time")
    retried_after: str | None = field(default=None, metadata=WHEN_SET)  # a first try's error, when retried cheaper
    deadline_hit: str | None = field(default=None,  # the stage its deadline cut short ("test-time training", ...)
                                     metadata=WHEN_SET)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def got_model_work(self) -> bool:
        """True when the method ran on the task and finished (fallback answers are not model work)."""
        return self.rung != FALLBACK_RUNG and self.error is None and self.skipped is None

    @property
    def share_correct(self) -> float:
        """The share of its test outputs that the task got right (0 when unknown)."""
        return sum(self.correct) / len(self.correct) if self.correct else 0.0

    @property
    def attempts(self) -> list[list[np.ndarray]]:
        """The attempts per test input, for ``submission.build_submission``."""
        return [list(test.attempts) for test in self.tests]

    def __repr__(self) -> str:
        candidates = sum(len(test.candidates) for test in self.tests)
        return (f"TaskRecord({self.task_id!r}: {verdict_text(self)}, {len(self.tests)} test(s), {candidates} "
                f"candidate(s), {self.timings.get('total', 0.0):.1f} s)")

    def _repr_html_(self) -> str:
        """Jupyter's picture (``record_view.record_html``): attempts, candidates and their scores, time, search."""
        return record_html(self)


def fallback_record(task_id: str, reason: str) -> TaskRecord:
    """The record of a task that got no model work: fallback attempts only."""
    return TaskRecord(task_id, timings={"total": 0.0}, rung=FALLBACK_RUNG, skipped=reason)


def answers_from_records(records: Mapping[str, TaskRecord]) -> dict[str, list[list[np.ndarray]]]:
    """The attempts of every record, for ``submission.build_submission`` (failed tasks have none)."""
    return {task_id: record.attempts for task_id, record in records.items()}
