"""Each model's token counter, loaded once and off the request path (issue 30).

``TokenCounters`` belongs to one ``ModelServer``. ``get(model)`` never waits for a build: the
first ask starts one on a background thread (fetching an Ollama model's whole vocabulary,
8 MB of JSON for Gemma's 262k tokens, and building it takes seconds on a Pi) and answers None,
so the page is served with the bytes-per-token estimate; every later ask gets the counter.
``get(model, wait=True)`` waits for the build: for the worker (an analysis plan), which is off
the request path already; ``get(model, wait=seconds)`` at most that long: a message (the first
after a restart, its counter loading from disk) is counted, not estimated, when it comes in time.

Kept: the two most recently used counters in memory (an LRU of 2: a Pi has room for a chat
model's and a second model's vocabulary, not for every installed model's), and each model's
vocabulary on disk by its digest (``data/tokenizers/DIGEST.json``: the GGUF keys it is built
from, ``Counter.dumps``; a tokenizer loaded from its own JSON would stay ~21 MB larger) so a
restart does not fetch it again; once saved, a counter keeps only its tokenizer (``_release``).
A server that counts itself (``remote_counter``) has no digest here: nothing is kept on disk,
it is asked once per process. A model that cannot be counted exactly is remembered with the
reason (also on disk, ``DIGEST.none``), so it is not fetched again either; ``state`` tells
``harvey check`` which it is.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable

from ..storage import atomic_write_text
from ..version import __version__
from .tokens import Counter, Unbuildable, trim_heap

log = logging.getLogger(__name__)

KEPT_IN_MEMORY = 2
RETRY_AFTER_S = 30.0   # after a failed build (the server down, the model not there yet)
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class TokenCounters:
    """Counters by model for one server; thread-safe."""

    def __init__(self, build: Callable[[str], Counter], key: Callable[[str], str | None],
                 cache_dir: Path | None = None, current: Callable[[str], str | None] = lambda model: None):
        self._build = build            # model -> Counter, raises Unbuildable (or a ModelError)
        self._key = key                # model -> its digest (None: not known; nothing on disk)
        self._current = current        # model -> its digest as last listed, asking nothing (None: unknown)
        self._digests: dict[str, str | None] = {}   # model -> the digest its counter or refusal is for
        self.cache_dir = cache_dir
        self._memory: OrderedDict[str, Counter] = OrderedDict()
        self._refused: dict[str, str] = {}     # model -> why it is estimated
        self._building: dict[str, threading.Thread] = {}
        self._failed: dict[str, float] = {}    # model -> when its last build failed (monotonic)
        self._closed = False                   # the server's client is closed: a build in flight fails quietly
        self._lock = threading.Lock()

    def close(self) -> None:
        """The server's client is closing (the app shuts down): a build still fetching fails, and
        that is said at info level, not as a warning about the server."""
        self._closed = True

    # -- asking ----------------------------------------------------------------------------

    def get(self, model: str, wait: bool | float = False) -> Counter | None:
        """The model's counter; None while it is built in the background or when it cannot be
        exact (``state`` says why).  ``wait``: True, until it is built (a failed build is tried
        again at once); a number, at most that many seconds (then None while it goes on).  A build
        that failed (the server down) is tried again after ``RETRY_AFTER_S``, not on every page."""
        with self._lock:
            self._check_digest(model)
            counter = self._memory.get(model)
            if counter is not None:
                self._memory.move_to_end(model)
                return counter
            if model in self._refused:
                return None
            thread = self._building.get(model)
            if thread is None:
                if wait is not True and time.monotonic() - self._failed.get(model, -RETRY_AFTER_S) < RETRY_AFTER_S:
                    return None
                thread = threading.Thread(target=self._load, args=(model,), name=f"tokenizer {model}", daemon=True)
                self._building[model] = thread
                thread.start()
        if not wait:
            return None
        thread.join(None if wait is True else wait)
        with self._lock:
            return self._memory.get(model)

    def state(self, model: str) -> tuple[str, str]:
        """("exact", what) | ("building", "") | ("estimated", why) | ("unknown", "") for messages."""
        with self._lock:
            self._check_digest(model)
            if model in self._memory:
                return "exact", self._memory[model].name
            if model in self._refused:
                return "estimated", self._refused[model]
            if model in self._building:
                return "building", ""
        return "unknown", ""

    def forget(self, model: str) -> None:
        """Drop what is known of a model (it was pulled again: a new digest)."""
        with self._lock:
            self._forget(model)

    def _forget(self, model: str) -> None:
        self._memory.pop(model, None)
        self._refused.pop(model, None)
        self._digests.pop(model, None)
        self._failed.pop(model, None)

    def _check_digest(self, model: str) -> None:
        """A model pulled again under the same name is another vocabulary (issue 43: a counter found by
        name said "exact" with the old one's counts): what is known of it goes when the server now lists
        it with another digest.  (Under the lock.)"""
        known, now = self._digests.get(model), self._current(model)
        if known and now and known != now and model not in self._building:
            log.info("%s was pulled again (digest %s, was %s): its token counter is built anew", model,
                     now[:12], known[:12])
            self._forget(model)

    # -- loading ---------------------------------------------------------------------------

    def _load(self, model: str) -> None:
        """From disk by digest, else built from the server (and saved); never raises."""
        key = None
        try:
            key = self._key(model)
            counter, refused = self._load_or_build(model, key)
        except Exception as exc:       # a server error: nothing kept, the next ask tries again
            log.log(logging.INFO if self._closed else logging.WARNING, "no token counter for %s yet: %s", model, exc)
            counter, refused = None, None
        with self._lock:
            self._building.pop(model, None)
            self._digests[model] = key
            if counter is None and refused is None:
                self._failed[model] = time.monotonic()
            if counter is not None:
                self._memory[model] = counter
                self._memory.move_to_end(model)
                while len(self._memory) > KEPT_IN_MEMORY:
                    self._memory.popitem(last=False)
            elif refused is not None:
                self._refused[model] = refused

    def _load_or_build(self, model: str, key: str | None) -> tuple[Counter | None, str | None]:
        path = self._path(key)
        if path is not None:
            counter = self._cached(path)
            if counter is not None:
                return counter, None
            refused = self._refusal(path.with_suffix(".none"))
            if refused is not None:
                return None, refused
        try:
            counter = self._build(model)
        except Unbuildable as exc:
            log.info("token counts for %s are estimated: %s", model, exc)
            if path is not None:
                self._save(path.with_suffix(".none"), f"{what_counts()}\n{exc}")
            return None, str(exc)
        if path is not None and hasattr(counter, "release"):
            self._save(path, counter.dumps())
            path.with_suffix(".none").unlink(missing_ok=True)      # an earlier app's "cannot", now counted
        _release(counter)
        log.info("exact token counter for %s ready (%s)", model, counter.name)
        return counter, None

    @staticmethod
    def _cached(path: Path) -> Counter | None:
        """The counter kept at ``path``; None when there is none, or it is damaged or of an
        earlier format (then it is built again and the file replaced)."""
        try:
            counter = Counter.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except Exception as exc:     # not UTF-8, not JSON, or JSON of the wrong shape (issue 43: a KeyError
            #                          there escaped, so the file was never rebuilt): built again, replaced
            log.warning("the kept vocabulary %s cannot be read (%s: %s): fetching it again", path,
                        type(exc).__name__, exc)
            return None
        _release(counter)
        return counter

    @staticmethod
    def _refusal(path: Path) -> str | None:
        """Why the model at ``path`` cannot be counted, as this version of the app found it; None when
        there is no such note, or an app that counted other tokenizers wrote it (issue 43: it was kept
        for ever, though an upgrade may count the model now)."""
        try:
            version, _, why = path.read_text(encoding="utf-8").partition("\n")
        except (OSError, ValueError):
            return None
        return why.strip() if version.strip() == what_counts() and why.strip() else None

    def _path(self, key: str | None) -> Path | None:
        if not key or self.cache_dir is None:
            return None
        return self.cache_dir / f"{_SAFE.sub('_', key)}.json"

    @staticmethod
    def _save(path: Path, text: str) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
        except OSError as exc:          # a full SD card costs the cache, not the counter
            log.warning("could not keep the tokenizer at %s: %s", path, exc)


def what_counts() -> str:
    """What this app counts exactly, in one line for a refusal's note: its version and the tokenizers it
    reproduces (``tokens.VERIFIED_PRE``); a note written under another line is not trusted."""
    import hashlib

    from .tokens import VERIFIED_PRE
    return f"{__version__}+{hashlib.sha256(' '.join(sorted(VERIFIED_PRE)).encode()).hexdigest()[:12]}"


def _release(counter) -> None:
    """The counter keeps only its tokenizer from here on (its vocabulary's keys, 8 MB of Python
    strings and lists for 262k tokens, go), and the heap's free pages go back."""
    if hasattr(counter, "release"):
        counter.release()
    _release_memory()


def _release_memory() -> None:
    """The C heap's free pages back to the system (``tokens.trim_heap``)."""
    trim_heap()
