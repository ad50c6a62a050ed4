"""The reader: any Harvey-style file text -> :class:`Screenplay` (scenes and elements), never raising."""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from .codec import _cue_name, _decode_text, _one_line
from .data import Element, Scene, Screenplay

# ------------------------------------------------------------------ reader

_TITLE_KEY = re.compile(r"([A-Za-z][\w \-]*):(.*)")
_HEADING = re.compile(r"(?:\.(?!\.)\S|(?:int|ext|est|i/e)[\s./])", re.IGNORECASE)
_END = re.compile(r">?\s*THE END\.?\s*<?")
_NOTES_ONLY = re.compile(r"\s*(?:\[\[.*?\]\]\s*)+", re.DOTALL)
_NOTE = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)


def loads(text: str) -> Screenplay:
    """Read any Harvey-style file; never raises on odd, foreign or torn input.

    Paragraphs are read one at a time (with one of look-ahead, for the torn tail): the
    file is never held as a list of every line and every paragraph, which made a long
    session's parse slower per megabyte the longer it was (issue 23, item 8).
    """
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    title, start = _read_title_page(text)
    play = Screenplay(title_page=title)
    last: list[str] | None = None
    with collector_paused():
        for m in _BLOCK.finditer(text, start):
            if last is not None:
                _add_block(play, last)
            last = m[0].split("\n")
        if last is not None and (last := _repair_tail(last, torn=not text.endswith("\n"))):
            _add_block(play, last)
    return play


@contextmanager
def collector_paused():
    """Hold Python's cycle collector while a parse builds its objects, then let it run again.

    A parse makes hundreds of thousands of objects that all live on and form no cycles; each
    full collection meanwhile walks every one of them again (and the rest of the heap), which
    was over half the time of reading a 9 MB session (issue 23, item 8).  Nothing is lost: the
    collector resumes at the end.  Threads: only the call that paused it resumes it.
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
            title[key] = _one_line(m[2])
        elif key and line[0].isspace():  # Fountain continues a value on indented lines
            title[key] = _one_line(title[key] + " " + line)
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


def _add_block(play: Screenplay, block: list[str]) -> None:
    """Classify one paragraph and append it to the play."""
    first = block[0].strip()
    if len(block) == 1 and _HEADING.match(first) and not _reply_line(play, first):
        play.scenes.append(Scene(heading=_one_line(first)))
        return
    if len(block) == 1 and (_END.fullmatch(first) or (first == "FADE IN:" and not play.scenes)):
        return
    if not play.scenes:
        play.scenes.append(Scene(heading=""))
    play.scenes[-1].elements += _block_elements(block)


_FULL_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{1,2}:\d{2}(?::\d{2})?\s*$")


def _reply_line(play: Screenplay, line: str) -> bool:
    """A heading-like line inside a TALKING scene that is reply text, not a heading.

    The terminal Harvey writes reply text raw ("INT. THIS LOOKS LIKE A HEADING" alone
    between blank lines) and ends every heading it writes with a time stamp; so does
    this app, except for a turn without a time, whose TALKING or CHUNK heading is kept.
    """
    if not play.scenes or not _TALKING.fullmatch(play.scenes[-1].heading):
        return False
    return not (_FULL_STAMP.search(line) or _TALKING.fullmatch(line) or _CHUNK_HEADING.fullmatch(line))


def _block_elements(block: list[str]) -> list[Element]:
    """The paragraph's elements: its notes, one dialogue, or one action.

    Only a paragraph that may be notes is joined (its last line ends ``]]`` or is blank),
    and the cue is read once: this runs for every paragraph of a long session.
    """
    last = block[-1].rstrip()
    if not last or last.endswith("]]"):
        joined = "\n".join(block).strip()
        if joined.startswith("[[") and joined.endswith("]]") and _NOTES_ONLY.fullmatch(joined):
            return [Element("note", _one_line(m[1])) for m in _NOTE.finditer(joined)]
    cue = _cue_name(block[0]) if len(block) > 1 else None
    if cue is not None:
        paren, lines = "", block[1:]
        head = lines[0].strip()
        if len(head) > 2 and head[0] == "(" and head[-1] == ")":  # our writer escapes such a text line
            paren, lines = _one_line(head[1:-1]), lines[1:]
        return [Element("dialogue", _decode_text(lines), cue, paren)]
    return [Element("action", _decode_text(block))]


# ------------------------------------------------------------ headings

_TALKING = re.compile(r"int\.?\s+harvey and (?P<user>.+?) talking\b(?P<rest>.*)", re.IGNORECASE)
_CHUNK_HEADING = re.compile(r"int\.?\s+chunk analysis\b\s*[—–-]*\s*(?P<rest>.*)", re.IGNORECASE)
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})(?:[ T](\d{1,2}:\d{2}(?::\d{2})?))?\s*$")


def _timestamp(text: str) -> datetime | None:
    """The date/time at the end of a heading, with or without seconds.

    Built from the digits, not with ``strptime``: that was half the time of reading a
    long session's turns (one call per heading), and it accepts exactly these shapes.
    """
    m = _TIMESTAMP.search(text)
    if not m:
        return None
    year, month, day = m[1].split("-")
    clock = (m[2] or "00:00").split(":")
    try:
        return datetime(int(year), int(month), int(day), *(int(part) for part in clock))
    except ValueError:
        return None
