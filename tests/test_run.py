"""The run layer on its own: records tolerant at every level, run folders that resume or refuse, settings
read strictly, the help that shows a preset's values, and the tables as run folders (resumed, refused,
time-boxed, on Ray's actors).

No model runs here except in the one test of the table on two Ray actors and the one of two solve
processes on one folder (both slow): the tables' per-task work is replaced by a stand-in that writes a
typed record, since what matters is the folder.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

import arc_kit.experiments.tables as tables
from arc_kit.cli import main
from arc_kit.experiments.table_records import AblationRecord, SamplerRecord
from arc_kit.experiments.tables import ABLATION_STAGES, run_ablation, run_table
from arc_kit.run import pool
from arc_kit.method.records import SearchStats, TaskRecord, TestResult, TrainingSummary
from arc_kit.method.experts import Candidate
from arc_kit.outputs import MARKER, OutputRefused, claim_folder
from arc_kit.run.locking import LOCK_FILE
from arc_kit.run.record_json import append_record, from_json, read_records, schema, to_json, write_records
from arc_kit.run.runs import (
    RECORDS_FILE,
    RUN_FILE,
    RUN_KIND,
    RunFolderError,
    check_run,
    choose_tasks,
    clear_run,
    open_run,
    read_settings_file,
    records_file,
    run_clock,
    task_ids_digest,
)
from arc_kit.settings import SOLVE_PRESETS, TEST_TIME_TRAINING, SamplerSettings, SolveSettings

LATER = {"from_a_later_kit": {"nested": [1, 2]}}  # a field no kit knows yet


def task_record_json() -> dict:
    """A record in today's layout with a field of a later kit at every level."""
    candidate = {"grid": [[1, 2]], "generation_nlls": {"s0-c0123456789": 0.5}, "scoring_nlls": [0.25, 0.75], **LATER}
    search = {"forward_calls": 7, "tokens": 40, "capped": ["s1: cap"], **LATER}
    test = {"attempts": [[[1, 2]]], "candidates": [candidate], "inference_augmentations": ["s0-c0123456789"],
            "scoring_augmentations": ["s1-c0123456789", "s2-c0123456789"], "search": search, **LATER}
    return {"task_id": "t1", "test": [test], "timings": {"total": 1.5}, "error": None, "rung": 1,
            "ttt": {"steps": 4, "seconds": 0.5, **LATER}, "correct": [True], **LATER}


def test_a_task_record_keeps_unknown_fields_at_every_level_through_a_rewrite(tmp_path):
    data = task_record_json()
    record = from_json(TaskRecord, data)
    assert record.extra == LATER and record.ttt.extra == LATER
    test = record.tests[0]
    assert test.extra == LATER and test.search.extra == LATER and test.candidates[0].extra == LATER
    assert test.search.forward_calls == 7 and test.candidates[0].scoring_nlls == [0.25, 0.75]
    written = to_json(record)
    for level in (written, written["test"][0], written["test"][0]["search"], written["test"][0]["candidates"][0],
                  written["ttt"]):
        assert level["from_a_later_kit"] == LATER["from_a_later_kit"]
    path = tmp_path / "records.jsonl"
    write_records(path, [record])
    again = to_json(read_records(path)["t1"])
    assert again == written  # a second rewrite changes nothing
    # the aggregates a candidate carries are recomputed, never kept as a field of a later kit
    assert written["test"][0]["candidates"][0]["aggregates"]["product"] == pytest.approx(1.0)
    assert "aggregates" not in test.candidates[0].extra


def test_a_record_of_an_earlier_kit_reads_with_defaults_at_every_level():
    record = from_json(TaskRecord, {"task_id": "old", "test": [{"attempts": [], "candidates": [{"grid": [[3]]}]}]})
    test = record.tests[0]
    assert test.search == SearchStats() and test.extra == {} and test.candidates[0].generation_nlls == {}
    assert record.ttt is None and record.rung == 0 and record.correct is None
    assert from_json(TestResult, to_json(record)["test"][0]).candidates[0].extra == {}
    assert to_json(from_json(TrainingSummary, {"steps": 2})) == to_json(TrainingSummary(steps=2))
    assert to_json(from_json(Candidate, {"grid": [[1]], "generation_nlls": {"a": 1}})) == \
        to_json(Candidate(np.array([[1]], dtype=np.uint8), {"a": 1.0}))


