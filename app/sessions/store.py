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
import copy
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable
from datetime import datetime
from pathlib import Path

from ..errors import Conflict, NotFound
from ..events import Bell
from . import fountain, notes
from ..storage import atomic_write_text, fsync_folder
from .index import SessionIndex
from .names import NAME_RE, SUFFIX, valid_name  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)


class SessionNotFound(NotFound):
    """No session of that name (or the name is not a valid session name)."""


class TurnMoved(Conflict):
    """The turn a change addresses is not the one expected (another device changed the session)."""


@dataclass
class Session:
    """A snapshot of one session file. Never changed in place: the store writes a new one.

    Readers on other threads keep a consistent snapshot while a writer saves the next;
    ``turns`` is parsed once per snapshot. Change a turn only through the store.
    """

    name: str
    play: fountain.Screenplay
    mtime: float = 0.0
    _turns: list[fountain.Turn] | None = field(default=None, repr=False, compare=False)
    _texts: list[str] | None = field(default=None, repr=False, compare=False)   # each scene's text

    @property
    def texts(self) -> list[str]:
        """Each scene as written (kept so the next write re-encodes only the scenes that changed)."""
        if self._texts is None:
            self._texts = [fountain.dump_scene(scene) for scene in self.play.scenes]
        return self._texts

    @property
    def title(self) -> str:
        return self.play.title_page.get("Title", "Harvey Session")

    @property
    def turns(self) -> list[fountain.Turn]:
        if self._turns is None:
            self._turns = fountain.turns(self.play)
        return self._turns

    @property
    def parsed_turns(self) -> list[fountain.Turn] | None:
        """The turns if they were parsed already, else None: the store reuses them to parse only a
        changed last turn, and never pays a whole parse just to find out."""
        return self._turns

    def with_turns(self, turns: list[fountain.Turn] | None) -> "Session":
        """This snapshot, told its turns (the store worked them out from the change it wrote, so
        they are not parsed again; None: parse when asked).  Only for a snapshot the store just made."""
        self._turns = turns
        return self


