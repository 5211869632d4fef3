"""The speculative DFS against brute force and against itself without drafts: the same answers, whatever the drafts.

A draft only changes which positions a step computes: every position it walks is one the search
explores anyway. So with drafts that are right, wrong, empty, outside the alphabet, longer than any
answer, or learnt from the search's own finds, one lane or several, each search must
return exactly the enumerated answers (NLLs within 1e-4) and the drops, and every explored prefix
is either a step's branch or a followed draft token. The draft sources themselves (prompt lookup,
answers read position by position) are checked on their own, and so is the solver's use of them.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import bigram_model
from test_dfs import (CASE_NAMES, CASES, CONFIGS, EOS, PROMPT, THRESHOLDS, assert_same_as_reference, dfs_at,
                      dfs_search, engine_for, full_log_probs, model_for, safe_enumeration)

from arc_kit.data.augmentation import Augmentation
from arc_kit.data.tasks import Pair
from arc_kit.experiments.analysis import draft_share
from arc_kit.method.records import SearchStats, TaskRecord, TestResult
from arc_kit.run.record_json import from_json, to_json
from arc_kit.method.solver import Solver
from arc_kit.method.answers import AnswerSpace
from arc_kit.method.drafts import AlignedAnswers, DraftSource, MostSupported, PromptLookup, draft_source
from arc_kit.method.search import search
from arc_kit.method.step_costs import DraftOdds, StepCosts, draft_lengths
from arc_kit.settings import SamplerSettings, SolveSettings
from arc_kit.text import TaskEncoder, Vocabulary

OTHER_PROMPTS = [PROMPT[:-3] + [5, 6, 12], [13, 16, 17, 11, 2, 12], PROMPT[:20] + [11, 7, 10, 8, 9, 12]]
PER_STEP = StepCosts(fixed=1.0, lane=0.0, token=0.0, slot=0.0)  # costs of a device that pays per step: whole drafts
MIXED = StepCosts(fixed=1.0, lane=0.05, token=0.3, slot=0.02)  # a token worth feeding only where likely followed


def proposal(source: DraftSource, path, limit: int) -> list[int]:
    """What ``source`` proposes after ``path``, without its support."""
    return source.supported(path, limit)[0]


class Constant(DraftSource):
    """Proposes the same tokens after every path (cut to the limit)."""

    def __init__(self, tokens):
        self.tokens = list(tokens)

    def supported(self, path, limit):
        return self.tokens[:limit], 0


def draft_kinds(model, space: AnswerSpace, answers: list[tuple[int, ...]]) -> dict[str, object]:
    """A factory of a fresh draft source (sources may learn) for every kind of draft."""
    best = list(answers[0]) if answers else [space.allowed_ids[0], EOS]
    log_probs = full_log_probs(model, PROMPT, space)
    unlikely = min((t for t in space.allowed_ids if t != EOS), key=lambda t: float(log_probs[t]))
    structure = [EOS, 10]  # 10: the row separator of the WITH_NEWLINE alphabet
    return {
        "empty": DraftSource,
        "right (the answers, read position by position)": lambda: AlignedAnswers([list(a) for a in answers], structure,
                                                                                  learn=False),
        "the best answer only": lambda: AlignedAnswers([best], structure, learn=False),
        "learnt from the search's own finds": lambda: AlignedAnswers([], structure),
        "wrong: the least likely token again and again": lambda: Constant([unlikely] * 40),
        "junk outside the alphabet": lambda: Constant([11, 40, space.allowed_ids[0]]),
        "longer than any answer (no eos)": lambda: Constant([space.allowed_ids[0]] * (space.max_length + 5)),
        "an answer, then past its eos": lambda: Constant([*best, *best, *best]),
        "prompt lookup": lambda: PromptLookup(PROMPT, min_length=1),
        "the most supported of several": lambda: MostSupported([DraftSource(), Constant([unlikely]),
                                                                 AlignedAnswers([best], structure),
                                                                 PromptLookup(PROMPT, min_length=1)]),
    }


@pytest.fixture(scope="module", params=CASES, ids=CASE_NAMES)
def case(request):
    """(engine, space, [(threshold, enumeration)] for each of THRESHOLDS), as test_dfs's ``case``."""
    (allowed, max_length, seed, scale), mode = request.param
    space = AnswerSpace(allowed, EOS, max_length, mode)
    model = model_for(seed, scale)
    return engine_for(seed, scale), space, [safe_enumeration(model, space, threshold) for threshold in THRESHOLDS]


