"""The batched paths against their slow references: batched DFS lanes = ``dfs_search`` = brute force;
``score_prompts`` = ``score_answers`` per prompt; the solver's batched sampling and scoring = its
one-augmentation-at-a-time ones. Each on both decode engines (reference and fast), and the fast
engine's own moves (its lane buckets, its capacity growth, its out-of-memory answer) against none.

Models are the peaked micro models of test_dfs (enumerable) and the bigram model of conftest (real
grids); prompts of different lengths, so that padding, masks and per-lane positions all matter.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import bigram_model
from test_dfs import (CONFIGS, ENGINE_CASE_NAMES, ENGINE_CASES, EOS, PROMPT, THRESHOLDS, FakeClock, allowed_calls,
                      assert_same_as_reference, dfs_at, engine_for, guesses, model_for, safe_enumeration, slow_but)

import arc_kit.method.answers as decoding_module
import arc_kit.method.dfs as dfs_module
import arc_kit.method.fast.static_engine as static_engine_module
from arc_kit.data.augmentation import Augmentation
from arc_kit.method.batched_dfs import batched_dfs_search
from arc_kit.method.answers import AnswerSpace, SearchResult
from arc_kit.method.engine import BatchLimit
from arc_kit.method.reference.nlls import score_answers, sequence_nll
from arc_kit.method.reference.caches import LaneCache, new_cache, prefix_cache
from arc_kit.method.dfs import DEADLINE_BEFORE_START, dfs_search
from arc_kit.method.engines import make_engine
from arc_kit.method.reference.engine import ReferenceEngine
from arc_kit.method.scoring import score_prompts
from arc_kit.settings import ENGINE_KINDS, SamplerSettings, SolveSettings
from arc_kit.method.fast.static_engine import StaticEngine
from arc_kit.method.solver import Solver
from arc_kit.data.tasks import Pair
from arc_kit.text import TaskEncoder, Vocabulary

# prompts of other lengths than PROMPT, each ending with the output prefix
OTHER_PROMPTS = [PROMPT[:-3] + [5, 6, 12], [13, 16, 17, 11, 2, 12], PROMPT[:20] + [11, 7, 10, 8, 9, 12]]


def assert_same_results(batched: SearchResult, single: SearchResult):
    assert [c.ids for c in batched.completions] == [c.ids for c in single.completions]
    np.testing.assert_allclose([c.nll for c in batched.completions], [c.nll for c in single.completions],
                               rtol=0, atol=1e-4)
    assert batched.forward_calls == single.forward_calls  # the same branches, explored in the same order
    assert batched.tokens_processed == single.tokens_processed
    assert batched.dropped == single.dropped and batched.capped == single.capped


# the quick inner loop (-m "not slow") takes each engine under one measure (cases test_dfs enumerates in its quick
# loop too); the full run takes every case
QUICK_CASES = ("seed0-x10-len8-full-reference", "seed2-x10-len6-answer-mask-fast")


@pytest.fixture(scope="module", params=slow_but(QUICK_CASES), ids=ENGINE_CASE_NAMES)
def case(request):
    """(engine, space, enumerations), as test_dfs's ``case``."""
    (allowed, max_length, seed, scale), mode, kind = request.param
    space = AnswerSpace(allowed, EOS, max_length, mode)
    model = model_for(seed, scale)
    return engine_for(seed, scale, kind), space, [safe_enumeration(model, space, threshold) for threshold in THRESHOLDS]


# -- batched DFS lanes ------------------------------------------------------------------------------

def test_lanes_of_one_prompt_with_every_kind_of_guess_equal_brute_force(case):
    model, space, enumerations = case  # the case's engine
    for threshold, enumeration in enumerations:
        lane_guesses = [None, *guesses(model.model, space, enumeration, threshold).values()]
        results = batched_dfs_search(model, [PROMPT] * len(lane_guesses), space, dfs_at(threshold), lane_guesses)
        assert len(results) == len(lane_guesses)
        for guess, result in zip(lane_guesses, results):
            assert_same_as_reference(result, enumeration)
            assert_same_results(result, dfs_search(model, PROMPT, space, dfs_at(threshold), guess=guess))


