"""Ray as a run starts and stops it, the GPUs it hands out, and a cluster of two nodes losing one mid-run.

Each test here starts Ray its own way (test_pool.py's tests share one): a run's own Ray, quiet, its
logs kept and no process left behind, on a small /dev/shm too; SIGTERM through the command line
(Ctrl-C leaves through the same ``finally``); the one-line refusals of a Ray that cannot start; two
fake GPUs (``CUDA_VISIBLE_DEVICES``: Ray hands each actor its GPU, the actors on the CPU none) with
actors killed and stopped; the first task's measurement; and two Ray nodes on this machine (``ray
start --head`` and ``ray start --address``), the second stopped while it works. The actors run
``pool_helpers``' fake solve.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from pool_helpers import (
    FakeSolver,
    fake_workers,
    folder_digest,
    is_running,
    loads,
    processes_naming,
    read_json,
    solve_in_pool,
    tries,
)

from arc_kit.cli import main
from arc_kit.data.datasets import load_tasks
from arc_kit.data.submission import submission_problems
from arc_kit.model.devices import UnsupportedSetupError
from arc_kit.run import expectations, ray_session
from arc_kit.run.jobs import solve
from arc_kit.settings import TEST_TIME_TRAINING, PoolSettings, SamplerSettings, SolveSettings

SETTINGS = SolveSettings(sampler=SamplerSettings("greedy"), inference_augmentations=1, scoring_augmentations=1,
                         ttt=TEST_TIME_TRAINING.replace(steps=1), max_len=2048)
OPTIONS = ["--sampler", "greedy", "--augmentations", "1", "--scoring-augmentations", "1", "--ttt-steps", "1",
           "--max-len", "2048"]
SIX = ["6ea4a07e", "00576224", "be03b35f", "66e6c45b", "a8610ef7", "d4b1c2b1"]
LOGGER = "arc_kit.run.pool"


@pytest.fixture(scope="module")
def six():
    return load_tasks("arc-agi-1/evaluation").select(SIX)


def gone_within(text: str, seconds: float = 15.0) -> list[int]:
    """The processes whose command line holds ``text`` once they are gone, or after ``seconds`` those left."""
    ends = time.monotonic() + seconds
    while processes_naming(text) and time.monotonic() < ends:
        time.sleep(0.2)
    return processes_naming(text)


def recorded(out: Path, task_id: str) -> bool:
    """Whether the driver has appended ``task_id``'s record to ``out/records.jsonl``."""
    try:
        return f'"task_id": "{task_id}"' in (out / "records.jsonl").read_text()
    except FileNotFoundError:
        return False


def busy(marks: Path, out: Path, not_pid: int | None = None, not_task: str | None = None,
         timeout: float = 120.0) -> tuple[int, str]:
    """(pid, task) of an actor that runs a task (other than ``not_task``) the driver has not recorded yet."""
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        for path in sorted(marks.iterdir(), key=lambda path: path.stat().st_mtime, reverse=True):
            task, _, pid = path.name.split(".")
            if task not in ("load", not_task) and int(pid) != not_pid and is_running(int(pid)) \
                    and not recorded(out, task):
                return int(pid), task
        time.sleep(0.02)
    raise AssertionError(f"no actor of {out} got going")


# -- a run's own Ray ------------------------------------------------------------------------------------------

