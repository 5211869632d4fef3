"""Sudoku: the solver against brute force, unique generated puzzles, augmentations, files, scoring, the command."""

import itertools
import json

import numpy as np
import pytest

from arc_kit.data.tasks import Pair
from arc_kit.method.records import TaskRecord, TestResult
from arc_kit.method.experts import Candidate
from arc_kit.run.record_json import from_json, to_json
from arc_kit.sudoku import (
    SUDOKU_3M_CLUES,
    SudokuAugmentation,
    SudokuPool,
    clue_count,
    clue_histogram,
    clue_weights,
    count_solutions,
    generate_puzzle,
    generate_puzzles,
    grid_from_text,
    grid_text,
    is_valid_solution,
    keeps_clues,
    load_csv,
    parse_clues,
    score_answer,
    solve,
    write_csv,
)

SOLUTION = grid_from_text("534678912672195348198342567859761423426853791713924856961537284287419635345286179")
PUZZLE = grid_from_text("53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79")


def _brute_force_count(puzzle: np.ndarray) -> int:
    """Every filling of the empty cells checked as a whole grid (the slow reference)."""
    blanks = list(zip(*np.nonzero(puzzle == 0)))
    count = 0
    for digits in itertools.product(range(1, 10), repeat=len(blanks)):
        grid = puzzle.copy()
        for (row, column), digit in zip(blanks, digits):
            grid[row, column] = digit
        count += is_valid_solution(grid)
    return count


def test_solver_solves_a_classic_puzzle():
    assert count_solutions(PUZZLE, 2) == 1
    assert np.array_equal(solve(PUZZLE), SOLUTION)
    assert is_valid_solution(SOLUTION) and not is_valid_solution(PUZZLE)


@pytest.mark.parametrize("seed", range(6))
def test_solver_counts_match_brute_force(seed):
    """Blank 3 cells of a full grid and 3 more of another view of it: the solver's counts agree."""
    rng = np.random.default_rng(seed)
    puzzle = SudokuAugmentation.random(rng).apply_grid(SOLUTION).copy()
    puzzle.reshape(-1)[rng.choice(81, size=3, replace=False)] = 0
    assert count_solutions(puzzle, limit=100) == _brute_force_count(puzzle)


def test_solver_finds_two_solutions_and_none():
    ambiguous = SOLUTION.copy()
    ambiguous[0:2, :] = 0  # two rows of a band blanked: swapping them is a second solution
    assert count_solutions(ambiguous, 2) == 2
    clash = PUZZLE.copy()
    clash[0, 2] = 5  # two 5s in the first row
    assert count_solutions(clash) == 0 and solve(clash) is None


def test_generated_puzzles_are_unique_and_reproducible():
    pairs = generate_puzzles(6, seed=3, clues=(24, 40))
    for pair in pairs:
        assert count_solutions(pair.input, limit=3) == 1
        assert is_valid_solution(pair.output) and keeps_clues(pair.input, pair.output)
        assert clue_count(pair.input) >= 24
    again = generate_puzzles(2, seed=3, clues=(24, 40), start=4)
    assert again == pairs[4:]
    assert generate_puzzles(1, seed=4, clues=(24, 40)) != pairs[:1]


@pytest.mark.slow
def test_generator_reaches_the_low_twenties():
    """A target of 22 clues is reached by retrying removal orders (one pass gets there ~1 time in 27)."""
    pairs = [generate_puzzle(np.random.default_rng((9, i)), (22, 22)) for i in range(2)]
    assert [clue_count(pair.input) for pair in pairs] == [22, 22]
    assert all(count_solutions(pair.input, limit=3) == 1 and keeps_clues(pair.input, pair.output) for pair in pairs)
    # an unreachable target keeps the best pass: unique, minimal, above the target
    pair = generate_puzzle(np.random.default_rng(1), (17, 17), max_passes=2)
    assert count_solutions(pair.input, limit=3) == 1 and clue_count(pair.input) > 17
    blanked = [pair.input.copy() for _ in range(clue_count(pair.input))]
    for grid, (row, column) in zip(blanked, zip(*np.nonzero(pair.input))):
        grid[row, column] = 0
    assert all(count_solutions(grid, limit=2) == 2 for grid in blanked)  # no clue can go: minimal


