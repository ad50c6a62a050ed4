"""Issue 45: on a 390 px phone the alert card was three screens tall and its primary choice on the second;
its first screen now holds the facts and the primary button, the rest one tap or a scroll away."""
from pathlib import Path

import pytest

from browser.conftest import PHONE_390, axe_violations, no_horizontal_scroll
from conftest import make_config
from test_analysis import big_markdown

pytestmark = pytest.mark.browser


def test_the_cards_first_screen_holds_its_facts_and_its_primary_choice(tmp_path, scripted, make_live, page_for):
    config = make_config(tmp_path, scripted.url)
    Path(config.workspace).mkdir(parents=True)
    (Path(config.workspace) / "big.md").write_text(big_markdown())
    live = make_live(config)
    page = page_for(PHONE_390, touch=True)
    page.goto(live.url + "/")
    page.fill("#message", "Summarize big.md")
    page.click("#send")
    page.wait_for_selector(".card.alert .button.primary")
    page.locator(".card.alert h2").scroll_into_view_if_needed()
    page.evaluate("document.querySelector('.card.alert').scrollIntoView({block: 'start'})")
    room = page.evaluate("innerHeight - document.querySelector('.dock').getBoundingClientRect().height")
    top = page.evaluate("document.querySelector('.card.alert').getBoundingClientRect().top")
    for selector in (".card.alert dl.facts", ".card.alert .button.primary"):
        bottom = page.evaluate(f"document.querySelector('{selector}').getBoundingClientRect().bottom")
        assert bottom - top <= room, (selector, bottom - top, room)
    text = " ".join(page.locator(".card.alert").inner_text().split())
    assert 'or "no" to return' not in text and "byte-level BPE" not in text          # plain words
    page.locator(".card.alert details.more summary").tap()                           # the details: one tap
    assert page.locator(".card.alert details.more").evaluate("d => d.open")
    no_horizontal_scroll(page)
    assert axe_violations(page, ".card.alert") == []
    assert page.errors == []


def test_the_dock_leaves_a_phone_the_conversation_in_edit_mode_too(tmp_path, scripted, make_live, page_for):
    """Issue 45: on a 390 px phone the dock (the demo model's status line on four lines, the picker, Send,
    the box) took 237 of 844 px, about 340 in Edit mode."""
    scripted.show_details = {"harvey_demo": True}
    live = make_live(make_config(tmp_path, scripted.url))
    page = page_for(PHONE_390, touch=True)
    page.goto(live.url + "/")
    page.fill("#message", "hello")
    page.click("#send")
    page.wait_for_selector(".msg.reply:not(.streaming)")
    height = "Math.round(document.querySelector('.dock').getBoundingClientRect().height)"
    summary = page.locator("#status summary").bounding_box()
    assert summary["height"] <= 48, summary                        # the status line on one line
    assert page.evaluate(height) <= 180, page.evaluate(height)
    page.locator(".edit-last").last.tap()
    page.wait_for_selector("#editing:not([hidden])")
    assert page.evaluate(height) <= 235, page.evaluate(height)
    page.locator("#edit-cancel").tap()
    page.locator("#status summary").tap()                          # the demo note's link: one tap away
    link = page.locator("#status .demo-note a").last
    assert link.is_visible() and "install Ollama" in link.inner_text()
    no_horizontal_scroll(page)
    assert page.errors == []
