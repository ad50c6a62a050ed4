"""Flow 6: signing in when a password is set."""

import dataclasses

import pytest

from app.auth import set_password
from browser.conftest import PHONE, axe_violations, no_horizontal_scroll, shot
from conftest import make_config

pytestmark = pytest.mark.browser


def protected_app(tmp_path, scripted, make_live, password):
    """The app with auth: password and ``password`` set."""
    config = dataclasses.replace(make_config(tmp_path, scripted.url), auth="password")
    set_password(config.data_path, password)
    return config, make_live(config)


def test_login_wrong_then_right_then_sign_out(tmp_path, scripted, make_live, page_for):
    _, live = protected_app(tmp_path, scripted, make_live, "correct horse battery")
    page = page_for(PHONE)
    page.goto(live.url + "/")
    page.wait_for_selector("input[type=password]")
    assert "/login" in page.url
    no_horizontal_scroll(page)
    assert axe_violations(page) == []
    shot(page, "login-phone")
    page.fill("input[type=password]", "wrong password")
    page.click("button[type=submit]")
    page.wait_for_selector("text=Wrong password")
    page.fill("input[type=password]", "correct horse battery")
    page.click("button[type=submit]")
    page.wait_for_selector("#message")
    page.fill("#message", "hello after login")
    page.press("#message", "Enter")
    page.wait_for_selector(".markdown >> text=You said: hello after login")
    page.click("#menu summary")          # Sign out is in the header menu (issue 16, point 5)
    page.click("text=Sign out")
    page.wait_for_selector("input[type=password]")
    page.goto(live.url + "/")
    assert "/login" in page.url


def test_after_a_password_change_sending_leads_back_to_login(tmp_path, scripted, make_live, page_for):
    config, live = protected_app(tmp_path, scripted, make_live, "first password")
    page = page_for(PHONE)
    page.goto(live.url + "/")
    page.fill("#password", "first password")
    page.click("button[type=submit]")
    page.wait_for_selector("#message")
    set_password(config.data_path, "a different password")     # every device must sign in again
    page.fill("#message", "are you there?")
    page.press("#message", "Enter")
    page.wait_for_url(live.url + "/login**")
    assert page.locator("#password").is_visible()
    assert "are you there?" not in "".join(p.read_text() for p in config.sessions_path.glob("*.spmd"))
    assert not [e for e in page.errors if "Content Security Policy" in e]
