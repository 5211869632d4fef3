"""The search's lanes against their slow references: lanes = one search a prompt = brute force; the solver's views =
each view searched alone. And the engine's own moves (its lane buckets, its capacity growth, its out-of-memory
answer) against none. (The engine's scoring against one full forward per answer: test_scoring.)

Models are the peaked micro models of test_dfs (enumerable) and the bigram model of conftest (real
grids); prompts of different lengths, so that padding, masks and per-lane positions all matter.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import bigram_model
from test_dfs import (CASE_NAMES, CONFIGS, EOS, PROMPT, THRESHOLDS, FakeClock, allowed_calls,
                      assert_same_as_reference, dfs_at, dfs_search, engine_for, guesses, model_for, safe_enumeration,
                      slow_but)

import arc_kit.method.answers as decoding_module
import arc_kit.method.engine as engine_module
import arc_kit.method.search as search_module
from arc_kit.data.augmentation import Augmentation
from arc_kit.data.grids import grid_key
from arc_kit.data.tasks import Pair
from arc_kit.method.answers import AnswerSpace, BatchLimit, SearchResult
from arc_kit.method.engine import Engine, make_engine
from arc_kit.method.search import DEADLINE_BEFORE_START, search
from arc_kit.method.solver import Solver
from arc_kit.method.transformers_forward import TransformersDecoder
from arc_kit.settings import SamplerSettings, SolveSettings
from arc_kit.text import TaskEncoder, Vocabulary

# prompts of other lengths than PROMPT, each ending with the output prefix
OTHER_PROMPTS = [PROMPT[:-3] + [5, 6, 12], [13, 16, 17, 11, 2, 12], PROMPT[:20] + [11, 7, 10, 8, 9, 12]]


def assert_same_results(lane: SearchResult, single: SearchResult):
    assert [c.ids for c in lane.completions] == [c.ids for c in single.completions]
    np.testing.assert_allclose([c.nll for c in lane.completions], [c.nll for c in single.completions],
                               rtol=0, atol=1e-4)
    assert lane.forward_calls == single.forward_calls  # the same branches, explored in the same order
    assert lane.tokens_processed == single.tokens_processed
    assert lane.dropped == single.dropped and lane.capped == single.capped


# the quick inner loop (-m "not slow") takes one case under each measure (cases test_dfs enumerates in its quick
# loop too); the full run takes every case
QUICK_CASES = ("seed0-x10-len8-full", "seed2-x10-len6-answer-mask")


@pytest.fixture(scope="module", params=slow_but(QUICK_CASES), ids=CASE_NAMES)
def case(request):
    """(engine, space, enumerations), as test_dfs's ``case``."""
    (allowed, max_length, seed, scale), mode = request.param
    space = AnswerSpace(allowed, EOS, max_length, mode)
    model = model_for(seed, scale)
    return engine_for(seed, scale), space, [safe_enumeration(model, space, threshold) for threshold in THRESHOLDS]


# -- lanes ------------------------------------------------------------------------------------------

def test_lanes_of_one_prompt_with_every_kind_of_guess_equal_brute_force(case):
    engine, space, enumerations = case
    for threshold, enumeration in enumerations:
        lane_guesses = [None, *guesses(engine.model, space, enumeration, threshold).values()]
        results = search(engine, [PROMPT] * len(lane_guesses), space, dfs_at(threshold), lane_guesses)
        assert len(results) == len(lane_guesses)
        for guess, result in zip(lane_guesses, results):
            assert_same_as_reference(result, enumeration)
            assert_same_results(result, dfs_search(engine, PROMPT, space, dfs_at(threshold), guess=guess))


def test_lanes_of_prompts_of_different_lengths_equal_single_searches(case):
    engine, space, enumerations = case
    prompts = [PROMPT, *OTHER_PROMPTS]
    for threshold, enumeration in enumerations:
        best = list(enumeration.answers[0][0]) if enumeration.answers else None
        lane_guesses = [best, None, best, [0, 0, EOS]]
        results = search(engine, prompts, space, dfs_at(threshold), lane_guesses)
        assert_same_as_reference(results[0], enumeration)
        for prompt, guess, result in zip(prompts, lane_guesses, results):
            assert_same_results(result, dfs_search(engine, prompt, space, dfs_at(threshold), guess=guess))
        # the guard of this test: lanes of different lengths of work, so lanes leave at different steps
        if threshold < 0.02:
            assert len({result.forward_calls for result in results}) > 1


