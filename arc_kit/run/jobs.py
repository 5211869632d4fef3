"""What ``arc-kit solve``, ``dry-run`` and ``kaggle run`` run: the method on a task set, through the pool.

``solve_job`` hands the pool (``pool.run_in_pool``) a model folder: one worker in this process, Ray's actors where
more serve (``workers.uses_ray``); ``solve`` a solver loaded already (one worker, in this process). Either way
the run's outputs are ``SolveOutputs``: each task solved at a rung within its caps (``runs.solve_one``), its record
marked against the known answers, the submission of every covered task rewritten after each (complete and valid
at all times), and at the end the scores (where the answers are known) and the report (``report``) beside the
submission. This module knows what a solve keeps; how the tasks run is ``pool``'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from arc_kit.data.submission import build_submission, write_submission
from arc_kit.data.tasks import TaskSet
from arc_kit.method.records import TaskRecord, answers_from_records, fallback_record
from arc_kit.method.solver import Solver
from arc_kit.run.pool import run_in_pool
from arc_kit.run.report import write_report_quietly
from arc_kit.run.runs import RECORDS_FILE, REPORT_FILE, SUBMISSION_FILE, SolveRun, mark_correct, solve_one, \
    task_line, write_scores
from arc_kit.settings import SolveSettings


@dataclass
class SolveOutputs:
    """What a solve keeps of its tasks (``pool.Outputs``; the module's docstring)."""

    out: Path
    tasks: TaskSet  # the tasks solved
    attempts: int
    answers: TaskSet | None  # the known solutions, if any: a task's record is marked as it finishes
    solutions: TaskSet | None  # the solutions given apart from the tasks, for the report
    submission_path: Path
    covered: TaskSet  # the tasks the submission covers
    command = "solve"
    records_file = RECORDS_FILE
    record_kind = TaskRecord
    work = staticmethod(solve_one)
    ladder = True

    @classmethod
    def of(cls, tasks: TaskSet, settings: SolveSettings, out: str | os.PathLike, *, solutions: TaskSet | None = None,
           submission_path: str | os.PathLike | None = None, submission_tasks: TaskSet | None = None
           ) -> SolveOutputs:
        """The outputs of a run of ``tasks`` in ``out``: its submission (``out/submission.json`` unless
        ``submission_path`` says otherwise) covers every task of ``submission_tasks`` (default ``tasks``), solved or
        not; the answers are ``solutions``, else the tasks' own, where any are known."""
        answers = solutions if solutions is not None else (tasks if tasks.has_solutions else None)
        if answers is not None and not answers.known_outputs():
            answers = None  # nothing to score against (every task skipped, say)
        path = Path(submission_path) if submission_path is not None else Path(out) / SUBMISSION_FILE
        return cls(Path(out), tasks, settings.attempts, answers, solutions, path,
                   submission_tasks if submission_tasks is not None else tasks)

    def fallback(self, task_id: str, why: str) -> TaskRecord:
        return fallback_record(task_id, why)

    def took(self, record: TaskRecord) -> float | None:
        if self.answers is None:
            return None
        if record.task_id in self.answers:
            mark_correct(record, self.tasks, self.answers, self.attempts)
        return record.share_correct

    def measured(self, record: TaskRecord) -> tuple[int, dict | None]:
        return record.rung, None if record.failed else record.timings

    def line(self, record: TaskRecord) -> str:
        return task_line(record)

    def write(self, records: dict) -> None:
        """The submission of every covered task, from the records so far (fallback answers for the others)."""
        write_submission(self.submission_path, build_submission(self.covered, answers_from_records(records),
                                                                attempts=self.attempts), self.covered)

    def end(self, records: dict, seconds: float) -> SolveRun:
        """The scores (skipped tasks count too) and the report, beside the submission."""
        run = SolveRun(self.out, records, self.submission_path, seconds=seconds)
        if self.answers is not None:
            run.score = write_scores(self.out, self.submission_path, records, self.answers,
                                     list(self.tasks.test_counts()), self.attempts)
        run.report_path = write_report_quietly(self.out, self.submission_path.parent / REPORT_FILE, tasks=self.tasks,
                                               solutions=self.solutions)
        return run


def solve_job(tasks: TaskSet, model: str | os.PathLike, settings: SolveSettings, out: str | os.PathLike, *,
              solutions: TaskSet | None = None, submission_path: str | os.PathLike | None = None,
              submission_tasks: TaskSet | None = None, **options) -> SolveRun:
    """The method on a task set with the model in folder ``model``, through the pool: what ``arc-kit solve`` runs.

    ``options`` are ``pool.run_in_pool``'s (``workers``, ``deadline``, ``stop_at``, ``restart``...); ``restart``
    discards an earlier run in ``out`` first, whichever way it was run; otherwise a rerun resumes. The model is loaded
    (for Ray's actors: its folder and tokenizer checked) before ``out`` is claimed, so that a refused run leaves the
    file system as it found it. The run's report is written beside its submission, ``report_path``.
    """
    outputs = SolveOutputs.of(tasks, settings, out, solutions=solutions, submission_path=submission_path,
                              submission_tasks=submission_tasks)
    return run_in_pool(tasks, outputs, settings, out, model=model, **options)


def solve(tasks: TaskSet, solver: Solver, out: str | os.PathLike, *, solutions: TaskSet | None = None,
          info: dict | None = None, progress: bool = True, restart: bool = False,
          deadline: float | None = None) -> SolveRun:
    """Solve every task of ``tasks`` with ``solver``, in this process, writing records, submission, scores and the
    report to ``out``.

    ``tasks`` may hold solutions; the solver never sees them (``solve_task`` strips them), they are
    only used for scoring, as are ``solutions`` if given separately. With a ``deadline`` (seconds
    since the epoch) the planner orders the tasks cheapest first, steps down the ladder of cheaper
    settings as time runs short and caps each task and each search (wall clock); tasks it cannot fit get
    fallback answers. With ``progress`` a line per task says how it went. A task that fails is retried
    once, cheaper. ``restart``: as in ``runs.open_run``; the run holds ``out``'s lock throughout
    (``locking``: a second run on it is refused, naming this one).
    """
    outputs = SolveOutputs.of(tasks, solver.settings, out, solutions=solutions)
    return run_in_pool(tasks, outputs, solver.settings, out, solver=solver, info=info, progress=progress,
                     restart=restart, deadline=deadline)
