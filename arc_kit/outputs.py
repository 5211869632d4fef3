"""Where the kit may write, and how: into a folder that is new, empty or its own, never through a link, and
deleting only what its layout names.

Claiming a folder. Every command that writes an output folder claims it first (``claim_folder``, or
``run.locking.hold_folder`` with a kind). The kit writes into a folder that does not exist yet, is empty, or
holds the marker ``.arc-kit.json`` that the kit wrote when it made the folder, naming the command and the
folder's kind; anything else is refused in one line (``OutputRefused``) before a byte is written: a
marker or nothing. A symbolic link given as the folder is judged as the folder it points to, a dangling one refused. A single
output file (a picture, a CSV) is written where nothing is, or over a file the caller recognises as the
kit's own (``claim_file``). ``is_made_folder`` tells readers (a folder of task files) which folders hold the
kit's outputs, to skip them.

Deleting by exact name. A kind's layout (``FolderKind.owned``) names every entry the kit writes, as paths
inside the folder: exact names (``run.json``), ``{n}`` for a number (``worker-{n}/records.jsonl``),
``*`` inside a name for any text (only in names no user would give: the kit's temporary files, the task
claims in ``claims/``) and ``**`` for everything below a folder that is wholly the kit's (a checkpoint).
``remove_owned`` deletes exactly those (a link at such a name: the link itself, never what it points to)
and returns what it kept; a resumable kind's folder (a run, a training run) is continued and, with
``clear`` (``--restart``), first cleared so; any other kind's is replaced only with ``overwrite``, and then
only by the command that made it. Whatever else a kit folder holds is kept, and said in one warning line.

Writing into the kit's folders. Every file the kit writes there goes through one of ``appending`` (a link or no
regular file at the name refused; a file with a second name, a hard link, first replaced by its copy),
``replacing`` with its one-call forms ``replace_file`` and ``copy_file`` (written aside and renamed over the
name: a link there is replaced itself, never followed; a reader sees the old file or the new one),
``staged_into`` (for a library that writes a whole folder: ``save_pretrained``, accelerate's checkpoints),
``kit_subfolder``, ``remove_entry``, and ``refuse_links`` for code that opens its files itself (worker
processes); other modules, the worker pool's logs included, call nothing else to write. Each takes ``within``,
the kit folder the path lies in: every folder between it and the file must be a real folder (a link there is
refused: a sub-folder linked to a user's folder never receives a file; missing ones are made). Left out, it is
the innermost folder this process claimed that holds the path, else the path's own folder (only the file itself
is guarded then: a worker process, which claims nothing, passes the run folder). Every refusal is an
``OutputRefused`` in one line.

The folders claimed in this process are remembered (``claimed``), so that a command stopped by a signal,
or by an error of the operating system that names no file, can say which folder it was writing
(``describe_os_error``). This module knows files and folders; it knows nothing of what the kit writes in
them: each kind is declared by its owner (runs, training, models, the Kaggle dataset).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import re
import shutil
import stat
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from arc_kit.names import listed, shown

MARKER = ".arc-kit.json"  # what the kit writes into every output folder it makes
MARKER_BYTES = 1 << 16  # a marker is a few hundred bytes: anything larger is not one
SHOWN_ENTRIES = 3  # the names a refusal shows of what a folder holds
# what every kind owns besides its layout: the kit's own temporary files and staging folders, left by a kill
TEMPORARY = (".*.{n}.{n}.tmp", ".arc-kit-staging-{n}-{n}/**")


class OutputRefused(ValueError):
    """A place the kit will not write into (the message, one line, says why and what to do)."""


@dataclass(frozen=True)
class FolderKind:
    """A kind of output folder: its name, its layout (what the kit writes in it), whether a rerun continues in it."""

    name: str  # "run", "model"...: a folder is only ever claimed again as the kind it was made as
    owned: tuple[str, ...] = ()  # the layout: every entry the kit writes (see the module's docstring)
    resumable: bool = False  # a rerun continues in it; else a folder made earlier is replaced only with overwrite
    quiet: tuple[str, ...] = ()  # top-level entries of the kit's that clearing keeps, unsaid (a lock held meanwhile)
    kept: str = "what it wrote so far"  # what a stopped command leaves in it, in a few words

    def owns(self, relative: str) -> bool:
        """True when the layout names the entry at ``relative`` (a path inside the folder, ``/`` between names)."""
        parts = tuple(relative.split("/"))
        return any(_path_matches(tuple(entry.split("/")), parts) for entry in (*self.owned, *TEMPORARY))


@dataclass(frozen=True)
class Claim:
    """A folder (or a file) this process claimed, and for which command."""

    path: Path
    kind: FolderKind | None  # None for a file
    command: str


_claimed: list[Claim] = []
_temporary_numbers = itertools.count()


def claimed() -> list[Claim]:
    """Every folder and file claimed in this process so far, oldest first."""
    return list(_claimed)


# -- markers -----------------------------------------------------------------------------------------------------

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
    marker = small_json(path, MARKER_BYTES) if stat.S_ISREG(status.st_mode) else None  # never through a link
    if not (isinstance(marker, dict) and all(isinstance(marker.get(key), str) for key in ("kind", "command"))):
        raise OutputRefused(f"{folder} holds a {MARKER} that arc-kit cannot read as its own: it writes there only "
                            "if that file is its marker; give another folder")
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


# -- claiming ----------------------------------------------------------------------------------------------------

def check_folder(path: str | os.PathLike, kind: FolderKind, command: str, *, overwrite: bool = False,
                 option: str = "--out") -> dict | None:
    """Whether the kit may write into ``path`` as a ``kind`` folder for ``command`` (the rules of
    ``claim_folder``): OutputRefused in one line if not; else the folder's marker (None for a folder that is
    new or empty). Writes nothing."""
    path = Path(path)
    target = _followed(path, option)
    if not target.exists():
        return None
    if not target.is_dir():
        raise OutputRefused(f"{path} is a file, not a folder: give {option} a new or empty folder")
    marker = read_marker(target)
    if marker is None:
        foreign = [entry for entry in _entries(target)  # a marker half written by another process is none
                   if not (entry.name.startswith(f".{MARKER}.") and entry.name.endswith(".tmp"))]
        if any(entry.name == MARKER for entry in foreign):  # another process claimed the folder since it was read
            return check_folder(path, kind, command, overwrite=overwrite, option=option)
        if not foreign:
            return None
        names = [entry.name + ("/" if entry.is_dir() and not entry.is_symlink() else "") for entry in foreign]
        raise OutputRefused(f"{path} holds files that arc-kit did not make ({_listed(names)}): it writes only into "
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
    """Make ``path`` this ``command``'s ``kind`` folder (made with its parents where missing), or refuse
    (``check_folder``: OutputRefused, one line, nothing written). With ``clear``, or ``overwrite`` of a kind that
    is not resumable, what its layout names is deleted first (``remove_owned``; what else it holds is said in a
    warning). The marker is written before the folder is returned; ``option`` names the path in messages."""
    path = Path(path)
    marker = check_folder(path, kind, command, overwrite=overwrite, option=option)
    target = _followed(path, option)
    if marker is not None and (clear or not kind.resumable):
        kept = remove_owned(target, kind)
        if kept:
            warnings.warn(f"kept in {path} what arc-kit did not make there: {_listed(kept)}", stacklevel=2)
    target.mkdir(parents=True, exist_ok=True)
    if marker is None or not kind.resumable:
        _write_marker(target, kind, command)
    _claimed.append(Claim(path, kind, command))
    return path


def remove_owned(folder: Path, kind: FolderKind, *, below: str = "") -> list[str]:
    """Delete what ``kind``'s layout names in ``folder`` (a folder the kit made), or only below the layout's
    sub-folder ``below`` (that sub-folder too, once empty): its files, a link itself (never what it points to), a
    sub-folder the layout names once it is empty. The marker and everything else stay; returns what was kept
    (paths inside ``folder``)."""
    layout = [tuple(entry.split("/")) for entry in (*kind.owned, *TEMPORARY)]
    start = folder
    for part in [part for part in below.split("/") if part]:
        layout = [entry[1:] for entry in layout if entry and _name_matches(entry[0], part)]
        start = start / part
        if start.is_symlink() or not start.is_dir():
            return []
    kept: list[str] = []
    _remove_matching(start, layout, f"{below.strip('/')}/" if below.strip("/") else "", kept, (MARKER, *kind.quiet))
    if start != folder:
        with contextlib.suppress(OSError):  # the sub-folder itself, when the kit's entries were all it held
            start.rmdir()
    return kept


def refuse_links(folder: str | os.PathLike, kind: FolderKind) -> None:
    """OutputRefused in one line when an entry of ``folder`` at a name of ``kind``'s layout (a file it writes, or a
    sub-folder it writes into) is a symbolic link: a folder about to be written by code that opens its files itself
    (worker processes) is checked first."""
    def walk(current: Path, layout: list[tuple[str, ...]], prefix: str) -> None:
        for entry in _entries(current):
            matching = [item[1:] for item in layout if item and _name_matches(item[0], entry.name)]
            if matching and entry.is_symlink():
                raise OutputRefused(f"{entry} is a symbolic link inside a folder arc-kit writes ({prefix}{entry.name}"
                                    " is its own name): it never writes through one; move the link away and run again")
            deeper = [rest for rest in matching if rest and rest != ("**",)]
            if deeper and entry.is_dir():
                walk(entry, deeper, f"{prefix}{entry.name}/")

    folder = Path(folder)
    if folder.is_dir():
        walk(folder, [tuple(entry.split("/")) for entry in (*kind.owned, *kind.quiet)], "")


def claim_file(path: str | os.PathLike, command: str, *, own: Callable[[Path], bool] | None = None,
               option: str = "--out") -> Path:
    """Check that the kit may write the file ``path``: nothing is there, or a regular file that ``own`` recognises
    as one the kit wrote; else OutputRefused in one line. Writes nothing (its folder is made as it is written)."""
    path = Path(path)
    if path.is_symlink():
        raise OutputRefused(f"{path} is a symbolic link: arc-kit never writes through one; give {option} the "
                            "real path, or a new file")
    if path.is_dir():
        raise OutputRefused(f"{path} is a folder, not a file: give {option} a file name")
    if path.exists() and not (own is not None and path.is_file() and own(path)):
        raise OutputRefused(f"{path} exists and arc-kit did not make it: give {option} a new file name, or move "
                            "that file away")
    _claimed.append(Claim(path, None, command))
    return path


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """True when ``path`` is ``folder`` or lies below it (links followed, so another name for it counts)."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


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