def test_the_record_layouts_are_derived_from_their_dataclasses():
    """The kinds a record's fields are held to come from its annotations; here against the schemas the kit kept by
    hand beside the classes until they were derived (the same, so every record file reads as before)."""
    from arc_kit.experiments.table_records import SamplerResult

    assert schema(TaskRecord) == {
        "task_id": "string", "test": "list of object", "timings": "object of number", "error": "string or null",
        "traceback": "string or null", "rung": "integer", "ttt": "object or null", "correct": "list of boolean or null",
        "skipped": "string or null", "retried_after": "string or null", "deadline_hit": "string or null"}
    assert schema(SearchStats) == {
        "forward_calls": "integer", "tokens": "integer", "answers": "integer", "not_grids": "integer",
        "capped": "list of string", "dropped": "object of integer", "prompt_tokens": "list of integer",
        "dropped_train_pairs": "integer", "engine_steps": "integer", "draft_tokens": "integer",
        "draft_accepted": "integer"}
    assert schema(TestResult) == {"attempts": "list of list", "candidates": "list of object",
                                  "inference_augmentations": "list of string",
                                  "scoring_augmentations": "list of string", "search": "object or null"}
    assert schema(TrainingSummary) == {"steps": "integer", "seconds": "number", "skipped": "string or null",
                                       "first_loss": "number or null", "last_loss": "number or null",
                                       "stopped": "string or null"}
    assert schema(SamplerResult) == {"seconds": "number", "candidates": "list of integer", "found": "list of boolean",
                                     "correct": "object of list of boolean",
                                     "correct_top1": "object of list of boolean or null",
                                     "peak_memory_gb": "number or null", "capped": "integer"}
    assert schema(AblationRecord)["stages"] == "object of list of list of list"  # a grid: a list of rows
    assert schema(Candidate) == {"grid": "list", "generation_nlls": "object of number",
                                 "scoring_nlls": "list of number"}
    with pytest.raises(ValueError, match="the record needs a task_id"):
        from_json(TaskRecord, {"test": []})
    with pytest.raises(ValueError, match=r"the record.test\[0\].search.capped is a string, expected a list of strings"):
        from_json(TaskRecord, {"task_id": "t", "test": [{"search": {"capped": "no"}}]})


def ablation_json() -> dict:
    return {"task_id": "t1", "stages": {stage: [[[[1]], [[2]]]] for stage in ABLATION_STAGES},
            "candidates": {"+16xAug": [2], "+DFS": [3]}, "probabilities": "full",
            "ttt": {"steps": 1, "seconds": 0.1, **LATER}, "dfs_capped": [],
            "correct": {stage: [stage == "+DFS"] for stage in ABLATION_STAGES},
            "correct_top1": {stage: [False] for stage in ABLATION_STAGES},
            "seconds": {"baseline": 0.5}, "peak_memory_gb": {}, **LATER}


def sampler_json() -> dict:
    result = {"seconds": 1.0, "candidates": [3], "found": [True], "correct": {"product": [True]},
              "correct_top1": {"product": [False]}, "peak_memory_gb": None, "capped": 1, **LATER}
    return {"task_id": "t1", "ttt": {"steps": 1, **LATER}, "samplers": {"greedy": result}, "probabilities": "full",
            "scoring_seconds": 0.5, **LATER}


@pytest.mark.parametrize("kind, data", [(AblationRecord, ablation_json()), (SamplerRecord, sampler_json())],
                         ids=["ablation", "samplers"])
