"""Chunked analysis through waitress against the scripted Ollama server."""

import dataclasses
import re
import threading
import time
from pathlib import Path

import pytest

from app import fountain
from app.budget import estimate_messages
from conftest import make_config
from scripted_ollama import Reply

PARAGRAPH = ("The methodology section describes a three-phase experiment with careful controls, "
             "and the results are discussed at length with tables and figures. ")


def big_markdown(sections=12, paragraphs=10) -> str:
    parts = []
    for s in range(sections):
        parts.append(f"## Section {s + 1}\n")
        for p in range(paragraphs):
            parts.append(f"Paragraph {s + 1}.{p + 1}. " + PARAGRAPH * 4 + "\n")
    return "\n".join(parts)


def map_or_reduce(body):
    """Answer map calls with their chunk number; synthesis calls with a fixed text."""
    prompt = body["messages"][-1]["content"]
    found = re.search(r"Chunk (\d+) of (\d+):", prompt)
    if found:
        return Reply(text=f"Partial answer for chunk {found.group(1)}.")
    if "partial answers" in prompt:
        return Reply(text="SYNTHESIZED: the methodology is a three-phase experiment.")
    return Reply(text="plain chat reply")


@pytest.fixture
def setup(tmp_path, scripted, make_live):
    scripted.script = map_or_reduce
    config = make_config(tmp_path, scripted.url)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    (workspace / "big.md").write_text(big_markdown())
    (workspace / "small.md").write_text("# Small\n\nA short note about the Pi.\n")
    live = make_live(config)
    return live, scripted, workspace


def session_text(live, name):
    return (live.services.store.folder / f"{name}.spmd").read_text()


def wait_state(live, job, states, timeout=20):
    deadline = time.monotonic() + timeout
    while job.state not in states and time.monotonic() < deadline:
        time.sleep(0.02)
    assert job.state in states, job.state


def test_overflow_shows_the_card_and_sends_nothing(setup):
    live, scripted, _ = setup
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "Summarize the methodology in big.md"}).text
    assert "Context overflow" in fragment and "big.md" in fragment
    assert re.search(r"about [\d,]+ tokens", fragment) and "in the current context" in fragment
    assert re.search(r"\d+ chunks of up to 1,500 tokens, split at paragraph boundaries", fragment)
    assert ">Summarize the methodology in big.md</textarea>" in fragment
    assert 'or "no" to return to the conversation' in fragment
    assert scripted.chats() == []
    text = session_text(live, name)
    assert "Context overflow: big.md is approximately" in text


def test_small_file_is_read_into_the_chat(setup):
    live, scripted, _ = setup
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "What does small.md say?"})
    job = live.services.replies.current(name)
    deadline = time.monotonic() + 5
    while not job.finished and time.monotonic() < deadline:
        time.sleep(0.02)
    prompt = scripted.chats()[0].body["messages"][-1]["content"]
    assert '<file name="small.md">' in prompt and "A short note about the Pi." in prompt


def test_no_returns_to_the_conversation_and_sends_nothing(setup):
    live, scripted, _ = setup
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    html = live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "  No "}).text
    assert "declined" in html and "Start analysis" not in html
    assert job.state == "declined" and scripted.chats() == []
    assert "chunk analysis declined" in session_text(live, name)


def test_full_run_records_the_scene_and_the_answer(setup):
    live, scripted, _ = setup
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    html = live.post(f"/s/{name}/analysis/{job.id}/start",
                     data={"instruction": "Summarize the methodology of each section."}).text
    assert "sse-connect" in html
    events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    names = [e for e, _, _ in events]
    assert "progress" in names and "partial" in names and names[-1] == "close"
    assert any("Processing chunk 1/" in d for e, d, _ in events if e == "progress")
    assert "SYNTHESIZED" in [d for e, d, _ in events if e == "state"][0]
    assert job.state == "done"
    chats = scripted.chats()
    maps = [c for c in chats if re.search(r"\nChunk \d+ of \d+:\n", c.body["messages"][-1]["content"])]
    assert len(maps) == job.chunks and len(chats) == job.chunks + 1
    assert {c.num_ctx for c in chats} == {8192}
    for c in chats:
        assert estimate_messages(c.body["messages"], 4.0) + c.body["options"]["num_predict"] <= c.num_ctx
    first = maps[0].body["messages"][-1]["content"]
    assert first.startswith(f"Summarize the methodology of each section.\n\n---\nChunk 1 of {job.chunks}:\n")
    text = session_text(live, name)
    play = fountain.loads(text)
    headings = [s.heading for s in play.scenes]
    assert headings[1].startswith("INT. CHUNK ANALYSIS — big.md")
    assert f"chunk: file=big.md, chunks={job.chunks}, model=TINY, boundary=paragraph, chunk-size=1500" in text
    assert text.count("chunk-result:") == job.chunks and "synthesis: model=TINY — ok" in text
    turns = fountain.turns(play)
    assert len(turns) == 1 and turns[0].reply.startswith("SYNTHESIZED")
    # the next turn carries the synthesized answer in its history, not the file
    live.post(f"/s/{name}/messages", data={"message": "thanks"})
    deadline = time.monotonic() + 5
    while len(scripted.chats()) == len(chats) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    history = scripted.chats()[-1].body["messages"]
    assert history[1]["content"] == "Summarize big.md" and history[2]["content"].startswith("SYNTHESIZED")
    assert all(PARAGRAPH not in m["content"] for m in history)
