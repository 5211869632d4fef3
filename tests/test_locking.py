"""The folder lock on its own: taken again by its holder at no cost, refused to another process naming the holder,
given back when the last hold ends, and a run left to go on, with a warning, where the file system cannot lock."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading

import filelock
import pytest

from arc_kit.run.locking import HOLDER_FILE, LOCK_FILE, describe_holder, hold_folder, holder_record, holding_folder

TRY = ("import sys\nfrom arc_kit.run.locking import hold_folder, FolderInUseError\ntry:\n"
       "    with hold_folder(sys.argv[1]):\n        print('took it')\nexcept FolderInUseError as error:\n    print(error)\n")


def another_process_tries(folder) -> str:
    return subprocess.run([sys.executable, "-c", TRY, str(folder)], capture_output=True, text=True,
                          timeout=120).stdout.strip()


def test_the_holder_takes_its_lock_again_and_another_process_is_refused_until_the_last_hold_ends(tmp_path):
    folder = tmp_path / "run"
    with hold_folder(folder):
        record = json.loads((folder / HOLDER_FILE).read_text())
        assert record["pid"] == os.getpid() and record["since"].startswith("20")
        with hold_folder(tmp_path / "." / "run"):  # the same folder, spelt otherwise
            pass
        refusal = another_process_tries(folder)
        assert refusal.startswith(f"{folder} is in use by process {os.getpid()} on ") and "use another folder" in refusal
    assert not (folder / HOLDER_FILE).exists()
    assert another_process_tries(folder) == "took it"


def test_a_refused_process_waits_for_a_holder_that_has_not_written_its_record_yet(tmp_path):
    """Two runs started together: the loser may look before the winner, which has just taken the lock, has
    written who it is; it waits for the record (a moment), then names the holder."""
    folder = tmp_path / "run"
    folder.mkdir()
    with filelock.FileLock(str(folder / LOCK_FILE)):  # the lock taken, the record not yet written
        writer = threading.Timer(0.3, lambda: (folder / HOLDER_FILE).write_text(json.dumps(holder_record())))
        writer.start()
        holder = describe_holder(folder)
        writer.join()
    assert holder.startswith(f"process {os.getpid()} on "), holder
    assert describe_holder(tmp_path / "elsewhere", wait_seconds=0.1) == "another process (it has not recorded which yet)"


def test_a_decorated_function_holds_the_folder_its_argument_names_for_the_call(tmp_path):
    @holding_folder("out")
    def run(task: str, out, *, extra: int = 0):
        return json.loads((tmp_path / "o" / HOLDER_FILE).read_text())["pid"], another_process_tries(tmp_path / "o")

    pid, refusal = run("t", out=tmp_path / "o")
    assert pid == os.getpid() and "is in use by process" in refusal
    assert not (tmp_path / "o" / HOLDER_FILE).exists()


def test_a_file_system_that_cannot_lock_warns_and_lets_the_run_go_on(tmp_path, monkeypatch):
    def no_locks(self, *arguments, **options):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(filelock.FileLock, "acquire", no_locks)
    with pytest.warns(UserWarning, match="cannot lock .*No locks available.*nothing keeps a second run out"):
        with hold_folder(tmp_path / "run") as folder:
            assert folder == tmp_path / "run"