@pytest.mark.processes
@pytest.mark.slow
def test_a_run_starts_its_own_ray_quietly_on_a_small_dev_shm_keeps_its_logs_and_leaves_no_process_behind(
        model_folder, six, tmp_path, monkeypatch, capfd):
    import ray

    fake_workers(monkeypatch, tmp_path / "marks", {})
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=2**20)
                        if str(path) == "/dev/shm" else real(path))  # a container's 1 MB /dev/shm
    handler = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "out"
    run = solve_in_pool(six, model_folder, SETTINGS, out, workers=2, progress=False,
                        pool=PoolSettings(poll_seconds=0.05))
    printed = capfd.readouterr()
    assert printed.out == "" and printed.err == ""  # not a line of Ray's
    assert list(run.records) == SIX and all(record.got_model_work for record in run.records.values())
    assert {record.extra["niceness"] for record in run.records.values()} == {os.nice(0)}  # the driver's, not Ray's 15
    assert not ray.is_initialized() and signal.getsignal(signal.SIGTERM) is handler
    (session,) = (out / "ray-logs").iterdir()  # Ray's logs, kept in the run folder
    assert len(list(session.glob("worker-*.err"))) >= 2 and (session / "gcs_server.out").exists()
    store = [line for line in (session / "raylet.out").read_text().splitlines() if "Starting object store" in line]
    assert store and "with directory /dev/shm" not in store[0]  # on disk: a small /dev/shm does not stop it
    assert gone_within(session.name) == []  # no process of that session is left
    assert not list(Path(tempfile.gettempdir()).glob(f"arc-kit-ray-*/{session.name}"))  # nor its folder


def test_a_small_dev_shm_puts_the_object_store_on_disk(tmp_path, monkeypatch):
    real = shutil.disk_usage
    for free, expected in [(2**40, "/dev/shm"), (2**20, str(tmp_path))]:
        monkeypatch.setattr(shutil, "disk_usage", lambda path, free=free: real(path)._replace(free=free))
        assert ray_session._plasma_directory(256 * 2**20, tmp_path) == expected


def one_done_then_held(model_folder, tmp_path: Path, monkeypatch) -> tuple[list[str], Path, list[str]]:
    """Four tasks for ``solve --workers 2`` on two actors: the first answered at once, the others held until
    ``marks/hold`` goes, so that a stop comes with one task done; (the tasks, the run folder, the command)."""
    four = SIX[:4]
    fake_workers(monkeypatch, tmp_path / "marks", {task_id: "held" for task_id in four[1:]})
    (tmp_path / "marks" / "hold").touch()
    out = tmp_path / "out"
    return four, out, ["solve", "--dataset", "arc-agi-1/evaluation", "--task-ids", *four, "--model",
                       str(model_folder), "--out", str(out), "--workers", "2", *OPTIONS]


@pytest.mark.processes
@pytest.mark.slow
def test_sigterm_stops_the_command_and_its_ray_keeps_what_was_done_and_a_rerun_finishes(model_folder, six, tmp_path,
                                                                                      monkeypatch, capsys):
    four, out, command = one_done_then_held(model_folder, tmp_path, monkeypatch)

    def terminate():
        while not (out / "records.jsonl").exists():  # once a task is done
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=terminate, daemon=True).start()
    handler = signal.getsignal(signal.SIGTERM)
    assert main(command) == 143
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "stopped by SIGTERM" in error, error
    assert signal.getsignal(signal.SIGTERM) is handler
    (session,) = (out / "ray-logs").iterdir()
    assert gone_within(session.name) == []
    kept = read_json(out / "submission.json")
    assert submission_problems(kept, six.select(four)) == []  # complete and valid though stopped
    done = [task_id for task_id in four if recorded(out, task_id)]
    assert done == four[:1]
    (tmp_path / "marks" / "hold").unlink()
    assert main(command) == 0  # resumed: only the rest solved
    assert all(len(tries(tmp_path / "marks", task_id)) == 1 for task_id in done)
    assert all(read_json(out / "submission.json")[task_id][0]["attempt_1"] == [[7]] for task_id in four)


