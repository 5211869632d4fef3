"""Reading a record's JSON strictly and tolerantly at once: the kinds of its values checked, a later kit's fields kept.

A record layout is a schema: field name -> kind, as ``to_json`` writes it ("integer", "list of
string", "object of number", "string or null", ...). ``checked`` holds an object to its schema and
raises a ValueError naming the first field that is not of its kind (a field an earlier kit lacked
is no problem: its default serves); ``known_fields`` splits an object into the fields of a record
class and the rest (a later kit's, kept aside as ``extra`` and written again); ``flat_json``
writes a flat record back with them. ``records`` (a task's) and ``experiments.table_records`` (the
tables') are its users. Knows grids and JSON kinds; knows nothing of any one record layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

import numpy as np

from arc_kit.data.grids import LARGEST_SIDE, json_type_name, to_grid
from arc_kit.names import shown

_TESTS = {
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: type(value) is int,  # `type is`: True and False are no integers here
    "number": lambda value: type(value) in (int, float),
    "boolean": lambda value: type(value) is bool,
    "object": lambda value: isinstance(value, Mapping),
    "list": lambda value: isinstance(value, list),
}


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


def checked(data: Any, schema: Mapping[str, str], where: str) -> Mapping:
    """``data`` when it is an object whose fields in ``schema`` (those it holds: an earlier kit may lack some)
    are of the kinds there, as strictly as ``to_json`` writes them; ValueError naming the first that is not."""
    check_kind(data, "object", where)
    for key, kind in schema.items():
        if key in data:
            check_kind(data[key], kind, f"{where}.{key}")
    return data


def record_grids(values: list, where: str) -> list[np.ndarray]:
    """Grids of a record (any side up to ``LARGEST_SIDE``: a run of a wide set has wide answers)."""
    return [to_grid(value, f"{where}[{index}]", LARGEST_SIDE) for index, value in enumerate(values)]


def known_fields(cls, data: Mapping) -> tuple[dict, dict]:
    """(the fields of ``cls`` found in ``data``, everything else); ``extra`` is never read as a field."""
    names = {item.name for item in fields(cls)} - {"extra"}
    return ({key: value for key, value in data.items() if key in names},
            {key: value for key, value in data.items() if key not in names})


def flat_json(record) -> dict:
    """Every field of a flat record dataclass by name, then the fields of a later kit it kept (``extra``)."""
    return {**{item.name: getattr(record, item.name) for item in fields(record) if item.name != "extra"},
            **record.extra}


def record_task_id(data: Any) -> str:
    """The task id of a record line; ValueError when it is no record at all."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a record is an object, found {type(data).__name__}")
    if not isinstance(data.get("task_id"), str):
        raise ValueError("a record needs a task_id (a string)")
    return data["task_id"]


def flags(data: Mapping | None) -> dict[str, list[bool]]:
    """A record's true-or-false lists by name, each value a bool."""
    return {str(name): [bool(value) for value in values] for name, values in (data or {}).items()}