def test_table_records_round_trip_with_unknown_fields_and_read_their_old_layout(tmp_path, kind, data):
    record = from_json(kind, data)
    assert record.extra == LATER and record.ttt.extra == LATER
    assert json.loads(json.dumps(to_json(record))) == {**data, "ttt": to_json(record.ttt)}
    path = tmp_path / records_file("x")
    append_record(path, record)
    assert to_json(read_records(path, kind)["t1"]) == to_json(record)
    old = {key: value for key, value in data.items() if key not in ("correct_top1", *LATER)}
    assert from_json(kind, old).extra == {}
    if kind is SamplerRecord:
        assert record.samplers["greedy"].extra == LATER and record.samplers["greedy"].capped == 1
        entry = {key: value for key, value in data["samplers"]["greedy"].items() if key != "correct_top1"}
        assert from_json(SamplerRecord, {**old, "samplers": {"greedy": entry}}).samplers["greedy"].correct_top1 is None
    else:
        assert from_json(kind, old).correct_top1 is None
        assert np.array_equal(record.stages["+DFS"][0][1], [[2]])
    with pytest.raises(ValueError, match="task_id"):
        from_json(kind, {"stages": {}})


# -- run folders ------------------------------------------------------------------------------------------

SETTINGS = SolveSettings(max_len=2048)


def test_an_old_run_json_without_todays_fields_resumes_with_their_defaults(tmp_path):
    stored = SETTINGS.to_json()
    for name in ("attempts", "probabilities"):  # fields later kits added, at today's defaults
        stored.pop(name)
    stored["ttt"].pop("gradient_checkpointing")
    (tmp_path / RUN_FILE).write_text(json.dumps({"settings": stored, "dataset": "d"}))
    assert check_run(tmp_path, SETTINGS, {"dataset": "d"}) is True
    with pytest.raises(OutputRefused, match="holds files that arc-kit did not make"):
        open_run(tmp_path, SETTINGS, {"dataset": "d"})  # a marker or nothing
    claim_folder(tmp_path / "made", RUN_KIND, "solve")  # a run folder of the kit's with such a run.json resumes
    (tmp_path / "made" / RUN_FILE).write_text(json.dumps({"settings": stored, "dataset": "d"}))
    assert open_run(tmp_path / "made", SETTINGS, {"dataset": "d"}) == tmp_path / "made"
    assert json.loads((tmp_path / "made" / RUN_FILE).read_text())["settings"] == stored  # resumed: nothing rewritten


def test_a_neutral_change_resumes_and_a_change_of_results_is_refused_naming_the_field(tmp_path):
    open_run(tmp_path, SETTINGS, {"task_ids_digest": "abc"})
    assert check_run(tmp_path, SETTINGS.replace(scoring_batch_size=3), {"task_ids_digest": "abc"})
    with pytest.raises(RunFolderError, match=r"other settings \(ttt.steps 64 -> 8\).*--restart"):
        open_run(tmp_path, SETTINGS.replace(ttt=TEST_TIME_TRAINING.replace(steps=8)))
    open_run(tmp_path, SETTINGS.replace(ttt=TEST_TIME_TRAINING.replace(steps=8)), restart=True)  # discarded, then new
    assert check_run(tmp_path, SETTINGS.replace(ttt=TEST_TIME_TRAINING.replace(steps=8)))


def test_another_data_set_is_refused_by_its_task_ids_or_without_them_by_its_name(tmp_path, small_task_set):
    digest = task_ids_digest(small_task_set)
    open_run(tmp_path / "a", SETTINGS, {"dataset": "one.json", "task_ids_digest": digest})
    assert check_run(tmp_path / "a", SETTINGS, {"dataset": "/elsewhere/one.json", "task_ids_digest": digest})
    with pytest.raises(RunFolderError, match="another data set"):
        check_run(tmp_path / "a", SETTINGS, {"dataset": "one.json",
                                             "task_ids_digest": task_ids_digest(small_task_set.head(2))})
    open_run(tmp_path / "b", SETTINGS, {"dataset": "one.json"})
    with pytest.raises(RunFolderError, match=r"another data set \(one.json, not two.json\)"):
        open_run(tmp_path / "b", SETTINGS, {"dataset": "two.json"})


