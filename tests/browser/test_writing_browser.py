"""Issue 44 in Chromium at phone size: a synthesis shows its text on the card while the model writes it,
before the answer is done (htmx swaps each ``writing`` event into the card)."""

import json

import pytest

from browser.conftest import no_horizontal_scroll, wait_until
from scripted_ollama import Reply, prose
from test_analysis import big_file_config

pytestmark = pytest.mark.browser

OPENING = "The methodology has three phases."
CLOSING = "That is the whole methodology."


def script(body):
    if body["messages"][0]["content"].startswith("You combine"):   # the synthesis: about 6 s of writing
        return Reply(text=OPENING + " " + prose(300) + " " + CLOSING, piece_size=10, token_delay=0.03)
    return Reply(text=json.dumps({"relevant": True, "points": [{"point": "three phases", "quote": ""}],
                                  "confidence": 4}))


def test_the_synthesis_is_shown_while_it_is_written(tmp_path, scripted, make_live, phone):
    scripted.script = script
    live = make_live(big_file_config(tmp_path, scripted, max_chunks=3))
    page = phone
    page.goto(live.url + "/")
    page.fill("#message", "Summarize the methodology in big.md")
    page.locator("#send").click()
    card = page.locator(".card.alert")
    card.locator("textarea").wait_for()
    card.locator("button[type=submit]").click()
    # the opening words on the card while the synthesis is still being written (its end not yet there)
    wait_until(page, f"(() => {{ const w = document.querySelector('.progress-card .writing');"
                     f" return w && w.textContent.includes({OPENING!r}) && !w.textContent.includes({CLOSING!r}); }})()",
               timeout=60)
    no_horizontal_scroll(page)
    page.wait_for_selector(f"text={CLOSING}", timeout=60000)           # then the answer, in the chat
    wait_until(page, "document.querySelector('.progress-card') === null", timeout=60)   # the card gives way
    assert page.errors == []
