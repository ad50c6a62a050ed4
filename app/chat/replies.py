"""Replies being generated, each in its own background thread.

The request that sends a message starts a ``Generation`` and returns at once; the
page then follows the generation's event log over SSE. A second tab or a reload
follows the same generation instead of sending the message again. Stop closes
the Ollama stream (Ollama has no stop endpoint) and keeps what arrived.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from ..events import EventLog
from ..ollama import ChatFinal, ChatStream, OllamaError

log = logging.getLogger(__name__)
_keys = itertools.count(1)


@dataclass
class Generation:
    """One reply in progress (or just finished) for one turn of one session."""

    session: str
    turn: int
    model: str
    events: EventLog = field(default_factory=EventLog)
    pieces: list[str] = field(default_factory=list)
    status: str = "starting"          # starting | running | done | stopped | error
    error: OllamaError | None = None
    final: ChatFinal | None = None
    started: float = field(default_factory=time.monotonic)
    # Unique in this process: event ids are "<key>-<n>", so a Last-Event-ID from
    # another generation (another reply, a restarted server) is never taken for ours.
    key: str = field(default_factory=lambda: f"g{next(_keys)}")
    _stream: ChatStream | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def finished(self) -> bool:
        return self.status in ("done", "stopped", "error")

    def stop(self) -> None:
        """Ask for the reply to end now; safe from any thread."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()


class Replies:
    """The registry of generations, one at most per session at a time."""

    def __init__(self) -> None:
        self._by_session: dict[str, Generation] = {}
        self._lock = threading.Lock()

    def current(self, session: str) -> Generation | None:
        with self._lock:
            return self._by_session.get(session)

    def running(self, session: str) -> Generation | None:
        gen = self.current(session)
        return gen if gen and not gen.finished else None

    def start(self, session: str, turn: int, model: str, open_stream: Callable[[], ChatStream],
              on_piece: Callable[[Generation, str], None],
              on_finish: Callable[[Generation], None]) -> Generation:
        """Start generating in a thread; ``on_finish`` records the result."""
        gen = Generation(session, turn, model)
        with self._lock:
            existing = self._by_session.get(session)
            if existing and not existing.finished:
                return existing
            self._by_session[session] = gen
        thread = threading.Thread(target=self._run, args=(gen, open_stream, on_piece, on_finish),
                                  name=f"reply-{session}", daemon=True)
        thread.start()
        return gen

    def _run(self, gen: Generation, open_stream, on_piece, on_finish) -> None:
        """Read the stream to the end, then hand the result to ``on_finish``."""
        try:
            gen._stream = open_stream()
            gen.status = "running"
            if gen._stop.is_set():
                gen._stream.cancel()
            for piece in gen._stream:
                gen.pieces.append(piece)
                on_piece(gen, piece)
            gen.final = gen._stream.final
            gen.status = "stopped" if gen._stream.cancelled else "done"
        except OllamaError as exc:
            gen.error, gen.status = exc, "error"
            log.warning("reply for %s failed: %s", gen.session, exc)
        except Exception as exc:  # never leave a page waiting forever
            gen.error, gen.status = OllamaError(f"Unexpected failure: {exc}"), "error"
            log.exception("reply for %s crashed", gen.session)
        finally:
            try:
                on_finish(gen)
            finally:
                gen.events.close()
