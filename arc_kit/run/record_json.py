"""A record's JSON, its layout derived from the record's dataclass; and the record files that hold one record a line.

A record is a dataclass (``method.records.TaskRecord`` and its parts; the tables' ``experiments.table_records``).
Its JSON holds its fields by name, each of the JSON kind its annotation says (``kind_of``: an int is an
integer, a grid a list of rows, ``list[bool] | None`` a list of booleans or null, a nested record an object),
so no schema is kept beside the class. A field's metadata may say ``json`` (the name it is written under) and
``when_set`` (left out while None); a nested class with its own ``to_json``/``from_json`` (the scorer's
``Candidate``) is written and read by them. ``from_json`` reads a record strictly and tolerantly at once:
every field held to its kind (a ValueError naming the first that is not), a field an earlier kit lacked
taking its default, the fields of a later kit kept aside (``extra``) and written again by ``to_json``.
``stream_records`` (a line at a time, bounded; ``read_records`` keeps the last record of each task asked for),
``append_record`` and ``write_records`` are the record files' only reader and writers.

Knows grids, JSON kinds and dataclasses; of the record layouts, only which one a record file holds by default.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from arc_kit.data.grids import LARGEST_SIDE, grid_to_json, json_type_name, to_grid
from arc_kit.data.jsonio import append_json_line, read_json_lines, write_json_lines_atomically
from arc_kit.method.records import TaskRecord
from arc_kit.names import shown

_TESTS = {
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: type(value) is int,  # `type is`: True and False are no integers here
    "number": lambda value: type(value) in (int, float),
    "boolean": lambda value: type(value) is bool,
    "object": lambda value: isinstance(value, Mapping),
    "list": lambda value: isinstance(value, list),
}
_KINDS = {str: "string", bool: "boolean", int: "integer", float: "number", np.ndarray: "list"}  # a grid: its rows


def kind_of(hint: Any) -> str | None:
    """The JSON kind of a field of type ``hint``: ``integer``, ``list of boolean or null``, ``object of list of
    list`` (a dict's keys are strings in JSON; a grid is a list), ``object`` for a record; None: not checked."""
    arguments = typing.get_args(hint)
    if type(None) in arguments:
        inner = kind_of(next(argument for argument in arguments if argument is not type(None)))
        return None if inner is None else f"{inner} or null"
    if hint in _KINDS:
        return _KINDS[hint]
    if dataclasses.is_dataclass(hint):
        return "object"
    outer = typing.get_origin(hint)
    if outer in (list, dict):
        inner = kind_of(arguments[-1]) if arguments else None
        word = "list" if outer is list else "object"
        return word if inner is None else f"{word} of {inner}"
    return None


@functools.cache
def _layout(cls: type) -> tuple[tuple[str, str, Any, str | None, dataclasses.Field], ...]:
    """(field name, JSON name, type, JSON kind, field) of every field of record class ``cls`` but ``extra``;
    a nested record may be null (read as its default)."""
    hints = typing.get_type_hints(cls)
    layout = []
    for item in dataclasses.fields(cls):
        if item.name == "extra":
            continue
        kind = kind_of(hints[item.name])
        if kind == "object" and dataclasses.is_dataclass(hints[item.name]):
            kind = "object or null"
        layout.append((item.name, item.metadata.get("json", item.name), hints[item.name], kind, item))
    return tuple(layout)


def schema(cls: type) -> dict[str, str]:
    """JSON name -> kind of every checked field of record class ``cls``, as ``to_json`` writes them."""
    return {name: kind for _, name, _, kind, _ in _layout(cls) if kind is not None}


def check_kind(value: Any, kind: str, where: str) -> None:
    """ValueError naming ``where`` unless ``value`` is of ``kind``: ``integer``, ``string or null``, ``list of
    number``, ``object of list of boolean`` (an object's keys are strings in JSON)... A loop, no recursion."""
    pending = [(value, kind, where)]
    while pending:
        value, kind, where = pending.pop()
        if kind.endswith(" or null"):
            if value is None:
                continue
            kind = kind[:-len(" or null")]
        outer, _, inner = kind.partition(" of ")
        if not _TESTS[outer](value):
            raise ValueError(f"{where} is {json_type_name(value)}, expected {_phrase(kind)}")
        if inner and outer == "list":
            pending.extend((item, inner, f"{where}[{index}]") for index, item in enumerate(value))
        elif inner:
            pending.extend((item, inner, f"{where}.{shown(str(key))}") for key, item in value.items())


def _phrase(kind: str) -> str:
    """``list of integer`` as a message says it: a list of integers."""
    words = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean",
             "object": "an object", "list": "a list"}
    parts = kind.split(" of ")
    return " of ".join([words[part] for part in parts[:1]] + [words[part].split(" ", 1)[1] + "s" for part in parts[1:]])


