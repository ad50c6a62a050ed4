"""Issue 42, "read less on a Pi": the card routes the question before reading; a question with one answer
reads the most relevant chunks first and stops when they answer it; any answer over part of the file
reads the rest in one tap, never a chunk twice. Through waitress against the scripted Ollama.
"""

from __future__ import annotations

import dataclasses
import html as htmllib
import json
from pathlib import Path

import pytest

from careful import CHUNK
from conftest import make_config
from haystacks import haystack
from scripted_ollama import Reply
from waiting import wait_for

FACT = "The access code for the north vault is 7-ALPHA-19."
QUESTION = "What is the access code for the north vault?"


class OneFact:
    """A careful model for a question with one answer: sure where its chunk holds the fact, else nothing."""

    def __init__(self, fact: str = FACT, answer: str = "7-ALPHA-19"):
        self.fact, self.answer = fact, answer

    def __call__(self, body) -> Reply:
        if body["messages"][0]["content"].startswith("You combine"):
            return Reply(text=f"The code is {self.answer} [1].")
        m = CHUNK.search(body["messages"][-1]["content"])
        if m and " ".join(self.fact.split()) in " ".join(m.group(3).split()):
            return Reply(text=json.dumps({"relevant": True, "points": [{"point": "the code", "quote": self.fact}],
                                          "confidence": 5, "answer": self.answer}))
        return Reply(text=json.dumps({"relevant": False, "points": [], "confidence": 5, "answer": ""}))


@pytest.fixture
def manual(tmp_path, scripted, make_live):
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, chunk_size_tokens=300))
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    (workspace / "manual.md").write_text(haystack(60, {41: FACT}))
    return make_live(config), scripted


def card_for(live, question: str) -> tuple[str, object, str]:
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": f"{question} See manual.md"})
    job = wait_for(lambda: live.services.jobs.open_for(name), 10, what="the card")
    return name, job, htmllib.unescape(live.get(f"/s/{name}").text)


def run_to_end(live, name: str, job, **form) -> None:
    live.post(f"/s/{name}/analysis/{job.id}/start", data=form)
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60, total=120))
    wait_for(lambda: job.state in ("done", "failed") and job.id not in live.services.jobs.jobs, 60,
             what=f"the job to settle (it is {job.state})")


def maps(scripted) -> list:
    return [c for c in scripted.chats() if c.format]


def test_the_card_offers_first_the_read_that_suits_the_question(manual):
    live, scripted = manual
    _, job, page = card_for(live, QUESTION)
    assert job.chunks > 20
    assert "A question with one answer:" in page
    primary = page.split('class="button primary', 1)[1].split("</button>", 1)[0]
    assert "Read the most relevant chunks first" in primary
    _, job, page = card_for(live, "List every vault access code in")
    assert "A question about the whole file" in page
    primary = page.split('class="button primary', 1)[1].split("</button>", 1)[0]
    assert "Read the chunks chosen above" in primary
    checked = page.split('name="scope" value="all" required', 1)[1][:10]
    assert "checked" in checked                          # a list is read whole by default: max_chunks is seen


def test_a_question_with_one_answer_reads_the_relevant_chunks_first_and_stops(manual):
    live, scripted = manual
    scripted.script = OneFact()
    name, job, _ = card_for(live, QUESTION)
    run_to_end(live, name, job, instruction=QUESTION, way="relevant")
    assert job.state == "done", job.message
    read = maps(scripted)
    assert len(read) <= 0.25 * job.file_chunks                 # a quarter of a whole read at most
    first = CHUNK.search(read[0].body["messages"][-1]["content"]).group(3)
    assert FACT in " ".join(first.split())                      # the chunk that holds it was read first
    assert job.read_until == "answered" and job.ranked_by == "keyword search"
    turn = live.services.store.load(name).turns[-1]
    assert turn.reply.startswith("The code is 7-ALPHA-19")
    page = htmllib.unescape(live.get(f"/s/{name}").text)
    assert f"read {len(read)} of {job.file_chunks} chunks, the most relevant (lines " in page
    assert "reading stopped when they answered the question; the rest not read" in page
    assert f"Read the other {job.file_chunks - len(read)} chunks" in page


def test_the_rest_of_a_relevance_first_answer_reads_only_the_chunks_not_read(manual):
    live, scripted = manual
    scripted.script = OneFact()
    name, job, _ = card_for(live, QUESTION)
    run_to_end(live, name, job, instruction=QUESTION, way="relevant")
    first = {CHUNK.search(c.body["messages"][-1]["content"]).group(1) for c in maps(scripted)}
    before = len(scripted.chats())
    assert live.post(f"/s/{name}/turns/0/read-rest").status_code == 200
    rest = live.services.jobs.open_for(name) or live.services.jobs.settled_for(name)[-1]
    wait_for(lambda: rest.state in ("done", "failed") and rest.id not in live.services.jobs.jobs, 60,
             what="the rest to be read")
    assert rest.state == "done", rest.message
    second = [CHUNK.search(c.body["messages"][-1]["content"]).group(1) for c in scripted.chats()[before:] if c.format]
    assert not first & set(second) and len(first) + len(second) == rest.file_chunks    # no chunk twice, none missed
    turn = live.services.store.load(name).turns[-1]
    assert turn.reply.startswith("The code is 7-ALPHA-19") and turn.analysis.results.count("ok") == rest.file_chunks
    assert "Read the other" not in live.get(f"/s/{name}").text


def test_a_question_whose_words_are_not_near_its_answer_stops_at_a_share_and_offers_the_rest(manual):
    live, scripted = manual
    scripted.script = OneFact(fact="nowhere in this file")
    name, job, _ = card_for(live, "Who signed off the refurbishment?")
    run_to_end(live, name, job, instruction="Who signed off the refurbishment?", way="relevant")
    assert job.state == "done", job.message and job.read_until == "share"
    assert len(maps(scripted)) == max(3, -(-job.file_chunks // 4))
    page = htmllib.unescape(live.get(f"/s/{name}").text)
    assert "none answered it surely, so reading stopped at the most relevant 25 %" in page
    assert "Read the other" in page
