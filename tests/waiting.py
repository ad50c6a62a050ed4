"""Deadline-bounded waiting for tests: never a bare polling loop, never a tight clock.

``wait_until(predicate, timeout, message)`` polls ``predicate`` until it returns
something truthy and returns that value; at the deadline it fails the test with
``message`` (and the last value seen), so a hang becomes a clear failure instead
of a stuck run. Timeouts here are generous bounds for a loaded 2-core machine:
they say "this must happen eventually", not "this is fast".
"""

from __future__ import annotations

import threading
import time
from typing import Callable, TypeVar

import pytest

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, message: str = "condition",
               interval: float = 0.02) -> T:
    """Poll ``predicate`` every ``interval`` s until it is truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value:
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for: {message} (last value: {value!r})")
        time.sleep(interval)
        value = predicate()
    return value


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, what: str = "the condition") -> T:
    """``wait_until`` as the chat and analysis tests call it (``what`` names the condition)."""
    return wait_until(predicate, timeout, what)


def wait_for_exit(proc, timeout: float, message: str = "the process to exit") -> int:
    """``proc.wait`` with a deadline that fails the test (and kills the process) instead of hanging."""
    import subprocess

    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        pytest.fail(f"timed out after {timeout:g} s waiting for: {message}")


class StreamReader:
    """Iterates a model-server stream in its own thread; keeps the pieces and how it ended
    (so a test can cancel from its own thread and wait, with a deadline, for the end)."""

    def __init__(self, stream):
        self.stream, self.pieces, self.error = stream, [], None
        self.first, self.done = threading.Event(), threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for piece in self.stream:
                self.pieces.append(piece)
                self.first.set()
        except BaseException as exc:    # noqa: BLE001 (the test inspects it)
            self.error = exc
        finally:
            self.done.set()
