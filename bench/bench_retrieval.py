"""Recall of planted facts at the passages sent, by keyword, vectors and hybrid search (issue 25).

Run from the repository root::

    python bench/bench_retrieval.py [--sizes 10000,50000,250000] [--k 4,8]
                                    [--embed-url http://127.0.0.1:11434 --embed-model nomic-embed-text]

A haystack is generated (seeded): Markdown sections of prose drawn from a few thousand
pseudo-words and common English words, with ``FACTS`` planted at spread-out depths.  Each
fact's question says it in other words (only a word or two in common), as a user would ask.
The file is chunked with the retrieval preset (seed 002: ~600 tokens, section-first), put in an
index (``app.retrieval.index``: SQLite, FTS5), and, with an embedder, every chunk embedded
(``search_document:`` / ``search_query:`` prefixes for nomic, as the app does).

Recall@k: the share of questions whose planted fact lies in one of the top k passages, which is
what the answer's one request holds (8 passages of ~600 tokens fill an 8,192 window's room).
Reading every chunk (the card's first choice) sees every fact by construction; its cost is the
map calls, given beside.

Embedders: ``--embed-url``/``--embed-model`` name an Ollama-API server and model (real Ollama, or
``harvey serve --demo``'s SmolLM2 mean-pooled vectors).  Without them the vectors come from a
hashed bag of words (``tests/haystacks.bag_vector``): word overlap, no meaning; it checks the
plumbing and the fusion, and its recall says nothing about a real embedding model.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from app import chunking  # noqa: E402
from app.retrieval import embedding, search  # noqa: E402
from app.retrieval.index import Index  # noqa: E402
from app.retrieval.indexer import embed_passages, piece_bytes  # noqa: E402
from _harness import machine  # noqa: E402

# (planted sentence, question in other words, a phrase that identifies the fact's passage)
FACTS = [
    ("The observatory's backup generator burns biodiesel delivered every Thursday by barge.",
     "What fuel powers the observatory's spare power unit?", "burns biodiesel"),
    ("Ms. Okonkwo keeps the only key to the archive vault in a tin of peppermints.",
     "Where is the archive vault key hidden?", "tin of peppermints"),
    ("The ferry timetable was changed in 1994 so that departures leave at seventeen minutes past each hour.",
     "At what minute do boats depart since the schedule change?", "seventeen minutes past"),
    ("Tomatoes in the north greenhouse are watered with rain collected from the chapel roof.",
     "What water is used for the plants grown under glass?", "chapel roof"),
    ("The bridge's maximum load is forty-two tonnes, posted on a blue sign at the east ramp.",
     "How heavy may a truck be when it crosses the span?", "forty-two tonnes"),
    ("Visitors must sign the ledger in green ink, a rule dating from the founder's superstition.",
     "What colour must guests write with in the register?", "green ink"),
    ("The lighthouse lamp rotates once every eleven seconds, slower than any other on the coast.",
     "How long does one turn of the beacon take?", "eleven seconds"),
    ("Payroll is processed on the fourth working day, never on a Monday, per the 2011 audit.",
     "When are salaries calculated each month?", "fourth working day"),
    ("The mascot, a tortoise named Admiral Pim, has lived in the courtyard since 1961.",
     "What animal lives in the courtyard and what is it called?", "Admiral Pim"),
    ("Server backups rotate across three sites: Tromsø, Valparaíso and a basement in Leeds.",
     "In which places are copies of the data kept?", "Valparaíso"),
]
COMMON = ("the of and to in is that for it as with was on be by are this or from at an not which have "
          "has had were been their they its also more other some these than when into only would could "
          "should about after before between during under over through across while since until").split()
TOPICS = ["Operations", "Finance", "Facilities", "History", "Staff", "Transport", "Records", "Grounds",
          "Safety", "Maintenance", "Visitors", "Technology"]


def pseudo_words(rng: random.Random, n: int) -> list[str]:
    syllables = ["ka", "lo", "mi", "ren", "to", "sa", "vel", "qua", "dor", "ni", "pe", "bra", "stu", "gor", "lin"]
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(n)]


def make_haystack(tokens: int, seed: int = 7) -> str:
    """About ``tokens`` tokens (bytes / 4) of sectioned prose with every fact planted once."""
    rng = random.Random(seed)
    vocab = pseudo_words(rng, 3000)
    target = tokens * 4
    sections: list[str] = []
    size = 0
    while size < target:
        topic = rng.choice(TOPICS)
        parts = [f"## {topic} {len(sections) + 1}: {' '.join(rng.sample(vocab, 2))}\n"]
        for _ in range(rng.randint(2, 6)):
            words = [rng.choice(COMMON) if rng.random() < 0.45 else rng.choice(vocab)
                     for _ in range(rng.randint(40, 120))]
            parts.append(" ".join(words).capitalize() + ".\n")
        section = "\n".join(parts)
        sections.append(section)
        size += len(section) + 1
    for i, (fact, _, _) in enumerate(FACTS):           # spread out: depth i/len(FACTS) + a little
        at = min(len(sections) - 1, int(len(sections) * (i + 0.5) / len(FACTS)))
        sections[at] += fact + "\n"
    return "\n".join(sections)


def bag_embedder(model: str, texts: list[str]) -> list[list[float]]:
    from haystacks import bag_vector
    return [bag_vector(t) for t in texts]


def server_embedder(url: str):
    from app.config import Config, ModelServerConfig
    from app.modelserver import connect
    server = connect(Config(model_server=ModelServerConfig(url=url, timeout_s=3600)))
    return server.embed, server.window


def build(path: Path, text: str, embed, model: str | None, batch: int, max_bytes: int) -> tuple[Index, dict]:
    """The index of ``text`` with its vectors (each chunk as pieces of ``max_bytes``, as the app's
    indexer does); what it took."""
    t0 = time.perf_counter()
    doc = chunking.make_document(text, "markdown", chunking.retrieval_settings())
    chunks = chunking.chunk_document(doc)
    t1 = time.perf_counter()
    index = Index(path, write=True)
    index.add_document(doc, chunks)
    t2 = time.perf_counter()
    pieces = 0
    if model:
        for at in range(0, len(chunks), batch):
            part = chunks[at:at + batch]
            vectors = embed_passages(embed, model, [c.text for c in part], max_bytes)
            index.add_vectors(model, [(c.index, v) for c, vs in zip(part, vectors) for v in vs])
            pieces += sum(map(len, vectors))
    t3 = time.perf_counter()
    return index, {"chunks": len(chunks), "pieces": pieces, "chunk_s": t1 - t0, "fts_s": t2 - t1,
                   "embed_s": t3 - t2}


def recall(index: Index, chunks_text: dict[int, str], embed, model: str | None, ks: list[int]) -> dict:
    """Per mode, per k: questions whose fact is in the top k; and the median search time."""
    out = {mode: {k: 0 for k in ks} for mode in ("keyword", "vector", "hybrid")}
    times = []
    for fact, question, marker in FACTS:
        want = {n for n, t in chunks_text.items() if marker in t}
        vector = embedding.pack(embed(model, [embedding.query_text(model, question)])[0]) if model else None
        for mode in out:
            if mode != "keyword" and not model:
                continue
            t0 = time.perf_counter()
            hits = search.search(index, question, model, vector, limit=max(ks), mode=mode)
            times.append(time.perf_counter() - t0)
            for k in ks:
                out[mode][k] += bool(want & {h.n for h in hits[:k]})
    return {"recall": out, "search_ms": 1000 * sorted(times)[len(times) // 2]}


def indexer_run(tokens: int, url: str | None = None, embed_model: str | None = None,
                chat_model: str | None = None) -> None:
    """The app's own Indexer (worker lane, batches over real HTTP) on a ``tokens``-token file: its time
    and this process's peak RSS.  Without ``url`` the scripted server (in this process) embeds with the
    bag of words; with it, that server's ``embed_model`` (e.g. the demo's all-minilm, another process)
    does, and with ``chat_model`` one answer is timed too: a search and one chat request holding the
    top 8 passages, as the card's second choice sends."""
    from app.config import Config, ModelServerConfig, RetrievalConfig
    from app.modelserver import connect
    from app.retrieval.indexer import Indexer
    from app.work.activity import Activities
    from app.work.worker import Worker

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        if url is None:
            from haystacks import bag_vector
            from scripted_ollama import ScriptedOllama
            server = stack.enter_context(ScriptedOllama(models={"tiny:1b": 8192, "nomic-embed-text:latest": 2048}))
            server.embed_fn, url, where = bag_vector, server.url, "the scripted server runs in the same process"
        else:
            server, where = None, f"{embed_model} at {url}, another process"
        path = Path(tmp) / "big.md"
        path.write_text(make_haystack(tokens), encoding="utf-8")
        models = connect(Config(model_server=ModelServerConfig(url=url, timeout_s=600.0)))
        indexer = Indexer(Path(tmp) / "data", models, Worker(Activities()),
                          RetrievalConfig(embed_model=embed_model or "auto"))
        t0 = time.perf_counter()
        doc = indexer.document(path)
        progress = indexer.request(doc)
        indexer.wait(doc.fingerprint, 7200)
        took = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        requests = len(server.embeds()) if server else "?"
        print(f"Indexer, {tokens:,}-token file: {progress.state}, {progress.total} chunks, {requests} embed "
              f"requests, {took:.1f} s; peak RSS of the process {peak:.0f} MB ({before:.0f} MB before the run; "
              f"{where}).")
        if chat_model and server is None:
            answer_run(models, indexer, doc, embed_model, chat_model)


