"""Issue 45: a list, count or total question gets the list path whatever the file's size; one model call
when the file fits.

"List every function defined in colorsys.py" on a file that fits went to plain chat (the model invented
1,024 tokens of defs), while the same question on a big file got the app's computed list.  Now the message
is answered on the list path: one map call over the whole file lists the items, the app counts them and
writes the answer (no synthesis call), and the answer says it read the message as a list question, with
"Answer in chat instead" undoing that in one tap.

Whether a message asks that is a guess (``answers.chat_list``).  It is measured here on three labelled
corpora of realistic chat messages (``data/chat_lists/``), its precision and recall pinned
(style-examples §18), and the flow runs through waitress against a scripted Ollama.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from app.analysis import answers, mapreduce
from conftest import make_config
from scripted_ollama import Reply
from waiting import wait_for

DATA = Path(__file__).parent / "data" / "chat_lists"
# "tuned": 60 messages the rules were written against.  "held-out": 90 written by someone who had not seen
# the rules, measured once as they came (precision 0.76, recall 0.55), then its general misses fixed.  So a
# third, "fresh": 70 more by another writer who saw neither, measured once as they came (precision 0.82,
# recall 0.87: "count me in!", "total noob question:", "walk me through every function … and explain",
# "average of the readings", "what dependencies r in", "the names of everyone mentioned"), then those
# general misses fixed as well.  The next change of the rules wants a new held-out corpus.
CORPORA = {name: yaml.safe_load((DATA / f"{name}.yaml").read_text("utf-8"))["messages"]
           for name in ("tuned", "held_out", "fresh")}

# As measured now (a change that lowers one fails).
PINNED = {"tuned": (1.0, 1.0), "held_out": (1.0, 1.0), "fresh": (0.96, 0.96)}
# Known misses, each with why (style-examples §19): any other wrong message fails.
KNOWN_MISSES = {
    "How many servings does pancakes.md make?":
        "one figure the recipe states, asked like a count; the list path lists the recipe's servings line "
        "and the file's own figure comes first (undone in one tap)",
    "Please can you tell me the side effects which are write in leaflet.pdf":
        "the list is asked in words no rule reads (\"tell me the side effects which are write in\"): it is "
        "answered in plain chat, with the leaflet read whole",
}


def test_the_corpora_are_what_they_say():
    for name, messages in CORPORA.items():
        texts = [m["text"] for m in messages]
        assert len(texts) == len(set(texts)) and len(texts) >= 60, name
        assert 0.3 <= sum(m["list"] for m in messages) / len(messages) <= 0.6, name
        for m in messages:
            assert re.search(r"\b[\w-]+\.[a-z]{2,4}\b", m["text"]), m["text"]     # names a file


@pytest.mark.parametrize("name", list(CORPORA))
def test_the_guess_of_a_list_question_is_measured_and_pinned(name, capsys):
    tp = fp = fn = 0
    wrong = []
    for m in CORPORA[name]:
        ask = answers.chat_list(m["text"])
        said = ask.op != "none"
        if said:
            assert ask.target and ask.words, m["text"]           # what it read, and the words it read it from
        tp += said and m["list"]
        fp += said and not m["list"]
        fn += m["list"] and not said
        if said != m["list"] and m["text"] not in KNOWN_MISSES:
            wrong.append(f"{m['text']!r}: read as {ask.op} {ask.target!r}, labelled {'list' if m['list'] else 'chat'}")
    precision, recall = tp / max(1, tp + fp), tp / max(1, tp + fn)
    with capsys.disabled():
        print(f"\nissue 45, list questions in the chat ({name}, {len(CORPORA[name])}): precision {precision:.2f}, "
              f"recall {recall:.2f}")
    assert not wrong, wrong
    assert precision >= PINNED[name][0] and recall >= PINNED[name][1], (precision, recall)


def test_a_card_instruction_keeps_its_reading():
    """The chat's guess adds to ``asked`` without changing what a card's instruction is read as."""
    assert answers.asked("List the main ideas of the essay.").op == "list"
    assert answers.chat_list("List the main ideas of essay.md").op == "none"
    assert answers.list_target("List every function defined in colorsys.py") == "function"


# -- through waitress ---------------------------------------------------------------------------------

COLORSYS = '''"""Conversion functions between RGB and other color systems."""

__all__ = ["rgb_to_yiq", "yiq_to_rgb", "rgb_to_hls", "hls_to_rgb", "rgb_to_hsv", "hsv_to_rgb"]

ONE_THIRD = 1.0/3.0


def rgb_to_yiq(r, g, b):
    y = 0.30*r + 0.59*g + 0.11*b
    return (y, 0.74*(r-y) - 0.27*(b-y), 0.48*(r-y) + 0.41*(b-y))


def yiq_to_rgb(y, i, q):
    return (y + 0.9468822170900693*i, y - 0.27478764629897834*i, y - 1.1085450346420322*i)


def rgb_to_hls(r, g, b):
    maxc, minc = max(r, g, b), min(r, g, b)
    return maxc, (minc+maxc)/2.0, 0.0


def _v(m1, m2, hue):
    return m1 if hue < ONE_THIRD else m2


def rgb_to_hsv(r, g, b):
    return max(r, g, b), 0.0, 0.0
'''
DEFS = re.findall(r"^def (\w+)\(.*\):$", COLORSYS, re.M)


def lister(body) -> Reply:
    """A careful model: asked for a list (LIST_SCHEMA), every ``def`` line of what it was given; asked in
    the chat, a plain answer that says what it saw."""
    if body.get("format") == mapreduce.LIST_SCHEMA:
        text = body["messages"][-1]["content"]
        items = [{"item": name, "quote": line, "value": None, "unit": None}
                 for line, name in re.findall(r"^(def (\w+)\(.*\):)$", text, re.M)]
        return Reply(text=json.dumps({"relevant": bool(items), "items": items, "stated": [], "confidence": 4}),
                     piece_size=300)
    return Reply(text="A plain chat answer about colorsys.py.")


@pytest.fixture
def colorsys_live(tmp_path, scripted, make_live):
    scripted.script = lister
    config = make_config(tmp_path, scripted.url)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    (workspace / "colorsys.py").write_text(COLORSYS)
    (workspace / "notes.md").write_text("# Notes\n\nThe colour module converts between colour systems.\n")
    return make_live(config), scripted


def settled_turn(live, name: str, index: int):
    wait_for(lambda: not live.services.jobs.for_session(name) and not live.services.activities.working(name), 20,
             what="the list to be answered")
    return live.services.store.load(name).turns[index]


def test_a_list_question_on_a_file_that_fits_is_one_model_call_and_the_apps_list(colorsys_live):
    live, scripted = colorsys_live
    name = live.open_session()
    sent = live.post(f"/s/{name}/messages", data={"message": "List every function defined in colorsys.py"})
    assert sent.status_code == 200, sent.text
    assert "Listing the functions in colorsys.py" in sent.text      # the turn shows what runs, no card to answer
    turn = settled_turn(live, name, 0)
    chats = scripted.chats()
    assert len(chats) == 1                                         # one request: no synthesis call
    assert chats[0].format == mapreduce.LIST_SCHEMA
    assert "def rgb_to_hsv(r, g, b):" in chats[0].body["messages"][-1]["content"]     # the whole file, one chunk
    assert chats[0].num_ctx                                        # sized like every request
    # the whole file's list is the answer: it may be as long as a chat reply, not one chunk's share
    assert chats[0].body["options"]["num_predict"] == live.config.chat.reply_tokens > live.config.chunking.map_reply_tokens
    for fn in DEFS:
        assert f"- {fn.replace('_', chr(92) + '_')} (line" in turn.reply, turn.reply
    assert turn.analysis is not None and turn.analysis.chunks == 1
    said = " ".join(turn.notes)
    assert "Read as a list question: one model call listed the functions in colorsys.py" in said
    assert "List: 1 model call" in said

    page = live.get(f"/s/{name}").text
    assert f"<strong>Counted by the app:</strong> {len(DEFS)} functions in the whole file" in page
    assert "Not a list question? Answer in chat instead" in page
    assert "How the list was made: colorsys.py read whole in 1 model call, no synthesis" in page
    assert "Chunk analysis" not in page.split('id="turn-0"', 1)[1] and "Coverage" not in page


def test_answer_in_chat_instead_undoes_the_guess_in_one_tap(colorsys_live):
    live, scripted = colorsys_live
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "How many functions are in colorsys.py?"})
    settled_turn(live, name, 0)
    undo = live.post(f"/s/{name}/turns/0/regenerate", data={"list": "0"})
    assert undo.status_code == 200, undo.text
    turn = settled_turn(live, name, 1)
    chats = scripted.chats()
    assert len(chats) == 2 and chats[1].format is None              # a plain chat request …
    assert "def rgb_to_hsv(r, g, b):" in chats[1].body["messages"][-1]["content"]     # … with the file read
    assert turn.reply == "A plain chat answer about colorsys.py." and turn.analysis is None
    # the list exchange is replaced in what the model sees next, as any regenerate's
    live.post(f"/s/{name}/messages", data={"message": "thanks"})
    settled_turn(live, name, 2)
    history = [m["content"] for m in scripted.chats()[-1].body["messages"]]
    assert sum("How many functions are in colorsys.py?" in m for m in history) == 1


def test_other_questions_and_several_files_stay_plain_chat(colorsys_live):
    live, scripted = colorsys_live
    name = live.open_session()
    for i, message in enumerate(("Summarize colorsys.py for me", "List the main ideas of notes.md",
                                 "How many functions are in colorsys.py and notes.md?")):
        live.post(f"/s/{name}/messages", data={"message": message})
        assert settled_turn(live, name, i).analysis is None, message
    assert [c.format for c in scripted.chats()] == [None, None, None]


def test_a_model_that_fails_leaves_the_message_and_offers_the_chat_answer(colorsys_live):
    live, scripted = colorsys_live
    scripted.script = lambda body: (Reply(text="boom", status=500) if body.get("format") else lister(body))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "List every function defined in colorsys.py"})
    job = wait_for(lambda: next(iter(live.services.jobs.for_session(name)), None), 10, what="the job")
    wait_for(lambda: job.state in ("failed", "interrupted"), 20, what=f"the list to fail (it is {job.state})")
    page = live.get(f"/s/{name}").text
    assert "List every function defined in colorsys.py" in page and "Answer in chat instead" in page
    live.post(f"/s/{name}/turns/0/regenerate", data={"list": "0"})
    turn = wait_for(lambda: (t := live.services.store.load(name).turns)[-1].reply and t[-1], 20,
                    what="the chat answer")
    assert turn.reply == "A plain chat answer about colorsys.py."


def test_a_list_call_stopped_as_a_loop_still_counts_what_it_wrote(colorsys_live):
    """A looping small model's list call is stopped (issue 44); its cost on the answer was "0 generated
    tokens, 0 s": now the pieces it streamed and the time it took, as the app saw them."""
    live, scripted = colorsys_live
    looping = json.dumps({"relevant": True, "items": [{"item": "rgb_to_yiq", "quote": "def rgb_to_yiq(r, g, b):"}],
                          "stated": [], "confidence": 4})[:-1] + ", " + '"note": "and so on and so on", ' * 60
    scripted.script = lambda body: (Reply(text=looping, piece_size=8, token_delay=0.002)
                                    if body.get("format") else lister(body))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "List every function defined in colorsys.py"})
    turn = settled_turn(live, name, 0)
    cost = next(n for n in turn.notes if "List: 1 model call" in n)
    generated = int(re.search(r"([\d,]+) generated tokens", cost).group(1).replace(",", ""))
    assert generated > 10, cost
