"""Documents and their records: kinds, settings, errors, token estimates, reading a file into a
Document (PDF/Word through ``app.documents``), measuring one before it is read, fingerprints."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field

from ..errors import DocumentError
from .htmltext import html_to_text


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
# A counted document (issue 30) is packed by the tokens that start inside each piece of its text;
# cut out and tokenized alone, a piece can differ by a token at each end (the token a cut falls in,
# a merge across the cut), and a carried prefix meets the text.  Packing keeps this many tokens free;
# every chunk's own count is then checked, and a chunk still over its size is split.
TOKEN_SLACK = 3

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
      lists the heading path of every section the chunk holds.
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
    # Issue 30: the name of the model's token counter that sizes the chunks ("": UTF-8 bytes over
    # ``bytes_per_token``).  Set by ``with_counter``; part of the fingerprint only when set, so the
    # chunks (and ids, and a retrieval index) of a byte-sized document stay what they were.
    counter: str = ""

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
    def max_tokens(self) -> int:
        """A counted document's packing budget: the size less ``TOKEN_SLACK`` (see there)."""
        return max(1, self.size_tokens - TOKEN_SLACK)

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
            **({"counter": self.counter, "token_slack": TOKEN_SLACK} if self.counter else {}),
        }, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


RETRIEVAL_SIZE_TOKENS = 600     # seed 002's default chunk for search: sharp hits, one level of chunk
RETRIEVAL_BYTES_PER_TOKEN = 4.0  # fixed, not calibrated: a retrieval index is keyed by its settings, so a
#                                  drifting calibration must never re-index an unchanged file


def retrieval_settings(size_tokens: int = RETRIEVAL_SIZE_TOKENS) -> ChunkSettings:
    """Seed 002's retrieval preset: about 600 tokens, section-first packing, tables on their own.

    No overlap: the answer pulls a passage's neighbours in itself (the walk from chunk to section),
    and an overlap would put the same words in two passages, ranking them twice.  The settings are
    fixed, so the fingerprint (the index's key) changes only with the chunker or these numbers.
    """
    return ChunkSettings(size_tokens=size_tokens, overlap="none", bytes_per_token=RETRIEVAL_BYTES_PER_TOKEN,
                         purpose="retrieval")


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
    # Issue 30 (``with_counter``): the model's counter and where each of the text's tokens starts
    # (an ``array('i')`` of character offsets, ascending: 4 bytes a token); None: sized in bytes.
    counter: object = field(default=None, repr=False, compare=False)
    token_starts: object = field(default=None, repr=False, compare=False)

    @property
    def tokens(self) -> int:
        """Tokens of the whole text: the model's count when counted, else the estimate (the alert)."""
        if self.token_starts is not None:
            return len(self.token_starts)
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
    from .. import documents

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
    from .. import documents

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


def source_of(doc: Document) -> str:
    """Which text a record's character offsets point into (``ChunkAnalysis.source``, the record's
    ``chunk-source``, and a job's ``source``): "sha256:" and the text hash's first 16 digits."""
    return "sha256:" + doc.content_hash[:16]


def with_settings(doc: Document, settings: ChunkSettings) -> Document:
    """The same text under other chunk settings, without reading the file again (the fingerprint
    includes the settings, so it is computed anew)."""
    fp = hashlib.sha256(f"{doc.content_hash}|{doc.kind}|{settings.fingerprint}".encode()).hexdigest()[:16]
    return dataclasses.replace(doc, settings=settings, fingerprint=fp)


def with_counter(doc: Document, counter) -> Document:
    """``doc`` sized by the model's own tokens (issue 30): its text tokenized once, the start of
    every token kept, and the settings naming the counter (so the fingerprint, the chunk ids and
    whatever is keyed on them change with the sizing).  The same text, settings and counter give
    the same chunks every time: the card's plan and the worker's run are one layout."""
    settings = dataclasses.replace(doc.settings, counter=counter.name or "counted")
    return dataclasses.replace(with_settings(doc, settings), counter=counter,
                               token_starts=counter.starts(doc.text))
