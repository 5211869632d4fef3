"""The DFS sampler against a brute-force enumeration, the KV-cache rewind, and the baseline samplers.

The reference enumeration scores every prefix with a full forward pass and no cache, so the
cached, guess-seeded, explicit-stack search must return exactly what it returns. Models are the
micro preset with a scaled output head (peaked enough to enumerate) and a small answer alphabet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from arc_kit.decoding import AnswerSpace, answer_log_probs, new_cache, rewind_cache, sequence_nll
from arc_kit.dfs import DfsSettings, dfs_search
from arc_kit.models import create_model
from arc_kit.samplers import SamplerSettings, generate

EOS = 14  # <eos> in the 64-symbol vocabulary
PROMPT = [13, *range(16, 40), 11, 1, 2, 10, 3, 4, 12]  # bos, pre-prompt letters, "I12\n34" and the output prefix
SMALL = (0, 1, 2, EOS)
WITH_NEWLINE = (0, 1, 2, 10, EOS)
BOUNDARY = 1e-3  # an NLL this close to -ln(T) could fall either side by rounding: pick another T


def peaked_model(seed: int, scale: float):
    model, _ = create_model("micro", seed=seed)
    model.eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


_MODELS: dict[tuple[int, float], object] = {}


def model_for(seed: int, scale: float):
    if (seed, scale) not in _MODELS:
        _MODELS[(seed, scale)] = peaked_model(seed, scale)
    return _MODELS[(seed, scale)]


def full_log_probs(model, ids, space: AnswerSpace) -> torch.Tensor:
    """The masked next-token log-probabilities after ``ids``, from one full forward pass (no cache)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(ids)])).logits[0, -1]
    mask = torch.zeros(logits.shape[-1], dtype=torch.bool)
    mask[list(space.allowed_ids)] = True
    return answer_log_probs(logits, mask).double()


@dataclass
class Enumeration:
    answers: list[tuple[tuple[int, ...], float]]  # best first
    prefixes: set[tuple[int, ...]]  # non-empty, eos-free prefixes within the threshold that can still end
    dropped: int  # prefixes within the threshold with no room left for the eos
    margin: float  # the smallest distance of any NLL looked at from -ln(T)


def brute_force(model, prompt, space: AnswerSpace, threshold: float) -> Enumeration:
    """Every answer with probability >= threshold: each prefix scored by a full forward pass, no cache."""
    max_nll = -math.log(threshold)
    answers, prefixes, dropped, margin = [], set(), 0, math.inf
    todo = [((), 0.0)]
    while todo:
        prefix, nll = todo.pop()
        log_probs = full_log_probs(model, [*prompt, *prefix], space)
        for token in space.allowed_ids:
            total = nll - float(log_probs[token])
            margin = min(margin, abs(total - max_nll))
            if total > max_nll:
                continue
            if token == space.eos_id:
                answers.append((prefix + (token,), total))
            elif len(prefix) + 2 <= space.max_length:  # the token and at least an eos still fit
                prefixes.add(prefix + (token,))
                todo.append((prefix + (token,), total))
            else:
                dropped += 1
    answers.sort(key=lambda answer: answer[1])
    return Enumeration(answers, prefixes, dropped, margin)


def safe_enumeration(model, space: AnswerSpace, threshold: float) -> tuple[float, Enumeration]:
    """The threshold (``threshold`` or one a little below it) whose enumeration has no NLL near the boundary."""
    for step in range(20):
        candidate = threshold * 0.93 ** step
        enumeration = brute_force(model, PROMPT, space, candidate)
        if enumeration.margin > BOUNDARY:
            return candidate, enumeration
    pytest.fail(f"no threshold near {threshold} keeps every NLL {BOUNDARY} away from the boundary")


def assert_same_as_reference(result, enumeration: Enumeration):
    assert [c.ids for c in result.completions] == [ids for ids, _ in enumeration.answers]
    np.testing.assert_allclose([c.nll for c in result.completions], [nll for _, nll in enumeration.answers],
                               rtol=0, atol=1e-4)


def followed_guess_length(guess, enumeration: Enumeration) -> int:
    """How many tokens of the guess lie on paths the search must explore (they cost no forward call)."""
    length = 0
    while length < len(guess) and guess[length] != EOS and tuple(guess[:length + 1]) in enumeration.prefixes:
        length += 1
    return length


