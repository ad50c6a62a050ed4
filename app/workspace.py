"""The workspace: the one folder whose files the user may ask about.

Every name the user gives is confined here: absolute paths, ``..`` and symlinks
that lead outside are refused before anything is opened. Files are found by a
relative path or by a file name that is unique in the workspace.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import Refused

MAX_INDEXED_FILES = 5000
# Words in a message that may name a file: something.ext or a/relative/path.
MENTION_RE = re.compile(r"""(?<![\w@])((?:[\w.\-~]+/)*[\w\-~][\w.\-~]*\.[A-Za-z0-9]{1,8})(?![\w/])""")


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
        """Files named in a message, in order; and refusals in plain words.

        A word counts when it is a path to a file here, or the name of exactly
        one file here. A path that leads outside is refused, not ignored.
        """
        found: list[WorkspaceFile] = []
        problems: list[str] = []
        by_name: dict[str, list[WorkspaceFile]] | None = None
        for word in _candidate_words(text):
            try:
                match = self.resolve(word)
            except OutsideWorkspace as exc:
                problems.append(str(exc))
                continue
            except WorkspaceError:
                if "/" in word:
                    continue
                if by_name is None:
                    by_name = {}
                    for f in self.files():
                        by_name.setdefault(Path(f.name).name, []).append(f)
                matches = by_name.get(word, [])
                if len(matches) > 1:
                    problems.append(f"'{word}' matches {len(matches)} files; name it by its path: "
                                    + ", ".join(m.name for m in matches[:5]))
                    continue
                if not matches:
                    close = difflib.get_close_matches(word, list(by_name), n=1, cutoff=0.75)
                    if close:                      # a misspelt name is said, not ignored (issue 16)
                        problems.append(f"There is no file named {word}; did you mean {close[0]}?")
                    continue
                match = matches[0]
            if match not in found:
                found.append(match)
        return found, problems


def _candidate_words(text: str) -> list[str]:
    """Words that look like file names or paths, plus absolute/'..' paths to refuse."""
    words = [m.group(1) for m in MENTION_RE.finditer(text)]
    for raw in text.split():
        word = raw.strip("\"'`()[]{}<>,;:!?")
        if word.startswith(("/", "~/", "../")) or "/../" in word:
            word = word.rstrip(".")
            if word not in words and len(word) > 1:
                words.append(word)
    return words


def safe_filename(filename: str) -> str:
    """A plain file name: no folders, no leading dots, only safe characters."""
    name = Path((filename or "").replace("\\", "/")).name
    name = re.sub(r"[^\w.\-]+", "_", name).lstrip(".")
    if not name or name in ("_",):
        raise WorkspaceError("The upload has no usable file name.")
    return name[:120]
