"""The card's second choice through waitress and the scripted Ollama server (issue 25, layer 3):
answer from the most relevant passages in one chat request that fits the window, with the file's
index built once, the passages listed as sources that open, and the scene's [[rag: ...]] note."""

import dataclasses
import math
import re
from pathlib import Path

import pytest
from datetime import datetime
from fountain import FountainParser

from app.sessions import fountain as spmd

from app.config import RetrievalConfig
from conftest import make_config
from haystacks import bag_vector, haystack
from scripted_ollama import Reply
from waiting import wait_for

EMBEDDER = "nomic-embed-text:latest"
FACT = "The harbour master's cat is named Bartholomew Quince and sleeps in crane seven."
QUESTION = "What is the name of the harbour master's cat in harbour.md?"


def answer_from_passages(body):
    """Answer the retrieval request by citing the passage that holds the fact (if it was sent)."""
    prompt = body["messages"][-1]["content"]
    cited = [n for n, text in re.findall(r"^\[(\d+)\] \([^\n]*\)\n(.*?)(?=^\[\d+\] \(|^Question:)", prompt,
                                         re.M | re.S) if "Bartholomew" in text]
    if cited:
        return Reply(text=f"The cat is called Bartholomew Quince [{cited[0]}].")
    return Reply(text="The passages do not say.")


@pytest.fixture
def harbour(tmp_path, scripted, make_live):
    """The app over a workspace holding a ~90,000-token harbour.md with the fact deep inside."""
    scripted.script = answer_from_passages
    scripted.embed_fn = bag_vector

    def start(embedder: bool = True, text: str | None = None, **retrieval):
        if embedder:
            scripted.models[EMBEDDER] = 2048
        config = make_config(tmp_path, scripted.url)
        config = dataclasses.replace(config, retrieval=RetrievalConfig(**retrieval))
        Path(config.workspace).mkdir(parents=True, exist_ok=True)
        (Path(config.workspace) / "harbour.md").write_text(text or haystack(150, {131: FACT}), encoding="utf-8")
        return make_live(config)

    return start


def ask_by_retrieval(live, name, question=QUESTION):
    """Ask about the file, take the card's second choice, wait until the answer is in the session."""
    card = live.post(f"/s/{name}/messages", data={"message": question}).text
    assert "Answer from the most relevant passages" in card and "Read all" in card
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": question, "way": "retrieve"})
    wait_for(lambda: job.state in ("done", "failed", "interrupted") and job.id not in live.services.jobs.jobs,
             120, f"the retrieval answer (job is {job.state}: {job.message})")
    assert job.state == "done", job.message
    return job, card


def document_embeds(scripted):
    return [t for t in scripted.embedded_texts() if t.startswith("search_document: ")]


def test_the_answer_is_one_request_holding_the_deep_fact_and_fitting_the_window(harbour, scripted):
    live = harbour()
    name = live.open_session()
    job, card = ask_by_retrieval(live, name)
    # embedded: every passage of the file once (document prefix), then the question (query prefix)
    docs = document_embeds(scripted)
    assert len(docs) == job.rag_chunks > 100
    queries = [t for t in scripted.embedded_texts() if t.startswith("search_query: ")]
    assert queries == ["search_query: " + QUESTION]
    # one chat request: the planted passage in it, and it fits the window with its reply cap
    chats = scripted.chats()
    assert len(chats) == 1
    request = chats[0]
    prompt = request.body["messages"][-1]["content"]
    assert "Bartholomew Quince" in prompt and re.search(
        "Question: " + re.escape(QUESTION) + r"\nAnswer in at most \d+ words, and finish your last sentence\.$", prompt)
    window, reply = request.num_ctx, request.body["options"]["num_predict"]
    assert window == job.window
    assert math.ceil(request.prompt_bytes / 4) + reply <= window
    assert len(prompt) < len(haystack(150, {131: FACT})) / 10        # passages, not the file
    # passages in document order, each with its heading path and lines
    numbers = [int(n) for n in re.findall(r"^\[(\d+)\] \(", prompt, re.M)]
    assert numbers == sorted(numbers) and len(numbers) >= 2
    assert re.search(r"^\[\d+\] \(Section 131: harbour logistics; lines \d+–\d+\)$", prompt, re.M)
    # the session: the answer as the reply, the scene with the rag note and the passages
    text = (live.services.store.folder / f"{name}.spmd").read_text()
    assert "The cat is called Bartholomew Quince" in text
    assert "INT. CHUNK ANALYSIS" in text
    assert "Retrieval answer: 1 model call, " in text                        # (issue 45: "1 model calls")
    assert re.search(rf"\[\[rag: {len(job.rag)} chunks from harbour\.md, top score \d\.\d\d\]\]", text)
    assert "found by hybrid search (keywords and nomic-embed-text:latest)" in text
    # the cited passage is listed under the answer and opens with the fact in it
    cited = int(re.search(r"Quince \[(\d+)\]", text).group(1))
    page = live.get(f"/s/{name}").text
    assert f"/turns/{job.turn}/passages/{cited}" in page and 'class="sources"' in page
    assert f"Answer from {len(job.rag)} passages of harbour.md" in page
    opened = live.get(f"/s/{name}/turns/{job.turn}/passages/{cited}", headers={"HX-Request": "true"})
    assert opened.status_code == 200 and "Bartholomew Quince" in opened.text


