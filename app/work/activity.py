"""The one owner of a session's model work.

A reply, a compact and an analysis (running, or waiting on the user's answer)
each hold their session's ``Activity``: at most one per session at a time.  It
is taken with ``Activities.begin`` (the caller holds the session's lock, so the
busy check and the turn it writes are one change) and given back with ``end``
once the result is in the session file.  Everything that asks "is this session
busy?", and every Stop, asks this registry and nothing else.

Stop is addressed: it names the activity it means (``Activities.stop(session,
id)``), so a stale page's Stop cannot stop another device's newer reply.  An
activity's id is unique across restarts (a random prefix per process), and it
is also the prefix of its events' ids: a page that reconnects after a restart
never takes a new reply's events for the old one's.

An activity can be stopped at any moment, before its model call has sent a byte
included: every call in flight is attached to it (``attach``; an analysis keeps several
map calls running at once) and a stop cancels them all.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Protocol

from ..errors import Busy
from ..events import EventLog

KINDS = ("reply", "compact", "analysis")
BUSY_TEXT = {
    "reply": ("A reply is still being generated in this session (maybe on another device); wait for it or "
              "stop it, then send again. Your message is still in the box."),
    "compact": ("The older turns are being summarised in this session; wait for it or stop it, then send "
                "again. Your message is still in the box."),
    "analysis": ("A chunk analysis is running in this session; its answer will be the reply to the message "
                 "that asked. Wait for it or cancel it, then send again. Your message is still in the box."),
}


WAITING_TEXT = ("An analysis card in this session is waiting for its instruction: start it or answer \"no\" "
                "first. Your message is still in the box.")


class SessionBusy(Busy):
    """The session's activity is held; ``holding`` says by what ("reply", "compact", "analysis")."""

    def __init__(self, holding: str, waiting: bool = False):
        self.holding = holding
        super().__init__(WAITING_TEXT if waiting else BUSY_TEXT[holding])


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class OpenCalls:
    """The model calls open right now in an activity or in one of its parts, and whether it was
    stopped: a stop cancels every call attached, and a call attached after the stop is cancelled at
    once.  (Not ``work.calls.ModelCalls``, which makes the calls: this only holds the open ones.)"""

    def __init__(self):
        self.stopped = threading.Event()
        self._calls: set[Cancellable] = set()
        self._lock = threading.Lock()

    def cancel_all(self) -> None:
        """Stopped: every call in flight is cancelled, whatever stage it is at."""
        with self._lock:
            self.stopped.set()
            calls = list(self._calls)
        for call in calls:
            call.cancel()

    def attach(self, call: Cancellable) -> None:
        """A call now in flight (cancelled at once if the stop came first)."""
        with self._lock:
            self._calls.add(call)
            stopped = self.stopped.is_set()
        if stopped:
            call.cancel()

    def detach(self, call: Cancellable) -> None:
        """The call ended: a later stop has nothing of it to cancel (and the set stays small)."""
        with self._lock:
            self._calls.discard(call)

    def __len__(self) -> int:
        with self._lock:
            return len(self._calls)


