"""The ``arc-kit`` commands on files: validate, export, score, show, datasets.

Each parses, makes one call into ``arc_kit.data`` and prints; it knows nothing of models or solving.
"""

from __future__ import annotations

import sys
from pathlib import Path

from arc_kit.cli.options import (
    MAX_COUNT,
    command,
    load_given_tasks,
    max_side_argument,
    number_argument,
    shown_table,
    tasks_argument,
)
from arc_kit.names import shown
from arc_kit.outputs import claim_file, replacing


@command("validate", "check a challenges, solutions or submission file (or a folder of task files) and list every "
                     "problem")
def setup_validate(parser):
    parser.add_argument("file", help="the JSON file to check, or a folder of task files (each is checked)")
    parser.add_argument("--kind", choices=["auto", "challenges", "solutions", "submission"], default="auto")
    parser.add_argument("--challenges", help="check task ids and test counts against this challenges file")
    max_side_argument(parser, "a grid's side (challenges, solutions and submissions alike)")

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
    tasks_argument(parser, default=None)
    parser.add_argument("--out", required=True, help="folder to write into: new, empty or an earlier export's")
    parser.add_argument("--split", default=None, help="the name in arc-agi_<split>_challenges.json (default: the "
                                                      "dataset's split, e.g. evaluation; 'test' mimics a Kaggle run)")
    number_argument(parser, "--limit", int, "only the first N tasks by id (0: all)", at_least=0, at_most=MAX_COUNT)

    def run(args):
        from arc_kit.data.datasets import export_kaggle

        if args.dataset is None:
            raise SystemExit("arc-kit export: error: --dataset is required")
        tasks = load_given_tasks(args)
        if args.limit:
            tasks = tasks.head(args.limit)
        split = args.split or (tasks.name.rsplit("/", 1)[-1] if "/" in tasks.name else "evaluation")
        for kind, path in export_kaggle(tasks, args.out, split).items():
            print(f"wrote {kind}: {path}")
        print(f"{len(tasks)} tasks, {sum(tasks.test_counts().values())} test inputs")
    return run


@command("score", "score a submission against solutions with the competition's metric")
def setup_score(parser):
    parser.add_argument("--submission", required=True)
    parser.add_argument("--solutions", required=True, help="a Kaggle solutions JSON (or a dataset name)")
    parser.add_argument("--challenges", help="also check the submission against this challenges file")
    parser.add_argument("--table", help="write the per-task table to this CSV file (a new file)")
    max_side_argument(parser, "a grid's side, the answers' too")

    def run(args):
        from arc_kit.data.datasets import load_challenges, load_solutions
        from arc_kit.data.submission import score_file

        if args.table:  # before any work: a file of the user's is never replaced
            claim_file(args.table, "score", option="--table")
        challenges = (load_challenges(args.challenges, strict=False, max_side=args.max_side) if args.challenges
                      else None)
        score, problems = score_file(args.submission, load_solutions(args.solutions, max_side=args.max_side),
                                     challenges, max_side=args.max_side)
        print(shown_table(score.table))
        print(score)
        if args.table:
            with replacing(args.table, newline="") as handle:  # never through a link; a lone surrogate escaped
                score.table.to_csv(handle, index=False)
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
    tasks_argument(parser)
    parser.add_argument("--out", help="PNG file to write, new or one show wrote, or a folder to write <task>.png into "
                                      "(default: <task>.png in the working folder; an id that is no safe file name "
                                      "gets a readable part and a hash)")
    parser.add_argument("--augmentation", help="an augmentation key such as s5-c3012456789")

    def run(args):
        from arc_kit.data.plotting import save_task_picture

        out = save_task_picture(load_given_tasks(args).lookup(args.task), args.out, args.augmentation)
        print(f"wrote {out}")
    return run


@command("datasets", "list the dataset names that --dataset accepts")
def setup_datasets(parser):
    def run(args):
        from arc_kit.data.datasets import dataset_names

        print("\n".join(dataset_names()))
    return run
