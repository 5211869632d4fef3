"""The text format, the 64-symbol vocabulary, the loss mask, the token budget and answer decoding.

Expected texts are written out literally; the loss mask and the budget are checked against slow
references that walk the sequence or count tokens from grid shapes, not against the encoder's pieces.
Decoding: ``authors`` (the default) against what the authors' own function returned on recorded strings
(``data/authors_decoding.json``), ``strict`` against a reference written from its description.
"""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from arc_kit.data.grids import MAX_SIDE
from arc_kit.data.tasks import Pair
from arc_kit.text import (
    PREPROMPT,
    HuggingFaceTokenizer,
    NotAGridError,
    TaskEncoder,
    TaskTooLongError,
    TextFormat,
    Vocabulary,
    read_grid,
)

HYPOTHESIS = settings(max_examples=100, deadline=None)

# -- a small hand-made task and its text ------------------------------------------------------------
TRAIN = (
    Pair([[1, 2], [3, 4]], [[5]]),
    Pair([[0, 7, 8]], [[9], [6]]),
)
TEST_INPUT = np.array([[2, 2], [1, 0]], dtype=np.uint8)
TEST_ANSWER = np.array([[3, 0, 3]], dtype=np.uint8)

EXPECTED_PROMPT_TEXT = (
    "<bos>ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjklmnpqrstuvwxyz"
    "I12\n34\n+/-=O5\n<eos>"
    "I078\n+/-=O9\n6\n<eos>"
    "I22\n10\n+/-=O"
)
EXPECTED_ANSWER_TEXT = "303\n<eos>"


@pytest.fixture(scope="module")
def encoder():
    return TaskEncoder(Vocabulary())


@pytest.fixture(scope="module")
def longest_encoder():
    """Drops the longest train pair first when a task is over budget (the kit's former default)."""
    return TaskEncoder(Vocabulary(), TextFormat(drop_order="longest"))


def grid_tokens(height, width):
    """Tokens of a grid's rows with a one-token row separator: every cell and height-1 separators."""
    return height * width + height - 1


def pair_tokens(pair):
    """A train pair with the default format and vocabulary: I, input, \\n, +/-=O, output, \\n, eos."""
    return 1 + grid_tokens(*pair.input.shape) + 2 + grid_tokens(*pair.output.shape) + 2


def query_tokens(grid):
    return 1 + grid_tokens(*np.shape(grid)) + 2


HEADER_TOKENS = 1 + 48  # bos and the pre-prompt


# -- strategies ---------------------------------------------------------------------------------------
@st.composite
def grids(draw, max_side=MAX_SIDE):
    """Grids of any size up to max_side, either dense random (numpy) or hypothesis-built (shrinkable)."""
    height = draw(st.integers(1, max_side))
    width = draw(st.integers(1, max_side))
    if draw(st.booleans()):
        seed = draw(st.integers(0, 2**32 - 1))
        return np.random.default_rng(seed).integers(0, 10, (height, width)).astype(np.uint8)
    return draw(arrays(np.uint8, (height, width), elements=st.integers(0, 9)))


@st.composite
def pairs(draw, max_side=4):
    return Pair(draw(grids(max_side)), draw(grids(max_side)))


# -- 1. the default format's exact text -------------------------------------------------------------
def test_preprompt_is_the_48_letters_without_i_and_o():
    assert PREPROMPT == "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghjklmnpqrstuvwxyz"
    assert len(PREPROMPT) == 48 and len(set(PREPROMPT)) == 48
    assert not set("IOio") & set(PREPROMPT)
    assert TextFormat().preprompt == PREPROMPT


def test_task_text_is_the_authors_format():
    text_format = TextFormat()
    assert text_format.task_text(TRAIN, TEST_INPUT) == EXPECTED_PROMPT_TEXT
    assert text_format.task_text(TRAIN, TEST_INPUT, TEST_ANSWER) == EXPECTED_PROMPT_TEXT + EXPECTED_ANSWER_TEXT
    assert text_format.task_text(TRAIN) == EXPECTED_PROMPT_TEXT[:-len("I22\n10\n+/-=O")]


def test_task_text_without_bos():
    assert TextFormat(use_bos=False).task_text(TRAIN, TEST_INPUT) == EXPECTED_PROMPT_TEXT[len("<bos>"):]


def test_prompt_ids_decode_to_the_text(encoder):
    vocabulary = encoder.tokenizer
    encoded = encoder.encode_prompt(TRAIN, TEST_INPUT)
    assert vocabulary.decode(encoded.ids) == EXPECTED_PROMPT_TEXT
    assert encoded.ids.dtype == np.int64
    assert encoded.kept == (0, 1) and encoded.dropped == ()
    assert not encoded.loss_mask.any()
    assert encoder.text(encoded.ids) == EXPECTED_PROMPT_TEXT


