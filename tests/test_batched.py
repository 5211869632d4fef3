"""The batched paths against their slow references: batched DFS lanes = ``dfs_search`` = brute force;
``score_prompts`` = ``score_answers`` per prompt; the solver's batched sampling and scoring = its
one-augmentation-at-a-time ones.

Models are the peaked micro models of test_dfs (enumerable) and the bigram model of conftest (real
grids); prompts of different lengths, so that padding, masks and per-lane positions all matter.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import bigram_model
from test_dfs import (CASE_NAMES, CASES, CONFIGS, EOS, PROMPT, THRESHOLDS, FakeClock, assert_same_as_reference,
                      guesses, model_for, safe_enumeration)

import arc_kit.batched_dfs as batched_dfs_module
import arc_kit.decoding as decoding_module
from arc_kit.augmentation import Augmentation
from arc_kit.batched_dfs import batched_dfs_search
from arc_kit.decoding import AnswerSpace, SearchResult, score_answers
from arc_kit.dfs import DEADLINE_BEFORE_START, DfsSettings, dfs_search
from arc_kit.scoring import score_prompts
from arc_kit.settings import SamplerSettings, SolveSettings
from arc_kit.solver import Solver
from arc_kit.tasks import Pair
from arc_kit.text_format import TaskEncoder, Vocabulary

# prompts of other lengths than PROMPT, each ending with the output prefix
OTHER_PROMPTS = [PROMPT[:-3] + [5, 6, 12], [13, 16, 17, 11, 2, 12], PROMPT[:20] + [11, 7, 10, 8, 9, 12]]


def assert_same_results(batched: SearchResult, single: SearchResult):
    assert [c.ids for c in batched.completions] == [c.ids for c in single.completions]
    np.testing.assert_allclose([c.nll for c in batched.completions], [c.nll for c in single.completions],
                               rtol=0, atol=1e-4)
    assert batched.forward_calls == single.forward_calls  # the same branches, explored in the same order
    assert batched.tokens_processed == single.tokens_processed
    assert batched.dropped == single.dropped and batched.capped == single.capped


@pytest.fixture(scope="module", params=CASES, ids=CASE_NAMES)
def case(request):
    (allowed, max_length, seed, scale), mode = request.param
    space = AnswerSpace(allowed, EOS, max_length, mode)
    model = model_for(seed, scale)
    return model, space, [safe_enumeration(model, space, threshold) for threshold in THRESHOLDS]


# -- batched DFS lanes ------------------------------------------------------------------------------

def test_lanes_of_one_prompt_with_every_kind_of_guess_equal_brute_force(case):
    model, space, enumerations = case
    for threshold, enumeration in enumerations:
        lane_guesses = [None, *guesses(model, space, enumeration, threshold).values()]
        results = batched_dfs_search(model, [PROMPT] * len(lane_guesses), space, DfsSettings(threshold), lane_guesses)
        assert len(results) == len(lane_guesses)
        for guess, result in zip(lane_guesses, results):
            assert_same_as_reference(result, enumeration)
            assert_same_results(result, dfs_search(model, PROMPT, space, DfsSettings(threshold), guess=guess))


def test_lanes_of_prompts_of_different_lengths_equal_single_searches(case):
    model, space, enumerations = case
    prompts = [PROMPT, *OTHER_PROMPTS]
    for threshold, enumeration in enumerations:
        best = list(enumeration.answers[0][0]) if enumeration.answers else None
        lane_guesses = [best, None, best, [0, 0, EOS]]
        results = batched_dfs_search(model, prompts, space, DfsSettings(threshold), lane_guesses)
        assert_same_as_reference(results[0], enumeration)
        for prompt, guess, result in zip(prompts, lane_guesses, results):
            assert_same_results(result, dfs_search(model, prompt, space, DfsSettings(threshold), guess=guess))
        # the guard of this test: lanes of different lengths of work, so lanes leave at different steps
        if threshold < 0.02:
            assert len({result.forward_calls for result in results}) > 1


def test_compacting_the_cache_changes_nothing(monkeypatch):
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    model = model_for(seed, scale)
    threshold, _ = safe_enumeration(model, space, 0.01)
    compactions = []
    compact = batched_dfs_module._compact

    def counted(*args):
        compactions.append(args[-1])
        return compact(*args)

    monkeypatch.setattr(batched_dfs_module, "COMPACTION_SLACK", 0)
    monkeypatch.setattr(batched_dfs_module, "_compact", counted)
    prompts = [PROMPT, *OTHER_PROMPTS]
    results = batched_dfs_search(model, prompts, space, DfsSettings(threshold), [None, [1, 1, EOS], None, None])
    assert len(compactions) > 3
    for prompt, guess, result in zip(prompts, [None, [1, 1, EOS], None, None], results):
        assert_same_results(result, dfs_search(model, prompt, space, DfsSettings(threshold), guess=guess))


def test_the_forward_call_cap_holds_per_lane():
    """Each lane stops at its own cap, exactly where its single search stops (same guess, same order)."""
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    model = model_for(seed, scale)
    prompts = [PROMPT, *OTHER_PROMPTS]
    settings = DfsSettings(0.01, max_forward_calls=7)
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


def test_a_deadline_stops_every_lane_where_a_call_cap_would(clock):
    """The deadline is the whole call's: every lane still searching stops at the same step."""
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    model = model_for(seed, scale)
    prompts = [PROMPT, *OTHER_PROMPTS]
    full = batched_dfs_search(model, prompts, space, DfsSettings(0.01), DEADLINE_GUESSES)
    for steps in (0, 1, 4, 9):
        results = batched_dfs_search(model, prompts, space, DfsSettings(0.01), DEADLINE_GUESSES,
                                     deadline=clock.now + len(prompts) + 1 + steps)
        assert [r.forward_calls for r in results] == [min(steps, f.forward_calls) for f in full]
        for prompt, guess, result, untimed in zip(prompts, DEADLINE_GUESSES, results, full):
            single = dfs_search(model, prompt, space, DfsSettings(0.01, max_forward_calls=steps), guess=guess)
            assert [c.ids for c in result.completions] == [c.ids for c in single.completions]
            stopped_early = result.forward_calls < untimed.forward_calls
            assert (result.capped or "").startswith("deadline reached") == stopped_early
    assert any(f.forward_calls > 9 for f in full)  # guard: the deadline cut real work short


