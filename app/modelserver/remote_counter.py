"""A token counter that asks the model's own server (issue 30): llama-server, llamafile, vLLM.

These servers tokenize with the model's own vocabulary at ``POST /tokenize``, so the app does
not rebuild it (as it does for Ollama, ``tokens``): it asks. Two dialects, told apart once per
server when the counter is built (``detect``):

- llama-server and llamafile: ``{"content", "add_special": false, "with_pieces": true}`` ->
  ``{"tokens": [{"id", "piece"}]}`` (a piece is a string, or its bytes where they are not whole
  UTF-8). Special tokens in the text are parsed, as in a prompt. The pieces give where each token
  starts, for a chunker that packs by tokens.
- vLLM: ``{"model", "prompt", "add_special_tokens": false}`` -> ``{"count", "tokens"}``; where
  each token starts is spread evenly over its piece of text (the chunker checks each chunk's own
  count, so an uneven text costs fill, never the window).

A server whose ``/tokenize`` is missing (404, 405, 501: LM Studio, a proxy) or answers neither
dialect gives ``Unbuildable``, and the estimate stays (the card says "about").

A count over HTTP costs a request, so: each text's count is kept (an LRU of ``KEPT_COUNTS``
by a hash of the text: a chat's history is counted once, not on every page), and a long text is
sent in pieces of at most ``PIECE_CHARS`` cut where the model's split cannot span
(``tokens._segments``: the pieces' sum is the whole's count, checked once per server by
``detect``; a vocabulary where it is not gets its long texts counted whole up to
``WHOLE_MAX_CHARS``, beyond that in pieces, an over-count of at most a token a piece). Which
texts are counted at all stays with the callers: a request counts a file's bounded sample
(``chunking.measure``) and the card a text up to ``plan.COUNT_IN_REQUEST_BYTES``; the worker
counts up to ``plan.PACK_COUNTED_MAX_CHARS`` (16 MB: 64 requests of 256 KB), never a 150 MB file.
"""

from __future__ import annotations

import codecs
import hashlib
import threading
from array import array
from collections import OrderedDict
from typing import Callable

from .errors import ServerError
from .tokens import Unbuildable, _segments

PIECE_CHARS = 256 * 1024          # the most text one /tokenize request carries
WHOLE_MAX_CHARS = 4 * 2**20       # a text counted in one request where pieces would not add up
KEPT_COUNTS = 1024                # texts whose count is kept (a hash and an int each)
KEPT_STARTS_CHARS = 2**20         # the last text's token starts are kept up to this size (a card drawn again)
MISSING = (404, 405, 501)
# A probe: its pieces (cut after the newline before a letter) must add up to the whole, id for id.
PROBE = "Harvey counts tokens.\nA second line, with  two spaces\n<b>and</b> 日本語 🙂\nthe end"

# (status, JSON body or None) of one POST
Post = Callable[[str, dict], tuple[int, object]]


