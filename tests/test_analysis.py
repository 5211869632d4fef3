"""analysis.py: ranks of the right answer and threshold curves, against slow references and real DFS runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arc_kit.experiments.analysis import rank_table, threshold_curve
from arc_kit.method.records import TaskRecord, TestResult
from arc_kit.method.experts import AGGREGATIONS, Candidate
from arc_kit.method.solver import Solver
from arc_kit.model.loading import load_model
from arc_kit.settings import SamplerSettings, SolveSettings


def candidate(value: int, generation: float, scoring=()) -> Candidate:
    """A 1x1 grid holding ``value``, found with NLL ``generation`` under one augmentation."""
    return Candidate(np.array([[value]]), {"id": generation}, list(scoring))


def record(task_id: str, *tests: list[Candidate]) -> TaskRecord:
    return TaskRecord(task_id, [TestResult([], list(candidates), ["id"], []) for candidates in tests])


def reference_rank(values, right) -> int:
    """1 + the others at least as good as the right one (ties count against it)."""
    return 1 + sum(1 for index, value in enumerate(values) if index != right and value <= values[right])


def test_rank_table_by_hand():
    records = {"t": record("t", [candidate(1, 0.5, [0.9, 0.9]), candidate(2, 1.0, [0.1, 0.2]),
                                 candidate(3, 0.2, [2.0, 2.0])],
                           [candidate(4, 0.1), candidate(5, 0.3)],  # no scoring: no PoE rank
                           [candidate(6, 0.1)])}  # the right answer was never found: no row
    table = rank_table(records, {"t": [[[2]], [[5]], [[7]]]})
    assert table[["test_index", "candidates", "rank_generation"]].values.tolist() == [[0, 3, 3], [1, 2, 2]]
    assert table["rank_poe"].iloc[0] == 1 and math.isnan(table["rank_poe"].iloc[1])


def test_rank_table_ties_count_against_the_right_answer():
    records = {"t": record("t", [candidate(1, 0.5, [1.0]), candidate(2, 0.5, [1.0]), candidate(3, 0.7, [1.0])])}
    table = rank_table(records, {"t": [[[1]]]})
    assert table["rank_generation"].tolist() == [2] and table["rank_poe"].tolist() == [3]


def random_records(seed: int, tasks: int = 6):
    """Records with random NLLs and answers (sometimes not among the candidates), and those answers."""
    rng = np.random.default_rng(seed)
    records, answers = {}, {}
    for task in range(tasks):
        tests, task_answers = [], []
        for _ in range(int(rng.integers(1, 3))):
            values = rng.permutation(10)[:int(rng.integers(1, 7))]
            scored = rng.random() < 0.8
            tests.append([candidate(int(value), float(rng.exponential(2.0)),
                                    rng.exponential(1.0, size=3).round(1).tolist() if scored else ())
                          for value in values])
            task_answers.append([[int(rng.integers(0, 10))]])
        records[f"task{task}"] = record(f"task{task}", *tests)
        answers[f"task{task}"] = task_answers
    return records, answers


@pytest.mark.parametrize("seed", range(5))
def test_rank_table_matches_a_slow_reference(seed):
    records, answers = random_records(seed)
    expected = []
    for task_id, task_record in records.items():
        for test_index, test in enumerate(task_record.tests):
            values = [int(c.grid[0, 0]) for c in test.candidates]
            answer = answers[task_id][test_index][0][0]
            if answer not in values:
                continue
            right = values.index(answer)
            poe = [AGGREGATIONS["product"](c.scoring_nlls) if c.scoring_nlls else None for c in test.candidates]
            expected.append((task_id, test_index, len(values),
                             reference_rank([c.best_generation_nll for c in test.candidates], right),
                             reference_rank(poe, right) if None not in poe else None))
    table = rank_table(records, answers)
    found = [(row.task_id, row.test_index, row.candidates, row.rank_generation,
              None if math.isnan(row.rank_poe) else row.rank_poe) for row in table.itertuples()]
    assert found == expected


def reference_curve(records, answers, thresholds, aggregation, attempts):
    rows, outputs = [], sum(len(grids) for grids in answers.values())
    for threshold in thresholds:
        found = selected = 0
        for task_id, task_record in records.items():
            for test_index, test in enumerate(task_record.tests):
                kept = [c for c in test.candidates if math.exp(-c.best_generation_nll) >= threshold * (1 - 1e-12)]
                answer = answers[task_id][test_index][0][0]
                right = [c for c in kept if int(c.grid[0, 0]) == answer]
                if not right:
                    continue
                found += 1
                rule = aggregation if all(c.scoring_nlls for c in kept) else "generation"
                key = [(c.aggregate(rule), c.best_generation_nll, index) for index, c in enumerate(kept)]
                mine = key[kept.index(right[0])]
                selected += sum(1 for other in key if other < mine) < attempts  # fewer than `attempts` beat it
        rows.append((threshold, found / outputs, selected / outputs))
    return rows


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("aggregation, attempts", [("product", 2), ("min", 1), ("generation", 2)])
def test_threshold_curve_matches_a_slow_reference(seed, aggregation, attempts):
    records, answers = random_records(seed)
    thresholds = [0.001, 0.05, 0.1, 0.3, 0.6, 0.95]
    curve = threshold_curve(records, answers, thresholds, aggregation, attempts)
    expected = reference_curve(records, answers, thresholds, aggregation, attempts)
    assert curve[["threshold", "found", "selected"]].values.ravel().tolist() == \
        pytest.approx([value for row in expected for value in row])
    assert list(curve["found"]) == sorted(curve["found"], reverse=True)  # a higher threshold never finds more


def test_threshold_curve_of_no_outputs_is_zero():
    curve = threshold_curve({}, {}, [0.1])
    assert curve[["found", "selected"]].values.tolist() == [[0.0, 0.0]]


def test_a_task_set_gives_the_answers(small_task_set):
    task = small_task_set.tasks()[0]
    right = Candidate(task.test_outputs[0], {"id": 0.4}, [0.4])
    records = {task.id: record(task.id, [candidate(9, 0.1, [0.1]), right])}
    assert rank_table(records, small_task_set)["rank_generation"].tolist() == [2]
    assert rank_table(records, {task.id: [task.test_outputs[0].tolist()]})["rank_generation"].tolist() == [2]


@pytest.mark.slow
def test_the_curve_predicts_what_dfs_at_a_higher_threshold_finds_and_selects(model_folder, small_task_set):
    """The curve is exact: a run at a low threshold predicts runs at higher ones (the bigram model)."""
    loaded = load_model(model_folder, device="cpu")

    def run(threshold: float) -> dict[str, TaskRecord]:
        settings = SolveSettings(sampler=SamplerSettings("dfs", threshold=threshold), inference_augmentations=2,
                                 scoring_augmentations=2, test_time_training=False)
        solver = Solver.from_loaded(loaded, settings)
        return {task.id: solver.solve_task(task) for task in small_task_set.tasks()}

    low = run(0.02)
    assert all(not task_record.failed for task_record in low.values())
    thresholds = [0.04, 0.1, 0.2]
    high = {threshold: run(threshold) for threshold in thresholds}
    predicted = []
    for choice in range(5):  # "right answers": the choice-th candidate of the low run, for every test input
        answers = {task_id: [test.candidates[choice].grid.tolist() for test in task_record.tests]
                   for task_id, task_record in low.items()}
        outputs = sum(len(grids) for grids in answers.values())
        curve = threshold_curve(low, answers, thresholds, "product", 2)
        for threshold, predicted_found, predicted_selected in zip(thresholds, curve["found"], curve["selected"]):
            found = selected = 0
            for task_id, task_record in high[threshold].items():
                for test, answer in zip(task_record.tests, answers[task_id]):
                    found += any(np.array_equal(c.grid, answer) for c in test.candidates)
                    selected += any(np.array_equal(grid, answer) for grid in test.attempts)
            assert (found / outputs, selected / outputs) == pytest.approx((predicted_found, predicted_selected))
        predicted.extend(zip(curve["found"], curve["selected"]))
    assert len(set(predicted)) >= 4  # the answers chosen give a curve that changes with the threshold


def test_why_a_task_got_no_answer_of_the_models_is_read_from_its_record_and_the_commonest_reason_counted():
    from arc_kit.experiments.analysis import commonest_unanswered, unanswered_reason
    from arc_kit.method.records import SearchStats, fallback_record

    def searched(**stats) -> TaskRecord:
        return TaskRecord("t", [TestResult(search=SearchStats(**stats))])

    budget = searched(answers=0, dropped={"max length": 40}, capped=["id: forward-call cap of 2000 reached"])
    assert unanswered_reason(budget) == ("no answer ended within the token budget: is the model trained on this "
                                         "format?")  # paths ran to the budget: the cap is what came after
    assert unanswered_reason(searched(answers=3, not_grids=3)).startswith("every answer the model wrote was no grid")
    assert unanswered_reason(searched(capped=["id: deadline reached with 4 branches left"])) == \
        "the search stopped at its deadline before an answer ended"
    assert unanswered_reason(searched()).startswith("no answer was as probable as the search's threshold")
    assert unanswered_reason(TaskRecord("t", error="OutOfMemoryError: CUDA out of memory")) == \
        "the method failed (OutOfMemoryError)"
    assert unanswered_reason(fallback_record("t", "out of time")) == "no model work (out of time)"
    answered = TaskRecord("t", [TestResult(attempts=[np.array([[1]])])])
    assert unanswered_reason(answered) is None and commonest_unanswered([answered]) is None
    assert commonest_unanswered([budget, budget, searched(), answered]) == (
        "no answer ended within the token budget: is the model trained on this format? (2 of 3 task(s))")
