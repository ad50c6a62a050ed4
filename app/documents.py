"""Loaders for documents that are not plain text: PDF and Word (seed 002's loaders).

A loader turns a file into the normalised text every chunk offset refers to,
plus its structure, so chunking does not depend on the file's extension:

* PDF (pypdfium2: PDFium's own text layer, measured 10x faster than pypdf on a
  36-page manual and a third less memory; wheels for the Pi's ARM): one block
  of prose per page; ``pages`` holds each page's first character offset so a
  chunk knows its page range.  No text layer, a password, or a damaged file is
  a clear ``DocumentError`` that says which, and nothing reaches the model.
* DOCX (python-docx): Word's heading styles become Markdown headings (so the
  Markdown chunker gives every chunk its heading path) and tables become pipe
  tables (kept whole, header row repeated).

Extraction is cached by the file's (path, size, mtime) in a small bounded
memory cache: the budget check and the analysis of a 300-page PDF extract it
once.  The libraries are imported on first use, never at import time.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from .errors import DocumentError

PDF_EXTENSIONS = frozenset({".pdf"})
DOCX_EXTENSIONS = frozenset({".docx"})
CACHE_ENTRIES = 4
DOCX_MAX_UNPACKED = 100 * 2**20    # a Word file's parts, unpacked: python-docx holds them all in memory
_PDFIUM = threading.Lock()
log = logging.getLogger(__name__)
_WS_RUN = re.compile(r"[ \t\u00a0]+")


class UnreadableDocument(DocumentError):
    """The file is not text and no loader reads it (an image, an archive, a program)."""

    kind = "unreadable_file"


class NoTextLayer(UnreadableDocument):
    """A PDF whose pages are images only (a scan): it needs OCR."""

    kind = "no_text_layer"


class EncryptedDocument(UnreadableDocument):
    """A PDF that needs a password to open."""

    kind = "encrypted"


class DamagedDocument(UnreadableDocument):
    """The file claims a format but its contents are broken."""

    kind = "damaged"


@dataclass(frozen=True)
class Extracted:
    """The text a loader made of a file, with its structure."""

    text: str
    kind: str                        # the chunker's kind for the text: "prose" or "markdown"
    format: str                      # "pdf" or "docx"
    pages: tuple[int, ...] = ()      # PDF: the offset in ``text`` where each page starts
    image_pages: tuple[int, ...] = ()   # PDF: 1-based pages that hold images and no text

    @property
    def page_count(self) -> int:
        return len(self.pages)

    def pages_of(self, start: int, end: int) -> tuple[int, int] | None:
        """The 1-based first and last page of the text range ``start:end`` (None: not a PDF)."""
        if not self.pages:
            return None
        return _page_at(self.pages, start), _page_at(self.pages, max(start, end - 1))


def _page_at(pages: tuple[int, ...], offset: int) -> int:
    lo, hi = 0, len(pages) - 1
    while lo < hi:                   # the last page starting at or before ``offset``
        mid = (lo + hi + 1) // 2
        if pages[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1


def format_for_path(path: str | os.PathLike) -> str | None:
    """"pdf", "docx", or None for files the text readers handle."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext in PDF_EXTENSIONS:
        return "pdf"
    if ext in DOCX_EXTENSIONS:
        return "docx"
    return None


class _Cache:
    """A few extractions, keyed by the file's identity; the oldest is dropped first."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[tuple, Extracted] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> Extracted | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: tuple, value: Extracted) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


_cache = _Cache(CACHE_ENTRIES)


def extract(path: str | os.PathLike) -> Extracted:
    """The file's text and structure (cached while the file is unchanged); DocumentError if it has none."""
    spath = os.fspath(path)
    st = os.stat(spath)
    key = (os.path.realpath(spath), st.st_size, st.st_mtime_ns)
    found = _cache.get(key)
    if found is None:
        found = _load(spath, format_for_path(spath))
        _cache.put(key, found)
    return found


