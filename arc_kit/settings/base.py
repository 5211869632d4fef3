"""What every settings dataclass shares: the ``setting`` field, the ``Settings`` base, and the paths and options of fields.

``setting`` makes a dataclass field that carries its reason (``help``), which is also what ``--help``
prints: the command line is generated from these fields (``options``), so it cannot disagree with what
runs. What a field takes (a number's range, ``Bounds``; a word's ``choices``) is declared on it and checked
once, by ``Settings`` as the object is made: one ValueError line naming the field, the value and what it
takes. ``Settings`` gives every settings dataclass ``replace``, ``result_json``, and ``to_json`` and
``from_json``: the kit's one codec's (``arc_kit.codec``), each value held to its field's kind, a field missing
taking its default, an unknown one dropped (``strict``: refused). ``changed`` applies a user's changes
by dotted path (the notebook's ``CHANGES``), each checked against what its field takes before anything is made;
``described`` lists the paths a change may name.

This module needs only the standard library and the codec; it knows nothing of any stage's settings, nor of models,
tasks or files.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from arc_kit import codec
from arc_kit.names import listed, shown

DEFAULT_TOKEN_BUDGET = 8192  # the authors' cap on a prompt plus its answer, and on a training sequence, for every
# model (their NeMo-8B runs: finetune_NemoReArc1200.py and evaluate_NemoReArc1200_*.py, max_tokens=8192)


def _given(value: Any) -> str:
    """A value as a message shows it: its ``repr``, cut (never a raw newline)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


@dataclass(frozen=True)
class Bounds:
    """The range of a number: ``low``/``high`` (None: none that way), each included unless ``*_open``."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    @classmethod
    def of(cls, at_least=None, above=None, at_most=None, below=None) -> Bounds:
        """The bounds given by keywords (at most one low and one high)."""
        return cls(above if above is not None else at_least, below if below is not None else at_most,
                   above is not None, below is not None)

    @property
    def text(self) -> str:
        """The range in words, as ``--help`` and errors show it: 'at least 1', 'above 0, at most 1'."""
        parts = [f"{'above' if self.low_open else 'at least'} {self.low:g}"] if self.low is not None else []
        parts += [f"{'below' if self.high_open else 'at most'} {self.high:g}"] if self.high is not None else []
        return ", ".join(parts) or "any finite number"

    def problem(self, value: Any, kind: type = float) -> str | None:
        """What is wrong with ``value`` ('must be at least 1, got 0'), or None when it is a finite number of
        ``kind`` (an int field takes whole numbers only) in range."""
        whole = kind is int
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            return f"must be a {'whole number' if whole else 'number'} ({self.text}), got {_given(value)}"
        finite = isinstance(value, int) or math.isfinite(value)  # an int of any size is finite
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if not finite or too_low or too_high:
            return f"must be {'' if finite else 'a finite number, '}{self.text}, got {value!r}"
        return None


ANY_NUMBER = Bounds()  # a number field without a declared range: finite is all it must be


def setting(default: Any = dataclasses.MISSING, help: str = "", *, flag: str | None = None,
            choices: tuple | None = None, neutral: bool = False, default_factory: Any = dataclasses.MISSING,
            command_line: bool = True, at_least: float | None = None, above: float | None = None,
            at_most: float | None = None, below: float | None = None, flags: Mapping[str, str] | None = None):
    """A dataclass field with its reason (``help``), its command-line ``flag`` and whether it changes results.

    ``neutral`` fields (batch sizes, say) never change what a run produces, so a run folder made with
    other values may be resumed. ``command_line=False`` keeps a field off the generated options. A number's
    range: ``at_least`` or ``above``, ``at_most`` or ``below`` (``Bounds``); a word's: ``choices``; both
    checked as the settings are made. For a field holding nested settings, ``flags`` maps the dotted paths
    of the nested fields that are options here to their flags (the others are not options here); without it,
    every nested option with its own flag.
    """
    metadata = {"help": help, "flag": flag, "choices": choices, "neutral": neutral, "command_line": command_line,
                "bounds": Bounds.of(at_least, above, at_most, below), "flags": flags}
    return field(default=default, default_factory=default_factory, metadata=metadata)


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def _bare(hint: Any) -> Any:
    """The type a field holds, without its optional None (``int | None``: int)."""
    return next(a for a in typing.get_args(hint) if a is not type(None)) if _optional(hint) else hint


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints`` of a settings class, worked out once (every settings object made checks its fields
    against them)."""
    return typing.get_type_hints(cls)


def _nested(hint: Any) -> type | None:
    """The settings class a field of this type holds, else None."""
    return hint if isinstance(hint, type) and issubclass(hint, Settings) else None


