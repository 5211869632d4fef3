"""The fuzz over every command: hostile input in every place a command takes one, and what must hold of each run.

Each input is made from a seed (the same inputs every run): a file (a challenges, solutions or
submission file broken one way, ids a new user would not expect, a FIFO, a folder, a file that is no
text...), a run folder broken one way, a model folder that is none, a Sudoku CSV, a task id, a
number or a word. Every command that takes a thing of that kind gets it there, the rest of its
arguments good (so the input is what it meets), and runs in this process (``cli.main``). Of every
run: it ends (a FIFO never makes it wait: a run still going after a minute is freed and counted as
hung), with status 0, 1 or 2 (a usage error), no traceback, no raw control character of an id on the
terminal (no forged line, no colour), and no file written outside the places it was given (its
``--out``, the working folder for ``show``'s picture).

The model's work is replaced by fallback records (``no_model_work``): what the runs check is the
reading of input and the writing of output. ``ARC_KIT_FUZZ_INPUTS`` sets how many inputs (the
suite's default keeps the file to seconds); the counts go to stdout (``pytest -s``) and, for a full
fuzz, into docs/results.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import arc_kit.run.tables as tables
from arc_kit.cli import main
from arc_kit.run.records import AblationRecord, SamplerRecord, fallback_record
from arc_kit.run.solver import Solver

INPUTS = int(os.environ.get("ARC_KIT_FUZZ_INPUTS", "12"))  # about 14 runs each
SEED = 26
PLAIN = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[3, 4]]}]}
IDS = ["../../escaped", "no/such/folder", "..", ".", "", "A", "con", "x" * 300, "\udc80", "a\udc80b",
       "line\n[ok] forged", "\x1b[31mred\x1b[0m", "tab\there", "back\\slash", "~tilde", "sp ace", "$\\frac{", "-h",
       "--out", "0", "１２"]
NUMBERS = ["-1", "0", "1", "nan", "inf", "-inf", "1e309", "3.5", "", "abc", "0x10", "2", "-0"]
WORDS = ["", "x", "../../x", "/abs", "a/b", "s9-c0123456789", "s0", "c12", "o01", "train", "evaluation", "arc-agi-1",
         "arc-agi-1/evaluation", "\x1b[31m", "line\nforged", "\udc80", "micro", "-", "22-27", "99-1", "authors"]
# what ids (and the names of task files, which are ids) hold, and words given to options: never on a terminal raw
# (the paths of the files a user names are theirs: they hold \x1b[32m and a newline, and are shown as given)
FORGED = ("\x1b[31m", "\n[ok] forged", "\nforged")


def grid(rng: random.Random, high: int = 3) -> list:
    return [[rng.randint(0, 9) for _ in range(rng.randint(1, high))]] * rng.randint(1, high)


def good_files(folder: Path) -> dict[str, Path]:
    """The good arguments every command gets where its input is not the hostile one."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"tasks": folder / "good_challenges.json", "solutions": folder / "good_solutions.json",
             "submission": folder / "good_submission.json", "csv": folder / "good.csv"}
    files["tasks"].write_text(json.dumps({"t1": PLAIN, "t2": PLAIN}))
    files["solutions"].write_text(json.dumps({"t1": [[[4, 3]]], "t2": [[[4, 3]]]}))
    files["submission"].write_text(json.dumps({task: [{"attempt_1": [[4, 3]], "attempt_2": [[1]]}]
                                               for task in ("t1", "t2")}))
    files["csv"].write_text("puzzle,solution\n" + "0" * 81 + "," + "1" * 81 + "\n")
    return files


# -- the hostile inputs, by kind ----------------------------------------------------------------------------------