def _name_matches(pattern: str, name: str) -> bool:
    """Whether ``name`` is one the layout's ``pattern`` names (``{n}``: digits; ``*``: any text; ``**``: any)."""
    if pattern == "**":
        return True
    expression = re.escape(pattern).replace(re.escape("{n}"), "[0-9]+").replace(re.escape("*"), ".*")
    return re.fullmatch(expression, name, re.DOTALL) is not None


def _path_matches(entry: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    if entry and entry[-1] == "**":
        return len(parts) >= len(entry) - 1 and all(map(_name_matches, entry[:-1], parts))
    return len(parts) == len(entry) and all(map(_name_matches, entry, parts))


def _remove_matching(folder: Path, layout: list[tuple[str, ...]], prefix: str, kept: list[str],
                     quiet: tuple[str, ...] = ()) -> None:
    """Delete the entries of ``folder`` that ``layout`` (its paths relative to ``folder``) names; note the rest."""
    for entry in _entries(folder):
        if not prefix and entry.name in quiet:
            continue
        matching = [item[1:] for item in layout if item and _name_matches(item[0], entry.name)]
        whole = any(rest == ("**",) for rest in matching)
        leaf = whole or any(not rest for rest in matching)
        deeper = [rest for rest in matching if rest and rest != ("**",)]
        real_folder = entry.is_dir() and not entry.is_symlink()
        if entry.is_symlink() and (leaf or deeper):
            entry.unlink()  # the link itself, never what it points to
        elif real_folder and whole:
            shutil.rmtree(entry)
        elif real_folder and deeper:
            _remove_matching(entry, deeper, f"{prefix}{entry.name}/", kept)
            with contextlib.suppress(OSError):  # removed when the kit's entries were all it held
                entry.rmdir()
        elif leaf and not real_folder:
            entry.unlink()
        else:
            kept.append(prefix + entry.name + ("/" if real_folder else ""))


def _followed(path: Path, option: str) -> Path:
    """``path`` with a symbolic link followed (to what it points to); OutputRefused for a dangling one."""
    if path.is_symlink() and not path.exists():
        raise OutputRefused(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist: give {option} "
                            "a folder that exists, or a new path")
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())


def _a(word: str) -> str:
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def _listed(names: list[str]) -> str:
    return listed(map(shown, names), count=SHOWN_ENTRIES)


def _write_marker(folder: Path, kind: FolderKind, command: str) -> None:
    command_line = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python"
    marker = {"kind": kind.name, "command": command, "note": "made by arc-kit; it writes into this folder again, "
              "and deletes only what it made here", "command_line": command_line[:300],
              "time": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    replace_file(folder / MARKER, json.dumps(marker, indent=1) + "\n", within=folder, durable=False)
