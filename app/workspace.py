"""The workspace: the one folder whose files the user may ask about.

Every name the user gives is confined here: absolute paths, ``..`` and symlinks
that lead outside are refused before anything is opened. Files are found by a
relative path or by a file name that is unique in the workspace.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import filenames
from .errors import Refused

MAX_INDEXED_FILES = 5000


class WorkspaceError(Refused):
    """A file the user named cannot be used; the message says why."""


class OutsideWorkspace(WorkspaceError):
    """The name points outside the workspace."""


class NotAFile(WorkspaceError):
    """Missing, a folder, or otherwise not a regular file."""


@dataclass(frozen=True)
class WorkspaceFile:
    path: Path          # resolved, inside the workspace
    name: str           # relative to the workspace, with '/'
    size: int           # bytes, from stat


class Workspace:
    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    def resolve(self, name: str) -> WorkspaceFile:
        """The file ``name`` names, or a WorkspaceError saying why not."""
        name = (name or "").strip()
        if not name or "\x00" in name:
            raise NotAFile("No file name was given.")
        if os.path.isabs(name) or name.startswith("~"):
            raise OutsideWorkspace(f"'{name}' is outside the workspace: name files relative to it.")
        if ".." in Path(name).parts:
            raise OutsideWorkspace(f"'{name}' leads outside the workspace ('..' is not allowed).")
        path = (self.root / name).resolve()
        if not path.is_relative_to(self.root):
            raise OutsideWorkspace(f"'{name}' leads outside the workspace (through a link).")
        if not path.is_file():
            raise NotAFile(f"There is no file '{name}' in the workspace.")
        return WorkspaceFile(path, path.relative_to(self.root).as_posix(), path.stat().st_size)

    def files(self) -> list[WorkspaceFile]:
        """Every regular file in the workspace (hidden ones skipped), sorted."""
        found: list[WorkspaceFile] = []
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if name.startswith("."):
                    continue
                try:
                    found.append(self.resolve(os.path.relpath(os.path.join(folder, name), self.root)))
                except WorkspaceError:
                    continue  # a link to outside is not offered
                if len(found) >= MAX_INDEXED_FILES:
                    return found
        return found

    def names(self) -> filenames.NameIndex:
        """The workspace's file names (``filenames.NameIndex``), walked once and kept while no folder
        in it changes (``NAMES``): a message looks its words up here instead of walking the folder."""
        return NAMES.get(self.root)

    def named(self, text: str) -> "Named":
        """What a message names (issue 41): the files found, in order; the names it asks about that
        cannot be read (``missing``: not here, or outside the workspace); the names it gives in
        passing that are not here (``unread``: a quiet note, nothing stops); and names that match
        several files (``problems``).  Which words count is ``filenames.mentions``'s guess."""
        index = self.names()
        named = Named()
        for m in filenames.mentions(text, index):
            if m.role != "other":
                self._name_one(named, m, index)
        return named

    def _name_one(self, named: "Named", m: filenames.Mention, index: filenames.NameIndex) -> None:
        """Add what one mention names to ``named``: a file, a name that cannot be read, or nothing."""
        if m.form == "outside":
            self._outside(named, m)
            return
        if m.form == "bare":
            paths = filenames.resolve_bare(m.word, index)
        else:
            paths = self._paths(m.word, index)
        if len(paths) > 1:
            named.problem(m.word, f"'{m.word}' matches {len(paths)} files; name it by its path: "
                                  + ", ".join(paths[:5]))
            return
        if not paths and m.form != "bare":
            paths = [m.word]           # not in the names yet (a file made since): one look on disk
        if paths:
            try:
                named.add(self.resolve(paths[0]))
                return
            except OutsideWorkspace:
                named.unread_name(m.word, "outside")
                return
            except WorkspaceError:
                pass
        if m.form == "bare":
            bare = [b for b in index.by_base if "." not in b]
            close = filenames.near_match(m.word, bare) if bare else ""
        else:
            close = index.near(m.word)
        if m.role == "asked":
            named.ask_missing(filenames.Missing(m.word, close if close != m.word else ""))
        elif close or m.form == "bare" or filenames.looks_like_file(m.word):
            named.unread_name(m.word, "missing", close)

    def _paths(self, word: str, index: filenames.NameIndex) -> list[str]:
        """The workspace paths a name with an extension or a relative path names: the path itself, or
        the files of that base name (a bare ``notes.md`` names ``docs/notes.md`` when it is the only one)."""
        clean = word[2:] if word.startswith("./") else word
        if clean in index.paths:
            return [clean]
        if "/" not in clean:
            return list(index.by_base.get(clean, []))
        if not index.complete or ".." in clean.split("/"):
            try:
                return [self.resolve(clean).name]
            except WorkspaceError:
                return []
        return []

    def _outside(self, named: "Named", m: filenames.Mention) -> None:
        """A path that begins at /, ~ or ..: the file when it still lies inside the workspace (the full
        path of one of its files), else a name outside it, refused in those words (never read)."""
        raw = m.word
        path = Path(os.path.expanduser(raw)) if raw.startswith("~") else Path(raw)
        try:
            real = (path if path.is_absolute() else self.root / path).resolve()
        except (OSError, RuntimeError):
            real = None
        if real is not None and real.is_relative_to(self.root) and real.is_file():
            try:
                named.add(self.resolve(real.relative_to(self.root).as_posix()))
                return
            except WorkspaceError:
                pass
        if m.role == "asked":
            named.ask_missing(filenames.Missing(raw, outside=True))
        elif filenames.looks_like_file(raw):
            named.unread_name(raw, "outside")