@pytest.mark.processes
@pytest.mark.slow
def test_a_lost_raylet_stops_the_run_in_one_line_keeping_a_whole_submission_and_a_rerun_finishes(
        model_folder, six, tmp_path, monkeypatch, capsys):
    import ray

    four, out, command = one_done_then_held(model_folder, tmp_path, monkeypatch)
    killed = {}

    def kill_raylet():
        while not (out / "records.jsonl").exists():  # once a task is done
            time.sleep(0.05)
        raylet = ray._private.worker._global_node.all_processes["raylet"][0].process  # the run's own Ray's
        killed["at"] = time.monotonic()
        os.kill(raylet.pid, signal.SIGKILL)
    threading.Thread(target=kill_raylet, daemon=True).start()
    assert main(command) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "Ray was lost mid-run (this node's raylet is gone): stopped with 1 of 4" in error[0]
    assert time.monotonic() - killed["at"] < 30  # noticed at the next poll; Ray's shutdown takes the rest
    (session,) = (out / "ray-logs").iterdir()
    assert gone_within(session.name) == []
    assert submission_problems(read_json(out / "submission.json"), six.select(four)) == []  # whole throughout
    assert [task_id for task_id in four if recorded(out, task_id)] == four[:1]  # no fallback record for the rest
    (tmp_path / "marks" / "hold").unlink()
    assert main(command) == 0  # resumed: the rest solved
    assert all(read_json(out / "submission.json")[task_id][0]["attempt_1"] == [[7]] for task_id in four)


