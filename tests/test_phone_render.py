"""app/render.py for issue 16: streaming snapshots, highlighting, focusable blocks; all escaped."""

import pytest

import random

from markupsafe import escape

from app.render import MarkdownStream, markdown, stable_end, stream_snapshot


@pytest.mark.parametrize("text, end", [
    ("no break yet", 0),
    ("one\n\ntwo", 5),
    ("one\n\n```py\nx = 1\n\ny = 2\n", 5),             # a blank line inside an open fence is no break
    ("one\n\n```py\nx = 1\n```\nmore", 21),             # a closing fence completes the block
    ("a\n\n~~~\n```\n~~~\n\nb", 16),
])
def test_stable_end(text, end):
    assert stable_end(text) == end


@pytest.mark.parametrize("text, end", [
    ("- a\n\n- b\n\nafter", 10),                     # a loose list is one list: no break between its items
    ("- a\n\n  more of a\n\n    code\n\nnext", 28),     # an indented line belongs to the block before
    ("para\n\n- a", 6),                               # a list after a paragraph starts a new block
    ("- a\n\n12345678901234 x", 5),                   # (digits that are no list marker)
])
def test_stable_end_never_splits_a_block(text, end):
    assert stable_end(text) == end


def test_the_stream_escapes_the_tail_and_renders_the_head():
    block = MarkdownStream("reply-text-3").feed("**done**\n\n<script>alert(1)</script> still **com")
    assert "<strong>done</strong>" in block
    assert "<script>" not in block and "&lt;script&gt;" in block
    assert 'id="reply-text-3" hx-swap-oob="true"' in block


REPLY = ("# Title\n\nHere is **bold** and a list:\n\n- one\n- two\n\n```python\nprint('<hi>')\n\nx = 1\n```\n"
         "After the fence.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n1. x\n\n   more of x\n\n2. y\n\n"
         "    indented code\n\n> quote [1]\n\nLast <script> para")


@pytest.mark.parametrize("seed", range(12))
def test_blocks_rendered_one_by_one_are_the_prefix_rendered_whole(seed):
    """However the reply is cut into pieces, the blocks streamed so far (each rendered once) and the
    tail are what rendering the whole finished prefix gave before (issue 23 item 6)."""
    r, pieces, at = random.Random(seed), [], 0
    while at < len(REPLY):
        size = r.randint(1, 9)
        pieces.append(REPLY[at:at + size])
        at += size
    stream, events = MarkdownStream("reply-text-0"), []
    for piece in pieces:
        events.append(("piece", str(escape(piece))))
        if (block := stream.feed(piece)) is not None:
            events.append(("block", str(block)))
    end = stable_end(REPLY)
    assert REPLY[end:] == "Last <script> para"
    assert str(stream_snapshot(events, "md", "reply-text-0")) == (
        f'<div class="markdown" id="md">{markdown(REPLY[:end])}</div>'
        f'<div class="plain tail" id="reply-text-0">{escape(REPLY[end:])}</div>')
    assert 1 < sum(name == "block" for name, _ in events) <= REPLY.count("\n\n")


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
    ("Summarize _pydecimal.py for me", "Summarize _pydecimal.py for me"),      # a file's underscore stays
    ("what is in my_notes_2024.txt?", "what is in my_notes_2024.txt?"),
    ("this is _really_ urgent", "this is really urgent"),                    # emphasis goes
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
