"""Held-out NLL per output token (arc_kit.evaluation), checked against one full forward per output."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from arc_kit.datasets import load_tasks
from arc_kit.decoding import AnswerSpace, sequence_nll
from arc_kit.evaluation import compare, held_out_nll
from arc_kit.models import create_model
from arc_kit.tasks import TaskSet
from arc_kit.text_format import TaskEncoder, Vocabulary


@pytest.fixture(scope="module")
def setup():
    model, _ = create_model("micro", seed=2)
    model.eval()
    encoder = TaskEncoder(Vocabulary(), max_len=2048)
    tasks = load_tasks("arc-agi-1/evaluation")
    small = sorted(tasks.tasks(), key=lambda t: sum(p.input.size + p.output.size for p in t.train))[:4]
    return model, encoder, TaskSet(small)


def test_held_out_nll_is_the_token_weighted_mean_of_full_forwards(setup):
    model, encoder, tasks = setup
    result = held_out_nll(model, encoder, tasks)
    space = AnswerSpace.from_encoder(encoder)
    total, tokens = 0.0, 0
    for task in tasks.tasks():
        for test_input, answer in zip(task.test_inputs, task.test_outputs):
            answer_ids = encoder.encode_answer(answer)
            prompt = encoder.encode_prompt(task.train, test_input, answer_room=len(answer_ids), log_drops=False)
            total += sequence_nll(model, prompt.ids, [answer_ids], space)[0]
            tokens += len(answer_ids)
    assert result.tokens == tokens and result.outputs == sum(len(t.test) for t in tasks.tasks())
    assert result.nll_per_token == pytest.approx(total / tokens, rel=1e-4)
    assert 0.5 < result.nll_per_token < 10  # an untrained model: near log(vocabulary), not degenerate


def test_outputs_over_the_budget_are_listed_not_measured(setup):
    model, encoder, tasks = setup
    result = held_out_nll(model, encoder, tasks, max_len=40)
    assert result.outputs == 0 and len(result.too_long) == sum(len(t.test) for t in tasks.tasks())
    assert math.isnan(result.nll_per_token)


def test_compare_uses_only_the_outputs_both_measured(setup):
    model, encoder, tasks = setup
    sharper, _ = create_model("micro", seed=2)
    sharper.eval()
    with torch.no_grad():
        sharper.lm_head.weight.mul_(3.0)
    first, second = held_out_nll(model, encoder, tasks), held_out_nll(sharper, encoder, tasks)
    second.per_output.pop(next(iter(second.per_output)))
    means = compare({"a": first, "b": second})
    shared = sorted(second.per_output)
    assert means["a"] == pytest.approx(np.mean([first.per_output[k] for k in shared]))
    assert means["b"] == pytest.approx(np.mean([second.per_output[k] for k in shared]))
