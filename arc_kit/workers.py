"""Several GPUs: one worker process per GPU, tasks shared out by estimated cost, records merged.

The parent writes the tasks to solve into the run folder, estimates each task's cost from its
token counts, deals the tasks to the workers so that their estimated loads are even (longest
first, each to the least loaded worker), and starts ``python -m arc_kit worker`` once per GPU with
``CUDA_VISIBLE_DEVICES`` set to that GPU. Each worker appends its records to its own file; the
parent merges them every few seconds into ``submission.json`` (complete and valid at all times)
and, at the end, into ``records.jsonl`` and the scores. Every task's result depends only on the
seed and the task, so two workers give the same submission as one. A rerun resumes: tasks already
recorded by any worker (also of an earlier run with more workers) are not dealt again; a folder whose
``run.json`` holds other settings is refused, as ``solver.solve`` refuses it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from arc_kit.datasets import load_challenges
from arc_kit.jsonio import write_json_atomically
from arc_kit.models import LoadSettings, load_encoder, load_model, model_info, token_budget_of
from arc_kit.planner import Speeds, measure
from arc_kit.provenance import run_info
from arc_kit.records import TaskRecord, answers_from_records, read_records
from arc_kit.run import RECORDS_FILE, SolveRun, clear_run, open_run, solve, write_scores
from arc_kit.settings import SolveSettings
from arc_kit.solver import Solver
from arc_kit.submission import build_submission, write_submission
from arc_kit.tasks import TaskSet

logger = logging.getLogger(__name__)


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def deal(costs: dict[str, float], workers: int) -> list[list[str]]:
    """Tasks to workers, longest first to the least loaded one; each worker's list in the original order."""
    loads = [0.0] * workers
    shares: list[list[str]] = [[] for _ in range(workers)]
    for task_id in sorted(costs, key=lambda i: -costs[i]):
        lightest = min(range(workers), key=lambda w: (loads[w], w))
        shares[lightest].append(task_id)
        loads[lightest] += costs[task_id]
    order = {task_id: index for index, task_id in enumerate(costs)}
    return [sorted(share, key=order.__getitem__) for share in shares]


def _merged_records(out: Path) -> dict[str, TaskRecord]:
    """The records of every worker folder in ``out``, also those of an earlier run with more workers."""
    records = {}
    folders = sorted(out.glob("worker-*"), key=lambda folder: (len(folder.name), folder.name))
    for folder in folders:
        records.update(read_records(folder / RECORDS_FILE))
    return records


