"""The workspace: the one folder whose files the user may ask about.

Every name the user gives is confined here: absolute paths, ``..`` and symlinks
that lead outside are refused before anything is opened. Files are found by a
relative path or by a file name that is unique in the workspace.
"""

from __future__ import annotations

import os
import re
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

    def mentions(self, text: str) -> tuple[list[WorkspaceFile], list[str]]:
        """Files named in a message, in order; and refusals in plain words (see ``named``)."""
        named = self.named(text)
        return named.found, named.problems

    def named(self, text: str) -> "Named":
        """Files named in a message, in order; refusals in plain words; names that are not here.

        A word counts when it is a path to a file here, or the name of exactly one file
        here (``filenames``: quoted names with spaces, extensionless names such as
        ``Makefile``).  A path that leads outside is refused, not ignored; a name that
        looks like a file and is not here is ``missing``, with its near match if any.
        """
        named = Named()
        by_name: dict[str, list[WorkspaceFile]] | None = None

        def index() -> dict[str, list[WorkspaceFile]]:
            nonlocal by_name
            if by_name is None:
                by_name = {}
                for f in self.files():
                    by_name.setdefault(Path(f.name).name, []).append(f)
            return by_name

        words = filenames.candidates(text)
        if re.search(r"[A-Z0-9_\-]", text):       # an extensionless name (Makefile) is worth a look
            extensionless = self._extensionless()
            seen = {c.word for c in words}
            words += [filenames.Candidate(w) for w in filenames.bare_names(text, extensionless) if w not in seen]
        for candidate in words:
            self._name_one(named, candidate.word, index, candidate.parts)
        return named

    def _extensionless(self) -> set[str]:
        """The workspace's own extensionless files (``Makefile``, ``LICENSE``): one read of its top
        folder, not a walk of every file for every message (a file further down is named by a path)."""
        try:
            with os.scandir(self.root) as entries:
                return {e.name for e in entries if "." not in e.name and e.is_file()}
        except OSError:
            return set()

    def _name_one(self, named: "Named", word: str, index, parts: tuple[str, ...] = ()) -> None:
        """Add what one word names to ``named``: a file, a refusal, a missing name, or nothing."""
        try:
            match = self.resolve(word)
        except OutsideWorkspace as exc:
            named.problems.append(str(exc))
            return
        except WorkspaceError:
            matches = [] if "/" in word else index().get(word, [])
            if len(matches) > 1:
                named.problems.append(f"'{word}' matches {len(matches)} files; name it by its path: "
                                      + ", ".join(m.name for m in matches[:5]))
                return
            if not matches:
                inside = Named()
                for part in parts:           # a quoted phrase that is no file: the file names inside it
                    self._name_one(inside, part, index)
                if inside.found or inside.problems:
                    named.merge(inside)
                    return
                close = ""
                if "." in word or "/" in word:
                    names = [f.name for fs in index().values() for f in fs] if "/" in word else list(index())
                    close = filenames.near_match(word, names)
                if parts and not close:
                    named.merge(inside)
                    return
                if close or filenames.looks_like_file(word):     # never sent as if it were there
                    if all(m.name != word for m in named.missing):
                        named.missing.append(filenames.Missing(word, close))
                return
            match = matches[0]
        if match not in named.found:
            named.found.append(match)


@dataclass
class Named:
    """What a message names: the files found, refusals, and names that are not in the workspace."""

    found: list[WorkspaceFile] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    missing: list[filenames.Missing] = field(default_factory=list)

    def merge(self, other: "Named") -> None:
        self.found += [f for f in other.found if f not in self.found]
        self.problems += other.problems
        self.missing += [m for m in other.missing if m not in self.missing]


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
    stem = name[:len(name) - len(suffix)][:limit - len(suffix)].rstrip("._-") or "file"
    return stem + suffix
