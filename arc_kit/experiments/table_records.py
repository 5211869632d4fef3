"""The records of the paper's tables, one JSON line per task: ``AblationRecord`` and ``SamplerRecord``.

``AblationRecord`` (``tables.ablation_task``): per stage and test output, the attempts and whether
they were right; ``SamplerRecord`` (``tables.sampler_task``): one test-time training, then each
sampler's ``SamplerResult``. ``to_json`` writes the layout the kit has always written; ``from_json``
reads it back as ``method.records`` reads a task's (``method.record_json``: kinds checked, a later
kit's fields kept in ``extra``); ``method.records.read_records`` and ``append_record`` read and write
their files. Knows grids and the test-time training summary; knows nothing of models or how the
records were made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arc_kit.data.grids import grid_to_json
from arc_kit.method.record_json import checked, flags, known_fields, record_grids, record_task_id
from arc_kit.method.records import TrainingSummary
from arc_kit.names import shown

_ABLATION = {"task_id": "string", "stages": "object of list of list", "correct": "object of list of boolean",
             "correct_top1": "object of list of boolean or null", "candidates": "object of list of integer",
             "dfs_capped": "list of string", "ttt": "object or null", "seconds": "object of number",
             "peak_memory_gb": "object of number", "probabilities": "string or null"}
_SAMPLER_RESULT = {"seconds": "number", "candidates": "list of integer", "found": "list of boolean",
                   "correct": "object of list of boolean", "correct_top1": "object of list of boolean or null",
                   "peak_memory_gb": "number or null", "capped": "integer"}
_SAMPLER = {"task_id": "string", "ttt": "object or null", "samplers": "object of object",
            "probabilities": "string or null", "scoring_seconds": "number"}




@dataclass
class AblationRecord:
    """One task's row of the ablation (``tables.ablation_task``): per stage and test output, the attempts."""

    task_id: str
    stages: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)  # stage -> per test output, attempts
    correct: dict[str, list[bool]] = field(default_factory=dict)  # stage -> per test output: either attempt right
    correct_top1: dict[str, list[bool]] | None = None  # the first attempt right (None: a record of an earlier kit)
    candidates: dict[str, list[int]] = field(default_factory=dict)  # "+16xAug", "+DFS" -> per test output
    dfs_capped: list[str] = field(default_factory=list)  # the +DFS searches stopped by a cap, and why
    ttt: TrainingSummary | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # per stage, and "ttt"
    peak_memory_gb: dict[str, float] = field(default_factory=dict)  # per stage (CUDA only)
    probabilities: str | None = None  # how every NLL was measured (``SolveSettings.probabilities``)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are

    def to_json(self) -> dict:
        data = {"task_id": self.task_id,
                "stages": {stage: [[grid_to_json(grid) for grid in attempts] for attempts in tests]
                           for stage, tests in self.stages.items()},
                "candidates": {stage: list(counts) for stage, counts in self.candidates.items()},
                "probabilities": self.probabilities, "ttt": self.ttt.to_json() if self.ttt else None,
                "dfs_capped": list(self.dfs_capped), "correct": dict(self.correct)}
        if self.correct_top1 is not None:
            data["correct_top1"] = dict(self.correct_top1)
        return {**data, "seconds": dict(self.seconds), "peak_memory_gb": dict(self.peak_memory_gb), **self.extra}

    @classmethod
    def from_json(cls, data: Any) -> AblationRecord:
        """Read a record line; ValueError when it is no record ``to_json`` could have written."""
        task_id = record_task_id(data)
        known, extra = known_fields(cls, checked(data, _ABLATION, "the record"))
        top1 = known.get("correct_top1")
        return cls(task_id, {str(stage): [record_grids(attempts, f"stages.{shown(stage)}[{index}]")
                                          for index, attempts in enumerate(tests)]
                             for stage, tests in (known.get("stages") or {}).items()},
                   flags(known.get("correct")), None if top1 is None else flags(top1),
                   {str(stage): [int(count) for count in counts]
                    for stage, counts in (known.get("candidates") or {}).items()},
                   list(known.get("dfs_capped") or []), TrainingSummary.from_json(known.get("ttt")),
                   dict(known.get("seconds") or {}), dict(known.get("peak_memory_gb") or {}),
                   known.get("probabilities"), extra)


@dataclass
class SamplerResult:
    """What one sampler did on one task (``tables.sampler_task``), per test output where a list."""

    seconds: float = 0.0  # generation, all test inputs
    candidates: list[int] = field(default_factory=list)  # distinct answers found
    found: list[bool] = field(default_factory=list)  # the right answer among them
    correct: dict[str, list[bool]] = field(default_factory=dict)  # aggregation -> either attempt right
    correct_top1: dict[str, list[bool]] | None = None  # the first attempt right (None: a record of an earlier kit)
    peak_memory_gb: float | None = None  # CUDA only
    capped: int = 0  # searches stopped by a cap
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are

    def to_json(self) -> dict:
        data = {"seconds": self.seconds, "candidates": list(self.candidates), "found": list(self.found),
                "correct": dict(self.correct)}
        if self.correct_top1 is not None:
            data["correct_top1"] = dict(self.correct_top1)
        return {**data, "peak_memory_gb": self.peak_memory_gb, "capped": self.capped, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping, where: str = "sampler") -> SamplerResult:
        known, extra = known_fields(cls, checked(data, _SAMPLER_RESULT, where))
        top1 = known.get("correct_top1")
        return cls(float(known.get("seconds") or 0.0), [int(count) for count in known.get("candidates") or []],
                   [bool(value) for value in known.get("found") or []], flags(known.get("correct")),
                   None if top1 is None else flags(top1), known.get("peak_memory_gb"), int(known.get("capped") or 0),
                   extra)


@dataclass
class SamplerRecord:
    """One task's row of the sampler comparison: one test-time training, then every sampler's results."""

    task_id: str
    ttt: TrainingSummary | None = None
    samplers: dict[str, SamplerResult] = field(default_factory=dict)  # by ``SamplerSettings.name``
    probabilities: str | None = None  # how every NLL was measured (``SolveSettings.probabilities``)
    scoring_seconds: float = 0.0  # scoring the candidates of all samplers together
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are

    def to_json(self) -> dict:
        return {"task_id": self.task_id, "ttt": self.ttt.to_json() if self.ttt else None,
                "samplers": {name: result.to_json() for name, result in self.samplers.items()},
                "probabilities": self.probabilities, "scoring_seconds": self.scoring_seconds, **self.extra}

    @classmethod
    def from_json(cls, data: Any) -> SamplerRecord:
        """Read a record line; ValueError when it is no record ``to_json`` could have written."""
        task_id = record_task_id(data)
        known, extra = known_fields(cls, checked(data, _SAMPLER, "the record"))
        return cls(task_id, TrainingSummary.from_json(known.get("ttt")),
                   {str(name): SamplerResult.from_json(result, f"samplers.{shown(name)}")
                    for name, result in (known.get("samplers") or {}).items()},
                   known.get("probabilities"), float(known.get("scoring_seconds") or 0.0), extra)
