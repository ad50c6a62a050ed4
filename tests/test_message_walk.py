"""A message's walk down the floors (issue 34): traced, not read off a diagram.

The floors of ARCHITECTURE.md say which package may import which; a call can still climb back up
through a callback or an object handed down. These tests trace every call between packages of
``app/`` while a real message is sent (``chat.turns.send`` against the scripted Ollama server over
HTTP, its reply streamed on the worker and recorded), and count the calls from a package into one
on a higher floor: the climbs back up. The issue asks for at most two.
"""

import sys
import threading
from pathlib import Path

import pytest

from app.chat import turns
from app.services import Services
from conftest import make_config
from scripted_ollama import ScriptedOllama
from test_architecture import floors_in_architecture_md


class Walk:
    """Every call from one package of app/ into another, in every thread started while tracing."""

    def __init__(self):
        self.floors = floors_in_architecture_md()
        self.calls: list[tuple[str, str, str]] = []       # (caller module, callee module, function)

    @staticmethod
    def package(module: str) -> str | None:
        parts = module.split(".")
        return f"app.{parts[1]}" if parts[0] == "app" and len(parts) > 1 else None

    def _profile(self, frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        callee, caller = frame.f_globals.get("__name__", ""), frame.f_back.f_globals.get("__name__", "")
        if self.package(caller) and self.package(callee) and self.package(caller) != self.package(callee):
            self.calls.append((caller, callee, frame.f_code.co_name))

    def __enter__(self):
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        threading.setprofile(None)

    def climbs(self) -> list[tuple[str, str, str]]:
        """The calls into a package on a higher floor than the caller's, each place once."""
        up = [(a, b, f) for a, b, f in self.calls
              if self.floors[self.package(b)] > self.floors[self.package(a)]]
        return list(dict.fromkeys(up))


@pytest.fixture
def served(tmp_path):
    with ScriptedOllama() as server:
        svc = Services.from_config(make_config(tmp_path, server.url))
        try:
            yield svc, Path(svc.config.workspace)
        finally:
            svc.close("the test ended", 10)


def test_a_messages_walk_goes_down_the_floors_climbing_back_once(served):
    """A message with a named file that fits: sized, budgeted, recorded, replied to, the reply
    recorded. The one climb is the worker (floor 4) running the reply the chat handed it."""
    svc, workspace = served
    (workspace / "notes.md").write_text("# Notes\n\nThe tokenizer counts what the model reads.\n")
    name = svc.store.create("tiny:1b").name
    with Walk() as walk:
        outcome = turns.send(svc, name, "What do notes.md say about the tokenizer?")
        assert outcome.reply is not None and outcome.reply.wait_ended(30)
    assert len(walk.calls) > 50                      # the trace saw the walk (not an empty one)
    turn = svc.store.load(name).turns[-1]
    assert "tokenizer" in turn.user_text and "notes.md" in " ".join(turn.notes) and turn.reply
    assert walk.climbs() == [("app.work.worker", "app.chat.turns", "<lambda>")]


def test_an_overflowing_file_walks_to_its_card_without_climbing(served):
    """A file too large for the window becomes an analysis card: planned (counted, chunked) and
    recorded, all downhill."""
    svc, workspace = served
    (workspace / "big.md").write_text("\n\n".join(f"## Part {i}\n\n" + "A sentence of the part. " * 120
                                                  for i in range(200)))
    name = svc.store.create("tiny:1b").name
    with Walk() as walk:
        outcome = turns.send(svc, name, "Summarize big.md")
    assert outcome.job is not None and outcome.job.state == "proposed"
    assert len(walk.calls) > 50
    assert walk.climbs() == []


def test_the_walk_sees_a_climb_and_only_a_climb():
    """The count is not vacuous: a low floor calling back into a high one is a climb (a function
    handed down and called there is one too); the high floor calling down is not."""
    low, high = {"__name__": "app.errors"}, {"__name__": "app.chat.turns"}
    exec("def back(fn):\n    return fn()\n", low)
    exec("def up():\n    return 1\n\ndef down(fn):\n    return fn(lambda: 0)\n", high)
    with Walk() as walk:
        low["back"](high["up"])
        high["down"](low["back"])
    assert walk.calls == [("app.errors", "app.chat.turns", "up"), ("app.chat.turns", "app.errors", "back"),
                          ("app.errors", "app.chat.turns", "<lambda>")]
    assert walk.climbs() == [("app.errors", "app.chat.turns", "up"), ("app.errors", "app.chat.turns", "<lambda>")]
