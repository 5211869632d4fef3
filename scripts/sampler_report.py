"""What the initial fine-tune's sequence samplers make of RE-ARC: sequences per task, pairs per sequence, reuse.

Draws every item that a run would train on, as ``training.pretrain`` would (the same pools, weights,
settings and seed; the shipped model's tokenizer counts the tokens), and reports on the RE-ARC tasks:

- sequences per task (fewest, median, most) and in all;
- pairs per sequence as written, after the token budget dropped what did not fit;
- reuse: how often an example is written in the whole run (mean over the examples written, most),
  the share of each task's examples ever written, and the most times one example is written within
  one pass. A pass of the ``passes`` sampler is its plan's; for the ``random`` sampler a pass is a
  stretch of a task's sequences, in run order, that together draw as many examples as the task has.

Runs (``--runs``, all by default):

- ``shipped``: the ``smollm2-gpu`` preset as the shipped model was trained (kaggle_dataset/model's
  arc_kit.json): the random 3-7 sampler, RE-ARC 80% + ARC-AGI-1 training 20%, 4,096 tokens, 456 steps
  of 16 sequences;
- ``passes-before``: the kit's passes sampler before one pass became the default: 1,200 sequences per task
  and as many passes as that takes (``--max-passes`` high enough), RE-ARC alone, 8,192 tokens;
- ``paper``: the default now (preset ``paper``): at most one pass, each example at most once;
- ``paper-code``: preset ``paper-code``, the authors' script: the easiest half of each task left out.

    python scripts/sampler_report.py --re-arc ../shared/data/re_arc.tar.gz --out sampler_report.json

Not run in CI (minutes: the ``passes-before`` run draws 480,000 sequences).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

SHIPPED_STEPS, SHIPPED_PER_STEP = 456, 16  # kaggle_dataset/model/arc_kit.json: steps_done, 8 x 2 per step


@dataclass(frozen=True)
class Run:
    name: str
    preset: str
    changes: dict  # SequenceSettings fields changed from the preset's
    sequences: int | None  # items drawn; None: the whole plan
    described: str


RUNS = {
    "shipped": Run("shipped", "smollm2-gpu", {}, SHIPPED_STEPS * SHIPPED_PER_STEP,
                   "smollm2-gpu as the shipped model trained: random 3-7 pairs, RE-ARC 80% + ARC-AGI-1 training 20%, "
                   "4,096 tokens, 456 steps x 16"),
    "passes-before": Run("passes-before", "paper", {"max_passes": 10**6}, None,
                         "the passes sampler as it was: 1,200 per task, as many passes as it takes"),
    "paper": Run("paper", "paper", {}, None, "the default now: at most one pass (--max-passes 1)"),
    "paper-code": Run("paper-code", "paper-code", {}, None,
                      "preset paper-code: one pass, the easiest half of each task left out"),
}


def draw_all(run: Run, re_arc: str, model: str, progress: bool):
    """(dataset, [(pool, examples written, pass)] of every item) of one run; pools loaded for the run's data."""
    from tqdm import tqdm

    from arc_kit.model.description import read_model_folder
    from arc_kit.model.training_data import SequenceDataset, pretraining_data
    from arc_kit.settings import training_preset

    settings = training_preset(run.preset)
    sequences = settings.sequences.replace(**run.changes)
    data = pretraining_data(re_arc, settings.data)
    encoder = read_model_folder(model).encoder(max_len=sequences.max_tokens)
    dataset = SequenceDataset(data.pools, encoder, sequences, weights=data.weights, seed=settings.lora.training_seed,
                              length=run.sequences, repeatable=data.repeatable)
    drawn_so_far, items = Counter(), []  # the random sampler's passes: examples drawn from each pool so far
    for index in tqdm(range(len(dataset)), desc=run.name, disable=not progress):
        item = dataset.draw(index)  # the encoded sequence is dropped at once: 480,000 would not fit in memory
        if dataset.planned is not None:
            pass_index = dataset.plan(index)[1]
        else:
            pass_index = drawn_so_far[item.pool] // len(dataset.pools[item.pool])
            drawn_so_far[item.pool] += len(item.examples)
        items.append((item.pool, item.examples, pass_index))
    return dataset, items


