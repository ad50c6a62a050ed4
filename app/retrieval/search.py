"""Search an index: keyword (FTS5's BM25), vectors (brute-force cosine), and the two fused.

Keyword search always works and catches exact names and numbers that embeddings blur; vector
search catches a question worded unlike the passage.  Reciprocal rank fusion (k = 60, Cormack et
al. 2009) joins the two by rank alone, so BM25's unbounded scores and cosines in [-1, 1] never have
to be put on one scale.  A file's few thousand unit vectors are scanned in Python in milliseconds
per thousand: no vector database, no numpy.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass

from .embedding import dot, unpack
from .index import Index, query_grams, unspaced

RRF_K = 60
CANDIDATES = 50             # hits taken from each ranking before they are fused

# Words too common to say anything about a passage (a query of only these finds nothing by keyword).
_STOP = frozenset("""a an and are as at be but by can do does did for from had has have how i if in into is it
its me my no not of on or our so than that the their them then there these they this to was we were what
when where which who whom why will with would you your about says say said tell file document""".split())
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Hit:
    """One passage found: its chunk number, fused score and what each ranking said of it."""

    n: int
    score: float                     # the fused score (RRF), or the one ranking's own score
    bm25: float | None = None        # higher is better
    cosine: float | None = None

    @property
    def shown_score(self) -> float:
        """The score a person reads (``top score 0.87``): the cosine when vectors ranked it, else BM25."""
        return self.cosine if self.cosine is not None else (self.bm25 or 0.0)


def match_expression(query: str) -> str:
    """An FTS5 MATCH expression for a question: its telling words, each quoted (so no word is read
    as an FTS operator), any of them (OR), BM25 ranking passages with more and rarer ones first."""
    words, seen = [], set()
    for word in _WORD.findall(query.lower()):
        if any(unspaced(ch) for ch in word):
            continue                 # a clause without spaces is one "word" to unicode61: ``cjk_match``
        if word not in _STOP and word not in seen and (len(word) > 1 or word.isdigit()):
            seen.add(word)
            words.append(f'"{word}"')
    return " OR ".join(words)


def cjk_match(query: str) -> str:
    """The MATCH expression of the question's text written without spaces (Japanese, Chinese,
    Thai): its character pairs and one-character words (``index.query_grams``), any of them."""
    return " OR ".join(f'"{g}"' for g in query_grams(query))


def keyword(index: Index, query: str, limit: int = CANDIDATES) -> list[tuple[int, float]]:
    """BM25 hits, best first: (chunk number, score); a question with words of both kinds gets both
    tables' rankings fused."""
    match, grams = match_expression(query), cjk_match(query)
    words = index.fts(match, limit) if match else []
    pairs = index.cjk(grams, limit) if grams else []
    if words and pairs:
        return fuse(words, pairs)[:limit]
    return words or pairs


def nearest(index: Index, model: str, query_vector: bytes, limit: int = CANDIDATES) -> list[tuple[int, float]]:
    """The chunks whose vectors are closest to the query's (unit float32 bytes), best first; a chunk
    embedded as several pieces scores as its best piece (the one that holds what was asked)."""
    q = unpack(query_vector)
    best: dict[int, float] = {}
    for n, blob in index.vectors(model):
        score = dot(q, unpack(blob))
        if score > best.get(n, -2.0):
            best[n] = score
    return [(n, score) for score, n in heapq.nlargest(limit, ((s, n) for n, s in best.items()))]


def fuse(*rankings: list[tuple[int, float]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: each passage scores sum(1 / (k + rank)) over the rankings it is in."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, (n, _) in enumerate(ranking, start=1):
            scores[n] = scores.get(n, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def search(index: Index, query: str, model: str | None = None, query_vector: bytes | None = None,
           limit: int = 8, mode: str = "hybrid") -> list[Hit]:
    """The ``limit`` best passages for ``query``.  ``mode``: "keyword", "vector" or "hybrid" (both
    fused; keyword alone when there is no model or query vector)."""
    words = keyword(index, query) if mode != "vector" else []
    vectors = (nearest(index, model, query_vector)
               if mode != "keyword" and model and query_vector is not None else [])
    bm25, cosine = dict(words), dict(vectors)
    if words and vectors:
        ranked = fuse(words, vectors)
    else:
        ranked = words or vectors
    return [Hit(n, score, bm25.get(n), cosine.get(n)) for n, score in ranked[:limit]]