def assert_exact(result, enumeration, name: str, threshold: float, guess_followed: int = 0, guess_length: int = 0):
    try:
        assert_same_as_reference(result, enumeration)
        assert result.dropped.get("max length", 0) == enumeration.dropped
        # every explored prefix: a step's branch, a followed draft token, or a followed guess token
        assert result.forward_calls + result.draft_accepted + guess_followed == len(enumeration.prefixes)
        assert result.draft_accepted <= result.draft_tokens
        # the prompt and the guess in the first pass, then every step's tokens
        assert result.tokens_processed == len(PROMPT) + guess_length + result.forward_calls + result.draft_tokens
        assert result.capped is None
    except AssertionError as error:
        raise AssertionError(f"drafts {name!r} at T={threshold:.4f}: {error}") from error


@pytest.mark.parametrize("case", [case if index < 2 else pytest.param(case, marks=pytest.mark.slow)
                                  for index, case in enumerate(CASES)], ids=CASE_NAMES, indirect=True)
def test_every_kind_of_draft_returns_exactly_the_enumerated_answers(case):
    engine, space, enumerations = case
    for threshold, enumeration in enumerations:
        answers = [ids for ids, _ in enumeration.answers]
        for name, make in draft_kinds(engine.model, space, answers).items():
            result = dfs_search(engine, PROMPT, space, dfs_at(threshold, drafts="all"), drafts=make())
            assert_exact(result, enumeration, name, threshold)


def test_right_drafts_save_steps_and_wrong_ones_cost_none(case):
    engine, space, enumerations = case
    threshold, enumeration = enumerations[-1]
    answers = [ids for ids, _ in enumeration.answers]
    kinds = draft_kinds(engine.model, space, answers)
    whole = dfs_at(threshold, drafts="all")
    plain = dfs_search(engine, PROMPT, space, whole)
    right = dfs_search(engine, PROMPT, space, whole, drafts=kinds["the best answer only"]())
    assert plain.draft_tokens == 0 and plain.forward_calls == len(enumeration.prefixes)
    assert right.draft_accepted >= len(answers[0]) - 2  # the best answer's path, but for its first token and eos
    assert right.forward_calls == plain.forward_calls - right.draft_accepted
    wrong = dfs_search(engine, PROMPT, space, whole, drafts=kinds["wrong: the least likely token again and again"]())
    assert wrong.draft_tokens > 0 and wrong.forward_calls == plain.forward_calls - wrong.draft_accepted
    assert_exact(wrong, enumeration, "wrong", threshold)


def test_no_draft_longer_than_the_setting_is_fed(case, monkeypatch):
    engine, space, enumerations = case
    threshold, enumeration = enumerations[-1]
    fed = []
    step = engine.step

    def recorded(runs, positions):
        fed.extend(len(run) - 1 for run in runs)
        return step(runs, positions)

    monkeypatch.setattr(engine, "step", recorded)
    monkeypatch.setattr(engine, "step_costs", lambda positions, width: PER_STEP)  # auto: as long as allowed
    for drafts, limit in (("all", 0), ("all", 1), ("all", 3), ("auto", 0), ("auto", 3)):
        fed.clear()
        result = dfs_search(engine, PROMPT, space, dfs_at(threshold, draft_tokens=limit, drafts=drafts),
                            drafts=Constant([space.allowed_ids[0]] * 40))
        assert_exact(result, enumeration, f"constant, {drafts}, at most {limit}", threshold)
        assert max(fed, default=0) <= limit and sum(fed) == result.draft_tokens
        assert (max(fed, default=0) > 0) == (limit > 0)  # guard: drafts were fed where allowed


