"""app.fountain: Harvey's .spmd session files <-> data.

Three kinds of evidence: the layout is Harvey's byte for byte; any text comes
back exactly (named nasty cases and hypothesis); third-party Fountain tools
(fountain-py, jouvence) read our files the way a person would.
"""

import ast
import dataclasses
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fountain import ElementType, FountainParser
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jouvence.document import TYPE_CHARACTER, TYPE_DIALOG
from jouvence.parser import JouvenceParser

from app.sessions import fountain as spmd

DATA = Path(__file__).parent / "data" / "spmd"
WHEN = datetime(2026, 6, 27, 10, 4, 0)
USER = "rsdoiel"
WS = "/home/pi/harvey"
MODEL = "llama3.1:8b"
STATS = spmd.stats_line(MODEL, "ollama", 312, 1840, 18.437)
# database=None: no .hypothesis folder in the shared tree.
PROPERTY = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Lines that mean something in Fountain (or to our escaping) when they sit in a reply.
NASTY_LINES = [
    "", " ", "  ", "   ", "\t", "# Heading", "## Sub heading", "#include <stdio.h>", "/* comment */",
    "/* unclosed", "*/", "/*", "int x; /* trailing", "a /* b */ c", "[[note]]", "[[", "]]", "x [[y", "WARNING",
    "DO NOT PANIC", "OK", "I", "CUT TO:", "SMASH CUT TO:", "FADE IN:", "FADE OUT.", "THE END.", ">THE END.<",
    "INT. KITCHEN - DAY", "EXT. PARK", "int. lower", "EST. 1990", "I/E CAR", "INT./EXT. CAR", ".hidden",
    ".5 seconds", "...and then", ".", "!important", "@decorator", "@LLAMA3.1", "~lyric", "> quote", ">centre<",
    "=synopsis", "===", "======", "(aside)", "()", "  (indented aside)  ", "trailing spaces   ", "\ttab\tin\tline",
    "crlf end\r", "lone\rcr", "\r", "héllo wörld — 日本語 🎉", "RSDOIEL", "HARVEY", "Forwarding to X.",
    "Title: not a title", "ollama (x) · 5s", "\\", "\\\\", "\\# escaped?", "/\\*", "[\\[", "\u240d", "\\\u240d",
    "\u2028", "\x0b\x0c\x1c\x85", "\x00", "\ufeff", "```", "```c", "- item", "1. item", "| a | b |", "**bold**",
    "INT. HARVEY AND BOB TALKING 2026-01-01 00:00:00", "\\INT. X", "\\\\@x", "Harvey and X are in chat mode.",
]
NAMED = [
    "", " ", "  ", "\n", "\n\n", "\r\n", "\r", "para one\n\npara two\n\n\npara three",
    "# Title\n\nSome text.\n\n## Part\n\n- a\n- b",
    "```c\n#include <stdio.h>\n/* a comment\n   over lines */\nint main(void) { return 0; } /* end\n```",
    "WARNING\nTHIS IS LOUD\n\nSTILL LOUD", "CUT TO:\nINT. KITCHEN - DAY\n\nSomeone enters.",
    "[[not a note]] and [[[three]]]", "a\\\r\nb\\\\\rc\u240d", "  \n  \n  ", "ends with newline\n",
    "\n\nstarts with blank lines", "trailing spaces   \n\ttabs\t\n", "line\r\nwindows\r\nlines\r\n",
    "Forwarding to GEMMA4.", "/*", "*/", "[[", "\\", *NASTY_LINES,
]


def session_text(*turns, user=USER):
    play = spmd.Screenplay(spmd.new_title_page(user, MODEL, "ollama", WHEN))
    for turn in turns:
        play.scenes += spmd.turn_scenes(turn, user, WS)
    return spmd.dumps(play)


def one_turn(user_text, reply, model=MODEL, stats=STATS, notes=()):
    return spmd.Turn(WHEN, user_text, model, reply, stats, list(notes))


def fountain_py_cues(text):
    """The character cues fountain-py sees, with the dialogue lines it gives each."""
    cues = []
    for el in FountainParser().parse(text).elements:
        if el.type == ElementType.CHARACTER:
            cues.append((el.text, []))
        elif el.type in (ElementType.DIALOGUE, ElementType.PARENTHETICAL) and cues:
            cues[-1][1].append(el.text)
    return cues


def jouvence_dialogue(text):
    """(cue, dialogue text) pairs as jouvence reads them."""
    pairs = []
    for scene in JouvenceParser().parseString(text).scenes:
        for p in scene.paragraphs:
            if p.type == TYPE_CHARACTER:
                pairs.append([p.text, None])
            elif p.type == TYPE_DIALOG and pairs and pairs[-1][1] is None:
                pairs[-1][1] = p.text
    return [tuple(p) for p in pairs]


# ---------------------------------------------------------------- layout


