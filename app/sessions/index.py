"""The session list's index: one summary per file, re-parsed only when the file changed.

The files stay the truth; this is a cache keyed by (mtime, size) that the list
reads, so listing hundreds of sessions does not parse hundreds of files per
request on a Pi. A summary is metadata and a one-line preview, never the
session's text (issue 23 item 5: the text made the index as big as the archive,
four times that once a file held one emoji). A search reads, for each session, a
small file of its distinct words (``.search/NAME.words`` in the sessions folder, made
from the session at the first search after it changed, and at start-up), a chunk at a
time, and keeps nothing in memory. Each summary also keeps the session's chunk
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

from ..errors import Refused
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
        self.words = WordFiles(self.folder)

    def warm(self) -> None:
        """Parse every file once in the background at start, so the first visit to the list is fast too;
        then bring the search's word files up to date (and drop those of sessions gone meanwhile).
        ``warmed`` is set when both are done, or failed.

        Any failure is only logged: the next list request scans again and reports it, and a search
        makes any word file it lacks.
        """
        try:
            self.words.refresh(self.entries())
        except Exception:  # noqa: BLE001 - a warm-up must never take a thread down
            log.warning("session index warm-up failed", exc_info=True)
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
        self.words.forget(name)

    def instructions(self) -> list[Instruction]:
        """Every session's chunk instructions (the prompt library's source), newest session first."""
        return [i for s in self.entries() for i in reversed(s.instructions)]

    def search(self, query: str) -> list[Summary]:
        """Sessions whose file holds every word of ``query`` (case-insensitive), as a substring anywhere.

        Each session is looked up in its word file; one missing or older than the session is made
        again from the session first (a search after a change reads that session once).  A query
        of more than ``MAX_SEARCH_WORDS`` distinct words (or ``MAX_SEARCH_CHARS`` characters) is
        refused before anything is read: each word costs a scan of every word file, in a request
        thread."""
        words = list(dict.fromkeys(query.casefold().split()))
        if len(words) > MAX_SEARCH_WORDS or len(query) > MAX_SEARCH_CHARS:
            raise Refused(f"Search for at most {MAX_SEARCH_WORDS} words ({MAX_SEARCH_CHARS} characters); "
                          f"this search has {len(words)} words.")
        return [s for s in self.entries() if self.words.holds(s.name, s.key, words)]


MAX_SEARCH_WORDS = 12       # distinct words a session search takes (each scans every word file)
MAX_SEARCH_CHARS = 400
SEARCH_CHUNK = 1 << 20       # characters read at a time: a search's memory stays flat, its loop in C


def _finds_all(file, words: list[str], fold: bool = False) -> bool:
    """Whether the rest of a word file (``fold``: of a session, casefolded here) holds every word, read
    a chunk at a time and stopping once all are found.  Each chunk keeps the previous one's last
    characters, so a word across the boundary is found.
    """
    missing, keep, carried = set(words), max(map(len, words), default=1) - 1, ""
    while missing and (chunk := file.read(SEARCH_CHUNK)):
        text = carried + (chunk.replace(_ZWSP, "").casefold() if fold else chunk)
        missing = {w for w in missing if w not in text}
        carried = text[len(text) - keep:] if keep else ""
    return not missing


_ZWSP = "\u200b"      # the writer's guard before some lines (docs/sessions.md, "Sessions are screenplays"), not text
MAX_WORDS = 100_000    # distinct words a word file lists at most (memory while making it: ~10 MB); a
                       # session with more (pasted logs, ids) has none and is read a chunk at a time
WORDS_DIR = ".search"        # beside .trash/ in the sessions folder; ``names()`` does not look inside
_WORDS_MAGIC = "harvey-words 1"


class WordFiles:
    """One file per session holding its distinct words, so a search reads those, not the sessions.

    A query word never holds whitespace, so it occurs in a session's text (casefolded, without the
    writer's zero width spaces) exactly when it occurs inside one of that text's whitespace-separated
    words: the file lists each of those once, one a line, and answers a search exactly as reading the
    session would (issue 23: 500 sessions were read whole for a word none held).  Its first line names
    the session's (mtime, size) it was made from and its own length; a file that does not match is made
    again from the session.  The files are a cache: written without fsync, any of them may be deleted.
    """

    def __init__(self, folder: Path):
        self.sessions = Path(folder)
        self.folder = self.sessions / WORDS_DIR
        self._failed = False          # a write failed once (logged once, not per session and search)
        self._unlisted: dict[str, tuple[int, int]] = {}   # sessions (as of key) with over MAX_WORDS words

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.words"

    def forget(self, name: str) -> None:
        """Session ``name`` was written: its word file is made again at the next search (its
        (mtime, size) key alone misses a same-size rewrite within the timestamp granularity)."""
        self._unlisted.pop(name, None)
        self.path(name).unlink(missing_ok=True)

    def holds(self, name: str, key: tuple[int, int], words: list[str]) -> bool:
        """Whether session ``name`` (as of ``key``) holds every word; its word file is made if it is stale."""
        if self._unlisted.get(name) == key:
            return self._scan(name, words)
        try:
            with self.path(name).open(encoding="utf-8", errors="replace") as file:
                if _current(file, key):
                    return _finds_all(file, words)
        except OSError:
            pass
        made = self.make(name)
        if made is _TOO_MANY:
            self._unlisted[name] = key
            return self._scan(name, words)
        return made is not None and all(w in made for w in words)   # no "\n" in a word: one line each

    def _scan(self, name: str, words: list[str]) -> bool:
        """The session itself, read a chunk at a time (one with too many distinct words to list)."""
        try:
            with (self.sessions / f"{name}{SUFFIX}").open(encoding="utf-8", errors="replace") as file:
                return _finds_all(file, words, fold=True)
        except OSError:
            return False

    def make(self, name: str) -> str | None:
        """Read session ``name`` once and write its word file; its words one a line, or None when the
        session cannot be read (gone since the scan: it holds nothing).  A file that cannot be written
        is only logged (once): the words read are still the answer."""
        try:
            with (self.sessions / f"{name}{SUFFIX}").open(encoding="utf-8", errors="replace") as file:
                st = os.fstat(file.fileno())
                distinct = _distinct_words(file)
                if distinct is None:
                    self.path(name).unlink(missing_ok=True)
                    return _TOO_MANY
                listed = "\n".join(sorted(distinct)) + "\n"
        except OSError:
            return None
        body = listed.encode("utf-8")
        head = f"{_WORDS_MAGIC} {st.st_mtime_ns} {st.st_size} {len(body)}\n".encode()
        tmp = self.folder / f".{name}.{threading.get_ident()}.tmp"
        try:
            self.folder.mkdir(exist_ok=True)
            tmp.write_bytes(head + body)
            os.replace(tmp, self.path(name))
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if not self._failed:
                self._failed = True
                log.warning("search word files cannot be written in %s (%s): each search reads the sessions",
                            self.folder, exc)
        return listed

    def refresh(self, entries: list["Summary"]) -> None:
        """Make every missing or stale word file, and delete those of sessions no longer there."""
        self._unlisted = {e.name: e.key for e in entries if self._unlisted.get(e.name) == e.key}
        for entry in entries:
            if entry.name in self._unlisted:
                continue
            try:
                with self.path(entry.name).open(encoding="utf-8", errors="replace") as file:
                    if _current(file, entry.key):
                        continue
            except OSError:
                pass
            if self.make(entry.name) is _TOO_MANY:
                self._unlisted[entry.name] = entry.key
        keep = {f"{e.name}.words" for e in entries}
        try:
            with os.scandir(self.folder) as it:
                stale = [found.path for found in it if found.name.endswith(".words") and found.name not in keep]
        except FileNotFoundError:
            return
        for path in stale:
            Path(path).unlink(missing_ok=True)


def _current(file, key: tuple[int, int]) -> bool:
    """Whether an open word file was made from the session as of ``key`` and is whole (its first line
    says so and the file is as long as it says)."""
    head = file.readline().split()
    if len(head) != 5 or " ".join(head[:2]) != _WORDS_MAGIC or not all(h.isdigit() for h in head[2:]):
        return False
    total = len(" ".join(head).encode()) + 1 + int(head[4])
    return (int(head[2]), int(head[3])) == key and os.fstat(file.fileno()).st_size == total


_TOO_MANY = "\0too many words"     # make()'s answer for a session over MAX_WORDS (not a word list)


def _distinct_words(file) -> set[str] | None:
    """The distinct whitespace-separated words of a text file, casefolded, read a chunk at a time
    (a word cut by a chunk's end is carried into the next chunk); None past MAX_WORDS, so that
    making one word file never holds a whole log's worth of words."""
    found: set[str] = set()
    carried = ""
    while chunk := file.read(SEARCH_CHUNK):
        text = carried + chunk.replace(_ZWSP, "").casefold()
        words = text.split()
        carried = words.pop() if words and not text[-1].isspace() else ""
        found.update(words)
        if len(found) > MAX_WORDS:
            return None
    if carried:
        found.add(carried)
    return found


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
# Markdown marks; an underscore only as emphasis (snake_case code keeps its "_", issue 33).
_MARKUP = re.compile(r"[`*#>|~]+|(?<![^\W_])_+|_+(?![^\W_])|\[\[.*?\]\]|!?\[([^\]]*)\]\([^)]*\)")


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