class SessionStore:
    """Reads and writes the session files in one folder."""

    # Parsed sessions kept in memory: the few in use, and the chat page's list of the 8 most
    # recent (web.fragments.recent loads each; with fewer, every page view would re-parse them).
    CACHE_SIZE = 10

    def __init__(self, folder: Path, user_name: str, workspace: str, backend: str = "ollama",
                 cache_size: int = CACHE_SIZE):
        self.folder = Path(folder)
        self.user_name = user_name
        self.workspace = workspace
        self.backend = backend
        # A session's lock lives while someone holds or waits for it, then goes (no growth per name).
        self._locks: "weakref.WeakValueDictionary[str, threading.RLock]" = weakref.WeakValueDictionary()
        self._cache: "OrderedDict[str, Session]" = OrderedDict()    # least recently used first
        self._cache_size = max(1, cache_size)
        self._cache_lock = threading.Lock()
        self._guard = threading.Lock()
        self._index: SessionIndex | None = None
        # A reply that could not be written (a full or read-only disk, issue 43): the turn as it would have
        # been, by session, until that turn is written again; the page shows it with its error card.
        self._unsaved: dict[str, tuple[int, fountain.Turn]] = {}
        # Rings when a turn is added or dropped (by any device): the pages that show the session add the new
        # turn, or show the one sent again in a dropped turn's place (issue 45, the chat page's watch stream).
        self.turns_changed = Bell()

    # -- paths and locks ----------------------------------------------------------

    def path(self, name: str) -> Path:
        if not valid_name(name):
            raise SessionNotFound(name)
        return self.folder / f"{name}{SUFFIX}"

    def lock(self, name: str) -> threading.RLock:
        """The session's lock; hold the returned object for as long as the change lasts."""
        with self._guard:
            lock = self._locks.get(name)
            if lock is None:
                lock = self._locks[name] = threading.RLock()
            return lock

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
        with self._cache_lock:
            cached = self._cache.get(name)
            if cached and cached.mtime == mtime:
                self._cache.move_to_end(name)
                return cached
        play = fountain.loads(path.read_text(encoding="utf-8", errors="replace"))
        session = Session(name, play, mtime)
        self._remember(name, session)
        return session

    def _remember(self, name: str, session: Session) -> None:
        """Cache a parsed session; the least recently used goes beyond ``cache_size``."""
        with self._cache_lock:
            self._cache[name] = session
            self._cache.move_to_end(name)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _forget(self, name: str) -> None:
        with self._cache_lock:
            self._cache.pop(name, None)

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

    # -- turns: the one writer ------------------------------------------------------------
    #
    # Every change to a session's turns goes through these methods. Each holds the
    # session's lock for the whole read-change-write, addresses a turn by its index
    # (never "the last scene"), checks that the turn there is the one the caller means
    # (``expect``: its user text), and writes the file once.  A caller that must check
    # something else first (is a reply running?) holds ``lock(name)`` around both.

    def append_turn(self, name: str, turn: fountain.Turn) -> tuple[Session, int]:
        """Add a turn at the end; returns the new snapshot and the turn's index."""
        with self.lock(name):
            session = self.load(name)
            end = len(session.play.scenes)
            session = self._splice(session, end, end, self._scenes(turn), len(session.turns))
        self.turns_changed.ring(name)
        return session, len(session.turns) - 1

    def _set_superseded(self, session: Session, superseded: bool) -> tuple[int, list[fountain.Scene]]:
        """The last turn's scenes rewritten as (not) superseded, and where they start; nothing to do: (end, []).

        A retry that was answered takes the exchange it replaces out of the history (see
        ``replaced_by``); that turn's heading says so, so the terminal Harvey's --continue leaves it
        out too. Dropping the retry brings it back, in the same write.
        """
        end = len(session.play.scenes)
        last = session.turns[-1] if session.turns else None
        if last is None or last.superseded == superseded or last.scenes is None or last.shared:
            return end, []
        first, stop = last.scenes
        marked = copy.deepcopy(last)
        marked.superseded = superseded
        return first, [*self._scenes(marked), *session.play.scenes[stop + 1:]]

    def replace_turn(self, name: str, index: int, turn: fountain.Turn, expect: str | None) -> Session:
        """Write ``turn`` in place of turn ``index`` (whose user text must be ``expect``).

        A turn with an analysis becomes seed 000's trio (ask, CHUNK ANALYSIS, answer)
        right where the asking turn stands, whatever was said after it.
        """
        with self.lock(name):
            session = self.load(name)
            first, last = self._span(session, index, expect)
            target = replaced_by(session.turns, index) if notes.is_retry(turn.notes) and turn.reply is not None else None
            if target is not None and not session.turns[target].superseded:
                start, stop = session.turns[target].scenes
                marked = copy.deepcopy(session.turns[target])
                marked.superseded = True
                between = session.play.scenes[stop + 1:first]
                written = self._splice(session, start, last + 1,
                                       [*self._scenes(marked), *between, *self._scenes(turn)], None)
            else:
                written = self._splice(session, first, last + 1, self._scenes(turn), index)
            with self._guard:
                if self._unsaved.get(name, (None,))[0] == index:
                    del self._unsaved[name]         # that turn is written now
            return written

    def hold_unsaved(self, name: str, index: int, turn: fountain.Turn) -> None:
        """Keep turn ``index`` of ``name`` in memory: it could not be written (``unsaved``)."""
        with self._guard:
            self._unsaved[name] = (index, turn)

    def unsaved(self, name: str) -> tuple[int, fountain.Turn] | None:
        """The turn of ``name`` that could not be written, with its index (None: nothing is held)."""
        with self._guard:
            return self._unsaved.get(name)

    def update_turn(self, name: str, index: int, change: Callable[[fountain.Turn], None],
                    expect: str | None) -> tuple[Session, fountain.Turn]:
        """Apply ``change`` to a copy of turn ``index`` and write it back; returns the turn as written."""
        with self.lock(name):
            session = self.load(name)
            self._span(session, index, expect)
            turn = copy.deepcopy(session.turns[index])
            change(turn)
            return self.replace_turn(name, index, turn, expect), turn

    def drop_last_turn(self, name: str, index: int, expect: str | None) -> Session:
        """Remove turn ``index``, which must be the last one (a failed turn that is sent again)."""
        with self.lock(name):
            session = self.load(name)
            if index != len(session.turns) - 1:
                raise TurnMoved(f"Turn {index + 1} is no longer the last turn of this session. Reload the page.")
            first, last = self._span(session, index, expect)
            if notes.is_retry(session.turns[index].notes) and index > 0:
                kept = Session(name, fountain.Screenplay(session.play.title_page, session.play.scenes[:first])
                               ).with_turns(session.turns[:index])
                start, before = self._set_superseded(kept, False)
                session = self._splice(session, start, last + 1, before, None)
            else:
                session = self._splice(session, first, last + 1, [], None)
        self.turns_changed.ring(name)
        return session

    def append_scene(self, name: str, scene: fountain.Scene) -> Session:
        """Add a scene that is not a chat turn (an imported or terminal-Harvey scene) at the end."""
        with self.lock(name):
            session = self.load(name)
            end = len(session.play.scenes)
            return self._splice(session, end, end, [scene], None)

    def _span(self, session: Session, index: int, expect: str | None) -> tuple[int, int]:
        """The scenes of turn ``index``, after checking it is the turn the caller means."""
        turns = session.turns
        if not 0 <= index < len(turns) or turns[index].user_text != expect:
            raise TurnMoved(f"Turn {index + 1} of this session is not the one expected: it changed on another "
                            "device. Reload the page.")
        turn = turns[index]
        if turn.scenes is None or turn.shared:
            raise TurnMoved(f"Turn {index + 1} shares its scene with another turn (a file from the terminal "
                            "Harvey); it cannot be rewritten in place.")
        return turn.scenes

    def _scenes(self, turn: fountain.Turn) -> list[fountain.Scene]:
        return fountain.turn_scenes(turn, self.user_name, self.workspace)

    def _splice(self, session: Session, start: int, stop: int, new: list[fountain.Scene],
                turn_index: int | None) -> Session:
        """Write a snapshot with scenes ``start:stop`` replaced by ``new``: one atomic write.

        Only the new scenes are encoded, and when the change is the session's last turn
        (a message, its reply) only that turn is parsed again: a turn's cost does not
        grow with the session (issue 13, problem 11).
        """
        scenes, texts = session.play.scenes, session.texts
        play = fountain.Screenplay(title_page=dict(session.play.title_page),
                                   scenes=[*scenes[:start], *new, *scenes[stop:]])
        new_texts = [*texts[:start], *(fountain.dump_scene(s) for s in new), *texts[stop:]]
        snapshot = self._write(session.name, play, new_texts)
        if turn_index is not None and stop == len(scenes):
            snapshot.with_turns(_turns_with_last(session, turn_index, start, new))
        return snapshot

    def rename(self, name: str, title: str) -> Session:
        """Change the title page's Title (the file name stays)."""
        title = " ".join(title.split())[:120] or "Harvey Session"
        with self.lock(name):
            session = self.load(name)
            play = fountain.Screenplay(title_page={**session.play.title_page, "Title": title},
                                       scenes=session.play.scenes)
            self._write(name, play)
        return self.load(name)

    def _write(self, name: str, play: fountain.Screenplay, texts: list[str] | None = None) -> Session:
        """Atomic write (a crash leaves the old file or the new one); the new snapshot is cached."""
        path = self.path(name)
        texts = texts if texts is not None else [fountain.dump_scene(s) for s in play.scenes]
        atomic_write_text(path, fountain.join_file(play.title_page, texts))
        session = Session(name, play, path.stat().st_mtime_ns, _texts=texts)
        self._remember(name, session)
        self._changed(name)
        return session

    def _changed(self, name: str) -> None:
        """Tell the index (when there is one) that this store rewrote ``name``."""
        index = self._index
        if index is not None:
            index.forget(name)

    # -- turns ---------------------------------------------------------------------------

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
            self._forget(name)
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
            self._forget(name)
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
            self._forget(name)
            self._changed(name)
        return name


