"""Issue 44: a reply that repeats itself is stopped as soon as the loop is clear, kept up to the loop's first
turn, and said ("stopped: the model was repeating itself"); replies that repeat on purpose (tables, lists,
a refrain) are not stopped.

The measure (``app/work/loops.py``) is run over legitimate repetitive replies written for this
(``data/loops/legit.yaml``) and over looping replies: the issue's own and those the bundled models wrote
(``data/loops/recorded.json``, labelled by a person in ``data/loops/labels.yaml``; recorded with
``bench/record_loops.py``). Then through waitress, with a scripted server that loops: a chat reply, a
synthesis, a passages answer and a map call each stop at the loop.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from app.work.loops import LoopWatch, find_loop
from conftest import send_and_finish
from scripted_ollama import Reply

DATA = Path(__file__).parent / "data" / "loops"
LEGIT = yaml.safe_load((DATA / "legit.yaml").read_text("utf-8"))["replies"]
ISSUE_LOOP = "This is in the last 2 sentences, and I will add them in a future response. "


@pytest.mark.parametrize("reply", LEGIT, ids=[r["id"] for r in LEGIT])
def test_a_reply_that_repeats_on_purpose_is_not_stopped(reply):
    assert find_loop(reply["text"]) is None
    watch = LoopWatch()
    assert all(watch.feed(reply["text"][i:i + 7]) is None for i in range(0, len(reply["text"]), 7))


def test_the_issues_loop_is_stopped_at_its_first_turn():
    text = "The codes are listed above. " + ISSUE_LOOP * 40
    watch = LoopWatch()
    found = next(f for i in range(0, len(text), 5) if (f := watch.feed(text[i:i + 5])) is not None)
    assert text[:found.keep] == "The codes are listed above. " + ISSUE_LOOP.strip()
    assert len(watch.text) < len(text) // 4            # clear after a few turns, not after forty


def streamed_loop(text: str, piece: int = 6):
    """The loop a reply is stopped at when it streams in pieces, as the app reads it (None: never)."""
    watch = LoopWatch()
    return next((f for i in range(0, len(text), piece) if (f := watch.feed(text[i:i + piece])) is not None), None)


def recorded() -> list[tuple[dict, bool]]:
    """The bundled models' replies and their labels (True: looping)."""
    path = DATA / "recorded.json"
    if not path.exists():
        return []
    replies = json.loads(path.read_text("utf-8"))
    labels = yaml.safe_load((DATA / "labels.yaml").read_text("utf-8"))["labels"]
    return [(r, labels[i]) for i, r in enumerate(replies) if i in labels]


def test_the_bundled_models_loops_are_found_and_their_other_replies_left_alone(capsys):
    cases = recorded()
    assert cases, "data/loops/recorded.json and labels.yaml hold the bundled models' replies"
    found = [(streamed_loop(r["reply"]) is not None, looping) for r, looping in cases]
    tp = sum(1 for f, t in found if f and t)
    fp = sum(1 for f, t in found if f and not t)
    fn = sum(1 for f, t in found if not f and t)
    with capsys.disabled():
        print(f"\nissue 44 loops: {len(cases)} recorded replies, {tp + fn} looping; precision "
              f"{tp / max(1, tp + fp):.2f}, recall {tp / max(1, tp + fn):.2f}")
    assert fp == 0                                       # a reply that does not loop is never stopped
    assert tp / max(1, tp + fn) >= PINNED_RECALL


# Measured 2026-12-06 on 40 recorded replies (29 looping): 23 stopped, none wrongly. The six missed: two
# with a fact that changes a word as well as its number (items 9, 24), a count with skips and doubles
# (3, 16), a reply cut by its cap after four numbered turns (8) and a bare count 1. to 162. (17).
PINNED_RECALL = 0.79


def test_a_sentence_with_only_its_count_changing_is_a_loop_and_a_list_whose_data_count_is_not():
    marker = "".join(f"[{i % 12 + 1}] This vault code opens a locker.\n" for i in range(40))
    found = streamed_loop("The codes:\n" + marker)
    assert found is not None
    assert ("The codes:\n" + marker)[:found.keep].endswith("This vault code opens a locker.")
    data = "".join(f"Chunk {i} of 40: vault code VC-{i:03} opens locker {i}.\n" for i in range(1, 41))
    assert streamed_loop(data) is None                 # chunk, code and locker count together: data


def test_a_run_of_one_digit_is_stopped_and_a_googol_is_not():
    text = "The moon is 3700 million miles (6" + "0" * 900
    found = streamed_loop(text, piece=3)
    assert found is not None and text[:found.keep].endswith("(60000000000")
    assert streamed_loop("A googol: 1" + "0" * 100 + ".") is None


# -- through waitress ----------------------------------------------------------------------------------

