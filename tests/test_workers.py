"""Several workers: tasks dealt by estimated cost, and a run split over worker processes equals one process.

The workers are real subprocesses (``python -m arc_kit worker PLAN``) on the CPU, running the bigram
micro model of test_solver.py (it writes small grids, so every task has real candidates and the
comparison of two runs means something) on four small ARC-AGI-1 evaluation tasks.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arc_kit import workers
from arc_kit.datasets import load_tasks
from arc_kit.models import load_model
from arc_kit.records import read_records
from arc_kit.run import solve
from arc_kit.settings import SamplerSettings, SolveSettings, TestTimeSettings
from arc_kit.solver import Solver
from arc_kit.submission import submission_problems
from arc_kit.workers import deal, solve_in_workers

TASK_IDS = ["6ea4a07e", "00576224", "be03b35f", "66e6c45b"]  # not in id order: records must follow this order
SETTINGS = SolveSettings(
    sampler=SamplerSettings("dfs", threshold=0.05, max_forward_calls=200),
    inference_augmentations=2, scoring_augmentations=2,
    ttt=TestTimeSettings(steps=2), max_len=2048)
POLL = 0.2  # seconds between the parent's merges (5 by default); the tests wait on it


def read_json(path: Path):
    return json.loads(Path(path).read_text())


# -- dealing tasks to workers -------------------------------------------------------------------------

def loads(shares: list[list[str]], costs: dict[str, float]) -> list[float]:
    return [sum(costs[task_id] for task_id in share) for share in shares]


def test_deal_balances_hand_made_costs_and_keeps_each_worker_in_task_order():
    costs = {"a": 2.0, "b": 9.0, "c": 4.0, "d": 5.0, "e": 3.0, "f": 1.0}  # 24 in all: 12 + 12 is possible
    shares = deal(costs, 2)
    assert sorted(task_id for share in shares for task_id in share) == sorted(costs)
    assert loads(shares, costs) == [12.0, 12.0]
    order = list(costs)
    for share in shares:
        assert share == sorted(share, key=order.index)
    # longest first, each to the least loaded (the first on a tie): b | d, c | e | a | f
    assert shares == [["b", "e"], ["a", "c", "d", "f"]]


def test_deal_with_more_workers_than_tasks_leaves_some_idle():
    shares = deal({"x": 1.0, "y": 5.0}, 4)
    assert shares == [["y"], ["x"], [], []]
    assert deal({}, 3) == [[], [], []]
    assert deal({"x": 1.0, "y": 2.0, "z": 3.0}, 1) == [["x", "y", "z"]]


@given(st.dictionaries(st.text("abcdef0123", min_size=1, max_size=6),
                       st.floats(0.0, 1000.0, allow_nan=False), max_size=30),
       st.integers(1, 6))
def test_deal_keeps_every_task_exactly_once_and_no_worker_carries_more_than_one_task_too_much(costs, count):
    shares = deal(costs, count)
    assert len(shares) == count
    dealt = [task_id for share in shares for task_id in share]
    assert sorted(dealt) == sorted(costs) and len(dealt) == len(set(dealt))
    if costs:
        # the heaviest worker got its last task while it was the lightest
        spread = max(loads(shares, costs)) - min(loads(shares, costs))
        assert spread <= max(costs.values()) + 1e-9


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
    patch.setattr(workers, "subprocess", SimpleNamespace(Popen=popen, STDOUT=subprocess.STDOUT))


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
            assert records[task_id].to_json()["test"] == alone[task_id].to_json()["test"]
    assert any(test.candidates for record in alone.values() for test in record.tests)  # a real comparison
    assert run.score is not None and run.score.correct == read_json(single_process / "score.json")["correct"]


@pytest.mark.slow
def test_the_work_is_shared_by_cpu_worker_processes_and_merged_in_task_order(two_workers, tasks):
    out, run, calls = two_workers
    assert len(calls) == 2  # both workers had tasks
    gpus = [str(index) for index in range(workers.gpu_count())]
    for index, (command, environment) in enumerate(calls):
        assert command == [sys.executable, "-m", "arc_kit", "worker", str(out / f"worker-{index}" / "plan.json")]
        assert environment["CUDA_VISIBLE_DEVICES"] == (gpus[index] if index < len(gpus) else "")  # "": the CPU
    plans = [read_json(out / f"worker-{index}" / "plan.json") for index in range(2)]
    shares = [plan["task_ids"] for plan in plans]
    assert all(shares) and sorted(shares[0] + shares[1]) == sorted(TASK_IDS)
    for plan in plans:
        assert SolveSettings.from_json(plan["settings"]) == SETTINGS
    for index, share in enumerate(shares):
        assert sorted(read_records(out / f"worker-{index}" / "records.jsonl")) == sorted(share)
    lines = (out / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == TASK_IDS
    assert list(run.records) == TASK_IDS
    assert (out / "scores.csv").exists()


@pytest.mark.slow
def test_a_rerun_recomputes_only_the_task_whose_record_is_missing(model_folder, tasks, tmp_path, two_workers,
                                                                  monkeypatch):
    source, run, _ = two_workers
    out = tmp_path / "resumed"
    shutil.copytree(source, out)
    records_path = out / "worker-1" / "records.jsonl"
    lines = records_path.read_text().splitlines()
    lost = json.loads(lines[-1])["task_id"]
    records_path.write_text("".join(line + "\n" for line in lines[:-1]))  # as if killed before the last record
    before = [(out / f"worker-{index}" / "records.jsonl").read_text() for index in range(2)]
    spy = PopenSpy()
    watch_workers(monkeypatch, spy)
    resumed = solve_in_workers(tasks, model_folder, SETTINGS, out, workers=2, poll_seconds=POLL, progress=False)
    assert len(spy.calls) == 1  # one worker for one task
    dealt = [read_json(out / f"worker-{index}" / "plan.json")["task_ids"] for index in range(2)]
    assert sorted(dealt, key=len) == [[], [lost]]
    for index in range(2):  # the worker that got the task appended its record; the other one's is untouched
        after = (out / f"worker-{index}" / "records.jsonl").read_text()
        if dealt[index]:
            assert after.startswith(before[index]) and len(after.splitlines()) == len(before[index].splitlines()) + 1
            assert json.loads(after.splitlines()[-1])["task_id"] == lost
        else:
            assert after == before[index]
    assert read_json(out / "submission.json") == read_json(source / "submission.json")
    assert [json.loads(line)["task_id"] for line in (out / "records.jsonl").read_text().splitlines()] == TASK_IDS
    for task_id in TASK_IDS:
        assert resumed.records[task_id].to_json()["test"] == run.records[task_id].to_json()["test"]


def test_a_rerun_with_fewer_workers_still_finds_every_record(model_folder, tasks, tmp_path, two_workers, monkeypatch):
    source, run, _ = two_workers
    out = tmp_path / "fewer"
    shutil.copytree(source, out)
    spy = PopenSpy()
    watch_workers(monkeypatch, spy)
    again = solve_in_workers(tasks, model_folder, SETTINGS, out, workers=1, poll_seconds=POLL, progress=False)
    assert spy.calls == []  # everything was done, by whichever worker
    assert list(again.records) == TASK_IDS
    assert read_json(out / "submission.json") == read_json(source / "submission.json")


def test_a_rerun_with_other_settings_is_refused(model_folder, tasks, tmp_path, two_workers, monkeypatch):
    source, _, _ = two_workers
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


class FakeProcess:
    """A worker that has already died."""

    def __init__(self, returncode: int):
        self.returncode = returncode

    def poll(self):
        return self.returncode


def test_each_worker_gets_its_own_gpu_and_a_dead_worker_leaves_fallback_answers(model_folder, tasks, tmp_path,
                                                                                monkeypatch, caplog):
    started = []

    def fake_popen(command, env=None, **kwargs):
        started.append((command, env["CUDA_VISIBLE_DEVICES"]))
        return FakeProcess(1)

    watch_workers(monkeypatch, fake_popen)
    with caplog.at_level(logging.WARNING, logger="arc_kit.workers"):
        run = solve_in_workers(tasks, model_folder, SETTINGS, tmp_path, workers=3, gpus=[3, 5], poll_seconds=POLL,
                               progress=False)
    assert [device for _, device in started] == ["3", "5", ""]  # more workers than GPUs: the rest on the CPU
    assert run.records == {}
    warned = [record.getMessage() for record in caplog.records if record.name == "arc_kit.workers"]
    assert len(warned) == 3 and all("exited with status 1" in message for message in warned)
    assert str(tmp_path / "worker-0" / "worker.log") in warned[0]
    submission = read_json(tmp_path / "submission.json")
    assert submission_problems(submission, tasks) == []
    for task_id in TASK_IDS:  # fallbacks: the test input itself first
        assert submission[task_id][0]["attempt_1"] == tasks[task_id].test[0].input.tolist()
