"""Issue 13, problem 10: what the app keeps in memory is released or bounded.

- a finished reply's Generation (its pieces and its event log) leaves the Replies registry
  once its log is closed and the grace is over; the page then reads the session file;
- the session cache is a small LRU and the per-session locks live only while in use.
(The analysis runner's job logs belong to app/analysis and are not covered here.)
"""

from __future__ import annotations

import gc
import threading

from app.events import gate_for
from app.sessions import fountain
from app.sessions.store import SessionStore
from scripted_ollama import Reply
from waiting import wait_until


def test_finished_replies_leave_the_registry_after_the_grace(live, scripted):
    live.services.activities.grace = 0.3
    scripted.script = Reply(text="short answer", piece_size=3)
    names = [live.services.store.create("tiny:1b").name for _ in range(5)]
    for name in names:
        assert live.post(f"/s/{name}/messages", data={"message": "hi"}).status_code == 200
    wait_until(lambda: all(live.services.store.load(n).turns[0].reply for n in names), 15, "every reply recorded")
    wait_until(lambda: len(live.services.activities) == 0, 10, "every finished generation released")
    # the page and a late stream read the file: the reply is still all there
    page = live.get(f"/s/{names[0]}").text
    assert "short answer" in page and "/turns/0/stream" not in page      # (the page's watch stream aside)
    events = list(live.sse(f"/s/{names[0]}/turns/0/stream"))
    assert [e for e, _, _ in events] == ["final", "close"] and "short answer" in events[0][1]
    assert gate_for(live.services).open == 0


def test_a_stream_following_when_the_reply_ends_still_gets_it_all(live, scripted):
    live.services.activities.grace = 0.0            # released the moment it is recorded
    scripted.script = Reply(text="abcdefghij" * 5, piece_size=5, token_delay=0.01)
    name = live.open_session()
    assert live.post(f"/s/{name}/messages", data={"message": "go"}).status_code == 200
    events = list(live.sse(f"/s/{name}/turns/0/stream"))
    assert events[-2][0] == "final" and "abcdefghij" * 5 in events[-2][1]


def test_the_session_cache_is_a_small_lru(tmp_path):
    store = SessionStore(tmp_path, user_name="t", workspace=str(tmp_path), cache_size=3)
    names = []
    for i in range(10):
        session = store.create("m", title=f"s{i}")
        names.append(session.name)
        store.append_turn(session.name, fountain.Turn(when=None, user_text=f"m{i}", reply="r"))
        store.load(session.name)
    assert len(store._cache) <= 3
    assert list(store._cache) == names[-3:]                 # the most recently used stay
    store.load(names[0])                                    # a miss reads the file again
    assert list(store._cache)[-1] == names[0] and len(store._cache) == 3
    assert store.load(names[0]).turns[0].user_text == "m0"


def test_session_locks_do_not_grow_with_the_sessions(tmp_path):
    store = SessionStore(tmp_path, user_name="t", workspace=str(tmp_path))
    for i in range(200):
        session = store.create("m", title=f"s{i}")
        store.rename(session.name, f"renamed {i}")
    gc.collect()
    assert len(store._locks) == 0
    # while held, the same lock is handed out (two writers of one session still exclude each other)
    held = store.lock("harvey-session-20260101-000000")
    assert store.lock("harvey-session-20260101-000000") is held
    entered = threading.Event()

    def other():
        with store.lock("harvey-session-20260101-000000"):
            entered.set()

    with held:
        t = threading.Thread(target=other, daemon=True)
        t.start()
        assert not entered.wait(0.2)                        # excluded while held
    assert entered.wait(5)
    t.join(5)