def looping(body) -> Reply:
    return Reply(text="Here is what I found. " + ISSUE_LOOP * 60, piece_size=12, token_delay=0.01)


def test_a_looping_chat_reply_is_stopped_kept_to_its_first_turn_and_said(live, scripted):
    scripted.script = looping
    name = live.open_session()
    send_and_finish(live, name, "Tell me about the harbour.")
    turn = live.services.store.load(name).turns[-1]
    assert turn.reply == "Here is what I found. " + ISSUE_LOOP.strip()
    assert any("repeating itself" in n for n in turn.notes)
    chat = scripted.chats()[-1]
    assert chat.disconnected or not chat.answered      # the app hung up: the server stopped writing
    page = live.get(f"/s/{name}").text
    assert "Stopped: the model was repeating itself." in page and "Regenerate" in page
    next_turn = send_and_finish(live, name, "Thanks.")
    assert next_turn.status_code == 200
    history = scripted.chats()[-1].body["messages"]
    assert sum(m["content"].count("future response") for m in history) == 1   # the loop is not sent on


def test_a_reply_stopped_as_a_loop_is_continued_unwatched_in_one_tap(live, scripted):
    """The loop stop is a guess: "Not a loop? Continue" undoes it. The model is shown its reply so far and
    asked to go on, and what it writes then is not watched (the user said it was no loop)."""
    from app.chat.prepare import CONTINUE_STOPPED_PROMPT
    from app.sessions import notes

    scripted.script = looping
    name = live.open_session()
    send_and_finish(live, name, "Tell me about the harbour.")
    page = live.get(f"/s/{name}").text
    assert "Not a loop? Continue" in page
    rest = " " + ISSUE_LOOP * 5
    scripted.script = lambda body: Reply(text=rest if body["messages"][-1]["content"] == CONTINUE_STOPPED_PROMPT
                                         else "unexpected", piece_size=12)
    assert live.post(f"/s/{name}/turns/0/continue").status_code == 200
    list(live.sse(f"/s/{name}/turns/0/stream"))
    turn = live.services.store.load(name).turns[-1]
    assert turn.reply.rstrip() == "Here is what I found. " + ISSUE_LOOP.strip() + rest.rstrip()   # all five turns
    assert not notes.read(turn.notes).looped and "Not a loop?" not in live.get(f"/s/{name}").text


def test_a_looping_synthesis_and_a_looping_map_call_stop_and_say_so(tmp_path, scripted, make_live):
    from careful import analyse
    from test_analysis import big_file_config

    def script(body):
        if body["messages"][0]["content"].startswith("You combine"):
            return Reply(text="The file is about the methodology. " + ISSUE_LOOP * 80, piece_size=16)
        if "Chunk 2 of" in body["messages"][-1]["content"]:
            return Reply(text=json.dumps({"relevant": True, "points": [{"point": "the controls", "quote": ""}],
                                          "confidence": 3}) + " " + "and so on and so on " * 40, piece_size=16)
        return Reply(text=json.dumps({"relevant": True, "points": [{"point": "a three-phase experiment",
                                                                    "quote": ""}], "confidence": 4}))

    scripted.script = script
    live = make_live(big_file_config(tmp_path, scripted))
    name, job = analyse(live, "big.md", "Summarize the methodology.", list_of="")
    assert job.state == "done", job.message
    turn = live.services.store.load(name).turns[-1]
    assert turn.reply.startswith("The file is about the methodology. " + ISSUE_LOOP.strip())
    assert turn.reply.count("future response") == 1
    assert "The synthesis was stopped: the model was repeating itself" in turn.reply
    assert job.results[1].status == "ok"                     # chunk 2's answer, cut where it began to loop
    scripted.script = lambda body: Reply(text="You are welcome.")
    send_and_finish(live, name, "Thanks.")
    free, window = free_tokens(live, name)
    assert free > window // 2                                # the next message has most of the window


def free_tokens(live, name: str) -> tuple[int, int]:
    """The status line's "N of M tokens free"."""
    import re
    found = re.search(r"([\d,]+) of ([\d,]+) tokens free", live.get(f"/s/{name}").text)
    return int(found.group(1).replace(",", "")), int(found.group(2).replace(",", ""))


def test_a_looping_passages_answer_stops_and_says_so(tmp_path, scripted, make_live):
    from careful import analyse
    from test_analysis import big_file_config

    def script(body):
        if "answer questions about a file from passages" in body["messages"][0]["content"]:
            return Reply(text=json.dumps({"answer": "The methodology has three phases. " + ISSUE_LOOP * 50,
                                          "in_passages": True})[:-40], piece_size=16)
        return Reply(text="unused")

    scripted.script = script
    live = make_live(big_file_config(tmp_path, scripted))
    name, job = analyse(live, "big.md", "What is the methodology?", way="retrieve")
    assert job.state == "done", job.message
    reply = live.services.store.load(name).turns[-1].reply
    assert reply.count("future response") <= 1 and "The answer was stopped: the model was repeating itself" in reply


