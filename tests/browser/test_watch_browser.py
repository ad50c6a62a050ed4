"""Issue 45 in Chromium: two devices on one session (two browser contexts); what one sends, and the reply
streaming to it, shows on the other without a reload, and on neither twice."""

import pytest

from browser.conftest import LAPTOP, PHONE, wait_until
from scripted_ollama import Reply
from waiting import wait_for

pytestmark = pytest.mark.browser


def test_the_other_device_shows_the_new_turn_and_its_reply_without_a_reload(live, scripted, page_for):
    scripted.script = Reply(text="The reply both devices see.", piece_size=3, token_delay=0.03)
    name = live.open_session()
    laptop, phone = page_for(LAPTOP), page_for(PHONE, touch=True)
    laptop.goto(f"{live.url}/s/{name}")
    phone.goto(f"{live.url}/s/{name}")
    wait_until(phone, "document.querySelector('#empty-hint')")
    wait_for(lambda: live.services.streams.watching == 2, 15, what="both pages to watch the session")
    laptop.fill("#message", "Sent from the laptop")
    laptop.click("#send")
    wait_until(phone, "document.querySelector('#turn-0') && "
                      "document.querySelector('#turn-0').textContent.includes('The reply both devices see.')")
    assert phone.locator("#user-text-0").text_content() == "Sent from the laptop"
    assert phone.input_value("#title") == "Sent from the laptop"      # the first message named the session
    wait_until(phone, "document.title.startsWith('Sent from the laptop')")
    assert phone.locator("#empty-hint").count() == 0
    wait_until(laptop, "document.querySelector('#turn-0') && "
                       "document.querySelector('#turn-0').textContent.includes('The reply both devices see.')")
    # the phone answers; the laptop shows it: each page holds each turn once
    phone.fill("#message", "And this from the phone")
    phone.locator("#send").tap()
    wait_until(laptop, "document.querySelector('#turn-1') && "
                       "document.querySelector('#turn-1').textContent.includes('The reply both devices see.')")
    wait_until(phone, "document.querySelector('#turn-1') && "
                      "document.querySelector('#turn-1').textContent.includes('The reply both devices see.')")
    for page in (laptop, phone):
        assert page.locator("#conversation > article.turn").count() == 2
        assert [page.locator(f"#turn-{i}").count() for i in (0, 1)] == [1, 1]
        assert page.errors == []


def test_a_message_sent_again_on_one_device_takes_the_failed_turns_place_on_the_other(live, scripted, page_for):
    """Re-send on the laptop replaces the failed turn in the file; the phone, which shows that failed turn,
    swaps it for the message sent again and its reply, and holds one turn (the watch's copy of the laptop's
    own turn, which has the same key, is skipped there)."""
    from pathlib import Path

    (Path(live.config.workspace) / "licenses.txt").write_text("MIT for the parser, Apache-2.0 for the rest.\n")
    scripted.script = Reply(text="The parser is MIT.", piece_size=3, token_delay=0.03)
    name = live.open_session()
    laptop, phone = page_for(LAPTOP), page_for(PHONE, touch=True)
    laptop.goto(f"{live.url}/s/{name}")
    phone.goto(f"{live.url}/s/{name}")
    wait_for(lambda: live.services.streams.watching == 2, 15, what="both pages to watch the session")
    laptop.fill("#message", "What does licences.txt say?")
    laptop.click("#send")
    for page in (laptop, phone):
        wait_until(page, "document.querySelector('#turn-0 .card.error') && "
                         "document.querySelector('#turn-0').textContent.includes('did you mean')")
    laptop.locator("#turn-0 button", has_text="Send with licenses.txt").click()
    for page in (laptop, phone):
        wait_until(page, "document.querySelector('#turn-0') && "
                         "document.querySelector('#turn-0').textContent.includes('The parser is MIT.') && "
                         "!document.querySelector('#turn-0 .msg.reply.streaming')")
        assert page.locator("#user-text-0").text_content() == "What does licenses.txt say?"
        assert page.locator("#conversation > article.turn").count() == 1
        assert page.locator("#turn-0 .card.error").count() == 0
        assert page.errors == []