def test_clearing_a_run_discards_its_records_and_tables_but_nothing_else(tmp_path):
    open_run(tmp_path, SETTINGS)
    for name in (records_file(), records_file("ablation"), "ablation.md", "worker-0/" + records_file("ablation"),
                 "notes.txt"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("{}\n")
    with pytest.warns(UserWarning, match="kept in .* what arc-kit did not make there: notes.txt, worker-0/"):
        clear_run(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == [MARKER, LOCK_FILE, "notes.txt", "worker-0"]


def test_settings_from_json_strictly_names_unknown_fields_at_any_depth(tmp_path):
    data = SETTINGS.to_json()
    assert SolveSettings.from_json(data, strict=True) == SETTINGS
    with pytest.raises(ValueError, match=r"unknown SolveSettings field\(s\): treshold; known: sampler"):
        SolveSettings.from_json({**data, "treshold": 0.1}, strict=True)
    with pytest.raises(ValueError, match=r"unknown SamplerSettings field\(s\): tresh"):
        SolveSettings.from_json({**data, "sampler": {**data["sampler"], "tresh": 1}}, strict=True)
    assert SolveSettings.from_json({**data, "treshold": 0.1}) == SETTINGS  # lenient: dropped
    (tmp_path / RUN_FILE).write_text(json.dumps({"settings": {**data, "typo": 1}}))
    with pytest.raises(ValueError, match="typo"):
        read_settings_file(tmp_path / RUN_FILE)
    (tmp_path / "settings.json").write_text(json.dumps(data))
    assert read_settings_file(tmp_path / "settings.json") == SETTINGS


def help_of(capsys, *command) -> str:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def option_help(help_text: str, flag: str) -> str:
    """What ``--help`` says of ``flag`` and after: its own line (``--flag METAVAR help``), not the usage's ``[--flag]``."""
    return help_text[re.search(rf"(?<!\[){re.escape(flag)} [A-Z_]+ ", help_text).start():]


def default_shown(help_text: str, flag: str) -> str:
    """The default that ``--help`` gives for ``flag``."""
    return option_help(help_text, flag).split("(default: ", 1)[1].split(")", 1)[0]


def test_the_help_of_dry_run_shows_the_dry_run_presets_values(capsys):
    dry, paper = SOLVE_PRESETS["dry-run"], SOLVE_PRESETS["paper"]
    assert (dry.sampler.threshold, dry.ttt.steps, dry.inference_augmentations, dry.max_len) != \
        (paper.sampler.threshold, paper.ttt.steps, paper.inference_augmentations, paper.max_len)
    shown = help_of(capsys, "dry-run")
    for flag, value in (("--threshold", dry.sampler.threshold), ("--ttt-steps", dry.ttt.steps),
                        ("--augmentations", dry.inference_augmentations), ("--max-len", dry.max_len),
                        ("--ttt-lr", dry.ttt.learning_rate)):
        assert default_shown(shown, flag) == str(value), flag
    assert "the 'dry-run' preset" in shown and default_shown(shown, "--tasks") == "5; 0 for all"
    assert "the shortest by prompt tokens" in option_help(shown, "--tasks")[:60]
    solve_help = help_of(capsys, "solve")
    assert default_shown(solve_help, "--threshold") == str(paper.sampler.threshold)
    assert "the first by id" in option_help(solve_help, "--tasks")[:60]


def test_the_help_of_sudoku_evaluate_is_generated_from_its_settings(capsys):
    from arc_kit.settings import SudokuEvalSettings

    shown = help_of(capsys, "sudoku", "evaluate")
    defaults = SudokuEvalSettings().solve
    for flag, value in (("--threshold", defaults.sampler.threshold),
                        ("--augmentations", defaults.inference_augmentations),
                        ("--max-forward-calls", defaults.sampler.max_forward_calls)):
        assert default_shown(shown, flag) == str(value), flag


def test_choose_tasks_takes_ids_or_the_first_by_id_and_keeps_every_task_without_either(small_task_set):
    assert choose_tasks(small_task_set, task_ids=["a1b2c3d4"]).ids == ["a1b2c3d4"]
    assert choose_tasks(small_task_set, count=2).ids == sorted(small_task_set.ids)[:2]
    assert choose_tasks(small_task_set).ids == small_task_set.ids
    with pytest.raises(ValueError, match="needs a model"):
        choose_tasks(small_task_set, count=1, pick="shortest")
    with pytest.raises(ValueError, match="unknown pick"):
        choose_tasks(small_task_set, count=1, pick="longest")


def test_the_deadline_and_stop_time_of_a_budget_and_the_training_preset_a_model_calls_for():
    from arc_kit.model.training import training_settings_for
    from arc_kit.settings import TRAINING_PRESETS

    assert run_clock(None, 30) == (None, None)
    limit = 1000.0 + 2 * 3600  # the deadline is the safety margin before it, the stop time the stop margin
    assert run_clock(2, 30, started=1000.0) == (limit - 30 * 60, limit)
    assert run_clock(2, 30, 10, started=1000.0) == (limit - 30 * 60, limit - 10 * 60)
    assert training_settings_for("micro") == TRAINING_PRESETS["from-scratch"]  # a model preset: trained in full
    assert training_settings_for("runs/some-folder") == TRAINING_PRESETS["paper"]
    assert training_settings_for("micro", "smollm2-cpu") == TRAINING_PRESETS["smollm2-cpu"]


# -- the tables as run folders ----------------------------------------------------------------------------

def stand_in_ablation(calls: list):
    """A stand-in for ``tables.ablation_task``: every stage right on the first test output, the task recorded."""
    def work(solver, task, threshold=None):
        calls.append(task.id)
        outputs = len(task.test_outputs)
        flags = {stage: [index == 0 for index in range(outputs)] for stage in ABLATION_STAGES}
        return AblationRecord(task.id, correct=flags, correct_top1=flags, seconds={"baseline": 1.0})
    return work


def test_a_table_run_starts_no_task_past_its_deadline_resumes_and_refuses_other_settings(tmp_path, small_task_set,
                                                                                          monkeypatch):
    calls = []
    stand_in = stand_in_ablation(calls)
    clock = [1000.0]

    def an_hour_each(solver, task, threshold=None):
        clock[0] += 3600
        return stand_in(solver, task)
    monkeypatch.setattr(tables, "ablation_task", an_hour_each)
    monkeypatch.setattr(pool, "time", SimpleNamespace(time=lambda: clock[0], monotonic=lambda: clock[0],
                                                      sleep=lambda seconds: None))
    solver = SimpleNamespace(settings=SETTINGS)
    out = tmp_path / "ablation"
    first = run_ablation(small_task_set, solver, out, progress=False, deadline=clock[0] + 60)  # one task, then no more
    assert calls == small_task_set.ids[:1] and list(first.records) == calls
    assert (first.table["test_outputs"] == len(small_task_set[calls[0]].test_outputs)).all()  # the table so far
    run = run_ablation(small_task_set, solver, out, progress=False)  # the rest
    assert calls == small_task_set.ids
    assert list(read_records(out / records_file("ablation"), AblationRecord)) == small_task_set.ids  # in task order
    assert list(run.records) == small_task_set.ids
    assert (run.table["correct"] == 3).all() and (run.table["test_outputs"] == 4).all()  # one task has two tests
    assert (out / "ablation.md").read_text() == run.markdown + "\n"
    again = run_ablation(small_task_set, solver, out, progress=False)  # every record found: nothing computed
    assert len(calls) == 3 and again.markdown == run.markdown
    other = SimpleNamespace(settings=SETTINGS.replace(sampler=SamplerSettings(threshold=0.2)))
    with pytest.raises(RunFolderError, match=r"other settings \(sampler.threshold 0.09 -> 0.2\)"):
        run_ablation(small_task_set, other, out, progress=False)
    assert len(calls) == 3


def test_the_table_commands_refuse_a_folder_of_other_settings_before_any_work(tmp_path, capsys, model_folder):
    out = tmp_path / "table"
    open_run(out, SETTINGS.replace(test_time_training=True), {"dataset": "arc-agi-1/evaluation"})
    for command in ("ablation", "samplers"):
        status = main([command, "--model", str(model_folder), "--task-ids", "00576224", "--out", str(out),
                       "--max-len", "2048", "--ttt-steps", "1", "--device", "cpu"])
        err = capsys.readouterr().err
        assert status == 1 and "other settings (ttt.steps 64 -> 1)" in err and "--restart" in err
    assert sorted(path.name for path in out.iterdir()) == [MARKER, LOCK_FILE, RUN_FILE]


def test_the_table_commands_take_the_pools_workers_and_hours(tmp_path, capsys, monkeypatch, model_folder):
    """``--workers``, ``--workers-per-gpu`` and ``--hours`` (less ``--safety-minutes``) reach the pool, as a solve's do."""
    given = {}

    def pooled(tasks, outputs, settings, out, **options):
        given.update(options, command=outputs.command, samplers=len(outputs.samplers))
        return SimpleNamespace(markdown="the table")
    monkeypatch.setattr(tables, "run_in_pool", pooled)
    started = time.time()
    for command in ("ablation", "samplers"):
        assert main([command, "--model", str(model_folder), "--task-ids", "00576224", "--out", str(tmp_path / command),
                     "--workers", "3", "--workers-per-gpu", "2", "--hours", "2", "--safety-minutes", "30"]) == 0
        assert given["command"] == command and given["samplers"] == (8 if command == "samplers" else 0)
        assert given["workers"] == 3 and given["workers_per_gpu"] == 2 and given["model"] == model_folder
        assert started + 5400 <= given["deadline"] <= time.time() + 5400  # 2 hours less 30 minutes from now
    assert "the table" in capsys.readouterr().out


@pytest.mark.processes
@pytest.mark.slow
def test_the_ablation_on_two_ray_actors_covers_every_task(tmp_path, model_folder):
    from arc_kit.data.datasets import load_tasks

    tasks = load_tasks("arc-agi-1/evaluation").select(["00576224", "66e6c45b"])
    settings = SolveSettings(sampler=SamplerSettings("dfs", threshold=0.05, max_forward_calls=50),
                             inference_augmentations=2, scoring_augmentations=2,
                             ttt=TEST_TIME_TRAINING.replace(steps=1), max_len=2048)
    run = run_table("ablation", tasks, model_folder, settings, tmp_path / "run", workers=2,
                    load_options={"device": "cpu"}, progress=False)
    assert sorted(run.records) == sorted(tasks.ids) and (run.table["test_outputs"] == 2).all()
    written = read_records(tmp_path / "run" / records_file("ablation"), AblationRecord)
    assert sorted(written) == sorted(tasks.ids) and all(r.ttt.steps == 1 for r in written.values())
    assert json.loads((tmp_path / "run" / RUN_FILE).read_text())["table"] == "ablation"



@pytest.mark.processes
@pytest.mark.slow
def test_two_solve_runs_started_together_on_one_folder_solve_each_task_once(tmp_path, model_folder, make_task_json,
                                                                           split_kaggle):
    """Two ``arc-kit solve`` processes on one ``--out``: one holds the folder, the other is refused naming it (or,
    started after the first ended, finds every task done); one complete submission, one record per task."""
    from arc_kit.data.submission import submission_problems
    from arc_kit.data.task_files import parse_tasks

    challenges, _ = split_kaggle({f"task{index:02d}": make_task_json(seed=index) for index in range(8)})
    (tmp_path / "challenges.json").write_text(json.dumps(challenges))
    command = [sys.executable, "-m", "arc_kit", "solve", "--dataset", str(tmp_path / "challenges.json"), "--out",
               str(tmp_path / "out"), "--model", str(model_folder), "--device", "cpu", "--sampler", "greedy",
               "--ttt-steps", "5", "--augmentations", "1", "--scoring-augmentations", "1", "--max-len", "2048"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(run.wait(timeout=600), *run.communicate()) for run in runs]
    assert sorted(status for status, _, _ in results) in ([0, 0], [0, 1]), results
    for status, out, err in results:
        assert "Traceback" not in err
        if status == 1:
            assert "is in use by process" in err and str(tmp_path / "out") in err, err
    submission = json.loads((tmp_path / "out" / "submission.json").read_text())
    assert list(submission) == list(challenges) and submission_problems(submission, parse_tasks(challenges)) == []
    solved = [json.loads(line)["task_id"] for line in (tmp_path / "out" / RECORDS_FILE).read_text().splitlines()]
    assert sorted(solved) == sorted(challenges)  # each task once
