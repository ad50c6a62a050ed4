"""The scanner: the regular expressions and the units (paragraphs, headings, lists, fences,
tables, source blocks) that tile a document's text exactly, plus the cut levels the packer uses."""
from __future__ import annotations

import bisect
import re
from typing import Iterable, Iterator


# ---------------------------------------------------------------- regexes
# Unit types
_P, _L, _H, _C, _T, _B = "para", "list", "heading", "fence", "table", "block"

_NONSPACE = re.compile(r"\S")
_BLANK = re.compile(r"\n(?:[ \t]*\n)+")
_BLANKLINES = re.compile(r"(?:[ \t]*\n)*")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]([^\n]*))?$", re.M)
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*(?:\n|\Z)")
_LIST = re.compile(r" {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|\n|\Z)")
_TDELIM = re.compile(                # possessive: no backtracking on long space runs
    r"^ {0,3}(?=[^\n]*\|)\|?[ \t]*+:?-++:?[ \t]*+(?:\|[ \t]*+:?-++:?[ \t]*+)*+\|?[ \t]*+$", re.M)
_CAPTION = re.compile(r"[ \t]*[*_]*(?:table|tab\.|caption)\b", re.I)
_RAW_OPEN = re.compile(
    r"^ {0,3}(?:(`{3,})(?=[^`\n]*$)|(~{3,})|(<table)(?=[\s>]))", re.M | re.I)
_TABLE_CLOSE = re.compile(r"</table\s*>[^\n]*(?:\n|\Z)", re.I)
_TR = re.compile(r"<tr[\s>]", re.I)

_SRC_COMMENTS = r"(?:[ \t]*+(?:#|//|/\*|\*|@|--|;;|\[)[^\n]*+\n)*+"
_SRC_MODS = (r"(?:(?:export|default|pub(?:\([\w:]*\))?|async|static|public|private|"
             r"protected|internal|abstract|final|override|virtual|inline|unsafe|"
             r"extern(?:[ \t]+\"\w+\")?|open|sealed|suspend|data|local|const|"
             r"partial|synchronized|native)[ \t]+)*+")
_SRC_KW = (r"(?:def|class|func|function\*?|fn|impl|struct|enum|union|trait|"
           r"interface|module|mod|object|fun|sub|proc|procedure|namespace|type|"
           r"record|protocol|extension|macro_rules!|template)(?=[ \t(<{:]|$)")
_SRC_ARROW = (r"(?:const|let|var)[ \t]+[\w$]+[ \t]*(?::[^=\n]*)?=[ \t]*(?:async[ \t]*)?"
              r"(?:function\b|\([^)\n]*\)[ \t]*(?::[^=\n]*)?=>|[\w$]+[ \t]*=>)")
_SRC_CLIKE = (r"(?!(?:return|else|if|for|while|switch|case|do|goto|throw|new|delete|"
              r"await|yield|sizeof|typeof|echo|print|not|and|or|in|is)\b)"
              r"(?:[\w:<>,\[\]*&~]++[ \t*&]++)++[\w:~]++[ \t]*\(")
_SRC_SIGNATURE = r"(?:" + _SRC_KW + "|" + _SRC_ARROW + "|" + _SRC_CLIKE + r")"
# A unit starts at a *top-level* signature: a blank line, comment/decorator lines, then a
# signature at column 0.  Nested definitions (methods, inner functions) do not start units,
# so a small top-level definition is one unit and is never split; a top-level definition
# larger than a chunk is cut preferably before a nested one (_CUT_SIG).
_SRC_BOUNDARY = re.compile(          # one blank line per try: linear on long blank runs
    r"\n[ \t]*\n(?=" + _SRC_COMMENTS + r"(?:typedef[ \t]+)?" + _SRC_MODS + _SRC_SIGNATURE + ")",
    re.M)
_SRC_NESTED = r"\n[ \t]*\n(?=" + _SRC_COMMENTS + r"[ \t]*+" + _SRC_MODS + _SRC_SIGNATURE + ")"
# String and comment openers, to find triple-quoted strings and block comments: their
# lines never start a unit (a "def" line in a docstring is text, not a definition).
_SRC_SKIP = r"""#[^\n]*+|//[^\n]*+|"(?:[^"\\\n]|\\.)*+"|'(?:[^'\\\n]|\\.)*+'"""
_SRC_TRIPLE = (r'"""(?:[^"\\]|\\.|"(?!""))*+(?:"""|\Z)'
               r"|'''(?:[^'\\]|\\.|'(?!''))*+(?:'''|\Z)")
