"""The GPU check: one prepared command that measures the engine, the drafts and 30 tasks in minutes.

A device machine is lent rarely and briefly (15 minutes in all, starts included), so everything the
kit claims for a GPU is measured by this one script, each stage in a time box of its own (a share
of ``--minutes``; what a stage leaves unused passes on). A stage that runs out of time says so, keeps
what it had measured, and the next one starts; every figure is written to ``OUT/gpu_check.json`` as
soon as it is measured (device, date, commit, versions, then a section per stage), with a log beside.

- engine: the engine's step (compiled with CUDA graphs on a GPU) against transformers' own forward
  (one lane at a time: the tests' oracle), 16 lanes of the shipped model; tokens per second at 1 and
  16 lanes and their ratio to the bandwidth floor (``floor_ratio_1_lane``, ``floor_ratio_16_lanes``);
  then the DFS's candidates on the compiled engine and on transformers' forward for 3 tasks
  (``engine_bench.engine_agreement``), in the model's dtype (bf16 on a GPU: the
  compiled graphs of the throughput are reused; float32 would compile every graph again), saved after
  each test input.
- drafts: engine steps and wall time of the speculative DFS, none against auto and all at caps of 7,
  15 and 31 draft tokens a step (``DRAFT_CAPS``), after one untimed test input in every setting
  (it builds the compiled graphs each needs), saved after each test input; the figures that set the
  GPU's draft default (docs/gpu/README.md).
- tasks: the 30 shortest ARC-AGI-1 evaluation tasks at the paper's preset (what the Kaggle
  notebook runs), in this process, shortest first until the time box runs out (the planner is given
  no deadline, so no task's settings are stepped down), per task its seconds and score; then the
  planner's estimate for
  the 120 ARC-AGI-2 evaluation tasks on Kaggle's 4x L4, from the speeds this run measured: test-time
  training and scoring scaled by the cards' bf16 arithmetic, generation by their memory bandwidth.
- fourbit: a Llama-3.2-3B-shaped model with random weights in bitsandbytes 4 bits (nf4, bf16 compute)
  through the engine (skipped where bitsandbytes is missing: the device image lacks it, so the
  runbook carries its CUDA 13 build, docs/gpu/README.md).

The shipped model's base is too large to travel in one device call: ``scripts/gpu_base_parts.py``
packs it in two parts, the first carried by a call of its own, the second with this script's; given
``--base-parts``, the parts found are unpacked into the kit's cache first. Without them the engine
stage falls back to the 3B-shaped random model and the stages that need the trained model say so.

    python scripts/gpu_check.py --out $OUT --base-parts .gpu                     # on the device
    python scripts/gpu_check.py --device cpu --quick --bandwidth 20 --out /tmp/c # here: every stage, small
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

STAGES = ("engine", "drafts", "tasks", "fourbit")
SHARES = {"engine": 0.3, "drafts": 0.15, "tasks": 0.45, "fourbit": 0.1}  # of the time left when a stage starts
AGREEMENT_TASKS = 3
TASKS = 30
KAGGLE_GPUS = 4  # the ARC Prize notebook's machine: 4x L4
ESTIMATE_SET = "arc-agi-2/evaluation"
MIN_STAGE_SECONDS = 5.0
TASKS_RESERVE = 20.0  # seconds of the tasks stage kept for reading its records and the estimate
DRAFT_MODES = ("none", "auto", "all")  # the drafts stage's settings, each at every cap of DRAFT_CAPS
DRAFT_CAPS = (7, 15, 31)


class StageTimeout(BaseException):  # not an Exception: the kit's own "except Exception" must not swallow it
    """A stage's time box ran out."""


@contextlib.contextmanager
def time_box(seconds: float):
    """Raise ``StageTimeout`` in this (the main) thread once ``seconds`` have passed."""
    def expire(signum, frame):
        raise StageTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Report:
    """The JSON of everything measured, rewritten whole after each figure, and the log beside it, in a folder
    that is new, empty or an earlier check's (``overwrite``: replaced), as every command of the kit writes."""

    def __init__(self, out: Path, overwrite: bool = False):
        from arc_kit.outputs import FolderKind, claim_folder

        kind = FolderKind("gpu check", owned=("gpu_check.json", "gpu_check.partial", "gpu_check.log", "records.jsonl"))
        claim_folder(out, kind, "gpu-check", overwrite=overwrite)
        self.path, self.log_path, self.data = out / "gpu_check.json", out / "gpu_check.log", {}

    def save(self) -> None:
        from arc_kit.outputs import replace_file

        replace_file(self.path, json.dumps(self.data, indent=1, default=str) + "\n")  # never through a link

    def log(self, line: str) -> None:
        from arc_kit.outputs import appending

        print(line, flush=True)
        with appending(self.log_path) as log:
            log.write(line + "\n")


