"""What every settings dataclass shares: the ``setting`` field, the ``Settings`` base, and the paths and options of fields.

``setting`` makes a dataclass field that carries its reason (``help``), which is also what ``--help``
prints: the command line is generated from these fields (``options``), so it cannot disagree with
what runs. ``Settings`` gives every settings dataclass ``replace``, ``to_json``/``from_json`` and
``result_json``. ``from_json`` reads what an older or newer kit wrote: fields it does not know
are dropped (or refused, with ``strict``), fields missing take their defaults.

This module needs only the standard library; it knows nothing of any stage's settings, nor of models,
tasks or files.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from arc_kit.names import shown

DEFAULT_TOKEN_BUDGET = 8192  # the authors' cap on a prompt plus its answer, and on a training sequence, for every
# model (their NeMo-8B runs: finetune_NemoReArc1200.py and evaluate_NemoReArc1200_*.py, max_tokens=8192)


def setting(default: Any = dataclasses.MISSING, help: str = "", *, flag: str | None = None,
            choices: tuple | None = None, neutral: bool = False, default_factory: Any = dataclasses.MISSING,
            command_line: bool = True):
    """A dataclass field with its reason (``help``), its command-line ``flag`` and whether it changes results.

    ``neutral`` fields (batch sizes, say) never change what a run produces, so a run folder made with
    other values may be resumed. ``command_line=False`` keeps a field off the generated options.
    """
    metadata = {"help": help, "flag": flag, "choices": choices, "neutral": neutral, "command_line": command_line}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


class Settings:
    """What every settings dataclass can do: replace, to and from JSON, compare on what matters."""

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
                     optional)


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
