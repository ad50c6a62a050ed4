"""The neutral interface to a model server (httpx's ``BaseTransport`` is the model of the seam).

One small abstract base, one implementation per kind of server (``ollama.OllamaServer``
first). The rest of the app sees only this: a chat stream, usage counts in neutral words,
facts about a model, the installed models, and the typed errors of ``errors.py``. No server's
field names, endpoints or error texts leak past an implementation.

The ``ChatStream`` contract, which Stop, Cancel and shutdown rely on:

- ``ModelServer.chat()`` never blocks: it returns a lazy stream, so the caller can register
  it (for Stop) before any network wait. Connecting and waiting for the first byte happen
  when iteration starts.
- Iterate for the text pieces; ``text`` is every piece so far, joined; ``usage`` is set when
  the server says the reply is complete (``None`` before, and after a failure).
- ``cancel()`` may be called from any thread at any time: before iteration starts, while
  connecting, while waiting for the first byte (minutes on a Pi loading a model), or
  mid-reply. It closes the connection (that is how a server learns to stop generating) and
  the iterating thread then ends within about a second by raising ``Cancelled``, never by a
  silent end, so a caller tells "stopped" from "finished". Cancelling twice is the same as
  once. After the reply has ended (finished or failed), ``cancel()`` changes nothing:
  ``cancelled`` stays as it was. One bound: a TCP connect that gets no answer at all (a host
  that drops packets) is not interrupted; it ends at the connect timeout, then ``Cancelled``.
- A stream is iterated once.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import ModelError
from .counting import TokenCounters
from .errors import Cancelled
from .memory import MEASURED_KEPT, KvShape, Machine, Measured, MemoryFit, excess, largest_window
from .tokens import Counter, Unbuildable

log = logging.getLogger(__name__)

MODELS_MAX_AGE_S = 5.0


@dataclass(frozen=True)
class Usage:
    """What one finished call cost, in the server's own counts (None where it did not say)."""

    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    seconds: float = 0.0              # the whole call, as the server measured it
    prompt_seconds: float = 0.0       # reading the prompt
    generate_seconds: float = 0.0     # writing the reply
    stopped_by: str = ""              # "stop" (the model ended), "length" (the reply budget ran out), "loop"
    #                                   (the app stopped a reply that repeated itself: issue 44), ""

    @property
    def tokens_per_second(self) -> float:
        """Writing speed; 0.0 when the server gave no count or no time."""
        if not self.generated_tokens or not self.generate_seconds:
            return 0.0
        return self.generated_tokens / self.generate_seconds

    @property
    def cut_off(self) -> bool:
        """The reply ended because the reply budget (``num_predict``) ran out, not by itself."""
        return self.stopped_by == "length"

    @property
    def looped(self) -> bool:
        """The app stopped the reply because it was repeating itself (``work.loops``)."""
        return self.stopped_by == "loop"


@dataclass(frozen=True)
class ModelFacts:
    """What a server tells about a model, reduced to what the app uses."""

    name: str
    family: str = ""
    parameter_size: str = ""
    architecture: str = ""
    context_length: int | None = None   # the largest window the server allows, if it says (Ollama: the
    #                                     trained length; an OpenAI-compatible server: the window it serves)
    kv: KvShape | None = None           # the KV cache's shape, where the server describes the layers
    capabilities: tuple[str, ...] = ()  # what the server says the model does ("completion", "embedding"); () unsaid
    demo: bool = False                  # Harvey's bundled stand-in model (harvey_demo), not a real model server's


