"""One SQLite file per indexed file version: its chunks, an FTS5 table over them, their vectors.

The file is ``<data>/indexes/<fingerprint>.sqlite`` where the fingerprint is the chunker's
(``Document.fingerprint``: the text's hash, its kind and the chunk settings, which cover the
chunker's version, seed 002's identity rule), so an unchanged file finds its index and a changed
one (or a new chunker) gets a new one.  Chunks go in with their FTS rows in one transaction, so
the keyword part is either whole or absent; vectors go in per batch, one commit each, so an index
cut off mid-way keeps every batch it finished and the indexer resumes with the rest.  The index is
complete for a model when every chunk has its vectors.  A chunk may have several vectors (schema 2):
an embedding model reads a few hundred tokens and drops the rest, so a chunk longer than that is
embedded as pieces it reads whole, and search takes a chunk's best piece.

Only the indexer writes (``Index(..., write=True)``); searches open their own read-only connection
(``mode=ro``: a reader never changes the file; WAL, so a search never waits for a batch being
written), and a reader's query has a time limit (``QUERY_SECONDS``, SQLite's progress handler).

Any SQLite error from an index file (a bad SD-card sector makes "database disk image is malformed"
on any page, at any query, not only at the open) is a ``BrokenIndex``: the indexer deletes the file
and builds it anew, and a question asked meanwhile gets a clear message, never a 500.

Text written without spaces (Japanese, Chinese, Thai) has a second FTS table of its own (schema 3):
``unicode61`` makes one token of a whole clause and a search for a word in it finds nothing, so
each run of such characters is also indexed as its single characters and its overlapping pairs
(``cjk_grams``, the bigram scheme of Lucene's CJK analyzer); a question is matched by its pairs,
and by its one-character words, which are kept.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from .. import chunking
from ..errors import HarveyError
from .embedding import pack

SCHEMA = 3                  # 2: several vectors per chunk (its pieces); 3: the CJK grams table; older files are made anew
QUERY_SECONDS = 20.0        # a reader's query is interrupted after this long (a damaged or huge file never hangs a job)
MAX_INDEXES = 32            # index files kept in the folder; the least recently used go first

_open: Counter = Counter()  # index files open now in this process (prune never removes one)
_open_lock = threading.Lock()

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    n INTEGER PRIMARY KEY, start INTEGER, body_start INTEGER, "end" INTEGER,
    first_line INTEGER, last_line INTEGER, first_page INTEGER, last_page INTEGER,
    heading TEXT, sections TEXT, kind TEXT, tokens INTEGER, text TEXT);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, heading, content='chunks', content_rowid='n', tokenize='porter unicode61');
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_cjk USING fts5(grams, content='', tokenize='unicode61');
CREATE TABLE IF NOT EXISTS vectors (
    model TEXT, n INTEGER, piece INTEGER, vec BLOB, PRIMARY KEY (model, n, piece)) WITHOUT ROWID;
"""


class BrokenIndex(HarveyError):
    """An index file cannot be used (damaged, another schema); the indexer makes it anew."""

    kind = "index"


class IndexUnwritable(HarveyError):
    """The disk takes no more (full, or remounted read-only): the file is kept, the build stops."""

    kind = "index"


class SlowIndex(HarveyError):
    """A reader's query ran past ``QUERY_SECONDS`` (the file is not known to be damaged)."""

    kind = "index"


@dataclass(frozen=True)
class Passage:
    """A chunk as the index keeps it: where it lies in the file and its text."""

    n: int                           # 0-based chunk number
    start: int
    body_start: int
    end: int
    first_line: int
    last_line: int
    pages: tuple[int, int] | None
    heading_path: tuple[str, ...]
    sections: tuple[tuple[str, ...], ...]
    kind: str
    tokens: int
    text: str


def folder(data_dir: str | os.PathLike) -> Path:
    """Where index files live."""
    return Path(data_dir) / "indexes"


def path_for(data_dir: str | os.PathLike, fingerprint: str) -> Path:
    """The index file of a document with this chunker fingerprint."""
    return folder(data_dir) / f"{fingerprint}.sqlite"


