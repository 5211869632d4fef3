"""Names the kit was given (task ids, split names), made safe to show and to name a file by.

A task id is any string a JSON key can hold: a path such as ``../../x``, a newline, ANSI escapes
that recolour a terminal, a lone surrogate that no UTF-8 text can hold, a megabyte of characters.
``shown`` is how every message and log line writes one (escaped, ``repr``-like, when it is not
plain); ``listed`` how a message writes a list of them, or of anything (cut, the rest counted);
``file_name`` is the one way the kit turns one into a file name (portable, bounded, and
distinct for distinct names); ``encoded`` is the one way to turn one into bytes (hashing, digests).
This module knows strings and file-system rules; it knows nothing of tasks, runs or files.
"""

from __future__ import annotations

import hashlib
import re

SHOWN_LENGTH = 80  # the most characters of a name a message shows (the rest is counted, not shown)
LISTED_LENGTH = 200  # the most characters of a list a message shows (a line of a message stays near 300)
READABLE_LENGTH = 64  # the most characters of a name kept readable in a file name
HASH_LENGTH = 16  # hex digits of the hash that keeps changed names distinct (64 bits)
HASH_MARK = "~"  # between the readable part and the hash; never left in a name that is kept as it is

_PLAIN_FILE_NAME = re.compile(r"[a-z0-9_-][a-z0-9._-]*")
_NOT_PORTABLE = re.compile(r"[^A-Za-z0-9._-]")
# names Windows reserves for devices, with any extension (CON, con.txt, COM1.png...)
_WINDOWS_DEVICES = re.compile(r"(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?", re.IGNORECASE)


def encoded(name: str) -> bytes:
    """``name`` as UTF-8 bytes; a lone surrogate (valid in JSON, never in UTF-8 text) kept as its code unit.

    The same bytes as ``name.encode()`` for every name that UTF-8 can encode, so digests of ordinary
    names do not change.
    """
    return name.encode("utf-8", "surrogatepass")


def shown(name: str) -> str:
    """``name`` as a message shows it: as it is when plain (printable, no spaces, quotes or backslashes, not empty or
    long), else escaped like ``repr`` (quoted, no raw newline, escape or control character), and cut to
    ``SHOWN_LENGTH`` characters with the rest counted."""
    name = str(name)
    if 0 < len(name) <= SHOWN_LENGTH and name.isprintable() and not any(
            character.isspace() or character in "'\"\\" for character in name):
        return name
    if len(name) <= SHOWN_LENGTH:
        return repr(name)
    return f"{name[:SHOWN_LENGTH]!r}... ({len(name)} characters)"


def listed(items, length: int = LISTED_LENGTH, separator: str = ", ", count: int | None = None) -> str:
    """``items`` (as text) joined by ``separator``, as many as fit in ``length`` characters (and at most ``count``),
    then "and N more" for the rest: ``a, b, c and 12 more``. The first is always shown (cut to ``length`` when it alone
    is longer). Every list a message shows goes through here."""
    items = [str(item) for item in items]
    kept: list[str] = []
    for index, item in enumerate(items):
        left = len(items) - index - 1  # not shown when this one is the last kept
        tail = f" and {left} more" if left else ""
        if kept and (len(separator.join([*kept, item]) + tail) > length or len(kept) == count):
            break
        kept.append(item if kept or len(item) <= length else item[:length] + "...")
    left = len(items) - len(kept)
    return separator.join(kept) + (f" and {left} more" if left else "")


def file_name(name: str, suffix: str = "") -> str:
    """A file name for ``name`` (then ``suffix``, e.g. ".png") that is safe on Linux, macOS and Windows.

    A name made of lower-case letters, digits, ``-``, ``_`` and inner dots (every ARC task id) is kept as
    it is. Any other name (a path separator, ``..``, a leading dot, upper case, other characters, a
    device name Windows reserves, more than ``READABLE_LENGTH`` characters, or empty) keeps a readable
    part (its portable characters, the rest as ``_``) and gets ``~`` and a hash of the whole name: the
    file name then never holds a path separator or starts with a dot, is at most ``READABLE_LENGTH +
    1 + HASH_LENGTH`` characters before the suffix, and two distinct names give two distinct file names,
    also on a file system that ignores case (a kept name has no ``~`` and no upper case).
    """
    name = str(name)
    if (_PLAIN_FILE_NAME.fullmatch(name) and len(name) <= READABLE_LENGTH and not name.endswith(".")
            and not _WINDOWS_DEVICES.fullmatch(name)):
        return name + suffix
    readable = _NOT_PORTABLE.sub("_", name[:READABLE_LENGTH]).lstrip(".").rstrip(".") or "_"
    if _WINDOWS_DEVICES.fullmatch(readable):
        readable = f"_{readable}"[:READABLE_LENGTH]
    digest = hashlib.sha256(encoded(name)).hexdigest()[:HASH_LENGTH]
    return f"{readable}{HASH_MARK}{digest}{suffix}"
