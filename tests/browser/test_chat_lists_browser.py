"""Issue 45 in Chromium: a list question on a file that fits, asked in the chat, is answered with the app's
list in one model call, and "Answer in chat instead" gives the plain chat answer in one tap (360 px phone,
1280 px laptop)."""

from pathlib import Path

import pytest

from browser.conftest import LAPTOP, PHONE, axe_violations, no_horizontal_scroll, wait_until
from test_chat_lists import COLORSYS, DEFS, lister

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("size", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_the_list_and_its_undo_in_one_tap(live, scripted, page_for, size):
    scripted.script = lister
    Path(live.config.workspace_path, "colorsys.py").write_text(COLORSYS)
    page = page_for(size, touch=size is PHONE)
    page.goto(f"{live.url}/")
    page.fill("#message", "List every function defined in colorsys.py")
    page.locator("#send").tap() if size is PHONE else page.click("#send")
    wait_until(page, "document.querySelector('#reply-0') && document.querySelector('#computed-0')")
    reply = page.locator("#reply-0").text_content()
    assert all(name in reply for name in DEFS), reply
    assert f"Counted by the app: {len(DEFS)} functions in the whole file" in page.locator("#computed-0").text_content()
    assert "Read as a list question: one model call listed the functions in colorsys.py" in \
        page.locator("#turn-0").text_content()
    assert len(scripted.chats()) == 1
    no_horizontal_scroll(page)
    assert axe_violations(page) == []
    undo = page.locator("#computed-0 button.in-chat")
    assert undo.text_content().strip() == "Not a list question? Answer in chat instead"
    box = undo.bounding_box()
    assert box["height"] >= 24                                   # a tap target
    undo.tap() if size is PHONE else undo.click()
    wait_until(page, "document.querySelector('#reply-1') && "
                     "document.querySelector('#reply-1').textContent.includes('A plain chat answer')")
    assert [c.format for c in scripted.chats()][1:] == [None]
    assert page.errors == []