# (allowed ids, max length, seed, scale): peaked enough to enumerate, each with several answers at 1%
CONFIGS = [
    (SMALL, 8, 0, 10.0),
    (SMALL, 8, 1, 20.0),  # many paths run out of length: 'max length' drops
    (WITH_NEWLINE, 6, 2, 10.0),
    (WITH_NEWLINE, 12, 0, 5.0),
]
THRESHOLDS = [0.2, 0.05, 0.01]


@pytest.fixture(scope="module", params=range(len(CONFIGS)), ids=[f"seed{c[2]}-x{c[3]:g}-len{c[1]}" for c in CONFIGS])
def case(request):
    allowed, max_length, seed, scale = CONFIGS[request.param]
    space = AnswerSpace(allowed, EOS, max_length)
    model = model_for(seed, scale)
    enumerations = [safe_enumeration(model, space, threshold) for threshold in THRESHOLDS]
    return model, space, enumerations


# -- DFS = brute force ---------------------------------------------------------------------------

def test_dfs_returns_exactly_the_enumerated_answers(case):
    model, space, enumerations = case
    for threshold, enumeration in enumerations:
        result = dfs_search(model, PROMPT, space, DfsSettings(threshold))
        assert_same_as_reference(result, enumeration)
        # without a guess, one forward call per explored prefix, and the prompt's tokens
        assert result.forward_calls == len(enumeration.prefixes)
        assert result.tokens_processed == len(PROMPT) + result.forward_calls
        assert result.dropped.get("max length", 0) == enumeration.dropped
        assert result.capped is None


def test_the_configurations_cover_answers_and_drops(case):
    """Guard of the setup: the cases are not vacuous (answers exist at the lowest threshold)."""
    _, _, enumerations = case
    assert len(enumerations[-1][1].answers) >= 2


def test_some_configuration_drops_paths_at_the_length_limit():
    space = AnswerSpace(SMALL, EOS, 8)
    threshold, enumeration = safe_enumeration(model_for(1, 20.0), space, 0.01)
    assert enumeration.dropped > 0
    result = dfs_search(model_for(1, 20.0), PROMPT, space, DfsSettings(threshold))
    assert result.dropped["max length"] == enumeration.dropped
    assert all(len(c.ids) <= space.max_length for c in result.completions)


def test_results_are_sorted_distinct_and_above_the_threshold(case):
    model, space, enumerations = case
    for threshold, _ in enumerations:
        result = dfs_search(model, PROMPT, space, DfsSettings(threshold))
        nlls = [c.nll for c in result.completions]
        assert nlls == sorted(nlls)
        assert len({c.ids for c in result.completions}) == len(result.completions)
        assert all(c.probability >= threshold for c in result.completions)
        assert len(result.completions) <= 1 / threshold
        assert all(c.ids[-1] == EOS and EOS not in c.ids[:-1] for c in result.completions)
        assert all(set(c.ids) <= set(space.allowed_ids) for c in result.completions)


def guesses(model, space: AnswerSpace, enumeration: Enumeration, threshold: float) -> dict[str, list[int]]:
    """Guesses of every kind, for one threshold's enumeration."""
    answers = [list(ids) for ids, _ in enumeration.answers]
    found = {"empty": [], "eos only": [EOS], "junk outside the alphabet": [11, 12, 40, EOS],
             "allowed junk without eos": [space.allowed_ids[0]] * (space.max_length + 5)}
    if answers:
        found["best answer"] = answers[0]
        found["worst answer"] = answers[-1]
        found["answer with a wrong ending"] = answers[0][:-1] + [space.allowed_ids[0]]
    if len(answers) > 1:
        found["second answer"] = answers[1]
    # a guess that starts inside the threshold and leaves it midway: a likely first token, then the
    # least likely tokens
    first = min(enumeration.prefixes, key=lambda prefix: (len(prefix), prefix), default=None)
    if first is not None:
        log_probs = full_log_probs(model, [*PROMPT, *first], space)
        unlikely = min((t for t in space.allowed_ids if t != EOS), key=lambda t: float(log_probs[t]))
        leaving = [*first, unlikely, unlikely, EOS][: space.max_length]
        nll = sequence_nll(model, np.array(PROMPT), [np.array(leaving)], space)[0]
        if nll > -math.log(threshold) + BOUNDARY:
            found["leaves the threshold midway"] = leaving
    return found