def test_prompt_ids_literally(encoder):
    """Digits are their own ids; one id each for \\n, I, +/-=O, bos, eos; the letters after."""
    encoded = encoder.encode_prompt(TRAIN[:1], [[7]])
    letters = list(range(16, 64))
    nl, i, marker, bos, eos = 10, 11, 12, 13, 14
    assert encoded.ids.tolist() == [bos, *letters, i, 1, 2, nl, 3, 4, nl, marker, 5, nl, eos, i, 7, nl, marker]


def test_training_ids_decode_to_the_text_with_the_answer(encoder):
    encoded = encoder.encode_training([*TRAIN, Pair(TEST_INPUT, TEST_ANSWER)])
    assert encoder.tokenizer.decode(encoded.ids) == EXPECTED_PROMPT_TEXT + EXPECTED_ANSWER_TEXT


def test_answer_ids(encoder):
    assert encoder.tokenizer.decode(encoder.encode_answer(TEST_ANSWER)) == EXPECTED_ANSWER_TEXT
    assert encoder.encode_answer([[1, 2], [3, 4]]).tolist() == [1, 2, 10, 3, 4, 10, 14]


def test_format_rejects_digits_in_separators():
    with pytest.raises(ValueError, match="row_separator"):
        TextFormat(row_separator="")
    with pytest.raises(ValueError, match="row_separator"):
        TextFormat(row_separator="1")
    with pytest.raises(ValueError, match="digit"):
        TextFormat(output_prefix="\nO1")


# -- 2. the vocabulary ------------------------------------------------------------------------------
def test_vocabulary_has_64_symbols_and_digits_first():
    vocabulary = Vocabulary()
    assert vocabulary.vocab_size == 64 == len(vocabulary.symbols) == len(set(vocabulary.symbols))
    for digit in range(10):
        assert vocabulary.encode(str(digit)) == [digit]
        assert vocabulary.decode([digit]) == str(digit)
    assert {vocabulary.bos_id, vocabulary.eos_id, vocabulary.pad_id} <= set(range(64))
    assert len({vocabulary.bos_id, vocabulary.eos_id, vocabulary.pad_id}) == 3
    assert [vocabulary.decode([i]) for i in (vocabulary.bos_id, vocabulary.eos_id, vocabulary.pad_id)] == [
        "<bos>", "<eos>", "<pad>"]
    assert set(PREPROMPT) | set("0123456789") | {"\n", "I", "+/-=O"} <= set(vocabulary.symbols)


TEXT_SYMBOLS = [s for s in Vocabulary().symbols if s not in ("<bos>", "<eos>", "<pad>")]


@HYPOTHESIS
@given(st.lists(st.sampled_from(TEXT_SYMBOLS), max_size=80))
def test_vocabulary_round_trip(symbols):
    vocabulary = Vocabulary()
    text = "".join(symbols)
    ids = vocabulary.encode(text)
    assert ids == [vocabulary.symbols.index(s) for s in symbols]  # one id per symbol, longest match
    assert vocabulary.decode(ids) == text


@HYPOTHESIS
@given(st.lists(st.integers(0, 63), max_size=80))
def test_vocabulary_decode_then_encode(ids):
    vocabulary = Vocabulary()
    ids = [i for i in ids if vocabulary.symbols[i] not in ("<bos>", "<eos>", "<pad>")]
    assert vocabulary.encode(vocabulary.decode(ids)) == ids


@pytest.mark.parametrize("text", ["12o3", "i", "O", "+/-=", "<eos>", " ", "\t", "é"])
def test_vocabulary_unknown_character(text):
    with pytest.raises(ValueError, match="no symbol for"):
        Vocabulary().encode(text)


def test_vocabulary_rejects_duplicates_and_missing_specials():
    with pytest.raises(ValueError, match="distinct"):
        Vocabulary(("0", "0", "<bos>", "<eos>", "<pad>"))
    with pytest.raises(ValueError, match="<pad>"):
        Vocabulary(("0", "<bos>", "<eos>"))


# -- 3. answers round trip ---------------------------------------------------------------------------
@HYPOTHESIS
@given(grids())
def test_answer_round_trip(grid):
    encoder = TaskEncoder(Vocabulary())
    decoded = encoder.decode_answer(encoder.encode_answer(grid))
    assert decoded.dtype == np.uint8 and decoded.shape == grid.shape
    np.testing.assert_array_equal(decoded, grid)


def test_answer_round_trip_every_size(encoder):
    rng = np.random.default_rng(0)
    for height in range(1, MAX_SIDE + 1):
        for width in range(1, MAX_SIDE + 1):
            grid = rng.integers(0, 10, (height, width)).astype(np.uint8)
            ids = encoder.encode_answer(grid)
            assert len(ids) == height * width + height + 1
            decoded = encoder.decode_answer(ids)
            assert decoded.shape == (height, width) and np.array_equal(decoded, grid)