def report(run: Run, dataset, items) -> dict:
    """The numbers of one run, over its RE-ARC pools."""
    re_arc = [index for index, name in enumerate(dataset.names) if name.startswith("re-arc/")]
    wanted = set(re_arc)
    kept = [(pool, examples, pass_index) for pool, examples, pass_index in items if pool in wanted]
    per_task = Counter(pool for pool, _, _ in kept)
    counts = np.array([per_task[pool] for pool in re_arc])
    written = np.array([len(examples) for _, examples, _ in kept])
    uses, in_pass = Counter(), Counter()
    for pool, examples, pass_index in kept:
        for example in examples:
            uses[pool, example] += 1
            in_pass[pool, pass_index, example] += 1
    per_example = np.array(list(uses.values()))
    distinct = Counter(pool for pool, _ in uses)
    share_used = np.mean([distinct[pool] / len(dataset.pools[pool]) for pool in re_arc])
    pairs = Counter(written.tolist())
    summary = dataset.summary()
    return {
        "run": run.name, "described": run.described, "re_arc_tasks": len(re_arc),
        "sequences_in_all": len(items), "re_arc_sequences": int(counts.sum()),
        "per_task": {"fewest": int(counts.min()), "median": float(np.median(counts)), "most": int(counts.max())},
        "pairs_per_sequence": {"mean": round(float(written.mean()), 3),
                               "histogram": {str(k): int(v) for k, v in sorted(pairs.items())}},
        "example_uses": {"mean": round(float(per_example.mean()), 3), "most": int(per_example.max())},
        "share_of_examples_written": round(float(share_used), 4),
        "most_uses_within_a_pass": int(max(in_pass.values())),
        "passes": int(max(pass_index for _, _, pass_index in kept) + 1),
        "plan": None if summary is None else summary.line(),
    }


def markdown(rows: list[dict]) -> str:
    lines = ["| run | sequences (RE-ARC of all) | per task: fewest / median / most | pairs per sequence: mean "
             "(count of sequences by pairs) | uses per example: mean / most | share of examples used | most uses "
             "within a pass |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        task, uses = row["per_task"], row["example_uses"]
        histogram = ", ".join(f"{k}: {v}" for k, v in row["pairs_per_sequence"]["histogram"].items())
        lines.append(f"| {row['run']} | {row['re_arc_sequences']:,} of {row['sequences_in_all']:,} | "
                     f"{task['fewest']} / {task['median']:g} / {task['most']} | "
                     f"{row['pairs_per_sequence']['mean']:.2f} ({histogram}) | {uses['mean']:.2f} / {uses['most']} | "
                     f"{row['share_of_examples_written']:.1%} | {row['most_uses_within_a_pass']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--re-arc", required=True, help="RE-ARC: a folder with tasks/<id>.json, or the .tar.gz")
    parser.add_argument("--model", default=None, help="whose tokenizer counts tokens (default: the shipped model)")
    parser.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--out", help="also write the numbers as JSON here")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    from arc_kit.model.loading import default_model_path
    from arc_kit.outputs import OutputRefused, claim_file, replace_file

    if args.out:  # before minutes of work: a file of the user's is never replaced (the kit's output rule)
        try:
            claim_file(args.out, "sampler_report", own=_is_report)
        except OutputRefused as refusal:
            raise SystemExit(f"sampler_report: {refusal}") from None

    model = args.model or str(default_model_path())
    rows = []
    for name in args.runs:
        started = time.monotonic()
        dataset, items = draw_all(RUNS[name], args.re_arc, model, not args.no_progress)
        rows.append(report(RUNS[name], dataset, items) | {"seconds": round(time.monotonic() - started, 1)})
        print(json.dumps(rows[-1]), flush=True)
    print(markdown(rows))
    if args.out:
        replace_file(args.out, json.dumps(rows, indent=1))
    return 0


def _is_report(path) -> bool:
    """True for a file this script wrote (its rows as JSON): the one kind of file its --out replaces."""
    from arc_kit.outputs import small_json

    rows = small_json(path, limit=2**24)
    return isinstance(rows, list) and all(isinstance(row, dict) and "run" in row for row in rows)


if __name__ == "__main__":
    sys.exit(main())
