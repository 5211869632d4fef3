"""Big files in checked parts: pack files into numbered parts under a size cap, reassemble, verify.

Some machines take files in limited transfers (a GPU machine that accepts 64 MiB per call, a
dataset upload with a per-file cap). ``pack`` writes the given files as one tar stream cut into
``NAME.part000``, ``NAME.part001``, ... of at most ``part_bytes`` each, and ``NAME.parts.json``, a
manifest with every part's size and sha256 and every file's sha256. ``unpack`` checks each part
against the manifest, joins them, extracts, and checks each file again; any mismatch is a
``PartsError`` with a one-line message that says which part or file. Parts may arrive in separate
folders (``unpack`` takes several).

This module knows files and checksums; it knows nothing of models or of how the parts travel.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tarfile
from collections.abc import Sequence
from pathlib import Path

from arc_kit.data.jsonio import read_json, write_json_atomically
from arc_kit.names import file_name
from arc_kit.outputs import remove_entry, replacing

MANIFEST_SUFFIX = ".parts.json"
DEFAULT_PART_BYTES = 40 * 1024 * 1024


class PartsError(RuntimeError):
    """A part or file is missing or does not match its manifest (one line)."""


def sha256_of(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, as hex."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class _PartWriter:
    """A write-only stream (all that tarfile's stream mode asks of one) that starts a new part file every
    ``part_bytes`` bytes."""

    def __init__(self, folder: Path, name: str, part_bytes: int):
        self.folder, self.name, self.part_bytes = folder, name, part_bytes
        self.parts: list[dict] = []
        self._handle, self._digest, self._written = None, None, 0
        self._part = contextlib.ExitStack()  # the part being written (``outputs.replacing``: never through a link)

    def close(self) -> None:
        """The part being written finished (its size and sha256 noted); a new one starts at the next write."""
        if self._handle is not None:
            self._part.close()
            self.parts[-1].update(bytes=self._written, sha256=self._digest.hexdigest())
            self._handle = None

    def write(self, data) -> int:
        view = memoryview(data)
        while len(view):
            if self._handle is None or self._written == self.part_bytes:
                self.close()
                part_name = f"{self.name}.part{len(self.parts):03d}"
                self._handle = self._part.enter_context(replacing(self.folder / part_name, binary=True))
                self._digest, self._written = hashlib.sha256(), 0
                self.parts.append({"file": part_name})
            take = min(len(view), self.part_bytes - self._written)
            self._handle.write(view[:take])
            self._digest.update(view[:take])
            self._written += take
            view = view[take:]
        return len(data)


def pack(paths: Sequence[str | os.PathLike], out: str | os.PathLike, name: str,
         part_bytes: int = DEFAULT_PART_BYTES) -> Path:
    """Pack files and folders into ``out/NAME.partNNN`` of at most ``part_bytes``; returns the manifest path.

    Each path goes into the archive under its own name (a folder with everything below it).
    """
    if part_bytes < 1024:
        raise ValueError(f"part_bytes must be at least 1024, got {part_bytes}")
    out = Path(out)
    for old in out.glob(f"{name}.part[0-9][0-9][0-9]"):
        remove_entry(old)  # an earlier pack's (a link: the link itself)
    files = {}
    writer = _PartWriter(out, name, part_bytes)
    with tarfile.open(fileobj=writer, mode="w|") as archive:
        for path in map(Path, paths):
            if not path.exists():
                raise PartsError(f"nothing to pack at {path}")
            members = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for member in members:
                arcname = str(Path(path.name) / member.relative_to(path)) if path.is_dir() else path.name
                files[arcname] = {"bytes": member.stat().st_size, "sha256": sha256_of(member)}
                archive.add(member, arcname=arcname, recursive=False)
    writer.close()
    manifest = out / f"{name}{MANIFEST_SUFFIX}"
    write_json_atomically(manifest, {"name": name, "part_bytes": part_bytes, "parts": writer.parts, "files": files})
    return manifest


def _find(folders: Sequence[Path], file_name: str) -> Path:
    for folder in folders:
        if (folder / file_name).is_file():
            return folder / file_name
    raise PartsError(f"part {file_name} is missing (looked in {', '.join(map(str, folders))})")


def unpack(manifest: str | os.PathLike, destination: str | os.PathLike,
           part_folders: Sequence[str | os.PathLike] = ()) -> list[Path]:
    """Check every part, join them, extract into ``destination``, check every file; returns the files.

    Parts are looked for beside the manifest, then in ``part_folders``.
    """
    manifest = Path(manifest)
    record = read_json(manifest)
    names = [part.get("file") if isinstance(part, dict) else None for part in record.get("parts") or []]
    if not names or not all(isinstance(name, str) and name == Path(name).name and name not in (".", "..")
                            for name in names):
        raise PartsError(f"{manifest} names no parts, or parts that are no plain file names: not a parts manifest")
    folders = [manifest.parent, *map(Path, part_folders)]
    parts = [_find(folders, part["file"]) for part in record["parts"]]
    for path, part in zip(parts, record["parts"]):
        size = path.stat().st_size
        if size != part["bytes"] or sha256_of(path) != part["sha256"]:
            raise PartsError(f"part {path} does not match its manifest ({size} bytes, expected {part['bytes']}): "
                             f"copy it again")
    destination = Path(destination)
    joined = destination / f".{file_name(str(record['name']))}.tar.partial"
    with replacing(joined, binary=True) as sink:
        for path in parts:
            with open(path, "rb") as source:
                shutil.copyfileobj(source, sink, 1 << 20)
    try:
        with tarfile.open(joined, mode="r:") as archive:
            names = archive.getnames()
            unexpected = sorted(set(names) - set(record["files"]))
            if unexpected:
                raise PartsError(f"the archive holds files its manifest does not name: {unexpected[:3]}")
            archive.extractall(destination, filter="data")
    finally:
        joined.unlink(missing_ok=True)
    extracted = []
    for arcname, expected in record["files"].items():
        path = destination / arcname
        if not path.is_file() or sha256_of(path) != expected["sha256"]:
            raise PartsError(f"{path} is missing or does not match its manifest after unpacking")
        extracted.append(path)
    return extracted