def test_layout_is_harveys_byte_for_byte():
    first = one_turn("What is 2+2?", "4")
    second = spmd.Turn(WHEN + timedelta(minutes=1), "And in French?", "mistral:latest", "Quatre.",
                       notes=[spmd.model_switch_note("mistral:latest", "ollama", WHEN + timedelta(seconds=30))])
    assert session_text(first, second) == """\
Title: Harvey Session
Credit: Recorded by Harvey
Author: RSDOIEL
Date: 2026-06-27 10:04:00
Draft date: 2026-06-27
Model: LLAMA3.1 (ollama)
Backend: ollama


FADE IN:


INT. HARVEY AND RSDOIEL TALKING 2026-06-27 10:04:00

Harvey and RSDOIEL are in chat mode. Model: LLAMA3.1. Workspace: /home/pi/harvey.

RSDOIEL
What is 2+2?

HARVEY
Forwarding to LLAMA3.1.

@LLAMA3.1
4

ollama (llama3.1:8b) · 312 reply + 1840 ctx · 18.437s · 16.9 tok/s



INT. HARVEY AND RSDOIEL TALKING 2026-06-27 10:05:00

Harvey and RSDOIEL are in chat mode. Model: MISTRAL. Workspace: /home/pi/harvey.

[[model switch: mistral:latest (ollama) at 2026-06-27 10:04:30]]

RSDOIEL
And in French?

HARVEY
Forwarding to MISTRAL.

MISTRAL
Quatre.


>THE END.<
"""


def test_harvey_file_is_rewritten_with_only_the_deliberate_fixes():
    text = (DATA / "harvey_exact.spmd").read_text(encoding="utf-8")
    expected = (text.replace("\nLLAMA3.1\n", "\n@LLAMA3.1\n")  # jouvence refuses LLAMA3.1 as a cue
                .replace("\nPI2\n", "\n@PI2\n")  # digits
                .replace("\n@pi2 analyze", "\n\u200b@pi2 analyze")  # "@" would force a cue (a ZWSP: no "\\" reaches Harvey)
                .replace("\nTHE END.\n", "\n>THE END.<\n"))  # fountain-py: plain THE END. is an orphan cue
    assert spmd.dumps(spmd.loads(text)) == expected


def test_empty_play_and_title_free_play_read_back():
    assert spmd.loads(spmd.dumps(spmd.Screenplay())) == spmd.Screenplay()
    play = spmd.Screenplay({}, [spmd.Scene("INT. X 2026-01-01", [spmd.Element("action", "Hi.")])])
    assert spmd.dumps(play).startswith("FADE IN:\n")
    assert spmd.loads(spmd.dumps(play)) == play


def test_text_before_the_first_heading_is_kept_as_a_headingless_scene():
    play = spmd.Screenplay({"Title": "T"}, [spmd.Scene("", [spmd.Element("note", "prologue")]),
                                            spmd.Scene("INT. X", [spmd.Element("action", "a")])])
    assert spmd.loads(spmd.dumps(play)) == play


# ----------------------------------------------------------- Harvey's files


def test_reads_harveys_file():
    play = spmd.read_file(DATA / "harvey_exact.spmd")
    assert list(play.title_page) == ["Title", "Credit", "Author", "Date", "Draft date", "Model", "Backend"]
    assert play.title_page["Model"] == "LLAMA3.1 (ollama)"
    first, second = spmd.turns(play)
    assert first == spmd.Turn(WHEN, "What is 2+2?", MODEL, "4", STATS)
    assert second.notes == ["rag: 3 chunks from notes, top score 0.87", 'tool: read_file({"path":"go.mod"}) — ok']
    assert second.reply == "The module path is github.com/rsdoiel/harvey."
    agent = play.scenes[2]
    assert agent.heading == "INT. AGENT MODE 2026-06-27 10:06:00"
    assert [(e.kind, e.character) for e in agent.elements] == [
        ("dialogue", "HARVEY"), ("dialogue", "HARVEY"), ("dialogue", "RSDOIEL"), ("note", "")]
    assert play.scenes[3].heading.startswith("EXT. PI2 AND RSDOIEL")


def test_reads_harveys_variants():
    play = spmd.read_file(DATA / "harvey_variants.spmd")
    t = spmd.turns(play)
    # "TALKING — 2026-07-03 19:15": em dash, no seconds; bare "Model:" action; no forwarding line;
    # two exchanges in one scene.
    assert [(x.when, x.user_text, x.model, x.reply) for x in t[:2]] == [
        (datetime(2026, 7, 3, 19, 15), "Let's do phase 2.", "CLAUDE", "Phase 2 scope confirmed."),
        (datetime(2026, 7, 3, 19, 15), "I am going to hit token limits. We'll continue phase 2 later.", "CLAUDE",
         "Knowledge base initialized and populated."),
    ]
    # Harvey cut the reply at its blank lines; the paragraphs are joined back, the routing line is not a reply.
    assert t[2].reply == "First paragraph of the plan.\n\nSecond paragraph, still the reply.\n\nThird and last."
    assert t[2].model == "gemma4:latest"
    # Harvey writes the model switch after the previous turn; it belongs to the turn on the new model.
    assert t[2].notes == []
    assert t[3].notes == ["model switch: mistral:latest (ollama) at 2026-07-03 19:21:00"]
    assert (t[3].model, t[3].reply) == ("MISTRAL", "Now I answer.")
    assert len(t) == 4
    # Scenes the chat does not use stay scenes, with their content.
    headings = [s.heading.split(" 2026")[0] for s in play.scenes]
    assert headings[3:] == ["INT. SHELL", "INT. SKILL GO-REVIEW", "INT. CONTEXT RECALL"]
    assert play.scenes[3].elements[0] == spmd.Element("dialogue", "! git status", "RSDOIEL")
    assert play.scenes[5].elements == [spmd.Element("note", "recall: m1 (memory) — score 0.91")]
    # ...and the rewritten file keeps all of them and is clean Fountain.
    again = spmd.loads(spmd.dumps(play))
    assert again == play
    assert FountainParser().validate(spmd.dumps(play)) == []


