"""Issue 45: the Files page's rows past the first 30 load their token figure as they scroll into view
(headless Chromium, a 360 px phone)."""
from pathlib import Path

import pytest

from browser.conftest import PHONE, wait_until
from conftest import make_config

pytestmark = pytest.mark.browser


def test_a_row_far_down_the_files_page_gets_its_figure_when_scrolled_to(tmp_path, scripted, make_live, page_for):
    config = make_config(tmp_path, scripted.url)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    for i in range(40):
        (workspace / f"note-{i:02d}.md").write_text(f"# Note {i}\n\n" + "The fan is loud at night. " * (i + 1))
    live = make_live(config)
    name = live.open_session()
    page = page_for(PHONE)
    page.goto(f"{live.url}/files/?session={name}")
    last = page.locator("#files li").last
    assert last.locator("a.tokens").count() == 1                    # not figured with the page
    last.scroll_into_view_if_needed()
    wait_until(page, "document.querySelector('#files li:last-child span.tokens') !== null")
    shown = last.locator(".tokens").inner_text()
    want = live.get(f"/files/tokens?session={name}&name=note-39.md").text
    assert shown.startswith("about ") and shown in want
    assert page.errors == []
