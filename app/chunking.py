"""Split a document into chunks for Harvey's chunked analysis (map phase).

Design: seed 000 ("Chunking strategy", D3) and seed 002 ("Chunking").  Where
the two differ the stricter rule is used.

Algorithm
---------
1. **Load.**  A file is read as bytes, refused if binary (NUL bytes or mostly
   control bytes), decoded as UTF-8 (else replacement or Latin-1 with a note on
   the document), line endings are normalised to ``\\n``.  HTML is reduced to
   text with BeautifulSoup: headings become ``#`` lines, ``<pre>`` becomes a
   fenced block, tables become pipe tables.  ``Document.text`` is the text every
   offset refers to.
2. **Units.**  A scanner walks the text with regular expressions (no Python
   loop over characters) and yields units that tile the text exactly, each
   unit owning the whitespace after it:

   * prose / Markdown / HTML: paragraphs (blank-line separated), ATX and setext
     headings, lists, fenced code blocks, pipe tables, raw ``<table>`` blocks; a
     one-line caption ("Table 3: ..." or a line ending in ``:``) just before a
     table joins the table.  Prose (``.txt`` and unknown extensions) has no
     headings or fences.
   * source: blocks that start after a blank line followed by a *top-level*
     signature line at column 0 (``def``, ``class``, ``func``, ``fn``, ``impl``,
     C-like ``type name(`` ...), never inside a triple-quoted string or a block
     comment; leading comment/decorator lines go with the block they describe.
     Nested definitions (methods) do not start blocks.
3. **Pack.**  Units go into the open chunk in reading order until the next one
   would pass the size.  Budgets are kept in UTF-8 bytes, so the test
   ``estimate_tokens(chunk.text) <= size_tokens`` holds exactly.  With
   ``purpose="analysis"`` (the default: every chunk is one model call) a
   paragraph or list that fits a chunk but not the rest of the open one fills it
   up to a line end first, and a source block up to its last top-level statement
   start (never inside a definition).
4. **Split.**  A unit larger than a whole chunk is cut at the best boundary
   that fits: paragraph, (list item,) sentence end at a line end, line, then
   (only inside a line larger than a chunk) sentence, clause, word; a cut
   inside a word happens only when one word is larger than a whole chunk.
   Fenced code is cut at blank lines, then lines, then words; source at
   top-level statements, nested signatures, column-0 lines, blank lines, lines,
   and never inside a top-level statement that fits a chunk.  A higher-level cut
   is taken only if it keeps a quarter of the room, so a stray early paragraph
   break does not make a near-empty chunk.  Such a unit starts in the open
   chunk when a quarter of it is free (it is cut anyway).
5. **Merge.**  A heading starts a new section.  Retrieval (seed 002): if the
   open chunk holds fewer than ``min_tokens`` of its own text it carries on into
   the next section (the heading goes into the chunk text); otherwise the
   heading starts a new chunk.  Analysis (seed 000, issue 14): the heading ends
   the open chunk only when it holds ``fill`` of the room (0.75) *and* the next
   section does not fit in what is left.  ``Chunk.sections`` lists the heading
   path of every section a chunk holds (``chunk_label`` puts them in the map
   prompt).  A heading stays with the first unit of its section unless the two
   together are larger than a chunk.
6. **Tables.**  A table that does not fit becomes row groups; each group
   repeats the header row, the first starts with the caption.  Retrieval: a
   table never shares a chunk with text.  Analysis: it joins the open chunk
   when it fits or the chunk is not yet filled, and text may follow it.
7. **Overlap** (seed 000).  Each chunk (except after tables) starts with the
   previous chunk's last paragraph (``paragraph``; in source the last block)
   or last sentence (``sentence``; in code the last line), at most a fifteenth
   of the budget (analysis: a thirtieth); a paragraph that is too long shrinks
   to its last sentences.
   A chunk that starts inside a section also gets that section's heading line
   (``carry_heading``).  Both count toward the size and are dropped when they
   would force a unit that fits on its own to be cut.

Offsets: ``[body_start, end)`` of consecutive chunks tile ``doc.text``;
``[start, body_start)`` is the overlap; ``chunk.text`` is ``prefix +
doc.text[start:end]`` where the prefix is empty, a carried heading, or a
repeated table header.

Everything is deterministic; ids come from the document content, its kind, the
settings fingerprint (which covers the chunker version and table rules) and the
chunk number.
"""
from __future__ import annotations

import bisect
import collections
import dataclasses
import hashlib
import json
import math
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple

from .errors import DocumentError

__all__ = [
    "CHUNKER_NAME", "CHUNKER_VERSION", "TABLE_RULES", "KINDS", "OVERLAP_MODES",
    "ChunkingError", "DocumentNotFoundError", "BinaryDocumentError",
    "ChunkSettings", "Document", "Chunk", "ChunkPlan",
    "estimate_tokens", "kind_for_path", "boundary_for_kind", "html_to_text",
    "make_document", "read_document", "chunk_document", "chunk_text",
    "chunk_file", "plan_document", "plan_text", "plan_file",
    "PURPOSES", "ANALYSIS_FILL", "LABEL_MAX_BYTES", "chunk_label", "map_prompt",
    "map_prompt_overhead",
]

CHUNKER_NAME = "harvey-web.chunking"
CHUNKER_VERSION = 3      # bump when the same input would give other chunks
TABLE_RULES = 2          # bump when table rendering / grouping rules change
KINDS = ("prose", "markdown", "html", "source")
OVERLAP_MODES = ("paragraph", "sentence", "none")
PURPOSES = ("analysis", "retrieval")
ANALYSIS_FILL = 0.75     # seed 000: recombine until a chunk is about 75% full
OVERLAP_SHARE = 15       # overlap is at most budget // 15 (keeps a whole run under 1.15x the document)
ANALYSIS_OVERLAP_SHARE = 30   # analysis: every chunk is a model call, so a shorter overlap
HEADING_SHARE = 8        # a carried heading is at most budget // 8
MIN_BUDGET_BYTES = 16    # below this not even a short word fits

MARKDOWN_EXTENSIONS = frozenset({".md", ".markdown", ".mdown", ".mkd", ".mkdn", ".mdx"})
HTML_EXTENSIONS = frozenset({".html", ".htm", ".xhtml"})
PROSE_EXTENSIONS = frozenset({".txt", ".text", ".rst", ".tex", ".org", ".adoc"})
SOURCE_EXTENSIONS = frozenset({
    ".py", ".pyi", ".pyx", ".go", ".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs",
    ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".m", ".mm",
    ".java", ".kt", ".kts", ".scala", ".groovy", ".rs", ".rb", ".php", ".cs",
    ".fs", ".swift", ".lua", ".pl", ".pm", ".sh", ".bash", ".zsh", ".fish",
    ".ps1", ".r", ".jl", ".dart", ".ex", ".exs", ".erl", ".hrl", ".hs", ".ml",
    ".mli", ".clj", ".cljs", ".el", ".lisp", ".scm", ".sql", ".vue", ".svelte",
    ".zig", ".nim", ".v", ".sv", ".vhd", ".f90", ".for", ".asm", ".s",
    ".css", ".scss", ".less", ".json", ".yaml", ".yml", ".toml", ".ini",
    ".cfg", ".conf", ".xml", ".proto", ".gradle", ".cmake", ".mk", ".tf",
})


# ---------------------------------------------------------------- errors

