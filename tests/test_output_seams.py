"""The last seams of the output rule: one test (or a few) per seam a hostile probe found.

1. No write through a hard link: a file of the kit's that has a second name (a user's file linked in) is replaced
   by a copy of itself before anything is appended; a hard-linked lock file is refused.
2. Deletion only of what the kit made, inside its own sub-folders too: ``ray-logs/``, checkpoints, and a model
   folder's ``adapter/``, which create-model never writes.
3. Every reader bounded: a records file over the bound is refused in one line naming it, and records are read a line
   at a time, keeping only the tasks asked for.
4. Every option and input checked before any folder is made or claimed: a refused command leaves the file system
   as it found it (the fuzz over every command asserts it too, ``test_fuzz_commands``).
6. A model folder's code files: check-model's go line says they are ignored and never run.
7. An option that leaves no task to run is refused in one line naming it.

Ray's lost raylet and its workers' niceness are test_ray_cluster.py's. Everything here runs in this process on micro
models; the model's work is replaced by fallback records where a run goes ahead (``no_model_work``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arc_kit.cli import main
from arc_kit.outputs import OutputRefused, appending, claim_folder
from arc_kit.run.runs import RUN_KIND

QUICK = ["--sampler", "greedy", "--ttt-steps", "1", "--augmentations", "1", "--scoring-augmentations", "1",
         "--max-len", "2048", "--device", "cpu"]


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        status = main([str(arg) for arg in argv])
    except SystemExit as stop:  # argparse: a usage error
        status = stop.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def tree(root: Path) -> dict[str, tuple]:
    """Every entry below ``root``: a file's bytes, a link's target, a folder as such (links not followed)."""
    found = {}
    for folder, folders, names in os.walk(root):
        for name in folders + names:
            path = Path(folder) / name
            found[str(path.relative_to(root))] = (("link", os.readlink(path)) if path.is_symlink() else
                                                  ("folder",) if path.is_dir() else ("file", path.read_bytes()))
    return found


def one_line(err: str) -> str:
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


# -- 1: no write through a hard link -------------------------------------------------------------------------------

def test_a_hard_linked_records_file_is_replaced_as_itself_before_a_resume_appends(tmp_path, capsys, tasks_file,
                                                                                  micro_model, no_model_work):
    out, notes = tmp_path / "run", tmp_path / "user" / "notes.txt"
    command = ["solve", "--dataset", tasks_file, "--out", out, "--model", micro_model, *QUICK]
    assert run(capsys, *command, "--task-ids", "t1")[0] == 0
    notes.parent.mkdir()
    notes.write_text("the user's notes\n")
    (out / "records.jsonl").unlink()
    os.link(notes, out / "records.jsonl")  # ln user/notes.txt RUN/records.jsonl
    assert run(capsys, *command)[0] == 0  # resumed: both tasks appended, to the kit's own file
    assert notes.read_text() == "the user's notes\n" and notes.stat().st_nlink == 1
    assert (out / "records.jsonl").read_text().count('"task_id"') == 2


def test_appending_to_a_file_with_a_second_name_leaves_that_name_its_bytes(tmp_path):
    folder = claim_folder(tmp_path / "run", RUN_KIND, "solve")
    (folder / "records.jsonl").write_text("kit\n")
    os.link(folder / "records.jsonl", tmp_path / "theirs.txt")
    with appending(folder / "records.jsonl") as handle:
        handle.write("more\n")
    assert (tmp_path / "theirs.txt").read_text() == "kit\n" and (folder / "records.jsonl").read_text() == "kit\nmore\n"


def test_a_hard_linked_lock_file_is_refused_and_the_users_file_keeps_its_bytes(tmp_path, capsys, tasks_file,
                                                                               micro_model, no_model_work):
    out, notes = tmp_path / "run", tmp_path / "notes.txt"
    command = ["solve", "--dataset", tasks_file, "--out", out, "--model", micro_model, *QUICK]
    assert run(capsys, *command)[0] == 0
    notes.write_text("the user's notes\n")
    (out / ".lock").unlink()
    os.link(notes, out / ".lock")  # an older filelock opens the lock file truncating it
    status, _, err = run(capsys, *command)
    assert status == 1 and "a hard link" in one_line(err) and notes.read_text() == "the user's notes\n"


# -- 2: deletion only of what the kit made, in its sub-folders too ------------------------------------------------------

def test_restart_keeps_a_users_file_in_ray_logs_and_a_checkpoint_and_names_it(tmp_path):
    from arc_kit.model.training import TRAINING_KIND

    run_folder = claim_folder(tmp_path / "run", RUN_KIND, "solve")
    session = "ray-logs/session_2026-12-02_00-55-08_263991_7446"
    for name in (f"{session}/raylet.out", f"{session}/worker-4e11-ffffffff-7799.err", "ray-logs/mine.txt"):
        (run_folder / name).parent.mkdir(parents=True, exist_ok=True)
        (run_folder / name).write_text(name)
    with pytest.warns(UserWarning, match=r"what arc-kit did not make there: ray-logs/mine.txt$"):
        claim_folder(run_folder, RUN_KIND, "solve", clear=True)
    assert sorted(path.name for path in (run_folder / "ray-logs").iterdir()) == ["mine.txt"]
    training = claim_folder(tmp_path / "training", TRAINING_KIND, "pretrain")
    for name in ("model.safetensors", "optimizer.bin", "random_states_0.pkl", "custom_checkpoint_0.pkl",
                 "progress.json", "notes.txt"):
        (training / "checkpoints" / "step-4").mkdir(parents=True, exist_ok=True)
        (training / "checkpoints" / "step-4" / name).write_text(name)
    with pytest.warns(UserWarning, match=r"what arc-kit did not make there: checkpoints/step-4/notes.txt$"):
        claim_folder(training, TRAINING_KIND, "pretrain", clear=True)
    assert [path.name for path in (training / "checkpoints" / "step-4").iterdir()] == ["notes.txt"]


def test_create_model_overwrite_touches_only_what_create_model_writes(tmp_path, capsys):
    out = tmp_path / "model"
    assert run(capsys, "create-model", "--preset", "micro", "--out", out)[0] == 0
    theirs = {"adapter/README.md": "the user's adapter notes", "vocab.json": "{}", "delta.json": "{}"}
    for name, text in theirs.items():
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_text(text)
    with pytest.warns(UserWarning, match=r"kept in .* what arc-kit did not make there: adapter/, delta.json, "
                                         r"vocab.json$"):
        assert run(capsys, "create-model", "--preset", "micro", "--out", out, "--overwrite")[0] == 0
    assert all((out / name).read_text() == text for name, text in theirs.items())
