"""Session files: one Fountain screenplay (``.spmd``) per conversation.

The files are the source of truth: the app resumes any session from its file
alone. Every change rewrites the file atomically (temporary file, fsync,
rename), so a crash leaves either the old file or the new one, never half of
one. The user's message is on disk as soon as it is sent; the reply is added
when it is done.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from . import fountain

NAME_RE = re.compile(r"^harvey-session-\d{8}-\d{6}(?:-\d+)?$")
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
    return bool(NAME_RE.match(name or ""))


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
        self.write_text(self.path(name), fountain.dumps(play))
        self._cache.pop(name, None)

    @staticmethod
    def write_text(path: Path, text: str) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # -- turns ---------------------------------------------------------------------------

    def turn_scene(self, turn: fountain.Turn) -> fountain.Scene:
        return fountain.chat_scene(turn, self.user_name, self.workspace)