@pytest.mark.slow
def test_default_clues_follow_sudoku_3m():
    weights = clue_weights(SUDOKU_3M_CLUES)
    assert min(weights) == 19 and max(weights) == 31 and max(weights, key=weights.get) == 24
    shares = {count: weight / sum(weights.values()) for count, weight in weights.items()}
    assert 0.95 < sum(shares[count] for count in range(22, 28)) < 1.0
    counts = list(clue_histogram(generate_puzzles(12, seed=5)).items())
    assert 21 <= counts[0][0] and counts[-1][0] <= 28 and len(counts) >= 3
    assert clue_weights((40, 42)) == {40: 1.0, 41: 1.0, 42: 1.0}
    with pytest.raises(ValueError, match="17-81"):
        generate_puzzle(np.random.default_rng(0), (10, 20))
    with pytest.raises(ValueError, match="17-81"):
        clue_weights((30, 20))
    assert parse_clues("19-31") == (19, 31) and parse_clues("25") == (25, 25)
    assert parse_clues("sudoku-3m") == dict(SUDOKU_3M_CLUES)
    with pytest.raises(ValueError, match="not a clue range"):
        parse_clues("easy")


def test_excluded_solutions_are_skipped():
    first, *rest = generate_puzzles(3, seed=6, clues=(30, 35))
    assert generate_puzzles(2, seed=6, clues=(30, 35), exclude=[first]) == rest


@pytest.mark.parametrize("seed", range(5))
def test_augmentations_keep_sudokus_and_invert(seed):
    rng = np.random.default_rng(seed)
    augmentation = SudokuAugmentation.random(rng)
    pair = augmentation.apply_pair(Pair(PUZZLE, SOLUTION))
    assert is_valid_solution(pair.output) and keeps_clues(pair.input, pair.output)
    assert count_solutions(pair.input) == 1 and clue_count(pair.input) == clue_count(PUZZLE)
    assert np.array_equal(augmentation.invert_grid(pair.output), SOLUTION)
    assert np.array_equal(augmentation.invert_grid(pair.input), PUZZLE)
    assert SudokuAugmentation.from_key(augmentation.key) == augmentation


def test_an_answer_that_is_no_9x9_grid_is_not_a_grid_to_the_solver():
    """An untrained model's answer (a 1x1 grid, say) is counted as no grid, not an error that ends the evaluation."""
    from arc_kit.text.format import NotAGridError

    with pytest.raises(NotAGridError, match="a Sudoku answer is 9x9, got 1x1"):
        SudokuAugmentation().invert_grid(np.array([[1]]))


def test_augmentation_parts_do_what_they_say():
    transposed = SudokuAugmentation(transpose=True)
    assert np.array_equal(transposed.apply_grid(SOLUTION), SOLUTION.T)
    digits = SudokuAugmentation(digits=(0, 2, 1, 3, 4, 5, 6, 7, 8, 9))
    swapped = digits.apply_grid(PUZZLE)
    assert np.array_equal(swapped == 0, PUZZLE == 0) and np.array_equal(swapped == 2, PUZZLE == 1)
    bands = SudokuAugmentation(rows=(3, 4, 5, 0, 1, 2, 6, 7, 8), columns=(0, 2, 1, 3, 4, 5, 6, 7, 8))
    moved = bands.apply_grid(SOLUTION)
    assert np.array_equal(moved[0], SOLUTION[3][[0, 2, 1, 3, 4, 5, 6, 7, 8]])
    assert bands != SudokuAugmentation()
    for bad in [dict(digits=(1, 0, 2, 3, 4, 5, 6, 7, 8, 9)), dict(rows=(3, 1, 2, 0, 4, 5, 6, 7, 8)),
                dict(columns=(0, 1, 2, 3, 4, 5, 6, 7, 7))]:
        with pytest.raises(ValueError):
            SudokuAugmentation(**bad)
    with pytest.raises(ValueError, match="not a Sudoku augmentation key"):
        SudokuAugmentation.from_key("s1-c0123456789")
    keys = [a.key for a in SudokuAugmentation.inference_set(np.random.default_rng(0), 8)]
    assert keys[0] == SudokuAugmentation().key and len(set(keys)) == 8


