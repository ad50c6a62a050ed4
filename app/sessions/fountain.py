r"""Harvey session files (``.spmd``): Fountain screenplay text <-> data.

Every chat session is a Fountain screenplay laid out exactly as the terminal
Harvey (rsdoiel/harvey, ``recorder.go``) writes it, so a session can move
between the two programs and screenplay tools can open it.  This module is
pure text <-> data; the ``sessions`` module does the (atomic) file writes.

The file
========
::

    Title: Harvey Session                  <- title page: "Key: value", in order,
    Credit: Recorded by Harvey                no blank lines between keys
    Author: RSDOIEL
    Date: 2026-06-27 10:04:00
    Draft date: 2026-06-27
    Model: LLAMA3.1 (ollama)
    Backend: ollama
                                           <- two blank lines
    FADE IN:
                                           <- (two blank lines before every heading)
    INT. HARVEY AND RSDOIEL TALKING 2026-06-27 10:04:00

    Harvey and RSDOIEL are in chat mode. Model: LLAMA3.1. Workspace: /home/pi.

    RSDOIEL                                <- the user's message
    What is 2+2?

    HARVEY
    Forwarding to LLAMA3.1.

    @LLAMA3.1                              <- the reply; "@" forces a cue that a
    4                                         tool would not take as one by itself

    ollama (llama3.1:8b) · 312 reply + 1840 ctx · 18.437s · 16.9 tok/s

    >THE END.<

Every element is followed by one blank line.  Notes ``[[...]]`` record events
without content: ``[[model switch: NAME (BACKEND) at TS]]`` is written before
the user's message of the first turn on the new model (Harvey writes it after
the last turn on the old one; the reader accepts both), other notes (how a
reply was stopped or failed) after the reply.  The file ends with centred
``>THE END.<`` (see ``END_MARKER``).  A chunk analysis (design seed 000) is its
own scene, ``INT. CHUNK ANALYSIS — FILE TS``, between the TALKING scene where
HARVEY reported the overflow and a TALKING scene with no user line that
carries the synthesized answer.  A message several models answered (the
terminal Harvey's multi-model scene) is one scene: the user's line, then each
model's ``Forwarding to`` line and reply.

The reader (:func:`loads`) also takes what the terminal Harvey writes: plain
``THE END.``, ``TALKING — TS`` headings (seconds optional), a bare
``Model: X`` action, no ``Forwarding to`` line, several exchanges in one
scene, several models answering one message, HARVEY answering as the local
model, replies (and messages, chunk replies) cut into paragraphs at their
blank lines (:func:`turns` joins them again), its recorder's CHUNK ANALYSIS
scene (no instruction; ``{MODEL}`` ``(chunk i/N)`` and ``(synthesis)`` replies,
written before the turn that named the file), CRLF line ends, a BOM, and a
file torn by a crash (no end marker, a half-written last line, a cue whose
text never came).  Scenes it does not know (EXT route scenes, AGENT MODE,
SHELL, SKILL, CONTEXT RECALL ...) are kept as scenes.

Escaping of dialogue and action text
====================================
Fountain gives meaning to line shapes, so raw text changes meaning when read
back (a blank line ends a dialogue, ``# x`` is a section, ``/*`` hides the
rest of the file).  Text is written line by line and only lines that need it
change, so ordinary replies stay readable and screenplay tools still show them
as the character's dialogue:

1. An empty line inside a text is written as a line holding one zero width
   space (U+200B, ``BLANK_LINE``).  No parser (Python, Go, JavaScript) takes
   it for whitespace, so every Fountain tool keeps the dialogue going across
   the paragraph break, and the terminal Harvey's Fountain library, for which
   a line of two spaces (Fountain's own way, which older files of ours use and
   the reader still takes) is an empty line, never sees one inside a reply:
   after an empty line it reads any line without lowercase letters (````` ``` `````,
   ``| A | B |``, ``42``) as a cue whose next line replaces the reply.  An
   empty *first* line is written as a lone ``\`` instead: a cue followed by a
   blank-looking line is no cue.
2. A line a Fountain parser could take as structure gets one leading ``\``:
   its stripped form is empty or ``BLANK_LINE``, starts with ``! @ # ~ = >`` or
   with ``.`` (not ``..``), starts with ``(`` and holds a ``)`` (the terminal
   Harvey's parenthetical, after which it reads the next line as the reply),
   is ``*/``, reads ``THE END``/``LA FIN``/``FADE IN:`` in any case (where
   the terminal Harvey stops reading the file), or starts like an uppercase
   scene heading (``INT``/``EXT``/``EST``/``I/E`` + ``.``, space or ``/``).
   The *first* line of a text also gets it when it looks like a cue or a
   transition (letters, none lowercase: ``WARNING``, ``CUT TO:``) or like a
   scene heading in any case (``int main``), because there fountain-py would
   refuse the cue above it, and when it starts with ``...`` or, in any case,
   with ``int``/``ext``/``i/e`` (``Interesting ...``): the terminal Harvey
   reads those as scene headings and would lose the reply, of which it only
   ever reads the first line.  The reader removes one ``\`` when, and only
   when, what follows the line's leading backslashes looks like structure
   (any of the above, first-line cases included); so a written line that
   already starts that way gets one more backslash.
3. Inside a line, ``/*`` is written ``/\*`` and ``[[`` is written ``[\[``,
   so a reply never opens a boneyard or a note; backslashes already between
   the two characters get one more (``/\*`` -> ``/\\*``).  Fountain tools
   show ``\*`` as ``*``.
4. A carriage return (CRLF or a lone CR in a text) is written as ``␍``
   (U+240D); backslashes right before a ``␍`` or CR are doubled and a literal
   ``␍`` gets one more, as in C string escapes.

Each rule is a bijection on its own pattern and the patterns do not overlap,
so any ``str`` reads back exactly (the tests check it with hypothesis).  The
reader decodes Harvey's unescaped files too; that changes only lines that
happen to contain these escape shapes (``/\*``, ``[\[``, ``␍``, or a
backslash before Fountain syntax), which Harvey's text practically never does.
Headings, notes and title-page values are one-line metadata: line breaks
become spaces and ``/*``, ``[[``, ``]]`` are spaced apart, when written and
when read.

API
===
Data: :class:`Element`, :class:`Scene`, :class:`Screenplay`, :class:`Answer`.
Text: :func:`dumps`, :func:`loads`, :func:`read_file`.
Chat: :class:`Turn`, :func:`turns`, :func:`chat_scene`, :func:`turn_scenes`,
:func:`model_cue`, :func:`stats_line`, :func:`new_title_page`,
:func:`model_switch_note`.
Chunk analysis: :class:`ChunkAnalysis`, :func:`chunk_scene`,
:func:`read_chunk_scene`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

__all__ = [
    "Element",
    "Scene",
    "Screenplay",
    "Turn",
    "ChunkAnalysis",
    "dumps",
    "loads",
    "read_file",
    "turns",
    "chat_scene",
    "turn_scenes",
    "chunk_scene",
    "read_chunk_scene",
    "model_cue",
    "stats_line",
    "new_title_page",
    "model_switch_note",
]

TS_FORMAT = "%Y-%m-%d %H:%M:%S"
HARVEY = "HARVEY"
# fountain-py reports Harvey's plain "THE END." as a character cue without
# dialogue; centred text is the Fountain way and every tool shows it.  Harvey
# only ever reads TALKING scenes' dialogue and never appends to an old file,
# so the centred form costs it nothing.  The reader accepts both.
END_MARKER = ">THE END.<"
CHUNK_DONE = "Chunk analysis complete. Synthesized result injected into conversation."


# --------------------------------------------------------------------- data


@dataclass
class Element:
    """One element inside a scene.

    ``kind`` is "action", "dialogue" or "note".  ``text`` is the exact text
    (unescaped); for a note, the text between ``[[`` and ``]]``.  ``character``
    is the cue of a dialogue without any ``@``.  ``paren``: a dialogue's parenthetical line
    (Harvey's ``(chunk 1/3)``, ``(synthesis)``) without its parentheses.
    """

    kind: str
    text: str
    character: str = ""
    paren: str = ""


@dataclass
class Scene:
    """A scene heading and its elements; heading "" holds text before the first heading."""

    heading: str
    elements: list[Element] = field(default_factory=list)


@dataclass
class Screenplay:
    """A whole session file: ordered title page and scenes."""

    title_page: dict[str, str] = field(default_factory=dict)
    scenes: list[Scene] = field(default_factory=list)


@dataclass
class ChunkAnalysis:
    """One chunked analysis of a file that overflowed the context (seed 000).

    ``results`` holds one status per chunk in order: "ok", "error: msg" or
    "cancelled".  ``synthesis`` is the same for the reduce step, None while it
    has not run.  ``replies`` (chunk number -> text) and ``answer`` are what the
    model said for each chunk and for the synthesis, when the file records them
    (the terminal Harvey's recorder does; seed 000's design and this app do not).
    """

    file: str
    chunks: int
    model: str
    boundary: str
    chunk_size: int
    instruction: str
    when: datetime | None = None
    results: list[str] = field(default_factory=list)
    synthesis: str | None = None
    replies: dict[int, str] = field(default_factory=dict)
    answer: str | None = None
    # Issue #15, cited answers: where each cited chunk lies in the file as analysed (chunk number
    # -> Passage), the file's text fingerprint then, and how many chunks had something relevant.
    passages: dict[int, "Passage"] = field(default_factory=dict)
    source: str | None = None
    relevant: int | None = None
    # The terminal Harvey sizes chunks in bytes and names the file's type ("prose"): ``chunk_size``
    # is in tokens (this app's unit; 0 when a file does not say), ``chunk_bytes`` in bytes.
    chunk_bytes: int | None = None
    kind: str = "prose"
    # Issue 22: each part of the file no answered chunk covers, as its note (notes.unread builds and reads it).
    unread: list[str] = field(default_factory=list)


@dataclass
class Passage:
    """Where chunk ``chunk`` (1-based) of an analysed file lies, and the words its partial answer quoted.

    ``start``/``end`` are character offsets into the document's text as the chunker read it
    (a PDF's or Word file's extracted text); ``lines`` are its 1-based first and last lines
    there; ``pages`` a PDF's pages.  Written as ``[[chunk-passage: …]]`` and ``[[chunk-quote: …]]``
    notes in the CHUNK ANALYSIS scene, so a citation [n] in the answer can be opened from the
    session file alone, after a restart, in the terminal Harvey's reader too (it ignores them).
    """

    chunk: int
    start: int
    end: int
    lines: tuple[int, int]
    pages: tuple[int, int] | None = None
    heading: str = ""
    quotes: list[str] = field(default_factory=list)


@dataclass
class Answer:
    """A further model's reply to the same message (FOUNTAIN_FORMAT.md's multi-model scene)."""

    model: str
    text: str


@dataclass
class Turn:
    """One chat exchange as the web app shows it.

    ``user_text`` None: the scene had no user line (a continuation that
    :func:`turns` attaches to the turn before).  ``model``: the exact name when
    a stats line records it, else the cue.  ``reply`` None: no model reply is
    recorded (pending, crashed, or HARVEY answered itself).  ``harvey``: what
    HARVEY said itself (overflow alert, error card), never the "Forwarding to"
    line.  ``notes``: the scene's ``[[...]]`` notes (stopped, error, model
    switch).  ``analysis``: the chunk analysis between message and reply.
    ``more``: replies of further models to the same message, in order.
    ``user``: the user's cue as the file names it (None: the app's configured user).
    """

    when: datetime | None
    user_text: str | None
    model: str | None = None
    reply: str | None = None
    stats: str | None = None
    notes: list[str] = field(default_factory=list)
    harvey: str | None = None
    analysis: ChunkAnalysis | None = None
    more: list[Answer] = field(default_factory=list)
    user: str | None = field(default=None, compare=False, repr=False)
    # Where the turn stands in the file: (first scene, last scene), set by ``turns``;
    # ``shared`` when another turn has text in one of those scenes (Harvey's own files).
    scenes: tuple[int, int] | None = field(default=None, compare=False, repr=False)
    shared: bool = field(default=False, compare=False, repr=False)
    # A later turn asks this one again (regenerate, edit): the store sets it, the heading keeps it.
    superseded: bool = field(default=False, compare=False, repr=False)


# ------------------------------------------------------------ line escaping

_CR_SYMBOL = "\u240d"  # ␍ SYMBOL FOR CARRIAGE RETURN
# An empty line inside a text.  Not whitespace to any parser (Python, Go, JavaScript), so every
# Fountain tool keeps the dialogue going across it, and the terminal Harvey's Fountain library
# never sees an empty line inside a reply: after one it takes any line without lowercase
# letters ("```", "| A | B |", "42") for a character cue whose next line replaces the reply.
BLANK_LINE = "\u200b"  # ZERO WIDTH SPACE
# Lines the terminal Harvey's Fountain library reads as the end of the script, in any case.
_GO_END_LINES = frozenset({"THE END", "THE END.", "LA FIN", "LA FIN.", "FADE IN:"})
_SCENE_START = re.compile(r"(?:int|ext|est|i/e)[\s./]", re.IGNORECASE)
_SCENE_START_UPPER = re.compile(r"(?:INT|EXT|EST|I/E)[\s./]")
_SLASH_STAR = re.compile(r"/(\\*)(?=\*)")
_SLASH_STAR_ESC = re.compile(r"/\\(\\*)(?=\*)")
_DOUBLE_BRACKET = re.compile(r"\[(\\*)(?=\[)")
_DOUBLE_BRACKET_ESC = re.compile(r"\[\\(\\*)(?=\[)")
_CARRIAGE = re.compile(r"(\\*)([\r\u240d])")
_CARRIAGE_ESC = re.compile(r"(\\*)\u240d")
# Rule 5: in-line shapes the terminal Harvey's Fountain library misreads, each broken by a zero
# width space at one place (a run already there gets one more, so the rule is a bijection):
# " -" anywhere makes a line a scene heading, and so does a "#" at its end; a line ending "TO:" or
# "IN:", or holding "THE END.", is a transition (on a dialogue's first line the cue is lost).
_GO_TRAPS = [(re.compile(pattern.replace("ZW", r"(?P<zw>\u200b*)")),
              re.compile(pattern.replace("ZW", r"\u200b(?P<zw>\u200b*)")))
             for pattern in (r" ZW-", r"#ZW\s*$", r"(?:TO|IN):ZW$", r"THE ENDZW\.")]


def _cue_like(t: str) -> bool:
    """True for a line a parser could take as a cue or transition: letters, none lowercase."""
    head = t.split("(", 1)[0]
    return head != head.lower() and head == head.upper()


def _structural(line: str, broad: bool) -> bool:
    """Whether a Fountain parser could read this text line as something else.

    ``broad`` adds what only matters on a text's first line, where fountain-py
    looks for a reason to refuse the cue above: cue-like lines and lowercase
    scene headings (C's ``int main(void)`` stays readable further down).  The
    reader always uses the broad set.  The checks use the stripped line
    because fountain-py strips before it classifies.  A leading backslash is
    never structural, which keeps the one-backslash prefix rule unambiguous.
    """
    t = line.strip()
    if not t or t == BLANK_LINE:
        return True
    c = t[0]
    if c == "\\" or c == BLANK_LINE:
        return False
    if c in "!@#~=>.":
        # "..." is text to Fountain; the terminal Harvey takes any "." line for a scene heading.
        return True
    # "(a) ..." is a parenthetical to the terminal Harvey, whose next line would replace the reply.
    if (c == "(" and ")" in t) or t == "*/" or _SCENE_START_UPPER.match(t) or t.upper() in _GO_END_LINES:
        return True
    # The terminal Harvey reads a line starting "int"/"ext"/"i/e" (any case, "Interesting ...") as a
    # scene heading: in a message that ends the chat scene for it (the reply is lost), and on a
    # first line the turn.  "FADE TO..." on a first line is a transition to it (the cue is lost).
    if t[:3].upper() in ("INT", "EXT", "I/E") or t.startswith("FADE TO"):
        return True
    return broad and (_cue_like(t) or bool(_SCENE_START.match(t)))


def _spaced(t: str) -> bool:
    """A stripped line a leading space protects: "(a) ext4 ..." (not a whole "(aside)", which jouvence
    would still take for a parenthetical).  Harvey's parenthetical test does not strip the line, and
    its replay trims the space, so nothing extra reaches its model."""
    return t[:1] == "(" and ")" in t and not t.endswith(")")


def _escape_inline(s: str) -> str:
    """Break ``/*`` and ``[[``, hide CR, and defuse the terminal Harvey's in-line traps, reversibly
    (rules 3, 4 and 5)."""
    if "/" in s:
        s = _SLASH_STAR.sub(lambda m: "/\\" + m[1], s)
    if "[" in s:
        s = _DOUBLE_BRACKET.sub(lambda m: "[\\" + m[1], s)
    if "\r" in s or _CR_SYMBOL in s:
        s = _CARRIAGE.sub(lambda m: "\\" * (2 * len(m[1]) + (m[2] == _CR_SYMBOL)) + _CR_SYMBOL, s)
    for trap, _ in _GO_TRAPS:
        s = trap.sub(_one_more_zw, s)
    return s


def _one_more_zw(m: re.Match[str]) -> str:
    """The trap's zero-width-space run (group "zw") gets one more: the writer's half of rule 5."""
    return m.string[m.start():m.start("zw")] + BLANK_LINE + m.string[m.start("zw"):m.end()]


def _one_less_zw(m: re.Match[str]) -> str:
    """The reader's half of rule 5: the run (at least one, the writer's) gets one less."""
    return m.string[m.start():m.start("zw") - 1] + m.string[m.start("zw"):m.end()]


def _cr_back(m: re.Match[str]) -> str:
    n = len(m[1])
    return "\\" * (n // 2) + (_CR_SYMBOL if n % 2 else "\r")


def _unescape_inline(s: str) -> str:
    """Undo :func:`_escape_inline`; each rule owns the backslash run it touches."""
    if "/\\" in s:
        s = _SLASH_STAR_ESC.sub(lambda m: "/" + m[1], s)
    if "[\\" in s:
        s = _DOUBLE_BRACKET_ESC.sub(lambda m: "[" + m[1], s)
    if BLANK_LINE in s:
        for _, escaped in _GO_TRAPS:
            s = escaped.sub(_one_less_zw, s)
    if _CR_SYMBOL in s:
        s = _CARRIAGE_ESC.sub(_cr_back, s)
    return s


def _encode_line(line: str, first: bool) -> str:
    """Write one text line so that it stays text (rules 1 and 2)."""
    if not line and not first:
        return BLANK_LINE
    e = _escape_inline(line)
    core = e.lstrip(_PREFIXES)
    # A line already starting with "\" or a zero width space gets one more whenever the
    # reader would otherwise take one of them for our prefix.
    if _structural(core, broad=first or core != e):
        return (" " if _spaced(e.strip()) else BLANK_LINE) + e
    return e


_PREFIXES = "\\" + BLANK_LINE


def _decode_line(e: str) -> str:
    """Read one written text line back (context-free, so any position decodes alike).

    Our prefix is a leading space (``_spaced``) or a zero width space; files written
    before issue 26 used a backslash, which is still read."""
    if not e.strip() or e == BLANK_LINE:  # our blank line, or Fountain's two spaces (older files)
        return ""
    if e[0] == " " and _spaced(e.strip()):
        e = e[1:]
    elif e[0] in _PREFIXES and _structural(e.lstrip(_PREFIXES), broad=True):
        e = e[1:]
    return _unescape_inline(e)


def _encode_text(text: str) -> list[str]:
    return [_encode_line(line, i == 0) for i, line in enumerate(text.split("\n"))]


def _decode_text(lines: list[str]) -> str:
    return "\n".join(_decode_line(line) for line in lines)


def _one_line(text: str) -> str:
    """Flatten metadata (heading, note, title value) to one safe line."""
    s = " ".join(text.split())
    for pair, spaced in (("/*", "/ *"), ("[[", "[ ["), ("]]", "] ]")):
        while pair in s:
            s = s.replace(pair, spaced)
    return s


# ------------------------------------------------------------------- cues

_NATURAL_CUE = re.compile(r"[A-Z][A-Z._\-]*(?: [A-Z._\-]+)*")


def _cue_line(character: str) -> str:
    """The cue as written: natural when fountain-py and jouvence both take it, else "@"."""
    name = " ".join(character.split())
    if not name:
        raise ValueError("a dialogue needs a character")
    natural = (
        len(name) > 1
        and _NATURAL_CUE.fullmatch(name)
        and not _SCENE_START.match(name)
        and name not in ("FADE IN", "THE END", "THE END.")
    )
    return name if natural else "@" + name


def _cue_name(line: str) -> str | None:
    """The character of a cue line, or None when the line is not a cue."""
    t = line.strip()
    if t.startswith("@"):
        return t[1:].strip() or None
    # "{USER}": Harvey's documentation templates; its library takes any capitals line for a cue.
    if t and (t[0].isalnum() or t[0] == "{") and _cue_like(t) and not _SCENE_START.match(t) and not t.endswith(":"):
        return t
    return None


def _user_cue(user_name: str) -> str:
    """The user's cue as Harvey makes it from $USER: uppercase, "OPERATOR" when empty."""
    return " ".join(user_name.split()).upper() or "OPERATOR"


def model_cue(model_name: str) -> str:
    """Harvey's cue for a model: no namespace, no tag, uppercase ("me/apertus:latest" -> "APERTUS").

    Mirrors Harvey's extractModelName so both programs name the same character.
    """
    name = model_name
    if "(" in name:
        name = name[name.index("(") + 1 :].strip().removesuffix(")")
    name = name.split(":", 1)[0]
    name = name.rsplit("/", 1)[-1]
    return " ".join(name.split()).upper() or "MODEL"


# ------------------------------------------------------------------ writer


def _element_lines(el: Element) -> list[str]:
    if el.kind == "note":
        return ["[[" + _note_text(el.text) + "]]"]
    if el.kind == "dialogue":
        paren = ["(" + _one_line(el.paren).replace(")", "") + ")"] if el.paren else []
        return [_cue_line(el.character), *paren, *_encode_text(el.text)]
    if el.kind == "action":
        return _encode_text(el.text)
    raise ValueError(f"unknown element kind {el.kind!r}")


def _note_text(text: str) -> str:
    s = _one_line(text)
    # A "]" right before the closing "]]" would close the note one early.
    return s + " " if s.endswith("]") else s


def dumps(play: Screenplay) -> str:
    """The whole file, in Harvey's byte layout (see the module docstring)."""
    return join_file(play.title_page, [dump_scene(scene) for scene in play.scenes])


def dump_scene(scene: Scene) -> str:
    """One scene's text; a file is ``join_file`` of these, so a writer can keep them per scene."""
    head = f"\n\n{_one_line(scene.heading)}\n\n" if scene.heading else "\n"
    return head + "".join("\n".join(_element_lines(el)) + "\n\n" for el in scene.elements)


def join_file(title_page: dict[str, str], scene_texts: list[str]) -> str:
    """Title page, FADE IN, the scenes' texts (from ``dump_scene``) and the end marker."""
    out: list[str] = []
    if title_page:
        out += [f"{_one_line(k).replace(':', '')}: {_one_line(v)}\n" for k, v in title_page.items()]
        out.append("\n\n")
    out.append("FADE IN:\n")
    out += scene_texts
    out.append(f"\n{END_MARKER}\n")
    return "".join(out)


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


# ------------------------------------------------------------ chat helpers

_TALKING = re.compile(r"int\.?\s+harvey and (?P<user>.+?) talking\b(?P<rest>.*)", re.IGNORECASE)
_CHUNK_HEADING = re.compile(r"int\.?\s+chunk analysis\b\s*[—–-]*\s*(?P<rest>.*)", re.IGNORECASE)
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})(?:[ T](\d{1,2}:\d{2}(?::\d{2})?))?\s*$")
_FORWARD = re.compile(r"Forwarding to (?P<model>.+?)\.?")
_STATS = re.compile(
    r"(?:(?P<models>.+?) · )?(?:\d+ reply \+ \d+ ctx|\d+ prompt \+ \d+ reply tokens) · \S+ · [\d.]+ tok/s"
)
_STATS_SHORT = re.compile(r"(?P<models>.+) · \d[\dhmsµun.]*s")
_ROUTING = re.compile(r"Routing to \S")
_STATE_ACTION = re.compile(r"Harvey and .+ are in chat mode\..*|Model: .*")
_DESCRIBED = re.compile(r"Model: (.+?)(?:\.(?:\s|$)|$)")


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


def _stats_model(stats: str) -> str | None:
    """The model a stats line names: the last hop, inside "backend (model)" when present."""
    m = _STATS.fullmatch(stats) or _STATS_SHORT.fullmatch(stats)
    if not m or not m["models"]:
        return None
    last = m["models"].split(" → ")[-1].strip()
    inner = re.fullmatch(r".*? \((.+)\)", last)
    return inner[1] if inner else last


def _is_stats(text: str) -> bool:
    return bool(_STATS.fullmatch(text) or _STATS_SHORT.fullmatch(text))


def stats_line(model: str, backend: str, reply_tokens: int, context_tokens: int, seconds: float) -> str:
    """Harvey's stats action line, e.g. "ollama (llama3.1:8b) · 312 reply + 1840 ctx · 18.437s · 16.9 tok/s".

    It is the only place the exact model name (with its tag) is written, so
    :func:`turns` reads the model from it.
    """
    head = f"{backend} ({model})"
    elapsed = _go_duration(seconds)
    if not reply_tokens:
        return f"{head} · {elapsed}"
    rate = reply_tokens / seconds if seconds > 0 else 0.0
    return f"{head} · {reply_tokens} reply + {context_tokens} ctx · {elapsed} · {rate:.1f} tok/s"


def _go_duration(seconds: float) -> str:
    """Go's time.Duration String() after Round(ms), as Harvey prints it ("18.437s", "1m2.5s")."""
    ms = max(0, round(seconds * 1000))
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, frac = divmod(rest, 1000)
    text = f"{secs}" + (f".{frac:03d}".rstrip("0") if frac else "") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def new_title_page(user_name: str, model: str, backend: str, when: datetime) -> dict[str, str]:
    """The title page Harvey writes, keys in Harvey's order."""
    return {
        "Title": "Harvey Session",
        "Credit": "Recorded by Harvey",
        "Author": _user_cue(user_name),
        "Date": when.strftime(TS_FORMAT),
        "Draft date": when.strftime("%Y-%m-%d"),
        "Model": f"{model_cue(model)} ({backend})",
        "Backend": backend,
    }


def model_switch_note(model: str, backend: str, when: datetime) -> str:
    """Harvey's note text for a model change: "model switch: NAME (BACKEND) at TS"."""
    return f"model switch: {model} ({backend}) at {when.strftime(TS_FORMAT)}"


def _is_switch(note: str) -> bool:
    return note.startswith("model switch:")


def chat_scene(turn: Turn, user_name: str, workspace: str) -> Scene:
    """The TALKING scene Harvey writes for one turn.

    Model-switch notes go before the user's line, other notes after the reply,
    the stats line last (where Harvey puts it).  "Forwarding to X." is written
    whenever the message went to a model, so a pending turn still names it.
    Further models' replies follow the first, each after its own "Forwarding
    to" line (FOUNTAIN_FORMAT.md's multi-model scene).  The user's cue is the
    turn's own (a turn read from another user's file keeps it).
    """
    user = _user_cue(turn.user or user_name)
    cue = model_cue(turn.model) if turn.model else None
    when = turn.when.strftime(TS_FORMAT) if turn.when else ""
    mode = f" Model: {cue}." if cue else ""
    els = [Element("action", f"Harvey and {user} are in chat mode.{mode} Workspace: {workspace}.")]
    els += [Element("note", n) for n in turn.notes if _is_switch(n)]
    if turn.user_text is not None:
        mention, message = split_mention(turn.user_text)
        if mention:
            els.append(Element("note", mention_note(mention)))
        els.append(Element("dialogue", message, user))
        if cue:
            els.append(Element("dialogue", f"Forwarding to {cue}.", HARVEY))
    if turn.harvey is not None:
        els.append(Element("dialogue", turn.harvey, HARVEY))
    if turn.reply is not None:
        els.append(Element("dialogue", turn.reply, cue or "MODEL"))
    for answer in turn.more:
        other = model_cue(answer.model)
        els.append(Element("dialogue", f"Forwarding to {other}.", HARVEY))
        els.append(Element("dialogue", answer.text, other))
    els += [Element("note", n) for n in turn.notes if not _is_switch(n)]
    if turn.stats:
        els.append(Element("action", turn.stats))
    aside = f", {_SUPERSEDED}" if turn.superseded else f", {_UNANSWERED}" if _unanswered(turn) else ""
    return Scene(f"INT. HARVEY AND {user} TALKING{aside} {when}".rstrip(), els)


# A turn the app leaves out of the model's history keeps a TALKING heading that the terminal Harvey's
# replay skips (it looks for " TALKING "), so its --continue leaves it out too; our reader reads it.
_SUPERSEDED = "REPLACED"
_UNANSWERED = "UNANSWERED"
_ASIDE = re.compile(rf"\s*,\s*(?P<aside>{_SUPERSEDED}|{_UNANSWERED})\b", re.IGNORECASE)


def _unanswered(turn: Turn) -> bool:
    """A message without a reply (pending, failed, declined): Harvey would send it alone."""
    return turn.user_text is not None and turn.reply is None and not turn.more


# The terminal Harvey's @mention, as the app strips it from the history (chat/prepare.py MENTION_AT_START).
_MENTION = re.compile(r"^\s*@([\w.:/\-]+)\s*")
_MENTION_NOTE = "mention:"


def split_mention(text: str) -> tuple[str, str]:
    """(leading ``@model`` mentions as typed, the message Harvey records): the prefix the app's history drops."""
    rest = text
    while rest.startswith("@") and (m := _MENTION.match(rest)):
        rest = rest[m.end():]
    return text[:len(text) - len(rest)], rest


def mention_note(prefix: str) -> str:
    """``mention: @a @b`` for the usual "@a @b " prefix; its exact characters as JSON otherwise."""
    words = prefix.split()
    if prefix == " ".join(words) + " ":
        return f"{_MENTION_NOTE} {' '.join(words)}"
    return f"{_MENTION_NOTE} " + json.dumps(prefix).replace(" ", "\\u0020")


def _read_mention(note: str) -> str | None:
    """The typed prefix a mention note records, or None for any other note."""
    if not note.startswith(_MENTION_NOTE):
        return None
    value = note[len(_MENTION_NOTE):].strip()
    if value.startswith('"'):
        try:
            return str(json.loads(value))
        except ValueError:
            return None
    return value + " "


def turn_scenes(turn: Turn, user_name: str, workspace: str) -> list[Scene]:
    """All scenes for a turn; with an analysis, seed 000's overflow / chunk / answer trio.

    ``turns(Screenplay(scenes=<these>))`` gives the turn back (model as the
    cue unless stats carry the exact name, model-switch notes first).
    """
    user_name = turn.user or user_name
    if turn.analysis is None:
        return [chat_scene(turn, user_name, workspace)]
    if turn.reply is None:
        ask = replace(turn, model=None, analysis=None)
        return [chat_scene(ask, user_name, workspace), chunk_scene(turn.analysis, user_name)]
    # Answered: the terminal Harvey's order, the analysis first, then the turn with its answer as the
    # reply, so its --continue gets the answer (it drops a scene without a user line).
    return [chunk_scene(turn.analysis, user_name, before=True),
            chat_scene(replace(turn, analysis=None), user_name, workspace)]


def turns(play: Screenplay) -> list[Turn]:
    """The chat turns, in order, from TALKING scenes (other scenes are skipped).

    A TALKING scene whose reply comes with no user line answers the turn before
    when that turn has no reply yet (seed 000: the synthesized answer after a
    chunk analysis).  A chunk analysis scene holding the user's instruction
    (seed 000, this app) is attached to the turn before it.  One without it is
    the terminal Harvey's recorder: written while a message's named file was
    analysed, before that message's TALKING scene, so it goes with the turn
    right after it when that turn's message names the file; otherwise (its
    ``/read-chunks``) it is a turn of its own, without a user line, whose reply
    is the synthesis.  A model-switch note written after a reply (where Harvey
    writes it) belongs to the next turn.  HARVEY answering a message itself
    (no "Forwarding to", no model reply, a model named in the scene's state
    line: FOUNTAIN_FORMAT.md's local model) is that model's reply.
    """
    reader = _TurnReader()
    pending: tuple[ChunkAnalysis, int] | None = None
    for i, scene in enumerate(play.scenes):
        m = _TALKING.fullmatch(scene.heading)
        reader.index = i
        if m:
            before = len(reader.out)
            reader.scene(scene, m["user"].strip(), _timestamp(m["rest"]))
            if _ASIDE.match(m["rest"] or "") and _ASIDE.match(m["rest"])["aside"].upper() == _SUPERSEDED:
                for turn in reader.out[before:]:
                    turn.superseded = True
            if pending:
                reader.place(*pending, at=before, next_scene=i)
                pending = None
        elif read := _read_chunk(scene):
            analysis, asked, first = read
            if pending:
                reader.place(*pending, at=len(reader.out), next_scene=None)
                pending = None
            if first or not asked:
                pending = (analysis, i, asked)
            elif reader.out:
                reader.out[-1].analysis = analysis
                reader.out[-1].scenes = (reader.out[-1].scenes[0], i)
    if pending:
        reader.place(*pending, at=len(reader.out), next_scene=None)
    if reader.carry and reader.out:
        reader.out[-1].notes += reader.carry
    for turn in reader.out:
        local = reader.local.get(id(turn))
        if local and turn.analysis is None and turn.reply is None and turn.harvey is not None:
            turn.reply, turn.harvey, turn.model = turn.harvey, None, turn.model or local
    return reader.out


class _TurnReader:
    """Walks TALKING scenes in order, the way Harvey's replay does, but keeping everything."""

    def __init__(self) -> None:
        self.out: list[Turn] = []
        self.carry: list[str] = []  # notes seen before the turn they belong to
        self.cur: Turn | None = None
        self.cue: str | None = None  # the reply's cue
        self.forwarded: str | None = None  # the model named by "Forwarding to X."
        self.any_forward = False  # the current turn went through "Forwarding to"
        self.target: str | Answer | None = None  # what a cut-off paragraph continues
        self.described: str | None = None  # the model the scene's state line names
        self.local: dict[int, str] = {}  # turns HARVEY answered itself -> the scene's model
        self.user = ""
        self.when: datetime | None = None
        self.index = 0               # the scene being read
        self.mention = ""            # a mention note's prefix, waiting for the user's line

    def scene(self, scene: Scene, user: str, when: datetime | None) -> None:
        self.user, self.when, self.target, self.described = user.upper(), when, None, None
        self.mention = ""
        for el in scene.elements:
            if el.kind == "dialogue":
                self.dialogue(el)
            elif el.kind == "note":
                self.note(el.text)
            else:
                self.action(el.text)
        self.finish()

    def start(self, user_text: str | None) -> None:
        self.finish()
        self.cur = Turn(self.when, user_text, notes=self.carry, scenes=(self.index, self.index), user=self.user)
        self.carry, self.any_forward = [], False
        prev = self.out[-1] if self.out else None
        if prev is not None and prev.scenes and prev.scenes[1] == self.index:
            prev.shared = self.cur.shared = True

    def dialogue(self, el: Element) -> None:
        speaker = el.character.split("(", 1)[0].strip().upper()
        text = f"({el.paren})\n{el.text}" if el.paren else el.text
        if speaker == self.user:
            self.start(self.mention + text)
            self.target, self.mention = "user", ""
        elif speaker == HARVEY:
            if self.cur is None:
                self.start(None)
            fw = _FORWARD.fullmatch(text)
            if fw:
                self.forwarded, self.any_forward, self.target = fw["model"], True, None
            else:
                self.cur.harvey, self.target = _join(self.cur.harvey, text), "harvey"
        else:
            if self.cur is None:
                self.start(None)
            if self.cur.reply is None:
                self.cur.reply, self.cue, self.target = text, el.character, "reply"
            else:  # a further model answers the same message
                self.target = Answer(el.character, text)
                self.cur.more.append(self.target)

    def action(self, text: str) -> None:
        """A stats line, the scene's state line, or a paragraph Harvey's writer cut off at a blank line."""
        if _STATE_ACTION.fullmatch(text) and (m := _DESCRIBED.search(text)):
            self.described = m[1].strip()
        cur, target, self.target = self.cur, self.target, None
        if cur is None:
            return
        if _is_stats(text):
            cur.stats = text
            return
        if target is None or _ROUTING.match(text) or _STATE_ACTION.fullmatch(text):
            return
        self.target = target
        if isinstance(target, Answer):
            target.text += "\n\n" + text
        elif target == "reply":
            cur.reply += "\n\n" + text
        elif target == "harvey":
            cur.harvey += "\n\n" + text
        elif target == "user":
            cur.user_text += "\n\n" + text

    def note(self, text: str) -> None:
        self.target = None
        if (prefix := _read_mention(text)) is not None:
            self.mention = prefix          # the message's @model, typed before the words Harvey keeps
            return
        cur = self.cur
        answered = cur is not None and (cur.reply is not None or cur.harvey is not None)
        if cur is None or (_is_switch(text) and answered):
            self.carry.append(text)
        else:
            cur.notes.append(text)

    def finish(self) -> None:
        """Settle the turn's model, then append it or merge a continuation into the turn before."""
        cur, self.cur = self.cur, None
        if cur is None:
            return
        cue, self.cue, forwarded, self.forwarded = self.cue, None, self.forwarded, None
        named = cue or forwarded
        exact = _stats_model(cur.stats) if cur.stats else None
        cur.model = exact if exact and (named is None or model_cue(exact) == model_cue(named)) else named
        for answer in cur.more:  # the stats line may name a further model exactly (its last hop)
            if exact and cur.model != exact and model_cue(answer.model) == model_cue(exact):
                answer.model = exact
        if cur.user_text is not None and cur.reply is None and cur.harvey is not None and not self.any_forward \
                and self.described:
            self.local[id(cur)] = self.described
        prev = self.out[-1] if self.out else None
        # A scene with no user line is the reply the turn before was waiting for (seed 000's
        # answer after a chunk analysis). One without a reply (a compact note) is its own turn.
        if cur.user_text is None and cur.reply is not None and prev is not None and prev.reply is None:
            prev.scenes = (prev.scenes[0], self.index)
            prev.reply = cur.reply
            prev.model = cur.model or prev.model
            prev.stats = cur.stats or prev.stats
            prev.notes += cur.notes
            prev.more += cur.more
            if cur.harvey is not None:
                prev.harvey = _join(prev.harvey, cur.harvey)
        else:
            self.out.append(cur)

    def place(self, analysis: ChunkAnalysis, index: int, asked: bool, at: int, next_scene: int | None) -> None:
        """Put a chunk analysis in the terminal Harvey's layout with its turn (see ``turns``).

        Ours (it holds the instruction) always belongs to the turn right after it; Harvey's
        only when that turn's message names the file (else it is a ``/read-chunks``)."""
        first = self.out[at] if at < len(self.out) else None
        if (first is not None and next_scene == index + 1 and first.analysis is None and first.user_text is not None
                and (asked or (analysis.file and analysis.file in first.user_text))):
            first.analysis = analysis
            first.scenes = (index, first.scenes[1])
            return
        self.out.insert(at, Turn(analysis.when, None, analysis.model or None, analysis.answer,
                                 analysis=analysis, scenes=(index, index)))


def _join(old: str | None, new: str) -> str:
    return new if old is None else old + "\n\n" + new


# ----------------------------------------------------------- chunk analysis

_CHUNK_NOTE = re.compile(
    r"chunk:\s*file=(?P<file>.*?),\s*chunks=(?P<chunks>\d+),\s*model=(?P<model>.*?),"
    r"\s*boundary=(?P<boundary>.*?)(?:,\s*chunk-size=(?P<size>\d+))?(?:,\s*chunk-tokens=(?P<tokens>\d+))?"
)
_RESULT_NOTE = re.compile(r"chunk-result:\s*\d+\s*/\s*\d+\s+(?:—|–|--?)\s+(?P<status>.*)")
_PASSAGE_NOTE = re.compile(
    r"chunk-passage:\s*(?P<n>\d+)\s*/\s*\d+\s+—\s+lines (?P<l1>\d+)-(?P<l2>\d+), chars (?P<c1>\d+)-(?P<c2>\d+)"
    r"(?:, pages (?P<p1>\d+)-(?P<p2>\d+))?(?:\s+—\s+(?P<heading>.*))?")
_QUOTE_NOTE = re.compile(r"chunk-quote:\s*(?P<n>\d+)\s*/\s*\d+\s+—\s+(?P<quote>.*)")
_SOURCE_NOTE = re.compile(r"chunk-source:\s*(?P<source>\S+)")
_RELEVANT_NOTE = re.compile(r"chunk-relevant:\s*(?P<n>\d+)\s*/\s*\d+")
_SYNTHESIS_NOTE = re.compile(r"synthesis:\s*model=(?P<model>.*?)\s+(?:—|–|--?)\s+(?P<status>.*)")
_CHUNK_PAREN = re.compile(r"chunk\s+(\d+)\s*/\s*\d+")
_CHUNK_ACTION = re.compile(r"Harvey processes .+ as \d+ chunks of type (?P<kind>\S+)\.")
SYNTHESIZING = "Synthesizing results."


def chunk_scene(analysis: ChunkAnalysis, user_name: str, before: bool = False) -> Scene:
    """The INT. CHUNK ANALYSIS scene of seed 000 (status only, never chunk content).

    Replies the analysis holds (read from the terminal Harvey's file) are
    written the way its recorder writes them: the model's cue with
    ``(chunk i/N)`` before each result note, HARVEY's "Synthesizing results."
    and ``(synthesis)`` before the synthesis note.  ``before``: the scene stands before the
    turn that asked (the terminal Harvey's order, for an answered analysis); it then opens with
    Harvey's "Harvey processes FILE as N chunks of type KIND." line, which tells the reader so.
    The chunk note gives ``chunk-size`` in bytes as Harvey does, and this app's tokens as
    ``chunk-tokens``.
    """
    a = analysis
    when = a.when.strftime(TS_FORMAT) if a.when else ""
    user = _user_cue(user_name)
    cue = model_cue(a.model)
    size = f", chunk-size={a.chunk_bytes}" if a.chunk_bytes is not None else ""
    els = [Element("action", f"Harvey processes {a.file} as {a.chunks} chunks of type {a.kind}.")] if before else []
    els += [
        Element("note", f"chunk: file={a.file}, chunks={a.chunks}, model={a.model}, "
                        f"boundary={a.boundary}{size}, chunk-tokens={a.chunk_size}"),
        Element("dialogue", a.instruction, user),
    ]
    if a.source:
        els.append(Element("note", f"chunk-source: {a.source}"))
    for i, status in enumerate(a.results, 1):
        if i in a.replies:
            els.append(Element("dialogue", a.replies[i], cue, f"chunk {i}/{a.chunks}"))
        els.append(Element("note", f"chunk-result: {i}/{a.chunks} — {status}"))
        if i in a.passages:
            els.extend(Element("note", text) for text in passage_notes(a.passages[i], a.chunks))
    if a.relevant is not None:
        els.append(Element("note", f"chunk-relevant: {a.relevant}/{a.chunks}"))
    els.extend(Element("note", text) for text in a.unread)
    if a.synthesis is not None:
        if a.answer is not None:
            els.append(Element("dialogue", SYNTHESIZING, HARVEY))
            els.append(Element("dialogue", a.answer, cue, "synthesis"))
        els.append(Element("note", f"synthesis: model={a.model} — {a.synthesis}"))
        els.append(Element("dialogue", _closing_line(a), HARVEY))
    return Scene(f"INT. CHUNK ANALYSIS — {a.file} {when}".rstrip(), els)


def _note_safe(text: str) -> str:
    """One line that cannot close its note early (``]]``) or open another (``[[``)."""
    return " ".join(text.split()).replace("]]", "] ]").replace("[[", "[ [")


def passage_notes(p: Passage, chunks: int) -> list[str]:
    """A passage as note texts: its range (and heading path, last, so it may hold anything), then each quote."""
    pages = f", pages {p.pages[0]}-{p.pages[1]}" if p.pages else ""
    heading = f" — {_note_safe(p.heading)}" if p.heading.strip() else ""
    out = [f"chunk-passage: {p.chunk}/{chunks} — lines {p.lines[0]}-{p.lines[1]}, chars {p.start}-{p.end}"
           f"{pages}{heading}"]
    out += [f"chunk-quote: {p.chunk}/{chunks} — {_note_safe(q)}" for q in p.quotes if q.strip()]
    return out


def _closing_line(a: ChunkAnalysis) -> str:
    if a.synthesis == "ok":
        return CHUNK_DONE
    if a.synthesis == "cancelled" or "cancelled" in a.results:
        return "Chunk analysis cancelled. Nothing was injected into the conversation."
    return "Chunk analysis failed. Nothing was injected into the conversation."


def read_chunk_scene(scene: Scene) -> ChunkAnalysis | None:
    """The analysis a CHUNK ANALYSIS scene records, or None for any other scene.

    Both layouts: seed 000's (the user's instruction, status notes only) and the
    terminal Harvey recorder's (no instruction; each chunk's reply under the
    model's cue with ``(chunk i/N)``, the synthesis with ``(synthesis)``, their
    paragraphs cut at blank lines, which are joined again).
    """
    read = _read_chunk(scene)
    return read[0] if read else None


def _read_chunk(scene: Scene) -> tuple[ChunkAnalysis, bool, bool] | None:
    """The analysis, whether the scene holds the user's instruction (seed 000's layout, ours), and
    whether it opens with Harvey's "Harvey processes ..." line (it stands before its turn)."""
    m = _CHUNK_HEADING.fullmatch(scene.heading)
    if not m:
        return None
    when = _timestamp(m["rest"])
    heading_file = _TIMESTAMP.sub("", m["rest"]).strip()
    a = ChunkAnalysis(heading_file, 0, "", "", 0, "", when)
    asked = first = False
    sizes: dict[str, int] = {}     # the chunk note's chunk-size and chunk-tokens, as given
    last: int | str | None = None  # the reply a cut-off paragraph continues
    for el in scene.elements:
        if el.kind == "action" and (processes := _CHUNK_ACTION.fullmatch(el.text)):
            first, a.kind = True, processes["kind"]
            continue
        if el.kind == "note":
            _read_chunk_note(a, " ".join(el.text.split()), sizes)
            last = None
        elif el.kind == "dialogue":
            paren, last = " ".join(el.paren.split()).lower(), None
            if chunk := _CHUNK_PAREN.fullmatch(paren):
                last = int(chunk[1])
                a.replies[last] = el.text
            elif paren == "synthesis":
                a.answer, last = el.text, "answer"
            elif el.character.upper() != HARVEY and not asked:
                a.instruction, asked = el.text, True
        elif last is not None and not _CHUNK_ACTION.fullmatch(el.text):
            if last == "answer":
                a.answer += "\n\n" + el.text
            else:
                a.replies[last] += "\n\n" + el.text
    _settle_units(a, asked, sizes)
    return a, asked, first


def _settle_units(a: ChunkAnalysis, asked: bool, sizes: dict[str, int]) -> None:
    """Which unit the note's ``chunk-size`` is in: with ``chunk-tokens`` beside it, bytes (ours since
    issue 26); without, tokens in a scene holding an instruction (seed 000, our older files) and bytes
    in the terminal Harvey's (its recorder writes ``ChunkConfig`` sizes in bytes)."""
    if "tokens" in sizes:
        a.chunk_size, a.chunk_bytes = sizes["tokens"], sizes.get("size")
    elif "size" in sizes and not asked:
        a.chunk_size, a.chunk_bytes = 0, sizes["size"]
    else:
        a.chunk_size = sizes.get("size", 0)


def _read_chunk_note(a: ChunkAnalysis, note: str, sizes: dict[str, int]) -> None:
    if m := _CHUNK_NOTE.fullmatch(note):
        a.file, a.chunks, a.model, a.boundary = m["file"], int(m["chunks"]), m["model"], m["boundary"]
        sizes.clear()
        sizes.update({key: int(m[key]) for key in ("size", "tokens") if m[key] is not None})
    elif m := _RESULT_NOTE.fullmatch(note):
        a.results.append(m["status"])
    elif m := _PASSAGE_NOTE.fullmatch(note):
        pages = (int(m["p1"]), int(m["p2"])) if m["p1"] else None
        quotes = a.passages[int(m["n"])].quotes if int(m["n"]) in a.passages else []
        a.passages[int(m["n"])] = Passage(int(m["n"]), int(m["c1"]), int(m["c2"]), (int(m["l1"]), int(m["l2"])),
                                          pages, (m["heading"] or "").strip(), quotes)
    elif m := _QUOTE_NOTE.fullmatch(note):
        if int(m["n"]) in a.passages:
            a.passages[int(m["n"])].quotes.append(m["quote"].strip())
    elif m := _SOURCE_NOTE.fullmatch(note):
        a.source = m["source"]
    elif m := _RELEVANT_NOTE.fullmatch(note):
        a.relevant = int(m["n"])
    elif m := _SYNTHESIS_NOTE.fullmatch(note):
        a.synthesis = m["status"]
    elif note.startswith("chunk-unread:"):
        a.unread.append(note)
