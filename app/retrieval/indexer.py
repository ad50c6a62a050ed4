"""Build a file's index in the background: the one writer of index files.

A file is chunked with seed 002's retrieval preset; its chunks and FTS rows go in at once (keyword
search works from then on), then, when an embedding model is installed, its chunks are embedded in
batches through the model server (Ollama's ``/api/embed`` or ``/v1/embeddings``), one commit per
batch.  Work runs on the worker's "index" lane, one file at a time, so two requests for the same
file never write it twice and a Pi is never asked for two indexes at once.

Every model call of a build (seed 004's chunking, each embedding batch) goes through ``ModelCalls``
as a call of the build's activity (``Progress.activity``): a cancel (a job's Stop) cuts the chunking
call at once and lets the embedding batch in flight finish, so its vectors are kept and no chunk is
ever embedded twice; ``close`` (the app shutting down) cuts whatever is in flight, since an embedding
model loading on a Pi takes minutes.

Durable and resumable: a cancel (or a restart) keeps every finished batch; the next request for the
file embeds only the chunks still without a vector, and the index says complete only when every
chunk has one.  An unchanged file is never indexed twice: its fingerprint names its index.
Without an embedding model the index is keyword-only, and says so (``Progress.note``).

A passage is embedded as pieces the model reads whole: the model's input limit (its window, from
the server's facts) in cautious bytes, cut at paragraph, sentence or word boundaries.  The server is
told not to cut (``truncate: false``), so a piece still too long is refused, and sent again as two
halves (a few times at most); a passage's vectors are all its pieces', and search takes its best.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from typing import Callable, Iterator

from .. import chunking
from ..chunking import llmhelp
from ..errors import HarveyError
from ..modelserver import Cancelled, ContextExceeded
from ..work.activity import Activity
from ..work.calls import ModelCalls
from . import embedding
from .index import BrokenIndex, Index, path_for, prune, remove

log = logging.getLogger(__name__)

EMBED_BYTES_PER_TOKEN = 3.0  # cautious: embedders' tokenizers read English at ~4 bytes a token, digits nearer 2-3
EMBED_RESERVED_TOKENS = 8   # [CLS]/[SEP] or BOS/EOS, and a margin
DEFAULT_EMBED_TOKENS = 256  # a server that does not say its model's limit: all-minilm's, the smallest common one
MAX_HALVINGS = 4            # a refused piece is halved at most this often (16 calls at most) before it fails
KEEP_TASKS = 16              # finished tasks remembered for their progress; older ones are read from disk
PROMPT_SHARE = 0.5           # of seed 004's window (in bytes) the pieces shown in one request may take
KEEP_COUNTS = 8              # files whose pieces per passage are remembered for the card's estimate
STATES = ("queued", "indexing", "complete", "cancelled", "interrupted")
KEYWORD_ONLY_NOTE = ("No embedding model is installed, so passages are found by keyword search only; for "
                     f"search by meaning too: {embedding.MODEL_HINT}.")


@dataclass
class Progress:
    """Where one file's index stands (what the card shows)."""

    fingerprint: str
    path: str
    state: str = "queued"
    total: int = 0                   # chunks
    embedded: int = 0                # chunks with a vector from ``model``
    model: str | None = None         # the embedding model (None: keyword search only)
    note: str = ""                   # what the user should know (keyword only, why it stopped)
    stop: threading.Event = field(default_factory=threading.Event, repr=False)
    activity: Activity | None = field(default=None, repr=False)  # the build's model calls in flight
    cancel_cuts: bool = field(default=False, repr=False)           # a cancel stops them (else: after the batch)
    finished: threading.Event = field(default_factory=threading.Event, repr=False)
    _listeners: set = field(default_factory=set, repr=False)      # Events a waiter wants set on news
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    def listen(self, event: threading.Event) -> None:
        """Set ``event`` at each batch and at the end (set at once if it ended already): a waiter
        sleeps on its own Event, which its Stop sets too, instead of polling."""
        with self._lock:
            self._listeners.add(event)
        if self.finished.is_set():
            event.set()

    def unlisten(self, event: threading.Event) -> None:
        with self._lock:
            self._listeners.discard(event)

    def changed(self) -> None:
        """A batch went in or the task ended: wake every waiter (the indexer's thread calls it)."""
        with self._lock:
            listeners = list(self._listeners)
        for event in listeners:
            event.set()

    def end(self) -> None:
        """The task is over, whatever happened."""
        self.finished.set()
        self.changed()


