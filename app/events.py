"""An in-memory event log that server-sent-event streams replay and follow.

A reply being generated and a chunked analysis both produce events in a
background thread. Each page that shows them opens an SSE stream that first
replays what it missed (from ``Last-Event-ID``) and then waits on a condition
variable for more: no polling, and a phone that slept catches up on reconnect.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterator

KEEPALIVE_S = 15.0


@dataclass(frozen=True)
class Event:
    id: int
    name: str
    data: str


class EventLog:
    """Append-only events with ids 1, 2, 3...; ``close()`` marks the end."""

    def __init__(self) -> None:
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

    def close(self) -> None:
        with self._cond:
            self._closed = True
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

    def follow(self, after: int = 0, keepalive: float = KEEPALIVE_S) -> Iterator[Event | None]:
        """Yield the events after id ``after``, then new ones as they come.

        Yields ``None`` when nothing happened for ``keepalive`` seconds, so the
        caller can send a comment line and notice a client that went away.
        Ends once the log is closed and everything has been yielded.
        """
        position = max(0, after)
        while True:
            with self._cond:
                if position >= len(self._events) and not self._closed:
                    self._cond.wait(keepalive)
                batch = self._events[position:]
                closed = self._closed
            if not batch:
                if closed:
                    return
                yield None
                continue
            position += len(batch)
            yield from batch


def sse_format(event: Event | None) -> str:
    """One event in the text/event-stream wire format (``None``: a keep-alive).

    Data lines cannot hold raw newlines, so each line gets its own ``data:``;
    the browser joins them with newlines again.
    """
    if event is None:
        return ": keep-alive\n\n"
    lines = event.data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    data = "".join(f"data: {line}\n" for line in lines)
    return f"id: {event.id}\nevent: {event.name}\n{data}\n"


def last_event_id(headers, args) -> int:
    """The id a reconnecting client already has (header, or ?after= for tests)."""
    raw = headers.get("Last-Event-ID") or args.get("after") or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        return 0
