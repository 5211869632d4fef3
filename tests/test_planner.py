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
from arc_kit.run.runs import solve
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
    budget = 6.0  # seconds for all six tasks: too little for the configured settings on this machine
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


# -- speeds measured by a finished run, and the estimate built on them ------------------------------

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


def write_measured_run(folder, kaggle_files, task_ids):
    from arc_kit.run.record_json import append_record
    from arc_kit.run.runs import RECORDS_FILE, open_run

    open_run(folder, MEASURED, {"dataset": str(kaggle_files.challenges)})
    records, _ = measured_records(task_ids)
    for record in records.values():
        append_record(folder / RECORDS_FILE, record)
    return records


def test_estimate_from_folder_prices_every_task_at_the_measured_speeds(tmp_path, kaggle_files, small_task_set,
                                                                       model_folder):
    from arc_kit.model.loading import load_encoder, token_budget_of
    from arc_kit.run.estimates import estimate_from_folder
    from arc_kit.run.planner import speeds_from_records

    records = write_measured_run(tmp_path / "run", kaggle_files, small_task_set.ids)
    encoder = load_encoder(model_folder, max_len=MEASURED.max_len)
    measured = speeds_from_records(records, small_task_set, encoder, MEASURED)
    target = SolveSettings(inference_augmentations=2, scoring_augmentations=8, ttt=TEST_TIME_TRAINING.replace(steps=3))
    for wanted, settings in ((None, MEASURED), (target, target.replace(max_len=token_budget_of(model_folder)))):
        estimate = estimate_from_folder(tmp_path / "run", small_task_set, model_folder, wanted)
        assert estimate.speeds.to_json() == {**measured.to_json(), "guess": estimate.speeds.guess}  # all measured
        assert estimate.tasks == len(small_task_set) and estimate.settings == settings
        counting = load_encoder(model_folder, max_len=settings.max_len)
        expected = {"training": 0.0, "generation": 0.0, "scoring": 0.0}
        for task in small_task_set.tasks():
            units = work_units(measure(task, counting, settings.max_len), settings)
            for part in expected:
                expected[part] += getattr(measured, part) * units[part]
        assert estimate.seconds == pytest.approx({**expected, "total": sum(expected.values())})
        assert all(estimate.seconds[part] > 0 for part in expected)


def test_the_estimate_command_prints_the_estimate_shared_by_the_workers_in_its_unit(tmp_path, kaggle_files,
                                                                                    small_task_set, model_folder,
                                                                                    capsys):
    from arc_kit.cli import main
    from arc_kit.run.estimates import estimate_from_folder
    from arc_kit.run.planner import hours

    write_measured_run(tmp_path / "run", kaggle_files, small_task_set.ids)
    assert main(["estimate", "--records", str(tmp_path / "run"), "--dataset", str(kaggle_files.challenges),
                 "--model", str(model_folder), "--gpu", "L4", "--gpus", "2", "--speedup", "1.5", "--settings",
                 "smoke"]) == 0
    printed = capsys.readouterr().out
    estimate = estimate_from_folder(tmp_path / "run", small_task_set, model_folder, solve_preset("smoke"))
    assert f"speeds from {len(small_task_set)} tasks" in printed
    assert hours(estimate.seconds["total"] / 3) != hours(estimate.seconds["total"])  # the scale shows
    # every part measured: one worker's seconds over 2 GPUs x 1 worker, 1.5 times faster
    assert f"total {hours(estimate.seconds['total'] / 3)} (h:mm:ss of wall time on 2 L4 x 1 worker(s) each, 1.5x " \
           f"the measured speed; one worker alone: {hours(estimate.seconds['total'])})" in printed
    assert f"TTT {hours(estimate.seconds['training'] / 3)}," in printed
    assert f"{len(small_task_set)} tasks of " in printed
    assert main(["estimate", "--dataset", str(kaggle_files.challenges), "--gpus", "4"]) == 1  # GPUs of no kind


def write_kaggle_run(working, task_set, records, settings=MEASURED, shape=None) -> None:
    """A Kaggle run's working folder as the job leaves it: its run in arc_kit_run/, whose run.json names a model and
    a test file that are not on this machine; the challenges its workers were given in tasks.json."""
    from dataclasses import asdict

    from arc_kit.data.jsonio import write_json_atomically
    from arc_kit.run.record_json import append_record
    from arc_kit.run.runs import RECORDS_FILE, open_run

    run = working / "arc_kit_run"
    open_run(run, settings, {"model": "/kaggle/input/arc-model/transformers/v/1", "workers": 4,
                             "dataset": "/kaggle/input/arc-prize-2026-arc-agi-2/arc-agi_test_challenges.json",
                             **({"model_shape": asdict(shape)} if shape else {})})
    write_json_atomically(run / "tasks.json", task_set.without_solutions().challenges_json())
    for record in records.values():
        append_record(run / RECORDS_FILE, record)
    (working / "submission.json").write_text("{}")


