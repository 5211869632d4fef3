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

A table's folder is a run folder (``run``): ``run.json`` holds the settings and the data set, and
each task's record (``table_records``) is appended to ``<table>_records.jsonl`` as it finishes. A
rerun resumes; a folder that ran other settings or another data set is refused
(``runs.RunFolderError``), as a solve's is; ``table_records`` writes the tables out. This module
knows the solver's pieces and the run layer; it writes no record layout of its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from itertools import takewhile
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
from arc_kit.model.loading import LoadSettings, load_encoder, load_model, token_budget_of
from arc_kit.names import shown
from arc_kit.outputs import kit_subfolder, remove_owned
from arc_kit.progress import progress_bar
from arc_kit.run.locking import hold_folder
from arc_kit.run.record_json import append_record
from arc_kit.run.runs import (
    CLAIMS_FOLDER,
    RUN_KIND,
    TABLE_NAMES,
    RunFolderError,
    check_run,
    check_run_folder,
    claim_task,
    open_run,
    records_file,
    run_records,
)
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


def _run_tasks(tasks: TaskSet, solver: Solver, out: Path, table: str, kind: type, work, progress: bool, *,
               info: dict | None = None, worker: int | None = None, stop_at: float | None = None) -> dict:
    """Run ``work`` on every task without a record in run folder ``out``; a rerun resumes.

    A single process opens the run (``runs.open_run``: refused when the folder ran other settings or
    another data set) and holds the folder's lock throughout (``locking``). As one of several workers
    (``worker`` = its number) the parent has opened it and holds its lock; a task goes to whichever
    worker claims it first and its record into ``out/worker-N``; no task is started after ``stop_at``
    (monotonic).
    """

    with hold_folder(out, RUN_KIND, table) if worker is None else nullcontext():
        if worker is None:
            open_run(out, solver.settings, info, command=table)
        elif not check_run(out, solver.settings, info):
            raise RunFolderError(f"{out} holds no run ({table} worker {worker}); the parent opens it first")
        records = run_records(out, records_file(table), kind, tasks.ids)
        path = (out if worker is None else out / f"worker-{worker}") / records_file(table)
        kit_subfolder(path.parent, within=out)  # a worker's folder: never a link to elsewhere
        for task in progress_bar([t for t in tasks.tasks() if t.id not in records], desc=table, unit="task",
                         disable=not progress):
            if not task.has_solutions:
                raise ValueError(f"task {shown(task.id)} has no known test outputs; the tables need solutions")
            if stop_at is not None and time.monotonic() > stop_at:
                break
            if worker is not None and not claim_task(out, task.id):
                continue
            records[task.id] = work(task)
            append_record(path, records[task.id])
    return {task_id: records[task_id] for task_id in tasks.ids if task_id in records}


def run_ablation(tasks: TaskSet, solver: Solver, out: str | Path, *, progress: bool = True, info: dict | None = None,
                 worker: int | None = None, stop_at: float | None = None) -> TableRun:
    """The ablation on every task (its +DFS stage at the solver's threshold); writes ablation.md and ablation.csv
    into the run folder ``out`` (``info`` goes into a new ``run.json``, see ``runs.open_run``)."""
    out = Path(out)
    records = _run_tasks(tasks, solver, out, "ablation", AblationRecord, lambda task: ablation_task(solver, task),
                         progress, info=info, worker=worker, stop_at=stop_at)
    return ablation_table(records, solver.settings, out)


def _ablation_worker(worker: int, tasks: TaskSet, model, settings: SolveSettings, out: str, load_options: dict,
                     stop_at_epoch: float | None) -> None:
    """One of several processes sharing an ablation run (see ``run_table``); ``settings`` are the run's own."""
    import torch

    torch.set_num_threads(1)
    solver = Solver.from_loaded(load_model(model, LoadSettings(**load_options)), settings)
    stop_at = None if stop_at_epoch is None else time.monotonic() + stop_at_epoch - time.time()
    run_ablation(tasks, solver, out, progress=False, worker=worker, stop_at=stop_at)