def test_lanes_of_prompts_of_different_lengths_equal_single_searches(case):
    model, space, enumerations = case  # the case's engine
    prompts = [PROMPT, *OTHER_PROMPTS]
    for threshold, enumeration in enumerations:
        best = list(enumeration.answers[0][0]) if enumeration.answers else None
        lane_guesses = [best, None, best, [0, 0, EOS]]
        results = batched_dfs_search(model, prompts, space, dfs_at(threshold), lane_guesses)
        assert_same_as_reference(results[0], enumeration)
        for prompt, guess, result in zip(prompts, lane_guesses, results):
            assert_same_results(result, dfs_search(model, prompt, space, dfs_at(threshold), guess=guess))
        # the guard of this test: lanes of different lengths of work, so lanes leave at different steps
        if threshold < 0.02:
            assert len({result.forward_calls for result in results}) > 1


def test_compacting_and_growing_the_reference_lane_cache_change_nothing(monkeypatch):
    """With one spare column the lanes' paths are moved behind the prompts and the room doubled, again and again."""
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    model = model_for(seed, scale)
    threshold, _ = safe_enumeration(model, space, 0.01)
    compactions, growths = [], []
    compact, grow = ReferenceEngine._compact, LaneCache.grow

    def counted_compact(self, *arguments):
        compactions.append(self._cache.length)
        return compact(self, *arguments)

    def counted_grow(self, capacity, rows=None):
        growths.append(capacity)
        return grow(self, capacity, rows)

    monkeypatch.setattr(dfs_module, "SPARE_POSITIONS", 1)
    monkeypatch.setattr(ReferenceEngine, "_compact", counted_compact)
    monkeypatch.setattr(LaneCache, "grow", counted_grow)
    prompts = [PROMPT, *OTHER_PROMPTS]
    lane_guesses = [None, [1, 1, EOS], None, None]
    engine = make_engine(model, "reference")
    results = batched_dfs_search(engine, prompts, space, dfs_at(threshold), lane_guesses)
    assert len(compactions) > 3 and len(growths) > 1 and growths == sorted(growths)
    for prompt, guess, result in zip(prompts, lane_guesses, results):
        assert_same_results(result, dfs_search(engine, prompt, space, dfs_at(threshold), guess=guess))


def test_the_fast_engines_buckets_and_capacity_growth_change_nothing(monkeypatch):
    """Capacities of exactly what is asked (so the cache grows again and again) and lanes leaving their
    bucket for smaller ones: every lane finds what the reference's single search finds."""
    allowed, max_length, seed, scale = CONFIGS[1]  # deep paths: positions well past the longest first pass
    space = AnswerSpace(allowed, EOS, max_length)
    model = model_for(seed, scale)
    threshold, _ = safe_enumeration(model, space, 0.01)
    growths, buckets = [], []
    grow, keep = StaticEngine._grow, StaticEngine.keep_lanes

    def counted_grow(self, positions):
        growths.append(positions)
        return grow(self, positions)

    def counted_keep(self, lanes):
        keep(self, lanes)
        buckets.append(self._lanes.bucket)

    monkeypatch.setattr(dfs_module, "SPARE_POSITIONS", 0)
    monkeypatch.setattr(static_engine_module, "capacity_bucket", lambda positions: positions)
    monkeypatch.setattr(StaticEngine, "_grow", counted_grow)
    monkeypatch.setattr(StaticEngine, "keep_lanes", counted_keep)
    prompts = [PROMPT, *OTHER_PROMPTS, PROMPT[:15] + [12]]  # five lanes: a bucket of 8 first
    lane_guesses = [None, [1, 1, EOS], None, None, [2, EOS]]
    engine, reference = make_engine(model, "fast"), make_engine(model, "reference")
    results = batched_dfs_search(engine, prompts, space, dfs_at(threshold), lane_guesses)
    assert len(growths) > 2 and {4, 2, 1} <= set(buckets)  # guard: it grew, and lanes moved down every bucket
    assert len(engine._pool) > 3  # the caches are kept for the next search
    for prompt, guess, result in zip(prompts, lane_guesses, results):
        assert_same_results(result, dfs_search(reference, prompt, space, dfs_at(threshold), guess=guess))