@pytest.mark.parametrize("end", ["THE END.", ">THE END.<", "> THE END. <", ""])
def test_end_marker_plain_centred_or_missing(end):
    text = session_text(one_turn("hi", "hello")).replace(">THE END.<\n", end + "\n" if end else "")
    play = spmd.loads(text)
    assert [s.heading for s in play.scenes] == ["INT. HARVEY AND RSDOIEL TALKING 2026-06-27 10:04:00"]
    assert spmd.turns(play)[0].reply == "hello"


HARVEY_LAYOUTS = ["harvey_exact", "harvey_variants", "seed000_chunk", "harvey_multi_model", "harvey_local_model",
                  "harvey_recorder", "harvey_chunk_recorder"]


@pytest.mark.parametrize("name", HARVEY_LAYOUTS)
def test_crlf_input_reads_the_same(name):
    text = (DATA / f"{name}.spmd").read_text(encoding="utf-8")
    assert spmd.loads(text.replace("\n", "\r\n")) == spmd.loads(text)


@pytest.mark.parametrize("name", HARVEY_LAYOUTS)
def test_harvey_layouts_rewrite_losslessly_and_validate(name):
    play = spmd.read_file(DATA / f"{name}.spmd")
    text = spmd.dumps(play)
    assert spmd.loads(text) == play
    assert spmd.turns(spmd.loads(text)) == spmd.turns(play)
    assert FountainParser().validate(text) == []


@pytest.mark.parametrize("name", ["harvey_multi_model", "harvey_chunk_recorder", "harvey_local_model"])
def test_torn_harvey_layouts_read_at_every_cut(name):
    text = (DATA / f"{name}.spmd").read_text(encoding="utf-8")
    for cut in range(0, len(text), 7):
        play = spmd.loads(text[:cut])
        assert spmd.loads(spmd.dumps(play)) == play, cut
        for turn in spmd.turns(play):
            assert turn.scenes is not None and turn.scenes[0] <= turn.scenes[1] < len(play.scenes), cut


def test_crlf_input_of_our_own_file_keeps_every_text():
    turn = one_turn("a\nb", "x\r\ny\n\nz\rw", notes=["stopped: by user"])
    text = session_text(turn)
    assert "\r" not in text
    assert spmd.turns(spmd.loads(text.replace("\n", "\r\n"))) == [turn]


def test_bom_and_torn_utf8_are_tolerated(tmp_path):
    path = tmp_path / "s.spmd"
    data = session_text(one_turn("hi", "héllo")).encode("utf-8")
    path.write_bytes(b"\xef\xbb\xbf" + data[: data.index(b"llo") - 1])  # cut inside "é"
    turn = spmd.turns(spmd.read_file(path))[0]
    assert turn.reply == "h\ufffd"


# ------------------------------------------------------------- torn files


def test_torn_file_every_cut_point_reads_and_rewrites_cleanly():
    text = session_text(
        one_turn("What is 2+2?", "4\n\n# Markdown\n/* c */", notes=["stopped: by user"]),
        spmd.Turn(WHEN, "why?", None, None, harvey="Error: the model is not installed."),
        one_turn("again", "WARNING\n\n[[x]]"),
    ) + (DATA / "harvey_variants.spmd").read_text(encoding="utf-8").split("FADE IN:\n", 1)[1]
    parser = FountainParser()
    for cut in range(0, len(text), 3):
        play = spmd.loads(text[:cut])
        rewritten = spmd.dumps(play)
        assert spmd.loads(rewritten) == play, cut
        assert not [i for i in parser.validate(rewritten) if i.severity == "error"], cut
        spmd.turns(play)


def test_torn_reply_keeps_the_part_written_and_drops_structure_fragments():
    full = session_text(one_turn("ask", "first line\nsecond line", notes=["stopped: by user"]))
    cue_only = full[: full.index("@LLAMA3.1\n") + len("@LLAMA3.1\n")]
    assert spmd.turns(spmd.loads(cue_only))[0].reply is None
    half_cue = full[: full.index("@LLAMA3.1\n") + 5]
    assert spmd.turns(spmd.loads(half_cue))[0].reply is None
    mid_reply = full[: full.index("second line") + 6]
    assert spmd.turns(spmd.loads(mid_reply))[0].reply == "first line\nsecond"
    mid_note = full[: full.index("[[stopped") + 6]
    assert spmd.turns(spmd.loads(mid_note))[0].notes == []
    mid_stats = full[: full.index("312 reply")]
    turn = spmd.turns(spmd.loads(mid_stats))[0]
    assert (turn.reply, turn.stats, turn.notes) == ("first line\nsecond line", None, ["stopped: by user"])
    plain = session_text(one_turn("ask", "the reply"))
    torn_stats = plain[: plain.index("312 reply")]  # half a stats line right after the reply
    assert spmd.turns(spmd.loads(torn_stats))[0].reply == "the reply"


# -------------------------------------------------------------- lossless


@pytest.mark.parametrize("text", NAMED, ids=range(len(NAMED)))
def test_named_nasty_texts_come_back_exactly(text):
    turn = one_turn(text, text, notes=["stopped: by user"])
    assert spmd.turns(spmd.loads(session_text(turn))) == [turn]
    scene = spmd.Scene("INT. X", [spmd.Element("action", text), spmd.Element("dialogue", text, "HARVEY")])
    assert spmd.loads(spmd.dumps(spmd.Screenplay({"Title": "t"}, [scene]))).scenes == [scene]


