"""A big file named in a chat: sized before it is read, never read under the session lock
(issue 23 item 4).  Memory itself is measured in bench/bench_big_files.py, not here.

Through waitress against the scripted Ollama server: a file too large for the context gets
the alert card without being extracted in the request (the loaders are spied on), a second
request to the same session is answered while the first one's sizing is held, and a job
planned from the file's measure is planned exactly by the worker and runs to its answer.
"""
import re
import threading
from pathlib import Path

import pytest

from app import chunking, documents
from app.analysis import plan
from test_analysis import big_file_config, big_markdown, map_or_reduce, session_text, wait_settled
from test_documents import PAGES, make_pdf
from waiting import wait_for

BIG_TEXT_BYTES = plan.PLAN_READ_BYTES + 2**20     # larger than any text a request may read


def write_big_text(path: Path, size: int = BIG_TEXT_BYTES) -> Path:
    block = ("A paragraph of plain prose about budgets and windows on a small computer. " * 8 + "\n\n").encode()
    with open(path, "wb") as fh:
        fh.write(block * (size // len(block) + 1))
    return path


@pytest.fixture
def spied(monkeypatch):
    """Every whole read of a file (``chunking.read_document``, ``documents.extract``), by file name."""
    reads: list[str] = []
    real_read, real_extract = chunking.read_document, documents.extract

    def read_document(path, *args, **kw):
        reads.append(Path(path).name)
        return real_read(path, *args, **kw)

    def extract(path):
        reads.append(Path(path).name)
        return real_extract(path)

    monkeypatch.setattr(chunking, "read_document", read_document)
    monkeypatch.setattr(documents, "extract", extract)
    return reads


@pytest.fixture
def live_big(tmp_path, scripted, make_live):
    scripted.script = map_or_reduce
    config = big_file_config(tmp_path, scripted)
    write_big_text(Path(config.workspace) / "huge.txt")
    return make_live(config), scripted, Path(config.workspace)


# -- sizing from a bounded sample --------------------------------------------------------------

def test_measure_sizes_a_pdf_and_a_word_file_close_to_their_extracted_text(tmp_path):
    """The estimate from a few pages / the zip directory is near the real text (within 30%)."""
    from docx import Document

    pdf = make_pdf(tmp_path / "report.pdf", PAGES * 4)
    doc = Document()
    for i in range(300):
        doc.add_paragraph(f"Paragraph {i}: the vault code is 4471 and it opens the north door of the hall.")
    doc.save(tmp_path / "report.docx")
    for path in (pdf, tmp_path / "report.docx"):
        measured = chunking.measure(path)
        real = len(documents.extract(path).text.encode())
        assert 0.7 * real <= measured.text_bytes <= 1.3 * real, (path.name, measured.text_bytes, real)
    assert chunking.measure(pdf).pages == len(PAGES) * 4


def test_measure_of_a_damaged_pdf_is_the_damaged_card_not_a_crash(tmp_path):
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 100)
    with pytest.raises(documents.UnreadableDocument):
        chunking.measure(path)


def test_a_huge_text_file_is_planned_without_being_read(live_big, spied):
    """Unit: the card's plan of a file with more text than a request may read is its measure."""
    live, _, _ = live_big
    fields = plan.plan(live.services.sizing, "huge.txt", "tiny:1b", "Summarize huge.txt")
    assert spied == []
    assert fields["fingerprint"] == "" and fields["chunks"] > 100
    assert fields["file_tokens"] == pytest.approx(BIG_TEXT_BYTES / fields["bytes_per_token"], rel=0.05)


# -- through waitress ---------------------------------------------------------------------------

def test_a_huge_file_named_in_a_chat_gets_the_card_and_is_not_read(live_big, spied):
    live, scripted, _ = live_big
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "Summarize huge.txt"}).text
    assert "Context overflow" in fragment and "huge.txt" in fragment
    tokens = int(re.search(r"about ([\d,]+) tokens", fragment).group(1).replace(",", ""))
    assert tokens > BIG_TEXT_BYTES / 8
    assert "huge.txt" not in spied                   # neither sized nor planned by reading it
    assert "Answer from the most relevant passages" in fragment and "keyword index first" in fragment
    assert scripted.chats() == []
    assert "Context overflow: huge.txt is approximately" in session_text(live, name)


def test_a_small_file_is_still_read_into_the_chat(live_big, spied):
    live, scripted, workspace = live_big
    (workspace / "small.md").write_text("# Small\n\nA short note about the Pi.\n")
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "What does small.md say?"})
    wait_for(lambda: live.services.activities.last(name).finished, what="the reply")
    assert spied == ["small.md"]                     # read once, after its measure said it fits
    assert "A short note about the Pi." in scripted.chats()[0].body["messages"][-1]["content"]


