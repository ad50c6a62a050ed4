"""Issue 14: a running analysis re-sizes its remaining chunks from the file's measured bytes per token.

The plan sizes chunks with the kind's calibration; the first map calls' ``prompt_eval_count``
shows what this file really costs. A lighter file then needs fewer calls; a denser part is
re-sized before its requests would pass the window. Through waitress against the scripted
server, whose token counts each test decides.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

from app import chunking
from app.analysis import plan
from scripted_ollama import Reply
from test_analysis import big_markdown, map_or_reduce, session_text
from test_analysis_state import MAP, is_map, wait_settled
from app.sessions import fountain

PARAGRAPH_MARK = re.compile(r"Paragraph (\d+\.\d+)\. ")


def test_chunks_from_an_offset_cover_the_rest_of_the_text_contiguously():
    text = big_markdown()
    doc = chunking.make_document(text, "markdown", chunking.ChunkSettings(size_tokens=600, bytes_per_token=3.0))
    planned = chunking.chunk_document(doc)
    offset = planned[2].end
    lighter = chunking.make_document(text, "markdown", chunking.ChunkSettings(size_tokens=600, bytes_per_token=4.5))
    rest = chunking.chunks_from(lighter, offset, 3)
    assert [c.index for c in rest] == list(range(3, 3 + len(rest)))
    assert rest[0].body_start == offset and rest[-1].end == len(doc.text)
    for before, after in zip(rest, rest[1:]):
        assert after.body_start == before.end              # no gap, nothing twice
    assert len(rest) < len(planned) - 3                    # the lighter figure makes fewer chunks
    assert rest[0].first_line == doc.text.count("\n", 0, offset) + 1 + (doc.text[offset] == "\n")


def covered(maps) -> set[str]:
    return {m for rec in maps for m in PARAGRAPH_MARK.findall(rec.body["messages"][-1]["content"])}


def test_a_lighter_file_is_re_planned_after_its_first_chunk_into_fewer_calls(tmp_path, scripted, make_live):
    """The scripted server counts 4 bytes per token; a fresh plan counts Markdown denser."""
    from test_analysis import big_file_config
    scripted.script = map_or_reduce
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    planned = job.chunks                      # read on the card: once started, the re-plan may come first
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize."})
    wait_settled(live, job)
    assert job.state == "done"
    maps = [rec for rec in scripted.chats() if is_map(rec)]
    assert len(job.replans) == 1 and job.replans[0][0] == 1           # once, after chunk 1
    assert len(maps) == job.chunks < planned                          # fewer calls than planned
    numbers = [int(MAP.search(rec.body["messages"][-1]["content"]).group(1)) for rec in maps]
    assert numbers == list(range(1, job.chunks + 1))                  # each chunk once, in order
    every = set(PARAGRAPH_MARK.findall(big_markdown()))
    assert covered(maps) == every                                     # no text lost at the re-plan
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    assert turn.analysis.chunks == job.chunks and turn.analysis.results == ["ok"] * job.chunks


def dense_markdown() -> str:
    """Sections 1-4 light, 5-8 dense, 9-12 denser still (each paragraph line carries its density)."""
    parts = []
    for s in range(12):
        parts.append(f"## Section {s + 1}\n")
        mark = "" if s < 4 else "DENSE " if s < 8 else "DENSEST "
        for p in range(10):
            parts.append(f"Paragraph {s + 1}.{p + 1}. {mark}" + "Words of the methodology and results. " * 10 + "\n")
    return "\n".join(parts)


DENSITY = {"DENSEST": 1.5, "DENSE": 1.9}


def server_tokens(body) -> int:
    """The scripted server's 'true' count: 4 bytes per token, less for the dense lines."""
    total = 0.0
    for message in body["messages"]:
        for line in (message.get("content") or "").split("\n"):
            figure = next((v for k, v in DENSITY.items() if k + " " in line), 4.0)
            total += (len(line.encode()) + 1) / figure
    return math.ceil(total)