any_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=80)
special_text = st.text(st.sampled_from(list("/*[]\\\r\n \t\u240d@#!.~=>()TOINEXa:é")), max_size=40)
nasty_line = st.one_of(
    st.sampled_from(NASTY_LINES),
    st.builds(lambda a, b: a + b, st.sampled_from(NASTY_LINES), st.sampled_from(NASTY_LINES)),
    st.builds(lambda p, t: p + t, st.sampled_from(["", " ", "\t", "\\", "\\\\", "  "]), st.sampled_from(NASTY_LINES)),
)
grammar_text = st.builds(lambda lines, eol: eol.join(lines), st.lists(nasty_line, max_size=12),
                         st.sampled_from(["\n", "\r\n", "\n\n"]))


@PROPERTY
@given(user_text=st.one_of(any_text, special_text, grammar_text),
       reply=st.one_of(any_text, special_text, grammar_text))
def test_any_message_and_reply_come_back_exactly(user_text, reply):
    turn = one_turn(user_text, reply)
    assert spmd.turns(spmd.loads(session_text(turn))) == [turn]


@PROPERTY
@given(texts=st.lists(st.one_of(any_text, special_text, grammar_text), min_size=1, max_size=4))
def test_any_action_and_dialogue_elements_come_back_exactly(texts):
    els = [spmd.Element("action", t) for t in texts] + [spmd.Element("dialogue", t, "@x y") for t in texts]
    play = spmd.Screenplay({"Title": "t"}, [spmd.Scene("INT. A", els), spmd.Scene("EXT. B", els[::-1])])
    assert spmd.loads(spmd.dumps(play)) == play


@PROPERTY
@given(reply=st.one_of(grammar_text, any_text, special_text), model=st.sampled_from(["llama3.1:8b", "mistral:latest", "me/apertus:latest"]))
@example(reply="CUT TO: ", model="llama3.1:8b")       # a transition with a trailing space (found by hypothesis)
def test_fountain_tools_read_any_reply_as_the_models_dialogue(reply, model):
    text = session_text(one_turn(reply, reply, model, spmd.stats_line(model, "ollama", 1, 2, 3.0)))
    assert FountainParser().validate(text) == []
    cue = spmd.model_cue(model)
    assert [c for c, _ in fountain_py_cues(text)] == ["RSDOIEL", "HARVEY", cue]
    lines = spmd._encode_text(reply, dialogue=True)
    message = spmd._encode_text(spmd.split_mention(reply)[1], dialogue=True)     # a leading @model goes to a note
    assert jouvence_dialogue(text) == [("RSDOIEL", _jouvence_view(message)), ("HARVEY", "Forwarding to %s." % cue),
                                       (cue, _jouvence_view(lines))]


def _jouvence_view(lines):
    """What jouvence makes of our written lines: each left-stripped, whitespace-only ones vanish."""
    return "\n".join(line.lstrip() for line in lines if line.strip())


# ------------------------------------------------------ third-party tools

NASTY_REPLY = """# Plan

WARNING
THIS LINE IS ALL CAPS

```c
#include <stdio.h>
/* not a boneyard, just C
   spanning lines */
```

[[not a note]]
CUT TO:
INT. KITCHEN - DAY
(not a parenthetical)
@not_a_cue
"""


def test_fountain_py_validates_our_file_and_keeps_the_reply_as_dialogue():
    text = session_text(one_turn("Show me C", NASTY_REPLY, notes=["stopped: by user [[x]] /* y"]),
                        one_turn("WHY\nit works", "OK"))
    assert FountainParser().validate(text) == []
    cues = fountain_py_cues(text)
    assert [c for c, _ in cues] == ["RSDOIEL", "HARVEY", "LLAMA3.1", "RSDOIEL", "HARVEY", "LLAMA3.1"]
    dialogue = cues[2][1]
    assert "/\u200b* not a boneyard, just C" in dialogue  # a zero width space breaks "/*" (no backslash)
    assert "WARNING" in dialogue and "THIS LINE IS ALL CAPS" in dialogue
    assert dialogue.count(spmd.BLANK_LINE) >= 4  # the blank lines stay inside the dialogue
    elements = FountainParser().parse(text).elements
    assert [e.type for e in elements].count(ElementType.NOTE) == 1
    assert elements[-1].type == ElementType.CENTERED and elements[-1].text == "THE END."


def test_jouvence_reads_the_replies_as_the_model_cues_dialogue():
    slash = "C code:\nint x = 1; /* one\n/* two */\n*/"
    text = session_text(one_turn("q1", NASTY_REPLY), one_turn("q2", slash), one_turn("q3", "PLAIN\n\nCAPS\n\nLINES"))
    pairs = jouvence_dialogue(text)
    assert [c for c, _ in pairs] == ["RSDOIEL", "HARVEY", "LLAMA3.1"] * 3
    big = pairs[2][1].split("\n")
    for line in ["WARNING", "THIS LINE IS ALL CAPS", "```c", "```", "CUT TO:\u200b"]:   # (Harvey's transition)
        assert line in big
    assert "\u200b#include <stdio.h>" in big and "/\u200b* not a boneyard, just C" in big
    # "int" lines get a zero width space (the terminal Harvey reads them as scene headings).
    assert pairs[5][1] == "C code:\n\u200bint x = 1; /\u200b* one\n/\u200b* two */\n\u200b*/"
    # A cue-like first line is escaped, the others are not; the blank lines are kept (zero width space).
    assert pairs[8][1] == "\u200bPLAIN\n\u200b\nCAPS\n\u200b\nLINES"
    assert [s.header for s in JouvenceParser().parseString(text).scenes][1:] == [
        "INT. HARVEY AND RSDOIEL TALKING 2026-06-27 10:04:00"] * 3


