"""Scoring answers and selecting them by a product of experts.

The engine's scoring (each prompt run once, its keys and values reused by its answers) is checked against a
reference written here (one full
forward per answer, ``torch.log_softmax`` over the whole vocabulary for the paper's P(s|q), or over
the answer tokens for the masked measure), in both measures; scoring under augmentations against
prompts and answers built by hand from the augmentation; the aggregations and ``select`` on
numbers worked out by hand.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import arc_kit.method.experts as experts_module
import arc_kit.method.records as records_module
from arc_kit.data.augmentation import Augmentation
from arc_kit.data.tasks import Pair
from arc_kit.method.answers import AnswerSpace
from arc_kit.method.engine import make_engine
from arc_kit.method.experts import (
    AGGREGATIONS,
    Candidate,
    max_probability,
    min_probability,
    product_of_probabilities,
    select,
    sum_of_probabilities,
)
from arc_kit.method.solver import augmented_nlls
from arc_kit.method.transformers_forward import TransformersDecoder, sequence_nll
from arc_kit.model.loading import create_model
from arc_kit.text import TaskEncoder, Vocabulary

EOS = 14
PROMPT = np.array([13, *range(16, 40), 11, 1, 2, 10, 3, 4, 12])
ALLOWED = (*range(11), EOS)  # digits, newline, eos
MODES = ("full", "answer-mask")
ANSWERS = [
    [EOS],  # a single eos
    [3, 10, EOS],
    [1, 2, 3, 10, 4, 5, 6, 10, EOS],
    [0, 0, 10, EOS],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 10, 0, 10, EOS],
    [7, 10, EOS],
    [EOS],  # the same answer twice scores the same twice
]


@pytest.fixture(scope="module")
def model():
    model, _ = create_model("micro", seed=5)
    model.eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)  # spread the NLLs out a little
    return model


@pytest.fixture(scope="module")
def engine(model):
    return make_engine(model)


def score_answers(engine, prompt, answers, space: AnswerSpace, batch_size: int = 16) -> np.ndarray:
    """The engine's NLLs of ``answers`` after one prompt."""
    return engine.score([prompt], [answers], space, batch_size)[0]


