"""The search against a brute-force enumeration, greedy decoding, transformers' cache crop, and the paper's
other samplers.

The reference enumeration scores every prefix with a full forward pass and no cache, so the
cached, guess-seeded, explicit-stack search on the decode engine (and, for one case, on
transformers' own forward, the fallback path) must return exactly what it returns, under both ways
of measuring an answer: the model's full softmax (the paper's P(s|q)) and the softmax renormalised
over the answer tokens. Models are the micro preset with a scaled output head (peaked enough to
enumerate), the answer tokens' logits raised by a constant (so they hold most, not all, of the
probability: the two measures differ) and a small answer alphabet.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from conftest import bigram_model

import arc_kit.method.answers as decoding_module
from arc_kit.experiments.generate_samplers import generate
from arc_kit.method.answers import AnswerSpace, answer_log_probs
from arc_kit.method.drafts import DraftSource
from arc_kit.method.engine import make_engine
from arc_kit.method.search import DEADLINE_BEFORE_START, search
from arc_kit.method.transformers_forward import TransformersDecoder, call_with_cache, crop, sequence_nll
from arc_kit.model.loading import create_model
from arc_kit.settings import SamplerSettings

EOS = 14  # <eos> in the 64-symbol vocabulary
PROMPT = [13, *range(16, 40), 11, 1, 2, 10, 3, 4, 12]  # bos, pre-prompt letters, "I12\n34" and the output prefix
SMALL = (0, 1, 2, EOS)
WITH_NEWLINE = (0, 1, 2, 10, EOS)
BOUNDARY = 1e-3  # an NLL this close to -ln(T) could fall either side by rounding: pick another T
MODES = ("full", "answer-mask")
ANSWER_BOOST = 7.0  # added to the logits of WITH_NEWLINE: they then hold 63-99% of the first token's probability


def dfs_at(threshold: float, **caps) -> SamplerSettings:
    """The DFS's settings at ``threshold`` (``caps``: ``max_forward_calls``, ``draft_tokens``)."""
    return SamplerSettings(threshold=threshold, **caps)


def peaked_model(seed: int, scale: float, boost: float = 0.0):
    """A micro model with its output head scaled; ``boost`` added to the logits of the WITH_NEWLINE tokens.

    A boost shared by every answer token leaves the softmax renormalised over them as it was.
    """
    model, _ = create_model("micro", seed=seed)
    model.eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
        if boost:
            head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
            head.weight.copy_(model.lm_head.weight)
            head.bias.zero_()
            head.bias[list(WITH_NEWLINE)] = boost
            model.lm_head = head
    return model


_MODELS: dict[tuple[int, float], object] = {}


def model_for(seed: int, scale: float):
    if (seed, scale) not in _MODELS:
        _MODELS[(seed, scale)] = peaked_model(seed, scale, ANSWER_BOOST)
    return _MODELS[(seed, scale)]


_ENGINES: dict[tuple[int, float], object] = {}


def engine_for(seed: int, scale: float):
    """The decode engine of ``model_for(seed, scale)``, made once."""
    if (seed, scale) not in _ENGINES:
        _ENGINES[(seed, scale)] = make_engine(model_for(seed, scale))
    assert _ENGINES[(seed, scale)].kind == "engine"  # guard: the model is one the engine runs
    return _ENGINES[(seed, scale)]


def dfs_search(engine, prompt, space: AnswerSpace, settings: SamplerSettings, guess=None, drafts=None, **keywords):
    """The search of one prompt (one lane), its guess and its draft source."""
    return search(engine, [prompt], space, settings, [guess], drafts=[drafts], **keywords)[0]


