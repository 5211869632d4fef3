"""Bad input, generated: hundreds of malformed challenges, submission and solutions files give exit status 1,
no traceback and a message naming the bad task (the file, where the whole file cannot be read); under
``--lenient`` the bad task is named and skipped alone; and every way of running (one process, worker
processes, the Kaggle job) answers every task id of its input.

The files are made from a seed (no hypothesis database, the same files every run): a valid set with
one task broken in one of many ways, in its content (a ragged row, a colour 10, a grid 31 wide...) or
in its JSON (nesting past what json reads, an integer of thousands of digits); or a whole file broken
(bad syntax, cut short). ``arc-kit validate`` and a strict ``arc-kit solve`` (which stops at loading,
before any model) run in-process on a share of them, and ``arc-kit solve --lenient`` on a smaller
share with the solver's work replaced by fallback records: what those runs check is loading,
skipping and the submission, not the model. Those tests stay under 20 CPU seconds together.

Then what a new user met, one test each: a task id that is a path (``show``'s picture), ids JSON
allows but UTF-8 does not (a lone surrogate) or that forge a log line
(a newline, terminal escapes), a FIFO given as any file, a record line of the wrong kinds, a key
given twice, a solutions file holding null, the ``--lenient`` warning's source line, two runs on one
folder, and records left without ``run.json``. The fuzz over every command is ``test_fuzz_commands``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

import pytest
from conftest import PLAIN, run

from arc_kit.cli import main
from arc_kit.data.datasets import load_challenges
from arc_kit.data.submission import ATTEMPTS, submission_problems, validate_file
from arc_kit.data.tasks import InvalidDataError
from arc_kit.kaggle import competition as kaggle
from arc_kit.run.locking import HOLDER_FILE
from arc_kit.method.records import TaskRecord, fallback_record
from arc_kit.method.solver import Solver
from arc_kit.outputs import claim_folder
from arc_kit.run import jobs
from arc_kit.run.record_json import from_json, read_records, to_json
from arc_kit.run.runs import RUN_KIND, SolveRun
from arc_kit.settings import TEST_TIME_TRAINING, SamplerSettings, SolveSettings
from pool_helpers import fake_workers, solve_in_pool

FILES = 300
SEED = 20250101
BUDGET_SECONDS = 20  # CPU seconds for the tests below, from the first one's start (a busy machine's clock says little)

# Placeholders put in a grid, replaced in the JSON text by what json cannot read: nesting deeper than its
# recursion limit (Python 3.12 reads 1,000 levels, 3.13 3,000) and an integer longer than Python converts.
DEEP, HUGE = "@deep@", "@huge@"


def fill_json_faults(text: str, rng: random.Random) -> str:
    def deep(_):
        depth = rng.randint(20_000, 40_000)
        return "[" * depth + "]" * depth

    def huge(_):
        return str(rng.randint(1, 9)) * rng.randint(4301, 6000)
    return re.sub(f'"{HUGE}"', huge, re.sub(f'"{DEEP}"', deep, text))


def good_grid(rng: random.Random, low: int = 1, high: int = 4) -> list:
    height, width = rng.randint(low, high), rng.randint(low, high)
    return [[rng.randint(0, 9) for _ in range(width)] for _ in range(height)]


def good_task(rng: random.Random) -> dict:
    return {"train": [{"input": good_grid(rng), "output": good_grid(rng)} for _ in range(rng.randint(1, 3))],
            "test": [{"input": good_grid(rng)} for _ in range(rng.randint(1, 2))]}


def bad_cell(rng: random.Random):
    return rng.choice([10, -1, 2.5, "3", None, True, [1], {"a": 1}, 10 ** 40, DEEP, HUGE])


def break_grid(grid: list, rng: random.Random):
    """A grid broken one way (in place, or a replacement returned), or one of the JSON faults put in it."""
    way = rng.randrange(9)
    if way == 0:
        grid[rng.randrange(len(grid))][0] = bad_cell(rng)
    elif way == 1:
        grid.append(grid[0] + [1])  # a ragged row
    elif way == 2:
        return rng.choice([[], [[]], [1, 2], "grid", None, {}, DEEP, HUGE])
    elif way == 3:
        return [[0] * rng.randint(31, 40)]  # too wide for the competition
    elif way == 4:
        return [[0]] * rng.randint(31, 40)  # too tall
    elif way == 5:
        return [[rng.randint(0, 9)] * 31 for _ in range(31)]
    elif way == 6:
        nested = 0
        for _ in range(rng.randint(3, 40)):
            nested = [nested]
        grid[0][0] = nested
    elif way == 7:
        grid[0] = rng.choice([None, 5, "row", {}, DEEP])
    else:
        grid[rng.randrange(len(grid))][-1] = rng.choice([DEEP, HUGE])  # what json itself cannot read
    return grid


def break_task(task: dict, rng: random.Random):
    """The task broken one way, at a random place (or replaced by something that is no task)."""
    part = rng.choice(["train", "test"])
    pairs = task[part]
    pair = rng.choice(pairs)
    key = "input" if part == "test" else rng.choice(["input", "output"])
    way = rng.randrange(8)
    if way == 0:
        return rng.choice([None, 3, "task", [], True, DEEP, HUGE])
    if way == 1:
        del task[part]
    elif way == 2:
        task[part] = rng.choice([[], {}, "pairs", None, DEEP])
    elif way == 3:
        pairs[pairs.index(pair)] = rng.choice([None, 1, [], "pair", HUGE])
    elif way == 4:
        del pair[key]
    else:
        pair[key] = break_grid(pair[key], rng)
    return task


def good_set(rng: random.Random) -> dict:
    return {f"{rng.getrandbits(32):08x}": good_task(rng) for _ in range(rng.randint(1, 4))}


def malformed_file(rng: random.Random) -> tuple[str, str, list[str]]:
    """(the text of a challenges file with one bad task, the bad task's id, every task id in file order)."""
    tasks = good_set(rng)
    bad_id = rng.choice(list(tasks))
    tasks[bad_id] = break_task(tasks[bad_id], rng)
    text = fill_json_faults(json.dumps(tasks), rng)
    if rng.random() < 0.1:  # the same task id twice, the bad copy first (JSON keeps the last)
        good_copy = json.dumps({bad_id: good_task(rng)})[1:-1]
        text = text[:-1] + ", " + good_copy + "}"
    return text, bad_id, list(tasks)


def broken_file(text: str, rng: random.Random) -> str:
    """``text`` (valid JSON) made unreadable as a whole: cut short, or its syntax broken outside any string."""
    if rng.random() < 0.5:
        return text[:rng.randrange(len(text))]
    places = [match.start() for match in re.finditer(r"[\[\]{}:,]", text)]
    place = rng.choice(places)
    way = rng.randrange(3)
    if way == 0:  # a structural character swapped for another
        return text[:place] + rng.choice([c for c in "[]{}:," if c != text[place]]) + text[place + 1:]
    if way == 1:  # a stray character after one
        return text[:place + 1] + rng.choice(["x", "'", ";", "]]", ",,"]) + text[place + 1:]
    return text[:place] + text[place + 1:]  # one left out


@pytest.fixture(scope="module")
def started():
    return time.process_time()



@pytest.mark.processes
@pytest.mark.slow
def test_malformed_files_give_exit_status_1_no_traceback_and_name_the_bad_task(capsys, tmp_path, started,
                                                                               micro_model, no_model_work):
    """Every file through the loaders; every eighth also through ``arc-kit validate`` and a strict ``arc-kit
    solve``, every twentieth through ``arc-kit solve --lenient``, which answers every id and names the bad task."""
    rng = random.Random(SEED)
    lenient_runs = 0
    for number in range(FILES):
        text, bad_id, ids = malformed_file(rng)
        path = tmp_path / f"challenges-{number}.json"
        path.write_text(text)
        kind, problems = validate_file(path, "challenges")
        assert any(problem.startswith(f"task {bad_id}:") for problem in problems), (text[:300], problems)
        with pytest.raises(InvalidDataError) as raised:
            load_challenges(path)
        assert str(path) in str(raised.value) and f"task {bad_id}:" in str(raised.value), text[:300]
        assert "set_int_max_str_digits" not in str(raised.value)
        if number % 8 == 0:
            status, out, err = run(capsys, "validate", path, "--kind", "challenges")
            assert status == 1 and "Traceback" not in out + err, (text[:300], out, err)
            assert f"task {bad_id}:" in out, (text[:300], out)
            status, out, err = run(capsys, "solve", "--dataset", path, "--out", tmp_path / "never", "--model",
                                   tmp_path / "no-model-needed")
            assert status == 1 and "Traceback" not in err, (text[:300], err)
            assert f"task {bad_id}:" in err and str(path) in err, (text[:300], err)
        if number % 20 == 3:
            lenient_runs += 1
            out_folder = tmp_path / f"lenient-{number}"
            with pytest.warns(UserWarning) as caught:
                status, out, err = run(capsys, "solve", "--dataset", path, "--lenient", "--out", out_folder,
                                       "--model", micro_model)
            assert status == 0 and "Traceback" not in err, (text[:300], err)
            warned = [str(warning.message) for warning in caught if str(path) in str(warning.message)]
            assert any(f"skipped 1 bad task(s) of {len(ids)}: task {bad_id}:" in message for message in warned), warned
            assert list(json.loads((out_folder / "submission.json").read_text())) == ids  # every id, in file order
    assert lenient_runs == 15 and not (tmp_path / "never").exists()  # refused at loading, before any run folder
    assert time.process_time() - started < BUDGET_SECONDS


@pytest.mark.slow
def test_files_json_cannot_read_as_a_whole_name_the_file_lenient_or_not(capsys, tmp_path, started):
    rng = random.Random(SEED + 1)
    for number in range(100):
        valid = json.dumps(good_set(rng))
        text = broken_file(fill_json_faults(valid, rng) if number % 4 else valid, rng)
        path = tmp_path / f"broken-{number}.json"
        path.write_text(text)
        kind, problems = validate_file(path, "challenges")
        assert len(problems) == 1 and problems[0].startswith(("invalid JSON at line", "the whole file is unreadable")), (
            text[:300], problems)
        for strict in (True, False):
            with pytest.raises(InvalidDataError) as raised:
                load_challenges(path, strict=strict)
            assert raised.value.source == str(path) and raised.value.problems == problems
        if number % 5 == 0:
            status, _, err = run(capsys, "solve", "--dataset", path, "--lenient", "--out", tmp_path / "never")
            assert status == 1 and "Traceback" not in err and str(path) in err and problems[0] in err, err
    assert not (tmp_path / "never").exists()
    assert time.process_time() - started < BUDGET_SECONDS


def entries_for(task: dict, rng: random.Random) -> list[dict]:
    return [{name: good_grid(rng) for name in ATTEMPTS} for _ in task["test"]]


def break_submission(submission: dict, challenges: dict, rng: random.Random) -> tuple[dict, str]:
    """The submission broken one way for one task: (the submission, that task's id)."""
    task_id = rng.choice(list(submission))
    entries = submission[task_id]
    entry = rng.choice(entries)
    way = rng.randrange(9)
    if way == 0:
        del submission[task_id]
    elif way == 1:
        task_id = "0" * 8  # no such task
        submission[task_id] = entries_for(challenges[rng.choice(list(challenges))], rng)
    elif way == 2:
        submission[task_id] = rng.choice([{}, {"attempt_1": [[1]], "attempt_2": [[1]]}, None, "answers", DEEP, HUGE])
    elif way == 3:
        entry[rng.choice(["attempt_3", "answer"])] = entry.pop(rng.choice(ATTEMPTS))
    elif way == 4:
        entries[entries.index(entry)] = rng.choice([None, [[1]], "entry", 7, HUGE])
    elif way == 5:
        entries.append(dict(entry)) if rng.random() < 0.5 else entries.clear()  # a test count off
    else:
        name = rng.choice(ATTEMPTS)
        entry[name] = break_grid(entry[name], rng)
    return submission, task_id


def break_solutions(solutions: dict, challenges: dict, rng: random.Random) -> tuple[dict, str]:
    """The solutions broken one way for one task: (the solutions, that task's id)."""
    task_id = rng.choice(list(solutions))
    grids = solutions[task_id]
    way = rng.randrange(7)
    if way == 0:
        del solutions[task_id]
    elif way == 1:
        task_id = "0" * 8
        solutions[task_id] = [good_grid(rng)]
    elif way == 2:
        solutions[task_id] = rng.choice([{}, [], None, "grids", DEEP, HUGE])
    elif way == 3:
        grids.append(good_grid(rng)) if rng.random() < 0.5 else grids.pop()  # a test count off (or none left)
    else:
        index = rng.randrange(len(grids))
        grids[index] = break_grid(grids[index], rng)
    return solutions, task_id


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["submission", "solutions"])
def test_malformed_submission_and_solutions_files_name_the_bad_task_in_validate_and_score(capsys, tmp_path, started,
                                                                                          kind):
    rng = random.Random(SEED + (2 if kind == "submission" else 3))
    for number in range(80):  # each through validate_file, every third through the commands
        challenges = good_set(rng)
        solutions = {task_id: [good_grid(rng) for _ in task["test"]] for task_id, task in challenges.items()}
        submission = {task_id: entries_for(task, rng) for task_id, task in challenges.items()}
        files = {name: tmp_path / f"{name}-{number}.json" for name in ("challenges", "solutions", "submission")}
        if kind == "submission":
            submission, bad_id = break_submission(submission, challenges, rng)
        else:
            solutions, bad_id = break_solutions(solutions, challenges, rng)
        broken = submission if kind == "submission" else solutions
        texts = {"challenges": json.dumps(challenges), "solutions": fill_json_faults(json.dumps(solutions), rng),
                 "submission": fill_json_faults(json.dumps(submission), rng)}
        whole_file = number % 8 == 7  # now and then the whole file is unreadable instead
        if whole_file:
            texts[kind] = broken_file(json.dumps(broken), rng)
        for name, path in files.items():
            path.write_text(texts[name])
        named = str(files[kind]) if whole_file else f"task {bad_id}:"
        counts = {task_id: len(task["test"]) for task_id, task in challenges.items()}
        found_kind, problems = validate_file(files[kind], kind, counts)
        if not whole_file:
            assert any(problem.startswith(named) for problem in problems), (kind, texts[kind][:300], problems)
        assert problems and "set_int_max_str_digits" not in " ".join(problems)
        if number % 3:
            continue
        status, out, err = run(capsys, "validate", files[kind], "--kind", kind, "--challenges", files["challenges"])
        assert status == 1 and "Traceback" not in out + err and named in out, (kind, texts[kind][:300], out, err)
        status, out, err = run(capsys, "score", "--submission", files["submission"], "--solutions", files["solutions"])
        assert status == 1 and "Traceback" not in out + err and named in err, (kind, texts[kind][:300], out, err)
    assert time.process_time() - started < BUDGET_SECONDS