def test_decode_answer_ignores_tokens_after_eos(encoder):
    ids = [*encoder.encode_answer([[4, 5]]), 3, 10, 11]
    np.testing.assert_array_equal(encoder.decode_answer(ids), [[4, 5]])
    np.testing.assert_array_equal(encoder.decode_answer(np.array(ids)), [[4, 5]])


def spellable(text):
    """Whether the 64-symbol vocabulary can write ``text`` (<bos>, <eos> and <pad> spelled out)."""
    try:
        vocabulary_ids(text)
    except ValueError:
        return False
    return True


def vocabulary_ids(text):
    """Ids of a text that may spell out <bos>, <eos> and <pad> (Vocabulary.encode does not)."""
    vocabulary, ids = Vocabulary(), []
    for index, piece in enumerate(text.split("<")):
        if index:
            special, piece = piece.split(">", 1)
            ids.append(vocabulary.symbols.index(f"<{special}>"))
        ids += vocabulary.encode(piece)
    return ids


# -- 4. answers that are not grids ------------------------------------------------------------------
# ``decoding: strict`` (the kit's earlier rule): digits and row separators only, up to an eos that must be there.
NOT_GRIDS = {
    "no eos": ("12\n34\n", "no eos"),
    "empty": ("", "no eos"),
    "ragged": ("12\n345\n<eos>", "ragged"),
    "non-digit": ("12\n3I\n<eos>", "non-digit 'I'"),
    "non-digit letter": ("1A\n<eos>", "non-digit 'A'"),
    "bos inside": ("1<bos>\n<eos>", "non-digit '<bos>'"),
    "only the newline": ("\n<eos>", "empty answer"),
    "only newlines": ("\n\n\n<eos>", "empty answer"),
    "nothing before eos": ("<eos>", "empty answer"),
    "ragged without the closing newline": ("12\n3<eos>", "ragged"),
    "ragged across an empty row": ("12\n\n345\n<eos>", "ragged"),
    "31 rows": ("1\n" * 31 + "<eos>", "larger than 30x30"),
    "31 columns": ("1" * 31 + "\n<eos>", "larger than 30x30"),
}


@pytest.fixture(scope="module")
def strict_encoder():
    return TaskEncoder(Vocabulary(), TextFormat(decoding="strict"))


@pytest.mark.parametrize("name", NOT_GRIDS)
def test_strict_decoding_says_why_not_a_grid(strict_encoder, name):
    text, reason = NOT_GRIDS[name]
    ids = vocabulary_ids(text)
    with pytest.raises(NotAGridError, match=reason):
        strict_encoder.decode_answer(ids)


def test_not_a_grid_is_a_value_error():
    assert issubclass(NotAGridError, ValueError)


def strict_reference(text):
    """The strict rule from its description: the text up to eos (which must be there), split at newlines;
    empty lines skipped; digits only; rectangular; 1-30 rows and columns."""
    if "<eos>" not in text:
        return None
    rows = [line for line in text.split("<eos>")[0].split("\n") if line]
    if not rows or any(not line.isdigit() for line in rows) or len({len(line) for line in rows}) != 1:
        return None
    if len(rows) > MAX_SIDE or len(rows[0]) > MAX_SIDE:
        return None
    return np.array([[int(c) for c in line] for line in rows], dtype=np.uint8)


# Answers both rules accept although they are not what the encoder writes (closing newline missing, empty rows).
LENIENT_ANSWERS = {
    "no closing newline": ("12\n34<eos>", [[1, 2], [3, 4]]),
    "one row, no newline": ("7<eos>", [[7]]),
    "empty middle row": ("12\n\n34\n<eos>", [[1, 2], [3, 4]]),
    "empty last row": ("12\n\n<eos>", [[1, 2]]),
    "empty first row": ("\n56\n<eos>", [[5, 6]]),
    "30x30 without the closing newline": ("\n".join(["1" * 30] * 30) + "<eos>", np.ones((30, 30))),
}


@pytest.mark.parametrize("name", LENIENT_ANSWERS)
def test_both_decodings_accept_a_missing_closing_newline_and_empty_rows(encoder, strict_encoder, name):
    text, expected = LENIENT_ANSWERS[name]
    for decoder in (encoder, strict_encoder):
        decoded = decoder.decode_answer(vocabulary_ids(text))
        np.testing.assert_array_equal(decoded, expected)
    np.testing.assert_array_equal(strict_reference(text), expected)