def run_table(which: str, tasks: TaskSet, model, settings: SolveSettings, out: str | Path, *, restart: bool = False,
              load_options: dict | None = None, progress: bool = True, workers: int = 1,
              minutes: float | None = None, grace_minutes: float = 2.0, info: dict | None = None) -> TableRun:
    """One of the paper's tables on ``tasks`` (which need known test outputs) with the model in folder ``model``.

    The ablation uses the settings' DFS threshold for its last stage; the sampler table runs its
    fixed samplers under the settings' search cap and temperature. ``out`` is a run folder (module
    docstring; ``info``: see ``runs.open_run``); ``restart`` discards the earlier run first. The ablation can run in ``workers`` processes that share
    the tasks (a small model leaves most of a GPU idle); with ``minutes``, no task starts after that
    long, a task still running ``grace_minutes`` later is stopped (a rerun does it), and the table
    covers the tasks finished from the first one on, in order. The model is loaded (for worker processes: its
    folder and tokenizer checked) before ``out`` is claimed: a refused table leaves nothing behind.
    """
    from arc_kit.provenance import run_info

    if which not in TABLE_NAMES:  # ("ablation", "samplers"): a run folder's layout names their files
        raise ValueError(f"unknown table {which!r}; expected one of {TABLE_NAMES}")
    if not tasks.has_solutions:
        raise ValueError("the tables need tasks with known test outputs (a dataset name, or --solutions)")
    if workers > 1 and which != "ablation":
        raise ValueError("only the ablation runs in several workers")
    out = Path(out)
    check_run_folder(out, which, restart=restart)  # a folder the kit may not write, or in use: refused
    # the settings every process runs with, as the solver resolves them: test-time training on, the budget cut to
    # what the model takes
    settings = settings.replace(test_time_training=True, max_len=token_budget_of(model, settings.max_len))
    info = run_info(**{"model": str(model), "table": which, "tasks": len(tasks), **(info or {})})
    in_workers = which == "ablation" and (workers > 1 or minutes is not None)
    load = LoadSettings(**(load_options or {}))
    solver = None if in_workers else Solver.from_loaded(load_model(model, load), settings)
    if in_workers:
        load_encoder(model, max_len=settings.max_len)  # what the workers load: its folder and tokenizer
    with hold_folder(out, RUN_KIND, which):
        open_run(out, settings, info, restart=restart, command=which)
        if in_workers:
            return _ablation_in_workers(tasks, str(model), settings, out, load_options or {}, workers, minutes,
                                        grace_minutes)
        if which == "ablation":
            return run_ablation(tasks, solver, out, progress=progress)
        samplers = [sampler.replace(max_forward_calls=settings.sampler.max_forward_calls,
                                    temperature=settings.sampler.temperature) for sampler in DEFAULT_SAMPLERS]
        records = _run_tasks(tasks, solver, out, "samplers", SamplerRecord,
                             lambda task: sampler_task(solver, task, samplers), progress)
        return sampler_table(records, samplers, settings, out)


def _ablation_in_workers(tasks: TaskSet, model: str, settings: SolveSettings, out: Path, load_options: dict,
                         workers: int, minutes: float | None, grace_minutes: float) -> TableRun:
    """The ablation in ``workers`` processes sharing the tasks of the opened run folder ``out`` (``run_table``)."""
    import multiprocessing

    stop_at_epoch = None if minutes is None else time.time() + 60 * minutes
    remove_owned(out, RUN_KIND, below=CLAIMS_FOLDER)  # claims of an interrupted run: its tasks are not done
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_ablation_worker, args=(worker, tasks, model, settings, str(out),
                                                                load_options, stop_at_epoch))
                 for worker in range(workers)]
    for process in processes:
        process.start()
    hard_stop = None if minutes is None else time.monotonic() + 60 * (minutes + grace_minutes)
    for process in processes:
        process.join(None if hard_stop is None else max(0.0, hard_stop - time.monotonic()))
    late = [worker for worker, process in enumerate(processes) if process.is_alive()]
    for worker in late:  # their tasks in flight are lost; a rerun does them
        processes[worker].terminate()
        processes[worker].join()
    failed = [worker for worker, process in enumerate(processes) if process.exitcode != 0 and worker not in late]
    if failed:
        raise RuntimeError(f"ablation worker(s) {failed} failed; rerun to resume (their logs are above)")
    records = run_records(out, records_file("ablation"), AblationRecord, tasks.ids)
    return ablation_table({task_id: records[task_id] for task_id in takewhile(records.__contains__, tasks.ids)},
                          settings, out)  # the longest run of tasks from the first