class ChatStream(ABC):
    """One streaming chat reply; see the module docstring for the cancel contract.

    The base keeps the bookkeeping every kind of server shares (pieces, the cancel flag,
    the "ended" latch that makes a late cancel a no-op); an implementation supplies
    ``_read`` (the pieces, setting ``usage`` at the end), ``_interrupt`` (wake the reading
    thread: cut the connection) and ``_release`` (free the connection once).
    """

    def __init__(self) -> None:
        self.usage: Usage | None = None
        self.cancelled = False
        # (processed, total) prompt tokens while a server that reports it reads the prompt (llama-server's
        # ``return_progress``): a Pi spends minutes there before the first token (issue 42).
        self.on_progress: Callable[[int, int], None] | None = None
        self._pieces: list[str] = []
        self._lock = threading.Lock()
        self._started = False
        self._ended = False

    @property
    def text(self) -> str:
        """Every piece so far, joined: what a Stop keeps."""
        return "".join(self._pieces)

    def __iter__(self) -> Iterator[str]:
        """Start the call (the first network wait happens here, not in ``chat``)."""
        with self._lock:
            if self._started:
                raise RuntimeError("a chat stream is iterated once")
            self._started = True
        return self._iterate()

    def _iterate(self) -> Iterator[str]:
        """The pieces, with any failure after a cancel turned into ``Cancelled``."""
        try:
            if self.cancelled:
                raise self._stopped()
            for piece in self._guarded():
                self._pieces.append(piece)
                yield piece
            with self._lock:
                self._ended = True
                if self.cancelled:      # cancel came after the last piece, before the end
                    raise self._stopped()
        finally:
            with self._lock:
                self._ended = True      # from here on cancel() touches nothing
            self._release()

    def _guarded(self) -> Iterator[str]:
        """``_read``, stopped at the next piece after a cancel, whatever error the cut caused."""
        try:
            for piece in self._read():
                if self.cancelled:
                    raise self._stopped()
                yield piece
        except Cancelled:
            raise
        except Exception:
            if self.cancelled:          # the cut connection shows up as some read error
                raise self._stopped() from None
            raise

    def cancel(self) -> None:
        """Stop the reply now, from any thread; the iterating thread raises ``Cancelled``."""
        with self._lock:
            if self._ended or self.cancelled:
                return
            self.cancelled = True
            self._interrupt()           # under the lock: never after _release has run

    @staticmethod
    def _stopped() -> Cancelled:
        """The one error a cancelled stream raises."""
        return Cancelled("The reply was stopped.")

    @abstractmethod
    def _read(self) -> Iterator[str]:
        """Connect, send, and yield the reply's text pieces; set ``self.usage`` at the end."""

    @abstractmethod
    def _interrupt(self) -> None:
        """Wake a thread blocked in ``_read`` (connecting, waiting, reading): cut the connection.
        Called at most once, under the stream's lock, so it must not block."""

    @abstractmethod
    def _release(self) -> None:
        """Close the connection (once, after the last read, whatever the outcome)."""


class Embedding:
    """One embedding call, made by ``run()``; ``cancel()`` from any thread ends it with ``Cancelled``
    (a Stop while the question is embedded: an embedding model loading on a Pi takes minutes)."""

    def __init__(self, call) -> None:
        self._call = call
        self.cancelled = False

    def run(self) -> list[list[float]]:
        if self.cancelled:
            raise Cancelled("The embedding was stopped.")
        try:
            return self._call()
        except Exception:
            if self.cancelled:
                raise Cancelled("The embedding was stopped.") from None
            raise

    def cancel(self) -> None:
        self.cancelled = True
        self._interrupt()

    def _interrupt(self) -> None:
        """Wake the thread in ``run`` (nothing to do here: it ends when its call returns)."""


