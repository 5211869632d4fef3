"""Bad input, generated: hundreds of malformed challenges files give a one-line error naming the bad task,
and every way of running (one process, worker processes, the Kaggle job) answers every task id of its input.

The files are made from a seed (no hypothesis database, the same files every run): a valid task set
with one task broken in one of many ways. ``arc-kit validate`` and a strict ``arc-kit solve`` (which
stops at loading, before any model) run in-process on each.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from arc_kit import kaggle, workers
from arc_kit.cli import main
from arc_kit.datasets import load_challenges
from arc_kit.run import SolveRun
from arc_kit.settings import SamplerSettings, SolveSettings, TestTimeSettings
from arc_kit.submission import submission_problems, validate_file
from arc_kit.tasks import InvalidDataError
from arc_kit.workers import solve_in_workers

FILES = 300
SEED = 20250101


def good_task(rng: random.Random) -> dict:
    def grid():
        height, width = rng.randint(1, 4), rng.randint(1, 4)
        return [[rng.randint(0, 9) for _ in range(width)] for _ in range(height)]
    return {"train": [{"input": grid(), "output": grid()} for _ in range(rng.randint(1, 3))],
            "test": [{"input": grid()} for _ in range(rng.randint(1, 2))]}


def bad_cell(rng: random.Random):
    return rng.choice([10, -1, 2.5, "3", None, True, [1], {"a": 1}, 10 ** 40])


def break_task(task: dict, rng: random.Random):
    """The task broken one way, at a random place (or replaced by something that is no task)."""
    part = rng.choice(["train", "test"])
    pairs = task[part]
    pair = rng.choice(pairs)
    key = "input" if part == "test" else rng.choice(["input", "output"])
    grid = pair[key]
    way = rng.randrange(14)
    if way == 0:
        return rng.choice([None, 3, "task", [], True])
    if way == 1:
        del task[part]
    elif way == 2:
        task[part] = rng.choice([[], {}, "pairs", None])
    elif way == 3:
        pairs[pairs.index(pair)] = rng.choice([None, 1, [], "pair"])
    elif way == 4:
        del pair[key]
    elif way == 5:
        grid[rng.randrange(len(grid))][0] = bad_cell(rng)
    elif way == 6:
        grid.append(grid[0] + [1])  # a ragged row
    elif way == 7:
        pair[key] = rng.choice([[], [[]], [1, 2], "grid", None, {}])
    elif way == 8:
        pair[key] = [[0] * rng.randint(31, 40)]  # too wide for the competition
    elif way == 9:
        pair[key] = [[0]] * rng.randint(31, 40)  # too tall
    elif way == 10:
        pair[key] = [[rng.randint(0, 9)] * 31 for _ in range(31)]  # 31 by 31
    elif way == 11:
        nested = 0
        for _ in range(rng.randint(3, 40)):
            nested = [nested]
        grid[0][0] = nested
    elif way == 12:
        grid[0] = rng.choice([None, 5, "row", {}])
    else:
        pair[key] = [row[:] for row in grid] * 16  # too tall once more than 30 rows
        if len(pair[key]) <= 30:
            pair[key] = [[0]] * 31
    return task


def malformed_file(rng: random.Random) -> tuple[str, str]:
    """(the text of a challenges file with one bad task, the bad task's id)."""
    tasks = {f"{rng.getrandbits(32):08x}": good_task(rng) for _ in range(rng.randint(1, 4))}
    bad_id = rng.choice(list(tasks))
    tasks[bad_id] = break_task(tasks[bad_id], rng)
    text = json.dumps(tasks)
    if rng.random() < 0.1:  # the same task id twice, the bad copy first (JSON keeps the last)
        good_copy = json.dumps({bad_id: good_task(rng)})[1:-1]
        text = text[:-1] + ", " + good_copy + "}"
    return text, bad_id


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_malformed_files_give_exit_status_1_no_traceback_and_name_the_bad_task(capsys, tmp_path):
    """Every file through the loaders; every sixth also through ``arc-kit validate`` and ``arc-kit solve``."""
    rng = random.Random(SEED)
    started = time.monotonic()
    for number in range(FILES):
        text, bad_id = malformed_file(rng)
        path = tmp_path / f"challenges-{number}.json"
        path.write_text(text)
        kind, problems = validate_file(path, "challenges")
        assert any(problem.startswith(f"task {bad_id}:") for problem in problems), (text, problems)
        with pytest.raises(InvalidDataError) as raised:
            load_challenges(path)
        assert str(path) in str(raised.value) and f"task {bad_id}:" in str(raised.value), text
        if number % 6:
            continue
        status, out, err = run(capsys, "validate", path, "--kind", "challenges")
        assert status == 1 and "Traceback" not in out + err, (text, out, err)
        assert f"task {bad_id}:" in out, (text, out)
        status, out, err = run(capsys, "solve", "--dataset", path, "--out", tmp_path / "never", "--model",
                               tmp_path / "no-model-needed")
        assert status == 1 and "Traceback" not in err, (text, err)
        assert f"task {bad_id}:" in err and str(path) in err, (text, err)
    assert not (tmp_path / "never").exists()  # refused at loading, before any run folder
    assert time.monotonic() - started < 20


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
def test_every_run_path_writes_a_submission_holding_every_task_id(path, capsys, tmp_path, micro_model, monkeypatch):
    challenges = tmp_path / "input" / "competitions" / "arc-prize" / "arc-agi_test_challenges.json"
    challenges.parent.mkdir(parents=True)
    challenges.write_text(json.dumps(INPUT))
    with pytest.warns(UserWarning, match="skipped 2 bad task"):
        tasks = load_challenges(challenges, strict=False)
    if path == "single process":
        options = ["--sampler", "greedy", "--ttt-steps", "1", "--augmentations", "1", "--scoring-augmentations", "1",
                   "--max-len", "2048"]
        with pytest.warns(UserWarning, match="skipped 2 bad task"):
            status, _, err = run(capsys, "solve", "--dataset", challenges, "--lenient", "--tasks", 3, "--out",
                                 tmp_path / "out", "--model", micro_model, *options)
        assert status == 0, err
        submission = json.loads((tmp_path / "out" / "submission.json").read_text())
        assert list(submission) == ["good1", "good2", "nulled"]  # --tasks 3: the first three ids, one skipped
        status, _, err = run(capsys, "solve", "--dataset", challenges, "--lenient", "--out", tmp_path / "all",
                             "--model", micro_model, *options)
        check_every_id(tmp_path / "all" / "submission.json", tasks)
    elif path == "workers":
        solve_in_workers(tasks, micro_model, QUICK, tmp_path / "out", workers=1, poll_seconds=0.2, progress=False)
        check_every_id(tmp_path / "out" / "submission.json", tasks)
    else:  # the Kaggle job's own writes; the workers it starts are the case above
        monkeypatch.setattr(workers, "solve_in_workers", lambda *arguments, **options: SolveRun(tmp_path, {}, tmp_path))
        result = kaggle.run_competition(micro_model, QUICK, input_root=tmp_path / "input", working=tmp_path / "working",
                                        workers=1, force_full=True)
        assert result.error is None and result.tasks == 2
        check_every_id(tmp_path / "working" / "submission.json", tasks)