class Index:
    """An open index file; use as a context manager.  ``write``: the indexer's own connection."""

    def __init__(self, path: str | os.PathLike, write: bool = False):
        self.path = Path(path)
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.exists():
            raise BrokenIndex(f"{self.path.name}: no such index")
        self.db = None
        self.write = write
        self._deadline = 0.0
        _in_use(self.path, +1)
        try:
            _touch(self.path)
            if write:
                self.db = sqlite3.connect(self.path, timeout=10)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.executescript(_TABLES)
            else:
                self.db = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True, timeout=10)
                self._deadline = 0.0
                self.db.set_progress_handler(self._too_long, 10_000)
            self._check_schema(write)
        except (sqlite3.DatabaseError, BrokenIndex) as exc:
            _in_use(self.path, -1)
            if self.db is not None:
                self.db.close()
            if isinstance(exc, BrokenIndex):
                raise
            raise BrokenIndex(f"{self.path.name}: cannot be used as an index ({exc})") from exc

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()
        _in_use(self.path, -1)

    def _too_long(self) -> int:
        """SQLite's progress handler (readers): non-zero interrupts the query past its deadline."""
        return 1 if self._deadline and time.monotonic() > self._deadline else 0

    def _query(self, sql: str, params=()) -> sqlite3.Cursor:
        """Run one statement; any SQLite error is a broken index (a timeout is ``SlowIndex``)."""
        if not self.write:
            self._deadline = time.monotonic() + QUERY_SECONDS
        try:
            return self.db.execute(sql, params)
        except sqlite3.Error as exc:
            raise self._broken(exc) from exc

    def _rows(self, sql: str, params=()) -> list:
        """All rows of one query (fetched inside the error mapping: a damaged page may be met
        while fetching, not only at the first step)."""
        try:
            return self._query(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._broken(exc) from exc

    def _broken(self, exc: sqlite3.Error) -> HarveyError:
        """What an SQLite error means: a timeout, a disk that takes no more, or a damaged file."""
        said = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and "interrupted" in said:
            return SlowIndex(f"{self.path.name}: a search took longer than {QUERY_SECONDS:.0f} s and was stopped")
        if "disk is full" in said or "readonly database" in said:
            return IndexUnwritable(f"{self.path.name} cannot be written: "
                                   + ("the disk is full" if "full" in said else "the disk is read-only"))
        return BrokenIndex(f"{self.path.name}: the index is damaged ({exc}); it will be made anew")
    def _check_schema(self, write: bool) -> None:
        """A new file gets this schema's number; an existing one must have it (reading it is also
        what finds a file that is not SQLite at all)."""
        if write:
            with self.db:
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
        if self.meta("schema") != str(SCHEMA):
            raise BrokenIndex(f"{self.path.name}: an index of another schema")

    # -- reading -------------------------------------------------------------------

    def meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else default

    def chunk_count(self) -> int:
        """How many chunks the file makes (0 until they are in)."""
        return int(self.meta("chunks", "0"))

    def has_chunks(self) -> bool:
        return self.meta("chunks") is not None

    def vector_key(self, model: str) -> str | None:
        """The key ``model``'s vectors are stored under: ``NAME@DIGEST#DIM`` (the model's digest
        where the server says it, and the vectors' dimension), so a new model under the same tag,
        or one of another dimension, is never compared with the old vectors; None: none stored."""
        return self.meta(f"vectors:{model}")

    def vector_count(self, model: str) -> int:
        """How many chunks have their vectors from ``model``."""
        key = self.vector_key(model)
        if key is None:
            return 0
        return self._rows("SELECT count(DISTINCT n) FROM vectors WHERE model = ?", (key,))[0][0]

    def missing(self, model: str) -> list[int]:
        """Chunk numbers that have no vector from ``model`` yet, in order (what is left to embed)."""
        rows = self._rows("SELECT n FROM chunks WHERE n NOT IN (SELECT n FROM vectors WHERE model = ?) "
                          "ORDER BY n", (self.vector_key(model) or "",))
        return [n for (n,) in rows]

    def complete(self, model: str | None) -> bool:
        """Every chunk is in, and (with a model) every chunk has its vector."""
        if not self.has_chunks():
            return False
        return model is None or self.vector_count(model) == self.chunk_count()

    def passages(self, numbers: Iterable[int]) -> list[Passage]:
        """The chunks with these numbers, in document order."""
        wanted = sorted(set(numbers))
        if not wanted:
            return []
        marks = ",".join("?" * len(wanted))
        rows = self._rows(f'SELECT n, start, body_start, "end", first_line, last_line, first_page, last_page, '
                          f"heading, sections, kind, tokens, text FROM chunks WHERE n IN ({marks}) ORDER BY n",
                          wanted)
        return [_passage(row) for row in rows]

    def vectors(self, model: str) -> Iterator[tuple[int, bytes]]:
        """Every (chunk number, unit float32 vector bytes) of ``model``: one per piece of a chunk."""
        try:
            yield from self._query("SELECT n, vec FROM vectors WHERE model = ?", (self.vector_key(model) or "",))
        except sqlite3.Error as exc:
            raise self._broken(exc) from exc

    def fts(self, match: str, limit: int) -> list[tuple[int, float]]:
        """FTS5 hits for a MATCH expression, best first: (chunk number, BM25 score, higher is better).

        The heading column weighs half the text's: a word in a section's title says something, but
        the passage is what is sent."""
        rows = self._rows("SELECT rowid, bm25(chunks_fts, 1.0, 0.5) AS rank FROM chunks_fts "
                          "WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?", (match, limit))
        return [(n, -rank) for n, rank in rows]

    def cjk(self, match: str, limit: int) -> list[tuple[int, float]]:
        """Hits of the CJK grams table (``cjk_grams``; a MATCH of quoted grams), best first."""
        rows = self._rows("SELECT rowid, bm25(chunks_cjk) AS rank FROM chunks_cjk "
                          "WHERE chunks_cjk MATCH ? ORDER BY rank LIMIT ?", (match, limit))
        return [(n, -rank) for n, rank in rows]

    # -- writing (the indexer only) -------------------------------------------------------

    def add_document(self, doc: chunking.Document, chunks: list[chunking.Chunk]) -> None:
        """Every chunk and its FTS rows, and what the index is of, in one transaction."""
        try:
            self._add_document(doc, chunks)
        except sqlite3.Error as exc:
            raise self._broken(exc) from exc

    def _add_document(self, doc: chunking.Document, chunks: list[chunking.Chunk]) -> None:
        with self.db:
            if self.has_chunks():
                return
            for c in chunks:
                pages = doc.source.pages_of(c.start, c.end) if doc.source is not None else None
                heading = " › ".join(c.heading_path)
                self.db.execute("INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", (
                    c.index, c.start, c.body_start, c.end, c.first_line, c.last_line,
                    pages[0] if pages else None, pages[1] if pages else None,
                    json.dumps(list(c.heading_path)), json.dumps([list(s) for s in c.sections]),
                    c.kind, c.tokens, c.text))
                self.db.execute("INSERT INTO chunks_fts (rowid, text, heading) VALUES (?,?,?)",
                                (c.index, c.text, heading))
                grams = cjk_grams(f"{heading}\n{c.text}")
                if grams:
                    self.db.execute("INSERT INTO chunks_cjk (rowid, grams) VALUES (?,?)", (c.index, " ".join(grams)))
            for key, value in (("path", doc.path or ""), ("content_hash", doc.content_hash), ("kind", doc.kind),
                               ("fingerprint", doc.fingerprint), ("settings", doc.settings.fingerprint),
                               ("tokens", str(doc.tokens)), ("chunks", str(len(chunks)))):
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def drop_vectors(self, model: str) -> None:
        """Forget ``model``'s vectors (another model now answers under its name, or another
        dimension): every chunk is embedded again."""
        key = self.vector_key(model)
        try:
            with self.db:
                if key is not None:
                    self.db.execute("DELETE FROM vectors WHERE model = ?", (key,))
                self.db.execute("DELETE FROM meta WHERE key = ?", (f"vectors:{model}",))
        except sqlite3.Error as exc:
            raise self._broken(exc) from exc

    def add_vectors(self, model: str, items: Iterable[tuple[int, list[float]]], key: str | None = None) -> None:
        """One batch of vectors, committed together (a batch cut off is embedded again, whole).  A
        chunk of several pieces comes as several items with its number, in order, all in this batch
        (a chunk's vectors are whole or absent); they replace any it had.  ``key``: what they are
        stored under (``vector_key``; the first batch sets it)."""
        key = key or self.vector_key(model) or model
        rows, pieces = [], Counter()
        for n, vec in items:
            rows.append((key, n, pieces[n], pack(vec)))
            pieces[n] += 1
        try:
            with self.db:
                self.db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (f"vectors:{model}", key))
                self.db.executemany("DELETE FROM vectors WHERE model = ? AND n = ?", [(key, n) for n in pieces])
                self.db.executemany("INSERT INTO vectors VALUES (?, ?, ?, ?)", rows)
        except sqlite3.Error as exc:
            raise self._broken(exc) from exc