class Settings:
    """What every settings dataclass can do: check itself as it is made, replace, to and from JSON, compare on
    what matters (a subclass with its own ``__post_init__`` calls this one first)."""

    def __post_init__(self):
        """Every field's declared range (numbers: finite, whole for an int) and choices; ValueError in one line."""
        hints = _type_hints(type(self))
        for item in dataclasses.fields(self):
            value, hint = getattr(self, item.name), hints[item.name]
            if value is None and _optional(hint):
                continue
            choices = item.metadata.get("choices")
            if choices is not None and value not in choices:
                flag = f" ({item.metadata['flag']})" if item.metadata.get("flag") else ""  # what a user typed
                raise ValueError(f"unknown {item.name} {_given(value)}{flag}; expected one of: "
                                 f"{', '.join(map(str, choices))}{' (or unset)' if _optional(hint) else ''}")
            kind = _bare(hint)
            problem = kind in (int, float) and (item.metadata.get("bounds") or ANY_NUMBER).problem(value, kind)
            if problem:
                raise ValueError(f"{item.name} {problem}")

    def replace(self, **changes):
        """These settings with ``changes``; a field of nested settings may be named alone (``steps=8`` for
        ``lora.steps``): field names are unique across the settings classes, so its place is never in doubt."""
        known = {item.name for item in dataclasses.fields(self)}
        settings = dataclasses.replace(self, **{name: value for name, value in changes.items() if name in known})
        for name, value in changes.items():
            if name not in known:
                path = _declared_path(type(self), name)
                if path is None:
                    raise TypeError(f"{type(self).__name__} has no field {name!r}, nor do its nested settings")
                settings = replace_path(settings, path, value)
        return settings

    def to_json(self) -> dict:
        """These settings as JSON, every field by its name (``codec.to_json``)."""
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Any, *, strict: bool = False):
        """The inverse of ``to_json`` (``codec.from_json``): each value held to its field's kind, a field missing
        taking its default (a nested one the default of where it is held), an unknown one dropped (``strict``:
        ValueError naming it); one line naming the field for what is wrong."""
        return codec.from_json(cls, data, cls.__name__, strict=strict)

    def result_json(self) -> dict:
        """``to_json`` without the neutral fields: what two runs must share to be one run."""
        return {item.name: value.result_json() if isinstance(value := getattr(self, item.name), Settings) else value
                for item in dataclasses.fields(self) if not item.metadata.get("neutral")}


def _leaves(cls: type, prefix: tuple[str, ...] = (), holders: tuple = ()) -> Iterator[tuple]:
    """(path, field, type, holders) of every field of ``cls`` and of its nested settings that holds no settings
    itself, in field order; ``holders``: the fields on the way down to it."""
    hints = _type_hints(cls)
    for item in dataclasses.fields(cls):
        if _nested(hints[item.name]):
            yield from _leaves(hints[item.name], (*prefix, item.name), (*holders, item))
        else:
            yield (*prefix, item.name), item, hints[item.name], holders


def _declared_path(cls: type, name: str) -> tuple[str, ...] | None:
    """Where field ``name`` lives inside the nested settings of ``cls``, as field names from ``cls`` down; None when
    no nested settings declare it, or more than one."""
    found = [path for path, item, _, holders in _leaves(cls) if holders and item.name == name]
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Option:
    """One command-line option of a settings dataclass: where it lives, its flag, type and help."""

    path: tuple[str, ...]  # field names from the top settings down, e.g. ("ttt", "steps")
    flag: str
    kind: type
    help: str
    choices: tuple | None
    bounds: Bounds | None = None  # a number's range (checked by the parser too, shown in --help)


def options(cls: type) -> Iterator[Option]:
    """Every command-line option of a settings class, nested settings flattened, in field order.

    Where a field holding nested settings names ``flags`` (the outermost such field), those are the only
    options below it, with those flags."""
    for path, item, hint, holders in _leaves(cls):
        depth, chosen = next(((depth, holder.metadata["flags"]) for depth, holder in enumerate(holders)
                              if holder.metadata.get("flags")), (0, None))
        if chosen is not None:
            flag = chosen.get(".".join(path[depth + 1:]))
        else:
            flag = (item.metadata.get("flag") or "--" + item.name.replace("_", "-")) \
                if item.metadata.get("command_line", True) else None
        if flag is not None:
            yield Option(path, flag, _bare(hint), item.metadata.get("help", ""), item.metadata.get("choices"),
                         item.metadata.get("bounds"))


def replace_path(settings: Settings, path: tuple[str, ...], value: Any) -> Settings:
    """``settings`` with the field at ``path`` (nested) set to ``value``."""
    return replace_paths(settings, {path: value})


