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

from arc_kit.datasets import load_challenges, write_json_atomically
from arc_kit.solver import (
    SolveRun,
    SolveSettings,
    _record_table,
    answers_from_records,
    read_records,
)
from arc_kit.submission import build_submission, score_submission, write_submission
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


def _merged_records(out: Path) -> dict[str, dict]:
    """The records of every worker folder in ``out``, also those of an earlier run with more workers."""
    records = {}
    folders = sorted(out.glob("worker-*"), key=lambda folder: (len(folder.name), folder.name))
    for folder in folders:
        records.update(read_records(folder / "records.jsonl"))
    return records


def _check_settings(out: Path, settings: SolveSettings, extra: dict) -> None:
    """Write ``run.json`` (settings and provenance) for a new run; refuse a folder that ran other settings."""
    from arc_kit.training import run_info

    settings_json = json.loads(json.dumps(settings.to_json()))
    run_path = out / "run.json"
    if run_path.exists():
        if json.loads(run_path.read_text()).get("settings") != settings_json:
            raise ValueError(f"{out} holds a run with other settings; use another --out, or --restart to discard it")
        return
    run_path.write_text(json.dumps({"settings": settings_json, **run_info(**extra)}, indent=2, default=str) + "\n")


def solve_in_workers(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, out: str | os.PathLike, *,
                     workers: int | None = None, gpus: Sequence[int] | None = None, deadline: float | None = None,
                     solutions: TaskSet | None = None, load_options: dict | None = None, poll_seconds: float = 5.0,
                     progress: bool = True, submission_path: str | os.PathLike | None = None,
                     submission_tasks: TaskSet | None = None) -> SolveRun:
    """Solve ``tasks`` with one process per GPU (``workers`` CPU processes when there is no GPU).

    The submission (``out/submission.json`` unless ``submission_path`` says otherwise) covers every
    task of ``submission_tasks`` (default ``tasks``), solved or not, and is rewritten as records come in.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    gpus = list(gpus) if gpus is not None else list(range(gpu_count()))
    workers = workers or max(1, len(gpus))
    started = time.monotonic()
    _check_settings(out, settings, {"model": str(model), "tasks": len(tasks), "workers": workers})
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
    with open(out / "records.jsonl", "w", encoding="utf-8") as handle:
        for record in ordered.values():
            handle.write(json.dumps(record) + "\n")
    write_submission(submission_path, build_submission(covered, answers_from_records(ordered)), covered)
    run = SolveRun(out, ordered, submission_path, seconds=time.monotonic() - started)
    scoring_set = solutions if solutions is not None else (tasks if tasks.has_solutions else None)
    if scoring_set is not None:
        submission = json.loads(submission_path.read_text())
        run.score = score_submission(submission, scoring_set.select([i for i in tasks.ids if i in scoring_set]))
        run.score.table.merge(_record_table(ordered), on="task_id", how="left").to_csv(out / "scores.csv", index=False)
    return run


def _costs(tasks: TaskSet, task_ids: Sequence[str], model, settings: SolveSettings) -> dict[str, float]:
    """Estimated seconds per task (token counts with the planner's default speeds); the tokenizer suffices."""
    from transformers import AutoTokenizer

    from arc_kit.planner import Speeds, measure
    from arc_kit.text_format import HuggingFaceTokenizer, TaskEncoder

    if not task_ids:
        return {}
    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    encoder = TaskEncoder(HuggingFaceTokenizer(tokenizer), max_len=settings.max_len)
    speeds = Speeds()
    return {task_id: speeds.seconds(measure(tasks[task_id], encoder, settings.max_len), settings)
            for task_id in task_ids}


def run_worker(plan_path: str | os.PathLike) -> int:
    """The body of ``python -m arc_kit worker PLAN``: solve the planned tasks, append records."""
    from arc_kit.models import LoadSettings, load_model
    from arc_kit.solver import Solver, solve

    plan_path = Path(plan_path)
    plan = json.loads(plan_path.read_text())
    tasks = load_challenges(plan["challenges"])
    settings = SolveSettings.from_json(plan["settings"])
    loaded = load_model(plan["model"], LoadSettings(**plan.get("load", {})))
    solver = Solver.from_loaded(loaded, settings)
    solve(tasks, solver, plan_path.parent, task_ids=plan["task_ids"], deadline=plan.get("deadline"),
          write_outputs=False, progress=False)
    return 0