def test_a_deadline_during_the_first_passes_leaves_the_rest_unsearched(clock):
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    model = model_for(seed, scale)
    prompts = [PROMPT, *OTHER_PROMPTS]
    results = batched_dfs_search(model, prompts, space, DfsSettings(0.01), DEADLINE_GUESSES, deadline=clock.now + 3)
    for prompt, guess, result in zip(prompts[:2], DEADLINE_GUESSES[:2], results[:2]):  # the first passes made
        first_pass_only = dfs_search(model, prompt, space, DfsSettings(0.01, max_forward_calls=0), guess=guess)
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


# -- batched scoring --------------------------------------------------------------------------------

SCORING_SPACE = AnswerSpace((*range(11), EOS), EOS, 40)
SCORING_ANSWERS = [[EOS], [3, 10, EOS], [1, 2, 3, 10, 4, 5, 6, 10, EOS], [0, 0, 10, EOS],
                   [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 10, 0, 10, EOS], [11, EOS]]


@pytest.fixture(scope="module")
def scoring_model():
    model = model_for(5, 4.0)
    return model


@pytest.mark.parametrize("batch_size, prompt_batch_size", [(1, 1), (3, 2), (5, None), (100, 100)])
def test_score_prompts_equals_score_answers_prompt_by_prompt(scoring_model, batch_size, prompt_batch_size):
    prompts = [PROMPT, *OTHER_PROMPTS]
    answers = [SCORING_ANSWERS, SCORING_ANSWERS[::-1], [], SCORING_ANSWERS[1:4]]  # one prompt has nothing to score
    results = score_prompts(scoring_model, prompts, answers, SCORING_SPACE, batch_size, prompt_batch_size)
    assert [len(r) for r in results] == [len(a) for a in answers]
    for prompt, chunk, result in zip(prompts, answers, results):
        expected = score_answers(scoring_model, prompt, chunk, SCORING_SPACE)
        np.testing.assert_allclose(result, expected, rtol=0, atol=1e-4)
    assert np.isinf(results[0][-1])  # a token outside the alphabet
    assert len({round(float(v), 3) for v in results[0][:-1]}) == len(SCORING_ANSWERS) - 1


def test_score_prompts_rejects_mismatched_lists(scoring_model):
    with pytest.raises(ValueError, match="2 prompts but 1 lists"):
        score_prompts(scoring_model, [PROMPT, PROMPT], [[[EOS]]], SCORING_SPACE)


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