def answer_run(models, indexer, doc, embed_model: str, chat_model: str) -> None:
    """One answer from the built index: the question embedded, a hybrid search, one chat request."""
    from app.analysis.retrieve import _in_rank_order, user_message
    from app.retrieval.index import Index, path_for

    planted, question, _ = FACTS[0]
    t0 = time.perf_counter()
    vector = embedding.pack(models.embed(embed_model, [embedding.query_text(embed_model, question)])[0])
    with Index(path_for(indexer.data_dir, doc.fingerprint)) as index:
        hits = search.search(index, question, embed_model, vector, limit=8)
        passages = sorted(_in_rank_order(index, [h.n for h in hits]), key=lambda p: p.n)
    t1 = time.perf_counter()
    message = user_message("big.md", question, passages)
    text, usage = models.chat_text(chat_model, [{"role": "user", "content": message}], num_ctx=8192,
                                   num_predict=128)
    t2 = time.perf_counter()
    found = any(planted in p.text for p in passages)
    print(f"Answer: search {1000 * (t1 - t0):.0f} ms (the question embedded, hybrid), {len(passages)} passages "
          f"(planted fact among them: {found}), one chat request of {usage.prompt_tokens if usage else '?'} "
          f"prompt tokens and {usage.generated_tokens if usage else '?'} generated in {t2 - t1:.1f} s "
          f"({chat_model}).")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,50000,250000")
    ap.add_argument("--k", default="4,8")
    ap.add_argument("--embed-url")
    ap.add_argument("--embed-model")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--chat-model", help="with --indexer and --embed-url: also time one answer with this model")
    ap.add_argument("--indexer", type=int, metavar="TOKENS",
                    help="instead: time the app's Indexer on a file of TOKENS tokens, and its peak memory")
    args = ap.parse_args(argv)
    if args.indexer:
        indexer_run(args.indexer, args.embed_url, args.embed_model, args.chat_model)
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    ks = [int(k) for k in args.k.split(",")]
    if args.embed_url and args.embed_model:
        (embed, window), model = server_embedder(args.embed_url), args.embed_model
        max_bytes = piece_bytes(model, window(model))
        label = f"{model} at {args.embed_url}, passages embedded as pieces of at most {max_bytes} bytes"
    else:
        embed, model, label = bag_embedder, "bag-of-words", "hashed bag of words (no meaning: a plumbing check)"
        max_bytes = 10 ** 9                                  # no input limit: one piece per chunk
    print(f"Machine: {machine()}.")
    print(f"Embedder: {label}. {len(FACTS)} planted facts, each asked in other words.\n")
    head = "| haystack | chunks | pieces embedded | index file | chunk | FTS | embed | search (median) |"
    rows = []
    rec_rows = []
    for tokens in sizes:
        text = make_haystack(tokens)
        with tempfile.TemporaryDirectory() as tmp:
            index, cost = build(Path(tmp) / "x.sqlite", text, embed, model, args.batch, max_bytes)
            with index:
                chunks_text = {p.n: p.text for p in index.passages(range(cost["chunks"]))}
                res = recall(index, chunks_text, embed, model, ks)
            cost["bytes"] = sum(p.stat().st_size for p in Path(tmp).iterdir())   # closed: WAL checkpointed
        read_all = math.ceil(tokens / 1500)
        rows.append(f"| {tokens:,} tokens | {cost['chunks']} | {cost['pieces']} | {cost['bytes'] / 1e6:.1f} MB "
                    f"| {cost['chunk_s']:.2f} s "
                    f"| {cost['fts_s']:.2f} s | {cost['embed_s']:.1f} s | {res['search_ms']:.0f} ms |")
        for mode, by_k in res["recall"].items():
            cells = " | ".join(f"{by_k[k]}/{len(FACTS)}" for k in ks)
            rec_rows.append(f"| {tokens:,} | {mode} | {cells} | 1 call | about {read_all} map calls + reduce |")
    print(head)
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| haystack (tokens) | search | " + " | ".join(f"recall@{k}" for k in ks) + " | answer | read all chunks |")
    print("|---|---|" + "---|" * len(ks) + "---|---|")
    print("\n".join(rec_rows))
    print(f"\nPeak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