def full_log_probs(model, ids, space: AnswerSpace) -> torch.Tensor:
    """The next-token log-probabilities after ``ids`` from one full forward pass (no cache), in float64:
    the log-softmax over the whole vocabulary ("full", the paper's P), or over the answer tokens only
    ("answer-mask"); tokens outside the answer alphabet -inf either way (no answer holds one)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(ids)])).logits[0, -1].double()
    allowed = list(space.allowed_ids)
    result = torch.full_like(logits, -math.inf)
    if space.probabilities == "full":
        result[allowed] = torch.log_softmax(logits, dim=-1)[allowed]
    else:
        result[allowed] = torch.log_softmax(logits[allowed], dim=-1)
    return result


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


_ENUMERATIONS: dict[tuple, tuple[float, Enumeration]] = {}


def safe_enumeration(model, space: AnswerSpace, threshold: float) -> tuple[float, Enumeration]:
    """The threshold (``threshold`` or one a little below it) whose enumeration has no NLL near the boundary.

    Enumerated once per session for a model of ``model_for`` (test_batched shares it; those models are never
    changed), afresh for any other model.
    """
    made_by = next((key for key, made in _MODELS.items() if made is model), None)
    if made_by is None:
        return _safe_enumeration(model, space, threshold)
    key = (made_by, space, threshold)
    if key not in _ENUMERATIONS:
        _ENUMERATIONS[key] = _safe_enumeration(model, space, threshold)
    return _ENUMERATIONS[key]


def _safe_enumeration(model, space: AnswerSpace, threshold: float) -> tuple[float, Enumeration]:
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
CASES = [(config, mode) for config in CONFIGS for mode in MODES]
CASE_NAMES = [f"seed{c[2]}-x{c[3]:g}-len{c[1]}-{mode}" for c, mode in CASES]
# the quick inner loop (-m "not slow") takes each measure over two configurations; the full run takes every case
QUICK_CASES = ("seed0-x10-len8-full", "seed2-x10-len6-answer-mask", "seed0-x5-len12-answer-mask")


def slow_but(quick: tuple[str, ...]) -> list:
    """CASES as parameters, each not named in ``quick`` marked slow."""
    return [case if name in quick else pytest.param(case, marks=pytest.mark.slow)
            for case, name in zip(CASES, CASE_NAMES)]


@pytest.fixture(scope="module", params=slow_but(QUICK_CASES), ids=CASE_NAMES)
def case(request):
    """(engine, space, [(threshold, enumeration)] for each of THRESHOLDS): the engine's ``model`` is enumerated."""
    (allowed, max_length, seed, scale), mode = request.param
    space = AnswerSpace(allowed, EOS, max_length, mode)
    enumerations = [safe_enumeration(model_for(seed, scale), space, threshold) for threshold in THRESHOLDS]
    return engine_for(seed, scale), space, enumerations


# -- DFS = brute force ---------------------------------------------------------------------------

def test_dfs_returns_exactly_the_enumerated_answers(case):
    engine, space, enumerations = case
    for threshold, enumeration in enumerations:
        result = dfs_search(engine, PROMPT, space, dfs_at(threshold))
        assert_same_as_reference(result, enumeration)
        # without a guess, one forward call per explored prefix, and the prompt's tokens
        assert result.forward_calls == len(enumeration.prefixes)
        assert result.tokens_processed == len(PROMPT) + result.forward_calls
        assert result.dropped.get("max length", 0) == enumeration.dropped
        assert result.capped is None


@pytest.mark.parametrize("mode", MODES)
def test_transformers_forward_returns_exactly_the_enumerated_answers_too(mode):
    """The fallback path, transformers' own forward with its cache cropped, searches as the engine does."""
    space = AnswerSpace(WITH_NEWLINE, EOS, 6, mode)
    model = model_for(2, 10.0)
    for threshold in THRESHOLDS[1:]:
        threshold, enumeration = safe_enumeration(model, space, threshold)
        guess = list(enumeration.answers[0][0]) if enumeration.answers else None
        for given in (None, guess):
            result = dfs_search(TransformersDecoder(model), PROMPT, space, dfs_at(threshold), guess=given)
            assert_same_as_reference(result, enumeration)
            assert result.forward_calls == len(enumeration.prefixes) - (followed_guess_length(given, enumeration)
                                                                        if given else 0)


