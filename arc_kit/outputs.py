"""Where the kit may write: into a folder that is new, empty or its own, over a file only when it is its own.

Every command that writes an output folder claims it here first (``claim_folder``, or ``run.locking.hold_folder``
with a kind). The kit writes into a folder that does not exist yet, is empty, or holds the marker
``.arc-kit.json`` that the kit wrote when it made the folder, naming the command and the folder's kind;
anything else is refused in one line (``OutputRefused``) before a byte is written. In a folder it made,
the kit deletes only what its kind's layout names (``FolderKind.owned``): a run or a training run resumes
(``clear`` discards the earlier one, as ``--restart`` asks), a product (a model, a Kaggle dataset) is
replaced only with ``overwrite``, and then only by the command that made it; a file a user put beside them
is kept. A symbolic link is judged as the folder it points to, a dangling one refused. A single output file
(a picture, a CSV) is written where nothing is, or over a file the caller recognises as the kit's own
(``claim_file``). ``is_made_folder`` tells readers (a folder of task files) which folders hold the kit's
outputs, to skip them.

The folders claimed in this process are remembered (``claimed``), so that a command stopped by a signal,
or by an error of the operating system that names no file, can say which folder it was writing
(``describe_os_error``). This module knows files and folders; it knows nothing of what the kit writes in
them: each kind is declared by its owner (runs, training, models, the Kaggle dataset).
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from arc_kit.names import shown

MARKER = ".arc-kit.json"  # what the kit writes into every output folder it makes
MARKER_BYTES = 1 << 16  # a marker is a few hundred bytes: anything larger is not one
SHOWN_ENTRIES = 3  # the names a refusal shows of what a folder holds


class OutputRefused(ValueError):
    """A place the kit will not write into (the message, one line, says why and what to do)."""


@dataclass(frozen=True)
class FolderKind:
    """A kind of output folder: its name, what the kit writes in it, and whether a rerun continues in it."""

    name: str  # "run", "model"...: a folder is only ever claimed again as the kind it was made as
    owned: tuple[str, ...] = ()  # glob patterns of the top-level entries the kit writes: all that clearing deletes
    resumable: bool = False  # a rerun continues in it; else a folder made earlier is replaced only with overwrite
    legacy: Callable[[Path], bool] | None = None  # recognises a folder that a kit made before markers existed
    kept: str = "what it wrote so far"  # what a stopped command leaves in it, in a few words


@dataclass(frozen=True)
class Claim:
    """A folder (or a file) this process claimed, and for which command."""

    path: Path
    kind: FolderKind | None  # None for a file
    command: str


_claimed: list[Claim] = []


def claimed() -> list[Claim]:
    """Every folder and file claimed in this process so far, oldest first."""
    return list(_claimed)


def read_marker(folder: str | os.PathLike) -> dict | None:
    """What the marker in ``folder`` says (its kind and command), None when it holds none; OutputRefused when it
    holds one that cannot be read (a user's file of that name, a broken write)."""
    path = Path(folder) / MARKER
    try:
        status = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise OutputRefused(f"{path}: cannot read it ({error.strerror}); give another folder") from None
    try:
        if not stat.S_ISREG(status.st_mode) or status.st_size > MARKER_BYTES:
            raise ValueError("not a marker")
        marker = json.loads(path.read_bytes())
        if not (isinstance(marker, dict) and isinstance(marker.get("kind"), str)
                and isinstance(marker.get("command"), str)):
            raise ValueError("not a marker")
    except (OSError, ValueError):
        raise OutputRefused(f"{folder} holds a {MARKER} that arc-kit cannot read as its own: it writes there only "
                            "if that file is its marker; give another folder") from None
    return marker


def small_json(path: str | os.PathLike, limit: int = MARKER_BYTES * 16) -> object | None:
    """The JSON that ``path`` holds when it is a regular file of at most ``limit`` bytes (never a FIFO, which
    would make a read wait); None when it is anything else or unreadable. For recognising the kit's files."""
    path = Path(path)
    try:
        status = path.stat()
        if not stat.S_ISREG(status.st_mode) or status.st_size > limit:
            return None
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None


def is_made_folder(folder: str | os.PathLike) -> bool:
    """True when ``folder`` holds the kit's marker (whatever its kind): a folder of the kit's outputs."""
    try:
        return read_marker(folder) is not None
    except OutputRefused:
        return False


def check_folder(path: str | os.PathLike, kind: FolderKind, command: str, *, overwrite: bool = False,
                 option: str = "--out") -> dict | None:
    """Whether the kit may write into ``path`` as a ``kind`` folder for ``command`` (the rules of
    ``claim_folder``): OutputRefused in one line if not; else the folder's marker (None for a folder that is
    new, empty or an earlier kit's). Writes nothing."""
    path = Path(path)
    target = _followed(path, option)
    if not target.exists():
        return None
    if not target.is_dir():
        raise OutputRefused(f"{path} is a file, not a folder: give {option} a new or empty folder")
    marker = read_marker(target)
    if marker is None:
        foreign = [entry for entry in _entries(target) if not _is_marker_draft(entry)]
        if any(entry.name == MARKER for entry in foreign):  # another process claimed the folder since it was read
            return check_folder(path, kind, command, overwrite=overwrite, option=option)
        if not foreign or (kind.legacy is not None and kind.legacy(target)):
            return None
        raise OutputRefused(f"{path} holds files that arc-kit did not make ({_some(foreign)}): it writes only into "
                            f"a new or empty folder, or one it made; give {option} another folder")
    if marker["kind"] != kind.name:
        raise OutputRefused(f"{path} is {_a(marker['kind'])} folder that `arc-kit {marker['command']}` made, not "
                            f"{_a(kind.name)} folder: give {option} another folder")
    if kind.resumable:
        return marker
    if not overwrite:
        raise OutputRefused(f"{path} holds a {kind.name} that `arc-kit {marker['command']}` made: pass --overwrite to "
                            f"replace it, or give {option} another folder")
    if marker["command"] != command:
        raise OutputRefused(f"{path} holds a {kind.name} that `arc-kit {marker['command']}` made; --overwrite "
                            f"replaces only what `arc-kit {command}` made: give {option} another folder")
    return marker


def claim_folder(path: str | os.PathLike, kind: FolderKind, command: str, *, overwrite: bool = False,
                 clear: bool = False, option: str = "--out") -> Path:
    """Make ``path`` this ``command``'s ``kind`` folder, or refuse (OutputRefused, one line, nothing written).

    Allowed: a folder that does not exist (made, with its parents), an empty one, one the kit made as this
    kind (a marker; or, for a kind with ``legacy``, a folder an earlier kit made). A resumable kind's folder is
    continued, and with ``clear`` what its layout names is deleted first; any other kind's is refused unless
    ``overwrite`` (then only for the command that made it: its layout's entries are deleted first). The
    marker is written (or rewritten) before the folder is returned; ``option`` names the path in messages.
    """
    path = Path(path)
    marker = check_folder(path, kind, command, overwrite=overwrite, option=option)
    target = _followed(path, option)
    if marker is not None and (clear or not kind.resumable):
        remove_owned(target, kind)
    elif marker is None and target.exists() and clear:  # an earlier kit's folder (no marker): its layout, cleared
        remove_owned(target, kind)
    target.mkdir(parents=True, exist_ok=True)
    if marker is None or not kind.resumable:
        _write_marker(target, kind, command)
    _claimed.append(Claim(path, kind, command))
    return path


def remove_owned(folder: Path, kind: FolderKind) -> None:
    """Delete what ``kind``'s layout names in ``folder`` (a folder the kit made): its files and folders, a link
    itself (never what it points to); the marker and everything else stay."""
    for entry in _entries(folder):
        if entry.name == MARKER or not any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in kind.owned):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)