@pytest.mark.parametrize("kind", ENGINE_KINDS)
def test_the_forward_call_cap_holds_per_lane(kind):
    """Each lane stops at its own cap, exactly where its single search stops (same guess, same order)."""
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    model = engine_for(seed, scale, kind)
    prompts = [PROMPT, *OTHER_PROMPTS]
    settings = dfs_at(0.01, max_forward_calls=7)
    results = batched_dfs_search(model, prompts, space, settings, [None, None, [2, EOS], None])
    assert any(result.capped for result in results)
    for prompt, guess, result in zip(prompts, [None, None, [2, EOS], None], results):
        assert result.forward_calls <= 7
        assert_same_results(result, dfs_search(model, prompt, space, settings, guess=guess))


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()  # one reading per check: each lane's first pass, then each step of all lanes
    monkeypatch.setattr(decoding_module, "time", fake)
    return fake


DEADLINE_GUESSES = [None, None, [2, EOS], None]


@pytest.mark.parametrize("kind", ENGINE_KINDS)
def test_a_deadline_stops_every_lane_where_a_call_cap_would(clock, kind):
    """The deadline is the whole call's: every lane still searching stops at the same step."""
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    model = engine_for(seed, scale, kind)
    prompts = [PROMPT, *OTHER_PROMPTS]
    full = batched_dfs_search(model, prompts, space, dfs_at(0.01), DEADLINE_GUESSES)
    for steps in (0, 1, 4, 9):
        results = batched_dfs_search(model, prompts, space, dfs_at(0.01), DEADLINE_GUESSES,
                                     deadline=clock.now + len(prompts) + 1 + steps)
        assert [r.forward_calls for r in results] == [min(steps, f.forward_calls) for f in full]
        for prompt, guess, result, untimed in zip(prompts, DEADLINE_GUESSES, results, full):
            single = allowed_calls(model, prompt, space, 0.01, steps, clock, guess)
            assert [c.ids for c in result.completions] == [c.ids for c in single.completions]
            stopped_early = result.forward_calls < untimed.forward_calls
            assert (result.capped or "").startswith("deadline reached") == stopped_early
    assert any(f.forward_calls > 9 for f in full)  # guard: the deadline cut real work short


@pytest.mark.parametrize("kind", ENGINE_KINDS)
def test_a_deadline_during_the_first_passes_leaves_the_rest_unsearched(clock, kind):
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    model = engine_for(seed, scale, kind)
    prompts = [PROMPT, *OTHER_PROMPTS]
    results = batched_dfs_search(model, prompts, space, dfs_at(0.01), DEADLINE_GUESSES, deadline=clock.now + 3)
    for prompt, guess, result in zip(prompts[:2], DEADLINE_GUESSES[:2], results[:2]):  # the first passes made
        first_pass_only = allowed_calls(model, prompt, space, 0.01, 0, clock, guess)
        assert [c.ids for c in result.completions] == [c.ids for c in first_pass_only.completions]
        assert result.forward_calls == 0 and result.capped.startswith("deadline reached")
    for result in results[2:]:
        assert result.completions == [] and result.capped == DEADLINE_BEFORE_START and result.tokens_processed == 0


def test_no_prompts_and_mismatched_guesses():
    model = model_for(0, 10.0)
    space = AnswerSpace((0, 1, 2, EOS), EOS, 8)
    assert batched_dfs_search(model, [], space) == []
    with pytest.raises(ValueError, match="2 prompts but 1 guesses"):
        batched_dfs_search(model, [PROMPT, PROMPT], space, guesses=[None])


# -- out of memory: the batch halved, the results unchanged -----------------------------------------

