"""Seed 004 wired into the retrieval index (issue 25), through waitress and the scripted Ollama server:
off (the default) makes no extra model call; on, the model's valid boundaries are the index's chunks,
and a garbage reply falls back to the default chunks, logged.  The index is keyed on the help's
fingerprint, so model-chosen chunks are made once and never mixed with default ones."""

import dataclasses
import json
import logging
import re
from pathlib import Path

import pytest

from app import chunking
from app.chunking import llmhelp
from app.retrieval.index import Index, path_for
from conftest import make_config
from scripted_ollama import Reply
from waiting import wait_for

QUESTION = "What does section 7 say about the crane schedule in quay.md?"


def quay(sections: int = 12) -> str:
    """A Markdown file over the window (so the card offers retrieval) whose help prompt fits it:
    short headings and paragraphs of ~1,800 characters (the prompt shows each up to 600)."""
    out = []
    for s in range(sections):
        out.append(f"## Section {s}: quay {s} crane schedule\n")
        for p in range(2):
            words = " ".join(f"berth{s}n{p}w{i} moves cargo on shift {i % 5}." for i in range(60))
            out.append(f"Paragraph {s}.{p}. {words}\n")
    return "\n".join(out)


def help_call(body: dict) -> bool:
    return bool(body.get("format")) and "numbered pieces" in body["messages"][-1]["content"]


def pieces_in(body: dict) -> int:
    return int(re.search(r"in (\d+) numbered pieces", body["messages"][-1]["content"]).group(1))


@pytest.fixture
def quay_app(tmp_path, scripted, make_live):
    """The app over quay.md, keyword search (no embedder), seed 004's boundaries on or off;
    ``reply(body)`` answers the help call."""

    def start(boundaries: bool, reply=None):
        def script(body):
            if help_call(body):
                return Reply(text=reply(body))
            return Reply(text="Section 7 schedules the cranes [1].")
        scripted.script = script
        config = make_config(tmp_path, scripted.url)
        config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, llm_boundaries=boundaries))
        Path(config.workspace).mkdir(parents=True, exist_ok=True)
        (Path(config.workspace) / "quay.md").write_text(quay(), encoding="utf-8")
        return make_live(config)

    return start


def answer_by_retrieval(live):
    """Ask about quay.md, take the second choice, wait for the answer; the job."""
    name = live.open_session()
    card = live.post(f"/s/{name}/messages", data={"message": QUESTION}).text
    assert "Answer from the most relevant passages" in card
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": QUESTION, "way": "retrieve"})
    wait_for(lambda: job.state in ("done", "failed", "interrupted") and job.id not in live.services.jobs.jobs,
             120, f"the retrieval answer (job is {job.state}: {job.message})")
    assert job.state == "done", job.message
    return job


def indexed_texts(live) -> tuple[str, list[str]]:
    """The index file's name and the chunk texts it holds, for quay.md as the indexer names it."""
    doc = live.services.indexer.document(Path(live.config.workspace) / "quay.md")
    stored = live.services.indexer.stored(doc.fingerprint)    # the default chunker's name after a fallback
    with Index(path_for(live.config.data_path, stored)) as index:
        return doc.fingerprint, [p.text for p in index.passages(range(index.chunk_count()))]


def default_texts(live) -> list[str]:
    doc = chunking.read_document(Path(live.config.workspace) / "quay.md", chunking.retrieval_settings())
    return [c.text for c in chunking.chunk_document(doc)]


def test_off_by_default_no_extra_model_call_and_the_default_chunks(quay_app, scripted):
    live = quay_app(boundaries=False)
    answer_by_retrieval(live)
    assert [r for r in scripted.chats() if help_call(r.body)] == []
    assert len(scripted.chats()) == 1                                   # the answer only
    key, texts = indexed_texts(live)
    assert texts == default_texts(live)
    assert key == chunking.read_document(Path(live.config.workspace) / "quay.md",
                                         chunking.retrieval_settings()).fingerprint