def claim_file(path: str | os.PathLike, command: str, *, own: Callable[[Path], bool] | None = None,
               option: str = "--out") -> Path:
    """Check that the kit may write the file ``path`` (its parent folder made when missing): nothing is there,
    or a regular file that ``own`` recognises as one the kit wrote; else OutputRefused in one line."""
    path = Path(path)
    if path.is_symlink():
        raise OutputRefused(f"{path} is a symbolic link: arc-kit never writes through one; give {option} the "
                            "real path, or a new file")
    if path.is_dir():
        raise OutputRefused(f"{path} is a folder, not a file: give {option} a file name")
    if path.exists() and not (own is not None and path.is_file() and own(path)):
        raise OutputRefused(f"{path} exists and arc-kit did not make it: give {option} a new file name, or move "
                            "that file away")
    path.parent.mkdir(parents=True, exist_ok=True)
    _claimed.append(Claim(path, None, command))
    return path


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """True when ``path`` is ``folder`` or lies below it (links followed, so another name for it counts)."""
    path, folder = Path(os.path.realpath(path)), Path(os.path.realpath(folder))
    return path == folder or folder in path.parents


# One line per error of the operating system: what it is, the file, what to do.
FIXES = {errno.ENOSPC: "free some space on that disk, or write elsewhere",
         errno.EDQUOT: "free some space within your quota, or write elsewhere",
         errno.EACCES: "check its permissions, or write elsewhere",
         errno.EPERM: "check its permissions, or write elsewhere",
         errno.EROFS: "that file system is read-only: write elsewhere",
         errno.EEXIST: "something is already there: move it away, or give another path",
         errno.ENOTDIR: "a part of that path is a file, not a folder: give another path",
         errno.EISDIR: "that is a folder: give a file",
         errno.ENOENT: "check the path",
         errno.ENAMETOOLONG: "give a shorter path",
         errno.EMFILE: "too many files open: raise the limit (ulimit -n)",
         errno.ELOOP: "a symbolic link loops: give the real path"}