def hostile_json(rng: random.Random) -> str:
    """JSON text (or almost) for a challenges, solutions or submission slot: broken one way."""
    ids = rng.sample(IDS, 3)
    way = rng.randrange(12)
    if way == 0:
        return json.dumps({task_id: PLAIN for task_id in ids})  # ids a new user would not expect
    if way == 1:
        return json.dumps({task_id: [grid(rng)] for task_id in ids})  # solutions with such ids
    if way == 2:
        return json.dumps({task_id: [{"attempt_1": grid(rng), "attempt_2": grid(rng)}] for task_id in ids})
    if way == 3:
        return '{"t1": [{"attempt_1": [[4, 3]], "attempt_1": [[1]], "attempt_2": [[1]]}]}'  # a key twice
    if way == 4:
        return '{"t1": {"train": [{"input": [[1]], "input": [[2]], "output": [[1]]}], "test": [{"input": [[1]]}]}}'
    if way == 5:
        return rng.choice(["null", "[]", "{}", "7", '"x"', "true", "", " ", "\ufeff{}", "{\"t1\": null}"])
    if way == 6:
        return "[" * 50_000 + "]" * 50_000
    if way == 7:
        return '{"t1": ' + "9" * 6000 + "}"
    if way == 8:
        return json.dumps({"t1": PLAIN})[:rng.randrange(1, 30)]
    if way == 9:
        return json.dumps({"t1": {**PLAIN, "test": [{"input": [[10, -1]]}]}, "t2": PLAIN})
    if way == 10:
        return json.dumps({"t1": [[[1] * 40]], "t2": [grid(rng)]})
    return json.dumps({task_id: rng.choice([None, 3, "x", [], {}, [[1]]]) for task_id in ids})


def hostile_path(rng: random.Random, folder: Path) -> Path:
    """A path for any file slot: missing, a folder, a FIFO, no text, or a JSON file of ``hostile_json``."""
    folder.mkdir(parents=True, exist_ok=True)
    way = rng.randrange(10)
    path = folder / rng.choice(["in.json", "line\nbreak.json", "x.csv", "in", "sp ace.json", "\x1b[32m.json"])
    if way == 0:
        return folder / "missing.json"
    if way == 1:
        return folder
    if way == 2 and hasattr(os, "mkfifo"):
        os.mkfifo(path)
        return path
    if way == 3:
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))))
        return path
    if way == 4:  # a folder of task files with hostile names and contents
        (folder / "tasks").mkdir()
        for name in rng.sample(["a", "..json", "line\n[ok] forged", "\x1b[31m", "CON", "sp ace", "x" * 200], 3):
            (folder / "tasks" / f"{name}.json").write_text(hostile_json(rng))
        if hasattr(os, "mkfifo"):
            os.mkfifo(folder / "tasks" / "pipe.json")
        (folder / "tasks" / "loop").symlink_to(folder / "tasks")
        return folder / "tasks"
    if way == 5:
        path.write_text("puzzle,solution\n" + rng.choice(["x,y", "\x00\x00", "0" * 81 + "," + "0" * 80, "1,2,3",
                                                          "9" * 81 + "," + "9" * 81 + "\n" * 3]))
        return path
    path.write_text(hostile_json(rng), encoding="utf-8", errors="surrogatepass")
    return path


def hostile_folder(rng: random.Random, folder: Path) -> Path:
    """A run folder or a model folder broken one way (for ``--records``, ``--input``, ``--model``, ``worker``)."""
    folder.mkdir(parents=True, exist_ok=True)
    way = rng.randrange(7)
    if way == 0:
        (folder / "run.json").write_text(rng.choice(["null", "{}", '{"settings": 3}', "[", '{"settings": {"seed": "x"}}']))
    elif way == 1:
        (folder / "records.jsonl").write_text(json.dumps(fallback_record("t1", "x").to_json())[:40] + "\n{}\n[]\n")
    elif way == 2:
        (folder / "config.json").write_text(rng.choice(["{}", "null", "[", '{"model_type": "nothing"}']))
    elif way == 3 and hasattr(os, "mkfifo"):
        os.mkfifo(folder / rng.choice(["run.json", "records.jsonl", "config.json", "plan.json"]))
    elif way == 4:
        (folder / "plan.json").write_text(rng.choice(["{}", "null", '{"challenges": 3}', "[1]", '{"settings": []}']))
    elif way == 5:
        (folder / "arc-agi_test_challenges.json").write_text(hostile_json(rng))
    return folder


@dataclass
class Input:
    kind: str  # tasks, solutions, submission, file, folder, id, number, word
    value: str


def make_input(rng: random.Random, folder: Path) -> Input:
    kind = rng.choice(["tasks", "solutions", "submission", "file", "folder", "id", "number", "word"])
    if kind in ("tasks", "solutions", "submission"):
        path = folder / rng.choice(["c.json", "line\nname.json", "\x1b[32m.json"])  # a name the user gave
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(hostile_json(rng), encoding="utf-8", errors="surrogatepass")
        return Input(kind, str(path))
    if kind == "file":
        return Input(kind, str(hostile_path(rng, folder)))
    if kind == "folder":
        return Input(kind, str(hostile_folder(rng, folder)))
    return Input(kind, rng.choice({"id": IDS, "number": NUMBERS, "word": WORDS}[kind]))