def test_a_second_question_on_the_unchanged_file_embeds_no_document_text(harbour, scripted):
    live = harbour()
    name = live.open_session()
    ask_by_retrieval(live, name)
    before = len(document_embeds(scripted))
    ask_by_retrieval(live, name, "Where does the harbour master's cat sleep in harbour.md?")
    assert len(document_embeds(scripted)) == before
    assert len(scripted.chats()) == 2
    assert "crane seven" in scripted.chats()[1].body["messages"][-1]["content"]


def test_a_changed_file_is_indexed_again(harbour, scripted):
    live = harbour()
    name = live.open_session()
    first, _ = ask_by_retrieval(live, name)
    before = len(document_embeds(scripted))
    path = Path(live.config.workspace) / "harbour.md"
    path.write_text(path.read_text() + "\n## Addendum\n\nThe cat moved to crane nine in 2026.\n")
    ask_by_retrieval(live, name)
    assert len(document_embeds(scripted)) - before >= first.rag_chunks


def test_without_an_embedding_model_keyword_search_answers_and_the_card_says_how_to_get_one(harbour, scripted):
    live = harbour(embedder=False)
    name = live.open_session()
    job, card = ask_by_retrieval(live, name)
    assert "No embedding model is installed" in card and "ollama pull nomic-embed-text" in card
    assert scripted.embeds() == []
    assert len(scripted.chats()) == 1
    assert "Bartholomew Quince" in scripted.chats()[0].body["messages"][-1]["content"]
    text = (live.services.store.folder / f"{name}.spmd").read_text()
    assert "found by keyword search;" in text


def test_a_small_window_gets_fewer_passages_never_an_overflow(harbour, scripted):
    scripted.models["tiny:1b"] = 2048
    live = harbour(passages=8)
    name = live.open_session()
    job, _ = ask_by_retrieval(live, name)
    request = scripted.chats()[0]
    assert request.num_ctx == 2048
    assert math.ceil(request.prompt_bytes / 4) + request.body["options"]["num_predict"] <= 2048
    assert 1 <= len(job.rag) < 8


def test_a_passage_cut_mid_section_brings_its_neighbours_in_that_section(harbour, scripted):
    long_section = "\n".join(f"Paragraph {p} of the long section on tides and moorings, with the estuary's "
                              "currents and the pilots' duties described at length. " * 4 for p in range(16))
    text = haystack(60) + "\n## The long section\n\n" + long_section.replace(
        "Paragraph 8 of", FACT + " Paragraph 8 of", 1) + "\n" + haystack(10)
    live = harbour(embedder=False, text=text, passages=1)
    name = live.open_session()
    job, _ = ask_by_retrieval(live, name)
    sections = {p["section"] for p in job.rag}
    numbers = [p["chunk"] for p in job.rag]
    assert sections == {"The long section"} and len(numbers) == 3
    assert numbers == list(range(numbers[0], numbers[0] + 3))             # the hit and both neighbours
    prompt = scripted.chats()[0].body["messages"][-1]["content"]
    assert "Bartholomew Quince" in prompt and prompt.count("(The long section; lines") == 3


