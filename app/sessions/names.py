"""Session file names: the one check that keeps every URL inside the sessions folder."""

from __future__ import annotations

import re

NAME_RE = re.compile(r"harvey-session-\d{8}-\d{6}(?:-\d+)?", re.ASCII)
SUFFIX = ".spmd"


def valid_name(name: str) -> bool:
    """Only Harvey-style names: nothing in a URL can point outside the folder."""
    return bool(NAME_RE.fullmatch(name or ""))


DEFAULT_TITLE = "Harvey Session"
TITLE_CHARS = 60


def title_from_message(text: str, limit: int = TITLE_CHARS) -> str:
    """A session title from its first message, with no model call: the first line that has
    words, without Markdown marks or a leading slash command, cut at a word near ``limit``."""
    for line in (text or "").splitlines():
        line = re.sub(r"(?<!\w)_([^_\s](?:[^_]*[^_\s])?)_(?!\w)", r"\1", line)   # _emphasis_, not _pydecimal.py
        line = re.sub(r"[`*#>\[\]]+", " ", line)
        line = re.sub(r"^\s*/[\w-]+\s*", "", line)              # /read-chunks file.md -> file.md
        line = re.sub(r"(?<!\S)@[\w.:/-]+", " ", line)           # @model directives
        line = " ".join(line.split())
        if line:
            break
    else:
        return ""
    if len(line) <= limit:
        return line
    cut = line[:limit + 1].rsplit(" ", 1)[0] if " " in line[:limit + 1] else line[:limit]
    return cut.rstrip(" ,;:.-") + "…"


def distinct_models(models: list[str]) -> list[str]:
    """Each model once, whether a turn names it "llama3.1:8b" or by its cue "LLAMA3.1"."""
    from .fountain import model_cue

    seen: dict[str, str] = {}
    for model in models:
        cue = model_cue(model)
        if cue not in seen or (seen[cue] == cue and model != cue):
            seen[cue] = model                  # prefer the full name to the bare cue
    return list(seen.values())
