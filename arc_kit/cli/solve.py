"""The ``arc-kit`` commands that solve: solve, dry-run, a run's report, the paper's tables (ablation, samplers),
the planner's estimate of a run's time, the benchmarks that print ratios (bench), and the list of the method's
settings (settings).

Each parses, makes one call into ``arc_kit.run`` (``arc_kit.experiments`` for the tables and benchmarks) and
prints; how a run is planned, split among workers and scored, and how each benchmark measures, live there, not here.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from arc_kit.cli.options import (
    MAX_COUNT,
    MAX_HOURS,
    MAX_TOKENS,
    MAX_WORKERS,
    command,
    device_argument,
    load_given_tasks,
    load_options,
    model_path,
    number_argument,
    option_bounds,
    select_tasks,
    shown_table,
    solve_arguments,
    solve_settings,
    tasks_argument,
)
from arc_kit.names import listed, shown
from arc_kit.settings import (
    DRY_RUN_TASKS,
    ENGINE_COMPILE_MODES,
    SOLVE_PRESETS,
    SamplerSettings,
    SolveSettings,
    described,
    solve_preset,
)


def _run_solve(args) -> int:
    from arc_kit.experiments.analysis import draft_share
    from arc_kit.run.runs import dataset_info, outcome_parts, run_clock
    from arc_kit.run.jobs import solve_job

    settings = solve_settings(args)  # first: a value the settings do not take is refused before any work
    loaded = load_given_tasks(args)
    tasks, model = select_tasks(args, loaded), model_path(args)
    skipped = f" and {len(tasks.skipped)} skipped (fallback answers)" if tasks.skipped else ""
    print(f"solving {len(tasks)} task(s){skipped} of {tasks.name or args.dataset} with {model} "
          f"({settings.description})")
    deadline, stop_at = run_clock(args.hours, args.safety_minutes)  # stopped at the limit itself
    run = solve_job(tasks, model, settings, args.out, workers=args.workers, workers_per_gpu=args.workers_per_gpu,
                    address=args.address, shared_model=args.shared_model, restart=args.restart,
                    deadline=deadline, stop_at=stop_at, load_options=load_options(args),
                    info={**dataset_info(args.dataset, loaded), "tasks": len(tasks)})
    failed = run.failed
    if run.report_path is not None:
        print(f"wrote {run.report_path}: the run to read in a browser")
    print(f"wrote {run.submission_path} ({len(tasks.test_counts())} tasks, {len(run.records)} with records, "
          f"{run.seconds:.0f} s this run"
          + (f", {len(failed)} failed: {listed(map(shown, failed), count=5)}" if failed else "") + ")")
    print(", ".join(outcome_parts(run.records, run.score) + [draft_share(run.records.values())]))
    if run.score is not None:
        print(shown_table(run.score.table))
        print(run.score)
    return 0


def _cluster_arguments(parser) -> None:
    """``--address`` and ``--shared-model``: a run's pool on a Ray cluster."""
    parser.add_argument("--address", help="a Ray cluster to run the workers on, HOST:PORT of its head (`ray start "
                                          "--head --port PORT` there, `ray start --address HOST:PORT` on each other "
                                          "node; default: a Ray of this machine's own when there are several "
                                          "workers, none for one)")
    parser.add_argument("--shared-model", action="store_true",
                        help="the model's folder (and its base's) is at the same path on every node of --address's "
                             "cluster, a shared file system: workers load it from there instead of receiving it "
                             "through Ray")


@command("solve", "run the method (TTT, DFS, product of experts) on tasks; write records, submission and scores")
def setup_solve(parser):
    solve_arguments(parser, preset="paper", tasks_default=0, out_default=None)
    _cluster_arguments(parser)
    return _run_solve


@command("dry-run", "the main job: the shipped model on the shortest ARC-AGI-1 evaluation tasks, scored")
def setup_dry_run(parser):
    solve_arguments(parser, preset="dry-run", tasks_default=DRY_RUN_TASKS, out_default="runs/dry-run",
                    pick="shortest")
    _cluster_arguments(parser)
    return _run_solve


@command("report", "write a run's report: one HTML file of every task, its attempts, candidates, scores and times, "
                   "to read in a browser")
def setup_report(parser):
    parser.add_argument("folder", metavar="RUN", help="a run folder the kit wrote (solve, dry-run, a Kaggle job's run "
                                                      "folder or the working folder that holds it)")
    parser.add_argument("--out", help="the HTML file to write, new or a report the kit wrote (default: report.html in "
                                      "the run folder)")

    def run(args):
        from arc_kit.run.report import write_report

        print(f"wrote {write_report(args.folder, args.out)}")
        return 0
    return run


