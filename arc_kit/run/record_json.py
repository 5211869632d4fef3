"""A record's JSON, and the record files that hold one record a line.

A record is a dataclass (``method.records.TaskRecord`` and its parts; the tables' ``experiments.table_records``).
Its JSON is the kit's one codec's (``arc_kit.codec``: the layout derived from the dataclass, every field held to
its kind, a later kit's fields kept in ``extra``), with the grids as the records' leaf: a list of rows, read back
by ``data.grids.to_grid`` (any side up to ``LARGEST_SIDE``: a wide set's answers are wide). ``to_json``,
``from_json`` and ``schema`` are the codec's with that leaf. ``stream_records`` (a line at a time, bounded;
``read_records`` keeps the last record of each task asked for), ``append_record`` and ``write_records`` are the
record files' only reader and writers.

Knows grids and the codec; of the record layouts, only which one a record file holds by default.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from arc_kit import codec
from arc_kit.data.grids import LARGEST_SIDE, grid_to_json, to_grid
from arc_kit.data.jsonio import append_json_line, read_json_lines, write_json_lines_atomically
from arc_kit.method.records import TaskRecord

GRIDS = (codec.Leaf(np.ndarray, "list", lambda value, where: to_grid(value, where, LARGEST_SIDE), grid_to_json),)


def to_json(record) -> dict:
    """The JSON object of ``record`` (``codec.to_json``, its grids lists of rows)."""
    return codec.to_json(record, GRIDS)


def from_json(cls: type, data: Any, where: str = "the record"):
    """The record of class ``cls`` that ``data`` holds (``codec.from_json``); ValueError naming the first field (by
    its path below ``where``) that is not of its kind, so that nothing ``to_json`` could not have written is taken
    for a record."""
    return codec.from_json(cls, data, where, leaves=GRIDS)


def schema(cls: type) -> dict[str, str]:
    """JSON name -> kind of every checked field of record class ``cls``, as ``to_json`` writes them."""
    return codec.schema(cls, GRIDS)


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
