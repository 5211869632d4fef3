"""``arc-kit estimate`` on the run folders the kit writes: measured speeds on the device that measured them, the
prior's on the device asked about, never one under the other's headline; the run's own tasks by default; the
planner's rungs in a time budget."""

from __future__ import annotations

import pytest
from test_planner import MEASURED, measured_records

from arc_kit.cli import main
from arc_kit.model.description import read_model_folder
from arc_kit.run.estimates import Machine, estimate_from_folder, plan, read_measured_run
from arc_kit.run.expectations import LLAMA_1B, expected_seconds, gpu_named, guessed_speeds, shape_of_folder
from arc_kit.run.planner import FALLBACK, Planner, Speeds, hours, measure, speeds_from_records, work_units
from arc_kit.settings import TEST_TIME_TRAINING, SolveSettings, solve_preset
from arc_kit.text import TaskEncoder, Vocabulary


def write_measured_run(folder, kaggle_files, task_ids, info=None):
    """A run folder as a solve of ``kaggle_files`` leaves it, with ``measured_records``' records."""
    from arc_kit.run.record_json import append_record
    from arc_kit.run.runs import RECORDS_FILE, open_run

    open_run(folder, MEASURED, {"dataset": str(kaggle_files.challenges), **(info or {})})
    records, _ = measured_records(task_ids)
    for record in records.values():
        append_record(folder / RECORDS_FILE, record)
    return records


def write_kaggle_run(working, task_set, records, settings=MEASURED, shape=None) -> None:
    """A Kaggle run's working folder as the pool leaves it: its run in arc_kit_run/, whose run.json names a model and
    a test file that are not on this machine and the 4 L4s that ran it; the challenges its workers were given in
    tasks.json; the speeds with the 8 workers that measured them in speeds.json."""
    from dataclasses import asdict

    from arc_kit.data.jsonio import write_json_atomically
    from arc_kit.run.record_json import append_record
    from arc_kit.run.runs import RECORDS_FILE, open_run

    run = working / "arc_kit_run"
    open_run(run, settings, {"model": "/kaggle/input/arc-model/transformers/v/1", "workers": 4, "gpus": 4,
                             "device": "NVIDIA L4", "dataset": "/kaggle/input/arc-prize/arc-agi_test_challenges.json",
                             **({"model_shape": asdict(shape)} if shape else {})})
    write_json_atomically(run / "tasks.json", task_set.without_solutions().challenges_json())
    write_json_atomically(run / "speeds.json", {**Speeds().to_json(), "workers": 8})
    for record in records.values():
        append_record(run / RECORDS_FILE, record)
    (working / "submission.json").write_text("{}")


def test_a_measured_figure_is_every_task_at_the_measured_speeds_on_the_device_that_measured_them(
        tmp_path, kaggle_files, small_task_set, model_folder):
    records = write_measured_run(tmp_path / "run", kaggle_files, small_task_set.ids, {"device": "CPU"})
    encoder = read_model_folder(model_folder).encoder(max_len=MEASURED.max_len)
    measured = speeds_from_records(records, small_task_set, encoder, MEASURED)
    target = SolveSettings(inference_augmentations=2, scoring_augmentations=8, ttt=TEST_TIME_TRAINING.replace(steps=3))
    budget = read_model_folder(model_folder).token_budget()
    for wanted, settings in ((None, MEASURED), (target, target.replace(max_len=budget))):
        estimate = estimate_from_folder(tmp_path / "run", small_task_set, model_folder, wanted)
        figure = estimate.figure("measured")
        assert figure.speeds.to_json() == {**measured.to_json(), "guess": figure.speeds.guess}  # all measured
        assert figure.machine == Machine("CPU", 0, 1) and estimate.settings == settings
        counting = read_model_folder(model_folder).encoder(max_len=settings.max_len)
        expected = {"training": 0.0, "generation": 0.0, "scoring": 0.0}
        for task in small_task_set.tasks():
            units = work_units(measure(task, counting, settings.max_len), settings)
            for part in expected:
                expected[part] += getattr(measured, part) * units[part]
        assert figure.seconds == pytest.approx({**expected, "total": sum(expected.values())})
        assert estimate.figure("guessed").machine == Machine("CPU", 0, 1)  # the prior, on the same CPU