def reference_nlls(model, prompt, answers, space: AnswerSpace) -> np.ndarray:
    """One full forward (no cache) per answer; each token's log-probability from ``torch.log_softmax``
    over the whole vocabulary ("full") or over the answer tokens only ("answer-mask"); a token
    outside the answer tokens makes the answer impossible (inf) either way."""
    allowed = list(space.allowed_ids)
    results = []
    for answer in answers:
        answer = [int(t) for t in answer]
        ids = torch.tensor([[*map(int, prompt), *answer]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].double()
        total = 0.0
        for row, token in zip(logits, answer):
            if token not in allowed:
                total = math.inf
                break
            if space.probabilities == "full":
                total -= float(torch.log_softmax(row, dim=-1)[token])
            else:
                total -= float(torch.log_softmax(row[allowed], dim=-1)[allowed.index(token)])
        results.append(total)
    return np.array(results)


@pytest.fixture(scope="module", params=MODES)
def space(request):
    return AnswerSpace(ALLOWED, EOS, 40, request.param)


@pytest.fixture(scope="module")
def reference(model, space):
    return reference_nlls(model, PROMPT, ANSWERS, space)


@pytest.mark.parametrize("batch_size", [1, 2, 3, len(ANSWERS), 100])
def test_the_engines_scoring_equals_one_full_forward_per_answer(engine, space, reference, batch_size):
    scores = score_answers(engine, PROMPT, ANSWERS, space, batch_size=batch_size)
    assert scores.shape == (len(ANSWERS),)
    np.testing.assert_allclose(scores, reference, rtol=0, atol=1e-4)


def test_sequence_nll_and_transformers_forward_score_as_the_reference(model, space, reference):
    found = sequence_nll(model, PROMPT, [np.array(a) for a in ANSWERS], space)
    np.testing.assert_allclose(found, reference, rtol=0, atol=1e-4)
    np.testing.assert_allclose(score_answers(TransformersDecoder(model), PROMPT, ANSWERS, space), reference, rtol=0,
                               atol=1e-4)


def test_the_reference_numbers_are_not_degenerate(reference):
    """Guard of the setup: different answers get clearly different NLLs, all finite."""
    assert np.isfinite(reference).all()
    assert len(np.unique(np.round(reference[:-1], 3))) == len(ANSWERS) - 1
    assert reference[0] == reference[-1]


def test_the_two_measures_differ(model):
    """Guard of the setup: the model gives the other tokens some probability, so the full softmax
    makes every answer less likely than the renormalised one does."""
    full, masked = (reference_nlls(model, PROMPT, ANSWERS, AnswerSpace(ALLOWED, EOS, 40, mode)) for mode in MODES)
    assert (full > masked + 0.01).all()
    assert AnswerSpace(ALLOWED, EOS, 40).probabilities == "full"  # the default


def test_scoring_takes_any_sequence_type_and_order(engine, space, reference):
    as_arrays = [np.array(a, dtype=np.int64) for a in ANSWERS[::-1]]
    scores = score_answers(engine, PROMPT.tolist(), as_arrays, space, batch_size=4)
    np.testing.assert_allclose(scores, reference[::-1], rtol=0, atol=1e-4)
    tuples = [tuple(a) for a in ANSWERS]
    np.testing.assert_allclose(score_answers(engine, tuple(PROMPT), tuples, space), reference, rtol=0, atol=1e-4)


def test_a_batch_of_single_token_answers(model, engine, space):
    answers = [[EOS], [3], [10]]
    expected = reference_nlls(model, PROMPT, answers, space)
    np.testing.assert_allclose(score_answers(engine, PROMPT, answers, space, batch_size=8), expected, rtol=0,
                               atol=1e-4)


def test_no_answers_no_scores(engine, space):
    assert score_answers(engine, PROMPT, [], space).shape == (0,)


def test_a_token_outside_the_alphabet_has_infinite_nll(engine, space):
    scores = score_answers(engine, PROMPT, [[3, 11, EOS], [3, 10, EOS]], space, batch_size=2)
    assert scores[0] == math.inf
    assert np.isfinite(scores[1])


def imports_of(module) -> set[str]:
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    return imported | {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}


def test_the_task_record_imports_no_scorer_and_the_experts_know_no_engine():
    """The product of experts is numbers over grids: the record reads its candidates from it, and neither knows
    how an NLL is measured."""
    for module in (records_module, experts_module):
        assert not {name for name in imports_of(module) if name.startswith("arc_kit.method.")} - {
            "arc_kit.method.experts", "arc_kit.method.record_json"}, module.__name__
    assert "arc_kit.method.experts" in imports_of(records_module)


def test_scoring_leaves_the_model_and_global_state_alone(engine, space):
    state = torch.random.get_rng_state()
    first = score_answers(engine, PROMPT, ANSWERS, space, batch_size=2)
    second = score_answers(engine, PROMPT, ANSWERS, space, batch_size=2)
    assert np.array_equal(first, second)
    assert torch.equal(torch.random.get_rng_state(), state)


# -- scoring under augmentations -------------------------------------------------------------------

TRAIN = (
    Pair([[1, 2, 0], [3, 4, 0]], [[2, 1], [4, 3]]),
    Pair([[5, 6], [7, 8], [9, 0]], [[6, 5, 1]]),
    Pair([[1, 1, 1, 2, 2], [0, 0, 3, 3, 3]], [[1, 2, 3]]),
)
TEST_INPUT = np.array([[4, 0, 7], [2, 2, 9]], dtype=np.uint8)
CANDIDATES = [
    np.array([[1, 2, 3], [4, 5, 6]], dtype=np.uint8),
    np.array([[7]], dtype=np.uint8),
    np.array([[0, 9], [9, 0], [1, 1]], dtype=np.uint8),
]


@pytest.fixture(scope="module")
def encoder():
    return TaskEncoder(Vocabulary())


@pytest.fixture(scope="module")
def augmentations():
    rng = np.random.default_rng(11)
    return [Augmentation(), *Augmentation.inference_set(rng, len(TRAIN), 4),
            Augmentation.random(rng, None, symmetry=5)]


def reference_table(model, encoder, augmentations, max_len=None, probabilities="full"):
    space = AnswerSpace.from_encoder(encoder, probabilities)
    table = np.zeros((len(CANDIDATES), len(augmentations)))
    for column, augmentation in enumerate(augmentations):
        prompt = encoder.encode_prompt(augmentation.apply_pairs(TRAIN), augmentation.apply_grid(TEST_INPUT),
                                       max_len=max_len)
        answers = [encoder.encode_answer(augmentation.apply_grid(grid)) for grid in CANDIDATES]
        table[:, column] = reference_nlls(model, prompt.ids, answers, space)
    return table


@pytest.fixture(scope="module")
def reference_tables(model, encoder, augmentations) -> dict[str, np.ndarray]:
    """``reference_table`` under each way of measuring, made once: every batch size is checked against it."""
    return {probabilities: reference_table(model, encoder, augmentations, probabilities=probabilities)
            for probabilities in MODES}


@pytest.mark.parametrize("probabilities", MODES)
@pytest.mark.parametrize("batch_size", [1, 5, 16])
def test_augmented_nlls_equal_scoring_each_augmented_prompt_by_hand(engine, encoder, augmentations, batch_size,
                                                                   probabilities, reference_tables):
    table = augmented_nlls(engine, encoder, TRAIN, TEST_INPUT, CANDIDATES, augmentations,
                           AnswerSpace.from_encoder(encoder, probabilities), batch_size=batch_size)
    expected = reference_tables[probabilities]
    assert table.shape == (len(CANDIDATES), len(augmentations))
    np.testing.assert_allclose(table, expected, rtol=0, atol=1e-4)
    # each augmentation is a different view: the columns differ
    assert len({tuple(np.round(column, 3)) for column in table.T}) == len(augmentations)


def test_augmented_nlls_honour_the_token_budget(model, engine, encoder, augmentations):
    full = len(encoder.encode_prompt(TRAIN, TEST_INPUT, max_len=10**6).ids)
    max_len = full + encoder.max_answer_len - 5  # one train pair must go
    assert encoder.encode_prompt(TRAIN, TEST_INPUT, max_len=max_len).dropped
    table = augmented_nlls(engine, encoder, TRAIN, TEST_INPUT, CANDIDATES, augmentations[:3],
                           AnswerSpace.from_encoder(encoder), max_len=max_len)
    expected = reference_table(model, encoder, augmentations[:3], max_len=max_len)
    np.testing.assert_allclose(table, expected, rtol=0, atol=1e-4)
    assert not np.allclose(table, reference_table(model, encoder, augmentations[:3]), atol=1e-3)


def test_augmented_nlls_of_no_candidates(engine, encoder, augmentations):
    assert augmented_nlls(engine, encoder, TRAIN, TEST_INPUT, [], augmentations[:2],
                          AnswerSpace.from_encoder(encoder)).shape == (0, 2)


# -- aggregations ---------------------------------------------------------------------------------

def test_aggregations_on_hand_computed_numbers():
    nlls = [1.0, 2.0, 3.0]
    assert product_of_probabilities(nlls) == pytest.approx(6.0)
    assert min_probability(nlls) == pytest.approx(3.0)
    assert max_probability(nlls) == pytest.approx(1.0)
    assert sum_of_probabilities(nlls) == pytest.approx(-math.log(math.exp(-1) + math.exp(-2) + math.exp(-3)))
    assert sum_of_probabilities([0.5]) == pytest.approx(0.5)
    assert sum_of_probabilities([math.log(4)] * 4) == pytest.approx(0.0, abs=1e-12)  # four quarters make one
    assert set(AGGREGATIONS) == {"product", "min", "max", "sum"}
    assert AGGREGATIONS["product"] is product_of_probabilities


def test_sum_of_probabilities_is_stable_for_large_nlls():
    assert sum_of_probabilities([1000.0, 1000.0]) == pytest.approx(1000.0 - math.log(2), abs=1e-9)
    assert sum_of_probabilities([5000.0, 5001.0]) == pytest.approx(5000.0 - math.log1p(math.exp(-1)), abs=1e-9)
    assert sum_of_probabilities([800.0, math.inf]) == pytest.approx(800.0)
    assert sum_of_probabilities([math.inf, math.inf]) == math.inf  # -log(0 + 0), not nan


def test_product_of_probabilities_is_a_sum_of_logs():
    nlls = np.random.default_rng(0).uniform(0, 50, size=16)
    assert product_of_probabilities(nlls) == pytest.approx(-math.log(math.prod(math.exp(-v) for v in nlls)),
                                                           rel=1e-9)


def candidate(scoring=(), generation=None) -> Candidate:
    return Candidate(np.zeros((1, 1), dtype=np.uint8), dict(generation or {}), list(scoring))


def test_candidate_aggregates_its_views():
    item = candidate([1.0, 4.0], {"s0": 2.5, "s1": 0.7})
    assert item.best_generation_nll == 0.7
    assert item.aggregate("product") == 5.0
    assert item.aggregate("min") == 4.0
    assert item.aggregate("max") == 1.0
    assert item.aggregate("generation") == 0.7
    assert candidate().aggregate("product") == math.inf  # never scored
    assert candidate().best_generation_nll == math.inf


def test_select_takes_the_two_best_by_the_aggregation():
    items = [
        candidate([1.0, 9.0], {"a": 3.0}),  # product 10, min-prob 9, max-prob 1
        candidate([4.0, 4.0], {"a": 2.0}),  # product 8,  min-prob 4, max-prob 4
        candidate([3.0, 6.0], {"a": 1.0}),  # product 9,  min-prob 6, max-prob 3
        candidate([2.0, 20.0], {"a": 0.5}),  # product 22, min-prob 20, max-prob 2
    ]
    assert select(items, "product") == [1, 2]
    assert select(items, "min") == [1, 2]
    assert select(items, "max") == [0, 3]
    assert select(items, "generation") == [3, 2]
    assert select(items, "product", count=3) == [1, 2, 0]
    assert select(items, "product", count=1) == [1]
    sums = [sum_of_probabilities(item.scoring_nlls) for item in items]
    assert select(items, "sum") == list(np.argsort(sums, kind="stable")[:2])


def test_select_breaks_ties_by_generation_nll_then_by_order():
    items = [
        candidate([2.0, 2.0], {"a": 5.0}),
        candidate([1.0, 3.0], {"a": 1.0}),  # same product as 0, better generation NLL
        candidate([3.0, 1.0], {"a": 1.0}),  # same product and generation NLL as 1: the earlier one wins
        candidate([2.5, 1.5]),  # same product, never generated (inf)
    ]
    assert select(items, "product", count=4) == [1, 2, 0, 3]
    assert select(items, "generation", count=4) == [1, 2, 0, 3]


def test_select_puts_unscored_candidates_last_and_handles_few_candidates():
    items = [candidate([], {"a": 0.1}), candidate([7.0], {"a": 9.0})]
    assert select(items, "product") == [1, 0]
    assert select(items[:1], "product") == [0]
    assert select([], "product") == []


def test_select_rejects_unknown_aggregations():
    with pytest.raises(ValueError, match="unknown aggregation"):
        select([candidate([1.0])], "mean")