def test_cancel_while_indexing_then_a_restart_resumes_the_index(harbour, scripted, make_live):
    scripted.embed_delay = 0.1
    live = harbour(embed_batch=2)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": QUESTION})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": QUESTION, "way": "retrieve"})
    wait_for(lambda: len(document_embeds(scripted)) >= 6, 60, "a few batches embedded")
    assert live.post(f"/s/{name}/analysis/{job.id}/cancel").status_code == 204
    wait_for(lambda: job.state == "choose", 60, f"the job stopped (it is {job.state})")
    card = live.get(f"/s/{name}").text
    assert "Answer from harbour.md stopped" in card and "Synthesize the partial answers" not in card
    live.post(f"/s/{name}/analysis/{job.id}/after-cancel", data={"keep": "no"})
    wait_for(lambda: job.id not in live.services.jobs.jobs, 30, "the cancelled job recorded")
    assert scripted.chats() == []                                    # nothing was asked of the chat model
    wait_for(lambda: all(p.finished.is_set() for p in live.services.indexer._tasks.values()), 30,
             "the index lane stopped after its batch")
    done = len(document_embeds(scripted))
    config = live.config
    live.close()                                                     # the server restarts
    scripted.embed_delay = 0.0
    again = make_live(config)
    name2 = again.open_session()
    job2, _ = ask_by_retrieval(again, name2)
    sent = document_embeds(scripted)
    assert 6 <= done < job2.rag_chunks
    # after the restart only the chunks still without a vector were sent: across both runs every
    # chunk (each text unique) was embedded exactly once
    assert len(sent) == len(set(sent)) == job2.rag_chunks
    assert "Bartholomew Quince" in scripted.chats()[0].body["messages"][-1]["content"]


def test_the_retrieval_scene_reads_back_with_its_rag_note_and_passages():
    """No chunk-result notes (no chunk was run), the rag note after the chunk note, every passage."""
    passages = {7: spmd.CitedPassage(7, 100, 900, (12, 30), None, "Intro › Cats"),
                40: spmd.CitedPassage(40, 5000, 6100, (200, 230), (9, 10))}
    a = spmd.ChunkAnalysis("harbour.md", 150, "llama3.2:3b", "paragraph", 600, "What is the cat called?",
                           datetime(2026, 12, 1, 10, 0, 0), [], "ok", passages=passages,
                           source="sha256:0123abcd", chunk_bytes=2400,
                           rag="rag: 2 chunks from harbour.md, top score 0.87")
    text = spmd.dumps(spmd.Screenplay({}, [spmd.chunk_scene(a, "rsdoiel")]))
    assert "[[rag: 2 chunks from harbour.md, top score 0.87]]" in text and "chunk-result" not in text
    assert text.index("[[chunk: file=harbour.md") < text.index("[[rag:") < text.index("[[chunk-passage: 7/150")
    assert FountainParser().validate(text) == []
    assert spmd.read_chunk_scene(spmd.loads(text).scenes[0]) == a


def test_the_running_card_says_it_is_finding_passages_not_counting_chunks(harbour, scripted):
    scripted.embed_delay = 0.2
    live = harbour(embed_batch=2)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": QUESTION})
    job = live.services.jobs.open_for(name)
    card = live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": QUESTION, "way": "retrieve"}).text
    assert "Answer from the most relevant passages of harbour.md" in card
    assert "chunks done" not in card and "<progress" not in card
    wait_for(lambda: any("passages embedded" in e.data for e in live.services.jobs.log_for(job).snapshot()
                         if e.name == "progress"), 60, "an indexing progress event")
    live.services.jobs.cancel(job)
    wait_for(lambda: job.state == "choose", 60, f"the job stopped (it is {job.state})")


def start_retrieval(live, question=QUESTION):
    """A new session asks about harbour.md and takes the card's second choice; its job."""
    name = live.post("/new").url.path.rsplit("/", 1)[-1]
    live.post(f"/s/{name}/messages", data={"message": question})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": question, "way": "retrieve"})
    return name, job


def test_one_jobs_cancel_does_not_leave_another_job_keyword_only(harbour, scripted):
    scripted.embed_delay = 0.1
    live = harbour(embed_batch=2)
    first_name, first = start_retrieval(live)
    wait_for(lambda: len(document_embeds(scripted)) >= 4, 60, "the first job's index under way")
    second_name, second = start_retrieval(live)                       # same file, another session
    assert live.post(f"/s/{first_name}/analysis/{first.id}/cancel").status_code == 204
    wait_for(lambda: first.state == "choose", 60, f"the first job stopped (it is {first.state})")
    wait_for(lambda: second.state in ("done", "failed", "interrupted"), 120,
             f"the second answer (it is {second.state}: {second.message})")
    assert second.state == "done", second.message
    assert second.rag_search == f"hybrid search (keywords and {EMBEDDER})"   # its index was finished, not cut
    assert len(set(document_embeds(scripted))) == second.rag_chunks


