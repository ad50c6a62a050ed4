"""The session list's index: one summary per file, re-parsed only when the file changed.

The files stay the truth; this is a cache keyed by (mtime, size) that the list
reads, so listing hundreds of sessions does not parse hundreds of files per
request on a Pi. A summary is metadata and a one-line preview, never the
session's text (issue 23 item 5: the text made the index as big as the archive,
four times that once a file held one emoji); a search reads the files, a chunk
at a time, and keeps nothing. Each summary also keeps the session's chunk
instructions (its INT. CHUNK ANALYSIS scenes' user lines, seed 000 D5), which the
alert card offers again (app/analysis/library.py). The store, the one writer,
calls ``forget`` on every write; files written by others (the terminal Harvey,
a copy) are caught by their (mtime, size).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from . import fountain
from .names import SUFFIX, distinct_models, valid_name

log = logging.getLogger(__name__)

# The prompt library (issue #15): chunk instructions kept per session, bounded so the index
# stays small however long the sessions are. Longer instructions are not kept (not truncated:
# a cut instruction filled back into the box would be wrong).
INSTRUCTIONS_PER_SESSION = 20
INSTRUCTION_CHARS = 4000


@dataclass(frozen=True)
class Instruction:
    """A chunk instruction the user wrote, as an INT. CHUNK ANALYSIS scene records it (seed 000 D5)."""

    text: str                     # as written, ``@model`` directive included
    file: str                     # the file it was run on
    when: datetime | None         # the scene's timestamp
    session: str                  # the session's name (sorts by its creation time)


@dataclass
class Summary:
    """What the session list shows of one file: metadata and a preview, bounded whatever the file holds."""

    name: str
    title: str
    date: str
    models: list[str]
    turns: int
    analysis: bool
    size: int
    key: tuple[int, int]          # (mtime_ns, size): the file is re-read when this changes
    preview: str = ""             # one line of the last exchange, for the list
    instructions: tuple[Instruction, ...] = field(default=())   # its chunk instructions, oldest first


class SessionIndex:
    """Summaries of every session file, re-parsing only files whose mtime or size changed.

    Listing hundreds of sessions must not parse hundreds of files per request
    on a Pi; one ``scandir`` with a stat per file decides what is stale.
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._lock = threading.Lock()
        self._entries: dict[str, Summary] = {}
        self.warmed = threading.Event()

    def warm(self) -> None:
        """Parse every file once in the background at start, so the first visit to the list is fast too.

        Any failure is only logged: the next list request scans again and reports it.
        """
        try:
            self.entries()
        except Exception:  # noqa: BLE001 - a warm-up must never take a thread down
            log.warning("session list warm-up failed", exc_info=True)
        finally:
            self.warmed.set()

    def entries(self) -> list[Summary]:
        """Every session, newest first (names sort by their timestamp)."""
        with self._lock:
            fresh: dict[str, Summary] = {}
            with os.scandir(self.folder) as it:
                for entry in it:
                    name = entry.name.removesuffix(SUFFIX)
                    if name == entry.name or not valid_name(name) or not entry.is_file():
                        continue
                    st = entry.stat()
                    key = (st.st_mtime_ns, st.st_size)
                    old = self._entries.get(name)
                    fresh[name] = old if old and old.key == key else _summarize(name, Path(entry.path), key)
            self._entries = fresh
        return sorted(fresh.values(), key=lambda s: s.name, reverse=True)

    def forget(self, name: str) -> None:
        """Re-read ``name`` at the next scan: the store calls this on every write it makes.

        The (mtime, size) key alone misses a rewrite of the same size within the file
        system's timestamp granularity (coarse on some SD-card file systems).
        """
        with self._lock:
            self._entries.pop(name, None)

    def instructions(self) -> list[Instruction]:
        """Every session's chunk instructions (the prompt library's source), newest session first."""
        return [i for s in self.entries() for i in reversed(s.instructions)]

    def search(self, query: str) -> list[Summary]:
        """Sessions whose file holds every word of ``query`` (case-insensitive), read from the files."""
        words = query.casefold().split()
        return [s for s in self.entries() if _holds(self.folder / f"{s.name}{SUFFIX}", words)]