@HYPOTHESIS
@given(st.lists(st.sampled_from(["0", "1", "5", "9", "\n", "I", "<eos>"]), max_size=40))
def test_strict_decoding_against_its_reference(pieces):
    """Any string of digits, newlines, a non-digit and eos: a grid exactly when the reference reads one."""
    encoder = TaskEncoder(Vocabulary(), TextFormat(decoding="strict"))
    text = "".join(pieces)
    expected = strict_reference(text)
    if expected is None:
        with pytest.raises(NotAGridError):
            encoder.decode_answer(vocabulary_ids(text))
    else:
        np.testing.assert_array_equal(encoder.decode_answer(vocabulary_ids(text)), expected)


# ``decoding: authors`` (the default): what the authors' own function returned on these strings, recorded by
# scripts/record_authors_decoding.py (their ArcDataset.decode, arc_loader.py at da-fr/Product-of-Experts-ARC-Paper
# 82619f6): a string is the generated text up to and including the first eos (all of it without one).
AUTHORS = json.loads((Path(__file__).parent / "data" / "authors_decoding.json").read_text(encoding="utf-8"))
SPELLABLE = [case for case in AUTHORS["cases"] if spellable(case["text"])]


def authors_expected(case):
    return None if case["grid"] is None else np.array(case["grid"], dtype=np.uint8)


def test_the_recorded_cases_cover_both_outcomes_and_what_strict_refuses():
    grids = [case["grid"] is not None for case in SPELLABLE]
    assert 10 <= sum(grids) < len(grids) and len(SPELLABLE) < len(AUTHORS["cases"])
    refused_by_strict_only = [case["text"] for case in SPELLABLE
                              if case["grid"] is not None and strict_reference(case["text"]) is None]
    assert {"12\n34\n", "1A2\n3B4\n<eos>", "I12\n+/-=O34\n<eos>", "1<bos>2\n<eos>"} <= set(refused_by_strict_only)


@pytest.mark.parametrize("case", SPELLABLE, ids=lambda case: repr(case["text"][:24]))
def test_authors_decoding_returns_what_their_function_returned(encoder, case):
    expected = authors_expected(case)
    ids = vocabulary_ids(case["text"])
    if expected is None:
        with pytest.raises(NotAGridError):
            encoder.decode_answer(ids)
    else:
        decoded = encoder.decode_answer(ids)
        assert decoded.dtype == np.uint8
        np.testing.assert_array_equal(decoded, expected)


@pytest.mark.parametrize("case", AUTHORS["cases"], ids=lambda case: repr(case["text"][:24]))
def test_read_grid_returns_what_their_function_returned(case):
    """Every recorded string, the ones no vocabulary here can spell too ("1²", Arabic-Indic digits, \r)."""
    expected = authors_expected(case)
    if expected is None:
        with pytest.raises(NotAGridError):
            read_grid(case["text"])
    else:
        np.testing.assert_array_equal(read_grid(case["text"]), expected)


def test_authors_decoding_ignores_what_follows_the_first_eos(encoder):
    ids = vocabulary_ids("12\n<eos>34\n<eos>")
    np.testing.assert_array_equal(encoder.decode_answer(ids), [[1, 2]])
    np.testing.assert_array_equal(encoder.decode_answer(vocabulary_ids("12\n<eos>AB")), [[1, 2]])


def test_the_default_decoding_is_the_authors():
    assert TextFormat().decoding == "authors" and TaskEncoder(Vocabulary()).format.decoding == "authors"
    with pytest.raises(ValueError, match="decoding"):
        TextFormat(decoding="lenient")


def test_decode_answer_largest_grid_is_fine(encoder):
    grid = encoder.decode_answer(vocabulary_ids(("1" * 30 + "\n") * 30 + "<eos>"))
    assert grid.shape == (30, 30)


# -- 5. the loss mask -----------------------------------------------------------------------------------
def reference_mask(ids, mask_first_output):
    """Walk the tokens: an output runs from just after the +/-=O marker through its eos."""
    vocabulary = Vocabulary()
    mask, in_output, outputs_seen = [], False, 0
    for token in ids:
        symbol = vocabulary.symbols[token]
        mask.append(in_output and not (mask_first_output and outputs_seen == 1))
        if symbol == "+/-=O":
            in_output, outputs_seen = True, outputs_seen + 1
        elif symbol == "<eos>":
            in_output = False
    return np.array(mask, dtype=bool)


def test_loss_mask_on_the_hand_made_task(encoder):
    pairs_ = [*TRAIN, Pair(TEST_INPUT, TEST_ANSWER)]
    text = EXPECTED_PROMPT_TEXT + EXPECTED_ANSWER_TEXT
    ids = vocabulary_ids(text)
    first_output, second_output, answer = [5, 10, 14], [9, 10, 6, 10, 14], [3, 0, 3, 10, 14]
    for mask_first, masked in ((True, second_output + answer), (False, first_output + second_output + answer)):
        encoded = encoder.encode_training(pairs_, mask_first_output=mask_first)
        assert encoded.ids.tolist() == ids
        assert encoded.loss_mask.dtype == bool
        assert encoded.ids[encoded.loss_mask].tolist() == masked
        assert encoded.labels[encoded.loss_mask].tolist() == masked
    default = encoder.encode_training(pairs_)
    assert default.ids[default.loss_mask].tolist() == second_output + answer


