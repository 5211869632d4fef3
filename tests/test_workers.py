"""Several workers: a queue the parent owns, a watchdog, and a run split over worker processes equals one process.

The workers are real subprocesses (``python -m arc_kit worker PLAN``) on the CPU, running the bigram
micro model of conftest.py (it writes small grids, so every task has real candidates and the
comparison of two runs means something) on four small ARC-AGI-1 evaluation tasks. The watchdog's
tests (and the simulated Kaggle machine's, whose workers are killed and stopped) start the real worker loop (``worker_process.run_worker``) with a fake solve that dies, hangs or
answers [[7]] (then [[7, 7]]), so that what the parent does about a dead or hung worker takes seconds.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import assert_same_finds
from arc_kit.run import calibration, worker_process, worker_slots, workers
from arc_kit.data.datasets import load_tasks
from arc_kit.model.loading import load_model
from arc_kit.run.record_json import read_records
from arc_kit.run.runs import solve
from arc_kit.settings import TEST_TIME_TRAINING, SamplerSettings, SolveSettings
from arc_kit.method.solver import Solver
from arc_kit.data.submission import submission_problems
from arc_kit.run.workers import WatchdogSettings, solve_in_workers

TASK_IDS = ["6ea4a07e", "00576224", "be03b35f", "66e6c45b"]  # not in id order: records must follow this order
SETTINGS = SolveSettings(
    sampler=SamplerSettings("dfs", threshold=0.05, max_forward_calls=200),
    inference_augmentations=2, scoring_augmentations=2,
    ttt=TEST_TIME_TRAINING.replace(steps=2), max_len=2048)
POLL = 0.2  # seconds between the parent's merges (5 by default); the tests wait on it


def read_json(path: Path):
    return json.loads(Path(path).read_text())


# -- a run over worker processes ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tasks():
    return load_tasks("arc-agi-1/evaluation").select(TASK_IDS)


class PopenSpy:
    """Records the command and environment of every worker started, then starts it for real."""

    def __init__(self):
        self.calls: list[tuple[list[str], dict]] = []
        self.real = subprocess.Popen

    def __call__(self, command, env=None, **kwargs):
        self.calls.append((list(command), dict(env or {})))
        return self.real(command, env=env, **kwargs)


def watch_workers(patch: pytest.MonkeyPatch, popen) -> None:
    """Start the workers through ``popen`` (only those: other subprocesses, git say, run as usual)."""
    patch.setattr(worker_slots, "subprocess", SimpleNamespace(Popen=popen, STDOUT=subprocess.STDOUT,
                                                              TimeoutExpired=subprocess.TimeoutExpired))


@pytest.fixture(scope="module")
def single_process(model_folder, tasks, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single")
    solve(tasks, Solver.from_loaded(load_model(model_folder, device="cpu"), SETTINGS), out, progress=False)
    return out


@pytest.fixture(scope="module")
def two_workers(model_folder, tasks, tmp_path_factory):
    out = tmp_path_factory.mktemp("two_workers")
    with pytest.MonkeyPatch.context() as patch:
        spy = PopenSpy()
        watch_workers(patch, spy)
        run = solve_in_workers(tasks, model_folder, SETTINGS, out, workers=2, poll_seconds=POLL, progress=False)
    return out, run, spy.calls


@pytest.mark.slow
def test_two_workers_give_the_same_submission_as_one_worker_and_as_one_process(
        model_folder, tasks, tmp_path, single_process, two_workers):
    out, run, calls = two_workers
    submission = read_json(out / "submission.json")
    assert submission_problems(submission, tasks) == []
    assert submission == read_json(single_process / "submission.json")
    one = solve_in_workers(tasks, model_folder, SETTINGS, tmp_path / "one", workers=1, poll_seconds=POLL,
                           progress=False)
    assert read_json(tmp_path / "one" / "submission.json") == submission
    # not just the attempts: every candidate, NLL and augmentation is the same, whoever computed it
    alone = read_records(single_process / "records.jsonl")
    for records in (run.records, one.records):
        assert list(records) == TASK_IDS
        for task_id in TASK_IDS:
            assert records[task_id].error is None
            assert_same_finds(records[task_id], alone[task_id])
    assert any(test.candidates for record in alone.values() for test in record.tests)  # a real comparison
    assert run.score is not None and run.score.correct == read_json(single_process / "score.json")["correct"]


@pytest.mark.slow
def test_the_work_is_shared_by_cpu_worker_processes_and_merged_in_task_order(two_workers, tasks):
    out, run, calls = two_workers
    assert len(calls) == 2  # both workers had tasks
    gpus = workers.visible_gpus()
    for index, (command, environment) in enumerate(calls):
        assert command == [sys.executable, "-m", "arc_kit", "worker", str(out / f"worker-{index}" / "plan.json")]
        assert environment["CUDA_VISIBLE_DEVICES"] == (gpus[index] if index < len(gpus) else "")  # "": the CPU
    for index in range(2):
        plan = read_json(out / f"worker-{index}" / "plan.json")
        assert SolveSettings.from_json(plan["settings"]) == SETTINGS
    shares = [sorted(read_records(out / f"worker-{index}" / "records.jsonl")) for index in range(2)]
    # each task once; which worker took how many is the shared queue's timing (a worker that starts late on a
    # busy machine may find the queue empty)
    assert sorted(shares[0] + shares[1]) == sorted(TASK_IDS)
    lines = (out / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == TASK_IDS
    assert list(run.records) == TASK_IDS
    assert (out / "scores.csv").exists()
    speeds = read_json(out / "speeds.json")  # what the planner measured, for the tasks left and a rerun
    assert speeds["measured_tasks"] == len(TASK_IDS) and speeds["measured_parts"]["generation"] == len(TASK_IDS)


def test_a_rerun_recomputes_only_the_task_whose_record_is_missing(model_folder, tasks, tmp_path, finished_run,
                                                                  monkeypatch):
    """On the fake solve's run: that a worker recomputes a task as the first run did is the two-worker tests'."""
    source = finished_run
    out = tmp_path / "resumed"
    shutil.copytree(source, out)
    def records_text(index):
        path = out / f"worker-{index}" / "records.jsonl"
        return path.read_text() if path.exists() else ""  # a worker that found the queue empty wrote none

    killed = max(range(2), key=lambda index: (len(records_text(index).splitlines()), index))
    lines = records_text(killed).splitlines()
    lost = json.loads(lines[-1])["task_id"]
    (out / f"worker-{killed}" / "records.jsonl").write_text("".join(line + "\n" for line in lines[:-1]))  # killed
    before = [records_text(index) for index in range(2)]
    fake_workers(monkeypatch, tmp_path / "marks", {})
    spy = PopenSpy()
    spy.real = worker_slots.subprocess.Popen  # the fake workers' start, the commands recorded
    watch_workers(monkeypatch, spy)
    resumed = solve_in_workers(tasks, model_folder, SETTINGS, out, workers=2, poll_seconds=POLL, progress=False)
    assert len(spy.calls) == 1  # one worker for one task: the first
    assert sorted(path.name.split(".")[0] for path in (tmp_path / "marks").iterdir()) == [lost]  # it alone was solved
    after = [records_text(index) for index in range(2)]
    assert after[1] == before[1]
    assert after[0].startswith(before[0]) and len(after[0].splitlines()) == len(before[0].splitlines()) + 1
    assert json.loads(after[0].splitlines()[-1])["task_id"] == lost
    assert read_json(out / "submission.json") == read_json(source / "submission.json")
    assert [json.loads(line)["task_id"] for line in (out / "records.jsonl").read_text().splitlines()] == TASK_IDS
    first = read_records(source / "records.jsonl")
    for task_id in TASK_IDS:
        assert_same_finds(resumed.records[task_id], first[task_id])


@pytest.fixture(scope="module")
def finished_run(model_folder, tasks, tmp_path_factory) -> Path:
    """A run folder of two workers, each the real worker loop around the fake solve (seconds, not minutes)."""
    out = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as patch:
        fake_workers(patch, out / "marks", {})
        solve_in_workers(tasks, model_folder, SETTINGS, out / "run", workers=2, poll_seconds=0.05, progress=False,
                         watchdog=QUICK_WATCHDOG)
    return out / "run"


def test_a_rerun_with_fewer_workers_still_finds_every_record(model_folder, tasks, tmp_path, finished_run, monkeypatch):
    source = finished_run
    out = tmp_path / "fewer"
    shutil.copytree(source, out)
    spy = PopenSpy()
    watch_workers(monkeypatch, spy)
    again = solve_in_workers(tasks, model_folder, SETTINGS, out, workers=1, poll_seconds=POLL, progress=False)
    assert spy.calls == []  # everything was done, by whichever worker
    assert list(again.records) == TASK_IDS
    assert read_json(out / "submission.json") == read_json(source / "submission.json")


def test_a_rerun_with_other_settings_is_refused(model_folder, tasks, tmp_path, finished_run, monkeypatch):
    source = finished_run
    out = tmp_path / "other"
    shutil.copytree(source, out)
    spy = PopenSpy()
    watch_workers(monkeypatch, spy)
    with pytest.raises(ValueError, match="other settings"):
        solve_in_workers(tasks, model_folder, SETTINGS.replace(aggregation="min"), out, workers=2,
                         poll_seconds=POLL, progress=False)
    assert spy.calls == []
    assert read_json(out / "submission.json") == read_json(source / "submission.json")
    run_json = read_json(out / "run.json")
    assert run_json["settings"] == json.loads(json.dumps(SETTINGS.to_json()))
    assert {"arc_kit_version", "git_commit"} <= set(run_json)


# -- the queue and the watchdog, with a fake solve in the real worker loop ----------------------------------

FAKE_WORKER = """
import json, os, sys, time
import numpy as np
from arc_kit import progress
from arc_kit.run import worker_process
from arc_kit.method.records import TaskRecord, TestResult

