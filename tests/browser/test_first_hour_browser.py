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
