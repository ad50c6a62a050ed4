"""The reader: any Harvey-style file text -> :class:`Screenplay` (scenes and elements), never raising."""

from __future__ import annotations

import re
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
    """Read any Harvey-style file; never raises on odd, foreign or torn input."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    title, start = _read_title_page(lines)
    play = Screenplay(title_page=title)
    blocks = list(_blocks(lines, start))
    if blocks:
        _repair_tail(blocks, torn=not text.endswith("\n"))
    for block in blocks:
        _add_block(play, block)
    return play


def read_file(path: str | Path) -> Screenplay:
    """Read a session file; bytes torn mid-character by a crash become U+FFFD."""
    return loads(Path(path).read_bytes().decode("utf-8", errors="replace"))


def _read_title_page(lines: list[str]) -> tuple[dict[str, str], int]:
    """Title page keys up to the first blank line, and where the body starts."""
    title: dict[str, str] = {}
    first = lines[0].strip() if lines else ""
    if not _TITLE_KEY.fullmatch(first) or first.upper() == "FADE IN:" or _HEADING.match(first):
        return title, 0
    key = ""
    for i, line in enumerate(lines):
        if not line.strip():
            return title, i
        m = _TITLE_KEY.fullmatch(line)
        if m and not line[0].isspace():
            key = m[1].strip()
            title[key] = _one_line(m[2])
        elif key and line[0].isspace():  # Fountain continues a value on indented lines
            title[key] = _one_line(title[key] + " " + line)
    return title, len(lines)


def _blocks(lines: list[str], start: int):
    """Paragraphs between empty lines; a two-space line does not end one."""
    block: list[str] = []
    for line in lines[start:]:
        if line:
            block.append(line)
        elif block:
            yield block
            block = []
    if block:
        yield block


def _repair_tail(blocks: list[list[str]], torn: bool) -> None:
    """Undo what a crash while appending leaves behind, in place.

    Both writers end every write with a newline, so a file without one has a
    torn last line.  Half a dialogue line is still the message, so it stays;
    half an action (a stats or state line) means nothing and goes.  A cue
    whose text never arrived and a note never closed go too.
    """
    last = blocks[-1]
    if len(last) == 1 and _END.fullmatch(last[0].strip()):
        return
    if torn and not _is_dialogue_block(last):
        last.pop()
    lone_cue = len(last) == 1 and _cue_name(last[0]) is not None
    open_note = bool(last) and last[0].lstrip().startswith("[[") and "]]" not in "\n".join(last)
    if not last or lone_cue or open_note:
        blocks.pop()


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
    joined = "\n".join(block).strip()
    if joined.startswith("[[") and joined.endswith("]]") and _NOTES_ONLY.fullmatch(joined):
        return [Element("note", _one_line(m[1])) for m in _NOTE.finditer(joined)]
    if _is_dialogue_block(block):
        cue, paren, lines = _cue_name(block[0]) or "", "", block[1:]
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
    """The date/time at the end of a heading, with or without seconds."""
    m = _TIMESTAMP.search(text)
    if not m:
        return None
    clock = m[2] or "00:00"
    fmt = "%Y-%m-%d %H:%M:%S" if clock.count(":") == 2 else "%Y-%m-%d %H:%M"
    try:
        return datetime.strptime(f"{m[1]} {clock}", fmt)
    except ValueError:
        return None
