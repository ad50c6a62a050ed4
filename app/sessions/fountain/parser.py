"""The reader: any Harvey-style file text -> :class:`Screenplay` (scenes and elements), never raising."""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from .codec import _cue_name, _decode_joined, metadata_line
from .data import Element, Scene, Screenplay

# ------------------------------------------------------------------ reader

_TITLE_KEY = re.compile(r"([A-Za-z][\w \-]*):(.*)")
_HEADING = re.compile(r"(?:\.(?!\.)\S|(?:int|ext|est|i/e)[\s./])", re.IGNORECASE)
_END = re.compile(r">?\s*THE END\.?\s*<?")
_NOTES_ONLY = re.compile(r"\s*(?:\[\[.*?\]\]\s*)+", re.DOTALL)
_NOTE = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)


def loads(text: str) -> Screenplay:
    """Read any Harvey-style file; never raises on odd, foreign or torn input.

    Paragraphs are read one at a time (with one of look-ahead, for the torn tail) and each is
    classified from its own text: no list of every line, no re-join of a paragraph's lines, no
    lookup of the scene it goes to.  The cost per paragraph does not depend on the file's length
    (issue 23, item 8: 1 MB and 9.6 MB parse at the same MB/s).
    """
    text = text.removeprefix("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    title, start = _read_title_page(text)
    reader = _Reader(Screenplay(title_page=title))
    last: str | None = None
    with collector_paused():
        for m in _BLOCK.finditer(text, start):
            if last is not None:
                reader.block(last)
            last = m[0]
        if last is not None and (lines := _repair_tail(last.split("\n"), torn=not text.endswith("\n"))):
            reader.block("\n".join(lines))
    return reader.play


@contextmanager
def collector_paused():
    """Hold Python's cycle collector while a parse builds its objects, then let it run again.

    A parse makes hundreds of thousands of objects that all live on and form no cycles; each
    full collection meanwhile walks every one of them again (and the rest of the heap).  Kept
    after the reader was made linear (issue 23, item 8) because it still pays: a 9.6 MB session's
    first parse in a fresh process took 1.9-2.4 s of CPU paused and 2.6-2.8 s not (six full
    collections instead of two), and 2.5-3.0 s against 3.3-3.7 s counting the collections that
    follow once it is over (the collector's first passes over the new objects come after the parse
    either way).  The objects it makes hold no cycle to collect.  It is
    process-wide, so it is held only for the parse itself, never across I/O, and nothing is
    lost: the collector resumes at the end.  Threads: only the call that paused it resumes it
    (a parse that starts while another holds it runs unpaused once that one ends).
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def read_file(path: str | Path) -> Screenplay:
    """Read a session file; bytes torn mid-character by a crash become U+FFFD."""
    return loads(Path(path).read_bytes().decode("utf-8", errors="replace"))


# A paragraph: lines that are not empty, between empty lines (a two-space line does not end one).
_BLOCK = re.compile(r"[^\n]+(?:\n[^\n]+)*")


def _lines(text: str):
    """(offset, line) for each line of ``text``, lazily: the title page reads only its own lines."""
    pos = 0
    while True:
        end = text.find("\n", pos)
        if end < 0:
            yield pos, text[pos:]
            return
        yield pos, text[pos:end]
        pos = end + 1


def _read_title_page(text: str) -> tuple[dict[str, str], int]:
    """Title page keys up to the first blank line, and the offset where the body starts."""
    title: dict[str, str] = {}
    first = text[:text.find("\n") % (len(text) + 1)].strip()
    if not _TITLE_KEY.fullmatch(first) or first.upper() == "FADE IN:" or _HEADING.match(first):
        return title, 0
    key = ""
    for offset, line in _lines(text):
        if not line.strip():
            return title, offset
        m = _TITLE_KEY.fullmatch(line)
        if m and not line[0].isspace():
            key = m[1].strip()
            title[key] = metadata_line(m[2])
        elif key and line[0].isspace():  # Fountain continues a value on indented lines
            title[key] = metadata_line(title[key] + " " + line)
    return title, len(text)


def _repair_tail(last: list[str], torn: bool) -> list[str] | None:
    """The file's last paragraph without what a crash while appending leaves behind (None: nothing).

    Both writers end every write with a newline, so a file without one has a
    torn last line.  Half a dialogue line is still the message, so it stays;
    half an action (a stats or state line) means nothing and goes.  A cue
    whose text never arrived and a note never closed go too.
    """
    if len(last) == 1 and _END.fullmatch(last[0].strip()):
        return last
    if torn and not _is_dialogue_block(last):
        last.pop()
    lone_cue = len(last) == 1 and _cue_name(last[0]) is not None
    open_note = bool(last) and last[0].lstrip().startswith("[[") and "]]" not in "\n".join(last)
    return None if not last or lone_cue or open_note else last


def _is_dialogue_block(block: list[str]) -> bool:
    return len(block) > 1 and _cue_name(block[0]) is not None


class _Reader:
    """Appends paragraphs to a play, keeping the current scene's element list and whether that
    scene is a TALKING one, so no paragraph looks either up again."""

    __slots__ = ("play", "elements", "talking")

    def __init__(self, play: Screenplay) -> None:
        self.play = play
        self.elements: list[Element] | None = None     # the last scene's; None before the first scene
        self.talking = False

    def block(self, block: str) -> None:
        """Classify one paragraph (its lines joined by "\\n") and append it to the play."""
        nl = block.find("\n")
        if nl < 0:
            first = block.strip()
            if _HEADING.match(first) and not (self.talking and _reply_text(first)):
                self._scene(metadata_line(first))
                return
            if _END.fullmatch(first) or (first == "FADE IN:" and self.elements is None):
                return
        if self.elements is None:
            self._scene("")
        _append_elements(self.elements, block, nl)

    def _scene(self, heading: str) -> None:
        scene = Scene(heading)
        self.play.scenes.append(scene)
        self.elements, self.talking = scene.elements, bool(heading) and bool(_TALKING.fullmatch(heading))


# A full time stamp ends the heading, or is followed by more text after a space (the terminal
# Harvey's design documents annotate headings: "INT. SHELL 2026-06-24 10:03:15   <- a note").
_FULL_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{1,2}:\d{2}(?::\d{2})?(?:\s.*)?$")


def _reply_text(line: str) -> bool:
    """A heading-like line inside a TALKING scene that is reply text, not a heading.

    The terminal Harvey writes reply text raw ("INT. THIS LOOKS LIKE A HEADING" alone
    between blank lines) and ends every heading it writes with a time stamp; so does
    this app, except for a turn without a time, whose TALKING or CHUNK heading is kept.
    """
    return not (_FULL_STAMP.search(line) or _TALKING.fullmatch(line) or _CHUNK_HEADING.fullmatch(line))


def _append_elements(elements: list[Element], block: str, nl: int) -> None:
    """The paragraph's elements: its notes, one dialogue, or one action (``nl``: its first line break).

    Only a paragraph that may be notes is looked at whole (it ends ``]]`` or in whitespace: a
    superset of "its last line, stripped, is empty or ends ``]]``", and the test below is exact),
    and a dialogue's text is sliced from the paragraph, not split and joined again.
    """
    if block.endswith("]]") or block[-1].isspace():
        whole = block.strip()
        if whole.startswith("[[") and whole.endswith("]]") and _NOTES_ONLY.fullmatch(whole):
            elements.extend(Element("note", metadata_line(m[1])) for m in _NOTE.finditer(whole))
            return
    cue = _cue_name(block[:nl]) if nl >= 0 else None
    if cue is None:
        elements.append(Element("action", _decode_joined(block)))
        return
    text, paren = block[nl + 1:], ""
    if text[0] == "(" or text[0].isspace():                   # may be a parenthetical line
        end = text.find("\n")
        head = (text if end < 0 else text[:end]).strip()
        if len(head) > 2 and head[0] == "(" and head[-1] == ")":  # our writer escapes such a text line
            paren, text = metadata_line(head[1:-1]), ("" if end < 0 else text[end + 1:])
    elements.append(Element("dialogue", _decode_joined(text), cue, paren))


# ------------------------------------------------------------ headings

_TALKING = re.compile(r"int\.?\s+harvey and (?P<user>.+?) talking\b(?P<rest>.*)", re.IGNORECASE)
_CHUNK_HEADING = re.compile(r"int\.?\s+chunk analysis\b\s*[—–-]*\s*(?P<rest>.*)", re.IGNORECASE)
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})(?:[ T](\d{1,2}:\d{2}(?::\d{2})?))?\s*$")
_ANNOTATED_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{1,2}:\d{2}(?::\d{2})?)(?=\s)")
_WRITTEN_STAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}")


def _timestamp(text: str) -> datetime | None:
    """The date/time at the end of a heading, with or without seconds.

    Built from the digits, not with ``strptime``: that was half the time of reading a
    long session's turns (one call per heading), and it accepts exactly these shapes.
    A heading that ends in the written shape ``YYYY-MM-DD HH:MM:SS`` is read from its
    last 19 characters: the search finds that same match (none can start earlier), but
    tries every position of the heading first.
    """
    tail = text[-19:]
    if len(tail) == 19 and _WRITTEN_STAMP.fullmatch(tail):   # the shape both writers use: no search
        try:
            return datetime.fromisoformat(tail)             # in C; the same ranges as datetime()
        except ValueError:
            return None
    m = _TIMESTAMP.search(text) or _ANNOTATED_STAMP.search(text)
    if not m:
        return None
    year, month, day = m[1].split("-")
    clock = (m[2] or "00:00").split(":")
    try:
        return datetime(int(year), int(month), int(day), *(int(part) for part in clock))
    except ValueError:
        return None
