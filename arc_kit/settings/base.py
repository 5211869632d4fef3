"""What every settings dataclass shares: the ``setting`` field, the ``Settings`` base, and the paths and options of fields.

``setting`` makes a dataclass field that carries its reason (``help``), which is also what
``--help`` prints (``setting_like``: a field declared on another settings class, with a default of
its own): the command line is generated from these fields (``options``), so it cannot disagree with
what runs. A number's range is declared on its field too (``Bounds``: ``at_least``, ``above``,
``at_most``, ``below``): every settings object checks its numbers as it is made (finite, whole where
the field is an int, within range), and the command line checks the same range as it parses, showing
it in ``--help``. ``Settings`` gives every settings dataclass ``replace``, ``to_json``/``from_json``
and ``result_json``. ``from_json`` reads what an older or newer kit wrote: fields it does not know
are dropped (or refused, with ``strict``), fields missing take their defaults.

This module needs only the standard library; it knows nothing of any stage's settings, nor of models,
tasks or files.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from arc_kit.names import shown

DEFAULT_TOKEN_BUDGET = 8192  # the authors' cap on a prompt plus its answer, and on a training sequence, for every
# model (their NeMo-8B runs: finetune_NemoReArc1200.py and evaluate_NemoReArc1200_*.py, max_tokens=8192)


@dataclass(frozen=True)
class Bounds:
    """The range of a number: ``low``/``high`` (None: none that way), each included unless ``*_open``."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    @classmethod
    def of(cls, at_least=None, above=None, at_most=None, below=None) -> Bounds | None:
        """The bounds given by keywords (at most one low and one high); None when none is given."""
        if at_least is None and above is None and at_most is None and below is None:
            return None
        return cls(above if above is not None else at_least, below if below is not None else at_most,
                   above is not None, below is not None)

    @property
    def text(self) -> str:
        """The range in words, as ``--help`` and errors show it: 'at least 1', 'above 0, at most 1'."""
        parts = []
        if self.low is not None:
            parts.append(f"{'above' if self.low_open else 'at least'} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'below' if self.high_open else 'at most'} {self.high:g}")
        return ", ".join(parts) or "any finite number"

    def check(self, value: Any, name: str, kind: type = float) -> Any:
        """``value`` when it is a finite number of ``kind`` (an int field takes whole numbers only) in range;
        else ValueError in one line naming ``name``."""
        problem = self.problem(value, kind)
        if problem:
            raise ValueError(f"{name} {problem}")
        return value

    def problem(self, value: Any, kind: type = float) -> str | None:
        """What is wrong with ``value`` ('must be at least 1, got 0'), or None when nothing is."""
        whole = kind is int
        if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
            return f"must be a {'whole number' if whole else 'number'} ({self.text}), got {shown(repr(value))}"
        finite = isinstance(value, int) or math.isfinite(value)  # an int of any size is finite
        if not finite or not self.holds(value):
            return f"must be {'' if finite else 'a finite number, '}{self.text}, got {value!r}"
        return None

    def holds(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))


ANY_NUMBER = Bounds()  # a number field without a declared range: finite is all it must be


def check_numbers(settings: Any) -> None:
    """Check every number field of a settings dataclass (``Bounds`` on its field, else finite): ValueError."""
    hints = typing.get_type_hints(type(settings))
    for item in dataclasses.fields(settings):
        value = getattr(settings, item.name)
        kind = _number_kind(hints[item.name])
        if kind is None or (value is None and _optional(hints[item.name])):
            continue
        (item.metadata.get("bounds") or ANY_NUMBER).check(value, item.name, kind)


def check_choices(settings: Any) -> None:
    """Check every field of a settings dataclass that declares ``choices``: ValueError in one line for another value
    (a settings file's unknown optimizer is refused as it is read, not at each task)."""
    for item in dataclasses.fields(settings):
        choices, value = item.metadata.get("choices"), getattr(settings, item.name)
        if choices and value is not None and value not in choices:
            raise ValueError(f"unknown {item.name} {repr(value)[:60]}; expected one of "
                             f"{', '.join(map(str, choices))}")


