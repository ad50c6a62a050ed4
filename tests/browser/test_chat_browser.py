"""Flow 1: chat in a real browser: send, watch the reply grow, Markdown, stop."""

import pytest

from browser.conftest import LAPTOP, PHONE, axe_violations, no_horizontal_scroll, shot, wait_until
from scripted_ollama import Reply

pytestmark = pytest.mark.browser


def test_send_watch_it_grow_and_see_markdown(live, scripted, page_for):
    scripted.script = Reply(text="Here is **bold** and a list:\n\n- one\n- two\n\n```python\nprint('hi')\n```",
                            piece_size=3, token_delay=0.04)
    page = page_for(PHONE)
    page.goto(live.url + "/")
    page.fill("#message", "Show me Markdown")
    page.press("#message", "Enter")
    page.wait_for_selector(".msg.user >> text=Show me Markdown")
    streaming = page.locator(".msg.reply.streaming .text")
    streaming.wait_for()
    wait_until(page, "document.querySelector('.msg.reply.streaming .text')?.textContent.length > 5")
    partial = streaming.text_content()
    assert page.locator("#send").is_disabled()
    page.wait_for_selector(".msg.reply:not(.streaming) .markdown strong")   # Markdown also shows while streaming
    assert len(partial) < len(scripted.script.text)
    assert page.locator(".markdown strong").text_content() == "bold"
    assert page.locator(".markdown li").count() == 2 and page.locator(".markdown pre code").count() == 1
    assert not page.locator("#send").is_disabled()
    assert page.input_value("#message") == ""
    no_horizontal_scroll(page)
    shot(page, "chat-phone")
    assert axe_violations(page) == []
    assert page.errors == []


def test_shift_enter_adds_a_line_and_stop_keeps_what_arrived(live, scripted, page_for):
    scripted.script = Reply(text="slow " * 300, piece_size=5, token_delay=0.05)
    page = page_for(LAPTOP)
    page.goto(live.url + "/")
    page.click("#message")
    page.keyboard.type("line one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("line two")
    assert page.input_value("#message") == "line one\nline two"
    page.keyboard.press("Enter")
    wait_until(page, "document.querySelector('.msg.reply.streaming .text')?.textContent.length > 20")
    page.click("button.stop")
    page.wait_for_selector("text=Stopped: the reply above is what arrived.")
    kept = page.locator(".msg.reply .markdown").text_content()
    assert kept.startswith("slow slow") and len(kept) < len(scripted.script.text)
    no_horizontal_scroll(page)
    assert page.errors == []