@pytest.mark.slow
def test_drafts_and_a_guess_together_return_the_enumerated_answers(case, monkeypatch):
    engine, space, enumerations = case
    monkeypatch.setattr(engine, "step_costs", lambda positions, width: MIXED)
    for threshold, enumeration in enumerations:
        answers = [ids for ids, _ in enumeration.answers]
        guess = list(answers[-1]) if answers else [EOS]
        followed = 0
        while followed < len(guess) - 1 and tuple(guess[:followed + 1]) in enumeration.prefixes:
            followed += 1
        for index, (name, make) in enumerate(draft_kinds(engine.model, space, answers).items()):
            drafts = ("all", "auto")[index % 2]  # auto under costs that cut drafts short (``MIXED``)
            result = dfs_search(engine, PROMPT, space, dfs_at(threshold, drafts=drafts), guess=guess, drafts=make())
            assert_exact(result, enumeration, f"{name} ({drafts}), guess {guess}", threshold, followed, len(guess))


def assert_same_search(lane, single, counts: bool = True):
    """The same answers and NLLs; with ``counts``, the same steps, drafts and drops too (the same draft lengths)."""
    assert [c.ids for c in lane.completions] == [c.ids for c in single.completions]
    np.testing.assert_allclose([c.nll for c in lane.completions], [c.nll for c in single.completions], rtol=0,
                               atol=1e-4)
    assert lane.dropped == single.dropped
    if counts:
        assert (lane.forward_calls, lane.draft_tokens, lane.draft_accepted) == (
            single.forward_calls, single.draft_tokens, single.draft_accepted)
    else:  # the same positions explored, in other steps
        assert lane.forward_calls + lane.draft_accepted == single.forward_calls + single.draft_accepted


@pytest.mark.parametrize("case", [case if index < 2 else pytest.param(case, marks=pytest.mark.slow)
                                  for index, case in enumerate(CASES)], ids=CASE_NAMES, indirect=True)
def test_batched_lanes_with_every_kind_of_draft_equal_brute_force_and_single_searches(case, monkeypatch):
    """Lanes with whole drafts, and at the lowest threshold (the most work) with ``auto``'s lengths under costs that
    cut them short (``MIXED``: lengths that differ from lane to lane and step to step), against brute force and
    each prompt searched alone with whole drafts."""
    engine, space, enumerations = case
    monkeypatch.setattr(engine, "step_costs", lambda positions, width: MIXED)
    for index, (threshold, enumeration) in enumerate(enumerations):
        drafts = "auto" if index == len(enumerations) - 1 else "all"
        answers = [ids for ids, _ in enumeration.answers]
        makers = list(draft_kinds(engine.model, space, answers).values())
        prompts = [PROMPT] * len(makers) + OTHER_PROMPTS
        makers += makers[1:1 + len(OTHER_PROMPTS)]  # other prompts, with drafts of answers to PROMPT
        lanes = search(engine, prompts, space, dfs_at(threshold, drafts=drafts), drafts=[make() for make in makers])
        singles = [dfs_search(engine, prompt, space, dfs_at(threshold, drafts="all"), drafts=make())
                   for prompt, make in zip(prompts, makers)]
        for prompt, lane, single in zip(prompts, lanes, singles):
            if prompt is PROMPT:
                assert_same_as_reference(lane, enumeration)
            assert_same_search(lane, single, counts=drafts == "all")
        if drafts == "auto":  # guard: auto fed some drafts, and cut some short
            assert sum(lane.draft_tokens for lane in lanes) > 0
            assert sum(lane.draft_tokens for lane in lanes) < sum(single.draft_tokens for single in singles)


def test_a_capped_search_with_drafts_finds_only_true_answers_within_its_cap():
    allowed, max_length, seed, scale = CONFIGS[3]
    space = AnswerSpace(allowed, EOS, max_length)
    engine = engine_for(seed, scale)
    threshold, enumeration = safe_enumeration(model_for(seed, scale), space, 0.01)
    reference = dict(enumeration.answers)
    for cap in (1, 3, 6):
        result = dfs_search(engine, PROMPT, space, dfs_at(threshold, max_forward_calls=cap),
                            drafts=AlignedAnswers([], [EOS, 10]))
        assert result.forward_calls == cap and result.capped.startswith(f"forward-call cap of {cap}")
        for completion in result.completions:
            assert completion.nll == pytest.approx(reference[completion.ids], abs=1e-4)


