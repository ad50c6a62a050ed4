"""Opt-in LLM help for the chunker (seed 004): the model may choose chunk boundaries and write
a short situating context for the chunks that need one.

Seed 004's review, followed to the letter:

* **Off by default at every level.**  ``Help()`` is off; ``ChunkingConfig.llm_boundaries`` and
  ``llm_context`` are false; ``helped_chunks`` returns ``chunk_document(doc)`` without calling
  the model unless a flag is on *and* an ``ask`` is given.
* **Strict validation.**  The reply must be one JSON object and nothing else.  Boundaries are
  piece numbers (a piece is one of the scanner's units: a paragraph, a heading, a list, a
  table, a code block): integers only (not floats, not strings, not true/false), starting at
  0, strictly increasing (so sorted and unique), in range, and no chunk may hold only
  whitespace.  Contexts name a chunk that exists, once, with a string.  Anything else is
  rejected as a whole and the default chunker's chunks are used, with one log line that says
  why; a model that is away, refuses or is too small for the request falls back the same way.
* **Context blocks are capped and counted.**  A context is at most a quarter of the chunk size
  (``size_tokens // 4``), cut at a word boundary when longer, and it is part of the chunk's
  text (``context + "\\n\\n" + body``) and of its ``tokens``; the body gets the rest.
* **Oversized groups are re-packed**, never cut blindly: a group the model made larger than
  the room is chunked again by the default packer (paragraphs, then sentences, clauses,
  words; inside a word only when one word is larger than a chunk).

Chunk offsets keep the chunker's invariants: ``[body_start, end)`` of consecutive chunks tile
the text, and ``text`` is ``prefix + doc.text[start:end]``, the prefix being the context block.
A helped chunking has its own fingerprint (``help_fingerprint``), so an index keyed by it never
mixes helped and default chunks.

The call itself goes through ``app.work.calls.ModelCalls`` (``model_ask``): it is checked
against the window, attached to its activity (Stop cancels it) and asks for a JSON-schema
``format``.  Nothing here runs at import time.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import logging
import math
from dataclasses import dataclass
from typing import Callable

from ..errors import HarveyError
from ..modelserver import Cancelled
from .chunks import chunk_document
from .document import Chunk, ChunkingError, Document, _utf8_len
from .units import _H, _NONSPACE, _quoted_regions, _units

log = logging.getLogger(__name__)

HELP_VERSION = 1            # bump when the same reply would give other chunks
CONTEXT_SHARE = 4           # a context block is at most size_tokens // 4
SEPARATOR = "\n\n"          # between a context block and the chunk's own text
PIECE_CHARS = 600           # each piece is shown to the model up to this many characters
REPLY_TOKENS_PER_PIECE = 4  # a boundary list costs about this per piece listed
CONTEXT_REPLY_TOKENS = 80   # and each context about this much
MIN_REPLY_TOKENS = 64

# What a model reply is, for Ollama's ``format`` (a server that cannot constrain still gets it
# checked by ``validate``).
SCHEMA = {
    "type": "object",
    "properties": {
        "boundaries": {"type": "array", "items": {"type": "integer"}},
        "contexts": {"type": "array", "items": {
            "type": "object",
            "properties": {"chunk": {"type": "integer"}, "context": {"type": "string"}},
            "required": ["chunk", "context"]}},
    },
}

# (messages, JSON schema, num_predict) -> the reply's text
Ask = Callable[[list[dict], dict, int], str]


class HelpRejected(ChunkingError):
    """The model's reply cannot be used; the message says why (it goes into the log line)."""


@dataclass(frozen=True)
class Help:
    """Which help is on.  Both off is the default: then no model call is ever made."""

    boundaries: bool = False
    context: bool = False

    @property
    def on(self) -> bool:
        return self.boundaries or self.context

    @classmethod
    def from_config(cls, chunking_config) -> "Help":
        """The two keys of ``chunking:`` in harvey.yaml (``llm_boundaries``, ``llm_context``)."""
        return cls(boundaries=bool(chunking_config.llm_boundaries), context=bool(chunking_config.llm_context))


