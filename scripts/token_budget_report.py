"""How many test inputs need more than the authors' 8,192 tokens: what a budget taken from a model's positions let in.

For each named task set: every test input's prompt (all its train pairs, nothing dropped) plus room for
the longest answer (a 30x30 grid), in the tokens of a model's tokenizer (default: the shipped model's).
A budget taken from a Llama model's 131,072 positions (the kit before it took the authors' 8,192) would build these
prompts whole; the authors' 8,192 drops train pairs from them, as their code does.

    python scripts/token_budget_report.py arc-agi-1/evaluation arc-agi-2/evaluation arc-agi-1/training
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", help="task sets, as --dataset takes them")
    parser.add_argument("--model", help="whose tokenizer counts tokens (default: the shipped model)")
    parser.add_argument("--budget", type=int, default=8192)
    args = parser.parse_args()
    from arc_kit.data.datasets import load_tasks
    from arc_kit.model.description import read_model_folder
    from arc_kit.model.loading import default_model_path

    encoder = read_model_folder(args.model or default_model_path()).encoder(max_len=10**7)
    for name in args.datasets:
        lengths = [len(encoder.encode_prompt(task.train, pair.input, log_drops=False)) + encoder.max_answer_len
                   for task in load_tasks(name).tasks() for pair in task.test]
        over = sum(length > args.budget for length in lengths)
        print(f"{name}: {over} of {len(lengths)} test inputs need more than {args.budget} tokens (whole prompt + "
              f"{encoder.max_answer_len} for the answer); the longest {max(lengths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
