"""Where the session's model work runs: one background worker for replies, compacts and analyses.

``run`` starts a task for an activity in a thread of its own (a reply must not
wait behind another session's analysis) and gives the session back
(``Activities.end``) when the task returns, whatever happened, so a crash can
never leave a session busy.  ``lane`` is for work that must run one item at a
time (analyses: the Pi's model is never asked for two long jobs at once; an
embedding indexer later): a queue served by one thread that ends itself when
the queue stays empty, so an idle app holds no thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

from .activity import Activities, Activity

log = logging.getLogger(__name__)

LANE_IDLE_S = 30.0        # a lane's thread ends after this long with nothing queued


class Worker:
    """Runs tasks in the background and ends their activities; ``shutdown`` stops them all."""

    def __init__(self, activities: Activities):
        self.activities = activities
        self._threads: set[threading.Thread] = set()
        self._lanes: dict[str, Lane] = {}
        self._lock = threading.Lock()

    def run(self, activity: Activity, task: Callable[[], None], name: str = "") -> threading.Thread:
        """Run ``task`` in a new thread; the activity ends when it returns (or raises)."""
        def body():
            try:
                task()
            except Exception:          # the task records its own failures; this is a last guard
                log.exception("%s work for %s crashed", activity.kind, activity.session)
            finally:
                self.activities.end(activity)
                with self._lock:
                    self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=body, name=name or f"{activity.kind}-{activity.session}", daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()
        return thread

    def lane(self, name: str, serve: Callable[[str], None]) -> "Lane":
        """The lane ``name`` (made on first use): items put on it are served one at a time."""
        with self._lock:
            lane = self._lanes.get(name)
            if lane is None:
                lane = self._lanes[name] = Lane(name, serve)
            return lane

    def shutdown(self, reason: str, timeout: float) -> list[Activity]:
        """Interrupt every activity and wait up to ``timeout`` s for their threads; returns the interrupted."""
        interrupted = self.activities.close(reason)
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return interrupted


class Lane:
    """A queue of items served one at a time by one thread, started on demand."""

    def __init__(self, name: str, serve: Callable[[str], None]):
        self.name = name
        self._serve = serve
        self._queue: queue.Queue[str] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, item: str) -> None:
        """Queue ``item``; start the lane's thread if it is not running."""
        self._queue.put(item)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=LANE_IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            try:
                self._serve(item)
            except Exception:           # an item must never kill the lane
                log.exception("lane %s: item %s crashed", self.name, item)
