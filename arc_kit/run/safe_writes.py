"""The pool's writes, refusing to follow a link: records appended, Ray's logs copied, model files received.

A run folder's file that is a symbolic link (to a user's file, say) is never written through: the
open fails (``O_NOFOLLOW``) and the error names the file. Only the last part of the path is checked,
as ``O_NOFOLLOW`` does; the folders above are the run's own (claimed by ``outputs``). This module
knows files; nothing of records or Ray.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)  # Windows has none: there a link is rare and needs rights to make


def write_refusing_links(path: str | os.PathLike, data: bytes, *, append: bool = False) -> None:
    """Write (or ``append``) ``data`` to ``path``, made if missing; OSError naming it when it is a link."""
    flags = os.O_WRONLY | os.O_CREAT | NO_FOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:
        descriptor = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:  # what O_NOFOLLOW says of a link
            raise OSError(errno.ELOOP, "a link, which the kit never writes through", str(path)) from None
        raise
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def append_line_refusing_links(path: str | os.PathLike, line: str) -> None:
    """Append one line of text; a torn last line (a killed writer) is closed first, not continued."""
    path = Path(path)
    torn = False
    if path.is_file() and not path.is_symlink() and path.stat().st_size:
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            torn = handle.read(1) != b"\n"
    write_refusing_links(path, (("\n" if torn else "") + line + "\n").encode("utf-8"), append=True)
