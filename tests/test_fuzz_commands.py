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

The second fuzz (``test_no_command_changes_a_byte_of_what_it_did_not_make``) turns it round:
every command with an output path is pointed at places holding a user's files, and no byte of what
the kit did not make may change (``ARC_KIT_FUZZ_OUTPUTS`` runs; see its section below). It covers
links inside the kit's own folders (at its layout's names, to a user's file or folder), a user's files named
near the layout's names, unmarked look-alikes of the kit's folders, and two more tests: hostile
model folders (their own code, bombs, links) for every command that reads one, and a FIFO and /dev/zero for
every option that reads a file (``ARC_KIT_FUZZ_HOSTILE=all`` for every pair).

In all four, a run that ends refused (status 1 or 2) must leave the file system as it found it, the kit's own
files included (``refused``, ``differences``): every option and input is checked before any folder is made or
claimed. A hostile probe's last seams grew them: hard links at the layout's names (nothing appended through one),
a user's files inside the kit's own sub-folders (``ray-logs/``, a checkpoint, a worker's folder, an ``adapter/``
where no command of the folder's writes one), a records file over the bound, ``--dtype``, ``--address`` and
``bench --max-prompt`` given any word, an empty ``--task-ids``, and a model folder holding code nothing asks for.
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
from conftest import PLAIN, QUICK, file_tree

import arc_kit.experiments.tables as tables
import arc_kit.sudoku as sudoku
from arc_kit.cli import main
from arc_kit.experiments.table_records import AblationRecord, SamplerRecord
from arc_kit.method.records import fallback_record
from arc_kit.run.record_json import to_json

INPUTS = int(os.environ.get("ARC_KIT_FUZZ_INPUTS", "12"))  # about 14 runs each
SEED = 26
IDS = ["../../escaped", "no/such/folder", "..", ".", "", "A", "con", "x" * 300, "\udc80", "a\udc80b",
       "line\n[ok] forged", "\x1b[31mred\x1b[0m", "tab\there", "back\\slash", "~tilde", "sp ace", "$\\frac{", "-h",
       "--out", "0", "１２"]
NUMBERS = ["-1", "0", "1", "nan", "inf", "-inf", "1e309", "3.5", "", "abc", "0x10", "2", "-0"]
WORDS = ["", "x", "../../x", "/abs", "a/b", "s9-c0123456789", "s0", "c12", "o01", "train", "evaluation", "arc-agi-1",
         "arc-agi-1/evaluation", "\x1b[31m", "line\nforged", "\udc80", "micro", "-", "22-27", "99-1", "authors"]
# what ids (and the names of task files, which are ids) hold, and words given to options: never on a terminal raw
# (the paths of the files a user names are theirs: they hold \x1b[32m and a newline, and are shown as given)
FORGED = ("\x1b[31m", "\n[ok] forged", "\nforged")
LINE_LENGTH = 320  # the most characters a line the kit prints may take ("about 300": a path or two may add some)


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
    """A run folder or a model folder broken one way (for ``--records``, ``--input``, ``--model``)."""
    folder.mkdir(parents=True, exist_ok=True)
    way = rng.randrange(8)
    if way == 0:
        (folder / "run.json").write_text(rng.choice(["null", "{}", '{"settings": 3}', "[", '{"settings": {"seed": "x"}}']))
    elif way == 1:
        (folder / "records.jsonl").write_text(json.dumps(to_json(fallback_record("t1", "x")))[:40] + "\n{}\n[]\n")
    elif way == 2:
        (folder / "config.json").write_text(rng.choice(["{}", "null", "[", '{"model_type": "nothing"}']))
    elif way == 3 and hasattr(os, "mkfifo"):
        os.mkfifo(folder / rng.choice(["run.json", "records.jsonl", "config.json", "plan.json"]))
    elif way == 4:
        (folder / "plan.json").write_text(rng.choice(["{}", "null", '{"challenges": 3}', "[1]", '{"settings": []}']))
    elif way == 5:
        (folder / "arc-agi_test_challenges.json").write_text(hostile_json(rng))
    elif way == 6:  # a records file over the bound (sparse: no disk, and never read)
        (folder / "run.json").write_text(json.dumps({"settings": {}}))
        (folder / "records.jsonl").touch()
        os.truncate(folder / "records.jsonl", 2**30 + 1)
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
                 ["score", "--submission", slot("submission", good["submission"]), "--solutions", solutions,
                  "--challenges", tasks],
                 ["solve", "--dataset", tasks, "--solutions", solutions, "--out", out, "--model", model, *QUICK],
                 ["dry-run", "--dataset", tasks, "--lenient", "--tasks", "0", "--out", out, "--model", model, *QUICK],
                 ["ablation", "--dataset", tasks, "--solutions", solutions, "--out", out, "--model", model, *QUICK],
                 ["export", "--dataset", tasks, "--out", out],
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
                 ["solve", "--dataset", good["tasks"], "--out", out, "--model", model, *QUICK, "--task-ids"],
                 ["validate", good["tasks"], "--kind", value]]
    else:  # a number or a word, in every option that takes one
        runs += [["export", "--dataset", good["tasks"], "--out", out, "--split", value, "--limit", value],
                 ["show", "t1", "--dataset", good["tasks"], "--augmentation", value],
                 ["solve", "--dataset", good["tasks"], "--out", out, "--model", model, "--tasks", value, "--hours",
                  value, *QUICK],
                 ["solve", "--dataset", value, "--out", out, "--model", model, "--max-side", value, *QUICK],
                 ["solve", "--dataset", good["tasks"], "--out", out, "--model", model, *QUICK, "--dtype", value],
                 ["solve", "--dataset", good["tasks"], "--out", out, "--model", model, *QUICK, "--address", value,
                  "--workers", "2"],
                 ["bench", "--model", model, "--dataset", good["tasks"], "--max-prompt", value, "--tasks", "1",
                  "--which", "scoring", "--device", "cpu"],
                 ["create-model", "--preset", value, "--out", out, "--seed", value],
                 ["sudoku", "generate", "--count", value if kind == "word" else "1", "--clues", value, "--out",
                  f"{out}/p.csv"],
                 ["estimate", "--records", out, "--speedup", value, "--workers-per-gpu", value, "--model", model],
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
    long: list = field(default_factory=list)  # lines past LINE_LENGTH
    left: list = field(default_factory=list)  # a refused run that changed the file system

    def line(self) -> str:
        return (f"fuzz: {self.inputs} inputs, {self.runs} runs (exit statuses {dict(sorted(self.statuses.items()))}), "
                f"{len(self.tracebacks)} tracebacks, {len(self.hung)} hung, {len(self.outside)} wrote outside, "
                f"{len(self.raw)} raw control characters, {len(self.long)} lines over {LINE_LENGTH} characters, "
                f"{len(self.left)} refusals that changed a file")


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


# what the fixtures below make fail on purpose after a command's folders are claimed (no refusal: a failure)
SIMULATED_FAILURES = ("fuzz: no wheel is built",)


def refused(status, err: str) -> bool:
    """Whether a run ended refused (status 1 or 2, not one of the failures the fixtures simulate): then it must
    have left the file system as it found it (every input checked before any folder is made or claimed)."""
    return status in (1, 2) and not any(failure in err for failure in SIMULATED_FAILURES)


def differences(before: dict, after: dict) -> list[str]:
    """Every entry added, lost or changed between two trees of ``bounded_entries``."""
    return [f"{key} {'added' if key not in before else 'lost' if key not in after else 'changed'}"
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


def files_under(folder: Path) -> set[Path]:
    found = set()
    for root, folders, names in os.walk(folder):
        found.update(Path(root) / name for name in names + folders)
    return found


@pytest.fixture
def no_model_work(no_model_work, monkeypatch):
    """Every task gets fallback answers at once (conftest's); the tables' per-task work is a record of the test
    inputs."""
    def ablation(solver, task, **_):
        stages = {stage: [[pair.input] for pair in task.test] for stage in tables.ABLATION_STAGES}
        correct = {stage: [False] * len(task.test) for stage in stages}
        return AblationRecord(task.id, stages, correct, correct)

    monkeypatch.setattr(tables, "ablation_task", ablation)
    monkeypatch.setattr(tables, "sampler_task", lambda solver, task, samplers=(): SamplerRecord(task.id))


@pytest.mark.processes
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
            before, tree = files_under(tmp_path), bounded_entries(tmp_path)
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
            tally.long += [(where, line[:400]) for line in (out + err).splitlines()
                           if len(line.split("\r")[-1]) > LINE_LENGTH]  # a progress bar's last state
            allowed = (tmp_path / "out", working, tmp_path / "inputs")  # where it was told to write, or read from
            tally.outside += [(where, str(path)) for path in files_under(tmp_path) - before
                              if not any(path == place or place in path.parents for place in allowed)]
            if refused(status, err):  # checked before any folder is made or claimed: nothing changed
                tally.left += [(where, change) for change in differences(tree, bounded_entries(tmp_path))]
            shutil.rmtree(tmp_path / "out", ignore_errors=True)
            for path in working.iterdir():
                path.unlink()
    print(tally.line())
    if os.environ.get("ARC_KIT_FUZZ_REPORT"):  # every finding, for a person to read
        Path(os.environ["ARC_KIT_FUZZ_REPORT"]).write_text(json.dumps(
            {"line": tally.line(), "tracebacks": tally.tracebacks, "hung": tally.hung, "outside": tally.outside,
             "raw": tally.raw, "long": tally.long, "left": tally.left}, indent=1, default=str))
    assert not (tally.tracebacks or tally.hung or tally.outside or tally.raw or tally.long or tally.left), (
        tally.line(), tally.tracebacks[:3], tally.hung[:3], tally.outside[:3], tally.raw[:3], tally.long[:3],
        tally.left[:5])


# -- the fuzz over output places: no byte of what the kit did not make changes -----------------------------------
#
# Every command with an output path is pointed at a place holding a user's files: a folder of theirs (with
# names the kit uses too: run.json, records.jsonl, worker-0/, config.json, README.md, a broken .arc-kit.json),
# a link to one, a link to nothing, a file of theirs, the input's own folder (a folder dataset, the model
# folder it reads), a copy of the checkout's kaggle_dataset/ layout, a new folder inside theirs, a folder the
# kit made for this command or for another (with the user's files added to it), with --restart,
# --overwrite or --no-resume where the command has them. Whatever it does, every entry that was there and
# that the kit did not make keeps its bytes (a link its target). ``ARC_KIT_FUZZ_OUTPUTS`` sets how many runs.
# Two families of places beyond the first ten: "linked", a folder the kit made for the command with one to three names
# of its layout made links to a user's file or folder outside it (the links are the kit's to replace; what they point
# to must keep every byte), and "lookalike", the kit's layout without the marker (refused). The suite runs each
# command once at a place of each family (the first ten, linked, lookalike).

OUTPUT_RUNS = int(os.environ.get("ARC_KIT_FUZZ_OUTPUTS", "60"))  # each command once at each family of places
USER_NAMES = ["notes.txt", "run.json", "submission.json", "records.jsonl", "scores.csv", "score.json", "config.json",
              "model.safetensors", "README.md", "tokenizer.json", "arc_kit.json", "training_log.csv",
              "evaluation.json", "sample_submission.json", "arc-agi_test_challenges.json", "t1.png", ".lock",
              ".arc-kit.json", "worker-0/records.jsonl", "claims/t1", "checkpoints/step-1/progress.json",
              "wheels/x-1.0-py3-none-any.whl", "model/config.json", "adapter/adapter_config.json", "deep/a/b.txt",
              "dataset-metadata.json", "kernel-metadata.json", "tasks.json", "ablation.md", "report.html"]
# what a user adds to a folder the kit made: names outside every layout of the kit's (there, a name of its layout is
# its own: a run's scores.csv, a model's config.json)
USER_ONLY_NAMES = ["notes.txt", "deep/a/b.txt", "my data.bin", "mine/records.jsonl", "README.user.md",
                   # names a layout's patterns once took: near its names, never one of them
                   "backup_records.jsonl", "records.jsonl.bak", "worker-notes/records.jsonl", "worker-0/mine.txt",
                   "claims.txt", "adapter/notes.txt", "my.safetensors", "model-final.safetensors",
                   "checkpoints/notes.txt", "checkpoints/step-x/progress.json", "wheels/notes.txt", "model/notes.json",
                   "part-1/notes.txt", "arc-agi_mine.json"]
# what a user adds inside a kit folder's own sub-folders, where the folder's kind does not name it (the kit's
# ray-logs, a checkpoint, a worker folder; an adapter folder in a model folder no command writes one into)
INSIDE_NAMES = ["ray-logs/mine.txt", "ray-logs/session_2026-12-02_00-55-08_263991_7446/notes.txt",
                "adapter/README.md", "checkpoints/step-1/notes.txt", "worker-0/notes.txt"]
TINY_TRAINING = ["--steps", "1", "--batch-size", "1", "--accumulation", "1", "--save-every", "1", "--max-len", "256",
                 "--device", "cpu"]


def user_bytes(rng: random.Random) -> bytes:
    return rng.choice([b"", b"{}", b'{"settings": 3}', b"not json\n", bytes(rng.randrange(256) for _ in range(64)),
                       json.dumps({"t1": PLAIN}).encode()])


def add_user_files(rng: random.Random, folder: Path, names: list[str] = USER_NAMES) -> None:
    """A user's files in ``folder`` (made if missing): ``names`` (by default names the kit uses too, a broken
    marker among them), and a link to a file of theirs."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in rng.sample(names, rng.randint(1, min(5, len(names)))):
        path = folder / name
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(user_bytes(rng))
    if rng.random() < 0.3:
        outside = folder.parent / f"{folder.name}-theirs.txt"
        outside.write_text("the user's, outside")
        link = folder / rng.choice(["linked.txt", "records.jsonl", "worker-1", "model"] if names is USER_NAMES
                                   else ["linked.txt", "mine.txt"])
        if not link.exists() and not link.is_symlink():
            link.symlink_to(outside)


@dataclass
class OutputCase:
    """One command run on one place: its name, the place's kind and the flag given."""

    command: str
    place: str
    flag: str


@dataclass
class OutputTally:
    runs: int = 0
    cases: set = field(default_factory=set)
    statuses: dict = field(default_factory=dict)
    tracebacks: list = field(default_factory=list)
    lost: list = field(default_factory=list)  # an entry of the user's gone
    changed: list = field(default_factory=list)  # an entry of the user's with other bytes (or another target)
    refusals: list = field(default_factory=list)  # (case, the line it ended with), for a person to read
    left: list = field(default_factory=list)  # a refused run that changed the file system (the kit's files too)

    def line(self) -> str:
        return (f"output fuzz: {self.runs} runs, {len(self.cases)} cases (command x place x flag), exit statuses "
                f"{dict(sorted(self.statuses.items()))}, {len(self.tracebacks)} tracebacks, {len(self.lost)} files "
                f"lost, {len(self.changed)} files changed, {len(self.left)} refusals that changed a file")


class OutputPlaces:
    """Builds the places a command's output is pointed at, and the inputs every command reads, below ``root``."""

    def __init__(self, root: Path, rng: random.Random, model: Path):
        self.root, self.rng, self.model = root, rng, root / "model"
        shutil.copytree(model, self.model)  # the model every command reads: a user's folder, below root
        self.good = good_files(root / "good")
        self.tasks_folder = root / "good" / "tasks"
        self.tasks_folder.mkdir()
        for task_id in ("t1", "t2"):
            (self.tasks_folder / f"{task_id}.json").write_text(json.dumps(PLAIN))
        self.kaggle_input = root / "good" / "kaggle"
        (self.kaggle_input / "competition").mkdir(parents=True)
        (self.kaggle_input / "competition" / "arc-agi_test_challenges.json").write_text(
            json.dumps({"t1": PLAIN, "t2": PLAIN}))
        self.freeze = root / "good" / "freeze.txt"
        self.freeze.write_text("torch==2.10.0\nnumpy==2.0.0\n")
        self.sudoku = root / "good" / "sudoku.csv"
        sudoku.write_csv(self.sudoku, sudoku.generate_puzzles(1, 0))

    def place(self, kind: str, folder: Path, made) -> Path:
        """The path to give as output for a place of ``kind`` in ``folder``; ``made(path)`` makes the kit's own."""
        rng = self.rng
        if kind in ("users", "link", "inside"):
            add_user_files(rng, folder / "theirs")
            if kind == "link":
                (folder / "link").symlink_to(folder / "theirs")
                return folder / "link"
            return folder / "theirs" / ("new" if kind == "inside" else "")
        if kind == "dangling":
            (folder / "link").symlink_to(folder / "nowhere")
            return folder / "link"
        if kind == "file":
            (folder / "theirs.txt").write_bytes(user_bytes(rng) or b"x")
            return folder / "theirs.txt"
        if kind == "kaggle":
            shipped = folder / "kaggle_dataset"
            shutil.copytree(ROOT / "kaggle_dataset", shipped, ignore=shutil.ignore_patterns("*.safetensors"))
            for name in ("delta-00001-of-00002.safetensors", "delta-00002-of-00002.safetensors"):
                (shipped / "model" / name).write_bytes(b"stand-in weights")
            return shipped
        if kind == "empty":
            (folder / "empty").mkdir(parents=True)
            return folder / "empty"
        return made(folder / "made")  # "made" (this command's kind) or "other" (another kind's)


ROOT = Path(__file__).resolve().parents[1]
ITSELF = "itself"  # a place the command makes by running once, as it is given


def output_commands(places: OutputPlaces) -> dict:
    """Each command with an output path: (its argv for an output, its flags, what makes its own kind of place)."""
    good, model = places.good, str(places.model)
    solve_like = ["--model", model, *QUICK]

    def via(*argv):  # a place made by the command itself, run as a user would
        def make(path: Path) -> Path:
            assert main([*(str(arg) for arg in argv), str(path)]) == 0, argv
            return path
        return make

    def kind_only(module: str, name: str, command: str):
        def make(path: Path) -> Path:
            import importlib

            from arc_kit.outputs import claim_folder

            return claim_folder(path, getattr(importlib.import_module(module), name), command)
        return make

    def picture(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        assert main(["show", "t1", "--dataset", str(good["tasks"]), "--out", str(path / "t1.png")]) == 0
        return path / "t1.png"

    return {
        "solve": (lambda out: ["solve", "--dataset", places.tasks_folder, "--out", out, *solve_like],
                  ["", "--restart"], ITSELF),
        "dry-run": (lambda out: ["dry-run", "--dataset", good["tasks"], "--tasks", "1", "--out", out, *solve_like],
                    ["", "--restart"], ITSELF),
        "ablation": (lambda out: ["ablation", "--dataset", good["tasks"], "--solutions", good["solutions"], "--out",
                                  out, *solve_like], ["", "--restart"], ITSELF),
        "samplers": (lambda out: ["samplers", "--dataset", good["tasks"], "--solutions", good["solutions"], "--out",
                                  out, *solve_like], ["", "--restart"], ITSELF),
        "kaggle run": (lambda out: ["kaggle", "run", "--input", places.kaggle_input, "--working", out, "--model",
                                    model, "--job", "smoke", "--smoke-tasks", "1", *QUICK[:-2]],
                       ["", "--restart"], ITSELF),
        "kaggle build": (lambda out: ["kaggle", "build", "--out", out, "--owner", "someone"],
                         ["", "--overwrite"], kind_only("arc_kit.kaggle.dataset_build", "DATASET_KIND",
                                                        "kaggle build")),
        "create-model": (lambda out: ["create-model", "--preset", "micro", "--out", out], ["", "--overwrite"],
                         via("create-model", "--preset", "micro", "--out")),
        "pretrain": (lambda out: ["pretrain", "--model", "micro", "--out", out, "--tasks", good["tasks"],
                                  *TINY_TRAINING], ["", "--no-resume"],
                     kind_only("arc_kit.model.training", "TRAINING_KIND", "pretrain")),
        "base merge": (lambda out: ["base", "merge", model, out], ["", "--overwrite"],
                       via("base", "merge", model)),
        "shrink": (lambda out: ["shrink", model, out], ["", "--overwrite"],  # the micro model's tokenizer cannot
                   kind_only("arc_kit.model.folders", "MODEL_KIND", "shrink")),  # be shrunk: refused after the check
        "base build": (lambda out: ["base", "build", "smollm2-135m", "--offline", "--out", out], [""],
                       kind_only("arc_kit.model.bases", "BASE_KIND", "base build")),
        "export": (lambda out: ["export", "--dataset", good["tasks"], "--out", out], [""],
                   via("export", "--dataset", good["tasks"], "--out")),
        "show": (lambda out: ["show", "t1", "--dataset", good["tasks"], "--out", out], [""], picture),
        "sudoku generate": (lambda out: ["sudoku", "generate", "--count", "1", "--out", out], [""], None),
        "sudoku train": (lambda out: ["sudoku", "train", "--model", "micro", "--puzzles", places.sudoku, "--out", out,
                                      *TINY_TRAINING], ["", "--no-resume"],
                         kind_only("arc_kit.model.training", "TRAINING_KIND", "sudoku train")),
        "sudoku evaluate": (lambda out: ["sudoku", "evaluate", "--model", model, "--puzzles", places.sudoku, "--out",
                                         out, "--limit", "1", "--max-forward-calls", "5", "--augmentations", "1",
                                         "--scoring-augmentations", "1", "--no-greedy-check"],
                            ["", "--no-resume"],
                            kind_only("arc_kit.sudoku.experiment", "EVALUATION_KIND", "sudoku evaluate")),
        "held-out": (lambda out: ["held-out", f"m={model}", "--dataset", good["tasks"], "--tasks", "1", "--out", out],
                     [""], None),
        "score": (lambda out: ["score", "--submission", good["submission"], "--solutions", good["solutions"],
                               "--table", out], [""], None),
        "kaggle image": (lambda out: ["kaggle", "image", places.freeze, "--out", out], [""], None),
    }


def made_by(argv_for):
    """What makes a place by running the command itself on it (a run folder, with its records)."""
    def make(path: Path) -> Path:
        assert main([str(arg) for arg in argv_for(path)]) == 0, argv_for(path)
        return path
    return make


def folder_kinds() -> dict:
    """The kind of folder each command writes (``outputs.FolderKind``: its layout, its earlier kits' look)."""
    from arc_kit.data.datasets import EXPORT_KIND
    from arc_kit.kaggle.dataset_build import DATASET_KIND
    from arc_kit.model.bases import BASE_KIND
    from arc_kit.model.folders import BUILT_MODEL_KIND, MODEL_KIND
    from arc_kit.model.training import TRAINING_KIND
    from arc_kit.run.runs import RUN_KIND
    from arc_kit.sudoku.experiment import EVALUATION_KIND

    return {"solve": RUN_KIND, "dry-run": RUN_KIND, "ablation": RUN_KIND, "samplers": RUN_KIND, "kaggle run": RUN_KIND,
            "kaggle build": DATASET_KIND, "create-model": BUILT_MODEL_KIND, "base merge": MODEL_KIND,
            "shrink": MODEL_KIND,
            "pretrain": TRAINING_KIND, "sudoku train": TRAINING_KIND, "base build": BASE_KIND, "export": EXPORT_KIND,
            "sudoku evaluate": EVALUATION_KIND}


def kit_folder_of(name: str, out: Path) -> Path:
    """The kit's folder a command writes for output ``out``: ``out`` itself, or below it (kaggle run's run folder)."""
    return out / "arc_kit_run" if name == "kaggle run" else out


def victims(folder: Path) -> tuple[Path, Path]:
    """A file and a folder of the user's, outside every kit folder: what links inside kit folders point to."""
    (folder / "victims" / "folder").mkdir(parents=True)
    (folder / "victims" / "photo.jpg").write_bytes(b"\xff\xd8 the user's photo")
    (folder / "victims" / "folder" / "notes.txt").write_text("the user's notes")
    return folder / "victims" / "photo.jpg", folder / "victims" / "folder"


def link_layout(rng: random.Random, kit: Path, kind, file_victim: Path, folder_victim: Path) -> None:
    """Make one to three entries of ``kind``'s layout in ``kit`` links to the user's file or folder (what was there
    goes): a file's name to the file, a sub-folder's name to the folder (no write follows one), or a file's
    name a hard link to the user's file (a second name for its bytes: nothing is appended through it)."""
    names = [entry.replace("{n}", "0").replace("**", "x").replace("*", "x") for entry in kind.owned]
    names += list(kind.quiet)
    for entry in rng.sample(names, min(len(names), rng.randint(1, 3))):
        parts = entry.split("/")
        depth = rng.randint(1, len(parts))
        link = kit.joinpath(*parts[:depth])
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link)
        link.parent.mkdir(parents=True, exist_ok=True)
        target = folder_victim if depth < len(parts) else rng.choice([file_victim, folder_victim, "hard"])
        if target == "hard":
            os.link(file_victim, link)
        else:
            link.symlink_to(target)


def lookalike(rng: random.Random, kit: Path, kind) -> None:
    """Files of ``kind``'s layout as the kit writes them, with no marker (refused: a marker or nothing); for the
    other kinds, its layout's names with the user's bytes."""
    from arc_kit.settings import SolveSettings

    kit.mkdir(parents=True, exist_ok=True)
    files = {"run": {"run.json": json.dumps({"settings": rng.choice([SolveSettings().to_json(), {}])}),
                     "records.jsonl": ""},
             "training": {"checkpoints/step-3/progress.json": '{"step": 3}', "arc_kit.json": '{"training": {}}'},
             "sudoku evaluation": {"evaluation.json": json.dumps({"model": "m", "settings": {}})},
             "base": {"arc_kit.json": json.dumps({"base": {"name": "smollm2-135m"}})}}.get(kind.name)
    if files is None:
        names = [entry.replace("{n}", "1").replace("**", "x").replace("*", "x") for entry in kind.owned]
        files = {name: user_bytes(rng).decode("latin-1") for name in rng.sample(names, min(3, len(names)))}
    for name, text in files.items():
        (kit / name).parent.mkdir(parents=True, exist_ok=True)
        (kit / name).write_text(text, encoding="latin-1")


RUN_COMMANDS = {"solve", "dry-run", "ablation", "samplers"}  # their folders are of one kind, a run: each resumes in
# another's (a records.jsonl there is the run's, whichever of them wrote the marker)
FILE_OUTPUTS = ("show", "sudoku generate", "held-out", "score", "kaggle image")


def input_place(argv: list, name: str, places: OutputPlaces) -> Path:
    """The input's own place as the output: the file a file-writing command reads, else the folder it reads
    from (a folder dataset, the one holding its input file, the model folder)."""
    inputs = [Path(arg) for arg in map(str, argv) if places.root in Path(arg).parents and Path(arg).exists()]
    first = inputs[0] if inputs else places.model
    if name in FILE_OUTPUTS:
        return first if first.is_file() else places.good["tasks"]
    return first if first.is_dir() else first.parent


@pytest.fixture
def no_wheel_built(monkeypatch):
    """kaggle build stops where it would build the kit's wheel (pip, minutes, a network): its folders are claimed
    by then, which is what the fuzz checks."""
    import errno

    from arc_kit.kaggle import dataset_build

    def no_wheel(destination):
        raise OSError(errno.ENOSPC, "fuzz: no wheel is built")
    monkeypatch.setattr(dataset_build, "build_wheel", no_wheel)


@pytest.fixture
def workers_in_process(monkeypatch):
    """kaggle run's solving replaced by fallback records written in this process (no Ray, no model)."""
    from arc_kit.model.description import read_model_folder
    from arc_kit.run import jobs
    from arc_kit.run.runs import SolveRun, open_run

    real = jobs.solve_job

    def in_process(tasks, model, settings, out, *, submission_path=None, **options):
        if submission_path is None:  # solve's and dry-run's own call: as it is
            return real(tasks, model, settings, out, **options)
        settings = settings.replace(max_len=read_model_folder(model).token_budget(settings.max_len))
        open_run(out, settings, {}, command="kaggle run")
        return SolveRun(Path(out), {task_id: fallback_record(task_id, "fuzz") for task_id in tasks.ids},
                        Path(submission_path))
    monkeypatch.setattr(jobs, "solve_job", in_process)


@pytest.mark.processes
@pytest.mark.slow
def test_no_command_changes_a_byte_of_what_it_did_not_make(capsys, tmp_path, monkeypatch, micro_model, no_model_work,
                                                           no_wheel_built, workers_in_process):
    rng = random.Random(SEED + 35)
    places = OutputPlaces(tmp_path / "common", rng, micro_model)
    commands_by_name = output_commands(places)
    kinds_of = folder_kinds()
    kinds = ["users", "link", "dangling", "file", "input", "kaggle", "inside", "empty", "made", "other", "linked",
             "lookalike"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ARC_KIT_CACHE", str(tmp_path / "cache"))  # no base's weights: base build stops after its claim
    tally = OutputTally()
    names = list(commands_by_name)
    for number in range(OUTPUT_RUNS):
        name = names[number % len(names)] if number < 3 * len(names) else rng.choice(names)
        argv_for, flags, made = commands_by_name[name]
        if made == ITSELF:
            made = made_by(argv_for)
        # each command once at a place of each family (the first ten places; links inside its own folder; an earlier
        # kit's look-alike), then at random
        place = rng.choice(kinds[:-2]) if number < len(names) else \
            ("linked" if number < 2 * len(names) else "lookalike") if number < 3 * len(names) else rng.choice(kinds)
        flag = rng.choice(flags)
        folder = tmp_path / f"case-{number}"
        folder.mkdir()
        if place in ("linked", "lookalike") and name not in kinds_of:  # a file output: a link to a user's file
            place = "link" if place == "linked" else "file"
        if place in ("made", "linked") and made is None:
            place = "users"
        other_name = rng.choice([n for n in commands_by_name if commands_by_name[n][2] is not None and n != name])
        other = commands_by_name[other_name][2]
        other = made_by(commands_by_name[other_name][0]) if other == ITSELF else other
        if place == "input":
            out = input_place(argv_for(Path("x")), name, places)
        elif place == "lookalike":
            out = folder / "old"
            lookalike(rng, kit_folder_of(name, out), kinds_of[name])
        else:
            out = places.place("made" if place == "linked" else place, folder, made if place in ("made", "linked")
                               else other)
        if place == "linked":
            link_layout(rng, kit_folder_of(name, out), kinds_of[name], *victims(folder))
        kit_made = {key for key in file_tree(tmp_path) if key.startswith(f"case-{number}/")
                    and not key.startswith(f"case-{number}/victims")} \
            if place in ("made", "other", "linked") else set()  # what the kit made for the place: its to change
        if place in ("made", "other", "linked", "lookalike") and out.is_dir():  # the user's files added
            same_kind = place != "other" or {name, other_name} <= RUN_COMMANDS  # a run's folder: its names the run's
            inside = [entry for entry in INSIDE_NAMES if name in kinds_of and not kinds_of[name].owns(entry)]
            add_user_files(rng, out, USER_ONLY_NAMES + inside if same_kind else USER_NAMES)
        else:
            add_user_files(rng, folder / "beside")
        everything = file_tree(tmp_path)
        protected = {key: value for key, value in everything.items() if key not in kit_made}
        argv = [str(arg) for arg in argv_for(out)] + ([flag] if flag else [])
        if place == "kaggle" and name == "kaggle build":
            monkeypatch.setenv("ARC_KIT_MODEL", str(out / "model"))  # the shipped model is the default one
        status, stdout, stderr, hung = run_once(argv, capsys)
        monkeypatch.setenv("ARC_KIT_MODEL", str(places.model))
        tally.runs += 1
        tally.cases.add((name, place, flag))
        key = str(status if isinstance(status, int) else type(status).__name__)
        tally.statuses[key] = tally.statuses.get(key, 0) + 1
        where = (number, name, place, flag)
        if not isinstance(status, int) or status not in (0, 1, 2) or "Traceback" in stdout + stderr or hung:
            tally.tracebacks.append((where, repr(status), stderr[-400:]))
        tally.refusals.append((where, status, (stderr.strip().splitlines() or [""])[-1][-300:]))
        after = file_tree(tmp_path)
        if refused(status, stderr):
            tally.left += [(where, change) for change in differences(everything, after)]
        tally.lost += [(where, path) for path in protected if path not in after]
        tally.changed += [(where, path) for path, value in protected.items() if path in after and after[path] != value]
    print(tally.line())
    if os.environ.get("ARC_KIT_FUZZ_REPORT"):
        Path(os.environ["ARC_KIT_FUZZ_REPORT"]).with_suffix(".outputs.json").write_text(json.dumps(
            {"line": tally.line(), "tracebacks": tally.tracebacks, "lost": tally.lost, "changed": tally.changed,
             "left": tally.left, "runs": tally.refusals},
            indent=1, default=str))
    assert not tally.tracebacks and not tally.lost and not tally.changed and not tally.left, (
        tally.line(), tally.tracebacks[:3], tally.lost[:5], tally.changed[:5], tally.left[:5])


# -- hostile model folders and special files -------------------------------------------------------------------
#
# Every command that reads a model folder gets one that is hostile: it asks for its own code (auto_map in its config,
# in its tokenizer's, or in an adapter's base), it is a "bomb" (sizes no model has, a sparse weights file of 64 GiB, a
# tokenizer file of 2 GiB), or its files are links (to a FIFO, to /dev/zero, to a user's file outside). Every file
# option gets a FIFO nobody writes and /dev/zero. Of every run: status 0, 1 or 2, no traceback, no hang, no prompt,
# the folder's code never run, and no byte changed of what was there (the bombs by size and time). The suite runs a
# share (``ARC_KIT_FUZZ_HOSTILE``: "all" for every pair).

HOSTILE_ALL = os.environ.get("ARC_KIT_FUZZ_HOSTILE", "") == "all"
HOSTILE_MODELS = ("code-config", "code-tokenizer", "code-base", "code-files", "bomb-sizes", "bomb-weights",
                  "bomb-tokenizer", "bomb-config", "link-fifo", "link-device", "link-outside", "link-folder")
BOMB_BYTES = 64 * 2**30  # a sparse file: no disk, no memory, unless it is read


def hostile_model_folder(kind: str, source: Path, root: Path) -> Path:
    """A model folder of ``source``'s, made hostile one way (``HOSTILE_MODELS``); its code would leave root/RAN."""
    folder = root / kind
    shutil.copytree(source, folder)
    (folder / ".arc-kit.json").unlink(missing_ok=True)
    (folder / "evil.py").write_text(f"open({str(root / 'RAN')!r}, 'w').write('ran')\n"
                                    "from transformers import LlamaConfig as EvilConfig\n")
    evil = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel",
            "AutoTokenizer": ["evil.EvilTokenizer", None]}

    def rewrite(name: str, **changes) -> None:
        (folder / name).write_text(json.dumps({**json.loads((folder / name).read_text()), **changes}))

    def linked(name: str, target: Path) -> None:
        (folder / name).unlink()
        (folder / name).symlink_to(target)

    if kind == "code-config":
        rewrite("config.json", auto_map=evil)
    elif kind == "code-tokenizer":
        rewrite("tokenizer_config.json", auto_map=evil)
    elif kind == "code-base":  # an adapter whose base asks for code
        base = hostile_model_folder("code-config", source, root / "base-of") if not (root / "base-of").exists() \
            else root / "base-of" / "code-config"
        for path in list(folder.iterdir()):
            if path.name != "evil.py":
                path.unlink()
        (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
                                                                "base_model_name_or_path": str(base),
                                                                "target_modules": ["q_proj"]}))
    elif kind == "code-files":  # code that nothing asks for (ignored, and said so by check-model)
        (folder / "modeling_llama.py").write_text((folder / "evil.py").read_text())
    elif kind == "bomb-sizes":
        rewrite("config.json", hidden_size=10**9, num_hidden_layers=10**6)
    elif kind == "bomb-weights":
        os.truncate(folder / "model.safetensors", BOMB_BYTES)
    elif kind == "bomb-tokenizer":
        os.truncate(folder / "tokenizer.json", 2 * 2**30)
    elif kind == "bomb-config":
        os.truncate(folder / "config.json", 2**30)
    elif kind == "link-fifo":
        os.mkfifo(root / f"{kind}.fifo")
        linked("config.json", root / f"{kind}.fifo")
    elif kind == "link-device":
        linked("tokenizer.json", Path("/dev/zero"))
    elif kind == "link-outside":
        (root / "photo.jpg").write_bytes(b"\xff\xd8 the user's photo")
        linked("model.safetensors", root / "photo.jpg")
    elif kind == "link-folder":
        (root / "users").mkdir(exist_ok=True)
        (root / "users" / "notes.txt").write_text("mine")
        shutil.rmtree(folder)
        folder.symlink_to(root / "users")
    return folder