class OutOfMemoryPast(torch.nn.Module):
    """A model whose calls of more than ``largest`` rows raise the accelerator's out-of-memory error,
    as do its first ``failures`` calls that ``fails(input_ids, past_key_values)`` picks; it records
    every call's rows (and whether it raised)."""

    def __init__(self, model, largest: int = 10**9, failures: int = 0, fails=None):
        super().__init__()
        self.inner, self.config = model, model.config
        self.largest, self.failures, self.fails = largest, failures, fails
        self.calls: list[tuple[int, bool]] = []

    def forward(self, input_ids, past_key_values=None, **options):
        raising = input_ids.shape[0] > self.largest
        if not raising and self.failures and self.fails(input_ids, past_key_values):
            self.failures -= 1
            raising = True
        self.calls.append((input_ids.shape[0], raising))
        if raising:
            raise torch.OutOfMemoryError("CUDA out of memory (a test's stand-in)")
        return self.inner(input_ids=input_ids, past_key_values=past_key_values, **options)


def a_step(input_ids, past_key_values):
    return input_ids.shape[1] == 1 and past_key_values.get_seq_length() > 0


def an_answer_call(input_ids, past_key_values):
    return past_key_values.get_seq_length() > 0


@pytest.fixture
def lanes_case():
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    model = model_for(seed, scale)
    prompts = [PROMPT, *OTHER_PROMPTS]
    return model, space, prompts, [None, [1, 1, EOS], None, [2, EOS]]


_SINGLE_SEARCHES: dict[tuple, SearchResult] = {}


def assert_same_as_single_searches(model, space, prompts, lane_guesses, results, threshold=0.01):
    """Each lane's result is its single search's on the reference engine, searched once per session (the model is
    ``lanes_case``'s, one of test_dfs's ``model_for``: never changed, never freed)."""
    assert len(results) == len(prompts)
    for prompt, guess, result in zip(prompts, lane_guesses, results):
        key = (id(model), tuple(prompt), None if guess is None else tuple(guess), space, threshold)
        if key not in _SINGLE_SEARCHES:
            _SINGLE_SEARCHES[key] = dfs_search(ReferenceEngine(model), prompt, space, dfs_at(threshold),
                                               guess=guess)
        assert_same_results(result, _SINGLE_SEARCHES[key])


def test_lanes_out_of_memory_are_fed_in_halves_and_the_limit_is_kept(lanes_case, caplog):
    model, space, prompts, lane_guesses = lanes_case
    fake, limit = OutOfMemoryPast(model, largest=2), BatchLimit("lanes")
    results = batched_dfs_search(ReferenceEngine(fake), prompts, space, dfs_at(0.01), lane_guesses, limit=limit)
    assert_same_as_single_searches(model, space, prompts, lane_guesses, results)
    assert limit.size == 2  # the size that fitted, reported
    assert [call for call in fake.calls if call[1]] == [(4, True)]  # one failed step, then calls of two lanes
    assert max(rows for rows, _ in fake.calls[fake.calls.index((4, True)):][1:]) == 2
    assert "out of memory with 4 lanes per model call; going on with 2" in caplog.text
    fake.calls.clear()
    again = batched_dfs_search(ReferenceEngine(fake), prompts, space, dfs_at(0.01), lane_guesses, limit=limit)
    assert max(rows for rows, _ in fake.calls) == 2 and not any(raised for _, raised in fake.calls)
    assert_same_as_single_searches(model, space, prompts, lane_guesses, again)


def test_lanes_that_run_out_of_memory_one_at_a_time_are_searched_in_smaller_groups(lanes_case):
    """Steps fail at 4, 2 and 1 lanes per call: the group of 4 starts again as groups of one (sequential)."""
    model, space, prompts, lane_guesses = lanes_case
    fake, limit = OutOfMemoryPast(model, failures=3, fails=a_step), BatchLimit("lanes")
    results = batched_dfs_search(ReferenceEngine(fake), prompts, space, dfs_at(0.01), lane_guesses, limit=limit)
    assert [rows for rows, raised in fake.calls if raised] == [4, 2, 1]
    assert limit.size == 1
    assert_same_as_single_searches(model, space, prompts, lane_guesses, results)


def test_one_lane_out_of_memory_raises(lanes_case):
    model, space, prompts, lane_guesses = lanes_case
    with pytest.raises(torch.OutOfMemoryError):
        batched_dfs_search(ReferenceEngine(OutOfMemoryPast(model, largest=0)), prompts, space, dfs_at(0.01),
                           lane_guesses)


