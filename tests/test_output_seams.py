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
from conftest import QUICK, file_tree, run

from arc_kit.outputs import appending, claim_folder
from arc_kit.run.runs import RUN_KIND


def one_line(err: str) -> str:
    """The one line a command ended with (a progress bar of transformers' loading may stand before it; argparse's
    usage before a usage error)."""
    lines = [line for line in err.rstrip().split("\n") if not line.startswith(("\r", "usage: ", " "))]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("arc-kit "), err
    return lines[0]


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


# -- 2: deletion only of what the kit made, in its sub-folders too ------------------------------------------------

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


# -- 3: every reader bounded, records read a line at a time ---------------------------------------------------------

def test_a_records_file_over_the_bound_is_refused_in_one_line_by_resume_and_estimate(tmp_path, capsys, tasks_file,
                                                                                   micro_model, no_model_work):
    out = tmp_path / "run"
    command = ["solve", "--dataset", tasks_file, "--out", out, "--model", micro_model, *QUICK]
    assert run(capsys, *command, "--task-ids", "t1")[0] == 0
    os.truncate(out / "records.jsonl", 2**30 + 1)  # sparse: no disk, and never read
    for argv in (command, ["estimate", "--records", out, "--dataset", tasks_file, "--model", micro_model]):
        status, _, err = run(capsys, *argv)
        assert status == 1 and "more than the 1,073,741,824 (1 GiB) any records file" in one_line(err), err


def test_records_are_read_a_line_at_a_time_keeping_only_the_tasks_asked_for(tmp_path, monkeypatch):
    import json
    import tracemalloc

    from arc_kit.data import jsonio
    from arc_kit.method.records import fallback_record
    from arc_kit.run.record_json import read_records, to_json

    path = tmp_path / "records.jsonl"
    line = json.dumps(to_json(fallback_record("other", "x" * 2000))) + "\n"
    with path.open("w") as handle:
        handle.write(line.replace("other", "t1"))
        handle.writelines(line for _ in range(10_000))  # 20 MB of other tasks' records
        handle.write(line.replace("other", "t1").replace("xxx", "yyy", 1))  # t1 again: the later line wins
    tracemalloc.start()
    records = read_records(path, task_ids=["t1"])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert list(records) == ["t1"] and records["t1"].skipped.startswith("yyy")
    assert peak < path.stat().st_size / 10, (peak, path.stat().st_size)
    monkeypatch.setattr(jsonio, "MAX_LINE_BYTES", 1000)  # a line longer than any record: skipped, said, never held
    path.write_text(line.replace("other", "t2") + json.dumps(to_json(fallback_record("t3", "short"))) + "\n")
    with pytest.warns(UserWarning, match="skipped 1 unreadable line.*line 1: more than 1,000 bytes"):
        assert list(read_records(path)) == ["t3"]


# -- 4: every option and input checked before any folder is made or claimed ------------------------------------------

def with_own_code(source: Path, folder: Path) -> Path:
    """A copy of model folder ``source`` whose config asks for its own code (``auto_map``)."""
    import json
    import shutil

    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoConfig": "evil.EvilConfig"}}))
    (folder / "evil.py").write_text("raise SystemExit('the folder ran')\n")
    return folder


@pytest.mark.processes  # --workers 2: a pool's checks (Ray imported, never started)
def test_a_refused_option_or_input_leaves_the_file_system_as_it_found_it(tmp_path, capsys, tasks_file, micro_model):
    coded = with_own_code(micro_model, tmp_path / "coded")
    solve = ["solve", "--dataset", tasks_file, "--out", tmp_path / "new" / "run", *QUICK]
    cases = {"--dtype banana": ([*solve, "--model", micro_model, "--dtype", "banana"], "invalid choice: 'banana'"),
             "an address no host has": ([*solve, "--model", micro_model, "--address", "not a host:99999",
                                         "--workers", "2"], "expected HOST:PORT"),
             "an address where no Ray answers": ([*solve, "--model", micro_model, "--address", "not a host:6379"],
                                                 "no Ray answers at not a host:6379"),
             "a model with its own code": ([*solve, "--model", coded], "asks to run code of its own"),
             "the same, to a pool": ([*solve, "--model", coded, "--workers", "2"], "asks to run code of its own"),
             "held-out's file, a model with its own code": (["held-out", f"m={coded}", "--dataset", tasks_file,
                                                              "--tasks", "1", "--out", tmp_path / "new" / "r.json"],
                                                             "asks to run code of its own")}
    before = file_tree(tmp_path)
    for case, (argv, said) in cases.items():
        status, _, err = run(capsys, *argv)
        assert status in (1, 2) and said in one_line(err), (case, err)
        assert file_tree(tmp_path) == before, case  # no folder made, no marker, no lock, no run.json


# -- 6: a model folder's code files, named as ignored ------------------------------------------------------------------

def test_check_model_says_a_folders_code_files_are_ignored_and_never_run(tmp_path, capsys, micro_model):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(micro_model, folder)
    (folder / "modeling_llama.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'w')\n")
    status, out, _ = run(capsys, "check-model", folder)
    verdict = out.strip().splitlines()[-1]
    assert status == 0 and verdict.startswith("go: ") and verdict.endswith(
        "its code (modeling_llama.py) is ignored, never run") and not (tmp_path / "RAN").exists()


# -- 7: an option that leaves no task to run ------------------------------------------------------------------------

def test_an_option_that_leaves_no_task_is_refused_in_one_line_naming_it(tmp_path, capsys, tasks_file, micro_model):
    from arc_kit.data.datasets import load_tasks
    from arc_kit.run.runs import choose_tasks

    status, _, err = run(capsys, "solve", "--dataset", tasks_file, "--out", tmp_path / "run", "--model", micro_model,
                         "--task-ids", *QUICK)
    assert status == 2 and "--task-ids: expected at least one argument" in one_line(err)
    with pytest.raises(ValueError, match="--task-ids names no task"):
        choose_tasks(load_tasks(str(tasks_file)), task_ids=[])
    status, _, err = run(capsys, "bench", "--model", micro_model, "--dataset", tasks_file, "--max-prompt", "1",
                         "--tasks", "1", "--device", "cpu")
    assert status == 1 and "--max-prompt 1 leaves no task of the 2 to run" in one_line(err)
    assert not (tmp_path / "run").exists()
