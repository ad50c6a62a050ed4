"""Citations open their passage on a phone (issue #15), in Debian's Chromium at 390×844."""

import pytest

from browser.conftest import PHONE_390, axe_violations, no_horizontal_scroll, shot, wait_until
from cited import cited_session

pytestmark = pytest.mark.browser

MARKED = ["vault code is 4471", "it opens\nthe north door"]




def open_passage(page, link):
    link.tap()
    wait_until(page, "document.getElementById('passage').open && document.querySelector('#passage mark')")


def test_tap_a_citation_see_the_passage_marked_then_close_it(live, phone):
    s = cited_session(live)
    page = phone
    page.goto(f"{live.url}/s/{s['name']}")                 # the session as stored, as after a reload
    link = page.locator(f"#reply-{s['turn']} a.cite").first
    assert link.text_content() == str(s["keys"])
    copied = page.evaluate(f"document.getElementById('reply-{s['turn']}').innerText")    # what Copy reply takes
    assert f"4471 [{s['keys']}]. Forty" in copied and f"[{s['keys']}, {s['staff']}]" in copied
    open_passage(page, link)
    dialog = page.locator("#passage")
    assert dialog.locator("mark").all_text_contents() == MARKED
    assert "notes.md" in dialog.locator("h2").text_content() and "Keys" in dialog.text_content()
    box = dialog.bounding_box()
    assert box["x"] >= 0 and box["y"] >= 0
    assert box["x"] + box["width"] <= PHONE_390["width"] and box["y"] + box["height"] <= PHONE_390["height"]
    assert page.evaluate("document.activeElement.closest('#passage') !== null")     # focus moved into it
    no_horizontal_scroll(page)
    shot(page, "passage-phone")
    assert axe_violations(page) == []
    page.keyboard.press("Escape")
    wait_until(page, "!document.getElementById('passage').open")
    assert page.evaluate("document.activeElement.classList.contains('cite')")      # back where it was opened

    other = page.locator(f"#reply-{s['turn']} a.cite").nth(2)                       # [keys, staff]: staff
    open_passage(page, other)
    assert dialog.locator("mark").all_text_contents() == ["Forty people"]
    dialog.get_by_role("button", name="Close the passage").tap()
    wait_until(page, "!document.getElementById('passage').open")
    assert page.evaluate("document.activeElement.classList.contains('cite')")
    assert page.errors == []


def test_the_session_page_opens_the_passage_too(live, phone):
    s = cited_session(live)
    page = phone
    page.goto(f"{live.url}/sessions/{s['name']}")
    open_passage(page, page.locator(".screenplay a.cite").first)
    assert page.locator("#passage mark").all_text_contents() == MARKED
    assert axe_violations(page) == []
    assert page.errors == []


def test_without_javascript_the_citation_opens_the_passage_as_a_page(live, browser):
    s = cited_session(live)
    context = browser.new_context(viewport=PHONE_390, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{live.url}/s/{s['name']}")
        page.locator(f"#reply-{s['turn']} a.cite").first.click()
        page.wait_for_url(f"**/passages/{s['keys']}")
        assert page.locator("mark").all_text_contents() == MARKED
        no_horizontal_scroll(page)
    finally:
        context.close()


def test_a_long_passage_scrolls_inside_the_dialog_with_close_in_reach(live, phone):
    from app import chunking
    from app.sessions import fountain
    from cited import SETTINGS, analysis_of, record_cited_turn, write_notes

    path = write_notes(live.config.workspace_path)
    doc = chunking.read_document(path, SETTINGS)
    whole = fountain.CitedPassage(1, 0, len(doc.text), (1, doc.text.count("\n") + 1), None, "", ["canteen closes"])
    name = live.open_session()
    turn = record_cited_turn(live.services.store, name, analysis_of(doc, "notes.md", [whole]), "All of it [1].")
    page = phone
    page.goto(f"{live.url}/s/{name}")
    open_passage(page, page.locator(f"#reply-{turn} a.cite"))
    box = page.locator("#passage").bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE_390["height"]
    assert page.evaluate("(b => b.scrollHeight > b.clientHeight)(document.querySelector('.passage-box'))")
    page.locator("#passage mark").scroll_into_view_if_needed()
    assert page.evaluate("document.querySelector('.passage-box').scrollTop > 0")
    close = page.get_by_role("button", name="Close the passage").bounding_box()
    assert close["y"] >= box["y"] and close["y"] + close["height"] <= box["y"] + box["height"]   # still in view
    assert axe_violations(page) == []
    page.get_by_role("button", name="Close the passage").tap()
    wait_until(page, "!document.getElementById('passage').open")


def test_a_code_passage_keeps_its_indents_in_a_fixed_font_and_a_citation_is_a_24_px_target(live, phone):
    """Issue 45: a passage of a code file was set in a proportional font with its indents run together, and a
    citation mark was about 10 px wide on a phone: too small to tap (WCAG 2.5.8 asks 24 px)."""
    import hashlib
    from pathlib import Path

    from app.sessions import fountain
    from test_session_pages import T0, write_session

    workspace = Path(live.config.workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    code = "def area(r):\n    if r < 0:\n        raise ValueError(r)\n    return 3.14159 * r * r\n"
    (workspace / "shapes.py").write_text(code)
    source = "sha256:" + hashlib.sha256(code.encode()).hexdigest()[:16]
    analysis = fountain.ChunkAnalysis("shapes.py", 1, "tiny:1b", "block", 1500, "What does area do?", T0, ["ok"],
                                      "ok", source=source)
    analysis.passages[1] = fountain.CitedPassage(1, 0, len(code), (1, 4), quotes=["raise ValueError(r)"])
    name = write_session(live.services.store, T0, [("What does area do?", "It squares r [1].", "tiny:1b")],
                         analysis=analysis)
    page = phone
    page.goto(f"{live.url}/s/{name}")
    link = page.locator("a.cite").first
    box = link.bounding_box()
    assert box["width"] >= 24 and box["height"] >= 24, box
    open_passage(page, link)
    text = page.locator("#passage .passage-text")
    style = text.evaluate("q => [getComputedStyle(q).fontFamily, getComputedStyle(q).whiteSpace]")
    assert "mono" in style[0].lower() and style[1] == "pre-wrap", style
    assert "    if r < 0:\n        raise" in text.inner_text()           # the indents, as written
    no_horizontal_scroll(page)
    assert page.errors == []