def _table(which: str):
    def run(args):
        from arc_kit.experiments.tables import run_table
        from arc_kit.run.runs import dataset_info, run_clock

        loaded = load_given_tasks(args)
        deadline, stop_at = run_clock(args.hours, args.safety_minutes)  # no task started past the deadline
        table = run_table(which, select_tasks(args, loaded), model_path(args), solve_settings(args), args.out,
                          restart=args.restart, load_options=load_options(args),
                          info=dataset_info(args.dataset, loaded), workers=args.workers,
                          workers_per_gpu=args.workers_per_gpu, deadline=deadline, stop_at=stop_at)
        print(table.markdown)
        print(f"wrote {Path(args.out) / (which + '.md')} and {Path(args.out) / (which + '.csv')}")
        return 0
    return run


@command("ablation", "the paper's Table 1: baseline, +TTT, +16xAug, +PoE, +DFS on tasks with solutions")
def setup_ablation(parser):
    solve_arguments(parser, preset="paper", tasks_default=0, out_default=None)
    return _table("ablation")


@command("samplers", "the paper's Table 2: greedy, stochastic, beam and DFS samplers under each aggregation")
def setup_samplers(parser):
    solve_arguments(parser, preset="paper", tasks_default=0, out_default=None)
    return _table("samplers")


NO_RUN_DATASET = "arc-agi-1/evaluation"  # what an estimate without a run prices when no --dataset names tasks


@command("estimate", "the planner's estimate of a run's time: at the speeds an earlier run measured, on its device, "
                     "and at the prior's for a GPU; --table: what to expect per model size and GPU")
def setup_estimate(parser):
    from arc_kit.run.expectations import GPUS

    parser.add_argument("--records", help="a run the kit wrote, to take measured speeds, the tasks it solved, its "
                                          "model and its device from: a run folder (records.jsonl, run.json), or a "
                                          "folder holding one (a Kaggle run's working folder) (default: none, every "
                                          "speed guessed)")
    tasks_argument(parser, default=None, default_words=f"the run's own tasks (a rehearsal's: the full run it stands "
                                                       f"for), {NO_RUN_DATASET} without --records")
    number_argument(parser, "--tasks", int, "only the first N tasks by id (default: all)", at_least=0,
                    at_most=MAX_COUNT, default=0)
    parser.add_argument("--gpu", choices=[device.name for device in GPUS],
                        help="the kind of GPU estimated for (default: the device the run measured on, this CPU "
                             "without --records); a run measured on another device is given apart, at its own speed")
    number_argument(parser, "--gpus", int, "how many GPUs of --gpu the machine has (default: 1 with --gpu; Kaggle's "
                    "4x L4: --gpu L4 --gpus 4)", at_least=1, at_most=MAX_WORKERS)
    number_argument(parser, "--workers-per-gpu", int, "worker processes sharing each GPU (default: %(default)s): a "
                    "measured speed is one worker's, shared among GPUS x WORKERS_PER_GPU workers; the prior prices a "
                    "GPU, whose bandwidth its workers share", at_least=1, at_most=MAX_WORKERS, default=1)
    number_argument(parser, "--speedup", float, "your factor: how many times faster --gpu is than the device that "
                    "measured the run; converts the measured figure to --gpu (default: none, each figure on its own "
                    "device)", at_least=1e-3, at_most=1e6, default=None)
    number_argument(parser, "--hours", float, "say how the planner would spend this many hours on the tasks: the "
                    "rung of the ladder it gives each, and when their work ends (default: a rehearsal's full run's)",
                    above=0, at_most=MAX_HOURS, default=None)
    parser.add_argument("--model", help="the model whose tokenizer counts tokens and whose size prices the guessed "
                                        "speeds (default: the run's, else the shipped model)")
    parser.add_argument("--settings", choices=["run", *SOLVE_PRESETS], default="run",
                        help="estimate with the measured run's settings (the paper's without --records), or with "
                             "a preset's (default: %(default)s)")
    parser.add_argument("--table", action="store_true",
                        help="print the hours the prior expects per model size (135M to 8B, 16- and 4-bit) and GPU "
                             "(4x L4, T4, H100) for the tasks at the settings, and the paper's run priced the same way")
    return _run_estimate