def replace_paths(settings: Settings, changes: Mapping[tuple[str, ...], Any]) -> Settings:
    """``settings`` with the fields at the paths of ``changes`` set, every one at once, level by level (so that two
    fields checked together, such as a range's two ends or a limit and its margin, are checked with both new values)."""
    here = {path[0]: value for path, value in changes.items() if len(path) == 1}
    for name in dict.fromkeys(path[0] for path in changes if len(path) > 1):
        inner = {path[1:]: value for path, value in changes.items() if len(path) > 1 and path[0] == name}
        here[name] = replace_paths(getattr(settings, name), inner)
    return dataclasses.replace(settings, **here)


def _takes(item: dataclasses.Field, hint: Any) -> str:
    """What a field takes, in words: 'a whole number, at least 1', 'one of: dfs, greedy', 'True or False'."""
    kind, choices = _bare(hint), item.metadata.get("choices")
    if choices is not None:
        text = f"one of: {', '.join(map(str, choices))}"
    elif kind in (int, float):
        text = f"a {'whole number' if kind is int else 'number'}, {(item.metadata.get('bounds') or ANY_NUMBER).text}"
    else:
        text = {bool: "True or False", str: "text"}.get(kind, "a list of text")
    return text + (" (or None: unset)" if _optional(hint) else "")


def _value_problem(item: dataclasses.Field, hint: Any, value: Any) -> str | None:
    """What is wrong with ``value`` for the field, in words after its name; None when it takes it."""
    kind, choices = _bare(hint), item.metadata.get("choices")
    if value is None:
        return None if _optional(hint) else f"must be {_takes(item, hint)}{';' if choices else ','} got None"
    if choices is not None:  # True == 1: a choice matches by type too
        fits = any(value == choice and type(value) is type(choice) for choice in choices)
        return None if fits else f"must be {_takes(item, hint)}; got {_given(value)}"
    if kind in (int, float):
        return (item.metadata.get("bounds") or ANY_NUMBER).problem(value, kind)
    fits = {bool: lambda: isinstance(value, bool), str: lambda: isinstance(value, str)}.get(
        kind, lambda: isinstance(value, (list, tuple)) and all(isinstance(part, str) for part in value))()
    return None if fits else f"must be {_takes(item, hint)}, got {_given(value)}"


def described(settings: Settings) -> list[tuple[str, Any, str, str]]:
    """(dotted path, value in ``settings``, what it takes, why: its help) of every field a change may name."""
    return [(".".join(path), functools.reduce(getattr, path, settings), _takes(item, hint),
             item.metadata.get("help", "")) for path, item, hint, _ in _leaves(type(settings))]


def changed(settings: Settings, changes: Any, name: str = "CHANGES") -> Settings:
    """``settings`` with ``changes`` made: a mapping of dotted paths to values (``{"ttt.steps": 8}``; a group's fields
    may be given as an object too, ``{"ttt": {"steps": 8}}``), as the notebook's ``name`` holds them.

    Every change is checked against what its field takes before anything is made: ValueError in one line naming each
    problem ("ttt.step: no such setting; did you mean ttt.steps?", "ttt.steps must be a whole number (at least 1),
    got '8'"); then the checks of the settings themselves (a range's two ends), as they are made.
    """
    if not isinstance(changes, Mapping):
        raise ValueError(f"{name} must be an object of settings by their dotted paths, e.g. {{\"ttt.steps\": 8}}; got "
                         f"{_given(changes)}")
    fields = {".".join(path): (item, hint) for path, item, hint, _ in _leaves(type(settings))}
    groups = {".".join(path.split(".")[:end]) for path in fields for end in range(1, path.count(".") + 1)}
    flat, problems = {}, []
    for path, value in _flattened(changes, groups):
        if path in groups:
            inner = [known for known in fields if known.startswith(f"{path}.")]
            problems.append(f"{path} holds settings ({listed(inner, 100)}): name one, or give an object of them")
        elif path not in fields:
            problems.append(f"{shown(path)}: no such setting{_closest(path, fields)}")
        elif problem := _value_problem(*fields[path], value):
            problems.append(f"{path} {problem}")
        flat[tuple(path.split("."))] = value
    if problems:
        raise ValueError(listed(problems, separator="; "))
    return replace_paths(settings, flat)


def _flattened(changes: Mapping, groups: set[str], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every change; an object given for a group of settings read as its fields."""
    for key, value in changes.items():
        path = f"{prefix}{key}"
        if path in groups and isinstance(value, Mapping):
            yield from _flattened(value, groups, f"{path}.")
        else:
            yield path, value


def _closest(path: str, fields: Mapping[str, Any]) -> str:
    """'; did you mean ttt.steps?' for the field ``path`` most likely meant (one that ends in it first), or a pointer
    to the list."""
    ending = [known for known in fields if known.endswith(f".{path}")]
    found = ending or difflib.get_close_matches(path, list(fields), n=1)
    return f"; did you mean {found[0]}?" if found else " (`arc-kit settings` lists them)"
