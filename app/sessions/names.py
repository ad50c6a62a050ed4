"""Session file names: the one check that keeps every URL inside the sessions folder."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"harvey-session-\d{8}-\d{6}(?:-\d+)?", re.ASCII)
SUFFIX = ".spmd"


def valid_name(name: str) -> bool:
    """Only Harvey-style names: nothing in a URL can point outside the folder."""
    return bool(NAME_RE.fullmatch(name or ""))