def unspaced(ch: str) -> bool:
    """Whether ``ch`` belongs to a script written without spaces between words: Han, kana,
    Thai, Lao, Khmer, Myanmar (Hangul is written with spaces: ``unicode61`` reads it)."""
    if ch < "\u0e00":
        return False
    name = unicodedata.name(ch, "")
    return name.startswith(("CJK UNIFIED", "CJK COMPATIBILITY IDEOGRAPH", "HIRAGANA", "KATAKANA",
                            "THAI", "LAO", "KHMER", "MYANMAR")) or ch in "々〆ー"


def unspaced_runs(text: str) -> list[str]:
    """The runs of characters of scripts written without spaces, in order."""
    runs, run = [], []
    for ch in text:
        if unspaced(ch):
            run.append(ch)
        elif run:
            runs.append("".join(run))
            run = []
    if run:
        runs.append("".join(run))
    return runs


def cjk_grams(text: str) -> list[str]:
    """The tokens a passage is indexed under in the CJK table: each run's single characters and
    its overlapping pairs, as ``u`` + hex code points (one ASCII token each, so no tokenizer can
    merge or split them again)."""
    grams = []
    for run in unspaced_runs(text):
        grams.extend(_gram(ch) for ch in run)
        grams.extend(_gram(run[i:i + 2]) for i in range(len(run) - 1))
    return grams


