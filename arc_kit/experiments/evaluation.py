"""How well a model knows held-out answers: NLL per output token, and whether greedy decoding is exact.

For each task and test input, the prompt is the task as given (no augmentation, no test-time
training) and the answer is the known output, eos included. One forward pass over prompt and
answer (teacher forcing) gives, at every answer position, the model's distribution after the
right prefix. From it come two measures:

- the answer's NLL (the same numbers the product of experts multiplies), per answer token;
- greedy exactness: greedy decoding writes the known answer exactly when, at every position, the
  most probable token after the right prefix is the right token. So the share of exact greedy
  answers needs no decoding loop: it is read off the same forward pass (checked in the tests
  against real greedy decoding).

Lower NLL is better; comparing models on the same tasks says which one learned more of ARC, long
before either solves many. This module knows models and tasks; it does not train or search.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arc_kit.data.tasks import TaskSet
from arc_kit.method.answers import AnswerSpace, answer_log_probs
from arc_kit.progress import progress_bar
from arc_kit.text import TaskEncoder, TaskTooLongError


@dataclass
class HeldOut:
    """Mean NLL per answer token and the share of exact greedy answers over the test outputs that fit."""

    nll_per_token: float
    greedy_exact: float  # share of measured outputs that greedy decoding writes exactly
    outputs: int  # test outputs measured
    tokens: int  # answer tokens measured
    too_long: list[str] = field(default_factory=list)  # "task_id/index" of outputs over the budget
    per_output: dict[str, float] = field(default_factory=dict)  # "task_id/index" -> NLL per token
    exact: dict[str, bool] = field(default_factory=dict)  # "task_id/index" -> greedy answer exact
    answer_tokens: dict[str, int] = field(default_factory=dict)  # "task_id/index" -> its answer's tokens

    def to_json(self) -> dict:
        return {"nll_per_token": round(self.nll_per_token, 5), "greedy_exact": round(self.greedy_exact, 5),
                "greedy_exact_outputs": [key for key, right in self.exact.items() if right],
                "outputs": self.outputs, "tokens": self.tokens, "too_long": self.too_long}


def answer_measures(model, prompt_ids, answer_ids, space: AnswerSpace) -> tuple[float, bool]:
    """The answer's summed NLL after the prompt, and whether greedy decoding would write it exactly."""
    import torch

    device = next(model.parameters()).device
    answer = torch.as_tensor([int(t) for t in answer_ids], device=device)
    ids = torch.as_tensor([*map(int, prompt_ids), *answer.tolist()[:-1]], device=device)[None]
    with torch.no_grad():  # the logits of the answer's positions only: the last len(answer) of the sequence
        logits = model(input_ids=ids, logits_to_keep=len(answer)).logits[0].float()
    log_probs = answer_log_probs(logits, space.mask(logits.shape[-1], device), space.probabilities)
    nll = float(-log_probs[torch.arange(len(answer), device=device), answer].sum())
    # greedy picks from what the probabilities range over: the whole vocabulary, or the answer tokens
    choices = logits if space.probabilities == "full" else log_probs
    exact = bool((choices.argmax(dim=-1) == answer).all())
    return nll, exact


def held_out(model, encoder: TaskEncoder, tasks: TaskSet, *, max_len: int | None = None,
             probabilities: str = "full", progress: bool = False) -> HeldOut:
    """The token-weighted mean NLL and greedy exactness of every known test output of ``tasks``."""

    space = AnswerSpace.from_encoder(encoder, probabilities)
    total_nll, total_tokens, too_long, per_output, exact, answer_tokens = 0.0, 0, [], {}, {}, {}
    for task in progress_bar(tasks.tasks(), desc="held-out", unit="task", disable=not progress):
        for index, pair in enumerate(task.test):
            if pair.output is None:
                continue
            key = f"{task.id}/{index}"
            answer_ids = encoder.encode_answer(pair.output)
            try:
                prompt = encoder.encode_prompt(task.train, pair.input, max_len=max_len, answer_room=len(answer_ids),
                                               task_id=task.id, log_drops=False)
            except TaskTooLongError:
                too_long.append(key)
                continue
            nll, exact[key] = answer_measures(model, prompt.ids, answer_ids, space)
            per_output[key], answer_tokens[key] = nll / len(answer_ids), len(answer_ids)
            total_nll += nll
            total_tokens += len(answer_ids)
    mean = total_nll / total_tokens if total_tokens else float("nan")
    share = float(np.mean(list(exact.values()))) if exact else float("nan")
    return HeldOut(mean, share, len(per_output), total_tokens, too_long, per_output, exact, answer_tokens)


def compare_models(models: Mapping[str, str | Path], tasks: TaskSet, *, max_len: int | None = None,
                   probabilities: str = "full", progress: bool = True, **load_options) -> dict[str, HeldOut]:
    """``held_out`` of each named model folder on the same tasks, one model in memory at a time.

    A path may also be the name of a registered base (``bases.BASES``), built on first use.
    ``max_len`` unset: the authors' cap (8192), cut for each model to what it takes (``ModelFolder.token_budget``).
    """
    from arc_kit.model.bases import BASES, build_base
    from arc_kit.model.loading import load_model

    results = {}
    for name, path in models.items():
        folder = build_base(str(path)) if str(path) in BASES else path
        loaded = load_model(folder, **load_options)
        budget = loaded.token_budget(max_len)
        results[name] = held_out(loaded.model, loaded.encoder(max_len=budget), tasks, max_len=budget,
                                 probabilities=probabilities, progress=progress)
        del loaded
    return results


def markdown_table(results: Mapping[str, HeldOut]) -> str:
    """The models side by side: NLL per answer token (on the outputs all measured), exact greedy share."""
    shared = compare(dict(results))
    lines = ["| model | NLL per answer token | greedy answer exact | outputs (over the budget) |",
             "|---|---|---|---|"]
    for name, result in results.items():
        lines.append(f"| {name} | {shared[name]:.4f} | {result.greedy_exact:.1%} "
                     f"({sum(result.exact.values())} / {result.outputs}) | {result.outputs} ({len(result.too_long)}) |")
    return "\n".join(lines)


def compare(results: dict[str, HeldOut]) -> dict[str, float]:
    """NLL per answer token of each model on the outputs that every model measured (a fair comparison),
    weighted by each output's tokens as ``held_out``'s own mean is."""
    shared = sorted(set.intersection(*(set(r.per_output) for r in results.values()))) if results else []
    return {name: float(np.average([result.per_output[key] for key in shared],
                                   weights=[result.answer_tokens[key] for key in shared])) if shared else float("nan")
            for name, result in results.items()}