class NameCache:
    """Each workspace's ``NameIndex``, kept while the mtime of every folder in it is unchanged (a file
    added, removed or renamed changes its folder's): checking costs one stat per folder, not a walk.
    A folder changed within ``RACY_S`` of the walk may change again with the same coarse mtime (git's
    "racy" case), so that walk is not trusted: the next message walks again.  Bounded to a few
    workspaces (a test run makes many)."""

    KEEP = 4
    RACY_S = 2.0

    def __init__(self):
        self._lock = threading.Lock()
        self._kept: dict[Path, _Walk] = {}

    def get(self, root: Path) -> filenames.NameIndex:
        with self._lock:
            kept = self._kept.get(root)
        if kept is not None and kept.unchanged(self.RACY_S):
            return kept.index
        walk = _Walk.of(root)
        with self._lock:
            self._kept.pop(root, None)
            self._kept[root] = walk
            while len(self._kept) > self.KEEP:
                self._kept.pop(next(iter(self._kept)))
        return walk.index


@dataclass(frozen=True)
class _Walk:
    """One walk of a workspace: its names, each folder's mtime as read, and when it began."""

    index: filenames.NameIndex
    folders: dict[str, int]
    began: int                   # time.time_ns()

    def unchanged(self, racy_s: float) -> bool:
        """Every folder as it was walked, and none changed just before the walk."""
        try:
            return all(os.stat(folder).st_mtime_ns == mtime and self.began - mtime > racy_s * 1e9
                       for folder, mtime in self.folders.items())
        except OSError:
            return False

    @classmethod
    def of(cls, root: Path) -> "_Walk":
        """Every file's path relative to ``root`` (hidden ones and links that lead outside skipped, at
        most ``MAX_INDEXED_FILES``), and each folder's mtime as it was read."""
        began = time.time_ns()
        folders: dict[str, int] = {}
        paths: list[str] = []
        complete = True
        pending = [root]
        while pending and complete:
            folder = pending.pop()
            try:
                folders[str(folder)] = os.stat(folder).st_mtime_ns
                with os.scandir(folder) as entries:
                    listed = sorted(entries, key=lambda e: e.name)
            except OSError:
                continue
            for entry in listed:
                if entry.name.startswith(".") or not _listed_file(entry, root, pending):
                    continue
                paths.append(os.path.relpath(entry.path, root).replace(os.sep, "/"))
                if len(paths) >= MAX_INDEXED_FILES:
                    complete = False
                    break
        return cls(filenames.NameIndex.of(paths, complete), folders, began)


def _listed_file(entry: os.DirEntry, root: Path, pending: list[Path]) -> bool:
    """Is this entry a file the user may name (a folder is queued for the walk instead)?"""
    try:
        if entry.is_symlink():
            real = Path(entry.path).resolve()
            return real.is_relative_to(root) and real.is_file()
        if entry.is_dir():
            pending.append(Path(entry.path))
            return False
        return entry.is_file()
    except OSError:
        return False


NAMES = NameCache()


