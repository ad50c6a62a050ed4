"""The Fountain codec: escaping text lines both ways, character cues, and the writer (``dumps``).

The escaping rules are described in the package docstring (``app.sessions.fountain``).
"""

from __future__ import annotations

import re
from functools import lru_cache

from .data import END_MARKER, Element, Scene, Screenplay

# ------------------------------------------------------------ line escaping

# An empty line inside a text.  Not whitespace to any parser (Python, Go, JavaScript), so every
# Fountain tool keeps the dialogue going across it, and the terminal Harvey's Fountain library
# never sees an empty line inside a reply: after one it takes any line without lowercase
# letters ("```", "| A | B |", "42") for a character cue whose next line replaces the reply.
BLANK_LINE = "\u200b"  # ZERO WIDTH SPACE
# Lines the terminal Harvey's Fountain library reads as the end of the script, in any case.
_GO_END_LINES = frozenset({"THE END", "THE END.", "LA FIN", "LA FIN.", "FADE IN:"})
_SCENE_START = re.compile(r"(?:int|ext|est|i/e)[\s./]", re.IGNORECASE)
_SCENE_START_UPPER = re.compile(r"(?:INT|EXT|EST|I/E)[\s./]")
# Rules 3 and 4: "/*" and "[[" are broken by a zero width space (a run already there gets one
# more); the terminal Harvey's model reads no backslash.  Files before issue 35 broke them with a
# backslash: "/" or "[" then a run of backslashes before "*" or "[" still loses one when read, and
# the writer adds one to such a run (so a text holding "/\\*" comes back as it was).
_SLASH_STAR = re.compile(r"/(\u200b*)(?=\*)")
_SLASH_STAR_ESC = re.compile(r"/\u200b(\u200b*)(?=\*)")
_SLASH_BACK = re.compile(r"/(\\+)(?=\*)")
_SLASH_BACK_ESC = re.compile(r"/\\(\\*)(?=\*)")
_DOUBLE_BRACKET = re.compile(r"\[(\u200b*)(?=\[)")
_DOUBLE_BRACKET_ESC = re.compile(r"\[\u200b(\u200b*)(?=\[)")
_BRACKET_BACK = re.compile(r"\[(\\+)(?=\[)")
_BRACKET_BACK_ESC = re.compile(r"\[\\(\\*)(?=\[)")
# A first line fountain-py would take for a character cue (its name pattern: capitals, digits,
# spaces and ``_.'#-``, at least one capital, maybe an extension in parentheses); such a line right
# after the cue makes it read the cue and the line as action.  The terminal Harvey never takes the
# line after a cue for one, and jouvence and screenplain read it as dialogue, so any other
# capitals line ("I AM HERE!", "| A | B |") is written as it is.
_FOUNTAIN_PY_CUE = re.compile(r"(?=[A-Z0-9\s_.'#-]*[A-Z])[A-Z0-9][A-Z0-9\s_.'#-]*(?:\s*\(.+\))?\s*\^*")
# Rule 4: a carriage return, and every other character Python's (and so fountain-py's) ``splitlines``
# breaks a line at besides "\n", is written as a symbol of its own (a reader that splits there would
# see a line the writer never checked: "ATO:" + U+2028 became a transition).
_BREAKS = {"\r": "\u240d", "\x0b": "\u240b", "\x0c": "\u240c", "\x1c": "\u241c", "\x1d": "\u241d",
           "\x1e": "\u241e", "\x85": "\u2424", "\u2028": "\u23ce", "\u2029": "\u2761"}