def test_the_configurations_cover_answers_and_drops(case):
    """Guard of the setup: the cases are not vacuous (answers exist at the lowest threshold)."""
    _, _, enumerations = case
    assert len(enumerations[-1][1].answers) >= 2


@pytest.mark.parametrize("mode, threshold", [pytest.param("answer-mask", 0.01, marks=pytest.mark.slow),
                                             ("full", 0.003)])
def test_some_configuration_drops_paths_at_the_length_limit(mode, threshold):
    space = AnswerSpace(SMALL, EOS, 8, mode)
    threshold, enumeration = safe_enumeration(model_for(1, 20.0), space, threshold)
    assert enumeration.dropped > 0
    result = dfs_search(engine_for(1, 20.0), PROMPT, space, dfs_at(threshold))
    assert result.dropped["max length"] == enumeration.dropped
    assert all(len(c.ids) <= space.max_length for c in result.completions)


def test_results_are_sorted_distinct_and_above_the_threshold(case):
    engine, space, enumerations = case
    for threshold, _ in enumerations:
        result = dfs_search(engine, PROMPT, space, dfs_at(threshold))
        nlls = [c.nll for c in result.completions]
        assert nlls == sorted(nlls)
        assert len({c.ids for c in result.completions}) == len(result.completions)
        assert all(np.exp(-c.nll) >= threshold for c in result.completions)
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
    engine, space, enumerations = case
    for threshold, enumeration in enumerations:
        for name, guess in guesses(engine.model, space, enumeration, threshold).items():
            result = dfs_search(engine, PROMPT, space, dfs_at(threshold), guess=guess)
            try:
                assert_same_as_reference(result, enumeration)
                # the guess path's distributions come from the first forward pass: no call is spent on it
                assert result.forward_calls == len(enumeration.prefixes) - followed_guess_length(guess, enumeration)
                assert result.dropped.get("max length", 0) == enumeration.dropped
            except AssertionError as error:
                raise AssertionError(f"guess {name!r} {guess} at T={threshold:.4f}: {error}") from error


@pytest.mark.parametrize("case", [case if index < 2 else pytest.param(case, marks=pytest.mark.slow)
                                  for index, case in enumerate(CASES)], ids=CASE_NAMES, indirect=True)
def test_prompt_and_guess_may_be_numpy_arrays(case):
    """The solver passes encoded answers (numpy arrays) as guesses."""
    model, space, enumerations = case
    threshold, enumeration = enumerations[-1]
    for guess in (np.array(enumeration.answers[0][0]), np.array([], dtype=np.int64), np.array([EOS, 3, 3])):
        result = dfs_search(model, np.array(PROMPT), space, dfs_at(threshold), guess=guess)
        assert_same_as_reference(result, enumeration)


@pytest.mark.slow
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
    model, space, enumerations = case  # the case's engine
    for threshold, enumeration in enumerations:
        if not enumeration.answers or len(enumeration.answers[0][0]) < 2:
            continue
        best = list(enumeration.answers[0][0])
        plain = dfs_search(model, PROMPT, space, dfs_at(threshold))
        guided = dfs_search(model, PROMPT, space, dfs_at(threshold), guess=best)
        assert guided.forward_calls == plain.forward_calls - (len(best) - 1)
        assert guided.forward_calls < plain.forward_calls
        assert [c.ids for c in guided.completions] == [c.ids for c in plain.completions]


def test_the_forward_call_cap_stops_the_search_and_says_so():
    space = AnswerSpace(SMALL, EOS, 8)
    model = engine_for(1, 10.0)
    threshold, enumeration = safe_enumeration(model.model, space, 0.01)
    needed = len(enumeration.prefixes)
    assert needed > 10
    exact = dfs_search(model, PROMPT, space, dfs_at(threshold, max_forward_calls=needed))
    assert exact.capped is None
    assert_same_as_reference(exact, enumeration)
    for cap in (1, needed // 2, needed - 1):  # 0 the settings refuse (at least 1)
        capped = dfs_search(model, PROMPT, space, dfs_at(threshold, max_forward_calls=cap))
        assert capped.forward_calls == cap
        assert capped.capped and str(cap) in capped.capped and "cap" in capped.capped
        reference = dict(enumeration.answers)
        assert {c.ids for c in capped.completions} <= set(reference)  # what it found is right, just not all
        for completion in capped.completions:
            assert completion.nll == pytest.approx(reference[completion.ids], abs=1e-4)


def test_threshold_must_be_a_probability():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="threshold"):
            SamplerSettings(threshold=bad)
    SamplerSettings(threshold=1.0)