class ModelServer(ABC):
    """One model server. Thread-safe; the app shares one (``Services.models``).

    The caches live here, so every kind of server gets them: ``facts`` per model (a model's
    window does not change while it is installed; a server whose window is a start-up flag
    sets ``facts_max_age``) and ``models`` for a few seconds (a page asks two or three times;
    a failure is never kept, so a server coming up is seen at once). ``forget`` drops them
    all: the server went away, so what comes back may be another start with other flags.
    """

    name = "model server"
    facts_max_age: float | None = None      # seconds a model's facts are kept (None: while the process runs)

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._facts: dict[str, tuple[float, ModelFacts]] = {}
        self._models: tuple[float, list[str]] | None = None
        self._cache_lock = threading.Lock()
        # The window that fits the machine (``memory_fit``): set by ``connect`` for a server whose
        # window the app chooses (Ollama); None: the server decides (llama-server's -c, vLLM).
        self.machine: Machine | None = None
        self._weights: dict[str, int | None] = {}
        self._measured: dict[str, dict[int, int]] = {}    # model -> {window: bytes beyond the estimate}
        self._loaded: set[str] = set()                     # models a reply finished on, not looked at since
        self.token_counters = TokenCounters(self._build_counter, self.digest, current=self.known_digest)

    def __str__(self) -> str:
        """For messages: "Ollama at http://127.0.0.1:11434"."""
        return f"{self.name} at {self.url}"

    # -- what each kind of server implements -----------------------------------

    @abstractmethod
    def chat(self, model: str, messages: list[dict], *, num_ctx: int, num_predict: int | None = None,
             format: dict | str | None = None, temperature: float | None = None) -> ChatStream:
        """A lazy streaming chat (nothing is sent until it is iterated).

        ``num_ctx`` is the window the request is budgeted for (required: a server's own
        default may be smaller); ``num_predict`` caps the reply's tokens; ``format`` (a JSON
        schema, or "json") asks for structured output and may raise ``FormatRefused``.
        """

    @abstractmethod
    def _fetch_facts(self, model: str) -> ModelFacts:
        """Ask the server about one model (``facts`` caches it)."""

    @abstractmethod
    def _fetch_models(self) -> list[str]:
        """Ask the server for the installed models (``models`` caches it briefly)."""

    @abstractmethod
    def embed(self, model: str, texts: str | list[str]) -> list[list[float]]:
        """One embedding vector per text."""

    def embedding(self, model: str, texts: str | list[str]) -> "Embedding":
        """An embedding call that another thread can cut (``Embedding.cancel``), made by ``run()``.
        This default cannot be cut once it runs; the HTTP servers override it."""
        return Embedding(lambda: self.embed(model, texts))

    @abstractmethod
    def is_up(self, timeout: float = 2.0) -> bool:
        """Whether the server answers right now (never raises)."""

    @abstractmethod
    def version(self) -> str:
        """The server's version string."""

    @abstractmethod
    def close(self) -> None:
        """Free the connections kept for reuse."""

    # -- shared --------------------------------------------------------------------

    def chat_text(self, model: str, messages: list[dict], *, num_ctx: int, num_predict: int | None = None,
                  format: dict | str | None = None,
                  temperature: float | None = None) -> tuple[str, Usage | None]:
        """A whole chat reply as one string, and what it cost (for summaries, map and reduce calls)."""
        stream = self.chat(model, messages, num_ctx=num_ctx, num_predict=num_predict, format=format,
                           temperature=temperature)
        text = "".join(stream)
        return text, stream.usage

    def facts(self, model: str) -> ModelFacts:
        """Facts about a model, asked once per model name (again after ``facts_max_age`` or a ``forget``)."""
        with self._cache_lock:
            kept = self._facts.get(model)
        if kept is not None and (self.facts_max_age is None or time.monotonic() - kept[0] < self.facts_max_age):
            return kept[1]
        facts = self._fetch_facts(model)
        with self._cache_lock:
            self._facts[model] = (time.monotonic(), facts)
        return facts

    def forget(self) -> None:
        """Drop every cached answer (the server was lost: it may come back restarted, with another
        window); the next question asks the server."""
        with self._cache_lock:
            self._facts.clear()
        self._models = None

    def window(self, model: str) -> int | None:
        """The largest window the server allows for the model (None: it does not say)."""
        return self.facts(model).context_length

    def models(self, max_age: float = MODELS_MAX_AGE_S) -> list[str]:
        """Names of the installed models; one answer serves for ``max_age`` seconds."""
        cached = self._models
        if cached and time.monotonic() - cached[0] < max_age:
            return list(cached[1])
        names = self._fetch_models()
        self._models = (time.monotonic(), list(names))
        return list(names)

    def forget_models(self) -> None:
        """Drop the cached model list (the next ``models()`` asks the server)."""
        self._models = None

    # -- the window that fits the machine (issue 31) -----------------------------------

    def memory_fit(self, model: str, ask_loaded: bool = False) -> MemoryFit | None:
        """The largest window the server's machine holds for ``model``, with its figures; None where
        that is not known (no machine figures, a server that does not describe the layers).

        After a reply has finished on the model (``reply_done``), or when ``ask_loaded`` (``harvey
        check``), the first call asks the server once what the loaded model really takes (no polling)
        and keeps any excess over the estimate, which only ever shrinks the window. Errors of those
        two lookups are logged, not raised.
        """
        machine = self.machine
        if machine is None or machine.usable is None:
            return None
        shape = self.facts(model).kv
        if shape is None:
            return None
        weights = self._weights_of(model)
        if weights is None:
            return None
        if ask_loaded:
            self.reply_done(model)
        self._look_at_loaded(model, shape, weights, machine)
        with self._cache_lock:
            measured = tuple((extra, at) for at, extra in sorted(self._measured.get(model, {}).items()))
        return MemoryFit(largest_window(shape, weights, machine, measured), weights, shape, machine, measured)

    def memory_window(self, model: str) -> int | None:
        """The memory's cap on ``model``'s window in tokens (None: no cap known)."""
        fit = self.memory_fit(model)
        return fit.cap if fit else None

    def _weights_of(self, model: str) -> int | None:
        """The model's weights in bytes, asked once per model."""
        with self._cache_lock:
            if model in self._weights:
                return self._weights[model]
        try:
            sizes = self._fetch_sizes()
        except ModelError as exc:
            log.warning("the size of %s is not known, so neither is the window memory allows: %s", model, exc)
            return None
        with self._cache_lock:
            size = sizes.get(model) or sizes.get(f"{model}:latest")
            self._weights[model] = size
        return size

    def reply_done(self, model: str) -> None:
        """A reply finished on ``model``: it is loaded, so the next ``memory_fit`` may check the estimate."""
        if self.machine is not None:
            with self._cache_lock:
                self._loaded.add(model)

    def _look_at_loaded(self, model: str, shape: KvShape, weights: int, machine: Machine) -> None:
        """Once after a reply: what the loaded model took, against the estimate for its window."""
        with self._cache_lock:
            if model not in self._loaded:
                return
            self._loaded.discard(model)
        try:
            seen = self._fetch_loaded(model)
        except ModelError as exc:
            log.info("could not ask %s what %s takes loaded: %s", self, model, exc)
            return
        if seen is None:
            return
        extra = excess(shape, weights, machine, seen)
        if extra <= 0:
            return
        with self._cache_lock:
            kept = self._measured.setdefault(model, {})
            kept[seen.context] = max(extra, kept.get(seen.context, 0))
            while len(kept) > MEASURED_KEPT:
                del kept[min(kept, key=kept.get)]
        log.warning("%s took %d MiB more than estimated with a %d-token window: the window memory allows "
                    "shrinks accordingly", model, extra >> 20, seen.context)

    def _fetch_sizes(self) -> dict[str, int]:
        """Every installed model's weights in bytes (a server that does not say: none)."""
        return {}

    def _fetch_loaded(self, model: str) -> Measured | None:
        """What ``model`` takes loaded, and with what window (None: not loaded, or not said)."""
        return None

    def count_tokens(self, model: str, text: str) -> int | None:
        """The server's exact token count of ``text``, or None where it has no tokenizer endpoint."""
        return None

    # -- exact token counts (issue 30) ---------------------------------------------------

    def counter(self, model: str, wait: bool | float = False) -> Counter | None:
        """The model's exact token counter, or None: the caller uses the bytes-per-token estimate.

        Never waits for a build unless ``wait`` (True: the worker, until it is built; seconds: a
        message, a bounded while): the first ask starts it in the background
        (``counting.TokenCounters``)."""
        return self.token_counters.get(model, wait=wait)

    def counter_state(self, model: str) -> tuple[str, str]:
        """("exact", which tokenizer) | ("estimated", why) | ("building", "") | ("unknown", "")."""
        return self.token_counters.state(model)

    def _build_counter(self, model: str) -> Counter:
        """Build the model's counter (slow: runs off the request path); raises ``Unbuildable``."""
        raise Unbuildable(f"{self.name} gives no tokenizer")

    def digest(self, model: str) -> str | None:
        """The model's digest where the server says it (a model pulled again under the same name is
        another model: its counter on disk and its stored vectors are not the old one's); None:
        unknown (its vocabulary is not kept on disk)."""
        return None

    def known_digest(self, model: str) -> str | None:
        """The model's digest as the server last listed it, asking nothing (None: not listed yet, or a
        server that gives none): a counter in memory is checked against it on each use (issue 43)."""
        return None
