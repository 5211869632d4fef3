"""The time budget: the ladder of cheaper settings, the planner's choices, and a run that ends on time."""

import json
import time

import numpy as np
import pytest

from arc_kit import load_dataset
from arc_kit.data.submission import submission_problems
from arc_kit.method.solver import Solver
from arc_kit.model.loading import load_model
from arc_kit.run.planner import FALLBACK, Planner, Speeds, TaskSize, measure, work_units
from arc_kit.run.jobs import solve
from arc_kit.settings import TEST_TIME_TRAINING, SamplerSettings, SolveSettings, ladder, smoke, solve_preset
from arc_kit.text import TaskEncoder, Vocabulary

SIZE = TaskSize("t", training_tokens=1500, prompt_tokens=2000, answer_tokens=120, train_pairs=3)


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_every_rung_is_cheaper_than_the_one_before():
    rungs = ladder(SolveSettings())
    assert rungs[0] == SolveSettings()
    costs = [Speeds().seconds(SIZE, rung) for rung in rungs]
    assert all(later < earlier for earlier, later in zip(costs, costs[1:])), costs
    assert rungs[-1].test_time_training is False and rungs[-1].sampler.kind == "dfs"
    assert rungs[-1].sampler.threshold == 0.2


@pytest.mark.parametrize("settings", [
    solve_preset("dry-run"),
    smoke(SolveSettings()),
    SolveSettings(sampler=SamplerSettings("greedy"), inference_augmentations=2, scoring_augmentations=2,
                  ttt=TEST_TIME_TRAINING.replace(steps=4)),
    SolveSettings(inference_augmentations=4, scoring_augmentations=3),
], ids=["dry-run", "kaggle-smoke", "greedy-2", "dfs-4"])
def test_nothing_grows_on_the_way_down_the_ladder_of_a_small_configuration(settings):
    rungs = ladder(settings)
    for earlier, later in zip(rungs, rungs[1:]):
        assert later.inference_augmentations <= earlier.inference_augmentations
        assert later.scoring_augmentations <= earlier.scoring_augmentations
        assert later.ttt.steps <= earlier.ttt.steps
        assert later.test_time_training <= earlier.test_time_training
    costs = [Speeds().seconds(SIZE, rung) for rung in rungs]
    assert all(later <= earlier for earlier, later in zip(costs, costs[1:])), costs
    assert costs[-1] < costs[0]


def test_the_ladder_of_a_greedy_run_has_no_threshold_rung():
    greedy = SolveSettings(sampler=SamplerSettings("greedy"))
    assert len(ladder(greedy)) == len(ladder(SolveSettings())) - 1


def test_plenty_of_time_keeps_the_configured_settings():
    clock = FakeClock()
    sizes = [TaskSize(f"t{i}", 1500, 2000, 120, 3) for i in range(5)]
    planner = Planner(sizes, SolveSettings(), deadline=clock.now + 1e6, clock=clock)
    assert planner.choose("t0") == 0


def test_less_time_steps_down_and_no_time_falls_back():
    clock = FakeClock()
    sizes = [TaskSize(f"t{i}", 1500, 2000, 120, 3) for i in range(5)]
    planner = Planner(sizes, SolveSettings(), deadline=clock.now, clock=clock)
    full = planner.estimate(planner.remaining, 0)
    cheapest = planner.estimate(planner.remaining, len(planner.rungs) - 1)
    planner.deadline = clock.now + (full + cheapest) / 2  # between the dearest and the cheapest plan
    rung = planner.choose("t0")
    assert 0 < rung < len(planner.rungs)
    assert planner.estimate(planner.remaining, rung) <= planner.seconds_left()
    planner.deadline = clock.now + 1e-6
    assert planner.choose("t0") == FALLBACK


def test_tasks_run_cheapest_first():
    sizes = [TaskSize("big", 6000, 8000, 900, 5), TaskSize("small", 300, 400, 20, 2),
             TaskSize("mid", 2000, 2500, 100, 3)]
    planner = Planner(sizes, SolveSettings(), deadline=time.time() + 3600)
    assert planner.remaining == ["small", "mid", "big"]
    planner.done("small", 0, None)
    assert planner.remaining == ["mid", "big"]


def test_measured_timings_replace_the_assumed_speeds():
    assumed, settings = Speeds(), SolveSettings()
    units = work_units(SIZE, settings)
    slow = {"ttt": 10 * assumed.training * units["training"],  # a machine ten times slower in every part
            "generation": 10 * assumed.generation * units["generation"],
            "scoring": 10 * assumed.scoring * units["scoring"]}
    speeds = Speeds()
    speeds.update(SIZE, settings, slow)
    assert speeds.seconds(SIZE, settings) == pytest.approx(10 * assumed.seconds(SIZE, settings))
    untrained = settings.replace(test_time_training=False)
    speeds.update(SIZE, untrained, {"generation": slow["generation"] / 10, "scoring": slow["scoring"] / 10})
    assert speeds.training == pytest.approx(10 * assumed.training)  # no TTT ran: its speed is left alone
    assert speeds.generation == pytest.approx(5.5 * assumed.generation)  # the mean of 10x and 1x


