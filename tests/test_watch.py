"""Issue 45: a second tab (or device) shows the first one's new turn without a reload.

The chat page keeps a watch stream open (``/s/NAME/watch``): each turn added to the session, by any device,
arrives as the page shows it, with its id the page's last turn's key and the turns the page then has, so a
reconnect after the stream's lifetime (or a phone that slept) gets what it missed and nothing twice, and a
failed message sent again in its turn's place reaches the page that shows the failed one.  Watch streams take at most half the
gate's slots: replies and analyses always find one.  Through waitress, with the scripted Ollama.
"""

from __future__ import annotations

import threading

import httpx

from app.events import gate_for
from scripted_ollama import Reply
from test_streams import read_stream, send, start_app
from waiting import wait_for as wait_until_true


def wait_until(predicate, timeout, what):
    return wait_until_true(predicate, timeout, what=what)


def key(live, name: str, index: int) -> str:
    """Turn ``index``'s key as the session file holds it (``Turn.key``)."""
    return live.services.store.load(name).turns[index].key


def watch_in_background(live, path: str, last_event_id: str | None = None):
    """Read one connection of a watch stream in a thread (it ends at the stream's lifetime)."""
    out: dict = {}

    def read():
        with httpx.Client(base_url=live.url) as other:           # another device: its own connection
            out["conn"] = read_stream(other, path, last_event_id, timeout=30)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, out


def test_a_turn_sent_on_one_device_reaches_the_others_watch_and_a_reconnect_misses_nothing(
        tmp_path, scripted, make_live):
    live = start_app(tmp_path, scripted, make_live, stream_lifetime_s=2.0)
    scripted.script = Reply(text="An answer from the model.")
    gate = gate_for(live.services)
    name = live.open_session()
    reader, out = watch_in_background(live, f"/s/{name}/watch?have=0")
    wait_until(lambda: gate.watching == 1, 10, "the watch stream open")
    send(live, name, "Hello from the laptop")
    reader.join(15)
    assert not reader.is_alive()
    turns = [(event, data, eid) for event, data, eid in out["conn"].events if event == "turn"]
    assert [eid for _, _, eid in turns] == [f"{key(live, name, 0)}.1"]
    assert 'id="turn-0"' in turns[0][1] and "Hello from the laptop" in turns[0][1]
    # the first message named the session: the other device's header and tab get that name too
    assert live.services.store.load(name).title == "Hello from the laptop"
    assert 'id="title"' in turns[0][1] and 'value="Hello from the laptop"' in turns[0][1]
    wait_until(lambda: not live.services.activities.working(name), 10, "the reply to end")

    # the phone comes back with the id it had: only the turn it missed
    send(live, name, "And a second message")
    wait_until(lambda: not live.services.activities.working(name), 10, "the second reply to end")
    reader, out = watch_in_background(live, f"/s/{name}/watch?have=0", last_event_id=f"{key(live, name, 0)}.1")
    reader.join(15)
    turns = [(data, eid) for event, data, eid in out["conn"].events if event == "turn"]
    assert [eid for _, eid in turns] == [f"{key(live, name, 1)}.2"]
    assert 'id="turn-1"' in turns[0][0] and "And a second message" in turns[0][0]
    assert "An answer from the model." in turns[0][0]                # the turn as it is now: answered
    assert 'id="title"' not in turns[0][0]                          # only the first turn names the session
    assert gate.watching == 0 and gate.open == 0


def test_the_page_opens_its_watch_with_the_turns_it_shows(live, scripted):
    name = live.open_session()
    assert f'sse-connect="/s/{name}/watch?have=0&amp;last="' in live.get(f"/s/{name}").text
    sent = live.post(f"/s/{name}/messages", data={"message": "one"}).text
    wait_until(lambda: not live.services.activities.working(name), 10, "the reply to end")
    page = live.get(f"/s/{name}").text
    stored = key(live, name, 0)
    assert f'sse-connect="/s/{name}/watch?have=1&amp;last={stored}"' in page
    # the page that sent the turn shows it with the key the file gives it, and its reply leaves the key as it
    # was: the watch's copy of a page's own turn is never taken for another message in its place
    assert f'id="turn-0" data-key="{stored}"' in sent and f'id="turn-0" data-key="{stored}"' in page
    assert live.get(f"/s/{name}/watch").status_code == 400         # a watch must say what it has