def test_a_model_the_fast_engine_cannot_read_falls_back_to_the_reference_with_one_line(lanes_case, caplog):
    model, space, prompts, lane_guesses = lanes_case
    with caplog.at_level("WARNING", logger="arc_kit.method.engines"):
        engine = make_engine(OutOfMemoryPast(model), "fast")
    assert isinstance(engine, ReferenceEngine)
    lines = [record.getMessage() for record in caplog.records if record.name == "arc_kit.method.engines"]
    assert lines == ["the fast decode engine cannot run this model (OutOfMemoryPast has no model.embed_tokens); "
                     "using the reference engine"]


def test_the_fast_engine_out_of_memory_searches_in_smaller_groups(lanes_case, monkeypatch, caplog):
    """The fast engine does not split a step: a step of more than two lanes that runs out of memory
    starts the group again as groups of two, which find what the single searches find."""
    model, space, prompts, lane_guesses = lanes_case
    engine, limit, failed = make_engine(model, "fast"), BatchLimit("lanes"), []
    step = engine.step

    def failing_step(tokens, positions):
        if len(tokens) > 2:
            failed.append(len(tokens))
            raise torch.OutOfMemoryError("CUDA out of memory (a test's stand-in)")
        return step(tokens, positions)

    monkeypatch.setattr(engine, "step", failing_step)
    results = batched_dfs_search(engine, prompts, space, dfs_at(0.01), lane_guesses, limit=limit)
    assert failed == [4] and limit.size == 2
    assert "out of memory with 4 lanes per model call; going on with 2" in caplog.text
    assert_same_as_single_searches(model, space, prompts, lane_guesses, results)


def test_a_batch_limit_halves_and_never_grows(caplog):
    limit = BatchLimit("answers")
    assert limit.take(16) == 16
    limit.halve(16)
    assert (limit.size, limit.take(16), limit.take(3)) == (8, 8, 3)
    limit.halve(3)  # a smaller call failed: half of it
    assert limit.size == 1 and limit.take(16) == 1
    limit.halve(16)  # a larger one (a group started before) never raises it again
    assert limit.size == 1
    assert "out of memory with 16 answers per model call; going on with 8" in caplog.text


# -- batched scoring --------------------------------------------------------------------------------

SCORING_SPACE = AnswerSpace((*range(11), EOS), EOS, 40)
SCORING_ANSWERS = [[EOS], [3, 10, EOS], [1, 2, 3, 10, 4, 5, 6, 10, EOS], [0, 0, 10, EOS],
                   [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 10, 0, 10, EOS], [11, EOS]]


@pytest.fixture(scope="module")
def scoring_model():
    model = model_for(5, 4.0)
    return model


@pytest.mark.parametrize("kind", ENGINE_KINDS)
@pytest.mark.parametrize("batch_size, prompt_batch_size", [(1, 1), (3, 2), (5, None), (100, 100)])
def test_score_prompts_equals_score_answers_prompt_by_prompt(scoring_model, batch_size, prompt_batch_size, kind):
    prompts = [PROMPT, *OTHER_PROMPTS]
    answers = [SCORING_ANSWERS, SCORING_ANSWERS[::-1], [], SCORING_ANSWERS[1:4]]  # one prompt has nothing to score
    results = score_prompts(make_engine(scoring_model, kind), prompts, answers, SCORING_SPACE, batch_size, prompt_batch_size)
    assert [len(r) for r in results] == [len(a) for a in answers]
    for prompt, chunk, result in zip(prompts, answers, results):
        expected = score_answers(scoring_model, prompt, chunk, SCORING_SPACE)
        np.testing.assert_allclose(result, expected, rtol=0, atol=1e-4)
    assert np.isinf(results[0][-1])  # a token outside the alphabet
    assert len({round(float(v), 3) for v in results[0][:-1]}) == len(SCORING_ANSWERS) - 1


def test_score_prompts_rejects_mismatched_lists(scoring_model):
    with pytest.raises(ValueError, match="2 prompts but 1 lists"):
        score_prompts(scoring_model, [PROMPT, PROMPT], [[[EOS]]], SCORING_SPACE)