@HYPOTHESIS
@given(st.lists(pairs(), min_size=1, max_size=6), st.booleans())
def test_loss_mask_matches_a_walk_over_the_tokens(pairs_, mask_first_output):
    encoder = TaskEncoder(Vocabulary())
    encoded = encoder.encode_training(pairs_, mask_first_output=mask_first_output)
    assert encoded.kept == tuple(range(len(pairs_))) and encoded.dropped == ()
    assert len(encoded) == len(encoded.ids) == len(encoded.loss_mask) == HEADER_TOKENS + sum(map(pair_tokens, pairs_))
    np.testing.assert_array_equal(encoded.loss_mask, reference_mask(encoded.ids.tolist(), mask_first_output))
    # the masked tokens are exactly the outputs' answers, in order
    written = pairs_[1:] if mask_first_output else pairs_
    expected = [int(i) for pair in written for i in encoder.encode_answer(pair.output)]
    assert encoded.ids[encoded.loss_mask].tolist() == expected
    # labels: the id on the mask, -100 everywhere else
    labels = encoded.labels
    assert labels.shape == encoded.ids.shape
    assert np.all(labels[~encoded.loss_mask] == -100)
    np.testing.assert_array_equal(labels[encoded.loss_mask], encoded.ids[encoded.loss_mask])
    # the text is the format's
    text = TextFormat().task_text(pairs_[:-1], pairs_[-1].input, pairs_[-1].output)
    assert encoder.tokenizer.decode(encoded.ids) == text


def test_single_pair_with_first_output_masked_has_no_loss(encoder):
    encoded = encoder.encode_training([Pair([[1]], [[2]])])
    assert not encoded.loss_mask.any()
    assert np.all(encoded.labels == -100)
    assert encoder.encode_training([Pair([[1]], [[2]])], mask_first_output=False).loss_mask.sum() == 3


def test_training_needs_a_pair(encoder):
    with pytest.raises(ValueError, match="at least one pair"):
        encoder.encode_training([])


# -- 6. the token budget ------------------------------------------------------------------------------
def test_default_answer_room_is_a_30x30_answer(encoder):
    assert encoder.max_answer_len == 30 * 30 + 29 + 1 + 1 == 931
    assert encoder.max_len == 8192
    test_input = np.zeros((30, 30), dtype=np.uint8)
    fixed = HEADER_TOKENS + query_tokens(test_input)
    assert len(encoder.encode_prompt([], test_input, max_len=fixed + 931)) == fixed
    with pytest.raises(TaskTooLongError):
        encoder.encode_prompt([], test_input, max_len=fixed + 930)


def budget_pairs():
    """Train pairs of different lengths: 1x1, 3x3, 2x2, 5x5, 1x2 (inputs and outputs alike)."""
    sides = [(1, 1), (3, 3), (2, 2), (5, 5), (1, 2)]
    return [Pair(np.full(side, index, dtype=np.uint8), np.full(side, 9 - index, dtype=np.uint8))
            for index, side in enumerate(sides)]


def test_budget_drops_the_longest_pairs_first(longest_encoder, caplog):
    encoder = longest_encoder
    train = budget_pairs()
    lengths = [pair_tokens(pair) for pair in train]
    assert lengths == [7, 27, 15, 63, 9]
    test_input = np.array([[1, 2, 3]], dtype=np.uint8)
    room = 10
    fixed = HEADER_TOKENS + query_tokens(test_input)
    # room for everything but the 5x5 and the 3x3 pair
    max_len = fixed + room + 7 + 15 + 9 + 5
    with caplog.at_level(logging.WARNING, logger="arc_kit.text.encoder"):
        encoded = encoder.encode_prompt(train, test_input, max_len=max_len, answer_room=room, task_id="abc123")
    assert encoded.dropped == (1, 3)
    assert encoded.kept == (0, 2, 4)
    assert len(encoded) == fixed + 7 + 15 + 9
    text = TextFormat().task_text([train[i] for i in (0, 2, 4)], test_input)
    assert encoder.tokenizer.decode(encoded.ids) == text
    assert text.endswith("<eos>I123\n+/-=O")
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "abc123" in warnings[0].getMessage() and "[1, 3]" in warnings[0].getMessage()