def test_pool_draws_valid_views_reproducibly():
    pool = SudokuPool([Pair(PUZZLE, SOLUTION)], copies=50, seed=1)
    assert len(pool) == 50
    views = [pool[i] for i in range(5)]
    assert all(is_valid_solution(view.output) and keeps_clues(view.input, view.output) for view in views)
    assert pool[3] == SudokuPool([Pair(PUZZLE, SOLUTION)], copies=50, seed=1)[3]
    assert pool[3] != pool[4]


def test_csv_round_trip_and_the_sudoku_3m_layout(tmp_path):
    pairs = generate_puzzles(3, seed=0, clues=(30, 40))
    path = write_csv(tmp_path / "set.csv", pairs)
    assert load_csv(path) == pairs and load_csv(path, limit=2) == pairs[:2]
    radcliffe = tmp_path / "sudoku-3m.csv"  # id,puzzle,solution,clues,difficulty with '.' for a blank
    radcliffe.write_text("id,puzzle,solution,clues,difficulty\n"
                         f"1,{grid_text(PUZZLE).replace('0', '.')},{grid_text(SOLUTION)},30,1.2\n")
    assert load_csv(radcliffe) == [Pair(PUZZLE, SOLUTION)]
    wrong = tmp_path / "wrong.csv"
    wrong.write_text(f"puzzle,solution\n{grid_text(PUZZLE)},{grid_text(SOLUTION[::-1])}\n")
    with pytest.raises(ValueError, match="line 2"):
        load_csv(wrong)


def test_a_solved_puzzle_scores_one_and_a_wrong_one_zero():
    assert score_answer(PUZZLE, SOLUTION) == 1.0
    wrong = SOLUTION.copy()
    wrong[0, 2], wrong[0, 3] = wrong[0, 3], wrong[0, 2]  # two cells swapped: rows fine, columns not
    assert score_answer(PUZZLE, wrong) == 0.0
    relabelled = SudokuAugmentation(digits=(0, 2, 1, 3, 4, 5, 6, 7, 8, 9)).apply_grid(SOLUTION)
    assert is_valid_solution(relabelled) and score_answer(PUZZLE, relabelled) == 0.0  # valid, breaks the clues
    assert score_answer(PUZZLE, None) == 0.0 and score_answer(PUZZLE, SOLUTION[:8]) == 0.0


def test_metrics_and_curve_from_records():
    from arc_kit.sudoku.experiment import puzzle_metrics, sudoku_curve

    wrong = SudokuAugmentation(digits=(0, 2, 1, 3, 4, 5, 6, 7, 8, 9)).apply_grid(SOLUTION)
    # the wrong grid is more probable to generate, the right one wins the product of experts
    right = Candidate(SOLUTION, {"a": 3.0}, [1.0, 1.0])
    other = Candidate(wrong, {"a": 0.5}, [0.4, 5.0])
    record = TaskRecord("p", [TestResult([SOLUTION], [other, right], ["a"], ["x", "y"])])
    metrics = puzzle_metrics({"p": record}, {"p": Pair(PUZZLE, SOLUTION)})
    assert metrics["top1_accuracy_poe"] == 1.0 and metrics["top1_accuracy_generation"] == 0.0
    assert metrics["solution_found"] == 1.0 and metrics["answers_valid_sudoku"] == 1.0
    assert "greedy_blank_cells_right" not in metrics  # the diagnostic only where every record has it
    curve = sudoku_curve({"p": record}, {"p": Pair(PUZZLE, SOLUTION)}, [0.01, 0.1])
    assert curve["found"].tolist() == [1.0, 0.0]  # exp(-3) = 5% < 10%
    assert curve["selected_poe"].tolist() == [1.0, 0.0] and curve["selected_generation"].tolist() == [0.0, 0.0]