# -- auto: the lengths chosen by cost --------------------------------------------------------------

def test_the_cost_model_feeds_long_drafts_where_steps_are_cheap_and_short_or_none_where_tokens_cost():
    likely, even, unlikely = [0.95 ** n for n in range(1, 9)], [0.5 ** n for n in range(1, 9)], [0.1] * 8
    per_step = StepCosts(fixed=1.0, lane=0.0, token=0.0, slot=0.0)  # a GPU's: a step costs the same however long
    assert draft_lengths(per_step, [likely, even, unlikely]) == [8, 8, 8]
    assert draft_lengths(per_step, [likely, []]) == [8, 0]
    per_token = StepCosts(fixed=0.0, lane=0.0, token=1.0, slot=0.0)  # every token costs what a lane's step saves
    assert draft_lengths(per_token, [likely, even, unlikely]) == [0, 0, 0]
    # the 2-core CPU's at 16 lanes, roughly (docs/results.md): a token half a lane's share of a step
    cpu = StepCosts(fixed=0.05, lane=0.005, token=0.007, slot=0.001)
    lengths = draft_lengths(cpu, [likely, even, unlikely] * 5 + [likely])
    assert lengths[:3] == [8, 1, 0] and lengths == lengths[:3] * 5 + [8]
    # one lane: its step's fixed cost all its own, a token saves 0.063 s: worth a token and a slot (0.008) at 1/4
    assert draft_lengths(cpu, [even]) == [2]
    # a costly slot: one lane's long draft widens every lane's step, the others' short ones do not pay for it
    wide = StepCosts(fixed=0.05, lane=0.005, token=0.0, slot=0.02)
    assert max(draft_lengths(wide, [likely] + [unlikely] * 15)) < 8
    # compiled (buckets): a run of 9 costs what 16 do, so a step's runs fill the bucket they are in
    compiled = StepCosts(fixed=0.05, lane=0.0, token=0.0, slot=0.001, buckets=True)
    for chance in (0.5, 0.8, 0.9, 0.97):
        lengths = draft_lengths(compiled, [[chance ** n for n in range(1, 64)]] * 4)
        assert len(set(lengths)) == 1 and lengths[0] + 1 in (2, 4, 8, 16, 32, 64) and lengths[0] > 0, chance
    assert StepCosts(0.5, 0.0, 0.0, 0.01, buckets=True).seconds([1, 9, 2]) == 0.5 + 0.01 * 4 * 16


def test_the_costs_are_read_from_timed_steps_and_the_odds_from_the_walks():
    def assert_same(read: StepCosts, truth: StepCosts):
        for name, value in vars(read).items():
            assert value == pytest.approx(vars(truth)[name], abs=1e-12), name

    truth = StepCosts(fixed=0.05, lane=0.004, token=0.006, slot=0.001)
    lanes, width = 12, 8
    timed = [truth.seconds(runs) for runs in ([1], [1] * lanes, [width] * lanes, [width] + [1] * (lanes - 1))]
    assert_same(StepCosts.measured(lanes, width, *timed), truth)
    alone = StepCosts.measured(1, width, timed[0], timed[0], truth.seconds([width]), None)
    assert alone.seconds([5]) == pytest.approx(truth.seconds([5]))  # one lane: lane in fixed, slot in token
    compiled = StepCosts(fixed=0.01, lane=0.0, token=0.0, slot=0.0005, buckets=True)
    assert_same(StepCosts.measured(5, width, 0.0, compiled.seconds([1] * 5), compiled.seconds([width] * 5), None, True),
                compiled)
    noisy = StepCosts.measured(lanes, width, timed[0], timed[1], timed[1] * 0.9, timed[3])  # noise: a wide step faster
    assert min(vars(noisy)[name] for name in ("fixed", "lane", "token", "slot")) >= 0

    odds = DraftOdds()
    assert odds.chances(3, 3) == [1.0, 1.0, 1.0]  # before any count: tried, to be learnt
    odds.count(2, fed=5, followed=1)  # supports 2 (followed) and 3 (not), both of class 2-3; the 3 after: not tried
    odds.count(2, fed=1, followed=1)  # a draft followed whole: nothing after it was tried
    assert odds.chances(2, 3) == pytest.approx([3 / 4, (3 / 4) ** 2, (3 / 4) ** 2])  # class 4-7: still untried
    assert odds.chances(0, 0) == [] and DraftOdds.support_class(40) == DraftOdds.support_class(1000)