def test_budget_keeps_everything_when_it_fits(longest_encoder, caplog):
    encoder = longest_encoder
    train = budget_pairs()
    test_input = np.array([[1, 2, 3]], dtype=np.uint8)
    fixed = HEADER_TOKENS + query_tokens(test_input)
    exact = fixed + sum(pair_tokens(pair) for pair in train) + 931
    with caplog.at_level(logging.WARNING, logger="arc_kit.text.encoder"):
        encoded = encoder.encode_prompt(train, test_input, max_len=exact)
    assert encoded.kept == (0, 1, 2, 3, 4) and encoded.dropped == ()
    assert not caplog.records
    # one token less and the longest pair goes
    assert encoder.encode_prompt(train, test_input, max_len=exact - 1).dropped == (3,)


def test_budget_can_drop_every_pair(encoder):
    train = budget_pairs()
    test_input = np.array([[1, 2, 3]], dtype=np.uint8)
    fixed = HEADER_TOKENS + query_tokens(test_input)
    encoded = encoder.encode_prompt(train, test_input, max_len=fixed + 931 + 6)
    assert encoded.kept == () and encoded.dropped == (0, 1, 2, 3, 4)
    assert encoder.tokenizer.decode(encoded.ids) == "<bos>" + PREPROMPT + "I123\n+/-=O"


def test_budget_uses_the_encoder_max_len():
    small = TaskEncoder(Vocabulary(), max_len=HEADER_TOKENS + query_tokens([[1, 2, 3]]) + 931 + 8)
    assert small.encode_prompt(budget_pairs(), [[1, 2, 3]]).kept == (0,)


def test_test_input_is_never_cut(encoder):
    test_input = np.arange(30 * 30).reshape(30, 30) % 10
    fixed = HEADER_TOKENS + query_tokens(test_input)
    with pytest.raises(TaskTooLongError, match="task big:"):
        encoder.encode_prompt(budget_pairs(), test_input, max_len=fixed + 99, answer_room=100, task_id="big")
    encoded = encoder.encode_prompt(budget_pairs(), test_input, max_len=fixed + 100, answer_room=100)
    assert encoded.kept == () and len(encoded) == fixed
    assert issubclass(TaskTooLongError, ValueError)


@HYPOTHESIS
@given(st.lists(pairs(max_side=5), min_size=1, max_size=8), grids(max_side=6),
       st.integers(0, 400), st.integers(0, 40))
def test_budget_against_token_counts(train, test_input, spare, room):
    """Longest first: fits, keeps order, ends with the whole test input, drops only the longest, only if needed."""
    encoder = TaskEncoder(Vocabulary(), TextFormat(drop_order="longest"))
    fixed = HEADER_TOKENS + query_tokens(test_input)
    max_len = fixed + room + spare
    encoded = encoder.encode_prompt(train, test_input, max_len=max_len, answer_room=room)
    lengths = [pair_tokens(pair) for pair in train]
    kept, dropped = list(encoded.kept), list(encoded.dropped)
    assert kept == sorted(kept) and dropped == sorted(dropped)
    assert sorted(kept + dropped) == list(range(len(train)))
    assert len(encoded) == fixed + sum(lengths[i] for i in kept) <= max_len - room
    if dropped:
        assert min(lengths[i] for i in dropped) >= max((lengths[i] for i in kept), default=0)
        assert len(encoded) + min(lengths[i] for i in dropped) > max_len - room  # none dropped needlessly
    text = encoder.tokenizer.decode(encoded.ids)
    assert text == TextFormat().task_text([train[i] for i in kept], test_input)
    query = "I" + TextFormat().grid_text(test_input) + "\n+/-=O"
    assert text.endswith(query)


def test_training_never_drops_the_last_pair(longest_encoder):
    encoder = longest_encoder
    train = budget_pairs()
    last = Pair(np.zeros((6, 6), dtype=np.uint8), np.ones((4, 4), dtype=np.uint8))
    sequence = [*train, last]
    fixed = HEADER_TOKENS + pair_tokens(last)
    encoded = encoder.encode_training(sequence, max_len=fixed + 7 + 9)
    assert encoded.kept == (0, 4, 5) and encoded.dropped == (1, 2, 3)
    assert len(encoded) == fixed + 7 + 9
    # the first written output (pair 0) is out of the loss; pair 4 and the last are in
    written = [int(i) for pair in (train[4], last) for i in encoder.encode_answer(pair.output)]
    assert encoded.ids[encoded.loss_mask].tolist() == written
    np.testing.assert_array_equal(encoded.loss_mask, reference_mask(encoded.ids.tolist(), True))
    only_last = encoder.encode_training(sequence, max_len=fixed)
    assert only_last.kept == (5,) and only_last.dropped == (0, 1, 2, 3, 4)
    assert not only_last.loss_mask.any()  # the only output written is the first one
    assert encoder.encode_training(sequence, max_len=fixed, mask_first_output=False).loss_mask.sum() == 4 * 4 + 4 + 1
    with pytest.raises(TaskTooLongError):
        encoder.encode_training(sequence, max_len=fixed - 1)


