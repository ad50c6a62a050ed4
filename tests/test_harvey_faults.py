"""Round trips with the terminal Harvey (issue 35, item 8), through waitress and the scripted Ollama
server: Harvey's own recording of a reply holding a capitals line and a parenthetical-looking line
imports as one reply; lines starting ``[[`` or ``/*`` and capitals first lines reach Harvey's model
without a backslash and without a zero width space it does not need; a heading with Harvey's time
stamp and an annotation after it is a heading."""

from __future__ import annotations

from fountain import FountainParser

from app.sessions import fountain as spmd
from conftest import send_and_finish
from test_harvey_interop import HarveyReplay, harvey_app, scripted_replies, upload  # noqa: F401

# What the terminal Harvey's recorder writes for a reply with paragraphs: the reply raw, its blank
# lines kept, so the capitals line after one looks like a cue and the next line like a parenthetical.
HARVEYS_RECORDING = """Title: Harvey Session
Credit: Recorded by Harvey
Author: RSDOIEL
Date: 2026-07-01 09:00:00
Draft date: 2026-07-01
Model: LLAMA3.1 (ollama)
Backend: ollama


FADE IN:


INT. HARVEY AND RSDOIEL TALKING 2026-07-01 09:00:00

Harvey and RSDOIEL are in chat mode. Model: LLAMA3.1. Workspace: /home/pi.

RSDOIEL
Write me a warning banner.

HARVEY
Forwarding to LLAMA3.1.

LLAMA3.1
Here is the banner:

ALL CAPS LINE
(a parenthetical-looking line)
and the rest of it.

ollama (llama3.1:8b) · 12 reply + 40 ctx · 1.2s · 10.0 tok/s


INT. HARVEY AND RSDOIEL TALKING 2026-07-01 09:01:00   ← annotated, as Harvey's design documents do

RSDOIEL
Thanks.

HARVEY
Forwarding to LLAMA3.1.

LLAMA3.1
You are welcome.


THE END.
"""


def test_harveys_recording_of_a_capitals_line_and_a_parenthetical_is_one_reply(harvey_app):
    live, server = harvey_app()
    session = upload(live, HARVEYS_RECORDING.encode())
    turns = live.services.store.load(session).turns
    assert [t.user_text for t in turns] == ["Write me a warning banner.", "Thanks."]
    assert turns[0].reply == ("Here is the banner:\n\nALL CAPS LINE\n(a parenthetical-looking line)\n"
                              "and the rest of it.")
    assert turns[0].more == []
    # the annotated heading is the second turn's, with its time
    assert turns[1].when is not None and turns[1].when.minute == 1
    send_and_finish(live, session, "And next?")
    sent = server.chats()[-1].body["messages"]
    assert not any("answered:" in m["content"] for m in sent)
    assert sent[2] == {"role": "assistant", "content": turns[0].reply}
    assert sent[4] == {"role": "assistant", "content": "You are welcome."}


def test_a_new_model_still_needs_no_introduction_for_the_first_reply():
    """A cue the file never named answers a message that has no reply yet (older layouts)."""
    text = HARVEYS_RECORDING.replace("Model: LLAMA3.1 (ollama)", "Model: X (ollama)").replace(
        "Forwarding to LLAMA3.1.", "Thinking.").replace("Model: LLAMA3.1. Workspace", "Workspace")
    turns = spmd.turns(spmd.loads(text))
    assert turns[0].reply.startswith("Here is the banner:") and "ALL CAPS LINE" in turns[0].reply


def exchange(harvey_app, message: str, reply: str) -> tuple[str, list]:
    live, _ = harvey_app(scripted_replies([reply]))
    name = live.open_session()
    send_and_finish(live, name, message)
    return live.services.store.path(name).read_text(encoding="utf-8"), live.services.store.load(name).turns


def test_note_and_boneyard_first_lines_reach_harveys_model_without_a_backslash(harvey_app):
    text, turns = exchange(harvey_app, "[[ is how a wiki links\nsecond", "/* a C comment */\nint x;")
    assert "\\" not in text.split("FADE IN:", 1)[1]
    (user, reply), = HarveyReplay.read(text).turns
    assert user.replace("\u200b", "") == "[[ is how a wiki links"
    assert reply.replace("\u200b", "") == "/* a C comment */"
    assert FountainParser().validate(text) == []
    assert (turns[0].user_text, turns[0].reply) == ("[[ is how a wiki links\nsecond", "/* a C comment */\nint x;")


def test_capitals_first_lines_get_a_zero_width_space_only_where_a_parser_needs_it(harvey_app):
    text, turns = exchange(harvey_app, "I AM HERE!\nok", "| A | B |\n|---|---|")
    (user, reply), = HarveyReplay.read(text).turns
    assert (user, reply) == ("I AM HERE!", "| A | B |")            # nothing invisible reaches Harvey
    assert FountainParser().validate(text) == []
    assert (turns[0].user_text, turns[0].reply) == ("I AM HERE!\nok", "| A | B |\n|---|---|")


def test_a_first_line_fountain_py_would_take_for_a_cue_keeps_its_zero_width_space(harvey_app):
    text, turns = exchange(harvey_app, "Banner?", "WARNING\nhot surface")
    assert "\u200bWARNING" in text and turns[0].reply == "WARNING\nhot surface"
    assert FountainParser().validate(text) == []


def test_old_files_with_backslash_escapes_still_read():
    old = ("Title: Harvey Session\n\n\nFADE IN:\n\n\nINT. HARVEY AND TESTER TALKING 2026-07-01 09:00:00\n\n"
           "TESTER\n[\\[ link\n\nHARVEY\nForwarding to LLAMA3.1.\n\nLLAMA3.1\n/\\* comment */\n\u200bI AM HERE!\n\n\nTHE END.\n")
    turn, = spmd.turns(spmd.loads(old))
    assert (turn.user_text, turn.reply) == ("[[ link", "/* comment */\nI AM HERE!")
