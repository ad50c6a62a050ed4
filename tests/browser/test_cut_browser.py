"""Issue 35 in a real browser: a reply cut at its cap says so, and Continue streams the rest into the
same reply (the turn stays one turn, the note and the button go)."""

import dataclasses

import pytest

from app.chat.prepare import CONTINUE_PROMPT
from app.config import ChatConfig
from browser.test_phone_browser import PHONE, assert_axe_clean, open_page, send, shot  # noqa: F401 (fixture)
from conftest import make_config
from scripted_ollama import Reply

pytestmark = pytest.mark.browser


def test_a_cut_reply_says_so_and_continue_appends_the_rest(tmp_path, scripted, make_live, open_page):
    scripted.honor_num_predict = True
    scripted.script = lambda body: Reply(
        text=" and that is the whole story." if body["messages"][-1]["content"] == CONTINUE_PROMPT
        else "word " * 40)
    live = make_live(dataclasses.replace(make_config(tmp_path, scripted.url), chat=ChatConfig(reply_tokens=16)))
    page = open_page(PHONE, "light")
    page.goto(live.url + "/")
    page.click("#status summary")         # on a phone the cap is in the status details (issue 45: a one-line dock)
    assert "reply cap (chat.reply_tokens) 16" in " ".join(page.inner_text("#status").split())
    page.click("#status summary")
    send(page, "tell me everything")
    page.wait_for_selector("text=Cut at 16 tokens")
    assert_axe_clean(page, "a cut reply")
    shot(page, "issue35-cut-reply")
    page.click("button.continue")
    page.wait_for_selector("text=that is the whole story")
    assert page.locator("button.continue").count() == 0 and page.locator("text=Cut at").count() == 0
    assert page.locator("article.turn").count() == 1
    assert page.locator("article.turn .msg.reply .text").inner_text().startswith("word word")
    assert page.errors == []