_SRC_SCAN = re.compile(r"(?P<multi>" + _SRC_TRIPLE + r"|/\*(?:[^*]|\*(?!/))*+\*/)|" + _SRC_SKIP)
_SRC_SCAN_NO_BLOCK = re.compile(r"(?P<multi>" + _SRC_TRIPLE + r")|" + _SRC_SKIP)


def _last(pattern: str) -> re.Pattern:
    """Regex whose match ends at the *last* boundary in a window.

    ``(?s:.*)`` runs to the window end and backtracks, so finding the last cut
    costs the distance from the end, not a scan of every match.
    """
    return re.compile(r"(?s:.*)(?:" + pattern + ")")


_CUT_PARA = _last(r"\n[ \t]*\n\s*")
_CUT_SENT_EOL = _last(r"[.!?\u2026][\"'\u201d\u2019)\]]*[ \t]*\n")
_CUT_ITEM = _last(r"\n(?=[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t])")
_CUT_SENT = _last(r"[.!?\u2026][\"'\u201d\u2019)\]]*\s+|[\u3002\uff01\uff1f]\s*")
_CUT_LINE = _last(r"\n")
_CUT_CLAUSE = _last(r"[,;:][\"'\u201d\u2019)\]]*\s+|\s[-\u2013\u2014]{1,2}\s+")
_CUT_WORD = _last(r"\s+")
_CUT_SIG = _last(_SRC_NESTED)
# A top-level statement starts after a blank line at column 0 (not a closing bracket, not
# a continuation such as else/except or #else/#endif): never inside an indented body.
_SRC_STMT = (r"\n[ \t]*\n(?=[A-Za-z_$@#/\"'*])(?!(?:else|elif|except|finally|catch)\b"
             r"|#[ \t]*(?:else|elif|endif)\b)")
_CUT_STMT = _last(_SRC_STMT)
_SRC_COL0 = (r"\n(?=[A-Za-z_$@#/\"'*])(?!(?:else|elif|except|finally|catch)\b"
             r"|#[ \t]*(?:else|elif|endif)\b)")
_CUT_COL0 = _last(_SRC_COL0)
_FWD_TOP = re.compile(_SRC_STMT + "|" + _SRC_COL0)
_PREPROC = re.compile(r"#[ \t]*(?:define|undef|include|if|ifdef|ifndef|elif|else|endif|pragma|"
                      r"error|warning|line)\b")
_FWD_STMT = re.compile(_SRC_STMT)
_FWD_SENT = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*\s+|[\u3002\uff01\uff1f]\s*")
_FWD_PARA = re.compile(r"\n[ \t]*\n\s*")
_LAST_TR = re.compile(r"(?s:.*)(?=<tr[\s>])", re.I)

_TEXT_LEVELS = (_CUT_PARA, _CUT_SENT_EOL, _CUT_LINE, _CUT_SENT, _CUT_CLAUSE, _CUT_WORD)
_LIST_LEVELS = (_CUT_ITEM,) + _TEXT_LEVELS
_CODE_LEVELS = (_CUT_PARA, _CUT_LINE, _CUT_WORD)
_SRC_LEVELS = (_CUT_STMT, _CUT_SIG, _CUT_COL0) + _CODE_LEVELS
# Source cuts at the start of a statement: never taken inside a string or block comment.
_SRC_STRUCT = frozenset({_CUT_STMT, _CUT_SIG, _CUT_COL0, _CUT_PARA})
_WORD_LEVELS = (_CUT_WORD,)
# Levels that cut inside a line: used only where the line itself is larger than a chunk.
_MIDLINE = frozenset({_CUT_SENT, _CUT_CLAUSE, _CUT_WORD})
# Levels that keep whole lines, for filling the rest of an analysis chunk with part of a unit.
_FILL_LEVELS = (_CUT_PARA, _CUT_ITEM, _CUT_SENT_EOL, _CUT_LINE)


