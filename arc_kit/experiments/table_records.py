"""The records of the paper's tables, one JSON line per task: ``AblationRecord`` and ``SamplerRecord``.

``AblationRecord`` (``tables.ablation_task``): per stage and test output, the attempts and whether
they were right; ``SamplerRecord`` (``tables.sampler_task``): one test-time training, then each
sampler's ``SamplerResult``. Their JSON is derived from these dataclasses as a task's is
(``run.record_json``: kinds checked, a later kit's fields kept in ``extra``), which also reads and
writes their files. Knows grids and the test-time training summary; knows nothing of models, JSON or
how the records were made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arc_kit.method.records import WHEN_SET, TrainingSummary


@dataclass
class AblationRecord:
    """One task's row of the ablation (``tables.ablation_task``): per stage and test output, the attempts."""

    task_id: str
    stages: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)  # stage -> per test output, attempts
    correct: dict[str, list[bool]] = field(default_factory=dict)  # stage -> per test output: either attempt right
    correct_top1: dict[str, list[bool]] | None = field(default=None,  # the first attempt right (None: an earlier
                                                       metadata=WHEN_SET)  # kit's record)
    candidates: dict[str, list[int]] = field(default_factory=dict)  # "+16xAug", "+DFS" -> per test output
    dfs_capped: list[str] = field(default_factory=list)  # the +DFS searches stopped by a cap, and why
    ttt: TrainingSummary | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # per stage, and "ttt"
    peak_memory_gb: dict[str, float] = field(default_factory=dict)  # per stage (CUDA only)
    probabilities: str | None = None  # how every NLL was measured (``SolveSettings.probabilities``)
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are


@dataclass
class SamplerResult:
    """What one sampler did on one task (``tables.sampler_task``), per test output where a list."""

    seconds: float = 0.0  # generation, all test inputs
    candidates: list[int] = field(default_factory=list)  # distinct answers found
    found: list[bool] = field(default_factory=list)  # the right answer among them
    correct: dict[str, list[bool]] = field(default_factory=dict)  # aggregation -> either attempt right
    correct_top1: dict[str, list[bool]] | None = field(default=None,  # the first attempt right (None: an earlier
                                                       metadata=WHEN_SET)  # kit's record)
    peak_memory_gb: float | None = None  # CUDA only
    capped: int = 0  # searches stopped by a cap
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are


@dataclass
class SamplerRecord:
    """One task's row of the sampler comparison: one test-time training, then every sampler's results."""

    task_id: str
    ttt: TrainingSummary | None = None
    samplers: dict[str, SamplerResult] = field(default_factory=dict)  # by ``SamplerSettings.name``
    probabilities: str | None = None  # how every NLL was measured (``SolveSettings.probabilities``)
    scoring_seconds: float = 0.0  # scoring the candidates of all samplers together
    extra: dict[str, Any] = field(default_factory=dict)  # fields of a later kit, kept as they are
