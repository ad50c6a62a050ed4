"""Session files: one Fountain screenplay (``.spmd``) per conversation.

The files are the source of truth: the app resumes any session from its file
alone. Every change rewrites the file atomically (temporary file, fsync,
rename), so a crash leaves either the old file or the new one, never half of
one. The user's message is on disk as soon as it is sent; the reply is added
when it is done.

Deleting never destroys a file: it moves to ``.trash/`` inside the folder, from
which it can be restored.  The session list reads a ``SessionIndex``: summaries
kept in memory and re-parsed only for files whose mtime or size changed.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from . import fountain
from .storage import atomic_write_text, fsync_folder

log = logging.getLogger(__name__)
NAME_RE = re.compile(r"harvey-session-\d{8}-\d{6}(?:-\d+)?", re.ASCII)
SUFFIX = ".spmd"


class SessionNotFound(Exception):
    """No session of that name (or the name is not a valid session name)."""


@dataclass
class Session:
    name: str
    play: fountain.Screenplay
    mtime: float = 0.0

    @property
    def title(self) -> str:
        return self.play.title_page.get("Title", "Harvey Session")

    @property
    def turns(self) -> list[fountain.Turn]:
        return fountain.turns(self.play)


def valid_name(name: str) -> bool:
    """Only Harvey-style names: nothing in a URL can point outside the folder."""
    return bool(NAME_RE.fullmatch(name or ""))


class SessionStore:
    """Reads and writes the session files in one folder."""

    def __init__(self, folder: Path, user_name: str, workspace: str, backend: str = "ollama"):
        self.folder = Path(folder)
        self.user_name = user_name
        self.workspace = workspace
        self.backend = backend
        self._locks: dict[str, threading.RLock] = {}
        self._cache: dict[str, Session] = {}
        self._guard = threading.Lock()
        self._index: SessionIndex | None = None

    # -- paths and locks ----------------------------------------------------------

    def path(self, name: str) -> Path:
        if not valid_name(name):
            raise SessionNotFound(name)
        return self.folder / f"{name}{SUFFIX}"

    def lock(self, name: str) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault(name, threading.RLock())

    def names(self) -> list[str]:
        """Every session name, newest first (names sort by their timestamp)."""
        found = [p.stem for p in self.folder.glob(f"*{SUFFIX}") if valid_name(p.stem)]
        return sorted(found, reverse=True)

    # -- reading --------------------------------------------------------------------

    def load(self, name: str) -> Session:
        """The session, parsed from its file (cached while the file is unchanged)."""
        path = self.path(name)
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            raise SessionNotFound(name) from None
        cached = self._cache.get(name)
        if cached and cached.mtime == mtime:
            return cached
        play = fountain.loads(path.read_text(encoding="utf-8", errors="replace"))
        session = Session(name, play, mtime)
        self._cache[name] = session
        return session

    def exists(self, name: str) -> bool:
        return valid_name(name) and self.path(name).exists()

    # -- writing --------------------------------------------------------------------

    def create(self, model: str, title: str = "Harvey Session", now: datetime | None = None) -> Session:
        """A new, empty session file named after the time (Harvey's pattern)."""
        now = now or datetime.now()
        base = f"harvey-session-{now:%Y%m%d-%H%M%S}"
        name, n = base, 1
        with self._guard:
            while (self.folder / f"{name}{SUFFIX}").exists():
                n += 1
                name = f"{base}-{n}"
            page = fountain.new_title_page(self.user_name, model, self.backend, now)
            page["Title"] = title
            play = fountain.Screenplay(title_page=page, scenes=[])
            self._write(name, play)
        return self.load(name)

    def append_scene(self, name: str, scene: fountain.Scene) -> Session:
        """Add a scene at the end of the file."""
        with self.lock(name):
            session = self.load(name)
            session.play.scenes.append(scene)
            self._write(name, session.play)
        return self.load(name)

    def replace_last_scene(self, name: str, scene: fountain.Scene) -> Session:
        """Replace the last scene (a turn whose reply has just arrived)."""
        with self.lock(name):
            session = self.load(name)
            session.play.scenes[-1] = scene
            self._write(name, session.play)
        return self.load(name)

    def rename(self, name: str, title: str) -> Session:
        """Change the title page's Title (the file name stays)."""
        title = " ".join(title.split())[:120] or "Harvey Session"
        with self.lock(name):
            session = self.load(name)
            session.play.title_page["Title"] = title
            self._write(name, session.play)
        return self.load(name)

    def _write(self, name: str, play: fountain.Screenplay) -> None:
        """Atomic write: a crash leaves the old file or the new one."""
        atomic_write_text(self.path(name), fountain.dumps(play))
        self._cache.pop(name, None)

    # -- turns ---------------------------------------------------------------------------

    def turn_scene(self, turn: fountain.Turn) -> fountain.Scene:
        return fountain.chat_scene(turn, self.user_name, self.workspace)

    # -- session pages: index, trash, import --------------------------------------------

    def index(self) -> "SessionIndex":
        """The list's in-memory index, made on first use (the files stay the truth)."""
        with self._guard:
            if self._index is None:
                self._index = SessionIndex(self.folder)
            return self._index

    @property
    def trash(self) -> Path:
        """Deleted sessions wait here; ``names()`` never looks inside (it does not recurse)."""
        return self.folder / TRASH_DIR

    def delete(self, name: str) -> str:
        """Move the file to the trash (never unlink it); returns its name in the trash."""
        if not valid_name(name):
            raise SessionNotFound(name)
        with self.lock(name), self._guard:
            source = self.path(name)
            if not source.exists():
                raise SessionNotFound(name)
            self.trash.mkdir(exist_ok=True)
            entry = _free_name(self.trash, name)
            _move(source, self.trash / f"{entry}{SUFFIX}")
            self._cache.pop(name, None)
        return entry

    def trashed(self) -> list[tuple[str, str]]:
        """(name in the trash, title) of every deleted session, most recently deleted first."""
        try:
            found = [p for p in self.trash.glob(f"*{SUFFIX}") if valid_name(p.stem)]
        except OSError:
            return []
        return [(p.stem, _title_of(p)) for p in sorted(found, key=_changed, reverse=True)]

    def restore(self, entry: str) -> str:
        """Move a deleted session back; it keeps its name unless a new session took it."""
        if not valid_name(entry):
            raise SessionNotFound(entry)
        with self._guard:
            source = self.trash / f"{entry}{SUFFIX}"
            if not source.exists():
                raise SessionNotFound(entry)
            name = _free_name(self.folder, entry)
            _move(source, self.folder / f"{name}{SUFFIX}")
            self._cache.pop(name, None)
        return name

    def import_text(self, text: str, now: datetime | None = None) -> str:
        """Store an uploaded screenplay as a new session, its text kept exactly.

        The name comes from the title page's Date when that is a real date and
        no session has it yet, else from now; never from the upload's file name.
        """
        now = now or datetime.now()
        dated = _title_date(fountain.loads(text).title_page.get("Date", ""))
        with self._guard:
            name = f"harvey-session-{dated:%Y%m%d-%H%M%S}" if dated else ""
            if not valid_name(name) or self.path(name).exists():  # (year 999 prints as "999")
                name = _free_name(self.folder, f"harvey-session-{now:%Y%m%d-%H%M%S}")
            atomic_write_text(self.path(name), text)
            self._cache.pop(name, None)
        return name


TRASH_DIR = ".trash"
def _free_name(folder: Path, name: str) -> str:
    """``name`` if no file in ``folder`` has it, else the first free ``base-N`` (as ``create`` counts)."""
    base = re.sub(r"-\d+$", "", name) if name.count("-") > 3 else name
    candidate, n = name, 1
    while (folder / f"{candidate}{SUFFIX}").exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _move(source: Path, target: Path) -> None:
    """Rename within one file system (atomic), then make both folders' entries durable."""
    os.replace(source, target)
    for folder in {source.parent, target.parent}:
        fsync_folder(folder)


def _changed(path: Path) -> int:
    """When the file was last moved (ctime), 0 when it has just gone (restored meanwhile)."""
    try:
        return path.stat().st_ctime_ns
    except OSError:
        return 0


def _title_of(path: Path) -> str:
    """The Title from the first few KB (the title page is at the top), for the trash list."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return ""
    return fountain.loads(head.rsplit("\n", 1)[0] + "\n").title_page.get("Title", "")


def _title_date(value: str) -> datetime | None:
    """A title page Date as Harvey writes it (seconds optional), or None."""
    value = " ".join(value.split())
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return datetime.strptime(value, fmt)
        except ValueError:
            continue
    return None


@dataclass
class Summary:
    """What the session list shows of one file, plus its plain text for search."""

    name: str
    title: str
    date: str
    models: list[str]
    turns: int
    analysis: bool
    size: int
    key: tuple[int, int]          # (mtime_ns, size): the file is re-read when this changes
    text: str                     # casefolded words of the whole screenplay


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

    def search(self, query: str) -> list[Summary]:
        """Sessions whose text holds every word of ``query`` (case-insensitive)."""
        words = query.casefold().split()
        return [s for s in self.entries() if all(w in s.text for w in words)]


def _summarize(name: str, path: Path, key: tuple[int, int]) -> Summary:
    """Parse one file into its list entry (called only when the file changed)."""
    play = fountain.loads(path.read_bytes().decode("utf-8", errors="replace"))
    turns = fountain.turns(play)
    models = list(dict.fromkeys(t.model for t in turns if t.model))
    if not models and play.title_page.get("Model"):
        models = [play.title_page["Model"]]
    page = play.title_page
    words = [*page.values()]
    for scene in play.scenes:
        words.append(scene.heading)
        words += [f"{el.character}\n{el.text}" for el in scene.elements]
    return Summary(name=name, title=page.get("Title", "Harvey Session"), date=page.get("Date") or _name_date(name),
                   models=models, turns=len(turns), analysis=any(fountain.read_chunk_scene(s) for s in play.scenes),
                   size=key[1], key=key, text="\n".join(words).casefold())


def _name_date(name: str) -> str:
    """The date a Harvey file name carries, for files without a title page Date."""
    stamp = name.removeprefix("harvey-session-")[:15]
    try:
        return datetime.strptime(stamp, "%Y%m%d-%H%M%S").strftime(fountain.TS_FORMAT)
    except ValueError:
        return ""