def test_auto_measures_each_device_once_and_finds_exactly_the_enumerated_answers(case, monkeypatch):
    engine, space, enumerations = case
    threshold, enumeration = enumerations[-1]
    answers = [ids for ids, _ in enumeration.answers]
    asked, given = [], []
    measure = engine.step_costs
    monkeypatch.setattr(engine, "step_costs", lambda positions, width: asked.append((positions, width)) or given.append(
        measure(positions, width)) or given[-1])
    steps = engine.steps
    kinds = draft_kinds(engine.model, space, answers)
    for make in kinds.values():
        result = dfs_search(engine, PROMPT, space, dfs_at(threshold), drafts=make())  # the default: auto
        assert_exact(result, enumeration, "auto, as measured", threshold)
        steps += result.forward_calls
    assert engine.steps == steps  # the timed steps count as none
    assert asked == [([len(PROMPT)], 4)] * len(kinds)  # past the prompt; the probe's width (PROBE_WIDTH), below 7 + 1
    assert given[0].seconds([1]) > 0 and all(costs is given[0] for costs in given)  # measured once


# -- the sources -----------------------------------------------------------------------------------

def test_prompt_lookup_proposes_what_follows_the_longest_suffix_at_its_latest_occurrence():
    prompt = [1, 2, 3, 4, 9, 2, 3, 5, 6, 7, 3, 8, 0]
    lookup = PromptLookup(prompt, min_length=1, in_path=False)
    assert proposal(lookup, [2, 3], 3) == [5, 6, 7]  # (2, 3) twice: the later one
    assert proposal(lookup, [1, 2, 3], 2) == [4, 9]  # the longer suffix wins over the later (2, 3)
    assert proposal(lookup, [3], 2) == [8, 0]  # the latest 3
    assert proposal(lookup, [8, 0], 4) == []  # the prompt's end: nothing follows
    assert proposal(lookup, [42], 4) == [] and proposal(lookup, [], 4) == [] and proposal(lookup, [2, 3], 0) == []
    strict = PromptLookup(prompt, min_length=3, in_path=False)
    assert proposal(strict, [7, 2, 3], 2) == [] and proposal(strict, [9, 2, 3], 2) == [5, 6]
    # the suffix reaches back into the prompt: after the prompt's last tokens (8, 0) and a path (1)
    assert proposal(PromptLookup([8, 0, 1, 5, 5, 8, 0], min_length=3), [1], 2) == [5, 5]
    # in the path too: a path that repeats itself is read on from its latest repetition
    in_path = PromptLookup(prompt, min_length=2)
    assert proposal(in_path, [4, 4, 7, 6, 4, 4], 3) == [7, 6, 4]
    assert proposal(in_path, [8, 0], 4) == [8, 0]  # the prompt's (3) 8 0 then the path's 8 0
    assert proposal(in_path, [2, 3], 3) == [5, 6, 7]  # nothing in the path: the prompt as before


def test_aligned_answers_read_the_reference_whose_shape_and_cells_fit_the_path():
    newline = 10
    wide = [1, 2, 3, newline, 4, 5, 6, EOS]
    narrow = [7, 8, newline, 9, 9, newline, 1, 1, EOS]
    source = AlignedAnswers([wide, narrow], [newline, EOS])
    assert proposal(source, [1, 2], 10) == [3, newline, 4, 5, 6, EOS]
    assert proposal(source, [7, 8], 3) == [newline, 9, 9]
    assert proposal(source, [1, 8, 3], 2) == [newline, 4]  # a row of 3: the wide one, a cell changed
    assert proposal(source, [7, 8, 3], 2) == [newline, 4]  # the narrow one wants its row break here
    assert proposal(source, [1, 2, newline], 2) == [9, 9]  # a row of 2: the narrow one
    assert proposal(source, [1, 2, 3, 4], 2) == []  # no reference has a row of 4
    assert proposal(source, wide, 3) == []  # past every reference's end
    source.found([1, 2, 3, newline, 4, 5, 0, EOS])
    assert proposal(source, [1, 2, 3, newline, 4], 2) == [5, 0]  # the found answer first among equals
    source.found([1, 2, 3, newline, 4, 5, 0, EOS])
    assert len(source.references) == 3  # known already
    assert AlignedAnswers([wide], [newline], learn=False).found(narrow) is None
    assert proposal(MostSupported([DraftSource(), source]), [1, 2], 1) == [3]