# -- every command, its arguments with one hostile ---------------------------------------------------------------

QUICK = ["--sampler", "greedy", "--ttt-steps", "1", "--augmentations", "1", "--scoring-augmentations", "1",
         "--max-len", "2048", "--device", "cpu"]
FILE_KINDS = ("tasks", "solutions", "submission", "file")


def commands(good: dict, model: str, out: str, hostile: Input) -> list[list[str]]:
    """Every command that takes a thing of ``hostile``'s kind, given it there; the rest good."""
    value, kind = hostile.value, hostile.kind
    as_file = kind in FILE_KINDS or kind == "folder"

    def slot(name: str, default) -> str:
        return value if name == kind or (name == "file" and as_file) else str(default)

    tasks, solutions = slot("tasks", good["tasks"]), slot("solutions", good["solutions"])
    runs = []
    if as_file:
        runs += [["validate", value], ["validate", value, "--kind", "solutions", "--challenges", good["tasks"]],
                 ["worker", f"{value}/plan.json"],
                 ["score", "--submission", slot("submission", good["submission"]), "--solutions", solutions,
                  "--challenges", tasks],
                 ["solve", "--dataset", tasks, "--solutions", solutions, "--out", out, "--model", model, *QUICK],
                 ["dry-run", "--dataset", tasks, "--lenient", "--tasks", "0", "--out", out, "--model", model, *QUICK],
                 ["ablation", "--dataset", tasks, "--solutions", solutions, "--out", out, "--model", model, *QUICK],
                 ["export", "--dataset", tasks, "--out", out], ["worker", value],
                 ["kaggle", "run", "--input", value, "--working", out, "--model", value, "--settings", value],
                 ["estimate", "--records", value, "--dataset", tasks, "--model", model],
                 ["sudoku", "evaluate", "--model", value, "--puzzles", value, "--out", out],
                 ["sudoku", "train", "--model", value, "--puzzles", value, "--out", out, "--limit", "1"],
                 ["pretrain", "--model", value, "--out", out, "--re-arc", value, "--tasks", tasks],
                 ["held-out", f"m={value}", "--dataset", tasks, "--tasks", "1"], ["shrink", value, out],
                 ["base", "merge", value, out], ["bench", "--model", value, "--dataset", tasks, "--tasks", "1"],
                 ["kaggle", "build", "--out", out, "--model", value, "--image-manifest", value]]
        if kind != "tasks":
            runs.append(["samplers", "--dataset", good["tasks"], "--solutions", value, "--out", out, "--model", model,
                         *QUICK])
    elif kind == "id":
        runs += [["show", value, "--dataset", good["tasks"]], ["datasets"], ["base", "list"],
                 ["solve", "--dataset", good["tasks"], "--task-ids", value, "--out", out, "--model", model, *QUICK],
                 ["validate", good["tasks"], "--kind", value]]
    else:  # a number or a word, in every option that takes one
        runs += [["export", "--dataset", good["tasks"], "--out", out, "--split", value, "--limit", value],
                 ["show", "t1", "--dataset", good["tasks"], "--augmentation", value],
                 ["solve", "--dataset", good["tasks"], "--out", out, "--model", model, "--tasks", value, "--hours",
                  value, *QUICK],
                 ["solve", "--dataset", value, "--out", out, "--model", model, "--max-side", value, *QUICK],
                 ["create-model", "--preset", value, "--out", out, "--seed", value],
                 ["sudoku", "generate", "--count", value if kind == "word" else "1", "--clues", value, "--out",
                  f"{out}/p.csv"],
                 ["estimate", "--records", out, "--speedup", value, "--workers", value, "--model", model],
                 ["kaggle", "run", "--input", out, "--working", out, "--hours", value, "--model", value],
                 ["score", "--submission", good["submission"], "--solutions", value]]
    return [[str(arg) for arg in argv] for argv in runs]


# -- running, and what must hold --------------------------------------------------------------------------------

@dataclass
class Tally:
    inputs: int = 0
    runs: int = 0
    statuses: dict = field(default_factory=dict)
    tracebacks: list = field(default_factory=list)
    hung: list = field(default_factory=list)
    outside: list = field(default_factory=list)
    raw: list = field(default_factory=list)

    def line(self) -> str:
        return (f"fuzz: {self.inputs} inputs, {self.runs} runs (exit statuses {dict(sorted(self.statuses.items()))}), "
                f"{len(self.tracebacks)} tracebacks, {len(self.hung)} hung, {len(self.outside)} wrote outside, "
                f"{len(self.raw)} raw control characters")