# -- every run path answers every task id, good or bad --------------------------------------------------------

QUICK = SolveSettings(sampler=SamplerSettings("greedy"), inference_augmentations=1, scoring_augmentations=1,
                      ttt=TEST_TIME_TRAINING.replace(steps=1), max_len=2048)
GOOD = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[3, 4]]}]}
INPUT = {"good1": GOOD, "nulled": None, "good2": GOOD,
         "ragged": {"train": [{"input": [[1], [2, 3]], "output": [[1]]}], "test": [{"input": [[5]]}, {"input": 7}]}}


def check_every_id(path, tasks) -> None:
    submission = json.loads(path.read_text())
    assert list(submission) == list(INPUT)  # every id, in file order
    assert submission_problems(submission, tasks) == []
    assert len(submission["ragged"]) == 2 and submission["ragged"][0]["attempt_1"] == [[5]]  # a salvaged input


@pytest.mark.parametrize("path", ["single process", pytest.param("workers", marks=[pytest.mark.slow,
                                                                                  pytest.mark.processes]), "kaggle"])
def test_every_run_path_writes_a_submission_holding_every_task_id(path, capsys, tmp_path, fallback_model,
                                                                  monkeypatch):
    challenges = tmp_path / "input" / "competitions" / "arc-prize" / "arc-agi_test_challenges.json"
    challenges.parent.mkdir(parents=True)
    challenges.write_text(json.dumps(INPUT))
    with pytest.warns(UserWarning, match="skipped 2 bad task"):
        tasks = load_challenges(challenges, strict=False)
    if path == "single process":  # the solver's answers do not matter here, only which ids get answers
        monkeypatch.setattr(Solver, "solve_with_retry", lambda self, task, *_, **__: fallback_record(task.id, "fuzz"))
        options = ["--sampler", "greedy", "--ttt-steps", "1", "--augmentations", "1", "--scoring-augmentations", "1",
                   "--max-len", "2048"]
        with pytest.warns(UserWarning, match="skipped 2 bad task"):
            status, _, err = run(capsys, "solve", "--dataset", challenges, "--lenient", "--tasks", 3, "--out",
                                 tmp_path / "out", "--model", fallback_model, *options)
        assert status == 0, err
        submission = json.loads((tmp_path / "out" / "submission.json").read_text())
        assert list(submission) == ["good1", "good2", "nulled"]  # --tasks 3: the first three ids, one skipped
        status, _, err = run(capsys, "solve", "--dataset", challenges, "--lenient", "--out", tmp_path / "all",
                             "--model", fallback_model, *options)
        check_every_id(tmp_path / "all" / "submission.json", tasks)
    elif path == "workers":  # a Ray actor (the tasks reach it through Ray) around a fake solve
        fake_workers(monkeypatch, tmp_path / "marks", {})
        pooled = solve_in_pool(tasks, fallback_model, QUICK, tmp_path / "out", workers=1, progress=False)
        assert sorted(pooled.records) == ["good1", "good2"] and all(r.got_model_work for r in pooled.records.values())
        check_every_id(tmp_path / "out" / "submission.json", tasks)
    else:  # the Kaggle job's own writes; the workers it starts are the case above
        monkeypatch.setattr(jobs, "solve_job", lambda *arguments, **options: SolveRun(tmp_path, {}, tmp_path))
        result = kaggle.run_competition(fallback_model, QUICK, input_root=tmp_path / "input", working=tmp_path / "working",
                                        workers=1, force_full=True)
        assert result.error is None and result.tasks == 4  # the two malformed tasks count too
        check_every_id(tmp_path / "working" / "submission.json", tasks)


