"""Every page at phone and laptop size: no sideways scrolling, tap targets of 44 px."""

import pytest

from browser.conftest import LAPTOP, PHONE, no_horizontal_scroll
from test_session_pages import T0, an_analysis, write_session

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("size", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_no_page_scrolls_sideways(live, page_for, size):
    store = live.services.store
    name = write_session(store, T0, [("question", "answer with `code`", "tiny:1b")], analysis=an_analysis())
    page = page_for(size)
    for path in ["/", f"/s/{name}", f"/files/?session={name}", "/sessions/", f"/sessions/{name}"]:
        page.goto(live.url + path)
        no_horizontal_scroll(page)
        assert page.errors == [], (path, page.errors)


def test_tap_targets_on_the_chat_page_are_at_least_44px(live, page_for):
    page = page_for(PHONE)
    page.goto(live.url + "/")
    small = page.evaluate("""() => [...document.querySelectorAll('button, a.button, select, textarea, summary')]
        .filter(e => e.offsetParent !== null)
        .map(e => [e.id || e.textContent.trim().slice(0, 20), e.getBoundingClientRect().height])
        .filter(([, h]) => h < 44)""")
    assert small == []
