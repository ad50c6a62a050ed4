"""app/retrieval's index and search on real SQLite files (issue 25, layer 1): the retrieval chunk
preset, one index per chunker fingerprint, FTS5 keyword search, brute-force cosine, reciprocal rank
fusion, embedding models' prefixes."""

import math
import os

import pytest

from app import chunking
from app.retrieval import embedding, index as ix, search


def haystack(sections: int = 30, fact: str = "", at: int = -1) -> str:
    """A Markdown file of ``sections`` sections of filler prose; ``fact`` planted in section ``at``."""
    out = []
    for s in range(sections):
        out.append(f"## Section {s}: harbour logistics\n")
        for p in range(4):
            out.append(f"Paragraph {p} of section {s} talks about cargo, cranes and the tides of the "
                       f"estuary, which move ships in and out on a schedule the harbour master keeps. " * 3 + "\n")
        if s == at:
            out.append(fact + "\n")
    return "\n".join(out)


def build(tmp_path, text: str, name: str = "notes.md"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    doc = chunking.read_document(path, chunking.retrieval_settings())
    chunks = chunking.chunk_document(doc)
    target = ix.path_for(tmp_path / "data", doc.fingerprint)
    with ix.Index(target, write=True) as index:
        index.add_document(doc, chunks)
    return doc, chunks, target


def test_retrieval_preset_packs_sections_near_600_tokens():
    settings = chunking.retrieval_settings()
    assert settings.purpose == "retrieval" and settings.size_tokens == 600 and settings.overlap == "none"
    doc = chunking.make_document(haystack(20), "markdown", settings)
    chunks = chunking.chunk_document(doc)
    assert all(c.tokens <= 600 for c in chunks)
    # section-first: no chunk holds the start of more than one section heading once it is a quarter full
    assert len(chunks) >= 10
    assert chunks[0].fingerprint == settings.fingerprint
    # fixed settings: the same text always makes the same key
    assert chunking.make_document(haystack(20), "markdown", chunking.retrieval_settings()).fingerprint == doc.fingerprint


def test_index_keeps_chunks_with_lines_headings_and_is_found_by_fingerprint(tmp_path):
    doc, chunks, target = build(tmp_path, haystack(12))
    assert target.name == f"{doc.fingerprint}.sqlite" and target.parent.name == "indexes"
    with ix.Index(target) as index:
        assert index.has_chunks() and index.chunk_count() == len(chunks)
        assert index.complete(None) and not index.complete("nomic-embed-text")
        got = index.passages([3, 1])
        assert [p.n for p in got] == [1, 3]
        assert got[0].text == chunks[1].text and got[0].heading_path == chunks[1].heading_path
        assert (got[0].first_line, got[0].last_line) == (chunks[1].first_line, chunks[1].last_line)
        assert doc.text[got[1].body_start:got[1].end] in got[1].text
        assert index.meta("fingerprint") == doc.fingerprint


def test_a_changed_file_has_another_index_and_the_same_file_the_same(tmp_path):
    doc1, _, t1 = build(tmp_path, haystack(8))
    doc2, _, t2 = build(tmp_path, haystack(8))
    doc3, _, t3 = build(tmp_path, haystack(8) + "\nOne more line.\n")
    assert t1 == t2 and t1 != t3


def test_adding_the_document_twice_keeps_one_copy(tmp_path):
    doc, chunks, target = build(tmp_path, haystack(6))
    with ix.Index(target, write=True) as index:
        index.add_document(doc, chunks)
        assert index.db.execute("SELECT count(*) FROM chunks").fetchone()[0] == len(chunks)


def test_keyword_search_finds_a_planted_fact_with_stemming(tmp_path):
    fact = "The lighthouse keeper Amalia Quist repainted the beacons in violet during 1887."
    doc, chunks, target = build(tmp_path, haystack(40, fact, at=31))
    want = next(c.index for c in chunks if "Amalia Quist" in c.text)
    with ix.Index(target) as index:
        hits = search.search(index, "Who repaints the beacon?", mode="keyword")
        assert hits and hits[0].n == want and hits[0].bm25 > 0 and hits[0].cosine is None
        # nothing but stop words: nothing found, nothing raised
        assert search.search(index, "what is the", mode="keyword") == []


@pytest.mark.parametrize("query", ['NOT "AND" OR (x', "col:text*", "^near NEAR(a b)", "'; DROP TABLE chunks; --"])
def test_fts_syntax_in_a_question_is_read_as_words(tmp_path, query):
    doc, chunks, target = build(tmp_path, haystack(5))
    with ix.Index(target) as index:
        search.keyword(index, query)       # must not raise an FTS5 syntax error
        assert index.chunk_count() == len(chunks)


def test_vectors_are_stored_unit_length_resumable_and_searched_by_cosine(tmp_path):
    doc, chunks, target = build(tmp_path, haystack(10))
    n = len(chunks)
    with ix.Index(target, write=True) as index:
        index.add_vectors("m", [(i, [1.0, float(i), 0.0]) for i in range(0, n, 2)])
        assert index.missing("m") == list(range(1, n, 2))
        assert not index.complete("m")
        index.add_vectors("m", [(i, [1.0, float(i), 0.0]) for i in range(1, n, 2)])
        assert index.missing("m") == [] and index.complete("m") and index.vector_count("m") == n
        assert index.missing("other") == list(range(n))       # vectors are per model
    with ix.Index(target) as index:
        q = embedding.pack([1.0, 3.0, 0.0])
        best = search.nearest(index, "m", q, limit=3)
        assert best[0][0] == 3 and math.isclose(best[0][1], 1.0, rel_tol=1e-6)
        assert [h.n for h in search.search(index, "zzz", model="m", query_vector=q, mode="vector", limit=1)] == [3]


def test_rrf_adds_reciprocal_ranks_with_k_60():
    fused = search.fuse([(7, 9.0), (3, 5.0)], [(3, 0.9), (8, 0.8)])
    assert fused[0] == (3, 1 / 62 + 1 / 61)
    assert dict(fused)[7] == 1 / 61 and dict(fused)[8] == 1 / 62
    assert [n for n, _ in fused] == [3, 7, 8]


def test_hybrid_brings_a_vector_only_hit_into_the_results(tmp_path):
    fact = "Tariffs for tugboats double on Sundays."
    doc, chunks, target = build(tmp_path, haystack(20, fact, at=12))
    want = next(c.index for c in chunks if "tugboats" in c.text)
    with ix.Index(target, write=True) as index:
        index.add_vectors("m", [(c.index, [1.0, 0.0] if c.index == want else [0.0, 1.0]) for c in chunks])
    with ix.Index(target) as index:
        q = embedding.pack([1.0, 0.1])
        keyword_only = search.search(index, "how much do harbour boats pay at weekends", mode="keyword")
        hybrid = search.search(index, "how much do harbour boats pay at weekends", model="m", query_vector=q)
        assert want not in [h.n for h in keyword_only[:1]]
        assert want in [h.n for h in hybrid[:3]]
        assert next(h for h in hybrid if h.n == want).cosine > 0.99


@pytest.mark.parametrize("model,query,document", [
    ("nomic-embed-text:latest", "search_query: ", "search_document: "),
    ("me/nomic-embed-text:v1.5", "search_query: ", "search_document: "),
    ("multilingual-e5-small", "query: ", "passage: "),
    ("e5-large-v2", "query: ", "passage: "),
    ("all-minilm:l6-v2", "", ""),
    ("llama3.2:3b", "", ""),
])
def test_each_embedding_model_gets_its_own_prefixes(model, query, document):
    assert embedding.prefixes(model) == (query, document)
    assert embedding.query_text(model, "q") == query + "q"
    assert embedding.document_text(model, "d") == document + "d"


def test_auto_chooses_an_installed_embedder_and_none_without_one():
    assert embedding.choose("auto", ["llama3.2:3b", "nomic-embed-text:latest"]) == "nomic-embed-text:latest"
    assert embedding.choose("auto", ["llama3.2:3b", "all-minilm:latest"]) == "all-minilm:latest"
    assert embedding.choose("auto", ["llama3.2:3b", "qwen3:8b"]) is None
    assert embedding.choose("", ["nomic-embed-text"]) is None
    assert embedding.choose("mine:1", []) == "mine:1"


def test_a_damaged_index_file_is_refused_with_a_clear_error(tmp_path):
    bad = ix.path_for(tmp_path, "0123456789abcdef")
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"this is not SQLite at all" * 100)
    with pytest.raises(ix.BrokenIndex, match="cannot be used as an index"):
        ix.Index(bad, write=True)
    with pytest.raises(ix.BrokenIndex, match="no such index"):
        ix.Index(tmp_path / "indexes" / "missing.sqlite")


