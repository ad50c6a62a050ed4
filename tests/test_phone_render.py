"""app/render.py for issue 16: streaming snapshots, highlighting, focusable blocks; all escaped."""

import pytest

from app.render import markdown, stable_end, streaming


@pytest.mark.parametrize("text, end", [
    ("no break yet", 0),
    ("one\n\ntwo", 5),
    ("one\n\n```py\nx = 1\n\ny = 2\n", 5),             # a blank line inside an open fence is no break
    ("one\n\n```py\nx = 1\n```\nmore", 21),             # a closing fence completes the block
    ("a\n\n~~~\n```\n~~~\n\nb", 16),
])
def test_stable_end(text, end):
    assert stable_end(text) == end


def test_streaming_escapes_the_tail_and_renders_the_head():
    html = streaming("**done**\n\n<script>alert(1)</script> still **com", "reply-text-3")
    assert "<strong>done</strong>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'id="reply-text-3"' in html


def test_code_is_highlighted_escaped_and_focusable():
    html = markdown("```python\nx = '<b>'  # c\n```\n\n```nolang\n<i>\n```")
    assert '<span class="s1">&#39;&lt;b&gt;&#39;</span>' in html or "&lt;b&gt;" in html
    assert '<span class="c1"># c</span>' in html
    assert "<i>" not in html and html.count('<pre tabindex="0">') == 2
    assert html.count('class="button copy"') == 2


def test_tables_scroll_in_a_focusable_region():
    html = markdown("| a |\n|---|\n| 1 |")
    assert '<div class="table-scroll" tabindex="0" role="region" aria-label="Table">' in html


@pytest.mark.parametrize("text, title", [
    ("Hello there", "Hello there"),
    ("\n\n  # Fix my *script*  \nmore", "Fix my script"),
    ("/read-chunks big.md", "big.md"),
    ("@llama3 what is a Pi?", "what is a Pi?"),
    ("word " * 30, "word word word word word word word word word word word word…"),
    ("x" * 80, "x" * 60 + "…"),
    ("   ", ""),
])
def test_title_from_message(text, title):
    from app.sessions.names import title_from_message

    assert title_from_message(text) == title


def test_distinct_models():
    from app.sessions.names import distinct_models

    assert distinct_models(["LLAMA3.1", "llama3.1:8b", "qwen2:1.5b"]) == ["llama3.1:8b", "qwen2:1.5b"]


def test_history_leaves_out_turns_that_a_retry_replaced():
    from app.chat.prepare import history_turns
    from app.sessions import fountain, notes

    def turn(text, reply, retry=None):
        return fountain.Turn(None, text, "tiny:1b", reply, notes=[notes.retry(retry)] if retry is not None else [])

    turns = [turn("a", "A"), turn("q", "1"), turn("q", "2", retry=False), turn("q2", "3", retry=True)]
    assert [[m["content"] for m in entry] for entry in history_turns(turns)] == [["a", "A"], ["q2", "3"]]
    failed = [turn("a", "A"), turn("q", None), turn("q", "ok", retry=True)]     # nothing to take back
    assert len(history_turns(failed)) == 2
