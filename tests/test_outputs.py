"""The kit never deletes or overwrites what it did not make: one test per failure a user met.

Each command that writes an output is pointed at a place a user's files are (a folder of theirs, a link
to one, the input's own folder, the shipped ``kaggle_dataset/`` layout), and must refuse in one line
without changing a byte there; where the place is the kit's own (its marker), it resumes, or replaces
only its own files. Also: numbers refused where declared, ``show --out FOLDER``, git read without its
lock, and signals and errors of the operating system in one line. The model's work is replaced by
fallback records where a run goes ahead (``no_model_work``): what is checked is what is written.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import PLAIN, QUICK, file_tree, run

from arc_kit.cli import main
from arc_kit.data.datasets import load_folder
from arc_kit.method.records import fallback_record
from arc_kit.method.solver import Solver
from arc_kit.outputs import MARKER, FolderKind, OutputRefused, claim_file, claim_folder, read_marker
from arc_kit.provenance import git_commit
from arc_kit.settings import SamplerSettings, SolveSettings

ROOT = Path(__file__).resolve().parents[1]


def users_folder(folder: Path) -> Path:
    """A folder of a user's files, some named as the kit names its own."""
    (folder / "worker-1").mkdir(parents=True)
    (folder / "claims").mkdir()
    for name in ("notes.txt", "worker-1/records.jsonl", "claims/t1", "my_records.jsonl", "scores.csv",
                 "submission.json", "records.jsonl"):
        (folder / name).write_text(f"the user's {name}\n")
    return folder


def one_line_error(err: str, *phrases: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for phrase in phrases:
        assert phrase in lines[0], lines[0]




# -- 1: kaggle build never deletes the model it copies, nor the shipped kaggle_dataset/ ------------------------

def test_kaggle_build_refuses_a_model_inside_its_out_and_the_shipped_dataset_folder(tmp_path, capsys, monkeypatch,
                                                                                 model_folder):
    out = tmp_path / "D"
    shutil.copytree(model_folder, out / "model")
    (out / "README.md").write_text("the user's readme\n")
    before = file_tree(tmp_path)
    status, _, err = run(capsys, "kaggle", "build", "--out", out, "--model", out / "model", "--owner", "someone")
    assert status == 1
    one_line_error(err, "overlap", "--out")
    # a copy of the checkout's kaggle_dataset/ (its shipped model the default): refused, not one byte changed
    shipped = tmp_path / "kaggle_dataset"
    shutil.copytree(ROOT / "kaggle_dataset", shipped, ignore=shutil.ignore_patterns("*.safetensors"))
    before = file_tree(tmp_path)
    monkeypatch.setenv("ARC_KIT_MODEL", str(shipped / "model"))
    status, _, err = run(capsys, "kaggle", "build", "--out", shipped, "--owner", "someone")
    assert status == 1
    one_line_error(err, str(shipped))
    monkeypatch.setenv("ARC_KIT_MODEL", str(model_folder))
    status, _, err = run(capsys, "kaggle", "build", "--out", shipped, "--owner", "someone")
    assert status == 1
    one_line_error(err, "holds files that arc-kit did not make", "README.md")
    assert file_tree(tmp_path) == before


# -- 2: --restart discards only a run's files, and only in a run's folder ------------------------------------

def test_restart_on_a_folder_that_is_no_run_is_refused_and_deletes_nothing(tmp_path, capsys, tasks_file,
                                                                          fallback_model):
    out = users_folder(tmp_path / "D")
    before = file_tree(tmp_path)
    status, _, err = run(capsys, "solve", "--dataset", tasks_file, "--out", out, "--restart", "--model",
                         fallback_model, *QUICK)
    assert status == 1
    one_line_error(err, f"{out} holds files that arc-kit did not make", "claims/", "give --out another folder")
    assert file_tree(tmp_path) == before


def test_restart_in_a_run_folder_keeps_the_users_file_and_a_rerun_resumes(tmp_path, capsys, caplog, tasks_file,
                                                                          no_model_work, micro_model):
    out = tmp_path / "run"
    command = ["solve", "--dataset", tasks_file, "--out", out, "--model", micro_model, *QUICK]
    assert run(capsys, *command)[0] == 0
    assert read_marker(out)["kind"] == "run"
    (out / "notes.txt").write_text("mine")
    assert run(capsys, *command)[0] == 0 and "2 of 2 tasks already done" in caplog.text  # resumed
    assert run(capsys, *command, "--restart")[0] == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "records.jsonl").exists()