def test_a_denser_part_is_re_sized_before_its_requests_pass_the_window(tmp_path, scripted, make_live):
    from conftest import make_config

    def script(body):
        reply = map_or_reduce(body)
        return Reply(text=reply.text, prompt_eval_count=server_tokens(body))

    scripted.script = script
    scripted.models["tiny:1b"] = 2048
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, max_chunks=60))
    Path(config.workspace).mkdir(parents=True)
    (Path(config.workspace) / "dense.md").write_text(dense_markdown())
    live = make_live(config)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize dense.md"})
    job = live.services.jobs.open_for(name)
    # the precondition: a chunk of the plan's size in the densest part would pass the window
    doc = plan.document(live.services.sizing, job)
    plan_bytes = max(len(c.text.encode()) for c in chunking.chunk_document(doc))
    assert plan_bytes / DENSITY["DENSEST"] > 2048
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize.", "scope": "all"})
    from waiting import wait_for
    wait_for(lambda: job.state in ("done", "confirm"), 60, f"the run ends or asks (it is {job.state})")
    if job.state == "confirm":        # issue 30: more chunks than the card said are asked for, then read
        assert job.done_count == job.agreed < job.chunks
        live.post(f"/s/{name}/analysis/{job.id}/read-on", data={"rest": "yes"})
    wait_settled(live, job, timeout=60)
    assert job.state == "done", job.message
    assert not [rec for rec in scripted.chats() if rec.refused]       # no request refused for size
    assert len(job.replans) >= 2                                      # up after the light part, down after
    assert job.replans[-1][2] < DENSITY["DENSE"]                      # the dense one
    maps = [rec for rec in scripted.chats() if is_map(rec)]
    assert covered(maps) == set(PARAGRAPH_MARK.findall(dense_markdown()))


def _job(doc, chunks, **fields):
    from app.analysis.job import Job
    return Job(id="x", session="s", turn=0, file="f.md", user_text="", instruction="Summarize.", model="m",
               file_tokens=1, remaining=1, chunks=len(chunks), size_tokens=600, boundary="", kind="markdown",
               fingerprint=doc.fingerprint, window=8192, bytes_per_token=4.0, **fields)


def _sizing(max_chunks=20):
    from types import SimpleNamespace
    return SimpleNamespace(config=SimpleNamespace(chunking=SimpleNamespace(max_chunks=max_chunks, map_reply_tokens=400),
                                                  chat=SimpleNamespace(reply_tokens=1024)))


def no_room_to_grow(monkeypatch, room: int = 600):
    """The window leaves a map call ``room`` tokens for its chunk, the plan's size: a denser file cannot be
    read in the card's count of larger chunks, so its re-plan needs more chunks."""
    monkeypatch.setattr(plan, "effective_context", lambda *a: 1000 + room)
    monkeypatch.setattr(plan, "map_fixed_tokens", lambda *a: 1000)


def test_a_denser_file_with_room_in_the_window_keeps_the_cards_count(monkeypatch):
    """Issue 43 item 4: the card said 7, the file measured denser (estimated plan, no tokenizer): each chunk
    keeps the bytes the card planned (more tokens, still within the window), so the run makes the card's
    calls and does not stop to ask for one more."""
    from types import SimpleNamespace
    from app.analysis.job import ChunkResult
    monkeypatch.setattr(plan, "estimate_cost", lambda *a, **k: SimpleNamespace(calls=1, seconds=1.0))
    no_room_to_grow(monkeypatch, room=4000)
    doc = chunking.make_document(big_markdown(), "markdown",
                                 chunking.ChunkSettings(size_tokens=600, bytes_per_token=4.0))
    chunks = chunking.chunk_document(doc)
    card = len(chunks)
    job = _job(doc, chunks, measured_bpt=2.5, selected=card, agreed=card, scope="all",
               results={i: ChunkResult(i, "ok") for i in range(2)})
    changes = plan.replan(_sizing(max_chunks=card), job, doc, chunks[:2])
    assert changes is not None and changes["chunks"] <= card and changes["selected"] == changes["chunks"]
    assert "denser than planned" not in (changes["message"] or "")
    assert changes["replans"][-1][3] > 600                      # larger chunks in tokens: the same bytes each
    no_room_to_grow(monkeypatch)                                # the same file where the window has no room:
    tight = plan.replan(_sizing(max_chunks=card), _job(doc, chunks, measured_bpt=2.5, selected=card, agreed=card,
                                                       scope="all", results={i: ChunkResult(i, "ok") for i in range(2)}),
                        doc, chunks[:2])
    assert tight["chunks"] > card and "denser than planned" in tight["message"]     # more calls, and it asks