class RemoteCounter:
    """One model's counter on its server's ``/tokenize`` (the interface of ``tokens.Counter``)."""

    exact = True

    def __init__(self, post: Post, model: str, dialect: str, name: str, segmentable: bool):
        self._post = post
        self.model = model
        self.dialect = dialect             # "llama" (llama-server, llamafile) or "vllm"
        self.name = name
        self.family = f"{dialect} /tokenize"   # for harvey check: the server counts (no VERIFIED_PRE entry)
        self.segmentable = segmentable
        self._kept: OrderedDict[bytes, int] = OrderedDict()
        self._last_starts: tuple[bytes, array] | None = None
        self._lock = threading.Lock()

    # -- the interface ------------------------------------------------------------------

    def count(self, text: str) -> int:
        """Tokens in ``text`` as the server counts it inside a prompt (specials parsed, none added)."""
        if not text:
            return 0
        key = _key(text)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        total = sum(len(self._tokenize(piece, pieces=False)) for piece in self._pieces(text))
        with self._lock:
            self._kept[key] = total
            while len(self._kept) > KEPT_COUNTS:
                self._kept.popitem(last=False)
        return total

    def ids(self, text: str) -> list[int]:
        """The server's token ids of ``text`` (the tests compare them)."""
        out: list[int] = []
        for piece in self._pieces(text):
            out.extend(int(t["id"]) if isinstance(t, dict) else int(t) for t in self._tokenize(piece, pieces=False))
        return out

    def starts(self, text: str):
        """Where each token of ``text`` starts (character offsets, ascending, ``array('i')``), as
        ``tokens.Counter.starts``: from llama-server's pieces, evenly over each piece of text for vLLM."""
        key = _key(text) if len(text) <= KEPT_STARTS_CHARS else None
        kept = self._last_starts
        if key is not None and kept is not None and kept[0] == key:
            return array("i", kept[1])
        out = array("i")
        base = 0
        for piece in (_segments(text, PIECE_CHARS) if len(text) > PIECE_CHARS else [text] if text else []):
            tokens = self._tokenize(piece, pieces=self.dialect == "llama")
            if tokens and all(isinstance(t, dict) for t in tokens):
                _starts_from_pieces(tokens, piece, base, out)
            else:
                n = max(1, len(tokens))
                out.extend(base + (i * len(piece)) // n for i in range(len(tokens)))
            base += len(piece)
        if key is not None:
            self._last_starts = (key, array("i", out))
        return out

    def dumps(self) -> str:
        raise TypeError("a server's counter is not kept on disk: the server is asked")

    # -- the requests -------------------------------------------------------------------

    def _pieces(self, text: str) -> list[str]:
        if len(text) <= PIECE_CHARS or (not self.segmentable and len(text) <= WHOLE_MAX_CHARS):
            return [text] if text else []
        pieces = _segments(text, PIECE_CHARS)
        if len(pieces) == 1:            # no place to cut: cut anywhere (an over-count of a token or so a cut)
            pieces = [text[i:i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)]
        return pieces

    def _tokenize(self, text: str, pieces: bool) -> list:
        status, data = self._post("/tokenize", _body(self.dialect, self.model, text, pieces))
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if status != 200 or not isinstance(tokens, list):
            raise ServerError(f"the model server's /tokenize answered HTTP {status} to a count "
                              f"({_words(data)})", http_status=status)
        return tokens


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _body(dialect: str, model: str, text: str, pieces: bool) -> dict:
    if dialect == "llama":
        body = {"content": text, "add_special": False}
        if pieces:
            body["with_pieces"] = True
        return body
    return {"model": model, "prompt": text, "add_special_tokens": False}


def _words(data) -> str:
    if isinstance(data, dict):
        error = data.get("error") or data.get("message") or data.get("detail")
        if isinstance(error, dict):
            error = error.get("message")
        if error:
            return str(error)[:200]
    return "no tokens in the answer"


def _starts_from_pieces(tokens: list, text: str, base: int, out: array) -> None:
    """Character offsets from llama-server's pieces: each piece's text (or bytes) decoded in
    order; a prefix space the vocabulary adds (SentencePiece) is allowed for by clamping."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    at, last, end = 0, base - 1, base + max(0, len(text) - 1)
    for token in tokens:
        piece = token.get("piece", "") if isinstance(token, dict) else ""
        start = min(end, max(last, base + at))
        out.append(start)
        last = start
        data = piece.encode("utf-8", "surrogatepass") if isinstance(piece, str) else bytes(piece)
        at += len(decoder.decode(data))


def detect(post: Post, model: str, server: str) -> RemoteCounter:
    """The counter for ``model`` on a server's ``/tokenize``, in whichever dialect it speaks (asked
    once: the counter is kept by ``counting.TokenCounters``); ``Unbuildable`` with the reason when
    it has none, so the estimate stays."""
    answers = []
    for dialect in ("llama", "vllm"):
        status, data = post("/tokenize", _body(dialect, model, PROBE, pieces=False))
        answers.append(status)
        if status not in MISSING and (status >= 500 or status == 429):
            # busy or loading (llama-server answers 503 while its model loads): asked again later, not
            # taken as "no counter" for the life of the process
            raise ServerError(f"{server}'s /tokenize answered HTTP {status} ({_words(data)})", http_status=status)
        if status in MISSING:
            raise Unbuildable(f"{server} has no /tokenize (HTTP {status}): token counts are estimated")
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if status == 200 and isinstance(tokens, list) and tokens:
            # (no address in it: the name is part of a plan's fingerprint, and a server may move)
            name = f"the server's own tokenizer ({'llama.cpp' if dialect == 'llama' else 'vLLM'} /tokenize, {model})"
            counter = RemoteCounter(post, model, dialect, name, segmentable=False)
            counter.segmentable = _adds_up(counter)
            return counter
    raise Unbuildable(f"{server}'s /tokenize answered neither llama.cpp's nor vLLM's way "
                      f"(HTTP {', '.join(map(str, answers))}): token counts are estimated")


def _adds_up(counter: RemoteCounter) -> bool:
    """Whether a text's pieces cut by ``tokens._segments`` give the whole text's very tokens."""
    whole = counter.ids(PROBE)
    cut = PROBE.index("\nA") + 1, PROBE.index("\nthe") + 1
    parts = [PROBE[:cut[0]], PROBE[cut[0]:cut[1]], PROBE[cut[1]:]]
    return whole == [i for part in parts for i in counter.ids(part)]