def model_readers(good: dict, sudoku_csv: Path, kaggle_input: Path, model: Path, out: Path) -> dict[str, list]:
    """Every command that reads a model folder, given ``model`` there and good arguments elsewhere."""
    return {"check-model": ["check-model", model],
            "solve": ["solve", "--dataset", good["tasks"], "--out", out, "--model", model, *QUICK],
            "kaggle build": ["kaggle", "build", "--out", out, "--model", model, "--owner", "someone"],
            "shrink": ["shrink", model, out], "base merge": ["base", "merge", model, out],
            "held-out": ["held-out", f"m={model}", "--dataset", good["tasks"], "--tasks", "1", "--device", "cpu"],
            "estimate": ["estimate", "--model", model, "--dataset", good["tasks"], "--tasks", "1"],
            "sudoku evaluate": ["sudoku", "evaluate", "--model", model, "--puzzles", sudoku_csv, "--out", out,
                                "--limit", "1", "--max-forward-calls", "5", "--augmentations", "1",
                                "--scoring-augmentations", "1", "--no-greedy-check"],
            "pretrain": ["pretrain", "--model", model, "--out", out, "--tasks", good["tasks"], *TINY_TRAINING],
            "sudoku train": ["sudoku", "train", "--model", model, "--puzzles", sudoku_csv, "--out", out,
                             *TINY_TRAINING],
            "kaggle run": ["kaggle", "run", "--input", kaggle_input, "--working", out, "--model", model, "--job",
                           "smoke", "--smoke-tasks", "1", *QUICK[:-2]],
            "bench": ["bench", "--model", model, "--dataset", good["tasks"], "--tasks", "1", "--device", "cpu"]}


