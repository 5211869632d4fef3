"""Augmentations: apply and invert, the group of symmetries, tasks, keys and seeded sampling.

Symmetries are checked against hand-written numpy references (``np.rot90``, ``.T``, flips), not
against ``apply_symmetry``'s own tables.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from arc_kit.data.augmentation import (
    IDENTITY_COLOURS,
    SYMMETRY_INVERSE,
    SYMMETRY_NAMES,
    Augmentation,
    apply_symmetry,
)
from arc_kit.data.grids import MAX_SIDE
from arc_kit.data.tasks import Pair, Task

HYPOTHESIS = settings(max_examples=100, deadline=None)


@st.composite
def grids(draw, min_side=1, max_side=MAX_SIDE):
    """Grids of any size, either dense random (numpy) or hypothesis-built (shrinkable)."""
    height = draw(st.integers(min_side, max_side))
    width = draw(st.integers(min_side, max_side))
    if draw(st.booleans()):
        seed = draw(st.integers(0, 2**32 - 1))
        return np.random.default_rng(seed).integers(0, 10, (height, width)).astype(np.uint8)
    return draw(arrays(np.uint8, (height, width), elements=st.integers(0, 9)))


colour_permutations = st.permutations(list(range(10))).map(tuple)
background_permutations = st.permutations(list(range(1, 10))).map(lambda rest: (0, *rest))
orders = st.integers(1, 8).flatmap(lambda n: st.permutations(list(range(n))).map(tuple))
augmentations = st.builds(Augmentation, st.integers(0, 7), colour_permutations, st.none() | orders)


def generic_grid(height=3, width=5):
    """A grid with all cells distinct, so no symmetry but the identity fixes it (when both sides are >= 2)."""
    return np.arange(height * width).reshape(height, width)


def reference_symmetry(grid, symmetry):
    """The 8 symmetries written out by hand: transpose (s >= 4), then k quarter turns counter-clockwise."""
    grid = np.asarray(grid)
    base = grid.T if symmetry >= 4 else grid
    turns = symmetry % 4
    if turns == 0:
        return base
    if turns == 1:
        return base[:, ::-1].T
    if turns == 2:
        return base[::-1, ::-1]
    return base[::-1, :].T


# -- 8. apply then invert ----------------------------------------------------------------------------
@HYPOTHESIS
@given(grids(), st.integers(0, 7), colour_permutations)
def test_apply_then_invert(grid, symmetry, colours):
    augmentation = Augmentation(symmetry, colours)
    augmented = augmentation.apply_grid(grid)
    assert augmented.dtype == np.uint8 and not augmented.flags.writeable
    expected = reference_symmetry(np.array(colours)[grid], symmetry)
    np.testing.assert_array_equal(augmented, expected)
    back = augmentation.invert_grid(augmented)
    assert back.shape == grid.shape
    np.testing.assert_array_equal(back, grid)


@HYPOTHESIS
@given(grids(), st.integers(0, 7), background_permutations)
def test_apply_then_invert_keeping_the_background(grid, symmetry, colours):
    augmentation = Augmentation(symmetry, colours)
    augmented = augmentation.apply_grid(grid)
    np.testing.assert_array_equal(augmented == 0, reference_symmetry(grid == 0, symmetry))
    np.testing.assert_array_equal(augmentation.invert_grid(augmented), grid)


@HYPOTHESIS
@given(grids(), st.integers(0, 2**32 - 1), st.booleans())
def test_apply_then_invert_random(grid, seed, keep_background):
    augmentation = Augmentation.random(np.random.default_rng(seed), keep_background=keep_background)
    np.testing.assert_array_equal(augmentation.invert_grid(augmentation.apply_grid(grid)), grid)
    # inverting first and applying after is also the identity
    np.testing.assert_array_equal(augmentation.apply_grid(augmentation.invert_grid(grid)), grid)


def test_apply_then_invert_every_size():
    rng = np.random.default_rng(1)
    for height in range(1, MAX_SIDE + 1):
        for width in range(1, MAX_SIDE + 1):
            grid = rng.integers(0, 10, (height, width)).astype(np.uint8)
            for symmetry in range(8):
                augmentation = Augmentation.random(rng, symmetry=symmetry, keep_background=bool(width % 2))
                augmented = augmentation.apply_grid(grid)
                assert augmented.shape == ((width, height) if symmetry % 2 != (symmetry >= 4) else (height, width))
                assert np.array_equal(augmentation.invert_grid(augmented), grid)


def test_colour_permutation_maps_each_colour():
    augmentation = Augmentation(0, (3, 0, 1, 2, 4, 5, 6, 7, 9, 8))
    np.testing.assert_array_equal(augmentation.apply_grid([[0, 1, 2, 3, 8, 9]]), [[3, 0, 1, 2, 9, 8]])
    np.testing.assert_array_equal(augmentation.invert_grid([[3, 0, 1, 2, 9, 8]]), [[0, 1, 2, 3, 8, 9]])


def test_symmetries_by_hand():
    grid = [[1, 2, 3], [4, 5, 6]]
    expected = {
        0: [[1, 2, 3], [4, 5, 6]],
        1: [[3, 6], [2, 5], [1, 4]],  # a quarter turn counter-clockwise
        2: [[6, 5, 4], [3, 2, 1]],
        3: [[4, 1], [5, 2], [6, 3]],
        4: [[1, 4], [2, 5], [3, 6]],  # transpose
        5: [[4, 5, 6], [1, 2, 3]],  # transpose, then a quarter turn: a vertical flip
        6: [[6, 3], [5, 2], [4, 1]],  # the anti-diagonal transpose
        7: [[3, 2, 1], [6, 5, 4]],  # a horizontal flip
    }
    for symmetry, image in expected.items():
        np.testing.assert_array_equal(apply_symmetry(grid, symmetry), image, err_msg=SYMMETRY_NAMES[symmetry])
        np.testing.assert_array_equal(Augmentation(symmetry).apply_grid(grid), image)


@pytest.mark.parametrize("symmetry", [-1, 8])
def test_symmetry_out_of_range(symmetry):
    with pytest.raises(ValueError, match="symmetry must be 0-7"):
        apply_symmetry([[1]], symmetry)
    with pytest.raises(ValueError, match="symmetry must be 0-7"):
        Augmentation(symmetry)


# -- 9. the group of symmetries ------------------------------------------------------------------------
def composition_table() -> tuple[tuple[int, ...], ...]:
    """THEN[a][b]: the symmetry that is a, then b, found from the action on a grid with no symmetry of its own."""
    probe = np.arange(6).reshape(2, 3)
    images = [apply_symmetry(probe, s) for s in range(8)]
    return tuple(tuple(next(s for s in range(8) if np.array_equal(images[s], apply_symmetry(images[first], second)))
                       for second in range(8)) for first in range(8))


SYMMETRY_THEN = composition_table()


@HYPOTHESIS
@given(grids(min_side=2), st.integers(0, 7), st.integers(0, 7))
def test_symmetry_composition_is_closed(grid, first, second):
    composed = SYMMETRY_THEN[first][second]
    assert 0 <= composed < 8
    np.testing.assert_array_equal(apply_symmetry(apply_symmetry(grid, first), second),
                                  apply_symmetry(grid, composed))
    np.testing.assert_array_equal(reference_symmetry(reference_symmetry(grid, first), second),
                                  reference_symmetry(grid, composed))


def test_symmetry_group_tables():
    grid = generic_grid(3, 5)  # not square, so shapes tell transposes apart too
    for symmetry in range(8):
        np.testing.assert_array_equal(apply_symmetry(grid, symmetry), reference_symmetry(grid, symmetry))
        inverse = SYMMETRY_INVERSE[symmetry]
        np.testing.assert_array_equal(apply_symmetry(apply_symmetry(grid, symmetry), inverse), grid)
        np.testing.assert_array_equal(apply_symmetry(apply_symmetry(grid, inverse), symmetry), grid)
        assert SYMMETRY_THEN[symmetry][inverse] == 0 == SYMMETRY_THEN[inverse][symmetry]
        assert SYMMETRY_THEN[0][symmetry] == symmetry == SYMMETRY_THEN[symmetry][0]
        np.testing.assert_array_equal(apply_symmetry(grid, 0), grid)
    assert SYMMETRY_INVERSE == (0, 3, 2, 1, 4, 5, 6, 7)
    # every row and column of the composition table is a permutation (a Latin square)
    for row in SYMMETRY_THEN:
        assert sorted(row) == list(range(8))
    for column in zip(*SYMMETRY_THEN):
        assert sorted(column) == list(range(8))
    # associativity
    for a in range(8):
        for b in range(8):
            for c in range(8):
                assert SYMMETRY_THEN[SYMMETRY_THEN[a][b]][c] == SYMMETRY_THEN[a][SYMMETRY_THEN[b][c]]
    # rotations compose by adding quarter turns; the group is not commutative
    for a in range(4):
        for b in range(4):
            assert SYMMETRY_THEN[a][b] == (a + b) % 4
    assert SYMMETRY_THEN[1][4] != SYMMETRY_THEN[4][1]


@pytest.mark.parametrize("shape", [(3, 5), (4, 4), (2, 2), (2, 30)])
def test_the_8_symmetries_are_distinct(shape):
    grid = generic_grid(*shape)
    images = {(image.shape, image.tobytes()) for image in (np.ascontiguousarray(apply_symmetry(grid, s))
                                                           for s in range(8))}
    assert len(images) == 8


def test_symmetry_names():
    assert len(SYMMETRY_NAMES) == 8 == len(set(SYMMETRY_NAMES))
    assert SYMMETRY_NAMES[0] == "identity"


# -- 10. tasks -----------------------------------------------------------------------------------------
def make_task(train_count=3):
    rng = np.random.default_rng(7)
    train = [Pair(rng.integers(0, 10, (2 + i, 3)), rng.integers(0, 10, (1, 2 + i))) for i in range(train_count)]
    test = [Pair(rng.integers(0, 10, (4, 2))), Pair(rng.integers(0, 10, (2, 5)), rng.integers(0, 10, (3, 1)))]
    return Task("task0", tuple(train), tuple(test))


def test_apply_task_transforms_every_grid_and_reorders_train():
    task = make_task(3)
    augmentation = Augmentation(5, (9, 8, 7, 6, 5, 4, 3, 2, 1, 0), (2, 0, 1))
    augmented = augmentation.apply(task)
    assert augmented.id == task.id
    assert len(augmented.train) == 3 and len(augmented.test) == 2

    def expected(grid):
        return reference_symmetry(9 - grid.astype(int), 5)

    for position, original in enumerate((2, 0, 1)):
        np.testing.assert_array_equal(augmented.train[position].input, expected(task.train[original].input))
        np.testing.assert_array_equal(augmented.train[position].output, expected(task.train[original].output))
    for position in range(2):  # test pairs keep their order
        np.testing.assert_array_equal(augmented.test[position].input, expected(task.test[position].input))
    assert augmented.test[0].output is None
    np.testing.assert_array_equal(augmented.test[1].output, expected(task.test[1].output))


def test_apply_task_without_order_keeps_the_order():
    task = make_task(3)
    augmented = Augmentation(2).apply(task)
    for position in range(3):
        np.testing.assert_array_equal(augmented.train[position].input, np.rot90(task.train[position].input, 2))


def test_identity_leaves_a_task_alone():
    task = make_task(3)
    assert Augmentation().apply(task) == task
    assert Augmentation(0, IDENTITY_COLOURS, (0, 1, 2)).apply(task) == task
    assert Augmentation(0, IDENTITY_COLOURS, (1, 0, 2)).apply(task) != task


@HYPOTHESIS
@given(st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_apply_task_then_invert_every_grid(train_count, seed):
    task = make_task(train_count)
    augmentation = Augmentation.random(np.random.default_rng(seed), train_count)
    augmented = augmentation.apply(task)
    for position, original in enumerate(augmentation.order):
        np.testing.assert_array_equal(augmentation.invert_grid(augmented.train[position].input),
                                      task.train[original].input)
        np.testing.assert_array_equal(augmentation.invert_grid(augmented.train[position].output),
                                      task.train[original].output)
    for augmented_pair, pair in zip(augmented.test, task.test):
        np.testing.assert_array_equal(augmentation.invert_grid(augmented_pair.input), pair.input)


@pytest.mark.parametrize("order", [(0, 1), (0, 1, 2, 3), (0,)])
def test_apply_task_order_of_the_wrong_length(order):
    with pytest.raises(ValueError, match="orders"):
        Augmentation(0, IDENTITY_COLOURS, order).apply(make_task(3))
    with pytest.raises(ValueError, match="orders"):
        Augmentation(0, IDENTITY_COLOURS, order).apply_pairs(make_task(3).train)


@pytest.mark.parametrize("order", [(0, 0, 1), (1, 2, 3), (-1, 0)])
def test_order_must_be_a_permutation(order):
    with pytest.raises(ValueError, match="order must be a permutation"):
        Augmentation(0, IDENTITY_COLOURS, order)


@pytest.mark.parametrize("colours", [(0,) * 10, tuple(range(9)), tuple(range(11)), (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)])
def test_colours_must_be_a_permutation(colours):
    with pytest.raises(ValueError, match="colours must be a permutation"):
        Augmentation(0, colours)


# -- 11. keys, equality and hashing -------------------------------------------------------------------
@HYPOTHESIS
@given(augmentations)
def test_key_round_trip(augmentation):
    key = augmentation.key
    parsed = Augmentation.from_key(key)
    assert parsed == augmentation and hash(parsed) == hash(augmentation)
    assert parsed.key == key and str(parsed) == key
    assert parsed.symmetry == augmentation.symmetry and parsed.colours == augmentation.colours
    assert parsed.order == augmentation.order


@HYPOTHESIS
@given(st.integers(0, 2**32 - 1), st.integers(0, 10), st.booleans(), st.booleans())
def test_key_round_trip_random(seed, train_count, keep_background, ordered):
    """Random augmentations of tasks of any size, 0 train pairs included (an empty order), or with no order."""
    augmentation = Augmentation.random(np.random.default_rng(seed), train_count if ordered else None,
                                       keep_background=keep_background)
    assert Augmentation.from_key(augmentation.key) == augmentation


def test_key_examples():
    augmentation = Augmentation(5, (3, 0, 1, 2, 4, 5, 6, 7, 8, 9), (2, 0, 1))
    assert augmentation.key == "s5-c3012456789-o2,0,1"
    assert Augmentation.from_key("s5-c3012456789-o2,0,1") == augmentation
    assert Augmentation(1).key == "s1-c0123456789"
    assert Augmentation.from_key("s1-c0123456789") == Augmentation(1)
    assert Augmentation.from_key("s0-c0123456789-o10,9,8,7,6,5,4,3,2,1,0").order == tuple(range(10, -1, -1))
    assert Augmentation.from_key(" s0-c0123456789 \n") == Augmentation()  # surrounding whitespace is ignored
    assert Augmentation(0, IDENTITY_COLOURS, ()).key == "s0-c0123456789-o"  # an empty order (no train pairs)
    assert Augmentation.from_key("s0-c0123456789-o").order == ()


MALFORMED_KEYS = [
    "", "s", "s8-c0123456789", "s-1-c0123456789", "x0-c0123456789", "S0-c0123456789", "s0c0123456789",
    "s0-c012345678", "s0-c01234567890", "s0-c0123456788", "s0-c012345678a", "s0-c0123456789-",
    "s0-c0123456789-o0,", "s0-c0123456789-o,0", "s0-c0123456789-o0,,1", "s0-c0123456789-o0;1",
    "s0-c0123456789-o0,2", "s0-c0123456789-o1", "s0-c0123456789-o0,0", "s0-c0123456789-x0",
    "s0-c0123456789-o0-o0", "s0 -c0123456789", "s0-c0123456789\nx", "identity", "s١-c0123456789",
]


@pytest.mark.parametrize("key", MALFORMED_KEYS)
def test_malformed_keys(key):
    with pytest.raises(ValueError):
        Augmentation.from_key(key)


def test_equal_by_value_and_hashable():
    first = Augmentation(3, [2, 1, 0, 3, 4, 5, 6, 7, 8, 9], [1, 0])
    second = Augmentation(np.int64(3), tuple(np.array([2, 1, 0, 3, 4, 5, 6, 7, 8, 9])), (1, 0))
    assert first == second and hash(first) == hash(second)
    assert first.colours == (2, 1, 0, 3, 4, 5, 6, 7, 8, 9) and first.order == (1, 0)
    assert type(first.symmetry) is int and all(type(c) is int for c in second.colours)
    assert len({first, second, Augmentation(3, first.colours), Augmentation(3, first.colours, None)}) == 2
    assert first != Augmentation(3, first.colours, (0, 1))
    assert first != Augmentation(2, first.colours, (1, 0))
    assert {first: "value"}[second] == "value"
    with pytest.raises(AttributeError):
        first.symmetry = 4


def test_repr():
    assert repr(Augmentation(4, order=(1, 0))) == "Augmentation(transpose, colours=0123456789, order=[1, 0])"


# -- 12. seeded sampling ------------------------------------------------------------------------------
def test_same_seed_same_augmentations():
    for seed in range(5):
        first = Augmentation.inference_set(np.random.default_rng(seed), 4)
        second = Augmentation.inference_set(np.random.default_rng(seed), 4)
        assert first == second
        assert [Augmentation.random(np.random.default_rng(seed), 3) for _ in range(2)] == \
            [Augmentation.random(np.random.default_rng(seed), 3) for _ in range(2)]
    assert Augmentation.inference_set(np.random.default_rng(0), 4) != Augmentation.inference_set(
        np.random.default_rng(1), 4)


def test_sampling_does_not_touch_the_global_seed():
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    Augmentation.inference_set(np.random.default_rng(0), 5)
    Augmentation.random(np.random.default_rng(0), 5, keep_background=True)
    assert np.random.random() == expected


@pytest.mark.parametrize("keep_background", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_inference_set(seed, keep_background):
    augmentations_ = Augmentation.inference_set(np.random.default_rng(seed), 5, keep_background=keep_background)
    assert len(augmentations_) == 16
    assert sorted(a.symmetry for a in augmentations_) == [s for s in range(8) for _ in range(2)]
    assert len({a.colours for a in augmentations_}) == 16  # fresh colours every time
    assert len({a.order for a in augmentations_}) > 1  # fresh orders too
    for augmentation in augmentations_:
        assert sorted(augmentation.colours) == list(range(10))
        assert sorted(augmentation.order) == list(range(5))
        if keep_background:
            assert augmentation.colours[0] == 0
    assert len(set(augmentations_)) == 16


def test_inference_set_count_and_no_order():
    augmentations_ = Augmentation.inference_set(np.random.default_rng(0), count=24)
    assert [a.symmetry for a in augmentations_] == [i % 8 for i in range(24)]
    assert all(a.order is None for a in augmentations_)


def test_random_covers_the_choices():
    rng = np.random.default_rng(0)
    sampled = [Augmentation.random(rng, 3) for _ in range(400)]
    assert {a.symmetry for a in sampled} == set(range(8))
    assert {a.colours[0] for a in sampled} == set(range(10))  # the background moves too by default
    assert len({a.order for a in sampled}) == 6
    assert Augmentation.random(rng, 3, symmetry=6).symmetry == 6
    assert Augmentation.random(rng, None).order is None


def test_keep_background_keeps_colour_zero():
    rng = np.random.default_rng(0)
    sampled = [Augmentation.random(rng, keep_background=True) for _ in range(200)]
    assert all(a.colours[0] == 0 for a in sampled)
    assert {a.colours[1] for a in sampled} == set(range(1, 10))
    grid = np.array([[0, 1, 2], [3, 0, 9]], dtype=np.uint8)
    for augmentation in sampled[:20]:
        np.testing.assert_array_equal(augmentation.apply_grid(grid) == 0,
                                      apply_symmetry(grid == 0, augmentation.symmetry))
