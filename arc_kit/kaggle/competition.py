"""Kaggle glue: the competition run that never loses a submission.

``run_competition`` is what the submission notebook calls: find the competition files under
``/kaggle/input`` (the current competition's folder, ``COMPETITION``, first), write a complete
fallback ``submission.json`` at once, notice when the test file is the public placeholder (then run
a short smoke job), otherwise solve every test task within the time budget on all GPUs (a pool of
Ray actors, ``jobs``; one worker solves in this process, without Ray), keeping the submission
complete and valid after every task and stopping the workers before the limit. A rehearsal
(``CompetitionSettings.job`` "rehearse") runs the settings as given on a few of the public evaluation
tasks in a set time instead, and ends with their score and ``estimates``' figures for a full run of the
public evaluation set's size (the hidden set's), priced from its own records. Where the
test tasks are public ones whose solutions sit beside them (a smoke run on the placeholder, or the
evaluation set given as the test file), the run is scored: its end line (``CompetitionRun.lines``) says
how many tasks the model answered and how many of them are right, and the score follows.

The dataset that carries the kit is ``dataset_build``'s; ``simulate_competition_input`` builds a
stand-in for ``/kaggle/input`` from public data, so the whole path runs on any machine. This module
knows Kaggle's folders and files; the solving is ``jobs``' and the planning ``planner``'s.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from arc_kit.data.datasets import export_kaggle, find_competition_files, load_challenges, load_dataset
from arc_kit.data.jsonio import write_json_atomically
from arc_kit.data.submission import Score, build_submission, load_submission, score_submission, write_submission
from arc_kit.data.tasks import InvalidDataError, TaskSet
from arc_kit.method.records import answers_from_records
from arc_kit.model.description import ModelFolder, read_model_folder
from arc_kit.model.devices import visible_gpus
from arc_kit.outputs import check_folder, claim_file, is_made_folder
from arc_kit.run import jobs  # called through the module, so that a replaced solve_job is used
from arc_kit.run.estimates import estimate_from_folder
from arc_kit.run.expectations import shape_of_folder
from arc_kit.run.locking import hold_folder
from arc_kit.run.planner import hours
from arc_kit.run.record_json import read_records
from arc_kit.run.runs import (
    FULL_RUN_TASKS,
    RECORDS_FILE,
    RUN_FILE,
    RUN_KIND,
    SUBMISSION_FILE,
    RunFolderError,
    answered_by_model,
    check_run,
    clear_run,
    dataset_info,
    has_records,
    outcome_parts,
    run_clock,
)
from arc_kit.settings import CompetitionSettings, LoadSettings, SolveSettings, smoke

logger = logging.getLogger(__name__)
KAGGLE_WORKING = Path("/kaggle/working")

COMPETITION = "arc-prize-2026-arc-agi-2"  # the competition's slug: its folder's name, and kernel-metadata's source
RUN_FOLDER = "arc_kit_run"  # below the working folder: the run's folder (its records, speeds, Ray's logs)


@dataclass
class CompetitionRun:
    submission_path: Path
    placeholder: bool
    tasks: int  # every task id of the test file, malformed ones included
    answered: int  # tasks whose attempts are the model's (the rest have fallback answers)
    seconds: float
    error: str | None = None  # why solving stopped early, if it did (the submission is complete anyway)
    score: Score | None = None  # on the tasks whose solutions are public (a smoke run, the evaluation set as test)
    outcome: list[str] = field(default_factory=list)  # the end line's parts (``runs.outcome_parts``)
    rehearsal: list[str] | None = None  # a rehearsal's estimate of a full run (``estimates.Estimate.lines``)

    def lines(self) -> list[str]:
        """The run's end line (tasks, what the model answered and got right, the job, the minutes, an early
        stop), then the score where the solutions are known, then a rehearsal's estimate of a full run."""
        parts = [f"{self.tasks} tasks", ", ".join(self.outcome) or f"answered by the model: {self.answered}"]
        if self.placeholder:
            parts.append("placeholder test file: smoke job")
        if self.rehearsal is not None:
            parts.append("a rehearsal on public evaluation tasks")
        parts.append(f"{self.seconds / 60:.1f} minutes")
        if self.error:
            parts.append(f"stopped early: {self.error}")
        rehearsal = [] if self.rehearsal is None else [
            "a full run, from this rehearsal's records (`arc-kit estimate --records` on the working folder says the "
            "same):", *self.rehearsal]
        return ["; ".join(parts)] + ([str(self.score)] if self.score is not None else []) + rehearsal


