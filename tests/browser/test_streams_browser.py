"""Issue 13, problem 4 in a real browser: Chromium's EventSource and the vendored htmx-ext-sse.

The stream ends itself every 0.4 s here; the browser reconnects by itself (the extension
only steps in when EventSource gives up, which a normal end does not make it do) and
sends Last-Event-ID, so the reply text on the page only ever grows by what the model
sent: it is at every moment a prefix of the reply, never a repeat, and ends complete.
A page over the stream cap is told to retry and catches up once a slot is free.
"""

import dataclasses
import threading

import pytest

from app.events import gate_for

from browser.conftest import LAPTOP, wait_until
from conftest import make_config
from scripted_ollama import Reply
from waiting import wait_until as wait_for

pytestmark = pytest.mark.browser

TEXT = "".join(f"[{n:03d}]" for n in range(120))        # every piece different: a repeat would show


def test_self_ending_streams_reconnect_invisibly(tmp_path, scripted, make_live, page_for):
    config = make_config(tmp_path, scripted.url)
    live = make_live(dataclasses.replace(config, server=dataclasses.replace(config.server, stream_lifetime_s=0.4)))
    scripted.script = Reply(text=TEXT, piece_size=5, token_delay=0.03)    # ~3.6 s: about nine lifetimes
    page = page_for(LAPTOP)
    page.goto(live.url + "/")
    page.fill("#message", "count")
    page.press("#message", "Enter")
    wait_until(page, "document.querySelector('.msg.reply.streaming .text')")
    seen = []
    for _ in range(400):                                  # sample the growing text (bounded: ~20 s at most)
        text = page.evaluate("document.querySelector('.msg.reply.streaming .text')?.textContent ?? null")
        if text is None:
            break
        seen.append(text)
        page.wait_for_timeout(50)
    assert len(seen) > 5
    for text in seen:
        assert TEXT.startswith(text), f"the page showed text the model did not send in that order: {text[-40:]}"
    page.wait_for_selector(".msg.reply .markdown")
    assert page.locator(".msg.reply .markdown").text_content().strip() == TEXT
    assert page.errors == []


def test_a_page_over_the_cap_is_told_to_retry_and_catches_up(tmp_path, scripted, make_live, page_for):
    config = make_config(tmp_path, scripted.url)
    server = dataclasses.replace(config.server, threads=4, max_streams=1, stream_lifetime_s=4.0)
    live = make_live(dataclasses.replace(config, server=server))
    gate = gate_for(live.services)
    scripted.script = Reply(text=TEXT, piece_size=5, token_delay=0.07)    # ~8 s
    name = live.open_session()
    assert live.post(f"/s/{name}/messages", data={"message": "count"}).status_code == 200
    holder = threading.Thread(target=lambda: list(live.sse(f"/s/{name}/turns/0/stream", reconnect=False)),
                              daemon=True)
    holder.start()                                       # another device holds the one slot for 4 s
    wait_for(lambda: gate.open == 1, 10, "the slot taken")
    page = page_for(LAPTOP)
    page.goto(f"{live.url}/s/{name}")
    wait_for(lambda: gate.refused >= 1, 10, "the page's stream told to retry")
    page.wait_for_selector(".msg.reply .markdown", timeout=30000)
    assert page.locator(".msg.reply .markdown").text_content().strip() == TEXT
    assert page.errors == []
    holder.join(10)
