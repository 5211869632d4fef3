"""Typed records of a run: what the method found for each task, one JSON line per task in ``records.jsonl``.

``TaskRecord`` holds a task's outcome: per test input the candidates (grids in the task's original
frame with their per-augmentation NLLs), the attempts chosen, the augmentations used and search
statistics; the test-time training summary, timings, the ladder rung it ran at, the stage its
deadline cut short (if it did), an error if it failed, and (when the answers were known) which
test outputs it got right. ``to_json`` writes the layout the kit has always written; ``from_json``
reads it back tolerantly at every level (a record, a test, a candidate, the search statistics, the
training summary; ``record_json`` checks the kinds): fields a later kit adds are kept aside
(``extra``) and written again, fields an earlier kit lacked take their defaults. ``read_records``,
``append_record`` and ``write_records`` are the record files' only readers and writers, for these
records and the tables' (``experiments.table_records``).

This module is the only place that knows a task record's layout. It knows grids and candidates; it
knows nothing of models, settings or how the records were made.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from arc_kit.data.grids import grid_to_json
from arc_kit.data.jsonio import append_json_line, read_json_lines, write_json_lines_atomically
from arc_kit.method.record_json import checked, flat_json, known_fields, record_grids, record_task_id
from arc_kit.method.experts import Candidate

FALLBACK_RUNG = -1  # the rung beyond the ladder: no model work, fallback answers


_SEARCH = {"forward_calls": "integer", "tokens": "integer", "answers": "integer", "not_grids": "integer",
           "capped": "list of string", "dropped": "object of integer", "prompt_tokens": "list of integer",
           "dropped_train_pairs": "integer", "engine_steps": "integer", "draft_tokens": "integer",
           "draft_accepted": "integer"}
_CANDIDATE = {"grid": "list", "generation_nlls": "object of number", "scoring_nlls": "list of number",
              "aggregates": "object of number"}
_TEST = {"attempts": "list of list", "candidates": "list of object", "inference_augmentations": "list of string",
         "scoring_augmentations": "list of string", "search": "object or null"}
_TRAINING = {"steps": "integer", "seconds": "number", "skipped": "string or null", "first_loss": "number or null",
             "last_loss": "number or null", "stopped": "string or null"}
_TASK = {"task_id": "string", "test": "list of object", "timings": "object of number", "error": "string or null",
         "traceback": "string or null", "rung": "integer", "ttt": "object or null",
         "correct": "list of boolean or null", "skipped": "string or null", "retried_after": "string or null",
         "deadline_hit": "string or null"}
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

    def to_json(self) -> dict:
        return flat_json(self)

    @classmethod
    def from_json(cls, data: Mapping | None, where: str = "search") -> SearchStats:
        known, extra = known_fields(cls, checked(data or {}, _SEARCH, where))
        return cls(**known, extra=extra)


@dataclass
class TestResult:
    """Everything found for one test input."""

    attempts: list[np.ndarray]  # the chosen answers, best first (one or two)
    candidates: list[Candidate]
    inference_augmentations: list[str]  # augmentation keys
    scoring_augmentations: list[str]
    search: SearchStats = field(default_factory=SearchStats)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are

    __test__ = False  # not a pytest test class despite the name

    def to_json(self) -> dict:
        return {"attempts": [grid_to_json(grid) for grid in self.attempts],
                "candidates": [candidate.to_json() for candidate in self.candidates],
                "inference_augmentations": list(self.inference_augmentations),
                "scoring_augmentations": list(self.scoring_augmentations),
                "search": self.search.to_json(), **self.extra}

    @classmethod
    def from_json(cls, data: Mapping, where: str = "test") -> TestResult:
        _, extra = known_fields(cls, checked(data, _TEST, where))
        candidates = data.get("candidates", [])
        for index, candidate in enumerate(candidates):
            record_grids([checked(candidate, _CANDIDATE, f"{where}.candidates[{index}]").get("grid")],
                   f"{where}.candidates[{index}].grid")
        return cls(record_grids(data.get("attempts", []), f"{where}.attempts"),
                   [Candidate.from_json(candidate) for candidate in candidates],
                   list(data.get("inference_augmentations", [])), list(data.get("scoring_augmentations", [])),
                   SearchStats.from_json(data.get("search"), f"{where}.search"), extra)


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

    def to_json(self) -> dict:
        return flat_json(self)

    @classmethod
    def from_json(cls, data: Mapping | None, where: str = "ttt") -> TrainingSummary | None:
        if data is None:
            return None
        known, extra = known_fields(cls, checked(data, _TRAINING, where))
        return cls(**known, extra=extra)


@dataclass
class TaskRecord:
    """One task's outcome; see the module docstring."""

    task_id: str
    tests: list[TestResult] = field(default_factory=list)  # one per test input ([] when it failed or was skipped)
    timings: dict[str, float] = field(default_factory=dict)  # seconds: ttt, generation, scoring, total
    error: str | None = None  # "Type: message" when the method failed on this task
    traceback: str | None = None
    rung: int = 0  # the ladder rung it ran at; FALLBACK_RUNG: no model work
    ttt: TrainingSummary | None = None
    correct: list[bool] | None = None  # per test output, when the answers were known
    skipped: str | None = None  # why it got fallback answers only ("out of time", ...)
    retried_after: str | None = None  # the error of a first try, when it was retried cheaper
    deadline_hit: str | None = None  # the stage its deadline cut short ("test-time training", "generation")
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

    def to_json(self) -> dict:
        data = {"task_id": self.task_id, "test": [test.to_json() for test in self.tests],
                "timings": dict(self.timings), "error": self.error, "rung": self.rung}
        optional = {"traceback": self.traceback, "ttt": self.ttt.to_json() if self.ttt else None,
                    "correct": self.correct, "skipped": self.skipped, "retried_after": self.retried_after,
                    "deadline_hit": self.deadline_hit}
        data.update({key: value for key, value in optional.items() if value is not None})
        data.update(self.extra)
        return data

    @classmethod
    def from_json(cls, data: Any) -> TaskRecord:
        """Read a record line; ValueError saying what is missing or of the wrong kind when it is no record
        ``to_json`` could have written (it is then never taken for one)."""
        record_task_id(data)
        known, extra = known_fields(cls, checked(data, _TASK, "the record"))
        extra.pop("test", None)
        tests = [TestResult.from_json(test, f"test[{index}]") for index, test in enumerate(data.get("test", []))]
        known.pop("tests", None)
        known.pop("extra", None)
        correct = known.pop("correct", None)
        return cls(**{**known, "tests": tests, "ttt": TrainingSummary.from_json(data.get("ttt")),
                      "correct": None if correct is None else list(correct),
                      "timings": dict(data.get("timings") or {})}, extra=extra)