def test_a_resume_retrying_an_earlier_chunk_never_re_plans_over_finished_ones(monkeypatch):
    """(Found in review.) Chunk 4 failed, 5-10 are done; its retry measures a denser figure."""
    from types import SimpleNamespace
    from app.analysis.job import ChunkResult
    monkeypatch.setattr(plan, "estimate_cost", lambda *a, **k: SimpleNamespace(calls=1, seconds=1.0))
    no_room_to_grow(monkeypatch)
    doc = chunking.make_document(big_markdown(), "markdown",
                                 chunking.ChunkSettings(size_tokens=600, bytes_per_token=4.0))
    chunks = chunking.chunk_document(doc)
    job = _job(doc, chunks, measured_bpt=3.0)
    job.results = {i: ChunkResult(i, "error" if i == 3 else "ok") for i in range(10)}
    assert plan.replan(_sizing(), job, doc, chunks[:4]) is None
    job.results = {i: ChunkResult(i, "ok") for i in range(4)}          # a fresh run at the same point
    assert plan.replan(_sizing(), job, doc, chunks[:4]) is not None


def test_a_re_plan_never_runs_more_chunks_than_the_user_agreed_to(monkeypatch):
    from types import SimpleNamespace
    from app.analysis.job import ChunkResult
    monkeypatch.setattr(plan, "estimate_cost", lambda *a, **k: SimpleNamespace(calls=1, seconds=1.0))
    no_room_to_grow(monkeypatch)
    doc = chunking.make_document(big_markdown(), "markdown",
                                 chunking.ChunkSettings(size_tokens=600, bytes_per_token=4.0))
    chunks = chunking.chunk_document(doc)
    done = {i: ChunkResult(i, "ok") for i in range(2)}
    # "all" of a file under the limit: a much denser figure makes more chunks than max_chunks
    everything = _job(doc, chunks, measured_bpt=1.5, selected=len(chunks), results=dict(done))
    changes = plan.replan(_sizing(max_chunks=len(chunks) + 5), everything, doc, chunks[:2])
    assert changes["chunks"] > len(chunks) + 5 and changes["selected"] == len(chunks) + 5
    assert "denser than planned" in changes["message"]
    # "the first 10": still the first 10
    first = _job(doc, chunks, measured_bpt=1.5, selected=10, results=dict(done))
    assert plan.replan(_sizing(max_chunks=10), first, doc, chunks[:2])["selected"] == 10


def test_a_chunk_cut_inside_a_long_table_keeps_the_table_header():
    """(Found in review.) The re-plan's cut lands inside a table that the old chunk continued."""
    rows = "\n".join(f"| {i} | value {i} with some words to fill the row |" for i in range(400))
    text = "# Data\n\nIntro paragraph.\n\n| n | value |\n|---|---|\n" + rows + "\n\nAfter the table.\n"
    doc = chunking.make_document(text, "markdown", chunking.ChunkSettings(size_tokens=300, bytes_per_token=4.0))
    planned = chunking.chunk_document(doc)
    offset = planned[1].end                                   # inside the table
    lighter = chunking.make_document(text, "markdown", chunking.ChunkSettings(size_tokens=300, bytes_per_token=3.0))
    rest = chunking.chunks_from(lighter, offset, 2)
    head = rest[0].text[:len(rest[0].text) - (rest[0].end - offset)]
    assert head.endswith("| n | value |\n|---|---|\n")          # the carried heading, then the header rows
    assert rest[0].text == head + doc.text[offset:rest[0].end]