def test_the_greedy_diagnostic_counts_empty_cells_right():
    from arc_kit.sudoku.experiment import blank_cells_right, puzzle_metrics

    greedy = SOLUTION.copy()
    row, (first, second) = 1, [column for column in range(9) if PUZZLE[1, column] == 0][:2]
    greedy[row, first], greedy[row, second] = greedy[row, second], greedy[row, first]  # two empty cells wrong
    blanks = [(r, c) for r in range(9) for c in range(9) if PUZZLE[r, c] == 0]
    expected = sum(greedy[r, c] == SOLUTION[r, c] for r, c in blanks) / len(blanks)  # cell by cell
    assert blank_cells_right(PUZZLE, SOLUTION, greedy) == pytest.approx(expected) and expected < 1
    assert blank_cells_right(PUZZLE, SOLUTION, SOLUTION) == 1.0
    assert blank_cells_right(PUZZLE, SOLUTION, None) == 0.0 == blank_cells_right(PUZZLE, SOLUTION, SOLUTION[:8])
    record = TaskRecord("p", [TestResult([], [], ["a"], [])], extra={"greedy_answer": greedy.tolist()})
    again = from_json(TaskRecord, json.loads(json.dumps(to_json(record))))  # as read back from records.jsonl
    metrics = puzzle_metrics({"p": again}, {"p": Pair(PUZZLE, SOLUTION)})
    assert metrics["greedy_blank_cells_right"] == round(expected, 4)
    assert metrics["greedy_solved"] == 0.0 and metrics["greedy_valid_sudoku"] == 0.0
    assert metrics["answered"] == 0.0 and metrics["top1_accuracy_poe"] == 0.0


def test_one_puzzle_per_training_sequence():
    """Through the trainer's own dataset (``pretrain`` draws from it), whatever the kit's default sampler."""
    from arc_kit.model.training_data import SequenceDataset
    from arc_kit.settings import TrainingSettings, sudoku_training
    from arc_kit.text import TaskEncoder, Vocabulary

    encoder = TaskEncoder(Vocabulary())
    pool = SudokuPool([Pair(PUZZLE, SOLUTION), Pair(SOLUTION, SOLUTION)], copies=10)
    settings = sudoku_training(TrainingSettings())  # what ``experiment.train`` trains with
    dataset = SequenceDataset({"sudoku": pool}, encoder, settings.sequences, length=6,
                              mask_first_output=settings.lora.mask_first_output)
    for index in range(len(dataset)):
        _, encoded = dataset.sequence(index)
        assert encoded.loss_mask.sum() == 81 + 8 + 1 + 1  # the solution's cells, row ends, end of example, eos
        text = encoder.text(encoded.ids)
        assert text.count("I") == 1 and len(encoded) < 256


