"""JSON files: read one with a one-line reason when it cannot be read, write one atomically, append lines.

Every file the kit reads or writes as JSON goes through here, so that a broken file (bad syntax, not
UTF-8, nested a thousand levels deep, a number too long to convert) is reported as an
``InvalidDataError`` naming the file and the place, never a traceback, and so that a file being
written is never seen half-written. An object that holds a key twice (JSON keeps the last copy)
is read as a ``JsonObject`` whose ``repeated_keys`` say which and how often, so that the loaders
can refuse a task id given twice. When the syntax is sound but one entry of the top-level object
cannot be read (nested too deeply, a number with thousands of digits), the other entries are
still read: that entry is None and ``unreadable_keys`` says why, so that a loader can name the
task and skip only it. What is no regular file (a FIFO, a device, a socket) or holds more than
``MAX_FILE_BYTES`` is refused in one line before it is read, so that no read waits forever; a JSON-lines file
(a run's records) is read a line at a time, so that no reader holds it whole. This module knows JSON and files;
it knows nothing of what the files hold.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from arc_kit.data.tasks import InvalidDataError
from arc_kit.names import shown
from arc_kit.outputs import appending, replace_file, replacing

MAX_FILE_BYTES = 2**30  # the most a JSON file the kit reads may hold (ARC's largest files hold tens of MB)
MAX_LINE_BYTES = 2**26  # the most a line of a JSON-lines file may hold (a record of the largest task: a few MB)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class JsonObject(dict):
    """A JSON object with keys held more than once (``repeated_keys``: how often) or whose values could
    not be read (``unreadable_keys``: why; the value is None)."""

    repeated_keys: dict[str, int] = {}
    unreadable_keys: dict[str, str] = {}


def repeated_keys_within(value: Any) -> list[str]:
    """Every key that an object anywhere in ``value`` (as ``parse_json`` read it) held more than once, with
    where: ``sampler: 'threshold' 2 times``; [] when none did."""
    found, stack = [], [("", value)]
    while stack:  # a loop, not recursion: what json read may nest as deeply as json reads
        where, item = stack.pop()
        if isinstance(item, dict):
            found += [f"{where or 'the top level'}: {key!r} {times} times"
                      for key, times in getattr(item, "repeated_keys", {}).items()]
            stack.extend((f"{where}.{shown(key)}" if where else shown(key), inner)
                         for key, inner in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{where}[{index}]", inner) for index, inner in reversed(list(enumerate(item))))
    return found


def _object_from_pairs(pairs: list[tuple[str, Any]]) -> dict:
    result = dict(pairs)
    if len(result) == len(pairs):
        return result
    repeated = JsonObject(result)
    repeated.repeated_keys = {key: count for key, count in Counter(key for key, _ in pairs).items() if count > 1}
    return repeated


_SPACE = re.compile(r"[ \t\n\r]*")
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[{]+|[\]}]+')  # a string, or a run of openers or closers
_CLOSER_OF = str.maketrans("[{", "]}")
_SCALAR = re.compile(r"[^,\]}\s]*")


def _place(text: str, index: int) -> str:
    """``line L column C`` of ``text[index]``, counted from 1 as json's own messages count."""
    line = text.count("\n", 0, index) + 1
    return f"line {line} column {index - text.rfind(chr(10), 0, index)}"


def _value_end(text: str, start: int) -> tuple[int | None, int]:
    """(the index just past the JSON value at ``start``, its nesting depth), without parsing it (no recursion).

    The end is None when brackets or quotes do not balance or pair up.
    """
    if text[start:start + 1] not in ("[", "{"):
        match = _STRING_OR_BRACKET.match(text, start) if text.startswith('"', start) else _SCALAR.match(text, start)
        return (match.end() if match else None), 0
    due, deepest = [], 0  # the closers still due, the next one last (each step costs its run's length only)
    for match in _STRING_OR_BRACKET.finditer(text, start):
        token = match.group()
        if token[0] in "[{":
            due.extend(token.translate(_CLOSER_OF))
            deepest = max(deepest, len(due))
        elif token[0] in "]}":
            closing = token[:len(due)]  # closers past the value's end belong to what holds it
            if closing != "".join(reversed(due[len(due) - len(closing):])):
                return None, deepest
            del due[len(due) - len(closing):]
            if not due:
                return match.start() + len(closing), deepest
    return None, deepest