def test_threshold_one_keeps_only_a_certain_answer():
    space = AnswerSpace(SMALL, EOS, 6)
    result = dfs_search(engine_for(0, 10.0), PROMPT, space, dfs_at(1.0))
    assert result.completions == []  # no answer of a random model has probability exactly 1


# -- transformers' cache crop (the fallback path's rewind) ---------------------------------------

@pytest.fixture(scope="module")
def plain_model():
    model, _ = create_model("micro", seed=3)
    return model.eval()


def feed(model, cache, tokens):
    return call_with_cache(model, cache, tokens)


def full_logits(model, tokens):
    with torch.no_grad():
        return model(input_ids=torch.tensor([list(tokens)])).logits[0]


def test_rewind_then_refeed_equals_a_fresh_forward(plain_model):
    _, cache = feed(plain_model, None, PROMPT)
    _, cache = feed(plain_model, cache, [1, 2, 10])
    for token in (0, 0, 1):  # token by token, as DFS feeds
        _, cache = feed(plain_model, cache, [token])
    assert cache.get_seq_length() == len(PROMPT) + 6
    crop(cache, len(PROMPT) + 2)
    assert cache.get_seq_length() == len(PROMPT) + 2
    logits, cache = feed(plain_model, cache, [5, 6, 7])
    expected = full_logits(plain_model, [*PROMPT, 1, 2, 5, 6, 7])[-3:]
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-4)
    # rewinding into the prompt works too
    crop(cache, len(PROMPT) - 4)
    logits, cache = feed(plain_model, cache, [9, 9])
    torch.testing.assert_close(logits, full_logits(plain_model, [*PROMPT[:-4], 9, 9])[-2:], rtol=0, atol=1e-4)


def test_rewinding_to_the_current_length_is_a_no_op(plain_model):
    _, cache = feed(plain_model, None, PROMPT)
    keys = [layer.keys.clone() for layer in cache.layers]
    crop(cache, len(PROMPT))
    assert cache.get_seq_length() == len(PROMPT)
    for layer, before in zip(cache.layers, keys):
        assert torch.equal(layer.keys, before)


def test_rewind_never_calls_crop_when_there_is_nothing_to_remove(plain_model):
    """transformers 5.17's crop(0) meant 'crop to length 0' and wiped the cache; emulate that."""
    _, cache = feed(plain_model, None, PROMPT)
    real_crop, calls = cache.crop, []

    def legacy_crop(max_length: int) -> None:  # 5.17: a non-negative argument is the length to keep
        calls.append(max_length)
        current = cache.get_seq_length()
        keep = current + max_length if max_length < 0 else max_length
        if keep < current:
            real_crop(keep - current)

    cache.crop = legacy_crop
    crop(cache, len(PROMPT))
    assert calls == [] and cache.get_seq_length() == len(PROMPT)
    crop(cache, len(PROMPT) - 3)  # a real rewind still works under the old meaning
    assert cache.get_seq_length() == len(PROMPT) - 3 and calls and calls[-1] < 0


def test_rewinding_past_the_end_raises(plain_model):
    _, cache = feed(plain_model, None, PROMPT)
    with pytest.raises(ValueError, match="cannot rewind"):
        crop(cache, len(PROMPT) + 1)
    assert cache.get_seq_length() == len(PROMPT)


