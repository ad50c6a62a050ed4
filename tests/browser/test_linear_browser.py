"""Issue 23 item 6 in a real browser: finished blocks are appended as Markdown while the reply
streams (the "block" event's out-of-band tail replaces the raw text they came from), through
self-ending streams, and a page opened mid-reply gets the same from its snapshot.
"""

import dataclasses

import pytest

from browser.conftest import LAPTOP, wait_until
from conftest import make_config
from scripted_ollama import Reply

pytestmark = pytest.mark.browser

TEXT = "\n\n".join(f"**p{n:02d}** " + f"w{n:02d}x " * 8 for n in range(30))     # ~30 paragraphs, each unique
SHOWN = "document.querySelector('.msg.reply.streaming .text')?.textContent ?? null"


def plain(text: str) -> str:
    """Text as the eye reads it: no emphasis marks (rendered or still raw), whitespace collapsed."""
    return " ".join(text.replace("**", "").split()).rstrip("*").rstrip()


def test_blocks_render_while_streaming_and_a_late_page_gets_them(tmp_path, scripted, make_live, page_for):
    config = make_config(tmp_path, scripted.url)
    live = make_live(dataclasses.replace(config, server=dataclasses.replace(config.server, stream_lifetime_s=0.4)))
    scripted.script = Reply(text=TEXT, piece_size=6, token_delay=0.02)         # ~4 s: many lifetimes
    page = page_for(LAPTOP)
    page.goto(live.url + "/")
    page.fill("#message", "paragraphs")
    page.press("#message", "Enter")
    wait_until(page, "document.querySelectorAll('.msg.reply.streaming .markdown strong').length >= 3")
    late = page_for(LAPTOP)                                                   # opened mid-reply: a snapshot
    late.goto(page.url)
    wait_until(late, "document.querySelectorAll('.msg.reply.streaming .markdown strong').length >= 3")
    assert plain(TEXT).startswith(plain(late.evaluate(SHOWN)))
    seen, rendered = [], []
    for _ in range(200):                                  # sample the growing reply (bounded: ~10 s at most)
        text = page.evaluate(SHOWN)
        if text is None:
            break
        seen.append(plain(text))
        rendered.append(page.locator(".msg.reply.streaming .markdown p").count())
        page.wait_for_timeout(50)
    assert len(seen) > 5 and max(rendered) > rendered[0] >= 3, rendered   # blocks appended as they finished
    for text in seen:
        assert plain(TEXT).startswith(text), f"shown out of order or twice: ...{text[-60:]}"
    for each in (page, late):
        each.wait_for_selector(".msg.reply:not(.streaming) .markdown")
        assert each.locator(".msg.reply .markdown p").count() == 30
        assert plain(each.locator(".msg.reply .markdown").text_content()) == plain(TEXT)
        assert each.errors == []