class Check:
    """What the stages share: the arguments, the report, the device, the model and its tasks."""

    def __init__(self, args, report: Report):
        self.args, self.report = args, report
        self.model_path: str | None = None  # None: no trained model here (the base did not come)
        self.loaded = None
        self.tasks = None  # the shortest ARC-AGI-1 evaluation tasks, shortest first

    @property
    def on_gpu(self) -> bool:
        return self.args.device.startswith("cuda")

    def bandwidth(self) -> float | None:
        """Bytes/s of the floor: ``--bandwidth`` (GB/s), else the card's data sheet (None off a known GPU)."""
        from arc_kit.run.expectations import device_bandwidth

        if self.args.bandwidth:
            return self.args.bandwidth * 1e9
        return device_bandwidth(self.device_name()) if self.on_gpu else None

    def device_name(self) -> str:
        import torch

        return torch.cuda.get_device_name(torch.device(self.args.device)) if self.on_gpu else self.args.device


def header(args) -> dict:
    import torch
    import transformers

    from arc_kit.provenance import __version__, git_commit

    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": platform.node(),
            "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device,
            "commit": os.environ.get("ARC_KIT_COMMIT") or git_commit() or "unknown", "arc_kit": __version__,
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "arguments": args.argv, "quick": args.quick,
            "minutes": args.minutes}


def prepare_model(check: Check) -> None:
    """The trained model: ``--model``, else the shipped one once its base is unpacked from ``--base-parts``."""
    from arc_kit.data.datasets import load_tasks
    from arc_kit.model.folders import default_model_path
    from arc_kit.model.loading import LoadSettings, load_model
    from arc_kit.run.planner import shortest_tasks

    args, facts = check.args, check.report.data.setdefault("model", {})
    if args.base_parts and not args.model:
        sys.path.insert(0, str(Path(__file__).parent))
        from gpu_base_parts import unpack

        try:
            facts["base"] = str(unpack(Path(args.base_parts)))
        except SystemExit as error:
            facts["base"] = f"not unpacked: {error}"
            check.report.log(f"base: {error}")
            return
    path = str(args.model or default_model_path())
    try:
        check.loaded = load_model(path, LoadSettings(device=args.device))
    except Exception as error:  # noqa: BLE001 - a base not built here: the stages that need the model say so
        facts["error"] = f"{type(error).__name__}: {error}"
        check.report.log(f"model {path}: cannot load ({facts['error']})")
        return
    check.model_path = path
    model = check.loaded.model
    facts.update(path=path, dtype=str(next(model.parameters()).dtype),
                 parameters=sum(parameter.numel() for parameter in model.parameters()))
    encoder = check.loaded.encoder()
    check.tasks = list(shortest_tasks(load_tasks("arc-agi-1/evaluation"), encoder, args.tasks).tasks())


def throughput_facts(result) -> dict:
    """The engine benchmark's figures under the names the issue asks for."""
    facts = {"engine_ms_per_step_16_lanes": result.rows[0][1] * 1e3,
             "transformers_ms_per_step_16_lanes": result.rows[0][2] * 1e3,
             "speed_up_16_lanes": result.rows[0][2] / result.rows[0][1],
             "largest_nll_difference": result.largest_difference, "note": result.rows[0][3]}
    for measured in result.throughput:
        name = "1_lane" if measured.lanes == 1 else f"{measured.lanes}_lanes"
        facts[f"tokens_per_second_{name}"] = measured.tokens_per_second
        facts[f"ms_per_step_{name}"] = measured.seconds * 1e3
        facts[f"floor_ms_{name}"] = None if measured.floor_seconds is None else measured.floor_seconds * 1e3
        facts[f"floor_ratio_{name}"] = measured.floor_ratio
    return facts


