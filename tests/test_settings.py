"""The settings are declared once: every class in ``settings/``, every field in one class, every choice checked once;
and their JSON goes through the kit's one codec, each value held to its field's kind."""

from __future__ import annotations

import ast
import dataclasses
import json
import typing
from pathlib import Path

import pytest

import arc_kit.settings as settings_package
from arc_kit.settings import (
    SOLVE_PRESETS,
    TEST_TIME_TRAINING,
    TRAINING_PRESETS,
    LoadSettings,
    LoraTrainingSettings,
    SamplerSettings,
    Settings,
    SolveSettings,
    SudokuEvalSettings,
    TrainingSettings,
    options,
)

PACKAGE = Path(__file__).resolve().parent.parent / "arc_kit"


def settings_classes() -> list[type]:
    """Every settings class ``arc_kit.settings`` hands on."""
    return [value for value in vars(settings_package).values()
            if isinstance(value, type) and issubclass(value, Settings) and value is not Settings]


def declared_twice(classes) -> dict[str, list[str]]:
    """Field name -> the classes that declare it, for every name declared by more than one; a field holding
    nested settings (``ttt``, ``sequences``) is no declaration of their fields."""
    declared: dict[str, list[str]] = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for item in dataclasses.fields(cls):
            if not (isinstance(hints[item.name], type) and issubclass(hints[item.name], Settings)):
                declared.setdefault(item.name, []).append(cls.__name__)
    return {name: owners for name, owners in declared.items() if len(owners) > 1}


def test_no_field_is_declared_in_two_settings_classes():
    classes = settings_classes()
    assert len(classes) >= 10 and LoadSettings in classes and SudokuEvalSettings in classes  # the walk sees them all
    assert declared_twice(classes) == {}


def test_the_walk_finds_a_field_declared_twice_and_passes_over_nested_settings():
    @dataclasses.dataclass(frozen=True)
    class Copy(Settings):
        lora_rank: int = 4  # LoraTrainingSettings declares it
        ttt: LoraTrainingSettings = TEST_TIME_TRAINING  # holds nested settings, as SolveSettings does

    assert declared_twice([*settings_classes(), Copy]) == {"lora_rank": ["LoraTrainingSettings", "Copy"]}