def test_on_the_models_valid_boundaries_are_the_index_chunks_made_once(quay_app, scripted):
    every_piece = lambda body: json.dumps({"boundaries": list(range(pieces_in(body)))})   # noqa: E731
    live = quay_app(boundaries=True, reply=every_piece)
    answer_by_retrieval(live)
    helps = [r for r in scripted.chats() if help_call(r.body)]
    assert len(helps) == 1
    # the index holds exactly the chunks llmhelp builds from that reply, not the default ones
    path = Path(live.config.workspace) / "quay.md"
    doc = chunking.read_document(path, chunking.retrieval_settings())
    helped = llmhelp.helped_chunks(doc, llmhelp.Help(boundaries=True), lambda *a: every_piece(helps[0].body),
                                   live.config.model_server.model)
    key, texts = indexed_texts(live)
    assert texts == [c.text for c in helped] != default_texts(live)
    assert key != doc.fingerprint                                       # its own index, by the help fingerprint
    # a second question on the unchanged file: the stored chunks serve, no second help call
    answer_by_retrieval(live)
    assert len([r for r in scripted.chats() if help_call(r.body)]) == 1
    assert indexed_texts(live) == (key, texts)


def test_on_a_garbage_reply_falls_back_to_the_default_chunks_logged(quay_app, scripted, caplog):
    live = quay_app(boundaries=True, reply=lambda body: "Sure! Chunks start at 0, 3 and 7.")
    with caplog.at_level(logging.WARNING, logger="app.chunking.llmhelp"):
        answer_by_retrieval(live)
    assert len([r for r in scripted.chats() if help_call(r.body)]) == 1
    assert indexed_texts(live)[1] == default_texts(live)
    assert any("fell back to the default chunker" in r.getMessage() for r in caplog.records)
    # the default chunks are stored under the default chunker's name, never the helped one (issue 35)
    key = indexed_texts(live)[0]
    plain = chunking.read_document(Path(live.config.workspace) / "quay.md", chunking.retrieval_settings()).fingerprint
    assert live.services.indexer.stored(key) == plain
    assert not path_for(live.config.data_path, key).exists() and path_for(live.config.data_path, plain).exists()


def test_a_file_of_many_paragraphs_gets_the_models_boundaries_in_requests_that_fit(tmp_path, scripted, make_live):
    """Issue 35, item 7: the one help request over every piece of a file of more than a few dozen
    paragraphs never fitted the window, so the model's boundaries never applied."""
    every_piece = lambda body: json.dumps({"boundaries": list(range(pieces_in(body)))})   # noqa: E731
    scripted.script = lambda body: Reply(text=every_piece(body)) if help_call(body) else Reply(text="It is [1].")
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, llm_boundaries=True))
    Path(config.workspace).mkdir(parents=True, exist_ok=True)
    (Path(config.workspace) / "quay.md").write_text(quay(60), encoding="utf-8")
    live = make_live(config)
    answer_by_retrieval(live)
    helps = [r for r in scripted.chats() if help_call(r.body)]
    assert len(helps) > 1
    for r in helps:                                          # each request fits the window with its reply
        assert r.prompt_bytes / 4 + r.body["options"]["num_predict"] <= r.num_ctx
    assert sum(pieces_in(r.body) for r in helps) > 100
    key, texts = indexed_texts(live)
    assert live.services.indexer.stored(key) == key          # the model's chunks, under the helped name
    assert texts != default_texts(live) and len(texts) == sum(pieces_in(r.body) for r in helps)


def test_cancel_stops_the_help_call_and_stores_no_chunks(tmp_path, scripted, make_live):
    slow = Reply(text=json.dumps({"boundaries": list(range(36))}), token_delay=0.5)
    scripted.script = lambda body: slow if help_call(body) else Reply(text="unused")
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, llm_boundaries=True))
    Path(config.workspace).mkdir(parents=True, exist_ok=True)
    (Path(config.workspace) / "quay.md").write_text(quay(), encoding="utf-8")
    live = make_live(config)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": QUESTION})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": QUESTION, "way": "retrieve"})
    wait_for(lambda: any(help_call(r.body) for r in scripted.chats()), 60, "the help call sent")
    assert live.post(f"/s/{name}/analysis/{job.id}/cancel").status_code == 204
    wait_for(lambda: job.state == "choose", 60, f"the job stopped (it is {job.state})")
    indexer = live.services.indexer
    wait_for(lambda: all(p.finished.is_set() for p in indexer._tasks.values()), 30, "the build ended")
    assert [p.state for p in indexer._tasks.values()] == ["cancelled"]
    wait_for(lambda: all(r.disconnected for r in scripted.chats() if help_call(r.body)), 30,
             "the help call's stream closed")
    doc = indexer.document(Path(config.workspace) / "quay.md")
    target = path_for(config.data_path, doc.fingerprint)
    if target.exists():
        with Index(target) as index:
            assert not index.has_chunks()                              # nothing half-made is kept
    assert not [r for r in scripted.chats() if not help_call(r.body)]  # no answer was asked