def run_competition(model: str | os.PathLike, settings: SolveSettings = SolveSettings(),
                    clock: CompetitionSettings = CompetitionSettings(), *,
                    input_root: str | os.PathLike = "/kaggle/input", working: str | os.PathLike = KAGGLE_WORKING,
                    started: float | None = None, workers: int | None = None, load_options: dict | None = None,
                    force_full: bool = False, progress: bool = True, competition: str = COMPETITION,
                    restart: bool = False) -> CompetitionRun:
    """The competition notebook's job; ``submission.json`` in ``working`` is valid from the first second.

    The limit is ``clock.hours`` after ``started``: the planner plans to end ``clock.safety_minutes``
    before it, and workers still running ``clock.stop_minutes`` before it are stopped, so the last write
    comes first; the job is ``clock.job``'s, a smoke job on ``clock.smoke_tasks`` tasks.
    The clock and the test file are checked before anything is made (the working folder included). Then
    ``working/submission.json`` must be the job's to replace (``outputs.claim_file``: absent, an earlier
    job's, or the notebook's fallback; a user's file of that name is refused in one line), and the run folder
    below it is held for the whole job (``locking``: one job at a time), new, empty or a run's. An earlier run of
    the same settings there is resumed (its records kept); one of other settings is refused
    (``runs.RunFolderError``) before anything is written, unless ``restart`` discards it (records left without a
    ``run.json`` too). Past
    that nothing raises: a failure is reported in ``error`` and the submission on disk stays complete.
    """
    started = time.time() if started is None else started  # the clock was checked as it was made
    working = Path(working)
    files = find_competition_files(input_root, competition=competition)
    if files.test_challenges is None:
        raise FileNotFoundError(f"no arc-agi_test_challenges.json below {input_root}")
    tasks = load_challenges(files.test_challenges, strict=False)  # bad tasks still get answers
    job, chosen, run_settings = _choose_job(clock, force_full, files, tasks, settings)
    placeholder, rehearse = job == "smoke", job == "rehearse"
    run_folder = working / RUN_FOLDER
    check_folder(run_folder, RUN_KIND, "kaggle run", option="--working")  # before the working folder is made
    submission_path = claim_file(working / "submission.json", "kaggle run", option="--working",
                                 own=lambda path: _jobs_submission(path, run_folder))
    folder = read_model_folder(model, LoadSettings(**(load_options or {})).base_model)
    folder.check_weights()  # a model refused before the working folder is made
    with hold_folder(run_folder, RUN_KIND, "kaggle run", "--working"):  # one job at a time in a working folder
        _check_run_folder(run_folder, folder, run_settings, restart=restart)
        attempts = settings.attempts
        earlier = read_records(run_folder / RECORDS_FILE, task_ids=tasks.ids)
        _write_submission(submission_path, tasks, earlier, attempts)  # complete at once: earlier answers, fallbacks
        deadline, stop_at = run_clock(clock.hours, clock.safety_minutes, clock.stop_minutes, started=started)
        if rehearse:  # the planner plans to end the rehearsal's tasks in its minutes
            deadline = min(deadline, started + 60 * clock.rehearse_minutes)
        solutions = _public_solutions(files, chosen)
        if progress:
            _announce(files, tasks, chosen, clock.job, placeholder, deadline, rehearse)
        info = _run_info(files, tasks, model) if not rehearse else _rehearsal_info(files, chosen, model, clock)
        own = {} if rehearse else {"submission_path": submission_path, "submission_tasks": tasks}  # else its own
        records, error = _solve_keeping_records(run_folder, earlier, lambda: jobs.solve_job(
            chosen, model, run_settings, run_folder, workers=workers, workers_per_gpu=clock.workers_per_gpu or None,
            deadline=deadline, stop_at=stop_at, load_options=load_options, progress=progress, solutions=solutions,
            info=info, **own).records)
        error = _write_final_submission(submission_path, tasks, records, attempts, error)
        if rehearse:
            write_json_atomically(run_folder / FULL_RUN_TASKS, _public_tasks(files).without_solutions()
                                  .challenges_json())
    score = _score(run_folder / SUBMISSION_FILE if rehearse else submission_path, solutions, attempts)
    answered = sum(1 for record in records.values() if answered_by_model(record))
    return CompetitionRun(submission_path, placeholder, len(chosen if rehearse else tasks.test_counts()), answered,
                          time.time() - started, error, score, outcome_parts(records, score),
                          _rehearsal_lines(run_folder) if rehearse else None)