@pytest.mark.slow
def test_a_guess_never_changes_the_answers(case):
    model, space, enumerations = case
    for threshold, enumeration in enumerations:
        for name, guess in guesses(model, space, enumeration, threshold).items():
            result = dfs_search(model, PROMPT, space, DfsSettings(threshold), guess=guess)
            try:
                assert_same_as_reference(result, enumeration)
                # the guess path's distributions come from the first forward pass: no call is spent on it
                assert result.forward_calls == len(enumeration.prefixes) - followed_guess_length(guess, enumeration)
                assert result.dropped.get("max length", 0) == enumeration.dropped
            except AssertionError as error:
                raise AssertionError(f"guess {name!r} {guess} at T={threshold:.4f}: {error}") from error


def test_prompt_and_guess_may_be_numpy_arrays(case):
    """The solver passes encoded answers (numpy arrays) as guesses."""
    model, space, enumerations = case
    threshold, enumeration = enumerations[-1]
    for guess in (np.array(enumeration.answers[0][0]), np.array([], dtype=np.int64), np.array([EOS, 3, 3])):
        result = dfs_search(model, np.array(PROMPT), space, DfsSettings(threshold), guess=guess)
        assert_same_as_reference(result, enumeration)
        via_generate = generate(model, np.array(PROMPT), space, SamplerSettings("dfs", threshold=threshold),
                                guess=guess)
        assert [c.ids for c in via_generate.completions] == [c.ids for c in result.completions]


def test_every_kind_of_guess_is_exercised():
    """Guard of the setup: the guess kinds named in the tests really occur, midway exits included."""
    kinds = set()
    for allowed, max_length, seed, scale in CONFIGS:
        space = AnswerSpace(allowed, EOS, max_length)
        model = model_for(seed, scale)
        for threshold in THRESHOLDS:
            threshold, enumeration = safe_enumeration(model, space, threshold)
            kinds |= set(guesses(model, space, enumeration, threshold))
    assert {"best answer", "second answer", "worst answer", "leaves the threshold midway", "empty",
            "junk outside the alphabet"} <= kinds


def test_a_guess_of_the_best_answer_saves_forward_calls(case):
    model, space, enumerations = case
    for threshold, enumeration in enumerations:
        if not enumeration.answers or len(enumeration.answers[0][0]) < 2:
            continue
        best = list(enumeration.answers[0][0])
        plain = dfs_search(model, PROMPT, space, DfsSettings(threshold))
        guided = dfs_search(model, PROMPT, space, DfsSettings(threshold), guess=best)
        assert guided.forward_calls == plain.forward_calls - (len(best) - 1)
        assert guided.forward_calls < plain.forward_calls
        assert [c.ids for c in guided.completions] == [c.ids for c in plain.completions]


def test_the_forward_call_cap_stops_the_search_and_says_so():
    space = AnswerSpace(SMALL, EOS, 8)
    model = model_for(1, 10.0)
    threshold, enumeration = safe_enumeration(model, space, 0.01)
    needed = len(enumeration.prefixes)
    assert needed > 10
    exact = dfs_search(model, PROMPT, space, DfsSettings(threshold, max_forward_calls=needed))
    assert exact.capped is None
    assert_same_as_reference(exact, enumeration)
    for cap in (0, 1, needed // 2, needed - 1):
        capped = dfs_search(model, PROMPT, space, DfsSettings(threshold, max_forward_calls=cap))
        assert capped.forward_calls == cap
        assert capped.capped and str(cap) in capped.capped and "cap" in capped.capped
        reference = dict(enumeration.answers)
        assert {c.ids for c in capped.completions} <= set(reference)  # what it found is right, just not all
        for completion in capped.completions:
            assert completion.nll == pytest.approx(reference[completion.ids], abs=1e-4)


def test_threshold_must_be_a_probability():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="threshold"):
            DfsSettings(bad)
    DfsSettings(1.0)


def test_threshold_one_keeps_only_a_certain_answer():
    space = AnswerSpace(SMALL, EOS, 6)
    result = dfs_search(model_for(0, 10.0), PROMPT, space, DfsSettings(1.0))
    assert result.completions == []  # no answer of a random model has probability exactly 1


# -- the cache helper ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plain_model():
    model, _ = create_model("micro", seed=3)
    return model.eval()


def feed(model, cache, tokens):
    with torch.no_grad():
        output = model(input_ids=torch.tensor([list(tokens)]), past_key_values=cache, use_cache=True)
    return output.logits[0], output.past_key_values


def full_logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=torch.tensor([list(tokens)])).logits[0]