def test_measure_counts_tokens_like_the_encoder():
    task = load_dataset("arc-agi-1/evaluation")["00576224"]
    encoder = TaskEncoder(Vocabulary())
    size = measure(task, encoder)
    assert size.prompt_tokens == len(encoder.encode_prompt(task.train, task.test[0].input))
    assert size.answer_tokens == len(encoder.encode_answer(task.test[0].input))
    assert size.train_pairs == len(task.train)


@pytest.mark.slow
def test_a_budget_too_small_still_ends_on_time_with_a_complete_submission(tmp_path, micro_model):
    tasks = load_dataset("arc-agi-1/evaluation").head(6)
    settings = SolveSettings(sampler=SamplerSettings("greedy"), inference_augmentations=2, scoring_augmentations=2,
                             ttt=TEST_TIME_TRAINING.replace(steps=4), max_len=2048)
    solver = Solver.from_loaded(load_model(micro_model, device="cpu"), settings)
    budget = 3.0  # seconds for all six tasks: too little for the configured settings on this machine
    started = time.time()
    run = solve(tasks, solver, tmp_path / "run", deadline=started + budget, progress=False)
    elapsed = time.time() - started
    assert elapsed < budget + 15  # the last task may overrun a little; nothing starts past the deadline
    submission = json.loads((tmp_path / "run" / "submission.json").read_text())
    assert submission_problems(submission, tasks) == []
    rungs = [record.rung for record in run.records.values()]
    assert len(run.records) == len(tasks)
    assert max(rungs) > 0 or FALLBACK in rungs  # something was cut to fit
    skipped = [record for record in run.records.values() if record.rung == FALLBACK]
    assert all(record.skipped == "out of time" for record in skipped)
    assert np.isfinite(run.score.score)


# -- speeds measured by a finished run (the estimate built on them: test_estimates.py) ---------------------

MEASURED = SolveSettings(ttt=TEST_TIME_TRAINING.replace(steps=4), inference_augmentations=4, scoring_augmentations=4,
                         max_len=2048)


def measured_records(task_ids):
    """Records of a finished run: each task at some rung with its timings, plus ones the speeds must skip."""
    from arc_kit.method.records import TaskRecord, fallback_record

    records = {task_id: TaskRecord(task_id, timings={"ttt": 60.0 + index, "generation": 200.0 + 30 * index,
                                                     "scoring": 5.0 + index, "total": 300.0}, rung=index % 2)
               for index, task_id in enumerate(task_ids)}
    records["ffff0000"] = TaskRecord("ffff0000", timings={"ttt": 500.0, "generation": 500.0}, rung=0)  # unknown task
    return records, {
        "failed": TaskRecord(task_ids[0], timings={"ttt": 900.0, "generation": 900.0}, error="RuntimeError: x"),
        "fallback": fallback_record(task_ids[1], "out of time")}


def reference_speeds(records, tasks, encoder, settings):
    """Per part, the plain mean over the tasks that ran it of seconds per work unit."""
    rungs, per_part = ladder(settings), {"training": [], "generation": [], "scoring": []}
    for task_id, record in records.items():
        if task_id not in tasks:
            continue
        units = work_units(measure(tasks[task_id], encoder, settings.max_len), rungs[record.rung])
        for part, timing in (("training", "ttt"), ("generation", "generation"), ("scoring", "scoring")):
            per_part[part].append(record.timings[timing] / units[part])
    return {part: float(np.mean(values)) for part, values in per_part.items()}


def test_speeds_from_records_are_the_mean_seconds_per_unit_of_the_tasks_that_ran(small_task_set):
    from arc_kit.run.planner import speeds_from_records

    encoder = TaskEncoder(Vocabulary(), max_len=MEASURED.max_len)
    records, skipped = measured_records(small_task_set.ids)
    expected = reference_speeds(records, small_task_set, encoder, MEASURED)
    speeds = speeds_from_records(records, small_task_set, encoder, MEASURED)
    assert (speeds.training, speeds.generation, speeds.scoring) == \
        pytest.approx((expected["training"], expected["generation"], expected["scoring"]))
    assert speeds.measured_tasks == len(small_task_set)
    # a failed task and one that got fallback answers measured nothing
    for name, record in skipped.items():
        with_it = speeds_from_records({**records, record.task_id: record}, small_task_set,
                                      encoder, MEASURED)
        without = speeds_from_records({k: v for k, v in records.items() if k != record.task_id}, small_task_set,
                                      encoder, MEASURED)
        assert (with_it.training, with_it.generation, with_it.measured_tasks) == \
            (without.training, without.generation, without.measured_tasks), name


