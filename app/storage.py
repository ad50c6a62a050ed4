"""Writing files so that a crash or a power cut leaves the old file or the new one.

The Pi's SD card and its power supply make torn writes a real risk: every
state file (sessions, jobs, calibration) is written through here.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def why_unwritten(exc: OSError) -> str:
    """Why a file could not be written, in words for a card ("the disk is full")."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full"
    if exc.errno == errno.EROFS:
        return "the disk is read-only"
    return exc.strerror or str(exc)


def atomic_write_text(path: Path, text: str) -> None:
    """``atomic_write`` of text as UTF-8, line ends untouched."""
    atomic_write(path, text.encode("utf-8"))


def atomic_write(path: Path, data: bytes) -> None:
    """Write to a uniquely named temporary file beside ``path``, fsync, rename, fsync the folder.

    A unique temporary name lets two writers of the same file race without
    one renaming the other's half-written file away.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_folder(path.parent)


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (the folder's entry is data too)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