def _turns_with_last(old: Session, index: int, start: int, new: list[fountain.Scene]) -> list | None:
    """The turns after turn ``index`` (the last) became ``new`` scenes from scene ``start``, or None.

    None (parse the whole file when asked) whenever reading the new scenes on their own
    could differ from reading the file: they do not make exactly one turn with a user
    line, the turn before carries notes that the reader would hand to the next turn, or
    scenes that belong to no turn stand between them.
    """
    if old.parsed_turns is None:
        return None
    part = fountain.turns(fountain.Screenplay(scenes=new))
    before = old.parsed_turns[:index]
    if len(part) != 1 or part[0].user_text is None or part[0].shared:
        return None
    if before and any(n.startswith("model switch:") for n in before[-1].notes):
        return None
    if before and (before[-1].scenes is None or before[-1].scenes[1] != start - 1):
        return None                    # scenes between the turns (a foreign scene) may belong to the new one
    turn = part[0]
    turn.scenes = (turn.scenes[0] + start, turn.scenes[1] + start)
    return [*before, turn]


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


def replaced_by(turns: list[fountain.Turn], index: int) -> int | None:
    """The turn whose exchange a retry at ``index`` replaces once it is answered, as the app's
    history sees it (``chat.prepare.history_turns``): the last answered turn before it, past
    retries that failed (they replaced nothing); None when something else stands between."""
    for i in range(index - 1, -1, -1):
        turn = turns[i]
        if turn.reply is None and notes.is_retry(turn.notes):
            continue                      # a failed regenerate or edit: the exchange before it still counts
        answered = turn.reply is not None and (turn.user_text or turn.analysis is not None)
        return i if answered and turn.scenes is not None and not turn.shared else None
    return None
