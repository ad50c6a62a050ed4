"""Flow 5: sessions in a real browser: list, read with the analysis block, download, import; 360 px."""

from datetime import timedelta
from pathlib import Path

import pytest

from browser.conftest import PHONE, axe_violations, no_horizontal_scroll, shot
from test_session_pages import T0, an_analysis, write_session

pytestmark = pytest.mark.browser
HARVEY_FILE = Path(__file__).resolve().parent.parent / "data" / "spmd" / "harvey_exact.spmd"


def test_list_read_download_and_import(live, page_for, tmp_path):
    store = live.services.store
    name = write_session(store, T0, [("What is in report.md?", "It has **three** parts.", "tiny:1b")],
                         title="Report review", analysis=an_analysis())
    page = page_for(PHONE)
    page.goto(live.url + "/sessions/")
    page.click("text=Report review")
    page.wait_for_selector("details.chunk-analysis")
    block = page.locator("details.chunk-analysis")
    block.locator("summary").click()
    assert "report.md" in block.text_content() and "timeout" in block.text_content()
    assert page.locator(".dialogue strong").first.text_content() == "three"
    no_horizontal_scroll(page)
    shot(page, "session-phone")
    assert axe_violations(page) == []
    with page.expect_download() as info:
        page.click("text=Download")
    saved = tmp_path / "download.spmd"
    info.value.save_as(saved)
    assert info.value.suggested_filename == f"{name}.spmd"
    assert saved.read_bytes() == (store.folder / f"{name}.spmd").read_bytes()
    page.goto(live.url + "/sessions/")
    page.set_input_files("input[type=file]", str(HARVEY_FILE))
    page.click("button:has-text('Import')")
    page.wait_for_selector("text=Imported. Read it here")
    assert page.locator("text=Continue in chat").count() == 1
    assert len(store.names()) == 2
    assert page.errors == []


def test_pages_fit_a_360px_screen_with_long_content(live, page_for):
    store = live.services.store
    long_reply = ("A" * 300 + "\n\n```\n" + "long_code_line = " + "x" * 300 + "\n```\n\n"
                  "| a | b | c | d | e | f | g | h |\n|---|---|---|---|---|---|---|---|\n"
                  + "| " + " | ".join(["wide cell content"] * 8) + " |\n\nhttps://example.org/" + "p" * 200)
    name = write_session(store, T0, [("B" * 300, long_reply, "tiny:1b")], title="T" * 200, analysis=an_analysis(
        file="a-very-long-file-name-" + "z" * 150 + ".md"))
    store.delete(write_session(store, T0 + timedelta(days=1), [("q", "a", "tiny:1b")], title="W" * 150))
    page = page_for(PHONE)
    for path in ["/sessions/", f"/sessions/{name}", f"/s/{name}"]:
        page.goto(live.url + path)
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        no_horizontal_scroll(page)
    for path, selector in [("/sessions/", ".session-item .preview"), (f"/s/{name}", ".recent .preview")]:
        page.goto(live.url + path)                      # #16: the one-line preview stays one line
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        preview = page.locator(selector).first
        box, line = preview.bounding_box(), preview.evaluate(
            "e => { const s = getComputedStyle(e), h = parseFloat(s.lineHeight);"
            " return isNaN(h) ? 1.3 * parseFloat(s.fontSize) : h; }")
        assert preview.text_content().startswith("A" * 20) and box["x"] + box["width"] <= PHONE["width"]
        assert box["height"] < 1.6 * line
    page.goto(live.url + f"/sessions/{name}")
    code = page.evaluate("(() => { const p = document.querySelector('.dialogue pre');"
                         " return [p.scrollWidth, p.clientWidth]; })()")
    assert code[0] > code[1]                                       # the code block scrolls inside itself