def test_answer_log_probs_are_a_distribution_over_the_allowed_tokens_only():
    logits = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16) * 30
    space = AnswerSpace(WITH_NEWLINE, EOS, 10, "answer-mask")
    mask = space.mask(64)
    assert mask.dtype == torch.bool and mask.sum() == len(WITH_NEWLINE)
    log_probs = answer_log_probs(logits, mask, "answer-mask")
    assert log_probs.dtype == torch.float32 and log_probs.shape == logits.shape
    outside = [i for i in range(64) if i not in WITH_NEWLINE]
    assert torch.isneginf(log_probs[..., outside]).all()
    assert torch.isfinite(log_probs[..., list(WITH_NEWLINE)]).all()
    torch.testing.assert_close(log_probs[..., list(WITH_NEWLINE)].exp().sum(-1), torch.ones(3, 5))
    # the order among allowed tokens is the logits' order
    allowed = list(WITH_NEWLINE)
    assert torch.equal(log_probs[..., allowed].argmax(-1), logits.float()[..., allowed].argmax(-1))


def test_answer_log_probs_under_the_full_softmax_are_the_models_own():
    logits = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16) * 3
    allowed = list(WITH_NEWLINE)
    mask = AnswerSpace(WITH_NEWLINE, EOS, 10).mask(64)
    log_probs = answer_log_probs(logits, mask)  # "full" is the default
    assert log_probs.dtype == torch.float32
    reference = torch.log_softmax(logits.double(), dim=-1)  # over the whole vocabulary
    torch.testing.assert_close(log_probs[..., allowed].double(), reference[..., allowed], rtol=0, atol=1e-5)
    assert torch.isneginf(log_probs[..., [i for i in range(64) if i not in allowed]]).all()
    assert (log_probs[..., allowed].exp().sum(-1) < 0.9).all()  # the other tokens hold the rest
    with pytest.raises(ValueError, match="unknown probabilities"):
        answer_log_probs(logits, mask, "softmax")
    with pytest.raises(ValueError, match="unknown probabilities"):
        AnswerSpace(WITH_NEWLINE, EOS, 10, "masked")


# -- greedy decoding, and the paper's other samplers ----------------------------------------------

def reference_nll(model, prompt, answer, space: AnswerSpace) -> float:
    """An answer's NLL token by token, each token's log-probability from one full forward (``full_log_probs``)."""
    return -sum(float(full_log_probs(model, [*prompt, *answer[:position]], space)[token])
                for position, token in enumerate(answer))


def test_sequence_nll_equals_the_token_by_token_reference():
    answers = [(EOS,), (0, EOS), (1, 2, 10, 0, EOS), (2, 2, 2, 10, 1, 10, EOS), (0, 40, EOS)]
    for mode in MODES:
        space = AnswerSpace(WITH_NEWLINE, EOS, 12, mode)
        model = model_for(2, 10.0)
        expected = [reference_nll(model, PROMPT, answer, space) for answer in answers]
        found = sequence_nll(model, np.array(PROMPT), [np.array(answer) for answer in answers], space)
        np.testing.assert_allclose(found, expected, rtol=0, atol=1e-4)
        assert math.isinf(found[-1])  # a token outside the alphabet
    full = sequence_nll(model, np.array(PROMPT), [np.array(answers[2])], AnswerSpace(WITH_NEWLINE, EOS, 12))
    masked = sequence_nll(model, np.array(PROMPT), [np.array(answers[2])],
                          AnswerSpace(WITH_NEWLINE, EOS, 12, "answer-mask"))
    assert full[0] > masked[0] + 0.01  # guard: the two measures differ here


def reference_greedy(model, space: AnswerSpace) -> list[int]:
    """The most probable next token each time: over the whole vocabulary ("full"), or the answer tokens."""
    path: list[int] = []
    while len(path) < space.max_length:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([[*PROMPT, *path]])).logits[0, -1]
        if space.probabilities == "answer-mask":
            logits = logits.masked_fill(~space.mask(logits.shape[-1]), -math.inf)
        token = int(logits.argmax())
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
    expected = [reference_nll(model, PROMPT, c.ids, space) for c in result.completions]
    np.testing.assert_allclose([c.nll for c in result.completions], expected, rtol=0, atol=1e-4)