def test_rewind_then_refeed_equals_a_fresh_forward(plain_model):
    cache = new_cache(plain_model)
    _, cache = feed(plain_model, cache, PROMPT)
    _, cache = feed(plain_model, cache, [1, 2, 10])
    for token in (0, 0, 1):  # token by token, as DFS feeds
        _, cache = feed(plain_model, cache, [token])
    assert cache.get_seq_length() == len(PROMPT) + 6
    rewind_cache(cache, len(PROMPT) + 2)
    assert cache.get_seq_length() == len(PROMPT) + 2
    logits, cache = feed(plain_model, cache, [5, 6, 7])
    expected = full_logits(plain_model, [*PROMPT, 1, 2, 5, 6, 7])[-3:]
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-4)
    # rewinding into the prompt works too
    rewind_cache(cache, len(PROMPT) - 4)
    logits, cache = feed(plain_model, cache, [9, 9])
    torch.testing.assert_close(logits, full_logits(plain_model, [*PROMPT[:-4], 9, 9])[-2:], rtol=0, atol=1e-4)


def test_rewinding_to_the_current_length_is_a_no_op(plain_model):
    cache = new_cache(plain_model)
    _, cache = feed(plain_model, cache, PROMPT)
    keys = [layer.keys.clone() for layer in cache.layers]
    rewind_cache(cache, len(PROMPT))
    assert cache.get_seq_length() == len(PROMPT)
    for layer, before in zip(cache.layers, keys):
        assert torch.equal(layer.keys, before)


def test_rewind_never_calls_crop_when_there_is_nothing_to_remove(plain_model):
    """transformers 5.17's crop(0) meant 'crop to length 0' and wiped the cache; emulate that."""
    cache = new_cache(plain_model)
    _, cache = feed(plain_model, cache, PROMPT)
    real_crop, calls = cache.crop, []

    def legacy_crop(max_length: int) -> None:  # 5.17: a non-negative argument is the length to keep
        calls.append(max_length)
        current = cache.get_seq_length()
        keep = current + max_length if max_length < 0 else max_length
        if keep < current:
            real_crop(keep - current)

    cache.crop = legacy_crop
    rewind_cache(cache, len(PROMPT))
    assert calls == [] and cache.get_seq_length() == len(PROMPT)
    rewind_cache(cache, len(PROMPT) - 3)  # a real rewind still works under the old meaning
    assert cache.get_seq_length() == len(PROMPT) - 3 and calls and calls[-1] < 0


def test_rewinding_past_the_end_raises(plain_model):
    cache = new_cache(plain_model)
    _, cache = feed(plain_model, cache, PROMPT)
    with pytest.raises(ValueError, match="cannot rewind"):
        rewind_cache(cache, len(PROMPT) + 1)
    assert cache.get_seq_length() == len(PROMPT)


def test_answer_log_probs_are_a_distribution_over_the_allowed_tokens_only():
    logits = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16) * 30
    space = AnswerSpace(WITH_NEWLINE, EOS, 10)
    mask = space.mask(64)
    assert mask.dtype == torch.bool and mask.sum() == len(WITH_NEWLINE)
    log_probs = answer_log_probs(logits, mask)
    assert log_probs.dtype == torch.float32 and log_probs.shape == logits.shape
    outside = [i for i in range(64) if i not in WITH_NEWLINE]
    assert torch.isneginf(log_probs[..., outside]).all()
    assert torch.isfinite(log_probs[..., list(WITH_NEWLINE)]).all()
    torch.testing.assert_close(log_probs[..., list(WITH_NEWLINE)].exp().sum(-1), torch.ones(3, 5))
    # the order among allowed tokens is the logits' order
    allowed = list(WITH_NEWLINE)
    assert torch.equal(log_probs[..., allowed].argmax(-1), logits.float()[..., allowed].argmax(-1))


# -- the baseline samplers -----------------------------------------------------------------------

def reference_greedy(model, space: AnswerSpace) -> list[int]:
    path: list[int] = []
    while len(path) < space.max_length:
        token = int(full_log_probs(model, [*PROMPT, *path], space).argmax())
        path.append(token)
        if token == EOS:
            break
    return path


def assert_valid_answers(result, space: AnswerSpace):
    for completion in result.completions:
        assert completion.ids[-1] == EOS and EOS not in completion.ids[:-1]
        assert set(completion.ids) <= set(space.allowed_ids)
        assert len(completion.ids) <= space.max_length