def bounded_entries(root: Path) -> dict[str, tuple]:
    """``entries`` that never reads a special file, nor a file larger than 16 MiB (its size and time instead)."""
    found = {}
    for folder, folders, names in os.walk(root):
        for name in folders + names:
            path = Path(folder) / name
            status = path.lstat()
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = ("folder",)
            elif not path.is_file() or status.st_size > 2**24:
                found[key] = ("special or large", status.st_mode, status.st_size, status.st_mtime_ns)
            else:
                found[key] = ("file", path.read_bytes())
    return found


@dataclass
class SpecialTally:
    """What the hostile-model and special-file runs gave."""

    runs: int = 0
    cases: set = field(default_factory=set)
    statuses: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)  # a traceback, a hang, code run, a byte changed

    def count(self, case: tuple, status, out: str, err: str, hung: bool, problems: list) -> None:
        self.runs += 1
        self.cases.add(case)
        key = str(status if isinstance(status, int) else type(status).__name__)
        self.statuses[key] = self.statuses.get(key, 0) + 1
        if not isinstance(status, int) or status not in (0, 1, 2) or "Traceback" in out + err or hung:
            problems = [f"status {status!r}, hung {hung}: {err[-300:]}", *problems]
        self.failures += [(case, problem) for problem in problems]

    def line(self, what: str) -> str:
        return (f"{what}: {self.runs} runs, {len(self.cases)} cases, exit statuses "
                f"{dict(sorted(self.statuses.items()))}, {len(self.failures)} failures")