def test_a_proposals_support_is_how_much_of_the_path_its_source_saw_coming():
    newline = 10
    aligned = AlignedAnswers([[1, 2, 3, newline, 4, 5, 6, newline, 7, 8, 9, EOS]], [newline, EOS])
    assert aligned.supported([1, 2], 2) == ([3, newline], 2)
    assert aligned.supported([1, 8, 3], 1) == ([newline], 1)  # the run since the last cell it got wrong
    assert aligned.supported([1, 2, 3, newline, 0], 1) == ([5], 4)  # a branch away from it: read on
    lookup = PromptLookup([5, 5, 6, 0, 5, 6, 7, newline], min_length=1, in_path=False)
    assert lookup.supported([5, 6], 2) == ([7, newline], 2)
    assert lookup.supported([6], 1) == ([7], 1)  # the suffix matched the prompt's end too: only the path counts
    assert DraftSource().supported([1], 3) == ([], 0)
    both = MostSupported([aligned, lookup])
    assert proposal(both, [1, 2, 3, newline, 5, 6], 2) == [7, newline]  # lookup saw 2 coming, the reference 0
    assert proposal(both, [1, 2, 3, newline, 4, 6], 3) == [6, newline, 7]  # the reference saw 5 coming
    assert proposal(both, [1, 2], 2) == [3, newline]  # a tie: the earlier source


def test_the_solvers_sources_follow_the_setting():
    encoder = TaskEncoder(Vocabulary())
    grid = np.array([[1, 2], [3, 4]], dtype=np.uint8)
    identity = Augmentation()
    prompt = encoder.encode_prompt(TRAIN, grid).ids
    assert draft_source("none", encoder, prompt, grid, identity) is None
    assert isinstance(draft_source("prompt", encoder, prompt, grid, identity), PromptLookup)
    candidate = np.array([[5, 6], [7, 8]], dtype=np.uint8)
    source = draft_source("all", encoder, prompt, grid, identity, [candidate])
    digit = encoder.digit_ids
    expected = encoder.encode_answer(candidate).tolist()
    assert proposal(source, [digit[5]], 4) == expected[1:5]  # the candidate, cell by cell
    assert proposal(source, [digit[0], digit[6], encoder.row_separator[0], digit[3]], 3) == expected[4:7]
    test_as_answer = encoder.encode_answer(grid).tolist()
    # "1 0" is in the prompt (its first output), followed by a row "4 3": the lookup saw the whole path coming,
    # the test input only its first cell
    assert proposal(source, [digit[1], digit[0]], 3) == [encoder.row_separator[0], digit[4], digit[3]]
    # the test input's first row: it saw the whole path coming, as the lookup did; a tie goes to the answers
    assert proposal(source, [digit[1], digit[2]], 3) == test_as_answer[2:5]
    assert proposal(source, [digit[1], digit[0], digit[0]], 3) == []  # no row of 3: prompt lookup finds no 3-gram
    swapped = Augmentation(colours=(0, 1, 2, 3, 4, 6, 5, 7, 8, 9))
    source = draft_source("all", encoder, prompt, grid, swapped, [candidate])
    assert proposal(source, [digit[6]], 1) == [digit[5]]  # the candidate, in the augmentation's frame
    with pytest.raises(ValueError, match="unknown drafts"):
        draft_source("every", encoder, prompt, grid, identity)


# -- the solver ------------------------------------------------------------------------------------

