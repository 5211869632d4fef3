"""Claiming a folder, and deleting in it by exact name: a folder is the kit's by its marker, its kind's layout names
what the kit writes there.

The rules are the package's (``arc_kit.outputs``): a folder is written when it is new, empty or holds the marker
``MARKER`` of the kind asked for (``check_folder``, ``claim_folder``); a file where nothing is or over the kit's own
(``claim_file``); a kind's layout (``FolderKind.owned``) is what ``remove_owned`` deletes and ``refuse_links`` checks.
This module knows markers, kinds and layouts; the writes themselves are ``files``'.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from arc_kit.names import listed, shown
from arc_kit.outputs.files import Claim, OutputRefused, remember, replace_file

MARKER = ".arc-kit.json"  # what the kit writes into every output folder it makes
MARKER_BYTES = 1 << 16  # a marker is a few hundred bytes: anything larger is not one
SHOWN_ENTRIES = 3  # the names a refusal shows of what a folder holds
# what every kind owns besides its layout: the kit's own temporary files and staging folders, left by a kill
TEMPORARY = (".*.{n}.{n}.tmp", ".arc-kit-staging-{n}-{n}/**")


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
    remember(Claim(path, kind, command))
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
    sub-folder it writes into) is a symbolic link: a run's folder is checked so before its work starts, which a link
    found by a write would stop half-way."""
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
    remember(Claim(path, None, command))
    return path


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """True when ``path`` is ``folder`` or lies below it (links followed, so another name for it counts)."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


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