def fallback_record(task_id: str, reason: str) -> TaskRecord:
    """The record of a task that got no model work: fallback attempts only."""
    return TaskRecord(task_id, timings={"total": 0.0}, rung=FALLBACK_RUNG, skipped=reason)


def read_records(path: str | Path, kind: type = TaskRecord) -> dict[str, Any]:
    """Records of ``kind`` (``TaskRecord``, or a table's: ``table_records``) by task id from a JSON-lines
    file (a later line for the same task wins).

    A torn line (a killed run) is skipped silently; a line that parses but is no record is skipped
    with one warning naming the file and the line.
    """
    path = Path(path)
    records, bad = {}, []
    for number, data in read_json_lines(path):
        try:
            record = kind.from_json(data)
        except (ValueError, TypeError, KeyError) as error:
            bad.append(f"line {number}: {error}")
            continue
        records[record.task_id] = record
    if bad:
        warnings.warn(f"{path}: skipped {len(bad)} line(s) that are not records ({bad[0]})", stacklevel=2)
    return records


def append_record(path: str | Path, record) -> None:
    """Append one record (any kind here) as a line of a JSON-lines file."""
    append_json_line(path, record.to_json())


def write_records(path: str | Path, records: Iterable) -> None:
    """Replace a JSON-lines file with ``records``, one line each, atomically (a reader sees the old or the new)."""
    write_json_lines_atomically(path, [record.to_json() for record in records])


def answers_from_records(records: Mapping[str, TaskRecord]) -> dict[str, list[list[np.ndarray]]]:
    """The attempts of every record, for ``submission.build_submission`` (failed tasks have none)."""
    return {task_id: record.attempts for task_id, record in records.items()}


def record_table(records: Iterable[TaskRecord]):
    """One row per task: candidates, forward calls, timings, rung, error (a pandas DataFrame)."""
    import pandas as pd

    rows = [{"task_id": record.task_id,
             "candidates": sum(len(test.candidates) for test in record.tests),
             "forward_calls": sum(test.search.forward_calls for test in record.tests),
             "ttt_seconds": record.timings.get("ttt"),
             "generation_seconds": record.timings.get("generation"),
             "scoring_seconds": record.timings.get("scoring"),
             "total_seconds": record.timings.get("total"),
             "rung": record.rung,
             "error": record.error or record.skipped} for record in records]
    columns = ["task_id", "candidates", "forward_calls", "ttt_seconds", "generation_seconds", "scoring_seconds",
               "total_seconds", "rung", "error"]
    return pd.DataFrame(rows, columns=columns)  # the columns also when no task has a record yet


__all__ = ["FALLBACK_RUNG", "SearchStats", "TaskRecord", "TestResult", "TrainingSummary", "answers_from_records",
           "append_record", "fallback_record", "read_records", "record_table", "write_records"]
