"""The output rule, complete: one test (or a few) per item of it.

1. No code from a model folder: a config or tokenizer config asking for its own code (``auto_map``) is a no-go
   of check-model and a one-line refusal of every command that loads a model; no prompt, no code run; every
   transformers load of the kit passes ``trust_remote_code=False`` and nothing calls ``input()``.
2. No write follows a link: ``outputs.appending`` refuses one (and a FIFO), ``replacing`` replaces the link
   itself, a sub-folder that is a link is refused; the commands that resume write through these.
3. Deletion by exact name: a user's ``backup_records.jsonl``, ``worker-notes/`` or note inside ``adapter/``
   stays, and is said.
4. A marker or nothing: a folder laid out as the kit's but without its marker is refused in one line.
5. Special files refused in one line (FIFOs, devices, an archive member larger than any task file), every
   numeric option bounded both ways, an unknown device or optimizer refused before any folder is made, Kaggle's
   names checked, an empty ``--model-source`` and a wheel of random bytes refused, damaged timings kept out of
   estimates.
6. The scripts follow the rule: ``gpu_base_parts.py pack`` and ``sampler_report.py``.

The growing fuzz over all of it is ``test_fuzz_commands``. Everything here runs in this process on micro models;
the model's work is replaced by fallback records where a run goes ahead (``no_model_work``).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import QUICK, run

from arc_kit.cli import build_parser
from arc_kit.model.folders import MODEL_KIND
from arc_kit.outputs import (
    MARKER,
    OutputRefused,
    appending,
    claim_folder,
    kit_subfolder,
    read_marker,
    replace_file,
    replacing,
    staged_into,
)
from arc_kit.run.runs import RUN_FILE, RUN_KIND

ROOT = Path(__file__).resolve().parents[1]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def last_line(err: str) -> str:
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]




@pytest.fixture
def victim(tmp_path) -> Path:
    """A file of the user's, outside every folder the kit writes."""
    path = tmp_path / "photo.jpg"
    path.write_bytes(b"\xff\xd8 the user's photo")
    return path


# -- 1: no code from a model folder ------------------------------------------------------------------------------

def hostile_model(source: Path, folder: Path, where: str = "config.json") -> Path:
    """A copy of ``source`` whose ``where`` asks for the folder's own code: ``evil.py``, which would leave a file."""
    shutil.copytree(source, folder)
    (folder / MARKER).unlink(missing_ok=True)
    (folder / "evil.py").write_text(f"open({str(folder.parent / 'RAN')!r}, 'w').write('the folder ran')\n"
                                    "from transformers import LlamaConfig as EvilConfig\n")
    data = json.loads((folder / where).read_text())
    data["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel",
                        "AutoTokenizer": ["evil.EvilTokenizer", None]}
    (folder / where).write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
def test_a_folder_asking_for_its_own_code_is_a_no_go_and_never_runs_nor_asks(tmp_path, capsys, monkeypatch,
                                                                             micro_model, tasks_file, where):
    evil = hostile_model(micro_model, tmp_path / "evil", where)

    def no_prompt(*_):
        raise AssertionError("a prompt was shown")
    monkeypatch.setattr("builtins.input", no_prompt)
    status, out, err = run(capsys, "check-model", evil)
    assert status == 1 and out.strip().splitlines()[-1].startswith("no-go: ") and "auto_map" in out
    assert "never runs a model folder's code" in out and "Traceback" not in out + err
    for argv in (["solve", "--dataset", tasks_file, "--out", tmp_path / "run", "--model", evil, *QUICK],
                 ["kaggle", "build", "--out", tmp_path / "dataset", "--model", evil, "--owner", "someone"],
                 ["held-out", f"evil={evil}", "--dataset", tasks_file, "--tasks", "1", "--device", "cpu"],
                 ["shrink", evil, tmp_path / "shrunk"]):
        status, out, err = run(capsys, *argv)
        assert status == 1 and "auto_map" in out + err and "Traceback" not in out + err, (argv, out, err)
    assert not (tmp_path / "RAN").exists() and not (tmp_path / "dataset").exists()


