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

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterator

from .errors import Cancelled

MODELS_MAX_AGE_S = 5.0


@dataclass(frozen=True)
class Usage:
    """What one finished call cost, in the server's own counts (None where it did not say)."""

    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    seconds: float = 0.0              # the whole call, as the server measured it
    prompt_seconds: float = 0.0       # reading the prompt
    generate_seconds: float = 0.0     # writing the reply
    stopped_by: str = ""              # "stop" (the model ended), "length" (the reply budget ran out), ""

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


@dataclass(frozen=True)
class ModelFacts:
    """What a server tells about a model, reduced to what the app uses."""

    name: str
    family: str = ""
    parameter_size: str = ""
    architecture: str = ""
    context_length: int | None = None   # the largest window the server allows, if it says (Ollama: the
    #                                     trained length; an OpenAI-compatible server: the window it serves)
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


class ModelServer(ABC):
    """One model server. Thread-safe; the app shares one (``Services.models``).

    The caches live here, so every kind of server gets them: ``facts`` per model (a model's
    window does not change while it is installed) and ``models`` for a few seconds (a page
    asks two or three times; a failure is never kept, so a server coming up is seen at once).
    """

    name = "model server"

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._facts: dict[str, ModelFacts] = {}
        self._models: tuple[float, list[str]] | None = None
        self._cache_lock = threading.Lock()

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
        """Facts about a model, asked once per model name."""
        with self._cache_lock:
            if model in self._facts:
                return self._facts[model]
        facts = self._fetch_facts(model)
        with self._cache_lock:
            self._facts[model] = facts
        return facts

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

    def count_tokens(self, model: str, text: str) -> int | None:
        """The server's exact token count of ``text``, or None where it has no tokenizer endpoint."""
        return None