def stage_engine(check: Check, facts: dict) -> None:
    from arc_kit.data.datasets import load_tasks
    from arc_kit.experiments.bench import llama_3b_shaped
    from arc_kit.experiments.engine_bench import bench_engine, engine_agreement
    from arc_kit.text import TaskEncoder, Vocabulary

    args, compile = check.args, "on" if check.on_gpu else "off"
    steps, warmup = (2, 1) if args.quick else (24, 3)
    if check.loaded is None:  # no trained model: per-token costs on a random model of a real size
        model, encoder, label = llama_3b_shaped(args.device), TaskEncoder(Vocabulary()), "Llama-3.2-3B-shaped, random"
        tasks = None
    else:
        model, encoder, label = check.loaded.model, check.loaded.encoder(), check.model_path
        tasks = check.tasks
    bench_tasks = tasks or list(load_tasks("arc-agi-1/evaluation").tasks())[:5]
    facts["model"] = label
    result = bench_engine(model, encoder, bench_tasks, steps=steps, warmup=warmup, label=label, compile=compile,
                          bandwidth=check.bandwidth(), overhead=False)
    facts["throughput"] = throughput_facts(result)
    for line in result.lines():
        check.report.log(line)
    check.report.save()
    if tasks is None:
        facts["agreement"] = "not measured: no trained model here"
        return
    count = 1 if args.quick else AGREEMENT_TASKS
    agreement_facts = facts.setdefault("agreement", {})

    def save(agreement) -> None:  # after each test input: a time box that runs out keeps what was compared
        agreement_facts.update(tasks=count, dtype=str(next(model.parameters()).dtype),
                               threshold=args.agreement_threshold, inputs=agreement.inputs,
                               candidates=agreement.candidates, same_candidates=not agreement.differing,
                               differing=agreement.differing, largest_nll_difference=agreement.largest,
                               seconds=agreement.seconds, compiled=agreement.compiled)
        check.report.save()

    agreement = engine_agreement(model, encoder, tasks[:count], threshold=args.agreement_threshold,
                                 augmentations=2 if args.quick else 4, compile=compile, progress=save)
    check.report.log(agreement.line())


def stage_drafts(check: Check, facts: dict) -> None:
    from arc_kit.experiments.drafts_bench import bench_drafts
    from arc_kit.settings import SamplerSettings

    if check.loaded is None:
        raise RuntimeError("no trained model here: drafts on random weights measure nothing")
    count = 2 if check.args.quick else check.args.drafts_tasks
    threshold = SamplerSettings().threshold
    caps = DRAFT_CAPS[:2] if check.args.quick else DRAFT_CAPS
    model, encoder, tasks = check.loaded.model, check.loaded.encoder(), check.tasks[:count]
    options = dict(threshold=threshold, augmentations=2 if check.args.quick else 8, modes=DRAFT_MODES,
                   draft_tokens=caps)
    bench_drafts(model, encoder, tasks[:1], **options)  # untimed: every setting's graphs built before timing
    facts.update(tasks=count, threshold=threshold, caps=list(caps))

    def save(result) -> None:  # after each test input: a time box that runs out keeps what was measured
        facts.update(note=result.note, inputs=result.inputs, settings={
            name: {"engine_steps": total.steps, "seconds": total.seconds, "draft_tokens": total.fed,
                   "draft_tokens_followed": total.accepted, "differing": total.differing,
                   "largest_nll_difference": total.largest} for name, total in result.totals.items()})
        plain = result.totals["none"]
        facts["against_none"] = {name: {"fewer_steps": plain.steps / max(total.steps, 1),
                                        "wall_speed_up": plain.seconds / total.seconds if total.seconds else None}
                                 for name, total in result.totals.items() if name != "none"}
        check.report.save()

    result = bench_drafts(model, encoder, tasks, progress=save, **options)
    for line in result.lines():
        check.report.log(line)


class _Tee(io.TextIOBase):
    """Standard output that also goes to the log."""

    def __init__(self, stream, log_path: Path):
        self.stream, self.log_path = stream, log_path

    def write(self, text: str) -> int:
        from arc_kit.outputs import appending

        self.stream.write(text)
        with appending(self.log_path) as log:
            log.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def task_rows(run: Path) -> list[dict]:
    """Per task of a finished run folder: seconds, score, rung, whether the model answered, the deadline."""
    from arc_kit.run.record_json import read_records
    from arc_kit.run.runs import answered_by_model

    rows = []
    for task_id, record in read_records(run / "records.jsonl").items():
        rows.append({"task": task_id, "seconds": record.timings.get("total"), "timings": record.timings,
                     "correct": record.correct, "rung": record.rung, "answered_by_model": answered_by_model(record),
                     "deadline_hit": record.deadline_hit, "error": record.error})
    return rows


