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
skipping and the submission, not the model. The file stays under 20 seconds.
"""

from __future__ import annotations

import json
import random
import re
import time

import pytest

from arc_kit import kaggle, workers
from arc_kit.cli import main
from arc_kit.datasets import load_challenges
from arc_kit.records import fallback_record
from arc_kit.run import SolveRun
from arc_kit.settings import SamplerSettings, SolveSettings, TestTimeSettings
from arc_kit.solver import Solver
from arc_kit.submission import ATTEMPTS, submission_problems, validate_file
from arc_kit.tasks import InvalidDataError
from arc_kit.workers import solve_in_workers

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


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def started():
    return time.process_time()


@pytest.fixture
def no_model_work(monkeypatch):
    """The solver gives every task fallback answers at once: a lenient run then tests loading and the submission."""
    monkeypatch.setattr(Solver, "solve_with_retry", lambda self, task, *_, **__: fallback_record(task.id, "fuzz"))


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
                      ttt=TestTimeSettings(steps=1), max_len=2048)
GOOD = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[3, 4]]}]}
INPUT = {"good1": GOOD, "nulled": None, "good2": GOOD,
         "ragged": {"train": [{"input": [[1], [2, 3]], "output": [[1]]}], "test": [{"input": [[5]]}, {"input": 7}]}}


def check_every_id(path, tasks) -> None:
    submission = json.loads(path.read_text())
    assert list(submission) == list(INPUT)  # every id, in file order
    assert submission_problems(submission, tasks) == []
    assert len(submission["ragged"]) == 2 and submission["ragged"][0]["attempt_1"] == [[5]]  # a salvaged input


@pytest.mark.parametrize("path", ["single process", pytest.param("workers", marks=pytest.mark.slow), "kaggle"])
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
    elif path == "workers":
        solve_in_workers(tasks, fallback_model, QUICK, tmp_path / "out", workers=1, poll_seconds=0.2, progress=False)
        check_every_id(tmp_path / "out" / "submission.json", tasks)
    else:  # the Kaggle job's own writes; the workers it starts are the case above
        monkeypatch.setattr(workers, "solve_in_workers", lambda *arguments, **options: SolveRun(tmp_path, {}, tmp_path))
        result = kaggle.run_competition(fallback_model, QUICK, input_root=tmp_path / "input", working=tmp_path / "working",
                                        workers=1, force_full=True)
        assert result.error is None and result.tasks == 4  # the two malformed tasks count too
        check_every_id(tmp_path / "working" / "submission.json", tasks)