@dataclass(frozen=True)
class Plan:
    """A validated reply: where chunks start (piece numbers) and the context of some chunks."""

    boundaries: tuple[int, ...]
    contexts: dict[int, str]


# ---------------------------------------------------------------- the public call

def helped_chunks(doc: Document, help: Help, ask: Ask | None = None, model: str = "",
                  prompt_bytes: int | None = None) -> list[Chunk]:
    """The chunks of ``doc``: the model's when ``help`` is on and its reply is valid, else the
    default chunker's (a log line names why).  With help off, no model call is made.
    ``prompt_bytes``: the most a request may show of the pieces (the model's window); a file
    with more is asked about in consecutive batches of pieces, each its own request."""
    return helped(doc, help, ask, model, prompt_bytes)[0]


def helped(doc: Document, help: Help, ask: Ask | None = None, model: str = "",
           prompt_bytes: int | None = None) -> tuple[list[Chunk], bool]:
    """``helped_chunks`` and whether the chunks are the model's (False: the default chunker's,
    which must not be kept under the helped chunking's name)."""
    default = chunk_document(doc)
    if not help.on or ask is None or not default:
        return default, False
    try:
        return _helped(doc, help, ask, default, model, prompt_bytes), True
    except Cancelled:
        raise                                     # a Stop is not a fallback
    except HarveyError as exc:
        log.warning("LLM chunk help for %s fell back to the default chunker (%d chunks): %s",
                    doc.path or "text", len(default), exc)
        return default, False


def model_ask(calls, activity, model: str, window: int, bytes_per_token: float) -> Ask:
    """An ``Ask`` that makes the call through ``ModelCalls`` (window check, Stop, calibration),
    asking for ``SCHEMA`` as Ollama's ``format``."""
    from ..work.calls import Request

    def ask(messages: list[dict], schema: dict, num_predict: int) -> str:
        request = Request(model, messages, window=window, num_predict=num_predict,
                          bytes_per_token=bytes_per_token, format=schema)
        return calls.text(activity, request)[0]

    return ask


def help_fingerprint(doc: Document, help: Help, model: str) -> str:
    """The chunker fingerprint of a helped chunking: the settings', the help's and the model's."""
    blob = f"{doc.settings.fingerprint}|llmhelp{HELP_VERSION}|{help.boundaries}|{help.context}|{model}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- one helped chunking