FOUR_LISTS = [SCORING_ANSWERS, SCORING_ANSWERS[::-1], SCORING_ANSWERS[1:4], SCORING_ANSWERS[:2]]


def assert_scores_as_one_prompt_at_a_time(model, prompts, answers, results):
    for prompt, chunk, result in zip(prompts, answers, results):
        np.testing.assert_allclose(result, score_answers(model, prompt, chunk, SCORING_SPACE), rtol=0, atol=1e-4)


def test_scoring_out_of_memory_halves_prompts_and_answer_rows(scoring_model, caplog):
    prompts = [PROMPT, *OTHER_PROMPTS]
    fake = OutOfMemoryPast(scoring_model, largest=2)
    prompt_limit, answer_limit = BatchLimit("prompts"), BatchLimit("answers")
    results = score_prompts(ReferenceEngine(fake), prompts, FOUR_LISTS, SCORING_SPACE, 5, 4, prompt_limit=prompt_limit,
                            answer_limit=answer_limit)
    assert_scores_as_one_prompt_at_a_time(scoring_model, prompts, FOUR_LISTS, results)
    assert (prompt_limit.size, answer_limit.size) == (2, 2)
    assert [rows for rows, raised in fake.calls if raised] == [4, 5]  # the prompts' call, then the first answers'
    assert "going on with 2" in caplog.text


def test_scoring_out_of_memory_with_one_answer_row_halves_the_prompts(scoring_model):
    prompts = [PROMPT, *OTHER_PROMPTS]
    fake = OutOfMemoryPast(scoring_model, failures=3, fails=an_answer_call)
    prompt_limit, answer_limit = BatchLimit("prompts"), BatchLimit("answers")
    results = score_prompts(ReferenceEngine(fake), prompts, FOUR_LISTS, SCORING_SPACE, 4, prompt_limit=prompt_limit,
                            answer_limit=answer_limit)
    assert [rows for rows, raised in fake.calls if raised] == [4, 2, 1]
    assert (prompt_limit.size, answer_limit.size) == (2, 1)
    assert_scores_as_one_prompt_at_a_time(scoring_model, prompts, FOUR_LISTS, results)


def test_fast_scoring_out_of_memory_halves_answer_rows_then_prompts(scoring_model, monkeypatch):
    """The same halving on the fast engine: answer calls of more than two rows fail, and so does every
    answer call while more than one prompt is held; the limits end as the sizes that fitted."""
    prompts = [PROMPT, *OTHER_PROMPTS]
    engine, failed = make_engine(scoring_model, "fast"), []
    nlls_after, held = engine.nlls_after, []

    def prefixes(group_prompts, space):
        held[:] = [len(group_prompts)]
        return StaticEngine.prompt_prefixes(engine, group_prompts, space)

    def failing(prefixes, answers, rows, space):
        if len(answers) > 2 or held[0] > 1:
            failed.append((held[0], len(answers)))
            raise torch.OutOfMemoryError("CUDA out of memory (a test's stand-in)")
        return nlls_after(prefixes, answers, rows, space)

    monkeypatch.setattr(engine, "prompt_prefixes", prefixes)
    monkeypatch.setattr(engine, "nlls_after", failing)
    prompt_limit, answer_limit = BatchLimit("prompts"), BatchLimit("answers")
    results = score_prompts(engine, prompts, FOUR_LISTS, SCORING_SPACE, 4, prompt_limit=prompt_limit,
                            answer_limit=answer_limit)
    assert failed[:3] == [(4, 4), (4, 2), (4, 1)] and (prompt_limit.size, answer_limit.size) == (1, 1)
    assert_scores_as_one_prompt_at_a_time(scoring_model, prompts, FOUR_LISTS, results)


def test_score_answers_out_of_memory_halves_the_answer_rows(scoring_model):
    fake, limit = OutOfMemoryPast(scoring_model, largest=3), BatchLimit("answers")
    scores = score_answers(fake, PROMPT, SCORING_ANSWERS, SCORING_SPACE, batch_size=6, limit=limit)
    np.testing.assert_allclose(scores, sequence_nll(scoring_model, PROMPT, SCORING_ANSWERS, SCORING_SPACE),
                               rtol=0, atol=1e-4)
    assert limit.size == 3 and [rows for rows, raised in fake.calls if raised] == [6]
    with pytest.raises(torch.OutOfMemoryError):
        score_answers(OutOfMemoryPast(scoring_model, failures=1, fails=an_answer_call), PROMPT, SCORING_ANSWERS,
                      SCORING_SPACE, batch_size=1)