def test_speeds_measured_on_one_device_are_never_put_under_another(tmp_path, kaggle_files, small_task_set,
                                                                  model_folder, capsys):
    write_measured_run(tmp_path / "run", kaggle_files, small_task_set.ids, {"device": "CPU"})
    command = ["estimate", "--records", str(tmp_path / "run"), "--dataset", str(kaggle_files.challenges), "--model",
               str(model_folder), "--gpu", "L4", "--gpus", "4", "--workers-per-gpu", "2"]
    assert main(command) == 0
    printed = capsys.readouterr().out
    estimate = estimate_from_folder(tmp_path / "run", small_task_set, model_folder, device="L4", gpus=4,
                                    workers_per_gpu=2)
    measured, guessed = estimate.figure("measured"), estimate.figure("guessed")
    assert measured.machine == Machine("CPU", 0, 1) and guessed.machine == Machine("L4", 4, 8)
    assert estimate.figure("converted") is None and "no factor between the two is on record" in printed
    assert f"  measured, on CPU, 1 worker: TTT {hours(measured.seconds['training'])}," in printed
    assert f"  guessed, on 4 L4, 8 workers: TTT {hours(guessed.seconds['training'])}," in printed
    # the prior prices a GPU: its workers share its bandwidth, so 8 of them take what one takes
    one = estimate_from_folder(tmp_path / "run", small_task_set, model_folder, device="L4", gpus=4)
    assert one.figure("guessed").seconds == pytest.approx(guessed.seconds)
    # your own factor converts it, and says so
    assert main([*command, "--speedup", "40"]) == 0
    printed = capsys.readouterr().out
    converted = estimate_from_folder(tmp_path / "run", small_task_set, model_folder, device="L4", gpus=4,
                                     workers_per_gpu=2, speedup=40).figure("converted")
    assert converted.seconds["total"] == pytest.approx(measured.seconds["total"] / 8 / 40)
    assert "40x by your --speedup" in printed and "no factor" not in printed
    assert main(["estimate", "--records", str(tmp_path / "run"), "--speedup", "2"]) == 1  # a factor to no GPU


def test_estimate_reads_a_solve_run_its_own_tasks_its_model_and_its_device(tmp_path, model_folder, capsys):
    """A run folder as `solve` writes it (its run.json's model a dict): no --dataset, no --model."""
    from arc_kit import load_dataset
    from arc_kit.run import jobs

    tasks = load_dataset("arc-agi-1/evaluation").head(2)
    settings = solve_preset("smoke").replace(max_len=2048)
    jobs.solve_job(tasks, model_folder, settings, tmp_path / "run", info={"dataset": "arc-agi-1/evaluation"},
                   progress=False)
    run = read_measured_run(tmp_path / "run")
    assert run.model == model_folder and run.machine == Machine("CPU", 0, 1)
    assert run.tasks.ids == tasks.ids and run.default_tasks is run.tasks  # the run's 2 tasks, not the 400
    assert main(["estimate", "--records", str(tmp_path / "run"), "--gpu", "L4", "--gpus", "4"]) == 0
    printed = capsys.readouterr().out
    assert "the run's 2 tasks at the run's settings" in printed and "measured, on CPU, 1 worker" in printed
    assert f"{model_folder.name} (0.1M parameters, 16-bit) on L4" in printed
    assert "guessed, on 4 L4, 4 workers" in printed


def test_estimate_reads_a_kaggle_runs_working_folder_its_tasks_models_shape_device_and_workers(
        tmp_path, small_task_set, capsys):
    records, _ = measured_records(small_task_set.ids)
    write_kaggle_run(tmp_path / "working", small_task_set, records, shape=LLAMA_1B)
    encoder = TaskEncoder(Vocabulary(), max_len=MEASURED.max_len)
    measured = speeds_from_records(records, small_task_set, encoder, MEASURED)
    estimate = estimate_from_folder(tmp_path / "working", target=MEASURED.replace(test_time_training=True))
    figure = estimate.figure("measured")
    assert figure.speeds.measured_tasks == len(small_task_set)  # every finished task of the run, none lost
    assert (figure.speeds.training, figure.speeds.generation, figure.speeds.scoring) == \
        pytest.approx((measured.training, measured.generation, measured.scoring))
    assert figure.machine == Machine("NVIDIA L4", 4, 8)  # its device, and the workers its speeds.json names
    one_worker = sum(getattr(figure.speeds, part) * units for part, units in work_of(small_task_set).items())
    assert figure.seconds["total"] == pytest.approx(one_worker / 8)
    assert any("tasks.json" in note for note in estimate.notes)
    assert any("Llama-3.2-1B (973M parameters, 16-bit)" in note and "not here" in note for note in estimate.notes)
    assert main(["estimate", "--records", str(tmp_path / "working"), "--gpu", "L4", "--gpus", "4",
                 "--workers-per-gpu", "2"]) == 0
    printed = capsys.readouterr().out
    assert f"speeds measured on L4 ({len(small_task_set)} tasks of {tmp_path / 'working' / 'arc_kit_run'}" \
           in printed and "measured, on 4 L4, 8 workers" in printed  # the same device: the measured figure on it
    assert "recorded no speeds" not in printed and "no factor" not in printed