def changed_entries(before: dict, after: dict, skip: Path, root: Path) -> list[str]:
    """The entries of ``before`` gone or changed in ``after``, but those below ``skip`` (the command's output)."""
    kept = {key: value for key, value in before.items() if not (root / key).is_relative_to(skip)}
    return [f"{key} {'lost' if key not in after else 'changed'}" for key, value in kept.items()
            if after.get(key) != value]


@pytest.mark.slow
def test_hostile_model_folders_never_run_code_hang_or_change_a_byte(capsys, tmp_path, monkeypatch, micro_model,
                                                                     no_model_work, no_wheel_built,
                                                                     workers_in_process):
    def no_prompt(*_):
        raise AssertionError("a prompt was shown")

    monkeypatch.setattr("builtins.input", no_prompt)
    monkeypatch.setenv("ARC_KIT_CACHE", str(tmp_path / "cache"))
    places = OutputPlaces(tmp_path / "common", random.Random(SEED + 43), micro_model)
    models = tmp_path / "models"
    models.mkdir()
    folders = {kind: hostile_model_folder(kind, micro_model, models) for kind in HOSTILE_MODELS}
    tally = SpecialTally()
    readers = list(model_readers(places.good, places.sudoku, places.kaggle_input, micro_model, tmp_path))
    for index, kind in enumerate(HOSTILE_MODELS):
        chosen = readers if HOSTILE_ALL else [readers[(2 * index + step) % len(readers)] for step in (0, 1)]
        for name in chosen:
            out = tmp_path / "outs" / f"{kind}-{name.replace(' ', '-')}"
            argv = [str(arg) for arg in model_readers(places.good, places.sudoku, places.kaggle_input, folders[kind],
                                                      out)[name]]
            before = bounded_entries(tmp_path)
            status, stdout, stderr, hung = run_once(argv, capsys)
            after = bounded_entries(tmp_path)
            problems = changed_entries(before, after, out, tmp_path) + (
                [f"refused, yet {change}" for change in differences(before, after)] if refused(status, stderr) else [])
            problems += ["its code ran"] if (models / "RAN").exists() else []
            tally.count((name, kind), status, stdout, stderr, hung, problems)
    print(tally.line("hostile model folders"))
    if os.environ.get("ARC_KIT_FUZZ_REPORT"):
        Path(os.environ["ARC_KIT_FUZZ_REPORT"]).with_suffix(".models.json").write_text(json.dumps(
            {"line": tally.line("hostile model folders"), "failures": tally.failures}, indent=1, default=str))
    assert not tally.failures, (tally.line("hostile model folders"), tally.failures[:5])