def kaggle_estimate(check: Check, run: Path) -> dict:
    """The planner's seconds for the ARC-AGI-2 evaluation set on 4x L4, from this run's measured speeds scaled by
    the memory bandwidths (the data sheets': the prior's one device figure, ``expectations``)."""
    from arc_kit.data.datasets import load_tasks
    from arc_kit.run.estimates import estimate_from_folder
    from arc_kit.run.expectations import device_bandwidth, gpu_named
    from arc_kit.run.planner import hours

    tasks = load_tasks(ESTIMATE_SET, strict=False)
    measured = estimate_from_folder(run, tasks, check.model_path).figure("measured")
    bandwidth = check.bandwidth() or device_bandwidth(check.device_name())
    if not bandwidth:
        return {"error": f"no bandwidth on record for {check.device_name()}: give --bandwidth"}
    speedup = gpu_named("L4").bandwidth / bandwidth
    parts = {part: measured.seconds[part] / (speedup * KAGGLE_GPUS) for part in ("training", "generation", "scoring")}
    total = sum(parts.values())
    return {"tasks": ESTIMATE_SET, "count": len(tasks), "gpus": f"{KAGGLE_GPUS}x L4", "speeds": measured.speeds
            .to_json(), "speed_sources": measured.speeds.sources(), "l4_per_measuring_device": speedup,
            "seconds_one_process_here": measured.seconds, "seconds_on_kaggle": parts, "total_seconds": total,
            "total": hours(total), "how": "this run's speeds per part, scaled by the L4's memory bandwidth over this "
            "device's (data sheets), one process per L4"}


def stage_tasks(check: Check, facts: dict, seconds: float) -> None:
    """The shortest tasks at the paper's preset, one after another, until the stage's time box runs out (no
    deadline for the kit's planner: it would step the settings down); then the finished tasks' records."""
    from arc_kit.cli import main as arc_kit
    from arc_kit.outputs import copy_file

    if check.model_path is None:
        raise RuntimeError("no trained model here: its scores would say nothing")
    args = check.args
    run = Path(tempfile.mkdtemp(prefix="gpu-check-")) / "run"
    preset = "smoke" if args.quick else "paper"
    command = ["dry-run", "--model", check.model_path, "--tasks", str(args.tasks), "--preset", preset,
               "--out", str(run), "--workers", "1", "--device", args.device]
    facts.update(preset=preset, command="arc-kit " + " ".join(command), run=str(run))
    check.report.save()
    solving = max(seconds - TASKS_RESERVE, MIN_STAGE_SECONDS)  # the rest: reading the records, the estimate
    try:
        with time_box(solving), contextlib.redirect_stdout(_Tee(sys.stdout, check.report.log_path)):
            facts["exit_status"] = arc_kit(command)
    except StageTimeout:
        facts["stopped"] = f"the time box ({solving:.0f} s) ran out: the tasks after the last record were not run"
    rows = task_rows(run) if (run / "records.jsonl").exists() else []
    solved = sum(bool(row["correct"]) and all(row["correct"]) for row in rows)
    facts.update(per_task=rows, tasks_run=len(rows), solved=solved, score=solved / args.tasks,
                 seconds_total=sum(row["seconds"] or 0 for row in rows))
    if rows:
        copy_file(run / "records.jsonl", Path(args.out) / "records.jsonl")
    check.report.save()
    facts["kaggle_estimate"] = kaggle_estimate(check, run) if rows else "no task finished: nothing to estimate from"
    estimate = facts["kaggle_estimate"]
    estimate = estimate.get("total", estimate) if isinstance(estimate, dict) else estimate
    check.report.log(f"tasks: {solved} of {args.tasks} solved, {len(rows)} run; ARC-AGI-2 evaluation on "
                     f"{KAGGLE_GPUS}x L4: {estimate}")