def solve_in_workers(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, out: str | os.PathLike, *,
                     workers: int | None = None, gpus: Sequence[int] | None = None, deadline: float | None = None,
                     solutions: TaskSet | None = None, load_options: dict | None = None, poll_seconds: float = 5.0,
                     progress: bool = True, submission_path: str | os.PathLike | None = None,
                     submission_tasks: TaskSet | None = None, info: dict | None = None) -> SolveRun:
    """Solve ``tasks`` with one process per GPU (``workers`` CPU processes when there is no GPU).

    The submission (``out/submission.json`` unless ``submission_path`` says otherwise) covers every
    task of ``submission_tasks`` (default ``tasks``), solved or not (skipped ones of a lenient load
    included), and is rewritten as records come in. ``info`` goes into ``run.json`` (see ``run.open_run``).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = settings.replace(max_len=settings.max_len or token_budget_of(model))  # as each worker resolves it
    gpus = list(gpus) if gpus is not None else list(range(gpu_count()))
    workers = workers or max(1, len(gpus))
    started = time.monotonic()
    open_run(out, settings, run_info(**{"model": str(model), "tasks": len(tasks), **(info or {}), "workers": workers}))
    challenges_path = write_json_atomically(out / "tasks.json", TaskSet(tasks.tasks(), tasks.name).challenges_json())
    done = _merged_records(out)
    todo = [task_id for task_id in tasks.ids if task_id not in done]
    costs = _costs(tasks, todo, model, settings)
    shares = deal(costs, workers)
    processes = []
    for index, share in enumerate(shares):
        folder = out / f"worker-{index}"
        folder.mkdir(exist_ok=True)
        plan = {"challenges": str(challenges_path), "task_ids": share, "model": str(model),
                "settings": settings.to_json(), "deadline": deadline, "load": load_options or {}}
        (folder / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
        if not share:
            continue
        environment = dict(os.environ)
        environment["CUDA_VISIBLE_DEVICES"] = str(gpus[index]) if index < len(gpus) else ""
        log = open(folder / "worker.log", "a")
        command = [sys.executable, "-m", "arc_kit", "worker", str(folder / "plan.json")]
        processes.append((index, subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT), log))
    submission_path = Path(submission_path) if submission_path is not None else out / "submission.json"
    covered = submission_tasks if submission_tasks is not None else tasks
    while True:
        records = _merged_records(out)
        write_submission(submission_path, build_submission(covered, answers_from_records(records)), covered)
        if progress:
            print(f"\r{len(records)}/{len(tasks)} tasks done by {len(processes)} worker(s)", end="", flush=True)
        if all(process.poll() is not None for _, process, _ in processes):
            break
        time.sleep(poll_seconds)
    if progress:
        print()
    for index, process, log in processes:
        log.close()
        if process.returncode != 0:
            logger.warning("worker %d exited with status %d; see %s", index, process.returncode,
                           out / f"worker-{index}" / "worker.log")
    records = _merged_records(out)
    ordered = {task_id: records[task_id] for task_id in tasks.ids if task_id in records}
    with open(out / RECORDS_FILE, "w", encoding="utf-8") as handle:
        for record in ordered.values():
            handle.write(json.dumps(record.to_json()) + "\n")
    write_submission(submission_path, build_submission(covered, answers_from_records(ordered)), covered)
    run = SolveRun(out, ordered, submission_path, seconds=time.monotonic() - started)
    answers = solutions if solutions is not None else (tasks if tasks.has_solutions else None)
    if answers is not None and answers.known_outputs():
        run.score = write_scores(out, submission_path, ordered, answers, list(tasks.test_counts()))
    return run


def _costs(tasks: TaskSet, task_ids: Sequence[str], model, settings: SolveSettings) -> dict[str, float]:
    """Estimated seconds per task (token counts with the planner's default speeds); the tokenizer suffices."""
    if not task_ids:
        return {}
    encoder = load_encoder(model, max_len=settings.max_len)
    speeds = Speeds()
    return {task_id: speeds.seconds(measure(tasks[task_id], encoder, settings.max_len), settings)
            for task_id in task_ids}


def run_worker(plan_path: str | os.PathLike) -> int:
    """The body of ``python -m arc_kit worker PLAN``: solve the planned tasks, append records."""
    plan_path = Path(plan_path)
    plan = json.loads(plan_path.read_text())
    tasks = load_challenges(plan["challenges"])
    settings = SolveSettings.from_json(plan["settings"])
    loaded = load_model(plan["model"], LoadSettings(**plan.get("load", {})))
    solver = Solver.from_loaded(loaded, settings)
    solve(tasks, solver, plan_path.parent, task_ids=plan["task_ids"], deadline=plan.get("deadline"),
          write_outputs=False, progress=False)
    return 0


def solve_job(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, out: str | os.PathLike, *,
              workers: int | None = None, restart: bool = False, deadline: float | None = None,
              load_options: dict | None = None, info: dict | None = None, progress: bool = True) -> SolveRun:
    """The method on a task set, in this process or in one worker process per GPU: what ``arc-kit solve`` runs.

    ``workers`` defaults to one per GPU when there are several, else 1 (this process). ``restart``
    discards an earlier run in ``out`` first, whichever way it was run; otherwise a rerun resumes.
    """
    count = workers or (gpu_count() if gpu_count() > 1 else 1)
    if restart:
        clear_run(out)
    if count > 1:
        return solve_in_workers(tasks, model, settings, out, workers=count, deadline=deadline,
                                load_options=load_options, progress=progress, info=info)
    loaded = load_model(model, LoadSettings(**(load_options or {})))
    solver = Solver.from_loaded(loaded, settings)
    return solve(tasks, solver, out, deadline=deadline, progress=progress,
                 info=run_info(model=model_info(loaded), **(info or {})))
