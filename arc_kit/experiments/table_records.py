"""The paper's two tables: their records (one JSON line per task), and the tables written out from them.

``AblationRecord`` (``tables.ablation_task``): per stage and test output, the attempts and whether
they were right; ``SamplerRecord`` (``tables.sampler_task``): one test-time training, then each
sampler's ``SamplerResult``. Their JSON is derived from these dataclasses as a task's is
(``arc_kit.codec``: kinds checked, a later kit's fields kept in ``extra``); ``run.record_json`` reads and
writes their files. ``ablation_table`` (paper Table 1, per stage) and ``sampler_table`` (paper Table 2,
per sampler and aggregation) write ``<table>.md`` and ``<table>.csv`` into the run folder, the paper's
numbers beside; accuracy is the competition's (either attempt), top-1 beside it. Knows grids, the
test-time training summary and the settings; knows nothing of models, solvers or how the records were made.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from arc_kit.method.records import WHEN_SET, TrainingSummary
from arc_kit.outputs import replace_file, replacing
from arc_kit.settings import SamplerSettings, SolveSettings

PARAGRAPH_WIDTH = 110  # a table's explanation, wrapped (Markdown joins the lines again)

ABLATION_STAGES = ("baseline", "+TTT", "+16xAug", "+PoE", "+DFS")
PAPER_ABLATION = {  # two-attempt accuracy on the 400 ARC-AGI-1 evaluation tasks, paper Table 1
    "Llama-3.2-3B": (14.9, 40.9, 52.9, 59.5, 61.4),
    "NeMo-Minitron-8B": (18.3, 44.5, 62.5, 67.6, 71.6),
}
PAPER_SAMPLERS = {  # NeMo-Minitron-8B, paper Table 2: solutions found, candidates per task, product accuracy
    "greedy": (70.8, 6.7, 67.6), "stochastic x2": (74.5, 11.2, 69.9), "stochastic x4": (77.3, 17.6, 70.8),
    "beam x2": (75.0, 15.9, 69.9), "beam x4": (79.0, 34.7, 71.6), "DFS T=20%": (73.5, 4.9, 70.0),
    "DFS T=9%": (76.0, 9.3, 71.6), "DFS T=0.5%": (83.5, 84.7, 71.8),
}


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


@dataclass
class TableRun:
    table: object  # pandas.DataFrame
    markdown: str
    records: dict  # task id -> table_records.AblationRecord or table_records.SamplerRecord


def ablation_table(records: Mapping[str, AblationRecord], settings: SolveSettings, out: str | Path) -> TableRun:
    """The ablation table of finished records (their +DFS stage at ``settings.sampler.threshold``); writes
    ablation.md and ablation.csv into ``out``."""
    import pandas as pd

    outputs = sum(len(r.correct["baseline"]) for r in records.values())
    rows = []
    top1_known = all(r.correct_top1 is not None for r in records.values())  # records of an earlier kit lack it
    for position, stage in enumerate(ABLATION_STAGES):
        right = sum(sum(r.correct[stage]) for r in records.values())
        right_top1 = sum(sum(r.correct_top1[stage]) for r in records.values()) if top1_known else None
        row = {"stage": stage, "correct": right, "correct_top1": right_top1, "test_outputs": outputs,
               "accuracy_percent": _percent(right, outputs),
               "accuracy_top1_percent": _percent(right_top1, outputs),
               "seconds_per_task": round(np.mean([r.seconds.get(stage, 0.0)
                                                  for r in records.values()]), 2) if records else 0.0,
               "peak_gpu_memory_gb": max((r.peak_memory_gb.get(stage) or 0.0 for r in records.values()),
                                         default=0.0) or None}
        for model, numbers in PAPER_ABLATION.items():
            row[f"paper {model}"] = numbers[position]
        rows.append(row)
    table = pd.DataFrame(rows)
    ttt_seconds = np.mean([r.seconds.get("ttt", 0.0) for r in records.values()]) if records else 0.0
    markdown = (f"Two-attempt accuracy (and top-1: the first attempt only) on {len(records)} tasks ({outputs} test "
                f"outputs), NLLs under {_measure(settings.probabilities)}, with "
                f"{settings.inference_augmentations} inference and {settings.scoring_augmentations} scoring "
                f"augmentations (the stage names are the paper's, for 16 and 16) and DFS at "
                f"T = {settings.sampler.threshold:g}. "
                f"Seconds per task are each stage's own work; test-time training ({settings.ttt.steps} steps) adds "
                f"{ttt_seconds:.1f} s per task to every stage from +TTT on. Peak GPU memory is each stage's, in one "
                f"process (CUDA only).")
    markdown = textwrap.fill(markdown, PARAGRAPH_WIDTH) + "\n\n" + _markdown(table)  # a printed line stays short
    _write_table(Path(out), "ablation", table, markdown)
    return TableRun(table, markdown, dict(records))


def sampler_table(records: Mapping[str, SamplerRecord], samplers: Sequence[SamplerSettings],
                  settings: SolveSettings, out: str | Path) -> TableRun:
    """The sampler table of finished records; writes samplers.md and samplers.csv into ``out``."""
    import pandas as pd

    rows = []
    for sampler in samplers:
        results = [r.samplers[sampler.name] for r in records.values() if sampler.name in r.samplers]
        outputs = sum(len(e.found) for e in results)
        found = sum(sum(e.found) for e in results)
        row = {"sampler": sampler.name, "solutions_found_percent": _percent(found, outputs),
               "candidates_per_task": round(np.mean([sum(e.candidates) for e in results]), 1) if results else 0.0,
               "generation_seconds_per_task": round(np.mean([e.seconds for e in results]), 2) if results else 0.0,
               "peak_gpu_memory_gb": max((e.peak_memory_gb for e in results if e.peak_memory_gb is not None),
                                         default=None),
               "capped_searches": sum(e.capped for e in results)}
        for aggregation in ("max", "min", "sum", "product"):
            right = sum(sum(e.correct[aggregation]) for e in results)
            row[f"accuracy_{aggregation}_percent"] = _percent(right, outputs)
        top1_known = all(e.correct_top1 is not None for e in results)  # records of an earlier kit lack it
        for aggregation in ("max", "min", "sum", "product"):
            right = sum(sum(e.correct_top1[aggregation]) for e in results) if top1_known else None
            row[f"accuracy_{aggregation}_top1_percent"] = _percent(right, outputs)
        paper = PAPER_SAMPLERS.get(sampler.name)
        row["paper_found_percent"], row["paper_candidates"], row["paper_product_percent"] = paper or (None,) * 3
        rows.append(row)
    table = pd.DataFrame(rows)
    ttt = np.mean([(r.ttt.seconds if r.ttt else 0.0) or 0.0 for r in records.values()]) if records else 0.0
    scoring = np.mean([r.scoring_seconds for r in records.values()]) if records else 0.0
    markdown = (f"{len(records)} tasks, {settings.inference_augmentations} inference and "
                f"{settings.scoring_augmentations} scoring augmentations, NLLs under "
                f"{_measure(settings.probabilities)}; accuracies count two attempts, those ending _top1 the "
                "first only. "
                f"Test-time training took {ttt:.1f} s per task; scoring the candidates of all "
                f"samplers together under the scoring augmentations took {scoring:.1f} s per task. Peak GPU memory is "
                "measured on CUDA only.")
    markdown = textwrap.fill(markdown, PARAGRAPH_WIDTH) + "\n\n" + _markdown(table)
    _write_table(Path(out), "samplers", table, markdown)
    return TableRun(table, markdown, dict(records))


def _write_table(out: Path, name: str, table, markdown: str) -> None:
    """``name``.csv and ``name``.md in run folder ``out``, each written aside and renamed into place (``outputs``:
    never through a link)."""
    with replacing(out / f"{name}.csv", newline="") as handle:
        table.to_csv(handle, index=False)
    replace_file(out / f"{name}.md", markdown + "\n")


def _percent(right: int | None, outputs: int) -> float | None:
    """``right`` of ``outputs`` in percent (0 without outputs; None when unknown)."""
    if right is None:
        return None
    return round(100 * right / outputs, 1) if outputs else 0.0


def _measure(probabilities: str) -> str:
    return "the full softmax" if probabilities == "full" else "the softmax renormalised over the answer tokens"


def _markdown(table) -> str:
    """A pipe table without extra dependencies (pandas' to_markdown needs tabulate)."""
    columns = list(table.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for _, row in table.iterrows():
        lines.append("| " + " | ".join("" if row[c] is None or (isinstance(row[c], float) and np.isnan(row[c]))
                                       else str(row[c]) for c in columns) + " |")
    return "\n".join(lines)
