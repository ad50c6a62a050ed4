"""Issue 45: no page logs a Content-Security-Policy violation, an aligned table included (headless Chromium).

The policy refuses inline styles (``style-src 'self'``). markdown-it wrote a table's column alignment as a
``style`` attribute: Chromium refused it on every page that showed such a table (the alignment lost, an
error in the console); the renderer now writes a class the stylesheet aligns.
"""
from pathlib import Path

import pytest

from browser.conftest import LAPTOP, PHONE
from conftest import make_config
from scripted_ollama import Reply

pytestmark = pytest.mark.browser

TABLE = "| item | price |\n|:--|--:|\n| tea | 3.50 |\n| cake | 12.00 |\n"
WATCH = ("document.addEventListener('securitypolicyviolation', e => console.error("
         "'CSP ' + e.violatedDirective + ' ' + (e.target && e.target.outerHTML || '').slice(0, 80)))")


@pytest.mark.parametrize("size", [PHONE, LAPTOP], ids=["phone-360", "desktop-1280"])
def test_no_page_logs_a_csp_violation_and_an_aligned_column_is_aligned(tmp_path, scripted, make_live, page_for,
                                                                       size):
    scripted.script = Reply(text="Here are the prices:\n\n" + TABLE)
    config = make_config(tmp_path, scripted.url)
    Path(config.workspace).mkdir(parents=True)
    (Path(config.workspace) / "prices.md").write_text("# Prices\n\n" + TABLE)
    live = make_live(config)
    page = page_for(size)
    page.add_init_script(WATCH)
    page.goto(live.url + "/")
    page.fill("#message", "What do the prices in prices.md say?")
    page.click("#send")
    page.wait_for_selector(".msg.reply:not(.streaming) table")
    cell = page.locator(".msg.reply td").nth(1)
    assert cell.evaluate("td => getComputedStyle(td).textAlign") == "right"      # 3.50 sits right
    name = page.url.rsplit("/", 1)[-1]
    for path in (f"/s/{name}", "/", f"/files/?session={name}", "/sessions/", f"/sessions/{name}", "/library/"):
        page.goto(live.url + path)
        page.wait_for_load_state("load")
    assert not [e for e in page.errors if "Content Security Policy" in e or e.startswith("CSP ")], page.errors