def test_a_message_sent_again_in_a_failed_turns_place_reaches_the_page_that_shows_the_failed_one(
        tmp_path, scripted, make_live):
    """Re-send replaces the last turn (drop, then add at the same index): the count of turns is the same, so a
    watch that went by the count alone never showed the other device the message sent again."""
    live = start_app(tmp_path, scripted, make_live, stream_lifetime_s=2.0)
    (tmp_path / "workspace").mkdir(exist_ok=True)
    (tmp_path / "workspace" / "licenses.txt").write_text("MIT for the parser, Apache-2.0 for the rest.\n")
    scripted.script = Reply(text="The parser is MIT.")
    gate = gate_for(live.services)
    name = live.open_session()
    assert "did you mean" in live.post(f"/s/{name}/messages", data={"message": "What does licences.txt say?"}).text
    failed = key(live, name, 0)
    reader, out = watch_in_background(live, f"/s/{name}/watch?have=1&last={failed}")    # the phone shows the card
    wait_until(lambda: gate.watching == 1, 10, "the watch stream open")
    response = live.post(f"/s/{name}/turns/0/resend", data={"message": "What does licenses.txt say?"})
    assert response.status_code == 200, response.text
    wait_until(lambda: not live.services.activities.working(name), 10, "the reply to end")
    again = key(live, name, 0)
    assert again != failed and len(live.services.store.load(name).turns) == 1
    reader.join(15)
    assert not reader.is_alive()
    turns = [(data, eid) for event, data, eid in out["conn"].events if event == "turn"]
    assert [eid for _, eid in turns] == [f"{again}.1"]
    assert f'id="turn-0" data-key="{again}"' in turns[0][0] and "What does licenses.txt say?" in turns[0][0]

    # a phone that slept through it comes back with the failed turn's id: it gets the turn sent again; a page
    # that shows the turn as it is now gets nothing
    for last_event_id, expected in ((f"{failed}.1", [f"{again}.1"]), (f"{again}.1", [])):
        reader, out = watch_in_background(live, f"/s/{name}/watch?have=0", last_event_id=last_event_id)
        reader.join(15)
        assert [eid for event, _, eid in out["conn"].events if event == "turn"] == expected, last_event_id
    assert gate.watching == 0


def test_watches_take_half_the_slots_and_a_reply_still_gets_one(tmp_path, scripted, make_live):
    live = start_app(tmp_path, scripted, make_live, threads=8, stream_lifetime_s=3.0)     # 6 slots, 3 watches
    gate = gate_for(live.services)
    assert (gate.limit, gate.watch_limit) == (6, 3)
    name = live.open_session()
    readers = [watch_in_background(live, f"/s/{name}/watch?have=0") for _ in range(3)]
    wait_until(lambda: gate.watching == 3, 10, "three watches open")
    with httpx.Client(base_url=live.url) as other:
        refused = read_stream(other, f"/s/{name}/watch?have=0", timeout=10)
    assert refused.status == 200 and refused.events == [] and refused.retry >= 1000      # come back later
    scripted.script = Reply(text="A reply while three pages watch.", piece_size=4, token_delay=0.01)
    send(live, name, "hello")
    with httpx.Client(base_url=live.url) as other:
        followed = read_stream(other, f"/s/{name}/turns/0/stream", timeout=15)
    assert "close" in followed.names and followed.names[0] in ("snapshot", "final")
    for reader, _ in readers:
        reader.join(15)
    assert gate.watching == 0


def test_a_watch_that_comes_back_after_a_restart_gets_only_what_it_missed(tmp_path, scripted):
    """The page's id is its last turn's key and the turns it holds, not a position in memory: after
    ``systemctl restart`` the reconnect (Last-Event-ID from before it) gets the turns added since, read from
    the session file."""
    import dataclasses

    from conftest import LiveApp, make_config

    scripted.script = Reply(text="Answered.")
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, stream_lifetime_s=1.0))
    first = LiveApp(config)
    try:
        name = first.open_session()
        send(first, name, "before the restart")
        wait_until(lambda: not first.services.activities.working(name), 10, "the first reply to end")
        before = key(first, name, 0)
    finally:
        first.close()
    second = LiveApp(config)
    try:
        send(second, name, "after the restart")
        wait_until(lambda: not second.services.activities.working(name), 10, "the second reply to end")
        reader, out = watch_in_background(second, f"/s/{name}/watch?have=0", last_event_id=f"{before}.1")
        reader.join(15)
        turns = [(data, eid) for event, data, eid in out["conn"].events if event == "turn"]
        assert [eid for _, eid in turns] == [f"{key(second, name, 1)}.2"] and "after the restart" in turns[0][0]
    finally:
        second.close()