def test_training_does_not_drop_a_long_last_pair_first(longest_encoder):
    """The last pair is the longest; the earlier ones still go first."""
    encoder = longest_encoder
    sequence = [Pair([[1, 1]], [[2, 2]]), Pair([[3]], [[4]]), Pair(np.zeros((5, 5), dtype=np.uint8), [[5]])]
    fixed = HEADER_TOKENS + pair_tokens(sequence[-1])
    encoded = encoder.encode_training(sequence, max_len=fixed + 8)
    assert encoded.kept == (1, 2) and encoded.dropped == (0,)



# -- 6b. the default: the authors' rule, the last pair in the current order goes first -------------
def test_budget_drops_the_last_pairs_first_by_default(encoder, caplog):
    train = budget_pairs()  # lengths 7, 27, 15, 63, 9
    test_input = np.array([[1, 2, 3]], dtype=np.uint8)
    room = 10
    fixed = HEADER_TOKENS + query_tokens(test_input)
    # room for 7 + 27 + 15 + 63 = 112 tokens of pairs: only the last (and shortest but one) pair goes
    with caplog.at_level(logging.WARNING, logger="arc_kit.text.encoder"):
        encoded = encoder.encode_prompt(train, test_input, max_len=fixed + room + 112, answer_room=room)
    assert encoded.kept == (0, 1, 2, 3) and encoded.dropped == (4,)
    assert "[4]" in caplog.records[0].getMessage()
    # 7 + 27 + 15 + 9 = 58 would fit without the 5x5 pair, but the rule drops from the end: 7 + 27 + 15
    encoded = encoder.encode_prompt(train, test_input, max_len=fixed + room + 58, answer_room=room)
    assert encoded.kept == (0, 1, 2) and encoded.dropped == (3, 4)
    assert encoder.tokenizer.decode(encoded.ids) == TextFormat().task_text(train[:3], test_input)
    assert TaskEncoder(Vocabulary(), TextFormat(drop_order="longest")).encode_prompt(
        train, test_input, max_len=fixed + room + 58, answer_room=room).dropped == (3,)


def test_training_drops_the_last_example_before_the_test(encoder):
    """The last pair plays the test and stays; of the examples before it, the last goes first."""
    sequence = [Pair([[1, 1]], [[2, 2]]), Pair([[3]], [[4]]), Pair(np.zeros((5, 5), dtype=np.uint8), [[5]])]
    fixed = HEADER_TOKENS + pair_tokens(sequence[-1])
    encoded = encoder.encode_training(sequence, max_len=fixed + 9)  # room for pair 0 (9) or pair 1 (7)
    assert encoded.kept == (0, 2) and encoded.dropped == (1,)
    np.testing.assert_array_equal(encoded.loss_mask, reference_mask(encoded.ids.tolist(), True))


def test_drop_order_is_checked():
    with pytest.raises(ValueError, match="drop_order"):
        TextFormat(drop_order="shortest")
    assert TextFormat().drop_order == "last"


@HYPOTHESIS
@given(st.lists(pairs(max_side=5), min_size=1, max_size=8), grids(max_side=6),
       st.integers(0, 400), st.integers(0, 40))
def test_budget_keeps_the_longest_prefix_that_fits(train, test_input, spare, room):
    """The reference: drop the last train pair until the rest fits; what is kept is a prefix."""
    encoder = TaskEncoder(Vocabulary())
    fixed = HEADER_TOKENS + query_tokens(test_input)
    budget = fixed + room + spare
    expected = list(range(len(train)))
    while expected and fixed + sum(pair_tokens(train[i]) for i in expected) > budget - room:
        expected.pop()
    encoded = encoder.encode_prompt(train, test_input, max_len=budget, answer_room=room, log_drops=False)
    assert list(encoded.kept) == expected
    assert list(encoded.dropped) == list(range(len(expected), len(train)))
    assert encoder.tokenizer.decode(encoded.ids) == TextFormat().task_text(train[:len(expected)], test_input)

