"""The ``arc-kit sudoku`` command: the paper's Sudoku experiment (generate puzzles, train on them, evaluate DFS +
PoE top-1).

It parses, makes one call into ``arc_kit.sudoku`` and prints; how puzzles are made, trained on and solved lives
there, not here.
"""

from __future__ import annotations

from arc_kit.cli.options import (
    MAX_COUNT,
    add_settings_options,
    command,
    device_argument,
    number_argument,
    print_training,
    settings_from_options,
)
from arc_kit.outputs import claim_file
from arc_kit.settings import SudokuEvalSettings, TrainingSettings


@command("sudoku", "the paper's Sudoku experiment: generate puzzles, train on them, evaluate DFS + PoE top-1")
def setup_sudoku(parser):
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    _add_generate_arguments(actions)
    _add_train_arguments(actions)
    _add_evaluate_arguments(actions)

    def run(args):
        from arc_kit import sudoku

        if args.action == "generate":
            return _generate(args)
        pairs = sudoku.load_csv(args.puzzles, limit=args.limit)
        if args.action == "train":
            return _train(args, pairs)
        return _evaluate(args, pairs)
    return run


def _add_generate_arguments(actions) -> None:
    generate = actions.add_parser("generate", help="puzzles with a unique solution, from a seed, as a CSV "
                                                   "(puzzle,solution,clues; the Sudoku 3M layout)")
    number_argument(generate, "--count", int, "how many puzzles", at_least=1, at_most=10**8, required=True)
    number_argument(generate, "--seed", int, "names the set: puzzle i comes from (seed, i)", at_least=0, below=2**63,
                    default=0)
    generate.add_argument("--clues", default="sudoku-3m", help="target clue counts: sudoku-3m (that set's "
                          "histogram, 22-27 nearly all) or a range like 22-27, drawn uniformly (default: %(default)s)")
    generate.add_argument("--exclude", nargs="*", default=[], metavar="CSV",
                          help="puzzle files whose solution grids must not recur (keeps a test set disjoint)")
    generate.add_argument("--out", required=True, help="the CSV file to write (a new file)")


def _add_train_arguments(actions) -> None:
    train = actions.add_parser("train", help="fine-tune (or train a preset from scratch) on puzzles; resumes")
    train.add_argument("--model", required=True, help="a model folder, or a preset (micro, tiny, ...)")
    train.add_argument("--puzzles", required=True, help="a CSV with puzzle,solution columns")
    number_argument(train, "--limit", int, "only the first N puzzles", at_least=1, at_most=MAX_COUNT)
    number_argument(train, "--copies", int, "augmented views per puzzle in the pool (default: %(default)s)",
                    at_least=1, at_most=10**6, default=1000)
    train.add_argument("--out", required=True)
    train.add_argument("--no-resume", action="store_true")
    device_argument(train)
    add_settings_options(train, TrainingSettings(), "training settings (defaults: from-scratch for a preset, "
                                                    "else the paper's)")


def _add_evaluate_arguments(actions) -> None:
    evaluate = actions.add_parser("evaluate", help="DFS under augmentations, product of experts, top-1 accuracy")
    evaluate.add_argument("--model", required=True)
    evaluate.add_argument("--puzzles", required=True, help="a CSV with puzzle,solution columns")
    number_argument(evaluate, "--limit", int, "only the first N puzzles", at_least=1, at_most=MAX_COUNT)
    evaluate.add_argument("--out", required=True, help="folder for records.jsonl, metrics.json and the plot; "
                                                       "puzzles already there are kept (resumes)")
    evaluate.add_argument("--no-resume", action="store_true", help="solve every puzzle again")
    device_argument(evaluate, "cpu")
    number_argument(evaluate, "--minutes", float, "start no new puzzle after this long; the metrics cover the puzzles "
                    "done", above=0, at_most=525600)
    add_settings_options(evaluate, SudokuEvalSettings(), "evaluation settings (the paper's Sudoku recipe)")


def _generate(args) -> None:
    from arc_kit import sudoku

    claim_file(args.out, "sudoku generate")  # before any work: a file of the user's is never replaced
    excluded = [pair for path in args.exclude for pair in sudoku.load_csv(path, check=False)]
    pairs = sudoku.generate_puzzles(args.count, args.seed, sudoku.parse_clues(args.clues), progress=True,
                                    exclude=excluded)
    sudoku.write_csv(args.out, pairs)
    clues = [sudoku.clue_count(pair.input) for pair in pairs]
    print(f"wrote {args.out}: {len(pairs)} puzzles, each with a unique solution, {min(clues)}-{max(clues)} "
          f"clues (mean {sum(clues) / len(clues):.2f}; by count {sudoku.clue_histogram(pairs)})"
          + (f", none on a solution grid of {len(excluded)} excluded puzzles" if excluded else ""))


def _train(args, pairs) -> None:
    """``sudoku train``: fine-tune (or train from scratch) on ``pairs``; the main process reports."""
    from arc_kit.model.training import training_settings_for
    from arc_kit.sudoku.experiment import train as train_sudoku

    settings = settings_from_options(args, training_settings_for(args.model))
    result = train_sudoku(args.model, args.out, pairs, settings, copies=args.copies,
                          resume=not args.no_resume, device=args.device)
    print_training(result)


def _evaluate(args, pairs) -> None:
    import json

    from arc_kit.sudoku.experiment import evaluate as evaluate_sudoku

    metrics = evaluate_sudoku(args.model, pairs, args.out, settings_from_options(args, SudokuEvalSettings()),
                              device=args.device, minutes=args.minutes, resume=not args.no_resume)
    print(json.dumps(metrics, indent=1))