def test_metadata_lines_cannot_break_the_file():
    note = "error: boom]]\n[[ /* and\nmore]"
    play = spmd.Screenplay({"Title": "a\nb"}, [spmd.Scene("INT. X /* y\nz", [spmd.Element("note", note)])])
    text = spmd.dumps(play)
    assert FountainParser().validate(text) == []
    back = spmd.loads(text)
    assert back.scenes[0].elements == [spmd.Element("note", "error: boom] ] [ [ / * and more]")]
    assert back.title_page == {"Title": "a b"}


# ------------------------------------------------------------------ cues


@pytest.mark.parametrize("name, cue", [
    ("gemma4:latest", "GEMMA4"), ("me/apertus:latest", "APERTUS"), ("llama3.1:8b", "LLAMA3.1"),
    ("MichelRosselli/apertus:latest", "APERTUS"), ("Ollama (gemma4:latest)", "GEMMA4"), ("mistral", "MISTRAL"),
    ("hf.co/org/smollm2:135m", "SMOLLM2"), ("", "MODEL"),
])
def test_model_cue_is_harveys(name, cue):
    assert spmd.model_cue(name) == cue


@pytest.mark.parametrize("character, line", [
    ("LLAMA3.1", "@LLAMA3.1"), ("GEMMA4", "@GEMMA4"), ("PI", "PI"), ("MISTRAL", "MISTRAL"), ("HARVEY", "HARVEY"),
    ("RSDOIEL", "RSDOIEL"), ("A", "@A"), ("lower", "@lower"), ("INT. X", "@INT. X"), ("@x", "@@x"),
])
def test_cue_gets_at_only_when_a_tool_would_not_take_it(character, line):
    text = spmd.dumps(spmd.Screenplay({}, [spmd.Scene("INT. X", [spmd.Element("dialogue", "hi", character)])]))
    assert f"\n{line}\nhi\n" in text
    assert spmd.loads(text).scenes[0].elements == [spmd.Element("dialogue", "hi", character)]
    assert jouvence_dialogue(text) == [(character.lstrip("@"), "hi")]  # jouvence drops every leading "@"
    assert [c for c, _ in fountain_py_cues(text)] == [character]


def test_reader_takes_both_cue_forms():
    base = session_text(one_turn("q", "a"))
    assert spmd.turns(spmd.loads(base.replace("@LLAMA3.1\n", "LLAMA3.1\n"))) == spmd.turns(spmd.loads(base))


# ----------------------------------------------------------------- stats


@pytest.mark.parametrize("args, line", [
    ((MODEL, "ollama", 312, 1840, 18.437), "ollama (llama3.1:8b) · 312 reply + 1840 ctx · 18.437s · 16.9 tok/s"),
    ((MODEL, "ollama", 0, 0, 0.25), "ollama (llama3.1:8b) · 250ms"),
    (("m", "ollama", 10, 5, 62.5), "ollama (m) · 10 reply + 5 ctx · 1m2.5s · 0.2 tok/s"),
    (("m", "ollama", 1, 1, 3600), "ollama (m) · 1 reply + 1 ctx · 1h0m0s · 0.0 tok/s"),
    (("m", "ollama", 0, 0, 0), "ollama (m) · 0s"),
])
def test_stats_line_matches_harvey(args, line):
    assert spmd.stats_line(*args) == line


@pytest.mark.parametrize("stats, model", [
    ("ollama (llama3.1:8b) · 312 reply + 1840 ctx · 18.437s · 16.9 tok/s", "llama3.1:8b"),
    ("llama3.2:1b → Ollama (llama3.1:8b) · 3 reply + 4 ctx · 1s · 3.0 tok/s", "llama3.1:8b"),
    ("ollama (llama3.1:8b) · 250ms", "llama3.1:8b"),
    ("3 reply + 4 ctx · 1s · 3.0 tok/s", "LLAMA3.1"),  # no model named: the cue
    ("ollama (gemma4:latest) · 3 reply + 4 ctx · 1s · 3.0 tok/s", "LLAMA3.1"),  # names another model: the cue
])
def test_turn_model_is_exact_when_the_stats_line_names_it(stats, model):
    text = session_text(one_turn("q", "a", stats=stats))
    assert spmd.turns(spmd.loads(text))[0].model == model


# ----------------------------------------------------------------- turns


def test_turn_shapes_the_app_records():
    normal = one_turn("q", "a")
    harvey_only = spmd.Turn(WHEN, "q2", None, None, harvey="Error: Ollama is not running.")
    stopped = one_turn("q3", "partial ans", notes=["reply: stopped by the user"])
    errored = spmd.Turn(WHEN, "q4", MODEL, None, notes=["reply: error: timeout — read timed out"])
    pending = spmd.Turn(WHEN, "q5", MODEL, None)
    text = session_text(normal, harvey_only, stopped, errored, pending)
    got = spmd.turns(spmd.loads(text))
    assert got[:3] == [normal, harvey_only, stopped]
    # Without a stats line the file only carries the cue.
    assert got[3:] == [dataclasses.replace(errored, model="LLAMA3.1"), dataclasses.replace(pending, model="LLAMA3.1")]
    assert "HARVEY\nError: Ollama is not running.\n" in text