def assert_nlls_are_measured(model, result, space: AnswerSpace):
    expected = sequence_nll(model, np.array(PROMPT), [np.array(c.ids) for c in result.completions], space)
    np.testing.assert_allclose([c.nll for c in result.completions], expected, rtol=0, atol=1e-4)


def test_the_mask_matters_for_these_models():
    """Guard of the setup: unmasked, the most likely next token is not an answer token."""
    for seed, scale in [(0, 10.0), (2, 10.0)]:
        with torch.no_grad():
            top = int(model_for(seed, scale)(input_ids=torch.tensor([PROMPT])).logits[0, -1].argmax())
        assert top not in WITH_NEWLINE


@pytest.mark.parametrize("seed, scale, allowed, max_length", [
    (0, 10.0, SMALL, 8), (2, 10.0, WITH_NEWLINE, 8), (2, 20.0, WITH_NEWLINE, 12), (0, 10.0, WITH_NEWLINE, 12)])
def test_greedy_follows_the_argmax_path(seed, scale, allowed, max_length):
    model = model_for(seed, scale)
    space = AnswerSpace(allowed, EOS, max_length)
    path = reference_greedy(model, space)
    result = generate(model, PROMPT, space, SamplerSettings("greedy"))
    assert result.forward_calls == len(path)
    if path[-1] == EOS:
        assert [c.ids for c in result.completions] == [tuple(path)]
        assert_nlls_are_measured(model, result, space)
        assert not result.dropped
    else:  # ran out of length: nothing returned, and the drop counted
        assert result.completions == []
        assert result.dropped == {"no eos within the length limit": 1}


def test_greedy_cases_include_a_finished_and_an_unfinished_answer():
    finished = {reference_greedy(model_for(s, k), AnswerSpace(a, EOS, n))[-1] == EOS
                for s, k, a, n in [(0, 10.0, SMALL, 8), (2, 10.0, WITH_NEWLINE, 8), (2, 20.0, WITH_NEWLINE, 12),
                                   (0, 10.0, WITH_NEWLINE, 12)]}
    assert finished == {True, False}


@pytest.mark.parametrize("beams", [2, 4])
def test_beam_search_answers_are_valid_and_scored_like_the_reference(beams):
    model = model_for(2, 10.0)
    space = AnswerSpace(WITH_NEWLINE, EOS, 10)
    result = generate(model, PROMPT, space, SamplerSettings("beam", count=beams))
    assert 1 <= len(result.completions) <= beams
    assert_valid_answers(result, space)
    assert_nlls_are_measured(model, result, space)
    nlls = [c.nll for c in result.completions]
    assert nlls == sorted(nlls)


def test_sampling_is_seeded_valid_and_leaves_the_global_generator_alone():
    model = model_for(0, 5.0)
    space = AnswerSpace(WITH_NEWLINE, EOS, 10)
    settings = SamplerSettings("sample", count=6)
    torch.manual_seed(1234)
    state = torch.random.get_rng_state()
    first = generate(model, PROMPT, space, settings, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)
    again = generate(model, PROMPT, space, settings, seed=7)
    other = generate(model, PROMPT, space, settings, seed=8)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert [c.ids for c in first.completions] == [c.ids for c in again.completions]
    assert [c.ids for c in first.completions] != [c.ids for c in other.completions]
    assert len(first.completions) >= 2
    for result in (first, other):
        assert_valid_answers(result, space)
        assert_nlls_are_measured(model, result, space)
        assert len(result.completions) + sum(result.dropped.values()) <= settings.count


def test_generate_with_dfs_settings_is_the_dfs(case):
    model, space, enumerations = case
    threshold, enumeration = enumerations[1]
    result = generate(model, PROMPT, space, SamplerSettings("dfs", threshold=threshold))
    assert_same_as_reference(result, enumeration)
    guess = list(enumeration.answers[0][0]) if enumeration.answers else [0, EOS]
    unguided = generate(model, PROMPT, space, SamplerSettings("dfs", threshold=threshold, use_guess=False),
                        guess=guess)
    assert unguided.forward_calls == len(enumeration.prefixes)  # the guess was ignored


def test_sampler_settings_reject_unknown_kinds():
    with pytest.raises(ValueError, match="unknown sampler"):
        SamplerSettings("nucleus")
    with pytest.raises(ValueError, match="count"):
        SamplerSettings("beam", count=0)
    assert SamplerSettings("dfs", threshold=0.09).name == "DFS T=9%"
    assert SamplerSettings("sample", count=4).name == "stochastic x4"