def file_options(places: OutputPlaces, special: str, out: Path) -> dict[str, list]:
    """Every option of every command that reads a file (or a folder of files), given ``special`` there."""
    good, model, kaggle = places.good, str(places.model), places.kaggle_input
    return {"validate": ["validate", special],
            "validate --challenges": ["validate", good["solutions"], "--kind", "solutions", "--challenges", special],
            "score --submission": ["score", "--submission", special, "--solutions", good["solutions"]],
            "score --solutions": ["score", "--submission", good["submission"], "--solutions", special],
            "score --challenges": ["score", "--submission", good["submission"], "--solutions", good["solutions"],
                                   "--challenges", special],
            "solve --dataset": ["solve", "--dataset", special, "--out", out, "--model", model, *QUICK],
            "solve --solutions": ["solve", "--dataset", good["tasks"], "--solutions", special, "--out", out,
                                  "--model", model, *QUICK],
            "solve --model": ["solve", "--dataset", good["tasks"], "--out", out, "--model", special, *QUICK],
            "show --dataset": ["show", "t1", "--dataset", special, "--out", out / "t1.png"],
            "export --dataset": ["export", "--dataset", special, "--out", out],
            "held-out --dataset": ["held-out", f"m={model}", "--dataset", special, "--tasks", "1"],
            "estimate --records": ["estimate", "--records", special, "--dataset", good["tasks"], "--model", model],
            "worker": ["worker", special],
            "kaggle build --image-manifest": ["kaggle", "build", "--out", out, "--model", model, "--owner", "someone",
                                              "--image-manifest", special],
            "kaggle build --extra-wheels": ["kaggle", "build", "--out", out, "--model", model, "--owner", "someone",
                                            "--extra-wheels", Path(special).parent / "wheels"],
            "kaggle image": ["kaggle", "image", special, "--out", out / "image.json"],
            "kaggle run --settings": ["kaggle", "run", "--input", kaggle, "--working", out, "--model", model,
                                      "--settings", special],
            "kaggle run --input": ["kaggle", "run", "--input", Path(special).parent / "input", "--working", out,
                                   "--model", model, "--job", "smoke", "--smoke-tasks", "1"],
            "pretrain --re-arc": ["pretrain", "--model", "micro", "--out", out, "--re-arc", special, *TINY_TRAINING],
            "pretrain --tasks": ["pretrain", "--model", "micro", "--out", out, "--tasks", special, *TINY_TRAINING],
            "sudoku train --puzzles": ["sudoku", "train", "--model", "micro", "--puzzles", special, "--out", out,
                                       *TINY_TRAINING],
            "sudoku evaluate --puzzles": ["sudoku", "evaluate", "--model", model, "--puzzles", special, "--out", out],
            "sudoku generate --exclude": ["sudoku", "generate", "--count", "1", "--exclude", special, "--out",
                                          out / "p.csv"],
            "base build --weights": ["base", "build", "smollm2-135m", "--offline", "--weights", special, "--out", out],
            "check-model": ["check-model", special]}