def _why_unreadable(error: Exception, text: str, start: int, end: int | None, depth: int) -> str:
    """What is wrong with the value at ``text[start:end]`` that json could not read (depth, or a huge number)."""
    if isinstance(error, RecursionError):
        levels = f"{depth} levels" if depth else "too many levels"
        return f"JSON nested too deeply to read ({levels}, from {_place(text, start)})"
    limit = sys.get_int_max_str_digits()
    long_number = re.compile(r"-?\d{%d,}" % (limit + 1)) if limit else None
    match = long_number.search(text, start, end if end is not None else len(text)) if long_number else None
    if match is not None:  # say what is wrong with the file, not how to make Python read it
        digits = len(match.group().lstrip("-"))
        return (f"a number with {digits} digits at {_place(text, match.start())}, more than the {limit} a JSON "
                "reader accepts: no valid file holds such a number, so this one is damaged")
    return f"unreadable JSON value ({str(error).splitlines()[0]}, from {_place(text, start)})"


def _read_entry_by_entry(text: str) -> JsonObject | None:
    """The top-level object of ``text`` read one entry at a time, an entry that json cannot read (nested
    too deeply, a huge number) left None and explained in ``unreadable_keys``; None when ``text`` is no
    object or its syntax is broken (then the whole file is unreadable)."""
    decoder = json.JSONDecoder(object_pairs_hook=_object_from_pairs)
    index = _SPACE.match(text, 0).end()
    if not text.startswith("{", index):
        return None
    index = _SPACE.match(text, index + 1).end()
    pairs, unreadable = [], {}
    while not text.startswith("}", index) or pairs:
        try:
            if not text.startswith('"', index):
                return None
            key, index = json.decoder.scanstring(text, index + 1)
            index = _SPACE.match(text, index).end()
            if not text.startswith(":", index):
                return None
            index = _SPACE.match(text, index + 1).end()
            value, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            return None
        except (RecursionError, ValueError) as error:
            end, depth = _value_end(text, index)
            if end is None:
                return None
            unreadable[key] = _why_unreadable(error, text, index, end, depth)
            value, index = None, end
        pairs.append((key, value))
        index = _SPACE.match(text, index).end()
        if text.startswith(",", index):
            index = _SPACE.match(text, index + 1).end()
        elif text.startswith("}", index):
            break
        else:
            return None
    if _SPACE.match(text, index + 1).end() != len(text):
        return None
    result = _object_from_pairs(pairs)
    result = result if isinstance(result, JsonObject) else JsonObject(result)
    result.unreadable_keys = unreadable
    return result


def parse_json(text: str | bytes, source: str = "") -> Any:
    """Parse JSON text (bytes must be UTF-8); InvalidDataError (with ``source`` and the place) when it is not valid.
    An object with a repeated key, or a top-level one with unreadable entries, is a ``JsonObject`` (module docstring)."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text, object_pairs_hook=_object_from_pairs)
    except json.JSONDecodeError as error:
        raise InvalidDataError([f"invalid JSON at line {error.lineno} column {error.colno}: {error.msg}"],
                               source) from None
    except UnicodeDecodeError as error:
        raise InvalidDataError([f"not UTF-8 text ({error.reason} at byte {error.start})"], source) from None
    except (RecursionError, ValueError) as error:  # too deep, or an integer with more digits than Python converts
        by_entry = _read_entry_by_entry(text)
        if by_entry is not None:
            return by_entry
        end, depth = _value_end(text, _SPACE.match(text, 0).end())
        reason = _why_unreadable(error, text, 0, end, depth)
        unbalanced = "; its brackets do not close (a truncated file?)" if end is None else ""
        raise InvalidDataError([f"the whole file is unreadable: {reason}{unbalanced}"], source) from None


def read_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file; InvalidDataError saying what is wrong and where (no traceback needed)."""
    return parse_json(read_file(path), str(path))


def _refuse_irregular(mode: int, path: Path, what: str) -> None:
    """InvalidDataError, one line, when a file of ``mode`` is no regular file (a reader might wait on it forever)."""
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a named pipe (FIFO)", stat.S_ISCHR: "a character device",
             stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in kinds.items() if test(mode)), "not a regular file")
        raise InvalidDataError([f"{path} is {kind}, expected a {what}"])


def _cannot_read(path: Path, error: OSError) -> InvalidDataError:
    return InvalidDataError([f"cannot read the file: {error.strerror or error}"], str(path))