@pytest.mark.processes
@pytest.mark.slow
def test_the_whole_command_on_a_micro_model(tmp_path):
    from arc_kit.cli import main

    puzzles = tmp_path / "puzzles.csv"
    assert main(["sudoku", "generate", "--count", "4", "--seed", "5", "--clues", "45-50", "--out", str(puzzles)]) == 0
    assert len(load_csv(puzzles)) == 4
    model = tmp_path / "model"
    assert main(["sudoku", "train", "--model", "micro", "--puzzles", str(puzzles), "--out", str(model),
                 "--steps", "2", "--batch-size", "2", "--accumulation", "1", "--device", "cpu"]) == 0
    out = tmp_path / "eval"
    assert main(["sudoku", "evaluate", "--model", str(model), "--puzzles", str(puzzles), "--limit", "2",
                 "--out", str(out), "--threshold", "0.3", "--augmentations", "2", "--scoring-augmentations", "2",
                 "--max-forward-calls", "100"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert metrics["puzzles"] == 2 and 0.0 <= metrics["top1_accuracy_poe"] <= metrics["solution_found"] + 1e-9
    assert 0.0 <= metrics["greedy_blank_cells_right"] <= 1.0
    assert (out / "threshold_curve.png").stat().st_size > 0
    first = (out / "records.jsonl").read_text().splitlines()
    assert len(first) == 2
    same = ["--threshold", "0.3", "--augmentations", "2", "--scoring-augmentations", "2", "--max-forward-calls", "100"]
    assert main(["sudoku", "evaluate", "--model", str(model), "--puzzles", str(puzzles), "--limit", "3",
                 "--out", str(out), *same]) == 0  # resumes: the two done are kept, one more is solved
    again = (out / "records.jsonl").read_text().splitlines()
    assert again[:2] == first and len(again) == 3
    assert json.loads((out / "metrics.json").read_text())["metrics"]["puzzles"] == 3
    assert main(["sudoku", "evaluate", "--model", str(model), "--puzzles", str(puzzles), "--out", str(out),
                 "--threshold", "0.2"]) != 0  # other settings: refused, not mixed in


def test_evaluate_on_the_quickest_model_writes_a_record_and_the_metrics(fallback_model, tmp_path):
    """The quick loop's run of ``sudoku evaluate`` (the whole command, training and resuming, is the slow test above):
    a model that writes <eos> at once answers nothing, so the search, scoring and metrics take a moment."""
    from arc_kit.cli import main

    puzzles = tmp_path / "puzzles.csv"
    assert main(["sudoku", "generate", "--count", "1", "--seed", "5", "--clues", "45-50", "--out", str(puzzles)]) == 0
    out = tmp_path / "eval"
    assert main(["sudoku", "evaluate", "--model", str(fallback_model), "--puzzles", str(puzzles), "--out", str(out),
                 "--threshold", "0.3", "--augmentations", "1", "--scoring-augmentations", "1"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())["metrics"]
    assert metrics["puzzles"] == 1 and metrics["answered"] == 0.0 and metrics["top1_accuracy_poe"] == 0.0
    assert len((out / "records.jsonl").read_text().splitlines()) == 1
    assert (out / "threshold_curve.png").stat().st_size > 0

def test_evaluation_follows_the_solver_defaults():
    from dataclasses import fields

    from arc_kit.settings import SolveSettings, SudokuEvalSettings

    solve = SudokuEvalSettings().replace(threshold=0.05).solve
    default = SolveSettings()
    assert solve.sampler.threshold == 0.05 and solve.sampler.kind == "dfs"
    assert not solve.test_time_training and solve.inference_augmentations == solve.scoring_augmentations == 8
    set_here = {"sampler", "inference_augmentations", "scoring_augmentations", "test_time_training", "seed",
                "max_len"}
    for item in fields(SolveSettings):
        if item.name not in set_here:
            assert getattr(solve, item.name) == getattr(default, item.name), item.name
    with pytest.raises(ValueError, match="threshold"):
        SudokuEvalSettings().replace(threshold=0.0)


def test_the_sudoku_evaluation_holds_the_solvers_settings_and_mirrors_none():
    """Its options are the solver's own fields (their flags, ranges, help and checks), with Sudoku's defaults."""
    from dataclasses import fields

    from arc_kit.settings import SUDOKU_SOLVING, SolveSettings, SudokuEvalSettings, options

    solver = {option.path: option for option in options(SolveSettings)}
    sudoku = {option.path: option for option in options(SudokuEvalSettings)}
    assert set(sudoku) == {("solve", "sampler", "threshold"), ("solve", "inference_augmentations"),
                           ("solve", "scoring_augmentations"), ("solve", "sampler", "max_forward_calls"),
                           ("solve", "seed"), ("greedy_check",)}
    for path, option in sudoku.items():
        if path[0] == "solve":
            same = solver[path[1:]]
            assert (option.flag, option.bounds, option.help) == (same.flag, same.bounds, same.help), path
    assert [item.name for item in fields(SudokuEvalSettings)] == ["solve", "greedy_check"]
    defaults = SudokuEvalSettings()
    assert defaults.solve == SUDOKU_SOLVING and SUDOKU_SOLVING.inference_augmentations == 8
    assert SolveSettings().inference_augmentations == 16
    for field_name, bad in (("max_forward_calls", 0), ("scoring_augmentations", -1), ("seed", -1)):
        with pytest.raises(ValueError, match=field_name):
            defaults.replace(**{field_name: bad})