# -- 3: create-model never replaces a model it did not make, nor without --overwrite ---------------------------

def test_create_model_never_replaces_a_trained_model_and_overwrites_only_its_own(tmp_path, capsys, model_folder):
    trained = tmp_path / "trained"
    shutil.copytree(model_folder, trained)  # a model of the user's (or trained since): no marker
    before = file_tree(trained)
    status, _, err = run(capsys, "create-model", "--preset", "micro", "--out", trained)
    assert status == 1 and file_tree(trained) == before
    one_line_error(err, "holds files that arc-kit did not make")
    fresh = tmp_path / "fresh"
    assert run(capsys, "create-model", "--preset", "micro", "--out", fresh)[0] == 0
    (fresh / "notes.txt").write_text("mine")
    made = file_tree(fresh)
    status, _, err = run(capsys, "create-model", "--preset", "micro", "--out", fresh, "--seed", "1")
    assert status == 1 and file_tree(fresh) == made
    one_line_error(err, "pass --overwrite to replace it")
    assert run(capsys, "create-model", "--preset", "micro", "--out", fresh, "--seed", "1", "--overwrite")[0] == 0
    assert (fresh / "notes.txt").read_text() == "mine"
    assert (fresh / "model.safetensors").read_bytes() != made["model.safetensors"][1]  # the new weights
    # a training run's folder (its marker names pretrain): --overwrite replaces only create-model's own
    trained_here = tmp_path / "pretrained"
    claim_folder(trained_here, FolderKind("training", resumable=True), "pretrain")
    status, _, err = run(capsys, "create-model", "--preset", "micro", "--out", trained_here, "--overwrite")
    assert status == 1
    one_line_error(err, "training folder that `arc-kit pretrain` made")


# -- 4: a run inside its own folder dataset never reads its files as tasks -----------------------------------

def test_a_run_inside_the_folder_it_reads_never_reads_its_own_files_as_tasks(tmp_path, capsys, caplog, no_model_work,
                                                                             micro_model):
    dataset = tmp_path / "tasks"
    dataset.mkdir()
    for task_id in ("t1", "t2"):
        (dataset / f"{task_id}.json").write_text(json.dumps(PLAIN))
    out = dataset / "run"
    command = ["solve", "--dataset", dataset, "--out", out, "--model", micro_model, *QUICK]
    assert run(capsys, *command)[0] == 0
    assert run(capsys, *command)[0] == 0  # strict: resumes, no task 'run' nor 'submission'
    assert "2 of 2 tasks already done" in caplog.text
    assert run(capsys, *command, "--lenient", "--restart")[0] == 0
    assert set(json.loads((out / "submission.json").read_text())) == {"t1", "t2"}
    assert load_folder(dataset).ids == ["t1", "t2"]
    status, _, err = run(capsys, "solve", "--dataset", dataset, "--out", dataset, "--model", micro_model, *QUICK)
    assert status == 1  # the input's own folder: refused
    one_line_error(err, "holds files that arc-kit did not make")


# -- 5: numbers that make no sense are refused where they are declared --------------------------------------