def _run_estimate(args) -> int:
    from arc_kit.run.estimates import estimate, read_measured_run
    from arc_kit.run.expectations import expectations_for

    target = None if args.settings == "run" else solve_preset(args.settings)
    if args.gpus and not args.gpu:
        raise ValueError("--gpus counts GPUs of --gpu: name their kind (--gpu L4)")
    if args.workers_per_gpu > 1 and not args.gpu:
        raise ValueError("--workers-per-gpu shares a GPU: name it (--gpu L4)")
    if args.speedup is not None and not (args.gpu and args.records):
        raise ValueError("--speedup converts a run's measured speeds to --gpu: give both --records and --gpu")
    run = read_measured_run(args.records, args.model) if args.records and not args.table else None
    if args.dataset is None and run is None:
        args.dataset = NO_RUN_DATASET
    tasks = select_tasks(args, None if args.dataset else run.default_tasks)
    if args.table:
        what = f"{len(tasks)} tasks of {tasks.name or args.dataset}"
        print("\n".join(expectations_for(tasks, model_path(args), target or solve_preset("paper"), what)))
        return 0
    given = f"{len(tasks)} tasks of {tasks.name or args.dataset}" if args.dataset else None
    result = estimate(run, tasks, args.model, target, device=args.gpu, gpus=(args.gpus or 1) if args.gpu else 0,
                      workers_per_gpu=args.workers_per_gpu, speedup=args.speedup, hours_to_plan=args.hours,
                      what=given)
    if run is not None and not result.figure("measured").speeds.measured_tasks:
        print(f"warning: {args.records} recorded no speeds (no task finished with the model): every speed below is "
              "guessed")
    print(*result.lines(), sep="\n")
    return 0


@command("bench", "benchmarks that print ratios: DFS vs greedy decoding, prefix-reusing scoring, the decode engine")
def setup_bench(parser):
    parser.add_argument("--model", help="model folder (default: the shipped model)")
    parser.add_argument("--llama-3b-shaped", action="store_true",
                        help="a Llama-3.2-3B-shaped random model (bf16, GPU) instead of --model, for per-token costs")
    tasks_argument(parser)
    number_argument(parser, "--tasks", int, "the first N tasks by id (default: 5); --which drafts: the N shortest by "
                    "prompt tokens (default: 30)", at_least=1, at_most=MAX_COUNT, default=None)
    number_argument(parser, "--max-prompt", int, "skip tasks whose prompt is longer than this many tokens (default: "
                    "%(default)s)", at_least=1, at_most=MAX_TOKENS, default=4096)
    from arc_kit.experiments.bench import BENCHMARKS, DEFAULT_BENCHMARKS

    parser.add_argument("--which", nargs="*", default=list(DEFAULT_BENCHMARKS), choices=list(BENCHMARKS),
                        help="benchmarks to run (default: all but drafts)")
    number_argument(parser, "--threshold", float, "DFS: minimum probability of a returned answer (default: "
                    "%(default)s)", bounds=option_bounds(SamplerSettings, "threshold"),
                    default=SamplerSettings().threshold)
    device_argument(parser)
    number_argument(parser, "--augmentations", int, "--which drafts: inference augmentations per test input (default: "
                    "%(default)s)", at_least=1, at_most=1024, default=SolveSettings().inference_augmentations)
    number_argument(parser, "--draft-tokens", int, "--which drafts: the most draft tokens fed with a branch's token in "
                    "one step (default: %(default)s)", at_least=0, at_most=64,
                    default=SolveSettings().sampler.draft_tokens)
    parser.add_argument("--engine-compile", choices=ENGINE_COMPILE_MODES, default=SolveSettings().engine_compile,
                        help="--which engine: compile the engine's step (default: %(default)s: on a GPU only)")

    def run(args):
        from arc_kit.experiments import bench

        model = None if args.llama_3b_shaped else str(model_path(args))
        for line in bench.run_benchmarks(model, load_given_tasks(args),
                                         which=args.which, count=args.tasks, max_prompt=args.max_prompt,
                                         threshold=args.threshold, device=args.device,
                                         engine_compile=args.engine_compile, augmentations=args.augmentations,
                                         draft_tokens=args.draft_tokens):
            print(line, flush=True)
        return 0
    return run


@command("settings", "the method's settings that the notebook's CHANGES may name (dotted paths), each with its "
                     "value in a preset, what it takes and why")
def setup_settings(parser):
    parser.add_argument("--preset", default="paper", choices=list(SOLVE_PRESETS),
                        help="the preset whose values are shown (default: %(default)s)")

    def run(args):
        print(f"the settings a CHANGES entry may name, with the {args.preset!r} preset's values "
              '(CHANGES = {"ttt.steps": 32, "sampler.threshold": 0.05}):')
        for path, value, takes, why in described(solve_preset(args.preset)):
            print(f"{path} = {value!r}  ({takes})")
            print(textwrap.fill(why, width=100, initial_indent="    ", subsequent_indent="    "))
        return 0
    return run
