"""Writing into the kit's folders: every file the kit writes there, appended or replaced, never through a link.

``appending`` (a link or no regular file at the name refused; a file with a second name, a hard link, first replaced
by its copy), ``replacing`` with its one-call forms ``replace_file`` and ``copy_file`` (written aside and renamed over
the name: a link there is replaced itself, never followed; a reader sees the old file or the new one),
``staged_into`` (for a library that writes a whole folder), ``kit_subfolder`` and ``remove_entry``: each takes
``within``, the kit folder the path lies in, and every folder between it and the file must be a real folder
(``_guarded``). The folders and files claimed in this process are remembered here (``claimed``, ``remember``), so
that a write without ``within`` finds its kit folder and an error of the operating system that names no file says
which folder it was writing (``describe_os_error``). This module knows files and folders; nothing of markers, kinds
or layouts (``folders``).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO


class OutputRefused(ValueError):
    """A place the kit will not write into (the message, one line, says why and what to do)."""


@dataclass(frozen=True)
class Claim:
    """A folder (or a file) this process claimed, and for which command."""

    path: Path
    kind: object | None  # the folder's ``folders.FolderKind``; None for a file
    command: str


_claimed: list[Claim] = []
_temporary_numbers = itertools.count()


def claimed() -> list[Claim]:
    """Every folder and file claimed in this process so far, oldest first."""
    return list(_claimed)


def remember(claim: Claim) -> None:
    """``claim`` made in this process (``folders.claim_folder``, ``folders.claim_file``)."""
    _claimed.append(claim)


# -- writing into the kit's folders --------------------------------------------------------------------------------

def kit_subfolder(path: str | os.PathLike, *, within: str | os.PathLike | None = None) -> Path:
    """``path``, a folder inside a kit folder, made where missing (with the folders between); OutputRefused when it
    or a folder between it and ``within`` is a symbolic link or no folder."""
    path = Path(path)
    _guarded(path / "_", within)
    return path


@contextlib.contextmanager
def appending(path: str | os.PathLike, *, within: str | os.PathLike | None = None,
              newline: str | None = None) -> Iterator[IO]:
    """A file object appending to ``path`` (made if missing), flushed to disk when the block ends; OutputRefused
    when ``path`` is a link or no regular file. A file with another name too (a hard link: a user's file linked in)
    is first replaced by a copy of itself (``copy_file``), so that the other name keeps its bytes. Opened for
    reading too (``os.pread`` on its ``fileno()``)."""
    path = Path(path)
    _guarded(path, within)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | _NO_FOLLOW | getattr(os, "O_NONBLOCK", 0)
    descriptor = _opened(path, flags)
    if os.fstat(descriptor).st_nlink > 1:  # its bytes are another name's too: an append would change that file
        os.close(descriptor)
        copy_file(path, path, within=path.parent)
        descriptor = _opened(path, flags)
    if hasattr(os, "O_NONBLOCK"):
        os.set_blocking(descriptor, True)
    with _naming(path), os.fdopen(descriptor, "a", newline=newline, **_TEXT) as handle:
        yield handle
        handle.flush()
        os.fsync(descriptor)


@contextlib.contextmanager
def replacing(path: str | os.PathLike, *, within: str | os.PathLike | None = None, binary: bool = False,
              newline: str | None = None, durable: bool = True) -> Iterator[IO]:
    """A file object on a new temporary file beside ``path``; when the block ends without an error, flushed (to
    disk, unless not ``durable``) and renamed over ``path`` (a link there replaced itself); on an error, removed.
    OutputRefused when a folder is at ``path``; an error of the operating system that names no file names ``path``."""
    path = Path(path)
    folder = _guarded(path, within)
    _no_folder_at(path)
    temporary = folder / f".{path.name[:80]}.{os.getpid()}.{next(_temporary_numbers)}.tmp"
    descriptor = _opened(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW)
    try:
        with _naming(path), os.fdopen(descriptor, "wb" if binary else "w", **({} if binary else _TEXT),
                                      newline=newline) as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(descriptor)
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def replace_file(path: str | os.PathLike, data: str | bytes, *, within: str | os.PathLike | None = None,
                 durable: bool = True) -> Path:
    """Write ``data`` (text as UTF-8) as the whole of ``path``, as ``replacing`` does; ``path``."""
    with replacing(path, within=within, binary=isinstance(data, bytes), durable=durable) as handle:
        handle.write(data)
    return Path(path)


def copy_file(source: str | os.PathLike, path: str | os.PathLike, *,
              within: str | os.PathLike | None = None) -> Path:
    """A copy of the file ``source`` as the whole of ``path``, as ``replacing`` writes; ``path``."""
    with open(source, "rb") as reader, replacing(path, within=within, binary=True) as handle:
        shutil.copyfileobj(reader, handle, 1 << 20)
    return Path(path)


def remove_entry(path: str | os.PathLike, *, within: str | os.PathLike | None = None) -> None:
    """Delete the kit's file ``path`` if it is there (a link: the link itself); never a folder."""
    path = Path(path)
    _guarded(path, within)
    _no_folder_at(path, "keeps")
    path.unlink(missing_ok=True)


@contextlib.contextmanager
def staged_into(folder: str | os.PathLike, *, within: str | os.PathLike | None = None) -> Iterator[Path]:
    """A new, empty folder for a library that writes many files at once; when the block ends without an error,
    each file it holds is renamed over its name in ``folder`` (a sub-folder's into ``kit_subfolder``), as
    ``replacing`` does; the staging folder is removed either way."""
    folder = Path(folder)
    kit_subfolder(folder, within=within)
    staging = folder / f".arc-kit-staging-{os.getpid()}-{next(_temporary_numbers)}"
    staging.mkdir()
    try:
        yield staging
        _move_into(staging, folder, within if within is not None else _anchor(folder / "_", None))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move_into(staging: Path, folder: Path, within: Path) -> None:
    for entry in sorted(staging.iterdir()):
        target = folder / entry.name
        if entry.is_dir() and not entry.is_symlink():
            _move_into(entry, kit_subfolder(target, within=within), within)
            continue
        _no_folder_at(target)
        os.replace(entry, target)


# -- errors of the operating system --------------------------------------------------------------------------------

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
    text = error.strerror
    if error.filename is not None:
        text += f": {os.fsdecode(error.filename)}" + (f" -> {os.fsdecode(error.filename2)}" if error.filename2 else "")
    elif _claimed:
        text += f" while writing into {_claimed[-1].path}"
    fix = FIXES.get(error.errno)
    return f"{text}; {fix}" if fix else text


# -- the pieces ----------------------------------------------------------------------------------------------------

_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_TEXT = {"encoding": "utf-8", "errors": "backslashreplace"}  # a lone surrogate of an id is written escaped


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError of the block that names no file (a full disk on ``write``) names ``path``."""
    try:
        yield
    except OSError as error:
        if error.filename is not None or error.errno is None:
            raise
        raise OSError(error.errno, error.strerror, str(path)) from error


def _opened(path: Path, flags: int) -> int:
    """``os.open(path, flags)`` for a regular file (made with the usual permissions); OutputRefused in one line
    for a link, a FIFO, a device or a socket there."""
    try:
        descriptor = os.open(path, flags, 0o666)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EMLINK) or (error.errno == errno.EEXIST and path.is_symlink()):
            raise OutputRefused(f"{path} is a symbolic link inside a folder arc-kit writes: it never writes through "
                                "one; move the link away and run again") from None
        if error.errno == errno.ENXIO:  # a FIFO that nobody reads
            raise OutputRefused(f"{path} is no regular file (a FIFO?) where arc-kit writes one: move it away") \
                from None
        raise
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise OutputRefused(f"{path} is no regular file (a FIFO, a device?) where arc-kit writes one: move it away")
    return descriptor


def _no_folder_at(path: Path, verb: str = "writes") -> None:
    """OutputRefused when a folder (not a link to one) is where the kit ``verb`` a file."""
    if path.is_dir() and not path.is_symlink():
        raise OutputRefused(f"{path} is a folder where arc-kit {verb} a file: move it away, or give another folder")


def _anchor(path: Path, within: str | os.PathLike | None) -> Path:
    """The kit folder ``path`` lies in: ``within``, else the innermost folder claimed here that holds it, else
    its own folder."""
    if within is not None:
        return Path(os.path.abspath(within))
    holders = [Path(os.path.abspath(claim.path)) for claim in _claimed if claim.kind is not None]
    holders = [folder for folder in holders if folder in path.parents]
    return max(holders, key=lambda folder: len(folder.parts), default=path.parent)


def _guarded(path: Path, within: str | os.PathLike | None) -> Path:
    """The folder ``path`` goes in, every folder from ``within`` (see ``_anchor``) down to it made where missing
    and checked to be a real folder; OutputRefused, one line, for a link or a file among them."""
    path = Path(os.path.abspath(path))
    anchor = _anchor(path, within)
    parts = path.parent.relative_to(anchor).parts  # ValueError when ``path`` does not lie in ``anchor``
    anchor.mkdir(parents=True, exist_ok=True)  # the kit folder (or, where none holds it, the file's own folder)
    current = anchor
    for part in parts:
        current = current / part
        with contextlib.suppress(FileExistsError):
            current.mkdir()
        status = current.lstat()
        if stat.S_ISLNK(status.st_mode):
            raise OutputRefused(f"{current} is a symbolic link inside a folder arc-kit writes: it never writes "
                                "through one; move the link away and run again")
        if not stat.S_ISDIR(status.st_mode):
            raise OutputRefused(f"{current} is a file where arc-kit keeps a folder: move it away and run again")
    return path.parent