_BREAK_OF = {symbol: raw for raw, symbol in _BREAKS.items()}
_CARRIAGE = re.compile("(\\\\*)([" + "".join(_BREAKS) + "".join(_BREAKS.values()) + "])")
_CARRIAGE_ESC = re.compile("(\\\\*)([" + "".join(_BREAKS.values()) + "])")
_ANY_BREAK = re.compile("[" + "".join(_BREAKS) + "".join(_BREAKS.values()) + "]")
_ANY_SYMBOL = re.compile("[" + "".join(_BREAKS.values()) + "]")
# Rule 5: in-line shapes the terminal Harvey's Fountain library misreads, each broken by a zero
# width space at one place (a run already there gets one more, so the rule is a bijection):
# " -" anywhere makes a line a scene heading, and so does a "#" at its end; a line ending "TO:" or
# "IN:", or holding "THE END.", is a transition (on a dialogue's first line the cue is lost).
_GO_TRAPS = [(re.compile(pattern.replace("ZW", r"(?P<zw>\u200b*)")),
              re.compile(pattern.replace("ZW", r"\u200b(?P<zw>\u200b*)")))
             for pattern in (r" ZW-", r"#ZW\s*$", r"(?:TO|IN):ZW[ \t]*$", r"THE ENDZW\.")]


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


def _first_needs(line: str) -> bool:
    """Whether a text's first line, right after its cue, needs our prefix beyond ``_structural``'s
    narrow set: a line fountain-py would take for a cue (``_FOUNTAIN_PY_CUE``; it then loses the
    cue above) or a lowercase scene heading ("int main(void)")."""
    t = line.strip()
    return bool(_FOUNTAIN_PY_CUE.fullmatch(t) or _SCENE_START.match(t))


def _spaced(t: str) -> bool:
    """A stripped line a leading space protects: "(a) ext4 ..." (not a whole "(aside)", which jouvence
    would still take for a parenthetical).  Harvey's parenthetical test does not strip the line, and
    its replay trims the space, so nothing extra reaches its model."""
    return t[:1] == "(" and ")" in t and not t.endswith(")")


