"""Replies being generated, each in its own background thread.

The request that sends a message starts a ``Generation`` and returns at once; the
page then follows the generation's event log over SSE. A second tab or a reload
follows the same generation instead of sending the message again. Stop closes
the Ollama stream (Ollama has no stop endpoint) and keeps what arrived.

At shutdown (``Replies.shutdown``) every reply in flight is stopped and recorded
with what arrived and an "interrupted" note. A finished generation stays in the
registry for ``grace`` seconds after its log is closed, then goes (at the next
look-up): the page and a late stream read the session file.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from datetime import datetime
from dataclasses import dataclass, field
from typing import Callable

from ..errors import Busy
from ..events import EventLog
from ..modelserver import Cancelled, ChatStream, ModelError, Usage

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
    status: str = "starting"          # starting | running | done | stopped | interrupted | error
    error: ModelError | None = None
    usage: Usage | None = None
    started: float = field(default_factory=time.monotonic)
    # Unique in this process: event ids are "<key>-<n>", so a Last-Event-ID from
    # another generation (another reply, a restarted server) is never taken for ours.
    key: str = field(default_factory=lambda: f"g{next(_keys)}")
    interrupted: str = ""             # why the server cut the reply off (shutdown), "" otherwise
    recorded_at: float | None = None  # monotonic time on_finish was done and the log closed
    _stream: ChatStream | None = None
    _on_finish: Callable[["Generation"], None] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _recorded: threading.Event = field(default_factory=threading.Event)
    _finishing: bool = False
    _finish_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def finished(self) -> bool:
        """Ended *and recorded*: until the reply is in the session file the session stays busy,
        so a message sent in between cannot be budgeted without it."""
        return self._recorded.is_set()

    def stop(self) -> None:
        """Ask for the reply to end now; safe from any thread."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()

    def interrupt(self, reason: str) -> None:
        """Stop because the server is going away: recorded with an "interrupted" note."""
        self.interrupted = reason
        self.stop()

    def wait_recorded(self, timeout: float | None = None) -> bool:
        """Wait until ``on_finish`` has run (the reply is in the session file)."""
        return self._recorded.wait(timeout)


class Replies:
    """The registry of generations, one at most per session at a time."""

    def __init__(self, grace: float = 30.0) -> None:
        self._by_session: dict[str, Generation] = {}
        self._lock = threading.Lock()
        self.grace = grace
        self._closing = ""
        # Turns recorded before this moment with no reply and no note never finished (a crash).
        self.started_at = datetime.now().replace(microsecond=0)

    def current(self, session: str) -> Generation | None:
        with self._lock:
            self._prune()
            return self._by_session.get(session)

    def running(self, session: str) -> Generation | None:
        gen = self.current(session)
        return gen if gen and not gen.finished else None

    def __len__(self) -> int:
        with self._lock:
            self._prune()
            return len(self._by_session)

    def _prune(self) -> None:
        """Forget the generations recorded more than ``grace`` ago (the session file has them).

        Done on every look-up (under the lock) rather than by a timer: a thread per
        finished reply, waiting out the grace, cost more memory than the replies.
        """
        now = time.monotonic()
        gone = [name for name, gen in self._by_session.items()
                if gen.recorded_at is not None and now - gen.recorded_at >= self.grace]
        for name in gone:
            del self._by_session[name]

    def start(self, session: str, turn: int, model: str, open_stream: Callable[[], ChatStream],
              on_piece: Callable[[Generation, str], None],
              on_finish: Callable[[Generation], None]) -> Generation:
        """Start generating in a thread; ``on_finish`` records the result."""
        gen = Generation(session, turn, model)
        with self._lock:
            self._prune()
            existing = self._by_session.get(session)
            if existing and not existing.finished:
                raise Busy(f"A reply is already being generated in this session (turn {existing.turn + 1}).")
            self._by_session[session] = gen
            closing = self._closing
        gen._on_finish = on_finish
        if closing:                       # the server is stopping: record it as interrupted, ask nothing
            gen.interrupted = closing
            self._finish(gen, forced=True)
            return gen
        thread = threading.Thread(target=self._run, args=(gen, open_stream, on_piece),
                                  name=f"reply-{session}", daemon=True)
        thread.start()
        return gen

    def _run(self, gen: Generation, open_stream, on_piece) -> None:
        """Read the stream to the end, then hand the result to ``on_finish``."""
        try:
            gen._stream = open_stream()
            gen.status = "running"
            if gen._stop.is_set():
                gen._stream.cancel()
            for piece in gen._stream:
                gen.pieces.append(piece)
                on_piece(gen, piece)
            gen.usage = gen._stream.usage
            gen.status = "interrupted" if gen.interrupted else "done"
        except Cancelled:
            gen.status = "interrupted" if gen.interrupted else "stopped"
        except ModelError as exc:
            if gen.interrupted:
                gen.status = "interrupted"
            else:
                gen.error, gen.status = exc, "error"
                log.warning("reply for %s failed: %s", gen.session, exc)
        except Exception as exc:  # never leave a page waiting forever
            gen.error, gen.status = ModelError(f"Unexpected failure: {exc}"), "error"
            log.exception("reply for %s crashed", gen.session)
        finally:
            self._finish(gen)

    def _finish(self, gen: Generation, forced: bool = False) -> None:
        """Record the reply once (``forced``: at shutdown, by whoever gets here first)."""
        with gen._finish_lock:
            if gen._finishing:
                return
            gen._finishing = True
            if forced:
                gen.status = "interrupted"
        try:
            gen._on_finish(gen)
        except Exception:
            log.exception("recording the reply for %s failed", gen.session)
        finally:
            gen.pieces = [gen.text]           # recorded: one string, not one object per token
            gen.recorded_at = time.monotonic()
            gen._recorded.set()               # no longer busy: the reply is in the file...
            gen.events.close()                # ...before any follower reads the turn as stored

    def shutdown(self, reason: str, timeout: float) -> list[Generation]:
        """Stop every reply in flight and record each with what arrived and an "interrupted" note.

        Waits at most ``timeout`` seconds; a reply still not recorded then (Ollama
        never answered the request) is recorded from here. Replies started after
        this are recorded as interrupted at once.
        """
        with self._lock:
            self._closing = reason
            gens = [g for g in self._by_session.values() if not g.finished]
        for gen in gens:
            gen.interrupt(reason)
        for gen in gens:
            if gen.status == "starting":
                # Still waiting for Ollama to answer the request: nothing has arrived, and once it
                # answers the thread sees the stop before reading a piece. Record it now.
                self._finish(gen, forced=True)
        deadline = time.monotonic() + timeout
        for gen in gens:
            if not gen.wait_recorded(max(0.0, deadline - time.monotonic())):
                log.warning("reply for %s did not end in time; recording what arrived", gen.session)
                self._finish(gen, forced=True)
        return gens
