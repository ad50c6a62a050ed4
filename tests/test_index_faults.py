"""Damaged index files and text written without spaces (issue 35, items 4 and 6), through waitress
and the scripted Ollama server: a bad sector in an index is a broken index that is built anew, never
a 500; a Japanese question finds its passage by keyword, with no embedding model."""

import re
import sqlite3
from pathlib import Path

import pytest

from app.retrieval import index as ix
from app.retrieval import search
from haystacks import bag_vector
from scripted_ollama import Reply
from test_retrieval_answer import EMBEDDER, QUESTION, ask_by_retrieval, document_embeds, harbour  # noqa: F401


def index_files(live) -> list[Path]:
    return sorted((live.config.data_path / "indexes").glob("*.sqlite"))


def damage(path: Path, tables: tuple[str, ...] | None = None) -> int:
    """Overwrite pages of an index file with junk, as a bad SD-card sector does: every page but
    the first (the header and the schema stay readable), or only the pages of ``tables``."""
    with sqlite3.connect(path) as db:
        size = db.execute("PRAGMA page_size").fetchone()[0]
        if tables:
            marks = ",".join("?" * len(tables))
            pages = [p for (p,) in db.execute(f"SELECT pageno FROM dbstat WHERE name IN ({marks})", tables)]
        else:
            pages = list(range(2, db.execute("PRAGMA page_count").fetchone()[0] + 1))
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(path, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * size)
            fh.write(bytes((page * 37 + i) % 251 for i in range(size)))
    return len(pages)


def test_a_damaged_index_is_made_anew_and_the_question_answered(harbour, scripted):
    live = harbour()
    name = live.open_session()
    first, _ = ask_by_retrieval(live, name)
    embedded = len(document_embeds(scripted))
    [path] = index_files(live)
    assert damage(path, ("vectors", "chunks")) > 10        # it opens; counting its vectors fails
    # the card and the chat page are drawn (no indexing figure or a new one), never a 500
    card = live.post(f"/s/{name}/messages", data={"message": QUESTION})
    assert card.status_code == 200 and "Answer from the most relevant passages" in card.text
    page = live.get(f"/s/{name}")
    assert page.status_code == 200
    live.post(f"/s/{name}/analysis/{live.services.jobs.open_for(name).id}/decline")
    job, _ = ask_by_retrieval(live, name)
    assert "Bartholomew Quince" in scripted.chats()[-1].body["messages"][-1]["content"]
    assert len(document_embeds(scripted)) - embedded == first.rag_chunks      # built anew, whole
    with ix.Index(path) as index:
        assert index.complete(EMBEDDER)


def test_a_file_damaged_past_its_first_page_is_made_anew(harbour, scripted):
    live = harbour()
    name = live.open_session()
    first, _ = ask_by_retrieval(live, name)
    embedded = len(document_embeds(scripted))
    [path] = index_files(live)
    assert damage(path) > 10
    ask_by_retrieval(live, name)
    assert len(document_embeds(scripted)) - embedded == first.rag_chunks


def test_damage_met_by_the_search_itself_rebuilds_and_answers(harbour, scripted):
    """The file opens and says it is complete, but its keyword pages are bad: the search meets
    "database disk image is malformed", the index is built anew and the question answered."""
    live = harbour()
    name = live.open_session()
    first, _ = ask_by_retrieval(live, name)
    card = live.post(f"/s/{name}/messages", data={"message": QUESTION})     # the card of a whole index
    assert card.status_code == 200
    [path] = index_files(live)
    assert damage(path, ("chunks_fts_data", "chunks_fts_idx")) > 0
    with ix.Index(path) as index:
        assert index.complete(EMBEDDER)                                     # what the status reads
        with pytest.raises(ix.BrokenIndex, match="damaged"):
            search.keyword(index, QUESTION)
    embedded = len(document_embeds(scripted))
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": QUESTION, "way": "retrieve"})
    from waiting import wait_for
    wait_for(lambda: job.state in ("done", "failed", "interrupted") and job.id not in live.services.jobs.jobs,
             120, f"the retrieval answer (job is {job.state}: {job.message})")
    assert job.state == "done", job.message
    assert len(document_embeds(scripted)) - embedded == first.rag_chunks
    assert "Bartholomew Quince" in scripted.chats()[-1].body["messages"][-1]["content"]
    assert live.get(f"/s/{name}").status_code == 200


def test_readers_open_an_index_read_only(tmp_path):
    path = tmp_path / "i.sqlite"
    with ix.Index(path, write=True):
        pass
    with ix.Index(path) as index:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            index.db.execute("INSERT INTO meta VALUES ('x', 'y')")