# ---------------------------------------------------------------- scanning

def _tile(units: Iterable[tuple[int, str, object]], n: int) -> Iterator[tuple]:
    """Turn unit starts into (start, end, type, info) that tile [0, n).

    Deriving every end from the next start makes exact coverage structural.
    """
    prev = None
    for start, typ, info in units:
        if prev is None:
            prev = (0, typ, info)
        elif start > prev[0]:
            yield (prev[0], start, prev[1], prev[2])
            prev = (start, typ, info)
    if prev is not None:
        yield (prev[0], n, prev[1], prev[2])


def _is_caption(t: str, s: int, e: int) -> bool:
    """One short line that names a table ("Table 2: ...") or ends with a colon
    ("**Inference:**"), so it travels with the table it introduces."""
    if e - s > 400:
        return False
    line = t[s:e].strip()
    return bool(line) and "\n" not in line and (
        _CAPTION.match(line) is not None or line.rstrip("*_ ").endswith(":"))


def _with_captions(t: str, units: Iterator[tuple]) -> Iterator[tuple]:
    """Join a caption paragraph to the table right after it (seed 002 Tables).

    Each paragraph waits one unit; the caption test runs only before a table.
    """
    held = None
    for u in units:
        if held is not None:
            if u[2] == _T and _is_caption(t, held[0], held[1]):
                yield (held[0], u[1], _T, u[3])
                held = None
                continue
            yield held
            held = None
        if u[2] == _P:
            held = u
        else:
            yield u
    if held is not None:
        yield held


def _raw_blocks(t: str) -> Iterator[tuple[int, int, str, object]]:
    """Fenced code blocks and raw <table> blocks, in order: units that may hold
    blank lines, so they are found before the text is cut at blank lines."""
    n, pos, tables = len(t), 0, True
    while True:
        m = _RAW_OPEN.search(t, pos)
        if m is None:
            return
        s = m.start()
        line_end = t.find("\n", m.end())
        line_end = n if line_end < 0 else line_end + 1
        if m.group(3) is None:
            fence = m.group(1) or m.group(2)
            close = re.compile(r"^ {0,3}" + re.escape(fence) + fence[0] + r"*[ \t]*$", re.M)
            c = close.search(t, line_end)
            pos = _BLANKLINES.match(t, n if c is None else min(n, c.end() + 1)).end()
            yield s, pos, _C, None
            continue
        c = _TABLE_CLOSE.search(t, m.end()) if tables else None
        if c is None:
            tables = False                 # no close later on either: stop looking
            pos = line_end
            continue
        first = _TR.search(t, s, c.end())
        second = _TR.search(t, first.end(), c.end()) if first else None
        pos = _BLANKLINES.match(t, c.end()).end()
        yield s, pos, _T, (s, second.start() if second else s, True)


def _plain_units(t: str, p: int, ce: int, markdown: bool) -> Iterator[tuple]:
    """Classify one heading-free block part: table, setext heading, list, paragraph."""
    if t.find("|", p, ce) >= 0:
        dm = _TDELIM.search(t, p, ce)
        if dm is not None and dm.start() > p:
            hdr = t.rfind("\n", p, dm.start() - 1)
            hdr = p if hdr < 0 else hdr + 1
            if t.find("|", hdr, dm.start()) >= 0:
                body = min(dm.end() + 1, len(t))
                start = hdr
                if hdr > p:
                    if _is_caption(t, p, hdr):
                        start = p
                    else:
                        yield (p, _L if _LIST.match(t, p) else _P, None)
                yield (start, _T, (hdr, body, False))
                return
    if markdown:
        nl = t.find("\n", p, ce)
        if nl > p and not _LIST.match(t, p):
            sm = _SETEXT.match(t, nl + 1, ce)
            if sm is not None and t[p:nl].strip():
                level = 1 if sm.group(1)[0] == "=" else 2
                yield (p, _H, (level, t[p:nl].strip(), sm.end(1)))
                if sm.end() < ce:
                    yield from _plain_units(t, sm.end(), ce, markdown)
                return
    yield (p, _L if _LIST.match(t, p) else _P, None)