def _run_info(files, tasks: TaskSet, model: str | os.PathLike) -> dict:
    """What ``run.json`` records of the job beside the pool's own: the test file it solved, and the model's shape,
    so that ``arc-kit estimate`` reads the run where neither the test file nor the model is (its downloaded working
    folder)."""
    try:
        shape = shape_of_folder(model)
    except (OSError, ValueError, KeyError, TypeError):  # a record, never a reason to stop
        shape = None
    return {**dataset_info(files.test_challenges, tasks), **({"model_shape": asdict(shape)} if shape else {})}


def _choose_job(clock: CompetitionSettings, force_full: bool, files, tasks: TaskSet,
                settings: SolveSettings) -> tuple[str, TaskSet, SolveSettings]:
    """(the job, the tasks to solve, their settings): a rehearsal on the first public evaluation tasks when asked
    for; a smoke job on the first tasks when asked for, or when the test file is the public placeholder and this is
    no full job nor Kaggle's rerun; else every task (Kaggle's scored rerun never rehearses)."""
    # Kaggle sets KAGGLE_IS_COMPETITION_RERUN when it runs the notebook on the hidden test set
    rerun = bool(os.environ.get("KAGGLE_IS_COMPETITION_RERUN"))
    if clock.job == "rehearse" and not (rerun or force_full):
        return "rehearse", _public_tasks(files).head(clock.rehearse_tasks), settings
    full = force_full or clock.job in ("full", "rehearse")
    if clock.job == "smoke" or (files.is_placeholder_test() and not (full or rerun)):
        return "smoke", tasks.head(clock.smoke_tasks), smoke(settings)
    return "full", tasks, settings


def _public_tasks(files) -> TaskSet:
    """The competition's public evaluation tasks with their solutions: what a rehearsal solves, and its full run's
    stand-in (the hidden set is of their size). FileNotFoundError in one line where they are not."""
    if files.evaluation_challenges is None or files.evaluation_solutions is None:
        raise FileNotFoundError(f"a rehearsal solves public evaluation tasks: no arc-agi_evaluation_challenges.json "
                                f"with its solutions beside {files.test_challenges}")
    return load_challenges(files.evaluation_challenges, files.evaluation_solutions, strict=False)


def _rehearsal_info(files, chosen: TaskSet, model: str | os.PathLike, clock: CompetitionSettings) -> dict:
    """``run.json``'s record of a rehearsal: its data set (the public evaluation file), the model's shape, its time,
    and the hours a full run plans in (what ``estimates`` plans the full run's rungs in)."""
    return {**_run_info(files, _public_tasks(files), model), "dataset": str(files.evaluation_challenges),
            "rehearsal": {"tasks": len(chosen), "minutes": clock.rehearse_minutes,
                          "plan_hours": clock.hours - clock.safety_minutes / 60}}


def _rehearsal_lines(run_folder: Path) -> list[str]:
    """What ``arc-kit estimate --records`` prints for the rehearsal's folder: the measured speeds, and a full run's
    wall time and rungs (one line saying why where it cannot)."""
    try:
        return estimate_from_folder(run_folder).lines()
    except Exception as failure:  # noqa: BLE001 - the rehearsal's submission and score stand without it
        return [f"no estimate of a full run: {type(failure).__name__}: {failure}"]


def _check_run_folder(run_folder: Path, folder: ModelFolder, run_settings: SolveSettings, *, restart: bool) -> None:
    """Clear the run folder on ``restart``; refuse an earlier run of other settings in it."""
    if restart:
        clear_run(run_folder, "kaggle run", "--working")
    if (run_folder / RUN_FILE).exists() or has_records(run_folder):  # refused loudly, before anything is written
        try:
            check_run(run_folder, run_settings.replace(max_len=folder.token_budget(run_settings.max_len)))
        except RunFolderError as refusal:  # in this command's words
            raise RunFolderError(str(refusal).replace("another --out", "another --working")) from None


def _jobs_submission(path: Path, run_folder: Path) -> bool:
    """True when ``path`` is a submission this job may replace: an earlier job's (its run folder is the kit's,
    ``runs.RUN_KIND``) or the notebook's fallback (every attempt ``[[0]]``, written before the kit is installed)."""
    if is_made_folder(run_folder):
        return True
    try:
        submission = load_submission(path)
    except InvalidDataError:
        return False
    return bool(submission) and all(entry == {"attempt_1": [[0]], "attempt_2": [[0]]}
                                    for entries in submission.values() for entry in entries)


