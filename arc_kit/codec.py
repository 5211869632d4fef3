"""A dataclass to JSON and back by its annotations: the kit's one codec, for its settings and its records alike.

A dataclass's JSON holds its fields by name, each of the JSON kind its annotation says (``kind_of``: an int is
an integer, a float a number, ``list[bool] | None`` a list of booleans or null, ``tuple[str, ...]`` a list of
strings, ``dict[str, int]`` an object of integers, a nested dataclass an object), so that no schema is kept
beside a class. A field's metadata may add ``json`` (the name it is written under) and ``when_set`` (left out
while None); a class may name ``derived_json``: properties written after its fields for readers of the JSON,
dropped as it is read (they are recomputed from the fields: a candidate's aggregates).

``from_json`` holds every value to its kind before anything is made: a ValueError in one line naming the first
that is not by its path (``the record.test[0].search.capped is a string, expected a list of strings``), or a
field that is missing and has no default. A field missing takes its default: for a nested dataclass whose
field's default is an instance, that instance with the fields given (a solver's test-time training is
``TEST_TIME_TRAINING`` with the steps the file gives). A key that names no field is kept where the class has an
``extra`` field (a later kit's record, written again by ``to_json``), else dropped, or refused in one line where
``strict``. What a class checks beyond kinds (a setting's range and choices) it checks itself, as it is made.

A type the codec does not know is its caller's: a ``Leaf`` says how one is written and read, and the caller
passes it in. The records' grids are such a leaf (``numpy`` arrays checked by ``data.grids.to_grid``, passed in
by ``run.record_json``): so this module needs only the standard library, and sits below the settings (which
hold no grids, and stay below the data floor) as well as below the records. It knows nothing of settings,
records, grids or files.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from arc_kit.names import listed, shown

_JSON_TYPES = ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), ((list, tuple), "a list"),
               (dict, "an object"))  # bool first: True is an int too
_TESTS = {
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: type(value) is int,  # `type is`: True and False are no integers here
    "number": lambda value: type(value) in (int, float),
    "boolean": lambda value: type(value) is bool,
    "object": lambda value: isinstance(value, Mapping),
    "list": lambda value: isinstance(value, list),
}
_KINDS = {str: "string", bool: "boolean", int: "integer", float: "number"}
_PLAIN = frozenset((str, bool, int, float, type(None)))  # written as they are
_WORDS = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "a boolean",
          "object": "an object", "list": "a list"}


@dataclass(frozen=True, eq=False)  # hashed by identity: a layout is cached per class and leaves
class Leaf:
    """How the codec writes and reads values of a ``type`` it does not know: their JSON ``kind``, ``read`` (a
    value already of that kind and its path -> the object, ValueError naming the path) and ``write``."""

    type: type
    kind: str
    read: Callable[[Any, str], Any]
    write: Callable[[Any], Any]


class _Field(NamedTuple):
    name: str
    json_name: str
    hint: Any
    kind: str | None  # None: not checked
    read: Callable  # (a value already of its kind, its path, strict, the default instance) -> the field's value
    item: dataclasses.Field


def json_type_name(value: Any) -> str:
    """The JSON name of a value's type, as a message says it: an object, a list, a string, a number, a boolean, or
    null."""
    if value is None:
        return "null"
    return next((name for types, name in _JSON_TYPES if isinstance(value, types)), type(value).__name__)


def kind_of(hint: Any, leaves: tuple[Leaf, ...] = ()) -> str | None:
    """The JSON kind of a field of type ``hint``: ``integer``, ``list of boolean or null``, ``object of list of
    list`` (a dict's keys are strings in JSON), ``object`` for a dataclass, a leaf's own; None: not checked."""
    if _optional(hint):
        inner = kind_of(_bare(hint), leaves)
        return None if inner is None else f"{inner} or null"
    leaf = next((leaf for leaf in leaves if leaf.type is hint), None)
    if leaf is not None:
        return leaf.kind
    if hint in _KINDS:
        return _KINDS[hint]
    if dataclasses.is_dataclass(hint):
        return "object"
    outer = typing.get_origin(hint)
    if outer in (list, tuple, dict):
        inner = kind_of(_item_type(hint), leaves) if typing.get_args(hint) else None
        word = "object" if outer is dict else "list"
        return word if inner is None else f"{word} of {inner}"
    return None


def schema(cls: type, leaves: tuple[Leaf, ...] = ()) -> dict[str, str]:
    """JSON name -> kind of every checked field of dataclass ``cls``, as ``to_json`` writes them."""
    return {field.json_name: field.kind for field in _layout(cls, leaves) if field.kind is not None}


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
        if not inner or (inner in _TESTS and all(map(_TESTS[inner], value if outer == "list" else value.values()))):
            continue  # a list of numbers, say: held to its kind without a path made for each
        if outer == "list":
            pending.extend((item, inner, f"{where}[{index}]") for index, item in enumerate(value))
        else:
            pending.extend((item, inner, f"{where}.{shown(str(key))}") for key, item in value.items())


def to_json(instance: Any, leaves: tuple[Leaf, ...] = ()) -> dict:
    """The JSON object of dataclass ``instance``: its fields by their JSON names (a ``when_set`` one left out while
    None), then its ``derived_json`` properties that are not None, then the keys it kept (``extra``)."""
    cls, data = type(instance), {}
    for field in _layout(cls, leaves):
        value = getattr(instance, field.name)
        if value is None and field.item.metadata.get("when_set"):
            continue
        data[field.json_name] = _written(value, leaves)
    for name in getattr(cls, "derived_json", ()):
        if (value := getattr(instance, name)) is not None:
            data[name] = _written(value, leaves)
    return {**data, **(instance.extra if _keeps_extra(cls) else {})}


def _written(value: Any, leaves: tuple[Leaf, ...]) -> Any:
    if type(value) in _PLAIN:
        return value
    for leaf in leaves:
        if isinstance(value, leaf.type):
            return leaf.write(value)
    if dataclasses.is_dataclass(value):
        return to_json(value, leaves)
    if isinstance(value, (list, tuple)):
        return [item if type(item) in _PLAIN else _written(item, leaves) for item in value]
    if isinstance(value, Mapping):
        return {key: item if type(item) in _PLAIN else _written(item, leaves) for key, item in value.items()}
    return value


def from_json(cls: type, data: Any, where: str, *, leaves: tuple[Leaf, ...] = (), strict: bool = False):
    """The instance of dataclass ``cls`` that ``data`` holds, ``where`` naming it in messages (``the record``,
    ``SolveSettings``); ValueError in one line for the first value not of its kind (by its path), a field missing
    that has no default, or (``strict``, for a class without ``extra``) keys that name no field."""
    return _read_object(cls, data, where, leaves, strict, None)


def _read_object(cls: type, data: Any, where: str, leaves: tuple[Leaf, ...], strict: bool, default: Any):
    """``from_json``, the missing fields taken from ``default`` (an instance) when given, else from the class."""
    check_kind(data, "object", where)
    layout = _layout(cls, leaves)
    for field in layout:  # every field's kind first, so that the first bad one named is the shallowest
        if field.json_name not in data:
            if default is None and _required(field.item):
                raise ValueError(f"{where} needs a {field.json_name}" + (f" ({_phrase(field.kind)})" if field.kind
                                                                         else ""))
        elif field.kind is not None:
            check_kind(data[field.json_name], field.kind, f"{where}.{field.json_name}")
    known = {field.json_name for field in layout} | set(getattr(cls, "derived_json", ()))
    unknown = {key: value for key, value in data.items() if key not in known}
    if unknown and strict and not _keeps_extra(cls):
        raise ValueError(f"unknown {cls.__name__} field(s): {listed(map(shown, unknown))}; known: "
                         f"{listed(field.json_name for field in layout)}")
    values = {field.name: field.read(data[field.json_name], f"{where}.{field.json_name}", strict,
                                     getattr(default, field.name) if default is not None else _instance(field.item))
              for field in layout if field.json_name in data
              and not (data[field.json_name] is None and dataclasses.is_dataclass(field.hint))}  # null: the default
    if _keeps_extra(cls):
        values["extra"] = unknown
    return dataclasses.replace(default, **values) if default is not None else cls(**values)


def _same(value: Any, *_) -> Any:
    return value


def _float(value: Any, *_) -> float:
    return float(value)


@functools.cache
def _reader(hint: Any, leaves: tuple[Leaf, ...]) -> Callable:
    """How a value already of its kind becomes a field's of type ``hint``: (value, its path, strict, the default
    instance of a nested dataclass) -> leaves, dataclasses, lists and dicts (copied), tuples, floats made of JSON's
    values; made once per type, so that a list of numbers is read without a call per number."""
    if _optional(hint):
        inner = _reader(_bare(hint), leaves)
        return lambda value, *rest: None if value is None else inner(value, *rest)
    leaf = next((leaf for leaf in leaves if leaf.type is hint), None)
    if leaf is not None:
        return lambda value, where, *_: leaf.read(value, where)
    if dataclasses.is_dataclass(hint):
        return lambda value, where, strict, default: _read_object(hint, value, where, leaves, strict,
                                                                  default if isinstance(default, hint) else None)
    outer, arguments = typing.get_origin(hint), typing.get_args(hint)
    if outer in (list, tuple) and arguments:
        item, made = _reader(_item_type(hint), leaves), outer
        if item in (_same, _float):  # no path needed: nothing to name, these cannot fail
            return lambda value, *_: made(map(item, value))
        return lambda value, where, strict, _: made(item(element, f"{where}[{index}]", strict, None)
                                                    for index, element in enumerate(value))
    if outer is dict and arguments:
        item = _reader(_item_type(hint), leaves)
        if item in (_same, _float):
            return lambda value, *_: {str(key): item(element) for key, element in value.items()}
        return lambda value, where, strict, _: {str(key): item(element, f"{where}.{shown(str(key))}", strict, None)
                                                for key, element in value.items()}
    return _float if hint is float else _same


@functools.cache
def _layout(cls: type, leaves: tuple[Leaf, ...]) -> tuple[_Field, ...]:
    """Every field of dataclass ``cls`` but ``extra``, with its JSON name and kind; a nested dataclass may be null
    (read as its default)."""
    hints = typing.get_type_hints(cls)
    layout = []
    for item in dataclasses.fields(cls):
        if item.name == "extra":
            continue
        hint = hints[item.name]
        kind = kind_of(hint, leaves)
        layout.append(_Field(item.name, item.metadata.get("json", item.name), hint,
                             "object or null" if kind == "object" and dataclasses.is_dataclass(hint) else kind,
                             _reader(hint, leaves), item))
    return tuple(layout)


@functools.cache
def _keeps_extra(cls: type) -> bool:
    """True when ``cls`` keeps the keys that name none of its fields (its ``extra`` field)."""
    return any(item.name == "extra" for item in dataclasses.fields(cls))


def _required(item: dataclasses.Field) -> bool:
    return item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING


def _instance(item: dataclasses.Field) -> Any:
    """The field's default when it is a dataclass instance (nested settings' defaults), else None."""
    return item.default if dataclasses.is_dataclass(item.default) else None


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def _bare(hint: Any) -> Any:
    """The type a field holds, without its optional None (``int | None``: int)."""
    return next(argument for argument in typing.get_args(hint) if argument is not type(None)) if _optional(hint) \
        else hint


def _item_type(hint: Any) -> Any:
    """What a list, a ``tuple[X, ...]`` or a dict holds: X, or the dict's values' type."""
    arguments = typing.get_args(hint)
    return arguments[-1] if typing.get_origin(hint) is dict else arguments[0]


def _phrase(kind: str) -> str:
    """``list of integer`` as a message says it: a list of integers (``or null`` kept)."""
    bare, null, _ = kind.partition(" or null")
    parts = bare.split(" of ")
    return " of ".join([_WORDS[part] for part in parts[:1]] + [_WORDS[part].split(" ", 1)[1] + "s"
                                                                 for part in parts[1:]]) + null