def test_estimate_reads_a_kaggle_runs_working_folder_its_tasks_and_its_models_shape_from_its_records(
        tmp_path, small_task_set, model_folder, capsys):
    from arc_kit.cli import main
    from arc_kit.run.estimates import estimate_from_folder
    from arc_kit.run.expectations import LLAMA_1B, gpu_named
    from arc_kit.run.planner import speeds_from_records

    records, _ = measured_records(small_task_set.ids)
    write_kaggle_run(tmp_path / "working", small_task_set, records, shape=LLAMA_1B)
    encoder = TaskEncoder(Vocabulary(), max_len=MEASURED.max_len)
    measured = speeds_from_records(records, small_task_set, encoder, MEASURED)
    estimate = estimate_from_folder(tmp_path / "working", small_task_set, target=MEASURED.replace(
        test_time_training=True), gpus=4, workers_per_gpu=2, device=gpu_named("L4"))
    assert estimate.speeds.measured_tasks == len(small_task_set)  # every finished task of the run, none lost
    assert (estimate.speeds.training, estimate.speeds.generation, estimate.speeds.scoring) == \
        pytest.approx((measured.training, measured.generation, measured.scoring))
    assert any("tasks.json" in note for note in estimate.notes)
    assert any("Llama-3.2-1B" in note and "not here" in note for note in estimate.notes)
    assert estimate.wall_seconds["total"] == pytest.approx(estimate.seconds["total"] / 8)  # 4 GPUs x 2 workers
    assert main(["estimate", "--records", str(tmp_path / "working"), "--dataset", "arc-agi-1/evaluation",
                 "--tasks", "2", "--gpu", "L4", "--gpus", "4", "--workers-per-gpu", "2"]) == 0
    printed = capsys.readouterr().out
    assert f"speeds from {len(small_task_set)} tasks of {tmp_path / 'working'} (one worker)" in printed
    assert "recorded no speeds" not in printed and "on 4 L4 x 2 worker(s) each" in printed


def test_a_run_whose_tasks_cannot_be_told_is_refused_in_one_line(tmp_path, small_task_set, model_folder):
    from arc_kit.run.estimates import estimate_from_folder
    from arc_kit.run.runs import RunFolderError

    write_kaggle_run(tmp_path / "working", small_task_set, {})
    (tmp_path / "working" / "arc_kit_run" / "tasks.json").unlink()
    with pytest.raises(RunFolderError, match="names no data set that loads here .* holds no tasks.json"):
        estimate_from_folder(tmp_path / "working", small_task_set, model_folder)
    with pytest.raises(RunFolderError, match="holds no run"):
        estimate_from_folder(tmp_path, small_task_set, model_folder)  # tmp_path/working is two levels down


def test_guessed_parts_on_gpus_shared_by_workers_are_priced_as_the_tables_cell(small_task_set, model_folder):
    """The three figures a competitor met (--workers 4, --workers 32, the table): one unit, one price."""
    from arc_kit.model.loading import load_encoder
    from arc_kit.run.estimates import estimate_from_folder
    from arc_kit.run.expectations import gpu_named, shape_of_folder
    from arc_kit.run.estimates import Machine, expected_cell

    paper = solve_preset("paper")
    l4 = gpu_named("L4")
    alone = estimate_from_folder(None, small_task_set, model_folder, paper, gpus=4, workers_per_gpu=1, device=l4)
    shared = estimate_from_folder(None, small_task_set, model_folder, paper, gpus=4, workers_per_gpu=8, device=l4)
    settings = shared.settings
    encoder = load_encoder(model_folder, max_len=settings.max_len)
    sizes = [measure(task, encoder, settings.max_len) for task in small_task_set.tasks()]
    cell = expected_cell(sizes, settings, shape_of_folder(model_folder), Machine(l4, 4, "4x L4"), workers=8)
    assert shared.wall_seconds == pytest.approx(cell.seconds)
    assert alone.wall_seconds["total"] == pytest.approx(alone.seconds["total"] / 4)  # one worker a GPU: no overlap
    # 8 workers a GPU overlap their overheads, not the GPU's own time: faster than one, never more than 8 times
    assert alone.seconds["total"] / 32 * (1 - 1e-9) <= shared.wall_seconds["total"] < alone.wall_seconds["total"]


# -- a queue shared by workers, and each task's caps ---------------------------------------------------------

def test_speeds_round_trip_through_json_and_tolerate_what_is_missing():
    speeds = Speeds()
    speeds.update(SIZE, SolveSettings(test_time_training=False), {"generation": 3.0, "scoring": 0.5})
    again = Speeds.from_json(json.loads(json.dumps(speeds.to_json())))
    assert again == speeds and again.measured_parts == {"generation": 1, "scoring": 1}
    assert Speeds.from_json({"generation": 0.25}) == Speeds(generation=0.25)
    with pytest.raises(ValueError, match="expected an object"):
        Speeds.from_json([1, 2])


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


def test_the_caps_are_a_few_times_the_estimates_and_never_past_the_deadline():
    from arc_kit.run.planner import searches_per_test
    from arc_kit.settings import BudgetSettings

    clock = FakeClock()
    size = TaskSize("t", 1500, 2000, 120, 3, tests=2)
    caps = BudgetSettings(task_factor=3.0, task_minimum=1.0, search_factor=2.0, search_minimum=0.5)
    settings = SolveSettings(inference_augmentations=4, scoring_augmentations=4)
    planner = Planner([size], settings, deadline=clock.now + 1e6, clock=clock, budget=caps)
    budget = planner.budget("t", 0)
    estimate = Speeds().seconds(size, settings)
    assert budget.deadline == pytest.approx(clock.now + 3.0 * estimate)
    generation = Speeds().generation * work_units(size, settings)["generation"]
    assert searches_per_test(settings) == 2  # the first view alone, then the rest as lanes
    assert searches_per_test(settings.replace(inference_augmentations=1)) == 1
    assert budget.search_seconds == pytest.approx(2.0 * generation / (2 * 2))
    planner.deadline = clock.now + 1.0  # the run ends first: so does the task
    assert planner.budget("t", 0).deadline == clock.now + 1.0
    tiny = Planner([size], settings, deadline=clock.now + 1e6, clock=clock,
                   budget=BudgetSettings(task_minimum=600.0, search_minimum=60.0))
    assert tiny.budget("t", 0) == type(budget)(clock.now + 600.0, 60.0)  # the minimums hold