def test_harvey_and_model_both_speak_in_one_turn():
    turn = spmd.Turn(WHEN, "q", MODEL, "the answer", STATS, harvey="Note: the file was trimmed.")
    assert spmd.turns(spmd.loads(session_text(turn))) == [turn]


def test_continuation_without_a_turn_before_stays_a_turn():
    scene = spmd.chat_scene(spmd.Turn(WHEN, None, MODEL, "orphan reply", STATS), USER, WS)
    got = spmd.turns(spmd.Screenplay({}, [scene]))
    assert got == [spmd.Turn(WHEN, None, MODEL, "orphan reply", STATS)]


def test_a_second_unanswered_reply_is_not_merged_into_an_answered_turn():
    first = spmd.chat_scene(one_turn("q", "a"), USER, WS)
    extra = spmd.chat_scene(spmd.Turn(WHEN, None, MODEL, "more", STATS), USER, WS)
    got = spmd.turns(spmd.Screenplay({}, [first, extra]))
    assert [t.user_text for t in got] == ["q", None]


analysis_st = st.builds(
    spmd.ChunkAnalysis, file=st.sampled_from(["document.md", "my notes, v2.txt", "a b/c.go"]),
    chunks=st.integers(1, 30), model=st.sampled_from(["LLAMA3", "llama3.1:8b"]),
    boundary=st.sampled_from(["paragraph", "block"]), chunk_size=st.integers(100, 5000),
    instruction=st.one_of(any_text, grammar_text), when=st.just(WHEN + timedelta(seconds=8)),
    results=st.lists(st.sampled_from(["ok", "error: context exceeded", "cancelled", "error: a — b"]), max_size=5),
    synthesis=st.sampled_from([None, "ok", "error: timeout", "cancelled"]))
note_st = st.sampled_from(["reply: stopped by the user", "reply: error: timeout — slow",
                           "model switch: mistral:latest (ollama) at 2026-06-27 10:00:00", "rag: 3 chunks"])
turn_st = st.builds(
    spmd.Turn, when=st.just(WHEN), user_text=st.one_of(any_text, grammar_text),
    model=st.sampled_from([None, MODEL, "mistral:latest"]), reply=st.one_of(st.none(), any_text, grammar_text),
    stats=st.sampled_from([None, STATS]), notes=st.lists(note_st, max_size=3),
    harvey=st.one_of(st.none(), any_text), analysis=st.one_of(st.none(), analysis_st))


def canonical(turn):
    """What a turn reads back as: model-switch notes first; the model as the cue
    written for the reply (or "Forwarding to"), unless the stats line names it."""
    switches = [n for n in turn.notes if n.startswith("model switch:")]
    notes = switches + [n for n in turn.notes if not n.startswith("model switch:")]
    cue = spmd.model_cue(turn.model) if turn.model else None
    if turn.reply is not None:
        named = cue or "MODEL"
    else:
        named = None if turn.analysis is not None else cue
    model = MODEL if turn.stats and named in (None, "LLAMA3.1") else named  # STATS names llama3.1:8b
    return dataclasses.replace(turn, notes=notes, model=model)


answer_st = st.builds(spmd.Answer, model=st.sampled_from(["MISTRAL", "CLAUDE", "GEMMA4"]),
                      text=st.one_of(any_text, grammar_text))


@PROPERTY
@given(reply=st.one_of(any_text, grammar_text), more=st.lists(answer_st, min_size=1, max_size=3),
       notes=st.lists(note_st, max_size=2))
def test_multi_model_turns_read_back(reply, more, notes):
    turn = spmd.Turn(WHEN, "@a @b ask", "LLAMA3.1", reply, None, notes, more=more)
    text = session_text(turn)
    assert spmd.turns(spmd.loads(text)) == [canonical(turn)]
    assert FountainParser().validate(text) == []


@PROPERTY
@given(turn_list=st.lists(turn_st, min_size=1, max_size=4))
@example(turn_list=[spmd.Turn(when=datetime(2026, 6, 27, 10, 4), user_text="ATO:\u2028", model=None, reply=None)])
def test_any_sequence_of_turns_reads_back(turn_list):
    text = session_text(*turn_list)
    assert spmd.turns(spmd.loads(text)) == [canonical(t) for t in turn_list]
    assert FountainParser().validate(text) == []


# -------------------------------------------------------- chunk analysis


def test_seed_000_file_reads_as_one_turn_with_its_analysis():
    play = spmd.read_file(DATA / "seed000_chunk.spmd")
    (turn,) = spmd.turns(play)
    assert turn.user_text == "Read document.md and summarize the methodology section."
    assert turn.harvey.startswith("Context overflow: document.md is approximately 68,000 tokens;\n")
    assert (turn.model, turn.reply) == ("LLAMA3", "The methodology section describes a three-phase experiment…")
    a = turn.analysis
    assert (a.file, a.chunks, a.model, a.boundary, a.chunk_size) == ("document.md", 12, "LLAMA3", "paragraph", 1500)
    assert a.instruction == "Summarize the methodology and findings of each section. @llama3"
    assert a.results == ["ok"] * 12 and a.synthesis == "ok"
    assert a.when == datetime(2026, 6, 27, 10, 4, 8)