@pytest.mark.slow
def test_the_two_measures_differ_for_these_models():
    """Guard of the setup: the answer tokens hold most, not all, of the probability, so the full
    softmax and the renormalised one give other NLLs and DFS other answers."""
    for allowed, max_length, seed, scale in CONFIGS:
        model = model_for(seed, scale)
        with torch.no_grad():
            first = torch.softmax(model(input_ids=torch.tensor([PROMPT])).logits[0, -1].double(), dim=-1)
        assert 0.5 < float(first[list(allowed)].sum()) < 0.995
        found = {mode: safe_enumeration(model, AnswerSpace(allowed, EOS, max_length, mode), 0.01)[1]
                 for mode in MODES}
        assert len(found["full"].prefixes) < len(found["answer-mask"].prefixes)  # lower probabilities: fewer paths
        common = dict(found["full"].answers).keys() & dict(found["answer-mask"].answers).keys()
        for ids in common:
            assert dict(found["full"].answers)[ids] > dict(found["answer-mask"].answers)[ids] + 1e-3


FOREIGN = 40  # a letter: no answer token


def prefers_a_foreign_token():
    """The bigram model of conftest, changed so that after the output prefix (12) it most likely writes
    FOREIGN and then eos, and otherwise digits as before."""
    model, _ = bigram_model()
    size = model.config.hidden_size
    with torch.no_grad():
        bigram = model.lm_head.weight.T * size ** 0.5  # logits[current, next]
        bigram[12, FOREIGN], bigram[FOREIGN, :], bigram[FOREIGN, EOS] = 6.0, -4.0, 6.0
        model.lm_head.weight.copy_(bigram.T / size ** 0.5)
    return model


class Continuation(DraftSource):
    """Proposes how ``path`` goes on after the path searched so far, each third token of it replaced by a wrong one."""

    def __init__(self, path):
        self.path = list(path)

    def supported(self, path, limit):
        proposal = self.path[len(path):len(path) + limit]
        return [token if index % 3 < 2 else (token + 1) % 3 for index, token in enumerate(proposal)], 0


def test_greedy_under_the_full_softmax_can_write_a_token_that_is_no_answer_token():
    model = make_engine(prefers_a_foreign_token())
    full = dfs_search(model, PROMPT, AnswerSpace(WITH_NEWLINE, EOS, 12, "full"), SamplerSettings("greedy"))
    assert [c.ids for c in full.completions] == [(FOREIGN, EOS)]  # it spells no grid: the solver counts it so
    assert full.completions[0].nll == math.inf  # an answer's NLL counts answer tokens only
    masked = dfs_search(model, PROMPT, AnswerSpace(WITH_NEWLINE, EOS, 12, "answer-mask"), SamplerSettings("greedy"))
    assert len(masked.completions) == 1 and set(masked.completions[0].ids) <= set(WITH_NEWLINE)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed, scale, allowed, max_length", [
    (0, 10.0, SMALL, 8), (2, 10.0, WITH_NEWLINE, 8), (2, 20.0, WITH_NEWLINE, 12), (0, 10.0, WITH_NEWLINE, 12)])
def test_greedy_follows_the_argmax_path(seed, scale, allowed, max_length, mode):
    model = model_for(seed, scale)
    space = AnswerSpace(allowed, EOS, max_length, mode)
    path = reference_greedy(model, space)
    for drafts in (None, Continuation(path)):  # drafts of greedy's own path, wrong after every third token
        result = search(engine_for(seed, scale), [PROMPT], space, SamplerSettings("greedy"), drafts=[drafts])[0]
        assert result.forward_calls + result.draft_accepted == len(path) - 1  # a step a token after the first
        assert (result.draft_accepted > 0) == (drafts is not None and len(path) > 3)
        if path[-1] == EOS:
            assert [c.ids for c in result.completions] == [tuple(path)]
            assert_nlls_are_measured(model, result, space)
            assert not result.dropped
        else:  # ran out of length: nothing returned, and the drop counted
            assert result.completions == []
            assert result.dropped == {"max length": 1}