SAMPLE_PAGES = 3                 # a PDF's pages read to size it: the first, the middle and the last
SAMPLE_XML = 256 * 1024          # a Word file's document.xml read to size it


def measure(path: str | os.PathLike) -> tuple[int, str, int]:
    """A document's estimated text size in UTF-8 bytes, a sample of its text, and its page count,
    from metadata and a bounded sample (issue 23): a PDF's page count and a few pages' text, a
    Word file's document.xml size from the zip directory and the text share of its start.  So a
    300-page PDF or a large Word file named in a chat is sized without being extracted.  A file
    a loader cannot open fails here as it would on extraction (the same cards)."""
    spath = os.fspath(path)
    fmt = format_for_path(spath)
    return _load(spath, fmt, {"pdf": _pdf_measure, "docx": _docx_measure}.get(fmt or ""))


def _load(path: str, fmt: str | None, loader=None):
    """Run the loader for ``fmt``: the one place a loader's own exceptions become ``UnreadableDocument``.

    PDFium, zipfile, lxml and python-docx each raise their own errors (and a hostile
    file can reach ones nobody listed: struct.error, zlib.error, a negative seek's
    OSError, RecursionError); whatever a file contains must end as the "cannot read
    this file" card, never a 500, so every exception past this point is the file's fault.
    """
    name = os.path.basename(path)
    loader = loader or {"pdf": _pdf, "docx": _docx}.get(fmt or "")     # looked up now: a test may wrap one
    if loader is None:
        raise UnreadableDocument(f"{name} is not a document Harvey can read.")
    with open(path, "rb") as fh:     # an OSError here (gone, no permission) is the caller's to say
        head = fh.read(16)
    try:
        return loader(path)
    except UnreadableDocument as exc:
        log.info("a %s file was refused: %s", fmt, exc.kind)
        raise
    except Exception as exc:  # noqa: BLE001 - the loader boundary (see the docstring)
        log.warning("a %s file could not be read: %s", fmt, exc.__class__.__name__)
        raise DamagedDocument(_damaged_text(path, name, fmt, head, exc)) from None


def _damaged_text(path: str, name: str, fmt: str, head: bytes, exc: Exception) -> str:
    """What was wrong, in words: another format behind this extension, or the loader's reason (no path in it)."""
    wanted = {"pdf": "a PDF", "docx": "a Word (.docx) file"}[fmt]
    actual = _magic(head)
    if actual and not (fmt == "pdf" and head.startswith(b"%PDF")) and not (fmt == "docx" and head.startswith(b"PK")):
        return f"{name} is {actual}, not {wanted}: its name ends in .{fmt} but its contents are something else."
    reason = " ".join(str(exc).replace(path, name).split())[:160] or "no details"
    return (f"{name} could not be read as {wanted} ({exc.__class__.__name__}: {reason}). It may be damaged or "
            f"cut short; open it in its program and save it again.")


# -- PDF ---------------------------------------------------------------------------------

def _pdf(path: str) -> Extracted:
    """One block of prose per page, in page order; pages with images and no text are named.

    PDFium is not thread-safe (not even for different documents), and a chat request and
    the analysis worker may read PDFs at once: one lock around all of it.
    """
    with _PDFIUM:
        return _pdf_locked(path, os.path.basename(path))


def _pdf_locked(path: str, name: str) -> Extracted:
    from pypdfium2 import raw

    doc = _open_pdf(path, name)
    parts: list[str] = []
    starts: list[int] = []
    images: list[int] = []
    offset = 0
    try:
        for number in range(len(doc)):
            page = doc[number]
            textpage = page.get_textpage()
            try:
                text = _clean_page(textpage.get_text_bounded())
            finally:
                textpage.close()
            if not text and any(True for _ in page.get_objects(filter=[raw.FPDF_PAGEOBJ_IMAGE], max_depth=2)):
                images.append(number + 1)
            page.close()
            starts.append(offset)
            block = text + "\n\n" if text else "\n"
            parts.append(block)
            offset += len(block)
    finally:
        doc.close()
    text = "".join(parts).rstrip("\n") + "\n"
    if not text.strip():
        raise NoTextLayer(f"This PDF has no text layer: 0 characters on {len(starts)} page"
                          f"{'s' if len(starts) != 1 else ''} ({name}); it needs OCR.")
    return Extracted(text, "prose", "pdf", tuple(starts), tuple(images))