class Activity:
    """One piece of model work holding one session; stoppable from any thread."""

    def __init__(self, id: str, session: str, kind: str, turn: int):
        self.id = id
        self.session = session
        self.kind = kind
        self.turn = turn
        self.events = EventLog(key=id)
        self.started = time.monotonic()
        self.ended_at: float | None = None     # monotonic time ``end`` was called
        self.interrupted = ""                  # why the server cut it off (shutdown), "" otherwise
        # Waiting on the user (an analysis card asking for its instruction): it holds the
        # session, but a new message answers it and a delete may discard it.
        self.waiting = False
        self._ended = threading.Event()
        self._calls = OpenCalls()               # every call in flight (one, or an analysis's map calls)
        self._wakes: set[threading.Event] = set()   # set by a stop (``waking``)
        self._lock = threading.Lock()

    # -- stopping ------------------------------------------------------------------------

    @property
    def stopped(self) -> bool:
        """A stop was asked (by the user, or the server going away)."""
        return self._calls.stopped.is_set()

    def stop(self) -> None:
        """End the work now: every call in flight is cancelled, whatever stage it is at, and every
        thread waiting in ``waking`` is woken."""
        self._calls.cancel_all()
        with self._lock:
            wakes = list(self._wakes)
        for event in wakes:
            event.set()
        self.events.wake()

    @contextmanager
    def waking(self, event: threading.Event) -> Iterator[threading.Event]:
        """Within the block, a stop sets ``event`` (at once if the stop came first): a thread that
        sleeps on an event for its own reasons too (a job waiting for its file's index, woken by each
        batch the build embeds) also wakes for a Stop, without polling and without a model call."""
        with self._lock:
            self._wakes.add(event)
        if self.stopped:            # (the stop came first; a stop after the add sets it itself)
            event.set()
        try:
            yield event
        finally:
            with self._lock:
                self._wakes.discard(event)

    def wait_stopped(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s (a pause before a retry); True as soon as a stop comes, so a Stop
        during the pause ends it at once, without a sleep loop."""
        return self._calls.stopped.wait(timeout)

    def interrupt(self, reason: str) -> None:
        """Stop because the server is going away (recorded with an "interrupted" note)."""
        self.interrupted = reason
        self.stop()

    def attach(self, call: Cancellable) -> None:
        """A model call now in flight (one of several, maybe): a stop cancels it (at once, if the stop
        came first)."""
        self._calls.attach(call)

    def detach(self, call: Cancellable) -> None:
        self._calls.detach(call)

    @property
    def in_flight(self) -> int:
        """How many calls are attached now (a test's and a log line's figure)."""
        return len(self._calls)

    # -- ending -------------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """The result is recorded and the session is free again."""
        return self._ended.is_set()

    def wait_ended(self, timeout: float | None = None) -> bool:
        return self._ended.wait(timeout)

    def mark_ended(self) -> None:
        """The registry gave the session back (``Activities.end``): ``wait_ended`` returns and the
        followers of the activity's events see their log close."""
        self._ended.set()
        self.events.close()


class Part:
    """One of several pieces of an activity's work in flight at once (a map call with its retries
    and their pauses): a stop of the activity cancels it, and it can be cancelled on its own (a
    re-plan made the chunk it reads stale).  It stands in for the activity where a call is made
    (``attach``/``detach``), so the call it makes is cancelled either way.  Use it as a context
    manager: it is attached to the activity for as long as it runs."""

    def __init__(self, activity: Activity):
        self.activity = activity
        self._calls = OpenCalls()

    def __enter__(self) -> "Part":
        self.activity.attach(self)
        return self

    def __exit__(self, *exc) -> None:
        self.activity.detach(self)

    @property
    def cancelled(self) -> bool:
        return self._calls.stopped.is_set()

    def cancel(self) -> None:
        """End this part now: its call in flight is cancelled, a pause it waits in ends."""
        self._calls.cancel_all()

    def attach(self, call: Cancellable) -> None:
        """The part's call now in flight (cancelled at once if the part was cancelled first)."""
        self._calls.attach(call)

    def detach(self, call: Cancellable) -> None:
        self._calls.detach(call)

    def wait_stopped(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s; True as soon as the part (or its activity) is stopped."""
        return self._calls.stopped.wait(timeout)


class Activities:
    """Which activity holds each session; the recently ended ones stay a little for late followers.

    ``grace``: seconds an ended activity stays findable (``last``) so a page that
    reconnects just after the end still gets its final event; pruned on look-up,
    not by a timer.
    """

    def __init__(self, grace: float = 30.0):
        self.grace = grace
        self.boot = secrets.token_hex(3)        # this process's prefix: ids never repeat after a restart
        self._serial = itertools.count(1)
        self._holding: dict[str, Activity] = {}
        self._ended: dict[str, Activity] = {}
        self._lock = threading.Lock()
        self._closing = ""

    def new_id(self) -> str:
        return f"{self.boot}{next(self._serial)}"

    def begin(self, session: str, kind: str, turn: int, activity: Activity | None = None) -> Activity:
        """Take the session for ``kind`` of work on ``turn``; Busy if anything holds it.

        Call it under the session's lock (``SessionStore.lock``): the check and the
        turn the caller then writes are one change.  ``activity``: a subclass made by
        the caller (a reply's ``Generation``), else a plain one.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown activity kind {kind!r}")
        with self._lock:
            holder = self._holding.get(session)
            if holder is not None:
                raise SessionBusy(holder.kind, holder.waiting)
            activity = activity or Activity(self.new_id(), session, kind, turn)
            self._holding[session] = activity
            closing = self._closing
        if closing:
            activity.interrupt(closing)
        return activity

    def end(self, activity: Activity) -> None:
        """The result is recorded: the session is free (idempotent); followers see the log close."""
        with self._lock:
            if self._holding.get(activity.session) is activity:
                del self._holding[activity.session]
            activity.ended_at = time.monotonic()
            self._ended[activity.session] = activity
            self._prune()
        activity.mark_ended()

    def holder(self, session: str) -> Activity | None:
        """The activity holding ``session`` now, if any."""
        with self._lock:
            return self._holding.get(session)

    def check_free(self, session: str) -> None:
        """SessionBusy when anything holds ``session`` (a use case's first step, under the session lock)."""
        holder = self.holder(session)
        if holder is not None:
            raise SessionBusy(holder.kind, holder.waiting)

    def working(self, session: str) -> str:
        """Like ``busy``, but "" for an activity waiting on the user (its card answers a new message)."""
        holder = self.holder(session)
        return holder.kind if holder is not None and not holder.waiting else ""

    def busy(self, session: str) -> str:
        """What holds the session ("reply", "compact", "analysis"), or "" when it is free."""
        holder = self.holder(session)
        return holder.kind if holder is not None else ""

    def last(self, session: str) -> Activity | None:
        """The holder, else the one that ended within ``grace`` (a late page's stream reads it)."""
        with self._lock:
            self._prune()
            return self._holding.get(session) or self._ended.get(session)

    def stop(self, session: str, activity_id: str) -> bool:
        """Stop the session's activity if it is the one named; False when it is not (a stale page)."""
        holder = self.holder(session)
        if holder is None or holder.id != activity_id:
            return False
        holder.stop()
        return True

    def running(self) -> list[Activity]:
        with self._lock:
            return list(self._holding.values())

    def __len__(self) -> int:
        """Activities still known (holding, or ended within the grace)."""
        with self._lock:
            self._prune()
            return len(self._holding) + len(self._ended)

    def close(self, reason: str) -> list[Activity]:
        """Shutdown: every activity is interrupted, and any begun from now on is interrupted at once."""
        with self._lock:
            self._closing = reason
            holding = list(self._holding.values())
        for activity in holding:
            activity.interrupt(reason)
        return holding

    def _prune(self) -> None:
        now = time.monotonic()
        for name in [n for n, a in self._ended.items() if now - (a.ended_at or now) >= self.grace]:
            del self._ended[name]
