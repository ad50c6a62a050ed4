"""An in-memory event log that server-sent-event streams replay and follow.

A reply being generated and a chunked analysis both produce events in a
background thread. Each page that shows them opens an SSE stream that first
replays what it missed (from ``Last-Event-ID``) and then waits on a condition
variable for more: no polling, and a phone that slept catches up on reconnect.

Streams are bounded (``StreamGate``): at most ``server.max_streams`` open at once,
below waitress's thread pool, and each ends itself after ``server.stream_lifetime_s``.
What the vendored htmx-ext-sse 2.2.4 and the browser do with each ending:

- a stream that just ends (lifetime up): EventSource itself reconnects after the
  last ``retry:`` (``RECONNECT_MS``) and sends ``Last-Event-ID``; the extension
  only sees an "error" with readyState CONNECTING and does nothing (static/harvey.js
  keeps it from logging that as an error);
- a ``close`` event (named in ``sse-close``): the extension closes the EventSource;
- a 204, a 503 or any non-200 answer: EventSource gives up (CLOSED) and the
  extension opens a new one after a back-off (0.5 s doubling to 64 s) that has
  forgotten Last-Event-ID. That is why a stream over the cap gets a 200 with an
  empty stream and a longer ``retry:`` instead (``StreamGate.busy_body``).
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Iterator

KEEPALIVE_S = 15.0
# After a stream ends itself (its lifetime is up) the browser reconnects this soon,
# sending Last-Event-ID: the replay makes the gap invisible.
RECONNECT_MS = 500
# A stream refused because every slot is taken is told to come back after this
# (randomised so that refused tabs do not all come back at once).
BUSY_RETRY_MS = (2000, 5000)


@dataclass(frozen=True)
class Event:
    id: int
    name: str
    data: str


class EventLog:
    """Append-only events with ids 1, 2, 3...; ``close()`` marks the end.

    ``key`` is unique across restarts (the owner's id with a per-process prefix); the
    stream sends it before each id ("<key>-<n>"), so a Last-Event-ID from another log,
    or from before a restart, is never taken for a position in this one.
    """

    def __init__(self, key: str = "") -> None:
        self.key = key
        self._events: list[Event] = []
        self._closed = False
        self._cond = threading.Condition()

    def append(self, name: str, data: str = "") -> Event:
        """Add an event and wake every stream waiting for one."""
        with self._cond:
            event = Event(len(self._events) + 1, name, data)
            self._events.append(event)
            self._cond.notify_all()
            return event

    def clear(self, name: str, after: int) -> None:
        """Empty the data of the ``name`` events after id ``after``: a later event made them redundant
        (a reply's pieces once their block is rendered). A replay sends them as no-ops; ids stay."""
        with self._cond:
            for k in range(max(0, after), len(self._events)):
                event = self._events[k]
                if event.name == name and event.data:
                    self._events[k] = Event(event.id, name, "")

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake every follower (it re-checks its deadline and its stop flag)."""
        with self._cond:
            self._cond.notify_all()

    def snapshot(self) -> list[Event]:
        """Every event so far, as one consistent list."""
        with self._cond:
            return list(self._events)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def last_id(self) -> int:
        return len(self._events)

    def follow(self, after: int = 0, keepalive: float = KEEPALIVE_S, until: float | None = None,
               stop: threading.Event | None = None) -> Iterator[Event | None]:
        """Yield the events after id ``after``, then new ones as they come.

        Yields ``None`` when nothing happened for ``keepalive`` seconds, so the
        caller can send a comment line and notice a client that went away.
        Ends once the log is closed and everything has been yielded, or at the
        monotonic time ``until``, or when ``stop`` is set (whoever sets it calls
        ``wake()``); the caller tells those cases apart with ``closed``.
        """
        position = max(0, after)
        while True:
            with self._cond:
                if position >= len(self._events) and not self._closed:
                    wait = keepalive if until is None else min(keepalive, until - time.monotonic())
                    if wait > 0 and not (stop is not None and stop.is_set()):
                        self._cond.wait(wait)
                batch = self._events[position:]
                closed = self._closed
            if batch:
                position += len(batch)
                yield from batch
                continue
            if closed:
                return
            if (stop is not None and stop.is_set()) or (until is not None and time.monotonic() >= until):
                return
            yield None


class Bell:
    """Rings for a name when something about it changes (a session's turn added, by any device), and wakes
    whoever waits on that name: a page's watch stream (issue 45: a second tab shows the first tab's new turn
    without a reload).  It keeps one number a name, how often it rang: no events, nothing that grows."""

    def __init__(self) -> None:
        self._rung: dict[str, int] = {}
        self._cond = threading.Condition()

    def ring(self, name: str) -> None:
        with self._cond:
            self._rung[name] = self._rung.get(name, 0) + 1
            self._cond.notify_all()

    def wait(self, name: str, seen: int, timeout: float, stop: threading.Event | None = None) -> int:
        """How often ``name``'s bell has rung, once that is not ``seen`` or after ``timeout`` seconds (or when
        ``stop`` is set: whoever sets it calls ``wake``)."""
        with self._cond:
            if self._rung.get(name, 0) == seen and timeout > 0 and not (stop is not None and stop.is_set()):
                self._cond.wait(timeout)
            return self._rung.get(name, 0)

    def wake(self) -> None:
        """Wake every waiter (shutdown: ``StreamGate.close_all``)."""
        with self._cond:
            self._cond.notify_all()


def sse_format(event: Event | None, prefix: str = "") -> str:
    """One event in the text/event-stream wire format (``None``: a keep-alive).

    Data lines cannot hold raw newlines, so each line gets its own ``data:``;
    the browser joins them with newlines again. ``prefix`` goes before the id
    (a reply's ids are "<generation key>-<n>").
    """
    if event is None:
        return ": keep-alive\n\n"
    lines = event.data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    data = "".join(f"data: {line}\n" for line in lines)
    return f"id: {prefix}{event.id}\nevent: {event.name}\n{data}\n"


def sse_retry(ms: int) -> str:
    """Tell the browser how long to wait before it reconnects after this stream ends."""
    return f"retry: {int(ms)}\n\n"


class StreamGate:
    """At most ``limit`` open event streams, each ending itself after ``lifetime`` seconds.

    Each open SSE response holds one waitress thread for as long as it is open,
    so the streams must stay below the thread pool: the threads left over answer
    pages, Stop and /healthz at once. A stream over the cap is answered at once
    with an empty stream and a ``retry:`` (see ``busy_body``): the browser's
    EventSource comes back later by itself, keeping its Last-Event-ID. A stream
    also ends after ``lifetime`` (a sleeping phone's half-open socket then holds
    its thread no longer than that) and at shutdown (``close_all``).
    """

    def __init__(self, limit: int, lifetime: float):
        self.limit = max(1, int(limit))
        # A page's watch stream waits for what may never come: at most half the slots, so that replies and
        # analyses always find one (a watcher over it is told to come back, like any stream over the cap).
        self.watch_limit = max(1, self.limit // 2)
        self.watching = 0
        self.lifetime = float(lifetime)
        self.stopping = threading.Event()
        self.refused = 0                  # streams told to come back later (for logs and tests)
        self._open = 0
        self._lock = threading.Lock()
        self._logs: "weakref.WeakSet[EventLog | Bell]" = weakref.WeakSet()

    @property
    def open(self) -> int:
        with self._lock:
            return self._open

    def enter(self, watch: bool = False) -> "Slot | None":
        """A slot for one stream, or None when all are taken (or the server is stopping).  ``watch``: a
        page's watch stream (``watch_limit``)."""
        with self._lock:
            if self._open >= self.limit or self.stopping.is_set() or (watch and self.watching >= self.watch_limit):
                self.refused += 1
                return None
            self._open += 1
            self.watching += watch
        return Slot(self, time.monotonic() + self.lifetime, watch)

    def leave(self, watch: bool = False) -> None:
        """One stream fewer: called once per slot, by ``Slot.release`` (which makes it idempotent)."""
        with self._lock:
            self._open -= 1
            self.watching -= watch

    def watch(self, log: "EventLog | Bell") -> None:
        """Remember a log (or bell) that a stream follows, so that ``close_all`` can wake it."""
        with self._lock:
            self._logs.add(log)

    def close_all(self) -> None:
        """Shutdown: refuse new streams and end the open ones now."""
        self.stopping.set()
        with self._lock:
            logs = list(self._logs)
        for log in logs:
            log.wake()

    @staticmethod
    def busy_body() -> str:
        """The whole answer to a stream over the cap: come back in a few seconds.

        A 200 with an empty event stream, not a 204 or 503: on those EventSource
        gives up (htmx's extension then opens a new one, which forgets the
        Last-Event-ID); on a stream that just ends it reconnects after ``retry``
        and sends the id of the last event it had.
        """
        return sse_retry(random.randint(*BUSY_RETRY_MS)) + ": busy: too many open streams, retrying\n\n"


class Slot:
    """One open stream's place in the gate; ``release()`` is idempotent."""

    def __init__(self, gate: StreamGate, until: float, watch: bool = False):
        self.gate = gate
        self.until = until
        self.watch = watch
        self._released = False
        self._lock = threading.Lock()

    def follow(self, log: EventLog, after: int) -> Iterator[Event | None]:
        """``log.follow`` bounded by this stream's lifetime and by shutdown."""
        self.gate.watch(log)
        return log.follow(after, until=self.until, stop=self.gate.stopping)

    def listen(self, bell: Bell, name: str, seen: int, keepalive: float = KEEPALIVE_S) -> Iterator[int | None]:
        """How often ``name``'s bell has rung, each time it rings again; None after ``keepalive`` seconds of
        quiet (a keep-alive line).  Bounded by this stream's lifetime and by shutdown."""
        self.gate.watch(bell)
        stop = self.gate.stopping
        while not stop.is_set() and time.monotonic() < self.until:
            rung = bell.wait(name, seen, min(keepalive, self.until - time.monotonic()), stop)
            yield None if rung == seen else rung
            seen = rung

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self.gate.leave(self.watch)


def gate_for(svc) -> StreamGate:
    """The app's one stream gate (``Services.from_config`` makes it from ``server`` settings)."""
    return svc.streams


def last_event_id(headers, args, key: str = "") -> int | None:
    """The position in the log ``key`` a reconnecting client already has: 0 for a new client,
    None for an id of another log (or of this job before a restart), whose position means
    nothing here: the caller shows the card as it is now instead of skipping events.

    The header's id is "<key>-<n>"; ``?after=n`` (for tests) is a bare position.
    """
    header = (headers.get("Last-Event-ID") or "").strip()
    if header:
        got, _, number = header.rpartition("-")
        return int(number) if got == key and number.isdigit() else None
    raw = args.get("after") or "0"
    return max(0, int(raw)) if raw.isdigit() else 0