SEARCH_CHUNK = 1 << 20       # characters read at a time: a search's memory stays flat, its loop in C


def _holds(path: Path, words: list[str]) -> bool:
    """Whether the file holds every word, read a chunk at a time and stopping once all are found.

    Each chunk keeps the previous one's last characters, so a word across the boundary is found.
    A file gone since the scan holds nothing.
    """
    missing, keep, carried = set(words), max(map(len, words), default=1) - 1, ""
    try:
        with path.open(encoding="utf-8", errors="replace") as file:
            while missing and (chunk := file.read(SEARCH_CHUNK)):
                text = carried + chunk.replace(_ZWSP, "").casefold()
                missing = {w for w in missing if w not in text}
                carried = text[len(text) - keep:] if keep else ""
    except OSError:
        return False
    return not missing


_ZWSP = "\u200b"      # the writer's guard before some lines (README "Sessions are screenplays"), not text


def _summarize(name: str, path: Path, key: tuple[int, int]) -> Summary:
    """Parse one file into its list entry (called only when the file changed)."""
    play = fountain.loads(path.read_bytes().decode("utf-8", errors="replace"))
    turns = fountain.turns(play)
    models = distinct_models([t.model for t in turns if t.model])
    if not models and play.title_page.get("Model"):
        models = [play.title_page["Model"]]
    page = play.title_page
    analyses = [a for a in map(fountain.read_chunk_scene, play.scenes) if a]
    return Summary(name=name, title=_bounded(page.get("Title", "Harvey Session")),
                   date=_bounded(page.get("Date") or _name_date(name)), models=[_bounded(m) for m in models],
                   turns=len(turns), analysis=bool(analyses), size=key[1], key=key, preview=preview(turns),
                   instructions=_instructions(name, turns))


TITLE_CHARS = 200


def _bounded(value: str) -> str:
    """A title page value as the list shows it, on one line and at most ``TITLE_CHARS`` long: a
    file's title page may hold anything, and the list keeps it for every session."""
    value = " ".join(str(value).split())
    return value if len(value) <= TITLE_CHARS else value[:TITLE_CHARS - 1] + "…"


def _instructions(name: str, turns: list[fountain.Turn]) -> tuple[Instruction, ...]:
    """The analyses' instructions, newest ``INSTRUCTIONS_PER_SESSION``.

    The terminal Harvey's recorder writes no instruction line: its analysis run for a message
    learns that message (the closest thing to an instruction the file holds); a ``/read-chunks``
    scene records neither its instruction nor a message, so it gives none.
    """
    found = []
    for turn in turns:
        a = turn.analysis
        text = (a.instruction or turn.user_text or "") if a is not None else ""
        if text.strip() and len(text) <= INSTRUCTION_CHARS:
            found.append(Instruction(text, a.file, a.when, name))
    return tuple(found[-INSTRUCTIONS_PER_SESSION:])


PREVIEW_CHARS = 90
_MARKUP = re.compile(r"[`*_#>|~]+|\[\[.*?\]\]|!?\[([^\]]*)\]\([^)]*\)")


def preview(turns: list[fountain.Turn]) -> str:
    """One line of the newest exchange (its reply, else its message), without Markdown marks.

    The list shows what a session was last about, not only its title (#16).
    """
    for turn in reversed(turns):
        text = turn.reply or turn.user_text or turn.harvey
        if text and text.strip():
            line = " ".join(_MARKUP.sub(lambda m: m.group(1) or " ", text).split())
            return line if len(line) <= PREVIEW_CHARS else line[:PREVIEW_CHARS - 1].rstrip() + "…"
    return ""


def _name_date(name: str) -> str:
    """The date a Harvey file name carries, for files without a title page Date."""
    stamp = name.removeprefix("harvey-session-")[:15]
    try:
        return datetime.strptime(stamp, "%Y%m%d-%H%M%S").strftime(fountain.TS_FORMAT)
    except ValueError:
        return ""