# -- a Ray that cannot start: one line ------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_ray_that_cannot_start_or_be_joined_is_one_line(model_folder, tmp_path, monkeypatch, capsys):
    base = ["solve", "--dataset", "arc-agi-1/evaluation", "--task-ids", SIX[0], "--model", str(model_folder),
            *OPTIONS]
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "ray", None)  # not installed
        assert main([*base, "--out", str(tmp_path / "a"), "--workers", "2"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "several workers run on Ray, which does not import here" in error, error
    closed = free_port()  # nothing listens
    assert main([*base, "--out", str(tmp_path / "b"), "--address", f"127.0.0.1:{closed}"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"no Ray answers at 127.0.0.1:{closed}" in error, error
    with socket.socket() as taken:  # another program on the port: it answers, but no gRPC
        taken.bind(("127.0.0.1", 0))
        taken.listen()

        def answer():
            connection, _ = taken.accept()
            connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            connection.close()
        threading.Thread(target=answer, daemon=True).start()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        assert main([*base, "--out", str(tmp_path / "c"), "--address", address]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"something that is no Ray answers at {address}" in error, error
    with pytest.raises(UnsupportedSetupError, match="expected HOST:PORT"):
        ray_session.check_address("no-port")


# -- GPUs: each actor gets its own, several share one ----------------------------------------------------------

@pytest.mark.processes
@pytest.mark.slow
def test_actors_get_the_gpus_the_driver_names_and_the_rest_run_on_cpus(model_folder, six, tmp_path, monkeypatch,
                                                                       capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # physical ids: an actor given "0" would see the wrong GPU
    fake_workers(monkeypatch, tmp_path / "marks", {}, wait_for_loads=3)  # every actor loads before any answers
    run = solve_in_pool(six, model_folder, SETTINGS, tmp_path / "out", workers=3, pool=PoolSettings(poll_seconds=0.05))
    assert "started 3 worker(s) on Ray (1 on GPU 0, 1 on GPU 1, 1 on CPUs)" in capsys.readouterr().out
    devices = sorted(load["device"] for load in loads(tmp_path / "marks"))
    assert devices == ["", "3", "5"]  # Ray handed on the driver's own ids; the CPU actor sees no GPU
    assert list(run.records) == SIX and {record.extra["device"] for record in run.records.values()} <= {"3", "5", ""}
    assert all(record.extra["budget"] is None for record in run.records.values())  # no deadline: no caps
    speeds = read_json(tmp_path / "out" / "speeds.json")
    assert speeds["measured_tasks"] == len(SIX) and speeds["measured_parts"] == dict.fromkeys(
        ["training", "generation", "scoring"], len(SIX))


@pytest.mark.processes
@pytest.mark.slow
def test_on_a_simulated_kaggle_machine_a_killed_and_a_stopped_actor_are_replaced_and_the_submission_is_complete(
        model_folder, six, tmp_path, monkeypatch, caplog, capsys):
    """Two actors on each of two fake GPUs (fractional GPUs), around a fake solve that makes engine steps for 2 s a
    task, as a model's forward passes do; one actor killed (SIGKILL), one stopped (SIGSTOP) while they work."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    fake_workers(monkeypatch, tmp_path / "marks", dict.fromkeys(SIX, "work"))
    limits = PoolSettings(stall_seconds=5.0, poll_seconds=0.1)  # a loaded machine may leave a healthy actor a few
    # seconds between steps: 5 s keeps it from being taken for hung
    out, marks, events = tmp_path / "out", tmp_path / "marks", {}

    def strike() -> None:
        killed, lost = busy(marks, out)
        os.kill(killed, signal.SIGKILL)
        while True:  # stopped on another task (were it the same, the task would rightly get a fallback)
            stopped, task = busy(marks, out, not_pid=killed, not_task=lost)
            os.kill(stopped, signal.SIGSTOP)
            if not recorded(out, task):
                break
            os.kill(stopped, signal.SIGCONT)  # it had just finished: stopped now it would be idle, never hung
            time.sleep(0.05)
        events.update(killed=killed, stopped=stopped, stopped_at=time.time())

    striker = threading.Thread(target=strike, daemon=True)
    striker.start()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run = solve_in_pool(six, model_folder, SETTINGS, out, workers_per_gpu=2, pool=limits)
    striker.join(timeout=1)
    assert "started 4 worker(s) on Ray (2 on GPU 0, 2 on GPU 1)" in capsys.readouterr().out
    warned = [record for record in caplog.records if record.name == LOGGER]
    assert any(f"(pid {events['killed']}) died" in record.getMessage() for record in warned), \
        [record.getMessage() for record in warned]
    stalled = [record for record in warned if f"(pid {events['stopped']}) hung: no engine step on task" in
               record.getMessage()]
    assert len(stalled) == 1 and stalled[0].created - events["stopped_at"] < limits.stall_seconds + 5
    assert read_json(out / "run.json")["workers"] == 4
    # every task solved by the model (the two lost ones went back to the queue), the submission complete
    assert list(run.records) == SIX and all(r.got_model_work for r in run.records.values()), \
        [(r.task_id, r.skipped, r.error) for r in run.records.values() if not r.got_model_work]
    assert submission_problems(read_json(out / "submission.json"), six) == []
    assert not is_running(events["killed"]) and not is_running(events["stopped"])


@pytest.mark.processes
@pytest.mark.slow
def test_with_a_deadline_the_first_task_measures_and_its_peak_memory_sets_the_actors_per_gpu(
        model_folder, six, tmp_path, monkeypatch, capsys):
    """One actor on each of two fake GPUs; the first task to finish measures the speeds and 10 GiB at its peak of a
    24 GiB GPU (two fit), then one more actor joins each GPU (16 cores said: the cores per GPU would allow more).
    No task is solved twice: there is no separate measuring solve."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(expectations.os, "cpu_count", lambda: 16)
    fake_workers(monkeypatch, tmp_path / "marks", dict.fromkeys(SIX, "work"), peak_gib=10.0)
    run = solve_in_pool(six, model_folder, SETTINGS, tmp_path / "out", deadline=time.time() + 3600,
                        pool=PoolSettings(poll_seconds=0.05))
    printed = capsys.readouterr().out
    assert "started 2 worker(s) on Ray (1 on GPU 0, 1 on GPU 1)" in printed
    assert "; peak 10.00 GiB of 24.0 GiB: 2 worker(s) per GPU" in printed and "measured on task " in printed
    assert printed.index("measured on task ") < printed.index("started 2 more")
    assert "started 2 more: 4 worker(s) on Ray (2 on GPU 0, 2 on GPU 1)" in printed
    assert len(loads(tmp_path / "marks")) == 4 and list(run.records) == SIX
    assert all(len(tries(tmp_path / "marks", task_id)) == 1 for task_id in SIX)  # each solved once
    assert all(record.got_model_work for record in run.records.values())


# -- two nodes on this machine ----------------------------------------------------------------------------------

def start_node(*arguments: str) -> int:
    """``ray start ARGUMENTS`` in a session of its own; the session's id (every process of the node is in it)."""
    ray = Path(sys.executable).with_name("ray")
    started = subprocess.Popen([str(ray), "start", "--num-cpus=1", "--object-store-memory=100000000",
                                "--disable-usage-stats", *arguments], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    printed, _ = started.communicate(timeout=120)
    assert started.returncode == 0, printed[-2000:]
    return started.pid


def end_session(session: int) -> None:
    """Stop every process of the session ``start_node`` made (those the test started), SIGTERM then SIGKILL."""
    def members() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and int(entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()[3]) \
                        == session:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                pass
        return found
    for number in (signal.SIGTERM, signal.SIGKILL):
        for pid in members():
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass
        ends = time.monotonic() + 10
        while members() and time.monotonic() < ends:
            time.sleep(0.2)


def raylet_of(port: int) -> int:
    """The pid of the raylet whose node manager listens on ``port``."""
    for pid in processes_naming(f"--node_manager_port={port}"):
        if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"raylet"):
            return pid
    raise AssertionError(f"no raylet on port {port}")


def child_of(pid: int, parent: int) -> bool:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == parent
    except (OSError, ValueError):
        return False


@pytest.mark.processes
@pytest.mark.slow
def test_two_nodes_share_a_run_and_the_second_stopped_mid_run_loses_no_task(model_folder, six, tmp_path, monkeypatch):
    """A head and a second node (``ray start``, one CPU each, this machine's own address), an actor on each; the
    second node's raylet is stopped while its actor works. Its task goes to the head's actor, the model reached the
    second node's actor through Ray (no shared file system assumed), and the submission is the one-process run's."""
    port, second_port = free_port(), free_port()
    folder = tempfile.mkdtemp(prefix="arc-kit-two-")  # short: Ray's sockets live below it
    sessions = []
    marks, out = tmp_path / "marks", tmp_path / "out"
    fake_workers(monkeypatch, marks, dict.fromkeys(SIX[:4], "work"), wait_for_loads=2)  # an actor on each node
    try:
        sessions.append(start_node("--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                                   "--include-dashboard=false", f"--temp-dir={folder}"))
        sessions.append(start_node(f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1",
                                   f"--node-manager-port={second_port}"))
        second = raylet_of(second_port)
        events = {}

        def stop_the_second_node():
            ends = time.monotonic() + 120
            while time.monotonic() < ends:
                working = [pid for path in marks.glob("*.*.*") if not path.name.startswith("load.")
                           for pid in [int(path.name.split(".")[2])] if child_of(pid, second)]
                if working:
                    events["pid"] = working[0]
                    os.kill(second, signal.SIGTERM)  # the node goes, its actor with it
                    return
                time.sleep(0.02)
        threading.Thread(target=stop_the_second_node, daemon=True).start()
        run = solve_in_pool(six.select(SIX[:4]), model_folder, SETTINGS, out, workers=2, address=f"127.0.0.1:{port}",
                            progress=False, pool=PoolSettings(poll_seconds=0.05))
    finally:
        for session in reversed(sessions):
            end_session(session)
        shutil.rmtree(folder, ignore_errors=True)
    assert "pid" in events, "no task ever ran on the second node"
    lost = [task_id for task_id in SIX[:4] if events["pid"] in tries(marks, task_id)]
    assert lost and all(tries(marks, task_id) for task_id in SIX[:4])  # the second node's task, tried there first
    assert list(run.records) == SIX[:4] and all(record.got_model_work for record in run.records.values())
    loaded = {load["pid"]: load for load in loads(marks)}
    assert len({load["node"] for load in loaded.values()}) == 2  # an actor on each node
    there = loaded[events["pid"]]  # the second node's actor got the model through Ray, byte for byte
    assert "arc-kit-models" in there["model"] and there["model_digest"] == folder_digest(model_folder)
    shutil.rmtree(there["model"], ignore_errors=True)
    Path(there["model"] + ".lock").unlink(missing_ok=True)
    alone = tmp_path / "alone"
    (tmp_path / "alone-marks").mkdir()
    solve(six.select(SIX[:4]), FakeSolver({}, str(tmp_path / "alone-marks"), str(model_folder), SETTINGS), alone,
          progress=False)
    assert (out / "submission.json").read_bytes() == (alone / "submission.json").read_bytes()