def _gram(chars: str) -> str:
    return "u" + "x".join(f"{ord(c):x}" for c in chars)


def query_grams(text: str) -> list[str]:
    """The CJK tokens a question is matched by: each run's pairs, or the character of a one-character run
    (a one-character word is a word), each once."""
    out: list[str] = []
    for run in unspaced_runs(text):
        grams = [run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)]
        for g in grams:
            if _gram(g) not in out:
                out.append(_gram(g))
    return out


def _passage(row) -> Passage:
    n, start, body_start, end, first_line, last_line, p0, p1, heading, sections, kind, tokens, text = row
    return Passage(n, start, body_start, end, first_line, last_line, (p0, p1) if p0 is not None else None,
                   tuple(json.loads(heading)), tuple(tuple(s) for s in json.loads(sections)), kind, tokens, text)


def _in_use(path: Path, change: int) -> None:
    """Count an index file opened (+1) or closed (-1) in this process."""
    key = str(path.resolve())
    with _open_lock:
        _open[key] += change
        if _open[key] <= 0:
            del _open[key]


def _touch(path: Path) -> None:
    """Mark the file used now (its mtime), so prune's "least recently used" means used, not written
    (a WAL write leaves the main file's time alone until a checkpoint)."""
    try:
        os.utime(path)
    except OSError:
        pass                     # not made yet (the writer creates it) or read-only: nothing to mark


def remove(path: Path) -> bool:
    """Delete an index file and its WAL and shared-memory files; whether the file was there."""
    there = path.exists()
    for extra in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        extra.unlink(missing_ok=True)
    return there


def prune(data_dir: str | os.PathLike, keep: str | Iterable[str], limit: int = MAX_INDEXES) -> list[Path]:
    """Remove index files past ``limit``, least recently used first (every open marks a file used),
    never one in ``keep`` (fingerprints: the indexer's tasks) nor one open in this process: the folder
    must not grow without bound as files change, and a job about to read an index keeps it.
    Returns what was removed."""
    keep = {keep} if isinstance(keep, str) else set(keep)
    with _open_lock:
        keep |= {Path(p).stem for p in _open}
    files = sorted(folder(data_dir).glob("*.sqlite"), key=lambda p: p.stat().st_mtime, reverse=True)
    kept = sum(1 for p in files if p.stem in keep)
    removed = []
    for path in [p for p in files if p.stem not in keep][max(0, limit - kept):]:
        remove(path)
        removed.append(path)
    return removed
