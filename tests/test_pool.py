"""A run's tasks on a pool of Ray actors: the queue the driver owns, the watchdog, a pool's run equal to one process's.

Every test here shares one Ray of this machine (``shared_ray``, started once through the library's own
``ray_session``; a pool finds it started and uses it). The first test's actors load the bigram micro model
of conftest.py (it writes small grids, so every task has real candidates and comparing two runs means
something) and solve four small ARC-AGI-1 evaluation tasks. The watchdog's tests run real actors around
``pool_helpers``' fake solve, which dies, hangs or answers [[7]], so that what the driver does about a dead or
hung actor takes seconds. Ray started by a run itself, its GPUs, its stop and two nodes: test_ray_cluster.py.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import assert_same_finds
from pool_helpers import TASK_IDS, fake_workers, is_running, read_json, solve_in_pool, tries

from arc_kit.data.datasets import load_tasks
from arc_kit.data.submission import submission_problems
from arc_kit.method.solver import Solver
from arc_kit.model.loading import load_model
from arc_kit.run import actors, expectations, jobs, pool, workers
from arc_kit.run.planner import Speeds
from arc_kit.run.ray_session import ray_session
from arc_kit.run.record_json import read_records, to_json
from arc_kit.run.jobs import solve
from arc_kit.settings import TEST_TIME_TRAINING, PoolSettings, SamplerSettings, SolveSettings

SETTINGS = SolveSettings(
    sampler=SamplerSettings("dfs", threshold=0.05, max_forward_calls=200),
    inference_augmentations=2, scoring_augmentations=2,
    ttt=TEST_TIME_TRAINING.replace(steps=2), max_len=2048)
QUICK = PoolSettings(poll_seconds=0.05)  # the driver looks every 50 ms
LOGGER = "arc_kit.run.pool"


@pytest.fixture(scope="module")
def shared_ray(tmp_path_factory):
    """One Ray for this module's pools (four CPUs: the fake actors mostly sleep)."""
    with ray_session(tmp_path_factory.mktemp("shared_ray"), cpus=4) as session:
        yield session


@pytest.fixture(scope="module")
def tasks():
    return load_tasks("arc-agi-1/evaluation").select(TASK_IDS)


def warnings_of(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == LOGGER]


# -- a run over actors that load a real model ---------------------------------------------------------------

