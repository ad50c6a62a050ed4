"""Embedding models: which installed model embeds, the prefixes each expects, and vectors as bytes.

Several embedding models were trained with a marker before the text that says what it is (nomic's
``search_query: `` / ``search_document: ``, e5's ``query: `` / ``passage: ``); without it their
vectors rank noticeably worse.  The table below is the one place that knows them.  Vectors are kept
unit-length as float32 bytes (the ``array`` module, no numpy), so a cosine is one dot product.
"""

from __future__ import annotations

import math
import operator
import re
from array import array

QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "

# (pattern on the model's base name, query prefix, document prefix); the first match wins.
PREFIXES: tuple[tuple[str, str, str], ...] = (
    (r"nomic-embed", "search_query: ", "search_document: "),
    (r"(^|[-_])e5([-_.]|$)", "query: ", "passage: "),
    (r"mxbai-embed", QUERY_INSTRUCTION, ""),
    (r"snowflake-arctic-embed", QUERY_INSTRUCTION, ""),
)

# Names of models that embed (Ollama's library and the common sentence-transformers ports).
_EMBEDDERS = re.compile(r"embed|minilm|(^|[-_])e5([-_.]|$)|^bge|gte-|mpnet|paraphrase-", re.I)

MODEL_HINT = "ollama pull nomic-embed-text (or all-minilm, smaller)"


def base_name(model: str) -> str:
    """``me/nomic-embed-text:latest`` -> ``nomic-embed-text``: prefixes and detection go by family."""
    return model.rsplit("/", 1)[-1].split(":", 1)[0].lower()


def prefixes(model: str) -> tuple[str, str]:
    """(query prefix, document prefix) the model was trained with; ("", "") for one without."""
    name = base_name(model)
    for pattern, query, document in PREFIXES:
        if re.search(pattern, name):
            return query, document
    return "", ""


def query_text(model: str, query: str) -> str:
    """The text embedded for a question."""
    return prefixes(model)[0] + query


def document_text(model: str, text: str) -> str:
    """The text embedded for a passage."""
    return prefixes(model)[1] + text


def is_embedder(model: str) -> bool:
    """Whether the name looks like an embedding model (a chat model's vectors rank poorly)."""
    return bool(_EMBEDDERS.search(base_name(model)))


def choose(setting: str, installed: list[str]) -> str | None:
    """The embedding model to use: the configured name, "" (none: keyword search only), or
    "auto": the first installed model that looks like an embedder (None when there is none)."""
    if setting != "auto":
        return setting or None
    for name in installed:
        if is_embedder(name):
            return name
    return None


def pack(vector: list[float]) -> bytes:
    """A vector scaled to unit length, as float32 bytes (a zero vector stays zero)."""
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return array("f", (x / norm for x in vector)).tobytes()


def unpack(blob: bytes) -> array:
    """float32 bytes back to numbers."""
    vector = array("f")
    vector.frombytes(blob)
    return vector


def dot(a, b) -> float:
    """The dot product: the cosine of two unit vectors."""
    return sum(map(operator.mul, a, b))
