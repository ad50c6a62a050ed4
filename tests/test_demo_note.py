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


@pytest.mark.parametrize("mark,shown", [(True, "bundled demo model (tiny:1b) · "), (None, "ollama (tiny:1b) · ")])
def test_the_stats_line_names_the_demo_server_and_the_session_file_keeps_harveys_form(tmp_path, mark, shown):
    """Issue 45: a demo reply's stats line said "ollama (smollm2:135m)"; the page names the bundled demo model,
    while the .spmd keeps the "ollama (model)" head the terminal Harvey reads the model from."""

    with ScriptedOllama() as server:
        if mark:
            server.show_details = {"harvey_demo": True}
        live = LiveApp(make_config(tmp_path, server.url))
        try:
            name = live.open_session()
            assert live.post(f"/s/{name}/messages", data={"message": "hello"}).status_code == 200
            assert list(live.sse(f"/s/{name}/turns/0/stream"))[-1][0] == "close"     # the reply ended and stored
            stats = re.findall(r'<p class="stats">([^<]*)</p>', live.get(f"/s/{name}").text)
            assert len(stats) == 1 and stats[0].startswith(shown), stats
            written = live.services.store.path(name).read_text("utf-8")
            assert "ollama (tiny:1b) · " in written and "bundled demo model" not in written
        finally:
            live.close()
