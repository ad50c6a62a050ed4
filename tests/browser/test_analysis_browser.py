"""Flows 2-4: chunked analysis in a real browser."""

import re

import pytest

from browser.conftest import LAPTOP, PHONE, axe_violations, no_horizontal_scroll, shot, wait_until
from test_analysis import big_file_config, slow_maps

pytestmark = pytest.mark.browser


@pytest.fixture
def app_with_big_file(tmp_path, scripted, make_live):
    scripted.script = slow_maps(0.03)
    return make_live(big_file_config(tmp_path, scripted)), scripted


def ask_about_big_file(page, live):
    page.goto(live.url + "/")
    page.fill("#message", "Summarize the methodology in big.md")
    page.press("#message", "Enter")
    page.wait_for_selector(".card.alert textarea")


def start_and_wait_for_two_partials(page, live):
    """Ask, Start the card as it is, and wait until two chunks have their partial answers."""
    ask_about_big_file(page, live)
    page.locator(".card.alert button[type=submit]").click()
    page.wait_for_selector(".progress-card")
    wait_until(page, "document.querySelectorAll('.progress-card details.partial').length >= 2")


def test_alert_card_edit_start_progress_and_answer(app_with_big_file, page_for):
    live, scripted = app_with_big_file
    page = page_for(PHONE)
    ask_about_big_file(page, live)
    card = page.locator(".card.alert")
    assert "big.md" in card.text_content() and "tokens" in card.text_content()
    textarea = card.locator("textarea")
    assert textarea.input_value() == "Summarize the methodology in big.md"
    no_horizontal_scroll(page)
    shot(page, "alert-card-phone")
    assert axe_violations(page) == []
    textarea.fill("Extract only the methodology of each section.")
    card.locator("button[type=submit]").click()
    page.wait_for_selector(".progress-card")
    wait_until(page, "/Processing chunk [2-9]/.test(document.querySelector('.progress-card .stage')?.textContent)")
    first = page.locator(".progress-card .stage").text_content()
    wait_until(page, "document.querySelectorAll('.progress-card details.partial').length >= 3")
    assert re.search(r"Processing chunk \d+/\d+", first) or "Processed" in first
    shot(page, "progress-card-phone")
    assert axe_violations(page) == []
    no_horizontal_scroll(page)
    page.wait_for_selector("text=SYNTHESIZED: the methodology is a three-phase experiment.", timeout=60000)
    # (the synthesis streams its text on the progress card first, issue 44: the card then gives way to the answer)
    wait_until(page, "document.querySelector('.progress-card') === null", timeout=60)
    assert page.locator(".analysis-summary").count() == 1
    maps = [c for c in scripted.chats() if "Extract only the methodology" in c.body["messages"][-1]["content"]]
    assert maps and all("Summarize the methodology in big.md" not in c.body["messages"][-1]["content"] for c in maps)
    assert page.errors == []


def test_answering_no_returns_to_the_conversation(app_with_big_file, page_for):
    live, scripted = app_with_big_file
    page = page_for(LAPTOP)
    ask_about_big_file(page, live)
    page.locator(".card.alert textarea").fill("no")
    page.locator(".card.alert button[type=submit]").click()
    page.wait_for_selector("text=Chunk analysis declined: nothing was sent to the model.")
    assert page.locator(".card.alert").count() == 0
    assert scripted.chats() == []
    assert page.errors == []


def test_cancel_then_reload_during_a_run(app_with_big_file, page_for):
    live, scripted = app_with_big_file
    page = page_for(PHONE)
    start_and_wait_for_two_partials(page, live)
    page.reload()                                    # the job goes on; the page shows it again
    page.wait_for_selector(".progress-card")
    before = page.locator(".progress-card details.partial").count()
    assert before >= 2
    wait_until(page, f"document.querySelectorAll('.progress-card details.partial').length > {before}")
    page.click("text=Cancel analysis")
    page.wait_for_selector("text=Synthesize the partial answers")
    page.click("text=Drop them")
    wait_until(page, "!document.querySelector('.card.alert')")
    assert page.errors == []


def test_ollama_lost_mid_run_the_card_offers_retry_and_discard_and_resume_finishes(app_with_big_file, page_for):
    live, scripted = app_with_big_file
    page = page_for(PHONE)
    start_and_wait_for_two_partials(page, live)
    scripted.kill()                                  # Ollama goes away: the card turns into Retry, by itself
    page.wait_for_selector("text=was interrupted", timeout=30000)
    assert page.locator("text=Discard this analysis").count() == 1
    assert axe_violations(page) == []
    no_horizontal_scroll(page)
    scripted.revive()
    page.click("text=/Resume from chunk \\d+/")
    page.wait_for_selector(".progress-card")
    page.wait_for_selector("text=SYNTHESIZED: the methodology is a three-phase experiment.", timeout=60000)
    wait_until(page, "document.querySelector('.card.alert') === null", timeout=60)   # (streamed on the card first)
    assert page.errors == []