def test_a_reader_query_has_a_time_limit(tmp_path, monkeypatch):
    path = tmp_path / "i.sqlite"
    with ix.Index(path, write=True):
        pass
    monkeypatch.setattr(ix, "QUERY_SECONDS", 0.05)
    with ix.Index(path) as index:
        with pytest.raises(ix.SlowIndex, match="longer than"):
            index._rows("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                        "SELECT count(*) FROM c")


# -- text without spaces --------------------------------------------------------------------------

JA_FACT = "港長の猫の名前はバルトロメオで、第七クレーンで眠る。"
JA_QUESTION = "harbour.md で港長の猫の名前は何ですか？"
JA_FILLER = ("第{s}節の{p}段落は、河口の潮と貨物と起重機について述べ、港の予定に従って船が出入りする様子を"
             "記録している。")


def japanese(sections: int, fact_at: int) -> str:
    out = []
    for s in range(sections):
        out.append(f"## 第{s}節 港の物流\n")
        for p in range(4):
            out.append(JA_FILLER.format(p=p, s=s) * 3 + "\n")
        if s == fact_at:
            out.append(JA_FACT + "\n")
    return "\n".join(out)


def test_a_japanese_question_finds_its_passage_without_an_embedding_model(harbour, scripted):
    def answer(body):
        prompt = body["messages"][-1]["content"]
        return Reply(text="バルトロメオです [1]。" if "バルトロメオ" in prompt else "わかりません。")

    live = harbour(embedder=False, text=japanese(400, 333))
    scripted.script = answer
    name = live.open_session()
    job, card = ask_by_retrieval(live, name, JA_QUESTION)
    assert scripted.embeds() == []
    prompt = scripted.chats()[-1].body["messages"][-1]["content"]
    assert JA_FACT in prompt
    assert "バルトロメオです" in (live.services.store.folder / f"{name}.spmd").read_text()


def test_one_character_words_and_thai_are_kept():
    assert search.cjk_match("猫") == '"u732b"'
    assert ix.query_grams("名前は") == [ix.cjk_grams("名前")[-1], ix.cjk_grams("前は")[-1]]
    assert ix.query_grams("แมว")                         # Thai, written without spaces
    assert search.match_expression("港長の猫 cat") == '"cat"'


def test_an_index_of_the_older_schema_is_made_anew(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema', '2')")
    with pytest.raises(ix.BrokenIndex, match="another schema"):
        ix.Index(path)
    assert re.match(r"\d+", str(ix.SCHEMA)) and ix.SCHEMA >= 3


# -- vectors keyed by the model's digest and dimension (issue 35, item 7) ----------------------------

def test_an_embedder_of_another_dimension_under_the_same_name_gets_the_file_embedded_again(harbour, scripted):
    live = harbour()
    name = live.open_session()
    first, _ = ask_by_retrieval(live, name)
    embedded = len(document_embeds(scripted))
    [path] = index_files(live)
    key = f"{EMBEDDER}@{scripted.digest(EMBEDDER)[:12]}"      # the name and the digest /api/tags gives
    with ix.Index(path) as index:
        assert index.vector_key(EMBEDDER) == f"{key}#64"
    # a new model pulled under the same tag: 32 numbers a vector
    scripted.embed_fn = lambda text: bag_vector(text)[:32]
    job, _ = ask_by_retrieval(live, name, "Where does the harbour master's cat sleep in harbour.md?")
    assert len(document_embeds(scripted)) - embedded == first.rag_chunks        # every passage again
    with ix.Index(path) as index:
        assert index.vector_key(EMBEDDER) == f"{key}#32" and index.complete(EMBEDDER)
    assert "crane seven" in scripted.chats()[-1].body["messages"][-1]["content"]
    assert "found by hybrid search" in (live.services.store.folder / f"{name}.spmd").read_text()


def test_a_new_digest_under_the_same_name_makes_the_vectors_stale(tmp_path, scripted):
    """The digest a model server reports (Ollama's /api/tags) is part of the key: a model pulled
    again under the same tag is never compared with the old vectors."""
    from test_retrieval_indexer import index_and_wait, new_indexer, write
    scripted.models[EMBEDDER] = 2048
    scripted.embed_fn = bag_vector
    indexer = new_indexer(tmp_path, scripted)
    digests = {EMBEDDER: "sha256:aaaaaaaaaaaaaaaa"}
    indexer.models.digest = lambda model: digests[model]        # what a server that says it answers
    path = write(tmp_path, "## One\n\nThe cat sleeps in crane seven.\n\n## Two\n\nThe tide turns at noon.\n")
    doc, progress = index_and_wait(indexer, path)
    assert progress.state == "complete"
    with ix.Index(ix.path_for(tmp_path / "data", doc.fingerprint)) as index:
        assert index.vector_key(EMBEDDER) == f"{EMBEDDER}@sha256:aaaaa#64"
    assert indexer.status(doc).complete
    digests[EMBEDDER] = "sha256:bbbbbbbbbbbbbbbb"
    assert not indexer.status(doc).complete and indexer.cost(doc).passages == progress.total
    before = len(scripted.embedded_texts())
    doc, progress = index_and_wait(indexer, path)
    assert progress.state == "complete" and len(scripted.embedded_texts()) - before == progress.total
    with ix.Index(ix.path_for(tmp_path / "data", doc.fingerprint)) as index:
        assert index.vector_key(EMBEDDER) == f"{EMBEDDER}@sha256:bbbbb#64"