def _escape_inline(s: str) -> str:
    """Break ``/*`` and ``[[``, hide CR, and defuse the terminal Harvey's in-line traps, reversibly
    (rules 3, 4 and 5)."""
    if "/" in s:
        s = _SLASH_BACK.sub(lambda m: "/\\" + m[1], s)
        s = _SLASH_STAR.sub(lambda m: "/" + BLANK_LINE + m[1], s)
    if "[" in s:
        s = _BRACKET_BACK.sub(lambda m: "[\\" + m[1], s)
        s = _DOUBLE_BRACKET.sub(lambda m: "[" + BLANK_LINE + m[1], s)
    if _ANY_BREAK.search(s):
        s = _CARRIAGE.sub(lambda m: "\\" * (2 * len(m[1]) + (m[2] in _BREAK_OF)) + _BREAKS.get(m[2], m[2]), s)
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
    return "\\" * (n // 2) + (m[2] if n % 2 else _BREAK_OF[m[2]])


def _unescape_inline(s: str) -> str:
    """Undo :func:`_escape_inline`; each rule owns the backslash run it touches."""
    if "/\\" in s:
        s = _SLASH_BACK_ESC.sub(lambda m: "/" + m[1], s)
    if "[\\" in s:
        s = _BRACKET_BACK_ESC.sub(lambda m: "[" + m[1], s)
    if BLANK_LINE in s:
        if "/" + BLANK_LINE in s:
            s = _SLASH_STAR_ESC.sub(lambda m: "/" + m[1], s)
        if "[" + BLANK_LINE in s:
            s = _DOUBLE_BRACKET_ESC.sub(lambda m: "[" + m[1], s)
        for _, escaped in _GO_TRAPS:
            s = escaped.sub(_one_less_zw, s)
    if _ANY_SYMBOL.search(s):
        s = _CARRIAGE_ESC.sub(_cr_back, s)
    return s


AFTER_CUE = "after a cue"   # ``first`` for a dialogue's first line (truthy: it is a first line)


def _encode_line(line: str, first: bool | str) -> str:
    """Write one text line so that it stays text (rules 1 and 2).  ``first``: the text's first
    line (an action's: any cue-like line is prefixed, our reader would take it for a cue), or
    ``AFTER_CUE``, a dialogue's first line, prefixed only where a parser would misread it."""
    if not line and not first:
        return BLANK_LINE
    e = _escape_inline(line)
    core = e.lstrip(_PREFIXES)
    # A line already starting with "\" or a zero width space gets one more whenever the
    # reader would otherwise take one of them for our prefix (the reader's broad rule); a first
    # line gets one only where a parser would misread it (``_first_needs``).
    if core != e or first is True:
        needed = _structural(core, broad=True)
    else:
        needed = _structural(core, broad=False) or (first == AFTER_CUE and _first_needs(core))
    if needed:
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


def _encode_text(text: str, dialogue: bool = False) -> list[str]:
    first = AFTER_CUE if dialogue else True
    return [_encode_line(line, first if i == 0 else False) for i, line in enumerate(text.split("\n"))]


# What any decoding rule acts on: a backslash, a zero width space, a line break's symbol (rule 4), or a
# line that starts with whitespace (a blank-looking line, or the space that protects a parenthetical).
_ESCAPED = re.compile("[\\\\\u200b" + "".join(_BREAK_OF) + "]|(?:^|\n)\\s")
_INDENTED_LINE = re.compile(r"\n\s")


def _needs_decoding(written: str) -> bool:
    """``_ESCAPED.search(written)``, five times faster: the reader asks it of every paragraph,
    and a regex that may start at any line start tries both branches at every character."""
    return ("\\" in written or BLANK_LINE in written or _ANY_SYMBOL.search(written) is not None or written[:1].isspace()
            or ("\n" in written and _INDENTED_LINE.search(written) is not None))


def _decode_text(lines: list[str]) -> str:
    """Read written text lines back; text holding nothing any rule acts on (most of it) is as written."""
    return _decode_joined("\n".join(lines))


def _decode_joined(written: str) -> str:
    """:func:`_decode_text` of lines already joined by "\\n" (the reader slices them from the file):
    split only when some rule acts on it."""
    if not _needs_decoding(written):
        return written
    return "\n".join(_decode_line(line) for line in written.split("\n"))


def metadata_line(text: str) -> str:
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


@lru_cache(maxsize=256)
def _cue_name(line: str) -> str | None:
    """The character of a cue line, or None when the line is not a cue.

    Cached (a few hundred lines, bounded): a session repeats the same few cues on every
    turn, and the reader asks for each paragraph's first line; one cached answer is also
    one string for every dialogue of that character, not one copy per line.
    """
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
        paren = ["(" + metadata_line(el.paren).replace(")", "") + ")"] if el.paren else []
        return [_cue_line(el.character), *paren, *_encode_text(el.text, dialogue=True)]
    if el.kind == "action":
        return _encode_text(el.text)
    raise ValueError(f"unknown element kind {el.kind!r}")


def _note_text(text: str) -> str:
    s = metadata_line(text)
    # A "]" right before the closing "]]" would close the note one early.
    return s + " " if s.endswith("]") else s


def dumps(play: Screenplay) -> str:
    """The whole file, in Harvey's byte layout (see the module docstring)."""
    return join_file(play.title_page, [dump_scene(scene) for scene in play.scenes])


def dump_scene(scene: Scene) -> str:
    """One scene's text; a file is ``join_file`` of these, so a writer can keep them per scene."""
    head = f"\n\n{metadata_line(scene.heading)}\n\n" if scene.heading else "\n"
    return head + "".join("\n".join(_element_lines(el)) + "\n\n" for el in scene.elements)


def join_file(title_page: dict[str, str], scene_texts: list[str]) -> str:
    """Title page, FADE IN, the scenes' texts (from ``dump_scene``) and the end marker."""
    out: list[str] = []
    if title_page:
        out += [f"{metadata_line(k).replace(':', '')}: {metadata_line(v)}\n" for k, v in title_page.items()]
        out.append("\n\n")
    out.append("FADE IN:\n")
    out += scene_texts
    out.append(f"\n{END_MARKER}\n")
    return "".join(out)
