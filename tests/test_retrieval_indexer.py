"""The retrieval indexer (issue 25, layer 2) against the scripted Ollama server over real HTTP:
embedding in batches on the worker's "index" lane, an unchanged file never embedded twice, a
changed file indexed anew, a cancel kept and resumed after a restart, keyword-only without an
embedding model."""

import dataclasses

import pytest

from app import chunking
from app.config import RetrievalConfig
from app.modelserver import connect
from app.retrieval import index as ix
from app.retrieval.indexer import KEYWORD_ONLY_NOTE, Indexer
from app.work.activity import Activities
from app.work.worker import Worker
from conftest import make_config
from haystacks import bag_vector, haystack
from waiting import wait_until

EMBEDDER = "nomic-embed-text:latest"


@pytest.fixture
def embedder(scripted):
    scripted.models[EMBEDDER] = 2048
    scripted.embed_fn = bag_vector
    return scripted


def new_indexer(tmp_path, server, **settings):
    """An indexer as the app makes one: the real Ollama client, a worker with its lanes."""
    config = make_config(tmp_path, server.url)
    models = connect(config)
    return Indexer(config.data_path, models, Worker(Activities()), RetrievalConfig(**settings))


def write(tmp_path, text, name="harbour.md"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def index_and_wait(indexer, path):
    doc = indexer.document(path)
    progress = indexer.request(doc)
    indexer.wait(doc.fingerprint, 60)
    return doc, progress


def test_a_file_is_embedded_in_batches_with_the_document_prefix(tmp_path, embedder):
    indexer = new_indexer(tmp_path, embedder, embed_batch=4)
    doc, progress = index_and_wait(indexer, write(tmp_path, haystack(20)))
    assert progress.state == "complete" and progress.model == EMBEDDER and progress.note == ""
    total = len(chunking.chunk_document(doc))
    assert progress.total == progress.embedded == total
    sizes = [len(r.body["input"]) for r in embedder.embeds()]
    assert sizes and max(sizes) == 4 and sum(sizes) == total
    assert all(t.startswith("search_document: ") for t in embedder.embedded_texts())
    with ix.Index(ix.path_for(tmp_path / "data", doc.fingerprint)) as index:
        assert index.complete(EMBEDDER)


def test_an_unchanged_file_is_never_embedded_again_even_after_a_restart(tmp_path, embedder):
    path = write(tmp_path, haystack(12))
    index_and_wait(new_indexer(tmp_path, embedder), path)
    before = len(embedder.embeds())
    assert before > 0
    again = new_indexer(tmp_path, embedder)              # a new process: nothing in memory
    doc, progress = index_and_wait(again, path)
    assert progress.state == "complete"
    assert len(embedder.embeds()) == before               # no document text embedded again


def test_a_changed_file_is_indexed_anew(tmp_path, embedder):
    indexer = new_indexer(tmp_path, embedder)
    path = write(tmp_path, haystack(12))
    old, _ = index_and_wait(indexer, path)
    before = len(embedder.embedded_texts())
    path.write_text(haystack(12, {5: "The harbour closes for dredging every March."}), encoding="utf-8")
    new, progress = index_and_wait(indexer, path)
    assert new.fingerprint != old.fingerprint and progress.state == "complete"
    texts = embedder.embedded_texts()[before:]
    assert len(texts) == progress.total and any("dredging" in t for t in texts)
    assert ix.path_for(tmp_path / "data", new.fingerprint).exists()


def test_cancel_mid_index_keeps_what_was_done_and_a_restart_embeds_only_the_rest(tmp_path, embedder):
    embedder.embed_delay = 0.15
    path = write(tmp_path, haystack(40))
    first = new_indexer(tmp_path, embedder, embed_batch=2)
    doc = first.document(path)
    progress = first.request(doc)
    wait_until(lambda: progress.embedded >= 4, 60, "a few batches embedded")
    assert first.cancel(doc.fingerprint)
    first.wait(doc.fingerprint, 60)
    assert progress.state == "cancelled" and 4 <= progress.embedded < progress.total
    assert "cancelled after" in progress.note
    done_before = progress.embedded
    sent_before = embedder.embedded_texts()
    assert len(sent_before) == done_before                # every batch sent was kept
    embedder.embed_delay = 0.0
    second = new_indexer(tmp_path, embedder, embed_batch=8)   # the server restarted
    assert second.status(doc).state == "interrupted"
    _, resumed = index_and_wait(second, path)
    assert resumed.state == "complete" and resumed.embedded == resumed.total
    sent_after = embedder.embedded_texts()[len(sent_before):]
    assert len(sent_after) == resumed.total - done_before  # only the rest
    assert not set(sent_after) & set(sent_before)


def held_second_batch(tmp_path, embedder):
    """An index build whose first batch (4 passages) is stored and whose second is held by the server."""
    indexer = new_indexer(tmp_path, embedder, embed_batch=4)
    doc = indexer.document(write(tmp_path, haystack(20)))
    passed: list[bool] = []
    embedder.hold_embed = lambda texts: bool(passed) or passed.append(True)   # the first batch goes, the next waits
    progress = indexer.request(doc)
    wait_until(lambda: len(embedder.embeds()) == 2, 60, "the second batch sent (and held)")
    wait_until(lambda: progress.activity is not None and progress.activity.in_flight == 1, 30,
               "the held batch seen by the build's activity")
    return indexer, doc, progress, embedder.embeds()[1]


def test_an_embedding_batch_is_a_call_of_the_builds_activity_that_a_cancel_lets_finish(tmp_path, embedder):
    """Issue 34: each batch goes through ModelCalls as a call of the build's activity; a job's cancel
    keeps the batch in flight (its vectors stored, never embedded twice) and stops after it."""
    indexer, doc, progress, held = held_second_batch(tmp_path, embedder)
    assert indexer.cancel(doc.fingerprint)
    assert not progress.activity.stopped and not held.disconnected
    embedder.embed_release.set()
    assert indexer.wait(doc.fingerprint, 60) is progress and progress.finished.is_set()
    assert progress.state == "cancelled" and progress.embedded == 8 and "cancelled after 8 of" in progress.note
    assert len(embedder.embeds()) == 2 and not held.disconnected and progress.activity is None


def test_close_cuts_the_embedding_batch_in_flight_and_keeps_the_ones_stored(tmp_path, embedder):
    """The app shutting down does not wait for an embedding model that takes minutes on a Pi: the
    batch in flight is cut (it is not stored), the finished ones stay, and a restart resumes."""
    indexer, doc, progress, held = held_second_batch(tmp_path, embedder)
    activity = progress.activity
    indexer.close()
    wait_until(lambda: held.disconnected, 30, "the held batch cut by the shutdown")
    assert indexer.wait(doc.fingerprint, 60) is progress and progress.finished.is_set()
    assert progress.state == "cancelled" and progress.embedded == 4 and "cancelled after 4 of" in progress.note
    assert activity.stopped and activity.in_flight == 0
    assert not embedder.embed_release.is_set() and len(embedder.embeds()) == 2
    with ix.Index(ix.path_for(tmp_path / "data", doc.fingerprint)) as index:
        assert index.vector_count(EMBEDDER) == 4 and not index.complete(EMBEDDER)


def test_without_an_embedding_model_the_index_is_keyword_only_and_says_so(tmp_path, scripted):
    indexer = new_indexer(tmp_path, scripted)
    doc, progress = index_and_wait(indexer, write(tmp_path, haystack(10)))
    assert progress.state == "complete" and progress.model is None
    assert progress.note == KEYWORD_ONLY_NOTE and "ollama pull nomic-embed-text" in progress.note
    assert scripted.embeds() == []
    assert indexer.status(dataclasses.replace(doc)).complete


def test_a_dead_server_mid_index_interrupts_and_the_next_request_finishes(tmp_path, embedder):
    indexer = new_indexer(tmp_path, embedder, embed_batch=2)
    path = write(tmp_path, haystack(20))
    embedder.down = True                                  # every request answers 503
    doc, progress = index_and_wait(indexer, path)
    assert progress.state == "interrupted" and "503" in progress.note
    with ix.Index(ix.path_for(tmp_path / "data", doc.fingerprint)) as index:
        assert index.has_chunks() and index.complete(None)      # keyword search works meanwhile
    embedder.down = False
    indexer.models.forget_models()
    _, again = index_and_wait(indexer, path)
    assert again.state == "complete" and again.model == EMBEDDER and again.embedded == again.total


def test_a_damaged_index_file_is_made_anew(tmp_path, embedder):
    indexer = new_indexer(tmp_path, embedder)
    path = write(tmp_path, haystack(6))
    doc = indexer.document(path)
    target = ix.path_for(tmp_path / "data", doc.fingerprint)
    target.parent.mkdir(parents=True)
    target.write_bytes(b"garbage" * 500)
    _, progress = index_and_wait(indexer, path)
    assert progress.state == "complete"
    with ix.Index(target) as index:
        assert index.complete(EMBEDDER)


# -- passages longer than the embedding model reads (review of issue 25) -----------------------

QUESTION = "Which crane does the harbour master's cat Bartholomew sleep in?"
FACT = "The harbour master's cat is named Bartholomew Quince and sleeps in crane seven."


def fact_rank(tmp_path, doc, question=QUESTION):
    """Where vector search alone ranks the chunk holding FACT (1 = first; None: not in the top 50)."""
    from app.retrieval import embedding, search
    from haystacks import bag_vector
    with ix.Index(ix.path_for(tmp_path / "data", doc.fingerprint)) as index:
        want = {p.n for p in index.passages(range(index.chunk_count())) if "Bartholomew" in p.text}
        query = embedding.pack(bag_vector(embedding.query_text(EMBEDDER, question)))
        ranked = [n for n, _ in search.nearest(index, EMBEDDER, query)]
    return next((i + 1 for i, n in enumerate(ranked) if n in want), None)


def test_a_fact_in_a_passages_back_half_is_found_by_vectors_when_the_model_reads_little(tmp_path, embedder):
    embedder.models[EMBEDDER] = 128                      # reads 128 tokens (~512 bytes); chunks are ~600 tokens
    indexer = new_indexer(tmp_path, embedder, embed_batch=4)
    doc, progress = index_and_wait(indexer, write(tmp_path, haystack(30, {17: FACT})))
    assert progress.state == "complete" and progress.embedded == progress.total
    bodies = [r.body for r in embedder.embeds()]
    assert bodies and all(b["truncate"] is False for b in bodies)
    texts = embedder.embedded_texts()
    assert len(texts) > 3 * progress.total                # each ~600-token passage went as several pieces
    assert all(embedder.tokens_of(t) <= 128 for t in texts)   # none the server would have cut
    assert fact_rank(tmp_path, doc) == 1
    with ix.Index(ix.path_for(tmp_path / "data", doc.fingerprint)) as index:
        assert index.complete(EMBEDDER) and index.vector_count(EMBEDDER) == progress.total


def test_a_piece_the_server_refuses_as_too_long_is_sent_again_as_halves(tmp_path, embedder):
    embedder.models[EMBEDDER] = 128
    embedder.token_ratio = 2.0                            # its tokenizer reads 2 bytes a token: planned pieces overflow
    indexer = new_indexer(tmp_path, embedder, embed_batch=4)
    doc, progress = index_and_wait(indexer, write(tmp_path, haystack(30, {17: FACT})))
    assert progress.state == "complete", progress.note
    sent = [r.body["input"] for r in embedder.embeds()]
    refused = [i for i in sent if any(embedder.tokens_of(t) > 128 for t in i)]
    assert refused                                        # the planned pieces were refused (HTTP 400) ...
    answered = [t for i in sent if i not in refused for t in i]
    with ix.Index(ix.path_for(tmp_path / "data", doc.fingerprint)) as index:
        rows = index.db.execute("SELECT count(*) FROM vectors").fetchone()[0]
    assert len(answered) == rows > 2 * progress.total     # ... and sent again as halves that fit, each kept
    assert fact_rank(tmp_path, doc) == 1


def test_a_piece_refused_after_every_halving_stops_the_index_with_a_clear_note(tmp_path, embedder):
    embedder.models[EMBEDDER] = 128
    embedder.token_ratio = 400.0                          # nothing but a few bytes ever fits
    indexer = new_indexer(tmp_path, embedder, embed_batch=2)
    doc, progress = index_and_wait(indexer, write(tmp_path, haystack(4)))
    assert progress.state == "interrupted" and progress.embedded == 0
    assert "refused a passage piece" in progress.note and "halving it 4 times" in progress.note
    assert len(embedder.embeds()) <= 1 + 2 ** 5           # bounded: the batch, then one piece's halvings


def test_a_request_after_another_jobs_cancel_builds_the_index_after_all(tmp_path, embedder):
    embedder.embed_delay = 0.2
    indexer = new_indexer(tmp_path, embedder, embed_batch=1)
    first = indexer.document(write(tmp_path, haystack(6), name="first.md"))
    second = indexer.document(write(tmp_path, haystack(8), name="second.md"))
    busy = indexer.request(first)                         # the lane is busy with this one ...
    queued = indexer.request(second)                      # ... so this one waits in the queue
    assert indexer.cancel(second.fingerprint)             # one job's Cancel
    again = indexer.request(second)                       # another job asks for the same file
    assert again is queued and not again.stop.is_set()
    indexer.wait(second.fingerprint, 60)
    assert busy.state == "complete" and again.state == "complete", again.note


def test_the_cost_counts_what_is_left_and_prices_it_at_the_measured_speed(tmp_path, embedder):
    from app.budget import Calibration
    config = make_config(tmp_path, embedder.url)
    calibration = Calibration(config.data_path / "calibration.json")
    embedder.embed_delay = 0.05
    indexer = Indexer(config.data_path, connect(config), Worker(Activities()), RetrievalConfig(embed_batch=4),
                      calibration)
    path = write(tmp_path, haystack(12))
    doc = indexer.document(path)
    total = len(chunking.chunk_document(doc))
    before = indexer.cost(doc)
    assert (before.complete, before.passages, before.seconds) == (False, total, None)
    assert before.pieces >= total and embedder.embeds() == []          # estimating sent nothing
    assert not ix.path_for(config.data_path, doc.fingerprint).exists()
    indexer.request(doc)
    indexer.wait(doc.fingerprint, 60)
    per_piece = calibration.embed_seconds(EMBEDDER)
    assert per_piece and per_piece > 0
    assert Calibration(config.data_path / "calibration.json").embed_seconds(EMBEDDER) == per_piece   # kept
    assert indexer.cost(doc).complete
    changed = indexer.document(write(tmp_path, haystack(12) + "\n## More\n\nA new paragraph.\n"))
    after = indexer.cost(changed)
    assert not after.complete and after.seconds == pytest.approx(per_piece * after.pieces)