TRAIN = (Pair([[1, 2, 0], [3, 4, 0]], [[2, 1, 0], [4, 3, 0]]), Pair([[5, 6], [7, 8]], [[6, 5], [8, 7]]))
TEST_INPUT = np.array([[4, 0, 7], [2, 2, 9]], dtype=np.uint8)


def test_the_solver_finds_the_same_candidates_with_every_setting_of_drafts():
    model, _ = bigram_model()
    solver = Solver(model, TaskEncoder(Vocabulary()), SolveSettings(test_time_training=False))
    augmentations = Augmentation.inference_set(np.random.default_rng(4), len(TRAIN), 4)
    found = {}
    for drafts in ("none", "prompt", "all", "auto"):
        sampler = SamplerSettings("dfs", threshold=0.02, drafts=drafts)
        candidates, stats = solver.sample(solver.model, TRAIN, TEST_INPUT, augmentations, sampler)
        found[drafts] = ({c.grid.tobytes() + bytes(c.grid.shape): c.generation_nlls for c in candidates}, stats)
        counted = solver.draft_odds.tried.sum() - len(solver.draft_odds.tried)  # auto alone counts, kept by the solver
        assert (counted > 0) == (drafts == "auto")
    plain, plain_stats = found["none"]
    assert len(plain) > 3 and plain_stats.draft_tokens == 0 and plain_stats.engine_steps > 0
    for drafts in ("prompt", "all", "auto"):
        nlls, stats = found[drafts]
        assert nlls.keys() == plain.keys()
        for key, by_view in nlls.items():
            assert by_view.keys() == plain[key].keys()
            for view, nll in by_view.items():
                assert nll == pytest.approx(plain[key][view], abs=1e-4)
        assert stats.draft_accepted <= stats.draft_tokens
        assert stats.engine_steps < stats.forward_calls  # the views after the first stepped together
        assert stats.answers == plain_stats.answers
    assert 0 < found["all"][1].draft_accepted and found["all"][1].engine_steps < plain_stats.engine_steps


def test_the_draft_counts_are_kept_in_the_records_and_summed_for_the_end_line():
    stats = SearchStats(forward_calls=9, engine_steps=7, draft_tokens=40, draft_accepted=30)
    test = TestResult([], [], [], [], stats)
    again = from_json(TestResult, to_json(test))
    assert (again.search.engine_steps, again.search.draft_tokens, again.search.draft_accepted) == (7, 40, 30)
    record = TaskRecord("t", tests=[test, TestResult([], [], [], [], SearchStats(draft_tokens=10, draft_accepted=0))])
    assert draft_share([record]) == "drafts: 60% of 50 tokens followed"
    assert draft_share([TaskRecord("u")]) == "drafts: none fed"
    assert from_json(SearchStats, {}).draft_tokens == 0  # records of an earlier kit


def test_the_drafts_setting_is_auto_by_default_checked_and_kept_through_json_and_flags(capsys):
    import argparse

    from arc_kit.cli import main
    from arc_kit.cli.options import add_settings_options, settings_from_options

    assert SamplerSettings().drafts == "auto" and SolveSettings().sampler.drafts == "auto"
    assert SolveSettings.from_json(SolveSettings().replace(
        sampler=SamplerSettings(drafts="prompt", draft_tokens=7)).to_json()).sampler.draft_tokens == 7
    with pytest.raises(ValueError, match="drafts"):
        SamplerSettings(drafts="some")
    with pytest.raises(ValueError, match="draft_tokens"):
        SamplerSettings(draft_tokens=-1)
    parser = argparse.ArgumentParser()
    add_settings_options(parser, SolveSettings(), "the method")
    for given, expected in (([], ("auto", 7)), (["--drafts", "all"], ("all", 7)),
                            (["--drafts", "auto", "--draft-tokens", "15"], ("auto", 15))):
        sampler = settings_from_options(parser.parse_args(given), SolveSettings()).sampler
        assert (sampler.drafts, sampler.draft_tokens) == expected
    with pytest.raises(SystemExit):
        main(["solve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--drafts {none,prompt,all,auto}" in text and "auto: all's drafts, each step's lengths chosen by" in text
