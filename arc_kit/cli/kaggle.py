"""The ``arc-kit kaggle`` command: build the Kaggle dataset folder, check it here as Kaggle would run it, make
the image manifest, or run the competition job.

It parses, makes one call into ``arc_kit.kaggle`` and prints; what the dataset holds and how the job keeps
to its clock live there, not here.
"""

from __future__ import annotations

import json
from pathlib import Path

from arc_kit.cli.options import (
    MAX_WORKERS,
    add_settings_options,
    command,
    model_path,
    number_argument,
    overwrite_argument,
    preset_arguments,
    restart_argument,
    settings_from_options,
)
from arc_kit.names import listed
from arc_kit.outputs import claim_file, small_json
from arc_kit.settings import CompetitionSettings, SolveSettings, changed, solve_preset


@command("kaggle", "Kaggle: build the dataset folder, check it here as Kaggle runs it, or run the competition job")
def setup_kaggle(parser):
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_build_arguments(actions)
    _add_check_arguments(actions)
    _add_image_arguments(actions)
    _add_run_arguments(actions)

    def execute(args):
        return {"build": _kaggle_build, "check": _kaggle_check, "image": _kaggle_image, "run": _kaggle_run}[
            args.action](args)
    return execute


def _add_build_arguments(actions) -> None:
    build = actions.add_parser("build", help="assemble the Kaggle dataset (the package wheel, the wheels the image "
                                             "lacks, a model, metadata) and the notebook folder that submits")
    build.add_argument("--out", required=True, help="the dataset folder to write (the notebook folder goes beside "
                                                    "it, its name plus -notebook)")
    build.add_argument("--owner", help="your Kaggle user name (default: $KAGGLE_USERNAME, else the username in "
                                       "~/.kaggle/kaggle.json)")
    build.add_argument("--slug", default="arc-kit", help="the dataset's slug, its id being OWNER/SLUG "
                                                         "(default: %(default)s)")
    build.add_argument("--model", help="model folder, copied into the dataset (default: the shipped model); with "
                                       "--model-source, a local copy of that model: checked, not shipped")
    build.add_argument("--model-source", metavar="OWNER/MODEL/FRAMEWORK/VARIATION/VERSION",
                       help="a Kaggle Model the notebook reads from /kaggle/input instead of a shipped model: no model "
                            "and no base package in the dataset, the handle in the kernel metadata's model_sources; "
                            "without --model (a local copy, checked) bitsandbytes is shipped in case it is 4-bit")
    build.add_argument("--quantization", choices=["4bit"], help="the model is loaded in 4 bits (the notebook's "
                                                                "QUANTIZATION): for the check, and ships bitsandbytes")
    build.add_argument("--extra-wheels", help="a folder of further wheels to include")
    build.add_argument("--gpu-extras", action="store_true", help="also ship bitsandbytes and unsloth with what they "
                                                                 "need, for a large model in 4 bits")
    build.add_argument("--image-manifest", help="what the competition image has: kaggle_dataset/kaggle-image.json "
                                                "(the default, made by `arc-kit kaggle image` from Kaggle's list) or "
                                                "one recorded on Kaggle with the recipe in kaggle_dataset/README.md")
    build.add_argument("--title", default="arc-kit")
    overwrite_argument(build, "a dataset folder and notebook folder that an earlier kaggle build made")


def _add_check_arguments(actions) -> None:
    from arc_kit.kaggle.local_check import CHECK_CHANGES, CHECK_DATASET, CHECK_TASKS

    check = actions.add_parser("check", help="run a built dataset's notebook here as Kaggle runs it after a push (a "
                                             "fresh environment of the image's versions, a stand-in /kaggle/input, "
                                             f"the shortest {CHECK_DATASET} tasks) and say go or no-go (exit 1)")
    check.add_argument("dataset", help="the dataset folder `kaggle build` wrote (its notebook folder beside it)")
    check.add_argument("--notebook", help="the notebook folder you push (default: DATASET-notebook)")
    check.add_argument("--kaggle-model", metavar="DIR", help="a local copy of the Kaggle Model the notebook reads "
                                                             "(--model-source), mounted where Kaggle mounts it")
    number_argument(check, "--tasks", int, f"how many of the shortest {CHECK_DATASET} tasks make the placeholder "
                    "test file (default: %(default)s)", at_least=1, at_most=120, default=CHECK_TASKS)
    check.add_argument("--changes", help="JSON: the CHANGES the check runs instead of the notebook's own (default: "
                       f"the notebook's, as you edited them; cheap enough for a CPU: '{json.dumps(CHECK_CHANGES)}')"
                       .replace("%", "%%"))
    check.add_argument("--image-manifest", help="the image's versions, if the dataset was built against another "
                                                "manifest than kaggle_dataset/kaggle-image.json")
    check.add_argument("--keep", action="store_true", help="keep the scratch folder (the stand-in input, the "
                                                           "environment's copy, the run's outputs) and say where")
    number_argument(check, "--workers", int, "the notebook's WORKERS (default: 0, its own default: one here, in its "
                    "process; 2: two Ray actors of the image's ray, as Kaggle's GPUs run it)", at_least=0,
                    at_most=8, default=0)


def _add_image_arguments(actions) -> None:
    image = actions.add_parser("image", help="make the image manifest from the package list Kaggle publishes "
                                             "(a pip freeze of its image)")
    image.add_argument("freeze", help="the list, e.g. installed_cpu_packages.txt of Kaggle's docker-python")
    image.add_argument("--out", default="kaggle_dataset/kaggle-image.json", help="default: %(default)s")
    image.add_argument("--python", default="3.12", help="the image's Python (default: %(default)s)")
    image.add_argument("--recorded", default="", help="the list's date or commit, kept in the manifest")
    image.add_argument("--cpu", action="store_true", help="the CPU image (default: the GPU image, the same "
                                                          "versions with torch's CUDA build)")