def _atx_title(raw: str) -> str:
    """Heading text without the optional closing #s (str methods: no regex backtracking)."""
    title = raw.strip()
    bare = title.rstrip("#")
    if bare != title and (not bare or bare[-1] in " \t"):
        title = bare.strip()
    return title


def _block_units(t: str, s: int, ce: int, markdown: bool) -> Iterator[tuple]:
    """Units of one blank-line block: ATX headings split it into parts."""
    cs = _BLANKLINES.match(t, s, ce).end()
    if cs >= ce:
        yield (s, _P, None)
        return
    p = cs
    if markdown and t.find("#", cs, ce) >= 0:
        for hm in _ATX.finditer(t, cs, ce):
            if hm.start() > p:
                yield from _plain_units(t, p, hm.start(), markdown)
            level = len(hm.group(1))
            yield (hm.start(), _H, (level, _atx_title(hm.group(2) or ""), hm.end()))
            p = hm.end() + 1
        if p >= ce:
            return
    yield from _plain_units(t, p, ce, markdown)


def _plain_block(t: str, s: int, e: int, markdown: bool) -> bool:
    """True if a block cannot hold a heading or table: it is one unit."""
    if t.find("|", s, e) >= 0 or (markdown and t.find("#", s, e) >= 0):
        return False
    nl = t.find("\n", s, e)
    return not markdown or nl < 0 or not t.startswith(("=", "-", " "), nl + 1)


def _region_units(t: str, a: int, b: int, markdown: bool) -> Iterator[tuple]:
    """Blank-line blocks of a region that holds no fenced block."""
    start = a
    for m in _BLANK.finditer(t, a, b):
        ms = m.start()
        if ms > start:
            if start and _plain_block(t, start, ms, markdown):   # fast path, most blocks
                yield (start, _L if _LIST.match(t, start) else _P, None)
            else:
                yield from _block_units(t, start, ms, markdown)
            start = m.end()
    if start < b:
        yield from _block_units(t, start, b, markdown)


def _text_units(t: str, markdown: bool) -> Iterator[tuple]:
    """Unit starts for prose/Markdown: raw blocks, and blank-line blocks between them."""
    pos = 0
    for rs, re_, typ, info in (_raw_blocks(t) if markdown else ()):
        if rs > pos:
            yield from _region_units(t, pos, rs, markdown)
        yield (rs, typ, info)
        pos = re_
    if pos < len(t):
        yield from _region_units(t, pos, len(t), markdown)


def _quoted_regions(t: str) -> list[tuple[int, int]]:
    """[start, end) of multi-line triple-quoted strings and block comments in source.

    One regex pass (the loop runs per string or comment, not per character): ``#`` and
    ``//`` comments and one-line strings are matched too, so a quote inside them opens
    nothing.  An unclosed triple quote runs to the end of the text; an unclosed ``/*`` is
    not a comment.
    """
    if '"""' not in t and "'''" not in t and "/*" not in t:
        return []
    scanner = _SRC_SCAN if "*/" in t else _SRC_SCAN_NO_BLOCK
    out = []
    for m in scanner.finditer(t):
        if m.lastgroup == "multi":
            s, e = m.span()
            if t.find("\n", s, e) >= 0:
                out.append((s, e))
    return out


def _source_units(t: str, regions: list[tuple[int, int]] | None = None) -> Iterator[tuple]:
    """Unit starts for source: a blank line followed by a top-level signature (seed 000),
    never inside a triple-quoted string or a block comment."""
    yield (0, _B, None)
    regions = _quoted_regions(t) if regions is None else regions
    starts = [r[0] for r in regions]
    for m in _SRC_BOUNDARY.finditer(t):
        p = m.end()
        i = bisect.bisect_right(starts, p) - 1
        if i >= 0 and regions[i][0] < p < regions[i][1]:
            continue
        yield (p, _B, None)


def _units(doc_text: str, kind: str, regions: list[tuple[int, int]] | None = None) -> Iterator[tuple]:
    """Tiled units for a document kind (``regions``: source strings/comments, if known)."""
    if kind == "source":
        return _tile(_source_units(doc_text, regions), len(doc_text))
    tiled = _tile(_text_units(doc_text, kind != "prose"), len(doc_text))
    return _with_captions(doc_text, tiled)