def test_greedy_cases_include_a_finished_and_an_unfinished_answer():
    finished = {reference_greedy(model_for(s, k), AnswerSpace(a, EOS, n))[-1] == EOS
                for s, k, a, n in [(0, 10.0, SMALL, 8), (2, 10.0, WITH_NEWLINE, 8), (2, 20.0, WITH_NEWLINE, 12),
                                   (0, 10.0, WITH_NEWLINE, 12)]}
    assert finished == {True, False}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("beams", [2, 4])
def test_beam_search_answers_are_valid_and_scored_like_the_reference(beams, mode):
    model = model_for(2, 10.0)
    space = AnswerSpace(WITH_NEWLINE, EOS, 10, mode)
    result = generate(model, engine_for(2, 10.0), PROMPT, space, SamplerSettings("beam", count=beams), seed=0)
    assert 1 <= len(result.completions) <= beams
    assert_valid_answers(result, space)
    assert_nlls_are_measured(model, result, space)
    nlls = [c.nll for c in result.completions]
    assert nlls == sorted(nlls)


@pytest.mark.parametrize("mode", MODES)
def test_sampling_is_seeded_valid_and_leaves_the_global_generator_alone(mode):
    model = model_for(0, 5.0)
    space = AnswerSpace(WITH_NEWLINE, EOS, 10, mode)
    settings = SamplerSettings("sample", count=6)
    torch.manual_seed(1234)
    state = torch.random.get_rng_state()
    engine = engine_for(0, 5.0)
    first = generate(model, engine, PROMPT, space, settings, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)
    again = generate(model, engine, PROMPT, space, settings, seed=7)
    other = generate(model, engine, PROMPT, space, settings, seed=8)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert [c.ids for c in first.completions] == [c.ids for c in again.completions]
    assert [c.ids for c in first.completions] != [c.ids for c in other.completions]
    assert len(first.completions) >= 2
    for result in (first, other):
        assert_valid_answers(result, space)
        assert_nlls_are_measured(model, result, space)
        assert len(result.completions) + sum(result.dropped.values()) <= settings.count


def test_a_search_told_not_to_use_its_guess_ignores_it(case):
    model, space, enumerations = case  # the case's engine
    threshold, enumeration = enumerations[1]
    guess = list(enumeration.answers[0][0]) if enumeration.answers else [0, EOS]
    unguided = dfs_search(model, PROMPT, space, SamplerSettings("dfs", threshold=threshold, use_guess=False),
                          guess=guess)
    assert_same_as_reference(unguided, enumeration)
    assert unguided.forward_calls == len(enumeration.prefixes)  # the guess was ignored


def test_sampler_settings_reject_unknown_kinds():
    with pytest.raises(ValueError, match=r"unknown kind 'nucleus' \(--sampler\); expected one of: dfs, greedy"):
        SamplerSettings("nucleus")
    with pytest.raises(ValueError, match="count"):
        SamplerSettings("beam", count=0)
    assert SamplerSettings("dfs", threshold=0.09).name == "DFS T=9%"
    assert SamplerSettings("sample", count=4).name == "stochastic x4"
    with pytest.raises(ValueError, match="samplers table"):  # the method searches; generate's samplers are the table's
        search(engine_for(0, 10.0), [PROMPT], AnswerSpace(SMALL, EOS, 8), SamplerSettings("beam", count=2))


# -- deadlines -------------------------------------------------------------------------------------

class FakeClock:
    """Stands in for the ``time`` module of the code under test: each ``monotonic()`` reading moves
    ``now`` on by ``step`` and returns it (``step=0``: time moves only when the test sets ``now``)."""

    def __init__(self, step: float = 1.0):
        self.now, self.step, self.readings = 0.0, step, 0

    def monotonic(self) -> float:
        self.now += self.step
        self.readings += 1
        return self.now