def stage_fourbit(check: Check, facts: dict) -> None:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        facts["skipped"] = "bitsandbytes is not installed here"
        return
    from arc_kit.data.datasets import load_tasks
    from arc_kit.experiments.bench import llama_3b_shaped
    from arc_kit.experiments.engine_bench import bench_engine
    from arc_kit.text import TaskEncoder, Vocabulary

    sys.path.insert(0, str(Path(__file__).parent))
    from four_bit_engine_bench import quantized_copy

    if check.args.quick and check.loaded is not None:
        model, encoder, label = check.loaded.model, check.loaded.encoder(), "the model in 4 bits"
    else:
        model, encoder, label = llama_3b_shaped(check.args.device), TaskEncoder(Vocabulary()), \
            "Llama-3.2-3B-shaped, random, 4 bits"
    import torch

    quantized = quantized_copy(model, "nf4", True, torch.bfloat16 if check.on_gpu else torch.float32)
    tasks = check.tasks or list(load_tasks("arc-agi-1/evaluation").tasks())[:5]
    steps, warmup = (2, 1) if check.args.quick else (24, 3)
    result = bench_engine(quantized, encoder, tasks, steps=steps, warmup=warmup, label=label,
                          compile="on" if check.on_gpu else "off", bandwidth=check.bandwidth(), overhead=False)
    facts.update(model=label, throughput=throughput_facts(result))
    for line in result.lines():
        check.report.log(line)


def run_stage(check: Check, name: str, seconds: float) -> None:
    from arc_kit.outputs import appending

    facts = check.report.data.setdefault(name, {})
    facts["budget_seconds"] = seconds
    started = time.monotonic()
    check.report.log(f"== {name}: at most {seconds:.0f} s")
    try:
        with time_box(seconds):
            if name == "tasks":
                stage_tasks(check, facts, seconds)
            else:
                {"engine": stage_engine, "drafts": stage_drafts, "fourbit": stage_fourbit}[name](check, facts)
        facts.setdefault("status", "skipped" if "skipped" in facts else "done")
    except StageTimeout:
        facts["status"] = f"out of time after {seconds:.0f} s (what it measured before is kept)"
    except Exception as error:  # noqa: BLE001 - one stage's failure is a finding; the next stage starts
        facts["status"] = f"failed: {type(error).__name__}: {error}"
        with appending(check.report.log_path) as log:
            traceback.print_exc(file=log)
    facts["seconds"] = time.monotonic() - started
    check.report.log(f"== {name}: {facts['status']} ({facts['seconds']:.0f} s)")
    check.report.save()


def parse(argv: list[str] | None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu_check_out",
                        help="folder for gpu_check.json, its log and the tasks' records (default: $OUT)")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier check's files in --out")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--minutes", type=float, default=7.5, help="the whole check's wall time (default: 7.5)")
    parser.add_argument("--quick", action="store_true", help="every stage at its smallest: a test that it runs")
    parser.add_argument("--model", help="a model folder (default: the shipped model)")
    parser.add_argument("--base-parts", help="the folder of the shipped base's parts (scripts/gpu_base_parts.py)")
    parser.add_argument("--bandwidth", type=float, help="GB/s of the floor where the card is not on record")
    parser.add_argument("--stages", nargs="*", choices=STAGES, default=list(STAGES))
    parser.add_argument("--tasks", type=int, help=f"the tasks stage's shortest tasks (default: {TASKS}; --quick: 2)")
    parser.add_argument("--drafts-tasks", type=int, default=10, help="the drafts stage's tasks (default: 10)")
    parser.add_argument("--agreement-threshold", type=float, default=0.01,
                        help="DFS threshold of the engines' agreement (default: 0.01, the kit's for small models)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.tasks = args.tasks or (2 if args.quick else TASKS)
    if args.minutes <= 0 or args.tasks < 1 or args.drafts_tasks < 1:
        parser.error("--minutes, --tasks and --drafts-tasks must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.monotonic()
    deadline = started + args.minutes * 60
    try:
        report = Report(Path(args.out), args.overwrite)
    except ValueError as error:  # the kit's one-line refusal of a folder it did not make
        print(f"gpu check: {error}", file=sys.stderr)
        return 1
    report.data.update(header(args))
    report.save()
    check = Check(args, report)
    prepare_model(check)
    report.data["model"]["seconds"] = time.monotonic() - started
    report.save()
    for index, name in enumerate(args.stages):
        left = deadline - time.monotonic()
        share = SHARES[name] / sum(SHARES[later] for later in args.stages[index:])
        if left * share < MIN_STAGE_SECONDS:
            report.data[name] = {"status": f"not started: {max(left, 0):.0f} s left"}
            report.save()
            continue
        run_stage(check, name, left * share)
    report.data["seconds"] = time.monotonic() - started
    report.save()
    report.log(f"gpu check: {report.data['seconds']:.0f} s; {report.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