def test_the_engines_buckets_and_capacity_growth_change_nothing(monkeypatch):
    """Capacities of exactly what is asked (so the cache grows again and again) and lanes leaving their
    bucket for smaller ones: every lane finds what its single search on transformers' forward finds."""
    allowed, max_length, seed, scale = CONFIGS[1]  # deep paths: positions well past the longest first pass
    space = AnswerSpace(allowed, EOS, max_length)
    model = model_for(seed, scale)
    threshold, _ = safe_enumeration(model, space, 0.01)
    growths, buckets = [], []
    fit, keep = Engine._fit, Engine.keep_lanes

    def counted_fit(self, positions):
        capacity = self._lanes.capacity
        fit(self, positions)
        if self._lanes.capacity != capacity:
            growths.append(positions)

    def counted_keep(self, lanes):
        keep(self, lanes)
        buckets.append(self._lanes.bucket)

    monkeypatch.setattr(search_module, "SPARE_POSITIONS", 0)
    monkeypatch.setattr(engine_module, "capacity_bucket", lambda positions: positions)
    monkeypatch.setattr(Engine, "_fit", counted_fit)
    monkeypatch.setattr(Engine, "keep_lanes", counted_keep)
    prompts = [PROMPT, *OTHER_PROMPTS, PROMPT[:15] + [12]]  # five lanes: a bucket of 8 first
    lane_guesses = [None, [1, 1, EOS], None, None, [2, EOS]]
    engine, oracle = make_engine(model), TransformersDecoder(model)
    results = search(engine, prompts, space, dfs_at(threshold), lane_guesses)
    assert len(growths) > 2 and {4, 2, 1} <= set(buckets)  # guard: it grew, and lanes moved down every bucket
    assert len(engine._caches.caches) > 3  # the caches are kept for the next search
    for prompt, guess, result in zip(prompts, lane_guesses, results):
        assert_same_results(result, dfs_search(oracle, prompt, space, dfs_at(threshold), guess=guess))


def test_the_forward_call_cap_holds_per_lane():
    """Each lane stops at its own cap, exactly where its single search stops (same guess, same order)."""
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    engine = engine_for(seed, scale)
    prompts = [PROMPT, *OTHER_PROMPTS]
    settings = dfs_at(0.01, max_forward_calls=7)
    results = search(engine, prompts, space, settings, [None, None, [2, EOS], None])
    assert any(result.capped for result in results)
    for prompt, guess, result in zip(prompts, [None, None, [2, EOS], None], results):
        assert result.forward_calls <= 7
        assert_same_results(result, dfs_search(engine, prompt, space, settings, guess=guess))


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()  # one reading per check: each lane's first pass, then each step of all lanes
    monkeypatch.setattr(decoding_module, "time", fake)
    return fake


DEADLINE_GUESSES = [None, None, [2, EOS], None]


def test_a_deadline_stops_every_lane_where_a_call_cap_would(clock):
    """The deadline is the whole call's: every lane still searching stops at the same step."""
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    engine = engine_for(seed, scale)
    prompts = [PROMPT, *OTHER_PROMPTS]
    full = search(engine, prompts, space, dfs_at(0.01), DEADLINE_GUESSES)
    for steps in (0, 1, 4, 9):
        results = search(engine, prompts, space, dfs_at(0.01), DEADLINE_GUESSES,
                         deadline=clock.now + len(prompts) + 1 + steps)
        assert [r.forward_calls for r in results] == [min(steps, f.forward_calls) for f in full]
        for prompt, guess, result, untimed in zip(prompts, DEADLINE_GUESSES, results, full):
            single = allowed_calls(engine, prompt, space, 0.01, steps, clock, guess)
            assert [c.ids for c in result.completions] == [c.ids for c in single.completions]
            stopped_early = result.forward_calls < untimed.forward_calls
            assert (result.capped or "").startswith("deadline reached") == stopped_early
    assert any(f.forward_calls > 9 for f in full)  # guard: the deadline cut real work short


def test_a_deadline_during_the_first_passes_leaves_the_rest_unsearched(clock):
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    engine = engine_for(seed, scale)
    prompts = [PROMPT, *OTHER_PROMPTS]
    results = search(engine, prompts, space, dfs_at(0.01), DEADLINE_GUESSES, deadline=clock.now + 3)
    for prompt, guess, result in zip(prompts[:2], DEADLINE_GUESSES[:2], results[:2]):  # the first passes made
        first_pass_only = allowed_calls(engine, prompt, space, 0.01, 0, clock, guess)
        assert [c.ids for c in result.completions] == [c.ids for c in first_pass_only.completions]
        assert result.forward_calls == 0 and result.capped.startswith("deadline reached")
    for result in results[2:]:
        assert result.completions == [] and result.capped == DEADLINE_BEFORE_START and result.tokens_processed == 0


def test_no_prompts_and_mismatched_guesses():
    engine = engine_for(0, 10.0)
    space = AnswerSpace((0, 1, 2, EOS), EOS, 8)
    assert search(engine, [], space) == []
    with pytest.raises(ValueError, match="2 prompts but 1 guesses"):
        search(engine, [PROMPT, PROMPT], space, guesses=[None])
    with pytest.raises(ValueError, match="2 prompts but 3 draft sources"):
        search(engine, [PROMPT, PROMPT], space, drafts=[None] * 3)


# -- out of memory: the lanes in smaller groups, the results unchanged ------------------------------

@pytest.fixture
def lanes_case():
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    prompts = [PROMPT, *OTHER_PROMPTS]
    return model_for(seed, scale), space, prompts, [None, [1, 1, EOS], None, [2, EOS]]