# -- the caches the batched paths read: against plain tensor operations ---------------------------

def layer_tensors(seed: int, rows: int, length: int):
    """(keys, values) of a 2-layer cache: (rows, 2 heads, length, 4)."""
    generator = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn((rows, 2, length, 4), generator=generator) for _ in range(2)) for _ in range(2)]


class StoredCache:
    """What ``LaneCache.put`` reads from a model's cache: layers holding keys and values."""

    def __init__(self, tensors):
        from transformers.cache_utils import DynamicLayer

        self.layers = []
        for keys, values in tensors:
            layer = DynamicLayer()
            layer.update(keys, values)
            self.layers.append(layer)


def test_a_lane_cache_stacks_keeps_moves_and_grows_like_tensor_indexing(scoring_model):
    lengths = [5, 3, 7]
    parts = [layer_tensors(seed, 1, length) for seed, length in enumerate(lengths)]
    cache = LaneCache(3, 9)
    for row, tensors in enumerate(parts):
        cache.put(row, StoredCache(tensors))
    expected = [tuple(torch.zeros((3, 2, 9, 4)) for _ in range(2)) for _ in range(2)]
    for row, tensors in enumerate(parts):
        for layer, pair in enumerate(tensors):
            for part in (0, 1):
                expected[layer][part][row, :, :lengths[row]] = pair[part][0]
    assert cache.length == 7

    def assert_holds(reference, rows, columns):
        for layer in range(2):
            for part in (0, 1):
                held, wanted = cache.buffers[layer][part], reference[layer][part]
                assert torch.equal(held[:rows, :, :columns], wanted[:rows, :, :columns])

    assert_holds(expected, 3, 9)
    cache.keep_rows([0, 2])
    expected = [tuple(part[[0, 2]] for part in pair) for pair in expected]
    assert_holds(expected, 2, 7)
    columns = torch.tensor([[4, 1, 6], [2, 2, 0]])
    cache.move_columns(columns, 5)
    moved = [tuple(part.clone() for part in pair) for pair in expected]
    for layer in range(2):
        for part in (0, 1):
            for row in range(2):
                moved[layer][part][row, :, 5:8] = expected[layer][part][row][:, columns[row]]
    assert cache.length == 8 and cache.capacity == 9
    assert_holds(moved, 2, 8)
    cache.grow(20, rows=2)
    assert (cache.rows, cache.capacity, cache.buffers[0][0].shape) == (2, 20, (2, 2, 20, 4))
    assert_holds(moved, 2, 8)
    assert not cache.buffers[1][1][:, :, 8:].any()  # new room is zeros: masked columns stay finite


def test_a_lane_cache_view_reads_the_buffers_in_place_and_writes_the_next_column(scoring_model):
    """A model call through ``view`` = the same call on a cache holding each row's own tensors."""
    model = scoring_model
    prompts = [PROMPT[:9], PROMPT[:6]]
    cache = LaneCache(2, 12)
    for row, prompt in enumerate(prompts):
        with torch.no_grad():
            output = model(input_ids=torch.tensor([prompt]), past_key_values=new_cache(model), use_cache=True)
        cache.put(row, output.past_key_values)
    view = cache.view(model, slice(0, 2))
    assert view.layers[0].keys.data_ptr() == cache.buffers[0][0].data_ptr()  # a view, not a copy
    attention = torch.zeros((2, 10), dtype=torch.long)
    attention[0, :9] = attention[1, :6] = attention[:, 9] = 1
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[3], [4]]), attention_mask=attention,
                       position_ids=torch.tensor([[9], [6]]), past_key_values=view, use_cache=True).logits[:, -1]
        for row, (prompt, token) in enumerate(zip(prompts, (3, 4))):
            alone = model(input_ids=torch.tensor([prompt + [token]])).logits[0, -1]
            torch.testing.assert_close(logits[row], alone, rtol=0, atol=1e-4)
    assert cache.buffers[0][0][:, :, 9].abs().sum() > 0 and cache.length == 9  # written; length left to the caller


