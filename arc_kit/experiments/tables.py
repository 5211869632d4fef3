"""The paper's two tables, each reproducible with one command: the ablation and the sampler comparison.

Ablation (paper Table 1), per task, sharing work between stages:
  baseline   one greedy answer, no test-time training, the task as given;
  +TTT       the same after test-time training;
  +16xAug    one greedy answer under each of 16 augmentations, the two with the best generation
             probability kept;
  +PoE       the same candidates, the two best by the product of experts over 16 fresh augmentations;
  +DFS       DFS (T = 9%) under the 16 augmentations instead of greedy, then PoE.
Samplers (paper Table 2): after test-time training, each sampler runs under the same 16
augmentations; the candidates of all samplers are scored once under 16 fresh augmentations (a
candidate's score does not depend on who found it) and each sampler is judged on its own candidates.

Accuracy is the competition's (either attempt), top-1 beside it (the first attempt only, as the
paper's Sudoku experiment counts); every NLL is measured as ``settings.probabilities`` says (the
records name it); timings are per task.

A table runs through the pool as a solve does (``run.pool.run_in_pool``: one worker in this process, or Ray's
actors, several of them sharing a GPU where asked): ``ablation_task`` or ``sampler_task`` is the workers' work on
a task, ``TableOutputs`` what the run keeps. A table's folder is a run folder (``run``): ``run.json`` holds the
settings and the data set, each task's record (``table_records``) is appended to ``<table>_records.jsonl`` as it
finishes and the table rewritten. A rerun resumes; a folder that ran other settings or another data set is
refused (``runs.RunFolderError``), as a solve's is; ``table_records`` writes the tables out. This module knows the
solver's pieces and the run layer; it writes no record layout of its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.grids import grid_key
from arc_kit.data.submission import any_attempt_right, attempt_is_right
from arc_kit.data.tasks import Task, TaskSet
from arc_kit.experiments.generate_samplers import GENERATE_KINDS, generated_candidates
from arc_kit.experiments.table_records import (
    ABLATION_STAGES,
    AblationRecord,
    SamplerRecord,
    SamplerResult,
    TableRun,
    ablation_table,
    sampler_table,
)
from arc_kit.method.experts import AGGREGATIONS, Candidate, select
from arc_kit.method.solver import Solver, task_rng
from arc_kit.names import shown
from arc_kit.run.pool import run_in_pool
from arc_kit.run.runs import TABLE_NAMES, records_file
from arc_kit.settings import SamplerSettings, SolveSettings

DEFAULT_SAMPLERS = (SamplerSettings("greedy"), SamplerSettings("sample", count=2), SamplerSettings("sample", count=4),
                    SamplerSettings("beam", count=2), SamplerSettings("beam", count=4),
                    SamplerSettings("dfs", threshold=0.2), SamplerSettings("dfs", threshold=0.09),
                    SamplerSettings("dfs", threshold=0.005))


class _Clock:
    """Seconds per named span, and on CUDA the peak memory allocated within each span (GiB, the largest of its
    spans)."""

    def __init__(self, model):
        self.seconds: dict[str, float] = {}
        self.peak_memory_gb: dict[str, float] = {}
        self.cuda = next(model.parameters()).device.type == "cuda"

    @contextmanager
    def __call__(self, name: str):
        import torch

        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        started = time.monotonic()
        yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started
        if self.cuda:
            peak = torch.cuda.max_memory_allocated() / 2**30
            self.peak_memory_gb[name] = max(self.peak_memory_gb.get(name, 0.0), peak)


def ablation_task(solver: Solver, task: Task) -> AblationRecord:
    """All five stages on one task (the +DFS stage at the solver's threshold); the record holds per-stage
    correctness and timings."""
    if solver.trainer is None:
        raise ValueError("the ablation needs a solver with test-time training on")
    clock = _Clock(solver.model)
    answers, visible, sampler = task.test_outputs, task.without_solutions(), solver.settings.sampler
    greedy, dfs = SamplerSettings("greedy"), SamplerSettings("dfs", threshold=sampler.threshold,
                                                             max_forward_calls=sampler.max_forward_calls)
    identity = [Augmentation()]
    record = AblationRecord(task.id, {stage: [] for stage in ABLATION_STAGES},
                            probabilities=solver.space.probabilities)
    per_test = [(test_input, *solver.views(visible, index)) for index, test_input in enumerate(visible.test_inputs)]
    with clock("baseline"), solver.base_model() as base:
        for test_input, _, _ in per_test:
            found, _ = solver.sample(base, visible.train, test_input, identity, greedy, task_id=task.id)
            record.stages["baseline"].append([c.grid for c in found[:2]])
    with clock("ttt"):
        record.ttt = solver.adapt(visible)
    for test_input, inference, scoring in per_test:
        with clock("+TTT"):
            found, _ = solver.sample(solver.model, visible.train, test_input, identity, greedy, task_id=task.id)
        record.stages["+TTT"].append([c.grid for c in found[:2]])
        with clock("+16xAug"):
            augmented, _ = solver.sample(solver.model, visible.train, test_input, inference, greedy, task_id=task.id)
        record.stages["+16xAug"].append([augmented[i].grid for i in select(augmented, "generation")])
        with clock("+PoE"):
            solver.score(solver.model, visible.train, test_input, augmented, scoring)
        record.stages["+PoE"].append([augmented[i].grid for i in select(augmented, "product")])
        with clock("+DFS"):
            searched, search = solver.sample(solver.model, visible.train, test_input, inference, dfs, task_id=task.id)
            solver.score(solver.model, visible.train, test_input, searched, scoring)
        record.stages["+DFS"].append([searched[i].grid for i in select(searched, "product")])
        record.candidates.setdefault("+16xAug", []).append(len(augmented))
        record.candidates.setdefault("+DFS", []).append(len(searched))
        record.dfs_capped.extend(search.capped)
    record.correct = {stage: [any_attempt_right(attempts, answer)
                              for attempts, answer in zip(record.stages[stage], answers)]
                      for stage in ABLATION_STAGES}
    record.correct_top1 = {stage: [bool(attempts) and attempt_is_right(attempts[0], answer)
                                   for attempts, answer in zip(record.stages[stage], answers)]
                           for stage in ABLATION_STAGES}
    record.seconds = {name: round(value, 3) for name, value in clock.seconds.items()}
    record.peak_memory_gb = {name: round(value, 3) for name, value in clock.peak_memory_gb.items()}
    return record


def sampler_task(solver: Solver, task: Task, samplers: Sequence[SamplerSettings] = DEFAULT_SAMPLERS) -> SamplerRecord:
    """Every sampler on one task after one test-time training; shared scoring of all candidates."""
    settings, visible, answers = solver.settings, task.without_solutions(), task.test_outputs
    record = SamplerRecord(task.id, solver.adapt(visible), probabilities=solver.space.probabilities)
    clock = _Clock(solver.model)
    for index, test_input in enumerate(visible.test_inputs):
        inference, scoring = solver.views(visible, index)
        found: dict[str, list[Candidate]] = {}
        for sampler in samplers:
            with clock(sampler.name):
                if sampler.kind in GENERATE_KINDS:  # the paper's others: transformers' generate, seeded per sampler
                    rng = task_rng(settings.seed, task.id, f"test{index}/{sampler.name}")
                    candidates, search = generated_candidates(solver, visible.train, test_input, inference, sampler,
                                                              rng, task.id)
                else:
                    candidates, search = solver.sample(solver.model, visible.train, test_input, inference, sampler,
                                                       task_id=task.id)
            result = record.samplers.setdefault(sampler.name, SamplerResult(
                correct={a: [] for a in AGGREGATIONS}, correct_top1={a: [] for a in AGGREGATIONS}))
            result.candidates.append(len(candidates))
            result.found.append(grid_key(answers[index]) in {grid_key(c.grid) for c in candidates})
            result.capped += len(search.capped)
            found[sampler.name] = candidates
        union = {grid_key(c.grid): Candidate(c.grid) for candidates in found.values() for c in candidates}
        with clock("scoring"):
            solver.score(solver.model, visible.train, test_input, list(union.values()), scoring)
        for name, candidates in found.items():
            for candidate in candidates:
                candidate.scoring_nlls = union[grid_key(candidate.grid)].scoring_nlls
            for aggregation in AGGREGATIONS:
                chosen = [candidates[i].grid for i in select(candidates, aggregation)]
                result = record.samplers[name]
                result.correct[aggregation].append(any_attempt_right(chosen, answers[index]))
                result.correct_top1[aggregation].append(bool(chosen) and attempt_is_right(chosen[0], answers[index]))
    for name, result in record.samplers.items():
        result.seconds = clock.seconds[name]
        result.peak_memory_gb = round(clock.peak_memory_gb[name], 2) if name in clock.peak_memory_gb else None
    record.scoring_seconds = clock.seconds.get("scoring", 0.0)
    return record


def ablation_work(solver: Solver, task: Task, rung: int, budget=None) -> AblationRecord:
    """The ablation's work on a task in a pool's worker (``run.pool.Outputs.work``): its five stages, in full (no rung
    nor cap applies to a table)."""
    return ablation_task(solver, task)


def sampler_work(solver: Solver, task: Task, rung: int, budget=None, *,
                 samplers: Sequence[SamplerSettings] = DEFAULT_SAMPLERS) -> SamplerRecord:
    """The sampler table's work on a task in a pool's worker: every sampler, in full."""
    return sampler_task(solver, task, samplers)


@dataclass
class TableOutputs:
    """What a table keeps of its tasks (``run.pool.Outputs``): each task's record in ``<table>_records.jsonl``, and
    the table (``<table>.md``, ``<table>.csv``) rewritten after each. A table's task has no fallback: one its worker
    could not finish is left for a rerun."""

    command: str  # the table: "ablation" or "samplers"
    settings: SolveSettings
    out: Path
    samplers: tuple[SamplerSettings, ...] = ()  # the sampler table's
    ladder = False

    @property
    def records_file(self) -> str:
        return records_file(self.command)

    @property
    def record_kind(self) -> type:
        return AblationRecord if self.command == "ablation" else SamplerRecord

    @property
    def work(self):
        return ablation_work if self.command == "ablation" else partial(sampler_work, samplers=self.samplers)

    def fallback(self, task_id: str, why: str) -> None:
        return None

    def took(self, record) -> None:
        return None

    def measured(self, record) -> tuple[int, None]:
        return 0, None

    def line(self, record) -> str:
        if isinstance(record, AblationRecord):
            seconds = sum(record.seconds.values())
        else:
            seconds = sum(result.seconds for result in record.samplers.values()) + record.scoring_seconds \
                + ((record.ttt.seconds or 0.0) if record.ttt else 0.0)
        return f"task {shown(record.task_id)}: {self.command} in {seconds:.1f} s"

    def write(self, records: dict) -> None:
        if records:
            self.end(records, 0.0)

    def end(self, records: dict, seconds: float) -> TableRun:
        if self.command == "ablation":
            return ablation_table(records, self.settings, self.out)
        return sampler_table(records, self.samplers, self.settings, self.out)


def run_ablation(tasks: TaskSet, solver: Solver, out: str | Path, *, progress: bool = True, info: dict | None = None,
                 **options) -> TableRun:
    """The ablation on every task with ``solver`` (its +DFS stage at the solver's threshold), in this process;
    writes ablation.md and ablation.csv into the run folder ``out`` (``info`` goes into a new ``run.json``, see
    ``runs.open_run``; ``options`` are ``run.pool.run_in_pool``'s)."""
    outputs = TableOutputs("ablation", solver.settings, Path(out))
    return run_in_pool(tasks, outputs, solver.settings, out, solver=solver, progress=progress, info=info, **options)


def run_table(which: str, tasks: TaskSet, model, settings: SolveSettings, out: str | Path, *,
              info: dict | None = None, **options) -> TableRun:
    """One of the paper's tables on ``tasks`` (which need known test outputs) with the model in folder ``model``.

    The ablation uses the settings' DFS threshold for its last stage; the sampler table runs its
    fixed samplers under the settings' search cap and temperature; both with test-time training on. ``out`` is a
    run folder (module docstring; ``info``: see ``runs.open_run``). The tasks go through the pool
    (``run.pool.run_in_pool``; ``options`` are its own: ``restart``, ``load_options``, ``progress``, ``workers`` and
    ``workers_per_gpu``, as several Ray actors may share a GPU that a small model leaves mostly idle, ``deadline``
    after which no task starts, ``stop_at``...): the table covers the tasks finished. The model is loaded (for Ray's
    actors: its folder and tokenizer checked) before ``out`` is claimed: a refused table leaves nothing behind.
    """
    if which not in TABLE_NAMES:  # ("ablation", "samplers"): a run folder's layout names their files
        raise ValueError(f"unknown table {which!r}; expected one of {TABLE_NAMES}")
    if not tasks.has_solutions:
        raise ValueError("the tables need tasks with known test outputs (a dataset name, or --solutions)")
    settings = settings.replace(test_time_training=True)
    samplers = tuple(sampler.replace(max_forward_calls=settings.sampler.max_forward_calls,
                                     temperature=settings.sampler.temperature) for sampler in DEFAULT_SAMPLERS)
    outputs = TableOutputs(which, settings, Path(out), samplers if which == "samplers" else ())
    return run_in_pool(tasks, outputs, settings, out, model=model, info={"table": which, **(info or {})}, **options)