@dataclass
class Named:
    """What a message names: the files found; names asked about that cannot be read (``missing``:
    the message stops); names given in passing that are not here (``unread``: one quiet note); names
    that match several files (``problems``)."""

    found: list[WorkspaceFile] = field(default_factory=list)
    missing: list[filenames.Missing] = field(default_factory=list)
    unread: list[tuple[str, str, str]] = field(default_factory=list)     # (name, "missing" | "outside", near)
    problems: list[str] = field(default_factory=list)
    _said: set[str] = field(default_factory=set, repr=False)

    def add(self, found: WorkspaceFile) -> None:
        if found not in self.found:
            self.found.append(found)

    def _new(self, name: str) -> bool:
        """Each name is said once, whatever words it was found by (``/x/a.md`` is not also ``x/a.md``)."""
        key = name.strip("/").removeprefix("~/").removeprefix("./")
        if key in self._said:
            return False
        self._said.add(key)
        return True

    def ask_missing(self, missing: filenames.Missing) -> None:
        if self._new(missing.name):
            self.missing.append(missing)

    def unread_name(self, name: str, why: str, near: str = "") -> None:
        if self._new(name):
            self.unread.append((name, why, near))

    def problem(self, name: str, text: str) -> None:
        if self._new(name):
            self.problems.append(text)

    def notice(self, sent_without: list[filenames.Missing] = ()) -> str:
        """The one line under the turn that says what was not read ("" when everything named was):
        "No workspace file named report.docx; nothing was read"."""
        missing = [(m.name, m.suggestion) for m in sent_without if not m.outside]
        missing += [(name, near) for name, why, near in self.unread if why == "missing"]
        outside = [m.name for m in sent_without if m.outside] + [n for n, why, _ in self.unread if why == "outside"]
        said = []
        if missing:
            said.append("no workspace file named " + ", ".join(
                name + (f" (did you mean {near}?)" if near else "") for name, near in missing))
        if outside:
            said.append(f"{', '.join(outside)} {'is' if len(outside) == 1 else 'are'} outside the workspace")
        line = ""
        if said:
            line = "; ".join(said) + "; nothing was read"
            line = line[0].upper() + line[1:] + (": sent without it, the model told it could not be read."
                                                  if sent_without else ".")
        return " ".join([line, *self.problems]).strip()


MAX_NAME_CHARS = 80      # an upload's stored name: readable on a phone, nameable in a message


def safe_filename(filename: str) -> str:
    """A plain file name: no folders, no leading dots, only safe characters, at most
    ``MAX_NAME_CHARS`` long with its extension kept (issue 33: a name cut at 120 characters
    lost its extension and could not be named afterwards)."""
    name = Path((filename or "").replace("\\", "/")).name
    name = re.sub(r"[^\w.\-]+", "_", name).lstrip(".")
    if not name or name in ("_",):
        raise WorkspaceError("The upload has no usable file name.")
    return shortened(name)


def shortened(name: str, limit: int = MAX_NAME_CHARS) -> str:
    """``name`` within ``limit`` characters, its extension (``.md``, ``.tar.gz``) kept whole."""
    if len(name) <= limit:
        return name
    ext = re.search(r"(?:\.[A-Za-z0-9]{1,10}){1,2}$", name)
    suffix = ext.group(0) if ext and ext.start() > 0 else ""
    if len(suffix) > limit // 2:
        suffix = suffix[-(limit // 2):]
    stem = name[:len(name) - len(suffix)]
    room = limit - len(suffix) - len(ELIDED)
    # the start and the end of the name, each cut where a word ends (issue 45: "…approved_by_the.txt" lost
    # the end, where a date or a version usually is, and ended mid-phrase)
    head = _words(stem[:room - room // 3], from_end=False)
    tail = _words(stem[len(stem) - room // 3:], from_end=True)
    if not head:
        return (stem[:limit - len(suffix)].rstrip("._-") or "file") + suffix
    return head + ELIDED + tail + suffix if tail else head + suffix


ELIDED = "--"     # where a long name's middle was left out (only name-safe characters)


def _words(part: str, from_end: bool) -> str:
    """``part`` cut back to whole words (at ``_``, ``-``, ``.`` or a space turned ``_``): its start's when
    ``from_end`` is False, its end's when True."""
    if from_end:
        cut = re.search(r"[._-]", part)
        part = part[cut.end():].strip("._-") if cut else part
        return _SMALL_AT_START.sub("", part) or part
    cut = max(part.rfind(c) for c in "._-")
    part = (part[:cut] if cut > 0 else part).strip("._-")
    return _SMALL_AT_END.sub("", part) or part


# small words a cut leaves dangling ("…meeting_of_the", "by_the_board…"): dropped at the cut
_SMALL = r"(?:a|an|and|at|by|for|in|of|on|or|the|to|with)"
_SMALL_AT_END = re.compile(rf"(?:[_-]{_SMALL})+$", re.I)
_SMALL_AT_START = re.compile(rf"^(?:{_SMALL}[_-])+", re.I)