def test_prune_keeps_the_newest_and_the_one_in_use(tmp_path):
    folder = ix.folder(tmp_path)
    folder.mkdir(parents=True)
    for i in range(6):
        p = folder / f"{i:016d}.sqlite"
        p.write_bytes(b"")
        os.utime(p, (1000 + i, 1000 + i))
    removed = ix.prune(tmp_path, keep=f"{0:016d}", limit=3)
    left = sorted(p.stem for p in folder.glob("*.sqlite"))
    assert left == [f"{0:016d}", f"{4:016d}", f"{5:016d}"]
    assert len(removed) == 3


def test_split_to_fit_cuts_at_sentences_and_words_and_loses_nothing():
    text = ("The tide turns at noon. " * 40) + "\n\n" + ("cranes " * 200) + "x" * 300
    pieces = chunking.split_to_fit(text, 200)
    assert "".join(pieces) == text
    assert all(len(p.encode()) <= 200 for p in pieces)
    sentences = [p for p in pieces if "tide" in p]
    assert all(p.rstrip().endswith(".") for p in sentences)          # cut after a sentence, not inside one
    assert all(p.startswith("cranes") or p.startswith("x") for p in pieces if "tide" not in p)
    assert chunking.split_to_fit("short", 200) == ["short"]


def test_a_chunk_of_several_pieces_scores_as_its_best_piece_and_counts_once(tmp_path):
    doc, chunks, target = build(tmp_path, haystack(10))
    n = len(chunks)
    with ix.Index(target, write=True) as index:
        items = [(i, [1.0, 0.0, 0.0]) for i in range(n)] + [(2, [0.0, 1.0, 0.0])]   # chunk 2: a second piece
        index.add_vectors("m", sorted(items, key=lambda item: item[0]))
        assert index.vector_count("m") == n and index.complete("m")
        index.add_vectors("m", [(3, [0.0, 0.0, 1.0])])                           # embedded again: replaced
        assert sum(1 for k, _ in index.vectors("m") if k == 3) == 1
    with ix.Index(target) as index:
        best = search.nearest(index, "m", embedding.pack([0.0, 1.0, 0.0]), limit=n)
        assert best[0][0] == 2 and math.isclose(best[0][1], 1.0, rel_tol=1e-6)
        assert len(best) == len({k for k, _ in best}) == n                   # one hit per chunk


def test_prune_spares_an_open_index_and_reading_marks_an_index_used(tmp_path):
    doc, chunks, target = build(tmp_path, haystack(3))
    folder = ix.folder(tmp_path / "data")
    os.utime(target, (1000, 1000))                                           # written long ago
    others = []
    for i in range(4):
        p = folder / f"{i:016d}.sqlite"
        p.write_bytes(b"")
        os.utime(p, (2000 + i, 2000 + i))
        others.append(p)
    with ix.Index(target):                                                   # a job reads it now
        assert target.stat().st_mtime > 2003
        os.utime(target, (1000, 1000))                                       # even if it looks old,
        removed = ix.prune(tmp_path / "data", keep=f"{3:016d}", limit=2)             # it is open: never removed
    assert target.exists() and target not in removed
    assert sorted(p.stem for p in folder.glob("*.sqlite")) == sorted([target.stem, f"{3:016d}"])
