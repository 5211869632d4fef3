"""How well a model knows held-out answers: the NLL per output token of known test outputs.

For each task and test input, the prompt is the task as given (no augmentation, no test-time
training) and the answer is the known output, eos included; its NLL comes from
``scoring.score_answers`` (the same numbers the product of experts multiplies), divided by the
answer's length. Lower is better; comparing two models on the same tasks says which one learned
more of ARC, long before either solves anything. This module knows models and tasks; it does not
train or search.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from arc_kit.decoding import AnswerSpace
from arc_kit.scoring import score_answers
from arc_kit.tasks import TaskSet
from arc_kit.text_format import TaskEncoder, TaskTooLongError


@dataclass
class HeldOutNll:
    """Mean NLL per answer token over the test outputs that fit, and what was left out."""

    nll_per_token: float
    outputs: int  # test outputs measured
    tokens: int  # answer tokens measured
    too_long: list[str] = field(default_factory=list)  # "task_id/index" of outputs over the budget
    per_output: dict[str, float] = field(default_factory=dict)  # "task_id/index" -> NLL per token

    def to_json(self) -> dict:
        return {"nll_per_token": round(self.nll_per_token, 5), "outputs": self.outputs, "tokens": self.tokens,
                "too_long": self.too_long}


def held_out_nll(model, encoder: TaskEncoder, tasks: TaskSet, *, max_len: int | None = None,
                 progress: bool = False) -> HeldOutNll:
    """The token-weighted mean NLL of every known test output of ``tasks`` (see the module docstring)."""
    from tqdm.auto import tqdm

    space = AnswerSpace.from_encoder(encoder)
    total_nll, total_tokens, too_long, per_output = 0.0, 0, [], {}
    for task in tqdm(tasks.tasks(), desc="held-out NLL", unit="task", disable=not progress):
        for index, pair in enumerate(task.test):
            test_input, answer = pair.input, pair.output
            if answer is None:
                continue
            key = f"{task.id}/{index}"
            answer_ids = encoder.encode_answer(answer)
            try:
                prompt = encoder.encode_prompt(task.train, test_input, max_len=max_len, answer_room=len(answer_ids),
                                               task_id=task.id, log_drops=False)
            except TaskTooLongError:
                too_long.append(key)
                continue
            nll = float(score_answers(model, prompt.ids, [answer_ids], space)[0])
            per_output[key] = nll / len(answer_ids)
            total_nll += nll
            total_tokens += len(answer_ids)
    mean = total_nll / total_tokens if total_tokens else float("nan")
    return HeldOutNll(mean, len(per_output), total_tokens, too_long, per_output)


def compare(results: dict[str, HeldOutNll]) -> dict[str, float]:
    """NLL per token of each model on the outputs that every model measured (a fair comparison)."""
    shared = set.intersection(*(set(r.per_output) for r in results.values())) if results else set()
    return {name: float(np.mean([r.per_output[key] for key in sorted(shared)])) if shared else float("nan")
            for name, r in results.items()}


__all__ = ["HeldOutNll", "compare", "held_out_nll"]
