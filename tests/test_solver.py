"""The solve pipeline: merging answers across augmentations, whole runs on real ARC-AGI-1 tasks,
resumption, failing tasks, and the solve / ablation / samplers commands.

The model is a micro Llama turned into a bigram model by hand (attention and MLP outputs zeroed,
one-hot embeddings, the output head holding bigram logits): after the output prefix it writes one
of a few 1x1 or 1x2 grids, so every stage (DFS, scoring, selection) has real candidates to work on,
in milliseconds. Tasks are the smallest ARC-AGI-1 evaluation tasks by prompt length, one of them
with two test inputs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import assert_same_finds, bigram_model, eos_model
from test_dfs import FakeClock, prefers_a_foreign_token

import arc_kit.method.answers as decoding_module
import arc_kit.method.solver as solver_module
import arc_kit.method.ttt as ttt_module
from arc_kit.data.augmentation import Augmentation
from arc_kit.cli import main
from arc_kit.data.datasets import load_tasks
from arc_kit.method.answers import AnswerSpace, Completion, SearchResult
from arc_kit.method.search import DEADLINE_BEFORE_START
from arc_kit.method.transformers_forward import sequence_nll
from arc_kit.data.grids import grid_key, grid_to_json, grids_equal
from arc_kit.model.loading import load_model
from arc_kit.experiments.table_records import AblationRecord, SamplerRecord
from arc_kit.method.records import TaskRecord
from arc_kit.run.record_json import from_json, read_records, to_json
from arc_kit.run.jobs import solve
from arc_kit.settings import TEST_TIME_TRAINING, SamplerSettings, SolveSettings
from arc_kit.method.solver import Solver
from arc_kit.data.submission import build_submission, score_submission, submission_problems
from arc_kit.experiments.tables import ABLATION_STAGES, DEFAULT_SAMPLERS, ablation_table, sampler_table
from arc_kit.data.tasks import Pair
from arc_kit.text import NotAGridError, TaskEncoder, Vocabulary
from arc_kit.outputs import MARKER

TASK_IDS = ["00576224", "66e6c45b", "6ea4a07e"]  # small prompts; 6ea4a07e has two test inputs
SETTINGS = SolveSettings(
    sampler=SamplerSettings("dfs", threshold=0.05, max_forward_calls=200),
    inference_augmentations=2, scoring_augmentations=2,
    ttt=TEST_TIME_TRAINING.replace(steps=2), max_len=2048)


@pytest.fixture(scope="module")
def tasks():
    return load_tasks("arc-agi-1/evaluation").select(TASK_IDS)


def make_solver(model_folder, settings: SolveSettings = SETTINGS) -> Solver:
    return Solver.from_loaded(load_model(model_folder, device="cpu"), settings)


def read_json(path: Path):
    return json.loads(Path(path).read_text())


# -- merging answers across augmentations ---------------------------------------------------------

def test_answers_from_different_augmentations_merge(monkeypatch):
    encoder = TaskEncoder(Vocabulary())
    model, _ = eos_model()  # never called: the searches are faked
    solver = Solver(model, encoder, SolveSettings(test_time_training=False))
    train = [Pair([[1, 2, 3], [4, 5, 6]], [[6, 5, 4], [3, 2, 1]]), Pair([[7, 8]], [[8, 7]])]
    test_input = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.uint8)
    fixed = np.array([[1, 2, 3], [4, 5, 0]], dtype=np.uint8)  # no symmetry maps it onto itself
    other = np.array([[9, 8]], dtype=np.uint8)
    augmentations = Augmentation.inference_set(np.random.default_rng(3), len(train), 5)
    assert len({a.key for a in augmentations}) == 5
    calls = []

    def fake_search(engine, prompts, space, settings, guesses, drafts=None, deadline=None, odds=None):
        searches.append(len(prompts))
        results = []
        for prompt_ids, guess in zip(prompts, guesses):
            augmentation = augmentations[len(calls)]
            expected_prompt = encoder.encode_prompt(augmentation.apply_pairs(train),
                                                    augmentation.apply_grid(test_input),
                                                    max_len=solver.settings.max_len)
            assert np.array_equal(prompt_ids, expected_prompt.ids)
            calls.append((augmentation, None if guess is None else np.asarray(guess).tolist()))
            index = len(calls)
            completions = [Completion(tuple(encoder.encode_answer(augmentation.apply_grid(fixed)).tolist()),
                                      0.5 + index), Completion((encoder.eos_id,), 0.1)]  # not a grid: no digit
            if index % 2:
                completions.append(Completion(tuple(encoder.encode_answer(augmentation.apply_grid(other)).tolist()),
                                              0.2 * index))
            results.append(SearchResult(completions, forward_calls=10 * index, tokens_processed=100,
                                        capped="cap" if index == 2 else None, dropped={"max length": 1}))
        return results

    searches = []
    monkeypatch.setattr(solver_module, "search", fake_search)
    candidates, stats = solver.sample(model, train, test_input, augmentations, SamplerSettings())
    assert len(candidates) == 2
    by_grid = {grid_key(c.grid): c for c in candidates}
    merged = by_grid[grid_key(fixed)]
    assert grids_equal(merged.grid, fixed)
    assert merged.generation_nlls == {a.key: 0.5 + i + 1 for i, a in enumerate(augmentations)}
    found_other = by_grid[grid_key(other)]
    assert found_other.generation_nlls == {augmentations[i].key: pytest.approx(0.2 * (i + 1)) for i in (0, 2, 4)}
    assert candidates[0] is found_other  # best generation NLL first (0.2 < 1.5)
    assert stats.answers == 5 * 2 + 3 and stats.not_grids == 5
    assert stats.forward_calls == 10 * (1 + 2 + 3 + 4 + 5) and stats.tokens == 500
    assert stats.capped == [f"{augmentations[1].key}: cap"] and stats.dropped == {"max length": 5}
    assert len(stats.prompt_tokens) == 5
    # the first search alone, with no guess; the others together, each from its best grid, in its own frame
    assert searches == [1, 4] and calls[0][1] is None
    for augmentation, guess in calls[1:]:
        assert guess == encoder.encode_answer(augmentation.apply_grid(other)).tolist()


def test_the_same_answer_twice_under_one_augmentation_keeps_its_best_nll(monkeypatch):
    encoder = TaskEncoder(Vocabulary())
    model, _ = eos_model()  # never called: the search is faked
    solver = Solver(model, encoder, SolveSettings(test_time_training=False))
    grid = np.array([[1], [2]], dtype=np.uint8)
    augmentation = Augmentation(1, (1, 0, 2, 3, 4, 5, 6, 7, 8, 9))
    answer = encoder.encode_answer(augmentation.apply_grid(grid))
    padded = tuple(answer.tolist()) + (5, 5)  # the same grid with junk after the eos decodes the same way

    def fake_search(engine, prompts, *args, **kwargs):
        return [SearchResult([Completion(tuple(answer.tolist()), 2.0), Completion(padded, 1.0)])]

    monkeypatch.setattr(solver_module, "search", fake_search)
    candidates, _ = solver.sample(model, [Pair([[1]], [[2]])], np.array([[3]]), [augmentation], SamplerSettings())
    assert len(candidates) == 1 and grids_equal(candidates[0].grid, grid)
    assert candidates[0].generation_nlls == {augmentation.key: 1.0}


# -- a whole run -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_solve_writes_a_complete_scored_run_without_showing_test_outputs(model_folder, tasks, tmp_path,
                                                                         monkeypatch):
    seen = {"adapt": [], "sample": 0, "score": 0}
    adapt, sample, score = Solver.adapt, Solver.sample, Solver.score

    def checked_adapt(self, task, *rest):
        assert all(pair.output is None for pair in task.test) and not task.has_solutions
        seen["adapt"].append(task.id)
        return adapt(self, task, *rest)

    def checked_sample(self, model, train, test_input, *rest, **keywords):
        task = tasks[seen["adapt"][-1]]
        assert [p.input.tobytes() for p in train] == [p.input.tobytes() for p in task.train]
        assert any(grids_equal(test_input, pair.input) for pair in task.test)
        seen["sample"] += 1
        return sample(self, model, train, test_input, *rest, **keywords)

    def checked_score(self, model, train, test_input, candidates, augmentations):
        seen["score"] += 1
        assert len(augmentations) == SETTINGS.scoring_augmentations
        return score(self, model, train, test_input, candidates, augmentations)

    monkeypatch.setattr(Solver, "adapt", checked_adapt)
    monkeypatch.setattr(Solver, "sample", checked_sample)
    monkeypatch.setattr(Solver, "score", checked_score)
    run = solve(tasks, make_solver(model_folder), tmp_path, progress=False, info={"note": "test"})
    assert seen["adapt"] == TASK_IDS and seen["sample"] == seen["score"] == 4  # four test inputs

    submission = read_json(tmp_path / "submission.json")
    assert submission_problems(submission, tasks) == []
    assert list(submission) == TASK_IDS and [len(submission[i]) for i in TASK_IDS] == [1, 1, 2]
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == TASK_IDS
    run_json = read_json(tmp_path / "run.json")
    assert run_json["settings"] == json.loads(json.dumps(SETTINGS.to_json())) and run_json["note"] == "test"

    for task_id in TASK_IDS:
        record = to_json(run.records[task_id])
        assert record["error"] is None and record["ttt"]["steps"] == 2
        assert len(record["test"]) == len(tasks[task_id].test)
        assert set(record["timings"]) == {"ttt", "generation", "scoring", "total"}
        for index, test in enumerate(record["test"]):
            assert len(test["inference_augmentations"]) == 2 and len(test["scoring_augmentations"]) == 2
            assert set(test["scoring_augmentations"]).isdisjoint(test["inference_augmentations"])  # fresh views
            assert test["candidates"], "the bigram model always writes small grids"
            for candidate in test["candidates"]:
                assert set(candidate["generation_nlls"]) <= set(test["inference_augmentations"])
                assert len(candidate["scoring_nlls"]) == 2
                assert candidate["aggregates"]["product"] == pytest.approx(sum(candidate["scoring_nlls"]))
            # the attempts are the two best candidates by the product of experts, and the submission holds them
            ranked = sorted(test["candidates"], key=lambda c: c["aggregates"]["product"])
            assert test["attempts"] == [c["grid"] for c in ranked[:2]]
            entry = submission[task_id][index]
            assert [entry["attempt_1"], entry["attempt_2"]] == test["attempts"]
            assert record["correct"][index] == any(grids_equal(np.array(a), tasks[task_id].test[index].output)
                                                   for a in test["attempts"])

    assert run.score is not None and run.score.total == 4
    score = read_json(tmp_path / "score.json")
    assert score["total"] == 4 and score["tasks"] == 3 and score["correct"] == run.score.correct
    table = pd.read_csv(tmp_path / "scores.csv", dtype={"task_id": str})
    assert table["task_id"].tolist() == TASK_IDS
    assert {"candidates", "forward_calls", "total_seconds", "error"} <= set(table.columns)
    assert (table["candidates"] > 0).all() and (table["forward_calls"] > 0).all()


def test_a_run_without_known_solutions_writes_no_scores(model_folder, tasks, tmp_path):
    hidden = tasks.select(TASK_IDS[:1]).without_solutions()
    run = solve(hidden, make_solver(model_folder), tmp_path, progress=False)
    assert run.score is None and not (tmp_path / "scores.csv").exists() and not (tmp_path / "score.json").exists()
    assert submission_problems(read_json(tmp_path / "submission.json"), hidden) == []
    # solutions given apart from the tasks are used for scoring only
    separate = solve(hidden, make_solver(model_folder), tmp_path / "scored", solutions=tasks, progress=False)
    assert separate.score is not None and separate.score.total == 1
    assert (tmp_path / "scored" / "scores.csv").exists()


@pytest.fixture(scope="module")
def uninterrupted(model_folder, tasks, tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    solve(tasks, make_solver(model_folder), out, progress=False)
    return out


def count_solve_task(monkeypatch, fail_on: int | None = None, error=KeyboardInterrupt):
    """Count (and record the ids of) solve_task calls; raise ``error`` on call number ``fail_on``."""
    calls = []
    original = Solver.solve_task

    def counted(self, task, *rest, **keywords):
        calls.append(task.id)
        if fail_on is not None and len(calls) == fail_on:
            raise error()
        return original(self, task, *rest, **keywords)

    monkeypatch.setattr(Solver, "solve_task", counted)
    return calls


@pytest.mark.slow
def test_an_interrupted_run_resumes_where_it_stopped(model_folder, tasks, tmp_path, uninterrupted, monkeypatch):
    calls = count_solve_task(monkeypatch, fail_on=2)
    with pytest.raises(KeyboardInterrupt):
        solve(tasks, make_solver(model_folder), tmp_path, progress=False)
    assert list(read_records(tmp_path / "records.jsonl")) == TASK_IDS[:1]
    # what was written so far is a valid submission already
    assert submission_problems(read_json(tmp_path / "submission.json"), tasks) == []

    calls = count_solve_task(monkeypatch)
    run = solve(tasks, make_solver(model_folder), tmp_path, progress=False)
    assert calls == TASK_IDS[1:]  # the finished task is not recomputed
    assert read_json(tmp_path / "submission.json") == read_json(uninterrupted / "submission.json")
    assert list(read_records(tmp_path / "records.jsonl")) == TASK_IDS
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 3
    assert run.score.correct == read_json(uninterrupted / "score.json")["correct"]

    calls = count_solve_task(monkeypatch)
    solve(tasks, make_solver(model_folder), tmp_path, progress=False)  # everything done: nothing to do
    assert calls == []


def test_a_torn_record_is_recomputed_and_the_records_file_stays_readable(model_folder, tasks, tmp_path,
                                                                         uninterrupted, monkeypatch):
    lines = (uninterrupted / "records.jsonl").read_text().splitlines()
    for name in (MARKER, "run.json"):  # the run as the kit left it: marked, its settings written
        (tmp_path / name).write_text((uninterrupted / name).read_text())
    (tmp_path / "records.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed mid-write
    calls = count_solve_task(monkeypatch)
    solve(tasks, make_solver(model_folder), tmp_path, progress=False)
    assert calls == TASK_IDS[1:]
    assert read_json(tmp_path / "submission.json") == read_json(uninterrupted / "submission.json")
    # every record survives a later read (the torn half line must not swallow the next record)
    assert list(read_records(tmp_path / "records.jsonl")) == TASK_IDS
    calls = count_solve_task(monkeypatch)
    solve(tasks, make_solver(model_folder), tmp_path, progress=False)
    assert calls == []


@pytest.mark.slow
def test_the_same_seed_gives_the_same_submission_and_another_seed_other_augmentations(model_folder, tasks, tmp_path,
                                                                                       uninterrupted):
    solve(tasks, make_solver(model_folder), tmp_path / "again", progress=False)
    assert read_json(tmp_path / "again" / "submission.json") == read_json(uninterrupted / "submission.json")
    first = read_records(uninterrupted / "records.jsonl")
    again = read_records(tmp_path / "again" / "records.jsonl")
    for task_id in TASK_IDS:
        assert_same_finds(again[task_id], first[task_id])

    one = tasks.select(TASK_IDS[:1])
    reseeded = solve(one, make_solver(model_folder, SETTINGS.replace(seed=1)), tmp_path / "seed1", progress=False)
    assert (reseeded.records[TASK_IDS[0]].tests[0].inference_augmentations
            != first[TASK_IDS[0]].tests[0].inference_augmentations)


def test_other_settings_in_the_same_folder_need_restart(model_folder, tasks, tmp_path, monkeypatch):
    one = tasks.select(TASK_IDS[:1])
    solve(one, make_solver(model_folder), tmp_path, progress=False)
    other = SETTINGS.replace(aggregation="min")
    with pytest.raises(ValueError, match="other settings"):
        solve(one, make_solver(model_folder, other), tmp_path, progress=False)
    calls = count_solve_task(monkeypatch)
    run = solve(one, make_solver(model_folder, other), tmp_path, progress=False, restart=True)
    assert calls == TASK_IDS[:1]  # discarded and recomputed
    assert read_json(tmp_path / "run.json")["settings"]["aggregation"] == "min"
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 1
    test = to_json(run.records[TASK_IDS[0]])["test"][0]
    ranked = sorted(test["candidates"], key=lambda c: c["aggregates"]["min"])
    assert test["attempts"] == [c["grid"] for c in ranked[:2]]


@pytest.mark.slow
def test_a_failing_task_gets_fallbacks_and_does_not_stop_the_others(model_folder, tasks, tmp_path, monkeypatch):
    bad = TASK_IDS[1]
    current = {}
    adapt, sample = Solver.adapt, Solver.sample

    def tracking_adapt(self, task, *rest):
        current["id"] = task.id
        return adapt(self, task, *rest)

    def failing_sample(self, *args, **kwargs):
        if current["id"] == bad:
            raise RuntimeError("out of memory, say")
        return sample(self, *args, **kwargs)

    monkeypatch.setattr(Solver, "adapt", tracking_adapt)
    monkeypatch.setattr(Solver, "sample", failing_sample)
    run = solve(tasks, make_solver(model_folder), tmp_path, progress=False)
    record = to_json(run.records[bad])
    assert record["error"] == "RuntimeError: out of memory, say" and "Traceback" in record["traceback"]
    assert record["correct"] == [False]
    submission = read_json(tmp_path / "submission.json")
    assert submission_problems(submission, tasks) == []
    assert submission[bad] == [{"attempt_1": grid_to_json(tasks[bad].test[0].input), "attempt_2": [[0]]}]
    for task_id in TASK_IDS:
        if task_id != bad:
            assert to_json(run.records[task_id])["error"] is None
            assert [[e["attempt_1"], e["attempt_2"]] for e in submission[task_id]] == \
                [t["attempts"] for t in to_json(run.records[task_id])["test"]]
    table = pd.read_csv(tmp_path / "scores.csv", dtype={"task_id": str}).set_index("task_id")
    assert table.loc[bad, "error"] == record["error"] and table.drop(index=bad)["error"].isna().all()


def test_solve_task_never_raises(model_folder, tasks, monkeypatch):
    solver = make_solver(model_folder)
    monkeypatch.setattr(Solver, "adapt", lambda self, task, *rest: 1 / 0)
    record = to_json(solver.solve_task(tasks[TASK_IDS[0]]))
    assert record["error"].startswith("ZeroDivisionError") and record["test"] == []


# -- deadlines ---------------------------------------------------------------------------------------

def test_a_task_past_its_deadline_comes_back_at_once_with_a_well_formed_record(model_folder, tasks):
    solver = make_solver(model_folder)
    task = tasks[TASK_IDS[2]]  # two test inputs
    calls = []
    handle = solver.model.register_forward_hook(lambda *arguments: calls.append(1))
    try:
        record = solver.solve_task(task, deadline=time.monotonic() - 1, search_share=0.5)
    finally:
        handle.remove()
    assert calls == []  # no training step, no search, no scoring
    assert record.error is None and record.deadline_hit == "test-time training"
    assert record.ttt.steps == 0 and record.ttt.stopped == "deadline reached after 0 of 2 steps"
    assert len(record.tests) == 2 and record.timings["total"] < 5
    for test in record.tests:
        assert test.candidates == [] and test.attempts == [] and test.scoring_augmentations == []
        assert test.search.capped == [f"{key}: {DEADLINE_BEFORE_START}" for key in test.inference_augmentations]
    again = from_json(TaskRecord, json.loads(json.dumps(to_json(record))))
    assert to_json(again) == to_json(record) and again.deadline_hit == "test-time training"
    visible = tasks.select([task.id])
    assert submission_problems(build_submission(visible, {task.id: again.attempts}), visible) == []


@pytest.fixture
def clock(monkeypatch):
    """A clock that moves only when the test moves it, behind every deadline check (searches and training)."""
    fake = FakeClock(step=0.0)
    monkeypatch.setattr(decoding_module, "time", fake)
    monkeypatch.setattr(ttt_module, "time", fake)
    return fake


def test_a_deadline_during_test_time_training_stops_it_between_steps(model_folder, tasks, clock):
    solver = make_solver(model_folder, SETTINGS.replace(ttt=TEST_TIME_TRAINING.replace(steps=4)))

    def late(*arguments):  # the first training step's forward takes us past the deadline
        clock.now = 100.0

    handle = solver.model.register_forward_hook(late)
    try:
        record = solver.solve_task(tasks[TASK_IDS[0]], deadline=10.0)
    finally:
        handle.remove()
    assert record.error is None and record.deadline_hit == "test-time training"
    assert record.ttt.steps == 1 and record.ttt.stopped == "deadline reached after 1 of 4 steps"
    assert record.ttt.first_loss is not None
    assert [test.candidates for test in record.tests] == [[]]


def test_a_deadline_during_generation_skips_scoring_and_selects_by_generation_nll(model_folder, tasks, clock,
                                                                                monkeypatch):
    settings = SETTINGS.replace(inference_augmentations=3)
    solver = make_solver(model_folder, settings)
    searches, real_search = [], solver_module.search

    def first_search_runs_late(*arguments, **keywords):
        result = real_search(*arguments, **keywords)
        searches.append(keywords["deadline"])
        clock.now = 100.0
        return result

    def no_scoring(*arguments, **keywords):
        raise AssertionError("scored after the deadline")

    monkeypatch.setattr(solver_module, "search", first_search_runs_late)
    monkeypatch.setattr(Solver, "score", no_scoring)
    record = solver.solve_task(tasks[TASK_IDS[0]], deadline=10.0)
    assert record.error is None and record.deadline_hit == "generation" and record.ttt.stopped is None
    assert searches == [10.0, 10.0]  # the first view alone, then the other two together
    test = record.tests[0]
    assert test.scoring_augmentations == [] and len(test.candidates) >= 2  # guard: a real choice to make
    first, *late = test.inference_augmentations
    assert test.search.capped == [f"{key}: {DEADLINE_BEFORE_START}" for key in late]
    assert all(set(c.generation_nlls) == {first} for c in test.candidates)  # found before the deadline only
    ranked = sorted(test.candidates, key=lambda c: c.best_generation_nll)
    assert [a.tolist() for a in test.attempts] == [c.grid.tolist() for c in ranked[:2]]


def test_each_search_gets_its_part_of_the_searches_share_of_the_time_left(model_folder, tasks, clock, monkeypatch):
    monkeypatch.setattr(solver_module, "time", clock)
    solver = make_solver(model_folder, SETTINGS.replace(test_time_training=False, inference_augmentations=3))
    deadlines, later = [], iter([20.0, 40.0, 60.0, 70.0])
    real_search = solver_module.search

    def timed(*arguments, **keywords):
        deadlines.append(keywords["deadline"])
        result = real_search(*arguments, **keywords)
        clock.now = next(later)
        return result

    monkeypatch.setattr(solver_module, "search", timed)
    task = tasks[TASK_IDS[2]]  # two test inputs: four searches, the first view alone then the others as lanes
    record = solver.solve_task(task, deadline=100.0, search_share=0.8)
    # each search at its start: the searches left (this one among them) share 0.8 of the time left, scoring the rest
    assert deadlines == pytest.approx([0 + 100 * 0.8 / 4, 20 + 80 * 0.8 / 3, 40 + 60 * 0.8 / 2, 60 + 40 * 0.8])
    assert record.error is None and record.deadline_hit is None
    assert [len(test.scoring_augmentations) for test in record.tests] == [2, 2]  # time was left: scored as usual


def test_no_retry_once_the_deadline_has_passed(model_folder, tasks, monkeypatch):
    solver = make_solver(model_folder, SETTINGS.replace(test_time_training=False))
    monkeypatch.setattr(Solver, "sample", lambda *arguments, **keywords: 1 / 0)
    calls = count_solve_task(monkeypatch)
    record = solver.solve_with_retry(tasks[TASK_IDS[0]])
    assert calls == [TASK_IDS[0]] * 2 and record.retried_after.startswith("ZeroDivisionError")
    calls.clear()
    record = solver.solve_with_retry(tasks[TASK_IDS[0]], deadline=time.monotonic() + 3600, search_share=0.5)
    assert len(calls) == 2 and record.error.startswith("ZeroDivisionError")
    calls.clear()
    monkeypatch.setattr(Solver, "adapt", lambda *arguments, **keywords: 1 / 0)
    record = solver.solve_with_retry(tasks[TASK_IDS[0]], deadline=time.monotonic() - 1)
    assert calls == [TASK_IDS[0]] and record.retried_after is None and record.error.startswith("ZeroDivisionError")


def test_records_without_the_deadline_fields_still_read():
    old = {"task_id": "abc", "test": [], "timings": {"total": 1.0}, "error": None, "rung": 0,
           "ttt": {"steps": 64, "seconds": 3.0, "skipped": None, "first_loss": 1.0, "last_loss": 0.5}}
    record = from_json(TaskRecord, old)
    assert record.deadline_hit is None and record.ttt.stopped is None and record.extra == {}
    assert "deadline_hit" not in to_json(record)  # written only when it happened
    record.deadline_hit = "generation"
    assert from_json(TaskRecord, to_json(record)).deadline_hit == "generation"


# -- one token budget --------------------------------------------------------------------------------

def test_the_solve_budget_reaches_the_test_time_training_sequences(model_folder, tasks):
    """SolveSettings(max_len=N): prompts and test-time training sequences both keep within N tokens."""
    task = tasks["6ea4a07e"].without_solutions()  # six 3x3 pairs: 211 tokens in one sequence, 130 for three
    lengths = {}
    for budget in (None, 140):
        loaded = load_model(model_folder, device="cpu")
        solver = Solver(loaded.model, loaded.encoder(), SETTINGS.replace(max_len=budget))
        expected = budget or loaded.token_budget()
        assert solver.settings.max_len == solver.encoder.max_len == solver.trainer.encoder.max_len == expected
        seen = []
        solver.model.register_forward_pre_hook(
            lambda module, arguments, keywords: seen.append(keywords["input_ids"].shape[1]), with_kwargs=True)
        summary = solver.adapt(task)
        assert summary.steps == 2 and summary.skipped is None
        lengths[budget] = seen
    assert max(lengths[None]) > 140 >= max(lengths[140]) >= 103  # pairs dropped to fit, two or more kept
    # an unset budget (an older run file's) is filled from the encoder, never left to differ from it
    encoder = TaskEncoder(Vocabulary(), max_len=3000)
    assert Solver(None, encoder, SolveSettings(test_time_training=False, max_len=None)).settings.max_len == 3000


def test_the_solver_budget_is_the_authors_cap_cut_to_what_the_model_takes(model_folder):
    loaded = load_model(model_folder, device="cpu")
    positions = loaded.model.config.max_position_embeddings
    assert SolveSettings().max_len == 8192
    default = Solver.from_loaded(loaded, SolveSettings(test_time_training=False))
    assert default.settings.max_len == default.encoder.max_len == min(8192, positions)
    over = Solver.from_loaded(loaded, SETTINGS.replace(max_len=positions + 1000))
    assert over.settings.max_len == over.encoder.max_len == over.trainer.encoder.max_len == positions


def test_the_solver_reads_answers_as_its_settings_say(model_folder):
    """decoding: authors (the default) drops a stray letter and needs no eos; strict refuses both."""
    loaded = load_model(model_folder, device="cpu")
    vocabulary = Vocabulary()
    stray_letter = vocabulary.encode("1A\n2\n") + [vocabulary.eos_id]
    no_eos = vocabulary.encode("12\n34\n")
    authors = Solver.from_loaded(loaded, SETTINGS)
    assert SETTINGS.decoding == "authors" and authors.encoder.format.decoding == "authors"
    np.testing.assert_array_equal(authors.encoder.decode_answer(stray_letter), [[1], [2]])
    np.testing.assert_array_equal(authors.encoder.decode_answer(no_eos), [[1, 2], [3, 4]])
    again = load_model(model_folder, device="cpu")  # a fresh model: each solver puts its own adapter on
    strict = Solver(again.model, again.encoder(), SETTINGS.replace(decoding="strict"))
    assert strict.encoder.format.decoding == strict.trainer.encoder.format.decoding == "strict"
    for ids in (stray_letter, no_eos):
        with pytest.raises(NotAGridError):
            strict.encoder.decode_answer(ids)
    with pytest.raises(ValueError, match="decoding"):
        SolveSettings(decoding="lenient")


# -- how answers are measured, and how many are submitted -------------------------------------------

SMALL_TRAIN = (Pair([[1, 2], [3, 4]], [[3]]), Pair([[5, 6]], [[5]]))
SMALL_TEST = np.array([[7, 7]], dtype=np.uint8)


def test_the_solver_measures_every_nll_as_its_settings_say():
    model, _ = bigram_model()
    encoder = TaskEncoder(Vocabulary())
    views = Augmentation.inference_set(np.random.default_rng(2), len(SMALL_TRAIN), 2)
    found = {}
    for mode in ("full", "answer-mask"):
        solver = Solver(model, encoder, SolveSettings(test_time_training=False, probabilities=mode,
                                                      sampler=SamplerSettings("dfs", threshold=0.05)))
        assert solver.space.probabilities == mode
        candidates, _ = solver.sample(model, SMALL_TRAIN, SMALL_TEST, views, solver.settings.sampler)
        solver.score(model, SMALL_TRAIN, SMALL_TEST, candidates, views)
        space = AnswerSpace.from_encoder(encoder, mode)
        for candidate in candidates:  # each view's NLL: one full forward of the augmented prompt and answer
            for view, nll in zip(views, candidate.scoring_nlls):
                prompt = encoder.encode_prompt(view.apply_pairs(SMALL_TRAIN), view.apply_grid(SMALL_TEST)).ids
                answer = encoder.encode_answer(view.apply_grid(candidate.grid))
                assert nll == pytest.approx(sequence_nll(model, prompt, [answer], space)[0], abs=1e-4)
        found[mode] = {grid_key(c.grid): c for c in candidates}
    common = found["full"].keys() & found["answer-mask"].keys()
    assert common  # guard: the same grids found both ways, measured differently
    for key in common:
        full, masked = found["full"][key], found["answer-mask"][key]
        assert full.best_generation_nll > masked.best_generation_nll + 1e-3
        assert all(a > b for a, b in zip(full.scoring_nlls, masked.scoring_nlls))
    assert len(found["full"]) <= len(found["answer-mask"])  # lower probabilities: no more answers above T


def test_under_the_full_softmax_a_foreign_token_is_counted_as_not_a_grid():
    model = prefers_a_foreign_token()
    encoder = TaskEncoder(Vocabulary())
    for mode, grids in (("full", 0), ("answer-mask", 1)):
        solver = Solver(model, encoder, SolveSettings(test_time_training=False, probabilities=mode))
        candidates, stats = solver.sample(model, SMALL_TRAIN, SMALL_TEST, [Augmentation()], SamplerSettings("greedy"))
        assert len(candidates) == grids and stats.answers == 1 and stats.not_grids == 1 - grids


def test_one_attempt_is_the_top_candidate_and_the_submission_repeats_it(model_folder, tasks):
    task = tasks[TASK_IDS[0]]
    two = make_solver(model_folder, SETTINGS.replace(test_time_training=False)).solve_task(task)
    one = make_solver(model_folder, SETTINGS.replace(test_time_training=False, attempts=1)).solve_task(task)
    assert len(two.tests[0].attempts) == 2 and len(one.tests[0].attempts) == 1
    assert grids_equal(one.tests[0].attempts[0], two.tests[0].attempts[0])
    visible = tasks.select([task.id])
    entry = build_submission(visible, {task.id: one.attempts}, attempts=1)[task.id][0]
    assert entry["attempt_1"] == entry["attempt_2"] == grid_to_json(one.tests[0].attempts[0])
    assert submission_problems({task.id: [entry]}, visible) == []
    with pytest.raises(ValueError, match="unknown attempts 3; expected one of: 1, 2"):
        SolveSettings(attempts=3)


def test_a_one_attempt_run_writes_repeated_attempts_and_scores_only_the_first(model_folder, tasks, tmp_path):
    settings = SETTINGS.replace(test_time_training=False, attempts=1)
    run = solve(tasks.select(TASK_IDS[:2]), make_solver(model_folder, settings), tmp_path / "run", progress=False)
    submission = read_json(tmp_path / "run" / "submission.json")
    assert all(entry["attempt_1"] == entry["attempt_2"] for entries in submission.values() for entry in entries)
    assert read_json(tmp_path / "run" / "score.json")["attempts"] == 1
    expected = score_submission(submission, tasks.select(TASK_IDS[:2]), attempts=1)
    assert run.score.correct == expected.correct
    for task_id, record in run.records.items():  # each record's own verdict counts its first answer only
        answers = tasks[task_id].test_outputs
        assert record.correct == [bool(test.attempts) and grids_equal(test.attempts[0], answer)
                                  or (not test.attempts and entry["attempt_1"] == grid_to_json(answer))
                                  for test, answer, entry in zip(record.tests, answers, submission[task_id])]


def test_the_metric_counts_only_the_first_attempt_with_one():
    solutions = {"a": [[[1]], [[2]]], "b": [[[3]]]}
    submission = {"a": [{"attempt_1": [[1]], "attempt_2": [[0]]}, {"attempt_1": [[0]], "attempt_2": [[2]]}],
                  "b": [{"attempt_1": [[0]], "attempt_2": [[3]]}]}
    assert score_submission(submission, solutions).correct == 3
    top1 = score_submission(submission, solutions, attempts=1)
    assert top1.correct == 1 and top1.total == 3
    assert top1.table.set_index("task_id").loc["a", "right_attempts"] == "attempt_1 -"
    with pytest.raises(ValueError, match="attempts must be 1 or 2"):
        score_submission(submission, solutions, attempts=0)


def test_the_tables_report_top1_beside_top2_from_the_same_records(tmp_path):
    records = {  # two test outputs: the first right in attempt 1, the second right in attempt 2 only
        "t": from_json(AblationRecord, {"task_id": "t", "correct": {stage: [True, True] for stage in ABLATION_STAGES},
                                       "correct_top1": {stage: [True, False] for stage in ABLATION_STAGES},
                                       "seconds": {}, "stages": {}})}
    table = ablation_table(records, SolveSettings(), tmp_path).table.set_index("stage")
    assert (table["correct"] == 2).all() and (table["correct_top1"] == 1).all()
    assert (table["accuracy_percent"] == 100.0).all() and (table["accuracy_top1_percent"] == 50.0).all()
    samplers = [SamplerSettings("greedy")]
    entry = {"seconds": 1.0, "candidates": [3, 2], "found": [True, True], "peak_memory_gb": None, "capped": 0,
             "correct": {a: [True, True] for a in ("product", "min", "max", "sum")},
             "correct_top1": {a: [False, True] for a in ("product", "min", "max", "sum")}}
    run = sampler_table({"t": from_json(SamplerRecord, {"task_id": "t", "samplers": {"greedy": entry}, "ttt": {}})},
                        samplers, SolveSettings(), tmp_path)
    row = run.table.set_index("sampler").loc["greedy"]
    assert row["accuracy_product_percent"] == 100.0 and row["accuracy_product_top1_percent"] == 50.0
    assert "full softmax" in " ".join(run.markdown.split()) and "_top1" in run.markdown  # the paragraph is wrapped
    assert max(map(len, run.markdown.split("\n\n")[0].splitlines())) <= 110
    old = {key: value for key, value in entry.items() if key != "correct_top1"}  # a record of an earlier kit
    row = sampler_table({"t": from_json(SamplerRecord, {"task_id": "t", "samplers": {"greedy": old}, "ttt": {}})},
                        samplers, SolveSettings(), tmp_path).table.set_index("sampler").loc["greedy"]
    assert row["accuracy_product_percent"] == 100.0 and pd.isna(row["accuracy_product_top1_percent"])


# -- what a solve searches by ---------------------------------------------------------------------------

def test_a_solve_searches_by_dfs_or_greedy_and_leaves_sampling_and_beams_to_the_samplers_table():
    assert SolveSettings(sampler=SamplerSettings("greedy")).sampler.kind == "greedy"
    for kind in ("sample", "beam"):
        with pytest.raises(ValueError, match="samplers table"):
            SolveSettings(sampler=SamplerSettings(kind, count=2))


# -- the commands ------------------------------------------------------------------------------------

TINY = ["--ttt-steps", "1", "--augmentations", "2", "--scoring-augmentations", "2", "--max-len", "2048",
        "--device", "cpu"]


def test_solve_command_runs_end_to_end(model_folder, tasks, tmp_path, capsys):
    out = tmp_path / "run"
    status = main(["solve", "--model", str(model_folder), "--task-ids", *TASK_IDS[:2], "--out", str(out),
                   "--threshold", "0.05", "--max-forward-calls", "50", *TINY])
    printed = capsys.readouterr().out
    assert status == 0
    assert "score " in printed and "test outputs" in printed and f"wrote {out / 'submission.json'}" in printed
    assert ", drafts: " in printed  # the end line: the share of the draft tokens that the searches followed
    submission = read_json(out / "submission.json")
    assert submission_problems(submission, tasks.select(TASK_IDS[:2])) == []
    assert list(read_records(out / "records.jsonl")) == TASK_IDS[:2]
    run = read_json(out / "run.json")
    assert run["settings"]["ttt"]["steps"] == 1 and run["settings"]["sampler"]["max_forward_calls"] == 50
    assert run["settings"]["max_len"] == 2048 and run["settings"]["inference_augmentations"] == 2
    assert {"arc_kit_version", "model", "dataset"} <= set(run)
    assert read_json(out / "score.json")["total"] == 2


def test_ablation_command_writes_every_stage(model_folder, tmp_path, capsys):
    out = tmp_path / "ablation"
    status = main(["ablation", "--model", str(model_folder), "--task-ids", TASK_IDS[0], "--out", str(out),
                   "--max-forward-calls", "50", *TINY])
    assert status == 0
    table = pd.read_csv(out / "ablation.csv")
    assert table["stage"].tolist() == list(ABLATION_STAGES) == ["baseline", "+TTT", "+16xAug", "+PoE", "+DFS"]
    assert (table["test_outputs"] == 1).all() and table["correct"].between(0, 1).all()
    markdown = (out / "ablation.md").read_text()
    assert all(f"| {stage} |" in markdown for stage in ABLATION_STAGES)
    record = read_json_lines(out / "ablation_records.jsonl")[0]
    assert record["task_id"] == TASK_IDS[0] and record["ttt"]["steps"] == 1
    assert record["probabilities"] == "full"  # the solver's measure, the default
    assert table["correct_top1"].between(0, table["correct"]).all() and "accuracy_top1_percent" in table
    # DFS at 9% finds every greedy answer of this model (each has probability above 9%) and more
    assert record["candidates"]["+DFS"][0] > record["candidates"]["+16xAug"][0] >= 1
    assert all(len(record["stages"][stage][0]) >= 1 for stage in ABLATION_STAGES)
    assert "ablation.md" in capsys.readouterr().out


def read_json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_samplers_command_writes_every_sampler(model_folder, tmp_path, capsys):
    out = tmp_path / "samplers"
    status = main(["samplers", "--model", str(model_folder), "--task-ids", TASK_IDS[0], "--out", str(out),
                   "--max-forward-calls", "20", *TINY])
    assert status == 0
    table = pd.read_csv(out / "samplers.csv")
    names = [sampler.name for sampler in DEFAULT_SAMPLERS]
    assert table["sampler"].tolist() == names == ["greedy", "stochastic x2", "stochastic x4", "beam x2", "beam x4",
                                                  "DFS T=20%", "DFS T=9%", "DFS T=0.5%"]
    assert {"solutions_found_percent", "candidates_per_task", "accuracy_product_percent",
            "capped_searches"} <= set(table.columns)
    markdown = (out / "samplers.md").read_text()
    assert all(f"| {name} |" in markdown for name in names)
    rows = table.set_index("sampler")
    assert (rows["candidates_per_task"] >= 1).all()
    # the bigram model has ~50 answers above 0.5%: the --max-forward-calls cap must stop that search
    assert rows.loc["DFS T=0.5%", "capped_searches"] > 0
    assert rows.loc["DFS T=20%", "capped_searches"] == 0
    assert "samplers.md" in capsys.readouterr().out


# -- a right answer travels all the way to a score of 1 ------------------------------------------------

def test_a_right_answer_found_under_augmentations_is_selected_and_scores(model_folder, tasks, tmp_path, monkeypatch):
    """The sampler (faked) finds the right answer and a decoy in every augmentation's own frame; the
    product of experts (faked, so that only the right answer is probable in every view) must pick it,
    and the submission must then score it right."""
    task = tasks[TASK_IDS[0]]
    right = task.test[0].output
    decoy = np.asarray(right).copy()
    decoy[0, 0] = (int(decoy[0, 0]) + 1) % 10
    solver = make_solver(model_folder, SETTINGS.replace(sampler=SamplerSettings("greedy")))
    encoder = solver.encoder

    def fake_search(engine, prompts, *arguments, **keywords):
        # the decoy is the likelier single sample everywhere: only the scoring can rescue the right answer
        results = []
        for prompt_ids in prompts:
            view = next(a for a in current["views"] if np.array_equal(
                prompt_ids, encoder.encode_prompt(a.apply_pairs(task.train), a.apply_grid(task.test[0].input),
                                                  max_len=solver.settings.max_len).ids))
            results.append(SearchResult([
                Completion(tuple(encoder.encode_answer(view.apply_grid(decoy)).tolist()), 0.1),
                Completion(tuple(encoder.encode_answer(view.apply_grid(right)).tolist()), 0.3)]))
        return results

    def fake_nlls(engine, encoder, train, test_input, candidates, augmentations, *rest):
        return np.array([[0.2 if grids_equal(c, right) else 5.0] * len(augmentations) for c in candidates])

    views = solver.views

    def remembered_views(self, task, index, settings=None):
        inference, scoring = views(task, index, settings)
        current["views"] = inference
        return inference, scoring

    current = {}
    monkeypatch.setattr(solver_module, "search", fake_search)
    monkeypatch.setattr(solver_module, "augmented_nlls", fake_nlls)
    monkeypatch.setattr(Solver, "views", remembered_views)
    run = solve(tasks.select([task.id]), solver, tmp_path / "run", progress=False)
    test = to_json(run.records[task.id])["test"][0]
    assert len(test["candidates"]) == 2  # each found under every augmentation, merged in the original frame
    assert all(len(c["generation_nlls"]) == SETTINGS.inference_augmentations for c in test["candidates"])
    assert np.array_equal(np.array(test["attempts"][0]), right)  # PoE put the right answer first
    assert to_json(run.records[task.id])["correct"] == [True]
    assert run.score.correct == 1 and run.score.score == 1.0
    submission = read_json(tmp_path / "run" / "submission.json")
    assert submission[task.id][0]["attempt_1"] == grid_to_json(right)
