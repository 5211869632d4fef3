"""JSON files: read one with a one-line reason when it cannot be read, write one atomically, append lines.

Every file the kit reads or writes as JSON goes through here, so that a broken file (bad syntax, not
UTF-8, nested a thousand levels deep, a number too long to convert) is reported as an
``InvalidDataError`` naming the file and the place, never a traceback, and so that a file being
written is never seen half-written. An object that holds a key twice (JSON keeps the last copy)
is read as a ``JsonObject`` whose ``repeated_keys`` say which and how often, so that the loaders
can refuse a task id given twice. This module knows JSON and files; it knows nothing of what the
files hold.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arc_kit.tasks import InvalidDataError


class JsonObject(dict):
    """A JSON object that held some keys more than once: ``repeated_keys`` maps each to how often."""

    repeated_keys: dict[str, int] = {}


def _object_from_pairs(pairs: list[tuple[str, Any]]) -> dict:
    result = dict(pairs)
    if len(result) == len(pairs):
        return result
    counts: dict[str, int] = {}
    for key, _ in pairs:
        counts[key] = counts.get(key, 0) + 1
    repeated = JsonObject(result)
    repeated.repeated_keys = {key: count for key, count in counts.items() if count > 1}
    return repeated


def parse_json(text: str | bytes, source: str = "") -> Any:
    """Parse JSON text (bytes must be UTF-8); InvalidDataError (with ``source`` and the place) when it is not valid.

    Objects with a repeated key come back as ``JsonObject`` (see the module's description).
    """
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text, object_pairs_hook=_object_from_pairs)
    except json.JSONDecodeError as error:
        raise InvalidDataError([f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"],
                               source) from None
    except UnicodeDecodeError as error:
        raise InvalidDataError([f"not UTF-8 text ({error.reason} at byte {error.start})"], source) from None
    except RecursionError:
        raise InvalidDataError(["JSON nested too deeply to read"], source) from None
    except ValueError as error:  # e.g. an integer with more digits than Python converts
        raise InvalidDataError([f"unreadable JSON value: {str(error).splitlines()[0]}"], source) from None


def read_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file; InvalidDataError saying what is wrong and where (no traceback needed)."""
    path = Path(path)
    if not path.exists():
        raise InvalidDataError([f"no such file: {path}"])
    if path.is_dir():
        raise InvalidDataError([f"{path} is a folder, expected a JSON file"])
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InvalidDataError([f"cannot read the file: {error.strerror or error}"], str(path)) from None
    return parse_json(data, str(path))


def write_json_atomically(path: str | os.PathLike, data: Any, *, indent: int | None = None) -> Path:
    """Write JSON to a temporary file beside ``path``, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=indent, separators=None if indent else (",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return path


def append_json_line(path: str | os.PathLike, data: Any) -> None:
    """Append one JSON value as a line; a torn last line (a killed writer) is closed first, not continued."""
    path = Path(path)
    torn = False
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            torn = handle.read(1) != b"\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(("\n" if torn else "") + json.dumps(data) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_json_lines(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every line of a JSON-lines file that parses; other lines are skipped.

    A torn line (a run killed while writing) is the usual reason for a line that does not parse.
    """
    path = Path(path)
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except (json.JSONDecodeError, RecursionError, ValueError):
                continue
