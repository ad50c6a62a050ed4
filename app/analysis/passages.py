"""A cited passage found again for the reader (issue #15): the text a citation [12] stands on.

A cited answer's ``[12]`` names chunk 12 of the analysed file; the CHUNK ANALYSIS scene
recorded where that chunk lies (``fountain.CitedPassage``: character range, lines, pages, heading
path, the words its partial answer quoted) and the file's fingerprint then. This module reads
that part of the file again, through the workspace as the analysis did (so a name in a session
file cannot reach outside it, and a PDF or Word file gives its extracted text), and finds the
quoted words in it. It renders nothing: the analysis view and ``templates/analysis/_passage.html``
show what :func:`show` returns.
"""

from __future__ import annotations

import codecs
import hashlib
from dataclasses import dataclass, field

from .. import chunking
from ..errors import HarveyError, one_line
from ..sessions.fountain import ChunkAnalysis, CitedPassage
from ..workspace import Workspace
from .quotes import Squashed

# Around a quote, a model often adds quotation marks or an ellipsis the file does not have.
_QUOTE_EDGES = "\"'“”‘’«»….· \t\n"


@dataclass(frozen=True)
class Piece:
    """A run of the passage's text, marked when it is (part of) a quoted phrase."""

    text: str
    marked: bool = False


@dataclass
class Shown:
    """What the reader sees for one citation: where it is, the text now, what is marked in it.

    ``pieces`` is empty when there is no text to show; ``problem`` then says why (the file
    is gone, unreadable, or has nothing at those lines any more). ``changed``: the file's
    text is not what was analysed (so the text shown is the one now at the recorded lines).
    ``missing``: quoted words that are not in the text shown.
    """

    file: str
    passage: CitedPassage
    pieces: list[Piece] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    changed: bool = False
    problem: str = ""

    @property
    def code(self) -> bool:
        """A source file's passage: shown in a fixed-width font with its line breaks and indents (issue 45)."""
        return chunking.kind_for_path(self.file) == "source"


def passage_of(analysis: ChunkAnalysis | None, chunk: int) -> CitedPassage | None:
    """The recorded passage of chunk ``chunk`` (1-based), or None when the analysis has none for it."""
    if analysis is None:
        return None
    return analysis.passages.get(chunk)


def show(workspace: Workspace, analysis: ChunkAnalysis, passage: CitedPassage) -> Shown:
    """Read the passage's text from the workspace file now, with its quotes located.

    Never raises for a file that is gone, outside the workspace or unreadable: the
    reason goes into ``Shown.problem`` (a citation link must not end in a server error).
    """
    shown = Shown(analysis.file, passage)
    try:
        path = workspace.resolve(analysis.file).path
        streamed = _streamed(path, passage.start, passage.end)
        if streamed is not None and analysis.source is not None and streamed[0] == analysis.source:
            text = streamed[1]                    # the file as analysed: only the passage is kept
        else:
            doc = chunking.read_document(path)
            shown.changed = analysis.source is not None and chunking.source_of(doc) != analysis.source
            text = text_now(doc.text, passage, shown.changed)
    except (HarveyError, OSError) as exc:
        shown.problem = f"{analysis.file} cannot be read now, so its text cannot be shown: {one_line(exc)}"
        return shown
    if not text.strip():
        shown.problem = (f"{analysis.file} has nothing at lines {passage.lines[0]}–{passage.lines[1]} any more."
                         if shown.changed else "The passage is empty.")
        return shown
    spans, shown.missing = quote_spans(text, passage.quotes)
    shown.pieces = pieces(text, spans)
    return shown


STREAM_BYTES = 1 << 18     # a citation tap reads a plain file this much at a time


def _streamed(path, start: int, end: int) -> tuple[str, str] | None:
    """A plain UTF-8 file's fingerprint (``source_of``'s form) and its characters ``start:end``,
    read in ``STREAM_BYTES`` pieces: the hash is streamed and only the passage is kept, so a tap
    on a citation of a 40 MB log holds about a megabyte, not the file three times over.  None
    when the file's text is not its bytes (PDF, Word, HTML, a BOM, CR line ends, another
    encoding, a NUL): then it is read whole as the analysis read it."""
    from ..documents import format_for_path
    spath = str(path)
    if format_for_path(spath) or chunking.kind_for_path(spath) == "html":
        return None
    digest, decoder = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")("strict")
    kept, at = [], 0                         # at: characters decoded so far
    try:
        with open(spath, "rb") as fh:
            first = True
            while block := fh.read(STREAM_BYTES):
                if (first and block.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"))) \
                        or b"\r" in block or b"\x00" in block:
                    return None
                first = False
                digest.update(block)
                piece = decoder.decode(block)
                if at + len(piece) > start and at < end:
                    kept.append(piece[max(0, start - at):max(0, end - at)])
                at += len(piece)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return None
    return "sha256:" + digest.hexdigest()[:16], "".join(kept)


def text_now(text: str, passage: CitedPassage, changed: bool) -> str:
    """The chunk's text: ``text[start:end]`` of the file as analysed; of a changed file, its lines now."""
    if not changed:
        return text[passage.start:passage.end]
    start, end = line_range(text, *passage.lines)
    return text[start:end]


def line_range(text: str, first: int, last: int) -> tuple[int, int]:
    """Character offsets of lines ``first`` to ``last`` (1-based, inclusive) of ``text``; empty past its end."""
    start = 0
    for _ in range(max(0, first - 1)):
        found = text.find("\n", start)
        if found < 0:
            return len(text), len(text)
        start = found + 1
    end = start
    for _ in range(max(1, last - max(first, 1) + 1)):
        found = text.find("\n", end)
        if found < 0:
            return start, len(text)
        end = found + 1
    return start, end - 1


def quote_spans(text: str, quotes: list[str]) -> tuple[list[tuple[int, int]], list[str]]:
    """Where the quotes occur in ``text`` (every occurrence, overlaps merged, in order), and those that do not."""
    squashed = Squashed(text)
    found: list[tuple[int, int]] = []
    missing: list[str] = []
    for quote in quotes:
        hits = squashed.spans(quote.strip(_QUOTE_EDGES))
        if hits:
            found.extend(hits)
        elif quote.strip():
            missing.append(quote.strip())
    return _merged(sorted(found)), missing


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in spans:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def pieces(text: str, spans: list[tuple[int, int]]) -> list[Piece]:
    """``text`` cut at the (sorted, disjoint) spans: plain and marked runs in order."""
    out: list[Piece] = []
    at = 0
    for start, end in spans:
        if start > at:
            out.append(Piece(text[at:start]))
        out.append(Piece(text[start:end], True))
        at = end
    if at < len(text):
        out.append(Piece(text[at:]))
    return out