def test_chunk_scene_layout():
    a = spmd.ChunkAnalysis("doc.md", 2, "LLAMA3", "paragraph", 6000, "Summarize each section.",
                           datetime(2026, 6, 27, 10, 4, 8), ["ok", "error: context exceeded"], "ok")
    text = spmd.dumps(spmd.Screenplay({}, [spmd.chunk_scene(a, "rsdoiel")]))
    assert text == """\
FADE IN:


INT. CHUNK ANALYSIS — doc.md 2026-06-27 10:04:08

[[chunk: file=doc.md, chunks=2, model=LLAMA3, boundary=paragraph, chunk-tokens=6000]]

RSDOIEL
Summarize each section.

[[chunk-result: 1/2 — ok]]

[[chunk-result: 2/2 — error: context exceeded]]

[[synthesis: model=LLAMA3 — ok]]

HARVEY
Chunk analysis complete. Synthesized result injected into conversation.


>THE END.<
"""
    assert FountainParser().validate(text) == []


@PROPERTY
@given(a=analysis_st)
def test_chunk_analysis_reads_back(a):
    scene = spmd.loads(spmd.dumps(spmd.Screenplay({}, [spmd.chunk_scene(a, USER)]))).scenes[0]
    assert spmd.read_chunk_scene(scene) == a


def test_turns_skip_chunk_scenes_and_other_scenes():
    play = spmd.read_file(DATA / "seed000_chunk.spmd")
    assert spmd.read_chunk_scene(play.scenes[0]) is None
    play.scenes.insert(1, spmd.Scene("INT. AGENT MODE 2026-06-27 10:04:05",
                                     [spmd.Element("dialogue", "yes", "RSDOIEL")]))
    assert len(spmd.turns(play)) == 1


# ----------------------------------------------------------- housekeeping


def test_a_thousand_turns_parse_fast():
    turn = one_turn("Question?\n\nWith /* code */", "# Answer\n\n" + "Words here. " * 40 + "\n```c\n#x\n```")
    play = spmd.Screenplay(spmd.new_title_page(USER, MODEL, "ollama", WHEN))
    for i in range(1000):
        play.scenes += spmd.turn_scenes(dataclasses.replace(turn, when=WHEN + timedelta(seconds=i)), USER, WS)
    text = spmd.dumps(play)
    best = min(_timed(lambda: spmd.turns(spmd.loads(text))) for _ in range(3))
    print(f"1,000 turns ({len(text):,} characters) parse in {best:.3f} s of CPU")
    assert best < 0.5
    assert len(spmd.turns(spmd.loads(text))) == 1000


def _timed(fn):
    """CPU seconds of this thread for ``fn()``: other processes on the cores (a parallel test run,
    other jobs) stretch wall time, not this."""
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def test_module_does_not_import_flask():
    modules = sorted(Path(spmd.__file__).parent.glob("*.py"))
    assert len(modules) > 1                                  # the package's modules, not only its façade
    for module in modules:
        tree = ast.parse(module.read_text(encoding="utf-8"))
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert "flask" not in imported, module


def test_the_round_trip_check_catches_a_harvey_style_writer(monkeypatch):
    """Guard against tests that cannot fail: with Harvey's raw writing the checks above go red."""
    from app.sessions.fountain import codec

    monkeypatch.setattr(codec, "_encode_line", lambda line, first: line)
    monkeypatch.setattr(codec, "_decode_line", lambda line: line)
    texts = ["", "\nleading blank", "a\n\nINT. KITCHEN 2026-01-01 10:00", "a\n\nRSDOIEL\nhi", "a\n\n\nb"]
    lost = [t for t in texts if spmd.turns(spmd.loads(session_text(one_turn("q", t))))[0].reply != t]
    assert lost == texts
    assert FountainParser().validate(session_text(one_turn("q", NASTY_REPLY))) != []


def test_chunk_passages_are_notes_that_read_back():
    """#15: a cited chunk's range, heading path and quoted words survive the file (odd characters too)."""
    passages = {2: spmd.CitedPassage(2, 1200, 2480, (31, 58), None, "Setup › Keys, [[odd]] ones",
                                      ["the vault code is 4471", "ends in ]] here"]),
                3: spmd.CitedPassage(3, 2480, 3900, (58, 90), (4, 5))}
    a = spmd.ChunkAnalysis("doc.pdf", 3, "LLAMA3", "paragraph", 1500, "Find the codes.",
                           datetime(2026, 6, 27, 10, 4, 8), ["ok", "ok", "ok"], "ok",
                           passages=passages, source="sha256:0123abcd", relevant=2)
    text = spmd.dumps(spmd.Screenplay({}, [spmd.chunk_scene(a, "rsdoiel")]))
    assert "[[chunk-passage: 2/3 — lines 31-58, chars 1200-2480 — Setup › Keys, [ [odd] ] ones]]" in text
    assert "[[chunk-quote: 2/3 — ends in ] ] here]]" in text
    assert "[[chunk-passage: 3/3 — lines 58-90, chars 2480-3900, pages 4-5]]" in text
    assert FountainParser().validate(text) == []
    back = spmd.read_chunk_scene(spmd.loads(text).scenes[0])
    assert back.results == ["ok", "ok", "ok"] and back.source == "sha256:0123abcd" and back.relevant == 2
    assert back.passages[2].quotes == ["the vault code is 4471", "ends in ] ] here"]
    assert back.passages[2].heading == "Setup › Keys, [ [odd] ] ones"
    assert back.passages[3] == passages[3]