def test_a_re_plan_runs_up_to_the_count_the_card_said_then_asks(monkeypatch):
    """Issue 30: the card said N and the user chose all; a first re-plan found the file lighter
    (fewer chunks), a second denser again: it runs up to N without asking (not up to the lighter
    count), and past N it asks, whatever ``max_chunks`` says."""
    from types import SimpleNamespace
    from app.analysis.job import ChunkResult
    monkeypatch.setattr(plan, "estimate_cost", lambda *a, **k: SimpleNamespace(calls=1, seconds=1.0))
    monkeypatch.setattr(plan, "effective_context", lambda *a: 8192)
    monkeypatch.setattr(plan, "map_fixed_tokens", lambda *a: 1000)
    doc = chunking.make_document(big_markdown(), "markdown",
                                 chunking.ChunkSettings(size_tokens=600, bytes_per_token=4.0))
    chunks = chunking.chunk_document(doc)
    done = {i: ChunkResult(i, "ok") for i in range(2)}
    card = len(chunks)
    job = _job(doc, chunks, measured_bpt=6.0, selected=card, agreed=card, scope="all", results=dict(done))
    lighter = plan.replan(_sizing(max_chunks=5), job, doc, chunks[:2])
    assert lighter["chunks"] < card and lighter["selected"] == lighter["chunks"]
    job.replans, job.chunks, job.selected = lighter["replans"], lighter["chunks"], lighter["selected"]
    job.measured_bpt = 3.7                   # denser again, within what the card said, where the window
    no_room_to_grow(monkeypatch)             # has no room for larger chunks: more chunks, up to the card's
    again = plan.replan(_sizing(max_chunks=5), job, doc, plan.job_chunks(_sizing(), job, doc)[:2])
    assert lighter["chunks"] < again["chunks"] <= card and again["selected"] == again["chunks"]
    job.measured_bpt = 1.5                   # far denser: more than the card said, where the window has no room
    no_room_to_grow(monkeypatch)
    denser = plan.replan(_sizing(max_chunks=500), _job(doc, chunks, measured_bpt=1.5, selected=card, agreed=card,
                                                    scope="all", results=dict(done)), doc, chunks[:2])
    assert denser["chunks"] > card and denser["selected"] == card and "denser than planned" in denser["message"]


def test_a_list_asked_in_the_chat_is_re_planned_with_room_for_its_whole_reply(monkeypatch):
    """Issue 45: the one call of a list question on a file that fits may write a chat reply's worth (1,024
    tokens, not a chunk's 400); a re-plan of its chunks keeps that room for the reply."""
    from types import SimpleNamespace
    from app.analysis.job import ChunkResult
    monkeypatch.setattr(plan, "estimate_cost", lambda *a, **k: SimpleNamespace(calls=1, seconds=1.0))
    monkeypatch.setattr(plan, "effective_context", lambda *a: 5000)
    replies = []
    monkeypatch.setattr(plan, "map_fixed_tokens", lambda *a: replies.append(a[-1]) or 1000)
    doc = chunking.make_document(big_markdown(), "markdown",
                                 chunking.ChunkSettings(size_tokens=600, bytes_per_token=4.0))
    chunks = chunking.chunk_document(doc)
    for in_chat in (False, True):
        job = _job(doc, chunks, measured_bpt=2.5, selected=len(chunks), agreed=len(chunks), scope="all",
                   results={i: ChunkResult(i, "ok") for i in range(2)}, in_chat=in_chat)
        plan.replan(_sizing(max_chunks=len(chunks)), job, doc, chunks[:2])
    assert replies == [400, 1024]