def source_calls(name: str) -> list[tuple[Path, ast.Call]]:
    """Every call in the kit's source (and its scripts) of a function or method named ``name``."""
    found = []
    for path in [*sorted((ROOT / "arc_kit").rglob("*.py")), *sorted((ROOT / "scripts").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                function = node.func
                called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
                if called == name:
                    found.append((path, node))
    return found


def test_every_transformers_load_refuses_remote_code_and_nothing_asks_for_input():
    assert source_calls("input") == []
    loads = source_calls("from_pretrained") + source_calls("from_config")
    not_code = ("PeftModel", "LoraConfig")  # peft reads an adapter's config and weights
    checked = 0
    for path, call in loads:
        owner = call.func.value.id if isinstance(call.func.value, ast.Name) else ""
        if owner in not_code:
            continue
        flags = [keyword for keyword in call.keywords if keyword.arg == "trust_remote_code"]
        assert flags and isinstance(flags[0].value, ast.Constant) and flags[0].value.value is False, \
            f"{path.relative_to(ROOT)}:{call.lineno} loads without trust_remote_code=False"
        checked += 1
    assert checked >= 6


# -- 2: no write follows a link ----------------------------------------------------------------------------------

def test_appending_refuses_a_link_and_a_fifo_and_replacing_replaces_the_link_itself(tmp_path, victim):
    folder = claim_folder(tmp_path / "run", RUN_KIND, "solve")
    (folder / "records.jsonl").symlink_to(victim)
    before = digest(victim)
    with pytest.raises(OutputRefused, match="symbolic link inside a folder arc-kit writes"):
        with appending(folder / "records.jsonl") as handle:
            handle.write("a record\n")
    os.mkfifo(folder / "worker.log")
    with pytest.raises(OutputRefused, match="no regular file"):  # never a wait on a FIFO nobody reads
        with appending(folder / "worker.log"):
            pass
    (folder / "scores.csv").symlink_to(victim)
    replace_file(folder / "scores.csv", "task_id\n")
    assert not (folder / "scores.csv").is_symlink() and (folder / "scores.csv").read_text() == "task_id\n"
    with pytest.raises(ZeroDivisionError):  # a write that fails leaves the file as it was, and no temporary file
        with replacing(folder / "score.json") as handle:
            handle.write("half")
            raise ZeroDivisionError
    assert not (folder / "score.json").exists() and not list(folder.glob(".*.tmp"))
    assert digest(victim) == before


def test_a_sub_folder_that_is_a_link_is_refused_and_staged_files_replace_links_themselves(tmp_path, victim):
    folder = claim_folder(tmp_path / "model", MODEL_KIND, "create-model")
    users = tmp_path / "users"
    users.mkdir()
    (folder / "adapter").symlink_to(users)
    for write in (lambda: kit_subfolder(folder / "adapter"), lambda: replace_file(folder / "adapter" / "x.json", "{}"),
                  lambda: staged_into(folder / "adapter").__enter__()):
        with pytest.raises(OutputRefused, match="adapter is a symbolic link"):
            write()
    assert list(users.iterdir()) == []
    (folder / "config.json").symlink_to(victim)
    with staged_into(folder) as staging:  # as save_pretrained writes
        (staging / "config.json").write_text("{}")
        (staging / "tokenizer").mkdir()
        (staging / "tokenizer" / "vocab.json").write_text("{}")
    assert (folder / "config.json").read_text() == "{}" and not (folder / "config.json").is_symlink()
    assert (folder / "tokenizer" / "vocab.json").exists() and not list(folder.glob(".arc-kit-staging-*"))
    assert victim.read_bytes() == b"\xff\xd8 the user's photo"


def test_a_resumed_run_never_writes_through_a_link_in_its_folder(tmp_path, capsys, tasks_file, victim, micro_model,
                                                                 no_model_work):
    out = tmp_path / "run"
    command = ["solve", "--dataset", tasks_file, "--out", out, "--model", micro_model, *QUICK]
    assert run(capsys, *command)[0] == 0
    before = digest(victim)
    for name in ("submission.json", "records.jsonl"):  # rewritten whole, and appended to
        (out / name).rename(out / f"{name}.kept")
        (out / name).symlink_to(victim)
        status, _, err = run(capsys, *command)
        assert status == 1 and f"{name} is a symbolic link" in last_line(err)
        (out / name).unlink()
        (out / f"{name}.kept").rename(out / name)
    (out / "scores.csv").symlink_to(victim)
    status, _, err = run(capsys, *command, "--restart")
    assert status == 0, err  # the link itself discarded with the run's files
    assert not (out / "scores.csv").is_symlink() and digest(victim) == before


def test_a_run_folder_with_a_link_at_a_name_of_its_layout_is_refused_before_it_is_written(tmp_path, victim):
    from arc_kit.run.runs import open_run
    from arc_kit.settings import SolveSettings

    out = tmp_path / "run"
    open_run(out, SolveSettings())
    (out / "ablation_records.jsonl").symlink_to(victim)
    with pytest.raises(OutputRefused, match=r"ablation_records.jsonl is a symbolic link .*\(ablation_records.jsonl "
                                            r"is its own name\)"):
        open_run(out, SolveSettings())
    (out / "ablation_records.jsonl").unlink()
    (out / "ray-logs").symlink_to(victim.parent)  # the folder Ray's logs are copied into
    with pytest.raises(OutputRefused, match="ray-logs is a symbolic link"):
        open_run(out, SolveSettings())
    open_run(out, SolveSettings(), restart=True)  # --restart removes the link itself
    assert not (out / "ray-logs").exists() and victim.exists()


# -- 3: deletion by exact name -------------------------------------------------------------------------------------

def test_clearing_deletes_exactly_the_layout_and_says_what_it_kept(tmp_path, victim):
    folder = claim_folder(tmp_path / "run", RUN_KIND, "solve")
    kits = ["run.json", "records.jsonl", "scores.csv", "ablation.md", "ablation_records.jsonl", "samplers.csv",
            "tasks.json", ".records.jsonl.12.3.tmp"]
    users = ["backup_records.jsonl", "worker-notes/a.txt", "worker-0/records.jsonl", "records.jsonl.bak",
             "run.json.old", "claims/t1", "claims.txt", "my_records.jsonl"]
    for name in kits + users:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(name)
    (folder / "ray-logs").symlink_to(victim.parent)  # a link at a layout's name: removed itself
    with pytest.warns(UserWarning, match=r"kept in .* what arc-kit did not make there: backup_records.jsonl, "
                                         r"claims/, claims.txt and 5 more"):
        claim_folder(folder, RUN_KIND, "solve", clear=True)
    left = sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())
    assert left == sorted([MARKER, *users]) and not (folder / "ray-logs").exists() and victim.exists()
    assert RUN_KIND.owns("ablation_records.jsonl") and not RUN_KIND.owns("worker-7/records.jsonl")


def test_overwriting_a_model_keeps_its_adapter_folder_and_a_users_weights(tmp_path, capsys):
    out = tmp_path / "model"
    assert run(capsys, "create-model", "--preset", "micro", "--out", out)[0] == 0
    (out / "adapter").mkdir()
    for name in ("adapter/adapter_config.json", "adapter/notes.txt", "mine.safetensors", "model-00001-of-00002.safetensors"):
        (out / name).write_text(name)
    with pytest.warns(UserWarning, match=r"kept in .* what arc-kit did not make there: adapter/, mine.safetensors$"):
        assert run(capsys, "create-model", "--preset", "micro", "--out", out, "--overwrite")[0] == 0
    assert (out / "adapter" / "notes.txt").exists() and (out / "mine.safetensors").exists()
    assert (out / "adapter" / "adapter_config.json").exists()  # create-model never writes an adapter: not its own
    assert not (out / "model-00001-of-00002.safetensors").exists() and (out / "model.safetensors").exists()


# -- 4: a marker or nothing ----------------------------------------------------------------------------------------

def test_a_folder_that_looks_like_the_kits_but_holds_no_marker_is_refused_in_one_line(tmp_path, capsys, tasks_file,
                                                                                      micro_model, no_model_work):
    old_run = tmp_path / "old-run"
    old_run.mkdir()
    (old_run / RUN_FILE).write_text(json.dumps({"settings": {}}))
    (old_run / "records.jsonl").write_text("")
    (old_run / "notes.txt").write_text("mine")
    command = ["solve", "--dataset", tasks_file, "--out", old_run, "--model", micro_model, *QUICK]
    for flag in ([], ["--restart"]):
        status, _, err = run(capsys, *command, *flag)
        assert status == 1 and "holds files that arc-kit did not make" in last_line(err), err
        assert sorted(path.name for path in old_run.iterdir()) == ["notes.txt", "records.jsonl", RUN_FILE]
    assert read_marker(old_run) is None and (old_run / "notes.txt").read_text() == "mine"
    old_training = tmp_path / "old-training"
    (old_training / "checkpoints" / "step-3").mkdir(parents=True)
    (old_training / "checkpoints" / "step-3" / "progress.json").write_text('{"step": 3}')
    status, _, err = run(capsys, "pretrain", "--model", "micro", "--out", old_training, "--tasks", tasks_file,
                         "--no-resume", "--steps", "1", "--device", "cpu")
    assert status == 1 and "holds files that arc-kit did not make (checkpoints/)" in last_line(err)
    assert (old_training / "checkpoints" / "step-3").exists()
    old_evaluation = tmp_path / "old-evaluation"
    old_evaluation.mkdir()
    (old_evaluation / "evaluation.json").write_text(json.dumps({"model": "m", "settings": {}}))
    from arc_kit.sudoku.experiment import EVALUATION_KIND

    with pytest.raises(OutputRefused, match="holds files that arc-kit did not make"):
        claim_folder(old_evaluation, EVALUATION_KIND, "sudoku evaluate")
    assert not (old_evaluation / MARKER).exists()


# -- 5: special files, numbers, names --------------------------------------------------------------------------------

def test_fifos_and_devices_given_as_files_are_refused_in_one_line(tmp_path, capsys, model_folder):
    fifo = tmp_path / "manifest.json"
    os.mkfifo(fifo)
    status, _, err = run(capsys, "kaggle", "build", "--out", tmp_path / "d", "--model", model_folder, "--owner",
                         "someone", "--image-manifest", fifo)
    assert status == 1 and "is a named pipe (FIFO), expected a Kaggle image manifest" in last_line(err)
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "d").exists()
    for given in (fifo, Path("/dev/zero")):
        status, _, err = run(capsys, "kaggle", "image", given, "--out", tmp_path / "image.json")
        assert status == 1 and "expected a pip freeze list" in last_line(err) and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "image.json").exists()