def _write_submission(submission_path: Path, tasks: TaskSet, records: dict, attempts: int) -> None:
    """A complete submission: the records' answers, fallbacks elsewhere."""
    write_submission(submission_path, build_submission(tasks, answers_from_records(records), attempts=attempts), tasks)


def _announce(files, tasks: TaskSet, chosen: TaskSet, job: str, placeholder: bool, deadline: float,
              rehearse: bool = False) -> None:
    """One line on what the job does: how many tasks, which job, the GPUs, the time to plan in."""
    what = ("a smoke job (asked for)" if job == "smoke" else "placeholder: a smoke job") + f" on {len(chosen)}" \
        if placeholder else f"solving all {len(chosen)}"
    if rehearse:
        what = f"a rehearsal on {len(chosen)} public evaluation task(s) ({files.evaluation_challenges})"
    skipped = f" ({len(tasks.skipped)} malformed: fallback answers)" if tasks.skipped else ""
    gpus = visible_gpus()
    print(f"{len(tasks.test_counts())} test tasks{skipped} in {files.test_challenges}; {what}; "
          f"{len(gpus) or 'no'} GPU(s) visible; {hours(max(0.0, deadline - time.time()))} to plan in", flush=True)


def _solve_keeping_records(run_folder: Path, earlier: dict, solve) -> tuple[dict, str | None]:
    """(records, error): ``solve()``'s records, or after a failure the earlier ones and what the workers wrote."""
    records, error = dict(earlier), None
    try:  # from here on nothing may fail the notebook: the submission on disk is always complete
        records = solve()
    except Exception as failure:  # noqa: BLE001 - reported in the result and the log, never raised
        error = f"{type(failure).__name__}: {failure}"
        logger.error("the solving run failed, the fallback submission stands: %s", error)
        try:
            records.update(read_records(run_folder / RECORDS_FILE))
        except Exception:  # noqa: BLE001 - the records on disk may be what broke
            pass
    return records, error


def _write_final_submission(submission_path: Path, tasks: TaskSet, records: dict, attempts: int,
                            error: str | None) -> str | None:
    """Write the records' submission, reloaded and checked; the fallbacks alone when that breaks. The error."""
    try:
        _write_submission(submission_path, tasks, records, attempts)
        load_submission(submission_path, tasks)  # reload and check, as Kaggle will read it
    except Exception as failure:  # noqa: BLE001 - the records broke it: the fallbacks, then
        error = error or f"{type(failure).__name__}: {failure}"
        write_submission(submission_path, build_submission(tasks, {}), tasks)
    return error


def _public_solutions(files, chosen: TaskSet) -> TaskSet | None:
    """The solutions of the tasks to solve where the competition ships them: its evaluation files hold a task of
    the same id, train pairs and test inputs (the placeholder's tasks, or the evaluation set given as test file)."""
    if files.evaluation_challenges is None or files.evaluation_solutions is None:
        return None
    try:
        public = load_challenges(files.evaluation_challenges, files.evaluation_solutions, strict=False)
        known = [task_id for task_id in chosen.ids if task_id in public and public[task_id].has_solutions
                 and public[task_id].without_solutions() == chosen[task_id].without_solutions()]
        return public.select(known) if known else None
    except Exception:  # noqa: BLE001 - progress is a nicety: never a reason to stop
        return None


def _score(submission_path: Path, solutions: TaskSet | None, attempts: int) -> Score | None:
    """The submission's score on the tasks whose solutions are known; None when none are (or it cannot be read)."""
    if solutions is None:
        return None
    try:
        return score_submission(json.loads(submission_path.read_text()), solutions, attempts=attempts)
    except Exception:  # noqa: BLE001 - a score is a nicety: the submission on disk stands
        return None


def simulate_competition_input(folder: str | os.PathLike, dataset: str = "arc-agi-1/evaluation",
                               tasks: int | None = 10) -> Path:
    """A stand-in for /kaggle/input: a public set as test (the placeholder), evaluation files beside it."""
    folder = Path(folder) / "competitions" / COMPETITION
    chosen = load_dataset(dataset)
    if tasks:
        chosen = chosen.head(tasks)
    export_kaggle(chosen, folder, "evaluation")
    export_kaggle(chosen.without_solutions(), folder, "test")
    return folder.parents[1]