def _helped(doc: Document, help: Help, ask: Ask, default: list[Chunk], model: str,
            prompt_bytes: int | None = None) -> list[Chunk]:
    """Ask (once per batch of pieces that fits ``prompt_bytes``), validate, build.  Boundaries
    off: the default chunks are the pieces.  Each batch's reply is validated on its own; a chunk
    always starts at a batch's first piece."""
    t = doc.text
    if help.boundaries:
        pieces = [(u[0], u[1]) for u in _units(t, doc.kind, _regions(doc))]
    else:
        pieces = [(c.body_start, c.end) for c in default]
    bounds: list[int] = []
    found: dict[int, str] = {}
    for lo, hi in batches(t, pieces, prompt_bytes):
        part = pieces[lo:hi]
        reply = ask(prompt(t, part, help), SCHEMA, reply_tokens(len(part), help))
        sub = validate(reply, len(part), help, groups_of=lambda b, part=part: _groups(t, part, b))
        base = len(bounds)                       # chunks (or pieces) before this batch
        found.update({base + i: c for i, c in sub.contexts.items()})
        bounds.extend(lo + b for b in sub.boundaries)
    plan = Plan(tuple(bounds), found)
    cap = max(0, doc.settings.max_bytes // CONTEXT_SHARE - len(SEPARATOR))
    contexts = {i: capped(c, cap) for i, c in plan.contexts.items()}
    contexts = {i: c for i, c in contexts.items() if c}
    if help.boundaries:
        groups = _groups(t, pieces, plan.boundaries)
        built = [part for i, (s, e, _text) in enumerate(groups) for part in _build(doc, s, e, contexts.get(i, ""))]
    else:
        built = [part for i, c in enumerate(default) for part in _with_context(doc, c, contexts.get(i, ""))]
    return _numbered(doc, built, help, model)


def batches(text: str, pieces: list[tuple[int, int]], prompt_bytes: int | None) -> list[tuple[int, int]]:
    """Consecutive ranges of piece numbers whose listing (as ``prompt`` shows them) fits in
    ``prompt_bytes`` (None: one batch); a piece is never split, so a batch holds one at least."""
    if prompt_bytes is None:
        return [(0, len(pieces))]
    out, lo, used = [], 0, 0
    for i, (s, e) in enumerate(pieces):
        size = len(_shown(text[s:e]).encode()) + 12        # "[i] " and the blank line
        if i > lo and used + size > prompt_bytes:
            out.append((lo, i))
            lo, used = i, 0
        used += size
    out.append((lo, len(pieces)))
    return out


def _regions(doc: Document) -> list[tuple[int, int]]:
    return _quoted_regions(doc.text) if doc.kind == "source" else []


def prompt(text: str, pieces: list[tuple[int, int]], help: Help) -> list[dict]:
    """The request: the numbered pieces (each shown up to ``PIECE_CHARS``) and what to return."""
    asks = []
    if help.boundaries:
        asks.append('"boundaries": the numbers of the pieces where a chunk starts, in increasing order, '
                    "starting with 0. Start a chunk where the topic changes; keep a name with the fact "
                    "about it and a heading with the text under it.")
    if help.context:
        what = "a chunk" if help.boundaries else "a piece"
        asks.append(f'"contexts": for {what} that cannot be understood on its own (it says "it", "the '
                    'plan", "this method" without saying which), {"chunk": its number, "context": one '
                    "short sentence that situates it in the document}. Leave out the ones that need none.")
    listing = "\n\n".join(f"[{i}] {_shown(text[s:e])}" for i, (s, e) in enumerate(pieces))
    system = ("You divide a document into chunks for search. Reply with one JSON object and nothing "
              "else, with these keys:\n- " + "\n- ".join(asks))
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"The document, in {len(pieces)} numbered pieces:\n\n{listing}"}]


def _shown(piece: str) -> str:
    """A piece as the model sees it: stripped, at most PIECE_CHARS (cut at a word, marked)."""
    piece = piece.strip()
    if len(piece) <= PIECE_CHARS:
        return piece
    cut = piece.rfind(" ", 0, PIECE_CHARS)
    return piece[:cut if cut > 0 else PIECE_CHARS] + " [...]"