def check_regular_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` when it names a regular file (symbolic links followed); InvalidDataError for one that is missing,
    or is a folder, a FIFO, a device or a socket, which a reader would wait on forever or read without end."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InvalidDataError([f"no such file: {path}"]) from None
    except OSError as error:
        raise _cannot_read(path, error) from None
    _refuse_irregular(mode, path, what)
    return path


def read_file(path: str | os.PathLike, limit: int = MAX_FILE_BYTES, what: str = "JSON file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; InvalidDataError, one line, for anything else.

    What the file is is checked on the open file too (opened without waiting), so a FIFO put in its
    place between the check and the open cannot make the read wait forever.
    """
    path = check_regular_file(path, what)
    try:
        descriptor = os.open(path, os.O_RDONLY | _NONBLOCK)  # a FIFO's open would wait
    except OSError as error:
        raise _cannot_read(path, error) from None
    with os.fdopen(descriptor, "rb") as handle:
        _refuse_irregular(os.fstat(descriptor).st_mode, path, what)
        if _NONBLOCK:
            os.set_blocking(descriptor, True)
        try:
            data = handle.read(limit + 1)
        except OSError as error:
            raise _cannot_read(path, error) from None
    if len(data) > limit:
        raise InvalidDataError([f"the file holds more than {limit:,} bytes, more than any {what} the kit reads: "
                                "is it the right file?"], str(path))
    return data


def write_json_atomically(path: str | os.PathLike, data: Any, *, indent: int | None = None) -> Path:
    """Write JSON as the whole of ``path`` (``outputs.replace_file``: aside, then renamed into place; a link
    there is replaced itself, never what it points to)."""
    return replace_file(path, json.dumps(data, indent=indent, separators=None if indent else (",", ":")))


def write_json_lines_atomically(path: str | os.PathLike, values: Iterable[Any]) -> Path:
    """Write one JSON value per line as the whole of ``path``, as ``write_json_atomically`` does, a line at a time
    (``values`` may be read from the file it replaces)."""
    with replacing(path) as handle:
        for value in values:
            handle.write(json.dumps(value) + "\n")
    return Path(path)


def append_json_line(path: str | os.PathLike, data: Any) -> None:
    """Append one JSON value as a line (``outputs.appending``: never through a link); a torn last line (a killed
    writer) is closed first, not continued."""
    with appending(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        torn = size > 0 and os.pread(handle.fileno(), 1, size - 1) != b"\n"
        handle.write(("\n" if torn else "") + json.dumps(data) + "\n")


def read_json_lines(path: str | os.PathLike, what: str = "JSON-lines file") -> Iterator[tuple[int, Any]]:
    """(line number, value) for every line of a JSON-lines file that parses; other lines are skipped.

    Read a line at a time, each of at most ``MAX_LINE_BYTES``, from a file of at most ``MAX_FILE_BYTES``: a
    larger file is refused in one line (a ValueError naming the bound, before a byte is read), so that what a
    reader holds follows what it keeps, never the file's size. A torn line (a run killed while writing) is the
    usual reason for a line that does not parse and is skipped silently; a line whose syntax is sound but which
    cannot be read (nested too deeply, a number with thousands of digits, longer than any) is skipped with one
    warning naming the file and the line.
    """
    path = Path(path)
    if not path.exists():
        return
    size = os.stat(check_regular_file(path, what)).st_size  # a FIFO would be waited on forever
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{path} holds {size:,} bytes, more than the {MAX_FILE_BYTES:,} (1 GiB) any {what} the kit "
                         "reads may hold: is it the right file?")
    unreadable = []
    with open(path, "rb") as handle:
        for number, data in enumerate(_lines(handle), 1):
            line = data.decode("utf-8", errors="replace") if data is not None else None
            if line is None:
                unreadable.append(f"line {number}: more than {MAX_LINE_BYTES:,} bytes")
                continue
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            except (RecursionError, ValueError) as error:
                start = _SPACE.match(line, 0).end()
                unreadable.append(f"line {number}: " + _why_unreadable(error, line, start, *_value_end(line, start)))
                continue
            yield number, value
    if unreadable:
        warnings.warn(f"{path}: skipped {len(unreadable)} unreadable line(s) ({unreadable[0]})", stacklevel=2)


def _lines(handle) -> Iterator[bytes | None]:
    """Each line of a binary file, or None for one longer than ``MAX_LINE_BYTES`` (read past, never held)."""
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            yield line
            continue
        while line and not line.endswith(b"\n"):  # the rest of the long line, a piece at a time
            line = handle.readline(MAX_LINE_BYTES)
        yield None
