"""Running the method on a whole set: the run folder, resuming, an always-valid submission, scores.

A run folder holds ``run.json`` (the settings and where the run came from), ``records.jsonl`` (one
``records.TaskRecord`` per finished task, appended as each finishes), ``submission.json``
(complete and valid from the first second, rewritten after every task), ``report.html`` and, when the answers are
known, ``scores.csv`` and ``score.json``; a table's folder holds ``<table>_records.jsonl`` instead
(``records_file``) and the table, and a pool that started its own Ray keeps Ray's logs in ``ray-logs``. A rerun
on the same folder resumes; a folder that ran other settings (compared on the fields that change results, older
files read with today's defaults) or another data set (the digest of its task ids, ``task_ids_digest``; its name
without one) is refused. The folder is claimed first (``outputs``, kind ``RUN_KIND``): a run writes only into a
new or empty folder or one a run made (its marker), and ``--restart`` deletes only the run's own files there.
Tasks that a lenient load skipped get fallback answers in the submission and count in the score wherever their
solutions are known. The pool's one loop (``pool``: every solve, the Kaggle job, the tables), its workers
(``solve_one``: a solve's work on a task) and the notebooks use these pieces.

This module knows the solver and the record layout; it knows nothing of models beyond what the solver holds,
nor of workers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from arc_kit.data.jsonio import read_json, repeated_keys_within, write_json_atomically
from arc_kit.data.submission import Score, any_attempt_right, build_submission, score_submission
from arc_kit.data.tasks import InvalidDataError, Task, TaskSet
from arc_kit.method.records import FALLBACK_RUNG, TaskRecord
from arc_kit.method.solver import Solver
from arc_kit.model.description import read_model_folder
from arc_kit.names import encoded, listed, shown
from arc_kit.outputs import (
    FolderKind,
    check_folder,
    claim_folder,
    refuse_links,
    replacing,
)
from arc_kit.run.locking import HOLDER_FILE, LOCK_FILE, check_free, hold_folder
from arc_kit.run.planner import TaskBudget, shortest_tasks
from arc_kit.run.ray_session import LOG_FILES
from arc_kit.settings import SolveSettings, ladder

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
RECORDS_FILE = "records.jsonl"
SUBMISSION_FILE = "submission.json"
REPORT_FILE = "report.html"  # the run's report (``report``), beside its submission
RUN_FILES = (RUN_FILE, RECORDS_FILE, SUBMISSION_FILE, "scores.csv", "score.json", REPORT_FILE)
TASKS_FILE = "tasks.json"  # a pool's tasks' challenges: ``estimates`` reads which tasks a run timed from it
SPEEDS_FILE = "speeds.json"  # the speeds a pool measured so far (a rerun starts from them), and its workers
FULL_RUN_TASKS = "full_run_tasks.json"  # a rehearsal's: the tasks of the full run it stands for (``estimates``)
TABLE_NAMES = ("ablation", "samplers")  # the paper's tables (``experiments.tables``), each run in a run folder
TABLE_RECORDS = tuple(f"{table}_{RECORDS_FILE}" for table in TABLE_NAMES)  # their records (``records_file``)
# a run folder's layout, by exact name: what --restart deletes (its lock stays: it is held while it clears)
RUN_KIND = FolderKind("run", owned=(*RUN_FILES, TASKS_FILE, SPEEDS_FILE, FULL_RUN_TASKS, *TABLE_RECORDS,
                                    *(f"{table}.{suffix}" for table in TABLE_NAMES for suffix in ("md", "csv")),
                                    *LOG_FILES),
                      quiet=(LOCK_FILE, HOLDER_FILE), resumable=True,
                      kept="the records of the tasks done and a complete submission")


class RunFolderError(ValueError):
    """A run folder that cannot be resumed with what was asked (the message says why and what to do)."""


def task_ids_digest(tasks: TaskSet) -> str:
    """A short digest of every task id of a set (skipped ones included): tells two data sets apart in ``run.json``.

    Any string JSON can hold is an id (``names.encoded``: lone surrogates too). Ids joined by newlines,
    as the kit has always digested them (so that a run of an earlier kit resumes); a set where an id
    holds a newline itself is digested as a JSON list instead (so that ``a\\nb`` and ``a``, ``b`` differ).
    """
    ids = sorted(tasks.test_counts())
    text = "\n".join(ids) if not any("\n" in task_id for task_id in ids) else json.dumps(ids)
    return hashlib.sha256(encoded(text)).hexdigest()[:16]


def records_file(table: str | None = None) -> str:
    """The records file of a run folder: ``records.jsonl`` for a solve, ``<table>_records.jsonl`` for a table."""
    return RECORDS_FILE if table is None else f"{table}_{RECORDS_FILE}"


def dataset_info(dataset: str | os.PathLike, loaded: TaskSet) -> dict:
    """What ``run.json`` says of the data set: its name (a path made absolute, so that a run started from
    another folder reads the same), the largest side it allows, and the digest of every task id it holds."""
    name = Path(dataset).resolve() if Path(dataset).exists() else dataset
    return {"dataset": str(name), "max_side": loaded.max_side, "task_ids_digest": task_ids_digest(loaded)}


def clear_run(out: str | os.PathLike, command: str = "solve", option: str = "--out") -> None:
    """Discard an earlier run in ``out`` (``--restart``): its files, a table's records and table, Ray's logs.

    Only in a folder a run made (``RUN_KIND``; OutputRefused for any other, nothing deleted); a user's
    file beside the run's stays. Under the folder's lock (``locking.hold_folder``): a run that another
    process is writing is never cleared.
    """
    out = Path(out)
    if not out.exists():
        return
    with hold_folder(out, RUN_KIND, command, option):  # a folder no run made is refused before its lock is made
        claim_folder(out, RUN_KIND, command, clear=True, option=option)


def choose_tasks(tasks: TaskSet, *, task_ids: Sequence[str] | None = None, count: int | None = None,
                 pick: str = "first", model: str | os.PathLike | None = None) -> TaskSet:
    """The tasks a run works on: ``task_ids`` when given; else ``count`` tasks, the first by id or (``pick``
    "shortest") those with the fewest prompt tokens under ``model``'s tokenizer (the ones a lenient load
    skipped kept: they need their fallback answers); else all of them."""
    if pick not in ("first", "shortest"):
        raise ValueError(f"unknown pick {pick!r}; expected first or shortest")
    if task_ids is not None and not task_ids:  # never read as "every task"
        raise ValueError("--task-ids names no task: give at least one task id, or leave it out for every task")
    if task_ids:
        return tasks.select(task_ids)
    if count and pick == "shortest":
        if model is None:
            raise ValueError("picking the shortest tasks needs a model, whose tokenizer counts the tokens")
        return tasks.select([*shortest_tasks(tasks, read_model_folder(model).encoder(), count).ids, *tasks.skipped])
    return tasks.head(count) if count else tasks


def read_settings_file(path: str | os.PathLike) -> SolveSettings:
    """The method's settings from a JSON file: ``SolveSettings.to_json``, or a run folder's ``run.json``.

    Unknown fields are errors (``Settings.from_json(strict=True)``), and so is a key given twice: a typo
    never passes silently.
    """
    data = read_json(path)
    repeated = repeated_keys_within(data)
    if repeated:  # JSON keeps the last copy: which value was meant cannot be told
        raise InvalidDataError([f"a key given more than once ({', '.join(repeated[:3])})"], str(path))
    if isinstance(data, Mapping) and isinstance(data.get("settings"), Mapping):  # a run folder's run.json
        data = data["settings"]
    return SolveSettings.from_json(data, strict=True)


def open_run(out: str | os.PathLike, settings: SolveSettings, info: Mapping[str, Any] | None = None, *,
             restart: bool = False, command: str = "solve") -> Path:
    """Make ``out`` ready for a run with ``settings``: new, resumed, or refused (RunFolderError; OutputRefused
    for a folder that no run made, see ``RUN_KIND``, or one with a link at a name of its layout).

    ``info`` is written into a new ``run.json`` beside the settings; its ``task_ids_digest`` must
    match the one an earlier run in the folder recorded (its ``dataset`` name, only where either
    run lacks a digest: the same file may be named by many paths). Records without a ``run.json``
    are refused unless ``restart`` discards them. Done under the folder's lock (``locking``):
    FolderInUseError while another process holds it; the caller that owns the run holds it for the whole run.
    """
    out = Path(out)
    with hold_folder(out, RUN_KIND, command):
        if restart:
            clear_run(out, command)
        refuse_links(out, RUN_KIND)  # a link at a run's names refused before its work, not at its first write
        if not check_run(out, settings, info):
            write_json_atomically(out / RUN_FILE, {"settings": settings.to_json(), **dict(info or {})}, indent=2)
    return out


def check_run_folder(out: str | os.PathLike, command: str = "solve", option: str = "--out", *,
                     restart: bool = False) -> None:
    """Whether a run may go into ``out``, asked before any slow work (a model's load) and without a write: a folder
    the kit may not write as a run's (``outputs.check_folder``), one with a link at a name of its layout
    (``outputs.refuse_links``), or one another process runs in (``locking.check_free``), is refused at once; with
    ``restart`` a link there is no matter (the run's files, links among them, are discarded as themselves)."""
    check_folder(out, RUN_KIND, command, option=option)
    if not restart:
        refuse_links(out, RUN_KIND)
    check_free(out)


def has_records(out: str | os.PathLike) -> bool:
    """True when run folder ``out`` holds a record file with something in it (a solve's, a table's)."""
    paths = [Path(out) / name for name in (RECORDS_FILE, *TABLE_RECORDS)]
    return any(path.is_file() and not path.is_symlink() and path.stat().st_size for path in paths)


def check_run(out: str | os.PathLike, settings: SolveSettings, info: Mapping[str, Any] | None = None) -> bool:
    """True when ``out`` holds a run that ``settings`` and ``info`` may resume (the rules of ``open_run``),
    False when it holds none, RunFolderError when it holds another, or records but no ``run.json`` to
    say what made them. Writes nothing."""
    out = Path(out)
    run_path = out / RUN_FILE
    info = dict(info or {})
    if not run_path.exists() and has_records(out):
        raise RunFolderError(f"{out} holds records but no {RUN_FILE}, so which settings made them cannot be told; "
                             "use --restart to discard them, or another --out")
    if run_path.exists():
        try:
            stored = read_json(run_path)
            earlier = SolveSettings.from_json(stored["settings"])
        except (InvalidDataError, KeyError, TypeError, ValueError) as error:
            raise RunFolderError(f"{out} holds an unreadable {RUN_FILE} ({str(error).splitlines()[0]}); use another "
                                 "--out, or --restart to discard it") from None
        if earlier.result_json() != settings.result_json():
            changed = _changed_fields(earlier.result_json(), settings.result_json())
            raise RunFolderError(f"{out} holds a run with other settings ({listed(changed, count=4)}); use another "
                                 "--out, or --restart to discard it")
        digest, stored_digest = info.get("task_ids_digest"), stored.get("task_ids_digest")
        if (not (digest and stored_digest) and info.get("dataset") and stored.get("dataset")  # the spelling only
                and str(info["dataset"]) != str(stored["dataset"])):  # where no digest tells (a file has many paths)
            raise RunFolderError(f"{out} holds a run on another data set ({stored['dataset']}, not {info['dataset']}); "
                                 "use another --out, or --restart to discard it")
        if digest and stored_digest and digest != stored_digest:
            raise RunFolderError(f"{out} holds a run on another data set (other task ids, though named "
                                 f"{stored.get('dataset', 'alike')}); use another --out, or --restart to discard it")
        return True
    return False


def _changed_fields(first: Mapping, second: Mapping, prefix: str = "") -> list[str]:
    changed = []
    for key in sorted(set(first) | set(second)):
        a, b = first.get(key), second.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            changed += _changed_fields(a, b, f"{prefix}{key}.")
        elif a != b:
            changed.append(f"{prefix}{key} {a} -> {b}")
    return changed


def read_run_settings(out: str | os.PathLike) -> SolveSettings:
    """The settings an earlier run in ``out`` recorded (RunFolderError when there is none, or none readable)."""
    path = Path(out) / RUN_FILE
    if not path.exists():
        raise RunFolderError(f"{out} holds no run ({RUN_FILE} missing)")
    try:
        return SolveSettings.from_json(read_run_info(out)["settings"])
    except (KeyError, TypeError, ValueError) as error:
        raise RunFolderError(f"{out} holds an unreadable {RUN_FILE} ({str(error).splitlines()[0]})") from None


def read_run_info(out: str | os.PathLike) -> dict:
    """What ``run.json`` in ``out`` says ({} when there is none); RunFolderError when it holds no object."""
    path = Path(out) / RUN_FILE
    info = read_json(path) if path.exists() else {}
    if not isinstance(info, dict):
        raise RunFolderError(f"{out} holds an unreadable {RUN_FILE} (it holds no object)")
    return info


def mark_correct(record: TaskRecord, tasks: TaskSet, answers: TaskSet, attempts: int = 2) -> None:
    """Set ``record.correct`` from the submission entries the record gives (fallbacks included).

    ``attempts=1`` (top-1): only the first answer counts (attempt_2 repeats it).
    """
    entries = build_submission(tasks.select([record.task_id]), {record.task_id: record.attempts},
                               attempts=attempts)[record.task_id]
    outputs = answers[record.task_id].test_outputs
    record.correct = [any_attempt_right([entry["attempt_1"], entry["attempt_2"]], output)
                      for entry, output in zip(entries, outputs)]


def record_table(records: Iterable[TaskRecord]):
    """One row per task: candidates, forward calls, timings, rung, error (a pandas DataFrame)."""
    import pandas as pd

    columns = ["task_id", "candidates", "forward_calls", "ttt_seconds", "generation_seconds", "scoring_seconds",
               "total_seconds", "rung", "error"]
    rows = [(record.task_id, sum(len(test.candidates) for test in record.tests),
             sum(test.search.forward_calls for test in record.tests),
             *(record.timings.get(part) for part in ("ttt", "generation", "scoring", "total")),
             record.rung, record.error or record.skipped) for record in records]
    return pd.DataFrame(rows, columns=columns)  # the columns also when no task has a record yet


def write_scores(out: Path, submission_path: Path, records: Mapping[str, TaskRecord], answers: TaskSet,
                 task_ids: Sequence[str], attempts: int = 2) -> Score:
    """Score the submission on ``task_ids`` and write ``scores.csv`` (with the records' columns) and ``score.json``.

    ``attempts=1``: only attempt_1 counts (a top-1 run).
    """
    submission = read_json(submission_path)
    score = score_submission(submission, answers.select([i for i in task_ids if i in answers or i in answers.skipped]),
                             attempts=attempts)
    table = score.table.merge(record_table(records.values()), on="task_id", how="left")
    with replacing(out / "scores.csv", newline="") as handle:  # never through a link; a lone surrogate escaped
        table.to_csv(handle, index=False)
    write_json_atomically(out / "score.json", {"score": score.score, "correct": score.correct, "total": score.total,
                                               "task_score": score.task_score, "tasks": len(score.table),
                                               "attempts": attempts}, indent=2)
    return score


def answered_by_model(record: TaskRecord) -> bool:
    """True when the task's submitted attempts are the model's: it finished with at least one attempt (not every
    task that got model work)."""
    return record.got_model_work and any(test.attempts for test in record.tests)


def outcome_parts(records: Mapping[str, TaskRecord], score: Score | None = None) -> list[str]:
    """A run's end line's parts, ``answered by the model: 6`` and ``correct: 1 (of 6 with known solutions)`` (or that
    none are known), as a list that a caller adds its own parts to. "Correct" counts the tasks an attempt got right
    (a task of several test outputs its share of them) among those whose solutions are known (``score``)."""
    answered = sum(1 for record in records.values() if answered_by_model(record))
    parts = [f"answered by the model: {answered}"]
    if score is not None and len(score.table):
        parts.append(f"correct: {score.tasks_credited:g} (of {len(score.table)} with known solutions)")
    else:
        parts.append("correct: unknown (no solutions known)")
    return parts


@dataclass
class SolveRun:
    """What a run produced."""

    out: Path
    records: dict[str, TaskRecord]
    submission_path: Path
    score: Score | None = None  # when the answers were known
    seconds: float = 0.0
    report_path: Path | None = None  # its report (``report``), once written

    @property
    def failed(self) -> list[str]:
        return [task_id for task_id, record in self.records.items() if record.failed]


def run_clock(hours: float | None, safety_minutes: float = 0.0, stop_minutes: float = 0.0, *,
              started: float | None = None) -> tuple[float | None, float | None]:
    """The top of the chain of time limits (docs/architecture.md, "Time"): (the run's deadline, its stop time), in
    seconds since the epoch, for a limit ``hours`` after ``started`` (default: now). The planner plans to end
    ``safety_minutes`` before the limit; workers still running ``stop_minutes`` before it are stopped, and the last
    write follows. (None, None) without hours. ValueError in one line when the margins leave no time (or a number is
    not finite)."""
    if hours is None:
        return None, None
    if not 0 <= 60 * stop_minutes <= 60 * safety_minutes < 3600 * hours < float("inf"):
        raise ValueError(f"--safety-minutes ({safety_minutes:g}) leaves nothing of --hours ({hours:g}): give more "
                         "hours or fewer safety minutes")
    limit = (time.time() if started is None else started) + 3600 * hours
    return limit - 60 * safety_minutes, limit - 60 * stop_minutes


def solve_one(solver: Solver, task: Task, rung: int, budget: TaskBudget | None = None) -> TaskRecord:
    """One task at ``rung`` of the solver's ladder (retried cheaper on failure) within ``budget``'s caps, if any: a
    solve's work on a task, in the pool's workers."""
    rungs = ladder(solver.settings)
    if budget is None:
        return solver.solve_with_retry(task, rung, rungs)
    deadline = time.monotonic() + (budget.deadline - time.time())  # the solver counts on the monotonic clock
    return solver.solve_with_retry(task, rung, rungs, deadline=deadline, search_share=budget.search_share)


def task_line(record: TaskRecord) -> str:
    """One readable line per finished task: id, rung, seconds, candidates, and what went wrong, if anything."""
    rung = "fallback" if record.rung == FALLBACK_RUNG else f"rung {record.rung}"
    parts = [f"task {shown(record.task_id)}: {rung}", f"{record.timings.get('total', 0.0):.1f} s",
             f"{sum(len(test.candidates) for test in record.tests)} candidates"]
    if record.correct is not None:
        parts.append(f"{sum(record.correct)}/{len(record.correct)} right")
    if record.deadline_hit:
        parts.append(f"deadline hit in {record.deadline_hit}")
    if record.retried_after:
        parts.append(f"retried after {record.retried_after}")
    if record.error or record.skipped:
        parts.append(f"{'error' if record.error else 'skipped'}: {record.error or record.skipped}")
    return ", ".join(parts)