# -- what a new user met: names that are paths, ids JSON allows, files that never end, a folder two
# runs share. Each test failed on the kit before the fix.

HOSTILE_IDS = ["../../escaped", "no/such/folder", "..", ".", "", "A", "a", "con", "x" * 300, "\udc80", "a\udc80b",
               "line\n[ok] forged", "\x1b[31mred\x1b[0m", "tab\there", "back\\slash", "~tilde", "sp ace"]


def write_tasks(path, ids) -> str:
    path.write_text(json.dumps({task_id: PLAIN for task_id in ids}))  # ensure_ascii: lone surrogates as \udc80
    return str(path)


def files_below(folder) -> set:
    return {path for path in folder.rglob("*")}


@pytest.mark.slow
def test_show_writes_each_task_s_picture_in_the_working_folder_whatever_its_id(capsys, tmp_path, monkeypatch):
    """Failure 1: ``show`` wrote ``{task id}.png``; ``../../x`` wrote outside the working folder."""
    ids = HOSTILE_IDS + [str(tmp_path / "absolute")]
    dataset = write_tasks(tmp_path / "ids.json", ids)
    working = tmp_path / "deep" / "er" / "work"
    working.mkdir(parents=True)
    monkeypatch.chdir(working)
    before = files_below(tmp_path) - files_below(working)
    for task_id in ids:
        status, out, err = run(capsys, "show", task_id, "--dataset", dataset)
        assert status == 0 and "Traceback" not in err, (task_id, err)
    assert files_below(tmp_path) - files_below(working) == before  # nothing written elsewhere
    pictures = [path.name for path in working.iterdir()]
    assert len({name.lower() for name in pictures}) == len(ids)  # one each, distinct even where case is ignored
    assert all(name.endswith(".png") and not name.startswith(".") for name in pictures)
    assert (working / "a.png").exists() and (working / "con.png").exists() is False  # Windows reserves CON


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_ids_json_allows_are_solved_and_answered_and_shown_escaped(capsys, tmp_path, micro_model, no_model_work,
                                                                  strict):
    """Failure 3: a lone surrogate (valid JSON ``"\\udc80"``) killed ``solve``, ``--lenient`` too, before any
    submission (the task-id digest encoded ids as UTF-8). Failure 8: ids were printed raw."""
    dataset = write_tasks(tmp_path / "ids.json", HOSTILE_IDS)
    status, out, err = run(capsys, "solve", "--dataset", dataset, "--out", tmp_path / "out", "--model", micro_model,
                           *([] if strict else ["--lenient"]))
    assert status == 0 and "Traceback" not in err, err
    submission = json.loads((tmp_path / "out" / "submission.json").read_text())
    assert list(submission) == HOSTILE_IDS
    for text in (out, err):
        assert "\x1b" not in text and "\n[ok] forged" not in text and "\udc80" not in text
    assert "'line\\n[ok] forged'" in out and "'\\x1b[31mred\\x1b[0m'" in out  # the fallback lines name them
    status, out, err = run(capsys, "solve", "--dataset", dataset, "--out", tmp_path / "out", "--model", micro_model)
    assert status == 0 and f"({len(HOSTILE_IDS)} tasks, {len(HOSTILE_IDS)} with records" in out  # resumed: same digest