def describe_os_error(error: OSError) -> str:
    """``error`` in one line: what went wrong, with which file (the one it names, else the last folder this
    process claimed), and what to do."""
    if error.errno is None or not error.strerror:  # a message of the kit's own (FolderInUseError...)
        return str(error)
    where = error.filename if error.filename is not None else None
    text = error.strerror
    if where is not None:
        text += f": {os.fsdecode(where)}" + (f" -> {os.fsdecode(error.filename2)}" if error.filename2 else "")
    elif _claimed:
        text += f" while writing into {_claimed[-1].path}"
    fix = FIXES.get(error.errno)
    return f"{text}; {fix}" if fix else text


def _followed(path: Path, option: str) -> Path:
    """``path`` with a symbolic link followed (to what it points to); OutputRefused for a dangling one."""
    if path.is_symlink() and not path.exists():
        raise OutputRefused(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist: give {option} "
                            "a folder that exists, or a new path")
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())


def _is_marker_draft(entry: Path) -> bool:
    """A marker half written by another process claiming the same new folder (its temporary file)."""
    return entry.name.startswith(f"{MARKER}.") and entry.name.endswith(".tmp")


def _a(word: str) -> str:
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def _some(entries: list[Path]) -> str:
    names = [shown(entry.name) + ("/" if entry.is_dir() and not entry.is_symlink() else "")
             for entry in entries[:SHOWN_ENTRIES]]
    more = len(entries) - SHOWN_ENTRIES
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _write_marker(folder: Path, kind: FolderKind, command: str) -> None:
    command_line = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"
    marker = {"kind": kind.name, "command": command, "note": "made by arc-kit; it writes into this folder again, "
              "and deletes only what it made here", "command_line": command_line[:300],
              "time": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    temporary = folder / f"{MARKER}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8", errors="backslashreplace")
    os.replace(temporary, folder / MARKER)


__all__ = ["FIXES", "MARKER", "Claim", "FolderKind", "OutputRefused", "check_folder", "claim_file", "claim_folder",
           "claimed", "describe_os_error", "inside", "is_made_folder", "read_marker", "remove_owned", "small_json"]