def test_waiting_for_the_index_wakes_per_batch_and_at_stop_never_by_polling(harbour, scripted):
    scripted.embed_delay = 1.0                                         # a slow embedder: a second per batch
    live = harbour(embed_batch=16)
    runner = live.services.jobs
    looks = []
    stopped = runner.steps.stopped                   # what the retrieval step asks (``steps.RunSteps``)
    runner.steps.stopped = lambda job: looks.append(job.id) or stopped(job)   # counts each look at a Stop
    name, job = start_retrieval(live)
    wait_for(lambda: len(scripted.embeds()) >= 5, 60, "five slow batches sent")
    batches = len(scripted.embeds())
    assert 1 <= len(looks) <= batches + 1, looks     # one look, then one per batch done: not one per half second
    runner.cancel(job)
    wait_for(lambda: job.state == "choose", 30, f"the job stopped at once (it is {job.state})")


def test_a_fact_past_what_the_embedder_reads_is_still_sent(harbour, scripted):
    live = harbour()
    scripted.models[EMBEDDER] = 128                                    # reads ~512 bytes; passages are ~2,400
    name = live.open_session()
    job, _ = ask_by_retrieval(live, name)
    assert all(r.body["truncate"] is False for r in scripted.embeds())
    assert all(scripted.tokens_of(t) <= 128 for t in scripted.embedded_texts())
    assert job.rag_search == f"hybrid search (keywords and {EMBEDDER})"
    assert "Bartholomew Quince" in scripted.chats()[0].body["messages"][-1]["content"]


def retrieval_button(card: str) -> str:
    """The card's second-choice button text."""
    return re.search(r"Answer from the most relevant passages \((.*?)may miss what is spread", card, re.S).group(1)


def retrieval_chunk_count(live) -> int:
    """The passages the retrieval chunker makes of the workspace's harbour.md (what indexing embeds)."""
    from app import chunking
    path = Path(live.config.workspace) / "harbour.md"
    return len(chunking.chunk_document(live.services.indexer.document(path)))


def test_the_card_says_what_indexing_costs_until_the_index_is_whole(harbour, scripted):
    live = harbour()
    name = live.open_session()
    count = retrieval_chunk_count(live)
    card = live.post(f"/s/{name}/messages", data={"message": QUESTION}).text
    # no index yet, no batch measured: the passages to embed, the time said unknown
    assert f"{count} passages to index first (time unknown until the first batch)" in retrieval_button(card)
    # drawing the card embedded nothing, asked no model and wrote no index
    assert scripted.embeds() == [] and scripted.chats() == []
    assert not list((live.config.data_path / "indexes").glob("*.sqlite"))
    live.post(f"/s/{name}/analysis/{live.services.jobs.open_for(name).id}/decline")
    job, _ = ask_by_retrieval(live, name)
    assert live.services.calibration.embed_seconds(EMBEDDER) > 0        # measured from the real batches
    embeds = len(scripted.embeds())
    card = live.post(f"/s/{name}/messages", data={"message": "Where does the cat sleep in harbour.md?"}).text
    assert "to index" not in retrieval_button(card)                       # a whole index: no indexing cost
    assert len(scripted.embeds()) == embeds
    live.post(f"/s/{name}/analysis/{live.services.jobs.open_for(name).id}/decline")
    # a changed file needs a new index: now with a time, at the measured seconds per piece
    path = Path(live.config.workspace) / "harbour.md"
    path.write_text(path.read_text() + "\n## Addendum\n\nThe cat moved to crane nine in 2026.\n")
    card = live.post(f"/s/{name}/messages", data={"message": QUESTION}).text
    assert re.search(rf"about \d+ min to index {retrieval_chunk_count(live)} passages", retrieval_button(card))
    assert len(scripted.embeds()) == embeds


def test_a_keyword_only_card_says_indexing_takes_seconds(harbour, scripted):
    live = harbour(embedder=False)
    name = live.open_session()
    card = live.post(f"/s/{name}/messages", data={"message": QUESTION}).text
    assert "a keyword index first (seconds)" in retrieval_button(card)
    live.post(f"/s/{name}/analysis/{live.services.jobs.open_for(name).id}/decline")
    ask_by_retrieval(live, name)
    card = live.post(f"/s/{name}/messages", data={"message": QUESTION}).text
    assert "index" not in retrieval_button(card)