def test_no_settings_class_is_defined_outside_the_settings_package():
    """Parsed, not imported: a class named ``*Settings`` or deriving from ``Settings`` anywhere else in the kit."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("settings/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and (node.name.endswith("Settings") or any(
                    getattr(base, "id", getattr(base, "attr", None)) == "Settings" for base in node.bases)):
                found.add((relative, node.name))
    assert found == set()


def test_both_training_stages_hold_one_training_dataclass_with_their_own_defaults():
    assert typing.get_type_hints(TrainingSettings)["lora"] is LoraTrainingSettings
    assert typing.get_type_hints(SolveSettings)["ttt"] is LoraTrainingSettings
    assert TrainingSettings().lora == LoraTrainingSettings() and SolveSettings().ttt == TEST_TIME_TRAINING
    paper, test_time = TrainingSettings().lora, SolveSettings().ttt
    assert (paper.lora_rank, paper.lora_alpha, paper.batch_size, paper.warmup_ratio) == (256, 24, 4, 0.25)
    assert (test_time.lora_rank, test_time.lora_alpha, test_time.batch_size, test_time.warmup_ratio,
            test_time.steps) == (32, 16, 1, 0.5, 64)
    # the test-time options keep their flags; the initial fine-tune's keep theirs
    ttt = {option.path[1]: option.flag for option in options(SolveSettings) if option.path[0] == "ttt"}
    assert ttt == {"steps": "--ttt-steps", "batch_size": "--ttt-batch-size", "learning_rate": "--ttt-lr",
                   "embedding_learning_rate": "--ttt-embedding-lr", "warmup_ratio": "--ttt-warmup",
                   "lora_rank": "--ttt-rank", "lora_alpha": "--ttt-alpha",
                   "gradient_checkpointing": "--ttt-checkpointing"}
    pretrain = {option.path[-1]: option.flag for option in options(TrainingSettings)}
    assert (pretrain["learning_rate"], pretrain["lora_rank"], pretrain["training_seed"], pretrain["max_tokens"]) == \
        ("--lr", "--rank", "--seed", "--max-len")
    with pytest.raises(ValueError, match="ttt steps must be set"):
        SolveSettings(ttt=TEST_TIME_TRAINING.replace(steps=None))


def test_a_nested_field_may_be_replaced_by_its_name_alone():
    changed = TRAINING_PRESETS["smollm2-gpu"].replace(steps=7, minutes=3.0, max_tokens=512)
    assert (changed.lora.steps, changed.minutes, changed.sequences.max_tokens) == (7, 3.0, 512)
    assert SudokuEvalSettings().replace(threshold=0.2).solve.sampler.threshold == 0.2
    with pytest.raises(TypeError, match="no field 'lerning_rate'"):
        TrainingSettings().replace(lerning_rate=1.0)


@pytest.mark.parametrize("make, phrase", [
    (lambda: SamplerSettings(kind="beams"), "unknown kind 'beams' (--sampler); expected one of: dfs, greedy, sample,"),
    (lambda: SolveSettings(attempts=3), "unknown attempts 3; expected one of: 1, 2"),
    (lambda: TEST_TIME_TRAINING.replace(optimizer="sgd"), "unknown optimizer 'sgd'; expected one of: auto, adamw,"),
    (lambda: LoadSettings(quantization="8bit"), "unknown quantization '8bit'; expected one of: 4bit (or unset)"),
    (lambda: TrainingSettings().replace(precision="fp8"), "unknown precision 'fp8'"),
])
def test_a_choice_is_checked_once_by_the_settings_in_one_line(make, phrase):
    with pytest.raises(ValueError) as error:
        make()
    assert phrase in str(error.value) and "\n" not in str(error.value)
    assert LoadSettings(quantization=None).quantization is None  # an optional choice may be unset


def test_a_bad_choice_on_the_command_line_is_one_line_naming_the_field(capsys, tmp_path):
    from arc_kit.cli import main

    assert main(["solve", "--sampler", "beams", "--out", str(tmp_path / "run"), "--tasks", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "arc-kit solve: error: unknown kind 'beams' (--sampler); expected one of: dfs, greedy, sample, beam"
    assert not (tmp_path / "run").exists()


def test_settings_json_holds_each_value_to_its_kind_and_knows_no_other_layout():
    """A field missing takes the default of where it is held; a field no class declares (another layout's) is dropped,
    or refused where strict; a value not of its field's kind is one line naming its path."""
    data = SOLVE_PRESETS["dry-run"].to_json()
    assert SolveSettings.from_json(json.loads(json.dumps(data)), strict=True) == SOLVE_PRESETS["dry-run"]
    assert SolveSettings.from_json({"ttt": {"steps": 8}}).ttt == TEST_TIME_TRAINING.replace(steps=8)
    other = {**data, "batched": True, "ttt": {**data["ttt"], "seed": 3}}  # fields no settings class declares
    assert SolveSettings.from_json(other) == SOLVE_PRESETS["dry-run"]
    with pytest.raises(ValueError, match=r"^unknown SolveSettings field\(s\): batched; known: sampler, "):
        SolveSettings.from_json(other, strict=True)
    with pytest.raises(ValueError, match=r"^unknown LoraTrainingSettings field\(s\): seed; known: steps, "):
        SolveSettings.from_json({"ttt": other["ttt"]}, strict=True)
    training = TRAINING_PRESETS["smollm2-gpu"].replace(task_sets=("arc-agi-1/training",))
    assert TrainingSettings.from_json(json.loads(json.dumps(training.to_json())), strict=True) == training
    for cls, given, line in [
        (SolveSettings, {"sampler": {"threshold": "0.1"}}, "SolveSettings.sampler.threshold is a string, expected a "
                                                           "number"),
        (SolveSettings, {"test_time_training": "no"}, "SolveSettings.test_time_training is a string, expected a "
                                                      "boolean"),
        (SolveSettings, {"ttt": 8}, "SolveSettings.ttt is a number, expected an object"),
        (SolveSettings, {"inference_augmentations": 2.0}, "SolveSettings.inference_augmentations is a number, expected "
                                                          "an integer"),
        (SudokuEvalSettings, {"solve": {"sampler": {"count": True}}}, "SudokuEvalSettings.solve.sampler.count is a "
                                                                     "boolean, expected an integer"),
        (TrainingSettings, {"data": {"task_sets": ["a", 1]}}, "TrainingSettings.data.task_sets[1] is a number, "
                                                              "expected a string"),
        (LoadSettings, [], "LoadSettings is a list, expected an object"),
    ]:
        with pytest.raises(ValueError) as error:
            cls.from_json(given)
        assert str(error.value) == line


def test_a_run_folder_with_a_field_no_settings_declare_is_resumed_not_refused(tmp_path):
    """``kaggle run`` and ``solve`` read a run folder's settings as any others: a field none declare is dropped."""
    from arc_kit.run.runs import RunFolderError, check_run

    stored = {**SOLVE_PRESETS["dry-run"].to_json(), "batched": True}
    (tmp_path / "run.json").write_text(json.dumps({"settings": stored, "dataset": "d"}))
    assert check_run(tmp_path, SOLVE_PRESETS["dry-run"], {"dataset": "d"})
    with pytest.raises(RunFolderError, match=r"ttt.steps 8 -> 9"):
        check_run(tmp_path, SOLVE_PRESETS["dry-run"].replace(steps=9), {"dataset": "d"})


def test_a_sudoku_evaluation_is_resumed_only_with_its_model_and_settings():
    from arc_kit.sudoku.experiment import _same_evaluation

    settings = SudokuEvalSettings().replace(threshold=0.02, seed=3)
    identity = {"model": "/m", "settings": settings.result_json()}
    stored = {"model": "/m", "settings": settings.to_json()}  # the neutral fields too
    assert _same_evaluation(stored, identity)
    assert _same_evaluation(identity, identity)
    assert not _same_evaluation({**stored, "model": "/other"}, identity)
    assert not _same_evaluation(stored, {**identity, "settings": settings.replace(seed=4).result_json()})
    assert not _same_evaluation({"model": "/m", "settings": {"solve": []}}, identity)


# -- a user's changes (the notebook's CHANGES), checked before anything is made --------------------------------

@pytest.mark.parametrize("changes, line", [
    ({"ttt.step": 4}, "ttt.step: no such setting; did you mean ttt.steps?"),
    ({"steps": 4}, "steps: no such setting; did you mean ttt.steps?"),  # a field by its name alone: where it lives
    ({"zzz": 4}, "zzz: no such setting (`arc-kit settings` lists them)"),
    ({"ttt.steps": "8"}, "ttt.steps must be a whole number (at least 1, at most 1e+09), got '8'"),
    ({"ttt.steps": 0}, "ttt.steps must be at least 1, at most 1e+09, got 0"),
    ({"sampler.threshold": 1.5}, "sampler.threshold must be above 0, at most 1, got 1.5"),
    ({"sampler.kind": "dfss"}, "sampler.kind must be one of: dfs, greedy, sample, beam; got 'dfss'"),
    ({"attempts": True}, "attempts must be one of: 1, 2; got True"),  # True == 1, but no choice of 1 or 2
    ({"test_time_training": "false"}, "test_time_training must be True or False, got 'false'"),
    ({"decoding": None}, "decoding must be one of: authors, strict; got None"),
    ({"ttt": 8}, "ttt holds settings (ttt.steps, ttt.batch_size, ttt.learning_rate, ttt.embedding_learning_rate and "
                 "9 more): name one, or give an object of them"),
    ({"ttt": {"step": 8}}, "ttt.step: no such setting; did you mean ttt.steps?"),
    ({"ttt.step": 4, "seed": -1}, "ttt.step: no such setting; did you mean ttt.steps?; seed must be at least 0, below "
                                  "9.22337e+18, got -1"),
    ([("ttt.steps", 4)], "CHANGES must be an object of settings by their dotted paths, e.g. {\"ttt.steps\": 8}; got "
                         "[('ttt.steps', 4)]"),
    ({"sampler.kind": "beam"}, "a solve searches by dfs or greedy, not 'beam' (sample and beam run in the samplers "
                               "table: arc-kit samplers)"),  # the settings' own check, as they are made
])
def test_a_change_that_the_settings_do_not_take_is_one_line_naming_it_and_what_it_takes(changes, line):
    from arc_kit.settings import changed

    with pytest.raises(ValueError) as error:
        changed(SOLVE_PRESETS["paper"], changes)
    assert str(error.value) == line


def test_changes_are_made_at_once_by_path_or_by_group_and_many_problems_are_cut_to_one_short_line():
    from arc_kit.settings import changed, replace_path

    paper = SOLVE_PRESETS["paper"]
    made = changed(paper, {"ttt": {"steps": 8}, "sampler.threshold": 0.05, "max_len": None})
    assert made == replace_path(replace_path(replace_path(paper, ("ttt", "steps"), 8), ("sampler", "threshold"),
                                             0.05), ("max_len",), None)
    # both ends of a range together: one at a time, the first would be refused against the other's old value
    sequences = changed(TrainingSettings(), {"sequences.min_pairs": 9, "sequences.max_pairs": 12}).sequences
    assert (sequences.min_pairs, sequences.max_pairs) == (9, 12)
    with pytest.raises(ValueError) as error:
        changed(paper, {f"typo{number}": 1 for number in range(40)})
    assert len(str(error.value)) <= 300 and str(error.value).endswith(" more")


def test_arc_kit_settings_lists_every_path_a_change_may_name_with_the_presets_value_in_short_lines(capsys):
    from arc_kit.cli import main
    from arc_kit.settings import described

    assert main(["settings", "--preset", "dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "ttt.steps = 8  (a whole number, at least 1, at most 1e+09 (or None: unset))" in printed
    assert "sampler.kind = 'dfs'  (one of: dfs, greedy, sample, beam)" in printed
    named = [line.split(" = ")[0] for line in printed[1:] if not line.startswith(" ")]
    assert named == [path for path, *_ in described(SolveSettings())] and "ttt.gradient_checkpointing" in named
    assert max(map(len, printed)) <= 300


def test_options_are_applied_at_once_so_that_two_checked_together_are_checked_with_both(capsys, tmp_path):
    from arc_kit.cli import main
    from arc_kit.settings import CompetitionSettings

    with pytest.raises(ValueError, match=r"^stop_minutes \(15\) must lie between 0 and safety_minutes \(45\), and that "
                                         r"below the limit \(0.5 hours\)$"):
        CompetitionSettings(hours=0.5)  # checked as made: the notebook's clock before any model work
    working = tmp_path / "working"
    assert main(["kaggle", "run", "--hours", "0.5", "--input", str(tmp_path / "none"), "--working", str(working)]) == 1
    assert "must lie between 0 and safety_minutes (45)" in capsys.readouterr().err and not working.exists()
    # a limit and its margins given together: checked once all three are set (one at a time, the first would fail)
    assert main(["kaggle", "run", "--hours", "0.5", "--safety-minutes", "10", "--stop-minutes", "5", "--input",
                 str(tmp_path / "none"), "--working", str(working)]) == 1
    assert "no such folder: " in capsys.readouterr().err  # past the clock: no input there