class HeldSend:
    """The page's send reaches the server, but its answer waits until ``release``: what a loaded machine
    sometimes does, so the watch brings the page's own turn first (``page.route`` holds the request)."""

    def __init__(self, page, name: str):
        self.page, self.routes, self.answer = page, [], None
        page.route(f"**/s/{name}/messages", lambda route: self.routes.append(route))

    def forward(self):
        """Send the held request on to the server; its answer is kept (returned) and not given to the page."""
        for _ in range(300):                                        # Playwright runs the handler while it waits
            if self.routes:
                break
            self.page.wait_for_timeout(50)
        self.answer = self.routes[0].fetch()
        return self.answer

    def release(self):
        """Give the page the answer, and wait until htmx has dealt with it."""
        self.page.evaluate("document.addEventListener('htmx:afterRequest', () => { window.answered = true; })")
        self.routes[0].fulfill(response=self.answer)
        wait_until(self.page, "window.answered === true")

def test_the_pages_own_answer_keeps_what_was_done_on_the_watchs_copy_of_its_turn(tmp_path, scripted, make_live,
                                                                                 page_for):
    """The watch can bring a page's own turn before the page's request returns (a CI run under load caught
    it): a reader who has already opened the card's details or edited its instruction keeps that when the
    request's answer arrives, whose turn is the same (same key), and a next message typed meanwhile stays in
    the box."""
    from test_analysis import big_file_config, slow_maps

    scripted.script = slow_maps(0.01)
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    phone = page_for(PHONE, touch=True)
    held = HeldSend(phone, name)
    phone.goto(f"{live.url}/s/{name}")
    wait_for(lambda: live.services.streams.watching == 1, 15, what="the page to watch the session")
    phone.fill("#message", "Summarize the methodology in big.md")
    phone.locator("#send").tap()
    held.forward()                                                  # the server has it; the page not yet
    phone.wait_for_selector("#turn-0 .card.alert textarea")        # the watch's copy
    assert phone.locator("#message").input_value() == "Summarize the methodology in big.md"
    phone.locator("#turn-0 .card.alert details.more summary").tap()
    phone.locator("#turn-0 .card.alert textarea").fill("Name every phase of the method.")
    phone.fill("#message", "And the next question")                 # typed before the send's answer is in
    held.release()
    assert phone.locator("#message").input_value() == "And the next question"
    assert phone.locator("#conversation > article.turn").count() == 1
    assert phone.locator("#turn-0 .card.alert details.more").get_attribute("open") is not None
    assert phone.locator("#turn-0 .card.alert textarea").input_value() == "Name every phase of the method."
    assert phone.errors == []


def test_a_reply_that_ended_before_the_pages_own_answer_came_in_leaves_send_ready(live, scripted, page_for):
    """The watch brought the page's own turn, its reply streamed and ended, and only then did the send's
    answer come in (a CI-like load does that): that answer, rendered while the reply was starting, must not
    put back its "Reply streaming…" button or its streaming turn; Send is ready for the next message."""
    scripted.script = Reply(text="Short and done.", piece_size=3, token_delay=0.01)
    name = live.open_session()
    laptop = page_for(LAPTOP)
    held = HeldSend(laptop, name)
    laptop.goto(f"{live.url}/s/{name}")
    wait_for(lambda: live.services.streams.watching == 1, 15, what="the page to watch the session")
    laptop.fill("#message", "A quick one")
    laptop.click("#send")
    assert "Reply streaming" in held.forward().text()               # rendered while the reply starts
    wait_until(laptop, "document.querySelector('#turn-0') && "
                       "document.querySelector('#turn-0').textContent.includes('Short and done.') && "
                       "!document.querySelector('#turn-0 .msg.reply.streaming')")
    wait_until(laptop, "!document.getElementById('send').disabled")
    held.release()
    assert laptop.locator("#send").is_enabled() and laptop.locator("#send").text_content().strip() == "Send"
    assert laptop.locator("#turn-0 .msg.reply.streaming").count() == 0
    assert laptop.input_value("#title") == "A quick one"             # the watch's turn brought the new name
    assert laptop.locator("#conversation > article.turn").count() == 1
    assert laptop.errors == []