def test_a_part_that_did_not_run_on_the_first_task_is_the_mean_of_the_tasks_it_ran_on():
    settings, untrained = SolveSettings(), SolveSettings(test_time_training=False)
    units = work_units(SIZE, settings)
    speeds = Speeds()
    speeds.update(SIZE, untrained, {"generation": 1.0, "scoring": 1.0})  # no TTT on the first task
    speeds.update(SIZE, settings, {"ttt": 3.0 * units["training"], "generation": 1.0, "scoring": 1.0})
    assert speeds.training == pytest.approx(3.0)  # the one measurement, not its mean with the assumed 2e-5


# -- a queue shared by workers, and each task's caps ---------------------------------------------------------

def test_speeds_round_trip_through_json_and_tolerate_what_is_missing():
    speeds = Speeds()
    speeds.update(SIZE, SolveSettings(test_time_training=False), {"generation": 3.0, "scoring": 0.5})
    again = Speeds.from_json(json.loads(json.dumps(speeds.to_json())))
    assert again == speeds and again.measured_parts == {"generation": 1, "scoring": 1}
    assert Speeds.from_json({"generation": 0.25}) == Speeds(generation=0.25)
    assert Speeds.from_json({"generation": -5.0, "scoring": 0, "workers": 8}) == Speeds()  # a damaged part: assumed
    with pytest.raises(ValueError, match="^speeds is a list, expected an object$"):
        Speeds.from_json([1, 2])
    with pytest.raises(ValueError, match="^speeds.measured_parts.training is a string, expected an integer$"):
        Speeds.from_json({"measured_parts": {"training": "3"}})


def test_several_workers_share_the_work_left_so_more_of_it_fits():
    clock = FakeClock()
    sizes = [TaskSize(f"t{i}", 1500, 2000, 120, 3) for i in range(8)]
    alone = Planner(sizes, SolveSettings(), deadline=clock.now, clock=clock)
    total = alone.estimate(alone.remaining, 0)
    alone.deadline = clock.now + 0.6 * total  # one process cannot do it all at full settings; two can
    assert alone.choose("t0") > 0
    pair = Planner(sizes, SolveSettings(), deadline=alone.deadline, clock=clock, workers=2)
    assert pair.choose("t0") == 0


def test_a_shared_queue_runs_the_longest_first_and_a_task_put_back_returns_to_its_place():
    sizes = [TaskSize("big", 6000, 8000, 900, 5), TaskSize("small", 300, 400, 20, 2),
             TaskSize("mid", 2000, 2500, 100, 3)]
    planner = Planner(sizes, SolveSettings(), deadline=time.time() + 3600, longest_first=True)
    assert planner.remaining == ["big", "mid", "small"]
    planner.start("big")
    planner.start("mid")
    assert planner.remaining == ["small"]
    planner.requeue("big")
    assert planner.remaining == ["big", "small"]
    planner.done("big", 0, None)
    assert planner.remaining == ["small"]


def test_a_tasks_deadline_is_its_share_of_the_time_left_by_its_share_of_the_work_left():
    clock = FakeClock()
    small, big = TaskSize("small", 1500, 2000, 120, 3, tests=2), TaskSize("big", 1500, 6000, 360, 3)
    settings = SolveSettings(inference_augmentations=4, scoring_augmentations=4)
    planner = Planner([small, big], settings, deadline=clock.now + 1000.0, clock=clock)
    own, rest = (Speeds().seconds(size, settings) for size in (small, big))
    budget = planner.budget("small", 0)
    assert budget.deadline == pytest.approx(clock.now + 1000.0 * own / (own + rest))
    units = work_units(small, settings)  # the searches' share: generation's against scoring's
    generation, scoring = Speeds().generation * units["generation"], Speeds().scoring * units["scoring"]
    assert budget.search_share == pytest.approx(generation / (generation + scoring)) and 0 < budget.search_share < 1
    planner.speeds = Speeds(**{part: 10 * getattr(Speeds(), part) for part in ("training", "generation", "scoring")})
    guessed = planner.budget("small", 0)  # a guess off by any factor: the same caps
    assert (guessed.deadline, guessed.search_share) == pytest.approx((budget.deadline, budget.search_share))
    planner.workers = 2  # two workers share the work: the small task may take twice its share, never past the end
    assert planner.budget("small", 0).deadline == pytest.approx(clock.now + 2000.0 * own / (own + rest))
    planner.start("big")  # the last task: the time left is all its own
    assert planner.budget("small", 0).deadline == clock.now + 1000.0