def work_of(tasks) -> dict[str, float]:
    """The work units of ``tasks`` at the measured settings, counted by the kit's vocabulary."""
    encoder = TaskEncoder(Vocabulary(), max_len=MEASURED.max_len)
    settings = MEASURED.replace(test_time_training=True)
    units = [work_units(measure(task, encoder, MEASURED.max_len), settings) for task in tasks.tasks()]
    return {part: sum(unit[part] for unit in units) for part in units[0]}


def test_a_run_whose_tasks_cannot_be_told_is_refused_in_one_line(tmp_path, small_task_set, model_folder):
    from arc_kit.run.runs import RunFolderError

    write_kaggle_run(tmp_path / "working", small_task_set, {})
    (tmp_path / "working" / "arc_kit_run" / "tasks.json").unlink()
    with pytest.raises(RunFolderError, match="names no data set that loads here .* holds no tasks.json"):
        estimate_from_folder(tmp_path / "working", small_task_set, model_folder)
    with pytest.raises(RunFolderError, match="holds no run"):
        estimate_from_folder(tmp_path, small_task_set, model_folder)  # tmp_path/working is two levels down


def test_estimate_warns_when_a_run_recorded_no_speeds_and_prices_without_one(tmp_path, model_folder, kaggle_files,
                                                                           capsys):
    from arc_kit.run.runs import open_run

    open_run(tmp_path / "run", SolveSettings(max_len=2048), {"dataset": str(kaggle_files.challenges)})
    assert main(["estimate", "--records", str(tmp_path / "run"), "--dataset", str(kaggle_files.challenges),
                 "--model", str(model_folder), "--gpu", "H100"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"warning: {tmp_path / 'run'} recorded no speeds (no task finished with the model): every " \
                         "speed below is guessed"
    assert "the device that measured it: a device the run did not record, 1 worker (its run.json)" in printed
    assert main(["estimate", "--dataset", str(kaggle_files.challenges), "--model", str(model_folder)]) == 0
    printed = capsys.readouterr().out
    assert "warning" not in printed and "on CPU: the prior" in printed and "guessed, on CPU, 1 worker" in printed
    assert main(["estimate", "--dataset", str(kaggle_files.challenges), "--gpus", "4"]) == 1  # GPUs of no kind


def test_the_plan_is_the_planners_choice_task_by_task():
    """In ample time every task keeps the settings; in a short time the planner steps down, as it would in a run."""
    settings = solve_preset("paper")
    sizes = [measure_size(index) for index in range(12)]
    speeds = guessed_speeds(LLAMA_1B, gpu_named("L4"), settings, sizes)
    total = sum(speeds.seconds(size, settings) for size in sizes)
    assert plan(sizes, settings, speeds, 10 * total, 1).rungs == {0: 12}
    short = plan(sizes, settings, speeds, total / 3, 2)
    assert sum(short.rungs.values()) == 12 and max(short.rungs) > 0 and short.ends <= total / 3
    clock = [0.0]  # the same tasks through the planner itself
    planner = Planner(sizes, settings, total / 3, speeds, clock=lambda: clock[0], workers=2, longest_first=True)
    chosen = []
    for task_id in list(planner.remaining):
        chosen.append(planner.choose(task_id))
        planner.start(task_id)
        if chosen[-1] != FALLBACK:
            clock[0] += speeds.seconds(planner.sizes[task_id], planner.rungs[chosen[-1]]) / 2
    assert short.rungs == {rung: chosen.count(rung) for rung in set(chosen)}


def measure_size(index: int):
    from arc_kit.run.planner import TaskSize

    return TaskSize(f"t{index:02d}", 1000 + 200 * index, 1500 + 150 * index, 100 + 20 * index, 3)


def test_a_guessed_figure_on_gpus_is_the_tables_cell(small_task_set, model_folder):
    paper = solve_preset("paper")
    guessed = estimate_from_folder(None, small_task_set, model_folder, paper, device="L4", gpus=4,
                                   workers_per_gpu=8).figure("guessed")
    settings = paper.replace(max_len=read_model_folder(model_folder).token_budget())
    encoder = read_model_folder(model_folder).encoder(max_len=settings.max_len)
    sizes = [measure(task, encoder, settings.max_len) for task in small_task_set.tasks()]
    seconds, lanes = expected_seconds(sizes, settings, shape_of_folder(model_folder), gpu_named("L4"), 4)
    assert guessed.seconds == pytest.approx(seconds) and lanes == settings.inference_augmentations
