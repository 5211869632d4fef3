"""Scoring answers and selecting them by a product of experts.

Every scorer the kit has (the engine on the kit's model and on each model family, in passes
shorter than a prompt, over 4-bit weights; transformers' own forward) is checked against one full
forward per answer (``sequence_nll``, itself pinned token by token in test_dfs), in both measures
(on the kit's model at every batch size), by one test; scoring under augmentations against prompts
and answers built by hand from the augmentation; the aggregations and ``select`` on numbers worked
out by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pytest
import torch
from test_engine import family_model

import arc_kit.method.engine as engine_module
from arc_kit.data.augmentation import Augmentation
from arc_kit.data.tasks import Pair
from arc_kit.method.answers import AnswerSpace, BatchLimit
from arc_kit.method.engine import Engine, make_engine
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
PROMPT = [13, *range(16, 40), 11, 1, 2, 10, 3, 4, 12]
ALLOWED = (*range(11), EOS)  # digits, newline, eos
MODES = ("full", "answer-mask")
ANSWERS = [
    [EOS],  # a single eos
    [3, 10, EOS],
    [1, 2, 3, 10, 4, 5, 6, 10, EOS],
    [0, 0, 10, EOS],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 10, 0, 10, EOS],
    [3, 11, EOS],  # a token outside the alphabet: an impossible answer (inf)
    [EOS],  # the same answer twice scores the same twice
]
OUTSIDE = 5  # the index of the answer with a token outside the alphabet
# prompts of different lengths (one with nothing to score), given as lists, an array and a tuple; their answers as
# lists, arrays and tuples, in other orders
PROMPTS = [PROMPT, np.array([13, 16, 17, 11, 2, 12]), [13, *range(20, 30), 11, 7, 10, 8, 9, 12], (13, 30, 11, 5, 12)]
LISTS = [ANSWERS, [np.array(answer) for answer in ANSWERS[::-1]], [], [tuple(answer) for answer in ANSWERS[1:4]]]


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


class Variant(NamedTuple):
    """A scorer on a model, and the batch sizes it is asked at (every size only where the engine's own model runs)."""

    family: str  # "micro" (the kit's model) or a family of test_engine
    quantization: str | None  # a 4-bit quantization of test_engine_four_bit
    scorer: Callable
    passes: int | None  # tokens an eager pass takes (None: the engine's own)
    batch_sizes: tuple[int, ...]


VARIANTS = {
    "engine": Variant("micro", None, make_engine, None, (1, 2, 3, 100)),
    "engine-llama-biases-tied-head-dim-in-passes-of-8": Variant("llama-biases-tied-head-dim", None, make_engine, 8,
                                                                (3,)),
    "engine-mistral-window-in-passes-of-8": Variant("mistral-window", None, make_engine, 8, (3,)),
    "engine-qwen3-in-passes-of-8": Variant("qwen3", None, make_engine, 8, (3,)),
    "engine-4-bit-qwen2-nf4-double-f32": Variant("qwen2", "nf4-double-f32", make_engine, None, (3,)),
    "engine-4-bit-mistral-window-nf4-double-bf16": Variant("mistral-window", "nf4-double-bf16", make_engine, None,
                                                           (3,)),
    # transformers' own forward: a sliding window in its own cache; one answer a call, whatever the batch size
    "transformers-forward-mistral-window": Variant("mistral-window", None, TransformersDecoder, None, (16,)),
}
SLOW_VARIANTS = ("engine-4-bit-mistral-window-nf4-double-bf16",)


def variant_model(variant: Variant, micro, folder):
    """The model of ``variant`` and the NLLs' tolerance (4 bits: ``test_engine_four_bit.tolerance``)."""
    if variant.family == "micro":
        return micro, 1e-4
    if variant.quantization is None:
        return family_model(variant.family), 1e-4
    pytest.importorskip("bitsandbytes")
    from test_engine_four_bit import load_four_bit, tolerance

    family_model(variant.family).save_pretrained(folder)
    return load_four_bit(folder, variant.quantization), tolerance(variant.quantization)


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_VARIANTS else name
                                  for name in VARIANTS])