class ChunkingError(DocumentError):
    """Base class: the document cannot be chunked (the app shows the message)."""


class DocumentNotFoundError(ChunkingError, FileNotFoundError):
    """The path does not name a readable file."""


class BinaryDocumentError(ChunkingError):
    """The file holds binary data, not text; sending it to a model is useless."""


# ---------------------------------------------------------------- tokens

def _utf8_len(text: str) -> int:
    """UTF-8 length; ``isascii`` is O(1) so ASCII text is never copied."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def estimate_tokens(text: str, bytes_per_token: float = 4.0) -> int:
    """Estimate tokens as ceil(UTF-8 bytes / bytes_per_token).

    Seed 000 uses bytes/4 because the size is known before reading the file;
    the app passes a calibrated divisor.  Lone surrogates count 3 bytes rather
    than raising, so any ``str`` can be estimated.
    """
    if bytes_per_token <= 0:
        raise ValueError("bytes_per_token must be positive")
    return math.ceil(_utf8_len(text) / bytes_per_token)


# ---------------------------------------------------------------- settings

@dataclass(frozen=True)
class ChunkSettings:
    """How to chunk.  Part of every fingerprint, so changing it changes ids.

    ``purpose`` chooses between the two packing designs:

    * ``"analysis"`` (default; seed 000, issue 14): every chunk is one model call, so
      chunks fill the room.  A heading ends the open chunk only once it holds ``fill``
      of the room (default 0.75, seed 000's "about 75%"); otherwise the section carries
      on in the same chunk, its heading line inside the text, and ``Chunk.sections``
      lists the heading path of every section the chunk holds (``chunk_label``).
      Tables may share a chunk with text; a table that does not fit is cut between
      rows, every part repeating the header.
    * ``"retrieval"`` (seed 002): section-first.  A heading ends the open chunk once it
      holds ``min_tokens`` (default a quarter of the size); tables are chunks of their
      own.
    """

    size_tokens: int = 1500
    min_tokens: int | None = None
    overlap: str = "paragraph"
    bytes_per_token: float = 4.0
    carry_heading: bool = True
    purpose: str = "analysis"
    fill: float | None = None

    def __post_init__(self) -> None:
        """Reject settings that could not keep the size invariant."""
        if isinstance(self.size_tokens, bool) or not isinstance(self.size_tokens, int):
            raise ValueError("size_tokens must be an int")
        bpt = self.bytes_per_token
        if not isinstance(bpt, (int, float)) or not math.isfinite(bpt) or bpt <= 0:
            raise ValueError("bytes_per_token must be a positive number")
        if self.overlap not in OVERLAP_MODES:
            raise ValueError(f"overlap must be one of {OVERLAP_MODES}")
        if self.purpose not in PURPOSES:
            raise ValueError(f"purpose must be one of {PURPOSES}")
        if self.fill is not None and not (isinstance(self.fill, (int, float))
                                          and 0 <= self.fill <= 1):
            raise ValueError("fill must be a number in [0, 1]")
        if self.min_tokens is not None and not 0 <= self.min_tokens <= self.size_tokens:
            raise ValueError("min_tokens must be between 0 and size_tokens")
        if self.size_tokens < 1 or self.max_bytes < MIN_BUDGET_BYTES:
            raise ValueError(f"size_tokens too small: a chunk needs at least "
                             f"{MIN_BUDGET_BYTES} bytes")

    @property
    def min_size(self) -> int:
        """Effective min_tokens: seed 002 defaults it to a quarter of the size."""
        return self.size_tokens // 4 if self.min_tokens is None else self.min_tokens

    @property
    def fill_share(self) -> float:
        """Share of the room a chunk must hold before a heading may end it.

        Analysis: ``fill`` (default ``ANALYSIS_FILL``).  Retrieval: ``fill`` if given,
        else ``min_size / size_tokens`` (seed 002's rule, counted on the chunk's own text).
        """
        if self.fill is not None:
            return float(self.fill)
        if self.purpose == "analysis":
            return ANALYSIS_FILL
        return self.min_size / self.size_tokens

    @property
    def max_bytes(self) -> int:
        """Largest UTF-8 length whose estimate still fits size_tokens.

        Working in bytes makes the size check exact and additive.
        """
        bpt, size = self.bytes_per_token, self.size_tokens
        b = max(0, int(size * bpt))
        while math.ceil((b + 1) / bpt) <= size:
            b += 1
        while b > 0 and math.ceil(b / bpt) > size:
            b -= 1
        return b

    @property
    def fingerprint(self) -> str:
        """Hash of chunker name, version, table rules and settings (seed 002)."""
        blob = json.dumps({
            "chunker": CHUNKER_NAME, "version": CHUNKER_VERSION,
            "table_rules": TABLE_RULES, "size_tokens": self.size_tokens,
            "min_tokens": self.min_size, "overlap": self.overlap,
            "bytes_per_token": repr(float(self.bytes_per_token)),
            "carry_heading": bool(self.carry_heading),
            "purpose": self.purpose, "fill": repr(self.fill_share),
        }, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- records

@dataclass(frozen=True)
class Document:
    """Text to chunk plus what the session record needs to say about it."""

    text: str = field(repr=False)
    kind: str
    boundary: str          # "paragraph" or "block" (seed 000)
    path: str | None
    content_hash: str      # sha256 of the normalised text
    fingerprint: str       # content + kind + settings fingerprint
    settings: ChunkSettings
    decode_note: str | None = None
    source: object = field(default=None, repr=False, compare=False)   # documents.Extracted for PDF/DOCX

    @property
    def tokens(self) -> int:
        """Estimated tokens of the whole text (for the overflow alert)."""
        return estimate_tokens(self.text, self.settings.bytes_per_token)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece sent to the model; offsets point into ``Document.text``."""

    index: int
    start: int
    body_start: int
    end: int
    text: str
    heading_path: tuple[str, ...]
    kind: str              # "text", "table" or "code"
    tokens: int
    id: str
    fingerprint: str       # settings fingerprint (chunker + version + settings)
    # heading path of every section whose text the chunk holds, in order (the first is
    # ``heading_path``; an empty path is text before the first heading)
    sections: tuple[tuple[str, ...], ...] = ()
    # 1-based lines of doc.text that the chunk's own part [body_start, end) spans
    first_line: int = 0
    last_line: int = 0


@dataclass(frozen=True)
class ChunkPlan:
    """Chunk count without building chunk texts, for the overflow alert card."""

    path: str | None
    kind: str
    chunks: int
    tokens: int
    size_tokens: int
    largest_tokens: int
    chunk_tokens: tuple[int, ...] = ()     # estimated tokens of each chunk's text

    @property
    def summary(self) -> str:
        """Sentence for the alert card."""
        name = os.path.basename(self.path) if self.path else "This text"
        noun = "chunk" if self.chunks == 1 else "chunks"
        return f"{name} makes {self.chunks} {noun} of ~{self.size_tokens} tokens"


class _Span(NamedTuple):
    """A chunk before its text is built (plan_document needs no texts)."""

    start: int
    body_start: int
    end: int
    prefix: str
    heading_path: tuple[str, ...]
    kind: str
    nbytes: int
    sections: tuple[tuple[str, ...], ...]


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


# ---------------------------------------------------------------- kinds

def kind_for_path(path: str | os.PathLike) -> str:
    """Document kind from the extension; unknown extensions are prose (seed 000)."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext in MARKDOWN_EXTENSIONS:
        return "markdown"
    if ext in HTML_EXTENSIONS:
        return "html"
    if ext in SOURCE_EXTENSIONS:
        return "source"
    return "prose"


def boundary_for_kind(kind: str) -> str:
    """Boundary name for the session record: paragraph for text, block for code."""
    return "block" if kind == "source" else "paragraph"


# ---------------------------------------------------------------- documents

def _normalise_newlines(text: str) -> str:
    """CRLF and lone CR become LF; untouched text is not copied."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _content_hash(text: str, raw: bytes | None = None) -> str:
    """sha256 of the text's UTF-8, in 64 KB slices to avoid a full-size copy;
    ``raw`` (the file's bytes, known to equal it) is hashed as it is."""
    if raw is not None:
        return hashlib.sha256(raw).hexdigest()
    h = hashlib.sha256()
    step = 1 << 16
    for i in range(0, len(text), step):
        h.update(text[i:i + step].encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def make_document(text: str, kind: str = "prose", settings: ChunkSettings | None = None,
                  path: str | os.PathLike | None = None,
                  decode_note: str | None = None) -> Document:
    """Build the Document whose text all chunk offsets refer to.

    HTML is reduced to text here, so ``kind="html"`` offsets point into the
    extracted text, not the markup.
    """
    return _document(text, kind, settings, path, decode_note, None)


def _document(text: str, kind: str, settings: ChunkSettings | None,
              path: str | os.PathLike | None, note: str | None,
              raw: bytes | None) -> Document:
    """make_document, plus the file bytes when they equal the final text."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    settings = settings or ChunkSettings()
    text = _normalise_newlines(text)
    if kind == "html":
        text = html_to_text(text)
    chash = _content_hash(text, raw)
    fp = hashlib.sha256(f"{chash}|{kind}|{settings.fingerprint}".encode()).hexdigest()[:16]
    return Document(text=text, kind=kind, boundary=boundary_for_kind(kind),
                    path=None if path is None else os.fspath(path),
                    content_hash=chash, fingerprint=fp, settings=settings,
                    decode_note=note)


_TEXT_BYTES = bytes(range(32, 256)) + b"\t\n\r\f\b\x1b"


def _decode(data: bytes, path: str) -> tuple[str, str | None]:
    """Bytes to text: UTF-8 (BOMs honoured), else replacement or Latin-1.

    Binary data is refused because a model can do nothing useful with it.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16"), "decoded as UTF-16"
        except UnicodeDecodeError:
            pass
    if b"\x00" in data:
        raise BinaryDocumentError(f"{path}: binary file (NUL bytes), not text")
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        pass
    sample = data[:65536]
    if len(sample.translate(None, _TEXT_BYTES)) * 10 > len(sample):
        raise BinaryDocumentError(f"{path}: binary file (control bytes), not text")
    text = data.decode("utf-8", "replace")
    if re.search("[^\x00-\x7f\ufffd]", text):
        bad = text.count("\ufffd") - data.count(b"\xef\xbf\xbd")
        return text, f"not valid UTF-8: {bad} invalid byte sequence(s) replaced"
    return data.decode("latin-1"), "not valid UTF-8: decoded as Latin-1"


def read_document(path: str | os.PathLike, settings: ChunkSettings | None = None,
                  kind: str | None = None) -> Document:
    """Read a file into a Document, raising ChunkingError subclasses on failure.

    PDF and Word files go through their loaders (``app.documents``) first: the
    Document's text is what they extracted and ``source`` keeps their structure.
    """
    spath = os.fspath(path)
    from . import documents

    if documents.format_for_path(spath) and os.path.isfile(spath):
        source = documents.extract(spath)
        doc = _document(source.text, kind or source.kind, settings, spath, None, None)
        return dataclasses.replace(doc, source=source)
    try:
        with open(spath, "rb") as fh:
            data = fh.read()
    except FileNotFoundError as exc:
        raise DocumentNotFoundError(f"{spath}: no such file") from exc
    except IsADirectoryError as exc:
        raise ChunkingError(f"{spath}: is a directory, not a file") from exc
    except OSError as exc:
        raise ChunkingError(f"{spath}: cannot read ({exc.strerror or exc})") from exc
    text, note = _decode(data, spath)
    kind = kind or kind_for_path(spath)
    same = (note is None and kind != "html" and not data.startswith(b"\xef\xbb\xbf")
            and b"\r" not in data)          # then data == text.encode(): hash it directly
    return _document(text, kind, settings, spath, note, data if same else None)


SAMPLE_BYTES = 256 * 1024     # a bounded sample: enough to tell a file's kind and its text per byte


@dataclass(frozen=True)
class Measure:
    """What a file's text will be, told without extracting it: its estimated UTF-8 bytes, its
    chunker kind, a sample of its text (to choose the calibration) and a PDF's page count."""

    text_bytes: int
    kind: str
    sample: str = field(repr=False)
    pages: int = 0


def measure(path: str | os.PathLike) -> Measure:
    """Size a file before anything reads it whole (issue 23): a 150 MB file named in a chat
    must not be read into memory to learn it is too large.  Plain text: its size and a
    sample of its start; HTML: the sample's share of text; PDF and Word: their loaders'
    bounded samples (``documents.measure``)."""
    spath = os.fspath(path)
    from . import documents

    if documents.format_for_path(spath) and os.path.isfile(spath):
        text_bytes, sample, pages = documents.measure(spath)
        kind = "markdown" if documents.format_for_path(spath) == "docx" else "prose"
        return Measure(text_bytes, kind, sample, pages)
    size = os.stat(spath).st_size
    with open(spath, "rb") as fh:
        head = fh.read(SAMPLE_BYTES)
    sample = head.decode("utf-8", errors="ignore")
    kind = kind_for_path(spath)
    if kind != "html" or not head:
        return Measure(size, kind, sample)
    text = html_to_text(sample)
    return Measure(math.ceil(size * len(text.encode()) / len(head)), kind, text)


def with_settings(doc: Document, settings: ChunkSettings) -> Document:
    """The same text under other chunk settings, without reading the file again (the fingerprint
    includes the settings, so it is computed anew)."""
    fp = hashlib.sha256(f"{doc.content_hash}|{doc.kind}|{settings.fingerprint}".encode()).hexdigest()[:16]
    return dataclasses.replace(doc, settings=settings, fingerprint=fp)


# ---------------------------------------------------------------- HTML

_BLOCK_TAGS = frozenset({
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside",
    "blockquote", "address", "figure", "figcaption", "form", "fieldset",
    "details", "summary", "dl", "dt", "dd", "hr", "ul", "ol", "li", "body",
    "center", "caption", "legend", "menu", "html",
})
_DROP_TAGS = ("script", "style", "noscript", "template", "head", "svg", "iframe")
_WS = re.compile(r"\s+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _cell_text(tag) -> str:
    """Text of a table cell on one line, with pipes escaped for a pipe table."""
    return _WS.sub(" ", tag.get_text(" ")).strip().replace("|", "\\|")


def _table_to_pipe(table) -> str:
    """Render an HTML table as a pipe table so it is scanned as a table unit."""
    rows = []
    for tr in table.find_all("tr"):
        if tr.find_parent("table") is not table:
            continue
        cells = [_cell_text(c) for c in tr.find_all(["td", "th"], recursive=False)]
        if cells:
            rows.append(cells)
    cap = table.find("caption")
    caption = _WS.sub(" ", cap.get_text(" ")).strip() if cap else ""
    if not rows:
        return caption
    width = max(len(r) for r in rows)
    lines = [caption] if caption else []
    for i, row in enumerate(rows):
        row = row + [""] * (width - len(row))
        lines.append("| " + " | ".join(row) + " |")
        if i == 0:
            lines.append("|" + "|".join(["---"] * width) + "|")
    return "\n".join(lines)


def _pre_block(tag) -> str:
    """A <pre> as a fenced block, fence longer than any backtick run inside."""
    body = tag.get_text().strip("\n")
    runs = [len(m) for m in re.findall(r"`+", body)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}\n{body}\n{fence}"


class _HtmlBlocks:
    """Block texts of a parsed HTML tree, walked with an explicit stack so deep
    nesting cannot hit the recursion limit."""

    def __init__(self) -> None:
        self.blocks: list[tuple[str, str]] = []
        self.buf: list[str] = []
        self.item: str | None = None

    def flush(self) -> None:
        """End the current paragraph (or list item) at a block boundary."""
        text = re.sub(r" *\n *", "\n", "".join(self.buf)).strip()
        self.buf.clear()
        if text:
            kind = "p" if self.item is None else "li"
            self.blocks.append((kind, (self.item or "") + text))
            self.item = None

    def leaf(self, node, name: str) -> bool:
        """Render headings, <pre>, tables and <br>; True if children are done."""
        if name == "br":
            self.buf.append("\n")
        elif len(name) == 2 and name[0] == "h" and name[1] in "123456":
            self.flush()
            title = _WS.sub(" ", node.get_text(" ")).strip()
            if title:
                self.blocks.append(("h", "#" * int(name[1]) + " " + title))
        elif name in ("pre", "table"):
            self.flush()
            rendered = _pre_block(node) if name == "pre" else _table_to_pipe(node)
            if rendered:
                self.blocks.append(("p", rendered))
        else:
            return False
        return True

    def walk(self, soup, string_types, skip_types, tag_type) -> None:
        """Visit nodes in document order, flushing text at block boundaries."""
        stack: list[tuple[object, bool]] = [(soup, False)]
        while stack:
            node, leaving = stack.pop()
            if leaving:
                self.flush()
            elif isinstance(node, string_types):
                if not isinstance(node, skip_types):
                    self.buf.append(_WS.sub(" ", str(node)))
            elif isinstance(node, tag_type):
                name = (node.name or "").lower()
                if self.leaf(node, name):
                    continue
                if name in _BLOCK_TAGS or node is soup:
                    self.flush()
                    if name == "li":
                        depth = sum(1 for p in node.parents if p.name in ("ul", "ol")) - 1
                        self.item = "  " * max(depth, 0) + "- "
                    stack.append((node, True))
                stack.extend((child, False) for child in reversed(node.contents))
        self.flush()

    def text(self) -> str:
        """Blocks joined by blank lines; list items of one list by newlines."""
        out: list[str] = []
        for i, (kind, text) in enumerate(self.blocks):
            if i:
                same_list = kind == "li" and self.blocks[i - 1][0] == "li"
                out.append("\n" if same_list else "\n\n")
            out.append(text)
        return "".join(out) + ("\n" if out else "")


def html_to_text(markup: str) -> str:
    """Reduce HTML to Markdown-like text that keeps headings, lists and tables.

    Chunks must refer to readable text; keeping ``#`` headings and pipe tables
    lets the one scanner find sections and table units in HTML too.  bs4 is
    imported here so importing this module stays cheap.
    """
    from bs4 import BeautifulSoup, NavigableString, Tag  # noqa: PLC0415
    from bs4.element import PreformattedString  # noqa: PLC0415

    markup = _SURROGATE.sub("\ufffd", markup)   # the HTML parser cannot take lone surrogates
    with warnings.catch_warnings():       # "looks like a URL/filename" and XML warnings
        warnings.simplefilter("ignore")
        soup = BeautifulSoup(markup, "html.parser")
    for tag in soup.find_all(list(_DROP_TAGS)):
        tag.decompose()
    blocks = _HtmlBlocks()
    blocks.walk(soup, NavigableString, PreformattedString, Tag)
    return blocks.text()


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


# ---------------------------------------------------------------- packing

class _Peek:
    """An iterator with look-ahead (a deque holds what was peeked, at most a chunk's units)."""

    def __init__(self, it: Iterable[tuple]) -> None:
        self.it = iter(it)
        self.buf: collections.deque = collections.deque()

    def __iter__(self) -> "_Peek":
        return self

    def __next__(self) -> tuple:
        return self.buf.popleft() if self.buf else next(self.it)

    def peek(self, i: int) -> tuple | None:
        """The unit i places ahead (0: the next one), or None past the end."""
        while len(self.buf) <= i:
            try:
                self.buf.append(next(self.it))
            except StopIteration:
                return None
        return self.buf[i]


class _Packer:
    """Greedy packer over tiled units; keeps byte counts so sizes are exact."""

    def __init__(self, text: str, settings: ChunkSettings, code_doc: bool,
                 regions: list[tuple[int, int]] | None = None) -> None:
        """State of the one open chunk (``c_*``) plus the heading stack."""
        self.t = text
        self.ascii = text.isascii()
        self.budget = settings.max_bytes
        self.bpt = settings.bytes_per_token
        self.min_size = settings.min_size
        self.overlap = settings.overlap
        self.carry = settings.carry_heading
        self.code_doc = code_doc
        self.overlap_share = ANALYSIS_OVERLAP_SHARE if settings.purpose == "analysis" else OVERLAP_SHARE
        self.regions = (_quoted_regions(text) if regions is None else regions) if code_doc else []
        self.region_starts = [r[0] for r in self.regions]
        self.analysis = settings.purpose == "analysis"
        self.fill_bytes = math.ceil(settings.fill_share * self.budget)
        self.explicit_fill = settings.fill is not None
        self.spans: list[_Span] = []
        self.headings: list[tuple[int, str, int, int]] = []
        self.hgen = 0                    # bumped on every heading: a new section began
        self.open = False
        self.prev: tuple | None = None   # body_start, end, last, kind, last_code
        self._reset(0, 0, "", 0, False)

    # -- byte helpers -------------------------------------------------
    def nb(self, a: int, b: int) -> int:
        """UTF-8 bytes of t[a:b] (no copy for ASCII documents)."""
        if self.ascii:
            return b - a
        return _utf8_len(self.t[a:b])

    def within(self, a: int, e: int, room: int) -> int:
        """Largest p <= e with bytes(t[a:p]) <= room."""
        hi = min(e, a + room)
        if self.ascii:
            return hi
        s = self.t[a:hi]
        if s.isascii():
            return hi
        raw = s.encode("utf-8", "surrogatepass")
        if len(raw) <= room:
            return hi
        i = room
        while i > 0 and (raw[i] & 0xC0) == 0x80:
            i -= 1
        return a + len(raw[:i].decode("utf-8", "surrogatepass"))

    def back_within(self, lo: int, e: int, cap: int) -> int:
        """Smallest p >= lo with bytes(t[p:e]) <= cap."""
        p = max(lo, e - cap)
        if self.ascii:
            return p
        raw = self.t[p:e].encode("utf-8", "surrogatepass")
        skip = len(raw) - cap
        if skip <= 0:
            return p
        while skip < len(raw) and (raw[skip] & 0xC0) == 0x80:
            skip += 1
        return p + len(raw[:skip].decode("utf-8", "surrogatepass"))

    # -- chunk state --------------------------------------------------
    def _reset(self, start: int, body: int, prefix: str, fixed: int, table: bool) -> None:
        """Make [start, body) + prefix the new open chunk with no own text yet."""
        self.c_start, self.c_body, self.c_end = start, body, body
        self.c_prefix, self.c_fixed, self.c_own = prefix, fixed, 0
        self.c_table, self.c_code = table, True
        self.c_last, self.c_last_code, self.c_last_table = body, False, False
        self.c_path = tuple(h[1] for h in self.headings)
        self.c_sections = [self.c_path]
        self.c_hgen = self.hgen

    def _append(self, a: int, b: int, nbytes: int, code: bool, last: int) -> None:
        """Add t[a:b] to the open chunk's own part (and note a section it enters)."""
        self.c_end = b
        self.c_own += nbytes
        self.c_code = self.c_code and code
        self.c_last, self.c_last_code, self.c_last_table = last, code, False
        if self.c_hgen != self.hgen:
            self.c_hgen = self.hgen
            path = tuple(h[1] for h in self.headings)
            if path != self.c_sections[-1]:
                self.c_sections.append(path)

    def _close(self) -> None:
        """Emit the open chunk as a span and remember it for the next overlap."""
        if not self.open:
            return
        self.open = False
        if self.c_end <= self.c_body:
            return
        kind = "table" if self.c_table else ("code" if self.c_code or self.code_doc else "text")
        self.spans.append(_Span(self.c_start, self.c_body, self.c_end, self.c_prefix,
                                self.c_path, kind, self.c_fixed + self.c_own,
                                tuple(self.c_sections)))
        # no overlap is carried out of a table (seed 002): a table row would start the text
        self.prev = (self.c_body, self.c_end, self.c_last,
                     "table" if self.c_last_table else kind, self.c_last_code)

    def _heading_prefix(self, ov: int) -> str:
        """The section's heading line, if the chunk starts after it (carried heading)."""
        if not self.carry or not self.headings:
            return ""
        _, _, hs, he = self.headings[-1]
        if hs >= ov:
            return ""
        hs = _BLANKLINES.match(self.t, hs, he).end()   # a first unit owns leading blank lines
        prefix = self.t[hs:he] + "\n\n"
        return prefix if _utf8_len(prefix) <= self.budget // HEADING_SHARE else ""

    def _open(self, s: int, first: int, heading_first: bool) -> None:
        """Open a text chunk at s, with overlap and carried heading when they fit.

        Both are dropped when the first unit (``first`` bytes) fits a bare chunk
        but not with them: cutting a unit that fits would break invariant 4.
        """
        ov = self._overlap_start(s)
        prefix = "" if heading_first else self._heading_prefix(ov)
        pb = _utf8_len(prefix)
        ob = self.nb(ov, s)
        if first <= self.budget:
            if pb + ob + first > self.budget:
                ov, ob = s, 0
            if pb + first > self.budget:
                prefix, pb = "", 0
        self._reset(ov, s, prefix, pb + ob, False)
        self.open = True

    # -- overlap ------------------------------------------------------
    def _overlap_start(self, s: int) -> int:
        """Start of the overlap carried from the previous chunk (s when none)."""
        if self.overlap == "none" or self.prev is None:
            return s
        pb, pe, last, kind, last_code = self.prev
        if kind == "table" or pe != s:
            return s
        cap = self.budget // self.overlap_share
        t = self.t
        if self.overlap == "paragraph" and self.nb(last, pe) <= cap:
            cand = last
        else:
            lo = self.back_within(pb, pe, cap)
            ce = lo + len(t[lo:pe].rstrip())
            if ce <= lo:
                return s
            cand = self._tail_start(lo, ce, last, last_code or kind == "code",
                                    earliest=self.overlap == "paragraph")
        if cand is None or cand >= pe or _NONSPACE.search(t, cand, pe) is None:
            return s
        return cand

    def _tail_start(self, lo: int, ce: int, last: int, code: bool,
                    earliest: bool) -> int | None:
        """A sentence (code: line) start in [lo, ce): the first one when a
        paragraph shrinks to its last sentences, the last one for ``sentence``."""
        t = self.t
        if code:
            if earliest:
                m = _FWD_PARA.search(t, lo, ce)
                if m is not None and m.end() < ce:
                    return m.end()
                i = t.find("\n", lo, ce)
            else:
                i = t.rfind("\n", lo, ce)
            cands = [i + 1] if 0 <= i < ce - 1 else []
        elif earliest:
            m = _FWD_SENT.search(t, lo, ce)
            cands = [m.end()] if m is not None and m.end() < ce else []
        else:
            m = _CUT_SENT.match(t, lo, ce)
            cands = [m.end()] if m is not None and m.end() < ce else []
        if last >= lo:
            cands.append(last)
        if not cands:
            return None
        return min(cands) if earliest else max(cands)

    # -- cutting ------------------------------------------------------
    def _find_cut(self, a: int, e: int, room: int, levels: tuple) -> int | None:
        """Best cut in (a, e) within room bytes, or None if no boundary fits.

        A level's cut is accepted when it keeps a quarter of the room; else the
        latest cut of any level is used.  None means even one word (row) does
        not fit, and the caller retries in a bare chunk or cuts inside a word.
        """
        lim = self.within(a, e, room)
        if lim <= a:
            return None
        long_line = self._long_line(lim, e)
        quarter = a + (lim - a) // 4
        best = None
        src = levels is _SRC_LEVELS
        floor = a
        if src:            # a top-level statement that fits a chunk is never cut
            ts = self._stmt_around(a, lim, e)
            if ts is not None and ts < 0:
                floor = -ts               # cut after its end
            elif ts is not None:
                if ts <= a:
                    return None           # it starts here and fits only a fresh chunk
                return ts                 # the last statement start in the window
        for level in levels:
            if level in _MIDLINE and not long_line:
                continue                  # never inside a line that fits a chunk
            if src and level in _SRC_STRUCT:
                end = self._src_match(level, a, lim)
            else:
                m = level.match(self.t, a, lim)
                end = None if m is None else m.end()
            if end is not None and end > floor:
                if end >= quarter:
                    return end
                if best is None or end > best:
                    best = end
        return best

    def _in_region(self, p: int) -> int | None:
        """Start of the triple-quoted string / block comment holding p, else None."""
        i = bisect.bisect_right(self.region_starts, p) - 1
        if i >= 0 and self.regions[i][0] < p < self.regions[i][1]:
            return self.regions[i][0]
        return None

    def _src_match(self, level: re.Pattern, a: int, lim: int) -> int | None:
        """The last cut of a structural source level in (a, lim] outside strings/comments."""
        while lim > a:
            m = level.match(self.t, a, lim)
            if m is None or m.end() <= a:
                return None
            rs = self._in_region(m.end())
            if rs is None:
                return m.end()
            lim = rs
        return None

    def _stmt_around(self, a: int, lim: int, e: int) -> int | None:
        """Source: the last top-level statement that starts in the window [a, lim) and fits a
        chunk.  Its start (with its decorator and comment lines) if the window ends inside
        it; minus its text's end if it ends in the window; None if there is none."""
        t = self.t
        ts = self._src_match(_CUT_COL0, a, lim) or a
        if ts == a and not (a == 0 or t[a - 1] == "\n"):
            return None                   # a is inside a line: no statement starts here
        h = ts
        while h < lim and t.startswith(("@", "#", "//", "/*"), h) and not _PREPROC.match(t, h):
            nl = t.find("\n", h, lim)
            if nl < 0:
                break
            h = nl + 1                    # the statement proper starts after its header lines
        end = self._top_end(h, e)
        if end is None:
            return None
        if end <= lim:
            return -end                   # it ends in the window: cut after it
        # decorator lines just above belong to it; comment lines too, while it still fits
        while ts > a:
            p = t.rfind("\n", a, ts - 1) + 1
            if p <= a and not (a == 0 or t[a - 1] == "\n"):
                break
            p = max(p, a)
            deco = t.startswith("@", p)
            if not (deco or t.startswith(("#", "//"), p)) or _PREPROC.match(t, p):
                break
            if not deco and self.nb(p, end) > self.budget:
                break
            ts = p
        return ts if self.nb(ts, end) <= self.budget else None

    def _top_end(self, a: int, e: int) -> int | None:
        """Source: where the text of the top-level statement (definition) that starts at a
        ends (before the next line at column 0 outside strings and comments), if that is
        within a chunk of a; else None."""
        n = len(self.t)
        lim = self.within(a, n, self.budget)
        hi = min(n, lim + self.budget)            # far enough to see past blank lines
        for m in _FWD_TOP.finditer(self.t, a + 1, hi):
            if self._in_region(m.end()) is None:
                ce = self._content_end(a, m.end())
                return ce if ce <= lim else None
        if hi < n:
            return None
        ce = self._content_end(a, n)
        return ce if ce <= lim else None

    def _long_line(self, p: int, e: int) -> bool:
        """True if the line holding offset p is larger than a chunk (so it must be cut
        inside).  Looks at most a chunk's length either way."""
        t, w = self.t, self.budget + 1
        lo = t.rfind("\n", max(0, p - w), p)
        if lo < 0 and p - w > 0:
            return True
        hi = t.find("\n", p, min(e, p + w))
        if hi < 0 and p + w < e:
            return True
        return self.nb(lo + 1, e if hi < 0 else hi) > self.budget

    def _content_end(self, s: int, e: int) -> int:
        """End of t[s:e] without trailing whitespace (looks only at the tail)."""
        w = 64
        while True:
            lo = max(s, e - w)
            k = len(self.t[lo:e].rstrip())
            if k or lo == s:
                return lo + k
            w *= 4

    def _split(self, a: int, e: int, levels: tuple, code: bool, rest: int, ws: int) -> None:
        """Spread a unit too large for the open chunk over several chunks.

        ``rest`` (bytes of t[a:e]) and ``ws`` (its trailing whitespace) are
        kept up to date instead of recounted, so a huge unit costs O(n).
        """
        while True:
            room = self.budget - self.c_fixed - self.c_own
            if rest <= room:
                self._append(a, e, rest, code, a)
                return
            if rest - ws <= room:                 # only trailing whitespace overflows
                cut = self.within(a, e, room)
            else:
                cut = self._find_cut(a, e, room, levels)
                if cut is None:
                    if self.c_own or self.c_fixed:    # retry in a bare chunk
                        self._close()
                        self._reset(a, a, "", 0, False)
                        self.open = True
                        continue
                    cut = self.within(a, e, room)     # one word larger than a chunk
            piece = self.nb(a, cut)
            self._append(a, cut, piece, code, a)
            self._close()
            rest -= piece
            ws = min(ws, rest)
            self._open(cut, rest - ws, False)
            a = cut

    def _fill_cut(self, us: int, e: int) -> int | None:
        """Analysis: where to cut a paragraph or list that fits a chunk but not the rest of
        the open one, to fill it first; at a line end after the unit's first line, or None."""
        if not self.open or self.c_fixed + self.c_own >= self.fill_bytes:
            return None
        lim = self.within(self.c_end, e, self.budget - self.c_fixed - self.c_own)
        first = self.t.find("\n", us, lim)
        if first < 0:
            return None
        best = None
        for level in _FILL_LEVELS:
            m = level.match(self.t, first, lim)
            if m is not None and m.end() > first and (best is None or m.end() > best):
                best = m.end()
        return best if best is not None and best < e else None

    def _src_fill_cut(self, us: int, e: int) -> int | None:
        """Analysis: the last top-level statement start of a source unit that fits in the
        room left (outside strings and block comments), to fill the open chunk; or None."""
        if not self.open or self.c_fixed + self.c_own >= self.fill_bytes:
            return None
        lim = self.within(self.c_end, e, self.budget - self.c_fixed - self.c_own)
        best = None
        for m in _FWD_STMT.finditer(self.t, us + 1, lim):
            p = m.end()
            i = bisect.bisect_right(self.region_starts, p) - 1
            if i < 0 or not self.regions[i][0] < p < self.regions[i][1]:
                best = p
        return best if best is not None and best < e else None

    def _place(self, s: int, us: int, e: int, typ: str) -> None:
        """Place a text/code unit (with pending headings from s) into chunks."""
        code = typ in (_C, _B) and s == us
        n = self.nb(s, e)
        if self.open and self.analysis and self.c_own:
            self.c_table = False                  # text joins a chunk that held a table
        if self.open and self.c_fixed + self.c_own + n <= self.budget:
            self._append(s, e, n, code, us)
            return
        ws = self.nb(self._content_end(s, e), e) if n > self.budget else 0
        nc = n - ws                               # what must stay whole if it fits
        if self.analysis and typ in (_P, _L, _B) and n <= self.budget:
            cut = self._src_fill_cut(us, e) if typ == _B else self._fill_cut(us, e)
            if cut is not None:                   # fill the open chunk with the unit's first part
                piece = self.nb(s, cut)
                self._append(s, cut, piece, code, us)
                self._close()
                rest = n - piece
                self._open(cut, rest, False)
                levels = (_SRC_LEVELS if typ == _B else _LIST_LEVELS if typ == _L
                          else _TEXT_LEVELS)
                self._split(cut, e, levels, code, rest, self.nb(self._content_end(cut, e), e))
                return
        if s < us and nc > self.budget:
            nh = self.nb(s, us)
            if nc - nh <= self.budget:            # headings and unit cannot share a chunk
                if not (self.open and self.c_fixed + self.c_own + nh <= self.budget):
                    self._close()
                    self._open(s, nh, True)
                self._split(s, us, _TEXT_LEVELS, False, nh, self.nb(self._content_end(s, us), us))
                self._close()
                self._place(us, us, e, typ)
                return
        levels = (_SRC_LEVELS if typ == _B else _CODE_LEVELS if typ == _C
                  else _LIST_LEVELS if typ == _L else _TEXT_LEVELS)
        if (nc > self.budget and self.open
                and self.budget - self.c_fixed - self.c_own >= self.budget // 4):
            self._split(s, e, levels, code, n, ws)     # too big anyway: fill this chunk
            return
        self._close()
        self._open(s, nc, s < us)
        self._split(s, e, levels, code, n, ws)

    def _row_cut(self, a: int, e: int, room: int, lo: int, html: bool) -> int | None:
        """Last row start in [max(a+1, lo), e) within room bytes, or None.

        A row whose text fits but whose newline does not ends the group too.
        """
        lim = self.within(a, e, room)
        lo = max(a + 1, lo)
        if lim < lo:
            return None
        t = self.t
        if html:
            m = _LAST_TR.match(t, lo, lim)
            if m is not None:
                return m.end()
            m = _TR.search(t, lim, e)
            nxt = m.start() if m is not None else e
        else:
            i = t.rfind("\n", lo - 1, lim)
            if i >= 0:
                return i + 1
            nxt = t.find("\n", lim, e)
            nxt = e if nxt < 0 else nxt
        if _NONSPACE.search(t, lim, nxt) is None:   # the row fits without its newline
            return lim
        return None

    def _table_cut(self, a: int, e: int, room: int, lo: int, html: bool) -> int | None:
        """Where a row group ends; None asks for a bare group (no repeated header)."""
        cut = self._row_cut(a, e, room, lo, html)
        if cut is None and (self.c_fixed or self.c_own):
            return None
        if cut is None and lo > a + 1:            # caption + header too big: any line
            cut = self._row_cut(a, e, room, a + 1, html)
        if cut is None:                           # one row larger than a chunk
            cut = self._find_cut(a, e, room, _WORD_LEVELS) or self.within(a, e, room)
        return cut

    def _table(self, s: int, ts: int, e: int, info: tuple) -> None:
        """Emit a table; too large, it becomes row groups repeating the header.

        Retrieval (seed 002): the table is alone in its chunks.  Analysis: it joins the
        open chunk when it fits, or when that chunk is not yet filled (then it is cut
        between rows, the first group keeping at least one row), and the last group stays
        open for the text after it.
        """
        hdr, body, html = info
        n = self.nb(s, e)
        ws = self.nb(self._content_end(s, e), e) if n > self.budget else 0
        heading = "" if s < ts else self._heading_prefix(s)
        if _utf8_len(heading) + n - ws > self.budget:
            heading = ""
        header = self.t[hdr:body].rstrip("\n") + "\n" if body > hdr else ""
        if _utf8_len(header) > self.budget // 2:
            header = ""
        a, lo, rest = s, body, n
        used = self.c_fixed + self.c_own
        if (self.analysis and self.open and self.c_own
                and (used + n <= self.budget or used < self.fill_bytes)):
            lo = body + 1                         # shares the open chunk
        else:
            self._close()
            self._reset(s, s, heading, _utf8_len(heading), True)
            self.open = True
        while True:
            room = self.budget - self.c_fixed - self.c_own
            if rest <= room:
                self._append(a, e, rest, False, a)
                self.c_last_table = True
                if not self.analysis:
                    self._close()
                return
            cut = (self.within(a, e, room) if rest - ws <= room
                   else self._table_cut(a, e, room, lo, html))
            if cut is None:
                if self.c_own:                    # no row fits the open chunk: start afresh
                    self._close()
                    self._reset(a, a, heading, _utf8_len(heading), True)
                    lo = body
                else:
                    self._reset(a, a, "", 0, True)
                self.open = True
                continue
            piece = self.nb(a, cut)
            self._append(a, cut, piece, False, a)
            self.c_last_table = True
            self.c_table = self.c_table and cut > hdr     # heading/caption alone is not a table
            self._close()
            rest -= piece
            a, lo = cut, cut
            if rest <= ws:
                break
            prefix = self._heading_prefix(cut) + (header if cut >= body else "")
            if _utf8_len(prefix) > self.budget // 2:
                prefix = header
            self._reset(cut, cut, prefix, _utf8_len(prefix), True)
            self.open = True
        self._reset(a, a, "", 0, False)           # whitespace left: joins the next text
        self.open = True
        self._split(a, e, _TEXT_LEVELS, False, rest, rest)

    def _push_heading(self, s: int, info: tuple) -> None:
        """Update the heading stack that gives heading_path and carried headings."""
        level, title, line_end = info
        while self.headings and self.headings[-1][0] >= level:
            self.headings.pop()
        self.headings.append((level, title, s, line_end))
        self.hgen += 1

    def _section_ends_chunk(self, units: "_Peek", s: int, e: int) -> bool:
        """Does the heading at [s, e) end the open chunk?

        Retrieval (seed 002): once the chunk's own text reaches min_tokens.  Analysis
        (seed 000): only once the chunk holds ``fill`` of the room, and not even then
        when the whole next section (up to the heading after its first content) still
        fits in the room left: a section is then never cut for nothing.
        """
        used = self.c_fixed + self.c_own
        if not (self.analysis or self.explicit_fill):
            return math.ceil(self.c_own / self.bpt) >= self.min_size
        if used < self.fill_bytes:
            return False
        if not self.analysis:
            return True
        need, room, content, i = self.nb(s, e), self.budget - used, False, 0
        while need <= room:
            u = units.peek(i)
            if u is None or (u[2] == _H and content):
                return False
            content = content or u[2] != _H
            need += self.nb(u[0], u[1])
            i += 1
        return True

    def run(self, units: Iterable[tuple]) -> list[_Span]:
        """Pack all units; returns spans in order."""
        pend = -1
        units = _Peek(units)
        for s, e, typ, info in units:
            if typ == _H:
                if pend < 0:
                    if self.open and self._section_ends_chunk(units, s, e):
                        self._close()
                    pend = s
                self._push_heading(s, info)
                continue
            start = pend if pend >= 0 else s
            pend = -1
            if typ == _T:
                self._table(start, s, e, info)
            else:
                self._place(start, s, e, typ)
        if pend >= 0:                   # headings at the very end
            self._place(pend, pend, len(self.t), _P)
        self._close()
        return self.spans


# ---------------------------------------------------------------- public

def _spans(doc: Document) -> list[_Span]:
    """Spans of a document; empty or whitespace-only text gives none."""
    if _NONSPACE.search(doc.text) is None:
        return []
    source = doc.kind == "source"
    regions = _quoted_regions(doc.text) if source else []
    packer = _Packer(doc.text, doc.settings, source, regions)
    return packer.run(_units(doc.text, doc.kind, regions))


def _content_end_of(t: str, s: int, e: int) -> int:
    """End of t[s:e] without its trailing whitespace (a chunk's last line is its last text)."""
    k = e
    while k > s and t[k - 1] in " \t\n\r\f\v":
        k -= 1
    return k if k > s else e


def chunk_document(doc: Document) -> list[Chunk]:
    """Chunks of a Document with the settings it was made with."""
    t, bpt = doc.text, doc.settings.bytes_per_token
    sfp = doc.settings.fingerprint
    out = []
    line, pos = 1, 0                      # line number at pos, counted once over the text
    for i, sp in enumerate(_spans(doc)):
        line += t.count("\n", pos, sp.body_start)
        first = line
        last = first + t.count("\n", sp.body_start, _content_end_of(t, sp.body_start, sp.end))
        line, pos = first + t.count("\n", sp.body_start, sp.end), sp.end
        body = t[sp.start:sp.end]
        out.append(Chunk(
            index=i, start=sp.start, body_start=sp.body_start, end=sp.end,
            text=sp.prefix + body if sp.prefix else body,
            heading_path=sp.heading_path, kind=sp.kind,
            tokens=math.ceil(sp.nbytes / bpt), id=f"{doc.fingerprint}-{i:04d}",
            fingerprint=sfp, sections=sp.sections, first_line=first, last_line=last))
    return out


def chunks_from(doc: Document, offset: int, first_index: int) -> list[Chunk]:
    """The chunks of ``doc`` (with its settings) that cover its text from ``offset`` on, numbered from
    ``first_index``; a chunk that straddles ``offset`` keeps only its part after it.

    A running analysis re-plans the rest of its file once a map call has measured the
    file's real bytes per token (``offset`` is where its finished chunks end), so the
    finished chunks stay exactly as they were and the rest is sized right.
    """
    t, out = doc.text, []
    for c in chunk_document(doc):
        if c.end <= offset:
            continue
        if c.body_start < offset:
            first = _NONSPACE.search(t, offset, c.end)
            if first is None:
                continue
            prefix = c.text[:len(c.text) - (c.end - c.start)]      # a continued table's header rows
            if "\n\n" in t[c.start:offset]:
                prefix = ""                                          # (the cut is past that table)
            body = prefix + t[offset:c.end]
            c = dataclasses.replace(c, start=offset, body_start=offset, text=body,
                                    tokens=math.ceil(len(body.encode()) / doc.settings.bytes_per_token),
                                    first_line=t.count("\n", 0, first.start()) + 1)
        index = first_index + len(out)
        out.append(dataclasses.replace(c, index=index, id=f"{doc.fingerprint}-r{index:04d}"))
    return out


def chunk_text(text: str, kind: str = "prose",
               settings: ChunkSettings | None = None) -> list[Chunk]:
    """Chunk a string.  Offsets refer to ``make_document(text, kind).text``
    (the same string unless it had CR line endings or is HTML)."""
    return chunk_document(make_document(text, kind, settings))


def chunk_file(path: str | os.PathLike, settings: ChunkSettings | None = None,
               kind: str | None = None) -> tuple[Document, list[Chunk]]:
    """Read and chunk a file; the kind comes from the extension unless given."""
    doc = read_document(path, settings, kind)
    return doc, chunk_document(doc)


def plan_document(doc: Document) -> ChunkPlan:
    """Count chunks without building their texts (cheap enough for the alert)."""
    spans = _spans(doc)
    bpt = doc.settings.bytes_per_token
    sizes = tuple(math.ceil(sp.nbytes / bpt) for sp in spans)
    return ChunkPlan(path=doc.path, kind=doc.kind, chunks=len(spans),
                     tokens=doc.tokens, size_tokens=doc.settings.size_tokens,
                     largest_tokens=max(sizes, default=0), chunk_tokens=sizes)


def plan_text(text: str, kind: str = "prose",
              settings: ChunkSettings | None = None) -> ChunkPlan:
    """plan_document for a string."""
    return plan_document(make_document(text, kind, settings))


def plan_file(path: str | os.PathLike, settings: ChunkSettings | None = None,
              kind: str | None = None) -> ChunkPlan:
    """plan_document for a file (raises ChunkingError like chunk_file)."""
    return plan_document(read_document(path, settings, kind))


# ---------------------------------------------------------------- the map prompt (analysis)

LABEL_MAX_BYTES = 300        # a chunk label never grows past this (it is budgeted as fixed)
PATH_SEP = " › "
SIBLING_SEP = " · "


def _label_groups(sections: Iterable[tuple[str, ...]]) -> list[tuple[tuple[str, ...], list[str]]]:
    """Heading paths grouped by parent, in order: siblings share one ``A › B › x · y``."""
    groups: list[tuple[tuple[str, ...], list[str]]] = []
    for path in sections:
        if not path:
            continue
        parent, leaf = path[:-1], path[-1]
        if groups and groups[-1][0] == parent:
            groups[-1][1].append(leaf)
        else:
            groups.append((parent, [leaf]))
    return groups


def _clip(text: str, nbytes: int) -> str:
    """text cut to nbytes of UTF-8 (with an ellipsis when cut)."""
    if _utf8_len(text) <= nbytes:
        return text
    return text.encode("utf-8")[: max(0, nbytes - 3)].decode("utf-8", "ignore") + "…"


def chunk_label(chunk: Chunk, total: int, max_bytes: int = LABEL_MAX_BYTES,
                pages: tuple[int, int] | None = None) -> str:
    """The chunk's label for the map prompt: ``Chunk i of N`` plus, when the document has
    headings, the heading path of every section the chunk holds, e.g.::

        Chunk 3 of 12 (sections: fs › Promises API › filehandle.read() · filehandle.write(); fs › Callback API)

    Sections that do not fit ``max_bytes`` (UTF-8) are left out with "… N more", so the label's
    cost is bounded and can be reserved when chunks are sized (``map_prompt_overhead``).  A
    chunk without headings (source code, plain prose) is labelled with its lines instead:
    ``Chunk 3 of 12 (lines 120–245)``.
    """
    head = f"Chunk {chunk.index + 1} of {total}"
    groups = _label_groups(chunk.sections or (chunk.heading_path,))
    if pages:                      # a PDF's chunk: its pages say where it is (its lines are the extractor's)
        where = f"page {pages[0]}" if pages[0] == pages[1] else f"pages {pages[0]}–{pages[1]}"
        if not groups:
            return f"{head} ({where})"
        head = f"{head} ({where})"
    if not groups:
        if chunk.first_line:
            return f"{head} (lines {chunk.first_line}–{chunk.last_line})"
        return head
    room = max_bytes - _utf8_len(head) - len(" (sections: )")
    left = sum(len(leaves) for _, leaves in groups)
    reserve = len("; … 9999 more")
    out = ""
    for parent, leaves in groups:
        prefix = ("; " if out else "") + "".join(p + PATH_SEP for p in parent)
        piece = ""
        for leaf in leaves:
            add = (SIBLING_SEP if piece else prefix) + leaf
            if _utf8_len(out + piece + add) + (reserve if left > 1 else 0) > room:
                if not out and not piece:          # not even one section: clip it
                    piece = _clip(add, room - reserve)
                    left -= 1
                out += piece
                return f"{head} (sections: {out}{'; … %d more' % left if left else ''})"
            piece += add
            left -= 1
        out += piece
    return f"{head} (sections: {out})"


def map_prompt(task: str, chunk: Chunk, total: int, reply_words: int | None = None,
               pages: tuple[int, int] | None = None) -> str:
    """The user message of one map call (seed 000's layout, with the label and, when the
    instruction allows a short answer, a length limit after the text, where a small model
    still sees it)::

        <task>\\n\\n---\\nChunk i of N (sections: ...):\\n<chunk text>[\\n\\n---\\nAnswer ... words.]
    """
    label = chunk_label(chunk, total, pages=pages)
    body = chunk.text if chunk.text.endswith("\n") else chunk.text + "\n"
    tail = "" if reply_words is None else f"\n---\nAnswer in at most {reply_words} words."
    return f"{task}\n\n---\n{label}:\n{body}{tail}"


def map_prompt_overhead(task: str, total: int = 9999, reply_words: int | None = None) -> str:
    """The longest the map prompt is apart from the chunk text: a label of LABEL_MAX_BYTES and
    the length line.  Estimate it with the system prompt to size chunks so every map request
    fits the window whatever the chunk's sections."""
    fake = Chunk(index=total - 1, start=0, body_start=0, end=0, text="\n", heading_path=(),
                 kind="text", tokens=0, id="", fingerprint="")
    base = map_prompt(task, fake, total, reply_words)
    return base + "x" * (LABEL_MAX_BYTES - _utf8_len(f"Chunk {total} of {total}"))