@pytest.mark.slow
def test_every_file_option_refuses_a_fifo_or_a_device_at_once(capsys, tmp_path, monkeypatch, micro_model,
                                                              no_model_work, no_wheel_built, workers_in_process):
    monkeypatch.setenv("ARC_KIT_CACHE", str(tmp_path / "cache"))
    places = OutputPlaces(tmp_path / "common", random.Random(SEED + 44), micro_model)
    specials = tmp_path / "specials"
    (specials / "wheels").mkdir(parents=True)
    (specials / "input" / "competition").mkdir(parents=True)
    for fifo in (specials / "pipe.json", specials / "wheels" / "x-1.0-py3-none-any.whl",
                 specials / "input" / "competition" / "arc-agi_test_challenges.json"):
        os.mkfifo(fifo)
    tally = SpecialTally()
    for special in (str(specials / "pipe.json"), "/dev/zero"):
        for name, argv in file_options(places, special, tmp_path / "outs" / "x").items():
            out = tmp_path / "outs" / f"{Path(special).name}-{name.replace(' ', '-')}"
            argv = [str(arg) for arg in file_options(places, special, out)[name]]
            before = bounded_entries(tmp_path)
            status, stdout, stderr, hung = run_once(argv, capsys)
            after = bounded_entries(tmp_path)
            tally.count((name, Path(special).name), status, stdout, stderr, hung,
                        changed_entries(before, after, out, tmp_path) + (
                            [f"refused, yet {change}" for change in differences(before, after)]
                            if refused(status, stderr) else []))
    print(tally.line("special files"))
    if os.environ.get("ARC_KIT_FUZZ_REPORT"):
        Path(os.environ["ARC_KIT_FUZZ_REPORT"]).with_suffix(".specials.json").write_text(json.dumps(
            {"line": tally.line("special files"), "failures": tally.failures}, indent=1, default=str))
    assert not tally.failures, (tally.line("special files"), tally.failures[:5])