# -- 7. the Hugging Face adapter ---------------------------------------------------------------------
def _hf_tokenizer(symbols, pattern):
    """A tiny in-process WordLevel tokenizer over ``symbols`` (ids in reverse order), no download."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {symbol: index for index, symbol in enumerate(reversed(symbols))}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<pad>"))
    model.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="isolated")
    model.decoder = tokenizers.decoders.Fuse()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=model, bos_token="<bos>", eos_token="<eos>",
                                                pad_token="<pad>")


@pytest.fixture(scope="module")
def same_symbols_tokenizer():
    """The Vocabulary's 64 symbols, +/-=O one token: ids must equal the Vocabulary's up to a mapping."""
    return _hf_tokenizer(list(Vocabulary().symbols), r"\+/-=O|[\s\S]")


@pytest.fixture(scope="module")
def single_character_tokenizer():
    """Single characters only, like a shrunk pretrained vocabulary: +/-=O is five tokens."""
    symbols = [*"0123456789\nI+/-=O", "<bos>", "<eos>", "<pad>", *PREPROMPT]
    return _hf_tokenizer(symbols, r"[\s\S]")


def test_hugging_face_ids_equal_the_vocabulary_ids_up_to_the_mapping(same_symbols_tokenizer):
    adapter = HuggingFaceTokenizer(same_symbols_tokenizer)
    vocabulary = Vocabulary()
    assert adapter.vocab_size == 64
    assert adapter.eos_id == same_symbols_tokenizer.convert_tokens_to_ids("<eos>")
    mapping = np.array([same_symbols_tokenizer.convert_tokens_to_ids(s) for s in vocabulary.symbols])
    assert sorted(mapping.tolist()) == list(range(64)) and not np.array_equal(mapping, np.arange(64))
    ours, theirs = TaskEncoder(vocabulary), TaskEncoder(adapter)
    prompt, hf_prompt = ours.encode_prompt(TRAIN, TEST_INPUT), theirs.encode_prompt(TRAIN, TEST_INPUT)
    np.testing.assert_array_equal(mapping[prompt.ids], hf_prompt.ids)
    assert adapter.decode(hf_prompt.ids) == EXPECTED_PROMPT_TEXT
    sequence = [*TRAIN, Pair(TEST_INPUT, TEST_ANSWER)]
    for mask_first in (True, False):
        training = ours.encode_training(sequence, mask_first_output=mask_first)
        hf_training = theirs.encode_training(sequence, mask_first_output=mask_first)
        np.testing.assert_array_equal(mapping[training.ids], hf_training.ids)
        np.testing.assert_array_equal(training.loss_mask, hf_training.loss_mask)
    assert theirs.max_answer_len == 931
    np.testing.assert_array_equal(theirs.decode_answer(theirs.encode_answer(TEST_ANSWER)), TEST_ANSWER)


def test_hugging_face_single_characters(single_character_tokenizer):
    adapter = HuggingFaceTokenizer(single_character_tokenizer)
    encoder = TaskEncoder(adapter)
    assert len(encoder.output_prefix) == 6  # \n + / - = O
    prompt = encoder.encode_prompt(TRAIN, TEST_INPUT)
    assert adapter.decode(prompt.ids) == EXPECTED_PROMPT_TEXT
    assert len(prompt) == len(vocabulary_ids(EXPECTED_PROMPT_TEXT)) + 4 * 3  # three markers, 4 more tokens each
    training = encoder.encode_training([*TRAIN, Pair(TEST_INPUT, TEST_ANSWER)])
    assert adapter.decode(training.ids[training.loss_mask]) == "9\n6\n<eos>303\n<eos>"
    assert encoder.max_answer_len == 931
    np.testing.assert_array_equal(encoder.decode_answer(encoder.encode_answer(TEST_ANSWER)), TEST_ANSWER)
    np.testing.assert_array_equal(encoder.decode_answer(adapter.encode("1O\n2") + [adapter.eos_id]), [[1], [2]])
    strict = TaskEncoder(adapter, TextFormat(decoding="strict"))
    with pytest.raises(NotAGridError, match="non-digit 'O'"):
        strict.decode_answer(adapter.encode("1O\n") + [adapter.eos_id])


def test_encoder_needs_single_digit_tokens():
    class TwoTokenDigits:
        vocab_size, bos_id, eos_id, pad_id = 3, 0, 1, 2

        def encode(self, text):
            return [0, 1] if text == "7" else [2] * len(text)

        def decode(self, ids):
            return "?" * len(ids)

    with pytest.raises(ValueError, match="digit 7 as 2 tokens"):
        TaskEncoder(TwoTokenDigits())


def test_authors_decoding_through_a_single_character_tokenizer(single_character_tokenizer):
    """The recorded cases as a shrunk pretrained tokenizer writes them (specials by id, +/-=O as five tokens)."""
    adapter = HuggingFaceTokenizer(single_character_tokenizer)
    encoder = TaskEncoder(adapter)
    specials = {name: single_character_tokenizer.convert_tokens_to_ids(name) for name in ("<bos>", "<eos>", "<pad>")}
    for case in SPELLABLE:
        ids = []
        for index, piece in enumerate(case["text"].split("<")):
            if index:
                special, piece = piece.split(">", 1)
                ids.append(specials[f"<{special}>"])
            ids += adapter.encode(piece)
        expected = authors_expected(case)
        if expected is None:
            with pytest.raises(NotAGridError):
                encoder.decode_answer(ids)
        else:
            np.testing.assert_array_equal(encoder.decode_answer(ids), expected)
