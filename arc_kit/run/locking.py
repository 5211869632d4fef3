"""A folder held by one process at a time: the lock of a run folder, which names the process that holds it.

A run folder (``run``) is written by the one command that owns it: ``solve``, ``dry-run``, the
tables, ``kaggle run``, a pool's driver. ``hold_folder`` takes the folder's lock for
as long as a ``with`` block runs (``holding_folder`` for as long as a function runs); a second
process that asks for it gets ``FolderInUseError`` at once, saying which process holds it (its pid,
host, command and since when), never a wait. The lock is the operating system's (``filelock``:
``flock`` on Linux and macOS, ``LockFileEx`` on Windows), so it ends with its process however that
ends: the lock of a process killed with ``kill -9`` is taken over by the next run, and what the
dead holder's record said is replaced. A process takes a lock it already holds again at once (the
owner of a run calls functions that take it too); a pool's actors never ask for it.
Where the file system cannot lock at all, a warning says so and the run goes on unguarded. Given a
``kind``, the folder is claimed first (``outputs.claim_folder``: new, empty or the kit's own, else refused
before the lock file is made), so that no lock is ever taken in a folder the kit may not write.

The lock file ``.lock`` and the record of its holder ``.lock.json`` sit inside the folder. This
module knows processes and files; it knows nothing of runs.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from filelock import FileLock, Timeout

from arc_kit.outputs import FolderKind, OutputRefused, claim_folder, replace_file, small_json

LOCK_FILE = ".lock"
HOLDER_FILE = ".lock.json"
RECORD_WAIT_SECONDS = 2.0  # how long a refused process waits for a holder that has just taken the lock to say who it is

_held: dict[Path, tuple[FileLock | None, int]] = {}  # folder -> (its filelock, how many holds of this process are open)


class FolderInUseError(OSError):
    """Another process holds the folder's lock (the message says which, and what to do)."""


def holder_record() -> dict:
    """What the holder of a lock writes of itself: pid, host, command line and the time it took the lock."""
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": command[:200]}


def describe_holder(folder: Path, wait_seconds: float = RECORD_WAIT_SECONDS) -> str:
    """Who holds ``folder``'s lock, as its record says (or that it left none). A holder writes its record just
    after it takes the lock, so a record not there yet is waited for, up to ``wait_seconds``."""
    give_up = time.monotonic() + wait_seconds
    while True:
        try:
            record = small_json(folder / HOLDER_FILE)  # never a FIFO's endless wait
            pid, host, since = int(record["pid"]), str(record["host"]), str(record["since"])
            command = str(record.get("command", ""))
            break
        except (OSError, ValueError, TypeError, KeyError):
            if time.monotonic() >= give_up:
                return "another process (it has not recorded which yet)"
            time.sleep(0.05)
    return (f"process {pid} on {host!r} since {since}" + (f" ({command!r})" if command else ""))


def _take(folder: Path) -> FileLock | None:
    """Take ``folder``'s lock now, or FolderInUseError; the lock object, held (None, with a warning, where the
    file system cannot lock: the run goes on, unguarded, rather than not at all)."""
    folder.mkdir(parents=True, exist_ok=True)
    lock_file = folder / LOCK_FILE
    if lock_file.is_symlink() or lock_file.exists() and not (lock_file.is_file() and lock_file.stat().st_nlink == 1):
        raise OutputRefused(f"{lock_file} is no lock file of arc-kit's (a link, a hard link, a folder, a FIFO): it "
                            "never writes through one; move it away and run again")  # an older filelock truncates it
    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=0)
    except Timeout:  # before OSError: a Timeout is a TimeoutError
        raise _in_use(folder) from None
    except OSError as error:  # no locks on this file system (ENOLCK), a read-only folder...
        warnings.warn(f"cannot lock {folder} ({error.strerror or error}): nothing keeps a second run out of it",
                      stacklevel=3)
        return None
    try:
        # a reader sees the old record or the new, never half (and never through a link)
        replace_file(folder / HOLDER_FILE, json.dumps(holder_record()) + "\n", within=folder, durable=False)
    except OSError:
        lock.release()
        raise
    return lock


def _in_use(folder: Path) -> FolderInUseError:
    return FolderInUseError(f"{folder} is in use by {describe_holder(folder)}: two runs must not write one folder; "
                            "wait for that one to end (or stop it), or use another folder")


def check_free(folder: str | os.PathLike) -> None:
    """FolderInUseError when another process holds ``folder``'s lock, asked before any slow work and without a write
    (a folder with no lock file is free; one this process holds too)."""
    folder = Path(folder).absolute()
    lock_file = folder / LOCK_FILE
    if Path(os.path.realpath(folder)) in _held or lock_file.is_symlink() or not lock_file.is_file():
        return
    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=0)
    except Timeout:  # before OSError: a Timeout is a TimeoutError
        raise _in_use(folder) from None
    except OSError:  # no locks here: ``hold_folder`` says so
        return
    lock.release()


@contextmanager
def hold_folder(folder: str | os.PathLike, kind: FolderKind | None = None, command: str = "",
                option: str = "--out") -> Iterator[Path]:
    """Hold ``folder``'s lock (made if missing) while the block runs; FolderInUseError when another process
    holds it. Taking it again in the same process, inside the block, is allowed and costs nothing. With a
    ``kind``, the first hold claims the folder for ``command`` first (``outputs.claim_folder``; ``option``
    names it in a refusal)."""
    given, folder = Path(folder), Path(folder).absolute()
    key = Path(os.path.realpath(folder))
    lock, count = _held.get(key, (None, 0))
    if count == 0:
        if kind is not None:
            claim_folder(given, kind, command, option=option)
        lock = _take(folder)
    _held[key] = (lock, count + 1)
    try:
        yield folder
    finally:
        lock, count = _held[key]
        if count > 1:
            _held[key] = (lock, count - 1)
        else:
            del _held[key]
            if lock is not None:  # None: never taken, an unguarded run (``_take``)
                with suppress(OSError):  # a read-only or vanished folder: the lock itself still ends below
                    (folder / HOLDER_FILE).unlink(missing_ok=True)
                lock.release()


def holding_folder(parameter: str, kind: FolderKind | None = None, command: str = "") -> Callable:
    """Decorate a function so that each call holds the lock of the folder its argument ``parameter`` names, as
    ``hold_folder`` does (claimed as ``kind`` for ``command``, if given)."""
    def decorate(function: Callable) -> Callable:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def holding(*arguments, **options):
            bound = signature.bind(*arguments, **options)
            bound.apply_defaults()
            with hold_folder(bound.arguments[parameter], kind, command):
                return function(*arguments, **options)
        return holding
    return decorate