behaviour = json.loads(os.environ["FAKE_BEHAVIOUR"])
marks = os.environ["FAKE_MARKS"]  # one empty file per try of a task: <task>.<try>.<pid>


class FakeSolver:
    def __init__(self, settings):
        self.settings = settings


def fake_solve_one(solver, task, rung, rungs, budget=None):
    tries = len([name for name in os.listdir(marks) if name.startswith(task.id + ".")])
    open(os.path.join(marks, f"{task.id}.{tries}.{os.getpid()}"), "w").close()
    what = behaviour.get(task.id, "solve")
    if what == "hang" or (what == "hang-once" and tries == 0):
        while True:  # the heartbeat goes on: only the task's deadline (or the stop time) tells
            time.sleep(60)
    if what == "die" or (what == "die-once" and tries == 0):
        os._exit(3)
    if what == "work":  # a few seconds of steps, as a model's forward passes tick them, then the answer
        ends = time.monotonic() + 2.0
        while time.monotonic() < ends:
            progress.tick()
            time.sleep(0.01)
    record = TaskRecord(task.id, tests=[TestResult([np.array([[7]]), np.array([[7, 7]])], [], [], [])
                                        for _ in task.test_inputs],
                        timings={"ttt": 0.5, "generation": 0.25, "scoring": 0.125, "total": 0.875}, rung=rung)
    record.extra = {"device": os.environ["CUDA_VISIBLE_DEVICES"],
                    "budget": None if budget is None else [budget.deadline, budget.search_seconds]}
    return record


