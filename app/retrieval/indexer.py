"""Build a file's index in the background: the one writer of index files.

A file is chunked with seed 002's retrieval preset; its chunks and FTS rows go in at once (keyword
search works from then on), then, when an embedding model is installed, its chunks are embedded in
batches through the model server (Ollama's ``/api/embed`` or ``/v1/embeddings``), one commit per
batch.  Work runs on the worker's "index" lane, one file at a time, so two requests for the same
file never write it twice and a Pi is never asked for two indexes at once.

Durable and resumable: a cancel (or a restart) keeps every finished batch; the next request for the
file embeds only the chunks still without a vector, and the index says complete only when every
chunk has one.  An unchanged file is never indexed twice: its fingerprint names its index.
Without an embedding model the index is keyword-only, and says so (``Progress.note``).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from .. import chunking
from ..errors import HarveyError
from . import embedding
from .index import BrokenIndex, Index, path_for, prune

log = logging.getLogger(__name__)

KEEP_TASKS = 16              # finished tasks remembered for their progress; older ones are read from disk
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
    finished: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def complete(self) -> bool:
        return self.state == "complete"


class Indexer:
    """Indexes files on the "index" lane; asked by the views, read by the answer."""

    def __init__(self, data_dir: str | Path, models, worker, settings):
        self.data_dir = Path(data_dir)
        self.models = models                 # app.modelserver.ModelServer
        self.settings = settings             # config.RetrievalConfig
        self._tasks: OrderedDict[str, Progress] = OrderedDict()
        self._docs: dict[str, chunking.Document] = {}    # the text of each task queued or running, no longer
        self._lock = threading.Lock()
        self.lane = worker.lane("index", self._serve)

    # -- asking -----------------------------------------------------------------------------

    @staticmethod
    def document(path: str | Path) -> chunking.Document:
        """The file read for retrieval (its fingerprint is its index's name)."""
        return chunking.read_document(path, chunking.retrieval_settings())

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
        queued on the lane (once: a file already queued or running is not queued again)."""
        with self._lock:
            known = self._tasks.get(doc.fingerprint)
            if known and not known.finished.is_set():
                return known
        progress = self.status(doc)
        if progress.complete:
            return progress
        progress = Progress(doc.fingerprint, doc.path or "", total=progress.total, embedded=progress.embedded,
                            model=progress.model)
        with self._lock:
            known = self._tasks.get(doc.fingerprint)
            if known and not known.finished.is_set():
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
        target = path_for(self.data_dir, doc.fingerprint)
        if not target.exists():
            progress.state = "queued"
            return progress
        model = self.embed_model()
        try:
            with Index(target) as index:
                progress.total, progress.model = index.chunk_count(), model
                progress.embedded = index.vector_count(model) if model else 0
                if index.complete(model):
                    progress.state = "complete"
                    progress.note = "" if model else KEYWORD_ONLY_NOTE
        except BrokenIndex:
            pass
        return progress

    def cancel(self, fingerprint: str) -> bool:
        """Stop indexing a file after the batch in flight (what is done stays done)."""
        with self._lock:
            known = self._tasks.get(fingerprint)
        if not known or known.finished.is_set():
            return False
        known.stop.set()
        return True

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
        except HarveyError as exc:
            progress.state, progress.note = "interrupted", f"Indexing stopped: {exc}"
            log.warning("index %s (%s): %s", doc.path, fingerprint, exc)
        finally:
            with self._lock:
                self._docs.pop(fingerprint, None)
            progress.finished.set()

    def build(self, doc: chunking.Document, progress: Progress) -> Progress:
        """Chunks and FTS rows first (if not in yet), then the vectors still missing, batch by batch."""
        if progress.stop.is_set():
            progress.state = "cancelled"
            return progress
        progress.state = "indexing"
        target = path_for(self.data_dir, doc.fingerprint)
        try:
            index = Index(target, write=True)
        except BrokenIndex as exc:
            log.warning("index %s is damaged (%s); making it anew", target.name, exc)
            target.unlink(missing_ok=True)
            index = Index(target, write=True)
        with index:
            if not index.has_chunks():
                index.add_document(doc, chunking.chunk_document(doc))
            progress.total = index.chunk_count()
            progress.model = self.embed_model(quiet=False)
            if progress.model is None:
                progress.note = KEYWORD_ONLY_NOTE
            else:
                self._embed(index, progress)
            if index.complete(progress.model):
                progress.state = "complete"
        prune(self.data_dir, keep=doc.fingerprint)
        return progress

    def _embed(self, index: Index, progress: Progress) -> None:
        """Embed the chunks without a vector, ``embed_batch`` at a time, until done or stopped."""
        model = progress.model
        missing = index.missing(model)
        progress.embedded = progress.total - len(missing)
        size = self.settings.embed_batch
        for at in range(0, len(missing), size):
            if progress.stop.is_set():
                progress.state = "cancelled"
                progress.note = f"Indexing was cancelled after {progress.embedded} of {progress.total} passages."
                return
            numbers = missing[at:at + size]
            texts = [embedding.document_text(model, p.text) for p in index.passages(numbers)]
            vectors = self.models.embed(model, texts)
            if len(vectors) != len(texts):
                raise BrokenIndex(f"{model} answered {len(vectors)} vectors for {len(texts)} passages")
            index.add_vectors(model, zip(numbers, vectors))
            progress.embedded += len(numbers)