def run_watched(capsys, fifos, *argv) -> tuple[int, str, str]:
    """``run`` in a thread; a run still going after 60 s waits on a FIFO: it is freed (a writer opens and
    closes each FIFO) and the test fails. A guard against a hang, not a measure of speed."""
    result = {}
    thread = threading.Thread(target=lambda: result.update(status=main([str(arg) for arg in argv])), daemon=True)
    thread.start()
    thread.join(60)
    hung = thread.is_alive()
    for fifo in fifos if hung else ():
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    thread.join(60)
    captured = capsys.readouterr()
    assert not hung, f"{argv} waited on a FIFO"
    return result.get("status"), captured.out, captured.err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("given", ["validate", "dataset", "solutions", "submission", "score solutions", "settings",
                                   "records", "task file"])
def test_a_fifo_given_as_any_file_is_refused_in_one_line_not_waited_on(capsys, tmp_path, micro_model, given):
    """Failure 4: a FIFO (a file that never ends) given as ``--dataset`` hung the loader forever."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    dataset = write_tasks(tmp_path / "c.json", ["t1"])
    (tmp_path / "s.json").write_text(json.dumps({"t1": [[[4, 3]]]}))
    out = tmp_path / "out"
    solve = ["solve", "--model", micro_model, "--out", out, "--dataset"]
    argv = {"validate": ["validate", fifo], "dataset": [*solve, fifo],
            "solutions": [*solve, dataset, "--solutions", fifo],
            "submission": ["score", "--submission", fifo, "--solutions", tmp_path / "s.json"],
            "score solutions": ["score", "--submission", tmp_path / "s.json", "--solutions", fifo],
            "settings": ["kaggle", "run", "--settings", fifo, "--input", tmp_path, "--working", out],
            "records": [*solve, dataset], "task file": [*solve, tmp_path]}[given]
    if given == "records":  # a run's folder (the kit's marker: else it is refused before its records are read)
        claim_folder(out, RUN_KIND, "solve")
        os.mkfifo(out / "records.jsonl")
    status, printed, err = run_watched(capsys, [fifo, out / "records.jsonl"], *argv)
    assert status == 1 and "Traceback" not in err and "named pipe (FIFO)" in printed + err, (printed, err)


GOOD_RECORD = {"task_id": "t1", "test": [{"attempts": [[[4, 3]]], "candidates": [], "inference_augmentations": [],
                                          "scoring_augmentations": []}], "timings": {"total": 1.0}, "rung": 0}


@pytest.mark.parametrize("change", [
    {"test": [{"attempts": {"a": 1}}]}, {"test": [{"attempts": "[[1]]"}]}, {"test": [{"attempts": [[[1]], 7]}]},
    {"test": {"attempts": [[[1]]]}}, {"test": "attempts"}, {"test": [None]}, {"rung": "0"}, {"rung": True},
    {"correct": "yes"}, {"correct": [1]}, {"timings": []}, {"timings": {"total": "1"}}, {"error": 5},
    {"ttt": "trained"}, {"ttt": {"steps": "64"}}, {"test": [{"attempts": [], "candidates": [{"grid": "x"}]}]},
    {"test": [{"attempts": [], "candidates": [{"grid": [[1]], "scoring_nlls": ["0.5"]}]}]},
    {"test": [{"attempts": [], "search": {"capped": "no"}}]}, {"test": [{"attempts": [], "search": []}]},
    {"test": [{"attempts": [], "inference_augmentations": [3]}]}])
def test_a_record_line_of_the_wrong_kinds_never_replaces_a_good_one(tmp_path, change):
    """Failure 5: a record line that parsed as a record but held nonsense replaced a good earlier result."""
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(GOOD_RECORD) + "\n" + json.dumps({**GOOD_RECORD, **change}) + "\n")
    with pytest.warns(UserWarning, match=f"{path}: skipped 1 line.*line 2: "):
        records = read_records(path)
    assert to_json(records["t1"]) == to_json(from_json(TaskRecord, GOOD_RECORD))


def test_a_resumed_run_keeps_the_good_answer_over_a_nonsense_line(capsys, tmp_path, micro_model, no_model_work):
    dataset = write_tasks(tmp_path / "c.json", ["t1"])
    options = ["solve", "--dataset", dataset, "--out", tmp_path / "out", "--model", micro_model]
    assert run(capsys, *options)[0] == 0
    records = tmp_path / "out" / "records.jsonl"
    records.write_text(json.dumps(GOOD_RECORD) + "\n" + json.dumps({**GOOD_RECORD, "test": [{"attempts": {}}]}) + "\n")
    with pytest.warns(UserWarning, match="skipped 1 line"):
        status, _, err = run(capsys, *options)
    assert status == 0, err
    assert json.loads((tmp_path / "out" / "submission.json").read_text())["t1"][0]["attempt_1"] == [[4, 3]]


def test_an_attempt_or_a_grid_given_twice_is_refused(capsys, tmp_path):
    """Failure 6: ``score`` accepted a submission whose entry held ``attempt_1`` twice (JSON keeps the last)."""
    (tmp_path / "s.json").write_text(json.dumps({"t1": [[[4, 3]]]}))
    (tmp_path / "sub.json").write_text('{"t1": [{"attempt_1": [[4, 3]], "attempt_1": [[0]], "attempt_2": [[1]]}]}')
    status, out, err = run(capsys, "score", "--submission", tmp_path / "sub.json", "--solutions", tmp_path / "s.json")
    assert status == 1 and "task t1: [0] holds 'attempt_1' 2 times" in err, err
    status, out, err = run(capsys, "validate", tmp_path / "sub.json")
    assert status == 1 and "holds 'attempt_1' 2 times" in out, out
    (tmp_path / "c.json").write_text('{"t1": {"train": [{"input": [[1]], "output": [[2]], "output": [[3]]}], '
                                     '"test": [{"input": [[1]]}]}}')
    status, out, err = run(capsys, "validate", tmp_path / "c.json")
    assert status == 1 and "task t1: train[0] holds key 'output' 2 times" in out, out
    (tmp_path / "settings.json").write_text('{"seed": 1, "seed": 2}')
    status, out, err = run(capsys, "kaggle", "run", "--settings", tmp_path / "settings.json", "--input", tmp_path)
    assert status == 1 and "'seed' 2 times" in err, err


@pytest.mark.parametrize("content", ["null", "[]", "7", '"solutions"'])
def test_a_solutions_file_holding_no_object_is_refused(capsys, tmp_path, content, micro_model):
    """Failure 7: a solutions file holding ``null`` was ignored instead of refused."""
    dataset = write_tasks(tmp_path / "c.json", ["t1"])
    (tmp_path / "s.json").write_text(content)
    with pytest.raises(InvalidDataError, match="the solutions hold"):
        load_challenges(dataset, tmp_path / "s.json")
    for lenient in ([], ["--lenient"]):
        status, out, err = run(capsys, "solve", "--dataset", dataset, "--solutions", tmp_path / "s.json", "--out",
                               tmp_path / "out", "--model", micro_model, *lenient)
        assert status == 1 and "the solutions hold" in err and str(tmp_path / "s.json") in err, err
    assert not (tmp_path / "out").exists()


def test_bad_ids_in_errors_and_warnings_are_escaped(capsys, tmp_path, micro_model, no_model_work):
    """Failure 8: errors printed task ids raw: a newline or ANSI escapes forged log lines or recoloured the terminal."""
    forged = "x\n[ok] all tasks valid\x1b[2J"
    (tmp_path / "c.json").write_text(json.dumps({forged: {"train": []}, "t1": PLAIN}))
    (tmp_path / "sub.json").write_text(json.dumps({forged: [], "t1": "answers"}))
    (tmp_path / "s.json").write_text(json.dumps({"t1": [[[4, 3]]]}))
    runs = [["validate", tmp_path / "c.json"], ["validate", tmp_path / "sub.json"],
            ["score", "--submission", tmp_path / "sub.json", "--solutions", tmp_path / "s.json"],
            ["solve", "--dataset", tmp_path / "c.json", "--out", tmp_path / "o", "--model", micro_model],
            ["show", forged, "--dataset", tmp_path / "c.json"]]
    for argv in runs:
        status, out, err = run(capsys, *argv)
        assert status == 1 and "Traceback" not in err
        assert "\x1b" not in out + err and "\n[ok]" not in out + err, (argv, out, err)
        assert "x\\n[ok] all tasks valid\\x1b[2J" in out + err, (argv, out, err)
    with pytest.warns(UserWarning) as caught:
        run(capsys, "solve", "--dataset", tmp_path / "c.json", "--lenient", "--out", tmp_path / "o", "--model",
            micro_model)
    warned = " ".join(str(warning.message) for warning in caught)
    assert "\x1b" not in warned and "\n" not in warned and "'x\\n[ok] all tasks valid\\x1b[2J'" in warned


@pytest.mark.processes
@pytest.mark.slow
def test_the_lenient_warning_is_one_line_and_shows_no_source(tmp_path):
    """Failure 9: the ``--lenient`` warning printed a line of the kit's Python source (as a process: the way a
    user sees warnings, which pytest would record instead)."""
    (tmp_path / "c.json").write_text(json.dumps({"bad": {"train": []}, "t1": PLAIN}))
    result = subprocess.run([sys.executable, "-m", "arc_kit", "solve", "--dataset", str(tmp_path / "c.json"),
                             "--lenient", "--out", str(tmp_path / "o"), "--model", str(tmp_path / "no-model")],
                            capture_output=True, text=True, timeout=300)
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and lines, result.stderr
    assert all(line.startswith("arc-kit solve: ") for line in lines), result.stderr
    assert lines[0].startswith("arc-kit solve: warning: ") and "skipped 1 bad task(s) of 2: task bad:" in lines[0]


HOLD = ("import sys, time\nfrom arc_kit.run.locking import hold_folder\nwith hold_folder(sys.argv[1]):\n"
        "    print('held', flush=True)\n    time.sleep(600)\n")


@pytest.mark.slow
def test_a_folder_in_use_is_refused_naming_its_holder_and_taken_over_once_it_is_dead(capsys, tmp_path, micro_model,
                                                                                    no_model_work):
    """Failure 10: two runs on one ``--out`` both worked on every task (no lock)."""
    dataset = write_tasks(tmp_path / "c.json", ["t1", "t2"])
    out = tmp_path / "out"
    options = ["solve", "--dataset", dataset, "--out", out, "--model", micro_model]
    assert run(capsys, *options)[0] == 0
    kept = {path: path.read_bytes() for path in out.iterdir() if path.is_file() and path.name != HOLDER_FILE}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        for extra in ([], ["--restart"]):
            status, printed, err = run(capsys, *options, *extra)
            assert status == 1 and f"is in use by process {holder.pid} on " in err and "since 20" in err, err
            assert len(err.strip().splitlines()) == 1
        assert {path: path.read_bytes() for path in kept} == kept  # --restart cleared nothing
    finally:
        holder.kill()  # kill -9: the lock it held is left behind for the next run to take over
        holder.wait()
    assert json.loads((out / HOLDER_FILE).read_text())["pid"] == holder.pid
    status, printed, err = run(capsys, *options, "--restart")
    assert status == 0, err
    assert not (out / HOLDER_FILE).exists()  # given back at the end of the run


def test_records_without_run_json_are_refused_unless_restart_discards_them(capsys, tmp_path, micro_model,
                                                                          no_model_work):
    """Failure 10: a folder whose ``run.json`` was deleted after a kill resumed under other settings, mixing two
    runs' results."""
    dataset = write_tasks(tmp_path / "c.json", ["t1", "t2"])
    out = tmp_path / "out"
    options = ["solve", "--dataset", dataset, "--out", out, "--model", micro_model]
    assert run(capsys, *options)[0] == 0
    records = (out / "records.jsonl").read_text()
    (out / "run.json").unlink()
    status, printed, err = run(capsys, *options, "--seed", "7")
    assert status == 1 and "holds records but no run.json" in err and "--restart" in err, err
    assert (out / "records.jsonl").read_text() == records and not (out / "run.json").exists()
    status, printed, err = run(capsys, *options, "--restart")
    assert status == 0 and json.loads((out / "run.json").read_text())["settings"]["seed"] == SolveSettings().seed