@pytest.fixture(scope="module")
def single_process(model_folder, tasks, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single")
    solve(tasks, Solver.from_loaded(load_model(model_folder, device="cpu"), SETTINGS), out, progress=False)
    return out


@pytest.mark.processes
@pytest.mark.slow
def test_two_actors_give_the_same_submission_and_records_as_one_process(shared_ray, model_folder, tasks,
                                                                        tmp_path, single_process):
    run = solve_in_pool(tasks, model_folder, SETTINGS, tmp_path / "two", workers=2, progress=False, pool=QUICK)
    submission = read_json(tmp_path / "two" / "submission.json")
    assert submission_problems(submission, tasks) == []
    assert (tmp_path / "two" / "submission.json").read_bytes() == (single_process / "submission.json").read_bytes()
    # not just the attempts: every candidate, NLL and augmentation is the same, whoever computed it
    alone = read_records(single_process / "records.jsonl")
    assert list(run.records) == TASK_IDS
    for task_id in TASK_IDS:
        assert run.records[task_id].error is None
        assert_same_finds(run.records[task_id], alone[task_id])
    assert any(test.candidates for record in alone.values() for test in record.tests)  # a real comparison
    assert run.score is not None and run.score.correct == read_json(single_process / "score.json")["correct"]
    lines = (tmp_path / "two" / "records.jsonl").read_text().splitlines()  # the driver's file, in task order
    assert [json.loads(line)["task_id"] for line in lines] == TASK_IDS and not list(tmp_path.glob("two/worker-*"))
    assert read_json(tmp_path / "two" / "run.json")["workers"] == 2
    assert sorted(read_json(tmp_path / "two" / "tasks.json")) == sorted(TASK_IDS)  # what estimate reads of a run
    speeds = read_json(tmp_path / "two" / "speeds.json")  # what the planner measured, for the tasks left and a rerun
    assert speeds["measured_tasks"] == len(TASK_IDS) and speeds["measured_parts"]["generation"] == len(TASK_IDS)


# -- resuming -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_run(shared_ray, model_folder, tasks, tmp_path_factory) -> Path:
    """A run folder of two actors around the fake solve (seconds, not minutes)."""
    out = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as patch:
        fake_workers(patch, out / "marks", {})
        solve_in_pool(tasks, model_folder, SETTINGS, out / "run", workers=2, progress=False, pool=QUICK)
    return out / "run"


def no_ray(patch) -> None:
    """Fail the test if a pool starts Ray."""
    def refused(*arguments, **options):
        raise AssertionError("Ray was started")
    patch.setattr(pool, "ray_session", refused)


@pytest.mark.processes
def test_a_rerun_recomputes_only_the_task_whose_record_is_missing(shared_ray, model_folder, tasks, tmp_path,
                                                                  finished_run, monkeypatch):
    """On the fake solve's run: that an actor recomputes a task as the first run did is the first test's."""
    out = tmp_path / "resumed"
    shutil.copytree(finished_run, out)
    lines = (out / "records.jsonl").read_text().splitlines()
    lost = json.loads(lines[1])["task_id"]
    (out / "records.jsonl").write_text("".join(line + "\n" for line in lines if json.loads(line)["task_id"] != lost))
    fake_workers(monkeypatch, tmp_path / "marks", {})
    resumed = solve_in_pool(tasks, model_folder, SETTINGS, out, workers=2, progress=False, pool=QUICK)
    assert [task_id for task_id in TASK_IDS if tries(tmp_path / "marks", task_id)] == [lost]  # it alone was solved
    assert (out / "submission.json").read_bytes() == (finished_run / "submission.json").read_bytes()
    assert [json.loads(line)["task_id"] for line in (out / "records.jsonl").read_text().splitlines()] == TASK_IDS
    first = read_records(finished_run / "records.jsonl")
    for task_id in TASK_IDS:
        assert to_json(resumed.records[task_id])["test"] == to_json(first[task_id])["test"]


@pytest.mark.processes
def test_a_rerun_with_nothing_left_finds_every_record_without_ray(model_folder, tasks, tmp_path, finished_run,
                                                                  monkeypatch):
    out = tmp_path / "again"
    shutil.copytree(finished_run, out)
    no_ray(monkeypatch)
    again = solve_in_pool(tasks, model_folder, SETTINGS, out, workers=2, progress=False, pool=QUICK)
    assert list(again.records) == TASK_IDS
    assert (out / "submission.json").read_bytes() == (finished_run / "submission.json").read_bytes()


@pytest.mark.processes
def test_a_rerun_with_other_settings_is_refused_before_ray_starts(model_folder, tasks, tmp_path, finished_run,
                                                                   monkeypatch):
    out = tmp_path / "other"
    shutil.copytree(finished_run, out)
    no_ray(monkeypatch)
    with pytest.raises(ValueError, match="other settings"):
        solve_in_pool(tasks, model_folder, SETTINGS.replace(aggregation="min"), out, workers=2, progress=False)
    assert (out / "submission.json").read_bytes() == (finished_run / "submission.json").read_bytes()
    run_json = read_json(out / "run.json")
    assert run_json["settings"] == json.loads(json.dumps(SETTINGS.to_json()))
    assert {"arc_kit_version", "git_commit"} <= set(run_json)


# -- the queue and the watchdog, around the fake solve --------------------------------------------------------

@pytest.mark.processes
@pytest.mark.slow
def test_a_dead_actors_task_goes_back_to_the_queue_once_and_the_others_take_the_rest(shared_ray, model_folder, tasks,
                                                                                      tmp_path, monkeypatch, caplog):
    once, always = TASK_IDS[0], TASK_IDS[1]
    fake_workers(monkeypatch, tmp_path / "marks", {once: "die-once", always: "die"})
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run = solve_in_pool(tasks, model_folder, SETTINGS, tmp_path / "out", workers=2, progress=False, pool=QUICK)
    assert len(tries(tmp_path / "marks", once)) == 2 and run.records[once].got_model_work  # the second try did it
    assert len(tries(tmp_path / "marks", always)) == 2  # back in the queue once, then no more
    assert run.records[always].skipped == "its worker died or hung 2 times"
    for task_id in TASK_IDS[2:]:
        assert run.records[task_id].got_model_work and len(tries(tmp_path / "marks", task_id)) == 1
    died = [message for message in warnings_of(caplog) if "died: The actor died unexpectedly" in message]
    assert len(died) == 3, warnings_of(caplog)
    submission = read_json(tmp_path / "out" / "submission.json")
    assert submission_problems(submission, tasks) == []
    assert submission[always][0]["attempt_1"] == tasks[always].test[0].input.tolist()  # the fallback
    assert all(submission[task_id][0]["attempt_1"] == [[7]] for task_id in TASK_IDS if task_id != always)
    speeds = read_json(tmp_path / "out" / "speeds.json")  # every actor's measured speeds reach the planner
    assert speeds["measured_tasks"] == 3 and speeds["generation"] != Speeds().generation


@pytest.mark.processes
@pytest.mark.slow
def test_a_task_that_hangs_past_its_deadline_is_stopped_and_given_fallbacks(shared_ray, model_folder, tasks, tmp_path,
                                                                            monkeypatch, caplog):
    hanging = TASK_IDS[2]
    fake_workers(monkeypatch, tmp_path / "marks", {hanging: "hang"})
    started = time.time()
    deadline = started + 6  # each task's deadline its share of the time left; hung past it by as long again
    with caplog.at_level(logging.INFO, logger=LOGGER):
        run = solve_in_pool(tasks, model_folder, SETTINGS, tmp_path / "out", workers=2, progress=False,
                            deadline=deadline, pool=QUICK)
    assert any(message.startswith("measured on task ") for message in warnings_of(caplog))  # the first task's
    assert time.time() - started < 2 * 6 + 5  # the last try hung past the run's deadline by as long again at most
    hung = sum(f"hung: task {hanging} is" in message for message in warnings_of(caplog))  # retried while time was left
    assert run.records[hanging].skipped == ("its worker died or hung 2 times" if hung == 2 else "out of time")
    assert hung in (1, 2)  # a retry once at most (the retries themselves: the dying actors' test)
    for task_id in TASK_IDS:
        if task_id != hanging:
            task_deadline, search_share = run.records[task_id].extra["budget"]
            assert started < task_deadline <= deadline + 1 and 0 < search_share < 1  # the planner's caps, as sent
    assert submission_problems(read_json(tmp_path / "out" / "submission.json"), tasks) == []
    time.sleep(2)  # Ray kills a killed actor's process within a few seconds
    assert not any(is_running(pid) for pid in tries(tmp_path / "marks", hanging))


@pytest.mark.processes
@pytest.mark.slow
def test_at_the_stop_time_a_hung_actor_is_stopped_and_the_submission_is_complete(shared_ray, model_folder, tasks,
                                                                                  tmp_path, monkeypatch):
    fake_workers(monkeypatch, tmp_path / "marks", dict.fromkeys(TASK_IDS, "hang"))  # whatever it gets, it hangs
    started = time.time()
    stop_at = started + 6.0
    run = solve_in_pool(tasks, model_folder, SETTINGS, tmp_path / "out", workers=1, progress=False,
                        deadline=started + 3600, stop_at=stop_at, pool=QUICK)  # the tasks' deadlines far off
    assert time.time() < stop_at + 5  # stopped, then written, promptly
    (first,) = [task_id for task_id in TASK_IDS if tries(tmp_path / "marks", task_id)]  # the one it hung on
    assert list(run.records) == TASK_IDS and all(record.skipped == "out of time" for record in run.records.values())
    submission = read_json(tmp_path / "out" / "submission.json")
    assert submission_problems(submission, tasks) == [] and list(submission) == TASK_IDS
    time.sleep(2)
    assert not is_running(tries(tmp_path / "marks", first)[0])


@pytest.mark.processes
@pytest.mark.slow
def test_an_actor_that_never_loads_is_replaced_and_with_none_left_the_tasks_get_fallbacks(
        shared_ray, model_folder, tasks, tmp_path, monkeypatch, caplog):
    fake_workers(monkeypatch, tmp_path / "marks", {}, silent=True)
    started = time.time()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run = solve_in_pool(tasks, model_folder, SETTINGS, tmp_path / "out", workers=1, progress=False,
                            pool=PoolSettings(load_seconds=1.5, restarts=1, poll_seconds=0.05))
    assert time.time() - started < 30
    warned = warnings_of(caplog)
    assert sum("hung: no model after" in message for message in warned) == 2  # the first, and its one restart
    assert any("no worker left: 4 task(s) get fallback answers" in message for message in warned)
    assert list(run.records) == TASK_IDS and all(r.skipped == "no worker left" for r in run.records.values())
    assert submission_problems(read_json(tmp_path / "out" / "submission.json"), tasks) == []


@pytest.mark.processes
def test_a_model_that_does_not_load_is_said_in_one_line_and_the_tasks_get_fallbacks(shared_ray, model_folder, tasks,
                                                                                   tmp_path, monkeypatch, caplog):
    fake_workers(monkeypatch, tmp_path / "marks", {}, broken=True)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        run = solve_in_pool(tasks, model_folder, SETTINGS, tmp_path / "out", workers=1, progress=False,
                            pool=PoolSettings(restarts=0, poll_seconds=0.05))
    assert f"failed: FileNotFoundError: {model_folder}: no weights (a fake)" in warnings_of(caplog)[0]
    assert all(record.skipped == "no worker left" for record in run.records.values())


# -- what needs no Ray ------------------------------------------------------------------------------------------

def test_the_driver_prepares_a_deltas_base_once_and_the_actors_get_its_folder(tmp_path, monkeypatch, capsys):
    delta = tmp_path / "delta"
    delta.mkdir()
    (delta / "delta.json").write_text(json.dumps({"base": "smollm2-135m", "shards": []}))
    (delta / "adapter_config.json").write_text("{}")
    built = tmp_path / "cache" / "base"
    built.mkdir(parents=True)
    (built / "config.json").write_text("{}")
    calls = []
    monkeypatch.setattr(actors, "is_built", lambda folder, name: False)
    monkeypatch.setattr(actors, "build_base", lambda name, **options: calls.append((name, options)) or built)
    options = actors.prepare_model(delta, {"device": "cpu"})
    assert options == {"device": "cpu", "base_model": str(built)} and [name for name, _ in calls] == ["smollm2-135m"]
    assert f"base smollm2-135m: built once by the driver in 0 s, {built}; every worker loads it from there" in \
        capsys.readouterr().out
    assert actors.prepare_model(tmp_path, {"device": "cpu"}) == {"device": "cpu"} and len(calls) == 1  # no delta
    # what an actor on another node receives: the delta's folder and its base's
    assert actors.model_folders(delta, options) == {"model": str(delta.resolve()), "base_model": str(built.resolve())}


def test_an_actor_on_another_node_receives_the_models_files_byte_for_byte_once_through_its_server(tmp_path,
                                                                                                    monkeypatch):
    """``receive_model`` in this process: the server's calls answered at once (``ray.get`` of a value is the value),
    the node's temporary folder a folder of the test's."""
    import ray

    model = tmp_path / "model"
    for name, data in {"config.json": b"{}", "model.safetensors": bytes(range(256)) * 40, "empty.txt": b"",
                       "tokenizer/vocab.json": b'{"a": 1}', ".cache/lock": b"hidden", "checkpoints/optimizer.pt": b"x"
                       }.items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(data)
    server, pieces = actors.ModelServer({"model": str(model)}), []
    answered = SimpleNamespace(listing=SimpleNamespace(remote=server.listing), piece=SimpleNamespace(
        remote=lambda *arguments: pieces.append(arguments) or server.piece(*arguments)))
    monkeypatch.setattr(ray, "get", lambda value: value)
    monkeypatch.setattr(actors.tempfile, "gettempdir", lambda: str(tmp_path / "node"))
    source = actors.ModelSource({"model": str(model)}, node="head", server=answered, chunk_bytes=4096)
    assert source.here("head") == {"model": str(model)}  # the driver's node loads from the path itself
    shared = actors.ModelSource({"model": str(model)}, node="head")  # --shared-model: no server, the path on every node
    assert shared.here("other") == {"model": str(model)}
    received = Path(source.here("other")["model"])
    assert received.parent == tmp_path / "node" / actors.MODEL_CACHE
    sent = actors.model_files(model)
    assert sorted(sent) == ["config.json", "empty.txt", "model.safetensors", "tokenizer/vocab.json"]
    assert {name: path.read_bytes() for name, path in actors.model_files(received).items()} == \
        {name: path.read_bytes() for name, path in sent.items()}
    assert len(pieces) == 3 + 2  # 10,240 bytes in 4,096-byte pieces, one for each small file, none for the empty
    assert source.here("other")["model"] == str(received) and len(pieces) == 5  # the node's second actor: cached


def test_workers_per_gpu_follow_the_measured_peak_memory_within_the_cores_and_the_cap():
    gib = 2**30
    assert expectations.workers_per_gpu_for(4.0 * gib, 24 * gib, gpus=4, cpus=48) == 4  # an L4: 21.6 GiB / 4.5 GiB
    assert expectations.workers_per_gpu_for(1.0 * gib, 80 * gib, gpus=1, cpus=16) == 8  # an H100: the cap
    assert expectations.workers_per_gpu_for(1.0 * gib, 80 * gib, gpus=4, cpus=8) == 2  # two cores per GPU
    assert expectations.workers_per_gpu_for(30.0 * gib, 24 * gib, gpus=1, cpus=8) == 1  # too big: still one


def test_slots_go_round_the_gpus_or_fill_the_first_ones_then_the_cpus():
    assert [slot.gpu for slot in workers.slot_layout(5, 2, spread=True)] == [0, 1, 0, 1, 0]
    assert [slot.gpu for slot in workers.slot_layout(3, 2, spread=False)] == [0, 1, None]
    assert [slot.gpu for slot in workers.slot_layout(2, 0, spread=True)] == [None, None]
    assert [slot.index for slot in workers.slot_layout(2, 2, spread=True, first=4)] == [4, 5]


def test_one_worker_solves_in_this_process_and_several_or_an_address_make_a_pool(monkeypatch):
    monkeypatch.setattr(workers, "visible_gpus", lambda: [])
    assert not workers.uses_ray(None, None, None, deadline=1e12) and not workers.uses_ray(1, None, None, None)
    assert workers.uses_ray(2, None, None, None) and workers.uses_ray(None, None, "10.0.0.1:6379", None)
    monkeypatch.setattr(workers, "visible_gpus", lambda: ["0"])
    assert not workers.uses_ray(None, None, None, None)  # one GPU, no deadline: this process
    assert workers.uses_ray(None, None, None, deadline=1e12)  # a deadline: the first task's memory may find room
    assert workers.uses_ray(None, 2, None, None) and not workers.uses_ray(1, 2, None, None)


def test_one_worker_solves_in_this_process_without_ray(fallback_model, tasks, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed: nothing may import it
    monkeypatch.setattr(workers, "visible_gpus", lambda: [])
    quick = SolveSettings(sampler=SamplerSettings("greedy"), inference_augmentations=1, scoring_augmentations=1,
                          ttt=TEST_TIME_TRAINING.replace(steps=1), max_len=2048)
    run = jobs.solve_job(tasks.select(TASK_IDS[:2]), fallback_model, quick, tmp_path / "out", progress=False)
    assert list(run.records) == TASK_IDS[:2] and not (tmp_path / "out" / "ray-logs").exists()