def out_of_memory_past(engine, monkeypatch, largest: int, failures: int = 10**9) -> list[int]:
    """Make ``engine``'s steps of more than ``largest`` lanes (its first ``failures`` of them) raise the accelerator's
    out-of-memory error; the lane counts of the steps that raised."""
    step, failed = engine.step, []

    def failing_step(runs, positions):
        if len(runs) > largest and len(failed) < failures:
            failed.append(len(runs))
            raise torch.OutOfMemoryError("CUDA out of memory (a test's stand-in)")
        return step(runs, positions)

    monkeypatch.setattr(engine, "step", failing_step)
    return failed


def assert_same_as_single_searches(model, space, prompts, lane_guesses, results, threshold=0.01):
    """Each lane's result is its single search's on transformers' forward."""
    assert len(results) == len(prompts)
    for prompt, guess, result in zip(prompts, lane_guesses, results):
        assert_same_results(result, dfs_search(TransformersDecoder(model), prompt, space, dfs_at(threshold),
                                               guess=guess))


def test_lanes_out_of_memory_are_searched_in_smaller_groups_and_the_limit_is_kept(lanes_case, monkeypatch, caplog):
    """The engine does not split a step: a step of more than two lanes that runs out of memory starts the group
    again as groups of two, which find what the single searches find; the next search starts at two."""
    model, space, prompts, lane_guesses = lanes_case
    engine, limit = make_engine(model), BatchLimit("lanes")
    failed = out_of_memory_past(engine, monkeypatch, largest=2)
    results = search(engine, prompts, space, dfs_at(0.01), lane_guesses, limit=limit)
    assert failed == [4] and limit.size == 2
    assert "out of memory with 4 lanes per model call; going on with 2" in caplog.text
    assert_same_as_single_searches(model, space, prompts, lane_guesses, results)
    again = search(engine, prompts, space, dfs_at(0.01), lane_guesses, limit=limit)
    assert failed == [4]  # the size that ran out of memory is not tried again
    assert_same_as_single_searches(model, space, prompts, lane_guesses, again)


def test_lanes_that_run_out_of_memory_again_and_again_are_searched_one_at_a_time(lanes_case, monkeypatch):
    """Steps fail at 4 and 2 lanes: the group of 4 starts again as groups of one (a sequential search)."""
    model, space, prompts, lane_guesses = lanes_case
    engine, limit = make_engine(model), BatchLimit("lanes")
    failed = out_of_memory_past(engine, monkeypatch, largest=1, failures=2)
    results = search(engine, prompts, space, dfs_at(0.01), lane_guesses, limit=limit)
    assert failed == [4, 2] and limit.size == 1
    assert_same_as_single_searches(model, space, prompts, lane_guesses, results)


def test_one_lane_out_of_memory_raises(lanes_case, monkeypatch):
    model, space, prompts, lane_guesses = lanes_case
    engine = make_engine(model)
    out_of_memory_past(engine, monkeypatch, largest=0)
    with pytest.raises(torch.OutOfMemoryError):
        search(engine, prompts, space, dfs_at(0.01), lane_guesses)


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


# -- the solver: the first view alone, then the others as lanes -----------------------------------

TRAIN = (
    Pair([[1, 2, 0], [3, 4, 0]], [[2, 1], [4, 3]]),
    Pair([[5, 6], [7, 8], [9, 0]], [[6, 5, 1]]),
)
TEST_INPUT = np.array([[4, 0, 7], [2, 2, 9]], dtype=np.uint8)


def test_the_solvers_views_find_what_each_view_searched_alone_finds():
    model, _ = bigram_model()
    settings = SolveSettings(sampler=SamplerSettings("dfs", threshold=0.02), test_time_training=False)
    solver = Solver(model, TaskEncoder(Vocabulary()), settings)
    augmentations = Augmentation.inference_set(np.random.default_rng(4), len(TRAIN), 5)
    candidates, stats = solver.sample(solver.model, TRAIN, TEST_INPUT, augmentations, settings.sampler)
    found = {grid_key(c.grid): c.generation_nlls for c in candidates}
    assert len(found) > 3  # guard: real candidates, several of them
    alone: dict[bytes, dict[str, float]] = {}
    for augmentation in augmentations:
        prompt = solver.encoder.encode_prompt(augmentation.apply_pairs(TRAIN), augmentation.apply_grid(TEST_INPUT))
        result = dfs_search(solver.engine(), prompt.ids, solver.space, settings.sampler.replace(drafts="none"))
        for completion in result.completions:
            grid = augmentation.invert_grid(solver.encoder.decode_answer(completion.ids))
            alone.setdefault(grid_key(grid), {})[augmentation.key] = completion.nll
    assert found.keys() == alone.keys()
    for key, nlls in found.items():
        assert nlls.keys() == alone[key].keys()
        np.testing.assert_allclose([nlls[view] for view in nlls], [alone[key][view] for view in nlls], atol=1e-4)
    assert stats.answers == sum(len(nlls) for nlls in alone.values()) and len(stats.prompt_tokens) == 5
