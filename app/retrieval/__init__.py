"""Retrieval (issue 25, seed 000's deferred "ephemeral RAG"): answer a question about a large file
from its most relevant passages instead of reading every chunk.

Modules, by job: ``embedding`` (which installed model embeds, each model's own prefixes, vectors as
float32 bytes), ``index`` (one SQLite file per file version: the chunks, an FTS5 table, the vectors;
keyed by the chunker fingerprint so an unchanged file is never indexed twice), ``search`` (BM25,
brute-force cosine, reciprocal rank fusion), ``indexer`` (builds an index in the background on the
worker's "index" lane, durable and resumable; the one writer of an index).
"""