if os.environ.get("FAKE_SILENT"):  # no sign of life: no heartbeat, and loading never ends
    worker_process.Heartbeat.run = lambda self: None
    worker_process.load_model = lambda *arguments, **options: time.sleep(3600)
else:
    worker_process.load_model = lambda *arguments, **options: None
worker_process.Solver = type("FakeSolverClass", (), {"from_loaded": staticmethod(lambda loaded, settings:
                                                                                  FakeSolver(settings))})
worker_process.solve_one = fake_solve_one
sys.exit(worker_process.run_worker(sys.argv[1], poll_seconds=0.02))
"""
QUICK_WATCHDOG = WatchdogSettings(hang_seconds=0.5, terminate_seconds=2.0, heartbeat_seconds=0.2)


def fake_workers(patch: pytest.MonkeyPatch, marks: Path, behaviour: dict[str, str], **environment) -> list[str]:
    """Start each worker as the real worker loop around the fake solve; the devices they were given."""
    marks.mkdir(exist_ok=True)
    devices, real = [], subprocess.Popen

    def popen(command, env=None, **kwargs):
        assert command[:4] == [sys.executable, "-m", "arc_kit", "worker"]
        devices.append(env["CUDA_VISIBLE_DEVICES"])
        env = {**env, "FAKE_BEHAVIOUR": json.dumps(behaviour), "FAKE_MARKS": str(marks), **environment}
        return real([sys.executable, "-c", FAKE_WORKER, command[4]], env=env, **kwargs)

    watch_workers(patch, popen)
    return devices


def tries(marks: Path, task_id: str) -> list[int]:
    """The process ids that tried ``task_id``, in order."""
    found = sorted(path.name.split(".") for path in marks.iterdir() if path.name.startswith(task_id + "."))
    return [int(pid) for _, _, pid in sorted(found, key=lambda parts: int(parts[1]))]


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/status").exists() or "zombie" not in Path(f"/proc/{pid}/status").read_text()


@pytest.mark.slow
def test_gpu_ids_come_from_the_parents_list_and_speeds_are_measured_from_every_worker(model_folder, tasks, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # physical ids: a child given "1" would see the wrong GPU
    devices = fake_workers(monkeypatch, tmp_path / "marks", {})
    run = solve_in_workers(tasks, model_folder, SETTINGS, tmp_path / "out", workers=3, poll_seconds=0.05,
                           progress=False, watchdog=QUICK_WATCHDOG)
    assert devices == ["3", "5", ""]  # more workers than GPUs: the rest on the CPU
    assert list(run.records) == TASK_IDS and all(record.got_model_work for record in run.records.values())
    assert {record.extra["device"] for record in run.records.values()} <= {"3", "5", ""}
    assert all(record.extra["budget"] is None for record in run.records.values())  # no deadline: no caps
    submission = read_json(tmp_path / "out" / "submission.json")
    assert submission_problems(submission, tasks) == []
    assert all(submission[task_id][0]["attempt_1"] == [[7]] for task_id in TASK_IDS)
    speeds = read_json(tmp_path / "out" / "speeds.json")
    assert speeds["measured_tasks"] == len(TASK_IDS) and speeds["measured_parts"] == {
        "training": len(TASK_IDS), "generation": len(TASK_IDS), "scoring": len(TASK_IDS)}
    assert speeds["generation"] != workers.Speeds().generation  # measured, not assumed


@pytest.mark.slow
def test_a_dead_workers_task_goes_back_to_the_queue_once_and_the_others_take_the_rest(model_folder, tasks, tmp_path,
                                                                                      monkeypatch, caplog):
    once, always = TASK_IDS[0], TASK_IDS[1]
    fake_workers(monkeypatch, tmp_path / "marks", {once: "die-once", always: "die"})
    with caplog.at_level(logging.WARNING, logger="arc_kit.run.workers"):
        run = solve_in_workers(tasks, model_folder, SETTINGS, tmp_path / "out", workers=2, poll_seconds=0.05,
                               progress=False, watchdog=QUICK_WATCHDOG)
    assert len(tries(tmp_path / "marks", once)) == 2 and run.records[once].got_model_work  # the second try did it
    assert len(tries(tmp_path / "marks", always)) == 2  # back in the queue once, then no more
    assert run.records[always].skipped == "its worker died or hung 2 times"
    for task_id in TASK_IDS[2:]:
        assert run.records[task_id].got_model_work and len(tries(tmp_path / "marks", task_id)) == 1
    warned = [record.getMessage() for record in caplog.records if record.name == "arc_kit.run.workers"]
    assert sum("exited with status 3" in message for message in warned) == 3
    submission = read_json(tmp_path / "out" / "submission.json")
    assert submission_problems(submission, tasks) == []
    assert submission[always][0]["attempt_1"] == tasks[always].test[0].input.tolist()  # the fallback
    assert all(submission[task_id][0]["attempt_1"] == [[7]] for task_id in TASK_IDS if task_id != always)


@pytest.mark.slow
def test_a_task_that_hangs_past_its_cap_is_stopped_retried_once_then_given_fallbacks(model_folder, tasks, tmp_path,
                                                                                    monkeypatch, caplog):
    from arc_kit.settings import BudgetSettings

    hanging = TASK_IDS[2]
    fake_workers(monkeypatch, tmp_path / "marks", {hanging: "hang"})
    caps = BudgetSettings(task_factor=0.0, task_minimum=1.0, search_factor=0.0, search_minimum=0.25)  # a second
    started = time.time()
    deadline = started + 3600
    with caplog.at_level(logging.WARNING, logger="arc_kit.run.workers"):
        run = solve_in_workers(tasks, model_folder, SETTINGS, tmp_path / "out", workers=2, poll_seconds=0.05,
                               progress=False, deadline=deadline, budget=caps, watchdog=QUICK_WATCHDOG)
    assert time.time() - started < 60  # two caps and the stops, not the hour
    assert run.records[hanging].skipped == "its worker died or hung 2 times"
    for pid in tries(tmp_path / "marks", hanging):
        assert not is_running(pid)  # stopped, not left behind
    warned = [record.getMessage() for record in caplog.records if record.name == "arc_kit.run.workers"]
    assert sum(f"hung: task {hanging} is" in message for message in warned) == 2
    for task_id in TASK_IDS:
        if task_id != hanging:
            record = run.records[task_id]
            task_deadline, search_seconds = record.extra["budget"]
            assert started < task_deadline <= started + 60 and search_seconds == 0.25  # the planner's caps
    assert submission_problems(read_json(tmp_path / "out" / "submission.json"), tasks) == []


@pytest.mark.slow
def test_at_the_stop_time_a_hung_worker_is_stopped_and_the_submission_is_complete(model_folder, tasks, tmp_path,
                                                                                  monkeypatch):
    from arc_kit.settings import BudgetSettings

    fake_workers(monkeypatch, tmp_path / "marks", dict.fromkeys(TASK_IDS, "hang"))  # whatever it gets, it hangs
    started = time.time()
    stop_at = started + 6.0
    run = solve_in_workers(tasks, model_folder, SETTINGS, tmp_path / "out", workers=1, poll_seconds=0.05,
                           progress=False, deadline=started + 3600, stop_at=stop_at,
                           budget=BudgetSettings(task_minimum=3000.0), watchdog=QUICK_WATCHDOG)
    assert time.time() < stop_at + QUICK_WATCHDOG.terminate_seconds + 5  # stopped, then written, promptly
    (first,) = [task_id for task_id in TASK_IDS if tries(tmp_path / "marks", task_id)]  # the one it hung on
    assert not is_running(tries(tmp_path / "marks", first)[0])
    assert list(run.records) == TASK_IDS and all(record.skipped == "out of time" for record in run.records.values())
    submission = read_json(tmp_path / "out" / "submission.json")
    assert submission_problems(submission, tasks) == [] and list(submission) == TASK_IDS


@pytest.mark.slow
def test_a_worker_that_shows_no_sign_of_life_is_replaced_and_with_none_left_the_tasks_get_fallbacks(
        model_folder, tasks, tmp_path, monkeypatch, caplog):
    fake_workers(monkeypatch, tmp_path / "marks", {}, FAKE_SILENT="1")
    watchdog = WatchdogSettings(silence_seconds=1.5, terminate_seconds=1.0, restarts=1)
    started = time.time()
    with caplog.at_level(logging.WARNING, logger="arc_kit.run.workers"):
        run = solve_in_workers(tasks, model_folder, SETTINGS, tmp_path / "out", workers=1, poll_seconds=0.05,
                               progress=False, watchdog=watchdog)
    assert time.time() - started < 30
    warned = [record.getMessage() for record in caplog.records if record.name == "arc_kit.run.workers"]
    assert sum("hung: no heartbeat for" in message for message in warned) == 2  # the first, and its one restart
    assert any("no worker left: 4 task(s) get fallback answers" in message for message in warned)
    assert list(run.records) == TASK_IDS and all(r.skipped == "no worker left" for r in run.records.values())
    assert submission_problems(read_json(tmp_path / "out" / "submission.json"), tasks) == []


# -- a simulated Kaggle machine: two workers on each of two fake GPUs, one killed and one stopped ------------

def busy_worker(out: Path, skip: int | None = None, not_task: str | None = None,
                timeout: float = 120.0) -> tuple[int, int, str]:
    """(index, pid, task) of the first of the 4 workers in ``out`` (but ``skip``) whose model is loaded and that
    runs a task (other than ``not_task``) it has not recorded yet."""
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        for index in range(4):
            folder = out / f"worker-{index}"
            try:
                pid = int((folder / worker_process.READY_FILE).read_text())
                task = read_json(folder / worker_process.ASSIGNMENT_FILE).get("task_id")
            except (OSError, ValueError):
                continue
            if index != skip and task is not None and task != not_task and not recorded(folder, task):
                return index, pid, task
        time.sleep(0.02)
    raise AssertionError(f"no worker in {out} got going")


def recorded(folder: Path, task_id: str) -> bool:
    """Whether the worker in ``folder`` has written the record of ``task_id``."""
    try:
        lines = (folder / "records.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return False
    for line in lines:
        try:
            if json.loads(line).get("task_id") == task_id:
                return True
        except ValueError:  # a line still being written
            pass
    return False


@pytest.mark.slow
def test_a_killed_and_a_stopped_worker_are_replaced_and_the_submission_is_complete(model_folder, tmp_path,
                                                                                   monkeypatch, caplog, capsys):
    """Real worker processes (the real worker loop, heartbeat and step counter) around a fake solve that ticks the
    step counter for 2 s a task, as a model's forward passes do (a real model's workers: the two-worker tests)."""
    import signal
    import threading

    tasks = load_tasks("arc-agi-1/evaluation").select(TASK_IDS + ["a8610ef7", "d4b1c2b1"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # two fake GPUs: the workers run on the CPU all the same
    # a loaded machine may leave a healthy worker a few seconds between steps (its fake solve ticks every 10 ms):
    # 5 s keeps it from being taken for hung
    watchdog = WatchdogSettings(stall_seconds=5.0, heartbeat_seconds=0.5, terminate_seconds=2.0)
    out, events = tmp_path / "out", {}

    def strike() -> None:
        # whichever worker first runs a task is killed (were it a fixed one, the others could finish every task
        # before it loads on a quick machine); its task goes back to the queue. Were the stopped worker stopped on
        # that same task, the task would have lost two workers and rightly get a fallback: stop one on another task
        killed_index, killed, lost = busy_worker(out)
        os.kill(killed, signal.SIGKILL)
        while True:
            stopped_index, stopped, task = busy_worker(out, skip=killed_index, not_task=lost)
            os.kill(stopped, signal.SIGSTOP)  # its threads stop too: no heartbeat, no progress
            # the assignment file still names a task the worker has just finished (on a slow machine it may have
            # finished its last one): stopped then, it would be idle, never hung; let it go and wait for the next
            if not recorded(out / f"worker-{stopped_index}", task):
                break
            os.kill(stopped, signal.SIGCONT)
            time.sleep(0.05)
        events.update(killed=killed, killed_index=killed_index, stopped=stopped, stopped_index=stopped_index,
                      stopped_at=time.time())

    fake_workers(monkeypatch, tmp_path / "marks", dict.fromkeys(tasks.ids, "work"))
    spy = PopenSpy()
    spy.real = worker_slots.subprocess.Popen  # the fake workers' start, the commands recorded
    watch_workers(monkeypatch, spy)
    striker = threading.Thread(target=strike, daemon=True)
    striker.start()
    with caplog.at_level(logging.WARNING, logger="arc_kit.run.workers"):
        run = solve_in_workers(tasks, model_folder, SETTINGS, out, workers_per_gpu=2, poll_seconds=0.1,
                               watchdog=watchdog)
    striker.join(timeout=1)
    printed = capsys.readouterr().out
    assert "started 4 worker process(es) running (2 on GPU 0, 2 on GPU 1)" in printed
    warned = [record.getMessage() for record in caplog.records if record.name == "arc_kit.run.workers"]
    killed_index, stopped_index = events["killed_index"], events["stopped_index"]
    assert any(message.startswith(f"worker {killed_index} exited with status -9") for message in warned), warned
    stalled = [record for record in caplog.records
               if record.getMessage().startswith(f"worker {stopped_index} hung: no progress on")]
    assert len(stalled) == 1, warned
    assert stalled[0].created - events["stopped_at"] < watchdog.stall_seconds + 5  # noticed in about stall_seconds
    assert not is_running(events["stopped"]) and not is_running(events["killed"])
    assert read_json(out / "run.json")["workers"] == 4
    # every task solved by the model (the two lost tasks went back to the queue), the submission complete
    assert list(run.records) == list(tasks.ids) and all(r.got_model_work for r in run.records.values()), \
        [(r.task_id, r.skipped, r.error) for r in run.records.values() if not r.got_model_work]
    assert submission_problems(read_json(out / "submission.json"), tasks) == []
    starts = [command[-1] for command, _ in spy.calls]
    assert starts.count(str(out / f"worker-{stopped_index}" / "plan.json")) == 2 and \
        starts.count(str(out / f"worker-{killed_index}" / "plan.json")) == 2 and len(starts) == 6  # the killed
    # and the stopped worker started again, the others once


def test_the_parent_prepares_a_deltas_base_once_and_the_workers_get_its_folder(tmp_path, monkeypatch, capsys):
    delta = tmp_path / "delta"
    delta.mkdir()
    (delta / "delta.json").write_text(json.dumps({"base": "smollm2-135m", "shards": []}))
    (delta / "adapter_config.json").write_text("{}")
    built = tmp_path / "cache" / "base"
    calls = []
    monkeypatch.setattr(workers, "is_built", lambda folder, name: False)
    monkeypatch.setattr(workers, "build_base", lambda name, **options: calls.append((name, options)) or built)
    options = workers.prepare_model(delta, {"device": "cpu"})
    assert options == {"device": "cpu", "base_model": str(built)} and [name for name, _ in calls] == ["smollm2-135m"]
    assert f"base smollm2-135m: built once by the parent in 0 s, {built}; every worker loads it from there" in \
        capsys.readouterr().out
    assert workers.prepare_model(tmp_path, {"device": "cpu"}) == {"device": "cpu"} and len(calls) == 1  # no delta


def test_workers_per_gpu_follow_the_measured_peak_memory_within_the_cores_and_the_cap():
    gib = 2**30
    assert calibration.workers_per_gpu_for(4.0 * gib, 24 * gib, gpus=4, cpus=48) == 4  # an L4: 21.6 GiB / 4.5 GiB
    assert calibration.workers_per_gpu_for(1.0 * gib, 80 * gib, gpus=1, cpus=16) == 8  # an H100: the cap
    assert calibration.workers_per_gpu_for(1.0 * gib, 80 * gib, gpus=4, cpus=8) == 2  # two cores per GPU
    assert calibration.workers_per_gpu_for(30.0 * gib, 24 * gib, gpus=1, cpus=8) == 1  # too big: still one