def test_scoring_equals_one_full_forward_per_answer(name, model, tmp_path, monkeypatch):
    """Each answer's NLL after its prompt, whatever the scorer, measure or answers a call shares, as one full forward
    of the prompt and the answer gives it; the prompt with no answers gets none."""
    variant = VARIANTS[name]
    scored, tolerance = variant_model(variant, model, tmp_path)
    scorer = variant.scorer(scored)
    if variant.passes is not None:  # prompts and answers in several passes too
        monkeypatch.setattr(engine_module, "PASS_TOKENS", variant.passes)
    found = {}
    for probabilities in MODES:
        space = AnswerSpace(ALLOWED, EOS, 40, probabilities)
        expected = [sequence_nll(scored, prompt, chunk, space) for prompt, chunk in zip(PROMPTS, LISTS)]
        for batch_size in variant.batch_sizes:
            found[probabilities] = scorer.score(PROMPTS, LISTS, space, batch_size)
            assert [len(nlls) for nlls in found[probabilities]] == [len(chunk) for chunk in LISTS]
            for nlls, reference in zip(found[probabilities], expected):
                np.testing.assert_allclose(nlls, reference, rtol=0, atol=tolerance)
    # guards of the setup: one answer impossible, the others finite and apart, the two measures apart
    full, masked = found["full"][0], found["answer-mask"][0]
    assert np.isinf(full[OUTSIDE]) and np.isfinite(np.delete(full, OUTSIDE)).all()
    assert len({round(float(nll), 3) for nll in np.delete(full, OUTSIDE)}) == len(ANSWERS) - 2
    assert (np.delete(full, OUTSIDE) > np.delete(masked, OUTSIDE) + 0.01).all()


def test_scoring_rejects_mismatched_lists(engine):
    with pytest.raises(ValueError, match="2 prompts but 1 lists"):
        engine.score([PROMPT, PROMPT], [[[EOS]]], AnswerSpace(ALLOWED, EOS, 40))


def test_scoring_out_of_memory_halves_the_answer_rows(model, monkeypatch, caplog):
    """Answer passes of more than two rows fail: the rows per call halve (the prompt is not run again) and the
    limit ends as the size that fitted; a pass of one row that fails raises."""
    space = AnswerSpace(ALLOWED, EOS, 40)
    engine, failed, passes = Engine(model), [], []
    feed = engine._feed

    def failing(cache, runs, positions):
        passes.append((len(runs), positions[0]))
        if positions[0] > 0 and len(runs) > 2:  # an answer pass (a prompt's starts at 0)
            failed.append(len(runs))
            raise torch.OutOfMemoryError("CUDA out of memory (a test's stand-in)")
        return feed(cache, runs, positions)

    monkeypatch.setattr(engine, "_feed", failing)
    limit = BatchLimit("answers")
    results = engine.score(PROMPTS, LISTS, space, 4, limit)
    for prompt, chunk, nlls in zip(PROMPTS, LISTS, results):
        np.testing.assert_allclose(nlls, sequence_nll(model, prompt, chunk, space), rtol=0, atol=1e-4)
    assert failed == [4] and limit.size == 2 and "going on with 2" in caplog.text
    assert sum(1 for rows, position in passes if position == 0) == 3  # each prompt with answers, run once
    monkeypatch.setattr(engine, "_feed", lambda *arguments: (_ for _ in ()).throw(
        torch.OutOfMemoryError("CUDA out of memory (a test's stand-in)")))
    with pytest.raises(torch.OutOfMemoryError):
        engine.score([PROMPT], [ANSWERS], space, 1)


def test_scoring_leaves_the_model_and_global_state_alone(engine):
    space = AnswerSpace(ALLOWED, EOS, 40)
    state = torch.random.get_rng_state()
    first = engine.score(PROMPTS, LISTS, space, 2)
    second = engine.score(PROMPTS, LISTS, space, 2)
    assert all(np.array_equal(one, other) for one, other in zip(first, second))
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
        table[:, column] = sequence_nll(model, prompt.ids, answers, space)
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
