"""Headless Chromium (Debian's) driven by Playwright against the app under waitress."""

import os
import shutil
from pathlib import Path

import pytest

from conftest import require

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
AXE = Path(__file__).resolve().parent.parent / "vendor" / "axe-core-4.14.1.min.js"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PHONE = {"width": 360, "height": 800}
LAPTOP = {"width": 1280, "height": 800}
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.fixture(scope="session")
def browser():
    require(Path(CHROMIUM).exists(), "Debian's chromium is not installed (apt-get install chromium)")
    playwright_api = pytest.importorskip("playwright.sync_api") if not os.environ.get("CI") else None
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield browser
        browser.close()
    del playwright_api


@pytest.fixture
def page_for(browser):
    """Open a page at a viewport size; all are closed at the end of the test."""
    contexts = []

    def open_page(size=PHONE, touch=False):
        extra = {"has_touch": True, "is_mobile": True} if touch else {}
        context = browser.new_context(viewport=size, accept_downloads=True, **extra)
        context.set_default_timeout(15000)
        contexts.append(context)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda exc: page.errors.append(str(exc)))
        page.on("console", lambda msg: msg.type == "error" and page.errors.append(msg.text))
        return page

    yield open_page
    for context in contexts:
        context.close()


PHONE_390 = {"width": 390, "height": 844}


@pytest.fixture
def phone(page_for):
    """A touch phone at 390×844 (so taps are taps), closed at the end of the test."""
    return page_for(PHONE_390, touch=True)


def shot(page, name):
    """Save a screenshot under tests/artifacts (the best go into docs/ for the README)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False)


def no_horizontal_scroll(page):
    width = page.evaluate("document.documentElement.scrollWidth")
    viewport = page.evaluate("window.innerWidth")
    assert width <= viewport, f"page is {width}px wide in a {viewport}px viewport"


def axe_violations(page, selector=None):
    """Serious or critical axe-core violations (vendored for the tests only)."""
    page.evaluate(AXE.read_text() + "\n;undefined")   # evaluate is not subject to the page's CSP
    context = f"document.querySelector({selector!r})" if selector else "document"
    result = page.evaluate(f"async () => (await axe.run({context})).violations"
                           ".filter(v => v.impact === 'serious' || v.impact === 'critical')"
                           ".map(v => v.id + ': ' + v.help + ' ' + v.nodes.map(n => n.target).join(' | '))")
    return result


def wait_until(page, expression: str, timeout: float = 15.0):
    """Poll a JS expression (wait_for_function needs eval, which our CSP forbids)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if page.evaluate(f"() => Boolean({expression})"):
            return
        page.wait_for_timeout(50)
    pytest.fail(f"timed out after {timeout:g} s waiting in the page for: {expression}")