def test_a_waiting_analysis_names_the_one_it_waits_for_and_offers_to_stop_it(tmp_path, scripted, make_live):
    from careful import CHUNK
    from test_analysis import big_file_config
    from waiting import wait_for

    def slow(body):
        m = CHUNK.search(body["messages"][-1]["content"])
        return Reply(text=f"Chunk {m.group(1) if m else '?'} notes.", token_delay=0.3, piece_size=2)

    scripted.script = slow
    live = make_live(big_file_config(tmp_path, scripted))
    first = live.open_session()
    live.post(f"/s/{first}/messages", data={"message": "Summarize big.md"})
    running = live.services.jobs.open_for(first)
    live.post(f"/s/{first}/analysis/{running.id}/start", data={"instruction": "Summarize.", "scope": "all"})
    wait_for(lambda: running.state == "running", 10, what="the first analysis to run")
    second = live.services.store.create("tiny:1b").name
    live.post(f"/s/{second}/messages", data={"message": "Summarize big.md"})
    waiting = live.services.jobs.open_for(second)
    card = live.get(f"/s/{second}").text
    assert "starts after the analysis of big.md" in card
    html = live.post(f"/s/{second}/analysis/{waiting.id}/start", data={"instruction": "Summarize.", "scope": "all"}).text
    assert waiting.state == "queued"
    assert "Waiting for the analysis of" in html and f'href="/s/{first}#turn-{running.turn}"' in html
    assert "Stop that analysis" in html
    assert live.post(f"/s/{first}/analysis/{running.id}/cancel").status_code in (200, 204)
    wait_for(lambda: waiting.state not in ("queued",), 30, what="the second analysis to start")


# -- every answer streams ------------------------------------------------------------------------------

def follow(live, file: str, question: str, **form) -> tuple[str, object, list[tuple[str, str, str]]]:
    """Start an analysis as the card does and follow its events to the end: (session, job, events)."""
    from waiting import wait_for

    name = live.open_session()
    live.post(f"/s/{name}/analysis/direct", data={"file": file})
    job = wait_for(lambda: live.services.jobs.open_for(name), 10, what="the card")
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": question, **form})
    events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60, total=120))
    wait_for(lambda: job.id not in live.services.jobs.jobs, 30, what="the job to settle")
    return name, job, events


OPENING = "The methodology has three phases: a pilot, a main run and a control run."
CLOSING = "Each phase was reviewed before the next began."
LONG_ANSWER = OPENING + " " + " ".join(f"Phase detail {i} is recorded in the file's section {i}." for i in range(30)) + " " + CLOSING


def test_a_synthesis_shows_its_text_while_it_is_written(tmp_path, scripted, make_live):
    from test_analysis import big_file_config

    def script(body):
        if body["messages"][0]["content"].startswith("You combine"):
            return Reply(text=LONG_ANSWER, piece_size=8, token_delay=0.02)
        return Reply(text=json.dumps({"relevant": True, "points": [{"point": "three phases", "quote": ""}],
                                      "confidence": 4}))

    scripted.script = script
    live = make_live(big_file_config(tmp_path, scripted))
    name, job, events = follow(live, "big.md", "Summarize the methodology.", scope="all", list_of="")
    assert job.state == "done", job.message
    written = [data for event, data, _ in events if event == "writing" and data]
    assert any(OPENING in data and CLOSING not in data for data in written)   # the text before its end
    state_at = next(i for i, (event, _, _) in enumerate(events) if event == "state")
    assert next(i for i, (event, data, _) in enumerate(events) if event == "writing" and data) < state_at
    assert live.services.store.load(name).turns[-1].reply.startswith(OPENING)


def test_a_passages_answer_shows_its_answer_not_its_json_while_it_is_written(tmp_path, scripted, make_live):
    from test_analysis import big_file_config

    def script(body):
        if "answer questions about a file from passages" in body["messages"][0]["content"]:
            return Reply(text=json.dumps({"answer": LONG_ANSWER, "in_passages": True}), piece_size=8, token_delay=0.02)
        return Reply(text="unused")

    scripted.script = script
    live = make_live(big_file_config(tmp_path, scripted))
    name, job, events = follow(live, "big.md", "What is the methodology?", way="retrieve")
    assert job.state == "done", job.message
    written = [data for event, data, _ in events if event == "writing" and data]
    partial = [data for data in written if OPENING in data and CLOSING not in data]
    assert partial and not any('"answer"' in data or "in_passages" in data for data in written)
    assert live.services.store.load(name).turns[-1].reply.startswith(OPENING)


# -- a session survives a long answer ------------------------------------------------------------------

