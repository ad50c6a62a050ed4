"""The page says when the model in use is Harvey's bundled demo model (issue 31).

The demo server marks every model it serves in ``/api/show``'s details (``harvey_demo: true``);
the status line and the empty chat page then say it is a stand-in and link to how to get real
answers. A normal Ollama sends no such mark, and the page says nothing.
"""

import re

import pytest

from conftest import LiveApp, make_config
from scripted_ollama import ScriptedOllama

NOTE = "demo model: a stand-in for trying Harvey"


def status_line(html: str) -> str:
    """The status line's summary as text (its long demo note is a span of its own: issue 45)."""
    return re.sub(r"<[^>]+>", "", re.search(r'<details id="status".*?</summary>', html, re.S).group(0))


def empty_page(tmp_path, server, model: str = "tiny:1b") -> tuple[LiveApp, str]:
    live = LiveApp(make_config(tmp_path, server.url, model=model))
    name = live.open_session()
    return live, live.get(f"/s/{name}").text


def test_a_marked_model_carries_the_note_and_its_link(tmp_path):
    with ScriptedOllama() as server:
        server.show_details = {"harvey_demo": True}
        live, html = empty_page(tmp_path, server)
        try:
            assert NOTE in status_line(html)
            assert 'id="demo-note"' in html and "Install Ollama for real answers" in html
            help_page = live.get("/demo-model")
            assert help_page.status_code == 200 and "tiny:1b" in help_page.text
            assert "The bundled demo model" in help_page.text and "ollama pull" in help_page.text
        finally:
            live.close()


def test_a_normal_ollama_gets_no_note(tmp_path):
    with ScriptedOllama() as server:
        live, html = empty_page(tmp_path, server)
        try:
            assert "tiny:1b" in status_line(html)
            assert NOTE not in re.sub(r"<[^>]+>", "", html) and 'id="demo-note"' not in html
        finally:
            live.close()


def test_the_mark_must_be_true(tmp_path):
    """Only the demo server's exact mark counts: another server's stray key is not a demo."""
    with ScriptedOllama() as server:
        server.show_details = {"harvey_demo": "no"}
        live, html = empty_page(tmp_path, server)
        try:
            assert NOTE not in re.sub(r"<[^>]+>", "", html)
        finally:
            live.close()


@pytest.mark.realmodel
def test_the_real_demo_server_marks_itself(tmp_path, demo_model):
    live, html = empty_page(tmp_path, demo_model, model=demo_model.model_name)
    try:
        assert NOTE in status_line(html) and 'id="demo-note"' in html
    finally:
        live.close()