def reply_tokens(pieces: int, help: Help) -> int:
    """What the reply may generate: enough for a boundary per piece and a context per chunk."""
    n = REPLY_TOKENS_PER_PIECE * pieces if help.boundaries else 0
    if help.context:
        n += CONTEXT_REPLY_TOKENS * (max(1, pieces // 3) if help.boundaries else pieces)
    return max(MIN_REPLY_TOKENS, n)


# ---------------------------------------------------------------- validation

def validate(reply: str, pieces: int, help: Help, groups_of: Callable | None = None) -> Plan:
    """The reply as a Plan, or HelpRejected naming the first thing wrong with it.

    ``groups_of(boundaries)`` gives the text spans of the chunks, to refuse an empty one.
    """
    try:
        data = json.loads(reply)
    except ValueError as exc:
        raise HelpRejected(f"the reply is not one JSON object ({exc.msg} at character {exc.pos}): "
                           f"{reply[:80]!r}") from None
    if not isinstance(data, dict):
        raise HelpRejected(f"the reply is JSON but not an object: {reply[:80]!r}")
    boundaries = _boundaries(data, pieces) if help.boundaries else tuple(range(pieces))
    if help.boundaries and groups_of is not None:
        for i, (s, e, text) in enumerate(groups_of(boundaries)):
            if _NONSPACE.search(text) is None:
                raise HelpRejected(f"chunk {i} (from piece {boundaries[i]}) would hold no text")
    contexts = _contexts(data, len(boundaries)) if help.context else {}
    return Plan(boundaries, contexts)


def _is_int(value) -> bool:
    """An integer, not a bool (JSON true is not 1 here) and not a float (2.0 is not a piece)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _boundaries(data: dict, pieces: int) -> tuple[int, ...]:
    """``data["boundaries"]`` checked: a non-empty list of ints from 0, increasing, in range."""
    if "boundaries" not in data:
        raise HelpRejected("the reply has no \"boundaries\"")
    raw = data["boundaries"]
    if not isinstance(raw, list):
        raise HelpRejected(f"\"boundaries\" is not a list: {raw!r:.80}")
    if not raw:
        raise HelpRejected("\"boundaries\" is empty")
    for value in raw:
        if not _is_int(value):
            raise HelpRejected(f"boundary {value!r:.40} is not a whole number")
        if value < 0:
            raise HelpRejected(f"boundary {value} is negative")
        if value >= pieces:
            raise HelpRejected(f"boundary {value} is out of range (the document has {pieces} pieces)")
    if raw[0] != 0:
        raise HelpRejected(f"the boundaries start at {raw[0]}, not 0")
    for a, b in zip(raw, raw[1:]):
        if a == b:
            raise HelpRejected(f"boundary {a} is repeated")
        if b < a:
            raise HelpRejected(f"the boundaries are not sorted ({b} after {a})")
    return tuple(raw)


def _contexts(data: dict, chunks: int) -> dict[int, str]:
    """``data["contexts"]`` checked (absent is none): each names a chunk that exists, once."""
    raw = data.get("contexts", [])
    if not isinstance(raw, list):
        raise HelpRejected(f"\"contexts\" is not a list: {raw!r:.80}")
    out: dict[int, str] = {}
    for item in raw:
        if not isinstance(item, dict) or set(item) - {"chunk", "context"} or "chunk" not in item:
            raise HelpRejected(f"a context is not {{\"chunk\", \"context\"}}: {item!r:.80}")
        chunk, context = item["chunk"], item.get("context")
        if not _is_int(chunk):
            raise HelpRejected(f"context chunk {chunk!r:.40} is not a whole number")
        if not 0 <= chunk < chunks:
            raise HelpRejected(f"context chunk {chunk} is out of range ({chunks} chunks)")
        if chunk in out:
            raise HelpRejected(f"chunk {chunk} has two contexts")
        if not isinstance(context, str):
            raise HelpRejected(f"the context of chunk {chunk} is not text: {context!r:.40}")
        out[chunk] = " ".join(context.split())
    return out


def capped(context: str, max_bytes: int) -> str:
    """``context`` within ``max_bytes`` of UTF-8, cut at a word boundary (a single word too long
    for the cap is dropped: a context is never cut mid-word)."""
    if _utf8_len(context) <= max_bytes:
        return context
    head = context.encode()[:max_bytes + 1].decode("utf-8", "ignore")
    cut = head.rfind(" ")
    return head[:cut].rstrip() if cut > 0 else ""


# ---------------------------------------------------------------- building chunks

def _groups(text: str, pieces: list[tuple[int, int]], boundaries) -> list[tuple[int, int, str]]:
    """The text span of each chunk the boundaries make (pieces tile the text, so these do too)."""
    ends = list(boundaries[1:]) + [len(pieces)]
    return [(pieces[b][0], pieces[e - 1][1], text[pieces[b][0]:pieces[e - 1][1]])
            for b, e in zip(boundaries, ends)]


def _build(doc: Document, s: int, e: int, context: str) -> list[dict]:
    """Chunk fields for the group ``[s, e)``: one chunk when it fits with its context, else the
    default packer's chunks of that span in the room the context leaves."""
    prefix = context + SEPARATOR if context else ""
    room = doc.settings.max_bytes - _utf8_len(prefix)
    if _utf8_len(doc.text[s:e]) <= room:
        return [dict(start=s, body_start=s, end=e, prefix=prefix, kind="text")]
    return _repacked(doc, s, e, prefix, room)


def _with_context(doc: Document, chunk: Chunk, context: str) -> list[dict]:
    """A default chunk with its context block: as it is (overlap and all) when it fits, else its
    own part re-packed in the room the context leaves."""
    own_prefix = chunk.text[:len(chunk.text) - (chunk.end - chunk.start)]
    if not context:
        return [dict(start=chunk.start, body_start=chunk.body_start, end=chunk.end, prefix=own_prefix,
                     kind=chunk.kind)]
    prefix = context + SEPARATOR
    if _utf8_len(prefix + chunk.text) <= doc.settings.max_bytes:
        return [dict(start=chunk.start, body_start=chunk.body_start, end=chunk.end, prefix=prefix + own_prefix,
                     kind=chunk.kind)]
    return _repacked(doc, chunk.body_start, chunk.end, prefix, doc.settings.max_bytes - _utf8_len(prefix))


def _repacked(doc: Document, s: int, e: int, prefix: str, room: int) -> list[dict]:
    """The default packer over ``doc.text[s:e]`` with chunks of at most ``room`` bytes (no overlap,
    no carried heading: the context is what situates them)."""
    size = max(1, math.floor(room / doc.settings.bytes_per_token))
    settings = dataclasses.replace(doc.settings, size_tokens=size, min_tokens=None, overlap="none",
                                   carry_heading=False)
    part = dataclasses.replace(doc, text=doc.text[s:e], settings=settings)
    out = []
    for c in chunk_document(part):
        own_prefix = c.text[:len(c.text) - (c.end - c.start)]      # a continued table's header rows
        out.append(dict(start=s + c.start, body_start=s + c.body_start, end=s + c.end,
                        prefix=prefix + own_prefix, kind=c.kind))
    return out


def _numbered(doc: Document, built: list[dict], help: Help, model: str) -> list[Chunk]:
    """Chunk records from the built spans: heading paths, sections, lines, tokens, ids."""
    t, bpt = doc.text, doc.settings.bytes_per_token
    headings = _Headings(doc)
    fp = help_fingerprint(doc, help, model)
    out = []
    for i, b in enumerate(built):
        text = b["prefix"] + t[b["start"]:b["end"]]
        first = t.count("\n", 0, b["body_start"]) + 1
        body = t[b["body_start"]:b["end"]].rstrip()
        out.append(Chunk(index=i, start=b["start"], body_start=b["body_start"], end=b["end"], text=text,
                         heading_path=headings.path_at(b["body_start"]), kind=b["kind"],
                         tokens=math.ceil(_utf8_len(text) / bpt), id=f"{doc.fingerprint}-h{i:04d}",
                         fingerprint=fp, sections=headings.sections(b["body_start"], b["end"]),
                         first_line=first, last_line=first + body.count("\n")))
    return out


class _Headings:
    """The heading path at any offset of a document (from the scanner's heading units)."""

    def __init__(self, doc: Document):
        self.starts: list[int] = []
        self.paths: list[tuple[str, ...]] = []
        stack: list[tuple[int, str]] = []
        if doc.kind == "source":
            return
        for s, _e, typ, info in _units(doc.text, doc.kind):
            if typ == _H:
                level, title = info[0], info[1]
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, title))
                self.starts.append(s)
                self.paths.append(tuple(h[1] for h in stack))

    def path_at(self, pos: int) -> tuple[str, ...]:
        """The path of the section that holds ``pos`` (a heading starting there counts)."""
        i = bisect.bisect_right(self.starts, pos) - 1
        return self.paths[i] if i >= 0 else ()

    def sections(self, s: int, e: int) -> tuple[tuple[str, ...], ...]:
        """The path of every section whose text ``[s, e)`` holds, in order."""
        out = [self.path_at(s)]
        lo, hi = bisect.bisect_right(self.starts, s), bisect.bisect_left(self.starts, e)
        for path in self.paths[lo:hi]:
            if path != out[-1]:
                out.append(path)
        return tuple(out)