# -- issue 23 item 8: the streaming reader reads what the writer wrote, however long ---------

def test_a_long_session_of_every_kind_of_turn_reads_back_exactly():
    """Thousands of turns (escaped replies, notes, analyses, other models) through dumps -> loads ->
    turns: the same turns, and the same scenes, as one reads them a turn at a time."""
    kinds = [one_turn("q", NASTY_REPLY), one_turn("two\n\nparagraphs", "INT. NOT A HEADING\n\n  \n/* x */ [[y]]"),
             one_turn("@other hi", "a\r\nb\u240d", notes=["stopped by user"]),
             one_turn("", "(aside) text"), one_turn("last", "")]
    turns = []
    for i in range(3000):
        turn = dataclasses.replace(kinds[i % len(kinds)], when=datetime(2026, 6, 27) + timedelta(seconds=i))
        turn.user_text = f"{turn.user_text} #{i}"
        turns.append(turn)
    text = session_text(*turns)
    play = spmd.loads(text)
    assert spmd.turns(play) == turns
    one_by_one = [scene for turn in turns for scene in spmd.loads(session_text(turn)).scenes]
    assert play.scenes == one_by_one


@pytest.mark.parametrize("cut", [1, 2, 7, 30, 61])
def test_a_torn_long_file_keeps_every_complete_turn(cut):
    """A crash mid-write: everything before the torn paragraph reads as it did (streamed, one paragraph
    of look-ahead for the tail)."""
    turns = [dataclasses.replace(one_turn(f"q{i}", f"a{i}"), when=datetime(2026, 6, 27) + timedelta(minutes=i))
             for i in range(200)]
    text = session_text(*turns)
    torn = text[:-cut]
    read = spmd.turns(spmd.loads(torn))
    assert read[:199] == turns[:199] and len(read) == 200
    if cut <= len(f"\n{spmd.END_MARKER}\n"):           # only the end marker was torn
        assert read == turns
    else:                                                # the stats line was: it goes, the reply stays
        assert read[-1].reply == "a199" and read[-1].stats is None


def test_the_cycle_collector_is_paused_only_while_parsing():
    import gc

    from app.sessions.fountain import parser

    text = session_text(one_turn("q", "a"))
    assert gc.isenabled()
    seen = []
    real = parser._append_elements
    try:
        parser._append_elements = lambda *args: seen.append(gc.isenabled()) or real(*args)
        spmd.loads(text)
    finally:
        parser._append_elements = real
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        spmd.turns(spmd.loads(text))
        assert not gc.isenabled()                 # a collector someone else paused stays paused
    finally:
        gc.enable()
    with pytest.raises(ZeroDivisionError):
        with parser.collector_paused():
            1 / 0
    assert gc.isenabled()


def test_a_file_torn_inside_the_last_reply_keeps_what_was_written_of_it():
    turns = [dataclasses.replace(one_turn(f"q{i}", f"a{i}"), when=datetime(2026, 6, 27) + timedelta(minutes=i))
             for i in range(200)]
    text = session_text(*turns)
    read = spmd.turns(spmd.loads(text[:text.rindex("a199") + 3]))
    assert read[:199] == turns[:199] and read[-1].reply == "a19" and read[-1].stats is None


# -- the reader's fast paths (issue 23 item 8) answer exactly as the general rule they stand for --------

_SHAPES = st.lists(st.sampled_from([*"ab\\\u200b\u240d \t\n\u3000\x1c(", "INT. "]), max_size=12).map("".join)


@given(_SHAPES)
@settings(max_examples=400, deadline=None, database=None)
def test_the_quick_escape_check_is_the_escape_regex(written):
    from app.sessions.fountain import codec

    assert codec._needs_decoding(written) == bool(codec._ESCAPED.search(written))


_DATES = st.one_of(st.dates().map(lambda d: f"{d.year:04d}-{d.month:02d}-{d.day:02d}"),
                   st.sampled_from(["2026-02-30", "2026-13-01", "２０２６-01-01"]))
_CLOCKS = st.one_of(st.times().map(lambda t: f"{t:%H:%M:%S}"), st.times().map(lambda t: f"{t:%H:%M}"),
                    st.times().map(lambda t: f"{t.hour}:{t:%M:%S}"), st.sampled_from(["", "24:00:00", "08:00:60"]))
_STAMPS = st.builds(lambda head, date, sep, clock, tail: f"{head}{date}{sep}{clock}{tail}",
                    st.sampled_from(["", "INT. HARVEY AND PI TALKING ", "x 1", "x 12"]), _DATES,
                    st.sampled_from([" ", "T", "  ", "-", "x"]), _CLOCKS, st.sampled_from(["", "", " ", "\n", "x"]))


@given(_STAMPS)
@settings(max_examples=400, deadline=None, database=None)
def test_the_heading_time_read_from_its_last_characters_is_the_searched_one(heading):
    from app.sessions.fountain import parser

    m = parser._TIMESTAMP.search(heading)
    if m is None:
        expected = None
    else:
        clock = (m[2] or "00:00").split(":")
        try:
            expected = datetime(*(int(p) for p in m[1].split("-")), *(int(p) for p in clock))
        except ValueError:
            expected = None
    assert parser._timestamp(heading) == expected