def _add_run_arguments(actions) -> None:
    run = actions.add_parser("run", help="the competition job: find the files, solve in time, write submission.json")
    run.add_argument("--model", help="model folder (default: the shipped model)")
    run.add_argument("--input", default="/kaggle/input", help="where the competition files are (searched)")
    run.add_argument("--working", default="/kaggle/working", help="where submission.json goes")
    add_settings_options(run, CompetitionSettings(), "the competition job's clock")
    number_argument(run, "--workers", int, "workers in all, Ray actors (default: one per GPU, then as many as the "
                    "first one's measured memory allows; without a GPU one: this process, without Ray)",
                    at_least=1, at_most=MAX_WORKERS)
    run.add_argument("--full", action="store_true", help="solve every task even if the test file is the placeholder")
    restart_argument(run, "--working")
    given = run.add_mutually_exclusive_group()
    given.add_argument("--settings", dest="settings_file", metavar="FILE",
                       help="the method's settings from a JSON file (SolveSettings.to_json, or a run.json); the "
                            "options below change it further")
    preset_arguments(run, group=given)


def _kaggle_run(args) -> None:
    from arc_kit.kaggle import competition as kaggle

    clock = settings_from_options(args, CompetitionSettings())
    result = kaggle.run_competition(model_path(args), _kaggle_settings(args), clock, input_root=args.input,
                                    working=args.working, workers=args.workers, force_full=args.full,
                                    restart=args.restart)
    end, *score = result.lines()
    print(f"wrote {result.submission_path}: {end}", *score, sep="\n")


def _kaggle_check(args) -> int:
    from arc_kit.kaggle.local_check import check_dataset, check_tasks

    changes = None
    if args.changes is not None:
        try:
            changes = json.loads(args.changes)
        except ValueError as error:
            raise ValueError(f"--changes {args.changes!r} is no JSON ({error})") from None
        changed(SolveSettings(), changes, "--changes")  # a bad one: one line, before anything runs
    result = check_dataset(args.dataset, notebook_folder=args.notebook, kaggle_model=args.kaggle_model,
                           tasks=check_tasks(args.tasks), changes=changes, image_manifest=args.image_manifest,
                           keep=args.keep, workers=args.workers)
    print(*result.lines(), sep="\n")
    return 0 if result.go else 1


def _kaggle_build(args) -> int:
    from arc_kit.kaggle.dataset_build import build_dataset, checked_options
    from arc_kit.run.model_check import check_model

    options = checked_options(args.out, args.model, owner=args.owner, slug=args.slug, title=args.title,
                              extra_wheels=args.extra_wheels, image_manifest=args.image_manifest,
                              model_source=args.model_source, overwrite=args.overwrite)  # before any model work
    if options.default_model:
        print(f"no --model nor --model-source: the dataset ships the kit's own model, {options.model} (--model DIR "
              "ships yours, --model-source a Kaggle Model)")
    check = None
    if args.model is not None or options.handle is None:  # before any work: a no-go stops here, nothing written
        check = check_model(options.model, quantization=args.quantization, strict_memory=False)
        print(check.report())
        if not check.go:
            return 1
    else:
        print(f"the Kaggle Model {args.model_source} is not here to check: the notebook checks it before any work, "
              "and bitsandbytes is shipped in case its weights are in 4 bits (pass --model with a local copy to check "
              "it now and ship only what it needs)")
    built = build_dataset(args.out, args.model, owner=options.owner, slug=args.slug, title=args.title,
                          extra_wheels=args.extra_wheels, image_manifest=args.image_manifest,
                          gpu_extras=args.gpu_extras, model_source=args.model_source,
                          check=check, quantization=args.quantization, overwrite=args.overwrite)
    print(f"wheels shipped ({len(built.wheels)}; the image: {built.image}):")
    for wheel in built.wheels:
        print(f"  {wheel.path.name}: {wheel.reason}")
    if built.left_behind:
        print(f"left behind in the model folder (not files a model is read with): {listed(built.left_behind)}")
    for folder in (built.folder, built.notebook):
        print(f"{folder}:")
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                print(f"{path.stat().st_size / 2**20:8.2f} MiB  {path.relative_to(folder)}")
    print(built.model)
    print(f"the model's licence (dataset-metadata.json's description): {built.licence}")
    return 0


def _kaggle_image(args) -> None:
    from arc_kit.data.jsonio import write_json_atomically
    from arc_kit.kaggle.wheelhouse import manifest_from_freeze

    claim_file(args.out, "kaggle image", own=_is_image_manifest)
    image = manifest_from_freeze(args.freeze, args.python, gpu=not args.cpu, recorded=args.recorded)
    write_json_atomically(Path(args.out), image.to_json(), indent=1)
    print(f"{args.out}: {len(image.packages)} packages, Python {image.python}, torch {image.packages.get('torch')} "
          f"({image.source})")


def _is_image_manifest(path: Path) -> bool:
    """True for a file that ``kaggle image`` wrote (an image manifest): the one kind of file it replaces."""
    manifest = small_json(path, limit=2**24)
    return isinstance(manifest, dict) and {"python", "platforms", "packages"} <= set(manifest)


def _kaggle_settings(args) -> SolveSettings:
    """``kaggle run``'s settings: a file's (``runs.read_settings_file``) or a preset's, then the options given."""
    from arc_kit.run.runs import read_settings_file

    return settings_from_options(args, read_settings_file(args.settings_file) if args.settings_file
                                 else solve_preset(args.preset))