def run_once(argv: list[str], capsys) -> tuple[object, str, str, bool]:
    """(status or the exception that escaped, stdout, stderr and the warnings' text, whether it hung)."""
    result = {}

    def target():
        try:
            result["status"] = main(argv)
        except SystemExit as stop:  # argparse: a usage error
            result["status"] = stop.code
        except BaseException as error:  # noqa: BLE001 - the fuzz counts what escapes
            result["status"] = error

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        thread.join(60)
        hung = thread.is_alive()
        if hung:  # free it: a writer opens and closes every FIFO it may wait on
            for path in [Path(arg) for arg in argv if "\x00" not in arg]:
                for fifo in [path, *(path.glob("*") if path.is_dir() else [])]:
                    with contextlib.suppress(OSError):
                        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(60)
    captured = capsys.readouterr()
    text = "".join(f"warning: {warning.message}\n" for warning in caught)
    return result.get("status"), captured.out, captured.err + text, hung


def files_under(folder: Path) -> set[Path]:
    found = set()
    for root, folders, names in os.walk(folder):
        found.update(Path(root) / name for name in names + folders)
    return found


@pytest.fixture
def no_model_work(monkeypatch):
    """Every task gets fallback answers at once; the tables' per-task work is a record of the test inputs."""
    monkeypatch.setattr(Solver, "solve_with_retry", lambda self, task, *_, **__: fallback_record(task.id, "fuzz"))

    def ablation(solver, task, **_):
        stages = {stage: [[pair.input] for pair in task.test] for stage in tables.ABLATION_STAGES}
        correct = {stage: [False] * len(task.test) for stage in stages}
        return AblationRecord(task.id, stages, correct, correct)

    monkeypatch.setattr(tables, "ablation_task", ablation)
    monkeypatch.setattr(tables, "sampler_task", lambda solver, task, samplers=(): SamplerRecord(task.id))


@pytest.mark.slow
def test_every_command_on_hostile_input_ends_in_one_line_without_traceback_hang_or_stray_file(
        capsys, tmp_path, monkeypatch, micro_model, no_model_work):
    rng = random.Random(SEED)
    good = good_files(tmp_path / "good")
    working = tmp_path / "work" / "a" / "b" / "c"  # deep enough that ../../x stays below tmp_path
    working.mkdir(parents=True)
    monkeypatch.chdir(working)
    tally = Tally()
    for number in range(INPUTS):
        hostile = make_input(rng, tmp_path / "inputs" / str(number))
        tally.inputs += 1
        for argv in commands(good, str(micro_model), str(tmp_path / "out"), hostile):
            before = files_under(tmp_path)
            status, out, err, hung = run_once(argv, capsys)
            tally.runs += 1
            where = (number, hostile.kind, [arg[:60] for arg in argv])
            tally.statuses[str(status if isinstance(status, int) else type(status).__name__)] = \
                tally.statuses.get(str(status if isinstance(status, int) else type(status).__name__), 0) + 1
            if not isinstance(status, int) or status not in (0, 1, 2) or "Traceback" in out + err:
                tally.tracebacks.append((where, repr(status), err[-400:]))
            if hung:
                tally.hung.append(where)
            if any(forged in out + err for forged in FORGED):
                tally.raw.append((where, (out + err)[-300:]))
            allowed = (tmp_path / "out", working, tmp_path / "inputs")  # where it was told to write, or read from
            tally.outside += [(where, str(path)) for path in files_under(tmp_path) - before
                              if not any(path == place or place in path.parents for place in allowed)]
            shutil.rmtree(tmp_path / "out", ignore_errors=True)
            for path in working.iterdir():
                path.unlink()
    print(tally.line())
    if os.environ.get("ARC_KIT_FUZZ_REPORT"):  # every finding, for a person to read
        Path(os.environ["ARC_KIT_FUZZ_REPORT"]).write_text(json.dumps(
            {"line": tally.line(), "tracebacks": tally.tracebacks, "hung": tally.hung, "outside": tally.outside,
             "raw": tally.raw}, indent=1, default=str))
    assert not tally.tracebacks and not tally.hung and not tally.outside and not tally.raw, (
        tally.line(), tally.tracebacks[:3], tally.hung[:3], tally.outside[:3], tally.raw[:3])
