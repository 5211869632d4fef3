"""Held-out NLL per output token and greedy exactness (arc_kit.experiments.evaluation), checked against one full forward
per output and against real greedy decoding."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import bigram_model

from arc_kit.data.datasets import load_tasks
from arc_kit.data.tasks import Pair, Task, TaskSet
from arc_kit.experiments.evaluation import answer_measures, compare, held_out
from arc_kit.method.answers import AnswerSpace
from arc_kit.method.transformers_forward import sequence_nll
from arc_kit.model.loading import create_model
from arc_kit.text import TaskEncoder, Vocabulary


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
    result = held_out(model, encoder, tasks)
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
    result = held_out(model, encoder, tasks, max_len=40)
    assert result.outputs == 0 and len(result.too_long) == sum(len(t.test) for t in tasks.tasks())
    assert math.isnan(result.nll_per_token)


def test_compare_uses_only_the_outputs_both_measured(setup):
    model, encoder, tasks = setup
    sharper, _ = create_model("micro", seed=2)
    sharper.eval()
    with torch.no_grad():
        sharper.lm_head.weight.mul_(3.0)
    first, second = held_out(model, encoder, tasks), held_out(sharper, encoder, tasks)
    second.per_output.pop(next(iter(second.per_output)))
    means = compare({"a": first, "b": second})
    shared = sorted(second.per_output)

    def per_token(result):  # summed NLL over summed tokens, on the shared outputs
        return sum(result.per_output[k] * result.answer_tokens[k] for k in shared) / \
            sum(result.answer_tokens[k] for k in shared)

    assert means["a"] == pytest.approx(per_token(first)) and means["b"] == pytest.approx(per_token(second))
    assert len({first.answer_tokens[k] for k in shared}) > 1  # outputs of different lengths: the weights matter
    everything = compare({"a": first})  # one model: its own token-weighted mean
    assert everything["a"] == pytest.approx(first.nll_per_token)


def _greedy(model, prompt_ids, steps: int, space: AnswerSpace) -> list[int]:
    """Real greedy decoding, token by token, each step a full forward: the slow reference.

    Full probabilities: the most probable token of the whole vocabulary; answer-mask: of the answer tokens.
    """
    ids = list(map(int, prompt_ids))
    written = []
    for _ in range(steps):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
        if space.probabilities == "answer-mask":
            logits = logits.masked_fill(~space.mask(logits.shape[-1]), float("-inf"))
        token = int(logits.argmax())
        written.append(token)
        ids.append(token)
        if token == space.eos_id:
            break
    return written


@pytest.mark.parametrize("probabilities", ["full", "answer-mask"])
def test_greedy_exactness_read_off_one_forward_equals_real_greedy_decoding(setup, probabilities):
    model, encoder, tasks = setup
    if probabilities == "full":  # the untrained micro model's greedy leaves the answer tokens at once
        model, _ = bigram_model()
    space = AnswerSpace.from_encoder(encoder, probabilities)
    checked = 0
    for task in tasks.tasks():
        prompt = encoder.encode_prompt(task.train, task.test_inputs[0], log_drops=False)
        written = _greedy(model, prompt.ids, 12, space)
        assert all(token in space.allowed_ids for token in written)
        ended = written[-1] == space.eos_id
        # the model's own greedy answer is exact; cut short by an eos that greedy did not write, it is not
        answer = written if ended else written[:-1] + [space.eos_id]
        nll, exact = answer_measures(model, prompt.ids, answer, space)
        assert exact == ended
        assert nll == pytest.approx(sequence_nll(model, prompt.ids, [answer], space)[0], rel=1e-4)
        for position in range(len(written)):  # change one token: greedy no longer writes it
            changed = list(written)
            changed[position] = next(t for t in space.allowed_ids if t != written[position])
            assert not answer_measures(model, prompt.ids, changed, space)[1]
            checked += 1
    assert checked >= 8


def test_a_model_whose_greedy_answer_is_known_is_exact_on_it_and_only_on_it():
    model, _ = bigram_model()  # greedy after the output prefix: 3, newline, eos (the grid [[3]])
    encoder = TaskEncoder(Vocabulary(), max_len=512)
    train = [Pair([[1]], [[2]]), Pair([[4]], [[6]])]
    tasks = TaskSet([Task("a", train, [Pair([[5]], [[3]])]), Task("b", train, [Pair([[5]], [[5]]), Pair([[1]], [[3]])]),
                     Task("c", train, [Pair([[2]], [[3, 3]])])])
    result = held_out(model, encoder, tasks)
    assert result.exact == {"a/0": True, "b/0": False, "b/1": True, "c/0": False}
    assert result.greedy_exact == pytest.approx(0.5) and result.outputs == 4
    assert result.to_json()["greedy_exact_outputs"] == ["a/0", "b/1"]


def test_the_held_out_command_compares_models_on_the_same_tasks(micro_model, tmp_path, capsys):
    from arc_kit.cli import main

    out = tmp_path / "held_out.json"
    assert main(["held-out", f"first={micro_model}", f"second={micro_model}", "--tasks", "2", "--max-len", "2048",
                 "--device", "cpu", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| first |" in printed and "| second |" in printed and "greedy answer exact" in printed
    written = json.loads(out.read_text())
    assert len(written["tasks"]) == 2 and set(written["results"]) == {"first", "second"}
    first, second = written["results"]["first"], written["results"]["second"]
    assert first["nll_per_token"] == second["nll_per_token"] and first["outputs"] >= 2