def _pdf_measure(path: str) -> tuple[int, str, int]:
    """The page count and the text of a few pages, scaled to the whole: PDFium opens a document
    lazily, so this costs those pages only (under the one PDFium lock, see ``_pdf``)."""
    with _PDFIUM:
        doc = _open_pdf(path, os.path.basename(path))
        try:
            count = len(doc)
            picked = sorted({0, count // 2, count - 1})[:SAMPLE_PAGES] if count else []
            texts = [_page_text(doc, number) for number in picked]
        finally:
            doc.close()
    sample = "\n\n".join(t for t in texts if t)
    per_page = sum(len(t.encode()) + 2 for t in texts) / max(1, len(texts))
    return math.ceil(per_page * count), sample, count


def _page_text(doc, number: int) -> str:
    """One page's text, cleaned into paragraphs (``_clean_page``)."""
    page = doc[number]
    textpage = page.get_textpage()
    try:
        return _clean_page(textpage.get_text_bounded())
    finally:
        textpage.close()
        page.close()


def _open_pdf(path: str, name: str):
    """PDFium's document, or the "encrypted" card for a PDF that needs a password."""
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise EncryptedDocument(f"{name} is an encrypted PDF: it needs a password, so Harvey cannot read "
                                    "it. Save a copy without the password and name that instead.") from None
        raise


def _clean_page(text: str) -> str:
    """PDFium's CRLF lines into paragraphs: a line break inside a paragraph is a space.

    A PDF has no paragraphs, only lines; a line ending in sentence punctuation
    followed by a shorter line, or a blank line, ends a paragraph.
    """
    lines = [_WS_RUN.sub(" ", line).strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    lengths = sorted(len(line) for line in lines if line)
    full = lengths[len(lengths) * 3 // 4] if lengths else 0      # a typical full line of this page
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if not line:
            if paragraphs[-1]:
                paragraphs.append([])
            continue
        if line[:1] in "•◦▪‣–-*" and paragraphs[-1]:     # a list item starts its own paragraph
            paragraphs.append([])
        paragraphs[-1].append(line)
        if len(line) < 0.7 * full:       # a short line ends its paragraph (or is a heading, a code line)
            paragraphs.append([])
    out = []
    for para in paragraphs:
        if para:
            joined = para[0]
            for line in para[1:]:
                joined = joined[:-1] + line if joined.endswith("-") and line[:1].islower() else joined + " " + line
            out.append(joined)
    return "\n\n".join(out).replace("\x00", "")


# -- DOCX --------------------------------------------------------------------------------

def _docx(path: str) -> Extracted:
    """Body paragraphs and tables in order; heading styles as Markdown headings."""
    from docx import Document as open_docx

    name = os.path.basename(path)
    _refuse_zip_bomb(path, name)
    document = open_docx(path)
    blocks = [block for block in _docx_blocks(document) if block]
    text = "\n\n".join(blocks) + "\n" if blocks else ""
    if not text.strip():
        raise UnreadableDocument(f"{name} holds no text.")
    return Extracted(text, "markdown", "docx")


def _docx_measure(path: str) -> tuple[int, str, int]:
    """document.xml's size from the zip directory, times the share of text in its first
    ``SAMPLE_XML`` bytes (markup tags dropped, a paragraph's end a blank line)."""
    import zipfile

    _refuse_zip_bomb(path, os.path.basename(path))
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("word/document.xml")
        with archive.open(info) as part:
            head = part.read(SAMPLE_XML)
    body = head.split(b"<w:body", 1)[-1].decode("utf-8", errors="ignore")
    sample = _XML_TAG.sub("", _XML_PARA_END.sub("\n\n", body))
    share = len(sample.encode()) / max(1, len(head))
    return math.ceil(info.file_size * share), sample, 0


_XML_TAG = re.compile(r"<[^>]*>?")
_XML_PARA_END = re.compile(r"</w:p>")


def _refuse_zip_bomb(path: str, name: str) -> None:
    """A .docx is a zip whose parts python-docx unpacks whole into memory: size them first.

    The sizes come from the zip's directory; zipfile stops reading a part at its
    declared size (a part that holds more fails its CRC check), so they cannot lie.
    """
    import zipfile

    with zipfile.ZipFile(path) as archive:
        unpacked = sum(info.file_size for info in archive.infolist())
    if unpacked > DOCX_MAX_UNPACKED:
        raise DamagedDocument(f"{name} would unpack to {unpacked / 2**20:,.0f} MB, more than the "
                              f"{DOCX_MAX_UNPACKED // 2**20} MB Harvey opens from a Word file, so it was not opened. "
                              "Save the text as a smaller file (or as PDF) and name that.")


def _docx_blocks(document):
    """Yield Markdown for each paragraph and table of the body, in document order."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    body = document.element.body
    for child in body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            yield _docx_paragraph(Paragraph(child, document))
        elif tag == "tbl":
            yield _docx_table(Table(child, document))


def _docx_paragraph(paragraph) -> str:
    text = " ".join(paragraph.text.split())
    if not text:
        return ""
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    level = _heading_level(style)
    if level:
        return "#" * level + " " + text
    if style.lower().startswith("list"):
        return "- " + text
    return _escape_markdown_start(text)


def _heading_level(style: str) -> int:
    """Word's "Title" and "Heading N" styles (any language's built-in names start the same way)."""
    if style == "Title":
        return 1
    found = re.fullmatch(r"Heading (\d)", style)
    return min(6, int(found.group(1))) if found else 0


def _escape_markdown_start(text: str) -> str:
    """A body paragraph that starts like Markdown structure is kept as text."""
    return "\\" + text if re.match(r"(#{1,6}\s|[-*+]\s|\d+[.)]\s|>|\||```|~~~)", text) else text


def _docx_table(table) -> str:
    rows = []
    for row in table.rows:
        cells = [" ".join(cell.text.split()).replace("|", "\\|") for cell in row.cells]
        if any(cells):
            rows.append(cells)
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    lines = []
    for i, row in enumerate(rows):
        lines.append("| " + " | ".join(row + [""] * (width - len(row))) + " |")
        if i == 0:
            lines.append("|" + "|".join(["---"] * width) + "|")
    return "\n".join(lines)


# -- anything else that is not text ----------------------------------------------------------

_MAGIC = (
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"RIFF", "a media file"), (b"PK\x03\x04", "a ZIP archive"), (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "a program"), (b"%PDF", "a PDF"), (b"BZh", "a bzip2 archive"), (b"\xfd7zXZ", "an xz archive"),
    (b"7z\xbc\xaf", "a 7-Zip archive"), (b"\xd0\xcf\x11\xe0", "an old Office document (.doc, .xls)"),
    (b"SQLite format 3", "a database"),
)


def sniff(path: str | os.PathLike) -> str | None:
    """What a file that is not text is ("a PNG image"...), from its first bytes; None for text.

    Read before the file's size is budgeted, so a large binary file gets a clear
    card instead of an analysis offer (or a 500).
    """
    if format_for_path(path):
        return None
    with open(path, "rb") as fh:
        head = fh.read(8192)
    what = _magic(head)
    if what:
        return what
    if b"\x00" in head:
        return "a binary file"
    return None


def _magic(head: bytes) -> str | None:
    """What the first bytes say the file is ("a PNG image"...), or None."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    return None