def test_the_budget_leaves_out_the_costly_turn_before_older_short_ones():
    from app.budget import fit_history, new_budget
    from app.config import Config

    budget = new_budget(Config(), "m", 2048, 4.0)
    short = [[{"content": f"short turn {i}"}, {"content": "ok"}] for i in range(3)]
    long = [{"content": "analyse report.md"}, {"content": "the long answer " * 400}]
    history, left_out = fit_history(budget, "sys", [short[0], long, short[1], short[2]],
                                    [None, "the analysis answer on report.md", None, None])
    assert left_out == 1 and [m["content"] for m in history][::2] == ["short turn 0", "short turn 1", "short turn 2"]
    assert budget.dropped and budget.dropped[0].startswith("the analysis answer on report.md (")
    history, left_out = fit_history(budget, "sys", [short[0], long, short[1], short[2]])
    assert left_out == 2 and budget.dropped == []       # unnamed: the oldest go first, as before


def survives_config(tmp_path, scripted):
    from conftest import make_config
    scripted.models["tiny:1b"] = 2048
    (tmp_path / "workspace").mkdir(exist_ok=True)
    return make_config(tmp_path, scripted.url)


def session_with_a_long_analysis_answer(live, last: bool = False, repeats: int = 180) -> str:
    """A 2,048-token session: a short turn, an analysis answer of ``repeats`` sentences (180: more than the
    room the window leaves; 130: it fits, leaving the context almost full), another short turn; with
    ``last`` the analysis answer is the last turn."""
    from datetime import datetime, timedelta, timezone

    from app.sessions import fountain
    when = datetime(2026, 12, 6, 9, 0, tzinfo=timezone.utc)
    store = live.services.store
    name = store.create("tiny:1b", now=when).name
    exchanges = [("Remember: the pier is 40 m long.", "Noted: 40 m.", None),
                 ("Summarize report.md", "The report says " + "a great deal about the harbour. " * repeats,
                  fountain.ChunkAnalysis("report.md", 6, "tiny:1b", "paragraph", 1500, "Summarize.", when,
                                         ["ok"] * 6, "ok")),
                 ("And the quay is 12 m wide.", "Noted: 12 m.", None)]
    if last:
        exchanges = [exchanges[0], exchanges[2], exchanges[1]]
    for i, (message, reply, analysis) in enumerate(exchanges):
        turn = fountain.Turn(when + timedelta(minutes=i), message, "tiny:1b", reply,
                             fountain.stats_line("tiny:1b", "ollama", 10, 100, 1.0))
        turn.analysis = analysis
        for scene in fountain.turn_scenes(turn, store.user_name, store.workspace):
            store.append_scene(name, scene)
    return name


def test_a_long_analysis_answer_leaves_the_request_first_and_is_named(tmp_path, scripted, make_live):
    live = make_live(survives_config(tmp_path, scripted))
    name = session_with_a_long_analysis_answer(live)
    scripted.script = lambda body: Reply(text="The pier is 40 m and the quay 12 m.")
    response = send_and_finish(live, name, "How long is the pier, and how wide the quay?")
    sent = [m["content"] for m in scripted.chats()[-1].body["messages"]]
    assert "Remember: the pier is 40 m long." in sent and "And the quay is 12 m wide." in sent
    assert not any("a great deal about the harbour" in c for c in sent)
    assert "Left out of this request to fit the context window: the analysis answer on report.md" in response.text


def test_compact_summarises_an_analysis_answer_even_when_it_is_the_last_turn(tmp_path, scripted, make_live):
    live = make_live(survives_config(tmp_path, scripted))
    name = session_with_a_long_analysis_answer(live, last=True, repeats=130)
    page = live.get(f"/s/{name}").text
    assert "context almost full" in page and "Compact now" in page       # reachable without opening the line
    scripted.script = lambda body: Reply(text="SUMMARY: pier 40 m, quay 12 m, report.md is about the harbour.")
    from waiting import wait_for
    note_at = len(live.services.store.load(name).turns)          # the compact note comes after the last turn
    live.post(f"/s/{name}/compact")
    events = list(live.sse(f"/s/{name}/turns/{note_at}/stream"))
    assert any(event == "final" and "Compacted" in data for event, data, _ in events)
    wait_for(lambda: live.services.activities.holder(name) is None, 10, what="the compact to give the session back")
    transcript = scripted.chats()[-1].body["messages"][-1]["content"]
    assert "a great deal about the harbour" in transcript and "the pier is 40 m" in transcript
    scripted.script = lambda body: Reply(text="fine")
    send_and_finish(live, name, "Thanks.")
    sent = [m["content"] for m in scripted.chats()[-1].body["messages"]]
    assert any("SUMMARY: pier 40 m" in c for c in sent) and not any("a great deal about" in c for c in sent)
