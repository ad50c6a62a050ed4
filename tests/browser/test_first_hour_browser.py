"""Issue 33 in a real browser, at a 360 px phone and a desktop: a long file name fits every page,
a missing file gets its card, the picker and the progress card fit (headless Chromium)."""

from pathlib import Path

import pytest

from browser.conftest import LAPTOP, PHONE, no_horizontal_scroll, wait_until
from conftest import make_config

pytestmark = pytest.mark.browser

SIZES = [PHONE, LAPTOP]
SIZE_IDS = ["phone-360", "desktop-1280"]
LONG = ("quarterly-report-of-the-raspberry-pi-fan-noise-measurements-" * 4)[:223] + ".md"


def send(page, text):
    page.fill("#message", text)
    page.click("#send")


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_a_226_character_file_name_fits_every_page(tmp_path, scripted, make_live, page_for, size):
    assert len(LONG) == 226
    config = make_config(tmp_path, scripted.url)
    Path(config.workspace).mkdir(parents=True)
    (Path(config.workspace) / LONG).write_text("# Fan\n\nThe fan is loud at night.\n")
    live = make_live(config)
    page = page_for(size)
    page.goto(live.url + "/")
    # Attach the same long name: it keeps its extension and a readable length
    page.fill("#message", "Summarize")
    page.set_input_files("#attach-file", files=[{"name": "copy of " + LONG, "mimeType": "text/markdown",
                                                  "buffer": b"# Copy\n\nquiet\n"}])
    page.wait_for_selector("#attach-status >> text=Attached")
    stored = [p.name for p in Path(config.workspace).iterdir() if p.name != LONG]
    assert len(stored) == 1 and stored[0].endswith(".md") and len(stored[0]) <= 80
    assert stored[0] in page.input_value("#message")
    no_horizontal_scroll(page)
    page.click("#send")
    page.wait_for_selector(f"article.turn .chips >> text={stored[0]}")
    page.wait_for_selector(".msg.reply:not(.streaming)")
    send(page, f"And {LONG}?")                     # the long name in a message, a chip and a reply
    wait_until(page, "document.querySelectorAll('article.turn .chips .chip').length === 2")
    page.wait_for_selector("article.turn:nth-of-type(2) .msg.reply:not(.streaming)")
    no_horizontal_scroll(page)
    send(page, f"And not-{LONG}?")                  # the missing-file card with the long name
    page.wait_for_selector(".card.error")
    no_horizontal_scroll(page)
    name = page.url.rsplit("/", 1)[-1]
    for path in (f"/files/?session={name}", "/sessions/", f"/sessions/{name}"):
        page.goto(live.url + path)
        assert LONG[:40] in page.content(), path
        no_horizontal_scroll(page)
    assert page.errors == []


def _in_viewport(page, selector) -> bool:
    box = page.locator(selector).first.bounding_box()
    size = page.viewport_size
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= size["height"] \
        and box["x"] >= 0 and box["x"] + box["width"] <= size["width"]


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_the_model_picker_shows_the_whole_name(tmp_path, make_live, page_for, size):
    from scripted_ollama import ScriptedOllama

    with ScriptedOllama(models={"smollm2:135m": 8192, "all-minilm": 512}) as server:
        server.capabilities = {"all-minilm": ["embedding"]}
        live = make_live(make_config(tmp_path, server.url, model="smollm2:135m"))
        page = page_for(size)
        page.goto(live.url + "/")
        assert page.locator("#model option").all_text_contents() == ["smollm2:135m"]   # chat models only
        room = page.evaluate("""() => {
            const s = document.getElementById('model'), c = document.createElement('canvas').getContext('2d');
            const st = getComputedStyle(s); c.font = st.fontSize + ' ' + st.fontFamily;
            return s.clientWidth - c.measureText(s.options[s.selectedIndex].text).width; }""")
        assert room >= 20, f"the picker is {room:.0f}px short of its model's name (its arrow needs about 20)"
        no_horizontal_scroll(page)
        live.close()


def _sixty_then_wait(release):
    """Map calls answer at once until chunk 61, which waits for ``release`` (bounded)."""
    from test_analysis import map_or_reduce

    def script(body):
        import re

        found = re.search(r"Chunk (\d+) of (\d+)", body["messages"][-1]["content"])
        if found and int(found.group(1)) > 60:
            release.wait(60)
        return map_or_reduce(body)
    return script


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_a_long_analysis_keeps_its_bar_clock_and_message_box_on_screen(tmp_path, scripted, make_live, page_for,
                                                                          size):
    import threading

    from test_analysis import big_file_config, big_markdown

    release = threading.Event()
    scripted.script = _sixty_then_wait(release)
    config = big_file_config(tmp_path, scripted, chunk_size_tokens=300, max_chunks=200)
    (Path(config.workspace) / "big.md").write_text(big_markdown(sections=16))
    live = make_live(config)
    page = page_for(size)
    page.goto(live.url + "/")
    box_width = page.locator("#message").bounding_box()["width"]
    try:
        send(page, "Summarize the methodology in big.md")
        page.locator(".card.alert button[type=submit]").click()
        page.wait_for_selector(".progress-card")
        wait_until(page, "document.querySelectorAll('.progress-card .partials details').length >= 60", timeout=120)
        total = int(page.locator(".progress-card progress").get_attribute("max"))
        assert total > 60
        assert page.locator("#send").text_content() == "Analysis running…"
        assert abs(page.locator("#message").bounding_box()["width"] - box_width) <= 1   # the box keeps its width
        page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")    # where a following page is
        page.locator(".progress-card .partials details").last.scroll_into_view_if_needed()
        assert _in_viewport(page, ".progress-card progress"), "the progress bar is off screen"
        assert _in_viewport(page, ".progress-card .job-clock"), "the clock is off screen"
        no_horizontal_scroll(page)
    finally:
        release.set()
    assert page.errors == []


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_an_empty_message_is_said_and_a_send_leaves_no_console_error(live, page_for, size):
    page = page_for(size)
    page.goto(live.url + "/")
    page.fill("#message", "   \n  ")
    page.click("#send")
    note = page.locator("#composer-note")
    note.wait_for(state="visible")
    assert "The message is empty" in note.text_content()
    assert page.locator("article.turn").count() == 0
    no_horizontal_scroll(page)
    send(page, "hello")
    page.wait_for_selector("article.turn .msg.reply:not(.streaming)")
    assert not note.is_visible()
    assert page.errors == []          # a CSP refusal (an inline style) is a console error too