@dataclass(frozen=True)
class Cost:
    """What indexing a file still costs (the card's estimate; nothing is indexed or sent to make it)."""

    model: str | None            # the embedding model (None: keyword search only)
    complete: bool               # the index is whole: no indexing cost
    passages: int = 0            # passages still to embed
    pieces: int = 0              # the pieces they are sent as (the piece rule of ``piece_bytes``)
    seconds: float | None = None  # the time to embed them (None: no batch of ``model`` measured yet)
    estimated: bool = False      # from the file's estimated size, not its passages (a file too large to chunk for a card)


@dataclass(frozen=True)
class ChunkHelp:
    """Seed 004 for the index: which help is on, the model asked, and how its one call is sized
    (asked only when help is on, so a default setup never touches the server for it)."""

    help: llmhelp.Help
    model: str
    window: Callable[[], int]
    bytes_per_token: Callable[[], float]


class Indexer:
    """Indexes files on the "index" lane; asked by the views, read by the answer."""

    def __init__(self, data_dir: str | Path, models, worker, settings, calibration=None, calls=None,
                 chunk_help: ChunkHelp | None = None):
        self.data_dir = Path(data_dir)
        self.models = models                 # app.modelserver.ModelServer
        self.settings = settings             # config.RetrievalConfig
        self.calibration = calibration       # app.budget.Calibration: the one owner of measured speeds
        self.chunk_help = chunk_help if chunk_help and chunk_help.help.on and calls else None
        # app.work.calls.ModelCalls: seed 004's one chat call and every embedding batch
        self.calls = calls if calls is not None else ModelCalls(models, calibration)
        self._tasks: OrderedDict[str, Progress] = OrderedDict()
        self._docs: dict[str, chunking.Document] = {}    # the text of each task queued or running, no longer
        self._counts: OrderedDict[tuple[str, int], list[int]] = OrderedDict()   # pieces per chunk, by file
        self._plain: OrderedDict[str, str] = OrderedDict()        # helped name -> the default chunker's
        self._fell_back: OrderedDict[str, str] = OrderedDict()    # helped names whose help fell back
        self._lock = threading.Lock()
        self._closing = False             # the app is shutting down: every build's call is cut
        self.lane = worker.lane("index", self._serve)

    # -- asking -----------------------------------------------------------------------------

    def document(self, path: str | Path) -> chunking.Document:
        """The file read for retrieval, under its index's name (``keyed``)."""
        return self.keyed(chunking.read_document(path, chunking.retrieval_settings()))

    def keyed(self, doc: chunking.Document) -> chunking.Document:
        """``doc`` under the name of its index: the chunker fingerprint, or with seed 004's help on,
        that and the help's fingerprint, so helped and default chunks never share an index, and the
        model's chunks, stored once, are the same on every later run."""
        if self.chunk_help is None:
            return doc
        h = self.chunk_help
        blob = f"{doc.fingerprint}|{llmhelp.help_fingerprint(doc, h.help, h.model)}"
        helped = hashlib.sha256(blob.encode()).hexdigest()[:16]
        with self._lock:
            self._plain[helped] = doc.fingerprint
            while len(self._plain) > KEEP_TASKS * 4:
                self._plain.popitem(last=False)
        return dataclasses.replace(doc, fingerprint=helped)

    def _plain_name(self, fingerprint: str) -> str | None:
        """The default chunker's name of a helped document (None: not a helped name)."""
        with self._lock:
            return self._plain.get(fingerprint)

    def stored(self, fingerprint: str) -> str:
        """The name of the index file that holds a document's chunks: its own, or, when seed 004's
        help fell back in this process, the default chunker's (``_build``)."""
        with self._lock:
            return self._fell_back.get(fingerprint, fingerprint)

    def embed_model(self, quiet: bool = True) -> str | None:
        """The embedding model to use now, or None (keyword search only).  A server that does not
        answer the model list: None when ``quiet`` (a status), else the error (a build stops and
        is asked again later, so it never settles for keyword-only by accident)."""
        try:
            installed = self.models.models() if self.settings.embed_model == "auto" else []
        except HarveyError as exc:
            if not quiet:
                raise
            log.warning("index: cannot list models (%s); keyword search only for now", exc)
            return None
        return embedding.choose(self.settings.embed_model, installed)

    def request(self, doc: chunking.Document) -> Progress:
        """Make sure ``doc`` is (being) indexed: a complete index is used as it is, anything else is
        queued on the lane (once: a file already queued or running is not queued again).  A task still
        running that an earlier job cancelled is wanted again: its stop is cleared (if it saw the stop
        first it ends "cancelled", and the asker asks again)."""
        with self._lock:
            known = self._tasks.get(doc.fingerprint)
            if known and not known.finished.is_set():
                known.stop.clear()
                return known
        progress = self.status(doc)
        if progress.complete:
            return progress
        progress = Progress(doc.fingerprint, doc.path or "", total=progress.total, embedded=progress.embedded,
                            model=progress.model)
        with self._lock:
            known = self._tasks.get(doc.fingerprint)
            if known and not known.finished.is_set():
                known.stop.clear()
                return known             # another request queued it meanwhile
            self._remember(doc, progress)
        self.lane.put(doc.fingerprint)
        return progress

    def status(self, doc: chunking.Document) -> Progress:
        """The progress of a task queued or running, else what the index file says now (an embedding
        model installed since the index was made makes it incomplete again)."""
        with self._lock:
            known = self._tasks.get(doc.fingerprint)
        if known and not known.finished.is_set():
            return known
        progress = Progress(doc.fingerprint, doc.path or "", state="interrupted")
        target = path_for(self.data_dir, self.stored(doc.fingerprint))
        if not target.exists():
            progress.state = "queued"
            return progress
        model = self.embed_model()
        try:
            with Index(target) as index:
                progress.total, progress.model = index.chunk_count(), model
                fresh = model is None or self.current(index, model)
                progress.embedded = index.vector_count(model) if model and fresh else 0
                if fresh and index.complete(model):
                    progress.state = "complete"
                    progress.note = "" if model else KEYWORD_ONLY_NOTE
        except BrokenIndex as exc:
            self.broken(doc.fingerprint, exc)
            progress.state = "queued"
        return progress

    def key_base(self, model: str) -> str:
        """What a model's stored vectors are keyed by, before their dimension: its name and, when
        the model server says it (``ModelServer.digest``), its digest."""
        try:
            digest = self.models.digest(model)
        except HarveyError:
            digest = None
        return f"{model}@{digest[:12]}" if isinstance(digest, str) and digest else model

    def current(self, index: Index, model: str) -> bool:
        """Whether ``model``'s vectors in ``index`` (if any) are of the model that has its name now."""
        key = index.vector_key(model)
        return key is None or key.rsplit("#", 1)[0] == self.key_base(model)

    def stale(self, fingerprint: str, model: str) -> None:
        """A search found the stored vectors of ``model`` are not comparable with its question's
        (another dimension): they go, and the next request embeds the file again."""
        with self._lock:
            known = self._tasks.get(fingerprint)
            if known and not known.finished.is_set():
                return
        target = path_for(self.data_dir, self.stored(fingerprint))
        try:
            with Index(target, write=True) as index:
                index.drop_vectors(model)
        except BrokenIndex as exc:
            self.broken(fingerprint, exc)
        log.warning("index %s: the vectors of %s are another model's; they will be made again", fingerprint, model)

    def broken(self, fingerprint: str, why: Exception) -> None:
        """A reader met an SQLite error in this index: the file goes (unless a build of it runs now:
        that build meets the damage itself), and the next request builds it anew."""
        with self._lock:
            known = self._tasks.get(fingerprint)
            if known and not known.finished.is_set():
                return
            try:
                removed = remove(path_for(self.data_dir, self._fell_back.get(fingerprint, fingerprint)))
            except OSError as exc:           # a disk remounted read-only: the file stays, searches fail clearly
                log.warning("index %s is damaged (%s) and cannot be removed: %s", fingerprint, why, exc)
                return
        if removed:
            log.warning("index %s is damaged (%s); removed, it will be made anew", fingerprint, why)

    def cost(self, doc: chunking.Document) -> Cost:
        """What indexing ``doc`` still costs: nothing for a complete index; without an embedding model
        a keyword index (seconds); else the passages still without a vector, the pieces they are sent
        as, and the time at the measured seconds per piece.  Reads the index file and chunks the text
        (remembered per file), never calls a model, never writes."""
        model = self.embed_model()
        target = path_for(self.data_dir, self.stored(doc.fingerprint))
        missing = None                     # chunk numbers without a vector (None: no chunks in yet)
        if target.exists():
            try:
                with Index(target) as index:
                    fresh = model is None or self.current(index, model)
                    if fresh and index.complete(model):
                        return Cost(model, complete=True)
                    if index.has_chunks() and model:
                        missing = index.missing(model) if fresh else list(range(index.chunk_count()))
            except BrokenIndex as exc:
                self.broken(doc.fingerprint, exc)
        if model is None:
            return Cost(None, complete=False)
        counts = self._piece_counts(doc, model)
        numbers = range(len(counts)) if missing is None else [n for n in missing if n < len(counts)]
        pieces = sum(counts[n] for n in numbers)
        return self._priced(model, len(numbers), pieces)

    def estimate(self, tokens: int) -> Cost:
        """The cost for a file too large to read for a card (issue 23: a request never holds a huge
        text): its passages from its estimated tokens at the retrieval chunk size, each sent as the
        pieces a full passage needs; whether it is indexed already is not known without reading it."""
        model = self.embed_model()
        if model is None:
            return Cost(None, complete=False)
        size = chunking.RETRIEVAL_SIZE_TOKENS
        passages = max(1, -(-tokens // size))
        pieces = passages * max(1, -(-size * 4 // piece_bytes(model, self._window(model))))
        return dataclasses.replace(self._priced(model, passages, pieces), estimated=True)

    def _priced(self, model: str, passages: int, pieces: int) -> Cost:
        """The cost of embedding ``pieces`` at the measured seconds per piece of ``model`` (None:
        no batch of it measured yet), for the card's estimate from an index or from a size alone."""
        per_piece = self.calibration.embed_seconds(model) if self.calibration else None
        return Cost(model, False, passages, pieces, per_piece * pieces if per_piece is not None else None)

    def _piece_counts(self, doc: chunking.Document, model: str) -> list[int]:
        """How many pieces each of the file's chunks is embedded as (the indexer's rule), remembered
        for the last ``KEEP_COUNTS`` files so a card drawn again does not chunk the file again."""
        max_bytes = piece_bytes(model, self._window(model))
        key = (doc.fingerprint, max_bytes)
        with self._lock:
            if key in self._counts:
                self._counts.move_to_end(key)
                return self._counts[key]
        counts = [len(chunking.split_to_fit(c.text, max_bytes))
                  for c in chunking.chunk_document(doc)]
        with self._lock:
            self._counts[key] = counts
            while len(self._counts) > KEEP_COUNTS:
                self._counts.popitem(last=False)
        return counts

    def _window(self, model: str) -> int | None:
        """The embedding model's input limit from the server's facts (asked once per model; None when
        the server cannot say now: the cautious default is used)."""
        try:
            return self.models.window(model)
        except HarveyError:
            return None

    def cancel(self, fingerprint: str) -> bool:
        """Stop indexing a file after the embedding batch in flight (what is done stays done; a
        chunking call of seed 004 is cut at once)."""
        with self._lock:
            known = self._tasks.get(fingerprint)
        if not known or known.finished.is_set():
            return False
        known.stop.set()
        activity = known.activity
        if activity is not None and known.cancel_cuts:
            activity.stop()
        return True

    def close(self) -> None:
        """The app is shutting down: every build stops now, its model call in flight cut (the batches
        stored stay; the next start embeds only the rest)."""
        with self._lock:
            self._closing = True
            running = [p for p in self._tasks.values() if not p.finished.is_set()]
        for progress in running:
            progress.stop.set()
            activity = progress.activity
            if activity is not None:
                activity.stop()

    @contextmanager
    def _calls_of(self, fingerprint: str, progress: Progress, cancel_cuts: bool) -> Iterator[Activity]:
        """The activity this stretch of a build makes its model calls as (``ModelCalls`` attaches each
        call to it): ``close`` stops it, and ``cancel`` too when ``cancel_cuts``. Set before the stop is
        read, so a stop either sees it or was seen."""
        activity = Activity(f"index-{fingerprint}", "", "index", 0)
        progress.cancel_cuts = cancel_cuts          # before the activity: a cancel reads them in that order
        progress.activity = activity
        if progress.stop.is_set() and (cancel_cuts or self._closing):
            activity.stop()
        try:
            yield activity
        finally:
            progress.activity = None

    def wait(self, fingerprint: str, timeout: float) -> Progress | None:
        """Wait up to ``timeout`` s for a task to end; its progress (None: no such task)."""
        with self._lock:
            known = self._tasks.get(fingerprint)
        if known:
            known.finished.wait(timeout)
        return known

    def _remember(self, doc: chunking.Document, progress: Progress) -> None:
        """Keep the task (under the lock); the oldest finished ones are forgotten, so memory stays flat
        (a finished task keeps its progress only, never the file's text)."""
        self._tasks[doc.fingerprint] = progress
        self._docs[doc.fingerprint] = doc
        self._tasks.move_to_end(doc.fingerprint)
        ended = [fp for fp, p in self._tasks.items() if p.finished.is_set()]
        for fp in ended[:max(0, len(self._tasks) - KEEP_TASKS)]:
            del self._tasks[fp]

    # -- building (the lane's thread) ----------------------------------------------------------

    def _serve(self, fingerprint: str) -> None:
        """The lane's item: build one file's index; the task ends whatever happens."""
        with self._lock:
            doc, progress = self._docs.get(fingerprint), self._tasks.get(fingerprint)
        if doc is None or progress is None:
            return
        try:
            self.build(doc, progress)
        except (HarveyError, OSError) as exc:     # OSError: the folder cannot be written (a full disk)
            progress.state, progress.note = "interrupted", f"Indexing stopped: {exc}"
            log.warning("index %s (%s): %s", doc.path, fingerprint, exc)
        finally:
            with self._lock:
                self._docs.pop(fingerprint, None)
            progress.end()

    def build(self, doc: chunking.Document, progress: Progress) -> Progress:
        """Chunks and FTS rows first (if not in yet), then the vectors still missing, batch by batch.
        An SQLite error anywhere in the file (at the open or at any later query) removes it and the
        build starts again from nothing, once."""
        if progress.stop.is_set():
            progress.state = "cancelled"
            return progress
        progress.state = "indexing"
        target = path_for(self.data_dir, doc.fingerprint)
        try:
            return self._build(doc, progress, target)
        except BrokenIndex as exc:
            log.warning("index %s is damaged (%s); making it anew", target.name, exc)
            remove(target)
            progress.embedded = 0
            return self._build(doc, progress, target)

    def _build(self, doc: chunking.Document, progress: Progress, target: Path, plain: bool = False) -> Progress:
        """``plain``: the default chunker's chunks, stored under their own name (seed 004's help
        fell back: they never go under the helped chunking's name)."""
        fallback = None
        with Index(target, write=True) as index:
            if not index.has_chunks():
                try:
                    chunks, own = self._chunks(doc, progress, use_help=not plain)
                except Cancelled:
                    progress.state, progress.note = "cancelled", "Indexing was cancelled while the model chose chunks."
                    return progress
                fallback = None if own else self._plain_name(doc.fingerprint)
                if fallback is None:
                    index.add_document(doc, chunks)
        if fallback is not None:
            remove(target)                    # the helped name holds nothing: help is asked again later
            with self._lock:
                self._fell_back[doc.fingerprint] = fallback
                while len(self._fell_back) > KEEP_TASKS * 4:
                    self._fell_back.popitem(last=False)
            log.warning("index %s: the model's chunks could not be had; the default chunks are stored as %s",
                        doc.fingerprint, fallback)
            return self._build(dataclasses.replace(doc, fingerprint=fallback), progress,
                               path_for(self.data_dir, fallback), plain=True)
        with Index(target, write=True) as index:
            progress.total = index.chunk_count()
            progress.model = self.embed_model(quiet=False)
            if progress.model is None:
                progress.note = KEYWORD_ONLY_NOTE
            else:
                self._embed(index, progress)
            if index.complete(progress.model):
                progress.state = "complete"
        with self._lock:
            keep = set(self._tasks) | {doc.fingerprint} | set(self._fell_back.values())
        prune(self.data_dir, keep=keep)
        return progress

    def _chunks(self, doc: chunking.Document, progress: Progress,
                use_help: bool = True) -> tuple[list[chunking.Chunk], bool]:
        """The file's chunks: the default chunker's, or with seed 004 on, the model's (one call
        through ModelCalls, stopped by ``cancel``; an invalid reply falls back to the default chunks,
        logged by llmhelp).  A server away is not a fallback: the build stops and is asked again, so
        the index never keeps default chunks under the helped name for a passing outage."""
        h = self.chunk_help
        if h is None or not use_help:
            return chunking.chunk_document(doc), True
        away: list[HarveyError] = []
        with self._calls_of(doc.fingerprint, progress, cancel_cuts=True) as activity:
            ask = llmhelp.model_ask(self.calls, activity, h.model, h.window(), h.bytes_per_token())

            def asked(messages: list[dict], schema: dict, num_predict: int) -> str:
                try:
                    return ask(messages, schema, num_predict)
                except HarveyError as exc:
                    if exc.transient and not isinstance(exc, Cancelled):
                        away.append(exc)
                    raise

            window = h.window()
            chunks, own = llmhelp.helped(doc, h.help, asked, h.model,
                                         prompt_bytes=int(window * h.bytes_per_token() * PROMPT_SHARE))
        if away:
            raise away[0]
        return chunks, own

    def _embed(self, index: Index, progress: Progress) -> None:
        """Embed the chunks without a vector, ``embed_batch`` at a time, until done or stopped."""
        model = progress.model
        base = self.key_base(model)
        if not self.current(index, model):
            index.drop_vectors(model)            # another model under the name, or another dimension
        missing = index.missing(model)
        progress.embedded = progress.total - len(missing)
        size = self.settings.embed_batch
        max_bytes = piece_bytes(model, self.models.window(model) if missing else None)
        for at in range(0, len(missing), size):
            if progress.stop.is_set():
                return self._cancelled(progress)
            numbers = missing[at:at + size]
            passages = index.passages(numbers)
            began = time.monotonic()
            with self._calls_of(progress.fingerprint, progress, cancel_cuts=False) as activity:
                try:
                    vectors = embed_passages(functools.partial(self.calls.embed, activity), model,
                                             [p.text for p in passages], max_bytes)
                except Cancelled:
                    return self._cancelled(progress)     # cut by ``close``: the batch in flight is not kept
            if self.calibration is not None:
                self.calibration.observe_embed(model, sum(len(vs) for vs in vectors), time.monotonic() - began)
            items = [(p.n, v) for p, vs in zip(passages, vectors) for v in vs]
            key = f"{base}#{len(items[0][1])}" if items else None
            if key and index.vector_key(model) not in (None, key):
                index.drop_vectors(model)        # the model now answers in another dimension: start again
                return self._embed(index, progress)
            index.add_vectors(model, items, key)
            progress.embedded += len(numbers)
            progress.changed()

    @staticmethod
    def _cancelled(progress: Progress) -> None:
        progress.state = "cancelled"
        progress.note = f"Indexing was cancelled after {progress.embedded} of {progress.total} passages."


def piece_bytes(model: str, limit_tokens: int | None) -> int:
    """The longest piece of a passage, in UTF-8 bytes, that ``model`` reads whole: its input limit
    (None: the server does not say) less its special tokens and document prefix, at a cautious
    bytes-per-token (a refused piece is halved, so caution costs a few more pieces, never a fact)."""
    tokens = max(16, (limit_tokens or DEFAULT_EMBED_TOKENS) - EMBED_RESERVED_TOKENS)
    prefix = len(embedding.document_text(model, "").encode())
    return max(32, int(tokens * EMBED_BYTES_PER_TOKEN) - prefix)


Embed = Callable[[str, list[str]], list[list[float]]]


def embed_passages(embed: Embed, model: str, texts: list[str], max_bytes: int) -> list[list[list[float]]]:
    """Each passage's vectors, one per piece of at most ``max_bytes``, in one request; when the
    server refuses a piece as too long (``ContextExceeded``), each piece is sent on its own and a
    refused one as halves (``MAX_HALVINGS`` deep)."""
    pieces = [chunking.split_to_fit(text, max_bytes) for text in texts]
    flat = [embedding.document_text(model, piece) for group in pieces for piece in group]
    try:
        vectors = _checked(embed, model, flat)
    except ContextExceeded:
        return [[v for piece in group for v in _embed_halving(embed, model, piece, MAX_HALVINGS)]
                for group in pieces]
    out, at = [], 0
    for group in pieces:
        out.append(vectors[at:at + len(group)])
        at += len(group)
    return out


def _embed_halving(embed: Embed, model: str, piece: str, halvings: int) -> list[list[float]]:
    """One piece's vectors: itself, or (refused as too long) its two halves', each tried the same."""
    try:
        return _checked(embed, model, [embedding.document_text(model, piece)])
    except ContextExceeded as exc:
        if halvings <= 0 or len(piece) < 2:
            raise ContextExceeded(f"{model} refused a passage piece of {len(piece.encode())} bytes even after "
                                  f"halving it {MAX_HALVINGS} times: {exc}") from exc
        first, second = chunking.halve(piece)
        return (_embed_halving(embed, model, first, halvings - 1)
                + _embed_halving(embed, model, second, halvings - 1))


def _checked(embed: Embed, model: str, texts: list[str]) -> list[list[float]]:
    """The server's vectors for ``texts``, refused unless there is one per text."""
    vectors = embed(model, texts)
    if len(vectors) != len(texts):
        raise BadVectors(f"{model} answered {len(vectors)} vectors for {len(texts)} passages")
    return vectors


class BadVectors(HarveyError):
    """The server answered another number of vectors than it was sent texts (its fault, not the file's)."""