def _number_kind(hint: Any) -> type | None:
    """int or float for a field that holds a number (optionally None), else None."""
    arguments = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return arguments[0] if len(arguments) == 1 and arguments[0] in (int, float) else None


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def setting(default: Any = dataclasses.MISSING, help: str = "", *, flag: str | None = None,
            choices: tuple | None = None, neutral: bool = False, default_factory: Any = dataclasses.MISSING,
            command_line: bool = True, at_least: float | None = None, above: float | None = None,
            at_most: float | None = None, below: float | None = None):
    """A dataclass field with its reason (``help``), its command-line ``flag`` and whether it changes results.

    ``neutral`` fields (batch sizes, say) never change what a run produces, so a run folder made with
    other values may be resumed. ``command_line=False`` keeps a field off the generated options. A number's
    range: ``at_least`` or ``above``, ``at_most`` or ``below`` (``Bounds``), checked as the settings are made.
    """
    metadata = {"help": help, "flag": flag, "choices": choices, "neutral": neutral, "command_line": command_line,
                "bounds": Bounds.of(at_least, above, at_most, below)}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)



def setting_like(source: type, name: str, default: Any, help: str, **changes: Any):
    """A field declared once elsewhere (field ``name`` of settings class ``source``), here with its own
    ``default`` and ``help``: its range, flag, choices and neutrality are the source field's (``changes``
    replaces some: ``neutral=True``, say), so that both check a value the same way."""
    metadata = {**{item.name: item for item in dataclasses.fields(source)}[name].metadata, "help": help, **changes}
    return field(default=default, metadata=metadata)

class Settings:
    """What every settings dataclass can do: replace, to and from JSON, compare on what matters; its numbers are
    checked as it is made, and so is every field with ``choices`` (a subclass with its own ``__post_init__`` calls this
    one first)."""

    def __post_init__(self):
        check_numbers(self)
        check_choices(self)

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping, *, strict: bool = False):
        """The inverse of ``to_json``; unknown fields are dropped (``strict``: ValueError naming them)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = [name for name in data if name not in known]
        if unknown and strict:
            raise ValueError(f"unknown {cls.__name__} field(s): {', '.join(map(shown, unknown))}; known: "
                             f"{', '.join(known)}")
        hints = typing.get_type_hints(cls)
        values = {}
        for name, value in data.items():
            if name not in known:
                continue
            kind = hints.get(name)
            if isinstance(kind, type) and issubclass(kind, Settings) and isinstance(value, Mapping):
                value = kind.from_json(value, strict=strict)
            values[name] = value
        return cls(**values)

    def result_json(self) -> dict:
        """``to_json`` without the neutral fields: what two runs must share to be one run."""
        hints = typing.get_type_hints(type(self))
        result = {}
        for item in dataclasses.fields(self):
            if item.metadata.get("neutral"):
                continue
            value = getattr(self, item.name)
            kind = hints.get(item.name)
            result[item.name] = value.result_json() if isinstance(value, Settings) else \
                (dataclasses.asdict(value) if dataclasses.is_dataclass(value) and isinstance(kind, type) else value)
        return result


@dataclass(frozen=True)
class Option:
    """One command-line option of a settings dataclass: where it lives, its flag, type and help."""

    path: tuple[str, ...]  # field names from the top settings down, e.g. ("ttt", "steps")
    flag: str
    kind: type
    help: str
    choices: tuple | None
    optional: bool  # the field may be None
    bounds: Bounds | None = None  # a number's range (checked by the parser too, shown in --help)


def options(cls: type, prefix: tuple[str, ...] = ()) -> Iterator[Option]:
    """Every command-line option of a settings class, nested settings flattened, in field order."""
    hints = typing.get_type_hints(cls)
    for item in dataclasses.fields(cls):
        kind = hints[item.name]
        if isinstance(kind, type) and issubclass(kind, Settings):
            yield from options(kind, (*prefix, item.name))
            continue
        if not item.metadata.get("command_line", True):
            continue
        arguments = [a for a in typing.get_args(kind) if a is not type(None)]
        optional = bool(arguments) and len(arguments) < len(typing.get_args(kind))
        base = arguments[0] if optional else kind
        flag = item.metadata.get("flag") or "--" + item.name.replace("_", "-")
        yield Option((*prefix, item.name), flag, base, item.metadata.get("help", ""), item.metadata.get("choices"),
                     optional, item.metadata.get("bounds"))


def get_path(settings: Settings, path: tuple[str, ...]) -> Any:
    value = settings
    for name in path:
        value = getattr(value, name)
    return value


def replace_path(settings: Settings, path: tuple[str, ...], value: Any) -> Settings:
    """``settings`` with the field at ``path`` (nested) set to ``value``."""
    if len(path) == 1:
        return dataclasses.replace(settings, **{path[0]: value})
    inner = getattr(settings, path[0])
    return dataclasses.replace(settings, **{path[0]: replace_path(inner, path[1:], value)})
