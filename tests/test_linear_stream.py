"""Issue 23 item 6: a streamed reply's Markdown costs grow with the reply, not its square.

Through waitress with the scripted Ollama-API server: the page's swaps (snapshot, piece,
block with its out-of-band tail), replayed here as htmx applies them, build the reply's
finished blocks rendered as a whole and the unfinished rest as text, whether the page
followed from the start, connected mid-reply, or reconnected with its Last-Event-ID; the
final turn is the reply rendered whole as before; the events kept are O(reply).
"""

from __future__ import annotations

import dataclasses
import html
import random
import re

from markupsafe import escape

from app.render import markdown, stable_end
from conftest import make_config
from scripted_ollama import Reply
from test_streams import follow_like_a_browser
from waiting import wait_until

SNAPSHOT = re.compile(r'<div class="markdown" id="reply-md-(\d+)">(.*)</div>'
                      r'<div class="plain tail" id="reply-text-\1">(.*)</div>', re.S)
OOB_TAIL = re.compile(r'<div class="plain tail" id="reply-text-\d+" hx-swap-oob="true">(.*)</div>$', re.S)


class ReplyBody:
    """The streaming reply's body as the template's swaps change it (what htmx does with each event)."""

    def __init__(self):
        self.markdown, self.tail = "", ""

    def apply(self, name: str, data: str) -> None:
        if name == "snapshot":                     # swapped into the body whole
            found = SNAPSHOT.fullmatch(data)
            assert found, data[:200]
            self.markdown, self.tail = found.group(2), found.group(3)
        elif name == "piece":                      # appended to the tail
            self.tail += data
        elif name == "block":                      # appended to the Markdown; its tail replaces the tail
            tail = OOB_TAIL.search(data)
            assert tail, data[-200:]
            self.markdown += data[:tail.start()]
            self.tail = tail.group(1)


def long_reply(size: int, seed: int = 23) -> str:
    """Markdown like a chatty model's: headings, paragraphs, lists, code, tables, quotes; ``size`` chars."""
    r = random.Random(seed)
    words = ("the a of and to in is was for on that with as by at from it this be are or raspberry pi fan swap "
             "memory kernel service journal network disk model context heatsink <b> & **hot** `cpu`").split()
    say = lambda n: " ".join(r.choice(words) for _ in range(n))          # noqa: E731
    parts = []
    while sum(map(len, parts)) < size:
        kind = r.choice(["p", "p", "p", "p", "list", "loose", "code", "table", "quote", "h"])
        parts.append({"p": lambda: say(r.randint(20, 60)).capitalize() + ".",
                      "list": lambda: "\n".join(f"- {say(5)}" for _ in range(3)),
                      "loose": lambda: "1. " + say(6) + "\n\n   " + say(8) + "\n\n2. " + say(4),
                      "code": lambda: "```python\n" + "\n".join(f"x{i} = '{say(3)}'\n" for i in range(4)) + "```",
                      "table": lambda: "| a | b |\n|---|---|\n" + "\n".join(f"| {say(1)} | {i} |" for i in range(3)),
                      "quote": lambda: "> " + say(12),
                      "h": lambda: "## " + say(3)}[kind]())
    return "\n\n".join(parts)[:size].rstrip() + " end."


def events_bytes(gen) -> int:
    return sum(len(e.data.encode()) for e in gen.events.snapshot())


def shown(body: ReplyBody, text: str) -> int:
    """How much of the reply the body shows: k such that the body is the first k characters of
    ``text`` as a stream shows them (finished blocks rendered together, the rest as escaped text)."""
    rest = html.unescape(body.tail)
    assert body.tail == str(escape(rest))
    at = text.find(rest)
    while at != -1:
        if stable_end(text[:at + len(rest)]) == at and str(markdown(text[:at])) == body.markdown:
            return at + len(rest)
        at = text.find(rest, at + 1)
    raise AssertionError(f"the body is no prefix of the reply as streamed: ...{body.markdown[-200:]!r} + {rest!r}")


def assert_body_is_the_reply(body: ReplyBody, text: str) -> None:
    """The finished blocks as rendering them together gives, then the rest as escaped text."""
    end = stable_end(text)
    assert end > len(text) // 2
    assert body.markdown == str(markdown(text[:end]))
    assert html.unescape(body.tail) == text[end:] and body.tail == str(escape(text[end:]))


def test_a_30_kb_reply_streams_its_blocks_once_and_ends_as_before(live, scripted):
    text = long_reply(30_000)
    scripted.script = Reply(text=text, piece_size=7)
    name = live.open_session()
    assert live.post(f"/s/{name}/messages", data={"message": "talk"}).status_code == 200
    body, names = ReplyBody(), []
    for event, data, _ in live.sse(f"/s/{name}/turns/0/stream", total=120):
        names.append(event)
        if event == "final":
            final = data
        elif event != "close":
            body.apply(event, data)
    assert names[0] == "snapshot" and names[-2:] == ["final", "close"]
    assert_body_is_the_reply(body, text)
    assert str(markdown(text)) in final                      # the turn as stored: the reply rendered whole

    gen = live.services.activities.last(name)
    blocks = [e.data for e in gen.events.snapshot() if e.name == "block"]
    assert len(blocks) > 100                                  # rendered block by block as it streamed
    assert sum(OOB_TAIL.search(b).start() for b in blocks) == len(str(markdown(text[:stable_end(text)])))
    assert max(map(len, blocks)) < 3000                      # no event holds the rendered prefix
    kept = events_bytes(gen)
    assert kept < 3 * len(text.encode()), f"{kept} bytes of events for a {len(text)}-byte reply"


def test_a_page_that_connects_mid_reply_or_reconnects_gets_everything(tmp_path, scripted, make_live):
    config = make_config(tmp_path, scripted.url)
    live = make_live(dataclasses.replace(config, server=dataclasses.replace(config.server, stream_lifetime_s=0.4)))
    text = long_reply(6_000, seed=5)
    scripted.script = Reply(text=text, piece_size=6, token_delay=0.003)      # ~3 s: several stream lifetimes
    name = live.open_session()
    assert live.post(f"/s/{name}/messages", data={"message": "talk"}).status_code == 200
    gen = live.services.activities.last(name)
    wait_until(lambda: len(gen.text) > 2000 and any(e.name == "block" for e in gen.events.snapshot()), 30,
               "a third of the reply, with blocks rendered")
    assert not gen.events.closed, "the reply is still streaming when the page connects"

    connections = follow_like_a_browser(live.http, f"/s/{name}/turns/0/stream")
    assert len(connections) >= 3, "the stream ended itself and the page came back with its Last-Event-ID"
    assert connections[0].names[0] == "snapshot" and connections[-1].names[-2:] == ["final", "close"]
    assert all("snapshot" not in conn.names for conn in connections[1:]), "reconnects replay from their id"
    body, ids = ReplyBody(), []
    for conn in connections:
        for event, data, eid in conn.events:
            if event not in ("final", "close"):
                body.apply(event, data)
                ids.append(eid)
        if conn is connections[0]:
            assert 2000 < shown(body, text) < len(text), "the first connect got the reply so far"
    assert len(ids) == len(set(ids)), "no event repeated across reconnects"
    if connections[-1].names == ["final", "close"]:    # the reply ended while the page was away: the
        shown(body, text)                              # body is a prefix (else this raises), and the
    else:                                              # final turn replaces it
        assert_body_is_the_reply(body, text)
    assert str(markdown(text)) in connections[-1].events[-2][1]