@pytest.mark.parametrize("argv, flag", [
    (["solve", "--out", "o", "--hours", "nan"], "--hours"),
    (["dry-run", "--tasks", "-1"], "--tasks"),
    (["estimate", "--records", "r", "--speedup", "nan"], "--speedup"),
    (["solve", "--out", "o", "--threshold", "inf"], "--threshold"),
    (["solve", "--out", "o", "--ttt-lr", "-1"], "--ttt-lr"),
    (["pretrain", "--model", "micro", "--out", "o", "--minutes", "-1"], "--minutes"),
    (["kaggle", "run", "--hours", "1e309"], "--hours"),
])
def test_a_number_out_of_its_range_is_a_usage_error_naming_the_flag(capsys, argv, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and f"argument {flag}: must be" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # before any work


def test_every_numeric_option_shows_its_range_in_help_and_settings_refuse_what_json_gives(capsys):
    shown = {}
    for argv in (["solve", "--help"], ["pretrain", "--help"], ["kaggle", "run", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        shown[argv[0] if argv[0] != "kaggle" else "kaggle run"] = " ".join(capsys.readouterr().out.split())
    assert "DFS: minimum probability of a returned answer (default: 0.09) [above 0, at most 1]" in shown["solve"]
    assert "(default: 0; 0 for all) [at least 0, at most 1e+07]" in shown["solve"]
    assert "--hours HOURS time budget" in shown["solve"] and "[above 0, at most 8760]" in shown["solve"]
    assert "(default: 4) [at least 1, at most 1024]" in shown["pretrain"]  # --batch-size
    assert "the limit, counted from the job's start (default: 12.0) [above 0, at most 8760]" in shown["kaggle run"]
    with pytest.raises(ValueError, match=r"threshold must be a finite number, above 0, at most 1, got nan"):
        SamplerSettings(threshold=float("nan"))
    with pytest.raises(ValueError, match=r"^SolveSettings.inference_augmentations is a number, expected an integer$"):
        SolveSettings.from_json({**SolveSettings().to_json(), "inference_augmentations": 2.5})
    with pytest.raises(ValueError, match=r"inference_augmentations must be at least 1, at most 1024, got 0"):
        SolveSettings.from_json({**SolveSettings().to_json(), "inference_augmentations": 0})
    with pytest.raises(ValueError, match=r"seed must be a whole number"):
        SolveSettings(seed=True)


def test_a_time_budget_that_its_margin_eats_is_refused(capsys, tmp_path, tasks_file, micro_model):
    status, _, err = run(capsys, "solve", "--dataset", tasks_file, "--out", tmp_path / "o", "--hours", "0.25",
                         "--model", micro_model, *QUICK)
    assert status == 1 and not (tmp_path / "o").exists()
    one_line_error(err, "--safety-minutes (30) leaves nothing of --hours (0.25)")


# -- 8: show --out FOLDER writes into it and says so; a user's file is never replaced ------------------------

def test_show_into_a_folder_writes_the_task_picture_there_and_never_over_a_users_file(tmp_path, capsys, tasks_file):
    folder = tmp_path / "pictures"
    folder.mkdir()
    status, out, _ = run(capsys, "show", "t1", "--dataset", tasks_file, "--out", folder)
    assert status == 0 and out.strip() == f"wrote {folder / 't1.png'}"
    assert (folder / "t1.png").read_bytes().startswith(b"\x89PNG") and not (tmp_path / "pictures.png").exists()
    assert run(capsys, "show", "t1", "--dataset", tasks_file, "--out", folder)[0] == 0  # its own: replaced
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"\x89PNG\r\n\x1a\n the user's picture")
    status, _, err = run(capsys, "show", "t1", "--dataset", tasks_file, "--out", mine)
    assert status == 1 and mine.read_bytes() == b"\x89PNG\r\n\x1a\n the user's picture"
    one_line_error(err, "exists and arc-kit did not make it")
    status, out, _ = run(capsys, "show", "t1", "--dataset", tasks_file, "--out", tmp_path / "plain")
    assert status == 0 and out.strip() == f"wrote {tmp_path / 'plain.png'}" and (tmp_path / "plain.png").exists()


# -- 9: the commit is read without git's index lock ----------------------------------------------------------

def test_the_git_commit_is_read_without_rewriting_the_index(tmp_path):
    git = ["git", "-c", "user.email=a@b", "-c", "user.name=n"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("a")
    subprocess.run([*git, "add", "f"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=tmp_path, check=True)
    index = tmp_path / ".git" / "index"
    os.utime(tmp_path / "f", (1, 1))  # the index's record of the file is stale: a plain status would refresh it
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    assert git_commit(tmp_path) and not git_commit(tmp_path).endswith("+dirty")
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before  # never written: no index.lock taken


# -- 10: links, signals, errors of the operating system -------------------------------------------------------

def test_an_out_that_links_to_a_users_folder_or_to_nothing_is_refused(tmp_path, capsys, tasks_file, micro_model):
    target = users_folder(tmp_path / "theirs")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    before = file_tree(tmp_path)
    for out, phrase in ((tmp_path / "link", "holds files that arc-kit did not make"),
                        (tmp_path / "dangling", "which does not exist")):
        for command in (["solve", "--dataset", tasks_file, "--out", out, "--model", micro_model, *QUICK],
                        ["create-model", "--preset", "micro", "--out", out],
                        ["export", "--dataset", tasks_file, "--out", out]):
            status, _, err = run(capsys, *command)
            assert status == 1, command
            one_line_error(err, phrase)
    assert file_tree(tmp_path) == before


def test_sigterm_ends_a_run_in_one_line_saying_what_it_kept_and_how_to_resume(tmp_path, capsys, monkeypatch,
                                                                             tasks_file, micro_model):
    def stopped(self, task, *_, **__):
        os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler or `kill` sends it, mid-run
        return fallback_record(task.id, "")

    monkeypatch.setattr(Solver, "solve_with_retry", stopped)
    out, before = tmp_path / "run", signal.getsignal(signal.SIGTERM)
    status, _, err = run(capsys, "solve", "--dataset", tasks_file, "--out", out, "--model", micro_model, *QUICK)
    assert status == 143
    assert err.strip().splitlines()[-1] == (f"arc-kit solve: stopped by SIGTERM; kept {out} (the records of the tasks "
                                            "done and a complete submission): run the same command again (without "
                                            "--restart) to go on from there")
    assert signal.getsignal(signal.SIGTERM) == before  # given back


def test_an_interrupted_training_names_its_own_option_for_starting_over(tmp_path, capsys, monkeypatch, tasks_file):
    from arc_kit.model import training

    def interrupted(*_, **__):
        raise KeyboardInterrupt  # Ctrl-C, once the run folder is claimed

    monkeypatch.setattr(training, "_start_accelerator", interrupted)
    out = tmp_path / "training"
    status, _, err = run(capsys, "pretrain", "--model", "micro", "--out", out, "--tasks", tasks_file, "--steps", "1",
                         "--device", "cpu")
    assert status == 130
    assert err.strip().splitlines()[-1] == (f"arc-kit pretrain: stopped by SIGINT; kept {out} (its checkpoints (every "
                                            "--save-every steps)): run the same command again (without --no-resume) "
                                            "to go on from there")  # pretrain has no --restart


def test_errors_of_the_operating_system_name_the_file_and_what_to_do(tmp_path, capsys, monkeypatch, tasks_file):
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    status, _, err = run(capsys, "create-model", "--preset", "micro", "--out", a_file)
    assert status == 1 and a_file.read_text() == "mine"
    one_line_error(err, f"{a_file} is a file, not a folder")

    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a full disk's write: no file named

    monkeypatch.setattr(os, "fsync", full)
    status, _, err = run(capsys, "export", "--dataset", tasks_file, "--out", tmp_path / "export")
    assert status == 1
    one_line_error(err, "No space left on device: ", "arc-agi_evaluation_challenges.json",
                   "free some space on that disk, or write elsewhere")
    assert "Errno" not in err


# -- the rule itself ---------------------------------------------------------------------------------------

def test_a_kind_is_never_claimed_as_another_and_clearing_deletes_only_the_layout_never_through_a_link(tmp_path):
    kind = FolderKind("thing", owned=("out-*", "result.json"))
    folder = claim_folder(tmp_path / "f", kind, "make")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "keep.txt").write_text("keep")
    (folder / "out-1").symlink_to(tmp_path / "elsewhere")
    (folder / "result.json").write_text("{}")
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(OutputRefused, match="pass --overwrite"):
        claim_folder(folder, kind, "make")
    with pytest.raises(OutputRefused, match="replaces only what `arc-kit other` made"):
        claim_folder(folder, kind, "other", overwrite=True)
    with pytest.raises(OutputRefused, match="a thing folder that `arc-kit make` made, not a run folder"):
        claim_folder(folder, FolderKind("run", resumable=True), "solve")
    claim_folder(folder, kind, "make", overwrite=True)
    assert sorted(path.name for path in folder.iterdir()) == [MARKER, "notes.txt"]
    assert (tmp_path / "elsewhere" / "keep.txt").read_text() == "keep"  # the link went, not what it points to
    (folder / MARKER).write_text("not a marker")
    with pytest.raises(OutputRefused, match="cannot read as its own"):
        claim_folder(folder, kind, "make", overwrite=True)
    with pytest.raises(OutputRefused, match="symbolic link"):
        (tmp_path / "link.png").symlink_to(tmp_path / "elsewhere" / "keep.txt")
        claim_file(tmp_path / "link.png", "show")


def test_a_marker_another_process_writes_between_the_reads_is_taken_as_the_kits(tmp_path, monkeypatch):
    """Two runs started together on one new folder: the marker appears after the first read found none (seen on
    CI as "holds files that arc-kit did not make (.arc-kit.json)"); it is read again, and the folder is a run's."""
    import arc_kit.outputs.folders as outputs

    folder, kind, raced = tmp_path / "out", outputs.FolderKind("run", resumable=True), []
    folder.mkdir()
    listed = outputs._entries

    def racing(target):
        if not raced:  # the other process's whole claim, between this one's reading and listing
            raced.append(target)
            outputs.claim_folder(target, kind, "solve")
        return listed(target)

    monkeypatch.setattr(outputs, "_entries", racing)
    marker = outputs.check_folder(folder, kind, "solve")
    assert raced and marker["kind"] == "run" and marker["command"] == "solve"
