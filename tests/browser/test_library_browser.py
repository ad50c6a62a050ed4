"""The prompt library on the alert card, on a phone: tap an earlier instruction, Start uses it."""

from datetime import datetime, timedelta

import pytest

from browser.conftest import axe_violations, no_horizontal_scroll, shot
from test_analysis import big_file_config, slow_maps
from test_library import analysis_turn

pytestmark = pytest.mark.browser

PAST = [("Quote the definitions.", "notes.md"), ("Find every date. @other:7b", "old.md"),
        ("Name the functions.", "main.py")]


@pytest.fixture
def app(tmp_path, scripted, make_live):
    scripted.script = slow_maps(0.01)
    live = make_live(big_file_config(tmp_path, scripted))
    when = datetime(2026, 7, 1, 9, 0, 0)
    for day, (instruction, file) in enumerate(PAST):
        name = live.services.store.create("tiny:1b", now=when + timedelta(days=day)).name
        live.services.store.append_turn(name, analysis_turn(instruction, file, when + timedelta(days=day)))
    return live, scripted




def test_tapping_an_earlier_instruction_fills_the_box_and_start_uses_it(app, phone):
    live, scripted = app
    page = phone
    page.goto(live.url + "/")
    page.fill("#message", "Summarize the methodology in big.md")
    page.click("#send")
    page.wait_for_selector(".card.alert details.library summary")
    page.locator(".card.alert details.library summary").tap()      # folded: the card's choice stays on screen
    page.wait_for_selector(".card.alert .library button.suggestion")
    buttons = page.locator(".card.alert button.suggestion")
    assert [b.get_attribute("data-text") for b in buttons.all()] == [
        "Find every date. @other:7b", "Quote the definitions.", "Name the functions."]
    for box in (b.bounding_box() for b in buttons.all()):
        assert box["height"] >= 44 and box["width"] >= 44
    no_horizontal_scroll(page)
    shot(page, "prompt-library-phone")
    assert axe_violations(page) == []
    page.emulate_media(color_scheme="dark")
    assert axe_violations(page, ".card.alert") == []
    page.emulate_media(color_scheme="light")
    textarea = page.locator(".card.alert textarea")
    assert textarea.input_value() == "Summarize the methodology in big.md"

    buttons.nth(1).focus()                          # the keyboard: Enter on a suggestion fills the box too
    page.keyboard.press("Enter")
    assert textarea.input_value() == "Quote the definitions."
    assert page.evaluate("document.activeElement.tagName") == "TEXTAREA"

    buttons.nth(0).tap()
    assert textarea.input_value() == "Find every date. @other:7b"
    page.locator(".card.alert button[type=submit]").tap()
    page.wait_for_selector("text=SYNTHESIZED: the methodology is a three-phase experiment.", timeout=60000)
    maps = [c for c in scripted.chats() if "Chunk 1 of" in c.body["messages"][-1]["content"]]
    assert maps and "Find every date." in maps[0].body["messages"][-1]["content"]
    assert "@other" not in maps[0].body["messages"][-1]["content"] and maps[0].body["model"] == "other:7b"
    assert page.errors == []