def test_an_archive_member_larger_than_any_task_file_is_never_read(tmp_path, monkeypatch):
    from arc_kit.data import datasets
    from arc_kit.data.tasks import InvalidDataError

    members = tmp_path / "tasks"
    members.mkdir()
    (members / "a.json").write_text(json.dumps([{"input": [[1]], "output": [[2]]}] * 50))
    (members / "b.json").write_text(json.dumps([{"input": [[1]], "output": [[2]]}]))
    with tarfile.open(tmp_path / "re_arc.tar.gz", "w:gz") as archive:
        archive.add(members, arcname="re_arc/tasks")
    monkeypatch.setattr(datasets, "RE_ARC_MEMBER_BYTES", 400)
    with pytest.warns(UserWarning, match=r"a.json holds 1,\d+ bytes, more than any RE-ARC task file"):
        assert list(datasets.load_re_arc(tmp_path / "re_arc.tar.gz")) == ["b"]
    with pytest.raises(InvalidDataError, match="more than any RE-ARC task file"):
        datasets.load_re_arc(tmp_path / "re_arc.tar.gz", strict=True)


def numeric_options(parser: argparse.ArgumentParser, prefix: tuple = ()):
    """(command, option) of every option of every command that reads a number."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from numeric_options(sub, (*prefix, name))
        elif action.type is not None and getattr(action.type, "__name__", "") in ("int", "float") \
                and not action.choices and not str(action.metavar or "").startswith("{"):  # a choice: checked so
            yield " ".join(prefix), action


def test_every_numeric_option_of_every_command_is_bounded_above_and_below():
    unbounded = [(command, action.option_strings[0]) for command, action in numeric_options(build_parser())
                 if action.option_strings != ["--max-side"]  # checked by main before anything: 1 to 255
                 and (getattr(action.type, "bounds", None) is None or None in (action.type.bounds.low,
                                                                                 action.type.bounds.high))]
    assert unbounded == []


@pytest.mark.parametrize("argv", [
    ["solve", "--dataset", "x.json", "--out", "o", "--device", "banana"],
    ["pretrain", "--model", "micro", "--out", "o", "--device", "banana"],
    ["held-out", "m=x", "--device", "cuda:x"],
    ["sudoku", "evaluate", "--model", "m", "--puzzles", "p.csv", "--out", "o", "--device", "gpu"],
    ["bench", "--device", "banana"],
    ["pretrain", "--model", "micro", "--out", "o", "--batch-size", "100000000"],
])
def test_an_unknown_device_or_a_boundless_number_is_a_usage_error_before_any_folder(capsys, tmp_path, monkeypatch,
                                                                                    argv):
    monkeypatch.chdir(tmp_path)
    status, _, err = run(capsys, *argv)
    assert status == 2 and ("unknown device" in err or "at most 1024" in err) and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_optimizer_or_a_clock_that_cannot_work_is_refused_before_the_working_folder(tmp_path, capsys):
    from arc_kit.settings import SolveSettings

    settings = SolveSettings().to_json()
    settings["ttt"]["optimizer"] = "sgd"
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    status, _, err = run(capsys, "kaggle", "run", "--input", tmp_path, "--working", tmp_path / "w", "--settings",
                         tmp_path / "settings.json")
    assert status == 1 and "unknown optimizer 'sgd'" in last_line(err)
    status, _, err = run(capsys, "kaggle", "run", "--input", tmp_path, "--working", tmp_path / "w", "--hours", "0.5",
                         "--safety-minutes", "40")
    assert status == 1 and "below the limit" in last_line(err)
    assert not (tmp_path / "w").exists()


def test_kaggle_build_checks_kaggles_names_the_model_source_and_each_wheel_before_writing(tmp_path, capsys,
                                                                                          model_folder):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "fine-1.0-py3-none-any.whl").write_bytes(os.urandom(300))
    build = ["kaggle", "build", "--out", tmp_path / "d", "--model", model_folder]
    cases = [([*build, "--owner", "someone", "--slug", "../x"], "no Kaggle dataset slug"),
             ([*build, "--owner", "some one"], "no Kaggle user name"),
             ([*build, "--owner", "..", "--slug", "arc-kit-x"], "no Kaggle user name"),
             ([*build, "--owner", "someone", "--title", "x"], "no Kaggle dataset title"),
             (["kaggle", "build", "--out", tmp_path / "d", "--owner", "someone", "--model-source", ""],
              "is no Kaggle Model handle"),
             (["kaggle", "build", "--out", tmp_path / "d", "--owner", "someone", "--model-source", "a/b..c/d/e"],
              "is no Kaggle Model handle"),
             ([*build, "--owner", "someone", "--extra-wheels", extra], "is no wheel")]
    for argv, phrase in cases:
        status, _, err = run(capsys, *argv)
        assert status == 1 and phrase in last_line(err), (argv, err)
    assert not (tmp_path / "d").exists() and not (tmp_path / "d-notebook").exists()


def test_timings_no_task_can_have_taken_are_kept_out_of_the_speeds():
    from arc_kit.run.planner import Speeds, TaskSize
    from arc_kit.settings import SolveSettings

    speeds, size = Speeds(), TaskSize("t1", training_tokens=100, prompt_tokens=100, answer_tokens=10, train_pairs=2)
    for timing in (-5.0, 1e300, float("nan"), True, "3"):
        speeds.update(size, SolveSettings(), {"ttt": timing, "generation": timing, "scoring": timing})
    assert speeds.measured_parts == {} and (speeds.training, speeds.generation) == (Speeds().training,
                                                                                   Speeds().generation)
    speeds.update(size, SolveSettings(), {"ttt": 64.0})
    assert speeds.measured_parts == {"training": 1}


# -- 6: the scripts --------------------------------------------------------------------------------------------------

def script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_base_parts_pack_writes_only_its_parts_and_never_through_a_link(tmp_path, monkeypatch, victim):
    import numpy as np

    parts = script("gpu_base_parts")
    raw = np.arange(64, dtype=np.uint8)
    monkeypatch.setattr(parts, "entries", lambda base, gguf: iter([
        (f"w{index}", {"kind": "F32", "shape": [16], "sha256": "x", "heads": 0}, raw) for index in range(3)]))
    base = tmp_path / "base"
    base.mkdir()
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    with pytest.raises(OutputRefused, match="holds files that arc-kit did not make"):
        parts.pack(base, tmp_path / "x.gguf", users, 100)
    out = tmp_path / "parts"
    written = parts.pack(base, tmp_path / "x.gguf", out, 100)
    assert [path.relative_to(out).as_posix() for path in written] == \
        ["part-1/base-1.safetensors", "part-2/base-2.safetensors", "part-3/base-3.safetensors"]
    (out / "notes.txt").write_text("mine")
    shutil.rmtree(out / "part-2")
    (out / "part-2").symlink_to(users)  # at a name of its layout: a rerun removes the link itself, then writes
    (out / "part-3" / "notes.txt").write_text("mine")
    with pytest.warns(UserWarning, match="kept in .*: notes.txt, part-3/notes.txt"):
        assert len(parts.pack(base, tmp_path / "x.gguf", out, 100)) == 3
    assert not (out / "part-2").is_symlink() and (out / "part-3" / "notes.txt").exists()
    assert sorted(path.name for path in users.iterdir()) == ["notes.txt"] and (out / "notes.txt").exists()
    with pytest.raises(SystemExit):  # a part size out of range: refused before anything is built or written
        parts.main(["pack", "--out", str(tmp_path / "p2"), "--part-mib", "nan"])
    assert not (tmp_path / "p2").exists() and victim.exists()


def test_the_sampler_report_never_replaces_a_users_file(tmp_path, monkeypatch):
    report = script("sampler_report")
    mine = tmp_path / "report.json"
    mine.write_text("my notes")
    monkeypatch.setattr("sys.argv", ["sampler_report.py", "--re-arc", str(tmp_path), "--out", str(mine)])
    with pytest.raises(SystemExit, match="exists and arc-kit did not make it"):
        report.main()
    assert mine.read_text() == "my notes"
    mine.write_text(json.dumps([{"run": "paper"}]))
    assert report._is_report(mine)