def test_the_session_is_not_locked_while_a_named_file_is_sized(live_big, monkeypatch):
    """A message whose file sizing is held does not hold its session: a second message to the same
    session is taken meanwhile; the first then finds the session busy with that reply."""
    live, scripted, _ = live_big
    sizing, release = threading.Event(), threading.Event()
    real_measure = chunking.measure

    def slow_measure(path):
        if Path(path).name == "huge.txt":
            sizing.set()
            release.wait(30)
        return real_measure(path)

    monkeypatch.setattr(chunking, "measure", slow_measure)
    replied = threading.Event()          # the second message's reply runs until the end of the test

    def held_reply(body):
        replied.wait(30)
        return map_or_reduce(body)

    scripted.script = held_reply
    name = live.open_session()
    first: dict = {}
    sender = threading.Thread(target=lambda: first.update(
        r=live.post(f"/s/{name}/messages", data={"message": "Summarize huge.txt"})))
    sender.start()
    try:
        wait_for(sizing.is_set, what="the first message's sizing to start")
        second = live.post(f"/s/{name}/messages", data={"message": "hello while it sizes"})
        assert second.status_code == 200 and "hello while it sizes" in second.text
        assert not release.is_set()                 # answered while the sizing was still held
    finally:
        release.set()
        sender.join(30)
        replied.set()
    assert first["r"].status_code == 409 and "being generated" in first["r"].text
    wait_for(lambda: live.services.activities.last(name).finished, what="the second message's reply")
    text = session_text(live, name)
    assert "hello while it sizes" in text and "Summarize huge.txt" not in text


def test_a_message_to_a_working_session_sizes_and_reads_no_file(live_big, spied, monkeypatch):
    """While a reply holds the session, a message naming a file gets the busy card before the
    file is sized or read (issue 23: the pre-lock work is skipped); once the reply is done the
    same message is sized as usual."""
    live, scripted, workspace = live_big
    (workspace / "small.md").write_text("# Small\n\nA short note about the Pi.\n")
    measured: list[str] = []
    real_measure = chunking.measure
    monkeypatch.setattr(chunking, "measure", lambda path: measured.append(Path(path).name) or real_measure(path))
    replied = threading.Event()

    def held_reply(body):
        replied.wait(30)
        return map_or_reduce(body)

    scripted.script = held_reply
    name = live.open_session()
    try:
        live.post(f"/s/{name}/messages", data={"message": "hello"})
        wait_for(lambda: live.services.activities.working(name) == "reply", what="the reply to hold the session")
        busy = live.post(f"/s/{name}/messages", data={"message": "What do huge.txt and small.md say?"})
        assert busy.status_code == 409 and "being generated" in busy.text
        assert measured == [] and spied == []
    finally:
        replied.set()
    wait_for(lambda: live.services.activities.last(name).finished, what="the first reply")
    live.post(f"/s/{name}/messages", data={"message": "What does small.md say?"})
    assert "small.md" in measured and "small.md" in spied        # a free session: sized and read as before


def test_an_estimated_plan_is_planned_exactly_by_the_worker_and_runs(tmp_path, scripted, make_live, monkeypatch):
    """With the read limit lowered, big.md's card comes from its measure; the worker reads it,
    plans it exactly (the real chunk count), and the run ends with the synthesis."""
    monkeypatch.setattr(plan, "PLAN_READ_BYTES", 1000)
    scripted.script = map_or_reduce
    config = big_file_config(tmp_path, scripted, max_chunks=200)
    live = make_live(config)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    assert job.fingerprint == "" and job.source == ""
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize each section.", "scope": "all"})
    wait_settled(live, job)
    doc = chunking.read_document(Path(config.workspace) / "big.md")
    exact = chunking.plan_document(chunking.with_settings(doc, chunking.ChunkSettings(
        size_tokens=job.size_tokens, overlap=config.chunking.overlap, bytes_per_token=job.bytes_per_token)))
    maps = [m for c in scripted.chats() if (m := re.search(r"Chunk (\d+) of (\d+)", c.body["messages"][-1]["content"]))]
    assert job.fingerprint and maps[0].groups() == ("1", str(exact.chunks))    # the exact plan ran first
    assert {int(m.group(1)) for m in maps} == set(range(1, job.total + 1))   # (a re-plan may re-size: #14)
    assert "SYNTHESIZED" in session_text(live, name)
    assert doc.text.startswith(big_markdown()[:40])


def test_the_retrieval_choice_on_a_huge_files_card_is_estimated_without_reading_it(tmp_path, scripted, make_live,
                                                                                    spied):
    """With an embedding model installed, the card's second choice counts the passages to index from the
    file's estimated tokens (issue 25), still without reading the file (issue 23)."""
    scripted.models["nomic-embed-text:latest"] = 2048
    config = big_file_config(tmp_path, scripted)
    write_big_text(Path(config.workspace) / "huge.txt")
    live = make_live(config)
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "Summarize huge.txt"}).text
    tokens = int(re.search(r"about ([\d,]+) tokens", fragment).group(1).replace(",", ""))
    # "about": the count is from the file's estimated size (issue 45: the card said 379, indexing counted 339)
    passages = int(re.search(r"about ([\d,]+) passages to index first", fragment).group(1).replace(",", ""))
    assert passages == -(-tokens // 600)
    assert "huge.txt" not in spied and scripted.embeds() == [] and scripted.chats() == []