def to_json(record) -> dict:
    """The JSON object of ``record``: its fields by their JSON names (one ``when_set`` left out while None), then
    the fields of a later kit it kept (``extra``)."""
    data = {}
    for name, json_name, _, _, item in _layout(type(record)):
        value = getattr(record, name)
        if value is None and item.metadata.get("when_set"):
            continue
        data[json_name] = _written(value)
    return {**data, **getattr(record, "extra", {})}


def _written(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return grid_to_json(value)
    if dataclasses.is_dataclass(value):
        return value.to_json() if hasattr(value, "to_json") else to_json(value)
    if isinstance(value, (list, tuple)):
        return [_written(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _written(item) for key, item in value.items()}
    return value


def from_json(cls: type, data: Any, where: str = "the record"):
    """The record of class ``cls`` that ``data`` holds; ValueError naming the first field (by its path below
    ``where``) that is not of its kind, so that nothing ``to_json`` could not have written is taken for a record."""
    check_kind(data, "object", where)
    for _, json_name, _, kind, item in _layout(cls):
        if json_name not in data:  # an earlier kit's record: its default serves, where the field has one
            if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
                raise ValueError(f"{where} needs a {json_name}" + (f" ({_phrase(kind)})" if kind else ""))
        elif kind is not None:
            check_kind(data[json_name], kind, f"{where}.{json_name}")
    if hasattr(cls, "from_json"):  # a class that owns its layout; its grids are checked here, by name
        for _, json_name, hint, _, _ in _layout(cls):
            if hint is np.ndarray and json_name in data:
                to_grid(data[json_name], f"{where}.{json_name}", LARGEST_SIDE)
        return cls.from_json(data)
    values = {name: _read(hint, data[json_name], f"{where}.{json_name}") for name, json_name, hint, _, _ in _layout(cls)
              if json_name in data and not (data[json_name] is None and dataclasses.is_dataclass(hint))}
    known = {json_name for _, json_name, _, _, _ in _layout(cls)}
    extra = {key: value for key, value in data.items() if key not in known}
    return cls(**values, **({"extra": extra} if "extra" in {item.name for item in dataclasses.fields(cls)} else {}))


def _read(hint: Any, value: Any, where: str) -> Any:
    """``value`` (already of its kind) as the field's type: grids, records, floats made of JSON's values."""
    arguments = typing.get_args(hint)
    if value is None:
        return None
    if type(None) in arguments:
        hint = next(argument for argument in arguments if argument is not type(None))
        arguments = typing.get_args(hint)
    if hint is np.ndarray:
        return to_grid(value, where, LARGEST_SIDE)  # any side up to LARGEST_SIDE: a wide set's answers are wide
    if dataclasses.is_dataclass(hint):
        return from_json(hint, value, where)
    if typing.get_origin(hint) is list and arguments:
        return [_read(arguments[0], item, f"{where}[{index}]") for index, item in enumerate(value)]
    if typing.get_origin(hint) is dict and arguments:
        return {str(key): _read(arguments[1], item, f"{where}.{shown(str(key))}") for key, item in value.items()}
    return float(value) if hint is float else value


def read_records(path: str | Path, kind: type = TaskRecord, task_ids: Iterable[str] | None = None) -> dict[str, Any]:
    """Records of class ``kind`` (``method.records.TaskRecord``, or a table's) by task id from a JSON-lines file (a
    later line for the same task wins), only those of ``task_ids`` when given: read as ``stream_records`` reads
    them, so that what is held is the records kept, never the whole file."""
    return {record.task_id: record for record in stream_records(path, kind, task_ids)}


def stream_records(path: str | Path, kind: type = TaskRecord, task_ids: Iterable[str] | None = None, *,
                   warn: bool = True) -> Iterator:
    """Every record of class ``kind`` in a JSON-lines file (of ``task_ids`` only, when given: another task's line is
    not read as a record), in the file's order, a line at a time: the record files' one reader. A file larger than
    any records file is refused in one line (``jsonio.read_json_lines``).

    A torn line (a killed run) is skipped silently; a line that parses but is no record (no task id, or a field
    of the wrong kind) is skipped, with one warning naming the file and the line (``warn``).
    """
    path, bad = Path(path), []
    wanted = None if task_ids is None else set(task_ids)
    for number, data in read_json_lines(path, "records file"):
        if wanted is not None and not (isinstance(data, Mapping) and isinstance(data.get("task_id"), str)
                                       and data["task_id"] in wanted):
            continue
        try:
            record = from_json(kind, data)
        except (ValueError, TypeError, KeyError) as error:
            bad.append(f"line {number}: {error}")
            continue
        yield record
    if bad and warn:
        warnings.warn(f"{path}: skipped {len(bad)} line(s) that are not records ({bad[0]})", stacklevel=3)


def append_record(path: str | Path, record) -> None:
    """Append one record as a line of a JSON-lines file."""
    append_json_line(path, to_json(record))


def write_records(path: str | Path, records: Iterable) -> None:
    """Replace a JSON-lines file with ``records``, one line each, atomically (a reader sees the old or the new), a
    record at a time (they may be streamed from the file replaced)."""
    write_json_lines_atomically(path, (to_json(record) for record in records))