@pytest.fixture
def clock(monkeypatch):
    """A fake clock behind ``decoding.deadline_passed``, the one clock check of every search."""
    fake = FakeClock()
    monkeypatch.setattr(decoding_module, "time", fake)
    return fake



def allowed_calls(model, prompt, space: AnswerSpace, threshold: float, calls: int, clock: FakeClock, guess=None):
    """The search allowed ``calls`` model calls after its first pass: the sampler's cap, or for none (a cap
    the settings refuse) a deadline that passes right after the first pass (``clock`` ticks once a reading)."""
    if calls:
        return dfs_search(model, prompt, space, dfs_at(threshold, max_forward_calls=calls), guess=guess)
    return dfs_search(model, prompt, space, dfs_at(threshold), guess=guess, deadline=clock.now + 2)


def test_a_deadline_stops_the_search_where_a_call_cap_would(clock):
    space = AnswerSpace(SMALL, EOS, 8)
    model = engine_for(1, 10.0)
    threshold, enumeration = safe_enumeration(model.model, space, 0.01)
    full = dfs_search(model, PROMPT, space, dfs_at(threshold))
    reference = dict(enumeration.answers)
    calls = set()
    for seconds in (2, 3, 6, 12, len(enumeration.prefixes) // 2):
        stopped = dfs_search(model, PROMPT, space, dfs_at(threshold), deadline=clock.now + seconds)
        assert stopped.forward_calls < full.forward_calls
        assert stopped.capped.startswith("deadline reached with ") and "branches left" in stopped.capped
        # what it found is exactly what a search allowed as many model calls finds: right, just not all
        same = allowed_calls(model, PROMPT, space, threshold, stopped.forward_calls, clock)
        assert [c.ids for c in stopped.completions] == [c.ids for c in same.completions]
        assert {c.ids for c in stopped.completions} <= set(reference)
        for completion in stopped.completions:
            assert completion.nll == pytest.approx(reference[completion.ids], abs=1e-4)
        calls.add(stopped.forward_calls)
    assert len(calls) == 5  # later deadlines, more of the search


@pytest.mark.parametrize("oracle", [False, True], ids=["engine", "transformers"])
def test_a_search_whose_deadline_has_passed_calls_no_model(oracle, monkeypatch):
    model = model_for(0, 10.0)
    engine = TransformersDecoder(model) if oracle else make_engine(model)
    space = AnswerSpace(WITH_NEWLINE, EOS, 10)
    calls = []
    for name in ("prefill", "step", "score"):  # the engine's own calls (the engine never calls the model)
        method = getattr(engine, name)
        monkeypatch.setattr(engine, name, lambda *arguments, method=method, **keywords: (
            calls.append(1), method(*arguments, **keywords))[1])
    handle = model.register_forward_hook(lambda *arguments: calls.append(1))
    try:
        for settings in (SamplerSettings("dfs", threshold=0.01), SamplerSettings("greedy")):
            result = dfs_search(engine, PROMPT, space, settings, deadline=time.monotonic() - 1)
            assert result.completions == [] and result.forward_calls == 0
            assert result.capped == DEADLINE_BEFORE_START
        assert calls == []
        dfs_search(engine, PROMPT, space, SamplerSettings("greedy"), deadline=time.monotonic() + 3600)
        assert calls  # guard: the hooks see the calls
    finally:
        handle.remove()


def test_a_deadline_stops_greedy_decoding_between_tokens(clock):
    engine = engine_for(0, 10.0)  # a model whose greedy answer runs long
    space = AnswerSpace(WITH_NEWLINE, EOS, 12)
    settings = SamplerSettings("greedy", drafts="none")
    untimed = dfs_search(engine, PROMPT, space, settings)
    assert untimed.forward_calls > 3 and untimed.capped is None
    stopped = dfs_search(engine, PROMPT, space, settings, deadline=clock.now + 3)
    assert 0 < stopped.forward_calls < untimed.forward_calls
    assert stopped.completions == [] and stopped.capped.startswith("deadline reached with 1 branch")