def test_a_prefix_cache_of_one_prompt_is_an_expanded_view(scoring_model):
    tensors = layer_tensors(0, 3, 5)
    shared = prefix_cache(scoring_model, tensors, 1).layers[0]
    prefix = shared._prefix(tensors[0][0], 4)
    assert prefix.shape == (4, 2, 5, 4) and prefix.stride(0) == 0 and prefix.data_ptr() == tensors[0][0][1].data_ptr()
    picked = prefix_cache(scoring_model, tensors, torch.tensor([2, 0, 2])).layers[1]
    assert torch.equal(picked._prefix(tensors[1][1], 3), tensors[1][1][[2, 0, 2]])
    keys, _ = shared.update(torch.ones((4, 2, 1, 4)), torch.zeros((4, 2, 1, 4)))
    assert keys.shape == (4, 2, 6, 4) and torch.equal(keys[2, :, :5], tensors[0][0][1])
    assert shared.keys is tensors[0][0]  # nothing a call brings is kept


# -- the solver, batched and not ------------------------------------------------------------------

TRAIN = (
    Pair([[1, 2, 0], [3, 4, 0]], [[2, 1], [4, 3]]),
    Pair([[5, 6], [7, 8], [9, 0]], [[6, 5, 1]]),
)
TEST_INPUT = np.array([[4, 0, 7], [2, 2, 9]], dtype=np.uint8)


@pytest.fixture(scope="module")
def solver():
    model, _ = bigram_model()
    settings = SolveSettings(sampler=SamplerSettings("dfs", threshold=0.02), test_time_training=False,
                             scoring_batch_size=4)
    return Solver(model, TaskEncoder(Vocabulary()), settings)


def test_batched_sampling_finds_the_same_candidates(solver):
    augmentations = Augmentation.inference_set(np.random.default_rng(4), len(TRAIN), 5)
    found = {}
    for batched in (False, True):
        rng = np.random.default_rng(0)
        candidates, stats = solver.sample(solver.model, TRAIN, TEST_INPUT, augmentations, solver.settings.sampler,
                                          rng, batched=batched)
        found[batched] = ({c.grid.tobytes() + bytes(c.grid.shape): c for c in candidates}, stats, rng.integers(10**9))
    (single, single_stats, single_next), (batched, batched_stats, batched_next) = found[False], found[True]
    assert len(single) > 3  # guard: real candidates, several of them
    assert single.keys() == batched.keys()
    for key, candidate in single.items():
        assert candidate.generation_nlls.keys() == batched[key].generation_nlls.keys()
        for name, nll in candidate.generation_nlls.items():
            assert batched[key].generation_nlls[name] == pytest.approx(nll, abs=1e-4)
    assert batched_stats.answers == single_stats.answers and batched_stats.prompt_tokens == single_stats.prompt_tokens
    assert batched_next == single_next  # the same draws from the generator


def test_batched_scoring_fills_the_same_nlls(solver):
    augmentations = Augmentation.inference_set(np.random.default_rng(5), len(TRAIN), 4)
    candidates, _ = solver.sample(solver.model, TRAIN, TEST_INPUT, augmentations[:2], solver.settings.sampler,
                                  np.random.default_rng(0), batched=False)
    assert len(candidates) > 2
    tables = {}
    for batched in (False, True):
        solver.score(solver.model, TRAIN, TEST_INPUT, candidates, augmentations, batched=batched)
        tables[batched] = np.array([c.scoring_nlls for c in candidates])
    assert tables[True].shape == (len(candidates), len(augmentations))
    np.testing.assert_allclose(tables[True], tables[False], rtol=0, atol=1e-4)


def test_the_batched_paths_are_a_setting_kept_through_json():
    assert SolveSettings.from_json(SolveSettings(batched=True).to_json()).batched is True
    assert SolveSettings.from_json({}).batched is SolveSettings().batched
